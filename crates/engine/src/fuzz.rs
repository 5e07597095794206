//! Entry points for fuzzing: one function per parser or decoder that reads
//! bytes a peer (or an operator's file) controls.
//!
//! Each function takes arbitrary bytes, runs them through the same code the
//! data path runs, and checks invariants that must hold for *every* input
//! (offsets within the input, results independent of how the input is split,
//! what we write out parses back to what we read). It panics when one is
//! broken: that is how a fuzzer notices. The cargo-fuzz targets under `fuzz/`
//! are one line each around these, and `tests/fuzz_corpus.rs` replays the
//! saved corpora through them on the stable toolchain, so every input a
//! campaign found interesting stays a cheap regression test.
//!
//! Nothing here is used by the proxy itself.

mod http2;

pub use self::http2::{hpack, http2_client, http2_server};

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::ops::Range;
use std::sync::OnceLock;
use std::time::Instant;

use switchyard_balance::cookie::{self, CookieKey};
use switchyard_config::{Action, Config, Forwarded};

use crate::http::body::Body;
use crate::http::{rewrite, route};
use crate::persist::{self, Facts, PoolPersistence};
use crate::wire::{proxy_protocol, rdp, sni};
use switchyard_http::chunked::ChunkedScanner;
use switchyard_http::parse::{self, Field, Framing, HeadLimits, RequestHead, Version};

/// A fuzz entry point: panics when an input breaks an invariant.
pub type Check = fn(&[u8]);

/// Every target by name (the name of its `fuzz/fuzz_targets/NAME.rs` and `fuzz/corpus/NAME/`).
pub const TARGETS: &[(&str, Check)] = &[
    ("request_head", request_head),
    ("chunked_body", chunked_body),
    ("response_head", response_head),
    ("proxy_protocol", proxy_protocol),
    ("client_hello", client_hello),
    ("rdp_cookie", rdp_cookie),
    ("config", config),
    ("persistence_cookie", persistence_cookie),
    ("rules", rules),
    ("deflate", deflate),
    ("cache_fields", cache_fields),
    ("http2_server", http2_server),
    ("http2_client", http2_client),
    ("hpack", hpack),
];

/// Head limits of the request-head targets: the defaults of a service.
const LIMITS: HeadLimits = HeadLimits { max_bytes: 64 * 1024, max_fields: 100 };
/// Largest response head read from a server.
const MAX_RESPONSE_HEAD: usize = 64 * 1024;

fn within(r: &Range<usize>, len: usize) -> bool {
    r.start <= r.end && r.end <= len
}

fn check_fields(fields: &[Field], len: usize) {
    for f in fields {
        assert!(within(&f.name, len) && within(&f.value, len), "field {f:?} outside the head of {len} bytes");
        assert!(!f.name.is_empty(), "empty field name");
    }
}

/// HTTP/1 request head parser ([`parse::parse_request`]).
///
/// A complete head's ranges lie within it, its framing agrees with its
/// version, it parses the same from exactly its own bytes, and a strict
/// prefix of it is merely incomplete. An incomplete head is under the limit.
pub fn request_head(data: &[u8]) {
    let mut fields = Vec::new();
    match parse::parse_request(data, LIMITS, &mut fields) {
        Ok(Some(head)) => {
            check_request(data, &head, &fields);
            let mut again = Vec::new();
            let exact = parse::parse_request(&data[..head.len], LIMITS, &mut again);
            assert_eq!(exact.ok().flatten().as_ref(), Some(&head), "trailing bytes changed the head");
            assert_eq!(again, fields);
            for cut in [head.len - 1, head.len / 2] {
                let prefix = parse::parse_request(&data[..cut], LIMITS, &mut again);
                assert!(matches!(prefix, Ok(None)), "prefix of {cut} bytes of a valid head gave {prefix:?}");
            }
        }
        Ok(None) => assert!(data.len() < LIMITS.max_bytes, "incomplete at {} bytes", data.len()),
        Err(_) => {}
    }
}

fn check_request(data: &[u8], head: &RequestHead, fields: &[Field]) {
    let len = head.len;
    assert!(len <= data.len() && len <= LIMITS.max_bytes);
    assert!(fields.len() <= LIMITS.max_fields);
    check_fields(fields, len);
    for r in [Some(&head.method), Some(&head.target), head.host.as_ref(), head.upgrade.as_ref()].into_iter().flatten() {
        assert!(within(r, len), "range {r:?} outside the head of {len} bytes");
    }
    assert!(!head.method.is_empty() && !head.target.is_empty());
    match head.framing {
        Framing::Length(n) => assert!(n > 0),
        Framing::Chunked => assert_eq!(head.version, Version::Http11),
        Framing::Empty => {}
        Framing::UntilClose => panic!("a request is never framed by the close"),
    }
    if head.version == Version::Http11 {
        assert!(head.host.is_some(), "HTTP/1.1 request without host");
    }
}

/// Chunked body decoder ([`ChunkedScanner`] and the decoding [`Body`]).
///
/// Scanning in one piece, byte by byte, and split at a point the input picks
/// give the same verdict, end and payload; the in-place decoding of a body
/// keeps exactly the payload the scanner reports.
pub fn chunked_body(data: &[u8]) {
    let whole = scan_pieces(data, &[data.len()]);
    let bytewise = scan_pieces(data, &(1..=data.len()).collect::<Vec<_>>());
    assert_eq!(whole, bytewise, "one piece and byte by byte differ");
    let split = data.first().map_or(0, |&b| usize::from(b) % (data.len() + 1));
    assert_eq!(whole, scan_pieces(data, &[split, data.len()]), "split at {split} differs");

    // The decoding body compacts payload to the front of the buffer in place.
    let mut body = Body::unlimited(Framing::Chunked).decoded();
    let mut buf = data.to_vec();
    match (body.take_payload(&mut buf), &whole) {
        (Ok((consumed, payload_len)), Ok(scan)) => {
            assert_eq!(consumed, scan.consumed);
            assert_eq!(&buf[..payload_len], scan.payload.as_slice(), "decoded payload differs");
            assert_eq!(body.is_finished(), scan.done);
        }
        (Err(_), Err(_)) => {}
        (got, want) => panic!("decoding body gave {got:?}, scanner {want:?}"),
    }
}

/// What scanning a chunked body found.
#[derive(Debug, PartialEq, Eq)]
struct Scan {
    consumed: usize,
    done: bool,
    payload: Vec<u8>,
    data_bytes: u64,
}

/// Scans `data` fed in pieces ending at each of `ends` (ascending), stopping
/// once the body is done.
fn scan_pieces(data: &[u8], ends: &[usize]) -> Result<Scan, &'static str> {
    let mut scanner = ChunkedScanner::new();
    let mut scan = Scan { consumed: 0, done: false, payload: Vec::new(), data_bytes: 0 };
    let mut start = 0;
    for &end in ends {
        if scanner.is_done() {
            break;
        }
        let piece = &data[start..end];
        let mut runs = Vec::new();
        let n = scanner.scan_with(piece, |run| runs.push(run))?;
        assert!(n <= piece.len());
        assert!(n == piece.len() || scanner.is_done(), "stopped early without the end of the body");
        let mut last = 0;
        for run in runs {
            assert!(last <= run.start && run.end <= n, "payload run {run:?} out of order or past {n}");
            last = run.end;
            scan.payload.extend_from_slice(&piece[run]);
        }
        scan.consumed += n;
        start = end;
    }
    scan.done = scanner.is_done();
    scan.data_bytes = scanner.data_bytes();
    assert_eq!(scan.data_bytes, scan.payload.len() as u64);
    Ok(scan)
}

/// Response head parser ([`parse::parse_response`]) and the rewrite of the
/// head sent on to the client, which must parse back to the same status and
/// a compatible framing.
pub fn response_head(data: &[u8]) {
    let mut fields = Vec::new();
    let head = match parse::parse_response(data, MAX_RESPONSE_HEAD, &mut fields) {
        Ok(Some(head)) => head,
        Ok(None) => {
            assert!(data.len() < MAX_RESPONSE_HEAD);
            return;
        }
        Err(_) => return,
    };
    assert!(head.len <= data.len());
    assert!((100..=999).contains(&head.status));
    check_fields(&fields, head.len);
    let mut again = Vec::new();
    let exact = parse::parse_response(&data[..head.len], MAX_RESPONSE_HEAD, &mut again);
    assert_eq!(exact.ok().flatten().as_ref(), Some(&head), "trailing bytes changed the head");
    let _ = parse::response_has_body(false, head.status);

    // Our parser takes at most 128 fields and the rewrite may add one: a head
    // at the limit could not be read back by it (clients take more).
    if fields.len() >= 127 {
        return;
    }
    let buf = &data[..head.len];
    let mut out = Vec::new();
    for (close, dechunk) in [(false, false), (true, true)] {
        rewrite::response_head(&mut out, buf, &head, &fields, &[], close, false, dechunk);
        let mut sent_fields = Vec::new();
        let sent = parse::parse_response(&out, usize::MAX, &mut sent_fields);
        let sent = match sent {
            Ok(Some(sent)) => sent,
            other => panic!("rewritten response head {:?} does not parse: {other:?}", out.escape_ascii().to_string()),
        };
        assert_eq!(sent.len, out.len(), "rewritten head has bytes after its end");
        assert_no_bare_lf(&out);
        assert_eq!(sent.status, head.status);
        if !dechunk {
            assert_eq!(sent.framing, head.framing, "rewrite changed the framing");
        }
        assert_eq!(sent.connection.close, close, "connection: close not as asked");
    }
}

/// Heads we write end every line in CRLF: a bare LF (which httparse accepts
/// from a peer) must not pass through into them.
fn assert_no_bare_lf(head: &[u8]) {
    let bare = head.iter().enumerate().any(|(i, &b)| b == b'\n' && (i == 0 || head[i - 1] != b'\r'));
    assert!(!bare, "bare LF in the head we write: {:?}", head.escape_ascii().to_string());
}

/// PROXY protocol v1/v2 parser ([`proxy_protocol::parse`]) and its encoders.
///
/// A complete header fits the input and the cap and parses the same from
/// exactly its bytes; every strict prefix of it is incomplete, never refused;
/// an incomplete input is under the version's bound; a relayed TCP header
/// re-encodes (v1 and v2) to a header with the same endpoints and TLVs.
pub fn proxy_protocol(data: &[u8]) {
    use proxy_protocol::{Parsed, Version as V};
    match proxy_protocol::parse(data) {
        Ok(Parsed::Incomplete) => {
            let bound = match proxy_protocol::detect(data) {
                Some(V::V1) => proxy_protocol::MAX_V1_LEN,
                _ => proxy_protocol::MAX_LEN,
            };
            assert!(data.len() < bound, "incomplete at {} bytes", data.len());
        }
        Ok(Parsed::Complete { header, len }) => {
            assert!(len <= data.len() && len <= proxy_protocol::MAX_LEN);
            assert_eq!(header.source.is_some(), header.destination.is_some());
            assert!(header.tlvs.len() <= proxy_protocol::MAX_TLVS);
            if header.version == V::V1 {
                assert!(header.tlvs.is_empty() && len <= proxy_protocol::MAX_V1_LEN);
            }
            let exact = proxy_protocol::parse(&data[..len]);
            assert_eq!(exact, Ok(Parsed::Complete { header: header.clone(), len }));
            // Every prefix may still become this header: none may be refused.
            let cuts = (0..len.min(128)).chain([len / 2, len - 1]);
            for cut in cuts {
                let prefix = proxy_protocol::parse(&data[..cut]);
                assert_eq!(prefix, Ok(Parsed::Incomplete), "prefix of {cut} bytes of a valid header");
            }
            if let (Some(src), Some(dst)) = (header.source, header.destination) {
                reencode_proxy(&header, src, dst);
            }
        }
        Err(_) => {}
    }
}

fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(a.ip().to_canonical(), a.port())
}

fn reencode_proxy(header: &proxy_protocol::Header, src: SocketAddr, dst: SocketAddr) {
    use proxy_protocol::Parsed;
    let tlvs: Vec<(u8, &[u8])> = header.tlvs.iter().map(|(k, v)| (*k, v.as_slice())).collect();
    let mut v1 = Vec::new();
    proxy_protocol::encode_v1(src, dst, &mut v1);
    let mut v2 = Vec::new();
    proxy_protocol::encode_v2(src, dst, &mut v2, &tlvs).expect("a parsed header's TLVs fit again");
    for (encoded, want_tlvs) in [(v1, &[][..]), (v2, &header.tlvs[..])] {
        match proxy_protocol::parse(&encoded) {
            Ok(Parsed::Complete { header: back, len }) => {
                assert_eq!(len, encoded.len());
                let endpoints = |h: &proxy_protocol::Header| (h.source.map(canonical), h.destination.map(canonical));
                assert_eq!(endpoints(&back), endpoints(header), "endpoints changed in {:?}", encoded.escape_ascii());
                assert_eq!(back.tlvs, want_tlvs);
            }
            other => panic!("re-encoded header {:?} gave {other:?}", encoded.escape_ascii().to_string()),
        }
    }
}

/// TLS ClientHello peek ([`sni::peek`]).
///
/// `NeedMore` only under the bound; a verdict other than `NeedMore` on a
/// prefix is final (the whole input gets the same one); a server name is a
/// lower-case DNS name that matches itself as a pattern.
pub fn client_hello(data: &[u8]) {
    let verdict = sni::peek(data);
    match &verdict {
        sni::Peek::NeedMore => assert!(data.len() < sni::MAX_PEEK_LEN, "NeedMore at {} bytes", data.len()),
        sni::Peek::Hello(info) => {
            if let Some(name) = &info.sni {
                assert!(!name.is_empty() && name.len() <= 253, "bad name length {}", name.len());
                assert!(
                    name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.'),
                    "server name {name:?} is not a lower-case DNS name"
                );
                assert!(name.split('.').all(|l| !l.is_empty() && l.len() <= 63), "bad label in {name:?}");
                assert!(sni::sni_matches(name, name));
                assert!(sni::sni_matches(&name.to_ascii_uppercase(), name));
            }
        }
        sni::Peek::NotTls | sni::Peek::Malformed(_) => {}
    }
    for cut in [data.len() / 2, data.len().saturating_sub(1)] {
        let early = sni::peek(&data[..cut]);
        if early != sni::Peek::NeedMore {
            assert_eq!(early, verdict, "verdict on {cut} bytes changed with more input");
        }
    }
}

/// RDP connection request peek ([`rdp::peek`]).
///
/// `NeedMore` only under the bound; a verdict on a prefix is final; a cookie
/// name is a non-empty, trimmed part of the input.
pub fn rdp_cookie(data: &[u8]) {
    let verdict = rdp::peek(data);
    match verdict {
        rdp::Peek::NeedMore => assert!(data.len() < rdp::MAX_PEEK_LEN),
        rdp::Peek::Request(Some(name)) => {
            let start = name.as_ptr() as usize - data.as_ptr() as usize;
            assert!(start + name.len() <= data.len().min(rdp::MAX_PEEK_LEN));
            assert!(!name.is_empty() && name.trim_ascii() == name);
        }
        rdp::Peek::Request(None) | rdp::Peek::NotRdp => {}
    }
    for cut in [data.len() / 2, data.len().saturating_sub(1)] {
        let early = rdp::peek(&data[..cut]);
        if early != rdp::Peek::NeedMore {
            assert_eq!(early, verdict, "verdict on {cut} bytes changed with more input");
        }
    }
}

/// Configuration loader: TOML text → parse and validate
/// ([`switchyard_config::parse_offline`], which reads no file the text names).
///
/// A configuration comes back exactly when no diagnostic is an error; every
/// diagnostic points into the text; a valid configuration differs from
/// itself in nothing.
pub fn config(data: &[u8]) {
    let Ok(source) = std::str::from_utf8(data) else { return };
    let (config, diagnostics) = switchyard_config::parse_offline(source, "fuzz.toml");
    let errors = diagnostics.0.iter().filter(|d| d.severity == switchyard_config::Severity::Error).count();
    assert_eq!(config.is_some(), errors == 0, "config present {} with {errors} errors", config.is_some());
    let lines = source.split('\n').count();
    for d in &diagnostics.0 {
        assert!(d.line >= 1 && d.line <= lines && d.col >= 1, "diagnostic at {}:{} of {lines} lines", d.line, d.col);
        let _ = d.to_string();
    }
    if let Some(config) = config {
        assert!(switchyard_config::diff(&config, &config).is_empty(), "a configuration differs from itself");
    }
}

/// The fixed configuration of the persistence target: one pool of each
/// HTTP-readable kind, three servers each.
const PERSISTENCE_CONFIG: &str = r#"
[[service]]
name = "web"
listen = "127.0.0.1:1"
pool = "insert"
rules = [
  { path_prefix = "/learn", pool = "learn" },
  { path_prefix = "/header", pool = "header" },
]

[[pool]]
name = "insert"
persistence = { cookie = "SRV", max_age = "1h" }
servers = [{ address = "127.0.0.1:2", name = "a" }, { address = "127.0.0.1:3", name = "b" }, { address = "127.0.0.1:4", name = "c" }]

[[pool]]
name = "learn"
persistence = { cookie = "JSESSIONID", mode = "learn", capacity = 16 }
servers = [{ address = "127.0.0.1:2", name = "a" }, { address = "127.0.0.1:3", name = "b" }, { address = "127.0.0.1:4", name = "c" }]

[[pool]]
name = "header"
persistence = { header = "x-user", capacity = 16 }
servers = [{ address = "127.0.0.1:2", name = "a" }, { address = "127.0.0.1:3", name = "b" }, { address = "127.0.0.1:4", name = "c" }]
"#;

fn persistence_config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| match switchyard_config::parse(PERSISTENCE_CONFIG, "fuzz-persistence.toml") {
        Ok(config) => config,
        Err(e) => panic!("the persistence target's configuration is invalid: {e}"),
    })
}

fn subslice(part: &[u8], of: &[u8]) -> bool {
    let start = part.as_ptr() as usize;
    let base = of.as_ptr() as usize;
    start >= base && start + part.len() <= base + of.len()
}

/// Persistence cookie and token decoding ([`persist::cookie_values`],
/// [`PoolPersistence`]).
///
/// The input is a `Cookie` header value, then (after the first `0xff` byte,
/// if any) a server's `Set-Cookie` value. Cookie values are parts of the
/// header; a cookie-insert lookup finds a server exactly when the request
/// presents that server's token, which is what encoding the server gives
/// again; stick-table keys are bounded parts of the request; a learned
/// `Set-Cookie` that is not a deletion makes its value stick to the server.
pub fn persistence_cookie(data: &[u8]) {
    let (header, set_cookie) = match data.iter().position(|&b| b == 0xff) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let config = persistence_config();
    let key = CookieKey::from_bytes([7; cookie::KEY_LEN]);
    let now = Instant::now();
    let client = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
    let headers = [("cookie", header), ("x-user", header)];
    let req = Facts { client, headers: &headers };
    for pool in &config.pools {
        let Some(p) = PoolPersistence::new(pool, &key, None) else { continue };
        match p.kind() {
            "cookie" => {
                let presented: Vec<&[u8]> = persist::cookie_values(header, b"SRV").collect();
                assert!(presented.iter().all(|v| subslice(v, header)));
                let found = p.lookup(&req, now);
                let tokens: Vec<String> =
                    pool.servers.iter().map(|s| cookie::token(&key, &pool.name, &s.name)).collect();
                let first = presented.iter().find_map(|v| tokens.iter().position(|t| t.as_bytes() == *v));
                assert_eq!(found, first, "lookup disagrees with the tokens presented");
                if let Some(i) = found {
                    assert_eq!(cookie::token(&key, &pool.name, &pool.servers[i].name).len(), cookie::TOKEN_LEN);
                    assert!(p.set_cookie(i, found).is_none(), "a client presenting its token gets a new cookie");
                }
                for (i, token) in tokens.iter().enumerate() {
                    let value = p.set_cookie(i, None).expect("cookie insert sets a cookie");
                    let pair = value.split(';').next().unwrap_or_default();
                    assert_eq!(pair, format!("SRV={token}"), "Set-Cookie does not carry the token");
                }
            }
            "cookie-learn" | "header" => {
                let request_key = p.request_key(&req);
                if let Some(k) = request_key {
                    assert!(subslice(k, header) && !k.is_empty() && k.len() <= persist::MAX_HEADER_KEY);
                }
                p.learn(&req, 1, None, now);
                if request_key.is_some() {
                    assert_eq!(p.lookup(&req, now), Some(1), "a learned key does not stick");
                }
                if p.kind() == "cookie-learn" {
                    p.learn_response(set_cookie, request_key, 2, now);
                    let _ = p.entries(8, now);
                    learned_value_sticks(&p, set_cookie, client, now);
                }
            }
            other => panic!("unexpected persistence kind {other}"),
        }
    }
}

/// After a `Set-Cookie: JSESSIONID=V` that deletes nothing, V sticks to server 2.
fn learned_value_sticks(p: &PoolPersistence, set_cookie: &[u8], client: IpAddr, now: Instant) {
    let first = set_cookie.split(|&b| b == b';').next().unwrap_or_default();
    let Some(eq) = first.iter().position(|&b| b == b'=') else { return };
    if first[..eq].trim_ascii() != b"JSESSIONID" {
        return;
    }
    let mut value = first[eq + 1..].trim_ascii();
    if let [b'"', inner @ .., b'"'] = value {
        value = inner;
    }
    let deletes = set_cookie.split(|&b| b == b';').skip(1).any(|attr| {
        let attr = attr.trim_ascii();
        attr.len() >= 8 && attr[..7].eq_ignore_ascii_case(b"max-age") && attr[7..].trim_ascii_start().starts_with(b"=")
    });
    if !value.is_empty() && value.len() <= persist::MAX_HEADER_KEY && !deletes {
        assert_eq!(p.lookup_with(client, Some(value), now), Some(2), "learned cookie {:?} does not stick", value);
    }
}

/// The fixed rules of the rules target: every condition kind and action.
const RULES_CONFIG: &str = r#"
[[service]]
name = "web"
listen = "127.0.0.1:1"
pool = "main"
rules = [
  { host = "static.example.com", path_suffix = ".png", pool = "images" },
  { host_suffix = ".example.org", set_request_headers = { "x-org" = "1" }, remove_request_headers = ["x-drop"] },
  { host_prefix = "api.", path_prefix = "/v1/", method = ["GET", "HEAD"], pool = "api" },
  { host_regex = "^[a-z]+[.]test$", add_request_headers = { "x-test" = "yes" } },
  { path = "/admin", client = ["10.0.0.0/8", "::1"], respond = "hello", status = 200 },
  { path_prefix = "/admin", deny = true },
  { path_regex = "^/old/(.*)$", redirect = "/new", status = 308 },
  { header = { name = "x-tenant", value = "blue" }, pool = "api" },
  { header = [ { name = "upgrade" }, { name = "connection", regex = "(?i)upgrade" } ], pool = "images" },
  { header = { name = "x-prefix", prefix = "ab" }, set_request_headers = { "x-p" = "1" } },
  { header = { name = "x-suffix", suffix = "yz" }, deny = true, status = 451 },
  { query = { name = "debug" }, client = "192.0.2.0/24", pool = "api" },
  { query = { name = "lang", value = "fr" }, add_request_headers = { "x-lang" = "fr" } },
  { query = [ { name = "a", prefix = "1" }, { name = "b", regex = "^[0-9]+$" } ], redirect_https = 8443 },
  { method = "POST", path_prefix = "/upload", redirect_https = true, status = 307 },
  { client_cert = "verified", path_prefix = "/secure", pool = "api" },
]

[[pool]]
name = "main"
servers = [{ address = "127.0.0.1:2" }]

[[pool]]
name = "images"
servers = [{ address = "127.0.0.1:3" }]

[[pool]]
name = "api"
servers = [{ address = "127.0.0.1:4" }]
"#;

fn rules_config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| match switchyard_config::parse(RULES_CONFIG, "fuzz-rules.toml") {
        Ok(config) => config,
        Err(e) => panic!("the rules target's configuration is invalid: {e}"),
    })
}

/// Rule matching on arbitrary requests ([`route::evaluate`]) and the rewrite
/// of the head forwarded to the server.
///
/// The first input byte picks the client (address, verified certificate,
/// forwarding headers), the rest is a request head, routed as the pipeline
/// does. The deciding rule holds on its own and no earlier rule with an
/// action does; the head sent to the server parses back to the same method,
/// target and framing, with no hop-by-hop field left.
pub fn rules(data: &[u8]) {
    let Some((&flags, head_bytes)) = data.split_first() else { return };
    let service = &rules_config().services[0];
    let client = match flags & 3 {
        0 => IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)),
        1 => IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7)),
        2 => IpAddr::V6(Ipv6Addr::LOCALHOST),
        _ => IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
    };
    let mut fields = Vec::new();
    let Ok(Some(head)) = parse::parse_request(head_bytes, LIMITS, &mut fields) else { return };
    let buf = &head_bytes[..head.len];
    let method = std::str::from_utf8(&buf[head.method.clone()]).unwrap_or("");
    let target = &buf[head.target.clone()];
    let (origin_target, authority) = crate::http::split_target(target);
    let host_value = authority.or_else(|| head.host.clone().map(|r| &buf[r])).unwrap_or(b"");
    let mut scratch = String::new();
    let host = route::routing_host(host_value, &mut scratch);
    assert!(!host.bytes().any(|b| b.is_ascii_uppercase()), "routing host {host:?} is not lower case");
    let (path, query) = crate::http::split_query(origin_target);
    let view = route::RequestView {
        method,
        host,
        path: std::str::from_utf8(path).unwrap_or(""),
        query: query.and_then(|q| std::str::from_utf8(q).ok()),
        head: buf,
        fields: &fields,
        client,
        client_cert: flags & 4 != 0,
    };
    let decision = route::evaluate(&service.rules, &view);
    check_decision(&service.rules, &view, &decision);
    if let Some(Action::RedirectHttps { port, .. }) = decision.action {
        let location = crate::http::https_location(host, *port, origin_target);
        assert!(location.starts_with("https://"));
        assert!(!location.bytes().any(|b| b == b'\r' || b == b'\n'), "header injection in {location:?}");
    }

    let fwd = rewrite::Forwarding {
        client,
        client_text: &client.to_string(),
        proto: "http",
        headers: Forwarded {
            x_forwarded_for: flags & 8 != 0,
            x_forwarded_proto: flags & 16 != 0,
            forwarded: flags & 32 != 0,
        },
        upgrade: None,
        client_cert: (flags & 64 != 0).then_some((flags & 4 != 0, "CN=fuzz")),
        trace: None,
    };
    let mut out = Vec::new();
    rewrite::request_head(&mut out, buf, &head, &fields, origin_target, authority, b"fallback", &decision.edits, &fwd);
    check_forwarded(&out, buf, &head, origin_target);
    // The same head as an HTTP/2 server gets it.
    let mut list = switchyard_http::request_writer::RequestList::default();
    let edits = &decision.edits;
    rewrite::write_request_head(&mut list, buf, &head, &fields, origin_target, authority, b"fallback", edits, &fwd);
    check_listed(&list);
}

/// An HTTP/2 request list holds no `host` (its authority), no
/// connection-specific field, and only lowercase names.
fn check_listed(list: &switchyard_http::request_writer::RequestList) {
    for (name, _) in list.pairs() {
        let lower = !name.iter().any(u8::is_ascii_uppercase);
        let allowed = name != b"host" && !switchyard_http::head_writer::connection_specific(name);
        assert!(lower && allowed, "{:?} in an HTTP/2 request list", String::from_utf8_lossy(name));
    }
}

fn check_decision(rules: &[switchyard_config::Rule], view: &route::RequestView<'_>, decision: &route::Decision<'_>) {
    let holds = |rule: &switchyard_config::Rule| {
        let mut probe = rule.clone();
        probe.action = Some(Action::Deny { status: 403 });
        route::evaluate(std::slice::from_ref(&probe), view).action.is_some()
    };
    let deciding = decision.action.map(|a| {
        rules.iter().position(|r| r.action.as_ref().is_some_and(|b| std::ptr::eq(a, b))).expect("action of a rule")
    });
    let end = deciding.map_or(rules.len(), |i| i + 1);
    for (i, rule) in rules[..end].iter().enumerate() {
        let terminal = rule.action.is_some();
        if Some(i) == deciding {
            assert!(holds(rule), "deciding rule {i} does not hold");
        } else if terminal {
            assert!(!holds(rule), "rule {i} holds and has an action, but rule {deciding:?} decided");
        }
    }
    let edits_expected = rules[..end].iter().filter(|r| !r.edits.is_empty() && holds(r)).count();
    assert_eq!(decision.edits.len(), edits_expected, "edits of matching rules");
}

fn check_forwarded(out: &[u8], buf: &[u8], head: &RequestHead, origin_target: &[u8]) {
    let mut fields = Vec::new();
    let limits = HeadLimits { max_bytes: usize::MAX, max_fields: 1000 };
    let sent = match parse::parse_request(out, limits, &mut fields) {
        Ok(Some(sent)) => sent,
        other => panic!("forwarded head {:?} does not parse: {other:?}", out.escape_ascii().to_string()),
    };
    assert_eq!(sent.len, out.len(), "forwarded head has bytes after its end");
    assert_no_bare_lf(out);
    assert_eq!(&out[sent.method.clone()], &buf[head.method.clone()]);
    assert_eq!(&out[sent.target.clone()], origin_target);
    assert_eq!(sent.framing, head.framing, "framing changed on the way to the server");
    assert_eq!(sent.version, Version::Http11);
    for f in &fields {
        let name = &out[f.name.clone()];
        for hop in [&b"connection"[..], b"keep-alive", b"proxy-connection", b"te", b"upgrade", b"expect"] {
            assert!(!name.eq_ignore_ascii_case(hop), "hop-by-hop field {:?} forwarded", name.escape_ascii());
        }
    }
}

/// The gzip level-1 encoder ([`switchyard_deflate::Gzip`]) on response bytes
/// a server controls.
///
/// The first byte chooses how the rest arrives: in pieces of `1 << (b % 17)`
/// bytes, with a sync flush after every `b >> 5`-th piece (never when 0), as
/// the proxy feeds it reads from a server. A real decoder (zlib-rs) must give
/// back exactly the input; the output is never more than 15 bits (the
/// longest code) per input byte plus block headers and flush markers.
pub fn deflate(data: &[u8]) {
    use std::io::Read;
    thread_local! {
        /// One encoder for every input: reuse across streams is what the proxy does.
        static GZIP: std::cell::RefCell<switchyard_deflate::Gzip> = std::cell::RefCell::new(switchyard_deflate::Gzip::new());
    }
    let Some((&plan, body)) = data.split_first() else { return };
    let piece = 1usize << (plan % 17);
    let flush_every = usize::from(plan >> 5);
    let mut out = Vec::new();
    let mut flushes = 0;
    GZIP.with_borrow_mut(|gzip| {
        gzip.start(&mut out);
        for (i, chunk) in body.chunks(piece).enumerate() {
            gzip.write(chunk, &mut out);
            if flush_every != 0 && (i + 1) % flush_every == 0 {
                gzip.flush(&mut out);
                flushes += 1;
            }
        }
        gzip.finish(&mut out);
    });
    let mut back = Vec::with_capacity(body.len());
    let decoded = flate2::read::GzDecoder::new(&out[..]).read_to_end(&mut back);
    assert!(decoded.is_ok(), "the decoder refused the stream: {decoded:?}");
    assert!(back == body, "decoded {} bytes, not the {} written", back.len(), body.len());
    let bound = body.len() * 15 / 8 + (body.len() / 16384 + flushes + 2) * 400;
    assert!(out.len() <= bound, "{} bytes out for {} in ({flushes} flushes)", out.len(), body.len());
}

/// The cache's field parsers and the combining of partial responses
/// (RFC 9111 §3.3–3.4, `crate::cache::Partial`).
///
/// The first two bytes choose a representation length (at most 4096); each
/// following line (split at `\n`) is given, as a field value, to every cache
/// field parser — `Range`, `Content-Range`, `Cache-Control`, targeted fields,
/// dates, `If-Range`, the strong validator — whose results must lie within
/// their bounds; its first four bytes also make a piece (offset and size) of
/// the representation, combined into what is held, under validator `A` or
/// (odd fifth byte) `B`. What is held never exceeds the length, every piece
/// holds the representation's bytes at its offset, and once complete the
/// whole is exactly the representation.
pub fn cache_fields(data: &[u8]) {
    use crate::cache::{policy, Partial, Piece};
    let Some((head, rest)) = data.split_at_checked(2) else { return };
    let len = u64::from(u16::from_be_bytes([head[0], head[1]])) % 4097;
    let byte = |i: u64| (i.wrapping_mul(31) + 7) as u8;
    let now = std::time::SystemTime::now();
    let mut held: Option<Partial> = None;
    for line in rest.split(|&b| b == b'\n') {
        let _ = policy::Directives::parse(std::iter::once(line));
        let _ = policy::targeted::parse(std::iter::once(line));
        let _ = policy::date::parse(line, now);
        let _ = policy::range::if_range_holds(line, Some(line), Some(line), Some(line), now);
        if let policy::range::Ranges::Parts(parts) = policy::range::evaluate(line, len) {
            assert!(!parts.is_empty() && parts.len() <= policy::range::MAX_RANGES, "{parts:?}");
            assert!(parts.iter().all(|r| r.start() <= r.end() && *r.end() < len), "{parts:?} of {len}");
        }
        if let Some((range, complete)) = policy::range::content_range(line) {
            assert!(range.start() <= range.end() && *range.end() < complete, "{range:?}/{complete}");
        }
        if let Some(v) = policy::range::strong_validator(Some(line), Some(line), Some(line), now) {
            assert!(v.starts_with(b"E\"") || v.starts_with(b"L"), "{v:?}");
        }
        let (Some(&[a, b, c, d]), true) = (line.first_chunk::<4>(), len > 0) else { continue };
        let first = u64::from(u16::from_be_bytes([a, b])) % len;
        let size = (u64::from(u16::from_be_bytes([c, d])) % (len - first)) + 1;
        let body: bytes::Bytes = (first..first + size).map(byte).collect();
        let validator = if line.get(4).is_some_and(|v| v % 2 == 1) { b"B".to_vec() } else { b"A".to_vec() };
        let piece = Piece { validator, first, length: len, headers: Vec::new(), body, requested: now };
        let partial = Partial::combine(held.as_ref(), piece);
        assert!(partial.held() <= len, "{} held of {len}", partial.held());
        for (at, bytes) in partial.pieces() {
            assert!(bytes.iter().zip(at..).all(|(b, i)| *b == byte(i)), "piece at {at} holds other bytes");
        }
        if let Some(whole) = partial.complete() {
            assert!(whole.len() as u64 == len && whole.iter().zip(0..).all(|(b, i)| *b == byte(i)));
        }
        held = Some(partial);
    }
}
