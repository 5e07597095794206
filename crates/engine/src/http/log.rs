//! Phase 9, log: what a finished request leaves behind — its service's and
//! server's metrics, an access log line, and a `warn` line when it failed.
//!
//! The pipeline fills a [`Trace`] as the request goes through its phases;
//! [`log`] turns it into one [`Record`] and hands that to every consumer.
//! Header values only the access log needs are copied out of the head by
//! [`keep_meta`], and only when an access log is configured.

use std::time::{Instant, SystemTime};

use switchyard_config::Service;

use super::Client;
use crate::metrics::{reason_index, side_name, Record, Timings, Upstream, REASONS};
use switchyard_http::error::ProxyError;
use switchyard_http::parse::RequestHead;

/// What the log phase reports about a request, filled in phase by phase.
///
/// In declared order (`repr(C)`): what the response's relay writes, after the
/// round trip to the server, comes first and together — 39 bytes, one or two
/// cache lines rather than three (a stream's state is cold by then: each line
/// written is a miss).
#[derive(Clone, Copy, Default)]
#[repr(C)]
pub(super) struct Trace {
    pub(super) response_us: Option<u64>,
    pub(super) bytes_out: u64,
    /// Of `bytes_out`, the response body's (head excluded).
    pub(super) body_out: u64,
    /// The gRPC status of the response (`grpc-status`), when it had one.
    pub(super) grpc_status: Option<u16>,
    /// The status of a response the cache wrote itself.
    pub(super) cache_status: u16,
    pub(super) http10: bool,
    /// The RST_STREAM code an HTTP/2 server reset the request's stream with.
    pub(super) server_reset: Option<u32>,
    pub(super) bytes_in: u64,
    pub(super) head_us: u64,
    /// When the first byte of the head was read.
    pub(super) head_started: Option<Instant>,
    pub(super) connect_us: Option<u64>,
    /// Of (`bytes_in`, `bytes_out`), what a tunnel already counted in the
    /// metrics while open.
    pub(super) streamed: (u64, u64),
    /// The protocol version of a request line that never parsed, as the
    /// client wrote it when it is one we know (`-` otherwise).
    pub(super) unparsed: Option<&'static str>,
    /// (pool, server) indices in the request's generation.
    pub(super) upstream: Option<(usize, usize)>,
    /// What the cache did (`hit`, `miss`, `stale`, `revalidated`); `None`: not cached.
    pub(super) cache: Option<&'static str>,
}

/// Indices into [`Client::meta_at`].
pub(super) const META_HOST: usize = 0;
pub(super) const META_USER_AGENT: usize = 1;
pub(super) const META_REFERER: usize = 2;

/// Counts the connection closed in its service's metrics when it ends.
pub(crate) struct CloseGuard<'a>(pub(super) &'a crate::metrics::ServiceMetrics, pub(super) usize);

impl<'a> CloseGuard<'a> {
    /// Counts a connection of worker `w` closed in `metrics` when dropped.
    pub(crate) fn new(metrics: &'a crate::metrics::ServiceMetrics, w: usize) -> Self {
        CloseGuard(metrics, w)
    }
}

impl Drop for CloseGuard<'_> {
    fn drop(&mut self) {
        self.0.connection_closed(self.1);
    }
}

pub(super) fn micros(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Phase 9: log the request: metrics of its service and server, the access
/// log line, and failures at `warn` with their reason and side.
pub(super) fn log<S>(client: &Client<S>, service: &Service, status: u16, error: Option<&ProxyError>, started: Instant) {
    let total_us = micros(started.elapsed());
    if let Some(e) = error {
        tracing::warn!(
            service = %service.name,
            client = %client.peer,
            request = %client.line,
            status,
            side = ?e.side(),
            reason = e.reason(),
            micros = total_us,
            "request failed"
        );
    }
    let gen = &client.local.gen;
    let t = &client.trace;
    let server =
        t.upstream.and_then(|(p, s)| Some((&gen.config.pools.get(p)?.name, gen.pools.get(p)?.servers.get(s)?)));
    // The method is a token: the first space ends it (an ASCII byte, so both
    // sides are whole characters).
    let line = client.line.as_str();
    let (method, target) = memchr::memchr(b' ', line.as_bytes()).map_or((line, ""), |i| (&line[..i], &line[i + 1..]));
    let logging = client.local.log.as_ref();
    let record = Record {
        service: &service.name,
        client: client.peer,
        method: method.as_bytes(),
        target: target.as_bytes(),
        version: match (t.unparsed, client.transport.http2, t.http10) {
            (Some(version), _, _) => version,
            (None, _, _) if client.transport.http3 => "HTTP/3",
            (None, true, _) => "HTTP/2",
            (None, false, true) => "HTTP/1.0",
            (None, false, false) => "HTTP/1.1",
        },
        host: meta(client, META_HOST),
        status,
        bytes_in: t.bytes_in,
        bytes_out: t.bytes_out,
        body_bytes_out: t.body_out,
        streamed: t.streamed,
        upstream: server.map(|(pool, live)| Upstream { pool, server: &live.name, addr: live.addr }),
        timings: Timings { head_us: t.head_us, connect_us: t.connect_us, response_us: t.response_us, total_us },
        reason: error.map(|e| REASONS[reason_index(e.reason(), Some(side_name(e.side())))]),
        side: error.map(|e| side_name(e.side())),
        user_agent: meta(client, META_USER_AGENT),
        referer: meta(client, META_REFERER),
        // Only the access log reads the wall clock.
        start: match logging {
            Some(_) => SystemTime::now() - std::time::Duration::from_micros(total_us + t.head_us),
            None => SystemTime::UNIX_EPOCH,
        },
        cache: t.cache,
        grpc_status: t.grpc_status,
        trace_id: client.otel.as_deref().map(crate::otel::RequestSpan::trace_id),
    };
    if let Some(m) = gen.services.get(client.service) {
        m.request(client.worker, &record);
    }
    if let Some((_, live)) = server {
        live.metrics.request(client.worker, &record);
    }
    if let Some(line) = logging {
        line.log(&record);
    }
    if let (Some(span), Some(tracer)) = (&client.otel, &client.local.tracer) {
        if let Some(finished) = span.finish(&record, client.transport.secure) {
            tracer.export(finished);
        }
    }
}

/// Most bytes of an unparseable request line kept for its log line.
const UNPARSED_LINE: usize = 1024;

/// Before logging a request whose head never parsed: what the client really
/// sent — the bytes received, and the method, target and version of its
/// first line as far as they go (lossy UTF-8, at most [`UNPARSED_LINE`]
/// bytes) — instead of what a previous request on the connection left.
pub(super) fn keep_unparsed<S>(client: &mut Client<S>) {
    client.trace.bytes_in = client.buf.len() as u64;
    let first = client.buf[..].split(|&b| b == b'\n').next().unwrap_or(&[]);
    let first = first.strip_suffix(b"\r").unwrap_or(first);
    let first = String::from_utf8_lossy(&first[..first.len().min(UNPARSED_LINE)]).into_owned();
    let mut words = first.split(' ').filter(|w| !w.is_empty());
    let (method, target, version) = (words.next(), words.next(), words.next());
    client.line.clear();
    client.line.push_str(method.unwrap_or(""));
    client.line.push(' ');
    client.line.push_str(target.unwrap_or(""));
    client.trace.unparsed = Some(match version {
        Some("HTTP/1.1") => "HTTP/1.1",
        Some("HTTP/1.0") => "HTTP/1.0",
        _ => "-",
    });
}

/// After a relayed protocol switch: copies bytes both ways between the
/// client and `server` until either side ends, counting them in the
/// service's and the server's metrics as they pass (so a long WebSocket
/// shows its traffic while open), then in the request's trace for its log
/// line. `pre`: bytes already passed in (to the server, to the client)
/// before the copy began (read along with the heads).
pub(super) async fn counted_tunnel<S, U>(client: &mut Client<S>, server: &mut U, pre: (u64, u64))
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    U: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let local = client.local.clone();
    let w = client.worker;
    let service = local.gen.services.get(client.service);
    let chosen = client.trace.upstream.and_then(|(p, s)| local.gen.pools.get(p)?.servers.get(s));
    let tally = |bytes_in: u64, bytes_out: u64| {
        if let Some(m) = service {
            m.streamed(w, bytes_in, bytes_out);
        }
        if let Some(live) = chosen {
            live.metrics.streamed(w, bytes_in, bytes_out);
        }
    };
    tally(pre.0, pre.1);
    let mut counted = crate::relay::counted::Counted::new(&mut client.stream, tally);
    let _ = tokio::io::copy_bidirectional(&mut counted, server).await;
    let (read, written) = (counted.read + pre.0, counted.written + pre.1);
    let t = &mut client.trace;
    t.bytes_in += read;
    t.bytes_out += written;
    t.body_out += written;
    t.streamed = (t.streamed.0 + read, t.streamed.1 + written);
}

/// Copies the header values the access log reports into `client.meta`,
/// while the head is still in the buffer.
pub(super) fn keep_meta<S>(client: &mut Client<S>, head: &RequestHead) {
    client.meta.clear();
    client.meta_at = [None; 3];
    let buf = &client.buf[..head.len];
    let mut keep = |slot: usize, value: &[u8], meta: &mut Vec<u8>| {
        let start = meta.len();
        meta.extend_from_slice(value);
        client.meta_at[slot] = Some((start as u32, meta.len() as u32));
    };
    if let Some(r) = head.host.clone() {
        keep(META_HOST, &buf[r], &mut client.meta);
    }
    for f in &client.fields {
        let name = &buf[f.name.clone()];
        let slot = if name.eq_ignore_ascii_case(b"user-agent") {
            META_USER_AGENT
        } else if name.eq_ignore_ascii_case(b"referer") {
            META_REFERER
        } else {
            continue;
        };
        keep(slot, &buf[f.value.clone()], &mut client.meta);
    }
}

fn meta<S>(client: &Client<S>, slot: usize) -> Option<&[u8]> {
    let (start, end) = client.meta_at[slot]?;
    client.meta.get(start as usize..end as usize)
}
