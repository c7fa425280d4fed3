//! An unhealthy CXL device under a job: the device is degraded or failed (health status, media
//! status, poison listed, uncorrectable events) and its memory node holds the job's memory.
use std::collections::BTreeMap;

use super::{bytes_text, Finding, Inputs, InsightId, Level, Severity, Subject};
use crate::health::{meaning, model::DeviceState};

pub fn findings(i: &Inputs<'_>) -> Vec<Finding> {
    let mut out = Vec::new();
    for (name, d) in &i.health.devices {
        let (state, reasons) = d.assess();
        if state == DeviceState::Ok || d.memory_nodes.is_empty() {
            continue;
        }
        let mut jobs: BTreeMap<&str, (u64, Vec<u32>)> = BTreeMap::new();
        for p in i.tracked() {
            let Some(job) = &p.job else { continue };
            let pages: u64 = p
                .residency
                .iter()
                .flat_map(|(r, _)| r.pages_by_node.iter())
                .filter(|(n, _)| d.memory_nodes.contains(n))
                .map(|(_, &v)| v)
                .sum();
            if pages > 0 {
                let e = jobs.entry(job.as_str()).or_default();
                e.0 += pages;
                e.1.push(p.tgid);
            }
        }
        let nodes: Vec<String> = d.memory_nodes.iter().map(u32::to_string).collect();
        let nodes = nodes.join(",");
        for (job, (pages, pids)) in jobs {
            let bytes = pages * i.page_size;
            let poison_bytes: u64 = d.poison.values().map(|p| p.length).sum();
            let failures = d
                .events_by_severity
                .iter()
                .filter(|(s, _)| matches!(s, meaning::Severity::Failure | meaning::Severity::Fatal))
                .map(|(_, &c)| c)
                .sum::<u64>();
            out.push(Finding {
                id: InsightId::UnhealthyDeviceUnderJob,
                severity: if state == DeviceState::Failed || !d.poison.is_empty() { Severity::Critical } else { Severity::Warning },
                subject: Subject::Job { job: job.to_string() },
                level: Level::Open,
                summary: format!(
                    "CXL device {name} is {} ({}) and holds {} of the job on node {nodes}",
                    match state {
                        DeviceState::Failed => "failed",
                        _ => "degraded",
                    },
                    reasons.first().map_or("", String::as_str),
                    bytes_text(bytes as f64)
                ),
                evidence: [
                    ("job_bytes_on_device", bytes as f64),
                    ("device_state", if state == DeviceState::Failed { 2.0 } else { 1.0 }),
                    ("poison_ranges", d.poison.len() as f64),
                    ("poison_bytes", poison_bytes as f64),
                    ("events", d.events_by_kind.values().sum::<u64>() as f64),
                    ("failure_events", failures as f64),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
                details: std::iter::once(format!("device {name}: {}", reasons.join("; ")))
                    .chain(std::iter::once(format!("processes on node {nodes}: {pids:?}")))
                    .collect(),
                try_this: format!(
                    "move the job off the device: `migratepages <pid> {nodes} <dram node>` for {pids:?}, or restart it under \
                     `numactl --membind=<dram nodes>`; then take the memory out of service (`daxctl offline-memory` / \
                     `echo offline > /sys/devices/system/memory/memoryN/state` for node {nodes}) and check \
                     `cxl list -m {name} -H --media-errors`"
                ),
            });
        }
    }
    out
}
