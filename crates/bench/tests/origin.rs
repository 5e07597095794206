//! End-to-end tests of the origin simulator over real loopback sockets.
//!
//! The client here is deliberately minimal and separate from the origin's own parser: raw
//! bytes out, `httparse` for response heads, framing decoded by hand.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Buf, BytesMut};
use switchyard_bench::origin::{Origin, OriginStats};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A running origin on a free loopback port.
struct TestOrigin {
    addr: SocketAddr,
    stats: Arc<OriginStats>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl TestOrigin {
    async fn start(name: &str) -> TestOrigin {
        let origin = Origin::bind(SocketAddr::from(([127, 0, 0, 1], 0)), name).await.unwrap();
        let addr = origin.local_addr();
        let stats = origin.stats();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(origin.serve(async move {
            let _ = stopped.await;
        }));
        TestOrigin { addr, stats, stop: Some(stop), task }
    }

    async fn client(&self) -> Client {
        Client::connect(self.addr).await
    }

    /// One request on a fresh connection.
    async fn get(&self, target: &str) -> Response {
        let mut client = self.client().await;
        client.send(format!("GET {target} HTTP/1.1\r\nhost: t\r\n\r\n").as_bytes()).await;
        client.response().await
    }
}

#[derive(Debug)]
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

struct Client {
    read: OwnedReadHalf,
    write: Option<OwnedWriteHalf>,
    buf: BytesMut,
}

impl Client {
    async fn connect(addr: SocketAddr) -> Client {
        let (read, write) = TcpStream::connect(addr).await.unwrap().into_split();
        Client { read, write: Some(write), buf: BytesMut::new() }
    }

    async fn send(&mut self, raw: &[u8]) {
        self.write.as_mut().unwrap().write_all(raw).await.unwrap();
    }

    async fn fill(&mut self) -> usize {
        self.buf.reserve(64 * 1024);
        self.read.read_buf(&mut self.buf).await.unwrap()
    }

    /// Reads a response, keeping its body.
    async fn response(&mut self) -> Response {
        let mut body = Vec::new();
        let mut response = self.response_with(false, |piece| body.extend_from_slice(piece)).await;
        response.body = body;
        response
    }

    /// Reads a response to a HEAD request (no body whatever the headers say).
    async fn head_response(&mut self) -> Response {
        self.response_with(true, |_| {}).await
    }

    /// Reads a response, handing its body to `sink` piece by piece (bounded memory).
    async fn response_with(&mut self, no_body: bool, mut sink: impl FnMut(&[u8])) -> Response {
        let mut response = loop {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut parsed = httparse::Response::new(&mut headers);
            if let httparse::Status::Complete(len) = parsed.parse(&self.buf).unwrap() {
                let response = Response {
                    status: parsed.code.unwrap(),
                    headers: parsed
                        .headers
                        .iter()
                        .map(|h| (h.name.to_owned(), String::from_utf8(h.value.to_vec()).unwrap()))
                        .collect(),
                    body: Vec::new(),
                };
                self.buf.advance(len);
                break response;
            }
            assert!(self.fill().await > 0, "connection closed before a response head");
        };
        if response.status == 100 {
            // Interim response: the real one follows.
            response = Box::pin(self.response_with(no_body, sink)).await;
            return response;
        }
        if no_body || matches!(response.status, 204 | 304) {
            return response;
        }
        if let Some(len) = response.header("content-length") {
            let mut left: usize = len.parse().unwrap();
            while left > 0 {
                if self.buf.is_empty() {
                    assert!(self.fill().await > 0, "connection closed mid-body");
                }
                let take = left.min(self.buf.len());
                sink(&self.buf[..take]);
                self.buf.advance(take);
                left -= take;
            }
        } else if response.header("transfer-encoding") == Some("chunked") {
            self.read_chunked(&mut sink).await;
        } else {
            // Delimited by close.
            loop {
                sink(&self.buf);
                self.buf.clear();
                if self.fill().await == 0 {
                    break;
                }
            }
        }
        response
    }

    async fn read_chunked(&mut self, sink: &mut impl FnMut(&[u8])) {
        loop {
            let (used, size) = loop {
                match httparse::parse_chunk_size(&self.buf).unwrap() {
                    httparse::Status::Complete(parsed) => break parsed,
                    httparse::Status::Partial => assert!(self.fill().await > 0),
                }
            };
            self.buf.advance(used);
            let mut left = size as usize;
            while left > 0 {
                if self.buf.is_empty() {
                    assert!(self.fill().await > 0);
                }
                let take = left.min(self.buf.len());
                sink(&self.buf[..take]);
                self.buf.advance(take);
                left -= take;
            }
            while self.buf.len() < 2 {
                assert!(self.fill().await > 0);
            }
            assert_eq!(&self.buf[..2], b"\r\n");
            self.buf.advance(2);
            if size == 0 {
                return;
            }
        }
    }

    /// True when the origin has closed the connection (after any buffered bytes).
    async fn closed(&mut self) -> bool {
        self.buf.is_empty() && self.fill().await == 0
    }
}

/// Distinct 8-byte windows over the body: few for repetitive text, nearly all for noise.
fn distinct_windows(body: &[u8]) -> usize {
    body.windows(8).collect::<HashSet<_>>().len()
}

/// Deterministic upload bytes (not a multiple of any power of two in period).
fn upload_byte(i: usize) -> u8 {
    (i.wrapping_mul(31) % 251) as u8
}

#[tokio::test]
async fn size_sets_the_body_length() {
    let origin = TestOrigin::start("a").await;
    for (target, len) in [("/", 128), ("/x?size=0", 0), ("/x?size=1", 1), ("/?size=200000", 200_000)] {
        let response = origin.get(target).await;
        assert_eq!(response.status, 200, "{target}");
        assert_eq!(response.body.len(), len, "{target}");
        assert_eq!(response.header("content-length"), Some(len.to_string().as_str()));
        assert_eq!(response.header("x-origin"), Some("a"));
    }
    // Bodies longer than the pre-generated buffer repeat it.
    let body = origin.get("/?size=200000").await.body;
    assert!((65_536..body.len()).all(|i| body[i] == body[i - 65_536]));
}

#[tokio::test]
async fn compressible_bodies_are_html_and_random_ones_are_not() {
    let origin = TestOrigin::start("a").await;
    let html = origin.get("/?size=65536&compressible=1").await;
    assert_eq!(html.header("content-type"), Some("text/html; charset=utf-8"));
    assert!(html.body.is_ascii());
    assert!(html.body.starts_with(b"<!doctype html>"));
    assert!(distinct_windows(&html.body) < html.body.len() / 2);

    let random = origin.get("/?size=65536").await;
    assert_eq!(random.header("content-type"), Some("application/octet-stream"));
    assert!(distinct_windows(&random.body) > random.body.len() * 99 / 100);
}

#[tokio::test]
async fn status_sets_the_status_and_204_304_have_no_body() {
    let origin = TestOrigin::start("a").await;
    let response = origin.get("/?status=503&size=10").await;
    assert_eq!(response.status, 503);
    assert_eq!(response.body.len(), 10);

    let mut client = origin.client().await;
    for status in [204, 304] {
        client.send(format!("GET /?status={status} HTTP/1.1\r\n\r\n").as_bytes()).await;
        let response = client.response().await;
        assert_eq!(response.status, status);
        assert_eq!(response.header("content-length"), None);
    }
    // Nothing stray was sent: the connection still frames correctly.
    client.send(b"GET /?size=3 HTTP/1.1\r\n\r\n").await;
    assert_eq!(client.response().await.body.len(), 3);
}

#[tokio::test]
async fn cache_sets_cache_control() {
    let origin = TestOrigin::start("a").await;
    assert_eq!(origin.get("/?cache=60").await.header("cache-control"), Some("public, max-age=60"));
    assert_eq!(origin.get("/").await.header("cache-control"), Some("no-store"));
}

#[tokio::test]
async fn delayed_responses_arrive() {
    let origin = TestOrigin::start("a").await;
    let response = origin.get("/?delay_ms=20&size=5").await;
    assert_eq!((response.status, response.body.len()), (200, 5));
}

#[tokio::test]
async fn stats_count_requests_and_connections() {
    let origin = TestOrigin::start("stats").await;
    for _ in 0..3 {
        let mut client = origin.client().await;
        for _ in 0..4 {
            client.send(b"GET / HTTP/1.1\r\n\r\n").await;
            assert_eq!(client.response().await.status, 200);
        }
    }
    let mut client = origin.client().await;
    for _ in 0..2 {
        // Stats requests do not count themselves.
        client.send(b"GET /__origin/stats HTTP/1.1\r\n\r\n").await;
        let stats = client.response().await;
        assert_eq!(stats.header("content-type"), Some("application/json"));
        let json = stats.json();
        assert_eq!(json["name"], "stats");
        assert_eq!(json["requests"], 12);
        assert_eq!(json["connections"], 4);
        assert_eq!(json["bytes_received"], 0);
    }
    assert_eq!(origin.stats.requests(), 12);
    assert_eq!(origin.stats.connections(), 4);
}

#[tokio::test]
async fn keep_alive_serves_many_requests_on_one_connection() {
    let origin = TestOrigin::start("a").await;
    let mut client = origin.client().await;
    for size in 0..5 {
        client.send(format!("GET /k?size={size} HTTP/1.1\r\n\r\n").as_bytes()).await;
        let response = client.response().await;
        assert_eq!(response.body.len(), size);
        assert_eq!(response.header("connection"), None);
    }
    assert_eq!(origin.stats.connections(), 1);
    assert_eq!(origin.stats.requests(), 5);
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    let origin = TestOrigin::start("a").await;
    let mut client = origin.client().await;
    let mut batch = Vec::new();
    for size in 0..20 {
        batch.extend_from_slice(format!("GET /p?size={size} HTTP/1.1\r\n\r\n").as_bytes());
        // A request with a body in the middle of the pipeline.
        if size == 10 {
            batch.extend_from_slice(b"POST /p?size=99 HTTP/1.1\r\ncontent-length: 5\r\n\r\nhello");
        }
    }
    batch.extend_from_slice(b"GET /p?size=100000 HTTP/1.1\r\n\r\n");
    client.send(&batch).await;
    for size in 0..20 {
        assert_eq!(client.response().await.body.len(), size);
        if size == 10 {
            let post = client.response().await;
            assert_eq!((post.body.len(), post.header("x-received-bytes")), (99, Some("5")));
        }
    }
    assert_eq!(client.response().await.body.len(), 100_000);
}

#[tokio::test]
async fn chunked_upload_is_read_and_counted() {
    let origin = TestOrigin::start("a").await;
    let mut client = origin.client().await;
    client.send(b"POST /up HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n").await;
    client.send(b"10;ext=x\r\n0123456789abcdef\r\n0\r\nx-trailer: yes\r\n\r\n").await;
    let response = client.response().await;
    assert_eq!(response.status, 200);
    assert_eq!(response.header("x-received-bytes"), Some("21"));
    // The connection is still framed correctly afterwards.
    client.send(b"POST /up HTTP/1.1\r\ncontent-length: 3\r\n\r\nabc").await;
    assert_eq!(client.response().await.header("x-received-bytes"), Some("3"));
    assert_eq!(origin.stats.bytes_received(), 24);
}

#[tokio::test]
async fn expect_continue_gets_100() {
    let origin = TestOrigin::start("a").await;
    let mut client = origin.client().await;
    client.send(b"PUT / HTTP/1.1\r\ncontent-length: 4\r\nexpect: 100-continue\r\n\r\n").await;
    while client.buf.len() < 25 {
        assert!(client.fill().await > 0);
    }
    assert!(client.buf.starts_with(b"HTTP/1.1 100 Continue\r\n\r\n"));
    client.send(b"data").await;
    assert_eq!(client.response().await.header("x-received-bytes"), Some("4"));
}

/// Sends `len` upload bytes with `head`, optionally chunked, while reading the echo.
async fn echo_roundtrip(origin: &TestOrigin, len: usize, chunked: bool) -> Response {
    let mut client = origin.client().await;
    let mut write = client.write.take().unwrap();
    let writer = tokio::spawn(async move {
        let framing = if chunked { "transfer-encoding: chunked".to_owned() } else { format!("content-length: {len}") };
        write.write_all(format!("POST /echo?echo=1 HTTP/1.1\r\n{framing}\r\n\r\n").as_bytes()).await.unwrap();
        let mut sent = 0;
        while sent < len {
            let piece: Vec<u8> = (sent..len.min(sent + 100_003)).map(upload_byte).collect();
            if chunked {
                write.write_all(format!("{:x}\r\n", piece.len()).as_bytes()).await.unwrap();
            }
            write.write_all(&piece).await.unwrap();
            if chunked {
                write.write_all(b"\r\n").await.unwrap();
            }
            sent += piece.len();
        }
        if chunked {
            write.write_all(b"0\r\n\r\n").await.unwrap();
        }
        write
    });
    let mut received = 0usize;
    let mut identical = true;
    let response = client
        .response_with(false, |piece| {
            for (i, byte) in piece.iter().enumerate() {
                identical &= *byte == upload_byte(received + i);
            }
            received += piece.len();
        })
        .await;
    client.write = Some(writer.await.unwrap());
    assert_eq!(received, len);
    assert!(identical, "echoed body differs from the upload");
    // Keep-alive survives an echo.
    client.send(b"GET /?size=7 HTTP/1.1\r\n\r\n").await;
    assert_eq!(client.response().await.body.len(), 7);
    response
}

#[tokio::test]
async fn echo_returns_a_10_mib_body_unchanged() {
    let origin = TestOrigin::start("a").await;
    let len = 10 * 1024 * 1024;
    let response = echo_roundtrip(&origin, len, false).await;
    assert_eq!(response.header("content-length"), Some(len.to_string().as_str()));
    assert_eq!(response.header("x-received-bytes"), Some(len.to_string().as_str()));
    assert_eq!(origin.stats.bytes_received(), len as u64);
}

#[tokio::test]
async fn echo_of_a_chunked_upload_is_chunked() {
    let origin = TestOrigin::start("a").await;
    let response = echo_roundtrip(&origin, 3 * 1024 * 1024 + 17, true).await;
    assert_eq!(response.header("transfer-encoding"), Some("chunked"));
    assert_eq!(response.header("content-length"), None);
}

#[tokio::test]
async fn close_param_closes_the_connection() {
    let origin = TestOrigin::start("a").await;
    let mut client = origin.client().await;
    client.send(b"GET /?close=1&size=9 HTTP/1.1\r\n\r\n").await;
    let response = client.response().await;
    assert_eq!(response.header("connection"), Some("close"));
    assert_eq!(response.body.len(), 9);
    assert!(client.closed().await);
}

#[tokio::test]
async fn http10_closes_unless_keep_alive_is_asked() {
    let origin = TestOrigin::start("a").await;
    let mut client = origin.client().await;
    client.send(b"GET / HTTP/1.0\r\nconnection: keep-alive\r\n\r\n").await;
    assert_eq!(client.response().await.header("connection"), Some("keep-alive"));
    client.send(b"GET / HTTP/1.0\r\n\r\n").await;
    let response = client.response().await;
    assert_eq!(response.header("connection"), Some("close"));
    assert_eq!(response.body.len(), 128);
    assert!(client.closed().await);
}

#[tokio::test]
async fn head_gets_headers_only() {
    let origin = TestOrigin::start("a").await;
    let mut client = origin.client().await;
    client.send(b"HEAD /?size=1000 HTTP/1.1\r\n\r\nGET /?size=2 HTTP/1.1\r\n\r\n").await;
    assert_eq!(client.head_response().await.header("content-length"), Some("1000"));
    assert_eq!(client.response().await.body.len(), 2);
}

#[tokio::test]
async fn request_endpoint_describes_the_request() {
    let origin = TestOrigin::start("a").await;
    let mut client = origin.client().await;
    client
        .send(
            b"GET /__origin/request?a=1&b=two HTTP/1.1\r\nHost: example.test\r\n\
              X-Forwarded-For: 192.0.2.1\r\nX-Custom: one\r\nx-custom: two\r\n\r\n",
        )
        .await;
    let json = client.response().await.json();
    assert_eq!(json["method"], "GET");
    assert_eq!(json["path"], "/__origin/request");
    assert_eq!(json["query"], "a=1&b=two");
    assert_eq!(json["version"], "HTTP/1.1");
    let local = client.read.local_addr().unwrap();
    assert_eq!(json["peer"], local.to_string());
    let headers = json["headers"].as_array().unwrap();
    let expected =
        [["Host", "example.test"], ["X-Forwarded-For", "192.0.2.1"], ["X-Custom", "one"], ["x-custom", "two"]];
    assert_eq!(headers.len(), expected.len());
    for (header, [name, value]) in headers.iter().zip(expected) {
        assert_eq!(header, &serde_json::json!([name, value]));
    }
    assert_eq!(origin.stats.requests(), 1);
}

#[tokio::test]
async fn bad_requests_get_400_and_close() {
    let origin = TestOrigin::start("a").await;
    let cases: &[&[u8]] = &[
        b"NOT HTTP AT ALL\r\n\r\n",
        b"GET / HTTP/1.1\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n",
        b"GET / HTTP/1.1\r\ncontent-length: x\r\n\r\n",
        b"GET /?size=-1 HTTP/1.1\r\n\r\n",
        b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
    ];
    for raw in cases {
        let mut client = origin.client().await;
        client.send(raw).await;
        let response = client.response().await;
        assert_eq!(response.status, 400, "{}", String::from_utf8_lossy(raw));
        assert_eq!(response.header("connection"), Some("close"));
        assert_eq!(response.header("x-origin"), Some("a"));
        assert!(client.closed().await);
    }
    // An endless head is cut off too.
    let mut client = origin.client().await;
    client.send(b"GET / HTTP/1.1\r\n").await;
    client.send(format!("x-long: {}\r\n", "a".repeat(70_000)).as_bytes()).await;
    assert_eq!(client.response().await.status, 400);
    assert_eq!(origin.stats.requests(), 0);
}

#[tokio::test]
async fn a_huge_download_streams() {
    let origin = TestOrigin::start("a").await;
    let len: u64 = 1 << 30;
    let mut client = origin.client().await;
    client.send(format!("GET /?size={len} HTTP/1.1\r\n\r\n").as_bytes()).await;
    let mut received = 0u64;
    let response = client.response_with(false, |piece| received += piece.len() as u64).await;
    assert_eq!(response.header("content-length"), Some(len.to_string().as_str()));
    assert_eq!(received, len);
}

#[tokio::test]
async fn ipv6_loopback_works_where_available() {
    let Ok(origin) = Origin::bind("[::1]:0".parse().unwrap(), "six").await else {
        return; // no IPv6 on this host
    };
    let addr = origin.local_addr();
    tokio::spawn(origin.serve(std::future::pending()));
    let mut client = Client::connect(addr).await;
    client.send(b"GET / HTTP/1.1\r\n\r\n").await;
    assert_eq!(client.response().await.header("x-origin"), Some("six"));
}

#[tokio::test]
async fn shutdown_stops_serving_and_closes_idle_connections() {
    let mut origin = TestOrigin::start("a").await;
    let mut idle = origin.client().await;
    idle.send(b"GET / HTTP/1.1\r\n\r\n").await;
    assert_eq!(idle.response().await.status, 200);
    origin.stop.take().unwrap().send(()).unwrap();
    origin.task.await.unwrap().unwrap();
    assert!(idle.closed().await);
    assert!(TcpStream::connect(origin.addr).await.is_err());
}

#[tokio::test]
async fn names_that_are_not_header_values_are_refused() {
    let bound = Origin::bind(SocketAddr::from(([127, 0, 0, 1], 0)), "bad\r\nname").await;
    assert!(bound.is_err());
}
