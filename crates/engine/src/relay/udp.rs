//! UDP load balancing: the flow table and the loop that serves one listener
//! socket.
//!
//! A *flow* is everything the relay keeps for one client address: when it was
//! last active and one upstream socket per server it has sent to, each bound
//! to an ephemeral port and `connect`ed to its server. Replies are routed by
//! socket, not by content: whatever arrives on an upstream socket can only
//! come from its server (the kernel filters by the connected address) and
//! belongs to the one client whose flow owns the socket. That is also how
//! per-datagram balancing ([`UdpOptions::per_datagram`]) keeps replies right:
//! every datagram picks its server afresh and goes out through the client's
//! socket for that server (opened on first use), so a reply comes back on a
//! socket that names the client.
//!
//! Invariants:
//! - The table never holds more than `max_flows` flows. A datagram from a new
//!   client when it is full is dropped and counted as refused; existing flows
//!   are never evicted to make room. Client addresses are trivially spoofed,
//!   so evicting the least recently used flow would let a flood of fake
//!   sources push every real client off its server; refusing keeps the
//!   damage to new clients and shows in a counter, and idle expiry frees room.
//! - A flow idle (no datagram either way) for `idle` is gone: a lookup treats
//!   it as absent at once, a periodic sweep frees its sockets.
//! - Time is passed in, so the table is tested without sleeping; the table is
//!   keyed with std's SipHash, which a peer choosing addresses cannot collide.
//! - One receive buffer for the listener and one shared by all reply tasks,
//!   allocated once; the shared one is never borrowed across an `.await`.

use std::cell::RefCell;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::rc::Rc;
use std::time::{Duration, Instant};

use tokio::net::UdpSocket;
use tokio::task::AbortHandle;

/// Larger than any UDP payload (65,507 bytes over IPv4), so nothing is cut.
const MAX_DATAGRAM: usize = 64 * 1024;

/// How a UDP service balances and forgets flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpOptions {
    /// A flow with no datagram in either direction for this long is gone.
    pub idle: Duration,
    /// At most this many flows at once; new clients beyond it are refused.
    pub max_flows: usize,
    /// Balance every datagram on its own instead of keeping a client on the
    /// server its first datagram went to.
    pub per_datagram: bool,
}

impl Default for UdpOptions {
    fn default() -> Self {
        UdpOptions { idle: Duration::from_secs(60), max_flows: 65_536, per_datagram: false }
    }
}

/// Counters of a flow table (all since it was made, except `active`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowStats {
    /// Flows now in the table.
    pub active: u64,
    /// Flows created.
    pub created: u64,
    /// Flows forgotten after their idle timeout.
    pub expired: u64,
    /// Datagrams from new clients dropped because the table was full.
    pub refused: u64,
    /// Datagrams dropped for other reasons: no server to pick, an upstream
    /// socket could not be opened, a send failed or found a full buffer.
    pub dropped: u64,
    /// Datagrams sent to servers.
    pub datagrams_to_server: u64,
    /// Payload bytes sent to servers.
    pub bytes_to_server: u64,
    /// Datagrams sent back to clients.
    pub datagrams_to_client: u64,
    /// Payload bytes sent back to clients.
    pub bytes_to_client: u64,
}

/// One client's flow: its upstreams (server address and handle `U`, the
/// first one being the server a sticky flow stays on) and last activity.
#[derive(Debug)]
pub struct Flow<U> {
    upstreams: Vec<(SocketAddr, U)>,
    last: Instant,
}

impl<U> Flow<U> {
    /// The server a sticky flow sends to: the first one it was given.
    pub fn server(&self) -> Option<SocketAddr> {
        self.upstreams.first().map(|(server, _)| *server)
    }

    /// The flow's upstream towards `server`, if it has one.
    pub fn upstream(&self, server: SocketAddr) -> Option<&U> {
        self.upstreams.iter().find(|(s, _)| *s == server).map(|(_, u)| u)
    }

    /// Adds an upstream towards `server` (per-datagram flows gain one per
    /// server they use).
    pub fn add_upstream(&mut self, server: SocketAddr, upstream: U) {
        self.upstreams.push((server, upstream));
    }

    /// Every server the flow has an upstream to.
    pub fn servers(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        self.upstreams.iter().map(|(s, _)| *s)
    }

    fn is_stale(&self, now: Instant, idle: Duration) -> bool {
        now.saturating_duration_since(self.last) >= idle
    }
}

/// What [`FlowTable::admit`] found for a client.
#[derive(Debug)]
pub enum Admit<'a, U> {
    /// The client's live flow.
    Flow(&'a mut Flow<U>),
    /// No flow, and room for one.
    Vacant,
    /// No flow and no room: the datagram is refused (already counted).
    Refused,
}

/// Client address → flow, bounded by `max_flows`, flows forgotten after
/// `idle` without traffic. Generic over the upstream handle `U` so the
/// bookkeeping is tested without sockets.
#[derive(Debug)]
pub struct FlowTable<U> {
    flows: HashMap<SocketAddr, Flow<U>>,
    max_flows: usize,
    idle: Duration,
    stats: FlowStats,
}

impl<U> FlowTable<U> {
    /// An empty table.
    pub fn new(max_flows: usize, idle: Duration) -> Self {
        FlowTable { flows: HashMap::new(), max_flows, idle, stats: FlowStats::default() }
    }

    /// Looks up `client`'s flow. A flow past its idle timeout is dropped
    /// here (counted as expired) and reported absent; a missing flow with no
    /// room left counts one refusal.
    pub fn admit(&mut self, client: SocketAddr, now: Instant) -> Admit<'_, U> {
        let full = self.flows.len() >= self.max_flows;
        match self.flows.entry(client) {
            Entry::Occupied(e) if !e.get().is_stale(now, self.idle) => return Admit::Flow(e.into_mut()),
            Entry::Occupied(e) => {
                e.remove();
                self.stats.expired += 1;
                // The stale flow's place is free again.
                return Admit::Vacant;
            }
            Entry::Vacant(_) if full => {}
            Entry::Vacant(_) => return Admit::Vacant,
        }
        self.stats.refused += 1;
        Admit::Refused
    }

    /// Creates `client`'s flow with its first upstream. `None` (counted as
    /// refused) when the table is full.
    pub fn insert(
        &mut self,
        client: SocketAddr,
        server: SocketAddr,
        upstream: U,
        now: Instant,
    ) -> Option<&mut Flow<U>> {
        if self.flows.len() >= self.max_flows && !self.flows.contains_key(&client) {
            self.stats.refused += 1;
            return None;
        }
        self.stats.created += 1;
        let flow = Flow { upstreams: vec![(server, upstream)], last: now };
        Some(match self.flows.entry(client) {
            Entry::Occupied(mut e) => {
                e.insert(flow);
                e.into_mut()
            }
            Entry::Vacant(e) => e.insert(flow),
        })
    }

    /// Counts a datagram of `bytes` sent to a server for `client` and marks
    /// its flow active.
    pub fn note_to_server(&mut self, client: SocketAddr, bytes: usize, now: Instant) {
        self.stats.datagrams_to_server += 1;
        self.stats.bytes_to_server += bytes as u64;
        if let Some(flow) = self.flows.get_mut(&client) {
            flow.last = now;
        }
    }

    /// Counts a datagram of `bytes` sent back to `client` and marks its flow
    /// active (unless it has idled out already: a late reply does not revive
    /// a flow that lookups treat as gone).
    pub fn note_to_client(&mut self, client: SocketAddr, bytes: usize, now: Instant) {
        self.stats.datagrams_to_client += 1;
        self.stats.bytes_to_client += bytes as u64;
        if let Some(flow) = self.flows.get_mut(&client) {
            if !flow.is_stale(now, self.idle) {
                flow.last = now;
            }
        }
    }

    /// Counts a dropped datagram.
    pub fn note_dropped(&mut self) {
        self.stats.dropped += 1;
    }

    /// Forgets every flow idle at `now`; returns how many.
    pub fn expire(&mut self, now: Instant) -> usize {
        let before = self.flows.len();
        let idle = self.idle;
        self.flows.retain(|_, flow| !flow.is_stale(now, idle));
        let expired = before - self.flows.len();
        self.stats.expired += expired as u64;
        expired
    }

    /// Forgets every flow (not counted as expired): the service stops.
    pub fn clear(&mut self) {
        self.flows.clear();
    }

    /// Flows in the table.
    pub fn len(&self) -> usize {
        self.flows.len()
    }

    /// Whether the table has no flow.
    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// The counters, with `active` filled in.
    pub fn stats(&self) -> FlowStats {
        FlowStats { active: self.flows.len() as u64, ..self.stats }
    }
}

/// A flow's socket towards one server and the task carrying its replies;
/// dropping it (flow expired or service stopped) ends the task, and the
/// socket closes with the task's last reference.
#[derive(Debug)]
struct Upstream {
    socket: Rc<UdpSocket>,
    replies: AbortHandle,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.replies.abort();
    }
}

/// Why a datagram from a client was not sent.
enum NoRoute {
    Refused,
    Dropped,
}

/// Serves one UDP listener socket: clients' datagrams out to servers through
/// their flows, servers' replies back to the right clients.
#[derive(Debug)]
pub struct UdpRelay {
    listener: Rc<UdpSocket>,
    opts: UdpOptions,
    table: RefCell<FlowTable<Upstream>>,
    /// Shared by every reply task; borrowed only between two `.await`s.
    reply_buf: RefCell<Box<[u8]>>,
}

/// Serves `listener` until `stop` completes; returns the final counters.
/// Shorthand for [`UdpRelay::new`] then [`UdpRelay::serve`]. Must run inside
/// a `LocalSet` (reply tasks are spawned with `spawn_local`).
pub async fn serve_udp<F, S>(listener: Rc<UdpSocket>, pick: F, opts: UdpOptions, stop: S) -> FlowStats
where
    F: FnMut(SocketAddr) -> Option<SocketAddr>,
    S: Future,
{
    UdpRelay::new(listener, opts).serve(pick, stop).await
}

impl UdpRelay {
    /// A relay for `listener`, serving nothing until [`UdpRelay::serve`].
    pub fn new(listener: Rc<UdpSocket>, opts: UdpOptions) -> Rc<Self> {
        Rc::new(UdpRelay {
            listener,
            opts,
            table: RefCell::new(FlowTable::new(opts.max_flows, opts.idle)),
            reply_buf: RefCell::new(vec![0; MAX_DATAGRAM].into_boxed_slice()),
        })
    }

    /// The counters so far (for metrics, from any task of the worker).
    pub fn stats(&self) -> FlowStats {
        self.table.borrow().stats()
    }

    /// Serves until `stop` completes, then closes every flow and returns the
    /// final counters. `pick` chooses a server for a client (`None`: no
    /// server available, the datagram is dropped); it is asked once per new
    /// flow, or once per datagram with `per_datagram`. Must run inside a
    /// `LocalSet`.
    pub async fn serve<F, S>(self: Rc<Self>, mut pick: F, stop: S) -> FlowStats
    where
        F: FnMut(SocketAddr) -> Option<SocketAddr>,
        S: Future,
    {
        let mut buf = vec![0; MAX_DATAGRAM].into_boxed_slice();
        // Lookups expire flows exactly; the sweep only frees their sockets,
        // so it can be coarse.
        let every = (self.opts.idle / 2).clamp(Duration::from_millis(10), Duration::from_secs(5));
        let mut sweep = tokio::time::interval(every);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = &mut stop => break,
                _ = sweep.tick() => {
                    self.table.borrow_mut().expire(now());
                }
                got = self.listener.recv_from(&mut buf) => match got {
                    Ok((n, client)) => self.forward(&buf[..n], client, &mut pick).await,
                    // Errors on an unconnected socket concern one datagram
                    // (or an ICMP report); the listener itself is fine.
                    Err(e) => tracing::debug!(error = %e, "udp listener receive failed"),
                },
            }
        }
        self.table.borrow_mut().clear();
        self.stats()
    }

    /// Sends one client datagram to its server and counts it.
    async fn forward<F>(self: &Rc<Self>, datagram: &[u8], client: SocketAddr, pick: &mut F)
    where
        F: FnMut(SocketAddr) -> Option<SocketAddr>,
    {
        let now = now();
        let socket = match self.route(client, pick, now) {
            Ok(socket) => socket,
            Err(NoRoute::Refused) => return,
            Err(NoRoute::Dropped) => return self.table.borrow_mut().note_dropped(),
        };
        // Awaiting here waits only for a new socket's first readiness or a
        // full send buffer; the table is not borrowed meanwhile.
        let sent = socket.send(datagram).await;
        let mut table = self.table.borrow_mut();
        match sent {
            Ok(_) => table.note_to_server(client, datagram.len(), now),
            Err(e) => {
                tracing::debug!(error = %e, %client, "udp send to server failed");
                table.note_dropped();
            }
        }
    }

    /// The upstream socket `client`'s datagram goes out on, creating the
    /// flow or the upstream as needed.
    fn route<F>(self: &Rc<Self>, client: SocketAddr, pick: &mut F, now: Instant) -> Result<Rc<UdpSocket>, NoRoute>
    where
        F: FnMut(SocketAddr) -> Option<SocketAddr>,
    {
        let mut table = self.table.borrow_mut();
        match table.admit(client, now) {
            Admit::Refused => Err(NoRoute::Refused),
            Admit::Flow(flow) => {
                let server = match (self.opts.per_datagram, flow.server()) {
                    (false, Some(server)) => server,
                    _ => pick(client).ok_or(NoRoute::Dropped)?,
                };
                if let Some(up) = flow.upstream(server) {
                    return Ok(up.socket.clone());
                }
                let up = self.open(client, server)?;
                let socket = up.socket.clone();
                flow.add_upstream(server, up);
                Ok(socket)
            }
            Admit::Vacant => {
                let server = pick(client).ok_or(NoRoute::Dropped)?;
                let up = self.open(client, server)?;
                let socket = up.socket.clone();
                table.insert(client, server, up, now).ok_or(NoRoute::Refused)?;
                Ok(socket)
            }
        }
    }

    /// Opens `client`'s socket towards `server` and starts its reply task.
    fn open(self: &Rc<Self>, client: SocketAddr, server: SocketAddr) -> Result<Upstream, NoRoute> {
        let socket = connect_udp(server).map_err(|e| {
            tracing::debug!(error = %e, %server, "cannot open udp socket to server");
            NoRoute::Dropped
        })?;
        let socket = Rc::new(socket);
        let replies = tokio::task::spawn_local(self.clone().replies(client, socket.clone())).abort_handle();
        Ok(Upstream { socket, replies })
    }

    /// Carries replies arriving on `upstream` back to `client` through the
    /// listener socket, until aborted with its flow.
    async fn replies(self: Rc<Self>, client: SocketAddr, upstream: Rc<UdpSocket>) {
        loop {
            // Waiting for the listener first means a failed send below is a
            // genuinely full buffer, where dropping is what UDP does anyway.
            if upstream.readable().await.is_err() || self.listener.writable().await.is_err() {
                return;
            }
            let mut buf = self.reply_buf.borrow_mut();
            let n = match upstream.try_recv(&mut buf) {
                Ok(n) => n,
                // WouldBlock: a spurious wake-up. Others: an ICMP error (the
                // server's port is closed) reported on the connected socket;
                // the flow lives on until idle, as the server may come back.
                Err(_) => continue,
            };
            let sent = self.listener.try_send_to(&buf[..n], client);
            drop(buf);
            let mut table = self.table.borrow_mut();
            match sent {
                Ok(_) => table.note_to_client(client, n, now()),
                Err(_) => table.note_dropped(),
            }
        }
    }
}

/// A UDP socket on an ephemeral port, connected to `server`.
fn connect_udp(server: SocketAddr) -> io::Result<UdpSocket> {
    let any: SocketAddr = match server {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = std::net::UdpSocket::bind(any)?;
    socket.connect(server)?;
    socket.set_nonblocking(true)?;
    UdpSocket::from_std(socket)
}

/// The flow table's clock: tokio's, so tests with paused time work too.
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}
