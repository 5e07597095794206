//! Key hashing: [`hash_bytes`] for building keys, and weighted rendezvous hashing
//! (highest random weight, Thaler & Ravishankar 1998) for `SourceHash` and `Hash`.
//!
//! Rendezvous: every eligible server scores the key with `-ln(u) / weight`, `u` a uniform
//! hash of (key, server id) in (0, 1); the lowest score wins. Why this method:
//!
//! - weight-exact: each score is an exponential variable of rate `weight`, and the
//!   minimum of independent exponentials falls on server i with probability
//!   `weight_i / sum(weights)` (Schindelhauer & Schomaker's logarithmic method);
//! - minimal disruption for free: a server's score does not depend on the others, so
//!   when one leaves only the keys it held move, and when one returns only keys that
//!   now prefer it move; no table, no rebuild, no memory per server;
//! - O(servers) per pick, which for a pool of tens of servers costs about as much as the
//!   availability scan every method does anyway. Large pools wanting O(1) use Maglev.
//!
//! Invariants: the mapping depends only on the key, the server ids, their weights and
//! eligibility, never on the balancer's seed, so every switchyard instance in front of
//! the same pool sends a key to the same server. `-ln(u)` is computed with IEEE basic
//! operations only (no platform `libm`), so scores are bit-identical on every machine.

use crate::rng::mix64;
use crate::{ServerState, TierView};

const P0: u64 = 0xa076_1d64_78bd_642f;
const P1: u64 = 0xe703_7ed1_a0b4_28db;
const P2: u64 = 0x8ebc_6af0_9c88_c6e3;

/// A fast, stable 64-bit hash of bytes (same value on every run and machine), for hash
/// keys: eight bytes per multiply (wyhash-style folded 64×64→128 multiplies) and a
/// SplitMix64 finaliser. Not keyed: clients choosing their own key can pick their server
/// anyway, so flooding resistance buys nothing here.
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut h = P0 ^ (bytes.len() as u64).wrapping_mul(P1);
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        h = fold_mul(u64::from_le_bytes(word) ^ P1, h ^ P2);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        let mut word = [0u8; 8];
        word[..tail.len()].copy_from_slice(tail);
        h = fold_mul(u64::from_le_bytes(word) ^ P2, h ^ P1);
    }
    mix64(h)
}

/// The 128-bit product folded to 64 bits: every input bit reaches the middle bits.
fn fold_mul(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    (product as u64) ^ ((product >> 64) as u64)
}

/// The tier position whose server wins `key`, or None when no server is eligible.
pub(crate) fn rendezvous<S: ServerState>(key: u64, view: &TierView<'_, S>) -> Option<usize> {
    let key = mix64(key);
    let mut best: Option<(usize, f64)> = None;
    for pos in 0..view.len() {
        if !view.is_eligible(pos) {
            continue;
        }
        let score = neg_ln_unit(pair_hash(key, view.server(pos))) / f64::from(view.weight(pos));
        if best.is_none_or(|(_, s)| score < s) {
            best = Some((pos, score));
        }
    }
    best.map(|(pos, _)| pos)
}

/// A hash of (already mixed key, server id), independent across servers.
fn pair_hash(mixed_key: u64, server: usize) -> u64 {
    mix64(mixed_key ^ mix64((server as u64).wrapping_add(P0)))
}

/// `-ln(u)` for `u = (2·(h >> 12) + 1) / 2^53`, strictly inside (0, 1), so the result is
/// finite and positive. Range reduction `y = m·2^e` with `m` in [√½, √2), then
/// `ln m = 2·atanh(s)`, `s = (m-1)/(m+1)`, `|s| < 0.172`, by its odd series to 1e-17.
/// Only +, −, ×, ÷ (correctly rounded, no fused multiply-add) so every machine agrees.
fn neg_ln_unit(h: u64) -> f64 {
    let y = ((h >> 12) << 1) | 1; // odd, < 2^53: exact in f64
    let exponent = 63 - y.leading_zeros(); // floor(log2 y), 0..=52
                                           // 2^exponent built from its bits: exact, no libm.
    let scale = f64::from_bits(u64::from(exponent + 1023) << 52);
    let mut m = y as f64 / scale;
    let mut e = exponent as i32;
    if m > std::f64::consts::SQRT_2 {
        m /= 2.0;
        e += 1;
    }
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let mut series = 0.0;
    for k in (0..12).rev() {
        series = series * s2 + 1.0 / f64::from(2 * k + 1);
    }
    let ln_m = 2.0 * s * series;
    // ln u = ln m + (e - 53)·ln 2, and e ≤ 53, so -ln u = (53 - e)·ln 2 - ln m.
    f64::from(53 - e) * std::f64::consts::LN_2 - ln_m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{ids, view, FakeState};

    #[test]
    fn hash_bytes_is_pinned() {
        // Pinned outputs: changing them would remap every hashed key in production.
        assert_eq!(hash_bytes(b""), PINNED[0]);
        assert_eq!(hash_bytes(b"a"), PINNED[1]);
        assert_eq!(hash_bytes(b"/index.html"), PINNED[2]);
        assert_eq!(hash_bytes(b"0123456789abcdef"), PINNED[3]);
    }

    const PINNED: [u64; 4] =
        [0x7de5_3de7_72ea_694c, 0xd345_058e_45d0_0ca6, 0x6301_a7d0_cdc1_1047, 0x3f3f_84d6_f7b7_4a16];

    #[test]
    fn hash_bytes_separates_near_inputs() {
        let inputs: [&[u8]; 6] = [b"", b"\0", b"\0\0", b"a", b"b", b"ab"];
        for (i, a) in inputs.iter().enumerate() {
            for b in &inputs[i + 1..] {
                assert_ne!(hash_bytes(a), hash_bytes(b), "{a:?} vs {b:?}");
            }
        }
        // One flipped bit changes about half of the output bits.
        let base = hash_bytes(b"GET /some/long/path?with=query");
        let flip = hash_bytes(b"GET /some/long/path?with=querz");
        assert!((16..48).contains(&(base ^ flip).count_ones()));
    }

    #[test]
    fn neg_ln_matches_std_closely() {
        let mut h = 1u64;
        for _ in 0..10_000 {
            h = mix64(h);
            let u = (((h >> 12) << 1) | 1) as f64 / 9_007_199_254_740_992.0;
            let want = -u.ln();
            let got = neg_ln_unit(h);
            assert!(got > 0.0 && got.is_finite());
            assert!((got - want).abs() <= 1e-14 * want.max(1e-3), "{u}: {got} vs {want}");
        }
        assert!(neg_ln_unit(0) > 36.0 && neg_ln_unit(u64::MAX) > 0.0);
    }

    #[test]
    fn rendezvous_is_deterministic_and_skips_ineligible() {
        let members = ids(4);
        let weights = [1, 1, 0, 1];
        let mut state = FakeState::up(4);
        for key in 0..200 {
            let a = rendezvous(key, &view(&members, &weights, &state));
            let b = rendezvous(key, &view(&members, &weights, &state));
            assert_eq!(a, b);
            assert!(matches!(a, Some(0 | 1 | 3)));
        }
        state.available = vec![false; 4];
        assert_eq!(rendezvous(1, &view(&members, &weights, &state)), None);
    }

    #[test]
    fn removing_a_server_moves_only_its_keys() {
        let members = ids(5);
        let weights = [1, 2, 3, 1, 1];
        let mut state = FakeState::up(5);
        let before: Vec<_> = (0..2000).map(|k| rendezvous(k, &view(&members, &weights, &state))).collect();
        state.available[2] = false;
        for (k, was) in before.iter().enumerate() {
            let now = rendezvous(k as u64, &view(&members, &weights, &state));
            if *was != Some(2) {
                assert_eq!(now, *was, "key {k} moved");
            }
        }
    }
}
