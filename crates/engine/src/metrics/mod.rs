//! Request metrics: counters and latency histograms per service, per server
//! and for TLS handshakes, cheap to write from every worker and summed when
//! read.
//!
//! Every metrics object holds one cache-line-aligned slot per worker. A worker
//! writes only the slot of its own index, so no two threads write one cache
//! line and no write needs a locked read-modify-write; a scrape or a stats
//! request sums the slots ([`ServiceMetrics::snapshot`]). The objects are
//! meant to live in an `Arc` that outlives configuration generations (a
//! service is identified by its name, a server by pool and server name), so
//! counters continue across reloads.
//!
//! Invariants the caller keeps:
//! - at any moment at most one thread records with a given worker index
//!   (each worker thread passes its own, fixed index);
//! - the worker count given at construction does not change for the object's
//!   life. An index past it shares the last slot: nothing breaks, but with two
//!   writers on one slot some increments may be lost.
//!
//! The finished request is described once as a [`Record`], which the access
//! log ([`crate::access_log`]) formats too.

mod exposition;
mod histogram;
mod prometheus;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::time::SystemTime;

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use switchyard_config::Encoding;

use switchyard_http::error::Side;

pub use exposition::Format;
pub use histogram::{index_of, lower_bound, percentile, upper_bound, HistogramSnapshot, BUCKETS, OVERFLOW_US};
pub use prometheus::{encode, AcmeRow, ExpositionView, PeerRow, ProcessGauges, ServerRow, SERVER_STATES};

use histogram::HistogramSlot;

/// Adds `n` to a counter that only the calling thread writes.
///
/// A relaxed load followed by a relaxed store, not `fetch_add`: with a single
/// writer per slot no increment can be lost between the two (nobody else
/// stores to it), and a reader on another thread sees either the old or the
/// new whole value (64-bit atomics never tear). This avoids the locked
/// instruction of `fetch_add`, which costs tens of cycles even uncontended.
#[inline]
pub(crate) fn bump(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Relaxed).wrapping_add(n), Relaxed);
}

/// One finished request, as the log phase sees it. Borrowed fields, so
/// building one copies nothing.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// Service name.
    pub service: &'a str,
    /// Client address.
    pub client: SocketAddr,
    /// Request method (empty when the request line never parsed).
    pub method: &'a [u8],
    /// Request target as the client sent it (path and query).
    pub target: &'a [u8],
    /// Protocol version: `"HTTP/1.1"` or `"HTTP/1.0"`.
    pub version: &'static str,
    /// `Host` header value, if any.
    pub host: Option<&'a [u8]>,
    /// Status sent to the client; 0 when no response was sent.
    pub status: u16,
    /// Bytes received from the client (head and body).
    pub bytes_in: u64,
    /// Bytes sent to the client (head and body).
    pub bytes_out: u64,
    /// Response body bytes sent to the client, head excluded (Apache's `%b`,
    /// NGINX's `$body_bytes_sent`); a layer-4 session's bytes sent.
    pub body_bytes_out: u64,
    /// The part of (`bytes_in`, `bytes_out`) already added to the metrics
    /// while the request ran (a tunnel counts as it goes): not added again.
    pub streamed: (u64, u64),
    /// The server the request went to, if one was chosen.
    pub upstream: Option<Upstream<'a>>,
    /// Durations of the request's phases.
    pub timings: Timings,
    /// Why the request ended early: the error's reason
    /// ([`crate::ProxyError::reason`]); `None` for a normal end.
    pub reason: Option<&'static str>,
    /// Which side failed (see [`side_name`]); `None` for a normal end.
    pub side: Option<&'static str>,
    /// `User-Agent` header value, if any.
    pub user_agent: Option<&'a [u8]>,
    /// `Referer` header value, if any.
    pub referer: Option<&'a [u8]>,
    /// When the request started (first byte of its head).
    pub start: SystemTime,
    /// What the response cache did: `hit`, `miss`, `stale`, `revalidated`;
    /// `None` when the request was not a cache candidate.
    pub cache: Option<&'static str>,
    /// The gRPC status the response carried (`grpc-status`, in its head or
    /// trailers); `None` for anything that is not a gRPC answer.
    pub grpc_status: Option<u16>,
    /// The request's trace id when tracing is on (`[tracing]`).
    pub trace_id: Option<[u8; 16]>,
}

/// The server a request was sent to.
#[derive(Debug, Clone, Copy)]
pub struct Upstream<'a> {
    /// Pool name.
    pub pool: &'a str,
    /// Server name.
    pub server: &'a str,
    /// Server address.
    pub addr: SocketAddr,
}

/// Durations of one request's phases, in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timings {
    /// Receiving the request head.
    pub head_us: u64,
    /// Connecting to the server; `None` when a pooled connection was reused
    /// or no server was needed.
    pub connect_us: Option<u64>,
    /// From the request sent to the server to its response head received.
    pub response_us: Option<u64>,
    /// The whole request, head received to last byte sent.
    pub total_us: u64,
}

/// The name of a [`Side`] in records, logs and metrics.
pub fn side_name(side: Side) -> &'static str {
    match side {
        Side::Client => "client",
        Side::Server => "server",
        Side::Internal => "internal",
    }
}

/// Response status classes, in the order of [`ByClass`]; `none` counts
/// requests that got no response.
pub const CLASSES: [&str; 6] = ["none", "1xx", "2xx", "3xx", "4xx", "5xx"];

#[inline]
fn class_index(status: u16) -> usize {
    match status {
        100..=599 => usize::from(status / 100),
        _ => 0,
    }
}

/// Termination reasons counted by metrics, as label values. The error reasons
/// of [`crate::error`] map onto these (see [`reason_index`]).
pub const REASONS: [&str; 26] = [
    "bad-request",
    "client-header-timeout",
    "header-too-large",
    "expectation-failed",
    "body-too-large",
    "client-closed",
    "client-body-timeout",
    "no-pool",
    "no-server",
    "queue-full",
    "queue-timeout",
    "connect-failed",
    "connect-timeout",
    "server-timeout",
    "server-closed",
    "server-tls-failed",
    "bad-response",
    "uri-too-long",
    "denied",
    "too-many-connections",
    "connection-rate-limited",
    "rate-limited",
    "rapid-reset",
    "control-frame-flood",
    "uni-stream-flood",
    "other",
];

const BAD_REQUEST: usize = 0;
const FIRST_SERVER_REASON: usize = 11;
const BAD_RESPONSE: usize = 16;
const OTHER: usize = 25;

/// Whether a reason (index into [`REASONS`]) is a server's failure.
pub fn is_server_reason(index: usize) -> bool {
    (FIRST_SERVER_REASON..=BAD_RESPONSE).contains(&index)
}

/// The [`REASONS`] index of an error reason string. Matches the strings of
/// [`crate::ProxyError::reason`] and the labels themselves; the detailed
/// reasons of malformed messages fall back on the side: `bad-request` for the
/// client, `bad-response` for the server, else `other`. Only requests that
/// failed pay for this match; a test keeps it in step with the error kinds.
pub fn reason_index(reason: &str, side: Option<&str>) -> usize {
    match reason {
        "bad-request" => BAD_REQUEST,
        "client header timeout" | "client-header-timeout" => 1,
        "request head too large" | "header-too-large" => 2,
        "unsupported expectation" | "expectation-failed" => 3,
        "request body too large" | "body-too-large" => 4,
        "client closed" | "client-closed" => 5,
        "client body timeout" | "client-body-timeout" => 6,
        "no pool for request" | "no-pool" => 7,
        "no server available" | "no-server" => 8,
        "queue full" | "queue-full" => 9,
        "queue timeout" | "queue-timeout" => 10,
        "server connect failed" | "connect-failed" => 11,
        "server connect timeout" | "connect-timeout" => 12,
        "server response timeout" | "server-timeout" => 13,
        "server closed connection" | "server-closed" => 14,
        // ALPN is part of the handshake: a server that refuses h2 failed TLS.
        "server tls failed" | "server did not select h2" | "server-tls-failed" => 15,
        "bad-response" => BAD_RESPONSE,
        "uri too long" | "uri-too-long" => 17,
        "denied" => 18,
        "too-many-connections" => 19,
        "connection-rate-limited" => 20,
        "rate-limited" => 21,
        "rapid-reset" => 22,
        "control-frame-flood" => 23,
        "uni-stream-flood" => 24,
        _ => match side {
            Some("client") => BAD_REQUEST,
            Some("server") => BAD_RESPONSE,
            _ => OTHER,
        },
    }
}

/// A value alone on its cache line(s): 128 bytes covers the adjacent-line
/// prefetcher of x86 and the 128-byte lines of some ARM cores.
#[derive(Debug)]
#[repr(align(128))]
struct Padded<T>(T);

/// One slot per worker.
#[derive(Debug)]
struct Slots<T>(Box<[Padded<T>]>);

impl<T> Slots<T> {
    fn new(workers: usize, make: impl Fn() -> T) -> Self {
        Slots((0..workers.max(1)).map(|_| Padded(make())).collect())
    }

    /// The slot of worker `w`; an index out of range shares the last slot
    /// (see the module invariants).
    #[inline]
    fn get(&self, w: usize) -> &T {
        debug_assert!(w < self.0.len(), "worker index {w} out of {}", self.0.len());
        let last = self.0.len() - 1;
        &self.0[w.min(last)].0
    }

    fn iter(&self) -> impl Iterator<Item = &T> {
        self.0.iter().map(|p| &p.0)
    }
}

fn counters<const N: usize>() -> [AtomicU64; N] {
    std::array::from_fn(|_| AtomicU64::new(0))
}

fn sum<const N: usize>(into: &mut [u64; N], from: &[AtomicU64; N]) {
    for (t, c) in into.iter_mut().zip(from) {
        *t += c.load(Relaxed);
    }
}

/// Counts per status class, in [`CLASSES`] order; serialized as a map
/// (`{"none": 0, "1xx": 0, ...}`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ByClass(pub [u64; 6]);

impl ByClass {
    /// The count of a class label (`"2xx"`, `"none"`...); 0 for unknown labels.
    pub fn get(&self, class: &str) -> u64 {
        CLASSES.iter().position(|c| *c == class).map_or(0, |i| self.0[i])
    }
}

impl Serialize for ByClass {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(CLASSES.len()))?;
        for (k, v) in CLASSES.iter().zip(self.0) {
            m.serialize_entry(k, &v)?;
        }
        m.end()
    }
}

/// gRPC status codes as metric labels (their canonical names), by code.
pub const GRPC_CODES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// gRPC answers per status, in [`GRPC_CODES`] order (a code outside the
/// defined ones counts as `UNKNOWN`, as a gRPC client reads it); serialized
/// as a map of the non-zero ones (`{"OK": 10, "UNAVAILABLE": 1}`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ByGrpcStatus(pub [u64; 17]);

impl ByGrpcStatus {
    /// The count of a code name (`"OK"`...); 0 for unknown names.
    pub fn get(&self, code: &str) -> u64 {
        GRPC_CODES.iter().position(|c| *c == code).map_or(0, |i| self.0[i])
    }

    /// The counter index of a `grpc-status` value.
    pub fn index(status: u16) -> usize {
        match usize::from(status) {
            code @ 0..=16 => code,
            _ => 2,
        }
    }
}

impl Serialize for ByGrpcStatus {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        for (k, v) in GRPC_CODES.iter().zip(self.0).filter(|(_, v)| *v > 0) {
            m.serialize_entry(k, &v)?;
        }
        m.end()
    }
}

/// Counts per termination reason, in [`REASONS`] order; serialized as a map
/// of the non-zero ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ByReason(pub [u64; REASONS.len()]);

impl ByReason {
    /// The count of a reason label (`"connect-failed"`...); 0 for unknown labels.
    pub fn get(&self, reason: &str) -> u64 {
        REASONS.iter().position(|r| *r == reason).map_or(0, |i| self.0[i])
    }
}

impl Serialize for ByReason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        for (k, v) in REASONS.iter().zip(self.0).filter(|(_, v)| *v > 0) {
            m.serialize_entry(k, &v)?;
        }
        m.end()
    }
}

#[derive(Debug)]
struct ServiceSlot {
    opened: AtomicU64,
    closed: AtomicU64,
    requests: AtomicU64,
    responses: [AtomicU64; 6],
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    errors: [AtomicU64; REASONS.len()],
    latency: HistogramSlot,
    /// Payload bytes into and out of each compression algorithm, in [`ALGORITHMS`] order.
    compressed: [[AtomicU64; 2]; 3],
    /// gRPC answers per status, in [`GRPC_CODES`] order.
    grpc: [AtomicU64; 17],
    /// QUIC connection attempts answered with a Retry packet.
    quic_retries: AtomicU64,
}

/// Compression algorithms as metric labels, in the order of the counters.
pub const ALGORITHMS: [Encoding; 3] = [Encoding::Gzip, Encoding::Brotli, Encoding::Zstd];

/// Payload bytes into and out of each compression algorithm, in [`ALGORITHMS`]
/// order; serialized as a map of the algorithms used
/// (`{"gzip": {"bytes_in": 1000, "bytes_out": 250}}`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ByAlgorithm(pub [(u64, u64); 3]);

impl ByAlgorithm {
    /// Bytes in and out of the algorithm with this token (`"gzip"`, `"br"`, `"zstd"`).
    pub fn get(&self, token: &str) -> (u64, u64) {
        ALGORITHMS.iter().position(|a| a.token() == token).map_or((0, 0), |i| self.0[i])
    }
}

impl Serialize for ByAlgorithm {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Bytes {
            bytes_in: u64,
            bytes_out: u64,
        }
        let mut m = s.serialize_map(None)?;
        for (a, (i, o)) in ALGORITHMS.iter().zip(self.0).filter(|(_, (i, _))| *i > 0) {
            m.serialize_entry(a.token(), &Bytes { bytes_in: i, bytes_out: o })?;
        }
        m.end()
    }
}

/// Metrics of one service (all its listeners), written by every worker.
#[derive(Debug)]
pub struct ServiceMetrics {
    slots: Slots<ServiceSlot>,
}

/// A service's metrics summed over the workers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ServiceTotals {
    /// Requests finished (answered or failed).
    pub requests: u64,
    /// Requests per response status class.
    pub responses: ByClass,
    /// Client connections accepted.
    pub connections_opened: u64,
    /// Client connections closed.
    pub connections_closed: u64,
    /// Client connections open now.
    pub connections_current: u64,
    /// Bytes received from clients.
    pub bytes_in: u64,
    /// Bytes sent to clients.
    pub bytes_out: u64,
    /// Request duration (`Timings::total_us`).
    pub latency: HistogramSnapshot,
    /// Failed requests per reason.
    pub errors: ByReason,
    /// Response payload bytes compressed, per algorithm.
    pub compression: ByAlgorithm,
    /// gRPC answers per status (`grpc-status`).
    pub grpc: ByGrpcStatus,
    /// QUIC connection attempts answered with a Retry packet (address
    /// validation, `http3.retry`).
    pub quic_retries: u64,
}

impl ServiceTotals {
    /// Adds a `udp` service's flow counters, whose relay keeps its own:
    /// flows count as connections, datagrams relayed to servers as
    /// requests (a datagram is a udp service's unit of work: a DNS query, a
    /// syslog message), payload bytes as bytes.
    pub fn add_flows(&mut self, f: &crate::relay::FlowStats) {
        self.connections_current += f.active;
        self.connections_opened += f.created;
        self.connections_closed += f.expired;
        self.requests += f.datagrams_to_server;
        self.bytes_in += f.bytes_to_server;
        self.bytes_out += f.bytes_to_client;
    }
}

impl ServiceMetrics {
    /// Metrics for `workers` workers (at least one slot).
    pub fn new(workers: usize) -> Self {
        ServiceMetrics {
            slots: Slots::new(workers, || ServiceSlot {
                opened: AtomicU64::new(0),
                closed: AtomicU64::new(0),
                requests: AtomicU64::new(0),
                responses: counters(),
                bytes_in: AtomicU64::new(0),
                bytes_out: AtomicU64::new(0),
                errors: counters(),
                latency: HistogramSlot::new(),
                compressed: std::array::from_fn(|_| counters()),
                grpc: counters(),
                quic_retries: AtomicU64::new(0),
            }),
        }
    }

    /// Worker `w` encoded a response body of `payload_in` bytes into `payload_out`.
    pub fn compressed(&self, w: usize, algorithm: Encoding, payload_in: u64, payload_out: u64) {
        let s = self.slots.get(w);
        let i = ALGORITHMS.iter().position(|a| *a == algorithm).unwrap_or(0);
        bump(&s.compressed[i][0], payload_in);
        bump(&s.compressed[i][1], payload_out);
    }

    /// Worker `w` accepted a client connection.
    #[inline]
    pub fn connection_opened(&self, w: usize) {
        bump(&self.slots.get(w).opened, 1);
    }

    /// Worker `w` closed a client connection.
    #[inline]
    pub fn connection_closed(&self, w: usize) {
        bump(&self.slots.get(w).closed, 1);
    }

    /// Worker `w` finished a request.
    pub fn request(&self, w: usize, r: &Record) {
        let s = self.slots.get(w);
        bump(&s.requests, 1);
        bump(&s.responses[class_index(r.status)], 1);
        bump(&s.bytes_in, r.bytes_in.saturating_sub(r.streamed.0));
        bump(&s.bytes_out, r.bytes_out.saturating_sub(r.streamed.1));
        s.latency.record(r.timings.total_us);
        if let Some(reason) = r.reason {
            bump(&s.errors[reason_index(reason, r.side)], 1);
        }
        if let Some(status) = r.grpc_status {
            bump(&s.grpc[ByGrpcStatus::index(status)], 1);
        }
    }

    /// Worker `w` passed bytes through a request still running (a tunnel):
    /// counted now, and in the request's [`Record::streamed`] at its end.
    #[inline]
    pub fn streamed(&self, w: usize, bytes_in: u64, bytes_out: u64) {
        let s = self.slots.get(w);
        bump(&s.bytes_in, bytes_in);
        bump(&s.bytes_out, bytes_out);
    }

    /// Worker `w` answered a QUIC connection attempt with a Retry packet.
    pub fn quic_retry(&self, w: usize) {
        bump(&self.slots.get(w).quic_retries, 1);
    }

    /// Worker `w` ended a client connection for `reason` outside any
    /// request (an HTTP/2 defence): counted with the errors, no request.
    pub fn connection_refused(&self, w: usize, reason: &str) {
        bump(&self.slots.get(w).errors[reason_index(reason, None)], 1);
    }

    /// The sum over the workers, read now.
    pub fn snapshot(&self) -> ServiceTotals {
        let mut t = ServiceTotals::default();
        for s in self.slots.iter() {
            t.connections_opened += s.opened.load(Relaxed);
            t.connections_closed += s.closed.load(Relaxed);
            t.requests += s.requests.load(Relaxed);
            sum(&mut t.responses.0, &s.responses);
            t.bytes_in += s.bytes_in.load(Relaxed);
            t.bytes_out += s.bytes_out.load(Relaxed);
            sum(&mut t.errors.0, &s.errors);
            for (total, c) in t.compression.0.iter_mut().zip(&s.compressed) {
                total.0 += c[0].load(Relaxed);
                total.1 += c[1].load(Relaxed);
            }
            sum(&mut t.grpc.0, &s.grpc);
            t.quic_retries += s.quic_retries.load(Relaxed);
        }
        // Closed is read after opened, so it may be ahead by a few connections
        // accepted and closed in between: never show a negative count.
        t.connections_current = t.connections_opened.saturating_sub(t.connections_closed);
        t.latency = HistogramSnapshot::sum_of(self.slots.iter().map(|s| &s.latency));
        t
    }
}

#[derive(Debug)]
struct ServerSlot {
    /// Requests this worker has in flight towards the server (`live::ActiveGuard`).
    in_flight: AtomicU32,
    requests: AtomicU64,
    responses: [AtomicU64; 6],
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    failures: [AtomicU64; REASONS.len()],
    connect: HistogramSlot,
    response: HistogramSlot,
}

/// Metrics of one server of a pool, written by every worker.
#[derive(Debug)]
pub struct ServerMetrics {
    slots: Slots<ServerSlot>,
}

/// A server's metrics summed over the workers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ServerTotals {
    /// Requests finished with this server chosen.
    pub requests: u64,
    /// Those requests per status class of the response sent to the client.
    pub responses: ByClass,
    /// Bytes received from clients in those requests.
    pub bytes_in: u64,
    /// Bytes sent to clients in those requests.
    pub bytes_out: u64,
    /// Connect durations of new connections to the server.
    pub connect_latency: HistogramSnapshot,
    /// From request sent to response head received.
    pub response_latency: HistogramSnapshot,
    /// The server's failures per reason (connect failures retried elsewhere included).
    pub failures: ByReason,
}

impl ServerMetrics {
    /// Metrics for `workers` workers (at least one slot).
    pub fn new(workers: usize) -> Self {
        ServerMetrics {
            slots: Slots::new(workers, || ServerSlot {
                in_flight: AtomicU32::new(0),
                requests: AtomicU64::new(0),
                responses: counters(),
                bytes_in: AtomicU64::new(0),
                bytes_out: AtomicU64::new(0),
                failures: counters(),
                connect: HistogramSlot::new(),
                response: HistogramSlot::new(),
            }),
        }
    }

    /// Worker `w` took (`1`) or released (`-1`) a request slot on this server.
    ///
    /// An atomic add, not [`bump`]: an index out of range shares the last
    /// slot, so a slot may have two writers.
    #[inline]
    pub fn in_flight_add(&self, w: usize, delta: i32) {
        self.slots.get(w).in_flight.fetch_add(delta as u32, Relaxed);
    }

    /// Requests in flight towards this server, over all workers. A slot
    /// taken on one worker is released on the same one, so the sum is exact
    /// when read at rest; read while they change, it may be off by those.
    pub fn in_flight(&self) -> u32 {
        self.slots.iter().fold(0u32, |n, s| n.wrapping_add(s.in_flight.load(Relaxed)))
    }

    /// Worker `w` finished a request that this server was chosen for (the
    /// record's `upstream`). A server-side reason counts as a failure.
    pub fn request(&self, w: usize, r: &Record) {
        let s = self.slots.get(w);
        bump(&s.requests, 1);
        bump(&s.responses[class_index(r.status)], 1);
        bump(&s.bytes_in, r.bytes_in.saturating_sub(r.streamed.0));
        bump(&s.bytes_out, r.bytes_out.saturating_sub(r.streamed.1));
        if let Some(us) = r.timings.connect_us {
            s.connect.record(us);
        }
        if let Some(us) = r.timings.response_us {
            s.response.record(us);
        }
        if let Some(reason) = r.reason {
            let i = reason_index(reason, r.side);
            if is_server_reason(i) || r.side == Some("server") {
                bump(&s.failures[i], 1);
            }
        }
    }

    /// Worker `w` passed bytes through a request to this server still
    /// running (a tunnel); as [`ServiceMetrics::streamed`].
    #[inline]
    pub fn streamed(&self, w: usize, bytes_in: u64, bytes_out: u64) {
        let s = self.slots.get(w);
        bump(&s.bytes_in, bytes_in);
        bump(&s.bytes_out, bytes_out);
    }

    /// Worker `w`'s request failed on this server and may go elsewhere (a
    /// connect failure, or an idempotent request redispatched): the final
    /// [`Record`] names the last server tried, so this failure would otherwise
    /// not be counted. `reason` as in [`Record::reason`].
    pub fn connect_failed(&self, w: usize, reason: &str) {
        bump(&self.slots.get(w).failures[reason_index(reason, Some("server"))], 1);
    }

    /// The sum over the workers, read now.
    pub fn snapshot(&self) -> ServerTotals {
        let mut t = ServerTotals::default();
        for s in self.slots.iter() {
            t.requests += s.requests.load(Relaxed);
            sum(&mut t.responses.0, &s.responses);
            t.bytes_in += s.bytes_in.load(Relaxed);
            t.bytes_out += s.bytes_out.load(Relaxed);
            sum(&mut t.failures.0, &s.failures);
        }
        t.connect_latency = HistogramSnapshot::sum_of(self.slots.iter().map(|s| &s.connect));
        t.response_latency = HistogramSnapshot::sum_of(self.slots.iter().map(|s| &s.response));
        t
    }
}

/// How a TLS handshake ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handshake {
    /// A full handshake.
    Full,
    /// A resumed session (ticket or session ID).
    Resumed,
    /// The handshake failed.
    Failed,
}

/// TLS handshake counters of the process (all listeners), written by every worker.
#[derive(Debug)]
pub struct TlsMetrics {
    slots: Slots<[AtomicU64; 3]>,
}

/// TLS handshakes summed over the workers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TlsTotals {
    /// Full handshakes.
    pub full: u64,
    /// Resumed handshakes.
    pub resumed: u64,
    /// Failed handshakes.
    pub failed: u64,
}

impl TlsMetrics {
    /// Counters for `workers` workers (at least one slot).
    pub fn new(workers: usize) -> Self {
        TlsMetrics { slots: Slots::new(workers, counters) }
    }

    /// Worker `w` finished a handshake.
    #[inline]
    pub fn handshake(&self, w: usize, how: Handshake) {
        bump(&self.slots.get(w)[how as usize], 1);
    }

    /// The sum over the workers, read now.
    pub fn snapshot(&self) -> TlsTotals {
        let mut c = [0u64; 3];
        for s in self.slots.iter() {
            sum(&mut c, s);
        }
        TlsTotals {
            full: c[Handshake::Full as usize],
            resumed: c[Handshake::Resumed as usize],
            failed: c[Handshake::Failed as usize],
        }
    }
}

#[cfg(test)]
mod tests;
