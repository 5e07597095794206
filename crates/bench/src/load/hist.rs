//! Latency histograms: an HdrHistogram of microseconds (1 µs to one hour, 3 significant
//! digits) per generator thread, merged at the end into [`Percentiles`].

use hdrhistogram::Histogram;

use crate::results::Percentiles;

/// Largest latency recorded (one hour, in µs); longer ones are clamped to it.
const HIGHEST_US: u64 = 3_600_000_000;

/// A latency histogram in microseconds.
#[derive(Debug, Clone)]
pub struct Latency {
    hist: Histogram<u64>,
}

impl Default for Latency {
    fn default() -> Self {
        Latency::new()
    }
}

impl Latency {
    /// An empty histogram, 1 µs .. 1 h, 3 significant digits.
    pub fn new() -> Latency {
        // The bounds are constants known to be valid (low >= 1, high >= 2 * low, sigfig <= 5).
        let hist = Histogram::new_with_bounds(1, HIGHEST_US, 3).unwrap_or_else(|_| unreachable!("valid bounds"));
        Latency { hist }
    }

    /// Records one latency in microseconds (0 counts as 1 µs, huge values are clamped).
    pub fn record(&mut self, us: u64) {
        self.hist.saturating_record(us.clamp(1, HIGHEST_US));
    }

    /// Adds every value of `other`.
    pub fn merge(&mut self, other: &Latency) {
        // Same bounds on both sides, so adding cannot fail; saturate rather than panic anyway.
        if self.hist.add(&other.hist).is_err() {
            for v in other.hist.iter_recorded() {
                self.hist.saturating_record_n(v.value_iterated_to(), v.count_at_value());
            }
        }
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// Forgets every value (the warm-up boundary).
    pub fn reset(&mut self) {
        self.hist.reset();
    }

    /// p50, p90, p99, p99.9 and max, in microseconds; all zero when empty.
    pub fn percentiles(&self) -> Percentiles {
        if self.hist.is_empty() {
            return Percentiles::default();
        }
        let q = |q: f64| self.hist.value_at_quantile(q) as f64;
        Percentiles {
            p50_us: q(0.5),
            p90_us: q(0.9),
            p99_us: q(0.99),
            p999_us: q(0.999),
            max_us: self.hist.max() as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        // 3 significant digits: within 0.1 %.
        (a - b).abs() <= b * 0.001 + 1.0
    }

    #[test]
    fn empty_is_zero() {
        assert_eq!(Latency::new().percentiles(), Percentiles::default());
    }

    #[test]
    fn uniform_percentiles() {
        let mut h = Latency::new();
        for us in 1..=10_000 {
            h.record(us);
        }
        let p = h.percentiles();
        assert!(close(p.p50_us, 5_000.0), "{p:?}");
        assert!(close(p.p90_us, 9_000.0), "{p:?}");
        assert!(close(p.p99_us, 9_900.0), "{p:?}");
        assert!(close(p.p999_us, 9_990.0), "{p:?}");
        assert!(close(p.max_us, 10_000.0), "{p:?}");
    }

    #[test]
    fn merge_equals_recording_everything_in_one() {
        let mut a = Latency::new();
        let mut b = Latency::new();
        let mut all = Latency::new();
        for us in 0..5_000u64 {
            let v = 100 + us * 7 % 3_000;
            if us % 3 == 0 {
                a.record(v)
            } else {
                b.record(v)
            }
            all.record(v);
        }
        b.record(2_000_000);
        all.record(2_000_000);
        a.merge(&b);
        assert_eq!(a.count(), all.count());
        assert_eq!(a.percentiles(), all.percentiles());
        assert!(close(a.percentiles().max_us, 2_000_000.0));
    }

    #[test]
    fn clamps_and_resets() {
        let mut h = Latency::new();
        h.record(0);
        h.record(u64::MAX);
        assert_eq!(h.count(), 2);
        assert!(h.percentiles().max_us >= HIGHEST_US as f64 * 0.999);
        h.reset();
        assert_eq!(h.count(), 0);
    }
}
