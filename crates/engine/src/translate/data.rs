//! Message bodies between HTTP/2 or HTTP/3 frames and the HTTP/1.1 byte
//! form, where one side of the pipeline's relay speaks HTTP/1.1 (between
//! two framed codecs a body goes as parts: `transport::Part`): trailer
//! fields kept apart ([`Trailers`], and the last chunk they make), one
//! frame's payload as a chunk ([`chunk`]), a chunked body's trailer section
//! or [`Trailers`] as the `http::HeaderMap` `h3` sends ([`trailer_map`],
//! [`header_map`]) and back ([`trailers_of_map`]), and which fields may be
//! trailers at all ([`may_trail`]: not those that frame, route or control
//! the message or its connection, RFC 9110 6.5.1), dropped both ways. Used
//! by HTTP/2 client streams ([`crate::http2`]), HTTP/3 streams
//! ([`crate::http3`]) and streams to HTTP/2 servers (`upstream::h2`).

use bytes::{Bytes, BytesMut};

use switchyard_http::chunked::ChunkedScanner;
use switchyard_http::parse::Field;

/// Trailer fields: names and values in one buffer, indexed by `fields`.
/// Only fields that may be trailers are kept ([`Trailers::push`]).
#[derive(Debug, Clone, Default)]
pub struct Trailers {
    buf: Vec<u8>,
    fields: Vec<Field>,
}

impl Trailers {
    /// Adds a field, unless it may not be a trailer (it frames, routes or
    /// controls the message or its connection: RFC 9110 6.5.1): such
    /// fields are dropped whichever way trailers cross.
    pub fn push(&mut self, name: &[u8], value: &[u8]) {
        if !may_trail(name) {
            return;
        }
        let n = self.buf.len();
        self.buf.extend_from_slice(name);
        let v = self.buf.len();
        self.buf.extend_from_slice(value);
        self.fields.push(Field { name: n..v, value: v..self.buf.len() });
    }

    /// The fields, as (name, value) pairs in the order they came.
    pub fn pairs(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.fields.iter().map(|f| (&self.buf[f.name.clone()], &self.buf[f.value.clone()]))
    }

    /// The value of field `name` (the first, any case), if present.
    pub fn get(&self, name: &[u8]) -> Option<&[u8]> {
        self.pairs().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v)
    }

    /// Whether no field was kept.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The last chunk of an HTTP/1.1 chunked body with these fields as its
    /// trailer section: `0`, the fields, the empty line.
    pub fn last_chunk(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"0\r\n");
        for (name, value) in self.pairs() {
            out.extend_from_slice(name);
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
    }
}

/// One DATA frame's payload as a chunk.
pub(crate) fn chunk(data: &[u8]) -> Bytes {
    use std::fmt::Write as _;
    let mut out = BytesMut::with_capacity(data.len() + 20);
    // The size line is written in place: no string of its own per frame.
    let _ = write!(out, "{:x}\r\n", data.len());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out.freeze()
}

/// `h3`'s trailers as [`Trailers`] (those that may be trailers).
pub(crate) fn trailers_of_map(map: &http::HeaderMap) -> Trailers {
    let mut trailers = Trailers::default();
    for (name, value) in map {
        trailers.push(name.as_str().as_bytes(), value.as_bytes());
    }
    trailers
}

/// Whether a field may be relayed as a trailer: not one that frames, routes
/// or controls the message or its connection (RFC 9110 6.5.1, RFC 9113 8.2.2).
pub(crate) fn may_trail(name: &[u8]) -> bool {
    const NOT: [&[u8]; 11] = [
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"transfer-encoding",
        b"upgrade",
        b"te",
        b"content-length",
        b"content-encoding",
        b"content-type",
        b"host",
        b"trailer",
    ];
    !name.is_empty() && name[0] != b':' && !NOT.iter().any(|n| name.eq_ignore_ascii_case(n))
}

/// The HTTP/2 trailers for the trailer fields a chunked body ended with;
/// none when it had none (or none HTTP/2 can carry).
pub(crate) fn trailer_map(scanner: &ChunkedScanner) -> Option<http::HeaderMap> {
    header_map(scanner.trailers().filter(|(name, _)| may_trail(name)))
}

/// Fields as the `http::HeaderMap` `h3` sends as trailers; `None` when
/// none is left (a field `http` refuses is dropped).
pub(crate) fn header_map<'a>(fields: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Option<http::HeaderMap> {
    let mut map = http::HeaderMap::new();
    for (name, value) in fields {
        if let (Ok(name), Ok(value)) = (http::HeaderName::from_bytes(name), http::HeaderValue::from_bytes(value)) {
            map.append(name, value);
        }
    }
    (!map.is_empty()).then_some(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing_and_routing_fields_never_trail() {
        for name in ["content-length", "Transfer-Encoding", "host", "te", ":status", "connection", ""] {
            assert!(!may_trail(name.as_bytes()), "{name}");
        }
        for name in ["grpc-status", "grpc-message", "x-checksum", "server-timing"] {
            assert!(may_trail(name.as_bytes()), "{name}");
        }
    }
}
