//! Hotness through DAMON on this host: `check` reports DAMON as its sysfs shows it, and
//! `snapshot --hotness` never disturbs a kdamond it did not start. (This machine's own kdamond 0
//! runs, so the kernel refuses new kdamonds here; the hot/cold figures and the cleanup after
//! SIGKILL are proven in the QEMU guest scenario `hotness`.)
use std::{fs, path::Path, process::Command};

use tierscope_tests::{require_root_and_agent, tierscope_bin};

const DAMON: &str = "/sys/kernel/mm/damon/admin/kdamonds";

/// (nr_kdamonds, per kdamond: state and pid) straight from sysfs.
fn damon_now() -> Option<(u64, Vec<(String, String)>)> {
    let n: u64 = fs::read_to_string(format!("{DAMON}/nr_kdamonds")).ok()?.trim().parse().ok()?;
    let each = (0..n)
        .map(|i| {
            let rd = |f: &str| fs::read_to_string(format!("{DAMON}/{i}/{f}")).unwrap_or_default().trim().to_string();
            (rd("state"), rd("pid"))
        })
        .collect();
    Some((n, each))
}

fn run_json(args: &[&str]) -> (serde_json::Value, String) {
    let bin = tierscope_bin().expect("TIERSCOPE_BIN");
    let out = Command::new(&bin).args(args).output().unwrap_or_else(|e| panic!("running {bin} {args:?}: {e}"));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let json =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?} gave no JSON ({e}); stderr: {err}"));
    (json, err)
}

#[test]
#[ignore = "requires root"]
fn check_reports_damon_as_its_sysfs_shows_it() {
    require_root_and_agent!();
    let (report, _) = run_json(&["check", "--json"]);
    let d = &report["damon"];
    let Some((n, each)) = damon_now() else {
        assert_eq!(d["sysfs"], false, "{d}");
        assert!(d["why_not"].as_str().unwrap_or("").contains("CONFIG_DAMON_SYSFS"), "{d}");
        return;
    };
    assert_eq!(d["sysfs"], true, "{d}");
    let kd = d["inventory"]["kdamonds"].as_array().unwrap_or_else(|| panic!("no inventory: {d}"));
    assert_eq!(kd.len() as u64, n);
    for (k, (state, pid)) in kd.iter().zip(&each) {
        assert_eq!(k["running"], state == "on", "{k} vs state {state}");
        assert_eq!(k["pid"].as_u64().map(|p| p.to_string()), (pid != "-1").then(|| pid.clone()), "{k}");
    }
    let busy = each.iter().any(|(s, _)| s == "on");
    let why = d["why_not"].as_str();
    assert_eq!(why.is_some_and(|w| w.contains("busy")), busy, "running kdamonds {each:?}, check says {why:?}");
}

#[test]
#[ignore = "requires root"]
fn hotness_leaves_a_kdamond_it_did_not_start_alone() {
    require_root_and_agent!();
    let before = damon_now();
    let (snap, err) = run_json(&["snapshot", "--json", "--duration", "1", "--hotness", "--pid", "1"]);
    let after = damon_now();
    assert_eq!(before, after, "DAMON's sysfs changed under `snapshot --hotness`");
    let h = &snap["hotness"];
    match &before {
        Some((_, each)) if each.iter().any(|(s, _)| s == "on") => {
            let (idx, (_, pid)) = each.iter().enumerate().find(|(_, (s, _))| s == "on").unwrap();
            assert_eq!(h["state"], "unavailable", "{h}");
            let why = h["why"].as_str().unwrap_or("");
            assert!(why.contains(&format!("kdamond {idx} (pid {pid}")), "the reason names the other kdamond: {why}");
            assert!(err.contains("hotness unavailable"), "stderr says so: {err}");
        }
        None => assert_eq!(h["state"], "unavailable", "no DAMON sysfs: {h}"),
        // DAMON free: tierscope ran its own kdamonds and put everything back (checked above).
        Some(_) => assert_eq!(h["state"], "on", "{h}"),
    }
    assert!(!Path::new("/run/tierscope/damon.json").exists(), "a record of kdamonds left behind");
}
