//! A stream that reports the bytes read and written through it as they
//! pass: byte tunnels (a WebSocket after a relayed protocol switch) copy
//! through it so their traffic shows in the metrics while they are open,
//! not only when they close.
//!
//! Invariant: the tally is called once per completed read or write with the
//! byte count of that call (never 0), on the task that polls the stream.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// `inner`, with `tally(read, written)` called as bytes go through.
pub struct Counted<'a, S, F> {
    inner: &'a mut S,
    tally: F,
    /// Bytes read so far.
    pub read: u64,
    /// Bytes written so far.
    pub written: u64,
}

impl<'a, S, F: FnMut(u64, u64)> Counted<'a, S, F> {
    /// Wraps `inner`; `tally` hears of every read and write.
    pub fn new(inner: &'a mut S, tally: F) -> Self {
        Counted { inner, tally, read: 0, written: 0 }
    }
}

impl<S: AsyncRead + Unpin, F: FnMut(u64, u64) + Unpin> AsyncRead for Counted<'_, S, F> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut *this.inner).poll_read(cx, buf);
        let n = (buf.filled().len() - before) as u64;
        if n > 0 {
            this.read += n;
            (this.tally)(n, 0);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin, F: FnMut(u64, u64) + Unpin> AsyncWrite for Counted<'_, S, F> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut *this.inner).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = polled {
            if n > 0 {
                this.written += n as u64;
                (this.tally)(0, n as u64);
            }
        }
        polled
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::Counted;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn every_byte_each_way_is_tallied_as_it_passes() {
        let (mut near, mut far) = tokio::io::duplex(1024);
        let mut seen = (0, 0);
        let mut counted = Counted::new(&mut near, |r, w| {
            seen.0 += r;
            seen.1 += w;
        });
        counted.write_all(&[7; 100]).await.expect("write");
        far.write_all(b"abc").await.expect("reply");
        let mut got = [0; 3];
        counted.read_exact(&mut got).await.expect("read");
        let (read, written) = (counted.read, counted.written);
        assert_eq!((read, written), (3, 100));
        assert_eq!(seen, (3, 100));
    }
}
