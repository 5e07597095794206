//! Request head writers: the request head the pipeline sends to a server
//! (the client's method and target, the fields it keeps, forwarding fields,
//! the rules' edits, the cache's validators), written in the form the
//! server's protocol takes.
//!
//! - [`Http1Request`] writes HTTP/1.1 bytes into a buffer: exactly the bytes
//!   the pipeline wrote before there were writers (tested against a verbatim
//!   copy of that code in `request_writer_tests`), so an HTTP/1.1 server sees
//!   no change.
//! - [`RequestList`] collects an HTTP/2 request: the method, the path, the
//!   authority (the `host` field, which is not kept as a field) and the
//!   name/value pairs in one buffer, names lowercased, without the
//!   connection-specific fields (RFC 9113 8.2.2). The HTTP/2 client codec
//!   HPACK-encodes it straight into its output (and adds `te: trailers`
//!   itself): no HTTP/1.1 text is written for it, and none is parsed again.
//!
//! The pipeline's request rewrite ([`crate::rewrite::write_request_head`])
//! calls the same [`RequestWriter`] operations in the same order whatever
//! the server speaks.
//!
//! Invariants: a [`RequestList`] never holds `host`, `connection`,
//! `keep-alive`, `proxy-connection`, `transfer-encoding`, `upgrade`, `te` or
//! `http2-settings`, nor a `content-length` beside a chunked body (whose
//! length is unknown).

use std::ops::Range;

use crate::head_writer::{connection_specific, write_field};
use crate::parse::Field;

/// Writes a request head, one operation at a time.
pub trait RequestWriter {
    /// Starts the head (clearing what a previous one left): the method and
    /// the origin-form target.
    fn start(&mut self, method: &[u8], target: &[u8]);
    /// Adds a field.
    fn field(&mut self, name: &[u8], value: &[u8]);
    /// Adds a field whose value is `value, more` (a forwarding list the
    /// proxy extends with the client's address).
    fn field_extended(&mut self, name: &[u8], value: &[u8], more: &[u8]);
    /// Ends the head.
    fn end(&mut self);
    /// Adds a field to the ended head, after every other one (the cache's
    /// validators).
    fn append(&mut self, name: &[u8], value: &[u8]);
}

/// The HTTP/1.1 writer: the head as bytes in `out`.
#[derive(Debug)]
pub struct Http1Request<'a> {
    /// The head's bytes (cleared by [`RequestWriter::start`]).
    pub out: &'a mut Vec<u8>,
}

impl<'a> Http1Request<'a> {
    /// A writer into `out`.
    pub fn new(out: &'a mut Vec<u8>) -> Self {
        Http1Request { out }
    }
}

impl RequestWriter for Http1Request<'_> {
    fn start(&mut self, method: &[u8], target: &[u8]) {
        let out = &mut *self.out;
        out.clear();
        out.extend_from_slice(method);
        out.push(b' ');
        out.extend_from_slice(target);
        out.extend_from_slice(b" HTTP/1.1\r\n");
    }

    #[inline]
    fn field(&mut self, name: &[u8], value: &[u8]) {
        write_field(self.out, name, value);
    }

    fn field_extended(&mut self, name: &[u8], value: &[u8], more: &[u8]) {
        let out = &mut *self.out;
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b", ");
        out.extend_from_slice(more);
        out.extend_from_slice(b"\r\n");
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
}

/// The HTTP/2 writer: a request's pseudo-header values and its fields, all
/// indexing one buffer, reused from head to head.
#[derive(Debug, Clone, Default)]
pub struct RequestList {
    buf: Vec<u8>,
    method: Range<usize>,
    path: Range<usize>,
    authority: Option<Range<usize>>,
    fields: Vec<Field>,
    /// A `transfer-encoding` was written: the body comes chunked.
    chunked: bool,
}

impl RequestList {
    /// `:method`.
    pub fn method(&self) -> &[u8] {
        &self.buf[self.method.clone()]
    }

    /// `:path`: the origin-form target (or `*`).
    pub fn path(&self) -> &[u8] {
        &self.buf[self.path.clone()]
    }

    /// `:authority`: the `host` written, when there was a non-empty one.
    pub fn authority(&self) -> Option<&[u8]> {
        self.authority.clone().map(|r| &self.buf[r])
    }

    /// The fields, in order.
    pub fn pairs(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.fields.iter().map(|f| (&self.buf[f.name.clone()], &self.buf[f.value.clone()]))
    }

    fn push(&mut self, bytes: &[u8]) -> Range<usize> {
        let n = self.buf.len();
        self.buf.extend_from_slice(bytes);
        n..self.buf.len()
    }

    /// Whether `name` never goes into the list as a field: connection-specific
    /// fields, `host` (the authority), an h2c upgrade offer's settings.
    fn left_out(&mut self, name: &[u8], value: &[u8]) -> bool {
        if name.eq_ignore_ascii_case(b"host") {
            if self.authority.is_none() && !value.is_empty() {
                self.authority = Some(self.push(value));
            }
            return true;
        }
        if connection_specific(name) {
            if name.eq_ignore_ascii_case(b"transfer-encoding") {
                self.chunked = true;
            }
            return true;
        }
        name.eq_ignore_ascii_case(b"http2-settings")
    }
}

impl RequestWriter for RequestList {
    fn start(&mut self, method: &[u8], target: &[u8]) {
        self.buf.clear();
        self.fields.clear();
        self.authority = None;
        self.chunked = false;
        self.method = self.push(method);
        self.path = self.push(target);
    }

    fn field(&mut self, name: &[u8], value: &[u8]) {
        if self.left_out(name, value) {
            return;
        }
        let name = self.push(name);
        self.buf[name.clone()].make_ascii_lowercase();
        let value = self.push(value);
        self.fields.push(Field { name, value });
    }

    fn field_extended(&mut self, name: &[u8], value: &[u8], more: &[u8]) {
        if self.left_out(name, value) {
            return;
        }
        let name = self.push(name);
        self.buf[name.clone()].make_ascii_lowercase();
        let at = self.buf.len();
        self.buf.extend_from_slice(value);
        self.buf.extend_from_slice(b", ");
        self.buf.extend_from_slice(more);
        self.fields.push(Field { name, value: at..self.buf.len() });
    }

    fn end(&mut self) {
        if self.chunked {
            // A chunked body's length is unknown: a length beside it goes.
            let buf = &self.buf;
            self.fields.retain(|f| &buf[f.name.clone()] != b"content-length");
        }
    }

    fn append(&mut self, name: &[u8], value: &[u8]) {
        self.field(name, value);
    }
}

#[cfg(test)]
#[path = "request_writer_tests.rs"]
mod tests;
