//! Allocation churn: a process allocates and frees pages fast while its resident size stays
//! flat (per-step temporaries freed back to the kernel and faulted in again).
use super::{bytes_text, Finding, Inputs, InsightId, Level, Severity, Subject};
use crate::model::site;

/// Top CXL allocation sites listed with the finding.
const TOP_SITES: usize = 3;

pub fn findings(i: &Inputs<'_>) -> Vec<Finding> {
    let cfg = i.cfg;
    i.tracked()
        .filter_map(|p| {
            let d = i.window.process(p.tgid)?;
            // The window must cover the hold time's worth of readings to judge flatness.
            let change = d.resident_change?;
            if d.alloc_dt_s <= 0.0 {
                return None;
            }
            let pages_per_s = d.alloc_pages as f64 / d.alloc_dt_s;
            let growth_pct = if d.alloc_pages > 0 { change.unsigned_abs() as f64 * 100.0 / d.alloc_pages as f64 } else { 100.0 };
            let level = Level::of(pages_per_s, cfg.churn_min_pages_per_s, cfg.hold_ratio)
                .min(Level::below(growth_pct, cfg.churn_max_growth_pct, cfg.hold_ratio));
            let resident = p.rss_pages.or_else(|| p.residency.as_ref().map(|(r, _)| r.total_pages())).unwrap_or(0);
            let details = p
                .cxl_site_estimates(|n| i.slow(n))
                .iter()
                .take(TOP_SITES)
                .map(|e| {
                    let frames =
                        p.site_frames.get(&e.site).map(|f| site::frames_text(f, 4)).unwrap_or_else(|| "(not named yet)".into());
                    format!("{} pages from {frames}", e.pages)
                })
                .collect();
            let faults_per_s = d.faults as f64 / d.dt_s;
            Some(Finding {
                id: InsightId::AllocationChurn,
                severity: Severity::Warning,
                subject: Subject::Process { pid: p.tgid, comm: p.comm.clone() },
                level,
                summary: format!(
                    "{:.0} pages/s allocated ({:.0} faults/s) while its resident size moved {} over {:.0} s",
                    pages_per_s,
                    faults_per_s,
                    bytes_text((change * i.page_size as i64) as f64),
                    d.dt_s
                ),
                evidence: [
                    ("alloc_pages_per_s", pages_per_s),
                    ("faults_per_s", faults_per_s),
                    ("resident_bytes", (resident * i.page_size) as f64),
                    ("resident_change_bytes", (change * i.page_size as i64) as f64),
                    ("resident_change_pct_of_allocated", growth_pct),
                    ("window_s", d.dt_s),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
                details,
                try_this: "reuse buffers across steps instead of allocating per step (allocate once outside the loop, \
                           preallocate pinned staging buffers); keep freed memory in the allocator instead of giving it \
                           back: glibc `MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=1073741824` (or \
                           `MALLOC_TOP_PAD_`), raise the caching allocator's limits"
                    .into(),
            })
        })
        .collect()
}
