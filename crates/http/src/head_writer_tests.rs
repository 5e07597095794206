//! The head writers against a table of server heads, rule edits and the
//! fields the pipeline adds: the HTTP/1.1 writer's bytes equal those of the
//! text functions the pipeline used before there were writers (kept here,
//! verbatim, as the reference); the HTTP/2 writer's list equals that same
//! head's fields, lower-cased and without the connection-specific ones, and
//! decodes from the codec's HEADERS as such.

use switchyard_config::{Encoding, HeaderEdits};

use super::*;
use crate::http2::frame::{kind, Head, HEADER_LEN};
use crate::http2::hpack::Decoder;
use crate::parse::{parse_response, Connection};
use crate::rewrite::{write_local_head, write_response_head};

/// The pipeline's text functions before the writers, as they were.
mod before {
    use super::*;
    use crate::parse::ResponseHead;

    fn is_hop_by_hop(name: &[u8]) -> bool {
        const HOP: [&[u8]; 6] = [b"connection", b"keep-alive", b"proxy-connection", b"te", b"upgrade", b"expect"];
        HOP.iter().any(|h| name.eq_ignore_ascii_case(h))
    }

    fn named_by_connection(buf: &[u8], fields: &[Field], name: &[u8]) -> bool {
        const KEPT: [&[u8]; 3] = [b"content-length", b"transfer-encoding", b"host"];
        if KEPT.iter().any(|k| name.eq_ignore_ascii_case(k)) {
            return false;
        }
        fields.iter().filter(|f| buf[f.name.clone()].eq_ignore_ascii_case(b"connection")).any(|f| {
            buf[f.value.clone()].split(|&b| b == b',').any(|t| crate::parse::trim(t).eq_ignore_ascii_case(name))
        })
    }

    fn edited_away(edits: &[&HeaderEdits], name: &[u8]) -> bool {
        edits.iter().any(|e| {
            e.remove_response.iter().any(|r| name.eq_ignore_ascii_case(r.as_bytes()))
                || e.set_response.iter().any(|(n, _)| name.eq_ignore_ascii_case(n.as_bytes()))
        })
    }

    fn write_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }

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
        out.clear();
        let line_end = memchr::memchr2(b'\r', b'\n', buf).unwrap_or(0);
        let reason = buf.get(13..line_end).unwrap_or(b"");
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(itoa::Buffer::new().format(head.status).as_bytes());
        out.push(b' ');
        if reason.is_empty() {
            out.extend_from_slice(reason_phrase(head.status).as_bytes());
        } else {
            out.extend_from_slice(reason);
        }
        out.extend_from_slice(b"\r\n");
        for f in fields {
            let name = &buf[f.name.clone()];
            if is_hop_by_hop(name)
                || (head.connection.other_tokens && named_by_connection(buf, fields, name))
                || (!edits.is_empty() && edited_away(edits, name))
                || (head.framing == Framing::Chunked && name.eq_ignore_ascii_case(b"content-length"))
                || (dechunk && name.eq_ignore_ascii_case(b"transfer-encoding"))
            {
                continue;
            }
            write_field(out, name, &buf[f.value.clone()]);
        }
        for e in edits {
            for (name, value) in e.set_response.iter().chain(e.add_response.iter()) {
                write_field(out, name.as_bytes(), value.as_bytes());
            }
        }
        if close {
            out.extend_from_slice(b"connection: close\r\n");
        } else if keep_alive_10 {
            out.extend_from_slice(b"connection: keep-alive\r\n");
        }
        out.extend_from_slice(b"\r\n");
    }

    pub fn set_cookie(out: &mut Vec<u8>, cookie: &str) {
        out.truncate(out.len().saturating_sub(2));
        out.extend_from_slice(b"set-cookie: ");
        out.extend_from_slice(cookie.as_bytes());
        out.extend_from_slice(b"\r\n\r\n");
    }

    pub fn add_alt_svc(out: &mut Vec<u8>, port: u16) {
        let head_end = memchr::memmem::find(out, b"\r\n\r\n").unwrap_or(out.len());
        let has_one = out[..head_end]
            .split(|&b| b == b'\n')
            .any(|line| line.len() > 8 && line[..8].eq_ignore_ascii_case(b"alt-svc:"));
        if has_one {
            return;
        }
        let at = memchr::memchr(b'\n', out).map_or(0, |i| i + 1);
        let mut field = Vec::with_capacity(40);
        field.extend_from_slice(b"alt-svc: h3=\":");
        field.extend_from_slice(itoa::Buffer::new().format(port).as_bytes());
        field.extend_from_slice(b"\"; ma=86400\r\n");
        out.splice(at..at, field);
    }

    pub fn local_response(
        out: &mut Vec<u8>,
        status: u16,
        location: Option<&str>,
        content_type: &str,
        body: &[u8],
        connection: Connection,
    ) {
        out.clear();
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
        out.push(b' ');
        out.extend_from_slice(reason_phrase(status).as_bytes());
        out.extend_from_slice(b"\r\n");
        if let Some(location) = location {
            write_field(out, b"location", location.as_bytes());
        }
        let body = if crate::parse::response_has_body(false, status) { body } else { &b""[..] };
        if !body.is_empty() || crate::parse::response_has_body(false, status) {
            write_field(out, b"content-type", content_type.as_bytes());
            write_field(out, b"content-length", itoa::Buffer::new().format(body.len()).as_bytes());
        }
        if connection.close {
            out.extend_from_slice(b"connection: close\r\n");
        } else if connection.keep_alive {
            out.extend_from_slice(b"connection: keep-alive\r\n");
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(body);
    }
}

/// Server heads: framing kinds, hop-by-hop and connection-named fields,
/// capitalised names, a reason phrase of its own or none, validators.
const HEADS: &[&[u8]] = &[
    b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 5\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 9\r\nETag: \"v1\"\r\n\r\n",
    b"HTTP/1.0 404 Nope\r\nContent-Length: 0\r\nConnection: keep-alive\r\nServer: o\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nConnection: x-a, close\r\nX-A: 1\r\nKeep-Alive: 5\r\nVary: Origin\r\nVary: Cookie\r\n\r\n",
    b"HTTP/1.1 304 Not Modified\r\nETag: W/\"w\"\r\nCache-Control: max-age=5\r\n\r\n",
    b"HTTP/1.1 503 \r\nRetry-After: 5\r\nAlt-Svc: h3=\":443\"\r\nContent-Length: 3\r\n\r\n",
    b"HTTP/1.1 200 OK\nX-A: b\r\nVary: *\r\nSet-Cookie: s=1\r\nContent-Length: 2\r\n\r\n",
    b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Type: application/grpc\r\nTrailer: grpc-status\r\nTE: trailers\r\nUpgrade: h2c\r\nProxy-Connection: x\r\n\r\n",
];

fn edit_sets() -> Vec<HeaderEdits> {
    vec![
        HeaderEdits::default(),
        HeaderEdits {
            set_response: vec![("server".into(), "sy".into()), ("Vary".into(), "accept-language".into())],
            add_response: vec![("x-tag".into(), "b".into()), ("Alt-Svc".into(), "clear".into())],
            remove_response: vec!["x-a".into(), "etag".into()],
            ..HeaderEdits::default()
        },
        HeaderEdits { remove_response: vec!["content-type".into()], ..HeaderEdits::default() },
    ]
}

/// What the pipeline adds once the rewrite is written.
#[derive(Clone, Copy, Debug)]
struct Extras {
    cookie: Option<&'static str>,
    alt_svc: Option<u16>,
    coding: Option<Option<Coding>>,
    chunked: bool,
}

fn extras() -> Vec<Extras> {
    let gzip = Coding::Encode(Encoding::Gzip, 1);
    let mut all = Vec::new();
    for cookie in [None, Some("sy=ab12; Path=/; HttpOnly")] {
        for alt_svc in [None, Some(8443)] {
            for (coding, chunked) in
                [(None, false), (Some(None), false), (Some(Some(gzip)), true), (Some(Some(gzip)), false)]
            {
                all.push(Extras { cookie, alt_svc, coding, chunked });
            }
        }
    }
    all.push(Extras { cookie: None, alt_svc: None, coding: Some(Some(Coding::Gunzip)), chunked: true });
    all
}

/// The pipeline's order: rewrite, persistence's cookie, `alt-svc`, compression.
fn with_writer<W: HeadWriter>(w: &mut W, raw: &[u8], edits: &[&HeaderEdits], flags: (bool, bool, bool), x: Extras) {
    let mut fields = Vec::new();
    let head = parse_response(raw, 8192, &mut fields).expect("valid").expect("complete");
    write_response_head(w, raw, &head, &fields, edits, flags.0, flags.1, flags.2);
    if let Some(cookie) = x.cookie {
        w.append(b"set-cookie", cookie.as_bytes());
    }
    if let Some(port) = x.alt_svc {
        w.alt_svc(port);
    }
    if let Some(coding) = x.coding {
        w.encoded(coding, x.chunked);
    }
}

fn with_text(raw: &[u8], edits: &[&HeaderEdits], flags: (bool, bool, bool), x: Extras) -> Vec<u8> {
    let mut fields = Vec::new();
    let head = parse_response(raw, 8192, &mut fields).expect("valid").expect("complete");
    let mut out = Vec::new();
    before::response_head(&mut out, raw, &head, &fields, edits, flags.0, flags.1, flags.2);
    if let Some(cookie) = x.cookie {
        before::set_cookie(&mut out, cookie);
    }
    if let Some(port) = x.alt_svc {
        before::add_alt_svc(&mut out, port);
    }
    match x.coding {
        Some(Some(coding)) => crate::compress::rewrite_head(&mut out, coding, x.chunked),
        Some(None) => crate::compress::add_vary(&mut out),
        None => {}
    }
    out
}

const FLAGS: [(bool, bool, bool); 4] =
    [(false, false, false), (true, false, false), (false, true, false), (false, false, true)];

/// Every case of the table: (server head, edits, flags, extras).
fn each_case(mut check: impl FnMut(&[u8], &[&HeaderEdits], (bool, bool, bool), Extras)) -> usize {
    let sets = edit_sets();
    let mut n = 0;
    for raw in HEADS {
        for set in &sets {
            let edits: Vec<&HeaderEdits> = if *set == HeaderEdits::default() { vec![] } else { vec![set] };
            for flags in FLAGS {
                for x in extras() {
                    check(raw, &edits, flags, x);
                    n += 1;
                }
            }
        }
    }
    n
}

#[test]
fn the_http1_writer_writes_the_bytes_of_before() {
    let mut out = Vec::new();
    let n = each_case(|raw, edits, flags, x| {
        with_writer(&mut Http1Head::new(&mut out), raw, edits, flags, x);
        let expected = with_text(raw, edits, flags, x);
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&expected),
            "{} {flags:?} {x:?}",
            String::from_utf8_lossy(raw)
        );
    });
    assert!(n > 500, "{n} cases");
}

#[test]
fn the_http1_writer_writes_local_responses_as_before() {
    let close = Connection { close: true, ..Connection::default() };
    let keep_10 = Connection { keep_alive: true, ..Connection::default() };
    for (status, location, body) in [
        (301, Some("https://x/"), &b"moved\n"[..]),
        (503, None, b"503 Service Unavailable\n"),
        (204, None, b"ignored"),
        (304, None, b""),
        (200, None, b""),
        (599, None, b"x"),
    ] {
        for connection in [Connection::default(), close, keep_10] {
            let mut now = Vec::new();
            crate::rewrite::local_response(&mut now, status, location, "text/plain", body, connection);
            let mut then = Vec::new();
            before::local_response(&mut then, status, location, "text/plain", body, connection);
            assert_eq!(now, then, "{status} {connection:?}");
        }
    }
}

/// The head as an HTTP/2 client must get it: the HTTP/1.1 bytes' fields,
/// names lower case, connection-specific ones left out; and their framing.
fn expected_list(h1: &[u8]) -> (u16, Vec<(String, String)>, Framing) {
    let mut fields = Vec::new();
    let head = parse_response(h1, 8192, &mut fields).expect("our head parses").expect("complete");
    let list = fields
        .iter()
        .map(|f| (String::from_utf8_lossy(&h1[f.name.clone()]).to_lowercase(), text(&h1[f.value.clone()])))
        .filter(|(n, _)| !connection_specific(n.as_bytes()))
        .collect();
    (head.status, list, head.framing)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn listed(list: &FieldList) -> Vec<(String, String)> {
    list.pairs().map(|(n, v)| (text(n), text(v))).collect()
}

#[test]
fn the_http2_writer_lists_the_same_head_without_connection_fields() {
    let mut list = FieldList::default();
    let mut out = Vec::new();
    each_case(|raw, edits, flags, x| {
        with_writer(&mut list, raw, edits, flags, x);
        with_writer(&mut Http1Head::new(&mut out), raw, edits, flags, x);
        let (status, fields, framing) = expected_list(&out);
        let why = || format!("{} {flags:?} {x:?}", String::from_utf8_lossy(raw));
        assert_eq!(list.status(), status, "{}", why());
        assert_eq!(listed(&list), fields, "{}", why());
        assert_eq!(list.framing(), framing, "{}", why());
        assert!(list.pairs().all(|(n, _)| !connection_specific(n) && !n.iter().any(u8::is_ascii_uppercase)));
        // Written back as text (the cache's copy), it parses to the same head.
        let mut text = Vec::new();
        list.write_text(&mut text);
        let (status, fields, framing) = expected_list(&text);
        assert_eq!((status, framing), (list.status(), list.framing()), "{}", why());
        assert_eq!(fields, listed(&list), "{}", why());
    });
}

#[test]
fn the_http2_writer_lists_local_responses() {
    let mut list = FieldList::default();
    let close = Connection { close: true, ..Connection::default() };
    let body = write_local_head(&mut list, 302, Some("/b"), "text/plain", b"found\n", close);
    assert_eq!(body, b"found\n");
    assert_eq!(list.status(), 302);
    assert_eq!(list.framing(), Framing::Length(6));
    let expected = [("location", "/b"), ("content-type", "text/plain"), ("content-length", "6")];
    assert_eq!(listed(&list), expected.map(|(n, v)| (n.to_owned(), v.to_owned())));
}

/// The list HPACK-encoded by the codec decodes to `:status` and the same fields.
#[test]
fn the_codec_sends_the_list_as_headers() {
    use crate::http2::server::{Config, Server, PREFACE};
    let cfg = Config { max_streams: 4, max_header_list: 4096, stream_window: 65_535, connection_window: 1 << 20 };
    let mut s = Server::new(cfg);
    let mut hello = PREFACE.to_vec();
    crate::http2::frame::write_head(&mut hello, 0, kind::SETTINGS, 0, 0);
    let mut block = Vec::new();
    let mut enc = crate::http2::hpack::Encoder::default();
    for (n, v) in [(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "a")] {
        enc.field(n.as_bytes(), v.as_bytes(), &mut block);
    }
    crate::http2::frame::write_head(&mut hello, block.len(), kind::HEADERS, 0x5, 1);
    hello.extend_from_slice(&block);
    s.recv(&hello, &mut |_| {}).expect("a request");
    let taken = s.output().len();
    s.written(taken);

    let raw = HEADS[3];
    let x = Extras { cookie: Some("sy=1"), alt_svc: Some(443), coding: Some(Some(Coding::Gunzip)), chunked: true };
    let mut list = FieldList::default();
    with_writer(&mut list, raw, &[], (true, false, false), x);
    assert!(s.send_head(1, list.status(), list.pairs(), false));
    let out = s.output().to_vec();
    let h = Head::read(&out).expect("a frame");
    assert_eq!(h.kind, kind::HEADERS);
    let (mut buf, mut fields) = (Vec::new(), Vec::new());
    Decoder::default().decode(&out[HEADER_LEN..HEADER_LEN + h.len], 1 << 16, &mut buf, &mut fields).expect("decodes");
    let got: Vec<(String, String)> =
        fields.iter().map(|f| (text(&buf[f.name.clone()]), text(&buf[f.value.clone()]))).collect();
    let mut expected = vec![(":status".to_owned(), "200".to_owned())];
    // `connection`, `keep-alive` and the field `connection` names are gone;
    // the added fields are there.
    expected.extend(
        [("alt-svc", "h3=\":443\"; ma=86400"), ("set-cookie", "sy=1"), ("vary", "Origin, Cookie, Accept-Encoding")]
            .map(|(n, v)| (n.to_owned(), v.to_owned())),
    );
    assert_eq!(got, expected);
}
