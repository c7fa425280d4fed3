//! Migration reasons and modes, named by the running kernel's own tables.
use std::collections::BTreeMap;

use serde::Serialize;

/// Reason and mode names, read from `mm_migrate_pages`' format file (`__print_symbolic`), with
/// the 6.x table as the fallback when tracefs does not say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigrationNames {
    pub reasons: BTreeMap<i64, String>,
    pub modes: BTreeMap<i64, String>,
}

impl Default for MigrationNames {
    fn default() -> Self {
        let reasons = [
            "compaction",
            "memory_failure",
            "memory_hotplug",
            "syscall_or_cpuset",
            "mempolicy_mbind",
            "numa_misplaced",
            "contig_range",
            "longterm_pin",
            "demotion",
            "damon",
        ];
        let modes = ["MIGRATE_ASYNC", "MIGRATE_SYNC_LIGHT", "MIGRATE_SYNC"];
        MigrationNames {
            reasons: reasons.iter().enumerate().map(|(i, n)| (i as i64, n.to_string())).collect(),
            modes: modes.iter().enumerate().map(|(i, n)| (i as i64, n.to_string())).collect(),
        }
    }
}

impl MigrationNames {
    pub fn reason(&self, r: u32) -> String {
        self.reasons.get(&(r as i32 as i64)).cloned().unwrap_or_else(|| format!("reason_{r}"))
    }
    pub fn mode(&self, m: u32) -> String {
        self.modes.get(&(m as i64)).cloned().unwrap_or_else(|| format!("mode_{m}"))
    }
}

/// Pages moved (or not) for one reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MigrationTotals {
    /// `migrate_pages()` calls.
    pub calls: u64,
    /// Base pages migrated (THP counted by their base pages, as the kernel counts them).
    pub succeeded: u64,
    pub failed: u64,
    pub thp_succeeded: u64,
    pub thp_failed: u64,
}

impl MigrationTotals {
    pub fn add(&mut self, o: &MigrationTotals) {
        self.calls += o.calls;
        self.succeeded += o.succeeded;
        self.failed += o.failed;
        self.thp_succeeded += o.thp_succeeded;
        self.thp_failed += o.thp_failed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_known_and_unknown() {
        let n = MigrationNames::default();
        assert_eq!(n.reason(8), "demotion");
        assert_eq!(n.reason(5), "numa_misplaced");
        assert_eq!(n.reason(77), "reason_77");
        assert_eq!(n.mode(2), "MIGRATE_SYNC");
        assert_eq!(n.reason(u32::MAX), "reason_4294967295");
    }
}
