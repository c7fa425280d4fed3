//! The `insights-cxl` scenario's judge (issue 17): an unhealthy CXL device under a job. A healthy
//! device under job J1 opens nothing; after poison is injected, unhealthy_device_under_job opens
//! for J1's job (8 MiB on the device's node), not for J0's (on DRAM), with its evidence equal to
//! numa_maps and to the kernel's cxl_poison trace records.
use serde_json::Value;

use super::{
    insights::{evidence, find_in, fires, open_in, silent},
    scenarios::{Figure, Report},
};

const PAGE: f64 = 4096.0;
const ID: &str = "unhealthy_device_under_job";

fn job_of(r: &Report, who: &str) -> Value {
    Value::from(format!("ts-alloc-{}", r.truth(&format!("pid.{who}")).unwrap_or(0.0) as u64))
}

pub fn judge(r: &Report) -> Vec<Figure> {
    let healthy = r.snapshots.get("healthy");
    let poisoned = r.agent.as_ref();
    let mut out = Vec::new();
    let healthy_open = healthy.map(|s| open_in(Some(s)).len());
    out.push(Figure {
        name: "healthy device under J1's job: no insight opens".into(),
        kernel: None,
        agent: None,
        ok: healthy_open == Some(0),
        rule: format!("open {healthy_open:?}"),
    });
    let j1 = find_in(poisoned, ID, "job", job_of(r, "J1"));
    out.push(fires("unhealthy_device_under_job for J1's job (8 MiB on the poisoned device's node)", j1));
    out.push(Figure {
        name: "severity critical (poison listed)".into(),
        kernel: None,
        agent: None,
        ok: j1.and_then(|i| i.get("severity")).and_then(Value::as_str) == Some("critical"),
        rule: format!("agent says {:?}", j1.and_then(|i| i.get("severity"))),
    });
    out.push(Figure::close(
        "J1 job_bytes_on_device vs numa_maps N<cxl>",
        r.truth("J1.numa_maps.Ncxl").map(|p| p * PAGE),
        evidence(j1, "job_bytes_on_device"),
        0.01,
        0.0,
    ));
    out.push(Figure::close(
        "poison_bytes vs the cxl_poison trace's dpa_length",
        r.truth("poison.dpa_length"),
        evidence(j1, "poison_bytes"),
        0.0,
        0.0,
    ));
    out.push(Figure::close(
        "poison_ranges vs distinct dpa in the cxl_poison trace",
        r.truth("poison.ranges"),
        evidence(j1, "poison_ranges"),
        0.0,
        0.0,
    ));
    // Every list read that finds the poison traces it again: the agent saw its own reads' records.
    let (k, a) = (r.truth("trace.cxl_poison"), evidence(j1, "events"));
    out.push(Figure {
        name: "device events vs cxl_poison trace records".into(),
        kernel: k,
        agent: a,
        ok: matches!((k, a), (Some(k), Some(a)) if a >= 1.0 && a <= k),
        rule: "1 <= agent <= kernel".into(),
    });
    out.push(Figure::close("kernel: J0 holds nothing on the device", Some(0.0), r.truth("J0.numa_maps.Ncxl"), 0.0, 0.0));
    out.push(silent("unhealthy_device_under_job for J0's job (on DRAM)", find_in(poisoned, ID, "job", job_of(r, "J0"))));
    out
}
