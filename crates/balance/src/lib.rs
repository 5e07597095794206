//! switchyard-balance: choosing a server for a request. Pure and sans-io.
//!
//! A [`Balancer`] owns the per-method state for one pool and answers [`Balancer::pick`]
//! by asking the engine about each server through [`ServerState`]. It does no I/O, reads
//! no clock and draws randomness only from a PRNG seeded by the caller, so every pick
//! sequence can be replayed in a test.
//!
//! Servers are split into two tiers, primaries and backups, each with its own copy of the
//! method's state (its own rotation, its own Maglev table). Invariants, for every method:
//!
//! - a server is *eligible* when its weight is above 0 and the engine reports it available;
//!   only eligible servers are ever returned;
//! - a backup is returned only when no primary is eligible;
//! - `None` means no server of either tier is eligible;
//! - no input panics: empty pools, all-zero weights and out-of-range indices are handled.
//!
//! One file per method: `round_robin` (smooth weighted round robin),
//! `least_conn`, `random_two` (power of two choices), `hash` (weighted rendezvous hashing,
//! used by both `SourceHash` and `Hash`), `maglev`, `first`.
//!
//! Persistence building blocks live beside the methods: [`stick`] (stick tables mapping a
//! request key to a server name, bounded and idle-expiring) and [`cookie`] (opaque,
//! tamper-evident tokens for inserted persistence cookies).

pub mod cookie;
mod first;
mod hash;
mod least_conn;
mod maglev;
mod random_two;
mod rng;
mod round_robin;
mod slow_start;
pub mod stick;

pub use cookie::CookieKey;
pub use hash::hash_bytes;
pub use slow_start::{ramp_permille, FULL_RAMP};
pub use stick::{SharedStickTable, StickEntry, StickTable};

use least_conn::LeastConnections;
use maglev::Maglev;
use random_two::RandomTwo;
use round_robin::SmoothRoundRobin;

/// A balancing method.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    /// Smooth weighted round robin (nginx's algorithm): an even interleaving in which
    /// every server gets exactly `weight` picks per `sum(weights)` picks.
    RoundRobin,
    /// The server with the fewest requests in flight relative to its weight,
    /// i.e. the least `(active + 1) / weight`; ties rotate.
    LeastConnections,
    /// Power of two choices: two distinct weight-proportional random candidates, the one
    /// with the lower `active / weight` wins.
    RandomTwo,
    /// Weighted rendezvous hashing on the client address key.
    SourceHash,
    /// Weighted rendezvous hashing on a request key (URI, header, cookie...).
    Hash,
    /// Google's Maglev consistent hashing: O(1) lookups in a prebuilt table.
    Maglev,
    /// The lowest-index eligible server: fill servers in order.
    First,
}

impl Method {
    /// Whether the method maps a request key onto servers (and falls back to round robin
    /// when the request has no key).
    pub fn uses_key(self) -> bool {
        matches!(self, Method::SourceHash | Method::Hash | Method::Maglev)
    }
}

/// Static facts about one server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerSpec {
    /// Relative share of requests; 0 means the server is never chosen.
    pub weight: u32,
    /// A backup only takes requests when no primary server is eligible.
    pub backup: bool,
}

/// What the balancer asks about servers at pick time (implemented by the engine).
pub trait ServerState {
    /// Whether server i may take a new request now (up and under its connection limit).
    fn is_available(&self, i: usize) -> bool;
    /// Requests currently in flight towards server i.
    fn active(&self, i: usize) -> u32;
    /// Server i's slow start: the share of its weight it gets now, in
    /// thousandths (1..=[`FULL_RAMP`]). Honoured by round robin, least
    /// connections and power of two choices; the hash methods and `first`
    /// ignore it (a ramp would move keys back and forth).
    fn ramp(&self, _i: usize) -> u32 {
        FULL_RAMP
    }
}

/// Chooses servers of one pool with one [`Method`].
pub struct Balancer {
    method: Method,
    len: usize,
    primary: Tier,
    backup: Tier,
}

impl std::fmt::Debug for Balancer {
    // Hand-written so that a Maglev table (thousands of slots) stays out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Balancer")
            .field("method", &self.method)
            .field("primaries", &self.primary.members)
            .field("backups", &self.backup.members)
            .finish_non_exhaustive()
    }
}

impl Balancer {
    /// Builds a balancer for `servers` (indices into this slice are the server ids used by
    /// [`ServerState`] and returned by [`pick`](Self::pick)). `seed` feeds the PRNG of
    /// `RandomTwo`; hash methods ignore it, so that every instance maps a key alike.
    pub fn new(method: Method, servers: &[ServerSpec], seed: u64) -> Balancer {
        let split = |backup: bool| -> (Vec<usize>, Vec<u32>) {
            servers.iter().enumerate().filter(|(_, s)| s.backup == backup).map(|(i, s)| (i, s.weight)).unzip()
        };
        let (members, weights) = split(false);
        let primary = Tier::new(method, members, weights, seed);
        let (members, weights) = split(true);
        // A different stream for backups, so the two tiers do not draw in lockstep.
        let backup = Tier::new(method, members, weights, seed ^ 0x6261_636b_7570_7321);
        Balancer { method, len: servers.len(), primary, backup }
    }

    /// Chooses a server index. `key` is the request's hash key (client address / URI /
    /// header hash) for hash methods; ignored by others (hash methods with key None behave
    /// like round robin). Primary (non-backup) servers only; backups only when no primary
    /// is available. None when nothing is available.
    pub fn pick(&mut self, key: Option<u64>, state: &impl ServerState) -> Option<usize> {
        self.primary.pick(key, state).or_else(|| self.backup.pick(key, state))
    }

    /// Changes a server's weight (admin API, slow start later). 0 = never chosen.
    /// An index out of range is ignored.
    pub fn set_weight(&mut self, i: usize, weight: u32) {
        for tier in [&mut self.primary, &mut self.backup] {
            if let Ok(pos) = tier.members.binary_search(&i) {
                tier.set_weight(pos, weight);
                return;
            }
        }
    }

    /// The method this balancer was built with.
    pub fn method(&self) -> Method {
        self.method
    }

    /// Number of servers, primaries and backups together.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the pool has no servers at all.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The primaries or the backups of a pool, with that tier's method state.
struct Tier {
    /// Server ids, ascending; a server's position in this list indexes `weights` and
    /// every per-server vector of the method state.
    members: Vec<usize>,
    weights: Vec<u32>,
    /// Per position, the slow start share read at the last pick (scratch).
    ramps: Vec<u32>,
    algo: Algo,
}

enum Algo {
    RoundRobin(SmoothRoundRobin),
    LeastConnections(LeastConnections),
    RandomTwo(RandomTwo),
    /// Rendezvous hashing is stateless; the rotation serves keyless requests.
    Rendezvous(SmoothRoundRobin),
    /// Boxed: the table is large and rebuilt in place.
    Maglev(Box<Maglev>, SmoothRoundRobin),
    First,
}

impl Tier {
    fn new(method: Method, members: Vec<usize>, weights: Vec<u32>, seed: u64) -> Tier {
        let n = members.len();
        let algo = match method {
            Method::RoundRobin => Algo::RoundRobin(SmoothRoundRobin::new(n)),
            Method::LeastConnections => Algo::LeastConnections(LeastConnections::new()),
            Method::RandomTwo => Algo::RandomTwo(RandomTwo::new(seed)),
            Method::SourceHash | Method::Hash => Algo::Rendezvous(SmoothRoundRobin::new(n)),
            Method::Maglev => Algo::Maglev(Box::new(Maglev::new(n)), SmoothRoundRobin::new(n)),
            Method::First => Algo::First,
        };
        Tier { members, weights, ramps: Vec::new(), algo }
    }

    fn pick<S: ServerState>(&mut self, key: Option<u64>, state: &S) -> Option<usize> {
        // Only the methods that honour slow start read it; weights scale by the
        // ramp only while some server ramps, so picks are unchanged otherwise.
        let ramping = matches!(self.algo, Algo::RoundRobin(_) | Algo::LeastConnections(_) | Algo::RandomTwo(_)) && {
            self.ramps.clear();
            self.ramps.extend(self.members.iter().map(|&i| state.ramp(i).clamp(1, FULL_RAMP)));
            self.ramps.iter().any(|&r| r < FULL_RAMP)
        };
        let ramps = if ramping { Some(self.ramps.as_slice()) } else { None };
        let view = TierView { members: &self.members, weights: &self.weights, ramps, state };
        let pos = match (&mut self.algo, key) {
            (Algo::RoundRobin(rr), _) => rr.pick(&view),
            (Algo::LeastConnections(lc), _) => lc.pick(&view),
            (Algo::RandomTwo(r2), _) => r2.pick(&view),
            (Algo::Rendezvous(_), Some(key)) => hash::rendezvous(key, &view),
            (Algo::Maglev(table, _), Some(key)) => table.pick(key, &view),
            (Algo::Rendezvous(rr) | Algo::Maglev(_, rr), None) => rr.pick(&view),
            (Algo::First, _) => first::pick(&view),
        }?;
        self.members.get(pos).copied()
    }

    fn set_weight(&mut self, pos: usize, weight: u32) {
        if let Some(w) = self.weights.get_mut(pos) {
            *w = weight;
        }
        if let Algo::Maglev(table, _) = &mut self.algo {
            table.invalidate();
        }
    }
}

/// What a method sees of one tier at pick time: servers by position within the tier.
pub(crate) struct TierView<'a, S> {
    members: &'a [usize],
    weights: &'a [u32],
    /// Slow start shares per position, when some server ramps.
    ramps: Option<&'a [u32]>,
    state: &'a S,
}

impl<S: ServerState> TierView<'_, S> {
    /// Number of servers in the tier, eligible or not.
    pub(crate) fn len(&self) -> usize {
        self.members.len().min(self.weights.len())
    }

    /// The configured weight of the server at `pos`.
    pub(crate) fn weight(&self, pos: usize) -> u32 {
        self.weights.get(pos).copied().unwrap_or(0)
    }

    /// The weight under slow start: the weight times the ramp share in
    /// thousandths while some server ramps, the plain weight otherwise (both
    /// scales give the same proportions).
    pub(crate) fn ramped(&self, pos: usize) -> u64 {
        let weight = u64::from(self.weight(pos));
        match self.ramps {
            None => weight,
            Some(ramps) => weight * u64::from(ramps.get(pos).copied().unwrap_or(FULL_RAMP)),
        }
    }

    /// The weight under slow start in thousandths of a weight, ramping or
    /// not: one scale for methods that keep scores from pick to pick (smooth
    /// round robin), which [`ramped`](Self::ramped)'s change of scale when a
    /// ramp ends would skew for as many picks as the scores had grown.
    pub(crate) fn ramped_permille(&self, pos: usize) -> u64 {
        let share = self.ramps.and_then(|r| r.get(pos).copied()).unwrap_or(FULL_RAMP);
        u64::from(self.weight(pos)) * u64::from(share)
    }

    /// The pool-wide server id of the server at `pos`.
    pub(crate) fn server(&self, pos: usize) -> usize {
        self.members.get(pos).copied().unwrap_or(usize::MAX)
    }

    /// Weight above 0 and available: the only servers a method may return.
    pub(crate) fn is_eligible(&self, pos: usize) -> bool {
        pos < self.len() && self.weight(pos) > 0 && self.state.is_available(self.members[pos])
    }

    /// Requests in flight towards the server at `pos`.
    pub(crate) fn active(&self, pos: usize) -> u32 {
        match self.members.get(pos) {
            Some(&i) => self.state.active(i),
            None => u32::MAX,
        }
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! A fake engine for the per-method unit tests.
    use super::{ServerState, TierView};

    /// Availability and in-flight counts set by the test.
    pub(crate) struct FakeState {
        pub(crate) available: Vec<bool>,
        pub(crate) active: Vec<u32>,
    }

    impl FakeState {
        /// `n` servers, all available and idle.
        pub(crate) fn up(n: usize) -> FakeState {
            FakeState { available: vec![true; n], active: vec![0; n] }
        }
    }

    impl ServerState for FakeState {
        fn is_available(&self, i: usize) -> bool {
            self.available.get(i).copied().unwrap_or(false)
        }
        fn active(&self, i: usize) -> u32 {
            self.active.get(i).copied().unwrap_or(0)
        }
    }

    /// A tier whose positions equal the server ids 0..weights.len().
    pub(crate) fn view<'a>(members: &'a [usize], weights: &'a [u32], state: &'a FakeState) -> TierView<'a, FakeState> {
        TierView { members, weights, ramps: None, state }
    }

    /// Like [`view`], with slow start shares.
    pub(crate) fn ramped_view<'a>(
        members: &'a [usize],
        weights: &'a [u32],
        ramps: &'a [u32],
        state: &'a FakeState,
    ) -> TierView<'a, FakeState> {
        TierView { members, weights, ramps: Some(ramps), state }
    }

    /// Server ids 0..n.
    pub(crate) fn ids(n: usize) -> Vec<usize> {
        (0..n).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::testing::FakeState;
    use super::*;

    fn specs(list: &[(u32, bool)]) -> Vec<ServerSpec> {
        list.iter().map(|&(weight, backup)| ServerSpec { weight, backup }).collect()
    }

    const ALL: [Method; 7] = [
        Method::RoundRobin,
        Method::LeastConnections,
        Method::RandomTwo,
        Method::SourceHash,
        Method::Hash,
        Method::Maglev,
        Method::First,
    ];

    #[test]
    fn backups_only_when_every_primary_is_unavailable() {
        let servers = specs(&[(1, false), (1, true), (1, false), (1, true)]);
        for method in ALL {
            let mut b = Balancer::new(method, &servers, 7);
            let mut state = FakeState::up(4);
            for k in 0..50 {
                let got = b.pick(Some(k), &state);
                assert!(matches!(got, Some(0 | 2)), "{method:?} picked {got:?}");
            }
            state.available[0] = false;
            for k in 0..50 {
                assert_eq!(b.pick(Some(k), &state), Some(2), "{method:?}");
            }
            state.available[2] = false;
            let mut seen = [false; 4];
            for k in 0..200 {
                let got = b.pick(Some(k), &state);
                assert!(matches!(got, Some(1 | 3)), "{method:?} picked {got:?}");
                seen[got.unwrap_or(0)] = true;
            }
            if method != Method::First {
                assert!(seen[1] && seen[3], "{method:?} used only one backup");
            }
            state.available[1] = false;
            state.available[3] = false;
            assert_eq!(b.pick(Some(1), &state), None, "{method:?}");
            state.available[2] = true;
            assert_eq!(b.pick(Some(1), &state), Some(2), "{method:?}");
        }
    }

    #[test]
    fn zero_weight_primaries_count_as_unavailable() {
        let servers = specs(&[(0, false), (1, true)]);
        for method in ALL {
            let mut b = Balancer::new(method, &servers, 1);
            assert_eq!(b.pick(Some(3), &FakeState::up(2)), Some(1), "{method:?}");
            assert_eq!(b.pick(None, &FakeState::up(2)), Some(1), "{method:?}");
        }
    }

    #[test]
    fn degenerate_pools_give_none_without_panicking() {
        for method in ALL {
            let mut empty = Balancer::new(method, &[], 0);
            assert!(empty.is_empty());
            assert_eq!(empty.len(), 0);
            assert_eq!(empty.pick(Some(1), &FakeState::up(0)), None);
            assert_eq!(empty.pick(None, &FakeState::up(0)), None);
            empty.set_weight(0, 5);
            empty.set_weight(usize::MAX, 5);

            let mut zeros = Balancer::new(method, &specs(&[(0, false), (0, true)]), 0);
            assert_eq!(zeros.len(), 2);
            assert_eq!(zeros.pick(Some(1), &FakeState::up(2)), None);
            assert_eq!(zeros.pick(None, &FakeState::up(2)), None);
        }
    }

    #[test]
    fn set_weight_takes_effect_and_ignores_bad_indices() {
        for method in ALL {
            let mut b = Balancer::new(method, &specs(&[(1, false), (1, false)]), 3);
            let state = FakeState::up(2);
            b.set_weight(0, 0);
            b.set_weight(2, 9);
            b.set_weight(usize::MAX, 9);
            for k in 0..40 {
                assert_eq!(b.pick(Some(k), &state), Some(1), "{method:?}");
            }
            b.set_weight(0, 1);
            b.set_weight(1, 0);
            for k in 0..40 {
                assert_eq!(b.pick(Some(k), &state), Some(0), "{method:?}");
            }
        }
    }

    #[test]
    fn keyless_requests_rotate_for_hash_methods() {
        for method in [Method::SourceHash, Method::Hash, Method::Maglev] {
            let mut b = Balancer::new(method, &specs(&[(1, false); 3]), 0);
            let picks: Vec<_> = (0..6).map(|_| b.pick(None, &FakeState::up(3))).collect();
            let want = [0, 1, 2, 0, 1, 2].map(Some);
            assert_eq!(picks, want, "{method:?}");
        }
    }

    #[test]
    fn hash_methods_ignore_the_seed() {
        let servers = specs(&[(3, false), (1, false), (2, false), (5, false)]);
        let state = FakeState::up(4);
        for method in [Method::SourceHash, Method::Hash, Method::Maglev] {
            let mut a = Balancer::new(method, &servers, 1);
            let mut b = Balancer::new(method, &servers, 99);
            for k in 0..500u64 {
                let key = Some(k.wrapping_mul(0x9e37_79b9_7f4a_7c15));
                assert_eq!(a.pick(key, &state), b.pick(key, &state), "{method:?}");
            }
        }
    }
}
