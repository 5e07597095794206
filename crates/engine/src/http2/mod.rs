//! HTTP/2 towards clients: cleartext with prior knowledge (h2c, sniffed by
//! [`crate::front`]) and over TLS after ALPN `h2` ([`serve`]).
//!
//! The protocol is switchyard's own sans-io codec
//! ([`switchyard_http::http2::server`]): this module is its tokio driver.
//! The connection's task reads the client's bytes into one buffer, hands
//! them to the codec, turns its events into streams, runs the streams, and
//! writes what the codec queued — every frame of a turn in one write.
//!
//! There is one request pipeline. Each HTTP/2 stream is served by
//! [`crate::http::serve_stream`] inside the connection's task (no task per stream),
//! the stream itself being the pipeline's client connection ([`stream`]):
//! routing, persistence, caching, rewriting, picking, forwarding and logging
//! behave exactly as for HTTP/1.1. The request head reaches the pipeline
//! decoded (buffer and field ranges), not as text.
//!
//! Protections, per connection: the codec enforces
//! `max_concurrent_streams` (REFUSED_STREAM beyond), the header list limit
//! (`limits.max_header_bytes`: 431 on the stream; a block or an HPACK bomb
//! far beyond it, or a CONTINUATION flood, ends the connection with GOAWAY
//! ENHANCE_YOUR_CALM) and every RFC 9113 rule. On top, more than
//! `http2.max_resets` client resets (and streams reset for the client's
//! errors) within [`RESET_WINDOW`] close the
//! connection with GOAWAY(ENHANCE_YOUR_CALM) — the rapid-reset defence — and
//! more than `http2.max_control_frames` PING, SETTINGS and empty frames
//! within [`flood::WINDOW`] end it at once, without GOAWAY (a flooding client
//! may not read it). Output waiting for a client that does not read stops
//! the reading. A connection with no open stream for `client_idle` (or
//! without its preface and SETTINGS within `client_header`), or on a
//! draining worker, gets a graceful GOAWAY: streams in flight finish.
//!
//! Invariants: no peer input can panic this code; a misbehaving connection
//! closes only itself.

pub mod flood;
mod stream;

use std::cell::{Cell, RefCell};
use std::io::IoSlice;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::BytesMut;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use self::stream::{Ended, Slot};
use crate::transport::{Transport, WRITE_SLICES};
use crate::worker::{Local, Worker};
use switchyard_http::http2::frame::code;
use switchyard_http::http2::server::{self, Event, Server, StreamMap};

/// The client connection preface of HTTP/2 (RFC 9113 3.4).
pub const PREFACE: &[u8; 24] = server::PREFACE;
/// The window within which client stream resets are counted.
pub const RESET_WINDOW: Duration = Duration::from_secs(10);

/// Flow-control window of each stream: what a client may send before the
/// pipeline has taken it.
const STREAM_WINDOW: u32 = 256 * 1024;
/// Flow-control window of the whole connection.
const CONNECTION_WINDOW: u32 = 1024 * 1024;
/// The read buffer: a whole frame of the largest size we accept fits.
const READ_BUF: usize = 32 * 1024;
/// Output held for a client that does not read, beyond which reading stops.
const MAX_OUTPUT: usize = 256 * 1024;
/// Rounds of a turn before the task yields to others.
const ROUNDS: usize = 16;

/// Serves one HTTP/2 client connection until it closes, fails, idles out or
/// the worker drains. `pre` holds bytes already read from `io` (the preface
/// or part of it, for h2c; empty after a TLS handshake).
///
/// This is the entry point after ALPN `h2`; `transport` describes the TLS
/// session as for HTTP/1.1.
pub(crate) async fn serve<IO: AsyncRead + AsyncWrite + Unpin + 'static>(
    io: IO,
    conn: Conn,
    local: Rc<Local>,
    service: usize,
    worker: Rc<Worker>,
    transport: Transport,
    pre: BytesMut,
) {
    serve_with(io, conn, local, service, worker, transport, &pre).await;
}

/// Serves an HTTP/2 connection from its first byte (the preface unread).
#[cfg(test)]
pub(crate) async fn run<IO: AsyncRead + AsyncWrite + Unpin + 'static>(
    io: IO,
    conn: Conn,
    local: Rc<Local>,
    service: usize,
    worker: Rc<Worker>,
    transport: Transport,
) {
    serve_with(io, conn, local, service, worker, transport, &[]).await;
}

/// Facts about a client connection handed over to HTTP/2.
pub(crate) struct Conn {
    /// The client's address (after a PROXY protocol header).
    pub peer: SocketAddr,
    /// The address the client connected to, when known.
    pub local_addr: Option<SocketAddr>,
}

/// The codec and the streams' slots: what the connection and its streams
/// share (one task: a `RefCell`, borrowed briefly, never across an await).
pub(super) struct Wire {
    codec: Server,
    slots: StreamMap<Slot>,
}

/// What every stream of a connection shares.
pub(super) struct Shared {
    peer: SocketAddr,
    local_addr: Option<SocketAddr>,
    worker: Rc<Worker>,
    transport: Transport,
    /// The generation and service index new streams are served on.
    serving: RefCell<(Rc<Local>, usize)>,
    name: String,
    wire: RefCell<Wire>,
}

impl Shared {
    /// The generation and service a new stream runs on: the worker's
    /// current one when the service still exists there.
    fn current(&self) -> (Rc<Local>, usize) {
        let now = self.worker.local();
        let mut serving = self.serving.borrow_mut();
        if now.gen.number != serving.0.gen.number {
            if let Some(i) = now.gen.service_index(&self.name) {
                *serving = (now, i);
            }
        }
        serving.clone()
    }

    /// A stream's pipeline is done: its slot goes, unread body bytes give
    /// their room back, and a request still being sent is stopped
    /// (RST_STREAM NO_ERROR after a complete response, RFC 9113 8.1).
    fn close_stream(&self, id: u32) {
        let mut wire = self.wire.borrow_mut();
        if let Some(slot) = wire.slots.remove(&id) {
            wire.codec.release(id, slot.body.len());
        }
        wire.codec.send_reset(id, code::NO_ERROR);
    }
}

/// Client events (stream resets, control frames) counted per window: the
/// count restarts when an event comes more than a window after the
/// window's first.
pub struct Tally {
    max: u32,
    since: Cell<Instant>,
    count: Cell<u32>,
    tripped: Cell<bool>,
}

impl Tally {
    /// At most `max` events per window are tolerated.
    pub fn new(max: u32, now: Instant) -> Self {
        Tally { max, since: Cell::new(now), count: Cell::new(0), tripped: Cell::new(false) }
    }

    /// Counts one event at `now` in windows of `window`; true once the limit
    /// is exceeded (and from then on).
    pub fn record(&self, now: Instant, window: Duration) -> bool {
        if now.duration_since(self.since.get()) > window {
            self.since.set(now);
            self.count.set(0);
        }
        self.count.set(self.count.get().saturating_add(1));
        if self.count.get() > self.max {
            self.tripped.set(true);
        }
        self.tripped.get()
    }

    /// Whether the limit was exceeded.
    pub fn tripped(&self) -> bool {
        self.tripped.get()
    }
}

/// Serves an HTTP/2 connection; `pre` holds its first bytes, already read.
pub(crate) async fn serve_with<IO: AsyncRead + AsyncWrite + Unpin + 'static>(
    io: IO,
    conn: Conn,
    local: Rc<Local>,
    service: usize,
    worker: Rc<Worker>,
    transport: Transport,
    pre: &[u8],
) {
    let Some(svc) = local.gen.config.services.get(service) else {
        return;
    };
    let (settings, timeouts, name) = (svc.http2, svc.timeouts, svc.name.clone());
    let metrics = local.gen.services[service].clone();
    metrics.connection_opened(worker.id);
    let _closed = crate::http::ConnectionGuard::new(&metrics, worker.id);
    let codec = Server::new(server::Config {
        max_streams: settings.max_concurrent_streams,
        max_header_list: svc.limits.max_header_bytes,
        stream_window: STREAM_WINDOW,
        connection_window: CONNECTION_WINDOW,
    });
    let shared = Rc::new(Shared {
        peer: conn.peer,
        local_addr: conn.local_addr,
        worker: worker.clone(),
        transport: Transport { http2: true, ..transport },
        serving: RefCell::new((local, service)),
        name,
        wire: RefCell::new(Wire { codec, slots: StreamMap::default() }),
    });
    let mut rbuf = vec![0u8; READ_BUF.max(pre.len())];
    rbuf[..pre.len()].copy_from_slice(pre);
    let now = Instant::now();
    let mut driver = Driver {
        io,
        shared: shared.clone(),
        rbuf,
        filled: pre.len(),
        streams: FuturesUnordered::new(),
        started: Vec::new(),
        resets: Tally::new(settings.max_resets, now),
        control: Tally::new(settings.max_control_frames, now),
        going_away: false,
        closing: None,
        fresh: true,
        unflushed: false,
        idle_since: now,
    };
    let started = now;
    // The generation whose services were last looked at: a reload that
    // removed the service is noticed once, not looked up every turn.
    let mut seen_gen = shared.serving.borrow().0.gen.number;
    loop {
        if !driver.going_away && (worker.draining.get() || removed(&worker, &shared.name, &mut seen_gen)) {
            driver.go_away(code::NO_ERROR);
        }
        let idle = driver.streams.is_empty() && !driver.going_away;
        let idle_at = if driver.handshaken() {
            driver.idle_since + timeouts.client_idle
        } else {
            started + timeouts.client_header
        };
        // The turn first, and no further once it ends: while frames come in
        // or streams make progress, the waits for the worker's events and the
        // idle timer are not even set up.
        tokio::select! {
            biased;
            end = std::future::poll_fn(|cx| driver.poll_turn(cx)) => {
                match end {
                    End::Closed => {}
                    End::Failed(why) => {
                        tracing::debug!(service = %shared.name, client = %shared.peer, error = why, "HTTP/2 connection error");
                    }
                    End::Refused(reason) => {
                        tracing::warn!(service = %shared.name, client = %shared.peer, reason, "HTTP/2 connection closed");
                        metrics.connection_refused(worker.id, reason);
                    }
                }
                break;
            }
            () = worker.drain.notified() => {}
            () = worker.reloaded.notified() => {}
            // Lazy: the timer is made only when the branch is polled (idle).
            () = async { tokio::time::sleep_until(idle_at).await }, if idle => {
                if !driver.handshaken() {
                    break;
                }
                driver.go_away(code::NO_ERROR);
            }
        }
    }
    driver.shutdown().await;
}

/// How a connection ended.
enum End {
    /// Closed by the client, or after a graceful GOAWAY once idle.
    Closed,
    /// An I/O or protocol error (GOAWAY sent when it was a protocol error).
    Failed(&'static str),
    /// Cut by a defence: the reason for the log and metrics.
    Refused(&'static str),
}

/// The connection's task: socket, codec, streams.
struct Driver<IO> {
    io: IO,
    shared: Rc<Shared>,
    /// Bytes read and not yet taken by the codec: `rbuf[..filled]`.
    rbuf: Vec<u8>,
    filled: usize,
    streams: FuturesUnordered<StreamFuture>,
    /// Streams a decode started, to join `streams` once the codec is let go.
    started: Vec<StreamFuture>,
    resets: Tally,
    control: Tally,
    /// GOAWAY went out: the connection ends once its streams are done.
    going_away: bool,
    /// The connection ends, for this reason, once its output (a GOAWAY) is written.
    closing: Option<End>,
    /// Bytes handed over with the connection (the preface) are still to decode.
    fresh: bool,
    /// Written bytes the transport (TLS) still holds.
    unflushed: bool,
    idle_since: Instant,
}

impl<IO: AsyncRead + AsyncWrite + Unpin> Driver<IO> {
    fn handshaken(&self) -> bool {
        self.shared.wire.borrow().codec.handshaken()
    }

    fn go_away(&mut self, code: u32) {
        self.shared.wire.borrow_mut().codec.go_away(code);
        self.going_away = true;
    }

    /// One turn: read and decode what arrived, run the streams that are
    /// ready, write what was queued; again while anything moved.
    fn poll_turn(&mut self, cx: &mut Context<'_>) -> Poll<End> {
        for _ in 0..ROUNDS {
            let mut moved = match self.poll_input(cx) {
                Poll::Ready(Ok(())) => true,
                Poll::Ready(Err(end)) => return Poll::Ready(end),
                Poll::Pending => false,
            };
            let had = !self.streams.is_empty();
            while let Poll::Ready(Some(_ended)) = self.streams.poll_next_unpin(cx) {
                moved = true;
            }
            if had && self.streams.is_empty() {
                self.idle_since = Instant::now();
            }
            match self.poll_output(cx) {
                Poll::Ready(Ok(wrote)) => moved |= wrote,
                Poll::Ready(Err(())) => return Poll::Ready(End::Failed("write failed")),
                Poll::Pending => {}
            }
            let flushed = !self.unflushed && self.shared.wire.borrow().codec.output().is_empty();
            if flushed {
                if let Some(end) = self.closing.take() {
                    return Poll::Ready(end);
                }
                if self.going_away && self.streams.is_empty() {
                    return Poll::Ready(End::Closed);
                }
            }
            if !moved {
                return Poll::Pending;
            }
        }
        // Others' turn: this connection comes back at once.
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// Reads what the socket has and hands it to the codec. `Ok`: something
    /// was decoded; `Pending`: nothing to read (or reading is held back).
    fn poll_input(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), End>> {
        if self.closing.is_some() {
            return Poll::Pending;
        }
        if std::mem::take(&mut self.fresh) && self.filled > 0 {
            self.decode()?;
            return Poll::Ready(Ok(()));
        }
        if self.shared.wire.borrow().codec.output_len() > MAX_OUTPUT {
            // A client that does not read what it asked for gets no more read.
            return Poll::Pending;
        }
        if self.filled == self.rbuf.len() {
            // Cannot happen: the codec refuses a frame larger than the buffer first.
            return Poll::Ready(Err(End::Failed("read buffer full")));
        }
        let mut buf = ReadBuf::new(&mut self.rbuf[self.filled..]);
        match Pin::new(&mut self.io).poll_read(cx, &mut buf) {
            Poll::Ready(Ok(())) => {
                let n = buf.filled().len();
                if n == 0 {
                    return Poll::Ready(Err(End::Closed));
                }
                self.filled += n;
                self.decode()?;
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(_)) => Poll::Ready(Err(End::Failed("read failed"))),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Writes what the codec queued. `Ok(true)`: something was written.
    fn poll_output(&mut self, cx: &mut Context<'_>) -> Poll<Result<bool, ()>> {
        let mut wrote = false;
        loop {
            let polled = {
                let wire = self.shared.wire.borrow();
                if wire.codec.output_len() == 0 {
                    break;
                }
                // Frames and large payloads queued by reference, in one write.
                let mut slices = [IoSlice::new(&[]); WRITE_SLICES];
                let n = wire.codec.output_vectored(&mut slices);
                Pin::new(&mut self.io).poll_write_vectored(cx, &slices[..n])
            };
            match polled {
                Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(Err(())),
                Poll::Ready(Ok(n)) => {
                    self.shared.wire.borrow_mut().codec.written(n);
                    wrote = true;
                }
                Poll::Pending => break,
            }
        }
        if wrote || self.unflushed {
            // TLS keeps what the socket did not take yet: it goes out now,
            // or when the socket is writable again.
            match Pin::new(&mut self.io).poll_flush(cx) {
                Poll::Ready(Ok(())) => self.unflushed = false,
                Poll::Ready(Err(_)) => return Poll::Ready(Err(())),
                Poll::Pending => self.unflushed = true,
            }
        }
        if wrote {
            Poll::Ready(Ok(true))
        } else {
            Poll::Pending
        }
    }

    /// The codec takes the bytes read; its events start, feed and reset
    /// streams; the defences count what it saw.
    fn decode(&mut self) -> Result<(), End> {
        let shared = self.shared.clone();
        // Kept between turns: no allocation, and no growing copy, per decode.
        let mut started = std::mem::take(&mut self.started);
        let mut peer_resets = 0u32;
        let result = {
            let mut wire = shared.wire.borrow_mut();
            let Wire { codec, slots } = &mut *wire;
            let mut released = Vec::new();
            let result = codec.recv(&self.rbuf[..self.filled], &mut |event| {
                on_event(event, slots, &shared, &mut started, &mut released, &mut peer_resets);
            });
            for (stream, n) in released {
                codec.release(stream, n);
            }
            wake_writers(&mut wire);
            result
        };
        for stream in started.drain(..) {
            self.streams.push(stream);
        }
        self.started = started;
        let counts = shared.wire.borrow_mut().codec.take_counts();
        let now = Instant::now();
        let frames = counts.control + counts.empty;
        if frames > 0 && (0..frames).any(|_| self.control.record(now, flood::WINDOW)) {
            return Err(End::Refused("control-frame-flood"));
        }
        match result {
            Ok(used) => {
                self.rbuf.copy_within(used..self.filled, 0);
                self.filled -= used;
            }
            Err(e) => {
                self.closing = Some(End::Failed(e.reason));
                return Ok(());
            }
        }
        // The client's resets, and the streams reset for its errors (as
        // `h2` counted its local error resets), within one limit.
        let resets = peer_resets + counts.stream_errors;
        if resets > 0 && (0..resets).any(|_| self.resets.record(now, RESET_WINDOW)) {
            // GOAWAY first; the connection ends once it is written.
            self.go_away(code::ENHANCE_YOUR_CALM);
            self.closing = Some(End::Refused("rapid-reset"));
        }
        Ok(())
    }

    /// After the last turn: the streams' pipelines end, the socket closes.
    async fn shutdown(mut self) {
        self.streams.clear();
        self.shared.wire.borrow_mut().slots.clear();
        let _ = tokio::time::timeout(Duration::from_secs(1), tokio::io::AsyncWriteExt::shutdown(&mut self.io)).await;
    }
}

/// A stream's future, boxed where it is made ([`stream::start`]): small, since
/// its request's head and scratch set went once, into its pipeline's box.
type StreamFuture = Pin<Box<dyn std::future::Future<Output = Ended>>>;

/// One event of the codec, for the streams (`started`: requests to serve;
/// `released`: body bytes of streams no longer served, whose room goes back).
fn on_event(
    event: Event<'_>,
    slots: &mut StreamMap<Slot>,
    shared: &Rc<Shared>,
    started: &mut Vec<StreamFuture>,
    released: &mut Vec<(u32, usize)>,
    peer_resets: &mut u32,
) {
    match event {
        Event::Request { stream, request, end_stream } => {
            if request.head.is_none() {
                return;
            }
            // The worker's pooled working memory, as an HTTP/1.1 connection
            // gets it: the pipeline gives it back when the stream is done.
            let mut scratch = shared.worker.lend_scratch();
            let Some(head) = crate::translate::head::load(request, &mut scratch.buf, &mut scratch.fields) else {
                return;
            };
            slots.insert(stream, Slot { end: end_stream, ..Slot::default() });
            // Made now, polled once the codec is let go (the stream borrows it).
            started.push(self::stream::start(stream, scratch, head, shared));
        }
        Event::Data { stream, data, end_stream } => match slots.get_mut(&stream) {
            Some(slot) => {
                slot.body.extend_from_slice(data);
                slot.end |= end_stream;
                slot.wake();
            }
            None => released.push((stream, data.len())),
        },
        Event::Trailers { stream, buf, fields } => {
            if let Some(slot) = slots.get_mut(&stream) {
                let mut trailers = Box::<crate::transport::Trailers>::default();
                for f in fields {
                    trailers.push(&buf[f.name.clone()], &buf[f.value.clone()]);
                }
                slot.trailers = Some(trailers);
                slot.end = true;
                slot.wake();
            }
        }
        Event::Reset { stream, code, by_peer } => {
            if let Some(slot) = slots.get_mut(&stream) {
                slot.reset = Some((code, by_peer));
                slot.wake();
                *peer_resets += u32::from(by_peer);
            }
        }
        Event::GoAway { .. } => {}
    }
}

/// Wakes every stream waiting for room once the client's windows grew.
fn wake_writers(wire: &mut Wire) {
    if wire.codec.take_window_opened() {
        for slot in wire.slots.values_mut() {
            if let Some(w) = slot.writer.take() {
                w.wake();
            }
        }
    }
}

/// Whether a reload since generation `seen` removed the service `name`;
/// `seen` moves on to the worker's current generation.
fn removed(worker: &Worker, name: &str, seen: &mut u64) -> bool {
    let now = worker.local();
    if now.gen.number == *seen {
        return false;
    }
    *seen = now.gen.number;
    now.gen.service_index(name).is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resets_beyond_the_limit_within_the_window_trip() {
        let t0 = Instant::now();
        let r = Tally::new(3, t0);
        assert!(!(0..3).any(|_| r.record(t0, RESET_WINDOW)));
        assert!(r.record(t0 + Duration::from_secs(1), RESET_WINDOW));
        assert!(r.tripped());
    }

    #[test]
    fn resets_spread_over_windows_do_not_trip() {
        let t0 = Instant::now();
        let r = Tally::new(3, t0);
        for i in 0..30u64 {
            assert!(!r.record(t0 + Duration::from_secs(4 * i), RESET_WINDOW), "reset {i}");
        }
    }
}
