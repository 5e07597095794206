//! First: the lowest-position eligible server of the tier.
//!
//! Tier positions follow server ids, so this fills servers in configuration order:
//! requests go to the first server until it is full (its connection limit makes it
//! unavailable), then spill to the next. Invariant: stateless, so it cannot drift.

use crate::{ServerState, TierView};

/// The tier position of the first eligible server, or None.
pub(crate) fn pick<S: ServerState>(view: &TierView<'_, S>) -> Option<usize> {
    (0..view.len()).find(|&pos| view.is_eligible(pos))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{ids, view, FakeState};

    #[test]
    fn lowest_eligible_position_wins() {
        let members = ids(4);
        let weights = [0, 1, 1, 1];
        let mut state = FakeState::up(4);
        assert_eq!(pick(&view(&members, &weights, &state)), Some(1));
        state.available[1] = false;
        assert_eq!(pick(&view(&members, &weights, &state)), Some(2));
        state.active[2] = 1000; // load is irrelevant, only availability
        assert_eq!(pick(&view(&members, &weights, &state)), Some(2));
        state.available = vec![true, false, false, false];
        assert_eq!(pick(&view(&members, &weights, &state)), None);
    }
}
