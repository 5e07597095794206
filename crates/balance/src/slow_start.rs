//! Slow start: the share of its weight a returning server gets while it ramps.
//!
//! Linear from 1/1000 at the start to the full weight at the end of the
//! period. Pure: the caller passes the time elapsed since the ramp began.

use std::time::Duration;

/// The share of a server that is not ramping, in thousandths.
pub const FULL_RAMP: u32 = 1000;

/// The share, in thousandths (1..=[`FULL_RAMP`]), after `elapsed` of a ramp
/// lasting `period`; a zero period is no ramp.
pub fn ramp_permille(elapsed: Duration, period: Duration) -> u32 {
    if period.is_zero() || elapsed >= period {
        return FULL_RAMP;
    }
    let share = elapsed.as_nanos().saturating_mul(u128::from(FULL_RAMP)) / period.as_nanos();
    u32::try_from(share).unwrap_or(FULL_RAMP).clamp(1, FULL_RAMP)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ramps_linearly_from_small_to_full() {
        let period = Duration::from_secs(30);
        assert_eq!(ramp_permille(Duration::ZERO, period), 1);
        assert_eq!(ramp_permille(Duration::from_secs(15), period), 500);
        assert_eq!(ramp_permille(Duration::from_secs(27), period), 900);
        assert_eq!(ramp_permille(Duration::from_secs(30), period), FULL_RAMP);
        assert_eq!(ramp_permille(Duration::from_secs(3000), period), FULL_RAMP);
        assert_eq!(ramp_permille(Duration::from_secs(1), Duration::ZERO), FULL_RAMP);
        let shares: Vec<_> = (0..=30).map(|s| ramp_permille(Duration::from_secs(s), period)).collect();
        assert!(shares.windows(2).all(|w| w[0] <= w[1]), "never decreases: {shares:?}");
    }
}
