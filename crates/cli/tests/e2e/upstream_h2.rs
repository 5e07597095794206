//! HTTP/2 towards servers (pool `protocol = "h2"`), end to end with the real binary: h2c
//! with prior knowledge and h2 over TLS (ALPN) to the origin simulator, bodies byte-exact
//! both ways, many client connections multiplexed over few server connections, status codes
//! and timeouts (streams of different deadlines on one connection too), the streams per
//! server connection capped by `max_streams_per_connection`, a server that
//! dies and comes back, a server that only speaks HTTP/1.1, the
//! refused WebSocket switch, reset codes both ways, a refused stream retried on another
//! server (a POST too, with its body), a server's 103 Early Hints relayed, trailers both
//! ways after bodies with and without a length, a body without a length to an HTTP/1.0
//! client, and NGINX as the server, closing each connection with GOAWAY after
//! `keepalive_requests` streams.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;

use common::pki::Pki;
use common::{
    free_port, h2c_test_server, proxy_addr, temp_dir, trailer_echo_server, wait_for, write_temp, Client, Origin,
    OriginProcess, Proxy,
};

/// One service on `listen` whose default pool `main` speaks h2 to `servers`; `pool_extra`
/// goes into the pool table, `service_extra` into the service table.
fn h2_config(listen: SocketAddr, servers: &[SocketAddr], service_extra: &str, pool_extra: &str) -> String {
    let servers: Vec<String> = servers.iter().map(|a| format!("{{ address = \"{a}\" }}")).collect();
    format!(
        "workers = 1\ndrain_timeout = \"2s\"\n\n[[service]]\nname = \"web\"\nlisten = [\"{listen}\"]\npool = \"main\"\n\
         {service_extra}\n\n[[pool]]\nname = \"main\"\nprotocol = \"h2\"\nservers = [{}]\n{pool_extra}\n",
        servers.join(", ")
    )
}

/// The body the origin sends for `path`, fetched directly over HTTP/1.1.
fn direct(origin: SocketAddr, path: &str) -> Vec<u8> {
    let r = Client::connect(origin).get(path);
    assert_eq!(r.status, 200);
    r.body
}

/// An HTTPS origin (serving h2 to clients that offer only it) for `127.0.0.1` and
/// `origin.test`, signed by `pki`.
fn tls_origin(pki: &Pki) -> Origin {
    let (cert, key) = pki.leaf(&["origin.test", "127.0.0.1"]);
    let config = switchyard_bench::origin::tls_config(cert.as_bytes(), key.as_bytes(), None).expect("origin TLS");
    Origin::start_tls("secure", config)
}

/// Writes `text` to `name` in `dir`, returning the path as TOML-ready text.
fn file(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path: PathBuf = dir.join(name);
    std::fs::write(&path, text).expect("write PEM");
    path.display().to_string()
}

/// A client that sends `body` while reading the response (an echo needs both at once).
fn post(addr: SocketAddr, path: &str, headers: &str, body: Vec<u8>, chunked: bool) -> common::Response {
    let mut client = Client::connect(addr);
    let framing =
        if chunked { "transfer-encoding: chunked".to_string() } else { format!("content-length: {}", body.len()) };
    client.send(format!("POST {path} HTTP/1.1\r\nhost: t\r\n{headers}{framing}\r\n\r\n").as_bytes()).expect("head");
    let mut writer = client.stream.try_clone().expect("clone");
    let upload = std::thread::spawn(move || {
        if !chunked {
            return writer.write_all(&body);
        }
        for part in body.chunks(100_000) {
            writer.write_all(format!("{:x}\r\n", part.len()).as_bytes())?;
            writer.write_all(part)?;
            writer.write_all(b"\r\n")?;
        }
        writer.write_all(b"0\r\n\r\n")
    });
    let r = client.read_response().expect("response");
    upload.join().expect("upload thread").expect("upload");
    r
}

#[test]
fn h2c_get_carries_bodies_byte_exactly_over_one_connection() {
    let origin = Origin::start("h2c");
    let listen = proxy_addr();
    let proxy = Proxy::start(&h2_config(listen, &[origin.addr], "", ""), listen);
    let mut client = proxy.connect();
    for size in [0usize, 128, 1 << 20] {
        let path = format!("/?size={size}");
        let r = client.get(&path);
        assert_eq!(r.status, 200, "{}\n{}", r.text(), proxy.log());
        assert_eq!(r.origin(), "h2c");
        assert_eq!(r.header("content-length"), Some(size.to_string().as_str()));
        assert!(r.body == direct(origin.addr, &path), "size {size}: body differs ({} bytes)", r.body.len());
    }
    // The origin saw HTTP/2, with the client's host as :authority and no hop-by-hop fields.
    let r = client.request("GET", "/__origin/request", &[("connection", "keep-alive"), ("te", "trailers")]);
    let json = r.json();
    assert_eq!(json["version"], "HTTP/2", "{json}");
    let headers = json["headers"].to_string().to_ascii_lowercase();
    assert!(headers.contains("[\"host\",\"test\"]"), "{headers}");
    assert!(!headers.contains("\"connection\""), "{headers}");
    // The client's `te` is hop-by-hop; switchyard sends its own `te: trailers` (it relays them).
    assert_eq!(headers.matches("\"te\"").count(), 1, "{headers}");
    assert!(headers.contains("[\"te\",\"trailers\"]"), "{headers}");
    // A HEAD keeps the length a GET would get, without a body.
    let r = client.request("HEAD", "/?size=5000", &[]);
    assert_eq!((r.status, r.header("content-length")), (200, Some("5000")));
    // Three direct connections for the byte checks; the proxy used one.
    assert_eq!(origin.connections(), 4, "the proxy's requests shared one HTTP/2 connection");
}

#[test]
fn request_bodies_round_trip_byte_exactly() {
    let origin = Origin::start("echo");
    let listen = proxy_addr();
    let proxy = Proxy::start(&h2_config(listen, &[origin.addr], "", ""), listen);
    let body: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
    for chunked in [false, true] {
        let r = post(listen, "/?echo=1", "", body.clone(), chunked);
        assert_eq!(r.status, 200, "chunked {chunked}: {}\n{}", r.text(), proxy.log());
        assert!(r.body == body, "chunked {chunked}: echoed body differs ({} bytes back)", r.body.len());
    }
    // Without echo the origin counts what it received.
    let r = post(listen, "/", "", body[..1000].to_vec(), false);
    assert_eq!(r.header("x-received-bytes"), Some("1000"));
    // An echo is counted once the origin has sent all of it, possibly just after the client read it.
    let want = 2 * body.len() as u64 + 1000;
    wait_for("the origin to count every body", || (origin.bytes_received() == want).then_some(()));
}

#[test]
fn curl_http2_over_tls_front_reaches_an_h2_origin_over_verified_tls() {
    let pki = Pki::new("test CA");
    let origin = tls_origin(&pki);
    let dir = temp_dir("upstream-h2-tls");
    let (front_cert, front_key) = pki.leaf(&["proxy.test", "127.0.0.1"]);
    let service = format!(
        "mode = \"https\"\ntls = {{ certificates = [{{ certificate = \"{}\", key = \"{}\" }}] }}",
        file(&dir, "front.crt", &front_cert),
        file(&dir, "front.key", &front_key)
    );
    let ca = file(&dir, "ca.pem", &pki.ca);
    let listen = proxy_addr();
    let pool = format!("tls = {{ ca = \"{ca}\", server_name = \"origin.test\" }}");
    let proxy = Proxy::start(&h2_config(listen, &[origin.addr], &service, &pool), listen);
    let out = std::process::Command::new("curl")
        .args(["-s", "--http2", "--max-time", "20", "-D", "-", "--cacert", &ca])
        .args(["--resolve", &format!("proxy.test:{}:127.0.0.1", listen.port())])
        .arg(format!("https://proxy.test:{}/__origin/request", listen.port()))
        .output();
    let Ok(out) = out else {
        eprintln!("curl is not installed: skipped");
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "curl failed: {}\n{}", String::from_utf8_lossy(&out.stderr), proxy.log());
    assert!(text.starts_with("HTTP/2 200"), "{text}");
    assert!(text.contains("\"version\": \"HTTP/2\""), "the origin was spoken to in HTTP/2: {text}");
    assert!(text.contains("x-origin: secure"), "{text}");
    assert_eq!(origin.tls_handshakes().0, 1);

    // The same origin under a CA that did not sign it: verification fails, 502.
    let stranger = Pki::new("another CA");
    let other_ca = file(&dir, "other-ca.pem", &stranger.ca);
    let listen = proxy_addr();
    let pool = format!("tls = {{ ca = \"{other_ca}\", server_name = \"origin.test\" }}");
    let proxy = Proxy::start(&h2_config(listen, &[origin.addr], "", &pool), listen);
    let r = proxy.get("/");
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(r.header("x-origin"), None);
    wait_for("the failure in the log", || proxy.log().contains("server tls failed").then_some(()));
    assert_eq!(origin.requests(), 1);
}

#[test]
fn many_client_connections_share_few_server_connections() {
    const WORKERS: u64 = 2;
    let origin = Origin::start("shared");
    let listen = proxy_addr();
    let config = write_temp("upstream-h2", "switchyard.toml", &h2_config(listen, &[origin.addr], "", ""));
    let proxy = Proxy::run_file_with(&config, listen, WORKERS as usize);
    let clients: Vec<_> = (0..50)
        .map(|i| {
            std::thread::spawn(move || {
                let mut client = Client::connect(listen);
                for j in 0..10 {
                    let size = 100 + i * 10 + j;
                    let r = client.get(&format!("/?size={size}&delay_ms={}", j % 3));
                    assert_eq!((r.status, r.body.len()), (200, size), "client {i} request {j}");
                }
            })
        })
        .collect();
    for client in clients {
        client.join().expect("client thread");
    }
    assert_eq!(origin.requests(), 500, "{}", proxy.log());
    let connections = origin.connections();
    assert!(connections <= WORKERS * 2, "500 requests from 50 clients over {connections} server connections");
}

/// Six requests at once, each held 600 ms by the server: with `max_streams_per_connection
/// = 2` they take three server connections, with the default (100) one.
#[test]
fn max_streams_per_connection_spreads_streams_over_server_connections() {
    for (pool_extra, expected) in [("max_streams_per_connection = 2", 3), ("", 1)] {
        let origin = Origin::start("capped");
        let listen = proxy_addr();
        let proxy = Proxy::start(&h2_config(listen, &[origin.addr], "", pool_extra), listen);
        let clients: Vec<_> = (0..6)
            .map(|i| std::thread::spawn(move || (i, Client::connect(listen).get("/?size=64&delay_ms=600").status)))
            .collect();
        for client in clients {
            let (i, status) = client.join().expect("client thread");
            assert_eq!(status, 200, "request {i}: {}", proxy.log());
        }
        assert_eq!(origin.requests(), 6);
        assert_eq!(origin.connections(), expected, "with `{pool_extra}`");
        // Later requests ride on the connections already open.
        assert_eq!(proxy.get("/?size=10").status, 200);
        assert_eq!(origin.connections(), expected, "with `{pool_extra}`, after");
    }
}

#[test]
fn statuses_pass_through_and_a_slow_server_is_a_504() {
    let origin = Origin::start("statuses");
    let listen = proxy_addr();
    let service = "timeouts = { server_response = \"300ms\" }";
    let proxy = Proxy::start(&h2_config(listen, &[origin.addr], service, ""), listen);
    let mut client = proxy.connect();
    for status in [404u16, 503, 204] {
        let r = client.get(&format!("/?status={status}"));
        assert_eq!(r.status, status);
        assert_eq!(r.origin(), "statuses");
    }
    let r = client.get("/?delay_ms=3000");
    assert_eq!(r.status, 504, "{}", r.text());
    wait_for("the timeout in the log", || proxy.log().contains("server response timeout").then_some(()));
    // The stream was reset; the connection goes on carrying requests.
    assert_eq!(proxy.get("/?size=10").status, 200);
    assert_eq!(origin.connections(), 1);
}

/// One server connection carries streams of two services with different response
/// timeouts: the connection keeps every stream's deadline with one timer, which a
/// later stream with an earlier deadline must bring forward, and a timeout ends only the
/// streams that are overdue.
#[test]
fn streams_with_different_response_deadlines_share_a_server_connection() {
    let origin = Origin::start("deadlines");
    let (patient, hasty) = (proxy_addr(), proxy_addr());
    let config = format!(
        "workers = 1\n\n[[service]]\nname = \"patient\"\nlisten = [\"{patient}\"]\npool = \"main\"\n\
         timeouts = {{ server_response = \"20s\" }}\n\n[[service]]\nname = \"hasty\"\nlisten = [\"{hasty}\"]\n\
         pool = \"main\"\ntimeouts = {{ server_response = \"300ms\" }}\n\n[[pool]]\nname = \"main\"\n\
         protocol = \"h2\"\nservers = [{{ address = \"{}\" }}]\n",
        origin.addr
    );
    let proxy = Proxy::start(&config, patient);
    // The patient request's stream sets the connection's timer 20 s ahead.
    let slow = std::thread::spawn(move || Client::connect(patient).get("/?delay_ms=2500"));
    wait_for("the patient request at the origin", || {
        let stats = Client::connect(origin.addr).get("/__origin/stats").json();
        (stats["requests"].as_u64() == Some(1)).then_some(())
    });
    // The proxy's one connection and the polls above, each a connection of its own.
    let so_far = origin.connections();
    // A stream due much earlier on the same connection times out on its own deadline:
    // waiting for the patient one's would let the origin answer it (200) first.
    let r = Client::connect(hasty).get("/?delay_ms=2500");
    assert_eq!(r.status, 504, "{}", r.text());
    // The patient stream was not overdue: its response arrives.
    let r = slow.join().expect("client thread");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.origin(), "deadlines");
    assert_eq!(origin.connections(), so_far, "the streams rode the proxy's one server connection");
    assert_eq!(proxy.get("/?size=10").status, 200);
}

#[test]
fn a_server_that_dies_fails_requests_with_502_until_it_comes_back() {
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let origin = OriginProcess::start(addr, "phoenix");
    let listen = proxy_addr();
    let proxy = Proxy::start(&h2_config(listen, &[addr], "", ""), listen);
    assert_eq!(proxy.get("/").status, 200);
    // A request in flight when the server dies.
    let in_flight = std::thread::spawn(move || Client::connect(listen).get("/?delay_ms=20000"));
    wait_for("the slow request to reach the origin", || {
        let stats = Client::connect(addr).get("/__origin/stats").json();
        (stats["requests"].as_u64() == Some(2)).then_some(())
    });
    drop(origin);
    assert_eq!(in_flight.join().expect("client thread").status, 502);
    let r = proxy.get("/");
    assert_eq!(r.status, 502, "{}", r.text());
    let _origin = OriginProcess::start(addr, "phoenix");
    let r = proxy.get("/");
    assert_eq!((r.status, r.origin()), (200, "phoenix"), "{}", proxy.log());
}

/// A server that answers anything with an HTTP/1.1 400 and closes, as an HTTP/1.1-only
/// server does when it receives the HTTP/2 preface.
fn http1_only_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut scratch = [0u8; 1024];
            let _ = stream.read(&mut scratch);
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        }
    });
    addr
}

#[test]
fn an_http1_only_server_behind_an_h2_pool_is_a_502_and_nothing_else_suffers() {
    let legacy = http1_only_server();
    let origin = Origin::start("fine");
    let listen = proxy_addr();
    let service = "rules = [{ path_prefix = \"/legacy\", pool = \"legacy\" }]";
    let mut config = h2_config(listen, &[origin.addr], service, "");
    config.push_str(&format!(
        "\n[[pool]]\nname = \"legacy\"\nprotocol = \"h2\"\nservers = [{{ address = \"{legacy}\" }}]\n"
    ));
    config.push_str(&format!("\n[[pool]]\nname = \"http1\"\nservers = [{{ address = \"{}\" }}]\n", origin.addr));
    let config = config.replace(
        "rules = [{ path_prefix = \"/legacy\", pool = \"legacy\" }]",
        "rules = [{ path_prefix = \"/legacy\", pool = \"legacy\" }, { path_prefix = \"/one\", pool = \"http1\" }]",
    );
    let proxy = Proxy::start(&config, listen);
    for _ in 0..3 {
        let r = proxy.get("/legacy");
        assert_eq!(r.status, 502, "{}\n{}", r.text(), proxy.log());
        assert_eq!(r.header("x-origin"), None);
    }
    wait_for("the HTTP/2 failure in the log", || {
        proxy.log().contains("HTTP/2 connection to server failed").then_some(())
    });
    assert_eq!(proxy.get("/").origin(), "fine");
    assert_eq!(proxy.get("/one").origin(), "fine");
    assert_eq!(origin.requests(), 2);
}

#[test]
fn a_websocket_upgrade_to_an_h2_pool_is_refused_with_502() {
    let origin = Origin::start("ws");
    let listen = proxy_addr();
    let proxy = Proxy::start(&h2_config(listen, &[origin.addr], "", ""), listen);
    let upgrade = [
        ("connection", "upgrade"),
        ("upgrade", "websocket"),
        ("sec-websocket-version", "13"),
        ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ];
    let r = proxy.connect().request("GET", "/chat", &upgrade);
    assert_eq!(r.status, 502, "{}", r.text());
    wait_for("the reason in the log", || proxy.log().contains("protocol switch to an h2 pool").then_some(()));
    // An h2c upgrade offer is declined: the request goes through as a plain one.
    let h2c =
        [("connection", "upgrade, http2-settings"), ("upgrade", "h2c"), ("http2-settings", "AAMAAABkAAQAoAAAAAIAAAAA")];
    let r = proxy.connect().request("GET", "/", &h2c);
    assert_eq!((r.status, r.origin()), (200, "ws"));
    assert_eq!(origin.requests(), 1);
}

/// An h2c server for the reset tests: `/refuse` is refused (REFUSED_STREAM) before any
/// response; `/cut` answers a head and 5 bytes, then resets with ENHANCE_YOUR_CALM; `/wait`
/// reads its request body and reports on `seen` the code of the reset that ends it.
fn resetting_server(seen: std::sync::mpsc::Sender<Option<h2::Reason>>) -> SocketAddr {
    h2c_test_server(move |tcp| {
        let seen = seen.clone();
        async move {
            let Ok(mut conn) = h2::server::handshake(tcp).await else { return };
            while let Some(Ok((req, mut respond))) = conn.accept().await {
                let seen = seen.clone();
                tokio::spawn(async move {
                    match req.uri().path() {
                        "/refuse" => respond.send_reset(h2::Reason::REFUSED_STREAM),
                        "/cut" => {
                            let Ok(mut send) = respond.send_response(http::Response::new(()), false) else {
                                return;
                            };
                            let _ = send.send_data(bytes::Bytes::from_static(b"hello"), false);
                            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                            send.send_reset(h2::Reason::ENHANCE_YOUR_CALM);
                        }
                        _ => {
                            let mut body = req.into_body();
                            let ended = loop {
                                match body.data().await {
                                    Some(Ok(data)) => {
                                        let _ = body.flow_control().release_capacity(data.len());
                                    }
                                    Some(Err(e)) => break e.reason(),
                                    None => break None,
                                }
                            };
                            let _ = seen.send(ended);
                        }
                    }
                });
            }
        }
    })
}

/// A proxy in front of one h2c `server` (an h2 pool, no extra settings), and a runtime
/// for the test's HTTP/2 client.
fn h2_front(server: SocketAddr) -> (SocketAddr, Proxy, tokio::runtime::Runtime) {
    let listen = proxy_addr();
    let proxy = Proxy::start(&h2_config(listen, &[server], "", ""), listen);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    (listen, proxy, rt)
}

#[test]
fn reset_codes_cross_between_http2_clients_and_http2_servers() {
    let (seen_tx, seen) = std::sync::mpsc::channel();
    let server = resetting_server(seen_tx);
    let (listen, proxy, rt) = h2_front(server);
    rt.block_on(async {
        let mut client = common::h2c_client(listen).await;
        let request = |path: &str| http::Request::post(format!("http://t{path}")).body(()).expect("request");

        // Refused before any response: the client learns it was not processed (retry-safe),
        // not a 502. The request has a body, so switchyard cannot replay it itself.
        let (response, mut up) = client.send_request(request("/refuse"), false).expect("send");
        let _ = up.send_data(bytes::Bytes::from_static(b"x"), true);
        let e = response.await.expect_err("refused");
        assert_eq!(e.reason(), Some(h2::Reason::REFUSED_STREAM), "{e:?}\n{}", proxy.log());

        // Reset mid-body: the client's stream ends with the server's code.
        let (response, _) = client.send_request(request("/cut"), true).expect("send");
        let mut body = response.await.expect("head").into_body();
        let mut got = Vec::new();
        let e = loop {
            match body.data().await {
                Some(Ok(data)) => got.extend_from_slice(&data),
                Some(Err(e)) => break e,
                None => panic!("the body ended normally after {got:?}"),
            }
        };
        assert_eq!((got.as_slice(), e.reason()), (&b"hello"[..], Some(h2::Reason::ENHANCE_YOUR_CALM)), "{e:?}");

        // The client resets its upload: the server's stream is reset with the client's code.
        let (_response, mut up) = client.send_request(request("/wait"), false).expect("send");
        up.send_data(bytes::Bytes::from_static(b"part"), false).expect("data");
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        up.send_reset(h2::Reason::CONNECT_ERROR);
        // The client's connection task must run for the reset to leave.
        for _ in 0..500 {
            match seen.try_recv() {
                Ok(ended) => {
                    assert_eq!(ended, Some(h2::Reason::CONNECT_ERROR), "{}", proxy.log());
                    return;
                }
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            }
        }
        panic!("the server never saw the stream end:\n{}", proxy.log());
    });
}

#[test]
fn a_refused_stream_is_retried_on_another_server() {
    // The first server refuses every stream (REFUSED_STREAM: not processed, RFC 9113 8.7);
    // an idempotent request moves on to the second, the client never sees the refusal.
    let (seen_tx, _seen) = std::sync::mpsc::channel();
    let refusing = resetting_server(seen_tx);
    let origin = Origin::start("h2c");
    let listen = proxy_addr();
    let proxy = Proxy::start(&h2_config(listen, &[refusing, origin.addr], "", "retries = 1\n"), listen);
    for _ in 0..4 {
        let r = proxy.connect().get("/refuse");
        assert_eq!((r.status, r.origin()), (200, "h2c"), "{}\n{}", r.text(), proxy.log());
    }
    let log = proxy.log();
    assert!(log.contains("idempotent request retried on another server"), "{log}");
    assert!(log.contains("server refused the HTTP/2 stream"), "{log}");
}

#[test]
fn a_refused_post_is_retried_on_another_server_with_its_body() {
    // A POST is not idempotent, but a refused stream was provably not processed (RFC 9113
    // 8.7): it goes on to the second server with its body, which the client gets echoed.
    let (seen_tx, _seen) = std::sync::mpsc::channel();
    let refusing = resetting_server(seen_tx);
    let origin = Origin::start("h2c");
    let listen = proxy_addr();
    let proxy = Proxy::start(&h2_config(listen, &[refusing, origin.addr], "", "retries = 1\n"), listen);
    for i in 0..4 {
        let body = format!("payload {i}");
        let mut client = proxy.connect();
        // Head and body in one write: the body is at hand when the stream is refused.
        let request =
            format!("POST /refuse?echo=1 HTTP/1.1\r\nhost: t\r\ncontent-length: {}\r\n\r\n{body}", body.len());
        client.send(request.as_bytes()).expect("request");
        let r = client.read_response().expect("response");
        assert_eq!((r.status, r.origin()), (200, "h2c"), "{}\n{}", r.text(), proxy.log());
        assert_eq!(r.text(), body, "{}", proxy.log());
    }
    let log = proxy.log();
    assert!(log.contains("request the server did not process retried on another server"), "{log}");
    assert!(log.contains("server refused the HTTP/2 stream"), "{log}");
}

/// An h2c server that answers every request with a `103 Early Hints` (a `link` field),
/// then `200` with the body `ok`.
fn early_hints_server() -> SocketAddr {
    h2c_test_server(|tcp| async move {
        let Ok(mut conn) = h2::server::handshake(tcp).await else { return };
        while let Some(Ok((_req, mut respond))) = conn.accept().await {
            let hints = http::Response::builder()
                .status(103)
                .header("link", "</style.css>; rel=preload")
                .body(())
                .expect("103");
            let _ = respond.send_informational(hints);
            let ok = http::Response::builder().header("content-length", "2").body(()).expect("200");
            if let Ok(mut send) = respond.send_response(ok, false) {
                let _ = send.send_data(bytes::Bytes::from_static(b"ok"), true);
            }
        }
    })
}

#[test]
fn early_hints_from_an_h2_server_reach_an_http1_client() {
    let server = early_hints_server();
    let listen = proxy_addr();
    let proxy = Proxy::start(&h2_config(listen, &[server], "", ""), listen);
    let mut tcp = std::net::TcpStream::connect(listen).expect("connect");
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(10))).expect("timeout");
    tcp.write_all(b"GET / HTTP/1.1\r\nhost: t\r\n\r\n").expect("request");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(b"\r\n\r\nok") {
        let n = tcp.read(&mut buf).expect("read");
        assert!(n > 0, "closed after {:?}\n{}", String::from_utf8_lossy(&got), proxy.log());
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    let (hints, fin) = (text.find("HTTP/1.1 103 Early Hints\r\n"), text.find("HTTP/1.1 200 OK\r\n"));
    assert!(hints.is_some_and(|h| fin.is_some_and(|f| h < f)), "{text}");
    assert!(text[..fin.unwrap_or(0)].contains("link: </style.css>; rel=preload\r\n"), "{text}");
}

#[test]
fn trailers_cross_between_http2_clients_and_servers_with_or_without_a_length() {
    // Between two HTTP/2 sides a body goes as frames: payload, trailers, end. Trailers reach
    // the other side also after a body with a `content-length`, which HTTP/1.1 framing
    // could not carry; fields that may not trail (`content-length` here) are dropped.
    let (seen_tx, seen) = std::sync::mpsc::channel();
    let server = trailer_echo_server(seen_tx);
    let (listen, proxy, rt) = h2_front(server);
    rt.block_on(async {
        let mut client = common::h2c_client(listen).await;
        for (path, request_length) in [("/length", true), ("/length", false), ("/none", true), ("/none", false)] {
            let payload = format!("body for {path}, request length {request_length}: ").repeat(40);
            let mut head = http::Request::post(format!("http://t{path}")).header("te", "trailers");
            if request_length {
                head = head.header("content-length", payload.len());
            }
            let (response, mut up) = client.send_request(head.body(()).expect("request"), false).expect("send");
            let (first, rest) = payload.as_bytes().split_at(100);
            up.send_data(bytes::Bytes::copy_from_slice(first), false).expect("data");
            up.send_data(bytes::Bytes::copy_from_slice(rest), false).expect("data");
            let mut trailers = http::HeaderMap::new();
            trailers.insert("x-up", http::HeaderValue::from_static("client"));
            trailers.insert("content-length", http::HeaderValue::from_static("1"));
            up.send_trailers(trailers).expect("trailers");

            let response = response.await.expect("response");
            let (parts, mut body) = response.into_parts();
            assert_eq!(parts.status, 200, "{}", proxy.log());
            assert_eq!(parts.headers.get("content-length").is_some(), path == "/length", "{path}: {:?}", parts.headers);
            let mut got = Vec::new();
            while let Some(data) = body.data().await {
                let data = data.expect("data");
                let _ = body.flow_control().release_capacity(data.len());
                got.extend_from_slice(&data);
            }
            assert_eq!(String::from_utf8_lossy(&got), payload, "{path} {request_length}");
            let trailers = body.trailers().await.expect("trailers").expect("some trailers");
            assert_eq!(trailers.get("x-up").map(|v| v.as_bytes()), Some(&b"client"[..]), "{path}: {trailers:?}");
            assert_eq!(trailers.get("x-from").map(|v| v.as_bytes()), Some(&b"server"[..]), "{trailers:?}");
            assert!(trailers.get("content-length").is_none(), "{trailers:?}");
            assert_eq!(seen.try_recv(), Ok(false), "a transfer-encoding field reached the server");
        }
    });
}

#[test]
fn streams_one_after_another_on_one_server_connection_keep_nothing_of_the_last() {
    // A server connection keeps its ended streams' states for the next streams (buffers'
    // room kept): each response must arrive whole and alone, with its own trailers and
    // length, whatever the stream before it had (trailers or not, a length or not, an
    // empty body, a body too large for a kept state).
    let (seen_tx, _seen) = std::sync::mpsc::channel();
    let server = trailer_echo_server(seen_tx);
    let (listen, proxy, rt) = h2_front(server);
    rt.block_on(async {
        let mut client = common::h2c_client(listen).await;
        let sizes = [300, 0, 40_000, 7, 5_000, 0, 1];
        for (i, size) in sizes.into_iter().enumerate() {
            let path = if i % 2 == 0 { "/length" } else { "/none" };
            let payload: Vec<u8> = (0..size).map(|k| b'a' + ((k + i) % 26) as u8).collect();
            let head = http::Request::post(format!("http://t{path}")).header("te", "trailers");
            let (response, mut up) = client.send_request(head.body(()).expect("request"), false).expect("send");
            up.send_data(bytes::Bytes::from(payload.clone()), false).expect("data");
            let mut trailers = http::HeaderMap::new();
            if i % 3 != 2 {
                trailers.insert("x-up", http::HeaderValue::from_str(&format!("n{i}")).expect("value"));
            }
            up.send_trailers(trailers).expect("trailers");
            let (parts, mut body) = response.await.expect("response").into_parts();
            assert_eq!(parts.status, 200, "{}", proxy.log());
            let length = parts.headers.get("content-length").map(|v| v.to_str().expect("text").to_owned());
            assert_eq!(length, (path == "/length").then(|| size.to_string()), "request {i}");
            let got = common::h2_body(&mut body).await.expect("body");
            assert!(got == payload, "request {i}: {} bytes back of {size}", got.len());
            let trailers = body.trailers().await.expect("trailers").expect("some trailers");
            let up = trailers.get("x-up").map(|v| v.to_str().expect("text").to_owned());
            assert_eq!(up, (i % 3 != 2).then(|| format!("n{i}")), "request {i}: {trailers:?}");
            assert_eq!(trailers.get("x-from").map(|v| v.as_bytes()), Some(&b"server"[..]), "{trailers:?}");
        }
    });
}

#[test]
fn trailers_cross_between_http1_chunked_bodies_and_http2_servers() {
    // An HTTP/1.1 client's chunked body: its trailer section reaches the HTTP/2 server as
    // trailers; the server's answer without a length comes back chunked with its trailers
    // as the trailer section, payload split in chunks as it came.
    let (seen_tx, seen) = std::sync::mpsc::channel();
    let server = trailer_echo_server(seen_tx);
    let listen = proxy_addr();
    let proxy = Proxy::start(&h2_config(listen, &[server], "", ""), listen);
    let mut tcp = std::net::TcpStream::connect(listen).expect("connect");
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(10))).expect("timeout");
    tcp.write_all(
        b"POST /none HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\n\
          5\r\nhello\r\n6\r\n world\r\n0\r\nx-up: h1\r\n\r\n",
    )
    .expect("request");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let end = |got: &[u8]| {
        let text = String::from_utf8_lossy(got);
        text.find("\r\n0\r\n").is_some_and(|at| text[at..].ends_with("\r\n\r\n"))
    };
    while !end(&got) {
        let n = tcp.read(&mut buf).expect("read");
        assert!(n > 0, "closed after {:?}\n{}", String::from_utf8_lossy(&got), proxy.log());
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    let (head, body) = text.split_once("\r\n\r\n").expect("head");
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(head.to_ascii_lowercase().contains("transfer-encoding: chunked"), "{text}");
    let (chunks, trailer_section) = body.split_once("0\r\n").expect("last chunk");
    let payload: String = chunks.split("\r\n").skip(1).step_by(2).collect();
    assert_eq!(payload, "hello world", "{text}");
    assert!(trailer_section.contains("x-up: h1\r\n"), "{text}");
    assert!(trailer_section.contains("x-from: server\r\n"), "{text}");
    assert_eq!(seen.try_recv(), Ok(false), "a transfer-encoding field reached the server");
}

#[test]
fn an_http10_client_gets_an_h2_servers_unframed_body_until_close() {
    // HTTP/1.0 knows no chunked coding: an HTTP/2 server's answer without a length reaches
    // such a client as its payload alone, ended by closing the connection.
    let (seen_tx, _seen) = std::sync::mpsc::channel();
    let server = trailer_echo_server(seen_tx);
    let listen = proxy_addr();
    let proxy = Proxy::start(&h2_config(listen, &[server], "", ""), listen);
    let mut tcp = std::net::TcpStream::connect(listen).expect("connect");
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(10))).expect("timeout");
    tcp.write_all(b"POST /none HTTP/1.0\r\nhost: t\r\ncontent-length: 11\r\n\r\nhello world").expect("request");
    let mut got = Vec::new();
    tcp.read_to_end(&mut got).expect("read to the close");
    let text = String::from_utf8_lossy(&got);
    let (head, body) = text.split_once("\r\n\r\n").expect("head");
    assert!(head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"), "{text}\n{}", proxy.log());
    assert!(!head.to_ascii_lowercase().contains("transfer-encoding"), "{text}");
    assert_eq!(body, "hello world", "{text}");
}

/// NGINX (a server switchyard did not write) as the h2c server: its HTTP/2 (its SETTINGS,
/// HEADERS and DATA in frames of their own) and its GOAWAY after `keepalive_requests`
/// streams on a connection, sent while other streams are in flight. Every request of four
/// concurrent clients is answered byte-exactly; NGINX's log shows the connections it closed
/// at the limit, so switchyard went on over new ones.
#[test]
fn nginx_as_the_h2c_server_and_its_goaway_after_keepalive_requests() {
    const LIMIT: usize = 40;
    const CLIENTS: usize = 4;
    const REQUESTS: usize = 60;
    if !common::netns::have("nginx", "-v") {
        eprintln!("SKIPPED: nginx is not installed (scripts/test.sh installs it)");
        return;
    }
    let dir = temp_dir("upstream-h2-nginx");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("html")).expect("html dir");
    let body: Vec<u8> = (0..20_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    std::fs::write(dir.join("html/page.txt"), &body).expect("page");
    let port = free_port();
    let d = dir.display();
    let conf = format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
         error_log {d}/error.log warn;\nevents {{ worker_connections 256; }}\nhttp {{\n\
         log_format conn '$connection $connection_requests $server_protocol $status';\n\
         access_log {d}/access.log conn;\nclient_body_temp_path {d}/body;\nproxy_temp_path {d}/proxy;\n\
         fastcgi_temp_path {d}/fastcgi;\nuwsgi_temp_path {d}/uwsgi;\nscgi_temp_path {d}/scgi;\n\
         keepalive_requests {LIMIT};\nserver {{\nlisten 127.0.0.1:{port} http2;\nroot {d}/html;\n}}\n}}\n"
    );
    std::fs::write(dir.join("nginx.conf"), conf).expect("nginx.conf");
    let nginx = std::process::Command::new("nginx")
        .args(["-p"])
        .arg(&dir)
        .args(["-e"])
        .arg(dir.join("error.log"))
        .args(["-c"])
        .arg(dir.join("nginx.conf"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start nginx");
    // Ends NGINX (the one process, by its PID) however the test ends.
    struct Stop(std::process::Child);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _nginx = Stop(nginx);
    let server: SocketAddr = format!("127.0.0.1:{port}").parse().expect("address");
    wait_for("nginx listening", || std::net::TcpStream::connect(server).ok());

    let listen = proxy_addr();
    let proxy = Proxy::start(&h2_config(listen, &[server], "", ""), listen);
    let body = std::sync::Arc::new(body);
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let body = body.clone();
            std::thread::spawn(move || {
                let mut client = Client::connect(listen);
                for j in 0..REQUESTS {
                    let r = client.get("/page.txt");
                    assert_eq!(r.status, 200, "client {i} request {j}: {}", r.text());
                    assert!(r.body == *body, "client {i} request {j}: body differs ({} bytes)", r.body.len());
                }
            })
        })
        .collect();
    for client in clients {
        client.join().expect("client thread");
    }
    drop(proxy);
    // NGINX's log: one line per request it served, with its connection and the request's
    // number on it.
    let log = std::fs::read_to_string(dir.join("access.log")).expect("access log");
    let lines: Vec<(u64, usize, String)> = log
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].parse().expect("connection"), f[1].parse().expect("request number"), f[2].to_string())
        })
        .collect();
    assert_eq!(lines.len(), CLIENTS * REQUESTS, "requests NGINX served (a retry would add some):\n{log}");
    assert!(lines.iter().all(|(_, n, proto)| *n <= LIMIT && proto == "HTTP/2.0"), "{log}");
    let connections: std::collections::BTreeSet<u64> = lines.iter().map(|(c, _, _)| *c).collect();
    let full = lines.iter().filter(|(_, n, _)| *n == LIMIT).count();
    assert!(connections.len() >= CLIENTS * REQUESTS / LIMIT, "{} connections:\n{log}", connections.len());
    assert!(full >= 2, "connections that reached the limit: {full}\n{log}");
}
