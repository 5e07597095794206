//! The rewrite phases: the request head sent to the server and the response
//! head sent to the client, each written by a head writer in the form the
//! other side takes (HTTP/1.1 bytes into reused buffers, or HTTP/2 lists:
//! [`crate::request_writer`], [`crate::head_writer`]).
//!
//! Hop-by-hop fields (RFC 9110 7.6.1) never cross the proxy; `Transfer-Encoding`
//! does, because chunked bodies are relayed verbatim. Forwarding headers are
//! added here, and the header edits collected by the route phase are applied in
//! the order remove → set → add.

use std::io::Write;
use std::net::IpAddr;

use switchyard_config::{Forwarded, HeaderEdits};

use crate::head_writer::{HeadWriter, Http1Head};
use crate::parse::{Connection, Field, Framing, RequestHead, ResponseHead};
use crate::request_writer::{Http1Request, RequestWriter};

/// How a request is forwarded: who the client is and what to tell the server.
#[derive(Debug, Clone, Copy)]
pub struct Forwarding<'a> {
    /// The client's address.
    pub client: IpAddr,
    /// The client's address as text, formatted once per connection.
    pub client_text: &'a str,
    /// Scheme the client used ("http" or "https").
    pub proto: &'static str,
    /// Which forwarding headers to add.
    pub headers: Forwarded,
    /// The `Upgrade` value to pass on when the client asks for a protocol
    /// switch the proxy relays (WebSocket); otherwise `Upgrade` is hop-by-hop.
    pub upgrade: Option<&'a [u8]>,
    /// On services that ask for client certificates (mTLS): whether one was
    /// verified, and its subject. The client's own `X-Client-Verify` and
    /// `X-Client-Cert-Subject` are then replaced by the proxy's.
    pub client_cert: Option<(bool, &'a str)>,
    /// With tracing on: the trace context sent in place of the client's.
    pub trace: Option<TraceHeaders<'a>>,
}

/// The W3C trace context a traced request carries to the server.
#[derive(Debug, Clone, Copy)]
pub struct TraceHeaders<'a> {
    /// The `traceparent` value (the proxy's span as the parent); the
    /// client's `traceparent` is dropped.
    pub traceparent: &'a [u8],
    /// Whether the client's `tracestate` goes on (its trace continues);
    /// otherwise it is dropped too.
    pub keep_tracestate: bool,
}

fn is_replaced_trace_field(name: &[u8], trace: &TraceHeaders) -> bool {
    name.eq_ignore_ascii_case(b"traceparent") || (!trace.keep_tracestate && name.eq_ignore_ascii_case(b"tracestate"))
}

fn is_client_cert_field(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"x-client-verify") || name.eq_ignore_ascii_case(b"x-client-cert-subject")
}

fn is_hop_by_hop(name: &[u8]) -> bool {
    const HOP: [&[u8]; 6] = [b"connection", b"keep-alive", b"proxy-connection", b"te", b"upgrade", b"expect"];
    HOP.iter().any(|h| name.eq_ignore_ascii_case(h))
}

/// Whether `name` is listed as an extra hop-by-hop field in a `Connection` value.
///
/// The fields that frame the message (`Content-Length`, `Transfer-Encoding`)
/// and `Host` never count: the proxy relays the body by the framing it read,
/// so a peer that names them in `Connection` must not get them dropped, or the
/// next hop would read a different message (request smuggling, or a response
/// whose body runs into the next one). Found by the `rules` fuzz target.
fn named_by_connection(buf: &[u8], fields: &[Field], name: &[u8]) -> bool {
    const KEPT: [&[u8]; 3] = [b"content-length", b"transfer-encoding", b"host"];
    if KEPT.iter().any(|k| name.eq_ignore_ascii_case(k)) {
        return false;
    }
    fields
        .iter()
        .filter(|f| buf[f.name.clone()].eq_ignore_ascii_case(b"connection"))
        .any(|f| buf[f.value.clone()].split(|&b| b == b',').any(|t| crate::parse::trim(t).eq_ignore_ascii_case(name)))
}

fn edited_away(edits: &[&HeaderEdits], name: &[u8], response: bool) -> bool {
    edits.iter().any(|e| {
        let (remove, set) =
            if response { (&e.remove_response, &e.set_response) } else { (&e.remove_request, &e.set_request) };
        remove.iter().any(|r| name.eq_ignore_ascii_case(r.as_bytes()))
            || set.iter().any(|(n, _)| name.eq_ignore_ascii_case(n.as_bytes()))
    })
}

fn write_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Writes the request head sent to the server into `out` (cleared first):
/// [`write_request_head`] with the HTTP/1.1 writer.
#[allow(clippy::too_many_arguments)]
pub fn request_head(
    out: &mut Vec<u8>,
    buf: &[u8],
    head: &RequestHead,
    fields: &[Field],
    target: &[u8],
    authority: Option<&[u8]>,
    host: &[u8],
    edits: &[&HeaderEdits],
    fwd: &Forwarding,
) {
    write_request_head(&mut Http1Request::new(out), buf, head, fields, target, authority, host, edits, fwd);
}

/// Writes the request head sent to the server with `w`: the client's
/// method, `target`, its fields less the hop-by-hop ones and those the
/// rules or the forwarding settings replace, then `host` where needed, the
/// rules' fields and the forwarding fields. An HTTP/2 writer drops the
/// connection fields itself and takes `host` as the authority.
///
/// `target` is the origin-form target. `authority` is the host of an
/// absolute-form target, which replaces any `Host` field (RFC 9112 3.2.2);
/// `host` fills in a missing `Host`.
#[allow(clippy::too_many_arguments)]
pub fn write_request_head<W: RequestWriter>(
    w: &mut W,
    buf: &[u8],
    head: &RequestHead,
    fields: &[Field],
    target: &[u8],
    authority: Option<&[u8]>,
    host: &[u8],
    edits: &[&HeaderEdits],
    fwd: &Forwarding,
) {
    w.start(&buf[head.method.clone()], target);
    let xff = fwd.headers.x_forwarded_for;
    let last_xff = if xff {
        fields.iter().rposition(|f| buf[f.name.clone()].eq_ignore_ascii_case(b"x-forwarded-for"))
    } else {
        None
    };
    for (i, f) in fields.iter().enumerate() {
        let name = &buf[f.name.clone()];
        if is_hop_by_hop(name)
            || (head.connection.other_tokens && named_by_connection(buf, fields, name))
            || (fwd.headers.x_forwarded_proto && name.eq_ignore_ascii_case(b"x-forwarded-proto"))
            || (!edits.is_empty() && edited_away(edits, name, false))
            || (authority.is_some() && name.eq_ignore_ascii_case(b"host"))
            || (fwd.client_cert.is_some() && is_client_cert_field(name))
            || fwd.trace.as_ref().is_some_and(|t| is_replaced_trace_field(name, t))
        {
            continue;
        }
        if Some(i) == last_xff {
            w.field_extended(name, &buf[f.value.clone()], fwd.client_text.as_bytes());
            continue;
        }
        w.field(name, &buf[f.value.clone()]);
    }
    match authority {
        Some(authority) => w.field(b"host", authority),
        None if head.host.is_none() => w.field(b"host", host),
        None => {}
    }
    for e in edits {
        for (name, value) in e.set_request.iter().chain(e.add_request.iter()) {
            w.field(name.as_bytes(), value.as_bytes());
        }
    }
    if xff && last_xff.is_none() {
        w.field(b"x-forwarded-for", fwd.client_text.as_bytes());
    }
    if fwd.headers.x_forwarded_proto {
        w.field(b"x-forwarded-proto", fwd.proto.as_bytes());
    }
    if fwd.headers.forwarded {
        // RFC 7239: an IPv6 address is bracketed and the value quoted.
        let (open, close) = if fwd.client.is_ipv6() { ("\"[", "]\"") } else { ("", "") };
        let mut value = Vec::with_capacity(64);
        let _ = write!(value, "for={open}{}{close};proto={}", fwd.client_text, fwd.proto);
        w.field(b"forwarded", &value);
    }
    match fwd.client_cert {
        Some((true, subject)) => {
            w.field(b"x-client-verify", b"SUCCESS");
            w.field(b"x-client-cert-subject", subject.as_bytes());
        }
        Some((false, _)) => w.field(b"x-client-verify", b"NONE"),
        None => {}
    }
    if let Some(trace) = &fwd.trace {
        w.field(b"traceparent", trace.traceparent);
    }
    if let Some(protocol) = fwd.upgrade {
        w.field(b"connection", b"upgrade");
        w.field(b"upgrade", protocol);
    }
    w.end();
}

/// Writes the response head sent to the client into `out` (cleared first):
/// [`write_response_head`] with the HTTP/1.1 writer.
#[allow(clippy::too_many_arguments)]
pub fn response_head(
    out: &mut Vec<u8>,
    buf: &[u8],
    head: &ResponseHead,
    fields: &[Field],
    edits: &[&HeaderEdits],
    close: bool,
    keep_alive_10: bool,
    dechunk: bool,
) {
    write_response_head(&mut Http1Head::new(out), buf, head, fields, edits, close, keep_alive_10, dechunk);
}

/// Writes the response head sent to the client with `w`: the server's
/// status (and reason phrase), its fields less the hop-by-hop ones and those
/// the rules remove or set, then the rules' fields.
///
/// `close` adds `Connection: close`; `keep_alive_10` adds
/// `Connection: keep-alive` for an HTTP/1.0 client that asked for it;
/// `dechunk` drops `Transfer-Encoding` because the body will be sent decoded
/// (to an HTTP/1.0 client, delimited by closing the connection). An HTTP/2
/// writer drops the connection fields itself.
#[allow(clippy::too_many_arguments)]
pub fn write_response_head<W: HeadWriter>(
    w: &mut W,
    buf: &[u8],
    head: &ResponseHead,
    fields: &[Field],
    edits: &[&HeaderEdits],
    close: bool,
    keep_alive_10: bool,
    dechunk: bool,
) {
    // Keep the server's reason phrase; the version is always ours. The status
    // line may end in a bare LF (httparse accepts one): the phrase stops at
    // either, or a server could pass its next lines off as our reason phrase.
    let line_end = memchr::memchr2(b'\r', b'\n', buf).unwrap_or(0);
    let reason = buf.get(13..line_end).unwrap_or(b"");
    w.start(head.status, reason);
    for f in fields {
        let name = &buf[f.name.clone()];
        if is_hop_by_hop(name)
            || (head.connection.other_tokens && named_by_connection(buf, fields, name))
            || (!edits.is_empty() && edited_away(edits, name, true))
            // Chunked framing wins over a length sent with it (RFC 9112 6.3);
            // passing both on would let the next hop pick the other one.
            || (head.framing == Framing::Chunked && name.eq_ignore_ascii_case(b"content-length"))
            || (dechunk && name.eq_ignore_ascii_case(b"transfer-encoding"))
        {
            continue;
        }
        w.field(name, &buf[f.value.clone()]);
    }
    for e in edits {
        for (name, value) in e.set_response.iter().chain(e.add_response.iter()) {
            w.field(name.as_bytes(), value.as_bytes());
        }
    }
    if close {
        w.field(b"connection", b"close");
    } else if keep_alive_10 {
        w.field(b"connection", b"keep-alive");
    }
    w.end();
}

/// Rewrites a `101 Switching Protocols` head for a relayed upgrade: like
/// [`response_head`], but the switch itself (`Connection: upgrade` and the
/// server's `Upgrade` value) is passed on.
pub fn switching_head(out: &mut Vec<u8>, buf: &[u8], head: &ResponseHead, fields: &[Field], edits: &[&HeaderEdits]) {
    response_head(out, buf, head, fields, edits, false, false, false);
    out.truncate(out.len().saturating_sub(2));
    out.extend_from_slice(b"connection: upgrade\r\n");
    if let Some(f) = fields.iter().find(|f| buf[f.name.clone()].eq_ignore_ascii_case(b"upgrade")) {
        write_field(out, b"upgrade", &buf[f.value.clone()]);
    }
    out.extend_from_slice(b"\r\n");
}

/// Writes a response generated by the proxy itself (errors, redirects, direct
/// responses) into `out` (cleared first): [`write_local_head`] with the
/// HTTP/1.1 writer, then the body.
pub fn local_response(
    out: &mut Vec<u8>,
    status: u16,
    location: Option<&str>,
    content_type: &str,
    body: &[u8],
    connection: Connection,
) {
    let body = write_local_head(&mut Http1Head::new(out), status, location, content_type, body, connection);
    out.extend_from_slice(body);
}

/// Writes the head of a response generated by the proxy itself with `w`;
/// returns the part of `body` the response carries (none for 1xx, 204 and
/// 304).
pub fn write_local_head<'b, W: HeadWriter>(
    w: &mut W,
    status: u16,
    location: Option<&str>,
    content_type: &str,
    body: &'b [u8],
    connection: Connection,
) -> &'b [u8] {
    w.start(status, b"");
    if let Some(location) = location {
        w.field(b"location", location.as_bytes());
    }
    // 1xx, 204 and 304 responses carry no body, and so no body headers.
    let body = if crate::parse::response_has_body(false, status) { body } else { &b""[..] };
    if !body.is_empty() || crate::parse::response_has_body(false, status) {
        w.field(b"content-type", content_type.as_bytes());
        w.field(b"content-length", itoa::Buffer::new().format(body.len()).as_bytes());
    }
    if connection.close {
        w.field(b"connection", b"close");
    } else if connection.keep_alive {
        w.field(b"connection", b"keep-alive");
    }
    w.end();
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::{parse_request, parse_response, HeadLimits};

    const LIMITS: HeadLimits = HeadLimits { max_bytes: 8192, max_fields: 100 };

    fn rewrite(raw: &[u8], edits: &[&HeaderEdits], headers: Forwarded) -> String {
        rewrite_with_cert(raw, edits, headers, None)
    }

    fn rewrite_with_cert(
        raw: &[u8],
        edits: &[&HeaderEdits],
        headers: Forwarded,
        client_cert: Option<(bool, &str)>,
    ) -> String {
        let mut fields = Vec::new();
        let head = parse_request(raw, LIMITS, &mut fields).expect("valid").expect("complete");
        let mut out = Vec::new();
        let fwd = Forwarding {
            client: "192.0.2.7".parse().expect("ip"),
            client_text: "192.0.2.7",
            proto: "http",
            headers,
            upgrade: None,
            client_cert,
            trace: None,
        };
        let target = raw[head.target.clone()].to_vec();
        request_head(&mut out, raw, &head, &fields, &target, None, b"backend", edits, &fwd);
        String::from_utf8(out).expect("utf8")
    }

    fn rewrite_traced(raw: &[u8], keep_tracestate: bool) -> String {
        let mut fields = Vec::new();
        let head = parse_request(raw, LIMITS, &mut fields).expect("valid").expect("complete");
        let mut out = Vec::new();
        let traceparent = b"00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-01";
        let fwd = Forwarding {
            client: "192.0.2.7".parse().expect("ip"),
            client_text: "192.0.2.7",
            proto: "http",
            headers: Forwarded { x_forwarded_for: false, x_forwarded_proto: false, forwarded: false },
            upgrade: None,
            client_cert: None,
            trace: Some(TraceHeaders { traceparent, keep_tracestate }),
        };
        request_head(&mut out, raw, &head, &fields, b"/", None, b"backend", &[], &fwd);
        String::from_utf8(out).expect("utf8")
    }

    #[test]
    fn trace_context_is_replaced() {
        let raw =
            b"GET / HTTP/1.1\r\nHost: h\r\nTraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n\
                    tracestate: rojo=1\r\n\r\n";
        let ours = "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-01\r\n";
        assert_eq!(rewrite_traced(raw, true), format!("GET / HTTP/1.1\r\nHost: h\r\ntracestate: rojo=1\r\n{ours}\r\n"));
        // A new trace: the client's tracestate belongs to another one.
        assert_eq!(rewrite_traced(raw, false), format!("GET / HTTP/1.1\r\nHost: h\r\n{ours}\r\n"));
    }

    #[test]
    fn hop_by_hop_fields_are_removed_and_forwarding_added() {
        let raw = b"GET /a HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, X-Secret\r\nX-Secret: 1\r\nKeep-Alive: 5\r\nTE: trailers\r\nUpgrade: websocket\r\nX-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Proto: https\r\nAccept: */*\r\n\r\n";
        let out = rewrite(raw, &[], Forwarded { x_forwarded_for: true, x_forwarded_proto: true, forwarded: true });
        assert_eq!(
            out,
            "GET /a HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 10.0.0.1, 192.0.2.7\r\nAccept: */*\r\n\
             x-forwarded-proto: http\r\nforwarded: for=192.0.2.7;proto=http\r\n\r\n"
        );
    }

    #[test]
    fn forwarding_headers_can_be_turned_off_and_host_filled_in() {
        let raw = b"GET / HTTP/1.0\r\nX-Forwarded-Proto: https\r\n\r\n";
        let out = rewrite(raw, &[], Forwarded { x_forwarded_for: false, x_forwarded_proto: false, forwarded: false });
        assert_eq!(out, "GET / HTTP/1.1\r\nX-Forwarded-Proto: https\r\nhost: backend\r\n\r\n");
    }

    #[test]
    fn client_certificate_facts_replace_what_the_client_sent() {
        let raw = b"GET / HTTP/1.1\r\nHost: h\r\nX-Client-Verify: SUCCESS\r\nx-client-cert-subject: CN=forged\r\n\r\n";
        let off = Forwarded { x_forwarded_for: false, x_forwarded_proto: false, forwarded: false };
        let verified = rewrite_with_cert(raw, &[], off, Some((true, "CN=alice, O=Example")));
        assert_eq!(
            verified,
            "GET / HTTP/1.1\r\nHost: h\r\nx-client-verify: SUCCESS\r\nx-client-cert-subject: CN=alice, O=Example\r\n\r\n"
        );
        let absent = rewrite_with_cert(raw, &[], off, Some((false, "")));
        assert_eq!(absent, "GET / HTTP/1.1\r\nHost: h\r\nx-client-verify: NONE\r\n\r\n");
        // Services without client authentication pass the fields on untouched.
        assert!(rewrite(raw, &[], off).contains("x-client-cert-subject: CN=forged"));
    }

    #[test]
    fn edits_remove_set_add() {
        let edits = HeaderEdits {
            set_request: vec![("x-env".into(), "prod".into())],
            add_request: vec![("x-tag".into(), "b".into())],
            remove_request: vec!["x-debug".into()],
            ..HeaderEdits::default()
        };
        let raw = b"GET / HTTP/1.1\r\nHost: h\r\nX-Env: dev\r\nX-Debug: 1\r\nX-Tag: a\r\n\r\n";
        let off = Forwarded { x_forwarded_for: false, x_forwarded_proto: false, forwarded: false };
        let out = rewrite(raw, &[&edits], off);
        assert_eq!(out, "GET / HTTP/1.1\r\nHost: h\r\nX-Tag: a\r\nx-env: prod\r\nx-tag: b\r\n\r\n");
    }

    #[test]
    fn response_head_keeps_reason_and_marks_close() {
        let raw = b"HTTP/1.0 404 Nope\r\nContent-Length: 0\r\nConnection: keep-alive\r\nServer: o\r\n\r\n";
        let mut fields = Vec::new();
        let head = parse_response(raw, 8192, &mut fields).expect("valid").expect("complete");
        let edits = HeaderEdits { set_response: vec![("server".into(), "sy".into())], ..HeaderEdits::default() };
        let mut out = Vec::new();
        response_head(&mut out, raw, &head, &fields, &[&edits], true, false, false);
        assert_eq!(
            String::from_utf8(out).expect("utf8"),
            "HTTP/1.1 404 Nope\r\nContent-Length: 0\r\nserver: sy\r\nconnection: close\r\n\r\n"
        );
    }

    #[test]
    fn connection_cannot_make_framing_fields_hop_by_hop() {
        let raw = b"POST / HTTP/1.1\r\nHost: h\r\nConnection: content-length, host, x-a\r\nX-A: 1\r\nContent-Length: 5\r\n\r\n";
        let off = Forwarded { x_forwarded_for: false, x_forwarded_proto: false, forwarded: false };
        assert_eq!(rewrite(raw, &[], off), "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\n");
        let raw = b"POST / HTTP/1.1\r\nHost: h\r\nConnection: Transfer-Encoding\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(rewrite(raw, &[], off), "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n");

        let raw = b"HTTP/1.1 200 OK\r\nConnection: content-length, transfer-encoding\r\nContent-Length: 5\r\n\r\n";
        let mut fields = Vec::new();
        let head = parse_response(raw, 8192, &mut fields).expect("valid").expect("complete");
        let mut out = Vec::new();
        response_head(&mut out, raw, &head, &fields, &[], false, false, false);
        assert_eq!(String::from_utf8(out).expect("utf8"), "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n");
    }

    #[test]
    fn reason_phrase_stops_at_a_bare_lf() {
        let raw = b"HTTP/1.1 200 OK\nX-A: b\r\nContent-Length: 0\r\n\r\n";
        let mut fields = Vec::new();
        let head = parse_response(raw, 8192, &mut fields).expect("valid").expect("complete");
        let mut out = Vec::new();
        response_head(&mut out, raw, &head, &fields, &[], false, false, false);
        assert_eq!(String::from_utf8(out).expect("utf8"), "HTTP/1.1 200 OK\r\nX-A: b\r\nContent-Length: 0\r\n\r\n");
    }

    #[test]
    fn local_responses_are_complete() {
        let mut out = Vec::new();
        let conn = Connection { close: true, ..Connection::default() };
        local_response(&mut out, 301, Some("https://x/"), "text/plain", b"moved\n", conn);
        assert_eq!(
            String::from_utf8(out).expect("utf8"),
            "HTTP/1.1 301 Moved Permanently\r\nlocation: https://x/\r\ncontent-type: text/plain\r\n\
             content-length: 6\r\nconnection: close\r\n\r\nmoved\n"
        );
    }
}
