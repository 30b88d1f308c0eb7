//! Latency histograms (HdrHistogram, nanoseconds) and the fairness index.

use std::time::Duration;

use hdrhistogram::Histogram;

/// One latency distribution, recorded in nanoseconds with three significant digits.
pub(crate) struct Latency {
    hist: Histogram<u64>,
}

impl Latency {
    pub(crate) fn new() -> Self {
        // 1 ns .. 1 h at three significant digits: every latency this bench can see.
        let hist = Histogram::new_with_bounds(1, 3_600_000_000_000, 3)
            .expect("static histogram bounds are valid");
        Self { hist }
    }

    pub(crate) fn record(&mut self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1);
        self.hist.saturating_record(ns);
    }

    pub(crate) fn add(&mut self, other: &Latency) {
        // Same bounds on both sides: adding cannot fail.
        let _ = self.hist.add(&other.hist);
    }

    pub(crate) fn count(&self) -> u64 {
        self.hist.len()
    }

    /// The `q`-quantile (0..=1) in milliseconds; NaN when nothing was recorded.
    pub(crate) fn ms(&self, q: f64) -> f64 {
        if self.hist.is_empty() {
            return f64::NAN;
        }
        self.hist.value_at_quantile(q) as f64 / 1e6
    }

    pub(crate) fn max_ms(&self) -> f64 {
        if self.hist.is_empty() {
            return f64::NAN;
        }
        self.hist.max() as f64 / 1e6
    }
}

/// Jain's fairness index of per-contender grant counts: 1 when all are equal, `1/n` when one
/// contender got everything.
pub(crate) fn jain(counts: &[u64]) -> f64 {
    let n = counts.len() as f64;
    let sum: f64 = counts.iter().map(|&c| c as f64).sum();
    let squares: f64 = counts.iter().map(|&c| (c as f64) * (c as f64)).sum();
    if squares == 0.0 {
        return f64::NAN;
    }
    sum * sum / (n * squares)
}

/// Resident memory of this process in KiB (`VmRSS` from `/proc/self/status`).
pub(crate) fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_bounds() {
        assert!((jain(&[5, 5, 5, 5]) - 1.0).abs() < 1e-9);
        assert!((jain(&[8, 0, 0, 0]) - 0.25).abs() < 1e-9);
    }

    #[test]
    fn percentiles_in_ms() {
        let mut l = Latency::new();
        for i in 1..=100u64 {
            l.record(Duration::from_micros(i * 10));
        }
        assert!((l.ms(0.5) - 0.5).abs() < 0.01, "{}", l.ms(0.5));
        assert_eq!(l.count(), 100);
        assert!(rss_kib().is_some());
    }
}
