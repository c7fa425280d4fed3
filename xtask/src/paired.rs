//! Paired changes: a figure measured without and with something, pair after pair (each pair run
//! close together, so the machine's drift falls on both sides of it). Each pair's change is
//! `with / without - 1`; what is reported is their median, a bootstrap 95% interval of that
//! median (resampling the pairs) and how many pairs went each way, not one median of each side.
//! The same method as `tests/device/abba_blocks.py` uses for step times on the GPU machine.

use crate::bench::median;

/// Resamples drawn for the interval.
const RESAMPLES: usize = 10_000;

/// The pairs' changes summarised, in percent.
#[derive(Clone, Debug, PartialEq)]
pub struct Paired {
    pub pairs: usize,
    pub median_pct: f64,
    /// The bootstrap 95% interval of the median change.
    pub low_pct: f64,
    pub high_pct: f64,
    /// Pairs where the figure was higher with, and lower with (equal: neither).
    pub higher: usize,
    pub lower: usize,
}

impl Paired {
    /// `+3.1% (95% interval +1.0 .. +5.2%, 10 pairs: 8 higher, 2 lower)`.
    pub fn describe(&self) -> String {
        format!(
            "{:+.1}% (95% interval {:+.1} .. {:+.1}%, {} pairs: {} higher, {} lower)",
            self.median_pct, self.low_pct, self.high_pct, self.pairs, self.higher, self.lower
        )
    }
}

/// The changes of the pairs `(without[i], with[i])`; a pair with a missing or non-positive
/// baseline, or a figure that is not finite, is left out. `None` when no pair is left.
pub fn paired(without: &[f64], with: &[f64]) -> Option<Paired> {
    let changes: Vec<f64> = without
        .iter()
        .zip(with)
        .filter(|(a, b)| a.is_finite() && b.is_finite() && **a > 0.0)
        .map(|(a, b)| (b / a - 1.0) * 100.0)
        .collect();
    if changes.is_empty() {
        return None;
    }
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut medians: Vec<f64> = (0..RESAMPLES)
        .map(|_| {
            let draw: Vec<f64> = (0..changes.len()).map(|_| changes[rng.below(changes.len())]).collect();
            median(&draw)
        })
        .collect();
    medians.sort_by(f64::total_cmp);
    let at = |q: f64| medians[((medians.len() - 1) as f64 * q).round() as usize];
    Some(Paired {
        pairs: changes.len(),
        median_pct: median(&changes),
        low_pct: at(0.025),
        high_pct: at(0.975),
        higher: changes.iter().filter(|c| **c > 0.0).count(),
        lower: changes.iter().filter(|c| **c < 0.0).count(),
    })
}

/// A fixed-seed generator: the same pairs give the same interval, run after run.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_pair_is_compared_with_its_own_baseline() {
        // The baseline drifts from 100 to 200; each "with" is 5% over its own pair's.
        let without = [100.0, 120.0, 150.0, 180.0, 200.0, 110.0, 130.0, 170.0, 190.0, 140.0];
        let with: Vec<f64> = without.iter().map(|a| a * 1.05).collect();
        let p = paired(&without, &with).expect("pairs");
        assert_eq!((p.pairs, p.higher, p.lower), (10, 10, 0));
        assert!((p.median_pct - 5.0).abs() < 1e-9, "{p:?}");
        assert!((p.low_pct - 5.0).abs() < 1e-9 && (p.high_pct - 5.0).abs() < 1e-9, "no spread: {p:?}");
        // Medians of each side would say +4.1% here (their medians fall on different pairs).
        assert_eq!(p.describe(), "+5.0% (95% interval +5.0 .. +5.0%, 10 pairs: 10 higher, 0 lower)");
    }

    #[test]
    fn the_interval_holds_the_median_and_widens_with_the_spread() {
        let without = [100.0; 12];
        let tight: Vec<f64> = (0..12).map(|i| 103.0 + (i % 3) as f64 * 0.5).collect();
        let loose: Vec<f64> =
            (0..12).map(|i| 103.0 + (i % 3) as f64 * 0.5 + if i % 2 == 0 { 12.0 } else { -12.0 }).collect();
        let (t, l) = (paired(&without, &tight).expect("tight"), paired(&without, &loose).expect("loose"));
        for p in [&t, &l] {
            assert!(p.low_pct <= p.median_pct && p.median_pct <= p.high_pct, "{p:?}");
        }
        assert!(t.high_pct - t.low_pct <= 1.0 + 1e-9, "{t:?}");
        assert!(l.high_pct - l.low_pct > 5.0, "{l:?}");
        assert_eq!((l.higher, l.lower), (6, 6));
        assert_eq!(paired(&without, &tight), Some(t), "the same pairs, the same interval");
    }

    #[test]
    fn broken_pairs_are_left_out() {
        assert_eq!(paired(&[], &[]), None);
        assert_eq!(paired(&[f64::NAN, 0.0], &[1.0, 1.0]), None);
        let p = paired(&[100.0, f64::NAN, 100.0, 100.0], &[90.0, 50.0, 100.0]).expect("two pairs");
        assert_eq!((p.pairs, p.higher, p.lower), (2, 0, 1));
        assert!((p.median_pct + 5.0).abs() < 1e-9, "{p:?}");
    }
}
