//! Function checks: before a target is measured in a setup, a few plain requests prove it
//! does what the test is about (the `.png` rule reaches `images`, cookies are inserted
//! and stick, responses come back compressed with the test's coding and decode to the
//! origin's bytes, repeated requests are cache hits, TLS handshakes
//! complete, each request reaches the access log file). A failed check turns the
//! target's cells of that setup into `Failed`.
//!
//! The client here is deliberately tiny and blocking: one request per connection,
//! `connection: close`, the whole answer read to EOF, then parsed.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context};

use super::plan::{Setup, TargetKind};

/// A parsed HTTP response.
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Headers, names lower-case.
    pub headers: Vec<(String, String)>,
    /// Body after de-chunking (still content-encoded).
    pub body: Vec<u8>,
}

impl Response {
    /// First value of a header (name lower-case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// `GET path` on a new connection with `connection: close`.
pub fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> io::Result<Response> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(3))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut req = format!("GET {path} HTTP/1.1\r\nhost: bench\r\nconnection: close\r\n");
    for (n, v) in headers {
        req += &format!("{n}: {v}\r\n");
    }
    req += "\r\n";
    s.write_all(req.as_bytes())?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    parse_response(&buf)
}

/// Parses a complete response (head and body as received up to EOF).
pub fn parse_response(buf: &[u8]) -> io::Result<Response> {
    let bad = |m: &str| io::Error::new(io::ErrorKind::InvalidData, m.to_string());
    let mut hs = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Response::new(&mut hs);
    let head = match r.parse(buf).map_err(|e| bad(&e.to_string()))? {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial => return Err(bad("incomplete response head")),
    };
    let headers: Vec<(String, String)> = r
        .headers
        .iter()
        .map(|h| (h.name.to_ascii_lowercase(), String::from_utf8_lossy(h.value).into_owned()))
        .collect();
    let rest = &buf[head..];
    let chunked = headers.iter().any(|(n, v)| n == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked"));
    let body = if chunked {
        dechunk(rest).ok_or_else(|| bad("bad chunked body"))?
    } else if let Some((_, v)) = headers.iter().find(|(n, _)| n == "content-length") {
        let n: usize = v.trim().parse().map_err(|_| bad("bad content-length"))?;
        ensure_len(rest, n).map_err(|m| bad(&m))?.to_vec()
    } else {
        rest.to_vec()
    };
    Ok(Response { status: r.code.unwrap_or(0), headers, body })
}

fn ensure_len(rest: &[u8], n: usize) -> Result<&[u8], String> {
    rest.get(..n).ok_or_else(|| format!("body truncated: {} of {n} bytes", rest.len()))
}

/// Decodes a chunked body (trailers ignored).
pub fn dechunk(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = b.windows(2).position(|w| w == b"\r\n")?;
        let line = std::str::from_utf8(&b[..eol]).ok()?;
        let size = usize::from_str_radix(line.split(';').next()?.trim(), 16).ok()?;
        b = &b[eol + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(b.get(..size)?);
        b = b.get(size + 2..)?;
    }
}

/// Requests an origin has counted (`/__origin/stats`, not itself counted).
pub fn origin_requests(port: u16) -> anyhow::Result<u64> {
    let r = get(SocketAddr::from(([127, 0, 0, 1], port)), "/__origin/stats", &[])?;
    let v: serde_json::Value = serde_json::from_slice(&r.body)?;
    v["requests"].as_u64().ok_or_else(|| anyhow!("no `requests` in origin stats"))
}

fn ok_from(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> anyhow::Result<Response> {
    let r = get(addr, path, headers).with_context(|| format!("GET {path}"))?;
    ensure!(r.status == 200, "GET {path}: status {}", r.status);
    Ok(r)
}

fn origin_of(r: &Response) -> String {
    r.header("x-origin").unwrap_or("(none)").to_string()
}

/// The `.png` rule and round robin over `main`.
fn check_routing(addr: SocketAddr) -> anyhow::Result<()> {
    let png = origin_of(&ok_from(addr, "/img/logo.png?size=128", &[])?);
    ensure!(png == "images-c", "/img/logo.png reached `{png}`, expected images-c (the .png rule)");
    let mut seen = Vec::new();
    for _ in 0..6 {
        let o = origin_of(&ok_from(addr, "/index.html?size=128", &[])?);
        ensure!(o == "main-a" || o == "main-b", "/index.html reached `{o}`, expected main-a or main-b");
        if !seen.contains(&o) {
            seen.push(o);
        }
    }
    ensure!(seen.len() == 2, "6 requests to pool main reached only {seen:?} (round robin expected both)");
    Ok(())
}

/// Lines in a file; 0 while it does not exist.
fn lines_in(path: &Path) -> usize {
    std::fs::read(path).map_or(0, |b| b.iter().filter(|c| **c == b'\n').count())
}

/// The routing check, and each of its requests written to the access log file within
/// 3 s (switchyard writes at least every 100 ms, the peers at once). A target that
/// accepts the configuration but logs nothing would otherwise measure as free logging.
fn check_logging(addr: SocketAddr, log: &Path) -> anyhow::Result<()> {
    const REQUESTS: usize = 7;
    let before = lines_in(log);
    check_routing(addr)?;
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let logged = lines_in(log).saturating_sub(before);
        if logged >= REQUESTS {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "{logged} of {REQUESTS} requests reached the access log {} within 3 s",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = std::fs::read_to_string(log).unwrap_or_default();
    ensure!(text.contains("/index.html"), "the access log {} does not name the requests", log.display());
    Ok(())
}

/// A cookie is inserted, and requests carrying it stick to one server.
fn check_cookie(addr: SocketAddr) -> anyhow::Result<()> {
    let first = ok_from(addr, "/index.html?size=128", &[])?;
    let set = first.header("set-cookie").ok_or_else(|| anyhow!("no set-cookie in the response"))?;
    let pair = set.split(';').next().unwrap_or_default().trim().to_string();
    ensure!(pair.starts_with("SRV="), "set-cookie `{set}` is not the SRV cookie");
    let server = origin_of(&first);
    for _ in 0..6 {
        let o = origin_of(&ok_from(addr, "/index.html?size=128", &[("cookie", &pair)])?);
        ensure!(o == server, "a request with `{pair}` reached {o}, not {server}: no persistence");
    }
    Ok(())
}

/// Decodes a body of content coding `coding` (`gzip`, `br`, `zstd`).
pub fn decode(coding: &str, body: &[u8]) -> io::Result<Vec<u8>> {
    let mut plain = Vec::new();
    match coding {
        "gzip" => {
            flate2::read::GzDecoder::new(body).read_to_end(&mut plain)?;
        }
        "br" => {
            brotli::Decompressor::new(body, 4096).read_to_end(&mut plain)?;
        }
        "zstd" => plain = zstd::stream::decode_all(body)?,
        other => {
            return Err(io::Error::new(io::ErrorKind::Unsupported, format!("no decoder for `{other}`")));
        }
    }
    Ok(plain)
}

/// The sizes the compression check asks for: the two ends of the test's sweep.
const COMPRESSION_CHECK_SIZES: [u64; 2] = [1024, 128 * 1024];

/// Compressible HTML asked for with `accept-encoding: CODING` comes back with
/// `content-encoding: CODING`, smaller, and decodes to exactly the origin's bytes (fetched
/// from `origin` directly).
fn check_compression(addr: SocketAddr, origin: u16, coding: &str) -> anyhow::Result<()> {
    for size in COMPRESSION_CHECK_SIZES {
        let path = format!("/page.html?size={size}&compressible=1");
        let original = ok_from(SocketAddr::from(([127, 0, 0, 1], origin)), &path, &[])?.body;
        ensure!(original.len() as u64 == size, "the origin sent {} bytes for {path}", original.len());
        let r = ok_from(addr, &path, &[("accept-encoding", coding)])?;
        let enc = r.header("content-encoding").unwrap_or("(none)");
        ensure!(enc.trim().eq_ignore_ascii_case(coding), "{path}: content-encoding `{enc}`, expected {coding}");
        let plain = decode(coding, &r.body).with_context(|| format!("{path}: decoding {coding}"))?;
        ensure!(
            plain == original,
            "{path}: the {coding} body decodes to {} bytes that differ from the origin's {size}",
            plain.len()
        );
        ensure!(r.body.len() < original.len(), "{path}: {} compressed bytes for {size}", r.body.len());
    }
    Ok(())
}

/// The origin requests counted by every origin in `origins`.
pub fn origins_requests(origins: &[u16]) -> anyhow::Result<u64> {
    origins.iter().map(|p| origin_requests(*p)).sum()
}

/// Repeated requests for a cacheable object of `size` bytes do not reach the origins
/// (their request counts stay the same over `hits` requests after a first one, a miss
/// that fills the cache). `tag` keeps the object apart from those of the load runs.
pub fn check_cache_hits(addr: SocketAddr, origins: &[u16], size: u64, hits: u32, tag: &str) -> anyhow::Result<()> {
    let path = format!("/cached.html?size={size}&cache=3600&{tag}=1");
    let first = ok_from(addr, &path, &[])?;
    ensure!(first.body.len() as u64 == size, "{path}: {} bytes, expected {size}", first.body.len());
    // Some caches store the object once the response is complete: give it a moment.
    std::thread::sleep(Duration::from_millis(50));
    let before = origins_requests(origins)?;
    for _ in 0..hits {
        let r = ok_from(addr, &path, &[])?;
        ensure!(r.body.len() as u64 == size, "{path}: a hit of {} bytes, expected {size}", r.body.len());
    }
    let reached = origins_requests(origins)? - before;
    ensure!(reached == 0, "{reached} of {hits} repeated requests for {path} reached the origins: not cached");
    Ok(())
}

/// A datagram comes back.
pub fn check_udp(addr: SocketAddr) -> anyhow::Result<()> {
    let s = UdpSocket::bind("127.0.0.1:0")?;
    s.set_read_timeout(Some(Duration::from_millis(500)))?;
    let mut buf = [0u8; 2048];
    for _ in 0..3 {
        s.send_to(b"switchyard-bench-check", addr)?;
        if let Ok((n, _)) = s.recv_from(&mut buf) {
            ensure!(&buf[..n] == b"switchyard-bench-check", "the echo came back altered");
            return Ok(());
        }
    }
    bail!("no UDP answer from {addr}")
}

/// The suite every target must negotiate in the TLS tests.
const BENCH_SUITE: &str = "TLS13_AES_128_GCM_SHA256";

/// A few full TLS handshakes and requests through the load generator (HTTP/2 after ALPN
/// `h2` when `http2`: the generator fails a connection that negotiated anything else).
fn check_tls(addr: SocketAddr, http2: bool) -> anyhow::Result<()> {
    use crate::load::{KxGroup, LoadSpec, Pace, Protocol, TlsSpec};
    let spec = LoadSpec {
        target: addr,
        host: "localhost".into(),
        tls: Some(TlsSpec { server_name: "localhost".into(), resume: false, group: KxGroup::X25519, insecure: true }),
        protocol: if http2 { Protocol::Http2 } else { Protocol::Http1 },
        paths: vec!["/index.html?size=128".into()],
        headers: Vec::new(),
        cookies: false,
        connections: 2,
        requests_per_connection: Some(1),
        pace: Pace::Closed,
        warmup: Duration::ZERO,
        duration: Duration::from_millis(300),
        threads: 1,
    };
    // Full handshakes of a debug build on a loaded machine may outlast one short run:
    // a run in which nothing completed and nothing failed is tried again, as in
    // `check_streams`.
    let mut r = crate::load::run(&spec).context("TLS load run")?;
    for _ in 0..STREAM_CHECK_RETRIES {
        if r.requests > 0 || r.errors > 0 {
            break;
        }
        r = crate::load::run(&spec).context("TLS load run")?;
    }
    ensure!(r.requests > 0 && r.tls_handshakes > 0, "no TLS request completed ({} errors)", r.errors);
    ensure!(r.errors == 0, "{} of {} TLS requests failed", r.errors, r.requests + r.errors);
    ensure!(r.tls_resumed == 0, "{} handshakes were resumed although resumption is off", r.tls_resumed);
    // The same suite on every target, or the comparison would measure a cipher choice.
    let suite = r.tls_suite.as_deref().unwrap_or("none");
    ensure!(suite == BENCH_SUITE, "negotiated {suite}, expected {BENCH_SUITE} (the generator's first choice)");
    Ok(())
}

/// Runs of the TLS, h2c and HTTP/3 checks after one in which no request completed or failed.
const STREAM_CHECK_RETRIES: usize = 10;

/// A few h2c (prior knowledge) requests through the load generator, every one answered.
fn check_h2c(addr: SocketAddr) -> anyhow::Result<()> {
    check_streams(addr, crate::load::Protocol::Http2)
}

/// A few HTTP/3 requests over QUIC (ALPN `h3`, full handshakes) through the load
/// generator to the UDP side of `addr`, every one answered.
fn check_h3(addr: SocketAddr) -> anyhow::Result<()> {
    check_streams(addr, crate::load::Protocol::Http3)
}

/// A few requests of both paths through the load generator in `protocol` (h2c, or
/// HTTP/3 over QUIC), every one answered.
fn check_streams(addr: SocketAddr, protocol: crate::load::Protocol) -> anyhow::Result<()> {
    use crate::load::{KxGroup, LoadSpec, Pace, Protocol, TlsSpec};
    let quic = protocol == Protocol::Http3;
    let what = if quic { "HTTP/3" } else { "h2c" };
    let tls = TlsSpec { server_name: "localhost".into(), resume: false, group: KxGroup::X25519, insecure: true };
    let spec = LoadSpec {
        target: addr,
        host: if quic { "localhost" } else { "bench" }.into(),
        tls: quic.then_some(tls),
        protocol,
        paths: vec!["/index.html?size=128".into(), "/img/logo.png?size=128".into()],
        headers: Vec::new(),
        cookies: false,
        connections: 2,
        requests_per_connection: None,
        pace: Pace::Closed,
        warmup: Duration::ZERO,
        duration: Duration::from_millis(300),
        threads: 1,
    };
    // A first request may take longer than one short run on a loaded machine (a
    // debug build opening its HTTP/2 connection to the origin): a run in which
    // nothing completed and nothing failed is tried again, a bounded number of times.
    let mut r = crate::load::run(&spec).with_context(|| format!("{what} load run"))?;
    for _ in 0..STREAM_CHECK_RETRIES {
        if r.requests > 0 || r.errors > 0 {
            break;
        }
        r = crate::load::run(&spec).with_context(|| format!("{what} load run"))?;
    }
    ensure!(r.requests > 0, "no {what} request completed ({} errors)", r.errors);
    ensure!(r.errors == 0, "{} of {} {what} requests failed", r.errors, r.requests + r.errors);
    Ok(())
}

/// Runs the checks of `setup` against a target listening on `addr` (`run_dir`: where
/// the targets write their files, the access logs among them).
pub fn check(
    target: TargetKind,
    setup: Setup,
    addr: SocketAddr,
    origins: &[u16],
    run_dir: &Path,
) -> anyhow::Result<()> {
    match (target, setup) {
        (_, Setup::Udp) => check_udp(addr),
        (TargetKind::Direct, _) => ok_from(addr, "/index.html?size=128", &[]).map(|_| ()),
        // The floor relays to the two `main` origins in turn, at L7 as at L4.
        (TargetKind::Floor | TargetKind::FloorUring, _) | (_, Setup::L4) => {
            let o = origin_of(&ok_from(addr, "/index.html?size=128", &[])?);
            ensure!(o == "main-a" || o == "main-b", "relayed to `{o}`, expected main-a or main-b");
            Ok(())
        }
        (_, Setup::L7 | Setup::Traced1 | Setup::TracedAll) => check_routing(addr),
        (_, Setup::L7Log) => check_logging(addr, &super::targets::access_log_path(run_dir, target)),
        (_, Setup::Cookie) => check_cookie(addr),
        (_, Setup::Gzip | Setup::Brotli | Setup::Zstd) => {
            let coding = setup.coding().unwrap_or("gzip");
            let origin = *origins.first().ok_or_else(|| anyhow!("no origin to compare with"))?;
            check_compression(addr, origin, coding)
        }
        (_, Setup::Cache) => check_cache_hits(addr, origins, 1024, 5, "check"),
        (_, Setup::TlsRsa | Setup::TlsEcdsa) => check_tls(addr, false),
        (_, Setup::H2Tls) => check_tls(addr, true),
        (_, Setup::H2c | Setup::H2Upstream) => check_h2c(addr),
        (_, Setup::H3) => check_h3(addr),
        // The failover runner starts the target's origins itself, then checks that
        // requests reach both before it measures (see `failover::run`).
        (_, Setup::Failover) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_length_and_chunked_bodies() {
        let r = parse_response(b"HTTP/1.1 200 OK\r\nX-Origin: main-a\r\nContent-Length: 3\r\n\r\nabc").expect("parses");
        assert_eq!((r.status, r.header("x-origin"), &r.body[..]), (200, Some("main-a"), &b"abc"[..]));
        let c = parse_response(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=1\r\nde\r\n0\r\n\r\n",
        )
        .expect("parses");
        assert_eq!(c.body, b"abcde");
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc").is_err());
    }

    #[test]
    fn decodes_each_coding_byte_exactly() {
        let html = crate::suite::limits::synthetic_html(20_000);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&html).expect("gzip");
        let gz = gz.finish().expect("gzip");
        let mut br = brotli::CompressorWriter::new(Vec::new(), 4096, 4, 22);
        br.write_all(&html).expect("brotli");
        let br = br.into_inner();
        let zs = zstd::bulk::compress(&html, 3).expect("zstd");
        for (coding, body) in [("gzip", gz), ("br", br), ("zstd", zs)] {
            assert!(body.len() < html.len() / 2, "{coding}: {} bytes", body.len());
            assert_eq!(decode(coding, &body).expect(coding), html, "{coding}");
            assert!(decode(coding, &body[..body.len() / 2]).map_or(true, |p| p != html), "{coding} truncated");
        }
        assert!(decode("deflate", b"x").is_err());
        assert!(decode("gzip", b"not gzip").is_err());
    }
}
