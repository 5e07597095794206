//! The validated configuration model.
//!
//! Everything here has been checked: addresses parse, every pool a rule names
//! exists (and is referred to by index), weights are in range, regexes compile.
//! The engine consumes only these types, never the raw serde types, so a
//! running process can never hold a configuration `switchyard check` would
//! refuse.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// A whole, validated configuration.
///
/// `==` is structural: pool references ([`PoolId`]) compare as indices, so
/// reordering pools makes two configurations unequal. [`crate::diff`]
/// compares them by pool name instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Worker threads; `None` means one per available core.
    pub workers: Option<usize>,
    /// How long a graceful stop (SIGTERM) waits for in-flight requests.
    pub drain_timeout: Duration,
    /// Virtual services, in file order.
    pub services: Vec<Service>,
    /// Pools, in file order. Rules and services refer to them by [`PoolId`].
    pub pools: Vec<Pool>,
    /// The admin API and dashboard listener; `None` when the file has no `[admin]` table.
    pub admin: Option<Admin>,
    /// The access log; `None` (no access log) when the file has no `[access_log]` table.
    pub access_log: Option<AccessLog>,
    /// Where events (start-up, reloads, failures: the process's own log)
    /// go besides standard error; `None` without an `[event_log]` table.
    pub event_log: Option<EventLog>,
    /// High availability: this node and the peers it replicates state with;
    /// `None` when the file has no `[cluster]` table (a single node).
    pub cluster: Option<Cluster>,
    /// OpenTelemetry tracing of HTTP requests; `None` (off) without a
    /// `[tracing]` table.
    pub tracing: Option<crate::Tracing>,
}

/// `[cluster]`: this node of an active/standby pair and its peers.
#[derive(Clone, PartialEq, Eq)]
pub struct Cluster {
    /// This node's name, unique in the cluster (in logs, the admin API, metrics).
    pub name: String,
    /// Where peers connect to send their updates.
    pub listen: SocketAddr,
    /// The shared secret both ends prove they hold (HMAC-SHA256), at least 16 bytes.
    pub key: String,
    /// Updates held for one peer while it is slow or away; more are dropped and counted.
    pub queue: usize,
    /// How long a starting node waits for a full copy from a peer before it
    /// reports healthy anyway (the peer is then presumed dead).
    pub sync_timeout: Duration,
    /// Bind service listeners with IP_FREEBIND, so the standby listens on the
    /// virtual address before it holds it.
    pub freebind: bool,
    /// The other nodes, in file order.
    pub peers: Vec<ClusterPeer>,
}

impl Cluster {
    /// Default of `queue`.
    pub const DEFAULT_QUEUE: usize = 65_536;
    /// Default of `sync_timeout`.
    pub const DEFAULT_SYNC_TIMEOUT: Duration = Duration::from_secs(10);
}

// Hand-written: the key must never reach a log line.
impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("name", &self.name)
            .field("listen", &self.listen)
            .field("key", &"<secret>")
            .field("queue", &self.queue)
            .field("sync_timeout", &self.sync_timeout)
            .field("freebind", &self.freebind)
            .field("peers", &self.peers)
            .finish()
    }
}

/// One `[[cluster.peers]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterPeer {
    /// The peer's name (its own `[cluster] name`).
    pub name: String,
    /// Its `[cluster] listen` address.
    pub address: SocketAddr,
}

/// The event log (`[event_log]`): the process's own log lines, also sent to
/// syslog. Read at start; a change takes effect at the next start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventLog {
    /// The syslog receiver.
    pub syslog: Syslog,
}

/// A syslog receiver and the facility of the messages sent to it (RFC 5424).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Syslog {
    /// Where messages go.
    pub address: SyslogAddress,
    /// Facility code 0–23 (`daemon` = 3, `local0` = 16 … `local7` = 23).
    pub facility: u8,
}

/// The transport of a syslog receiver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyslogAddress {
    /// A Unix datagram socket such as `/dev/log`.
    Unix(std::path::PathBuf),
    /// UDP to a host and port (RFC 5426).
    Udp(SocketAddr),
}

/// The admin API / dashboard listener (`[admin]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admin {
    /// Address of the admin listener (default `127.0.0.1:9090`).
    pub listen: SocketAddr,
    /// Bearer tokens. Empty means no authentication, which validation allows
    /// only on a loopback address.
    pub tokens: Vec<AdminToken>,
}

impl Admin {
    /// Where the admin listener goes when `[admin]` has no `listen`.
    pub const DEFAULT_LISTEN: SocketAddr =
        SocketAddr::V4(std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 9090));
}

/// One bearer token of the admin API and what it may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminToken {
    /// The secret the client sends as `Authorization: Bearer SECRET`.
    pub secret: String,
    /// What requests carrying it may do.
    pub role: Role,
}

/// What an admin token allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Reading: health, config, stats, metrics, persistence tables, validation.
    ReadOnly,
    /// Everything, including server state changes, flushes and reloads.
    Admin,
}

/// The access log (`[access_log]`): one line per request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessLog {
    /// Where lines go.
    pub target: LogTarget,
    /// How a line looks.
    pub format: LogFormat,
}

impl Default for AccessLog {
    /// Standard output, JSON lines: what an empty `[access_log]` table means.
    fn default() -> Self {
        AccessLog { target: LogTarget::Stdout, format: LogFormat::Json }
    }
}

/// Where access log lines are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogTarget {
    /// Standard output.
    Stdout,
    /// A file, appended to and reopened on SIGUSR1 (log rotation).
    File(std::path::PathBuf),
    /// A syslog receiver, one RFC 5424 message per line.
    Syslog(Syslog),
}

/// Format of an access log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line.
    Json,
    /// The Apache/NGINX "combined" format, with switchyard's fields appended.
    Combined,
}

impl Config {
    /// The pool a [`PoolId`] names. Ids come from validation, so they are in range.
    pub fn pool(&self, id: PoolId) -> &Pool {
        &self.pools[id.0]
    }

    /// Looks a pool up by name.
    pub fn pool_by_name(&self, name: &str) -> Option<PoolId> {
        self.pools.iter().position(|p| p.name == name).map(PoolId)
    }
}

/// Index of a pool in [`Config::pools`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PoolId(pub usize);

/// How a service speaks to its clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Layer 7, HTTP/1.1 in clear text.
    Http,
    /// Layer 4 TCP: bytes relayed to a server of the pool, untouched.
    Tcp,
    /// Layer 4 UDP: datagrams balanced per flow (client address) or per datagram.
    Udp,
    /// Layer 4 TLS routed by the ClientHello's server name, without decrypting.
    TlsPassthrough,
    /// Layer 7 with TLS termination: HTTP/1.1 and HTTP/2 (ALPN) over TLS.
    Https,
}

impl Mode {
    /// The mode as written in the configuration file.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Http => "http",
            Mode::Https => "https",
            Mode::Tcp => "tcp",
            Mode::Udp => "udp",
            Mode::TlsPassthrough => "tls-passthrough",
        }
    }
}

/// A virtual service (frontend): listeners, rules, a default pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    /// Unique name, used in logs and metrics.
    pub name: String,
    /// Protocol spoken to clients.
    pub mode: Mode,
    /// Addresses to listen on (IPv4 and IPv6), at least one, unique across the config.
    pub listeners: Vec<SocketAddr>,
    /// Pool used when no rule chose another; `None` means unmatched requests get 503.
    pub default_pool: Option<PoolId>,
    /// Ordered request rules; evaluated top to bottom.
    pub rules: Vec<Rule>,
    /// Per-phase timeouts.
    pub timeouts: Timeouts,
    /// Request size limits.
    pub limits: Limits,
    /// Which client-address headers are added towards servers.
    pub forwarded: Forwarded,
    /// Layer-4 settings (modes `tcp`, `udp`, `tls-passthrough`).
    pub l4: L4,
    /// Sources allowed to send a PROXY protocol header (v1 or v2) first; empty:
    /// PROXY protocol is not accepted. A connection from a listed source must
    /// start with one (modes `http`, `tcp`, `tls-passthrough`).
    pub accept_proxy: Vec<Cidr>,
    /// `tls-passthrough` routes: the first whose pattern matches the ClientHello's
    /// server name chooses the pool; no match (or no name) uses the default pool.
    pub sni_routes: Vec<SniRoute>,
    /// TLS termination: `Some` exactly for `https` services.
    pub tls: Option<ServerTls>,
    /// HTTP/2 towards clients (`http` and `https` services).
    pub http2: Http2,
    /// HTTP/3 (QUIC) towards clients, on the listeners' ports over UDP (`https` only).
    pub http3: Http3,
    /// Response compression (`http` and `https` services); `None`: off.
    pub compression: Option<crate::Compression>,
    /// The response cache (`http` and `https` services); `None`: off.
    pub cache: Option<Cache>,
    /// Per-client limits and address lists; `None`: none (no state kept).
    pub protection: Option<crate::Protection>,
}

/// A service's response cache (RFC 9111, shared cache).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cache {
    /// Most bytes stored (heads and bodies), default 256 MiB.
    pub size: u64,
    /// Largest response stored, default 8 MiB; larger ones are streamed, not stored.
    pub max_object: u64,
    /// What the cache key is made of, in order (default host, path, query).
    pub key: Vec<CacheKeyPart>,
    /// Heuristic freshness (10 % of the `Last-Modified` age) for responses
    /// without explicit freshness; default false.
    pub heuristic: bool,
    /// The targeted cache-control fields this cache obeys (RFC 9213), in
    /// order of precedence, names lower case; the first with a valid value
    /// replaces `Cache-Control` and `Expires`. Default `["cdn-cache-control"]`.
    pub targeted: Vec<String>,
}

impl Default for Cache {
    fn default() -> Self {
        Cache {
            size: 256 * 1024 * 1024,
            max_object: 8 * 1024 * 1024,
            key: vec![CacheKeyPart::Host, CacheKeyPart::Path, CacheKeyPart::Query],
            heuristic: false,
            targeted: vec!["cdn-cache-control".to_string()],
        }
    }
}

/// One part of a cache key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheKeyPart {
    /// `host`: the request's host, lower case, port stripped.
    Host,
    /// `path`: the request path.
    Path,
    /// `query`: the query string (with its `?`).
    Query,
    /// `scheme`: http or https.
    Scheme,
    /// `method`: GET and HEAD share entries anyway; kept for keys that name it.
    Method,
}

/// A `tls-passthrough` route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SniRoute {
    /// Exact name or `*.suffix` (one extra label), lower case.
    pub pattern: String,
    /// Pool chosen.
    pub pool: PoolId,
}

/// Layer-4 settings of a service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct L4 {
    /// A TCP relay with no byte either way for this long closes (default 5 min).
    pub idle_timeout: Duration,
    /// Most client connections the service holds at once; `None` is unlimited.
    pub max_connections: Option<u32>,
    /// What happens to connections beyond `max_connections`.
    pub when_full: WhenFull,
    /// Relay TCP with splice(2) (default true); false copies through a buffer.
    pub zero_copy: bool,
    /// UDP: most flows at once; new clients beyond are refused (default 65,536).
    pub max_flows: usize,
    /// UDP: a flow with no datagram either way for this long expires (default 60 s).
    pub flow_idle: Duration,
    /// UDP: balance every datagram on its own instead of per flow (default false).
    pub per_datagram: bool,
}

impl Default for L4 {
    fn default() -> Self {
        L4 {
            idle_timeout: Duration::from_secs(300),
            max_connections: None,
            when_full: WhenFull::Wait,
            zero_copy: true,
            max_flows: 65_536,
            flow_idle: Duration::from_secs(60),
            per_datagram: false,
        }
    }
}

/// What a full service does with new connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenFull {
    /// Stop accepting: new connections wait in the listen backlog.
    Wait,
    /// Accept and close at once.
    Refuse,
}

/// PROXY protocol version sent to servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyVersion {
    /// Text header.
    V1,
    /// Binary header.
    V2,
}

/// Per-phase timeouts of a service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Time allowed to receive a complete request head (408 after).
    pub client_header: Duration,
    /// Time a keep-alive client connection may stay idle between requests.
    pub client_idle: Duration,
    /// Time allowed to establish a connection to a server.
    pub connect: Duration,
    /// Time allowed for a server to start its response (504 after), and
    /// between reads of a response body.
    pub server_response: Duration,
    /// Time an idle pooled server connection is kept before closing it.
    pub server_idle: Duration,
    /// Time allowed to receive a whole request body, from its head (408 after).
    pub client_body: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            client_header: Duration::from_secs(10),
            client_idle: Duration::from_secs(60),
            connect: Duration::from_secs(3),
            server_response: Duration::from_secs(30),
            server_idle: Duration::from_secs(30),
            client_body: Duration::from_secs(60),
        }
    }
}

/// Request size limits of a service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest request head (request line + headers) in bytes; 431 beyond.
    pub max_header_bytes: usize,
    /// Most header fields in one request; 431 beyond.
    pub max_headers: usize,
    /// Largest request body in bytes; 413 beyond. `None` is unlimited.
    pub max_body_bytes: Option<u64>,
    /// Longest request target in bytes; 414 beyond.
    pub max_uri_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_header_bytes: 16 * 1024, max_headers: 100, max_body_bytes: None, max_uri_bytes: 8 * 1024 }
    }
}

/// Which forwarding headers a service adds to requests towards servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forwarded {
    /// Append the client address to `X-Forwarded-For`.
    pub x_forwarded_for: bool,
    /// Set `X-Forwarded-Proto`.
    pub x_forwarded_proto: bool,
    /// Append an RFC 7239 `Forwarded` element.
    pub forwarded: bool,
}

impl Default for Forwarded {
    fn default() -> Self {
        Forwarded { x_forwarded_for: true, x_forwarded_proto: true, forwarded: false }
    }
}

/// A request rule: all of its conditions must match for its effects to apply.
///
/// Header edits apply and evaluation continues; a terminal action (pool,
/// redirect, respond, deny) applies and evaluation stops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Optional name for logs.
    pub name: Option<String>,
    /// Conditions, all of which must hold (an empty list always matches).
    pub conditions: Vec<Condition>,
    /// Header edits applied when the rule matches.
    pub edits: HeaderEdits,
    /// What ends rule evaluation, if anything.
    pub action: Option<Action>,
}

/// One condition of a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// The request's host (from `Host`, port stripped), compared case-insensitively.
    Host(StrMatch),
    /// The request path (without the query string).
    Path(StrMatch),
    /// The request method is one of these (upper case).
    Method(Vec<String>),
    /// A request header (name lower case); `None` matcher means "present".
    Header {
        /// Header name, lower case.
        name: String,
        /// How its value must look; `None` only requires presence.
        matcher: Option<StrMatch>,
    },
    /// A query parameter; `None` matcher means "present".
    Query {
        /// Parameter name.
        name: String,
        /// How its value must look; `None` only requires presence.
        matcher: Option<StrMatch>,
    },
    /// The client address is in one of these networks.
    ClientAddr(Vec<Cidr>),
    /// The client certificate (mTLS) is in this state.
    ClientCert(ClientCertState),
}

/// How a string is compared.
#[derive(Debug, Clone)]
pub enum StrMatch {
    /// Equal to.
    Exact(String),
    /// Starts with.
    Prefix(String),
    /// Ends with.
    Suffix(String),
    /// Matches the regular expression (unanchored unless the pattern anchors).
    Regex(regex::Regex),
}

/// Regexes compare by their pattern text: two configurations that write the
/// same pattern mean the same thing, which is what [`crate::diff`] needs.
impl PartialEq for StrMatch {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (StrMatch::Exact(a), StrMatch::Exact(b))
            | (StrMatch::Prefix(a), StrMatch::Prefix(b))
            | (StrMatch::Suffix(a), StrMatch::Suffix(b)) => a == b,
            (StrMatch::Regex(a), StrMatch::Regex(b)) => a.as_str() == b.as_str(),
            _ => false,
        }
    }
}

impl Eq for StrMatch {}

impl StrMatch {
    /// Whether `value` satisfies this matcher.
    pub fn matches(&self, value: &str) -> bool {
        match self {
            StrMatch::Exact(s) => value == s,
            StrMatch::Prefix(s) => value.starts_with(s.as_str()),
            StrMatch::Suffix(s) => value.ends_with(s.as_str()),
            StrMatch::Regex(r) => r.is_match(value),
        }
    }
}

/// An IPv4 or IPv6 network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    /// Network address.
    pub addr: IpAddr,
    /// Prefix length in bits.
    pub prefix: u8,
}

impl Cidr {
    /// Whether `ip` lies in this network. IPv4-mapped IPv6 addresses match IPv4 networks.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.prefix)).unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.prefix)).unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

/// Header edits of a rule, applied in the order remove → set → add.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderEdits {
    /// Request headers to set (replacing any existing), name lower case.
    pub set_request: Vec<(String, String)>,
    /// Request headers to add (keeping existing ones).
    pub add_request: Vec<(String, String)>,
    /// Request header names to remove, lower case.
    pub remove_request: Vec<String>,
    /// Response headers to set.
    pub set_response: Vec<(String, String)>,
    /// Response headers to add.
    pub add_response: Vec<(String, String)>,
    /// Response header names to remove, lower case.
    pub remove_response: Vec<String>,
    /// `compress = false`: responses to matching requests are not compressed.
    pub no_compress: bool,
    /// `cache = false`: the response cache neither serves nor stores the request.
    pub no_cache: bool,
}

impl HeaderEdits {
    /// True when the rule edits nothing.
    pub fn is_empty(&self) -> bool {
        self.set_request.is_empty()
            && self.add_request.is_empty()
            && self.remove_request.is_empty()
            && self.set_response.is_empty()
            && self.add_response.is_empty()
            && self.remove_response.is_empty()
            && !self.no_compress
            && !self.no_cache
    }
}

/// What a matching rule does that ends evaluation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send the request to this pool.
    Pool(PoolId),
    /// Answer with a redirect (301, 302, 303, 307 or 308) to `location`.
    Redirect {
        /// Status code.
        status: u16,
        /// `Location` value.
        location: String,
    },
    /// Answer directly with a status and body.
    Respond {
        /// Status code.
        status: u16,
        /// Response body.
        body: String,
        /// `Content-Type` of the body.
        content_type: String,
    },
    /// Answer with a redirect to the same host and target over `https`
    /// (HTTP to HTTPS), on the default port or `port`.
    RedirectHttps {
        /// Status code (301, 302, 303, 307 or 308; default 301).
        status: u16,
        /// Port in the `Location`; `None`: the scheme's default (443).
        port: Option<u16>,
    },
    /// Refuse the request with this status (403 by default).
    Deny {
        /// Status code.
        status: u16,
    },
}

/// A pool (backend) of servers and how to choose among them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    /// Unique name.
    pub name: String,
    /// Balancing method.
    pub algorithm: Algorithm,
    /// What the hash algorithms hash.
    pub hash_key: HashKey,
    /// Servers, at least one, in file order.
    pub servers: Vec<Server>,
    /// Most idle keep-alive connections kept per server per worker.
    pub max_idle_per_server: usize,
    /// Most streams at once on one HTTP/2 connection to a server (below the
    /// server's own `SETTINGS_MAX_CONCURRENT_STREAMS` when that is lower);
    /// more requests at once open another connection. `protocol = "h2"` only.
    pub max_streams_per_connection: u32,
    /// How a client keeps going to the same server; `None` is no persistence.
    pub persistence: Option<Persistence>,
    /// PROXY protocol header sent to servers first, carrying the client's address.
    pub send_proxy: Option<ProxyVersion>,
    /// The address connections to the servers come from.
    pub source: Source,
    /// Active health probe of the pool's servers; `None` is no probing (all healthy).
    pub health_check: Option<HealthCheck>,
    /// TLS towards the servers (re-encryption); `None`: clear text.
    pub tls: Option<UpstreamTls>,
    /// HTTP version spoken to the servers (HTTP pools).
    pub protocol: UpstreamProtocol,
    /// Passive health checking: servers failing real traffic are ejected.
    pub passive: Option<Passive>,
    /// Where HTTP requests wait when every server is at its `max_connections`;
    /// `None`: they are refused at once (503).
    pub queue: Option<Queue>,
    /// How many times an HTTP request that failed on one server moves on to
    /// another: after a connect failure, or an idempotent bodiless request
    /// whose server failed before any response byte.
    pub retries: u32,
}

/// The address a pool's connections to its servers come from (`source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Source {
    /// The kernel picks the balancer's own address towards the server: the
    /// servers see the balancer (source NAT, the default).
    #[default]
    Balancer,
    /// The client's own address (transparent mode, `IP_TRANSPARENT`): the
    /// servers see the client and must route their replies back through the
    /// balancer.
    Client,
    /// This fixed address of the balancer.
    Address(std::net::IpAddr),
}

/// Passive health checking of a pool: what real traffic tells about servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Passive {
    /// Consecutive failures (connect errors, timeouts, 5xx) that eject a server.
    pub failures: u32,
    /// How long an ejected server takes nothing new (at least; with an
    /// active check it also needs `rise` passing checks).
    pub eject: Duration,
}

/// A pool's request queue: bounded, with a bounded wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queue {
    /// Most requests waiting at once, over all workers; one more is refused (503).
    pub size: u32,
    /// Longest wait for a connection slot; then the request is refused (503).
    pub timeout: Duration,
}

impl Queue {
    /// `size` when the table does not say.
    pub const DEFAULT_SIZE: u32 = 1024;
    /// `timeout` when the table does not say.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
}

impl Pool {
    /// `retries` when the pool does not say: one other server after a failure.
    pub const DEFAULT_RETRIES: u32 = 1;
    /// `max_streams_per_connection` when the pool does not say: HAProxy's
    /// default for its server connections, and the least RFC 9113 (6.5.2)
    /// recommends a server allow.
    pub const DEFAULT_MAX_STREAMS_PER_CONNECTION: u32 = 100;
}

/// An active health probe of every server of a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    /// What is sent and what counts as a good reply.
    pub kind: CheckKind,
    /// Time between two probes of one server.
    pub interval: Duration,
    /// How long a probe waits for its reply; less than `interval`.
    pub timeout: Duration,
    /// Consecutive successes that bring a down server back up.
    pub rise: u32,
    /// Consecutive failures that take an up server down.
    pub fall: u32,
    /// Port probed instead of each server's own port.
    pub port: Option<u16>,
}

/// The kind of a health probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckKind {
    /// One datagram sent; a reply datagram containing `expect` (any reply when `None`) is a success.
    Udp {
        /// Payload sent, at least one byte.
        send: Vec<u8>,
        /// Bytes the reply must contain.
        expect: Option<Vec<u8>>,
    },
    /// A TCP connection that opens is a success.
    Tcp,
    /// A TLS handshake that completes is a success (the pool's `tls`
    /// settings when it has them, else without verifying the certificate).
    Tls,
    /// An HTTP/1.1 request whose response matches (over TLS when the pool has `tls`).
    Http(HttpCheck),
    /// A `grpc.health.v1.Health/Check` call over HTTP/2 (h2c, or ALPN `h2` over TLS when
    /// the pool has `tls`) answered `SERVING` with `grpc-status` 0.
    Grpc(GrpcCheck),
}

/// What a gRPC health check asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrpcCheck {
    /// The service name sent in the request; empty asks about the server as a whole.
    pub service: String,
}

/// The request and expectations of an HTTP health check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpCheck {
    /// Request method, upper case (`GET` by default).
    pub method: String,
    /// Request target, starting with `/`.
    pub path: String,
    /// `Host` header; `None`: the probed address.
    pub host: Option<String>,
    /// Accepted statuses as inclusive ranges; a status in any of them passes.
    pub statuses: Vec<(u16, u16)>,
    /// Bytes the response body must contain.
    pub body: Option<Vec<u8>>,
}

impl HttpCheck {
    /// Whether `status` is accepted.
    pub fn accepts(&self, status: u16) -> bool {
        self.statuses.iter().any(|&(lo, hi)| (lo..=hi).contains(&status))
    }
}

/// Persistence (stickiness) of a pool: which server a returning client gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Persistence {
    /// The balancer sets a cookie naming the server (opaque, tamper-evident).
    CookieInsert(CookieInsert),
    /// A stick table keyed by the client address.
    Source(StickTableSpec),
    /// A stick table keyed by a request header's value (e.g. a user or tenant header).
    Header {
        /// Header name, lower case.
        name: String,
        /// Table bounds.
        table: StickTableSpec,
    },
    /// Cookie learn: a stick table keyed by the value of the servers' own session
    /// cookie, learned from their `Set-Cookie` and matched in later requests' `Cookie`.
    CookieLearn {
        /// Cookie name (case-sensitive).
        name: String,
        /// Table bounds.
        table: StickTableSpec,
    },
    /// A stick table keyed by the `mstshash` cookie of an RDP connection request
    /// (`tcp` services).
    RdpCookie(StickTableSpec),
    /// A stick table keyed by the TLS server name of the ClientHello
    /// (`tls-passthrough` services).
    Sni(StickTableSpec),
}

impl Persistence {
    /// The kind as written in the file: `cookie`, `cookie-learn`, `source`, `header`,
    /// `rdp_cookie` or `sni`.
    pub fn kind(&self) -> &'static str {
        match self {
            Persistence::CookieInsert(_) => "cookie",
            Persistence::CookieLearn { .. } => "cookie-learn",
            Persistence::Source(_) => "source",
            Persistence::Header { .. } => "header",
            Persistence::RdpCookie(_) => "rdp_cookie",
            Persistence::Sni(_) => "sni",
        }
    }
}

/// Settings of an inserted persistence cookie.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CookieInsert {
    /// Cookie name.
    pub name: String,
    /// `Path` attribute (default `/`).
    pub path: String,
    /// `Domain` attribute, if any.
    pub domain: Option<String>,
    /// `Max-Age` attribute; `None` makes a session cookie.
    pub max_age: Option<Duration>,
    /// `Secure` attribute.
    pub secure: bool,
    /// `HttpOnly` attribute (default true).
    pub http_only: bool,
}

/// Bounds of a stick table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StickTableSpec {
    /// An entry unused for this long expires (default 30 min).
    pub idle_timeout: Duration,
    /// Most entries; the least recently used one is evicted beyond (default 100,000).
    pub capacity: usize,
}

impl Default for StickTableSpec {
    fn default() -> Self {
        StickTableSpec { idle_timeout: Duration::from_secs(30 * 60), capacity: 100_000 }
    }
}

/// A balancing method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// Smooth weighted round robin (equal weights give plain round robin).
    RoundRobin,
    /// Fewest active requests relative to weight.
    LeastConnections,
    /// Random with two choices: of two random servers, the less loaded.
    RandomTwo,
    /// Hash of the client address.
    SourceHash,
    /// Hash of [`Pool::hash_key`] (a header or the URI).
    Hash,
    /// Maglev consistent hashing of [`Pool::hash_key`].
    Maglev,
    /// The first available server in file order.
    First,
}

/// What the hash-based algorithms hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashKey {
    /// The client IP address.
    ClientAddr,
    /// The request URI (path and query).
    Uri,
    /// A request header's value (name lower case); requests without it hash the client address.
    Header(String),
}

/// A real server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// Name (defaults to the address), used in logs and stats.
    pub name: String,
    /// Address to connect to.
    pub addr: SocketAddr,
    /// Relative weight, 1..=1000 (0 is allowed and means "never chosen").
    pub weight: u32,
    /// Used only when no primary server is available.
    pub backup: bool,
    /// Most concurrent requests towards this server; `None` is unlimited.
    pub max_connections: Option<u32>,
    /// Where health checks go instead of `addr` (and of the check's `port`).
    pub check_addr: Option<SocketAddr>,
    /// How long the server's weight ramps up after it returns or is added
    /// (the server's own `slow_start`, else the pool's); zero: no ramp.
    pub slow_start: Duration,
}

// ---- TLS and HTTP/2 (issue 6) ----

/// A PEM file's path and the bytes read from it when the configuration was
/// validated. Reading at validation makes a reload pick up new certificate
/// files even when their paths did not change, and makes `==` (and
/// [`crate::diff`]) see the change.
#[derive(Clone, PartialEq, Eq)]
pub struct PemFile {
    /// Where it was read from, as written in the configuration.
    pub path: std::path::PathBuf,
    /// The file's contents (PEM text).
    pub pem: Vec<u8>,
}

impl std::fmt::Debug for PemFile {
    /// Never prints the contents: a key file's PEM is a secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PemFile({}, {} bytes)", self.path.display(), self.pem.len())
    }
}

/// A certificate chain and its private key, checked to belong together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertKey {
    /// The certificate chain, leaf first.
    pub certificate: PemFile,
    /// The leaf's private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PemFile,
    /// DNS names the leaf is valid for (subject alternative names, lower
    /// case, wildcards as `*.suffix`); the server name indication chooses by them.
    pub names: Vec<String>,
}

/// Lowest TLS version a listener accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    /// TLS 1.2 (and 1.3).
    V1_2,
    /// TLS 1.3 only.
    V1_3,
}

/// TLS termination of an `https` service (`tls`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTls {
    /// Certificates from files: at least one, unless `acme` is set (then
    /// none). The first is the default (no server name, or no certificate
    /// valid for it); the others are chosen by server name.
    pub certificates: Vec<CertKey>,
    /// Certificates from an ACME server (RFC 8555) instead of files.
    pub acme: Option<Acme>,
    /// Lowest version accepted (default TLS 1.2).
    pub min_version: TlsVersion,
    /// Cipher suites offered, by rustls name (`TLS13_AES_128_GCM_SHA256`,
    /// `TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`, ...); empty: the modern defaults.
    pub ciphers: Vec<String>,
    /// Key-exchange groups, by name (`x25519`, `secp256r1`, `secp384r1`,
    /// `x25519mlkem768`); empty: the defaults.
    pub groups: Vec<String>,
    /// Stateless resumption with session tickets (rotating keys); default true.
    pub tickets: bool,
    /// Stateful resumption: entries of the server-side session cache; 0 disables it.
    pub session_cache: usize,
    /// Client certificates (mTLS); `None`: not asked for.
    pub client_auth: Option<ClientAuth>,
}

/// How an ACME challenge proves control of a domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcmeChallenge {
    /// `http-01`: an answer at `http://DOMAIN/.well-known/acme-challenge/TOKEN`
    /// (RFC 8555 8.3), given by the `http` services' listeners.
    Http01,
    /// `tls-alpn-01`: a handshake with ALPN `acme-tls/1` (RFC 8737), given by
    /// the service's own listeners.
    TlsAlpn01,
}

impl AcmeChallenge {
    /// The name in the configuration and in RFC 8555's registry.
    pub fn name(self) -> &'static str {
        match self {
            AcmeChallenge::Http01 => "http-01",
            AcmeChallenge::TlsAlpn01 => "tls-alpn-01",
        }
    }
}

/// A service's certificate from an ACME server (`tls.acme`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acme {
    /// The server's directory URL (`https://`).
    pub directory: String,
    /// Contact URLs of the account (`mailto:`), possibly none.
    pub contact: Vec<String>,
    /// The DNS names of the one certificate, at least one, lower case.
    pub domains: Vec<String>,
    /// How control of the domains is proved.
    pub challenge: AcmeChallenge,
    /// Directory of the account credentials, keys and certificates, as
    /// resolved (relative paths start at the configuration file's directory).
    pub storage: std::path::PathBuf,
    /// CA certificates the ACME server's own certificate chains to (a private
    /// CA such as Pebble's); `None`: the system's roots.
    pub ca_roots: Option<PemFile>,
    /// The certificate profile asked for (an ACME profiles extension name such
    /// as `"shortlived"`); `None`: the server's default.
    pub profile: Option<String>,
    /// Certificates issued at the first handshake for a name that has none
    /// (`on_demand`), behind an allow check; `None`: only `domains`.
    pub on_demand: Option<OnDemand>,
}

/// On-demand issuance (`tls.acme.on_demand`): a handshake for a name that has
/// no certificate waits while one is issued, when the name passes the allow
/// check (`allow` and/or `ask`, at least one of them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OnDemand {
    /// The endpoint asked `GET <ask>?domain=<name>` (only a 2xx allows);
    /// an `http://` URL.
    pub ask: Option<String>,
    /// Names (lower case) and `*.suffix` patterns (one label) allowed;
    /// empty: any name `ask` allows.
    pub allow: Vec<String>,
    /// On-demand certificates held at most; further names are refused.
    pub max_certificates: usize,
    /// Names being decided or ordered at once; further names are refused.
    pub max_pending: usize,
    /// New orders at most per `order_period`.
    pub max_orders: u32,
    /// The period of `max_orders`.
    pub order_period: Duration,
    /// How long a refused or failed name is answered from memory (no
    /// second `ask`, no order).
    pub deny_for: Duration,
    /// How long the `ask` endpoint may take; no answer in time refuses.
    pub ask_timeout: Duration,
    /// How long a handshake is held while its certificate is issued.
    pub wait: Duration,
}

/// Verification of client certificates (mTLS) on a listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientAuth {
    /// CA certificates client certificates must chain to.
    pub ca: PemFile,
    /// Refuse the handshake without a valid certificate (`true`), or accept
    /// clients without one and let rules and headers tell them apart.
    pub required: bool,
}

/// HTTP/2 towards clients (`http2`): ALPN `h2` on `https` services and
/// prior-knowledge cleartext (h2c) on `http` services.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http2 {
    /// Offer and accept HTTP/2 (default true).
    pub enabled: bool,
    /// Most concurrent streams per connection (default 100).
    pub max_concurrent_streams: u32,
    /// Stream resets by the client tolerated per connection within 10 s
    /// before the connection is closed with GOAWAY (rapid reset defence; default 200).
    pub max_resets: u32,
    /// PING and SETTINGS frames from the client tolerated per connection
    /// within 10 s before the connection is closed (control-frame flood
    /// defence; default 1000).
    pub max_control_frames: u32,
}

impl Default for Http2 {
    fn default() -> Self {
        Http2 { enabled: true, max_concurrent_streams: 100, max_resets: 200, max_control_frames: 1000 }
    }
}

/// HTTP/3 towards clients (`http3`): QUIC on the UDP ports of an `https`
/// service's listeners, with the service's certificates (ALPN `h3`).
/// 0-RTT is refused (a replayed request could act twice).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http3 {
    /// Accept HTTP/3 and advertise it with `Alt-Svc` (default false).
    pub enabled: bool,
    /// Most concurrent request streams per connection (default 100).
    pub max_concurrent_streams: u32,
    /// Request streams the client resets tolerated per connection within
    /// 10 s before the connection is closed (rapid-reset defence; default 200).
    pub max_resets: u32,
    /// Frames on the client's control stream and unidirectional streams the
    /// client opens, tolerated per connection within 10 s before the
    /// connection is closed (control-frame flood defence; default 1000).
    pub max_control_frames: u32,
    /// Accept requests in TLS 1.3 early data (0-RTT) on resumed connections:
    /// only GET, HEAD and OPTIONS without a body are served from it, others
    /// are answered `425 Too Early` (default false).
    pub early_data: bool,
    /// When a new connection must first prove its address with a Retry
    /// round trip (default [`QuicRetry::Auto`]).
    pub retry: QuicRetry,
    /// Handshakes in flight on a listener from which [`QuicRetry::Auto`]
    /// sends Retry to unvalidated clients (default 100).
    pub retry_threshold: u32,
}

impl Default for Http3 {
    fn default() -> Self {
        Http3 {
            enabled: false,
            max_concurrent_streams: 100,
            max_resets: 200,
            max_control_frames: 1000,
            early_data: false,
            retry: QuicRetry::Auto,
            retry_threshold: 100,
        }
    }
}

/// Address validation of new QUIC connections by a Retry packet (RFC 9000
/// 8.1.2): the client must echo a token before the server keeps any state
/// or sends more than three times what it received (`http3.retry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuicRetry {
    /// Only while more than `retry_threshold` handshakes are in flight on
    /// the listener (HAProxy's `tune.quic.retry-threshold`).
    Auto,
    /// Every new connection (HAProxy's `quic-force-retry`).
    Always,
    /// Never: one round trip less, no protection against spoofed sources.
    Never,
}

/// Protocol spoken to a pool's servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UpstreamProtocol {
    /// HTTP/1.1 with keep-alive (default).
    #[default]
    Http1,
    /// HTTP/2, requests multiplexed over few connections.
    Http2,
}

/// TLS towards a pool's servers (re-encryption), `tls` on a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamTls {
    /// Verify the server's certificate (default true); `false` disables
    /// verification explicitly.
    pub verify: bool,
    /// CA certificates the servers' certificates must chain to; `None`: the
    /// system's trust store.
    pub ca: Option<PemFile>,
    /// Name sent as SNI and verified in the certificate; `None`: the server's
    /// address (an IP address is verified against the certificate's IP names).
    pub server_name: Option<String>,
    /// Client certificate presented to servers.
    pub client_cert: Option<CertKey>,
}

/// A condition on the client certificate of an mTLS connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientCertState {
    /// A certificate was presented and verified.
    Verified,
    /// No certificate was presented (optional client auth, or plain HTTP).
    Absent,
}
