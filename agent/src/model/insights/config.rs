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
    /// Rank away from its GPU: at least this share of its threads last ran on other nodes than
    /// its GPU's (memory uses `split_min_share_pct` and `split_min_bytes`)...
    pub gpu_threads_away_pct: f64,
    /// ...and at least this many threads.
    pub gpu_threads_away_min: u32,
    /// Ranks sharing cores: the ranks of a job, not bound apart, had threads on at least this many
    /// of the same CPUs.
    pub shared_cores_min: u32,
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
            gpu_threads_away_pct: 50.0,
            gpu_threads_away_min: 2,
            shared_cores_min: 4,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    #[error("`{key} = {value}` is out of range: give {want} (see docs/insights.md)")]
    OutOfRange { key: &'static str, value: f64, want: &'static str },
    #[error("[insights] in {path}: {message}")]
    Parse { path: String, message: String },
}

impl InsightConfig {
    /// Parses an `[insights]` table's text (its keys, without the header) and checks it.
    /// Errors name the file, the line and its key.
    pub fn from_toml(text: &str, path: &str) -> Result<Self, ConfigError> {
        let c: InsightConfig = toml::from_str(text).map_err(|e| {
            let at = e.span().map(|s| {
                let n = text.as_bytes()[..s.start.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1;
                let line = text.lines().nth(n - 1).unwrap_or("").trim();
                format!("line {n} (`{line}`): ")
            });
            ConfigError::Parse { path: path.into(), message: format!("{}{}", at.unwrap_or_default(), e.message()) }
        })?;
        c.validate().map_err(|e| ConfigError::Parse { path: path.into(), message: e.to_string() })?;
        Ok(c)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        const SECONDS: &str = "seconds, 0 or more";
        const PCT: &str = "a percentage from 0 to 100";
        let checks = [
            ("open_after_s", self.open_after_s, self.open_after_s >= 0.0, SECONDS),
            ("close_after_s", self.close_after_s, self.close_after_s >= 0.0, SECONDS),
            ("window_s", self.window_s, self.window_s > 0.0, "seconds, more than 0"),
            (
                "hold_ratio",
                self.hold_ratio,
                self.hold_ratio > 0.0 && self.hold_ratio <= 1.0,
                "a fraction above 0, at most 1",
            ),
            (
                "churn_max_growth_pct",
                self.churn_max_growth_pct,
                self.churn_max_growth_pct >= 0.0,
                "a percentage, 0 or more",
            ),
            ("split_min_share_pct", self.split_min_share_pct, (0.0..=100.0).contains(&self.split_min_share_pct), PCT),
            (
                "rank_slow_spread_pct",
                self.rank_slow_spread_pct,
                (0.0..=100.0).contains(&self.rank_slow_spread_pct),
                PCT,
            ),
            ("rank_fault_ratio", self.rank_fault_ratio, self.rank_fault_ratio >= 1.0, "a ratio of 1 or more"),
            (
                "gpu_threads_away_pct",
                self.gpu_threads_away_pct,
                (0.0..=100.0).contains(&self.gpu_threads_away_pct),
                PCT,
            ),
            (
                "promote_max_success_pct",
                self.promote_max_success_pct,
                (0.0..=100.0).contains(&self.promote_max_success_pct),
                PCT,
            ),
        ];
        match checks.iter().find(|(_, _, ok, _)| !ok) {
            Some(&(key, value, _, want)) => Err(ConfigError::OutOfRange { key, value, want }),
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
        let bad = InsightConfig { hold_ratio: 2.0, ..Default::default() }.validate();
        assert_eq!(
            bad,
            Err(ConfigError::OutOfRange { key: "hold_ratio", value: 2.0, want: "a fraction above 0, at most 1" })
        );
        // Every error is one line naming the file, the key and what to give.
        let e = InsightConfig::from_toml("window_s = 1\nhold_ratio = 2", "/etc/t.toml").expect_err("range").to_string();
        assert_eq!(
            e,
            "[insights] in /etc/t.toml: `hold_ratio = 2` is out of range: give a fraction above 0, at most 1 \
             (see docs/insights.md)"
        );
        let e = InsightConfig::from_toml("\nno_such_key = 1", "/etc/t.toml").expect_err("unknown key").to_string();
        assert!(
            e.starts_with("[insights] in /etc/t.toml: line 2 (`no_such_key = 1`): unknown field `no_such_key`"),
            "{e}"
        );
        let e = InsightConfig::from_toml("open_after_s = \"soon\"", "t.toml").expect_err("a string").to_string();
        assert!(e.contains("line 1 (`open_after_s = \"soon\"`)") && e.contains("expected f64"), "{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}
