//! NUMA hinting and tiering activity from the kernel's own counters (`/proc/vmstat` and each
//! `nodeN/vmstat`): hint faults and how many were local, promotion candidates and successes,
//! demotions by path. Counters are cumulative since boot; the model keeps the first reading of
//! the session and the last two, and derives deltas and rates from them.
use std::collections::BTreeMap;

use serde::Serialize;

/// The counters kept (absent ones, on kernels without them, are simply not shown).
pub const COUNTERS: &[&str] = &[
    "numa_hint_faults",
    "numa_hint_faults_local",
    "numa_pages_migrated",
    "pgpromote_success",
    "pgpromote_candidate",
    "pgdemote_kswapd",
    "pgdemote_direct",
    "pgdemote_khugepaged",
    "pgdemote_proactive",
];

/// One read of the counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VmstatReading {
    pub at_ns: u64,
    /// `/proc/vmstat`.
    pub system: BTreeMap<String, u64>,
    /// node -> that node's `vmstat`.
    pub by_node: BTreeMap<u32, BTreeMap<String, u64>>,
}

/// Keeps the [`COUNTERS`] of a parsed vmstat, every other promotion/demotion counter (the
/// exporter sends each one a node has: one reading per tick serves both) and
/// `pgmigrate_success` (the residency scans skip processes while no page moved).
pub fn kept(all: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    all.iter()
        .filter(|(k, _)| {
            COUNTERS.contains(&k.as_str())
                || k.starts_with("pgpromote_")
                || k.starts_with("pgdemote_")
                || *k == "pgmigrate_success"
        })
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

#[derive(Clone, Debug, Default)]
pub struct Tiering {
    first: Option<VmstatReading>,
    prev: Option<VmstatReading>,
    last: Option<VmstatReading>,
}

/// Counter deltas and rates over a window.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CounterWindow {
    /// Increase of each counter over the window.
    pub delta: BTreeMap<String, u64>,
    /// The same per second.
    pub per_s: BTreeMap<String, f64>,
}

/// The `tiering` key of the snapshot.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TieringSnapshot {
    /// Seconds between the first and the last reading.
    pub window_s: f64,
    #[serde(flatten)]
    pub system: CounterWindow,
    /// numa_hint_faults_local / numa_hint_faults over the window, percent; absent without hint faults.
    pub hint_faults_local_pct: Option<f64>,
    /// Promotion successes per candidate over the window, percent; absent without candidates.
    pub promote_success_pct: Option<f64>,
    pub by_node: BTreeMap<String, CounterWindow>,
}

fn window(a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>, dt_s: f64) -> CounterWindow {
    let delta: BTreeMap<String, u64> =
        b.iter().map(|(k, &v)| (k.clone(), v.saturating_sub(a.get(k).copied().unwrap_or(v)))).collect();
    let per_s =
        if dt_s > 0.0 { delta.iter().map(|(k, &v)| (k.clone(), v as f64 / dt_s)).collect() } else { BTreeMap::new() };
    CounterWindow { delta, per_s }
}

fn pct(part: Option<&u64>, whole: Option<&u64>) -> Option<f64> {
    let whole = *whole?;
    (whole > 0).then(|| *part.unwrap_or(&0) as f64 * 100.0 / whole as f64)
}

fn secs(a: &VmstatReading, b: &VmstatReading) -> f64 {
    b.at_ns.saturating_sub(a.at_ns) as f64 / 1e9
}

impl Tiering {
    /// Folds in a new reading.
    /// The latest reading, if any.
    pub fn latest(&self) -> Option<&VmstatReading> {
        self.last.as_ref()
    }

    pub fn apply(&mut self, r: VmstatReading) {
        if self.first.is_none() {
            self.first = Some(r.clone());
        }
        self.prev = self.last.take();
        self.last = Some(r);
    }

    fn between(a: &VmstatReading, b: &VmstatReading) -> TieringSnapshot {
        let dt = secs(a, b);
        let system = window(&a.system, &b.system, dt);
        let by_node =
            b.by_node.iter().map(|(n, c)| (n.to_string(), window(a.by_node.get(n).unwrap_or(c), c, dt))).collect();
        TieringSnapshot {
            window_s: dt,
            hint_faults_local_pct: pct(
                system.delta.get("numa_hint_faults_local"),
                system.delta.get("numa_hint_faults"),
            ),
            promote_success_pct: pct(system.delta.get("pgpromote_success"), system.delta.get("pgpromote_candidate")),
            system,
            by_node,
        }
    }

    /// Since the session's first reading; `None` before any reading.
    /// Each node's counters at the last reading (empty before the first).
    pub fn last_by_node(&self) -> BTreeMap<u32, BTreeMap<String, u64>> {
        self.last.as_ref().map(|r| r.by_node.clone()).unwrap_or_default()
    }

    pub fn since_start(&self) -> Option<TieringSnapshot> {
        Some(Tiering::between(self.first.as_ref()?, self.last.as_ref()?))
    }

    /// Over the last interval between readings; `None` before two readings.
    pub fn last_interval(&self) -> Option<TieringSnapshot> {
        Some(Tiering::between(self.prev.as_ref()?, self.last.as_ref()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    fn reading(at_s: u64, system: &[(&str, u64)], node1: &[(&str, u64)]) -> VmstatReading {
        VmstatReading { at_ns: at_s * 1_000_000_000, system: m(system), by_node: [(1, m(node1))].into() }
    }

    #[test]
    fn kept_drops_unrelated_counters() {
        let all = m(&[
            ("numa_hint_faults", 5),
            ("numa_hit", 100),
            ("pgdemote_kswapd", 2),
            ("pgpromote_candidate_nrl", 3),
            ("nr_free_pages", 9),
        ]);
        let want = m(&[("numa_hint_faults", 5), ("pgdemote_kswapd", 2), ("pgpromote_candidate_nrl", 3)]);
        assert_eq!(kept(&all), want, "every promotion/demotion counter is kept for the exporter");
    }

    #[test]
    fn deltas_rates_and_ratios_over_the_session_and_the_last_interval() {
        let mut t = Tiering::default();
        assert!(t.since_start().is_none());
        t.apply(reading(
            10,
            &[
                ("numa_hint_faults", 1000),
                ("numa_hint_faults_local", 900),
                ("pgpromote_candidate", 50),
                ("pgpromote_success", 10),
            ],
            &[("pgdemote_kswapd", 7)],
        ));
        let one = t.since_start().unwrap();
        assert_eq!(one.window_s, 0.0);
        assert_eq!(one.system.delta["numa_hint_faults"], 0);
        assert!(one.system.per_s.is_empty(), "no rate over an empty window");
        assert_eq!(one.hint_faults_local_pct, None);
        assert!(t.last_interval().is_none());
        t.apply(reading(
            12,
            &[
                ("numa_hint_faults", 1400),
                ("numa_hint_faults_local", 1200),
                ("pgpromote_candidate", 150),
                ("pgpromote_success", 70),
            ],
            &[("pgdemote_kswapd", 207)],
        ));
        t.apply(reading(
            14,
            &[
                ("numa_hint_faults", 1600),
                ("numa_hint_faults_local", 1250),
                ("pgpromote_candidate", 150),
                ("pgpromote_success", 70),
            ],
            &[("pgdemote_kswapd", 407)],
        ));
        let s = t.since_start().unwrap();
        assert_eq!(s.window_s, 4.0);
        assert_eq!(s.system.delta["numa_hint_faults"], 600);
        assert_eq!(s.system.per_s["numa_hint_faults"], 150.0);
        assert_eq!(s.hint_faults_local_pct, Some(350.0 / 600.0 * 100.0));
        assert_eq!(s.promote_success_pct, Some(60.0));
        assert_eq!(s.by_node["1"].delta["pgdemote_kswapd"], 400);
        assert_eq!(s.by_node["1"].per_s["pgdemote_kswapd"], 100.0);
        let l = t.last_interval().unwrap();
        assert_eq!(l.window_s, 2.0);
        assert_eq!(l.system.delta["numa_hint_faults_local"], 50);
        assert_eq!(l.hint_faults_local_pct, Some(25.0));
        assert_eq!(l.promote_success_pct, None, "no candidates in the last interval");
    }

    #[test]
    fn counters_that_appear_or_go_backwards_do_not_underflow() {
        let mut t = Tiering::default();
        t.apply(reading(1, &[("numa_hint_faults", 10)], &[]));
        // A node onlined mid-session (CXL region) and a counter that went down (never should).
        t.apply(VmstatReading {
            at_ns: 2_000_000_000,
            system: m(&[("numa_hint_faults", 5), ("pgdemote_direct", 3)]),
            by_node: [(2, m(&[("pgpromote_success", 9)]))].into(),
        });
        let s = t.since_start().unwrap();
        assert_eq!(s.system.delta["numa_hint_faults"], 0);
        assert_eq!(s.system.delta["pgdemote_direct"], 0, "counted from its first sighting");
        assert_eq!(s.by_node["2"].delta["pgpromote_success"], 0);
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["delta"]["numa_hint_faults"], 0);
        assert!(json["by_node"]["2"]["per_s"].is_object());
    }
}
