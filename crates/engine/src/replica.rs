//! The data path's handoff to replication: the [`Update`]s that persistence
//! ([`crate::persist`]) and protection ([`crate::protection`]) offer, and the
//! bounded per-peer queues of the [`Outbox`] they offer them to. A leaf, so
//! that the tables and the replication thread (`peers`), which reads them, do
//! not import each other.
//!
//! Invariants: [`Outbox::push`] never blocks: a full queue drops the update,
//! counts it, and marks the peer for a full copy once its link drains.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::sync::mpsc;

/// Which stick table a record is for (the pool's persistence kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TableKind {
    /// Keyed by client address (4 or 16 bytes on the wire).
    Source,
    /// Keyed by a request header's value.
    Header,
    /// Keyed by the servers' session cookie.
    CookieLearn,
    /// Keyed by the RDP `mstshash` cookie.
    Rdp,
    /// Keyed by the TLS server name.
    Sni,
}

impl TableKind {
    /// Its code on the wire.
    pub(crate) fn code(self) -> u8 {
        match self {
            TableKind::Source => 0,
            TableKind::Header => 1,
            TableKind::CookieLearn => 2,
            TableKind::Rdp => 3,
            TableKind::Sni => 4,
        }
    }

    /// The kind of a wire code.
    pub(crate) fn of(code: u8) -> Option<TableKind> {
        Some(match code {
            0 => TableKind::Source,
            1 => TableKind::Header,
            2 => TableKind::CookieLearn,
            3 => TableKind::Rdp,
            4 => TableKind::Sni,
            _ => return None,
        })
    }
}

/// One change on its way to the peers.
#[derive(Debug, Clone)]
pub enum Update {
    /// A stick-table entry learned, refreshed or removed.
    Stick(StickUpdate),
    /// A client's rate-limit buckets, after an event that left one of them
    /// more than half used ([`crate::protection`]).
    Rate(RateUpdate),
}

impl Update {
    /// When it was handed over: the lag is measured from here.
    pub fn queued(&self) -> Instant {
        match self {
            Update::Stick(u) => u.queued,
            Update::Rate(u) => u.queued,
        }
    }
}

/// One change of one stick table.
#[derive(Debug, Clone)]
pub struct StickUpdate {
    /// Pool name.
    pub pool: Arc<str>,
    /// The pool's persistence kind.
    pub kind: TableKind,
    /// The key in wire form (address bytes for source persistence).
    pub key: Box<[u8]>,
    /// The server it now sticks to; `None` when the entry was removed.
    pub server: Option<Arc<str>>,
    /// When it happened (the entry's last use, by the worker's coarse clock).
    pub at: Instant,
    /// When it was handed over (a precise clock): the lag is measured from here.
    pub queued: Instant,
}

/// One client's rate-limit buckets in one service's protection table, as
/// time ahead of `at` (zero: that bucket is full).
#[derive(Debug, Clone)]
pub struct RateUpdate {
    /// Service name.
    pub service: Arc<str>,
    /// The client address.
    pub client: std::net::IpAddr,
    /// The connection bucket's theoretical arrival time, less `at`.
    pub connection: Duration,
    /// The request bucket's, likewise.
    pub request: Duration,
    /// The instant the two durations are counted from.
    pub at: Instant,
    /// When it was handed over: the lag is measured from here.
    pub queued: Instant,
}

/// Counters and state of one peer, for the admin API and metrics.
#[derive(Debug, Default)]
pub struct PeerStats {
    /// Our connection to the peer is up and authenticated.
    pub connected: AtomicBool,
    /// The peer's connection to us is up and authenticated.
    pub inbound: AtomicBool,
    /// Updates sent (full copies included).
    pub sent: AtomicU64,
    /// Updates received from the peer (full copies included).
    pub received: AtomicU64,
    /// Updates dropped because the peer's queue was full.
    pub dropped: AtomicU64,
    /// Microseconds from an update's learning to the peer's acknowledgement, last batch.
    pub lag_us: AtomicU64,
    /// Full copies sent to the peer.
    pub syncs_sent: AtomicU64,
    /// Full copies received from the peer.
    pub syncs_received: AtomicU64,
    /// Updates were dropped: send a full copy once the queue drains.
    pub(crate) resync: AtomicBool,
}

/// One configured peer: its queue and its counters.
pub struct PeerLink {
    /// Peer name.
    pub name: String,
    /// Its replication address.
    pub address: SocketAddr,
    /// Counters.
    pub stats: PeerStats,
    tx: mpsc::Sender<Update>,
    pub(crate) rx: Mutex<Option<mpsc::Receiver<Update>>>,
    capacity: usize,
    /// Set when the peer leaves the configuration: its dialer stops.
    pub(crate) removed: AtomicBool,
}

impl PeerLink {
    pub(crate) fn new(peer: &switchyard_config::ClusterPeer, capacity: usize) -> Arc<Self> {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        Arc::new(PeerLink {
            name: peer.name.clone(),
            address: peer.address,
            stats: PeerStats::default(),
            tx,
            rx: Mutex::new(Some(rx)),
            capacity,
            removed: AtomicBool::new(false),
        })
    }

    fn offer(&self, update: Update) {
        if self.tx.try_send(update).is_err() {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            self.stats.resync.store(true, Ordering::Relaxed);
        }
    }

    /// Updates waiting in the queue.
    pub fn queued(&self) -> usize {
        self.capacity.saturating_sub(self.tx.capacity())
    }
}

/// Where the data path hands updates; shared by every pool's persistence and
/// every service's protection.
#[derive(Default)]
pub struct Outbox {
    pub(crate) links: ArcSwap<Vec<Arc<PeerLink>>>,
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox").field("peers", &self.links.load().len()).finish()
    }
}

impl Outbox {
    /// Offers `update` to every peer; never blocks (a full queue drops and counts).
    pub fn push(&self, update: Update) {
        let links = self.links.load();
        if let Some((last, rest)) = links.split_last() {
            rest.iter().for_each(|l| l.offer(update.clone()));
            last.offer(update);
        }
    }
}
