//! The server side of one HTTP/2 connection, sans-io ([`Server`]): bytes
//! from the client go in ([`Server::recv`]) and come out as [`Event`]s;
//! what the driver sends (response heads, DATA, trailers, resets) is framed
//! into one output buffer ([`Server::output`]) that it writes out as it can.
//!
//! The state kept: the HPACK tables, each stream's state and windows (in a
//! map keyed by stream id), the connection's windows, the header block being
//! continued, the peer's settings. Stream states follow RFC 9113 5.1 for a
//! server that never pushes: a stream opens with the client's HEADERS,
//! half-closes either way with END_STREAM, and is forgotten once closed both
//! ways or reset. Errors follow RFC 9113 5.4: a connection error queues
//! GOAWAY and ends [`Server::recv`] with [`ConnError`]; a stream error
//! queues RST_STREAM and, for a stream the driver was told about, an
//! [`Event::Reset`].
//!
//! Bounds, whatever the client sends: a header block (HEADERS and its
//! CONTINUATION frames) of at most [`Config::max_header_list`] + 16 KiB and
//! 64 frames, a decoded header list over the limit answered with 431 on its
//! stream and over four times the limit (an HPACK bomb) with GOAWAY
//! ENHANCE_YOUR_CALM, at most [`Config::max_streams`] open streams
//! (REFUSED_STREAM beyond), windows that never exceed 2^31 − 1. Floods of
//! control frames and of empty frames are counted ([`Server::take_counts`])
//! for the driver, which owns the clock, to judge.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::io::IoSlice;

use bytes::Bytes;

use super::frame::{self, code, flag, kind, setting, Head, HEADER_LEN, MAX_WINDOW, MIN_MAX_FRAME_SIZE};
use super::head::{self, Request};
use super::hpack::{self, Decoder};
pub use super::link::ConnError;
use super::link::{err, remember, shift_windows, unpad, Link, MAX_CONTINUATIONS};
use crate::parse::Field;

/// The client connection preface (RFC 9113 3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Streams reset by us remembered, so frames the client sent before it saw
/// the reset are dropped quietly (and as many closed streams).
const RESET_MEMORY: usize = 64;

/// Hashes a stream id with one multiplication: ids are few (at most
/// `max_streams` live) and the client cannot make many collide.
#[derive(Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, id: u32) {
        self.0 = u64::from(id).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A map keyed by stream id.
pub type StreamMap<V> = HashMap<u32, V, BuildHasherDefault<IdHasher>>;

/// What the server advertises and enforces.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// `SETTINGS_MAX_CONCURRENT_STREAMS`.
    pub max_streams: u32,
    /// `SETTINGS_MAX_HEADER_LIST_SIZE`, in RFC 9113's accounting.
    pub max_header_list: usize,
    /// `SETTINGS_INITIAL_WINDOW_SIZE`: what a client may send on a stream
    /// before the driver has released any of it.
    pub stream_window: u32,
    /// The connection's receive window.
    pub connection_window: u32,
}

/// What the client did, as the driver needs it. `stream` is the stream id;
/// `end_stream`: the client sends nothing more on it.
#[derive(Debug)]
#[allow(missing_docs)]
pub enum Event<'a> {
    /// A new request. Its body (unless `end_stream`) follows as `Data`.
    Request { stream: u32, request: &'a Request, end_stream: bool },
    /// Request body bytes; the driver gives their room back with
    /// [`Server::release`] once taken (or dropped).
    Data { stream: u32, data: &'a [u8], end_stream: bool },
    /// The request's trailers (the stream's end).
    Trailers { stream: u32, buf: &'a [u8], fields: &'a [Field] },
    /// The stream was reset: by the client (`by_peer`), or by the codec for
    /// a stream error. Either way it is gone.
    Reset { stream: u32, code: u32, by_peer: bool },
    /// The client sent GOAWAY: it opens no more streams.
    GoAway { code: u32 },
}

/// Frames counted for the flood defences since the last [`Server::take_counts`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// SETTINGS and PING frames (not acknowledgements): each obliges an answer.
    pub control: u32,
    /// Frames that carry nothing: DATA without payload or END_STREAM,
    /// CONTINUATION without payload.
    pub empty: u32,
    /// Streams reset for the client's errors (malformed requests, window
    /// overruns...): like its own resets, they cost work for nothing.
    pub stream_errors: u32,
}

#[derive(Debug)]
struct Stream {
    /// The client may still send (no END_STREAM yet).
    recv_open: bool,
    /// We may still send: `false` once END_STREAM (or a reset) went out.
    send_open: bool,
    /// A final (non-1xx) response head was sent.
    responded: bool,
    /// The driver was told about this stream (an `Event::Request`).
    announced: bool,
    recv_window: i64,
    send_window: i64,
    /// Bytes the driver released not yet given back with WINDOW_UPDATE.
    released: u32,
    content_length: Option<u64>,
    received: u64,
}

/// A header block waiting for CONTINUATION frames.
struct Pending {
    stream: u32,
    end_stream: bool,
    /// A stream error to apply once the block is decoded (HPACK must see it).
    error: Option<u32>,
    block: Vec<u8>,
    frames: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for the client's preface.
    Preface,
    /// Waiting for the client's first SETTINGS.
    Settings,
    Open,
    Closed,
}

/// The server side of one HTTP/2 connection.
pub struct Server {
    cfg: Config,
    phase: Phase,
    decoder: Decoder,
    /// The output, the connection's windows, the client's settings.
    link: Link,
    streams: StreamMap<Stream>,
    /// The highest stream the client opened.
    last_stream: u32,
    pending: Option<Pending>,
    request: Request,
    /// A header block's fragments, joined (kept for its allocation).
    block_buf: Vec<u8>,
    trailers: (Vec<u8>, Vec<Field>),
    /// GOAWAY sent: streams above this id are refused.
    going_away: Option<u32>,
    reset_by_us: VecDeque<u32>,
    /// Streams that ended (both sides, or reset by the client), remembered
    /// so a HEADERS frame on one is told from one below the last id.
    closed: VecDeque<u32>,
    counts: Counts,
    handshaken: bool,
}

impl Server {
    /// A connection whose first bytes from the client are still to come
    /// (the preface included); our SETTINGS are queued at once.
    pub fn new(cfg: Config) -> Server {
        let mut server = Server {
            cfg,
            phase: Phase::Preface,
            decoder: Decoder::default(),
            link: Link::new(cfg.stream_window, cfg.connection_window),
            streams: StreamMap::default(),
            last_stream: 0,
            pending: None,
            request: Request::default(),
            block_buf: Vec::new(),
            trailers: (Vec::new(), Vec::new()),
            going_away: None,
            reset_by_us: VecDeque::new(),
            closed: VecDeque::new(),
            counts: Counts::default(),
            handshaken: false,
        };
        let list = u32::try_from(cfg.max_header_list).unwrap_or(u32::MAX);
        server.link.greet(&[
            (setting::MAX_CONCURRENT_STREAMS, cfg.max_streams),
            (setting::INITIAL_WINDOW_SIZE, cfg.stream_window.min(MAX_WINDOW as u32)),
            (setting::MAX_HEADER_LIST_SIZE, list),
        ]);
        server
    }

    // ---- output -------------------------------------------------------

    /// The next run of queued frame bytes not yet written out; empty only
    /// when nothing is queued (large payloads are runs of their own).
    pub fn output(&self) -> &[u8] {
        self.link.output()
    }

    /// The queued runs in order, as many as fit in `dst` (for a vectored
    /// write); how many slices were filled.
    pub fn output_vectored<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        self.link.output_vectored(dst)
    }

    /// Bytes queued and not yet written out.
    pub fn output_len(&self) -> usize {
        self.link.output_len()
    }

    /// The driver wrote the next `n` bytes of the output.
    pub fn written(&mut self, n: usize) {
        self.link.written(n);
    }

    // ---- state --------------------------------------------------------

    /// Streams open (or half-closed) now.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// The client's preface and first SETTINGS arrived.
    pub fn handshaken(&self) -> bool {
        self.handshaken
    }

    /// The connection failed or was shut: no more input is taken.
    pub fn is_closed(&self) -> bool {
        self.phase == Phase::Closed
    }

    /// Frames counted for the flood defences since the last call.
    pub fn take_counts(&mut self) -> Counts {
        std::mem::take(&mut self.counts)
    }

    /// Whether a send window grew since the last call (streams waiting for
    /// room may write again).
    pub fn take_window_opened(&mut self) -> bool {
        std::mem::take(&mut self.link.window_opened)
    }

    /// How many body bytes `stream` may send now.
    pub fn send_capacity(&self, stream: u32) -> usize {
        match self.streams.get(&stream) {
            Some(s) if s.send_open => usize::try_from(s.send_window.min(self.link.send_window).max(0)).unwrap_or(0),
            _ => 0,
        }
    }

    /// Whether `stream` is still open towards the client.
    pub fn can_send(&self, stream: u32) -> bool {
        self.streams.get(&stream).is_some_and(|s| s.send_open)
    }

    // ---- input --------------------------------------------------------

    /// Takes the client's bytes: every complete frame at the start of
    /// `input` is handled, events passed to `on`. Returns how many bytes were
    /// used (the rest is an incomplete frame, to come again with more).
    pub fn recv(&mut self, input: &[u8], on: &mut dyn FnMut(Event<'_>)) -> Result<usize, ConnError> {
        let mut at = 0;
        if self.phase == Phase::Closed {
            return Err(ConnError { code: code::PROTOCOL_ERROR, reason: "connection closed" });
        }
        if self.phase == Phase::Preface {
            let n = input.len().min(PREFACE.len());
            if input[..n] != PREFACE[..n] {
                return Err(self.fail(code::PROTOCOL_ERROR, "invalid connection preface"));
            }
            if n < PREFACE.len() {
                return Ok(0);
            }
            at = n;
            self.phase = Phase::Settings;
        }
        while let Some(head) = Head::read(&input[at..]) {
            if head.len > MIN_MAX_FRAME_SIZE as usize {
                return Err(self.fail(code::FRAME_SIZE_ERROR, "frame larger than SETTINGS_MAX_FRAME_SIZE"));
            }
            let end = at + HEADER_LEN + head.len;
            if end > input.len() {
                break;
            }
            let payload = &input[at + HEADER_LEN..end];
            at = end;
            if let Err(e) = self.frame(head, payload, on) {
                return Err(self.fail(e.code, e.reason));
            }
        }
        Ok(at)
    }

    /// Queues GOAWAY for a connection error and closes.
    fn fail(&mut self, code: u32, reason: &'static str) -> ConnError {
        if self.phase != Phase::Closed {
            frame::write_goaway(&mut self.link.out, self.last_stream, code, reason.as_bytes());
            self.phase = Phase::Closed;
        }
        ConnError { code, reason }
    }

    fn frame(&mut self, head: Head, payload: &[u8], on: &mut dyn FnMut(Event<'_>)) -> Result<(), ConnError> {
        if self.phase == Phase::Settings {
            if head.kind != kind::SETTINGS || head.has(flag::ACK) {
                return Err(err(code::PROTOCOL_ERROR, "the first frame is not SETTINGS"));
            }
            self.phase = Phase::Open;
            self.handshaken = true;
        }
        if let Some(p) = &self.pending {
            if head.kind != kind::CONTINUATION || head.stream != p.stream {
                return Err(err(code::PROTOCOL_ERROR, "header block interrupted"));
            }
        }
        match head.kind {
            kind::DATA => self.data(head, payload, on),
            kind::HEADERS => self.headers(head, payload, on),
            kind::PRIORITY => self.priority(head, payload),
            kind::RST_STREAM => self.rst_stream(head, payload, on),
            kind::SETTINGS => self.settings(head, payload),
            kind::PUSH_PROMISE => Err(err(code::PROTOCOL_ERROR, "PUSH_PROMISE from a client")),
            kind::PING => self.ping(head, payload),
            kind::GOAWAY => self.goaway(head, payload, on),
            kind::WINDOW_UPDATE => self.window_update(head, payload),
            kind::CONTINUATION => self.continuation(head, payload, on),
            // Unknown frame types are ignored (RFC 9113 5.5).
            _ => Ok(()),
        }
    }

    /// Whether a stream id the map lacks was used before (closed) rather
    /// than never (idle).
    fn was_used(&self, stream: u32) -> bool {
        stream <= self.last_stream
    }

    fn data(&mut self, head: Head, payload: &[u8], on: &mut dyn FnMut(Event<'_>)) -> Result<(), ConnError> {
        let data = self.link.data(head, payload)?;
        let len = payload.len() as i64;
        let end_stream = head.has(flag::END_STREAM);
        let stream = head.stream;
        let (used, reset_by_us) = (self.was_used(stream), self.reset_by_us.contains(&stream));
        let refused = match self.streams.get_mut(&stream) {
            None if !used => return Err(err(code::PROTOCOL_ERROR, "DATA on an idle stream")),
            None if reset_by_us => None,
            None => Some(code::STREAM_CLOSED),
            Some(s) if !s.recv_open => Some(code::STREAM_CLOSED),
            Some(s) if len > s.recv_window => Some(code::FLOW_CONTROL_ERROR),
            Some(s) => {
                s.recv_window -= len;
                s.received += data.len() as u64;
                let wrong = s.content_length.is_some_and(|n| s.received > n || (end_stream && s.received != n));
                if wrong {
                    Some(code::PROTOCOL_ERROR)
                } else {
                    s.recv_open &= !end_stream;
                    if data.is_empty() && !end_stream {
                        self.counts.empty += 1;
                    }
                    on(Event::Data { stream, data, end_stream });
                    // Padding is not the driver's: its room comes back at once.
                    let padding = payload.len() - data.len();
                    if padding > 0 {
                        self.release(stream, padding);
                    }
                    if end_stream {
                        self.forget_if_closed(stream);
                    }
                    return Ok(());
                }
            }
        };
        self.link.give_back(payload.len());
        if let Some(code) = refused {
            self.reset(stream, code, on);
        }
        Ok(())
    }

    fn headers(&mut self, head: Head, payload: &[u8], on: &mut dyn FnMut(Event<'_>)) -> Result<(), ConnError> {
        if head.stream == 0 {
            return Err(err(code::PROTOCOL_ERROR, "HEADERS on stream 0"));
        }
        let mut fragment = unpad(head, payload)?;
        let mut error = None;
        if head.has(flag::PRIORITY) {
            let Some((dep, rest)) = fragment.split_first_chunk::<5>() else {
                return Err(err(code::FRAME_SIZE_ERROR, "HEADERS too short for its priority"));
            };
            if u32::from_be_bytes([dep[0], dep[1], dep[2], dep[3]]) & 0x7fff_ffff == head.stream {
                error = Some(code::PROTOCOL_ERROR);
            }
            fragment = rest;
        }
        let end_stream = head.has(flag::END_STREAM);
        if head.has(flag::END_HEADERS) {
            return self.block(head.stream, end_stream, error, fragment, on);
        }
        let mut block = std::mem::take(&mut self.block_buf);
        block.clear();
        block.extend_from_slice(fragment);
        self.pending = Some(Pending { stream: head.stream, end_stream, error, block, frames: 0 });
        Ok(())
    }

    fn continuation(&mut self, head: Head, payload: &[u8], on: &mut dyn FnMut(Event<'_>)) -> Result<(), ConnError> {
        let Some(p) = self.pending.as_mut() else {
            return Err(err(code::PROTOCOL_ERROR, "CONTINUATION without HEADERS"));
        };
        p.frames += 1;
        if payload.is_empty() {
            self.counts.empty += 1;
        }
        if p.frames > MAX_CONTINUATIONS || p.block.len() + payload.len() > self.cfg.max_header_list + 16 * 1024 {
            return Err(err(code::ENHANCE_YOUR_CALM, "header block too large"));
        }
        p.block.extend_from_slice(payload);
        if !head.has(flag::END_HEADERS) {
            return Ok(());
        }
        let Some(p) = self.pending.take() else { return Ok(()) };
        let result = self.block(p.stream, p.end_stream, p.error, &p.block, on);
        self.block_buf = p.block;
        result
    }

    /// A complete header block for `stream`.
    fn block(
        &mut self,
        stream: u32,
        end_stream: bool,
        error: Option<u32>,
        block: &[u8],
        on: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), ConnError> {
        if self.streams.contains_key(&stream) {
            return self.trailers(stream, end_stream, error, block, on);
        }
        if self.was_used(stream) {
            if self.closed.contains(&stream) {
                // A stream that ended (RFC 9113 5.1, "closed").
                return Err(err(code::STREAM_CLOSED, "HEADERS on a closed stream"));
            }
            if !self.reset_by_us.contains(&stream) {
                // Never opened, and below the last: 5.1.1.
                return Err(err(code::PROTOCOL_ERROR, "stream id lower than the last"));
            }
            // A stream we reset: the client may not know yet. Decoded for
            // HPACK's sake, then ignored.
            let mut request = std::mem::take(&mut self.request);
            let decoded = self.decode(block, &mut request.buf, &mut request.fields);
            self.request = request;
            decoded?;
            return Ok(());
        }
        if stream.is_multiple_of(2) {
            return Err(err(code::PROTOCOL_ERROR, "even stream id from a client"));
        }
        self.last_stream = stream;
        let mut request = std::mem::take(&mut self.request);
        request.clear();
        let decoded = self.decode(block, &mut request.buf, &mut request.fields);
        let result = self.open(stream, end_stream, error, decoded, &mut request, on);
        self.request = request;
        result
    }

    fn decode(
        &mut self,
        block: &[u8],
        buf: &mut Vec<u8>,
        fields: &mut Vec<Field>,
    ) -> Result<hpack::Decoded, ConnError> {
        buf.clear();
        fields.clear();
        let max = self.cfg.max_header_list;
        match self.decoder.decode(block, max, buf, fields) {
            Ok(d) => Ok(d),
            Err(hpack::Error::ListTooLarge) => Err(err(code::ENHANCE_YOUR_CALM, "header list far too large")),
            Err(_) => Err(err(code::COMPRESSION_ERROR, "invalid header block")),
        }
    }

    /// A new stream's request, decoded.
    fn open(
        &mut self,
        stream: u32,
        end_stream: bool,
        error: Option<u32>,
        decoded: Result<hpack::Decoded, ConnError>,
        request: &mut Request,
        on: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), ConnError> {
        let decoded = decoded?;
        if let Some(code) = error {
            self.refuse(stream, code);
            return Ok(());
        }
        if self.going_away.is_some_and(|last| stream > last) {
            self.refuse(stream, code::REFUSED_STREAM);
            return Ok(());
        }
        if self.streams.len() >= self.cfg.max_streams as usize {
            self.refuse(stream, code::REFUSED_STREAM);
            return Ok(());
        }
        if decoded.oversized {
            self.too_large(stream, end_stream);
            return Ok(());
        }
        if head::request(request, end_stream).is_err() {
            self.refuse(stream, code::PROTOCOL_ERROR);
            return Ok(());
        }
        self.streams.insert(
            stream,
            Stream {
                recv_open: !end_stream,
                send_open: true,
                responded: false,
                announced: true,
                recv_window: i64::from(self.cfg.stream_window),
                send_window: self.link.peer_window,
                released: 0,
                content_length: request.content_length,
                received: 0,
            },
        );
        on(Event::Request { stream, request, end_stream });
        Ok(())
    }

    /// Trailers (or a second head) on an open stream.
    fn trailers(
        &mut self,
        stream: u32,
        end_stream: bool,
        error: Option<u32>,
        block: &[u8],
        on: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), ConnError> {
        let (mut buf, mut fields) = std::mem::take(&mut self.trailers);
        let decoded = self.decode(block, &mut buf, &mut fields);
        let result = self.trailers_decoded(stream, end_stream, error, decoded, &buf, &fields, on);
        self.trailers = (buf, fields);
        result
    }

    #[allow(clippy::too_many_arguments)]
    fn trailers_decoded(
        &mut self,
        stream: u32,
        end_stream: bool,
        error: Option<u32>,
        decoded: Result<hpack::Decoded, ConnError>,
        buf: &[u8],
        fields: &[Field],
        on: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), ConnError> {
        let decoded = decoded?;
        let Some(s) = self.streams.get_mut(&stream) else { return Ok(()) };
        if !s.recv_open {
            self.reset(stream, code::STREAM_CLOSED, on);
            return Ok(());
        }
        let short = s.content_length.is_some_and(|n| n != s.received);
        if error.is_some() || !end_stream || decoded.oversized || short || head::trailers(buf, fields).is_err() {
            self.reset(stream, error.unwrap_or(code::PROTOCOL_ERROR), on);
            return Ok(());
        }
        s.recv_open = false;
        on(Event::Trailers { stream, buf, fields });
        self.forget_if_closed(stream);
        Ok(())
    }

    fn priority(&mut self, head: Head, payload: &[u8]) -> Result<(), ConnError> {
        if head.stream == 0 {
            return Err(err(code::PROTOCOL_ERROR, "PRIORITY on stream 0"));
        }
        let Ok(dep) = <[u8; 5]>::try_from(payload) else {
            self.refuse(head.stream, code::FRAME_SIZE_ERROR);
            return Ok(());
        };
        if u32::from_be_bytes([dep[0], dep[1], dep[2], dep[3]]) & 0x7fff_ffff == head.stream {
            self.refuse(head.stream, code::PROTOCOL_ERROR);
        }
        // Otherwise ignored: RFC 9113 deprecates the priority scheme.
        Ok(())
    }

    fn rst_stream(&mut self, head: Head, payload: &[u8], on: &mut dyn FnMut(Event<'_>)) -> Result<(), ConnError> {
        if head.stream == 0 {
            return Err(err(code::PROTOCOL_ERROR, "RST_STREAM on stream 0"));
        }
        let Ok(c) = <[u8; 4]>::try_from(payload) else {
            return Err(err(code::FRAME_SIZE_ERROR, "RST_STREAM of the wrong size"));
        };
        if !self.was_used(head.stream) {
            return Err(err(code::PROTOCOL_ERROR, "RST_STREAM on an idle stream"));
        }
        let code = u32::from_be_bytes(c);
        if let Some(s) = self.streams.remove(&head.stream) {
            remember(&mut self.closed, head.stream, RESET_MEMORY);
            if s.announced {
                on(Event::Reset { stream: head.stream, code, by_peer: true });
            }
        }
        Ok(())
    }

    fn settings(&mut self, head: Head, payload: &[u8]) -> Result<(), ConnError> {
        let streams = &mut self.streams;
        let new = self.link.settings(
            head,
            payload,
            |delta| shift_windows(streams.values_mut().map(|s| &mut s.send_window), delta),
            |id, value| match id {
                setting::ENABLE_PUSH if value > 1 => Err(err(code::PROTOCOL_ERROR, "SETTINGS_ENABLE_PUSH not 0 or 1")),
                // MAX_CONCURRENT_STREAMS limits pushes (we make none),
                // MAX_HEADER_LIST_SIZE is advisory; unknown ones are ignored.
                _ => Ok(()),
            },
        )?;
        self.counts.control += u32::from(new);
        Ok(())
    }

    fn ping(&mut self, head: Head, payload: &[u8]) -> Result<(), ConnError> {
        if self.link.ping(head, payload)? {
            self.counts.control += 1;
        }
        Ok(())
    }

    fn goaway(&mut self, head: Head, payload: &[u8], on: &mut dyn FnMut(Event<'_>)) -> Result<(), ConnError> {
        if head.stream != 0 {
            return Err(err(code::PROTOCOL_ERROR, "GOAWAY on a stream"));
        }
        let Some(c) = payload.get(4..8) else {
            return Err(err(code::FRAME_SIZE_ERROR, "GOAWAY too short"));
        };
        on(Event::GoAway { code: u32::from_be_bytes([c[0], c[1], c[2], c[3]]) });
        Ok(())
    }

    fn window_update(&mut self, head: Head, payload: &[u8]) -> Result<(), ConnError> {
        let Some(inc) = self.link.window_update(head, payload)? else { return Ok(()) };
        let Some(s) = self.streams.get_mut(&head.stream) else {
            if !self.was_used(head.stream) {
                return Err(err(code::PROTOCOL_ERROR, "WINDOW_UPDATE on an idle stream"));
            }
            return Ok(());
        };
        if let Err(code) = self.link.grow(&mut s.send_window, inc) {
            self.refuse(head.stream, code);
        }
        Ok(())
    }

    // ---- flow control of what the client sends --------------------------

    /// The driver took (or dropped) `n` body bytes of `stream`: their room
    /// goes back to the client, in WINDOW_UPDATEs batched to half a window.
    pub fn release(&mut self, stream: u32, n: usize) {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        self.link.give_back_n(n);
        if let Some(s) = self.streams.get_mut(&stream).filter(|s| s.recv_open) {
            self.link.stream_released(stream, n, &mut s.released, &mut s.recv_window);
        }
    }

    // ---- what the driver sends -----------------------------------------

    /// Sends a response head: an interim one (1xx) or the final one, with
    /// `end_stream` when there is no body. Connection-specific fields are
    /// left out; names are sent lowercase. False when the stream is gone.
    pub fn send_head<'f>(
        &mut self,
        stream: u32,
        status: u16,
        fields: impl IntoIterator<Item = (&'f [u8], &'f [u8])>,
        end_stream: bool,
    ) -> bool {
        let Some(s) = self.streams.get_mut(&stream) else { return false };
        if !s.send_open || s.responded {
            return false;
        }
        let interim = (100..200).contains(&status);
        s.responded = !interim;
        let end_stream = end_stream && !interim;
        let start = self.link.out.len();
        self.link.out.extend_from_slice(&[0; HEADER_LEN]);
        self.link.encoder.begin(&mut self.link.out);
        self.link.encoder.status(status, &mut self.link.out);
        self.encode_fields(fields);
        frame::frame_block(&mut self.link.out, start, stream, end_stream, self.link.peer_max_frame);
        if end_stream {
            self.end_sent(stream);
        }
        true
    }

    fn encode_fields<'f>(&mut self, fields: impl IntoIterator<Item = (&'f [u8], &'f [u8])>) {
        // Names from HTTP/1.1 servers come capitalized: lowercased on the
        // stack when short (almost all are), else in a vector.
        let mut short = [0u8; 64];
        let mut long = Vec::new();
        for (name, value) in fields {
            let name = if !name.iter().any(u8::is_ascii_uppercase) {
                name
            } else if name.len() <= short.len() {
                let lower = &mut short[..name.len()];
                lower.copy_from_slice(name);
                lower.make_ascii_lowercase();
                &*lower
            } else {
                long.clear();
                long.extend(name.iter().map(u8::to_ascii_lowercase));
                &long[..]
            };
            if head::connection_specific(name) || name == b"te" || name.is_empty() {
                continue;
            }
            self.link.encoder.field(name, value, &mut self.link.out);
        }
    }

    /// Sends body bytes within the windows; returns how many were taken
    /// (`end_stream` applies only when all were). An empty `data` with
    /// `end_stream` ends the stream. `None` when the stream is gone.
    pub fn send_data(&mut self, stream: u32, data: &[u8], end_stream: bool) -> Option<usize> {
        self.send_with(stream, data.len(), end_stream, |link, n, end, window| {
            link.write_data(stream, &data[..n], end, window);
        })
    }

    /// [`Server::send_data`] for a payload the caller shares: a large one
    /// goes out by reference (slices of `data` in the output), not copied.
    pub fn send_shared(&mut self, stream: u32, data: &Bytes, end_stream: bool) -> Option<usize> {
        self.send_with(stream, data.len(), end_stream, |link, n, end, window| {
            if n == data.len() {
                link.write_data_shared(stream, data, end, window);
            } else {
                link.write_data_shared(stream, &data.slice(..n), end, window);
            }
        })
    }

    /// Takes as many of `len` payload bytes as the windows allow, framed by
    /// `write` (given the link, the count, END_STREAM and the stream's window).
    fn send_with(
        &mut self,
        stream: u32,
        len: usize,
        end_stream: bool,
        write: impl FnOnce(&mut Link, usize, bool, &mut i64),
    ) -> Option<usize> {
        let room = self.send_capacity(stream);
        let s = self.streams.get_mut(&stream)?;
        if !s.send_open {
            return None;
        }
        let n = len.min(room);
        let all = n == len;
        if n == 0 && !(all && end_stream) {
            return Some(0);
        }
        write(&mut self.link, n, all && end_stream, &mut s.send_window);
        if all && end_stream {
            self.end_sent(stream);
        }
        Some(n)
    }

    /// Sends trailers, which end the stream. False when the stream is gone.
    pub fn send_trailers<'f>(&mut self, stream: u32, fields: impl IntoIterator<Item = (&'f [u8], &'f [u8])>) -> bool {
        if !self.can_send(stream) {
            return false;
        }
        let start = self.link.out.len();
        self.link.out.extend_from_slice(&[0; HEADER_LEN]);
        self.link.encoder.begin(&mut self.link.out);
        self.encode_fields(fields);
        frame::frame_block(&mut self.link.out, start, stream, true, self.link.peer_max_frame);
        self.end_sent(stream);
        true
    }

    /// Resets `stream` with `code` (the driver's own decision: no event).
    pub fn send_reset(&mut self, stream: u32, code: u32) {
        if self.streams.remove(&stream).is_some() {
            frame::write_reset(&mut self.link.out, stream, code);
            self.remember_reset(stream);
        }
    }

    /// Sends GOAWAY: streams the client opens from now on are refused, those
    /// open finish. `code` NO_ERROR for a graceful end.
    pub fn go_away(&mut self, code: u32) {
        if self.going_away.is_none() && self.phase != Phase::Closed {
            frame::write_goaway(&mut self.link.out, self.last_stream, code, b"");
            self.going_away = Some(self.last_stream);
        }
        if code != code::NO_ERROR {
            self.phase = Phase::Closed;
        }
    }

    // ---- helpers ----------------------------------------------------------

    fn end_sent(&mut self, stream: u32) {
        if let Some(s) = self.streams.get_mut(&stream) {
            s.send_open = false;
        }
        self.forget_if_closed(stream);
    }

    fn forget_if_closed(&mut self, stream: u32) {
        if self.streams.get(&stream).is_some_and(|s| !s.send_open && !s.recv_open) {
            self.streams.remove(&stream);
            remember(&mut self.closed, stream, RESET_MEMORY);
        }
    }

    /// A stream error: RST_STREAM, and an event if the driver knew the stream.
    fn reset(&mut self, stream: u32, code: u32, on: &mut dyn FnMut(Event<'_>)) {
        self.counts.stream_errors += 1;
        if let Some(s) = self.streams.remove(&stream) {
            if s.announced {
                on(Event::Reset { stream, code, by_peer: false });
            }
        }
        frame::write_reset(&mut self.link.out, stream, code);
        self.remember_reset(stream);
    }

    /// A stream error on a stream the driver does not know (or not yet).
    fn refuse(&mut self, stream: u32, code: u32) {
        if code != code::REFUSED_STREAM {
            self.counts.stream_errors += 1;
        }
        self.streams.remove(&stream);
        frame::write_reset(&mut self.link.out, stream, code);
        self.remember_reset(stream);
    }

    /// A header list over the limit: 431 on its stream (RFC 6585 5), whose
    /// body, if any, is then refused.
    fn too_large(&mut self, stream: u32, end_stream: bool) {
        let start = self.link.out.len();
        self.link.out.extend_from_slice(&[0; HEADER_LEN]);
        self.link.encoder.begin(&mut self.link.out);
        self.link.encoder.status(431, &mut self.link.out);
        frame::frame_block(&mut self.link.out, start, stream, true, self.link.peer_max_frame);
        if !end_stream {
            frame::write_reset(&mut self.link.out, stream, code::NO_ERROR);
        }
        self.remember_reset(stream);
    }

    fn remember_reset(&mut self, stream: u32) {
        remember(&mut self.reset_by_us, stream, RESET_MEMORY);
    }
}
