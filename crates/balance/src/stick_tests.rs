//! Stick table tests: an injected clock (`t(secs)`), never a sleep.

use super::*;
use proptest::prelude::*;

const IDLE: Duration = Duration::from_secs(30);

fn clock() -> impl Fn(u64) -> Instant {
    let t0 = Instant::now();
    move |secs| t0 + Duration::from_secs(secs)
}

fn name(s: &str) -> Arc<str> {
    Arc::from(s)
}

fn keys<K: Clone>(entries: &[StickEntry<K>]) -> Vec<K> {
    entries.iter().map(|e| e.key.clone()).collect()
}

#[test]
fn merge_newest_write_wins() {
    let t = clock();
    let mut table: StickTable<u32> = StickTable::new(10, IDLE);
    table.insert(1, name("a"), t(10));
    // An older write from a peer loses to the local entry.
    assert!(!table.merge(1, name("b"), t(5), t(10)));
    assert_eq!(table.get(&1, t(10)).as_deref(), Some("a"));
    // A newer one replaces it.
    assert!(table.merge(1, name("b"), t(12), t(12)));
    assert_eq!(table.get(&1, t(12)).as_deref(), Some("b"));
    // A new key is taken; one already idle past the timeout is not.
    assert!(table.merge(2, name("c"), t(11), t(12)));
    assert!(!table.merge(3, name("c"), t(1), t(40)));
    assert_eq!(table.get(&3, t(40)), None);
    assert_eq!(table.len(), 2);
}

#[test]
fn get_idle_reports_the_idle_time_before_the_use() {
    let t = clock();
    let table: SharedStickTable<u32> = SharedStickTable::new(100, IDLE);
    table.insert(7, name("a"), t(0));
    let (server, idle) = table.get_idle(&7, t(4)).expect("entry");
    assert_eq!((&*server, idle), ("a", Duration::from_secs(4)));
    assert_eq!(table.get_idle(&7, t(5)).map(|(_, idle)| idle), Some(Duration::from_secs(1)));
    assert!(table.merge(8, name("b"), t(5), t(5)));
    assert!(!table.merge(8, name("c"), t(3), t(5)));
    assert_eq!(table.get(&8, t(6)).as_deref(), Some("b"));
}

#[test]
fn get_returns_what_insert_stored_and_refreshes_it() {
    let t = clock();
    let mut table = StickTable::new(10, IDLE);
    table.insert(1u32, name("a"), t(0));
    assert_eq!(table.get(&1, t(0)).as_deref(), Some("a"));
    assert_eq!(table.get(&2, t(0)), None);
    // Each use restarts the idle clock: 20 s + 25 s apart is never 30 s idle.
    assert_eq!(table.get(&1, t(20)).as_deref(), Some("a"));
    assert_eq!(table.get(&1, t(45)).as_deref(), Some("a"));
    // Exactly the timeout is still alive; beyond it the entry is gone for good.
    assert_eq!(table.get(&1, t(75)).as_deref(), Some("a"));
    assert_eq!(table.get(&1, t(106)), None);
    assert_eq!(table.len(), 0);
    assert_eq!(table.get(&1, t(106)), None);
}

#[test]
fn insert_replaces_the_server_of_a_known_key() {
    let t = clock();
    let mut table = StickTable::new(2, IDLE);
    table.insert(1u32, name("a"), t(0));
    table.insert(1, name("b"), t(1));
    assert_eq!(table.len(), 1);
    assert_eq!(table.get(&1, t(2)).as_deref(), Some("b"));
    assert_eq!(table.evictions(), 0);
}

#[test]
fn a_full_table_evicts_the_least_recently_used() {
    let t = clock();
    let mut table = StickTable::new(3, IDLE);
    for k in 1u32..=3 {
        table.insert(k, name("s"), t(0));
    }
    assert!(table.get(&1, t(1)).is_some());
    table.insert(4, name("s"), t(2));
    assert_eq!(table.len(), 3);
    assert_eq!(table.evictions(), 1);
    assert_eq!(table.get(&2, t(3)), None, "2 was the least recently used");
    assert_eq!(keys(&table.entries(10, t(3))), [4, 1, 3]);
}

#[test]
fn insert_drops_idle_entries_before_evicting_live_ones() {
    let t = clock();
    let mut table = StickTable::new(2, IDLE);
    table.insert(1u32, name("a"), t(0));
    table.insert(2, name("a"), t(0));
    table.insert(3, name("b"), t(100));
    assert_eq!(table.evictions(), 0, "idle entries are expiries, not evictions");
    assert_eq!(table.len(), 1);
}

#[test]
fn expire_removes_only_idle_entries() {
    let t = clock();
    let mut table = StickTable::new(10, IDLE);
    table.insert(1u32, name("a"), t(0));
    table.insert(2, name("a"), t(10));
    table.insert(3, name("a"), t(20));
    assert_eq!(table.expire(t(30)), 0);
    assert_eq!(table.expire(t(35)), 1);
    assert_eq!(keys(&table.entries(10, t(35))), [3, 2]);
    assert_eq!(table.expire(t(100)), 2);
    assert!(table.is_empty());
    assert_eq!(table.expire(t(100)), 0);
}

#[test]
fn out_of_order_clocks_keep_the_recency_order() {
    // Threads may call with a `now` a little older than the newest entry's last use.
    let t = clock();
    let mut table = StickTable::new(10, IDLE);
    table.insert(1u32, name("a"), t(10));
    table.insert(2, name("a"), t(5));
    assert!(table.get(&1, t(3)).is_some());
    assert_eq!(keys(&table.entries(10, t(10))), [1, 2]);
    // Key 2 took max(5, 10) = 10, so both are alive at 40 and gone at 41.
    assert_eq!(table.expire(t(40)), 0);
    assert_eq!(table.expire(t(41)), 2);
}

#[test]
fn remove_drops_one_key_and_keeps_the_rest_in_order() {
    let t = clock();
    let mut table = StickTable::new(10, IDLE);
    for k in 0u32..5 {
        table.insert(k, name("s"), t(u64::from(k)));
    }
    assert!(table.remove(&2));
    assert!(!table.remove(&2), "already gone");
    assert!(!table.remove(&7), "never there");
    assert_eq!(keys(&table.entries(10, t(5))), [4, 3, 1, 0]);
    assert_eq!(table.get(&2, t(5)), None);
    let shared = SharedStickTable::new(1000, IDLE);
    shared.insert(vec![1u8], name("s"), t(0));
    assert!(shared.remove(&[1u8][..]));
    assert!(shared.is_empty());
}

#[test]
fn remove_server_drops_its_entries_and_keeps_the_rest_in_order() {
    let t = clock();
    let mut table = StickTable::new(10, IDLE);
    for k in 0u32..8 {
        table.insert(k, name(if k % 2 == 0 { "even" } else { "odd" }), t(u64::from(k)));
    }
    assert_eq!(table.remove_server("odd"), 4);
    assert_eq!(table.remove_server("odd"), 0);
    assert_eq!(keys(&table.entries(10, t(8))), [6, 4, 2, 0]);
    for k in [0u32, 2, 4, 6] {
        assert_eq!(table.get(&k, t(9)).as_deref(), Some("even"));
    }
    assert_eq!(keys(&table.entries(10, t(9))), [6, 4, 2, 0]);
    table.insert(9, name("odd"), t(10));
    assert_eq!(keys(&table.entries(2, t(10))), [9, 6]);
}

#[test]
fn flush_empties_the_table_which_stays_usable() {
    let t = clock();
    let mut table = StickTable::new(10, IDLE);
    for k in 0u32..5 {
        table.insert(k, name("a"), t(0));
    }
    assert_eq!(table.flush(), 5);
    assert!(table.is_empty());
    assert_eq!(table.get(&1, t(0)), None);
    table.insert(1, name("b"), t(1));
    assert_eq!(table.get(&1, t(1)).as_deref(), Some("b"));
}

#[test]
fn entries_are_newest_first_bounded_and_live_only() {
    let t = clock();
    let mut table = StickTable::new(10, IDLE);
    for k in 0u32..5 {
        table.insert(k, name("a"), t(u64::from(k) * 10));
    }
    let listed = table.entries(3, t(40));
    assert_eq!(keys(&listed), [4, 3, 2]);
    assert_eq!(listed[1].idle, Duration::from_secs(10));
    assert_eq!(&*listed[1].server, "a");
    // At 60 s, keys 0..=2 are idle longer than 30 s; key 3 exactly 30 s, still alive.
    assert_eq!(keys(&table.entries(10, t(60))), [4, 3]);
    assert!(table.entries(0, t(40)).is_empty());
}

#[test]
fn a_zero_capacity_table_holds_nothing() {
    let t = clock();
    let mut table = StickTable::new(0, IDLE);
    table.insert(1u32, name("a"), t(0));
    assert!(table.is_empty());
    assert_eq!(table.get(&1, t(0)), None);
}

#[test]
fn byte_keys_are_looked_up_by_slice() {
    let t = clock();
    let mut table: StickTable<Box<[u8]>> = StickTable::new(4, IDLE);
    table.insert(Box::from(&b"tenant-7"[..]), name("a"), t(0));
    assert_eq!(table.get(&b"tenant-7"[..], t(1)).as_deref(), Some("a"));
    assert_eq!(table.get(&b"tenant-8"[..], t(1)), None);
}

#[test]
fn shared_table_splits_capacity_and_answers_like_one_table() {
    fn is_send_sync<T: Send + Sync>() {}
    is_send_sync::<SharedStickTable<std::net::IpAddr>>();
    is_send_sync::<SharedStickTable<Box<[u8]>>>();

    let t = clock();
    let long = Duration::from_secs(1000);
    let shared = SharedStickTable::new(1030, long);
    assert_eq!(shared.shards.len(), DEFAULT_SHARDS);
    assert_eq!(shared.shards.iter().map(|s| lock(s).capacity()).sum::<usize>(), 1030);
    for k in 0u32..100 {
        shared.insert(k, name(if k < 50 { "a" } else { "b" }), t(u64::from(k)));
    }
    assert_eq!(shared.len(), 100);
    assert_eq!(shared.get(&7, t(100)).as_deref(), Some("a"));
    let listed = shared.entries(3, t(100));
    assert_eq!(keys(&listed), [7, 99, 98], "merged newest first");
    assert_eq!(shared.remove_server("a"), 50);
    assert_eq!(shared.expire(t(98 + 1001)), 49, "only key 99 used after 98");
    assert_eq!(shared.flush(), 1);
    assert!(shared.is_empty());
    assert_eq!(shared.evictions(), 0);
}

#[test]
fn small_shared_tables_get_fewer_shards() {
    assert_eq!(SharedStickTable::<u32>::new(10, IDLE).shards.len(), 1);
    assert_eq!(SharedStickTable::<u32>::new(0, IDLE).shards.len(), 1);
    assert_eq!(SharedStickTable::<u32>::new(200, IDLE).shards.len(), 3);
    assert_eq!(SharedStickTable::<u32>::with_shards(1000, IDLE, 0).shards.len(), 1);
}

#[test]
fn a_poisoned_shard_is_flushed_not_propagated() {
    let t = clock();
    let shared = SharedStickTable::with_shards(10, IDLE, 1);
    shared.insert(1u32, name("a"), t(0));
    let poisoner = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _held = shared.shards[0].lock();
        panic!("deliberate panic while holding the shard");
    }));
    assert!(poisoner.is_err());
    assert!(shared.shards[0].is_poisoned());
    assert_eq!(shared.get(&1, t(1)), None, "the poisoned shard was flushed");
    shared.insert(2, name("b"), t(1));
    assert_eq!(shared.get(&2, t(1)).as_deref(), Some("b"));
    assert!(!shared.shards[0].is_poisoned());
}

#[test]
fn concurrent_inserts_stay_within_capacity() {
    let t = clock();
    let shared = SharedStickTable::with_shards(256, IDLE, 4);
    std::thread::scope(|s| {
        for thread in 0u32..4 {
            let (shared, t) = (&shared, &t);
            s.spawn(move || {
                for k in 0..1000 {
                    shared.insert(thread * 1000 + k, name("a"), t(1));
                }
            });
        }
    });
    assert_eq!(shared.len(), 256);
    assert_eq!(shared.evictions(), 4000 - 256);
}

/// A deliberately naive reference: a vector of (key, server, last use) from oldest to newest.
#[derive(Default)]
struct Model {
    entries: Vec<(u8, u8, u64)>,
    evictions: u64,
}

impl Model {
    fn idle(&self, i: usize, now: u64) -> bool {
        now - self.entries[i].2 > IDLE.as_secs()
    }

    fn get(&mut self, key: u8, now: u64) -> Option<u8> {
        let i = self.entries.iter().position(|e| e.0 == key)?;
        let idle = self.idle(i, now);
        let (_, server, _) = self.entries.remove(i);
        if idle {
            return None;
        }
        self.entries.push((key, server, now));
        Some(server)
    }

    fn insert(&mut self, key: u8, server: u8, now: u64, capacity: usize) {
        if let Some(i) = self.entries.iter().position(|e| e.0 == key) {
            self.entries.remove(i);
        } else if capacity == 0 {
            return;
        } else {
            for _ in 0..EXPIRE_ON_INSERT {
                if !self.entries.is_empty() && self.idle(0, now) {
                    self.entries.remove(0);
                }
            }
            if self.entries.len() >= capacity {
                self.entries.remove(0);
                self.evictions += 1;
            }
        }
        self.entries.push((key, server, now));
    }

    fn expire(&mut self, now: u64) -> usize {
        let before = self.entries.len();
        while !self.entries.is_empty() && self.idle(0, now) {
            self.entries.remove(0);
        }
        before - self.entries.len()
    }

    fn remove_server(&mut self, server: u8) -> usize {
        let before = self.entries.len();
        self.entries.retain(|e| e.1 != server);
        before - self.entries.len()
    }

    /// Live entries, newest first, as `entries` lists them.
    fn live(&self, now: u64) -> Vec<(u8, String)> {
        let live = self.entries.iter().filter(|e| now - e.2 <= IDLE.as_secs());
        live.rev().map(|e| (e.0, e.1.to_string())).collect()
    }
}

#[derive(Debug, Clone)]
enum Op {
    Insert(u8, u8),
    Get(u8),
    Advance(u64),
    Expire,
    RemoveServer(u8),
    Flush,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..16, 0u8..3).prop_map(|(k, s)| Op::Insert(k, s)),
        4 => (0u8..16).prop_map(Op::Get),
        3 => (0u64..25).prop_map(Op::Advance),
        1 => Just(Op::Expire),
        1 => (0u8..3).prop_map(Op::RemoveServer),
        1 => Just(Op::Flush),
    ]
}

proptest! {
    #[test]
    fn the_table_behaves_like_the_naive_model(capacity in 0usize..8, ops in proptest::collection::vec(op(), 0..200)) {
        let t = clock();
        let mut table = StickTable::new(capacity, IDLE);
        let mut model = Model::default();
        let mut now = 0;
        for op in ops {
            match op {
                Op::Insert(k, s) => {
                    table.insert(k, name(&s.to_string()), t(now));
                    model.insert(k, s, now, capacity);
                    // No time passed: get after insert returns the inserted server.
                    let got = table.get(&k, t(now));
                    let want = (capacity > 0).then(|| s.to_string());
                    prop_assert_eq!(got.as_deref(), want.as_deref());
                    prop_assert_eq!(model.get(k, now), (capacity > 0).then_some(s));
                }
                Op::Get(k) => {
                    let got = table.get(&k, t(now)).map(|s| s.to_string());
                    prop_assert_eq!(got, model.get(k, now).map(|s| s.to_string()));
                }
                Op::Advance(secs) => now += secs,
                Op::Expire => prop_assert_eq!(table.expire(t(now)), model.expire(now)),
                Op::RemoveServer(s) => {
                    prop_assert_eq!(table.remove_server(&s.to_string()), model.remove_server(s));
                }
                Op::Flush => {
                    prop_assert_eq!(table.flush(), model.entries.len());
                    model.entries.clear();
                }
            }
            prop_assert!(table.len() <= capacity);
            prop_assert_eq!(table.len(), model.entries.len());
            prop_assert_eq!(table.evictions(), model.evictions);
            let listed: Vec<_> = table.entries(usize::MAX, t(now)).into_iter().map(|e| (e.key, e.server.to_string())).collect();
            prop_assert_eq!(listed, model.live(now));
        }
    }
}
