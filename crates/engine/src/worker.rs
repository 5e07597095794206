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
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use switchyard_balance::{Balancer, Method, ServerSpec};
use switchyard_config::{Algorithm, Pool};
use switchyard_http::parse::Field;
use tokio::sync::Notify;

use crate::access_log::LineWriter;
use crate::live::Generation;
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

/// Working memory of a request in progress. A connection borrows one from its
/// worker when request bytes arrive and gives it back when it goes idle, so an
/// idle keep-alive connection holds no buffers at all.
#[derive(Default)]
pub struct Scratch {
    /// Bytes read from the client.
    pub(crate) buf: BytesMut,
    /// Header positions of the request head.
    pub(crate) fields: Vec<Field>,
    /// Header positions of the response head.
    pub(crate) resp_fields: Vec<Field>,
    /// Heads written towards the server or the client.
    pub(crate) out: Vec<u8>,
    /// Lower-cased host.
    pub(crate) host: String,
    /// "METHOD path", for logs.
    pub(crate) line: String,
    /// Header values the access log keeps (`http::log::keep_meta`).
    pub(crate) meta: Vec<u8>,
    /// The key a header-keyed stick table is updated with.
    pub(crate) stick_key: Vec<u8>,
    /// The request head as a list, for an HTTP/2 server (boxed: only
    /// requests to HTTP/2 servers use it, and the set is moved whole).
    pub(crate) up_head: Option<Box<switchyard_http::request_writer::RequestList>>,
    /// A request head already decoded (an HTTP/2 stream's): its bytes are
    /// `buf`, its fields `fields`; the read-head phase takes it as it is.
    /// Boxed: the set (and each connection's state) stays as small as it was
    /// for HTTP/1.1, which never uses it.
    pub(crate) head: Option<Box<switchyard_http::parse::RequestHead>>,
}

/// The worker's spare scratch sets. A burst of requests leaves as many sets
/// as were in use at its peak; [`ScratchPool::trim`] (each second) frees
/// those no request took since the last trim, so memory held for idle
/// connections follows what they need now, not what a burst once needed.
#[derive(Default)]
pub struct ScratchPool {
    sets: RefCell<Vec<Scratch>>,
    /// The fewest sets the pool held since the last trim: that many sat
    /// unused all the while.
    low: Cell<usize>,
}

impl ScratchPool {
    /// A spare set, or a new empty one (no allocation).
    pub(crate) fn take(&self) -> Scratch {
        let mut sets = self.sets.borrow_mut();
        let s = sets.pop().unwrap_or_default();
        self.low.set(self.low.get().min(sets.len()));
        s
    }

    /// Keeps `s` for the next request, unless `max` sets are spare already.
    pub(crate) fn give(&self, s: Scratch, max: usize) {
        let mut sets = self.sets.borrow_mut();
        if sets.len() < max {
            sets.push(s);
        }
    }

    /// Frees the sets that sat unused since the last trim.
    pub(crate) fn trim(&self) {
        let mut sets = self.sets.borrow_mut();
        let keep = sets.len() - self.low.get().min(sets.len());
        sets.truncate(keep);
        sets.shrink_to(keep.max(16));
        self.low.set(sets.len());
    }

    /// Spare sets held now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.sets.borrow().len()
    }
}

/// A socket bound for one worker.
pub enum Bound {
    /// A listening TCP socket.
    Tcp(SocketAddr, std::net::TcpListener),
    /// A bound UDP socket.
    Udp(SocketAddr, std::net::UdpSocket),
    /// A worker's UDP socket for its QUIC endpoint (HTTP/3) on a listener
    /// address, with what it shares with the other workers' (ADR 0009).
    Quic(SocketAddr, crate::quic_steer::QuicSocket),
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
    /// This worker's tracer, when `[tracing]` is on.
    pub tracer: Option<Rc<crate::otel::Tracer>>,
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
        let tracer = gen.tracing.exporter.as_ref().map(|exporter| {
            let kept = previous.and_then(|p| p.tracer.as_ref()).filter(|t| t.feeds(exporter));
            kept.cloned().unwrap_or_else(|| Rc::new(crate::otel::Tracer::new(exporter.clone())))
        });
        Local { gen, pools, log, tracer }
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
    /// Client connections waiting for their next request, with their deadlines.
    pub idle: crate::idle::Table,
    /// Request working memory lent to connections while they have a request in progress.
    pub scratch: ScratchPool,
    /// A coarse clock (refreshed every second) for idle-connection ages, so
    /// the request path reads no clock for them.
    pub clock: Cell<Instant>,
    seed: u64,
}

impl Worker {
    pub(crate) fn new(id: usize, gen: Arc<Generation>) -> Self {
        let seed = 0x5eed ^ id as u64;
        Worker {
            id,
            current: RefCell::new(Rc::new(Local::new(gen, None, seed))),
            draining: Cell::new(false),
            drain: Notify::new(),
            reloaded: Notify::new(),
            open: Cell::new(0),
            idle: crate::idle::Table::default(),
            clock: Cell::new(Instant::now()),
            scratch: ScratchPool::default(),
            seed,
        }
    }

    /// A scratch set from the worker's pool (or a new, empty one), for a
    /// request that arrives with its head already in hand (an HTTP/2 or
    /// HTTP/3 stream writes it into `buf`); the pipeline returns it to the
    /// pool when the request is done.
    pub(crate) fn lend_scratch(&self) -> Scratch {
        let mut s = self.scratch.take();
        s.buf.clear();
        s
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

    pub(crate) fn install(&self, gen: Arc<Generation>) {
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

/// How long idle connections to servers are kept: the shortest `server_idle`
/// of the services (pools do not know which services use them).
pub fn idle_limit(gen: &Generation) -> Duration {
    gen.config.services.iter().map(|s| s.timeouts.server_idle).min().unwrap_or(Duration::from_secs(30))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spare_scratch_sets_unused_for_a_whole_period_are_freed() {
        let pool = ScratchPool::default();
        for _ in 0..10 {
            pool.give(Scratch::default(), 8);
        }
        assert_eq!(pool.len(), 8, "no more than the bound are kept");
        pool.trim();
        assert_eq!(pool.len(), 8, "a first period starts the count");
        let taken: Vec<Scratch> = (0..3).map(|_| pool.take()).collect();
        taken.into_iter().for_each(|s| pool.give(s, 8));
        pool.trim();
        assert_eq!(pool.len(), 3, "the five never taken are freed, the three in use kept");
        pool.trim();
        assert_eq!(pool.len(), 0, "unused for a whole period: freed");
        assert_eq!(pool.take().buf.capacity(), 0, "an empty pool lends a new, empty set");
    }
}
