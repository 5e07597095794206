//! The server connection driven by frames written here by hand: the
//! handshake, requests, RFC 9113's errors, flow control both ways, the
//! bounds against abuse.

use std::io::IoSlice;

use bytes::Bytes;

use super::frame::{code, flag, kind, setting, Head, HEADER_LEN};
use super::hpack::{Decoder, Encoder};
use super::server::{Config, ConnError, Counts, Event, Server, PREFACE};
use crate::parse::Framing;

const CFG: Config = Config { max_streams: 4, max_header_list: 4096, stream_window: 65_535, connection_window: 1 << 20 };

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    super::frame::write_head(&mut f, payload.len(), kind, flags, stream);
    f.extend_from_slice(payload);
    f
}

fn block(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut e = Encoder::default();
    let mut out = Vec::new();
    for (n, v) in fields {
        e.field(n.as_bytes(), v.as_bytes(), &mut out);
    }
    out
}

const GET: &[(&str, &str)] = &[(":method", "GET"), (":scheme", "http"), (":path", "/a?b"), (":authority", "x.test")];
const POST: &[(&str, &str)] = &[(":method", "POST"), (":scheme", "https"), (":path", "/up"), (":authority", "x.test")];

fn with<'a>(base: &[(&'a str, &'a str)], more: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    base.iter().chain(more).copied().collect()
}

/// An event, owned.
#[derive(Debug, PartialEq)]
enum Ev {
    Request {
        stream: u32,
        method: String,
        target: String,
        host: Option<String>,
        fields: Vec<(String, String)>,
        end: bool,
    },
    Data {
        stream: u32,
        data: Vec<u8>,
        end: bool,
    },
    Trailers {
        stream: u32,
        fields: Vec<(String, String)>,
    },
    Reset {
        stream: u32,
        code: u32,
        by_peer: bool,
    },
    GoAway {
        code: u32,
    },
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn own(e: Event<'_>) -> Ev {
    match e {
        Event::Request { stream, request, end_stream } => {
            let head = request.head.as_ref().expect("checked head");
            Ev::Request {
                stream,
                method: text(request.get(&head.method)),
                target: text(request.get(&head.target)),
                host: head.host.as_ref().map(|h| text(request.get(h))),
                fields: request
                    .fields
                    .iter()
                    .map(|f| (text(request.get(&f.name)), text(request.get(&f.value))))
                    .collect(),
                end: end_stream,
            }
        }
        Event::Data { stream, data, end_stream } => Ev::Data { stream, data: data.to_vec(), end: end_stream },
        Event::Trailers { stream, buf, fields } => Ev::Trailers {
            stream,
            fields: fields.iter().map(|f| (text(&buf[f.name.clone()]), text(&buf[f.value.clone()]))).collect(),
        },
        Event::Reset { stream, code, by_peer } => Ev::Reset { stream, code, by_peer },
        Event::GoAway { code } => Ev::GoAway { code },
    }
}

fn feed(s: &mut Server, bytes: &[u8]) -> (Result<usize, ConnError>, Vec<Ev>) {
    let mut events = Vec::new();
    let r = s.recv(bytes, &mut |e| events.push(own(e)));
    (r, events)
}

/// Feeds bytes that must not fail the connection; their events.
fn push(s: &mut Server, bytes: &[u8]) -> Vec<Ev> {
    let (r, events) = feed(s, bytes);
    assert_eq!(r, Ok(bytes.len()), "{:?}", Head::read(bytes));
    events
}

/// Everything the server queued, taken run by run.
fn drain(s: &mut Server) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let run = s.output().to_vec();
        if run.is_empty() {
            return out;
        }
        s.written(run.len());
        out.extend(run);
    }
}

/// The frames in the server's output, taken.
fn sent(s: &mut Server) -> Vec<(Head, Vec<u8>)> {
    let out = drain(s);
    let mut at = 0;
    let mut frames = Vec::new();
    while let Some(h) = Head::read(&out[at..]) {
        frames.push((h, out[at + HEADER_LEN..at + HEADER_LEN + h.len].to_vec()));
        at += HEADER_LEN + h.len;
    }
    assert_eq!(at, out.len(), "whole frames only");
    frames
}

fn kinds(frames: &[(Head, Vec<u8>)]) -> Vec<u8> {
    frames.iter().map(|(h, _)| h.kind).collect()
}

fn code_of(payload: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(payload[at..at + 4].try_into().expect("four bytes"))
}

/// The RST_STREAM codes sent, by stream.
fn resets(frames: &[(Head, Vec<u8>)]) -> Vec<(u32, u32)> {
    frames.iter().filter(|(h, _)| h.kind == kind::RST_STREAM).map(|(h, p)| (h.stream, code_of(p, 0))).collect()
}

/// The GOAWAY code sent, if any.
fn goaway(frames: &[(Head, Vec<u8>)]) -> Option<u32> {
    frames.iter().find(|(h, _)| h.kind == kind::GOAWAY).map(|(_, p)| code_of(p, 4))
}

/// A server past the handshake, its output taken.
fn open() -> Server {
    let mut s = Server::new(CFG);
    let mut hello = PREFACE.to_vec();
    hello.extend(frame(kind::SETTINGS, 0, 0, &[]));
    let (r, ev) = feed(&mut s, &hello);
    assert_eq!(r, Ok(hello.len()));
    assert!(ev.is_empty());
    sent(&mut s);
    s.take_counts();
    s
}

fn get(stream: u32) -> Vec<u8> {
    frame(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, stream, &block(GET))
}

/// A malformed request is reset on its stream, and the connection goes on.
fn refused_on_stream(fields: &[(&str, &str)], end_stream: bool) -> Vec<(u32, u32)> {
    let mut s = open();
    let flags = flag::END_HEADERS | if end_stream { flag::END_STREAM } else { 0 };
    let (r, ev) = feed(&mut s, &frame(kind::HEADERS, flags, 1, &block(fields)));
    assert!(r.is_ok(), "{fields:?}");
    assert!(ev.is_empty(), "{fields:?}: {ev:?}");
    let (_, ev) = feed(&mut s, &get(3));
    assert_eq!(ev.len(), 1, "the next stream is served");
    resets(&sent(&mut s))
}

#[test]
fn the_handshake_sends_settings_and_acknowledges_the_clients() {
    let mut s = Server::new(CFG);
    let out = sent(&mut s);
    assert_eq!(kinds(&out), [kind::SETTINGS, kind::WINDOW_UPDATE]);
    let settings: Vec<(u16, u32)> =
        out[0].1.chunks(6).map(|c| (u16::from_be_bytes([c[0], c[1]]), code_of(c, 2))).collect();
    assert_eq!(
        settings,
        [
            (setting::MAX_CONCURRENT_STREAMS, 4),
            (setting::INITIAL_WINDOW_SIZE, 65_535),
            (setting::MAX_HEADER_LIST_SIZE, 4096)
        ]
    );
    assert_eq!(code_of(&out[1].1, 0), (1 << 20) - 65_535);
    // The preface a byte at a time, then SETTINGS.
    for n in 1..PREFACE.len() {
        assert_eq!(feed(&mut s, &PREFACE[..n]).0, Ok(0), "nothing is taken before the whole preface");
    }
    assert_eq!(feed(&mut s, PREFACE).0, Ok(24));
    let (r, _) = feed(&mut s, &frame(kind::SETTINGS, 0, 0, &[0, 4, 0, 1, 0, 0]));
    assert_eq!(r, Ok(15));
    let out = sent(&mut s);
    assert_eq!(out.iter().map(|(h, _)| (h.kind, h.flags)).collect::<Vec<_>>(), [(kind::SETTINGS, flag::ACK)]);
}

#[test]
fn a_bad_preface_or_a_first_frame_other_than_settings_is_a_protocol_error() {
    let mut s = Server::new(CFG);
    sent(&mut s);
    assert_eq!(feed(&mut s, b"GET / HTTP/1.1\r\n").0.map_err(|e| e.code), Err(code::PROTOCOL_ERROR));
    assert_eq!(goaway(&sent(&mut s)), Some(code::PROTOCOL_ERROR));
    let mut s = Server::new(CFG);
    let mut hello = PREFACE.to_vec();
    hello.extend(frame(kind::PING, 0, 0, &[0; 8]));
    assert_eq!(feed(&mut s, &hello).0.map_err(|e| e.code), Err(code::PROTOCOL_ERROR));
    assert!(s.is_closed());
}

#[test]
fn a_request_arrives_as_the_pipelines_head_and_is_answered() {
    let mut s = open();
    let fields =
        with(GET, &[("accept", "*/*"), ("te", "trailers"), ("cookie", "a=1"), ("x-y", "z"), ("cookie", "b=2")]);
    let (r, ev) = feed(&mut s, &frame(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, 1, &block(&fields)));
    assert!(r.is_ok());
    let pairs = |l: &[(&str, &str)]| l.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect::<Vec<_>>();
    assert_eq!(
        ev,
        [Ev::Request {
            stream: 1,
            method: "GET".into(),
            target: "/a?b".into(),
            host: Some("x.test".into()),
            fields: pairs(&[
                ("host", "x.test"),
                ("accept", "*/*"),
                ("te", "trailers"),
                ("cookie", "a=1; b=2"),
                ("x-y", "z")
            ]),
            end: true,
        }]
    );
    // The head model the pipeline reads.
    let mut head_seen = None;
    s.recv(&frame(kind::HEADERS, flag::END_HEADERS, 3, &block(&with(POST, &[("content-length", "5")]))), &mut |e| {
        if let Event::Request { request, .. } = e {
            head_seen = request.head.clone();
        }
    })
    .expect("second request");
    let head = head_seen.expect("a head");
    assert_eq!(head.framing, Framing::Length(5));
    // Answer stream 1: a head with a body, names lowercased, hop-by-hop fields left out.
    sent(&mut s);
    let response: [(&[u8], &[u8]); 3] =
        [(b"Content-Type", b"text/plain"), (b"connection", b"close"), (b"x-served-by", b"switchyard")];
    assert!(s.send_head(1, 200, response, false));
    assert_eq!(s.send_data(1, b"hello", true), Some(5));
    assert!(!s.send_head(1, 200, [], true), "the stream is done");
    let out = sent(&mut s);
    assert_eq!(
        out.iter().map(|(h, _)| (h.kind, h.flags, h.stream)).collect::<Vec<_>>(),
        [(kind::HEADERS, flag::END_HEADERS, 1), (kind::DATA, flag::END_STREAM, 1)]
    );
    let (mut buf, mut fields) = (Vec::new(), Vec::new());
    Decoder::default().decode(&out[0].1, 1 << 16, &mut buf, &mut fields).expect("our block decodes");
    let got: Vec<(String, String)> =
        fields.iter().map(|f| (text(&buf[f.name.clone()]), text(&buf[f.value.clone()]))).collect();
    assert_eq!(got, pairs(&[(":status", "200"), ("content-type", "text/plain"), ("x-served-by", "switchyard")]));
    assert_eq!(out[1].1, b"hello");
    assert_eq!(s.open_streams(), 1, "stream 3 waits for its body");
}

#[test]
fn malformed_requests_are_reset_on_their_stream_only() {
    let cases: Vec<(&str, Vec<(&str, &str)>)> = vec![
        ("uppercase name", with(GET, &[("X-Up", "1")])),
        ("connection-specific", with(GET, &[("connection", "keep-alive")])),
        ("transfer-encoding", with(GET, &[("transfer-encoding", "chunked")])),
        ("te other than trailers", with(GET, &[("te", "gzip")])),
        ("missing :path", vec![(":method", "GET"), (":scheme", "http"), (":authority", "x")]),
        ("empty :path", vec![(":method", "GET"), (":scheme", "http"), (":path", ""), (":authority", "x")]),
        ("pseudo after regular", vec![(":method", "GET"), (":scheme", "http"), ("a", "b"), (":path", "/")]),
        ("repeated pseudo", with(GET, &[]).into_iter().chain([(":path", "/x")]).collect()),
        ("unknown pseudo", with(GET, &[]).into_iter().chain([(":status", "200")]).collect()),
        ("value with CR", with(GET, &[("x", "a\rb")])),
        ("leading space", with(GET, &[("x", " a")])),
        ("bad content-length", with(GET, &[("content-length", "1x")])),
        ("CONNECT with a path", vec![(":method", "CONNECT"), (":authority", "x:443"), (":path", "/")]),
    ];
    for (what, fields) in cases {
        assert_eq!(refused_on_stream(&fields, true), [(1, code::PROTOCOL_ERROR)], "{what}");
    }
    assert_eq!(refused_on_stream(&with(GET, &[("content-length", "3")]), true), [(1, code::PROTOCOL_ERROR)]);
}

#[test]
fn data_must_add_up_to_the_content_length() {
    for (bodies, end_with_trailers) in
        [(vec![&b"ab"[..], b"cd"], false), (vec![&b"a"[..]], false), (vec![&b"a"[..]], true)]
    {
        let mut s = open();
        push(&mut s, &frame(kind::HEADERS, flag::END_HEADERS, 1, &block(&with(POST, &[("content-length", "3")]))));
        let mut ev = Vec::new();
        for (i, b) in bodies.iter().enumerate() {
            let end = i + 1 == bodies.len() && !end_with_trailers;
            ev.extend(feed(&mut s, &frame(kind::DATA, if end { flag::END_STREAM } else { 0 }, 1, b)).1);
        }
        if end_with_trailers {
            ev.extend(
                feed(&mut s, &frame(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, 1, &block(&[("x", "y")]))).1,
            );
        }
        assert_eq!(ev.last(), Some(&Ev::Reset { stream: 1, code: code::PROTOCOL_ERROR, by_peer: false }), "{bodies:?}");
        assert_eq!(resets(&sent(&mut s)), [(1, code::PROTOCOL_ERROR)]);
    }
}

#[test]
fn a_body_and_trailers_come_as_events() {
    let mut s = open();
    push(&mut s, &frame(kind::HEADERS, flag::END_HEADERS, 1, &block(POST)));
    let (_, ev) = feed(&mut s, &frame(kind::DATA, flag::PADDED, 1, &[3, b'a', b'b', 0, 0, 0]));
    assert_eq!(ev, [Ev::Data { stream: 1, data: b"ab".to_vec(), end: false }]);
    let (_, ev) =
        feed(&mut s, &frame(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, 1, &block(&[("grpc-status", "0")])));
    assert_eq!(ev, [Ev::Trailers { stream: 1, fields: vec![("grpc-status".into(), "0".into())] }]);
    // Trailers that do not end the stream, or carry a pseudo-header, are malformed.
    for (flags, fields) in
        [(flag::END_HEADERS, vec![("x", "y")]), (flag::END_HEADERS | flag::END_STREAM, vec![(":path", "/")])]
    {
        let mut s = open();
        push(&mut s, &frame(kind::HEADERS, flag::END_HEADERS, 1, &block(POST)));
        let (_, ev) = feed(&mut s, &frame(kind::HEADERS, flags, 1, &block(&fields)));
        assert_eq!(ev, [Ev::Reset { stream: 1, code: code::PROTOCOL_ERROR, by_peer: false }]);
    }
}

#[test]
fn a_block_split_over_continuation_frames_is_one_request() {
    let b = block(&with(GET, &[("x-long", &"v".repeat(100))]));
    let mut bytes = frame(kind::HEADERS, flag::END_STREAM, 1, &b[..10]);
    bytes.extend(frame(kind::CONTINUATION, 0, 1, &b[10..50]));
    bytes.extend(frame(kind::CONTINUATION, flag::END_HEADERS, 1, &b[50..]));
    // Fed a byte at a time as well as whole: the same events.
    for piece in [bytes.len(), 1, 7] {
        let mut s = open();
        let (mut got, mut pending) = (Vec::new(), Vec::new());
        for chunk in bytes.chunks(piece) {
            pending.extend_from_slice(chunk);
            let (r, ev) = feed(&mut s, &pending);
            pending.drain(..r.expect("ok"));
            got.extend(ev);
        }
        assert!(pending.is_empty());
        assert!(matches!(&got[..], [Ev::Request { stream: 1, end: true, .. }]), "{piece}: {got:?}");
    }
    // Anything between HEADERS and its CONTINUATION ends the connection.
    let mut s = open();
    push(&mut s, &frame(kind::HEADERS, 0, 1, &b[..10]));
    let (r, _) = feed(&mut s, &frame(kind::PING, 0, 0, &[0; 8]));
    assert_eq!(r.map_err(|e| e.code), Err(code::PROTOCOL_ERROR));
    // As does a CONTINUATION with no HEADERS before it.
    let mut s = open();
    assert_eq!(
        feed(&mut s, &frame(kind::CONTINUATION, flag::END_HEADERS, 1, &b)).0.map_err(|e| e.code),
        Err(code::PROTOCOL_ERROR)
    );
}

#[test]
fn continuation_floods_and_hpack_bombs_end_the_connection() {
    let mut s = open();
    push(&mut s, &frame(kind::HEADERS, flag::END_STREAM, 1, &block(GET)));
    let empty = frame(kind::CONTINUATION, 0, 1, &[]);
    let mut result = Ok(0);
    for _ in 0..1000 {
        result = feed(&mut s, &empty).0;
        if result.is_err() {
            break;
        }
    }
    assert_eq!(result.map_err(|e| e.code), Err(code::ENHANCE_YOUR_CALM));
    assert_eq!(goaway(&sent(&mut s)), Some(code::ENHANCE_YOUR_CALM));
    // One 4000-byte entry referenced a thousand times.
    let mut s = open();
    let mut b = block(GET);
    b.extend_from_slice(&[0x40, 0x01, b'x', 0x7f, 0xa1, 0x1e]); // literal, indexed, value of 4000
    b.extend(std::iter::repeat_n(b'b', 4000));
    b.extend(std::iter::repeat_n(0xbe, 1000));
    let (r, ev) = feed(&mut s, &frame(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, 1, &b));
    assert!(ev.is_empty());
    assert_eq!(r.map_err(|e| e.code), Err(code::ENHANCE_YOUR_CALM));
}

#[test]
fn a_header_list_over_the_limit_gets_431_and_the_connection_goes_on() {
    let mut s = open();
    let big = "a".repeat(5000);
    let (r, ev) = feed(
        &mut s,
        &frame(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, 1, &block(&with(GET, &[("x-big", &big)]))),
    );
    assert!(r.is_ok() && ev.is_empty());
    let out = sent(&mut s);
    assert_eq!(kinds(&out), [kind::HEADERS]);
    let (mut buf, mut fields) = (Vec::new(), Vec::new());
    Decoder::default().decode(&out[0].1, 1 << 16, &mut buf, &mut fields).expect("decodes");
    assert_eq!(&buf[..], b":status431");
    assert!(out[0].0.has(flag::END_STREAM));
    let (_, ev) = feed(&mut s, &get(3));
    assert_eq!(ev.len(), 1);
}

#[test]
fn stream_ids_and_states_are_checked() {
    // Even id: connection error.
    let mut s = open();
    assert_eq!(feed(&mut s, &get(2)).0.map_err(|e| e.code), Err(code::PROTOCOL_ERROR));
    // A lower id than the last, never used: a connection error.
    let mut s = open();
    push(&mut s, &get(5));
    assert_eq!(feed(&mut s, &get(3)).0.map_err(|e| e.code), Err(code::PROTOCOL_ERROR));
    // HEADERS on a stream that ended: STREAM_CLOSED, for the connection.
    let mut s = open();
    push(&mut s, &get(1));
    assert!(s.send_head(1, 204, [], true));
    assert_eq!(feed(&mut s, &get(1)).0.map_err(|e| e.code), Err(code::STREAM_CLOSED));
    // On a stream we reset: ignored (the client may not have seen the reset).
    let mut s = open();
    push(&mut s, &frame(kind::HEADERS, flag::END_HEADERS, 1, &block(POST)));
    s.send_reset(1, code::CANCEL);
    assert!(
        push(&mut s, &frame(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, 1, &block(&[("x", "y")]))).is_empty()
    );
    // DATA, RST_STREAM, WINDOW_UPDATE on an idle stream: connection errors.
    for f in [
        frame(kind::DATA, 0, 9, b"x"),
        frame(kind::RST_STREAM, 0, 9, &[0, 0, 0, 8]),
        frame(kind::WINDOW_UPDATE, 0, 9, &[0, 0, 0, 1]),
    ] {
        let mut s = open();
        assert_eq!(feed(&mut s, &f).0.map_err(|e| e.code), Err(code::PROTOCOL_ERROR), "{f:?}");
    }
    // DATA after END_STREAM: STREAM_CLOSED on the stream.
    let mut s = open();
    push(&mut s, &get(1));
    let (r, _) = feed(&mut s, &frame(kind::DATA, 0, 1, b"x"));
    assert!(r.is_ok());
    assert_eq!(resets(&sent(&mut s)), [(1, code::STREAM_CLOSED)]);
    // Frames on a stream we reset are dropped quietly.
    let mut s = open();
    push(&mut s, &frame(kind::HEADERS, flag::END_HEADERS, 1, &block(POST)));
    s.send_reset(1, code::CANCEL);
    let (r, ev) = feed(&mut s, &frame(kind::DATA, 0, 1, b"late"));
    assert!(r.is_ok() && ev.is_empty());
    assert_eq!(resets(&sent(&mut s)), [(1, code::CANCEL)]);
    // PUSH_PROMISE from a client.
    let mut s = open();
    assert_eq!(
        feed(&mut s, &frame(kind::PUSH_PROMISE, flag::END_HEADERS, 1, &[0, 0, 0, 2])).0.map_err(|e| e.code),
        Err(code::PROTOCOL_ERROR)
    );
}

#[test]
fn frame_sizes_and_fields_are_checked() {
    let cases: Vec<(Vec<u8>, u32)> = vec![
        (frame(kind::DATA, 0, 1, &[0; 16_385]), code::FRAME_SIZE_ERROR),
        (frame(kind::PING, 0, 0, &[0; 7]), code::FRAME_SIZE_ERROR),
        (frame(kind::PING, 0, 1, &[0; 8]), code::PROTOCOL_ERROR),
        (frame(kind::SETTINGS, 0, 0, &[0; 5]), code::FRAME_SIZE_ERROR),
        (frame(kind::SETTINGS, flag::ACK, 0, &[0; 6]), code::FRAME_SIZE_ERROR),
        (frame(kind::SETTINGS, 0, 1, &[]), code::PROTOCOL_ERROR),
        (frame(kind::SETTINGS, 0, 0, &[0, 2, 0, 0, 0, 2]), code::PROTOCOL_ERROR),
        (frame(kind::SETTINGS, 0, 0, &[0, 5, 0, 0, 0x3f, 0xff]), code::PROTOCOL_ERROR),
        (frame(kind::SETTINGS, 0, 0, &[0, 4, 0x80, 0, 0, 0]), code::FLOW_CONTROL_ERROR),
        (frame(kind::RST_STREAM, 0, 1, &[0; 3]), code::FRAME_SIZE_ERROR),
        (frame(kind::WINDOW_UPDATE, 0, 0, &[0; 3]), code::FRAME_SIZE_ERROR),
        (frame(kind::WINDOW_UPDATE, 0, 0, &[0; 4]), code::PROTOCOL_ERROR),
        (frame(kind::GOAWAY, 0, 1, &[0; 8]), code::PROTOCOL_ERROR),
        (frame(kind::DATA, 0, 0, b"x"), code::PROTOCOL_ERROR),
        (frame(kind::HEADERS, flag::END_HEADERS, 0, &block(GET)), code::PROTOCOL_ERROR),
        (frame(kind::PRIORITY, 0, 0, &[0; 5]), code::PROTOCOL_ERROR),
        (frame(kind::HEADERS, flag::END_HEADERS, 1, &[0x80]), code::COMPRESSION_ERROR),
    ];
    for (f, want) in cases {
        let mut s = open();
        let (r, _) = feed(&mut s, &f);
        assert_eq!(r.map_err(|e| e.code), Err(want), "{:?}", Head::read(&f));
        assert_eq!(goaway(&sent(&mut s)), Some(want));
    }
    // Unknown frame types are ignored; a PRIORITY frame of the wrong size or
    // on itself resets its stream only.
    let mut s = open();
    assert!(feed(&mut s, &frame(0x20, 0xff, 0, b"whatever")).0.is_ok());
    assert!(feed(&mut s, &frame(kind::PRIORITY, 0, 1, &[0; 4])).0.is_ok());
    assert!(feed(&mut s, &frame(kind::PRIORITY, 0, 3, &[0, 0, 0, 3, 16])).0.is_ok());
    assert!(feed(&mut s, &frame(kind::PRIORITY, 0, 5, &[0, 0, 0, 1, 16])).0.is_ok());
    assert_eq!(resets(&sent(&mut s)), [(1, code::FRAME_SIZE_ERROR), (3, code::PROTOCOL_ERROR)]);
    // HEADERS depending on itself: decoded, then reset.
    let mut with_priority = vec![0, 0, 0, 7, 16];
    with_priority.extend(block(GET));
    let (r, ev) =
        feed(&mut s, &frame(kind::HEADERS, flag::END_HEADERS | flag::PRIORITY | flag::END_STREAM, 7, &with_priority));
    assert!(r.is_ok() && ev.is_empty());
    assert_eq!(resets(&sent(&mut s)), [(7, code::PROTOCOL_ERROR)]);
    // Padding longer than the frame.
    let mut s = open();
    push(&mut s, &frame(kind::HEADERS, flag::END_HEADERS, 1, &block(POST)));
    assert_eq!(
        feed(&mut s, &frame(kind::DATA, flag::PADDED, 1, &[5, 1, 2])).0.map_err(|e| e.code),
        Err(code::PROTOCOL_ERROR)
    );
}

#[test]
fn receive_windows_are_enforced_and_given_back() {
    let mut s = open();
    push(&mut s, &frame(kind::HEADERS, flag::END_HEADERS, 1, &block(POST)));
    let chunk = vec![7u8; 16_384];
    for _ in 0..3 {
        let (_, ev) = feed(&mut s, &frame(kind::DATA, 0, 1, &chunk));
        assert_eq!(ev.len(), 1);
    }
    assert!(sent(&mut s).is_empty(), "nothing released yet");
    // Past the stream's window of 65,535: FLOW_CONTROL_ERROR on the stream.
    let (_, ev) = feed(&mut s, &frame(kind::DATA, 0, 1, &chunk));
    assert_eq!(ev, [Ev::Reset { stream: 1, code: code::FLOW_CONTROL_ERROR, by_peer: false }]);
    // Released bytes come back in WINDOW_UPDATEs once half a window is due.
    let mut s = open();
    push(&mut s, &frame(kind::HEADERS, flag::END_HEADERS, 1, &block(POST)));
    push(&mut s, &frame(kind::DATA, 0, 1, &chunk));
    s.release(1, 16_384);
    assert!(sent(&mut s).is_empty());
    push(&mut s, &frame(kind::DATA, 0, 1, &chunk));
    s.release(1, 16_384);
    let updates: Vec<(u32, u32)> = sent(&mut s)
        .iter()
        .filter(|(h, _)| h.kind == kind::WINDOW_UPDATE)
        .map(|(h, p)| (h.stream, code_of(p, 0)))
        .collect();
    assert_eq!(updates, [(1, 32_768)]);
    // The connection's window: a stream-level error can't hide it.
    let cfg = Config { connection_window: 65_535, stream_window: 1 << 20, ..CFG };
    let mut s = Server::new(cfg);
    let mut hello = PREFACE.to_vec();
    hello.extend(frame(kind::SETTINGS, 0, 0, &[]));
    hello.extend(frame(kind::HEADERS, flag::END_HEADERS, 1, &block(POST)));
    push(&mut s, &hello);
    for _ in 0..3 {
        push(&mut s, &frame(kind::DATA, 0, 1, &chunk));
    }
    assert_eq!(feed(&mut s, &frame(kind::DATA, 0, 1, &chunk)).0.map_err(|e| e.code), Err(code::FLOW_CONTROL_ERROR));
}

#[test]
fn send_windows_hold_data_back_until_updated() {
    let mut s = open();
    push(&mut s, &get(1));
    assert!(s.send_head(1, 200, [], false));
    let body = vec![1u8; 100_000];
    assert_eq!(s.send_capacity(1), 65_535);
    assert_eq!(s.send_data(1, &body, true), Some(65_535));
    let out = sent(&mut s);
    let data: Vec<(usize, u8)> =
        out.iter().filter(|(h, _)| h.kind == kind::DATA).map(|(h, _)| (h.len, h.flags)).collect();
    assert_eq!(
        data,
        [(16_384, 0), (16_384, 0), (16_384, 0), (16_383, 0)],
        "frames of the peer's size, no END_STREAM yet"
    );
    assert_eq!(s.send_data(1, &body[65_535..], true), Some(0));
    // The stream's window opens; the connection's is still empty.
    push(&mut s, &frame(kind::WINDOW_UPDATE, 0, 1, &100_000u32.to_be_bytes()));
    assert!(s.take_window_opened());
    assert_eq!(s.send_capacity(1), 0);
    push(&mut s, &frame(kind::WINDOW_UPDATE, 0, 0, &50_000u32.to_be_bytes()));
    assert_eq!(s.send_capacity(1), 50_000);
    assert_eq!(s.send_data(1, &body[65_535..], true), Some(34_465));
    let out = sent(&mut s);
    assert!(out.last().is_some_and(|(h, _)| h.kind == kind::DATA && h.has(flag::END_STREAM)));
    assert!(!s.can_send(1));
    // SETTINGS_INITIAL_WINDOW_SIZE moves open streams' windows, below zero too.
    let mut s = open();
    push(&mut s, &get(1));
    s.send_head(1, 200, [], false);
    assert_eq!(s.send_data(1, &body[..1000], false), Some(1000));
    push(&mut s, &frame(kind::SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 100]));
    assert_eq!(s.send_capacity(1), 0);
    push(&mut s, &frame(kind::WINDOW_UPDATE, 0, 1, &1000u32.to_be_bytes()));
    assert_eq!(s.send_capacity(1), 100);
    // Beyond 2^31 - 1: the stream's own error, or the connection's.
    push(&mut s, &frame(kind::WINDOW_UPDATE, 0, 1, &0x7fff_ffffu32.to_be_bytes()));
    assert_eq!(resets(&sent(&mut s)), [(1, code::FLOW_CONTROL_ERROR)]);
    let r = feed(&mut s, &frame(kind::WINDOW_UPDATE, 0, 0, &0x7fff_ffffu32.to_be_bytes())).0;
    assert_eq!(r.map_err(|e| e.code), Err(code::FLOW_CONTROL_ERROR));
}

/// A server with stream 1 open and its response head sent and taken.
fn responding() -> Server {
    let mut s = open();
    push(&mut s, &get(1));
    assert!(s.send_head(1, 200, [], false));
    sent(&mut s);
    s
}

#[test]
fn a_shared_payload_goes_out_by_reference_as_the_same_frames_a_copy_makes() {
    let body: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
    let shared = Bytes::from(body.clone());
    let mut copied = responding();
    assert_eq!(copied.send_data(1, &body, false), Some(40_000));
    push(&mut copied, &frame(kind::PING, 0, 0, b"12345678"));
    assert_eq!(copied.send_data(1, b"tail", true), Some(4));
    let expected = drain(&mut copied);

    let mut s = responding();
    assert_eq!(s.send_shared(1, &shared, false), Some(40_000));
    push(&mut s, &frame(kind::PING, 0, 0, b"12345678"));
    assert_eq!(s.send_shared(1, &Bytes::from_static(b"tail"), true), Some(4));
    assert_eq!(s.output_len(), expected.len());
    // The payload's runs in a vectored write are the caller's memory, framed
    // by frame headers in between: 3 frames of 16,384 bytes at most, each a
    // header and a payload, then the PING, the copied tail.
    let mut slices = [IoSlice::new(&[]); 16];
    let n = s.output_vectored(&mut slices);
    assert_eq!(n, 7, "three headers, three payloads, the rest");
    assert_eq!(slices[1].as_ptr(), shared.as_ptr(), "not a copy");
    assert_eq!(slices[1].len(), 16_384);
    let joined: Vec<u8> = slices[..n].iter().flat_map(|s| s.iter().copied()).collect();
    assert_eq!(joined, expected);
    // Written in odd pieces across the runs' edges, the same bytes in order.
    let mut out = Vec::new();
    for step in [5, 4, 16_000, 1_000, 3, 9, 30_000, 7].into_iter().cycle() {
        let run = s.output();
        if run.is_empty() {
            break;
        }
        let k = step.min(run.len());
        out.extend_from_slice(&run[..k]);
        s.written(k);
    }
    assert_eq!(out, expected);
    assert_eq!(s.output_len(), 0);
    assert!(!s.can_send(1));
}

#[test]
fn a_shared_payload_beyond_the_window_is_taken_as_far_as_it_allows() {
    let mut s = responding();
    let body = Bytes::from(vec![7u8; 100_000]);
    assert_eq!(s.send_shared(1, &body, true), Some(65_535));
    let data: Vec<(usize, u8)> =
        sent(&mut s).iter().filter(|(h, _)| h.kind == kind::DATA).map(|(h, p)| (p.len(), h.flags)).collect();
    assert_eq!(data, [(16_384, 0), (16_384, 0), (16_384, 0), (16_383, 0)], "no END_STREAM: not all was taken");
    assert!(s.can_send(1));
}

#[test]
fn control_frames_are_answered_and_counted() {
    let mut s = open();
    let mut bytes = frame(kind::PING, 0, 0, b"12345678");
    bytes.extend(frame(kind::PING, flag::ACK, 0, b"87654321"));
    bytes.extend(frame(kind::SETTINGS, 0, 0, &[]));
    bytes.extend(frame(kind::SETTINGS, flag::ACK, 0, &[]));
    bytes.extend(frame(kind::DATA, 0, 0x7fff_ffff, &[]).into_iter().take(0));
    push(&mut s, &bytes);
    let out = sent(&mut s);
    assert_eq!(
        out.iter().map(|(h, p)| (h.kind, h.flags, p.clone())).collect::<Vec<_>>(),
        [(kind::PING, flag::ACK, b"12345678".to_vec()), (kind::SETTINGS, flag::ACK, vec![])]
    );
    assert_eq!(s.take_counts(), Counts { control: 2, empty: 0, stream_errors: 0 });
    push(&mut s, &frame(kind::HEADERS, flag::END_HEADERS, 1, &block(POST)));
    for _ in 0..3 {
        push(&mut s, &frame(kind::DATA, 0, 1, &[]));
    }
    assert_eq!(s.take_counts(), Counts { control: 0, empty: 3, stream_errors: 0 });
    assert_eq!(s.take_counts(), Counts::default());
    push(&mut s, &frame(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, 3, &block(&with(GET, &[("X", "y")]))));
    assert_eq!(s.take_counts().stream_errors, 1, "a malformed request counts");
}

#[test]
fn client_resets_and_goaway_are_events() {
    let mut s = open();
    push(&mut s, &frame(kind::HEADERS, flag::END_HEADERS, 1, &block(POST)));
    let (_, ev) = feed(&mut s, &frame(kind::RST_STREAM, 0, 1, &code::CANCEL.to_be_bytes()));
    assert_eq!(ev, [Ev::Reset { stream: 1, code: code::CANCEL, by_peer: true }]);
    assert_eq!(s.open_streams(), 0);
    assert!(!s.send_head(1, 200, [], true));
    let mut goaway = vec![0, 0, 0, 1];
    goaway.extend(code::NO_ERROR.to_be_bytes());
    let (_, ev) = feed(&mut s, &frame(kind::GOAWAY, 0, 0, &goaway));
    assert_eq!(ev, [Ev::GoAway { code: code::NO_ERROR }]);
}

#[test]
fn streams_beyond_the_limit_or_after_goaway_are_refused() {
    let mut s = open();
    for id in [1, 3, 5, 7] {
        push(&mut s, &frame(kind::HEADERS, flag::END_HEADERS, id, &block(POST)));
    }
    let (_, ev) = feed(&mut s, &get(9));
    assert!(ev.is_empty());
    assert_eq!(resets(&sent(&mut s)), [(9, code::REFUSED_STREAM)]);
    s.go_away(code::NO_ERROR);
    assert_eq!(goaway(&sent(&mut s)), Some(code::NO_ERROR));
    s.send_reset(1, code::CANCEL);
    sent(&mut s);
    let (_, ev) = feed(&mut s, &get(11));
    assert!(ev.is_empty());
    assert_eq!(resets(&sent(&mut s)), [(11, code::REFUSED_STREAM)]);
    // Streams open before GOAWAY still finish.
    assert!(s.send_head(3, 204, [], true));
}

#[test]
fn interim_heads_and_trailers_go_out_in_order() {
    let mut s = open();
    push(&mut s, &frame(kind::HEADERS, flag::END_HEADERS, 1, &block(POST)));
    sent(&mut s);
    assert!(s.send_head(1, 100, [], true), "a 1xx never ends the stream");
    assert!(s.send_head(1, 200, [(&b"content-type"[..], &b"application/grpc"[..])], false));
    assert_eq!(s.send_data(1, b"x", false), Some(1));
    assert!(s.send_trailers(1, [(&b"grpc-status"[..], &b"0"[..])]));
    let out = sent(&mut s);
    assert_eq!(
        out.iter().map(|(h, _)| (h.kind, h.flags)).collect::<Vec<_>>(),
        [
            (kind::HEADERS, flag::END_HEADERS),
            (kind::HEADERS, flag::END_HEADERS),
            (kind::DATA, 0),
            (kind::HEADERS, flag::END_HEADERS | flag::END_STREAM)
        ]
    );
    assert_eq!(s.open_streams(), 1, "the request body is still open");
    s.send_reset(1, code::NO_ERROR);
    assert_eq!(s.open_streams(), 0);
}
