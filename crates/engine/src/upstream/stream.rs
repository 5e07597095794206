//! The byte stream to a server: clear TCP, TLS over TCP (re-encryption), or
//! one HTTP/2 stream ([`super::h2`]: the request head goes in as a list, the
//! response heads come out decoded through [`ServerRead`], the bodies as
//! parts where the client's side frames bodies too, else as bytes); in the
//! in-process tests also an in-memory connection
//! ([`super::memory`]).
//!
//! An enum rather than a generic parameter, so one idle pool holds both kinds
//! and the pipeline is compiled once. The clear path stays what it was: the
//! match is the only added cost, its halves are tokio's borrowed TCP halves
//! (no allocation), and [`Sink`] writes go straight to the socket. TLS writes
//! answer `WouldBlock` to the non-blocking attempts of [`Sink`], so the relay
//! takes its awaiting path, which also flushes buffered TLS records.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use bytes::BytesMut;
use switchyard_http::parse::{Field, ResponseHead};

use super::h2::H2Stream;
use crate::transport::{poll_send_gathered, try_send_gathered, Part, Sink, Source};

/// A connection to a server.
#[derive(Debug)]
pub enum ServerStream {
    /// Clear text.
    Plain(TcpStream),
    /// TLS (boxed: its state is large, and most pools speak clear text).
    Tls(Box<TlsStream<TcpStream>>),
    /// One stream of a shared HTTP/2 connection (pools with `protocol = "h2"`).
    /// Never pooled as idle: the HTTP/2 connection is what is reused.
    H2(Box<H2Stream>),
    /// An in-memory connection to a server of the in-process tests
    /// ([`super::memory`]); pooled like a clear one.
    #[cfg(test)]
    Memory(Box<crate::transport::Pipe>),
}

/// A TLS stream borrowed for one direction of a full-duplex exchange.
type TlsRef<'a> = &'a mut TlsStream<TcpStream>;

/// The read half of [`ServerStream::split`].
#[derive(Debug)]
pub enum ServerRd<'a> {
    /// Clear text.
    Plain(ReadHalf<'a>),
    /// TLS.
    Tls(tokio::io::ReadHalf<TlsRef<'a>>),
    /// The response side of an HTTP/2 stream.
    H2(&'a mut super::h2::Rd),
    /// An in-memory stream of a test server.
    Piped(&'a mut DuplexStream),
}

/// The write half of [`ServerStream::split`].
#[derive(Debug)]
pub enum ServerWr<'a> {
    /// Clear text.
    Plain(WriteHalf<'a>),
    /// TLS.
    Tls(tokio::io::WriteHalf<TlsRef<'a>>),
    /// The request side of an HTTP/2 stream.
    H2(&'a mut super::h2::Wr),
    /// An in-memory stream of a test server.
    Piped(&'a mut DuplexStream),
}

impl ServerStream {
    /// The TCP socket underneath (for liveness checks of idle connections);
    /// none for an HTTP/2 stream.
    pub fn tcp(&self) -> Option<&TcpStream> {
        match self {
            ServerStream::Plain(s) => Some(s),
            ServerStream::Tls(s) => Some(s.get_ref().0),
            ServerStream::H2(_) => None,
            #[cfg(test)]
            ServerStream::Memory(_) => None,
        }
    }

    /// Whether the connection may go back to the idle pool after a complete
    /// exchange: an HTTP/2 stream may not.
    pub fn poolable(&self) -> bool {
        !matches!(self, ServerStream::H2(_))
    }

    /// For an HTTP/2 stream that failed, what the HTTP/2 side said.
    pub fn h2_failure(&self) -> Option<&'static str> {
        match self {
            ServerStream::H2(s) => s.failure(),
            _ => None,
        }
    }

    /// For an HTTP/2 stream that failed, whether the server provably did not
    /// process the request ([`H2Stream::unprocessed`]).
    pub fn h2_unprocessed(&self) -> bool {
        match self {
            ServerStream::H2(s) => s.unprocessed(),
            _ => false,
        }
    }

    /// For an HTTP/2 stream the server reset, its RST_STREAM code.
    pub fn h2_reset(&self) -> Option<u32> {
        match self {
            ServerStream::H2(s) => s.reset(),
            _ => None,
        }
    }

    /// Whether the connection is TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self, ServerStream::Tls(_))
    }

    /// Borrows both directions at once (full-duplex body relay). The clear
    /// halves are free; the TLS halves share the session through tokio's
    /// split (one small allocation, TLS path only).
    pub fn split(&mut self) -> (ServerRd<'_>, ServerWr<'_>) {
        match self {
            ServerStream::Plain(s) => {
                let (r, w) = s.split();
                (ServerRd::Plain(r), ServerWr::Plain(w))
            }
            ServerStream::Tls(s) => {
                let (r, w) = tokio::io::split(&mut **s);
                (ServerRd::Tls(r), ServerWr::Tls(w))
            }
            ServerStream::H2(s) => {
                let (r, w) = s.halves();
                (ServerRd::H2(r), ServerWr::H2(w))
            }
            #[cfg(test)]
            ServerStream::Memory(s) => {
                let (r, w) = (&mut s.rd, &mut s.wr);
                (ServerRd::Piped(r), ServerWr::Piped(w))
            }
        }
    }
}

/// A server connection's response side as the pipeline reads it: bytes
/// whose response heads it parses, or, from an HTTP/2 stream, heads already
/// decoded (no HTTP/1.1 text written and parsed again), then body bytes.
pub trait ServerRead: Source {
    /// Whether response heads come decoded ([`ServerRead::poll_head`])
    /// rather than as bytes to parse.
    fn decodes_heads(&self) -> bool {
        false
    }

    /// Where [`ServerRead::decodes_heads`]: the next response head, interim
    /// ones first. Its names and values are appended to the empty `buf`,
    /// `fields` (cleared first) index them, as a parse of the same head as
    /// HTTP/1.1 would have; the body's bytes are then read as usual. A head
    /// not there `by` then fails the read with `TimedOut` (the connection
    /// keeps the time: the caller arms no timer).
    fn poll_head(
        &mut self,
        _cx: &mut Context<'_>,
        _buf: &mut BytesMut,
        _fields: &mut Vec<Field>,
        _by: tokio::time::Instant,
    ) -> Poll<io::Result<ResponseHead>> {
        Poll::Ready(Err(io::ErrorKind::Unsupported.into()))
    }
}

impl Source for ServerStream {
    fn gives_parts(&self) -> bool {
        matches!(self, ServerStream::H2(s) if s.gives_parts())
    }

    fn poll_part(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Part>> {
        match self {
            ServerStream::H2(s) => s.poll_part(cx),
            _ => Poll::Ready(Err(io::ErrorKind::Unsupported.into())),
        }
    }
}

impl Source for ServerRd<'_> {
    fn gives_parts(&self) -> bool {
        matches!(self, ServerRd::H2(r) if r.gives_parts())
    }

    fn poll_part(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Part>> {
        match self {
            ServerRd::H2(r) => r.poll_part(cx),
            _ => Poll::Ready(Err(io::ErrorKind::Unsupported.into())),
        }
    }
}

impl ServerRead for ServerStream {
    fn decodes_heads(&self) -> bool {
        matches!(self, ServerStream::H2(_))
    }

    fn poll_head(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut BytesMut,
        fields: &mut Vec<Field>,
        by: tokio::time::Instant,
    ) -> Poll<io::Result<ResponseHead>> {
        match self {
            ServerStream::H2(s) => s.poll_head(cx, buf, fields, by),
            _ => Poll::Ready(Err(io::ErrorKind::Unsupported.into())),
        }
    }
}

impl ServerRead for ServerRd<'_> {
    fn decodes_heads(&self) -> bool {
        matches!(self, ServerRd::H2(_))
    }

    fn poll_head(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut BytesMut,
        fields: &mut Vec<Field>,
        by: tokio::time::Instant,
    ) -> Poll<io::Result<ResponseHead>> {
        match self {
            ServerRd::H2(r) => r.poll_head(cx, buf, fields, by),
            _ => Poll::Ready(Err(io::ErrorKind::Unsupported.into())),
        }
    }
}

/// Writes of a stream that cannot be written without waiting (TLS): both
/// non-blocking attempts answer `WouldBlock`.
fn would_block() -> io::Result<usize> {
    Err(io::ErrorKind::WouldBlock.into())
}

impl Sink for ServerStream {
    fn try_write_now(&self, data: &[u8]) -> io::Result<usize> {
        match self {
            ServerStream::Plain(s) => s.try_write(data),
            ServerStream::H2(s) => s.writer().try_write_now(data),
            _ => would_block(),
        }
    }

    fn try_write_two_now(&self, a: &[u8], b: &[u8]) -> io::Result<usize> {
        match self {
            ServerStream::Plain(s) => try_send_gathered(s, &[IoSlice::new(a), IoSlice::new(b)]),
            ServerStream::H2(s) => s.writer().try_write_two_now(a, b),
            _ => would_block(),
        }
    }

    fn takes_parts(&self) -> bool {
        matches!(self, ServerStream::H2(s) if Sink::takes_parts(s.writer()))
    }

    fn poll_send_part(&mut self, cx: &mut Context<'_>, part: &mut Part) -> Poll<io::Result<()>> {
        match self {
            ServerStream::H2(s) => Sink::poll_send_part(s.writer_mut(), cx, part),
            _ => Poll::Ready(Err(io::ErrorKind::Unsupported.into())),
        }
    }
}

impl Sink for ServerWr<'_> {
    fn try_write_now(&self, data: &[u8]) -> io::Result<usize> {
        match self {
            ServerWr::Plain(w) => w.try_write(data),
            ServerWr::H2(w) => w.try_write_now(data),
            ServerWr::Tls(_) | ServerWr::Piped(_) => would_block(),
        }
    }

    fn try_write_two_now(&self, a: &[u8], b: &[u8]) -> io::Result<usize> {
        match self {
            ServerWr::Plain(w) => try_send_gathered(w.as_ref(), &[IoSlice::new(a), IoSlice::new(b)]),
            ServerWr::H2(w) => w.try_write_two_now(a, b),
            ServerWr::Tls(_) | ServerWr::Piped(_) => would_block(),
        }
    }

    fn takes_parts(&self) -> bool {
        matches!(self, ServerWr::H2(w) if Sink::takes_parts(&**w))
    }

    fn poll_send_part(&mut self, cx: &mut Context<'_>, part: &mut Part) -> Poll<io::Result<()>> {
        match self {
            ServerWr::H2(w) => Sink::poll_send_part(&mut **w, cx, part),
            _ => Poll::Ready(Err(io::ErrorKind::Unsupported.into())),
        }
    }
}

impl AsyncRead for ServerStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ServerStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            ServerStream::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
            ServerStream::H2(s) => Pin::new(&mut **s).poll_read(cx, buf),
            #[cfg(test)]
            ServerStream::Memory(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ServerStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ServerStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            ServerStream::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
            ServerStream::H2(s) => Pin::new(&mut **s).poll_write(cx, buf),
            #[cfg(test)]
            ServerStream::Memory(s) => Pin::new(&mut **s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ServerStream::Plain(s) => poll_send_gathered(s, cx, bufs),
            ServerStream::Tls(s) => Pin::new(&mut **s).poll_write_vectored(cx, bufs),
            ServerStream::H2(s) => Pin::new(&mut **s).poll_write_vectored(cx, bufs),
            #[cfg(test)]
            ServerStream::Memory(s) => Pin::new(&mut **s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            ServerStream::Plain(s) => s.is_write_vectored(),
            ServerStream::Tls(s) => s.is_write_vectored(),
            ServerStream::H2(_) => false,
            #[cfg(test)]
            ServerStream::Memory(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ServerStream::Plain(s) => Pin::new(s).poll_flush(cx),
            ServerStream::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
            ServerStream::H2(s) => Pin::new(&mut **s).poll_flush(cx),
            #[cfg(test)]
            ServerStream::Memory(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ServerStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            ServerStream::Tls(s) => Pin::new(&mut **s).poll_shutdown(cx),
            ServerStream::H2(s) => Pin::new(&mut **s).poll_shutdown(cx),
            #[cfg(test)]
            ServerStream::Memory(s) => Pin::new(&mut **s).poll_shutdown(cx),
        }
    }
}

impl AsyncRead for ServerRd<'_> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ServerRd::Plain(r) => Pin::new(r).poll_read(cx, buf),
            ServerRd::Tls(r) => Pin::new(r).poll_read(cx, buf),
            ServerRd::H2(r) => Pin::new(r).poll_read(cx, buf),
            ServerRd::Piped(r) => Pin::new(r).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ServerWr<'_> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ServerWr::Plain(w) => Pin::new(w).poll_write(cx, buf),
            ServerWr::Tls(w) => Pin::new(w).poll_write(cx, buf),
            ServerWr::H2(w) => Pin::new(w).poll_write(cx, buf),
            ServerWr::Piped(w) => Pin::new(w).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ServerWr::Plain(w) => poll_send_gathered(w.as_ref(), cx, bufs),
            ServerWr::Tls(w) => Pin::new(w).poll_write_vectored(cx, bufs),
            ServerWr::H2(w) => Pin::new(w).poll_write_vectored(cx, bufs),
            ServerWr::Piped(w) => Pin::new(w).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            ServerWr::Plain(w) => w.is_write_vectored(),
            ServerWr::Tls(w) => w.is_write_vectored(),
            ServerWr::H2(_) => false,
            ServerWr::Piped(w) => w.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ServerWr::Plain(w) => Pin::new(w).poll_flush(cx),
            ServerWr::Tls(w) => Pin::new(w).poll_flush(cx),
            ServerWr::H2(w) => Pin::new(w).poll_flush(cx),
            ServerWr::Piped(w) => Pin::new(w).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ServerWr::Plain(w) => Pin::new(w).poll_shutdown(cx),
            ServerWr::Tls(w) => Pin::new(w).poll_shutdown(cx),
            ServerWr::H2(w) => Pin::new(w).poll_shutdown(cx),
            ServerWr::Piped(w) => Pin::new(w).poll_shutdown(cx),
        }
    }
}
