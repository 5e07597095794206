//! Overload, end to end: an HTTP service at its `max_connections` keeps serving the
//! connections it holds and refuses (or holds back) the rest, with bounded memory; a process
//! at its file-descriptor limit keeps serving its established clients, does not crash or spin,
//! and serves new clients again once the flood is gone.

use crate::common;

use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{binary, proxy_addr, simple_config, temp_dir, wait_for, write_temp, Client, Origin, Proxy, Response};

/// Resident set size of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("a number")
}

/// Open file descriptors of process `pid`.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

/// Whether the proxy closed `s` without answering (EOF or reset), waiting at most `limit`.
fn closed_unanswered(s: &mut TcpStream, limit: Duration) -> bool {
    s.set_read_timeout(Some(limit)).expect("timeout");
    let mut byte = [0u8; 1];
    match s.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted),
    }
}

/// Keep-alive clients that each got one answer (so the proxy holds their connections). A
/// connection refused because an earlier one (the harness's readiness probe) still held its
/// slot is tried again.
fn established(addr: SocketAddr, n: usize) -> Vec<Client> {
    (0..n)
        .map(|i| {
            wait_for(&format!("client {i} to be served"), || {
                let mut c = Client::from_stream(TcpStream::connect(addr).ok()?);
                c.send(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").ok()?;
                let r = c.read_response().ok()?;
                assert_eq!(r.status, 200, "client {i}");
                Some(c)
            })
        })
        .collect()
}

#[test]
fn beyond_max_connections_the_rest_are_refused_and_the_held_ones_served() {
    let origin = Origin::start("origin");
    let listen = proxy_addr();
    let extra = "max_connections = 20\nwhen_full = \"refuse\"";
    let proxy = Proxy::start(&simple_config(listen, &[origin.addr], extra), listen);
    let mut held = established(listen, 20);
    let rss_before = rss_kib(proxy.pid());
    // A flood of connections the service cannot take: each is closed at once, unanswered,
    // even one that sent a request.
    let mut refused = 0;
    for i in 0..300 {
        let mut s = TcpStream::connect(listen).expect("the kernel still completes the handshake");
        if i % 10 == 0 {
            let _ = std::io::Write::write_all(&mut s, b"GET / HTTP/1.1\r\nhost: x\r\n\r\n");
        }
        assert!(closed_unanswered(&mut s, common::PATIENCE), "flood connection {i} was answered");
        refused += 1;
    }
    assert_eq!(refused, 300);
    // The held connections are served throughout.
    for (i, c) in held.iter_mut().enumerate() {
        let r = c.get("/?size=1000");
        assert_eq!((r.status, r.body.len()), (200, 1000), "held client {i}");
    }
    let rss_after = rss_kib(proxy.pid());
    assert!(rss_after < rss_before + 32 * 1024, "RSS grew from {rss_before} KiB to {rss_after} KiB");
    // Closing some frees their slots for new clients.
    held.truncate(15);
    let r = wait_for("a new client to be served", || {
        let mut s = TcpStream::connect(listen).ok()?;
        std::io::Write::write_all(&mut s, b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").ok()?;
        let mut c = Client::from_stream(s);
        c.read_response().ok()
    });
    assert_eq!(r.status, 200);
}

#[test]
fn when_full_wait_holds_new_connections_until_a_slot_frees() {
    let origin = Origin::start("origin");
    let listen = proxy_addr();
    let extra = "max_connections = 2\nwhen_full = \"wait\"";
    let proxy = Proxy::start(&simple_config(listen, &[origin.addr], extra), listen);
    let mut held = established(listen, 2);
    let mut waiting = Client::connect(listen);
    waiting.send(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").expect("send");
    // Not answered while the service is full.
    waiting.stream.set_read_timeout(Some(Duration::from_millis(300))).expect("timeout");
    let mut byte = [0u8; 1];
    let early = waiting.stream.peek(&mut byte);
    assert!(early.is_err(), "answered while full: {early:?}");
    waiting.stream.set_read_timeout(Some(common::PATIENCE)).expect("timeout");
    for c in &mut held {
        assert_eq!(c.get("/").status, 200);
    }
    drop(held.pop());
    let r: Response = waiting.read_response().expect("served once a slot freed");
    assert_eq!(r.status, 200);
    drop(proxy);
}

/// The proxy started under a file-descriptor limit (`prlimit`), killed on drop.
struct Limited {
    child: Child,
    log: PathBuf,
}

impl Limited {
    fn start(config: &str, addr: SocketAddr, nofile: u32) -> Limited {
        let path = write_temp("overload", "switchyard.toml", config);
        let log = temp_dir("overload-log").join("stderr.log");
        let child = Command::new("prlimit")
            .arg(format!("--nofile={nofile}:{nofile}"))
            .arg(binary())
            .args(["run", "--workers", "1", "-c"])
            .arg(&path)
            .env("SWITCHYARD_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("spawn prlimit");
        let mut limited = Limited { child, log };
        wait_for("the limited proxy to listen", || {
            if let Ok(Some(status)) = limited.child.try_wait() {
                panic!("exited early ({status}):\n{}", limited.log());
            }
            TcpStream::connect(addr).ok()
        });
        limited
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Limited {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn at_the_descriptor_limit_established_clients_are_served_and_new_ones_after_the_flood() {
    const LIMIT: u32 = 128;
    let origin = Origin::start("origin");
    let listen = proxy_addr();
    // Flood connections that send nothing stay open for the whole test.
    let extra = "timeouts = { client_header = \"60s\", client_idle = \"60s\" }";
    let mut proxy = Limited::start(&simple_config(listen, &[origin.addr], extra), listen, LIMIT);
    let mut held = established(listen, 8);
    let rss_before = rss_kib(proxy.pid());
    // More connections than the process may have descriptors.
    let flood: Vec<TcpStream> = (0..2 * LIMIT).filter_map(|_| TcpStream::connect(listen).ok()).collect();
    assert!(flood.len() as u32 > LIMIT, "the backlog takes them");
    wait_for("the proxy to reach its descriptor limit", || {
        (open_fds(proxy.pid()) as u32 >= LIMIT - 1 && proxy.log().contains("accept failed")).then_some(())
    });
    // Established clients still get answers, over the pooled server connection.
    for round in 0..3 {
        for (i, c) in held.iter_mut().enumerate() {
            let r = c.get("/?size=500");
            assert_eq!((r.status, r.body.len()), (200, 500), "round {round}, client {i}:\n{}", proxy.log());
        }
    }
    assert!(proxy.alive(), "the proxy survived:\n{}", proxy.log());
    // One warning per burst of failed accepts, not one per attempt.
    let warnings = proxy.log().matches("accept failed").count();
    assert!((1..=3).contains(&warnings), "{warnings} warnings:\n{}", proxy.log());
    let rss_during = rss_kib(proxy.pid());
    assert!(rss_during < rss_before + 64 * 1024, "RSS grew from {rss_before} KiB to {rss_during} KiB");
    // Once the flood is gone, new clients are served again.
    drop(flood);
    let r = wait_for("a new client to be served after the flood", || {
        let mut s = TcpStream::connect(listen).ok()?;
        std::io::Write::write_all(&mut s, b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").ok()?;
        Client::from_stream(s).read_response().ok()
    });
    assert_eq!(r.status, 200);
    assert!(proxy.alive());
    assert!(proxy.log().contains("accepting again"), "{}", proxy.log());
    // Draining the backlog makes accepts succeed and fail by turns: still one burst.
    let warnings = proxy.log().matches("accept failed").count();
    assert!(warnings <= 3, "{warnings} warnings:\n{}", proxy.log());
}
