//! Open-loop scheduling maths, kept pure so it can be tested without a clock.
//!
//! An open-loop run offers a fixed request rate. The rate is split over the generator's
//! threads in proportion to their connections ([`share_rate`]); each thread sends request
//! `k` at the *intended* time `start + phase + k / rate` ([`Schedule::intended`]), on
//! whichever of its connections is free. When none is free the request waits, and its
//! latency is still measured from its intended time ([`corrected_latency`]): a server
//! that stalls is charged for every request it delayed, not only the one it was serving
//! (the coordinated-omission correction of wrk2). A request is never skipped.

use std::time::Duration;

/// Splits `total` into `parts` near-equal shares, the first ones taking the remainder.
/// `parts == 0` yields nothing.
pub fn split(total: usize, parts: usize) -> Vec<usize> {
    if parts == 0 {
        return Vec::new();
    }
    (0..parts).map(|i| total / parts + usize::from(i < total % parts)).collect()
}

/// The rate (per second) a thread with `conns` of the run's `total_conns` connections
/// offers, out of the run's `rate`.
pub fn share_rate(rate: f64, conns: usize, total_conns: usize) -> f64 {
    if total_conns == 0 {
        return 0.0;
    }
    rate * conns as f64 / total_conns as f64
}

/// A fixed-interval schedule of intended send times, relative to the run's start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    /// Nanoseconds between two requests.
    interval_ns: f64,
    /// Nanoseconds before the first request (spreads threads over one interval).
    offset_ns: f64,
}

impl Schedule {
    /// A schedule of `rate` requests per second (clamped to at least one per hour), the
    /// first sent `phase` (0..1) of an interval after the start.
    pub fn new(rate: f64, phase: f64) -> Schedule {
        let rate = if rate.is_finite() { rate.max(1.0 / 3600.0) } else { 1.0 / 3600.0 };
        let interval_ns = 1e9 / rate;
        Schedule { interval_ns, offset_ns: interval_ns * phase.clamp(0.0, 1.0) }
    }

    /// The interval between two requests.
    pub fn interval(&self) -> Duration {
        Duration::from_nanos(self.interval_ns as u64)
    }

    /// When request `k` (from 0) is meant to be sent, after the start.
    pub fn intended(&self, k: u64) -> Duration {
        Duration::from_nanos((self.offset_ns + k as f64 * self.interval_ns) as u64)
    }

    /// How many requests are meant to be sent before `t` (after the start).
    pub fn due_before(&self, t: Duration) -> u64 {
        let t = t.as_nanos() as f64;
        if t <= self.offset_ns {
            return 0;
        }
        ((t - self.offset_ns) / self.interval_ns).ceil() as u64
    }
}

/// The latency of a request meant to be sent at `intended` that completed at `done` (both
/// after the same origin): measured from the intended time, never negative.
pub fn corrected_latency(intended: Duration, done: Duration) -> Duration {
    done.saturating_sub(intended)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// What the generator does, as a pure model: `slots` connections take the requests of
    /// `schedule` in order, each starting at its intended time or when a slot frees up,
    /// whichever is later. Returns each request's (corrected, uncorrected) latency.
    fn simulate(
        schedule: &Schedule,
        slots: usize,
        n: u64,
        service: impl Fn(u64) -> Duration,
    ) -> Vec<(Duration, Duration)> {
        let mut free = vec![Duration::ZERO; slots];
        (0..n)
            .map(|k| {
                let intended = schedule.intended(k);
                let (slot, &free_at) = free.iter().enumerate().min_by_key(|(_, t)| **t).expect("slots > 0");
                let start = intended.max(free_at);
                let done = start + service(k);
                free[slot] = done;
                (corrected_latency(intended, done), done - start)
            })
            .collect()
    }

    #[test]
    fn split_spreads_the_remainder() {
        assert_eq!(split(10, 3), vec![4, 3, 3]);
        assert_eq!(split(2, 4), vec![1, 1, 0, 0]);
        assert_eq!(split(5, 0), Vec::<usize>::new());
        assert_eq!(split(7, 7).iter().sum::<usize>(), 7);
    }

    #[test]
    fn shares_add_up_to_the_rate() {
        let conns = split(50, 3);
        let total: f64 = conns.iter().map(|&c| share_rate(1000.0, c, 50)).sum();
        assert!((total - 1000.0).abs() < 1e-9);
        assert_eq!(share_rate(1000.0, 17, 50), 340.0);
        assert_eq!(share_rate(1000.0, 1, 0), 0.0);
    }

    #[test]
    fn intended_times_are_evenly_spaced() {
        let s = Schedule::new(1000.0, 0.0);
        assert_eq!(s.interval(), MS);
        assert_eq!(s.intended(0), Duration::ZERO);
        assert_eq!(s.intended(1), MS);
        assert_eq!(s.intended(2500), 2500 * MS);
        let phased = Schedule::new(1000.0, 0.5);
        assert_eq!(phased.intended(0), Duration::from_micros(500));
        assert_eq!(phased.intended(3), Duration::from_micros(3500));
    }

    #[test]
    fn due_counts_match_rate_times_duration() {
        let s = Schedule::new(200.0, 0.0);
        assert_eq!(s.due_before(Duration::ZERO), 0);
        assert_eq!(s.due_before(Duration::from_secs(2)), 400);
        // Two threads at half the rate, half an interval apart, offer the same total.
        let (a, b) = (Schedule::new(100.0, 0.0), Schedule::new(100.0, 0.5));
        let t = Duration::from_secs(2);
        assert_eq!(a.due_before(t) + b.due_before(t), 400);
        // Consistent with `intended`: request k is due before t iff intended(k) < t.
        let s = Schedule::new(333.0, 0.25);
        for k in 0..1000 {
            assert_eq!(s.due_before(s.intended(k) + Duration::from_nanos(1)), k + 1);
        }
    }

    #[test]
    fn degenerate_rates_do_not_panic() {
        for rate in [0.0, -5.0, f64::NAN, f64::INFINITY] {
            let s = Schedule::new(rate, 0.0);
            assert!(s.interval() > Duration::ZERO);
        }
    }

    #[test]
    fn a_stall_is_charged_to_the_requests_it_delayed() {
        // 1000 req/s, one connection, 0.5 ms service time; request 0 stalls for 10 ms.
        let s = Schedule::new(1000.0, 0.0);
        let service = |k| if k == 0 { 10 * MS } else { MS / 2 };
        let lat = simulate(&s, 1, 40, service);
        assert_eq!(lat[0].0, 10 * MS);
        // Request 1 was meant for t = 1 ms but could only start at 10 ms: 9.5 ms late.
        assert_eq!(lat[1].0, Duration::from_micros(9_500));
        // The backlog drains by 0.5 ms per request; every delayed request shows it.
        for k in 1..19 {
            assert!(lat[k].0 > lat[k + 1].0, "{k}: {:?}", &lat[k..k + 2]);
            assert!(lat[k].0 > MS / 2);
            // Measured from the actual send, the stall would be invisible.
            assert_eq!(lat[k].1, MS / 2);
        }
        // Then the server keeps up again.
        assert!(lat[25..].iter().all(|l| l.0 == MS / 2));
    }

    #[test]
    fn free_connections_absorb_a_stall() {
        // Same stall with 4 connections: only the stalled request is slow.
        let s = Schedule::new(1000.0, 0.0);
        let lat = simulate(&s, 4, 40, |k| if k == 0 { 10 * MS } else { MS / 2 });
        assert_eq!(lat[0].0, 10 * MS);
        assert!(lat[1..].iter().all(|l| l.0 == MS / 2));
    }

    #[test]
    fn overload_latency_grows_without_bound() {
        // Offered 1000/s, served 500/s: corrected latency grows linearly; nothing is skipped.
        let s = Schedule::new(1000.0, 0.0);
        let lat = simulate(&s, 1, 1000, |_| 2 * MS);
        assert_eq!(lat.len(), 1000);
        assert!(lat[999].0 > 900 * MS, "{:?}", lat[999]);
        assert!(lat.windows(2).all(|w| w[1].0 >= w[0].0));
    }

    #[test]
    fn corrected_latency_never_negative() {
        assert_eq!(corrected_latency(5 * MS, 3 * MS), Duration::ZERO);
        assert_eq!(corrected_latency(3 * MS, 5 * MS), 2 * MS);
    }
}
