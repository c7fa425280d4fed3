//! Statistics over repeated measurements: the median is the figure reported, the spread says
//! how far the repeats disagree (a busy machine shows here first).
use serde::Serialize;

/// Repeated measurements of one quantity.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Repeats {
    /// Median of the samples: the reported figure.
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// (max - min) / median, in percent: how much the repeats disagree.
    pub spread_pct: f64,
    /// The samples in the order taken.
    pub samples: Vec<f64>,
}

impl Repeats {
    /// Summarises the finite samples; `None` when there is none.
    pub fn of(samples: &[f64]) -> Option<Repeats> {
        let kept: Vec<f64> = samples.iter().copied().filter(|v| v.is_finite()).collect();
        let median = median(&kept)?;
        let min = kept.iter().copied().fold(f64::INFINITY, f64::min);
        let max = kept.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let spread_pct = if median > 0.0 { (max - min) / median * 100.0 } else { 0.0 };
        Some(Repeats { median, min, max, spread_pct, samples: kept })
    }
}

/// The median (mean of the middle two for an even count); `None` for no finite value.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

/// Relative difference of `b` from `a` in percent (`None` when `a` is not positive).
pub fn relative_diff_pct(a: f64, b: f64) -> Option<f64> {
    (a > 0.0 && a.is_finite() && b.is_finite()).then(|| (b - a).abs() / a * 100.0)
}

/// Nanoseconds per dependent load: elapsed time over the loads done.
pub fn ns_per_load(elapsed_ns: u64, loads: u64) -> Option<f64> {
    (loads > 0).then(|| elapsed_ns as f64 / loads as f64)
}

/// Read bandwidth in GB/s (10^9 bytes per second).
pub fn gb_per_s(bytes: u64, elapsed_ns: u64) -> Option<f64> {
    (elapsed_ns > 0).then(|| bytes as f64 / elapsed_ns as f64)
}

/// Whether listing `ids` by `measured` (ascending) gives the same order as by `expected`
/// (ascending), over the ids with an expected value. Ties in `expected` accept either order.
/// `None` when fewer than two ids have an expected value.
pub fn same_rank(ids: &[(u32, f64, Option<f64>)]) -> Option<bool> {
    let ids: Vec<&(u32, f64, Option<f64>)> = ids.iter().filter(|(_, _, e)| e.is_some()).collect();
    if ids.len() < 2 {
        return None;
    }
    let mut ok = true;
    for (i, a) in ids.iter().enumerate() {
        for b in ids.iter().skip(i + 1) {
            let (ea, eb) = (a.2.unwrap_or(0.0), b.2.unwrap_or(0.0));
            if ea == eb {
                continue;
            }
            // The one HMAT calls slower must measure slower.
            if (ea < eb) != (a.1 < b.1) {
                ok = false;
            }
        }
    }
    Some(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_odd_input() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[f64::NAN, 5.0, f64::INFINITY]), Some(5.0));
        assert_eq!(median(&[f64::NAN]), None);
    }

    #[test]
    fn repeats_give_spread_around_the_median() {
        let r = Repeats::of(&[100.0, 90.0, 110.0, 101.0, 99.0]).unwrap();
        assert_eq!(r.median, 100.0);
        assert_eq!(r.min, 90.0);
        assert_eq!(r.max, 110.0);
        assert!((r.spread_pct - 20.0).abs() < 1e-9, "{r:?}");
        assert_eq!(r.samples.len(), 5);
        // One outlier moves the spread, not the median.
        let r = Repeats::of(&[100.0, 100.0, 400.0]).unwrap();
        assert_eq!(r.median, 100.0);
        assert!((r.spread_pct - 300.0).abs() < 1e-9);
        assert!(Repeats::of(&[f64::NAN]).is_none());
        assert_eq!(Repeats::of(&[0.0, 0.0]).unwrap().spread_pct, 0.0);
    }

    #[test]
    fn units() {
        assert_eq!(ns_per_load(1_000_000, 10_000), Some(100.0));
        assert_eq!(ns_per_load(5, 0), None);
        // 1 GiB in 0.1 s is 10.74 GB/s.
        let g = gb_per_s(1 << 30, 100_000_000).unwrap();
        assert!((g - 10.737).abs() < 0.01, "{g}");
        assert_eq!(gb_per_s(1, 0), None);
        assert_eq!(relative_diff_pct(100.0, 108.0), Some(8.0));
        assert_eq!(relative_diff_pct(0.0, 1.0), None);
    }

    #[test]
    fn rank_follows_expected_order() {
        // (node, measured latency, HMAT latency)
        assert_eq!(same_rank(&[(0, 90.0, Some(100.0)), (1, 250.0, Some(300.0))]), Some(true));
        assert_eq!(same_rank(&[(0, 260.0, Some(100.0)), (1, 250.0, Some(300.0))]), Some(false));
        assert_eq!(same_rank(&[(0, 90.0, Some(100.0)), (1, 250.0, None)]), None);
        assert_eq!(same_rank(&[(0, 90.0, Some(100.0)), (1, 250.0, None), (2, 80.0, Some(300.0))]), Some(false));
        assert_eq!(same_rank(&[(0, 90.0, Some(100.0))]), None);
        // Equal HMAT figures: any measured order is fine.
        assert_eq!(same_rank(&[(0, 91.0, Some(100.0)), (1, 90.0, Some(100.0)), (2, 300.0, Some(500.0))]), Some(true));
    }
}
