//! The proxy's own responses — a rule's answer, a refusal, an error
//! ([`answer`], [`fail`], [`send_own`]) — and phase 10 of a request the
//! cache took part in, or that failed ([`conclude`]).

use std::time::Instant;

use bytes::Buf;
use switchyard_config::Service;
use switchyard_http::error::{Kind, ProxyError};
use switchyard_http::head_writer::{FieldList, HeadWriter};

use super::body::write_all;
use super::log::log;
use super::parse::{Connection, Framing, Version};
use super::respond::{add_alt_svc, alt_svc};
use super::{cached, relayed, rewrite, Client, Failed, Outcome, RequestInfo};
use crate::transport::ClientStream;
use crate::worker::{Local, Worker};

/// A response of the proxy's own (a rule's answer, an error, a refusal).
pub(super) struct Own<'a> {
    pub(super) status: u16,
    pub(super) location: Option<&'a str>,
    pub(super) content_type: &'a str,
    pub(super) body: &'a [u8],
    pub(super) connection: Connection,
}

/// Sends a response of the proxy's own through the client's head writer —
/// `retry-after` for an `error` that has one, `alt-svc` where HTTP/3 is
/// advertised — then its body. Whether all was written, and the bytes the
/// access log counts (head as HTTP/1.1 text, and body).
pub(super) async fn send_own<S: ClientStream>(
    client: &mut Client<S>,
    service: &Service,
    own: Own<'_>,
    error: Option<&ProxyError>,
) -> (bool, u64) {
    let port = alt_svc(client, service);
    let idle = service.timeouts.client_idle;
    if client.stream.takes_fields() {
        let mut list = FieldList::default();
        let body =
            rewrite::write_local_head(&mut list, own.status, own.location, own.content_type, own.body, own.connection);
        if let Some(secs) = error.and_then(ProxyError::retry_after) {
            list.append(b"retry-after", itoa::Buffer::new().format(secs).as_bytes());
        }
        if let Some(port) = port {
            list.alt_svc(port);
        }
        let ok = client.stream.send_fields(&list).is_ok() && write_all(&mut client.stream, body, idle).await.is_ok();
        return (ok, (list.text_len() + body.len()) as u64);
    }
    rewrite::local_response(&mut client.out, own.status, own.location, own.content_type, own.body, own.connection);
    if let Some(error) = error {
        add_retry_after(&mut client.out, error);
    }
    add_alt_svc(&mut client.out, port);
    let ok = write_all(&mut client.stream, &client.out, idle).await.is_ok();
    (ok, client.out.len() as u64)
}

/// Adds `Retry-After` to a local response head for an error that has one.
pub(super) fn add_retry_after(out: &mut Vec<u8>, error: &ProxyError) {
    if let Some(secs) = error.retry_after() {
        // After the status line: the order of fields carries no meaning.
        let at = memchr::memchr(b'\n', out).map_or(0, |i| i + 1);
        let field = format!("retry-after: {secs}\r\n");
        out.splice(at..at, field.into_bytes());
    }
}

/// Phase 10, after the exchange: the cache stores a complete response or
/// answers itself (304, stale-if-error); then the log line, or the failure's
/// answer. Returns whether the client connection stays open.
#[allow(clippy::too_many_arguments)]
pub(super) async fn conclude<S: ClientStream>(
    client: &mut Client<S>,
    service: &Service,
    worker: &Worker,
    local: &Local,
    info: RequestInfo,
    plan: Option<cached::Plan<'_>>,
    forwarded: Result<Outcome, Failed>,
    started: Instant,
) -> bool {
    let capture = client.capture.take();
    client.intercept = cached::Intercept::default();
    if let Some(plan) = plan {
        let ended = match &forwarded {
            Ok(o) if o.intercepted => cached::Ended::Intercepted { status: o.status },
            Ok(o) => cached::Ended::Relayed { status: o.status, capture: capture.as_ref() },
            Err(Failed { relayed: None, .. }) => cached::Ended::Failed,
            Err(_) => cached::Ended::Relayed { status: 0, capture: None },
        };
        let draining = worker.closing(local.gen.number, &service.name);
        if let Some(keep) = cached::finish(client, service, info, plan, ended, draining).await {
            log(client, service, client.trace.cache_status, None, started);
            return keep && !draining;
        }
    }
    match forwarded {
        Ok(outcome) if outcome.intercepted => {
            // The cache held the response back but could not answer after all
            // (its stale entry expired meanwhile, or the 304 was malformed).
            fail(client, service, &ProxyError::new(Kind::BadResponse("response held for the cache")), started).await;
            false
        }
        Ok(outcome) => relayed(client, service, worker, local, &outcome, started),
        Err(Failed { error, relayed: None }) => {
            // A stream the server refused was not processed (RFC 9113 8.7): an
            // HTTP/2 client gets the refusal itself, which it may retry anywhere.
            if client.trace.server_reset == Some(REFUSED_STREAM) && reset_client(client, REFUSED_STREAM) {
                log(client, service, 0, Some(&error), started);
            } else {
                fail(client, service, &error, started).await;
            }
            false
        }
        Err(Failed { error, relayed: Some(status) }) => {
            // Headers already went out: the only honest signal left is to
            // close the connection before the body is complete (an HTTP/2
            // client's stream is reset with the server's own code, if it gave
            // one, else INTERNAL_ERROR).
            reset_client(client, client.trace.server_reset.unwrap_or(INTERNAL_ERROR));
            log(client, service, status, Some(&error), started);
            false
        }
    }
}

/// RST_STREAM's REFUSED_STREAM code (RFC 9113 7).
pub(super) const REFUSED_STREAM: u32 = 0x7;

/// RST_STREAM's INTERNAL_ERROR code (RFC 9113 7).
pub(super) const INTERNAL_ERROR: u32 = 0x2;

/// Asks an HTTP/2 client's stream to be reset with `code` instead of being
/// answered or finished; false when the client has no stream to reset.
pub(super) fn reset_client<S: ClientStream>(client: &Client<S>, code: u32) -> bool {
    client.stream.resets().map(|r| r.to_client.set(Some(code))).is_some()
}

/// A response the proxy writes itself, chosen by a rule.
pub(super) struct Answer<'a> {
    pub(super) status: u16,
    pub(super) location: Option<&'a str>,
    pub(super) content_type: &'a str,
    pub(super) body: &'a [u8],
}

/// A direct answer from a rule (redirect, respond, deny). The connection stays
/// open only when the request had no body to skip.
pub(super) async fn answer<S: ClientStream>(
    client: &mut Client<S>,
    service: &Service,
    info: RequestInfo,
    head_len: usize,
    reply: Answer<'_>,
    started: Instant,
) -> bool {
    let keep = info.keep_alive && info.framing == Framing::Empty;
    client.buf.advance(head_len);
    let connection =
        Connection { close: !keep, keep_alive: keep && info.version == Version::Http10, ..Connection::default() };
    let body = if info.head_method { &b""[..] } else { reply.body };
    let own =
        Own { status: reply.status, location: reply.location, content_type: reply.content_type, body, connection };
    let (ok, bytes_out) = send_own(client, service, own, None).await;
    client.trace.bytes_out = bytes_out;
    client.trace.body_out = body.len() as u64;
    log(client, service, reply.status, None, started);
    keep && ok
}

/// Sends the error's status (when it has one) with a short body, logs it, and
/// leaves the connection to be closed by the caller.
pub(super) async fn fail<S: ClientStream>(
    client: &mut Client<S>,
    service: &Service,
    error: &ProxyError,
    started: Instant,
) {
    if let Some(status) = error.status() {
        let body = format!("{status} {}\n", switchyard_http::error::reason_phrase(status));
        let close = Connection { close: true, ..Connection::default() };
        let own = Own { status, location: None, content_type: "text/plain", body: body.as_bytes(), connection: close };
        let (ok, bytes_out) = send_own(client, service, own, Some(error)).await;
        if ok {
            client.trace.bytes_out = bytes_out;
            client.trace.body_out = body.len() as u64;
        }
    }
    log(client, service, error.status().unwrap_or(0), Some(error), started);
}
