//! Fleet granularity: the series count of a training node in both granularities (the figures in
//! docs/export.md, "Series at fleet scale"), and counters that survive restarts without counting
//! anything twice.
use std::collections::BTreeMap;

use super::*;
use crate::{
    export::{
        instruments::{points, AgentHealth, ExportInput, NodeState, Tracked},
        other::OtherFold,
    },
    model::{
        agent::{Attach, ProgramStatus},
        event::Event,
        migration::MigrationTotals,
        reading::CounterReading,
        residency::NumaResidency,
        Model,
    },
};

const NODES: [u32; 4] = [0, 1, 2, 3];
const RANKS: u32 = 8;
const WORKERS_PER_RANK: u32 = 4;
const LAUNCHER: u32 = 100;

fn rank_pid(r: u32) -> u32 {
    1000 + r
}
fn worker_pid(r: u32, w: u32) -> u32 {
    2000 + r * 10 + w
}

fn node_states() -> Vec<NodeState> {
    NODES
        .iter()
        .map(|&id| NodeState {
            id,
            tier: if id < 2 { "dram" } else { "cxl" }.into(),
            total_bytes: Some(64 << 30),
            free_bytes: Some(32 << 30),
            vmstat: [
                ("pgpromote_success".into(), 10),
                ("pgpromote_candidate".into(), 20),
                ("pgdemote_kswapd".into(), 30),
                ("pgdemote_direct".into(), 1),
                ("numa_pages_migrated".into(), 40),
            ]
            .into(),
        })
        .collect()
}

/// Every process of the job, with (pid, comm, rank).
fn job_processes() -> Vec<(u32, &'static str, Option<u32>)> {
    let mut v = vec![(LAUNCHER, "torchrun", None)];
    for r in 0..RANKS {
        v.push((rank_pid(r), "python", Some(r)));
        for w in 0..WORKERS_PER_RANK {
            v.push((worker_pid(r, w), "pt_data_worker", Some(r)));
        }
    }
    v
}

/// A busy node: every process faults and allocates on all 4 nodes and is resident on all 4;
/// ranks migrate for three reasons (promotion, demotion, compaction), workers for one; one
/// untracked process is summed in `other`. `scale` grows every counter.
fn training_node(m: &mut Model, at_ns: u64, scale: u64, procs: &[(u32, &'static str, Option<u32>)]) {
    let mut r = CounterReading { at_ns, ..Default::default() };
    for &(pid, _, rank) in procs.iter().chain([&(7, "sshd", None)]) {
        r.faults.insert(pid, 1000 * scale);
        for n in NODES {
            r.allocs.insert((pid, n), 100 * scale + n as u64);
        }
        let reasons: &[u32] = if rank.is_some() && pid < 2000 { &[5, 8, 0] } else { &[0] };
        for &reason in reasons {
            let t = MigrationTotals { calls: scale, succeeded: 64 * scale, failed: scale, ..Default::default() };
            r.migrations.insert((pid, reason, 0), t);
        }
    }
    r.migrate_latency.insert(5, vec![1; 40]);
    r.migrate_latency.insert(8, vec![1; 40]);
    r.migrate_latency.insert(0, vec![1; 40]);
    m.apply_reading(&r);
    for &(pid, comm, _) in procs {
        m.set_identity(pid, comm, comm, LAUNCHER);
        let pages = NODES.iter().map(|&n| (n, 1000 + n as u64)).collect();
        m.set_residency(pid, NumaResidency { pages_by_node: pages, ..Default::default() }, at_ns);
    }
}

fn tracked(procs: &[(u32, &'static str, Option<u32>)]) -> BTreeMap<u32, Tracked> {
    procs
        .iter()
        .map(|&(pid, comm, rank)| {
            let t = Tracked {
                pid,
                executable: comm.into(),
                job: Some("llama-pretrain".into()),
                rank,
                container: crate::model::container::ContainerIdentity {
                    pod_uid: Some(format!("0b7c2f4e-1111-4222-8333-{pid:012}")),
                    pod_name: Some(format!("train-{pid}")),
                    id: Some(format!("{pid:064x}")),
                    ..Default::default()
                },
            };
            (pid, t)
        })
        .collect()
}

fn health() -> AgentHealth {
    let status = |i: usize| match i % 3 {
        0 => Attach::Attached,
        1 => Attach::Unsupported,
        _ => Attach::Failed,
    };
    AgentHealth {
        programs: (0..27)
            .map(|i| ProgramStatus { name: "p", hook: "h".into(), feature: "f", status: status(i), reason: None })
            .collect(),
        ..Default::default()
    }
}

fn export(m: &Model, tracked: &BTreeMap<u32, Tracked>, other: &mut OtherFold) -> Points {
    let other = other.totals(m, |p| tracked.contains_key(&p));
    let vmstat: BTreeMap<String, u64> = [("numa_hint_faults".into(), 5), ("numa_hint_faults_local".into(), 4)].into();
    points(&ExportInput {
        model: m,
        nodes: &node_states(),
        tracked,
        other: &other,
        page_size: 4096,
        health: &health(),
        system_vmstat: &vmstat,
        probe: None,
        resident_shares: false,
    })
}

fn count(p: &Points) -> usize {
    p.values().map(Vec::len).sum()
}

fn count_with_pid(p: &Points) -> usize {
    p.values().flatten().filter(|pt| pid_of(pt).is_some()).count()
}

fn total(p: &Points, metric: &str) -> u64 {
    p.get(metric).map_or(0, |v| v.iter().map(|pt| as_u64(pt.value)).sum())
}

#[test]
fn a_training_node_exports_per_pid_or_per_rank() {
    let procs = job_processes();
    let mut m = Model::default();
    training_node(&mut m, 1, 1, &procs);
    let tracked = tracked(&procs);
    let per_process = export(&m, &tracked, &mut OtherFold::default());
    let job = FleetFold::default().apply(per_process.clone(), 1);

    // Per process: faults, 3 fault paths, major faults, NUMA moves, 4 allocation and 4 resident
    // nodes (14), and 2 results per migration reason: 3 reasons for a rank, 1 for the rest.
    let processes = procs.len();
    let ranks = RANKS as usize;
    let per_pid = 14 * processes + 2 * 3 * ranks + 2 * (processes - ranks);
    assert_eq!(count_with_pid(&per_process), per_pid);
    // Per job and rank: the launcher and 8 ranks (workers with their rank), same split.
    let sets = 1 + ranks;
    let per_rank = 14 * sets + 2 * 3 * ranks + 2;
    assert_eq!(count_with_pid(&job), 0, "no pid label in job granularity");
    let node_and_agent = count(&per_process) - per_pid;
    assert_eq!(count(&job), per_rank + node_and_agent);
    for metric in ["tierscope.process.faults", "tierscope.process.page.allocations", "tierscope.process.migrations"] {
        assert_eq!(total(&job, metric), total(&per_process, metric), "{metric}: the same totals");
    }
    println!(
        "series of one node (8 ranks x {WORKERS_PER_RANK} data workers, launcher, 4 NUMA nodes, 3 migration reasons): \
         per process {} ({per_pid} per-process), per job and rank {} ({per_rank} per-rank), node and agent {node_and_agent}",
        count(&per_process),
        count(&job)
    );
    for nodes in [1_000u64, 10_000] {
        println!(
            "{nodes} nodes: per process {}, per job and rank {}",
            nodes * count(&per_process) as u64,
            nodes * count(&job) as u64
        );
    }
}

#[test]
fn a_restarted_rank_continues_its_series_and_nothing_counts_twice() {
    let mut procs = job_processes();
    let mut m = Model::default();
    let window = m.departed.open_window(0);
    let mut other = OtherFold::default();
    let mut fold = FleetFold::default();
    let faults = "tierscope.process.faults";
    let rank3 = |p: &Points| {
        p[faults]
            .iter()
            .find(|pt| pt.attributes.iter().any(|kv| kv.key.as_str() == "tierscope.rank" && kv.value.as_str() == "3"))
            .map(|pt| as_u64(pt.value))
    };
    let mut tracked_now = tracked(&procs);
    training_node(&mut m, 1, 1, &procs);
    let first = fold.apply(export(&m, &tracked_now, &mut other), 1);
    let before = rank3(&first).expect("rank 3's series");
    assert_eq!(before, 5 * 1000, "the rank and its 4 workers");

    // Rank 3 exits; its tracked series ends (the caller drops it from `tracked`) and a new rank
    // 3 starts under another pid.
    m.apply_event(Event::Exit { tgid: rank_pid(3), comm: "python".into(), ts_ns: 2 });
    m.prune_exited(10, 5);
    procs.retain(|p| p.0 != rank_pid(3));
    procs.push((3003, "python", Some(3)));
    tracked_now = tracked(&procs);
    training_node(&mut m, 11, 2, &procs);
    let second = fold.apply(export(&m, &tracked_now, &mut other), 11);
    let after = rank3(&second).expect("rank 3's series continues");
    assert!(after >= before, "rank 3 went back from {before} to {after}");
    assert_eq!(after, 1000 + 5 * 2000, "what the old rank had, plus the new one's and its workers' (now 2000 each)");
    // Every fault counted once: the same sum as per process (where the old pid is in `other`).
    let per_process = export(&m, &tracked_now, &mut OtherFold::default());
    assert_eq!(total(&second, faults), total(&per_process, faults));
    let other_of = |p: &Points| {
        p[faults].iter().find(|pt| pt.attributes.iter().any(|kv| kv.value.as_str() == OTHER)).map(|pt| as_u64(pt.value))
    };
    assert_eq!(other_of(&second), Some(1000 * 2), "other: only the untracked process");

    // Long after the last rank 3 left, its series ends and `other` keeps its counts.
    procs.retain(|p| p.1 == "torchrun" || p.2 != Some(3));
    tracked_now = tracked(&procs);
    let gone = 12 + KEEP_ENDED_NS + 1;
    let third = fold.apply(export(&m, &tracked_now, &mut other), 12);
    assert!(rank3(&third).is_some(), "kept while a restart may come");
    let fourth = fold.apply(export(&m, &tracked_now, &mut other), gone);
    assert_eq!(rank3(&fourth), None, "dropped after KEEP_ENDED_NS");
    assert!(other_of(&fourth).unwrap() >= other_of(&third).unwrap(), "other never goes back");
    assert_eq!(total(&fourth, faults), total(&export(&m, &tracked_now, &mut OtherFold::default()), faults));
    m.departed.close_window(window);
}

#[test]
fn gauges_are_the_sum_of_live_processes() {
    let procs = job_processes();
    let mut m = Model::default();
    training_node(&mut m, 1, 1, &procs);
    let job = FleetFold::default().apply(export(&m, &tracked(&procs), &mut OtherFold::default()), 1);
    let resident = &job["tierscope.process.memory.resident"];
    assert_eq!(resident.len(), 9 * NODES.len(), "launcher and 8 ranks, 4 nodes each");
    let rank0_node2 = resident
        .iter()
        .find(|pt| {
            let has = |k: &str, v: &str| pt.attributes.iter().any(|kv| kv.key.as_str() == k && kv.value.as_str() == v);
            has("tierscope.rank", "0") && has("tierscope.numa.node", "2")
        })
        .expect("rank 0 on node 2");
    assert_eq!(as_u64(rank0_node2.value), 5 * 1002 * 4096, "the rank and its 4 workers");
}
