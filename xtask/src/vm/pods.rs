//! The `pods` scenario's judge (issue 44): three pod-shaped cgroup v2 cgroups on the HMAT guest,
//! A holding 32 MiB on node 0, B 32 MiB on node 1 (the lower tier), C 32 MiB first on node 1
//! that the kernel promotes while it is rewritten. Each cgroup's bytes by
//! node in the snapshot's `cgroups` must equal its own `memory.numa_stat` (anon + file) within
//! 1%, and its tiering counters `memory.stat`'s exactly.
use serde_json::Value;

use super::scenarios::{Figure, Report};

const POD: &str = "/kubepods.slice/kubepods-pod11111111_2222_3333_4444_555555555555.slice";
const COUNTERS: [&str; 7] = [
    "pgpromote_success",
    "pgdemote_kswapd",
    "pgdemote_direct",
    "pgdemote_khugepaged",
    "numa_pages_migrated",
    "numa_hint_faults",
    "numa_pte_updates",
];

fn cgroup(r: &Report, c: char) -> Option<&Value> {
    let path = format!("{POD}/cri-containerd-{}.scope", c.to_ascii_lowercase().to_string().repeat(64));
    r.agent.as_ref()?.pointer("/cgroups/cgroups")?.as_array()?.iter().find(|g| g["path"] == path.as_str())
}

pub fn judge(r: &Report) -> Vec<Figure> {
    let mut out = vec![Figure {
        name: "the node's cgroup hierarchy is unified".into(),
        kernel: None,
        agent: None,
        ok: r.agent.as_ref().and_then(|a| a.pointer("/cgroups/hierarchy")) == Some(&Value::from("unified")),
        rule: format!("agent says {:?}", r.agent.as_ref().and_then(|a| a.pointer("/cgroups/hierarchy"))),
    }];
    for w in ['A', 'B', 'C'] {
        let g = cgroup(r, w);
        out.push(Figure {
            name: format!("{w}: its pod's uid from the path"),
            kernel: None,
            agent: None,
            ok: g.and_then(|g| g["pod_uid"].as_str()) == Some("11111111-2222-3333-4444-555555555555"),
            rule: "equal".into(),
        });
        for n in 0..2 {
            let agent = g.and_then(|g| g.pointer(&format!("/bytes_by_node/{n}/total"))).and_then(Value::as_f64);
            out.push(Figure::close(
                &format!("{w}: bytes on node {n}"),
                r.truth(&format!("{w}.N{n}")),
                agent,
                0.01,
                0.0,
            ));
        }
        let tiers: f64 =
            g.and_then(|g| g["bytes_by_tier"].as_object()).map_or(0.0, |t| t.values().filter_map(Value::as_f64).sum());
        let nodes = r.truth(&format!("{w}.N0")).zip(r.truth(&format!("{w}.N1"))).map(|(a, b)| a + b);
        out.push(Figure::close(&format!("{w}: bytes by tier sum to its bytes"), nodes, Some(tiers), 0.01, 0.0));
        for c in COUNTERS {
            let agent = g.and_then(|g| g.pointer(&format!("/counters_now/{c}"))).and_then(Value::as_f64);
            match r.truth(&format!("{w}.{c}")) {
                Some(k) => out.push(Figure::close(&format!("{w}: {c}"), Some(k), agent, 0.0, 0.0)),
                None => out.push(Figure {
                    name: format!("{w}: {c} said missing on this kernel"),
                    kernel: None,
                    agent: None,
                    ok: g.and_then(|g| g["not_on_this_kernel"].as_array()).is_some_and(|m| m.iter().any(|v| v == c)),
                    rule: "listed".into(),
                }),
            }
        }
    }
    // A is on the upper tier, B on the lower: bytes by tier tell them apart.
    let tier_bytes =
        |w: char, t: &str| cgroup(r, w).and_then(|g| g.pointer(&format!("/bytes_by_tier/{t}"))).and_then(Value::as_f64);
    out.push(Figure::at_least(
        "B: cxl-tier bytes (32 MiB on node 1, the lower tier)",
        Some(32.0 * 1048576.0),
        tier_bytes('B', "cxl"),
        0.95,
    ));
    // C's promotions: counted from the agent's first read, which saw at most the kernel's total.
    let promoted =
        |k: &str| cgroup(r, 'C').and_then(|g| g.pointer(&format!("/{k}/pgpromote_success"))).and_then(Value::as_f64);
    out.push(Figure::between(
        "C: promotions since the agent's first read",
        Some(1.0),
        r.truth("C.pgpromote_success"),
        promoted("counters_since_first_read"),
        0.0,
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn equal_figures_pass_and_a_wrong_node_fails() {
        let mut truth =
            vec!["TS-TRUTH A.N0 33554432", "TS-TRUTH A.N1 0", "TS-TRUTH B.N0 4096", "TS-TRUTH B.N1 33554432"];
        truth.extend(["TS-TRUTH C.N0 33554432", "TS-TRUTH C.N1 0"]);
        truth.extend([
            "TS-TRUTH A.pgpromote_success 0",
            "TS-TRUTH B.pgpromote_success 0",
            "TS-TRUTH C.pgpromote_success 8192",
        ]);
        let g = |c: char, n0: u64, n1: u64, promoted: u64| {
            format!(
                r#"{{"path":"{POD}/cri-containerd-{}.scope","pod_uid":"11111111-2222-3333-4444-555555555555","bytes_by_node":{{"0":{{"total":{n0}}},"1":{{"total":{n1}}}}},"bytes_by_tier":{{"dram":{n0},"cxl":{n1}}},"counters_now":{{"pgpromote_success":{promoted}}},"counters_since_first_read":{{"pgpromote_success":{}}},"not_on_this_kernel":["pgdemote_kswapd","pgdemote_direct","pgdemote_khugepaged","numa_pages_migrated","numa_hint_faults","numa_pte_updates"]}}"#,
                c.to_string().repeat(64),
                promoted.saturating_sub(100)
            )
        };
        let doc = |b1: u64| {
            format!(
                r#"{{"cgroups":{{"hierarchy":"unified","cgroups":[{},{},{}]}}}}"#,
                g('a', 33554432, 0, 0),
                g('b', 4096, b1, 0),
                g('c', 33554432, 0, 8192)
            )
        };
        let ok = Report::parse(&lines(&truth), Some(&doc(33554432)));
        let bad: Vec<String> = judge(&ok).into_iter().filter(|f| !f.ok).map(|f| f.name).collect();
        assert!(bad.is_empty(), "{bad:?}");
        let wrong = Report::parse(&lines(&truth), Some(&doc(1 << 20)));
        let bad: Vec<String> = judge(&wrong).into_iter().filter(|f| !f.ok).map(|f| f.name).collect();
        assert!(bad.contains(&"B: bytes on node 1".to_string()), "{bad:?}");
    }
}
