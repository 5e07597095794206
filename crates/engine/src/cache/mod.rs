//! The response cache: an in-memory HTTP cache for a shared cache (RFC 9111),
//! one per service, shared by every worker of the process.
//!
//! - **What is stored**: complete responses to GET requests that
//!   [`policy::storable`] accepts, as the client saw them (after the response
//!   rules, and after compression: a compressed variant is stored as such, so
//!   a hit needs no recompression). The body is copied by a [`Tee`] as it is
//!   written to the client, so storing never delays the client; the entry is
//!   committed only when the body is complete, and copying stops (nothing is
//!   stored) as soon as the response exceeds `max_object`.
//! - **Variants**: a primary key (from the `key` parts) holds one entry per
//!   set of request-header values its `Vary` selects, normalised first
//!   (RFC 9111 §4.1, [`policy::selecting_value`]; `Accept-Encoding` by
//!   [`policy::normalise_accept_encoding`]); an absent header matches only
//!   an absent one.
//! - **Age**: an entry keeps the `corrected_initial_age` of its response
//!   (RFC 9111 §4.2.3: the origin's `Age` and `Date` and the response delay)
//!   and its time in the store; the `Age` the client gets is their sum.
//!   The origin's `Age` field itself is not stored.
//! - **Bounds and eviction**: the store is split into shards (by key hash),
//!   each a strict LRU over primary keys with an equal share of `size`;
//!   there are as many shards as keep each share at least `max_object`
//!   (at most 16). Why LRU: cached responses are re-read mostly soon after
//!   they were first read (hot pages, assets of the page just served), LRU
//!   needs no tuning and one `BTreeMap` keeps it O(log n) per touch; a flood
//!   of one-off keys does push hot entries out, which TinyLFU would resist,
//!   but at the price of a frequency sketch per shard — a later step if
//!   scans turn out to matter. Sharding keeps lock hold times short when
//!   many workers hit at once; the sum of the shards' bytes never exceeds
//!   `size`.
//! - **Coalescing**: the first miss for a primary key registers a fetch;
//!   concurrent misses for that key wait (bounded) until it ends, then look
//!   again. A `watch` channel wakes waiters on any worker's runtime. A
//!   background revalidation ([`begin_refresh`]) is registered the same way,
//!   once per key for every worker.
//!
//! Invariants: a response is never stored before its body is complete; an
//! entry is immutable once stored (a 304 replaces it by a refreshed copy);
//! every lock is held only for map operations, never across an `.await`.

pub use switchyard_http::cache_policy as policy;
mod partial;
pub mod range;
mod tee;
mod view;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use switchyard_config::{Cache as CacheConfig, CacheKeyPart};
use switchyard_http::head_writer::HeadWriter;
use tokio::sync::watch;

pub use self::partial::{Partial, Piece};
use self::policy::Directives;
pub use self::tee::{parse_captured, parse_head, Capture, Tee};
pub use self::view::{EntryView, KeyView, Listing};

/// Response headers as stored: (lower-case name, value) pairs in order.
pub type Headers = Vec<(String, Vec<u8>)>;

/// The request header values a variant was selected by: (lower-case name,
/// normalised value or `None` when the request lacked the header).
pub type Vary = Vec<(String, Option<Vec<u8>>)>;

/// What a request's `Vary`-selected headers are, by lower-case name.
pub type Selecting<'a> = dyn Fn(&str) -> Option<Vec<u8>> + 'a;

/// Most shards of one cache.
const MAX_SHARDS: usize = 16;
/// Bytes an entry is charged beyond its head and body (map slots, bookkeeping).
const ENTRY_OVERHEAD: u64 = 128;

/// One stored response (one variant).
#[derive(Debug)]
pub struct Entry {
    /// Status code.
    pub status: u16,
    /// Response headers as the client got them, minus framing and
    /// connection headers and `Age` (re-added when served), names lower case.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The payload (decoded from chunked coding).
    pub body: Bytes,
    /// Request header values this variant was selected by (`Vary`), names
    /// lower case, values normalised, `None` for an absent header.
    pub vary: Vary,
    /// When the response was received, monotonic (for the resident time).
    pub received: Instant,
    /// When the response was received, wall clock (RFC 9111 §4.3.2: the
    /// last resort of `If-Modified-Since`).
    pub received_at: SystemTime,
    /// `corrected_initial_age` (RFC 9111 §4.2.3).
    pub initial_age: Duration,
    /// Freshness lifetime.
    pub lifetime: Duration,
    /// The directives that govern it: a targeted field's (RFC 9213) or `Cache-Control`'s.
    pub directives: Directives,
    /// Times a client was answered from it (hits, stale answers, revalidated
    /// answers): one relaxed add per answer, read only by the admin view.
    pub hits: AtomicU64,
}

impl Entry {
    /// Builds an entry from a response head (its `Age` included) and body;
    /// `requested` and `received` are the wall-clock times of the request
    /// and response. The `Age` field is read, then left out of what is stored.
    pub fn new(
        status: u16,
        mut headers: Headers,
        body: Bytes,
        vary: Vary,
        requested: SystemTime,
        received: SystemTime,
        config: &CacheConfig,
    ) -> Entry {
        let control = policy::control(&headers, &config.targeted);
        let lifetime = policy::freshness(&control, &headers, received, config.heuristic).unwrap_or_default();
        let initial_age = policy::initial_age(&headers, requested, received);
        headers.retain(|(n, _)| n != "age");
        Entry {
            status,
            headers,
            body,
            vary,
            received: Instant::now(),
            received_at: received,
            initial_age,
            lifetime,
            directives: control.directives,
            hits: AtomicU64::new(0),
        }
    }

    /// The entry's current age (RFC 9111 §4.2.3: `corrected_initial_age`
    /// plus `resident_time`), at most 2^31 seconds (§1.2.2).
    pub fn age(&self, now: Instant) -> Duration {
        (self.initial_age + now.saturating_duration_since(self.received)).min(Duration::from_secs(policy::DELTA_MAX))
    }

    /// Fresh, and not marked `no-cache`.
    pub fn usable_fresh(&self, now: Instant) -> bool {
        !self.directives.no_cache && self.age(now) < self.lifetime
    }

    /// How long past its freshness the entry is (zero while fresh).
    pub fn staleness(&self, now: Instant) -> Duration {
        self.age(now).saturating_sub(self.lifetime)
    }

    /// Whether it may be served stale for `window` seconds of a directive.
    pub fn within(&self, window: Option<u64>, now: Instant) -> bool {
        !self.directives.must_revalidate
            && !self.directives.no_cache
            && window.is_some_and(|w| self.staleness(now) <= Duration::from_secs(w))
    }

    /// The validators a revalidation sends: (`If-None-Match`, `If-Modified-Since`).
    pub fn validators(&self) -> (Option<&[u8]>, Option<&[u8]>) {
        (policy::header(&self.headers, "etag"), policy::header(&self.headers, "last-modified"))
    }

    /// A copy refreshed by a 304's headers (RFC 9111 §4.3.4): each header the
    /// 304 carries replaces the stored ones of that name; its age is the
    /// 304's (its `Age`, `Date` and delay).
    pub fn refreshed(&self, update: &[(String, Vec<u8>)], requested: SystemTime, config: &CacheConfig) -> Entry {
        let mut headers: Headers =
            self.headers.iter().filter(|(n, _)| !update.iter().any(|(u, _)| u == n)).cloned().collect();
        headers.extend(update.iter().cloned());
        let entry = Entry::new(
            self.status,
            headers,
            self.body.clone(),
            self.vary.clone(),
            requested,
            SystemTime::now(),
            config,
        );
        // The same stored response, confirmed: its answers so far still count.
        entry.hits.store(self.hits.load(Ordering::Relaxed), Ordering::Relaxed);
        entry
    }

    /// Freshness left (positive) or time since it went stale (negative), in seconds.
    pub fn fresh_for(&self, now: Instant) -> f64 {
        self.lifetime.as_secs_f64() - self.age(now).as_secs_f64()
    }

    fn bytes(&self) -> u64 {
        let head: usize = self.headers.iter().map(|(n, v)| n.len() + v.len() + 4).sum();
        let vary: usize = self.vary.iter().map(|(n, v)| n.len() + v.as_ref().map_or(0, Vec::len)).sum();
        (head + vary + self.body.len()) as u64 + ENTRY_OVERHEAD
    }

    /// Whether this variant was selected by the same request header values.
    fn matches(&self, request: &Selecting<'_>) -> bool {
        self.vary.iter().all(|(name, value)| request(name) == *value)
    }
}

/// The values of the request headers a `Vary` response header names, as
/// `request` normalises them.
pub fn vary_values(vary: &[u8], request: &Selecting<'_>) -> Vary {
    let mut names: Vec<String> = vary
        .split(|&b| b == b',')
        .map(|n| String::from_utf8_lossy(policy::trim(n)).to_ascii_lowercase())
        .filter(|n| !n.is_empty())
        .collect();
    names.sort();
    names.dedup();
    names.into_iter().map(|n| (n.clone(), request(&n))).collect()
}

/// Counters of one cache, read by the metrics exposition.
#[derive(Debug, Default)]
pub struct CacheStats {
    /// Requests answered from a fresh entry.
    pub hits: AtomicU64,
    /// Requests forwarded because nothing usable was stored.
    pub misses: AtomicU64,
    /// Requests answered from a stale entry (stale-while-revalidate, stale-if-error).
    pub stale: AtomicU64,
    /// Stale entries a server confirmed with 304.
    pub revalidated: AtomicU64,
    /// Entries pushed out to make room.
    pub evictions: AtomicU64,
    /// Bytes stored now.
    pub bytes: AtomicU64,
    /// Body bytes sent to clients from stored responses.
    pub served_bytes: AtomicU64,
    /// Partial responses (206) kept as pieces or combined into a stored one.
    pub pieces: AtomicU64,
}

/// The primary keys of one shard, least recently used first.
#[derive(Default)]
struct Shard {
    map: HashMap<String, Slot>,
    lru: BTreeMap<u64, String>,
    tick: u64,
    bytes: u64,
}

#[derive(Default)]
struct Slot {
    variants: Vec<Arc<Entry>>,
    /// Pieces of an incomplete response ([`partial`]), when any are held.
    partial: Option<Arc<Partial>>,
    used: u64,
    bytes: u64,
}

impl Slot {
    fn recount(&mut self) {
        self.bytes = self.variants.iter().map(|e| e.bytes()).sum::<u64>()
            + self.partial.as_ref().map_or(0, |p| p.bytes() + ENTRY_OVERHEAD);
    }
}

impl Shard {
    fn touch(&mut self, key: &str) {
        self.tick += 1;
        let tick = self.tick;
        if let Some(slot) = self.map.get_mut(key) {
            self.lru.remove(&slot.used);
            slot.used = tick;
            self.lru.insert(tick, key.to_string());
        }
    }

    fn remove(&mut self, key: &str) -> Option<Slot> {
        let slot = self.map.remove(key)?;
        self.lru.remove(&slot.used);
        self.bytes -= slot.bytes;
        Some(slot)
    }
}

/// A service's response cache.
pub struct Cache {
    /// The settings it was built with (a reload keeps the cache when they are unchanged).
    pub config: CacheConfig,
    shards: Vec<Mutex<Shard>>,
    share: u64,
    fetches: Mutex<HashMap<String, watch::Receiver<()>>>,
    /// Keys whose background revalidation is under way (stale-while-revalidate).
    refreshing: Mutex<HashSet<String>>,
    /// Counters for the metrics.
    pub stats: CacheStats,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache").field("config", &self.config).finish_non_exhaustive()
    }
}

/// What a lookup found for a request.
pub enum Found {
    /// A variant for this request.
    Entry(Arc<Entry>),
    /// Nothing usable.
    Nothing,
}

/// The right to fetch a primary key for the waiters on it: when dropped
/// (stored or failed), they are woken to look again.
pub struct Fetch<'a> {
    cache: &'a Cache,
    key: String,
    _done: watch::Sender<()>,
}

impl Drop for Fetch<'_> {
    fn drop(&mut self) {
        lock(&self.cache.fetches).remove(&self.key);
    }
}

/// A background revalidation of one key under way: at most one per key in
/// the whole process (the cache is shared by every worker); dropping it ends it.
pub struct Refresh {
    cache: Arc<Cache>,
    key: String,
}

impl Drop for Refresh {
    fn drop(&mut self) {
        lock(&self.cache.refreshing).remove(&self.key);
    }
}

/// Starts the background revalidation of `key`, unless one is under way.
pub fn begin_refresh(cache: &Arc<Cache>, key: &str) -> Option<Refresh> {
    lock(&cache.refreshing).insert(key.to_string()).then(|| Refresh { cache: cache.clone(), key: key.to_string() })
}

/// What a miss does about concurrent misses for its key.
pub enum Coalesce<'a> {
    /// This request fetches; others wait for it.
    Lead(Fetch<'a>),
    /// Another request is fetching: wait on this, then look again.
    Wait(watch::Receiver<()>),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a cache lock leaves maps that are still
    // consistent enough to read (each update is a few map operations).
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Cache {
    /// An empty cache for `config`.
    pub fn new(config: &CacheConfig) -> Cache {
        let by_object = config.size / config.max_object.max(1);
        let shards = usize::try_from(by_object).unwrap_or(MAX_SHARDS).clamp(1, MAX_SHARDS);
        Cache {
            config: config.clone(),
            shards: (0..shards).map(|_| Mutex::new(Shard::default())).collect(),
            share: config.size / shards as u64,
            fetches: Mutex::new(HashMap::new()),
            refreshing: Mutex::new(HashSet::new()),
            stats: CacheStats::default(),
        }
    }

    fn shard(&self, key: &str) -> &Mutex<Shard> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut h);
        &self.shards[(h.finish() % self.shards.len() as u64) as usize]
    }

    /// The variant of `key` selected by the request's header values.
    pub fn lookup(&self, key: &str, request: &Selecting<'_>) -> Found {
        let mut shard = lock(self.shard(key));
        let found = shard.map.get(key).and_then(|slot| slot.variants.iter().find(|e| e.matches(request)).cloned());
        match found {
            Some(entry) => {
                shard.touch(key);
                Found::Entry(entry)
            }
            None => Found::Nothing,
        }
    }

    /// Registers a fetch of `key`, or hands back what to wait on when one is
    /// already under way.
    pub fn coalesce(&self, key: &str) -> Coalesce<'_> {
        let mut fetches = lock(&self.fetches);
        if let Some(rx) = fetches.get(key) {
            return Coalesce::Wait(rx.clone());
        }
        let (tx, rx) = watch::channel(());
        fetches.insert(key.to_string(), rx);
        Coalesce::Lead(Fetch { cache: self, key: key.to_string(), _done: tx })
    }

    /// Stores `entry` as the variant of `key` for its `vary` values, evicting
    /// least recently used keys of its shard until it fits. An entry larger
    /// than `max_object` or than a shard's share is not stored.
    pub fn insert(&self, key: &str, entry: Entry) {
        self.insert_shared(key, Arc::new(entry));
    }

    /// [`insert`](Self::insert) for an entry the caller keeps using.
    pub fn insert_shared(&self, key: &str, entry: Arc<Entry>) {
        let bytes = entry.bytes();
        if bytes > self.share || entry.body.len() as u64 > self.config.max_object {
            return;
        }
        let mut shard = lock(self.shard(key));
        let mut slot = shard.remove(key).unwrap_or_default();
        slot.variants.retain(|e| e.vary != entry.vary);
        slot.variants.push(entry);
        // A complete response supersedes any pieces held for the key.
        slot.partial = None;
        slot.recount();
        self.place(&mut shard, key, slot);
        drop(shard);
        self.recount();
    }

    /// Puts `slot` back as the most recently used key of `shard`, evicting
    /// least recently used keys until it fits.
    fn place(&self, shard: &mut Shard, key: &str, mut slot: Slot) {
        let mut evicted = 0;
        while shard.bytes + slot.bytes > self.share {
            let Some((_, oldest)) = shard.lru.pop_first() else { break };
            if let Some(old) = shard.map.remove(&oldest) {
                shard.bytes -= old.bytes;
                evicted += 1;
            }
        }
        if shard.bytes + slot.bytes > self.share {
            // The key's other variants alone exceed the share: keep only the newest.
            let newest = slot.variants.pop();
            slot.variants = newest.into_iter().collect();
            slot.partial = None;
            slot.recount();
        }
        shard.tick += 1;
        slot.used = shard.tick;
        shard.bytes += slot.bytes;
        let used = slot.used;
        shard.lru.insert(used, key.to_string());
        shard.map.insert(key.to_string(), slot);
        self.stats.evictions.fetch_add(evicted, Ordering::Relaxed);
    }

    /// Adds a partial response's piece to what is held for `key` (RFC 9111
    /// §3.4). Returns the pieces combined so far; when they make the whole
    /// representation ([`Partial::complete`]) the caller stores it as a
    /// complete response, which drops the pieces.
    pub fn combine(&self, key: &str, piece: Piece) -> Arc<Partial> {
        let held = lock(self.shard(key)).map.get(key).and_then(|s| s.partial.clone());
        // Built outside the lock: merging may copy up to `max_object` bytes.
        let combined = Arc::new(Partial::combine(held.as_deref(), piece));
        self.stats.pieces.fetch_add(1, Ordering::Relaxed);
        if combined.complete().is_none() {
            let mut shard = lock(self.shard(key));
            let mut slot = shard.remove(key).unwrap_or_default();
            slot.partial = Some(combined.clone());
            slot.recount();
            self.place(&mut shard, key, slot);
            drop(shard);
            self.recount();
        }
        combined
    }

    /// Removes `key` (all its variants); with `prefix`, every key starting
    /// with it. Returns how many keys were removed.
    pub fn purge(&self, key: &str, prefix: bool) -> u64 {
        let mut purged = 0;
        if !prefix {
            purged += u64::from(lock(self.shard(key)).remove(key).is_some());
        } else {
            for shard in &self.shards {
                let mut shard = lock(shard);
                let keys: Vec<String> = shard.map.keys().filter(|k| k.starts_with(key)).cloned().collect();
                for k in keys {
                    purged += u64::from(shard.remove(&k).is_some());
                }
            }
        }
        self.recount();
        purged
    }

    fn recount(&self) {
        let total: u64 = self.shards.iter().map(|s| lock(s).bytes).sum();
        self.stats.bytes.store(total, Ordering::Relaxed);
    }
}

/// The cache key of a request from the configured parts: e.g. with the
/// default parts, `example.com/a/b?x=1`.
pub fn key(parts: &[CacheKeyPart], scheme: &str, method: &str, host: &str, path: &str, query: Option<&str>) -> String {
    let mut key = String::with_capacity(host.len() + path.len() + query.map_or(0, str::len) + 16);
    for part in parts {
        match part {
            CacheKeyPart::Scheme => {
                key.push_str(scheme);
                key.push_str("://");
            }
            CacheKeyPart::Method => {
                // HEAD is answered from GET's entry: both share a key.
                key.push_str(if method == "HEAD" { "GET" } else { method });
                key.push(' ');
            }
            CacheKeyPart::Host => key.push_str(host),
            CacheKeyPart::Path => key.push_str(path),
            CacheKeyPart::Query => {
                if let Some(q) = query {
                    key.push('?');
                    key.push_str(q);
                }
            }
        }
    }
    key
}

/// Writes the response head of a hit through the client's head writer
/// (HTTP/1.1 bytes, or an HTTP/2 and HTTP/3 header list): status, stored
/// headers, `Age`, `Content-Length`, and the connection headers the caller
/// decides.
pub fn hit_head<W: HeadWriter>(w: &mut W, entry: &Entry, age: Duration, status: u16, close: bool, keep_alive_10: bool) {
    let length = (status != 304 && status != 204).then_some(entry.body.len() as u64);
    let head = Head { status, length, drop_content_type: false, extra: &[] };
    write_head(w, entry, age, &head, close, keep_alive_10);
}

/// What a head written from a stored entry says beyond the entry's headers.
pub struct Head<'a> {
    /// Status code.
    pub status: u16,
    /// `Content-Length`, when there is one.
    pub length: Option<u64>,
    /// Leave the stored `Content-Type` out (a multipart/byteranges answer has its own).
    pub drop_content_type: bool,
    /// Further fields, names lower case (`content-range`, a multipart `content-type`).
    pub extra: &'a [(&'a str, &'a [u8])],
}

/// Writes a response head from a stored entry through a head writer: status
/// (with the standard reason phrase), stored headers (parsed once, when the
/// entry was stored: no framing or connection fields among them), `Age`,
/// what `head` adds, and the connection headers the caller decides (which a
/// header list leaves out).
pub fn write_head<W: HeadWriter>(
    w: &mut W,
    entry: &Entry,
    age: Duration,
    head: &Head<'_>,
    close: bool,
    keep_alive_10: bool,
) {
    w.start(head.status, b"");
    for (name, value) in &entry.headers {
        if !(head.drop_content_type && name == "content-type") {
            w.field(name.as_bytes(), value);
        }
    }
    w.field(b"age", itoa::Buffer::new().format(age.as_secs()).as_bytes());
    for (name, value) in head.extra {
        w.field(name.as_bytes(), value);
    }
    if let Some(length) = head.length {
        w.field(b"content-length", itoa::Buffer::new().format(length).as_bytes());
    }
    if close {
        w.field(b"connection", b"close");
    } else if keep_alive_10 {
        w.field(b"connection", b"keep-alive");
    }
    w.end();
}

/// Whether a client's own conditional request is satisfied by `entry`, so
/// that the cache answers 304 itself ([`policy::not_modified`]).
pub fn not_modified(entry: &Entry, if_none_match: Option<&[u8]>, if_modified_since: Option<&[u8]>) -> bool {
    policy::not_modified(&entry.headers, entry.received_at, if_none_match, if_modified_since)
}

#[cfg(test)]
mod tests;
