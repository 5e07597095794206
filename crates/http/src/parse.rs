//! Strict HTTP/1.x head parsing: request heads from clients, response heads
//! from servers.
//!
//! `httparse` does the tokenising (and already refuses obs-fold, bare CR,
//! spaces before the colon and control characters); this module adds the
//! message-framing rules of RFC 9112 that keep a proxy safe from request
//! smuggling: a message has exactly one body length, `Transfer-Encoding` must
//! end in `chunked` and never comes with `Content-Length`, duplicate lengths
//! must agree. A head is returned as byte offsets into the buffer it was read
//! from, so parsing allocates nothing beyond the reused header index.

use std::mem::MaybeUninit;
use std::ops::Range;

use crate::error::{Kind, ProxyError};

/// How many header fields are parsed at most without a heap array.
const STACK_HEADERS: usize = 128;

/// HTTP minor version (1.0 or 1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// HTTP/1.0: keep-alive only when asked for.
    Http10,
    /// HTTP/1.1: keep-alive unless `Connection: close`.
    Http11,
}

/// How the body of a message is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body.
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Until the sender closes the connection (responses only).
    UntilClose,
}

/// Position of one header field in the head buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Byte range of the name.
    pub name: Range<usize>,
    /// Byte range of the value (surrounding whitespace trimmed).
    pub value: Range<usize>,
}

/// Hop-by-hop facts from the `Connection` header and friends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Connection {
    /// `Connection: close` was present.
    pub close: bool,
    /// `Connection: keep-alive` was present.
    pub keep_alive: bool,
    /// Other tokens named extra hop-by-hop headers to remove.
    pub other_tokens: bool,
    /// `Connection: upgrade` was present (a protocol switch is asked for).
    pub upgrade: bool,
}

/// A parsed request head; all ranges index the buffer it was parsed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// Length of the head in bytes, final CRLF included.
    pub len: usize,
    /// Method token.
    pub method: Range<usize>,
    /// Request target as sent.
    pub target: Range<usize>,
    /// Protocol version.
    pub version: Version,
    /// Body framing.
    pub framing: Framing,
    /// Value of the `Host` header, if any.
    pub host: Option<Range<usize>>,
    /// Connection options.
    pub connection: Connection,
    /// `Expect: 100-continue` was present.
    pub expect_continue: bool,
    /// Value of the `Upgrade` header, if any (e.g. `websocket`).
    pub upgrade: Option<Range<usize>>,
    /// `TE` lists `trailers`: the client accepts trailer fields (gRPC
    /// clients always send it), so the response's trailers are worth reading.
    pub te_trailers: bool,
}

/// A parsed response head; all ranges index the buffer it was parsed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    /// Length of the head in bytes.
    pub len: usize,
    /// Status code.
    pub status: u16,
    /// Protocol version.
    pub version: Version,
    /// Body framing, before accounting for HEAD requests and bodiless statuses.
    pub framing: Framing,
    /// Connection options.
    pub connection: Connection,
}

/// Limits applied while parsing a request head.
#[derive(Debug, Clone, Copy)]
pub struct HeadLimits {
    /// Largest head in bytes.
    pub max_bytes: usize,
    /// Most header fields.
    pub max_fields: usize,
}

fn bad(why: &'static str) -> ProxyError {
    ProxyError::new(Kind::BadRequest(why))
}

fn bad_response(why: &'static str) -> ProxyError {
    ProxyError::new(Kind::BadResponse(why))
}

fn offset(buf: &[u8], part: &[u8]) -> Range<usize> {
    let start = part.as_ptr() as usize - buf.as_ptr() as usize;
    start..start + part.len()
}

/// Parses a request head from the start of `buf`.
///
/// Returns `Ok(None)` while the head is incomplete and still within limits;
/// header positions are written to `fields` (cleared first).
pub fn parse_request(
    buf: &[u8],
    limits: HeadLimits,
    fields: &mut Vec<Field>,
) -> Result<Option<RequestHead>, ProxyError> {
    fields.clear();
    // Left uninitialised: the parser writes the headers it finds, and
    // zeroing 128 of them (4 KiB) cost more than parsing a small head.
    let mut stack = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; STACK_HEADERS];
    let mut heap;
    let headers: &mut [MaybeUninit<httparse::Header<'_>>] = if limits.max_fields < STACK_HEADERS {
        &mut stack[..limits.max_fields + 1]
    } else {
        heap = Box::new_uninit_slice(limits.max_fields + 1);
        &mut heap
    };
    let mut req = httparse::Request::new(&mut []);
    let len = match req.parse_with_uninit_headers(buf, headers) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => {
            if buf.len() >= limits.max_bytes {
                return Err(ProxyError::new(Kind::HeaderTooLarge));
            }
            return Ok(None);
        }
        Err(httparse::Error::TooManyHeaders) => return Err(ProxyError::new(Kind::HeaderTooLarge)),
        Err(httparse::Error::Version) => return Err(bad("unsupported protocol version")),
        Err(_) => return Err(bad("malformed request head")),
    };
    if len > limits.max_bytes {
        return Err(ProxyError::new(Kind::HeaderTooLarge));
    }
    if req.headers.len() > limits.max_fields {
        return Err(ProxyError::new(Kind::HeaderTooLarge));
    }
    let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version) else {
        return Err(bad("malformed request line"));
    };
    let version = if minor == 0 { Version::Http10 } else { Version::Http11 };
    let method_range = offset(buf, method.as_bytes());
    let target_range = offset(buf, target.as_bytes());
    check_target(method, target)?;

    let mut head = RequestHead {
        len,
        method: method_range,
        target: target_range,
        version,
        framing: Framing::Empty,
        host: None,
        connection: Connection::default(),
        expect_continue: false,
        upgrade: None,
        te_trailers: false,
    };
    let mut length: Option<u64> = None;
    let mut chunked = false;
    for h in req.headers.iter() {
        let value = trim(h.value);
        fields.push(Field { name: offset(buf, h.name.as_bytes()), value: offset(buf, value) });
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            let n = parse_length(value).ok_or_else(|| bad("invalid content-length"))?;
            if length.is_some_and(|prev| prev != n) {
                return Err(bad("conflicting content-length"));
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            if chunked || !value.eq_ignore_ascii_case(b"chunked") {
                return Err(bad("unsupported transfer-encoding"));
            }
            chunked = true;
        } else if name.eq_ignore_ascii_case(b"host") {
            if head.host.is_some() {
                return Err(bad("duplicate host"));
            }
            head.host = Some(offset(buf, value));
        } else if name.eq_ignore_ascii_case(b"connection") {
            head.connection = parse_connection(value, head.connection);
        } else if name.eq_ignore_ascii_case(b"upgrade") {
            head.upgrade = Some(offset(buf, value));
        } else if name.eq_ignore_ascii_case(b"te") {
            // `TE: trailers, gzip;q=0.5` (RFC 9110 10.1.4): a list of codings with parameters.
            head.te_trailers |= value
                .split(|&b| b == b',')
                .any(|t| trim(t.split(|&b| b == b';').next().unwrap_or(t)).eq_ignore_ascii_case(b"trailers"));
        } else if name.eq_ignore_ascii_case(b"expect") {
            if !value.eq_ignore_ascii_case(b"100-continue") {
                return Err(ProxyError::new(Kind::ExpectationFailed));
            }
            head.expect_continue = true;
        }
    }
    head.framing = match (length, chunked) {
        (Some(_), true) => return Err(bad("content-length with transfer-encoding")),
        (None, true) if version == Version::Http10 => return Err(bad("transfer-encoding in HTTP/1.0")),
        (None, true) => Framing::Chunked,
        (Some(0), false) | (None, false) => Framing::Empty,
        (Some(n), false) => Framing::Length(n),
    };
    if version == Version::Http11 && head.host.is_none() {
        return Err(bad("missing host"));
    }
    Ok(Some(head))
}

/// Parses a response head from the start of `buf`; `Ok(None)` while incomplete.
/// Header positions are written to `fields` (cleared first).
pub fn parse_response(
    buf: &[u8],
    max_bytes: usize,
    fields: &mut Vec<Field>,
) -> Result<Option<ResponseHead>, ProxyError> {
    fields.clear();
    let mut headers = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; STACK_HEADERS];
    let mut res = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default().parse_response_with_uninit_headers(&mut res, buf, &mut headers) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => {
            if buf.len() >= max_bytes {
                return Err(bad_response("response head too large"));
            }
            return Ok(None);
        }
        Err(httparse::Error::TooManyHeaders) => return Err(bad_response("too many response headers")),
        Err(_) => return Err(bad_response("malformed response head")),
    };
    let (Some(status), Some(minor)) = (res.code, res.version) else {
        return Err(bad_response("malformed status line"));
    };
    if !(100..=999).contains(&status) {
        return Err(bad_response("invalid status code"));
    }
    let mut connection = Connection::default();
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut encoded = false;
    for h in res.headers.iter() {
        let name = h.name.as_bytes();
        let value = trim(h.value);
        fields.push(Field { name: offset(buf, name), value: offset(buf, value) });
        if name.eq_ignore_ascii_case(b"content-length") {
            let n = parse_length(value).ok_or_else(|| bad_response("invalid content-length"))?;
            if length.is_some_and(|prev| prev != n) {
                return Err(bad_response("conflicting content-length"));
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            encoded = true;
            // Only the final coding decides the framing (RFC 9112 6.3).
            chunked = last_token(value).eq_ignore_ascii_case(b"chunked");
        } else if name.eq_ignore_ascii_case(b"connection") {
            connection = parse_connection(value, connection);
        }
    }
    let framing = if encoded {
        if chunked {
            Framing::Chunked
        } else {
            Framing::UntilClose
        }
    } else {
        match length {
            Some(n) => Framing::Length(n),
            None => Framing::UntilClose,
        }
    };
    let version = if minor == 0 { Version::Http10 } else { Version::Http11 };
    Ok(Some(ResponseHead { len, status, version, framing, connection }))
}

/// Whether the response to a request with `method` and this status carries a body.
pub fn response_has_body(head_request: bool, status: u16) -> bool {
    !(head_request || (100..200).contains(&status) || status == 204 || status == 304)
}

fn check_target(method: &str, target: &str) -> Result<(), ProxyError> {
    let t = target.as_bytes();
    if t.first() == Some(&b'/') {
        return Ok(());
    }
    if t == b"*" && method == "OPTIONS" {
        return Ok(());
    }
    if has_http_scheme(t) {
        return Ok(());
    }
    if method == "CONNECT" {
        return Err(bad("CONNECT is not supported"));
    }
    Err(bad("invalid request target"))
}

/// Whether a target is in absolute form (`http://…` or `https://…`).
pub fn has_http_scheme(t: &[u8]) -> bool {
    starts_with_ignore_case(t, b"http://") || starts_with_ignore_case(t, b"https://")
}

/// ASCII case-insensitive prefix test.
pub fn starts_with_ignore_case(v: &[u8], prefix: &[u8]) -> bool {
    v.len() >= prefix.len() && v[..prefix.len()].eq_ignore_ascii_case(prefix)
}

fn parse_length(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    v.iter().try_fold(0u64, |acc, d| acc.checked_mul(10)?.checked_add(u64::from(d - b'0')))
}

fn parse_connection(value: &[u8], mut c: Connection) -> Connection {
    for token in value.split(|&b| b == b',') {
        let token = trim(token);
        if token.eq_ignore_ascii_case(b"close") {
            c.close = true;
        } else if token.eq_ignore_ascii_case(b"keep-alive") {
            c.keep_alive = true;
        } else if token.eq_ignore_ascii_case(b"upgrade") {
            c.upgrade = true;
        } else if !token.is_empty() {
            c.other_tokens = true;
        }
    }
    c
}

fn last_token(value: &[u8]) -> &[u8] {
    trim(value.rsplit(|&b| b == b',').next().unwrap_or(value))
}

/// Trims spaces and tabs from both ends.
pub fn trim(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
