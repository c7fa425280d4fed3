//! `[insights]`: when each insight opens and closes. Every threshold has a default that suits a
//! training node; a file may set any of them.
use serde::Deserialize;

const MIB: u64 = 1 << 20;

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InsightConfig {
    /// A condition must hold this long before its insight opens.
    pub open_after_s: f64,
    /// An open insight closes once its condition has been clear this long.
    pub close_after_s: f64,
    /// Rates are taken over this window of readings.
    pub window_s: f64,
    /// An open insight stays open while its figures are above this fraction of the thresholds
    /// that open it (hysteresis: no flapping around a threshold).
    pub hold_ratio: f64,
    /// Allocation churn: pages allocated per second...
    pub churn_min_pages_per_s: f64,
    /// ...while the resident size moved by at most this percent of what was allocated.
    pub churn_max_growth_pct: f64,
    /// Job memory on the slow tier: at least this much on slow nodes, with as much free on DRAM.
    pub slow_tier_min_bytes: u64,
    /// Pinned memory on the slow tier: at least this much pinned or locked (VmPin + VmLck) while
    /// at least as much of the process sits on slow nodes.
    pub pinned_min_bytes: u64,
    /// CPU and memory apart: at least this share of the process's memory on one other node with
    /// CPUs...
    pub split_min_share_pct: f64,
    /// ...and at least this much there.
    pub split_min_bytes: u64,
    /// Rank imbalance: ranks' slow-tier shares this many percentage points apart...
    pub rank_slow_spread_pct: f64,
    /// ...with the worst rank holding at least this much on the slow tier;
    pub rank_min_slow_bytes: u64,
    /// or fault rates this many times apart, the busiest at least `rank_min_faults_per_s`.
    pub rank_fault_ratio: f64,
    pub rank_min_faults_per_s: f64,
    /// Tiering ping-pong: a fast node both demoting and promoting at least this many pages/s.
    pub ping_pong_min_pages_per_s: f64,
    /// Promotion rate-limited: at least this many promotion candidates per second...
    pub promote_min_candidates_per_s: f64,
    /// ...of which at most this percent promoted.
    pub promote_max_success_pct: f64,
}

impl Default for InsightConfig {
    fn default() -> Self {
        InsightConfig {
            open_after_s: 10.0,
            close_after_s: 30.0,
            window_s: 10.0,
            hold_ratio: 0.7,
            churn_min_pages_per_s: 10_000.0,
            churn_max_growth_pct: 10.0,
            slow_tier_min_bytes: 256 * MIB,
            pinned_min_bytes: 64 * MIB,
            split_min_share_pct: 60.0,
            split_min_bytes: 64 * MIB,
            rank_slow_spread_pct: 25.0,
            rank_min_slow_bytes: 64 * MIB,
            rank_fault_ratio: 3.0,
            rank_min_faults_per_s: 10_000.0,
            ping_pong_min_pages_per_s: 256.0,
            promote_min_candidates_per_s: 256.0,
            promote_max_success_pct: 50.0,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    #[error("[insights] {0}: give a value in range (see the README's Insights section)")]
    OutOfRange(&'static str),
    #[error("[insights] in {path}: {message}")]
    Parse { path: String, message: String },
}

impl InsightConfig {
    /// Parses an `[insights]` table's text (its keys, without the header) and checks it.
    pub fn from_toml(text: &str, path: &str) -> Result<Self, ConfigError> {
        let c: InsightConfig =
            toml::from_str(text).map_err(|e| ConfigError::Parse { path: path.into(), message: e.message().into() })?;
        c.validate()?;
        Ok(c)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive = [
            ("open_after_s", self.open_after_s >= 0.0),
            ("close_after_s", self.close_after_s >= 0.0),
            ("window_s", self.window_s > 0.0),
            ("hold_ratio", self.hold_ratio > 0.0 && self.hold_ratio <= 1.0),
            ("churn_max_growth_pct", self.churn_max_growth_pct >= 0.0),
            ("split_min_share_pct", (0.0..=100.0).contains(&self.split_min_share_pct)),
            ("rank_slow_spread_pct", (0.0..=100.0).contains(&self.rank_slow_spread_pct)),
            ("rank_fault_ratio", self.rank_fault_ratio >= 1.0),
            ("promote_max_success_pct", (0.0..=100.0).contains(&self.promote_max_success_pct)),
        ];
        match positive.iter().find(|(_, ok)| !ok) {
            Some((name, _)) => Err(ConfigError::OutOfRange(name)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides_and_bad_values() {
        assert_eq!(InsightConfig::from_toml("", "x"), Ok(InsightConfig::default()));
        let c = InsightConfig::from_toml("open_after_s = 3\nslow_tier_min_bytes = 1048576\n", "x").expect("valid");
        assert_eq!((c.open_after_s, c.slow_tier_min_bytes, c.close_after_s), (3.0, 1 << 20, 30.0));
        assert_eq!(InsightConfig::from_toml("hold_ratio = 2", "x"), Err(ConfigError::OutOfRange("hold_ratio")));
        let e = InsightConfig::from_toml("no_such_key = 1", "/etc/t.toml").expect_err("unknown key");
        assert!(e.to_string().contains("/etc/t.toml") && e.to_string().contains("no_such_key"), "{e}");
    }
}
