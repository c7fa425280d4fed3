//! The scenarios: which guest script runs on which machine shape, and how the host judges the
//! agent's figures against the kernel's own (the `TS-TRUTH` lines the guest script prints).
use std::collections::BTreeMap;

use serde_json::Value;

use super::qemu::Shape;

/// Whether a scenario tests the agent or captures parser fixtures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Test,
    /// Copies the guest's sysfs/tracefs into `agent/fixtures` (only with `--update-fixtures`).
    Fixtures,
}

pub struct Scenario {
    /// Also the guest script's name: `tests/vm/scenarios/<name>.sh`.
    pub name: &'static str,
    pub shape: Shape,
    pub kind: Kind,
    /// Boot-to-poweroff deadline under TCG.
    pub timeout_s: u64,
    /// Compares the agent's snapshot with the kernel's figures.
    pub judge: fn(&Report) -> Vec<Figure>,
}

pub const ALL: &[Scenario] = &[
    Scenario { name: "fixtures-hmat", shape: Shape::Hmat, kind: Kind::Fixtures, timeout_s: 90, judge: no_figures },
    Scenario { name: "fixtures-cxl", shape: Shape::Cxl, kind: Kind::Fixtures, timeout_s: 120, judge: no_figures },
    Scenario { name: "residency", shape: Shape::Hmat, kind: Kind::Test, timeout_s: 120, judge: residency },
    Scenario { name: "demotion", shape: Shape::Hmat, kind: Kind::Test, timeout_s: 180, judge: demotion },
    Scenario { name: "promotion", shape: Shape::Hmat, kind: Kind::Test, timeout_s: 180, judge: promotion },
    Scenario { name: "cxl", shape: Shape::Cxl, kind: Kind::Test, timeout_s: 180, judge: cxl },
    Scenario { name: "health", shape: Shape::Cxl, kind: Kind::Test, timeout_s: 150, judge: health },
    Scenario { name: "latency", shape: Shape::Hmat, kind: Kind::Test, timeout_s: 120, judge: latency },
];

/// What a run brought back.
#[derive(Debug, Default)]
pub struct Report {
    /// `TS-TRUTH key value`: the kernel's figures.
    pub truth: BTreeMap<String, f64>,
    /// `TS-CHECK ok|fail text`: guest-side checks of the kernel's behaviour.
    pub checks: Vec<(bool, String)>,
    /// `TS-AGENT <status> <stderr head>` or `TS-AGENT missing ...`.
    pub agent_line: Option<String>,
    /// The agent's snapshot (`/out/agent.json`), when it produced valid JSON.
    pub agent: Option<Value>,
}

impl Report {
    pub fn parse(lines: &[String], agent_json: Option<&str>) -> Self {
        let mut r = Report::default();
        for l in lines {
            if let Some(rest) = after(l, "TS-TRUTH ") {
                let mut it = rest.split_whitespace();
                if let (Some(k), Some(Ok(v))) = (it.next(), it.next().map(str::parse::<f64>)) {
                    r.truth.insert(k.to_string(), v);
                }
            } else if let Some(rest) = after(l, "TS-CHECK ") {
                let (status, text) = rest.split_once(' ').unwrap_or((rest, ""));
                r.checks.push((status == "ok", text.to_string()));
            } else if let Some(rest) = after(l, "TS-AGENT ") {
                r.agent_line = Some(rest.trim().to_string());
            }
        }
        r.agent = agent_json.and_then(|s| serde_json::from_str(s).ok());
        r
    }

    fn truth(&self, k: &str) -> Option<f64> {
        self.truth.get(k).copied()
    }

    /// The snapshot's entry for the workload's process (`TS-TRUTH pid`).
    fn process(&self) -> Option<&Value> {
        let pid = self.truth("pid")? as u64;
        self.agent.as_ref()?.get("processes")?.as_array()?.iter().find(|p| p.get("pid").and_then(Value::as_u64) == Some(pid))
    }

    fn node(&self, id: u64) -> Option<&Value> {
        self.agent.as_ref()?.get("nodes")?.as_array()?.iter().find(|n| n.get("id").and_then(Value::as_u64) == Some(id))
    }

    /// Why there is no agent figure, for the report line.
    pub fn agent_problem(&self) -> String {
        match (&self.agent_line, &self.agent) {
            (None, _) => "the scenario never ran the agent".into(),
            (Some(l), _) if l.starts_with("missing") => format!("agent {l}"),
            (Some(l), None) => format!("agent gave no JSON (status {l})"),
            (Some(_), Some(_)) => "field absent from the agent's snapshot".into(),
        }
    }
}

fn after<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    line.find(marker).map(|i| &line[i + marker.len()..])
}

/// One compared figure: the agent's value beside the kernel's.
#[derive(Debug)]
pub struct Figure {
    pub name: String,
    pub kernel: Option<f64>,
    pub agent: Option<f64>,
    pub ok: bool,
    /// The allowed difference, shown with the figure.
    pub rule: String,
}

impl Figure {
    /// Agent within `rel` (fraction) or `abs` of the kernel; fails when either side is missing.
    fn close(name: &str, kernel: Option<f64>, agent: Option<f64>, rel: f64, abs: f64) -> Self {
        let ok = match (kernel, agent) {
            (Some(k), Some(a)) => (a - k).abs() <= (k.abs() * rel).max(abs),
            _ => false,
        };
        Figure { name: name.into(), kernel, agent, ok, rule: format!("±max({}%, {abs})", rel * 100.0) }
    }

    /// Agent at least `frac` of the kernel's figure (events the agent sees plus others it may).
    fn at_least(name: &str, kernel: Option<f64>, agent: Option<f64>, frac: f64) -> Self {
        let ok = matches!((kernel, agent), (Some(k), Some(a)) if k > 0.0 && a >= k * frac);
        Figure { name: name.into(), kernel, agent, ok, rule: format!(">= {}% of kernel", frac * 100.0) }
    }

    /// A classification: the agent's string must equal the expected one.
    fn equals(name: &str, expected: &str, agent: Option<&str>) -> Self {
        Figure { name: format!("{name}={expected}"), kernel: None, agent: None, ok: agent == Some(expected), rule: format!("agent says {:?}", agent.unwrap_or("<absent>")) }
    }
}

fn num(v: Option<&Value>) -> Option<f64> {
    v.and_then(Value::as_f64)
}

fn no_figures(_: &Report) -> Vec<Figure> {
    Vec::new()
}

/// Residency: the agent's per-node resident pages of the workload match numa_maps, read while
/// the workload sleeps (nothing moves), for the bound node 1 region and the node 0 region.
fn residency(r: &Report) -> Vec<Figure> {
    let p = r.process();
    // This shape has no CXL device: node 1 is slower DRAM known from HMAT and memory tiers.
    let tier1 = r.node(1).and_then(|n| n.get("tier")).and_then(Value::as_str);
    let not_cxl = Figure {
        name: "node1 tier is not cxl (no CXL device in this shape)".into(),
        kernel: None,
        agent: None,
        ok: tier1.is_some_and(|t| t != "cxl"),
        rule: format!("agent says {:?}", tier1.unwrap_or("<absent>")),
    };
    std::iter::once(not_cxl)
        .chain(["0", "1"].iter().map(|n| {
            Figure::close(
                &format!("resident_pages node{n}"),
                r.truth(&format!("numa_maps.N{n}")),
                num(p.and_then(|p| p.get("resident_pages_by_node")).and_then(|m| m.get(*n))),
                0.01,
                16.0,
            )
        }))
        .collect()
}

/// Top-level migrations of `reason`, field `succeeded`.
fn migrated(r: &Report, reason: &str) -> Option<f64> {
    num(r.agent.as_ref().and_then(|a| a.get("migrations")).and_then(|m| m.get(reason)).and_then(|m| m.get("succeeded")))
}

/// Demotion: mm_migrate_pages(reason=demotion) pages over the window against the
/// pgdemote_{kswapd,direct,khugepaged} delta; the workload's node 1 residency against numa_maps.
fn demotion(r: &Report) -> Vec<Figure> {
    let p = r.process();
    vec![
        Figure::close("demoted pages", r.truth("pgdemote"), migrated(r, "demotion"), 0.02, 64.0),
        Figure::close(
            "resident_pages node1",
            r.truth("numa_maps.N1"),
            num(p.and_then(|p| p.get("resident_pages_by_node")).and_then(|m| m.get("1"))),
            0.02,
            64.0,
        ),
    ]
}

/// Promotion: mm_migrate_pages(reason=numa_misplaced) against pgpromote_success; the workload's
/// node 0 residency after promotion against numa_maps.
fn promotion(r: &Report) -> Vec<Figure> {
    let p = r.process();
    vec![
        Figure::close("promoted pages", r.truth("pgpromote_success"), migrated(r, "numa_misplaced"), 0.02, 64.0),
        Figure::close(
            "resident_pages node0",
            r.truth("numa_maps.N0"),
            num(p.and_then(|p| p.get("resident_pages_by_node")).and_then(|m| m.get("0"))),
            0.02,
            64.0,
        ),
    ]
}

/// CXL: the region's node is classified `cxl` (with the region as evidence); the workload's
/// allocations on it are counted (at least the pages numa_maps shows there) with call sites.
fn cxl(r: &Report) -> Vec<Figure> {
    let node = r.truth("cxl.node").unwrap_or(2.0) as u64;
    let key = node.to_string();
    let n = r.node(node);
    let p = r.process();
    let evidence = n.and_then(|n| n.get("tier_evidence")).and_then(Value::as_str).unwrap_or("");
    let sites = p.and_then(|p| p.get("top_cxl_alloc_sites")).and_then(Value::as_array).map(|a| a.len() as f64);
    vec![
        Figure::equals(&format!("node{node} tier"), "cxl", n.and_then(|n| n.get("tier")).and_then(Value::as_str)),
        Figure { name: "tier evidence names the region".into(), kernel: None, agent: None, ok: evidence.contains("region"), rule: format!("agent says {evidence:?}") },
        Figure::at_least(
            &format!("alloc_pages node{node}"),
            r.truth(&format!("numa_maps.N{node}")),
            num(p.and_then(|p| p.get("alloc_pages_by_node")).and_then(|m| m.get(&key))),
            0.95,
        ),
        Figure::at_least("top_cxl_alloc_sites", Some(1.0), sites, 1.0),
    ]
}

/// Health: every event the kernel traced after the QMP injections is counted in the agent's
/// health view (`health.events_by_kind`). Poison records appear only when the poison list is
/// read; the agent triggers reads itself, so it may see more than the script's one read.
fn health(r: &Report) -> Vec<Figure> {
    let by_kind = r.agent.as_ref().and_then(|a| a.get("health")).and_then(|h| h.get("events_by_kind"));
    ["general_media", "memory_module", "dram", "poison"]
        .iter()
        .map(|k| {
            let kernel = r.truth(&format!("trace.cxl_{k}"));
            // An absent kind with a health view present means the agent counted none.
            let agent = by_kind.map(|m| m.get(*k).and_then(Value::as_f64).unwrap_or(0.0));
            Figure::at_least(&format!("{k} events"), kernel, agent, 1.0)
        })
        .collect()
}

/// Fault latency: the agent's fexit-based latency histogram of the workload counts the
/// handle_mm_fault calls a tracefs kprobe counted, and its fault counter agrees.
fn latency(r: &Report) -> Vec<Figure> {
    let p = r.process();
    let k = r.truth("handle_mm_fault");
    vec![
        Figure::close("fault_latency.count", k, num(p.and_then(|p| p.get("fault_latency")).and_then(|l| l.get("count"))), 0.02, 8.0),
        Figure::close("faults", k, num(p.and_then(|p| p.get("faults"))), 0.02, 8.0),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_protocol_lines_and_judges_residency() {
        let lines: Vec<String> = ["[  1.0] x TS-TRUTH pid 42", "TS-TRUTH numa_maps.N0 8192", "TS-TRUTH numa_maps.N1 12288", "TS-CHECK ok bound", "TS-AGENT 0 "]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let json = r#"{"nodes":[{"id":1,"tier":"cxl"}],"processes":[{"pid":42,"resident_pages_by_node":{"0":8190,"1":12000}}]}"#;
        let r = Report::parse(&lines, Some(json));
        assert_eq!(r.truth("pid"), Some(42.0));
        assert_eq!(r.checks, vec![(true, "bound".to_string())]);
        let f = residency(&r);
        assert!(!f[0].ok, "node 1 has no CXL device behind it: {f:?}");
        assert!(f[1].ok, "{f:?}");
        assert!(!f[2].ok, "12000 vs 12288 is off by more than 1%: {f:?}");
    }

    #[test]
    fn missing_agent_fails_the_figure() {
        let r = Report::parse(&["TS-TRUTH pgdemote 5000".to_string()], None);
        assert!(demotion(&r).iter().all(|f| !f.ok));
    }
}
