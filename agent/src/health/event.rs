//! A decoded CXL/RAS event: the raw fields of the record (every one, known or not) plus what
//! the known ones mean, in words.
use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;
use tierscope_common::event::HealthSource;

use super::{
    format::{raw_fields, HealthFormat},
    meaning::{self as m, Severity},
};

/// What kind of health event a record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthKind {
    GeneralMedia,
    Dram,
    MemoryModule,
    Poison,
    AerCorrectable,
    AerUncorrectable,
    Overflow,
    /// An EDAC memory controller event (`ras:mc_event`), not tied to a CXL device.
    McEvent,
}

impl HealthKind {
    pub fn of(source: HealthSource) -> HealthKind {
        match source {
            HealthSource::CxlGeneralMedia => HealthKind::GeneralMedia,
            HealthSource::CxlDram => HealthKind::Dram,
            HealthSource::CxlMemoryModule => HealthKind::MemoryModule,
            HealthSource::CxlPoison => HealthKind::Poison,
            HealthSource::CxlAerCorrectable => HealthKind::AerCorrectable,
            HealthSource::CxlAerUncorrectable => HealthKind::AerUncorrectable,
            HealthSource::CxlOverflow => HealthKind::Overflow,
            HealthSource::McEvent => HealthKind::McEvent,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            HealthKind::GeneralMedia => "general_media",
            HealthKind::Dram => "dram",
            HealthKind::MemoryModule => "memory_module",
            HealthKind::Poison => "poison",
            HealthKind::AerCorrectable => "aer_correctable",
            HealthKind::AerUncorrectable => "aer_uncorrectable",
            HealthKind::Overflow => "overflow",
            HealthKind::McEvent => "mc_event",
        }
    }
}

/// One decoded event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HealthEvent {
    pub kind: HealthKind,
    /// The tracepoint, `cxl:cxl_dram`.
    pub tracepoint: String,
    pub ts_ns: u64,
    /// The task the kernel ran the tracepoint in (for poison: whoever read the list).
    pub pid: u32,
    pub severity: Severity,
    /// The memdev (`mem0`), or the EDAC label for `mc_event`.
    pub device: Option<String>,
    #[serde(serialize_with = "hex_opt")]
    pub serial: Option<u64>,
    /// Host physical address; absent when the kernel could not translate it (it writes ~0).
    #[serde(serialize_with = "hex_opt")]
    pub hpa: Option<u64>,
    /// Device physical address.
    #[serde(serialize_with = "hex_opt")]
    pub dpa: Option<u64>,
    /// Bytes affected, when the record says (poison ranges).
    pub length: Option<u64>,
    pub region: Option<String>,
    /// The NUMA node `hpa` lies on, when it maps to onlined memory (set by the model).
    pub node: Option<u32>,
    /// One line in words.
    pub summary: String,
    /// The known fields' meanings: names for codes, lists for flag words, levels.
    pub decoded: BTreeMap<String, Value>,
    /// Every field of the record as the kernel laid it out, by name (numbers, strings, hex).
    pub fields: BTreeMap<String, Value>,
}

fn hex_opt<S: serde::Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.serialize_str(&format!("{v:#x}")),
        None => s.serialize_none(),
    }
}

/// Decodes a copied record. Fields the format lacks are simply absent from the meaning; nothing
/// here fails on odd input.
pub fn decode(source: HealthSource, fmt: &HealthFormat, data: &[u8], ts_ns: u64, pid: u32) -> HealthEvent {
    let kind = HealthKind::of(source);
    let fields = raw_fields(fmt, data);
    let group = if source == HealthSource::McEvent { "ras" } else { "cxl" };
    let u = |n: &str| fields.get(n).and_then(|v| v.as_u64().or_else(|| v.as_i64().map(|x| x as u64)));
    let i = |n: &str| fields.get(n).and_then(|v| v.as_i64().or_else(|| v.as_u64().map(|x| x as i64)));
    let s = |n: &str| fields.get(n).and_then(Value::as_str).map(str::to_string).filter(|x| !x.is_empty());
    let sym = |n: &str, builtin: &[(i64, &str)]| i(n).map(|v| m::symbol(fmt.symbols.get(n), builtin, v));
    let flg =
        |n: &str, builtin: &[(u64, &str)], ignore: u64| u(n).map(|v| m::flags(fmt.flags.get(n), builtin, v & !ignore));
    let mut d: BTreeMap<String, Value> = BTreeMap::new();
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            d.insert(k.to_string(), v);
        }
    };
    let words = |v: Option<Vec<String>>| v.map(|w| Value::from(w));
    let text = |v: Option<String>| v.map(Value::from);

    // The Common Event Record (general media, DRAM, memory module).
    let log = i("log");
    put("log", text(log.map(m::log_name)));
    let hdr = u("hdr_flags");
    put("record_flags", words(flg("hdr_flags", m::HDR_FLAGS, 3)));
    let mut severity = match (hdr, log) {
        (Some(f), _) => Severity::from_cxl(f),
        (None, Some(l)) => Severity::from_cxl(l as u64),
        (None, None) => Severity::Informational,
    };
    let mut hpa = u("hpa").filter(|&a| a != u64::MAX);
    let mut dpa = u("dpa");
    let mut length = None;
    let mut region = s("region_name").or_else(|| s("region"));
    let device = s("memdev");
    let summary;
    match kind {
        HealthKind::GeneralMedia | HealthKind::Dram => {
            let table = if kind == HealthKind::Dram { m::DRAM_TYPE } else { m::GENERAL_MEDIA_TYPE };
            let ty = sym("type", table);
            let tt = sym("transaction_type", m::TRANSACTION_TYPE);
            let desc = flg("descriptor", m::DESCRIPTOR, 0);
            put("type", text(ty.clone()));
            put("transaction_type", text(tt.clone()));
            put("descriptor", words(desc.clone()));
            put("dpa_flags", words(flg("dpa_flags", m::DPA_FLAGS, 0)));
            let what = if kind == HealthKind::Dram { "DRAM" } else { "media" };
            summary = format!(
                "{what} {} during {} at dpa {}{}",
                ty.as_deref().unwrap_or("event"),
                tt.as_deref().unwrap_or("an unknown transaction"),
                dpa.map_or("?".into(), |a| format!("{a:#x}")),
                desc.filter(|w| !w.is_empty()).map_or(String::new(), |w| format!(" ({})", w.join(", "))),
            );
        }
        HealthKind::MemoryModule => {
            let ev = sym("event_type", m::MEMORY_MODULE_EVENT);
            put("event_type", text(ev.clone()));
            let health = flg("health_status", m::HEALTH_STATUS, 0);
            put("health_status", words(health.clone()));
            put("media_status", text(sym("media_status", m::MEDIA_STATUS)));
            if let Some(a) = u("add_status") {
                let split: serde_json::Map<String, Value> =
                    m::additional_status(a).iter().map(|(k, v)| (k.to_string(), Value::from(*v))).collect();
                put("additional_status", Some(Value::Object(split)));
            }
            put("life_used_percent", u("life_used").map(Value::from));
            put("temperature_c", i("device_temp").map(Value::from));
            put("dirty_shutdowns", u("dirty_shutdown_cnt").map(Value::from));
            put("corrected_volatile_errors", u("cor_vol_err_cnt").map(Value::from));
            put("corrected_persistent_errors", u("cor_per_err_cnt").map(Value::from));
            summary = format!(
                "{}: health {}, life used {}%, {} °C",
                ev.as_deref().unwrap_or("memory module event"),
                health.filter(|h| !h.is_empty()).map_or("normal".into(), |h| h.join(", ")),
                u("life_used").map_or("?".into(), |v| v.to_string()),
                i("device_temp").map_or("?".into(), |v| v.to_string()),
            );
        }
        HealthKind::Poison => {
            // Poisoned memory has lost its data: a failure-level event for whatever maps it.
            severity = Severity::Failure;
            length = u("dpa_length");
            let tt = sym("trace_type", m::POISON_TRACE_TYPE);
            let src = sym("source", m::POISON_SOURCE);
            put("trace_type", text(tt.clone()));
            put("source", text(src.clone()));
            put("flags", words(flg("flags", m::POISON_FLAGS, 0)));
            summary = format!(
                "poison ({}, source {}) at dpa {} length {}{}",
                tt.as_deref().unwrap_or("?"),
                src.as_deref().unwrap_or("?"),
                dpa.map_or("?".into(), |a| format!("{a:#x}")),
                length.map_or("?".into(), |l| l.to_string()),
                hpa.map_or(String::new(), |a| format!(", hpa {a:#x}")),
            );
        }
        HealthKind::AerCorrectable | HealthKind::AerUncorrectable => {
            let status = flg("status", &[], 0);
            put("status", words(status.clone()));
            put("first_error", words(flg("first_error", &[], 0)));
            severity = if kind == HealthKind::AerCorrectable { Severity::Warning } else { Severity::Failure };
            let what = if kind == HealthKind::AerCorrectable { "correctable" } else { "uncorrectable" };
            summary = format!("{what} CXL protocol error: {}", status.map_or("?".into(), |w| w.join(", ")));
        }
        HealthKind::Overflow => {
            severity = Severity::Warning;
            put("records_lost", u("count").map(Value::from));
            summary = format!(
                "the device's {} event log overflowed: {} records lost",
                log.map_or("?".into(), m::log_name),
                u("count").map_or("?".into(), |c| c.to_string())
            );
        }
        HealthKind::McEvent => {
            let et = i("error_type");
            let ty = et.map(|v| m::symbol(None, m::MC_ERROR_TYPE, v));
            severity = et.map_or(Severity::Informational, m::mc_severity);
            put("error_type", text(ty.clone()));
            // The EDAC address is a physical address (page << PAGE_SHIFT | offset).
            hpa = u("address").filter(|&a| a != 0);
            dpa = None;
            region = None;
            let label = s("label");
            summary = format!(
                "{} {} error(s) on {}{}{}",
                u("error_count").unwrap_or(1),
                ty.as_deref().unwrap_or("?"),
                label.as_deref().unwrap_or("unknown DIMM"),
                s("msg").map_or(String::new(), |x| format!(": {x}")),
                hpa.map_or(String::new(), |a| format!(" at {a:#x}")),
            );
        }
    }
    put("severity", Some(Value::from(severity.as_str())));
    let device = if kind == HealthKind::McEvent {
        s("label").or_else(|| u("mc_index").map(|i| format!("mc{i}")))
    } else {
        device
    };
    HealthEvent {
        kind,
        tracepoint: format!("{group}:{}", fmt.event.name),
        ts_ns,
        pid,
        severity,
        device,
        serial: u("serial"),
        hpa,
        dpa,
        length,
        region,
        node: None,
        summary,
        decoded: d,
        fields,
    }
}
