//! The control plane: the one way to change a running engine.
//!
//! Every change to running state — a reloaded configuration file, an admin
//! API call, a dashboard button — is a [`Change`] given to
//! [`Control::apply`]. Changes are applied one at a time (a mutex), and
//! either apply completely or not at all: a reload binds every new listener
//! before any worker sees the new generation, so a failed bind leaves the
//! running configuration untouched.
//!
//! A reload is a diff: services, pools and servers that still exist keep
//! their listeners (the same sockets), connections, idle server connections,
//! balancer state and live counters; new listeners are bound; listeners that
//! are gone stop accepting while their connections finish the request in
//! progress (a removed service drains).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use arc_swap::ArcSwap;
use socket2::{Domain, Protocol, Socket, Type};
use switchyard_config::Config;
use tokio::sync::{mpsc, watch};

use switchyard_balance::cookie::CookieKey;

use crate::access_log::AccessLog;
use crate::live::{AdminState, Generation, Proto};
use crate::persist::EntryView;
use crate::quic_steer::QuicGroup;
use crate::worker::{Bound, WorkerMsg};

/// Listen backlog of every listener.
const BACKLOG: i32 = 4096;
/// How long `apply` waits for every worker to take a new generation.
const INSTALL_WAIT: Duration = Duration::from_secs(10);

/// A change to running state.
#[derive(Debug)]
pub enum Change {
    /// Serve a new, validated configuration (the diff against the running one is applied).
    Reload(Box<Config>),
    /// Remove entries from a service's response cache.
    PurgeCache {
        /// Service name.
        service: String,
        /// The exact cache key, or with `prefix` the start of every key removed.
        key: String,
        /// Remove every key starting with `key`.
        prefix: bool,
    },
    /// Empty the persistence table of a pool.
    FlushPersistence {
        /// Pool name.
        pool: String,
    },
    /// Change the operator's state or weight of one server.
    Server {
        /// Pool name.
        pool: String,
        /// Server name within the pool.
        server: String,
        /// What to do.
        op: ServerOp,
    },
}

/// An operator's action on a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerOp {
    /// Back to taking new requests.
    Enable,
    /// No new requests; running ones finish; idle pooled connections close.
    Disable,
    /// No new requests; running ones finish.
    Drain,
    /// Set the effective weight (0..=1000).
    Weight(u32),
}

/// What an applied change did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// A new generation is served.
    Reloaded {
        /// Its number.
        generation: u64,
        /// One-line summary of the differences.
        summary: String,
        /// Things the reload could not apply live (e.g. the worker count).
        warnings: Vec<String>,
    },
    /// Entries were removed from a service's cache.
    Purged {
        /// Service name.
        service: String,
        /// Keys removed (each with all its variants).
        purged: u64,
    },
    /// A pool's persistence table was emptied.
    Flushed {
        /// Pool name.
        pool: String,
        /// Entries removed.
        removed: u64,
    },
    /// A server's state or weight changed.
    Server {
        /// Pool name.
        pool: String,
        /// Server name.
        server: String,
        /// State after the change.
        state: AdminState,
        /// Effective weight after the change.
        weight: u32,
    },
}

/// Why a change was refused. Nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// A pool or server that does not exist.
    #[error("{0}")]
    NotFound(String),
    /// A value out of range.
    #[error("{0}")]
    BadInput(String),
    /// A new listener could not be bound.
    #[error("service `{service}`: cannot listen on {addr}: {source}")]
    Listen {
        /// Service name.
        service: String,
        /// Address that failed.
        addr: SocketAddr,
        /// The system's reason.
        source: std::io::Error,
    },
    /// The new access log could not be opened.
    #[error("cannot open the access log: {0}")]
    AccessLog(std::io::Error),
    /// TLS towards clients or servers could not be set up (certificates, keys, settings).
    #[error(transparent)]
    Tls(#[from] crate::live::GenerationError),
    /// The engine is stopping or a worker did not answer.
    #[error("engine unavailable: {0}")]
    Unavailable(String),
}

/// The control plane of a running engine. `Send + Sync`: the admin API,
/// signal handlers and the command line share it.
pub struct Control {
    current: ArcSwap<Generation>,
    workers: Vec<mpsc::UnboundedSender<WorkerMsg>>,
    worker_count: usize,
    /// Serialises changes; holds the listeners with bound sockets.
    applying: Mutex<HashSet<(Proto, SocketAddr)>>,
    stop: watch::Sender<bool>,
    /// Signs persistence cookies; the same for the process's life, so
    /// cookies stay valid across reloads.
    cookie_key: CookieKey,
    /// High availability state; `None` when started without `[cluster]`.
    cluster: Option<Arc<crate::peers::Cluster>>,
}

impl Control {
    pub(crate) fn new(
        first: Arc<Generation>,
        workers: Vec<mpsc::UnboundedSender<WorkerMsg>>,
        bound: HashSet<(Proto, SocketAddr)>,
        stop: watch::Sender<bool>,
        cookie_key: CookieKey,
        cluster: Option<Arc<crate::peers::Cluster>>,
    ) -> Self {
        let worker_count = workers.len();
        let applying = Mutex::new(bound);
        Control { current: ArcSwap::new(first), workers, worker_count, applying, stop, cookie_key, cluster }
    }

    /// The cluster state (high availability), when started with `[cluster]`.
    pub fn cluster(&self) -> Option<&Arc<crate::peers::Cluster>> {
        self.cluster.as_ref()
    }

    /// Whether a graceful stop has begun (the node must give its address up).
    pub fn stopping(&self) -> bool {
        *self.stop.borrow()
    }

    /// The generation being served.
    pub fn generation(&self) -> Arc<Generation> {
        self.current.load_full()
    }

    /// Number of worker threads.
    pub fn workers(&self) -> usize {
        self.worker_count
    }

    /// Applies one change, completely or not at all. Blocks for as long as
    /// the workers take to install a new generation (milliseconds); call it
    /// from a blocking context.
    pub fn apply(&self, change: Change) -> Result<Applied, ApplyError> {
        let mut bound = lock(&self.applying);
        match change {
            Change::Reload(config) => self.reload(&mut bound, *config),
            Change::Server { pool, server, op } => self.server(&pool, &server, op),
            Change::PurgeCache { service, key, prefix } => {
                let gen = self.generation();
                let i = gen
                    .service_index(&service)
                    .ok_or_else(|| ApplyError::NotFound(format!("no service named `{service}`")))?;
                let cache = gen
                    .caches
                    .get(i)
                    .and_then(Option::as_ref)
                    .ok_or_else(|| ApplyError::NotFound(format!("service `{service}` has no cache")))?;
                let purged = cache.purge(&key, prefix);
                tracing::info!(service, key, prefix, purged, "cache purged by operator");
                Ok(Applied::Purged { service, purged })
            }
            Change::FlushPersistence { pool } => {
                let gen = self.generation();
                let table = persistence_of(&gen, &pool)?;
                let removed = table.flush() as u64;
                tracing::info!(pool, removed, "persistence table flushed by operator");
                Ok(Applied::Flushed { pool, removed })
            }
        }
    }

    /// Up to `limit` entries of a pool's persistence table (most recently
    /// used first), its kind and its total size.
    pub fn persistence(&self, pool: &str, limit: usize) -> Result<(&'static str, Vec<EntryView>, u64), ApplyError> {
        let gen = self.generation();
        let table = persistence_of(&gen, pool)?;
        let now = std::time::Instant::now();
        Ok((table.kind(), table.entries(limit, now), table.len() as u64))
    }

    /// Reopens the access log file (log rotation, SIGUSR1).
    pub fn reopen_logs(&self) {
        if let Some(log) = &self.generation().access_log {
            log.reopen();
        }
    }

    /// Begins a graceful stop.
    pub(crate) fn shutdown(&self) {
        let _ = self.stop.send(true);
    }

    fn reload(&self, bound: &mut HashSet<(Proto, SocketAddr)>, config: Config) -> Result<Applied, ApplyError> {
        let old = self.generation();
        let diff = switchyard_config::diff(&old.config, &config);
        let mut warnings = Vec::new();
        if diff.workers_changed {
            warnings.push("`workers` changed: the worker count applies at the next restart".to_string());
        }
        if diff.event_log_changed {
            warnings.push("`[event_log]` changed: the event log applies at the next restart".to_string());
        }
        if diff.admin_changed {
            warnings.push("`[admin]` changed: the admin listener applies at the next restart".to_string());
        }
        warnings.extend(cluster_warning(old.config.cluster.as_ref(), config.cluster.as_ref()));
        let freebind = old.config.cluster.as_ref().is_some_and(|c| c.freebind);
        // Bind every new address first: a failure changes nothing.
        let mut fresh: Vec<Vec<Bound>> = (0..self.worker_count).map(|_| Vec::new()).collect();
        let mut added = Vec::new();
        for service in &config.services {
            for proto in Proto::all(service) {
                for &addr in &service.listeners {
                    if bound.contains(&(proto, addr)) {
                        continue;
                    }
                    let sockets = bind_all(proto, addr, self.worker_count, freebind)
                        .map_err(|source| ApplyError::Listen { service: service.name.clone(), addr, source })?;
                    for (list, socket) in fresh.iter_mut().zip(sockets) {
                        list.push(socket);
                    }
                    added.push((proto, addr));
                }
            }
        }
        let access_log = match (&config.access_log, &old.access_log) {
            (None, _) => None,
            (Some(new), Some(open)) if old.config.access_log.as_ref() == Some(new) => Some(open.clone()),
            (Some(new), _) => Some(AccessLog::open(new).map_err(ApplyError::AccessLog)?),
        };
        let gen = Arc::new(Generation::new(
            old.number + 1,
            config,
            Some(&old),
            self.worker_count,
            access_log,
            &self.cookie_key,
            self.cluster.as_ref().map(|c| c.outbox()).as_ref(),
        )?);
        let removed: Vec<(Proto, SocketAddr)> =
            bound.iter().filter(|a| !gen.listeners.contains_key(a)).copied().collect();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        for (worker, listeners) in self.workers.iter().zip(fresh) {
            let msg = WorkerMsg::Install { generation: gen.clone(), listeners, done: done_tx.clone() };
            if worker.send(msg).is_err() {
                return Err(ApplyError::Unavailable("the engine is stopping".into()));
            }
        }
        self.current.store(gen.clone());
        for _ in 0..self.worker_count {
            if done_rx.recv_timeout(INSTALL_WAIT).is_err() {
                return Err(ApplyError::Unavailable("a worker did not take the new configuration in time".into()));
            }
        }
        // A replaced access log is stopped here, on the control thread: the
        // last handle would otherwise drop on a worker and wait for the writer.
        if let Some(old_log) = &old.access_log {
            if !gen.access_log.as_ref().is_some_and(|new| new.same(old_log)) {
                old_log.shutdown();
            }
        }
        if let (Some(cluster), Some(config)) = (&self.cluster, &gen.config.cluster) {
            cluster.configure(config);
        }
        for addr in &removed {
            bound.remove(addr);
        }
        bound.extend(added.iter().copied());
        let summary = diff.to_string();
        tracing::info!(generation = gen.number, %summary, "configuration reloaded");
        Ok(Applied::Reloaded { generation: gen.number, summary, warnings })
    }

    fn server(&self, pool: &str, server: &str, op: ServerOp) -> Result<Applied, ApplyError> {
        let gen = self.generation();
        let p = gen.pool_index(pool).ok_or_else(|| ApplyError::NotFound(format!("no pool named `{pool}`")))?;
        let s = gen.pools[p]
            .server_index(server)
            .ok_or_else(|| ApplyError::NotFound(format!("pool `{pool}` has no server named `{server}`")))?;
        let live = &gen.pools[p].servers[s];
        match op {
            ServerOp::Enable => live.set_state(AdminState::Up),
            ServerOp::Drain => live.set_state(AdminState::Draining),
            ServerOp::Disable => live.set_state(AdminState::Maintenance),
            ServerOp::Weight(w) if w > 1000 => {
                return Err(ApplyError::BadInput(format!("weight {w} is out of range (0..=1000)")));
            }
            ServerOp::Weight(w) => {
                live.set_weight(w);
                for worker in &self.workers {
                    let _ = worker.send(WorkerMsg::Weight { generation: gen.number, pool: p, server: s });
                }
            }
        }
        tracing::info!(
            pool,
            server,
            state = live.state().as_str(),
            weight = live.weight(),
            "server changed by operator"
        );
        Ok(Applied::Server {
            pool: pool.to_string(),
            server: server.to_string(),
            state: live.state(),
            weight: live.weight(),
        })
    }
}

/// What a reload cannot change in `[cluster]` without a restart.
fn cluster_warning(
    old: Option<&switchyard_config::Cluster>,
    new: Option<&switchyard_config::Cluster>,
) -> Option<String> {
    match (old, new) {
        (None, None) => None,
        (None, Some(_)) | (Some(_), None) => {
            Some("`[cluster]` added or removed: replication starts or stops at the next restart".into())
        }
        (Some(a), Some(b)) if (&a.name, a.listen, a.freebind) != (&b.name, b.listen, b.freebind) => {
            Some("`[cluster]` name, listen or freebind changed: they apply at the next restart".into())
        }
        _ => None,
    }
}

fn persistence_of<'g>(gen: &'g Generation, pool: &str) -> Result<&'g crate::persist::PoolPersistence, ApplyError> {
    let p = gen.pool_index(pool).ok_or_else(|| ApplyError::NotFound(format!("no pool named `{pool}`")))?;
    gen.persistence[p].as_ref().ok_or_else(|| ApplyError::NotFound(format!("pool `{pool}` has no persistence")))
}

/// A poisoned lock only means another change panicked half-way; the set of
/// bound addresses it guards is still accurate (it is updated last).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Binds `addr` once per worker. With several workers each socket has
/// SO_REUSEPORT so the kernel spreads connections (and UDP clients, by
/// address) across them; a probe bind without it first refuses a port some
/// other process already uses, instead of silently sharing its traffic.
///
/// With `freebind` (a node of a cluster) the sockets have IP_FREEBIND: they bind
/// an address the node does not hold yet, so the standby already listens when
/// keepalived moves the virtual address to it.
///
/// QUIC is bound once per worker too, the kernel steering each datagram to
/// the worker that owns its connection ID whatever address it comes from
/// (ADR 0009); where it cannot, once, for the first worker (ADR 0006).
pub(crate) fn bind_all(proto: Proto, addr: SocketAddr, workers: usize, freebind: bool) -> std::io::Result<Vec<Bound>> {
    // A socket that cannot share the port first: another process holding it
    // (with or without SO_REUSEPORT) refuses the start.
    drop(open(proto, addr, false, freebind)?);
    match proto {
        Proto::Quic => {
            // Bound in worker order: socket i of the group is worker i's (ADR 0009).
            let sockets = QuicGroup::bind(addr, workers, |reuse_port| open(proto, addr, reuse_port, freebind))?;
            Ok(sockets.into_iter().map(|socket| Bound::Quic(addr, socket)).collect())
        }
        Proto::Tcp | Proto::Udp => (0..workers).map(|_| bind(proto, addr, workers > 1, freebind)).collect(),
    }
}

/// A listening TCP socket, or a bound UDP socket (`Proto::Udp`, `Proto::Quic`).
fn bind(proto: Proto, addr: SocketAddr, reuse_port: bool, freebind: bool) -> std::io::Result<Bound> {
    let socket = open(proto, addr, reuse_port, freebind)?;
    if proto != Proto::Tcp {
        return Ok(Bound::Udp(addr, socket.into()));
    }
    // Linux copies TCP_NODELAY from the listener to each accepted socket:
    // set once here, it saves a setsockopt per connection (runtime.rs).
    #[cfg(target_os = "linux")]
    socket.set_tcp_nodelay(true)?;
    socket.listen(BACKLOG)?;
    Ok(Bound::Tcp(addr, socket.into()))
}

/// A socket of `proto`, non-blocking, bound to `addr`.
fn open(proto: Proto, addr: SocketAddr, reuse_port: bool, freebind: bool) -> std::io::Result<Socket> {
    let (kind, protocol) = match proto {
        Proto::Tcp => (Type::STREAM, Protocol::TCP),
        Proto::Udp | Proto::Quic => (Type::DGRAM, Protocol::UDP),
    };
    let socket = Socket::new(Domain::for_address(addr), kind, Some(protocol))?;
    socket.set_reuse_address(true)?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    if freebind {
        crate::transport::set_freebind(&socket, addr)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    Ok(socket)
}

#[cfg(all(test, target_os = "linux"))]
mod nodelay_tests {
    use super::*;

    /// The accept loop sets no TCP_NODELAY on Linux (runtime.rs): it relies on the
    /// kernel copying it from the listener `bind` makes to every accepted socket.
    #[test]
    fn accepted_sockets_inherit_nodelay_from_the_listener() {
        let any = SocketAddr::from(([127, 0, 0, 1], 0));
        let Ok(Bound::Tcp(_, listener)) = bind(Proto::Tcp, any, false, false) else { panic!("no TCP listener") };
        let addr = listener.local_addr().expect("local address");
        let _client = std::net::TcpStream::connect(addr).expect("connect");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let accepted = loop {
            match listener.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err(e) => panic!("accept: {e}"),
            }
        };
        assert!(socket2::SockRef::from(&accepted).tcp_nodelay().expect("getsockopt"), "TCP_NODELAY not inherited");
    }
}
