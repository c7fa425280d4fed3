//! What CXL and EDAC values mean, in words. The format file's own tables win when it has them
//! (a newer kernel knows newer values); these built-in tables, from the CXL 3.1 specification
//! and the 6.12 kernel, cover the fields whose tables the kernel prints from expressions or
//! symbolic constants, and kernels whose print fmt lacks a table.
use serde::Serialize;

/// How serious an event is, CXL's four levels (EDAC and AER records are mapped onto them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Informational,
    Warning,
    Failure,
    Fatal,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Informational => "informational",
            Severity::Warning => "warning",
            Severity::Failure => "failure",
            Severity::Fatal => "fatal",
        }
    }

    /// CXL's 2-bit encodings: the Common Event Record's severity (flags bits 1:0) and the
    /// log a record was read from (`log`: 0 informational ... 3 fatal).
    pub fn from_cxl(v: u64) -> Severity {
        match v & 3 {
            0 => Severity::Informational,
            1 => Severity::Warning,
            2 => Severity::Failure,
            _ => Severity::Fatal,
        }
    }
}

/// Event log names (`enum cxl_event_log_type`).
pub fn log_name(v: i64) -> String {
    match v {
        0 => "Informational".into(),
        1 => "Warning".into(),
        2 => "Failure".into(),
        3 => "Fatal".into(),
        _ => format!("reserved ({v})"),
    }
}

/// Common Event Record flags, bits 2..5 (bits 1:0 are the severity).
pub const HDR_FLAGS: &[(u64, &str)] = &[
    (1 << 2, "PERMANENT_CONDITION"),
    (1 << 3, "MAINTENANCE_NEEDED"),
    (1 << 4, "PERFORMANCE_DEGRADED"),
    (1 << 5, "HARDWARE_REPLACEMENT_NEEDED"),
];

/// General media / DRAM event descriptor bits.
pub const DESCRIPTOR: &[(u64, &str)] =
    &[(1, "UNCORRECTABLE_EVENT"), (2, "THRESHOLD_EVENT"), (4, "POISON_LIST_OVERFLOW")];
pub const DPA_FLAGS: &[(u64, &str)] = &[(1, "VOLATILE"), (2, "NOT_REPAIRABLE")];

pub const TRANSACTION_TYPE: &[(i64, &str)] = &[
    (0, "Unknown"),
    (1, "Host Read"),
    (2, "Host Write"),
    (3, "Host Scan Media"),
    (4, "Host Inject Poison"),
    (5, "Internal Media Scrub"),
    (6, "Internal Media Management"),
];
pub const GENERAL_MEDIA_TYPE: &[(i64, &str)] = &[(0, "ECC Error"), (1, "Invalid Address"), (2, "Data Path Error")];
pub const DRAM_TYPE: &[(i64, &str)] =
    &[(0, "ECC Error"), (1, "Scrub Media ECC Error"), (2, "Invalid Address"), (3, "Data Path Error")];

pub const MEMORY_MODULE_EVENT: &[(i64, &str)] = &[
    (0, "Health Status Change"),
    (1, "Media Status Change"),
    (2, "Life Used Change"),
    (3, "Temperature Change"),
    (4, "Data Path Error"),
    (5, "LSA Error"),
];
/// Health status bits (memory module events and Get Health Info).
pub const HEALTH_STATUS: &[(u64, &str)] =
    &[(1, "MAINTENANCE_NEEDED"), (2, "PERFORMANCE_DEGRADED"), (4, "REPLACEMENT_NEEDED")];
pub const MEDIA_STATUS: &[(i64, &str)] = &[
    (0, "Normal"),
    (1, "Not Ready"),
    (2, "Write Persistency Lost"),
    (3, "All Data Lost"),
    (4, "Write Persistency Loss in the Event of Power Loss"),
    (5, "Write Persistency Loss in Event of Shutdown"),
    (6, "Write Persistency Loss Imminent"),
    (7, "All Data Loss in Event of Power Loss"),
    (8, "All Data loss in the Event of Shutdown"),
    (9, "All Data Loss Imminent"),
];
/// Media states in which the device's data is gone or unreachable now.
pub const MEDIA_FAILED: &[i64] = &[1, 3];

pub const POISON_TRACE_TYPE: &[(i64, &str)] = &[(0, "List"), (1, "Inject"), (2, "Clear")];
pub const POISON_SOURCE: &[(i64, &str)] =
    &[(0, "Unknown"), (1, "External"), (2, "Internal"), (3, "Injected"), (7, "Vendor")];
pub const POISON_FLAGS: &[(u64, &str)] = &[(1, "More"), (2, "Overflow"), (4, "Scanning")];

/// `enum hw_event_mc_err_type`.
pub const MC_ERROR_TYPE: &[(i64, &str)] =
    &[(0, "Corrected"), (1, "Uncorrected"), (2, "Deferred"), (3, "Fatal"), (4, "Info")];

pub fn mc_severity(error_type: i64) -> Severity {
    match error_type {
        0 => Severity::Warning,
        1 | 2 => Severity::Failure,
        3 => Severity::Fatal,
        _ => Severity::Informational,
    }
}

/// The 2-bit status levels of the additional status byte.
pub fn level(v: u64) -> &'static str {
    match v & 3 {
        0 => "Normal",
        1 => "Warning",
        2 => "Critical",
        _ => "reserved",
    }
}

/// Splits the memory module's additional status byte: life used and device temperature are
/// 2-bit levels, the two corrected-error counters 1-bit warnings.
pub fn additional_status(v: u64) -> [(&'static str, &'static str); 4] {
    [
        ("life_used", level(v)),
        ("device_temperature", level(v >> 2)),
        ("corrected_volatile_errors", level((v >> 4) & 1)),
        ("corrected_persistent_errors", level((v >> 5) & 1)),
    ]
}

/// The name of `v`, or `reserved (0x..)` when neither table has it.
pub fn symbol(own: Option<&std::collections::BTreeMap<i64, String>>, builtin: &[(i64, &str)], v: i64) -> String {
    own.and_then(|t| t.get(&v).cloned())
        .or_else(|| builtin.iter().find(|(k, _)| *k == v).map(|(_, n)| (*n).to_string()))
        .unwrap_or_else(|| format!("reserved ({v:#x})"))
}

/// The names of the set bits of `v`; bits neither table names are listed as `bit N`.
pub fn flags(own: Option<&Vec<(u64, String)>>, builtin: &[(u64, &str)], v: u64) -> Vec<String> {
    let table: Vec<(u64, String)> = match own {
        Some(t) => t.clone(),
        None => builtin.iter().map(|(m, n)| (*m, (*n).to_string())).collect(),
    };
    let mut out = Vec::new();
    let mut left = v;
    for (m, n) in &table {
        if *m != 0 && v & m == *m {
            out.push(n.clone());
            left &= !m;
        }
    }
    for bit in 0..64 {
        if left & (1 << bit) != 0 {
            out.push(format!("bit {bit}"));
        }
    }
    out
}
