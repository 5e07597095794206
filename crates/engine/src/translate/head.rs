//! Translation between HTTP/2 message heads and the HTTP/1.1 heads the
//! pipeline speaks. Sans-io and table-tested.
//!
//! Request: `:method` and `:path` become the request line, `:authority` the
//! `Host` field (it wins over a `host` field, RFC 9113 8.3.1), split `cookie`
//! fields are joined with `; ` (8.2.3), connection-specific fields are
//! dropped (but `te: trailers` is kept, for the pipeline to know the client
//! reads trailers), and the body is framed by the client's `content-length`
//! or else chunked. Every head ends with `connection: close`: one stream, one request.
//!
//! Response: the status and every field but the connection-specific ones.
//!
//! Towards servers (pools with `protocol = "h2"`) none of this runs: the
//! project's own HTTP/2 codec encodes the request and decodes the response
//! (`upstream::h2`).

use std::ops::Range;

use bytes::{Bytes, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};

use switchyard_http::parse::{Field, ResponseHead};

/// Field positions reserved for a head parsed on the HTTP/2 side at once,
/// rather than grown one reallocation at a time (most heads have fewer).
pub const HEAD_FIELDS: usize = 16;

/// How the request body reaches the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestBody {
    /// END_STREAM came with the headers.
    None,
    /// The client gave `content-length`: the DATA payload is passed as is.
    Length,
    /// No length known: the DATA payload is sent in chunked coding.
    Chunked,
}

/// Fields HTTP/2 forbids or HTTP/1.1 treats as hop-by-hop (RFC 9113 8.2.2).
/// `te` goes too: it is hop-by-hop (`te: trailers` alone is passed on).
fn connection_specific(name: &[u8]) -> bool {
    [&b"connection"[..], b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade", b"te", b"http2-settings"]
        .iter()
        .any(|n| name.eq_ignore_ascii_case(n))
}

/// A value that could end a header line early. The `http` crate already
/// refuses these; checked again because the head is re-parsed as text.
fn breaks_line(value: &[u8]) -> bool {
    value.iter().any(|&b| b == b'\r' || b == b'\n' || b == 0)
}

/// Writes the HTTP/1.1 request head for an HTTP/2 request into `out`.
/// `end_stream`: the client sent END_STREAM with the headers.
pub fn request_head(
    parts: &http::request::Parts,
    end_stream: bool,
    out: &mut BytesMut,
) -> Result<RequestBody, &'static str> {
    let method = parts.method.as_str();
    // CONNECT has no path: its authority is the target, which the pipeline refuses.
    let target = if parts.method == http::Method::CONNECT {
        parts.uri.authority().map_or("", |a| a.as_str())
    } else {
        parts.uri.path_and_query().map_or("/", |pq| pq.as_str())
    };
    if breaks_line(target.as_bytes()) || target.bytes().any(|b| b == b' ') {
        return Err("invalid :path");
    }
    out.extend_from_slice(method.as_bytes());
    out.extend_from_slice(b" ");
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let authority = parts.uri.authority();
    if let Some(a) = authority {
        field(out, b"host", a.as_str().as_bytes());
    }
    let mut length = false;
    let mut cookie: Option<Vec<u8>> = None;
    for (name, value) in &parts.headers {
        let (name, value) = (name.as_str().as_bytes(), value.as_bytes());
        if breaks_line(value) {
            return Err("invalid header value");
        }
        if name == b"te" && value == b"trailers" {
            // The one `te` HTTP/2 allows (RFC 9113 8.2.2): the client takes
            // trailers, which tells the pipeline to read them (gRPC status).
            field(out, name, value);
            continue;
        }
        if connection_specific(name) || (authority.is_some() && name == b"host") {
            continue;
        }
        if name == b"cookie" {
            let joined = cookie.get_or_insert_with(Vec::new);
            if !joined.is_empty() {
                joined.extend_from_slice(b"; ");
            }
            joined.extend_from_slice(value);
            continue;
        }
        length |= name == b"content-length";
        field(out, name, value);
    }
    if let Some(c) = cookie {
        field(out, b"cookie", &c);
    }
    let body = match (end_stream, length) {
        (true, _) => RequestBody::None,
        (false, true) => RequestBody::Length,
        (false, false) => {
            field(out, b"transfer-encoding", b"chunked");
            RequestBody::Chunked
        }
    };
    out.extend_from_slice(b"connection: close\r\n\r\n");
    Ok(body)
}

fn field(out: &mut BytesMut, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// A field value of a head held in `buf`: validated, and shared with the
/// head's buffer rather than copied (one allocation per field fewer).
/// `None` when the range lies outside `buf` or HTTP/2 cannot carry the value.
fn shared_value(buf: &Bytes, range: Range<usize>) -> Option<HeaderValue> {
    if range.end > buf.len() || range.start > range.end {
        return None;
    }
    HeaderValue::from_maybe_shared(buf.slice(range)).ok()
}

/// The HTTP/2 response head for an HTTP/1.1 response head parsed from `buf`
/// (exactly the head's bytes: the values are slices of it).
/// Fields whose name or value HTTP/2 cannot carry are left out.
pub fn response_head(buf: &Bytes, head: &ResponseHead, fields: &[Field]) -> Result<http::Response<()>, &'static str> {
    let status = http::StatusCode::from_u16(head.status).map_err(|_| "invalid status")?;
    let mut response = http::Response::new(());
    *response.status_mut() = status;
    let headers = response.headers_mut();
    *headers = HeaderMap::with_capacity(fields.len());
    for f in fields {
        let Some(name) = buf.get(f.name.clone()) else {
            continue;
        };
        if connection_specific(name) {
            continue;
        }
        if let (Ok(name), Some(value)) = (HeaderName::from_bytes(name), shared_value(buf, f.value.clone())) {
            headers.append(name, value);
        }
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_http::parse::parse_response;

    fn parts(req: http::request::Builder) -> http::request::Parts {
        req.body(()).expect("request").into_parts().0
    }

    fn head_of(req: http::request::Builder, end_stream: bool) -> (String, RequestBody) {
        let mut out = BytesMut::new();
        let body = request_head(&parts(req), end_stream, &mut out).expect("head");
        (String::from_utf8(out.to_vec()).expect("utf-8"), body)
    }

    #[test]
    fn request_heads_translate() {
        let table = [
            (
                http::Request::get("http://example.com/a?b=1").header("user-agent", "t"),
                true,
                "GET /a?b=1 HTTP/1.1\r\nhost: example.com\r\nuser-agent: t\r\nconnection: close\r\n\r\n",
                RequestBody::None,
            ),
            (
                http::Request::post("https://h:8443/up").header("content-length", "5"),
                false,
                "POST /up HTTP/1.1\r\nhost: h:8443\r\ncontent-length: 5\r\nconnection: close\r\n\r\n",
                RequestBody::Length,
            ),
            (
                http::Request::post("http://h/stream"),
                false,
                "POST /stream HTTP/1.1\r\nhost: h\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n",
                RequestBody::Chunked,
            ),
            // No :authority: the client's host field stands.
            (
                http::Request::get("/p").header("host", "from-field"),
                true,
                "GET /p HTTP/1.1\r\nhost: from-field\r\nconnection: close\r\n\r\n",
                RequestBody::None,
            ),
            // :authority wins over host; cookie crumbs are joined.
            (
                http::Request::get("http://auth/")
                    .header("host", "other")
                    .header("cookie", "a=1")
                    .header("cookie", "b=2"),
                true,
                "GET / HTTP/1.1\r\nhost: auth\r\ncookie: a=1; b=2\r\nconnection: close\r\n\r\n",
                RequestBody::None,
            ),
            (
                http::Request::builder().method("OPTIONS").uri("*"),
                true,
                "OPTIONS * HTTP/1.1\r\nconnection: close\r\n\r\n",
                RequestBody::None,
            ),
        ];
        for (req, end, want, body) in table {
            assert_eq!(head_of(req, end), (want.to_string(), body));
        }
    }

    #[test]
    fn connection_specific_request_fields_are_dropped() {
        let req = http::Request::post("http://h/")
            .header("connection", "x-secret")
            .header("keep-alive", "1")
            .header("proxy-connection", "keep-alive")
            .header("transfer-encoding", "gzip")
            .header("upgrade", "websocket")
            .header("te", "gzip")
            .header("x-kept", "yes");
        let (head, body) = head_of(req, false);
        assert_eq!(
            head,
            "POST / HTTP/1.1\r\nhost: h\r\nx-kept: yes\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        );
        let (head, _) = head_of(http::Request::post("http://h/").header("te", "trailers"), true);
        assert_eq!(head, "POST / HTTP/1.1\r\nhost: h\r\nte: trailers\r\nconnection: close\r\n\r\n");
        assert_eq!(body, RequestBody::Chunked);
    }

    #[test]
    fn connect_keeps_its_authority_as_target() {
        let (head, _) = head_of(http::Request::builder().method("CONNECT").uri("example.com:443"), false);
        assert!(head.starts_with("CONNECT example.com:443 HTTP/1.1\r\n"), "{head}");
    }

    #[test]
    fn response_heads_drop_connection_fields() {
        let raw = b"HTTP/1.1 201 Created\r\ncontent-type: text/plain\r\nconnection: close\r\nkeep-alive: t=5\r\n\
                    transfer-encoding: chunked\r\nupgrade: h2c\r\nproxy-connection: x\r\nset-cookie: a=1\r\nset-cookie: b=2\r\n\r\n";
        let mut fields = Vec::new();
        let head = parse_response(raw, 4096, &mut fields).expect("valid").expect("complete");
        let r = response_head(&Bytes::from_static(raw), &head, &fields).expect("translates");
        assert_eq!(r.status(), 201);
        let names: Vec<&str> = r.headers().keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["content-type", "set-cookie"]);
        assert_eq!(r.headers().get_all("set-cookie").iter().count(), 2);
    }

    #[test]
    fn response_fields_http2_cannot_carry_are_left_out() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-Upper: Value\r\n\r\n";
        let mut fields = Vec::new();
        let head = parse_response(raw, 4096, &mut fields).expect("valid").expect("complete");
        let r = response_head(&Bytes::from_static(raw), &head, &fields).expect("translates");
        // Names are lower-cased for HTTP/2.
        assert_eq!(r.headers().get("x-upper").map(|v| v.as_bytes()), Some(&b"Value"[..]));
        assert_eq!(r.headers().get("content-length").map(|v| v.as_bytes()), Some(&b"3"[..]));
    }
}
