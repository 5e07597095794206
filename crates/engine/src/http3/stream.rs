//! One HTTP/3 request stream served by the pipeline, inside its QUIC
//! connection's task — the HTTP/3 variant of the client stream, as
//! [`crate::http2`]'s `H2Client` is the HTTP/2 one.
//!
//! The stream is the pipeline's client connection ([`H3Client`], a
//! [`ClientStream`]): its request head is written as HTTP/1.1 into the
//! scratch buffer the read-head phase parses (the same translation as
//! HTTP/2's, [`head::request_head`]), its DATA frames are read as the body
//! ([`Inbound`]), and what the pipeline writes back — a response head, then
//! its body and trailers — goes out as HEADERS, DATA and trailing HEADERS
//! frames ([`Out`], then [`Outbound`]). Every phase (route, persistence,
//! cache, rewrite, pick, forward, compress, log) is the pipeline's,
//! unchanged; there is no pipe and no task of its own.
//!
//! Whether a request without `content-length` has a body is known only from
//! its stream: the first DATA frame or the end of the stream is awaited
//! (within `client_header`) before the head is handed over, so a GET is not
//! forwarded with a chunked empty body.
//!
//! A response the pipeline could not finish ends the stream with an error
//! code (`H3_INTERNAL_ERROR`; `H3_REQUEST_REJECTED` for a server's refused
//! stream), never with a clean end that would pass a cut body off as whole.
//! Interim responses (1xx) are not relayed.

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use h3::error::Code;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::body::{Inbound, Outbound, RecvHalf, Step};
use super::Shared;
use crate::translate::data::trailer_map;
use crate::translate::head::{self, RequestBody};
use crate::transport::{Resets, Sink, StreamClient};
use switchyard_http::chunked::ChunkedScanner;
use switchyard_http::parse::{self, Field, Framing};

/// Largest response head the pipeline writes.
const MAX_RESPONSE_HEAD: usize = 64 * 1024;
/// RST_STREAM codes the pipeline may ask for (RFC 9113 7).
const REFUSED_STREAM: u32 = 0x7;
const CANCEL: u32 = 0x8;

/// The request resolver of one stream.
pub(super) type Resolver = h3::server::RequestResolver<h3_quinn::Connection, Bytes>;

/// How a stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ended {
    /// The response went out whole.
    Done,
    /// No request could be read, or the response could not be completed.
    Failed,
    /// The client reset the stream before its request was complete.
    PeerReset,
}

/// Whether `e` is the client's reset of the stream.
fn peer_reset(e: &h3::error::StreamError) -> bool {
    matches!(e, h3::error::StreamError::RemoteTerminate { .. })
}

/// Serves one stream: the request through the pipeline, the response back.
pub(super) async fn serve(resolver: Resolver, conn: Rc<Shared>) -> Ended {
    let wait = {
        let (local, service) = conn.current();
        local.gen.config.services.get(service).map_or(Default::default(), |s| s.timeouts.client_header)
    };
    let (request, stream) = match tokio::time::timeout(wait, resolver.resolve_request()).await {
        Ok(Ok(resolved)) => resolved,
        Ok(Err(e)) if peer_reset(&e) => return Ended::PeerReset,
        Ok(Err(_)) | Err(_) => return Ended::Failed,
    };
    let (parts, ()) = request.into_parts();
    let head_request = parts.method == http::Method::HEAD;
    let (send, mut recv) = stream.split();
    let mut out = Outbound::new(send);
    let (end_stream, first) = if parts.headers.contains_key(http::header::CONTENT_LENGTH) {
        (false, Bytes::new())
    } else {
        match tokio::time::timeout(wait, first_data(&mut recv)).await {
            Ok(Ok(first)) => (first.is_none(), first.unwrap_or_default()),
            Ok(Err(reset)) => {
                out.reset(Code::H3_REQUEST_INCOMPLETE).await;
                return if reset { Ended::PeerReset } else { Ended::Failed };
            }
            Err(_) => {
                out.reset(Code::H3_REQUEST_INCOMPLETE).await;
                return Ended::Failed;
            }
        }
    };
    // The worker's pooled working memory; the pipeline gives it back.
    let mut scratch = conn.worker.lend_scratch();
    let inbound = match head::request_head(&parts, end_stream, &mut scratch.buf) {
        Ok(RequestBody::None) => Inbound::empty(),
        Ok(RequestBody::Length) => Inbound::new(recv, false, first),
        Ok(RequestBody::Chunked) => Inbound::new(recv, true, first),
        Err(_) => {
            out.reset(Code::H3_MESSAGE_ERROR).await;
            return Ended::Failed;
        }
    };
    drop(parts);
    let resets = Rc::new(Resets::default());
    let wr = Rc::new(RefCell::new(Out { state: State::Head(BytesMut::new()), head_request, send: out }));
    let client = H3Client { rd: Rd { body: inbound }, wr: Wr { out: wr.clone() }, local: conn.local_addr, resets };
    let resets = client.resets.clone();
    let (local, service) = conn.current();
    let peer = conn.connection.remote_address();
    crate::http::serve(client, peer, scratch, local, service, conn.worker.clone(), conn.transport.clone()).await;
    // The pipeline is done (and dropped its client): finish or reset the stream.
    let mut out = match Rc::try_unwrap(wr) {
        Ok(cell) => cell.into_inner(),
        Err(_) => return Ended::Failed,
    };
    out.finish(&resets).await
}

/// The first body payload of a request without a length: `None` when the
/// stream ended without one. The error says whether the client reset it.
async fn first_data(recv: &mut RecvHalf) -> Result<Option<Bytes>, bool> {
    loop {
        match std::future::poll_fn(|cx| recv.poll_recv_data(cx)).await {
            Ok(Some(mut data)) if data.has_remaining() => return Ok(Some(data.copy_to_bytes(data.remaining()))),
            Ok(Some(_)) => {}
            Ok(None) => return Ok(None),
            Err(e) => return Err(peer_reset(&e)),
        }
    }
}

/// The pipeline's client connection over one HTTP/3 request stream.
pub(crate) type H3Client = StreamClient<Rd, Wr>;

/// The request body of the stream.
pub(crate) struct Rd {
    body: Inbound,
}

/// The response side of the stream, shared with the stream's task (which
/// finishes it after the pipeline).
pub(crate) struct Wr {
    out: Rc<RefCell<Out>>,
}

/// The response as it goes out.
struct Out {
    state: State,
    head_request: bool,
    send: Outbound,
}

enum State {
    /// Reading the response head the pipeline writes.
    Head(BytesMut),
    /// Sending its body, framed as the pipeline writes it.
    Body(Framer),
    /// Complete.
    Done,
}

/// Removes the HTTP/1.1 framing of the body the pipeline writes.
struct Framer {
    /// Payload bytes still to come, for a body with a length.
    remaining: Option<u64>,
    /// The chunked coding being removed, for a chunked body.
    chunked: Option<ChunkedScanner>,
}

impl Framer {
    fn new(framing: Framing) -> Self {
        let remaining = match framing {
            Framing::Length(n) => Some(n),
            _ => None,
        };
        Framer { remaining, chunked: (framing == Framing::Chunked).then(ChunkedScanner::collecting_trailers) }
    }

    /// The payload of `data` (as much as belongs to the body) as a send
    /// step, and how many bytes of `data` it took.
    fn take(&mut self, data: &[u8]) -> io::Result<(Step, usize)> {
        if let Some(scanner) = self.chunked.as_mut() {
            let mut payload = BytesMut::new();
            let consumed = scanner
                .scan_with(data, |run| payload.extend_from_slice(&data[run]))
                .map_err(|why| io::Error::new(io::ErrorKind::InvalidData, why))?;
            let end = scanner.is_done();
            let trailers = if end { trailer_map(scanner) } else { None };
            return Ok((Step { data: payload.freeze(), trailers, end, ..Step::default() }, consumed));
        }
        let n = match self.remaining.as_mut() {
            Some(left) => {
                let n = data.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                *left -= n as u64;
                n
            }
            None => data.len(),
        };
        let end = self.remaining == Some(0);
        Ok((Step { data: Bytes::copy_from_slice(&data[..n]), end, ..Step::default() }, n))
    }

    /// A body delimited by the end of the server's connection.
    fn ends_with_close(&self) -> bool {
        self.remaining.is_none() && self.chunked.is_none()
    }
}

impl Out {
    fn poll_write(&mut self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        if let Err(e) = std::task::ready!(self.send.poll_idle(cx)) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(match &mut self.state {
            State::Head(buf) => {
                if buf.len() + data.len() > MAX_RESPONSE_HEAD {
                    return Poll::Ready(Err(invalid("response head too large")));
                }
                buf.extend_from_slice(data);
                self.head(cx).map(|()| data.len())
            }
            State::Body(framer) => {
                let (step, n) = match framer.take(data) {
                    Ok(taken) => taken,
                    Err(e) => return Poll::Ready(Err(e)),
                };
                if n == 0 && !data.is_empty() && !step.end {
                    return Poll::Ready(Err(invalid("bytes after the end of the response")));
                }
                if step.end {
                    self.state = State::Done;
                }
                if step.data.is_empty() && !step.end && step.trailers.is_none() {
                    Ok(n)
                } else {
                    self.send.start(step, cx).map(|()| n)
                }
            }
            State::Done if data.is_empty() => Ok(0),
            State::Done => Err(invalid("bytes after the end of the response")),
        })
    }

    /// Sends the response head once it is complete, with the body bytes
    /// written together with it. Interim heads are passed over.
    fn head(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        let State::Head(buf) = &mut self.state else {
            return Ok(());
        };
        let mut fields: Vec<Field> = Vec::with_capacity(head::HEAD_FIELDS);
        let head = loop {
            match parse::parse_response(buf, MAX_RESPONSE_HEAD, &mut fields) {
                Ok(None) => return Ok(()),
                Ok(Some(head)) if (100..200).contains(&head.status) && head.status != 101 => buf.advance(head.len),
                Ok(Some(head)) if head.status >= 200 => break head,
                // The pipeline writes only heads it parsed itself.
                Ok(Some(_)) | Err(_) => return Err(invalid("unexpected response head")),
            }
        };
        let bytes = buf.split_to(head.len).freeze();
        let response = head::response_head(&bytes, &head, &fields).map_err(invalid)?;
        let framing =
            if parse::response_has_body(self.head_request, head.status) { head.framing } else { Framing::Empty };
        let rest = std::mem::take(buf);
        let mut step = match framing {
            Framing::Length(0) | Framing::Empty => {
                self.state = State::Done;
                Step { end: true, ..Step::default() }
            }
            framing => {
                let mut framer = Framer::new(framing);
                let (step, _) = framer.take(&rest)?;
                self.state = if step.end { State::Done } else { State::Body(framer) };
                step
            }
        };
        step.head = Some(response);
        self.send.start(step, cx)
    }

    /// After the pipeline: the response goes out whole, or the stream is
    /// ended with an error code.
    async fn finish(&mut self, resets: &Resets) -> Ended {
        let code = match resets.to_client.get() {
            Some(REFUSED_STREAM) => Code::H3_REQUEST_REJECTED,
            Some(CANCEL) => Code::H3_REQUEST_CANCELLED,
            _ => Code::H3_INTERNAL_ERROR,
        };
        match std::mem::replace(&mut self.state, State::Done) {
            State::Head(_) => {
                self.send.reset(code).await;
                Ended::Failed
            }
            State::Body(framer) if resets.to_client.get().is_none() && framer.ends_with_close() => {
                // A body delimited by the end of the server's connection.
                let ended = match self.send.flush().await {
                    Ok(()) => {
                        std::future::poll_fn(|cx| {
                            Poll::Ready(self.send.start(Step { end: true, ..Step::default() }, cx))
                        })
                        .await
                    }
                    Err(e) => Err(e),
                };
                self.done(ended).await
            }
            State::Body(_) => {
                self.send.reset(code).await;
                Ended::Failed
            }
            State::Done if resets.to_client.get().is_some() && !self.send.is_ended() => {
                self.send.reset(code).await;
                Ended::Failed
            }
            State::Done => {
                let flushed = self.send.flush().await;
                self.done(flushed).await
            }
        }
    }

    async fn done(&mut self, result: io::Result<()>) -> Ended {
        let result = match result {
            Ok(()) => self.send.flush().await,
            Err(e) => Err(e),
        };
        if result.is_err() || self.send.error().is_some() {
            self.send.reset(Code::H3_INTERNAL_ERROR).await;
            return Ended::Failed;
        }
        Ended::Done
    }
}

fn invalid(why: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}

impl AsyncRead for Rd {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.get_mut().body.poll_read(cx, buf)
    }
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

/// A write taken while no send operation is in flight goes at once; one
/// that would wait answers `WouldBlock` and takes the relay's awaited path.
impl Sink for Wr {
    fn try_write_now(&self, data: &[u8]) -> io::Result<usize> {
        crate::transport::now(|cx| self.out.borrow_mut().poll_write(cx, data))
    }

    fn try_write_two_now(&self, a: &[u8], b: &[u8]) -> io::Result<usize> {
        crate::transport::write_two_now(self, a, b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunked_body_loses_its_framing_and_keeps_its_trailers() {
        let mut framer = Framer::new(Framing::Chunked);
        let wire = b"3\r\nabc\r\n2\r\nde\r\n0\r\ngrpc-status: 7\r\ncontent-length: 9\r\n\r\n";
        let (mut payload, mut trailers, mut end) = (Vec::new(), None, false);
        // Written in pieces that split the framing.
        for piece in wire.chunks(4) {
            let (step, n) = framer.take(piece).expect("valid framing");
            assert_eq!(n, piece.len());
            payload.extend_from_slice(&step.data);
            trailers = trailers.or(step.trailers);
            end |= step.end;
        }
        assert_eq!((payload.as_slice(), end), (&b"abcde"[..], true));
        let trailers = trailers.expect("trailers");
        assert_eq!(trailers.get("grpc-status").map(|v| v.as_bytes()), Some(&b"7"[..]));
        assert!(trailers.get("content-length").is_none(), "framing fields never trail");
    }

    #[test]
    fn a_body_with_a_length_ends_at_its_length() {
        let mut framer = Framer::new(Framing::Length(4));
        let (step, n) = framer.take(b"abcdef").expect("take");
        assert_eq!((&step.data[..], n, step.end), (&b"abcd"[..], 4, true));
        assert!(!framer.ends_with_close());
        let mut until_close = Framer::new(Framing::UntilClose);
        let (step, n) = until_close.take(b"xyz").expect("take");
        assert_eq!((&step.data[..], n, step.end), (&b"xyz"[..], 3, false));
        assert!(until_close.ends_with_close());
    }

    #[test]
    fn bad_chunk_framing_is_an_error() {
        let mut framer = Framer::new(Framing::Chunked);
        assert!(framer.take(b"zz\r\nabc\r\n").is_err());
    }
}
