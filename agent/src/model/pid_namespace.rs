//! Whether the agent sees the host's pids: the kernel programs report tgids of the initial PID
//! namespace (`bpf_get_current_pid_tgid`), the agent joins them with `/proc` and filters its
//! own tgid out in the kernel. In a PID namespace of its own (a pod without `hostPID`, a podman
//! or docker container without `--pid=host`), every one of those joins names another process
//! or none, and nothing would say so: the agent refuses to start, and `check` fails.
//!
//! The test: the inode of `/proc/self/ns/pid` against the initial namespace's, which the kernel
//! fixes at `PROC_PID_INIT_INO` (include/linux/proc_ns.h, since 3.8); needs no privilege and no
//! program. And `/proc` must be of that namespace too: `/proc/self` names the pid `getpid`
//! gives (a `/proc` mounted from another namespace shows other pids).
use super::privilege::Missing;

/// The inode number of the initial PID namespace (`PROC_PID_INIT_INO`).
pub const PROC_PID_INIT_INO: u64 = 0xEFFF_FFFC;

/// What the agent sees of its own PID namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PidView {
    /// The inode of `/proc/self/ns/pid`, when readable.
    pub ns_inode: Option<u64>,
    /// The pid `/proc/self` links to, when readable.
    pub proc_self: Option<u32>,
    /// `getpid()`.
    pub getpid: u32,
}

const FIX: &str =
    "run it in the host's PID namespace: `hostPID: true` in the pod spec, `--pid=host` for podman or docker";

/// Why the agent cannot trust its pids, with the fix; `None` in the host's PID namespace.
pub fn problem(v: &PidView) -> Option<Missing> {
    let what = "the host's PID namespace";
    if let Some(ino) = v.ns_inode.filter(|&i| i != PROC_PID_INIT_INO) {
        return Some(Missing {
            what,
            cost: format!(
                "tierscope runs in a PID namespace of its own (pid:[{ino}], the host's is pid:[{PROC_PID_INIT_INO}]): \
                 the kernel reports the host's pids, so every process it shows would be another one or none"
            ),
            fix: FIX.into(),
        });
    }
    match v.proc_self {
        Some(p) if p != v.getpid => Some(Missing {
            what,
            cost: format!(
                "/proc belongs to another PID namespace (/proc/self is {p}, getpid() is {}): every process it \
                 shows would be another one",
                v.getpid
            ),
            fix: format!("{FIX}, with the host's /proc"),
        }),
        _ => None,
    }
}

/// The one line a watching command stops with.
pub fn refusal(m: &Missing) -> String {
    format!("{}; {}", m.cost, m.fix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_namespace_passes() {
        let v = PidView { ns_inode: Some(4026531836), proc_self: Some(4242), getpid: 4242 };
        assert_eq!(PROC_PID_INIT_INO, 4026531836);
        assert_eq!(problem(&v), None);
        // Nothing readable: nothing to refuse on.
        assert_eq!(problem(&PidView { ns_inode: None, proc_self: None, getpid: 1 }), None);
    }

    #[test]
    fn a_pid_namespace_of_its_own_is_refused_with_the_fix() {
        // What `unshare -pf --mount-proc` gave on this host: pid:[4026532179], pid 1.
        let v = PidView { ns_inode: Some(4026532179), proc_self: Some(1), getpid: 1 };
        let m = problem(&v).expect("refused");
        let line = refusal(&m);
        assert!(line.contains("4026532179") && line.contains("PID namespace of its own"), "{line}");
        assert!(line.contains("hostPID: true") && line.contains("--pid=host"), "{line}");
        assert!(!line.contains('\n'));
    }

    #[test]
    fn a_proc_of_another_namespace_is_refused() {
        // In the host's namespace, but /proc was mounted from a child namespace.
        let v = PidView { ns_inode: Some(PROC_PID_INIT_INO), proc_self: Some(3), getpid: 81234 };
        let m = problem(&v).expect("refused");
        assert!(m.cost.contains("/proc/self is 3") && m.cost.contains("81234"), "{}", m.cost);
        // And a namespace of its own is named first even where /proc agrees with it.
        let v = PidView { ns_inode: Some(4026532179), proc_self: Some(7), getpid: 9 };
        assert!(problem(&v).unwrap().cost.contains("of its own"));
    }
}
