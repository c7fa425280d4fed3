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
    out.push(Figure::kernel(
        "J0 holds nothing on the device's node",
        r.truth("J0.numa_maps.Ncxl"),
        |k| k == 0.0,
        "= 0",
    ));
    out.push(silent(
        "unhealthy_device_under_job for J0's job (on DRAM)",
        find_in(poisoned, ID, "job", job_of(r, "J0")),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_for_the_job_on_the_device_with_the_trace_figures() {
        let lines: Vec<String> = [
            "TS-TRUTH pid.J1 176",
            "TS-TRUTH pid.J0 177",
            "TS-TRUTH trace.cxl_poison 1",
            "TS-TRUTH poison.dpa_length 64",
            "TS-TRUTH poison.ranges 1",
            "TS-TRUTH J1.numa_maps.Ncxl 2048",
            "TS-TRUTH J0.numa_maps.Ncxl 0",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let j1 = r#"{"id":"unhealthy_device_under_job","severity":"critical","subject":{"kind":"job","job":"ts-alloc-176"},"evidence":{"job_bytes_on_device":8388608,"poison_bytes":64,"poison_ranges":1,"events":1}}"#;
        let json = format!(r#"{{"insights":{{"open":[{j1}]}}}}"#);
        let mut r = Report::parse(&lines, Some(&json));
        r.snapshots.insert("healthy".into(), serde_json::json!({"insights":{"open":[]}}));
        let bad: Vec<String> = judge(&r).into_iter().filter(|f| !f.ok).map(|f| f.name).collect();
        assert!(bad.is_empty(), "{bad:?}");
        // Opened for J0 as well (on DRAM), at warning level: two failures.
        let json = format!(
            r#"{{"insights":{{"open":[{},{}]}}}}"#,
            j1.replace("critical", "warning"),
            j1.replace("176", "177")
        );
        let mut r2 = Report::parse(&lines, Some(&json));
        r2.snapshots = r.snapshots.clone();
        let bad: Vec<String> = judge(&r2).into_iter().filter(|f| !f.ok).map(|f| f.name).collect();
        assert_eq!(bad.len(), 2, "{bad:?}");
    }
}
