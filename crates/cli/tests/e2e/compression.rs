//! Response compression, end to end: the real proxy between a client and the origin simulator
//! (or a small hand-written server where the origin cannot say what a test needs). Every
//! encoded body is decoded with a real decoder (flate2, brotli, zstd, and curl's) and compared
//! byte for byte with the body fetched straight from the origin.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::Duration;

use common::{proxy_addr, simple_config, Client, Origin, Proxy, Response};

/// Decodes `body` of `encoding` ("gzip", "br", "zstd") with the libraries' own decoders.
fn decode(encoding: &str, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match encoding {
        "gzip" => {
            flate2::read::GzDecoder::new(body).read_to_end(&mut out).expect("gunzip");
        }
        "br" => {
            brotli::Decompressor::new(body, 4096).read_to_end(&mut out).expect("brotli decode");
        }
        "zstd" => out = zstd::stream::decode_all(body).expect("zstd decode"),
        other => panic!("unexpected encoding {other}"),
    }
    out
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).expect("gzip");
    e.finish().expect("gzip")
}

/// The body the origin serves for `path`, fetched without the proxy.
fn direct(origin: &Origin, path: &str) -> Vec<u8> {
    let r = Client::connect(origin.addr).get(path);
    assert_eq!(r.status, 200);
    r.body
}

fn get_with(proxy: &Proxy, path: &str, accept: &str) -> Response {
    Client::connect(proxy.addr).request("GET", path, &[("accept-encoding", accept)])
}

fn compressing_proxy(origin: &Origin, compression: &str) -> Proxy {
    let listen = proxy_addr();
    Proxy::start(&simple_config(listen, &[origin.addr], compression), listen)
}

/// Asserts `r` is encoded with `encoding`, framed by chunks, and decodes to `want`.
fn assert_encoded(r: &Response, encoding: &str, want: &[u8]) {
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-encoding"), Some(encoding), "{:?}", r.headers);
    assert_eq!(r.header("content-length"), None, "an encoded body has no length up front");
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    let vary = r.header("vary").unwrap_or("").to_ascii_lowercase();
    assert!(vary.contains("accept-encoding"), "{:?}", r.headers);
    let decoded = decode(encoding, &r.body);
    assert!(decoded == want, "{encoding}: decoded {} bytes, want {} (byte-exact)", decoded.len(), want.len());
    // The origin's text shrinks to about a quarter once there is enough of it.
    let most = if want.len() >= 64 * 1024 { want.len() / 2 } else { want.len() };
    assert!(r.body.len() < most, "{encoding}: {} bytes for {}", r.body.len(), want.len());
}

fn assert_identity(r: &Response, want: &[u8]) {
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-encoding"), None, "{:?}", r.headers);
    assert!(r.body == want, "identity body differs");
}

#[test]
fn each_encoding_round_trips_byte_exactly() {
    let origin = Origin::start("main");
    let proxy = compressing_proxy(&origin, "compression = true");
    for size in [1000, 128 * 1024 + 7, 300_000] {
        let path = format!("/page?compressible=1&size={size}");
        let want = direct(&origin, &path);
        assert_eq!(want.len(), size);
        for encoding in ["gzip", "br", "zstd"] {
            assert_encoded(&get_with(&proxy, &path, encoding), encoding, &want);
        }
    }
    // Keep-alive survives an encoded response: two on one connection.
    let path = "/page?compressible=1&size=5000";
    let want = direct(&origin, path);
    let mut client = Client::connect(proxy.addr);
    for encoding in ["br", "gzip"] {
        let r = client.request("GET", path, &[("accept-encoding", encoding)]);
        assert_encoded(&r, encoding, &want);
    }
}

#[test]
fn curl_decodes_every_encoding() {
    let origin = Origin::start("main");
    let proxy = compressing_proxy(&origin, "compression = true");
    let path = "/page?compressible=1&size=70000";
    let want = direct(&origin, path);
    for encoding in ["gzip", "br", "zstd"] {
        let out = std::process::Command::new("curl")
            .args(["-sS", "--compressed", "-D", "/dev/stderr", "-H"])
            .arg(format!("accept-encoding: {encoding}"))
            .arg(format!("http://{}{path}", proxy.addr))
            .output()
            .expect("run curl");
        let headers = String::from_utf8_lossy(&out.stderr).to_ascii_lowercase();
        assert!(out.status.success(), "curl failed: {headers}");
        assert!(headers.contains(&format!("content-encoding: {encoding}")), "{headers}");
        assert!(out.stdout == want, "curl's {encoding} decode differs ({} bytes)", out.stdout.len());
    }
}

#[test]
fn accept_encoding_q_values_and_preference_are_respected() {
    let origin = Origin::start("main");
    let proxy = compressing_proxy(&origin, "compression = { algorithms = [\"zstd\", \"br\", \"gzip\"] }");
    let path = "/page?compressible=1&size=4000";
    let want = direct(&origin, path);
    // Equal q: the configured order decides.
    assert_encoded(&get_with(&proxy, path, "gzip, deflate, br, zstd"), "zstd", &want);
    assert_encoded(&get_with(&proxy, path, "gzip, br"), "br", &want);
    // A higher q wins over the order.
    assert_encoded(&get_with(&proxy, path, "zstd;q=0.5, br;q=0.6, gzip;q=0.9"), "gzip", &want);
    // q=0 refuses.
    assert_encoded(&get_with(&proxy, path, "zstd;q=0, br;q=0, gzip"), "gzip", &want);
    assert_identity(&get_with(&proxy, path, "gzip;q=0"), &want);
    assert_encoded(&get_with(&proxy, path, "*, zstd;q=0"), "br", &want);
    assert_identity(&get_with(&proxy, path, "*;q=0, identity"), &want);
    // identity preferred, or nothing usable, or no header at all: sent as is, with its length.
    let r = get_with(&proxy, path, "identity");
    assert_identity(&r, &want);
    assert_eq!(r.header("content-length"), Some("4000"));
    assert_identity(&get_with(&proxy, path, "gzip;q=0.5, identity"), &want);
    assert_identity(&get_with(&proxy, path, "deflate, compress"), &want);
    assert_identity(&Client::connect(proxy.addr).get(path), &want);
}

#[test]
fn sizes_types_and_rules_decide_what_is_compressed() {
    let origin = Origin::start("main");
    let listen = proxy_addr();
    let extra = "compression = { min_size = 1000, max_size = \"64KiB\", algorithms = [\"gzip\"] }\n\
                 rules = [ { path_prefix = \"/raw\", compress = false } ]";
    let proxy = Proxy::start(&simple_config(listen, &[origin.addr], extra), listen);
    let small = "/page?compressible=1&size=999";
    let want = direct(&origin, small);
    assert_identity(&get_with(&proxy, small, "gzip"), &want);
    // A client that refuses identity gets even a small body encoded.
    assert_encoded(&get_with(&proxy, small, "gzip, identity;q=0"), "gzip", &want);
    let at_min = "/page?compressible=1&size=1000";
    assert_encoded(&get_with(&proxy, at_min, "gzip"), "gzip", &direct(&origin, at_min));
    let large = "/page?compressible=1&size=65537";
    assert_identity(&get_with(&proxy, large, "gzip"), &direct(&origin, large));
    // application/octet-stream is not in the default types.
    let random = "/page?size=5000";
    assert_identity(&get_with(&proxy, random, "gzip"), &direct(&origin, random));
    // The rule's compress = false.
    let raw = "/raw/page?compressible=1&size=5000";
    assert_identity(&get_with(&proxy, raw, "gzip"), &direct(&origin, raw));
}

#[test]
fn head_and_bodiless_statuses_are_untouched() {
    let origin = Origin::start("main");
    let proxy = compressing_proxy(&origin, "compression = true");
    let path = "/page?compressible=1&size=5000";
    let r = Client::connect(proxy.addr).request("HEAD", path, &[("accept-encoding", "gzip")]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-encoding"), None, "{:?}", r.headers);
    assert_eq!(r.header("content-length"), Some("5000"));
    let r = get_with(&proxy, "/page?compressible=1&size=5000&status=204", "gzip");
    assert_eq!(r.status, 204);
    assert_eq!(r.header("content-encoding"), None, "{:?}", r.headers);
    // 404 pages are compressed like any other response with a body.
    let path = "/page?compressible=1&size=5000&status=404";
    let r = get_with(&proxy, path, "gzip");
    assert_eq!(r.status, 404);
    assert_eq!(r.header("content-encoding"), Some("gzip"));
}

#[test]
fn large_bodies_stream_without_a_length() {
    let origin = Origin::start("main");
    let proxy = compressing_proxy(&origin, "compression = { algorithms = [\"gzip\"] }");
    let size = 8 * 1024 * 1024;
    let path = format!("/big?compressible=1&size={size}");
    let want = direct(&origin, &path);
    let mut client = Client::connect(proxy.addr);
    client.send(format!("GET {path} HTTP/1.1\r\nhost: t\r\naccept-encoding: gzip\r\n\r\n").as_bytes()).expect("send");
    let mut decoder = flate2::write::GzDecoder::new(Vec::with_capacity(size));
    let mut encoded = 0;
    let r = client
        .read_response_with(false, &mut |piece| {
            encoded += piece.len();
            decoder.write_all(piece).expect("gunzip");
        })
        .expect("response");
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.header("content-length"), None);
    let decoded = decoder.finish().expect("gunzip end");
    assert!(decoded == want, "8 MiB decoded byte-exact");
    assert!(encoded < size / 2, "{encoded} bytes");
}

#[test]
fn http10_clients_get_the_encoded_body_until_close() {
    let origin = Origin::start("main");
    let proxy = compressing_proxy(&origin, "compression = true");
    let path = "/page?compressible=1&size=20000";
    let want = direct(&origin, path);
    let mut client = Client::connect(proxy.addr);
    let request = format!("GET {path} HTTP/1.0\r\nhost: t\r\nconnection: keep-alive\r\naccept-encoding: br\r\n\r\n");
    client.send(request.as_bytes()).expect("send");
    let r = client.read_response().expect("response");
    assert_eq!(r.header("content-encoding"), Some("br"));
    assert_eq!(r.header("transfer-encoding"), None, "HTTP/1.0 knows no chunks");
    assert!(r.closes(), "{:?}", r.headers);
    assert!(decode("br", &r.body) == want);
}

/// Fetches `path` over one h2c connection once per encoding of `encodings`, asking for that
/// encoding; asserts each answer is so encoded, without a length, and decodes to `want`.
fn assert_h2_encoded(proxy: &Proxy, path: &str, encodings: &[&str], want: &[u8]) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(proxy.addr).await.expect("connect");
        let (client, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
        tokio::spawn(conn);
        for &encoding in encodings {
            let req = http::Request::get(format!("http://{}{path}", proxy.addr))
                .header("accept-encoding", encoding)
                .body(())
                .expect("request");
            let mut client = client.clone().ready().await.expect("ready");
            let (response, _) = client.send_request(req, true).expect("send");
            let (parts, mut recv) = response.await.expect("response").into_parts();
            let body = common::h2_body(&mut recv).await.expect("body");
            assert_eq!(parts.status, 200);
            assert_eq!(parts.headers.get("content-encoding").map(|v| v.as_bytes()), Some(encoding.as_bytes()));
            assert!(parts.headers.get("content-length").is_none());
            assert!(decode(encoding, &body) == want, "h2 {encoding} decode");
            assert!(body.len() < want.len() / 2, "{encoding}: {} bytes for {}", body.len(), want.len());
        }
    });
}

#[test]
fn http2_clients_get_encoded_bodies() {
    let origin = Origin::start("main");
    let proxy = compressing_proxy(&origin, "compression = true");
    let path = "/page?compressible=1&size=100000";
    let want = direct(&origin, path);
    assert_h2_encoded(&proxy, path, &["br", "zstd", "gzip"], &want);
}

#[test]
fn bodies_from_an_http2_pool_are_encoded_for_http1_and_http2_clients() {
    // The server's body comes as HTTP/2 frames, straight into the coder; the coder's output
    // goes to an HTTP/1.1 client in chunks, to an HTTP/2 client as DATA frames.
    let origin = Origin::start("h2c");
    let listen = proxy_addr();
    let config = simple_config(listen, &[origin.addr], "compression = true") + "protocol = \"h2\"\n";
    let proxy = Proxy::start(&config, listen);
    let path = "/page?compressible=1&size=300000";
    let want = direct(&origin, path);
    for encoding in ["gzip", "br", "zstd"] {
        let r = get_with(&proxy, path, encoding);
        assert_encoded(&r, encoding, &want);
        assert_eq!(r.origin(), "h2c");
    }
    assert_h2_encoded(&proxy, path, &["gzip", "br", "zstd"], &want);
}

/// A one-request-per-connection HTTP/1.1 server whose answer is chosen by the request path;
/// each answer is `(head without the final CRLF, body pieces)`. Between pieces it waits for
/// a message on `gate` when there is one.
struct Handmade {
    addr: SocketAddr,
}

type Answer = (String, Vec<Vec<u8>>);

impl Handmade {
    fn start(answer: fn(&str) -> Answer, gate: Option<mpsc::Receiver<()>>) -> Handmade {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let gate = std::sync::Mutex::new(gate);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    continue;
                }
                let path = line.split(' ').nth(1).unwrap_or("/").to_string();
                loop {
                    let mut header = String::new();
                    if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
                        break;
                    }
                }
                let (head, pieces) = answer(&path);
                let _ = stream.write_all(format!("{head}connection: close\r\n\r\n").as_bytes());
                for (i, piece) in pieces.iter().enumerate() {
                    if i > 0 {
                        if let Some(gate) = gate.lock().expect("gate").as_ref() {
                            let _ = gate.recv_timeout(Duration::from_secs(20));
                        }
                    }
                    let _ = stream.write_all(piece);
                    let _ = stream.flush();
                }
            }
        });
        Handmade { addr }
    }
}

fn text(n: usize) -> Vec<u8> {
    (0..n).map(|i| b"a compressible line of text for the handmade server\n"[i % 52]).collect()
}

fn handmade_answer(path: &str) -> Answer {
    let body = text(10_000);
    let len = body.len();
    match path {
        "/encoded" => {
            let gz = gzip(&body);
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-encoding: gzip\r\ncontent-length: {}\r\n",
                gz.len()
            );
            (head, vec![gz])
        }
        "/etag" => {
            let head = format!("HTTP/1.1 200 OK\r\ncontent-type: text/html\r\netag: \"v1\"\r\nvary: Origin\r\ncontent-length: {len}\r\n");
            (head, vec![body])
        }
        "/weak" => {
            let head = format!("HTTP/1.1 200 OK\r\ncontent-type: text/html\r\netag: W/\"v2\"\r\nvary: accept-encoding\r\ncontent-length: {len}\r\n");
            (head, vec![body])
        }
        "/partial" => {
            let head = format!("HTTP/1.1 206 Partial Content\r\ncontent-type: text/html\r\ncontent-range: bytes 0-{}/20000\r\ncontent-length: {len}\r\n", len - 1);
            (head, vec![body])
        }
        "/no-transform" => {
            let head = format!("HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncache-control: max-age=60, no-transform\r\ncontent-length: {len}\r\n");
            (head, vec![body])
        }
        _ => {
            // Chunked, in two pieces: the second only when the gate opens.
            let piece = |data: &[u8]| {
                let mut c = format!("{:x}\r\n", data.len()).into_bytes();
                c.extend_from_slice(data);
                c.extend_from_slice(b"\r\n");
                c
            };
            let mut last = piece(&body);
            last.extend_from_slice(b"0\r\n\r\n");
            (
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n".into(),
                vec![piece(&body), last],
            )
        }
    }
}

fn handmade_proxy(server: &Handmade, compression: &str) -> Proxy {
    let listen = proxy_addr();
    Proxy::start(&simple_config(listen, &[server.addr], compression), listen)
}

#[test]
fn encoded_ranged_and_no_transform_responses_pass_unchanged() {
    let server = Handmade::start(handmade_answer, None);
    let proxy = handmade_proxy(&server, "compression = true");
    let body = text(10_000);
    // Already gzip: passed on as is, never compressed twice.
    let r = get_with(&proxy, "/encoded", "br, gzip");
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.headers_named("content-encoding").len(), 1);
    assert!(r.body == gzip(&body), "the server's gzip bytes, unchanged");
    let r = get_with(&proxy, "/partial", "gzip");
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-encoding"), None);
    assert!(r.body == body);
    let r = get_with(&proxy, "/no-transform", "gzip");
    assert_eq!(r.header("content-encoding"), None);
    assert!(r.body == body);
}

#[test]
fn vary_is_appended_and_strong_etags_are_weakened() {
    let server = Handmade::start(handmade_answer, None);
    let proxy = handmade_proxy(&server, "compression = true");
    let body = text(10_000);
    let r = get_with(&proxy, "/etag", "gzip");
    assert_encoded(&r, "gzip", &body);
    assert_eq!(r.header("etag"), Some("W/\"v1\""));
    assert_eq!(r.headers_named("vary"), vec!["Origin, Accept-Encoding"]);
    let r = get_with(&proxy, "/weak", "zstd");
    assert_encoded(&r, "zstd", &body);
    assert_eq!(r.header("etag"), Some("W/\"v2\""), "a weak tag stays as it is");
    assert_eq!(r.headers_named("vary"), vec!["accept-encoding"], "listed once");
    // Not compressed: the strong tag stays.
    let r = get_with(&proxy, "/etag", "identity");
    assert_eq!(r.header("etag"), Some("\"v1\""));
}

#[test]
fn decompress_decodes_gzip_for_clients_without_it() {
    let server = Handmade::start(handmade_answer, None);
    let proxy = handmade_proxy(&server, "compression = { decompress = true }");
    let body = text(10_000);
    let r = get_with(&proxy, "/encoded", "br;q=0, identity");
    assert_eq!(r.header("content-encoding"), None, "{:?}", r.headers);
    assert_eq!(r.header("content-length"), None);
    assert!(r.body == body, "decoded to the original bytes");
    let r = Client::connect(proxy.addr).get("/encoded");
    assert!(r.body == body, "no Accept-Encoding at all: decoded too");
    let r = get_with(&proxy, "/encoded", "gzip");
    assert_eq!(r.header("content-encoding"), Some("gzip"), "a gzip client gets gzip");
}

#[test]
fn the_first_compressed_bytes_leave_before_the_server_finishes() {
    let (open, gate) = mpsc::channel();
    let server = Handmade::start(handmade_answer, Some(gate));
    let proxy = handmade_proxy(&server, "compression = { algorithms = [\"gzip\"] }");
    let body = text(10_000);
    let mut stream = TcpStream::connect(proxy.addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
    stream.write_all(b"GET /slow HTTP/1.1\r\nhost: t\r\naccept-encoding: gzip\r\n\r\n").expect("send");
    // The head and a first chunk arrive while the server still holds its second piece.
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).expect("head");
        if line == "\r\n" || line.is_empty() {
            break;
        }
        head.push_str(&line);
    }
    assert!(head.contains("content-encoding: gzip"), "{head}");
    let mut read_chunk = || {
        let mut size_line = String::new();
        reader.read_line(&mut size_line).expect("chunk size");
        let size = usize::from_str_radix(size_line.trim(), 16).expect("hex size");
        let mut chunk = vec![0; size + 2];
        reader.read_exact(&mut chunk).expect("chunk");
        chunk.truncate(size);
        chunk
    };
    // Each chunk is sync-flushed gzip: what arrived so far decodes to what the server sent
    // so far, the whole first piece, while the server holds back the second.
    let mut first = Vec::new();
    let mut partial = flate2::write::GzDecoder::new(Vec::new());
    while partial.get_ref().len() < body.len() {
        let chunk = read_chunk();
        assert!(!chunk.is_empty(), "the body ended early");
        partial.write_all(&chunk).expect("partial gunzip");
        partial.flush().expect("flush");
        first.extend_from_slice(&chunk);
    }
    assert!(partial.get_ref()[..] == body[..], "the first piece, decoded, before the server went on");
    open.send(()).expect("open the gate");
    loop {
        let chunk = read_chunk();
        if chunk.is_empty() {
            break;
        }
        first.extend_from_slice(&chunk);
    }
    let mut want = body.clone();
    want.extend_from_slice(&body);
    assert!(decode("gzip", &first) == want, "the whole body, byte-exact");
}

#[test]
fn compression_counters_reach_the_metrics() {
    let origin = Origin::start("main");
    let listen = proxy_addr();
    let admin = proxy_addr();
    let config =
        format!("{}\n[admin]\nlisten = \"{admin}\"\n", simple_config(listen, &[origin.addr], "compression = true"));
    let proxy = Proxy::start(&config, listen);
    let r = get_with(&proxy, "/page?compressible=1&size=50000", "gzip");
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    common::wait_for("compression counters", || {
        let host = admin.to_string();
        let body =
            Client::connect(admin).request("GET", "/metrics", &[("host", &host), ("connection", "close")]).text();
        let has = |line: &str| body.lines().any(|l| l.starts_with(line));
        (has("switchyard_compression_input_bytes_total{service=\"web\",algorithm=\"gzip\"} 50000")
            && has("switchyard_compression_output_bytes_total{service=\"web\",algorithm=\"gzip\"}"))
        .then_some(())
    });
}
