//! Capabilities of this process, from `/proc/self/status` (`CapEff`). What each one is for, and
//! what its absence costs, is [`crate::model::privilege`].
use crate::model::privilege::cap;

/// The capabilities `check` lists as held: (bit, name).
pub const RELEVANT: &[(u32, &str)] = &[
    (cap::BPF, "CAP_BPF"),
    (cap::PERFMON, "CAP_PERFMON"),
    (cap::SYS_PTRACE, "CAP_SYS_PTRACE"),
    (cap::DAC_READ_SEARCH, "CAP_DAC_READ_SEARCH"),
    (cap::DAC_OVERRIDE, "CAP_DAC_OVERRIDE"),
    (cap::SYS_ADMIN, "CAP_SYS_ADMIN"),
    (cap::SYS_RESOURCE, "CAP_SYS_RESOURCE"),
];

/// Parses the `CapEff:` hex mask out of a status file.
pub fn parse_cap_eff(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
    u64::from_str_radix(line.trim_start_matches("CapEff:").trim(), 16).ok()
}

/// Names of the [`RELEVANT`] capabilities held in `mask`.
pub fn held(mask: u64) -> Vec<&'static str> {
    RELEVANT.iter().filter(|(bit, _)| mask & (1 << bit) != 0).map(|c| c.1).collect()
}

/// Whether eBPF tracing can work with `mask`.
pub fn can_trace(mask: u64) -> bool {
    let has = |b: u32| mask & (1 << b) != 0;
    has(cap::SYS_ADMIN) || (has(cap::BPF) && has(cap::PERFMON))
}

pub fn read_self() -> Option<u64> {
    parse_cap_eff(&std::fs::read_to_string("/proc/self/status").ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_and_unprivileged() {
        let root = parse_cap_eff("Name:\tx\nCapEff:\t000001ffffffffff\n").unwrap();
        assert!(can_trace(root));
        assert_eq!(held(root).len(), RELEVANT.len());
        let user = parse_cap_eff("CapEff:\t0000000000000000\n").unwrap();
        assert!(!can_trace(user));
        assert_eq!(held(user).len(), 0);
        let bpf_only = (1u64 << 39) | (1 << 38);
        assert!(can_trace(bpf_only));
        assert_eq!(held(bpf_only), vec!["CAP_BPF", "CAP_PERFMON"]);
        assert_eq!(parse_cap_eff("CapEff:\tzz\n"), None);
    }
}
