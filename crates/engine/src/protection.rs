//! Client protection: allow/deny lists, and per-client connection caps and
//! rate limits, shared by every worker of a service.
//!
//! A service with a `protection` table gets one [`Guard`]; one without has
//! none, and its connections never touch this module. The address lists are
//! immutable and read without a lock. The counters live in a table keyed by
//! client address, split into [`SHARDS`] mutex-protected shards so workers
//! rarely wait on one another; each lock is held for a hash lookup and a few
//! integer operations.
//!
//! Rates are a token bucket written as GCRA (the generic cell rate
//! algorithm): per limit and client one "theoretical arrival time" (TAT). An
//! event at `now` is allowed when `TAT - now <= per - per/count` (at most
//! `count` in a burst) and moves the TAT on by `per/count`; a refused event
//! changes nothing, and the wait until the next allowed one is exact (it gives
//! `Retry-After`). Unlike a fixed window this never lets 2×`count` through
//! around a window's edge, and it costs one integer per limit and client.
//!
//! Invariants: the table never holds more than about `table_size` entries
//! (each shard holds at most its share). When a shard is full, entries at
//! rest (no connection open, every bucket full again) are dropped first, then
//! the entry seen longest ago, even with connections open: an attacker with
//! more addresses than the table can hold loses a count, no client is refused
//! for want of room. A [`Slot`] whose entry was evicted releases nothing, or
//! one count of a newer entry of the same address (never below zero): after
//! an eviction the cap errs towards letting a client in, never towards
//! refusing it.
//!
//! With high availability (`[cluster]`, [`Guard::with_outbox`]) the rate
//! buckets of clients near their limits go to the peers ([`crate::peers`]),
//! so a failover does not reset a limited client; connection counts stay
//! local (connections do not move with the address).

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use switchyard_config::{Cidr, Protection, Rate};

use crate::replica::{Outbox, RateUpdate, Update};

/// Shards of the client table.
pub const SHARDS: usize = 16;

pub use switchyard_http::error::Refusal;

/// A client's counters.
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Connections open now.
    open: u32,
    /// TATs of the connection and request buckets, in nanoseconds since the guard's epoch.
    connection_tat: u64,
    request_tat: u64,
    /// Last event, same clock.
    seen: u64,
}

impl Entry {
    /// No connection open and both buckets full: forgetting it changes nothing.
    fn at_rest(&self, now: u64) -> bool {
        self.open == 0 && self.connection_tat <= now && self.request_tat <= now
    }
}

/// One shard of the client table.
#[derive(Debug, Default)]
struct Shard {
    map: HashMap<IpAddr, Entry>,
}

/// A service's protection: its settings and its client table.
#[derive(Debug)]
pub struct Guard {
    /// The settings it was built from (a reload keeps the table while they are equal).
    pub config: Protection,
    shards: Box<[Mutex<Shard>]>,
    per_shard: usize,
    hasher: RandomState,
    epoch: Instant,
    /// Where rate-limit buckets go to reach the other nodes, with the
    /// service's name; `None` on a single node.
    outbox: Option<(Arc<Outbox>, Arc<str>)>,
}

/// One of a client's `max_connections_per_client` connections; released on drop.
#[derive(Debug)]
pub struct Slot {
    guard: Arc<Guard>,
    ip: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut shard = self.guard.shard(self.ip);
        if let Some(e) = shard.map.get_mut(&self.ip) {
            e.open = e.open.saturating_sub(1);
        }
    }
}

impl Guard {
    /// A guard with an empty table.
    pub fn new(config: &Protection) -> Self {
        let per_shard = config.table_size.div_ceil(SHARDS).max(1);
        Guard {
            config: config.clone(),
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            per_shard,
            hasher: RandomState::new(),
            epoch: Instant::now(),
            outbox: None,
        }
    }

    /// This guard, handing the rate-limit buckets of service `service` to
    /// `outbox` (high availability).
    pub fn with_outbox(mut self, outbox: Option<Arc<Outbox>>, service: &str) -> Self {
        self.outbox = outbox.map(|o| (o, Arc::from(service)));
        self
    }

    /// Whether the address lists let `ip` in: not denied, and allowed when there is an allow list.
    pub fn permits(&self, ip: IpAddr) -> bool {
        let c = &self.config;
        !c.deny.iter().any(|n| n.contains(ip)) && (c.allow.is_empty() || c.allow.iter().any(|n| n.contains(ip)))
    }

    /// Whether `peer` is a trusted front proxy whose client-address header is believed.
    pub fn trusts(&self, peer: IpAddr) -> bool {
        self.config.client_address_header.as_ref().is_some_and(|h| h.trusted.iter().any(|n| n.contains(peer)))
    }

    /// A new connection from `ip`: the address lists, then the connection
    /// rate, then the connection cap. `Ok(Some(slot))` holds a cap slot for
    /// the connection's life.
    pub fn admit_connection(self: &Arc<Self>, ip: IpAddr, now: Instant) -> Result<Option<Slot>, Refusal> {
        let ip = canonical(ip);
        if !self.permits(ip) {
            return Err(Refusal::Denied);
        }
        let c = &self.config;
        if c.connection_rate.is_none() && c.max_connections_per_client.is_none() {
            return Ok(None);
        }
        let now = self.nanos(now);
        let mut shard = self.shard(ip);
        let entry = self.entry(&mut shard, ip, now);
        if let Some(max) = c.max_connections_per_client {
            if entry.open >= max {
                return Err(Refusal::TooManyConnections);
            }
        }
        if let Some(rate) = c.connection_rate {
            take(&mut entry.connection_tat, rate, now).map_err(|_| Refusal::ConnectionRate)?;
        }
        let counted = c.max_connections_per_client.is_some();
        if counted {
            entry.open += 1;
        }
        let after = *entry;
        drop(shard);
        self.hand_over(ip, &after, now);
        Ok(counted.then(|| Slot { guard: self.clone(), ip }))
    }

    /// A new HTTP request from `ip` (the request rate only; the lists were
    /// checked with the connection, or are checked by the caller for an
    /// address taken from a header).
    pub fn admit_request(&self, ip: IpAddr, now: Instant) -> Result<(), Refusal> {
        let Some(rate) = self.config.request_rate else {
            return Ok(());
        };
        let ip = canonical(ip);
        let now = self.nanos(now);
        let mut shard = self.shard(ip);
        let entry = self.entry(&mut shard, ip, now);
        take(&mut entry.request_tat, rate, now).map_err(|wait| {
            let secs = wait.div_ceil(1_000_000_000).max(1);
            Refusal::RequestRate(u32::try_from(secs).unwrap_or(u32::MAX))
        })?;
        let after = *entry;
        drop(shard);
        self.hand_over(ip, &after, now);
        Ok(())
    }

    /// Gives a client's buckets to the peers after an allowed event, when one
    /// of them is now more than half used: a client far below its limits
    /// costs the other nodes nothing, one near them is limited there too
    /// after a failover. A refused event changes no bucket and sends nothing,
    /// so a client sends at most as many updates as its limits let through.
    fn hand_over(&self, ip: IpAddr, entry: &Entry, now: u64) {
        let Some((outbox, service)) = &self.outbox else { return };
        let c = &self.config;
        let used = |tat: u64, rate: Option<Rate>| {
            rate.is_some_and(|r| tat.saturating_sub(now).saturating_mul(2) > tolerance(r))
        };
        if !used(entry.connection_tat, c.connection_rate) && !used(entry.request_tat, c.request_rate) {
            return;
        }
        let ahead = |tat: u64| Duration::from_nanos(tat.saturating_sub(now));
        let at = self.epoch + Duration::from_nanos(now);
        outbox.push(Update::Rate(RateUpdate {
            service: service.clone(),
            client: ip,
            connection: ahead(entry.connection_tat),
            request: ahead(entry.request_tat),
            at,
            queued: Instant::now(),
        }));
    }

    /// Merges a peer's buckets for `ip` (each as time ahead of `now`): the
    /// later theoretical arrival time wins, so a replicated bucket is never
    /// emptier than the local one. Connection counts are not touched.
    pub fn merge_remote(&self, ip: IpAddr, connection: Duration, request: Duration, now: Instant) {
        if connection.is_zero() && request.is_zero() {
            return;
        }
        let ip = canonical(ip);
        let now = self.nanos(now);
        let nanos = |d: Duration| now.saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let mut shard = self.shard(ip);
        let entry = self.entry(&mut shard, ip, now);
        entry.connection_tat = entry.connection_tat.max(nanos(connection));
        entry.request_tat = entry.request_tat.max(nanos(request));
    }

    /// Every client whose buckets are not full, with each bucket's
    /// theoretical arrival time less `now` (a full copy for a peer).
    pub fn dump(&self, now: Instant) -> Vec<(IpAddr, Duration, Duration)> {
        let now = self.nanos(now);
        let ahead = |tat: u64| Duration::from_nanos(tat.saturating_sub(now));
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let shard = lock(shard);
            let busy = shard.map.iter().filter(|(_, e)| e.connection_tat > now || e.request_tat > now);
            out.extend(busy.map(|(ip, e)| (*ip, ahead(e.connection_tat), ahead(e.request_tat))));
        }
        out
    }

    /// Drops every entry at rest (called about once a second by one worker).
    pub fn expire(&self, now: Instant) {
        let now = self.nanos(now);
        for shard in self.shards.iter() {
            lock(shard).map.retain(|_, e| !e.at_rest(now));
        }
    }

    /// Client addresses tracked now.
    pub fn tracked(&self) -> usize {
        self.shards.iter().map(|s| lock(s).map.len()).sum()
    }

    fn nanos(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    fn shard(&self, ip: IpAddr) -> MutexGuard<'_, Shard> {
        let i = usize::try_from(self.hasher.hash_one(ip)).unwrap_or(0) % SHARDS;
        lock(&self.shards[i])
    }

    /// The entry of `ip`, made room for and created when absent.
    fn entry<'s>(&self, shard: &'s mut Shard, ip: IpAddr, now: u64) -> &'s mut Entry {
        if !shard.map.contains_key(&ip) && shard.map.len() >= self.per_shard {
            shard.map.retain(|_, e| !e.at_rest(now));
            if shard.map.len() >= self.per_shard {
                let oldest = shard.map.iter().min_by_key(|(_, e)| e.seen).map(|(k, _)| *k);
                if let Some(k) = oldest {
                    shard.map.remove(&k);
                }
            }
        }
        let e = shard.map.entry(ip).or_insert(Entry { open: 0, connection_tat: 0, request_tat: 0, seen: now });
        e.seen = now;
        e
    }
}

/// One key per client: an IPv4-mapped IPv6 address is its IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    // A panic while holding the lock leaves counters, never broken invariants.
    shard.lock().unwrap_or_else(PoisonError::into_inner)
}

/// GCRA's interval (ns between two events at the sustained rate) and
/// tolerance (how far the TAT may run ahead of now: the burst).
fn interval(rate: Rate) -> u64 {
    let per = u64::try_from(rate.per.as_nanos()).unwrap_or(u64::MAX);
    (per / u64::from(rate.count.max(1))).max(1)
}

fn tolerance(rate: Rate) -> u64 {
    u64::try_from(rate.per.as_nanos()).unwrap_or(u64::MAX).saturating_sub(interval(rate))
}

/// GCRA: one event at `now` (ns) against the bucket whose TAT is `tat`.
/// `Err(ns)`: refused, allowed again in `ns`.
fn take(tat: &mut u64, rate: Rate, now: u64) -> Result<(), u64> {
    let (interval, tolerance) = (interval(rate), tolerance(rate));
    let start = (*tat).max(now);
    let ahead = start - now;
    if ahead > tolerance {
        return Err(ahead - tolerance);
    }
    *tat = start.saturating_add(interval);
    Ok(())
}

/// The client address a trusted front proxy reports: walking the header's
/// comma-separated entries from the last (nearest) one, the first that is
/// not itself a trusted proxy. `None` when the values hold no usable address
/// (the connection's peer stands).
pub fn address_from_header<'a>(values: impl Iterator<Item = &'a [u8]>, trusted: &[Cidr]) -> Option<IpAddr> {
    let all: Vec<&[u8]> = values.collect();
    for value in all.iter().rev() {
        for item in value.rsplit(|&b| b == b',') {
            let text = std::str::from_utf8(item).ok()?.trim();
            let ip = parse_entry(text)?;
            if !trusted.iter().any(|n| n.contains(ip)) {
                return Some(ip);
            }
        }
    }
    None
}

/// One `X-Forwarded-For` entry: an address, possibly with a port (`1.2.3.4:5`, `[::1]:5`).
fn parse_entry(text: &str) -> Option<IpAddr> {
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(sa) = text.parse::<std::net::SocketAddr>() {
        return Some(sa.ip());
    }
    text.trim_start_matches('[').trim_end_matches(']').parse().ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::time::Duration;
    use switchyard_config::ClientAddressHeader;

    fn cidr(text: &str) -> Cidr {
        let (a, p) = text.split_once('/').unwrap();
        Cidr { addr: a.parse().unwrap(), prefix: p.parse().unwrap() }
    }

    fn config() -> Protection {
        Protection {
            max_connections_per_client: None,
            connection_rate: None,
            request_rate: None,
            allow: Vec::new(),
            deny: Vec::new(),
            client_address_header: None,
            table_size: 64,
        }
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn deny_wins_over_allow_and_an_allow_list_refuses_the_rest() {
        let g =
            Guard::new(&Protection { allow: vec![cidr("10.0.0.0/8")], deny: vec![cidr("10.6.0.0/16")], ..config() });
        assert!(g.permits(ip("10.1.2.3")));
        assert!(!g.permits(ip("10.6.2.3")));
        assert!(!g.permits(ip("192.0.2.1")));
        assert!(g.permits(ip("::ffff:10.1.2.3")));
    }

    #[test]
    fn a_rate_allows_its_count_then_refills_evenly() {
        let rate = Rate { count: 3, per: Duration::from_secs(3) };
        let g = Guard::new(&Protection { request_rate: Some(rate), ..config() });
        let t0 = Instant::now();
        let a = ip("192.0.2.1");
        for _ in 0..3 {
            assert_eq!(g.admit_request(a, t0), Ok(()));
        }
        assert_eq!(g.admit_request(a, t0), Err(Refusal::RequestRate(1)));
        // Another client has its own bucket.
        assert_eq!(g.admit_request(ip("192.0.2.2"), t0), Ok(()));
        // One token back after per/count.
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(g.admit_request(a, t1), Ok(()));
        assert!(g.admit_request(a, t1).is_err());
        // Refused events do not push the refill further away.
        let t4 = t0 + Duration::from_secs(4);
        for _ in 0..3 {
            assert_eq!(g.admit_request(a, t4), Ok(()));
        }
    }

    #[test]
    fn connection_slots_are_released_on_drop() {
        let g = Arc::new(Guard::new(&Protection { max_connections_per_client: Some(2), ..config() }));
        let now = Instant::now();
        let a = ip("192.0.2.1");
        let s1 = g.admit_connection(a, now).unwrap();
        let _s2 = g.admit_connection(a, now).unwrap();
        assert_eq!(g.admit_connection(a, now).unwrap_err(), Refusal::TooManyConnections);
        assert!(g.admit_connection(ip("192.0.2.2"), now).is_ok());
        drop(s1);
        assert!(g.admit_connection(a, now).unwrap().is_some());
    }

    #[test]
    fn the_table_stays_bounded_and_expires_entries_at_rest() {
        let rate = Rate { count: 1, per: Duration::from_secs(10) };
        let g = Guard::new(&Protection { request_rate: Some(rate), table_size: 32, ..config() });
        let now = Instant::now();
        for i in 0..10_000u32 {
            let _ = g.admit_request(IpAddr::V4(i.into()), now);
        }
        assert!(g.tracked() <= 32, "{}", g.tracked());
        g.expire(now + Duration::from_secs(11));
        assert_eq!(g.tracked(), 0);
    }

    #[test]
    fn the_header_address_is_the_last_untrusted_entry() {
        let trusted = [cidr("10.0.0.0/8")];
        let pick = |values: &[&str]| address_from_header(values.iter().map(|v| v.as_bytes()), &trusted);
        assert_eq!(pick(&["192.0.2.1, 10.0.0.2"]), Some(ip("192.0.2.1")));
        assert_eq!(pick(&["203.0.113.9, 192.0.2.1"]), Some(ip("192.0.2.1")));
        assert_eq!(pick(&["192.0.2.1", "10.1.1.1"]), Some(ip("192.0.2.1")));
        assert_eq!(pick(&["[2001:db8::1]:443"]), Some(ip("2001:db8::1")));
        assert_eq!(pick(&["10.0.0.1"]), None);
        assert_eq!(pick(&["garbage, 10.0.0.1"]), None);
        let g = Guard::new(&Protection {
            client_address_header: Some(ClientAddressHeader {
                name: "x-forwarded-for".into(),
                trusted: trusted.to_vec(),
            }),
            ..config()
        });
        assert!(g.trusts(ip("10.9.9.9")));
        assert!(!g.trusts(ip("192.0.2.1")));
    }

    #[test]
    fn replicated_buckets_keep_the_later_arrival_time() {
        let rate = Rate { count: 4, per: Duration::from_secs(3600) };
        let g = Guard::new(&Protection { request_rate: Some(rate), ..config() });
        let (now, client) = (Instant::now(), ip("10.0.0.9"));
        g.merge_remote(client, Duration::ZERO, Duration::ZERO, now);
        assert_eq!(g.tracked(), 0, "full buckets from a peer create no entry");
        // A peer's client spent its four requests: the bucket is an hour ahead.
        g.merge_remote(client, Duration::ZERO, Duration::from_secs(3600), now);
        assert!(g.admit_request(client, now).is_err(), "the replicated empty bucket refuses here too");
        // An older, emptier update never loosens it.
        g.merge_remote(client, Duration::ZERO, Duration::from_secs(60), now);
        assert!(g.admit_request(client, now).is_err());
        assert_eq!(g.dump(now), vec![(client, Duration::ZERO, Duration::from_secs(3600))]);
        let later = now + Duration::from_secs(15 * 60);
        assert!(g.admit_request(client, later).is_ok(), "one request back after per / count");
    }
}
