//! The request head writers against a table of client heads, forwarding
//! settings, rule edits and validators: the HTTP/1.1 writer's bytes equal
//! those of the text function the pipeline used before there were writers
//! (kept here, verbatim, as the reference); the HTTP/2 list holds that same
//! head's fields, lowercased, without `host` (its authority) and the
//! connection-specific ones, and opens a stream whose HEADERS decode as such.

use switchyard_config::{Forwarded, HeaderEdits};

use super::*;
use crate::http2::client::{Client, Config, RequestLine};
use crate::http2::frame::{Head, HEADER_LEN};
use crate::http2::hpack::Decoder;
use crate::parse::{parse_request, HeadLimits, RequestHead};
use crate::rewrite::{write_request_head, Forwarding, TraceHeaders};

/// The pipeline's text function before the writers, as it was.
#[allow(clippy::all)]
mod before {
    use std::io::Write;

    use switchyard_config::HeaderEdits;

    use crate::parse::{Field, RequestHead};
    use crate::rewrite::{Forwarding, TraceHeaders};

    fn is_replaced_trace_field(name: &[u8], trace: &TraceHeaders) -> bool {
        name.eq_ignore_ascii_case(b"traceparent")
            || (!trace.keep_tracestate && name.eq_ignore_ascii_case(b"tracestate"))
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
        fields.iter().filter(|f| buf[f.name.clone()].eq_ignore_ascii_case(b"connection")).any(|f| {
            buf[f.value.clone()].split(|&b| b == b',').any(|t| crate::parse::trim(t).eq_ignore_ascii_case(name))
        })
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

    fn write_edits(out: &mut Vec<u8>, edits: &[&HeaderEdits], response: bool) {
        for e in edits {
            let (set, add) =
                if response { (&e.set_response, &e.add_response) } else { (&e.set_request, &e.add_request) };
            for (name, value) in set.iter().chain(add.iter()) {
                write_field(out, name.as_bytes(), value.as_bytes());
            }
        }
    }

    /// Writes the request head sent to the server into `out` (cleared first).
    ///
    /// `target` is the origin-form target. `authority` is the host of an
    /// absolute-form target, which replaces any `Host` field (RFC 9112 3.2.2);
    /// `host` fills in a missing `Host`.
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
        out.clear();
        out.extend_from_slice(&buf[head.method.clone()]);
        out.push(b' ');
        out.extend_from_slice(target);
        out.extend_from_slice(b" HTTP/1.1\r\n");
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
                out.extend_from_slice(name);
                out.extend_from_slice(b": ");
                out.extend_from_slice(&buf[f.value.clone()]);
                out.extend_from_slice(b", ");
                out.extend_from_slice(fwd.client_text.as_bytes());
                out.extend_from_slice(b"\r\n");
                continue;
            }
            write_field(out, name, &buf[f.value.clone()]);
        }
        match authority {
            Some(authority) => write_field(out, b"host", authority),
            None if head.host.is_none() => write_field(out, b"host", host),
            None => {}
        }
        write_edits(out, edits, false);
        if xff && last_xff.is_none() {
            write_field(out, b"x-forwarded-for", fwd.client_text.as_bytes());
        }
        if fwd.headers.x_forwarded_proto {
            write_field(out, b"x-forwarded-proto", fwd.proto.as_bytes());
        }
        if fwd.headers.forwarded {
            // RFC 7239: an IPv6 address is bracketed and the value quoted.
            let (open, close) = if fwd.client.is_ipv6() { ("\"[", "]\"") } else { ("", "") };
            let _ = write!(out, "forwarded: for={open}{}{close};proto={}\r\n", fwd.client_text, fwd.proto);
        }
        match fwd.client_cert {
            Some((true, subject)) => {
                out.extend_from_slice(b"x-client-verify: SUCCESS\r\n");
                write_field(out, b"x-client-cert-subject", subject.as_bytes());
            }
            Some((false, _)) => out.extend_from_slice(b"x-client-verify: NONE\r\n"),
            None => {}
        }
        if let Some(trace) = &fwd.trace {
            write_field(out, b"traceparent", trace.traceparent);
        }
        if let Some(protocol) = fwd.upgrade {
            out.extend_from_slice(b"connection: upgrade\r\n");
            write_field(out, b"upgrade", protocol);
        }
        out.extend_from_slice(b"\r\n");
    }
}

const LIMITS: HeadLimits = HeadLimits { max_bytes: 8192, max_fields: 100 };

/// Client heads: hop-by-hop and connection-named fields, capitalised names,
/// forwarding fields of the client's own, trace and certificate fields,
/// chunked and length-framed bodies, HTTP/1.0 without a host.
const HEADS: &[&[u8]] = &[
    b"GET / HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\n",
    b"GET /a?b=c HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, X-Secret\r\nX-Secret: 1\r\nKeep-Alive: 5\r\n\
      TE: trailers\r\nUpgrade: websocket\r\nX-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Proto: https\r\nAccept: */*\r\n\r\n",
    b"GET / HTTP/1.0\r\nX-Forwarded-Proto: https\r\n\r\n",
    b"POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Type: text/plain\r\nExpect: 100-continue\r\n\r\n",
    b"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nX-Forwarded-For: a\r\nx-forwarded-for: b\r\n\r\n",
    b"GET http://other.example/abs HTTP/1.1\r\nHost: ignored\r\nUser-Agent: t\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: h\r\nX-Client-Verify: SUCCESS\r\nx-client-cert-subject: CN=forged\r\n\
      Traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\ntracestate: rojo=1\r\n\r\n",
    b"OPTIONS * HTTP/1.1\r\nHost: h\r\nX-Env: dev\r\nX-Debug: 1\r\nX-Tag: a\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n",
];

fn edit_sets() -> Vec<HeaderEdits> {
    vec![
        HeaderEdits::default(),
        HeaderEdits {
            set_request: vec![("x-env".into(), "prod".into()), ("Host".into(), "set.example".into())],
            add_request: vec![("X-Tag".into(), "b".into())],
            remove_request: vec!["x-debug".into(), "accept".into()],
            ..HeaderEdits::default()
        },
    ]
}

fn forwarded_sets() -> Vec<Forwarded> {
    let mut all = Vec::new();
    for x_forwarded_for in [false, true] {
        for x_forwarded_proto in [false, true] {
            for forwarded in [false, true] {
                all.push(Forwarded { x_forwarded_for, x_forwarded_proto, forwarded });
            }
        }
    }
    all
}

/// One way a head is forwarded: the settings besides the rules' edits.
#[derive(Clone, Copy)]
struct Case {
    headers: Forwarded,
    v6: bool,
    cert: Option<(bool, &'static str)>,
    trace: Option<bool>,
    upgrade: bool,
}

fn cases() -> Vec<Case> {
    let mut all = Vec::new();
    for headers in forwarded_sets() {
        for (v6, cert, trace, upgrade) in [
            (false, None, None, false),
            (true, Some((true, "CN=alice, O=Example")), Some(true), false),
            (false, Some((false, "")), Some(false), true),
        ] {
            all.push(Case { headers, v6, cert, trace, upgrade });
        }
    }
    all
}

const TRACEPARENT: &[u8] = b"00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-01";

fn forwarding(case: Case) -> Forwarding<'static> {
    let (client, client_text) = if case.v6 { ("2001:db8::7", "2001:db8::7") } else { ("192.0.2.7", "192.0.2.7") };
    Forwarding {
        client: client.parse().expect("ip"),
        client_text,
        proto: "https",
        headers: case.headers,
        upgrade: case.upgrade.then_some(&b"websocket"[..]),
        client_cert: case.cert,
        trace: case.trace.map(|keep_tracestate| TraceHeaders { traceparent: TRACEPARENT, keep_tracestate }),
    }
}

/// The parts of a parsed head the rewrite takes.
struct Parsed<'a> {
    raw: &'a [u8],
    head: RequestHead,
    fields: Vec<Field>,
}

impl Parsed<'_> {
    fn target(&self) -> (&[u8], Option<&[u8]>) {
        let t = &self.raw[self.head.target.clone()];
        match t.strip_prefix(b"http://") {
            Some(rest) => {
                let slash = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
                (&rest[slash..], Some(&rest[..slash]))
            }
            None => (t, None),
        }
    }
}

fn parsed(raw: &[u8]) -> Parsed<'_> {
    let mut fields = Vec::new();
    let head = parse_request(raw, LIMITS, &mut fields).expect("valid").expect("complete");
    Parsed { raw, head, fields }
}

fn validators<W: RequestWriter>(w: &mut W) {
    w.append(b"if-none-match", b"\"v1\"");
    w.append(b"if-modified-since", b"Wed, 21 Oct 2015 07:28:00 GMT");
}

#[test]
fn the_http1_writer_writes_the_bytes_written_before() {
    let sets = edit_sets();
    let mut checked = 0;
    for raw in HEADS {
        let p = parsed(raw);
        let (target, authority) = p.target();
        for edits in [vec![], vec![&sets[1]]] {
            for case in cases() {
                let fwd = forwarding(case);
                let mut old = Vec::new();
                before::request_head(&mut old, raw, &p.head, &p.fields, target, authority, b"backend", &edits, &fwd);
                let mut new = vec![b'x'; 3];
                write_request_head(
                    &mut Http1Request::new(&mut new),
                    raw,
                    &p.head,
                    &p.fields,
                    target,
                    authority,
                    b"backend",
                    &edits,
                    &fwd,
                );
                assert_eq!(String::from_utf8_lossy(&new), String::from_utf8_lossy(&old));
                // The cache's validators, as it added them to the text.
                validators(&mut Http1Request::new(&mut new));
                old.truncate(old.len() - 2);
                old.extend_from_slice(
                    b"if-none-match: \"v1\"\r\nif-modified-since: Wed, 21 Oct 2015 07:28:00 GMT\r\n\r\n",
                );
                assert_eq!(String::from_utf8_lossy(&new), String::from_utf8_lossy(&old));
                checked += 1;
            }
        }
    }
    assert_eq!(checked, HEADS.len() * 2 * cases().len());
}

/// Method, path, authority and fields of a request.
type Parts = (Vec<u8>, Vec<u8>, Option<Vec<u8>>, Vec<(Vec<u8>, Vec<u8>)>);

/// What an HTTP/2 list must hold for an HTTP/1.1 head: its fields, names
/// lowercased, without host and the connection-specific ones (and a length
/// beside chunked coding); the host as authority.
fn expected(text: &[u8]) -> Parts {
    // Split by hand: a rule may set a second `host`, which the parser refuses.
    let text = std::str::from_utf8(text).expect("utf8");
    let mut lines = text.split("\r\n");
    let mut line = lines.next().expect("request line").split(' ');
    let (method, target) = (line.next().expect("method"), line.next().expect("target"));
    let fields: Vec<(String, &str)> = lines
        .take_while(|l| !l.is_empty())
        .map(|l| l.split_once(": ").expect("field"))
        .map(|(n, v)| (n.to_ascii_lowercase(), v))
        .collect();
    let chunked = fields.iter().any(|(n, _)| n == "transfer-encoding");
    let mut authority = None;
    let mut pairs = Vec::new();
    for (name, value) in fields {
        match name.as_str() {
            "host" => {
                authority.get_or_insert(value.as_bytes().to_vec());
            }
            "connection" | "keep-alive" | "proxy-connection" | "transfer-encoding" | "upgrade" | "te"
            | "http2-settings" => {}
            "content-length" if chunked => {}
            _ => pairs.push((name.into_bytes(), value.as_bytes().to_vec())),
        }
    }
    (method.as_bytes().to_vec(), target.as_bytes().to_vec(), authority, pairs)
}

fn list_parts(list: &RequestList) -> Parts {
    let pairs = list.pairs().map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
    (list.method().to_vec(), list.path().to_vec(), list.authority().map(<[u8]>::to_vec), pairs)
}

#[test]
fn the_http2_list_holds_the_same_head_without_connection_fields() {
    let sets = edit_sets();
    let mut list = RequestList::default();
    for raw in HEADS {
        let p = parsed(raw);
        let (target, authority) = p.target();
        for edits in [vec![], vec![&sets[1]]] {
            for case in cases() {
                let fwd = forwarding(case);
                let mut text = Vec::new();
                let mut w = Http1Request::new(&mut text);
                write_request_head(&mut w, raw, &p.head, &p.fields, target, authority, b"backend", &edits, &fwd);
                validators(&mut w);
                // The same list object, reused from head to head.
                write_request_head(&mut list, raw, &p.head, &p.fields, target, authority, b"backend", &edits, &fwd);
                validators(&mut list);
                assert_eq!(list_parts(&list), expected(&text), "{}", String::from_utf8_lossy(&text));
            }
        }
    }
}

#[test]
fn an_empty_host_gives_no_authority() {
    let p = parsed(b"GET / HTTP/1.0\r\n\r\n");
    let fwd = forwarding(cases()[0]);
    let mut list = RequestList::default();
    write_request_head(&mut list, p.raw, &p.head, &p.fields, b"/", None, b"", &[], &fwd);
    assert_eq!(list.authority(), None);
    write_request_head(&mut list, p.raw, &p.head, &p.fields, b"/", None, b"10.0.0.1:80", &[], &fwd);
    assert_eq!(list.authority(), Some(&b"10.0.0.1:80"[..]));
}

#[test]
fn the_codec_encodes_the_list_as_the_request_headers() {
    let raw =
        b"POST /c?x=1 HTTP/1.1\r\nHost: Example.com\r\nX-Tag: a\r\nTransfer-Encoding: chunked\r\nTE: trailers\r\n\r\n";
    let p = parsed(raw);
    let fwd = forwarding(cases()[1]);
    let mut list = RequestList::default();
    write_request_head(&mut list, raw, &p.head, &p.fields, b"/c?x=1", None, b"", &[], &fwd);
    let mut client = Client::new(Config { max_header_list: 65536, stream_window: 65535, connection_window: 65535 });
    let skip = client.output().len();
    client.written(skip);
    let authority = list.authority().unwrap_or_default();
    let line = RequestLine { method: list.method(), scheme: b"http", authority, path: list.path() };
    client.open(line, list.pairs(), false).expect("open");
    let out = client.output();
    let head = Head::read(out).expect("frame head");
    let block = &out[HEADER_LEN..HEADER_LEN + head.len];
    let mut decoded = Vec::new();
    let mut buf = Vec::new();
    Decoder::new(4096).decode(block, 65536, &mut buf, &mut decoded).expect("hpack");
    let got: Vec<(String, String)> = decoded
        .iter()
        .map(|f: &Field| {
            (
                String::from_utf8_lossy(&buf[f.name.clone()]).into(),
                String::from_utf8_lossy(&buf[f.value.clone()]).into(),
            )
        })
        .collect();
    let want = [
        (":method", "POST"),
        (":scheme", "http"),
        (":authority", "Example.com"),
        (":path", "/c?x=1"),
        ("x-tag", "a"),
        ("x-client-verify", "SUCCESS"),
        ("x-client-cert-subject", "CN=alice, O=Example"),
        ("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-01"),
        ("te", "trailers"),
    ];
    let want: Vec<(String, String)> = want.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect();
    assert_eq!(got, want);
}
