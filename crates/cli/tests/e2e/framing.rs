//! Message framing across the proxy, against a raw server that sends exactly
//! the bytes a test wants: chunked responses towards HTTP/1.0 clients,
//! conflicting response lengths, absolute-form targets, bodiless statuses.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::thread;

use common::*;

/// A server that answers every request head it reads with `response`, on
/// every connection, until the test process ends.
fn raw_server(response: &'static [u8]) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind raw server");
    let addr = listener.local_addr().expect("addr");
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    match stream.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        if stream.write_all(response).is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    addr
}

const CHUNKED: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";

#[test]
fn http10_clients_get_chunked_responses_decoded() {
    let server = raw_server(CHUNKED);
    let listen = proxy_addr();
    let proxy = Proxy::start(&simple_config(listen, &[server], ""), listen);
    let mut c = proxy.connect();
    c.send(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").expect("send");
    let r = c.read_response().expect("response");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("transfer-encoding"), None, "HTTP/1.0 must not see chunked coding");
    assert_eq!(r.text(), "hello world");
    assert!(r.closes(), "a decoded body is delimited by closing the connection");
    // HTTP/1.1 clients still get the chunked body as sent.
    let r = proxy.get("/");
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    assert_eq!(r.text(), "hello world");
}

#[test]
fn chunked_wins_over_content_length_in_responses() {
    static BOTH: &[u8] =
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
    let server = raw_server(BOTH);
    let listen = proxy_addr();
    let proxy = Proxy::start(&simple_config(listen, &[server], ""), listen);
    let mut c = proxy.connect();
    let r = c.get("/");
    assert_eq!(r.header("content-length"), None, "both lengths must not reach the client");
    assert_eq!(r.text(), "hello");
    // The connection stays usable: framing was followed, not the stray length.
    assert_eq!(c.get("/").text(), "hello");
}

#[test]
fn absolute_form_target_replaces_host() {
    let origin = Origin::start("origin");
    let listen = proxy_addr();
    let proxy = Proxy::start(&simple_config(listen, &[origin.addr], ""), listen);
    let mut c = proxy.connect();
    c.send(b"GET http://Example.COM:8080/__origin/request?x=1 HTTP/1.1\r\nHost: other.invalid\r\n\r\n").expect("send");
    let r = c.read_response().expect("response");
    let seen = r.json();
    assert_eq!(seen["path"], "/__origin/request");
    let hosts: Vec<&str> = seen["headers"]
        .as_array()
        .expect("headers")
        .iter()
        .filter(|h| h[0].as_str().is_some_and(|n| n.eq_ignore_ascii_case("host")))
        .filter_map(|h| h[1].as_str())
        .collect();
    assert_eq!(hosts, ["Example.COM:8080"]);
}

#[test]
fn unknown_expectation_is_417_and_bodiless_statuses_have_no_body() {
    let listen = proxy_addr();
    let config = format!(
        "[[service]]\nname = \"web\"\nlisten = [\"{listen}\"]\n\
         rules = [{{ path = \"/empty\", respond = \"ignored\", status = 204 }}]\n"
    );
    let proxy = Proxy::start(&config, listen);
    let mut c = proxy.connect();
    let r = c.get("/empty");
    assert_eq!(r.status, 204);
    assert_eq!(r.header("content-length"), None);
    assert!(r.body.is_empty());
    // The connection is still in step for another request.
    assert_eq!(c.get("/empty").status, 204);
    let mut c = proxy.connect();
    c.send(b"GET / HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\n\r\n").expect("send");
    assert_eq!(c.read_response().expect("response").status, 417);
}
