//! switchyard-engine: the data plane.
//!
//! [`start`] binds every listener of a validated configuration, then runs N
//! workers (threads), each with its own single-threaded runtime and its own
//! SO_REUSEPORT socket per listener. The HTTP pipeline lives in [`http`] and
//! reads in request order. [`Handle`] is how the process stops the engine:
//! a graceful stop lets in-flight requests finish before workers exit.

pub mod access_log;
pub mod acme;
pub mod cache;
pub mod control;
pub use switchyard_http::error;
pub mod front;
pub mod fuzz;
pub mod health;
pub mod http;
pub mod http2;
pub mod http3;
pub mod idle;
pub mod l4;
pub mod lazy_tcp;
pub mod live;
pub mod metrics;
pub mod otel;
pub mod peers;
pub mod persist;
pub mod protection;
pub mod quic_steer;
pub mod relay;
pub mod replica;
pub mod runtime;
pub use access_log::syslog;
pub mod tls;
pub mod translate;
pub mod transport;
pub mod upstream;
pub mod wire;
pub mod worker;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use switchyard_config::Config;
use tokio::sync::{mpsc, watch};

pub use control::{Applied, ApplyError, Change, Control, ServerOp};
pub use error::{Kind, ProxyError, Side};
pub use live::{AdminState, Generation};

/// Why the engine could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A listener could not be bound.
    #[error("service `{service}`: cannot listen on {addr}")]
    Listen {
        /// Service name.
        service: String,
        /// Address that failed.
        addr: SocketAddr,
        /// The system's reason.
        source: std::io::Error,
    },
    /// No random key for persistence cookies could be drawn.
    #[error("cannot draw a random key: {0}")]
    Key(String),
    /// The access log could not be opened.
    #[error("cannot open the access log: {0}")]
    AccessLog(std::io::Error),
    /// TLS towards clients or servers could not be set up (certificates, keys, settings).
    #[error(transparent)]
    Tls(#[from] live::GenerationError),
    /// A worker thread could not be spawned.
    #[error("cannot start worker thread: {0}")]
    Thread(std::io::Error),
    /// The cluster (replication) listener could not be bound.
    #[error("cluster: cannot listen on {addr}: {source}")]
    Cluster {
        /// `[cluster] listen`.
        addr: SocketAddr,
        /// The system's reason.
        source: std::io::Error,
    },
}

/// A running engine.
pub struct Handle {
    control: Arc<Control>,
    threads: Vec<JoinHandle<()>>,
}

impl Handle {
    /// Every listener: its service's name and mode, and its address.
    pub fn listening(&self) -> Vec<(String, switchyard_config::Mode, SocketAddr)> {
        let gen = self.control.generation();
        gen.config.services.iter().flat_map(|s| s.listeners.iter().map(|a| (s.name.clone(), s.mode, *a))).collect()
    }

    /// The control plane: apply changes, read the running generation.
    pub fn control(&self) -> Arc<Control> {
        self.control.clone()
    }

    /// Applies one change (see [`Control::apply`]).
    pub fn apply(&self, change: Change) -> Result<Applied, ApplyError> {
        self.control.apply(change)
    }

    /// Begins a graceful stop: listeners close, idle client connections close,
    /// in-flight requests finish (up to the configured drain timeout).
    pub fn shutdown(&self) {
        self.control.shutdown();
    }

    /// Waits until every worker has stopped, then writes out the access log.
    pub fn join(self) {
        for t in self.threads {
            let _ = t.join();
        }
        if let Some(log) = &self.control.generation().access_log {
            log.shutdown();
        }
    }
}

/// Starts serving `config` with `workers` threads (default: the config's
/// `workers`, else one per core).
pub fn start(config: Config, workers: Option<usize>) -> Result<Handle, StartError> {
    let workers = workers
        .or(config.workers)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let mut per_worker: Vec<Vec<worker::Bound>> = (0..workers).map(|_| Vec::new()).collect();
    let mut bound = HashSet::new();
    let freebind = config.cluster.as_ref().is_some_and(|c| c.freebind);
    for service in &config.services {
        for proto in live::Proto::all(service) {
            for &addr in &service.listeners {
                let sockets = control::bind_all(proto, addr, workers, freebind)
                    .map_err(|source| StartError::Listen { service: service.name.clone(), addr, source })?;
                for (list, socket) in per_worker.iter_mut().zip(sockets) {
                    list.push(socket);
                }
                bound.insert((proto, addr));
            }
        }
    }
    let access_log = match &config.access_log {
        Some(log) => Some(access_log::AccessLog::open(log).map_err(StartError::AccessLog)?),
        None => None,
    };
    let key = switchyard_balance::cookie::CookieKey::generate().map_err(|e| StartError::Key(e.to_string()))?;
    let cluster = config.cluster.as_ref().map(|c| (peers::Cluster::new(c), c.listen));
    let outbox = cluster.as_ref().map(|(c, _)| c.outbox());
    let generation = Arc::new(Generation::new(1, config, None, workers, access_log, &key, outbox.as_ref())?);
    let (stop, stop_rx) = watch::channel(false);
    let mut senders = Vec::with_capacity(workers);
    let mut threads = Vec::with_capacity(workers);
    for (id, listeners) in per_worker.into_iter().enumerate() {
        let (tx, inbox) = mpsc::unbounded_channel();
        senders.push(tx);
        let start =
            runtime::WorkerStart { id, generation: generation.clone(), listeners, inbox, stop: stop_rx.clone() };
        let thread = std::thread::Builder::new()
            .name(format!("switchyard-w{id}"))
            .spawn(move || runtime::run(start))
            .map_err(StartError::Thread)?;
        threads.push(thread);
    }
    tracing::info!(workers, "engine started");
    let control =
        Arc::new(Control::new(generation, senders, bound, stop, key, cluster.as_ref().map(|(c, _)| c.clone())));
    // Weak: the prober must not keep the control plane (and its stop sender) alive.
    let weak = Arc::downgrade(&control);
    let generations: peers::Generations = Arc::new(move || weak.upgrade().map(|c| c.generation()));
    if let Some((cluster, addr)) = cluster {
        let thread = peers::spawn(cluster, generations.clone(), stop_rx.clone());
        threads.push(thread.map_err(|source| StartError::Cluster { addr, source })?);
    }
    let acme = control.generation().acme.clone();
    threads.push(acme::manager::spawn(acme, stop_rx.clone()).map_err(StartError::Thread)?);
    threads.push(health::spawn(move || generations(), stop_rx).map_err(StartError::Thread)?);
    Ok(Handle { control, threads })
}
