//! Active health probes of pool servers (UDP "send and expect").
//!
//! One prober thread, with its own current-thread runtime, wakes every
//! ~100 ms, reads the current generation and starts the probes that are due:
//! a fresh connected UDP socket sends the pool's `send` payload to the server
//! (or to the check's `port`) and waits up to `timeout` for a reply holding
//! `expect`. `rise` consecutive successes mark a down server up, `fall`
//! consecutive failures mark an up server down; the verdict is written to
//! [`ServerLive::set_healthy`](crate::live::ServerLive::set_healthy), which
//! balancing reads.
//!
//! Invariants: probe state is keyed by (pool name, server name), so a reload
//! keeps it, and it is reset when the probed address changes; at most one
//! probe per server is in flight; a pool without a check has all its servers
//! healthy (a removed check never leaves a server down).

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use switchyard_config::{CheckKind, HealthCheck};
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, watch};

use crate::live::Generation;

/// How often the prober looks for due probes.
const TICK: Duration = Duration::from_millis(100);

/// Why a probe failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// No reply within the timeout.
    Timeout,
    /// A reply that does not contain `expect`.
    UnexpectedReply,
    /// The datagram could not be sent.
    SendFailed(String),
    /// Receiving failed (e.g. an ICMP port unreachable).
    ReceiveFailed(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Timeout => f.write_str("timeout"),
            Failure::UnexpectedReply => f.write_str("unexpected reply"),
            Failure::SendFailed(e) => write!(f, "send failed: {e}"),
            Failure::ReceiveFailed(e) => write!(f, "receive failed: {e}"),
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
}

/// A probe to run.
#[derive(Debug)]
struct Job {
    key: (String, String),
    target: SocketAddr,
    check: HealthCheck,
}

/// A finished probe.
type Outcome = ((String, String), SocketAddr, Result<(), Failure>);

/// Probe states of every probed server, and the jitter PRNG.
#[derive(Debug)]
struct Prober {
    states: HashMap<(String, String), ProbeState>,
    rng: u64,
}

impl Prober {
    fn new(seed: u64) -> Self {
        Prober { states: HashMap::new(), rng: seed | 1 }
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

    /// Syncs states with `gen` and returns the probes due at `now`.
    fn due(&mut self, gen: &Generation, now: Instant) -> Vec<Job> {
        let mut jobs = Vec::new();
        let mut seen = HashSet::new();
        for (p, pool) in gen.config.pools.iter().enumerate() {
            let Some(live) = gen.pools.get(p) else { continue };
            let Some(check) = &pool.health_check else {
                live.servers.iter().filter(|s| !s.healthy()).for_each(|s| s.set_healthy(true));
                continue;
            };
            for server in &live.servers {
                let key = (pool.name.clone(), server.name.to_string());
                let target = SocketAddr::new(server.addr.ip(), check.port.unwrap_or(server.addr.port()));
                let first = now + check.interval.mul_f64(self.unit());
                let state = self.states.entry(key.clone()).or_insert_with(|| ProbeState {
                    verdict: Verdict::default(),
                    target,
                    next: first,
                    in_flight: false,
                });
                if state.target != target {
                    *state = ProbeState { verdict: Verdict::default(), target, next: now, in_flight: false };
                }
                server.set_healthy(state.verdict.healthy);
                if !state.in_flight && state.next <= now {
                    state.in_flight = true;
                    jobs.push(Job { key: key.clone(), target, check: check.clone() });
                }
                seen.insert(key);
            }
        }
        self.states.retain(|key, _| seen.contains(key));
        jobs
    }

    /// Applies a finished probe; the server's live flag follows at once.
    fn finish(&mut self, gen: &Generation, (key, target, result): Outcome, now: Instant) {
        let Some(p) = gen.pool_index(&key.0) else { return };
        let Some(check) = gen.config.pools[p].health_check.as_ref() else { return };
        let next = now + self.jittered(check.interval);
        let Some(state) = self.states.get_mut(&key) else { return };
        if state.target != target {
            return;
        }
        state.in_flight = false;
        state.next = next;
        let flipped = state.verdict.record(result.is_ok(), check.rise, check.fall);
        let healthy = state.verdict.healthy;
        if let Some(server) = gen.pools[p].server_index(&key.1).map(|s| &gen.pools[p].servers[s]) {
            server.set_healthy(healthy);
        }
        match (flipped, result) {
            (Some(false), Err(reason)) => {
                tracing::warn!(pool = key.0, server = key.1, %target, %reason, "server down: health check failed")
            }
            (Some(true), _) => tracing::info!(pool = key.0, server = key.1, %target, "server up: health check passed"),
            _ => {}
        }
    }
}

/// Sends `send` to `target` and waits up to `timeout` for a reply holding `expect`.
async fn probe(target: SocketAddr, check: &HealthCheck) -> Result<(), Failure> {
    let CheckKind::Udp { send, expect } = &check.kind;
    let local: SocketAddr = if target.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { ([0u16; 8], 0).into() };
    let socket = UdpSocket::bind(local).await.map_err(|e| Failure::SendFailed(e.to_string()))?;
    socket.connect(target).await.map_err(|e| Failure::SendFailed(e.to_string()))?;
    socket.send(send).await.map_err(|e| Failure::SendFailed(e.to_string()))?;
    let mut buf = vec![0u8; 65_536];
    let n = match tokio::time::timeout(check.timeout, socket.recv(&mut buf)).await {
        Err(_) => return Err(Failure::Timeout),
        Ok(Err(e)) => return Err(Failure::ReceiveFailed(e.to_string())),
        Ok(Ok(n)) => n,
    };
    let reply = buf.get(..n).unwrap_or_default();
    match expect {
        Some(e) if !reply.windows(e.len()).any(|w| w == e.as_slice()) => Err(Failure::UnexpectedReply),
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
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.wait_for(|stopped| *stopped) => return,
            _ = ticker.tick() => {
                let Some(gen) = generation() else { return };
                for job in prober.due(&gen, Instant::now()) {
                    let tx = tx.clone();
                    tokio::spawn(async move {
                        let result = probe(job.target, &job.check).await;
                        let _ = tx.send((job.key, job.target, result));
                    });
                }
            }
            Some(outcome) = results.recv() => {
                let Some(gen) = generation() else { return };
                prober.finish(&gen, outcome, Instant::now());
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
