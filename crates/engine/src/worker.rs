//! Workers: one OS thread each, with its own single-threaded tokio runtime,
//! its own listening sockets (SO_REUSEPORT), balancers and idle connection
//! pools.
//!
//! Nothing on the request path is shared between workers except the
//! read-only [`Generation`] and the per-server live atomics, so a worker never
//! waits on another. The kernel spreads new connections across the workers'
//! sockets; a connection stays on the worker that accepted it.
//!
//! Changes reach a worker as [`WorkerMsg`]s from the control plane
//! ([`crate::control`]). A new generation is installed between two requests:
//! the worker's [`Local`] is replaced, pools whose configuration did not
//! change keep their balancer and idle connections (the same `Rc`), and a
//! request already running finishes on the `Local` it started with.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use switchyard_balance::{Balancer, Method, ServerSpec};
use switchyard_config::{Algorithm, Pool, WhenFull};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch, Notify};

use crate::access_log::LineWriter;
use crate::control::Bound;
use crate::live::{AdminState, Gate, Generation, Proto};
use crate::upstream::h2::H2Conns;
use crate::upstream::IdleStacks;

/// A message from the control plane to one worker.
pub enum WorkerMsg {
    /// Serve `generation` from now on, accepting also on `listeners` (new
    /// addresses, already bound). `done` is signalled once installed.
    Install {
        /// The generation to serve.
        generation: Arc<Generation>,
        /// This worker's sockets for addresses the previous generation did not have.
        listeners: Vec<Bound>,
        /// Acknowledgement.
        done: std::sync::mpsc::Sender<()>,
    },
    /// The operator changed the weight of a server of generation `generation`.
    Weight {
        /// Generation the indices refer to.
        generation: u64,
        /// Pool index.
        pool: usize,
        /// Server index.
        server: usize,
    },
}

/// One worker's state for one pool: its balancer and idle connections.
pub struct PoolLocal {
    /// Private balancer, so picks need no lock.
    pub balancer: RefCell<Balancer>,
    /// Idle keep-alive connections to the pool's servers.
    pub idle: RefCell<IdleStacks>,
    /// Shared HTTP/2 connections to the pool's servers (`protocol = "h2"`).
    pub h2: H2Conns,
}

/// What a worker serves: a generation and its per-pool local state.
pub struct Local {
    /// The generation (shared, immutable).
    pub gen: Arc<Generation>,
    /// Per pool, indexed like `gen.config.pools`.
    pub pools: Vec<Rc<PoolLocal>>,
    /// This worker's handle on the access log, if there is one.
    pub log: Option<Rc<LineWriter>>,
}

impl Local {
    fn new(gen: Arc<Generation>, previous: Option<&Local>, seed: u64) -> Self {
        let pools = gen
            .config
            .pools
            .iter()
            .enumerate()
            .map(|(i, pool)| {
                let before = previous.and_then(|p| p.gen.pool_index(&pool.name).map(|j| (p, j)));
                match before {
                    Some((p, j)) if p.gen.config.pools[j] == *pool => p.pools[j].clone(),
                    Some((p, j)) => {
                        let idle = IdleStacks::carried(pool, &p.gen.config.pools[j], &mut p.pools[j].idle.borrow_mut());
                        Rc::new(PoolLocal {
                            balancer: RefCell::new(balancer_for(pool, seed)),
                            idle: RefCell::new(idle),
                            // A changed pool starts new HTTP/2 connections; the old
                            // ones close once their streams in flight end.
                            h2: H2Conns::new(pool),
                        })
                    }
                    None => Rc::new(PoolLocal {
                        balancer: RefCell::new(balancer_for(pool, seed.wrapping_add(i as u64))),
                        idle: RefCell::new(IdleStacks::new(pool)),
                        h2: H2Conns::new(pool),
                    }),
                }
            })
            .collect::<Vec<_>>();
        // Operators' weight overrides live in the shared server state; a
        // rebuilt balancer starts from the configured weights.
        for (p, local) in pools.iter().enumerate() {
            let mut balancer = local.balancer.borrow_mut();
            for (i, live) in gen.pools[p].servers.iter().enumerate() {
                if live.weight() != gen.config.pools[p].servers[i].weight {
                    balancer.set_weight(i, live.weight());
                }
            }
        }
        let log = match (&gen.access_log, previous) {
            (None, _) => None,
            (Some(open), Some(p)) if p.gen.access_log.as_ref().is_some_and(|old| old.same(open)) => p.log.clone(),
            (Some(open), _) => Some(Rc::new(open.line_writer())),
        };
        Local { gen, pools, log }
    }
}

/// One worker's private state.
pub struct Worker {
    /// Worker index (0-based).
    pub id: usize,
    /// What this worker serves now.
    current: RefCell<Rc<Local>>,
    /// Set once a graceful stop has begun: finish in-flight requests, accept nothing new.
    pub draining: Cell<bool>,
    /// Woken when draining starts, so idle client connections close at once.
    pub drain: Notify,
    /// Woken when a new generation is installed: accept loops of removed
    /// listeners stop, idle connections of removed services close.
    pub reloaded: Notify,
    /// Client connections currently open on this worker.
    pub open: Cell<usize>,
    /// Request working memory lent to connections while they have a request in progress.
    pub scratch: RefCell<Vec<crate::http::Scratch>>,
    /// A coarse clock (refreshed every second) for idle-connection ages, so
    /// the request path reads no clock for them.
    pub clock: Cell<Instant>,
    seed: u64,
}

impl Worker {
    fn new(id: usize, gen: Arc<Generation>) -> Self {
        let seed = 0x5eed ^ id as u64;
        Worker {
            id,
            current: RefCell::new(Rc::new(Local::new(gen, None, seed))),
            draining: Cell::new(false),
            drain: Notify::new(),
            reloaded: Notify::new(),
            open: Cell::new(0),
            clock: Cell::new(Instant::now()),
            scratch: RefCell::new(Vec::new()),
            seed,
        }
    }

    /// What the worker serves now. A request holds on to it until it ends.
    pub fn local(&self) -> Rc<Local> {
        self.current.borrow().clone()
    }

    /// Whether the connection should close after its current request: the
    /// worker drains, or a reload since generation `gen` removed `service`.
    pub fn closing(&self, gen: u64, service: &str) -> bool {
        if self.draining.get() {
            return true;
        }
        let current = self.current.borrow();
        current.gen.number != gen && current.gen.service_index(service).is_none()
    }

    fn install(&self, gen: Arc<Generation>) {
        let local = Local::new(gen, Some(&self.current.borrow()), self.seed);
        *self.current.borrow_mut() = Rc::new(local);
        self.reloaded.notify_waiters();
    }
}

/// Builds the balancer of a configured pool.
pub fn balancer_for(pool: &Pool, seed: u64) -> Balancer {
    let method = match pool.algorithm {
        Algorithm::RoundRobin => Method::RoundRobin,
        Algorithm::LeastConnections => Method::LeastConnections,
        Algorithm::RandomTwo => Method::RandomTwo,
        Algorithm::SourceHash => Method::SourceHash,
        Algorithm::Hash => Method::Hash,
        Algorithm::Maglev => Method::Maglev,
        Algorithm::First => Method::First,
    };
    let specs: Vec<ServerSpec> =
        pool.servers.iter().map(|s| ServerSpec { weight: s.weight, backup: s.backup }).collect();
    Balancer::new(method, &specs, seed)
}

/// Everything a worker thread starts with.
pub struct WorkerStart {
    /// Worker index.
    pub id: usize,
    /// The first generation.
    pub generation: Arc<Generation>,
    /// This worker's listening sockets.
    pub listeners: Vec<Bound>,
    /// Control-plane messages.
    pub inbox: mpsc::UnboundedReceiver<WorkerMsg>,
    /// Turns true when the engine stops.
    pub stop: watch::Receiver<bool>,
}

/// Runs one worker until `stop` turns true and its connections have drained
/// (or the drain timeout passed).
pub fn run(start: WorkerStart) {
    let WorkerStart { id, generation, listeners, mut inbox, mut stop } = start;
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(worker = id, error = %e, "cannot start worker runtime");
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        let worker = Rc::new(Worker::new(id, generation));
        listen(&worker, listeners);
        tokio::task::spawn_local(sweep_idle(worker.clone()));
        loop {
            tokio::select! {
                _ = stop.wait_for(|stopped| *stopped) => break,
                msg = inbox.recv() => match msg {
                    Some(msg) => handle_msg(&worker, msg),
                    None => break,
                },
            }
        }
        worker.draining.set(true);
        worker.drain.notify_waiters();
        let drain_timeout = worker.local().gen.config.drain_timeout;
        let deadline = Instant::now() + drain_timeout;
        while worker.open.get() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if worker.open.get() > 0 {
            tracing::warn!(worker = id, open = worker.open.get(), "drain timeout: closing remaining connections");
        }
    });
}

fn handle_msg(worker: &Rc<Worker>, msg: WorkerMsg) {
    match msg {
        WorkerMsg::Install { generation, listeners, done } => {
            worker.install(generation);
            listen(worker, listeners);
            let _ = done.send(());
        }
        WorkerMsg::Weight { generation, pool, server } => {
            let local = worker.local();
            if local.gen.number != generation {
                // A newer generation was installed since; it read the weight then.
                return;
            }
            if let (Some(p), Some(live)) = (local.pools.get(pool), local.gen.pools.get(pool)) {
                if let Some(s) = live.servers.get(server) {
                    p.balancer.borrow_mut().set_weight(server, s.weight());
                }
            }
        }
    }
}

fn listen(worker: &Rc<Worker>, listeners: Vec<Bound>) {
    for bound in listeners {
        let registered = match bound {
            Bound::Tcp(addr, socket) => TcpListener::from_std(socket).map(|listener| {
                tokio::task::spawn_local(accept_loop(worker.clone(), addr, listener));
            }),
            Bound::Udp(addr, socket) => tokio::net::UdpSocket::from_std(socket).map(|socket| {
                tokio::task::spawn_local(crate::l4::serve_udp(worker.clone(), addr, socket));
            }),
        };
        if let Err(e) = registered {
            tracing::error!(worker = worker.id, error = %e, "cannot register listener");
        }
    }
}

/// The first and the longest pause of the accept loop after a failed accept.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Failed accepts less than this apart belong to one burst (one warning):
/// while a flood drains, accepts succeed and fail by turns.
const ACCEPT_BURST_GAP: Duration = Duration::from_secs(1);

async fn accept_loop(worker: Rc<Worker>, addr: SocketAddr, listener: TcpListener) {
    // Zero while accepting works; else the pause after the last failure.
    let mut backoff = Duration::ZERO;
    let mut last_failure: Option<Instant> = None;
    // A warning was logged and its "accepting again" is still owed.
    let mut warned = false;
    loop {
        // Single-threaded runtime: nothing can start the drain or install a
        // generation between these checks and registering for the wake-ups below.
        if worker.draining.get() {
            break;
        }
        let local = worker.local();
        let Some(&service) = local.gen.listeners.get(&(Proto::Tcp, addr)) else {
            tracing::info!(worker = worker.id, %addr, "listener removed by reload: no longer accepting");
            break;
        };
        let limit = local.gen.config.services[service].l4;
        let gate = local.gen.gates[service].clone();
        let full = limit.max_connections.is_some_and(|max| gate.open.load(Ordering::Relaxed) >= max);
        if full && limit.when_full == WhenFull::Wait {
            // Leave new connections in the listen backlog until one closes.
            tokio::select! {
                () = gate.freed.notified() => {}
                () = tokio::time::sleep(Duration::from_millis(50)) => {}
                () = worker.drain.notified() => break,
            }
            continue;
        }
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = worker.drain.notified() => break,
            () = worker.reloaded.notified() => continue,
        };
        match accepted {
            Ok(_) if full => {
                // `when_full = "refuse"`: the connection is closed at once.
                tracing::debug!(%addr, "service full: connection refused");
            }
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                let held = limit.max_connections.map(|_| GateGuard::enter(gate));
                worker.open.set(worker.open.get() + 1);
                let w = worker.clone();
                tokio::task::spawn_local(async move {
                    let _open = OpenGuard(w.clone());
                    let _held = held;
                    crate::l4::serve_stream(stream, peer, local, service, w).await;
                });
            }
            Err(e) => {
                // Out of file descriptors or memory: back off instead of spinning
                // (the pending connection stays in the backlog, so the listener
                // stays readable); connections already open keep being served.
                // One warning per burst (failures closer than ACCEPT_BURST_GAP).
                let now = Instant::now();
                if last_failure.is_none_or(|t| now.duration_since(t) > ACCEPT_BURST_GAP) {
                    tracing::warn!(worker = worker.id, %addr, error = %e, "accept failed: backing off");
                    warned = true;
                }
                last_failure = Some(now);
                backoff = (backoff * 2).clamp(ACCEPT_BACKOFF_MIN, ACCEPT_BACKOFF_MAX);
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = worker.drain.notified() => break,
                }
                continue;
            }
        }
        if !backoff.is_zero() {
            backoff = Duration::ZERO;
            if std::mem::take(&mut warned) {
                tracing::info!(worker = worker.id, %addr, "accepting again");
            }
        }
    }
    // Dropping the listener closes the socket: new connections are refused
    // while accepted ones finish.
}

/// Holds one of a service's `max_connections` slots.
struct GateGuard(Arc<Gate>);

impl GateGuard {
    fn enter(gate: Arc<Gate>) -> Self {
        gate.open.fetch_add(1, Ordering::Relaxed);
        GateGuard(gate)
    }
}

impl Drop for GateGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
        self.0.freed.notify_waiters();
    }
}

struct OpenGuard(Rc<Worker>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.set(self.0.open.get().saturating_sub(1));
    }
}

async fn sweep_idle(worker: Rc<Worker>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let now = Instant::now();
        worker.clock.set(now);
        let local = worker.local();
        let limit = if worker.draining.get() { Duration::ZERO } else { idle_limit(&local.gen) };
        for (p, pool) in local.pools.iter().enumerate() {
            let live = &local.gen.pools[p];
            let keep = |i: usize| live.servers.get(i).is_some_and(|s| s.state() != AdminState::Maintenance);
            pool.idle.borrow_mut().sweep(limit, now, keep);
            pool.h2.sweep(limit, now, keep);
        }
        if worker.id == 0 {
            // Lookups already ignore idle entries; this frees their memory.
            for table in local.gen.persistence.iter().flatten() {
                table.expire(now);
            }
            for guard in local.gen.protection.iter().flatten() {
                guard.expire(now);
            }
        }
        if worker.draining.get() {
            return;
        }
    }
}

/// How long idle connections to servers are kept: the shortest `server_idle`
/// of the services (pools do not know which services use them).
pub fn idle_limit(gen: &Generation) -> Duration {
    gen.config.services.iter().map(|s| s.timeouts.server_idle).min().unwrap_or(Duration::from_secs(30))
}
