//! The Grafana dashboards: valid JSON with host and job variables, every panel on the
//! `${datasource}` variable, and every metric a dashboard queries present in a real scrape of
//! the agent (a workload runs and memory is compacted meanwhile so migration series exist).
//! The static checks always run; the scrape needs root and TIERSCOPE_BIN.
mod export_support;

use std::{collections::BTreeSet, path::PathBuf, time::Duration};

use export_support::*;

fn dashboards() -> Vec<(PathBuf, serde_json::Value)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dashboards");
    let mut out: Vec<(PathBuf, serde_json::Value)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: not JSON: {e}", p.display()));
            (p, v)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(out.len() >= 3, "expected node overview, training job and device health dashboards in {}", dir.display());
    out
}

/// Every PromQL expression: panel targets and variable queries.
fn expressions(d: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, x) in m {
                    match (k.as_str(), x) {
                        ("expr", serde_json::Value::String(s)) => out.push(s.clone()),
                        ("query", serde_json::Value::String(s)) if s.contains('(') => out.push(s.clone()),
                        _ => walk(x, out),
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    walk(d, &mut out);
    out
}

/// Metric names in a PromQL expression: identifiers followed by `{`, `[`, `)` `,` or space that
/// are not functions, keywords or label names. Only `tierscope_` and `hw_` names are ours to check.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    let mut in_braces = 0;
    let mut in_string = false;
    while i < bytes.len() {
        let c = bytes[i] as char;
        if in_string {
            if c == '"' {
                in_string = false;
            }
            i += 1;
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' => in_braces += 1,
            '}' => in_braces -= 1,
            _ if (c.is_ascii_alphabetic() || c == '_') && in_braces == 0 => {
                let start = i;
                while i < bytes.len()
                    && ((bytes[i] as char).is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] == b':')
                {
                    i += 1;
                }
                let word = &expr[start..i];
                if word.starts_with("tierscope_") || word.starts_with("hw_") {
                    names.insert(word.to_string());
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    names.retain(|n| !label_names(expr).contains(n));
    names
}

/// Names used as labels: in `by (...)` / `without (...)` lists and as label_values' second argument.
fn label_names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for kw in ["by (", "without (", "by(", "without("] {
        for part in expr.split(kw).skip(1) {
            let list = part.split(')').next().unwrap_or("");
            out.extend(list.split(',').map(|l| l.trim().to_string()));
        }
    }
    for part in expr.split("label_values(").skip(1) {
        let args = part.rsplit_once(')').map_or(part, |(a, _)| a);
        if let Some((_, label)) = args.rsplit_once(',') {
            out.insert(label.trim().to_string());
        }
    }
    out
}

fn static_checks() -> BTreeSet<String> {
    let mut all = BTreeSet::new();
    for (path, d) in dashboards() {
        let p = path.display();
        assert!(d["uid"].as_str().is_some_and(|u| !u.is_empty()), "{p}: no uid");
        let vars: Vec<&str> =
            d["templating"]["list"].as_array().unwrap().iter().filter_map(|v| v["name"].as_str()).collect();
        for want in ["datasource", "host"] {
            assert!(vars.contains(&want), "{p}: no ${want} variable ({vars:?})");
        }
        let panels = d["panels"].as_array().unwrap();
        let mut targets = 0;
        for panel in panels.iter().filter(|x| x["type"] != "row") {
            assert_eq!(
                panel["datasource"]["uid"], "${datasource}",
                "{p}: panel {} not on ${{datasource}}",
                panel["title"]
            );
            for t in panel["targets"].as_array().unwrap() {
                targets += 1;
                let e = t["expr"].as_str().unwrap();
                assert!(e.contains("$host"), "{p}: {e} ignores $host");
            }
            assert!(panel["fieldConfig"]["defaults"]["unit"].is_string(), "{p}: panel {} has no unit", panel["title"]);
        }
        assert!(targets >= 5, "{p}: only {targets} queries");
        for e in expressions(&d) {
            let names = metric_names(&e);
            assert!(!names.is_empty() || !e.contains("tierscope_"), "{p}: no metric found in {e}");
            all.extend(names);
        }
    }
    // The job view filters on the job.
    let job = dashboards().into_iter().find(|(p, _)| p.ends_with("training-job.json")).expect("training-job.json");
    let ignoring: Vec<String> = expressions(&job.1)
        .into_iter()
        .filter(|e| e.contains("tierscope_process_") && !e.starts_with("label_values(") && !e.contains("$job"))
        .collect();
    assert!(ignoring.is_empty(), "job panels ignore $job: {ignoring:?}");
    all
}

/// Series that exist only with memory-health hardware: a CXL Type 3 memory device (the
/// `cxl_mem` driver bound) or an EDAC memory controller driver. On a machine without either
/// they are absent from the scrape, so the dashboards may query them without the scrape showing
/// them; their Prometheus names are pinned by the agent's unit test
/// `export::meter::tests::hardware_only_series_have_these_prometheus_names`. Everything else a
/// dashboard queries must be in the scrape.
const HARDWARE_ONLY: &[(&str, &str)] = &[
    ("hw_status_ratio", "one series per CXL memory device (hw.status)"),
    ("hw_errors_total", "per CXL memory device (error events) or per EDAC controller/DIMM (ce/ue counts)"),
    ("tierscope_cxl_device_temperature_celsius", "reported by a CXL device (Get Health Info or memory module event)"),
    ("tierscope_cxl_device_life_used_percent", "reported by a CXL device (Get Health Info or memory module event)"),
    ("tierscope_cxl_device_corrected_errors", "reported by a CXL device (Get Health Info or memory module event)"),
    ("tierscope_cxl_device_health_info_ratio", "one series per CXL memory device once it was asked"),
];

/// Whether this machine has the hardware behind [`HARDWARE_ONLY`].
fn has_health_hardware() -> bool {
    let any = |dir: &str, prefix: &str| {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(prefix))
    };
    any("/sys/bus/cxl/devices", "mem") || any("/sys/devices/system/edac/mc", "mc")
}

fn main() {
    if child_mode() {
        return;
    }
    // The name extraction itself.
    assert_eq!(
        metric_names(
            r#"sum by (tierscope_memory_tier) (rate(tierscope_node_page_allocations_total{instance=~"$host", tierscope_memory_tier="cxl"}[5m]))"#
        ),
        BTreeSet::from(["tierscope_node_page_allocations_total".to_string()])
    );
    assert_eq!(
        metric_names("label_values(tierscope_process_faults_total, tierscope_job)"),
        BTreeSet::from(["tierscope_process_faults_total".to_string()])
    );
    let queried = static_checks();
    println!("dashboards: {} metrics queried", queried.len());
    passed("dashboards::static_checks");

    let Some(bin) = agent_bin("dashboards::scrape") else { return summary(1, 1) };
    let listen = format!("127.0.0.1:{}", free_port());
    let marker = format!("tierscope-dash-test-{}", std::process::id());
    let agent = Agent::start(&bin, &["--prometheus", &listen, "--match", &marker], &[]);
    let _work = Workload::start(2048, &marker);
    // Without the hardware, the hardware-only series may be missing; with it, nothing may.
    let hardware = has_health_hardware();
    let mut missing: BTreeSet<String> =
        queried.iter().filter(|m| hardware || !HARDWARE_ONLY.iter().any(|(n, _)| n == m)).cloned().collect();
    for (name, why) in HARDWARE_ONLY {
        assert!(
            queried.contains(*name),
            "{name} is allow-listed but no dashboard queries it: drop it from HARDWARE_ONLY"
        );
        if !hardware {
            println!("dashboards: {name} not required in the scrape on this machine ({why})");
        }
    }
    let mut last = String::new();
    // Compaction migrates movable pages (reason "compaction"): it makes the migration series real.
    // Every series is there within seconds on a quiet machine; a loaded one gets a minute.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    for round in 0.. {
        if std::time::Instant::now() > deadline {
            break;
        }
        if round % 5 == 0 {
            let _ = std::fs::write("/proc/sys/vm/compact_memory", "1");
        }
        std::thread::sleep(Duration::from_millis(500));
        let Ok((200, body)) = http_get(&listen, "/metrics") else { continue };
        let exported: BTreeSet<String> = body
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split(['{', ' ']).next())
            .map(str::to_string)
            .collect();
        missing.retain(|m| !exported.contains(m));
        last = body;
        if missing.is_empty() {
            break;
        }
    }
    assert!(
        missing.is_empty(),
        "dashboards query metrics the agent did not export: {missing:?}\nagent stderr:\n{}\nlast scrape names:\n{}",
        agent.stderr.lock().unwrap(),
        last.lines().filter(|l| l.starts_with("# TYPE")).collect::<Vec<_>>().join("\n")
    );
    assert_eq!(agent.stop(), Some(0));
    println!("dashboards: every queried metric is exported");
    passed("dashboards::scrape");
    summary(2, 0);
}
