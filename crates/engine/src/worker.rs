//! Workers: one OS thread each, with its own single-threaded tokio runtime,
//! its own listening sockets (SO_REUSEPORT), balancers and idle connection
//! pools.
//!
//! Nothing on the request path is shared between workers except the
//! read-only configuration and the per-server in-flight counters (atomics), so
//! a worker never waits on another. The kernel spreads new connections across
//! the workers' sockets; a connection stays on the worker that accepted it.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use switchyard_balance::{Balancer, Method, ServerSpec};
use switchyard_config::{Algorithm, Config, Pool, PoolId};
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};

use crate::upstream::{IdlePool, PoolLive};

/// State shared read-only (plus atomics) by every worker.
#[derive(Debug)]
pub struct Shared {
    /// The validated configuration being served.
    pub config: Config,
    /// Live counters per pool, indexed like `config.pools`.
    pub pools: Vec<PoolLive>,
}

impl Shared {
    /// Live state for `config`.
    pub fn new(config: Config) -> Self {
        let pools = config.pools.iter().map(PoolLive::new).collect();
        Shared { config, pools }
    }
}

/// One worker's private state.
pub struct Worker {
    /// Configuration and shared counters.
    pub shared: Arc<Shared>,
    /// A balancer per pool; private so picks need no lock.
    pub balancers: RefCell<Vec<Balancer>>,
    /// Idle keep-alive connections to servers.
    pub idle: RefCell<IdlePool>,
    /// Set once a graceful stop has begun: finish in-flight requests, accept nothing new.
    pub draining: Cell<bool>,
    /// Woken when draining starts, so idle client connections close at once.
    pub drain: Notify,
    /// Client connections currently open on this worker.
    pub open: Cell<usize>,
    /// Request working memory lent to connections while they have a request in progress.
    pub scratch: RefCell<Vec<crate::http::Scratch>>,
    /// A coarse clock (refreshed every second) for idle-connection ages, so
    /// the request path reads no clock for them.
    pub clock: Cell<Instant>,
}

impl Worker {
    fn new(shared: Arc<Shared>, seed: u64) -> Self {
        let balancers = shared
            .config
            .pools
            .iter()
            .enumerate()
            .map(|(i, pool)| balancer_for(pool, seed.wrapping_add(i as u64)))
            .collect();
        let idle = IdlePool::new(&shared.config.pools);
        Worker {
            shared,
            balancers: RefCell::new(balancers),
            idle: RefCell::new(idle),
            draining: Cell::new(false),
            drain: Notify::new(),
            open: Cell::new(0),
            clock: Cell::new(Instant::now()),
            scratch: RefCell::new(Vec::new()),
        }
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

/// A listening socket handed to a worker, with the service it serves.
pub struct BoundListener {
    /// Index of the service in the configuration.
    pub service: usize,
    /// The socket, already bound and listening, non-blocking.
    pub socket: std::net::TcpListener,
}

/// Runs one worker until `stop` turns true and its connections have drained
/// (or the drain timeout passed).
pub fn run(id: usize, shared: Arc<Shared>, listeners: Vec<BoundListener>, mut stop: watch::Receiver<bool>) {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(worker = id, error = %e, "cannot start worker runtime");
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        let drain_timeout = shared.config.drain_timeout;
        let worker = Rc::new(Worker::new(shared, 0x5eed ^ id as u64));
        for bound in listeners {
            match TcpListener::from_std(bound.socket) {
                Ok(listener) => {
                    tokio::task::spawn_local(accept_loop(worker.clone(), bound.service, listener));
                }
                Err(e) => tracing::error!(worker = id, error = %e, "cannot register listener"),
            }
        }
        tokio::task::spawn_local(sweep_idle(worker.clone()));
        let _ = stop.wait_for(|stopped| *stopped).await;
        worker.draining.set(true);
        worker.drain.notify_waiters();
        let deadline = Instant::now() + drain_timeout;
        while worker.open.get() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if worker.open.get() > 0 {
            tracing::warn!(worker = id, open = worker.open.get(), "drain timeout: closing remaining connections");
        }
    });
}

async fn accept_loop(worker: Rc<Worker>, service: usize, listener: TcpListener) {
    loop {
        // Single-threaded runtime: nothing can start the drain between this
        // check and registering for the notification below.
        if worker.draining.get() {
            break;
        }
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = worker.drain.notified() => break,
        };
        match accepted {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                worker.open.set(worker.open.get() + 1);
                let w = worker.clone();
                tokio::task::spawn_local(async move {
                    let _open = OpenGuard(w.clone());
                    crate::http::serve(stream, peer, service, w).await;
                });
            }
            Err(e) => {
                // Out of file descriptors or memory: back off instead of spinning;
                // connections already open keep being served.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    // Dropping the listener closes the socket: new connections are refused
    // while accepted ones finish.
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
        worker.clock.set(Instant::now());
        if worker.draining.get() {
            worker.idle.borrow_mut().sweep(|_| Duration::ZERO, Instant::now());
            return;
        }
        let config = &worker.shared.config;
        worker.idle.borrow_mut().sweep(|pool: PoolId| idle_limit(config, pool), Instant::now());
    }
}

/// How long idle connections to a pool are kept: the shortest `server_idle`
/// of the services (pools do not know which services use them).
pub fn idle_limit(config: &Config, _pool: PoolId) -> Duration {
    config.services.iter().map(|s| s.timeouts.server_idle).min().unwrap_or(Duration::from_secs(30))
}
