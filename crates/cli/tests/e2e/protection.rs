//! Client protection end to end: each protection refuses with its status
//! (or a close at layer 4), writes its reason to the access log, counts in
//! `switchyard_errors_total{reason}`, leaves a well-behaved client on another
//! address unaffected, and leaves the process up. Loopback is all of
//! 127.0.0.0/8, so each client binds its own source address.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;

/// A connection to `to` from source address 127.0.0.`host`.
fn stream_from(host: u8, to: SocketAddr) -> TcpStream {
    wait_for(&format!("connect to {to} from 127.0.0.{host}"), || {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
        s.bind(&SocketAddr::from(([127, 0, 0, host], 0)).into()).ok()?;
        s.connect(&to.into()).ok()?;
        Some(TcpStream::from(s))
    })
}

fn client_from(host: u8, to: SocketAddr) -> Client {
    Client::from_stream(stream_from(host, to))
}

/// A proxy with an admin listener and a JSON access log; `extra` goes into the service.
struct Setup {
    proxy: Proxy,
    admin: SocketAddr,
    log: PathBuf,
    _origin: Origin,
}

fn setup(tag: &str, extra: &str) -> Setup {
    let origin = Origin::start("o");
    let listen = proxy_addr();
    let admin = proxy_addr();
    let log = temp_dir(tag).join("access.log");
    let tables =
        format!("\n[admin]\nlisten = \"{admin}\"\n\n[access_log]\npath = \"{}\"\nformat = \"json\"\n", log.display());
    let proxy = Proxy::start(&(simple_config(listen, &[origin.addr], extra) + &tables), listen);
    Setup { proxy, admin, log, _origin: origin }
}

/// `switchyard_errors_total` of service `web` for `reason`.
fn refused(admin: SocketAddr, reason: &str) -> f64 {
    let host = admin.to_string();
    let r = Client::connect(admin).request("GET", "/metrics", &[("host", &host), ("connection", "close")]);
    assert_eq!(r.status, 200, "{}", r.text());
    let label = format!("reason=\"{reason}\"");
    r.text()
        .lines()
        .filter(|l| l.starts_with("switchyard_errors_total{") && l.contains("service=\"web\"") && l.contains(&label))
        .find_map(|l| l.rsplit_once(' ')?.1.parse().ok())
        .unwrap_or(0.0)
}

/// Waits until the metric for `reason` reaches `n`.
fn wait_refused(admin: SocketAddr, reason: &str, n: f64) {
    wait_for(&format!("{n} refusals `{reason}` in the metrics"), || (refused(admin, reason) >= n).then_some(()));
}

/// Access log lines (JSON) with this reason.
fn logged(log: &Path, reason: &str) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["reason"] == reason)
        .collect()
}

/// Waits for an access log line with `reason` from client address `ip`.
fn wait_logged(log: &Path, reason: &str, ip: &str) -> serde_json::Value {
    wait_for(&format!("an access log line `{reason}` from {ip}"), || {
        logged(log, reason).into_iter().find(|v| v["client"].as_str().is_some_and(|c| c.starts_with(ip)))
    })
}

/// The process is up and serves a well-behaved client.
fn still_serving(s: &Setup, host: u8) {
    let r = client_from(host, s.proxy.addr).get("/still-up");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(!s.proxy.log().contains("panicked"), "{}", s.proxy.log());
}

fn assert_refusal(r: &Response, status: u16) {
    assert_eq!(r.status, status, "{}", r.text());
    assert_eq!(r.header("x-origin"), None, "answered by the proxy");
    assert!(r.closes(), "a refusal closes the connection");
}

#[test]
fn a_long_uri_is_414_and_a_long_unfinished_request_line_too() {
    let s = setup("protect-uri", "limits = { max_uri_bytes = 100 }");
    let long = format!("/{}", "a".repeat(150));
    let mut c = client_from(2, s.proxy.addr);
    let r = c.get(&long);
    assert_refusal(&r, 414);
    assert!(c.is_closed());
    // A request line that never ends is refused once past the limit, not at the head limit.
    let mut c = client_from(2, s.proxy.addr);
    c.send(format!("GET /{} ", "b".repeat(300)).as_bytes()).expect("send");
    assert_refusal(&c.read_response().expect("a 414"), 414);
    // A target at the limit passes.
    assert_eq!(client_from(3, s.proxy.addr).get(&format!("/{}", "c".repeat(99))).status, 200);
    wait_logged(&s.log, "uri-too-long", "127.0.0.2");
    wait_refused(s.admin, "uri-too-long", 2.0);
    still_serving(&s, 3);
}

#[test]
fn a_head_trickled_a_byte_at_a_time_gets_408_at_the_total_deadline() {
    let s = setup("protect-slowloris", "timeouts = { client_header = \"1s\" }");
    let stream = stream_from(2, s.proxy.addr);
    let mut writer = stream.try_clone().expect("clone");
    // 200 ms a byte: each read arrives well within any per-read timeout, and the
    // head (never finished) would take longer than the test allows.
    let trickle = std::thread::spawn(move || {
        let head = format!("GET / HTTP/1.1\r\nhost: x\r\nx-pad: {}", "p".repeat(200));
        let mut sent = 0;
        for b in head.bytes() {
            if writer.write_all(&[b]).is_err() {
                break;
            }
            sent += 1;
            std::thread::sleep(Duration::from_millis(200));
        }
        sent
    });
    // Meanwhile a well-behaved client on another address is served.
    still_serving(&s, 3);
    let mut c = Client::from_stream(stream);
    let r = c.read_response().expect("a 408 before the trickle ends");
    assert_refusal(&r, 408);
    assert!(c.is_closed());
    let sent = trickle.join().expect("trickle");
    assert!(sent < 220, "the proxy waited for the whole trickle ({sent} bytes)");
    wait_logged(&s.log, "client-header-timeout", "127.0.0.2");
    wait_refused(s.admin, "client-header-timeout", 1.0);
    still_serving(&s, 3);
}

#[test]
fn a_body_trickled_a_byte_at_a_time_gets_408_at_the_body_deadline() {
    let s = setup("protect-slowpost", "timeouts = { client_body = \"1s\" }");
    let stream = stream_from(2, s.proxy.addr);
    let mut writer = stream.try_clone().expect("clone");
    writer.write_all(b"POST /upload HTTP/1.1\r\nhost: x\r\ncontent-length: 200\r\n\r\n").expect("head");
    let trickle = std::thread::spawn(move || {
        let mut sent = 0;
        for _ in 0..200 {
            if writer.write_all(b"x").is_err() {
                break;
            }
            sent += 1;
            std::thread::sleep(Duration::from_millis(200));
        }
        sent
    });
    still_serving(&s, 3);
    let mut c = Client::from_stream(stream);
    let r = c.read_response().expect("a 408 before the body ends");
    assert_refusal(&r, 408);
    let sent = trickle.join().expect("trickle");
    assert!(sent < 200, "the proxy waited for the whole body");
    wait_logged(&s.log, "client-body-timeout", "127.0.0.2");
    wait_refused(s.admin, "client-body-timeout", 1.0);
    // A body sent at once is unaffected.
    let mut ok = client_from(3, s.proxy.addr);
    ok.send(b"POST /upload HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nhello").expect("send");
    assert_eq!(ok.read_response().expect("response").status, 200);
    still_serving(&s, 3);
}

#[test]
fn a_client_over_its_request_rate_gets_429_with_retry_after() {
    let s = setup("protect-rate", "protection = { request_rate = { count = 3, per = \"30s\" } }");
    let mut c = client_from(2, s.proxy.addr);
    for _ in 0..3 {
        assert_eq!(c.get("/").status, 200);
    }
    let r = c.get("/");
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.header("x-origin"), None, "answered by the proxy");
    let wait: u64 = r.header("retry-after").expect("retry-after").parse().expect("seconds");
    assert!((1..=30).contains(&wait), "{wait}");
    // A bodiless request over the rate leaves the connection open; the next is refused too.
    assert!(!r.closes());
    assert_eq!(c.get("/").status, 429);
    // A new connection from the same address is still over the rate.
    assert_eq!(client_from(2, s.proxy.addr).get("/").status, 429);
    // A request with a body over the rate closes its connection (the body is not read).
    let mut post = client_from(2, s.proxy.addr);
    post.send(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\n\r\nabc").expect("send");
    assert_refusal(&post.read_response().expect("a 429"), 429);
    // Another address has its own budget.
    let mut other = client_from(3, s.proxy.addr);
    for _ in 0..3 {
        assert_eq!(other.get("/").status, 200);
    }
    let line = wait_logged(&s.log, "rate-limited", "127.0.0.2");
    assert_eq!(line["status"], 429);
    assert_eq!(line["uri"], "/", "the refused request is logged as itself");
    wait_refused(s.admin, "rate-limited", 4.0);
    still_serving(&s, 4);
}

#[test]
fn a_rate_refills_after_its_window() {
    let s = setup("protect-refill", "protection = { request_rate = { count = 2, per = \"2s\" } }");
    let served = |host| client_from(host, s.proxy.addr).get("/").status;
    assert_eq!(served(2), 200);
    assert_eq!(served(2), 200);
    assert_eq!(served(2), 429);
    // Two per 2 s is one every second: after that, one more is allowed.
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(served(2), 200, "a token came back");
    still_serving(&s, 3);
}

#[test]
fn connections_per_client_and_connection_rate_are_capped() {
    let extra = "protection = { max_connections_per_client = 2, connection_rate = { count = 3, per = \"30s\" } }";
    let s = setup("protect-conns", extra);
    let mut a = client_from(2, s.proxy.addr);
    let mut b = client_from(2, s.proxy.addr);
    assert_eq!(a.get("/").status, 200);
    assert_eq!(b.get("/").status, 200);
    // A third at once is too many: 429 and closed.
    let mut third = client_from(2, s.proxy.addr);
    assert_refusal(&third.get("/"), 429);
    assert!(third.is_closed());
    wait_logged(&s.log, "too-many-connections", "127.0.0.2");
    // Other addresses are unaffected meanwhile.
    still_serving(&s, 3);
    // Closing one frees its slot (the refused one took no rate token): the third connection of the window.
    drop(a);
    wait_for("the closed connection's slot to be freed", || {
        let r = client_from(2, s.proxy.addr).get("/");
        (r.status == 200).then_some(())
    });
    drop(b);
    // The window allowed 3 new connections; the next is over the rate whatever is open.
    let r = wait_for("a refusal by rate once slots are free", || {
        let r = client_from(2, s.proxy.addr).get("/");
        (r.status == 429 && !logged(&s.log, "connection-rate-limited").is_empty()).then_some(r)
    });
    assert_refusal(&r, 429);
    wait_refused(s.admin, "too-many-connections", 1.0);
    wait_refused(s.admin, "connection-rate-limited", 1.0);
    still_serving(&s, 4);
}

#[test]
fn allow_and_deny_lists_answer_403_and_a_proxy_header_address_counts() {
    let extra = "accept_proxy = [\"127.0.0.1\"]\n\
                 protection = { allow = [\"127.0.0.0/29\", \"192.0.2.0/24\"], deny = [\"127.0.0.2\", \"192.0.2.66\"] }";
    let s = setup("protect-lists", extra);
    // Denied wins over allowed.
    assert_refusal(&client_from(2, s.proxy.addr).get("/"), 403);
    // Outside the allow list.
    assert_refusal(&client_from(9, s.proxy.addr).get("/"), 403);
    assert_eq!(client_from(3, s.proxy.addr).get("/").status, 200);
    // The address of a PROXY protocol header is the one judged.
    let via_proxy = |source: &str| {
        let mut c = client_from(1, s.proxy.addr);
        c.send(format!("PROXY TCP4 {source} 127.0.0.1 40000 80\r\n").as_bytes()).expect("send");
        c.get("/")
    };
    assert_refusal(&via_proxy("192.0.2.66"), 403);
    assert_eq!(via_proxy("192.0.2.1").status, 200);
    wait_logged(&s.log, "denied", "127.0.0.2");
    wait_logged(&s.log, "denied", "127.0.0.9");
    wait_logged(&s.log, "denied", "192.0.2.66");
    wait_refused(s.admin, "denied", 3.0);
    still_serving(&s, 4);
}

#[test]
fn a_trusted_front_proxy_header_names_the_client() {
    let extra = "protection = { deny = [\"192.0.2.66\"], request_rate = { count = 2, per = \"30s\" }, \
                 client_address_header = { name = \"x-forwarded-for\", trusted = [\"127.0.0.2\", \"10.0.0.0/8\"] } }";
    let s = setup("protect-xff", extra);
    let front = |xff: &str| client_from(2, s.proxy.addr).request("GET", "/", &[("x-forwarded-for", xff)]);
    assert_refusal(&front("192.0.2.66"), 403);
    // The last address that is not itself a trusted proxy.
    assert_refusal(&front("192.0.2.66, 10.1.1.1"), 403);
    // Rates count per named client, not per front proxy.
    assert_eq!(front("192.0.2.10").status, 200);
    assert_eq!(front("203.0.113.5, 192.0.2.10").status, 200);
    assert_eq!(front("192.0.2.10").status, 429);
    assert_eq!(front("192.0.2.11").status, 200);
    // An untrusted peer's header is ignored: it is judged by its own address.
    let untrusted = |xff: &str| client_from(3, s.proxy.addr).request("GET", "/", &[("x-forwarded-for", xff)]);
    assert_eq!(untrusted("192.0.2.66").status, 200);
    assert_eq!(untrusted("192.0.2.66").status, 200);
    assert_eq!(untrusted("192.0.2.77").status, 429);
    wait_refused(s.admin, "denied", 2.0);
    wait_refused(s.admin, "rate-limited", 2.0);
    still_serving(&s, 4);
}

#[test]
fn a_tcp_service_closes_refused_connections_at_once() {
    let origin = Origin::start("o");
    let listen = proxy_addr();
    let admin = proxy_addr();
    let log = temp_dir("protect-tcp").join("access.log");
    let extra = format!(
        "mode = \"tcp\"\nprotection = {{ deny = [\"127.0.0.2\"], max_connections_per_client = 1 }}\n\n\
         [admin]\nlisten = \"{admin}\"\n\n[access_log]\npath = \"{}\"\nformat = \"json\"\n",
        log.display()
    );
    let proxy = Proxy::start(&simple_config(listen, &[origin.addr], &extra), listen);
    let closed_at_once = |host: u8| {
        let mut s = stream_from(host, listen);
        s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        let _ = s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n");
        let started = Instant::now();
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf);
        assert!(matches!(n, Ok(0) | Err(_)), "refused connection got {n:?}");
        started.elapsed() < Duration::from_secs(10)
    };
    assert!(closed_at_once(2), "denied address");
    let mut held = client_from(3, listen);
    assert_eq!(held.get("/").status, 200);
    assert!(closed_at_once(3), "second connection of one client");
    // Another client is relayed meanwhile, and the first connection still works.
    assert_eq!(client_from(4, listen).get("/").status, 200);
    assert_eq!(held.get("/again").status, 200);
    wait_for("the refusals in the access log", || {
        (!logged(&log, "denied").is_empty() && !logged(&log, "too-many-connections").is_empty()).then_some(())
    });
    wait_for("the refusals in the metrics", || {
        (refused(admin, "denied") >= 1.0 && refused(admin, "too-many-connections") >= 1.0).then_some(())
    });
    assert!(!proxy.log().contains("panicked"));
}

#[test]
fn http2_streams_count_against_the_request_rate() {
    let s = setup("protect-h2", "protection = { request_rate = { count = 3, per = \"30s\" } }");
    let addr = s.proxy.addr;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let statuses = runtime.block_on(async move {
        let std = stream_from(5, addr);
        std.set_nonblocking(true).expect("nonblocking");
        let tcp = tokio::net::TcpStream::from_std(std).expect("tokio stream");
        let (client, conn) = h2::client::handshake(tcp).await.expect("h2c handshake");
        tokio::spawn(conn);
        let mut statuses = Vec::new();
        for _ in 0..4 {
            let mut c = client.clone().ready().await.expect("ready");
            let req = http::Request::get(format!("http://{addr}/")).body(()).expect("request");
            let (response, _) = c.send_request(req, true).expect("send");
            statuses.push(response.await.expect("response").status().as_u16());
        }
        statuses
    });
    assert_eq!(statuses, [200, 200, 200, 429], "each stream is a request");
    // The same address over HTTP/1.1 shares the budget; another address has its own.
    assert_eq!(client_from(5, s.proxy.addr).get("/").status, 429);
    wait_logged(&s.log, "rate-limited", "127.0.0.5");
    still_serving(&s, 6);
}

#[test]
fn a_reload_keeps_the_counters_unless_the_protection_changes() {
    let s = setup("protect-reload", "protection = { request_rate = { count = 2, per = \"60s\" } }");
    let served = |host| client_from(host, s.proxy.addr).get("/").status;
    assert_eq!([served(2), served(2), served(2)], [200, 200, 429]);
    // Same settings (another service key changed): the client table, and the budget spent, carry over.
    let config = std::fs::read_to_string(&s.proxy.config).expect("config");
    std::fs::write(&s.proxy.config, config.replace("drain_timeout = \"5s\"", "drain_timeout = \"6s\"")).expect("write");
    s.proxy.reload(1);
    assert_eq!(served(2), 429, "the spent budget survives the reload");
    // New settings start a new table.
    let config = std::fs::read_to_string(&s.proxy.config).expect("config");
    std::fs::write(&s.proxy.config, config.replace("count = 2", "count = 3")).expect("write");
    s.proxy.reload(2);
    assert_eq!([served(2), served(2), served(2), served(2)], [200, 200, 200, 429]);
    assert!(!s.proxy.log().contains("reload refused"), "{}", s.proxy.log());
    still_serving(&s, 3);
}
