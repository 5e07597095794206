//! A terminated TLS connection as a [`ClientStream`] for the HTTP/1.1 pipeline.
//!
//! Writes go through rustls, which frames them into records: the
//! non-blocking first attempt of [`Sink`] always answers `WouldBlock`, so
//! `body::write_all` takes its async path, which flushes. Reads are ready at
//! once while rustls holds decrypted bytes (or the peer's close), else when
//! the socket is.

use std::io;
use std::net::SocketAddr;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

use crate::transport::{ClientStream, Sink, Source};

/// How long closing a connection may wait to send its `close_notify`.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

fn would_block() -> io::Result<usize> {
    Err(io::ErrorKind::WouldBlock.into())
}

impl Sink for TlsStream<TcpStream> {
    fn try_write_now(&self, _: &[u8]) -> io::Result<usize> {
        would_block()
    }

    fn try_write_two_now(&self, _: &[u8], _: &[u8]) -> io::Result<usize> {
        would_block()
    }
}

impl Sink for WriteHalf<&mut TlsStream<TcpStream>> {
    fn try_write_now(&self, _: &[u8]) -> io::Result<usize> {
        would_block()
    }

    fn try_write_two_now(&self, _: &[u8], _: &[u8]) -> io::Result<usize> {
        would_block()
    }
}

impl Source for ReadHalf<&mut TlsStream<TcpStream>> {}

impl ClientStream for TlsStream<TcpStream> {
    type Rd<'a> = ReadHalf<&'a mut TlsStream<TcpStream>>;
    type Wr<'a> = WriteHalf<&'a mut TlsStream<TcpStream>>;

    fn halves(&mut self) -> io::Result<(Self::Rd<'_>, Self::Wr<'_>)> {
        Ok(tokio::io::split(self))
    }

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let (tcp, conn) = self.get_ref();
        // rustls stops wanting to read while it holds plaintext or has seen
        // the peer's close_notify: a read then makes progress at once.
        if !conn.wants_read() {
            return Poll::Ready(Ok(()));
        }
        tcp.poll_read_ready(cx)
    }

    fn local(&self) -> io::Result<SocketAddr> {
        self.get_ref().0.local_addr()
    }

    /// `close_notify` tells the client the response was not truncated.
    async fn close(&mut self) {
        let _ = tokio::time::timeout(CLOSE_WAIT, self.shutdown()).await;
    }
}
