//! HTTP/2 towards clients, end to end: h2c with prior knowledge on an `http` service, every
//! stream through the same pipeline as HTTP/1.1 (rules, forwarding headers, access log), flow
//! control both ways, many streams on one connection, and the per-connection protections
//! (rapid reset, header list size, CONTINUATION flood) that close or refuse only what misbehaves.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use bytes::Bytes;
use common::{proxy_addr, simple_config, temp_dir, wait_for, Origin, Proxy};
use h2::client::SendRequest;
use h2::Reason;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

/// An h2c (prior knowledge) client connection; the connection task's result says how it ended.
async fn connect(addr: SocketAddr) -> (SendRequest<Bytes>, tokio::task::JoinHandle<Result<(), h2::Error>>) {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (client, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
    (client, tokio::spawn(conn))
}

/// Sends `req` with `body` (none: END_STREAM on the headers) and reads the whole response.
async fn send(
    client: &SendRequest<Bytes>,
    req: http::Request<()>,
    body: Option<Vec<u8>>,
) -> Result<(http::response::Parts, Vec<u8>), h2::Error> {
    let mut client = client.clone().ready().await?;
    let (response, mut stream) = client.send_request(req, body.is_none())?;
    if let Some(body) = body {
        // h2 buffers what the window does not take yet and sends it as it opens.
        stream.send_data(Bytes::from(body), true)?;
    }
    let (parts, mut recv) = response.await?.into_parts();
    let out = common::h2_body(&mut recv).await?;
    Ok((parts, out))
}

fn get(addr: SocketAddr, path: &str) -> http::Request<()> {
    http::Request::get(format!("http://{addr}{path}")).body(()).expect("request")
}

/// Values of request header `name` as the origin saw it (its `/__origin/request` JSON).
fn seen(body: &[u8], name: &str) -> Vec<String> {
    let json: serde_json::Value = serde_json::from_slice(body).expect("origin JSON");
    let headers = json["headers"].as_array().cloned().unwrap_or_default();
    headers
        .iter()
        .filter(|p| p[0].as_str().is_some_and(|n| n.eq_ignore_ascii_case(name)))
        .map(|p| p[1].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn h2c_get_runs_the_http1_pipeline_and_logs_http2() {
    let origin = Origin::start("main");
    let listen = proxy_addr();
    let log = temp_dir("h2-log").join("access.log");
    let extra = format!("\n[access_log]\npath = \"{}\"\nformat = \"json\"\n", log.display());
    let proxy = Proxy::start(&simple_config(listen, &[origin.addr], &extra), listen);
    runtime().block_on(async {
        let (client, _conn) = connect(listen).await;
        let req = http::Request::get(format!("http://{listen}/__origin/request"))
            .header("cookie", "a=1")
            .header("cookie", "b=2")
            .body(())
            .expect("request");
        let (parts, body) = send(&client, req, None).await.expect("response");
        assert_eq!(parts.status, 200, "{}", String::from_utf8_lossy(&body));
        assert_eq!(parts.headers.get("x-origin").map(|v| v.as_bytes()), Some(&b"main"[..]));
        assert!(parts.headers.get("connection").is_none());
        assert_eq!(seen(&body, "x-forwarded-for"), ["127.0.0.1"]);
        assert_eq!(seen(&body, "x-forwarded-proto"), ["http"]);
        assert_eq!(seen(&body, "host"), [listen.to_string()]);
        assert_eq!(seen(&body, "cookie"), ["a=1; b=2"]);
        assert!(seen(&body, "connection").is_empty());
    });
    let line = wait_for("the access log line", || std::fs::read_to_string(&log).ok().filter(|l| !l.is_empty()));
    assert!(line.contains("\"version\":\"HTTP/2\""), "{line}");
    assert!(line.contains("\"status\":200"), "{line}");
    drop(proxy);
}

#[test]
fn curl_with_prior_knowledge_speaks_http2() {
    let origin = Origin::start("main");
    let listen = proxy_addr();
    let _proxy = Proxy::start(&simple_config(listen, &[origin.addr], ""), listen);
    let out = std::process::Command::new("curl")
        .args(["-sS", "--http2-prior-knowledge", "-o", "/dev/null", "-w", "%{http_version} %{http_code}"])
        .arg(format!("http://{listen}/?size=5000"))
        .output();
    let Ok(out) = out else {
        eprintln!("curl not available: skipped");
        return;
    };
    assert_eq!(String::from_utf8_lossy(&out.stdout), "2 200", "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_1mib_upload_follows_the_png_rule_and_is_echoed_byte_exact() {
    let main = Origin::start("main");
    let images = Origin::start("images");
    let listen = proxy_addr();
    let config = format!(
        "{}\n[[pool]]\nname = \"images\"\nservers = [{{ address = \"{}\" }}]\n",
        simple_config(listen, &[main.addr], "rules = [{ path_suffix = \".png\", pool = \"images\" }]"),
        images.addr
    );
    let _proxy = Proxy::start(&config, listen);
    let body: Vec<u8> = (0..1024 * 1024u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    runtime().block_on(async {
        let (client, _conn) = connect(listen).await;
        // With a length (passed through) and without one (chunked towards the pipeline).
        for length in [true, false] {
            let mut req = http::Request::post(format!("http://{listen}/upload.png?echo=1"));
            if length {
                req = req.header("content-length", body.len());
            }
            let req = req.body(()).expect("request");
            let (parts, echoed) = send(&client, req, Some(body.clone())).await.expect("response");
            assert_eq!(parts.status, 200, "content-length {length}");
            assert_eq!(parts.headers.get("x-origin").map(|v| v.as_bytes()), Some(&b"images"[..]));
            assert!(echoed == body, "content-length {length}: echo differs ({} bytes back)", echoed.len());
        }
    });
    assert_eq!((main.requests(), images.requests()), (0, 2));
}

#[test]
fn many_concurrent_streams_share_one_connection() {
    let origin = Origin::start("main");
    let listen = proxy_addr();
    let _proxy = Proxy::start(&simple_config(listen, &[origin.addr], ""), listen);
    runtime().block_on(async {
        let (client, _conn) = connect(listen).await;
        let mut set = tokio::task::JoinSet::new();
        for i in 0..64u32 {
            let client = client.clone();
            set.spawn(async move {
                let size = 1000 + i;
                let (parts, body) = send(&client, get(listen, &format!("/s{i}?size={size}")), None).await?;
                Ok::<_, h2::Error>((parts.status, body.len(), size as usize))
            });
        }
        let mut done = 0;
        while let Some(r) = set.join_next().await {
            let (status, len, size) = r.expect("task").expect("stream");
            assert_eq!((status.as_u16(), len), (200, size));
            done += 1;
        }
        assert_eq!(done, 64);
    });
    assert_eq!(origin.requests(), 64);
}

#[test]
fn a_1mib_download_flows_through_the_client_window() {
    let origin = Origin::start("main");
    let listen = proxy_addr();
    let _proxy = Proxy::start(&simple_config(listen, &[origin.addr], ""), listen);
    runtime().block_on(async {
        let (client, _conn) = connect(listen).await;
        // The client's window is the protocol default (64 KiB): the body only arrives as it
        // releases capacity.
        let (parts, body) = send(&client, get(listen, "/big?size=1048576"), None).await.expect("response");
        assert_eq!((parts.status.as_u16(), body.len()), (200, 1024 * 1024));
        // Byte for byte what the origin sends: the payload went to the client's output by
        // reference, in 16 KiB frames between the frame headers, held as the window allowed.
        let direct = common::Client::connect(origin.addr).get("/big?size=1048576");
        assert!(body == direct.body, "the body differs from the origin's");
        // HEAD: headers only, END_STREAM with them.
        let head = http::Request::head(format!("http://{listen}/?size=500")).body(()).expect("request");
        let (parts, body) = send(&client, head, None).await.expect("response");
        assert_eq!((parts.status.as_u16(), body.len()), (200, 0));
    });
}

#[test]
fn a_rapid_reset_burst_closes_only_that_connection() {
    let origin = Origin::start("main");
    let listen = proxy_addr();
    let proxy = Proxy::start(&simple_config(listen, &[origin.addr], ""), listen);
    runtime().block_on(async {
        let (bystander, _bystander_conn) = connect(listen).await;
        let (attacker, attacker_conn) = connect(listen).await;
        let mut sent = 0;
        for _ in 0..2000 {
            let Ok(mut ready) = attacker.clone().ready().await else { break };
            let req = http::Request::post(format!("http://{listen}/")).body(()).expect("request");
            let Ok((_, mut stream)) = ready.send_request(req, false) else { break };
            stream.send_reset(Reason::CANCEL);
            sent += 1;
            // Paced by a full request after each reset: streams are accepted in order, so its
            // answer means the proxy has taken the reset stream too, and the proxy's own
            // count (`max_resets`, 200 per 10 s by default) is what trips, not h2's limit
            // on resets still waiting to be accepted (which a loaded machine could reach).
            if send(&attacker, get(listen, "/"), None).await.is_err() {
                break;
            }
        }
        let ended = tokio::time::timeout(Duration::from_secs(20), attacker_conn).await.expect("connection ends");
        let error = ended.expect("task").expect_err("closed with an error");
        assert_eq!(error.reason(), Some(Reason::ENHANCE_YOUR_CALM), "{error}");
        assert!(error.is_go_away(), "{error}");
        assert!(sent > 200, "GOAWAY after only {sent} resets");
        // The other connection is untouched.
        let (parts, _) = send(&bystander, get(listen, "/"), None).await.expect("bystander still served");
        assert_eq!(parts.status, 200);
    });
    assert!(proxy.log().contains("rapid-reset"), "{}", proxy.log());
}

#[test]
fn an_unpaced_reset_burst_is_cut_by_the_pending_accept_limit() {
    let origin = Origin::start("main");
    let listen = proxy_addr();
    let _proxy = Proxy::start(&simple_config(listen, &[origin.addr], ""), listen);
    runtime().block_on(async {
        let (attacker, attacker_conn) = connect(listen).await;
        for _ in 0..5000 {
            let Ok(mut ready) = attacker.clone().ready().await else { break };
            let req = http::Request::post(format!("http://{listen}/")).body(()).expect("request");
            let Ok((_, mut stream)) = ready.send_request(req, false) else { break };
            stream.send_reset(Reason::CANCEL);
            tokio::task::yield_now().await;
        }
        let ended = tokio::time::timeout(Duration::from_secs(20), attacker_conn).await.expect("connection ends");
        let error = ended.expect("task").expect_err("closed with an error");
        // The client may still be writing when the proxy closes: it can see its write fail
        // before it reads the GOAWAY.
        assert!(error.reason() == Some(Reason::ENHANCE_YOUR_CALM) || error.is_io(), "{error}");
        let (fresh, _conn) = connect(listen).await;
        let (parts, _) = send(&fresh, get(listen, "/"), None).await.expect("a new connection is served");
        assert_eq!(parts.status, 200);
    });
}

#[test]
fn a_header_list_over_the_limit_is_refused_on_its_stream_only() {
    let origin = Origin::start("main");
    let listen = proxy_addr();
    let _proxy = Proxy::start(&simple_config(listen, &[origin.addr], "limits = { max_header_bytes = 8192 }"), listen);
    runtime().block_on(async {
        let (client, _conn) = connect(listen).await;
        let (other, _other_conn) = connect(listen).await;
        let big = http::Request::get(format!("http://{listen}/"))
            .header("x-big", "a".repeat(12 * 1024))
            .body(())
            .expect("request");
        match send(&client, big, None).await {
            Ok((parts, _)) => assert_eq!(parts.status, 431),
            Err(e) => assert_eq!(e.reason(), Some(Reason::REFUSED_STREAM), "{e}"),
        }
        // Same connection, and another one: both still served.
        for c in [&client, &other] {
            let (parts, _) = send(c, get(listen, "/"), None).await.expect("still served");
            assert_eq!(parts.status, 200);
        }
    });
    assert_eq!(origin.requests(), 2);
}

// ---------------------------------------------------------------------------------------
// Raw frames, for what a well-behaved client library will not send
// ---------------------------------------------------------------------------------------

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 1;
const SETTINGS: u8 = 4;
const GOAWAY: u8 = 7;
const CONTINUATION: u8 = 9;
const END_STREAM: u8 = 1;
const END_HEADERS: u8 = 4;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// An HPACK block for `GET /` with `:authority` (static-table indices, one literal).
fn get_block(authority: &str) -> Vec<u8> {
    // :method GET, :scheme http, :path /, then :authority as a literal without indexing.
    let mut block = vec![0x82, 0x86, 0x84, 0x01, authority.len() as u8];
    block.extend_from_slice(authority.as_bytes());
    block
}

/// Reads frames until the connection ends (or `limit` passes); returns their (type, stream).
fn read_frames(stream: &mut TcpStream, limit: Duration) -> Vec<(u8, u32)> {
    stream.set_read_timeout(Some(limit)).expect("timeout");
    let mut data = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    while let Ok(n) = stream.read(&mut buf) {
        if n == 0 {
            break;
        }
        data.extend_from_slice(&buf[..n]);
    }
    let mut frames = Vec::new();
    let mut at = 0;
    while data.len() >= at + 9 {
        let len = (usize::from(data[at]) << 16) | (usize::from(data[at + 1]) << 8) | usize::from(data[at + 2]);
        let id = u32::from_be_bytes([data[at + 5], data[at + 6], data[at + 7], data[at + 8]]) & 0x7fff_ffff;
        frames.push((data[at + 3], id));
        at += 9 + len;
    }
    frames
}

#[test]
fn a_continuation_flood_is_cut_off_with_goaway() {
    let origin = Origin::start("main");
    let listen = proxy_addr();
    let _proxy = Proxy::start(&simple_config(listen, &[origin.addr], ""), listen);
    let mut s = TcpStream::connect(listen).expect("connect");
    s.write_all(PREFACE).expect("preface");
    s.write_all(&frame(SETTINGS, 0, 0, &[])).expect("settings");
    s.write_all(&frame(HEADERS, END_STREAM, 1, &get_block("x"))).expect("headers");
    // 16 KiB CONTINUATION frames that never end the header block: far past the 16 KiB list limit.
    let filler = frame(CONTINUATION, 0, 1, &[0u8; 16 * 1024]);
    for _ in 0..256 {
        if s.write_all(&filler).is_err() {
            break; // Closed by the proxy: expected.
        }
    }
    let frames = read_frames(&mut s, Duration::from_secs(10));
    assert!(frames.iter().any(|&(kind, _)| kind == GOAWAY), "{frames:?}");
    assert!(!frames.iter().any(|&(kind, id)| kind == HEADERS && id == 1), "{frames:?}");
    // Others are served.
    runtime().block_on(async {
        let (client, _conn) = connect(listen).await;
        let (parts, _) = send(&client, get(listen, "/"), None).await.expect("served");
        assert_eq!(parts.status, 200);
    });
}

#[test]
fn a_preface_split_across_reads_still_starts_http2() {
    let origin = Origin::start("main");
    let listen = proxy_addr();
    let _proxy = Proxy::start(&simple_config(listen, &[origin.addr], ""), listen);
    let mut s = TcpStream::connect(listen).expect("connect");
    let _ = s.set_nodelay(true);
    s.write_all(&PREFACE[..3]).expect("first bytes");
    std::thread::sleep(Duration::from_millis(50));
    s.write_all(&PREFACE[3..]).expect("rest of the preface");
    s.write_all(&frame(SETTINGS, 0, 0, &[])).expect("settings");
    s.write_all(&frame(HEADERS, END_STREAM | END_HEADERS, 1, &get_block("x"))).expect("headers");
    std::thread::sleep(Duration::from_millis(200));
    // GOAWAY(NO_ERROR) is fine too: the client never closes, so read what came within the limit.
    let frames = read_frames(&mut s, Duration::from_secs(2));
    assert!(frames.iter().any(|&(kind, id)| kind == HEADERS && id == 1), "{frames:?}");
}

#[test]
fn http1_still_works_on_the_same_listener_including_a_p_method() {
    let origin = Origin::start("main");
    let listen = proxy_addr();
    let proxy = Proxy::start(&simple_config(listen, &[origin.addr], ""), listen);
    assert_eq!(proxy.get("/").status, 200);
    // "P" could start the preface: the proxy waits for more, then serves HTTP/1.1.
    let mut c = proxy.connect();
    c.send(b"P").expect("send");
    std::thread::sleep(Duration::from_millis(50));
    c.send(b"OST /?echo=1 HTTP/1.1\r\nhost: t\r\ncontent-length: 2\r\n\r\nhi").expect("send");
    let r = c.read_response().expect("response");
    assert_eq!((r.status, r.text().as_str()), (200, "hi"));
}

#[test]
fn an_idle_connection_gets_a_graceful_goaway() {
    let origin = Origin::start("main");
    let listen = proxy_addr();
    let _proxy = Proxy::start(&simple_config(listen, &[origin.addr], "timeouts = { client_idle = \"1s\" }"), listen);
    runtime().block_on(async {
        let (client, conn) = connect(listen).await;
        let (parts, _) = send(&client, get(listen, "/"), None).await.expect("response");
        assert_eq!(parts.status, 200);
        let ended = tokio::time::timeout(Duration::from_secs(15), conn).await.expect("closed when idle");
        match ended.expect("task") {
            Ok(()) => {}
            Err(e) => assert_eq!(e.reason(), Some(Reason::NO_ERROR), "{e}"),
        }
    });
}

#[test]
fn a_drain_lets_the_stream_in_flight_finish() {
    let origin = Origin::start("main");
    let listen = proxy_addr();
    let mut proxy = Proxy::start(&simple_config(listen, &[origin.addr], ""), listen);
    runtime().block_on(async {
        let (client, conn) = connect(listen).await;
        let slow = {
            let client = client.clone();
            tokio::spawn(async move { send(&client, get(listen, "/?delay_ms=700&size=3000"), None).await })
        };
        wait_for_async(|| origin.requests() == 1).await;
        proxy.sigterm();
        let (parts, body) = slow.await.expect("task").expect("the stream in flight completes");
        assert_eq!((parts.status.as_u16(), body.len()), (200, 3000));
        let ended = tokio::time::timeout(Duration::from_secs(15), conn).await.expect("closed after the drain");
        if let Err(e) = ended.expect("task") {
            assert_eq!(e.reason(), Some(Reason::NO_ERROR), "{e}");
        }
    });
    assert!(proxy.wait_exit(Duration::from_secs(10)).is_some(), "{}", proxy.log());
}

/// An idle connection (no stream open) has nothing that polls its task but the worker's
/// notifications: a drain must reach it at once, not when `client_idle` or `drain_timeout`
/// (60 s here) would end it. With the connection's wait for the drain removed, it was seen
/// to end about 10 s after the signal, without GOAWAY, which the h2 client reports as a clean
/// end too: hence the bound of 5 s.
#[test]
fn an_idle_connection_gets_goaway_at_a_drain() {
    let origin = Origin::start("main");
    let listen = proxy_addr();
    let config = simple_config(listen, &[origin.addr], "timeouts = { client_idle = \"60s\" }")
        .replace("drain_timeout = \"5s\"", "drain_timeout = \"60s\"");
    let mut proxy = Proxy::start(&config, listen);
    runtime().block_on(async {
        let (client, conn) = connect(listen).await;
        for _ in 0..3 {
            let (parts, _) = send(&client, get(listen, "/"), None).await.expect("response");
            assert_eq!(parts.status, 200);
        }
        proxy.sigterm();
        let ended = tokio::time::timeout(Duration::from_secs(5), conn).await.expect("closed at the drain");
        if let Err(e) = ended.expect("task") {
            assert_eq!(e.reason(), Some(Reason::NO_ERROR), "{e}");
        }
    });
    assert!(proxy.wait_exit(Duration::from_secs(20)).is_some(), "{}", proxy.log());
}

/// A reload that keeps the service leaves an idle connection open; one that removes the service
/// closes it with a graceful GOAWAY.
#[test]
fn an_idle_connection_of_a_removed_service_gets_goaway_at_the_reload() {
    let origin = Origin::start("o");
    let (keep, gone) = (proxy_addr(), proxy_addr());
    let (both, only_keep) = common::keep_and_gone(keep, gone, origin.addr);
    let file = common::write_temp("h2-reload-remove", "switchyard.toml", &both);
    let proxy = Proxy::run_file(&file, keep);
    runtime().block_on(async {
        let (kept, kept_conn) = connect(keep).await;
        let (client, conn) = connect(gone).await;
        assert_eq!(send(&client, get(gone, "/"), None).await.expect("response").0.status, 200);
        assert_eq!(send(&kept, get(keep, "/"), None).await.expect("response").0.status, 200);
        // The same services again: both connections stay.
        std::fs::write(&file, &both).expect("rewrite");
        proxy.reload(1);
        assert_eq!(send(&client, get(gone, "/"), None).await.expect("after a reload").0.status, 200);
        std::fs::write(&file, only_keep).expect("rewrite");
        proxy.reload(2);
        let ended = tokio::time::timeout(Duration::from_secs(20), conn).await.expect("closed at the reload");
        if let Err(e) = ended.expect("task") {
            assert_eq!(e.reason(), Some(Reason::NO_ERROR), "{e}");
        }
        assert!(!kept_conn.is_finished(), "the kept service's connection stays open");
        assert_eq!(send(&kept, get(keep, "/"), None).await.expect("kept").0.status, 200);
    });
}

async fn wait_for_async(mut ready: impl FnMut() -> bool) {
    for _ in 0..1500 {
        if ready() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("condition never held");
}

/// `client_body` bounds a whole HTTP/1.1 body (slow POST); an HTTP/2 stream is bounded per read
/// by `client_idle` instead, so an upload that streams for longer than `client_body` (a gRPC
/// client stream, say) completes.
#[test]
fn an_upload_stream_may_last_longer_than_client_body() {
    let origin = Origin::start("main");
    let listen = proxy_addr();
    let config = simple_config(listen, &[origin.addr], "timeouts = { client_body = \"1s\", client_idle = \"5s\" }");
    let proxy = Proxy::start(&config, listen);
    runtime().block_on(async {
        let (client, _conn) = connect(listen).await;
        let mut client = client.ready().await.expect("ready");
        let req = http::Request::post(format!("http://{listen}/stream?echo=1")).body(()).expect("request");
        let (response, mut stream) = client.send_request(req, false).expect("send");
        // Eight pieces 300 ms apart: 2.4 s in all, each piece well within client_idle.
        let mut sent = Vec::new();
        for i in 0..8u8 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let piece = vec![b'a' + i; 1000];
            sent.extend_from_slice(&piece);
            stream.send_data(Bytes::from(piece), i == 7).expect("data");
        }
        let (parts, mut recv) = response.await.expect("response").into_parts();
        let echoed = common::h2_body(&mut recv).await.expect("body");
        assert_eq!(parts.status, 200, "{}", proxy.log());
        assert!(echoed == sent, "the whole stream is echoed ({} of {} bytes)", echoed.len(), sent.len());
    });
}

/// A server that answers every request on its connections with `103 Early Hints`, then a
/// `200`, on a thread per connection (the test binary's lifetime bounds them).
fn early_hints_server() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("address");
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut byte = [0u8; 1];
                while stream.read(&mut byte).is_ok_and(|n| n == 1) {
                    buf.push(byte[0]);
                    if buf.ends_with(b"\r\n\r\n") {
                        buf.clear();
                        let reply = b"HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n\
                                      HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if stream.write_all(reply).is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    addr
}

/// Interim responses reach the client, checked with curl (which prints them with `-v`):
/// over HTTP/1.1, and over HTTP/2 where the bridge sends them as informational HEADERS.
#[test]
fn early_hints_reach_curl_over_http1_and_http2() {
    let server = early_hints_server();
    let listen = proxy_addr();
    let proxy = Proxy::start(&simple_config(listen, &[server], ""), listen);
    for version in ["--http1.1", "--http2-prior-knowledge"] {
        let out = std::process::Command::new("curl").args(["-sv", version]).arg(format!("http://{listen}/")).output();
        let Ok(out) = out else {
            eprintln!("curl not available: skipped");
            return;
        };
        let (body, trace) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert_eq!(body, "ok", "{version}: {trace}\n{}", proxy.log());
        let interim = trace.lines().find(|l| l.starts_with("< HTTP/") && l.contains(" 103"));
        assert!(interim.is_some(), "{version}: no 103 seen by curl:\n{trace}");
        assert!(trace.contains("< link: </style.css>; rel=preload"), "{version}: {trace}");
    }
}

/// A server whose responses carry every connection-specific field HTTP/1.1 allows, a
/// chunked body with a strong validator, and fields for the rules to edit.
fn hop_by_hop_server() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("address");
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut byte = [0u8; 1];
                while stream.read(&mut byte).is_ok_and(|n| n == 1) {
                    buf.push(byte[0]);
                    if buf.ends_with(b"\r\n\r\n") {
                        buf.clear();
                        let body = "<p>hello</p>".repeat(200);
                        let reply = format!(
                            "HTTP/1.1 200 Fine\r\nConnection: X-Private, keep-alive\r\nX-Private: 1\r\n\
                             Keep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nUpgrade: h2c\r\n\
                             Content-Type: text/html\r\nETag: \"v1\"\r\nVary: Origin\r\nX-Drop: 1\r\n\
                             X-Replace: old\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
                            body.len()
                        );
                        if stream.write_all(reply.as_bytes()).is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    addr
}

/// A relayed response reaches an HTTP/2 client as the head writer lists it: the rules'
/// edits, persistence's cookie, compression's fields, and none of the connection-specific
/// fields (the `h2` client refuses a response that has one); the proxy's own answers too.
#[test]
fn heads_reach_http2_clients_edited_and_without_connection_fields() {
    let server = hop_by_hop_server();
    let listen = proxy_addr();
    let extra = "compression = true\nrules = [\n  { path = \"/own\", respond = \"own answer\" },\n  \
                 { path = \"/down\", pool = \"down\" },\n  \
                 { set_response_headers = { \"x-replace\" = \"new\" }, add_response_headers = { \"x-added\" = \"1\" }, \
                 remove_response_headers = [\"x-drop\"] },\n]\n";
    let config = simple_config(listen, &[server], extra)
        .replace("[[pool]]\nname = \"main\"\n", "[[pool]]\nname = \"main\"\npersistence = { cookie = \"SRV\" }\n");
    // A pool whose only server refuses connections.
    let closed = proxy_addr();
    let config = format!("{config}\n[[pool]]\nname = \"down\"\nservers = [{{ address = \"{closed}\" }}]\n");
    let proxy = Proxy::start(&config, listen);
    runtime().block_on(async {
        let (client, _conn) = connect(listen).await;
        let req = http::Request::get(format!("http://{listen}/page"))
            .header("accept-encoding", "gzip")
            .body(())
            .expect("request");
        let (parts, body) = send(&client, req, None).await.expect("a response the h2 client accepts");
        assert_eq!(parts.status, 200, "{}", proxy.log());
        let h = |name: &str| {
            parts.headers.get_all(name).iter().map(|v| v.to_str().unwrap_or("?").to_owned()).collect::<Vec<_>>()
        };
        for gone in [
            "connection",
            "keep-alive",
            "proxy-connection",
            "upgrade",
            "transfer-encoding",
            "x-private",
            "x-drop",
            "content-length",
        ] {
            assert!(h(gone).is_empty(), "{gone}: {:?}", parts.headers);
        }
        assert_eq!(h("x-replace"), ["new"]);
        assert_eq!(h("x-added"), ["1"]);
        assert_eq!(h("content-encoding"), ["gzip"]);
        assert_eq!(h("vary"), ["Origin, Accept-Encoding"]);
        assert_eq!(h("etag"), ["W/\"v1\""]);
        assert!(h("set-cookie").first().is_some_and(|c| c.starts_with("SRV=")), "{:?}", parts.headers);
        let mut html = String::new();
        flate2::read::GzDecoder::new(&body[..]).read_to_string(&mut html).expect("gzip body");
        assert_eq!(html, "<p>hello</p>".repeat(200));

        // The proxy's own answer: a rule's, and an error's.
        let (parts, body) = send(&client, get(listen, "/own"), None).await.expect("the rule's answer");
        assert_eq!((parts.status.as_u16(), &body[..]), (200, &b"own answer"[..]));
        assert_eq!(parts.headers.get("content-length").map(|v| v.as_bytes()), Some(&b"10"[..]));
        assert!(parts.headers.get("connection").is_none());
        let (parts, body) = send(&client, get(listen, "/down"), None).await.expect("the error's answer");
        assert_eq!(parts.status, 502, "{}", String::from_utf8_lossy(&body));
        assert_eq!(body, b"502 Bad Gateway\n");
        assert!(parts.headers.get("connection").is_none());
    });
}
