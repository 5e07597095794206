//! Weighted least connections.
//!
//! Picks the eligible server minimising `(active + 1) / weight`: the load it would carry
//! after taking this request, relative to its capacity. Invariants:
//!
//! - compared by cross-multiplication in u128 (`(a₁+1)·w₂ < (a₂+1)·w₁`), exact and without
//!   floats; weights under slow start reach `u32::MAX · 1000`, and the products still fit;
//! - among equally loaded servers the scan starts one past the previous winner, so ties
//!   rotate and idle servers share load instead of the first one taking every burst.

use crate::{ServerState, TierView};

/// Per-tier state of least connections: where the next tie-breaking scan starts.
#[derive(Clone, Debug, Default)]
pub(crate) struct LeastConnections {
    start: usize,
}

impl LeastConnections {
    /// Fresh state; the first scan starts at position 0.
    pub(crate) fn new() -> LeastConnections {
        LeastConnections::default()
    }

    /// The tier position of the least loaded eligible server, or None.
    pub(crate) fn pick<S: ServerState>(&mut self, view: &TierView<'_, S>) -> Option<usize> {
        let n = view.len();
        if n == 0 {
            return None;
        }
        // (position, active + 1, weight) of the best server so far.
        let mut best: Option<(usize, u128, u128)> = None;
        for step in 0..n {
            let pos = (self.start % n + step) % n;
            if !view.is_eligible(pos) {
                continue;
            }
            let load = u128::from(view.active(pos)) + 1;
            let weight = u128::from(view.ramped(pos));
            let better = match best {
                None => true,
                Some((_, best_load, best_weight)) => load * best_weight < best_load * weight,
            };
            if better {
                best = Some((pos, load, weight));
            }
        }
        let (pos, _, _) = best?;
        self.start = pos + 1;
        Some(pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{ids, view, FakeState};

    #[test]
    fn picks_the_least_loaded() {
        let members = ids(3);
        let weights = [1, 1, 1];
        let mut state = FakeState::up(3);
        state.active = vec![5, 2, 7];
        let mut lc = LeastConnections::new();
        for _ in 0..5 {
            assert_eq!(lc.pick(&view(&members, &weights, &state)), Some(1));
        }
        state.active[0] = 1;
        assert_eq!(lc.pick(&view(&members, &weights, &state)), Some(0));
    }

    #[test]
    fn load_is_relative_to_weight() {
        let members = ids(2);
        let weights = [1, 4];
        let mut state = FakeState::up(2);
        let mut lc = LeastConnections::new();
        // (0+1)/1 = 1 vs (2+1)/4 = 0.75: the heavier server still wins.
        state.active = vec![0, 2];
        assert_eq!(lc.pick(&view(&members, &weights, &state)), Some(1));
        // (0+1)/1 = 1 vs (4+1)/4 = 1.25: now the light one does.
        state.active = vec![0, 4];
        assert_eq!(lc.pick(&view(&members, &weights, &state)), Some(0));
    }

    #[test]
    fn ties_rotate() {
        let members = ids(3);
        let weights = [2, 2, 2];
        let state = FakeState::up(3);
        let mut lc = LeastConnections::new();
        let got: Vec<_> = (0..6).map(|_| lc.pick(&view(&members, &weights, &state))).collect();
        assert_eq!(got, [0, 1, 2, 0, 1, 2].map(Some));
    }

    #[test]
    fn skips_ineligible_and_survives_extremes() {
        let members = ids(3);
        let weights = [u32::MAX, 0, 1];
        let mut state = FakeState::up(3);
        state.active = vec![u32::MAX, 0, u32::MAX];
        let mut lc = LeastConnections::new();
        assert_eq!(lc.pick(&view(&members, &weights, &state)), Some(0));
        state.available[0] = false;
        assert_eq!(lc.pick(&view(&members, &weights, &state)), Some(2));
        state.available[2] = false;
        assert_eq!(lc.pick(&view(&members, &weights, &state)), None);
        assert_eq!(lc.pick(&view(&[], &[], &state)), None);
    }
}
