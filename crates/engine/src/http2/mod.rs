//! HTTP/2 towards clients: cleartext with prior knowledge (h2c, sniffed by
//! the HTTP/1.1 pipeline's read-head phase) and over TLS after ALPN `h2`
//! ([`serve`]).
//!
//! There is one request pipeline. Each HTTP/2 stream is served by
//! [`crate::http::serve`] inside the connection's task (no task per stream;
//! every ready stream finishes before the connection writes, so responses
//! done together leave in one write), the stream itself being the
//! pipeline's client connection ([`stream`]): routing, persistence,
//! caching, rewriting, picking, forwarding and logging behave exactly as for
//! HTTP/1.1.
//!
//! Protections, per connection: the `h2` crate enforces
//! `max_concurrent_streams`, the header list limit (`limits.max_header_bytes`,
//! which also bounds CONTINUATION floods) and its own limits on streams reset
//! before they were accepted and on streams reset for protocol errors. On top,
//! more than `http2.max_resets` client resets within [`RESET_WINDOW`] close
//! the connection with GOAWAY(ENHANCE_YOUR_CALM) — the rapid-reset defence —
//! and more than `http2.max_control_frames` PING and SETTINGS frames within
//! [`flood::WINDOW`] end it at once ([`flood`]).
//! A connection with no open stream for `client_idle`, or on a draining
//! worker, gets a graceful GOAWAY: streams in flight finish.
//!
//! Invariants: no peer input can panic this code; a misbehaving connection
//! closes only itself.

pub mod flood;
pub mod io;
mod stream;

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::task::Poll;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::stream::{FuturesUnordered, StreamExt};
use h2::Reason;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;

use self::flood::Inspect;
use self::io::Prefixed;
use self::stream::Ended;
use crate::transport::Transport;
use crate::worker::{Local, Worker};

/// The client connection preface of HTTP/2 (RFC 9113 3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The window within which client stream resets are counted.
pub const RESET_WINDOW: Duration = Duration::from_secs(10);

/// Flow-control window of each stream: what a client may send before the
/// pipeline has taken it.
const STREAM_WINDOW: u32 = 256 * 1024;
/// Flow-control window of the whole connection.
const CONNECTION_WINDOW: u32 = 1024 * 1024;
/// Response bytes buffered per stream before the pipeline waits for the client.
const SEND_BUFFER: usize = 64 * 1024;
/// Streams the client resets before they are accepted, pending at once.
const PENDING_ACCEPT_RESETS: usize = 20;

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
    run(Prefixed::new(pre, io), conn, local, service, worker, transport).await;
}

/// Facts about a client connection handed over to HTTP/2.
pub(crate) struct Conn {
    /// The client's address (after a PROXY protocol header).
    pub peer: SocketAddr,
    /// The address the client connected to, when known.
    pub local_addr: Option<SocketAddr>,
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
    /// Streams in progress, and since when none has been.
    open: Cell<usize>,
    idle_since: Cell<Instant>,
    resets: Tally,
    /// Turns of the connection (each poll of it writes the frames streams
    /// queued, as far as the socket takes them), and the streams waiting for
    /// the next one ([`Shared::written`]).
    turns: Cell<u64>,
    turn_waiters: RefCell<Vec<std::task::Waker>>,
}

impl Shared {
    /// Resolves once the connection has had a turn after this call: the
    /// frames a stream queued before it have been written (as far as the
    /// socket took them). A stream that resets after a cut response waits
    /// for it, or the reset would drop what the client was already sent.
    async fn written(&self) {
        let start = self.turns.get();
        std::future::poll_fn(|cx| {
            if self.turns.get() != start {
                return Poll::Ready(());
            }
            self.turn_waiters.borrow_mut().push(cx.waker().clone());
            Poll::Pending
        })
        .await;
    }

    /// Counts a turn of the connection and wakes the streams waiting for one.
    fn turned(&self) {
        self.turns.set(self.turns.get().wrapping_add(1));
        for waker in self.turn_waiters.borrow_mut().drain(..) {
            waker.wake();
        }
    }

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

/// Serves an HTTP/2 connection whose preface (if already read) is in `io`'s prefix.
pub(crate) async fn run<IO: AsyncRead + AsyncWrite + Unpin + 'static>(
    io: IO,
    conn: Conn,
    local: Rc<Local>,
    service: usize,
    worker: Rc<Worker>,
    transport: Transport,
) {
    let Some(svc) = local.gen.config.services.get(service) else {
        return;
    };
    let (settings, timeouts, name) = (svc.http2, svc.timeouts, svc.name.clone());
    let metrics = local.gen.services[service].clone();
    metrics.connection_opened(worker.id);
    let _closed = crate::http::ConnectionGuard::new(&metrics, worker.id);
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(settings.max_concurrent_streams)
        .max_header_list_size(u32::try_from(svc.limits.max_header_bytes).unwrap_or(u32::MAX))
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_send_buffer_size(SEND_BUFFER)
        .max_pending_accept_reset_streams(PENDING_ACCEPT_RESETS)
        .max_local_error_reset_streams(Some(settings.max_resets as usize));
    let (io, flooded) = Inspect::new(io, settings.max_control_frames);
    let handshake = tokio::time::timeout(timeouts.client_header, builder.handshake::<_, Bytes>(io)).await;
    let mut h2 = match handshake {
        Ok(Ok(h2)) => h2,
        Ok(Err(_)) if flooded.get() => {
            let reason = "control-frame-flood";
            tracing::warn!(service = %name, client = %conn.peer, reason, "HTTP/2 connection closed");
            metrics.connection_refused(worker.id, reason);
            return;
        }
        Ok(Err(e)) => {
            tracing::debug!(service = %name, client = %conn.peer, error = %e, "HTTP/2 handshake failed");
            return;
        }
        Err(_) => return,
    };
    let shared = Rc::new(Shared {
        peer: conn.peer,
        local_addr: conn.local_addr,
        worker: worker.clone(),
        transport: Transport { http2: true, ..transport },
        serving: RefCell::new((local, service)),
        name,
        open: Cell::new(0),
        idle_since: Cell::new(Instant::now()),
        resets: Tally::new(settings.max_resets, Instant::now()),
        turns: Cell::new(0),
        turn_waiters: RefCell::new(Vec::new()),
    });
    let mut going_away = false;
    let mut calmed = false;
    // The streams run inside this task: a stream's progress and the frames it
    // queued are written in the same turn, without a task of its own to spawn,
    // schedule and wake. Each stream is polled only when it was woken, and a
    // stream that ends returns to this loop, which looks at the reset tally
    // and the idle clock again: no wake-up of its own is needed for either.
    let mut streams = FuturesUnordered::new();
    // The generation whose services were last looked at: a reload that
    // removed the service is noticed once, not looked up every turn.
    let mut seen_gen = shared.serving.borrow().0.gen.number;
    loop {
        if !going_away && (worker.draining.get() || removed(&worker, &shared.name, &mut seen_gen)) {
            h2.graceful_shutdown();
            going_away = true;
        }
        if !calmed && shared.resets.tripped() {
            tracing::warn!(service = %shared.name, client = %shared.peer, reason = "rapid-reset", "HTTP/2 connection closed");
            metrics.connection_refused(worker.id, "rapid-reset");
            h2.abrupt_shutdown(Reason::ENHANCE_YOUR_CALM);
            (calmed, going_away) = (true, true);
        }
        let idle = shared.open.get() == 0 && !going_away;
        let idle_at = shared.idle_since.get() + timeouts.client_idle;
        // In this order, and no further once one is ready: while frames come
        // in or streams make progress, the waits for the worker's events and
        // the idle timer are not even set up (each would register, then
        // unregister, a waiter per turn). The accept queue cannot starve the
        // streams: `h2` accepts at most `max_concurrent_streams` at a time.
        tokio::select! {
            biased;
            accepted = std::future::poll_fn(|cx| {
                let polled = h2.poll_accept(cx);
                shared.turned();
                polled
            }) => match accepted {
                Some(Ok((req, respond))) => {
                    shared.open.set(shared.open.get() + 1);
                    streams.push(stream(req, respond, shared.clone()));
                }
                Some(Err(_)) if flooded.get() => {
                    let reason = "control-frame-flood";
                    tracing::warn!(service = %shared.name, client = %shared.peer, reason, "HTTP/2 connection closed");
                    metrics.connection_refused(worker.id, reason);
                    break;
                }
                Some(Err(e)) => {
                    tracing::debug!(service = %shared.name, client = %shared.peer, error = %e, "HTTP/2 connection error");
                    break;
                }
                None => break,
            },
            Some(()) = streams.next(), if !streams.is_empty() => {
                // Every other stream that is ready finishes before the
                // connection is polled again: responses done in one turn leave
                // in one write instead of a write each.
                std::future::poll_fn(|cx| {
                    while let Poll::Ready(Some(())) = streams.poll_next_unpin(cx) {}
                    Poll::Ready(())
                })
                .await;
            }
            () = worker.drain.notified() => {}
            () = worker.reloaded.notified() => {}
            // Lazy: the timer is made only when the branch is polled (idle).
            () = async { tokio::time::sleep_until(idle_at).await }, if idle => {
                h2.graceful_shutdown();
                going_away = true;
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

/// One stream: the pipeline, then the connection's bookkeeping.
async fn stream(req: http::Request<h2::RecvStream>, respond: h2::server::SendResponse<Bytes>, shared: Rc<Shared>) {
    let ended = stream::serve(req, respond, shared.clone()).await;
    if ended == Ended::PeerReset {
        // The connection's loop looks at the tally when this stream returns to it.
        shared.resets.record(Instant::now(), RESET_WINDOW);
    }
    shared.open.set(shared.open.get().saturating_sub(1));
    if shared.open.get() == 0 {
        shared.idle_since.set(Instant::now());
    }
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
