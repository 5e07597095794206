//! One HTTP/2 connection to a server on the project's own codec
//! ([`switchyard_http::http2::client`]): the codec and the state of each
//! stream it carries, shared by the connection's driving task and the
//! requests' streams ([`super::H2Stream`]), all on one worker thread.
//!
//! The driving task ([`drive`]) owns the socket: it writes out what the
//! codec queued and feeds it what the server sent, and turns the codec's
//! events into each stream's state: each response head kept decoded (its
//! names and values in the stream's `inbound`, its field ranges beside
//! them: [`HeadMark`]; interim 1xx heads before the final one) for the
//! pipeline to take as it is, then the body's payload as it came and its
//! trailers apart ([`super::Rd`] gives them as parts, or as HTTP/1.1 body
//! bytes); or the stream's failure, and whether the server provably did not
//! process it. Streams wake it when they queue frames; it wakes them
//! when their response grows, their window opens or the connection fails.
//!
//! Invariants: no server input can panic this code; a failed connection
//! fails only the streams it carried; the task ends once the connection
//! failed, or once nothing but the task holds it (dropped from the pool and
//! its last stream done), after a GOAWAY.

use std::cell::{Cell, RefCell};
use std::future::{poll_fn, Future};
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use bytes::BytesMut;
use switchyard_http::http2::client::{Client, Event};
use switchyard_http::http2::frame::code;
use switchyard_http::http2::response::Response;
use switchyard_http::http2::server::StreamMap;
use switchyard_http::parse::{Field, Framing};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::super::stream::ServerStream;
use crate::transport::{Trailers, WRITE_SLICES};

/// The read buffer: a frame (at most 16 KiB + 9, what we advertise) always fits.
const READ_BUF: usize = 64 * 1024;

/// Why a stream failed on the HTTP/2 side: for the log, and the server's
/// RST_STREAM code when it reset the stream.
#[derive(Debug, Clone, Copy)]
pub(super) struct Failure {
    pub why: &'static str,
    pub reset: Option<u32>,
    /// The server provably did not process the request (RFC 9113 8.7):
    /// REFUSED_STREAM, above a GOAWAY's last stream id, or never opened.
    pub unprocessed: bool,
}

/// A response head decoded for the pipeline, not yet taken: its names and
/// values are the first `len` bytes of the stream's `inbound` (after the
/// heads before it), its first `fields` of `head_fields` index them.
#[derive(Debug, Clone, Copy)]
pub(super) struct HeadMark {
    pub len: usize,
    pub status: u16,
    pub framing: Framing,
    pub fields: usize,
}

/// Where a stream's response is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// No final head yet.
    Waiting,
    /// The head came; the body is arriving.
    Body,
    /// The whole response is in `inbound`.
    Done,
}

/// One request's stream as the connection and the request share it.
pub(super) struct StreamState {
    /// The stream id; 0 until the request head opened it.
    pub id: u32,
    /// Response heads decoded and not yet taken, in order ([`HeadMark`]).
    pub heads: Vec<HeadMark>,
    /// Their fields' ranges, relative to each head's first byte.
    pub head_fields: Vec<Field>,
    /// Response bytes not yet taken by the pipeline: the pending heads'
    /// names and values, then the body's payload.
    pub inbound: BytesMut,
    /// Body bytes in `inbound` whose flow-control room is not yet released.
    pub held: usize,
    /// The response has no length: read as bytes, its body is chunked.
    pub chunked: bool,
    /// The response's trailers, once they came (boxed: most responses have none).
    pub trailers: Option<Box<Trailers>>,
    /// The request was HEAD (the response has no body whatever its fields).
    pub head_request: bool,
    /// The final response has a body (not HEAD, 204, 304).
    body: bool,
    pub phase: Phase,
    pub failure: Option<Failure>,
    /// The response head is due by then ([`Inner::due_by`]): the request's
    /// pipeline waits for it with no timer of its own.
    pub head_by: Option<tokio::time::Instant>,
    /// The head was not there by `head_by` ([`expire`]).
    pub timed_out: bool,
    pub reader: Option<Waker>,
    pub writer: Option<Waker>,
}

impl StreamState {
    pub fn new() -> Self {
        StreamState {
            id: 0,
            heads: Vec::new(),
            head_fields: Vec::new(),
            inbound: BytesMut::new(),
            held: 0,
            chunked: false,
            trailers: None,
            head_request: false,
            body: false,
            phase: Phase::Waiting,
            failure: None,
            head_by: None,
            timed_out: false,
            reader: None,
            writer: None,
        }
    }

    /// Made as new for another stream, its buffers' room kept.
    fn recycle(&mut self) {
        let mut heads = std::mem::take(&mut self.heads);
        let mut head_fields = std::mem::take(&mut self.head_fields);
        let mut inbound = std::mem::take(&mut self.inbound);
        heads.clear();
        head_fields.clear();
        inbound.clear();
        *self = StreamState { heads, head_fields, inbound, ..StreamState::new() };
    }

    fn fail(&mut self, failure: Failure) {
        if self.failure.is_none() && self.phase != Phase::Done {
            self.failure = Some(failure);
        }
        self.wake();
    }

    pub fn wake(&mut self) {
        if let Some(w) = self.reader.take() {
            w.wake();
        }
        if let Some(w) = self.writer.take() {
            w.wake();
        }
    }
}

/// A stream's shared state.
pub(super) type Link = Rc<RefCell<StreamState>>;

/// The codec and what the task and the streams share.
pub(super) struct Inner {
    pub codec: Client,
    /// The streams opened on the codec, by id.
    pub streams: StreamMap<Link>,
    /// The connection failed (or ended): why, for the streams still waiting.
    pub failed: Option<Failure>,
    /// The driving task, to wake when there is output.
    driver: Option<Waker>,
    /// Requests waiting for the server's stream limit, or for the handshake.
    pub waiting: Vec<Waker>,
    /// States of ended streams, kept for the next ones with their buffers'
    /// room ([`Inner::keep_spare`], [`Inner::spare_state`]).
    spare: Vec<Link>,
    /// The earliest time a stream's response head is due by, as far as the
    /// task knows: its one timer is set for it ([`expire`]).
    due: Option<tokio::time::Instant>,
}

/// Ended streams' states a connection keeps for its next streams: streams
/// end and open in bursts of many (a read of the server's frames ends
/// dozens), so the list holds a burst's worth.
const SPARE_STATES: usize = 256;
/// A state whose buffer grew beyond this is not kept (a large body's room).
const SPARE_ROOM: usize = 16 * 1024;

impl Inner {
    /// Keeps an ended stream's state for a next stream: its head and body
    /// buffers keep their room (no allocation per stream), within bounds.
    pub fn keep_spare(&mut self, link: &Link) {
        if self.spare.len() < SPARE_STATES && link.borrow().inbound.capacity() <= SPARE_ROOM {
            self.spare.push(link.clone());
        }
    }

    /// A state for a new stream: an ended one nothing holds any more, made
    /// new, or a new one.
    pub fn spare_state(&mut self) -> Link {
        while let Some(link) = self.spare.pop() {
            if Rc::strong_count(&link) == 1 {
                link.borrow_mut().recycle();
                return link;
            }
        }
        Rc::new(RefCell::new(StreamState::new()))
    }

    /// Wakes the task when the codec has frames to write.
    pub fn kick(&mut self) {
        if !self.codec.output().is_empty() {
            if let Some(w) = self.driver.take() {
                w.wake();
            }
        }
    }

    /// A stream's response head is due by `by`: the task's timer is set
    /// earlier if it must (the task woken to set it).
    pub fn due_by(&mut self, by: tokio::time::Instant) {
        if self.due.is_none_or(|due| by < due) {
            self.due = Some(by);
            if let Some(w) = self.driver.take() {
                w.wake();
            }
        }
    }

    /// Wakes the requests waiting to open a stream (or for the handshake).
    pub fn wake_waiting(&mut self) {
        for w in self.waiting.drain(..) {
            w.wake();
        }
    }

    /// Fails the connection and every stream it carries.
    fn fail(&mut self, failure: Failure) {
        self.failed.get_or_insert(failure);
        for (_, link) in self.streams.drain() {
            link.borrow_mut().fail(failure);
        }
        self.wake_waiting();
    }

    /// Whether a new stream may open now, or will once others end.
    pub fn usable(&self) -> bool {
        self.failed.is_none() && !self.codec.is_closed() && self.codec.going_away().is_none()
    }
}

/// A connection: shared by the pool, its streams and its driving task.
pub(super) struct Conn {
    pub inner: RefCell<Inner>,
    /// The task ended.
    pub closed: Cell<bool>,
    /// Streams handed out and not yet ended.
    pub streams: Cell<usize>,
    /// When the last stream ended.
    pub idle_since: Cell<Instant>,
}

impl Conn {
    pub fn new(codec: Client) -> Rc<Conn> {
        Rc::new(Conn {
            inner: RefCell::new(Inner {
                codec,
                streams: StreamMap::default(),
                failed: None,
                driver: None,
                waiting: Vec::new(),
                spare: Vec::new(),
                due: None,
            }),
            closed: Cell::new(false),
            streams: Cell::new(0),
            idle_since: Cell::new(Instant::now()),
        })
    }

    /// Wakes the task (a holder went: it may be the last).
    pub fn nudge(&self) {
        if let Ok(mut inner) = self.inner.try_borrow_mut() {
            if let Some(w) = inner.driver.take() {
                w.wake();
            }
        }
    }

    /// Waits for the server's SETTINGS (its half of the handshake); false
    /// when the connection failed first.
    pub async fn handshaken(&self) -> bool {
        poll_fn(|cx| {
            let mut inner = self.inner.borrow_mut();
            if inner.codec.handshaken() {
                return Poll::Ready(true);
            }
            if inner.failed.is_some() {
                return Poll::Ready(false);
            }
            inner.waiting.push(cx.waker().clone());
            Poll::Pending
        })
        .await
    }
}

/// Drives `conn` over `io` until it fails or nothing else holds it.
pub(super) async fn drive(conn: Rc<Conn>, mut io: ServerStream, server: SocketAddr) {
    let mut buf = vec![0u8; READ_BUF];
    let mut filled = 0;
    let mut flushed = true;
    // One timer for every stream's response deadline, set for the earliest.
    let mut timer = Box::pin(tokio::time::sleep_until(tokio::time::Instant::now()));
    let mut armed = None;
    let result = poll_fn(|cx| loop {
        let mut progress = false;
        match write_out(&conn, &mut io, cx, &mut flushed) {
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Ready(Ok(wrote)) => progress |= wrote,
            Poll::Pending => {}
        }
        let mut rb = ReadBuf::new(&mut buf[filled..]);
        match Pin::new(&mut io).poll_read(cx, &mut rb) {
            Poll::Ready(Ok(())) if rb.filled().is_empty() => return Poll::Ready(Err(Ended::Eof)),
            Poll::Ready(Ok(())) => {
                filled += rb.filled().len();
                let used = feed(&conn, &buf[..filled]).map_err(Ended::Protocol);
                let used = match used {
                    Ok(used) => used,
                    Err(e) => return Poll::Ready(Err(e)),
                };
                buf.copy_within(used..filled, 0);
                filled -= used;
                progress = true;
            }
            Poll::Ready(Err(e)) => return Poll::Ready(Err(Ended::Io(e))),
            Poll::Pending => {}
        }
        let due = conn.inner.borrow().due;
        if let Some(due) = due {
            if armed != Some(due) {
                timer.as_mut().reset(due);
                armed = Some(due);
            }
            if timer.as_mut().poll(cx).is_ready() {
                armed = None;
                expire(&conn);
                progress = true;
            }
        }
        let mut inner = conn.inner.borrow_mut();
        if Rc::strong_count(&conn) == 1 && inner.codec.output().is_empty() && flushed {
            if inner.codec.is_closed() {
                return Poll::Ready(Ok(()));
            }
            // Nothing else holds the connection: a graceful end.
            inner.codec.go_away(code::NO_ERROR);
            continue;
        }
        if !progress {
            inner.driver = Some(cx.waker().clone());
            return Poll::Pending;
        }
    })
    .await;
    let why = match result {
        Ok(()) => {
            tracing::debug!(server = %server, "HTTP/2 connection to server no longer used: closed");
            "HTTP/2 connection closed"
        }
        Err(Ended::Eof) if conn.inner.borrow().codec.going_away().is_some() => {
            tracing::debug!(server = %server, "server closed its HTTP/2 connection (GOAWAY)");
            "server went away (HTTP/2 GOAWAY)"
        }
        Err(Ended::Eof) => {
            tracing::warn!(server = %server, error = "connection closed", "HTTP/2 connection to server failed");
            "server closed the HTTP/2 connection"
        }
        Err(Ended::Io(e)) => {
            tracing::warn!(server = %server, error = %e, "HTTP/2 connection to server failed");
            "server closed the HTTP/2 connection"
        }
        Err(Ended::Protocol(reason)) => {
            tracing::warn!(server = %server, error = reason, "HTTP/2 connection to server failed");
            "invalid HTTP/2 from server"
        }
    };
    conn.inner.borrow_mut().fail(Failure { why, reset: None, unprocessed: false });
    conn.closed.set(true);
    // Our GOAWAY, if any, goes out as far as the socket takes it at once.
    let _ = poll_fn(|cx| Poll::Ready(write_out(&conn, &mut io, cx, &mut flushed))).await;
}

/// The timer went off: streams whose response head is overdue time out
/// (their pipelines answer 504 and reset them); the timer is set again for
/// the earliest deadline left. The streams' deadlines are looked at only
/// then (one scan per earliest deadline, not a timer per request).
fn expire(conn: &Conn) {
    let now = tokio::time::Instant::now();
    let mut inner = conn.inner.borrow_mut();
    let mut next: Option<tokio::time::Instant> = None;
    for link in inner.streams.values() {
        let mut s = link.borrow_mut();
        let Some(by) = s.head_by else { continue };
        if s.phase != Phase::Waiting || !s.heads.is_empty() || s.timed_out || s.failure.is_some() {
            continue;
        }
        if by <= now {
            s.timed_out = true;
            s.wake();
        } else {
            next = Some(next.map_or(by, |n| n.min(by)));
        }
    }
    inner.due = next;
}

/// How the connection ended badly.
enum Ended {
    Eof,
    Io(io::Error),
    Protocol(&'static str),
}

/// Writes what the codec queued; `Ok(true)` when bytes went out.
fn write_out(
    conn: &Conn,
    io: &mut ServerStream,
    cx: &mut Context<'_>,
    flushed: &mut bool,
) -> Poll<Result<bool, Ended>> {
    let mut wrote = false;
    loop {
        let mut inner = conn.inner.borrow_mut();
        if inner.codec.output_len() == 0 {
            break;
        }
        let mut slices = [IoSlice::new(&[]); WRITE_SLICES];
        let n = inner.codec.output_vectored(&mut slices);
        let polled = Pin::new(&mut *io).poll_write_vectored(cx, &slices[..n]);
        match polled {
            Poll::Ready(Ok(0)) => return Poll::Ready(Err(Ended::Eof)),
            Poll::Ready(Ok(n)) => {
                inner.codec.written(n);
                wrote = true;
                *flushed = false;
            }
            Poll::Ready(Err(e)) => return Poll::Ready(Err(Ended::Io(e))),
            Poll::Pending => return if wrote { Poll::Ready(Ok(true)) } else { Poll::Pending },
        }
    }
    if !*flushed {
        // TLS buffers records: flushed once the codec's output is all taken.
        match Pin::new(&mut *io).poll_flush(cx) {
            Poll::Ready(Ok(())) => *flushed = true,
            Poll::Ready(Err(e)) => return Poll::Ready(Err(Ended::Io(e))),
            Poll::Pending => {}
        }
    }
    Poll::Ready(Ok(wrote))
}

/// Feeds the server's bytes to the codec and its events to the streams;
/// returns the bytes used.
fn feed(conn: &Conn, input: &[u8]) -> Result<usize, &'static str> {
    let mut inner = conn.inner.borrow_mut();
    let Inner { codec, streams, .. } = &mut *inner;
    let mut released = Vec::new();
    let used = codec.recv(input, &mut |event| on_event(streams, event, &mut released));
    for (id, n) in released {
        codec.release(id, n);
    }
    if codec.take_window_opened() {
        // Windows grew or streams ended: writers and openers may go on.
        for link in streams.values() {
            if let Some(w) = link.borrow_mut().writer.take() {
                w.wake();
            }
        }
        inner.wake_waiting();
    }
    match used {
        Ok(used) => {
            if inner.codec.handshaken() {
                inner.wake_waiting();
            }
            Ok(used)
        }
        Err(e) => Err(e.reason),
    }
}

/// One codec event into the stream it concerns (streams stay in the map
/// until their request drops them). Body bytes no one reads (a bodiless
/// response's, a stream's already dropped) are handed back in `released`.
fn on_event(streams: &mut StreamMap<Link>, event: Event<'_>, released: &mut Vec<(u32, usize)>) {
    match event {
        Event::Interim { stream, response } => {
            if let Some(link) = streams.get(&stream) {
                let mut s = link.borrow_mut();
                push_head(&mut s, response, Framing::Empty, None);
                s.wake();
            }
        }
        Event::Response { stream, response, end_stream } => {
            let Some(link) = streams.get(&stream) else { return };
            let mut s = link.borrow_mut();
            s.body = switchyard_http::parse::response_has_body(s.head_request, response.status);
            // The framing the body reaches the pipeline in, and the field
            // that says so to an HTTP/1.1 client, where the server gave no length.
            let (framing, added) = match (s.body, end_stream, response.content_length) {
                (_, _, Some(n)) => (Framing::Length(n), None),
                (true, false, None) => (Framing::Chunked, Some((&b"transfer-encoding"[..], &b"chunked"[..]))),
                (true, true, None) => (Framing::Length(0), Some((&b"content-length"[..], &b"0"[..]))),
                (false, _, None) => (Framing::Empty, None),
            };
            s.chunked = framing == Framing::Chunked;
            push_head(&mut s, response, framing, added);
            s.phase = if end_stream { Phase::Done } else { Phase::Body };
            s.wake();
        }
        Event::Data { stream, data, end_stream } => {
            let Some(link) = streams.get(&stream) else {
                released.push((stream, data.len()));
                return;
            };
            let mut s = link.borrow_mut();
            if !s.body || data.is_empty() {
                released.push((stream, data.len()));
            } else {
                s.inbound.extend_from_slice(data);
                s.held += data.len();
            }
            if end_stream {
                s.phase = Phase::Done;
            }
            s.wake();
        }
        Event::Trailers { stream, buf, fields } => {
            let Some(link) = streams.get(&stream) else { return };
            let mut s = link.borrow_mut();
            let mut trailers = Box::<Trailers>::default();
            for f in fields {
                if let (Some(name), Some(value)) = (buf.get(f.name.clone()), buf.get(f.value.clone())) {
                    trailers.push(name, value);
                }
            }
            s.trailers = Some(trailers);
            s.phase = Phase::Done;
            s.wake();
        }
        Event::Reset { stream, code, by_peer } => {
            let Some(link) = streams.get(&stream) else { return };
            let why = match (by_peer, code) {
                (true, self::code::REFUSED_STREAM) => "server refused the HTTP/2 stream",
                (true, _) => "server reset the HTTP/2 stream",
                (false, _) => "invalid HTTP/2 from server",
            };
            let refused = by_peer && code == self::code::REFUSED_STREAM;
            link.borrow_mut().fail(Failure { why, reset: by_peer.then_some(code), unprocessed: refused });
        }
        Event::GoAway { last_stream, code } => {
            tracing::debug!(last_stream, code, "server sent GOAWAY");
        }
        Event::Unprocessed { stream } => {
            // Not processed (RFC 9113 6.8): safe to send again.
            if let Some(link) = streams.get(&stream) {
                let why = "server went away (HTTP/2 GOAWAY)";
                link.borrow_mut().fail(Failure { why, reset: None, unprocessed: true });
            }
        }
    }
}

/// Queues a decoded response head for the pipeline ([`super::Rd::poll_head`]):
/// its names and values appended to `inbound`, their ranges to
/// `head_fields`, `added` after the server's fields.
fn push_head(s: &mut StreamState, response: &Response, framing: Framing, added: Option<(&[u8], &[u8])>) {
    // One allocation for the head and, when the server gave a small length,
    // the body too: growing field by field reallocates (and copies) each time.
    let (mut size, mut count) = (0, 0);
    for (name, value) in response.iter().chain(added) {
        size += name.len() + value.len();
        count += 1;
    }
    let body = match framing {
        Framing::Length(n) => usize::try_from(n).unwrap_or(usize::MAX).min(BODY_HINT),
        _ => 0,
    };
    s.inbound.reserve(size + body);
    s.head_fields.reserve(count);
    let start = s.inbound.len();
    let mut fields = 0;
    for (name, value) in response.iter().chain(added) {
        let at = s.inbound.len() - start;
        s.inbound.extend_from_slice(name);
        let mid = s.inbound.len() - start;
        s.inbound.extend_from_slice(value);
        s.head_fields.push(Field { name: at..mid, value: mid..s.inbound.len() - start });
        fields += 1;
    }
    let len = s.inbound.len() - start;
    s.heads.push(HeadMark { len, status: response.status, framing, fields });
}

/// The most body room a response head reserves for, from its length: a
/// small body then lands in the allocation its head made.
const BODY_HINT: usize = 16 * 1024;
