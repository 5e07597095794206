//! The RFC 2544-style throughput search ([`search`]): the highest offered frame rate at
//! which the target loses no frames (or at most a configured fraction).
//!
//! Pure: each trial is a caller-supplied function from an offered rate to what was sent
//! and received, so the search is unit tested against simulated targets without sockets.
//!
//! Invariants: `lo` is always the highest rate that passed (0 before any pass) and `hi`
//! the lowest rate that failed; every new rate lies strictly between them (or doubles `lo`
//! while nothing has failed). The search stops when `hi − lo ≤ resolution × hi`, when the
//! trial budget is spent, or when a loss-free trial could not be offered at the requested
//! rate (the generator, not the target, is then the limit: probing higher is pointless).

/// A trial counts as *generator-limited* when it offered less than this fraction of the
/// requested rate.
pub const GENERATOR_LIMIT: f64 = 0.95;

/// How the search runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SearchParams {
    /// First rate tried, frames per second.
    pub start: f64,
    /// Most trials run.
    pub max_trials: u32,
    /// Stop once the interval between passing and failing rates is within this fraction
    /// of the failing rate (0.05: 5 %).
    pub resolution: f64,
    /// Lost frames allowed, as a fraction of those sent (0: RFC 2544's zero loss).
    pub loss_tolerance: f64,
}

impl Default for SearchParams {
    fn default() -> Self {
        SearchParams { start: 10_000.0, max_trials: 8, resolution: 0.05, loss_tolerance: 0.0 }
    }
}

/// What one trial did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Trial {
    /// Requested rate, frames per second.
    pub offered: f64,
    /// Frames sent.
    pub sent: u64,
    /// Frames received back (after the drain period).
    pub received: u64,
    /// Seconds the sending lasted.
    pub secs: f64,
}

impl Trial {
    /// Frames lost (sent − received; echoes beyond those sent do not count).
    pub fn lost(&self) -> u64 {
        self.sent.saturating_sub(self.received)
    }

    /// The rate actually sent, frames per second.
    pub fn achieved(&self) -> f64 {
        self.sent as f64 / self.secs.max(1e-9)
    }

    /// Whether the generator fell short of the requested rate.
    pub fn generator_limited(&self) -> bool {
        self.achieved() < GENERATOR_LIMIT * self.offered
    }

    /// Whether the trial lost no more than `tolerance` of the frames sent.
    pub fn passed(&self, tolerance: f64) -> bool {
        self.sent > 0 && self.lost() as f64 <= tolerance * self.sent as f64
    }
}

/// The search's answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SearchResult {
    /// Every trial, in the order run.
    pub trials: Vec<Trial>,
    /// Index into `trials` of the highest passing trial (`None`: none passed).
    pub best: Option<usize>,
    /// The best trial was generator-limited: the target's loss-free rate is at least
    /// its achieved rate, and may be higher.
    pub generator_limited: bool,
}

impl SearchResult {
    /// The loss-free rate found (the best trial's achieved rate), 0 when none passed.
    pub fn rate(&self) -> f64 {
        self.best.and_then(|i| self.trials.get(i)).map_or(0.0, Trial::achieved)
    }
}

/// Runs the search, calling `trial` with each rate to try. Stops early on the first error.
pub fn search<E>(p: &SearchParams, mut trial: impl FnMut(f64) -> Result<Trial, E>) -> Result<SearchResult, E> {
    let mut out = SearchResult::default();
    let (mut lo, mut hi): (f64, Option<f64>) = (0.0, None);
    let mut rate = p.start.max(1.0);
    for _ in 0..p.max_trials.max(1) {
        let t = trial(rate)?;
        out.trials.push(t);
        if t.passed(p.loss_tolerance) {
            if out.best.is_none_or(|b| out.trials[b].achieved() <= t.achieved()) {
                out.best = Some(out.trials.len() - 1);
                out.generator_limited = t.generator_limited();
            }
            if t.generator_limited() {
                break; // higher rates cannot be offered
            }
            lo = rate;
        } else {
            hi = Some(hi.map_or(rate, |h: f64| h.min(rate)));
        }
        rate = match hi {
            None => lo * 2.0,
            Some(h) if h - lo <= p.resolution * h => break,
            Some(h) => (lo + h) / 2.0,
        };
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A target lossless up to `limit` fps and a generator that can send `cap` fps.
    fn sim(limit: f64, cap: f64) -> impl FnMut(f64) -> Result<Trial, ()> {
        move |rate| {
            let sent_rate = rate.min(cap);
            let sent = sent_rate as u64;
            let received = if sent_rate <= limit { sent } else { limit as u64 };
            Ok(Trial { offered: rate, sent, received, secs: 1.0 })
        }
    }

    #[test]
    fn converges_from_above_within_resolution() {
        let p = SearchParams { start: 400_000.0, max_trials: 12, ..SearchParams::default() };
        let r = search(&p, sim(123_000.0, 1e9)).expect("no error");
        let found = r.rate();
        assert!(found <= 123_000.0, "never above the real limit: {found}");
        assert!(found >= 123_000.0 * 0.95, "within 5 %: {found}");
        assert!(!r.generator_limited);
        assert!(r.trials.len() <= 12);
    }

    #[test]
    fn climbs_when_the_start_passes() {
        let p = SearchParams { start: 1_000.0, max_trials: 16, ..SearchParams::default() };
        let r = search(&p, sim(50_000.0, 1e9)).expect("no error");
        assert!(r.rate() >= 50_000.0 * 0.95 && r.rate() <= 50_000.0, "{}", r.rate());
    }

    #[test]
    fn the_trial_budget_bounds_the_search() {
        let p = SearchParams { start: 1e6, max_trials: 3, ..SearchParams::default() };
        let r = search(&p, sim(1_000.0, 1e9)).expect("no error");
        assert_eq!(r.trials.len(), 3);
        assert_eq!(r.best, None, "1e6, 5e5, 2.5e5 all lose frames");
        assert_eq!(r.rate(), 0.0);
    }

    #[test]
    fn generator_limit_is_reported_not_blamed_on_the_target() {
        let p = SearchParams { start: 100_000.0, ..SearchParams::default() };
        let r = search(&p, sim(1e9, 40_000.0)).expect("no error");
        assert!(r.generator_limited);
        assert_eq!(r.trials.len(), 1, "no point probing higher");
        assert_eq!(r.rate(), 40_000.0);
    }

    #[test]
    fn tolerance_allows_a_small_loss() {
        let lossy =
            |rate: f64| Ok::<_, ()>(Trial { offered: rate, sent: 10_000, received: 9_999, secs: 10_000.0 / rate });
        let strict = search(&SearchParams { max_trials: 4, ..SearchParams::default() }, lossy).expect("ok");
        assert_eq!(strict.best, None);
        let lax = SearchParams { loss_tolerance: 0.001, max_trials: 4, ..SearchParams::default() };
        let r = search(&lax, lossy).expect("ok");
        assert!(r.best.is_some());
    }

    #[test]
    fn errors_stop_the_search() {
        let r = search(&SearchParams::default(), |_| Err::<Trial, &str>("boom"));
        assert_eq!(r, Err("boom"));
    }
}
