//! The client side of one HTTP/2 connection, sans-io ([`Client`]): the proxy
//! towards servers of `protocol = "h2"` pools. Bytes from the server go in
//! ([`Client::recv`]) and come out as [`Event`]s; what the driver sends
//! (request heads, DATA, trailers, resets) is framed into one output buffer
//! ([`Client::output`]) that it writes out as it can.
//!
//! The state kept: the HPACK tables, each stream's state and windows (in a
//! map keyed by stream id), the connection's windows, the header block being
//! continued, the server's settings. Stream states follow RFC 9113 5.1 for a
//! client that refuses pushes: a stream opens with our HEADERS, half-closes
//! either way with END_STREAM, and is forgotten once closed both ways or
//! reset. Errors follow RFC 9113 5.4: a connection error queues GOAWAY and
//! ends [`Client::recv`] with [`ConnError`]; a stream error (a malformed
//! response, 8.1.1) queues RST_STREAM and an [`Event::Reset`].
//!
//! Sending: [`Client::open`] takes a stream id (odd, rising) within the
//! server's `SETTINGS_MAX_CONCURRENT_STREAMS`; request body bytes are
//! always taken ([`Client::send_data`]) and framed as far as both windows
//! allow, the rest queued on the stream until WINDOW_UPDATE or SETTINGS
//! opens them (the driver bounds it by waiting for
//! [`Client::send_capacity`] before it writes more). Trailers and the end of
//! the stream wait behind queued bytes.
//!
//! GOAWAY from the server: streams above its last-stream-id were not
//! processed and are reported as [`Event::Unprocessed`] (safe to retry
//! anywhere, RFC 9113 6.8); no stream opens afterwards.
//!
//! Invariants: no input panics this code; windows never exceed 2^31 − 1; a
//! header block is bounded ([`Config::max_header_list`] + 16 KiB, 64 frames).

use std::collections::VecDeque;
use std::io::IoSlice;

use super::frame::{self, code, flag, kind, setting, Head, HEADER_LEN, MAX_WINDOW, MIN_MAX_FRAME_SIZE};
use super::head::connection_specific;
use super::hpack::{self, Decoder};
pub use super::link::ConnError;
use super::link::{err, remember, shift_windows, unpad, Link, MAX_CONTINUATIONS};
use super::response::{self, Response};
use super::server::{StreamMap, PREFACE};
use crate::parse::Field;

/// Most CONTINUATION frames after one HEADERS frame.
/// Streams we reset (or that ended) remembered, so late frames on them are
/// told from frames on streams never opened.
const MEMORY: usize = 64;

/// What the client advertises and enforces.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// `SETTINGS_MAX_HEADER_LIST_SIZE`, in RFC 9113's accounting.
    pub max_header_list: usize,
    /// `SETTINGS_INITIAL_WINDOW_SIZE`: response bytes a server may send on a
    /// stream before the driver has released any of it.
    pub stream_window: u32,
    /// The connection's receive window.
    pub connection_window: u32,
}

/// Why a stream could not be opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenError {
    /// The server's `SETTINGS_MAX_CONCURRENT_STREAMS` is reached: wait for a
    /// stream to end.
    AtLimit,
    /// The server sent GOAWAY, or stream ids ran out: open a new connection.
    GoingAway,
    /// The connection failed.
    Closed,
}

/// The request line of a stream: its pseudo-headers.
#[derive(Debug, Clone, Copy)]
pub struct RequestLine<'a> {
    /// `:method`.
    pub method: &'a [u8],
    /// `:scheme` (`http` or `https`).
    pub scheme: &'a [u8],
    /// `:authority`.
    pub authority: &'a [u8],
    /// `:path`.
    pub path: &'a [u8],
}

/// What the server did, as the driver needs it.
#[derive(Debug)]
#[allow(missing_docs)]
pub enum Event<'a> {
    /// An interim (1xx) response head; the final one follows.
    Interim { stream: u32, response: &'a Response },
    /// The final response head. Its body (unless `end_stream`) follows as `Data`.
    Response { stream: u32, response: &'a Response, end_stream: bool },
    /// Response body bytes; the driver gives their room back with
    /// [`Client::release`] once taken (or dropped).
    Data { stream: u32, data: &'a [u8], end_stream: bool },
    /// The response's trailers (the stream's end).
    Trailers { stream: u32, buf: &'a [u8], fields: &'a [Field] },
    /// The stream was reset: by the server (`by_peer`), or by the codec for
    /// a stream error (a malformed response). Either way it is gone.
    Reset { stream: u32, code: u32, by_peer: bool },
    /// The server's GOAWAY: streams above `last_stream` follow as
    /// [`Event::Unprocessed`]; those below may still finish.
    GoAway { last_stream: u32, code: u32 },
    /// A stream the server did not process (above a GOAWAY's last id): it
    /// is gone, and safe to retry.
    Unprocessed { stream: u32 },
}

#[derive(Debug)]
struct Stream {
    /// The server may still send (no END_STREAM yet).
    recv_open: bool,
    /// We may still send: `false` once END_STREAM is queued (or a reset).
    send_open: bool,
    /// The final (non-1xx) response head arrived.
    responded: bool,
    /// The response has no content (HEAD, 204, 304): its length is not checked.
    no_content: bool,
    recv_window: i64,
    send_window: i64,
    /// Bytes the driver released not yet given back with WINDOW_UPDATE.
    released: u32,
    content_length: Option<u64>,
    received: u64,
    /// Body bytes taken beyond the windows.
    queued: Vec<u8>,
    /// END_STREAM goes out after `queued` (with trailers, if any).
    queued_end: bool,
    /// Trailers to send after `queued`: names and values in one buffer.
    queued_trailers: Option<(Vec<u8>, Vec<Field>)>,
}

impl Stream {
    /// Both sides are done and nothing waits to go out.
    fn finished(&self) -> bool {
        !self.recv_open && !self.send_open && self.queued.is_empty() && !self.queued_end
    }
}

/// A header block waiting for CONTINUATION frames.
struct Pending {
    stream: u32,
    end_stream: bool,
    block: Vec<u8>,
    frames: usize,
}

/// The client side of one HTTP/2 connection.
pub struct Client {
    cfg: Config,
    /// The server's SETTINGS arrived (its preface).
    handshaken: bool,
    closed: bool,
    decoder: Decoder,
    /// The output, the connection's windows, the server's settings.
    link: Link,
    streams: StreamMap<Stream>,
    /// The next stream id to open.
    next_stream: u32,
    peer_max_streams: u32,
    pending: Option<Pending>,
    response: Response,
    /// A header block's fragments, joined (kept for its allocation).
    block_buf: Vec<u8>,
    /// The server's GOAWAY: its last stream id.
    going_away: Option<u32>,
    /// Streams we reset, remembered (see [`MEMORY`]).
    reset_by_us: VecDeque<u32>,
    /// Streams with bytes (or an end) queued beyond the windows.
    blocked: Vec<u32>,
}

impl Client {
    /// A connection whose first bytes are queued at once: the preface, our
    /// SETTINGS (no push, our windows and header list limit) and the
    /// connection window's growth.
    pub fn new(cfg: Config) -> Client {
        let mut client = Client {
            cfg,
            handshaken: false,
            closed: false,
            decoder: Decoder::default(),
            link: Link::new(cfg.stream_window, cfg.connection_window),
            streams: StreamMap::default(),
            next_stream: 1,
            peer_max_streams: u32::MAX,
            pending: None,
            response: Response::default(),
            block_buf: Vec::new(),
            going_away: None,
            reset_by_us: VecDeque::new(),
            blocked: Vec::new(),
        };
        client.link.out.extend_from_slice(PREFACE);
        let list = u32::try_from(cfg.max_header_list).unwrap_or(u32::MAX);
        client.link.greet(&[
            (setting::ENABLE_PUSH, 0),
            (setting::INITIAL_WINDOW_SIZE, cfg.stream_window.min(MAX_WINDOW as u32)),
            (setting::MAX_HEADER_LIST_SIZE, list),
        ]);
        client
    }

    // ---- output -------------------------------------------------------

    /// The next run of queued frame bytes not yet written out; empty only
    /// when nothing is queued.
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

    /// The server's SETTINGS arrived.
    pub fn handshaken(&self) -> bool {
        self.handshaken
    }

    /// The connection failed: no more input is taken.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Streams open (or half-closed) now.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// The server's `SETTINGS_MAX_CONCURRENT_STREAMS` (unlimited until it says).
    pub fn max_streams(&self) -> u32 {
        self.peer_max_streams
    }

    /// The server's GOAWAY's last stream id, once it sent one.
    pub fn going_away(&self) -> Option<u32> {
        self.going_away
    }

    /// Whether a new stream may open now.
    pub fn can_open(&self) -> bool {
        !self.closed && self.going_away.is_none() && self.next_stream <= MAX_WINDOW as u32 && self.below_limit()
    }

    fn below_limit(&self) -> bool {
        self.streams.len() < self.peer_max_streams as usize
    }

    /// Whether a send window grew or a stream ended since the last call
    /// (writers waiting for room, or for a stream, may try again).
    pub fn take_window_opened(&mut self) -> bool {
        std::mem::take(&mut self.link.window_opened)
    }

    /// How many more body bytes `stream` may send without queuing.
    pub fn send_capacity(&self, stream: u32) -> usize {
        match self.streams.get(&stream) {
            Some(s) if s.send_open => {
                let room = s.send_window.min(self.link.send_window) - s.queued.len() as i64;
                usize::try_from(room.max(0)).unwrap_or(0)
            }
            _ => 0,
        }
    }

    /// Whether `stream` still takes body bytes.
    pub fn can_send(&self, stream: u32) -> bool {
        self.streams.get(&stream).is_some_and(|s| s.send_open)
    }

    /// Whether `stream` is still known (open or half-closed, or with bytes
    /// still queued).
    pub fn is_open(&self, stream: u32) -> bool {
        self.streams.contains_key(&stream)
    }

    // ---- what the driver sends -----------------------------------------

    /// Opens a stream with a request head: the pseudo-headers of `line`,
    /// then `fields` (names lowercased; connection-specific ones, `te` and
    /// `host` left out: `:authority` stands for it). `end_stream`: no body.
    pub fn open<'f>(
        &mut self,
        line: RequestLine<'_>,
        fields: impl IntoIterator<Item = (&'f [u8], &'f [u8])>,
        end_stream: bool,
    ) -> Result<u32, OpenError> {
        if self.closed {
            return Err(OpenError::Closed);
        }
        if self.going_away.is_some() || self.next_stream > MAX_WINDOW as u32 {
            return Err(OpenError::GoingAway);
        }
        if !self.below_limit() {
            return Err(OpenError::AtLimit);
        }
        let stream = self.next_stream;
        self.next_stream += 2;
        let start = self.link.out.len();
        self.link.out.extend_from_slice(&[0; HEADER_LEN]);
        self.link.encoder.begin(&mut self.link.out);
        self.pseudo(line);
        self.encode_fields(fields, true);
        frame::frame_block(&mut self.link.out, start, stream, end_stream, self.link.peer_max_frame);
        self.streams.insert(
            stream,
            Stream {
                recv_open: true,
                send_open: !end_stream,
                responded: false,
                no_content: line.method == b"HEAD",
                recv_window: i64::from(self.cfg.stream_window),
                send_window: self.link.peer_window,
                released: 0,
                content_length: None,
                received: 0,
                queued: Vec::new(),
                queued_end: false,
                queued_trailers: None,
            },
        );
        Ok(stream)
    }

    /// The pseudo-headers, fully indexed when the static table has them.
    fn pseudo(&mut self, line: RequestLine<'_>) {
        let out = &mut self.link.out;
        match line.method {
            b"GET" => out.push(0x82),
            b"POST" => out.push(0x83),
            m => self.link.encoder.field(b":method", m, out),
        }
        match line.scheme {
            b"http" => out.push(0x86),
            b"https" => out.push(0x87),
            s => self.link.encoder.field(b":scheme", s, out),
        }
        self.link.encoder.field(b":authority", line.authority, out);
        match line.path {
            b"/" => out.push(0x84),
            p => self.link.encoder.field(b":path", p, out),
        }
    }

    fn encode_fields<'f>(&mut self, fields: impl IntoIterator<Item = (&'f [u8], &'f [u8])>, request: bool) {
        // Names from HTTP/1.1 clients may come capitalized: lowercased on
        // the stack when short (almost all are), else in a vector.
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
            if name.is_empty() || name[0] == b':' || connection_specific(name) || name == b"te" {
                continue;
            }
            if request && name == b"host" {
                continue;
            }
            self.link.encoder.field(name, value, &mut self.link.out);
        }
        if request {
            // The proxy relays trailers, so it says it takes them (the one
            // `te` HTTP/2 allows, RFC 9113 8.2.2); gRPC servers require it.
            self.link.encoder.field(b"te", b"trailers", &mut self.link.out);
        }
    }

    /// Sends body bytes: framed within both windows now, the rest queued
    /// until they open. `end_stream` ends the stream after them. False when
    /// the stream takes no more (reset, or ended).
    pub fn send_data(&mut self, stream: u32, data: &[u8], end_stream: bool) -> bool {
        let room = self.send_capacity(stream);
        let Some(s) = self.streams.get_mut(&stream) else { return false };
        if !s.send_open {
            return false;
        }
        s.send_open = !end_stream;
        if !s.queued.is_empty() || data.len() > room {
            let n = data.len().min(room);
            let (now, later) = data.split_at(n);
            s.queued.extend_from_slice(later);
            s.queued_end = end_stream;
            self.frame_data(stream, now, false);
            self.block(stream);
            return true;
        }
        self.frame_data(stream, data, end_stream);
        if end_stream {
            self.forget_if_finished(stream);
        }
        true
    }

    /// Frames `data` on `stream` (within the windows: the caller checked),
    /// in pieces of the server's largest frame.
    fn frame_data(&mut self, stream: u32, data: &[u8], end_stream: bool) {
        if data.is_empty() && !end_stream {
            return;
        }
        let mut gone = 0;
        let window = self.streams.get_mut(&stream).map_or(&mut gone, |s| &mut s.send_window);
        self.link.write_data(stream, data, end_stream, window);
    }

    fn block(&mut self, stream: u32) {
        if !self.blocked.contains(&stream) {
            self.blocked.push(stream);
        }
    }

    /// Sends trailers, which end the stream (after any queued body bytes).
    /// False when the stream takes no more.
    pub fn send_trailers<'f>(&mut self, stream: u32, fields: impl IntoIterator<Item = (&'f [u8], &'f [u8])>) -> bool {
        let Some(s) = self.streams.get_mut(&stream) else { return false };
        if !s.send_open {
            return false;
        }
        s.send_open = false;
        if !s.queued.is_empty() {
            let mut buf = Vec::new();
            let mut list = Vec::new();
            for (name, value) in fields {
                let n = buf.len();
                buf.extend_from_slice(name);
                let v = buf.len();
                buf.extend_from_slice(value);
                list.push(Field { name: n..v, value: v..buf.len() });
            }
            s.queued_trailers = Some((buf, list));
            s.queued_end = true;
            self.block(stream);
            return true;
        }
        self.trailer_block(stream, fields);
        self.forget_if_finished(stream);
        true
    }

    fn trailer_block<'f>(&mut self, stream: u32, fields: impl IntoIterator<Item = (&'f [u8], &'f [u8])>) {
        let start = self.link.out.len();
        self.link.out.extend_from_slice(&[0; HEADER_LEN]);
        self.link.encoder.begin(&mut self.link.out);
        self.encode_fields(fields, false);
        frame::frame_block(&mut self.link.out, start, stream, true, self.link.peer_max_frame);
    }

    /// Resets `stream` with `code` (the driver's own decision: no event).
    pub fn send_reset(&mut self, stream: u32, code: u32) {
        if self.streams.remove(&stream).is_some() {
            frame::write_reset(&mut self.link.out, stream, code);
            remember(&mut self.reset_by_us, stream, MEMORY);
            self.link.window_opened = true;
        }
    }

    /// Sends GOAWAY (`code` NO_ERROR for a graceful end): we open no more
    /// streams and take no more input.
    pub fn go_away(&mut self, code: u32) {
        if !self.closed {
            frame::write_goaway(&mut self.link.out, 0, code, b"");
            self.closed = true;
        }
    }

    /// Sends what the windows now allow of the queued bodies.
    fn flush_blocked(&mut self) {
        let mut i = 0;
        while i < self.blocked.len() {
            let stream = self.blocked[i];
            if self.flush_stream(stream) {
                self.blocked.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }

    /// Flushes one stream's queue; true when nothing is left queued.
    fn flush_stream(&mut self, stream: u32) -> bool {
        let Some(s) = self.streams.get_mut(&stream) else { return true };
        let room = usize::try_from(s.send_window.min(self.link.send_window).max(0)).unwrap_or(0);
        let n = s.queued.len().min(room);
        let all = n == s.queued.len();
        let end = all && s.queued_end && s.queued_trailers.is_none();
        if n == 0 && !all {
            return false;
        }
        let data: Vec<u8> = s.queued.drain(..n).collect();
        let trailers = if all { s.queued_trailers.take() } else { None };
        if all {
            s.queued_end = false;
        }
        if !data.is_empty() || end {
            self.frame_data(stream, &data, end);
        }
        if let Some((buf, fields)) = trailers {
            let iter = fields.iter().map(|f| (&buf[f.name.clone()], &buf[f.value.clone()]));
            self.trailer_block(stream, iter);
        }
        if all {
            self.forget_if_finished(stream);
        }
        all
    }

    // ---- input --------------------------------------------------------

    /// Takes the server's bytes: every complete frame at the start of
    /// `input` is handled, events passed to `on`. Returns how many bytes were
    /// used (the rest is an incomplete frame, to come again with more).
    pub fn recv(&mut self, input: &[u8], on: &mut dyn FnMut(Event<'_>)) -> Result<usize, ConnError> {
        if self.closed {
            return Err(err(code::PROTOCOL_ERROR, "connection closed"));
        }
        let mut at = 0;
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
        if !self.blocked.is_empty() && self.link.window_opened {
            self.flush_blocked();
        }
        Ok(at)
    }

    /// Queues GOAWAY for a connection error and closes.
    fn fail(&mut self, code: u32, reason: &'static str) -> ConnError {
        if !self.closed {
            frame::write_goaway(&mut self.link.out, 0, code, reason.as_bytes());
            self.closed = true;
        }
        ConnError { code, reason }
    }

    fn frame(&mut self, head: Head, payload: &[u8], on: &mut dyn FnMut(Event<'_>)) -> Result<(), ConnError> {
        if !self.handshaken {
            if head.kind != kind::SETTINGS || head.has(flag::ACK) {
                return Err(err(code::PROTOCOL_ERROR, "the server's first frame is not SETTINGS"));
            }
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
            kind::PRIORITY => self.priority(head, payload, on),
            kind::RST_STREAM => self.rst_stream(head, payload, on),
            kind::SETTINGS => self.settings(head, payload),
            kind::PUSH_PROMISE => Err(err(code::PROTOCOL_ERROR, "PUSH_PROMISE with push disabled")),
            kind::PING => self.ping(head, payload),
            kind::GOAWAY => self.goaway(head, payload, on),
            kind::WINDOW_UPDATE => self.window_update(head, payload, on),
            kind::CONTINUATION => self.continuation(head, payload, on),
            // Unknown frame types are ignored (RFC 9113 5.5).
            _ => Ok(()),
        }
    }

    /// Whether a stream id the map lacks was opened before (rather than
    /// never: idle, or one only the server could open).
    fn was_used(&self, stream: u32) -> bool {
        stream % 2 == 1 && stream < self.next_stream
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
            Some(s) if !s.responded => Some(code::PROTOCOL_ERROR),
            Some(s) if len > s.recv_window => Some(code::FLOW_CONTROL_ERROR),
            Some(s) => {
                s.recv_window -= len;
                s.received += data.len() as u64;
                let wrong = !s.no_content
                    && s.content_length.is_some_and(|n| s.received > n || (end_stream && s.received != n));
                if wrong {
                    Some(code::PROTOCOL_ERROR)
                } else {
                    s.recv_open &= !end_stream;
                    on(Event::Data { stream, data, end_stream });
                    // Padding is not the driver's: its room comes back at once.
                    let padding = payload.len() - data.len();
                    if padding > 0 {
                        self.release(stream, padding);
                    }
                    if end_stream {
                        self.forget_if_finished(stream);
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
        if head.has(flag::PRIORITY) {
            let Some((_, rest)) = fragment.split_first_chunk::<5>() else {
                return Err(err(code::FRAME_SIZE_ERROR, "HEADERS too short for its priority"));
            };
            fragment = rest;
        }
        let end_stream = head.has(flag::END_STREAM);
        if head.has(flag::END_HEADERS) {
            return self.header_block(head.stream, end_stream, fragment, on);
        }
        if fragment.len() > self.cfg.max_header_list + 16 * 1024 {
            return Err(err(code::ENHANCE_YOUR_CALM, "header block too large"));
        }
        let mut block = std::mem::take(&mut self.block_buf);
        block.clear();
        block.extend_from_slice(fragment);
        self.pending = Some(Pending { stream: head.stream, end_stream, block, frames: 0 });
        Ok(())
    }

    fn continuation(&mut self, head: Head, payload: &[u8], on: &mut dyn FnMut(Event<'_>)) -> Result<(), ConnError> {
        let Some(p) = self.pending.as_mut() else {
            return Err(err(code::PROTOCOL_ERROR, "CONTINUATION without HEADERS"));
        };
        p.frames += 1;
        if p.frames > MAX_CONTINUATIONS || p.block.len() + payload.len() > self.cfg.max_header_list + 16 * 1024 {
            return Err(err(code::ENHANCE_YOUR_CALM, "header block too large"));
        }
        p.block.extend_from_slice(payload);
        if !head.has(flag::END_HEADERS) {
            return Ok(());
        }
        let Some(p) = self.pending.take() else { return Ok(()) };
        let result = self.header_block(p.stream, p.end_stream, &p.block, on);
        self.block_buf = p.block;
        result
    }

    /// A complete header block for `stream`: a response head (interim or
    /// final) or trailers.
    fn header_block(
        &mut self,
        stream: u32,
        end_stream: bool,
        block: &[u8],
        on: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), ConnError> {
        if !self.was_used(stream) {
            return Err(err(code::PROTOCOL_ERROR, "HEADERS on a stream we did not open"));
        }
        let mut response = std::mem::take(&mut self.response);
        response.clear();
        let decoded = self.decode(block, &mut response.buf, &mut response.fields);
        let result = decoded.and_then(|d| self.decoded(stream, end_stream, d, &mut response, on));
        self.response = response;
        result
    }

    fn decoded(
        &mut self,
        stream: u32,
        end_stream: bool,
        decoded: hpack::Decoded,
        response: &mut Response,
        on: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), ConnError> {
        let Some(s) = self.streams.get_mut(&stream) else {
            if self.reset_by_us.contains(&stream) {
                // A stream we reset: the server may not know yet. Decoded
                // for HPACK's sake, then ignored.
                return Ok(());
            }
            return Err(err(code::STREAM_CLOSED, "HEADERS on a closed stream"));
        };
        if !s.recv_open {
            self.reset(stream, code::STREAM_CLOSED, on);
            return Ok(());
        }
        if s.responded {
            return self.trailers(stream, end_stream, decoded, response, on);
        }
        if decoded.oversized || response::response(response, end_stream).is_err() {
            self.reset(stream, code::PROTOCOL_ERROR, on);
            return Ok(());
        }
        if response.is_interim() {
            on(Event::Interim { stream, response });
            return Ok(());
        }
        s.responded = true;
        s.no_content |= response.status == 204 || response.status == 304;
        s.content_length = response.content_length;
        if end_stream && !s.no_content && response.content_length.is_some_and(|n| n != 0) {
            self.reset(stream, code::PROTOCOL_ERROR, on);
            return Ok(());
        }
        s.recv_open = !end_stream;
        on(Event::Response { stream, response, end_stream });
        if end_stream {
            self.forget_if_finished(stream);
        }
        Ok(())
    }

    /// A second block after the final head: trailers, which must end the
    /// stream and carry no pseudo-header.
    fn trailers(
        &mut self,
        stream: u32,
        end_stream: bool,
        decoded: hpack::Decoded,
        response: &Response,
        on: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), ConnError> {
        let Some(s) = self.streams.get_mut(&stream) else { return Ok(()) };
        let short = !s.no_content && s.content_length.is_some_and(|n| n != s.received);
        let (buf, fields) = (&response.buf, &response.fields);
        if !end_stream || decoded.oversized || short || super::head::trailers(buf, fields).is_err() {
            self.reset(stream, code::PROTOCOL_ERROR, on);
            return Ok(());
        }
        s.recv_open = false;
        on(Event::Trailers { stream, buf, fields });
        self.forget_if_finished(stream);
        Ok(())
    }

    fn decode(
        &mut self,
        block: &[u8],
        buf: &mut Vec<u8>,
        fields: &mut Vec<Field>,
    ) -> Result<hpack::Decoded, ConnError> {
        buf.clear();
        fields.clear();
        match self.decoder.decode(block, self.cfg.max_header_list, buf, fields) {
            Ok(d) => Ok(d),
            Err(hpack::Error::ListTooLarge) => Err(err(code::ENHANCE_YOUR_CALM, "header list far too large")),
            Err(_) => Err(err(code::COMPRESSION_ERROR, "invalid header block")),
        }
    }

    fn priority(&mut self, head: Head, payload: &[u8], on: &mut dyn FnMut(Event<'_>)) -> Result<(), ConnError> {
        if head.stream == 0 {
            return Err(err(code::PROTOCOL_ERROR, "PRIORITY on stream 0"));
        }
        if payload.len() != 5 {
            self.reset(head.stream, code::FRAME_SIZE_ERROR, on);
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
        if self.streams.remove(&head.stream).is_some() {
            self.link.window_opened = true;
            on(Event::Reset { stream: head.stream, code: u32::from_be_bytes(c), by_peer: true });
        }
        Ok(())
    }

    fn settings(&mut self, head: Head, payload: &[u8]) -> Result<(), ConnError> {
        let (streams, max_streams, opened) = (&mut self.streams, &mut self.peer_max_streams, &mut false);
        self.link.settings(
            head,
            payload,
            |delta| shift_windows(streams.values_mut().map(|s| &mut s.send_window), delta),
            |id, value| {
                match id {
                    setting::ENABLE_PUSH if value != 0 => {
                        return Err(err(code::PROTOCOL_ERROR, "SETTINGS_ENABLE_PUSH from a server"));
                    }
                    setting::MAX_CONCURRENT_STREAMS => {
                        *opened |= value > *max_streams;
                        *max_streams = value;
                    }
                    // MAX_HEADER_LIST_SIZE is advisory; unknown ones are ignored.
                    _ => {}
                }
                Ok(())
            },
        )?;
        self.link.window_opened |= *opened;
        Ok(())
    }

    fn ping(&mut self, head: Head, payload: &[u8]) -> Result<(), ConnError> {
        self.link.ping(head, payload).map(|_| ())
    }

    fn goaway(&mut self, head: Head, payload: &[u8], on: &mut dyn FnMut(Event<'_>)) -> Result<(), ConnError> {
        if head.stream != 0 {
            return Err(err(code::PROTOCOL_ERROR, "GOAWAY on a stream"));
        }
        let (Some(l), Some(c)) = (payload.get(0..4), payload.get(4..8)) else {
            return Err(err(code::FRAME_SIZE_ERROR, "GOAWAY too short"));
        };
        let last_stream = u32::from_be_bytes([l[0], l[1], l[2], l[3]]) & 0x7fff_ffff;
        // A later GOAWAY may only lower the last id.
        let last_stream = self.going_away.map_or(last_stream, |prev| prev.min(last_stream));
        self.going_away = Some(last_stream);
        on(Event::GoAway { last_stream, code: u32::from_be_bytes([c[0], c[1], c[2], c[3]]) });
        let mut gone: Vec<u32> = self.streams.keys().copied().filter(|&id| id > last_stream).collect();
        gone.sort_unstable();
        for stream in gone {
            self.streams.remove(&stream);
            on(Event::Unprocessed { stream });
        }
        self.link.window_opened = true;
        Ok(())
    }

    fn window_update(&mut self, head: Head, payload: &[u8], on: &mut dyn FnMut(Event<'_>)) -> Result<(), ConnError> {
        let Some(inc) = self.link.window_update(head, payload)? else { return Ok(()) };
        let Some(s) = self.streams.get_mut(&head.stream) else {
            if !self.was_used(head.stream) {
                return Err(err(code::PROTOCOL_ERROR, "WINDOW_UPDATE on an idle stream"));
            }
            return Ok(());
        };
        if let Err(code) = self.link.grow(&mut s.send_window, inc) {
            self.reset(head.stream, code, on);
        }
        Ok(())
    }

    // ---- flow control of what the server sends ---------------------------

    /// The driver took (or dropped) `n` body bytes of `stream`: their room
    /// goes back to the server, in WINDOW_UPDATEs batched to half a window.
    pub fn release(&mut self, stream: u32, n: usize) {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        self.link.give_back_n(n);
        if let Some(s) = self.streams.get_mut(&stream).filter(|s| s.recv_open) {
            self.link.stream_released(stream, n, &mut s.released, &mut s.recv_window);
        }
    }

    // ---- helpers ----------------------------------------------------------

    fn forget_if_finished(&mut self, stream: u32) {
        if self.streams.get(&stream).is_some_and(Stream::finished) {
            self.streams.remove(&stream);
            self.link.window_opened = true;
        }
    }

    /// A stream error: RST_STREAM and an event.
    fn reset(&mut self, stream: u32, code: u32, on: &mut dyn FnMut(Event<'_>)) {
        if self.streams.contains_key(&stream) {
            on(Event::Reset { stream, code, by_peer: false });
        }
        self.stream_error(stream, code);
    }

    /// RST_STREAM for a stream error, the stream forgotten.
    fn stream_error(&mut self, stream: u32, code: u32) {
        self.streams.remove(&stream);
        frame::write_reset(&mut self.link.out, stream, code);
        remember(&mut self.reset_by_us, stream, MEMORY);
        self.link.window_opened = true;
    }
}
