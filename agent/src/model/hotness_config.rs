//! `[hotness]`: DAMON's intervals, the hot/warm/cold thresholds and the kdamond CPU cap (pure:
//! the values and their checks; reading the file is the caller's).
use std::time::Duration;

use serde::Deserialize;

use super::hotness::{Intervals, Thresholds};

/// The `[hotness]` table (of `run --config`, or of `--hotness-config` for snapshot, top and record).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HotnessConfig {
    /// Turn the monitor on (as `--hotness` does).
    pub enabled: bool,
    /// DAMON's sampling interval: how often one page of each region is checked (ms).
    pub sample_ms: f64,
    /// DAMON's aggregation interval: access counts are summed over this (ms).
    pub aggr_ms: f64,
    /// DAMON's regions update interval (new mappings for processes; ms).
    pub update_ms: f64,
    /// How often the agent reads the regions (ms).
    pub refresh_ms: u64,
    pub min_regions: u32,
    pub max_regions: u32,
    /// Per-process (virtual-address) monitoring where the kernel has it; false: per node only.
    pub per_process: bool,
    /// Processes monitored at most (the busiest tracked ones).
    pub max_processes: usize,
    /// The kdamonds' CPU share of one core (percent) above which sampling gets coarser.
    pub kdamond_cpu_max_pct: f64,
    /// Pages sampled per region to learn where a process's region lives.
    pub placement_pages_per_region: usize,
    pub hot_min_access_pct: f64,
    pub cold_min_idle_s: f64,
}

impl Default for HotnessConfig {
    fn default() -> Self {
        let t = Thresholds::default();
        HotnessConfig {
            enabled: false,
            sample_ms: 5.0,
            aggr_ms: 100.0,
            update_ms: 1000.0,
            refresh_ms: 2000,
            min_regions: 10,
            max_regions: 1000,
            per_process: true,
            max_processes: 16,
            kdamond_cpu_max_pct: 2.0,
            placement_pages_per_region: 32,
            hot_min_access_pct: t.hot_min_access_pct,
            cold_min_idle_s: t.cold_min_idle_s,
        }
    }
}

impl HotnessConfig {
    pub fn thresholds(&self) -> Thresholds {
        Thresholds { hot_min_access_pct: self.hot_min_access_pct, cold_min_idle_s: self.cold_min_idle_s }
    }

    pub fn intervals(&self) -> Intervals {
        Intervals { sample_us: (self.sample_ms * 1000.0) as u64, aggr_us: (self.aggr_ms * 1000.0) as u64 }
    }

    pub fn refresh(&self) -> Duration {
        Duration::from_millis(self.refresh_ms)
    }

    /// Checks every value; the error names the key (prefixed `hotness.`) and what to give.
    pub fn validate(&self) -> Result<(), String> {
        let ms = |k: &str, v: f64, lo: f64, hi: f64| {
            if v.is_finite() && v >= lo && v <= hi {
                Ok(())
            } else {
                Err(format!("hotness.{k} = {v}: give milliseconds between {lo} and {hi}"))
            }
        };
        ms("sample_ms", self.sample_ms, 0.1, 10_000.0)?;
        ms("aggr_ms", self.aggr_ms, 1.0, 600_000.0)?;
        ms("update_ms", self.update_ms, 1.0, 3_600_000.0)?;
        ms("refresh_ms", self.refresh_ms as f64, 100.0, 3_600_000.0)?;
        if self.aggr_ms < self.sample_ms {
            return Err(format!(
                "hotness.aggr_ms = {} is below sample_ms = {}: aggregate over several samples",
                self.aggr_ms, self.sample_ms
            ));
        }
        if !(3..=100_000).contains(&self.min_regions)
            || self.max_regions < self.min_regions
            || self.max_regions > 100_000
        {
            return Err(format!(
                "hotness.min_regions = {}, max_regions = {}: give 3 <= min <= max <= 100000",
                self.min_regions, self.max_regions
            ));
        }
        if !(self.kdamond_cpu_max_pct > 0.0 && self.kdamond_cpu_max_pct <= 100.0) {
            return Err(format!(
                "hotness.kdamond_cpu_max_pct = {}: give a percentage of one core above 0, at most 100",
                self.kdamond_cpu_max_pct
            ));
        }
        if !(1..=4096).contains(&self.placement_pages_per_region) {
            return Err(format!(
                "hotness.placement_pages_per_region = {}: give 1 to 4096",
                self.placement_pages_per_region
            ));
        }
        if self.max_processes > 256 {
            return Err(format!("hotness.max_processes = {}: give at most 256", self.max_processes));
        }
        self.thresholds().validate().map_err(|e| format!("hotness.{e}"))
    }

    /// Reads the `[hotness]` table of a TOML file (other tables are ignored).
    pub fn from_toml(text: &str) -> Result<HotnessConfig, String> {
        #[derive(Deserialize)]
        struct File {
            #[serde(default)]
            hotness: HotnessConfig,
        }
        let f: File = toml::from_str(text).map_err(|e| {
            let text = e.to_string();
            let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
            // "TOML parse error at line 2, column 1" ... "unknown field `x`, expected ...": both.
            format!("{} ({})", lines.first().unwrap_or(&"invalid TOML"), lines.last().unwrap_or(&""))
        })?;
        f.hotness.validate()?;
        Ok(f.hotness)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_a_guest_sized_table() {
        let d = HotnessConfig::from_toml("").unwrap();
        assert_eq!(d, HotnessConfig::default());
        assert!(!d.enabled);
        assert_eq!(d.intervals(), Intervals { sample_us: 5_000, aggr_us: 100_000 });
        let g = HotnessConfig::from_toml("[hotness]\nsample_ms = 20\naggr_ms = 400\ncold_min_idle_s = 4\nper_process = false\n[otlp]\nendpoint = 'x'\n").unwrap();
        assert_eq!(g.intervals(), Intervals { sample_us: 20_000, aggr_us: 400_000 });
        assert_eq!(g.thresholds().cold_min_idle_s, 4.0);
        assert!(!g.per_process);
    }

    #[test]
    fn bad_tables_say_which_key() {
        for (text, key) in [
            ("[hotness]\nsample_ms = 0\n", "hotness.sample_ms"),
            ("[hotness]\nsample_ms = 50\naggr_ms = 10\n", "hotness.aggr_ms"),
            ("[hotness]\nmax_regions = 2\n", "max_regions"),
            ("[hotness]\nhot_min_access_pct = 101\n", "hotness.hot_min_access_pct"),
            ("[hotness]\nkdamond_cpu_max_pct = -1\n", "kdamond_cpu_max_pct"),
            ("[hotness]\nsampel_ms = 5\n", "sampel_ms"),
        ] {
            let e = HotnessConfig::from_toml(text).unwrap_err();
            assert!(e.contains(key), "{text:?}: {e}");
        }
    }
}
