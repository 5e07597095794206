//! Background revalidation for `stale-while-revalidate` (RFC 5861 §3): the
//! request that finds an entry stale within the window is answered from it at
//! once, and the cache revalidates the entry on its own, with no client
//! waiting.
//!
//! The revalidation is a request of its own through the whole pipeline (its
//! route, persistence, server pick, retries, TLS and HTTP/2 towards servers,
//! store), so it behaves exactly as a client's would: the triggering
//! request's head, less its conditionals, ranges, cache directives and
//! connection fields, fed over an in-memory [`Pipe`] whose response is read
//! and dropped. Its transport is marked [`Transport::cache_refresh`]: its
//! lookup never serves it stale, so it goes to a server (with the entry's
//! validators) unless another refresh already made the entry fresh.
//!
//! Invariants: one refresh per key at a time in the whole process (a
//! [`Refresh`] registered in the shared cache, dropped when the task ends);
//! the task is bounded by the service's timeouts like any request; the
//! triggering client never waits for it.

use std::rc::Rc;

use bytes::BytesMut;

use super::super::{Client, ClientStream};
use crate::cache::Refresh;
use crate::transport::{Pipe, PipeEnd, Transport};
use crate::worker::{Scratch, Worker};
use switchyard_http::parse::RequestHead;

/// Request fields the refresh does not copy: hop-by-hop and framing fields,
/// the client's own conditionals and ranges (the cache adds its validators),
/// and the client's cache directives (the refresh must reach a server).
const DROPPED: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "upgrade",
    "transfer-encoding",
    "content-length",
    "expect",
    "range",
    "if-range",
    "if-none-match",
    "if-modified-since",
    "if-match",
    "if-unmodified-since",
    "cache-control",
    "pragma",
];

/// Starts the background revalidation of the request whose head is at the
/// front of `client.buf`. `refresh` is held until it ends.
pub(in crate::http) fn spawn<S: ClientStream>(
    client: &Client<S>,
    worker: &Rc<Worker>,
    head: &RequestHead,
    refresh: Refresh,
) {
    let request = request_bytes(&client.buf[..head.len], head, &client.fields);
    let (local, service, peer, worker) = (client.local.clone(), client.service, client.peer, worker.clone());
    let transport = Transport { cache_refresh: true, http2: false, http3: false, ..client.transport.clone() };
    tokio::task::spawn_local(async move {
        let _refresh = refresh;
        let (pipe, PipeEnd { to_pipeline, mut from_pipeline, .. }) = Pipe::pair(None);
        let scratch = Scratch { buf: BytesMut::from(&request[..]), ..Scratch::default() };
        let serve = crate::http::serve(pipe, peer, scratch, local, service, worker, transport);
        let drain = async {
            let _ = tokio::io::copy(&mut from_pipeline, &mut tokio::io::sink()).await;
        };
        tokio::join!(serve, drain);
        // Held open until the pipeline ended: it never reads an early end of its "client".
        drop(to_pipeline);
    });
}

/// `GET target HTTP/1.1` (a GET for a HEAD too: only a GET's response
/// refreshes the body), the request's fields less [`DROPPED`], and
/// `connection: close`.
fn request_bytes(buf: &[u8], head: &RequestHead, fields: &[switchyard_http::parse::Field]) -> Vec<u8> {
    let mut out = Vec::with_capacity(buf.len() + 32);
    out.extend_from_slice(b"GET ");
    out.extend_from_slice(&buf[head.target.clone()]);
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for f in fields {
        let name = &buf[f.name.clone()];
        if DROPPED.iter().any(|d| name.eq_ignore_ascii_case(d.as_bytes())) {
            continue;
        }
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(&buf[f.value.clone()]);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"connection: close\r\n\r\n");
    out
}
