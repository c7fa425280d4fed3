//! Decoding real `format` files of the guest's 6.12 kernel (and this host's 6.18 for
//! `ras:mc_event`), variants with fields moved, added or missing, and the health model fed with
//! what the QEMU test bed injects.
use std::collections::BTreeMap;

use serde_json::{json, Value};
use tierscope_common::event::HealthSource;

use super::{
    event::{decode, HealthKind},
    format::HealthFormat,
    mailbox::HealthInfoResult,
    meaning::Severity,
    model::{AddressMap, DeviceState, HealthModel},
};

const GENERAL_MEDIA: &str = include_str!("../../fixtures/tracefs/guest-6.12/cxl/cxl_general_media/format");
const DRAM: &str = include_str!("../../fixtures/tracefs/guest-6.12/cxl/cxl_dram/format");
const MEMORY_MODULE: &str = include_str!("../../fixtures/tracefs/guest-6.12/cxl/cxl_memory_module/format");
const POISON: &str = include_str!("../../fixtures/tracefs/guest-6.12/cxl/cxl_poison/format");
const AER_UE: &str = include_str!("../../fixtures/tracefs/guest-6.12/cxl/cxl_aer_uncorrectable_error/format");
const OVERFLOW: &str = include_str!("../../fixtures/tracefs/guest-6.12/cxl/cxl_overflow/format");
const MC_EVENT: &str = include_str!("../../fixtures/tracefs/host-6.18/ras/mc_event/format");

/// Builds a record the way the kernel lays it out: fixed fields at the format's offsets,
/// `__data_loc` strings after them.
struct Record<'a> {
    fmt: &'a HealthFormat,
    data: Vec<u8>,
    dyn_at: usize,
}

impl<'a> Record<'a> {
    fn new(fmt: &'a HealthFormat) -> Self {
        let end = fmt.event.record_len();
        Record { fmt, data: vec![0; 1024], dyn_at: end }
    }

    fn int(mut self, name: &str, v: i64) -> Self {
        let f = self.fmt.field(name).unwrap_or_else(|| panic!("no field {name}"));
        let b = v.to_ne_bytes();
        self.data[f.offset..f.offset + f.size].copy_from_slice(&b[..f.size]);
        self
    }

    fn text(mut self, name: &str, s: &str) -> Self {
        let f = self.fmt.field(name).unwrap_or_else(|| panic!("no field {name}"));
        let len = s.len() + 1;
        let loc = (self.dyn_at as u32) | ((len as u32) << 16);
        self.data[f.offset..f.offset + 4].copy_from_slice(&loc.to_ne_bytes());
        self.data[self.dyn_at..self.dyn_at + s.len()].copy_from_slice(s.as_bytes());
        self.dyn_at += len;
        self
    }
}

fn fmt(text: &str) -> HealthFormat {
    HealthFormat::parse(text).unwrap()
}

/// The general media event `tests/vm/scenarios/health.sh` injects, as the 6.12 kernel records it.
fn general_media(f: &HealthFormat) -> Vec<u8> {
    Record::new(f)
        .text("memdev", "mem0")
        .text("host", "0000:0d:00.0")
        .int("log", 0)
        .int("serial", 0x1234)
        .int("hdr_flags", 1)
        .int("dpa", 0x1000)
        .int("descriptor", 3)
        .int("type", 0)
        .int("transaction_type", 1)
        .int("hpa", 0x5_d000_1000)
        .text("region_name", "region0")
        .data
}

#[test]
fn general_media_decodes_with_words_and_addresses() {
    let f = fmt(GENERAL_MEDIA);
    let e = decode(HealthSource::CxlGeneralMedia, &f, &general_media(&f), 7, 42);
    assert_eq!((e.kind, e.tracepoint.as_str()), (HealthKind::GeneralMedia, "cxl:cxl_general_media"));
    assert_eq!(
        (e.device.as_deref(), e.serial, e.dpa, e.hpa),
        (Some("mem0"), Some(0x1234), Some(0x1000), Some(0x5_d000_1000))
    );
    assert_eq!(e.region.as_deref(), Some("region0"));
    // Logged as informational, but the record's own severity (flags bits 1:0 = 1) is warning.
    assert_eq!(e.severity, Severity::Warning);
    assert_eq!(e.decoded["log"], "Informational");
    assert_eq!(e.decoded["transaction_type"], "Host Read");
    assert_eq!(e.decoded["type"], "ECC Error");
    assert_eq!(e.decoded["descriptor"], json!(["UNCORRECTABLE_EVENT", "THRESHOLD_EVENT"]));
    assert_eq!(e.decoded["record_flags"], json!([]), "severity bits are not flag words");
    assert_eq!(e.summary, "media ECC Error during Host Read at dpa 0x1000 (UNCORRECTABLE_EVENT, THRESHOLD_EVENT)");
    // Every field is kept raw, including those nothing interprets.
    assert_eq!(e.fields["host"], "0000:0d:00.0");
    assert_eq!(e.fields["comp_id"], "00".repeat(16));
    assert_eq!(e.fields["hdr_uuid"], "00000000-0000-0000-0000-000000000000");
    assert!(!e.fields.contains_key("common_pid"));
    let j = serde_json::to_value(&e).unwrap();
    assert_eq!(
        (j["dpa"].as_str(), j["hpa"].as_str(), j["kind"].as_str()),
        (Some("0x1000"), Some("0x5d0001000"), Some("general_media"))
    );
}

#[test]
fn fields_moved_added_or_missing_still_decode() {
    // A later kernel: dpa and hpa swapped places, a new field appended, descriptor gone.
    let moved = GENERAL_MEDIA
        .replace("field:u64 dpa;\toffset:72;", "field:u64 dpa;\toffset:104;")
        .replace("field:u64 hpa;\toffset:104;", "field:u64 hpa;\toffset:72;")
        .replace("\tfield:u8 descriptor;\toffset:80;\tsize:1;\tsigned:0;\n", "")
        .replace(
            "\tfield:__data_loc char[] region_name;\toffset:132;\tsize:4;\tsigned:0;\n",
            "\tfield:__data_loc char[] region_name;\toffset:132;\tsize:4;\tsigned:0;\n\tfield:u32 cme_count;\toffset:136;\tsize:4;\tsigned:0;\n",
        );
    assert_ne!(moved, GENERAL_MEDIA);
    let f = fmt(&moved);
    assert_eq!((f.field("dpa").unwrap().offset, f.field("hpa").unwrap().offset), (104, 72));
    let data = Record::new(&f)
        .text("memdev", "mem1")
        .int("dpa", 0x40)
        .int("hpa", -1)
        .int("cme_count", 9)
        .int("transaction_type", 5)
        .data;
    let e = decode(HealthSource::CxlGeneralMedia, &f, &data, 0, 0);
    assert_eq!((e.dpa, e.hpa, e.device.as_deref()), (Some(0x40), None, Some("mem1")), "~0 hpa means untranslated");
    assert_eq!(e.fields["cme_count"], 9, "an unknown field is kept raw");
    assert!(!e.decoded.contains_key("descriptor"));
    assert_eq!(e.decoded["transaction_type"], "Internal Media Scrub");

    // An older kernel without hpa, region or the transaction type: what is there still decodes.
    let old: String = GENERAL_MEDIA
        .lines()
        .filter(|l| !["hpa;", "region_uuid;", "region_name;", "transaction_type;"].iter().any(|n| l.contains(n)))
        .map(|l| format!("{l}\n"))
        .collect();
    let f = fmt(&old);
    let e = decode(HealthSource::CxlGeneralMedia, &f, &Record::new(&f).int("dpa", 0x2000).int("log", 2).data, 0, 0);
    assert_eq!((e.dpa, e.hpa, e.region.as_deref()), (Some(0x2000), None, None));
    assert!(!e.decoded.contains_key("transaction_type"));
    assert_eq!(e.summary, "media ECC Error during an unknown transaction at dpa 0x2000");
    assert_eq!(e.decoded["log"], "Failure");
}

#[test]
fn dram_uses_its_own_type_table_and_unknown_codes_stay_visible() {
    let f = fmt(DRAM);
    let data =
        Record::new(&f).text("memdev", "mem0").int("type", 1).int("transaction_type", 0xc0).int("dpa", 0x2000).data;
    let e = decode(HealthSource::CxlDram, &f, &data, 0, 0);
    assert_eq!(e.decoded["type"], "Scrub Media ECC Error");
    assert_eq!(e.decoded["transaction_type"], "reserved (0xc0)");
    assert_eq!(e.fields["transaction_type"], 0xc0);
}

/// The memory module event the test bed injects (health 3, media 7, additional 33, ...).
fn memory_module(f: &HealthFormat, health: i64) -> Vec<u8> {
    Record::new(f)
        .text("memdev", "mem0")
        .int("log", 1)
        .int("hdr_flags", 1)
        .int("event_type", 0)
        .int("health_status", health)
        .int("media_status", 7)
        .int("add_status", 33)
        .int("life_used", 30)
        .int("device_temp", 45)
        .int("dirty_shutdown_cnt", 1)
        .int("cor_vol_err_cnt", 5)
        .int("cor_per_err_cnt", 0)
        .data
}

#[test]
fn memory_module_decodes_health_media_life_and_temperature() {
    let f = fmt(MEMORY_MODULE);
    let e = decode(HealthSource::CxlMemoryModule, &f, &memory_module(&f, 3), 0, 0);
    assert_eq!(e.decoded["event_type"], "Health Status Change");
    assert_eq!(e.decoded["health_status"], json!(["MAINTENANCE_NEEDED", "PERFORMANCE_DEGRADED"]));
    assert_eq!(e.decoded["media_status"], "All Data Loss in Event of Power Loss");
    assert_eq!(e.decoded["additional_status"]["life_used"], "Warning");
    assert_eq!(e.decoded["additional_status"]["corrected_persistent_errors"], "Warning");
    assert_eq!(e.decoded["additional_status"]["device_temperature"], "Normal");
    assert_eq!((e.decoded["life_used_percent"].as_u64(), e.decoded["temperature_c"].as_i64()), (Some(30), Some(45)));
    assert_eq!(
        (e.decoded["dirty_shutdowns"].as_u64(), e.decoded["corrected_volatile_errors"].as_u64()),
        (Some(1), Some(5))
    );
    // A negative temperature is a signed field.
    let cold = Record::new(&f).int("device_temp", -12).data;
    assert_eq!(decode(HealthSource::CxlMemoryModule, &f, &cold, 0, 0).decoded["temperature_c"], -12);
}

fn poison(f: &HealthFormat, dpa: i64, trace_type: i64) -> Vec<u8> {
    Record::new(f)
        .text("memdev", "mem0")
        .text("host", "0000:0d:00.0")
        .text("region", "region0")
        .int("trace_type", trace_type)
        .int("hpa", 0x5_d000_0000 + dpa)
        .int("dpa", dpa)
        .int("dpa_length", 64)
        .int("source", 3)
        .data
}

#[test]
fn poison_decodes_and_each_range_counts_once_across_list_reads() {
    let f = fmt(POISON);
    let e = decode(HealthSource::CxlPoison, &f, &poison(&f, 0x2000, 0), 5, 99);
    assert_eq!(
        (e.dpa, e.hpa, e.length, e.region.as_deref()),
        (Some(0x2000), Some(0x5_d000_2000), Some(64), Some("region0"))
    );
    assert_eq!((e.decoded["trace_type"].as_str(), e.decoded["source"].as_str()), (Some("List"), Some("Injected")));
    assert_eq!(e.severity, Severity::Failure);

    let mut m = HealthModel {
        address_map: AddressMap {
            block_bytes: 128 << 20,
            node_of_block: BTreeMap::from([(0x5_d000_0000 / (128 << 20), 2)]),
            regions: vec![],
        },
        ..Default::default()
    };
    for _ in 0..3 {
        m.apply(decode(HealthSource::CxlPoison, &f, &poison(&f, 0x2000, 0), 5, 99));
    }
    m.apply(decode(HealthSource::CxlPoison, &f, &poison(&f, 0x4000, 0), 6, 99));
    let d = &m.devices["mem0"];
    assert_eq!(d.poison.len(), 2);
    assert_eq!(d.poison[&0x2000].times_listed, 3);
    assert_eq!(d.poison[&0x2000].node, Some(2));
    assert_eq!(m.events.len(), 2, "repeated list entries are not new events");
    assert_eq!(m.events[0].node, Some(2));
    assert_eq!(d.assess(), (DeviceState::Degraded, vec!["2 poisoned range(s) listed (128 bytes)".to_string()]));
    // Clearing removes the range.
    m.apply(decode(HealthSource::CxlPoison, &f, &poison(&f, 0x4000, 2), 7, 99));
    assert_eq!(m.devices["mem0"].poison.keys().copied().collect::<Vec<_>>(), vec![0x2000]);
}

#[test]
fn device_state_follows_the_latest_module_report_and_keeps_raised_conditions() {
    let (mm, gm) = (fmt(MEMORY_MODULE), fmt(GENERAL_MEDIA));
    let mut m = HealthModel::default();
    assert_eq!(m.status_line(), "no CXL memory devices");
    m.apply(decode(HealthSource::CxlMemoryModule, &mm, &memory_module(&mm, 4), 1, 0));
    let (state, why) = m.devices["mem0"].assess();
    assert_eq!(state, DeviceState::Failed);
    assert_eq!(why[0], "memory module event: REPLACEMENT_NEEDED");
    assert!(
        why.iter().any(|w| w == "memory module event: media status All Data Loss in Event of Power Loss"),
        "{why:?}"
    );
    // A later report with a clean health byte and normal media clears those.
    let clean = Record::new(&mm).text("memdev", "mem0").int("event_type", 0).data;
    m.apply(decode(HealthSource::CxlMemoryModule, &mm, &clean, 2, 0));
    assert_eq!(m.devices["mem0"].assess(), (DeviceState::Ok, vec![]));
    // An uncorrectable media event stays raised.
    m.apply(decode(HealthSource::CxlGeneralMedia, &gm, &general_media(&gm), 3, 0));
    assert_eq!(
        m.devices["mem0"].assess(),
        (DeviceState::Degraded, vec!["uncorrectable general_media error".to_string()])
    );
    assert_eq!(m.status_line(), "1 CXL memory device(s): 1 degraded");
    assert_eq!(m.events_by_kind[&HealthKind::MemoryModule], 2);
    assert_eq!(m.events_by_severity[&Severity::Warning], 2);
    // A mailbox answer feeds the state too; "not supported" adds nothing.
    m.set_health_info("mem0", HealthInfoResult::NotSupported { reason: "not supported by this device".into() });
    assert_eq!(m.devices["mem0"].assess().0, DeviceState::Degraded);
    let mut p = vec![0, 0, 0b1000, 99, 60, 0, 0, 0, 0, 0];
    p.extend([0; 8]);
    m.set_health_info("mem0", HealthInfoResult::Ok(super::mailbox::parse_health_info(&p).unwrap()));
    assert_eq!(m.devices["mem0"].assess().0, DeviceState::Failed, "temperature critical");
}

#[test]
fn aer_overflow_and_truncated_records() {
    let f = fmt(AER_UE);
    assert!(f.event.record_len() > 512, "the header log alone is 512 bytes");
    let data = Record::new(&f).text("memdev", "mem0").int("status", 1 << 7 | 1 << 11).int("first_error", 1 << 7).data;
    let e = decode(HealthSource::CxlAerUncorrectable, &f, &data, 0, 0);
    assert_eq!(e.decoded["status"], json!(["Memory Data ECC Error", "Receiver Overflow"]));
    assert_eq!(e.decoded["first_error"], json!(["Memory Data ECC Error"]));
    assert_eq!(e.fields["header_log"].as_str().map(str::len), Some(1024));
    // The short copy (256 bytes): the header log and the strings after it are beyond it.
    let e = decode(HealthSource::CxlAerUncorrectable, &f, &data[..256], 0, 0);
    assert_eq!((e.fields["header_log"].clone(), e.device.clone()), (Value::Null, None));
    assert_eq!(e.decoded["status"], json!(["Memory Data ECC Error", "Receiver Overflow"]));
    let mut m = HealthModel::default();
    m.apply(decode(HealthSource::CxlAerUncorrectable, &f, &data, 0, 0));
    assert_eq!(m.devices["mem0"].assess().0, DeviceState::Failed);

    let f = fmt(OVERFLOW);
    let e = decode(
        HealthSource::CxlOverflow,
        &f,
        &Record::new(&f).text("memdev", "mem0").int("log", 1).int("count", 17).data,
        0,
        0,
    );
    assert_eq!(e.summary, "the device's Warning event log overflowed: 17 records lost");
}

#[test]
fn mc_event_from_the_host_kernel() {
    let f = fmt(MC_EVENT);
    let data = Record::new(&f)
        .int("error_type", 0)
        .text("msg", "memory read error")
        .text("label", "CPU_SrcID#0_MC#0_Chan#1_DIMM#0")
        .int("error_count", 2)
        .int("address", 0x1_2345_6000)
        .int("top_layer", -1)
        .text("driver_detail", "")
        .data;
    let e = decode(HealthSource::McEvent, &f, &data, 0, 0);
    assert_eq!((e.kind, e.severity, e.hpa), (HealthKind::McEvent, Severity::Warning, Some(0x1_2345_6000)));
    assert_eq!(e.device.as_deref(), Some("CPU_SrcID#0_MC#0_Chan#1_DIMM#0"));
    assert_eq!(e.decoded["error_type"], "Corrected");
    assert_eq!(e.fields["top_layer"], -1);
    assert_eq!(e.summary, "2 Corrected error(s) on CPU_SrcID#0_MC#0_Chan#1_DIMM#0: memory read error at 0x123456000");
    let mut m = HealthModel::default();
    m.apply(e);
    assert!(m.devices.is_empty(), "EDAC events belong to no CXL device");
    assert_eq!(m.events.len(), 1);
}

#[test]
fn odd_input_never_panics() {
    let f = fmt(GENERAL_MEDIA);
    // Strings whose locations point anywhere, every length of a record.
    let mut data = vec![0xffu8; 1024];
    for len in 0..data.len() {
        let _ = decode(HealthSource::CxlGeneralMedia, &f, &data[..len], 0, 0);
    }
    for (i, b) in data.iter_mut().enumerate() {
        *b = (i * 37 % 251) as u8;
    }
    for s in [HealthSource::CxlGeneralMedia, HealthSource::CxlPoison, HealthSource::McEvent] {
        let e = decode(s, &f, &data, 0, 0);
        let mut m = HealthModel::default();
        m.apply(e);
    }
}
