//! Upstream side: choosing a server, connecting, and keeping idle keep-alive
//! connections per worker so many client requests share few server connections.
//!
//! Idle connections live in the worker that opened them (no locks): a stack
//! per (pool, server), newest on top, so the warmest connection is reused
//! first and the oldest age out. In-flight counts per server are shared by all
//! workers (atomics) because connection limits and least-connections are
//! properties of the server, not of one worker.
//!
//! A connection is clear TCP or TLS ([`stream::ServerStream`]); the connect
//! phase ([`connect`]) is TCP connect, then the PROXY header when the pool
//! sends one, then the TLS handshake when the pool re-encrypts ([`tls`]), all
//! within the connect timeout. Idle pooling treats both kinds alike.
//!
//! The TCP connect binds a source address first only when the pool's
//! `source` says so ([`Bind`]): the client's own (transparent mode, such a
//! connection speaks for one client and is never pooled) or a fixed one.
//! Without it the connect is the plain one, so the default costs nothing.
//!
//! Pools with `protocol = "h2"` do not use the idle stacks: their requests
//! are streams multiplexed over shared HTTP/2 connections ([`h2`]).

pub mod h2;
pub mod queue;
pub mod stream;
pub mod tls;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use switchyard_config::{HashKey, Pool, Source};
use tokio::net::{TcpSocket, TcpStream};

use self::stream::ServerStream;
use self::tls::PoolTls;
use switchyard_http::error::{Kind, ProxyError};

/// Initial capacity of an upstream connection's read buffer.
const UPSTREAM_BUF: usize = 16 * 1024;
/// Idle connections per server (per worker) that keep their read buffer;
/// those above it in the stack keep their socket only.
const BUFFERED_IDLE: usize = 256;

/// A connection to a server, with its read buffer.
#[derive(Debug)]
pub struct UpstreamConn {
    /// The socket, clear or TLS.
    pub stream: ServerStream,
    /// Bytes read from the server and not yet consumed.
    pub buf: BytesMut,
    /// Requests already completed on this connection.
    pub served: u32,
}

/// An idle pooled connection and when it went idle.
#[derive(Debug)]
pub struct IdleConn {
    conn: UpstreamConn,
    since: Instant,
}

/// One worker's idle connections to one pool: a stack per server.
#[derive(Debug, Default)]
pub struct IdleStacks {
    stacks: Vec<Vec<IdleConn>>,
}

impl IdleStacks {
    /// Empty stacks, one per server of `pool`.
    pub fn new(pool: &Pool) -> Self {
        IdleStacks { stacks: pool.servers.iter().map(|_| Vec::new()).collect() }
    }

    /// Stacks for a reloaded pool: the idle connections of `old`'s servers
    /// that `pool` still has at the same address move over; the rest close.
    /// None move when the pool's TLS settings changed: a connection made
    /// under other trust, name or client certificate (or in clear text) must
    /// not carry requests the new settings govern.
    pub fn carried(pool: &Pool, old_pool: &Pool, old: &mut IdleStacks) -> Self {
        if pool.tls != old_pool.tls {
            return IdleStacks::new(pool);
        }
        let stacks = pool
            .servers
            .iter()
            .map(|server| {
                old_pool
                    .servers
                    .iter()
                    .position(|o| o.name == server.name && o.addr == server.addr)
                    .and_then(|i| old.stacks.get_mut(i))
                    .map(std::mem::take)
                    .unwrap_or_default()
            })
            .collect();
        IdleStacks { stacks }
    }

    /// The newest idle connection to a server that is still open and younger
    /// than `max_idle`, with a read buffer again; stale ones met on the way
    /// are closed.
    pub fn take(&mut self, server: usize, max_idle: Duration, now: Instant) -> Option<UpstreamConn> {
        let stack = self.stacks.get_mut(server)?;
        while let Some(idle) = stack.pop() {
            if now.duration_since(idle.since) < max_idle && still_open(&idle.conn.stream) {
                let mut conn = idle.conn;
                if conn.buf.capacity() == 0 {
                    conn.buf = BytesMut::with_capacity(UPSTREAM_BUF);
                }
                return Some(conn);
            }
        }
        None
    }

    /// Returns a connection for reuse, unless the stack is full. Above
    /// [`BUFFERED_IDLE`] idle connections to the server, it keeps its socket
    /// only: its read buffer (empty, or the connection would not be reusable)
    /// is freed, so that a pool can keep many idle connections for a front
    /// end's bursts cheaply, while the ones reused first (the stack's top)
    /// cost no allocation per request.
    pub fn put(&mut self, server: usize, mut conn: UpstreamConn, max: usize, now: Instant) {
        if let Some(stack) = self.stacks.get_mut(server) {
            if stack.len() < max {
                if stack.len() >= BUFFERED_IDLE {
                    conn.buf = BytesMut::new();
                }
                stack.push(IdleConn { conn, since: now });
            }
        }
    }

    /// Closes connections idle for longer than `max_idle`, closed by their
    /// server, or to servers `keep` refuses (maintenance).
    pub fn sweep(&mut self, max_idle: Duration, now: Instant, keep: impl Fn(usize) -> bool) {
        for (i, stack) in self.stacks.iter_mut().enumerate() {
            if !keep(i) {
                stack.clear();
                continue;
            }
            stack.retain(|idle| now.duration_since(idle.since) < max_idle && still_open(&idle.conn.stream));
        }
    }
}

/// Whether a pooled connection still looks usable: no EOF, no stray bytes.
/// Tokio answers from its readiness cache first, so an idle healthy socket
/// costs no system call here. For TLS this looks at the TCP socket: an idle
/// server sends nothing, and a close_notify or a reset means it is gone.
fn still_open(conn: &ServerStream) -> bool {
    #[cfg(test)]
    if let ServerStream::Memory(_) = conn {
        return true;
    }
    let Some(stream) = conn.tcp() else {
        return false;
    };
    let mut probe = [0u8; 1];
    matches!(stream.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// Opens a new connection to server `server` (at `addr`) of a pool: TCP
/// connect, then `proxy_header` (empty: none), then the TLS handshake when
/// the pool has `tls`, all within `timeout`. Every failure here is safe to
/// retry: the request has not been sent. The kernel picks the source address.
pub async fn connect(
    addr: SocketAddr,
    timeout: Duration,
    proxy_header: &[u8],
    tls: Option<&PoolTls>,
    server: usize,
) -> Result<UpstreamConn, ProxyError> {
    connect_from(None, addr, timeout, proxy_header, tls, server).await
}

/// [`connect`] from the source address `bind` gives (`None`: the kernel picks).
pub async fn connect_from(
    bind: Option<Bind>,
    addr: SocketAddr,
    timeout: Duration,
    proxy_header: &[u8],
    tls: Option<&PoolTls>,
    server: usize,
) -> Result<UpstreamConn, ProxyError> {
    #[cfg(test)]
    if let Some(pipe) = memory::connect(addr) {
        let stream = ServerStream::Memory(Box::new(pipe));
        return Ok(UpstreamConn { stream, buf: BytesMut::with_capacity(UPSTREAM_BUF), served: 0 });
    }
    let deadline = tokio::time::Instant::now() + timeout;
    let mut stream = connect_tcp_from(bind, addr, deadline).await?;
    if !proxy_header.is_empty() {
        use tokio::io::AsyncWriteExt;
        match tokio::time::timeout_at(deadline, stream.write_all(proxy_header)).await {
            Err(_) => return Err(ProxyError::retryable(Kind::ConnectTimeout)),
            Ok(Err(_)) => return Err(ProxyError::retryable(Kind::ServerClosed)),
            Ok(Ok(())) => {}
        }
    }
    let stream = match tls {
        None => ServerStream::Plain(stream),
        Some(tls) => match tokio::time::timeout_at(deadline, tls.handshake(server, stream)).await {
            Err(_) => return Err(ProxyError::retryable(Kind::ConnectTimeout)),
            Ok(Err(e)) => {
                tracing::warn!(server = %addr, error = %e, "TLS handshake with server failed");
                return Err(ProxyError::retryable(Kind::ServerTls));
            }
            Ok(Ok(tls)) => ServerStream::Tls(Box::new(tls)),
        },
    };
    Ok(UpstreamConn { stream, buf: BytesMut::with_capacity(UPSTREAM_BUF), served: 0 })
}

/// Opens a TCP connection to `addr` by `deadline` (layer 4 relays use it
/// directly: they never speak TLS to servers themselves), from the source
/// address `bind` gives (`None`: the kernel picks, at no extra cost).
pub async fn connect_tcp_from(
    bind: Option<Bind>,
    addr: SocketAddr,
    deadline: tokio::time::Instant,
) -> Result<TcpStream, ProxyError> {
    let connected = match bind {
        None => tokio::time::timeout_at(deadline, TcpStream::connect(addr)).await,
        Some(bind) => match bind.socket(addr) {
            Ok(socket) => tokio::time::timeout_at(deadline, socket.connect(addr)).await,
            Err(e) => {
                tracing::warn!(source = %bind.ip, server = %addr, error = %e, "cannot bind the pool's source address");
                return Err(ProxyError::retryable(Kind::ConnectFailed));
            }
        },
    };
    match connected {
        Err(_) => Err(ProxyError::retryable(Kind::ConnectTimeout)),
        Ok(Err(_)) => Err(ProxyError::retryable(Kind::ConnectFailed)),
        Ok(Ok(stream)) => {
            // Heads and small bodies go out in one segment; Nagle only adds latency here.
            let _ = stream.set_nodelay(true);
            Ok(stream)
        }
    }
}

/// Opens a TCP connection to `addr` by `deadline` and writes the start of
/// `first` on it (layer 4: the PROXY header and the client's first bytes);
/// returns the stream and how many bytes of `first` went out (the caller
/// writes the rest). The first write confirms the connect: a connection the
/// server refused or that timed out fails it, so no `getsockopt(SO_ERROR)`
/// is needed, as in HAProxy. With nothing to send (a server-speaks-first
/// protocol), the connect is confirmed by `SO_ERROR` once writable. Every
/// failure here is retryable: no byte reached the server.
pub async fn connect_tcp_sending(
    bind: Option<Bind>,
    addr: SocketAddr,
    deadline: tokio::time::Instant,
    first: &[u8],
) -> Result<(TcpStream, usize), ProxyError> {
    let socket = match bind {
        None => socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM.nonblocking(),
            Some(socket2::Protocol::TCP),
        ),
        Some(bind) => bind.raw_socket(addr).inspect_err(|e| {
            tracing::warn!(source = %bind.ip, server = %addr, error = %e, "cannot bind the pool's source address");
        }),
    };
    let stream = socket.and_then(|s| start_connect(s, addr)).map_err(|_| ProxyError::retryable(Kind::ConnectFailed))?;
    match tokio::time::timeout_at(deadline, first_write(&stream, first)).await {
        Err(_) => Err(ProxyError::retryable(Kind::ConnectTimeout)),
        Ok(Err(_)) => Err(ProxyError::retryable(Kind::ConnectFailed)),
        Ok(Ok(n)) => Ok((stream, n)),
    }
}

/// A non-blocking `connect` on `socket` (Nagle off first: heads and small
/// bodies go out in one segment), registered with the event loop.
fn start_connect(socket: socket2::Socket, addr: SocketAddr) -> std::io::Result<TcpStream> {
    let _ = socket.set_tcp_nodelay(true);
    match socket.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    TcpStream::from_std(socket.into())
}

/// Waits until the connecting `stream` is writable, then writes what of
/// `first` the socket takes (or, with nothing to write, reads `SO_ERROR`).
async fn first_write(stream: &TcpStream, first: &[u8]) -> std::io::Result<usize> {
    loop {
        stream.writable().await?;
        let written = if first.is_empty() { stream.take_error()?.map_or(Ok(0), Err) } else { stream.try_write(first) };
        match written {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            done => return done,
        }
    }
}

/// The source address of one new server connection: a pool's [`Source`]
/// made concrete for one client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bind {
    ip: IpAddr,
    /// Transparent mode: the address is the client's, not this node's.
    transparent: bool,
}

impl Bind {
    /// Where a connection of a pool with `source` serving a client at
    /// `client` comes from; `None`: the kernel picks (source NAT).
    #[inline]
    pub fn of(source: Source, client: IpAddr) -> Option<Bind> {
        match source {
            Source::Balancer => None,
            Source::Client => Some(Bind { ip: client, transparent: true }),
            Source::Address(ip) => Some(Bind { ip, transparent: false }),
        }
    }

    /// A socket bound to the source address, ready to connect to `server`.
    /// The port is the kernel's choice. A client of one address family and
    /// a server of the other cannot be joined transparently: refused here.
    fn socket(self, server: SocketAddr) -> std::io::Result<TcpSocket> {
        self.raw_socket(server).map(|s| TcpSocket::from_std_stream(s.into()))
    }

    /// A non-blocking TCP socket bound to this source for `server`.
    fn raw_socket(self, server: SocketAddr) -> std::io::Result<socket2::Socket> {
        let ip = match self.ip {
            IpAddr::V6(v6) if server.is_ipv4() => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            ip => ip,
        };
        if ip.is_ipv4() != server.is_ipv4() {
            let why = "the source address and the server's are of different families";
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, why));
        }
        let domain = socket2::Domain::for_address(server);
        let socket = socket2::Socket::new(domain, socket2::Type::STREAM.nonblocking(), Some(socket2::Protocol::TCP))?;
        if self.transparent {
            if ip.is_ipv4() {
                socket.set_ip_transparent_v4(true)?;
            } else {
                socket.set_ip_transparent_v6(true)?;
            }
        }
        socket.bind(&SocketAddr::new(ip, 0).into())?;
        Ok(socket)
    }
}

/// In-memory servers for the in-process tests: a test listens on an address,
/// and connections the pipeline opens to it arrive as [`PipeEnd`]s instead
/// of going through the kernel. Per thread, like a worker.
///
/// [`PipeEnd`]: crate::transport::PipeEnd
#[cfg(test)]
pub(crate) mod memory {
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::net::SocketAddr;

    use tokio::sync::mpsc;

    use crate::transport::{Pipe, PipeEnd};

    thread_local! {
        static SERVERS: RefCell<HashMap<SocketAddr, mpsc::UnboundedSender<PipeEnd>>> = RefCell::default();
    }

    /// Connections to `addr` from now on, on this thread; none are refused
    /// until the receiver is dropped (then a connect fails like a refused one).
    pub fn listen(addr: SocketAddr) -> mpsc::UnboundedReceiver<PipeEnd> {
        let (tx, rx) = mpsc::unbounded_channel();
        SERVERS.with(|s| s.borrow_mut().insert(addr, tx));
        rx
    }

    /// An in-memory connection to `addr`, when a test listens there.
    pub(crate) fn connect(addr: SocketAddr) -> Option<Pipe> {
        let server = SERVERS.with(|s| s.borrow().get(&addr).cloned())?;
        let (pipe, end) = Pipe::pair(None);
        // A server that stopped listening leaves a pipe that reads nothing: closed at once.
        let _ = server.send(end);
        Some(pipe)
    }
}

/// The hash key of a request for hash-based balancing.
pub fn hash_key(key: &HashKey, client: IpAddr, uri: &[u8], header: Option<&[u8]>) -> u64 {
    match (key, header) {
        (HashKey::Uri, _) => switchyard_balance::hash_bytes(uri),
        (HashKey::Header(_), Some(value)) => switchyard_balance::hash_bytes(value),
        (HashKey::ClientAddr | HashKey::Header(_), _) => match client {
            IpAddr::V4(v4) => switchyard_balance::hash_bytes(&v4.octets()),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => switchyard_balance::hash_bytes(&v4.octets()),
                None => switchyard_balance::hash_bytes(&v6.octets()),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> Pool {
        let text = "[[service]]\nname = \"s\"\nlisten = \"127.0.0.1:1\"\npool = \"p\"\n[[pool]]\nname = \"p\"\n\
                    servers = [{ address = \"127.0.0.1:9001\" }]\n";
        switchyard_config::parse(text, "t.toml").expect("valid").pools.remove(0)
    }

    #[tokio::test]
    async fn idle_connections_survive_a_reload_only_under_the_same_tls_settings() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (before, now) = (pool(), Instant::now());
        let mut stacks = IdleStacks::new(&before);
        for _ in 0..2 {
            let stream = TcpStream::connect(addr).await.expect("connect");
            let conn = UpstreamConn { stream: ServerStream::Plain(stream), buf: BytesMut::new(), served: 1 };
            stacks.put(0, conn, 8, now);
        }
        let mut same = IdleStacks::carried(&pool(), &before, &mut stacks);
        assert!(same.take(0, Duration::from_secs(30), now).is_some(), "unchanged pool keeps its connections");
        let mut secured = pool();
        secured.tls =
            Some(switchyard_config::UpstreamTls { verify: false, ca: None, server_name: None, client_cert: None });
        let mut tls = IdleStacks::carried(&secured, &before, &mut same);
        assert!(tls.take(0, Duration::from_secs(30), now).is_none(), "clear connections never serve a TLS pool");
    }

    #[tokio::test]
    async fn idle_connections_above_the_buffered_ones_hold_no_read_buffer() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let now = Instant::now();
        let mut stacks = IdleStacks::new(&pool());
        let mut accepted = Vec::new();
        for served in 0..=BUFFERED_IDLE as u32 {
            let stream = TcpStream::connect(addr).await.expect("connect");
            accepted.push(listener.accept().await.expect("accept"));
            let buf = BytesMut::with_capacity(UPSTREAM_BUF);
            stacks.put(0, UpstreamConn { stream: ServerStream::Plain(stream), buf, served }, BUFFERED_IDLE + 1, now);
        }
        let capacities: Vec<usize> = stacks.stacks[0].iter().map(|idle| idle.conn.buf.capacity()).collect();
        assert!(capacities[..BUFFERED_IDLE].iter().all(|&c| c >= UPSTREAM_BUF), "the first ones keep their buffer");
        assert_eq!(capacities[BUFFERED_IDLE], 0, "the one above keeps its socket only");
        // Taken, it has a buffer again.
        let conn = stacks.take(0, Duration::from_secs(30), now).expect("the newest idle connection");
        assert_eq!(conn.served, BUFFERED_IDLE as u32);
        assert!(conn.buf.capacity() >= UPSTREAM_BUF && conn.buf.is_empty());
        // A full stack closes what comes back.
        stacks.put(0, conn, BUFFERED_IDLE, now);
        assert_eq!(stacks.stacks[0].len(), BUFFERED_IDLE);
    }
}
