//! HTTP/2 request heads and trailers checked against RFC 9113 8, and the
//! request turned into the head model the pipeline reads ([`RequestHead`]
//! and [`Field`] ranges over one buffer) without HTTP/1.1 text.
//!
//! Malformed (a stream error, PROTOCOL_ERROR): an uppercase or invalid field
//! name, a value with NUL, CR or LF or leading/trailing whitespace, an
//! unknown, repeated, late or missing pseudo-header, a response
//! pseudo-header, a connection-specific field, `te` other than `trailers`,
//! an invalid `content-length`, pseudo-headers in trailers.
//!
//! What the pipeline gets: `:method`, `:path` (the authority for CONNECT) as
//! the target, `:authority` as the `host` field (it wins over a `host`
//! field, RFC 9113 8.3.1), split `cookie` fields joined with `; ` (8.2.3),
//! every other field in order. Framing: no body when END_STREAM came with
//! the head, the client's `content-length` when it gave one, else
//! [`Framing::Chunked`] — a body of unknown length, which the pipeline sends
//! on chunked to an HTTP/1.1 server.

use std::ops::Range;

use crate::parse::{Connection, Field, Framing, RequestHead, Version};

/// Why a request or trailer block is malformed.
pub type Malformed = &'static str;

/// A decoded request: `buf` holds every name and value the ranges index.
#[derive(Debug, Default)]
pub struct Request {
    /// Every decoded name and value (and the joined cookie, and `host`).
    pub buf: Vec<u8>,
    /// The fields the pipeline reads (no pseudo-headers), once checked;
    /// as decoded before.
    pub fields: Vec<Field>,
    /// The head, once checked.
    pub head: Option<RequestHead>,
    /// `:scheme`, when given (not for CONNECT).
    pub scheme: Option<Range<usize>>,
    /// The client's `content-length`, which the DATA frames must add up to.
    pub content_length: Option<u64>,
    /// The decoded field list's allocation, kept for the next request.
    spare: Vec<Field>,
}

impl Request {
    /// Empties the request for the next block, keeping its allocations.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.fields.clear();
        self.head = None;
        self.scheme = None;
        self.content_length = None;
    }

    /// The bytes a range indexes.
    pub fn get(&self, r: &Range<usize>) -> &[u8] {
        &self.buf[r.clone()]
    }
}

/// A valid field name: lowercase token characters (RFC 9113 8.2.1, RFC 9110 5.6.2).
pub fn valid_name(name: &[u8]) -> bool {
    !name.is_empty() && name.iter().all(|&b| NAME_BYTE[b as usize])
}

/// The bytes of a valid HTTP/2 field name: `tchar` without upper case, by
/// byte value (one load per byte on the hot path of every request head).
static NAME_BYTE: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_lowercase()
            || c.is_ascii_digit()
            || matches!(
                c,
                b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+' | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~'
            );
        b += 1;
    }
    t
};

/// A valid field value: no NUL, CR, LF, no whitespace at either end (8.2.1).
pub fn valid_value(value: &[u8]) -> bool {
    let edge = |b: Option<&u8>| matches!(b, Some(b' ' | b'\t'));
    !edge(value.first()) && !edge(value.last()) && !has_nul_cr_lf(value)
}

/// Whether `bytes` holds a NUL, CR or LF: eight bytes per step (a word's
/// zero bytes found with the usual bit trick, after XOR with CR and LF), the
/// rest one by one. `memchr3` loses to this on the short values of a head.
fn has_nul_cr_lf(bytes: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let zero_byte = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS != 0;
    let mut words = bytes.chunks_exact(8);
    for w in words.by_ref() {
        let x = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
        if zero_byte(x) || zero_byte(x ^ (ONES * u64::from(b'\r'))) || zero_byte(x ^ (ONES * u64::from(b'\n'))) {
            return true;
        }
    }
    words.remainder().iter().any(|&b| b == 0 || b == b'\r' || b == b'\n')
}

/// Fields HTTP/2 forbids (8.2.2); `te` is checked on its own.
pub fn connection_specific(name: &[u8]) -> bool {
    matches!(name, b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding" | b"upgrade")
}

fn parse_length(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    v.iter().try_fold(0u64, |n, &d| n.checked_mul(10)?.checked_add(u64::from(d - b'0')))
}

/// The pseudo-headers of a request, as ranges.
#[derive(Default)]
struct Pseudo {
    method: Option<Range<usize>>,
    scheme: Option<Range<usize>>,
    authority: Option<Range<usize>>,
    path: Option<Range<usize>>,
}

impl Pseudo {
    fn set(&mut self, name: &[u8], value: Range<usize>) -> Result<(), Malformed> {
        let slot = match name {
            b":method" => &mut self.method,
            b":scheme" => &mut self.scheme,
            b":authority" => &mut self.authority,
            b":path" => &mut self.path,
            _ => return Err("unknown pseudo-header"),
        };
        if slot.replace(value).is_some() {
            return Err("repeated pseudo-header");
        }
        Ok(())
    }
}

/// Checks the decoded request in `req` (its `fields` as decoded, pseudo-
/// headers included) and rewrites its field list into what the pipeline
/// reads; `end_stream`: the HEADERS frame ended the stream.
pub fn request(req: &mut Request, end_stream: bool) -> Result<(), Malformed> {
    let decoded = std::mem::take(&mut req.fields);
    let mut fields = std::mem::take(&mut req.spare);
    fields.clear();
    let mut pseudo = Pseudo::default();
    let mut regular = false;
    let mut host: Option<Range<usize>> = None;
    let mut cookies = 0usize;
    let mut head = RequestHead {
        len: 0,
        method: 0..0,
        target: 0..0,
        version: Version::Http11,
        framing: Framing::Empty,
        host: None,
        connection: Connection::default(),
        expect_continue: false,
        upgrade: None,
        te_trailers: false,
    };
    for f in &decoded {
        let (name, value) = (&req.buf[f.name.clone()], &req.buf[f.value.clone()]);
        if name.first() == Some(&b':') {
            if regular {
                return Err("pseudo-header after a regular field");
            }
            if !valid_value(value) {
                return Err("invalid pseudo-header value");
            }
            pseudo.set(name, f.value.clone())?;
            continue;
        }
        regular = true;
        if !valid_name(name) {
            return Err("invalid field name");
        }
        if !valid_value(value) {
            return Err("invalid field value");
        }
        if connection_specific(name) {
            return Err("connection-specific field");
        }
        match name {
            b"te" => {
                if !value.eq_ignore_ascii_case(b"trailers") {
                    return Err("te other than trailers");
                }
                head.te_trailers = true;
            }
            b"content-length" => {
                let n = parse_length(value).ok_or("invalid content-length")?;
                if req.content_length.is_some_and(|prev| prev != n) {
                    return Err("conflicting content-length");
                }
                req.content_length = Some(n);
            }
            b"host" => {
                host.get_or_insert(f.value.clone());
                continue;
            }
            b"cookie" => cookies += 1,
            b"expect" => head.expect_continue |= value.eq_ignore_ascii_case(b"100-continue"),
            _ => {}
        }
        fields.push(f.clone());
    }
    let method = pseudo.method.ok_or("missing :method")?;
    if req.buf[method.clone()] == *b"CONNECT" {
        // No extended CONNECT (RFC 8441): only the authority.
        if pseudo.scheme.is_some() || pseudo.path.is_some() {
            return Err(":scheme or :path in CONNECT");
        }
        head.target = pseudo.authority.clone().ok_or("missing :authority in CONNECT")?;
    } else {
        let (Some(scheme), Some(path)) = (pseudo.scheme.clone(), pseudo.path) else {
            return Err("missing :scheme or :path");
        };
        let p = &req.buf[path.clone()];
        if p.is_empty() || !(p[0] == b'/' || p == b"*") || p.iter().any(|&b| b <= b' ' || b == 0x7f) {
            return Err("invalid :path");
        }
        if req.buf[scheme].is_empty() {
            return Err("empty :scheme");
        }
        head.target = path;
    }
    if !req.buf[method.clone()].iter().all(|&b| b.is_ascii_graphic()) || method.is_empty() {
        return Err("invalid :method");
    }
    head.method = method;
    // `:authority` wins over `host`; either reaches the pipeline as `host`.
    let authority = pseudo.authority.or(host);
    if let Some(a) = authority {
        if req.buf[a.clone()].iter().any(|&b| b <= b' ' || b == 0x7f) {
            return Err("invalid :authority");
        }
        let name = req.buf.len();
        req.buf.extend_from_slice(b"host");
        fields.insert(0, Field { name: name..name + 4, value: a.clone() });
        head.host = Some(a);
    }
    if cookies > 1 {
        join_cookies(&mut req.buf, &mut fields);
    }
    head.framing = match (end_stream, req.content_length) {
        (true, _) => Framing::Empty,
        (false, Some(n)) => Framing::Length(n),
        (false, None) => Framing::Chunked,
    };
    if end_stream && req.content_length.is_some_and(|n| n != 0) {
        return Err("content-length without DATA");
    }
    req.scheme = pseudo.scheme;
    req.head = Some(head);
    req.fields = fields;
    req.spare = decoded;
    Ok(())
}

/// Joins every `cookie` field into the first one's place (RFC 9113 8.2.3).
fn join_cookies(buf: &mut Vec<u8>, fields: &mut Vec<Field>) {
    let name = buf.len();
    buf.extend_from_slice(b"cookie");
    let value = buf.len();
    let mut first = None;
    let mut i = 0;
    while i < fields.len() {
        if buf[fields[i].name.clone()] != *b"cookie" {
            i += 1;
            continue;
        }
        let crumb = fields[i].value.clone();
        if first.is_some() {
            buf.extend_from_slice(b"; ");
        }
        buf.extend_from_within(crumb);
        if first.is_none() {
            first = Some(i);
            i += 1;
        } else {
            fields.remove(i);
        }
    }
    if let Some(at) = first {
        fields[at] = Field { name: name..name + 6, value: value..buf.len() };
    }
}

/// Checks a trailer block (8.1): no pseudo-headers, valid fields, nothing
/// connection-specific.
pub fn trailers(buf: &[u8], fields: &[Field]) -> Result<(), Malformed> {
    for f in fields {
        let (name, value) = (&buf[f.name.clone()], &buf[f.value.clone()]);
        if name.first() == Some(&b':') {
            return Err("pseudo-header in trailers");
        }
        if !valid_name(name) || !valid_value(value) {
            return Err("invalid trailer field");
        }
        if connection_specific(name) || name == b"te" {
            return Err("connection-specific trailer field");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{has_nul_cr_lf, valid_name, valid_value};

    /// Every byte value at every place of values up to 20 bytes long, against
    /// the byte-by-byte rule.
    #[test]
    fn values_refuse_nul_cr_lf_wherever_they_stand() {
        for len in 1..=20usize {
            for at in 0..len {
                for b in 0..=255u8 {
                    let mut v = vec![b'x'; len];
                    v[at] = b;
                    assert_eq!(has_nul_cr_lf(&v), matches!(b, 0 | b'\r' | b'\n'), "byte {b:#04x} at {at} of {len}");
                }
            }
        }
        assert!(!has_nul_cr_lf(b""));
        assert!(valid_value(b"text/html; q=0.9") && !valid_value(b" x") && !valid_value(b"x\t"));
        assert!(!valid_value(b"a\r\nset-cookie: x"), "a CR LF in a value");
    }

    /// Every byte value, against RFC 9110's `tchar` less upper case.
    #[test]
    fn field_names_take_lowercase_token_characters_only() {
        let tchar = b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz";
        for b in 0..=255u8 {
            assert_eq!(valid_name(&[b]), tchar.contains(&b), "byte {b:#04x}");
            assert_eq!(valid_name(&[b'a', b, b'z']), tchar.contains(&b), "byte {b:#04x} inside");
        }
        assert!(!valid_name(b""));
    }
}
