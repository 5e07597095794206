//! Smooth weighted round robin, nginx's algorithm (`ngx_http_upstream_get_peer`).
//!
//! Each pick adds every eligible server's weight to its `current` score, returns the
//! server with the highest score (the lowest position on a tie) and subtracts the total
//! eligible weight from the winner. Invariants:
//!
//! - while the eligible set and weights stay fixed, the sum of the eligible scores is 0
//!   after every pick, and every run of `sum(weights)` picks (from that state) gives each
//!   server exactly `weight` picks, spread evenly rather than in bursts: weights 5,1,1
//!   give `a a b a c a a`;
//! - with equal weights this is plain rotation;
//! - ineligible servers (down, full, weight 0) take no part: their score is frozen
//!   until they return, so a server coming back is not flooded with catch-up picks.

use crate::{ServerState, TierView};

/// Per-tier state of smooth weighted round robin.
#[derive(Clone, Debug)]
pub(crate) struct SmoothRoundRobin {
    /// nginx's `current_weight`, one per tier position.
    current: Vec<i64>,
}

impl SmoothRoundRobin {
    /// State for a tier of `n` servers.
    pub(crate) fn new(n: usize) -> SmoothRoundRobin {
        SmoothRoundRobin { current: vec![0; n] }
    }

    /// The tier position of the next server, or None when no server is eligible.
    pub(crate) fn pick<S: ServerState>(&mut self, view: &TierView<'_, S>) -> Option<usize> {
        let mut total: i64 = 0;
        let mut best: Option<usize> = None;
        for pos in 0..view.len().min(self.current.len()) {
            if !view.is_eligible(pos) {
                continue;
            }
            let weight = i64::try_from(view.ramped_permille(pos)).unwrap_or(i64::MAX);
            // Saturating: scores stay within ±sum(weights) in practice, but a pool of
            // billions of maximal weights must not panic in debug builds.
            self.current[pos] = self.current[pos].saturating_add(weight);
            total = total.saturating_add(weight);
            if best.is_none_or(|b| self.current[pos] > self.current[b]) {
                best = Some(pos);
            }
        }
        let best = best?;
        self.current[best] = self.current[best].saturating_sub(total);
        Some(best)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{ids, view, FakeState};

    fn run(weights: &[u32], state: &FakeState, picks: usize) -> Vec<Option<usize>> {
        let members = ids(weights.len());
        let v = view(&members, weights, state);
        let mut rr = SmoothRoundRobin::new(weights.len());
        (0..picks).map(|_| rr.pick(&v)).collect()
    }

    #[test]
    fn nginx_sequence_for_weights_5_1_1() {
        let got = run(&[5, 1, 1], &FakeState::up(3), 14);
        let a_a_b_a_c_a_a = [0, 0, 1, 0, 2, 0, 0];
        let want: Vec<_> = a_a_b_a_c_a_a.iter().chain(&a_a_b_a_c_a_a).map(|&p| Some(p)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn equal_weights_rotate() {
        let got = run(&[2, 2, 2], &FakeState::up(3), 6);
        assert_eq!(got, [0, 1, 2, 0, 1, 2].map(Some));
    }

    #[test]
    fn unavailable_and_zero_weight_servers_are_skipped() {
        let mut state = FakeState::up(4);
        state.available[1] = false;
        let got = run(&[1, 1, 0, 1], &state, 6);
        assert_eq!(got, [0, 3, 0, 3, 0, 3].map(Some));
    }

    #[test]
    fn nothing_eligible_gives_none() {
        let mut state = FakeState::up(2);
        state.available = vec![false, false];
        assert_eq!(run(&[1, 1], &state, 2), [None, None]);
        assert_eq!(run(&[], &FakeState::up(0), 1), [None]);
    }

    #[test]
    fn a_ramping_server_gets_its_share_of_its_weight() {
        let members = ids(2);
        let (weights, ramps) = ([1, 1], [1000, 250]);
        let state = FakeState::up(2);
        let v = crate::testing::ramped_view(&members, &weights, &ramps, &state);
        let mut rr = SmoothRoundRobin::new(2);
        let picks: Vec<_> = (0..500).filter_map(|_| rr.pick(&v)).collect();
        assert_eq!(picks.iter().filter(|&&p| p == 1).count(), 100, "a quarter weight: 1 in 5");
    }

    #[test]
    fn shares_are_even_again_as_soon_as_a_ramp_ends() {
        let (members, weights, state) = (ids(2), [100, 100], FakeState::up(2));
        let mut rr = SmoothRoundRobin::new(2);
        let ramping = crate::testing::ramped_view(&members, &weights, &[1000, 150], &state);
        let during = (0..1000).filter(|_| rr.pick(&ramping) == Some(1)).count();
        assert!((120..=140).contains(&during), "{during} of 1000 while at 15 %");
        let done = view(&members, &weights, &state);
        let after = (0..200).filter(|_| rr.pick(&done) == Some(1)).count();
        assert!((95..=105).contains(&after), "{after} of 200 once the ramp is over");
    }

    #[test]
    fn extreme_weights_do_not_overflow() {
        let weights = [u32::MAX; 5];
        let got = run(&weights, &FakeState::up(5), 10);
        assert_eq!(got, [0, 1, 2, 3, 4, 0, 1, 2, 3, 4].map(Some));
    }
}
