//! The agent's own state: which programs run, what was dropped.
use serde::Serialize;

/// Whether a kernel program is running.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Attach {
    Attached,
    /// The kernel lacks the hook or refuses the program type: not an error of ours.
    Unsupported,
    Failed,
}

/// One program's status, as `tierscope check` and the snapshot's `agent.programs` show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProgramStatus {
    pub name: &'static str,
    /// `tp_btf exceptions:page_fault_user`, `tracepoint kmem:mm_page_alloc`, `fexit handle_mm_fault`.
    pub hook: String,
    /// The user-facing feature it serves.
    pub feature: &'static str,
    pub status: Attach,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}
