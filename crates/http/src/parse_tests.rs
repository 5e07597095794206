//! Table-driven tests on raw request and response bytes.

use super::*;

const LIMITS: HeadLimits = HeadLimits { max_bytes: 8192, max_fields: 100 };

fn req(raw: &[u8]) -> Result<Option<RequestHead>, ProxyError> {
    parse_request(raw, LIMITS, &mut Vec::new())
}

fn status_of(raw: &[u8]) -> Option<u16> {
    req(raw).err().and_then(|e| e.status())
}

#[test]
fn accepted_requests_and_their_framing() {
    let table: &[(&[u8], Framing)] = &[
        (b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", Framing::Empty),
        (b"GET / HTTP/1.0\r\n\r\n", Framing::Empty),
        (b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n", Framing::Length(5)),
        (b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", Framing::Empty),
        (b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", Framing::Length(5)),
        (b"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", Framing::Chunked),
        (b"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:  CHUNKED \r\n\r\n", Framing::Chunked),
        (b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", Framing::Empty),
        (b"GET http://example.com/a HTTP/1.1\r\nHost: a\r\n\r\n", Framing::Empty),
    ];
    for (raw, framing) in table {
        let head = req(raw).unwrap_or_else(|e| panic!("{:?}: {e}", String::from_utf8_lossy(raw)));
        let head = head.expect("complete");
        assert_eq!(head.framing, *framing, "{:?}", String::from_utf8_lossy(raw));
        assert_eq!(head.len, raw.len());
    }
}

#[test]
fn smuggling_and_malformed_heads_are_refused_with_400() {
    let table: &[(&str, &[u8])] = &[
        ("CL and TE", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"),
        ("TE and CL", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n"),
        ("differing CL", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\n"),
        ("CL list", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4, 5\r\n\r\n"),
        ("CL sign", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +4\r\n\r\n"),
        ("CL hex", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x4\r\n\r\n"),
        ("CL overflow", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n"),
        ("TE gzip", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n"),
        (
            "TE chunked twice",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
        ),
        ("TE list", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"),
        ("TE vertical tab", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \x0bchunked\r\n\r\n"),
        ("TE in 1.0", b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"),
        ("obs-fold", b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n"),
        ("bare CR in value", b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\rc\r\n\r\n"),
        ("bare CR line end", b"GET / HTTP/1.1\rHost: a\r\n\r\n"),
        ("space before colon", b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length : 4\r\n\r\n"),
        ("missing host", b"GET / HTTP/1.1\r\n\r\n"),
        ("duplicate host", b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
        ("NUL in value", b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\x00c\r\n\r\n"),
        ("HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
        ("HTTP/0.9", b"GET /\r\n\r\n"),
        ("bad version", b"GET / HTTP/1.2\r\nHost: a\r\n\r\n"),
        ("relative target", b"GET index.html HTTP/1.1\r\nHost: a\r\n\r\n"),
        ("CONNECT", b"CONNECT a:443 HTTP/1.1\r\nHost: a\r\n\r\n"),
        ("space in target", b"GET /a b HTTP/1.1\r\nHost: a\r\n\r\n"),
        ("empty method", b" / HTTP/1.1\r\nHost: a\r\n\r\n"),
    ];
    for (what, raw) in table {
        assert_eq!(status_of(raw), Some(400), "{what}: {:?}", req(raw));
    }
}

#[test]
fn unknown_expectations_get_417() {
    assert_eq!(status_of(b"GET / HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\n\r\n"), Some(417));
}

#[test]
fn oversized_heads_get_431() {
    let mut long = b"GET / HTTP/1.1\r\nHost: a\r\nX-Big: ".to_vec();
    long.extend(std::iter::repeat_n(b'a', 9000));
    long.extend_from_slice(b"\r\n\r\n");
    assert_eq!(status_of(&long), Some(431));
    // Incomplete but already past the limit.
    assert_eq!(status_of(&long[..8500]), Some(431));
    let mut many = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
    for i in 0..101 {
        many.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    assert_eq!(status_of(&many), Some(431));
}

#[test]
fn partial_heads_ask_for_more() {
    let full = b"GET /path HTTP/1.1\r\nHost: a\r\n\r\n";
    for cut in 0..full.len() {
        assert_eq!(req(&full[..cut]), Ok(None), "cut at {cut}");
    }
}

#[test]
fn request_fields_are_located() {
    let raw =
        b"GET /p?q=1 HTTP/1.1\r\nHost: Example.com:80\r\nConnection: keep-alive, X-Hop\r\nExpect: 100-continue\r\n\r\n";
    let mut fields = Vec::new();
    let head = parse_request(raw, LIMITS, &mut fields).expect("ok").expect("complete");
    assert_eq!(&raw[head.method.clone()], b"GET");
    assert_eq!(&raw[head.target.clone()], b"/p?q=1");
    assert_eq!(&raw[head.host.clone().expect("host")], b"Example.com:80");
    assert_eq!(head.version, Version::Http11);
    assert!(head.connection.keep_alive && head.connection.other_tokens && !head.connection.close);
    assert!(head.expect_continue);
    assert_eq!(fields.len(), 3);
    assert_eq!(&raw[fields[1].value.clone()], b"keep-alive, X-Hop");
}

#[test]
fn te_trailers_is_found_among_codings() {
    let table: [(&[u8], bool); 6] = [
        (b"trailers", true),
        (b"Trailers", true),
        (b"gzip;q=0.5, trailers", true),
        (b"trailers;q=1", true),
        (b"gzip", false),
        (b"x-trailers", false),
    ];
    for (value, want) in table {
        let mut raw = b"POST /a HTTP/1.1\r\nHost: h\r\nTE: ".to_vec();
        raw.extend_from_slice(value);
        raw.extend_from_slice(b"\r\n\r\n");
        let mut fields = Vec::new();
        let head = parse_request(&raw, LIMITS, &mut fields).expect("ok").expect("complete");
        assert_eq!(head.te_trailers, want, "{}", String::from_utf8_lossy(value));
    }
}

#[test]
fn response_framing_table() {
    let table: &[(&[u8], Framing)] = &[
        (b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n", Framing::Length(3)),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", Framing::Chunked),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", Framing::Chunked),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", Framing::Chunked),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", Framing::UntilClose),
        (b"HTTP/1.0 200 OK\r\n\r\n", Framing::UntilClose),
    ];
    for (raw, framing) in table {
        let head = parse_response(raw, 8192, &mut Vec::new()).expect("ok").expect("complete");
        assert_eq!(head.framing, *framing, "{:?}", String::from_utf8_lossy(raw));
    }
    for raw in [
        &b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n"[..],
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
        b"SSH-2.0-OpenSSH\r\n\r\n",
    ] {
        assert!(parse_response(raw, 8192, &mut Vec::new()).is_err(), "{:?}", String::from_utf8_lossy(raw));
    }
    assert_eq!(parse_response(b"HTTP/1.1 200 OK\r\n", 8192, &mut Vec::new()), Ok(None));
    assert!(parse_response(&[b'a'; 100], 50, &mut Vec::new()).is_err());
}
