//! Table tests of the rules and of the engine's opening and closing.
use std::collections::BTreeMap;

use super::*;
use crate::model::{
    job::{Rank, TrainingRole},
    residency::NumaResidency,
};

const S: u64 = 1_000_000_000;
const MIB_PAGES: u64 = 256;

fn nodes(dram_free_mib: u64) -> Vec<NodeInfo> {
    let n = |id: u32, tier: &str, cpus: Vec<u32>, free: u64| NodeInfo {
        id,
        tier: tier.into(),
        tier_evidence: "test".into(),
        cpus,
        mem_total_bytes: Some(4096 << 20),
        mem_free_bytes: Some(free << 20),
    };
    vec![n(0, "dram", vec![0, 1], dram_free_mib), n(1, "dram", vec![2, 3], 0), n(2, "cxl", vec![], 1024)]
}

fn worker(pid: u32, job: &str, rank: Option<u32>, pages_by_node: &[(u32, u64)]) -> Process {
    let mut p = Process::new(pid);
    p.comm = format!("w{pid}");
    p.role = Some(TrainingRole::Worker);
    p.job = Some(job.into());
    p.rank = Rank { rank, ..Default::default() };
    p.residency =
        Some((NumaResidency { pages_by_node: pages_by_node.iter().copied().collect(), ..Default::default() }, 1));
    p
}

fn cfg() -> InsightConfig {
    InsightConfig { open_after_s: 3.0, close_after_s: 5.0, window_s: 4.0, ..Default::default() }
}

/// Runs the engine once a second for `secs` seconds from `t0` with `each(t)` giving the
/// processes at second t; returns the open insights' ids and subject keys after each second.
fn run(
    engine: &mut InsightEngine,
    t0: u64,
    secs: u64,
    nodes: &[NodeInfo],
    each: impl Fn(u64) -> (BTreeMap<u32, Process>, BTreeMap<u32, BTreeMap<String, u64>>),
) -> Vec<Vec<(InsightId, String)>> {
    let health = crate::health::HealthModel::default();
    (t0..t0 + secs)
        .map(|t| {
            let (procs, vm) = each(t);
            engine.update(t * S, &procs, nodes, &[], &health, &vm, 4096);
            engine.open().iter().map(|i| (i.id, i.subject.key())).collect()
        })
        .collect()
}

fn only(v: &[(InsightId, String)], id: InsightId) -> Vec<String> {
    v.iter().filter(|(i, _)| *i == id).map(|(_, k)| k.clone()).collect()
}

#[test]
fn allocation_churn_opens_for_flat_resident_size_and_not_for_growth() {
    // 20,000 pages/s allocated; `grow` pages of resident growth per second.
    let cases = [(0u64, true, "flat resident size: churn"), (20_000, false, "everything allocated stays: growth")];
    for (grow, fires, why) in cases {
        let mut e = InsightEngine::new(cfg());
        let open = run(&mut e, 1, 8, &nodes(1024), |t| {
            let mut p = worker(7, "j", None, &[(0, 64 * MIB_PAGES)]);
            p.rss_pages = Some(64 * MIB_PAGES + grow * t);
            p.alloc_pages_by_node = [(0, 20_000 * t)].into();
            p.faults = 20_000 * t;
            ([(7, p)].into(), BTreeMap::new())
        });
        let last = only(open.last().expect("ran"), InsightId::AllocationChurn);
        assert_eq!(!last.is_empty(), fires, "{why}");
        if fires {
            let i = e.open().into_iter().find(|i| i.id == InsightId::AllocationChurn).expect("open");
            assert_eq!(i.evidence["alloc_pages_per_s"], 20_000.0);
            assert_eq!(i.evidence["resident_change_bytes"], 0.0);
            assert_eq!(i.since_ns, 3 * S, "since its window had allocations after its first reading");
            assert!(only(&open[3], InsightId::AllocationChurn).is_empty(), "not before open_after_s");
        }
    }
}

#[test]
fn a_process_whose_memory_was_resident_before_its_counts_is_no_churn() {
    // Born while watched, it locked its memory between a reading's allocation counts and its
    // resident size (ts-alloc -l in the insights guest scenario, 16 MiB there): its first
    // reading holds the pages as resident, the next one as allocated, and nothing moves after.
    // Compared from the first reading, 256 MiB over 1-4 s is churn (the default threshold is
    // 10,000 pages/s) with a resident size that never moved.
    let pages = 256 * MIB_PAGES;
    let mut e = InsightEngine::new(cfg());
    let open = run(&mut e, 1, 10, &nodes(1024), |t| {
        let mut p = worker(8, "j", None, &[(0, pages)]);
        p.rss_pages = Some(pages);
        p.alloc_pages_by_node = [(0, if t == 1 { 0 } else { pages })].into();
        p.faults = 64;
        ([(8, p)].into(), BTreeMap::new())
    });
    for (t, o) in open.iter().enumerate() {
        assert!(only(o, InsightId::AllocationChurn).is_empty(), "second {}: {o:?}", t + 1);
    }
}

/// A change made to each process of a case.
type Tweak<'a> = &'a dyn Fn(&mut Process);

#[test]
fn slow_tier_with_fast_room_needs_room_and_no_policy_of_its_own() {
    let slow = 512 * MIB_PAGES; // 512 MiB on node 2 (cxl)
    let placed = |p: &mut Process| {
        if let Some((r, _)) = p.residency.as_mut() {
            r.placed_pages_by_node = [(2, slow)].into();
        }
    };
    let no_change = |_: &mut Process| {};
    let cases: [(u64, Tweak<'_>, bool, &str); 3] = [
        (1024, &no_change, true, "512 MiB on CXL, 1 GiB free on DRAM"),
        (256, &no_change, false, "DRAM has less free than the job holds on CXL"),
        (1024, &placed, false, "the job's own mbind put it there"),
    ];
    for (free, tweak, fires, why) in cases {
        let mut e = InsightEngine::new(cfg());
        let n = nodes(free);
        let open = run(&mut e, 1, 5, &n, |_| {
            let mut a = worker(10, "job-a", Some(0), &[(0, 100), (2, slow / 2)]);
            let mut b = worker(11, "job-a", Some(1), &[(0, 100), (2, slow / 2)]);
            tweak(&mut a);
            tweak(&mut b);
            ([(10, a), (11, b)].into(), BTreeMap::new())
        });
        assert_eq!(
            only(open.last().expect("ran"), InsightId::SlowTierWithFastRoom) == vec!["job:job-a"],
            fires,
            "{why}"
        );
        if fires {
            let i = e.open().into_iter().find(|i| i.id == InsightId::SlowTierWithFastRoom).expect("open");
            assert_eq!(i.evidence["slow_resident_bytes"], (512u64 << 20) as f64);
            assert_eq!(i.evidence["fast_free_bytes"], (1024u64 << 20) as f64);
        }
    }
}

#[test]
fn pinned_memory_on_the_slow_tier() {
    use crate::model::pinned::PinnedMemory;
    // (CUDA-pinned MiB on node 0, on node 2 (slow), VmPin MiB (node unknown), MiB resident on the
    // slow tier, fires): 64 MiB is the default bar.
    let cases = [
        (0u64, 64u64, 0u64, 64u64, true),
        // Pinned on DRAM while other memory sits on the slow tier: nothing pinned there.
        (64, 0, 0, 64, false),
        (0, 0, 0, 64, false),
        (0, 8, 0, 64, false),
        // VmPin has no node: as much as the process holds on the slow tier may be it.
        (0, 0, 64, 64, true),
        (0, 0, 64, 0, false),
    ];
    for (fast, slow, vm_pin, slow_mib, fires) in cases {
        let mut e = InsightEngine::new(cfg());
        let open = run(&mut e, 1, 5, &nodes(1024), |_| {
            let mut p = worker(20, "j", None, &[(0, 1000), (2, slow_mib * MIB_PAGES)]);
            p.pinned = Some(PinnedMemory {
                bytes_by_node: [(0, fast << 20), (2, slow << 20)].into(),
                cuda_host_alloc_bytes: (fast + slow) << 20,
                vm_pin_bytes: vm_pin << 20,
                ..Default::default()
            });
            ([(20, p)].into(), BTreeMap::new())
        });
        let got = !only(open.last().expect("ran"), InsightId::PinnedOnSlowTier).is_empty();
        let why = format!("pinned {fast}+{slow} MiB, VmPin {vm_pin} MiB, slow {slow_mib} MiB");
        assert_eq!(got, fires, "{why}");
        if fires {
            let i = e.open().into_iter().find(|i| i.id == InsightId::PinnedOnSlowTier).expect("open");
            assert_eq!(i.evidence["pinned_bytes"], ((fast + slow + vm_pin) << 20) as f64, "{why}");
            assert_eq!(i.evidence["pinned_slow_bytes"], (slow << 20) as f64, "{why}");
            assert_eq!(i.evidence["cuda_pinned_bytes"], ((fast + slow) << 20) as f64, "{why}");
            assert_eq!(i.evidence["slow_resident_bytes"], (slow_mib << 20) as f64, "{why}");
        }
    }
}

#[test]
fn cpu_and_memory_on_different_nodes() {
    // (cpu, pages on node 0, node 1, node 2, fires)
    let cases = [
        (2u32, 100 * MIB_PAGES, 10 * MIB_PAGES, 0u64, true),
        (0, 100 * MIB_PAGES, 10 * MIB_PAGES, 0, false),
        (2, 10 * MIB_PAGES, 100 * MIB_PAGES, 0, false),
        // Most memory on the CPU-less CXL node is the slow-tier question, not this one.
        (2, 0, 10 * MIB_PAGES, 100 * MIB_PAGES, false),
        // Too little to matter.
        (2, 10 * MIB_PAGES, 1, 0, false),
    ];
    for (cpu, n0, n1, n2, fires) in cases {
        let mut e = InsightEngine::new(cfg());
        let open = run(&mut e, 1, 5, &nodes(1024), |_| {
            let mut p = worker(30, "j", None, &[(0, n0), (1, n1), (2, n2)]);
            p.last_cpu = Some(cpu);
            ([(30, p)].into(), BTreeMap::new())
        });
        assert_eq!(
            !only(open.last().expect("ran"), InsightId::CpuMemorySplit).is_empty(),
            fires,
            "cpu {cpu} {n0}/{n1}/{n2}"
        );
    }
}

#[test]
fn rank_imbalance_compares_ranks_with_their_data_workers() {
    // Rank 1 holds 2/3 of its memory on CXL; rank 0 none, unless its data worker's 800 MiB there
    // count with it (then 50%: within the spread).
    for (worker_on_cxl, fires) in [(0u64, true), (800 * MIB_PAGES, false)] {
        let mut e = InsightEngine::new(cfg());
        let open = run(&mut e, 1, 5, &nodes(1024), |_| {
            let r0 = worker(40, "job", Some(0), &[(0, 600 * MIB_PAGES)]);
            let r1 = worker(41, "job", Some(1), &[(0, 200 * MIB_PAGES), (2, 400 * MIB_PAGES)]);
            let mut dw = worker(42, "job", Some(0), &[(0, 200 * MIB_PAGES), (2, worker_on_cxl)]);
            dw.role = Some(TrainingRole::DataWorker);
            dw.rank_pid = Some(40);
            ([(40, r0), (41, r1), (42, dw)].into(), BTreeMap::new())
        });
        let got = only(open.last().expect("ran"), InsightId::RankImbalance);
        assert_eq!(got == vec!["rank:job:1"], fires, "data worker on cxl: {worker_on_cxl}: {got:?}");
        if fires {
            let i = e.open().into_iter().find(|i| i.id == InsightId::RankImbalance).expect("open");
            assert!((i.evidence["worst_slow_share_pct"] - 66.666).abs() < 0.01);
            assert_eq!(i.evidence["best_slow_share_pct"], 0.0);
            assert_eq!(i.evidence["ranks"], 2.0, "the data worker is no rank");
        }
    }
}

fn vm(demote: u64, promote: u64, candidates: u64) -> BTreeMap<u32, BTreeMap<String, u64>> {
    let m: BTreeMap<String, u64> = [
        ("pgdemote_kswapd".to_string(), demote),
        ("pgpromote_success".to_string(), promote),
        ("pgpromote_candidate".to_string(), candidates),
    ]
    .into();
    [(0, m)].into()
}

#[test]
fn tiering_that_fights_itself() {
    // Pages per second on node 0: (demoted, promoted, candidates) -> (ping-pong, rate-limited).
    let cases = [
        ((1000u64, 1000u64, 1000u64), (true, false)),
        ((1000, 0, 0), (false, false)),
        ((0, 1000, 1000), (false, false)),
        ((0, 100, 5000), (false, true)),
        ((0, 0, 0), (false, false)),
    ];
    for ((d, p, c), (ping, limited)) in cases {
        let mut e = InsightEngine::new(cfg());
        let open = run(&mut e, 1, 6, &nodes(1024), |t| (BTreeMap::new(), vm(d * t, p * t, c * t)));
        let last = open.last().expect("ran");
        assert_eq!(only(last, InsightId::TieringPingPong) == vec!["node:0"], ping, "{d}/{p}/{c}");
        assert_eq!(only(last, InsightId::PromotionRateLimited) == vec!["node:0"], limited, "{d}/{p}/{c}");
    }
}

#[test]
fn insights_open_after_holding_and_close_with_hysteresis() {
    // Fault-free toy: drive the engine with findings directly.
    let f = |level| Finding {
        id: InsightId::TieringPingPong,
        severity: Severity::Warning,
        subject: Subject::Node { node: 0 },
        level,
        summary: String::new(),
        evidence: BTreeMap::new(),
        details: vec![],
        try_this: String::new(),
    };
    let mut e = InsightEngine::new(cfg()); // open after 3 s, close after 5 s
    use Level::*;
    // second: level
    let script = [
        Open, Open, Hold, Open, Open, Open, Open, // a Hold before opening restarts the clock
        Hold, Clear, Hold, Clear, Clear, Clear, Clear, Clear, Clear,
    ];
    let mut states = vec![];
    for (t, l) in script.iter().enumerate() {
        e.step(t as u64 * S, vec![f(*l)]);
        states.push(!e.open().is_empty());
    }
    assert_eq!(
        states,
        vec![
            false, false, false, false, false, false, true, // opens 3 s after second 3
            true, true, true, true, true, true, true, true,  // a Hold in between restarts the close clock
            false, // clear for 5 s since second 10: closed
        ]
    );
    e.step(16 * S, vec![f(Hold)]);
    assert!(e.open().is_empty(), "a Hold does not reopen a closed insight");
    assert_eq!((e.opened_total, e.closed_total, e.closed.len()), (1, 1, 1));
    assert_eq!(e.closed[0].since_ns, 3 * S);
    // A subject no rule speaks of any more closes the same way.
    let mut e = InsightEngine::new(InsightConfig { open_after_s: 0.0, close_after_s: 2.0, ..cfg() });
    e.step(0, vec![f(Open)]);
    assert_eq!(e.open().len(), 1);
    e.step(S, vec![]);
    e.step(3 * S, vec![]);
    assert!(e.open().is_empty());
}

#[test]
fn an_idle_model_opens_nothing() {
    let mut e = InsightEngine::new(InsightConfig { open_after_s: 0.0, ..cfg() });
    let open = run(&mut e, 1, 5, &nodes(1024), |t| {
        let mut p = worker(50, "j", Some(0), &[(0, 100 * MIB_PAGES)]);
        p.last_cpu = Some(0);
        (
            [(50, p)].into(),
            vm(0, 0, 0).into_iter().map(|(n, m)| (n, m.into_iter().map(|(k, v)| (k, v + t)).collect())).collect(),
        )
    });
    assert!(open.iter().all(Vec::is_empty), "{open:?}");
}
