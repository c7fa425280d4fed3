//! Capabilities of this process, from `/proc/self/status` (`CapEff`).

/// The capabilities tierscope cares about: (bit, name, why).
pub const RELEVANT: &[(u32, &str, &str)] = &[
    (39, "CAP_BPF", "load eBPF programs and create maps"),
    (38, "CAP_PERFMON", "attach tracing programs, read kernel stacks"),
    (21, "CAP_SYS_ADMIN", "older kernels need it for everything eBPF; mount tracefs"),
    (19, "CAP_SYS_PTRACE", "read /proc/PID/numa_maps and environ of other users' processes"),
    (24, "CAP_SYS_RESOURCE", "raise RLIMIT_MEMLOCK on kernels before 5.11"),
];

/// Parses the `CapEff:` hex mask out of a status file.
pub fn parse_cap_eff(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
    u64::from_str_radix(line.trim_start_matches("CapEff:").trim(), 16).ok()
}

/// (held, missing) names among [`RELEVANT`].
pub fn split(mask: u64) -> (Vec<&'static str>, Vec<&'static str>) {
    let (held, missing): (Vec<_>, Vec<_>) = RELEVANT.iter().partition(|(bit, _, _)| mask & (1 << bit) != 0);
    (
        held.iter().map(|c: &&(u32, &str, &str)| c.1).collect(),
        missing.iter().map(|c: &&(u32, &str, &str)| c.1).collect(),
    )
}

/// Whether eBPF tracing can work with `mask`.
pub fn can_trace(mask: u64) -> bool {
    let has = |b: u32| mask & (1 << b) != 0;
    has(21) || (has(39) && has(38))
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
        assert_eq!(split(root).1, Vec::<&str>::new());
        let user = parse_cap_eff("CapEff:\t0000000000000000\n").unwrap();
        assert!(!can_trace(user));
        assert_eq!(split(user).0.len(), 0);
        let bpf_only = (1u64 << 39) | (1 << 38);
        assert!(can_trace(bpf_only));
        assert!(split(bpf_only).1.contains(&"CAP_SYS_PTRACE"));
        assert_eq!(parse_cap_eff("CapEff:\tzz\n"), None);
    }
}
