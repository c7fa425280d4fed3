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

/// The kernel's event ring buffer, by default (1 MiB).
pub const DEFAULT_EVENT_RING_KIB: u32 = 1024;

/// A ring buffer's size must be a power-of-two number of pages (4 KiB) the kernel can allocate:
/// `--event-ring-kib` and `[collect] event_ring_kib` take 4 to 262144 KiB.
pub fn check_ring_kib(v: u32) -> Result<u32, String> {
    if !v.is_power_of_two() || !(4..=262_144).contains(&v) {
        return Err(format!("{v} KiB: the event ring buffer must be a power of two between 4 and 262144 KiB"));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    #[test]
    fn ring_sizes() {
        assert_eq!(super::check_ring_kib(4), Ok(4));
        assert_eq!(super::check_ring_kib(1024), Ok(1024));
        for bad in [0, 2, 6, 1000, 524_288] {
            assert!(super::check_ring_kib(bad).is_err(), "{bad}");
        }
    }
}
