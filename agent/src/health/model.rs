//! The pure health model: CXL devices with their state (ok / degraded / failed, and why),
//! counts of events by kind and severity, the last events with their addresses and nodes, the
//! poison each device listed, EDAC counters. No I/O: the collector feeds it values.
use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

use super::{
    edac::EdacCounts,
    event::{HealthEvent, HealthKind},
    mailbox::HealthInfoResult,
    meaning::{self as m, Severity},
};
use crate::topology::CxlMemdev;

/// Events kept for display, newest last.
pub const EVENT_HISTORY: usize = 64;

/// A device's overall state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceState {
    #[default]
    Ok,
    Degraded,
    Failed,
}

/// Host physical address -> NUMA node: onlined memory blocks, then CXL regions' ranges.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AddressMap {
    pub block_bytes: u64,
    pub node_of_block: BTreeMap<u64, u32>,
    /// (start, size, node) of CXL regions whose memory is a node.
    pub regions: Vec<(u64, u64, u32)>,
}

impl AddressMap {
    pub fn node_of(&self, hpa: u64) -> Option<u32> {
        if self.block_bytes > 0 {
            if let Some(&n) = self.node_of_block.get(&(hpa / self.block_bytes)) {
                return Some(n);
            }
        }
        self.regions.iter().find(|(s, len, _)| hpa >= *s && hpa - s < *len).map(|r| r.2)
    }
}

/// A poisoned range a device listed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PoisonEntry {
    #[serde(serialize_with = "hex")]
    pub dpa: u64,
    pub length: u64,
    #[serde(serialize_with = "hex_opt")]
    pub hpa: Option<u64>,
    pub region: Option<String>,
    pub node: Option<u32>,
    pub source: Option<String>,
    /// How many list reads reported it.
    pub times_listed: u64,
    pub first_seen_ns: u64,
}

fn hex<S: serde::Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{v:#x}"))
}

fn hex_opt<S: serde::Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => hex(v, s),
        None => s.serialize_none(),
    }
}

/// How the agent's reads of a device's poison list went.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PoisonListReads {
    /// Reads the agent triggered (`trigger_poison_list`).
    pub triggered: u64,
    /// Why the list cannot be read, when it cannot.
    pub problem: Option<String>,
}

/// Everything known about one CXL memory device.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeviceHealth {
    pub inventory: CxlMemdev,
    /// The NUMA nodes its regions' memory is onlined as.
    pub memory_nodes: Vec<u32>,
    /// The last Get Health Info answer; `None` before the first ask.
    pub health_info: Option<HealthInfoResult>,
    /// The latest memory module event: the device's own report of its health.
    pub last_module_event: Option<HealthEvent>,
    pub poison: BTreeMap<u64, PoisonEntry>,
    pub poison_reads: PoisonListReads,
    pub events_by_kind: BTreeMap<HealthKind, u64>,
    pub events_by_severity: BTreeMap<Severity, u64>,
    /// Conditions that events raised during the session; they stay until the agent restarts.
    pub raised: BTreeMap<String, DeviceState>,
}

impl DeviceHealth {
    /// The state and the reasons behind it, worst first.
    pub fn assess(&self) -> (DeviceState, Vec<String>) {
        let mut why: Vec<(DeviceState, String)> = self.raised.iter().map(|(w, s)| (*s, w.clone())).collect();
        if let Some(HealthInfoResult::Ok(h)) = &self.health_info {
            why.extend(status_reasons(
                "health info",
                u64::from(h.health_status_bits),
                i64::from(h.media_status_code),
                &h.additional_status,
            ));
        }
        if let Some(e) = &self.last_module_event {
            let bits = e.fields.get("health_status").and_then(|v| v.as_u64()).unwrap_or(0);
            let media = e.fields.get("media_status").and_then(|v| v.as_i64()).unwrap_or(0);
            let add: BTreeMap<String, String> = e
                .fields
                .get("add_status")
                .and_then(|v| v.as_u64())
                .map(|a| m::additional_status(a).iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
                .unwrap_or_default();
            why.extend(status_reasons("memory module event", bits, media, &add));
        }
        if !self.poison.is_empty() {
            let bytes: u64 = self.poison.values().map(|p| p.length).sum();
            why.push((
                DeviceState::Degraded,
                format!("{} poisoned range(s) listed ({bytes} bytes)", self.poison.len()),
            ));
        }
        why.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        why.dedup();
        let state = why.first().map_or(DeviceState::Ok, |w| w.0);
        (state, why.into_iter().map(|(_, w)| w).collect())
    }
}

/// Reasons from a health status byte, a media status and the additional status levels (as Get
/// Health Info and memory module events report them).
fn status_reasons(from: &str, health: u64, media: i64, add: &BTreeMap<String, String>) -> Vec<(DeviceState, String)> {
    let mut out = Vec::new();
    for w in m::flags(None, m::HEALTH_STATUS, health) {
        let s = if w == "REPLACEMENT_NEEDED" { DeviceState::Failed } else { DeviceState::Degraded };
        out.push((s, format!("{from}: {w}")));
    }
    if media != 0 {
        let s = if m::MEDIA_FAILED.contains(&media) { DeviceState::Failed } else { DeviceState::Degraded };
        out.push((s, format!("{from}: media status {}", m::symbol(None, m::MEDIA_STATUS, media))));
    }
    for (k, v) in add {
        match v.as_str() {
            "Warning" => out.push((DeviceState::Degraded, format!("{from}: {k} at warning level"))),
            "Critical" => out.push((DeviceState::Failed, format!("{from}: {k} at critical level"))),
            _ => {}
        }
    }
    out
}

/// The health of the machine's memory.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HealthModel {
    /// Whether `/sys/bus/cxl` exists (the CXL core is loaded).
    pub cxl_bus: bool,
    pub devices: BTreeMap<String, DeviceHealth>,
    pub events: VecDeque<HealthEvent>,
    pub events_by_kind: BTreeMap<HealthKind, u64>,
    pub events_by_severity: BTreeMap<Severity, u64>,
    pub edac: Vec<EdacCounts>,
    pub address_map: AddressMap,
}

impl HealthModel {
    /// Sets the inventory (from sysfs); devices already known keep what events told.
    pub fn set_inventory(&mut self, cxl_bus: bool, memdevs: &[(CxlMemdev, Vec<u32>)]) {
        self.cxl_bus = cxl_bus;
        for (md, nodes) in memdevs {
            let d = self.devices.entry(md.name.clone()).or_default();
            d.inventory = md.clone();
            d.memory_nodes = nodes.clone();
        }
    }

    fn device(&mut self, name: &str) -> &mut DeviceHealth {
        self.devices.entry(name.to_string()).or_insert_with(|| DeviceHealth {
            inventory: CxlMemdev { name: name.to_string(), ..Default::default() },
            ..Default::default()
        })
    }

    pub fn set_health_info(&mut self, memdev: &str, r: HealthInfoResult) {
        self.device(memdev).health_info = Some(r);
    }

    /// Records one agent-triggered poison list read, or why it could not be done.
    pub fn poison_list_read(&mut self, memdev: &str, problem: Option<String>) {
        let r = &mut self.device(memdev).poison_reads;
        match problem {
            None => {
                r.triggered += 1;
                r.problem = None;
            }
            Some(p) => r.problem = Some(p),
        }
    }

    /// Folds in one decoded event. A poison range that an earlier list read already reported
    /// counts once: every read of the list reports every range again.
    pub fn apply(&mut self, mut e: HealthEvent) {
        e.node = e.hpa.and_then(|a| self.address_map.node_of(a));
        if e.kind == HealthKind::McEvent || e.device.is_none() {
            self.record(e);
            return;
        }
        let name = e.device.clone().unwrap_or_default();
        let dev = self.device(&name);
        if dev.inventory.serial.is_none() {
            dev.inventory.serial = e.serial;
        }
        match e.kind {
            HealthKind::Poison => {
                let trace_type = e.decoded.get("trace_type").and_then(|v| v.as_str()).unwrap_or("");
                let Some(dpa) = e.dpa else {
                    self.record(e);
                    return;
                };
                if trace_type == "Clear" {
                    dev.poison.remove(&dpa);
                } else if let Some(p) = dev.poison.get_mut(&dpa) {
                    p.times_listed += 1;
                    return;
                } else {
                    dev.poison.insert(
                        dpa,
                        PoisonEntry {
                            dpa,
                            length: e.length.unwrap_or(0),
                            hpa: e.hpa,
                            region: e.region.clone(),
                            node: e.node,
                            source: e.decoded.get("source").and_then(|v| v.as_str()).map(str::to_string),
                            times_listed: u64::from(trace_type == "List"),
                            first_seen_ns: e.ts_ns,
                        },
                    );
                }
            }
            HealthKind::MemoryModule => dev.last_module_event = Some(e.clone()),
            _ => {}
        }
        for (state, why) in raised(&e) {
            let slot = dev.raised.entry(why).or_default();
            *slot = (*slot).max(state);
        }
        *dev.events_by_kind.entry(e.kind).or_default() += 1;
        *dev.events_by_severity.entry(e.severity).or_default() += 1;
        self.record(e);
    }

    fn record(&mut self, e: HealthEvent) {
        *self.events_by_kind.entry(e.kind).or_default() += 1;
        *self.events_by_severity.entry(e.severity).or_default() += 1;
        if self.events.len() == EVENT_HISTORY {
            self.events.pop_front();
        }
        self.events.push_back(e);
    }

    /// One line: "no CXL memory devices", or how many devices are in which state.
    pub fn status_line(&self) -> String {
        if self.devices.is_empty() {
            return "no CXL memory devices".into();
        }
        let mut by: BTreeMap<DeviceState, usize> = BTreeMap::new();
        for d in self.devices.values() {
            *by.entry(d.assess().0).or_default() += 1;
        }
        let parts: Vec<String> = by.iter().rev().map(|(s, n)| format!("{n} {}", state_word(*s))).collect();
        format!("{} CXL memory device(s): {}", self.devices.len(), parts.join(", "))
    }
}

pub fn state_word(s: DeviceState) -> &'static str {
    match s {
        DeviceState::Ok => "ok",
        DeviceState::Degraded => "degraded",
        DeviceState::Failed => "failed",
    }
}

/// The lasting conditions an event raises on its device (memory module status is judged from
/// the latest record instead, since a later record can clear it).
fn raised(e: &HealthEvent) -> Vec<(DeviceState, String)> {
    let mut out = Vec::new();
    let words = |k: &str| -> Vec<String> {
        e.decoded
            .get(k)
            .and_then(|v| v.as_array())
            .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
            .unwrap_or_default()
    };
    // Poison is judged from the device's list of ranges instead.
    match e.severity {
        _ if e.kind == HealthKind::Poison => {}
        Severity::Fatal => out.push((DeviceState::Failed, format!("fatal {} event", e.kind.as_str()))),
        Severity::Failure => out.push((DeviceState::Degraded, format!("failure-level {} event", e.kind.as_str()))),
        _ => {}
    }
    for w in words("record_flags") {
        let s = if w == "HARDWARE_REPLACEMENT_NEEDED" { DeviceState::Failed } else { DeviceState::Degraded };
        out.push((s, format!("{} event flagged {w}", e.kind.as_str())));
    }
    if words("descriptor").iter().any(|w| w == "UNCORRECTABLE_EVENT") {
        out.push((DeviceState::Degraded, format!("uncorrectable {} error", e.kind.as_str())));
    }
    match e.kind {
        HealthKind::AerUncorrectable => {
            out.push((DeviceState::Failed, "uncorrectable CXL protocol (AER) error".into()))
        }
        HealthKind::Overflow => out.push((DeviceState::Degraded, "event log overflowed: records were lost".into())),
        _ => {}
    }
    out
}
