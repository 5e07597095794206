//! HTTP/2 towards servers (`protocol = "h2"` on a pool): cleartext with prior
//! knowledge (h2c) without `tls`, ALPN `h2` with it, on the project's own
//! sans-io client codec ([`switchyard_http::http2::client`]).
//!
//! Each worker keeps, per (pool, server), a few shared HTTP/2 connections
//! ([`H2Conns`]); each request opens one stream on one of them. A connection
//! is driven by its own local task ([`conn`]); a new one is opened when none
//! is usable: all closed, failed or told to go away (GOAWAY), or at the
//! server's concurrent-stream limit or the pool's `max_streams_per_connection`
//! (100 by default), whichever is lower. Only one connection to a server is
//! being opened at a time per worker, so a burst of requests waits for it
//! rather than opening one connection each; a connection counts as opened
//! once the server's SETTINGS arrived.
//!
//! A request's stream is the pipeline's server connection, an [`H2Stream`].
//! No HTTP/1.1 text crosses for the heads: the request head comes as the
//! pipeline's request list ([`RequestList`], written by the same rewrite
//! that writes HTTP/1.1 bytes for other pools) and [`H2Stream::send_head`]
//! has the codec HPACK-encode it into the HEADERS that open the stream (no
//! `http::Request`); its body goes out as DATA frames (a chunked body's
//! trailer section as trailers), taken as the server's windows allow. The
//! connection's task keeps each response head decoded (names and values,
//! field ranges: no `HeaderMap`) until the pipeline takes it with
//! [`Rd::poll_head`] as the HTTP/1.1 parser would have given it (interim
//! 1xx heads first); the body is then read as parts (payload, trailers,
//! end: [`Rd::poll_part`]) when the client's side frames bodies too (an
//! HTTP/2 or HTTP/3 client), else as HTTP/1.1 body bytes: the DATA frames
//! as they came when the server gave a length, else chunked with the
//! trailers. The request body likewise comes as parts from such a client
//! (`Sink::poll_send_part` of [`Wr`]), else as bytes. No pipe, no task per stream. Dropping
//! the [`H2Stream`] (the pipeline is done, timed out or failed) resets the
//! stream if it is still open. Timeouts stay the pipeline's: it sees a
//! server that answers slowly exactly as it would over HTTP/1.1.
//!
//! A failed connection or a GOAWAY ends the streams it carried (above the
//! GOAWAY's last id): their reads fail before or during the response, which
//! the pipeline reports as a closed server connection (502, or another
//! server when the request may be retried), with the HTTP/2 cause kept for
//! the log ([`H2Stream::failure`]) and a server's RST_STREAM code for the
//! client ([`H2Stream::reset`]); a stream the server provably did not process
//! (REFUSED_STREAM, above the GOAWAY's last id, never opened) says so
//! ([`H2Stream::unprocessed`]): the pipeline may send any request again
//! then. An [`H2Stream`] never goes to the HTTP/1.1 idle pool: the shared
//! connection is the reuse.
//!
//! Invariants: no server input can panic this code; a failed connection
//! fails only the streams it carried.

mod conn;

use std::cell::{Cell, RefCell};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use switchyard_config::Pool;
use switchyard_http::chunked::ChunkedScanner;
use switchyard_http::http2::client::{self, Client, OpenError, RequestLine};
use switchyard_http::http2::frame::code;
use switchyard_http::request_writer::RequestList;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

use self::conn::{Conn, Failure, Link, Phase, StreamState};
use super::stream::ServerStream;
use super::tls::PoolTls;
use super::UpstreamConn;
use crate::transport::{Part, Resets};
use switchyard_http::error::{Kind, ProxyError};
use switchyard_http::parse::{Connection, Field, Framing, ResponseHead, Version};

/// Flow-control window of each stream: response bytes a server may send
/// before the client it goes to has taken them.
const STREAM_WINDOW: u32 = 256 * 1024;
/// Flow-control window of a whole connection: large enough that a few slow
/// clients do not stall the other streams sharing it.
const CONNECTION_WINDOW: u32 = 8 * 1024 * 1024;
/// The largest response head (decoded header list) taken from a server.
const MAX_HEADER_LIST: usize = 256 * 1024;

/// Where and how to reach one server of an HTTP/2 pool.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// The server's address.
    pub addr: SocketAddr,
    /// Its index in the pool.
    pub server: usize,
    /// The pool's TLS side, if it re-encrypts.
    pub tls: Option<&'a PoolTls>,
    /// Connect timeout (TCP, PROXY header, TLS and the HTTP/2 preface).
    pub connect: Duration,
    /// PROXY header for a connection of this request alone; empty: none,
    /// and the connection is shared.
    pub proxy_header: &'a [u8],
    /// The client's stream when the request came from an HTTP/2 client: a
    /// reset by the client is passed on with its code.
    pub client: Option<&'a Rc<Resets>>,
}

/// One worker's HTTP/2 connections to one pool's servers.
pub struct H2Conns {
    servers: Vec<Rc<ServerConns>>,
    /// The pool's `max_streams_per_connection`.
    max_streams: usize,
}

/// The connections to one server, and the one being opened.
#[derive(Default)]
struct ServerConns {
    conns: RefCell<Vec<Shared>>,
    /// A connection is being opened; others wait for [`ServerConns::opened`].
    connecting: Cell<bool>,
    /// Number of the latest opening attempt, and the last one that failed.
    attempt: Cell<u64>,
    failed: Cell<Option<(u64, ProxyError)>>,
    opened: Notify,
}

/// A shared connection (also held by its streams and its driving task).
type Shared = Rc<Conn>;

impl H2Conns {
    /// No connections yet, for each server of `pool`.
    pub fn new(pool: &Pool) -> Self {
        H2Conns {
            servers: pool.servers.iter().map(|_| Rc::default()).collect(),
            max_streams: pool.max_streams_per_connection as usize,
        }
    }

    /// A stream on a connection already open to `target`'s server with room
    /// for one more (what most requests find), made at once: no future of
    /// [`H2Conns::stream`]'s is written and no clock read. `None` when the
    /// request needs that (one being opened, a PROXY header's own).
    pub fn ready(&self, target: &Target<'_>) -> Option<UpstreamConn> {
        if !target.proxy_header.is_empty() {
            return None;
        }
        let shared = self.servers.get(target.server)?.usable(self.max_streams)?;
        let scheme = if target.tls.is_some() { "https" } else { "http" };
        Some(open_stream(&shared, scheme, target))
    }

    /// A stream to `target` for one request, and whether it rides on a
    /// connection that already carried others (`fresh`: it must not).
    /// Connection failures are safe to retry: no request was sent.
    pub async fn stream(&self, target: Target<'_>, fresh: bool) -> Result<(UpstreamConn, bool), ProxyError> {
        let deadline = tokio::time::Instant::now() + target.connect;
        let scheme = if target.tls.is_some() { "https" } else { "http" };
        if !target.proxy_header.is_empty() {
            // A connection that carried a PROXY header speaks for one client.
            let shared = connect(&target, deadline).await?;
            return Ok((open_stream(&shared, scheme, &target), false));
        }
        let slot = self.servers.get(target.server).cloned().ok_or(ProxyError::new(Kind::NoServer))?;
        let mut fresh = fresh;
        let mut waited_for = None;
        loop {
            if !fresh {
                if let Some(shared) = slot.usable(self.max_streams) {
                    return Ok((open_stream(&shared, scheme, &target), true));
                }
            }
            if let (Some(attempt), Some((failed, error))) = (waited_for, slot.failed.get()) {
                if attempt == failed {
                    return Err(error);
                }
            }
            if slot.connecting.get() {
                let opened = slot.opened.notified();
                tokio::pin!(opened);
                opened.as_mut().enable();
                waited_for = Some(slot.attempt.get());
                if tokio::time::timeout_at(deadline, opened).await.is_err() {
                    return Err(ProxyError::retryable(Kind::ConnectTimeout));
                }
                // What was opened meanwhile is as fresh as one of our own.
                fresh = false;
                continue;
            }
            let attempt = slot.attempt.get() + 1;
            slot.attempt.set(attempt);
            let opening = Opening(&slot);
            slot.connecting.set(true);
            let opened = connect(&target, deadline).await;
            drop(opening);
            return match opened {
                Ok(shared) => {
                    let stream = open_stream(&shared, scheme, &target);
                    slot.conns.borrow_mut().push(shared);
                    Ok((stream, false))
                }
                Err(error) => {
                    slot.failed.set(Some((attempt, error)));
                    Err(error)
                }
            };
        }
    }

    /// Drops connections that ended, that carried no stream for `max_idle`,
    /// or to servers `keep` refuses (maintenance). A dropped connection
    /// closes once its last stream ends.
    pub fn sweep(&self, max_idle: Duration, now: Instant, keep: impl Fn(usize) -> bool) {
        for (i, slot) in self.servers.iter().enumerate() {
            let mut conns = slot.conns.borrow_mut();
            if !keep(i) {
                for c in conns.drain(..) {
                    c.nudge();
                }
                continue;
            }
            conns.retain(|c| {
                let keep =
                    !c.closed.get() && (c.streams.get() > 0 || now.duration_since(c.idle_since.get()) < max_idle);
                if !keep {
                    // Its task ends once nothing else holds it.
                    c.nudge();
                }
                keep
            });
        }
    }
}

impl ServerConns {
    /// The newest connection that can take another stream now: below both
    /// the server's stream limit and `cap` (the pool's
    /// `max_streams_per_connection`); connections found closed, failed or
    /// going away are dropped on the way.
    fn usable(&self, cap: usize) -> Option<Shared> {
        let mut conns = self.conns.borrow_mut();
        conns.retain(|c| {
            let keep = !c.closed.get() && c.inner.borrow().usable();
            if !keep {
                c.nudge();
            }
            keep
        });
        conns.iter().rev().find(|c| c.streams.get() < (c.inner.borrow().codec.max_streams() as usize).min(cap)).cloned()
    }
}

/// Clears the "being opened" mark of a server and wakes the requests waiting
/// for it, also when the opening request is abandoned mid-way.
struct Opening<'a>(&'a ServerConns);

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        self.0.connecting.set(false);
        self.0.opened.notify_waiters();
    }
}

/// Opens a connection: TCP, PROXY header, TLS with ALPN `h2` (see
/// [`super::connect`]), then the HTTP/2 preface both ways (the server's
/// SETTINGS received), all by `deadline`.
async fn connect(target: &Target<'_>, deadline: tokio::time::Instant) -> Result<Shared, ProxyError> {
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    let conn = super::connect(target.addr, left, target.proxy_header, target.tls, target.server).await?;
    if let ServerStream::Tls(tls) = &conn.stream {
        if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
            tracing::warn!(server = %target.addr, "server did not select h2 in ALPN (pool has protocol = \"h2\")");
            return Err(ProxyError::retryable(Kind::ServerNotH2));
        }
    }
    let codec = Client::new(client::Config {
        max_header_list: MAX_HEADER_LIST,
        stream_window: STREAM_WINDOW,
        connection_window: CONNECTION_WINDOW,
    });
    let shared = Conn::new(codec);
    tokio::task::spawn_local(conn::drive(shared.clone(), conn.stream, target.addr));
    let handshaken = tokio::time::timeout_at(deadline, shared.handshaken()).await;
    // On failure the task ends once this handle is gone.
    shared.nudge();
    match handshaken {
        Err(_) => Err(ProxyError::retryable(Kind::ConnectTimeout)),
        Ok(false) => {
            tracing::warn!(server = %target.addr, "HTTP/2 handshake with server failed");
            Err(ProxyError::retryable(Kind::ServerClosed))
        }
        Ok(true) => Ok(shared),
    }
}

/// Hands out one stream of `shared`, to be opened by the request head the
/// pipeline writes on it.
fn open_stream(shared: &Shared, scheme: &'static str, target: &Target<'_>) -> UpstreamConn {
    shared.streams.set(shared.streams.get() + 1);
    let link: Link = match shared.inner.try_borrow_mut() {
        Ok(mut inner) => inner.spare_state(),
        Err(_) => Rc::new(RefCell::new(StreamState::new())),
    };
    let wr = Wr {
        conn: shared.clone(),
        link: link.clone(),
        state: RefCell::new(Up::Head),
        wrote: Cell::new(false),
        scheme,
        server: target.addr,
    };
    let rd = Rd { conn: shared.clone(), link: link.clone(), bytes: false, tail: Vec::new() };
    let stream = H2Stream { rd, wr, link, client: target.client.cloned(), _open: StreamGuard(shared.clone()) };
    // The response head is copied in, the body's first read makes room.
    UpstreamConn { stream: ServerStream::H2(Box::new(stream)), buf: BytesMut::new(), served: 0 }
}

/// Counts a stream as open on its connection until dropped.
struct StreamGuard(Shared);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let c = &self.0;
        c.streams.set(c.streams.get().saturating_sub(1));
        if c.streams.get() == 0 {
            c.idle_since.set(Instant::now());
        }
        // The guard drops last of its stream's fields: with only the guard
        // and the driving task left holding the connection (the pool let it
        // go), the task must wake to close it. While others hold it (the
        // pool, other streams) there is nothing for the task to do.
        if Rc::strong_count(c) <= 2 {
            c.nudge();
        }
    }
}

/// One request's stream as the pipeline sees it: a server connection whose
/// request head is a list ([`H2Stream::send_head`]) and whose body is
/// written as HTTP/1.1 body bytes ([`Wr`]: DATA frames and trailers), and
/// whose response heads come decoded ([`Rd::poll_head`]), then the body as
/// bytes (its DATA frames, chunked with the trailers when it has no
/// length). Dropping it
/// ends the exchange: a stream still open is reset (CANCEL, or the client's
/// own code when an HTTP/2 client reset its stream).
pub struct H2Stream {
    rd: Rd,
    wr: Wr,
    link: Link,
    /// The client's HTTP/2 stream's reset codes, when there is one.
    client: Option<Rc<Resets>>,
    _open: StreamGuard,
}

/// The request side of a stream.
pub struct Wr {
    conn: Shared,
    link: Link,
    /// In a cell: the relay's non-blocking write attempt has a shared borrow.
    state: RefCell<Up>,
    /// Body bytes were written (HTTP/1.1 framing): the body is not taken as parts.
    wrote: Cell<bool>,
    scheme: &'static str,
    /// The server's address: the `:authority` of a request without a
    /// `Host` (HTTP/1.0).
    server: SocketAddr,
}

enum Up {
    /// Waiting for the request head ([`H2Stream::send_head`]).
    Head,
    /// Sending its body.
    Body(Body),
    /// Sent whole.
    Sent,
    /// Failed before the stream opened, or while sending.
    Failed,
}

/// The request body's HTTP/1.1 framing, removed on the way to DATA frames.
enum Body {
    /// Payload bytes still to come.
    Length(u64),
    /// Chunked coding; the payload of one write is gathered in the vector.
    Chunked(Box<ChunkedScanner>, Vec<u8>),
}

/// The response side of a stream.
pub struct Rd {
    conn: Shared,
    link: Link,
    /// The body was read as bytes: it is not given as parts.
    bytes: bool,
    /// The last chunk of a chunked body read as bytes, as far as not yet read.
    tail: Vec<u8>,
}

impl std::fmt::Debug for H2Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H2Stream").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Rd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("h2::Rd").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Wr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("h2::Wr").finish_non_exhaustive()
    }
}

impl Drop for H2Stream {
    fn drop(&mut self) {
        // The client reset its stream: the server's is reset with the same
        // code. Otherwise a stream still open is reset with CANCEL: the
        // pipeline is done, timed out or failed.
        let code = self.client.as_ref().and_then(|r| r.by_client.get()).unwrap_or(code::CANCEL);
        let (id, held) = {
            let s = self.link.borrow();
            (s.id, s.held)
        };
        if id == 0 {
            return;
        }
        let Ok(mut inner) = self.wr.conn.inner.try_borrow_mut() else { return };
        inner.streams.remove(&id);
        inner.keep_spare(&self.link);
        if inner.codec.is_open(id) {
            inner.codec.send_reset(id, code);
        }
        if held > 0 {
            // Unread bytes: the connection's room comes back.
            inner.codec.release(id, held);
        }
        if inner.codec.can_open() {
            // A request waiting at the server's stream limit may open its stream.
            inner.wake_waiting();
        }
        inner.kick();
    }
}

impl H2Stream {
    /// Both directions at once (full-duplex body relay).
    pub fn halves(&mut self) -> (&mut Rd, &mut Wr) {
        (&mut self.rd, &mut self.wr)
    }

    /// Why the stream failed on the HTTP/2 side, when that says more than
    /// "the server closed the connection" (a reset, a GOAWAY, a protocol error).
    pub fn failure(&self) -> Option<&'static str> {
        self.link.borrow().failure.map(|f| f.why)
    }

    /// The RST_STREAM code the server reset the stream with, if it did.
    pub fn reset(&self) -> Option<u32> {
        self.link.borrow().failure.and_then(|f| f.reset)
    }

    /// The request side, for the relay's non-blocking writes.
    pub fn writer(&self) -> &Wr {
        &self.wr
    }

    /// The request side, for parts of the request body.
    pub fn writer_mut(&mut self) -> &mut Wr {
        &mut self.wr
    }

    /// Whether the response body can be read as parts ([`Rd::poll_part`]).
    pub fn gives_parts(&self) -> bool {
        self.rd.gives_parts()
    }

    /// The response body's next part: see [`Rd::poll_part`].
    pub fn poll_part(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Part>> {
        self.rd.poll_part(cx)
    }

    /// Whether the stream failed before the server processed any of the
    /// request (RST_STREAM REFUSED_STREAM, above a GOAWAY's last stream id,
    /// or never opened: RFC 9113 8.7), so that it may go to another server
    /// whatever its method.
    pub fn unprocessed(&self) -> bool {
        self.link.borrow().failure.is_some_and(|f| f.unprocessed)
    }

    /// [`H2Stream::send_head`] at once, when the connection has room for the
    /// stream (most times): no future is made. `None`: `send_head` waits.
    pub fn try_send_head(&mut self, list: &RequestList, framing: Framing) -> Option<io::Result<()>> {
        self.wr.try_open(list, framing)
    }

    /// Opens the stream with the request head `list`, which the codec
    /// HPACK-encodes (no HTTP/1.1 text), once the server's stream limit lets
    /// it. The request body then follows as written bytes in `framing`
    /// (the client's HTTP/1.1 framing, removed on the way to DATA frames).
    pub async fn send_head(&mut self, list: &RequestList, framing: Framing) -> io::Result<()> {
        let wr = &self.wr;
        std::future::poll_fn(|cx| wr.poll_open(cx, list, framing)).await
    }

    /// The next response head, interim ones first: see [`Rd::poll_head`].
    pub fn poll_head(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut BytesMut,
        fields: &mut Vec<Field>,
        by: tokio::time::Instant,
    ) -> Poll<io::Result<ResponseHead>> {
        self.rd.poll_head(cx, buf, fields, by)
    }
}

fn aborted() -> io::Error {
    io::ErrorKind::ConnectionAborted.into()
}

impl Wr {
    /// Records why the stream failed (the first cause wins) and fails it.
    fn failed(&self, state: &mut Up, failure: Failure) -> io::Error {
        let mut s = self.link.borrow_mut();
        s.failure.get_or_insert(failure);
        s.wake();
        *state = Up::Failed;
        aborted()
    }

    fn poll_write(&self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let mut state = self.state.borrow_mut();
        match &mut *state {
            Up::Head => Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidInput, "request head not sent"))),
            Up::Body(_) => self.write_body(cx, &mut state, data),
            Up::Sent if data.is_empty() => Poll::Ready(Ok(0)),
            Up::Sent => Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, "bytes after the request"))),
            Up::Failed => Poll::Ready(Err(aborted())),
        }
    }

    /// Opens the stream with the request head once a stream may open
    /// (pending while the server's stream limit is reached). A connection
    /// that failed or is going away fails the stream unprocessed: nothing
    /// of the request was sent.
    fn poll_open(&self, cx: &mut Context<'_>, list: &RequestList, framing: Framing) -> Poll<io::Result<()>> {
        match self.try_open(list, framing) {
            Some(opened) => Poll::Ready(opened),
            None => {
                self.conn.inner.borrow_mut().waiting.push(cx.waker().clone());
                Poll::Pending
            }
        }
    }

    /// Opens the stream now, or fails it; `None` while the connection is at
    /// the server's limit of concurrent streams (nothing registered to wait).
    fn try_open(&self, list: &RequestList, framing: Framing) -> Option<io::Result<()>> {
        let mut state = self.state.borrow_mut();
        if !matches!(*state, Up::Head) {
            return Some(Err(io::Error::new(io::ErrorKind::InvalidInput, "request head sent twice")));
        }
        {
            let inner = self.conn.inner.borrow();
            if let Some(failure) = inner.failed {
                drop(inner);
                let failure = Failure { unprocessed: true, ..failure };
                return Some(Err(self.failed(&mut state, failure)));
            }
            if !inner.usable() {
                drop(inner);
                let failure = Failure { why: "server went away (HTTP/2 GOAWAY)", reset: None, unprocessed: true };
                return Some(Err(self.failed(&mut state, failure)));
            }
            if !inner.codec.can_open() {
                return None;
            }
        }
        Some(self.open(&mut state, list, framing))
    }

    /// Opens the stream: the codec HPACK-encodes `list` into the HEADERS
    /// frame (END_STREAM when the request has no body).
    fn open(&self, state: &mut Up, list: &RequestList, framing: Framing) -> io::Result<()> {
        let path = list.path();
        if !(path.first() == Some(&b'/') || path == b"*") {
            let failure = Failure { why: "invalid target for HTTP/2", reset: None, unprocessed: false };
            return Err(self.failed(state, failure));
        }
        // The server's address stands in for a request without `Host` (HTTP/1.0).
        let server;
        let authority = match list.authority() {
            Some(authority) => authority,
            None => {
                server = self.server.to_string();
                server.as_bytes()
            }
        };
        let method = list.method();
        let line = RequestLine { method, scheme: self.scheme.as_bytes(), authority, path };
        let bodiless = matches!(framing, Framing::Empty | Framing::Length(0));
        let mut inner = self.conn.inner.borrow_mut();
        let id = match inner.codec.open(line, list.pairs(), bodiless) {
            Ok(id) => id,
            Err(e) => {
                drop(inner);
                let why = match e {
                    OpenError::AtLimit | OpenError::GoingAway => "server went away (HTTP/2 GOAWAY)",
                    OpenError::Closed => "HTTP/2 connection closed",
                };
                return Err(self.failed(state, Failure { why, reset: None, unprocessed: true }));
            }
        };
        {
            let mut s = self.link.borrow_mut();
            s.id = id;
            s.head_request = method == b"HEAD";
        }
        inner.streams.insert(id, self.link.clone());
        inner.kick();
        *state = match framing {
            _ if bodiless => Up::Sent,
            Framing::Length(n) => Up::Body(Body::Length(n)),
            _ => Up::Body(Body::Chunked(Box::new(ChunkedScanner::collecting_trailers()), Vec::new())),
        };
        Ok(())
    }

    /// Takes body bytes once the stream's windows have room.
    fn write_body(&self, cx: &mut Context<'_>, state: &mut Up, data: &[u8]) -> Poll<io::Result<usize>> {
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let mut inner = self.conn.inner.borrow_mut();
        let id = {
            let mut s = self.link.borrow_mut();
            if s.failure.is_some() {
                return Poll::Ready(Err(aborted()));
            }
            if !inner.codec.can_send(s.id) {
                // The stream is gone (reset, or the connection failed).
                return Poll::Ready(Err(aborted()));
            }
            if inner.codec.send_capacity(s.id) == 0 {
                s.writer = Some(cx.waker().clone());
                return Poll::Pending;
            }
            s.id
        };
        let Up::Body(body) = state else { return Poll::Ready(Err(aborted())) };
        self.wrote.set(true);
        let (n, ended) = match take(&mut inner.codec, id, body, data) {
            Ok(taken) => taken,
            Err(e) => return Poll::Ready(Err(e)),
        };
        inner.kick();
        if ended {
            *state = Up::Sent;
        }
        Poll::Ready(Ok(n))
    }
}

impl Wr {
    /// Whether the request body can be written as parts: the stream is
    /// open for it and none of it was written as bytes.
    fn can_take_parts(&self) -> bool {
        !self.wrote.get() && matches!(*self.state.borrow(), Up::Body(_))
    }

    /// Hands a part of the request body to the codec once the stream's
    /// windows have room (DATA, trailers, or the end of the stream).
    fn poll_take_part(&self, cx: &mut Context<'_>, part: &mut Part) -> Poll<io::Result<()>> {
        let mut state = self.state.borrow_mut();
        match *state {
            Up::Body(_) => {}
            Up::Failed => return Poll::Ready(Err(aborted())),
            Up::Head | Up::Sent => {
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidInput, "no request body to send")))
            }
        }
        let mut inner = self.conn.inner.borrow_mut();
        let id = {
            let mut s = self.link.borrow_mut();
            if s.failure.is_some() || !inner.codec.can_send(s.id) {
                return Poll::Ready(Err(aborted()));
            }
            let payload = matches!(part, Part::Data(data, _) if !data.is_empty());
            if payload && inner.codec.send_capacity(s.id) == 0 {
                s.writer = Some(cx.waker().clone());
                return Poll::Pending;
            }
            s.id
        };
        let (sent, ended) = match part {
            Part::Data(data, end) => {
                let end = *end;
                let sent = (data.is_empty() && !end) || inner.codec.send_data(id, data, end);
                *data = bytes::Bytes::new();
                (sent, end)
            }
            Part::Trailers(trailers) => (inner.codec.send_trailers(id, trailers.pairs()), true),
            Part::End => (inner.codec.send_data(id, &[], true), true),
        };
        if !sent {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::ConnectionAborted, "the HTTP/2 stream is gone")));
        }
        inner.kick();
        if ended {
            *state = Up::Sent;
        }
        Poll::Ready(Ok(()))
    }
}

/// Removes the HTTP/1.1 framing from `data` and hands the payload to the
/// codec; returns how many bytes of `data` belonged to the body and
/// whether it ended.
fn take(codec: &mut Client, id: u32, body: &mut Body, data: &[u8]) -> io::Result<(usize, bool)> {
    let gone = || io::Error::new(io::ErrorKind::ConnectionAborted, "the HTTP/2 stream is gone");
    match body {
        Body::Length(left) => {
            let n = data.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
            *left -= n as u64;
            let end = *left == 0;
            if (n > 0 || end) && !codec.send_data(id, &data[..n], end) {
                return Err(gone());
            }
            Ok((n, end))
        }
        Body::Chunked(scanner, payload) => {
            payload.clear();
            let consumed = scanner
                .scan_with(data, |run| payload.extend_from_slice(&data[run]))
                .map_err(|why| io::Error::new(io::ErrorKind::InvalidData, why))?;
            if !scanner.is_done() {
                if !payload.is_empty() && !codec.send_data(id, payload, false) {
                    return Err(gone());
                }
                return Ok((consumed, false));
            }
            let mut trailers =
                scanner.trailers().filter(|(name, _)| crate::translate::data::may_trail(name)).peekable();
            let sent = if trailers.peek().is_none() {
                codec.send_data(id, payload, true)
            } else {
                (payload.is_empty() || codec.send_data(id, payload, false)) && codec.send_trailers(id, trailers)
            };
            if !sent {
                return Err(gone());
            }
            Ok((consumed, true))
        }
    }
}

impl Rd {
    /// The next response head as the connection's task decoded it (interim
    /// 1xx heads first): its names and values are appended to `buf`, which
    /// must be empty, `fields` (cleared first) index them, as a parse of
    /// the same head as HTTP/1.1 would have. A head without a length gets
    /// the framing its body is read with: `transfer-encoding: chunked`, or
    /// `content-length: 0` when the HEADERS ended the stream. A head not
    /// there `by` then fails the read with `TimedOut`: the connection's task
    /// keeps the deadline ([`conn::Inner::due_by`]), no timer is armed here.
    pub fn poll_head(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut BytesMut,
        fields: &mut Vec<Field>,
        by: tokio::time::Instant,
    ) -> Poll<io::Result<ResponseHead>> {
        let mut s = self.link.borrow_mut();
        if s.heads.is_empty() {
            if s.failure.is_some() {
                return Poll::Ready(Err(aborted()));
            }
            if s.phase == Phase::Done {
                return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
            }
            if s.timed_out {
                return Poll::Ready(Err(io::ErrorKind::TimedOut.into()));
            }
            s.reader = Some(cx.waker().clone());
            if s.head_by != Some(by) {
                s.head_by = Some(by);
                drop(s);
                self.conn.inner.borrow_mut().due_by(by);
            }
            return Poll::Pending;
        }
        if !buf.is_empty() {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, "bytes before a response head")));
        }
        let mark = s.heads.remove(0);
        buf.extend_from_slice(&s.inbound[..mark.len]);
        s.inbound.advance(mark.len);
        fields.clear();
        fields.extend(s.head_fields.drain(..mark.fields));
        let connection = Connection::default();
        let (len, status, framing) = (mark.len, mark.status, mark.framing);
        Poll::Ready(Ok(ResponseHead { len, status, version: Version::Http11, framing, connection }))
    }

    /// Whether the body can be read as parts: none of it was read as bytes.
    pub fn gives_parts(&self) -> bool {
        !self.bytes
    }

    /// The response body's next part, once its head was taken: the payload
    /// received so far (with the end when the stream ended without
    /// trailers), the trailers, or the end. Reading releases the payload's
    /// flow-control room.
    pub fn poll_part(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Part>> {
        let mut s = self.link.borrow_mut();
        if !s.heads.is_empty() {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, "response head not taken")));
        }
        if !s.inbound.is_empty() {
            let data = s.inbound.split().freeze();
            let end = s.phase == Phase::Done && s.trailers.is_none();
            self.release(s);
            return Poll::Ready(Ok(Part::Data(data, end)));
        }
        if s.failure.is_some() {
            return Poll::Ready(Err(aborted()));
        }
        if s.phase == Phase::Done {
            return Poll::Ready(Ok(s.trailers.take().map_or(Part::End, |t| Part::Trailers(*t))));
        }
        s.reader = Some(cx.waker().clone());
        Poll::Pending
    }

    /// All of the body received was read: the server may send as much again.
    fn release(&self, mut s: std::cell::RefMut<'_, StreamState>) {
        if s.held > 0 {
            let (id, held) = (s.id, std::mem::take(&mut s.held));
            drop(s);
            let mut inner = self.conn.inner.borrow_mut();
            inner.codec.release(id, held);
            inner.kick();
        }
    }

    /// The body as HTTP/1.1 body bytes: the payload as it came, or, when the
    /// response has no length, in chunked coding (one chunk per read) with
    /// the trailers as the last chunk's trailer section.
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.bytes = true;
        if !self.tail.is_empty() {
            let n = self.tail.len().min(buf.remaining());
            buf.put_slice(&self.tail[..n]);
            self.tail.drain(..n);
            return Poll::Ready(Ok(()));
        }
        let mut s = self.link.borrow_mut();
        if !s.heads.is_empty() {
            // The pipeline takes heads with `poll_head`; the bytes are the body's.
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, "response head not taken")));
        }
        if !s.inbound.is_empty() {
            // A chunk's size line and end take at most 20 bytes besides its payload.
            let room = if s.chunked { buf.remaining().saturating_sub(20) } else { buf.remaining() };
            let n = s.inbound.len().min(room.max(1));
            if s.chunked {
                let mut line = [0u8; 18];
                let size = size_line(n, &mut line);
                if size.len() + n + 2 > buf.remaining() {
                    // A read too small for a chunk: the chunk waits in the tail.
                    self.tail.extend_from_slice(size);
                    self.tail.extend_from_slice(&s.inbound[..n]);
                    self.tail.extend_from_slice(b"\r\n");
                } else {
                    buf.put_slice(size);
                    buf.put_slice(&s.inbound[..n]);
                    buf.put_slice(b"\r\n");
                }
            } else {
                buf.put_slice(&s.inbound[..n]);
            }
            s.inbound.advance(n);
            if s.inbound.is_empty() {
                self.release(s);
            } else {
                drop(s);
            }
            if !self.tail.is_empty() {
                return self.poll_read(cx, buf);
            }
            return Poll::Ready(Ok(()));
        }
        if s.failure.is_some() {
            return Poll::Ready(Err(aborted()));
        }
        if s.phase == Phase::Done {
            if s.chunked {
                // HTTP/1.1 carries trailers only in chunked coding: a body
                // framed by its length loses them.
                s.chunked = false;
                let trailers = s.trailers.take().unwrap_or_default();
                drop(s);
                trailers.last_chunk(&mut self.tail);
                return self.poll_read(cx, buf);
            }
            return Poll::Ready(Ok(()));
        }
        s.reader = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// A chunk's size line for `n` payload bytes (hexadecimal, then CRLF), in `line`.
fn size_line(n: usize, line: &mut [u8; 18]) -> &[u8] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut at = 16;
    let mut left = n;
    loop {
        at -= 1;
        line[at] = HEX[left & 0xf];
        left >>= 4;
        if left == 0 {
            break;
        }
    }
    line[16] = b'\r';
    line[17] = b'\n';
    &line[at..]
}

impl AsyncRead for Rd {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_read(cx, buf)
    }
}

impl AsyncWrite for Wr {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        self.get_mut().poll_write(cx, data)
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A write that need not wait (the request head, a body within the
/// server's window) is taken at once, sparing the relay a timer; one that
/// would wait answers `WouldBlock`.
impl crate::transport::Sink for Wr {
    fn try_write_now(&self, data: &[u8]) -> io::Result<usize> {
        let mut cx = Context::from_waker(Waker::noop());
        match self.poll_write(&mut cx, data) {
            Poll::Ready(result) => result,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn try_write_two_now(&self, a: &[u8], b: &[u8]) -> io::Result<usize> {
        crate::transport::write_two_now(self, a, b)
    }

    fn takes_parts(&self) -> bool {
        self.can_take_parts()
    }

    fn poll_send_part(&mut self, cx: &mut Context<'_>, part: &mut Part) -> Poll<io::Result<()>> {
        self.poll_take_part(cx, part)
    }
}

impl AsyncRead for H2Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.get_mut().rd.poll_read(cx, buf)
    }
}

impl AsyncWrite for H2Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        self.get_mut().wr.poll_write(cx, data)
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
