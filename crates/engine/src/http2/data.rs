//! Moving message bodies between an in-memory HTTP/1.1 pipe and HTTP/2 DATA
//! frames, within flow control. Used in both directions: by the front end's
//! bridge (client streams) and by HTTP/2 towards servers
//! ([`crate::upstream::h2`]).
//!
//! HTTP/1.1 framing (length or chunked) is removed on the way to DATA frames
//! and added on the way back; trailers are not carried either way.

use std::future::Future;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use h2::{Reason, RecvStream, SendStream};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use switchyard_http::chunked::ChunkedScanner;
use switchyard_http::parse::Framing;

/// Bytes read from the pipe at once.
const READ_CHUNK: usize = 16 * 1024;

/// How sending on a stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// The message went out whole.
    Done,
    /// The peer reset the stream (counted by the rapid-reset defence on client streams).
    PeerReset,
    /// The message could not be completed.
    Failed,
}

/// Why [`recv_to_pipe`] stopped before the end of the body.
#[derive(Debug)]
pub(crate) enum RecvFailed {
    /// The stream failed (reset by the peer, or with its connection).
    Stream(h2::Error),
    /// The pipe's reader went away.
    Stopped,
}

/// Moves a body from DATA frames into the pipe, in chunked coding when
/// `chunked`, releasing each frame's flow-control capacity once the pipe has
/// taken it (so a slow reader slows the peer down, within its window).
/// Trailers are not forwarded: a chunked body ends without them.
pub(crate) async fn recv_to_pipe(
    body: &mut RecvStream,
    pipe: &mut DuplexStream,
    chunked: bool,
) -> Result<(), RecvFailed> {
    while let Some(data) = body.data().await {
        let data = data.map_err(RecvFailed::Stream)?;
        let n = data.len();
        let written = if chunked && n > 0 {
            let size = format!("{n:x}\r\n");
            let mut ok = pipe.write_all(size.as_bytes()).await.is_ok();
            ok = ok && pipe.write_all(&data).await.is_ok();
            ok && pipe.write_all(b"\r\n").await.is_ok()
        } else {
            pipe.write_all(&data).await.is_ok()
        };
        if !written {
            return Err(RecvFailed::Stopped);
        }
        let _ = body.flow_control().release_capacity(n);
    }
    if chunked && pipe.write_all(b"0\r\n\r\n").await.is_err() {
        return Err(RecvFailed::Stopped);
    }
    Ok(())
}

/// Streams an HTTP/1.1 message body of `framing` from the pipe (`buf` holds
/// what was already read) as DATA frames, END_STREAM on the last: the
/// response body towards a client, the request body towards a server.
pub(crate) async fn body(
    pipe: &mut DuplexStream,
    buf: &mut BytesMut,
    send: &mut SendStream<Bytes>,
    framing: Framing,
    idle: Duration,
) -> Ended {
    let mut remaining = match framing {
        Framing::Length(n) => Some(n),
        _ => None,
    };
    let mut chunked = (framing == Framing::Chunked).then(ChunkedScanner::new);
    loop {
        // Take the payload out of what was read.
        let payload = if let Some(scanner) = chunked.as_mut() {
            let mut out = BytesMut::new();
            match scanner.scan_with(buf, |run| out.extend_from_slice(&buf[run])) {
                Ok(consumed) => buf.advance(consumed),
                Err(_) => return Ended::Failed,
            }
            out.freeze()
        } else if let Some(n) = remaining.as_mut() {
            let take = buf.len().min(usize::try_from(*n).unwrap_or(usize::MAX));
            *n -= take as u64;
            buf.split_to(take).freeze()
        } else {
            buf.split().freeze()
        };
        let finished = remaining == Some(0) || chunked.as_ref().is_some_and(ChunkedScanner::is_done);
        if let Err(ended) = send_data(send, payload, finished, idle).await {
            return ended;
        }
        if finished {
            return Ended::Done;
        }
        buf.reserve(READ_CHUNK);
        match unless_reset(|cx| send.poll_reset(cx), pipe.read_buf(buf)).await {
            Err(ended) => return ended,
            // The writer closes the pipe to end a body without a length.
            Ok(Ok(0)) if framing == Framing::UntilClose => {
                return send_data(send, Bytes::new(), true, idle).await.err().unwrap_or(Ended::Done)
            }
            Ok(Ok(0)) | Ok(Err(_)) => return Ended::Failed,
            Ok(Ok(_)) => {}
        }
    }
}

/// Sends `data` as DATA frames as the peer's flow-control window allows,
/// waiting at most `idle` for each window opening.
pub(crate) async fn send_data(
    send: &mut SendStream<Bytes>,
    mut data: Bytes,
    end: bool,
    idle: Duration,
) -> Result<(), Ended> {
    let mut ended = false;
    while !data.is_empty() {
        send.reserve_capacity(data.len());
        let granted = tokio::time::timeout(idle, std::future::poll_fn(|cx| send.poll_capacity(cx))).await;
        let n = match granted {
            Ok(Some(Ok(n))) => n,
            // A peer that keeps its window closed is treated like one that stops reading.
            Err(_) => return Err(Ended::Failed),
            Ok(Some(Err(e))) if e.is_reset() && e.is_remote() => return Err(Ended::PeerReset),
            Ok(Some(Err(_))) | Ok(None) => return Err(Ended::Failed),
        };
        if n == 0 {
            continue;
        }
        let chunk = data.split_to(n.min(data.len()));
        ended = end && data.is_empty();
        if send.send_data(chunk, ended).is_err() {
            return Err(Ended::Failed);
        }
    }
    if end && !ended {
        // Nothing was left to carry END_STREAM: an empty frame does.
        send.send_data(Bytes::new(), true).map_err(|_| Ended::Failed)?;
    }
    Ok(())
}

/// Runs `work` unless the stream is reset first: by the peer
/// (`Err(PeerReset)`) or with its connection (`Err(Failed)`).
pub(crate) async fn unless_reset<F: Future>(
    mut poll_reset: impl FnMut(&mut Context<'_>) -> Poll<Result<Reason, h2::Error>>,
    work: F,
) -> Result<F::Output, Ended> {
    tokio::pin!(work);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = work.as_mut().poll(cx) {
            return Poll::Ready(Ok(out));
        }
        match poll_reset(cx) {
            Poll::Ready(Ok(_)) => Poll::Ready(Err(Ended::PeerReset)),
            Poll::Ready(Err(_)) => Poll::Ready(Err(Ended::Failed)),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}
