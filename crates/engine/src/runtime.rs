//! A worker thread's life: its single-threaded runtime, its accept loops
//! (each accepted connection goes to [`crate::l4::serve_stream`], which
//! serves it by its service's mode), the control plane's messages
//! ([`WorkerMsg`]), the sweep of idle server connections, and the drain at
//! the end. The worker's state itself is [`crate::worker`]'s.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use switchyard_config::WhenFull;
use tokio::io::unix::AsyncFd;
use tokio::sync::{mpsc, watch};

use crate::live::{AdminState, Gate, Generation, Proto};
use crate::worker::{idle_limit, Bound, Worker, WorkerMsg};

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
        tokio::task::spawn_local(crate::idle::expire(worker.clone()));
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
            Bound::Tcp(addr, socket) => crate::lazy_tcp::listener(socket).map(|listener| {
                tokio::task::spawn_local(accept_loop(worker.clone(), addr, listener));
            }),
            Bound::Udp(addr, socket) => tokio::net::UdpSocket::from_std(socket).map(|socket| {
                tokio::task::spawn_local(crate::l4::serve_udp(worker.clone(), addr, socket));
            }),
            Bound::Quic(addr, quic) => {
                tokio::task::spawn_local(crate::http3::serve_endpoint(worker.clone(), addr, quic));
                Ok(())
            }
        };
        if let Err(e) = registered {
            tracing::error!(worker = worker.id, error = %e, "cannot register listener");
        }
    }
}

/// Serves one accepted connection, the body of its task.
///
/// The steps before an HTTP/1.1 connection's first request (PROXY header,
/// protection, the codec's choice), and a whole connection of another kind,
/// run in a boxed future that is freed when it ends: an HTTP/1.1 connection
/// comes back to be served here, so an idle keep-alive connection's task
/// holds only the codec's state. Not an `async fn`: its arguments would
/// keep their own room in the future beside the states built from them.
fn connection(
    stream: crate::lazy_tcp::LazyTcp,
    peer: SocketAddr,
    local: Rc<crate::worker::Local>,
    service: usize,
    worker: Rc<Worker>,
    held: Option<GateGuard>,
) -> impl std::future::Future<Output = ()> {
    let open = OpenGuard(worker.clone());
    let before = Box::pin(crate::l4::serve_stream(stream, peer, local, service, worker));
    async move {
        let (_open, _held) = (open, held);
        // Not `if let`: its scrutinee would stay in the future while the
        // connection is served.
        let Some(http1) = before.await else { return };
        http1.serve().await;
    }
}

/// The first and the longest pause of the accept loop after a failed accept.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Failed accepts less than this apart belong to one burst (one warning):
/// while a flood drains, accepts succeed and fail by turns.
const ACCEPT_BURST_GAP: Duration = Duration::from_secs(1);

async fn accept_loop(worker: Rc<Worker>, addr: SocketAddr, listener: AsyncFd<std::net::TcpListener>) {
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
            accepted = crate::lazy_tcp::accept(&listener) => accepted,
            () = worker.drain.notified() => break,
            () = worker.reloaded.notified() => continue,
        };
        match accepted {
            Ok(_) if full => {
                // `when_full = "refuse"`: the connection is closed at once.
                tracing::debug!(%addr, "service full: connection refused");
            }
            Ok((stream, peer)) => {
                // On Linux the accepted socket inherits TCP_NODELAY from the
                // listener (control.rs sets it there): no setsockopt per connection.
                #[cfg(not(target_os = "linux"))]
                let stream = {
                    let mut stream = stream;
                    let _ = stream.registered().map(|s| s.set_nodelay(true));
                    stream
                };
                let held = limit.max_connections.map(|_| GateGuard::enter(gate));
                worker.open.set(worker.open.get() + 1);
                let w = worker.clone();
                // The connection's future is written into an allocation of its
                // own and the task holds the pointer: tokio moves a task's
                // future several times on its way into the task cell (and
                // once more out of it at the end), which for a future of a
                // kilobyte cost more than the allocation.
                let conn = Box::write(Box::new_uninit(), connection(stream, peer, local, service, w, held));
                tokio::task::spawn_local(Box::into_pin(conn));
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
        worker.scratch.trim();
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
