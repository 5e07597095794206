//! [`Prefixed`]: a client connection whose first bytes were already read (the
//! h2c preface, read by [`crate::front`] while telling the protocols apart),
//! and the pass-through write macro its siblings share.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, ReadBuf};

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
}
