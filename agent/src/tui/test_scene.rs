//! Model values for the view tests: a two-socket node with one CXL expander and two training
//! ranks (one the demo), built through the model's public entry points as the collector would.
use std::collections::BTreeMap;

use crate::{
    model::{
        agent::{Attach, ProgramStatus},
        event::{Event, NumaMove, NumaMoveKind, PolicyDecision},
        faults::KernelFaults,
        migration::MigrationTotals,
        reading::CounterReading,
        residency::NumaResidency,
        snapshot::ProcessFilter,
        Model,
    },
    topology::{CxlMemdev, CxlRegion, EdacMc, Tier},
};

use super::{probe::TierProbe, DemoInfo, Devices, History, NodeView, Scene};

pub const S: u64 = 1_000_000_000;
/// The process [`Fixture::with_departed`] adds: it exited and was pruned from the model.
pub const DEPARTED_PID: u32 = 4300;
pub const DEPARTED_EXIT_NS: u64 = 91 * S;
const GIB: u64 = 1 << 30;

pub struct Fixture {
    pub model: Model,
    pub history: History,
    pub nodes: Vec<NodeView>,
    pub devices: Devices,
    pub programs: Vec<ProgramStatus>,
    pub filter: ProcessFilter,
    pub demo: Option<DemoInfo>,
    pub now_ns: u64,
    pub probe: TierProbe,
}

fn node(id: u32, tier: Tier, evidence: &str, cpus: usize, total_gib: u64, free_bytes: u64) -> NodeView {
    NodeView {
        id,
        tier,
        tier_evidence: evidence.into(),
        cpus,
        mem_total_bytes: Some(total_gib * GIB),
        mem_free_bytes: Some(free_bytes),
    }
}

fn programs() -> Vec<ProgramStatus> {
    let p = |name, hook: &str, feature, status, reason: Option<&str>| ProgramStatus {
        name,
        hook: hook.into(),
        feature,
        status,
        reason: reason.map(str::to_string),
    };
    vec![
        p("page_fault_user", "tp_btf exceptions:page_fault_user", "faults", Attach::Attached, None),
        p("mm_page_alloc", "tracepoint kmem:mm_page_alloc", "page allocations", Attach::Attached, None),
        p("mm_migrate_pages", "tracepoint migrate:mm_migrate_pages", "migrations", Attach::Attached, None),
        p(
            "fault_latency_exit",
            "fexit handle_mm_fault",
            "fault latency",
            Attach::Unsupported,
            Some("the kernel refuses fexit here (EPERM)"),
        ),
    ]
}

impl Fixture {
    pub fn empty() -> Fixture {
        Fixture {
            model: Model::default(),
            history: History::default(),
            nodes: vec![node(0, Tier::Dram, "only node, has CPUs", 2, 6, 3 * GIB)],
            devices: Devices::default(),
            programs: programs(),
            filter: ProcessFilter::default(),
            demo: None,
            now_ns: 5 * S,
            probe: TierProbe::NotRun,
        }
    }

    pub fn training() -> Fixture {
        let mut model = Model::default();
        let mut history = History::default();
        let mut nodes = Vec::new();
        for i in 0..=12u64 {
            let at = (90 + i) * S;
            let mut r = CounterReading { at_ns: at, ..Default::default() };
            r.faults.insert(4242, 40_000 + 1000 * i);
            // The kernel's own count: 8,000 more, the pinned buffer its CUDA driver faulted in.
            r.faults_kernel_mode.insert(4242, 300 + 10 * i);
            r.live_faults.insert(4242, KernelFaults { minor: 47_990 + 1000 * i, major: 10 });
            r.faults.insert(4243, 15_000 + 500 * i);
            r.faults.insert(1200, 10 * i);
            r.allocs.insert((4242, 0), 5_000 + 500 * i);
            r.allocs.insert((4242, 2), 1_000 + 250 * i);
            r.allocs.insert((4243, 0), 2_000 + 100 * i);
            r.allocs.insert((4243, 2), 3_000 + 400 * i);
            r.allocs.insert((1200, 1), 50 + i);
            r.frees_by_node = BTreeMap::from([(0, 4_000 + 450 * i), (1, 40), (2, 3_000 + 600 * i)]);
            let m = |succeeded| MigrationTotals { calls: succeeded / 64, succeeded, failed: 0, ..Default::default() };
            r.migrations.insert((4242, 5, 0), m(i * i * 640 / 144));
            r.migrations.insert((4243, 5, 0), m(i * 100));
            r.migrations.insert((75, 8, 0), m(i * i * 30));
            r.migrations
                .insert((75, 0, 0), MigrationTotals { calls: 3, succeeded: 90, failed: 6, ..Default::default() });
            let mut lat = vec![0u64; 32];
            lat[13] = 40 + i;
            lat[15] = 7;
            lat[21] = 1;
            r.migrate_latency.insert(5, lat.clone());
            lat[13] = 0;
            lat[17] = 300 + i;
            r.migrate_latency.insert(8, lat);
            model.apply_reading(&r);
            if i == 0 {
                model.set_identity(4242, "python3", "python3 train.py --rank 0 --model llama-7b", 1);
                model.set_identity(4243, "python3", "python3 train.py --rank 1 --model llama-7b", 1);
                model.set_identity(1200, "redis-server", "/usr/bin/redis-server *:6379", 1);
                model.set_identity(75, "kswapd0", "", 2);
                let rank = |r| crate::model::job::Rank { rank: Some(r), local_rank: Some(r), world_size: Some(2) };
                let worker = Some(crate::model::job::TrainingRole::Worker);
                model.set_training(4242, worker, rank(0), Some("llama-run-1".into()));
                model.set_training(4243, worker, rank(1), Some("llama-run-1".into()));
                model.assign_jobs();
            }
            if i == 6 {
                let res = |a: u64, b: u64| NumaResidency {
                    pages_by_node: BTreeMap::from([(0, a), (2, b)]),
                    anon_pages_by_node: BTreeMap::from([(0, a), (2, b)]),
                    ..Default::default()
                };
                model.set_residency(4242, res(2000, 1800), at);
                model.set_residency(4243, res(400, 1200), at);
            }
            if i == 12 {
                let res = |a: u64, b: u64| NumaResidency {
                    pages_by_node: BTreeMap::from([(0, a), (2, b)]),
                    ..Default::default()
                };
                model.set_residency(4242, res(3000, 1000), at - S / 2);
                model.set_residency(4243, res(500, 1500), at - S / 2);
            }
            nodes = vec![
                node(0, Tier::Dram, "has CPUs, memory_tier4", 32, 64, 20 * GIB - i * (GIB / 8)),
                node(1, Tier::Dram, "has CPUs, memory_tier4", 32, 64, 50 * GIB),
                node(2, Tier::Cxl, "CXL region region0 (dax0.0 target_node 2)", 0, 128, 100 * GIB - i * (GIB / 4)),
            ];
            history.observe(&model, &nodes, at);
        }
        model.kernel_stats.insert("agent_filtered", 496);
        // Rank 0 runs in a pod (named by its hostname), rank 1 in a podman container.
        let pod = crate::model::cgroup::parse(
            "0::/kubepods.slice/kubepods-pod8a1d2c3e_4f5a_6b7c_8d9e_0f1a2b3c4d5e.slice/cri-containerd-3f1c9a0e7b2d4c5e8f6a1b2c3d4e5f60718293a4b5c6d7e8f9012345678abcde.scope\n",
        );
        let evidence = crate::model::container::Evidence {
            cgroup: pod,
            hostname_file: Some(b"llama-train-0\n"),
            service_account_namespace: Some(b"ml"),
            ..Default::default()
        };
        model.processes.get_mut(&4242).expect("fixture").container = crate::model::container::resolve(&evidence);
        let podman = crate::model::cgroup::parse(
            "0::/libpod_parent/libpod-a18263a04de5ed0f5b8428dfd2e2f5cb1a9334d4786017922c8aae2e675a0acf\n",
        );
        let evidence = crate::model::container::Evidence { cgroup: podman, ..Default::default() };
        model.processes.get_mut(&4243).expect("fixture").container = crate::model::container::resolve(&evidence);
        if let Some(p) = model.processes.get_mut(&4242) {
            p.cxl_sites = BTreeMap::from(
                [(3, 700), (9, 250), (11, 50)]
                    .map(|(site, pages)| (site, crate::model::site::SiteTotals { pages, samples: pages / 10 })),
            );
        }
        let f = |name: &str, at: u64| crate::model::site::SiteFrame::unnamed("train", at).named(name, 0x1f);
        let mut named = crate::model::site::SiteTally::default();
        named.named.push((
            4242,
            3,
            vec![f("adam_step", 0x1200), f("optimizer_update", 0x1480), f("train_loop", 0x1900)],
        ));
        let cuda = crate::model::site::SiteFrame::unnamed("libcuda.so.1", 0x1a2b3c);
        named.named.push((4242, 9, vec![cuda, f("allocate_grad_buffer", 0x2040)]));
        // CPU samples: 30 ticks in the training step's line, 10 in the data loader's.
        model.cpu_period_ns = 20_408_163;
        model.cpu_samples_hz = 49;
        let py = |line, func: &str| crate::model::site::SiteFrame::python("/w/train.py", func, line);
        named.named.push((4242, 21, vec![py(42, "step"), py(90, "main")]));
        named.named.push((4242, 22, vec![f("memcpy", 0x3000), py(17, "load_batch"), py(91, "main")]));
        // Read in two readings a second apart: a rhythm is taken once two detections chose it.
        let mark = |i: u64| {
            let stack = if i % 4 == 3 { 22 } else { 21 };
            (4242, crate::model::site::CpuMark { ts_ns: i * 20_408_163, tid: 4242, stack, ticks: 1 })
        };
        named.cpu.extend((0..20u64).map(mark));
        let before = model.last_reading_ns;
        model.apply_sites(named);
        model.last_reading_ns = before + S;
        model.apply_sites(crate::model::site::SiteTally { cpu: (20..40u64).map(mark).collect(), ..Default::default() });
        model.last_reading_ns = before;
        model.apply_event(Event::Policy(PolicyDecision {
            tgid: 4242,
            tid: 4242,
            ts_ns: 95 * S,
            syscall: "mbind",
            mode: Some("MPOL_BIND".into()),
            flags: vec!["MPOL_MF_MOVE"],
            nodes: vec![2],
            start: Some(0x7f00_0000_0000),
            len: Some(256 << 20),
            target_pid: None,
        }));
        model.apply_event(Event::NumaMove(NumaMove {
            kind: NumaMoveKind::Swap,
            tgid: 4243,
            pid: 4250,
            src_nid: 1,
            dst_nid: 0,
            ts_ns: 99 * S,
        }));
        health(&mut model);
        unplug(&mut model);
        tiering(&mut model);
        let devices = Devices {
            memdevs: vec![CxlMemdev {
                name: "mem0".into(),
                serial: Some(0x1234_5678),
                firmware_version: Some("BWFW VERSION 00".into()),
                ram_size_bytes: Some(128 * GIB),
                pmem_size_bytes: None,
                numa_node: Some(0),
                regions: vec!["region0".into()],
            }],
            regions: vec![CxlRegion {
                name: "region0".into(),
                mode: Some("ram".into()),
                size_bytes: Some(128 * GIB),
                nodes: vec![2],
                memdevs: vec!["mem0".into()],
                ..Default::default()
            }],
            edac: vec![EdacMc {
                name: "mc0".into(),
                mc_name: Some("Skylake Socket#0 IMC#0".into()),
                ce_count: Some(3),
                ue_count: Some(0),
            }],
        };
        Fixture {
            model,
            history,
            nodes,
            devices,
            programs: programs(),
            filter: ProcessFilter::default(),
            demo: Some(DemoInfo { pid: 4242, placement: "optimizer state bound to node 2 (cxl)".into() }),
            now_ns: 103 * S,
            probe: probe_done(),
        }
    }

    /// Adds a data loader that faulted 7,000 times, exited at 91 s and was pruned from the model;
    /// the window `top` keeps open (as long as its history) still holds its final record.
    pub fn with_departed(mut self) -> Fixture {
        let _window = self.model.departed.open_window(0);
        self.model.set_identity(DEPARTED_PID, "pt_loader", "python3 -m loader --shard 3", 4242);
        let p = self.model.processes.get_mut(&DEPARTED_PID).expect("just named");
        p.faults = 7_000;
        p.fault_rate = 350.0;
        p.exited_at_ns = Some(DEPARTED_EXIT_NS);
        let pruned = self.model.prune_exited(self.now_ns, S);
        assert_eq!(pruned, vec![DEPARTED_PID], "the fixture's departed process left the model");
        self
    }

    pub fn scene(&self) -> Scene<'_> {
        Scene {
            model: &self.model,
            history: &self.history,
            nodes: &self.nodes,
            devices: &self.devices,
            programs: &self.programs,
            filter: &self.filter,
            demo: self.demo.as_ref(),
            page_size: 4096,
            now_ns: self.now_ns,
            channel_dropped: 0,
            host: "gpu-node-07",
            probe: &self.probe,
        }
    }
}

/// The expander's health: Get Health Info says life used is at warning level; a DRAM event with
/// an address on node 2 (where both ranks have memory) and a corrected EDAC error.
fn health(model: &mut Model) {
    use crate::health::{
        edac::EdacCounts,
        event::{HealthEvent, HealthKind},
        mailbox::{parse_health_info, HealthInfoResult},
        meaning::Severity,
    };
    let mem0 = CxlMemdev {
        name: "mem0".into(),
        serial: Some(0x1234_5678),
        ram_size_bytes: Some(128 * GIB),
        regions: vec!["region0".into()],
        ..Default::default()
    };
    model.health.set_inventory(true, &[(mem0, vec![2])]);
    model.health.address_map.regions = vec![(0x10_0000_0000, 128 * GIB, 2)];
    // Maintenance needed, media normal, life used at warning, 87% used, 41 °C, 2 dirty
    // shutdowns, 300 corrected volatile and 1 corrected persistent error.
    let mut p = vec![0u8; crate::health::mailbox::HEALTH_INFO_LEN];
    p[0] = 1;
    p[2] = 1;
    p[3] = 87;
    p[4..6].copy_from_slice(&41u16.to_le_bytes());
    p[6..10].copy_from_slice(&2u32.to_le_bytes());
    p[10..14].copy_from_slice(&300u32.to_le_bytes());
    p[14..18].copy_from_slice(&1u32.to_le_bytes());
    model.health.set_health_info("mem0", HealthInfoResult::Ok(parse_health_info(&p).expect("payload")));
    let event = |kind,
                 tracepoint: &str,
                 ts_s: u64,
                 severity,
                 device: &str,
                 hpa: Option<u64>,
                 dpa: Option<u64>,
                 summary: &str| HealthEvent {
        kind,
        tracepoint: tracepoint.into(),
        ts_ns: ts_s * S,
        pid: 0,
        severity,
        device: Some(device.into()),
        serial: None,
        hpa,
        dpa,
        length: None,
        region: hpa.map(|_| "region0".into()),
        node: None,
        summary: summary.into(),
        decoded: BTreeMap::new(),
        fields: BTreeMap::new(),
    };
    model.health.apply(event(
        HealthKind::Dram,
        "cxl:cxl_dram",
        97,
        Severity::Warning,
        "mem0",
        Some(0x10_0004_2000),
        Some(0x4_2000),
        "DRAM ECC Error during Host Read at dpa 0x42000",
    ));
    model.health.apply(event(
        HealthKind::McEvent,
        "ras:mc_event",
        101,
        Severity::Warning,
        "mc0",
        None,
        None,
        "1 Corrected error on mc0 (DIMM_A1)",
    ));
    model.health.edac = vec![
        EdacCounts {
            name: "mc0".into(),
            label: Some("Skylake Socket#0 IMC#0".into()),
            ce_count: Some(3),
            ue_count: Some(0),
        },
        EdacCounts { name: "mc0/dimm0".into(), label: Some("DIMM_A1".into()), ce_count: Some(3), ue_count: Some(0) },
    ];
}

/// Kernel tiering counters over three readings: NUMA balancing promoting to node 0, kswapd
/// demoting from it.
fn tiering(model: &mut Model) {
    use crate::model::tiering::VmstatReading;
    let m =
        |pairs: &[(&str, u64)]| -> BTreeMap<String, u64> { pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect() };
    for (at, i) in [(90, 0u64), (101, 1), (102, 2)] {
        model.tiering.apply(VmstatReading {
            at_ns: at * S,
            system: m(&[
                ("numa_hint_faults", 10_000 + 2_400 * i),
                ("numa_hint_faults_local", 8_000 + 1_800 * i),
                ("pgpromote_candidate", 1_000 + 200 * i),
                ("pgpromote_success", 700 + 150 * i),
                ("pgdemote_kswapd", 5_000 + 60 * i),
                ("pgdemote_direct", 40),
            ]),
            by_node: [
                (
                    0,
                    m(&[
                        ("pgpromote_success", 700 + 150 * i),
                        ("pgpromote_candidate", 1_000 + 200 * i),
                        ("pgdemote_kswapd", 5_000 + 60 * i),
                        ("pgdemote_direct", 40),
                    ]),
                ),
                (
                    2,
                    m(&[
                        ("pgpromote_success", 0),
                        ("pgpromote_candidate", 0),
                        ("pgdemote_kswapd", 0),
                        ("pgdemote_direct", 0),
                    ]),
                ),
            ]
            .into(),
        });
    }
}

/// A finished probe: DRAM nodes 0 and 1, the CXL node 2, with HMAT figures that rank as measured.
pub fn probe_done() -> TierProbe {
    use super::probe::tests::{node_result, one_node_report};
    let parts = vec![
        one_node_report(node_result(0, Tier::Dram, 92.4, 21.3, Some((90, 23.8)))),
        one_node_report(node_result(1, Tier::Dram, 139.8, 17.9, Some((140, 19.2)))),
        one_node_report(node_result(2, Tier::Cxl, 262.1, 7.8, Some((270, 8.5)))),
    ];
    TierProbe::Done { report: super::probe::combine(parts, vec![]), finished_ns: 98 * S, took_ns: 21 * S }
}

/// The nodes' memory blocks (DRAM in ZONE_NORMAL, the expander's node in ZONE_MOVABLE) and
/// rank 1's pinned buffer on the expander: the Health view's unplug section.
fn unplug(model: &mut Model) {
    use crate::{model::unplug::NodeMemory, topology::hotplug::NodeBlocks};
    let blocks = |n: u64, movable: bool| NodeBlocks {
        block_size_bytes: 1 << 30,
        blocks: n,
        online: n,
        online_movable: if movable { n } else { 0 },
        online_kernel: if movable { BTreeMap::new() } else { BTreeMap::from([("Normal".to_string(), n)]) },
        ..Default::default()
    };
    model.node_memory = [(0, "dram", 64, 19, false), (1, "dram", 64, 50, false), (2, "cxl", 128, 97, true)]
        .map(|(id, tier, total, free, movable)| NodeMemory {
            id,
            tier: tier.into(),
            total_bytes: Some(total * GIB),
            free_bytes: Some(free * GIB),
            blocks: Some(blocks(total, movable)),
        })
        .to_vec();
    if let Some(p) = model.processes.get_mut(&4243) {
        p.pinned = Some(crate::model::pinned::PinnedMemory {
            bytes_by_node: BTreeMap::from([(2, 6 * GIB / 10)]),
            cuda_host_alloc_bytes: 6 * GIB / 10,
            ..Default::default()
        });
    }
}
