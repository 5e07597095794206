//! HTTP/3 towards clients, end to end, with a client switchyard did not write: Python
//! `aioquic`'s QUIC and HTTP/3 stacks (`tests/h3/client.py`, run by the project's venv,
//! `.tools/venv`, which scripts/test.sh makes). Each request stream goes through the same
//! phases as HTTP/1.1: GET and POST bodies byte-exact (1 MiB each way), the `.png` rule,
//! cookie persistence, compression, a cache hit, response trailers, trailers both ways
//! to an HTTP/2 server (bodies as frames, with or without a length), 100 concurrent
//! streams on one connection, a client that moves to another UDP port mid-connection,
//! and `Alt-Svc` on the service's TCP side; Retry (address validation) always, and under
//! a flood of half-open handshakes, counted in the metrics. With several workers (ADR
//! 0009): connections spread over the workers, a client that moves sixteen times stays
//! with the worker that holds its connection, Retry on every worker. Without aioquic the
//! tests say they skipped.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::pki::Pki;
use common::{comparable_fields, proxy_addr, temp_dir, wait_exit, wait_for, workspace_root, Origin, Proxy};
use serde_json::{json, Value};

/// The name the proxy's certificate carries.
const PROXY_NAME: &str = "proxy.test";

/// The venv's Python when aioquic imports there; `None` (after saying so) otherwise.
fn python() -> Option<PathBuf> {
    let python = workspace_root().join(".tools/venv/bin/python");
    let ok = Command::new(&python)
        .args(["-c", "import aioquic.h3.connection"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("Python aioquic is not installed in .tools/venv: skipped (scripts/test.sh installs it)");
        return None;
    }
    Some(python)
}

/// An `https` service with `http3` on, in front of `pools` (the first is the default),
/// with `extra` service keys; its CA file and the access log.
struct Front {
    proxy: Proxy,
    listen: SocketAddr,
    ca: PathBuf,
    log: PathBuf,
    /// The admin listener (read-only token [`ADMIN_TOKEN`]), when started with one.
    admin: Option<SocketAddr>,
}

/// The read-only token of [`Front::start_with_admin`]'s admin listener.
const ADMIN_TOKEN: &str = "h3-reader";

impl Front {
    fn start(pools: &[(&str, &[SocketAddr], &str)], extra: &str) -> Front {
        Front::start_on(pools, extra, None, 2)
    }

    /// [`Front::start`] with an admin listener, for the metrics.
    fn start_with_admin(pools: &[(&str, &[SocketAddr], &str)], extra: &str) -> Front {
        Front::start_on(pools, extra, Some(proxy_addr()), 2)
    }

    /// [`Front::start_with_admin`] with `workers` workers, logging each QUIC
    /// connection with the worker that serves it ([`Front::quic_workers`]).
    fn start_workers(pools: &[(&str, &[SocketAddr], &str)], extra: &str, workers: usize) -> Front {
        Front::start_on(pools, extra, Some(proxy_addr()), workers)
    }

    fn start_on(
        pools: &[(&str, &[SocketAddr], &str)],
        extra: &str,
        admin: Option<SocketAddr>,
        workers: usize,
    ) -> Front {
        let pki = Pki::new("h3 test CA");
        let dir = temp_dir("h3");
        let (cert, key) = pki.leaf(&[PROXY_NAME, "127.0.0.1"]);
        let (ca, cert_file, key_file) = (dir.join("ca.pem"), dir.join("front.crt"), dir.join("front.key"));
        std::fs::write(&ca, &pki.ca).expect("ca");
        std::fs::write(&cert_file, cert).expect("cert");
        std::fs::write(&key_file, key).expect("key");
        // The service listens on TCP and on UDP (QUIC) with the same port.
        let listen = common::proxy_addr_tcp_udp();
        let log = dir.join("access.log");
        // `http3 = true` unless `extra` writes its own `http3`.
        let http3 = if extra.contains("http3 =") { "" } else { "http3 = true\n" };
        let mut config = format!(
            "workers = {workers}\ndrain_timeout = \"5s\"\n\n[access_log]\npath = \"{}\"\nformat = \"json\"\n\n\
             [[service]]\nname = \"web\"\nmode = \"https\"\nlisten = \"{listen}\"\npool = \"{}\"\n{http3}\
             tls = {{ certificate = \"{}\", key = \"{}\" }}\n{extra}\n",
            log.display(),
            pools[0].0,
            cert_file.display(),
            key_file.display()
        );
        for (name, servers, pool_extra) in pools {
            let list: Vec<String> = servers.iter().map(|a| format!("{{ address = \"{a}\" }}")).collect();
            config += &format!("\n[[pool]]\nname = \"{name}\"\nservers = [{}]\n{pool_extra}\n", list.join(", "));
        }
        if let Some(admin) = admin {
            config += &format!(
                "\n[admin]\nlisten = \"{admin}\"\ntokens = [ {{ token = \"{ADMIN_TOKEN}\", role = \"read-only\" }} ]\n"
            );
        }
        let file = dir.join("switchyard.toml");
        std::fs::write(&file, &config).expect("config");
        // Several workers: each serves QUIC connections and TCP ones (ADR 0009).
        let proxy = Proxy::run_file_logging(&file, listen, workers, "info,switchyard_engine::http3=debug");
        if let Some(admin) = admin {
            wait_for("the admin listener", || TcpStream::connect(admin).ok());
        }
        Front { proxy, listen, ca, log, admin }
    }

    /// The value of a Prometheus sample of the admin listener's `/metrics` (the line
    /// that starts with `series`), 0 when absent.
    fn metric(&self, series: &str) -> u64 {
        let admin = self.admin.expect("started with an admin listener");
        let host = admin.to_string();
        let bearer = format!("Bearer {ADMIN_TOKEN}");
        let headers = [("host", host.as_str()), ("connection", "close"), ("authorization", bearer.as_str())];
        let response = common::Client::connect(admin).request("GET", "/metrics", &headers);
        assert_eq!(response.status, 200);
        let text = String::from_utf8_lossy(&response.body).into_owned();
        text.lines().find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok())).unwrap_or(0)
    }

    /// The worker of each QUIC connection established so far, in order (from
    /// the proxy's debug log).
    fn quic_workers(&self) -> Vec<usize> {
        let log = self.proxy.log();
        let lines = log.lines().filter(|l| l.contains("QUIC connection established"));
        lines.filter_map(|l| l.split("worker=").nth(1)?.split(' ').next()?.parse().ok()).collect()
    }

    /// Runs the aioquic client with `plan` (host, port, CA and name filled in).
    fn h3(&self, python: &Path, mut plan: Value) -> Answer {
        plan["host"] = json!("127.0.0.1");
        plan["port"] = json!(self.listen.port());
        plan["ca"] = json!(self.ca.display().to_string());
        plan["server_name"] = json!(PROXY_NAME);
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/h3/client.py");
        let dir = temp_dir("h3-client");
        let (plan_path, out_path, err_path) = (dir.join("plan.json"), dir.join("out.json"), dir.join("err.txt"));
        std::fs::write(&plan_path, plan.to_string()).expect("plan");
        let mut child = Command::new(python)
            .arg(script)
            .stdin(std::fs::File::open(&plan_path).expect("plan"))
            .stdout(std::fs::File::create(&out_path).expect("out"))
            .stderr(std::fs::File::create(&err_path).expect("err"))
            .spawn()
            .expect("spawn the aioquic client");
        let status = wait_exit(&mut child, Duration::from_secs(120));
        if status.is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let err = std::fs::read_to_string(&err_path).unwrap_or_default();
        assert!(status.is_some_and(|s| s.success()), "aioquic client failed: {err}\n{}", self.proxy.log());
        let out: Value = serde_json::from_str(&std::fs::read_to_string(&out_path).expect("out")).expect("JSON");
        Answer(out)
    }

    /// The access log's lines once `n` are there.
    fn log_lines(&self, n: usize) -> Vec<Value> {
        wait_for("the access log lines", || {
            let text = std::fs::read_to_string(&self.log).ok()?;
            let lines: Vec<Value> = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
            (lines.len() >= n).then_some(lines)
        })
    }
}

/// The client's answer: one result per request, and the local ports it used.
struct Answer(Value);

impl Answer {
    fn result(&self, i: usize) -> Reply {
        let r = &self.0["results"][i];
        assert!(r.get("error").is_none(), "request {i} failed: {}", r["error"]);
        Reply(r.clone())
    }

    fn len(&self) -> usize {
        self.0["results"].as_array().map_or(0, Vec::len)
    }

    fn ports(&self) -> Vec<u64> {
        self.0["ports"].as_array().map(|p| p.iter().filter_map(Value::as_u64).collect()).unwrap_or_default()
    }
}

/// One response.
struct Reply(Value);

impl Reply {
    fn status(&self) -> u64 {
        self.0["status"].as_u64().unwrap_or(0)
    }

    fn header(&self, name: &str) -> Option<String> {
        Self::find(&self.0["headers"], name)
    }

    fn trailer(&self, name: &str) -> Option<String> {
        Self::find(&self.0["trailers"], name)
    }

    fn find(fields: &Value, name: &str) -> Option<String> {
        fields.as_array()?.iter().find(|f| f[0] == name).and_then(|f| f[1].as_str().map(str::to_string))
    }

    fn body(&self) -> Vec<u8> {
        hex_decode(self.0["body_hex"].as_str().unwrap_or_default())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn hex_decode(text: &str) -> Vec<u8> {
    (0..text.len() / 2).map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).expect("hex")).collect()
}

fn get(path: &str) -> Value {
    json!({ "method": "GET", "path": path })
}

#[test]
fn get_and_post_bodies_are_byte_exact_and_follow_the_png_rule() {
    let Some(python) = python() else { return };
    let (main, images) = (Origin::start("main"), Origin::start("images"));
    let front = Front::start(
        &[("main", &[main.addr], ""), ("images", &[images.addr], "")],
        "rules = [{ path_suffix = \".png\", pool = \"images\" }]",
    );
    let body: Vec<u8> = (0..1024 * 1024u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let post = |length: bool| {
        let mut headers = vec![json!(["content-type", "application/octet-stream"])];
        if length {
            headers.push(json!(["content-length", body.len().to_string()]));
        }
        json!({ "method": "POST", "path": "/upload.png?echo=1", "headers": headers, "body_hex": hex(&body) })
    };
    let answer = front.h3(&python, json!({ "requests": [get("/page?size=1048576"), post(true), post(false)] }));
    let page = answer.result(0);
    assert_eq!((page.status(), page.header("x-origin").as_deref()), (200, Some("main")));
    let direct = common::Client::connect(main.addr).get("/page?size=1048576");
    assert!(page.body() == direct.body, "GET body differs from the origin's ({} bytes)", page.body().len());
    for i in [1, 2] {
        let echo = answer.result(i);
        assert_eq!((echo.status(), echo.header("x-origin").as_deref()), (200, Some("images")), "POST {i}");
        assert!(echo.body() == body, "POST {i}: echo differs ({} bytes back)", echo.body().len());
    }
    assert_eq!(images.requests(), 2);
    let lines = front.log_lines(3);
    assert!(lines.iter().all(|l| l["version"] == "HTTP/3"), "{lines:?}");
}

/// RFC 9114 4.1.2: a request whose DATA do not add up to its
/// `content-length` is malformed, a stream error H3_MESSAGE_ERROR (0x10e),
/// and is not forwarded whole; the connection goes on.
#[test]
fn a_body_that_does_not_match_its_content_length_resets_its_stream_only() {
    let Some(python) = python() else { return };
    let origin = Origin::start("main");
    let front = Front::start(&[("main", &[origin.addr], "")], "");
    let post = |length: usize, body: &[u8]| {
        let headers = vec![json!(["content-length", length.to_string()])];
        json!({ "method": "POST", "path": "/p?echo=1", "headers": headers, "body_hex": hex(body) })
    };
    let requests = [post(3, b"longer"), post(10, b"short"), post(5, b"exact")];
    let answer = front.h3(&python, json!({ "requests": requests }));
    for i in 0..2 {
        let error = answer.0["results"][i]["error"].as_str().unwrap_or_default().to_string();
        assert!(error.contains("stream reset with code 270"), "request {i}: {:?}", answer.0["results"][i]);
    }
    let fine = answer.result(2);
    assert_eq!((fine.status(), fine.body()), (200, b"exact".to_vec()), "the connection goes on");
    // The longer body was refused before any byte went on; the shorter one
    // may have reached the origin in part, never as a complete request.
    assert_eq!(origin.requests(), 1, "only the matching request reached the origin whole");
}

#[test]
fn data_past_the_content_length_after_the_body_went_on_resets_the_stream() {
    let Some(python) = python() else { return };
    let origin = Origin::start("main");
    let front = Front::start(&[("main", &[origin.addr], "")], "");
    // The body is whole (3 bytes) and goes on to the origin, which answers
    // after 1 s; the client's extra DATA comes 0.2 s after the body, while
    // the request is in flight.
    let slow = |late: &[u8]| {
        json!({
            "method": "POST",
            "path": "/p?delay_ms=1000&size=5",
            "headers": [["content-length", "3"]],
            "body_hex": hex(b"abc"),
            "late_hex": hex(late),
        })
    };
    let requests = [slow(b"def"), slow(b""), get("/after")];
    let answer = front.h3(&python, json!({ "requests": requests }));
    let error = answer.0["results"][0]["error"].as_str().unwrap_or_default().to_string();
    assert!(error.contains("stream reset with code 270"), "extra DATA: {:?}", answer.0["results"][0]);
    let ended_late = answer.result(1);
    assert_eq!(
        (ended_late.status(), ended_late.header("x-received-bytes").as_deref()),
        (200, Some("3")),
        "a stream that ends late without more DATA is a whole request"
    );
    assert_eq!(answer.result(2).status(), 200, "the connection goes on");
}

#[test]
fn an_inserted_cookie_brings_the_client_back_to_its_server() {
    let Some(python) = python() else { return };
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    let front = Front::start(&[("main", &[a.addr, b.addr], "persistence = { cookie = \"SRV\" }")], "");
    let requests: Vec<Value> = (0..6).map(|i| get(&format!("/p{i}"))).collect();
    let answer = front.h3(&python, json!({ "requests": requests, "cookie_jar": true }));
    let first = answer.result(0);
    assert!(first.header("set-cookie").is_some_and(|c| c.starts_with("SRV=")), "{:?}", first.0["headers"]);
    let server = first.header("x-origin");
    for i in 1..6 {
        assert_eq!(answer.result(i).header("x-origin"), server, "request {i} went elsewhere");
    }
    assert!(a.requests() == 6 || b.requests() == 6, "a {} b {}", a.requests(), b.requests());
}

#[test]
fn responses_are_compressed_and_cache_hits_skip_the_origin() {
    let Some(python) = python() else { return };
    let origin = Origin::start("main");
    let front = Front::start(&[("main", &[origin.addr], "")], "compression = true\ncache = true");
    let gzip = json!([["accept-encoding", "gzip"]]);
    let requests = json!([
        { "method": "GET", "path": "/page?compressible=1&size=5000", "headers": gzip },
        get("/a?cache=60&size=300"),
        get("/a?cache=60&size=300"),
    ]);
    let answer = front.h3(&python, json!({ "requests": requests }));
    let page = answer.result(0);
    assert_eq!((page.status(), page.header("content-encoding").as_deref()), (200, Some("gzip")));
    let mut plain = Vec::new();
    flate2::read::GzDecoder::new(&page.body()[..]).read_to_end(&mut plain).expect("gzip");
    assert_eq!(plain.len(), 5000);
    assert!(page.body().len() < 5000);
    let (miss, hit) = (answer.result(1), answer.result(2));
    assert_eq!((miss.status(), hit.status()), (200, 200));
    assert_eq!(miss.body(), hit.body());
    assert!(hit.header("age").is_some(), "a hit carries Age: {:?}", hit.0["headers"]);
    assert_eq!(origin.requests(), 2, "the hit did not reach the origin");
}

/// The fields of an HTTP/1.1 response's head, in order.
fn head_fields(text: &str) -> Vec<(String, String)> {
    let head = text.split("\r\n\r\n").next().unwrap_or_default();
    head.lines()
        .skip(1)
        .filter_map(|l| l.split_once(':').map(|(n, v)| (n.trim().to_string(), v.trim().to_string())))
        .collect()
}

#[test]
fn a_cache_hit_reaches_http3_clients_with_the_head_http1_clients_get() {
    let Some(python) = python() else { return };
    let origin = Origin::start("main");
    let front = Front::start(&[("main", &[origin.addr], "")], "cache = true");
    let path = "/same?cache=60&size=300";
    let miss = tcp_get(&front, path);
    let hit = tcp_get(&front, path);
    assert!(miss.starts_with("HTTP/1.1 200") && hit.starts_with("HTTP/1.1 200"), "{hit}");
    let range = json!({ "method": "GET", "path": path, "headers": [["range", "bytes=0-9"]] });
    // No HEAD here: aioquic checks a response's `content-length` against its DATA without
    // knowing the request was a HEAD, and closes the connection (the HTTP/2 test has one).
    let answer = front.h3(&python, json!({ "requests": [get(path), range] }));
    let (h3, ranged) = (answer.result(0), answer.result(1));
    assert_eq!(origin.requests(), 1, "every HTTP/3 request was a hit");
    assert_eq!(h3.status(), 200);
    assert!(h3.header("age").is_some(), "{:?}", h3.0["headers"]);
    let fields = |r: &Reply| -> Vec<(String, String)> {
        let list = r.0["headers"].as_array().cloned().unwrap_or_default();
        list.iter()
            .map(|f| (f[0].as_str().unwrap_or("").to_string(), f[1].as_str().unwrap_or("").to_string()))
            .collect()
    };
    // `alt-svc`: the TCP side's advertisement of HTTP/3.
    assert_eq!(comparable_fields(fields(&h3), &["alt-svc"]), comparable_fields(head_fields(&hit), &["alt-svc"]));
    assert_eq!(h3.body().len(), 300);
    // A range of the stored response: its head through the same writer.
    assert_eq!((ranged.status(), ranged.body().len()), (206, 10));
    assert_eq!(ranged.header("content-range").as_deref(), Some("bytes 0-9/300"));
}

#[test]
fn malformed_request_heads_are_refused_on_their_stream_only() {
    let Some(python) = python() else { return };
    let origin = Origin::start("main");
    let front = Front::start(&[("main", &[origin.addr], "")], "");
    let with = |name: &str, value: &str| json!({ "method": "GET", "path": "/bad", "headers": [[name, value]], "raw_names": true });
    let bad = [
        with("X-Upper", "1"),
        with("connection", "close"),
        with("transfer-encoding", "chunked"),
        with("te", "gzip"),
        with("x-padded", " value"),
        with("content-length", "12a"),
    ];
    let mut requests: Vec<Value> = bad.to_vec();
    requests.push(with("te", "trailers"));
    let answer = front.h3(&python, json!({ "requests": requests }));
    // RFC 9114 4.1.2: a malformed request is a stream error of type H3_MESSAGE_ERROR (0x10e).
    for i in 0..bad.len() {
        let error = answer.0["results"][i]["error"].as_str().unwrap_or_default().to_string();
        assert!(error.contains("stream reset with code 270"), "request {i}: {:?}", answer.0["results"][i]);
    }
    let fine = answer.result(bad.len());
    assert_eq!(fine.status(), 200, "the connection goes on, and `te: trailers` is allowed");
    assert_eq!(origin.requests(), 1, "no malformed request reached the origin");
}

/// A server that answers every request with a chunked body and trailers.
fn trailer_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in listener.incoming().take(16) {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let mut head = Vec::new();
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n\
                      5\r\nhello\r\n6\r\n world\r\n0\r\nx-checksum: abc\r\n\r\n",
                );
            });
        }
    });
    addr
}

#[test]
fn response_trailers_reach_the_client() {
    let Some(python) = python() else { return };
    let server = trailer_server();
    let front = Front::start(&[("main", &[server], "")], "");
    let request = json!({ "method": "GET", "path": "/t", "headers": [["te", "trailers"]] });
    let answer = front.h3(&python, json!({ "requests": [request] }));
    let reply = answer.result(0);
    assert_eq!((reply.status(), reply.body()), (200, b"hello world".to_vec()));
    assert_eq!(reply.trailer("x-checksum").as_deref(), Some("abc"), "{:?}", reply.0);
}

#[test]
fn trailers_cross_to_and_from_an_http2_server_as_frames() {
    // HTTP/3 client, HTTP/2 server: the bodies go as parts both ways (no chunked coding in
    // between), so the request's trailers reach the server and its trailers come back,
    // after bodies with a `content-length` too.
    let Some(python) = python() else { return };
    let (seen_tx, seen) = std::sync::mpsc::channel();
    let server = common::trailer_echo_server(seen_tx);
    let front = Front::start(&[("main", &[server], "protocol = \"h2\"")], "");
    let body = "a body that crosses as frames ".repeat(100);
    let request = |path: &str, length: bool| {
        let mut headers = vec![json!(["te", "trailers"])];
        if length {
            headers.push(json!(["content-length", body.len().to_string()]));
        }
        json!({
            "method": "POST", "path": path, "headers": headers,
            "body_hex": hex(body.as_bytes()), "trailers": [["x-up", "h3"], ["content-length", "1"]],
        })
    };
    let requests = vec![request("/length", true), request("/length", false), request("/none", false)];
    let answer = front.h3(&python, json!({ "requests": requests }));
    for i in 0..3 {
        let reply = answer.result(i);
        assert_eq!((reply.status(), reply.body()), (200, body.as_bytes().to_vec()), "{i}: {:?}", reply.0);
        assert_eq!(reply.trailer("x-up").as_deref(), Some("h3"), "{i}: {:?}", reply.0);
        assert_eq!(reply.trailer("x-from").as_deref(), Some("server"), "{i}: {:?}", reply.0);
        assert_eq!(reply.trailer("content-length"), None, "{i}: {:?}", reply.0);
        assert_eq!(seen.try_recv(), Ok(false), "a transfer-encoding field reached the server");
    }
}

#[test]
fn a_hundred_concurrent_streams_share_one_connection() {
    let Some(python) = python() else { return };
    let origin = Origin::start("main");
    let front = Front::start(&[("main", &[origin.addr], "")], "");
    let requests: Vec<Value> = (0..100).map(|i| get(&format!("/s{i}?size={}", 100 + 997 * i))).collect();
    let answer = front.h3(&python, json!({ "requests": requests, "concurrent": true }));
    assert_eq!(answer.len(), 100);
    for i in 0..100 {
        let r = answer.result(i);
        assert_eq!((r.status(), r.body().len()), (200, 100 + 997 * i), "stream {i}");
    }
    assert_eq!(origin.requests(), 100);
}

#[test]
fn a_client_that_moves_to_another_port_keeps_being_served() {
    let Some(python) = python() else { return };
    let origin = Origin::start("main");
    let front = Front::start(&[("main", &[origin.addr], "")], "");
    let requests: Vec<Value> = (0..6).map(|i| get(&format!("/m{i}?size=2000"))).collect();
    let answer = front.h3(&python, json!({ "requests": requests, "rebind_after": 3 }));
    let ports = answer.ports();
    assert_eq!(ports.len(), 2, "{:?}", answer.0);
    assert_ne!(ports[0], ports[1], "the client moved to another port");
    for i in 0..6 {
        let r = answer.result(i);
        assert_eq!((r.status(), r.body().len()), (200, 2000), "request {i}");
    }
    // The access log names the client's address as it was for each request.
    let lines = front.log_lines(6);
    let clients: Vec<&str> = lines.iter().filter_map(|l| l["client"].as_str()).collect();
    assert!(clients.iter().any(|c| c.ends_with(&format!(":{}", ports[1]))), "{clients:?} {ports:?}");
}

#[test]
fn an_oversized_head_is_refused_on_its_stream_only() {
    let Some(python) = python() else { return };
    let origin = Origin::start("main");
    let front = Front::start(&[("main", &[origin.addr], "")], "limits = { max_header_bytes = \"4KiB\" }");
    let big = json!({ "method": "GET", "path": "/big", "headers": [["x-filler", "a".repeat(8 * 1024)]] });
    let answer = front.h3(&python, json!({ "requests": [big, get("/after?size=100")] }));
    assert_eq!(answer.result(0).status(), 431);
    let after = answer.result(1);
    assert_eq!((after.status(), after.body().len()), (200, 100), "the connection goes on");
    assert_eq!(origin.requests(), 1);
}

#[test]
fn a_rapid_reset_client_is_closed_and_no_one_else() {
    let Some(python) = python() else { return };
    let origin = Origin::start("main");
    let front = Front::start(&[("main", &[origin.addr], "")], "http3 = { enabled = true, max_resets = 10 }");
    let flood = front.h3(&python, json!({ "reset_streams": 40, "requests": [get("/late?size=10")] }));
    assert_eq!(flood.0["closed"], 0x107, "closed with H3_EXCESSIVE_LOAD: {}", flood.0);
    assert!(flood.0["results"][0].get("error").is_some(), "{}", flood.0);
    assert!(front.proxy.log().contains("rapid-reset"), "{}", front.proxy.log());
    let other = front.h3(&python, json!({ "requests": [get("/fine?size=10")] }));
    assert_eq!(other.result(0).status(), 200);
}

/// The Prometheus series of the `web` service's Retry packets.
const RETRIES: &str = "switchyard_quic_retries_total{service=\"web\"}";

#[test]
fn with_retry_always_a_client_proves_its_address_first_and_is_served() {
    let Some(python) = python() else { return };
    let origin = Origin::start("main");
    let front =
        Front::start_with_admin(&[("main", &[origin.addr], "")], "http3 = { enabled = true, retry = \"always\" }");
    let answer = front.h3(&python, json!({ "requests": [get("/validated?size=300")] }));
    assert_eq!(answer.0["retried"], 1, "the client followed a Retry: {}", answer.0);
    let reply = answer.result(0);
    assert_eq!((reply.status(), reply.body().len()), (200, 300));
    assert_eq!(front.metric(RETRIES), 1, "one Retry counted");
    // Without a Retry the same client goes straight through.
    let plain =
        Front::start_with_admin(&[("main", &[origin.addr], "")], "http3 = { enabled = true, retry = \"never\" }");
    let answer = plain.h3(&python, json!({ "requests": [get("/direct?size=300")] }));
    assert_eq!((answer.0["retried"].as_u64(), answer.result(0).status()), (Some(0), 200));
    assert_eq!(plain.metric(RETRIES), 0);
}

#[test]
fn retry_auto_turns_on_while_half_open_handshakes_pile_up() {
    let Some(python) = python() else { return };
    let origin = Origin::start("main");
    let extra = "http3 = { enabled = true, retry = \"auto\", retry_threshold = 3 }";
    let front = Front::start_with_admin(&[("main", &[origin.addr], "")], extra);
    // Alone, a client is not asked to prove its address.
    let calm = front.h3(&python, json!({ "requests": [get("/calm?size=10")] }));
    assert_eq!((calm.0["retried"].as_u64(), calm.result(0).status()), (Some(0), 200));
    assert_eq!(front.metric(RETRIES), 0);
    // Three connection attempts that never finish their handshake (as from spoofed
    // sources) reach the threshold: the next client gets a Retry, follows it, is served.
    let busy = front.h3(&python, json!({ "half_open": 3, "requests": [get("/busy?size=10")] }));
    assert_eq!(busy.0["retried"], 1, "{}", busy.0);
    assert_eq!(busy.result(0).status(), 200);
    assert_eq!(front.metric(RETRIES), 1, "{}", front.proxy.log());
}

#[test]
fn garbage_datagrams_disturb_no_one() {
    let Some(python) = python() else { return };
    let origin = Origin::start("main");
    let front = Front::start(&[("main", &[origin.addr], "")], "");
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp");
    // Short and long headers with random contents, an Initial-looking packet too
    // small to be one, and empty datagrams: each is dropped (or answered by a
    // stateless reset or version negotiation), never a crash.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for i in 0..2000usize {
        let len = [0, 1, 20, 200, 1200, 1500][i % 6];
        let datagram: Vec<u8> = (0..len)
            .map(|j| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                if j == 0 && i % 3 == 0 {
                    0xc0
                } else {
                    seed as u8
                }
            })
            .collect();
        let _ = socket.send_to(&datagram, front.listen);
    }
    let answer = front.h3(&python, json!({ "requests": [get("/after?size=100")] }));
    assert_eq!(answer.result(0).status(), 200, "{}", front.proxy.log());
}

#[test]
fn a_reload_keeps_http3_serving_with_the_new_rules() {
    let Some(python) = python() else { return };
    let (main, images) = (Origin::start("main"), Origin::start("images"));
    let front = Front::start(
        &[("main", &[main.addr], ""), ("images", &[images.addr], "")],
        "rules = [{ path_prefix = \"/old/\", pool = \"images\" }]",
    );
    let before = front.h3(&python, json!({ "requests": [get("/new/a")] }));
    assert_eq!(before.result(0).header("x-origin").as_deref(), Some("main"));
    let config = std::fs::read_to_string(&front.proxy.config).expect("config");
    std::fs::write(&front.proxy.config, config.replace("/old/", "/new/")).expect("config");
    front.proxy.reload(1);
    let after = front.h3(&python, json!({ "requests": [get("/new/a")] }));
    assert_eq!(after.result(0).header("x-origin").as_deref(), Some("images"), "{}", front.proxy.log());
}

/// A GET over HTTP/1.1 and TLS (rustls) on the service's TCP listener: the response as text.
fn tcp_get(front: &Front, path: &str) -> String {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(&front.ca).expect("ca");
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
        roots.add(cert.expect("ca cert")).expect("root");
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(PROXY_NAME).expect("name");
    let conn = rustls::ClientConnection::new(Arc::new(config), name).expect("client");
    let mut tls = rustls::StreamOwned::new(conn, TcpStream::connect(front.listen).expect("connect"));
    let request = format!("GET {path} HTTP/1.1\r\nhost: proxy.test\r\nconnection: close\r\n\r\n");
    tls.write_all(request.as_bytes()).expect("request");
    let mut response = Vec::new();
    let _ = tls.read_to_end(&mut response);
    String::from_utf8_lossy(&response).into_owned()
}

#[test]
fn the_tcp_side_advertises_http3() {
    let origin = Origin::start("main");
    let front = Front::start(&[("main", &[origin.addr], "")], "");
    let text = tcp_get(&front, "/");
    let want = format!("alt-svc: h3=\":{}\"; ma=86400\r\n", front.listen.port());
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.to_ascii_lowercase().contains(&want), "{text}");
}

// ---------------------------------------------------------------------------------------
// QUIC across workers (ADR 0009): one endpoint per worker, datagrams steered by the
// worker byte of the connection ID.
// ---------------------------------------------------------------------------------------

/// The distinct workers in `workers`.
fn distinct(workers: &[usize]) -> std::collections::BTreeSet<usize> {
    workers.iter().copied().collect()
}

#[test]
fn connections_are_spread_over_the_workers_and_each_is_served() {
    let Some(python) = python() else { return };
    let origin = Origin::start("main");
    let front = Front::start_workers(&[("main", &[origin.addr], "")], "", 4);
    // Sixteen connections, each from its own UDP port: the kernel's hash of the
    // client's address picks the worker of each handshake.
    let requests = vec![get("/spread?size=500"), get("/spread2?size=700")];
    let answer = front.h3(&python, json!({ "requests": requests, "connections": 16 }));
    assert_eq!(answer.len(), 32);
    for i in 0..32 {
        let r = answer.result(i);
        assert_eq!((r.status(), r.body().len()), (200, if i % 2 == 0 { 500 } else { 700 }), "request {i}");
    }
    let workers = front.quic_workers();
    assert_eq!(workers.len(), 16, "one handshake per connection: {workers:?}");
    assert!(distinct(&workers).len() > 1, "16 connections all on one worker of 4: {workers:?}");
    assert_eq!(origin.requests(), 32);
}

#[test]
fn a_client_that_moves_sixteen_times_stays_with_its_worker() {
    let Some(python) = python() else { return };
    let origin = Origin::start("main");
    let front = Front::start_workers(&[("main", &[origin.addr], "")], "", 4);
    // A new UDP port before every request after the first: with a plain 4-tuple
    // hash over 4 sockets, the datagrams from at least one of the 16 new ports would
    // reach another worker (all 16 staying has probability 4^-16), which knows
    // nothing of the connection.
    let requests: Vec<Value> = (0..17).map(|i| get(&format!("/move{i}?size=1500"))).collect();
    let answer = front.h3(&python, json!({ "requests": requests, "rebind_every": 1 }));
    let ports = answer.ports();
    assert_eq!(distinct(&ports.iter().map(|&p| p as usize).collect::<Vec<_>>()).len(), 17, "{ports:?}");
    for i in 0..17 {
        let r = answer.result(i);
        assert_eq!((r.status(), r.body().len()), (200, 1500), "request {i}");
    }
    assert_eq!(front.quic_workers().len(), 1, "one connection, never re-established");
    // The access log names the client's address as it was for each request.
    let lines = front.log_lines(17);
    let clients: Vec<&str> = lines.iter().filter_map(|l| l["client"].as_str()).collect();
    for port in &ports[1..] {
        assert!(clients.iter().any(|c| c.ends_with(&format!(":{port}"))), "{port} not in {clients:?}");
    }
}

#[test]
fn with_retry_always_every_worker_validates_its_clients() {
    let Some(python) = python() else { return };
    let origin = Origin::start("main");
    let extra = "http3 = { enabled = true, retry = \"always\" }";
    let front = Front::start_workers(&[("main", &[origin.addr], "")], extra, 4);
    let answer = front.h3(&python, json!({ "requests": [get("/retried?size=300")], "connections": 12 }));
    assert_eq!(answer.0["retried"], 12, "each connection followed a Retry: {}", answer.0);
    for i in 0..12 {
        let r = answer.result(i);
        assert_eq!((r.status(), r.body().len()), (200, 300), "connection {i}");
    }
    assert_eq!(front.metric(RETRIES), 12, "one Retry counted per connection");
    let workers = front.quic_workers();
    assert_eq!(workers.len(), 12, "{workers:?}");
    assert!(distinct(&workers).len() > 1, "12 connections all on one worker of 4: {workers:?}");
}

#[test]
fn the_proxys_own_answers_and_cache_hits_advertise_http3_too() {
    let origin = Origin::start("main");
    let dead = SocketAddr::from(([127, 0, 0, 1], common::free_port()));
    let front = Front::start(
        &[("main", &[origin.addr], ""), ("dead", &[dead], "")],
        "cache = true\nrules = [{ path = \"/health\", respond = \"ok\" }, \
         { path_prefix = \"/gone/\", deny = true }, { path_prefix = \"/down/\", pool = \"dead\" }]",
    );
    let want = format!("alt-svc: h3=\":{}\"; ma=86400\r\n", front.listen.port());
    let miss = tcp_get(&front, "/c?cache=60&size=10");
    let hit = tcp_get(&front, "/c?cache=60&size=10");
    assert!(hit.to_ascii_lowercase().contains("\r\nage: "), "a hit: {hit}");
    for (what, text, status) in [
        ("a rule's answer", tcp_get(&front, "/health"), "200"),
        ("a denial", tcp_get(&front, "/gone/x"), "403"),
        ("an error", tcp_get(&front, "/down/x"), "50"),
        ("a cache miss", miss, "200"),
        ("a cache hit", hit, "200"),
    ] {
        assert!(text.starts_with(&format!("HTTP/1.1 {status}")), "{what}: {text}");
        assert_eq!(text.to_ascii_lowercase().matches(&want).count(), 1, "{what}: {text}");
    }
    assert_eq!(origin.requests(), 1, "the hit did not reach the origin");
}

#[test]
fn quic_handshakes_count_in_the_tls_handshake_counters() {
    let Some(python) = python() else { return };
    let origin = Origin::start("main");
    let front = Front::start_with_admin(&[("main", &[origin.addr], "")], "");
    for i in 0..2 {
        let answer = front.h3(&python, json!({ "requests": [get(&format!("/h{i}?size=10"))] }));
        assert_eq!(answer.result(0).status(), 200);
    }
    let full = "switchyard_tls_handshakes_total{kind=\"full\"}";
    wait_for("two QUIC handshakes counted", || (front.metric(full) == 2).then_some(()));
}

/// `switchyard_errors_total` of the `web` service for `reason`.
fn errors(front: &Front, reason: &str) -> u64 {
    front.metric(&format!("switchyard_errors_total{{service=\"web\",reason=\"{reason}\"}}"))
}

/// Runs `abusive` beside a well-behaved client on its own connection (ten requests
/// spread over two seconds): the abusive client's answer, after checking that the other
/// was served in full.
fn beside_a_good_client(front: &Front, python: &Path, abusive: Value) -> Answer {
    let good: Vec<Value> = (0..10).map(|i| get(&format!("/good{i}?size=1000&delay_ms=200"))).collect();
    let (bad, good) = std::thread::scope(|s| {
        let good = s.spawn(|| front.h3(python, json!({ "requests": good })));
        let bad = front.h3(python, abusive);
        (bad, good.join().expect("good client"))
    });
    for i in 0..10 {
        let r = good.result(i);
        assert_eq!((r.status(), r.body().len()), (200, 1000), "good request {i}");
    }
    bad
}

/// The abusive client was closed with `H3_EXCESSIVE_LOAD`, for `reason` (logged and
/// counted once), and a new connection is served.
fn closed_for(front: &Front, python: &Path, bad: &Answer, reason: &str) {
    assert_eq!(bad.0["closed"], 0x107, "closed with H3_EXCESSIVE_LOAD: {}", bad.0);
    assert!(bad.0["results"][0].get("error").is_some(), "{}", bad.0);
    wait_for("the reason in the log", || front.proxy.log().contains(reason).then_some(()));
    assert_eq!(errors(front, reason), 1, "{}", front.proxy.log());
    let after = front.h3(python, json!({ "requests": [get("/after?size=10")] }));
    assert_eq!(after.result(0).status(), 200);
}

#[test]
fn a_control_stream_flood_closes_the_offender_only() {
    let Some(python) = python() else { return };
    let origin = Origin::start("main");
    let front =
        Front::start_with_admin(&[("main", &[origin.addr], "")], "http3 = { enabled = true, max_control_frames = 50 }");
    // Reserved frame types must be ignored (RFC 9114 7.2.8): each costs the server a
    // parse and nothing tells the client to stop.
    let plan = json!({ "control_flood": 400, "flood_pause": 0.5, "requests": [get("/late?size=10")] });
    let bad = beside_a_good_client(&front, &python, plan);
    closed_for(&front, &python, &bad, "control-frame-flood");
    // A client within the limit is not disturbed.
    let calm = front.h3(&python, json!({ "control_flood": 20, "requests": [get("/calm?size=10")] }));
    assert_eq!((calm.result(0).status(), calm.0["closed"].as_u64()), (200, Some(0)), "{}", calm.0);
}

#[test]
fn a_unidirectional_stream_flood_closes_the_offender_only() {
    let Some(python) = python() else { return };
    let origin = Origin::start("main");
    let front =
        Front::start_with_admin(&[("main", &[origin.addr], "")], "http3 = { enabled = true, max_control_frames = 50 }");
    // Streams of reserved types, each finished at once: quinn's limit on streams open at
    // once never binds, as each is gone before the next.
    let plan = json!({ "uni_flood": 200, "flood_pause": 0.5, "requests": [get("/late?size=10")] });
    let bad = beside_a_good_client(&front, &python, plan);
    closed_for(&front, &python, &bad, "uni-stream-flood");
}

#[test]
fn stopping_complete_requests_is_a_rapid_reset_and_drops_their_pipelines() {
    let Some(python) = python() else { return };
    let origin = Origin::start("main");
    let front = Front::start_with_admin(&[("main", &[origin.addr], "")], "http3 = { enabled = true, max_resets = 10 }");
    // Each request is complete (HEADERS with the stream's end) and waits on a slow
    // server when the client stops its response: only the stream's watch on
    // STOP_SENDING can tell, and it drops the pipeline at once.
    let plan = json!({
        "stop_streams": 40,
        "stop_path": "/slow?delay_ms=3000&size=10",
        "flood_pause": 0.5,
        "requests": [get("/late?size=10")],
    });
    let bad = beside_a_good_client(&front, &python, plan);
    closed_for(&front, &python, &bad, "rapid-reset");
}

#[test]
fn interim_responses_reach_the_client() {
    let Some(python) = python() else { return };
    let origin = Origin::start("main");
    let front = Front::start(&[("main", &[origin.addr], "")], "");
    let body: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
    let expect = json!({
        "method": "POST",
        "path": "/up?echo=1",
        "headers": [["expect", "100-continue"], ["content-length", body.len().to_string()]],
        "body_hex": hex(&body),
        "expect_continue": true,
    });
    let answer = front.h3(&python, json!({ "requests": [expect, get("/hinted?hints=1&size=50")] }));
    let echo = answer.result(0);
    assert_eq!((echo.status(), &echo.0["interim"]), (200, &json!([100])), "{}", echo.0);
    assert!(echo.body() == body, "the body came after the 100 and back whole");
    let hinted = answer.result(1);
    assert_eq!((hinted.status(), &hinted.0["interim"]), (200, &json!([103])), "{}", hinted.0);
    assert_eq!(hinted.body().len(), 50);
}

/// The request the origin saw, from its `/__origin/request` answer.
fn seen_header(reply: &Reply, name: &str) -> Option<String> {
    let seen: Value = serde_json::from_slice(&reply.body()).expect("the origin's JSON");
    Reply::find(&seen["headers"], name)
}

#[test]
fn early_data_serves_safe_requests_and_answers_others_too_early() {
    let Some(python) = python() else { return };
    let origin = Origin::start("main");
    let front = Front::start(&[("main", &[origin.addr], "")], "http3 = { enabled = true, early_data = true }");
    let post = json!({ "method": "POST", "path": "/p?echo=1", "body_hex": hex(b"twice?") });
    let plan = json!({
        "requests": [get("/first?size=10")],
        "early_requests": [get("/__origin/request"), post, get("/__origin/request?x=1")],
    });
    let answer = front.h3(&python, plan);
    assert_eq!(answer.result(0).status(), 200);
    // Each early request on its own resumed connection, sent with the first flight.
    assert_eq!(answer.0["resumed"], json!([true, true, true]), "{}", answer.0);
    assert_eq!(answer.0["early_accepted"], json!([true, true, true]), "{}", answer.0);
    let early = |i: usize| {
        let r = &answer.0["early_results"][i];
        assert!(r.get("error").is_none(), "early request {i}: {r}");
        Reply(r.clone())
    };
    for i in [0, 2] {
        assert_eq!(early(i).status(), 200);
        assert_eq!(
            seen_header(&early(i), "early-data").as_deref(),
            Some("1"),
            "forwarded with Early-Data: {}",
            answer.0
        );
    }
    let refused = early(1);
    assert_eq!(refused.status(), 425, "{}", refused.0);
    assert_eq!(origin.requests(), 3, "the POST never reached the origin");
}

#[test]
fn without_early_data_a_resumed_client_is_served_after_the_handshake() {
    let Some(python) = python() else { return };
    let origin = Origin::start("main");
    let front = Front::start(&[("main", &[origin.addr], "")], "");
    let post = json!({ "method": "POST", "path": "/p?echo=1", "body_hex": hex(b"once") });
    let plan = json!({ "requests": [get("/first?size=10")], "early_requests": [get("/__origin/request"), post] });
    let answer = front.h3(&python, plan);
    assert_eq!(answer.0["resumed"], json!([true, true]), "{}", answer.0);
    assert_eq!(answer.0["early_accepted"], json!([false, false]), "0-RTT is off by default: {}", answer.0);
    let seen = Reply(answer.0["early_results"][0].clone());
    assert_eq!((seen.status(), seen_header(&seen, "early-data")), (200, None));
    let post = Reply(answer.0["early_results"][1].clone());
    assert_eq!((post.status(), post.body()), (200, b"once".to_vec()));
}
