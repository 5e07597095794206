//! Message bodies between an HTTP/3 request stream and the HTTP/1.1 byte
//! form the pipeline relays, as poll functions run inside the connection's
//! task (no pipe, no task of their own) — the HTTP/3 counterpart of
//! [`crate::translate::data`].
//!
//! [`Inbound`] reads the request's DATA frames as parts (payload, trailers,
//! end) where the server's side frames bodies too, else as body bytes: as
//! they came when the request has a length, else in chunked coding with the
//! request's trailers as the trailer section. QUIC flow control is released
//! by quinn as the bytes are read, so a slow server slows the client down.
//!
//! [`Outbound`] sends what the pipeline writes. The `h3` crate's send side is
//! a set of `async fn`s that borrow the stream; each is run as one boxed
//! operation that owns the stream while it runs and hands it back when done
//! ([`Op`]). A write is taken once the previous operation finished, so at most
//! one write's payload waits beyond quinn's send buffer (the same bound as
//! HTTP/2's). An operation in flight can be cancelled, which returns the
//! stream so that it can be reset: dropping a quinn send stream would
//! otherwise finish it, and a response cut short would look complete.

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use h3::error::Code;
use tokio::io::ReadBuf;
use tokio::sync::Notify;

use crate::translate::data::{chunk, trailers_of_map};
use crate::transport::Part;

/// The send half of a request stream.
pub(crate) type SendHalf = h3::server::RequestStream<super::quic::SendSide, Bytes>;
/// The receive half of a request stream.
pub(crate) type RecvHalf = h3::server::RequestStream<super::quic::RecvSide, Bytes>;

/// An I/O error standing for an HTTP/3 stream error.
fn io_error(e: &h3::error::StreamError) -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionAborted, e.to_string())
}

/// The receive side of a request stream once its body reached its
/// `content-length`, handed by [`Inbound`] to the stream's future, which
/// watches it for DATA past the length (RFC 9114 4.1.2) while the pipeline
/// runs: the pipeline reads no further than the length.
pub(crate) type Tail = Rc<RefCell<Option<RecvHalf>>>;

/// Where [`Inbound`] is in the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum In {
    Data,
    Trailers,
    Done,
}

/// A request stream's body as HTTP/1.1 body bytes (see the module docs).
pub(crate) struct Inbound {
    recv: Option<RecvHalf>,
    chunked: bool,
    /// Bytes ready for the reader.
    pending: Bytes,
    /// `pending` holds the first payload as received, not yet chunked: it
    /// becomes a chunk when read as bytes, or the first part.
    first: bool,
    state: In,
    /// The body failed because the client reset the stream.
    reset_by_client: bool,
    /// The request's `content-length`, which its DATA must add up to.
    length: Option<u64>,
    /// Payload bytes received so far.
    received: u64,
    /// The DATA did not add up to `length` (RFC 9114 4.1.2: malformed).
    malformed: bool,
    /// Where the stream goes once `length` bytes came (with a length only).
    tail: Option<Tail>,
}

impl Inbound {
    /// The body of `recv`, in chunked coding when `chunked`; `first` is the
    /// payload already received (read before the head was written).
    pub(crate) fn chunked(recv: RecvHalf, first: Bytes) -> Self {
        Inbound { chunked: true, first: !first.is_empty(), pending: first, ..Inbound::reading(Some(recv)) }
    }

    /// The body of `recv`, of `length` bytes as the request said; once they
    /// came, `recv` goes to `tail`.
    pub(crate) fn with_length(recv: RecvHalf, length: u64, tail: Tail) -> Self {
        let mut inbound = Inbound { length: Some(length), tail: Some(tail), ..Inbound::reading(Some(recv)) };
        inbound.hand_over_at_length();
        inbound
    }

    /// A request without a body.
    pub(crate) fn empty() -> Self {
        Inbound { state: In::Done, ..Inbound::reading(None) }
    }

    /// Nothing received yet from `recv`, as it comes (no coding, no length).
    fn reading(recv: Option<RecvHalf>) -> Self {
        Inbound {
            recv,
            chunked: false,
            pending: Bytes::new(),
            first: false,
            state: In::Data,
            reset_by_client: false,
            length: None,
            received: 0,
            malformed: false,
            tail: None,
        }
    }

    /// Once the body has its length: the stream goes to the tail, and the
    /// body ends here. Returns whether it did.
    fn hand_over_at_length(&mut self) -> bool {
        if self.length != Some(self.received) {
            return false;
        }
        if let (Some(tail), Some(recv)) = (self.tail.take(), self.recv.take()) {
            *tail.borrow_mut() = Some(recv);
        }
        self.state = In::Done;
        true
    }

    /// Whether the body failed because the client reset the stream.
    pub(crate) fn reset_by_client(&self) -> bool {
        self.reset_by_client
    }

    /// Whether the body failed because its DATA did not add up to the
    /// request's `content-length`: a malformed request (RFC 9114 4.1.2).
    pub(crate) fn malformed(&self) -> bool {
        self.malformed
    }

    /// Counts `n` more payload bytes, or, at the end of the DATA (`end`),
    /// checks that they add up to the length; the error once they do not.
    /// Bytes past the length are refused before any of them is handed on.
    fn count(&mut self, n: usize, end: bool) -> io::Result<()> {
        self.received += n as u64;
        let Some(length) = self.length else { return Ok(()) };
        if self.received > length || (end && self.received != length) {
            self.malformed = true;
            self.state = In::Done;
            return Err(io::Error::new(io::ErrorKind::InvalidData, "DATA do not add up to the content-length"));
        }
        Ok(())
    }

    /// The error to report for `e`, noting a reset by the client.
    fn failed(&mut self, e: &h3::error::StreamError) -> io::Error {
        self.state = In::Done;
        self.reset_by_client = matches!(e, h3::error::StreamError::RemoteTerminate { .. });
        io_error(e)
    }

    /// Reads what is ready into `buf`; nothing added means the end of the body.
    pub(crate) fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if std::mem::take(&mut self.first) {
            self.pending = chunk(&self.pending);
        }
        loop {
            if !self.pending.is_empty() {
                let n = self.pending.len().min(buf.remaining());
                buf.put_slice(&self.pending[..n]);
                self.pending.advance(n);
                return Poll::Ready(Ok(()));
            }
            let Some(recv) = self.recv.as_mut() else {
                return Poll::Ready(Ok(()));
            };
            match self.state {
                In::Done => return Poll::Ready(Ok(())),
                In::Data => match recv.poll_recv_data(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(Some(mut data))) => {
                        let data = data.copy_to_bytes(data.remaining());
                        self.count(data.len(), false)?;
                        self.pending = if self.chunked && !data.is_empty() { chunk(&data) } else { data };
                        if self.hand_over_at_length() {
                            // The stream's future watches the tail from its next poll.
                            cx.waker().wake_by_ref();
                        }
                    }
                    Poll::Ready(Ok(None)) => {
                        self.count(0, true)?;
                        self.state = if self.chunked { In::Trailers } else { In::Done };
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(self.failed(&e))),
                },
                In::Trailers => match recv.poll_recv_trailers(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(trailers)) => {
                        let mut end = Vec::new();
                        trailers.as_ref().map(trailers_of_map).unwrap_or_default().last_chunk(&mut end);
                        self.pending = end.into();
                        self.state = In::Done;
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(self.failed(&e))),
                },
            }
        }
    }

    /// Whether the body can be read as parts: none of it was read as bytes
    /// and it has not ended.
    pub(crate) fn gives_parts(&self) -> bool {
        (self.first || self.pending.is_empty()) && self.state != In::Done
    }

    /// The body's next part: the payload of a DATA frame, the trailers, or
    /// the end (checked against the request's length, if it gave one).
    pub(crate) fn poll_part(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Part>> {
        if std::mem::take(&mut self.first) {
            return Poll::Ready(Ok(Part::Data(std::mem::take(&mut self.pending), false)));
        }
        loop {
            let Some(recv) = self.recv.as_mut() else {
                return Poll::Ready(Ok(Part::End));
            };
            match self.state {
                In::Done => return Poll::Ready(Ok(Part::End)),
                In::Data => match recv.poll_recv_data(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(Some(mut data))) => {
                        // Read to the stream's end, past a length too (no
                        // hand-over to the tail): trailers may follow, and
                        // DATA past the length is found malformed here.
                        let data = data.copy_to_bytes(data.remaining());
                        self.count(data.len(), false)?;
                        return Poll::Ready(Ok(Part::Data(data, false)));
                    }
                    Poll::Ready(Ok(None)) => {
                        self.count(0, true)?;
                        self.state = In::Trailers;
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(self.failed(&e))),
                },
                In::Trailers => {
                    return match recv.poll_recv_trailers(cx) {
                        Poll::Pending => Poll::Pending,
                        Poll::Ready(Ok(trailers)) => {
                            self.state = In::Done;
                            let trailers = trailers.as_ref().map(trailers_of_map).unwrap_or_default();
                            Poll::Ready(Ok(if trailers.is_empty() { Part::End } else { Part::Trailers(trailers) }))
                        }
                        Poll::Ready(Err(e)) => Poll::Ready(Err(self.failed(&e))),
                    }
                }
            }
        }
    }
}

/// What one send operation does, in this order.
#[derive(Default)]
pub(crate) struct Step {
    /// Interim (1xx) response heads, sent first.
    pub(crate) informational: Vec<http::Response<()>>,
    /// The response head.
    pub(crate) head: Option<http::Response<()>>,
    /// Body payload (one DATA frame).
    pub(crate) data: Bytes,
    /// Trailers, which end the message.
    pub(crate) trailers: Option<http::HeaderMap>,
    /// Finish the stream (the message is complete).
    pub(crate) end: bool,
}

/// A send operation in flight: it owns the stream and returns it.
type Op = Pin<Box<dyn Future<Output = (SendHalf, Result<(), String>)>>>;

/// The response side of a request stream (see the module docs).
pub(crate) struct Outbound {
    /// The stream, while no operation runs.
    idle: Option<SendHalf>,
    op: Option<Op>,
    /// Cancels the operation in flight.
    cancel: Rc<Notify>,
    /// The stream's failure, once an operation failed.
    error: Option<String>,
    /// The whole message went out (or the stream was reset).
    ended: bool,
}

impl Outbound {
    /// The response side of `send`.
    pub(crate) fn new(send: SendHalf) -> Self {
        Outbound { idle: Some(send), op: None, cancel: Rc::new(Notify::new()), error: None, ended: false }
    }

    /// Whether the whole message was sent (or the stream reset).
    pub(crate) fn is_ended(&self) -> bool {
        self.ended
    }

    /// Why sending failed, when it did.
    pub(crate) fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// Waits for the operation in flight to finish.
    pub(crate) fn poll_idle(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(op) = self.op.as_mut() {
            let (send, result) = std::task::ready!(op.as_mut().poll(cx));
            self.op = None;
            self.idle = Some(send);
            if let Err(e) = result {
                self.error = Some(e);
                self.ended = true;
            }
        }
        match &self.error {
            Some(e) => Poll::Ready(Err(io::Error::new(io::ErrorKind::ConnectionAborted, e.clone()))),
            None => Poll::Ready(Ok(())),
        }
    }

    /// Starts `step` (the stream must be idle: after [`Outbound::poll_idle`]
    /// answered ready) and runs it as far as it goes now.
    pub(crate) fn start(&mut self, step: Step, cx: &mut Context<'_>) -> io::Result<()> {
        let Some(send) = self.idle.take() else {
            return Err(io::Error::other("a send operation is already running"));
        };
        self.ended |= step.end;
        self.op = Some(Box::pin(run(send, step, self.cancel.clone())));
        match self.poll_idle(cx) {
            Poll::Ready(result) => result,
            Poll::Pending => Ok(()),
        }
    }

    /// Ends the stream with `code` unless the message went out whole: an
    /// operation in flight is cancelled first.
    pub(crate) async fn reset(&mut self, code: Code) {
        if self.op.is_some() {
            self.cancel.notify_one();
            let _ = std::future::poll_fn(|cx| self.poll_idle(cx)).await;
        }
        if let Some(send) = self.idle.as_mut() {
            if !self.ended || self.error.is_some() {
                send.stop_stream(code);
            }
        }
        self.ended = true;
    }

    /// Waits for what was started to be sent.
    pub(crate) async fn flush(&mut self) -> io::Result<()> {
        std::future::poll_fn(|cx| self.poll_idle(cx)).await
    }
}

/// Runs one step on `send`, unless cancelled.
async fn run(mut send: SendHalf, step: Step, cancel: Rc<Notify>) -> (SendHalf, Result<(), String>) {
    let result = tokio::select! {
        biased;
        () = cancel.notified() => Err("cancelled".to_string()),
        r = steps(&mut send, step) => r.map_err(|e| e.to_string()),
    };
    (send, result)
}

async fn steps(send: &mut SendHalf, step: Step) -> Result<(), h3::error::StreamError> {
    for interim in step.informational {
        send.send_response(interim).await?;
    }
    if let Some(head) = step.head {
        send.send_response(head).await?;
    }
    if !step.data.is_empty() {
        send.send_data(step.data).await?;
    }
    if let Some(trailers) = step.trailers {
        send.send_trailers(trailers).await?;
    }
    if step.end {
        send.finish().await?;
    }
    Ok(())
}
