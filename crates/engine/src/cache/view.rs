//! What the admin view shows of a cache: its keys, by exact key or by
//! prefix, each with its variants' age, freshness left, size and hits, and
//! the pieces held of an incomplete response.
//!
//! A listing is a snapshot: each shard is locked once, only long enough to
//! clone the matching keys' entry handles (no body is copied); sorting and
//! formatting happen after.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{lock, Cache, Entry, Partial};

/// The keys a listing matched, in key order, at most the limit asked.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    /// The matching keys shown.
    pub keys: Vec<KeyView>,
    /// How many keys matched (more than `keys.len()` when the limit cut them).
    pub matched: u64,
}

/// One primary key.
#[derive(Debug, Clone)]
pub struct KeyView {
    /// The cache key.
    pub key: String,
    /// Its stored responses, one per `Vary` variant.
    pub variants: Vec<EntryView>,
    /// An incomplete response held: (body bytes held, complete length).
    pub partial: Option<(u64, u64)>,
}

/// One stored response.
#[derive(Debug, Clone)]
pub struct EntryView {
    /// Status code.
    pub status: u16,
    /// The request header values that select it (`Vary`), `None` for absent.
    pub vary: Vec<(String, Option<String>)>,
    /// Its current age (what a hit's `Age` says).
    pub age: Duration,
    /// Seconds of freshness left; negative: stale for that long.
    pub fresh_for: f64,
    /// Body bytes.
    pub size: u64,
    /// Bytes charged to the store (fields, body, bookkeeping).
    pub stored: u64,
    /// Times a client was answered from it.
    pub hits: u64,
}

impl EntryView {
    fn of(entry: &Entry, now: Instant) -> EntryView {
        let text = |v: &Option<Vec<u8>>| v.as_ref().map(|v| String::from_utf8_lossy(v).into_owned());
        EntryView {
            status: entry.status,
            vary: entry.vary.iter().map(|(n, v)| (n.clone(), text(v))).collect(),
            age: entry.age(now),
            fresh_for: entry.fresh_for(now),
            size: entry.body.len() as u64,
            stored: entry.bytes(),
            hits: entry.hits.load(Ordering::Relaxed),
        }
    }
}

impl Cache {
    /// The keys equal to `key`, or with `prefix` starting with it (an empty
    /// prefix: every key), sorted, at most `limit` of them.
    pub fn list(&self, key: &str, prefix: bool, limit: usize) -> Listing {
        type Found = (String, Vec<Arc<Entry>>, Option<Arc<Partial>>);
        let mut found: Vec<Found> = Vec::new();
        let mut take =
            |k: &String, slot: &super::Slot| found.push((k.clone(), slot.variants.clone(), slot.partial.clone()));
        if prefix {
            for shard in &self.shards {
                let shard = lock(shard);
                shard.map.iter().filter(|(k, _)| k.starts_with(key)).for_each(|(k, s)| take(k, s));
            }
        } else if let Some(slot) = lock(self.shard(key)).map.get(key) {
            take(&key.to_string(), slot);
        }
        let matched = found.len() as u64;
        found.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        found.truncate(limit);
        let now = Instant::now();
        let keys = found
            .into_iter()
            .map(|(key, variants, partial)| KeyView {
                key,
                variants: variants.iter().map(|e| EntryView::of(e, now)).collect(),
                partial: partial.map(|p| (p.held(), p.length)),
            })
            .collect();
        Listing { keys, matched }
    }

    /// Primary keys stored now (complete or partial).
    pub fn key_count(&self) -> u64 {
        self.shards.iter().map(|s| lock(s).map.len() as u64).sum()
    }
}
