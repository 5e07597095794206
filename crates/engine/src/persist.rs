//! Persistence (stickiness): sending a returning client to the server it had before.
//!
//! One [`PoolPersistence`] per pool that configures persistence, built with the
//! configuration and shared by every worker (`Send + Sync`). The pipeline uses it in its
//! *persistence* phase, after route and before pick:
//!
//! 1. [`lookup`](PoolPersistence::lookup) says which server the request sticks to, as an
//!    index into this configuration's `pool.servers`. The caller still checks that server
//!    is available (up, under its connection limit, not already tried); if not, it picks
//!    with the balancer as usual.
//! 2. Once a server has taken the request, [`learn`](PoolPersistence::learn) records it
//!    (stick tables) and [`set_cookie`](PoolPersistence::set_cookie) gives the
//!    `Set-Cookie` value to add to the response (cookie insertion). Both do nothing when
//!    the request already stuck to that server.
//!
//! The kinds, from the configuration's [`Persistence`]:
//!
//! - **cookie insert**: the response sets a cookie whose value is an opaque token of the
//!   server ([`switchyard_balance::cookie`]); tokens are precomputed per server, so
//!   reading one back is a comparison against that list, and a forged or stale value
//!   matches nothing. No state is kept per client;
//! - **source**: a stick table keyed by the client address (IPv4-mapped IPv6 addresses
//!   count as the IPv4 address);
//! - **header**: a stick table keyed by the first value of a request header;
//! - **cookie learn**: a stick table keyed by the value of the servers' own session
//!   cookie. A server's `Set-Cookie` for it is learned with
//!   [`learn_response`](PoolPersistence::learn_response); a request presenting the
//!   cookie looks its value up (and, when its server was unavailable, re-points it);
//! - **RDP cookie** and **SNI**: stick tables keyed by the `mstshash` cookie of an RDP
//!   connection request or the TLS server name, which the layer-4 relay reads from the
//!   connection's first bytes and hands in as a key
//!   ([`lookup_with`](PoolPersistence::lookup_with), [`learn_with`](PoolPersistence::learn_with)).
//!
//! Keys longer than [`MAX_HEADER_KEY`] bytes ([`MAX_NAME_KEY`] for server names) are
//! neither looked up nor learned, which bounds the memory a client can make a table hold.
//!
//! Tables store server *names*, so a reload that keeps the same kind and bounds reuses
//! the previous table (see [`PoolPersistence::new`]) and clients keep their servers.
//!
//! With high availability (`[cluster]`), a table built [`with_outbox`](PoolPersistence::with_outbox)
//! hands every learned entry, every removal and every refresh of an entry idle for
//! more than a quarter of its timeout to [`crate::peers`], which sends them to the
//! other node; that node takes them with [`merge_remote`](PoolPersistence::merge_remote)
//! (newest write wins). Handing over never blocks: a full queue drops and counts.
//!
//! Invariants: nothing here panics on request bytes; the request path takes one shard
//! lock per `lookup` or `learn` and allocates only when learning a new header key (and,
//! replicated, once per update handed to a peer).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use switchyard_balance::cookie::{self, CookieKey};
use switchyard_balance::SharedStickTable;
use switchyard_config::{CookieInsert, Persistence, Pool, StickTableSpec};

use crate::replica::{Outbox, StickUpdate, TableKind, Update};

/// Longest header value, cookie value or RDP cookie used as a stick-table key, in bytes.
pub const MAX_HEADER_KEY: usize = 128;
/// Longest TLS server name used as a stick-table key (a DNS name's longest), in bytes.
pub const MAX_NAME_KEY: usize = 253;

pub use switchyard_http::route::RequestFacts;

/// A request as a client address and a list of `(lower-case name, value)` headers.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    /// The client's address.
    pub client: IpAddr,
    /// Header fields in request order; names lower case.
    pub headers: &'a [(&'a str, &'a [u8])],
}

impl RequestFacts for Facts<'_> {
    fn client(&self) -> IpAddr {
        self.client
    }

    fn header_values<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'s [u8]> + 's {
        self.headers.iter().filter(move |(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| *v)
    }
}

/// One stick-table entry, for the admin API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryView {
    /// The key: a client address, or a header value with non-printable bytes escaped.
    pub key: String,
    /// Name of the server the key sticks to.
    pub server: Arc<str>,
    /// Time since the entry was last used.
    pub idle: Duration,
}

/// The persistence state of one pool.
pub struct PoolPersistence {
    pool: String,
    /// The pool name again, shared by the updates handed to peers.
    pool_name: Arc<str>,
    /// Server names by index in the pool this was built from.
    servers: Vec<Arc<str>>,
    state: State,
    /// Where learned entries go to reach the other nodes; `None` on a single node.
    outbox: Option<Arc<Outbox>>,
}

enum State {
    Cookie {
        /// Cookie name as sent (control characters and `;` removed).
        name: String,
        /// Token by server index.
        tokens: Vec<String>,
        /// Full `Set-Cookie` value by server index.
        set_cookie: Vec<String>,
    },
    Source {
        spec: StickTableSpec,
        table: Arc<SharedStickTable<IpAddr>>,
    },
    /// A table keyed by bytes of the request or connection.
    Keyed {
        key: Key,
        spec: StickTableSpec,
        table: Arc<SharedStickTable<Box<[u8]>>>,
    },
}

/// What keys a [`State::Keyed`] table.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Key {
    /// The first value of this request header (lower-case name).
    Header(String),
    /// The value of this cookie, set by the servers.
    CookieLearn(String),
    /// The `mstshash` cookie of an RDP connection request.
    Rdp,
    /// The TLS server name.
    Sni,
}

impl Key {
    fn of(persistence: &Persistence) -> Option<Key> {
        match persistence {
            Persistence::Header { name, .. } => Some(Key::Header(name.clone())),
            Persistence::CookieLearn { name, .. } => Some(Key::CookieLearn(name.clone())),
            Persistence::RdpCookie(_) => Some(Key::Rdp),
            Persistence::Sni(_) => Some(Key::Sni),
            Persistence::CookieInsert(_) | Persistence::Source(_) => None,
        }
    }

    fn max_len(&self) -> usize {
        match self {
            Key::Sni => MAX_NAME_KEY,
            _ => MAX_HEADER_KEY,
        }
    }
}

impl std::fmt::Debug for PoolPersistence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolPersistence").field("pool", &self.pool).field("kind", &self.kind()).finish_non_exhaustive()
    }
}

impl PoolPersistence {
    /// The persistence of `pool`, or `None` when it configures none.
    ///
    /// `previous` is the same pool's persistence in the configuration being replaced.
    /// Its table is reused when the pool name, the kind, the bounds (and for header
    /// persistence the header name) are unchanged, so entries survive the reload;
    /// entries naming servers the pool no longer has are dropped. Otherwise the table
    /// starts empty. Cookie tokens depend only on `key`, the pool and server names.
    pub fn new(pool: &Pool, key: &CookieKey, previous: Option<&PoolPersistence>) -> Option<PoolPersistence> {
        let servers: Vec<Arc<str>> = pool.servers.iter().map(|s| Arc::from(s.name.as_str())).collect();
        let previous = previous.filter(|p| p.pool == pool.name);
        let state = match pool.persistence.as_ref()? {
            Persistence::CookieInsert(spec) => cookie_state(spec, key, &pool.name, &servers),
            Persistence::Source(spec) => {
                let reused = previous.and_then(|p| match &p.state {
                    State::Source { spec: old, table } if old == spec => Some(table.clone()),
                    _ => None,
                });
                State::Source { spec: *spec, table: reused.unwrap_or_else(|| Arc::new(new_table(spec))) }
            }
            keyed @ (Persistence::Header { table: spec, .. }
            | Persistence::CookieLearn { table: spec, .. }
            | Persistence::RdpCookie(spec)
            | Persistence::Sni(spec)) => {
                let key = Key::of(keyed)?;
                let reused = previous.and_then(|p| match &p.state {
                    State::Keyed { key: old_key, spec: old, table } if old == spec && *old_key == key => {
                        Some(table.clone())
                    }
                    _ => None,
                });
                let table = reused.unwrap_or_else(|| Arc::new(new_table(spec)));
                State::Keyed { key, spec: *spec, table }
            }
        };
        let pool_name = Arc::from(pool.name.as_str());
        let this = PoolPersistence { pool: pool.name.clone(), pool_name, servers, state, outbox: None };
        for gone in previous.iter().flat_map(|p| &p.servers) {
            if !this.servers.contains(gone) {
                this.forget_server(gone);
            }
        }
        Some(this)
    }

    /// This table, handing what it learns to `outbox` (high availability).
    #[must_use]
    pub fn with_outbox(mut self, outbox: Option<Arc<Outbox>>) -> Self {
        self.outbox = outbox;
        self
    }

    /// The server this request sticks to: an index into the pool's servers, or `None`
    /// (no cookie or entry, an expired entry, a forged token, a server since removed).
    /// Refreshes the entry's last use. The caller checks the server is available.
    pub fn lookup(&self, req: &impl RequestFacts, now: Instant) -> Option<usize> {
        if let State::Cookie { name, tokens, .. } = &self.state {
            let mut presented = req.header_values("cookie").flat_map(|h| cookie_values(h, name.as_bytes()));
            return presented.find_map(|value| tokens.iter().position(|t| t.as_bytes() == value));
        }
        self.lookup_with(req.client(), self.request_key(req), now)
    }

    /// [`lookup`](Self::lookup) for a stick table, given the client's address and the
    /// key read from the request or connection (see [`request_key`](Self::request_key);
    /// the layer-4 relay passes the RDP cookie or server name). `None` for cookie insert.
    pub fn lookup_with(&self, client: IpAddr, key: Option<&[u8]>, now: Instant) -> Option<usize> {
        let (name, refreshed) = match &self.state {
            State::Cookie { .. } => return None,
            State::Source { spec, table } => {
                let client = client.to_canonical();
                let (name, idle) = table.get_idle(&client, now)?;
                let refreshed = stale(idle, spec).then(|| Box::from(ip_key(client).as_slice()));
                (name, refreshed)
            }
            State::Keyed { key: kind, spec, table } => {
                let key = bounded(key?, kind)?;
                let (name, idle) = table.get_idle(key, now)?;
                (name, stale(idle, spec).then(|| Box::from(key)))
            }
        };
        if let Some(key) = refreshed {
            self.hand_over(key, Some(name.clone()), now);
        }
        self.servers.iter().position(|s| *s == name)
    }

    /// The stick-table key an HTTP request carries: the header's first value (header
    /// persistence) or the session cookie's value (cookie learn), trimmed, non-empty
    /// and at most [`MAX_HEADER_KEY`] bytes. `None` for the other kinds.
    pub fn request_key<'r>(&'r self, req: &'r impl RequestFacts) -> Option<&'r [u8]> {
        let State::Keyed { key, .. } = &self.state else { return None };
        let value = match key {
            Key::Header(name) => req.header_values(name).next()?.trim_ascii(),
            Key::CookieLearn(name) => {
                let mut values = req.header_values("cookie").flat_map(|h| cookie_values(h, name.as_bytes()));
                values.find(|v| !v.is_empty())?
            }
            Key::Rdp | Key::Sni => return None,
        };
        bounded(value, key)
    }

    /// Records that server `chosen` (an index into the pool's servers) took the request.
    /// `looked_up` is what [`lookup`](Self::lookup) returned for it: when the request
    /// already stuck to `chosen` there is nothing to record. A no-op for cookie insert.
    pub fn learn(&self, req: &impl RequestFacts, chosen: usize, looked_up: Option<usize>, now: Instant) {
        self.learn_with(req.client(), self.request_key(req), chosen, looked_up, now);
    }

    /// [`learn`](Self::learn) given the client's address and the key, as in
    /// [`lookup_with`](Self::lookup_with).
    pub fn learn_with(
        &self,
        client: IpAddr,
        key: Option<&[u8]>,
        chosen: usize,
        looked_up: Option<usize>,
        now: Instant,
    ) {
        if looked_up == Some(chosen) {
            return;
        }
        let Some(server) = self.servers.get(chosen) else { return };
        match &self.state {
            State::Cookie { .. } => {}
            State::Source { table, .. } => {
                let client = client.to_canonical();
                table.insert(client, server.clone(), now);
                self.hand_over(Box::from(ip_key(client).as_slice()), Some(server.clone()), now);
            }
            State::Keyed { key: kind, table, .. } => {
                if let Some(key) = key.and_then(|k| bounded(k, kind)) {
                    table.insert(Box::from(key), server.clone(), now);
                    self.hand_over(Box::from(key), Some(server.clone()), now);
                }
            }
        }
    }

    /// Gives one change of this table to the peers; `server: None` is a removal.
    fn hand_over(&self, key: Box<[u8]>, server: Option<Arc<str>>, now: Instant) {
        let (Some(outbox), Some(kind)) = (&self.outbox, self.table_kind()) else { return };
        let pool = self.pool_name.clone();
        outbox.push(Update::Stick(StickUpdate { pool, kind, key, server, at: now, queued: Instant::now() }));
    }

    /// The cookie whose `Set-Cookie` in responses is to be learned (cookie learn only).
    pub fn learned_cookie(&self) -> Option<&str> {
        match &self.state {
            State::Keyed { key: Key::CookieLearn(name), .. } => Some(name),
            _ => None,
        }
    }

    /// Cookie learn: server `chosen` answered with this `Set-Cookie` value, to a
    /// request that presented `presented` (its [`request_key`](Self::request_key)).
    /// When the server sets the learned cookie to a usable value, that value now
    /// sticks to `chosen`. When it deletes the cookie (an empty value, or a `Max-Age`
    /// of zero or less), the value it names and the one the request presented leave
    /// the table. Other cookies, and other kinds, are ignored.
    pub fn learn_response(&self, set_cookie: &[u8], presented: Option<&[u8]>, chosen: usize, now: Instant) {
        let State::Keyed { key: key @ Key::CookieLearn(name), table, .. } = &self.state else { return };
        let Some(server) = self.servers.get(chosen) else { return };
        let mut parts = set_cookie.split(|&b| b == b';');
        let Some((cookie, value)) = parts.next().and_then(split_pair) else { return };
        if cookie != name.as_bytes() {
            return;
        }
        let deleted = value.is_empty()
            || parts.filter_map(split_pair).any(|(attr, v)| {
                attr.eq_ignore_ascii_case(b"max-age") && (v.starts_with(b"-") || v.iter().all(|&b| b == b'0'))
            });
        if deleted {
            for gone in [Some(value), presented].into_iter().flatten().filter_map(|k| bounded(k, key)) {
                if table.remove(gone) {
                    self.hand_over(Box::from(gone), None, now);
                }
            }
        } else if let Some(value) = bounded(value, key) {
            table.insert(Box::from(value), server.clone(), now);
            self.hand_over(Box::from(value), Some(server.clone()), now);
        }
    }

    /// The `Set-Cookie` value to add to the response when server `chosen` took the
    /// request: `None` unless this is cookie persistence and the client did not already
    /// present `chosen`'s token (`looked_up` as in [`learn`](Self::learn)).
    /// `Max-Age`, when configured, therefore counts from the cookie's first insertion.
    pub fn set_cookie(&self, chosen: usize, looked_up: Option<usize>) -> Option<&str> {
        match &self.state {
            State::Cookie { set_cookie, .. } if looked_up != Some(chosen) => set_cookie.get(chosen).map(String::as_str),
            _ => None,
        }
    }

    /// Up to `limit` live stick-table entries, most recently used first (none for cookies).
    pub fn entries(&self, limit: usize, now: Instant) -> Vec<EntryView> {
        match &self.state {
            State::Cookie { .. } => Vec::new(),
            State::Source { table, .. } => table
                .entries(limit, now)
                .into_iter()
                .map(|e| EntryView { key: e.key.to_string(), server: e.server, idle: e.idle })
                .collect(),
            State::Keyed { table, .. } => table
                .entries(limit, now)
                .into_iter()
                .map(|e| EntryView { key: e.key.escape_ascii().to_string(), server: e.server, idle: e.idle })
                .collect(),
        }
    }

    /// Removes stick-table entries idle past their timeout; returns how many. For a
    /// periodic task: lookups never return idle entries anyway, this frees their memory.
    pub fn expire(&self, now: Instant) -> usize {
        self.with_table(|t| t.expire(now), |t| t.expire(now))
    }

    /// Empties the stick table; returns how many entries it held.
    pub fn flush(&self) -> usize {
        self.with_table(SharedStickTable::flush, SharedStickTable::flush)
    }

    /// Entries in the stick table (0 for cookies).
    pub fn len(&self) -> usize {
        self.with_table(SharedStickTable::len, SharedStickTable::len)
    }

    /// Whether the stick table is empty (always for cookies).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entries evicted from a full stick table so far.
    pub fn evictions(&self) -> u64 {
        match &self.state {
            State::Cookie { .. } => 0,
            State::Source { table, .. } => table.evictions(),
            State::Keyed { table, .. } => table.evictions(),
        }
    }

    /// Drops the stick-table entries naming server `name` (removed from the pool, or
    /// drained by an operator); returns how many.
    pub fn forget_server(&self, name: &str) -> usize {
        self.with_table(|t| t.remove_server(name), |t| t.remove_server(name))
    }

    /// `"cookie"`, `"source"`, `"header"`, `"cookie-learn"`, `"rdp_cookie"` or `"sni"`,
    /// for logs and the admin API.
    pub fn kind(&self) -> &'static str {
        match &self.state {
            State::Cookie { .. } => "cookie",
            State::Source { .. } => "source",
            State::Keyed { key: Key::Header(_), .. } => "header",
            State::Keyed { key: Key::CookieLearn(_), .. } => "cookie-learn",
            State::Keyed { key: Key::Rdp, .. } => "rdp_cookie",
            State::Keyed { key: Key::Sni, .. } => "sni",
        }
    }

    /// The wire kind of this stick table (`None` for cookie insert, which keeps no state).
    pub fn table_kind(&self) -> Option<TableKind> {
        match &self.state {
            State::Cookie { .. } => None,
            State::Source { .. } => Some(TableKind::Source),
            State::Keyed { key: Key::Header(_), .. } => Some(TableKind::Header),
            State::Keyed { key: Key::CookieLearn(_), .. } => Some(TableKind::CookieLearn),
            State::Keyed { key: Key::Rdp, .. } => Some(TableKind::Rdp),
            State::Keyed { key: Key::Sni, .. } => Some(TableKind::Sni),
        }
    }

    /// Takes an entry from a peer: `key` (wire form: 4 or 16 address bytes for
    /// source persistence) sticks to the server named `server`, last used `idle`
    /// before `now`. Ignored when the kind differs from this table's, the key is
    /// malformed or too long, or this pool has no such server; otherwise newest
    /// write wins ([`SharedStickTable::merge`]). Returns whether the table changed.
    pub fn merge_remote(&self, kind: TableKind, key: &[u8], server: &str, idle: Duration, now: Instant) -> bool {
        if self.table_kind() != Some(kind) {
            return false;
        }
        let Some(server) = self.servers.iter().find(|s| &***s == server) else { return false };
        let last_use = now.checked_sub(idle).unwrap_or(now);
        match &self.state {
            State::Cookie { .. } => false,
            State::Source { table, .. } => match ip_of(key) {
                Some(ip) => table.merge(ip, server.clone(), last_use, now),
                None => false,
            },
            State::Keyed { key: kind, table, .. } => match bounded(key, kind) {
                Some(key) => table.merge(Box::from(key), server.clone(), last_use, now),
                None => false,
            },
        }
    }

    /// Removes an entry a peer removed (cookie learn: the server deleted its cookie).
    pub fn remove_remote(&self, kind: TableKind, key: &[u8]) -> bool {
        if self.table_kind() != Some(kind) {
            return false;
        }
        match &self.state {
            State::Cookie { .. } => false,
            State::Source { table, .. } => ip_of(key).is_some_and(|ip| table.remove(&ip)),
            State::Keyed { table, .. } => table.remove(key),
        }
    }

    /// Every live entry in wire form (key bytes, server, idle), oldest first: the
    /// full copy sent to a peer that (re)connects.
    pub fn dump(&self, now: Instant) -> Vec<(Box<[u8]>, Arc<str>, Duration)> {
        let mut all: Vec<_> = match &self.state {
            State::Cookie { .. } => Vec::new(),
            State::Source { table, .. } => table
                .entries(usize::MAX, now)
                .into_iter()
                .map(|e| (Box::from(ip_key(e.key).as_slice()), e.server, e.idle))
                .collect(),
            State::Keyed { table, .. } => {
                table.entries(usize::MAX, now).into_iter().map(|e| (e.key, e.server, e.idle)).collect()
            }
        };
        all.reverse();
        all
    }

    fn with_table(
        &self,
        source: impl FnOnce(&SharedStickTable<IpAddr>) -> usize,
        keyed: impl FnOnce(&SharedStickTable<Box<[u8]>>) -> usize,
    ) -> usize {
        match &self.state {
            State::Cookie { .. } => 0,
            State::Source { table, .. } => source(table),
            State::Keyed { table, .. } => keyed(table),
        }
    }
}

/// Whether a lookup that found an entry idle for `idle` should tell the peers: the
/// peer's copy ages from the last update it got, so it is refreshed once the entry
/// has been idle for a quarter of its timeout, not on every request.
fn stale(idle: Duration, spec: &StickTableSpec) -> bool {
    idle > spec.idle_timeout / 4
}

/// An address as stick-table wire key: 4 bytes for IPv4, 16 for IPv6.
fn ip_key(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    }
}

/// The address of a wire key (see [`ip_key`]); `None` for any other length.
fn ip_of(key: &[u8]) -> Option<IpAddr> {
    match key.len() {
        4 => <[u8; 4]>::try_from(key).ok().map(IpAddr::from),
        16 => <[u8; 16]>::try_from(key).ok().map(|b| IpAddr::from(b).to_canonical()),
        _ => None,
    }
}

fn new_table<K: std::hash::Hash + Eq>(spec: &StickTableSpec) -> SharedStickTable<K> {
    SharedStickTable::new(spec.capacity, spec.idle_timeout)
}

fn cookie_state(spec: &CookieInsert, key: &CookieKey, pool: &str, servers: &[Arc<str>]) -> State {
    let name = header_safe(&spec.name);
    let tokens: Vec<String> = servers.iter().map(|s| cookie::token(key, pool, s)).collect();
    let set_cookie = tokens.iter().map(|token| set_cookie_value(spec, &name, token)).collect();
    State::Cookie { name, tokens, set_cookie }
}

/// `name=token; Path=..; Max-Age=..; Domain=..; Secure; HttpOnly`, attributes as configured.
fn set_cookie_value(spec: &CookieInsert, name: &str, token: &str) -> String {
    let path = header_safe(&spec.path);
    let mut value = format!("{name}={token}; Path={}", if path.is_empty() { "/" } else { &path });
    if let Some(max_age) = spec.max_age {
        value.push_str(&format!("; Max-Age={}", max_age.as_secs()));
    }
    if let Some(domain) = &spec.domain {
        value.push_str(&format!("; Domain={}", header_safe(domain)));
    }
    if spec.secure {
        value.push_str("; Secure");
    }
    if spec.http_only {
        value.push_str("; HttpOnly");
    }
    value
}

/// `s` without control characters and `;`: whatever the configuration holds, the
/// `Set-Cookie` value stays one header line with the attributes we wrote.
fn header_safe(s: &str) -> String {
    s.chars().filter(|c| !c.is_control() && *c != ';').collect()
}

/// `key` when it is non-empty and short enough to be a key of this kind.
fn bounded<'k>(key: &'k [u8], kind: &Key) -> Option<&'k [u8]> {
    (!key.is_empty() && key.len() <= kind.max_len()).then_some(key)
}

/// `name=value` split and trimmed (a quoted value unwrapped); `None` without `=`.
fn split_pair(pair: &[u8]) -> Option<(&[u8], &[u8])> {
    let eq = pair.iter().position(|&b| b == b'=')?;
    let (key, value) = pair.split_at(eq);
    let value = value.get(1..).unwrap_or_default().trim_ascii();
    let value = match value {
        [b'"', inner @ .., b'"'] => inner,
        _ => value,
    };
    Some((key.trim_ascii(), value))
}

/// Values of the cookies called `name` in one `Cookie` header value, in order.
///
/// Lenient and total over any bytes: pairs are split on `;`, names and values are
/// trimmed of ASCII whitespace, a value wrapped in double quotes is unwrapped, pairs
/// without `=` are skipped. Names compare exactly (cookie names are case-sensitive).
pub fn cookie_values<'v>(header: &'v [u8], name: &'v [u8]) -> impl Iterator<Item = &'v [u8]> + 'v {
    header.split(|&b| b == b';').filter_map(split_pair).filter(move |(key, _)| *key == name).map(|(_, value)| value)
}

#[cfg(test)]
#[path = "persist_tests.rs"]
mod tests;
