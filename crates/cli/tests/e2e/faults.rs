//! Servers that misbehave, end to end: a reset or a stall in the middle of a response, a
//! malformed or oversized response head, keep-alive connections closed without notice right
//! after a response, a connection reset as soon as it is accepted, and TLS broken during the
//! handshake. `errors.rs` covers refused connections, slow servers and dead servers.
//!
//! Each misbehaving server is a raw `std::net::TcpListener` thread. Every case asserts what the
//! client gets (a 502/504 from the proxy, or — when the head was already sent — a body cut
//! short and the connection closed, never a complete response), the reason in the access log,
//! that a well-behaved client on another service and pool is served throughout, and that the
//! proxy is still up afterwards.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use common::{proxy_addr, temp_dir, Client, Origin, Proxy};

/// What a misbehaving server does with each connection it accepts.
type Behaviour = fn(TcpStream);

/// A misbehaving server: accepts connections on a thread and hands each to `behave` on its own.
struct BadServer {
    addr: SocketAddr,
    connections: Arc<AtomicU64>,
}

impl BadServer {
    fn start(behave: Behaviour) -> BadServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("address");
        let connections = Arc::new(AtomicU64::new(0));
        let count = connections.clone();
        // The thread lives as long as the test binary; it only ever blocks in accept.
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                count.fetch_add(1, Ordering::Relaxed);
                std::thread::spawn(move || behave(stream));
            }
        });
        BadServer { addr, connections }
    }
}

/// Reads one request head (up to the blank line) from a server-side stream; false on EOF.
fn read_request_head(reader: &mut BufReader<&TcpStream>) -> bool {
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return false,
            Ok(_) if line == "\r\n" => return true,
            Ok(_) => {}
        }
    }
}

/// Closes with a reset instead of a FIN (SO_LINGER 0).
fn reset(stream: TcpStream) {
    let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
    drop(stream);
}

/// Answers the request head, then runs `then` on the stream.
fn after_head(stream: TcpStream, answer: &[u8], then: fn(TcpStream)) {
    let mut reader = BufReader::new(&stream);
    if read_request_head(&mut reader) {
        let _ = (&stream).write_all(answer);
        then(stream);
    }
}

/// A long body announced, a little of it sent.
const CUT_LENGTH: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\nthe first bytes of a long body";
/// A chunked body begun, never ended.
const CUT_CHUNKED: &[u8] = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n10\r\n0123456789abcdef\r\n";

/// A service `bad` over the misbehaving server and a service `good` over a well-behaved origin,
/// sharing one proxy and one JSON access log.
struct Rig {
    proxy: Proxy,
    good: SocketAddr,
    bad: SocketAddr,
    log: PathBuf,
    _origin: Origin,
}

impl Rig {
    /// `pool` holds extra keys of the bad pool; `service` extra keys of the bad service.
    fn start(server: SocketAddr, service: &str, pool: &str) -> Rig {
        let origin = Origin::start("good");
        let (good, bad) = (proxy_addr(), proxy_addr());
        let log = temp_dir("faults-log").join("access.log");
        let config = format!(
            "workers = 1\ndrain_timeout = \"2s\"\n\n[access_log]\npath = \"{log}\"\nformat = \"json\"\n\n\
             [[service]]\nname = \"good\"\nlisten = [\"{good}\"]\npool = \"good\"\n\n\
             [[service]]\nname = \"bad\"\nlisten = [\"{bad}\"]\npool = \"bad\"\n{service}\n\n\
             [[pool]]\nname = \"good\"\nservers = [{{ address = \"{origin}\" }}]\n\n\
             [[pool]]\nname = \"bad\"\nservers = [{{ address = \"{server}\" }}]\n{pool}\n",
            log = log.display(),
            origin = origin.addr,
        );
        let proxy = Proxy::start(&config, bad);
        Rig { proxy, good, bad, log, _origin: origin }
    }

    fn connect_bad(&self) -> Client {
        Client::connect(self.bad)
    }

    /// A client requesting from the good service in a loop until `stop`; returns how many
    /// answers it got, panicking on any that is not a complete 200.
    fn bystander(&self, stop: Arc<AtomicBool>) -> JoinHandle<u32> {
        let addr = self.good;
        std::thread::spawn(move || {
            let mut c = Client::connect(addr);
            let mut served = 0;
            // Bounded in count as well as by the flag.
            while served < 2000 && (!stop.load(Ordering::Relaxed) || served < 5) {
                let r = c.get("/?size=2000");
                assert_eq!((r.status, r.body.len()), (200, 2000), "bystander request {served}");
                served += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            served
        })
    }

    /// Runs `fault` with a bystander client beside it, then checks the proxy still serves.
    fn around(&self, fault: impl FnOnce()) {
        let stop = Arc::new(AtomicBool::new(false));
        let bystander = self.bystander(stop.clone());
        fault();
        stop.store(true, Ordering::Relaxed);
        let served = bystander.join().unwrap_or_else(|_| panic!("the bystander failed:\n{}", self.proxy.log()));
        assert!(served >= 5);
        assert_eq!(Client::connect(self.good).get("/").status, 200, "the proxy is still up:\n{}", self.proxy.log());
    }

    /// Waits for an access log line of service `bad` with `status` and `reason` (one of
    /// `reason`'s alternatives, separated by `|`).
    fn logged(&self, status: u16, reason: &str) -> String {
        let deadline = std::time::Instant::now() + common::PATIENCE;
        loop {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            let found = text.lines().find(|l| {
                l.contains("\"service\":\"bad\"")
                    && l.contains(&format!("\"status\":{status}"))
                    && reason.split('|').any(|r| l.contains(&format!("\"reason\":\"{r}\"")))
            });
            if let Some(line) = found {
                return line.to_string();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no access log line with {status} and {reason}:\n{text}\n{}",
                self.proxy.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// What a client received on a connection the proxy closed.
#[derive(Debug)]
struct Received {
    status: u16,
    /// The body was complete per its framing.
    complete: bool,
}

/// Sends a GET and reads until the proxy closes the connection (or resets it), then judges
/// whether what came is a complete response.
fn get_until_closed(c: &mut Client) -> Received {
    c.send(b"GET / HTTP/1.1\r\nhost: test\r\n\r\n").expect("send");
    let mut bytes = Vec::new();
    read_until_closed(c, &mut bytes);
    judge(&bytes)
}

/// Appends what the proxy sends to `bytes` until it closes the connection (or resets it).
fn read_until_closed(c: &mut Client, bytes: &mut Vec<u8>) {
    let mut buf = [0u8; 16384];
    loop {
        match c.stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::ConnectionReset) => break,
            Err(e) => panic!("the proxy neither finished nor closed the response: {e}"),
        }
    }
}

fn judge(bytes: &[u8]) -> Received {
    let text = String::from_utf8_lossy(bytes);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no complete head: {text:?}"));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("status");
    let header = |name: &str| {
        head.lines()
            .find_map(|l| l.split_once(':').filter(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.trim()))
    };
    let complete = if let Some(len) = header("content-length") {
        body.len() == len.parse::<usize>().expect("content-length")
    } else if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        body.ends_with("0\r\n\r\n")
    } else {
        // Close-delimited: no way to tell; the cases here never produce one.
        panic!("a close-delimited response: {text:?}")
    };
    Received { status, complete }
}

#[test]
fn a_reset_mid_body_cuts_the_response_short_and_closes() {
    let cases: [(Behaviour, &str); 2] =
        [(|s| after_head(s, CUT_LENGTH, reset), "content-length"), (|s| after_head(s, CUT_CHUNKED, reset), "chunked")];
    for (behave, which) in cases {
        let server = BadServer::start(behave);
        let rig = Rig::start(server.addr, "", "");
        rig.around(|| {
            let got = get_until_closed(&mut rig.connect_bad());
            assert_eq!(got.status, 200, "{which}: the head was already relayed");
            assert!(!got.complete, "{which}: a cut body must not look complete");
        });
        rig.logged(200, "server-closed");
        assert!(rig.proxy.log().contains("server closed"), "{which}: {}", rig.proxy.log());
    }
}

#[test]
fn a_reset_before_any_response_byte_is_502() {
    // Reset as soon as the request head arrived: the server closed. Reset as soon as the
    // connection is accepted: the request could not be sent (when the reset arrives first)
    // or the server closed (when it arrives after the request went out).
    let cases: [(Behaviour, &str); 2] =
        [(|s| after_head(s, b"", reset), "server-closed"), (reset, "connect-failed|server-closed")];
    for (behave, reason) in cases {
        let server = BadServer::start(behave);
        let rig = Rig::start(server.addr, "", "");
        rig.around(|| {
            for i in 0..3 {
                let r = rig.connect_bad().get("/");
                assert_eq!((r.status, r.text().as_str()), (502, "502 Bad Gateway\n"), "request {i}");
            }
        });
        rig.logged(502, reason);
    }
}

#[test]
fn a_stall_mid_body_times_out_into_a_cut_response() {
    let server = BadServer::start(|s| {
        after_head(s, CUT_LENGTH, |s| {
            std::thread::sleep(Duration::from_secs(8));
            drop(s);
        })
    });
    let rig = Rig::start(server.addr, "timeouts = { server_response = \"300ms\" }", "");
    rig.around(|| {
        let got = get_until_closed(&mut rig.connect_bad());
        assert_eq!(got.status, 200);
        assert!(!got.complete);
    });
    rig.logged(200, "server-timeout");
}

#[test]
fn a_stall_mid_head_is_504() {
    let server = BadServer::start(|s| {
        after_head(s, b"HTTP/1.1 200 OK\r\ncontent-le", |s| {
            std::thread::sleep(Duration::from_secs(8));
            drop(s);
        })
    });
    let rig = Rig::start(server.addr, "timeouts = { server_response = \"300ms\" }", "");
    rig.around(|| {
        let r = rig.connect_bad().get("/");
        assert_eq!((r.status, r.text().as_str()), (504, "504 Gateway Timeout\n"));
    });
    rig.logged(504, "server-timeout");
}

#[test]
fn malformed_response_heads_are_502() {
    let cases: [Behaviour; 5] = [
        |s| after_head(s, b"HTTP/1.1 abc OK\r\ncontent-length: 0\r\n\r\n", drop),
        |s| after_head(s, b"\x00\x01\x02garbage\r\n\r\n", drop),
        |s| after_head(s, b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\nhello", drop),
        |s| after_head(s, b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n", drop),
        |s| after_head(s, b"HTTP/1.1 200 OK\r\nbad header line\r\n\r\n", drop),
    ];
    for (i, behave) in cases.into_iter().enumerate() {
        let server = BadServer::start(behave);
        let rig = Rig::start(server.addr, "", "");
        rig.around(|| {
            let mut c = rig.connect_bad();
            let r = c.get("/");
            assert_eq!((r.status, r.text().as_str()), (502, "502 Bad Gateway\n"), "case {i}");
        });
        rig.logged(502, "bad-response");
    }
}

#[test]
fn an_oversized_response_head_is_502() {
    let server = BadServer::start(|s| {
        let mut head = b"HTTP/1.1 200 OK\r\n".to_vec();
        // 128 KiB of headers, twice the proxy's response head limit; the server may be
        // cut off while writing them.
        for i in 0..16 {
            head.extend_from_slice(format!("x-filler-{i:02}: {}\r\n", "f".repeat(8 * 1024)).as_bytes());
        }
        head.extend_from_slice(b"content-length: 0\r\n\r\n");
        after_head(s, &head.clone(), drop)
    });
    let rig = Rig::start(server.addr, "", "");
    rig.around(|| {
        let r = rig.connect_bad().get("/");
        assert_eq!((r.status, r.text().as_str()), (502, "502 Bad Gateway\n"));
    });
    rig.logged(502, "bad-response");
    assert!(rig.proxy.log().contains("response head too large"), "{}", rig.proxy.log());
}

/// Answers every request on the connection with a keep-alive response, closes after the first
/// (with a FIN) without saying so.
fn one_response_then_fin(stream: TcpStream) {
    after_head(stream, b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", drop);
}

/// The same, closing with a reset.
fn one_response_then_rst(stream: TcpStream) {
    after_head(stream, b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", reset);
}

#[test]
fn keep_alive_connections_closed_unannounced_after_a_response_are_not_reused() {
    for behave in [one_response_then_fin as Behaviour, one_response_then_rst] {
        let server = BadServer::start(behave);
        let rig = Rig::start(server.addr, "", "");
        rig.around(|| {
            let mut c = rig.connect_bad();
            for i in 0..20 {
                let r = c.get("/");
                assert_eq!((r.status, r.text().as_str()), (200, "ok"), "request {i}");
            }
            // A body-carrying request is never replayed: it must not meet a dead pooled
            // connection either once the close has had time to arrive.
            std::thread::sleep(Duration::from_millis(100));
            c.send(b"POST / HTTP/1.1\r\nhost: test\r\ncontent-length: 3\r\n\r\nabc").expect("send");
            let r = c.read_response().expect("response");
            assert_eq!((r.status, r.text().as_str()), (200, "ok"));
        });
        assert!(server.connections.load(Ordering::Relaxed) >= 21, "one connection per response");
    }
}

/// Reads a little (the ClientHello), then answers bytes that are not TLS.
fn tls_garbage(mut stream: TcpStream) {
    let mut buf = [0u8; 512];
    let _ = stream.read(&mut buf);
    let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n");
    std::thread::sleep(Duration::from_millis(200));
}

/// Reads the ClientHello and closes.
fn tls_close_mid_handshake(mut stream: TcpStream) {
    let mut buf = [0u8; 512];
    let _ = stream.read(&mut buf);
}

/// Sends the start of a TLS record (a handshake record header announcing 16 KiB), then resets.
fn tls_truncated_record(mut stream: TcpStream) {
    let mut buf = [0u8; 512];
    let _ = stream.read(&mut buf);
    let _ = stream.write_all(&[0x16, 0x03, 0x03, 0x40, 0x00, 0x02, 0x00]);
    reset(stream);
}

#[test]
fn a_tls_pool_whose_server_breaks_the_handshake_is_502() {
    for behave in [tls_garbage as Behaviour, tls_close_mid_handshake, tls_truncated_record] {
        let server = BadServer::start(behave);
        let rig = Rig::start(server.addr, "", "tls = { verify = false }");
        rig.around(|| {
            let r = rig.connect_bad().get("/");
            assert_eq!((r.status, r.text().as_str()), (502, "502 Bad Gateway\n"));
        });
        rig.logged(502, "server-tls-failed");
    }
}

#[test]
fn a_fault_on_one_server_leaves_the_pools_other_server_serving() {
    // The same pool: a resetting server beside a good one; idempotent requests move on.
    let server = BadServer::start(|s| after_head(s, b"", reset));
    let origin = Origin::start("fine");
    let listen = proxy_addr();
    let config = common::simple_config(listen, &[server.addr, origin.addr], "");
    let proxy = Proxy::start(&config, listen);
    let mut c = proxy.connect();
    for i in 0..20 {
        let r = c.get("/");
        assert_eq!((r.status, r.origin()), (200, "fine"), "request {i}: {}", r.text());
    }
}

/// Answers the request head at once with a chunked response begun, then reads (and drops)
/// whatever the proxy still sends, for at most 10 s.
fn answer_early_and_keep_reading(stream: TcpStream) {
    let mut reader = BufReader::new(&stream);
    if !read_request_head(&mut reader) {
        return;
    }
    let _ = (&stream).write_all(CUT_CHUNKED);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut sink = [0u8; 4096];
    while matches!(reader.read(&mut sink), Ok(n) if n > 0) {}
}

/// The full-duplex path: a server that answers while the request body is still coming, and a
/// client whose body turns bad after the response head has gone out. The response in progress
/// is cut short and the connection closed; no status line of the proxy's own (400) is written
/// into the middle of it, and the access log keeps the status the client saw with the reason.
#[test]
fn a_bad_upload_after_the_response_began_cuts_the_response_without_a_second_status() {
    let server = BadServer::start(answer_early_and_keep_reading);
    let rig = Rig::start(server.addr, "", "");
    rig.around(|| {
        let mut c = rig.connect_bad();
        c.send(b"POST /upload HTTP/1.1\r\nhost: test\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n")
            .expect("send");
        // Wait for the response head and its first chunk before spoiling the body.
        let mut bytes = Vec::new();
        let mut buf = [0u8; 16384];
        while !bytes.ends_with(b"0123456789abcdef\r\n") {
            match c.stream.read(&mut buf) {
                Ok(0) | Err(_) => panic!("the response did not begin: {:?}", String::from_utf8_lossy(&bytes)),
                Ok(n) => bytes.extend_from_slice(&buf[..n]),
            }
        }
        c.send(b"zz\r\nnot a chunk\r\n").expect("send the bad chunk");
        read_until_closed(&mut c, &mut bytes);
        let text = String::from_utf8_lossy(&bytes);
        assert_eq!(text.matches("HTTP/1.1 ").count(), 1, "one status line only: {text:?}");
        let got = judge(&bytes);
        assert_eq!(got.status, 200, "the head the server sent: {text:?}");
        assert!(!got.complete, "a cut body must not look complete: {text:?}");
    });
    let line = rig.logged(200, "bad-request|invalid chunk size");
    assert!(line.contains("\"status\":200"), "{line}");
}
