//! Maglev consistent hashing (Eisenbud et al., NSDI 2016).
//!
//! Each eligible server owns a pseudo-random permutation of the table slots, derived
//! from its server id (`offset`, `skip` with `skip` coprime to the prime table size).
//! Servers take turns claiming their next preferred free slot until the table is full; a
//! lookup is then one hash and one index. Weights are honoured by weight-proportional
//! turns: per round every server earns `weight` credit and claims one slot per
//! `max_weight` credit, so the heaviest server claims once a round and slot counts
//! end within one slot of `size · weight / sum(weights)`.
//!
//! Invariants:
//!
//! - the table is rebuilt only when the tier's set of eligible servers changes (compared
//!   as a bitmap at pick time: one availability call per server and a few word
//!   compares, no allocation) or a weight changes ([`Maglev::invalidate`]);
//! - every slot holds an eligible server, so a lookup never returns a down server;
//! - the table depends only on server ids, weights and eligibility, never on the seed:
//!   every instance maps a key alike;
//! - the size is a prime ≥ max(5003, 100 · servers). The paper keeps the size ≥ 100× the
//!   server count to hold each server's share within about 1% of its due; the 5003 floor
//!   keeps weight ratios up to 1:50 within a few percent for small pools while a rebuild
//!   (about size · ln(size) probes) stays well under a millisecond. Fixed at
//!   construction from the tier's server count, not the eligible count, so that a
//!   server going down does not reshuffle every key.

use crate::rng::mix64;
use crate::{ServerState, TierView};

/// Marks a slot not yet claimed during a rebuild.
const EMPTY: u32 = u32::MAX;
/// Smallest table: see the module docs.
const MIN_SIZE: u64 = 5003;
/// Largest table target (4 MiB of slots): pools beyond 10 000 servers share this.
const MAX_SIZE: u64 = 1_000_000;
const OFFSET_SALT: u64 = 0x6f66_6673_6574_2121;
const SKIP_SALT: u64 = 0x736b_6970_2121_2121;

/// Per-tier Maglev lookup table and the eligibility it was built for.
#[derive(Clone)]
pub(crate) struct Maglev {
    /// Prime number of slots.
    size: u64,
    /// Tier positions; empty when no server was eligible at the last build.
    table: Vec<u32>,
    /// Eligibility bitmap (by tier position) the table was built for.
    built_for: Vec<u64>,
    /// This pick's eligibility bitmap; swapped with `built_for` on a rebuild.
    scratch: Vec<u64>,
    /// False until the first build and after a weight change.
    valid: bool,
    /// Number of rebuilds so far, for tests and diagnostics.
    builds: u64,
}

impl Maglev {
    /// An empty (not yet built) table for a tier of `n` servers.
    pub(crate) fn new(n: usize) -> Maglev {
        let target = (n as u64).saturating_mul(100).clamp(MIN_SIZE, MAX_SIZE);
        Maglev {
            size: next_prime(target),
            table: Vec::new(),
            built_for: Vec::new(),
            scratch: Vec::new(),
            valid: false,
            builds: 0,
        }
    }

    /// Forces a rebuild at the next pick (a weight changed).
    pub(crate) fn invalidate(&mut self) {
        self.valid = false;
    }

    /// The tier position owning `key`, or None when no server is eligible.
    pub(crate) fn pick<S: ServerState>(&mut self, key: u64, view: &TierView<'_, S>) -> Option<usize> {
        let n = view.len();
        self.scratch.clear();
        self.scratch.resize(n.div_ceil(64), 0);
        for pos in 0..n {
            if view.is_eligible(pos) {
                self.scratch[pos / 64] |= 1 << (pos % 64);
            }
        }
        if !self.valid || self.scratch != self.built_for {
            std::mem::swap(&mut self.scratch, &mut self.built_for);
            self.rebuild(view);
        }
        let slot = usize::try_from(mix64(key) % self.size).ok()?;
        self.table.get(slot).map(|&pos| pos as usize)
    }

    /// Fills the table from the eligibility in `built_for` and the weights in `view`.
    fn rebuild<S: ServerState>(&mut self, view: &TierView<'_, S>) {
        self.valid = true;
        self.builds += 1;
        self.table.clear();
        let m = self.size;
        let mut turns: Vec<Turn> = Vec::new();
        for pos in 0..view.len() {
            let eligible = self.built_for.get(pos / 64).is_some_and(|w| w >> (pos % 64) & 1 == 1);
            let weight = u64::from(view.weight(pos));
            let (Ok(tier_pos), true) = (u32::try_from(pos), eligible && weight > 0) else {
                continue;
            };
            let id = view.server(pos) as u64;
            turns.push(Turn {
                pos: tier_pos,
                weight,
                slot: mix64(id ^ OFFSET_SALT) % m,
                skip: mix64(id ^ SKIP_SALT) % (m - 1) + 1,
                credit: 0,
            });
        }
        let Some(max_weight) = turns.iter().map(|t| t.weight).max() else {
            return;
        };
        let Ok(size) = usize::try_from(m) else {
            return;
        };
        self.table.resize(size, EMPTY);
        let mut filled = 0;
        // Terminates: the heaviest server claims a slot every round.
        while filled < size {
            for turn in &mut turns {
                turn.credit += turn.weight;
                while turn.credit >= max_weight && filled < size {
                    turn.credit -= max_weight;
                    // A free slot exists (filled < size) and the permutation visits every
                    // slot within `size` steps (skip is coprime to the prime size).
                    while self.table[turn.slot as usize] != EMPTY {
                        turn.slot = (turn.slot + turn.skip) % m;
                    }
                    self.table[turn.slot as usize] = turn.pos;
                    filled += 1;
                }
            }
        }
    }

    /// Number of table builds so far.
    #[cfg(test)]
    pub(crate) fn builds(&self) -> u64 {
        self.builds
    }
}

/// One server's progress through its permutation while populating.
struct Turn {
    pos: u32,
    weight: u64,
    /// The next slot of its permutation to try.
    slot: u64,
    skip: u64,
    credit: u64,
}

/// The smallest prime ≥ `n` (n ≥ 2), by trial division: called once per tier.
fn next_prime(n: u64) -> u64 {
    (n.max(2)..).find(|&c| (2..).take_while(|d| d * d <= c).all(|d| c % d != 0)).unwrap_or(MIN_SIZE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{ids, view, FakeState};

    #[test]
    fn sizes_are_prime() {
        assert_eq!(next_prime(5003), 5003);
        assert_eq!(next_prime(65536), 65537);
        assert_eq!(Maglev::new(0).size, 5003);
        assert_eq!(Maglev::new(10).size, 5003);
        assert_eq!(Maglev::new(1000).size, 100_003);
        assert_eq!(Maglev::new(usize::MAX).size, 1_000_003);
    }

    #[test]
    fn slots_are_weight_proportional_and_all_eligible() {
        let members = ids(4);
        let weights = [1, 2, 0, 7];
        let mut state = FakeState::up(4);
        state.available[0] = true;
        let mut maglev = Maglev::new(4);
        assert!(maglev.pick(0, &view(&members, &weights, &state)).is_some());
        let mut counts = [0i64; 4];
        for &pos in &maglev.table {
            counts[pos as usize] += 1;
        }
        assert_eq!(counts.iter().sum::<i64>(), 5003);
        assert_eq!(counts[2], 0);
        for (pos, due) in [(0, 5003 / 10), (1, 5003 * 2 / 10), (3, 5003 * 7 / 10)] {
            assert!((counts[pos] - due).abs() <= 1, "{counts:?}");
        }
    }

    #[test]
    fn rebuilds_only_when_eligibility_or_weights_change() {
        let members = ids(3);
        let weights = [1, 1, 1];
        let mut state = FakeState::up(3);
        let mut maglev = Maglev::new(3);
        for key in 0..100 {
            maglev.pick(key, &view(&members, &weights, &state));
        }
        assert_eq!(maglev.builds(), 1);
        state.active = vec![5, 6, 7]; // load is not eligibility
        maglev.pick(1, &view(&members, &weights, &state));
        assert_eq!(maglev.builds(), 1);
        state.available[1] = false;
        for key in 0..100 {
            assert_ne!(maglev.pick(key, &view(&members, &weights, &state)), Some(1));
        }
        assert_eq!(maglev.builds(), 2);
        state.available[1] = true;
        maglev.pick(1, &view(&members, &weights, &state));
        assert_eq!(maglev.builds(), 3);
        maglev.invalidate();
        maglev.pick(1, &view(&members, &weights, &state));
        assert_eq!(maglev.builds(), 4);
    }

    #[test]
    fn nothing_eligible_gives_none_then_recovers() {
        let members = ids(2);
        let weights = [1, 1];
        let mut state = FakeState::up(2);
        state.available = vec![false, false];
        let mut maglev = Maglev::new(2);
        assert_eq!(maglev.pick(9, &view(&members, &weights, &state)), None);
        state.available[1] = true;
        assert_eq!(maglev.pick(9, &view(&members, &weights, &state)), Some(1));
        assert_eq!(maglev.pick(9, &view(&[], &[], &state)), None);
    }

    #[test]
    fn removing_a_server_moves_few_other_keys() {
        let n = 8;
        let members = ids(n);
        let weights = vec![1; n];
        let mut state = FakeState::up(n);
        let mut maglev = Maglev::new(n);
        let keys = 20_000u64;
        let before: Vec<_> = (0..keys).map(|k| maglev.pick(k, &view(&members, &weights, &state))).collect();
        state.available[3] = false;
        let moved_others = (0..keys)
            .filter(|&k| {
                let was = before[k as usize];
                was != Some(3) && maglev.pick(k, &view(&members, &weights, &state)) != was
            })
            .count();
        assert!(moved_others < (keys / 20) as usize, "{moved_others} of {keys} moved");
    }
}
