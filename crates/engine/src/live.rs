//! Live state shared by every worker: the configuration generation being
//! served and the per-server state that outlives reloads.
//!
//! A [`Generation`] is immutable once built: a validated configuration plus
//! the shared live objects its pools point at. A reload builds a new
//! generation that *reuses* the live objects of servers that still exist
//! (matched by pool name and server name, at the same address), so in-flight
//! counts, the operator's drain/maintenance/weight decisions and counters
//! survive it. Requests already running keep the generation they started
//! with; the next request on a connection uses the new one.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

use switchyard_config::{Algorithm, Config, Mode, Passive, Pool, Server, Service};

use switchyard_balance::cookie::CookieKey;
use switchyard_balance::ServerState;

use crate::access_log::AccessLog;
use crate::metrics::{ServerMetrics, ServiceMetrics, TlsMetrics};
use crate::persist::PoolPersistence;
use crate::tls::{Terminator, TlsError};
use crate::upstream::queue::PoolQueue;
use crate::upstream::tls::{PoolTls, TlsSetupError};

/// Why a generation could not be built: TLS material or settings rustls
/// refuses (validation checked the files, so this is rare). Nothing changes.
#[derive(Debug, thiserror::Error)]
pub enum GenerationError {
    /// A service's TLS termination.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// A pool's TLS towards its servers.
    #[error(transparent)]
    UpstreamTls(#[from] TlsSetupError),
}

/// What the operator decided for a server (health checks add "down" later).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminState {
    /// Takes new requests.
    Up,
    /// Takes no new requests; requests already running finish.
    Draining,
    /// Takes nothing new, and its idle pooled connections are closed.
    Maintenance,
}

impl AdminState {
    /// The name used by the admin API, logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            AdminState::Up => "up",
            AdminState::Draining => "draining",
            AdminState::Maintenance => "maintenance",
        }
    }

    fn from_u8(v: u8) -> Self {
        match v {
            1 => AdminState::Draining,
            2 => AdminState::Maintenance,
            _ => AdminState::Up,
        }
    }

    fn to_u8(self) -> u8 {
        match self {
            AdminState::Up => 0,
            AdminState::Draining => 1,
            AdminState::Maintenance => 2,
        }
    }
}

/// Shared, live state of one server, carried across reloads while the
/// server keeps its pool, name and address.
#[derive(Debug)]
pub struct ServerLive {
    /// Server name (unique within its pool).
    pub name: Arc<str>,
    /// Address connected to.
    pub addr: SocketAddr,
    /// Requests in flight towards the server, across all workers, kept only
    /// while `shared` says a pick needs the sum at once ([`ActiveGuard`]);
    /// the count to show is [`ServerLive::in_flight`].
    pub active: AtomicU32,
    /// Whether `active` is kept: the server has a `max_connections`, or its
    /// pool is balanced by load (set by each generation, [`PoolLive::new`]).
    shared: AtomicBool,
    state: AtomicU8,
    /// Whether the pool's health probe last judged the server up; always
    /// true for a pool without a probe.
    healthy: AtomicBool,
    /// Consecutive failures seen by passive checking (real traffic).
    failures: AtomicU32,
    /// Passive ejection: a [`stamp`] until which the server takes nothing
    /// new; 0 when not ejected.
    ejected_until: AtomicU64,
    /// Passive ejections so far; the prober resets its verdict when it moves.
    ejections: AtomicU32,
    /// Slow start: the [`stamp`] from which the weight ramps; 0 when full.
    ramp_from: AtomicU64,
    /// Effective weight: the configured one unless the operator changed it.
    weight: AtomicU32,
    /// The weight the configuration gave, to tell an operator's override
    /// from a configuration change on reload.
    configured: AtomicU32,
    /// Request counters and latencies, per worker.
    pub metrics: ServerMetrics,
    /// The queue of the server's pool, woken when a slot here is released.
    pub queue: Arc<PoolQueue>,
}

impl ServerLive {
    /// Fresh live state for a configured server served by `workers` workers,
    /// in the pool whose queue is `queue`.
    pub fn new(server: &Server, workers: usize, queue: Arc<PoolQueue>) -> Self {
        ServerLive {
            name: Arc::from(server.name.as_str()),
            addr: server.addr,
            active: AtomicU32::new(0),
            shared: AtomicBool::new(false),
            state: AtomicU8::new(AdminState::Up.to_u8()),
            healthy: AtomicBool::new(true),
            failures: AtomicU32::new(0),
            ejected_until: AtomicU64::new(0),
            ejections: AtomicU32::new(0),
            ramp_from: AtomicU64::new(0),
            weight: AtomicU32::new(server.weight),
            configured: AtomicU32::new(server.weight),
            metrics: ServerMetrics::new(workers),
            queue,
        }
    }

    /// The operator's state for this server.
    pub fn state(&self) -> AdminState {
        AdminState::from_u8(self.state.load(Ordering::Relaxed))
    }

    /// Changes the operator's state.
    pub fn set_state(&self, state: AdminState) {
        self.state.store(state.to_u8(), Ordering::Relaxed);
    }

    /// Whether the health probe judges the server up (true without a probe).
    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// Records the health probe's verdict; a server coming back starts its
    /// slow start.
    pub fn set_healthy(&self, healthy: bool) {
        if self.healthy.load(Ordering::Relaxed) == healthy {
            return;
        }
        if !self.healthy.swap(healthy, Ordering::Relaxed) && healthy {
            self.start_ramp();
        }
    }

    /// The state shown to operators: "down" when the probe failed it or
    /// passive checking ejected it, otherwise the operator's state.
    pub fn status(&self) -> &'static str {
        if self.healthy() && !self.ejected() {
            self.state().as_str()
        } else {
            "down"
        }
    }

    /// Whether passive checking holds the server out now. The first caller
    /// after the ejection ends clears it (and starts the slow start when the
    /// active check, if any, passes).
    pub fn ejected(&self) -> bool {
        let until = self.ejected_until.load(Ordering::Relaxed);
        if until == 0 {
            return false;
        }
        if stamp() < until {
            return true;
        }
        let cleared = self.ejected_until.compare_exchange(until, 0, Ordering::Relaxed, Ordering::Relaxed).is_ok();
        if cleared && self.healthy() {
            self.start_ramp();
            tracing::info!(server = %self.name, addr = %self.addr, "server back: passive ejection over");
        }
        false
    }

    /// Passive ejections so far.
    pub fn ejections(&self) -> u32 {
        self.ejections.load(Ordering::Relaxed)
    }

    /// Records what one exchange with the server said about it: `ok`
    /// resets the failure streak, `failures` failures in a row eject it for
    /// `eject`. Returns whether this call ejected it.
    pub fn observe(&self, passive: Option<&Passive>, ok: bool, why: &str) -> bool {
        let Some(passive) = passive else { return false };
        if ok {
            if self.failures.load(Ordering::Relaxed) != 0 {
                self.failures.store(0, Ordering::Relaxed);
            }
            return false;
        }
        if self.failures.fetch_add(1, Ordering::Relaxed) + 1 < passive.failures {
            return false;
        }
        self.failures.store(0, Ordering::Relaxed);
        let now = stamp();
        let before = self.ejected_until.load(Ordering::Relaxed);
        // Failures of requests still in flight do not extend an ejection;
        // one that is over (if not yet cleared by a pick) does not stop a
        // new one, which counts, so the prober resets its verdict again.
        if before > now {
            return false;
        }
        let until = now.saturating_add(nanos(passive.eject));
        if self.ejected_until.compare_exchange(before, until, Ordering::Relaxed, Ordering::Relaxed).is_err() {
            return false; // another worker ejected it just now
        }
        self.ejections.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            server = %self.name,
            addr = %self.addr,
            reason = why,
            failures = passive.failures,
            eject = ?passive.eject,
            "server down: ejected by passive check"
        );
        true
    }

    /// Starts the slow start ramp now.
    pub fn start_ramp(&self) {
        self.ramp_from.store(stamp(), Ordering::Relaxed);
    }

    /// The share of its weight the server gets now under a slow start of
    /// `period`, in thousandths (1..=1000); 1000 when not ramping. Reads the
    /// clock only while ramping.
    pub fn ramp(&self, period: Duration) -> u32 {
        if period.is_zero() {
            return switchyard_balance::FULL_RAMP;
        }
        let from = self.ramp_from.load(Ordering::Relaxed);
        if from == 0 {
            return switchyard_balance::FULL_RAMP;
        }
        let permille = switchyard_balance::ramp_permille(Duration::from_nanos(stamp().saturating_sub(from)), period);
        if permille >= switchyard_balance::FULL_RAMP {
            let _ = self.ramp_from.compare_exchange(from, 0, Ordering::Relaxed, Ordering::Relaxed);
        }
        permille
    }

    /// The weight balancing gives the server now: its effective weight
    /// scaled by its slow start share under `period` (rounded up, so a
    /// ramping server with a non-zero weight shows at least 1).
    pub fn ramped_weight(&self, period: Duration) -> u32 {
        let ramp = u64::from(self.ramp(period));
        let full = u64::from(switchyard_balance::FULL_RAMP);
        u32::try_from((u64::from(self.weight()) * ramp).div_ceil(full)).unwrap_or(u32::MAX)
    }

    /// Requests in flight towards the server, summed over the workers' own
    /// counts (what operators see).
    pub fn in_flight(&self) -> u32 {
        self.metrics.in_flight()
    }

    /// Keeps the count shared by the workers (`on`) or leaves it alone. Turned
    /// on, it starts from the requests in flight now, so a limit a reload
    /// added applies to them too (a slot taken while this runs may be off by
    /// one until it ends).
    pub fn share_count(&self, on: bool) {
        if on && !self.shared.load(Ordering::Relaxed) {
            self.active.store(self.in_flight(), Ordering::Relaxed);
        }
        self.shared.store(on, Ordering::Relaxed);
    }

    /// Whether new requests may go to this server.
    pub fn takes_new(&self) -> bool {
        self.state() == AdminState::Up
    }

    /// Effective weight.
    pub fn weight(&self) -> u32 {
        self.weight.load(Ordering::Relaxed)
    }

    /// Sets the effective weight (an operator's override).
    pub fn set_weight(&self, weight: u32) {
        self.weight.store(weight, Ordering::Relaxed);
    }

    /// The configured weight of the generation that last took this server.
    pub fn configured_weight(&self) -> u32 {
        self.configured.load(Ordering::Relaxed)
    }

    /// A reload kept this server: a changed configured weight replaces any
    /// override; an unchanged one keeps the operator's.
    fn adopt(&self, server: &Server) {
        let before = self.configured.swap(server.weight, Ordering::Relaxed);
        if before != server.weight {
            self.weight.store(server.weight, Ordering::Relaxed);
        }
    }
}

/// Whether a response status counts as a failure for passive checking: a
/// 5xx, except 501 and 505 (the server refuses the method or version of one
/// request, not a sign of trouble).
pub fn passive_failure_status(status: u16) -> bool {
    (500..600).contains(&status) && status != 501 && status != 505
}

/// Nanoseconds since the first call in this process, plus one (0 means
/// "none" in the stamps of [`ServerLive`]).
pub fn stamp() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    nanos(BASE.get_or_init(Instant::now).elapsed()).saturating_add(1)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The transport a listener speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Proto {
    /// TCP (modes http, https, tcp, tls-passthrough).
    Tcp,
    /// UDP (mode udp).
    Udp,
    /// QUIC on UDP (HTTP/3 of an `https` service with `http3`).
    Quic,
}

impl Proto {
    /// Every transport a service's listeners take: [`Proto::of`], and QUIC
    /// beside TCP for an `https` service with `http3`.
    pub fn all(service: &Service) -> impl Iterator<Item = Proto> {
        let quic = service.mode == Mode::Https && service.http3.enabled;
        std::iter::once(Proto::of(service)).chain(quic.then_some(Proto::Quic))
    }

    /// The transport of a service's listeners.
    pub fn of(service: &Service) -> Proto {
        if service.mode == Mode::Udp {
            Proto::Udp
        } else {
            Proto::Tcp
        }
    }
}

/// A service's count of open client connections, across workers, for its
/// `max_connections`; carried across reloads by service name.
#[derive(Debug, Default)]
pub struct Gate {
    /// Connections open now.
    pub open: AtomicU32,
    /// Woken when one closes, for accept loops waiting on a full service.
    pub freed: Notify,
}

/// The UDP flow counters of a service, one slot per worker (each worker
/// copies its flow table's counters in about once a second); summed on read.
#[derive(Debug)]
pub struct UdpBoard {
    slots: Vec<std::sync::Mutex<crate::relay::FlowStats>>,
}

impl UdpBoard {
    /// A board for `workers` workers.
    pub fn new(workers: usize) -> Self {
        UdpBoard { slots: (0..workers.max(1)).map(|_| std::sync::Mutex::default()).collect() }
    }

    /// Worker `w`'s latest counters.
    pub fn set(&self, w: usize, stats: crate::relay::FlowStats) {
        if let Some(slot) = self.slots.get(w) {
            *slot.lock().unwrap_or_else(|e| e.into_inner()) = stats;
        }
    }

    /// The counters summed over the workers.
    pub fn total(&self) -> crate::relay::FlowStats {
        let mut t = crate::relay::FlowStats::default();
        for slot in &self.slots {
            let s = *slot.lock().unwrap_or_else(|e| e.into_inner());
            t.active += s.active;
            t.created += s.created;
            t.expired += s.expired;
            t.refused += s.refused;
            t.dropped += s.dropped;
            t.datagrams_to_server += s.datagrams_to_server;
            t.bytes_to_server += s.bytes_to_server;
            t.datagrams_to_client += s.datagrams_to_client;
            t.bytes_to_client += s.bytes_to_client;
        }
        t
    }
}

/// The balancer's view of a pool at pick time: limits, plus servers already
/// tried for this request.
pub struct PickView<'a> {
    /// Pool configuration.
    pub pool: &'a Pool,
    /// Live state (in-flight counts, operator states).
    pub live: &'a PoolLive,
    /// Bit i set: server i was tried and failed for this request.
    pub tried: u64,
}

impl ServerState for PickView<'_> {
    fn is_available(&self, i: usize) -> bool {
        if i < 64 && self.tried & (1 << i) != 0 {
            return false;
        }
        let (Some(server), Some(live)) = (self.pool.servers.get(i), self.live.servers.get(i)) else {
            return false;
        };
        live.takes_new()
            && live.healthy()
            && !live.ejected()
            && server.max_connections.is_none_or(|max| live.active.load(Ordering::Relaxed) < max)
    }

    fn active(&self, i: usize) -> u32 {
        self.live.servers.get(i).map_or(0, |s| s.active.load(Ordering::Relaxed))
    }

    fn ramp(&self, i: usize) -> u32 {
        match (self.pool.servers.get(i), self.live.servers.get(i)) {
            (Some(server), Some(live)) => live.ramp(server.slow_start),
            _ => switchyard_balance::FULL_RAMP,
        }
    }
}

/// Holds one in-flight slot on a server; released on drop.
///
/// Every slot counts in its worker's own count (a line no other worker
/// writes). The count shared by all workers, whose every change moves a
/// cache line between cores, is kept only while the server's generation says
/// a pick needs the sum at once ([`ServerLive::share_count`]): a server with a
/// `max_connections`, or a pool balanced by load (`least-connections`,
/// `random-two`).
pub struct ActiveGuard<'a> {
    server: &'a ServerLive,
    worker: usize,
}

impl<'a> ActiveGuard<'a> {
    /// Worker `worker` takes a slot on `server` unless it already has `max`
    /// requests in flight.
    ///
    /// The balancer's look at the count and the taking are separate steps, and
    /// other workers take slots in between: only this check-and-increment in
    /// one atomic step keeps a server within its `max_connections`.
    pub fn take(server: &'a ServerLive, worker: usize, max: Option<u32>) -> Option<Self> {
        match max {
            Some(max) => {
                server
                    .active
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < max).then_some(n + 1))
                    .ok()?;
            }
            None if server.shared.load(Ordering::Relaxed) => {
                server.active.fetch_add(1, Ordering::Relaxed);
            }
            None => {}
        }
        server.metrics.in_flight_add(worker, 1);
        Some(ActiveGuard { server, worker })
    }
}

impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        let server = self.server;
        server.metrics.in_flight_add(self.worker, -1);
        // Kept now: this slot is in it (taken while it was kept, or counted
        // when it started being kept). Never below 0, whatever a reload raced.
        if server.shared.load(Ordering::Relaxed) {
            let _ = server.active.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| Some(n.saturating_sub(1)));
            // Only a server that can be full makes requests wait.
            server.queue.released();
        }
    }
}

/// Whether `pool`'s balancing method reads the servers' in-flight counts.
fn balances_by_load(pool: &Pool) -> bool {
    matches!(pool.algorithm, Algorithm::LeastConnections | Algorithm::RandomTwo)
}

/// Shared, live state of one pool in one generation.
#[derive(Debug)]
pub struct PoolLive {
    /// One entry per configured server, in config order.
    pub servers: Vec<Arc<ServerLive>>,
    /// Requests waiting for a connection slot; carried across reloads.
    pub queue: Arc<PoolQueue>,
}

impl PoolLive {
    /// Live state for `pool`, reusing the servers of `previous` that still
    /// exist with the same name and address.
    /// A server added to a pool that existed before starts its slow start.
    pub fn new(pool: &Pool, previous: Option<&PoolLive>, workers: usize) -> Self {
        let queue = previous.map_or_else(Arc::default, |p| p.queue.clone());
        let servers = pool
            .servers
            .iter()
            .map(|server| {
                let kept = previous
                    .and_then(|p| p.servers.iter().find(|live| *live.name == *server.name && live.addr == server.addr));
                let live = match kept {
                    Some(live) => {
                        live.adopt(server);
                        live.clone()
                    }
                    None => {
                        let live = Arc::new(ServerLive::new(server, workers, queue.clone()));
                        if previous.is_some() && !server.slow_start.is_zero() {
                            live.start_ramp();
                        }
                        live
                    }
                };
                live.share_count(server.max_connections.is_some() || balances_by_load(pool));
                live
            })
            .collect();
        PoolLive { servers, queue }
    }

    /// Whether the server persistence chose for a client can take its
    /// request: healthy, not in maintenance (a draining server keeps its
    /// persistent clients), under its connection limit, and not already tried
    /// for this request (bit `server` of `tried`). One rule for every mode.
    pub fn takes_sticky(&self, pool: &Pool, server: usize, tried: u64) -> bool {
        let (Some(s), Some(cfg)) = (self.servers.get(server), pool.servers.get(server)) else {
            return false;
        };
        (server >= 64 || tried & (1 << server) == 0)
            && s.state() != AdminState::Maintenance
            && s.healthy()
            && !s.ejected()
            && cfg.max_connections.is_none_or(|max| s.active.load(Ordering::Relaxed) < max)
    }

    /// Whether a request that found no server should wait in the queue: some
    /// server it has not tried would take it but for its `max_connections`.
    pub fn any_full(&self, pool: &Pool, tried: u64) -> bool {
        self.servers.iter().zip(&pool.servers).enumerate().any(|(i, (s, cfg))| {
            (i >= 64 || tried & (1 << i) == 0)
                && s.takes_new()
                && s.healthy()
                && !s.ejected()
                && cfg.max_connections.is_some_and(|max| s.active.load(Ordering::Relaxed) >= max)
        })
    }

    /// The index of the server called `name`.
    pub fn server_index(&self, name: &str) -> Option<usize> {
        self.servers.iter().position(|s| *s.name == *name)
    }
}

/// One configuration as served: immutable, shared by every worker.
#[derive(Debug)]
pub struct Generation {
    /// 1 for the configuration the engine started with, +1 per reload.
    pub number: u64,
    /// The validated configuration.
    pub config: Config,
    /// Live state per pool, indexed like `config.pools`.
    pub pools: Vec<PoolLive>,
    /// Which service each listener serves (index into `config.services`).
    pub listeners: HashMap<(Proto, SocketAddr), usize>,
    /// Open-connection gates per service, indexed like `config.services`.
    pub gates: Vec<Arc<Gate>>,
    /// UDP flow counters per service, indexed like `config.services`.
    pub udp: Vec<Arc<UdpBoard>>,
    /// Metrics per service, indexed like `config.services`; carried across
    /// reloads by service name.
    pub services: Vec<Arc<ServiceMetrics>>,
    /// The open access log, if the configuration has one.
    pub access_log: Option<AccessLog>,
    /// Persistence per pool (`None`: the pool has none), indexed like
    /// `config.pools`; stick tables are carried across reloads.
    pub persistence: Vec<Option<PoolPersistence>>,
    /// TLS towards the servers per pool (`None`: clear text), indexed like
    /// `config.pools`.
    pub upstream_tls: Vec<Option<PoolTls>>,
    /// Worker count the live objects are sized for.
    pub workers: usize,
    /// TLS termination per service (`Some` for `https` services), indexed
    /// like `config.services`; rebuilt by every reload, so certificates are
    /// read again.
    pub tls: Vec<Option<Arc<Terminator>>>,
    /// TLS handshake counters of the process, carried across reloads.
    pub tls_handshakes: Arc<TlsMetrics>,
    /// Certificates from ACME and the challenge answers offered, carried
    /// across reloads.
    pub acme: Arc<crate::acme::Registry>,
    /// The response cache per service (`None`: off), indexed like
    /// `config.services`; carried across reloads while a service's cache
    /// settings are unchanged.
    pub caches: Vec<Option<Arc<crate::cache::Cache>>>,
    /// Client protection per service (`None`: the service has no
    /// `protection` table), indexed like `config.services`; a guard's client
    /// table is carried across reloads while its settings are unchanged.
    pub protection: Vec<Option<Arc<crate::protection::Guard>>>,
    /// The trace exporter of `[tracing]` (none when off) and the span
    /// counters; the exporter is carried across reloads while the table is unchanged.
    pub tracing: crate::otel::Shared,
}

impl Generation {
    /// Builds generation `number` for `config`, carrying the live state of
    /// `previous` over where services, pools and servers still exist.
    /// Fails, changing nothing, when TLS towards clients or servers cannot be set up.
    /// `outbox` (high availability) receives what the persistence tables learn
    /// and the protection tables' busy rate buckets.
    pub fn new(
        number: u64,
        config: Config,
        previous: Option<&Generation>,
        workers: usize,
        access_log: Option<AccessLog>,
        key: &CookieKey,
        outbox: Option<&Arc<crate::replica::Outbox>>,
    ) -> Result<Self, GenerationError> {
        // First: the steps below adopt live objects of `previous`.
        let acme = previous.map_or_else(|| Arc::new(crate::acme::Registry::default()), |g| g.acme.clone());
        let tls = crate::tls::terminators(&config, previous.map(|g| (&g.config, g.tls.as_slice())), &acme)?;
        let managed: Vec<&str> = config
            .services
            .iter()
            .filter(|s| s.tls.as_ref().is_some_and(|t| t.acme.is_some()))
            .map(|s| s.name.as_str())
            .collect();
        acme.keep_only(&managed);
        let tls_handshakes = previous.map_or_else(|| Arc::new(TlsMetrics::new(workers)), |g| g.tls_handshakes.clone());
        let upstream_tls = config
            .pools
            .iter()
            .map(|pool| {
                let before = previous.and_then(|g| {
                    let i = g.pool_index(&pool.name)?;
                    Some((g.config.pools[i].tls.as_ref()?, g.upstream_tls.get(i)?.as_ref()?))
                });
                PoolTls::for_pool(pool, before)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let pools = config
            .pools
            .iter()
            .map(|pool| {
                let before = previous.and_then(|g| g.pool_index(&pool.name).map(|i| &g.pools[i]));
                PoolLive::new(pool, before, workers)
            })
            .collect();
        let services = config
            .services
            .iter()
            .map(|s| match previous.and_then(|g| g.service_index(&s.name).map(|i| &g.services[i])) {
                Some(kept) => kept.clone(),
                None => Arc::new(ServiceMetrics::new(workers)),
            })
            .collect();
        let persistence = config
            .pools
            .iter()
            .map(|pool| {
                let before =
                    previous.and_then(|g| g.pool_index(&pool.name)).and_then(|i| previous?.persistence[i].as_ref());
                PoolPersistence::new(pool, key, before).map(|p| p.with_outbox(outbox.cloned()))
            })
            .collect();
        let listeners = config
            .services
            .iter()
            .enumerate()
            .flat_map(|(i, s)| {
                Proto::all(s).flat_map(move |proto| s.listeners.iter().map(move |&addr| ((proto, addr), i)))
            })
            .collect();
        let gates = config
            .services
            .iter()
            .map(|s| match previous.and_then(|g| g.service_index(&s.name).map(|i| &g.gates[i])) {
                Some(kept) => kept.clone(),
                None => Arc::new(Gate::default()),
            })
            .collect();
        let udp = config
            .services
            .iter()
            .map(|s| match previous.and_then(|g| g.service_index(&s.name).map(|i| &g.udp[i])) {
                Some(kept) => kept.clone(),
                None => Arc::new(UdpBoard::new(workers)),
            })
            .collect();
        let caches = config
            .services
            .iter()
            .map(|s| {
                let settings = s.cache.as_ref()?;
                let before = previous
                    .and_then(|g| g.service_index(&s.name).and_then(|i| g.caches.get(i)?.clone()))
                    .filter(|c| c.config == *settings);
                Some(before.unwrap_or_else(|| Arc::new(crate::cache::Cache::new(settings))))
            })
            .collect();
        let protection = config
            .services
            .iter()
            .map(|s| {
                let settings = s.protection.as_ref()?;
                let before = previous
                    .and_then(|g| g.service_index(&s.name).and_then(|i| g.protection.get(i)?.clone()))
                    .filter(|p| p.config == *settings);
                Some(before.unwrap_or_else(|| {
                    Arc::new(crate::protection::Guard::new(settings).with_outbox(outbox.cloned(), &s.name))
                }))
            })
            .collect();
        let tracing = crate::otel::Shared::new(config.tracing.as_ref(), previous.map(|g| &g.tracing));
        Ok(Generation {
            caches,
            protection,
            tracing,
            number,
            config,
            pools,
            listeners,
            gates,
            udp,
            services,
            access_log,
            persistence,
            upstream_tls,
            workers,
            tls,
            tls_handshakes,
            acme,
        })
    }

    /// The index of the pool called `name`.
    pub fn pool_index(&self, name: &str) -> Option<usize> {
        self.config.pools.iter().position(|p| p.name == name)
    }

    /// The index of the service called `name`.
    pub fn service_index(&self, name: &str) -> Option<usize> {
        self.config.services.iter().position(|s| s.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(weights: &[(&str, u32)]) -> Config {
        let servers: Vec<String> = weights
            .iter()
            .enumerate()
            .map(|(i, (name, w))| {
                format!("{{ address = \"127.0.0.1:{}\", name = \"{name}\", weight = {w} }}", 9000 + i)
            })
            .collect();
        let text = format!(
            "[[service]]\nname = \"s\"\nlisten = \"127.0.0.1:1\"\npool = \"p\"\n[[pool]]\nname = \"p\"\nservers = [{}]\n",
            servers.join(", ")
        );
        match switchyard_config::parse(&text, "t.toml") {
            Ok(c) => c,
            Err(d) => panic!("{d}"),
        }
    }

    #[test]
    fn passive_failures_eject_once_and_an_ejection_that_is_over_can_repeat() {
        let config = config(&[("a", 1)]);
        let server = ServerLive::new(&config.pools[0].servers[0], 1, Arc::default());
        let passive = Passive { failures: 2, eject: Duration::from_secs(60) };
        let fail = |s: &ServerLive| s.observe(Some(&passive), false, "connect-failed");
        assert!(!fail(&server));
        assert!(!server.observe(Some(&passive), true, ""), "a success resets the count");
        assert!(!fail(&server));
        assert!(fail(&server), "two in a row eject it");
        assert!(server.ejected());
        assert_eq!(server.status(), "down");
        let until = server.ejected_until.load(Ordering::Relaxed);
        assert!(!fail(&server) && !fail(&server), "failures of requests in flight");
        assert_eq!(server.ejected_until.load(Ordering::Relaxed), until, "do not extend the ejection");
        assert_eq!(server.ejections(), 1);
        // The period is over but no pick has cleared it yet: a new ejection counts.
        server.ejected_until.store(1, Ordering::Relaxed);
        assert!(!fail(&server));
        assert!(fail(&server));
        assert_eq!(server.ejections(), 2);
        assert!(!server.observe(None, false, "x"), "no passive checking: nothing happens");
    }

    fn pool(extra: &str) -> Config {
        let text = format!(
            "[[service]]\nname = \"s\"\nlisten = \"127.0.0.1:1\"\npool = \"p\"\n[[pool]]\nname = \"p\"\n{extra}\n\
             servers = [{{ address = \"127.0.0.1:9000\", name = \"a\", max_connections = 2 }}, \
             {{ address = \"127.0.0.1:9001\", name = \"b\" }}]\n"
        );
        switchyard_config::parse(&text, "t.toml").unwrap_or_else(|d| panic!("{d}"))
    }

    #[test]
    fn slots_count_per_worker_and_share_a_count_only_where_a_pick_reads_it() {
        // Round robin: server b (no max) counts in its workers' own slots only.
        let rr = pool("");
        let p = &rr.pools[0];
        let live = PoolLive::new(p, None, 2);
        let (a, b) = (&*live.servers[0], &*live.servers[1]);
        let max = |i: usize| p.servers[i].max_connections;
        let on_b = [ActiveGuard::take(b, 0, max(1)), ActiveGuard::take(b, 1, max(1)), ActiveGuard::take(b, 1, max(1))];
        assert!(on_b.iter().all(Option::is_some));
        assert_eq!(b.in_flight(), 3, "the sum over the workers");
        assert_eq!(b.active.load(Ordering::Relaxed), 0, "no shared count without a reader");
        // Server a has a max: the shared count enforces it across workers.
        let first = ActiveGuard::take(a, 0, max(0));
        let second = ActiveGuard::take(a, 1, max(0));
        assert!(first.is_some() && second.is_some());
        assert!(ActiveGuard::take(a, 0, max(0)).is_none(), "full at 2, whichever worker asks");
        assert_eq!((a.in_flight(), a.active.load(Ordering::Relaxed)), (2, 2));
        drop(second);
        assert_eq!((a.in_flight(), a.active.load(Ordering::Relaxed)), (1, 1));
        assert!(ActiveGuard::take(a, 0, max(0)).is_some(), "a released slot is free again");

        // A reload to least connections: b's shared count starts from the three in flight,
        // which it loses as they end.
        let lc = pool("balance = \"least-connections\"");
        let reloaded = PoolLive::new(&lc.pools[0], Some(&live), 2);
        assert!(Arc::ptr_eq(&reloaded.servers[1], &live.servers[1]));
        assert_eq!(b.active.load(Ordering::Relaxed), 3);
        let more = ActiveGuard::take(b, 0, None);
        assert_eq!((b.in_flight(), b.active.load(Ordering::Relaxed)), (4, 4));
        drop(on_b);
        drop(more);
        assert_eq!((b.in_flight(), b.active.load(Ordering::Relaxed)), (0, 0));

        // Back to round robin: b's shared count is left alone.
        let _ = PoolLive::new(p, Some(&reloaded), 2);
        let quiet = ActiveGuard::take(b, 1, None);
        assert_eq!((b.in_flight(), b.active.load(Ordering::Relaxed)), (1, 0));
        drop(quiet);
        assert_eq!(b.in_flight(), 0);
    }

    #[test]
    fn reload_keeps_live_servers_and_operator_state() {
        let key = CookieKey::from_bytes([7; 32]);
        let first = Generation::new(1, config(&[("a", 1), ("b", 1)]), None, 1, None, &key, None).expect("generation");
        first.pools[0].servers[0].set_state(AdminState::Draining);
        first.pools[0].servers[1].set_weight(7);
        let second = Generation::new(2, config(&[("a", 1), ("b", 1), ("c", 1)]), Some(&first), 1, None, &key, None)
            .expect("generation");
        assert!(Arc::ptr_eq(&first.pools[0].servers[0], &second.pools[0].servers[0]));
        assert_eq!(second.pools[0].servers[0].state(), AdminState::Draining);
        assert_eq!(second.pools[0].servers[1].weight(), 7, "an override survives an unchanged configured weight");
        assert_eq!(second.pools[0].servers[2].state(), AdminState::Up);
        let third =
            Generation::new(3, config(&[("a", 1), ("b", 5)]), Some(&second), 1, None, &key, None).expect("generation");
        assert_eq!(third.pools[0].servers[1].weight(), 5, "a configured weight change replaces the override");
    }
}
