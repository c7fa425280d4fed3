//! Rank imbalance: the ranks of one job differ widely in their slow-tier share or fault rate
//! (the slowest rank sets the step time). Ranks only, each with the processes that serve it
//! (data-loader workers and other children counted with their rank).
use std::collections::BTreeMap;

use super::{Finding, Inputs, InsightId, Level, Severity, Subject};
use crate::model::{job::TrainingRole, process};

struct RankUse {
    rank: u32,
    pid: u32,
    slow_pages: u64,
    total_pages: u64,
    faults_per_s: f64,
}

impl RankUse {
    fn slow_pct(&self) -> f64 {
        if self.total_pages > 0 {
            self.slow_pages as f64 * 100.0 / self.total_pages as f64
        } else {
            0.0
        }
    }
}

pub fn findings(i: &Inputs<'_>) -> Vec<Finding> {
    let cfg = i.cfg;
    let mut jobs: BTreeMap<&str, Vec<RankUse>> = BTreeMap::new();
    for p in i.tracked().filter(|p| p.role == Some(TrainingRole::Worker)) {
        let (Some(job), Some(rank)) = (&p.job, p.rank.rank) else { continue };
        let by_node = process::rank_resident_pages(i.processes, p.tgid);
        let faults_per_s: f64 = process::rank_members(i.processes, p.tgid)
            .filter(|m| m.exited_at_ns.is_none())
            .filter_map(|m| i.window.process(m.tgid))
            .map(|d| d.faults as f64 / d.dt_s)
            .sum();
        jobs.entry(job.as_str()).or_default().push(RankUse {
            rank,
            pid: p.tgid,
            slow_pages: by_node.iter().filter(|(&n, _)| i.slow(n)).map(|(_, &v)| v).sum(),
            total_pages: by_node.values().sum(),
            faults_per_s,
        });
    }
    jobs.into_iter()
        .filter(|(_, ranks)| ranks.len() >= 2)
        .filter_map(|(job, ranks)| {
            let by_slow = |a: &&RankUse, b: &&RankUse| a.slow_pct().total_cmp(&b.slow_pct()).then(b.rank.cmp(&a.rank));
            let worst_slow = ranks.iter().max_by(by_slow)?;
            let best_slow = ranks.iter().min_by(by_slow)?;
            let spread = worst_slow.slow_pct() - best_slow.slow_pct();
            let slow_level = Level::of(spread, cfg.rank_slow_spread_pct, cfg.hold_ratio).min(Level::of(
                (worst_slow.slow_pages * i.page_size) as f64,
                cfg.rank_min_slow_bytes as f64,
                cfg.hold_ratio,
            ));
            let by_faults = |a: &&RankUse, b: &&RankUse| a.faults_per_s.total_cmp(&b.faults_per_s).then(b.rank.cmp(&a.rank));
            let busiest = ranks.iter().max_by(by_faults)?;
            let quietest = ranks.iter().min_by(by_faults)?;
            let ratio = busiest.faults_per_s / quietest.faults_per_s.max(1.0);
            let fault_level = Level::of(ratio, cfg.rank_fault_ratio, cfg.hold_ratio).min(Level::of(
                busiest.faults_per_s,
                cfg.rank_min_faults_per_s,
                cfg.hold_ratio,
            ));
            let (level, outlier) =
                if slow_level >= fault_level { (slow_level, worst_slow) } else { (fault_level, busiest) };
            let evidence: BTreeMap<String, f64> = [
                ("ranks", ranks.len() as f64),
                ("worst_rank", worst_slow.rank as f64),
                ("worst_slow_share_pct", worst_slow.slow_pct()),
                ("worst_slow_bytes", (worst_slow.slow_pages * i.page_size) as f64),
                ("best_rank", best_slow.rank as f64),
                ("best_slow_share_pct", best_slow.slow_pct()),
                ("slow_share_spread_pct", spread),
                ("busiest_rank", busiest.rank as f64),
                ("busiest_faults_per_s", busiest.faults_per_s),
                ("quietest_faults_per_s", quietest.faults_per_s),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
            let details = ranks
                .iter()
                .map(|r| format!("rank {} (pid {}): {:.0}% on the slow tier, {:.0} faults/s", r.rank, r.pid, r.slow_pct(), r.faults_per_s))
                .collect();
            Some(Finding {
                id: InsightId::RankImbalance,
                severity: Severity::Warning,
                subject: Subject::Rank { job: job.to_string(), rank: outlier.rank, pid: outlier.pid },
                level,
                summary: format!(
                    "rank {} holds {:.0}% of its memory on the slow tier against {:.0}% for rank {}; faults/s range {:.0}-{:.0}: the slowest rank sets the step time",
                    worst_slow.rank,
                    worst_slow.slow_pct(),
                    best_slow.slow_pct(),
                    best_slow.rank,
                    quietest.faults_per_s,
                    busiest.faults_per_s
                ),
                evidence,
                details,
                try_this: "give every rank the same placement: bind each local rank to its own node's DRAM \
                           (`numactl --cpunodebind=N --membind=N` per local rank, or torchrun `--local-ranks-filter`/a \
                           wrapper that does it), start ranks before other tenants fill DRAM, and move the outlier's \
                           memory with `migratepages <pid> <slow> <fast>`"
                    .into(),
            })
        })
        .collect()
}
