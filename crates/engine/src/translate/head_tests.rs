//! Tables for [`super`]: HTTP/3 requests as `h3` hands them over, checked
//! and turned into the head model; header lists turned into responses.

use super::*;
use switchyard_http::head_writer::HeadWriter;

fn parts(req: http::request::Builder) -> http::request::Parts {
    req.body(()).expect("request").into_parts().0
}

/// The checked request: its fields as `name: value` strings, its target and framing.
fn checked(req: http::request::Builder, end_stream: bool) -> Result<(Vec<String>, String, Framing), Malformed> {
    let mut out = Request::default();
    request(&parts(req), end_stream, &mut out)?;
    let head = out.head.clone().expect("a checked head");
    let text = |r: &std::ops::Range<usize>| String::from_utf8_lossy(out.get(r)).into_owned();
    let fields = out.fields.iter().map(|f| format!("{}: {}", text(&f.name), text(&f.value))).collect();
    Ok((fields, text(&head.target), head.framing))
}

#[test]
fn valid_requests_become_the_head_the_pipeline_reads() {
    let table: [(http::request::Builder, bool, &[&str], &str, Framing); 7] = [
        (
            http::Request::get("https://example.com/a?b=1").header("user-agent", "t"),
            true,
            &["host: example.com", "user-agent: t"],
            "/a?b=1",
            Framing::Empty,
        ),
        (
            http::Request::post("https://h:8443/up").header("content-length", "5"),
            false,
            &["host: h:8443", "content-length: 5"],
            "/up",
            Framing::Length(5),
        ),
        // No length: a body of unknown length (chunked towards an HTTP/1.1 server).
        (http::Request::post("https://h/stream"), false, &["host: h"], "/stream", Framing::Chunked),
        // The authority wins over a `host` field; cookie crumbs are joined (RFC 9114 4.2.1).
        (
            http::Request::get("https://auth/").header("host", "auth").header("cookie", "a=1").header("cookie", "b=2"),
            true,
            &["host: auth", "cookie: a=1; b=2"],
            "/",
            Framing::Empty,
        ),
        // The one `te` allowed.
        (
            http::Request::post("https://h/rpc").header("te", "trailers"),
            false,
            &["host: h", "te: trailers"],
            "/rpc",
            Framing::Chunked,
        ),
        (http::Request::builder().method("OPTIONS").uri("https://h/*"), true, &["host: h"], "/*", Framing::Empty),
        // CONNECT: only its authority, which is the target (the pipeline refuses it).
        (
            http::Request::builder().method("CONNECT").uri("example.com:443"),
            false,
            &["host: example.com:443"],
            "example.com:443",
            Framing::Chunked,
        ),
    ];
    for (req, end, fields, target, framing) in table {
        let (got, got_target, got_framing) = checked(req, end).expect("valid");
        let got: Vec<&str> = got.iter().map(String::as_str).collect();
        assert_eq!((got.as_slice(), got_target.as_str(), got_framing), (fields, target, framing));
    }
}

#[test]
fn malformed_requests_are_refused_as_http2_refuses_them() {
    let post = || http::Request::post("https://h/");
    let table: [(http::request::Builder, bool, &str); 12] = [
        (post().header("connection", "close"), false, "connection-specific field"),
        (post().header("keep-alive", "timeout=5"), false, "connection-specific field"),
        (post().header("proxy-connection", "keep-alive"), false, "connection-specific field"),
        (post().header("transfer-encoding", "chunked"), false, "connection-specific field"),
        (post().header("upgrade", "websocket"), false, "connection-specific field"),
        (post().header("te", "gzip"), false, "te other than trailers"),
        (post().header("x-padded", " value"), false, "invalid field value"),
        (post().header("x-padded", "value\t"), false, "invalid field value"),
        (post().header("content-length", "12a"), false, "invalid content-length"),
        (post().header("content-length", "3").header("content-length", "4"), false, "conflicting content-length"),
        // RFC 9114 4.1.2: a length its DATA frames do not add up to.
        (post().header("content-length", "5"), true, "content-length without DATA"),
        (http::Request::get("/no-scheme").header("host", "h"), true, "missing :scheme or :path"),
    ];
    for (req, end, why) in table {
        assert_eq!(checked(req, end).map(|_| ()), Err(why));
    }
}

#[test]
fn an_extended_connect_is_refused() {
    let mut req = parts(http::Request::builder().method("CONNECT").uri("https://h/chat"));
    req.extensions.insert(h3::ext::Protocol::WEB_TRANSPORT);
    let mut out = Request::default();
    assert_eq!(request(&req, false, &mut out), Err("unknown pseudo-header"));
}

#[test]
fn a_request_struct_is_reused_from_request_to_request() {
    let mut out = Request::default();
    request(&parts(http::Request::get("https://a/first").header("x-one", "1")), true, &mut out).expect("valid");
    request(&parts(http::Request::get("https://b/second")), true, &mut out).expect("valid");
    let names: Vec<&[u8]> = out.fields.iter().map(|f| out.get(&f.name)).collect();
    assert_eq!(names, [&b"host"[..]]);
    assert_eq!(out.get(&out.head.as_ref().expect("head").target), b"/second");
}

#[test]
fn header_lists_become_responses_with_every_field() {
    let mut list = FieldList::default();
    list.start(201, b"Created");
    list.field(b"Content-Type", b"text/plain");
    list.field(b"connection", b"close");
    list.field(b"set-cookie", b"a=1");
    list.field(b"set-cookie", b"b=2");
    list.field(b"content-length", b"3");
    list.end();
    let r = response(&list).expect("a response");
    assert_eq!(r.status(), 201);
    let fields: Vec<(&str, &[u8])> = r.headers().iter().map(|(n, v)| (n.as_str(), v.as_bytes())).collect();
    assert_eq!(
        fields,
        [
            ("content-type", &b"text/plain"[..]),
            ("set-cookie", b"a=1"),
            ("set-cookie", b"b=2"),
            ("content-length", b"3")
        ]
    );
}

#[test]
fn fields_http_cannot_hold_are_left_out() {
    let mut list = FieldList::default();
    list.start(200, b"");
    list.field(b"bad name", b"x");
    list.field(b"x-bad-value", b"a\x7fb");
    list.field(b"x-good", b"yes");
    let r = response(&list).expect("a response");
    let names: Vec<&str> = r.headers().keys().map(|k| k.as_str()).collect();
    assert_eq!(names, ["x-good"]);
}

#[test]
fn a_status_http_cannot_hold_is_an_error() {
    let mut list = FieldList::default();
    list.start(1000, b"");
    assert!(response(&list).is_err());
}
