//! Raw configuration: the file's shape, before any meaning is checked.
//!
//! Every field is optional and wrapped in [`Spanned`] so that validation can
//! point at the key or value it complains about. Values keep the type they
//! must have in TOML (a duration is still the string `"10s"`, an address the
//! string `"127.0.0.1:80"`); what the strings mean is checked in
//! [`crate::validate`]. These types are filled by [`crate::read`] from the
//! spanned TOML document, which has already reported wrong types and unknown
//! keys, so a field here is `None` both when it was absent and when it was
//! unusable.

use toml::Spanned;

/// A value and where it was written (byte range in the source).
pub type S<T> = Spanned<T>;

/// The whole file.
#[derive(Debug, Clone, Default)]
pub struct RawConfig {
    /// `workers`
    pub workers: Option<S<i64>>,
    /// `drain_timeout`, a duration string.
    pub drain_timeout: Option<S<String>>,
    /// `[[service]]` tables, in file order.
    pub services: Vec<S<RawService>>,
    /// `[[pool]]` tables, in file order.
    pub pools: Vec<S<RawPool>>,
    /// `[admin]`
    pub admin: Option<S<RawAdmin>>,
    /// `[access_log]`
    pub access_log: Option<S<RawAccessLog>>,
    /// `[event_log]`
    pub event_log: Option<S<RawEventLog>>,
    /// `[cluster]`
    pub cluster: Option<S<RawCluster>>,
    /// `[tracing]`
    pub tracing: Option<S<RawTracing>>,
    /// Keys that were written but could not be read (wrong type), or that
    /// an unknown key probably misspells. Validation does not also report
    /// these as missing.
    pub broken: Vec<String>,
}

/// The `[cluster]` table: this node and its peers (high availability).
#[derive(Debug, Clone, Default)]
pub struct RawCluster {
    /// `name`: this node's name.
    pub name: Option<S<String>>,
    /// `listen`: where peers connect.
    pub listen: Option<S<String>>,
    /// `key`: the shared secret.
    pub key: Option<S<String>>,
    /// `queue`: updates held per peer.
    pub queue: Option<S<i64>>,
    /// `sync_timeout`: a duration string.
    pub sync_timeout: Option<S<String>>,
    /// `freebind`
    pub freebind: Option<S<bool>>,
    /// `[[cluster.peers]]`, in file order.
    pub peers: Vec<S<RawPeer>>,
    /// Keys that were written but could not be read.
    pub broken: Vec<String>,
}

/// One `[[cluster.peers]]` entry.
#[derive(Debug, Clone, Default)]
pub struct RawPeer {
    /// `name`
    pub name: Option<S<String>>,
    /// `address`
    pub address: Option<S<String>>,
}

/// One `[[service]]` table; its span is the table header.
#[derive(Debug, Clone, Default)]
pub struct RawService {
    /// `name`
    pub name: Option<S<String>>,
    /// `mode`
    pub mode: Option<S<String>>,
    /// `listen`: one string or an array of strings.
    pub listen: Option<S<Vec<S<String>>>>,
    /// `pool`: the default pool's name.
    pub pool: Option<S<String>>,
    /// `x_forwarded_for`
    pub x_forwarded_for: Option<S<bool>>,
    /// `x_forwarded_proto`
    pub x_forwarded_proto: Option<S<bool>>,
    /// `forwarded`
    pub forwarded: Option<S<bool>>,
    /// `timeouts`
    pub timeouts: Option<S<RawTimeouts>>,
    /// `limits`
    pub limits: Option<S<RawLimits>>,
    /// `rules` (inline array or `[[service.rules]]` tables), in order.
    pub rules: Vec<S<RawRule>>,
    /// `idle_timeout` (layer 4), a duration string.
    pub idle_timeout: Option<S<String>>,
    /// `max_connections` (layer 4).
    pub max_connections: Option<S<i64>>,
    /// `when_full` (layer 4).
    pub when_full: Option<S<String>>,
    /// `zero_copy` (layer 4).
    pub zero_copy: Option<S<bool>>,
    /// `udp`: the UDP settings table.
    pub udp: Option<S<RawUdp>>,
    /// `accept_proxy`: one network or an array.
    pub accept_proxy: Option<S<Vec<S<String>>>>,
    /// `sni`: the `tls-passthrough` routes, in order.
    pub sni: Option<S<Vec<S<RawSniRoute>>>>,
    /// `tls`: TLS termination of an `https` service.
    pub tls: Option<S<RawServerTls>>,
    /// `http2`: a boolean (read as `enabled`) or a table.
    pub http2: Option<S<RawHttp2>>,
    /// `http3`
    pub http3: Option<S<RawHttp3>>,
    /// `compression`: a boolean (read as `enabled`) or a table.
    pub compression: Option<S<RawCompression>>,
    /// `cache`: a boolean (true: all defaults) or a table.
    pub cache: Option<S<RawCache>>,
    /// `protection`: per-client limits and address lists.
    pub protection: Option<S<RawProtection>>,
    /// Keys that were written but could not be read (wrong type), or that
    /// an unknown key probably misspells. Validation does not also report
    /// these as missing.
    pub broken: Vec<String>,
}

/// A service's `protection` table.
#[derive(Debug, Clone, Default)]
pub struct RawProtection {
    /// `max_connections_per_client`
    pub max_connections_per_client: Option<S<i64>>,
    /// `connection_rate`
    pub connection_rate: Option<S<RawRate>>,
    /// `request_rate`
    pub request_rate: Option<S<RawRate>>,
    /// `allow`: one network or an array.
    pub allow: Option<S<Vec<S<String>>>>,
    /// `deny`: one network or an array.
    pub deny: Option<S<Vec<S<String>>>>,
    /// `client_address_header`
    pub client_address_header: Option<S<RawClientAddressHeader>>,
    /// `table_size`
    pub table_size: Option<S<i64>>,
}

/// A rate: `{ count, per }`.
#[derive(Debug, Clone, Default)]
pub struct RawRate {
    /// `count`
    pub count: Option<S<i64>>,
    /// `per`, a duration string.
    pub per: Option<S<String>>,
}

/// `client_address_header = { name, trusted }`.
#[derive(Debug, Clone, Default)]
pub struct RawClientAddressHeader {
    /// `name`
    pub name: Option<S<String>>,
    /// `trusted`: one network or an array.
    pub trusted: Option<S<Vec<S<String>>>>,
}

/// A service's `cache` table (`cache = true` reads as an empty table,
/// `cache = false` as `enabled = false`).
#[derive(Debug, Clone, Default)]
pub struct RawCache {
    /// `false` from `cache = false`.
    pub enabled: Option<S<bool>>,
    /// `size`
    pub size: Option<S<RawSize>>,
    /// `max_object`
    pub max_object: Option<S<RawSize>>,
    /// `key`
    pub key: Option<S<Vec<S<String>>>>,
    /// `heuristic`
    pub heuristic: Option<S<bool>>,
    /// `targeted`
    pub targeted: Option<S<Vec<S<String>>>>,
}

/// A service's `timeouts` table; every value is a duration string.
#[derive(Debug, Clone, Default)]
pub struct RawTimeouts {
    /// `client_header`
    pub client_header: Option<S<String>>,
    /// `client_idle`
    pub client_idle: Option<S<String>>,
    /// `connect`
    pub connect: Option<S<String>>,
    /// `server_response`
    pub server_response: Option<S<String>>,
    /// `server_idle`
    pub server_idle: Option<S<String>>,
    /// `client_body`
    pub client_body: Option<S<String>>,
}

/// A size: an integer number of bytes or a string with a unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawSize {
    /// Written as an integer.
    Bytes(i64),
    /// Written as a string such as `"10MiB"`.
    Text(String),
}

/// A service's `limits` table.
#[derive(Debug, Clone, Default)]
pub struct RawLimits {
    /// `max_header_bytes`
    pub max_header_bytes: Option<S<RawSize>>,
    /// `max_headers`
    pub max_headers: Option<S<i64>>,
    /// `max_body_bytes`
    pub max_body_bytes: Option<S<RawSize>>,
    /// `max_uri_bytes`
    pub max_uri_bytes: Option<S<RawSize>>,
}

/// A `header` or `query` condition: a name and at most one way to compare.
#[derive(Debug, Clone, Default)]
pub struct RawFieldMatch {
    /// `name`
    pub name: Option<S<String>>,
    /// `value`: equal to.
    pub value: Option<S<String>>,
    /// `prefix`: starts with.
    pub prefix: Option<S<String>>,
    /// `suffix`: ends with.
    pub suffix: Option<S<String>>,
    /// `regex`: matches.
    pub regex: Option<S<String>>,
    /// Keys that were written but could not be read (wrong type), or that
    /// an unknown key probably misspells. Validation does not also report
    /// these as missing.
    pub broken: Vec<String>,
}

/// A list of `name = "value"` header pairs, in file order.
pub type RawHeaderPairs = Vec<(S<String>, S<String>)>;

/// One rule; its span is the inline table or the `[[service.rules]]` header.
#[derive(Debug, Clone, Default)]
pub struct RawRule {
    /// `name`
    pub name: Option<S<String>>,
    /// `host`
    pub host: Option<S<String>>,
    /// `host_prefix`
    pub host_prefix: Option<S<String>>,
    /// `host_suffix`
    pub host_suffix: Option<S<String>>,
    /// `host_regex`
    pub host_regex: Option<S<String>>,
    /// `path`
    pub path: Option<S<String>>,
    /// `path_prefix`
    pub path_prefix: Option<S<String>>,
    /// `path_suffix`
    pub path_suffix: Option<S<String>>,
    /// `path_regex`
    pub path_regex: Option<S<String>>,
    /// `method`: one string or an array.
    pub method: Option<S<Vec<S<String>>>>,
    /// `header`: one table or an array of tables.
    pub header: Vec<S<RawFieldMatch>>,
    /// `query`: one table or an array of tables.
    pub query: Vec<S<RawFieldMatch>>,
    /// `client`: one network or an array.
    pub client: Option<S<Vec<S<String>>>>,
    /// `set_request_headers`
    pub set_request_headers: Option<S<RawHeaderPairs>>,
    /// `add_request_headers`
    pub add_request_headers: Option<S<RawHeaderPairs>>,
    /// `remove_request_headers`
    pub remove_request_headers: Option<S<Vec<S<String>>>>,
    /// `compress`: only `false` means something (no compression).
    pub compress: Option<S<bool>>,
    /// `set_response_headers`
    pub set_response_headers: Option<S<RawHeaderPairs>>,
    /// `add_response_headers`
    pub add_response_headers: Option<S<RawHeaderPairs>>,
    /// `remove_response_headers`
    pub remove_response_headers: Option<S<Vec<S<String>>>>,
    /// `pool`: action, send to this pool.
    pub pool: Option<S<String>>,
    /// `redirect`: action, redirect to this URL.
    pub redirect: Option<S<String>>,
    /// `respond`: action, answer with this body.
    pub respond: Option<S<String>>,
    /// `deny`: action, refuse.
    pub deny: Option<S<bool>>,
    /// `status` of the action.
    pub status: Option<S<i64>>,
    /// `content_type` of a `respond` action.
    pub content_type: Option<S<String>>,
    /// `redirect_https`: action, redirect to the same URL over https.
    pub redirect_https: Option<S<RawRedirectHttps>>,
    /// `hsts`: a boolean (read as `enabled`) or a table.
    pub hsts: Option<S<RawHsts>>,
    /// `cache`: only `false` (caching off for matching requests).
    pub cache: Option<S<bool>>,
    /// `client_cert`: condition on the client certificate.
    pub client_cert: Option<S<String>>,
    /// Keys that were written but could not be read (wrong type), or that
    /// an unknown key probably misspells. Validation does not also report
    /// these as missing.
    pub broken: Vec<String>,
}

/// One `[[pool]]` table; its span is the table header.
#[derive(Debug, Clone, Default)]
pub struct RawPool {
    /// `name`
    pub name: Option<S<String>>,
    /// `balance`
    pub balance: Option<S<String>>,
    /// `hash_key`
    pub hash_key: Option<S<String>>,
    /// `max_idle_per_server`
    pub max_idle_per_server: Option<S<i64>>,
    /// `max_streams_per_connection`: HTTP/2 streams at once on one server connection.
    pub max_streams_per_connection: Option<S<i64>>,
    /// `servers`
    pub servers: Option<S<Vec<S<RawServer>>>>,
    /// `persistence`
    pub persistence: Option<S<RawPersistence>>,
    /// `send_proxy`: the PROXY protocol version sent to servers.
    pub send_proxy: Option<S<String>>,
    /// `source`: `"client"` (transparent mode) or a fixed address.
    pub source: Option<S<String>>,
    /// `health_check`
    pub health_check: Option<S<RawHealthCheck>>,
    /// `tls`: a boolean (read as `enabled`) or a table.
    pub tls: Option<S<RawUpstreamTls>>,
    /// `protocol`: the HTTP version spoken to the servers.
    pub protocol: Option<S<String>>,
    /// `passive`: passive health checking.
    pub passive: Option<S<RawPassive>>,
    /// `slow_start`: the weight ramp of a returning server, a duration string.
    pub slow_start: Option<S<String>>,
    /// `queue`: requests waiting for a connection slot.
    pub queue: Option<S<RawQueue>>,
    /// `retries`: how many other servers a failed request may try.
    pub retries: Option<S<i64>>,
    /// Keys that were written but could not be read (wrong type), or that
    /// an unknown key probably misspells. Validation does not also report
    /// these as missing.
    pub broken: Vec<String>,
}

/// A pool's `queue` table.
#[derive(Debug, Clone, Default)]
pub struct RawQueue {
    /// `size`: most requests waiting at once.
    pub size: Option<S<i64>>,
    /// `timeout`: longest wait for a slot.
    pub timeout: Option<S<String>>,
    /// Keys that were written but could not be read (wrong type), or that
    /// an unknown key probably misspells.
    pub broken: Vec<String>,
}

/// One server of a pool.
#[derive(Debug, Clone, Default)]
pub struct RawServer {
    /// `address`
    pub address: Option<S<String>>,
    /// `name`
    pub name: Option<S<String>>,
    /// `weight`
    pub weight: Option<S<i64>>,
    /// `backup`
    pub backup: Option<S<bool>>,
    /// `max_connections`
    pub max_connections: Option<S<i64>>,
    /// `check_address`: where health checks go instead of `address`.
    pub check_address: Option<S<String>>,
    /// `slow_start`: this server's weight ramp, a duration string.
    pub slow_start: Option<S<String>>,
    /// Keys that were written but could not be read (wrong type), or that
    /// an unknown key probably misspells. Validation does not also report
    /// these as missing.
    pub broken: Vec<String>,
}

/// The `[admin]` table; its span is the table (header or inline).
#[derive(Debug, Clone, Default)]
pub struct RawAdmin {
    /// `listen`: one address.
    pub listen: Option<S<String>>,
    /// `tokens`: an array of tables.
    pub tokens: Option<S<Vec<S<RawAdminToken>>>>,
    /// Keys that were written but could not be read (wrong type), or that
    /// an unknown key probably misspells.
    pub broken: Vec<String>,
}

/// One entry of `[admin] tokens`.
#[derive(Debug, Clone, Default)]
pub struct RawAdminToken {
    /// `token`: the secret.
    pub token: Option<S<String>>,
    /// `role`
    pub role: Option<S<String>>,
    /// Keys that were written but could not be read (wrong type), or that
    /// an unknown key probably misspells.
    pub broken: Vec<String>,
}

/// The `[access_log]` table.
#[derive(Debug, Clone, Default)]
pub struct RawAccessLog {
    /// `path`: a file, or `"stdout"` / `"-"`.
    pub path: Option<S<String>>,
    /// `format`
    pub format: Option<S<String>>,
    /// `syslog`: `/dev/log`-style socket path or `udp://HOST:PORT`.
    pub syslog: Option<S<String>>,
    /// `facility` of the syslog messages.
    pub facility: Option<S<String>>,
}

/// The `[tracing]` table (OpenTelemetry traces exported by OTLP).
#[derive(Debug, Clone, Default)]
pub struct RawTracing {
    /// `endpoint`: the collector's OTLP/HTTP URL.
    pub endpoint: Option<S<String>>,
    /// `protocol`: `"http/protobuf"`.
    pub protocol: Option<S<String>>,
    /// `sample_ratio`: a number from 0 to 1 (its text, as written).
    pub sample_ratio: Option<S<String>>,
    /// `parent_based`
    pub parent_based: Option<S<bool>>,
    /// `service_name`
    pub service_name: Option<S<String>>,
    /// `batch_size`
    pub batch_size: Option<S<i64>>,
    /// `queue_size`
    pub queue_size: Option<S<i64>>,
    /// `interval`, a duration string.
    pub interval: Option<S<String>>,
    /// `timeout`, a duration string.
    pub timeout: Option<S<String>>,
}

/// The `[event_log]` table.
#[derive(Debug, Clone, Default)]
pub struct RawEventLog {
    /// `syslog`, as in `[access_log]`.
    pub syslog: Option<S<String>>,
    /// `facility`
    pub facility: Option<S<String>>,
}

/// A pool's `persistence` table: one kind key and that kind's options.
#[derive(Debug, Clone, Default)]
pub struct RawPersistence {
    /// `cookie`: kind, cookie insert with this cookie name.
    pub cookie: Option<S<String>>,
    /// `source`: kind, stick table keyed by the client address.
    pub source: Option<S<bool>>,
    /// `header`: kind, stick table keyed by this header's value.
    pub header: Option<S<String>>,
    /// `rdp_cookie`: kind, stick table keyed by the RDP `mstshash` cookie.
    pub rdp_cookie: Option<S<bool>>,
    /// `sni`: kind, stick table keyed by the TLS server name.
    pub sni: Option<S<bool>>,
    /// `mode` of a cookie.
    pub mode: Option<S<String>>,
    /// `path` of a cookie.
    pub path: Option<S<String>>,
    /// `domain` of a cookie.
    pub domain: Option<S<String>>,
    /// `max_age` of a cookie, a duration string.
    pub max_age: Option<S<String>>,
    /// `secure` of a cookie.
    pub secure: Option<S<bool>>,
    /// `http_only` of a cookie.
    pub http_only: Option<S<bool>>,
    /// `idle_timeout` of a stick table, a duration string.
    pub idle_timeout: Option<S<String>>,
    /// `capacity` of a stick table.
    pub capacity: Option<S<i64>>,
    /// Keys that were written but could not be read (wrong type), or that
    /// an unknown key probably misspells.
    pub broken: Vec<String>,
}

/// A pool's `health_check` table.
#[derive(Debug, Clone, Default)]
pub struct RawHealthCheck {
    /// `type`: the probe kind.
    pub kind: Option<S<String>>,
    /// `send`: the payload.
    pub send: Option<S<String>>,
    /// `expect`: a substring of the reply.
    pub expect: Option<S<String>>,
    /// `interval`, a duration string.
    pub interval: Option<S<String>>,
    /// `timeout`, a duration string.
    pub timeout: Option<S<String>>,
    /// `rise`
    pub rise: Option<S<i64>>,
    /// `fall`
    pub fall: Option<S<i64>>,
    /// `port`
    pub port: Option<S<i64>>,
    /// `method` of an HTTP check.
    pub method: Option<S<String>>,
    /// `path` of an HTTP check.
    pub path: Option<S<String>>,
    /// `host` of an HTTP check.
    pub host: Option<S<String>>,
    /// `expect_status` of an HTTP check: codes, classes ("2xx") or ranges
    /// ("200-399"), integers read as their text.
    pub expect_status: Option<S<Vec<S<String>>>>,
    /// `expect_body` of an HTTP check: a substring of the body.
    pub expect_body: Option<S<String>>,
    /// `service` of a gRPC check: the service name asked about.
    pub service: Option<S<String>>,
    /// Keys that were written but could not be read (wrong type), or that
    /// an unknown key probably misspells.
    pub broken: Vec<String>,
}

/// A pool's `passive` table (passive health checking).
#[derive(Debug, Clone, Default)]
pub struct RawPassive {
    /// `failures`: consecutive failures that eject a server.
    pub failures: Option<S<i64>>,
    /// `eject`: how long an ejected server stays out, a duration string.
    pub eject: Option<S<String>>,
    /// Keys that were written but could not be read (wrong type), or that
    /// an unknown key probably misspells.
    pub broken: Vec<String>,
}

/// A service's `udp` table.
#[derive(Debug, Clone, Default)]
pub struct RawUdp {
    /// `max_flows`
    pub max_flows: Option<S<i64>>,
    /// `flow_idle`, a duration string.
    pub flow_idle: Option<S<String>>,
    /// `per_datagram`
    pub per_datagram: Option<S<bool>>,
}

/// One entry of a service's `sni` array; its span is the inline table.
#[derive(Debug, Clone, Default)]
pub struct RawSniRoute {
    /// `name`: a server name or `*.suffix`.
    pub name: Option<S<String>>,
    /// `pool`
    pub pool: Option<S<String>>,
    /// Keys that were written but could not be read (wrong type), or that
    /// an unknown key probably misspells.
    pub broken: Vec<String>,
}

/// A service's `tls` table.
#[derive(Debug, Clone, Default)]
pub struct RawServerTls {
    /// `certificate`: path of the default certificate chain.
    pub certificate: Option<S<String>>,
    /// `key`: path of the default certificate's key.
    pub key: Option<S<String>>,
    /// `certificates`: more certificates, chosen by server name.
    pub certificates: Option<S<Vec<S<RawCertKey>>>>,
    /// `min_version`: `"1.2"` or `"1.3"`.
    pub min_version: Option<S<String>>,
    /// `ciphers`: rustls cipher suite names.
    pub ciphers: Option<S<Vec<S<String>>>>,
    /// `groups`: key-exchange group names.
    pub groups: Option<S<Vec<S<String>>>>,
    /// `tickets`
    pub tickets: Option<S<bool>>,
    /// `session_cache`: a boolean or a number of entries.
    pub session_cache: Option<S<RawCacheSize>>,
    /// `client_auth`
    pub client_auth: Option<S<RawClientAuth>>,
    /// `acme`: certificates from an ACME server instead of files.
    pub acme: Option<S<RawAcme>>,
    /// Keys that were written but could not be read (wrong type), or that
    /// an unknown key probably misspells.
    pub broken: Vec<String>,
}

/// `acme` of a service's `tls`.
#[derive(Debug, Clone, Default)]
pub struct RawAcme {
    /// `directory`: the ACME server's directory URL.
    pub directory: Option<S<String>>,
    /// `contact`: `mailto:` URLs.
    pub contact: Option<S<Vec<S<String>>>>,
    /// `domains`: the names the certificate is for.
    pub domains: Option<S<Vec<S<String>>>>,
    /// `challenge`: `"http-01"` or `"tls-alpn-01"`.
    pub challenge: Option<S<String>>,
    /// `storage`: directory of the account, keys and certificates.
    pub storage: Option<S<String>>,
    /// `ca_roots`: PEM file of the CA the ACME server's own certificate chains to.
    pub ca_roots: Option<S<String>>,
    /// `profile`: the certificate profile asked for.
    pub profile: Option<S<String>>,
    /// `on_demand`: certificates issued at the first handshake for a name.
    pub on_demand: Option<S<RawOnDemand>>,
    /// Keys that were written but could not be read (wrong type), or that
    /// an unknown key probably misspells.
    pub broken: Vec<String>,
}

/// `on_demand` of a service's `tls.acme`.
#[derive(Debug, Clone, Default)]
pub struct RawOnDemand {
    /// `ask`: the `http://` URL asked whether a name may get a certificate.
    pub ask: Option<S<String>>,
    /// `allow`: names and `*.` patterns that may get a certificate.
    pub allow: Option<S<Vec<S<String>>>>,
    /// `max_certificates`: on-demand certificates held at most.
    pub max_certificates: Option<S<i64>>,
    /// `max_pending`: names being decided or ordered at once.
    pub max_pending: Option<S<i64>>,
    /// `max_orders`: new orders per `order_period`.
    pub max_orders: Option<S<i64>>,
    /// `order_period`: the period of `max_orders`.
    pub order_period: Option<S<String>>,
    /// `deny_for`: how long a refused or failed name is remembered.
    pub deny_for: Option<S<String>>,
    /// `ask_timeout`: how long the `ask` endpoint may take.
    pub ask_timeout: Option<S<String>>,
    /// `wait`: how long a handshake is held while its certificate is issued.
    pub wait: Option<S<String>>,
    /// Keys that were written but could not be read (wrong type), or that
    /// an unknown key probably misspells.
    pub broken: Vec<String>,
}

/// `session_cache`: a boolean or an integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawCacheSize {
    /// `true` (the default size) or `false` (none).
    Flag(bool),
    /// A number of entries.
    Entries(i64),
}

/// One entry of `certificates`, or a pool's client certificate.
#[derive(Debug, Clone, Default)]
pub struct RawCertKey {
    /// `certificate`: path of a certificate chain.
    pub certificate: Option<S<String>>,
    /// `key`: path of its private key.
    pub key: Option<S<String>>,
    /// Keys that were written but could not be read (wrong type), or that
    /// an unknown key probably misspells.
    pub broken: Vec<String>,
}

/// `client_auth` of a service's `tls`.
#[derive(Debug, Clone, Default)]
pub struct RawClientAuth {
    /// `ca`: path of the CA certificates.
    pub ca: Option<S<String>>,
    /// `required`
    pub required: Option<S<bool>>,
    /// Keys that were written but could not be read (wrong type), or that
    /// an unknown key probably misspells.
    pub broken: Vec<String>,
}

/// A service's `http2`: `http2 = BOOL` is read as `enabled`.
#[derive(Debug, Clone, Default)]
pub struct RawHttp2 {
    /// `enabled` (or the boolean itself).
    pub enabled: Option<S<bool>>,
    /// `max_concurrent_streams`
    pub max_concurrent_streams: Option<S<i64>>,
    /// `max_resets`
    pub max_resets: Option<S<i64>>,
    /// `max_control_frames`
    pub max_control_frames: Option<S<i64>>,
}

/// A service's `http3`: `http3 = BOOL` is read as `enabled`.
#[derive(Debug, Clone, Default)]
pub struct RawHttp3 {
    /// `enabled` (or the boolean itself).
    pub enabled: Option<S<bool>>,
    /// `max_concurrent_streams`
    pub max_concurrent_streams: Option<S<i64>>,
    /// `max_resets`
    pub max_resets: Option<S<i64>>,
    /// `max_control_frames`
    pub max_control_frames: Option<S<i64>>,
    /// `early_data`
    pub early_data: Option<S<bool>>,
    /// `retry`: `"auto"`, `"always"` or `"never"`
    pub retry: Option<S<String>>,
    /// `retry_threshold`
    pub retry_threshold: Option<S<i64>>,
}

/// A pool's `tls`: `tls = BOOL` is read as `enabled`.
#[derive(Debug, Clone, Default)]
pub struct RawUpstreamTls {
    /// `false` only for `tls = false`.
    pub enabled: Option<S<bool>>,
    /// `verify`
    pub verify: Option<S<bool>>,
    /// `ca`: path of the CA certificates.
    pub ca: Option<S<String>>,
    /// `server_name`
    pub server_name: Option<S<String>>,
    /// `certificate`: path of the client certificate chain.
    pub certificate: Option<S<String>>,
    /// `key`: path of the client certificate's key.
    pub key: Option<S<String>>,
    /// Keys that were written but could not be read (wrong type), or that
    /// an unknown key probably misspells.
    pub broken: Vec<String>,
}

/// A rule's `redirect_https`: `true`/`false` or a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawRedirectHttps {
    /// `true` (redirect to the default port) or `false` (no action).
    Flag(bool),
    /// The port to put in the `Location`.
    Port(i64),
}

/// A rule's `hsts`: `hsts = BOOL` is read as `enabled`.
#[derive(Debug, Clone, Default)]
pub struct RawHsts {
    /// `false` only for `hsts = false`.
    pub enabled: Option<S<bool>>,
    /// `max_age`, a duration string.
    pub max_age: Option<S<String>>,
    /// `include_subdomains`
    pub include_subdomains: Option<S<bool>>,
    /// `preload`
    pub preload: Option<S<bool>>,
}

/// A service's `compression`: `compression = BOOL` is read as `enabled`.
#[derive(Debug, Clone, Default)]
pub struct RawCompression {
    /// `false` only for `compression = false`.
    pub enabled: Option<S<bool>>,
    /// `algorithms`, in preference order.
    pub algorithms: Option<S<Vec<S<String>>>>,
    /// `types`: media types or `type/*` prefixes.
    pub types: Option<S<Vec<S<String>>>>,
    /// `min_size`
    pub min_size: Option<S<RawSize>>,
    /// `max_size`
    pub max_size: Option<S<RawSize>>,
    /// `gzip_level`
    pub gzip_level: Option<S<i64>>,
    /// `brotli_level`
    pub brotli_level: Option<S<i64>>,
    /// `zstd_level`
    pub zstd_level: Option<S<i64>>,
    /// `decompress`
    pub decompress: Option<S<bool>>,
}
