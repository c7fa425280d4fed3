//! The snapshot's `health` key: devices with state and why, the last events (with the
//! processes that have memory on the event's node), counts, EDAC counters.
use std::collections::BTreeMap;

use serde::Serialize;

use super::{
    edac::EdacCounts,
    event::HealthEvent,
    mailbox::HealthInfoResult,
    model::{DeviceState, HealthModel, PoisonEntry, PoisonListReads},
};
use crate::topology::CxlMemdev;

#[derive(Clone, Debug, Serialize)]
pub struct HealthSnapshot {
    /// "no CXL memory devices", or devices by state.
    pub status: String,
    pub devices: Vec<DeviceSnapshot>,
    /// The last events, oldest first.
    pub events: Vec<EventSnapshot>,
    pub events_by_kind: BTreeMap<String, u64>,
    pub events_by_severity: BTreeMap<String, u64>,
    pub edac: Vec<EdacCounts>,
}

#[derive(Clone, Debug, Serialize)]
pub struct DeviceSnapshot {
    #[serde(flatten)]
    pub inventory: CxlMemdev,
    pub memory_nodes: Vec<u32>,
    pub state: DeviceState,
    pub why: Vec<String>,
    /// The mailbox's Get Health Info; absent before the agent asked.
    pub health_info: Option<HealthInfoResult>,
    /// The latest memory module event's decoded report (health, media, life, temperature).
    pub reported: Option<BTreeMap<String, serde_json::Value>>,
    pub poison: Vec<PoisonEntry>,
    pub poison_list_reads: PoisonListReads,
    pub events_by_kind: BTreeMap<String, u64>,
    pub events_by_severity: BTreeMap<String, u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct EventSnapshot {
    #[serde(flatten)]
    pub event: HealthEvent,
    /// Tracked processes with memory resident on (or allocated from) the event's node: the
    /// ones whose pages may be the affected ones.
    pub processes_on_node: Vec<u32>,
}

/// `processes_on_node` names the processes with memory on a node (the model knows them).
pub fn build(h: &HealthModel, processes_on_node: impl Fn(u32) -> Vec<u32>) -> HealthSnapshot {
    let on_node = |node: Option<u32>| node.map(&processes_on_node).unwrap_or_default();
    HealthSnapshot {
        status: h.status_line(),
        devices: h
            .devices
            .values()
            .map(|d| {
                let (state, why) = d.assess();
                DeviceSnapshot {
                    inventory: d.inventory.clone(),
                    memory_nodes: d.memory_nodes.clone(),
                    state,
                    why,
                    health_info: d.health_info.clone(),
                    reported: d.last_module_event.as_ref().map(|e| e.decoded.clone()),
                    poison: d.poison.values().cloned().collect(),
                    poison_list_reads: d.poison_reads.clone(),
                    events_by_kind: by_kind(&d.events_by_kind),
                    events_by_severity: by_severity(&d.events_by_severity),
                }
            })
            .collect(),
        events: h
            .events
            .iter()
            .map(|e| EventSnapshot { processes_on_node: on_node(e.node), event: e.clone() })
            .collect(),
        events_by_kind: by_kind(&h.events_by_kind),
        events_by_severity: by_severity(&h.events_by_severity),
        edac: h.edac.clone(),
    }
}

fn by_kind(m: &BTreeMap<super::event::HealthKind, u64>) -> BTreeMap<String, u64> {
    m.iter().map(|(k, v)| (k.as_str().to_string(), *v)).collect()
}

fn by_severity(m: &BTreeMap<super::meaning::Severity, u64>) -> BTreeMap<String, u64> {
    m.iter().map(|(k, v)| (k.as_str().to_string(), *v)).collect()
}
