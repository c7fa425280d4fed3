//! The Grafana dashboards: valid JSON with host and job variables, every panel on the
//! `${datasource}` variable; and on this machine as it is (no workload started, nothing
//! compacted: a quiet node), the agent's first scrape has every metric a dashboard queries with
//! the labels it groups by, and a real Prometheus scraping the agent answers every dashboard
//! expression with at least one series (0 where nothing happened), so no panel reads "No data".
//! The static checks always run; the scrape needs root, TIERSCOPE_BIN and the `prometheus` package.
mod export_support;

use std::{
    collections::{BTreeMap, BTreeSet},
    path::PathBuf,
    time::Duration,
};

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

    let Some(bin) = agent_bin("dashboards::first_scrape") else { return summary(1, 2) };
    let listen = format!("127.0.0.1:{}", free_port());
    // The agent's defaults: on a quiet node nothing is tracked.
    let agent = Agent::start(&bin, &["--prometheus", &listen], &[]);
    let hardware = has_health_hardware();
    for (name, why) in HARDWARE_ONLY {
        assert!(
            queried.contains(*name),
            "{name} is allow-listed but no dashboard queries it: drop it from HARDWARE_ONLY"
        );
        if !hardware {
            println!("dashboards: {name} not required on this machine ({why})");
        }
    }
    for (name, why) in PROCESS_ONLY {
        assert!(
            queried.contains(*name),
            "{name} is allow-listed but no dashboard queries it: drop it from PROCESS_ONLY"
        );
        println!("dashboards: {name} not required without a tracked process ({why})");
    }
    // The first reading is published before the "running" line: one scrape, no waiting.
    let (status, body) = http_get(&listen, "/metrics").expect("the first scrape");
    assert_eq!(status, 200, "{body}");
    let exported = scraped(&body);
    let missing: BTreeSet<&String> = queried
        .iter()
        .filter(|m| !exported.contains_key(*m))
        .filter(|m| hardware || !HARDWARE_ONLY.iter().any(|(n, _)| n == m))
        .filter(|m| !PROCESS_ONLY.iter().any(|(n, _)| n == m))
        .collect();
    let names = || body.lines().filter(|l| l.starts_with("# TYPE")).collect::<Vec<_>>().join("\n");
    assert!(
        missing.is_empty(),
        "dashboards query metrics the first scrape does not have: {missing:?}\nagent stderr:\n{}\nscrape names:\n{}",
        agent.stderr.lock().expect("the agent's stderr"),
        names()
    );
    // The labels a query groups by are on the series it reads (a tracked process's own labels
    // only with one).
    let mut unlabelled = Vec::new();
    for (path, d) in dashboards() {
        for e in expressions(&d) {
            let carried: BTreeSet<&String> =
                metric_names(&e).iter().filter_map(|m| exported.get(m)).flatten().collect();
            if carried.is_empty() {
                continue; // hardware or process only: allowed above
            }
            for l in grouping_labels(&e) {
                if !carried.contains(&l) && !PROCESS_LABELS.contains(&l.as_str()) && l != "instance" {
                    unlabelled.push(format!("{}: no series of {e} has {l}", path.display()));
                }
            }
        }
    }
    assert!(unlabelled.is_empty(), "{unlabelled:#?}\nscrape:\n{body}");
    println!("dashboards: the first scrape has every queried metric ({} in all)", exported.len());
    passed("dashboards::first_scrape");

    // A real Prometheus scraping the agent: every dashboard expression has a series.
    let prom = start_prometheus(&[&listen]);
    let log = || std::fs::read_to_string(prom.dir.join("prometheus.log")).unwrap_or_default();
    let scrapes = wait_for(Duration::from_secs(60), || {
        query(&prom.addr, "count_over_time(up{job=\"tierscope\"}[30s])").filter(|n| *n >= 5.0)
    });
    assert!(scrapes.is_some(), "Prometheus did not scrape the agent 5 times in a minute; its log:\n{}", log());
    let cxl_node = body
        .lines()
        .any(|l| l.starts_with("tierscope_node_memory_capacity_bytes{") && l.contains("tierscope_memory_tier=\"cxl\""));
    let mut empty = Vec::new();
    let mut evaluated = 0;
    for (path, d) in dashboards() {
        for e in expressions(&d) {
            let q = promql(&e);
            let names = metric_names(&e);
            let needs_hardware = names.iter().any(|n| HARDWARE_ONLY.iter().any(|(h, _)| h == n));
            let needs_cxl_node = e.contains("tierscope_memory_tier=\"cxl\"") && !e.contains("tierscope_process_");
            match series(&prom.addr, &q) {
                Ok(n) if n > 0 => evaluated += 1,
                Ok(_) if (needs_hardware && !hardware) || (needs_cxl_node && !cxl_node) => {
                    println!("dashboards: {q}: no series, none expected on this machine");
                }
                Ok(_) => empty.push(format!("{}: {q}", path.display())),
                Err(why) => empty.push(format!("{}: {q}: {why}", path.display())),
            }
        }
    }
    assert!(
        empty.is_empty(),
        "dashboard queries Prometheus answers with no series (a panel reading No data):\n{}",
        empty.join("\n")
    );
    println!("dashboards: {evaluated} expressions answered by Prometheus");
    drop(prom);
    assert_eq!(agent.stop(), Some(0));
    passed("dashboards::prometheus_answers_every_query");
    summary(3, 0);
}

/// Metric names that exist only with a tracked process: a numa_maps scan of one. Their panels
/// fall back to `or on() vector(0)`, which the Prometheus part checks.
const PROCESS_ONLY: &[(&str, &str)] =
    &[("tierscope_process_memory_resident_bytes", "from a tracked process's numa_maps scan")];

/// Labels only a tracked process's series carry (`other`, the untracked processes' sum, has none).
const PROCESS_LABELS: &[&str] = &["process_pid", "tierscope_job", "tierscope_rank"];

/// A scrape body: metric name -> the label names of its series.
fn scraped(body: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in body.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let Some((series, _)) = line.rsplit_once(' ') else { continue };
        let (name, labels) = series.split_once('{').unwrap_or((series, ""));
        let labels = labels.trim_end_matches('}').split("\",").filter_map(|kv| Some(kv.split_once('=')?.0.to_string()));
        out.entry(name.to_string()).or_default().extend(labels);
    }
    out
}

/// The labels an expression groups by (`by (...)`, `without (...)`).
fn grouping_labels(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for kw in ["by (", "without (", "by(", "without("] {
        for part in expr.split(kw).skip(1) {
            out.extend(part.split(')').next().unwrap_or("").split(',').map(|l| l.trim().to_string()));
        }
    }
    out.retain(|l| !l.is_empty());
    out
}

/// A dashboard expression as Prometheus takes it: every host, job and rank (the variables'
/// "All"), a rate window of 30 s; Grafana's `label_values(SELECTOR, LABEL)` is its selector.
fn promql(expr: &str) -> String {
    let e = expr.replace("$host", ".*").replace("$job", ".*").replace("$rank", ".*").replace("$__rate_interval", "30s");
    match e.strip_prefix("label_values(").and_then(|r| r.strip_suffix(')')) {
        Some(args) => args.rsplit_once(',').map_or(args, |(sel, _)| sel).trim().to_string(),
        None => e,
    }
}

/// How many series an instant query answers with, or what Prometheus said was wrong with it.
fn series(prom: &str, q: &str) -> Result<usize, String> {
    let (status, body) = http_get(prom, &format!("/api/v1/query?query={}", urlencode(q))).map_err(|e| e.to_string())?;
    let v: serde_json::Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
    if status != 200 || v["status"] != "success" {
        return Err(format!("HTTP {status}: {}", v["error"]));
    }
    Ok(v["data"]["result"].as_array().map_or(0, Vec::len))
}
