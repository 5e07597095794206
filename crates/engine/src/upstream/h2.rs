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
//! The pipeline is not changed for HTTP/2: a request's stream is presented
//! to it as an [`H2Stream`], an in-memory byte stream that takes the
//! HTTP/1.1 request the pipeline writes (head, then the body with its
//! length or chunked) and gives back the server's response as HTTP/1.1
//! (interim 1xx responses dropped, trailers dropped). A task per stream
//! translates between the two ([`exchange`]); dropping the [`H2Stream`]
//! (the pipeline is done, timed out or failed) ends that task, which resets
//! the stream if it is still open. Timeouts stay the pipeline's: it sees a
//! server that answers slowly exactly as it would over HTTP/1.1.
//!
//! A failed connection or a GOAWAY ends the streams it carried: their pipes
//! close before or during the response, which the pipeline reports as a
//! closed server connection (502), with the HTTP/2 cause kept for the log
//! ([`H2Stream::failure`]). An [`H2Stream`] never goes to the HTTP/1.1 idle
//! pool: the shared connection is the reuse.
//!
//! Invariants: no server input can panic this code; a failed connection
//! fails only the streams it carried.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use h2::client::{ResponseFuture, SendRequest};
use h2::Reason;
use switchyard_config::Pool;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::stream::ServerStream;
use super::tls::PoolTls;
use super::UpstreamConn;
use crate::translate::data::{self, RecvFailed};
use crate::translate::head;
use crate::transport::{Pipe, PipeEnd, Resets};
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
    /// How long a stream waits for the server's flow-control window.
    pub idle: Duration,
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

/// Hands out one stream of `shared`: the pipeline's end, and the task that
/// translates on the other.
fn open_stream(shared: &Shared, scheme: &'static str, target: &Target<'_>) -> UpstreamConn {
    let state = &shared.state;
    state.streams.set(state.streams.get() + 1);
    let open = StreamGuard(state.clone());
    let (pipe, PipeEnd { to_pipeline, from_pipeline, .. }) = Pipe::pair(None);
    let failure = Rc::new(Cell::new(None));
    let cancel = Rc::new(Cancel::default());
    let ends = Ends { from_pipeline, to_pipeline, failure: failure.clone(), cancel: cancel.clone() };
    let authority = target.addr.to_string();
    let task = tokio::task::spawn_local(exchange(shared.send.clone(), ends, scheme, authority, target.idle, open));
    let stream = H2Stream { pipe, task, failure, client: target.client.cloned(), cancel };
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

/// One request's stream as the pipeline sees it: a byte stream that takes
/// an HTTP/1.1 request and answers an HTTP/1.1 response. Dropping it ends
/// the exchange (the stream is reset if still open).
pub struct H2Stream {
    /// Reads the response, written by [`exchange`]; writes the request, read by it.
    pipe: Pipe,
    task: JoinHandle<()>,
    failure: Rc<Cell<Option<Failure>>>,
    /// The client's HTTP/2 stream's reset codes, when there is one.
    client: Option<Rc<Resets>>,
    cancel: Rc<Cancel>,
}

/// Why a stream failed on the HTTP/2 side: for the log, and the server's
/// RST_STREAM code when it reset the stream.
#[derive(Debug, Clone, Copy)]
struct Failure {
    why: &'static str,
    reset: Option<u32>,
}

/// Asks [`exchange`] to reset its stream with a code (the client's).
#[derive(Default)]
struct Cancel {
    code: Cell<Option<u32>>,
    wake: Notify,
}

impl std::fmt::Debug for H2Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H2Stream").finish_non_exhaustive()
    }
}

impl Drop for H2Stream {
    fn drop(&mut self) {
        match self.client.as_ref().and_then(|r| r.by_client.get()) {
            // The client reset its stream: the server's is reset with the same
            // code (the task ends itself once it has sent it).
            Some(code) => {
                self.cancel.code.set(Some(code));
                self.cancel.wake.notify_one();
            }
            // Done, timed out or failed: dropping the stream resets it (CANCEL) if still open.
            None => self.task.abort(),
        }
    }
}

impl H2Stream {
    /// The pipeline's end of the pipes (the same [`Pipe`] a client stream of
    /// the HTTP/2 front end is served over).
    pub fn pipe(&mut self) -> &mut Pipe {
        &mut self.pipe
    }

    /// The pipeline's end, shared.
    pub fn pipe_ref(&self) -> &Pipe {
        &self.pipe
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

/// The translating task's ends of a stream's pipes.
struct Ends {
    /// The request, as the pipeline wrote it.
    from_pipeline: DuplexStream,
    /// The response, for the pipeline to read.
    to_pipeline: DuplexStream,
    failure: Rc<Cell<Option<Failure>>>,
    cancel: Rc<Cancel>,
}

/// One request over HTTP/2: reads the pipeline's request head, opens the
/// stream, then sends the request body while the response comes back.
/// Returning closes the pipes: before the response head, the pipeline sees
/// a server that closed without answering; mid-body, a truncated body.
async fn exchange(
    send: SendRequest<Bytes>,
    mut ends: Ends,
    scheme: &'static str,
    authority: String,
    idle: Duration,
    _open: StreamGuard,
) {
    let cancel = ends.cancel.clone();
    let cancelled = async {
        cancel.wake.notified().await;
        cancel.code.get()
    };
    tokio::pin!(cancelled);
    let mut buf = BytesMut::with_capacity(4096);
    let mut fields = Vec::new();
    let head = loop {
        match parse::parse_request(&buf, HEAD_LIMITS, &mut fields) {
            Ok(Some(head)) => break head,
            Ok(None) => {}
            Err(_) => return,
        }
        buf.reserve(4096);
        match ends.from_pipeline.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    };
    let head_request = &buf[head.method.clone()] == b"HEAD";
    let request = match head::server_request(&buf, &head, &fields, scheme, &authority) {
        Ok(request) => request,
        Err(why) => {
            ends.failure.set(Some(Failure { why, reset: None }));
            return;
        }
    };
    buf.advance(head.len);
    let bodiless = matches!(head.framing, Framing::Empty | Framing::Length(0));
    let opened = async {
        let mut send = send.ready().await?;
        send.send_request(request, bodiless)
    };
    let opened = tokio::select! {
        opened = opened => opened,
        // The client went before the stream opened: nothing to reset.
        _ = &mut cancelled => return,
    };
    let (response, mut body) = match opened {
        Ok(pair) => pair,
        Err(e) => {
            ends.failure.set(cause(&e));
            return;
        }
    };
    let (failure, from_pipeline, to_pipeline) = (&ends.failure, &mut ends.from_pipeline, &mut ends.to_pipeline);
    let up = async {
        if !bodiless {
            data::body(from_pipeline, &mut buf, &mut body, head.framing, idle).await;
        }
    };
    let down = download(response, to_pipeline, head_request, failure);
    let reset = {
        tokio::pin!(up, down);
        let mut uploading = true;
        loop {
            tokio::select! {
                () = &mut up, if uploading => uploading = false,
                () = &mut down => break None,
                code = &mut cancelled => break code,
            }
        }
    };
    if let Some(code) = reset {
        body.send_reset(Reason::from(code));
    }
}

/// Waits for the server's response and writes it to the pipe as HTTP/1.1.
async fn download(
    response: ResponseFuture,
    pipe: &mut DuplexStream,
    head_request: bool,
    failure: &Cell<Option<Failure>>,
) {
    let response = match response.await {
        Ok(response) => response,
        Err(e) => {
            failure.set(cause(&e));
            return;
        }
    };
    let (parts, mut body) = response.into_parts();
    let mut out = BytesMut::with_capacity(1024);
    let chunked = head::server_response_head(&parts, head_request, body.is_end_stream(), &mut out);
    drop(parts);
    if pipe.write_all(&out).await.is_err() {
        return;
    }
    if let Err(RecvFailed::Stream(e)) = data::recv_to_pipe(&mut body, pipe, chunked).await {
        failure.set(cause(&e));
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
