//! The client connection driven by server frames written here by hand: the
//! handshake, requests and responses, flow control both ways, resets,
//! GOAWAY, malformed responses and connection errors, and arbitrary input.

use super::client::{Client, Config, ConnError, Event, OpenError, RequestLine};
use super::frame::{code, flag, kind, setting, Head, HEADER_LEN};
use super::hpack::{Decoder, Encoder};
use super::server::PREFACE;

const CFG: Config = Config { max_header_list: 4096, stream_window: 1000, connection_window: 1 << 20 };

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

fn settings(list: &[(u16, u32)]) -> Vec<u8> {
    let mut f = Vec::new();
    super::frame::write_settings(&mut f, list);
    f
}

fn headers(stream: u32, fields: &[(&str, &str)], end: bool) -> Vec<u8> {
    let flags = flag::END_HEADERS | if end { flag::END_STREAM } else { 0 };
    frame(kind::HEADERS, flags, stream, &block(fields))
}

/// An event, owned.
#[derive(Debug, PartialEq)]
enum Ev {
    Interim { stream: u32, status: u16 },
    Response { stream: u32, status: u16, fields: Vec<(String, String)>, end: bool },
    Data { stream: u32, data: Vec<u8>, end: bool },
    Trailers { stream: u32, fields: Vec<(String, String)> },
    Reset { stream: u32, code: u32, by_peer: bool },
    GoAway { last_stream: u32, code: u32 },
    Unprocessed { stream: u32 },
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn own(e: Event<'_>) -> Ev {
    match e {
        Event::Interim { stream, response } => Ev::Interim { stream, status: response.status },
        Event::Response { stream, response, end_stream } => Ev::Response {
            stream,
            status: response.status,
            fields: response.iter().map(|(n, v)| (text(n), text(v))).collect(),
            end: end_stream,
        },
        Event::Data { stream, data, end_stream } => Ev::Data { stream, data: data.to_vec(), end: end_stream },
        Event::Trailers { stream, buf, fields } => Ev::Trailers {
            stream,
            fields: fields.iter().map(|f| (text(&buf[f.name.clone()]), text(&buf[f.value.clone()]))).collect(),
        },
        Event::Reset { stream, code, by_peer } => Ev::Reset { stream, code, by_peer },
        Event::GoAway { last_stream, code } => Ev::GoAway { last_stream, code },
        Event::Unprocessed { stream } => Ev::Unprocessed { stream },
    }
}

/// Feeds `input` whole; the events, or the connection error.
fn feed(c: &mut Client, input: &[u8]) -> Result<Vec<Ev>, ConnError> {
    let mut evs = Vec::new();
    let used = c.recv(input, &mut |e| evs.push(own(e)))?;
    assert_eq!(used, input.len(), "whole frames are taken whole");
    Ok(evs)
}

/// The frames the client queued (and takes them), as (head, payload).
fn sent(c: &mut Client) -> Vec<(Head, Vec<u8>)> {
    let out = c.output().to_vec();
    c.written(out.len());
    let mut at = if out.starts_with(PREFACE) { PREFACE.len() } else { 0 };
    let mut frames = Vec::new();
    while let Some(h) = Head::read(&out[at..]) {
        frames.push((h, out[at + HEADER_LEN..at + HEADER_LEN + h.len].to_vec()));
        at += HEADER_LEN + h.len;
    }
    assert_eq!(at, out.len(), "the output is whole frames");
    frames
}

/// A client past the handshake with a server that sent `list`.
fn ready(list: &[(u16, u32)]) -> Client {
    let mut c = Client::new(CFG);
    sent(&mut c);
    assert_eq!(feed(&mut c, &settings(list)), Ok(vec![]));
    assert!(c.handshaken());
    let acks = sent(&mut c);
    assert_eq!(acks.len(), 1);
    assert_eq!((acks[0].0.kind, acks[0].0.flags), (kind::SETTINGS, flag::ACK));
    c
}

const LINE: RequestLine<'static> =
    RequestLine { method: b"GET", scheme: b"http", authority: b"origin.test", path: b"/a?b=1" };

fn post() -> RequestLine<'static> {
    RequestLine { method: b"POST", ..LINE }
}

fn decode(block: &[u8]) -> Vec<(String, String)> {
    let (mut buf, mut fields) = (Vec::new(), Vec::new());
    Decoder::default().decode(block, 1 << 20, &mut buf, &mut fields).expect("valid HPACK");
    fields.iter().map(|f| (text(&buf[f.name.clone()]), text(&buf[f.value.clone()]))).collect()
}

fn goaway_code(frames: &[(Head, Vec<u8>)]) -> Option<u32> {
    frames.iter().find(|(h, _)| h.kind == kind::GOAWAY).map(|(_, p)| u32::from_be_bytes([p[4], p[5], p[6], p[7]]))
}

fn resets(frames: &[(Head, Vec<u8>)]) -> Vec<(u32, u32)> {
    frames
        .iter()
        .filter(|(h, _)| h.kind == kind::RST_STREAM)
        .map(|(h, p)| (h.stream, u32::from_be_bytes([p[0], p[1], p[2], p[3]])))
        .collect()
}

#[test]
fn the_preface_and_settings_go_first_and_the_server_must_answer_with_settings() {
    let mut c = Client::new(CFG);
    assert!(c.output().starts_with(PREFACE));
    let frames = sent(&mut c);
    assert_eq!(frames[0].0.kind, kind::SETTINGS);
    let ids: Vec<(u16, u32)> = frames[0]
        .1
        .chunks(6)
        .map(|s| (u16::from_be_bytes([s[0], s[1]]), u32::from_be_bytes([s[2], s[3], s[4], s[5]])))
        .collect();
    assert!(ids.contains(&(setting::ENABLE_PUSH, 0)), "{ids:?}");
    assert!(ids.contains(&(setting::INITIAL_WINDOW_SIZE, 1000)), "{ids:?}");
    assert_eq!((frames[1].0.kind, frames[1].0.stream), (kind::WINDOW_UPDATE, 0), "the connection window grows");

    let mut c = Client::new(CFG);
    sent(&mut c);
    let e = feed(&mut c, &frame(kind::PING, 0, 0, &[0; 8])).expect_err("not SETTINGS first");
    assert_eq!(e.code, code::PROTOCOL_ERROR);
    assert_eq!(goaway_code(&sent(&mut c)), Some(code::PROTOCOL_ERROR));
    assert!(c.is_closed());
    assert_eq!(c.open(LINE, [], true), Err(OpenError::Closed));

    // An HTTP/1.1 server answers text: never a frame of ours.
    let mut c = Client::new(CFG);
    assert!(feed(&mut c, b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n").is_err());
}

#[test]
fn a_request_head_is_encoded_and_a_response_decoded() {
    let mut c = ready(&[]);
    let fields: [(&[u8], &[u8]); 5] = [
        (b"Host", b"ignored.test"),
        (b"User-Agent", b"t"),
        (b"connection", b"keep-alive"),
        (b"te", b"gzip"),
        (b"x-b", b"2"),
    ];
    let id = c.open(LINE, fields, true).expect("opens");
    assert_eq!(id, 1);
    let frames = sent(&mut c);
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].0.flags, flag::END_HEADERS | flag::END_STREAM);
    assert_eq!(
        decode(&frames[0].1),
        [
            (":method", "GET"),
            (":scheme", "http"),
            (":authority", "origin.test"),
            (":path", "/a?b=1"),
            ("user-agent", "t"),
            ("x-b", "2"),
            ("te", "trailers")
        ]
        .map(|(n, v)| (n.to_string(), v.to_string()))
    );
    let mut input = headers(1, &[(":status", "200"), ("content-length", "5"), ("x-up", "y")], false);
    input.extend(frame(kind::DATA, flag::END_STREAM, 1, b"hello"));
    assert_eq!(
        feed(&mut c, &input),
        Ok(vec![
            Ev::Response {
                stream: 1,
                status: 200,
                fields: vec![("content-length".into(), "5".into()), ("x-up".into(), "y".into())],
                end: false
            },
            Ev::Data { stream: 1, data: b"hello".to_vec(), end: true },
        ])
    );
    assert_eq!(c.open_streams(), 0, "closed both ways: forgotten");
    assert_eq!(c.open(LINE, [], true), Ok(3), "ids rise by two");
}

#[test]
fn interim_responses_come_before_the_final_one() {
    let mut c = ready(&[]);
    c.open(LINE, [], true).expect("opens");
    let mut input = headers(1, &[(":status", "103"), ("link", "</s.css>; rel=preload")], false);
    input.extend(headers(1, &[(":status", "204")], true));
    assert_eq!(
        feed(&mut c, &input),
        Ok(vec![
            Ev::Interim { stream: 1, status: 103 },
            Ev::Response { stream: 1, status: 204, fields: vec![], end: true }
        ])
    );
}

#[test]
fn trailers_go_both_ways() {
    let mut c = ready(&[]);
    c.open(post(), [], false).expect("opens");
    assert!(c.send_data(1, b"body", false));
    assert!(c.send_trailers(1, [(&b"grpc-status"[..], &b"0"[..])]));
    let frames = sent(&mut c);
    let kinds: Vec<(u8, u8)> = frames.iter().map(|(h, _)| (h.kind, h.flags)).collect();
    assert_eq!(
        kinds,
        [(kind::HEADERS, flag::END_HEADERS), (kind::DATA, 0), (kind::HEADERS, flag::END_HEADERS | flag::END_STREAM)]
    );
    assert_eq!(decode(&frames[2].1), [("grpc-status".to_string(), "0".to_string())]);
    assert!(!c.send_data(1, b"late", false), "the stream is ended");

    let mut input = headers(1, &[(":status", "200"), ("content-type", "application/grpc")], false);
    input.extend(frame(kind::DATA, 0, 1, b"msg"));
    input.extend(headers(1, &[("grpc-status", "5"), ("grpc-message", "nope")], true));
    let evs = feed(&mut c, &input).expect("valid");
    assert_eq!(
        evs[2],
        Ev::Trailers {
            stream: 1,
            fields: vec![("grpc-status".into(), "5".into()), ("grpc-message".into(), "nope".into())]
        }
    );
    assert_eq!(c.open_streams(), 0);
}

#[test]
fn request_bodies_wait_for_the_servers_windows() {
    let mut c = ready(&[(setting::INITIAL_WINDOW_SIZE, 10)]);
    c.open(post(), [], false).expect("opens");
    assert_eq!(c.send_capacity(1), 10);
    assert!(c.send_data(1, &[b'x'; 25], true));
    let frames = sent(&mut c);
    assert_eq!(frames.iter().filter(|(h, _)| h.kind == kind::DATA).map(|(h, _)| h.len).sum::<usize>(), 10);
    assert!(frames.iter().all(|(h, _)| !h.has(flag::END_STREAM)), "the end waits behind the queued bytes");
    assert_eq!(c.send_capacity(1), 0);
    let mut upd = Vec::new();
    super::frame::write_window_update(&mut upd, 1, 5);
    feed(&mut c, &upd).expect("valid");
    assert!(c.take_window_opened());
    let frames = sent(&mut c);
    assert_eq!(frames.iter().map(|(h, _)| (h.kind, h.len, h.flags)).collect::<Vec<_>>(), [(kind::DATA, 5, 0)]);
    // A larger initial window applies to open streams too (6.9.2).
    feed(&mut c, &settings(&[(setting::INITIAL_WINDOW_SIZE, 100)])).expect("valid");
    let frames = sent(&mut c);
    let data: Vec<_> = frames.iter().filter(|(h, _)| h.kind == kind::DATA).map(|(h, _)| (h.len, h.flags)).collect();
    assert_eq!(data, [(10, flag::END_STREAM)]);

    // The connection window binds every stream: 65,535 to start with.
    let mut c = ready(&[(setting::INITIAL_WINDOW_SIZE, 1 << 20)]);
    c.open(post(), [], false).expect("opens");
    assert!(c.send_data(1, &vec![0; 70_000], true));
    let sent_now: usize = sent(&mut c).iter().filter(|(h, _)| h.kind == kind::DATA).map(|(h, _)| h.len).sum();
    assert_eq!(sent_now, 65_535);
    let mut upd = Vec::new();
    super::frame::write_window_update(&mut upd, 0, 10_000);
    feed(&mut c, &upd).expect("valid");
    let rest: usize = sent(&mut c).iter().filter(|(h, _)| h.kind == kind::DATA).map(|(h, _)| h.len).sum();
    assert_eq!(rest, 70_000 - 65_535);
}

#[test]
fn response_bodies_stay_within_our_window_and_room_comes_back_when_released() {
    let mut c = ready(&[]);
    c.open(LINE, [], true).expect("opens");
    sent(&mut c);
    let mut input = headers(1, &[(":status", "200")], false);
    input.extend(frame(kind::DATA, 0, 1, &[1; 600]));
    feed(&mut c, &input).expect("valid");
    c.release(1, 600);
    let frames = sent(&mut c);
    assert_eq!(frames.iter().map(|(h, _)| (h.kind, h.stream)).collect::<Vec<_>>(), [(kind::WINDOW_UPDATE, 1)]);
    // 1000 + 600 given back; 1601 is one too many.
    feed(&mut c, &frame(kind::DATA, 0, 1, &[1; 900])).expect("valid");
    let evs = feed(&mut c, &frame(kind::DATA, 0, 1, &[1; 701])).expect("a stream error only");
    assert_eq!(evs, [Ev::Reset { stream: 1, code: code::FLOW_CONTROL_ERROR, by_peer: false }]);
    assert_eq!(resets(&sent(&mut c)), [(1, code::FLOW_CONTROL_ERROR)]);
}

#[test]
fn the_servers_stream_limit_is_honoured() {
    let mut c = ready(&[(setting::MAX_CONCURRENT_STREAMS, 1)]);
    assert_eq!(c.max_streams(), 1);
    c.open(LINE, [], true).expect("opens");
    assert!(!c.can_open());
    assert_eq!(c.open(LINE, [], true), Err(OpenError::AtLimit));
    feed(&mut c, &headers(1, &[(":status", "204")], true)).expect("valid");
    assert!(c.take_window_opened(), "a stream ended: waiters may open theirs");
    assert_eq!(c.open(LINE, [], true), Ok(3));
}

#[test]
fn resets_go_both_ways_with_their_codes() {
    let mut c = ready(&[]);
    c.open(LINE, [], true).expect("opens");
    c.open(post(), [], false).expect("opens");
    sent(&mut c);
    let mut rst = Vec::new();
    super::frame::write_reset(&mut rst, 1, code::REFUSED_STREAM);
    assert_eq!(feed(&mut c, &rst), Ok(vec![Ev::Reset { stream: 1, code: code::REFUSED_STREAM, by_peer: true }]));
    c.send_reset(3, code::CANCEL);
    assert_eq!(resets(&sent(&mut c)), [(3, code::CANCEL)]);
    // Frames the server sent before it saw our reset are dropped quietly.
    let mut late = headers(3, &[(":status", "200")], false);
    late.extend(frame(kind::DATA, 0, 3, b"late"));
    assert_eq!(feed(&mut c, &late), Ok(vec![]));
    assert!(sent(&mut c).iter().all(|(h, _)| h.kind != kind::RST_STREAM && h.kind != kind::GOAWAY));
}

#[test]
fn a_goaway_fails_the_streams_above_its_last_id_as_unprocessed() {
    let mut c = ready(&[]);
    for _ in 0..3 {
        c.open(LINE, [], true).expect("opens");
    }
    let mut g = Vec::new();
    super::frame::write_goaway(&mut g, 1, code::NO_ERROR, b"bye");
    assert_eq!(
        feed(&mut c, &g),
        Ok(vec![
            Ev::GoAway { last_stream: 1, code: code::NO_ERROR },
            Ev::Unprocessed { stream: 3 },
            Ev::Unprocessed { stream: 5 }
        ])
    );
    assert_eq!(c.open(LINE, [], true), Err(OpenError::GoingAway));
    assert_eq!(c.going_away(), Some(1));
    // Stream 1 may still finish.
    let evs = feed(&mut c, &headers(1, &[(":status", "200")], true)).expect("valid");
    assert_eq!(evs, [Ev::Response { stream: 1, status: 200, fields: vec![], end: true }]);
}

#[test]
fn pings_are_answered_with_their_payload() {
    let mut c = ready(&[]);
    feed(&mut c, &frame(kind::PING, 0, 0, b"12345678")).expect("valid");
    let frames = sent(&mut c);
    assert_eq!(frames.len(), 1);
    assert_eq!(
        (frames[0].0.kind, frames[0].0.flags, frames[0].1.as_slice()),
        (kind::PING, flag::ACK, &b"12345678"[..])
    );
    feed(&mut c, &frame(kind::PING, flag::ACK, 0, b"12345678")).expect("an ack is taken");
    assert!(sent(&mut c).is_empty(), "an ack is not answered");
}

#[test]
fn a_malformed_response_resets_its_stream_only() {
    let bad: &[&[(&str, &str)]] = &[
        &[("content-type", "x")],
        &[(":status", "200"), (":path", "/")],
        &[(":status", "200"), ("Upper", "1")],
        &[(":status", "200"), ("connection", "close")],
        &[(":status", "200"), ("x", "a\nb")],
        &[(":status", "101")],
    ];
    for fields in bad {
        let mut c = ready(&[]);
        c.open(LINE, [], true).expect("opens");
        sent(&mut c);
        let evs = feed(&mut c, &headers(1, fields, false)).expect("a stream error only");
        assert_eq!(evs, [Ev::Reset { stream: 1, code: code::PROTOCOL_ERROR, by_peer: false }], "{fields:?}");
        assert_eq!(resets(&sent(&mut c)), [(1, code::PROTOCOL_ERROR)], "{fields:?}");
        assert_eq!(c.open(LINE, [], true), Ok(3), "the connection goes on");
    }
    // DATA that does not add up to the content-length.
    let mut c = ready(&[]);
    c.open(LINE, [], true).expect("opens");
    let mut input = headers(1, &[(":status", "200"), ("content-length", "3")], false);
    input.extend(frame(kind::DATA, flag::END_STREAM, 1, b"ab"));
    let evs = feed(&mut c, &input).expect("a stream error only");
    assert_eq!(evs.last(), Some(&Ev::Reset { stream: 1, code: code::PROTOCOL_ERROR, by_peer: false }));
    // A HEAD response keeps its length without the bytes.
    let mut c = ready(&[]);
    c.open(RequestLine { method: b"HEAD", ..LINE }, [], true).expect("opens");
    let evs = feed(&mut c, &headers(1, &[(":status", "200"), ("content-length", "3")], true)).expect("valid");
    assert!(matches!(evs[..], [Ev::Response { end: true, .. }]), "{evs:?}");
    // DATA before any head, trailers without END_STREAM.
    let mut c = ready(&[]);
    c.open(LINE, [], true).expect("opens");
    let evs = feed(&mut c, &frame(kind::DATA, 0, 1, b"x")).expect("a stream error only");
    assert_eq!(evs, [Ev::Reset { stream: 1, code: code::PROTOCOL_ERROR, by_peer: false }]);
    let mut c = ready(&[]);
    c.open(LINE, [], true).expect("opens");
    let mut input = headers(1, &[(":status", "200")], false);
    input.extend(headers(1, &[("x", "1")], false));
    let evs = feed(&mut c, &input).expect("a stream error only");
    assert_eq!(evs.last(), Some(&Ev::Reset { stream: 1, code: code::PROTOCOL_ERROR, by_peer: false }));
}

#[test]
fn protocol_errors_fail_the_connection_with_goaway() {
    let cases: Vec<(Vec<u8>, u32)> = vec![
        (frame(kind::DATA, 0, 7, b"x"), code::PROTOCOL_ERROR),
        (frame(kind::DATA, 0, 0, b"x"), code::PROTOCOL_ERROR),
        (frame(kind::PUSH_PROMISE, flag::END_HEADERS, 1, &[0, 0, 0, 2]), code::PROTOCOL_ERROR),
        (frame(kind::HEADERS, flag::END_HEADERS, 2, &block(&[(":status", "200")])), code::PROTOCOL_ERROR),
        (frame(kind::HEADERS, flag::END_HEADERS, 1, &[0xff, 0xff, 0xff, 0xff, 0x0f]), code::COMPRESSION_ERROR),
        (frame(kind::CONTINUATION, flag::END_HEADERS, 1, &[]), code::PROTOCOL_ERROR),
        (settings(&[(setting::ENABLE_PUSH, 1)]), code::PROTOCOL_ERROR),
        (settings(&[(setting::INITIAL_WINDOW_SIZE, 1 << 31)]), code::FLOW_CONTROL_ERROR),
        (settings(&[(setting::MAX_FRAME_SIZE, 100)]), code::PROTOCOL_ERROR),
        (frame(kind::SETTINGS, 0, 0, &[0; 5]), code::FRAME_SIZE_ERROR),
        (frame(kind::PING, 0, 0, &[0; 7]), code::FRAME_SIZE_ERROR),
        (frame(kind::WINDOW_UPDATE, 0, 0, &[0, 0, 0, 0]), code::PROTOCOL_ERROR),
        (frame(kind::WINDOW_UPDATE, 0, 0, &[0x7f, 0xff, 0xff, 0xff]), code::FLOW_CONTROL_ERROR),
        (frame(kind::RST_STREAM, 0, 9, &[0, 0, 0, 8]), code::PROTOCOL_ERROR),
        (frame(kind::DATA, 0, 1, &vec![0; 16_385]), code::FRAME_SIZE_ERROR),
    ];
    for (input, want) in cases {
        let mut c = ready(&[]);
        c.open(LINE, [], true).expect("opens");
        sent(&mut c);
        let mut evs = Vec::new();
        let e = c.recv(&input, &mut |e| evs.push(own(e))).expect_err("a connection error");
        assert_eq!(e.code, want, "{}: {input:?}", e.reason);
        assert_eq!(goaway_code(&sent(&mut c)), Some(want));
        assert!(c.is_closed());
    }
    // A header block interrupted by another frame.
    let mut c = ready(&[]);
    c.open(LINE, [], true).expect("opens");
    let mut input = frame(kind::HEADERS, 0, 1, &block(&[(":status", "200")]));
    input.extend(frame(kind::PING, 0, 0, &[0; 8]));
    assert_eq!(feed(&mut c, &input).map_err(|e| e.code), Err(code::PROTOCOL_ERROR));
}

#[test]
fn a_head_split_over_continuations_and_partial_input_are_taken() {
    let mut c = ready(&[]);
    c.open(LINE, [], true).expect("opens");
    let b = block(&[(":status", "200"), ("x-long", &"v".repeat(100))]);
    let mut input = frame(kind::HEADERS, 0, 1, &b[..10]);
    input.extend(frame(kind::CONTINUATION, flag::END_HEADERS, 1, &b[10..]));
    input.extend(frame(kind::DATA, flag::END_STREAM, 1, b"ok"));
    // Byte by byte: each call takes only whole frames.
    let mut evs = Vec::new();
    let mut at = 0;
    for end in 1..=input.len() {
        at += c.recv(&input[at..end], &mut |e| evs.push(own(e))).expect("valid");
    }
    assert_eq!(at, input.len());
    assert_eq!(evs.len(), 2);
    assert!(matches!(&evs[0], Ev::Response { status: 200, fields, .. } if fields[0].1.len() == 100));
}

#[test]
fn arbitrary_server_bytes_never_panic() {
    // A fixed pseudo-random sequence (xorshift): frames of every type with
    // random flags, ids and payloads, after a valid handshake.
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..2000 {
        let mut c = ready(&[]);
        let _ = c.open(LINE, [], false);
        let _ = c.open(post(), [], false);
        let mut input = Vec::new();
        for _ in 0..(next() % 6 + 1) {
            let len = (next() % 40) as usize;
            let payload: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let kind = (next() % 11) as u8;
            let stream = (next() % 6) as u32;
            input.extend(frame(kind, next() as u8, stream, &payload));
        }
        let _ = c.recv(&input, &mut |_| {});
        let _ = c.send_data(1, b"x", true);
        let _ = c.send_trailers(3, [(&b"a"[..], &b"b"[..])]);
        let _ = c.recv(&input, &mut |_| {});
        let _ = c.output();
    }
}
