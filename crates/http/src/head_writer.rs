//! Head writers: the response head the pipeline builds (status, the fields
//! it keeps, the rules' edits, the fields it adds), written in the form the
//! client's protocol takes.
//!
//! - [`Http1Head`] writes HTTP/1.1 bytes into a buffer: exactly the bytes the
//!   pipeline wrote before there were writers (tested as a table in
//!   `head_writer_tests`), so an HTTP/1.1 client sees no change.
//! - [`FieldList`] collects an HTTP/2 header list: the status and name/value
//!   pairs in one buffer, without the connection-specific fields (RFC 9113
//!   8.2.2), which the HTTP/2 codec HPACK-encodes straight into its output.
//!   No HTTP/1.1 text is written for it, and none is parsed again.
//!
//! The pipeline's phases call the same [`HeadWriter`] operations in the same
//! order whatever the client speaks ([`crate::rewrite::write_response_head`],
//! [`crate::rewrite::write_local_head`], then persistence's `set-cookie`,
//! `alt-svc`, the compression edits).
//!
//! Invariants: a [`FieldList`] never holds `connection`, `keep-alive`,
//! `proxy-connection`, `transfer-encoding`, `upgrade` or `te`; its
//! [`FieldList::framing`] is the framing the body that follows is written
//! with (what an HTTP/1.1 parse of the same head would have found).

use std::ops::Range;

use crate::compress::Coding;
use crate::error::reason_phrase;
use crate::parse::{Field, Framing};

/// Writes a response head, one operation at a time.
pub trait HeadWriter {
    /// Starts the head (clearing what a previous one left): the status, and
    /// the server's reason phrase (empty: the standard one).
    fn start(&mut self, status: u16, reason: &[u8]);
    /// Adds a field.
    fn field(&mut self, name: &[u8], value: &[u8]);
    /// Ends the head.
    fn end(&mut self);
    /// Adds a field to the ended head, after every other one (persistence's
    /// `set-cookie`, `retry-after`).
    fn append(&mut self, name: &[u8], value: &[u8]);
    /// Adds `alt-svc: h3=":PORT"; ma=86400` as the first field of the ended
    /// head, unless it has an `alt-svc` already (a server's own, or one
    /// stored with a cached response).
    fn alt_svc(&mut self, port: u16);
    /// Edits the ended head for a body sent with `coding` (`chunked`: in
    /// chunked coding): framing and `content-encoding` fields replaced, a
    /// strong `etag` made weak, `accept-encoding` merged into `vary`. With
    /// `None`, only the `vary` merge (a body left unencoded because the
    /// client did not accept the coding).
    fn encoded(&mut self, coding: Option<Coding>, chunked: bool);
}

/// The HTTP/1.1 writer: the head as bytes in `out`.
#[derive(Debug)]
pub struct Http1Head<'a> {
    /// The head's bytes (cleared by [`HeadWriter::start`]).
    pub out: &'a mut Vec<u8>,
}

impl<'a> Http1Head<'a> {
    /// A writer into `out`.
    pub fn new(out: &'a mut Vec<u8>) -> Self {
        Http1Head { out }
    }
}

/// One `name: value` line of an HTTP/1.1 head.
pub(crate) fn write_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

impl HeadWriter for Http1Head<'_> {
    fn start(&mut self, status: u16, reason: &[u8]) {
        let out = &mut *self.out;
        out.clear();
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
        out.push(b' ');
        if reason.is_empty() {
            out.extend_from_slice(reason_phrase(status).as_bytes());
        } else {
            out.extend_from_slice(reason);
        }
        out.extend_from_slice(b"\r\n");
    }

    #[inline]
    fn field(&mut self, name: &[u8], value: &[u8]) {
        write_field(self.out, name, value);
    }

    fn end(&mut self) {
        self.out.extend_from_slice(b"\r\n");
    }

    fn append(&mut self, name: &[u8], value: &[u8]) {
        // Before the head's final CRLF.
        self.out.truncate(self.out.len().saturating_sub(2));
        write_field(self.out, name, value);
        self.out.extend_from_slice(b"\r\n");
    }

    fn alt_svc(&mut self, port: u16) {
        let out = &mut *self.out;
        let head_end = memchr::memmem::find(out, b"\r\n\r\n").unwrap_or(out.len());
        let has_one = out[..head_end]
            .split(|&b| b == b'\n')
            .any(|line| line.len() > 8 && line[..8].eq_ignore_ascii_case(b"alt-svc:"));
        if has_one {
            return;
        }
        let at = memchr::memchr(b'\n', out).map_or(0, |i| i + 1);
        let mut field = Vec::with_capacity(40);
        field.extend_from_slice(b"alt-svc: ");
        field.extend_from_slice(&alt_svc_value(port));
        field.extend_from_slice(b"\r\n");
        out.splice(at..at, field);
    }

    fn encoded(&mut self, coding: Option<Coding>, chunked: bool) {
        match coding {
            Some(coding) => crate::compress::rewrite_head(self.out, coding, chunked),
            None => crate::compress::add_vary(self.out),
        }
    }
}

/// The `alt-svc` value advertising HTTP/3 on `port`.
fn alt_svc_value(port: u16) -> Vec<u8> {
    let mut v = Vec::with_capacity(24);
    v.extend_from_slice(b"h3=\":");
    v.extend_from_slice(itoa::Buffer::new().format(port).as_bytes());
    v.extend_from_slice(b"\"; ma=86400");
    v
}

/// Whether `name` may not appear in an HTTP/2 (or HTTP/3) field section
/// (RFC 9113 8.2.2; `te` is left out of responses altogether).
pub fn connection_specific(name: &[u8]) -> bool {
    const NAMES: [&[u8]; 6] =
        [b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade", b"te"];
    NAMES.iter().any(|n| name.eq_ignore_ascii_case(n))
}

/// The HTTP/2 writer: a header list (status, then name/value pairs indexing
/// one buffer), reused from head to head.
#[derive(Debug, Clone)]
pub struct FieldList {
    status: u16,
    buf: Vec<u8>,
    fields: Vec<Field>,
    framing: Framing,
}

impl Default for FieldList {
    fn default() -> Self {
        FieldList { status: 200, buf: Vec::new(), fields: Vec::new(), framing: Framing::UntilClose }
    }
}

impl FieldList {
    /// An empty list with room for `fields` fields of `bytes` bytes in all.
    pub fn with_capacity(bytes: usize, fields: usize) -> Self {
        FieldList { buf: Vec::with_capacity(bytes), fields: Vec::with_capacity(fields), ..FieldList::default() }
    }

    /// The status.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The framing of the body that follows the head, as its fields say
    /// (`content-length`, `transfer-encoding: chunked` — which the list
    /// itself does not keep), else [`Framing::UntilClose`].
    pub fn framing(&self) -> Framing {
        self.framing
    }

    /// The fields, in order.
    pub fn pairs(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.fields.iter().map(|f| (&self.buf[f.name.clone()], &self.buf[f.value.clone()]))
    }

    /// The size of the same head written as HTTP/1.1 (status line with the
    /// standard reason phrase, fields, empty line): what the access log
    /// counts for it.
    pub fn text_len(&self) -> usize {
        let fields: usize = self.fields.iter().map(|f| f.name.len() + f.value.len() + 4).sum();
        let reason = reason_phrase(self.status).len();
        "HTTP/1.1 200 \r\n".len() + reason + fields + 2
    }

    /// Writes the same head as HTTP/1.1 text into `out` (the standard
    /// reason phrase; `transfer-encoding: chunked` when the body follows in
    /// chunked coding): for a copy kept as HTTP/1.1, such as the cache's.
    pub fn write_text(&self, out: &mut Vec<u8>) {
        let mut w = Http1Head::new(out);
        w.start(self.status, b"");
        for (name, value) in self.pairs() {
            w.field(name, value);
        }
        if self.framing == Framing::Chunked {
            w.field(b"transfer-encoding", b"chunked");
        }
        w.end();
    }

    fn push(&mut self, name: &[u8], value: &[u8]) -> Range<usize> {
        let n = self.buf.len();
        self.buf.extend_from_slice(name);
        self.buf[n..].make_ascii_lowercase();
        let v = self.buf.len();
        self.buf.extend_from_slice(value);
        self.fields.push(Field { name: n..v, value: v..self.buf.len() });
        v..self.buf.len()
    }

    fn is(&self, f: &Field, name: &[u8]) -> bool {
        self.buf[f.name.clone()] == *name
    }
}

fn parse_length(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    v.iter().try_fold(0u64, |n, &d| n.checked_mul(10)?.checked_add(u64::from(d - b'0')))
}

impl HeadWriter for FieldList {
    fn start(&mut self, status: u16, _reason: &[u8]) {
        // HTTP/2 has no reason phrase.
        self.status = status;
        self.buf.clear();
        self.fields.clear();
        self.framing = Framing::UntilClose;
    }

    fn field(&mut self, name: &[u8], value: &[u8]) {
        if connection_specific(name) {
            if name.eq_ignore_ascii_case(b"transfer-encoding") {
                // The pipeline writes only `chunked` as a response's coding.
                self.framing = Framing::Chunked;
            }
            return;
        }
        if name.eq_ignore_ascii_case(b"content-length") && self.framing != Framing::Chunked {
            if let Some(n) = parse_length(value) {
                self.framing = Framing::Length(n);
            }
        }
        self.push(name, value);
    }

    fn end(&mut self) {}

    fn append(&mut self, name: &[u8], value: &[u8]) {
        self.field(name, value);
    }

    fn alt_svc(&mut self, port: u16) {
        if self.fields.iter().any(|f| self.is(f, b"alt-svc")) {
            return;
        }
        self.push(b"alt-svc", &alt_svc_value(port));
        // First, as HTTP/1.1 has it (order carries no meaning).
        self.fields.rotate_right(1);
    }

    fn encoded(&mut self, coding: Option<Coding>, chunked: bool) {
        let mut vary: Vec<u8> = Vec::new();
        let mut kept = Vec::with_capacity(self.fields.len() + 2);
        let mut weak_etags = Vec::new();
        for f in std::mem::take(&mut self.fields) {
            let name = &self.buf[f.name.clone()];
            let value = &self.buf[f.value.clone()];
            if coding.is_some() && matches!(name, b"content-length" | b"content-encoding") {
                continue;
            }
            if name == b"vary" {
                if !value.is_empty() {
                    if !vary.is_empty() {
                        vary.extend_from_slice(b", ");
                    }
                    vary.extend_from_slice(value);
                }
                continue;
            }
            if coding.is_some() && name == b"etag" && value.starts_with(b"\"") {
                weak_etags.push(kept.len());
            }
            kept.push(f);
        }
        self.fields = kept;
        for at in weak_etags {
            // The encoded body is another representation (RFC 9110 8.8.3).
            let strong = self.fields[at].value.clone();
            let v = self.buf.len();
            self.buf.extend_from_slice(b"W/");
            self.buf.extend_from_within(strong);
            self.fields[at].value = v..self.buf.len();
        }
        let varies = vary.split(|&b| b == b',').map(<[u8]>::trim_ascii);
        let (star, listed) =
            varies.fold((false, false), |(s, l), v| (s || v == b"*", l || v.eq_ignore_ascii_case(b"accept-encoding")));
        if !star && !listed {
            if !vary.is_empty() {
                vary.extend_from_slice(b", ");
            }
            vary.extend_from_slice(b"Accept-Encoding");
        }
        self.push(b"vary", &vary);
        if let Some(coding) = coding {
            if let Coding::Encode(algorithm, _) = coding {
                self.push(b"content-encoding", algorithm.token().as_bytes());
            }
            self.framing = if chunked { Framing::Chunked } else { Framing::UntilClose };
        }
    }
}

#[cfg(test)]
#[path = "head_writer_tests.rs"]
mod tests;
