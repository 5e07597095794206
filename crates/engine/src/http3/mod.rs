//! HTTP/3 towards clients: QUIC (quinn, rustls on aws-lc-rs) on the UDP side
//! of an `https` service's listeners, with `http3` on.
//!
//! There is one request pipeline. Each HTTP/3 request stream is served by
//! [`crate::http::serve_stream`] inside its QUIC connection's task (no task per
//! stream; every ready stream finishes before the connection is polled
//! again), the stream itself being the pipeline's client connection
//! ([`stream`]): routing, persistence, caching, rewriting, picking,
//! forwarding, compression and logging behave exactly as for HTTP/1.1 and
//! HTTP/2.
//!
//! One endpoint per worker and listener address ([`serve_endpoint`]), each
//! on its socket of the listener's `SO_REUSEPORT` group: the kernel steers
//! each datagram to the worker whose connection ID it carries, and quinn to
//! the connection, so a client whose address changes (NAT rebinding,
//! migration) keeps its connection ([`crate::quic_steer`], ADR 0009; one
//! endpoint on worker 0 where steering is unavailable, ADR 0006). The
//! endpoint's TLS configuration is the service's
//! ([`crate::tls::Terminator`]: certificates by SNI, resumption) with ALPN
//! `h3`, 0-RTT only with `http3.early_data` (then the connection is served
//! from the first flight and [`stream`] answers unsafe early requests 425),
//! and is replaced when a reload installs a new one. Each handshake counts
//! in the TLS handshake counters (full or failed: quinn does not say whether
//! rustls resumed a session).
//!
//! `h3` runs over this crate's own glue to quinn ([`quic`]), which counts
//! what `h3` would keep to itself. Limits, per connection:
//! `http3.max_concurrent_streams` request streams (QUIC stream credit), a
//! few unidirectional streams at once (HTTP/3's control and QPACK streams),
//! the field section size (`limits.max_header_bytes`), and
//! `timeouts.client_idle` as QUIC's idle timeout. Abuse defences, each
//! closing the connection with `H3_EXCESSIVE_LOAD`, a warning with its
//! reason and the service's refused-connection metric: more than
//! `http3.max_resets` request streams the client reset or stopped before
//! their response was complete, within [`RESET_WINDOW`] (`rapid-reset`);
//! more than `http3.max_control_frames` frames on its control stream
//! (`control-frame-flood`) or unidirectional streams opened
//! (`uni-stream-flood`) within the same window. A draining worker or a
//! removed service sends GOAWAY: streams in flight finish.
//!
//! Address validation ([`must_retry`]): a new connection from an address not
//! yet validated is answered with a Retry packet — the client must echo its
//! token before any connection state is kept — always, never, or (`auto`,
//! the default) while `http3.retry_threshold` handshakes are in flight on the
//! listener (all workers), which is when spoofed Initial packets would cost the most.
//!
//! Invariants: no peer input can panic this code; a misbehaving connection
//! closes only itself.

mod body;
mod quic;
mod stream;

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use switchyard_config::{Http3, QuicRetry, Service};

use self::quic::EXCESSIVE_LOAD;
use self::stream::Ended;
use crate::http2::{Tally, RESET_WINDOW};
use crate::live::Proto;
use crate::metrics::Handshake;
use crate::quic_steer::{QuicGroup, QuicSocket};
use crate::transport::Transport;
use crate::worker::{Local, Worker};

/// Unidirectional streams a client may open at once: HTTP/3's control
/// stream, the two QPACK streams, and room for reserved (grease) types.
const UNI_STREAMS: u32 = 8;
/// Longest a QUIC connection may stay without traffic (`client_idle` within
/// this bound, as the QUIC idle timeout is a 62-bit millisecond count).
const MAX_IDLE: Duration = Duration::from_secs(24 * 3600);

/// What every stream of a connection shares.
pub(super) struct Shared {
    connection: quinn::Connection,
    local_addr: Option<SocketAddr>,
    worker: Rc<Worker>,
    transport: Transport,
    /// The generation and service index new streams are served on.
    serving: RefCell<(Rc<Local>, usize)>,
    name: String,
    /// What the QUIC glue saw: floods, and each request stream's facts.
    watch: Rc<quic::Watch>,
    /// A request's fields while they are checked ([`stream`]), kept with
    /// their allocations from stream to stream.
    checked: RefCell<switchyard_http::http2::head::Request>,
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
}

/// The QUIC server configuration of `service` in `local`'s generation, with
/// `group`'s Retry token key: `None` when the service has no QUIC TLS
/// configuration.
fn server_config(local: &Local, service: usize, group: &QuicGroup) -> Option<quinn::ServerConfig> {
    let svc = local.gen.config.services.get(service)?;
    let crypto = local.gen.tls.get(service)?.as_ref()?.quic()?;
    let mut config = group.server_config(crypto);
    Some(config.transport_config(Arc::new(transport_config(svc))).clone())
}

/// QUIC transport parameters for `svc`'s clients.
fn transport_config(svc: &Service) -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    let idle = svc.timeouts.client_idle.min(MAX_IDLE);
    t.max_concurrent_bidi_streams(svc.http3.max_concurrent_streams.into())
        .max_concurrent_uni_streams(UNI_STREAMS.into())
        .max_idle_timeout(quinn::IdleTimeout::try_from(idle).ok());
    t
}

/// Whether a new connection must first prove its address with a Retry
/// round trip: never once `validated` (it echoed a Retry token), else as
/// `http3.retry` says, `auto` counting the listener's `handshaking`
/// connections against `retry_threshold`.
fn must_retry(http3: &Http3, handshaking: usize, validated: bool) -> bool {
    !validated
        && match http3.retry {
            QuicRetry::Always => true,
            QuicRetry::Never => false,
            QuicRetry::Auto => handshaking >= http3.retry_threshold as usize,
        }
}

/// Counts one connection among its listener's handshakes in flight (over
/// all workers), until dropped (handshake done, failed or timed out).
struct Handshaking(Arc<AtomicUsize>);

impl Handshaking {
    fn new(count: &Arc<AtomicUsize>) -> Handshaking {
        count.fetch_add(1, Ordering::Relaxed);
        Handshaking(count.clone())
    }
}

impl Drop for Handshaking {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Serves this worker's QUIC endpoint of listener `addr` until the listener
/// is removed by a reload or the worker drains; returns once the endpoint's
/// connections are gone.
pub(crate) async fn serve_endpoint(worker: Rc<Worker>, addr: SocketAddr, quic: QuicSocket) {
    let local = worker.local();
    let Some(&service) = local.gen.listeners.get(&(Proto::Quic, addr)) else {
        return;
    };
    let QuicSocket { socket, index, group } = quic;
    let Some(config) = server_config(&local, service, &group) else {
        tracing::error!(%addr, "HTTP/3 listener without a QUIC TLS configuration");
        return;
    };
    let runtime = Arc::new(quinn::TokioRuntime);
    let endpoint = match quinn::Endpoint::new(group.endpoint_config(index), Some(config), socket, runtime) {
        Ok(endpoint) => endpoint,
        Err(e) => {
            tracing::error!(worker = worker.id, %addr, error = %e, "cannot start the HTTP/3 endpoint");
            return;
        }
    };
    let mut generation = local.gen.number;
    let handshaking = &group.handshaking;
    loop {
        if worker.draining.get() {
            break;
        }
        let local = worker.local();
        let Some(&service) = local.gen.listeners.get(&(Proto::Quic, addr)) else {
            tracing::info!(worker = worker.id, %addr, "HTTP/3 listener removed by reload: no longer accepting");
            break;
        };
        if local.gen.number != generation {
            // Certificates and limits of the new generation, for new connections.
            generation = local.gen.number;
            endpoint.set_server_config(server_config(&local, service, &group));
        }
        let incoming = tokio::select! {
            incoming = endpoint.accept() => incoming,
            () = worker.drain.notified() => break,
            () = worker.reloaded.notified() => continue,
        };
        let Some(incoming) = incoming else {
            break;
        };
        let Some(incoming) = validate(incoming, &local, service, &worker, handshaking.load(Ordering::Relaxed)) else {
            continue;
        };
        worker.open.set(worker.open.get() + 1);
        let w = worker.clone();
        let handshake = Handshaking::new(handshaking);
        tokio::task::spawn_local(async move {
            let _open = OpenGuard(w.clone());
            connection(incoming, handshake, local, service, w, addr).await;
        });
    }
    // New connections are refused; those open finish (the endpoint's driver
    // runs while they do). The group, held until then, keeps every worker's
    // socket in the kernel's group, so its numbering stays the workers'.
    endpoint.set_server_config(None);
    endpoint.wait_idle().await;
    drop(group);
}

/// Answers `incoming` with a Retry packet when [`must_retry`] says so
/// (counted in the service's `quic_retries`); `None` then, else the
/// connection to accept.
fn validate(
    incoming: quinn::Incoming,
    local: &Local,
    service: usize,
    worker: &Worker,
    handshaking: usize,
) -> Option<quinn::Incoming> {
    let svc = local.gen.config.services.get(service)?;
    if !must_retry(&svc.http3, handshaking, incoming.remote_address_validated()) {
        return Some(incoming);
    }
    let peer = incoming.remote_address();
    match incoming.retry() {
        Ok(()) => {
            tracing::debug!(service = %svc.name, client = %peer, handshaking, "QUIC Retry sent");
            local.gen.services[service].quic_retry(worker.id);
            None
        }
        // Not allowed for this packet (quinn only refuses a Retry to a
        // client that already echoed one): accept it as it is.
        Err(e) => Some(e.into_incoming()),
    }
}

/// Counts a QUIC connection among the worker's open ones (the drain waits for them).
struct OpenGuard(Rc<Worker>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.set(self.0.open.get().saturating_sub(1));
    }
}

/// The end of a connection's handshake: `true` when it completed, `false`
/// when it failed or timed out.
type HandshakeDone = std::pin::Pin<Box<dyn std::future::Future<Output = bool>>>;

/// The handshake of `connecting`, within `wait`. With early data on, the
/// connection is handed over at once (streams opened in 0-RTT are served
/// before the handshake ends, [`stream`] decides which) and the handshake's
/// end is returned to be awaited beside them; otherwise it is awaited here.
async fn handshake(
    connecting: quinn::Connecting,
    early_data: bool,
    wait: Duration,
) -> Result<(quinn::Connection, Option<HandshakeDone>), &'static str> {
    let connecting = if early_data {
        match connecting.into_0rtt() {
            Ok((conn, accepted)) => {
                // `accepted` resolves when the handshake ends, to whether
                // 0-RTT was accepted (false too when it failed): the
                // connection's state tells a failure apart.
                let watched = conn.clone();
                let done = async move {
                    tokio::time::timeout(wait, accepted).await.is_ok() && watched.close_reason().is_none()
                };
                return Ok((conn, Some(Box::pin(done))));
            }
            Err(connecting) => connecting,
        }
    } else {
        connecting
    };
    match tokio::time::timeout(wait, connecting).await {
        Ok(Ok(conn)) => Ok((conn, None)),
        Ok(Err(_)) => Err("QUIC handshake failed"),
        Err(_) => Err("QUIC handshake timed out"),
    }
}

/// Serves one QUIC connection: the handshake, then its request streams.
async fn connection(
    incoming: quinn::Incoming,
    handshaking: Handshaking,
    local: Rc<Local>,
    service: usize,
    worker: Rc<Worker>,
    addr: SocketAddr,
) {
    let Some(svc) = local.gen.config.services.get(service) else {
        return;
    };
    let (name, timeouts, http3) = (svc.name.clone(), svc.timeouts, svc.http3);
    let max_field_section = u64::try_from(svc.limits.max_header_bytes).unwrap_or(u64::MAX);
    let metrics = local.gen.services[service].clone();
    let counters = local.gen.tls_handshakes.clone();
    let peer = incoming.remote_address();
    let local_addr = SocketAddr::new(incoming.local_ip().unwrap_or(addr.ip()), addr.port());
    let connecting = match incoming.accept() {
        Ok(connecting) => connecting,
        Err(e) => {
            tracing::debug!(service = %name, client = %peer, error = %e, "QUIC connection refused");
            return;
        }
    };
    let (conn, mut pending) = match handshake(connecting, http3.early_data, timeouts.client_header).await {
        Ok(handshaken) => handshaken,
        Err(why) => {
            counters.handshake(worker.id, Handshake::Failed);
            tracing::debug!(service = %name, client = %peer, "{why}");
            return;
        }
    };
    tracing::debug!(worker = worker.id, service = %name, client = %peer, "QUIC connection established");
    let mut handshaking = Some(handshaking);
    if pending.is_none() {
        counters.handshake(worker.id, Handshake::Full);
        handshaking = None;
    }
    metrics.connection_opened(worker.id);
    let _closed = crate::http::ConnectionGuard::new(&metrics, worker.id);
    let watch = quic::Watch::new(conn.clone(), http3.max_control_frames);
    let built = h3::server::builder()
        .max_field_section_size(max_field_section)
        .build::<_, Bytes>(quic::Conn::new(conn.clone(), watch.clone()))
        .await;
    let mut h3 = match built {
        Ok(h3) => h3,
        Err(e) => {
            tracing::debug!(service = %name, client = %peer, error = %e, "HTTP/3 connection failed");
            return;
        }
    };
    let transport = Transport { secure: true, alpn: Some("h3"), http3: true, ..Transport::default() };
    let shared = Rc::new(Shared {
        connection: conn,
        local_addr: Some(local_addr),
        worker: worker.clone(),
        transport,
        serving: RefCell::new((local, service)),
        name,
        watch,
        checked: RefCell::default(),
    });
    let resets = Tally::new(http3.max_resets, tokio::time::Instant::now());
    let closing = |reason: &'static str| {
        tracing::warn!(service = %shared.name, client = %peer, reason, "HTTP/3 connection closed");
        metrics.connection_refused(worker.id, reason);
    };
    let mut going_away = false;
    // The streams run inside this task, each polled only when it was woken.
    let mut streams = FuturesUnordered::new();
    loop {
        if !going_away && (worker.draining.get() || worker.local().gen.service_index(&shared.name).is_none()) {
            going_away = true;
            // GOAWAY: no new request streams; those accepted finish.
            if h3.shutdown(0).await.is_err() {
                break;
            }
        }
        tokio::select! {
            done = std::future::poll_fn(|cx| pending.as_mut().map_or(Poll::Pending, |done| done.as_mut().poll(cx))),
                if pending.is_some() => {
                pending = None;
                handshaking = None;
                counters.handshake(worker.id, if done { Handshake::Full } else { Handshake::Failed });
                if !done {
                    tracing::debug!(service = %shared.name, client = %peer, "QUIC handshake failed or timed out");
                    shared.connection.close(quinn::VarInt::from_u32(0), b"handshake");
                    break;
                }
            }
            accepted = h3.accept() => match accepted {
                Ok(Some(resolver)) => streams.push(stream::serve(resolver, shared.clone())),
                Ok(None) => break,
                Err(e) => {
                    match shared.watch.tripped() {
                        Some(reason) => closing(reason),
                        None => tracing::debug!(service = %shared.name, client = %peer, error = %e, "HTTP/3 connection closed"),
                    }
                    break;
                }
            },
            Some(ended) = streams.next(), if !streams.is_empty() => {
                // Every other stream that is ready finishes before the
                // connection is polled again.
                let mut reset = usize::from(ended == Ended::PeerReset);
                std::future::poll_fn(|cx| {
                    while let Poll::Ready(Some(ended)) = streams.poll_next_unpin(cx) {
                        reset += usize::from(ended == Ended::PeerReset);
                    }
                    Poll::Ready(())
                })
                .await;
                let now = tokio::time::Instant::now();
                if (0..reset).fold(false, |tripped, _| resets.record(now, RESET_WINDOW) || tripped) {
                    let reason = "rapid-reset";
                    closing(reason);
                    shared.connection.close(quinn::VarInt::from_u32(EXCESSIVE_LOAD), reason.as_bytes());
                    break;
                }
            }
            () = worker.drain.notified(), if !going_away => {}
            () = worker.reloaded.notified(), if !going_away => {}
        }
    }
    drop(handshaking);
    // Streams still running when the connection ended finish (or fail) now.
    while streams.next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_follows_the_mode_and_never_repeats_for_a_validated_address() {
        let http3 = |retry| Http3 { enabled: true, retry, retry_threshold: 3, ..Http3::default() };
        assert!(must_retry(&http3(QuicRetry::Always), 0, false));
        assert!(!must_retry(&http3(QuicRetry::Always), 0, true), "the token was echoed");
        assert!(!must_retry(&http3(QuicRetry::Never), 1000, false));
        let auto = http3(QuicRetry::Auto);
        assert!(!must_retry(&auto, 2, false), "below the threshold");
        assert!(must_retry(&auto, 3, false), "at the threshold, as HAProxy's retry-threshold");
        assert!(!must_retry(&auto, 3, true));
    }
}
