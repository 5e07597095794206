//! HTTP/1.x on the origin's side: request heads in, response heads out, chunked bodies.
//!
//! Everything here is sans-io and allocation-free on the hot path: [`parse_head`] reads a
//! head from a byte slice into a [`RequestHead`] of plain values (nothing borrowed, so the
//! caller can consume the head bytes right away), and [`ResponseHead::write`] appends a head
//! to a reusable buffer. Malformed input yields [`Parsed::Bad`], never a panic.

use std::mem::MaybeUninit;
use std::net::SocketAddr;

use bytes::{Buf, BytesMut};

use super::body::BodyKind;

/// Largest request head accepted; a longer one is answered 400.
pub const MAX_HEAD: usize = 64 * 1024;
/// Most header fields accepted in a request head.
const MAX_HEADERS: usize = 128;
/// Longest chunk-size line or trailer section accepted in a chunked body.
const MAX_CHUNK_LINE: usize = 4 * 1024;
const MAX_TRAILERS: usize = 16 * 1024;

/// The endpoint a request addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Any path but the two below: the response is shaped by the query string.
    Shaped,
    /// `/__origin/stats`: the counters as JSON; not itself counted as a request.
    Stats,
    /// `/__origin/request`: the request as received, as JSON.
    Describe,
}

/// How the request body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// No body.
    None,
    /// `content-length: N`, N > 0.
    Length(u64),
    /// `transfer-encoding: chunked`.
    Chunked,
}

/// What the query string asks of the response (see the module docs of `origin`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    /// `size=N`: body bytes.
    pub size: u64,
    /// `compressible=1` picks HTML text, otherwise random bytes.
    pub kind: BodyKind,
    /// `delay_ms=N`: wait before answering.
    pub delay_ms: u64,
    /// `status=N`.
    pub status: u16,
    /// `cache=N`: `max-age` seconds; `None` means `no-store`.
    pub cache: Option<u64>,
    /// `close=1`: close the connection after answering.
    pub close: bool,
    /// `echo=1`: the response body is the request body.
    pub echo: bool,
    /// Chosen response fields and interim responses (HTTP/1.1 only); `None`
    /// (no allocation) unless the query asks for one.
    pub extra: Option<Box<Extra>>,
}

/// What the cache tests ask of a response beyond its shape: fields with
/// chosen values (`Age`, `Date`, `Cache-Control`, `CDN-Cache-Control`,
/// `ETag`, any other), and a `103 Early Hints` before it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Extra {
    /// Preformatted `name: value\r\n` lines, in query order.
    pub lines: Vec<u8>,
    /// `cc=V`: `cache-control: V` replaces the one `cache` decides.
    pub cache_control: Option<Vec<u8>>,
    /// `date_ago=N`: a `Date` N seconds before the response is sent.
    pub date_ago: Option<u64>,
    /// `etag=V`: `etag: "V"`; a request whose `If-None-Match` lists it gets 304.
    pub etag: Option<Vec<u8>>,
    /// `hints=1`: a `103 Early Hints` goes before the final response.
    pub hints: bool,
    /// `unsafe_status=N`: the status for any method but GET and HEAD.
    pub unsafe_status: Option<u16>,
    /// `ranges=1`: a GET's single `bytes` range is answered 206 (416 when
    /// unsatisfiable), with `accept-ranges: bytes`.
    pub ranges: bool,
}

impl Default for Shape {
    fn default() -> Self {
        Shape {
            size: 128,
            kind: BodyKind::Random,
            delay_ms: 0,
            status: 200,
            cache: None,
            close: false,
            echo: false,
            extra: None,
        }
    }
}

impl Extra {
    /// The chosen fields, `Date` computed now.
    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.lines);
        if let Some(ago) = self.date_ago {
            let at = std::time::SystemTime::now() - std::time::Duration::from_secs(ago);
            push_line(out, b"date", httpdate::fmt_http_date(at).as_bytes());
        }
        if let Some(etag) = &self.etag {
            out.extend_from_slice(b"etag: \"");
            out.extend_from_slice(etag);
            out.extend_from_slice(b"\"\r\n");
        }
        if self.ranges {
            out.extend_from_slice(b"accept-ranges: bytes\r\n");
        }
    }

    /// Whether an `If-None-Match` value lists this response's `etag` (or `*`).
    pub fn not_modified(&self, if_none_match: Option<&[u8]>) -> bool {
        let (Some(etag), Some(inm)) = (&self.etag, if_none_match) else { return false };
        inm.split(|&b| b == b',').map(<[u8]>::trim_ascii).any(|t| {
            let t = t.strip_prefix(b"W/").unwrap_or(t);
            t == b"*" || t.strip_prefix(b"\"").and_then(|t| t.strip_suffix(b"\"")) == Some(etag.as_slice())
        })
    }
}

impl Shape {
    fn extra(&mut self) -> &mut Extra {
        self.extra.get_or_insert_with(Box::default)
    }
}

/// A parsed request head, owning nothing from the read buffer.
#[derive(Debug)]
pub struct RequestHead {
    /// Bytes of the buffer the head occupied.
    pub head_len: usize,
    /// Which endpoint.
    pub route: Route,
    /// Query-string shaping (defaults for the `/__origin/*` routes).
    pub shape: Shape,
    /// Request body delimiting.
    pub framing: Framing,
    /// The request line said `HTTP/1.0`.
    pub http10: bool,
    /// The client is willing to keep the connection open (by version and `connection`).
    pub keep_alive: bool,
    /// `expect: 100-continue` was sent.
    pub expect_continue: bool,
    /// The method is `HEAD`: the response has no body.
    pub is_head: bool,
    /// The `If-None-Match` value, kept only when the query asked for an `etag`.
    pub if_none_match: Option<Vec<u8>>,
    /// The `Range` value of a GET, kept only when the query asked for `ranges`.
    pub range: Option<Vec<u8>>,
    /// For [`Route::Describe`], the JSON description, built while the head was borrowed.
    pub description: Option<Vec<u8>>,
}

/// Outcome of [`parse_head`].
#[derive(Debug)]
pub enum Parsed {
    /// More bytes are needed.
    Partial,
    /// A full head.
    Complete(RequestHead),
    /// Malformed; the reason goes in the 400 body.
    Bad(&'static str),
}

/// Parses a request head from the front of `buf`.
pub fn parse_head(buf: &[u8], peer: SocketAddr) -> Parsed {
    // Uninitialised slots: zeroing 128 headers per request would cost more than parsing.
    let mut headers = [const { MaybeUninit::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let head_len = match req.parse_with_uninit_headers(buf, &mut headers) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(httparse::Error::TooManyHeaders) => return Parsed::Bad("too many header fields"),
        Err(_) => return Parsed::Bad("malformed request head"),
    };
    // httparse fills these in on Complete.
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Parsed::Bad("malformed request line");
    };
    let http10 = version == 0;
    let (path, query) = match target.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (target, None),
    };
    let route = match path {
        "/__origin/stats" => Route::Stats,
        "/__origin/request" => Route::Describe,
        _ => Route::Shaped,
    };
    let mut shape = match (route, query) {
        (Route::Shaped, Some(query)) => match parse_query(query) {
            Ok(shape) => shape,
            Err(reason) => return Parsed::Bad(reason),
        },
        _ => Shape::default(),
    };
    if let Some(status) = shape.extra.as_ref().and_then(|e| e.unsafe_status) {
        if method != "GET" && method != "HEAD" {
            shape.status = status;
        }
    }
    let fields = match scan_fields(req.headers, http10) {
        Ok(fields) => fields,
        Err(reason) => return Parsed::Bad(reason),
    };
    let description =
        (route == Route::Describe).then(|| describe(method, path, query.unwrap_or(""), http10, req.headers, peer));
    let if_none_match = shape.extra.as_ref().filter(|e| e.etag.is_some()).and_then(|_| {
        req.headers.iter().find(|h| h.name.eq_ignore_ascii_case("if-none-match")).map(|h| h.value.to_vec())
    });
    let range = shape
        .extra
        .as_ref()
        .filter(|e| e.ranges && method == "GET")
        .and_then(|_| req.headers.iter().find(|h| h.name.eq_ignore_ascii_case("range")).map(|h| h.value.to_vec()));
    Parsed::Complete(RequestHead {
        head_len,
        route,
        shape,
        framing: fields.framing,
        http10,
        keep_alive: fields.keep_alive,
        expect_continue: fields.expect_continue,
        is_head: method == "HEAD",
        if_none_match,
        range,
        description,
    })
}

/// The header fields the origin acts on.
struct Fields {
    framing: Framing,
    keep_alive: bool,
    expect_continue: bool,
}

fn scan_fields(headers: &[httparse::Header<'_>], http10: bool) -> Result<Fields, &'static str> {
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut close = false;
    let mut keep_alive_token = false;
    let mut expect_continue = false;
    for header in headers {
        let name = header.name;
        if name.eq_ignore_ascii_case("content-length") {
            let value = parse_u64(trim(header.value)).ok_or("invalid content-length")?;
            if length.is_some_and(|seen| seen != value) {
                return Err("conflicting content-length fields");
            }
            length = Some(value);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            // Only `chunked`, once, as the whole coding list: anything else is refused rather
            // than guessed at (request smuggling lives in those guesses).
            if chunked || !trim(header.value).eq_ignore_ascii_case(b"chunked") {
                return Err("unsupported transfer-encoding");
            }
            chunked = true;
        } else if name.eq_ignore_ascii_case("connection") {
            for token in header.value.split(|b| *b == b',').map(trim) {
                close |= token.eq_ignore_ascii_case(b"close");
                keep_alive_token |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case("expect") {
            expect_continue = trim(header.value).eq_ignore_ascii_case(b"100-continue");
        }
    }
    let framing = match (chunked, length) {
        (true, Some(_)) => return Err("both content-length and transfer-encoding"),
        (true, None) if http10 => return Err("chunked request in HTTP/1.0"),
        (true, None) => Framing::Chunked,
        (false, Some(n)) if n > 0 => Framing::Length(n),
        (false, _) => Framing::None,
    };
    let keep_alive = !close && (!http10 || keep_alive_token);
    Ok(Fields { framing, keep_alive, expect_continue })
}

pub(super) fn parse_query(query: &str) -> Result<Shape, &'static str> {
    let mut shape = Shape::default();
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let number = || parse_u64(value.as_bytes());
        match key {
            "size" => shape.size = number().ok_or("invalid size")?,
            "delay_ms" => shape.delay_ms = number().ok_or("invalid delay_ms")?,
            "cache" => shape.cache = Some(number().ok_or("invalid cache")?),
            "status" => {
                shape.status = number()
                    .and_then(|n| u16::try_from(n).ok())
                    .filter(|n| (200..=599).contains(n))
                    .ok_or("invalid status (200-599)")?;
            }
            "compressible" => {
                shape.kind =
                    if flag(value).ok_or("invalid compressible")? { BodyKind::Compressible } else { BodyKind::Random };
            }
            "close" => shape.close = flag(value).ok_or("invalid close")?,
            "echo" => shape.echo = flag(value).ok_or("invalid echo")?,
            "age" => push_line(&mut shape.extra().lines, b"age", &decode(value).ok_or("invalid age")?),
            "cdn_cache" => {
                let v = decode(value).ok_or("invalid cdn_cache")?;
                push_line(&mut shape.extra().lines, b"cdn-cache-control", &v);
            }
            "header" => {
                let v = decode(value).ok_or("invalid header")?;
                let colon = v.iter().position(|&b| b == b':').ok_or("invalid header (NAME:VALUE)")?;
                let name = &v[..colon];
                if name.is_empty() || !name.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'-') {
                    return Err("invalid header name");
                }
                push_line(&mut shape.extra().lines, name, v[colon + 1..].trim_ascii());
            }
            "cc" => shape.extra().cache_control = Some(decode(value).ok_or("invalid cc")?),
            "date_ago" => shape.extra().date_ago = Some(number().ok_or("invalid date_ago")?),
            "etag" => shape.extra().etag = Some(decode(value).ok_or("invalid etag")?),
            "hints" => shape.extra().hints = flag(value).ok_or("invalid hints")?,
            "ranges" => shape.extra().ranges = flag(value).ok_or("invalid ranges")?,
            "unsafe_status" => {
                let status = number().and_then(|n| u16::try_from(n).ok()).filter(|n| (200..=599).contains(n));
                shape.extra().unsafe_status = Some(status.ok_or("invalid unsafe_status (200-599)")?);
            }
            _ => {}
        }
    }
    Ok(shape)
}

/// The one byte range (first, last) a `Range` value asks of a body of
/// `size` bytes: `Some(Ok(..))` to answer 206, `Some(Err(()))` for 416
/// (the range starts past the end), `None` to send the whole body (not
/// `bytes`, several ranges, or malformed: RFC 9110 §14.2 lets a server ignore it).
pub fn single_range(value: &[u8], size: u64) -> Option<Result<(u64, u64), ()>> {
    let spec = trim(value).strip_prefix(b"bytes=")?;
    let dash = spec.iter().position(|&b| b == b'-')?;
    let (first, last) = (trim(&spec[..dash]), trim(&spec[dash + 1..]));
    match (parse_u64(first), parse_u64(last)) {
        (None, Some(n)) if first.is_empty() => {
            Some(if n == 0 || size == 0 { Err(()) } else { Ok((size.saturating_sub(n), size - 1)) })
        }
        (Some(a), None) if last.is_empty() => Some(if a >= size { Err(()) } else { Ok((a, size - 1)) }),
        (Some(a), Some(b)) if a <= b => Some(if a >= size { Err(()) } else { Ok((a, b.min(size - 1))) }),
        _ => None,
    }
}

/// Appends `name: value\r\n`.
fn push_line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Percent-decodes a query value; `None` for a bad escape or a control
/// character (a header value must not end the line).
fn decode(value: &str) -> Option<Vec<u8>> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                i += 2;
                u8::from_str_radix(hex, 16).ok()?
            }
            b'+' => b' ',
            b => b,
        };
        if b.is_ascii_control() && b != b'\t' {
            return None;
        }
        out.push(b);
        i += 1;
    }
    Some(out)
}

/// `1`/`true`/empty (as in `?echo`) are on, `0`/`false` off.
fn flag(value: &str) -> Option<bool> {
    match value {
        "1" | "true" | "" => Some(true),
        "0" | "false" => Some(false),
        _ => None,
    }
}

fn describe(
    method: &str,
    path: &str,
    query: &str,
    http10: bool,
    headers: &[httparse::Header<'_>],
    peer: SocketAddr,
) -> Vec<u8> {
    let headers: Vec<[String; 2]> =
        headers.iter().map(|h| [h.name.to_owned(), String::from_utf8_lossy(h.value).into_owned()]).collect();
    let description = serde_json::json!({
        "method": method,
        "path": path,
        "query": query,
        "version": if http10 { "HTTP/1.0" } else { "HTTP/1.1" },
        "headers": headers,
        "peer": peer.to_string(),
    });
    let mut body = serde_json::to_vec_pretty(&description).unwrap_or_default();
    body.push(b'\n');
    body
}

fn trim(value: &[u8]) -> &[u8] {
    value.trim_ascii()
}

/// Decimal digits only (no sign, no spaces), at most 19 of them so it cannot overflow.
fn parse_u64(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(digits.iter().fold(0, |n, d| n * 10 + u64::from(d - b'0')))
}

/// Incremental decoder of a chunked request body, reading from the front of a buffer.
#[derive(Debug, Default)]
pub struct ChunkedDecoder {
    state: ChunkState,
    trailer_bytes: usize,
}

#[derive(Debug, Default)]
enum ChunkState {
    #[default]
    Size,
    Data(u64),
    DataEnd,
    Trailers,
    Done,
}

/// One step of [`ChunkedDecoder::step`].
#[derive(Debug, PartialEq, Eq)]
pub enum ChunkStep {
    /// The first `n` bytes of the buffer are body data; the caller consumes them.
    Data(usize),
    /// Read more into the buffer, then step again.
    NeedMore,
    /// The body (trailers included) is complete.
    Done,
}

/// The chunked encoding was malformed.
#[derive(Debug, PartialEq, Eq)]
pub struct BadChunk;

impl ChunkedDecoder {
    /// Consumes framing bytes from `buf` and reports what follows. Data bytes are left in
    /// `buf` for the caller to use and `advance` past.
    pub fn step(&mut self, buf: &mut BytesMut) -> Result<ChunkStep, BadChunk> {
        loop {
            match self.state {
                ChunkState::Size => match httparse::parse_chunk_size(buf) {
                    Ok(httparse::Status::Complete((used, size))) => {
                        buf.advance(used);
                        self.state = if size == 0 { ChunkState::Trailers } else { ChunkState::Data(size) };
                    }
                    Ok(httparse::Status::Partial) if buf.len() < MAX_CHUNK_LINE => return Ok(ChunkStep::NeedMore),
                    _ => return Err(BadChunk),
                },
                ChunkState::Data(left) => {
                    if buf.is_empty() {
                        return Ok(ChunkStep::NeedMore);
                    }
                    let n = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
                    let left = left - n as u64;
                    self.state = if left == 0 { ChunkState::DataEnd } else { ChunkState::Data(left) };
                    return Ok(ChunkStep::Data(n));
                }
                ChunkState::DataEnd => {
                    if buf.len() < 2 {
                        return Ok(ChunkStep::NeedMore);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err(BadChunk);
                    }
                    buf.advance(2);
                    self.state = ChunkState::Size;
                }
                ChunkState::Trailers => {
                    let Some(end) = buf.windows(2).position(|w| w == b"\r\n") else {
                        if self.trailer_bytes + buf.len() > MAX_TRAILERS {
                            return Err(BadChunk);
                        }
                        return Ok(ChunkStep::NeedMore);
                    };
                    self.trailer_bytes += end + 2;
                    if self.trailer_bytes > MAX_TRAILERS {
                        return Err(BadChunk);
                    }
                    buf.advance(end + 2);
                    if end == 0 {
                        self.state = ChunkState::Done;
                    }
                }
                ChunkState::Done => return Ok(ChunkStep::Done),
            }
        }
    }
}

/// How the response body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyLength {
    /// `content-length: N` (also sent for HEAD, for the body a GET would get).
    Length(u64),
    /// `transfer-encoding: chunked`.
    Chunked,
    /// Neither: 204/304, or a body that ends when the connection closes (HTTP/1.0 echo).
    Unframed,
}

/// A response head to append to the output buffer.
#[derive(Clone, Copy, Debug)]
pub struct ResponseHead<'a> {
    /// Status code.
    pub status: u16,
    /// `content-type`, omitted for 204/304.
    pub content_type: &'a str,
    /// Body delimiting.
    pub length: BodyLength,
    /// `cache-control: public, max-age=N` or `no-store`.
    pub cache: Option<u64>,
    /// `x-received-bytes` when the request had a body.
    pub received: Option<u64>,
    /// The connection closes after this response (`connection: close`).
    pub close: bool,
    /// Send `connection: keep-alive` (an HTTP/1.0 client that asked for it).
    pub announce_keep_alive: bool,
    /// Chosen fields ([`Extra`]).
    pub extra: Option<&'a Extra>,
}

impl ResponseHead<'_> {
    /// Appends the head (ending in the blank line) to `out`; `origin` is the prebuilt
    /// `x-origin: NAME\r\n` line.
    pub fn write(&self, origin: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(b"HTTP/1.1 ");
        push_u64(out, u64::from(self.status));
        out.push(b' ');
        out.extend_from_slice(reason(self.status).as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(origin);
        if !matches!(self.status, 204 | 304) {
            out.extend_from_slice(b"content-type: ");
            out.extend_from_slice(self.content_type.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        match self.length {
            BodyLength::Length(n) => {
                out.extend_from_slice(b"content-length: ");
                push_u64(out, n);
                out.extend_from_slice(b"\r\n");
            }
            BodyLength::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
            BodyLength::Unframed => {}
        }
        match (self.cache, self.extra.and_then(|e| e.cache_control.as_deref())) {
            (_, Some(chosen)) => push_line(out, b"cache-control", chosen),
            (Some(max_age), None) => {
                out.extend_from_slice(b"cache-control: public, max-age=");
                push_u64(out, max_age);
                out.extend_from_slice(b"\r\n");
            }
            (None, None) => out.extend_from_slice(b"cache-control: no-store\r\n"),
        }
        if let Some(extra) = self.extra {
            extra.write(out);
        }
        if let Some(received) = self.received {
            out.extend_from_slice(b"x-received-bytes: ");
            push_u64(out, received);
            out.extend_from_slice(b"\r\n");
        }
        if self.close {
            out.extend_from_slice(b"connection: close\r\n");
        } else if self.announce_keep_alive {
            out.extend_from_slice(b"connection: keep-alive\r\n");
        }
        out.extend_from_slice(b"\r\n");
    }
}

/// Appends `n` in decimal.
pub fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// Appends `n` in lowercase hex (chunk sizes).
pub fn push_hex(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 16];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b"0123456789abcdef"[(n % 16) as usize];
        n /= 16;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 4000))
    }

    #[test]
    fn single_ranges_of_a_hundred_bytes() {
        type Expected = Option<Result<(u64, u64), ()>>;
        let table: &[(&str, Expected)] = &[
            ("bytes=0-9", Some(Ok((0, 9)))),
            ("bytes=90-", Some(Ok((90, 99)))),
            ("bytes=-10", Some(Ok((90, 99)))),
            ("bytes=50-500", Some(Ok((50, 99)))),
            ("bytes=100-", Some(Err(()))),
            ("bytes=-0", Some(Err(()))),
            ("bytes=0-1,5-6", None),
            ("bytes=9-1", None),
            ("items=0-1", None),
            ("bytes=x-1", None),
        ];
        for (value, expected) in table {
            assert_eq!(single_range(value.as_bytes(), 100), *expected, "{value}");
        }
    }

    fn complete(raw: &[u8]) -> RequestHead {
        match parse_head(raw, peer()) {
            Parsed::Complete(head) => head,
            other => panic!("expected a complete head, got {other:?}"),
        }
    }

    fn bad(raw: &[u8]) -> &'static str {
        match parse_head(raw, peer()) {
            Parsed::Bad(reason) => reason,
            other => panic!("expected a bad request, got {other:?}"),
        }
    }

    #[test]
    fn query_shapes_the_response() {
        let head = complete(
            b"GET /x?size=10&compressible=1&delay_ms=5&status=503&cache=60&close=1&echo=0&other=z HTTP/1.1\r\n\r\n",
        );
        let expected = Shape {
            size: 10,
            kind: BodyKind::Compressible,
            delay_ms: 5,
            status: 503,
            cache: Some(60),
            close: true,
            echo: false,
            extra: None,
        };
        assert_eq!(head.shape, expected);
        assert_eq!(head.route, Route::Shaped);
    }

    #[test]
    fn keep_alive_follows_version_and_connection() {
        let table: &[(&[u8], bool)] = &[
            (b"GET / HTTP/1.1\r\n\r\n", true),
            (b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n", false),
            (b"GET / HTTP/1.1\r\nconnection: TE, Close\r\n\r\n", false),
            (b"GET / HTTP/1.0\r\n\r\n", false),
            (b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", true),
        ];
        for (raw, keep_alive) in table {
            assert_eq!(complete(raw).keep_alive, *keep_alive, "{}", String::from_utf8_lossy(raw));
        }
    }

    #[test]
    fn framing() {
        let table: &[(&[u8], Framing)] = &[
            (b"POST / HTTP/1.1\r\nContent-Length: 12\r\n\r\n", Framing::Length(12)),
            (b"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", Framing::None),
            (b"POST / HTTP/1.1\r\ncontent-length: 5\r\ncontent-length: 5\r\n\r\n", Framing::Length(5)),
            (b"POST / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n", Framing::Chunked),
        ];
        for (raw, framing) in table {
            assert_eq!(complete(raw).framing, *framing);
        }
    }

    #[test]
    fn malformed_heads_are_bad() {
        let table: &[&[u8]] = &[
            b"GET / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            b"GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
            b"GET / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
            b"GET / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            b"GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"GET /?size=abc HTTP/1.1\r\n\r\n",
            b"GET /?status=99 HTTP/1.1\r\n\r\n",
            b"GET /?status=70000 HTTP/1.1\r\n\r\n",
            b"GET /?echo=maybe HTTP/1.1\r\n\r\n",
            b"GARBAGE\r\n\r\n",
            b"GET / HTTP/2.0\r\n\r\n",
        ];
        for raw in table {
            bad(raw);
        }
        assert!(matches!(parse_head(b"GET / HTTP/1.1\r\nHost: x\r\n", peer()), Parsed::Partial));
    }

    #[test]
    fn chunked_decoder_handles_split_input() {
        let raw = b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nx-trailer: 1\r\n\r\nNEXT";
        // Feed one byte at a time: every boundary must be handled.
        let mut decoder = ChunkedDecoder::default();
        let mut buf = BytesMut::new();
        let mut body = Vec::new();
        let mut fed = 0;
        loop {
            match decoder.step(&mut buf) {
                Ok(ChunkStep::Data(n)) => {
                    body.extend_from_slice(&buf[..n]);
                    buf.advance(n);
                }
                Ok(ChunkStep::NeedMore) => {
                    buf.extend_from_slice(&raw[fed..fed + 1]);
                    fed += 1;
                }
                Ok(ChunkStep::Done) => break,
                Err(BadChunk) => panic!("valid chunked body rejected"),
            }
        }
        assert_eq!(body, b"hello world");
        assert_eq!(&raw[fed..], b"NEXT");
        assert!(buf.is_empty());
    }

    #[test]
    fn chunked_decoder_rejects_garbage() {
        for raw in [&b"zz\r\n"[..], b"3\r\nabcX\r\n", b"3\nabc"] {
            let mut buf = BytesMut::from(raw);
            let mut decoder = ChunkedDecoder::default();
            let result = loop {
                match decoder.step(&mut buf) {
                    Ok(ChunkStep::Data(n)) => buf.advance(n),
                    other => break other,
                }
            };
            assert_eq!(result, Err(BadChunk), "{}", String::from_utf8_lossy(raw));
        }
    }

    #[test]
    fn response_head_shape() {
        let mut out = Vec::new();
        ResponseHead {
            status: 200,
            content_type: "text/plain",
            length: BodyLength::Length(1234),
            cache: None,
            received: Some(7),
            close: true,
            announce_keep_alive: false,
            extra: None,
        }
        .write(b"x-origin: a\r\n", &mut out);
        assert_eq!(
            out,
            b"HTTP/1.1 200 OK\r\nx-origin: a\r\ncontent-type: text/plain\r\ncontent-length: 1234\r\n\
              cache-control: no-store\r\nx-received-bytes: 7\r\nconnection: close\r\n\r\n"
        );
        let mut hex = Vec::new();
        push_hex(&mut hex, 0x1f0);
        assert_eq!(hex, b"1f0");
    }
}
