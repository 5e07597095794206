//! One HTTP/2 stream served by the pipeline, inside its connection's task.
//!
//! The stream is the pipeline's client connection ([`H2Client`], a
//! [`ClientStream`]): its request head is written as HTTP/1.1 into the
//! scratch buffer the read-head phase parses ([`head::request_head`]), its
//! DATA frames are read as the body ([`Inbound`]), and what the pipeline
//! writes back — a response head, then its body — goes out as HEADERS (1xx
//! as informational HEADERS), DATA frames and trailers ([`Out`], then
//! [`Outbound`]). Every phase (route, persistence, cache, rewrite, pick,
//! forward, compress, log) is the pipeline's, unchanged; there is no pipe
//! and no task of its own.
//!
//! Resets: the stream's future watches for the client's RST_STREAM while the
//! pipeline runs, and drops the pipeline when it comes (a server stream it
//! opened is reset with the client's code, [`Resets::by_client`]), without
//! a failure log line per reset stream — a reset flood would become a log
//! flood. A response the pipeline could not finish resets the stream: with
//! the code it asked for ([`Resets::to_client`]: a server's own, or
//! REFUSED_STREAM before any response), else INTERNAL_ERROR.

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use h2::server::SendResponse;
use h2::{Reason, RecvStream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::Shared;
use crate::translate::data::{peer_reset, Inbound, Outbound};
use crate::translate::head::{self, RequestBody};
use crate::transport::{Resets, Sink, StreamClient};
use switchyard_http::parse::{self, Field, Framing};

/// Largest response head the pipeline writes.
const MAX_RESPONSE_HEAD: usize = 64 * 1024;

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

/// Serves one stream: the request through the pipeline, the response back.
pub(super) async fn serve(req: http::Request<RecvStream>, mut respond: SendResponse<Bytes>, conn: Rc<Shared>) -> Ended {
    let (parts, body) = req.into_parts();
    let head_request = parts.method == http::Method::HEAD;
    // The worker's pooled working memory, as an HTTP/1.1 connection gets it:
    // the pipeline gives it back when the stream is done.
    let mut scratch = conn.worker.lend_scratch();
    let framing = match head::request_head(&parts, body.is_end_stream(), &mut scratch.buf) {
        Ok(framing) => framing,
        Err(_) => {
            respond.send_reset(Reason::PROTOCOL_ERROR);
            return Ended::Failed;
        }
    };
    drop(parts);
    let inbound = match framing {
        RequestBody::None => Inbound::empty(Bytes::new()),
        RequestBody::Length => Inbound::new(body, false, Bytes::new()),
        RequestBody::Chunked => Inbound::new(body, true, Bytes::new()),
    };
    let resets = Rc::new(Resets::default());
    let out = Rc::new(RefCell::new(Out { state: State::Head { respond, buf: BytesMut::new() }, head_request }));
    let client = H2Client {
        rd: Rd { body: inbound, resets: resets.clone() },
        wr: Wr { out: out.clone(), resets: resets.clone() },
        local: conn.local_addr,
        resets: resets.clone(),
    };
    let (local, service) = conn.current();
    // Boxed: the pipeline's future is large, and a stream's future is moved
    // into the connection's set of streams before it starts; unboxed, every
    // stream would copy the pipeline's room on the way in.
    let pipeline = Box::pin(crate::http::serve(
        client,
        conn.peer,
        scratch,
        local,
        service,
        conn.worker.clone(),
        conn.transport.clone(),
    ));
    let reset = std::future::poll_fn(|cx| {
        if resets.by_client.get().is_some() {
            return Poll::Ready(());
        }
        match out.borrow_mut().poll_reset(cx) {
            Poll::Ready(Some(code)) => {
                resets.by_client.set(Some(code));
                Poll::Ready(())
            }
            Poll::Ready(None) | Poll::Pending => Poll::Pending,
        }
    });
    let peer_reset = tokio::select! {
        biased;
        () = reset => true,
        () = pipeline => false,
    };
    // The pipeline is dropped by now: a server stream it opened has seen the client's code.
    if peer_reset {
        return Ended::PeerReset;
    }
    if matches!(&out.borrow().state, State::Body(body) if !body.is_ended()) {
        // A response cut short: a reset drops the stream's frames not yet
        // written, so the connection first takes a turn to write what the
        // client was sent.
        conn.written().await;
    }
    let ended = out.borrow_mut().finish(&resets);
    ended
}

/// The pipeline's client connection over one HTTP/2 stream.
pub(crate) type H2Client = StreamClient<Rd, Wr>;

/// The request body of the stream.
pub(crate) struct Rd {
    body: Inbound,
    resets: Rc<Resets>,
}

/// The response side of the stream, shared with the stream's task (which
/// watches it for resets and finishes it after the pipeline).
pub(crate) struct Wr {
    out: Rc<RefCell<Out>>,
    resets: Rc<Resets>,
}

/// The response as it goes out.
struct Out {
    state: State,
    head_request: bool,
}

enum State {
    /// Reading the response head the pipeline writes.
    Head { respond: SendResponse<Bytes>, buf: BytesMut },
    /// Sending its body.
    Body(Outbound),
    /// Complete (or reset).
    Done,
}

impl Out {
    fn poll_write(&mut self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        match &mut self.state {
            State::Head { buf, .. } => {
                if buf.len() + data.len() > MAX_RESPONSE_HEAD {
                    return Poll::Ready(Err(invalid("response head too large")));
                }
                buf.extend_from_slice(data);
                Poll::Ready(self.head().map(|()| data.len()))
            }
            State::Body(body) => body.poll_write(cx, data),
            State::Done if data.is_empty() => Poll::Ready(Ok(0)),
            State::Done => Poll::Ready(Err(invalid("bytes after the end of the response"))),
        }
    }

    /// Sends the response head once it is complete (interim ones as they
    /// come), and the body bytes written with it.
    fn head(&mut self) -> io::Result<()> {
        let State::Head { respond, buf } = &mut self.state else {
            return Ok(());
        };
        let mut fields: Vec<Field> = Vec::with_capacity(head::HEAD_FIELDS);
        // Each head's bytes are split off and frozen: its fields' values are
        // slices of them, not copies.
        let head = loop {
            match parse::parse_response(buf, MAX_RESPONSE_HEAD, &mut fields) {
                Ok(None) => return Ok(()),
                Ok(Some(head)) if (100..200).contains(&head.status) && head.status != 101 => {
                    // `100 Continue` for `expect: 100-continue`, 103 Early Hints...
                    let bytes = buf.split_to(head.len).freeze();
                    if let Ok(interim) = head::response_head(&bytes, &head, &fields) {
                        let _ = respond.send_informational(interim);
                    }
                }
                Ok(Some(head)) if head.status >= 200 => break head,
                // The pipeline writes only heads it parsed itself.
                Ok(Some(_)) | Err(_) => return Err(invalid("unexpected response head")),
            }
        };
        let bytes = buf.split_to(head.len).freeze();
        let response = head::response_head(&bytes, &head, &fields).map_err(invalid)?;
        let framing =
            if parse::response_has_body(self.head_request, head.status) { head.framing } else { Framing::Empty };
        let empty = matches!(framing, Framing::Length(0) | Framing::Empty);
        let send = respond.send_response(response, empty).map_err(|e| io::Error::other(e.to_string()))?;
        let rest = std::mem::take(buf);
        if empty {
            self.state = State::Done;
            return Ok(());
        }
        let mut body = Outbound::new(send, framing);
        // Body bytes written together with the head are sent without waiting
        // for the window (h2 buffers them: at most this one write).
        let mut at = 0;
        while at < rest.len() && !body.is_ended() {
            at += body.write_now(&rest[at..])?;
        }
        self.state = State::Body(body);
        Ok(())
    }

    /// The client's reset code, once it reset the stream; `None` when the
    /// stream failed with its connection (the connection's loop ends it).
    fn poll_reset(&mut self, cx: &mut Context<'_>) -> Poll<Option<u32>> {
        let polled = match &mut self.state {
            State::Head { respond, .. } => respond.poll_reset(cx),
            State::Body(body) if !body.is_ended() => body.stream().poll_reset(cx),
            State::Body(_) | State::Done => return Poll::Pending,
        };
        match polled {
            Poll::Ready(Ok(reason)) => Poll::Ready(Some(u32::from(reason))),
            Poll::Ready(Err(e)) => Poll::Ready(peer_reset(&e)),
            Poll::Pending => Poll::Pending,
        }
    }

    /// After the pipeline: a response it did not finish resets the stream.
    fn finish(&mut self, resets: &Resets) -> Ended {
        let code = resets.to_client.get().map_or(Reason::INTERNAL_ERROR, Reason::from);
        match std::mem::replace(&mut self.state, State::Done) {
            State::Head { mut respond, .. } => {
                respond.send_reset(code);
                Ended::Failed
            }
            State::Body(mut body) if !body.is_ended() => {
                if resets.to_client.get().is_none() && body.ends_with_close() {
                    // A body delimited by the end of the server's connection.
                    body.end();
                    return Ended::Done;
                }
                body.reset(code);
                Ended::Failed
            }
            State::Body(body) if body.error().is_some() => Ended::Failed,
            State::Body(_) | State::Done => Ended::Done,
        }
    }
}

fn invalid(why: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}

/// A failed read or write whose cause is the client's reset: the stream's
/// task ends the pipeline (woken here), which therefore never sees the error.
fn parked_on_reset<T>(resets: &Resets, error: Option<&h2::Error>, cx: &mut Context<'_>) -> Option<Poll<T>> {
    let code = peer_reset(error?)?;
    resets.by_client.set(Some(code));
    cx.waker().wake_by_ref();
    Some(Poll::Pending)
}

impl AsyncRead for Rd {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match this.body.poll_read(cx, buf) {
            Poll::Ready(Err(e)) => parked_on_reset(&this.resets, this.body.error(), cx).unwrap_or(Poll::Ready(Err(e))),
            other => other,
        }
    }
}

impl AsyncWrite for Wr {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let mut out = this.out.borrow_mut();
        match out.poll_write(cx, data) {
            Poll::Ready(Err(e)) => {
                let error = match &out.state {
                    State::Body(body) => body.error(),
                    _ => None,
                };
                parked_on_reset(&this.resets, error, cx).unwrap_or(Poll::Ready(Err(e)))
            }
            other => other,
        }
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
}
