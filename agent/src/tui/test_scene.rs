//! Model values for the view tests: a two-socket node with one CXL expander and two training
//! ranks (one the demo), built through the model's public entry points as the collector would.
use std::collections::BTreeMap;

use crate::{
    collect::procfs::NumaResidency,
    model::{
        agent::{Attach, ProgramStatus},
        event::{Event, NumaMove, NumaMoveKind, PolicyDecision},
        migration::MigrationTotals,
        reading::CounterReading,
        snapshot::ProcessFilter,
        Model,
    },
    topology::{CxlMemdev, CxlRegion, EdacMc, Tier},
};

use super::{DemoInfo, Devices, History, NodeView, Scene};

pub const S: u64 = 1_000_000_000;
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
            r.migrations.insert((75, 0, 0), MigrationTotals { calls: 3, succeeded: 90, failed: 6, ..Default::default() });
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
        if let Some(p) = model.processes.get_mut(&4242) {
            p.cxl_site_pages = BTreeMap::from([(3, 700), (9, 250), (11, 50)]);
        }
        model.set_site_frames(4242, 3, vec!["adam_step".into(), "optimizer_update".into(), "train_loop".into()]);
        model.set_site_frames(4242, 9, vec!["at::empty_cpu".into(), "allocate_grad_buffer".into()]);
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
            edac: vec![EdacMc { name: "mc0".into(), mc_name: Some("Skylake Socket#0 IMC#0".into()), ce_count: Some(3), ue_count: Some(0) }],
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
        }
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
        }
    }
}
