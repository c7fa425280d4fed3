//! Walks the sysfs tree into a [`Topology`]: node masks, per-node files, kernel memory tiers,
//! memory blocks, then CXL/dax/EDAC (`cxl.rs`) and the tier decision (`classify.rs`).
use std::{collections::BTreeSet, path::Path};

use super::{
    classify, cxl, gpu, hotplug,
    memory_blocks::MemoryBlocks,
    parse,
    sysfs::{Need, Sysfs},
    Hmat, MemoryTier, Node, NodeMasks, Tier, TierOverrides, Topology,
};

const NODE_DIR: &str = "devices/system/node";

pub(super) fn read(root: &Path, overrides: &TierOverrides) -> Topology {
    let mut fs = Sysfs::new(root);
    let masks = read_masks(&mut fs);
    let node_dirs: Vec<u32> = fs
        .dir_names(
            &fs.path(NODE_DIR),
            Need::Required,
            "no NUMA nodes are known (a kernel without CONFIG_NUMA has none)",
        )
        .unwrap_or_default()
        .iter()
        .filter_map(|n| parse::numbered(n, "node"))
        .collect();
    // A node may be possible but offline (no directory), or have a directory the masks miss in
    // a partial tree: show the union so nothing silently disappears.
    let mut ids: BTreeSet<u32> = node_dirs.iter().copied().collect();
    ids.extend(masks.online.iter().flatten());
    ids.extend(masks.possible.iter().flatten());

    let memory_tiers = read_memory_tiers(&mut fs);
    let mut nodes: Vec<Node> =
        ids.iter().map(|&id| read_node(&mut fs, id, node_dirs.contains(&id), &masks, &memory_tiers)).collect();

    let memory_blocks = match MemoryBlocks::read(root) {
        Ok(b) => Some(b),
        Err(e) => {
            fs.problems.push(format!("{e}; pages cannot be mapped to nodes (pfn -> node)"));
            None
        }
    };
    let block_states = match &memory_blocks {
        Some(b) => {
            let (states, problems) = hotplug::read_node_blocks(root, b);
            fs.problems.extend(problems);
            states
        }
        None => Default::default(),
    };
    let cxl = cxl::read_cxl(&mut fs, memory_blocks.as_ref());
    let edac = cxl::read_edac(&mut fs);
    for node in &mut nodes {
        node.cxl_regions = cxl.regions.iter().filter(|r| r.nodes.contains(&node.id)).map(|r| r.name.clone()).collect();
    }
    let gpus = gpu::read_gpus(&mut fs, &gpu::driver_root(root));
    let evidence = classify::Evidence {
        cxl: classify::cxl_evidence(&cxl.regions, &cxl.dax, memory_blocks.as_ref()),
        gpu_memory: classify::gpu_memory_evidence(&gpus),
    };
    let mut problems = fs.problems;
    classify::classify(&mut nodes, &memory_tiers, &evidence, overrides, &mut problems);

    Topology {
        nodes,
        masks,
        memory_tiers,
        memory_blocks,
        block_states,
        cxl_bus: cxl.bus_present,
        cxl_memdevs: cxl.memdevs,
        cxl_regions: cxl.regions,
        dax_devices: cxl.dax,
        edac,
        gpus,
        problems,
    }
}

fn read_masks(fs: &mut Sysfs<'_>) -> NodeMasks {
    let mut mask = |name: &str| {
        let path = fs.path(&format!("{NODE_DIR}/{name}"));
        fs.parsed(&path, Need::Required, &format!("the `{name}` node mask is not known"), parse::id_list)
    };
    NodeMasks {
        online: mask("online"),
        possible: mask("possible"),
        has_memory: mask("has_memory"),
        has_cpu: mask("has_cpu"),
    }
}

fn read_memory_tiers(fs: &mut Sysfs<'_>) -> Vec<MemoryTier> {
    let dir = fs.path("devices/virtual/memory_tiering");
    // Absent before Linux 6.1: not a problem, the other rules decide.
    let names = fs.dir_names(&dir, Need::Optional, "the kernel's memory tiers are not known").unwrap_or_default();
    let mut tiers: Vec<MemoryTier> = names
        .iter()
        .filter_map(|name| {
            let id = parse::numbered(name, "memory_tier")?;
            let nodes = fs.parsed(
                &dir.join(name).join("nodelist"),
                Need::Required,
                &format!("the nodes of kernel memory tier {id} are not known"),
                parse::id_list,
            )?;
            Some(MemoryTier { id, nodes })
        })
        .collect();
    tiers.sort_by_key(|t| t.id);
    tiers
}

fn read_node(fs: &mut Sysfs<'_>, id: u32, has_dir: bool, masks: &NodeMasks, tiers: &[MemoryTier]) -> Node {
    let in_mask = |m: &Option<Vec<u32>>| m.as_ref().map(|ids| ids.contains(&id));
    let online = in_mask(&masks.online).unwrap_or(has_dir);
    let dir = fs.path(&format!("{NODE_DIR}/node{id}"));
    if online && !has_dir {
        fs.problems.push(format!(
            "{}: missing although node {id} is online; its CPUs and memory are not known. Check that sysfs is mounted (or pass --sysfs-root)",
            dir.display()
        ));
    }
    let lost = |what: &str| format!("node {id}'s {what} is not known");
    let (cpus, meminfo, distances, vmstat, hmat) = if has_dir {
        (
            fs.parsed(&dir.join("cpulist"), Need::Required, &lost("CPU list"), parse::id_list),
            fs.parsed(&dir.join("meminfo"), Need::Required, &lost("memory size"), parse::node_meminfo),
            fs.parsed(&dir.join("distance"), Need::Required, &lost("distance row"), parse::distances),
            fs.text(
                &dir.join("vmstat"),
                Need::Required,
                &format!("node {id}'s promotion/demotion counters are not known"),
            )
            .map(|t| parse::tiering_vmstat(&t)),
            read_hmat(fs, &dir, id),
        )
    } else {
        (None, None, None, None, None)
    };
    let has_cpu = match &cpus {
        Some(c) => Some(!c.is_empty()),
        None => in_mask(&masks.has_cpu),
    };
    let mem_total_bytes = meminfo.and_then(|m| m.total_bytes);
    let has_memory = in_mask(&masks.has_memory).or(mem_total_bytes.map(|b| b > 0));
    Node {
        id,
        tier: Tier::Unknown,
        tier_evidence: String::new(),
        cpus: cpus.unwrap_or_default(),
        has_cpu: has_cpu.unwrap_or(false),
        cpus_known: has_cpu.is_some(),
        online,
        possible: in_mask(&masks.possible).unwrap_or(has_dir),
        has_memory: has_memory.unwrap_or(false),
        memory_known: has_memory.is_some(),
        mem_total_bytes,
        mem_free_bytes: meminfo.and_then(|m| m.free_bytes),
        distances: distances.unwrap_or_default(),
        memory_tier: tiers.iter().find(|t| t.nodes.contains(&id)).map(|t| t.id),
        hmat,
        vmstat: vmstat.unwrap_or_default(),
        cxl_regions: Vec::new(),
    }
}

/// `nodeN/access0/initiators/`: present only when firmware has an HMAT.
fn read_hmat(fs: &mut Sysfs<'_>, node_dir: &Path, id: u32) -> Option<Hmat> {
    let dir = node_dir.join("access0/initiators");
    let names = fs.dir_names(&dir, Need::Optional, &format!("node {id}'s HMAT attributes are not known"))?;
    let lost = |file: &str| format!("node {id}'s HMAT {} is not known", file.replace('_', " "));
    let mut value = |file: &str| fs.parsed(&dir.join(file), Need::Optional, &lost(file), parse::decimal);
    Some(Hmat {
        read_latency_ns: value("read_latency"),
        write_latency_ns: value("write_latency"),
        read_bandwidth_mbps: value("read_bandwidth"),
        write_bandwidth_mbps: value("write_bandwidth"),
        initiators: names.iter().filter_map(|n| parse::numbered(n, "node")).collect(),
    })
}
