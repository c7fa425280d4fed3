//! The mapping from model values to points, checked against the catalog.
use std::collections::BTreeSet;

use super::{
    probe::{HMAT_READ_BANDWIDTH, HMAT_READ_LATENCY, MEMORY_LATENCY, MEMORY_READ_BANDWIDTH, PROBE_ROUNDS},
    *,
};
use crate::model::{
    agent::Attach,
    container::{ContainerIdentity, Runtime},
    migration::MigrationTotals,
    reading::CounterReading,
    residency::NumaResidency,
};

pub(super) fn find<'a>(p: &'a Points, name: &str, want: &[(&str, &str)]) -> Vec<&'a Point> {
    p.get(name)
        .map(|v| {
            v.iter()
                .filter(|pt| {
                    want.iter().all(|(k, val)| {
                        pt.attributes.iter().any(|kv| kv.key.as_str() == *k && kv.value.as_str() == *val)
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

pub(super) fn one(p: &Points, name: &str, want: &[(&str, &str)]) -> Value {
    let f = find(p, name, want);
    assert_eq!(f.len(), 1, "{name} {want:?}: {f:?}");
    f[0].value
}

fn model() -> Model {
    let mut m = Model::default();
    let mut r = CounterReading {
        at_ns: 1,
        faults: [(10, 500), (11, 7), (12, 3)].into(),
        allocs: [((10, 0), 100), ((10, 2), 40), ((11, 2), 5), ((12, 2), 1)].into(),
        frees_by_node: [(0, 30)].into(),
        ..Default::default()
    };
    r.migrations.insert((10, 8, 0), MigrationTotals { calls: 2, succeeded: 64, failed: 1, ..Default::default() });
    r.migrations.insert((11, 5, 0), MigrationTotals { calls: 1, succeeded: 9, failed: 0, ..Default::default() });
    r.migrate_latency.insert(8, {
        let mut b = vec![0u64; 40];
        b[10] = 1; // ~1-2 us
        b[20] = 1; // ~1-2 ms
        b
    });
    r.kernel_stats.insert("map_full", 3);
    r.kernel_stats.insert("ringbuf_full", 2);
    r.kernel_stats.insert("agent_filtered", 999);
    r.kernel_stats.insert("site_attempts", 12);
    r.kernel_stats.insert("site_delivered", 10);
    r.kernel_stats.insert("site_ring_full", 2);
    m.apply_reading(&r);
    m.set_identity(10, "python3", "python3 train.py", 1);
    m.set_residency(10, NumaResidency { pages_by_node: [(0, 256), (2, 1024)].into(), ..Default::default() }, 1);
    // Pinned by the CUDA driver on the CXL node; an untracked process's pinning has no series.
    for (pid, bytes) in [(10, 2u64 << 30), (11, 1 << 20)] {
        if let Some(p) = m.processes.get_mut(&pid) {
            p.pinned = Some(crate::model::pinned::PinnedMemory {
                bytes_by_node: [(2, bytes)].into(),
                cuda_host_alloc_bytes: bytes,
                ..Default::default()
            });
        }
    }
    m
}

fn nodes() -> Vec<NodeState> {
    vec![
        NodeState {
            id: 0,
            tier: "dram".into(),
            total_bytes: Some(1 << 30),
            free_bytes: Some(1 << 29),
            vmstat: [
                ("pgdemote_kswapd".into(), 77),
                ("numa_hit".into(), 5),
                ("pgpromote_candidate".into(), 12),
                ("numa_pages_migrated".into(), 4),
            ]
            .into(),
        },
        NodeState { id: 2, tier: "cxl".into(), total_bytes: Some(1 << 31), free_bytes: None, vmstat: BTreeMap::new() },
    ]
}

/// The points of `m` with nothing tracked (every process in `other`), no probe, no vmstat.
fn untracked_points(m: &Model, h: &AgentHealth) -> Points {
    let other = crate::export::other::OtherFold::default().totals(m, |_| false);
    points(&ExportInput {
        model: m,
        nodes: &nodes(),
        tracked: &BTreeMap::new(),
        other: &other,
        page_size: 4096,
        health: h,
        system_vmstat: &BTreeMap::new(),
        probe: None,
        resident_shares: false,
    })
}

fn run(tracked: &BTreeMap<u32, Tracked>) -> Points {
    let m = model();
    let n = nodes();
    let h = AgentHealth {
        programs: vec![ProgramStatus {
            name: "a",
            hook: "h".into(),
            feature: "f",
            status: Attach::Unsupported,
            reason: None,
        }],
        channel_full: 4,
        undecodable: 1,
        scan_seconds: 0.25,
        scans: 3,
        tracking_refused: 2,
    };
    let sys: BTreeMap<String, u64> =
        [("numa_hint_faults".into(), 1000), ("numa_hint_faults_local".into(), 900), ("numa_hit".into(), 5)].into();
    let other = crate::export::other::OtherFold::default().totals(&m, |p| tracked.contains_key(&p));
    points(&ExportInput {
        model: &m,
        nodes: &n,
        tracked,
        other: &other,
        page_size: 4096,
        health: &h,
        system_vmstat: &sys,
        probe: Some(&probe_state()),
        resident_shares: false,
    })
}

fn probe_state() -> ProbeState {
    use crate::latency::{stats::Repeats, HmatFigures, NodeResult};
    use crate::topology::Tier;
    let node = |id: u32, tier: Tier, lat: &[f64], bw: &[f64], hmat: Option<HmatFigures>| NodeResult {
        node: id,
        tier,
        initiator_node: 0,
        cpu: 3,
        buffer_bytes: 256 << 20,
        huge_page_bytes: 2 << 20,
        on_node_pct: 100.0,
        latency_ns: Repeats::of(lat).unwrap_or(Repeats {
            median: 0.0,
            min: 0.0,
            max: 0.0,
            spread_pct: 0.0,
            samples: vec![],
        }),
        bandwidth_gbps: Repeats::of(bw).unwrap(),
        bandwidth_threads: 4,
        hmat,
    };
    ProbeState {
        nodes: vec![
            node(0, Tier::Dram, &[90.0, 100.0, 110.0], &[20.0, 21.0, 22.0], None),
            node(
                2,
                Tier::Cxl,
                &[250.0],
                &[8.0],
                Some(HmatFigures { read_latency_ns: Some(240), read_bandwidth_gbps: None }),
            ),
            // A round with no latency sample for the node: no latency series, not 0.
            node(3, Tier::Cxl, &[], &[5.0], None),
        ],
        completed: 4,
        skipped: 2,
        failed: 1,
    }
}

#[test]
fn probe_results_map_to_base_units_per_node_and_tier() {
    let p = run(&BTreeMap::new());
    let f = |v: Value| match v {
        Value::F64(x) => x,
        other => panic!("{other:?}"),
    };
    let lat = f(one(&p, "tierscope.memory.latency", &[(NODE, "0"), (TIER, "dram")]));
    assert!((lat - 100e-9).abs() < 1e-15, "{lat}");
    let bw = f(one(&p, "tierscope.memory.read_bandwidth", &[(NODE, "2"), (TIER, "cxl")]));
    assert!((bw - 8e9).abs() < 1.0, "{bw}");
    let hmat = f(one(&p, "tierscope.memory.hmat.read_latency", &[(NODE, "2"), (TIER, "cxl")]));
    assert!((hmat - 240e-9).abs() < 1e-15, "{hmat}");
    assert_eq!(find(&p, "tierscope.memory.latency", &[]).len(), 2, "node 3 had no latency sample");
    assert_eq!(find(&p, "tierscope.memory.read_bandwidth", &[]).len(), 3);
    assert_eq!(find(&p, "tierscope.memory.hmat.read_latency", &[]).len(), 1, "only where HMAT says");
    assert!(find(&p, "tierscope.memory.hmat.read_bandwidth", &[]).is_empty(), "HMAT gave no bandwidth");
    assert_eq!(one(&p, "tierscope.agent.probe.rounds", &[(PROBE_OUTCOME, "skipped")]), Value::U64(2));
    assert_eq!(one(&p, "tierscope.agent.probe.rounds", &[(PROBE_OUTCOME, "completed")]), Value::U64(4));

    // The probe off: none of its series, not zeros.
    let m = model();
    let (n, h, sys) = (nodes(), AgentHealth::default(), BTreeMap::new());
    let tracked = BTreeMap::new();
    let other = Default::default();
    let off = points(&ExportInput {
        model: &m,
        nodes: &n,
        tracked: &tracked,
        other: &other,
        page_size: 4096,
        health: &h,
        system_vmstat: &sys,
        probe: None,
        resident_shares: false,
    });
    for d in [MEMORY_LATENCY, MEMORY_READ_BANDWIDTH, HMAT_READ_LATENCY, HMAT_READ_BANDWIDTH, PROBE_ROUNDS] {
        assert!(!off.contains_key(d.name), "{} present with the probe off", d.name);
    }
}

#[test]
fn tracked_processes_get_series_and_the_rest_fold_into_other() {
    let tracked =
        BTreeMap::from([(10, Tracked { pid: 10, executable: "python3".into(), rank: Some(3), ..Default::default() })]);
    let p = run(&tracked);
    assert_eq!(one(&p, "tierscope.process.faults", &[(PID, "10"), (RANK, "3")]), Value::U64(500));
    assert_eq!(one(&p, "tierscope.process.faults", &[(EXE, OTHER)]), Value::U64(10));
    assert_eq!(p["tierscope.process.faults"].len(), 2);
    // Without the kernel's counters (none in this reading) the tracepoints are the total.
    let path = |pid: Option<&'static str>, path: &'static str| {
        let mut at = vec![(FAULT_PATH, path)];
        at.push(pid.map_or((EXE, OTHER), |pid| (PID, pid)));
        one(&p, "tierscope.process.faults.by_path", &at)
    };
    assert_eq!(path(Some("10"), "cpu_user"), Value::U64(500));
    assert_eq!(path(Some("10"), "on_behalf"), Value::U64(0));
    assert_eq!(path(None, "cpu_user"), Value::U64(10));
    assert_eq!(p["tierscope.process.faults.by_path"].len(), 6);
    assert_eq!(one(&p, "tierscope.process.faults.major", &[(PID, "10")]), Value::U64(0));
    assert_eq!(
        one(&p, "tierscope.process.page.allocations", &[(PID, "10"), (NODE, "2"), (TIER, "cxl")]),
        Value::U64(40)
    );
    assert_eq!(one(&p, "tierscope.process.page.allocations", &[(EXE, OTHER), (NODE, "2")]), Value::U64(6));
    assert_eq!(one(&p, "tierscope.process.memory.resident", &[(PID, "10"), (TIER, "cxl")]), Value::U64(1024 * 4096));
    assert_eq!(one(&p, "tierscope.process.memory.resident", &[(PID, "10"), (TIER, "dram")]), Value::U64(256 * 4096));
    assert_eq!(
        one(&p, "tierscope.process.memory.pinned", &[(PID, "10"), (NODE, "2"), (TIER, "cxl")]),
        Value::U64(2 << 30)
    );
    assert_eq!(p["tierscope.process.memory.pinned"].len(), 1, "only the tracked process's pinned memory");
    assert_eq!(
        one(&p, "tierscope.process.migrations", &[(PID, "10"), (REASON, "demotion"), (RESULT, "succeeded")]),
        Value::U64(64)
    );
    assert_eq!(
        one(&p, "tierscope.process.migrations", &[(EXE, OTHER), (REASON, "numa_misplaced"), (RESULT, "succeeded")]),
        Value::U64(9)
    );
    assert_eq!(one(&p, "tierscope.agent.tracked.processes", &[]), Value::U64(1));
    // No pid on the folded series.
    assert!(find(&p, "tierscope.process.faults", &[(EXE, OTHER)])[0]
        .attributes
        .iter()
        .all(|kv| kv.key.as_str() != PID));
}

#[test]
fn nothing_tracked_still_adds_up() {
    let p = run(&BTreeMap::new());
    assert_eq!(p["tierscope.process.faults"].len(), 1);
    assert_eq!(one(&p, "tierscope.process.faults", &[(EXE, OTHER)]), Value::U64(510));
    assert!(!p.contains_key("tierscope.process.memory.resident"));
    assert!(!p.contains_key("tierscope.process.memory.pinned"));
}

#[test]
fn nodes_migrations_and_health() {
    let p = run(&BTreeMap::new());
    assert_eq!(one(&p, "tierscope.node.memory.capacity", &[(NODE, "2"), (TIER, "cxl")]), Value::U64(1 << 31));
    assert!(find(&p, "tierscope.node.memory.free", &[(NODE, "2")]).is_empty(), "unknown free is not exported as 0");
    assert_eq!(one(&p, "tierscope.node.page.allocations", &[(NODE, "0")]), Value::U64(100));
    assert_eq!(one(&p, "tierscope.node.page.frees", &[(NODE, "0")]), Value::U64(30));
    assert_eq!(one(&p, "tierscope.node.page.frees", &[(NODE, "2")]), Value::U64(0));
    assert_eq!(one(&p, "tierscope.node.tiering.pages", &[(VMSTAT, "pgdemote_kswapd")]), Value::U64(77));
    assert!(find(&p, "tierscope.node.tiering.pages", &[(VMSTAT, "numa_hit")]).is_empty());
    assert_eq!(
        one(&p, "tierscope.node.tiering.pages", &[(NODE, "0"), (VMSTAT, "pgpromote_candidate")]),
        Value::U64(12)
    );
    assert_eq!(one(&p, "tierscope.node.tiering.pages", &[(NODE, "0"), (VMSTAT, "numa_pages_migrated")]), Value::U64(4));
    assert_eq!(one(&p, "tierscope.memory.numa.hint_faults", &[(VMSTAT, "numa_hint_faults")]), Value::U64(1000));
    assert_eq!(one(&p, "tierscope.memory.numa.hint_faults", &[(VMSTAT, "numa_hint_faults_local")]), Value::U64(900));
    assert_eq!(p["tierscope.memory.numa.hint_faults"].len(), 2, "only the hint fault counters");
    // No devices, no EDAC: no hw.* series, but the event counters exist (at 0).
    assert!(!p.contains_key("hw.status") && !p.contains_key("hw.errors"));
    assert_eq!(one(&p, "tierscope.health.events", &[(HEALTH_KIND, "mc_event")]), Value::U64(0));
    assert_eq!(one(&p, "tierscope.health.event.severities", &[(HEALTH_SEVERITY, "fatal")]), Value::U64(0));
    assert_eq!(one(&p, "tierscope.memory.migrations", &[(REASON, "demotion"), (RESULT, "failed")]), Value::U64(1));
    assert_eq!(one(&p, "tierscope.memory.migration.calls", &[(REASON, "demotion")]), Value::U64(2));
    let Value::F64(max) = one(&p, "tierscope.memory.migration.duration", &[(REASON, "demotion"), (QUANTILE, "1")])
    else {
        panic!("duration is not f64")
    };
    assert!((0.001..0.0022).contains(&max), "max {max}");
    assert_eq!(one(&p, "tierscope.agent.kernel.dropped", &[(DROP_REASON, "map_full")]), Value::U64(3));
    assert!(find(&p, "tierscope.agent.kernel.dropped", &[(DROP_REASON, "agent_filtered")]).is_empty());
    // Site samples are their own series, attempts beside their outcomes, never "drops".
    assert_eq!(one(&p, "tierscope.agent.site.samples", &[(SITE_OUTCOME, "attempt")]), Value::U64(12));
    assert_eq!(one(&p, "tierscope.agent.site.samples", &[(SITE_OUTCOME, "ring_full")]), Value::U64(2));
    assert!(find(&p, "tierscope.agent.kernel.dropped", &[(DROP_REASON, "site_delivered")]).is_empty());
    assert_eq!(one(&p, "tierscope.agent.ringbuf.lost", &[(DROP_REASON, "ringbuf_full")]), Value::U64(2));
    assert_eq!(one(&p, "tierscope.agent.ringbuf.lost", &[(DROP_REASON, "channel_full")]), Value::U64(4));
    assert_eq!(one(&p, "tierscope.agent.programs", &[(PROGRAM_STATUS, "unsupported")]), Value::U64(1));
    assert_eq!(one(&p, "tierscope.agent.programs", &[(PROGRAM_STATUS, "attached")]), Value::U64(0));
    assert_eq!(one(&p, "tierscope.agent.scan.duration", &[]), Value::F64(0.25));
}

#[test]
fn every_point_belongs_to_a_cataloged_metric_with_its_declared_attributes() {
    let tracked = BTreeMap::from([(
        10,
        Tracked {
            pid: 10,
            executable: "python3".into(),
            job: Some("j".into()),
            rank: Some(0),
            container: ContainerIdentity {
                id: Some("c".into()),
                runtime: Some(Runtime::Containerd),
                pod_uid: Some("u".into()),
                pod_name: Some("p".into()),
                pod_namespace: Some("ns".into()),
                name: Some("trainer".into()),
                ..Default::default()
            },
        },
    )]);
    let p = run(&tracked);
    // Every container and pod attribute is on the process series (semantic-convention names).
    let faults = &p[process::PROCESS_FAULTS.name];
    let mine = faults.iter().find(|pt| pt.attributes.iter().any(|kv| kv.key.as_str() == PID)).expect("pid 10's point");
    for (k, v) in [
        ("container.id", "c"),
        ("container.runtime", "containerd"),
        ("container.name", "trainer"),
        ("k8s.pod.uid", "u"),
        ("k8s.pod.name", "p"),
        ("k8s.namespace.name", "ns"),
    ] {
        assert!(
            mine.attributes.iter().any(|kv| kv.key.as_str() == k && kv.value.as_str() == v),
            "{k}={v} missing: {:?}",
            mine.attributes
        );
    }
    for (name, pts) in &p {
        let def = CATALOG.iter().find(|d| d.name == *name).unwrap_or_else(|| panic!("{name} not in the catalog"));
        for pt in pts {
            for kv in &pt.attributes {
                assert!(def.attributes.contains(&kv.key.as_str()), "{name} carries undeclared {}", kv.key);
            }
            assert_eq!(matches!(pt.value, Value::F64(_)), def.float, "{name}: value type");
        }
    }
}

#[test]
fn catalog_names_follow_the_naming_rules() {
    let mut seen = BTreeSet::new();
    for d in CATALOG {
        assert!(seen.insert(d.name), "{} twice", d.name);
        // Semantic-convention names only where the convention defines exactly this metric.
        let semconv = [("hw.status", Kind::UpDownCounter, "1"), ("hw.errors", Kind::Counter, "{error}")];
        match semconv.iter().find(|(n, _, _)| *n == d.name) {
            Some((_, kind, unit)) => {
                assert_eq!((d.kind, d.unit), (*kind, *unit), "{}: instrument and unit as the convention says", d.name);
                assert!(
                    d.attributes.contains(&HW_ID) && d.attributes.contains(&HW_TYPE),
                    "{}: hw.id and hw.type are required",
                    d.name
                );
            }
            None => assert!(d.name.starts_with("tierscope."), "{}", d.name),
        }
        assert!(d.name.split('.').all(|s| !s.is_empty()), "{}", d.name);
        assert!(!d.name.ends_with("total"), "{}: the Prometheus exporter adds _total", d.name);
        assert!(!d.unit.is_empty(), "{} has no unit", d.name);
        assert!(!d.description.is_empty());
    }
}

#[test]
fn a_quiet_node_exports_every_known_label_set_at_zero() {
    // Nothing read and nothing happened yet: the counters with a known label set are all there.
    let m = Model::default();
    let h = AgentHealth::default();
    let p = untracked_points(&m, &h);
    for reason in m.names.reasons.values() {
        for result in ["succeeded", "failed"] {
            let at = [(REASON, reason.as_str()), (RESULT, result)];
            assert_eq!(one(&p, "tierscope.memory.migrations", &at), Value::U64(0), "{reason} {result}");
        }
        assert_eq!(one(&p, "tierscope.memory.migration.calls", &[(REASON, reason.as_str())]), Value::U64(0));
    }
    assert!(m.names.reasons.values().any(|r| r == "demotion"), "the fallback table names demotion");
    for reason in ["map_full", "read_failed", "pfn_unmapped", "slot_missing", "migrate_no_start", "fault_no_start"] {
        assert_eq!(one(&p, "tierscope.agent.kernel.dropped", &[(DROP_REASON, reason)]), Value::U64(0), "{reason}");
    }
    for reason in ["ringbuf_full", "channel_full", "undecodable"] {
        assert_eq!(one(&p, "tierscope.agent.ringbuf.lost", &[(DROP_REASON, reason)]), Value::U64(0), "{reason}");
    }
    for outcome in ["attempt", "delivered", "no_user_stack", "rate_limited", "ring_full", "stack_error", "not_watched"]
    {
        assert_eq!(one(&p, "tierscope.agent.site.samples", &[(SITE_OUTCOME, outcome)]), Value::U64(0), "{outcome}");
    }
    for status in ["attached", "unsupported", "failed"] {
        assert_eq!(one(&p, "tierscope.agent.programs", &[(PROGRAM_STATUS, status)]), Value::U64(0));
    }
    assert_eq!(one(&p, "tierscope.health.events", &[(HEALTH_KIND, "mc_event")]), Value::U64(0));
    // Every node the topology knows, with its tier.
    assert_eq!(one(&p, "tierscope.node.page.allocations", &[(NODE, "2"), (TIER, "cxl")]), Value::U64(0));
    // No process tracked: `other` still has the per-process counters the dashboards query, by
    // every node and every reason.
    for node in ["0", "2"] {
        let at = [(EXE, OTHER), (NODE, node)];
        assert_eq!(one(&p, "tierscope.process.page.allocations", &at), Value::U64(0), "node {node}");
    }
    for reason in m.names.reasons.values() {
        for result in ["succeeded", "failed"] {
            let at = [(EXE, OTHER), (REASON, reason.as_str()), (RESULT, result)];
            assert_eq!(one(&p, "tierscope.process.migrations", &at), Value::U64(0), "{reason} {result}");
        }
    }
    assert!(find(&p, "tierscope.process.migrations", &[]).iter().all(|pt| pt.attributes.len() == 3));
    // Migration durations: unknown (no series) while the programs that time them are not attached.
    assert!(
        !p.contains_key("tierscope.memory.migration.duration"),
        "{:?}",
        p.get("tierscope.memory.migration.duration")
    );
}

#[test]
fn migration_durations_are_zero_for_untimed_reasons_while_the_programs_are_attached() {
    use tierscope_common::names::program;
    let m = model();
    let attached = |name: &'static str, status| ProgramStatus {
        name,
        hook: "tracepoint migrate".into(),
        feature: "migrations",
        status,
        reason: None,
    };
    let export = |programs: Vec<ProgramStatus>| {
        let h = AgentHealth { programs, ..Default::default() };
        untracked_points(&m, &h)
    };
    let p = export(vec![
        attached(program::MM_MIGRATE_PAGES_START, Attach::Attached),
        attached(program::MM_MIGRATE_PAGES, Attach::Attached),
    ]);
    // Reason 8 was timed (the model's histogram); every other reason the kernel names is at 0.
    let timed = m.names.reason(8);
    let max = one(&p, "tierscope.memory.migration.duration", &[(REASON, timed.as_str()), (QUANTILE, "1")]);
    assert!(matches!(max, Value::F64(s) if s > 1e-3), "{timed}: {max:?}");
    let untimed: Vec<&String> = m.names.reasons.values().filter(|r| **r != timed).collect();
    assert!(untimed.len() >= 5, "{untimed:?}");
    for reason in untimed {
        for q in ["0.5", "0.99", "1"] {
            let at = [(REASON, reason.as_str()), (QUANTILE, q)];
            assert_eq!(one(&p, "tierscope.memory.migration.duration", &at), Value::F64(0.0), "{reason} q{q}");
        }
    }
    // One end unattached: what was timed, and no made-up zeros.
    let p = export(vec![
        attached(program::MM_MIGRATE_PAGES_START, Attach::Attached),
        attached(program::MM_MIGRATE_PAGES, Attach::Failed),
    ]);
    assert_eq!(p["tierscope.memory.migration.duration"].len(), 3, "only reason {timed}'s quantiles");
}

#[test]
fn recursion_misses_are_exported_per_attached_program_and_in_total() {
    use crate::model::agent::{ProgramCounterReading, ProgramCounters};
    let status = |name, status| ProgramStatus { name, hook: "h".into(), feature: "f", status, reason: None };
    let programs = vec![
        status("page_fault_user", Attach::Attached),
        status("mm_page_alloc", Attach::Attached),
        status("sys_enter_mbind", Attach::Attached),
        status("handle_mm_fault_exit", Attach::Unsupported),
    ];
    let mut m = Model::default();
    let program_counters = ProgramCounterReading::of_attached(&programs, |p| match p.name {
        "page_fault_user" => Some(ProgramCounters { recursion_misses: 2, runs: 0, run_ns: 0 }),
        "mm_page_alloc" => Some(ProgramCounters { recursion_misses: 30, runs: 0, run_ns: 0 }),
        _ => None,
    });
    m.apply_reading(&CounterReading { at_ns: 1, program_counters, ..Default::default() });
    let h = AgentHealth { programs, channel_full: 0, undecodable: 0, scan_seconds: 0.0, scans: 0, tracking_refused: 0 };
    let p = untracked_points(&m, &h);
    let name = "tierscope.agent.program.recursion_misses";
    assert_eq!(one(&p, name, &[(PROGRAM, "page_fault_user")]), Value::U64(2));
    assert_eq!(one(&p, name, &[(PROGRAM, "mm_page_alloc")]), Value::U64(30));
    assert_eq!(p[name].len(), 2, "no series for the unknown nor the unattached: {:?}", p[name]);
    let total = one(&p, "tierscope.agent.kernel.dropped", &[(DROP_REASON, "recursion_misses")]);
    assert_eq!(total, Value::U64(32));
}

#[test]
fn each_node_gets_its_pinned_bytes_blockers_and_one_verdict() {
    use crate::{model::unplug::NodeMemory, topology::hotplug::NodeBlocks};
    let mut m = model();
    let movable = NodeBlocks { blocks: 16, online: 16, online_movable: 16, ..Default::default() };
    m.node_memory = vec![
        NodeMemory {
            id: 0,
            tier: "dram".into(),
            total_bytes: Some(8 << 30),
            free_bytes: Some(6 << 30),
            blocks: Some(movable.clone()),
        },
        NodeMemory {
            id: 2,
            tier: "cxl".into(),
            total_bytes: Some(4 << 30),
            free_bytes: Some(3 << 30),
            blocks: Some(movable),
        },
    ];
    let h = AgentHealth::default();
    let p = untracked_points(&m, &h);
    let node = |n: &'static str| [(NODE, n)];
    // Pids 10 and 11 pinned 2 GiB + 1 MiB on node 2 through the driver; nothing on node 0.
    assert_eq!(one(&p, unplug::NODE_PINNED.name, &node("2")), Value::U64((2 << 30) + (1 << 20)));
    assert_eq!(one(&p, unplug::NODE_BLOCKERS.name, &node("2")), Value::U64(2));
    assert_eq!(one(&p, unplug::NODE_PINNED.name, &node("0")), Value::U64(0));
    let verdict =
        |n: &'static str, v: &'static str| one(&p, unplug::NODE_OFFLINE.name, &[(NODE, n), (unplug::VERDICT, v)]);
    assert_eq!(
        (verdict("2", "no"), verdict("2", "yes"), verdict("2", "uncertain")),
        (Value::U64(1), Value::U64(0), Value::U64(0))
    );
    assert_eq!((verdict("0", "yes"), verdict("0", "no")), (Value::U64(1), Value::U64(0)));
}

/// The points of a model whose page path is `view`, nothing tracked.
fn with_page_path(view: crate::model::page_path::PagePathView) -> Points {
    let mut m = model();
    m.page_path = view;
    let other = crate::export::other::OtherFold::default().totals(&m, |_| false);
    points(&ExportInput {
        model: &m,
        nodes: &nodes(),
        tracked: &BTreeMap::new(),
        other: &other,
        page_size: 4096,
        health: &AgentHealth::default(),
        system_vmstat: &BTreeMap::new(),
        probe: None,
        resident_shares: false,
    })
}

#[test]
fn the_page_path_is_an_info_series_with_bounded_labels_and_its_weight_a_gauge() {
    use crate::model::page_path::{ClockFigures, PagePathReason, PagePathView, Sampling};
    let clock = ClockFigures { weight: 16, ms_by_weight: [(16, 900)].into(), ..ClockFigures::default() };
    let chosen = "the default on a node with a CXL tier (node 2): ...".to_string();
    let sampled =
        PagePathView::at_start(Some((Sampling::DEFAULT, clock)), None, chosen, PagePathReason::DefaultCxlTier);
    let p = with_page_path(sampled);
    let info = &p["tierscope.agent.page_path.info"];
    assert_eq!(info.len(), 1, "one series: {info:?}");
    let want = [(PAGE_PATH_MODE, "sampled"), (PAGE_PATH_REASON, "default_cxl_tier")];
    assert_eq!(one(&p, "tierscope.agent.page_path.info", &want), Value::U64(1));
    assert_eq!(info[0].attributes.len(), 2, "mode and reason only (no words with node numbers)");
    assert_eq!(one(&p, "tierscope.agent.page_path.weight", &[]), Value::U64(16));
    for (name, def) in [
        ("tierscope.agent.page_path.info", agent::PAGE_PATH_INFO),
        ("tierscope.agent.page_path.weight", agent::PAGE_PATH_WEIGHT),
    ] {
        assert_eq!(def.name, name);
        assert!(CATALOG.iter().any(|d| d.name == name), "{name} in the catalog");
    }

    // Sampled wanted, not possible: exact, and why.
    let fell_back =
        PagePathView::at_start(None, Some("classic tracepoints".into()), "x".into(), PagePathReason::DefaultCxlTier);
    let p = with_page_path(fell_back);
    let want = [(PAGE_PATH_MODE, "exact"), (PAGE_PATH_REASON, "sampled_unavailable")];
    assert_eq!(one(&p, "tierscope.agent.page_path.info", &want), Value::U64(1));
    assert_eq!(one(&p, "tierscope.agent.page_path.weight", &[]), Value::U64(1), "exact: every event counts once");

    // No page path started (a replay, the demo): no series rather than a made-up mode.
    let p = with_page_path(PagePathView::default());
    assert!(!p.contains_key("tierscope.agent.page_path.info") && !p.contains_key("tierscope.agent.page_path.weight"));
}

#[test]
fn the_figures_the_sampled_page_path_estimates_say_so_and_point_at_the_info_series() {
    for d in [process::PROCESS_ALLOCATIONS, process::PROCESS_FAULTS_BY_PATH, node::NODE_ALLOCATIONS, node::NODE_FREES] {
        assert!(d.description.contains("sampled page-path mode"), "{}: {}", d.name, d.description);
        assert!(d.description.contains("tierscope.agent.page_path.info"), "{}", d.name);
    }
    // The kernel's own counts are exact in either mode: not marked.
    assert!(!process::PROCESS_FAULTS.description.contains("estimate"));
}

#[test]
fn each_container_cgroup_gets_its_bytes_by_node_and_its_tiering_counters() {
    use crate::model::cgroup_memory::{CgroupFiles, CgroupReading, FileRead, Hierarchy};
    let mut m = model();
    m.cgroups.apply(CgroupReading {
        at_ns: 1,
        hierarchy: Hierarchy::Unified,
        cgroups: vec![CgroupFiles {
            path: "/kubepods.slice/p.slice/c.scope".into(),
            identity: ContainerIdentity { pod_name: Some("trainer-0".into()), ..Default::default() },
            numa_stat: FileRead::Text("anon N0=4096 N2=8192\nfile N0=4096 N2=0\n".into()),
            memory_stat: FileRead::Text("pgpromote_success 7\nnuma_hint_faults 9\n".into()),
        }],
        over_limit: 0,
    });
    let h = AgentHealth::default();
    let p = untracked_points(&m, &h);
    let pod = (POD_NAME, "trainer-0");
    assert_eq!(one(&p, cgroups::CONTAINER_MEMORY.name, &[pod, (NODE, "0"), (TIER, "dram")]), Value::U64(8192));
    assert_eq!(one(&p, cgroups::CONTAINER_MEMORY.name, &[pod, (NODE, "2"), (TIER, "cxl")]), Value::U64(8192));
    assert_eq!(one(&p, cgroups::CONTAINER_TIERING.name, &[pod, (VMSTAT, "pgpromote_success")]), Value::U64(7));
    // A counter this kernel lacks is absent, not 0.
    assert!(find(&p, cgroups::CONTAINER_TIERING.name, &[(VMSTAT, "pgdemote_kswapd")]).is_empty());
}
