//! The `recorded-demo` scenario's judge (issue 26): the session recorded in the CXL guest for machines
//! without a slow tier must show what tierscope is for: a CXL node, promotions and demotions, a
//! CXL allocation site with a Python frame, and an open insight. `Report::agent` is the
//! session's `report --format json`, run on the host ([`report_on_host`]). With
//! `--update-fixtures` the session is shipped.
use anyhow::{Context as _, Result};
use serde_json::Value;

use super::scenarios::{Figure, Report};

/// Where the shipped session lives (`cargo xtask run` replays it on one-node machines).
pub const SHIPPED: &str = crate::TIERED_SESSION;

fn figure(name: &str, ok: bool, rule: String) -> Figure {
    Figure { name: name.into(), kernel: None, agent: None, ok, rule }
}

pub fn judge(r: &Report) -> Vec<Figure> {
    let null = Value::Null;
    let report = r.agent.as_ref().unwrap_or(&null);
    let mut out = vec![];
    out.push(Figure::at_least("kernel: pages promoted", Some(1.0), r.truth("promoted"), 1.0));
    out.push(Figure::at_least("kernel: pages demoted", Some(1.0), r.truth("demoted"), 1.0));
    let promoted = report["promoted_pages"].as_f64();
    let demoted = report["demoted_pages"].as_f64();
    out.push(figure(
        "report: promotions",
        promoted.is_some_and(|p| p >= 256.0),
        format!("{promoted:?} pages (>= 256)"),
    ));
    out.push(figure("report: demotions", demoted.is_some_and(|p| p >= 256.0), format!("{demoted:?} pages (>= 256)")));
    let sites = report["sites"].as_array().map(Vec::as_slice).unwrap_or_default();
    let python_site = sites.iter().find(|s| {
        s["frames"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f.as_str().is_some_and(|f| f.contains("init_optimizer_state"))))
    });
    out.push(figure(
        "report: a CXL site of the trainer names its Python function",
        python_site.is_some(),
        format!("{} sites; the trainer's: {:?}", sites.len(), python_site.map(|s| &s["frames"])),
    ));
    let insights = report["insights"].as_array().map(Vec::as_slice).unwrap_or_default();
    let ids: Vec<&str> = insights.iter().filter_map(|i| i["id"].as_str()).collect();
    out.push(figure(
        "report: slow_tier_with_fast_room opened",
        ids.contains(&"slow_tier_with_fast_room"),
        format!("insights {ids:?}"),
    ));
    out
}

/// Runs `tierscope report --format json` on the session the guest recorded, here on the host,
/// into the run's `out/agent.json` (what the judge reads). Not in the guest: after the scenario's
/// pressure phase the guest's pages, the agent's own among them, may sit on the emulated CXL
/// device, where TCG reads a few MB a second; a report of 0.2 s here took over 3 minutes there
/// and ran the scenario past its time. The report reads only the file.
pub fn report_on_host(agent: &std::path::Path, run_dir: &std::path::Path) -> Result<()> {
    let session = run_dir.join("out/demo.tscope");
    anyhow::ensure!(session.exists(), "the guest wrote no session ({})", session.display());
    let out = run_dir.join("out/agent.json");
    let status = std::process::Command::new(agent)
        .arg("report")
        .arg(&session)
        .args(["--format", "json", "-o"])
        .arg(&out)
        .status()
        .with_context(|| format!("running {} report", agent.display()))?;
    anyhow::ensure!(status.success(), "tierscope report {} failed ({status})", session.display());
    Ok(())
}

/// Copies the session the guest recorded to [`SHIPPED`] (with `--update-fixtures`, once the
/// judge passed).
pub fn ship(recorded: &std::path::Path) -> Result<()> {
    let to = crate::cmd::workspace_root().join(SHIPPED);
    std::fs::create_dir_all(to.parent().context("the shipped session's folder")?)?;
    std::fs::copy(recorded, &to).with_context(|| format!("copying {} to {}", recorded.display(), to.display()))?;
    println!("vm: the recorded session written to {SHIPPED}");
    Ok(())
}
