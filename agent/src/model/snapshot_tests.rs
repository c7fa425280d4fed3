//! The snapshot document built from models of known readings: what each key holds.
use super::*;
use crate::model::{
    reading::CounterReading,
    residency::NumaResidency,
    site::{SiteFrame, SiteTally},
};

pub(crate) fn ctx(nodes: &[NodeInfo]) -> SnapshotContext<'_> {
    SnapshotContext {
        host: "h".into(),
        kernel: "k".into(),
        duration_s: 3.0,
        nodes,
        page_size: 4096,
        programs: vec![],
        channel_dropped: 2,
        now_ns: 5_000_000_000,
        site_sample_every: 4,
        window_start_ns: 1_000_000_000,
        map_entries_forgotten: 0,
        memory_block_checks: 0,
        memory_block_slots_rewritten: 0,
        site_samples_per_sec: 100,
        site_unnormalized: 0,
        site_stacks: Default::default(),
    }
}

#[test]
fn a_process_pruned_during_the_window_is_listed_exited_with_its_totals() {
    use crate::model::event::Event;
    let mut m = Model::default();
    let _window = m.departed.open_window(1_000_000_000);
    m.apply_reading(&CounterReading {
        at_ns: 1_500_000_000,
        faults: [(10, 5), (11, 7)].into(),
        allocs: [((11, 0), 64)].into(),
        ..Default::default()
    });
    m.apply_event(Event::Exit { tgid: 11, comm: "child".into(), ts_ns: 2_000_000_000 });
    assert_eq!(m.prune_exited(4_000_000_000, 1_000_000_000), vec![11]);
    m.apply_reading(&CounterReading { at_ns: 4_500_000_000, faults: [(10, 6)].into(), ..Default::default() });
    let s = build(&m, &ProcessFilter::default(), ctx(&[]));
    let p = s.processes.iter().find(|p| p.pid == 11).expect("the window saw 11");
    assert_eq!((p.exited, p.exited_at_s, p.faults, p.comm.as_str()), (true, Some(1.0), 7, "child"));
    assert_eq!(p.alloc_pages_by_node["0"], 64);
    assert_eq!((s.agent.processes_in_model, s.agent.departed_kept), (1, 1));
    assert!(!s.processes.iter().find(|p| p.pid == 10).expect("live").exited);
}

#[test]
fn residency_is_split_by_tier_and_filtered_by_pid() {
    let nodes = vec![
        NodeInfo { id: 0, tier: "dram".into(), ..Default::default() },
        NodeInfo { id: 2, tier: "cxl".into(), ..Default::default() },
    ];
    let mut m = Model::default();
    m.apply_reading(&CounterReading {
        at_ns: 1,
        faults: [(10, 5), (11, 7)].into(),
        allocs: [((10, 2), 8192)].into(),
        ..Default::default()
    });
    let r = NumaResidency { pages_by_node: [(0, 100), (2, 8192), (5, 1)].into(), ..Default::default() };
    m.set_residency(10, r, 4_000_000_000);
    let rd =
        CounterReading { at_ns: 2, faults: [(10, 5)].into(), allocs: [((10, 2), 8192)].into(), ..Default::default() };
    m.apply_reading(&rd);
    let mut t = SiteTally::default();
    t.add(10, 1, 10);
    t.add(10, 2, 30);
    let named = SiteFrame::unnamed("train", 0x1234).named("alloc_optimizer_state", 0x1f);
    t.named.push((10, 2, vec![named.clone()]));
    m.apply_sites(t);
    let s = build(&m, &ProcessFilter { pids: vec![10], pattern: None }, ctx(&nodes));
    assert_eq!(s.processes.len(), 1);
    let p = &s.processes[0];
    assert_eq!(p.resident_bytes_by_tier["cxl"], 8192 * 4096);
    assert_eq!(p.resident_bytes_by_tier["dram"], 100 * 4096);
    assert_eq!(p.resident_bytes_by_tier["unknown"], 4096);
    assert_eq!(p.residency_age_ms, Some(1000));
    // The samples carried 40 of the 8,192 pages allocated on node 2: each site gets its share.
    assert_eq!((p.top_cxl_alloc_sites[0].pages, p.top_cxl_alloc_sites[0].sampled_pages), (6144, 30));
    assert_eq!((p.top_cxl_alloc_sites[1].pages, p.top_cxl_alloc_sites[1].sampled_pages), (2048, 10));
    assert_eq!(p.top_cxl_alloc_sites[0].frames, vec![named]);
    assert_eq!(p.top_cxl_alloc_sites[0].frames_text, vec!["alloc_optimizer_state+0x1f (train)".to_string()]);
    assert_eq!(p.top_cxl_alloc_sites[1].frames.len(), 0, "unnamed sites are still listed");
    assert_eq!(p.alloc_pages_by_node["2"], 8192);
    assert_eq!(s.nodes[1].alloc_pages, 8192);
    assert_eq!(s.agent.drops.counts["agent.event_channel_full"], 2);
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["schema"], SCHEMA);
    assert_eq!(json["nodes"][1]["tier"], "cxl");
}

#[test]
fn pages_of_an_unknown_node_are_named_unknown_never_by_the_slots_number() {
    use tierscope_common::maps::NODE_UNKNOWN;
    let nodes = vec![NodeInfo { id: 0, tier: "dram".into(), ..Default::default() }];
    let mut m = Model::default();
    m.apply_reading(&CounterReading {
        at_ns: 1,
        faults: [(10, 5)].into(),
        allocs: [((10, 0), 64), ((10, NODE_UNKNOWN), 32)].into(),
        frees_by_node: [(NODE_UNKNOWN, 8)].into(),
        ..Default::default()
    });
    let s = build(&m, &ProcessFilter { pids: vec![10], pattern: None }, ctx(&nodes));
    assert_eq!(s.unknown_node_pages, UnknownNodePages { alloc_pages: 32, freed_pages: 8 });
    let json = serde_json::to_value(&s).unwrap();
    let by_node = &json["processes"][0]["alloc_pages_by_node"];
    assert_eq!((by_node["0"].as_u64(), by_node["unknown"].as_u64()), (Some(64), Some(32)), "{by_node}");
    assert!(!json.to_string().contains(&format!("\"{NODE_UNKNOWN}\"")), "the slot's number is never a key");
    assert_eq!(json["unknown_node_pages"]["alloc_pages"], 32);
    assert_eq!(json["nodes"].as_array().map(Vec::len), Some(1), "no node is made up for it");
}

#[test]
fn faults_are_the_kernels_count_split_by_path() {
    use crate::model::faults::KernelFaults;
    let mut m = Model::default();
    let mut r = CounterReading { at_ns: 1, faults: [(10, 3_000)].into(), ..Default::default() };
    r.faults_kernel_mode.insert(10, 100);
    r.live_faults.insert(10, KernelFaults { minor: 31_000, major: 21 });
    m.apply_reading(&r);
    let s = build(&m, &ProcessFilter { pids: vec![10], pattern: None }, ctx(&[]));
    let p = &s.processes[0];
    assert_eq!(p.faults, 31_021);
    assert_eq!(p.faults_by_path, FaultsByPath { cpu_user: 2_900, cpu_kernel: 100, on_behalf: 28_021 });
    assert_eq!(p.major_faults, 21);
    let json = serde_json::to_value(p).expect("process JSON");
    assert_eq!(json["faults_by_path"]["on_behalf"], 28_021);
    assert_eq!(json["major_faults"], 21);
}

#[test]
fn no_filter_means_active_processes_busiest_first() {
    let mut m = Model::default();
    m.apply_reading(&CounterReading { at_ns: 1, faults: [(1, 5), (2, 50)].into(), ..Default::default() });
    m.set_identity(3, "idle", "", 1);
    let s = build(&m, &ProcessFilter::default(), ctx(&[]));
    assert_eq!(s.processes.iter().map(|p| p.pid).collect::<Vec<_>>(), vec![2, 1]);
    let re = ProcessFilter { pids: vec![], pattern: Some(Regex::new("^idl").unwrap()) };
    assert_eq!(build(&m, &re, ctx(&[])).processes.len(), 1);
}

#[test]
fn site_sampling_balances_attempts_against_outcomes() {
    let mut m = Model::default();
    for (k, v) in [
        ("site_attempts", 110),
        ("site_delivered", 60),
        ("site_no_user_stack", 5),
        ("site_rate_limited", 30),
        ("site_not_watched", 10),
        ("site_ring_full", 4),
        ("site_stack_error", 1),
    ] {
        m.kernel_stats.insert(k, v);
    }
    let s = SiteSampling::of(&m, 1, 200, 0, Default::default());
    assert_eq!((s.attempts, s.delivered, s.not_watched, s.unaccounted), (110, 60, 10, 0));
    m.kernel_stats.insert("site_attempts", 113);
    assert_eq!(SiteSampling::of(&m, 1, 200, 0, Default::default()).unaccounted, 3, "a lost attempt shows");
    let snap = build(&m, &ProcessFilter::default(), ctx(&[]));
    assert_eq!(snap.agent.drops.counts.get("kernel.site_ring_full"), Some(&4));
    assert!(!snap.agent.drops.counts.contains_key("kernel.site_attempts"), "attempts are not losses");
    assert!(
        !snap.agent.drops.counts.contains_key("kernel.site_not_watched"),
        "unwatched processes are skipped on purpose"
    );
    assert_eq!(snap.agent.site_sampling.samples_per_sec, 100);
}

#[test]
fn recursion_misses_show_under_drops_per_program_and_in_total() {
    use crate::model::agent::{Attach, ProgramCounterReading};
    let mut m = Model::default();
    let programs = [("page_fault_user", Attach::Attached), ("mm_page_alloc", Attach::Attached)]
        .map(|(name, status)| ProgramStatus { name, hook: String::new(), feature: "", status, reason: None });
    let n = |name: &str| if name == "mm_page_alloc" { 12 } else { 0 };
    let read = ProgramCounterReading::of_attached(&programs, |p| {
        Some(ProgramCounters { recursion_misses: n(p.name), runs: 100, run_ns: 5_000 })
    });
    let kernel_stats = [("ringbuf_full", 7)].into();
    m.apply_reading(&CounterReading { at_ns: 1, program_counters: read, kernel_stats, ..Default::default() });
    let json = serde_json::to_value(build(&m, &ProcessFilter::default(), ctx(&[]))).expect("snapshot JSON");
    let drops = &json["agent"]["drops"];
    assert_eq!(drops["kernel.ringbuf_full"], 7, "the named counters stay where they were: {drops}");
    assert_eq!(
        drops["recursion_misses"],
        serde_json::json!({"total": 12, "by_program": {"mm_page_alloc": 12, "page_fault_user": 0}})
    );
    assert_eq!(json["agent"]["program_counters"]["page_fault_user"]["runs"], 100);
}
