//! End-to-end tests of the load generator against real loopback servers: the origin
//! simulator, and small purpose-built servers (cookies, TLS, HTTP/2) written here.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use switchyard_bench::load::{self, KxGroup, LoadReport, LoadSpec, Pace, Protocol, TlsSpec, UdpSpec};
use switchyard_bench::origin::{Origin, OriginStats};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::runtime::Runtime;

const LOCALHOST: [u8; 4] = [127, 0, 0, 1];

/// A background runtime for the servers (the generator builds its own).
fn server_runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap()
}

/// An origin simulator on a free port, served until the runtime is dropped.
fn origin(rt: &Runtime) -> (SocketAddr, Arc<OriginStats>) {
    let origin = rt.block_on(Origin::bind(SocketAddr::from((LOCALHOST, 0)), "o1")).unwrap();
    let (addr, stats) = (origin.local_addr(), origin.stats());
    rt.spawn(origin.serve(std::future::pending()));
    (addr, stats)
}

fn spec(target: SocketAddr, path: &str) -> LoadSpec {
    LoadSpec {
        target,
        host: "localhost".into(),
        tls: None,
        protocol: Protocol::Http1,
        paths: vec![path.into()],
        headers: vec![],
        cookies: false,
        connections: 4,
        requests_per_connection: None,
        pace: Pace::Closed,
        warmup: Duration::from_millis(200),
        duration: Duration::from_millis(800),
        threads: 2,
    }
}

#[test]
fn closed_loop_counts_connections_per_request_limit() {
    let rt = server_runtime();
    let (addr, stats) = origin(&rt);
    for limit in [1u32, 10] {
        let report =
            load::run(&LoadSpec { requests_per_connection: Some(limit), ..spec(addr, "/?size=1000") }).unwrap();
        assert_eq!(report.errors, 0, "{report:?}");
        assert!(report.requests > 50, "{report:?}");
        assert_eq!(report.body_bytes, 1000 * report.requests);
        // Connections opened in the window: one per `limit` requests, give or take the
        // connections straddling the window's edges.
        let expected = report.requests / u64::from(limit);
        assert!(report.connections.abs_diff(expected) <= 8, "limit {limit}: {report:?}");
        assert!(report.latency.p50_us > 0.0 && report.latency.p50_us <= report.latency.max_us);
        assert!(report.cpu_s > 0.0 && report.cpu_s < 5.0, "{report:?}");
    }
    // Unlimited: the 4 connections opened at the start carry everything.
    let before = stats.connections();
    let report = load::run(&LoadSpec { warmup: Duration::ZERO, ..spec(addr, "/") }).unwrap();
    assert_eq!((report.connections, report.errors), (4, 0), "{report:?}");
    assert_eq!(stats.connections() - before, 4);
    assert!(report.requests > 100, "{report:?}");
}

#[test]
fn paths_rotate_and_headers_are_sent() {
    let rt = server_runtime();
    let (addr, _) = origin(&rt);
    let spec = LoadSpec {
        paths: vec!["/a?size=100".into(), "/b?size=300".into()],
        connections: 1,
        headers: vec![("accept-encoding".into(), "gzip".into())],
        ..spec(addr, "")
    };
    let report = load::run(&spec).unwrap();
    assert!(report.requests > 10, "{report:?}");
    assert!(report.body_bytes.abs_diff(200 * report.requests) <= 100, "{report:?}");
    assert_eq!(report.encoded_responses, 0);
}

#[test]
fn open_loop_offers_the_requested_rate() {
    let rt = server_runtime();
    let (addr, _) = origin(&rt);
    let spec = LoadSpec {
        pace: Pace::Open { rate: 200.0 },
        connections: 8,
        warmup: Duration::ZERO,
        duration: Duration::from_secs(2),
        ..spec(addr, "/")
    };
    let report = load::run(&spec).unwrap();
    assert!((250..=500).contains(&report.requests), "{report:?}");
    assert_eq!(report.errors, 0);
    // Loopback answers in well under 100 ms.
    assert!(report.latency.p50_us > 0.0 && report.latency.p50_us < 100_000.0, "{report:?}");
}

#[test]
fn open_loop_charges_a_slow_server_for_the_requests_it_delayed() {
    let rt = server_runtime();
    let (addr, _) = origin(&rt);
    // 100 requests/s offered to one connection to a server taking 50 ms each (20/s): the
    // backlog grows, and so does the latency measured from the intended send times.
    let spec = LoadSpec {
        pace: Pace::Open { rate: 100.0 },
        connections: 1,
        threads: 1,
        warmup: Duration::ZERO,
        duration: Duration::from_secs(1),
        ..spec(addr, "/?delay_ms=50")
    };
    let report = load::run(&spec).unwrap();
    assert!((10..=25).contains(&report.requests), "{report:?}");
    assert!(report.latency.p90_us > 300_000.0, "coordinated omission not corrected: {report:?}");
}

#[test]
fn errors_when_the_target_refuses_or_fails() {
    // Nothing listens on a port just released.
    let closed = std::net::TcpListener::bind(SocketAddr::from((LOCALHOST, 0))).unwrap().local_addr().unwrap();
    let report =
        load::run(&LoadSpec { warmup: Duration::ZERO, duration: Duration::from_millis(300), ..spec(closed, "/") })
            .unwrap();
    assert_eq!(report.requests, 0);
    assert!(report.errors > 10, "{report:?}");

    // A 500 answer is an error, and its connection is not reused.
    let rt = server_runtime();
    let (addr, _) = origin(&rt);
    let report = load::run(&spec(addr, "/?status=500")).unwrap();
    assert_eq!(report.requests, 0);
    assert!(report.errors > 10, "{report:?}");
    assert!(report.connections.abs_diff(report.errors) <= 8, "{report:?}");
}

/// Serves HTTP/1.1 on `io`: for each request head, `answer(head)` gives the response.
async fn serve_h1<S: AsyncRead + AsyncWrite + Unpin>(mut io: S, answer: impl Fn(&str) -> String) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end + 4]).into_owned();
            buf.drain(..end + 4);
            if io.write_all(answer(&head).as_bytes()).await.is_err() {
                return;
            }
        }
        match io.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

#[test]
fn cookies_are_kept_per_user_across_reconnects() {
    let rt = server_runtime();
    let listener = rt.block_on(TcpListener::bind(SocketAddr::from((LOCALHOST, 0)))).unwrap();
    let addr = listener.local_addr().unwrap();
    // Counts requests that came without a cookie (each gets a new user id) and requests
    // whose cookie is not one this server issued.
    let issued = Arc::new(AtomicU64::new(0));
    let strangers = Arc::new(AtomicU64::new(0));
    let (i, s) = (Arc::clone(&issued), Arc::clone(&strangers));
    rt.spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (issued, strangers) = (Arc::clone(&i), Arc::clone(&s));
            tokio::spawn(serve_h1(tcp, move |head| {
                let cookie = head.lines().find_map(|l| l.strip_prefix("cookie: ")).map(str::to_owned);
                let set = match cookie {
                    None => format!("set-cookie: user={}; Path=/\r\n", issued.fetch_add(1, Ordering::SeqCst)),
                    Some(c) => {
                        let known = c.strip_prefix("user=").and_then(|n| n.parse::<u64>().ok());
                        if known.is_none_or(|n| n >= issued.load(Ordering::SeqCst)) {
                            strangers.fetch_add(1, Ordering::SeqCst);
                        }
                        String::new()
                    }
                };
                format!("HTTP/1.1 200 OK\r\n{set}content-encoding: gzip\r\ncontent-length: 0\r\n\r\n")
            }));
        }
    });
    let spec = LoadSpec { cookies: true, connections: 3, requests_per_connection: Some(2), ..spec(addr, "/") };
    let report = load::run(&spec).unwrap();
    assert!(report.requests > 20 && report.errors == 0, "{report:?}");
    assert!(report.connections * 2 >= report.requests - 6, "reconnected every 2 requests: {report:?}");
    assert_eq!(report.encoded_responses, report.requests);
    // One user per connection slot, each keeping its cookie over its reconnects.
    assert_eq!(issued.load(Ordering::SeqCst), 3);
    assert_eq!(strangers.load(Ordering::SeqCst), 0);

    // Without the jar every request is a new visitor.
    issued.store(0, Ordering::SeqCst);
    let report = load::run(&LoadSpec { cookies: false, ..spec }).unwrap();
    assert!(issued.load(Ordering::SeqCst) >= report.requests);
}

/// A TLS server (self-signed certificate for `localhost`) answering HTTP/1.1 or, when ALPN
/// picks it, HTTP/2 with a 2-byte body.
fn tls_server(rt: &Runtime) -> SocketAddr {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into());
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = rt.block_on(TcpListener::bind(SocketAddr::from((LOCALHOST, 0)))).unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
                    serve_h2(tls).await;
                } else {
                    serve_h1(tls, |_| "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".into()).await;
                }
            });
        }
    });
    addr
}

fn tls_spec(addr: SocketAddr, resume: bool, group: KxGroup) -> LoadSpec {
    LoadSpec {
        tls: Some(TlsSpec { server_name: "localhost".into(), resume, group, insecure: true }),
        requests_per_connection: Some(1),
        ..spec(addr, "/")
    }
}

#[test]
fn tls_handshakes_with_and_without_resumption() {
    let rt = server_runtime();
    let addr = tls_server(&rt);
    let full = load::run(&tls_spec(addr, false, KxGroup::X25519MlKem768)).unwrap();
    assert!(full.requests > 10 && full.errors == 0, "{full:?}");
    assert!(full.tls_handshakes.abs_diff(full.requests) <= 8, "{full:?}");
    assert_eq!(full.tls_resumed, 0, "{full:?}");
    assert_eq!(full.body_bytes, 2 * full.requests);

    let resumed = load::run(&tls_spec(addr, true, KxGroup::P256)).unwrap();
    assert!(resumed.requests > 10 && resumed.errors == 0, "{resumed:?}");
    assert!(resumed.tls_resumed > resumed.tls_handshakes / 2, "{resumed:?}");

    // Keep-alive: one handshake per connection, made during the warm-up.
    let keepalive = load::run(&LoadSpec { requests_per_connection: None, ..tls_spec(addr, false, KxGroup::X25519) });
    let keepalive = keepalive.unwrap();
    assert!(keepalive.requests > 50 && keepalive.tls_handshakes == 0, "{keepalive:?}");
}

/// Serves HTTP/2 on `io`: every request gets a 200 with a 5-byte body.
async fn serve_h2<S: AsyncRead + AsyncWrite + Unpin>(io: S) {
    let Ok(mut conn) = h2::server::handshake(io).await else { return };
    while let Some(Ok((_request, mut respond))) = conn.accept().await {
        let response = http::Response::builder().status(200).body(()).unwrap();
        if let Ok(mut body) = respond.send_response(response, false) {
            let _ = body.send_data(Bytes::from_static(b"hello"), true);
        }
    }
}

fn assert_h2_works(report: &LoadReport, body: u64) {
    assert!(report.requests > 50 && report.errors == 0, "{report:?}");
    assert_eq!(report.body_bytes, body * report.requests);
}

#[test]
fn http2_prior_knowledge_and_over_tls() {
    let rt = server_runtime();
    let listener = rt.block_on(TcpListener::bind(SocketAddr::from((LOCALHOST, 0)))).unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(serve_h2(tcp));
        }
    });
    let h2 = |spec: LoadSpec| LoadSpec { protocol: Protocol::Http2, connections: 2, warmup: Duration::ZERO, ..spec };
    let report = load::run(&h2(spec(addr, "/"))).unwrap();
    assert_h2_works(&report, 5);
    assert_eq!(report.connections, 2);

    // 10 requests per connection, over several concurrent streams.
    let report = load::run(&LoadSpec { requests_per_connection: Some(10), ..h2(spec(addr, "/")) }).unwrap();
    assert_h2_works(&report, 5);
    assert!(report.connections.abs_diff(report.requests / 10) <= 4, "{report:?}");

    let tls = tls_server(&rt);
    let report = load::run(&h2(LoadSpec { requests_per_connection: None, ..tls_spec(tls, true, KxGroup::X25519) }));
    let report = report.unwrap();
    assert_h2_works(&report, 5);
    assert_eq!(report.tls_handshakes, 2);

    // A target without HTTP/2 (an HTTP/1.1 server answers the preface with a 400 and
    // closes; the origin simulator itself speaks h2c): errors, nothing counted.
    let http1 = rt.block_on(TcpListener::bind(SocketAddr::from((LOCALHOST, 0)))).unwrap();
    let http1_addr = http1.local_addr().unwrap();
    rt.spawn(async move {
        while let Ok((mut tcp, _)) = http1.accept().await {
            tokio::spawn(async move {
                let mut scratch = [0u8; 1024];
                let _ = tcp.read(&mut scratch).await;
                let _ =
                    tcp.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await;
            });
        }
    });
    let refused = LoadSpec { duration: Duration::from_millis(300), ..h2(spec(http1_addr, "/")) };
    let report = load::run(&refused).unwrap();
    assert_eq!(report.requests, 0);
    assert!(report.errors > 0, "{report:?}");

    // The origin simulator serves h2c with prior knowledge: streams share its connections.
    let (origin, stats) = origin(&rt);
    let report = load::run(&h2(spec(origin, "/?size=300"))).unwrap();
    assert_h2_works(&report, 300);
    // Requests still in flight when the run stopped are counted by the origin only.
    assert!(stats.requests() >= report.requests, "{report:?}");
    assert_eq!(stats.connections(), 2);
}

#[test]
fn udp_round_trips_through_the_echo_server() {
    let stop = Arc::new(AtomicBool::new(false));
    let (addr, echo) = load::udp_echo(SocketAddr::from((LOCALHOST, 0)), Arc::clone(&stop)).unwrap();
    let spec = UdpSpec {
        target: addr,
        frame_sizes: load::imix("imix1").unwrap(),
        flows: 4,
        duration: Duration::from_millis(500),
    };
    let report = load::run_udp(&spec).unwrap();
    assert!(report.sent > 100, "{report:?}");
    assert_eq!(report.received, report.sent, "loopback loses nothing: {report:?}");
    // imix1 averages 345.5-byte frames, 303.5 bytes of payload.
    let mean = report.bytes as f64 / report.received as f64;
    assert!((250.0..350.0).contains(&mean), "{mean}");
    assert!(report.latency.p50_us > 0.0);
    stop.store(true, Ordering::Relaxed);
    echo.join().unwrap();

    // Nothing listening: everything is lost, quickly (port unreachable).
    let spec = UdpSpec { frame_sizes: vec![64], flows: 1, duration: Duration::from_millis(200), ..spec };
    let report = load::run_udp(&spec).unwrap();
    assert_eq!(report.received, 0, "{report:?}");
}
