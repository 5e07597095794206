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
#[derive(Clone, Copy, Default)]
pub(super) struct Trace {
    /// When the first byte of the head was read.
    pub(super) head_started: Option<Instant>,
    pub(super) head_us: u64,
    pub(super) connect_us: Option<u64>,
    pub(super) response_us: Option<u64>,
    pub(super) bytes_in: u64,
    pub(super) bytes_out: u64,
    /// (pool, server) indices in the request's generation.
    pub(super) upstream: Option<(usize, usize)>,
    pub(super) http10: bool,
    /// What the cache did (`hit`, `miss`, `stale`, `revalidated`); `None`: not cached.
    pub(super) cache: Option<&'static str>,
    /// The status of a response the cache wrote itself.
    pub(super) cache_status: u16,
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
    let (method, target) = client.line.split_once(' ').unwrap_or((client.line.as_str(), ""));
    let logging = client.local.log.as_ref();
    let record = Record {
        service: &service.name,
        client: client.peer,
        method: method.as_bytes(),
        target: target.as_bytes(),
        version: match (client.transport.http2, t.http10) {
            (true, _) => "HTTP/2",
            (false, true) => "HTTP/1.0",
            (false, false) => "HTTP/1.1",
        },
        host: meta(client, META_HOST),
        status,
        bytes_in: t.bytes_in,
        bytes_out: t.bytes_out,
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
