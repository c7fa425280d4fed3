//! `tierscope topology [--json] [--sysfs-root DIR]`.
use std::{fmt::Write as _, path::Path};

use anyhow::Result;

use crate::{
    model::unplug::{self, DeviceInput, NodeMemory, UnplugView},
    topology::{render, Topology},
};

pub fn run(json: bool, sysfs_root: &Path) -> Result<()> {
    if !sysfs_root.is_dir() {
        anyhow::bail!("{}: no such directory; pass the root of a sysfs tree (normally /sys)", sysfs_root.display());
    }
    let t = Topology::read(sysfs_root);
    let view = offlining(&t);
    if json {
        let mut v = render::json(&t);
        if let Some(obj) = v.as_object_mut() {
            obj.insert("unplug".into(), serde_json::to_value(&view)?);
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}{}", render::text(&t), offlining_text(&view));
    }
    Ok(())
}

/// Whether each node and CXL device could be offlined, from sysfs alone: `topology` reads no
/// processes, so no holders (pinned memory needs the agent's probes: `snapshot`, `top`).
pub fn offlining(t: &Topology) -> UnplugView {
    let nodes: Vec<NodeMemory> = t
        .nodes
        .iter()
        .map(|n| NodeMemory {
            id: n.id,
            tier: n.tier.as_str().to_string(),
            total_bytes: n.mem_total_bytes,
            free_bytes: n.mem_free_bytes,
            blocks: t.block_states.get(&n.id).cloned(),
        })
        .collect();
    let devices: Vec<DeviceInput> = t
        .cxl_memdevs
        .iter()
        .map(|md| {
            let mut nodes: Vec<u32> = t
                .cxl_regions
                .iter()
                .filter(|r| r.memdevs.contains(&md.name))
                .flat_map(|r| r.nodes.iter().copied())
                .collect();
            nodes.sort_unstable();
            nodes.dedup();
            DeviceInput { memdev: md.name.clone(), serial: md.serial, nodes }
        })
        .collect();
    let mut view = unplug::assess(&nodes, &[], &devices);
    view.holders_from = "none: `topology` reads sysfs only; `tierscope snapshot --json` (its `unplug` key) and top's Health view list the processes holding memory and their pinned bytes";
    view
}

fn offlining_text(view: &UnplugView) -> String {
    let mut out = String::from("\nCould each node and CXL device be offlined now (sysfs evidence)\n");
    for d in &view.devices {
        let nodes: Vec<String> = d.nodes.iter().map(u32::to_string).collect();
        let _ = writeln!(
            out,
            "  {}: {} (nodes {})",
            d.memdev,
            d.offline.as_str(),
            if nodes.is_empty() { "-".into() } else { nodes.join(",") }
        );
    }
    for n in &view.nodes {
        let _ = writeln!(out, "  node {} ({}): {}", n.node, n.tier, n.offline.as_str());
        for r in &n.reasons {
            let mark = match r.effect {
                unplug::Effect::Blocks => "blocks",
                unplug::Effect::MayBlock => "may block",
                unplug::Effect::Note => "note",
            };
            let _ = writeln!(out, "    - {mark}: {}", r.text);
        }
    }
    let _ = writeln!(out, "  holders: {}", view.holders_from);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::unplug::Offline;

    fn fixture(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/sysfs").join(name)
    }

    #[test]
    fn the_cxl_node_in_zone_movable_could_go_the_dram_nodes_not_surely() {
        let view = offlining(&Topology::read(&fixture("hand-cxl")));
        let verdicts: Vec<(u32, Offline)> = view.nodes.iter().map(|n| (n.node, n.offline)).collect();
        // Node 0's first block spans zones (valid_zones none); node 1 is all ZONE_NORMAL; node 2
        // (mem0's region) is all ZONE_MOVABLE with 8 MiB used and 683 MiB free elsewhere.
        assert_eq!(verdicts, vec![(0, Offline::No), (1, Offline::Uncertain), (2, Offline::Yes)]);
        assert_eq!((view.devices[0].memdev.as_str(), view.devices[0].offline), ("mem0", Offline::Yes));
        let n2 = &view.nodes[2];
        assert_eq!(n2.used_bytes, Some((262_144 - 253_952) * 1024));
        assert_eq!(n2.free_elsewhere_bytes, Some((298_120 + 401_220) * 1024));
        let text = offlining_text(&view);
        assert!(text.contains("  mem0: yes (nodes 2)\n"), "{text}");
        assert!(text.contains("    - blocks: 1 online memory block(s) span several zones or nodes"), "{text}");
        assert!(text.contains("holders: none: `topology` reads sysfs only"), "{text}");
    }

    #[test]
    fn odd_block_files_never_give_a_yes() {
        let view = offlining(&Topology::read(&fixture("odd-gaps")));
        let verdicts: Vec<(u32, Offline)> = view.nodes.iter().map(|n| (n.node, n.offline)).collect();
        assert_eq!(verdicts, vec![(0, Offline::Uncertain), (3, Offline::No)], "{:#?}", view.nodes);
        assert!(view.nodes[1].reasons.iter().any(|r| r.text.contains("removable 0")));
    }
}
