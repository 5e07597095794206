//! HTTP/2 abuse, end to end, with frames written by hand over h2c (prior knowledge): a
//! CONTINUATION flood of empty frames, an HPACK bomb (one dynamic-table entry referenced
//! thousands of times), and SETTINGS and PING floods from a client that never reads the
//! answers. Rapid reset and CONTINUATION frames with payload are in `http2.rs`.
//!
//! Each case asserts that the offender's connection is closed (GOAWAY and/or the end of the
//! connection) within bounded time, that the proxy's memory stays bounded, and that a
//! well-behaved HTTP/2 client on its own connection is served throughout.

use crate::common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use common::{proxy_addr, simple_config, wait_for, Client, Origin, Proxy, PATIENCE};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 1;
const SETTINGS: u8 = 4;
const PING: u8 = 6;
const GOAWAY: u8 = 7;
const CONTINUATION: u8 = 9;
const ACK: u8 = 1;
const END_STREAM: u8 = 1;
const END_HEADERS: u8 = 4;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).expect("small frame").to_be_bytes();
    let mut out = vec![len[1], len[2], len[3], kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// An HPACK integer with an `n`-bit prefix whose high bits are `first`.
fn hpack_int(first: u8, n: u32, mut value: usize, out: &mut Vec<u8>) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

/// `GET /` with `:authority x`, from the static table and one literal.
fn get_block() -> Vec<u8> {
    vec![0x82, 0x86, 0x84, 0x01, 0x01, b'x']
}

/// A connection that has sent the preface and an empty SETTINGS frame.
fn offender(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_write_timeout(Some(PATIENCE)).expect("timeout");
    s.write_all(PREFACE).expect("preface");
    s.write_all(&frame(SETTINGS, 0, 0, &[])).expect("settings");
    s
}

/// Writes `frames` as long as the proxy takes them; false once it closed the connection.
fn flood(s: &mut TcpStream, one: &[u8], count: usize) -> bool {
    let batch: Vec<u8> = one.iter().copied().cycle().take(one.len() * 100).collect();
    for _ in 0..count / 100 {
        if s.write_all(&batch).is_err() {
            return false;
        }
    }
    true
}

/// Reads until the proxy ends the connection; the frame types received, or a panic if it is
/// still open after [`PATIENCE`].
fn until_closed(s: &mut TcpStream) -> Vec<u8> {
    s.set_read_timeout(Some(PATIENCE)).expect("timeout");
    let mut data = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => data.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted) => break,
            Err(e) => panic!("the offender's connection is still open: {e}"),
        }
    }
    let mut kinds = Vec::new();
    let mut at = 0;
    while data.len() >= at + 9 {
        let len = (usize::from(data[at]) << 16) | (usize::from(data[at + 1]) << 8) | usize::from(data[at + 2]);
        kinds.push(data[at + 3]);
        at += 9 + len;
    }
    kinds
}

/// A proxy with one origin, and what every case checks around the abuse.
struct Rig {
    proxy: Proxy,
    addr: SocketAddr,
    admin: SocketAddr,
    _origin: Origin,
}

impl Rig {
    fn start(extra: &str) -> Rig {
        let origin = Origin::start("main");
        let (addr, admin) = (proxy_addr(), proxy_addr());
        let config = simple_config(addr, &[origin.addr], extra) + &format!("\n[admin]\nlisten = \"{admin}\"\n");
        let proxy = Proxy::start(&config, addr);
        Rig { proxy, addr, admin, _origin: origin }
    }

    /// `switchyard_errors_total` of the service for `reason`, from the admin API.
    fn errors(&self, reason: &str) -> f64 {
        let host = self.admin.to_string();
        let r = Client::connect(self.admin).request("GET", "/metrics", &[("host", &host), ("connection", "close")]);
        assert_eq!(r.status, 200, "{}", r.text());
        let label = format!("reason=\"{reason}\"");
        r.text()
            .lines()
            .filter(|l| l.starts_with("switchyard_errors_total{") && l.contains(&label))
            .find_map(|l| l.rsplit_once(' ')?.1.parse().ok())
            .unwrap_or(0.0)
    }

    /// A well-behaved HTTP/2 client requesting on one connection until `stop`; returns how
    /// many responses it got, panicking on any failure.
    fn bystander(&self, stop: Arc<AtomicBool>) -> JoinHandle<u32> {
        let addr = self.addr;
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(async move {
                let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
                let (client, conn) = h2::client::handshake(tcp).await.expect("handshake");
                tokio::spawn(conn);
                let mut served = 0;
                while served < 2000 && (!stop.load(Ordering::Relaxed) || served < 5) {
                    let mut client = client.clone().ready().await.expect("ready");
                    let req = http::Request::get(format!("http://{addr}/?size=2000")).body(()).expect("request");
                    let (response, _) = client.send_request(req, true).expect("send");
                    let (parts, mut body) = response.await.expect("response").into_parts();
                    let body = common::h2_body(&mut body).await.expect("body");
                    assert_eq!((parts.status.as_u16(), body.len()), (200, 2000), "bystander request {served}");
                    served += 1;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                served
            })
        })
    }

    /// Runs `abuse` beside a bystander, then checks memory and that the proxy still serves.
    fn around(&self, abuse: impl FnOnce()) {
        let rss_before = self.proxy.rss_kib().expect("rss");
        let stop = Arc::new(AtomicBool::new(false));
        let bystander = self.bystander(stop.clone());
        abuse();
        let rss_after = self.proxy.rss_kib().expect("rss");
        stop.store(true, Ordering::Relaxed);
        let served = bystander.join().expect("the bystander was served throughout");
        assert!(served >= 5);
        assert!(rss_after < rss_before + 64 * 1024, "RSS grew from {rss_before} KiB to {rss_after} KiB");
        assert_eq!(self.proxy.get("/").status, 200, "the proxy is still up");
    }

    fn wait_log(&self, text: &str) {
        wait_for(&format!("{text:?} in the log"), || self.proxy.log().contains(text).then_some(()));
    }
}

#[test]
fn a_ping_flood_that_never_reads_is_cut() {
    let rig = Rig::start("");
    rig.around(|| {
        let mut s = offender(rig.addr);
        // 20,000 PINGs against the default of 1000 per 10 s.
        flood(&mut s, &frame(PING, 0, 0, &[7; 8]), 20_000);
        until_closed(&mut s);
    });
    rig.wait_log("control-frame-flood");
    assert_eq!(rig.errors("control-frame-flood"), 1.0, "counted once in the metrics");
}

#[test]
fn a_settings_flood_that_never_reads_is_cut() {
    let rig = Rig::start("");
    rig.around(|| {
        let mut s = offender(rig.addr);
        // SETTINGS_INITIAL_WINDOW_SIZE = 65535, over and over.
        let settings = frame(SETTINGS, 0, 0, &[0, 4, 0, 0, 0xff, 0xff]);
        flood(&mut s, &settings, 20_000);
        until_closed(&mut s);
    });
    rig.wait_log("control-frame-flood");
}

#[test]
fn control_frames_below_the_limit_pass_and_beyond_it_cut() {
    let rig = Rig::start("http2 = { max_control_frames = 200 }");
    let mut s = offender(rig.addr);
    s.set_read_timeout(Some(PATIENCE)).expect("timeout");
    // 150 PINGs, each answer read: under the limit (the SETTINGS frame counts too).
    let mut acks = 0;
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    s.write_all(&frame(PING, 0, 0, &[1; 8]).repeat(150)).expect("pings");
    while acks < 150 {
        let n = s.read(&mut buf).expect("answers");
        assert!(n > 0, "closed under the limit");
        data.extend_from_slice(&buf[..n]);
        let mut at = 0;
        acks = 0;
        while data.len() >= at + 9 {
            let len = (usize::from(data[at + 1]) << 8) | usize::from(data[at + 2]);
            acks += usize::from(data[at + 3] == PING && data[at + 4] & ACK != 0);
            at += 9 + len;
        }
    }
    // A request is still served on the connection.
    s.write_all(&frame(HEADERS, END_STREAM | END_HEADERS, 1, &get_block())).expect("request");
    let mut headers = false;
    while !headers {
        let n = s.read(&mut buf).expect("response");
        assert!(n > 0, "closed before answering");
        data.extend_from_slice(&buf[..n]);
        let mut at = 0;
        while data.len() >= at + 9 {
            let len = (usize::from(data[at + 1]) << 8) | usize::from(data[at + 2]);
            headers |= data[at + 3] == HEADERS;
            at += 9 + len;
        }
    }
    // 100 more within the window: cut.
    let _ = s.write_all(&frame(PING, 0, 0, &[2; 8]).repeat(100));
    until_closed(&mut s);
    rig.wait_log("control-frame-flood");
}

#[test]
fn a_continuation_flood_of_empty_frames_is_cut_with_goaway() {
    let rig = Rig::start("");
    rig.around(|| {
        let mut s = offender(rig.addr);
        s.write_all(&frame(HEADERS, END_STREAM, 1, &get_block())).expect("headers");
        // Empty CONTINUATION frames never grow the header list: only their count can stop them.
        flood(&mut s, &frame(CONTINUATION, 0, 1, &[]), 100_000);
        let kinds = until_closed(&mut s);
        assert!(kinds.contains(&GOAWAY), "{kinds:?}");
        assert!(!kinds.contains(&HEADERS), "{kinds:?}");
    });
}

#[test]
fn an_hpack_bomb_is_cut_with_goaway() {
    let rig = Rig::start("");
    rig.around(|| {
        let mut s = offender(rig.addr);
        let mut block = get_block();
        // A 4000-byte value into the dynamic table (literal with incremental indexing, new
        // name), then referenced (index 62) 12,000 times: 12 KiB on the wire, about 48 MiB
        // of header list once decoded.
        block.push(0x40);
        hpack_int(0, 7, 1, &mut block);
        block.push(b'x');
        hpack_int(0, 7, 4000, &mut block);
        block.extend(std::iter::repeat_n(b'b', 4000));
        block.extend(std::iter::repeat_n(0xbe, 12_000));
        s.write_all(&frame(HEADERS, END_STREAM | END_HEADERS, 1, &block)).expect("headers");
        let kinds = until_closed(&mut s);
        assert!(kinds.contains(&GOAWAY), "{kinds:?}");
        assert!(!kinds.contains(&HEADERS), "{kinds:?}");
    });
}

#[test]
fn many_bombs_in_parallel_keep_memory_bounded() {
    // The same bomb from 20 connections at once.
    let rig = Rig::start("");
    rig.around(|| {
        let mut block = get_block();
        block.push(0x40);
        hpack_int(0, 7, 1, &mut block);
        block.push(b'x');
        hpack_int(0, 7, 4000, &mut block);
        block.extend(std::iter::repeat_n(b'b', 4000));
        block.extend(std::iter::repeat_n(0xbe, 12_000));
        let request = frame(HEADERS, END_STREAM | END_HEADERS, 1, &block);
        let mut offenders: Vec<TcpStream> = (0..20).map(|_| offender(rig.addr)).collect();
        for s in &mut offenders {
            s.write_all(&request).expect("headers");
        }
        for s in &mut offenders {
            until_closed(s);
        }
    });
}
