use super::*;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn movable(blocks: u64) -> NodeBlocks {
    NodeBlocks { block_size_bytes: 128 * MIB, blocks, online: blocks, online_movable: blocks, ..Default::default() }
}

fn normal(blocks: u64) -> NodeBlocks {
    NodeBlocks {
        block_size_bytes: 128 * MIB,
        blocks,
        online: blocks,
        online_kernel: [("Normal".to_string(), blocks)].into(),
        ..Default::default()
    }
}

fn node(id: u32, tier: &str, total: u64, free: u64, blocks: Option<NodeBlocks>) -> NodeMemory {
    NodeMemory { id, tier: tier.into(), total_bytes: Some(total), free_bytes: Some(free), blocks }
}

/// Node 0 DRAM (16 GiB, 12 GiB free, kernel zone), node 2 CXL (8 GiB, 6 GiB free, movable).
fn machine() -> Vec<NodeMemory> {
    vec![node(0, "dram", 16 * GIB, 12 * GIB, Some(normal(128))), node(2, "cxl", 8 * GIB, 6 * GIB, Some(movable(64)))]
}

fn proc_(pid: u32, job: Option<(&str, u32)>, resident: &[(u32, u64)]) -> HolderInput {
    HolderInput {
        pid,
        comm: "python3".into(),
        job: job.map(|(j, _)| j.to_string()),
        rank: job.map(|(_, r)| r),
        resident_bytes_by_node: resident.iter().copied().collect(),
        pinned: None,
    }
}

fn pinned(driver: &[(u32, u64)], locked: &[(u32, u64)]) -> Option<PinnedMemory> {
    let mut p = PinnedMemory::default();
    for &(n, b) in driver.iter().chain(locked) {
        *p.bytes_by_node.entry(n).or_default() += b;
    }
    p.locked_bytes_by_node = locked.iter().copied().collect();
    p.locked_bytes = locked.iter().map(|x| x.1).sum();
    Some(p)
}

fn the_node(v: &UnplugView, id: u32) -> &NodeUnplug {
    v.nodes.iter().find(|n| n.node == id).unwrap_or_else(|| panic!("node {id} not in {v:?}"))
}

fn texts(n: &NodeUnplug, effect: Effect) -> Vec<&str> {
    n.reasons.iter().filter(|r| r.effect == effect).map(|r| r.text.as_str()).collect()
}

#[test]
fn a_pinned_holder_blocks_and_is_named_with_its_bytes() {
    let mut rank0 = proc_(100, Some(("llama", 0)), &[(0, GIB), (2, 3 * GIB)]);
    rank0.pinned = pinned(&[(2, 6 * GIB / 10)], &[]);
    let plain = proc_(200, None, &[(2, GIB)]);
    let v = assess(&machine(), &[rank0, plain], &[]);
    let n2 = the_node(&v, 2);
    assert_eq!(n2.offline, Offline::No);
    assert_eq!((n2.pinned_bytes, n2.blockers), (6 * GIB / 10, 1));
    assert_eq!(
        texts(n2, Effect::Blocks),
        vec!["pinned: 614.4 MiB by pid 100 (python3, rank 0 of job llama) blocks it (pinned pages cannot migrate)"]
    );
    let h: Vec<(u32, bool, u64)> = n2.holders.iter().map(|h| (h.pid, h.blocks, h.resident_bytes)).collect();
    assert_eq!(h, vec![(100, true, 3 * GIB), (200, false, GIB)], "most pinned first");
    // Node 0 holds none of its pins: not blocked by it (only its kernel zone is uncertain).
    let n0 = the_node(&v, 0);
    assert_eq!((n0.blockers, n0.offline), (0, Offline::Uncertain));
}

#[test]
fn mlocked_memory_is_a_holder_that_moves_not_a_blocker() {
    let mut locker = proc_(300, None, &[(2, 64 * MIB)]);
    locker.pinned = pinned(&[], &[(2, 32 * MIB)]);
    let v = assess(&machine(), &[locker], &[]);
    let n2 = the_node(&v, 2);
    assert_eq!((n2.offline, n2.blockers, n2.pinned_bytes, n2.locked_bytes), (Offline::Yes, 0, 0, 32 * MIB));
    assert_eq!((n2.holders[0].locked_bytes, n2.holders[0].blocks), (32 * MIB, false));
    assert!(texts(n2, Effect::Note).iter().any(|t| t.starts_with("mlocked: 32.0 MiB by 1 process(es)")), "{n2:?}");
}

#[test]
fn a_registered_range_also_locked_counts_as_pinned_once() {
    // The driver's 12 MiB registered range overlaps a locked mapping: collect counts it with the
    // driver; the model must not turn more than it holds on the node into locked bytes.
    let mut p = proc_(1, None, &[(2, 20 * MIB)]);
    let mut pm = pinned(&[(2, 12 * MIB)], &[]).unwrap();
    pm.locked_bytes_by_node.insert(2, 40 * MIB);
    p.pinned = Some(pm);
    let v = assess(&machine(), &[p], &[]);
    let h = &the_node(&v, 2).holders[0];
    assert_eq!((h.pinned_bytes, h.locked_bytes), (0, 12 * MIB), "locked never exceeds the node's pinned bytes");
}

#[test]
fn movable_with_room_is_yes_normal_zone_is_uncertain() {
    let v = assess(&machine(), &[proc_(1, None, &[(2, GIB)])], &[]);
    let n2 = the_node(&v, 2);
    assert_eq!(n2.offline, Offline::Yes, "{:?}", n2.reasons);
    assert_eq!(n2.used_bytes, Some(2 * GIB));
    assert_eq!(n2.free_elsewhere_bytes, Some(12 * GIB));
    assert!(texts(n2, Effect::Note)
        .contains(&"other nodes have 12.0 GiB free of the 2.0 GiB used here (at most that much to move)"));
    assert!(texts(n2, Effect::Note).contains(&"all 64 online blocks are in ZONE_MOVABLE (movable pages only)"));
    let n0 = the_node(&v, 0);
    assert_eq!(n0.offline, Offline::Uncertain);
    assert_eq!(
        texts(n0, Effect::MayBlock),
        vec!["memory in kernel zones (128 of 128 online blocks: 128 Normal): the kernel's own allocations there may block it"]
    );
}

#[test]
fn not_enough_free_memory_elsewhere_blocks() {
    // CXL node full (20 GiB used), DRAM has 12 GiB free.
    let nodes = vec![
        node(0, "dram", 16 * GIB, 12 * GIB, Some(normal(128))),
        node(2, "cxl", 24 * GIB, 4 * GIB, Some(movable(192))),
    ];
    let n2 = assess(&nodes, &[], &[]).nodes.into_iter().find(|n| n.node == 2).unwrap();
    assert_eq!(n2.offline, Offline::No);
    assert_eq!(
        texts(&n2, Effect::Blocks),
        vec!["other nodes have 12.0 GiB free of the 20.0 GiB used here (at most that much to move)"]
    );
}

#[test]
fn several_jobs_are_summed_with_their_blocking_ranks() {
    let mut a0 = proc_(10, Some(("a", 0)), &[(2, GIB)]);
    a0.pinned = pinned(&[(2, 100 * MIB)], &[]);
    let a1 = proc_(11, Some(("a", 1)), &[(2, GIB)]);
    let mut b3 = proc_(20, Some(("b", 3)), &[(2, 2 * GIB)]);
    b3.pinned = pinned(&[(2, 300 * MIB)], &[]);
    let mut b3_loader = proc_(21, Some(("b", 3)), &[(2, MIB)]);
    b3_loader.pinned = pinned(&[(2, MIB)], &[]);
    let v = assess(&machine(), &[a0, a1, b3, b3_loader, proc_(30, None, &[(2, MIB)])], &[]);
    let n2 = the_node(&v, 2);
    let jobs: Vec<(&str, usize, u64, u64, Vec<u32>)> = n2
        .jobs
        .iter()
        .map(|j| (j.job.as_str(), j.processes, j.resident_bytes, j.pinned_bytes, j.blocking_ranks.clone()))
        .collect();
    assert_eq!(jobs, vec![("b", 2, 2 * GIB + MIB, 301 * MIB, vec![3]), ("a", 2, 2 * GIB, 100 * MIB, vec![0])]);
    assert_eq!((n2.blockers, n2.pinned_bytes, n2.holders.len()), (3, 401 * MIB, 5));
}

#[test]
fn many_blockers_are_named_up_to_three_and_the_rest_counted() {
    let ps: Vec<HolderInput> = (1..=5)
        .map(|i| {
            let mut p = proc_(i, None, &[(2, GIB)]);
            p.pinned = pinned(&[(2, u64::from(i) * MIB)], &[]);
            p
        })
        .collect();
    let n2 = the_node(&assess(&machine(), &ps, &[]), 2).clone();
    let blocks = texts(&n2, Effect::Blocks);
    assert_eq!(blocks.len(), 4, "{blocks:?}");
    assert!(blocks[0].contains("pid 5"), "the biggest first: {blocks:?}");
    assert_eq!(blocks[3], "pinned: 3.0 MiB more by 2 other processes");
}

#[test]
fn device_pins_of_unknown_node_may_block() {
    let mut p = proc_(7, None, &[(2, GIB)]);
    p.pinned = Some(PinnedMemory { vm_pin_bytes: 8 * MIB, ..Default::default() });
    let n2 = the_node(&assess(&machine(), &[p], &[]), 2).clone();
    assert_eq!(n2.offline, Offline::Uncertain);
    assert_eq!(n2.blockers, 0);
    assert!(texts(&n2, Effect::MayBlock)[0].starts_with("pid 7 (python3) has 8.0 MiB pinned for a device (VmPin"));
}

#[test]
fn odd_or_missing_sysfs_is_uncertain_or_blocked_never_yes() {
    // Blocks unreadable.
    let nodes = vec![node(0, "dram", 16 * GIB, 12 * GIB, Some(movable(128))), node(2, "cxl", 8 * GIB, 2 * GIB, None)];
    let n2 = the_node(&assess(&nodes, &[], &[]), 2).clone();
    assert_eq!(n2.offline, Offline::Uncertain);
    assert!(texts(&n2, Effect::MayBlock)[0].contains("could not be read"));
    // Some blocks of unknown state, one spanning zones, one not removable.
    let odd = NodeBlocks { unknown: 2, online_spanning: 1, not_removable: 1, ..movable(8) };
    let nodes =
        vec![node(0, "dram", 16 * GIB, 12 * GIB, Some(movable(128))), node(2, "cxl", 8 * GIB, 2 * GIB, Some(odd))];
    let n2 = the_node(&assess(&nodes, &[], &[]), 2).clone();
    assert_eq!(n2.offline, Offline::No);
    assert_eq!(texts(&n2, Effect::Blocks).len(), 2, "{:?}", n2.reasons);
    assert!(texts(&n2, Effect::MayBlock)[0].starts_with("2 of its 8 memory blocks have no known state"));
    // Another node's free memory unknown.
    let mut nodes = machine();
    nodes[0].free_bytes = None;
    let n2 = the_node(&assess(&nodes, &[], &[]), 2).clone();
    assert_eq!((n2.offline, n2.free_elsewhere_bytes), (Offline::Uncertain, None));
    // Free larger than total (a racy read): used is 0, never an underflow.
    let nodes =
        vec![node(0, "dram", 16 * GIB, 12 * GIB, Some(movable(1))), node(2, "cxl", GIB, 2 * GIB, Some(movable(8)))];
    assert_eq!(the_node(&assess(&nodes, &[], &[]), 2).used_bytes, Some(0));
}

#[test]
fn an_offline_node_has_nothing_to_offline() {
    let off = NodeBlocks { block_size_bytes: 128 * MIB, blocks: 8, offline: 8, ..Default::default() };
    let nodes = vec![node(0, "dram", 16 * GIB, 12 * GIB, Some(normal(1))), node(2, "cxl", 0, 0, Some(off))];
    let n2 = the_node(&assess(&nodes, &[], &[]), 2).clone();
    assert_eq!(n2.offline, Offline::Yes);
    assert_eq!(texts(&n2, Effect::Note), vec!["no online memory: nothing to offline"]);
}

#[test]
fn nodes_without_memory_are_left_out() {
    let mut nodes = machine();
    nodes.push(NodeMemory { id: 1, tier: "unknown".into(), total_bytes: Some(0), free_bytes: Some(0), blocks: None });
    let v = assess(&nodes, &[], &[]);
    assert_eq!(v.nodes.iter().map(|n| n.node).collect::<Vec<_>>(), vec![0, 2]);
    // The memory-less node's unknown blocks do not make node 2's free-elsewhere unknown.
    assert_eq!(the_node(&v, 2).free_elsewhere_bytes, Some(12 * GIB));
}

#[test]
fn a_device_takes_the_worst_of_its_nodes_and_lists_its_blockers_once() {
    let mut nodes = machine();
    nodes.push(node(3, "cxl", 8 * GIB, 6 * GIB, Some(movable(64))));
    let mut p = proc_(100, Some(("llama", 0)), &[(2, GIB), (3, GIB)]);
    p.pinned = pinned(&[(2, MIB), (3, 2 * MIB)], &[]);
    let devices = vec![
        DeviceInput { memdev: "mem0".into(), serial: Some(0x1234), nodes: vec![2, 3] },
        DeviceInput { memdev: "mem1".into(), serial: None, nodes: vec![] },
    ];
    let v = assess(&nodes, &[p, proc_(5, None, &[(3, GIB)])], &devices);
    let d0 = &v.devices[0];
    assert_eq!((d0.offline, d0.pinned_bytes, d0.blockers.clone()), (Offline::No, 3 * MIB, vec![100]));
    assert!(d0.reasons.iter().any(|r| r.text.starts_with("node 3: pinned: 2.0 MiB by pid 100")), "{:?}", d0.reasons);
    let d1 = &v.devices[1];
    assert_eq!(d1.offline, Offline::Yes);
    assert_eq!(d1.reasons[0].text, "no memory onlined as a node: nothing to offline");
    let json = serde_json::to_value(&v).unwrap();
    assert_eq!(json["devices"][0]["serial"], "0x1234");
    assert_eq!(json["devices"][0]["offline"], "no");
    assert_eq!(json["nodes"][1]["reasons"][0]["effect"], "blocks");
}
