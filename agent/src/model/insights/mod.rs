//! Insights: findings about a job's memory placement that a training engineer can act on, each
//! with a stable id, a severity, what it is about, the evidence as numbers, since when, and what
//! to try. Pure: [`InsightEngine::update`] takes the model's values after each reading; the rules
//! (one file each) say whether their condition holds, and the engine opens an insight only after
//! it held for `open_after_s` and closes it only after it was clear for `close_after_s`, with a
//! lower bar to stay open than to open (no flapping).
pub mod churn;
pub mod config;
pub mod device;
pub mod gpu;
pub mod placement;
pub mod ranks;
pub mod tiering;
pub mod view;
mod window;

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

pub use config::InsightConfig;
pub use window::Window;

use super::{process::Process, snapshot::NodeInfo};

/// Closed insights kept for display.
pub const CLOSED_HISTORY: usize = 32;

/// What an insight is: its id never changes (dashboards and alerts key on it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InsightId {
    AllocationChurn,
    SlowTierWithFastRoom,
    PinnedOnSlowTier,
    CpuMemorySplit,
    RankImbalance,
    TieringPingPong,
    PromotionRateLimited,
    UnhealthyDeviceUnderJob,
    RankAwayFromGpu,
    RanksShareCores,
}

impl InsightId {
    pub const ALL: [InsightId; 10] = [
        InsightId::AllocationChurn,
        InsightId::SlowTierWithFastRoom,
        InsightId::PinnedOnSlowTier,
        InsightId::CpuMemorySplit,
        InsightId::RankImbalance,
        InsightId::TieringPingPong,
        InsightId::PromotionRateLimited,
        InsightId::UnhealthyDeviceUnderJob,
        InsightId::RankAwayFromGpu,
        InsightId::RanksShareCores,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            InsightId::AllocationChurn => "allocation_churn",
            InsightId::SlowTierWithFastRoom => "slow_tier_with_fast_room",
            InsightId::PinnedOnSlowTier => "pinned_on_slow_tier",
            InsightId::CpuMemorySplit => "cpu_memory_split",
            InsightId::RankImbalance => "rank_imbalance",
            InsightId::TieringPingPong => "tiering_ping_pong",
            InsightId::PromotionRateLimited => "promotion_rate_limited",
            InsightId::UnhealthyDeviceUnderJob => "unhealthy_device_under_job",
            InsightId::RankAwayFromGpu => "rank_away_from_gpu",
            InsightId::RanksShareCores => "ranks_share_cores",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

/// What an insight is about.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Subject {
    Process { pid: u32, comm: String },
    Job { job: String },
    Rank { job: String, rank: u32, pid: u32 },
    Node { node: u32 },
}

impl Subject {
    /// A stable key (the insight's identity together with its id).
    pub fn key(&self) -> String {
        match self {
            Subject::Process { pid, .. } => format!("process:{pid}"),
            Subject::Job { job } => format!("job:{job}"),
            Subject::Rank { job, rank, .. } => format!("rank:{job}:{rank}"),
            Subject::Node { node } => format!("node:{node}"),
        }
    }

    /// In words, for the views.
    pub fn text(&self) -> String {
        match self {
            Subject::Process { pid, comm } => format!("{comm} {pid}"),
            Subject::Job { job } => format!("job {job}"),
            Subject::Rank { job, rank, pid } => format!("job {job} rank {rank} (pid {pid})"),
            Subject::Node { node } => format!("node {node}"),
        }
    }
}

/// How strongly a rule's condition holds now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Below the bar to stay open.
    Clear,
    /// Between the bar to stay open and the bar to open.
    Hold,
    /// Above the bar to open.
    Open,
}

impl Level {
    /// `value` against the bar `open_at` (and `hold_ratio` of it to stay open).
    pub fn of(value: f64, open_at: f64, hold_ratio: f64) -> Level {
        if value >= open_at {
            Level::Open
        } else if value >= open_at * hold_ratio {
            Level::Hold
        } else {
            Level::Clear
        }
    }

    /// The same for a value that must stay *below* a bar (`value <= open_at`).
    pub fn below(value: f64, open_at: f64, hold_ratio: f64) -> Level {
        if value <= open_at {
            Level::Open
        } else if value * hold_ratio <= open_at {
            Level::Hold
        } else {
            Level::Clear
        }
    }
}

/// What a rule found this reading.
#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    pub id: InsightId,
    pub severity: Severity,
    pub subject: Subject,
    pub level: Level,
    /// One line: what is wrong, in numbers.
    pub summary: String,
    /// Name (unit in the name: `_bytes`, `_per_s`, `_pct`, `_pages`) -> value.
    pub evidence: BTreeMap<String, f64>,
    /// Extra lines of evidence (top allocation sites, the processes involved).
    pub details: Vec<String>,
    /// What to try: a policy, a sysctl, a code change.
    pub try_this: String,
}

/// An open (or closed) insight.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Insight {
    pub id: InsightId,
    pub severity: Severity,
    pub subject: Subject,
    pub summary: String,
    pub evidence: BTreeMap<String, f64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
    pub try_this: String,
    /// When its condition started to hold (monotonic ns).
    #[serde(skip)]
    pub since_ns: u64,
    /// When it opened (monotonic ns).
    #[serde(skip)]
    pub opened_ns: u64,
    /// When it closed (monotonic ns), for closed ones.
    #[serde(skip)]
    pub closed_ns: Option<u64>,
}

impl Insight {
    fn from(f: Finding, since_ns: u64, opened_ns: u64) -> Self {
        Insight {
            id: f.id,
            severity: f.severity,
            subject: f.subject,
            summary: f.summary,
            evidence: f.evidence,
            details: f.details,
            try_this: f.try_this,
            since_ns,
            opened_ns,
            closed_ns: None,
        }
    }

    fn refresh(&mut self, f: Finding) {
        self.severity = f.severity;
        self.subject = f.subject;
        self.summary = f.summary;
        self.evidence = f.evidence;
        self.details = f.details;
        self.try_this = f.try_this;
    }
}

/// One insight's state between readings.
#[derive(Clone, Debug)]
enum Track {
    /// The condition holds since `since_ns`, not yet long enough.
    Pending { since_ns: u64 },
    /// Open; `clear_since_ns` when its condition stopped holding.
    Open { insight: Insight, clear_since_ns: Option<u64> },
}

/// Everything a rule may look at.
pub struct Inputs<'a> {
    pub now_ns: u64,
    pub cfg: &'a InsightConfig,
    pub processes: &'a BTreeMap<u32, Process>,
    pub nodes: &'a [NodeInfo],
    /// The machine's GPUs (which one a rank drives: `model/gpu.rs`).
    pub gpus: &'a [crate::topology::Gpu],
    pub health: &'a crate::health::HealthModel,
    pub window: &'a Window,
    pub page_size: u64,
}

impl Inputs<'_> {
    /// Whether a node is on a slower tier than DRAM.
    pub fn slow(&self, node: u32) -> bool {
        self.nodes.iter().any(|n| n.id == node && n.tier == "cxl")
    }

    pub fn node(&self, node: u32) -> Option<&NodeInfo> {
        self.nodes.iter().find(|n| n.id == node)
    }

    /// The live processes of training jobs (what insights are about).
    pub fn tracked(&self) -> impl Iterator<Item = &Process> {
        self.processes.values().filter(|p| p.exited_at_ns.is_none() && p.role.is_some())
    }

    /// Resident pages of `p` on slow-tier nodes.
    pub fn slow_pages(&self, p: &Process) -> u64 {
        p.residency
            .iter()
            .flat_map(|(r, _)| r.pages_by_node.iter())
            .filter(|(&n, _)| self.slow(n))
            .map(|(_, &v)| v)
            .sum()
    }
}

/// The engine: open insights, recently closed ones, and the window of readings the rules use.
#[derive(Clone, Debug, Default)]
pub struct InsightEngine {
    pub cfg: InsightConfig,
    tracks: BTreeMap<(InsightId, String), Track>,
    pub closed: VecDeque<Insight>,
    pub window: Window,
    /// Insights opened and closed since start.
    pub opened_total: u64,
    pub closed_total: u64,
}

impl InsightEngine {
    pub fn new(cfg: InsightConfig) -> Self {
        InsightEngine { cfg, ..Default::default() }
    }

    /// Runs every rule over the model's values at `now_ns` and moves each insight along.
    pub fn update(
        &mut self,
        now_ns: u64,
        processes: &BTreeMap<u32, Process>,
        nodes: &[NodeInfo],
        gpus: &[crate::topology::Gpu],
        health: &crate::health::HealthModel,
        vmstat: &BTreeMap<u32, BTreeMap<String, u64>>,
        page_size: u64,
    ) {
        self.window.push(now_ns, processes, vmstat, self.cfg.window_s);
        let inputs = Inputs { now_ns, cfg: &self.cfg, processes, nodes, gpus, health, window: &self.window, page_size };
        let mut findings = Vec::new();
        findings.extend(churn::findings(&inputs));
        findings.extend(placement::findings(&inputs));
        findings.extend(ranks::findings(&inputs));
        findings.extend(tiering::findings(&inputs));
        findings.extend(device::findings(&inputs));
        findings.extend(gpu::findings(&inputs));
        self.step(now_ns, findings);
    }

    /// Moves each insight along with this reading's findings (a rule that found nothing for a
    /// subject counts as clear).
    pub fn step(&mut self, now_ns: u64, findings: Vec<Finding>) {
        let open_after = (self.cfg.open_after_s * 1e9) as u64;
        let close_after = (self.cfg.close_after_s * 1e9) as u64;
        let mut seen = std::collections::BTreeSet::new();
        for f in findings {
            let key = (f.id, f.subject.key());
            seen.insert(key.clone());
            let track = self.tracks.remove(&key);
            let next = match (track, f.level) {
                (None, Level::Open) => Some(Track::Pending { since_ns: now_ns }),
                (None, _) => None,
                (Some(Track::Pending { since_ns }), Level::Open) => Some(Track::Pending { since_ns }),
                (Some(Track::Pending { .. }), _) => None,
                (Some(Track::Open { mut insight, .. }), Level::Open | Level::Hold) => {
                    insight.refresh(f.clone());
                    Some(Track::Open { insight, clear_since_ns: None })
                }
                (Some(Track::Open { insight, clear_since_ns }), Level::Clear) => {
                    Some(Track::Open { insight, clear_since_ns: Some(clear_since_ns.unwrap_or(now_ns)) })
                }
            };
            let next = match next {
                Some(Track::Pending { since_ns }) if now_ns.saturating_sub(since_ns) >= open_after => {
                    self.opened_total += 1;
                    Some(Track::Open { insight: Insight::from(f, since_ns, now_ns), clear_since_ns: None })
                }
                other => other,
            };
            if let Some(t) = next {
                self.tracks.insert(key, t);
            }
        }
        // Subjects no rule spoke of this time (a process gone, a job ended) are clear.
        let keys: Vec<_> = self.tracks.keys().filter(|k| !seen.contains(*k)).cloned().collect();
        for k in keys {
            match self.tracks.remove(&k) {
                Some(Track::Open { insight, clear_since_ns }) => {
                    let since = clear_since_ns.unwrap_or(now_ns);
                    self.tracks.insert(k, Track::Open { insight, clear_since_ns: Some(since) });
                }
                Some(Track::Pending { .. }) | None => {}
            }
        }
        let closing: Vec<_> = self
            .tracks
            .iter()
            .filter(|(_, t)| {
                matches!(t, Track::Open { clear_since_ns: Some(c), .. } if now_ns.saturating_sub(*c) >= close_after)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in closing {
            if let Some(Track::Open { mut insight, .. }) = self.tracks.remove(&k) {
                insight.closed_ns = Some(now_ns);
                self.closed_total += 1;
                if self.closed.len() == CLOSED_HISTORY {
                    self.closed.pop_front();
                }
                self.closed.push_back(insight);
            }
        }
    }

    /// The open insights, most severe first, then by id and subject.
    pub fn open(&self) -> Vec<&Insight> {
        let mut v: Vec<&Insight> = self
            .tracks
            .values()
            .filter_map(|t| match t {
                Track::Open { insight, .. } => Some(insight),
                Track::Pending { .. } => None,
            })
            .collect();
        v.sort_by(|a, b| b.severity.cmp(&a.severity).then(a.id.cmp(&b.id)).then(a.subject.cmp(&b.subject)));
        v
    }

    /// An engine showing `open` and `closed` insights as they stood (`top --replay` of a
    /// recording): nothing pending, the counts as recorded.
    pub fn restore(
        cfg: InsightConfig,
        open: Vec<Insight>,
        closed: Vec<Insight>,
        opened_total: u64,
        closed_total: u64,
    ) -> Self {
        let tracks = open
            .into_iter()
            .map(|i| ((i.id, i.subject.key()), Track::Open { insight: i, clear_since_ns: None }))
            .collect();
        let skip = closed.len().saturating_sub(CLOSED_HISTORY);
        InsightEngine {
            cfg,
            tracks,
            closed: closed.into_iter().skip(skip).collect(),
            window: Window::default(),
            opened_total,
            closed_total,
        }
    }

    /// Open insights counted by id and severity (the exported gauge).
    pub fn open_counts(&self) -> BTreeMap<(InsightId, Severity), u64> {
        let mut m = BTreeMap::new();
        for i in self.open() {
            *m.entry((i.id, i.severity)).or_default() += 1;
        }
        m
    }
}

/// Bytes in words for summaries (MiB with one decimal; GiB above 10 GiB).
pub fn bytes_text(b: f64) -> String {
    let mib = b / (1u64 << 20) as f64;
    if mib >= 10240.0 {
        format!("{:.1} GiB", mib / 1024.0)
    } else {
        format!("{mib:.1} MiB")
    }
}

#[cfg(test)]
mod tests;
