//! HTTP/3 message heads — which the `h3` crate hands over and takes as
//! `http` types — to and from the pipeline's message model, with no
//! HTTP/1.1 text either way; and a checked request (HTTP/2's or HTTP/3's)
//! put into a stream's scratch buffer as the read-head phase takes it
//! ([`load`]). Sans-io and table-tested.
//!
//! Request ([`request`]): `h3` has decoded the QPACK field section into an
//! `http::Request`'s parts, refusing (H3_MESSAGE_ERROR) uppercase or invalid
//! names, values `http` cannot hold, unknown pseudo-headers and a missing
//! authority. The parts are written back as a field list — pseudo-headers
//! first, then every field in the order `http`'s map keeps — and checked by
//! the very function that checks an HTTP/2 request
//! ([`switchyard_http::http2::head::request`]: RFC 9113 §8, whose rules RFC
//! 9114 §4.2–4.3 repeats): connection-specific fields, `te` other than
//! `trailers`, whitespace at either end of a value, an invalid or
//! conflicting `content-length`, `content-length` on a request that ended
//! with its head, a missing `:scheme` or `:path`, CONNECT's pseudo-headers,
//! an invalid `:path` or `:authority`, an extended CONNECT's `:protocol`.
//! What it builds (`:authority` as `host`, split cookies joined, the framing)
//! is what the pipeline reads, as for HTTP/2.
//!
//! Not checked, because `h3` 0.0.8 no longer shows it once it built the
//! parts: the order of pseudo-headers and regular fields, a repeated
//! pseudo-header (it keeps the last) and `:status` in a request (dropped).
//!
//! Response ([`response`]): the header list the pipeline's HTTP/2 head
//! writer built ([`FieldList`]: connection-specific fields already left out)
//! as the `http::Response` that `h3` QPACK-encodes; the values are slices of
//! one buffer, not one allocation each.

use bytes::{Bytes, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};

use switchyard_http::head_writer::FieldList;
use switchyard_http::http2::head::{self, Malformed, Request};
use switchyard_http::parse::{Field, Framing, RequestHead};

/// Writes an HTTP/3 request's parts into `req` as a decoded field list and
/// checks it as an HTTP/2 request is checked (see the module docs);
/// `end_stream`: the request has no body. `req.head` is then the head.
pub fn request(parts: &http::request::Parts, end_stream: bool, req: &mut Request) -> Result<(), Malformed> {
    req.clear();
    push(req, b":method", parts.method.as_str().as_bytes());
    if let Some(protocol) = parts.extensions.get::<h3::ext::Protocol>() {
        // Extended CONNECT (RFC 9220), which the check refuses as HTTP/2's does.
        push(req, b":protocol", protocol.as_str().as_bytes());
    }
    if parts.method != http::Method::CONNECT {
        if let Some(scheme) = parts.uri.scheme_str() {
            push(req, b":scheme", scheme.as_bytes());
        }
    }
    if let Some(authority) = parts.uri.authority() {
        push(req, b":authority", authority.as_str().as_bytes());
    }
    if parts.method != http::Method::CONNECT {
        if let Some(path) = parts.uri.path_and_query() {
            push(req, b":path", path.as_str().as_bytes());
        }
    }
    for (name, value) in &parts.headers {
        push(req, name.as_str().as_bytes(), value.as_bytes());
    }
    head::request(req, end_stream)
}

/// Appends a decoded field to `req`.
fn push(req: &mut Request, name: &[u8], value: &[u8]) {
    let n = req.buf.len();
    req.buf.extend_from_slice(name);
    let v = req.buf.len();
    req.buf.extend_from_slice(value);
    req.fields.push(Field { name: n..v, value: v..req.buf.len() });
}

/// Puts the checked request `req` into a stream's scratch buffer and field
/// list (`buf` empty) as the read-head phase takes a decoded head; `None`
/// when `req` was not checked. A body of unknown length reaches the pipeline
/// in chunked coding, which it relays verbatim, so the head says
/// `transfer-encoding: chunked`; one stream carries one request.
pub(crate) fn load(req: &Request, buf: &mut BytesMut, fields: &mut Vec<Field>) -> Option<RequestHead> {
    let mut head = req.head.clone()?;
    buf.extend_from_slice(&req.buf);
    fields.clear();
    fields.extend_from_slice(&req.fields);
    if head.framing == Framing::Chunked {
        add_field(buf, fields, &mut head, b"transfer-encoding", b"chunked");
    }
    head.len = buf.len();
    head.connection.close = true;
    Some(head)
}

/// Adds a field to a head [`load`] put into `buf` and `fields`.
pub(crate) fn add_field(
    buf: &mut BytesMut,
    fields: &mut Vec<Field>,
    head: &mut RequestHead,
    name: &[u8],
    value: &[u8],
) {
    let n = buf.len();
    buf.extend_from_slice(name);
    let v = buf.len();
    buf.extend_from_slice(value);
    fields.push(Field { name: n..v, value: v..buf.len() });
    head.len = buf.len();
}

/// The `http::Response` for a head the pipeline wrote as a header list.
/// Fields whose name or value `http` cannot hold are left out (the pipeline
/// relays a server's fields as they came).
pub fn response(list: &FieldList) -> Result<http::Response<()>, &'static str> {
    let status = http::StatusCode::from_u16(list.status()).map_err(|_| "invalid status")?;
    // The values share one buffer: one allocation for all of them.
    let mut all = BytesMut::with_capacity(list.pairs().map(|(_, v)| v.len()).sum());
    for (_, value) in list.pairs() {
        all.extend_from_slice(value);
    }
    let all: Bytes = all.freeze();
    let mut response = http::Response::new(());
    *response.status_mut() = status;
    let headers = response.headers_mut();
    *headers = HeaderMap::with_capacity(list.pairs().count());
    let mut at = 0;
    for (name, value) in list.pairs() {
        let range = at..at + value.len();
        at = range.end;
        if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name), HeaderValue::from_maybe_shared(all.slice(range)))
        {
            headers.append(name, value);
        }
    }
    Ok(response)
}

#[cfg(test)]
#[path = "head_tests.rs"]
mod tests;
