//! The `h3` crate's QUIC traits ([`h3::quic`]) implemented over quinn, with
//! a look at what passes: the seam where HTTP/3's abuse defences and early
//! data see what `h3` keeps to itself.
//!
//! `h3` reads the client's control stream and its other unidirectional
//! streams on its own, ignores unknown frames and stream types, and answers
//! none of it to the application; `h3-quinn` (the usual glue) hides quinn's
//! streams. This module is the glue instead ([`Conn`], [`Bidi`], [`SendSide`],
//! [`RecvSide`]), and on the way:
//!
//! - every unidirectional stream the client opens, and every frame on its
//!   control stream (after the stream type, each frame header is followed,
//!   its payload skipped: [`Frames`]), is counted in one [`Tally`]; beyond
//!   `http3.max_control_frames` within [`WINDOW`] the connection is closed
//!   with `H3_EXCESSIVE_LOAD` and [`Watch::tripped`] says why. quinn's
//!   `max_concurrent_uni_streams` bounds such streams *at once*, not how
//!   many are opened and closed in turn, and nothing bounds unknown or
//!   reserved frames on the control stream (RFC 9114 9 says to ignore them);
//! - each request stream's facts ([`Facts`]: opened in 0-RTT, and the
//!   client's STOP_SENDING as a future) are kept by stream ID until its
//!   stream task takes them ([`Watch::take`]), or the stream is dropped.
//!
//! Invariants: bytes pass unchanged and in order; the frame follower keeps a
//! few bytes of state whatever the client sends; no peer input panics.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use h3::quic::{ConnectionErrorIncoming, StreamErrorIncoming, StreamId, WriteBuf};
use quinn::VarInt;
use tokio::time::Instant;

use crate::http2::flood::WINDOW;
use crate::http2::Tally;

/// `H3_EXCESSIVE_LOAD` (RFC 9114 8.1).
pub(super) const EXCESSIVE_LOAD: u32 = 0x107;
/// The control stream's type (RFC 9114 6.2.1).
const CONTROL: u64 = 0x0;

/// Resolves to the client's STOP_SENDING code, or never.
pub(super) type Stopped = Pin<Box<dyn Future<Output = u64>>>;

/// What is known of a request stream from QUIC alone.
pub(super) struct Facts {
    /// The stream was opened in 0-RTT packets (TLS early data).
    pub(super) early: bool,
    /// The client's STOP_SENDING on the response side.
    pub(super) stopped: Stopped,
}

/// What one connection's streams report to the connection.
pub(super) struct Watch {
    conn: quinn::Connection,
    control: Tally,
    tripped: Cell<Option<&'static str>>,
    streams: RefCell<HashMap<u64, Facts>>,
}

impl Watch {
    /// A watch over `conn`, tolerating `max_control` control frames and
    /// unidirectional streams per [`WINDOW`].
    pub(super) fn new(conn: quinn::Connection, max_control: u32) -> Rc<Watch> {
        Rc::new(Watch {
            conn,
            control: Tally::new(max_control, Instant::now()),
            tripped: Cell::new(None),
            streams: RefCell::new(HashMap::new()),
        })
    }

    /// Why a defence closed the connection, once one did.
    pub(super) fn tripped(&self) -> Option<&'static str> {
        self.tripped.get()
    }

    /// The facts of request stream `id` (once: the stream task owns them).
    pub(super) fn take(&self, id: StreamId) -> Option<Facts> {
        self.streams.borrow_mut().remove(&id.into_inner())
    }

    /// Counts a control event; past the limit the connection is closed.
    fn count(&self, reason: &'static str) -> bool {
        if self.tripped.get().is_some() {
            return true;
        }
        if !self.control.record(Instant::now(), WINDOW) {
            return false;
        }
        self.tripped.set(Some(reason));
        self.conn.close(VarInt::from_u32(EXCESSIVE_LOAD), reason.as_bytes());
        true
    }
}

/// The error `h3` sees once a defence closed the connection.
fn closed_by_defence() -> ConnectionErrorIncoming {
    ConnectionErrorIncoming::ApplicationClose { error_code: EXCESSIVE_LOAD.into() }
}

type Accepting<T> = Pin<Box<dyn Future<Output = Result<T, quinn::ConnectionError>>>>;

/// One QUIC connection as `h3` uses it.
pub(super) struct Conn {
    conn: quinn::Connection,
    watch: Rc<Watch>,
    accept_bi: Option<Accepting<(quinn::SendStream, quinn::RecvStream)>>,
    accept_uni: Option<Accepting<quinn::RecvStream>>,
    opener: Opener,
}

impl Conn {
    pub(super) fn new(conn: quinn::Connection, watch: Rc<Watch>) -> Conn {
        Conn { opener: Opener::new(conn.clone()), conn, watch, accept_bi: None, accept_uni: None }
    }
}

impl h3::quic::Connection<Bytes> for Conn {
    type RecvStream = RecvSide;
    type OpenStreams = Opener;

    fn poll_accept_recv(&mut self, cx: &mut Context<'_>) -> Poll<Result<RecvSide, ConnectionErrorIncoming>> {
        let conn = self.conn.clone();
        let accepting = self.accept_uni.get_or_insert_with(|| Box::pin(async move { conn.accept_uni().await }));
        let accepted = ready!(accepting.as_mut().poll(cx));
        self.accept_uni = None;
        let stream = accepted.map_err(connection_error)?;
        if self.watch.count("uni-stream-flood") {
            return Poll::Ready(Err(closed_by_defence()));
        }
        Poll::Ready(Ok(RecvSide::new(stream, Some(self.watch.clone()))))
    }

    fn poll_accept_bidi(&mut self, cx: &mut Context<'_>) -> Poll<Result<Bidi, ConnectionErrorIncoming>> {
        let conn = self.conn.clone();
        let accepting = self.accept_bi.get_or_insert_with(|| Box::pin(async move { conn.accept_bi().await }));
        let accepted = ready!(accepting.as_mut().poll(cx));
        self.accept_bi = None;
        let (send, recv) = accepted.map_err(connection_error)?;
        let id = u64::from(send.id());
        let stopped = send.stopped();
        let stopped: Stopped = Box::pin(async move {
            match stopped.await {
                Ok(Some(code)) => code.into_inner(),
                // Finished and acknowledged, reset by us, or the connection
                // is gone: the connection's own end covers those.
                _ => std::future::pending().await,
            }
        });
        let facts = Facts { early: recv.is_0rtt(), stopped };
        self.watch.streams.borrow_mut().insert(id, facts);
        let send = SendSide { stream: send, writing: None, registered: Some(self.watch.clone()) };
        Poll::Ready(Ok(Bidi { send, recv: RecvSide::new(recv, None) }))
    }

    fn opener(&self) -> Opener {
        Opener::new(self.conn.clone())
    }
}

impl h3::quic::OpenStreams<Bytes> for Conn {
    type BidiStream = Bidi;
    type SendStream = SendSide;

    fn poll_open_bidi(&mut self, cx: &mut Context<'_>) -> Poll<Result<Bidi, StreamErrorIncoming>> {
        self.opener.poll_open_bidi(cx)
    }

    fn poll_open_send(&mut self, cx: &mut Context<'_>) -> Poll<Result<SendSide, StreamErrorIncoming>> {
        self.opener.poll_open_send(cx)
    }

    fn close(&mut self, code: h3::error::Code, reason: &[u8]) {
        self.opener.close(code, reason);
    }
}

/// Opens the server's own streams (control, QPACK).
pub(super) struct Opener {
    conn: quinn::Connection,
    open_bi: Option<Accepting<(quinn::SendStream, quinn::RecvStream)>>,
    open_uni: Option<Accepting<quinn::SendStream>>,
}

impl Opener {
    fn new(conn: quinn::Connection) -> Opener {
        Opener { conn, open_bi: None, open_uni: None }
    }
}

impl h3::quic::OpenStreams<Bytes> for Opener {
    type BidiStream = Bidi;
    type SendStream = SendSide;

    fn poll_open_bidi(&mut self, cx: &mut Context<'_>) -> Poll<Result<Bidi, StreamErrorIncoming>> {
        let conn = self.conn.clone();
        let opening = self.open_bi.get_or_insert_with(|| Box::pin(async move { conn.open_bi().await }));
        let opened = ready!(opening.as_mut().poll(cx));
        self.open_bi = None;
        let (send, recv) = opened.map_err(|e| stream_error_of(connection_error(e)))?;
        Poll::Ready(Ok(Bidi { send: SendSide::new(send), recv: RecvSide::new(recv, None) }))
    }

    fn poll_open_send(&mut self, cx: &mut Context<'_>) -> Poll<Result<SendSide, StreamErrorIncoming>> {
        let conn = self.conn.clone();
        let opening = self.open_uni.get_or_insert_with(|| Box::pin(async move { conn.open_uni().await }));
        let opened = ready!(opening.as_mut().poll(cx));
        self.open_uni = None;
        let send = opened.map_err(|e| stream_error_of(connection_error(e)))?;
        Poll::Ready(Ok(SendSide::new(send)))
    }

    fn close(&mut self, code: h3::error::Code, reason: &[u8]) {
        self.conn.close(VarInt::from_u64(code.value()).unwrap_or(VarInt::MAX), reason);
    }
}

/// A bidirectional (request) stream.
pub(super) struct Bidi {
    send: SendSide,
    recv: RecvSide,
}

impl h3::quic::BidiStream<Bytes> for Bidi {
    type SendStream = SendSide;
    type RecvStream = RecvSide;

    fn split(self) -> (SendSide, RecvSide) {
        (self.send, self.recv)
    }
}

impl h3::quic::RecvStream for Bidi {
    type Buf = Bytes;

    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, StreamErrorIncoming>> {
        self.recv.poll_data(cx)
    }

    fn stop_sending(&mut self, error_code: u64) {
        self.recv.stop_sending(error_code);
    }

    fn recv_id(&self) -> StreamId {
        self.recv.recv_id()
    }
}

impl h3::quic::SendStream<Bytes> for Bidi {
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        self.send.poll_ready(cx)
    }

    fn send_data<T: Into<WriteBuf<Bytes>>>(&mut self, data: T) -> Result<(), StreamErrorIncoming> {
        self.send.send_data(data)
    }

    fn poll_finish(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        self.send.poll_finish(cx)
    }

    fn reset(&mut self, reset_code: u64) {
        self.send.reset(reset_code);
    }

    fn send_id(&self) -> StreamId {
        self.send.send_id()
    }
}

/// A receive side; the client's unidirectional streams carry a frame
/// follower ([`Frames`]) and the watch they report to.
pub(crate) struct RecvSide {
    /// The stream, while no read is in flight.
    stream: Option<quinn::RecvStream>,
    id: u64,
    reading: Option<Reading>,
    control: Option<(Frames, Rc<Watch>)>,
}

type Reading = Pin<Box<dyn Future<Output = (quinn::RecvStream, Result<Option<quinn::Chunk>, quinn::ReadError>)>>>;

impl RecvSide {
    fn new(stream: quinn::RecvStream, watch: Option<Rc<Watch>>) -> RecvSide {
        let id = u64::from(stream.id());
        RecvSide { stream: Some(stream), id, reading: None, control: watch.map(|w| (Frames::default(), w)) }
    }
}

impl h3::quic::RecvStream for RecvSide {
    type Buf = Bytes;

    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, StreamErrorIncoming>> {
        if let Some(mut stream) = self.stream.take() {
            self.reading = Some(Box::pin(async move {
                let chunk = stream.read_chunk(usize::MAX, true).await;
                (stream, chunk)
            }));
        }
        let Some(reading) = self.reading.as_mut() else {
            return Poll::Ready(Err(StreamErrorIncoming::Unknown("stream already closed".into())));
        };
        let (stream, chunk) = ready!(reading.as_mut().poll(cx));
        self.reading = None;
        self.stream = Some(stream);
        let data = chunk.map_err(read_error)?.map(|c| c.bytes);
        if let (Some(bytes), Some((frames, watch))) = (data.as_ref(), self.control.as_mut()) {
            let mut flood = false;
            frames.feed(bytes, || flood |= watch.count("control-frame-flood"));
            if flood {
                return Poll::Ready(Err(StreamErrorIncoming::ConnectionErrorIncoming {
                    connection_error: closed_by_defence(),
                }));
            }
        }
        Poll::Ready(Ok(data))
    }

    fn stop_sending(&mut self, error_code: u64) {
        if let Some(stream) = self.stream.as_mut() {
            let _ = stream.stop(VarInt::from_u64(error_code).unwrap_or(VarInt::MAX));
        }
    }

    fn recv_id(&self) -> StreamId {
        stream_id(self.id)
    }
}

/// A send side.
pub(crate) struct SendSide {
    stream: quinn::SendStream,
    writing: Option<WriteBuf<Bytes>>,
    /// The watch holding this request stream's facts, dropped with it.
    registered: Option<Rc<Watch>>,
}

impl SendSide {
    fn new(stream: quinn::SendStream) -> SendSide {
        SendSide { stream, writing: None, registered: None }
    }
}

impl Drop for SendSide {
    fn drop(&mut self) {
        if let Some(watch) = self.registered.take() {
            watch.streams.borrow_mut().remove(&u64::from(self.stream.id()));
        }
    }
}

impl h3::quic::SendStream<Bytes> for SendSide {
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        if let Some(data) = self.writing.as_mut() {
            while data.has_remaining() {
                let written = ready!(Pin::new(&mut self.stream).poll_write(cx, data.chunk())).map_err(write_error)?;
                data.advance(written);
            }
        }
        self.writing = None;
        Poll::Ready(Ok(()))
    }

    fn send_data<T: Into<WriteBuf<Bytes>>>(&mut self, data: T) -> Result<(), StreamErrorIncoming> {
        if self.writing.is_some() {
            return Err(StreamErrorIncoming::Unknown("a write is already in progress".into()));
        }
        self.writing = Some(data.into());
        Ok(())
    }

    fn poll_finish(&mut self, _: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        Poll::Ready(self.stream.finish().map_err(|e| StreamErrorIncoming::Unknown(Box::new(e))))
    }

    fn reset(&mut self, reset_code: u64) {
        let _ = self.stream.reset(VarInt::from_u64(reset_code).unwrap_or(VarInt::MAX));
    }

    fn send_id(&self) -> StreamId {
        stream_id(u64::from(self.stream.id()))
    }
}

/// `h3`'s form of a quinn stream ID (quinn's are below 2^62, as `h3`'s must be).
fn stream_id(id: u64) -> StreamId {
    StreamId::try_from(id).unwrap_or_else(|_| StreamId::try_from(0).expect("0 is a stream ID"))
}

fn connection_error(e: quinn::ConnectionError) -> ConnectionErrorIncoming {
    match e {
        quinn::ConnectionError::ApplicationClosed(close) => {
            ConnectionErrorIncoming::ApplicationClose { error_code: close.error_code.into_inner() }
        }
        quinn::ConnectionError::TimedOut => ConnectionErrorIncoming::Timeout,
        other => ConnectionErrorIncoming::Undefined(std::sync::Arc::new(other)),
    }
}

fn stream_error_of(connection_error: ConnectionErrorIncoming) -> StreamErrorIncoming {
    StreamErrorIncoming::ConnectionErrorIncoming { connection_error }
}

fn read_error(e: quinn::ReadError) -> StreamErrorIncoming {
    match e {
        quinn::ReadError::Reset(code) => StreamErrorIncoming::StreamTerminated { error_code: code.into_inner() },
        quinn::ReadError::ConnectionLost(e) => stream_error_of(connection_error(e)),
        other => StreamErrorIncoming::Unknown(Box::new(other)),
    }
}

fn write_error(e: quinn::WriteError) -> StreamErrorIncoming {
    match e {
        quinn::WriteError::Stopped(code) => StreamErrorIncoming::StreamTerminated { error_code: code.into_inner() },
        quinn::WriteError::ConnectionLost(e) => stream_error_of(connection_error(e)),
        other => StreamErrorIncoming::Unknown(Box::new(other)),
    }
}

/// A QUIC variable-length integer being read (RFC 9000 16).
#[derive(Debug, Default, Clone, Copy)]
struct VarIntRead {
    value: u64,
    /// Bytes still to read; 0 before the first byte.
    left: u8,
    started: bool,
}

impl VarIntRead {
    /// Takes one byte; the value once complete.
    fn push(&mut self, byte: u8) -> Option<u64> {
        if !self.started {
            self.started = true;
            self.left = (1u8 << (byte >> 6)) - 1;
            self.value = u64::from(byte & 0x3f);
        } else {
            self.value = (self.value << 8) | u64::from(byte);
            self.left -= 1;
        }
        if self.left > 0 {
            return None;
        }
        let value = self.value;
        *self = VarIntRead::default();
        Some(value)
    }
}

/// Where [`Frames`] is in a unidirectional stream.
#[derive(Debug, Clone, Copy)]
enum At {
    StreamType,
    FrameType,
    FrameLength,
    /// Payload bytes still to pass.
    Payload(u64),
    /// Not a control stream: nothing more to follow.
    Other,
}

/// Follows the frame boundaries of a client's unidirectional stream: its
/// type, then, on the control stream only, each frame's type and length.
#[derive(Debug)]
pub(super) struct Frames {
    at: At,
    varint: VarIntRead,
}

impl Default for Frames {
    fn default() -> Self {
        Frames { at: At::StreamType, varint: VarIntRead::default() }
    }
}

impl Frames {
    /// Feeds the next bytes of the stream; `frame()` is called for each
    /// control-stream frame whose header they complete.
    pub(super) fn feed(&mut self, mut bytes: &[u8], mut frame: impl FnMut()) {
        while let Some((&byte, rest)) = bytes.split_first() {
            match self.at {
                At::Other => return,
                At::Payload(left) => {
                    let n = bytes.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    bytes = &bytes[n..];
                    let left = left - n as u64;
                    self.at = if left == 0 { At::FrameType } else { At::Payload(left) };
                    continue;
                }
                At::StreamType | At::FrameType | At::FrameLength => {}
            }
            bytes = rest;
            let Some(value) = self.varint.push(byte) else { continue };
            self.at = match self.at {
                At::StreamType if value == CONTROL => At::FrameType,
                At::StreamType => At::Other,
                At::FrameType => At::FrameLength,
                At::FrameLength => {
                    frame();
                    if value == 0 {
                        At::FrameType
                    } else {
                        At::Payload(value)
                    }
                }
                other => other,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A QUIC varint in its shortest form.
    fn varint(v: u64) -> Vec<u8> {
        match v {
            0..=63 => vec![v as u8],
            64..=16383 => ((v as u16) | 0x4000).to_be_bytes().to_vec(),
            16384..=1_073_741_823 => ((v as u32) | 0x8000_0000).to_be_bytes().to_vec(),
            _ => (v | 0xc000_0000_0000_0000).to_be_bytes().to_vec(),
        }
    }

    fn frame(kind: u64, payload: &[u8]) -> Vec<u8> {
        let mut f = varint(kind);
        f.extend(varint(payload.len() as u64));
        f.extend_from_slice(payload);
        f
    }

    fn count(bytes: &[u8], piece: usize) -> usize {
        let mut frames = Frames::default();
        let mut n = 0;
        for chunk in bytes.chunks(piece) {
            frames.feed(chunk, || n += 1);
        }
        n
    }

    #[test]
    fn control_frames_are_counted_however_the_bytes_are_split() {
        let mut stream = varint(CONTROL);
        stream.extend(frame(0x4, &[0x01, 0x40, 0x64, 0x06, 0x44, 0x00]));
        // A reserved frame type (0x1f * N + 0x21) with a long payload, an
        // empty GOAWAY-typed frame, and a PRIORITY_UPDATE (a 4-byte type).
        stream.extend(frame(0x1f * 7 + 0x21, &[0xab; 300]));
        stream.extend(frame(0x7, &[]));
        stream.extend(frame(0xf0700, &[0x00, 0x01]));
        for piece in [1, 2, 3, 5, 64, 1000] {
            assert_eq!(count(&stream, piece), 4, "pieces of {piece}");
        }
    }

    #[test]
    fn other_stream_types_are_not_followed() {
        let mut qpack = varint(0x2);
        qpack.extend(frame(0x4, &[0; 10]).repeat(5));
        assert_eq!(count(&qpack, 7), 0);
        let mut grease = varint(0x1f * 3 + 0x21);
        grease.extend([0u8; 100]);
        assert_eq!(count(&grease, 100), 0);
    }

    #[test]
    fn varints_of_every_length_read_back() {
        for v in [0, 63, 64, 16383, 16384, 1_073_741_823, 1_073_741_824, (1 << 62) - 1] {
            let mut r = VarIntRead::default();
            let bytes = varint(v);
            let (last, init) = bytes.split_last().expect("bytes");
            assert!(init.iter().all(|&b| r.push(b).is_none()));
            assert_eq!(r.push(*last), Some(v));
        }
    }
}
