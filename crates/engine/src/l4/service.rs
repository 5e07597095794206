//! Serving an accepted connection by its service's mode, and the layer-4
//! services themselves.
//!
//! Order for a TCP connection: the PROXY protocol header first when the peer
//! is a trusted source ([`read_proxy`]); then, by mode, the HTTP pipeline, a
//! relay to a server of the pool (`tcp`), or a peek at the ClientHello to
//! choose the pool by server name and a relay of the untouched bytes
//! (`tls-passthrough`). Persistence of a layer-4 pool is keyed by the client
//! address, by the server name (`sni`), or by the `mstshash` cookie of an RDP
//! connection request, peeked like the ClientHello (`rdp_cookie`). A `udp`
//! listener runs [`serve_udp`]: a flow table per worker (SO_REUSEPORT keeps a
//! client address on one worker).
//!
//! Invariants: no peer input can panic this code; a failure closes only the
//! connection (or drops only the datagram) it belongs to.

use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::time::{Duration, Instant, SystemTime};

use bytes::BytesMut;
use switchyard_config::{Mode, Persistence, PoolId, ProxyVersion, Service};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

use crate::lazy_tcp::LazyTcp;
use crate::live::Proto;
use crate::live::{ActiveGuard, PickView};
use crate::metrics::{Record, Timings, Upstream};
use crate::relay::{self, RelayOptions, UdpOptions, UdpRelay};
use crate::upstream;
use crate::wire::proxy_protocol::{self, Parsed};
use crate::wire::rdp;
use crate::wire::sni::{self, Peek};
use crate::worker::{Local, Worker};

/// Serves an accepted TCP connection according to its service's mode; an
/// HTTP/1.1 connection is handed back for its task to serve
/// ([`crate::front::Http1`]).
pub async fn serve_stream(
    stream: LazyTcp,
    peer: SocketAddr,
    local: Rc<Local>,
    service: usize,
    worker: Rc<Worker>,
) -> Option<crate::front::Http1> {
    let svc = local.gen.config.services.get(service)?;
    let mut stream = stream;
    let (client, pre) = if trusted(svc, peer.ip()) {
        match Box::pin(read_proxy(&mut stream, svc.timeouts.client_header)).await {
            Ok((addr, rest)) => (addr.unwrap_or(peer), rest),
            Err(why) => {
                tracing::warn!(service = %svc.name, client = %peer, reason = why, "PROXY protocol header refused");
                return None;
            }
        }
    } else {
        (peer, BytesMut::new())
    };
    // Client protection, by the connection's client address (PROXY header
    // included). HTTP connections from a trusted front proxy are judged per
    // request instead, by the address its header names. A refused layer-4
    // connection closes at once; an HTTP one answers its request with the
    // refusal's status first.
    let http = matches!(svc.mode, Mode::Http | Mode::Https);
    let mut refused = None;
    let slot = match local.gen.protection.get(service).and_then(Option::as_ref) {
        Some(guard) if !(http && guard.trusts(client.ip())) => {
            match guard.admit_connection(client.ip(), Instant::now()) {
                Ok(slot) => slot,
                Err(why) => {
                    refused = Some(why);
                    None
                }
            }
        }
        _ => None,
    };
    if let (Some(why), false) = (refused, http) {
        tracing::debug!(service = %svc.name, %client, reason = why.label(), "connection refused");
        record(&local, service, &worker, client, None, Some(why.label()), Instant::now(), 0, 0);
        return None;
    }
    // Every branch is boxed: a task's future is as large as its largest
    // state, and an idle HTTP keep-alive connection should not pay for a
    // relay's, a TLS session's or the steps before its first request.
    match svc.mode {
        // Boxed too: the h2c sniff's state is gone once the connection is
        // handed back, so an idle HTTP/1.1 connection holds none of it.
        Mode::Http => {
            let http1 = Box::pin(crate::front::serve_http(stream, client, pre, local, service, worker, refused)).await;
            // The client's connection slot is held as long as the connection.
            return http1.map(|mut http1| {
                http1.slot = slot;
                http1
            });
        }
        Mode::Https => {
            // TLS works on a registered socket.
            let Ok(stream) = stream.into_tokio() else { return None };
            Box::pin(crate::front::serve_https(stream, client, pre, local, service, worker, refused)).await
        }
        Mode::Tcp | Mode::TlsPassthrough => {
            // A layer-4 session is one client connection: open while it relays.
            let metrics = local.gen.services[service].clone();
            metrics.connection_opened(worker.id);
            let _closed = crate::http::ConnectionGuard::new(&metrics, worker.id);
            if svc.mode == Mode::Tcp {
                let mut pre = pre;
                let mut stream = stream;
                if let Err(reset) = first_bytes(&mut stream, &mut pre) {
                    let reason = if reset { "client-reset" } else { "client-error" };
                    record(&local, service, &worker, client, None, Some(reason), Instant::now(), 0, 0);
                    return None;
                }
                Box::pin(relay_to_pool(stream, client, pre, &local, service, &worker, None, None)).await
            } else {
                // The passthrough waits for the ClientHello on a registered socket.
                let Ok(stream) = stream.into_tokio() else { return None };
                Box::pin(passthrough(stream, client, pre, &local, service, &worker)).await
            }
        }
        Mode::Udp => {}
    }
    None
}

/// Whether `ip` may send a PROXY protocol header to `svc`.
fn trusted(svc: &Service, ip: IpAddr) -> bool {
    !svc.accept_proxy.is_empty() && svc.accept_proxy.iter().any(|net| net.contains(ip))
}

/// Reads a PROXY protocol header (v1 or v2) from a trusted source. Returns
/// the client address it carries (`None` for a LOCAL or UNKNOWN header: the
/// socket's own peer stands) and the bytes read after it.
pub async fn read_proxy(
    stream: &mut (impl AsyncRead + Unpin),
    timeout: Duration,
) -> Result<(Option<SocketAddr>, BytesMut), &'static str> {
    let mut buf = BytesMut::with_capacity(512);
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match proxy_protocol::parse(&buf) {
            Ok(Parsed::Complete { header, len }) => {
                let rest = buf.split_off(len);
                return Ok((header.source, rest));
            }
            Ok(Parsed::Incomplete) => {}
            Err(_) => return Err("bad-proxy-header"),
        }
        if buf.len() >= proxy_protocol::MAX_LEN {
            return Err("bad-proxy-header");
        }
        buf.reserve(512);
        match tokio::time::timeout_at(deadline, stream.read_buf(&mut buf)).await {
            Err(_) => return Err("proxy-header-timeout"),
            Ok(Ok(0)) | Ok(Err(_)) => return Err("client-closed"),
            Ok(Ok(_)) => {}
        }
    }
}

/// `tls-passthrough`: reads the ClientHello (without answering it), picks the
/// pool by server name, and relays every byte untouched.
async fn passthrough(
    mut stream: TcpStream,
    client: SocketAddr,
    mut pre: BytesMut,
    local: &Rc<Local>,
    service: usize,
    worker: &Rc<Worker>,
) {
    let svc = &local.gen.config.services[service];
    let deadline = tokio::time::Instant::now() + svc.timeouts.client_header;
    let name = loop {
        match sni::peek(&pre) {
            Peek::Hello(hello) => break hello.sni,
            Peek::NeedMore if pre.len() < sni::MAX_PEEK_LEN => {}
            Peek::NeedMore | Peek::NotTls | Peek::Malformed(_) => {
                tracing::warn!(service = %svc.name, %client, reason = "bad-client-hello", "connection refused");
                return;
            }
        }
        pre.reserve(4096);
        match tokio::time::timeout_at(deadline, stream.read_buf(&mut pre)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return,
        }
    };
    let route = name.as_deref().and_then(|n| svc.sni_routes.iter().find(|r| sni::sni_matches(&r.pattern, n)));
    let pool = route.map(|r| r.pool);
    let stream = LazyTcp::from(stream);
    relay_to_pool(stream, client, pre, local, service, worker, pool, name.as_deref().map(str::as_bytes)).await;
}

/// `rdp_cookie` persistence: reads the client's first bytes (into `pre`, to be
/// relayed as they are) until they hold a whole RDP connection request, and
/// returns its `mstshash` name. A connection that sends something else, nothing
/// within the client header timeout, or more than [`rdp::MAX_PEEK_LEN`] bytes
/// without completing a request has none: it is balanced normally.
async fn peek_rdp_cookie(stream: &mut TcpStream, pre: &mut BytesMut, timeout: Duration) -> Option<Vec<u8>> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match rdp::peek(pre) {
            rdp::Peek::Request(name) => return name.map(<[u8]>::to_vec),
            rdp::Peek::NotRdp => return None,
            rdp::Peek::NeedMore if pre.len() >= rdp::MAX_PEEK_LEN => return None,
            rdp::Peek::NeedMore => {}
        }
        pre.reserve(rdp::MAX_PEEK_LEN);
        match tokio::time::timeout_at(deadline, stream.read_buf(pre)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return None,
        }
    }
}

/// Reads what the client has already sent into `pre` (one `recv`, no
/// waiting, no epoll registration): the bytes then go out with the server's
/// connect and confirm it. Nothing there yet (`WouldBlock`) or the end of
/// the client's stream is fine (the relay sees that end again); a reset or
/// other error ends the connection here (`Err(true)` for a reset).
///
/// The read goes into the worker's one reusable buffer and what came is
/// copied into `pre`: a connection then allocates what its first bytes take
/// (mostly a few hundred bytes), not a fresh 16 KiB each.
fn first_bytes(stream: &mut LazyTcp, pre: &mut BytesMut) -> Result<(), bool> {
    FIRST.with(|room| {
        let mut room = room.borrow_mut();
        room.clear();
        room.reserve(FIRST_READ);
        match stream.try_read_buf(&mut room) {
            Ok(_) => {
                pre.extend_from_slice(&room);
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
            Err(e) => {
                Err(matches!(e.kind(), std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted))
            }
        }
    })
}

/// Room for the client's first bytes, read before the server's connect.
const FIRST_READ: usize = 16 * 1024;

thread_local! {
    /// The worker's buffer for [`first_bytes`] (each worker is one thread).
    static FIRST: std::cell::RefCell<BytesMut> = std::cell::RefCell::new(BytesMut::new());
}

/// Connects to a server of `pool` (else the service's default pool), sends
/// the PROXY header if the pool asks for one and the bytes already read, then
/// relays both ways. A server refusing the connection moves on to the next.
/// `name` is the ClientHello's server name of a `tls-passthrough` connection.
///
/// The steps before the relay run in a boxed future freed when they end
/// ([`join_server`]), so a relay that waits for bytes, which is most of an
/// idle connection's life, holds none of their state. Not an `async fn`: its
/// arguments would keep their own room in the future for the relay's whole
/// life.
#[allow(clippy::too_many_arguments)]
fn relay_to_pool<'a>(
    stream: LazyTcp,
    client: SocketAddr,
    pre: BytesMut,
    local: &'a Rc<Local>,
    service: usize,
    worker: &'a Rc<Worker>,
    pool: Option<PoolId>,
    name: Option<&'a [u8]>,
) -> impl std::future::Future<Output = ()> + 'a {
    let started = Instant::now();
    let joining = Box::pin(join_server(stream, client, pre, local, service, worker, pool, name, started));
    async move {
        let Some(joined) = joining.await else { return };
        let Joined { client_stream, server_stream, pool, server, first, slot } = joined;
        let svc = &local.gen.config.services[service];
        let opts = RelayOptions { zero_copy: svc.l4.zero_copy, idle: svc.l4.idle_timeout, ..RelayOptions::default() };
        let gen = local.gen.number;
        let stay = || !worker.closing(gen, &svc.name);
        let watch = relay::Watch { table: &worker.idle, stay: &stay };
        let out = relay::relay(client_stream, server_stream, opts, watch).await;
        let reason = (out.end != relay::End::Closed).then(|| out.end.reason());
        let bytes_in = out.client_to_server + first;
        record(local, service, worker, client, Some((pool, server)), reason, started, bytes_in, out.server_to_client);
        drop(slot);
    }
}

/// A client connection joined to a server, ready to relay.
struct Joined<'a> {
    client_stream: TcpStream,
    server_stream: TcpStream,
    pool: PoolId,
    server: usize,
    /// Client bytes already sent to the server (read before the connect).
    first: u64,
    /// The connection's slot on the server, held while it relays.
    slot: ActiveGuard<'a>,
}

/// Picks and connects a server for [`relay_to_pool`] and sends it the first
/// message; `None` (recorded here) when no server could be joined.
#[allow(clippy::too_many_arguments)]
async fn join_server<'a>(
    mut stream: LazyTcp,
    client: SocketAddr,
    mut pre: BytesMut,
    local: &'a Rc<Local>,
    service: usize,
    worker: &Rc<Worker>,
    pool: Option<PoolId>,
    name: Option<&[u8]>,
    started: Instant,
) -> Option<Joined<'a>> {
    let svc = &local.gen.config.services[service];
    let Some(pool) = pool.or(svc.default_pool) else {
        record(local, service, worker, client, None, Some("no-pool"), started, 0, 0);
        return None;
    };
    let (cfg, live) = (local.gen.config.pool(pool), &local.gen.pools[pool.0]);
    let persistence = local.gen.persistence.get(pool.0).and_then(Option::as_ref);
    let stick_key = match &cfg.persistence {
        Some(Persistence::RdpCookie(_)) if persistence.is_some() => {
            let registered = stream.registered().ok()?;
            peek_rdp_cookie(registered, &mut pre, svc.timeouts.client_header).await
        }
        Some(Persistence::Sni(_)) => name.map(<[u8]>::to_vec),
        _ => None,
    };
    let sticky = persistence.and_then(|p| p.lookup_with(client.ip(), stick_key.as_deref(), worker.clock.get()));
    let key = upstream::hash_key(&cfg.hash_key, client.ip(), b"", None);
    let mut tried = 0u64;
    let mut head: Option<Vec<u8>> = None;
    for _ in 0..cfg.servers.len().max(1) {
        let picked = match sticky.filter(|&s| live.takes_sticky(cfg, s, tried)) {
            Some(s) => Some(s),
            None => local.pools[pool.0].balancer.borrow_mut().pick(Some(key), &PickView { pool: cfg, live, tried }),
        };
        let Some(server) = picked else { break };
        // Another worker may have taken the server's last slot since the balancer looked.
        let Some(slot) = ActiveGuard::take(&live.servers[server], worker.id, cfg.servers[server].max_connections)
        else {
            continue;
        };
        let addr = cfg.servers[server].addr;
        let deadline = tokio::time::Instant::now() + svc.timeouts.connect;
        let bind = upstream::Bind::of(cfg.source, client.ip());
        // The PROXY header and the client's first bytes go out with the
        // connect, in one send that confirms it (no SO_ERROR read). Without
        // a header the bytes read go as they are, with no copy.
        let message: &[u8] = match cfg.send_proxy {
            None => &pre,
            Some(version) => head.get_or_insert_with(|| first_message(version, client, &stream, &pre)),
        };
        let (mut conn, sent) = match upstream::connect_tcp_sending(bind, addr, deadline, message).await {
            Ok(conn) => {
                live.servers[server].observe(cfg.passive.as_ref(), true, "");
                conn
            }
            Err(e) => {
                live.servers[server].metrics.connect_failed(worker.id, e.reason());
                live.servers[server].observe(cfg.passive.as_ref(), false, e.reason());
                tracing::warn!(service = %svc.name, server = %addr, reason = e.reason(), "connect failed");
                if server < 64 {
                    tried |= 1 << server;
                }
                continue;
            }
        };
        if let Some(p) = persistence {
            p.learn_with(client.ip(), stick_key.as_deref(), server, sticky, worker.clock.get());
        }
        if sent < message.len() && conn.write_all(&message[sent..]).await.is_err() {
            record(local, service, worker, client, Some((pool, server)), Some("server-closed"), started, 0, 0);
            return None;
        }
        // The client joins the event loop once its server is there.
        let Ok(client_stream) = stream.into_tokio() else {
            record(local, service, worker, client, Some((pool, server)), Some("internal-error"), started, 0, 0);
            return None;
        };
        return Some(Joined { client_stream, server_stream: conn, pool, server, first: pre.len() as u64, slot });
    }
    record(local, service, worker, client, None, Some("no-server"), started, pre.len() as u64, 0);
    None
}

/// What a server connection of a `tcp` pool that sends the PROXY header
/// starts with: the header, then the client bytes already read.
fn first_message(version: ProxyVersion, client: SocketAddr, stream: &LazyTcp, pre: &[u8]) -> Vec<u8> {
    use crate::transport::ClientStream;
    let local = stream.local().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    let mut head = Vec::with_capacity(pre.len() + 108);
    match version {
        ProxyVersion::V1 => proxy_protocol::encode_v1(client, local, &mut head),
        ProxyVersion::V2 => {
            let _ = proxy_protocol::encode_v2(client, local, &mut head, &[]);
        }
    }
    head.extend_from_slice(pre);
    head
}

/// The log phase of a layer-4 session: one record for the whole connection.
#[allow(clippy::too_many_arguments)]
fn record(
    local: &Local,
    service: usize,
    worker: &Worker,
    client: SocketAddr,
    upstream: Option<(PoolId, usize)>,
    reason: Option<&'static str>,
    started: Instant,
    bytes_in: u64,
    bytes_out: u64,
) {
    let gen = &local.gen;
    let svc = &gen.config.services[service];
    let server =
        upstream.and_then(|(p, s)| Some((&gen.config.pools.get(p.0)?.name, gen.pools.get(p.0)?.servers.get(s)?)));
    let total_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    if let Some(why) = reason.filter(|r| matches!(*r, "no-pool" | "no-server" | "server-closed")) {
        tracing::warn!(service = %svc.name, %client, reason = why, "connection failed");
    }
    let record = Record {
        service: &svc.name,
        client,
        method: b"",
        target: b"",
        version: "TCP",
        host: None,
        status: 0,
        bytes_in,
        bytes_out,
        body_bytes_out: bytes_out,
        streamed: (0, 0),
        upstream: server.map(|(pool, live)| Upstream { pool, server: &live.name, addr: live.addr }),
        timings: Timings { total_us, ..Timings::default() },
        reason,
        side: None,
        user_agent: None,
        referer: None,
        start: match local.log {
            Some(_) => SystemTime::now() - Duration::from_micros(total_us),
            None => SystemTime::UNIX_EPOCH,
        },
        cache: None,
        grpc_status: None,
        trace_id: None,
    };
    if let Some(m) = gen.services.get(service) {
        m.request(worker.id, &record);
    }
    if let Some((_, live)) = server {
        live.metrics.request(worker.id, &record);
    }
    if let Some(line) = &local.log {
        line.log(&record);
    }
}

/// Serves a `udp` listener of this worker until the worker drains or a
/// reload removes the listener. Each new client (flow) gets a server from
/// the pool's balancer of the generation current at that moment.
pub async fn serve_udp(worker: Rc<Worker>, addr: SocketAddr, socket: UdpSocket) {
    let local = worker.local();
    let Some(&service) = local.gen.listeners.get(&(Proto::Udp, addr)) else {
        return;
    };
    let svc = &local.gen.config.services[service];
    let name = svc.name.clone();
    let board = local.gen.udp[service].clone();
    let opts = UdpOptions { idle: svc.l4.flow_idle, max_flows: svc.l4.max_flows, per_datagram: svc.l4.per_datagram };
    drop(local);
    let picker = worker.clone();
    let pick = move |client: SocketAddr| -> Option<SocketAddr> {
        let local = picker.local();
        let service = *local.gen.listeners.get(&(Proto::Udp, addr))?;
        let pool = local.gen.config.services[service].default_pool?;
        let (cfg, live) = (local.gen.config.pool(pool), &local.gen.pools[pool.0]);
        let key = upstream::hash_key(&cfg.hash_key, client.ip(), b"", None);
        let view = PickView { pool: cfg, live, tried: 0 };
        let server = local.pools[pool.0].balancer.borrow_mut().pick(Some(key), &view)?;
        Some(cfg.servers[server].addr)
    };
    let watcher = worker.clone();
    let stop = async move {
        loop {
            if watcher.draining.get() || !watcher.local().gen.listeners.contains_key(&(Proto::Udp, addr)) {
                return;
            }
            tokio::select! {
                () = watcher.drain.notified() => {}
                () = watcher.reloaded.notified() => {}
            }
        }
    };
    let relay = UdpRelay::new(Rc::new(socket), opts);
    let publisher = {
        let (relay, board, id) = (relay.clone(), board.clone(), worker.id);
        tokio::task::spawn_local(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                board.set(id, relay.stats());
            }
        })
    };
    let stats = relay.clone().serve(pick, stop).await;
    publisher.abort();
    board.set(worker.id, stats);
    tracing::info!(service = %name, %addr, flows = stats.created, refused = stats.refused, "udp listener stopped");
}

#[cfg(test)]
mod tests {
    /// A relaying connection, what an idle layer-4 connection is, holds a
    /// small future: the relay and what the log record needs, none of the
    /// steps before it (boxed and freed, see [`super::join_server`]). Bounds
    /// with room for compiler changes (a test build's sizes; release ones are
    /// smaller), so that a state put back inline fails here rather than as
    /// memory per connection in the bench.
    #[test]
    fn a_relaying_connection_holds_a_small_future() {
        fn size8<A, B, C, D, E, G, H, I, F>(_: fn(A, B, C, D, E, G, H, I) -> F) -> usize {
            std::mem::size_of::<F>()
        }
        fn size5<A, B, C, D, E, F>(_: fn(A, B, C, D, E) -> F) -> usize {
            std::mem::size_of::<F>()
        }
        let relaying = size8(super::relay_to_pool);
        let serving = size5(super::serve_stream);
        let relay = std::mem::size_of::<crate::relay::Relay<'static>>();
        eprintln!("relay_to_pool {relaying} B, serve_stream {serving} B, relay {relay} B");
        assert!(relaying <= 640, "a relaying connection's future is {relaying} bytes");
        assert!(serving <= 512, "serve_stream's future is {serving} bytes");
    }
}
