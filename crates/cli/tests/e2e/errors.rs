//! Every error status the proxy sends, each with its short body and, where the request
//! cannot be trusted any more, the connection closed afterwards; plus the failures the
//! proxy hides from clients (a dead server, servers closing keep-alive connections).

use crate::common;

use std::time::Duration;

use common::{dead_addr, proxy_addr, simple_config, Client, Origin, Proxy, Response};

/// Asserts `r` is the proxy's own error response for `status`.
fn assert_error(r: &Response, status: u16, phrase: &str) {
    assert_eq!(r.status, status, "{}", r.text());
    assert_eq!(r.text(), format!("{status} {phrase}\n"));
    assert_eq!(r.header("x-origin"), None, "answered by the proxy");
}

/// Sends raw bytes and reads the one response.
fn raw(c: &mut Client, bytes: &[u8]) -> Response {
    c.send(bytes).expect("send");
    c.read_response().expect("a response")
}

#[test]
fn malformed_request_is_400_and_closes() {
    let origin = Origin::start("origin");
    let listen = proxy_addr();
    let proxy = Proxy::start(&simple_config(listen, &[origin.addr], ""), listen);
    for bytes in [
        &b"GET / HTTP/1.1\r\nbad header line\r\n\r\n"[..],
        b"GET\r\n\r\n",
        b"GET / HTTP/1.1\r\nhost: a\r\nhost: b\r\n\r\n",
    ] {
        let mut c = proxy.connect();
        let r = raw(&mut c, bytes);
        assert_error(&r, 400, "Bad Request");
        assert!(r.closes() && c.is_closed(), "{:?}", String::from_utf8_lossy(bytes));
    }
    assert_eq!(origin.requests(), 0);
}

#[test]
fn slow_head_is_408_and_closes() {
    let origin = Origin::start("origin");
    let listen = proxy_addr();
    let proxy =
        Proxy::start(&simple_config(listen, &[origin.addr], "timeouts = { client_header = \"300ms\" }"), listen);
    let mut c = proxy.connect();
    c.send(b"GET / HTTP/1.1\r\nhost: x\r\n").expect("send");
    // No sleep needed for correctness: the read blocks until the proxy gives up.
    let r = c.read_response().expect("a 408");
    assert_error(&r, 408, "Request Timeout");
    assert!(c.is_closed());
    assert_eq!(origin.requests(), 0);
}

#[test]
fn body_over_limit_is_413_and_closes() {
    let origin = Origin::start("origin");
    let listen = proxy_addr();
    let proxy = Proxy::start(&simple_config(listen, &[origin.addr], "limits = { max_body_bytes = 1000 }"), listen);
    let mut c = proxy.connect();
    let r = raw(&mut c, b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 1001\r\n\r\n");
    assert_error(&r, 413, "Content Too Large");
    assert!(c.is_closed());
    // At the limit is fine.
    let mut c = proxy.connect();
    let mut req = b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\n".to_vec();
    req.extend_from_slice(&[b'a'; 1000]);
    let r = raw(&mut c, &req);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-received-bytes"), Some("1000"));
}

#[test]
fn huge_head_is_431_and_closes() {
    let origin = Origin::start("origin");
    let listen = proxy_addr();
    let proxy = Proxy::start(&simple_config(listen, &[origin.addr], ""), listen);
    let mut c = proxy.connect();
    let big = "a".repeat(32 * 1024);
    let r = raw(&mut c, format!("GET / HTTP/1.1\r\nhost: x\r\nx-big: {big}\r\n\r\n").as_bytes());
    assert_error(&r, 431, "Request Header Fields Too Large");
    assert!(c.is_closed());
    assert_eq!(origin.requests(), 0);
}

#[test]
fn refused_connections_are_502() {
    let listen = proxy_addr();
    let proxy = Proxy::start(&simple_config(listen, &[dead_addr(), dead_addr()], ""), listen);
    let mut c = proxy.connect();
    let r = c.get("/");
    assert_error(&r, 502, "Bad Gateway");
}

#[test]
fn a_single_refusing_server_is_502_not_503() {
    // The retry has nowhere else to go; the client still learns the connect failed.
    let listen = proxy_addr();
    let proxy = Proxy::start(&simple_config(listen, &[dead_addr()], ""), listen);
    assert_error(&proxy.connect().get("/"), 502, "Bad Gateway");
}

#[test]
fn no_pool_is_503() {
    let listen = proxy_addr();
    let config = format!(
        "[[service]]\nname = \"web\"\nlisten = [\"{listen}\"]\nrules = [{{ path = \"/health\", respond = \"ok\" }}]\n"
    );
    let proxy = Proxy::start(&config, listen);
    let mut c = proxy.connect();
    assert_eq!(c.get("/health").text(), "ok");
    assert_error(&c.get("/"), 503, "Service Unavailable");
}

#[test]
fn slow_server_is_504() {
    let origin = Origin::start("origin");
    let listen = proxy_addr();
    let proxy =
        Proxy::start(&simple_config(listen, &[origin.addr], "timeouts = { server_response = \"300ms\" }"), listen);
    let mut c = proxy.connect();
    assert_error(&c.get("/?delay_ms=3000"), 504, "Gateway Timeout");
    // A fresh connection still works (the stalled server connection was not reused).
    assert_eq!(proxy.get("/").status, 200);
}

#[test]
fn dead_server_is_skipped() {
    let live = Origin::start("live");
    let listen = proxy_addr();
    let proxy = Proxy::start(&simple_config(listen, &[dead_addr(), live.addr], ""), listen);
    let mut c = proxy.connect();
    for i in 0..20 {
        let r = c.get("/");
        assert_eq!((r.status, r.origin()), (200, "live"), "request {i}: {}", r.text());
    }
    for i in 0..10 {
        let r = proxy.get("/");
        assert_eq!((r.status, r.origin()), (200, "live"), "fresh connection {i}: {}", r.text());
    }
    assert_eq!(live.requests(), 30);
}

#[test]
fn server_closing_keep_alive_connections_is_invisible() {
    let origin = Origin::start("origin");
    let listen = proxy_addr();
    let proxy = Proxy::start(&simple_config(listen, &[origin.addr], ""), listen);
    let mut c = proxy.connect();
    for i in 0..20 {
        let path = if i % 2 == 0 { "/?close=1" } else { "/" };
        let r = c.get(path);
        assert_eq!(r.status, 200, "request {i} ({path}): {}", r.text());
        assert!(!r.closes(), "the client connection stays open");
    }
    // The origin may also close an idle pooled connection between requests.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(c.get("/").status, 200);
    assert_eq!(origin.requests(), 21);
}
