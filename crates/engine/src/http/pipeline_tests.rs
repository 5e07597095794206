//! The in-process test layer: the HTTP/1.1 pipeline served over in-memory
//! client connections ([`Pipe`]) against in-memory servers
//! ([`crate::upstream::memory`]), on a current-thread runtime with paused
//! time. No binary, no sockets, no sleeping: each test runs in milliseconds,
//! timeouts included (tokio advances the paused clock when every task waits).
//!
//! What a test asserts is what a client and a server at either end of the
//! proxy would see: the bytes of the responses, and the requests and
//! connections the servers got.

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use switchyard_balance::cookie::CookieKey;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::live::Generation;
use crate::transport::{Pipe, PipeEnd, Transport};
use crate::upstream::memory;
use crate::worker::{Scratch, Worker};

const SERVER_A: &str = "10.0.0.1:80";
const SERVER_B: &str = "10.0.0.2:80";

/// A worker serving `config` (a whole TOML file; `{A}` and `{B}` stand for
/// the two in-memory servers' addresses).
fn worker(config: &str) -> Rc<Worker> {
    let text = config.replace("{A}", SERVER_A).replace("{B}", SERVER_B);
    let config = switchyard_config::parse(&text, "test.toml").expect("valid configuration");
    let key = CookieKey::from_bytes([7; 32]);
    let gen = Generation::new(1, config, None, 1, None, &key, None).expect("generation");
    Rc::new(Worker::new(0, Arc::new(gen)))
}

/// One service `web` on pool `main` over `servers`, with `extra` keys for the service.
fn one_service(servers: &str, extra: &str) -> String {
    format!(
        "workers = 1\n[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:8080\"\npool = \"main\"\n{extra}\n\
         [[pool]]\nname = \"main\"\nbalance = \"first\"\nretries = 1\nservers = [{servers}]\n"
    )
}

/// A client connection to the service, served by the pipeline on its own task.
fn connect(worker: &Rc<Worker>) -> PipeEnd {
    let local: SocketAddr = "127.0.0.1:8080".parse().expect("address");
    let (pipe, end) = Pipe::pair(Some(local));
    let peer: SocketAddr = "192.0.2.7:40000".parse().expect("address");
    let serve =
        crate::http::serve(pipe, peer, Scratch::default(), worker.local(), 0, worker.clone(), Transport::default());
    tokio::task::spawn_local(serve);
    end
}

/// What a fake server does with one connection: gets its end, returns when done.
type Behaviour = fn(PipeEnd, Rc<Counts>) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>;

/// What a fake server saw.
#[derive(Default)]
struct Counts {
    connections: Cell<u32>,
    requests: Cell<u32>,
}

/// Starts an in-memory server at `addr` running `behave` on each connection.
fn server(addr: &str, behave: Behaviour) -> Rc<Counts> {
    let mut incoming: mpsc::UnboundedReceiver<PipeEnd> = memory::listen(addr.parse().expect("address"));
    let counts = Rc::new(Counts::default());
    let seen = counts.clone();
    tokio::task::spawn_local(async move {
        while let Some(end) = incoming.recv().await {
            seen.connections.set(seen.connections.get() + 1);
            tokio::task::spawn_local(behave(end, seen.clone()));
        }
    });
    counts
}

/// Reads one request head from a server's end; `None` at the end of the connection.
async fn read_head(end: &mut PipeEnd, buf: &mut Vec<u8>) -> Option<String> {
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..i + 4]).into_owned();
            buf.drain(..i + 4);
            return Some(head);
        }
        let mut chunk = [0u8; 4096];
        match end.from_pipeline.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A server answering every bodiless request with `200` and a body naming the request.
fn echo_line(mut end: PipeEnd, counts: Rc<Counts>) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> {
    Box::pin(async move {
        let mut buf = Vec::new();
        while let Some(head) = read_head(&mut end, &mut buf).await {
            counts.requests.set(counts.requests.get() + 1);
            let line = head.lines().next().unwrap_or_default().to_string();
            let reply = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{line}", line.len());
            if end.to_pipeline.write_all(reply.as_bytes()).await.is_err() {
                return;
            }
        }
    })
}

/// A server that reads the request head, then closes without answering.
fn close_after_head(mut end: PipeEnd, counts: Rc<Counts>) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> {
    Box::pin(async move {
        let mut buf = Vec::new();
        if read_head(&mut end, &mut buf).await.is_some() {
            counts.requests.set(counts.requests.get() + 1);
        }
    })
}

/// A server that answers at once with a chunked response begun, then keeps
/// reading the request body until the proxy stops sending.
fn answer_early(mut end: PipeEnd, counts: Rc<Counts>) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> {
    Box::pin(async move {
        let mut buf = Vec::new();
        if read_head(&mut end, &mut buf).await.is_none() {
            return;
        }
        counts.requests.set(counts.requests.get() + 1);
        let begun = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4\r\nwait\r\n";
        if end.to_pipeline.write_all(begun).await.is_err() {
            return;
        }
        let mut sink = [0u8; 4096];
        while matches!(end.from_pipeline.read(&mut sink).await, Ok(n) if n > 0) {}
    })
}

/// A response as a client reads it: status, head, body (framed by `content-length`).
struct Reply {
    status: u16,
    head: String,
    body: String,
}

/// Reads one response with a `content-length` (or none: a bodiless one) from a client's end,
/// a byte at a time so that nothing of the next response is read with it.
async fn response(end: &mut PipeEnd) -> Reply {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1];
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..i + 4]).into_owned();
            let length = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
                .map_or(0, |v| v.parse::<usize>().expect("length"));
            if buf.len() >= i + 4 + length {
                let body = String::from_utf8_lossy(&buf[i + 4..i + 4 + length]).into_owned();
                let status = head[9..12].parse().expect("status");
                return Reply { status, head, body };
            }
        }
        let n = end.from_pipeline.read(&mut chunk).await.expect("read");
        assert!(n > 0, "the connection closed mid-response: {:?}", String::from_utf8_lossy(&buf));
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Everything the client gets until the proxy closes the connection.
async fn until_closed(end: &mut PipeEnd) -> String {
    let mut all = Vec::new();
    end.from_pipeline.read_to_end(&mut all).await.expect("read");
    String::from_utf8_lossy(&all).into_owned()
}

/// Runs `test` on a current-thread runtime with paused time, inside a `LocalSet`.
fn run<F: std::future::Future<Output = ()>>(test: impl FnOnce() -> F) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().expect("runtime");
    tokio::task::LocalSet::new().block_on(&rt, async move {
        // Bounded: a test that hangs fails instead (in paused time, this is instant).
        tokio::time::timeout(Duration::from_secs(600), test()).await.expect("the test finished");
    });
}

#[test]
fn keep_alive_requests_share_one_server_connection() {
    run(|| async {
        let a = server(SERVER_A, echo_line);
        let w = worker(&one_service("{ address = \"{A}\" }", ""));
        let mut client = connect(&w);
        for i in 0..3 {
            let request = format!("GET /r{i} HTTP/1.1\r\nhost: example.com\r\n\r\n");
            client.to_pipeline.write_all(request.as_bytes()).await.expect("send");
            let reply = response(&mut client).await;
            assert_eq!((reply.status, reply.body.as_str()), (200, format!("GET /r{i} HTTP/1.1").as_str()));
        }
        assert_eq!((a.connections.get(), a.requests.get()), (1, 3));
    });
}

#[test]
fn an_idempotent_request_goes_to_another_server_when_the_first_closes_without_an_answer() {
    run(|| async {
        let a = server(SERVER_A, close_after_head);
        let b = server(SERVER_B, echo_line);
        let w = worker(&one_service("{ address = \"{A}\" }, { address = \"{B}\" }", ""));
        let mut client = connect(&w);
        client.to_pipeline.write_all(b"GET /x HTTP/1.1\r\nhost: h\r\n\r\n").await.expect("send");
        let reply = response(&mut client).await;
        assert_eq!((reply.status, reply.body.as_str()), (200, "GET /x HTTP/1.1"));
        assert_eq!((a.requests.get(), b.requests.get()), (1, 1));
        // A POST with a body is never sent twice: the client learns the failure.
        let mut client = connect(&w);
        client
            .to_pipeline
            .write_all(b"POST /y HTTP/1.1\r\nhost: h\r\ncontent-length: 2\r\n\r\nhi")
            .await
            .expect("send");
        let reply = response(&mut client).await;
        assert_eq!(reply.status, 502, "{}", reply.head);
        assert_eq!((a.requests.get(), b.requests.get()), (2, 1));
    });
}

#[test]
fn expect_100_continue_is_answered_before_the_body_is_sent() {
    run(|| async {
        server(SERVER_A, echo_body_length);
        let w = worker(&one_service("{ address = \"{A}\" }", ""));
        let mut client = connect(&w);
        let head = b"PUT /up HTTP/1.1\r\nhost: h\r\nexpect: 100-continue\r\ncontent-length: 5\r\n\r\n";
        client.to_pipeline.write_all(head).await.expect("send");
        let interim = response(&mut client).await;
        assert_eq!(interim.status, 100, "{}", interim.head);
        client.to_pipeline.write_all(b"hello").await.expect("body");
        let reply = response(&mut client).await;
        assert_eq!((reply.status, reply.body.as_str()), (200, "5"));
    });
}

/// A server reading one request with a `content-length` body and answering its length.
fn echo_body_length(mut end: PipeEnd, counts: Rc<Counts>) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> {
    Box::pin(async move {
        let mut buf = Vec::new();
        let Some(head) = read_head(&mut end, &mut buf).await else { return };
        counts.requests.set(counts.requests.get() + 1);
        let length: usize = head
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
            .map_or(0, |v| v.parse().unwrap_or(0));
        let mut chunk = [0u8; 4096];
        while buf.len() < length {
            match end.from_pipeline.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let body = buf.len().to_string();
        let reply = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}", body.len());
        let _ = end.to_pipeline.write_all(reply.as_bytes()).await;
    })
}

#[test]
fn a_smuggling_attempt_is_refused_before_any_server_is_reached() {
    run(|| async {
        let a = server(SERVER_A, echo_line);
        let w = worker(&one_service("{ address = \"{A}\" }", ""));
        let mut client = connect(&w);
        let attack = b"POST / HTTP/1.1\r\nhost: h\r\ncontent-length: 4\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n";
        client.to_pipeline.write_all(attack).await.expect("send");
        let text = until_closed(&mut client).await;
        assert!(text.starts_with("HTTP/1.1 400 "), "{text}");
        assert_eq!(a.connections.get(), 0);
    });
}

#[test]
fn a_bad_upload_after_the_response_began_cuts_the_response_instead_of_answering_in_it() {
    run(|| async {
        server(SERVER_A, answer_early);
        let w = worker(&one_service("{ address = \"{A}\" }", ""));
        let mut client = connect(&w);
        let head = b"POST /up HTTP/1.1\r\nhost: h\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n";
        client.to_pipeline.write_all(head).await.expect("send");
        // The response head and first chunk arrive while the upload is still open.
        let mut seen = Vec::new();
        let mut chunk = [0u8; 4096];
        while !seen.ends_with(b"wait\r\n") {
            let n = client.from_pipeline.read(&mut chunk).await.expect("read");
            assert!(n > 0, "the response did not begin");
            seen.extend_from_slice(&chunk[..n]);
        }
        client.to_pipeline.write_all(b"not-hex\r\n").await.expect("send");
        let rest = until_closed(&mut client).await;
        assert!(!rest.contains("HTTP/1.1"), "no second status line in the response: {rest:?}");
        assert!(!rest.ends_with("0\r\n\r\n"), "the cut response must not look complete: {rest:?}");
    });
}

#[test]
fn a_body_slower_than_client_body_is_408_and_http2_streams_are_not_bound_by_it() {
    run(|| async {
        server(SERVER_A, echo_body_length);
        let extra = "timeouts = { client_body = \"3s\", client_idle = \"5s\" }";
        let w = worker(&one_service("{ address = \"{A}\" }", extra));
        let started = tokio::time::Instant::now();
        let mut client = connect(&w);
        client.to_pipeline.write_all(b"PUT / HTTP/1.1\r\nhost: h\r\ncontent-length: 10\r\n\r\n").await.expect("send");
        // One byte every 2 s: each within client_idle, the whole beyond client_body.
        for _ in 0..2 {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let _ = client.to_pipeline.write_all(b"x").await;
        }
        let text = until_closed(&mut client).await;
        assert!(text.starts_with("HTTP/1.1 408 "), "{text}");
        assert!(started.elapsed() < Duration::from_secs(5), "ended at client_body, not later");

        // The same upload on an HTTP/2 stream (the pipeline sees `Transport::http2`).
        let (pipe, mut end) = Pipe::pair(None);
        let transport = Transport { http2: true, ..Transport::default() };
        let peer: SocketAddr = "192.0.2.7:40001".parse().expect("address");
        let serve = crate::http::serve(pipe, peer, Scratch::default(), w.local(), 0, w.clone(), transport);
        tokio::task::spawn_local(serve);
        end.to_pipeline.write_all(b"PUT / HTTP/1.1\r\nhost: h\r\ncontent-length: 5\r\n\r\n").await.expect("send");
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_secs(2)).await;
            end.to_pipeline.write_all(b"x").await.expect("body byte");
        }
        let reply = response(&mut end).await;
        assert_eq!((reply.status, reply.body.as_str()), (200, "5"), "{}", reply.head);
    });
}

/// A server that sends a `103 Early Hints` (with a hop-by-hop field) and a
/// `100 Continue` before its final response.
fn early_hints(mut end: PipeEnd, counts: Rc<Counts>) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> {
    Box::pin(async move {
        let mut buf = Vec::new();
        while read_head(&mut end, &mut buf).await.is_some() {
            counts.requests.set(counts.requests.get() + 1);
            let reply = b"HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\nkeep-alive: timeout=5\r\n\r\n\
                          HTTP/1.1 100 Continue\r\n\r\n\
                          HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
            if end.to_pipeline.write_all(reply).await.is_err() {
                return;
            }
        }
    })
}

#[test]
fn early_hints_reach_an_http11_client_but_not_an_http10_one() {
    run(|| async {
        server(SERVER_A, early_hints);
        let w = worker(&one_service("{ address = \"{A}\" }", ""));
        let mut client = connect(&w);
        client.to_pipeline.write_all(b"GET / HTTP/1.1\r\nhost: h\r\n\r\n").await.expect("send");
        let hints = response(&mut client).await;
        assert_eq!(hints.status, 103, "{}", hints.head);
        assert!(hints.head.contains("link: </style.css>; rel=preload\r\n"), "{}", hints.head);
        assert!(!hints.head.contains("keep-alive"), "hop-by-hop fields removed: {}", hints.head);
        let reply = response(&mut client).await;
        assert_eq!((reply.status, reply.body.as_str()), (200, "ok"), "the server's 100 is not relayed");

        let mut old = connect(&w);
        old.to_pipeline.write_all(b"GET / HTTP/1.0\r\nhost: h\r\n\r\n").await.expect("send");
        let text = until_closed(&mut old).await;
        assert!(text.starts_with("HTTP/1.1 200 "), "no 1xx to an HTTP/1.0 client: {text}");
        assert_eq!(text.matches("HTTP/1.1 ").count(), 1, "{text}");
    });
}

/// A server reading one chunked request to its end (trailer section included) and
/// answering a chunked body whose trailers carry `grpc-status: 13` and the request's
/// trailer section, echoed as `x-got-trailers`.
fn trailing(mut end: PipeEnd, counts: Rc<Counts>) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> {
    Box::pin(async move {
        let mut buf = Vec::new();
        if read_head(&mut end, &mut buf).await.is_none() {
            return;
        }
        counts.requests.set(counts.requests.get() + 1);
        let mut chunk = [0u8; 4096];
        // The body ends with the last chunk's trailer section and its empty line.
        while !buf.ends_with(b"\r\n\r\n") {
            match end.from_pipeline.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let text = String::from_utf8_lossy(&buf).into_owned();
        let got = text.split("0\r\n").nth(1).unwrap_or("").trim_end().replace("\r\n", "; ");
        let reply = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/grpc\r\ntransfer-encoding: chunked\r\n\r\n\
             2\r\nok\r\n0\r\ngrpc-status: 13\r\nx-got-trailers: {got}\r\n\r\n"
        );
        let _ = end.to_pipeline.write_all(reply.as_bytes()).await;
    })
}

#[test]
fn trailers_pass_both_ways_and_the_grpc_status_is_counted() {
    run(|| async {
        server(SERVER_A, trailing);
        let w = worker(&one_service("{ address = \"{A}\" }", ""));
        let mut client = connect(&w);
        let request = "POST /pkg.Svc/Call HTTP/1.1\r\nhost: h\r\nte: trailers\r\ncontent-type: application/grpc\r\n\
                       transfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nx-checksum: 1f\r\n\r\n";
        client.to_pipeline.write_all(request.as_bytes()).await.expect("send");
        let mut all = Vec::new();
        let mut chunk = [0u8; 4096];
        while !(all.ends_with(b"\r\n\r\n") && String::from_utf8_lossy(&all).contains("x-got-trailers")) {
            let n = client.from_pipeline.read(&mut chunk).await.expect("read");
            assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&all));
            all.extend_from_slice(&chunk[..n]);
        }
        let text = String::from_utf8_lossy(&all);
        // The chunked body reaches the client as sent, trailer section included.
        assert!(text.ends_with("2\r\nok\r\n0\r\ngrpc-status: 13\r\nx-got-trailers: x-checksum: 1f\r\n\r\n"), "{text}");
        let grpc = w.local().gen.services[0].snapshot().grpc;
        assert_eq!((grpc.get("INTERNAL"), grpc.get("OK")), (1, 0));
    });
}

/// An HTTP/2 client connection (prior knowledge) to the service, served by
/// the HTTP/2 codec on its own task.
async fn connect_h2(worker: &Rc<Worker>) -> h2::client::SendRequest<bytes::Bytes> {
    let (near, far) = tokio::io::duplex(256 * 1024);
    let conn = crate::http2::Conn {
        peer: "192.0.2.7:40000".parse().expect("address"),
        local_addr: Some("127.0.0.1:8080".parse().expect("address")),
    };
    tokio::task::spawn_local(crate::http2::run(far, conn, worker.local(), 0, worker.clone(), Transport::default()));
    let (send, connection) = h2::client::handshake(near).await.expect("handshake");
    tokio::task::spawn_local(async move {
        let _ = connection.await;
    });
    send
}

/// A response's DATA payload, and its trailers.
async fn h2_body(mut body: h2::RecvStream) -> (Vec<u8>, Option<http::HeaderMap>) {
    let mut payload = Vec::new();
    while let Some(data) = body.data().await {
        let data = data.expect("data");
        let _ = body.flow_control().release_capacity(data.len());
        payload.extend_from_slice(&data);
    }
    (payload, body.trailers().await.expect("trailers"))
}

#[test]
fn http2_trailers_cross_to_a_chunked_server_and_back() {
    run(|| async {
        server(SERVER_A, trailing);
        let w = worker(&one_service("{ address = \"{A}\" }", ""));
        let mut send = connect_h2(&w).await.ready().await.expect("ready");
        let request = http::Request::post("http://h/pkg.Svc/Call")
            .header("te", "trailers")
            .header("content-type", "application/grpc")
            .body(())
            .expect("request");
        let (response, mut up) = send.send_request(request, false).expect("send");
        up.send_data(bytes::Bytes::from_static(b"abc"), false).expect("data");
        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-checksum", http::HeaderValue::from_static("1f"));
        up.send_trailers(trailers).expect("trailers");
        let response = response.await.expect("response");
        assert_eq!(response.status(), 200);
        let (payload, trailers) = h2_body(response.into_body()).await;
        assert_eq!(payload, b"ok");
        // The server saw the client's trailers as its chunked trailer section,
        // and its own trailer section came back as HTTP/2 trailers.
        let trailers = trailers.expect("trailers");
        assert_eq!(trailers.get("grpc-status").map(|v| v.as_bytes()), Some(&b"13"[..]));
        assert_eq!(trailers.get("x-got-trailers").map(|v| v.as_bytes()), Some(&b"x-checksum: 1f"[..]));
        let grpc = w.local().gen.services[0].snapshot().grpc;
        assert_eq!(grpc.get("INTERNAL"), 1);
    });
}

#[test]
fn finished_http2_streams_give_their_working_memory_back_to_the_worker() {
    run(|| async {
        server(SERVER_A, echo_line);
        let w = worker(&one_service("{ address = \"{A}\" }", ""));
        let mut send = connect_h2(&w).await;
        for i in 0..3 {
            send = send.ready().await.expect("ready");
            let request = http::Request::get(format!("http://h/r{i}")).body(()).expect("request");
            let (response, _) = send.send_request(request, true).expect("send");
            let response = response.await.expect("response");
            assert_eq!(response.status(), 200);
            let (payload, _) = h2_body(response.into_body()).await;
            assert_eq!(payload, format!("GET /r{i} HTTP/1.1").as_bytes());
            // The stream's pipeline ends (log, working memory back) once every
            // task has run; time is paused, so this sleep only lets them.
            tokio::time::sleep(Duration::from_millis(10)).await;
            // A stream's head fills its buffer exactly; read to its end, the
            // buffer still holds that memory, and the set goes back to the pool
            // for the next stream instead of being freed and allocated anew.
            assert_eq!(w.scratch.len(), 1, "after stream {i}");
        }
    });
}

/// A server that promises ten bytes, sends three, and closes.
fn cut_short(mut end: PipeEnd, counts: Rc<Counts>) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> {
    Box::pin(async move {
        let mut buf = Vec::new();
        if read_head(&mut end, &mut buf).await.is_some() {
            counts.requests.set(counts.requests.get() + 1);
            let _ = end.to_pipeline.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc").await;
        }
    })
}

#[test]
fn an_http2_response_cut_short_resets_its_stream_and_spares_the_others() {
    run(|| async {
        server(SERVER_A, cut_short);
        server(SERVER_B, echo_line);
        let rules = "rules = [{ path_prefix = \"/cut\", pool = \"cut\" }]";
        let config = one_service("{ address = \"{B}\" }", rules)
            + "[[pool]]\nname = \"cut\"\nservers = [{ address = \"{A}\" }]\n";
        let w = worker(&config);
        let mut send = connect_h2(&w).await.ready().await.expect("ready");
        let (cut, _) =
            send.send_request(http::Request::get("http://h/cut").body(()).expect("request"), true).expect("send");
        let response = cut.await.expect("the head went out before the cut");
        assert_eq!(response.status(), 200);
        let mut body = response.into_body();
        let mut got = Vec::new();
        let error = loop {
            match body.data().await {
                Some(Ok(data)) => got.extend_from_slice(&data),
                Some(Err(e)) => break e,
                None => panic!("a cut response must not end cleanly (got {got:?})"),
            }
        };
        assert_eq!((got.as_slice(), error.reason()), (&b"abc"[..], Some(h2::Reason::INTERNAL_ERROR)));
        // The connection still serves other streams.
        let mut send = send.ready().await.expect("ready");
        let (ok, _) =
            send.send_request(http::Request::get("http://h/next").body(()).expect("request"), true).expect("send");
        let response = ok.await.expect("response");
        assert_eq!(response.status(), 200);
        let (payload, _) = h2_body(response.into_body()).await;
        assert!(String::from_utf8_lossy(&payload).contains("/next"), "{}", String::from_utf8_lossy(&payload));
    });
}
