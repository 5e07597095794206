//! One client connection: read a head, read (or echo) the body, answer, repeat.
//!
//! Invariants: memory per connection is bounded (the read buffer never holds more than a
//! request head plus one read, bodies stream through it); responses leave in request order;
//! responses to pipelined requests that are already buffered are batched into one write,
//! and everything batched is flushed before waiting on the peer or on a timer.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use super::body::CycledBody;
use super::http::{self, BodyLength, ChunkStep, ChunkedDecoder, Framing, Parsed, RequestHead, ResponseHead, Route};
use super::Shared;

/// Bytes asked of each socket read.
const READ_CHUNK: usize = 16 * 1024;
/// Bodies up to this size are copied behind their head (so pipelined responses batch);
/// larger ones are written straight from the pre-generated buffer with `writev`.
const COPY_BODY_MAX: u64 = 16 * 1024;
/// Past this much batched output, write it out before parsing further pipelined requests.
const BATCH_MAX: usize = 64 * 1024;
/// How long a closing connection keeps reading (and discarding) what the peer still sends,
/// so the kernel does not answer unread data with a reset that destroys our last response.
const LINGER: Duration = Duration::from_secs(2);

/// Whether the connection goes on after a response.
enum Next {
    KeepAlive,
    Close,
}

/// Serves one accepted connection (clear TCP, or TLS after its handshake) until the peer
/// leaves, a response closes it, or shutdown.
pub(super) async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    peer: SocketAddr,
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
) {
    let mut conn = Conn {
        stream,
        peer,
        shared,
        shutdown,
        buf: BytesMut::with_capacity(READ_CHUNK),
        out: Vec::with_capacity(READ_CHUNK),
        closing_early: false,
    };
    if let Err(error) = conn.run().await {
        tracing::debug!(%peer, %error, "origin connection ended with an error");
    }
}

struct Conn<S> {
    stream: S,
    peer: SocketAddr,
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
    /// Bytes read and not yet consumed.
    buf: BytesMut,
    /// Response bytes batched and not yet written.
    out: Vec<u8>,
    /// The origin closes while the peer may still be sending (a 400, `connection: close`):
    /// linger before letting go of the socket.
    closing_early: bool,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    async fn run(&mut self) -> io::Result<()> {
        while let Some(head) = self.read_head().await? {
            if let Next::Close = self.respond(&head).await? {
                self.closing_early = true;
                break;
            }
        }
        self.flush().await?;
        if self.closing_early {
            self.linger().await?;
        }
        Ok(())
    }

    /// The next request head, or `None` when the connection should end (peer closed, bad
    /// request answered, shutdown while idle).
    async fn read_head(&mut self) -> io::Result<Option<RequestHead>> {
        loop {
            if !self.buf.is_empty() {
                match http::parse_head(&self.buf, self.peer) {
                    Parsed::Complete(head) => {
                        self.buf.advance(head.head_len);
                        return Ok(Some(head));
                    }
                    Parsed::Bad(reason) => {
                        self.bad_request(reason);
                        return Ok(None);
                    }
                    Parsed::Partial if self.buf.len() >= http::MAX_HEAD => {
                        self.bad_request("request head too large");
                        return Ok(None);
                    }
                    Parsed::Partial => {}
                }
            }
            self.flush().await?;
            if *self.shutdown.borrow() {
                return Ok(None);
            }
            self.buf.reserve(READ_CHUNK);
            let read = tokio::select! {
                read = self.stream.read_buf(&mut self.buf) => read?,
                _ = self.shutdown.changed() => return Ok(None),
            };
            if read == 0 {
                return Ok(None);
            }
        }
    }

    async fn respond(&mut self, head: &RequestHead) -> io::Result<Next> {
        let has_body = head.framing != Framing::None;
        if head.expect_continue && has_body && !head.http10 {
            self.out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
            self.flush().await?;
        }
        let shape = &head.shape;
        let echo = head.route == Route::Shaped
            && shape.echo
            && has_body
            && !head.is_head
            && !matches!(shape.status, 204 | 304);
        if echo {
            return self.echo(head).await;
        }
        let received = match self.read_body(head.framing).await {
            Ok(received) => received,
            Err(error) if error.kind() == io::ErrorKind::InvalidData => {
                self.bad_request("malformed chunked body");
                return Ok(Next::Close);
            }
            Err(error) => return Err(error),
        };
        let stats = &self.shared.stats;
        if received > 0 {
            stats.bytes_received.fetch_add(received, Ordering::Relaxed);
        }
        if head.route != Route::Stats {
            stats.requests.fetch_add(1, Ordering::Relaxed);
        }
        if head.route == Route::Shaped && shape.extra.as_ref().is_some_and(|e| e.hints) && !head.http10 {
            // An interim response first, written on its own.
            self.out.extend_from_slice(b"HTTP/1.1 103 Early Hints\r\nlink: </hint.css>; rel=preload\r\n\r\n");
            self.flush().await?;
        }
        if head.route == Route::Shaped && shape.delay_ms > 0 {
            self.flush().await?;
            tokio::time::sleep(Duration::from_millis(shape.delay_ms)).await;
        }
        let received = has_body.then_some(received);
        let close = !head.keep_alive || *self.shutdown.borrow();
        match head.route {
            Route::Stats => {
                let body = self.shared.stats_json();
                self.write_json(head, &body, received, close);
            }
            Route::Describe => {
                let body = head.description.as_deref().unwrap_or_default();
                self.write_json(head, body, received, close);
            }
            Route::Shaped => self.write_shaped(head, received, close || shape.close).await?,
        }
        Ok(if close || shape.close { Next::Close } else { Next::KeepAlive })
    }

    /// Reads and discards a request body, returning its length.
    async fn read_body(&mut self, framing: Framing) -> io::Result<u64> {
        match framing {
            Framing::None => Ok(0),
            Framing::Length(len) => {
                let mut left = len;
                while left > 0 {
                    if self.buf.is_empty() {
                        self.fill().await?;
                    }
                    let take = usize::try_from(left).unwrap_or(usize::MAX).min(self.buf.len());
                    self.buf.advance(take);
                    left -= take as u64;
                }
                Ok(len)
            }
            Framing::Chunked => {
                let mut decoder = ChunkedDecoder::default();
                let mut total = 0u64;
                loop {
                    match decoder.step(&mut self.buf).map_err(|_| malformed())? {
                        ChunkStep::Data(n) => {
                            self.buf.advance(n);
                            total += n as u64;
                        }
                        ChunkStep::NeedMore => self.fill().await?,
                        ChunkStep::Done => return Ok(total),
                    }
                }
            }
        }
    }

    /// Streams the request body back as the response body. The client must read while it
    /// writes: the origin holds at most one read's worth of the body.
    async fn echo(&mut self, head: &RequestHead) -> io::Result<Next> {
        let shape = &head.shape;
        let close = !head.keep_alive || shape.close || *self.shutdown.borrow();
        let mut response = ResponseHead {
            status: shape.status,
            content_type: "application/octet-stream",
            length: BodyLength::Chunked,
            cache: shape.cache,
            received: None,
            close,
            announce_keep_alive: head.http10 && !close,
            extra: shape.extra.as_deref(),
        };
        let received = match head.framing {
            Framing::None => 0,
            Framing::Length(len) => {
                response.length = BodyLength::Length(len);
                response.received = Some(len);
                response.write(&self.shared.origin_header, &mut self.out);
                self.echo_length(len).await?;
                len
            }
            Framing::Chunked if head.http10 => {
                // Unreachable today (parse_head refuses chunked HTTP/1.0), kept for safety:
                // an HTTP/1.0 client cannot read chunked, so the body ends at close.
                response.length = BodyLength::Unframed;
                response.close = true;
                response.announce_keep_alive = false;
                response.write(&self.shared.origin_header, &mut self.out);
                self.echo_chunked(false).await?
            }
            Framing::Chunked => {
                response.write(&self.shared.origin_header, &mut self.out);
                self.echo_chunked(true).await?
            }
        };
        let stats = &self.shared.stats;
        stats.bytes_received.fetch_add(received, Ordering::Relaxed);
        stats.requests.fetch_add(1, Ordering::Relaxed);
        Ok(if response.close { Next::Close } else { Next::KeepAlive })
    }

    async fn echo_length(&mut self, len: u64) -> io::Result<()> {
        let mut left = len;
        while left > 0 {
            if self.buf.is_empty() {
                self.flush().await?;
                self.fill().await?;
            }
            let take = usize::try_from(left).unwrap_or(usize::MAX).min(self.buf.len());
            let mut pending = Buf::chain(&self.out[..], &self.buf[..take]);
            self.stream.write_all_buf(&mut pending).await?;
            self.out.clear();
            self.buf.advance(take);
            left -= take as u64;
        }
        Ok(())
    }

    /// Echoes a chunked body, re-chunked as it arrives (or raw when `chunked` is false).
    async fn echo_chunked(&mut self, chunked: bool) -> io::Result<u64> {
        let mut decoder = ChunkedDecoder::default();
        let mut total = 0u64;
        loop {
            // A malformed body mid-echo cannot become a 400 any more: the error closes the
            // connection and the client sees a truncated response.
            match decoder.step(&mut self.buf).map_err(|_| malformed())? {
                ChunkStep::Data(n) => {
                    if chunked {
                        http::push_hex(&mut self.out, n as u64);
                        self.out.extend_from_slice(b"\r\n");
                    }
                    let crlf: &[u8] = if chunked { b"\r\n" } else { b"" };
                    let mut pending = Buf::chain(&self.out[..], &self.buf[..n]).chain(crlf);
                    self.stream.write_all_buf(&mut pending).await?;
                    self.out.clear();
                    self.buf.advance(n);
                    total += n as u64;
                }
                ChunkStep::NeedMore => {
                    self.flush().await?;
                    self.fill().await?;
                }
                ChunkStep::Done => {
                    if chunked {
                        self.out.extend_from_slice(b"0\r\n\r\n");
                    }
                    return Ok(total);
                }
            }
        }
    }

    async fn write_shaped(&mut self, head: &RequestHead, received: Option<u64>, close: bool) -> io::Result<()> {
        let shape = &head.shape;
        let extra = shape.extra.as_deref();
        let status =
            if extra.is_some_and(|e| e.not_modified(head.if_none_match.as_deref())) { 304 } else { shape.status };
        // `ranges=1`: one byte range of a 200 is answered 206 (or 416).
        let part = head.range.as_deref().filter(|_| status == 200).and_then(|r| http::single_range(r, shape.size));
        let (status, offset, length) = match part {
            Some(Ok((first, last))) => (206, first, last - first + 1),
            Some(Err(())) => (416, 0, 0),
            None => (status, 0, shape.size),
        };
        let bodiless = matches!(status, 204 | 304);
        ResponseHead {
            status,
            content_type: shape.kind.content_type(),
            length: if bodiless { BodyLength::Unframed } else { BodyLength::Length(length) },
            cache: shape.cache,
            received,
            close,
            announce_keep_alive: head.http10 && !close,
            extra,
        }
        .write(&self.shared.origin_header, &mut self.out);
        if let Some(part) = part {
            // Before the head's final CRLF.
            self.out.truncate(self.out.len() - 2);
            self.out.extend_from_slice(b"content-range: bytes ");
            match part {
                Ok((first, last)) => {
                    http::push_u64(&mut self.out, first);
                    self.out.push(b'-');
                    http::push_u64(&mut self.out, last);
                }
                Err(()) => self.out.push(b'*'),
            }
            self.out.push(b'/');
            http::push_u64(&mut self.out, shape.size);
            self.out.extend_from_slice(b"\r\n\r\n");
        }
        let size = if bodiless || head.is_head { 0 } else { length };
        if offset > 0 {
            let mut pending = Buf::chain(&self.out[..], CycledBody::starting_at(shape.kind, offset, size));
            self.stream.write_all_buf(&mut pending).await?;
            self.out.clear();
        } else if size <= COPY_BODY_MAX {
            // `size` fits in the buffer, so this slice is the whole body.
            let body = shape.kind.buffer();
            self.out.extend_from_slice(&body[..(size as usize).min(body.len())]);
            if self.out.len() >= BATCH_MAX {
                self.flush().await?;
            }
        } else {
            let mut pending = Buf::chain(&self.out[..], CycledBody::new(shape.kind, size));
            self.stream.write_all_buf(&mut pending).await?;
            self.out.clear();
        }
        Ok(())
    }

    fn write_json(&mut self, head: &RequestHead, body: &[u8], received: Option<u64>, close: bool) {
        ResponseHead {
            status: 200,
            content_type: "application/json",
            length: BodyLength::Length(body.len() as u64),
            cache: None,
            received,
            close,
            announce_keep_alive: head.http10 && !close,
            extra: None,
        }
        .write(&self.shared.origin_header, &mut self.out);
        if !head.is_head {
            self.out.extend_from_slice(body);
        }
    }

    /// Queues a 400 that closes the connection; the caller stops reading requests.
    fn bad_request(&mut self, reason: &str) {
        let body_len = "bad request: ".len() + reason.len() + 1;
        ResponseHead {
            status: 400,
            content_type: "text/plain; charset=utf-8",
            length: BodyLength::Length(body_len as u64),
            cache: None,
            received: None,
            close: true,
            announce_keep_alive: false,
            extra: None,
        }
        .write(&self.shared.origin_header, &mut self.out);
        self.out.extend_from_slice(b"bad request: ");
        self.out.extend_from_slice(reason.as_bytes());
        self.out.push(b'\n');
        self.closing_early = true;
        tracing::debug!(peer = %self.peer, reason, "origin answered 400");
    }

    /// Reads more bytes into `buf`; the peer closing mid-body is an error.
    async fn fill(&mut self) -> io::Result<()> {
        self.buf.reserve(READ_CHUNK);
        if self.stream.read_buf(&mut self.buf).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(())
    }

    async fn flush(&mut self) -> io::Result<()> {
        if !self.out.is_empty() {
            self.stream.write_all(&self.out).await?;
            self.out.clear();
        }
        Ok(())
    }

    /// Half-closes, then discards what the peer still sends for a while, so that closing
    /// with unread bytes does not turn into a reset that could destroy the last response.
    async fn linger(&mut self) -> io::Result<()> {
        self.stream.shutdown().await?;
        let drain = async {
            let mut scratch = [0u8; 4096];
            while self.stream.read(&mut scratch).await? > 0 {}
            Ok::<(), io::Error>(())
        };
        match tokio::time::timeout(LINGER, drain).await {
            Ok(result) => result,
            Err(_elapsed) => Ok(()),
        }
    }
}

fn malformed() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "malformed chunked body")
}
