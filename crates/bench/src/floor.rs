//! The floor: the least a relay does to move the bytes of the bench's TCP tests, as a
//! target of its own (`switchyard bench floor`), so that each proxy's CPU per request can
//! be read as the floor's plus its distance above it.
//!
//! It is independent of the engine (plain tokio, one current-thread runtime, as pinned to
//! one core as the proxies) and does no HTTP beyond what moving the messages needs:
//!
//! - **L4**: accept, connect to the next origin (round robin), copy both ways until each
//!   side has closed.
//! - **L7**: read one request head (up to the blank line: the bench sends `GET`s without
//!   a body), write it unchanged to a kept-alive origin connection (the client
//!   connection's own, else an idle one, else a new one, round robin), and copy the
//!   response back, framed by its `content-length`; a client that closes hands its origin
//!   connection back to the idle list; a response with `connection: close` ends both
//!   connections, as the origin's close would without a relay. A request with
//!   `connection: close` (the one-request-per-connection tests) goes to the origin without
//!   that line, so the origin connection stays open as a proxy's would, and the client
//!   connection closes after its response. No routing rule, no other header rewriting, no
//!   logging: what is left is the kernel's work plus a minimal event loop.
//!
//! Invariants: every response is relayed whole and in order; an origin connection serves
//! one client connection at a time; a response without `content-length` (the bench's
//! origins always send one) or a malformed head ends the client connection.

use std::cell::{Cell, RefCell};
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the floor relays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Bytes both ways, no message framing (the L4 tests).
    L4,
    /// HTTP/1.1 request and response at a time over kept-alive origin connections (the
    /// L7 tests).
    L7,
}

/// Longest request or response head accepted.
pub(crate) const MAX_HEAD: usize = 16 * 1024;
/// Bytes asked of each read of a response body.
pub(crate) const CHUNK: usize = 64 * 1024;

/// Runs the floor on `listen`, relaying to `origins`, until the process is stopped.
pub fn run(listen: SocketAddr, origins: Vec<SocketAddr>, mode: Mode) -> io::Result<()> {
    if origins.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "the floor needs at least one origin"));
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, serve(listen, origins, mode))
}

/// The origins and the idle origin connections, shared by the connection tasks.
struct Origins {
    addrs: Vec<SocketAddr>,
    next: Cell<usize>,
    idle: RefCell<Vec<TcpStream>>,
}

impl Origins {
    /// Connects to the next origin in turn.
    async fn connect(&self) -> io::Result<TcpStream> {
        let i = self.next.get();
        self.next.set((i + 1) % self.addrs.len());
        let s = TcpStream::connect(self.addrs[i]).await?;
        s.set_nodelay(true)?;
        Ok(s)
    }
}

async fn serve(listen: SocketAddr, addrs: Vec<SocketAddr>, mode: Mode) -> io::Result<()> {
    let listener = TcpListener::bind(listen).await?;
    let origins = Rc::new(Origins { addrs, next: Cell::new(0), idle: RefCell::new(Vec::new()) });
    loop {
        // Out of descriptors or a connection reset before it was accepted: go on.
        let Ok((client, _)) = listener.accept().await else { continue };
        let origins = Rc::clone(&origins);
        tokio::task::spawn_local(async move {
            let _ = match mode {
                Mode::L4 => l4(client, &origins).await,
                Mode::L7 => l7(client, &origins).await,
            };
        });
    }
}

/// One L4 connection: a new origin connection, bytes copied both ways.
async fn l4(mut client: TcpStream, origins: &Origins) -> io::Result<()> {
    client.set_nodelay(true)?;
    let mut origin = origins.connect().await?;
    tokio::io::copy_bidirectional_with_sizes(&mut client, &mut origin, CHUNK, CHUNK).await?;
    Ok(())
}

/// One L7 client connection: request heads relayed to an origin connection, responses
/// back, until the client closes.
async fn l7(mut client: TcpStream, origins: &Origins) -> io::Result<()> {
    client.set_nodelay(true)?;
    let mut req = Vec::with_capacity(4096);
    let mut buf = vec![0u8; CHUNK];
    let mut origin: Option<TcpStream> = None;
    loop {
        let Some(head) = read_head(&mut client, &mut req).await? else { break };
        // The idle list's borrow ends before any await (another task may need it).
        let ready = origin.take().or_else(|| origins.idle.borrow_mut().pop());
        let mut o = match ready {
            Some(o) => o,
            None => origins.connect().await?,
        };
        let client_closes = framing_of(&req[..head]).1;
        if client_closes {
            // The close is the client connection's, not the origin connection's.
            o.write_all(&without_connection(&req[..head])).await?;
        } else {
            o.write_all(&req[..head]).await?;
        }
        req.drain(..head);
        if !relay_response(&mut o, &mut client, &mut buf).await? {
            // The origin closes after this response: so does the client connection, as
            // it would without a relay in between.
            return Ok(());
        }
        origin = Some(o);
        if client_closes {
            break;
        }
    }
    if let Some(o) = origin {
        origins.idle.borrow_mut().push(o);
    }
    Ok(())
}

/// Reads until `buf` holds a whole head; returns its length, or `None` when the peer
/// closed cleanly between messages.
async fn read_head(s: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<Option<usize>> {
    loop {
        if let Some(end) = head_end(buf) {
            return Ok(Some(end));
        }
        if buf.len() > MAX_HEAD {
            return Err(invalid("head too long"));
        }
        if s.read_buf(buf).await? == 0 {
            return if buf.is_empty() { Ok(None) } else { Err(invalid("closed mid-head")) };
        }
    }
}

/// Copies one response from `origin` to `client`, written as it arrives; returns whether
/// the origin connection can carry another request.
async fn relay_response(origin: &mut TcpStream, client: &mut TcpStream, buf: &mut [u8]) -> io::Result<bool> {
    let mut have = 0;
    let (head, length, close) = loop {
        let n = origin.read(&mut buf[have..]).await?;
        if n == 0 {
            return Err(invalid("origin closed mid-head"));
        }
        have += n;
        if let Some(end) = head_end(&buf[..have]) {
            let (length, close) = framing(&buf[..end]).ok_or_else(|| invalid("response without content-length"))?;
            break (end, length, close);
        }
        if have == buf.len() {
            return Err(invalid("response head too long"));
        }
    };
    let total = head as u64 + length;
    let mut left = total.saturating_sub(have as u64);
    if have as u64 > total {
        return Err(invalid("origin sent more than one response"));
    }
    client.write_all(&buf[..have]).await?;
    while left > 0 {
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = origin.read(&mut buf[..want]).await?;
        if n == 0 {
            return Err(invalid("origin closed mid-body"));
        }
        client.write_all(&buf[..n]).await?;
        left -= n as u64;
    }
    Ok(!close)
}

/// Length of the head at the start of `buf` (through the blank line), if complete.
pub(crate) fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// A head without its `connection` field lines.
pub(crate) fn without_connection(head: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(head.len());
    for line in head.split_inclusive(|&b| b == b'\n') {
        let name = line.split(|&b| b == b':').next().unwrap_or_default();
        if !name.eq_ignore_ascii_case(b"connection") {
            out.extend_from_slice(line);
        }
    }
    out
}

/// The body length (`content-length`) of a response head and whether it asks to close.
pub(crate) fn framing(head: &[u8]) -> Option<(u64, bool)> {
    let (length, close) = framing_of(head);
    length.map(|l| (l, close))
}

/// The `content-length` of a head, if any, and whether it asks to close.
pub(crate) fn framing_of(head: &[u8]) -> (Option<u64>, bool) {
    let mut length = None;
    let mut close = false;
    for line in head.split(|&b| b == b'\n').skip(1) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else { continue };
        let (name, value) = (&line[..colon], std::str::from_utf8(&line[colon + 1..]).unwrap_or_default().trim());
        if name.eq_ignore_ascii_case(b"content-length") {
            length = value.parse().ok();
        } else if name.eq_ignore_ascii_case(b"connection") {
            close = value.eq_ignore_ascii_case("close");
        }
    }
    (length, close)
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_end_at_the_blank_line() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nhost: x\r\n\r\nGET"), Some(27));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nhost: x\r\n"), None);
    }

    #[test]
    fn responses_are_framed_by_content_length() {
        let h = b"HTTP/1.1 200 OK\r\nX-Origin: a\r\nContent-Length: 128\r\n\r\n";
        assert_eq!(framing(h), Some((128, false)));
        let c = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(framing(c), Some((0, true)));
        assert_eq!(framing(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"), None);
        assert_eq!(framing(b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n"), None);
    }

    /// The floor relays keep-alive requests to a real origin (the origin simulator) and
    /// each response comes back whole, over one client connection and a second one.
    #[test]
    fn l7_floor_relays_whole_responses_over_kept_alive_connections() {
        use std::io::{Read, Write};
        let origin_port = free_port();
        let addr: SocketAddr = ([127, 0, 0, 1], origin_port).into();
        std::thread::spawn(move || crate::origin::run(addr, "o", 1, None));
        let floor: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        std::thread::spawn(move || run(floor, vec![addr], Mode::L7));
        let mut s = connect_retrying(floor);
        for size in [128usize, 70_000, 5] {
            s.write_all(format!("GET /x?size={size} HTTP/1.1\r\nhost: b\r\n\r\n").as_bytes()).expect("write");
            let mut got = Vec::new();
            let mut chunk = [0u8; 8192];
            let body = loop {
                let n = s.read(&mut chunk).expect("read");
                assert!(n > 0, "floor closed");
                got.extend_from_slice(&chunk[..n]);
                if let Some(end) = head_end(&got) {
                    let (len, _) = framing(&got[..end]).expect("framed");
                    if got.len() - end >= len as usize {
                        break got.len() - end;
                    }
                }
            };
            assert_eq!(body, size, "one whole response of {size} bytes, nothing more");
        }
        drop(s);
        let mut again = connect_retrying(floor);
        again.write_all(b"GET /y?size=10 HTTP/1.1\r\nhost: b\r\n\r\n").expect("write");
        let mut first = [0u8; 12];
        again.read_exact(&mut first).expect("a response on a second connection");
        assert_eq!(&first, b"HTTP/1.1 200");

        // One request per connection: the floor answers it and closes, and the origin
        // connection stays open for the next client (the origin saw no `connection: close`).
        for _ in 0..3 {
            let mut once = connect_retrying(floor);
            once.write_all(b"GET /z?size=7 HTTP/1.1\r\nhost: b\r\nconnection: close\r\n\r\n").expect("write");
            let mut all = Vec::new();
            once.read_to_end(&mut all).expect("the response, then the floor's close");
            let end = head_end(&all).expect("a head");
            assert_eq!((framing(&all[..end]), all.len() - end), (Some((7, false)), 7));
        }
    }

    #[test]
    fn a_request_goes_on_without_its_connection_field() {
        let head = b"GET / HTTP/1.1\r\nhost: b\r\nConnection: close\r\nx: 1\r\n\r\n";
        assert_eq!(framing_of(head), (None, true));
        assert_eq!(without_connection(head), b"GET / HTTP/1.1\r\nhost: b\r\nx: 1\r\n\r\n");
    }

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("port")
    }

    fn connect_retrying(addr: SocketAddr) -> std::net::TcpStream {
        for _ in 0..200 {
            if let Ok(s) = std::net::TcpStream::connect(addr) {
                s.set_read_timeout(Some(std::time::Duration::from_secs(5))).expect("timeout");
                return s;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("nothing listens on {addr}");
    }
}
