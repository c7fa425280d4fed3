//! The `insights-split` scenario's judge (issue 17): CPU and memory on different nodes of a
//! two-socket guest. S1 runs on CPU 0 (node 0) with 64 MiB bound to node 1: cpu_memory_split
//! opens, its evidence equal to /proc/PID/stat's CPU and numa_maps; S2, the same memory on CPU 1
//! (node 1), opens nothing.
use serde_json::Value;

use super::{
    insights::{evidence, find_in, fires, open_in, silent},
    scenarios::{Figure, Report},
};

const PAGE: f64 = 4096.0;
const ID: &str = "cpu_memory_split";

fn pid(r: &Report, who: &str) -> Value {
    Value::from(r.truth(&format!("pid.{who}")).unwrap_or(0.0) as u64)
}

pub fn judge(r: &Report) -> Vec<Figure> {
    let s = r.agent.as_ref();
    let split = find_in(s, ID, "pid", pid(r, "S1"));
    let (n0, n1) = (r.truth("S1.numa_maps.N0"), r.truth("S1.numa_maps.N1"));
    let exact = |name: &str, kernel: Option<f64>, ev: &str| Figure::close(name, kernel, evidence(split, ev), 0.0, 0.0);
    let mut out = vec![
        fires("cpu_memory_split for S1 (CPU 0 on node 0, 64 MiB on node 1)", split),
        exact("S1 cpu vs /proc/PID/stat field 39", r.truth("S1.cpu"), "cpu"),
        exact("S1 cpu_node (node of CPU 0)", Some(0.0), "cpu_node"),
        exact("S1 memory_node", Some(1.0), "memory_node"),
        Figure::close(
            "S1 memory_node_bytes vs numa_maps N1",
            n1.map(|p| p * PAGE),
            evidence(split, "memory_node_bytes"),
            0.01,
            0.0,
        ),
        Figure::close(
            "S1 memory_node_share_pct vs numa_maps N1/(N0+N1)",
            n0.zip(n1).map(|(a, b)| b * 100.0 / (a + b)),
            evidence(split, "memory_node_share_pct"),
            0.0,
            0.5,
        ),
        silent("cpu_memory_split for S2 (CPU 1 on node 1, its memory on node 1)", find_in(s, ID, "pid", pid(r, "S2"))),
    ];
    // S2 is the healthy twin: nothing at all opens about it.
    let about_s2: Vec<String> = open_in(s)
        .into_iter()
        .filter(|i| i.pointer("/subject/pid") == Some(&pid(r, "S2")))
        .filter_map(|i| i.get("id").and_then(Value::as_str).map(str::to_string))
        .collect();
    out.push(Figure {
        name: "nothing opens about S2".into(),
        kernel: None,
        agent: None,
        ok: about_s2.is_empty(),
        rule: format!("open about it: {about_s2:?}"),
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_for_the_split_process_only() {
        let lines: Vec<String> = [
            "TS-TRUTH pid.S1 10",
            "TS-TRUTH pid.S2 11",
            "TS-TRUTH S1.cpu 0",
            "TS-TRUTH S1.numa_maps.N0 14",
            "TS-TRUTH S1.numa_maps.N1 16578",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let s1 = r#"{"id":"cpu_memory_split","subject":{"kind":"process","pid":10,"comm":"ts-alloc"},"evidence":{"cpu":0,"cpu_node":0,"memory_node":1,"memory_node_bytes":67903488,"memory_node_share_pct":99.91562198649952}}"#;
        let ok = Report::parse(&lines, Some(&format!(r#"{{"insights":{{"open":[{s1}]}}}}"#)));
        let bad: Vec<String> = judge(&ok).into_iter().filter(|f| !f.ok).map(|f| f.name).collect();
        assert!(bad.is_empty(), "{bad:?}");
        let both = format!(r#"{{"insights":{{"open":[{s1},{}]}}}}"#, s1.replace(r#""pid":10"#, r#""pid":11"#));
        let bad: Vec<String> =
            judge(&Report::parse(&lines, Some(&both))).into_iter().filter(|f| !f.ok).map(|f| f.name).collect();
        assert_eq!(bad.len(), 2, "S2 opened: {bad:?}");
        assert!(!judge(&Report::parse(&lines, None))[0].ok);
    }
}
