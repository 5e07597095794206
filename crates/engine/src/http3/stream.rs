//! One HTTP/3 request stream served by the pipeline, inside its QUIC
//! connection's task — the HTTP/3 variant of the client stream, as
//! [`crate::http2`]'s `H2Client` is the HTTP/2 one.
//!
//! The stream is the pipeline's client connection ([`H3Client`], a
//! [`ClientStream`]), on the HTTP/2 stream's model: its request head is
//! checked as an HTTP/2 head is (`h3`'s `http` parts written back as a field
//! list and checked by the same function: [`head::request`]; malformed:
//! H3_MESSAGE_ERROR) and handed over decoded, as a `RequestHead` whose
//! fields index the scratch buffer — no HTTP/1.1 text, no re-parse. Its DATA
//! frames are read as the body ([`Inbound`]). The response head comes as a
//! header list from the pipeline's HTTP/2 head writer ([`FieldList`], taken
//! by [`Sink::send_fields`]; relayed, local and cached responses alike) and
//! goes to `h3` as the `http::Response` built from it
//! ([`head::response`]); the body and trailers the pipeline writes after it
//! go out as DATA and trailing HEADERS frames ([`Out`], then
//! [`Outbound`]). Every phase (route, persistence, cache, rewrite, pick,
//! forward, compress, log) is the pipeline's, unchanged; there is no pipe
//! and no task of its own.
//!
//! Whether a request without `content-length` has a body is known only from
//! its stream: the first DATA frame or the end of the stream is awaited
//! (within `client_header`) before the head is handed over, so a GET is not
//! forwarded with a chunked empty body — unless it carries `expect:
//! 100-continue`, whose client sends nothing before the `100`.
//!
//! A response the pipeline could not finish ends the stream with an error
//! code (`H3_INTERNAL_ERROR`; `H3_REQUEST_REJECTED` for a server's refused
//! stream), never with a clean end that would pass a cut body off as whole.
//! Interim responses (`100 Continue`, `103 Early Hints`) go out as HEADERS
//! frames before the final one.
//!
//! Resets: while the pipeline runs, the stream's future watches for the
//! client's STOP_SENDING (and a reset of the request body) and drops the
//! pipeline when it comes, as HTTP/2 does for RST_STREAM; the stream ends
//! with `H3_REQUEST_CANCELLED` and counts as reset by the client.
//!
//! Early data (`http3.early_data`): a request whose stream was opened in
//! 0-RTT packets is served only when it is a GET, HEAD or OPTIONS without a
//! body, forwarded with `early-data: 1` (RFC 8470 5.1); any other is answered
//! `425 Too Early` at once, and the client repeats it after the handshake.

use std::cell::{Cell, RefCell};
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use h3::error::Code;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::body::{Inbound, Outbound, RecvHalf, Step, Tail};
use super::quic::Stopped;
use super::Shared;
use crate::http::StreamContext;
use crate::translate::data::{header_map, trailer_map};
use crate::translate::head;
use crate::transport::{Part, Resets, Sink, Source, StreamClient};
use crate::worker::Scratch;
use switchyard_http::chunked::ChunkedScanner;
use switchyard_http::head_writer::FieldList;
use switchyard_http::parse::{self, Framing, RequestHead};

/// RST_STREAM codes the pipeline may ask for (RFC 9113 7).
const REFUSED_STREAM: u32 = 0x7;
const CANCEL: u32 = 0x8;

/// The request resolver of one stream.
pub(super) type Resolver = h3::server::RequestResolver<super::quic::Conn, Bytes>;

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
    let (early, stopped) = match conn.watch.take(stream.id()) {
        Some(facts) => (facts.early, Some(facts.stopped)),
        None => (false, None),
    };
    let (parts, ()) = request.into_parts();
    let head_request = parts.method == http::Method::HEAD;
    let (send, mut recv) = stream.split();
    let mut out = Outbound::new(send);
    // A client that awaits `100 Continue` sends no DATA before it: its body
    // is taken as coming.
    let expects_continue =
        parts.headers.get(http::header::EXPECT).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let (end_stream, first) = if parts.headers.contains_key(http::header::CONTENT_LENGTH) || expects_continue {
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
    if early && !replay_safe(&parts, end_stream) {
        return too_early(&mut out, &conn).await;
    }
    let Some((mut scratch, mut head)) = checked_head(&conn, &parts, end_stream) else {
        out.reset(Code::H3_MESSAGE_ERROR).await;
        return Ended::Failed;
    };
    let tail = Tail::default();
    let inbound = match head.framing {
        Framing::Length(n) => Inbound::with_length(recv, n, tail.clone()),
        Framing::Chunked => Inbound::chunked(recv, first),
        _ => Inbound::empty(),
    };
    drop(parts);
    if early {
        // RFC 8470 5.1: the server may answer 425 itself.
        head::add_field(&mut scratch.buf, &mut scratch.fields, &mut head, b"early-data", b"1");
    }
    scratch.head = Some(Box::new(head));
    let resets = Rc::new(Resets::default());
    let wr = Rc::new(RefCell::new(Out { state: State::Head, head_request, send: out, held: None, bytes: false }));
    let malformed = Rc::new(Cell::new(false));
    let rd = Rd { body: inbound, resets: resets.clone(), malformed: malformed.clone() };
    let client = H3Client { rd, wr: Wr { out: wr.clone() }, local: conn.local_addr, resets: resets.clone() };
    let (local, service) = conn.current();
    let peer = conn.connection.remote_address();
    let context =
        StreamContext { peer, local, service, worker: conn.worker.clone(), transport: conn.transport.clone() };
    let pipeline = crate::http::serve_stream(client, scratch, context);
    let cut = tokio::select! {
        biased;
        () = reset_by_client(&resets, stopped) => Some(Cut::PeerReset),
        () = std::future::poll_fn(|_| if malformed.get() { Poll::Ready(()) } else { Poll::Pending }) => {
            Some(Cut::Malformed)
        }
        () = data_past_length(&tail) => Some(Cut::Malformed),
        () = pipeline => None,
    };
    // The pipeline is done, or dropped (and with it its client and whatever
    // it sent the server): finish or reset the stream.
    let mut out = match Rc::try_unwrap(wr) {
        Ok(cell) => cell.into_inner(),
        Err(_) => return Ended::Failed,
    };
    match cut {
        Some(Cut::PeerReset) => {
            out.send.reset(Code::H3_REQUEST_CANCELLED).await;
            Ended::PeerReset
        }
        Some(Cut::Malformed) => {
            // RFC 9114 4.1.2: a stream error, and the request is not
            // forwarded whole.
            tracing::debug!(service = %conn.name, "HTTP/3 request body does not match its content-length");
            out.send.reset(Code::H3_MESSAGE_ERROR).await;
            Ended::Failed
        }
        None => out.finish(&resets).await,
    }
}

/// Why a stream's future dropped its pipeline before the pipeline ended.
enum Cut {
    /// The client reset the request or stopped the response.
    PeerReset,
    /// The request body does not match its `content-length`.
    Malformed,
}

/// Resolves when DATA arrives on a request stream after its body reached its
/// `content-length` (the pipeline reads no further): a malformed request
/// (RFC 9114 4.1.2). Never, once the stream ended there (its end, trailers,
/// or a reset, which the other branches see).
async fn data_past_length(tail: &Tail) {
    let mut ended = false;
    std::future::poll_fn(|cx| {
        if ended {
            return Poll::Pending;
        }
        let mut slot = tail.borrow_mut();
        let Some(recv) = slot.as_mut() else { return Poll::Pending };
        loop {
            match recv.poll_recv_data(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(Some(data))) if data.has_remaining() => return Poll::Ready(()),
                Poll::Ready(Ok(Some(_))) => {}
                Poll::Ready(Ok(None) | Err(_)) => {
                    ended = true;
                    return Poll::Pending;
                }
            }
        }
    })
    .await;
}

/// Resolves once the client stopped the response (STOP_SENDING) or reset
/// the request body; its reset is noted for the pipeline's server side.
async fn reset_by_client(resets: &Resets, mut stopped: Option<Stopped>) {
    std::future::poll_fn(|cx| {
        if resets.by_client.get().is_some() {
            return Poll::Ready(());
        }
        let Some(stopped) = stopped.as_mut() else {
            return Poll::Pending;
        };
        stopped.as_mut().poll(cx).map(|_| resets.by_client.set(Some(CANCEL)))
    })
    .await;
}

/// Whether a request may be served from early data (RFC 8470): a safe
/// method without a body, so that a replay changes nothing.
fn replay_safe(parts: &http::request::Parts, end_stream: bool) -> bool {
    let safe = matches!(parts.method, http::Method::GET | http::Method::HEAD | http::Method::OPTIONS);
    safe && end_stream && !parts.headers.contains_key(http::header::CONTENT_LENGTH)
}

/// The request's head checked as an HTTP/2 request's is
/// ([`head::request`]), then put into a scratch set from the worker's pool
/// (which the pipeline gives back) as the read-head phase takes a decoded
/// head; `None` when it is malformed (a stream error, H3_MESSAGE_ERROR, RFC
/// 9114 4.1.2).
fn checked_head(conn: &Shared, parts: &http::request::Parts, end_stream: bool) -> Option<(Scratch, RequestHead)> {
    let mut checked = conn.checked.borrow_mut();
    if let Err(why) = head::request(parts, end_stream, &mut checked) {
        tracing::debug!(service = %conn.name, client = %conn.connection.remote_address(), why, "malformed HTTP/3 request");
        return None;
    }
    let mut scratch = conn.worker.lend_scratch();
    let head = head::load(&checked, &mut scratch.buf, &mut scratch.fields)?;
    Some((scratch, head))
}

/// Answers `425 Too Early` (RFC 8470 5.2) to a request in early data that
/// is not [`replay_safe`]: the client repeats it once the handshake is done.
async fn too_early(out: &mut Outbound, conn: &Shared) -> Ended {
    const BODY: &[u8] = b"425 Too Early\n";
    let head = http::Response::builder()
        .status(425)
        .header(http::header::CONTENT_TYPE, "text/plain")
        .header(http::header::CONTENT_LENGTH, BODY.len())
        .body(())
        .ok();
    tracing::debug!(service = %conn.name, client = %conn.connection.remote_address(), "HTTP/3 request in early data: 425");
    let mut step = Some(Step { head, data: Bytes::from_static(BODY), end: true, ..Step::default() });
    let started = std::future::poll_fn(|cx| Poll::Ready(step.take().map_or(Ok(()), |s| out.start(s, cx)))).await;
    match started {
        Ok(()) if out.flush().await.is_ok() => Ended::Done,
        _ => {
            out.reset(Code::H3_INTERNAL_ERROR).await;
            Ended::Failed
        }
    }
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
    resets: Rc<Resets>,
    /// Set when the body turns out malformed: the stream's future then
    /// drops the pipeline and resets the stream with H3_MESSAGE_ERROR.
    malformed: Rc<Cell<bool>>,
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
    /// Heads the pipeline gave ([`Out::send_fields`]) while a send operation
    /// was in flight: they go with the next write, or at the end.
    held: Option<Step>,
    /// Body bytes were written (HTTP/1.1 framing): the body is not taken as parts.
    bytes: bool,
}

enum State {
    /// Waiting for the final response head (a header list).
    Head,
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
            State::Head if data.is_empty() => Ok(0),
            State::Head => Err(invalid("body bytes before the response head")),
            State::Body(framer) => {
                self.bytes |= !data.is_empty();
                let (mut step, n) = match framer.take(data) {
                    Ok(taken) => taken,
                    Err(e) => return Poll::Ready(Err(e)),
                };
                if n == 0 && !data.is_empty() && !step.end {
                    return Poll::Ready(Err(invalid("bytes after the end of the response")));
                }
                if step.end {
                    self.state = State::Done;
                }
                if let Some(held) = self.held.take() {
                    (step.informational, step.head) = (held.informational, held.head);
                }
                let nothing = step.data.is_empty() && step.trailers.is_none() && step.head.is_none();
                if nothing && !step.end {
                    Ok(n)
                } else {
                    self.send.start(step, cx).map(|()| n)
                }
            }
            State::Done if data.is_empty() => Ok(0),
            State::Done => Err(invalid("bytes after the end of the response")),
        })
    }

    /// Whether the body can be taken as parts: its head was taken and none
    /// of it was written as bytes.
    fn takes_parts(&self) -> bool {
        matches!(self.state, State::Body(_)) && !self.bytes
    }

    /// Takes a part of the body as one send step (with any head still
    /// held), once no send operation is in flight.
    fn poll_send_part(&mut self, cx: &mut Context<'_>, part: &mut Part) -> Poll<io::Result<()>> {
        if let Err(e) = std::task::ready!(self.send.poll_idle(cx)) {
            return Poll::Ready(Err(e));
        }
        if !matches!(self.state, State::Body(_)) {
            return Poll::Ready(Err(invalid("bytes after the end of the response")));
        }
        let mut step = match part {
            Part::Data(data, end) => Step { data: std::mem::take(data), end: *end, ..Step::default() },
            Part::Trailers(trailers) => Step { trailers: header_map(trailers.pairs()), end: true, ..Step::default() },
            Part::End => Step { end: true, ..Step::default() },
        };
        if step.end {
            self.state = State::Done;
        }
        if let Some(held) = self.held.take() {
            (step.informational, step.head) = (held.informational, held.head);
        }
        let nothing = step.data.is_empty() && step.trailers.is_none() && step.head.is_none();
        Poll::Ready(if nothing && !step.end { Ok(()) } else { self.send.start(step, cx) })
    }

    /// Takes a head the pipeline wrote as a header list: an interim one as
    /// it is, a final one with the body to follow in the framing the list
    /// says (none for a HEAD request, a 204 or a 304). Either starts at once
    /// when no send operation is in flight, else waits in `held`.
    fn send_fields(&mut self, list: &FieldList) -> io::Result<()> {
        if !matches!(self.state, State::Head) {
            return Err(invalid("unexpected response head"));
        }
        let status = list.status();
        // 101 has no meaning in HTTP/3 (RFC 9114 4.5).
        if status == 101 {
            return Err(invalid("unexpected response head"));
        }
        let response = head::response(list).map_err(invalid)?;
        let held = self.held.get_or_insert_with(Step::default);
        if status < 200 {
            held.informational.push(response);
        } else {
            held.head = Some(response);
            let framing =
                if parse::response_has_body(self.head_request, status) { list.framing() } else { Framing::Empty };
            self.state = match framing {
                Framing::Length(0) | Framing::Empty => {
                    held.end = true;
                    State::Done
                }
                framing => State::Body(Framer::new(framing)),
            };
        }
        match crate::transport::now(|cx| self.start_held(cx)) {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => Err(e),
            _ => Ok(()),
        }
    }

    /// Starts what `held` holds once no send operation is in flight.
    fn start_held(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.send.poll_idle(cx))?;
        Poll::Ready(match self.held.take() {
            Some(step) => self.send.start(step, cx),
            None => Ok(()),
        })
    }

    /// Sends what is held and waits for it to be sent.
    async fn flush(&mut self) -> io::Result<()> {
        std::future::poll_fn(|cx| self.start_held(cx)).await?;
        self.send.flush().await
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
            State::Head => {
                self.send.reset(code).await;
                Ended::Failed
            }
            State::Body(framer) if resets.to_client.get().is_none() && framer.ends_with_close() => {
                // A body delimited by the end of the server's connection.
                let ended = match self.flush().await {
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
                let flushed = self.flush().await;
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
    /// A body the client reset parks the read: the stream's future drops
    /// the pipeline (woken here), which therefore logs no failure for it.
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.malformed.get() || this.resets.by_client.get().is_some() {
            // Parked already (polled again before the stream's future ran).
            return Poll::Pending;
        }
        let polled = this.body.poll_read(cx, buf);
        this.park(polled, cx)
    }
}

impl Rd {
    /// What a read of the body answers, except that a body the client
    /// reset parks the read.
    fn park<T>(&self, polled: Poll<io::Result<T>>, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        match polled {
            Poll::Ready(Err(_)) if self.body.reset_by_client() => {
                self.resets.by_client.set(Some(CANCEL));
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            // Parked too: the stream's future resets the stream, and the
            // pipeline, dropped, neither answers nor logs a failure for it.
            Poll::Ready(Err(_)) if self.body.malformed() => {
                self.malformed.set(true);
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            polled => polled,
        }
    }
}

/// The request body as parts, where the server's side takes them; a reset
/// or malformed body parks the read as for bytes.
impl Source for Rd {
    fn gives_parts(&self) -> bool {
        self.body.gives_parts()
    }

    fn poll_part(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Part>> {
        if self.malformed.get() || self.resets.by_client.get().is_some() {
            // Parked already (polled again before the stream's future ran).
            return Poll::Pending;
        }
        let polled = self.body.poll_part(cx);
        self.park(polled, cx)
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
