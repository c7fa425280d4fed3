//! Who would block an unplug: per memory node and per CXL device, the processes and jobs
//! holding memory there, how much of it is pinned, and whether the node could be offlined now
//! (`cxl disable-memdev` offlines the memory first), with the kernel's evidence for each reason.
//!
//! What decides it (Documentation/admin-guide/mm/memory-hotplug.rst): offlining migrates every
//! page off the node's blocks. A pinned page (the CUDA driver's `pin_user_pages`, `VmPin`:
//! RDMA, io_uring, vfio) cannot migrate while pinned, so it blocks; an mlocked page can (mlock
//! keeps a page in memory, not in place), so it only adds to what must move. Blocks in a kernel
//! zone (`Normal`, `DMA32`) may hold the kernel's own unmovable allocations: no guarantee;
//! ZONE_MOVABLE holds movable pages only. A block spanning zones or nodes (`valid_zones`
//! `none`) cannot be offlined. And the pages must fit in the other nodes' free memory.
//! Only the processes the agent watches are holders here. Pure.
use std::collections::BTreeMap;

use serde::Serialize;

use super::pinned::PinnedMemory;
use crate::topology::{hotplug::NodeBlocks, render::bytes};

/// Blocking holders named in one reason; the rest are counted.
const NAMED: usize = 3;

/// What the kernel says of one node, read by the collector.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct NodeMemory {
    pub id: u32,
    pub tier: String,
    pub total_bytes: Option<u64>,
    pub free_bytes: Option<u64>,
    /// Its memory blocks by state and zone; `None` when they could not be read.
    pub blocks: Option<NodeBlocks>,
}

/// A process that may hold memory on the nodes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HolderInput {
    pub pid: u32,
    pub comm: String,
    pub job: Option<String>,
    pub rank: Option<u32>,
    /// Resident bytes per node (numa_maps); empty when not read.
    pub resident_bytes_by_node: BTreeMap<u32, u64>,
    pub pinned: Option<PinnedMemory>,
}

/// A CXL memory device and the nodes its regions' memory is onlined as.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceInput {
    pub memdev: String,
    pub serial: Option<u64>,
    pub nodes: Vec<u32>,
}

/// Whether a node could be offlined now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Offline {
    /// Nothing seen stands in the way: no pinned pages, every online block in ZONE_MOVABLE,
    /// room elsewhere.
    Yes,
    /// Nothing certainly blocks it, but something may (kernel zones, pins of unknown node,
    /// unknown blocks).
    Uncertain,
    /// Something the kernel reports blocks it (pinned pages, blocks it cannot offline, no room).
    No,
}

impl Offline {
    pub fn as_str(self) -> &'static str {
        match self {
            Offline::Yes => "yes",
            Offline::Uncertain => "uncertain",
            Offline::No => "no",
        }
    }
}

/// What a reason does to the verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// Evidence for offlining (ZONE_MOVABLE, room elsewhere), or a fact worth knowing.
    Note,
    MayBlock,
    Blocks,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Reason {
    pub effect: Effect,
    pub text: String,
}

/// One process's memory on one node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Holder {
    pub pid: u32,
    pub comm: String,
    pub job: Option<String>,
    pub rank: Option<u32>,
    pub resident_bytes: u64,
    /// Pinned pages placed on this node (the CUDA driver's ranges): they cannot migrate.
    pub pinned_bytes: u64,
    /// mlocked pages on this node: they stay in memory but can migrate.
    pub locked_bytes: u64,
    /// The process's `VmPin` (pinned for a device; its node is not known), when it also has
    /// memory here.
    pub vm_pin_bytes: u64,
    /// Whether it blocks the offline (pinned pages here).
    pub blocks: bool,
}

/// A job's memory on one node, its processes summed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct JobHold {
    pub job: String,
    pub processes: usize,
    pub resident_bytes: u64,
    pub pinned_bytes: u64,
    /// Ranks with pinned pages here.
    pub blocking_ranks: Vec<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeUnplug {
    pub node: u32,
    pub tier: String,
    pub offline: Offline,
    pub reasons: Vec<Reason>,
    /// MemTotal - MemFree: at most this much must move.
    pub used_bytes: Option<u64>,
    /// MemFree of the other nodes with memory.
    pub free_elsewhere_bytes: Option<u64>,
    pub pinned_bytes: u64,
    pub locked_bytes: u64,
    /// Holders with pinned pages here.
    pub blockers: usize,
    pub blocks: Option<NodeBlocks>,
    /// Processes with memory here, most pinned first, then most resident.
    pub holders: Vec<Holder>,
    pub jobs: Vec<JobHold>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DeviceUnplug {
    pub memdev: String,
    #[serde(serialize_with = "hex")]
    pub serial: Option<u64>,
    pub nodes: Vec<u32>,
    /// The worst of its nodes'.
    pub offline: Offline,
    /// Its nodes' reasons, each prefixed with the node.
    pub reasons: Vec<Reason>,
    pub pinned_bytes: u64,
    /// Distinct processes with pinned pages on its nodes.
    pub blockers: Vec<u32>,
}

fn hex<S: serde::Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.serialize_str(&format!("{v:#x}")),
        None => s.serialize_none(),
    }
}

/// The snapshot's `unplug` key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct UnplugView {
    pub devices: Vec<DeviceUnplug>,
    pub nodes: Vec<NodeUnplug>,
    /// Whose memory the holders cover.
    pub holders_from: &'static str,
}

/// Pinned bytes a process holds on `node` that cannot migrate: its node-placed pinned bytes
/// less its mlocked ones (those move).
fn pinned_on(p: &PinnedMemory, node: u32) -> (u64, u64) {
    let all = p.bytes_by_node.get(&node).copied().unwrap_or(0);
    let locked = p.locked_bytes_by_node.get(&node).copied().unwrap_or(0).min(all);
    (all - locked, locked)
}

fn who(h: &Holder) -> String {
    match (&h.job, h.rank) {
        (Some(j), Some(r)) => format!("pid {} ({}, rank {r} of job {j})", h.pid, h.comm),
        (Some(j), None) => format!("pid {} ({}, job {j})", h.pid, h.comm),
        _ => format!("pid {} ({})", h.pid, h.comm),
    }
}

/// The node's holders from every process's residency and pinning.
fn holders_on(node: u32, processes: &[HolderInput]) -> Vec<Holder> {
    let mut out: Vec<Holder> = processes
        .iter()
        .filter_map(|p| {
            let resident_bytes = p.resident_bytes_by_node.get(&node).copied().unwrap_or(0);
            let (pinned_bytes, locked_bytes) = p.pinned.as_ref().map_or((0, 0), |x| pinned_on(x, node));
            if resident_bytes == 0 && pinned_bytes == 0 && locked_bytes == 0 {
                return None;
            }
            let vm_pin_bytes = p.pinned.as_ref().map_or(0, |x| x.vm_pin_bytes);
            Some(Holder {
                pid: p.pid,
                comm: p.comm.clone(),
                job: p.job.clone(),
                rank: p.rank,
                resident_bytes,
                pinned_bytes,
                locked_bytes,
                vm_pin_bytes,
                blocks: pinned_bytes > 0,
            })
        })
        .collect();
    out.sort_by(|a, b| {
        b.pinned_bytes.cmp(&a.pinned_bytes).then(b.resident_bytes.cmp(&a.resident_bytes)).then(a.pid.cmp(&b.pid))
    });
    out
}

fn jobs_of(holders: &[Holder]) -> Vec<JobHold> {
    let mut jobs: BTreeMap<&str, JobHold> = BTreeMap::new();
    for h in holders {
        let Some(j) = &h.job else { continue };
        let e = jobs.entry(j).or_insert_with(|| JobHold {
            job: j.clone(),
            processes: 0,
            resident_bytes: 0,
            pinned_bytes: 0,
            blocking_ranks: vec![],
        });
        e.processes += 1;
        e.resident_bytes += h.resident_bytes;
        e.pinned_bytes += h.pinned_bytes;
        if let (true, Some(r)) = (h.blocks, h.rank) {
            e.blocking_ranks.push(r);
        }
    }
    let mut v: Vec<JobHold> = jobs.into_values().collect();
    for j in &mut v {
        j.blocking_ranks.sort_unstable();
        j.blocking_ranks.dedup();
    }
    v.sort_by(|a, b| b.pinned_bytes.cmp(&a.pinned_bytes).then(b.resident_bytes.cmp(&a.resident_bytes)));
    v
}

/// The reasons about the node's memory blocks.
fn block_reasons(b: Option<&NodeBlocks>, reasons: &mut Vec<Reason>) {
    let mut say = |effect, text: String| reasons.push(Reason { effect, text });
    let Some(b) = b else {
        say(
            Effect::MayBlock,
            "its memory blocks' state and zones could not be read: offlining is not judged from them".into(),
        );
        return;
    };
    if b.unknown > 0 {
        say(Effect::MayBlock, format!("{} of its {} memory blocks have no known state or zone", b.unknown, b.blocks));
    }
    if b.online_spanning > 0 {
        say(
            Effect::Blocks,
            format!(
                "{} online memory block(s) span several zones or nodes (valid_zones `none`): the kernel cannot offline them",
                b.online_spanning
            ),
        );
    }
    if b.not_removable > 0 {
        say(
            Effect::Blocks,
            format!("{} memory block(s) say removable 0: the kernel will not offline them", b.not_removable),
        );
    }
    let kernel = b.online_in_kernel_zones();
    if kernel > 0 {
        let zones: Vec<String> = b.online_kernel.iter().map(|(z, n)| format!("{n} {z}")).collect();
        say(
            Effect::MayBlock,
            format!(
                "memory in kernel zones ({} of {} online blocks: {}): the kernel's own allocations there may block it",
                kernel,
                b.online,
                zones.join(", ")
            ),
        );
    }
    if b.online > 0 && b.online_movable == b.online {
        say(Effect::Note, format!("all {} online blocks are in ZONE_MOVABLE (movable pages only)", b.online));
    }
    if b.going_offline > 0 {
        say(Effect::Note, format!("{} block(s) are going offline now", b.going_offline));
    }
}

/// Judges one node. `others_free`: MemFree of every other node with memory (`None`: one unknown).
fn judge_node(n: &NodeMemory, others_free: Option<u64>, processes: &[HolderInput]) -> NodeUnplug {
    let holders = holders_on(n.id, processes);
    let mut reasons = Vec::new();
    let blocking: Vec<&Holder> = holders.iter().filter(|h| h.blocks).collect();
    let pinned_bytes: u64 = blocking.iter().map(|h| h.pinned_bytes).sum();
    let locked_bytes: u64 = holders.iter().map(|h| h.locked_bytes).sum();
    let online_blocks = n.blocks.as_ref().map(|b| b.online);
    if online_blocks == Some(0) && n.blocks.as_ref().is_some_and(|b| b.unknown == 0) {
        reasons.push(Reason { effect: Effect::Note, text: "no online memory: nothing to offline".into() });
    }
    for h in blocking.iter().take(NAMED) {
        reasons.push(Reason {
            effect: Effect::Blocks,
            text: format!("pinned: {} by {} blocks it (pinned pages cannot migrate)", bytes(h.pinned_bytes), who(h)),
        });
    }
    if blocking.len() > NAMED {
        let rest: u64 = blocking[NAMED..].iter().map(|h| h.pinned_bytes).sum();
        reasons.push(Reason {
            effect: Effect::Blocks,
            text: format!("pinned: {} more by {} other processes", bytes(rest), blocking.len() - NAMED),
        });
    }
    for h in holders.iter().filter(|h| h.vm_pin_bytes > 0 && h.resident_bytes > 0) {
        reasons.push(Reason {
            effect: Effect::MayBlock,
            text: format!(
                "{} has {} pinned for a device (VmPin: RDMA, io_uring, vfio; node not known) and memory here",
                who(h),
                bytes(h.vm_pin_bytes)
            ),
        });
    }
    if locked_bytes > 0 {
        let n_locked = holders.iter().filter(|h| h.locked_bytes > 0).count();
        reasons.push(Reason {
            effect: Effect::Note,
            text: format!(
                "mlocked: {} by {n_locked} process(es) moves with the rest (mlock keeps pages in memory, not in place)",
                bytes(locked_bytes)
            ),
        });
    }
    block_reasons(n.blocks.as_ref(), &mut reasons);
    let used_bytes = match (n.total_bytes, n.free_bytes) {
        (Some(t), Some(f)) => Some(t.saturating_sub(f)),
        _ => None,
    };
    match (used_bytes, others_free) {
        (Some(used), Some(free)) if online_blocks != Some(0) => {
            let text = format!(
                "other nodes have {} free of the {} used here (at most that much to move)",
                bytes(free),
                bytes(used)
            );
            reasons.push(Reason { effect: if free >= used { Effect::Note } else { Effect::Blocks }, text });
        }
        (_, _) if online_blocks == Some(0) => {}
        _ => reasons.push(Reason {
            effect: Effect::MayBlock,
            text: "the free memory of this or another node is not known: whether its pages fit elsewhere is not known"
                .into(),
        }),
    }
    let worst = reasons.iter().map(|r| r.effect).max().unwrap_or(Effect::Note);
    let offline = match worst {
        Effect::Blocks => Offline::No,
        Effect::MayBlock => Offline::Uncertain,
        Effect::Note => Offline::Yes,
    };
    NodeUnplug {
        node: n.id,
        tier: n.tier.clone(),
        offline,
        reasons,
        used_bytes,
        free_elsewhere_bytes: others_free,
        pinned_bytes,
        locked_bytes,
        blockers: blocking.len(),
        blocks: n.blocks.clone(),
        jobs: jobs_of(&holders),
        holders,
    }
}

/// The whole view: every node with memory (or blocks), and every CXL device over its nodes.
pub fn assess(nodes: &[NodeMemory], processes: &[HolderInput], devices: &[DeviceInput]) -> UnplugView {
    let with_memory: Vec<&NodeMemory> = nodes
        .iter()
        .filter(|n| n.total_bytes.unwrap_or(0) > 0 || n.blocks.as_ref().is_some_and(|b| b.blocks > 0))
        .collect();
    let judged: Vec<NodeUnplug> = with_memory
        .iter()
        .map(|n| {
            let others = with_memory.iter().filter(|o| o.id != n.id).map(|o| o.free_bytes).sum::<Option<u64>>();
            judge_node(n, others, processes)
        })
        .collect();
    let devices = devices
        .iter()
        .map(|d| {
            let mine: Vec<&NodeUnplug> = judged.iter().filter(|n| d.nodes.contains(&n.node)).collect();
            let mut blockers: Vec<u32> =
                mine.iter().flat_map(|n| n.holders.iter().filter(|h| h.blocks).map(|h| h.pid)).collect();
            blockers.sort_unstable();
            blockers.dedup();
            let mut reasons: Vec<Reason> = mine
                .iter()
                .flat_map(|n| {
                    n.reasons
                        .iter()
                        .map(move |r| Reason { effect: r.effect, text: format!("node {}: {}", n.node, r.text) })
                })
                .collect();
            // A device whose regions are onlined as no node holds no system RAM to offline.
            let offline = if mine.is_empty() {
                reasons.push(Reason {
                    effect: Effect::Note,
                    text: "no memory onlined as a node: nothing to offline".into(),
                });
                Offline::Yes
            } else {
                mine.iter().map(|n| n.offline).max().unwrap_or(Offline::Yes)
            };
            DeviceUnplug {
                memdev: d.memdev.clone(),
                serial: d.serial,
                nodes: d.nodes.clone(),
                offline,
                reasons,
                pinned_bytes: mine.iter().map(|n| n.pinned_bytes).sum(),
                blockers,
            }
        })
        .collect();
    UnplugView { devices, nodes: judged, holders_from: "processes the agent watches" }
}

/// The view of the model: its live processes' residency and pinning, its CXL devices' nodes,
/// the nodes as last read.
pub fn of_model(model: &super::Model, page_size: u64) -> UnplugView {
    let processes: Vec<HolderInput> = model
        .processes
        .values()
        .filter(|p| p.exited_at_ns.is_none())
        .map(|p| HolderInput {
            pid: p.tgid,
            comm: p.comm.clone(),
            job: p.job.clone(),
            rank: p.rank.rank,
            resident_bytes_by_node: p
                .residency
                .as_ref()
                .map(|(r, _)| r.pages_by_node.iter().map(|(&n, &pages)| (n, pages * page_size)).collect())
                .unwrap_or_default(),
            pinned: p.pinned.clone(),
        })
        .collect();
    let devices: Vec<DeviceInput> = model
        .health
        .devices
        .values()
        .map(|d| DeviceInput {
            memdev: d.inventory.name.clone(),
            serial: d.inventory.serial,
            nodes: d.memory_nodes.clone(),
        })
        .collect();
    assess(&model.node_memory, &processes, &devices)
}

#[cfg(test)]
#[path = "unplug_tests.rs"]
mod tests;
