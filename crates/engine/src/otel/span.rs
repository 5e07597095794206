//! One request's spans: its context ([`RequestSpan`], kept by the pipeline
//! while the request runs) and what the exporter gets when it ends
//! ([`Finished`]).
//!
//! The spans of a sampled request, all in one trace:
//!
//! ```text
//! GET (server)                    the request, head received to log phase
//! ├── cache lookup                when the service has a cache
//! ├── GET (client)                to the server: connect to end of response
//! │   ├── connect                 a new server connection only
//! │   └── time to first byte      request sent to response head received
//! └── compress                    response head to end of the encoded body
//! ```
//!
//! The server receives the client span's id as its parent. An unsampled
//! request records nothing (its marks are not stored), but still passes a
//! `traceparent` (flag 00) on, as the recommendation asks of a proxy.

use std::net::SocketAddr;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use switchyard_config::Encoding;
use switchyard_http::parse::Field;
use switchyard_http::rewrite::TraceHeaders;

use super::context::{format_traceparent, TRACEPARENT_LEN};
use crate::metrics::Record;

/// The ids of a request's trace and of its two spans others see.
#[derive(Debug, Clone, Copy)]
pub struct Ids {
    /// The trace (the client's, or new).
    pub trace_id: [u8; 16],
    /// The server span: the request as the client sees it.
    pub server: [u8; 8],
    /// The client span: the request sent on to the server, the parent the server gets.
    pub upstream: [u8; 8],
}

/// When the phases of a sampled request happened.
#[derive(Debug, Clone, Copy, Default)]
struct Marks {
    cache: Option<(Instant, Instant)>,
    /// Start of the first attempt to reach a server.
    upstream: Option<Instant>,
    connect: Option<(Instant, Instant)>,
    first_byte: Option<(Instant, Instant)>,
    /// End of the response from the server.
    upstream_end: Option<Instant>,
    compress: Option<(Instant, Instant, Encoding, u64, u64)>,
}

/// A request's trace context and, when sampled, what its spans record.
#[derive(Debug, Clone)]
pub struct RequestSpan {
    ids: Ids,
    parent: Option<[u8; 8]>,
    sampled: bool,
    /// The client's `tracestate` goes on with its trace (valid, with a valid parent).
    keep_tracestate: bool,
    traceparent: [u8; TRACEPARENT_LEN],
    started: Instant,
    /// Wall-clock time at `started` (only read for a sampled request).
    wall: SystemTime,
    /// Copied from the head of a sampled request: tracestate, host, user agent.
    tracestate: String,
    host: String,
    user_agent: String,
    marks: Marks,
}

impl RequestSpan {
    /// The context of a request whose head is in `buf`; `keep_tracestate`:
    /// the client's trace goes on and its `tracestate` is valid.
    pub(super) fn new(
        ids: Ids,
        parent: Option<[u8; 8]>,
        sampled: bool,
        keep_tracestate: bool,
        started: Instant,
        buf: &[u8],
        fields: &[Field],
    ) -> RequestSpan {
        let mut span = RequestSpan {
            ids,
            parent,
            sampled,
            keep_tracestate,
            traceparent: format_traceparent(&ids.trace_id, &ids.upstream, sampled),
            started,
            wall: UNIX_EPOCH,
            tracestate: String::new(),
            host: String::new(),
            user_agent: String::new(),
            marks: Marks::default(),
        };
        if sampled {
            span.wall = SystemTime::now().checked_sub(started.elapsed()).unwrap_or(UNIX_EPOCH);
            for f in fields {
                let name = &buf[f.name.clone()];
                let value = String::from_utf8_lossy(&buf[f.value.clone()]);
                let into = if name.eq_ignore_ascii_case(b"tracestate") && keep_tracestate {
                    &mut span.tracestate
                } else if name.eq_ignore_ascii_case(b"host") {
                    &mut span.host
                } else if name.eq_ignore_ascii_case(b"user-agent") {
                    &mut span.user_agent
                } else {
                    continue;
                };
                if !into.is_empty() {
                    into.push(',');
                }
                into.push_str(&value);
            }
        }
        span
    }

    /// The trace id (the access log shows it).
    pub fn trace_id(&self) -> [u8; 16] {
        self.ids.trace_id
    }

    /// Whether the request's spans are recorded.
    pub fn sampled(&self) -> bool {
        self.sampled
    }

    /// The ids of the trace and spans.
    pub fn ids(&self) -> Ids {
        self.ids
    }

    /// What the request rewrite sends to the server.
    pub fn propagation(&self) -> TraceHeaders<'_> {
        TraceHeaders { traceparent: &self.traceparent, keep_tracestate: self.keep_tracestate }
    }

    /// The current time, for a sampled request only (the start of a phase).
    pub fn now(span: Option<&RequestSpan>) -> Option<Instant> {
        span.filter(|s| s.sampled).map(|_| Instant::now())
    }

    /// The cache lookup that began at `from` (from [`RequestSpan::now`]) ended now.
    pub fn cache_lookup(span: Option<&mut RequestSpan>, from: Option<Instant>) {
        if let (Some(s), Some(from)) = (span, from) {
            s.marks.cache = Some((from, Instant::now()));
        }
    }

    /// A server connection was taken at `from`: opened now, or `reused` from the idle pool.
    pub fn connected(&mut self, from: Instant, reused: bool) {
        if self.sampled {
            self.marks.upstream.get_or_insert(from);
            self.marks.connect = (!reused).then(|| (from, Instant::now()));
        }
    }

    /// The request went to the server at `sent`; its response head came
    /// `head_us` later, and the response ended now. `compressed`: the
    /// algorithm and payload bytes in and out of an encoded body.
    pub fn responded(&mut self, sent: Instant, head_us: u64, compressed: Option<(Encoding, u64, u64)>) {
        if !self.sampled {
            return;
        }
        let now = Instant::now();
        let head = sent.checked_add(std::time::Duration::from_micros(head_us)).map_or(now, |h| h.min(now));
        self.marks.first_byte = Some((sent, head));
        self.marks.upstream_end = Some(now);
        self.marks.compress = compressed.map(|(algorithm, i, o)| (head, now, algorithm, i, o));
    }

    /// The spans of the finished request described by `record`, or `None`
    /// when it is not sampled. `secure`: the client used TLS.
    pub(crate) fn finish(&self, record: &Record, secure: bool) -> Option<Finished> {
        if !self.sampled {
            return None;
        }
        let now = Instant::now();
        let at = |i: Instant| unix_nanos(self.wall + i.saturating_duration_since(self.started));
        let mut spans = Vec::with_capacity(5);
        spans.push(self.server_span(record, secure, at(self.started), at(now)));
        let m = &self.marks;
        if let Some((from, to)) = m.cache {
            let mut s = SpanRecord::internal("cache lookup", self.ids.server, at(from), at(to));
            if let Some(result) = record.cache {
                s.attributes.push(("switchyard.cache.result", Value::Str(result.to_string())));
            }
            spans.push(s);
        }
        if let (Some(from), Some(upstream)) = (m.upstream, record.upstream) {
            let end = m.upstream_end.unwrap_or(now);
            spans.push(self.client_span(record, upstream, at(from), at(end)));
            if let Some((from, to)) = m.connect {
                let mut s = SpanRecord::internal("connect", self.ids.upstream, at(from), at(to));
                peer(&mut s.attributes, "network.peer", upstream.addr);
                spans.push(s);
            }
            if let Some((from, to)) = m.first_byte {
                spans.push(SpanRecord::internal("time to first byte", self.ids.upstream, at(from), at(to)));
            }
        }
        if let Some((from, to, algorithm, payload_in, payload_out)) = m.compress {
            let mut s = SpanRecord::internal("compress", self.ids.server, at(from), at(to));
            let a = &mut s.attributes;
            a.push(("switchyard.compression.algorithm", Value::Str(algorithm.token().to_string())));
            a.push(("switchyard.compression.bytes_in", Value::Int(payload_in as i64)));
            a.push(("switchyard.compression.bytes_out", Value::Int(payload_out as i64)));
            spans.push(s);
        }
        Some(Finished { trace_id: self.ids.trace_id, tracestate: self.tracestate.clone(), spans })
    }

    fn server_span(&self, r: &Record, secure: bool, start: u64, end: u64) -> SpanRecord {
        let method = method_attribute(r.method);
        let mut s = SpanRecord {
            span_id: self.ids.server,
            parent: self.parent,
            name: method.to_string(),
            kind: Kind::Server,
            start,
            end,
            attributes: Vec::with_capacity(16),
            error: None,
        };
        let a = &mut s.attributes;
        a.push(("http.request.method", Value::Str(method.to_string())));
        if method == "_OTHER" {
            a.push(("http.request.method_original", Value::Str(String::from_utf8_lossy(r.method).into_owned())));
        }
        let target = String::from_utf8_lossy(r.target);
        let (path, query) = target.split_once('?').map_or((&*target, None), |(p, q)| (p, Some(q)));
        a.push(("url.path", Value::Str(path.to_string())));
        if let Some(q) = query {
            a.push(("url.query", Value::Str(q.to_string())));
        }
        a.push(("url.scheme", Value::Str(if secure { "https" } else { "http" }.to_string())));
        if !self.host.is_empty() {
            let (host, port) = split_host(&self.host);
            a.push(("server.address", Value::Str(host.to_string())));
            if let Some(p) = port {
                a.push(("server.port", Value::Int(i64::from(p))));
            }
        }
        a.push(("client.address", Value::Str(r.client.ip().to_string())));
        peer(a, "network.peer", r.client);
        a.push(("network.protocol.version", Value::Str(protocol_version(r.version).to_string())));
        if !self.user_agent.is_empty() {
            a.push(("user_agent.original", Value::Str(self.user_agent.clone())));
        }
        if r.status > 0 {
            a.push(("http.response.status_code", Value::Int(i64::from(r.status))));
        }
        a.push(("http.response.body.size", Value::Int(r.body_bytes_out as i64)));
        a.push(("switchyard.service", Value::Str(r.service.to_string())));
        // A server span fails on a 5xx or an error of the proxy's; a 4xx is the client's doing.
        s.error = match r.reason {
            Some(reason) => Some(reason.to_string()),
            None if r.status >= 500 => Some(r.status.to_string()),
            None => None,
        };
        if let Some(e) = &s.error {
            s.attributes.push(("error.type", Value::Str(e.clone())));
        }
        s
    }

    fn client_span(&self, r: &Record, upstream: crate::metrics::Upstream<'_>, start: u64, end: u64) -> SpanRecord {
        let method = method_attribute(r.method);
        let mut s = SpanRecord {
            span_id: self.ids.upstream,
            parent: Some(self.ids.server),
            name: method.to_string(),
            kind: Kind::Client,
            start,
            end,
            attributes: Vec::with_capacity(10),
            error: None,
        };
        let a = &mut s.attributes;
        a.push(("http.request.method", Value::Str(method.to_string())));
        a.push(("server.address", Value::Str(upstream.addr.ip().to_string())));
        a.push(("server.port", Value::Int(i64::from(upstream.addr.port()))));
        peer(a, "network.peer", upstream.addr);
        a.push(("switchyard.pool", Value::Str(upstream.pool.to_string())));
        a.push(("switchyard.server", Value::Str(upstream.server.to_string())));
        if r.status > 0 {
            a.push(("http.response.status_code", Value::Int(i64::from(r.status))));
        }
        // A client span fails on any 4xx or 5xx, and on a server-side error.
        s.error = match (r.reason, r.side) {
            (Some(reason), Some("server")) => Some(reason.to_string()),
            _ if r.status >= 400 => Some(r.status.to_string()),
            _ => None,
        };
        if let Some(e) = &s.error {
            s.attributes.push(("error.type", Value::Str(e.clone())));
        }
        s
    }
}

/// The kind of a span (OTLP's `SpanKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Inside switchyard.
    Internal,
    /// The request from the client.
    Server,
    /// The request to the server.
    Client,
}

/// An attribute value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Text.
    Str(String),
    /// A number.
    Int(i64),
}

/// One span, as the worker hands it over; the exporter thread turns it into OTLP.
#[derive(Debug, Clone)]
pub struct SpanRecord {
    /// This span.
    pub span_id: [u8; 8],
    /// Its parent (`None`: the root of the trace).
    pub parent: Option<[u8; 8]>,
    /// Its name.
    pub name: String,
    /// Its kind.
    pub kind: Kind,
    /// Start and end, in nanoseconds since the Unix epoch.
    pub start: u64,
    /// See `start`.
    pub end: u64,
    /// Attributes, semantic-convention keys first.
    pub attributes: Vec<(&'static str, Value)>,
    /// The span's status is an error, with this `error.type`.
    pub error: Option<String>,
}

impl SpanRecord {
    fn internal(name: &str, parent: [u8; 8], start: u64, end: u64) -> SpanRecord {
        SpanRecord {
            // Internal spans get ids derived from the parent and the name:
            // nobody refers to them, they need only be unique in the trace.
            span_id: derive_id(parent, name),
            parent: Some(parent),
            name: name.to_string(),
            kind: Kind::Internal,
            start,
            end,
            attributes: Vec::new(),
            error: None,
        }
    }
}

/// What a finished sampled request hands to the exporter.
#[derive(Debug, Clone)]
pub struct Finished {
    /// The trace of every span.
    pub trace_id: [u8; 16],
    /// The client's `tracestate`, kept on the spans (empty: none).
    pub tracestate: String,
    /// The request's spans, the server span first.
    pub spans: Vec<SpanRecord>,
}

/// A span id from `parent` and a name (FNV-1a, never zero).
fn derive_id(parent: [u8; 8], name: &str) -> [u8; 8] {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in parent.iter().chain(name.as_bytes()) {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    h.max(1).to_be_bytes()
}

fn unix_nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn peer(a: &mut Vec<(&'static str, Value)>, prefix: &'static str, addr: SocketAddr) {
    let (address, port) = match prefix {
        "network.peer" => ("network.peer.address", "network.peer.port"),
        _ => ("server.address", "server.port"),
    };
    a.push((address, Value::Str(addr.ip().to_string())));
    a.push((port, Value::Int(i64::from(addr.port()))));
}

/// The method as the semantic conventions want it: a known method, else `_OTHER`.
fn method_attribute(method: &[u8]) -> &'static str {
    const KNOWN: [&str; 9] = ["GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"];
    KNOWN.iter().find(|m| m.as_bytes() == method).copied().unwrap_or("_OTHER")
}

fn protocol_version(version: &str) -> &str {
    version.strip_prefix("HTTP/").unwrap_or(version)
}

/// `host[:port]` (brackets of an IPv6 literal removed).
fn split_host(host: &str) -> (&str, Option<u16>) {
    let (name, port) = match host.rfind(':') {
        Some(i) if !host[i..].contains(']') => (&host[..i], host[i + 1..].parse().ok()),
        _ => (host, None),
    };
    (name.trim_start_matches('[').trim_end_matches(']'), port)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        assert_eq!(split_host("example.com:8080"), ("example.com", Some(8080)));
        assert_eq!(split_host("[::1]:80"), ("::1", Some(80)));
        assert_eq!(split_host("[::1]"), ("::1", None));
        assert_eq!(method_attribute(b"GET"), "GET");
        assert_eq!(method_attribute(b"PURGE"), "_OTHER");
        assert_ne!(derive_id([1; 8], "connect"), derive_id([1; 8], "compress"));
    }
}
