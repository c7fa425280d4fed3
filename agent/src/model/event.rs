//! What the model learns from the kernel's discrete events (decoded by `collect::events`).
use serde::Serialize;

/// A discrete event, already decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Exec {
        tgid: u32,
        comm: String,
        ts_ns: u64,
    },
    /// A thread-group leader exited; `comm` names processes that never exec'd while we watched.
    Exit {
        tgid: u32,
        comm: String,
        ts_ns: u64,
    },
    Policy(PolicyDecision),
    NumaMove(NumaMove),
    /// A CXL/RAS health event.
    Health(crate::health::HealthEvent),
}

/// A placement syscall as the process made it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PolicyDecision {
    #[serde(skip)]
    pub tgid: u32,
    pub tid: u32,
    pub ts_ns: u64,
    pub syscall: &'static str,
    /// `MPOL_BIND`, ... (mbind / set_mempolicy only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Mode flags (`MPOL_F_STATIC_NODES`...) and mbind flags (`MPOL_MF_MOVE`...).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<&'static str>,
    /// Nodes in the mask (first 64 bits), or the home node, or move_pages' first target nodes.
    pub nodes: Vec<u32>,
    /// The address range, for the calls that take one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub len: Option<u64>,
    /// For move_pages / migrate_pages: the target process (0 = itself).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_pid: Option<u32>,
}

/// Which scheduler NUMA event moved a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NumaMoveKind {
    Move,
    Swap,
    Stick,
}

/// A task the NUMA balancer moved (or tried to) between nodes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NumaMove {
    pub kind: NumaMoveKind,
    pub tgid: u32,
    pub pid: u32,
    pub src_nid: i32,
    pub dst_nid: i32,
    pub ts_ns: u64,
}
