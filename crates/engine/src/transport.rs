//! What the HTTP codecs need from a connection, whatever carries it (plain
//! TCP, TLS, an HTTP/2 stream): bytes both ways, a borrowed split for
//! full-duplex relaying, a wait for readability that holds no buffer (so an
//! idle keep-alive connection costs no scratch), a non-blocking first write
//! ([`Sink`]), and the facts of the transport the pipeline routes and
//! reports on ([`Transport`]).
//!
//! A plain [`TcpStream`] implements them with zero-cost borrowed halves; TLS
//! connections implement them in [`crate::tls`], server connections in
//! [`crate::upstream`].

use std::future::Future;
use std::io;
use std::net::SocketAddr;

use std::io::IoSlice;
use tokio::io::{AsyncRead, AsyncWrite};

use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::TcpStream;

/// Facts about the connection's transport the pipeline reports and routes on.
#[derive(Debug, Clone, Default)]
pub struct Transport {
    /// The connection is TLS (scheme `https` in forwarding headers).
    pub secure: bool,
    /// Whether a client certificate was presented and verified (mTLS).
    pub client_cert_verified: bool,
    /// Subject of the verified client certificate (RFC 4514 text), for the
    /// `X-Client-Cert-Subject` header; empty when none.
    pub client_cert_subject: String,
    /// The request arrived on an HTTP/2 stream ([`crate::http2`]): logged as
    /// `HTTP/2`, and the stream is not counted as a connection of its own.
    pub http2: bool,
    /// The application protocol ALPN chose (`h2` or `http/1.1`); `None`
    /// without TLS or when the client offered none.
    pub alpn: Option<&'static str>,
    /// Client protection refused the connection ([`crate::protection`]):
    /// each request on it is answered with the refusal's status, then it closes.
    pub refused: Option<switchyard_http::error::Refusal>,
}

/// A client connection the HTTP/1.1 pipeline can serve.
pub trait ClientStream: AsyncRead + AsyncWrite + Sink + Unpin {
    /// The read half of [`ClientStream::halves`].
    type Rd<'a>: AsyncRead + Unpin
    where
        Self: 'a;
    /// The write half of [`ClientStream::halves`].
    type Wr<'a>: Sink
    where
        Self: 'a;

    /// Borrows both directions at once (full-duplex body relay).
    fn halves(&mut self) -> (Self::Rd<'_>, Self::Wr<'_>);

    /// Resolves when a read would make progress (data, end of stream or an
    /// error), without reading.
    fn ready(&self) -> impl Future<Output = io::Result<()>>;

    /// The local address the client connected to.
    fn local(&self) -> io::Result<SocketAddr>;

    /// Ends the connection politely once the pipeline is done with it (TLS:
    /// `close_notify`). A plain socket just closes when dropped.
    fn close(&mut self) -> impl Future<Output = ()> {
        std::future::ready(())
    }
}

impl ClientStream for TcpStream {
    type Rd<'a> = ReadHalf<'a>;
    type Wr<'a> = WriteHalf<'a>;

    fn halves(&mut self) -> (ReadHalf<'_>, WriteHalf<'_>) {
        self.split()
    }

    fn ready(&self) -> impl Future<Output = io::Result<()>> {
        self.readable()
    }

    fn local(&self) -> io::Result<SocketAddr> {
        self.local_addr()
    }
}

/// A socket half (or whole socket) the relay can write to, with a
/// non-blocking first attempt that spares arming a timer. Streams that
/// cannot write without waiting (TLS) answer `WouldBlock` to both attempts.
pub trait Sink: AsyncWrite + Unpin {
    /// Writes what the socket takes now without waiting.
    fn try_write_now(&self, data: &[u8]) -> io::Result<usize>;
    /// Writes what the socket takes now of two buffers, in one system call.
    fn try_write_two_now(&self, a: &[u8], b: &[u8]) -> io::Result<usize>;
}

impl<T: Sink + ?Sized> Sink for &mut T {
    fn try_write_now(&self, data: &[u8]) -> io::Result<usize> {
        (**self).try_write_now(data)
    }

    fn try_write_two_now(&self, a: &[u8], b: &[u8]) -> io::Result<usize> {
        (**self).try_write_two_now(a, b)
    }
}

impl Sink for TcpStream {
    fn try_write_now(&self, data: &[u8]) -> io::Result<usize> {
        self.try_write(data)
    }

    fn try_write_two_now(&self, a: &[u8], b: &[u8]) -> io::Result<usize> {
        self.try_write_vectored(&[IoSlice::new(a), IoSlice::new(b)])
    }
}

impl Sink for WriteHalf<'_> {
    fn try_write_now(&self, data: &[u8]) -> io::Result<usize> {
        self.try_write(data)
    }

    fn try_write_two_now(&self, a: &[u8], b: &[u8]) -> io::Result<usize> {
        self.try_write_vectored(&[IoSlice::new(a), IoSlice::new(b)])
    }
}
