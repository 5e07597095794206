//! switchyard-engine: the data plane.
//!
//! [`start`] binds every listener of a validated configuration, then runs N
//! workers (threads), each with its own single-threaded runtime and its own
//! SO_REUSEPORT socket per listener. The HTTP pipeline lives in [`http`] and
//! reads in request order. [`Handle`] is how the process stops the engine:
//! a graceful stop lets in-flight requests finish before workers exit.

pub mod error;
pub mod http;
pub mod persist;
pub mod upstream;
pub mod worker;

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use socket2::{Domain, Protocol, Socket, Type};
use switchyard_config::Config;
use tokio::sync::watch;

pub use error::{Kind, ProxyError, Side};

/// Listen backlog of every listener.
const BACKLOG: i32 = 4096;

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
    /// A worker thread could not be spawned.
    #[error("cannot start worker thread: {0}")]
    Thread(std::io::Error),
}

/// A running engine.
pub struct Handle {
    stop: watch::Sender<bool>,
    threads: Vec<JoinHandle<()>>,
    listening: Vec<(String, SocketAddr)>,
}

impl Handle {
    /// Every (service name, bound address) pair, in configuration order.
    pub fn listening(&self) -> &[(String, SocketAddr)] {
        &self.listening
    }

    /// Begins a graceful stop: listeners close, idle client connections close,
    /// in-flight requests finish (up to the configured drain timeout).
    pub fn shutdown(&self) {
        let _ = self.stop.send(true);
    }

    /// Waits until every worker has stopped.
    pub fn join(self) {
        for t in self.threads {
            let _ = t.join();
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
    let mut per_worker: Vec<Vec<worker::BoundListener>> = (0..workers).map(|_| Vec::new()).collect();
    let mut listening = Vec::new();
    for (index, service) in config.services.iter().enumerate() {
        for &addr in &service.listeners {
            let listen_err = |source| StartError::Listen { service: service.name.clone(), addr, source };
            // Refuse a port someone else already listens on, even with
            // SO_REUSEPORT set, instead of silently sharing its traffic.
            drop(bind(addr, false).map_err(listen_err)?);
            for list in per_worker.iter_mut() {
                let socket = bind(addr, workers > 1).map_err(listen_err)?;
                list.push(worker::BoundListener { service: index, socket });
            }
            listening.push((service.name.clone(), addr));
        }
    }
    let shared = Arc::new(worker::Shared::new(config));
    let (stop, stop_rx) = watch::channel(false);
    let mut threads = Vec::with_capacity(workers);
    for (id, listeners) in per_worker.into_iter().enumerate() {
        let shared = shared.clone();
        let stop_rx = stop_rx.clone();
        let thread = std::thread::Builder::new()
            .name(format!("switchyard-w{id}"))
            .spawn(move || worker::run(id, shared, listeners, stop_rx))
            .map_err(StartError::Thread)?;
        threads.push(thread);
    }
    tracing::info!(workers, "engine started");
    Ok(Handle { stop, threads, listening })
}

fn bind(addr: SocketAddr, reuse_port: bool) -> std::io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}
