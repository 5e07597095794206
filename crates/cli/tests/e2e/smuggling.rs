//! Request smuggling vectors, as raw bytes: each gets 400 and a closed connection, a
//! keep-alive connection opened before them keeps working throughout, and the origin never
//! sees a smuggled second request.

use crate::common;

use common::{proxy_addr, simple_config, Origin, Proxy};

/// (name, raw request). Each would be read as two requests by some party if the proxy
/// passed it on, or is framing a proxy must refuse. (A bare LF line ending is left out: RFC
/// 9112 §2.2 lets a recipient accept it, and the proxy re-serialises heads with CRLF.)
const VECTORS: &[(&str, &[u8])] = &[
    (
        "CL+TE",
        b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 6\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nhost: x\r\n\r\n",
    ),
    (
        "TE+CL",
        b"POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\ncontent-length: 4\r\n\r\n5c\r\nGET /smuggled HTTP/1.1\r\nhost: x\r\n\r\n0\r\n\r\n",
    ),
    (
        "duplicate differing CL",
        b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\ncontent-length: 40\r\n\r\nGET /smuggled HTTP/1.1\r\nhost: x\r\n\r\n",
    ),
    ("CL list", b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 0, 40\r\n\r\nGET /smuggled HTTP/1.1\r\nhost: x\r\n\r\n"),
    ("CL with sign", b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: +5\r\n\r\nhello"),
    ("CL not a number", b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 5x\r\n\r\nhello"),
    (
        "obs-fold",
        b"GET / HTTP/1.1\r\nhost: x\r\nx-a: 1\r\n transfer-encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n",
    ),
    ("bare CR in header", b"GET / HTTP/1.1\r\nhost: x\rx-a: 1\r\n\r\n"),
    ("space before colon", b"POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding : chunked\r\n\r\n0\r\n\r\n"),
    ("TE: gzip", b"POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: gzip\r\n\r\nxxxx"),
    ("TE: gzip, chunked", b"POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: gzip, chunked\r\n\r\n0\r\n\r\n"),
    ("TE: chunked, gzip", b"POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked, gzip\r\n\r\n0\r\n\r\n"),
    ("TE: xchunked", b"POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: xchunked\r\n\r\n0\r\n\r\n"),
    ("TE in HTTP/1.0", b"POST / HTTP/1.0\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n"),
    (
        "duplicate TE",
        b"POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
    ),
    ("invalid chunk size", b"POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"),
    (
        "chunk size overflow",
        b"POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\nffffffffffffffffff1\r\nhello\r\n0\r\n\r\n",
    ),
    ("chunk without CRLF", b"POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n"),
    ("NUL in header", b"GET / HTTP/1.1\r\nhost: x\r\nx-a: a\0b\r\n\r\n"),
    ("space in target", b"GET /a b HTTP/1.1\r\nhost: x\r\n\r\n"),
    ("missing host", b"GET / HTTP/1.1\r\n\r\n"),
    ("two hosts", b"GET / HTTP/1.1\r\nhost: a\r\nhost: b\r\n\r\n"),
    // Not the full HTTP/2 preface (that starts h2c: see `the_http2_preface_starts_h2c_and_reaches_no_origin`).
    ("PRI request line", b"PRI * HTTP/2.0\r\nhost: x\r\n\r\n"),
];

#[test]
fn smuggling_vectors_get_400_and_never_reach_the_origin() {
    let origin = Origin::start("origin");
    let listen = proxy_addr();
    let proxy = Proxy::start(&simple_config(listen, &[origin.addr], ""), listen);
    let mut bystander = proxy.connect();
    assert_eq!(bystander.get("/").status, 200);
    let mut legitimate = 1;
    let mut failures = Vec::new();
    for (name, bytes) in VECTORS {
        let mut c = proxy.connect();
        c.send(bytes).expect("send");
        match c.read_response() {
            Ok(r) if r.status == 400 => {
                if !c.is_closed() {
                    failures.push(format!("{name}: 400 but the connection stayed open"));
                }
            }
            Ok(r) => failures.push(format!("{name}: got {} {:?} from {:?}", r.status, r.text(), r.origin())),
            Err(e) => failures.push(format!("{name}: no response ({e})")),
        }
        // The connection opened before keeps working after every vector.
        let r = bystander.get("/");
        assert_eq!(r.status, 200, "bystander after {name}");
        legitimate += 1;
        if origin.requests() != legitimate {
            failures.push(format!("{name}: the origin saw {} request(s) from it", origin.requests() - legitimate));
            legitimate = origin.requests();
        }
    }
    assert!(failures.is_empty(), "vectors not refused properly:\n{}", failures.join("\n"));
}

/// With `http2` enabled (the default) the preface opens an HTTP/2 connection: the proxy
/// answers with its SETTINGS frame and nothing reaches the origin as an HTTP/1.1 request.
#[test]
fn the_http2_preface_starts_h2c_and_reaches_no_origin() {
    use std::io::Read;
    let origin = Origin::start("origin");
    let listen = proxy_addr();
    let proxy = Proxy::start(&simple_config(listen, &[origin.addr], ""), listen);
    let mut c = proxy.connect();
    c.send(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").expect("send");
    let mut frame_head = [0u8; 9];
    c.stream.read_exact(&mut frame_head).expect("a frame");
    assert_eq!(frame_head[3], 4, "first frame is SETTINGS: {frame_head:?}");
    assert_eq!(origin.requests(), 0);
}

#[test]
fn valid_framings_still_pass() {
    let origin = Origin::start("origin");
    let listen = proxy_addr();
    let proxy = Proxy::start(&simple_config(listen, &[origin.addr], ""), listen);
    let mut c = proxy.connect();
    let requests: &[&[u8]] = &[
        b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nhello",
        b"POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\ntrailer: t\r\n\r\n",
        b"POST / HTTP/1.1\r\nhost: x\r\nTransfer-Encoding: Chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\ncontent-length: 5\r\n\r\nhello",
    ];
    for (i, bytes) in requests.iter().enumerate() {
        c.send(bytes).expect("send");
        let r = c.read_response().expect("response");
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
        assert_eq!(r.header("x-received-bytes"), Some("5"), "request {i}");
    }
    assert_eq!(origin.requests(), requests.len() as u64);
}
