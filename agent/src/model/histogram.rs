//! Log2 histograms of nanoseconds and their percentiles.
use serde::Serialize;

/// Counts per log2 bucket: bucket i holds values in [2^i, 2^(i+1)) ns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Log2Histogram {
    pub buckets: Vec<u64>,
}

/// What a histogram says, for reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LatencySummary {
    pub count: u64,
    /// Upper bounds of the buckets holding the percentile (ns): exact to a factor of two.
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

impl Log2Histogram {
    pub fn from_buckets(b: &[u64]) -> Self {
        Log2Histogram { buckets: b.to_vec() }
    }

    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    pub fn add(&mut self, other: &Log2Histogram) {
        if self.buckets.len() < other.buckets.len() {
            self.buckets.resize(other.buckets.len(), 0);
        }
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            *a += b;
        }
    }

    /// The upper bound (2^(i+1) - 1 ns) of the bucket where the `q` quantile falls.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        let total = self.count();
        if total == 0 {
            return 0;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, &c) in self.buckets.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return upper(i);
            }
        }
        upper(self.buckets.len().saturating_sub(1))
    }

    pub fn summary(&self) -> LatencySummary {
        let max_i = self.buckets.iter().rposition(|&c| c > 0);
        LatencySummary {
            count: self.count(),
            p50_ns: self.quantile_ns(0.5),
            p99_ns: self.quantile_ns(0.99),
            max_ns: max_i.map_or(0, upper),
        }
    }
}

fn upper(i: usize) -> u64 {
    if i >= 63 {
        u64::MAX
    } else {
        (2u64 << i) - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_pick_bucket_upper_bounds() {
        let mut b = vec![0u64; 64];
        b[10] = 98; // 1024..2047 ns
        b[20] = 2; // ~1 ms
        let h = Log2Histogram::from_buckets(&b);
        assert_eq!(h.quantile_ns(0.5), 2047);
        assert_eq!(h.quantile_ns(0.98), 2047);
        assert_eq!(h.quantile_ns(0.99), (2 << 20) - 1);
        let s = h.summary();
        assert_eq!((s.count, s.max_ns), (100, (2 << 20) - 1));
        assert_eq!(Log2Histogram::default().summary(), LatencySummary::default());
    }
}
