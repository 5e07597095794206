//! The two byte streams the HTTP/2 front end needs: [`Prefixed`], a client
//! connection whose first bytes were already read (the h2c preface sniffed by
//! the HTTP/1.1 pipeline), and [`Pipe`], the in-memory end of one stream's
//! bridge that the HTTP/1.1 pipeline serves as if it were a client connection.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};

use crate::transport::ClientStream;
use crate::transport::Sink;

/// `impl AsyncWrite for $wrapper<IO>` passing every write through to its
/// field `$field`: for the read-side wrappers of an HTTP/2 connection.
macro_rules! write_through {
    ($wrapper:ident, $field:ident) => {
        impl<IO: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for $wrapper<IO> {
            fn poll_write(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                data: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.$field).poll_write(cx, data)
            }

            fn poll_write_vectored(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                bufs: &[std::io::IoSlice<'_>],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.$field).poll_write_vectored(cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                self.$field.is_write_vectored()
            }

            fn poll_flush(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.$field).poll_flush(cx)
            }

            fn poll_shutdown(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.$field).poll_shutdown(cx)
            }
        }
    };
}
pub(crate) use write_through;

/// A stream that first yields bytes already read from it, then reads on.
/// Writes go straight through.
pub struct Prefixed<IO> {
    pre: BytesMut,
    io: IO,
}

impl<IO> Prefixed<IO> {
    /// `io`, whose next reads return `pre` first.
    pub fn new(pre: BytesMut, io: IO) -> Self {
        Prefixed { pre, io }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Prefixed<IO> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if self.pre.is_empty() {
            return Pin::new(&mut self.io).poll_read(cx, buf);
        }
        let n = self.pre.len().min(buf.remaining());
        buf.put_slice(&self.pre[..n]);
        self.pre.advance(n);
        if self.pre.is_empty() {
            // Release the buffer: it was sized for an HTTP/1.1 head.
            self.pre = BytesMut::new();
        }
        Poll::Ready(Ok(()))
    }
}

write_through!(Prefixed, io);

/// Bytes each direction of a bridge buffers before the writer waits.
const PIPE_BUFFER: usize = 64 * 1024;

/// The pipeline's end of one stream's bridge: it reads the HTTP/1.1 request
/// from `rd` and writes the HTTP/1.1 response to `wr`. HTTP/2 towards servers
/// uses it the other way round: the pipeline writes the request and reads
/// the response ([`crate::upstream::h2`]). Each in-memory stream
/// carries one direction only, so the two halves borrow independently.
pub struct Pipe {
    rd: DuplexStream,
    wr: DuplexStream,
    local: Option<SocketAddr>,
}

/// The bridge's end of a [`Pipe`]: request bytes go into `to_pipeline`,
/// response bytes come out of `from_pipeline`.
pub struct PipeEnd {
    /// Where the bridge writes the request (head already passed separately, then body).
    pub to_pipeline: DuplexStream,
    /// Where the bridge reads the response.
    pub from_pipeline: DuplexStream,
}

impl Pipe {
    /// A connected pair; `local` is the address the client connected to.
    pub fn pair(local: Option<SocketAddr>) -> (Pipe, PipeEnd) {
        let (rd, to_pipeline) = tokio::io::duplex(PIPE_BUFFER);
        let (wr, from_pipeline) = tokio::io::duplex(PIPE_BUFFER);
        (Pipe { rd, wr, local }, PipeEnd { to_pipeline, from_pipeline })
    }
}

impl AsyncRead for Pipe {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.rd).poll_read(cx, buf)
    }
}

impl AsyncWrite for Pipe {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.wr).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.wr).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.wr).poll_shutdown(cx)
    }
}

/// In-memory streams have no non-blocking write outside a task context: the
/// relay falls back to its awaited write.
impl Sink for DuplexStream {
    fn try_write_now(&self, _: &[u8]) -> io::Result<usize> {
        Err(io::ErrorKind::WouldBlock.into())
    }

    fn try_write_two_now(&self, _: &[u8], _: &[u8]) -> io::Result<usize> {
        Err(io::ErrorKind::WouldBlock.into())
    }
}

impl Sink for Pipe {
    fn try_write_now(&self, _: &[u8]) -> io::Result<usize> {
        Err(io::ErrorKind::WouldBlock.into())
    }

    fn try_write_two_now(&self, _: &[u8], _: &[u8]) -> io::Result<usize> {
        Err(io::ErrorKind::WouldBlock.into())
    }
}

impl ClientStream for Pipe {
    type Rd<'a> = &'a mut DuplexStream;
    type Wr<'a> = &'a mut DuplexStream;

    fn halves(&mut self) -> (&mut DuplexStream, &mut DuplexStream) {
        (&mut self.rd, &mut self.wr)
    }

    /// A pipe carries one request whose head is handed over with it, so the
    /// pipeline never waits idle on it: the next read waits instead.
    fn ready(&self) -> impl Future<Output = io::Result<()>> {
        std::future::ready(Ok(()))
    }

    fn local(&self) -> io::Result<SocketAddr> {
        self.local.ok_or_else(|| io::ErrorKind::Unsupported.into())
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn prefixed_reads_the_prefix_first() {
        let (a, mut b) = tokio::io::duplex(64);
        b.write_all(b" world").await.expect("write");
        drop(b);
        let mut s = Prefixed::new(BytesMut::from(&b"hello"[..]), a);
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.expect("read");
        assert_eq!(out, b"hello world");
    }

    #[tokio::test]
    async fn pipe_directions_are_independent() {
        let (mut pipe, mut end) = Pipe::pair(None);
        end.to_pipeline.write_all(b"request").await.expect("write");
        let (rd, wr) = pipe.halves();
        let mut got = [0u8; 7];
        rd.read_exact(&mut got).await.expect("read");
        wr.write_all(b"response").await.expect("write");
        drop(pipe);
        let mut out = Vec::new();
        end.from_pipeline.read_to_end(&mut out).await.expect("read");
        assert_eq!((&got[..], &out[..]), (&b"request"[..], &b"response"[..]));
    }
}
