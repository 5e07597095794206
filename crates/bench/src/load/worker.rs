//! One generator thread: a current-thread tokio runtime (epoll) driving its share of the
//! connections, each a task on a `LocalSet`, all sharing the thread's counters and
//! histogram without locks.
//!
//! A connection slot loops: take a *ticket* (closed loop: now; open loop: the thread's next
//! scheduled time, see [`pace`](super::pace)), connect if it has no connection, send,
//! read, record. Only what completes inside the measured window is counted: warm-up and
//! the grace period after the window are discarded.
//!
//! HTTP/2 and HTTP/3 connections carry [`H2_STREAMS_PER_CONNECTION`] stream loops each,
//! the same multiplexing code over either protocol's sender ([`Exchange`]). HTTP/3
//! connections of a thread share the thread's QUIC endpoint (one UDP socket).

use std::cell::{Cell, RefCell};
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use h2::client::SendRequest;
use http::Request;
use rustls::pki_types::ServerName;
use rustls::HandshakeKind;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio::time::timeout;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use super::cpu::thread_cpu;
use super::hist::Latency;
use super::http1::{self, Failure, Jar};
use super::pace::Schedule;
use super::spec::{LoadSpec, Protocol};
use super::{http2, http3, tls, H2_STREAMS_PER_CONNECTION};

/// Longest a request (or a connection with its handshake) may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause after a failed connection attempt, so a refusing target is not hammered in a
/// tight loop that would eat the CPU the target needs.
const CONNECT_BACKOFF: Duration = Duration::from_millis(10);

/// How long a connection whose response said `connection: close` waits for the server's
/// close before closing itself.
const CLOSE_WAIT: Duration = Duration::from_secs(1);
/// Timer slop forgiven in open loop: a request whose connection was free and waiting for
/// its send time is measured from when the timer (1 ms granularity) released it, up to
/// this much after its intended time. Anything later is charged to the request.
const TIMER_SLOP: Duration = Duration::from_millis(2);
/// After a thread's last HTTP/3 connection, how long its endpoint waits for the close
/// frames to go out.
const ENDPOINT_CLOSE: Duration = Duration::from_millis(200);

/// The run's time line.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    /// Traffic starts (warm-up begins).
    pub start: Instant,
    /// Measurement begins (warm-up ends).
    pub measure_start: Instant,
    /// Measurement ends; no request starts after it.
    pub measure_end: Instant,
    /// In-flight requests are abandoned.
    pub hard_end: Instant,
}

/// What every thread shares, built once per run.
pub struct Shared {
    target: SocketAddr,
    protocol: Protocol,
    cookies: bool,
    per_connection: Option<u32>,
    h1: http1::Requests,
    h2: http2::Requests,
    tls: Option<(TlsConnector, ServerName<'static>)>,
    /// The QUIC client of an HTTP/3 run (then `tls` is `None`).
    quic: Option<http3::Quic>,
    /// The time line.
    pub window: Window,
}

impl Shared {
    /// Prepares `spec` (requests rendered, TLS configured) for a run on `window`.
    pub fn new(spec: &LoadSpec, window: Window) -> io::Result<Shared> {
        let (tls, quic) = match (&spec.tls, spec.protocol) {
            (Some(t), Protocol::Http3) => (None, Some(http3::Quic::new(t)?)),
            (None, Protocol::Http3) => {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, "HTTP/3 needs TLS settings"));
            }
            (Some(t), _) => {
                (Some((TlsConnector::from(tls::client_config(t, spec.protocol)?), tls::server_name(t)?)), None)
            }
            (None, _) => (None, None),
        };
        Ok(Shared {
            target: spec.target,
            protocol: spec.protocol,
            cookies: spec.cookies,
            per_connection: spec.requests_per_connection.map(|n| n.max(1)),
            h1: http1::Requests::new(spec),
            h2: http2::Requests::new(spec, spec.tls.is_some())?,
            tls,
            quic,
            window,
        })
    }
}

/// A thread's counters over the measured window.
#[derive(Debug, Default)]
pub struct Stats {
    /// Successful requests.
    pub requests: u64,
    /// Failed requests.
    pub errors: u64,
    /// Connections opened.
    pub connections: u64,
    /// TLS handshakes completed.
    pub tls_handshakes: u64,
    /// Of which resumed.
    pub tls_resumed: u64,
    /// The cipher suite of the last TLS handshake (IANA name), if any.
    pub tls_suite: Option<String>,
    /// Response body bytes.
    pub body_bytes: u64,
    /// Responses with a `content-encoding`.
    pub encoded: u64,
    /// Latency of successful requests.
    pub latency: Latency,
    /// CPU time of the thread over the window.
    pub cpu: Duration,
}

/// Runs one thread's `conns` connection slots (users `first_user..`) to the end of the
/// window; `schedule` is its open-loop schedule, if any.
pub fn thread_main(
    shared: Arc<Shared>,
    conns: usize,
    first_user: usize,
    schedule: Option<Schedule>,
) -> io::Result<Stats> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let local_set = tokio::task::LocalSet::new();
    let window = shared.window;
    let endpoint = match &shared.quic {
        Some(quic) => {
            let _context = runtime.enter();
            Some(quic.endpoint(shared.target)?)
        }
        None => None,
    };
    let local = Rc::new(Local { shared, stats: RefCell::default(), schedule, next: Cell::new(0), endpoint });
    let cpu = local_set.block_on(&runtime, {
        let local = Rc::clone(&local);
        async move {
            tokio::time::sleep_until(window.start.into()).await;
            let cpu = tokio::task::spawn_local(async move {
                tokio::time::sleep_until(window.measure_start.into()).await;
                let before = thread_cpu();
                tokio::time::sleep_until(window.measure_end.into()).await;
                thread_cpu().saturating_sub(before)
            });
            let mut slots = JoinSet::new();
            for user in first_user..first_user + conns {
                slots.spawn_local(slot(Rc::clone(&local), user));
            }
            let _ =
                tokio::time::timeout_at(window.hard_end.into(), async { while slots.join_next().await.is_some() {} })
                    .await;
            slots.abort_all();
            if let Some(endpoint) = &local.endpoint {
                // Connections still open are closed; give the close frames a moment.
                endpoint.close(0u32.into(), b"done");
                let _ = timeout(ENDPOINT_CLOSE, endpoint.wait_idle()).await;
            }
            cpu.await.unwrap_or_default()
        }
    });
    drop(local_set);
    let mut stats = Rc::try_unwrap(local).map(|l| l.stats.into_inner()).unwrap_or_default();
    stats.cpu = cpu;
    Ok(stats)
}

/// A thread's state, shared by its slots.
struct Local {
    shared: Arc<Shared>,
    stats: RefCell<Stats>,
    schedule: Option<Schedule>,
    /// Next open-loop ticket.
    next: Cell<u64>,
    /// The thread's QUIC endpoint (HTTP/3 runs).
    endpoint: Option<quinn::Endpoint>,
}

impl Local {
    /// Waits for the next request's turn; returns the instant its latency is measured
    /// from, or `None` once the measured window is over.
    async fn ticket(&self) -> Option<Instant> {
        let now = Instant::now();
        let window = &self.shared.window;
        if now >= window.measure_end {
            return None;
        }
        let Some(schedule) = &self.schedule else { return Some(now) };
        let k = self.next.get();
        self.next.set(k + 1);
        let intended = window.start + schedule.intended(k);
        if intended >= window.measure_end {
            return None;
        }
        if intended <= now {
            // Late: every connection was busy. Charged from the intended time.
            return Some(intended);
        }
        tokio::time::sleep_until(intended.into()).await;
        Some(Instant::now().min(intended + TIMER_SLOP))
    }

    fn measured(&self, t: Instant) -> bool {
        let window = &self.shared.window;
        t >= window.measure_start && t < window.measure_end
    }

    fn success(&self, since: Instant, response: &http1::Response) {
        let now = Instant::now();
        if self.measured(now) {
            let mut stats = self.stats.borrow_mut();
            stats.requests += 1;
            stats.body_bytes += response.body_bytes;
            stats.encoded += u64::from(response.encoded);
            stats.latency.record(now.saturating_duration_since(since).as_micros() as u64);
        }
    }

    fn error(&self) {
        if self.measured(Instant::now()) {
            self.stats.borrow_mut().errors += 1;
        }
    }

    fn opened(&self) {
        if self.measured(Instant::now()) {
            self.stats.borrow_mut().connections += 1;
        }
    }

    fn handshake(&self, resumed: bool, suite: Option<rustls::SupportedCipherSuite>) {
        let mut stats = self.stats.borrow_mut();
        if stats.tls_suite.is_none() {
            stats.tls_suite = suite.and_then(|s| s.suite().as_str()).map(str::to_string);
        }
        if self.measured(Instant::now()) {
            stats.tls_handshakes += 1;
            stats.tls_resumed += u64::from(resumed);
        }
    }
}

/// What a connection's end asks of its slot.
enum Flow {
    /// Open a new connection and go on.
    Reconnect,
    /// The reused connection had been closed by the server before the request: retry
    /// the request (measured from this instant) on a new connection.
    Retry(Instant),
    /// The window is over.
    Stop,
}

/// A connection, plain or TLS.
enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// Opens a connection (and its TLS session), counting it.
async fn connect(local: &Local) -> io::Result<Stream> {
    let shared = &local.shared;
    let attempt = async {
        let tcp = TcpStream::connect(shared.target).await?;
        tcp.set_nodelay(true)?;
        local.opened();
        let Some((connector, name)) = &shared.tls else { return Ok(Stream::Plain(tcp)) };
        let tls = connector.connect(name.clone(), tcp).await?;
        let session = tls.get_ref().1;
        local.handshake(session.handshake_kind() == Some(HandshakeKind::Resumed), session.negotiated_cipher_suite());
        if shared.protocol == Protocol::Http2 && session.alpn_protocol() != Some(b"h2") {
            return Err(io::Error::other("the target did not negotiate h2"));
        }
        Ok(Stream::Tls(Box::new(tls)))
    };
    timeout(REQUEST_TIMEOUT, attempt).await.unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into()))
}

/// A user: its cookies and its place in the path rotation, kept across reconnects.
struct User {
    jar: RefCell<Jar>,
    path: Cell<usize>,
    paths: usize,
}

impl User {
    fn next_path(&self) -> usize {
        let p = self.path.get();
        self.path.set((p + 1) % self.paths);
        p
    }
}

/// One connection slot (one user) until the window is over.
async fn slot(local: Rc<Local>, user: usize) {
    let paths = local.shared.h1.paths();
    let user = Rc::new(User { jar: RefCell::default(), path: Cell::new(user % paths), paths });
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut scratch = Vec::new();
    let mut retry = None;
    loop {
        let since = match retry.take() {
            Some(since) => since,
            None => match local.ticket().await {
                Some(since) => since,
                None => return,
            },
        };
        if local.shared.protocol == Protocol::Http3 {
            match h3(&local, &user, since).await {
                Flow::Stop => return,
                _ => continue,
            }
        }
        let stream = match connect(&local).await {
            Ok(stream) => stream,
            Err(_) => {
                local.error();
                tokio::time::sleep(CONNECT_BACKOFF).await;
                continue;
            }
        };
        let flow = match (local.shared.protocol, stream) {
            (Protocol::Http1, Stream::Plain(mut io)) => h1(&local, &mut io, &user, &mut buf, &mut scratch, since).await,
            (Protocol::Http1, Stream::Tls(mut io)) => h1(&local, &mut *io, &user, &mut buf, &mut scratch, since).await,
            (Protocol::Http2, Stream::Plain(io)) => h2(&local, io, &user, since).await,
            (Protocol::Http2, Stream::Tls(io)) => h2(&local, *io, &user, since).await,
            // Handled above: QUIC has no TCP stream.
            (Protocol::Http3, _) => Flow::Stop,
        };
        match flow {
            Flow::Reconnect => {}
            Flow::Retry(since) => retry = Some(since),
            Flow::Stop => return,
        }
    }
}

/// HTTP/1.1 requests on one connection, the first measured from `since`.
async fn h1<S: AsyncRead + AsyncWrite + Unpin>(
    local: &Local,
    io: &mut S,
    user: &User,
    buf: &mut BytesMut,
    scratch: &mut Vec<u8>,
    mut since: Instant,
) -> Flow {
    let shared = &*local.shared;
    buf.clear();
    let mut jar = user.jar.take();
    let mut served = 0u32;
    let flow = loop {
        let request = shared.h1.render(user.next_path(), &jar, scratch);
        let cookies = shared.cookies.then_some(&mut jar);
        let result = timeout(REQUEST_TIMEOUT, http1::exchange(io, request, buf, cookies)).await;
        served += 1;
        match result {
            Ok(Ok(response)) if (200..400).contains(&response.status) => {
                local.success(since, &response);
                if response.close {
                    // The server closes: wait for its FIN before closing this side, as an
                    // HTTP client should, so that the TIME_WAIT stays on the server's side.
                    let _ = timeout(CLOSE_WAIT, until_eof(io, buf)).await;
                    break Flow::Reconnect;
                }
            }
            Ok(Err(Failure::Stale)) if served > 1 => break Flow::Retry(since),
            _ => {
                local.error();
                break Flow::Reconnect;
            }
        }
        if shared.per_connection.is_some_and(|n| served >= n) {
            break Flow::Reconnect;
        }
        match local.ticket().await {
            Some(next) => since = next,
            None => break Flow::Stop,
        }
    };
    user.jar.replace(jar);
    flow
}

/// Reads and discards until the peer closes (or the read fails).
async fn until_eof<S: AsyncRead + Unpin>(io: &mut S, buf: &mut BytesMut) {
    use tokio::io::AsyncReadExt;
    loop {
        buf.clear();
        match io.read_buf(buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// A connection's shared state between its HTTP/2 streams.
struct Multiplex {
    /// Requests the connection may still start (`None`: unlimited).
    budget: Cell<Option<u32>>,
    /// The first request's ticket (taken before connecting).
    first: Cell<Option<Instant>>,
    /// A request failed: start no more on this connection.
    broken: Cell<bool>,
    /// The window is over.
    stop: Cell<bool>,
    /// Requests answered successfully on this connection.
    answered: Cell<u32>,
}

impl Multiplex {
    fn take_budget(&self) -> bool {
        match self.budget.get() {
            None => true,
            Some(0) => false,
            Some(n) => {
                self.budget.set(Some(n - 1));
                true
            }
        }
    }
}

/// A connection's request sender, cloned into each of its stream loops: HTTP/2's
/// (`h2`) or HTTP/3's (`h3`).
trait Exchange: Clone + 'static {
    /// Sends `request` on a new stream and reads its response to the end.
    async fn exchange(&mut self, request: Request<()>, jar: Option<&RefCell<Jar>>) -> Option<http1::Response>;
}

impl Exchange for SendRequest<Bytes> {
    async fn exchange(&mut self, request: Request<()>, jar: Option<&RefCell<Jar>>) -> Option<http1::Response> {
        http2::exchange(self, request, jar).await.ok()
    }
}

impl Exchange for http3::Sender {
    async fn exchange(&mut self, request: Request<()>, jar: Option<&RefCell<Jar>>) -> Option<http1::Response> {
        http3::exchange(self, request, jar).await.ok()
    }
}

/// An HTTP/2 connection carrying up to [`H2_STREAMS_PER_CONNECTION`] concurrent requests.
async fn h2<S: AsyncRead + AsyncWrite + Unpin + 'static>(
    local: &Rc<Local>,
    io: S,
    user: &Rc<User>,
    since: Instant,
) -> Flow {
    let (send, connection) = match timeout(REQUEST_TIMEOUT, http2::handshake(io)).await {
        Ok(Ok(handshake)) => handshake,
        _ => {
            local.error();
            return Flow::Reconnect;
        }
    };
    let driver = tokio::task::spawn_local(async move {
        let _ = connection.await;
    });
    let mux = multiplex(local, send, user, since).await;
    driver.abort();
    settle(&mux).await
}

/// An HTTP/3 connection (QUIC handshake included) carrying up to
/// [`H2_STREAMS_PER_CONNECTION`] concurrent requests, closed when it is done.
async fn h3(local: &Rc<Local>, user: &Rc<User>, since: Instant) -> Flow {
    let shared = &*local.shared;
    let (Some(quic), Some(endpoint)) = (&shared.quic, &local.endpoint) else { return Flow::Stop };
    let (connection, mut driver, send) = match timeout(REQUEST_TIMEOUT, quic.connect(endpoint, shared.target)).await {
        Ok(Ok(connected)) => connected,
        _ => {
            local.error();
            tokio::time::sleep(CONNECT_BACKOFF).await;
            return Flow::Reconnect;
        }
    };
    // Counted once the handshake is done (QUIC has no connect apart from it). quinn does
    // not tell a resumed handshake from a full one; the suite's HTTP/3 runs resume none.
    local.opened();
    local.handshake(false, None);
    let driver = tokio::task::spawn_local(async move {
        let _ = driver.wait_idle().await;
    });
    let mux = multiplex(local, send, user, since).await;
    http3::close(&connection);
    driver.abort();
    settle(&mux).await
}

/// Runs a connection's [`H2_STREAMS_PER_CONNECTION`] stream loops over `send` until the
/// connection breaks, its request budget is spent or the window is over.
async fn multiplex<E: Exchange>(local: &Rc<Local>, send: E, user: &Rc<User>, since: Instant) -> Rc<Multiplex> {
    let mux = Rc::new(Multiplex {
        budget: Cell::new(local.shared.per_connection),
        first: Cell::new(Some(since)),
        broken: Cell::new(false),
        stop: Cell::new(false),
        answered: Cell::new(0),
    });
    let mut streams = JoinSet::new();
    for _ in 0..H2_STREAMS_PER_CONNECTION {
        streams.spawn_local(mux_stream(Rc::clone(local), send.clone(), Rc::clone(user), Rc::clone(&mux)));
    }
    drop(send);
    while streams.join_next().await.is_some() {}
    mux
}

/// What a multiplexed connection's end asks of its slot.
async fn settle(mux: &Multiplex) -> Flow {
    if mux.broken.get() && mux.answered.get() == 0 {
        // Nothing works on this target (e.g. it does not speak the protocol): do not spin.
        tokio::time::sleep(CONNECT_BACKOFF).await;
    }
    if mux.stop.get() {
        Flow::Stop
    } else {
        Flow::Reconnect
    }
}

/// One stream loop of a multiplexed connection: requests one after another.
async fn mux_stream<E: Exchange>(local: Rc<Local>, mut send: E, user: Rc<User>, mux: Rc<Multiplex>) {
    let shared = &*local.shared;
    while !mux.broken.get() && !mux.stop.get() && mux.take_budget() {
        let since = match mux.first.take() {
            Some(since) => since,
            None => match local.ticket().await {
                Some(since) => since,
                None => {
                    mux.stop.set(true);
                    return;
                }
            },
        };
        let request = shared.h2.build(user.next_path(), &user.jar.borrow());
        let cookies = shared.cookies.then_some(&user.jar);
        match timeout(REQUEST_TIMEOUT, send.exchange(request, cookies)).await {
            Ok(Some(response)) if (200..400).contains(&response.status) => {
                mux.answered.set(mux.answered.get() + 1);
                local.success(since, &response);
            }
            _ => {
                local.error();
                mux.broken.set(true);
            }
        }
    }
}
