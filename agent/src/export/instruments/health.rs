//! Memory health series: per CXL device (`hw.status`, `hw.errors`, temperature, life used,
//! corrected errors, Get Health Info support), per EDAC controller/DIMM (`hw.errors`), and the
//! health event counts by kind and severity.
use opentelemetry::KeyValue;

use super::{
    push, with, Points, Value, CXL_ERROR_PERSISTENCE, ERROR_TYPE, HEALTH_INFO_STATUS, HEALTH_KIND, HEALTH_SEVERITY,
    HEALTH_SOURCE, HW_ID, HW_NAME, HW_STATE, HW_TYPE, HW_TYPE_MEMORY,
};
use crate::health::{
    mailbox::HealthInfoResult,
    meaning::Severity,
    model::{state_word, DeviceHealth, DeviceState},
    HealthKind, HealthModel,
};

def!(
    HW_STATUS,
    "hw.status",
    "1",
    UpDownCounter,
    false,
    &[HW_ID, HW_NAME, HW_TYPE, HW_STATE],
    "Operational state of a CXL memory device: 1 for its current hw.state (ok, degraded, failed), 0 for the others"
);
def!(HW_ERRORS, "hw.errors", "{error}", Counter, false, &[HW_ID, HW_NAME, HW_TYPE, ERROR_TYPE],
    "Memory errors: per CXL device (hw.id = serial), error events since the agent started by error.type (general_media, dram, poison, aer_correctable, aer_uncorrectable); per EDAC controller/DIMM (hw.id = mcN[/dimmM]), its ce_count/ue_count (error.type corrected, uncorrected)");
def!(
    CXL_TEMPERATURE,
    "tierscope.cxl.device.temperature",
    "Cel",
    Gauge,
    true,
    &[HW_ID, HW_NAME, HEALTH_SOURCE],
    "Device temperature of a CXL memory device, from Get Health Info or else the latest memory module event"
);
def!(
    CXL_LIFE_USED,
    "tierscope.cxl.device.life_used",
    "%",
    Gauge,
    false,
    &[HW_ID, HW_NAME, HEALTH_SOURCE],
    "Life used of a CXL memory device (wear), percent, from Get Health Info or else the latest memory module event"
);
def!(CXL_CORRECTED, "tierscope.cxl.device.corrected_errors", "{error}", Gauge, false, &[HW_ID, HW_NAME, HEALTH_SOURCE, CXL_ERROR_PERSISTENCE],
    "The device's own corrected error counters (volatile, persistent), as Get Health Info or the latest memory module event reports them");
def!(CXL_HEALTH_INFO, "tierscope.cxl.device.health_info", "1", Gauge, false, &[HW_ID, HW_NAME, HEALTH_INFO_STATUS],
    "Whether Get Health Info works on the device: 1 for its status (supported, not_supported, failed), 0 for the others; absent before the first ask");
def!(HEALTH_EVENTS, "tierscope.health.events", "{event}", Counter, false, &[HEALTH_KIND],
    "CXL and EDAC (ras:mc_event) health events decoded since the agent started, by kind (each also goes out as an OTLP log record)");
def!(
    HEALTH_EVENT_SEVERITIES,
    "tierscope.health.event.severities",
    "{event}",
    Counter,
    false,
    &[HEALTH_SEVERITY],
    "The same events by severity (informational, warning, failure, fatal)"
);

/// A CXL device's `hw.id`: its serial number (hex, as `cxl list` prints it), or its memdev name
/// when sysfs has no serial (never happens on real devices; a device seen only in an event
/// before the inventory was read).
pub fn hw_id(d: &DeviceHealth) -> String {
    d.inventory.serial.map_or_else(|| d.inventory.name.clone(), |s| format!("{s:#x}"))
}

fn hw_attrs(id: &str, name: &str) -> Vec<KeyValue> {
    vec![
        KeyValue::new(HW_ID, id.to_string()),
        KeyValue::new(HW_NAME, name.to_string()),
        KeyValue::new(HW_TYPE, HW_TYPE_MEMORY),
    ]
}

/// Event kinds that are errors of the device (`hw.errors`); memory module records (status
/// reports) and log overflows are not.
const ERROR_KINDS: &[HealthKind] = &[
    HealthKind::GeneralMedia,
    HealthKind::Dram,
    HealthKind::Poison,
    HealthKind::AerCorrectable,
    HealthKind::AerUncorrectable,
];
const ALL_KINDS: &[HealthKind] = &[
    HealthKind::GeneralMedia,
    HealthKind::Dram,
    HealthKind::MemoryModule,
    HealthKind::Poison,
    HealthKind::AerCorrectable,
    HealthKind::AerUncorrectable,
    HealthKind::Overflow,
    HealthKind::McEvent,
];
const ALL_SEVERITIES: &[Severity] = &[Severity::Informational, Severity::Warning, Severity::Failure, Severity::Fatal];

/// What a device reports about itself: Get Health Info when it answered, else the latest memory
/// module event (QEMU's device answers only through events).
struct Reported {
    source: &'static str,
    temperature_c: Option<i64>,
    life_used_pct: Option<u64>,
    corrected_volatile: Option<u64>,
    corrected_persistent: Option<u64>,
}

fn reported(d: &DeviceHealth) -> Option<Reported> {
    if let Some(HealthInfoResult::Ok(h)) = &d.health_info {
        return Some(Reported {
            source: "health_info",
            temperature_c: h.temperature_c.map(i64::from),
            life_used_pct: h.life_used_percent.map(u64::from),
            corrected_volatile: Some(u64::from(h.corrected_volatile_errors)),
            corrected_persistent: Some(u64::from(h.corrected_persistent_errors)),
        });
    }
    let e = d.last_module_event.as_ref()?;
    let num = |k: &str| e.decoded.get(k);
    Some(Reported {
        source: "memory_module_event",
        temperature_c: num("temperature_c").and_then(|v| v.as_i64()),
        life_used_pct: num("life_used_percent").and_then(|v| v.as_u64()),
        corrected_volatile: num("corrected_volatile_errors").and_then(|v| v.as_u64()),
        corrected_persistent: num("corrected_persistent_errors").and_then(|v| v.as_u64()),
    })
}

/// Health series: per CXL device (state, errors, temperature, life used, Get Health Info
/// support), per EDAC controller/DIMM (errors), and the event counts. Nothing is invented for
/// a value the device did not report: an absent temperature is an absent series, not 0.
pub(super) fn points(h: &HealthModel, out: &mut Points) {
    for (name, d) in &h.devices {
        let id = hw_id(d);
        let a = hw_attrs(&id, name);
        let (state, _) = d.assess();
        for s in [DeviceState::Ok, DeviceState::Degraded, DeviceState::Failed] {
            push(
                out,
                &HW_STATUS,
                with(a.clone(), [KeyValue::new(HW_STATE, state_word(s))]),
                Value::I64(i64::from(s == state)),
            );
        }
        for k in ERROR_KINDS {
            let n = d.events_by_kind.get(k).copied().unwrap_or(0);
            push(out, &HW_ERRORS, with(a.clone(), [KeyValue::new(ERROR_TYPE, k.as_str())]), Value::U64(n));
        }
        let ident = || vec![KeyValue::new(HW_ID, id.clone()), KeyValue::new(HW_NAME, name.clone())];
        if let Some(r) = reported(d) {
            let src = KeyValue::new(HEALTH_SOURCE, r.source);
            if let Some(t) = r.temperature_c {
                push(out, &CXL_TEMPERATURE, with(ident(), [src.clone()]), Value::F64(t as f64));
            }
            if let Some(l) = r.life_used_pct {
                push(out, &CXL_LIFE_USED, with(ident(), [src.clone()]), Value::U64(l));
            }
            for (p, v) in [("volatile", r.corrected_volatile), ("persistent", r.corrected_persistent)] {
                if let Some(v) = v {
                    push(
                        out,
                        &CXL_CORRECTED,
                        with(ident(), [src.clone(), KeyValue::new(CXL_ERROR_PERSISTENCE, p)]),
                        Value::U64(v),
                    );
                }
            }
        }
        if let Some(hi) = &d.health_info {
            let now = match hi {
                HealthInfoResult::Ok(_) => "supported",
                HealthInfoResult::NotSupported { .. } => "not_supported",
                HealthInfoResult::Failed { .. } => "failed",
            };
            for s in ["supported", "not_supported", "failed"] {
                push(
                    out,
                    &CXL_HEALTH_INFO,
                    with(ident(), [KeyValue::new(HEALTH_INFO_STATUS, s)]),
                    Value::U64(u64::from(s == now)),
                );
            }
        }
    }
    for e in &h.edac {
        let a = hw_attrs(&e.name, e.label.as_deref().unwrap_or(&e.name));
        for (t, v) in [("corrected", e.ce_count), ("uncorrected", e.ue_count)] {
            if let Some(v) = v {
                push(out, &HW_ERRORS, with(a.clone(), [KeyValue::new(ERROR_TYPE, t)]), Value::U64(v));
            }
        }
    }
    for k in ALL_KINDS {
        let n = h.events_by_kind.get(k).copied().unwrap_or(0);
        push(out, &HEALTH_EVENTS, vec![KeyValue::new(HEALTH_KIND, k.as_str())], Value::U64(n));
    }
    for s in ALL_SEVERITIES {
        let n = h.events_by_severity.get(s).copied().unwrap_or(0);
        push(out, &HEALTH_EVENT_SEVERITIES, vec![KeyValue::new(HEALTH_SEVERITY, s.as_str())], Value::U64(n));
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::export::instruments::{
        tests::{find, one},
        Kind, CATALOG,
    };

    fn device(name: &str, serial: Option<u64>) -> DeviceHealth {
        DeviceHealth {
            inventory: crate::topology::CxlMemdev { name: name.into(), serial, ..Default::default() },
            ..Default::default()
        }
    }

    fn module_event(temp: i64, life: u64, fatal: bool) -> crate::health::HealthEvent {
        crate::health::HealthEvent {
            kind: HealthKind::MemoryModule,
            tracepoint: "cxl:cxl_memory_module".into(),
            ts_ns: 5,
            pid: 0,
            severity: if fatal { Severity::Fatal } else { Severity::Informational },
            device: Some("mem1".into()),
            serial: Some(0xbeef),
            hpa: None,
            dpa: None,
            length: None,
            region: None,
            node: None,
            summary: String::new(),
            decoded: [
                ("temperature_c".to_string(), serde_json::Value::from(temp)),
                ("life_used_percent".to_string(), serde_json::Value::from(life)),
                ("corrected_volatile_errors".to_string(), serde_json::Value::from(3)),
            ]
            .into(),
            fields: BTreeMap::new(),
        }
    }

    fn health_model() -> HealthModel {
        let mut h = HealthModel::default();
        let mut d0 = device("mem0", Some(0x1234));
        d0.health_info = Some(HealthInfoResult::Ok(crate::health::mailbox::HealthInfo {
            health_status: vec![],
            health_status_bits: 0,
            media_status: "Normal".into(),
            media_status_code: 0,
            additional_status: BTreeMap::new(),
            life_used_percent: Some(7),
            temperature_c: Some(-5),
            dirty_shutdowns: 0,
            corrected_volatile_errors: 11,
            corrected_persistent_errors: 2,
        }));
        d0.events_by_kind.insert(HealthKind::Poison, 2);
        d0.events_by_kind.insert(HealthKind::MemoryModule, 9);
        h.devices.insert("mem0".into(), d0);
        let mut d1 = device("mem1", None);
        d1.health_info = Some(HealthInfoResult::NotSupported { reason: "no".into() });
        h.devices.insert("mem1".into(), d1);
        h.apply(module_event(41, 30, true));
        h.edac.push(crate::health::edac::EdacCounts {
            name: "mc0/dimm2".into(),
            label: Some("DIMM_A1".into()),
            ce_count: Some(12),
            ue_count: None,
        });
        h
    }

    #[test]
    fn health_maps_to_hw_conventions_and_tierscope_names() {
        let mut out = Points::new();
        points(&health_model(), &mut out);
        let p = &out;
        // mem0: Get Health Info answered; hw.id is the serial.
        assert_eq!(one(p, "hw.status", &[(HW_ID, "0x1234"), (HW_STATE, "ok")]), Value::I64(1));
        assert_eq!(one(p, "hw.status", &[(HW_ID, "0x1234"), (HW_STATE, "failed")]), Value::I64(0));
        assert!(p["hw.status"]
            .iter()
            .all(|pt| pt.attributes.iter().any(|kv| kv.key.as_str() == HW_TYPE && kv.value.as_str() == "memory")));
        assert_eq!(one(p, "hw.errors", &[(HW_ID, "0x1234"), (ERROR_TYPE, "poison")]), Value::U64(2));
        assert_eq!(one(p, "hw.errors", &[(HW_ID, "0x1234"), (ERROR_TYPE, "dram")]), Value::U64(0));
        assert!(find(p, "hw.errors", &[(ERROR_TYPE, "memory_module")]).is_empty(), "status reports are not errors");
        assert_eq!(
            one(p, "tierscope.cxl.device.temperature", &[(HW_ID, "0x1234"), (HEALTH_SOURCE, "health_info")]),
            Value::F64(-5.0)
        );
        assert_eq!(one(p, "tierscope.cxl.device.life_used", &[(HW_ID, "0x1234")]), Value::U64(7));
        assert_eq!(
            one(
                p,
                "tierscope.cxl.device.corrected_errors",
                &[(HW_ID, "0x1234"), (CXL_ERROR_PERSISTENCE, "persistent")]
            ),
            Value::U64(2)
        );
        assert_eq!(
            one(p, "tierscope.cxl.device.health_info", &[(HW_ID, "0x1234"), (HEALTH_INFO_STATUS, "supported")]),
            Value::U64(1)
        );
        // mem1: no Get Health Info; its serial came with the event; a fatal event failed it; its
        // numbers come from the memory module event.
        assert_eq!(
            one(p, "tierscope.cxl.device.health_info", &[(HW_NAME, "mem1"), (HEALTH_INFO_STATUS, "not_supported")]),
            Value::U64(1)
        );
        assert_eq!(
            one(p, "tierscope.cxl.device.health_info", &[(HW_NAME, "mem1"), (HEALTH_INFO_STATUS, "supported")]),
            Value::U64(0)
        );
        assert_eq!(one(p, "hw.status", &[(HW_ID, "0xbeef"), (HW_NAME, "mem1"), (HW_STATE, "failed")]), Value::I64(1));
        assert_eq!(
            one(p, "tierscope.cxl.device.temperature", &[(HW_ID, "0xbeef"), (HEALTH_SOURCE, "memory_module_event")]),
            Value::F64(41.0)
        );
        assert_eq!(one(p, "tierscope.cxl.device.life_used", &[(HW_ID, "0xbeef")]), Value::U64(30));
        assert_eq!(
            one(p, "tierscope.cxl.device.corrected_errors", &[(HW_ID, "0xbeef"), (CXL_ERROR_PERSISTENCE, "volatile")]),
            Value::U64(3)
        );
        assert!(
            find(
                p,
                "tierscope.cxl.device.corrected_errors",
                &[(HW_ID, "0xbeef"), (CXL_ERROR_PERSISTENCE, "persistent")]
            )
            .is_empty(),
            "not reported: not 0"
        );
        // EDAC: the kernel's counters, a missing one absent.
        assert_eq!(
            one(p, "hw.errors", &[(HW_ID, "mc0/dimm2"), (HW_NAME, "DIMM_A1"), (ERROR_TYPE, "corrected")]),
            Value::U64(12)
        );
        assert!(find(p, "hw.errors", &[(HW_ID, "mc0/dimm2"), (ERROR_TYPE, "uncorrected")]).is_empty());
        // Event counts.
        assert_eq!(one(p, "tierscope.health.events", &[(HEALTH_KIND, "memory_module")]), Value::U64(1));
        assert_eq!(one(p, "tierscope.health.event.severities", &[(HEALTH_SEVERITY, "fatal")]), Value::U64(1));
        for (name, pts) in p {
            let def = CATALOG.iter().find(|d| d.name == *name).unwrap();
            for pt in pts {
                assert!(pt.attributes.iter().all(|kv| def.attributes.contains(&kv.key.as_str())), "{name}: {pt:?}");
                assert_eq!(matches!(pt.value, Value::F64(_)), def.float, "{name}");
                assert_eq!(matches!(pt.value, Value::I64(_)), def.kind == Kind::UpDownCounter, "{name}");
            }
        }
    }
}
