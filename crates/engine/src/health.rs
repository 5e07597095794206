//! Active health probes of pool servers: TCP connect, TLS handshake, HTTP
//! request, gRPC health call ([`grpc`]), UDP "send and expect".
//!
//! One prober thread per process (not per worker), with its own
//! current-thread runtime, wakes when the next probe is due (and at least
//! every 100 ms, to see a reload), reads the current generation and starts
//! the probes that are due, each against the server's
//! `check_address`, else its address with the check's `port`, within the
//! check's `timeout` ([`probe`](self) per kind below). `rise` consecutive
//! successes mark a down server up, `fall` consecutive failures mark an up
//! server down; the verdict is written to
//! [`ServerLive::set_healthy`](crate::live::ServerLive::set_healthy), which
//! balancing reads, and each flip is logged with its reason.
//!
//! Invariants: probe state is keyed by (pool name, server name), so a reload
//! keeps it, and it is reset when the probed address changes; at most one
//! probe per server is in flight; a pool without a check has all its servers
//! healthy (a removed check never leaves a server down); a passive ejection
//! (see [`ServerLive::observe`](crate::live::ServerLive::observe)) resets
//! the verdict to down, so an ejected server comes back through `rise`
//! passing checks.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use switchyard_config::{CheckKind, HealthCheck, HttpCheck, Pool, UpstreamProtocol, UpstreamTls};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::sync::{mpsc, watch};

use crate::live::Generation;
use crate::upstream::tls::PoolTls;

mod grpc;

/// Longest sleep of the prober: how soon it sees a reload's new pools and
/// checks. Otherwise it wakes when the next probe is due.
const TICK: Duration = Duration::from_millis(100);
/// Most bytes of an HTTP check's response read (head and body).
const MAX_RESPONSE: usize = 64 * 1024;

/// Why a probe failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// No reply (or no connection, handshake or response) within the timeout.
    Timeout,
    /// A reply that does not contain `expect`.
    UnexpectedReply,
    /// The datagram could not be sent.
    SendFailed(String),
    /// Receiving failed (e.g. an ICMP port unreachable).
    ReceiveFailed(String),
    /// The TCP connection was refused.
    Refused,
    /// The TCP connection failed otherwise.
    ConnectFailed(String),
    /// The TLS handshake failed.
    Tls(String),
    /// The server closed or reset the connection before a full response.
    Closed,
    /// The response is not HTTP/1.x.
    BadResponse,
    /// An HTTP status outside `expect_status`.
    Status(u16),
    /// The HTTP body does not contain `expect_body`.
    BodyMismatch,
    /// The HTTP/2 connection or stream failed (gRPC checks).
    Http2(String),
    /// A gRPC answer with a non-zero `grpc-status`.
    GrpcStatus(u32),
    /// A gRPC answer without `grpc-status` (trailers lost or missing).
    NoGrpcStatus,
    /// A health answer whose status is not `SERVING` (its protobuf value).
    NotServing(u64),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Timeout => f.write_str("timeout"),
            Failure::UnexpectedReply => f.write_str("unexpected reply"),
            Failure::SendFailed(e) => write!(f, "send failed: {e}"),
            Failure::ReceiveFailed(e) => write!(f, "receive failed: {e}"),
            Failure::Refused => f.write_str("connection refused"),
            Failure::ConnectFailed(e) => write!(f, "connect failed: {e}"),
            Failure::Tls(e) => write!(f, "TLS handshake failed: {e}"),
            Failure::Closed => f.write_str("closed before a full response"),
            Failure::BadResponse => f.write_str("not an HTTP response"),
            Failure::Status(s) => write!(f, "status {s}"),
            Failure::BodyMismatch => f.write_str("body mismatch"),
            Failure::Http2(e) => write!(f, "HTTP/2 failed: {e}"),
            Failure::GrpcStatus(s) => write!(f, "grpc-status {s}"),
            Failure::NoGrpcStatus => f.write_str("no grpc-status"),
            Failure::NotServing(2) => f.write_str("NOT_SERVING"),
            Failure::NotServing(0) => f.write_str("health status UNKNOWN"),
            Failure::NotServing(3) => f.write_str("health status SERVICE_UNKNOWN"),
            Failure::NotServing(s) => write!(f, "health status {s}"),
        }
    }
}

/// The rise/fall state of one server's probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The current judgement.
    pub healthy: bool,
    /// Consecutive results contradicting `healthy`.
    streak: u32,
}

impl Default for Verdict {
    fn default() -> Self {
        Verdict { healthy: true, streak: 0 }
    }
}

impl Verdict {
    /// Records one probe result; returns the new judgement when it flips.
    pub fn record(&mut self, ok: bool, rise: u32, fall: u32) -> Option<bool> {
        if ok == self.healthy {
            self.streak = 0;
            return None;
        }
        self.streak += 1;
        let needed = if self.healthy { fall } else { rise };
        if self.streak < needed.max(1) {
            return None;
        }
        self.healthy = ok;
        self.streak = 0;
        Some(ok)
    }
}

/// Per-server probe bookkeeping.
#[derive(Debug)]
struct ProbeState {
    verdict: Verdict,
    target: SocketAddr,
    next: Instant,
    in_flight: bool,
    /// The server's passive ejection count when last looked at.
    ejections: u32,
}

/// A probe to run.
#[derive(Debug)]
struct Job {
    key: (String, String),
    target: SocketAddr,
    check: HealthCheck,
    /// TLS for `tls` checks and `http` and `grpc` checks of pools with `tls`,
    /// with the server's index in its pool (for the name it verifies).
    tls: Option<(PoolTls, usize)>,
}

/// A finished probe.
type Outcome = ((String, String), SocketAddr, Result<(), Failure>);

/// Probe states of every probed server, and the jitter PRNG.
#[derive(Debug)]
struct Prober {
    states: HashMap<(String, String), ProbeState>,
    /// TLS client sides of checks, per pool, with the settings and protocol
    /// (ALPN) they were built from.
    tls: HashMap<String, (UpstreamTls, UpstreamProtocol, PoolTls)>,
    rng: u64,
}

impl Prober {
    fn new(seed: u64) -> Self {
        Prober { states: HashMap::new(), tls: HashMap::new(), rng: seed | 1 }
    }

    /// The TLS side of `pool`'s check: its own `tls` settings (offering
    /// HTTP/1.1 for an `http` check, `h2` for a `grpc` one), or none verified
    /// for a `tls` check of a clear-text pool; `None` for clear-text checks.
    /// Kept while the settings stay, so sessions resume.
    fn check_tls(&mut self, pool: &Pool, check: &HealthCheck) -> Option<PoolTls> {
        let settings = match (&check.kind, &pool.tls) {
            (CheckKind::Tls, None) => UpstreamTls { verify: false, ca: None, server_name: None, client_cert: None },
            (CheckKind::Tls | CheckKind::Http(_) | CheckKind::Grpc(_), Some(tls)) => tls.clone(),
            _ => return None,
        };
        let protocol =
            if matches!(check.kind, CheckKind::Grpc(_)) { UpstreamProtocol::Http2 } else { UpstreamProtocol::Http1 };
        if let Some((kept, kept_protocol, tls)) = self.tls.get(&pool.name) {
            if *kept == settings && *kept_protocol == protocol {
                return Some(tls.clone());
            }
        }
        let for_check = Pool { tls: Some(settings.clone()), protocol, ..pool.clone() };
        match PoolTls::for_pool(&for_check, None) {
            Ok(Some(tls)) => {
                self.tls.insert(pool.name.clone(), (settings, protocol, tls.clone()));
                Some(tls)
            }
            Ok(None) => None,
            Err(e) => {
                tracing::error!(pool = %pool.name, error = %e, "health check: cannot set up TLS");
                None
            }
        }
    }

    /// A uniform number in [0, 1) (xorshift64).
    fn unit(&mut self) -> f64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `interval` ± 10 %.
    fn jittered(&mut self, interval: Duration) -> Duration {
        interval.mul_f64(0.9 + 0.2 * self.unit())
    }

    /// Syncs states with `gen` and returns the probes due at `now`, with the
    /// time the next one not yet started is due.
    fn due(&mut self, gen: &Generation, now: Instant) -> (Vec<Job>, Option<Instant>) {
        let mut jobs = Vec::new();
        let mut seen = HashSet::new();
        for (p, pool) in gen.config.pools.iter().enumerate() {
            let Some(live) = gen.pools.get(p) else { continue };
            let Some(check) = &pool.health_check else {
                live.servers.iter().filter(|s| !s.healthy()).for_each(|s| s.set_healthy(true));
                continue;
            };
            let tls = self.check_tls(pool, check);
            for (i, server) in live.servers.iter().enumerate() {
                let key = (pool.name.clone(), server.name.to_string());
                let configured = pool.servers.get(i).and_then(|s| s.check_addr);
                let target = configured
                    .unwrap_or_else(|| SocketAddr::new(server.addr.ip(), check.port.unwrap_or(server.addr.port())));
                let first = now + check.interval.mul_f64(self.unit());
                let ejections = server.ejections();
                let fresh =
                    |next| ProbeState { verdict: Verdict::default(), target, next, in_flight: false, ejections };
                let state = self.states.entry(key.clone()).or_insert_with(|| fresh(first));
                if state.target != target {
                    *state = fresh(now);
                }
                if state.ejections != ejections {
                    // Passive checking ejected it: back only through `rise` passing checks.
                    state.ejections = ejections;
                    state.verdict = Verdict { healthy: false, streak: 0 };
                }
                server.set_healthy(state.verdict.healthy);
                if !state.in_flight && state.next <= now {
                    state.in_flight = true;
                    let tls = tls.clone().map(|t| (t, i));
                    jobs.push(Job { key: key.clone(), target, check: check.clone(), tls });
                }
                seen.insert(key);
            }
        }
        self.states.retain(|key, _| seen.contains(key));
        self.tls.retain(|pool, _| seen.iter().any(|(p, _)| p == pool));
        let next = self.states.values().filter(|s| !s.in_flight).map(|s| s.next).min();
        (jobs, next)
    }

    /// Applies a finished probe; the server's live flag follows at once, after
    /// the log line of a transition.
    /// Returns when the server's next probe is due.
    fn finish(&mut self, gen: &Generation, (key, target, result): Outcome, now: Instant) -> Option<Instant> {
        let p = gen.pool_index(&key.0)?;
        let check = gen.config.pools[p].health_check.as_ref()?;
        let next = now + self.jittered(check.interval);
        let state = self.states.get_mut(&key)?;
        if state.target != target {
            return None;
        }
        state.in_flight = false;
        state.next = next;
        let flipped = state.verdict.record(result.is_ok(), check.rise, check.fall);
        let healthy = state.verdict.healthy;
        // Logged before the flag flips: whoever sees the new state (the admin
        // API, another worker) finds the line that explains it.
        match (flipped, result) {
            (Some(false), Err(reason)) => {
                tracing::warn!(pool = key.0, server = key.1, %target, %reason, "server down: health check failed")
            }
            (Some(true), _) => tracing::info!(pool = key.0, server = key.1, %target, "server up: health check passed"),
            (None, Err(reason)) => {
                tracing::debug!(pool = key.0, server = key.1, %target, %reason, "health check failed")
            }
            _ => {}
        }
        if let Some(server) = gen.pools[p].server_index(&key.1).map(|s| &gen.pools[p].servers[s]) {
            server.set_healthy(healthy);
        }
        Some(next)
    }
}

/// Runs one probe of `job` within its check's timeout.
async fn probe(job: &Job) -> Result<(), Failure> {
    let check = &job.check;
    let run = async {
        match &check.kind {
            CheckKind::Udp { send, expect } => udp(job.target, send, expect.as_deref(), check.timeout).await,
            CheckKind::Tcp => connect(job.target).await.map(drop),
            CheckKind::Tls => {
                let tcp = connect(job.target).await?;
                let Some((tls, server)) = &job.tls else { return Err(Failure::Tls("no TLS set up".into())) };
                let mut stream = tls.handshake(*server, tcp).await.map_err(|e| Failure::Tls(e.to_string()))?;
                let _ = stream.shutdown().await;
                Ok(())
            }
            CheckKind::Http(http) => {
                let tcp = connect(job.target).await?;
                match &job.tls {
                    None => http_exchange(tcp, http, job.target).await,
                    Some((tls, server)) => {
                        let stream = tls.handshake(*server, tcp).await.map_err(|e| Failure::Tls(e.to_string()))?;
                        http_exchange(stream, http, job.target).await
                    }
                }
            }
            CheckKind::Grpc(grpc) => {
                let tcp = connect(job.target).await?;
                let authority = job.target.to_string();
                match &job.tls {
                    None => grpc::check(tcp, &authority, &grpc.service).await,
                    Some((tls, server)) => {
                        let stream = tls.handshake(*server, tcp).await.map_err(|e| Failure::Tls(e.to_string()))?;
                        if stream.get_ref().1.alpn_protocol() != Some(b"h2") {
                            return Err(Failure::Tls("the server did not select ALPN h2".into()));
                        }
                        grpc::check(stream, &authority, &grpc.service).await
                    }
                }
            }
        }
    };
    tokio::time::timeout(check.timeout, run).await.unwrap_or(Err(Failure::Timeout))
}

/// A TCP connection to `target`.
async fn connect(target: SocketAddr) -> Result<TcpStream, Failure> {
    TcpStream::connect(target).await.map_err(|e| match e.kind() {
        std::io::ErrorKind::ConnectionRefused => Failure::Refused,
        _ => Failure::ConnectFailed(e.to_string()),
    })
}

/// Sends the check's request (`Connection: close`) and judges the response
/// read until the server closes, the body's `Content-Length` is in, or
/// [`MAX_RESPONSE`] bytes.
async fn http_exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    check: &HttpCheck,
    target: SocketAddr,
) -> Result<(), Failure> {
    let host = check.host.clone().unwrap_or_else(|| target.to_string());
    let request = format!(
        "{} {} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: switchyard-health-check\r\nAccept: */*\r\nConnection: close\r\n\r\n",
        check.method, check.path
    );
    stream.write_all(request.as_bytes()).await.map_err(|_| Failure::Closed)?;
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 8192];
    loop {
        let n = match stream.read(&mut chunk).await {
            Ok(n) => n,
            // A TLS server that closes without close_notify still gave its whole response.
            Err(_) if !buf.is_empty() => 0,
            Err(_) => return Err(Failure::Closed),
        };
        buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
        match judge(&buf, check, n == 0 || buf.len() >= MAX_RESPONSE) {
            Some(verdict) => return verdict,
            None if n == 0 => return Err(Failure::Closed),
            None => {}
        }
    }
}

/// The verdict on the response bytes so far, or `None` when more are needed.
/// `complete`: nothing more will come.
fn judge(buf: &[u8], check: &HttpCheck, complete: bool) -> Option<Result<(), Failure>> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut response = httparse::Response::new(&mut headers);
    let head_len = match response.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if !complete => return None,
        _ => return Some(Err(if buf.is_empty() { Failure::Closed } else { Failure::BadResponse })),
    };
    let status = response.code.unwrap_or(0);
    if !check.accepts(status) {
        return Some(Err(Failure::Status(status)));
    }
    let Some(want) = &check.body else { return Some(Ok(())) };
    let body = buf.get(head_len..).unwrap_or_default();
    if memchr::memmem::find(body, want).is_some() {
        return Some(Ok(()));
    }
    let length = response.headers.iter().find(|h| h.name.eq_ignore_ascii_case("content-length"));
    let length = length.and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse::<usize>().ok());
    if complete || length.is_some_and(|len| body.len() >= len) {
        return Some(Err(Failure::BodyMismatch));
    }
    None
}

/// Sends `send` to `target` and waits up to `timeout` for a reply holding `expect`.
async fn udp(target: SocketAddr, send: &[u8], expect: Option<&[u8]>, timeout: Duration) -> Result<(), Failure> {
    let local: SocketAddr = if target.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { ([0u16; 8], 0).into() };
    let socket = UdpSocket::bind(local).await.map_err(|e| Failure::SendFailed(e.to_string()))?;
    socket.connect(target).await.map_err(|e| Failure::SendFailed(e.to_string()))?;
    socket.send(send).await.map_err(|e| Failure::SendFailed(e.to_string()))?;
    let mut buf = vec![0u8; 65_536];
    let n = match tokio::time::timeout(timeout, socket.recv(&mut buf)).await {
        Err(_) => return Err(Failure::Timeout),
        Ok(Err(e)) => return Err(Failure::ReceiveFailed(e.to_string())),
        Ok(Ok(n)) => n,
    };
    let reply = buf.get(..n).unwrap_or_default();
    match expect {
        Some(e) if !reply.windows(e.len()).any(|w| w == e) => Err(Failure::UnexpectedReply),
        _ => Ok(()),
    }
}

/// Starts the prober thread. `generation` returns the current generation,
/// or `None` once the engine is gone; the thread ends then or when `stop`
/// turns true.
pub fn spawn(
    generation: impl Fn() -> Option<Arc<Generation>> + Send + 'static,
    stop: watch::Receiver<bool>,
) -> std::io::Result<JoinHandle<()>> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    std::thread::Builder::new().name("switchyard-health".into()).spawn(move || runtime.block_on(run(generation, stop)))
}

async fn run(generation: impl Fn() -> Option<Arc<Generation>>, mut stop: watch::Receiver<bool>) {
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64);
    let mut prober = Prober::new(seed ^ u64::from(std::process::id()));
    let (tx, mut results) = mpsc::unbounded_channel::<Outcome>();
    // Probes start when due (not on a coarse tick: that would add up to a
    // tick per probe to the time a dead server takes to be marked down).
    let mut wake = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = stop.wait_for(|stopped| *stopped) => return,
            _ = tokio::time::sleep_until(wake) => {
                let Some(gen) = generation() else { return };
                let now = Instant::now();
                let (jobs, next) = prober.due(&gen, now);
                for job in jobs {
                    let tx = tx.clone();
                    tokio::spawn(async move {
                        let result = probe(&job).await;
                        let _ = tx.send((job.key, job.target, result));
                    });
                }
                let sleep = next.map_or(TICK, |next| next.saturating_duration_since(now).min(TICK));
                wake = tokio::time::Instant::from_std(now + sleep);
            }
            Some(outcome) = results.recv() => {
                let Some(gen) = generation() else { return };
                if let Some(next) = prober.finish(&gen, outcome, Instant::now()) {
                    wake = wake.min(tokio::time::Instant::from_std(next));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fall_failures_in_a_row_take_a_server_down() {
        let mut v = Verdict::default();
        assert_eq!(v.record(false, 2, 3), None);
        assert_eq!(v.record(false, 2, 3), None);
        assert_eq!(v.record(false, 2, 3), Some(false));
        assert!(!v.healthy);
        assert_eq!(v.record(false, 2, 3), None, "already down");
    }

    #[test]
    fn a_success_resets_the_failure_streak() {
        let mut v = Verdict::default();
        v.record(false, 2, 2);
        v.record(true, 2, 2);
        assert_eq!(v.record(false, 2, 2), None);
        assert!(v.healthy);
        assert_eq!(v.record(false, 2, 2), Some(false));
    }

    #[test]
    fn rise_successes_in_a_row_bring_it_back() {
        let mut v = Verdict::default();
        v.record(false, 3, 1);
        assert!(!v.healthy);
        assert_eq!(v.record(true, 3, 1), None);
        assert_eq!(v.record(false, 3, 1), None, "a failure resets the rise streak");
        assert_eq!(v.record(true, 3, 1), None);
        assert_eq!(v.record(true, 3, 1), None);
        assert_eq!(v.record(true, 3, 1), Some(true));
        assert!(v.healthy);
    }

    #[test]
    fn jitter_stays_within_ten_percent() {
        let mut p = Prober::new(42);
        for _ in 0..1000 {
            let d = p.jittered(Duration::from_secs(2));
            assert!(d >= Duration::from_millis(1800) && d <= Duration::from_millis(2200), "{d:?}");
        }
    }

    #[test]
    fn failures_name_their_reason() {
        assert_eq!(Failure::Timeout.to_string(), "timeout");
        assert_eq!(Failure::UnexpectedReply.to_string(), "unexpected reply");
        assert_eq!(Failure::SendFailed("no route".into()).to_string(), "send failed: no route");
    }
}
