//! HTTP/2 towards servers (`protocol = "h2"` on a pool): cleartext with prior
//! knowledge (h2c) without `tls`, ALPN `h2` with it, on the project's own
//! sans-io client codec ([`switchyard_http::http2::client`]).
//!
//! Each worker keeps, per (pool, server), a few shared HTTP/2 connections
//! ([`H2Conns`]); each request opens one stream on one of them. A connection
//! is driven by its own local task ([`conn`]); a new one is opened when none
//! is usable: all closed, failed or told to go away (GOAWAY), or at the
//! server's concurrent-stream limit. Only one connection to a server is
//! being opened at a time per worker, so a burst of requests waits for it
//! rather than opening one connection each; a connection counts as opened
//! once the server's SETTINGS arrived.
//!
//! A request's stream is the pipeline's server connection, an [`H2Stream`]:
//! the request head the pipeline writes (HTTP/1.1 text: the pipeline's
//! interface) is parsed once and HPACK-encoded from its field ranges into the
//! HEADERS that open the stream (no `http::Request`); its body goes out as
//! DATA frames (a chunked body's trailer section as trailers), taken as the
//! server's windows allow. The server's response is written by the
//! connection's task, from the decoded field ranges (no `HeaderMap`), as the
//! HTTP/1.1 bytes the pipeline reads: interim 1xx heads, then the final
//! head, then the DATA frames (chunked, with the trailers, when it has no
//! length). No pipe, no task per stream. Dropping the [`H2Stream`] (the
//! pipeline is done, timed out or failed) resets the stream if it is still
//! open. Timeouts stay the pipeline's: it sees a server that answers slowly
//! exactly as it would over HTTP/1.1.
//!
//! A failed connection or a GOAWAY ends the streams it carried (above the
//! GOAWAY's last id): their reads fail before or during the response, which
//! the pipeline reports as a closed server connection (502, or another
//! server when the request may be retried), with the HTTP/2 cause kept for
//! the log ([`H2Stream::failure`]) and a server's RST_STREAM code for the
//! client ([`H2Stream::reset`]). An [`H2Stream`] never goes to the HTTP/1.1
//! idle pool: the shared connection is the reuse.
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
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

use self::conn::{Conn, Failure, Link, Phase, StreamState};
use super::stream::ServerStream;
use super::tls::PoolTls;
use super::UpstreamConn;
use crate::translate::data::may_trail;
use crate::transport::Resets;
use switchyard_http::error::{Kind, ProxyError};
use switchyard_http::parse::{self, Field, Framing, HeadLimits};

/// Flow-control window of each stream: response bytes a server may send
/// before the client it goes to has taken them.
const STREAM_WINDOW: u32 = 256 * 1024;
/// Flow-control window of a whole connection: large enough that a few slow
/// clients do not stall the other streams sharing it.
const CONNECTION_WINDOW: u32 = 8 * 1024 * 1024;
/// The largest response head (decoded header list) taken from a server.
const MAX_HEADER_LIST: usize = 256 * 1024;
/// The request head the pipeline writes is one it built; these only bound it.
const HEAD_LIMITS: HeadLimits = HeadLimits { max_bytes: 256 * 1024, max_fields: 1024 };
/// Field positions reserved for the request head at once.
const HEAD_FIELDS: usize = 16;

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
#[derive(Default)]
pub struct H2Conns {
    servers: Vec<Rc<ServerConns>>,
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
        H2Conns { servers: pool.servers.iter().map(|_| Rc::default()).collect() }
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
                if let Some(shared) = slot.usable() {
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
    /// The newest connection that can take another stream now; connections
    /// found closed, failed or going away are dropped on the way.
    fn usable(&self) -> Option<Shared> {
        let mut conns = self.conns.borrow_mut();
        conns.retain(|c| {
            let keep = !c.closed.get() && c.inner.borrow().usable();
            if !keep {
                c.nudge();
            }
            keep
        });
        conns.iter().rev().find(|c| c.streams.get() < c.inner.borrow().codec.max_streams() as usize).cloned()
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
    let link: Link = Rc::new(RefCell::new(StreamState::new()));
    let wr = Wr {
        conn: shared.clone(),
        link: link.clone(),
        state: RefCell::new(Up::Head(BytesMut::new())),
        scheme,
        server: target.addr,
    };
    let rd = Rd { conn: shared.clone(), link: link.clone() };
    let stream = H2Stream { rd, wr, link, client: target.client.cloned(), _open: StreamGuard(shared.clone()) };
    UpstreamConn { stream: ServerStream::H2(Box::new(stream)), buf: BytesMut::with_capacity(16 * 1024), served: 0 }
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
        c.nudge();
    }
}

/// One request's stream as the pipeline sees it: a server connection that
/// takes an HTTP/1.1 request ([`Wr`]: the head opens the stream, the body
/// goes out as DATA frames and trailers) and answers an HTTP/1.1 response
/// ([`Rd`]: the head written from the server's HEADERS, then its DATA
/// frames, chunked with the trailers when it has no length). Dropping it
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
    scheme: &'static str,
    /// The server's address: the `:authority` of a request without a
    /// `Host` (HTTP/1.0).
    server: SocketAddr,
}

enum Up {
    /// Reading the request head the pipeline writes.
    Head(BytesMut),
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
            Up::Head(_) => self.write_head(cx, &mut state, data),
            Up::Body(_) => self.write_body(cx, &mut state, data),
            Up::Sent if data.is_empty() => Poll::Ready(Ok(0)),
            Up::Sent => Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, "bytes after the request"))),
            Up::Failed => Poll::Ready(Err(aborted())),
        }
    }

    /// Takes request head bytes once a stream may open (nothing is taken
    /// while the server's stream limit is reached); opens the stream when
    /// the head is complete.
    fn write_head(&self, cx: &mut Context<'_>, state: &mut Up, data: &[u8]) -> Poll<io::Result<usize>> {
        {
            let mut inner = self.conn.inner.borrow_mut();
            if let Some(failure) = inner.failed {
                drop(inner);
                return Poll::Ready(Err(self.failed(state, failure)));
            }
            if !inner.usable() {
                drop(inner);
                let failure = Failure { why: "server went away (HTTP/2 GOAWAY)", reset: None };
                return Poll::Ready(Err(self.failed(state, failure)));
            }
            if !inner.codec.can_open() {
                inner.waiting.push(cx.waker().clone());
                return Poll::Pending;
            }
        }
        let Up::Head(buf) = state else { return Poll::Ready(Err(aborted())) };
        buf.extend_from_slice(data);
        Poll::Ready(self.open(state).map(|()| data.len()))
    }

    /// Opens the stream once the request head is complete, and sends the
    /// body bytes written with it.
    fn open(&self, state: &mut Up) -> io::Result<()> {
        let Up::Head(buf) = state else { return Ok(()) };
        let mut fields = Vec::with_capacity(HEAD_FIELDS);
        let head = match parse::parse_request(buf, HEAD_LIMITS, &mut fields) {
            Ok(Some(head)) => head,
            Ok(None) => return Ok(()),
            Err(_) => return Err(io::Error::new(io::ErrorKind::InvalidData, "invalid request head")),
        };
        let bytes = buf.split_to(head.len);
        let method = &bytes[head.method.clone()];
        let path = &bytes[head.target.clone()];
        if !(path.first() == Some(&b'/') || path == b"*") {
            return Err(self.failed(state, Failure { why: "invalid target for HTTP/2", reset: None }));
        }
        // Written out only for a request without `Host` (HTTP/1.0).
        let server;
        let authority = match head.host.clone().filter(|r| !r.is_empty()) {
            Some(host) => &bytes[host],
            None => {
                server = self.server.to_string();
                server.as_bytes()
            }
        };
        let line = RequestLine { method, scheme: self.scheme.as_bytes(), authority, path };
        let chunked = head.framing == Framing::Chunked;
        let bodiless = matches!(head.framing, Framing::Empty | Framing::Length(0));
        let fields = request_fields(&bytes, &fields, chunked);
        let mut inner = self.conn.inner.borrow_mut();
        let id = match inner.codec.open(line, fields, bodiless) {
            Ok(id) => id,
            Err(e) => {
                drop(inner);
                let why = match e {
                    OpenError::AtLimit | OpenError::GoingAway => "server went away (HTTP/2 GOAWAY)",
                    OpenError::Closed => "HTTP/2 connection closed",
                };
                return Err(self.failed(state, Failure { why, reset: None }));
            }
        };
        {
            let mut s = self.link.borrow_mut();
            s.id = id;
            s.head_request = method == b"HEAD";
        }
        inner.streams.insert(id, self.link.clone());
        let rest = std::mem::take(buf);
        let mut body = match head.framing {
            _ if bodiless => None,
            Framing::Length(n) => Some(Body::Length(n)),
            _ => Some(Body::Chunked(Box::new(ChunkedScanner::collecting_trailers()), Vec::new())),
        };
        let mut ended = body.is_none();
        if let Some(body) = body.as_mut() {
            // Taken whole: the codec queues what the windows do not allow yet.
            let (n, end) = take(&mut inner.codec, id, body, &rest)?;
            ended = end;
            if n < rest.len() {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "bytes after the end of the message"));
            }
        }
        inner.kick();
        drop(inner);
        *state = match body {
            Some(body) if !ended => Up::Body(body),
            _ => Up::Sent,
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

/// The request's fields for HTTP/2: `host` is `:authority` and the codec
/// leaves out connection-specific fields; a chunked body's length is
/// unknown, so a `content-length` beside it goes too.
fn request_fields<'a>(
    bytes: &'a [u8],
    fields: &'a [Field],
    chunked: bool,
) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
    fields.iter().filter_map(move |f| {
        let (name, value) = (bytes.get(f.name.clone())?, bytes.get(f.value.clone())?);
        let dropped =
            name.eq_ignore_ascii_case(b"http2-settings") || (chunked && name.eq_ignore_ascii_case(b"content-length"));
        (!dropped).then_some((name, value))
    })
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
            let mut trailers = scanner.trailers().filter(|(name, _)| may_trail(name)).peekable();
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
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let mut s = self.link.borrow_mut();
        if !s.inbound.is_empty() {
            let n = s.inbound.len().min(buf.remaining());
            buf.put_slice(&s.inbound[..n]);
            s.inbound.advance(n);
            if s.inbound.is_empty() && s.held > 0 {
                // All read: the server may send as much again.
                let (id, held) = (s.id, std::mem::take(&mut s.held));
                drop(s);
                let mut inner = self.conn.inner.borrow_mut();
                inner.codec.release(id, held);
                inner.kick();
            }
            return Poll::Ready(Ok(()));
        }
        if s.failure.is_some() {
            return Poll::Ready(Err(aborted()));
        }
        if s.phase == Phase::Done {
            return Poll::Ready(Ok(()));
        }
        s.reader = Some(cx.waker().clone());
        Poll::Pending
    }
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
