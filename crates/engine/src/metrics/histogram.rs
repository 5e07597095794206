//! Latency histograms with fixed log-linear buckets, written per worker and
//! summed on read.
//!
//! Values are microseconds. Each power of two is split into eight equal
//! sub-buckets (the HdrHistogram layout with three sub-bucket bits), so a
//! bucket is at most 1/8 of its lower bound wide from 8 µs up: a percentile
//! interpolated inside its bucket is off by less than that width (12.5 %), and
//! typically by a few percent; finding a bucket is a leading-zero count and two
//! shifts — no search, no floating point on the hot path. Values below 8 µs get one bucket per
//! microsecond; values from 2^26 µs (≈ 67 s) up share one overflow bucket.
//!
//! Invariant: a [`HistogramSnapshot`]'s `count` is the sum of its buckets, so
//! the `+Inf` bucket of an exposition always equals the count, even when the
//! snapshot was read while workers were recording.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::ser::{SerializeSeq, SerializeStruct};
use serde::{Serialize, Serializer};

use super::bump;

/// Sub-bucket bits: 2^3 = 8 linear sub-buckets per power of two.
const SUB_BITS: u32 = 3;
/// Sub-buckets per power of two.
const SUB: usize = 1 << SUB_BITS;
/// Values from this many microseconds up land in the overflow bucket (2^26 µs ≈ 67 s).
pub const OVERFLOW_US: u64 = 1 << 26;
/// Number of buckets, the overflow bucket included (the last).
pub const BUCKETS: usize = finite_index(OVERFLOW_US - 1) + 2;

/// The bucket a value (µs) falls into.
#[inline]
pub const fn index_of(us: u64) -> usize {
    if us >= OVERFLOW_US {
        return BUCKETS - 1;
    }
    finite_index(us)
}

/// The bucket of a value below [`OVERFLOW_US`].
const fn finite_index(us: u64) -> usize {
    if us < SUB as u64 {
        return us as usize;
    }
    let msb = 63 - us.leading_zeros();
    let shift = msb - SUB_BITS;
    // (us >> shift) is in [SUB, 2 * SUB): the sub-bucket plus SUB, which makes
    // the index contiguous with the linear range below.
    shift as usize * SUB + (us >> shift) as usize
}

/// Inclusive lower bound of a bucket, in µs.
pub const fn lower_bound(index: usize) -> u64 {
    if index < SUB {
        return index as u64;
    }
    if index >= BUCKETS - 1 {
        return OVERFLOW_US;
    }
    let shift = index / SUB - 1;
    ((index - shift * SUB) as u64) << shift
}

/// Exclusive upper bound of a bucket, in µs; `None` for the overflow bucket.
pub const fn upper_bound(index: usize) -> Option<u64> {
    if index >= BUCKETS - 1 {
        return None;
    }
    if index < SUB {
        return Some(index as u64 + 1);
    }
    let shift = index / SUB - 1;
    Some(((index - shift * SUB) as u64 + 1) << shift)
}

/// One worker's buckets and sum (written by that worker only).
#[derive(Debug)]
pub(crate) struct HistogramSlot {
    buckets: [AtomicU64; BUCKETS],
    sum_us: AtomicU64,
}

impl HistogramSlot {
    pub(crate) fn new() -> Self {
        HistogramSlot { buckets: std::array::from_fn(|_| AtomicU64::new(0)), sum_us: AtomicU64::new(0) }
    }

    /// Records one value. Single writer per slot (see [`super::bump`]).
    #[inline]
    pub(crate) fn record(&self, us: u64) {
        bump(&self.buckets[index_of(us)], 1);
        bump(&self.sum_us, us);
    }

    /// Adds this slot into `into`.
    pub(crate) fn add_to(&self, into: &mut HistogramSnapshot) {
        for (total, b) in into.buckets.iter_mut().zip(&self.buckets) {
            *total += b.load(Relaxed);
        }
        into.sum_us += self.sum_us.load(Relaxed);
    }
}

/// A histogram read at one moment: bucket counts, their sum and total.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// Count per bucket ([`BUCKETS`] entries; bounds from [`lower_bound`] / [`upper_bound`]).
    pub buckets: Vec<u64>,
    /// Number of values: always the sum of `buckets`.
    pub count: u64,
    /// Sum of the values, in µs.
    pub sum_us: u64,
}

impl Default for HistogramSnapshot {
    fn default() -> Self {
        HistogramSnapshot { buckets: vec![0; BUCKETS], count: 0, sum_us: 0 }
    }
}

impl HistogramSnapshot {
    /// Sums slots into one snapshot.
    pub(crate) fn sum_of<'a>(slots: impl Iterator<Item = &'a HistogramSlot>) -> Self {
        let mut s = HistogramSnapshot::default();
        for slot in slots {
            slot.add_to(&mut s);
        }
        s.count = s.buckets.iter().sum();
        s
    }

    /// What was recorded between `earlier` and `self` (both of the same
    /// histogram): for percentiles over a recent window.
    pub fn since(&self, earlier: &HistogramSnapshot) -> HistogramSnapshot {
        let buckets: Vec<u64> = self
            .buckets
            .iter()
            .zip(earlier.buckets.iter().chain(std::iter::repeat(&0)))
            .map(|(a, b)| a.saturating_sub(*b))
            .collect();
        let count = buckets.iter().sum();
        HistogramSnapshot { buckets, count, sum_us: self.sum_us.saturating_sub(earlier.sum_us) }
    }

    /// The `q` quantile (0.0 ..= 1.0) in µs, or `None` when empty.
    pub fn percentile(&self, q: f64) -> Option<u64> {
        percentile(&self.buckets, q)
    }

    /// Mean in µs, or `None` when empty.
    pub fn mean(&self) -> Option<u64> {
        self.sum_us.checked_div(self.count)
    }
}

/// The `q` quantile (0.0 ..= 1.0, clamped) of bucket counts laid out as
/// [`BUCKETS`] (possibly differenced with [`HistogramSnapshot::since`]), in µs,
/// interpolated linearly inside the bucket that holds it; `None` when every
/// count is zero. A quantile in the overflow bucket reads as its lower bound.
pub fn percentile(buckets: &[u64], q: f64) -> Option<u64> {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return None;
    }
    let q = if q.is_nan() { 0.5 } else { q.clamp(0.0, 1.0) };
    // The rank of the wanted value, 1-based: at least the first value.
    let rank = (q * total as f64).ceil().max(1.0);
    let mut below = 0u64;
    for (i, &n) in buckets.iter().enumerate() {
        if n == 0 {
            continue;
        }
        if (below + n) as f64 >= rank {
            let lower = lower_bound(i);
            let Some(upper) = upper_bound(i) else { return Some(lower) };
            // Values are spread evenly over the bucket: the k-th of n sits at
            // (k - 0.5) / n of its width (rounded down: values are whole µs,
            // so a 1 µs bucket reads as its lower bound).
            let frac = ((rank - below as f64) - 0.5) / n as f64;
            return Some(lower + (frac * (upper - lower) as f64) as u64);
        }
        below += n;
    }
    Some(lower_bound(buckets.len().saturating_sub(1)))
}

/// Serialized compactly: count, sum, mean and p50/p90/p99, and only the
/// non-empty buckets as `[upper_us, count]` pairs (`upper_us` null for overflow).
impl Serialize for HistogramSnapshot {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("HistogramSnapshot", 7)?;
        st.serialize_field("count", &self.count)?;
        st.serialize_field("sum_us", &self.sum_us)?;
        st.serialize_field("mean_us", &self.mean())?;
        st.serialize_field("p50_us", &self.percentile(0.5))?;
        st.serialize_field("p90_us", &self.percentile(0.9))?;
        st.serialize_field("p99_us", &self.percentile(0.99))?;
        st.serialize_field("buckets", &NonEmpty(&self.buckets))?;
        st.end()
    }
}

struct NonEmpty<'a>(&'a [u64]);

impl Serialize for NonEmpty<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(None)?;
        for (i, &n) in self.0.iter().enumerate().filter(|(_, n)| **n > 0) {
            seq.serialize_element(&(upper_bound(i), n))?;
        }
        seq.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_log_linear() {
        assert_eq!(BUCKETS, 193);
        assert_eq!(lower_bound(0), 0);
        for i in 0..BUCKETS - 1 {
            let (lo, hi) = (lower_bound(i), upper_bound(i).expect("finite"));
            assert!(hi > lo, "bucket {i}");
            assert_eq!(lower_bound(i + 1), hi, "bucket {i} ends where {} starts", i + 1);
            assert_eq!(index_of(lo), i);
            assert_eq!(index_of(hi - 1), i);
            // From 8 µs up a bucket is at most 1/8 of its lower bound wide.
            if lo >= 8 {
                assert!((hi - lo) * 8 <= lo, "bucket {i}: {lo}..{hi}");
            }
        }
        assert_eq!(upper_bound(BUCKETS - 2), Some(OVERFLOW_US));
        assert_eq!(upper_bound(BUCKETS - 1), None);
        assert_eq!(index_of(OVERFLOW_US), BUCKETS - 1);
        assert_eq!(index_of(u64::MAX), BUCKETS - 1);
        // 10 µs and 60 s are both inside the finite range.
        assert!(index_of(10) < index_of(60_000_000) && index_of(60_000_000) < BUCKETS - 1);
    }

    fn snapshot_of(values: impl Iterator<Item = u64>) -> HistogramSnapshot {
        let slot = HistogramSlot::new();
        for v in values {
            slot.record(v);
        }
        HistogramSnapshot::sum_of(std::iter::once(&slot))
    }

    fn within(got: Option<u64>, want: f64, tolerance: f64) -> bool {
        got.is_some_and(|g| (g as f64 - want).abs() <= want * tolerance)
    }

    #[test]
    fn percentiles_of_uniform_and_skewed_data_are_within_ten_percent() {
        let h = snapshot_of(1..=100_000);
        assert_eq!(h.count, 100_000);
        assert_eq!(h.sum_us, 100_000 * 100_001 / 2);
        for (q, want) in [(0.5, 50_000.0), (0.9, 90_000.0), (0.99, 99_000.0)] {
            assert!(within(h.percentile(q), want, 0.05), "q {q}: {:?}", h.percentile(q));
        }
        // The worst case: the data ends early in a bucket that interpolation
        // assumes full. Still within the bucket width (1/8).
        assert!(within(h.percentile(0.999), 99_900.0, 0.125), "{:?}", h.percentile(0.999));
        // Log-uniform from 10 µs to 60 s: each percentile is exp(q · range).
        let (lo, hi) = (10f64.ln(), 60e6f64.ln());
        let values = (0..20_000).map(|k| (lo + (hi - lo) * (k as f64 + 0.5) / 20_000.0).exp() as u64);
        let h = snapshot_of(values);
        for q in [0.5, 0.9, 0.99] {
            let want = (lo + (hi - lo) * q).exp();
            assert!(within(h.percentile(q), want, 0.10), "q {q}: {:?} vs {want}", h.percentile(q));
        }
        // All values equal: any percentile lies in that value's bucket.
        let h = snapshot_of(std::iter::repeat_n(1234, 50));
        let b = index_of(1234);
        for q in [0.0, 0.5, 1.0] {
            let p = h.percentile(q).expect("non-empty");
            assert!(p >= lower_bound(b) && p < upper_bound(b).expect("finite"), "{p}");
        }
    }

    #[test]
    fn percentile_edges() {
        assert_eq!(percentile(&[0; BUCKETS], 0.5), None);
        let h = snapshot_of([3, 5, 7].into_iter());
        assert_eq!(h.percentile(0.0), Some(3));
        assert_eq!(h.percentile(1.0), Some(7));
        assert_eq!(h.percentile(f64::NAN), Some(5));
        assert_eq!(h.percentile(7.0), Some(7), "clamped to 1.0");
        let over = snapshot_of([OVERFLOW_US * 3].into_iter());
        assert_eq!(over.percentile(0.99), Some(OVERFLOW_US));
        assert_eq!(over.mean(), Some(OVERFLOW_US * 3));
    }

    #[test]
    fn differenced_snapshots_give_the_window() {
        let slot = HistogramSlot::new();
        for _ in 0..1000 {
            slot.record(100);
        }
        let before = HistogramSnapshot::sum_of(std::iter::once(&slot));
        for _ in 0..1000 {
            slot.record(10_000);
        }
        let after = HistogramSnapshot::sum_of(std::iter::once(&slot));
        let window = after.since(&before);
        assert_eq!(window.count, 1000);
        assert_eq!(window.sum_us, 10_000_000);
        assert!(within(window.percentile(0.5), 10_000.0, 0.07));
        assert!(within(after.percentile(0.25), 100.0, 0.07), "whole history still holds the early values");
    }

    #[test]
    fn serializes_non_empty_buckets_only() {
        let h = snapshot_of([10, 10, 90_000_000].into_iter());
        let v = serde_json::to_value(&h).expect("serializes");
        assert_eq!(v["count"], 3);
        assert_eq!(v["buckets"], serde_json::json!([[11, 2], [null, 1]]));
        assert_eq!(v["p50_us"], 10);
        let empty = serde_json::to_value(HistogramSnapshot::default()).expect("serializes");
        assert_eq!(empty["p99_us"], serde_json::Value::Null);
    }
}
