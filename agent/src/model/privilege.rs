//! What the agent needs from the node (capabilities, mounts) and what the absence of each costs.
//! Pure: `tierscope check` passes in the capability mask, where tracefs stands and the kernel
//! version; docs/security.md says the same.
use serde::Serialize;

/// Capability bits (linux/capability.h).
pub mod cap {
    pub const DAC_OVERRIDE: u32 = 1;
    pub const DAC_READ_SEARCH: u32 = 2;
    pub const SYS_PTRACE: u32 = 19;
    pub const SYS_ADMIN: u32 = 21;
    pub const SYS_RESOURCE: u32 = 24;
    pub const PERFMON: u32 = 38;
    pub const BPF: u32 = 39;
}

/// The capabilities `tierscope run` needs on kernels 5.11 and later: (bit, name, what it is for,
/// what its absence costs). CAP_PERFMON also grants the ptrace read access that other users'
/// `/proc/PID/numa_maps` needs (measured on 6.18), so residency needs no CAP_SYS_PTRACE.
pub const NEEDED: &[(u32, &str, &str, &str)] = &[
    (
        cap::BPF,
        "CAP_BPF",
        "create eBPF maps and load programs",
        "no eBPF program or map can be loaded: nothing is collected from the kernel",
    ),
    (
        cap::PERFMON,
        "CAP_PERFMON",
        "load and attach tracing programs; read other users' /proc/PID/numa_maps (residency)",
        "no tracing program can be loaded and other users' numa_maps are unreadable: nothing is collected \
         from the kernel, and no residency",
    ),
    (
        cap::SYS_PTRACE,
        "CAP_SYS_PTRACE",
        "open other users' binaries through /proc/PID/root (processes in containers)",
        "CXL allocation sites in other users' containers are not named by function (their binaries are read \
         through /proc/PID/root): frames show module+offset",
    ),
    (
        cap::DAC_READ_SEARCH,
        "CAP_DAC_READ_SEARCH",
        "read tracefs (mode 0700) and other users' /proc/PID/environ (mode 0400)",
        "tracefs and other users' environment are unreadable: page allocations per node, migrations, NUMA moves, \
         placement policy, CXL and memory health are not traced (faults and process exits still are), and \
         training jobs are not told by their environment (job id, rank)",
    ),
];

/// Where tracefs stands, as this process sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "state", content = "path")]
pub enum Tracefs {
    /// Mounted and readable at this path.
    Readable(String),
    /// Mounted at this path, but this process cannot read it.
    Unreadable(String),
    NotMounted,
}

/// One thing missing, the line `check` prints for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Missing {
    /// A capability name (`CAP_SYS_PTRACE`) or a mount (`tracefs`).
    pub what: &'static str,
    /// What its absence costs.
    pub cost: String,
    /// What to do about it.
    pub fix: String,
}

/// What the agent sees of its node.
#[derive(Clone, Debug)]
pub struct Node {
    /// Effective capabilities (`CapEff`).
    pub caps: u64,
    pub tracefs: Tracefs,
    /// Kernel (major, minor).
    pub kernel: (u32, u32),
}

fn has(mask: u64, bit: u32) -> bool {
    mask & (1u64 << bit) != 0
}

/// Every missing capability or mount, one entry each, in [`NEEDED`] order then mounts.
pub fn missing(node: &Node) -> Vec<Missing> {
    let admin = has(node.caps, cap::SYS_ADMIN);
    let mut out = Vec::new();
    // An unreadable kernel version (0.0) says nothing about what it predates.
    let known = node.kernel != (0, 0);
    let pre_5_8 = known && node.kernel < (5, 8);
    for &(bit, name, _, cost) in NEEDED {
        let covered = match bit {
            // The kernel's bpf_capable() and perfmon_capable() accept CAP_SYS_ADMIN instead.
            cap::BPF | cap::PERFMON => admin,
            // CAP_DAC_OVERRIDE reads any file too; a readable tracefs needs neither.
            cap::DAC_READ_SEARCH => has(node.caps, cap::DAC_OVERRIDE) || matches!(node.tracefs, Tracefs::Readable(_)),
            _ => false,
        };
        if has(node.caps, bit) || covered {
            continue;
        }
        let fix = format!("grant {name} (setpriv --ambient-caps, a pod's securityContext.capabilities.add, or root)");
        out.push(Missing { what: name, cost: cost.to_string(), fix });
    }
    if pre_5_8 && !admin {
        out.push(Missing {
            what: "CAP_SYS_ADMIN",
            cost: format!(
                "kernel {}.{} predates CAP_BPF and CAP_PERFMON (5.8): nothing can be loaded without it",
                node.kernel.0, node.kernel.1
            ),
            fix: "grant CAP_SYS_ADMIN, or run a kernel 5.8 or later".into(),
        });
    }
    if known && node.kernel < (5, 11) && !has(node.caps, cap::SYS_RESOURCE) {
        out.push(Missing {
            what: "CAP_SYS_RESOURCE",
            cost: format!(
                "kernel {}.{} charges eBPF maps to RLIMIT_MEMLOCK (before 5.11): loading may fail with EPERM",
                node.kernel.0, node.kernel.1
            ),
            fix: "grant CAP_SYS_RESOURCE, or raise the memlock limit (ulimit -l unlimited)".into(),
        });
    }
    if node.tracefs == Tracefs::NotMounted {
        let cost = if admin {
            "mounting it failed: page allocations per node, migrations, NUMA moves, placement policy, CXL and \
             memory health are not traced (faults and process exits still are)"
        } else {
            "not mounted, and mounting it needs CAP_SYS_ADMIN: page allocations per node, migrations, NUMA moves, \
             placement policy, CXL and memory health are not traced (faults and process exits still are)"
        };
        out.push(Missing {
            what: "tracefs",
            cost: cost.into(),
            fix: "mount it: `mount -t tracefs nodev /sys/kernel/tracing` on the node, or a hostPath volume of \
                  /sys/kernel/tracing in the pod"
                .into(),
        });
    }
    out
}

/// `(major, minor)` of a kernel release such as `6.18.44-fc`; `(0, 0)` when unreadable.
pub fn kernel_version(release: &str) -> (u32, u32) {
    let mut it = release.split(|c: char| !c.is_ascii_digit()).filter(|s| !s.is_empty());
    let mut next = || it.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    (next(), next())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEAST: u64 = (1 << cap::BPF) | (1 << cap::PERFMON) | (1 << cap::SYS_PTRACE) | (1 << cap::DAC_READ_SEARCH);
    const ROOT: u64 = 0x1ff_ffff_ffff;

    fn node(caps: u64, tracefs: Tracefs) -> Node {
        Node { caps, tracefs, kernel: (6, 18) }
    }

    fn whats(m: &[Missing]) -> Vec<&str> {
        m.iter().map(|m| m.what).collect()
    }

    #[test]
    fn the_least_set_and_root_miss_nothing() {
        let readable = Tracefs::Readable("/sys/kernel/tracing".into());
        assert_eq!(missing(&node(LEAST, readable.clone())), vec![]);
        assert_eq!(missing(&node(ROOT, readable)), vec![]);
    }

    #[test]
    fn each_dropped_capability_is_named_with_its_cost() {
        for &(bit, name, _, cost) in NEEDED {
            let tracefs = if bit == cap::DAC_READ_SEARCH {
                Tracefs::Unreadable("/sys/kernel/tracing".into())
            } else {
                Tracefs::Readable("/sys/kernel/tracing".into())
            };
            let m = missing(&node(LEAST & !(1 << bit), tracefs));
            assert_eq!(whats(&m), vec![name], "dropping {name}");
            assert_eq!(m[0].cost, cost);
            assert!(m[0].fix.contains(name));
        }
    }

    #[test]
    fn sys_admin_stands_in_for_bpf_and_perfmon_but_not_ptrace() {
        let m = missing(&node(1 << cap::SYS_ADMIN, Tracefs::Unreadable("/t".into())));
        assert_eq!(whats(&m), vec!["CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH"]);
        // A readable tracefs needs no CAP_DAC_READ_SEARCH.
        let m = missing(&node(1 << cap::SYS_PTRACE | 1 << cap::SYS_ADMIN, Tracefs::Readable("/t".into())));
        assert_eq!(m, vec![]);
    }

    #[test]
    fn tracefs_not_mounted_is_its_own_line() {
        let m = missing(&node(LEAST, Tracefs::NotMounted));
        assert_eq!(whats(&m), vec!["tracefs"]);
        assert!(m[0].cost.contains("needs CAP_SYS_ADMIN"), "{}", m[0].cost);
        assert!(m[0].fix.contains("mount -t tracefs"));
        let m = missing(&node(ROOT, Tracefs::NotMounted));
        assert_eq!(whats(&m), vec!["tracefs"]);
        assert!(m[0].cost.starts_with("mounting it failed"));
    }

    #[test]
    fn old_kernels_need_more() {
        let mut n = node(LEAST, Tracefs::Readable("/t".into()));
        n.kernel = (5, 4);
        assert_eq!(whats(&missing(&n)), vec!["CAP_SYS_ADMIN", "CAP_SYS_RESOURCE"]);
        n.kernel = (5, 10);
        assert_eq!(whats(&missing(&n)), vec!["CAP_SYS_RESOURCE"]);
        n.kernel = (0, 0);
        assert_eq!(missing(&n), vec![], "an unknown kernel is not taken for an old one");
    }

    #[test]
    fn kernel_versions() {
        assert_eq!(kernel_version("6.18.44-fc-v669"), (6, 18));
        assert_eq!(kernel_version("5.4.0-150-generic"), (5, 4));
        assert_eq!(kernel_version("garbage"), (0, 0));
    }
}
