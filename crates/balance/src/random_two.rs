//! Power of two random choices (Mitzenmacher), weighted.
//!
//! Draws two distinct eligible candidates, each with probability proportional to its
//! weight (the second among the servers left after the first), and returns the one with
//! the lower `active / weight`; on a tie the first draw wins. Invariants:
//!
//! - with equal loads the result is distributed exactly like one weighted draw, so idle
//!   pools get weight-proportional shares; under load it avoids the worst of two, which
//!   bounds the maximum load far better than one random choice, without the herd effect
//!   of every balancer instance chasing the same least-loaded server;
//! - all randomness comes from the seeded [`Rng`]: same seed, same state → same picks;
//! - loads are compared by cross-multiplication in u128, no floats.

use crate::rng::Rng;
use crate::{ServerState, TierView};

/// Per-tier state of power of two choices.
#[derive(Clone, Debug)]
pub(crate) struct RandomTwo {
    rng: Rng,
    /// (position, weight) of the eligible servers; kept to avoid an allocation per pick.
    scratch: Vec<(usize, u64)>,
}

impl RandomTwo {
    /// State drawing from a PRNG seeded with `seed`.
    pub(crate) fn new(seed: u64) -> RandomTwo {
        RandomTwo { rng: Rng::new(seed), scratch: Vec::new() }
    }

    /// The tier position of the chosen server, or None when no server is eligible.
    pub(crate) fn pick<S: ServerState>(&mut self, view: &TierView<'_, S>) -> Option<usize> {
        // One availability snapshot per pick: the engine's state may change concurrently,
        // and both draws must agree on the candidate set.
        self.scratch.clear();
        let mut total: u64 = 0;
        for pos in 0..view.len() {
            if view.is_eligible(pos) {
                let weight = view.ramped(pos);
                total = total.saturating_add(weight);
                self.scratch.push((pos, weight));
            }
        }
        if self.scratch.len() < 2 {
            return self.scratch.first().map(|&(pos, _)| pos);
        }
        let first = weighted_draw(&self.scratch, self.rng.below(total), usize::MAX)?;
        let rest = total - self.scratch[first].1;
        let second = weighted_draw(&self.scratch, self.rng.below(rest), first)?;
        let (a, wa) = self.scratch[first];
        let (b, wb) = self.scratch[second];
        let (load_a, load_b) = (u128::from(view.active(a)), u128::from(view.active(b)));
        // active_b / wb < active_a / wa, cross-multiplied in u128 (weights under slow start exceed u32).
        Some(if load_b * u128::from(wa) < load_a * u128::from(wb) { b } else { a })
    }
}

/// The index into `candidates` where the cumulative weight (skipping index `skip`) first
/// exceeds `target`. None only if `target` is not below the total, which callers avoid.
fn weighted_draw(candidates: &[(usize, u64)], mut target: u64, skip: usize) -> Option<usize> {
    for (idx, &(_, weight)) in candidates.iter().enumerate() {
        if idx == skip {
            continue;
        }
        if target < weight {
            return Some(idx);
        }
        target -= weight;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{ids, view, FakeState};

    #[test]
    fn takes_the_less_loaded_of_two() {
        // With two servers both are always drawn, so the less loaded always wins.
        let members = ids(2);
        let weights = [1, 1];
        let mut state = FakeState::up(2);
        state.active = vec![9, 3];
        let mut r2 = RandomTwo::new(1);
        for _ in 0..100 {
            assert_eq!(r2.pick(&view(&members, &weights, &state)), Some(1));
        }
        // Relative to weight: 9/10 < 3/1.
        let weights = [10, 1];
        for _ in 0..100 {
            assert_eq!(r2.pick(&view(&members, &weights, &state)), Some(0));
        }
    }

    #[test]
    fn never_returns_the_most_loaded_of_many() {
        let members = ids(5);
        let weights = [1; 5];
        let mut state = FakeState::up(5);
        state.active = vec![1, 2, 3, 4, 100];
        let mut r2 = RandomTwo::new(5);
        let mut seen = [0u32; 5];
        for _ in 0..2000 {
            let pos = r2.pick(&view(&members, &weights, &state)).unwrap_or(4);
            seen[pos] += 1;
        }
        assert_eq!(seen[4], 0, "{seen:?}");
        // Server 0 wins whenever drawn: P = 1 - (4/5)(3/4) = 0.4.
        assert!((700..900).contains(&seen[0]), "{seen:?}");
    }

    #[test]
    fn skips_ineligible_and_handles_one_or_none() {
        let members = ids(3);
        let weights = [1, 0, 1];
        let mut state = FakeState::up(3);
        state.available[2] = false;
        let mut r2 = RandomTwo::new(9);
        for _ in 0..20 {
            assert_eq!(r2.pick(&view(&members, &weights, &state)), Some(0));
        }
        state.available[0] = false;
        assert_eq!(r2.pick(&view(&members, &weights, &state)), None);
    }

    #[test]
    fn same_seed_same_picks_other_seed_differs() {
        let members = ids(6);
        let weights = [3, 1, 4, 1, 5, 9];
        let state = FakeState::up(6);
        let run = |seed| {
            let mut r2 = RandomTwo::new(seed);
            (0..64).map(|_| r2.pick(&view(&members, &weights, &state))).collect::<Vec<_>>()
        };
        assert_eq!(run(11), run(11));
        assert_ne!(run(11), run(12));
    }

    #[test]
    fn extreme_weights_do_not_overflow() {
        let members = ids(3);
        let weights = [u32::MAX; 3];
        let mut state = FakeState::up(3);
        state.active = vec![u32::MAX, u32::MAX, 0];
        let mut r2 = RandomTwo::new(3);
        for _ in 0..50 {
            assert!(r2.pick(&view(&members, &weights, &state)).is_some());
        }
    }
}
