//! One HTTP/2 stream served by the pipeline, inside its connection's task.
//!
//! The stream is the pipeline's client connection ([`H2Client`], a
//! [`ClientStream`]): its request head arrives decoded (the connection's
//! codec wrote it into the stream's scratch buffer as a `RequestHead` with
//! field ranges: no text, no re-parse), its DATA frames are read as the body
//! ([`Rd`], in chunked coding with the trailers as trailer section when the
//! length is unknown), and what the pipeline writes back — a response head,
//! then its body — goes out as HEADERS (1xx as informational HEADERS), DATA
//! frames and trailers ([`Out`]) through the codec, straight into the
//! connection's output. Every head (relayed, the proxy's own, a cache
//! hit's) comes as a header list from the pipeline's HTTP/2 head writer
//! ([`FieldList`], taken by [`Sink::send_fields`]): connection-specific
//! fields already left out, HPACK-encoded without a parse; bytes written
//! before the final head are an error. Every phase (route, persistence, cache, rewrite,
//! pick, forward, compress, log) is the pipeline's, unchanged; there is no
//! pipe and no task of its own.
//!
//! Resets: the stream's future watches its slot for the client's
//! RST_STREAM while the pipeline runs and drops the pipeline when it comes
//! (after noting the code in [`Resets::by_client`], which a server stream
//! the pipeline opened passes on). A response the pipeline could not finish
//! resets the stream: with the code it asked for ([`Resets::to_client`]: a
//! server's own, or REFUSED_STREAM before any response), else
//! INTERNAL_ERROR. Frames leave in the order they were queued, so a reset
//! never overtakes the DATA it follows.

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::Shared;
use crate::http::StreamContext;
use crate::translate::data::chunk;
use crate::transport::{Part, Resets, Sink, Source, StreamClient, Trailers};
use crate::worker::Scratch;
use switchyard_http::chunked::ChunkedScanner;
use switchyard_http::head_writer::FieldList;
use switchyard_http::http2::frame::code;
use switchyard_http::parse::{self, Framing, RequestHead};

/// How a stream ended, for the connection's rapid-reset defence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ended {
    /// The response went out whole.
    Done,
    /// The client reset the stream.
    PeerReset,
    /// The response could not be completed (the stream was reset).
    Failed,
}

/// What the connection keeps for a stream its pipeline reads and writes.
#[derive(Default)]
pub(super) struct Slot {
    /// Request body bytes received and not yet read.
    pub body: BytesMut,
    /// The client ended its side (END_STREAM, or trailers).
    pub end: bool,
    /// The request's trailers, once they came (boxed: most requests have none).
    pub trailers: Option<Box<Trailers>>,
    /// The stream was reset: the code, and whether by the client.
    pub reset: Option<(u32, bool)>,
    pub reader: Option<std::task::Waker>,
    pub writer: Option<std::task::Waker>,
    pub watcher: Option<std::task::Waker>,
}

impl Slot {
    /// Wakes whoever waits on the stream.
    pub fn wake(&mut self) {
        for w in [self.reader.take(), self.writer.take(), self.watcher.take()].into_iter().flatten() {
            w.wake();
        }
    }
}

/// Starts stream `id`, whose decoded request is in `scratch` (`head`): the
/// pipeline is made here and boxed where it is made (`http::serve_stream`),
/// so the scratch set and the head are moved once, into that box. The
/// stream's own future ([`serve`]), boxed into the connection's set of
/// streams, then holds the pipeline's box and the stream's shared state
/// only: a few dozen bytes written per stream, not the request's.
pub(super) fn start(id: u32, mut scratch: Scratch, head: RequestHead, conn: &Rc<Shared>) -> super::StreamFuture {
    let head_request = &scratch.buf[head.method.clone()] == b"HEAD";
    let chunked = head.framing == Framing::Chunked;
    scratch.head = Some(Box::new(head));
    let resets = Rc::new(Resets::default());
    let out = Rc::new(RefCell::new(Out { id, state: State::Head, head_request, conn: conn.clone() }));
    let client = H2Client {
        rd: Rd {
            id,
            conn: conn.clone(),
            chunked,
            pending: Bytes::new(),
            done: false,
            bytes: false,
            resets: resets.clone(),
        },
        wr: Wr { out: out.clone() },
        local: conn.local_addr,
        resets: resets.clone(),
    };
    let (local, service) = conn.current();
    let context = StreamContext {
        peer: conn.peer,
        local,
        service,
        worker: conn.worker.clone(),
        transport: conn.transport.clone(),
    };
    let pipeline = crate::http::serve_stream(client, scratch, context);
    Box::pin(serve(id, pipeline, out, resets, conn.clone()))
}

/// Serves stream `id` with its `pipeline` ([`start`]): watches for the
/// client's reset while the pipeline runs, then finishes the response.
async fn serve(
    id: u32,
    pipeline: Pin<Box<dyn std::future::Future<Output = ()>>>,
    out: Rc<RefCell<Out>>,
    resets: Rc<Resets>,
    conn: Rc<Shared>,
) -> Ended {
    let reset = std::future::poll_fn(|cx| watch(&conn, id, &resets, cx));
    let peer_reset = tokio::select! {
        biased;
        () = reset => true,
        () = pipeline => false,
    };
    let ended = if peer_reset {
        Ended::PeerReset
    } else {
        let finishing = std::future::poll_fn(|cx| out.borrow_mut().finish(&resets, cx));
        let reset = std::future::poll_fn(|cx| watch(&conn, id, &resets, cx));
        tokio::select! {
            biased;
            () = reset => Ended::PeerReset,
            ended = finishing => ended,
        }
    };
    conn.close_stream(id);
    ended
}

/// Ready once the client reset stream `id` (its code noted for the pipeline).
fn watch(conn: &Shared, id: u32, resets: &Resets, cx: &mut Context<'_>) -> Poll<()> {
    let mut wire = conn.wire.borrow_mut();
    match wire.slots.get_mut(&id) {
        Some(Slot { reset: Some((code, true)), .. }) => {
            resets.by_client.set(Some(*code));
            Poll::Ready(())
        }
        Some(slot) => {
            // Polled on every turn of the stream: the waker is the stream's
            // own each time, so it is kept rather than cloned again (each
            // clone and drop is an atomic operation).
            if !slot.watcher.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                slot.watcher = Some(cx.waker().clone());
            }
            Poll::Pending
        }
        None => Poll::Pending,
    }
}

/// The pipeline's client connection over one HTTP/2 stream.
pub(crate) type H2Client = StreamClient<Rd, Wr>;

/// The request body of the stream.
pub(crate) struct Rd {
    id: u32,
    conn: Rc<Shared>,
    /// The length is unknown: the body is read in chunked coding.
    chunked: bool,
    /// Bytes ready for the reader.
    pending: Bytes,
    done: bool,
    /// The body was read as bytes: it is not given as parts.
    bytes: bool,
    resets: Rc<Resets>,
}

/// The request body as bytes (towards a server read as HTTP/1.1 bytes: the
/// cache's refresh, or bytes of the body already read): each part in the
/// request's HTTP/1.1 framing, chunks and the trailers as the last chunk's
/// section when it has no length.
impl AsyncRead for Rd {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.bytes = true;
        loop {
            if !this.pending.is_empty() {
                let n = this.pending.len().min(buf.remaining());
                buf.put_slice(&this.pending[..n]);
                this.pending.advance(n);
                return Poll::Ready(Ok(()));
            }
            if this.done {
                return Poll::Ready(Ok(()));
            }
            let part = std::task::ready!(this.poll_part(cx))?;
            this.pending = this.as_bytes(part);
        }
    }
}

impl Rd {
    /// A part of the body in the request's HTTP/1.1 framing.
    fn as_bytes(&self, part: Part) -> Bytes {
        if !self.chunked {
            return match part {
                Part::Data(data, _) => data,
                Part::Trailers(_) | Part::End => Bytes::new(),
            };
        }
        let mut out = Vec::new();
        match part {
            Part::Data(data, false) => return if data.is_empty() { data } else { chunk(&data) },
            Part::Data(data, true) => {
                if !data.is_empty() {
                    out.extend_from_slice(&chunk(&data));
                }
                Trailers::default().last_chunk(&mut out);
            }
            Part::Trailers(trailers) => trailers.last_chunk(&mut out),
            Part::End => Trailers::default().last_chunk(&mut out),
        }
        out.into()
    }
}

/// The request body as parts, where the server's side takes them: the
/// payload received so far (with the end when the client ended the stream
/// without trailers), the trailers, or the end.
impl Source for Rd {
    fn gives_parts(&self) -> bool {
        !self.bytes && !self.done
    }

    fn poll_part(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Part>> {
        let mut wire = self.conn.wire.borrow_mut();
        let wire = &mut *wire;
        let Some(slot) = wire.slots.get_mut(&self.id) else {
            return Poll::Ready(Err(io::ErrorKind::ConnectionAborted.into()));
        };
        if let Some((code, by_peer)) = slot.reset {
            if by_peer {
                // As for a read: the stream's future ends the pipeline.
                self.resets.by_client.set(Some(code));
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, "stream error")));
        }
        if !slot.body.is_empty() {
            let data = slot.body.split().freeze();
            let end = slot.end && slot.trailers.is_none();
            wire.codec.release(self.id, data.len());
            self.done = end;
            return Poll::Ready(Ok(Part::Data(data, end)));
        }
        if slot.end {
            self.done = true;
            return Poll::Ready(Ok(slot.trailers.take().map_or(Part::End, |t| Part::Trailers(*t))));
        }
        slot.reader = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// The response side of the stream, shared with the stream's future (which
/// finishes it after the pipeline).
pub(crate) struct Wr {
    out: Rc<RefCell<Out>>,
}

/// The response as it goes out.
struct Out {
    id: u32,
    state: State,
    head_request: bool,
    conn: Rc<Shared>,
}

enum State {
    /// Waiting for the final response head (a header list).
    Head,
    /// Sending its body.
    Body(Body),
    /// Complete (or reset).
    Done,
}

/// A response body in HTTP/1.1 form, its framing removed, sent as DATA.
struct Body {
    /// Payload bytes still to come, for a body with a length.
    remaining: Option<u64>,
    /// The chunked coding being removed, for a chunked body.
    chunked: Option<ChunkedScanner>,
    /// Payload taken and not yet sent (the client's window was short): at
    /// most one write's.
    held: Vec<u8>,
    /// The same for a body taken as parts: the rest of a DATA part, shared
    /// with it rather than copied.
    shared: Bytes,
    /// The body is complete once `held` and `shared` are sent: END_STREAM
    /// then, or the trailers.
    complete: bool,
    /// The trailers to end with.
    trailers: Option<Trailers>,
    /// END_STREAM went out.
    ended: bool,
    /// Body bytes were written (HTTP/1.1 framing): the body is not taken as parts.
    bytes: bool,
}

impl Body {
    fn new(framing: Framing) -> Body {
        let remaining = match framing {
            Framing::Length(n) => Some(n),
            _ => None,
        };
        let chunked = (framing == Framing::Chunked).then(ChunkedScanner::collecting_trailers);
        let complete = remaining == Some(0);
        Body {
            remaining,
            chunked,
            held: Vec::new(),
            shared: Bytes::new(),
            complete,
            trailers: None,
            ended: false,
            bytes: false,
        }
    }

    /// Whether the body is delimited by the end of its connection.
    fn ends_with_close(&self) -> bool {
        self.remaining.is_none() && self.chunked.is_none()
    }

    /// Removes the framing from `data`; returns the bytes of `data` that
    /// belonged to the body.
    fn take(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.complete {
            return if data.is_empty() { Ok(0) } else { Err(invalid("bytes after the end of the response")) };
        }
        if let Some(scanner) = self.chunked.as_mut() {
            let held = &mut self.held;
            let consumed = scanner.scan_with(data, |run| held.extend_from_slice(&data[run])).map_err(invalid)?;
            if scanner.is_done() {
                self.complete = true;
                let mut trailers = Trailers::default();
                for (name, value) in scanner.trailers() {
                    trailers.push(name, value);
                }
                if !trailers.is_empty() {
                    self.trailers = Some(trailers);
                }
            }
            return Ok(consumed);
        }
        let n = self.count(data.len());
        self.held.extend_from_slice(&data[..n]);
        Ok(n)
    }

    /// For a body with a length or one that ends with the connection: how
    /// many of `len` bytes written belong to the body, counted as taken.
    fn count(&mut self, len: usize) -> usize {
        let n = match self.remaining.as_mut() {
            Some(left) => {
                let n = len.min(usize::try_from(*left).unwrap_or(usize::MAX));
                *left -= n as u64;
                n
            }
            None => len,
        };
        self.complete = self.remaining == Some(0);
        n
    }
}

impl Out {
    fn poll_write(&mut self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        match &mut self.state {
            State::Head if data.is_empty() => Poll::Ready(Ok(0)),
            // Every head comes as a header list ([`Out::send_fields`]).
            State::Head => Poll::Ready(Err(invalid("body bytes before the response head"))),
            State::Body(body) => {
                body.bytes |= !data.is_empty();
                match self.flush(cx) {
                    Poll::Ready(Ok(())) => {}
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => return Poll::Pending,
                }
                let State::Body(body) = &mut self.state else { return Poll::Ready(Ok(0)) };
                if body.chunked.is_none() && !body.complete {
                    return self.send_now(cx, data);
                }
                let n = body.take(data)?;
                // Sent as far as the window allows; the rest waits in `held`.
                if let Poll::Ready(Err(e)) = self.flush(cx) {
                    return Poll::Ready(Err(e));
                }
                Poll::Ready(Ok(n))
            }
            State::Done if data.is_empty() => Poll::Ready(Ok(0)),
            State::Done => Poll::Ready(Err(invalid("bytes after the end of the response"))),
        }
    }

    /// Sends a head the pipeline wrote as a header list: an interim one as
    /// it is, a final one with the body to follow.
    fn send_fields(&mut self, list: &FieldList) -> io::Result<()> {
        if !matches!(self.state, State::Head) {
            return Err(invalid("unexpected response head"));
        }
        let status = list.status();
        if (100..200).contains(&status) {
            // A 1xx never ends the stream (101 has no meaning in HTTP/2).
            if status == 101 {
                return Err(invalid("unexpected response head"));
            }
            self.conn.wire.borrow_mut().codec.send_head(self.id, status, list.pairs(), false);
            return Ok(());
        }
        let empty = send_final(&self.conn, self.id, self.head_request, status, list.framing(), list.pairs())?;
        self.state = if empty { State::Done } else { State::Body(Body::new(list.framing())) };
        Ok(())
    }

    /// Sends the payload bytes of `data` (a body with a length, or one
    /// ended by the connection; nothing held) straight into DATA frames as far
    /// as the windows allow, copying only the rest aside: a large body is
    /// copied once on its way to the connection's output, not twice.
    fn send_now(&mut self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let State::Body(body) = &mut self.state else { return Poll::Ready(Ok(0)) };
        let n = body.count(data.len());
        let end = body.complete;
        let sent = self.conn.wire.borrow_mut().codec.send_data(self.id, &data[..n], end);
        let Some(sent) = sent else {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        };
        if sent == n && end {
            body.ended = true;
            self.state = State::Done;
        } else if sent < n {
            body.held.extend_from_slice(&data[sent..n]);
            // Waits for the window (the waker noted), or sends what opened since.
            if let Poll::Ready(Err(e)) = self.flush(cx) {
                return Poll::Ready(Err(e));
            }
        }
        Poll::Ready(Ok(n))
    }

    /// Whether the body can be taken as parts: its head went out and none
    /// of it was written as bytes.
    fn takes_parts(&self) -> bool {
        matches!(&self.state, State::Body(body) if !body.bytes && !body.complete)
    }

    /// Takes a part of the body: payload straight into DATA frames as far
    /// as the windows allow (the rest held, sent before anything later),
    /// trailers, or the end. Waits first for what an earlier part left held.
    fn poll_send_part(&mut self, cx: &mut Context<'_>, part: &mut Part) -> Poll<io::Result<()>> {
        match self.flush(cx) {
            Poll::Ready(Ok(())) => {}
            other => return other,
        }
        let State::Body(body) = &mut self.state else {
            return Poll::Ready(Err(invalid("bytes after the end of the response")));
        };
        match part {
            Part::Data(data, end) => {
                // A large payload goes to the connection's output by
                // reference: the client's bytes are not copied on the way.
                let sent = self.conn.wire.borrow_mut().codec.send_shared(self.id, data, *end);
                let Some(sent) = sent else {
                    return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
                };
                body.complete = *end;
                if sent == data.len() && *end {
                    body.ended = true;
                    self.state = State::Done;
                    *data = Bytes::new();
                } else {
                    data.advance(sent);
                    body.shared = std::mem::take(data);
                }
            }
            Part::Trailers(trailers) => {
                body.complete = true;
                body.trailers = Some(std::mem::take(trailers));
            }
            Part::End => body.complete = true,
        }
        // Sent as far as the windows allow; what is held goes with the next
        // part, or when the stream's future finishes the response.
        match self.flush(cx) {
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            _ => Poll::Ready(Ok(())),
        }
    }

    /// Sends what the body holds as the windows allow, then its end once it
    /// is complete. Ready once nothing is held.
    fn flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let State::Body(body) = &mut self.state else { return Poll::Ready(Ok(())) };
        let mut wire = self.conn.wire.borrow_mut();
        let wire = &mut *wire;
        let end_now = body.complete && body.trailers.is_none();
        let pending = if !body.shared.is_empty() {
            // The rest of a part, still shared with it.
            let Some(n) = wire.codec.send_shared(self.id, &body.shared, end_now) else {
                return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
            };
            body.shared.advance(n);
            Some(!body.shared.is_empty())
        } else if !body.held.is_empty() || (end_now && !body.ended) {
            let Some(n) = wire.codec.send_data(self.id, &body.held, end_now) else {
                return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
            };
            body.held.drain(..n);
            Some(!body.held.is_empty())
        } else {
            None
        };
        match pending {
            // Waits for the client's window: the codec wakes the writer.
            Some(true) => {
                return match wire.slots.get_mut(&self.id) {
                    Some(slot) => {
                        slot.writer = Some(cx.waker().clone());
                        Poll::Pending
                    }
                    None => Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
                };
            }
            Some(false) => body.ended = end_now,
            None => {}
        }
        if body.complete && !body.ended {
            if let Some(trailers) = body.trailers.take() {
                if !wire.codec.send_trailers(self.id, trailers.pairs()) {
                    return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
                }
                body.ended = true;
            }
        }
        if body.ended {
            self.state = State::Done;
        }
        Poll::Ready(Ok(()))
    }

    /// After the pipeline: what is held goes out; a response it did not
    /// finish resets the stream.
    fn finish(&mut self, resets: &Resets, cx: &mut Context<'_>) -> Poll<Ended> {
        let reset_code = resets.to_client.get().unwrap_or(code::INTERNAL_ERROR);
        if let State::Body(body) = &mut self.state {
            if !body.complete && resets.to_client.get().is_none() && body.ends_with_close() {
                // A body delimited by the end of the server's connection.
                body.complete = true;
            }
            if body.complete {
                return match self.flush(cx) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(Ok(())) => Poll::Ready(Ended::Done),
                    Poll::Ready(Err(_)) => Poll::Ready(Ended::Failed),
                };
            }
        }
        match std::mem::replace(&mut self.state, State::Done) {
            State::Done => Poll::Ready(Ended::Done),
            State::Head | State::Body(_) => {
                self.conn.wire.borrow_mut().codec.send_reset(self.id, reset_code);
                Poll::Ready(Ended::Failed)
            }
        }
    }
}

/// Sends stream `id`'s final head (HEADERS, with END_STREAM when no body
/// follows); true when none does.
fn send_final<'f>(
    conn: &Shared,
    id: u32,
    head_request: bool,
    status: u16,
    framing: Framing,
    pairs: impl Iterator<Item = (&'f [u8], &'f [u8])>,
) -> io::Result<bool> {
    let framing = if parse::response_has_body(head_request, status) { framing } else { Framing::Empty };
    let empty = matches!(framing, Framing::Length(0) | Framing::Empty);
    if !conn.wire.borrow_mut().codec.send_head(id, status, pairs, empty) {
        return Err(io::ErrorKind::BrokenPipe.into());
    }
    Ok(empty)
}

fn invalid(why: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}

impl AsyncWrite for Wr {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        self.out.borrow_mut().poll_write(cx, data)
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A write that need not wait (a head, a body within the client's window)
/// is taken at once, which spares the relay arming a timer; one that would
/// wait answers `WouldBlock` and takes the relay's awaited path.
impl Sink for Wr {
    fn try_write_now(&self, data: &[u8]) -> io::Result<usize> {
        crate::transport::now(|cx| self.out.borrow_mut().poll_write(cx, data))
    }

    fn try_write_two_now(&self, a: &[u8], b: &[u8]) -> io::Result<usize> {
        crate::transport::write_two_now(self, a, b)
    }

    fn takes_fields(&self) -> bool {
        true
    }

    fn send_fields(&mut self, head: &FieldList) -> io::Result<()> {
        self.out.borrow_mut().send_fields(head)
    }

    fn takes_parts(&self) -> bool {
        self.out.borrow().takes_parts()
    }

    fn poll_send_part(&mut self, cx: &mut Context<'_>, part: &mut Part) -> Poll<io::Result<()>> {
        self.out.borrow_mut().poll_send_part(cx, part)
    }
}
