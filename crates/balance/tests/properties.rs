//! Property tests of the public API: exact round-robin proportions, weight-proportional
//! shares for the random and hash methods, minimal disruption, determinism, and the
//! eligibility / backup invariants under arbitrary pools and operations.

use proptest::prelude::*;
use switchyard_balance::{Balancer, Method, ServerSpec, ServerState};

/// The engine's view, as the tests set it.
#[derive(Clone, Debug)]
struct Pool {
    available: Vec<bool>,
    active: Vec<u32>,
}

impl Pool {
    fn up(n: usize) -> Pool {
        Pool { available: vec![true; n], active: vec![0; n] }
    }
}

impl ServerState for Pool {
    fn is_available(&self, i: usize) -> bool {
        self.available.get(i).copied().unwrap_or(false)
    }
    fn active(&self, i: usize) -> u32 {
        self.active.get(i).copied().unwrap_or(0)
    }
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

fn primaries(weights: &[u32]) -> Vec<ServerSpec> {
    weights.iter().map(|&weight| ServerSpec { weight, backup: false }).collect()
}

/// Well-spread keys, as `hash_bytes` would give, from a test-chosen seed.
fn keys(seed: u64, count: usize) -> impl Iterator<Item = u64> {
    let mut z = seed;
    (0..count).map(move |_| {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut x = z;
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    })
}

fn counts(b: &mut Balancer, pool: &Pool, keys: impl Iterator<Item = u64>) -> Vec<u64> {
    let mut counts = vec![0u64; b.len()];
    for key in keys {
        if let Some(i) = b.pick(Some(key), pool) {
            counts[i] += 1;
        }
    }
    counts
}

fn weights_strategy() -> impl Strategy<Value = Vec<u32>> {
    prop::collection::vec(1u32..=20, 1..=10)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn round_robin_counts_are_exactly_proportional(weights in weights_strategy(), k in 1u64..=3) {
        let mut b = Balancer::new(Method::RoundRobin, &primaries(&weights), 0);
        let pool = Pool::up(weights.len());
        let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
        let mut counts = vec![0u64; weights.len()];
        for _ in 0..total * k {
            let i = b.pick(None, &pool);
            prop_assert!(i.is_some());
            counts[i.unwrap_or(0)] += 1;
        }
        let want: Vec<u64> = weights.iter().map(|&w| u64::from(w) * k).collect();
        prop_assert_eq!(counts, want);
    }

    #[test]
    fn same_seed_same_picks(
        weights in weights_strategy(),
        seed in any::<u64>(),
        downs in prop::collection::vec((0usize..10, any::<bool>()), 0..20),
    ) {
        for method in ALL {
            let specs = primaries(&weights);
            let (mut a, mut b) = (Balancer::new(method, &specs, seed), Balancer::new(method, &specs, seed));
            let mut pool = Pool::up(weights.len());
            for (step, (i, up)) in downs.iter().enumerate() {
                if let Some(slot) = pool.available.get_mut(*i) {
                    *slot = *up;
                }
                for key in keys(step as u64, 8) {
                    let key = (key % 3 != 0).then_some(key);
                    prop_assert_eq!(a.pick(key, &pool), b.pick(key, &pool), "{:?}", method);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    #[test]
    fn shares_follow_weights(weights in weights_strategy(), seed in any::<u64>()) {
        let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
        let lightest = u64::from(weights.iter().copied().min().unwrap_or(1));
        // Enough samples that the lightest server expects 500 hits: then ±20% is 4.5σ.
        let samples = (500 * total).div_ceil(lightest);
        for method in [Method::RandomTwo, Method::Hash, Method::Maglev] {
            let mut b = Balancer::new(method, &primaries(&weights), seed);
            let got = counts(&mut b, &Pool::up(weights.len()), keys(seed, samples as usize));
            for (i, &w) in weights.iter().enumerate() {
                let due = (samples * u64::from(w)) as f64 / total as f64;
                let off = (got[i] as f64 - due).abs() / due;
                prop_assert!(off < 0.2, "{:?} server {} got {} of {}, due {:.0}", method, i, got[i], samples, due);
            }
        }
    }

    #[test]
    fn removing_one_server_moves_little_else(
        weights in prop::collection::vec(1u32..=20, 2..=10),
        gone in any::<prop::sample::Index>(),
        seed in any::<u64>(),
    ) {
        let gone = gone.index(weights.len());
        let n_keys = 10_000;
        for method in [Method::Hash, Method::SourceHash, Method::Maglev] {
            let mut b = Balancer::new(method, &primaries(&weights), 0);
            let mut pool = Pool::up(weights.len());
            let before: Vec<_> = keys(seed, n_keys).map(|k| b.pick(Some(k), &pool)).collect();
            pool.available[gone] = false;
            let after: Vec<_> = keys(seed, n_keys).map(|k| b.pick(Some(k), &pool)).collect();
            let moved_others = before
                .iter()
                .zip(&after)
                .filter(|(was, now)| **was != Some(gone) && was != now)
                .count();
            prop_assert!(after.iter().all(|&i| i.is_some() && i != Some(gone)));
            if method == Method::Maglev {
                // Maglev trades a little disruption for O(1) lookups; the paper measures
                // a few percent. Allow 5% of all keys.
                prop_assert!(moved_others * 20 < n_keys, "{} of {} moved", moved_others, n_keys);
            } else {
                // Rendezvous: keys of the other servers never move.
                prop_assert_eq!(moved_others, 0);
            }
            // And the server coming back takes its keys back exactly.
            pool.available[gone] = true;
            let back: Vec<_> = keys(seed, n_keys).map(|k| b.pick(Some(k), &pool)).collect();
            prop_assert_eq!(&back, &before);
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Pick(Option<u64>),
    SetAvailable(usize, bool),
    SetActive(usize, u32),
    SetWeight(usize, u32),
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => prop::option::of(any::<u64>()).prop_map(Op::Pick),
        2 => (0usize..8, any::<bool>()).prop_map(|(i, up)| Op::SetAvailable(i, up)),
        1 => (0usize..8, 0u32..5).prop_map(|(i, a)| Op::SetActive(i, a)),
        1 => (0usize..10, prop_oneof![0u32..4, Just(u32::MAX)]).prop_map(|(i, w)| Op::SetWeight(i, w)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the pool and the sequence of changes: never a panic, never an ineligible
    /// server, a backup only when no primary is eligible, None only when nothing is, and
    /// least connections always returns a least loaded primary.
    #[test]
    fn picks_respect_eligibility_and_backups(
        servers in prop::collection::vec((0u32..4, any::<bool>()), 0..8),
        ops in prop::collection::vec(op_strategy(), 1..60),
        seed in any::<u64>(),
    ) {
        let specs: Vec<ServerSpec> =
            servers.iter().map(|&(weight, backup)| ServerSpec { weight, backup }).collect();
        for method in ALL {
            let mut b = Balancer::new(method, &specs, seed);
            prop_assert_eq!(b.len(), specs.len());
            let mut weights: Vec<u32> = specs.iter().map(|s| s.weight).collect();
            let mut pool = Pool::up(specs.len());
            for op in &ops {
                match *op {
                    Op::SetAvailable(i, up) => {
                        if let Some(slot) = pool.available.get_mut(i) { *slot = up; }
                    }
                    Op::SetActive(i, a) => {
                        if let Some(slot) = pool.active.get_mut(i) { *slot = a; }
                    }
                    Op::SetWeight(i, w) => {
                        b.set_weight(i, w);
                        if let Some(slot) = weights.get_mut(i) { *slot = w; }
                    }
                    Op::Pick(key) => {
                        let eligible = |i: usize| weights[i] > 0 && pool.available[i];
                        let any_primary = (0..specs.len()).any(|i| !specs[i].backup && eligible(i));
                        let any = (0..specs.len()).any(eligible);
                        match b.pick(key, &pool) {
                            None => prop_assert!(!any, "{:?} gave None", method),
                            Some(i) => {
                                prop_assert!(i < specs.len() && eligible(i), "{:?} gave {}", method, i);
                                prop_assert_eq!(specs[i].backup, !any_primary, "{:?}", method);
                                if method == Method::LeastConnections {
                                    let load = |j: usize| (u64::from(pool.active[j]) + 1, u64::from(weights[j]));
                                    let (li, wi) = load(i);
                                    for j in (0..specs.len()).filter(|&j| specs[j].backup == specs[i].backup && eligible(j)) {
                                        let (lj, wj) = load(j);
                                        prop_assert!(li * wj <= lj * wi, "{} not least loaded vs {}", i, j);
                                    }
                                }
                                if method == Method::First {
                                    prop_assert!((0..i).all(|j| specs[j].backup != specs[i].backup || !eligible(j)));
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
