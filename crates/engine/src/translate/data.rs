//! Message bodies between HTTP/2 or HTTP/3 frames and the HTTP/1.1 byte
//! form the pipeline relays: one frame's payload as a chunk ([`chunk`]), a
//! stream's trailers as the last chunk's trailer section ([`last_chunk`]),
//! a chunked body's trailer section as trailers ([`trailer_map`]), and which
//! fields may be trailers at all ([`may_trail`]: not those that frame, route
//! or control the message or its connection, RFC 9110 6.5.1), dropped both
//! ways. Used by HTTP/2 client streams ([`crate::http2`]), HTTP/3 streams
//! ([`crate::http3`]) and, for [`may_trail`], streams to HTTP/2 servers
//! (`upstream::h2`).

use bytes::{Bytes, BytesMut};

use switchyard_http::chunked::ChunkedScanner;

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

/// The last chunk, with the trailers HTTP/1.1 may carry as its trailer section.
pub(crate) fn last_chunk(trailers: Option<&http::HeaderMap>) -> Bytes {
    let mut end = BytesMut::with_capacity(64);
    end.extend_from_slice(b"0\r\n");
    for (name, value) in trailers.into_iter().flatten() {
        if may_trail(name.as_str().as_bytes()) {
            end.extend_from_slice(name.as_str().as_bytes());
            end.extend_from_slice(b": ");
            end.extend_from_slice(value.as_bytes());
            end.extend_from_slice(b"\r\n");
        }
    }
    end.extend_from_slice(b"\r\n");
    end.freeze()
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
    let mut map = http::HeaderMap::new();
    for (name, value) in scanner.trailers() {
        if !may_trail(name) {
            continue;
        }
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
