//! Fleet granularity (`[export] granularity = "job"`): the per-process series of tracked
//! processes summed per training job, rank and executable name, without `process.pid`,
//! `k8s.pod.uid` or `container.id` (and, within a job, without the executable name: a rank's data
//! workers count with their rank), so a node exports one series set per rank instead of one per
//! pid, and a rank restarted under a new pid (or in a new pod) continues the same series.
//!
//! Counters never go back: when a process leaves a series (its tracked series ended, it exited),
//! what it had stays in the series as `ended`; the caller's `other` series, which takes that
//! process's counts at the same moment, is lowered by the same amount so every total is counted
//! once. A series whose processes are all gone is kept for [`KEEP_ENDED_NS`] (a restarted rank
//! picks it up again), then dropped, and `other` keeps what it had. A process that changes key
//! (its job or rank was learnt after it started) takes its counts with it. Gauges (resident
//! memory, hotness) are the sum of the live processes. Pure: it rewrites points.
use std::collections::BTreeMap;

use opentelemetry::KeyValue;

use super::instruments::{
    process::PROCESS_FAULTS, Kind, Point, Points, Value, CATALOG, CONTAINER_ID, EXE, JOB, OTHER, PID, POD_NAME, POD_UID,
};

/// How long a series outlives its last process.
pub const KEEP_ENDED_NS: u64 = 10 * 60 * 1_000_000_000;

/// Attributes fleet series do not carry: they change when a process or its pod restarts (a
/// Deployment's or Job's pod gets a new name; the namespace and container name stay).
const DROPPED: [&str; 4] = [PID, POD_UID, POD_NAME, CONTAINER_ID];

/// A process point's attributes in a fleet series: no pid, pod or container; in a job, no
/// executable name either (a rank's data workers count with their rank).
pub fn fleet_attributes(attrs: Vec<KeyValue>) -> Vec<KeyValue> {
    let in_job = attrs.iter().any(|kv| kv.key.as_str() == JOB);
    attrs.into_iter().filter(|kv| !DROPPED.contains(&kv.key.as_str()) && !(in_job && kv.key.as_str() == EXE)).collect()
}

/// The attributes that say which process (pid, name, job, rank...): every process metric has
/// them; the rest (node, tier, reason...) split the `other` series too.
fn is_identity(key: &str) -> bool {
    PROCESS_FAULTS.attributes.contains(&key)
}

/// One job-and-rank counter series.
#[derive(Debug)]
struct Series {
    attributes: Vec<KeyValue>,
    /// The same attributes less [`IDENTITY`]: the `other` point this series hands counts to.
    split: String,
    /// What processes that left the series had.
    ended: u64,
    /// pid -> its last value.
    live: BTreeMap<u32, u64>,
    /// When the last live process left (monotonic ns).
    empty_since: Option<u64>,
}

/// The fold's memory across calls.
#[derive(Debug, Default)]
pub struct FleetFold {
    /// (metric, canonical attributes) -> series.
    series: BTreeMap<(&'static str, String), Series>,
}

/// `k=v` pairs sorted: the identity of an attribute set.
fn canonical<'a>(attrs: impl IntoIterator<Item = &'a KeyValue>) -> String {
    let mut pairs: Vec<String> = attrs.into_iter().map(|kv| format!("{}={}", kv.key, kv.value)).collect();
    pairs.sort();
    pairs.join(",")
}

fn pid_of(p: &Point) -> Option<u32> {
    p.attributes.iter().find(|kv| kv.key.as_str() == PID).and_then(|kv| kv.value.as_str().parse().ok())
}

fn as_u64(v: Value) -> u64 {
    match v {
        Value::U64(n) => n,
        Value::I64(n) => n.max(0) as u64,
        Value::F64(f) => f.max(0.0) as u64,
    }
}

fn add(a: Value, b: Value) -> Value {
    match (a, b) {
        (Value::U64(x), Value::U64(y)) => Value::U64(x.saturating_add(y)),
        (Value::I64(x), Value::I64(y)) => Value::I64(x.saturating_add(y)),
        (x, y) => Value::F64(f64_of(x) + f64_of(y)),
    }
}

fn f64_of(v: Value) -> f64 {
    match v {
        Value::U64(n) => n as f64,
        Value::I64(n) => n as f64,
        Value::F64(f) => f,
    }
}

impl FleetFold {
    /// Rewrites the per-process metrics of `points` to job granularity; `now_ns` is the model's
    /// last reading time (it ages series with no process left).
    pub fn apply(&mut self, mut points: Points, now_ns: u64) -> Points {
        for def in CATALOG.iter().filter(|d| d.attributes.contains(&PID)) {
            let all = points.remove(def.name).unwrap_or_default();
            let (per_pid, mut rest): (Vec<Point>, Vec<Point>) = all.into_iter().partition(|p| pid_of(p).is_some());
            let mut out = match def.kind {
                Kind::Counter => self.counters(def.name, per_pid, &mut rest, now_ns),
                Kind::Gauge | Kind::UpDownCounter => gauges(per_pid),
                // Recorded as they happen, not from points (see `step_observation`).
                Kind::Histogram => per_pid,
            };
            out.append(&mut rest);
            if !out.is_empty() {
                points.insert(def.name, out);
            }
        }
        points
    }

    fn counters(&mut self, metric: &'static str, per_pid: Vec<Point>, other: &mut [Point], now_ns: u64) -> Vec<Point> {
        // key -> (attributes, pid -> value) as of now.
        let mut now: BTreeMap<String, (Vec<KeyValue>, BTreeMap<u32, u64>)> = BTreeMap::new();
        let mut placed: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        for p in per_pid {
            let pid = pid_of(&p).expect("partitioned on pid");
            let attrs = fleet_attributes(p.attributes);
            let key = canonical(&attrs);
            placed.entry(pid).or_default().push(key.clone());
            let entry = now.entry(key).or_insert_with(|| (attrs, BTreeMap::new()));
            *entry.1.entry(pid).or_default() += as_u64(p.value);
        }
        // Processes that left a series: gone from this metric altogether (their counts go to
        // `other` now), or moved to another series (they take their counts along).
        for ((m, key), s) in self.series.iter_mut().filter(|((m, _), _)| *m == metric) {
            let _ = m;
            let current = now.remove(key);
            for (pid, last) in std::mem::take(&mut s.live) {
                let still_here = current.as_ref().is_some_and(|(_, live)| live.contains_key(&pid));
                if !still_here && !placed.contains_key(&pid) {
                    s.ended = s.ended.saturating_add(last);
                }
            }
            if let Some((_, live)) = current {
                s.live = live;
            }
            s.empty_since = if s.live.is_empty() { s.empty_since.or(Some(now_ns)) } else { None };
        }
        for (key, (attributes, live)) in now {
            let split = canonical(attributes.iter().filter(|kv| !is_identity(kv.key.as_str())));
            self.series.insert((metric, key), Series { attributes, split, ended: 0, live, empty_since: None });
        }
        self.series.retain(|(m, _), s| {
            *m != metric || s.empty_since.is_none_or(|at| now_ns.saturating_sub(at) <= KEEP_ENDED_NS)
        });
        // What ended in a series is counted there, not again in `other`.
        let mut handed: BTreeMap<&str, u64> = BTreeMap::new();
        for ((_, _), s) in self.series.iter().filter(|((m, _), _)| *m == metric) {
            *handed.entry(s.split.as_str()).or_default() += s.ended;
        }
        for o in other
            .iter_mut()
            .filter(|o| o.attributes.iter().any(|kv| kv.key.as_str() == EXE && kv.value.as_str() == OTHER))
        {
            let split = canonical(o.attributes.iter().filter(|kv| kv.key.as_str() != EXE));
            if let Some(&h) = handed.get(split.as_str()) {
                o.value = Value::U64(as_u64(o.value).saturating_sub(h));
            }
        }
        self.series
            .iter()
            .filter(|((m, _), _)| *m == metric)
            .map(|(_, s)| Point {
                attributes: s.attributes.clone(),
                value: Value::U64(s.ended.saturating_add(s.live.values().sum::<u64>())),
            })
            .collect()
    }
}

/// Gauges: the sum of the live processes of each series.
fn gauges(per_pid: Vec<Point>) -> Vec<Point> {
    let mut by_key: BTreeMap<String, Point> = BTreeMap::new();
    for p in per_pid {
        let attributes = fleet_attributes(p.attributes);
        match by_key.entry(canonical(&attributes)) {
            std::collections::btree_map::Entry::Occupied(mut e) => {
                let v = add(e.get().value, p.value);
                e.get_mut().value = v;
            }
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(Point { attributes, value: p.value });
            }
        }
    }
    by_key.into_values().collect()
}

#[cfg(test)]
mod tests;
