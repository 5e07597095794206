//! Peers: replicating persistence state between the nodes of an active/standby
//! pair (`[cluster]`). The virtual address moves by VRRP, which keepalived does;
//! this module makes the standby know every client's server when it arrives.
//!
//! Data path → [`Outbox::push`]: a learned, refreshed or removed stick-table
//! entry, or a client's rate-limit buckets once an event leaves one more than
//! half used (see [`crate::protection`]), becomes an [`Update`] offered to
//! every peer's bounded queue with
//! `try_send`. It never blocks and never waits on the network: when a queue is
//! full the update is dropped, counted, and the peer is marked for a full copy
//! once its link drains (so a slow or partitioned peer converges again).
//!
//! One thread (`switchyard-peers`, its own runtime) runs, per peer, a *dialer*
//! that connects, proves the shared key (see [`wire`]), sends a full copy of
//! every stick table, then streams batches from the queue; and one *acceptor*
//! that takes the other nodes' connections, refuses (and logs) any that cannot
//! prove the key, and merges what they send: for stick tables **newest write
//! wins**, by the entry's last use ([`switchyard_balance::StickTable::merge`]);
//! for rate-limit buckets **the later theoretical arrival time wins** (the
//! fuller bucket), so replication never loosens a limit. Connection counts
//! are not replicated: connections do not move with the address.
//!
//! A node is [`ready`](Cluster::ready) (what `switchyard ctl health` reports to
//! keepalived) once it has received one full copy from a peer, or when it has no
//! peer, or when `sync_timeout` has passed since it started (the peer is then
//! presumed dead: a lone survivor must still take the address).
//!
//! Invariants: memory is bounded by `queue` updates per peer plus one batch in
//! flight; a peer's bytes never panic the process ([`wire`] decodes totally);
//! peers come and go by reload, through [`Cluster::configure`].

mod link;
pub mod wire;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::sync::{watch, Notify};

pub use crate::replica::{Outbox, PeerLink, PeerStats, RateUpdate, StickUpdate, TableKind, Update};

use crate::live::Generation;

/// How the peers thread reads the generation being served.
pub type Generations = Arc<dyn Fn() -> Option<Arc<Generation>> + Send + Sync>;

/// The running cluster state of this node.
pub struct Cluster {
    /// This node's name.
    pub node: String,
    outbox: Arc<Outbox>,
    config: ArcSwap<switchyard_config::Cluster>,
    started: Instant,
    /// A full copy arrived from some peer.
    synced: AtomicBool,
    /// Connections refused for failing authentication (or not being a peer).
    pub refused: AtomicU64,
    /// Woken when the peer list changes.
    changed: Notify,
}

impl Cluster {
    /// The state of a node configured by `config`, with no connection yet.
    pub fn new(config: &switchyard_config::Cluster) -> Arc<Self> {
        let links = config.peers.iter().map(|p| PeerLink::new(p, config.queue)).collect();
        let outbox = Arc::new(Outbox { links: ArcSwap::from_pointee(links) });
        Arc::new(Cluster {
            node: config.name.clone(),
            outbox,
            config: ArcSwap::from_pointee(config.clone()),
            started: Instant::now(),
            synced: AtomicBool::new(false),
            refused: AtomicU64::new(0),
            changed: Notify::new(),
        })
    }

    /// The outbox persistence tables hand their changes to.
    pub fn outbox(&self) -> Arc<Outbox> {
        self.outbox.clone()
    }

    /// The peers, in configuration order.
    pub fn peers(&self) -> Arc<Vec<Arc<PeerLink>>> {
        self.outbox.links.load_full()
    }

    /// Applies a reloaded `[cluster]`: new peers get a queue and a dialer, removed
    /// ones stop, kept ones (same name and address) keep their queue and counters.
    /// The key and queue size apply to new connections and new peers. `name` and
    /// `listen` apply at the next restart (the caller warns).
    pub fn configure(&self, config: &switchyard_config::Cluster) {
        let old = self.peers();
        let links: Vec<Arc<PeerLink>> = config
            .peers
            .iter()
            .map(|p| {
                old.iter()
                    .find(|l| l.name == p.name && l.address == p.address)
                    .cloned()
                    .unwrap_or_else(|| PeerLink::new(p, config.queue))
            })
            .collect();
        for gone in old.iter().filter(|l| !links.iter().any(|n| Arc::ptr_eq(n, l))) {
            gone.removed.store(true, Ordering::Relaxed);
            tracing::info!(peer = gone.name, "cluster peer removed");
        }
        self.config.store(Arc::new(config.clone()));
        self.outbox.links.store(Arc::new(links));
        self.changed.notify_one();
    }

    /// Whether this node may take traffic as far as replication goes: it holds a
    /// full copy from a peer, or it has no peer, or `sync_timeout` has passed.
    pub fn ready(&self) -> bool {
        let config = self.config.load();
        self.synced() || config.peers.is_empty() || self.started.elapsed() >= config.sync_timeout
    }

    /// Whether a full copy arrived from some peer since start.
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Relaxed)
    }

    fn key(&self) -> Vec<u8> {
        self.config.load().key.as_bytes().to_vec()
    }

    fn link(&self, name: &str) -> Option<Arc<PeerLink>> {
        self.peers().iter().find(|l| l.name == name).cloned()
    }
}

/// Starts the peers thread: the acceptor on `[cluster] listen` (bound before this
/// returns, so a busy address fails the start) and one dialer per peer.
pub fn spawn(
    cluster: Arc<Cluster>,
    generations: Generations,
    stop: watch::Receiver<bool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let listen = cluster.config.load().listen;
    let listener = {
        let _enter = runtime.enter();
        link::bind(listen)?
    };
    std::thread::Builder::new()
        .name("switchyard-peers".into())
        .spawn(move || runtime.block_on(link::run(cluster, generations, listener, stop)))
}

/// Default pause between connection attempts to a peer (doubles up to [`MAX_BACKOFF`]).
const BACKOFF: Duration = Duration::from_millis(100);
/// Longest pause between connection attempts.
const MAX_BACKOFF: Duration = Duration::from_millis(250);
