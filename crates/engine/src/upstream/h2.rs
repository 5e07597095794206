//! HTTP/2 towards servers (`protocol = "h2"` on a pool): cleartext with prior
//! knowledge (h2c) without `tls`, ALPN `h2` with it.
//!
//! Each worker keeps, per (pool, server), a few shared HTTP/2 connections
//! ([`H2Conns`]); each request opens one stream on one of them. A connection
//! is driven by its own local task; a new one is opened when none is usable:
//! all closed, failed or told to go away (GOAWAY), or at the server's
//! concurrent-stream limit. Only one connection to a server is being opened
//! at a time per worker, so a burst of requests waits for it rather than
//! opening one connection each.
//!
//! A request's stream is the pipeline's server connection, an [`H2Stream`]:
//! the request head the pipeline writes opens the stream, its body goes out
//! as DATA frames (a chunked body's trailer section as trailers), and the
//! server's response is read as an HTTP/1.1 head followed by its DATA frames
//! (chunked, with the trailers, when it has no length; interim 1xx
//! responses are not passed on). The translation runs in the request's own
//! task, inside the stream's reads and writes: no pipe, no task per stream.
//! Dropping the [`H2Stream`] (the pipeline is done, timed out or failed)
//! resets the stream if it is still open. Timeouts stay the pipeline's: it
//! sees a server that answers slowly exactly as it would over HTTP/1.1.
//!
//! A failed connection or a GOAWAY ends the streams it carried: their reads
//! fail before or during the response, which the pipeline reports as a
//! closed server connection (502), with the HTTP/2 cause kept for the log
//! ([`H2Stream::failure`]). An [`H2Stream`] never goes to the HTTP/1.1 idle
//! pool: the shared connection is the reuse.
//!
//! Invariants: no server input can panic this code; a failed connection
//! fails only the streams it carried.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use h2::client::{ResponseFuture, SendRequest};
use h2::Reason;
use switchyard_config::Pool;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

use super::stream::ServerStream;
use super::tls::PoolTls;
use super::UpstreamConn;
use crate::translate::data::{Inbound, Outbound};
use crate::translate::head;
use crate::transport::Resets;
use switchyard_http::error::{Kind, ProxyError};
use switchyard_http::parse::{self, Framing, HeadLimits};

/// Flow-control window of each stream: response bytes a server may send
/// before the client it goes to has taken them.
const STREAM_WINDOW: u32 = 256 * 1024;
/// Flow-control window of a whole connection: large enough that a few slow
/// clients do not stall the other streams sharing it.
const CONNECTION_WINDOW: u32 = 8 * 1024 * 1024;
/// Request bytes buffered per stream before the server must take them.
const SEND_BUFFER: usize = 256 * 1024;
/// The request head the pipeline writes is one it built; these only bound it.
const HEAD_LIMITS: HeadLimits = HeadLimits { max_bytes: 256 * 1024, max_fields: 1024 };

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

/// A shared connection: the handle that opens streams, and its state.
#[derive(Clone)]
struct Shared {
    send: SendRequest<Bytes>,
    state: Rc<ConnState>,
}

/// What the streams and the driving task of a connection share.
struct ConnState {
    /// The connection ended (its task returned).
    closed: Cell<bool>,
    /// Streams handed out and not yet ended.
    streams: Cell<usize>,
    /// When the last stream ended.
    idle_since: Cell<Instant>,
}

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
                conns.clear();
                continue;
            }
            conns.retain(|c| {
                let s = &c.state;
                !s.closed.get() && (s.streams.get() > 0 || now.duration_since(s.idle_since.get()) < max_idle)
            });
        }
    }
}

impl ServerConns {
    /// The newest connection that can take another stream now; connections
    /// found closed or going away are dropped on the way.
    fn usable(&self) -> Option<Shared> {
        let mut conns = self.conns.borrow_mut();
        conns.retain_mut(|c| {
            // A connection error or a GOAWAY received makes this fail at once;
            // `Pending` only means another stream is being opened.
            let mut cx = Context::from_waker(Waker::noop());
            !c.state.closed.get() && !matches!(c.send.poll_ready(&mut cx), Poll::Ready(Err(_)))
        });
        conns.iter().rev().find(|c| c.state.streams.get() < c.send.current_max_send_streams()).cloned()
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
/// [`super::connect`]), then the HTTP/2 preface, all by `deadline`.
async fn connect(target: &Target<'_>, deadline: tokio::time::Instant) -> Result<Shared, ProxyError> {
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    let conn = super::connect(target.addr, left, target.proxy_header, target.tls, target.server).await?;
    if let ServerStream::Tls(tls) = &conn.stream {
        if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
            tracing::warn!(server = %target.addr, "server did not select h2 in ALPN (pool has protocol = \"h2\")");
            return Err(ProxyError::retryable(Kind::ServerNotH2));
        }
    }
    let mut builder = h2::client::Builder::new();
    builder
        .enable_push(false)
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_send_buffer_size(SEND_BUFFER);
    let (send, connection) = match tokio::time::timeout_at(deadline, builder.handshake::<_, Bytes>(conn.stream)).await {
        Err(_) => return Err(ProxyError::retryable(Kind::ConnectTimeout)),
        Ok(Err(e)) => {
            tracing::warn!(server = %target.addr, error = %e, "HTTP/2 handshake with server failed");
            return Err(ProxyError::retryable(Kind::ServerClosed));
        }
        Ok(Ok(pair)) => pair,
    };
    let state =
        Rc::new(ConnState { closed: Cell::new(false), streams: Cell::new(0), idle_since: Cell::new(Instant::now()) });
    let (addr, driven) = (target.addr, state.clone());
    tokio::task::spawn_local(async move {
        match connection.await {
            Ok(()) => {}
            Err(e) if e.is_go_away() && e.is_remote() && e.reason() == Some(Reason::NO_ERROR) => {
                tracing::debug!(server = %addr, "server closed its HTTP/2 connection (GOAWAY)");
            }
            Err(e) => tracing::warn!(server = %addr, error = %e, "HTTP/2 connection to server failed"),
        }
        driven.closed.set(true);
    });
    Ok(Shared { send, state })
}

/// Hands out one stream of `shared`, to be opened by the request head the
/// pipeline writes on it.
fn open_stream(shared: &Shared, scheme: &'static str, target: &Target<'_>) -> UpstreamConn {
    let state = &shared.state;
    state.streams.set(state.streams.get() + 1);
    let link = Rc::new(RefCell::new(Link::default()));
    let failure = Rc::new(Cell::new(None));
    let wr = Wr {
        state: RefCell::new(Up::Head { send: shared.send.clone(), buf: BytesMut::new() }),
        scheme,
        server: target.addr,
        link: link.clone(),
        failure: failure.clone(),
    };
    let rd = Rd { state: Down::Waiting, link, failure: failure.clone() };
    let stream = H2Stream { rd, wr, failure, client: target.client.cloned(), _open: StreamGuard(state.clone()) };
    UpstreamConn { stream: ServerStream::H2(Box::new(stream)), buf: BytesMut::with_capacity(16 * 1024), served: 0 }
}

/// Counts a stream as open on its connection until dropped.
struct StreamGuard(Rc<ConnState>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let s = &self.0;
        s.streams.set(s.streams.get().saturating_sub(1));
        if s.streams.get() == 0 {
            s.idle_since.set(Instant::now());
        }
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
    failure: Rc<Cell<Option<Failure>>>,
    /// The client's HTTP/2 stream's reset codes, when there is one.
    client: Option<Rc<Resets>>,
    _open: StreamGuard,
}

/// Why a stream failed on the HTTP/2 side: for the log, and the server's
/// RST_STREAM code when it reset the stream.
#[derive(Debug, Clone, Copy)]
struct Failure {
    why: &'static str,
    reset: Option<u32>,
}

/// What the request side hands the response side once the stream is open.
#[derive(Default)]
struct Link {
    response: Option<ResponseFuture>,
    head_request: bool,
    /// The response side waited before the stream was open.
    waker: Option<Waker>,
}

/// The request side of a stream.
pub struct Wr {
    /// In a cell: the relay's non-blocking write attempt has a shared borrow.
    state: RefCell<Up>,
    scheme: &'static str,
    /// The server's address: the `:authority` of a request without a
    /// `Host` (HTTP/1.0), written out only for one.
    server: SocketAddr,
    link: Rc<RefCell<Link>>,
    failure: Rc<Cell<Option<Failure>>>,
}

enum Up {
    /// Reading the request head the pipeline writes.
    Head { send: SendRequest<Bytes>, buf: BytesMut },
    /// Sending its body.
    Body(Outbound),
    /// Sent whole: the stream is kept to pass on a client's reset.
    Sent(h2::SendStream<Bytes>),
    /// Failed before the stream opened.
    Failed,
}

/// The response side of a stream.
pub struct Rd {
    state: Down,
    link: Rc<RefCell<Link>>,
    failure: Rc<Cell<Option<Failure>>>,
}

enum Down {
    /// Waiting for the response head.
    Waiting,
    /// Reading the response.
    Body(Inbound),
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
        // code. Otherwise dropping the handles resets a stream still open
        // (CANCEL): the pipeline is done, timed out or failed.
        let Some(code) = self.client.as_ref().and_then(|r| r.by_client.get()) else {
            return;
        };
        match self.wr.state.get_mut() {
            Up::Body(body) => body.reset(Reason::from(code)),
            Up::Sent(send) => send.send_reset(Reason::from(code)),
            Up::Head { .. } | Up::Failed => {}
        }
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
        self.failure.get().map(|f| f.why)
    }

    /// The RST_STREAM code the server reset the stream with, if it did.
    pub fn reset(&self) -> Option<u32> {
        self.failure.get().and_then(|f| f.reset)
    }
}

impl Wr {
    fn poll_write(&self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let mut state = self.state.borrow_mut();
        match &mut *state {
            Up::Head { send, buf } => {
                // Ready for another stream before any byte is taken.
                if let Err(e) = std::task::ready!(send.poll_ready(cx)) {
                    self.failure.set(cause(&e));
                    *state = Up::Failed;
                    return Poll::Ready(Err(io::ErrorKind::ConnectionAborted.into()));
                }
                buf.extend_from_slice(data);
                Poll::Ready(self.open(&mut state).map(|()| data.len()))
            }
            Up::Body(body) => match body.poll_write(cx, data) {
                Poll::Ready(Err(e)) => {
                    self.failure.set(body.error().and_then(cause));
                    Poll::Ready(Err(e))
                }
                other => other,
            },
            Up::Sent(_) if data.is_empty() => Poll::Ready(Ok(0)),
            Up::Sent(_) => Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, "bytes after the request"))),
            Up::Failed => Poll::Ready(Err(io::ErrorKind::ConnectionAborted.into())),
        }
    }

    /// Opens the stream once the request head is complete, and sends the
    /// body bytes written with it.
    fn open(&self, state: &mut Up) -> io::Result<()> {
        let Up::Head { send, buf } = state else {
            return Ok(());
        };
        let mut fields = Vec::with_capacity(head::HEAD_FIELDS);
        let head = match parse::parse_request(buf, HEAD_LIMITS, &mut fields) {
            Ok(Some(head)) => head,
            Ok(None) => return Ok(()),
            Err(_) => return Err(io::Error::new(io::ErrorKind::InvalidData, "invalid request head")),
        };
        // The head's bytes, frozen: the request's fields are slices of them.
        let bytes = buf.split_to(head.len).freeze();
        let has_host = head.host.as_ref().is_some_and(|r| !r.is_empty());
        let authority = if has_host { String::new() } else { self.server.to_string() };
        let request = match head::server_request(&bytes, &head, &fields, self.scheme, &authority) {
            Ok(request) => request,
            Err(why) => {
                self.failure.set(Some(Failure { why, reset: None }));
                *state = Up::Failed;
                return Err(io::Error::new(io::ErrorKind::InvalidData, why));
            }
        };
        let head_request = bytes.get(head.method.clone()) == Some(&b"HEAD"[..]);
        let bodiless = matches!(head.framing, Framing::Empty | Framing::Length(0));
        let (response, stream) = match send.send_request(request, bodiless) {
            Ok(pair) => pair,
            Err(e) => {
                self.failure.set(cause(&e));
                *state = Up::Failed;
                return Err(io::ErrorKind::ConnectionAborted.into());
            }
        };
        let rest = std::mem::take(buf);
        {
            let mut link = self.link.borrow_mut();
            link.response = Some(response);
            link.head_request = head_request;
            if let Some(waker) = link.waker.take() {
                waker.wake();
            }
        }
        if bodiless {
            *state = Up::Sent(stream);
            return Ok(());
        }
        let mut body = Outbound::new(stream, head.framing);
        let mut at = 0;
        while at < rest.len() && !body.is_ended() {
            at += body.write_now(&rest[at..])?;
        }
        *state = Up::Body(body);
        Ok(())
    }
}

impl Rd {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if let Down::Waiting = self.state {
            let mut link = self.link.borrow_mut();
            let Some(response) = link.response.as_mut() else {
                link.waker = Some(cx.waker().clone());
                return Poll::Pending;
            };
            let response = match std::task::ready!(Pin::new(response).poll(cx)) {
                Ok(response) => response,
                Err(e) => {
                    self.failure.set(cause(&e));
                    return Poll::Ready(Err(io::ErrorKind::ConnectionAborted.into()));
                }
            };
            link.response = None;
            let (parts, body) = response.into_parts();
            let mut out = BytesMut::with_capacity(1024);
            let has_body = parse::response_has_body(link.head_request, parts.status.as_u16());
            let chunked = head::server_response_head(&parts, link.head_request, body.is_end_stream(), &mut out);
            self.state = Down::Body(if has_body {
                Inbound::new(body, chunked, out.freeze())
            } else {
                Inbound::empty(out.freeze())
            });
        }
        let Down::Body(body) = &mut self.state else {
            return Poll::Pending;
        };
        match body.poll_read(cx, buf) {
            Poll::Ready(Err(e)) => {
                self.failure.set(body.error().and_then(cause));
                Poll::Ready(Err(e))
            }
            other => other,
        }
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

impl H2Stream {
    /// The request side, for the relay's non-blocking writes.
    pub fn writer(&self) -> &Wr {
        &self.wr
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

/// What an HTTP/2 failure says about the server, for the log, and the
/// server's reset code when it reset the stream.
fn cause(e: &h2::Error) -> Option<Failure> {
    if e.is_io() {
        return None;
    }
    let why = match (e.is_remote(), e.is_go_away(), e.reason()) {
        (true, _, Some(Reason::REFUSED_STREAM)) => "server refused the HTTP/2 stream",
        (true, true, _) => "server went away (HTTP/2 GOAWAY)",
        (true, false, _) => "server reset the HTTP/2 stream",
        (false, _, _) => "invalid HTTP/2 from server",
    };
    let reset = (e.is_reset() && e.is_remote()).then(|| e.reason().map(u32::from)).flatten();
    Some(Failure { why, reset })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_name_the_side_and_the_frame() {
        let refused = h2::Error::from(Reason::REFUSED_STREAM);
        // A reason alone is a locally detected error.
        assert_eq!(cause(&refused).map(|f| (f.why, f.reset)), Some(("invalid HTTP/2 from server", None)));
    }
}
