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
//!   set of request-header values its `Vary` selects; `Accept-Encoding` is
//!   normalised first ([`policy::normalise_accept_encoding`]).
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
//!   again. A `watch` channel wakes waiters on any worker's runtime.
//!
//! Invariants: a response is never stored before its body is complete; an
//! entry is immutable once stored (a 304 replaces it by a refreshed copy);
//! every lock is held only for map operations, never across an `.await`.

pub use switchyard_http::cache_policy as policy;
mod tee;

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use switchyard_config::{Cache as CacheConfig, CacheKeyPart};
use tokio::sync::watch;

use self::policy::Directives;
pub use self::tee::{parse_captured, parse_head, Capture, Tee};

/// Response headers as stored: (lower-case name, value) pairs in order.
pub type Headers = Vec<(String, Vec<u8>)>;

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
    /// Request header values this variant was selected by (`Vary`), names lower case.
    pub vary: Vec<(String, Vec<u8>)>,
    /// When the response was received, monotonic (for the resident time).
    pub received: Instant,
    /// `corrected_initial_age` (RFC 9111 §4.2.3).
    pub initial_age: Duration,
    /// Freshness lifetime.
    pub lifetime: Duration,
    /// The response's Cache-Control directives.
    pub directives: Directives,
}

impl Entry {
    /// Builds an entry from a stored head and body; `requested` and
    /// `received` are the wall-clock times of the request and response.
    pub fn new(
        status: u16,
        headers: Vec<(String, Vec<u8>)>,
        body: Bytes,
        vary: Vec<(String, Vec<u8>)>,
        requested: SystemTime,
        received: SystemTime,
        heuristic: bool,
    ) -> Entry {
        let directives = Directives::parse(policy::headers(&headers, "cache-control"));
        let lifetime = policy::freshness(&directives, &headers, received, heuristic).unwrap_or_default();
        let initial_age = policy::initial_age(&headers, requested, received);
        Entry { status, headers, body, vary, received: Instant::now(), initial_age, lifetime, directives }
    }

    /// The entry's current age (RFC 9111 §4.2.3).
    pub fn age(&self, now: Instant) -> Duration {
        self.initial_age + now.saturating_duration_since(self.received)
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
    /// 304 carries replaces the stored ones of that name.
    pub fn refreshed(&self, update: &[(String, Vec<u8>)], requested: SystemTime, heuristic: bool) -> Entry {
        let mut headers: Vec<(String, Vec<u8>)> =
            self.headers.iter().filter(|(n, _)| !update.iter().any(|(u, _)| u == n)).cloned().collect();
        headers.extend(update.iter().cloned());
        Entry::new(self.status, headers, self.body.clone(), self.vary.clone(), requested, SystemTime::now(), heuristic)
    }

    fn bytes(&self) -> u64 {
        let head: usize = self.headers.iter().map(|(n, v)| n.len() + v.len() + 4).sum();
        let vary: usize = self.vary.iter().map(|(n, v)| n.len() + v.len()).sum();
        (head + vary + self.body.len()) as u64 + ENTRY_OVERHEAD
    }

    /// Whether this variant was selected by the same request header values.
    fn matches(&self, request: &dyn Fn(&str) -> Vec<u8>) -> bool {
        self.vary.iter().all(|(name, value)| request(name) == *value)
    }
}

/// The values of the request headers a `Vary` response header names,
/// `Accept-Encoding` normalised.
pub fn vary_values(vary: &[u8], request: &dyn Fn(&str) -> Vec<u8>) -> Vec<(String, Vec<u8>)> {
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
}

/// The primary keys of one shard, least recently used first.
#[derive(Default)]
struct Shard {
    map: HashMap<String, Slot>,
    lru: BTreeMap<u64, String>,
    tick: u64,
    bytes: u64,
}

struct Slot {
    variants: Vec<Arc<Entry>>,
    used: u64,
    bytes: u64,
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
            stats: CacheStats::default(),
        }
    }

    fn shard(&self, key: &str) -> &Mutex<Shard> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut h);
        &self.shards[(h.finish() % self.shards.len() as u64) as usize]
    }

    /// The variant of `key` selected by the request's header values.
    pub fn lookup(&self, key: &str, request: &dyn Fn(&str) -> Vec<u8>) -> Found {
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
        let mut slot = shard.remove(key).unwrap_or(Slot { variants: Vec::new(), used: 0, bytes: 0 });
        slot.variants.retain(|e| e.vary != entry.vary);
        slot.variants.push(entry);
        slot.bytes = slot.variants.iter().map(|e| e.bytes()).sum();
        let mut evicted = 0;
        while shard.bytes + slot.bytes > self.share {
            let Some((_, oldest)) = shard.lru.pop_first() else { break };
            if let Some(old) = shard.map.remove(&oldest) {
                shard.bytes -= old.bytes;
                evicted += 1;
            }
        }
        if shard.bytes + slot.bytes > self.share {
            // The key's other variants alone exceed the share: keep only the new one.
            let newest = slot.variants.pop();
            slot.variants = newest.into_iter().collect();
            slot.bytes = slot.variants.iter().map(|e| e.bytes()).sum();
        }
        shard.tick += 1;
        slot.used = shard.tick;
        shard.bytes += slot.bytes;
        let used = slot.used;
        shard.lru.insert(used, key.to_string());
        shard.map.insert(key.to_string(), slot);
        drop(shard);
        self.stats.evictions.fetch_add(evicted, Ordering::Relaxed);
        self.recount();
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

/// Writes the response head of a hit: status line, stored headers, `Age`,
/// `Content-Length`, and the connection headers the caller decides.
pub fn hit_head(out: &mut Vec<u8>, entry: &Entry, age: Duration, status: u16, close: bool, keep_alive_10: bool) {
    out.clear();
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
    out.push(b' ');
    out.extend_from_slice(switchyard_http::error::reason_phrase(status).as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in &entry.headers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"age: ");
    out.extend_from_slice(itoa::Buffer::new().format(age.as_secs()).as_bytes());
    out.extend_from_slice(b"\r\n");
    if status != 304 && status != 204 {
        out.extend_from_slice(b"content-length: ");
        out.extend_from_slice(itoa::Buffer::new().format(entry.body.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    } else if keep_alive_10 {
        out.extend_from_slice(b"connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// Whether a client's own conditional request is satisfied by `entry`
/// (RFC 9110 §13.1.2, §13.1.3): the cache then answers 304 itself.
pub fn not_modified(entry: &Entry, if_none_match: Option<&[u8]>, if_modified_since: Option<&[u8]>) -> bool {
    if let Some(inm) = if_none_match {
        let Some(etag) = policy::header(&entry.headers, "etag") else { return false };
        let weak = |t: &[u8]| t.strip_prefix(b"W/").unwrap_or(t).to_vec();
        let etag = weak(policy::trim(etag));
        return inm.split(|&b| b == b',').any(|t| {
            let t = policy::trim(t);
            t == b"*" || weak(t) == etag
        });
    }
    match (policy::date(if_modified_since), policy::date(policy::header(&entry.headers, "last-modified"))) {
        (Some(since), Some(modified)) => modified <= since,
        _ => false,
    }
}

#[cfg(test)]
mod tests;
