//! Many nodes, one view: two agents stand for two hosts (their own `host.name`, their own
//! port, job granularity as the Kubernetes base configures it) and one Debian Prometheus scrapes
//! both. Two ranks of one training job (same elastic run id) run meanwhile; every query of the
//! training-job dashboard, with `$host` set to each agent in turn, returns the job, its variable
//! queries list the job and both ranks, and with `$host` on both it sums them.
//!
//! The two agents watch the same kernel, so each sees both ranks: what the test proves is that
//! series from two agents land side by side in one Prometheus (told apart by `instance` and
//! `host.name`) and that the dashboards' queries select and sum them as they would on two hosts.
//! Node 0 is declared CXL (`[tiers] cxl = [0]`, this machine has one node) so the CXL panels
//! have series. Needs root, TIERSCOPE_BIN and Debian's prometheus.
mod export_support;

use std::{
    collections::BTreeMap,
    io::{BufRead as _, BufReader, Read as _, Write as _},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use export_support::*;

const PAGES: usize = 2048;

/// Child mode: a rank that touches its pages, says so, and waits for stdin to close. It causes
/// no migration: on a quiet node the migration panels must still show 0 ("none yet"), not
/// Grafana's "No data" (the per-process migration series and the migration duration exist only
/// once something migrated).
fn rank_child() -> bool {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) != Some("rank") {
        return false;
    }
    let mut buf = vec![0u8; PAGES * PAGE];
    for i in 0..PAGES {
        unsafe { std::ptr::write_volatile(buf.as_mut_ptr().add(i * PAGE), 1) };
    }
    println!("ready");
    std::io::stdout().flush().ok();
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    std::hint::black_box(&buf);
    true
}

struct Rank(Child);

impl Rank {
    fn start(job: &str, rank: u32) -> Rank {
        let mut child = Command::new(std::env::current_exe().expect("the test binary"))
            .arg("rank")
            .env("TORCHELASTIC_RUN_ID", job)
            .env("RANK", rank.to_string())
            .env("LOCAL_RANK", "0")
            .env("WORLD_SIZE", "2")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("well-formed");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("child process")).read_line(&mut line).expect("child process");
        assert_eq!(line.trim(), "ready");
        Rank(child)
    }
}

impl Drop for Rank {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Series of a query result: labels and value.
type Series = Vec<(BTreeMap<String, String>, f64)>;

/// An instant query's series.
fn query_all(prom: &str, q: &str) -> Result<Series, String> {
    let (status, body) = http_get(prom, &format!("/api/v1/query?query={}", urlencode(q))).map_err(|e| e.to_string())?;
    if status != 200 {
        return Err(format!("HTTP {status}: {body}"));
    }
    let v: serde_json::Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
    Ok(v["data"]["result"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| {
                    let labels = s["metric"]
                        .as_object()
                        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string())).collect())
                        .unwrap_or_default();
                    (labels, s["value"][1].as_str().and_then(|x| x.parse().ok()).unwrap_or(f64::NAN))
                })
                .collect()
        })
        .unwrap_or_default())
}

/// (name, PromQL) pairs.
type Queries = Vec<(String, String)>;

/// The training-job dashboard: (panel title, expr) and the variable queries.
fn job_dashboard() -> (Queries, Queries) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dashboards/training-job.json");
    let d: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("test files")).expect("test files");
    let panels = d["panels"]
        .as_array()
        .expect("well-formed")
        .iter()
        .flat_map(|p| {
            p["targets"].as_array().into_iter().flatten().map(move |t| {
                (p["title"].as_str().unwrap_or("").to_string(), t["expr"].as_str().unwrap_or("").to_string())
            })
        })
        .collect();
    let vars = d["templating"]["list"]
        .as_array()
        .expect("well-formed")
        .iter()
        .filter_map(|v| {
            let q = v["query"]["query"].as_str().or(v["query"].as_str())?;
            q.starts_with("label_values(")
                .then(|| (v["name"].as_str().expect("well-formed").to_string(), q.to_string()))
        })
        .collect();
    (panels, vars)
}

fn substitute(expr: &str, host: &str, job: &str) -> String {
    expr.replace("$__rate_interval", "30s").replace("$host", host).replace("$job", job).replace("$rank", ".*")
}

/// `label_values(METRIC{...}, LABEL)` as a query: `count by (LABEL) (METRIC{...})`.
fn label_values_query(q: &str) -> (String, String) {
    let inner = q.trim().strip_prefix("label_values(").expect("well-formed").strip_suffix(')').expect("well-formed");
    let (selector, label) = inner.rsplit_once(',').expect("well-formed");
    let label = label.trim().to_string();
    (format!("count by ({label}) ({})", selector.trim()), label)
}

fn main() {
    if child_mode() || rank_child() {
        return;
    }
    let Some(bin) = agent_bin("fleet_prometheus::two_hosts_one_prometheus") else { return summary(0, 1) };
    let job = format!("fleet-test-{}", std::process::id());
    let dir = std::env::temp_dir().join(format!("tierscope-fleet-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("test files");
    let config = dir.join("tierscope.toml");
    std::fs::write(
        &config,
        "[export]\ngranularity = \"job\"\n[tiers]\ncxl = [0]\n[collect]\nresidency_interval_ms = 1000\npage_path = \"exact\"\n",
    )
    .expect("well-formed");
    let hosts = ["node-a", "node-b"];
    let listens: Vec<String> = hosts.iter().map(|_| format!("127.0.0.1:{}", free_port())).collect();
    let agents: Vec<Agent> = hosts
        .iter()
        .zip(&listens)
        .map(|(h, l)| {
            let attrs = format!("host.name={h}");
            Agent::start(
                &bin,
                &["--config", config.to_str().expect("well-formed"), "--prometheus", l],
                &[("OTEL_RESOURCE_ATTRIBUTES", &attrs)],
            )
        })
        .collect();
    let ranks = [Rank::start(&job, 0), Rank::start(&job, 1)];
    let prom = start_prometheus(&listens.iter().map(String::as_str).collect::<Vec<_>>());

    // Both agents' series of the job, each with its own host.name.
    let both = wait_for(Duration::from_secs(60), || {
        let r = query_all(
            &prom.addr,
            &format!("count by (instance) (tierscope_process_faults_total{{tierscope_job=\"{job}\"}})"),
        )
        .ok()?;
        (r.len() == 2).then_some(r)
    })
    .unwrap_or_else(|| {
        panic!(
            "the job is not in Prometheus from both agents; agent stderr:\n{}\n{}",
            agents[0].stderr.lock().expect("stderr buffer"),
            agents[1].stderr.lock().expect("stderr buffer")
        )
    });
    println!("job {job} from {} agents", both.len());
    let names = query_all(&prom.addr, "count by (host_name) (target_info)").expect("Prometheus query");
    let mut seen: Vec<String> = names.iter().filter_map(|(l, _)| l.get("host_name").cloned()).collect();
    seen.sort();
    assert_eq!(seen, hosts, "target_info's host.name of the two agents");
    let pids = query_all(
        &prom.addr,
        &format!("count(tierscope_process_faults_total{{tierscope_job=\"{job}\", process_pid!=\"\"}})"),
    )
    .expect("well-formed");
    assert!(pids.is_empty(), "job granularity exports no pid label: {pids:?}");
    passed("fleet_prometheus::both_agents_in_one_prometheus");

    // Let a few scrapes and a residency scan land, then every panel of the job dashboard.
    let (panels, vars) = job_dashboard();
    assert!(panels.len() >= 5, "the training-job dashboard has {} queries", panels.len());
    let mut empty: Vec<String> = Vec::new();
    let ok = wait_for(Duration::from_secs(45), || {
        empty.clear();
        for (title, expr) in &panels {
            for l in &listens {
                match query_all(&prom.addr, &substitute(expr, l, &job)) {
                    Ok(r) if !r.is_empty() => {}
                    Ok(_) => empty.push(format!("{title} on {l}: no series")),
                    Err(e) => empty.push(format!("{title} on {l}: {e}")),
                }
            }
        }
        empty.is_empty().then_some(())
    });
    assert!(ok.is_some(), "training-job panels without the job: {empty:#?}");
    // On both hosts at once, a job total is the sum of the two.
    let faults = |host: &str| {
        query_all(
            &prom.addr,
            &format!("sum(tierscope_process_faults_total{{instance=~\"{host}\", tierscope_job=\"{job}\"}})"),
        )
        .expect("well-formed")
        .first()
        .map(|(_, v)| *v)
        .unwrap_or(0.0)
    };
    let (a, b, all) = (faults(&listens[0]), faults(&listens[1]), faults(&listens.join("|")));
    assert!(a > 0.0 && b > 0.0 && (all - (a + b)).abs() <= 0.01 * all + 2048.0, "across hosts {all} vs {a} + {b}");
    println!("training-job dashboard: {} queries return the job on each host; faults {a} + {b} = {all}", panels.len());
    passed("fleet_prometheus::job_dashboard_spans_both_hosts");

    // The dashboard's variables list the job and both ranks.
    for (name, q) in vars {
        let (query, label) = label_values_query(&substitute(&q, ".*", &job));
        let values: Vec<String> = query_all(&prom.addr, &query)
            .expect("Prometheus query")
            .into_iter()
            .filter_map(|(l, _)| l.get(&label).cloned())
            .collect();
        match name.as_str() {
            "job" => assert!(values.contains(&job), "$job lists {values:?}"),
            "rank" => assert!(
                values.contains(&"0".to_string()) && values.contains(&"1".to_string()),
                "$rank lists {values:?}"
            ),
            "host" => assert!(listens.iter().all(|l| values.contains(l)), "$host lists {values:?}"),
            _ => {}
        }
    }
    passed("fleet_prometheus::dashboard_variables_list_the_job");
    drop(ranks);
    for a in agents {
        assert_eq!(a.stop(), Some(0));
    }
    let _ = std::fs::remove_dir_all(&dir);
    summary(3, 0);
}
