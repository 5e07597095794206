//! The boundary between the admin API and the running balancer.
//!
//! The admin crate knows nothing of the engine: the binary implements
//! [`Backend`] over its engine handle, and tests implement it over a fake.
//! Every view type here is plain data that serialises to the JSON the API
//! returns and deserialises back, so `switchyard ctl` decodes exactly what
//! the server encoded.
//!
//! The trait is synchronous on purpose: the engine's control operations are
//! short and lock-based, and the HTTP handlers call them on tokio's blocking
//! pool so a slow reload never stalls the admin runtime.

use serde::{Deserialize, Serialize};

/// What the admin API needs from the running balancer.
pub trait Backend: Send + Sync + 'static {
    /// Liveness and identity of the running process.
    fn health(&self) -> HealthView;
    /// The effective configuration of the running generation, as TOML text.
    fn config(&self) -> String;
    /// A snapshot of every service's and every pool's counters.
    fn stats(&self) -> StatsView;
    /// The Prometheus exposition in `format`.
    fn metrics(&self, format: crate::MetricsFormat) -> String;
    /// Applies `op` to one server and returns its state afterwards.
    ///
    /// # Errors
    /// [`ApiError::NotFound`] for an unknown pool or server (the message names
    /// which), [`ApiError::BadRequest`] for an operation the server refuses.
    fn server(&self, pool: &str, server: &str, op: ServerOp) -> Result<ServerView, ApiError>;
    /// Up to `limit` entries of a pool's persistence table, and its total size.
    ///
    /// # Errors
    /// [`ApiError::NotFound`] for an unknown pool, [`ApiError::Conflict`] when
    /// the pool has no persistence.
    fn persistence(&self, pool: &str, limit: usize) -> Result<PersistenceView, ApiError>;
    /// Empties a pool's persistence table; returns how many entries it removed.
    ///
    /// # Errors
    /// As [`Backend::persistence`].
    fn flush_persistence(&self, pool: &str) -> Result<u64, ApiError>;
    /// Removes `key` (with `prefix`: every key starting with it) from a
    /// service's response cache; returns how many keys it removed.
    ///
    /// # Errors
    /// [`ApiError::NotFound`] when the service does not exist or has no cache.
    fn purge_cache(&self, service: &str, key: &str, prefix: bool) -> Result<u64, ApiError>;
    /// The keys of a service's response cache equal to `key` (with `prefix`:
    /// starting with it; an empty prefix lists every key), sorted, at most `limit`.
    ///
    /// # Errors
    /// [`ApiError::NotFound`] when the service does not exist or has no cache.
    fn cache_entries(&self, service: &str, key: &str, prefix: bool, limit: usize)
        -> Result<CacheEntriesView, ApiError>;
    /// Checks a configuration without applying it. `name` is the file name to
    /// use in diagnostics (what the client called it, or `<request>`).
    ///
    /// # Errors
    /// The diagnostic lines (`NAME:LINE:COL: error: message` plus hint lines)
    /// when the configuration is invalid; `Ok` carries warning lines.
    fn validate(&self, source: &str, name: &str) -> Result<Vec<String>, Vec<String>>;
    /// Re-reads the configuration file and applies the difference.
    ///
    /// # Errors
    /// [`ApiError::Invalid`] with diagnostics when the file is invalid (nothing
    /// is applied), [`ApiError::Conflict`] when there is no file (the demo).
    fn reload(&self) -> Result<ReloadView, ApiError>;
    /// High availability: whether this node may hold the virtual address, and
    /// its replication peers. The default is a single node, always ready.
    fn cluster(&self) -> ClusterView {
        ClusterView { ready: true, ..ClusterView::default() }
    }
    /// Certificates from ACME, per service (none by default).
    fn certificates(&self) -> Vec<CertificateView> {
        Vec::new()
    }
}

/// `GET /api/v1/certificates`: one service's certificate from ACME.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CertificateView {
    /// The service it is served by.
    pub service: String,
    /// The names it is for.
    pub domains: Vec<String>,
    /// The ACME directory URL.
    pub directory: String,
    /// `http-01` or `tls-alpn-01`.
    pub challenge: String,
    /// `pending` (none issued yet), `valid`, `expiring` (less than a fifth of
    /// its lifetime left), or `expired`.
    pub state: String,
    /// Serial number (hex) of the certificate served.
    pub serial: Option<String>,
    /// Start of validity (Unix seconds).
    pub not_before: Option<u64>,
    /// End of validity (Unix seconds).
    pub not_after: Option<u64>,
    /// When the next issuance or renewal attempt is due (Unix seconds).
    pub next_attempt: Option<u64>,
    /// Whether that time came from the server's renewal information (ARI).
    pub ari: bool,
    /// Failed attempts since the last success.
    pub failures: u32,
    /// The last failure's reason, until a success.
    pub last_error: Option<String>,
    /// Certificates issued since start.
    pub issued: u64,
    /// A warning for the operator (expiring or expired, failing), if any.
    pub warning: Option<String>,
    /// The certificate of one name, issued on demand at a first handshake.
    #[serde(default)]
    pub issued_on_demand: bool,
    /// The service's on-demand issuance (`acme.on_demand`), on the
    /// service's entry; the names issued are entries of their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_demand: Option<OnDemandView>,
}

/// A service's on-demand issuance: what it holds and decided.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OnDemandView {
    /// Names with a certificate issued on demand.
    pub certificates: u64,
    /// Names being decided or ordered now.
    pub pending: u64,
    /// Decisions since start by result: `issued`, `loaded` (from storage),
    /// `denied` (by `allow` or `ask`), `cached` (denied a moment ago),
    /// `invalid` (not a DNS name), `limited`, `failed`, `timeout` (a handshake
    /// went on before its certificate was ready).
    pub results: std::collections::BTreeMap<String, u64>,
    /// The latest refusals (name, reason, Unix seconds), oldest first.
    pub recent: Vec<OnDemandRefusal>,
}

/// One refused or failed on-demand name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OnDemandRefusal {
    /// The name.
    pub name: String,
    /// Why (`denied: the ask endpoint answered 403`, `failed: ...`).
    pub reason: String,
    /// When (Unix seconds).
    pub at: u64,
}

/// `GET /api/v1/cluster`: this node's readiness and its replication peers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterView {
    /// The node may hold the virtual address: it is not stopping, and (with
    /// `[cluster]`) it holds a full copy of a peer's state, has no peer, or
    /// waited `sync_timeout` for one. `switchyard ctl health` exits 0 exactly when true.
    pub ready: bool,
    /// A graceful stop has begun.
    pub stopping: bool,
    /// This node's `[cluster] name`; `None` without `[cluster]`.
    pub node: Option<String>,
    /// A full copy arrived from a peer since start.
    pub synced: bool,
    /// Connections refused for failing authentication.
    pub refused: u64,
    /// The peers, in configuration order.
    pub peers: Vec<PeerView>,
}

/// One replication peer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PeerView {
    /// Peer name.
    pub name: String,
    /// Its replication address.
    pub address: String,
    /// Our connection to it is up and authenticated.
    pub connected: bool,
    /// Its connection to us is up and authenticated.
    pub inbound: bool,
    /// Updates sent (full copies included).
    pub sent: u64,
    /// Updates received (full copies included).
    pub received: u64,
    /// Updates dropped because its queue was full.
    pub dropped: u64,
    /// Updates waiting in its queue.
    pub queued: u64,
    /// From learning an entry to the peer's acknowledgement, last batch, in milliseconds.
    pub lag_ms: f64,
    /// Full copies sent to it.
    pub syncs_sent: u64,
    /// Full copies received from it.
    pub syncs_received: u64,
}

/// A change to one server's administrative state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerOp {
    /// Put the server back into rotation.
    Enable,
    /// Take it out of rotation at once (maintenance); in-flight requests finish.
    Disable,
    /// Send it no new clients; sessions pinned by persistence may still arrive.
    Drain,
    /// Set its effective weight (0..=1000).
    Weight(u32),
}

/// Why an admin operation failed; each variant is one HTTP status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// 404: the named pool, server or resource does not exist.
    #[error("{0}")]
    NotFound(String),
    /// 400: the request is malformed or out of range.
    #[error("{0}")]
    BadRequest(String),
    /// 409: the request is valid but the current state forbids it.
    #[error("{0}")]
    Conflict(String),
    /// 422: a configuration was refused; the diagnostic lines say why.
    #[error("invalid configuration")]
    Invalid(Vec<String>),
}

/// `GET /api/v1/health`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HealthView {
    /// Always `"ok"` when the process answers.
    pub status: String,
    /// The switchyard version.
    pub version: String,
    /// Seconds since the process started.
    pub uptime_s: u64,
    /// Data-plane worker threads.
    pub workers: usize,
    /// Configuration generation: 1 at start, +1 per applied change.
    pub generation: u64,
    /// The configuration file path, or `<demo>`.
    pub config_source: String,
}

/// `GET /api/v1/stats`: counters since start, never reset by reloads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StatsView {
    /// Services, in configuration order.
    pub services: Vec<ServiceView>,
    /// Pools, in configuration order.
    pub pools: Vec<PoolView>,
    /// Services with a response cache, in configuration order.
    #[serde(default)]
    pub caches: Vec<CacheView>,
}

/// One service's response cache: its size and counters since start
/// (`GET /api/v1/cache`, and in `GET /api/v1/stats`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CacheView {
    /// The service it belongs to.
    pub service: String,
    /// Configured `size` in bytes.
    pub size: u64,
    /// Bytes stored now.
    pub bytes: u64,
    /// Primary keys stored now (complete or partial).
    pub keys: u64,
    /// Requests answered from a fresh entry.
    pub hits: u64,
    /// Cacheable requests forwarded with nothing usable stored.
    pub misses: u64,
    /// Requests answered from a stale entry.
    pub stale: u64,
    /// Stale entries a server confirmed with 304.
    pub revalidated: u64,
    /// Entries evicted to make room.
    pub evictions: u64,
    /// Body bytes sent to clients from stored responses.
    pub served_bytes: u64,
    /// Partial responses kept as pieces.
    pub pieces: u64,
}

impl CacheView {
    /// Share of cache lookups answered from the store without waiting for a
    /// server (hits and stale answers, of those plus misses and
    /// revalidations); `None` before the first lookup.
    pub fn hit_ratio(&self) -> Option<f64> {
        let answered = self.hits + self.stale;
        let all = answered + self.misses + self.revalidated;
        (all > 0).then(|| answered as f64 / all as f64)
    }
}

/// `GET /api/v1/cache/{service}/entries`: the keys asked for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CacheEntriesView {
    /// Service name.
    pub service: String,
    /// How many keys matched (more than `keys` holds when the limit cut them).
    pub matched: u64,
    /// The matching keys, sorted.
    pub keys: Vec<CacheKeyView>,
}

/// One cache key: its stored responses (one per `Vary` variant) and the
/// pieces of an incomplete response, if any.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CacheKeyView {
    /// The cache key (e.g. `example.com/a?b=1`).
    pub key: String,
    /// Its stored responses.
    pub variants: Vec<CacheEntryView>,
    /// An incomplete response being combined from partial responses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial: Option<CachePartialView>,
}

/// One stored response.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CacheEntryView {
    /// Status code.
    pub status: u16,
    /// The request header values that select this variant (`Vary`), by
    /// lower-case name; `null` for a header the request lacked.
    pub vary: std::collections::BTreeMap<String, Option<String>>,
    /// Current age in seconds (what a hit's `Age` says).
    pub age_s: u64,
    /// Seconds of freshness left; negative when stale (by that much).
    pub fresh_for_s: f64,
    /// Body bytes.
    pub size: u64,
    /// Bytes it takes in the store (fields, body, bookkeeping).
    pub stored_bytes: u64,
    /// Times a client was answered from it.
    pub hits: u64,
}

/// The pieces held of an incomplete response.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachePartialView {
    /// Body bytes held.
    pub held: u64,
    /// The representation's complete length.
    pub length: u64,
}

/// One virtual service's counters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServiceView {
    /// Service name.
    pub name: String,
    /// `http`, `https`, `tcp`, …
    pub mode: String,
    /// Addresses it listens on.
    pub listeners: Vec<String>,
    /// Client connections open now.
    pub connections_current: u64,
    /// Client connections accepted since start.
    pub connections_total: u64,
    /// Requests received (L7) or connections relayed (L4).
    pub requests: u64,
    /// Responses by status class.
    pub responses: ClassCounts,
    /// Bytes received from clients.
    pub bytes_in: u64,
    /// Bytes sent to clients.
    pub bytes_out: u64,
    /// Request latency (first byte in to last byte out).
    pub latency: HistogramView,
    /// A `udp` service's datagrams (absent for the other modes). Its flows
    /// are its connections, the datagrams it relayed to servers its
    /// requests, their payload its bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datagrams: Option<DatagramCounts>,
}

/// Datagrams of a `udp` service.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatagramCounts {
    /// Relayed from clients to servers.
    pub to_server: u64,
    /// Relayed from servers back to clients.
    pub to_client: u64,
    /// From new clients, refused because the flow table was full.
    pub refused: u64,
    /// Dropped for another reason (no server, send failure).
    pub dropped: u64,
}

/// Responses counted by status class; `none` counts requests that got no
/// response (client gone, connection reset).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassCounts {
    /// 1xx responses.
    #[serde(rename = "1xx")]
    pub xx1: u64,
    /// 2xx responses.
    #[serde(rename = "2xx")]
    pub xx2: u64,
    /// 3xx responses.
    #[serde(rename = "3xx")]
    pub xx3: u64,
    /// 4xx responses.
    #[serde(rename = "4xx")]
    pub xx4: u64,
    /// 5xx responses.
    #[serde(rename = "5xx")]
    pub xx5: u64,
    /// Requests that ended without a response.
    pub none: u64,
}

/// A fixed-bucket histogram of durations in microseconds.
///
/// Invariant: `counts.len() == bounds_us.len() + 1`; the last count is the
/// overflow bucket (above the last bound). Counts are per bucket, not
/// cumulative, so two snapshots subtract bucket by bucket.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistogramView {
    /// Inclusive upper bound of each bucket, ascending.
    pub bounds_us: Vec<u64>,
    /// Observations per bucket, one more than `bounds_us`.
    pub counts: Vec<u64>,
    /// Sum of all observations.
    pub sum_us: u64,
    /// Number of observations.
    pub count: u64,
}

/// One pool and its servers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PoolView {
    /// Pool name.
    pub name: String,
    /// Balancing method, as written in the configuration.
    pub algorithm: String,
    /// Persistence kind, when the pool has one.
    pub persistence: Option<String>,
    /// Servers, in configuration order.
    pub servers: Vec<ServerView>,
}

/// One server: its state and counters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerView {
    /// The pool it belongs to.
    pub pool: String,
    /// Server name (unique within the pool).
    pub name: String,
    /// `host:port` it is reached at.
    pub address: String,
    /// `up`, `draining`, `maintenance` or `down`.
    pub state: String,
    /// Effective weight now (after admin changes and slow start).
    pub weight: u32,
    /// Weight in the configuration.
    pub configured_weight: u32,
    /// Used only when no primary server is available.
    pub backup: bool,
    /// Requests or connections in flight to it.
    pub active: u64,
    /// Requests (L7) or connections (L4) sent to it since start.
    pub requests: u64,
    /// Its responses by status class.
    pub responses: ClassCounts,
    /// Connect failures, timeouts and resets since start.
    pub failures: u64,
}

/// `GET /api/v1/pools/{pool}/persistence`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PersistenceView {
    /// Pool name.
    pub pool: String,
    /// Persistence kind (`cookie-insert`, `source-ip`, …).
    pub kind: String,
    /// Up to the requested number of entries, most recently used first.
    pub entries: Vec<PersistenceEntryView>,
    /// Entries in the whole table.
    pub total: u64,
}

/// One persistence entry: which client key sticks to which server.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PersistenceEntryView {
    /// The client key (address, cookie value, …).
    pub key: String,
    /// The server it sticks to.
    pub server: String,
    /// Seconds since it was last used.
    pub idle_s: f64,
}

/// `POST /api/v1/reload`: what an applied reload changed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadView {
    /// The generation now running.
    pub generation: u64,
    /// One-line summary of the difference (e.g. `1 pool changed, 1 server added`).
    pub summary: String,
    /// Warnings about the new configuration.
    pub warnings: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_counts_use_status_class_names_in_json() {
        let counts = ClassCounts { xx2: 5, none: 1, ..ClassCounts::default() };
        let json = serde_json::to_value(counts).expect("encode");
        assert_eq!(json["2xx"], 5);
        assert_eq!(json["none"], 1);
        let back: ClassCounts = serde_json::from_value(json).expect("decode");
        assert_eq!(back, counts);
    }
}
