//! The `insights` scenario's judge (issue 17): an idle guest opens none; in one window, each
//! insight opens for the workload built to cause it, with its evidence equal to the kernel's own
//! figures, and none opens for the workloads built not to.
use serde_json::Value;

use super::scenarios::{Figure, Report};

const KIB: f64 = 1024.0;
const PAGE: f64 = 4096.0;

/// The open insights of a snapshot.
pub(super) fn open_in(snapshot: Option<&Value>) -> Vec<&Value> {
    snapshot
        .and_then(|a| a.pointer("/insights/open"))
        .and_then(Value::as_array)
        .map(|v| v.iter().collect())
        .unwrap_or_default()
}

fn open(r: &Report) -> Vec<&Value> {
    open_in(r.agent.as_ref())
}

fn subject_is(i: &Value, key: &str, want: &Value) -> bool {
    i.pointer(&format!("/subject/{key}")) == Some(want)
}

/// The open insight `id` of a snapshot whose subject's `key` is `want`.
pub(super) fn find_in<'a>(snapshot: Option<&'a Value>, id: &str, key: &str, want: Value) -> Option<&'a Value> {
    open_in(snapshot).into_iter().find(|i| i.get("id").and_then(Value::as_str) == Some(id) && subject_is(i, key, &want))
}

fn find<'a>(r: &'a Report, id: &str, key: &str, want: Value) -> Option<&'a Value> {
    find_in(r.agent.as_ref(), id, key, want)
}

pub(super) fn evidence(i: Option<&Value>, name: &str) -> Option<f64> {
    i?.pointer(&format!("/evidence/{name}"))?.as_f64()
}

pub(super) fn fires(name: &str, i: Option<&Value>) -> Figure {
    Figure { name: format!("{name} opens"), kernel: None, agent: None, ok: i.is_some(), rule: "must be open".into() }
}

pub(super) fn silent(name: &str, i: Option<&Value>) -> Figure {
    Figure {
        name: format!("{name} stays closed"),
        kernel: None,
        agent: None,
        ok: i.is_none(),
        rule: i.map_or("none open".into(), |i| {
            format!("open: {}", i.get("summary").and_then(Value::as_str).unwrap_or(""))
        }),
    }
}

fn pid(r: &Report, who: &str) -> u64 {
    r.truth(&format!("pid.{who}")).unwrap_or(0.0) as u64
}

fn job_of(r: &Report, who: &str) -> Value {
    Value::from(format!("ts-alloc-{}", pid(r, who)))
}

pub fn judge(r: &Report) -> Vec<Figure> {
    let idle = r.agent_node.as_ref();
    let idle_open = idle.and_then(|a| a.pointer("/insights/open")).and_then(Value::as_array).map(Vec::len);
    let idle_closed = idle.and_then(|a| a.pointer("/insights/closed")).and_then(Value::as_array).map(Vec::len);
    let mut out = vec![Figure {
        name: "an idle guest opens no insight".into(),
        kernel: None,
        agent: None,
        ok: idle_open == Some(0) && idle_closed == Some(0),
        rule: format!("open {idle_open:?}, closed {idle_closed:?}"),
    }];

    let slow = find(r, "slow_tier_with_fast_room", "job", job_of(r, "W1"));
    out.push(fires("slow_tier_with_fast_room for W1 (48 MiB on node 1, default policy)", slow));
    out.push(Figure::close(
        "W1 slow_resident_bytes vs numa_maps N1",
        r.truth("W1.numa_maps.N1").map(|p| p * PAGE),
        evidence(slow, "slow_resident_bytes"),
        0.02,
        64.0 * PAGE,
    ));
    out.push(Figure::close(
        "fast_free_bytes vs node0 MemFree",
        r.truth("node0.MemFree_kB").map(|k| k * KIB),
        evidence(slow, "fast_free_bytes"),
        0.10,
        0.0,
    ));
    out.push(silent(
        "slow_tier_with_fast_room for W2 (under its own bind:1)",
        find(r, "slow_tier_with_fast_room", "job", job_of(r, "W2")),
    ));

    let pinned = find(r, "pinned_on_slow_tier", "pid", Value::from(pid(r, "W3")));
    out.push(fires("pinned_on_slow_tier for W3 (16 MiB mlocked on node 1)", pinned));
    out.push(Figure::close(
        "W3 pinned_bytes vs VmLck + VmPin",
        r.truth("W3.VmLck_VmPin_kB").map(|k| k * KIB),
        evidence(pinned, "pinned_bytes"),
        0.0,
        0.0,
    ));
    out.push(Figure::close(
        "W3 slow_resident_bytes vs numa_maps N1",
        r.truth("W3.numa_maps.N1").map(|p| p * PAGE),
        evidence(pinned, "slow_resident_bytes"),
        0.02,
        64.0 * PAGE,
    ));
    out.push(silent(
        "pinned_on_slow_tier for W4 (mlocked on node 0)",
        find(r, "pinned_on_slow_tier", "pid", Value::from(pid(r, "W4"))),
    ));

    let churn = find(r, "allocation_churn", "pid", Value::from(pid(r, "W5")));
    out.push(fires("allocation_churn for W5 (map, touch, unmap 4 MiB)", churn));
    out.push(Figure::close(
        "W5 faults_per_s vs /proc/PID/stat minflt+majflt rate",
        r.truth("churn.faults_per_s"),
        evidence(churn, "faults_per_s"),
        0.35,
        0.0,
    ));
    // The loop's own 4 MiB region comes and goes between any two reads, so each side's change
    // over its own span lies anywhere within 4 MiB of flat, and the two spans (the agent's
    // window, the guest's two VmRSS reads) are not in phase: each is judged against flat, not
    // against the other (they once differed by 5.4 MiB, -3.3 against +2.1, both flat).
    out.push(Figure::close(
        "W5 resident_change_bytes flat (within the loop's 4 MiB of 0)",
        Some(0.0),
        evidence(churn, "resident_change_bytes"),
        0.0,
        4.5 * 1048576.0,
    ));
    out.push(Figure::kernel(
        "W5 VmRSS change flat (within the loop's 4 MiB of 0)",
        r.truth("churn.rss_change_kb").map(|k| k * KIB),
        |v| v.abs() <= 4.5 * 1048576.0,
        "|change| <= 4.5 MiB",
    ));

    let ranks = find(r, "rank_imbalance", "job", Value::from("imb"));
    out.push(fires("rank_imbalance for job imb", ranks));
    out.push(Figure::close(
        "rank_imbalance subject is rank 1",
        Some(1.0),
        ranks.and_then(|i| i.pointer("/subject/rank")).and_then(Value::as_f64),
        0.0,
        0.0,
    ));
    let (n0, n1) = (r.truth("R1.numa_maps.N0"), r.truth("R1.numa_maps.N1"));
    out.push(Figure::close(
        "rank 1 worst_slow_share_pct vs numa_maps N1/(N0+N1)",
        n0.zip(n1).map(|(a, b)| b * 100.0 / (a + b)),
        evidence(ranks, "worst_slow_share_pct"),
        0.0,
        2.0,
    ));
    out.push(silent("rank_imbalance for job even", find(r, "rank_imbalance", "job", Value::from("even"))));

    out.push(silent(
        "tiering_ping_pong on node 0 (nothing demoted)",
        find(r, "tiering_ping_pong", "node", Value::from(0)),
    ));

    // The healthy workload and the negatives' subjects appear in no open insight at all.
    let quiet: Vec<Value> =
        [Value::from(pid(r, "W0")), job_of(r, "W0"), Value::from(pid(r, "W4")), Value::from("even")].into();
    let noisy: Vec<String> = open(r)
        .into_iter()
        .filter(|i| {
            ["pid", "job"].iter().any(|k| i.pointer(&format!("/subject/{k}")).is_some_and(|v| quiet.contains(v)))
        })
        .filter_map(|i| i.get("id").and_then(Value::as_str).map(str::to_string))
        .collect();
    out.push(Figure {
        name: "the healthy workload and the negatives open nothing".into(),
        kernel: None,
        agent: None,
        ok: noisy.is_empty(),
        rule: format!("open about them: {noisy:?}"),
    });
    out
}
