//! The HTTP/2 entry points of [`super`]: the server codec (the bytes a
//! client sends), the client codec (the bytes a server sends) and the HPACK
//! decoder.
//!
//! A codec is fed the input twice: in one piece, and cut into pieces where
//! the input says (a driver's reads). Both feedings must give the same
//! events, the same end (or connection error) and the same bytes written
//! back, and what the codec writes must be whole frames.

use switchyard_http::http2::server::ConnError;
use switchyard_http::http2::{client, hpack, server};
use switchyard_http::parse::Field;

/// The client's connection preface.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// An empty SETTINGS frame: the first frame each side sends.
const SETTINGS: &[u8] = &[0, 0, 0, 4, 0, 0, 0, 0, 0];
/// Header list limit of the codecs fed here (a service's default).
const MAX_HEADER_LIST: usize = 64 * 1024;

/// What one feeding of a codec gave.
#[derive(Debug, PartialEq)]
struct Run {
    /// Each event, as its `Debug` text.
    events: Vec<String>,
    /// The connection error that ended it, if one did.
    error: Option<String>,
    /// Everything the codec queued for writing, in order.
    output: Vec<u8>,
}

/// The places to cut `input` at for the second feeding: the input's own
/// bytes, read from its end, give the pieces' lengths (1 to 64).
fn cuts(input: &[u8]) -> Vec<usize> {
    let mut at = 0;
    let mut cuts = Vec::new();
    for b in input.iter().rev() {
        at += usize::from(b & 63) + 1;
        if at >= input.len() {
            break;
        }
        cuts.push(at);
    }
    cuts
}

/// The pieces of `input` cut at `cuts` (ascending), or the whole of it.
fn pieces<'a>(input: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut from = 0;
    for &c in cuts {
        out.push(&input[from..c]);
        from = c;
    }
    out.push(&input[from..]);
    out
}

/// What [`feed`] needs of a codec: the server's and the client's alike.
trait Codec: 'static {
    /// The codec's events.
    type Event<'a>: std::fmt::Debug;
    /// Takes bytes; returns how many it used.
    fn recv(&mut self, input: &[u8], on: &mut dyn FnMut(Self::Event<'_>)) -> Result<usize, ConnError>;
    /// The next run of queued bytes.
    fn output(&self) -> &[u8];
    /// The next `n` bytes were written.
    fn written(&mut self, n: usize);
}

impl Codec for server::Server {
    type Event<'a> = server::Event<'a>;
    fn recv(&mut self, input: &[u8], on: &mut dyn FnMut(server::Event<'_>)) -> Result<usize, ConnError> {
        server::Server::recv(self, input, on)
    }
    fn output(&self) -> &[u8] {
        server::Server::output(self)
    }
    fn written(&mut self, n: usize) {
        server::Server::written(self, n);
    }
}

impl Codec for client::Client {
    type Event<'a> = client::Event<'a>;
    fn recv(&mut self, input: &[u8], on: &mut dyn FnMut(client::Event<'_>)) -> Result<usize, ConnError> {
        client::Client::recv(self, input, on)
    }
    fn output(&self) -> &[u8] {
        client::Client::output(self)
    }
    fn written(&mut self, n: usize) {
        client::Client::written(self, n);
    }
}

/// Appends everything `codec` queued to `out`.
fn drain(codec: &mut impl Codec, out: &mut Vec<u8>) {
    loop {
        let run = codec.output();
        if run.is_empty() {
            break;
        }
        let n = run.len();
        out.extend_from_slice(run);
        codec.written(n);
    }
}

/// Feeds `pieces` to `codec` as a driver does (bytes a call left unused
/// come again with the next piece), taking what it writes after each call;
/// `seen` sees every event.
fn feed<C: Codec>(codec: &mut C, pieces: &[&[u8]], mut seen: impl FnMut(&C::Event<'_>)) -> Run {
    let mut run = Run { events: Vec::new(), error: None, output: Vec::new() };
    let mut pending = Vec::new();
    drain(codec, &mut run.output);
    for piece in pieces {
        pending.extend_from_slice(piece);
        let events = &mut run.events;
        let result = codec.recv(&pending, &mut |event| {
            seen(&event);
            events.push(format!("{event:?}"));
        });
        drain(codec, &mut run.output);
        match result {
            Ok(used) => {
                assert!(used <= pending.len(), "used {used} of {} bytes", pending.len());
                pending.drain(..used);
            }
            Err(e) => {
                run.error = Some(format!("{e:?}"));
                break;
            }
        }
    }
    run
}

/// `bytes` is a run of whole frames (a 9-byte header, then its length).
fn check_frames(mut bytes: &[u8]) {
    while !bytes.is_empty() {
        assert!(bytes.len() >= 9, "a frame header cut short: {bytes:?}");
        let len = usize::from(bytes[0]) << 16 | usize::from(bytes[1]) << 8 | usize::from(bytes[2]);
        assert!(bytes.len() >= 9 + len, "a frame of {len} bytes with {} left", bytes.len() - 9);
        bytes = &bytes[9 + len..];
    }
}

/// The server codec ([`server::Server`]) on a client's bytes.
///
/// The first byte's low bit puts the connection preface before the rest.
/// Fed whole or in pieces: the same events, end and output; the output is
/// whole frames. Once all is fed, each request gets an answer and each
/// body its room back (the send side), identically for both feedings.
pub fn http2_server(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else { return };
    let input = if first & 1 == 1 { [PREFACE, rest].concat() } else { rest.to_vec() };
    let cut = cuts(&input);
    let whole = serve(&[&input]);
    let split = serve(&pieces(&input, &cut));
    assert_eq!(whole, split, "the server codec's result depends on how its input was read");
    check_frames(&whole.output);
}

/// One feeding of [`http2_server`].
fn serve(pieces: &[&[u8]]) -> Run {
    let mut codec = server::Server::new(server::Config {
        max_streams: 100,
        max_header_list: MAX_HEADER_LIST,
        stream_window: 65_535,
        connection_window: 1024 * 1024,
    });
    let mut requests = Vec::new();
    let mut bodies = Vec::new();
    let mut run = feed(&mut codec, pieces, |event| match event {
        server::Event::Request { stream, .. } => requests.push(*stream),
        server::Event::Data { stream, data, .. } => bodies.push((*stream, data.len())),
        _ => {}
    });
    if run.error.is_none() {
        for (stream, n) in bodies {
            codec.release(stream, n);
        }
        for stream in requests {
            if codec.send_head(stream, 200, [(&b"content-type"[..], &b"text/plain"[..])], false) {
                let _ = codec.send_data(stream, b"ok", true);
            }
        }
        drain(&mut codec, &mut run.output);
    }
    run
}

/// The client codec ([`client::Client`]) on a server's bytes.
///
/// One to four requests are opened first (the first byte says how many, and
/// whether they carry a body); its next bit puts an empty SETTINGS before
/// the rest. Fed whole or in pieces: the same events, end and output; the
/// output after the preface is whole frames.
pub fn http2_client(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else { return };
    let input = if first & 8 != 0 { [SETTINGS, rest].concat() } else { rest.to_vec() };
    let cut = cuts(&input);
    let whole = ask(first, &[&input]);
    let split = ask(first, &pieces(&input, &cut));
    assert_eq!(whole, split, "the client codec's result depends on how its input was read");
    let output = whole.output.strip_prefix(PREFACE).expect("the client's output starts with the preface");
    check_frames(output);
}

/// One feeding of [`http2_client`], its requests chosen by `first`.
fn ask(first: u8, pieces: &[&[u8]]) -> Run {
    let mut codec = client::Client::new(client::Config {
        max_header_list: MAX_HEADER_LIST,
        stream_window: 65_535,
        connection_window: 1024 * 1024,
    });
    let with_body = first & 4 != 0;
    for i in 0..=(first & 3) {
        let path = format!("/{i}");
        let line = client::RequestLine {
            method: if with_body { b"POST" } else { b"GET" },
            scheme: b"http",
            authority: b"example.com",
            path: path.as_bytes(),
        };
        if let Ok(stream) = codec.open(line, [(&b"accept"[..], &b"*/*"[..])], !with_body) {
            if with_body {
                codec.send_data(stream, b"body", true);
            }
        }
    }
    let mut bodies = Vec::new();
    let mut run = feed(&mut codec, pieces, |event| {
        if let client::Event::Data { stream, data, .. } = event {
            bodies.push((*stream, data.len()));
        }
    });
    if run.error.is_none() {
        for (stream, n) in bodies {
            codec.release(stream, n);
        }
        drain(&mut codec, &mut run.output);
    }
    run
}

/// The HPACK decoder ([`hpack::Decoder`]) on header blocks.
///
/// The input is a run of blocks, each after a length byte, through one
/// decoder (its dynamic table carries over). A block's fields lie within
/// the decoded bytes and stay within the list limit; re-encoded by our
/// encoder (Huffman or not, as the length byte's top bit says), they decode
/// to the same names and values.
pub fn hpack(data: &[u8]) {
    let mut decoder = hpack::Decoder::new(4096);
    let mut rest = data;
    while let Some((&len, tail)) = rest.split_first() {
        let n = usize::from(len & 0x7f).min(tail.len());
        let (block, next) = tail.split_at(n);
        rest = next;
        let (mut out, mut fields) = (Vec::new(), Vec::new());
        let Ok(decoded) = decoder.decode(block, 1024, &mut out, &mut fields) else { return };
        let mut kept = 0;
        for f in &fields {
            assert!(f.name.start <= f.name.end && f.name.end == f.value.start && f.value.end <= out.len());
            kept += f.name.len() + f.value.len() + 32;
        }
        assert!(kept <= 1024 && kept <= decoded.list_size, "kept {kept} bytes of a {decoded:?} list");
        let mut encoder = hpack::Encoder::default();
        encoder.huffman = len & 0x80 != 0;
        let mut again = Vec::new();
        encoder.begin(&mut again);
        for f in &fields {
            encoder.field(&out[f.name.clone()], &out[f.value.clone()], &mut again);
        }
        let (mut out2, mut fields2) = (Vec::new(), Vec::new());
        let redecoded = hpack::Decoder::new(4096).decode(&again, usize::MAX / 4, &mut out2, &mut fields2);
        assert!(redecoded.is_ok(), "our encoding of {fields:?} does not decode: {redecoded:?}");
        assert_eq!(pairs(&out, &fields), pairs(&out2, &fields2), "re-encoded fields decode differently");
    }
}

/// The fields as (name, value) pairs.
fn pairs<'a>(buf: &'a [u8], fields: &[Field]) -> Vec<(&'a [u8], &'a [u8])> {
    fields.iter().map(|f| (&buf[f.name.clone()], &buf[f.value.clone()])).collect()
}
