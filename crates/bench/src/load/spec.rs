//! What a load run is asked to do ([`LoadSpec`]) and what it reports
//! ([`LoadReport`]). Kept apart from the generator's machinery so the runner
//! and the generator can be read (and changed) independently.

use std::net::SocketAddr;
use std::time::Duration;

/// HTTP version spoken to the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/1.1.
    Http1,
    /// HTTP/2 (over TLS via ALPN, or prior knowledge in clear text).
    Http2,
    /// HTTP/3 over QUIC (ALPN `h3`; needs [`LoadSpec::tls`]). The target address is
    /// a UDP one.
    Http3,
}

/// Key-exchange group offered by the TLS client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KxGroup {
    /// X25519 (the default: cheapest for the client).
    X25519,
    /// NIST P-256.
    P256,
    /// The X25519 + ML-KEM-768 post-quantum hybrid (≈20 % more client CPU).
    X25519MlKem768,
}

/// TLS settings of the generator.
#[derive(Debug, Clone)]
pub struct TlsSpec {
    /// SNI and certificate name.
    pub server_name: String,
    /// Resume sessions (tickets or IDs) on new connections; false: every
    /// connection is a full handshake.
    pub resume: bool,
    /// Key-exchange group offered.
    pub group: KxGroup,
    /// Accept any certificate (benchmarks use generated self-signed ones).
    pub insecure: bool,
}

/// Closed loop (as fast as possible) or open loop (a fixed request rate).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pace {
    /// Every connection sends its next request as soon as the previous answer arrived.
    Closed,
    /// Requests are scheduled at this many per second over all connections;
    /// latency is measured from the scheduled time (coordinated omission corrected).
    Open {
        /// Requests per second.
        rate: f64,
    },
}

/// One load run.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    /// Where to connect.
    pub target: SocketAddr,
    /// `Host` header (and default SNI).
    pub host: String,
    /// TLS, when the target speaks it.
    pub tls: Option<TlsSpec>,
    /// HTTP version.
    pub protocol: Protocol,
    /// Request paths (with query), used in rotation.
    pub paths: Vec<String>,
    /// Extra request headers (e.g. `accept-encoding: gzip`).
    pub headers: Vec<(String, String)>,
    /// Keep cookies set by responses per connection's user and send them back
    /// (cookie persistence test). A new connection keeps its user's cookies.
    pub cookies: bool,
    /// Concurrent connections (closed loop) or maximum in flight (open loop).
    pub connections: usize,
    /// Requests per connection before it is closed and reopened; `None` is unlimited.
    pub requests_per_connection: Option<u32>,
    /// Pacing.
    pub pace: Pace,
    /// Warm-up before measuring (not counted).
    pub warmup: Duration,
    /// Measured duration.
    pub duration: Duration,
    /// Generator threads (each with its own event loop and many connections).
    pub threads: usize,
}

/// What a load run measured (warm-up excluded).
#[derive(Debug, Clone, Default)]
pub struct LoadReport {
    /// Requests answered with a 2xx or 3xx status.
    pub requests: u64,
    /// Failed requests: connect/TLS/IO errors, timeouts, 4xx/5xx answers.
    pub errors: u64,
    /// Connections opened.
    pub connections: u64,
    /// TLS handshakes completed, and how many of them were resumptions.
    pub tls_handshakes: u64,
    /// Resumed handshakes.
    pub tls_resumed: u64,
    /// The cipher suite negotiated (IANA name, e.g. `TLS13_AES_128_GCM_SHA256`), if TLS.
    pub tls_suite: Option<String>,
    /// Response body bytes received.
    pub body_bytes: u64,
    /// Responses that carried `content-encoding` (compression checks).
    pub encoded_responses: u64,
    /// Measured wall time.
    pub elapsed: Duration,
    /// Latency percentiles in microseconds (from the intended send time in open loop).
    pub latency: crate::results::Percentiles,
    /// CPU seconds the generator's own threads used during the measurement.
    pub cpu_s: f64,
}

/// A UDP load run: datagrams sent to `target`, each answered by the echo origin.
#[derive(Debug, Clone)]
pub struct UdpSpec {
    /// Where to send.
    pub target: SocketAddr,
    /// Ethernet frame sizes to cycle through (64..=1518); the UDP payload is
    /// the frame size minus 42 bytes of Ethernet, IP and UDP headers.
    pub frame_sizes: Vec<usize>,
    /// Flows (source sockets) used.
    pub flows: usize,
    /// Measured duration.
    pub duration: Duration,
}

/// What a UDP run measured.
#[derive(Debug, Clone, Default)]
pub struct UdpReport {
    /// Datagrams sent.
    pub sent: u64,
    /// Datagrams answered.
    pub received: u64,
    /// Payload bytes answered.
    pub bytes: u64,
    /// Measured wall time.
    pub elapsed: Duration,
    /// Round-trip percentiles in microseconds.
    pub latency: crate::results::Percentiles,
}
