//! HTTP/2 response heads from servers, checked against RFC 9113 8 as
//! strictly as [`super::head`] checks requests from clients, for the client
//! side of a connection ([`super::client`]).
//!
//! Malformed (a stream error, PROTOCOL_ERROR): a missing, repeated, late or
//! unknown pseudo-header (a request one included), a `:status` that is not
//! three digits from 100 to 999, 101 (HTTP/2 has no protocol switch, 8.6),
//! an uppercase or invalid field name, a value with NUL, CR or LF or
//! whitespace at either end, a connection-specific field or `te`, an invalid
//! or conflicting `content-length`.
//!
//! What the caller gets: the status, and every regular field in order as
//! ranges over one buffer (the pseudo-header left out), with the
//! `content-length` the DATA frames must add up to.

use super::head::{connection_specific, valid_name, valid_value, Malformed};
use crate::parse::Field;

/// A decoded response head: `buf` holds every name and value the ranges index.
#[derive(Debug, Default)]
pub struct Response {
    /// The status code (100 to 999).
    pub status: u16,
    /// Every decoded name and value.
    pub buf: Vec<u8>,
    /// The regular fields, once checked (as decoded before, `:status` included).
    pub fields: Vec<Field>,
    /// The server's `content-length`, when it gave one.
    pub content_length: Option<u64>,
}

impl Response {
    /// Empties the response for the next block, keeping its allocations.
    pub fn clear(&mut self) {
        self.status = 0;
        self.buf.clear();
        self.fields.clear();
        self.content_length = None;
    }

    /// The bytes a range indexes.
    pub fn get(&self, r: &std::ops::Range<usize>) -> &[u8] {
        self.buf.get(r.clone()).unwrap_or_default()
    }

    /// Each regular field's name and value.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.fields.iter().map(|f| (self.get(&f.name), self.get(&f.value)))
    }

    /// Whether this is an interim (1xx) response.
    pub fn is_interim(&self) -> bool {
        (100..200).contains(&self.status)
    }
}

/// A `content-length` value: digits only, no overflow.
pub fn parse_length(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    v.iter().try_fold(0u64, |n, &d| n.checked_mul(10)?.checked_add(u64::from(d - b'0')))
}

fn parse_status(v: &[u8]) -> Option<u16> {
    let [a, b, c] = *v else { return None };
    if !(a.is_ascii_digit() && b.is_ascii_digit() && c.is_ascii_digit()) || a == b'0' {
        return None;
    }
    Some(u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0'))
}

/// Checks the decoded response in `resp` (its `fields` as decoded,
/// `:status` included) and keeps only its regular fields;
/// `end_stream`: the HEADERS frame ended the stream.
pub fn response(resp: &mut Response, end_stream: bool) -> Result<(), Malformed> {
    let mut status = None;
    let mut regular = false;
    let mut kept = 0;
    for i in 0..resp.fields.len() {
        let f = resp.fields[i].clone();
        let (name, value) = (&resp.buf[f.name.clone()], &resp.buf[f.value.clone()]);
        if name.first() == Some(&b':') {
            if regular {
                return Err("pseudo-header after a regular field");
            }
            if name != b":status" {
                return Err("pseudo-header other than :status in a response");
            }
            if status.replace(parse_status(value).ok_or("invalid :status")?).is_some() {
                return Err("repeated :status");
            }
            continue;
        }
        regular = true;
        if !valid_name(name) {
            return Err("invalid field name");
        }
        if !valid_value(value) {
            return Err("invalid field value");
        }
        if connection_specific(name) || name == b"te" {
            return Err("connection-specific field");
        }
        if name == b"content-length" {
            let n = parse_length(value).ok_or("invalid content-length")?;
            if resp.content_length.is_some_and(|prev| prev != n) {
                return Err("conflicting content-length");
            }
            resp.content_length = Some(n);
        }
        resp.fields[kept] = f;
        kept += 1;
    }
    resp.fields.truncate(kept);
    resp.status = status.ok_or("missing :status")?;
    if resp.status == 101 {
        return Err("101 in HTTP/2");
    }
    if resp.is_interim() && end_stream {
        return Err("interim response with END_STREAM");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(fields: &[(&str, &str)]) -> Response {
        let mut r = Response::default();
        for (n, v) in fields {
            let name = r.buf.len()..r.buf.len() + n.len();
            r.buf.extend_from_slice(n.as_bytes());
            let value = r.buf.len()..r.buf.len() + v.len();
            r.buf.extend_from_slice(v.as_bytes());
            r.fields.push(Field { name, value });
        }
        r
    }

    #[test]
    fn a_valid_head_keeps_its_regular_fields() {
        let mut r = decoded(&[(":status", "200"), ("content-type", "text/plain"), ("content-length", "5")]);
        assert_eq!(response(&mut r, false), Ok(()));
        assert_eq!(r.status, 200);
        assert_eq!(r.content_length, Some(5));
        let kept: Vec<_> = r.iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
        assert_eq!(
            kept,
            [(b"content-type".to_vec(), b"text/plain".to_vec()), (b"content-length".to_vec(), b"5".to_vec())]
        );
        let mut early = decoded(&[(":status", "103"), ("link", "</a>; rel=preload")]);
        assert_eq!(response(&mut early, false), Ok(()));
        assert!(early.is_interim());
    }

    /// Decoded fields, END_STREAM, and why they are malformed.
    type Case = (&'static [(&'static str, &'static str)], bool, &'static str);

    #[test]
    fn each_rule_makes_a_head_malformed() {
        let table: &[Case] = &[
            (&[("content-type", "x")], false, "missing :status"),
            (&[(":status", "200"), (":status", "200")], false, "repeated :status"),
            (&[(":status", "2000")], false, "invalid :status"),
            (&[(":status", "20x")], false, "invalid :status"),
            (&[(":status", "099")], false, "invalid :status"),
            (&[(":status", "101")], false, "101 in HTTP/2"),
            (&[(":status", "100")], true, "interim response with END_STREAM"),
            (&[(":status", "200"), (":path", "/")], false, "pseudo-header other than :status in a response"),
            (&[("x", "1"), (":status", "200")], false, "pseudo-header after a regular field"),
            (&[(":status", "200"), ("X-Upper", "1")], false, "invalid field name"),
            (&[(":status", "200"), ("bad name", "1")], false, "invalid field name"),
            (&[(":status", "200"), ("x", "a\rb")], false, "invalid field value"),
            (&[(":status", "200"), ("x", "a\0b")], false, "invalid field value"),
            (&[(":status", "200"), ("x", " a")], false, "invalid field value"),
            (&[(":status", "200"), ("connection", "close")], false, "connection-specific field"),
            (&[(":status", "200"), ("transfer-encoding", "chunked")], false, "connection-specific field"),
            (&[(":status", "200"), ("te", "trailers")], false, "connection-specific field"),
            (&[(":status", "200"), ("content-length", "-1")], false, "invalid content-length"),
            (
                &[(":status", "200"), ("content-length", "1"), ("content-length", "2")],
                false,
                "conflicting content-length",
            ),
        ];
        for (fields, end, why) in table {
            let mut r = decoded(fields);
            assert_eq!(response(&mut r, *end), Err(*why), "{fields:?}");
        }
    }
}
