//! Memory tiering per container cgroup from the kernel's own cgroup v2 counters: bytes per node
//! (`memory.numa_stat`'s `anon` and `file`) and the tiering events of `memory.stat`
//! (promotions, demotions by kind, NUMA hint faults, pages migrated), counted since the agent
//! first read each cgroup.
//!
//! Pure: `collect/cgroup_memory.rs` reads the files (bounded) and passes their text in; the
//! parsers here never fail on odd content, they say what was wrong per cgroup. On a node whose
//! memory controller is on a v1 hierarchy there is nothing to read: the view says so once.
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::container::ContainerIdentity;

/// Container cgroups followed at most; more are counted, not read.
pub const MAX_CGROUPS: usize = 256;

/// The largest `memory.stat` or `memory.numa_stat` read (a few KiB on a 6.x kernel with
/// dozens of nodes).
pub const FILE_MAX: usize = 64 * 1024;

/// The `memory.stat` event counters followed (kernel 6.12 and later have them all; older
/// kernels lack the `pgpromote_*`/`pgdemote_*` ones).
pub const TIERING_COUNTERS: [&str; 7] = [
    "pgpromote_success",
    "pgdemote_kswapd",
    "pgdemote_direct",
    "pgdemote_khugepaged",
    "numa_pages_migrated",
    "numa_hint_faults",
    "numa_pte_updates",
];

/// A cgroup's bytes on one node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeBytes {
    pub anon: u64,
    pub file: u64,
}

impl NodeBytes {
    pub fn total(&self) -> u64 {
        self.anon.saturating_add(self.file)
    }
}

/// `memory.numa_stat` (`anon N0=123 N1=456`, bytes): `anon` and `file` by node. Other lines
/// are skipped; a malformed `anon` or `file` line, or neither present, is an `Err` naming it.
pub fn parse_numa_stat(text: &str) -> Result<BTreeMap<u32, NodeBytes>, String> {
    let mut by_node: BTreeMap<u32, NodeBytes> = BTreeMap::new();
    let mut seen = 0;
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let key = words.next().unwrap_or("");
        if key != "anon" && key != "file" {
            continue;
        }
        seen += 1;
        for w in words {
            let parsed = w
                .strip_prefix('N')
                .and_then(|s| s.split_once('='))
                .and_then(|(n, v)| Some((n.parse::<u32>().ok()?, v.parse::<u64>().ok()?)));
            let Some((node, bytes)) = parsed else {
                return Err(format!("memory.numa_stat: `{}` in the `{key}` line is not N<node>=<bytes>", clip(w)));
            };
            let e = by_node.entry(node).or_default();
            if key == "anon" {
                e.anon = bytes;
            } else {
                e.file = bytes;
            }
        }
    }
    if seen == 0 {
        return Err("memory.numa_stat: no `anon` or `file` line".into());
    }
    Ok(by_node)
}

/// What `memory.stat` says of [`TIERING_COUNTERS`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatCounters {
    pub values: BTreeMap<&'static str, u64>,
    /// Counters this kernel does not have (no line).
    pub missing: Vec<&'static str>,
    /// Lines of a followed counter whose value is not a number.
    pub problems: Vec<String>,
}

/// `memory.stat` (`name value` a line): the tiering counters, the missing ones and any
/// followed counter with a value that is not a number.
pub fn parse_memory_stat(text: &str) -> StatCounters {
    let mut out = StatCounters::default();
    let mut found = BTreeSet::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let (Some(key), value) = (words.next(), words.next()) else { continue };
        let Some(&name) = TIERING_COUNTERS.iter().find(|c| **c == key) else { continue };
        found.insert(name);
        match value.and_then(|v| v.parse::<u64>().ok()) {
            Some(v) if words.next().is_none() => {
                out.values.insert(name, v);
            }
            _ => out.problems.push(format!("memory.stat: `{}` is not `{name} <count>`", clip(line))),
        }
    }
    out.missing = TIERING_COUNTERS.iter().copied().filter(|c| !found.contains(c)).collect();
    out
}

fn clip(s: &str) -> String {
    s.chars().take(60).collect()
}

/// One file of a cgroup as the collector found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileRead {
    Text(String),
    /// The cgroup's directory is gone (its containers ended).
    Gone,
    /// Any other failure, with the file and the reason.
    Failed(String),
}

/// Which cgroup hierarchy holds the memory controller, as the collector found it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Hierarchy {
    /// Not looked at yet.
    #[default]
    Unknown,
    /// cgroup v2 at `/sys/fs/cgroup`: the per-cgroup counters are read.
    Unified,
    /// No per-cgroup tiering counters; why (v1 only, hybrid, nothing mounted).
    Unavailable(String),
}

/// One container cgroup at one reading.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupFiles {
    /// The path below the cgroup v2 root (`/kubepods.slice/...`).
    pub path: String,
    /// The identity of a process in it (the first one found).
    pub identity: ContainerIdentity,
    pub numa_stat: FileRead,
    pub memory_stat: FileRead,
}

/// What the collector read at one reading.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CgroupReading {
    pub at_ns: u64,
    pub hierarchy: Hierarchy,
    pub cgroups: Vec<CgroupFiles>,
    /// Container cgroups past [`MAX_CGROUPS`], not read.
    pub over_limit: u64,
}

/// One counter over the time the agent has followed the cgroup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counter {
    /// The value at the first read (or 0 after a reset).
    base: u64,
    last: u64,
    /// Counts before a reset (a cgroup made again under the same path starts from 0).
    carried: u64,
}

impl Counter {
    fn update(&mut self, v: u64) {
        if v < self.last {
            self.carried = self.carried.saturating_add(self.last - self.base);
            self.base = 0;
        }
        self.last = v;
    }

    fn since_first(&self) -> u64 {
        self.carried.saturating_add(self.last.saturating_sub(self.base))
    }
}

#[derive(Clone, Debug, Default)]
struct Entry {
    identity: ContainerIdentity,
    first_at_ns: u64,
    last_at_ns: u64,
    gone_at_ns: Option<u64>,
    bytes_by_node: BTreeMap<u32, NodeBytes>,
    counters: BTreeMap<&'static str, Counter>,
    missing: Vec<&'static str>,
    problems: Vec<String>,
}

/// Every followed container cgroup: the model's state.
#[derive(Clone, Debug, Default)]
pub struct CgroupTiering {
    hierarchy: Hierarchy,
    entries: BTreeMap<String, Entry>,
    over_limit: u64,
}

impl CgroupTiering {
    /// Takes one reading. A cgroup whose directory is gone keeps its last values; one that no
    /// process of the model is in any more (they were pruned) is dropped.
    pub fn apply(&mut self, r: CgroupReading) {
        self.hierarchy = r.hierarchy;
        self.over_limit = r.over_limit;
        let listed: BTreeSet<&str> = r.cgroups.iter().map(|c| c.path.as_str()).collect();
        self.entries.retain(|p, _| listed.contains(p.as_str()));
        for c in r.cgroups {
            let e = self.entries.entry(c.path).or_insert_with(|| Entry { first_at_ns: r.at_ns, ..Default::default() });
            e.identity = c.identity;
            if matches!(c.numa_stat, FileRead::Gone) || matches!(c.memory_stat, FileRead::Gone) {
                e.gone_at_ns.get_or_insert(r.at_ns);
                continue;
            }
            e.gone_at_ns = None;
            e.last_at_ns = r.at_ns;
            e.problems.clear();
            match c.numa_stat {
                FileRead::Text(t) => match parse_numa_stat(&t) {
                    Ok(b) => e.bytes_by_node = b,
                    Err(p) => e.problems.push(p),
                },
                FileRead::Failed(why) => e.problems.push(why),
                FileRead::Gone => {}
            }
            match c.memory_stat {
                FileRead::Text(t) => {
                    let s = parse_memory_stat(&t);
                    for (name, v) in s.values {
                        match e.counters.get_mut(name) {
                            Some(c) => c.update(v),
                            None => {
                                e.counters.insert(name, Counter { base: v, last: v, carried: 0 });
                            }
                        }
                    }
                    e.missing = s.missing;
                    e.problems.extend(s.problems);
                }
                FileRead::Failed(why) => e.problems.push(why),
                FileRead::Gone => {}
            }
        }
    }

    /// The snapshot's view; `tier_of` names a node's tier.
    pub fn view(&self, tier_of: impl Fn(u32) -> String) -> CgroupsView {
        let cgroups = self
            .entries
            .iter()
            .map(|(path, e)| {
                let mut bytes_by_tier: BTreeMap<String, u64> = BTreeMap::new();
                for (&n, b) in &e.bytes_by_node {
                    *bytes_by_tier.entry(tier_of(n)).or_default() += b.total();
                }
                let id = &e.identity;
                CgroupView {
                    path: path.clone(),
                    pod_uid: id.pod_uid.clone(),
                    pod_name: id.pod_name.clone(),
                    pod_namespace: id.pod_namespace.clone(),
                    container_id: id.id.clone(),
                    container_name: id.name.clone(),
                    bytes_by_node: e.bytes_by_node.iter().map(|(&n, b)| (n, NodeBytesView::of(b))).collect(),
                    bytes_by_tier,
                    counters_since_first_read: e
                        .counters
                        .iter()
                        .map(|(&k, c)| (k.to_string(), c.since_first()))
                        .collect(),
                    counters_now: e.counters.iter().map(|(&k, c)| (k.to_string(), c.last)).collect(),
                    not_on_this_kernel: e.missing.iter().map(|m| m.to_string()).collect(),
                    problems: e.problems.clone(),
                    followed_s: e.last_at_ns.saturating_sub(e.first_at_ns) as f64 / 1e9,
                    gone: e.gone_at_ns.is_some(),
                }
            })
            .collect();
        let (hierarchy, unavailable) = match &self.hierarchy {
            Hierarchy::Unknown => ("unknown", None),
            Hierarchy::Unified => ("unified", None),
            Hierarchy::Unavailable(why) => ("unavailable", Some(why.clone())),
        };
        CgroupsView { hierarchy: hierarchy.into(), unavailable, cgroups, over_limit: self.over_limit }
    }
}

/// A node's bytes in the snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeBytesView {
    pub anon: u64,
    pub file: u64,
    pub total: u64,
}

impl NodeBytesView {
    fn of(b: &NodeBytes) -> Self {
        NodeBytesView { anon: b.anon, file: b.file, total: b.total() }
    }
}

/// One container cgroup in the snapshot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CgroupView {
    pub path: String,
    pub pod_uid: Option<String>,
    pub pod_name: Option<String>,
    pub pod_namespace: Option<String>,
    pub container_id: Option<String>,
    pub container_name: Option<String>,
    /// `memory.numa_stat`'s anon and file bytes by node, at the last reading.
    pub bytes_by_node: BTreeMap<u32, NodeBytesView>,
    /// The same summed by the node's tier.
    pub bytes_by_tier: BTreeMap<String, u64>,
    /// `memory.stat`'s tiering events since the agent first read the cgroup.
    pub counters_since_first_read: BTreeMap<String, u64>,
    /// Their values at the last reading, as the kernel counts them.
    pub counters_now: BTreeMap<String, u64>,
    /// Tiering counters this kernel does not have: "counter not present on this kernel".
    pub not_on_this_kernel: Vec<String>,
    /// Files that could not be read or parsed at the last reading.
    pub problems: Vec<String>,
    /// From the first reading to the last that found the cgroup.
    pub followed_s: f64,
    /// Its directory is gone; the values are the last read.
    pub gone: bool,
}

/// Every followed container cgroup (`cgroups` in the snapshot).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CgroupsView {
    /// `unified` (cgroup v2: read), `unavailable` (see `unavailable`), `unknown` (not read yet).
    pub hierarchy: String,
    /// Why there are no per-cgroup counters on this node (one line), when there are none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
    pub cgroups: Vec<CgroupView>,
    /// Container cgroups past the limit, not read.
    pub over_limit: u64,
}

#[cfg(test)]
mod tests;
