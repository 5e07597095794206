//! Stick tables: a bounded map from a request key (client address, header value) to the
//! name of the server that key was last sent to, for persistence.
//!
//! Servers are stored by *name*, not index: indices shift when a reload adds or removes
//! servers, names identify the same server across configurations.
//!
//! [`StickTable`] is the single-owner table; [`SharedStickTable`] shards it behind
//! mutexes for use from every worker. Time is always an argument (`now`), never read.
//!
//! Invariants of a [`StickTable`]:
//!
//! - it never holds more than `capacity` entries; inserting into a full table evicts the
//!   least recently used entry and counts an eviction;
//! - an entry unused for longer than `idle_timeout` is never returned: `get` removes it
//!   and answers `None`;
//! - entries form a recency list whose last-use times never increase from the newest to
//!   the oldest, so `expire` only looks at the old end and stops at the first live entry.
//!   Callers on several threads may pass slightly out-of-order `now` values; a touched
//!   entry takes `max(now, newest last use)`, which keeps the order exact at the cost of
//!   stretching an entry's life by that skew;
//! - every operation except [`StickTable::remove_server`] (a full scan, for reloads and
//!   the admin API) is O(1) on average.
//!
//! Layout: nodes live densely in a `Vec` (removal swaps the last node into the hole),
//! linked into the recency list by `u32` positions; a `hashbrown::HashTable` of positions
//! indexes them by key. The key is stored once, in its node (a `HashMap<K, usize>` would
//! store header-value keys twice). Keys are hashed with std's randomly keyed SipHash,
//! because clients choose them and could otherwise flood one bucket.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hashbrown::HashTable;

/// "No node" in the recency list.
const NIL: u32 = u32::MAX;
/// Largest capacity: positions are `u32` and `NIL` is reserved.
const MAX_CAPACITY: usize = (u32::MAX - 1) as usize;
/// Idle entries an insert clears from the old end on its way, so that a table whose owner
/// rarely calls `expire` still sheds dead entries faster than it gains new ones.
const EXPIRE_ON_INSERT: usize = 2;
/// Shards of a [`SharedStickTable`] built with [`SharedStickTable::new`].
pub const DEFAULT_SHARDS: usize = 16;
/// A shard holds at least this many entries: below it, least-recently-used order per
/// shard would drift too far from the table-wide order, so small tables get fewer shards.
const MIN_SHARD_CAPACITY: usize = 64;

/// One live entry, as listed by `entries`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StickEntry<K> {
    /// The request key.
    pub key: K,
    /// Name of the server the key sticks to.
    pub server: Arc<str>,
    /// Time since the entry was last used.
    pub idle: Duration,
}

struct Node<K> {
    key: K,
    hash: u64,
    server: Arc<str>,
    last_use: Instant,
    /// Next node towards the newest end, or `NIL`.
    newer: u32,
    /// Next node towards the oldest end, or `NIL`.
    older: u32,
}

/// A bounded least-recently-used map from keys to server names, with idle expiry.
pub struct StickTable<K> {
    capacity: usize,
    idle_timeout: Duration,
    hasher: RandomState,
    index: HashTable<u32>,
    nodes: Vec<Node<K>>,
    newest: u32,
    oldest: u32,
    evictions: u64,
}

impl<K> std::fmt::Debug for StickTable<K> {
    // Hand-written: entries are client data and may be many.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StickTable")
            .field("len", &self.nodes.len())
            .field("capacity", &self.capacity)
            .field("idle_timeout", &self.idle_timeout)
            .field("evictions", &self.evictions)
            .finish_non_exhaustive()
    }
}

impl<K: Hash + Eq> StickTable<K> {
    /// An empty table holding at most `capacity` entries (0 holds nothing), each expiring
    /// after `idle_timeout` without use. Memory grows with use, not with `capacity`.
    pub fn new(capacity: usize, idle_timeout: Duration) -> Self {
        Self::with_hasher(capacity, idle_timeout, RandomState::new())
    }

    fn with_hasher(capacity: usize, idle_timeout: Duration, hasher: RandomState) -> Self {
        StickTable {
            capacity: capacity.min(MAX_CAPACITY),
            idle_timeout,
            hasher,
            index: HashTable::new(),
            nodes: Vec::new(),
            newest: NIL,
            oldest: NIL,
            evictions: 0,
        }
    }

    /// The server `key` sticks to, refreshing the entry's last use. An entry idle for
    /// longer than the idle timeout is removed and counts as absent.
    pub fn get<Q>(&mut self, key: &Q, now: Instant) -> Option<Arc<str>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.get_hashed(self.hasher.hash_one(key), key, now)
    }

    /// Makes `key` stick to `server` as of `now`, replacing any previous server. A full
    /// table first drops idle entries at its old end, then evicts the least recently used.
    pub fn insert(&mut self, key: K, server: Arc<str>, now: Instant) {
        self.insert_hashed(self.hasher.hash_one(&key), key, server, now);
    }

    /// Like [`get`](Self::get), also saying how long the entry had been idle
    /// before this use (for callers that pass refreshes on, e.g. to a peer).
    pub fn get_idle<Q>(&mut self, key: &Q, now: Instant) -> Option<(Arc<str>, Duration)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.get_idle_hashed(self.hasher.hash_one(key), key, now)
    }

    /// Takes an entry written elsewhere (a peer): `key` stuck to `server` when it was
    /// last used at `last_use`. Newest write wins: an entry of this table used at or
    /// after `last_use` is kept as it is, and an entry already idle past the timeout
    /// at `now` is not taken. Returns whether the table changed. The entry's last use
    /// is `last_use`, or this table's newest last use when that is later (the recency
    /// list stays ordered; a merged entry may live longer by that difference).
    pub fn merge(&mut self, key: K, server: Arc<str>, last_use: Instant, now: Instant) -> bool {
        let hash = self.hasher.hash_one(&key);
        self.merge_hashed(hash, key, server, last_use, now)
    }

    fn merge_hashed(&mut self, hash: u64, key: K, server: Arc<str>, last_use: Instant, now: Instant) -> bool {
        if now.saturating_duration_since(last_use) > self.idle_timeout {
            return false;
        }
        if let Some(pos) = self.find(hash, &key) {
            if self.nodes[pos as usize].last_use >= last_use {
                return false;
            }
        }
        self.insert_hashed(hash, key, server, last_use);
        true
    }

    /// Drops the entry of `key`; returns whether there was one.
    pub fn remove<Q>(&mut self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.remove_hashed(self.hasher.hash_one(key), key)
    }

    fn remove_hashed<Q>(&mut self, hash: u64, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let Some(pos) = self.find(hash, key) else { return false };
        self.remove_at(pos);
        true
    }

    /// Drops every entry pointing at the server `name`; returns how many. A full scan.
    pub fn remove_server(&mut self, name: &str) -> usize {
        let mut removed = 0;
        let mut pos = 0;
        while pos < self.nodes.len() {
            if &*self.nodes[pos].server == name {
                // The last node moves into `pos`: look at the same position again.
                self.remove_at(pos as u32);
                removed += 1;
            } else {
                pos += 1;
            }
        }
        removed
    }

    /// Removes the entries idle for longer than the idle timeout; returns how many.
    /// Looks only at the old end of the recency list.
    pub fn expire(&mut self, now: Instant) -> usize {
        let mut removed = 0;
        while self.expire_oldest(now) {
            removed += 1;
        }
        removed
    }

    /// Removes every entry and frees the table's memory; returns how many there were.
    pub fn flush(&mut self) -> usize {
        let len = self.nodes.len();
        self.nodes = Vec::new();
        self.index = HashTable::new();
        self.newest = NIL;
        self.oldest = NIL;
        len
    }

    /// Up to `limit` live entries, most recently used first.
    pub fn entries(&self, limit: usize, now: Instant) -> Vec<StickEntry<K>>
    where
        K: Clone,
    {
        let mut out = Vec::with_capacity(limit.min(self.nodes.len()));
        let mut pos = self.newest;
        while pos != NIL && out.len() < limit {
            let node = &self.nodes[pos as usize];
            let idle = now.saturating_duration_since(node.last_use);
            if idle > self.idle_timeout {
                // Last uses only decrease from here on: everything older is idle too.
                break;
            }
            out.push(StickEntry { key: node.key.clone(), server: node.server.clone(), idle });
            pos = node.older;
        }
        out
    }

    /// Entries held, idle ones not yet removed included.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the table holds no entry.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Most entries held.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// How long an unused entry lives.
    pub fn idle_timeout(&self) -> Duration {
        self.idle_timeout
    }

    /// Live entries evicted to make room since the table was built (not idle expiries).
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    fn get_hashed<Q>(&mut self, hash: u64, key: &Q, now: Instant) -> Option<Arc<str>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.get_idle_hashed(hash, key, now).map(|(server, _)| server)
    }

    fn get_idle_hashed<Q>(&mut self, hash: u64, key: &Q, now: Instant) -> Option<(Arc<str>, Duration)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let pos = self.find(hash, key)?;
        if self.is_idle(pos, now) {
            self.remove_at(pos);
            return None;
        }
        let idle = now.saturating_duration_since(self.nodes[pos as usize].last_use);
        self.touch(pos, now);
        Some((self.nodes[pos as usize].server.clone(), idle))
    }

    fn insert_hashed(&mut self, hash: u64, key: K, server: Arc<str>, now: Instant) {
        if let Some(pos) = self.find(hash, &key) {
            self.nodes[pos as usize].server = server;
            self.touch(pos, now);
            return;
        }
        if self.capacity == 0 {
            return;
        }
        for _ in 0..EXPIRE_ON_INSERT {
            if !self.expire_oldest(now) {
                break;
            }
        }
        if self.nodes.len() >= self.capacity {
            self.remove_at(self.oldest);
            self.evictions += 1;
        }
        let pos = self.nodes.len() as u32;
        let last_use = self.newest_use().map_or(now, |newest| newest.max(now));
        self.nodes.push(Node { key, hash, server, last_use, newer: NIL, older: NIL });
        self.push_newest(pos);
        let nodes = &self.nodes;
        self.index.insert_unique(hash, pos, |&p| nodes[p as usize].hash);
    }

    fn find<Q>(&self, hash: u64, key: &Q) -> Option<u32>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let nodes = &self.nodes;
        self.index.find(hash, |&p| nodes[p as usize].key.borrow() == key).copied()
    }

    fn is_idle(&self, pos: u32, now: Instant) -> bool {
        now.saturating_duration_since(self.nodes[pos as usize].last_use) > self.idle_timeout
    }

    fn newest_use(&self) -> Option<Instant> {
        self.nodes.get(self.newest as usize).map(|n| n.last_use)
    }

    /// Marks the node at `pos` used at `now` and moves it to the newest end.
    fn touch(&mut self, pos: u32, now: Instant) {
        let last_use = self.newest_use().map_or(now, |newest| newest.max(now));
        self.nodes[pos as usize].last_use = last_use;
        if pos != self.newest {
            self.unlink(pos);
            self.push_newest(pos);
        }
    }

    fn expire_oldest(&mut self, now: Instant) -> bool {
        if self.oldest == NIL || !self.is_idle(self.oldest, now) {
            return false;
        }
        self.remove_at(self.oldest);
        true
    }

    /// Takes the node at `pos` out of the list (its own links are left stale).
    fn unlink(&mut self, pos: u32) {
        let Node { newer, older, .. } = self.nodes[pos as usize];
        match newer {
            NIL => self.newest = older,
            p => self.nodes[p as usize].older = older,
        }
        match older {
            NIL => self.oldest = newer,
            p => self.nodes[p as usize].newer = newer,
        }
    }

    fn push_newest(&mut self, pos: u32) {
        let previous = self.newest;
        let node = &mut self.nodes[pos as usize];
        node.newer = NIL;
        node.older = previous;
        match previous {
            NIL => self.oldest = pos,
            p => self.nodes[p as usize].newer = pos,
        }
        self.newest = pos;
    }

    /// Removes the node at `pos` from the list, the index and the node vector.
    fn remove_at(&mut self, pos: u32) {
        self.unlink(pos);
        if let Ok(entry) = self.index.find_entry(self.nodes[pos as usize].hash, |&p| p == pos) {
            entry.remove();
        }
        let last = (self.nodes.len() - 1) as u32;
        self.nodes.swap_remove(pos as usize);
        if pos == last {
            return;
        }
        // The former last node now sits at `pos`: repoint its neighbours and its index slot.
        let Node { hash, newer, older, .. } = self.nodes[pos as usize];
        match newer {
            NIL => self.newest = pos,
            p => self.nodes[p as usize].older = pos,
        }
        match older {
            NIL => self.oldest = pos,
            p => self.nodes[p as usize].newer = pos,
        }
        if let Some(slot) = self.index.find_mut(hash, |&p| p == last) {
            *slot = pos;
        }
    }
}

/// A [`StickTable`] shared by every worker: shards chosen by key hash, each behind its own
/// mutex, the capacity split across them. Least-recently-used eviction is per shard.
///
/// A shard whose mutex was poisoned (a panic while it was held, i.e. a bug) is flushed
/// and reused rather than propagating the panic: losing stickiness beats losing the
/// process, and a half-updated list must not be walked.
pub struct SharedStickTable<K> {
    hasher: RandomState,
    shards: Box<[Mutex<StickTable<K>>]>,
    capacity: usize,
    idle_timeout: Duration,
}

impl<K> std::fmt::Debug for SharedStickTable<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedStickTable")
            .field("shards", &self.shards.len())
            .field("capacity", &self.capacity)
            .field("idle_timeout", &self.idle_timeout)
            .finish_non_exhaustive()
    }
}

impl<K: Hash + Eq> SharedStickTable<K> {
    /// A table of `capacity` entries over [`DEFAULT_SHARDS`] shards (fewer for small ones).
    pub fn new(capacity: usize, idle_timeout: Duration) -> Self {
        Self::with_shards(capacity, idle_timeout, DEFAULT_SHARDS)
    }

    /// A table of `capacity` entries over at most `shards` shards, each holding at least
    /// 64 entries (so small tables get fewer shards, and at least one).
    pub fn with_shards(capacity: usize, idle_timeout: Duration, shards: usize) -> Self {
        let capacity = capacity.min(MAX_CAPACITY);
        let n = shards.min(capacity / MIN_SHARD_CAPACITY).max(1);
        let hasher = RandomState::new();
        let shards = (0..n)
            .map(|i| {
                let share = capacity / n + usize::from(i < capacity % n);
                Mutex::new(StickTable::with_hasher(share, idle_timeout, hasher.clone()))
            })
            .collect();
        SharedStickTable { hasher, shards, capacity, idle_timeout }
    }

    /// [`StickTable::get`] on the key's shard.
    pub fn get<Q>(&self, key: &Q, now: Instant) -> Option<Arc<str>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        self.shard(hash).get_hashed(hash, key, now)
    }

    /// [`StickTable::insert`] on the key's shard.
    pub fn insert(&self, key: K, server: Arc<str>, now: Instant) {
        let hash = self.hasher.hash_one(&key);
        self.shard(hash).insert_hashed(hash, key, server, now);
    }

    /// [`StickTable::get_idle`] on the key's shard.
    pub fn get_idle<Q>(&self, key: &Q, now: Instant) -> Option<(Arc<str>, Duration)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        self.shard(hash).get_idle_hashed(hash, key, now)
    }

    /// [`StickTable::merge`] on the key's shard.
    pub fn merge(&self, key: K, server: Arc<str>, last_use: Instant, now: Instant) -> bool {
        let hash = self.hasher.hash_one(&key);
        self.shard(hash).merge_hashed(hash, key, server, last_use, now)
    }

    /// [`StickTable::remove`] on the key's shard.
    pub fn remove<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        self.shard(hash).remove_hashed(hash, key)
    }

    /// [`StickTable::remove_server`] on every shard, one at a time.
    pub fn remove_server(&self, name: &str) -> usize {
        self.shards.iter().map(|s| lock(s).remove_server(name)).sum()
    }

    /// [`StickTable::expire`] on every shard, one at a time.
    pub fn expire(&self, now: Instant) -> usize {
        self.shards.iter().map(|s| lock(s).expire(now)).sum()
    }

    /// [`StickTable::flush`] on every shard, one at a time.
    pub fn flush(&self) -> usize {
        self.shards.iter().map(|s| lock(s).flush()).sum()
    }

    /// Up to `limit` live entries, most recently used first.
    pub fn entries(&self, limit: usize, now: Instant) -> Vec<StickEntry<K>>
    where
        K: Clone,
    {
        let mut all: Vec<_> = self.shards.iter().flat_map(|s| lock(s).entries(limit, now)).collect();
        all.sort_by_key(|e| e.idle);
        all.truncate(limit);
        all
    }

    /// Entries held over all shards (a sum of snapshots, not one atomic count).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }

    /// Whether no shard holds an entry.
    pub fn is_empty(&self) -> bool {
        self.shards.iter().all(|s| lock(s).is_empty())
    }

    /// Live entries evicted to make room, over all shards.
    pub fn evictions(&self) -> u64 {
        self.shards.iter().map(|s| lock(s).evictions()).sum()
    }

    /// Most entries held over all shards.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// How long an unused entry lives.
    pub fn idle_timeout(&self) -> Duration {
        self.idle_timeout
    }

    fn shard(&self, hash: u64) -> MutexGuard<'_, StickTable<K>> {
        // Bits 32 and up choose the shard: hashbrown takes bucket positions from the low
        // bits and tags from the top seven, so keys within a shard still spread evenly.
        let i = ((hash >> 32) as usize) % self.shards.len();
        lock(&self.shards[i])
    }
}

/// Locks a shard; a poisoned one is flushed (its list may be half-updated) and un-poisoned.
fn lock<K: Hash + Eq>(shard: &Mutex<StickTable<K>>) -> MutexGuard<'_, StickTable<K>> {
    match shard.lock() {
        Ok(guard) => guard,
        Err(poisoned) => {
            let mut guard = poisoned.into_inner();
            guard.flush();
            shard.clear_poison();
            guard
        }
    }
}

#[cfg(test)]
#[path = "stick_tests.rs"]
mod tests;
