//! Message bodies between HTTP/2 frames and the HTTP/1.1 byte form the
//! pipeline relays, as poll functions run inside the task that serves the
//! request: no pipe, no task of their own. Used in both directions: for a
//! client's stream ([`crate::http2`]) and for a stream to a server
//! (`upstream::h2`).
//!
//! [`Inbound`] reads a stream's DATA frames as body bytes — as they came when
//! the message has a length, else in chunked coding with the stream's
//! trailers as the trailer section — and releases each frame's flow-control
//! capacity once the pipeline has read it, so a slow reader slows the peer
//! down within its window. [`Outbound`] takes the body bytes the pipeline
//! writes, removes their HTTP/1.1 framing and sends the payload as DATA frames,
//! END_STREAM on the last, a chunked body's trailer section as HTTP/2 trailers
//! (a body framed by a length cannot carry any: RFC 9112 has trailers only in
//! chunked coding). A write waits for the peer's window before it is taken,
//! so at most one write's payload is buffered beyond the window.
//! Fields that must not be trailers (framing, routing and connection fields,
//! RFC 9110 6.5.1) are dropped both ways.

use std::io;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use h2::{Reason, RecvStream, SendStream};
use tokio::io::ReadBuf;

use switchyard_http::chunked::ChunkedScanner;
use switchyard_http::parse::Framing;

/// An I/O error standing for an HTTP/2 one (kept by its owner for the log).
fn io_error(e: &h2::Error) -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionAborted, e.to_string())
}

/// Where [`Inbound`] is in the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum In {
    Data,
    Trailers,
    Done,
}

/// A stream's received body as HTTP/1.1 body bytes (see the module docs).
pub(crate) struct Inbound {
    recv: Option<RecvStream>,
    chunked: bool,
    /// Bytes ready for the reader.
    pending: Bytes,
    /// Flow-control capacity to release once `pending` has been read.
    release: usize,
    state: In,
    /// The stream's failure, when reading failed.
    error: Option<h2::Error>,
}

impl Inbound {
    /// The body of `recv`, in chunked coding when `chunked`; `prefix` is
    /// read first (a response head written for the pipeline).
    pub(crate) fn new(recv: RecvStream, chunked: bool, prefix: Bytes) -> Self {
        Inbound { recv: Some(recv), chunked, pending: prefix, release: 0, state: In::Data, error: None }
    }

    /// A message without a body: `prefix`, then the end.
    pub(crate) fn empty(prefix: Bytes) -> Self {
        Inbound { recv: None, chunked: false, pending: prefix, release: 0, state: In::Done, error: None }
    }

    /// Why reading failed, when the stream failed.
    pub(crate) fn error(&self) -> Option<&h2::Error> {
        self.error.as_ref()
    }

    /// Reads what is ready into `buf`; nothing added means the end of the body.
    pub(crate) fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        loop {
            if !self.pending.is_empty() {
                let n = self.pending.len().min(buf.remaining());
                buf.put_slice(&self.pending[..n]);
                self.pending.advance(n);
                if self.pending.is_empty() && self.release > 0 {
                    if let Some(recv) = self.recv.as_mut() {
                        let _ = recv.flow_control().release_capacity(self.release);
                    }
                    self.release = 0;
                }
                return Poll::Ready(Ok(()));
            }
            let Some(recv) = self.recv.as_mut() else {
                return Poll::Ready(Ok(()));
            };
            match self.state {
                In::Done => return Poll::Ready(Ok(())),
                In::Data => match recv.poll_data(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Some(Ok(data))) => {
                        self.release = data.len();
                        self.pending = if self.chunked && !data.is_empty() { chunk(&data) } else { data };
                        if self.pending.is_empty() && self.release > 0 {
                            let _ = recv.flow_control().release_capacity(self.release);
                            self.release = 0;
                        }
                    }
                    Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(self.failed(e))),
                    Poll::Ready(None) => self.state = if self.chunked { In::Trailers } else { In::Done },
                },
                In::Trailers => match recv.poll_trailers(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(trailers)) => {
                        self.pending = last_chunk(trailers.as_ref());
                        self.state = In::Done;
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(self.failed(e))),
                },
            }
        }
    }

    fn failed(&mut self, e: h2::Error) -> io::Error {
        let io = io_error(&e);
        self.error = Some(e);
        self.state = In::Done;
        io
    }
}

/// One DATA frame's payload as a chunk.
pub(crate) fn chunk(data: &[u8]) -> Bytes {
    use std::fmt::Write as _;
    let mut out = BytesMut::with_capacity(data.len() + 20);
    // The size line is written in place: no string of its own per frame.
    let _ = write!(out, "{:x}\r\n", data.len());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out.freeze()
}

/// The last chunk, with the trailers HTTP/1.1 may carry as its trailer section.
pub(crate) fn last_chunk(trailers: Option<&http::HeaderMap>) -> Bytes {
    let mut end = BytesMut::with_capacity(64);
    end.extend_from_slice(b"0\r\n");
    for (name, value) in trailers.into_iter().flatten() {
        if may_trail(name.as_str().as_bytes()) {
            end.extend_from_slice(name.as_str().as_bytes());
            end.extend_from_slice(b": ");
            end.extend_from_slice(value.as_bytes());
            end.extend_from_slice(b"\r\n");
        }
    }
    end.extend_from_slice(b"\r\n");
    end.freeze()
}

/// Whether a field may be relayed as a trailer: not one that frames, routes
/// or controls the message or its connection (RFC 9110 6.5.1, RFC 9113 8.2.2).
pub(crate) fn may_trail(name: &[u8]) -> bool {
    const NOT: [&[u8]; 11] = [
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"transfer-encoding",
        b"upgrade",
        b"te",
        b"content-length",
        b"content-encoding",
        b"content-type",
        b"host",
        b"trailer",
    ];
    !name.is_empty() && name[0] != b':' && !NOT.iter().any(|n| name.eq_ignore_ascii_case(n))
}

/// The HTTP/2 trailers for the trailer fields a chunked body ended with;
/// none when it had none (or none HTTP/2 can carry).
pub(crate) fn trailer_map(scanner: &ChunkedScanner) -> Option<http::HeaderMap> {
    let mut map = http::HeaderMap::new();
    for (name, value) in scanner.trailers() {
        if !may_trail(name) {
            continue;
        }
        if let (Ok(name), Ok(value)) = (http::HeaderName::from_bytes(name), http::HeaderValue::from_bytes(value)) {
            map.append(name, value);
        }
    }
    (!map.is_empty()).then_some(map)
}

/// A body the pipeline writes in HTTP/1.1 form, sent as DATA frames (see
/// the module docs).
pub(crate) struct Outbound {
    send: SendStream<Bytes>,
    /// Payload bytes still to come, for a body with a length.
    remaining: Option<u64>,
    /// The chunked coding being removed, for a chunked body.
    chunked: Option<ChunkedScanner>,
    /// END_STREAM went out (or the stream was reset).
    ended: bool,
    /// The stream's failure, when sending failed.
    error: Option<h2::Error>,
}

impl Outbound {
    /// Sends a body of `framing` on `send` (a body ended by closing the
    /// connection ends with [`Outbound::end`]).
    pub(crate) fn new(send: SendStream<Bytes>, framing: Framing) -> Self {
        let remaining = match framing {
            Framing::Length(n) => Some(n),
            _ => None,
        };
        let chunked = (framing == Framing::Chunked).then(ChunkedScanner::collecting_trailers);
        let ended = remaining == Some(0);
        let mut out = Outbound { send, remaining, chunked, ended: false, error: None };
        if ended {
            out.data(Bytes::new(), true);
        }
        out
    }

    /// Whether the whole body went out.
    pub(crate) fn is_ended(&self) -> bool {
        self.ended
    }

    /// Why sending failed, when the stream failed.
    pub(crate) fn error(&self) -> Option<&h2::Error> {
        self.error.as_ref()
    }

    /// Takes what it can of `data` once the peer's window has room.
    pub(crate) fn poll_write(&mut self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        if !self.ended && !data.is_empty() {
            if let Err(e) = std::task::ready!(self.poll_room(cx, data.len())) {
                return Poll::Ready(Err(e));
            }
        }
        Poll::Ready(self.take(data))
    }

    /// Takes what it can of `data` without waiting for the window (h2
    /// buffers the payload until the window opens).
    pub(crate) fn write_now(&mut self, data: &[u8]) -> io::Result<usize> {
        self.take(data)
    }

    /// Resets the stream with `code` unless the body went out whole.
    pub(crate) fn reset(&mut self, code: Reason) {
        if !self.ended {
            self.send.send_reset(code);
            self.ended = true;
        }
    }

    /// Waits until the stream may send more (capacity assigned from both windows).
    fn poll_room(&mut self, cx: &mut Context<'_>, want: usize) -> Poll<io::Result<()>> {
        if self.send.capacity() > 0 {
            return Poll::Ready(Ok(()));
        }
        self.send.reserve_capacity(want);
        loop {
            return match self.send.poll_capacity(cx) {
                Poll::Ready(Some(Ok(_))) if self.send.capacity() > 0 => Poll::Ready(Ok(())),
                // Assigned and used again already: wait for the next window update.
                Poll::Ready(Some(Ok(_))) => continue,
                Poll::Ready(Some(Err(e))) => Poll::Ready(Err(self.failed(e))),
                Poll::Ready(None) => Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
                Poll::Pending => Poll::Pending,
            };
        }
    }

    /// Removes the framing from `data` and sends the payload; returns the
    /// bytes of `data` that belonged to the body.
    fn take(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.ended {
            return if data.is_empty() {
                Ok(0)
            } else {
                Err(io::Error::new(io::ErrorKind::InvalidData, "bytes after the end of the message"))
            };
        }
        if let Some(scanner) = self.chunked.as_mut() {
            let mut payload = BytesMut::new();
            let consumed = scanner
                .scan_with(data, |run| payload.extend_from_slice(&data[run]))
                .map_err(|why| io::Error::new(io::ErrorKind::InvalidData, why))?;
            if scanner.is_done() {
                match trailer_map(scanner) {
                    Some(trailers) => {
                        if !payload.is_empty() {
                            self.data(payload.freeze(), false);
                        }
                        if let Err(e) = self.send.send_trailers(trailers) {
                            return Err(self.failed(e));
                        }
                        self.ended = true;
                    }
                    None => self.data(payload.freeze(), true),
                }
            } else if !payload.is_empty() {
                self.data(payload.freeze(), false);
            }
            return self.result(consumed);
        }
        let n = match self.remaining.as_mut() {
            Some(left) => {
                let n = data.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                *left -= n as u64;
                n
            }
            None => data.len(),
        };
        self.data(Bytes::copy_from_slice(&data[..n]), self.remaining == Some(0));
        self.result(n)
    }

    /// Queues one DATA frame (h2 sends it as the window allows).
    fn data(&mut self, payload: Bytes, end: bool) {
        if payload.is_empty() && !end {
            return;
        }
        if let Err(e) = self.send.send_data(payload, end) {
            self.failed(e);
        }
        self.ended |= end;
    }

    fn result(&self, n: usize) -> io::Result<usize> {
        match &self.error {
            Some(e) => Err(io_error(e)),
            None => Ok(n),
        }
    }

    fn failed(&mut self, e: h2::Error) -> io::Error {
        let io = io_error(&e);
        self.error = Some(e);
        self.ended = true;
        io
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An HTTP/2 client and server connected in memory; the server's first
    /// stream and the client's handle to it.
    async fn pair() -> (h2::client::SendRequest<Bytes>, h2::server::Connection<tokio::io::DuplexStream, Bytes>) {
        let (a, b) = tokio::io::duplex(64 * 1024);
        let server = tokio::spawn(h2::server::handshake(b));
        let (client, conn) = h2::client::handshake(a).await.expect("client handshake");
        tokio::spawn(async move {
            let _ = conn.await;
        });
        (client, server.await.expect("task").expect("server handshake"))
    }

    /// Reads an [`Inbound`] to its end.
    async fn read_all(inbound: &mut Inbound) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let mut space = [0u8; 7];
            let mut buf = ReadBuf::new(&mut space);
            std::future::poll_fn(|cx| inbound.poll_read(cx, &mut buf)).await.expect("read");
            if buf.filled().is_empty() {
                return out;
            }
            out.extend_from_slice(buf.filled());
        }
    }

    #[tokio::test]
    async fn trailers_cross_from_http2_into_chunked_coding_and_back() {
        let (client, mut server) = pair().await;
        let mut client = client.ready().await.expect("ready");
        let request = http::Request::post("http://h/svc/Call").body(()).expect("request");
        let (response, mut up) = client.send_request(request, false).expect("send");
        up.send_data(Bytes::from_static(b"hello"), false).expect("data");
        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-checksum", http::HeaderValue::from_static("abc"));
        // Framing fields are not trailers: dropped on the way.
        trailers.insert("content-length", http::HeaderValue::from_static("5"));
        up.send_trailers(trailers).expect("trailers");
        let (req, mut respond) = server.accept().await.expect("stream").expect("valid");
        tokio::spawn(async move { while std::future::poll_fn(|cx| server.poll_closed(cx)).await.is_ok() {} });

        // HTTP/2 → chunked: the trailer section carries the trailers, after a prefix.
        let mut inbound = Inbound::new(req.into_body(), true, Bytes::from_static(b"HEAD\r\n"));
        let text = read_all(&mut inbound).await;
        assert_eq!(String::from_utf8_lossy(&text), "HEAD\r\n5\r\nhello\r\n0\r\nx-checksum: abc\r\n\r\n");

        // Chunked → HTTP/2, written in pieces that split the framing: the
        // trailer section becomes trailers, END_STREAM on them.
        let send = respond.send_response(http::Response::new(()), false).expect("head");
        let mut outbound = Outbound::new(send, Framing::Chunked);
        let wire = b"3\r\nabc\r\n2\r\nde\r\n0\r\ngrpc-status: 7\r\ngrpc-message: denied\r\n\r\n";
        for piece in wire.chunks(5) {
            let n = std::future::poll_fn(|cx| outbound.poll_write(cx, piece)).await.expect("write");
            assert_eq!(n, piece.len());
        }
        assert!(outbound.is_ended());
        let mut down = response.await.expect("response").into_body();
        let mut payload = Vec::new();
        while let Some(data) = down.data().await {
            payload.extend_from_slice(&data.expect("data"));
        }
        assert_eq!(payload, b"abcde");
        let trailers = down.trailers().await.expect("trailers").expect("some");
        assert_eq!(trailers.get("grpc-status").map(|v| v.as_bytes()), Some(&b"7"[..]));
        assert_eq!(trailers.get("grpc-message").map(|v| v.as_bytes()), Some(&b"denied"[..]));
    }

    #[tokio::test]
    async fn a_body_with_a_length_ends_the_stream_and_refuses_more() {
        let (client, mut server) = pair().await;
        let mut client = client.ready().await.expect("ready");
        let (response, _up) =
            client.send_request(http::Request::get("http://h/").body(()).expect("request"), true).expect("send");
        let (_req, mut respond) = server.accept().await.expect("stream").expect("valid");
        tokio::spawn(async move { while std::future::poll_fn(|cx| server.poll_closed(cx)).await.is_ok() {} });
        let send = respond.send_response(http::Response::new(()), false).expect("head");
        let mut outbound = Outbound::new(send, Framing::Length(4));
        let n = std::future::poll_fn(|cx| outbound.poll_write(cx, b"abcdef")).await.expect("write");
        assert_eq!((n, outbound.is_ended()), (4, true));
        assert!(std::future::poll_fn(|cx| outbound.poll_write(cx, b"ef")).await.is_err(), "past the length");
        let mut down = response.await.expect("response").into_body();
        let mut payload = Vec::new();
        while let Some(data) = down.data().await {
            payload.extend_from_slice(&data.expect("data"));
        }
        assert_eq!(payload, b"abcd");
    }

    #[test]
    fn framing_and_routing_fields_never_trail() {
        for name in ["content-length", "Transfer-Encoding", "host", "te", ":status", "connection", ""] {
            assert!(!may_trail(name.as_bytes()), "{name}");
        }
        for name in ["grpc-status", "grpc-message", "x-checksum", "server-timing"] {
            assert!(may_trail(name.as_bytes()), "{name}");
        }
    }
}
