//! One dashboard sample: what changed between two consecutive [`StatsView`]
//! snapshots, as per-second rates and interval latency percentiles.
//!
//! The counters in a snapshot are totals since start; the dashboard wants
//! "now", so everything here is a difference of two snapshots divided by the
//! time between them. Latency percentiles come from the difference of the
//! histogram buckets, so they describe the last interval only. A counter that
//! went backwards (a service replaced by a reload) counts as zero, never as a
//! huge wrapped value.
//!
//! JSON shape (compact, one per `stats` event):
//! `{"t": unix_ms, "interval_s": f,
//!   "total": {"rps", "in", "out", "conns", "p50", "p90", "p99"},
//!   "services": [{"name", …same fields}],
//!   "pools": [{"name", "servers": [{"name", "state", "weight", "active", "rps"}]}],
//!   "caches": [{"name", "hit_ratio", "hit_ratio_total", "served", "served_total",
//!               "bytes", "size", "keys"}]}`
//! with bytes per second in `in`/`out`/`served` and percentiles in milliseconds
//! (`null` when the interval saw no request). A cache's `hit_ratio` is the
//! share of the interval's lookups answered from the store without waiting
//! for a server (`null` without lookups); `hit_ratio_total` the same since start.

use std::collections::HashMap;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::backend::{CacheView, HistogramView, ServiceView, StatsView};

/// A stats snapshot and when it was taken.
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    /// Monotonic time of the snapshot, for rates.
    pub at: Instant,
    /// Wall-clock time, for the chart's axis.
    pub unix_ms: u64,
    /// The counters.
    pub stats: StatsView,
}

impl Snapshot {
    /// A snapshot taken now.
    pub fn now(stats: StatsView) -> Self {
        let unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Snapshot { at: Instant::now(), unix_ms, stats }
    }
}

/// What the dashboard plots for one interval.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Sample {
    t: u64,
    interval_s: f64,
    total: Rates,
    services: Vec<ServiceRates>,
    pools: Vec<PoolSample>,
    caches: Vec<CacheSample>,
}

/// One service's cache over the interval.
#[derive(Debug, Clone, Serialize)]
struct CacheSample {
    name: String,
    hit_ratio: Option<f64>,
    hit_ratio_total: Option<f64>,
    /// Body bytes per second sent from the store.
    served: f64,
    served_total: u64,
    bytes: u64,
    size: u64,
    keys: u64,
}

/// Rates of one service, or of all of them.
#[derive(Debug, Clone, Default, Serialize)]
struct Rates {
    rps: f64,
    #[serde(rename = "in")]
    bytes_in: f64,
    #[serde(rename = "out")]
    bytes_out: f64,
    conns: u64,
    p50: Option<f64>,
    p90: Option<f64>,
    p99: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
struct ServiceRates {
    name: String,
    #[serde(flatten)]
    rates: Rates,
}

#[derive(Debug, Clone, Serialize)]
struct PoolSample {
    name: String,
    servers: Vec<ServerSample>,
}

#[derive(Debug, Clone, Serialize)]
struct ServerSample {
    name: String,
    state: String,
    weight: u32,
    active: u64,
    rps: f64,
}

impl Sample {
    /// The sample for the interval from `before` to `after`.
    pub fn between(before: &Snapshot, after: &Snapshot) -> Sample {
        let seconds = after.at.saturating_duration_since(before.at).as_secs_f64();
        let per_second = |delta: u64| if seconds > 0.0 { delta as f64 / seconds } else { 0.0 };
        let previous: HashMap<&str, &ServiceView> =
            before.stats.services.iter().map(|s| (s.name.as_str(), s)).collect();

        let mut total = Rates::default();
        let mut total_buckets: Option<(Vec<u64>, Vec<u64>)> = None;
        let mut services = Vec::with_capacity(after.stats.services.len());
        for now in &after.stats.services {
            let then = previous.get(now.name.as_str()).copied();
            let delta = |f: fn(&ServiceView) -> u64| then.map_or(0, |t| f(now).saturating_sub(f(t)));
            let buckets = then.and_then(|t| bucket_delta(&t.latency, &now.latency));
            let rates = Rates {
                rps: per_second(delta(|s| s.requests)),
                bytes_in: per_second(delta(|s| s.bytes_in)),
                bytes_out: per_second(delta(|s| s.bytes_out)),
                conns: now.connections_current,
                ..Rates::default()
            }
            .with_percentiles(&now.latency.bounds_us, buckets.as_deref());
            total.rps += rates.rps;
            total.bytes_in += rates.bytes_in;
            total.bytes_out += rates.bytes_out;
            total.conns += rates.conns;
            if let Some(delta) = buckets {
                merge_buckets(&mut total_buckets, &now.latency.bounds_us, &delta);
            }
            services.push(ServiceRates { name: now.name.clone(), rates });
        }
        if let Some((bounds, counts)) = &total_buckets {
            total = total.with_percentiles(bounds, Some(counts));
        }
        Sample {
            t: after.unix_ms,
            interval_s: seconds,
            total,
            services,
            pools: pool_samples(before, after, seconds),
            caches: cache_samples(before, after, seconds),
        }
    }
}

impl Rates {
    fn with_percentiles(mut self, bounds_us: &[u64], counts: Option<&[u64]>) -> Self {
        let ms = |q| counts.and_then(|c| percentile(bounds_us, c, q)).map(|us| us / 1000.0);
        self.p50 = ms(0.50);
        self.p90 = ms(0.90);
        self.p99 = ms(0.99);
        self
    }
}

/// Per-server state and request rate of every pool in `after`.
fn pool_samples(before: &Snapshot, after: &Snapshot, seconds: f64) -> Vec<PoolSample> {
    let previous: HashMap<(&str, &str), u64> = before
        .stats
        .pools
        .iter()
        .flat_map(|p| p.servers.iter().map(move |s| ((p.name.as_str(), s.name.as_str()), s.requests)))
        .collect();
    after
        .stats
        .pools
        .iter()
        .map(|pool| PoolSample {
            name: pool.name.clone(),
            servers: pool
                .servers
                .iter()
                .map(|s| {
                    let delta = previous
                        .get(&(pool.name.as_str(), s.name.as_str()))
                        .map_or(0, |&r| s.requests.saturating_sub(r));
                    ServerSample {
                        name: s.name.clone(),
                        state: s.state.clone(),
                        weight: s.weight,
                        active: s.active,
                        rps: if seconds > 0.0 { delta as f64 / seconds } else { 0.0 },
                    }
                })
                .collect(),
        })
        .collect()
}

/// Every cache's hit ratio and served bytes over the interval.
fn cache_samples(before: &Snapshot, after: &Snapshot, seconds: f64) -> Vec<CacheSample> {
    let previous: HashMap<&str, &CacheView> = before.stats.caches.iter().map(|c| (c.service.as_str(), c)).collect();
    after
        .stats
        .caches
        .iter()
        .map(|now| {
            let then = previous.get(now.service.as_str()).copied();
            let delta = |f: fn(&CacheView) -> u64| then.map_or(0, |t| f(now).saturating_sub(f(t)));
            let interval = CacheView {
                hits: delta(|c| c.hits),
                stale: delta(|c| c.stale),
                misses: delta(|c| c.misses),
                revalidated: delta(|c| c.revalidated),
                ..CacheView::default()
            };
            let served = delta(|c| c.served_bytes);
            CacheSample {
                name: now.service.clone(),
                hit_ratio: interval.hit_ratio(),
                hit_ratio_total: now.hit_ratio(),
                served: if seconds > 0.0 { served as f64 / seconds } else { 0.0 },
                served_total: now.served_bytes,
                bytes: now.bytes,
                size: now.size,
                keys: now.keys,
            }
        })
        .collect()
}

/// Per-bucket observations between two snapshots of one histogram; `None`
/// when the bucket layout changed (nothing comparable).
fn bucket_delta(before: &HistogramView, after: &HistogramView) -> Option<Vec<u64>> {
    if before.bounds_us != after.bounds_us || before.counts.len() != after.counts.len() {
        return None;
    }
    Some(after.counts.iter().zip(&before.counts).map(|(a, b)| a.saturating_sub(*b)).collect())
}

/// Adds `delta` into the running total, if its layout matches the first one seen.
fn merge_buckets(total: &mut Option<(Vec<u64>, Vec<u64>)>, bounds: &[u64], delta: &[u64]) {
    match total {
        None => *total = Some((bounds.to_vec(), delta.to_vec())),
        Some((b, counts)) if b == bounds && counts.len() == delta.len() => {
            counts.iter_mut().zip(delta).for_each(|(c, d)| *c += d);
        }
        Some(_) => {} // A different layout cannot be merged; the total leaves it out.
    }
}

/// The `q`-quantile (`0.0..=1.0`) of a bucketed histogram, in the unit of
/// `bounds`; `None` when it holds no observation.
///
/// `bounds` are inclusive upper bounds and `counts` has one more entry, the
/// overflow bucket. The result is interpolated linearly inside the bucket
/// holding the rank (the first bucket starts at 0). A rank in the overflow
/// bucket reports the last bound: all the histogram knows is "above it".
pub fn percentile(bounds: &[u64], counts: &[u64], q: f64) -> Option<f64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    // 1-based rank of the observation the quantile names.
    let rank = (q.clamp(0.0, 1.0) * total as f64).ceil().max(1.0);
    let mut below = 0u64;
    for (i, &count) in counts.iter().enumerate() {
        if count > 0 && (below + count) as f64 >= rank {
            let lower = if i == 0 { 0 } else { bounds.get(i - 1).or(bounds.last()).copied().unwrap_or(0) };
            let Some(&upper) = bounds.get(i) else {
                return Some(lower as f64);
            };
            let fraction = (rank - below as f64) / count as f64;
            return Some(lower as f64 + upper.saturating_sub(lower) as f64 * fraction);
        }
        below += count;
    }
    bounds.last().map(|&b| b as f64)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::backend::{PoolView, ServerView};

    #[test]
    fn percentile_of_an_empty_histogram_is_none() {
        assert_eq!(percentile(&[10, 20], &[0, 0, 0], 0.5), None);
        assert_eq!(percentile(&[], &[], 0.5), None);
    }

    #[test]
    fn percentile_interpolates_inside_the_bucket() {
        // 10 observations in (0, 100], 10 in (100, 200].
        let bounds = [100, 200, 400];
        let counts = [10, 10, 0, 0];
        assert_eq!(percentile(&bounds, &counts, 0.5), Some(100.0));
        assert_eq!(percentile(&bounds, &counts, 0.25), Some(50.0));
        assert_eq!(percentile(&bounds, &counts, 0.75), Some(150.0));
        assert_eq!(percentile(&bounds, &counts, 1.0), Some(200.0));
        // q = 0 names the first observation, not "nothing".
        assert_eq!(percentile(&bounds, &counts, 0.0), Some(10.0));
    }

    #[test]
    fn percentile_skips_empty_buckets_and_reports_overflow_as_last_bound() {
        let bounds = [100, 200, 400];
        assert_eq!(percentile(&bounds, &[0, 0, 4, 0], 0.5), Some(300.0));
        assert_eq!(percentile(&bounds, &[99, 0, 0, 1], 0.99), Some(100.0));
        assert_eq!(percentile(&bounds, &[98, 0, 0, 2], 0.99), Some(400.0));
        assert_eq!(percentile(&bounds, &[0, 0, 0, 5], 0.5), Some(400.0));
    }

    #[test]
    fn percentile_is_monotonic_in_q() {
        let bounds = [1, 2, 5, 10, 20, 50, 100];
        let counts = [3, 0, 7, 1, 0, 9, 2, 4];
        let mut last = 0.0;
        for step in 0..=100 {
            let p = percentile(&bounds, &counts, f64::from(step) / 100.0).expect("non-empty");
            assert!(p >= last, "q={step}%: {p} < {last}");
            last = p;
        }
    }

    fn service(name: &str, requests: u64, bytes: u64, counts: Vec<u64>) -> ServiceView {
        ServiceView {
            name: name.into(),
            requests,
            bytes_in: bytes,
            bytes_out: bytes * 10,
            connections_current: 3,
            latency: HistogramView { bounds_us: vec![1000, 2000], count: counts.iter().sum(), counts, sum_us: 0 },
            ..ServiceView::default()
        }
    }

    fn snapshot(at: Instant, services: Vec<ServiceView>, server_requests: u64) -> Snapshot {
        let server = ServerView {
            pool: "p".into(),
            name: "s".into(),
            state: "up".into(),
            requests: server_requests,
            ..ServerView::default()
        };
        let pools = vec![PoolView { name: "p".into(), servers: vec![server], ..PoolView::default() }];
        Snapshot { at, unix_ms: 7, stats: StatsView { services, pools, caches: Vec::new() } }
    }

    #[test]
    fn sample_divides_differences_by_the_interval() {
        let t0 = Instant::now();
        let before = snapshot(t0, vec![service("a", 100, 1000, vec![5, 5, 0]), service("b", 0, 0, vec![0, 0, 0])], 40);
        let after = snapshot(
            t0 + Duration::from_secs(2),
            vec![
                service("a", 300, 3000, vec![105, 5, 0]),
                service("b", 20, 0, vec![0, 20, 0]),
                service("new", 50, 0, vec![9, 9, 9]),
            ],
            140,
        );
        let json = serde_json::to_value(Sample::between(&before, &after)).expect("encode");
        assert_eq!(json["t"], 7);
        assert_eq!(json["services"][0]["rps"], 100.0);
        assert_eq!(json["services"][0]["in"], 1000.0);
        assert_eq!(json["services"][0]["out"], 10000.0);
        assert_eq!(json["services"][0]["p50"], 0.5); // 100 new observations, all in (0, 1 ms]
        assert_eq!(json["services"][1]["p50"], 1.5);
        // A service absent from the first snapshot has no interval yet.
        assert_eq!(json["services"][2]["rps"], 0.0);
        assert!(json["services"][2]["p50"].is_null());
        assert_eq!(json["total"]["rps"], 110.0);
        assert_eq!(json["total"]["conns"], 9);
        // Merged interval buckets: 100 in (0, 1 ms], 20 in (1, 2 ms]; rank 60 of 120.
        assert_eq!(json["total"]["p50"], 0.6);
        assert_eq!(json["pools"][0]["servers"][0]["rps"], 50.0);
        assert_eq!(json["pools"][0]["servers"][0]["state"], "up");
    }

    #[test]
    fn cache_hit_ratio_and_served_bytes_of_the_interval() {
        let t0 = Instant::now();
        let cache = |hits, stale, misses, revalidated, served_bytes| CacheView {
            service: "web".into(),
            hits,
            stale,
            misses,
            revalidated,
            served_bytes,
            ..CacheView::default()
        };
        let mut before = snapshot(t0, Vec::new(), 0);
        before.stats.caches = vec![cache(10, 0, 10, 0, 1000)];
        let mut after = snapshot(t0 + Duration::from_secs(2), Vec::new(), 0);
        after.stats.caches = vec![cache(16, 2, 11, 1, 5000)];
        let json = serde_json::to_value(Sample::between(&before, &after)).expect("encode");
        let c = &json["caches"][0];
        assert_eq!(c["name"], "web");
        assert_eq!(c["hit_ratio"], 0.8, "8 of 10 lookups in the interval");
        assert_eq!(c["hit_ratio_total"], 18.0 / 30.0);
        assert_eq!(c["served"], 2000.0);
        assert_eq!(c["served_total"], 5000);
        // No lookup in an interval: no ratio, rather than 0 %.
        let json = serde_json::to_value(Sample::between(&after, &after)).expect("encode");
        assert!(json["caches"][0]["hit_ratio"].is_null());
    }

    #[test]
    fn counters_that_went_backwards_count_as_zero() {
        let t0 = Instant::now();
        let before = snapshot(t0, vec![service("a", 500, 500, vec![50, 0, 0])], 500);
        let after = snapshot(t0 + Duration::from_secs(1), vec![service("a", 10, 10, vec![1, 0, 0])], 10);
        let json = serde_json::to_value(Sample::between(&before, &after)).expect("encode");
        assert_eq!(json["total"]["rps"], 0.0);
        assert!(json["total"]["p50"].is_null());
        assert_eq!(json["pools"][0]["servers"][0]["rps"], 0.0);
    }
}
