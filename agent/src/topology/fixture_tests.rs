//! Table-driven tests over the fixture trees in agent/fixtures/sysfs: `this-host` (captured
//! here), `hand-*` (the QEMU guests of testbed.md, written by hand), `odd-*` (hand-made odd
//! machines) and, once captured, `guest-*` (the real QEMU guests).
use std::{
    fs,
    path::{Path, PathBuf},
};

use super::*;

fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/sysfs")
}

fn fixture(name: &str) -> PathBuf {
    fixtures_dir().join(name)
}

/// How a node's evidence must read. Real guest captures get `Prefix` because the kernel picks
/// tier numbers for CXL nodes from device performance we do not control.
#[derive(Clone, Copy, Debug)]
enum Words {
    Exact(&'static str),
    Prefix(&'static str),
}

struct Case {
    fixture: &'static str,
    nodes: &'static [(u32, Tier, Words)],
    /// How many problem lines the tree must produce.
    problems: usize,
}

use Words::{Exact, Prefix};

const CASES: &[Case] = &[
    Case { fixture: "this-host", nodes: &[(0, Tier::Dram, Exact("only node, has CPUs"))], problems: 0 },
    Case {
        fixture: "hand-hmat",
        nodes: &[
            (0, Tier::Dram, Exact("memory_tier4 (kernel) vs slower memory_tier54")),
            (1, Tier::Cxl, Exact("memory_tier54 (kernel) vs faster memory_tier4")),
        ],
        problems: 0,
    },
    Case {
        fixture: "hand-cxl",
        nodes: &[
            (0, Tier::Dram, Exact("memory_tier4 (kernel) vs slower memory_tier22")),
            (1, Tier::Cxl, Exact("memory_tier54 (kernel) vs faster memory_tier4")),
            (2, Tier::Cxl, Exact("CXL region region0 (dax0.0 target_node 2)")),
        ],
        problems: 0,
    },
    Case {
        fixture: "odd-gaps",
        nodes: &[(0, Tier::Dram, Exact("has CPUs and memory")), (3, Tier::Far, Exact(classify::FAR_EVIDENCE))],
        // Node 0's odd memory block files (a garbage state, zones missing or garbage).
        problems: 1,
    },
    Case {
        fixture: "hand-8gpu-2s",
        nodes: &[(0, Tier::Dram, Exact("has CPUs and memory")), (1, Tier::Dram, Exact("has CPUs and memory"))],
        problems: 0,
    },
    Case {
        fixture: "hand-gh200",
        nodes: &[
            (0, Tier::Dram, Exact("has CPUs and memory")),
            (1, Tier::Gpu, Exact("memory of GPU NVIDIA GH200 480GB 0009:01:00.0 (driver numa_status: node 1, online)")),
            (2, Tier::Unknown, Exact("offline")),
            (3, Tier::Unknown, Exact("offline")),
            (4, Tier::Unknown, Exact("offline")),
            (5, Tier::Unknown, Exact("offline")),
            (6, Tier::Unknown, Exact("offline")),
            (7, Tier::Unknown, Exact("offline")),
            (8, Tier::Unknown, Exact("offline")),
            (9, Tier::Unknown, Exact("offline")),
        ],
        problems: 0,
    },
    Case {
        fixture: "hand-cpuless-bare",
        nodes: &[(0, Tier::Dram, Exact("has CPUs and memory")), (1, Tier::Far, Exact(classify::FAR_EVIDENCE))],
        problems: 0,
    },
    Case {
        fixture: "odd-memoryless",
        nodes: &[(0, Tier::Dram, Exact("has CPUs and memory")), (1, Tier::Unknown, Exact("no memory (CPUs only)"))],
        problems: 0,
    },
    Case {
        fixture: "odd-offline",
        nodes: &[
            (0, Tier::Dram, Exact("has CPUs and memory")),
            (1, Tier::Dram, Exact("has CPUs and memory")),
            (2, Tier::Unknown, Exact("offline")),
        ],
        problems: 0,
    },
    Case {
        fixture: "odd-missing",
        nodes: &[
            (0, Tier::Unknown, Exact("cannot tell: meminfo and has_memory unreadable")),
            (1, Tier::Unknown, Exact("cannot tell: cpulist and has_cpu, meminfo and has_memory unreadable")),
            (2, Tier::Unknown, Exact("cannot tell: cpulist and has_cpu, meminfo and has_memory unreadable")),
        ],
        problems: 12,
    },
    Case {
        fixture: "odd-garbage",
        nodes: &[
            // meminfo is garbage but the has_memory mask still says node 0 has memory.
            (0, Tier::Dram, Exact("has CPUs and memory")),
            (1, Tier::Unknown, Exact("cannot tell: cpulist and has_cpu unreadable")),
        ],
        problems: 14,
    },
];

/// The real QEMU guests of testbed.md, checked when their captures exist.
const GUEST_CASES: &[Case] = &[
    Case {
        fixture: "guest-hmat",
        nodes: &[
            (0, Tier::Dram, Exact("memory_tier4 (kernel) vs slower memory_tier54")),
            (1, Tier::Cxl, Exact("memory_tier54 (kernel) vs faster memory_tier4")),
        ],
        problems: 0,
    },
    Case {
        fixture: "guest-cxl",
        nodes: &[
            (0, Tier::Dram, Prefix("memory_tier4 (kernel) vs slower memory_tier")),
            (1, Tier::Cxl, Prefix("memory_tier")),
            (2, Tier::Cxl, Exact("CXL region region0 (dax0.0 target_node 2)")),
        ],
        problems: 0,
    },
];

fn check(case: &Case) {
    let t = Topology::read(&fixture(case.fixture));
    let ids: Vec<u32> = t.nodes.iter().map(|n| n.id).collect();
    let want_ids: Vec<u32> = case.nodes.iter().map(|n| n.0).collect();
    assert_eq!(ids, want_ids, "{}: node ids", case.fixture);
    for &(id, tier, words) in case.nodes {
        let node = t.node(id).unwrap_or_else(|| panic!("{}: no node {id}", case.fixture));
        assert_eq!(node.tier, tier, "{} node {id}: {}", case.fixture, node.tier_evidence);
        assert_eq!(t.tier_of(id), tier);
        match words {
            Exact(w) => assert_eq!(node.tier_evidence, w, "{} node {id}", case.fixture),
            Prefix(w) => {
                assert!(node.tier_evidence.starts_with(w), "{} node {id}: {}", case.fixture, node.tier_evidence)
            }
        }
    }
    assert_eq!(t.problems.len(), case.problems, "{}: {:#?}", case.fixture, t.problems);
}

#[test]
fn tier_and_evidence_of_every_node() {
    for case in CASES {
        check(case);
    }
}

/// The guest captures are committed (`capture_host.py` in the QEMU guest of `cargo xtask vm-test`
/// made them): a missing one is a broken checkout, not a reason to pass.
fn guest_capture(name: &str) -> PathBuf {
    let dir = fixture(name);
    assert!(dir.is_dir(), "{}: the QEMU guest capture is missing (restore it from git)", dir.display());
    dir
}

#[test]
fn real_guest_captures() {
    for case in GUEST_CASES {
        guest_capture(case.fixture);
        check(case);
    }
}

#[test]
fn real_guest_values() {
    {
        let t = Topology::read(&guest_capture("guest-hmat"));
        let perf = |id| t.node(id).and_then(|n| n.hmat.as_ref().map(|h| (h.read_latency_ns, h.read_bandwidth_mbps)));
        assert_eq!(perf(0), Some((Some(100), Some(20480))), "QEMU hmat-lb latency=100 bandwidth=20G");
        assert_eq!(perf(1), Some((Some(300), Some(5120))));
        assert_eq!(t.node(1).map(|n| n.has_cpu), Some(false));
    }
    {
        // The capture flattens sysfs links, so the dax device reaches its region through its
        // address and the endpoint's `uport` link (memdev of a target) is not there.
        let t = Topology::read(&guest_capture("guest-cxl"));
        assert_eq!(
            t.cxl_memdevs.iter().map(|m| (m.name.as_str(), m.serial)).collect::<Vec<_>>(),
            vec![("mem0", Some(0x1234))]
        );
        let r = t.cxl_regions.first().expect("region0");
        assert_eq!(
            (r.name.as_str(), r.nodes.clone(), r.dax_devices.clone()),
            ("region0", vec![2], vec!["dax0.0".to_string()])
        );
        assert_eq!(t.dax_devices.first().and_then(|d| d.cxl_region.as_deref()), Some("region0"));
        assert_eq!(t.node(2).map(|n| n.cxl_regions.clone()), Some(vec!["region0".to_string()]));
    }
}

#[test]
fn gpus_of_the_gpu_trees() {
    let t = Topology::read(&fixture("hand-8gpu-2s"));
    let gpus: Vec<(&str, &str, &str, Option<u32>, Option<u32>)> = t
        .gpus
        .iter()
        .map(|g| (g.pci_address.as_str(), g.vendor.as_str(), g.kind.as_str(), g.numa_node, g.minor))
        .collect();
    // The NVSwitch (0x0680) and the InfiniBand NIC (0x0207) are not GPUs; the BMC's VGA is a
    // display controller without a driver file.
    assert_eq!(
        gpus,
        vec![
            ("0000:03:00.0", "aspeed", "vga", Some(0), None),
            ("0000:18:00.0", "nvidia", "3d", Some(0), Some(0)),
            ("0000:2a:00.0", "nvidia", "3d", Some(0), Some(1)),
            ("0000:3a:00.0", "nvidia", "3d", Some(0), Some(2)),
            ("0000:5d:00.0", "nvidia", "3d", Some(0), Some(3)),
            ("0000:9a:00.0", "nvidia", "3d", Some(1), Some(4)),
            ("0000:ab:00.0", "nvidia", "3d", Some(1), Some(5)),
            ("0000:ba:00.0", "nvidia", "3d", Some(1), Some(6)),
            ("0000:db:00.0", "nvidia", "3d", Some(1), Some(7)),
        ]
    );
    assert_eq!(t.gpus[1].model.as_deref(), Some("NVIDIA H100 80GB HBM3"));
    assert_eq!(t.gpus[8].uuid.as_deref(), Some("GPU-00000007-1111-2222-3333-444444444447"));
    let text = render::text(&t);
    assert!(text.contains("0000:db:00.0  nvidia  3d    NVIDIA H100 80GB HBM3  /dev/nvidia7  1"), "{text}");
    assert!(render::json(&t)["gpus"][8]["numa_node"] == 1, "the JSON carries the GPUs");

    let t = Topology::read(&fixture("hand-gh200"));
    let g = t.gpus.first().expect("the GH200's GPU");
    assert_eq!((g.memory_node, g.memory_status.as_deref(), g.memory_bytes), (Some(1), Some("online"), Some(96 << 30)));
    assert!(render::text(&t).contains("1 (online, 96.0 GiB)"), "{}", render::text(&t));
    // Trees without PCI devices have no GPUs and no problem for it.
    let t = Topology::read(&fixture("hand-cpuless-bare"));
    assert!(t.gpus.is_empty() && t.problems.is_empty(), "{:?}", t.problems);
    assert!(render::text(&t).contains("far memory (unknown kind)"));
}

#[test]
fn every_fixture_tree_has_expectations() {
    let known: Vec<&str> = CASES.iter().chain(GUEST_CASES).map(|c| c.fixture).collect();
    let entries = fs::read_dir(fixtures_dir()).unwrap_or_else(|e| panic!("{}: {e}", fixtures_dir().display()));
    for entry in entries.flatten().filter(|e| e.path().is_dir()) {
        let name = entry.file_name().to_string_lossy().into_owned();
        assert!(known.contains(&name.as_str()), "fixture tree {name} has no row in CASES: add one");
    }
}

#[test]
fn this_host_reads_real_values() {
    let t = Topology::read(&fixture("this-host"));
    let n = t.node(0).expect("node 0");
    assert_eq!(n.cpus, vec![0, 1]);
    assert_eq!((n.online, n.possible, n.has_memory, n.has_cpu), (true, true, true, true));
    assert_eq!(n.mem_total_bytes, Some(6_645_964 * 1024));
    assert_eq!(n.distances, vec![10]);
    assert_eq!(n.memory_tier, Some(4));
    assert_eq!(n.hmat, None);
    assert!(n.vmstat.contains_key("pgpromote_success") && n.vmstat.contains_key("pgdemote_kswapd"), "{:?}", n.vmstat);
    assert!(n.vmstat.keys().all(|k| parse::is_tiering_counter(k)), "{:?}", n.vmstat);
    let blocks = t.memory_blocks.as_ref().expect("memory blocks");
    assert_eq!(blocks.block_size_bytes, 128 << 20);
    assert_eq!(blocks.node_of_block.len(), 192);
    assert!(t.cxl_memdevs.is_empty() && t.cxl_regions.is_empty() && t.dax_devices.is_empty() && t.edac.is_empty());
    assert!(!t.cxl_bus);
    assert!(render::text(&t).contains("none (no /sys/bus/cxl"));
    assert_eq!(t.memory_tiers, vec![MemoryTier { id: 4, nodes: vec![0] }]);
}

#[test]
fn hand_hmat_reads_access_attributes() {
    let t = Topology::read(&fixture("hand-hmat"));
    let hmat = |id| t.node(id).and_then(|n| n.hmat.clone());
    let want = |lat, bw| Hmat {
        initiators: vec![0],
        read_latency_ns: Some(lat),
        write_latency_ns: Some(lat),
        read_bandwidth_mbps: Some(bw),
        write_bandwidth_mbps: Some(bw),
    };
    assert_eq!(hmat(0), Some(want(100, 20480)));
    assert_eq!(hmat(1), Some(want(300, 5120)));
    assert_eq!(t.node(1).map(|n| (n.cpus.is_empty(), n.has_cpu, n.has_memory)), Some((true, false, true)));
    assert_eq!(t.node(0).and_then(|n| n.vmstat.get("pgdemote_kswapd").copied()), Some(42113));
}

#[test]
fn hmat_decides_when_the_kernel_has_no_tiers() {
    // The same guest under a kernel without memory_tiering (before 6.1): HMAT is next in line.
    let dir = scratch_copy("hand-hmat", "no-tiers");
    let tiers = dir.join("devices/virtual/memory_tiering");
    fs::remove_dir_all(&tiers).unwrap_or_else(|e| panic!("{}: {e}", tiers.display()));
    let t = Topology::read(&dir);
    assert_eq!(t.tier_of(0), Tier::Dram);
    assert_eq!(t.tier_of(1), Tier::Cxl);
    assert_eq!(
        t.node(1).map(|n| n.tier_evidence.as_str()),
        Some("HMAT read latency 300 ns, bandwidth 5120 MB/s vs node 0's read latency 100 ns, bandwidth 20480 MB/s")
    );
    assert!(t.problems.is_empty(), "{:?}", t.problems);
}

#[test]
fn hand_cxl_links_memdev_region_dax_and_node() {
    let t = Topology::read(&fixture("hand-cxl"));
    assert!(t.cxl_bus);
    assert_eq!(t.cxl_memdevs.len(), 1);
    let m = &t.cxl_memdevs[0];
    assert_eq!(
        (m.name.as_str(), m.serial, m.ram_size_bytes, m.pmem_size_bytes),
        ("mem0", Some(0x1234), Some(256 << 20), Some(0))
    );
    assert_eq!(m.numa_node, None, "-1 means no attachment node");
    assert_eq!(m.regions, vec!["region0".to_string()]);
    let r = &t.cxl_regions[0];
    assert_eq!(
        (r.name.as_str(), r.mode.as_deref(), r.size_bytes, r.resource),
        ("region0", Some("ram"), Some(256 << 20), Some(0x5_d000_0000))
    );
    assert_eq!(
        (r.targets.clone(), r.memdevs.clone(), r.dax_devices.clone(), r.nodes.clone()),
        (vec!["decoder2.0".to_string()], vec!["mem0".to_string()], vec!["dax0.0".to_string()], vec![2])
    );
    let d = &t.dax_devices[0];
    assert_eq!(
        (d.target_node, d.size_bytes, d.driver.as_deref(), d.cxl_region.as_deref()),
        (Some(2), Some(256 << 20), Some("kmem"), Some("region0"))
    );
    assert_eq!(t.node(2).map(|n| n.cxl_regions.clone()), Some(vec!["region0".to_string()]));
    assert_eq!(t.node(2).and_then(|n| n.memory_tier), Some(22));
    assert_eq!(t.nodes_in(Tier::Cxl), vec![1, 2]);
}

#[test]
fn config_overrides_win_and_bad_ones_are_reported() {
    let ov = TierOverrides { cxl: vec![0], dram: vec![2] };
    let t = Topology::read_with_overrides(&fixture("hand-cxl"), &ov);
    let ev = |id| t.node(id).map(|n| (n.tier, n.tier_evidence.clone()));
    assert_eq!(ev(0), Some((Tier::Cxl, "config [tiers] cxl".to_string())));
    assert_eq!(ev(2), Some((Tier::Dram, "config [tiers] dram".to_string())));
    assert_eq!(ev(1), Some((Tier::Cxl, "memory_tier54 (kernel) vs faster memory_tier4".to_string())));
    assert!(t.problems.is_empty());

    let t = Topology::read_with_overrides(&fixture("odd-gaps"), &TierOverrides { cxl: vec![1, 2], dram: vec![] });
    assert_eq!(t.problems.len(), 2, "the odd block files' line and the config's: {:?}", t.problems);
    assert!(t.problems.iter().any(|p| p.contains("node(s) 1-2 that this machine does not have")), "{:?}", t.problems);
    assert_eq!(t.tier_of(3), Tier::Far, "a CPU-less node nothing describes, not named in the config");
}

#[test]
fn overrides_deserialize_from_config() {
    let ov: TierOverrides = serde_json::from_str(r#"{"cxl": [2, 3]}"#).expect("valid");
    assert_eq!(ov, TierOverrides { cxl: vec![2, 3], dram: vec![] });
    assert!(
        serde_json::from_str::<TierOverrides>(r#"{"cxl": [2], "slow": [3]}"#).is_err(),
        "typos must not pass silently"
    );
}

#[test]
fn problems_name_the_file() {
    let t = Topology::read(&fixture("odd-garbage"));
    for file in [
        "node/online:",
        "node/has_cpu:",
        "node0/meminfo:",
        "node0/distance:",
        "node1/cpulist:",
        "initiators/read_latency:",
        "memory_tier4/nodelist:",
        "block_size_bytes:",
        "mem0/serial:",
        "mem0/ram/size:",
        "region0/size:",
        "dax0.0/target_node:",
        "mc0/mc_name:",
        "mc0/ce_count:",
    ] {
        assert!(t.problems.iter().any(|p| p.contains(file)), "no problem names {file}: {:#?}", t.problems);
    }
    let t = Topology::read(&fixture("odd-missing"));
    assert!(t.problems.iter().any(|p| p.contains("node2: missing although node 2 is online")), "{:#?}", t.problems);
    assert!(
        t.problems.iter().all(|p| p.contains("--sysfs-root") || p.contains("block_size_bytes")),
        "{:#?}",
        t.problems
    );
}

#[test]
fn unknown_nodes_and_absent_roots() {
    let t = Topology::read(&fixture("odd-gaps"));
    assert_eq!((t.node(1).is_none(), t.tier_of(1), t.tier_of(u32::MAX)), (true, Tier::Unknown, Tier::Unknown));
    let t = Topology::read(Path::new("/nonexistent/tierscope-sysfs"));
    assert!(t.nodes.is_empty());
    assert!(
        t.problems.iter().any(|p| p.contains("/nonexistent/tierscope-sysfs/devices/system/node")),
        "{:?}",
        t.problems
    );
    assert!(render::text(&t).contains("no NUMA nodes found"));
}

#[test]
fn renders_every_fixture() {
    for case in CASES {
        let t = Topology::read(&fixture(case.fixture));
        let text = render::text(&t);
        for n in &t.nodes {
            let row = text
                .lines()
                .find(|l| {
                    l.split_whitespace().next() == Some(n.id.to_string().as_str()) && l.contains(&n.tier_evidence)
                })
                .unwrap_or_else(|| panic!("{}: no row for node {}:\n{text}", case.fixture, n.id));
            assert!(row.split_whitespace().nth(1) == Some(n.tier.as_str()), "{row}");
        }
        assert_eq!(text.contains("\nProblems\n"), !t.problems.is_empty(), "{}", case.fixture);

        let json = render::json(&t);
        assert_eq!(json["schema"], render::JSON_SCHEMA);
        let nodes = json["nodes"].as_array().unwrap_or_else(|| panic!("{}: nodes not an array", case.fixture));
        assert_eq!(nodes.len(), t.nodes.len());
        for (j, n) in nodes.iter().zip(&t.nodes) {
            assert_eq!((j["id"].as_u64(), j["tier"].as_str()), (Some(u64::from(n.id)), Some(n.tier.as_str())));
            assert_eq!(j["tier_evidence"].as_str(), Some(n.tier_evidence.as_str()));
        }
    }
    let json = render::json(&Topology::read(&fixture("hand-cxl")));
    assert_eq!(json["cxl_memdevs"][0]["serial"], "0x1234");
    assert_eq!(json["memory_blocks"]["block_ranges_by_node"]["2"], serde_json::json!([[186, 187]]));
}

#[test]
fn garbage_in_any_single_file_does_not_panic() {
    // Every file of the richest trees, replaced in turn by each kind of garbage.
    const GARBAGE: &[&[u8]] =
        &[b"", b"\x00\xff\xfe", b"-1\n", b"99999999999999999999999\n", b"0-4294967295\n", b"3-1,x\n"];
    for name in ["hand-cxl", "hand-hmat"] {
        let dir = scratch_copy(name, "garbage");
        for file in files_under(&dir) {
            let original = fs::read(&file).unwrap_or_default();
            for g in GARBAGE {
                fs::write(&file, g).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                let t = Topology::read(&dir);
                let _ = (render::text(&t), render::json(&t));
                assert!(!t.nodes.is_empty(), "{}", file.display());
            }
            fs::write(&file, original).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        }
        let _ = fs::remove_dir_all(&dir);
    }
}

/// A private copy of a fixture tree (symlinks kept) under the target dir's temp area.
fn scratch_copy(name: &str, purpose: &str) -> PathBuf {
    let dst = std::env::temp_dir().join(format!("tierscope-topology-{purpose}-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dst);
    copy_tree(&fixture(name), &dst);
    dst
}

fn copy_tree(src: &Path, dst: &Path) {
    fs::create_dir_all(dst).unwrap_or_else(|e| panic!("{}: {e}", dst.display()));
    for entry in fs::read_dir(src).unwrap_or_else(|e| panic!("{}: {e}", src.display())).flatten() {
        let (from, to) = (entry.path(), dst.join(entry.file_name()));
        let kind = entry.file_type().unwrap_or_else(|e| panic!("{}: {e}", from.display()));
        if kind.is_symlink() {
            let target = fs::read_link(&from).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
            std::os::unix::fs::symlink(target, &to).unwrap_or_else(|e| panic!("{}: {e}", to.display()));
        } else if kind.is_dir() {
            copy_tree(&from, &to);
        } else {
            fs::copy(&from, &to).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
        }
    }
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(kind) = entry.file_type() else { continue };
        if kind.is_dir() {
            out.extend(files_under(&entry.path()));
        } else if kind.is_file() {
            out.push(entry.path());
        }
    }
    out.sort();
    out
}

/// The node masks read as the lists they are ("online: 0,3"), not as counts ("online 0"
/// read as "no node online").
#[test]
fn node_masks_print_as_lists() {
    let first_line =
        |fixture: &str| render::text(&Topology::read(&self::fixture(fixture))).lines().next().map(str::to_owned);
    assert_eq!(
        first_line("odd-gaps").as_deref(),
        Some("NUMA nodes (lists of node ids): online: 0,3; possible: 0,3; with memory: 0,3; with CPUs: 0")
    );
    assert_eq!(
        first_line("guest-cxl").as_deref(),
        Some("NUMA nodes (lists of node ids): online: 0-2; possible: 0-2; with memory: 0-2; with CPUs: 0")
    );
}
