//! Moving message bodies between an in-memory HTTP/1.1 pipe and HTTP/2 DATA
//! frames, within flow control. Used in both directions: by the front end's
//! bridge (client streams) and by HTTP/2 towards servers
//! (`upstream::h2`).
//!
//! HTTP/1.1 framing (length or chunked) is removed on the way to DATA frames
//! and added on the way back. Trailers cross both ways: HTTP/2 trailers
//! become the chunked body's trailer section, and a trailer section becomes
//! HTTP/2 trailers (a body framed by a length cannot carry them: RFC 9112
//! has trailers only in chunked coding). Fields that must not be trailers
//! (framing, routing and connection fields, RFC 9110 6.5.1) are dropped.

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
/// A chunked body ends with the stream's trailers, if it has any.
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
    if !chunked {
        return Ok(());
    }
    let trailers = body.trailers().await.map_err(RecvFailed::Stream)?;
    let mut end = Vec::with_capacity(64);
    end.extend_from_slice(b"0\r\n");
    for (name, value) in trailers.iter().flatten() {
        if may_trail(name.as_str().as_bytes()) {
            end.extend_from_slice(name.as_str().as_bytes());
            end.extend_from_slice(b": ");
            end.extend_from_slice(value.as_bytes());
            end.extend_from_slice(b"\r\n");
        }
    }
    end.extend_from_slice(b"\r\n");
    pipe.write_all(&end).await.map_err(|_| RecvFailed::Stopped)
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
fn trailer_map(scanner: &ChunkedScanner) -> Option<http::HeaderMap> {
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
    let mut chunked = (framing == Framing::Chunked).then(ChunkedScanner::collecting_trailers);
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
        let trailers = if finished { chunked.as_ref().and_then(trailer_map) } else { None };
        if let Err(ended) = send_data(send, payload, finished && trailers.is_none(), idle).await {
            return ended;
        }
        if let Some(trailers) = trailers {
            // The trailers' HEADERS frame carries END_STREAM.
            return if send.send_trailers(trailers).is_ok() { Ended::Done } else { Ended::Failed };
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

        // HTTP/2 → chunked: the trailer section carries the trailers.
        let (mut to_pipe, mut from_pipe) = tokio::io::duplex(64 * 1024);
        let mut upload = req.into_body();
        recv_to_pipe(&mut upload, &mut to_pipe, true).await.expect("relayed");
        drop(to_pipe);
        let mut text = Vec::new();
        from_pipe.read_to_end(&mut text).await.expect("read");
        assert_eq!(String::from_utf8_lossy(&text), "5\r\nhello\r\n0\r\nx-checksum: abc\r\n\r\n");

        // Chunked → HTTP/2: the trailer section becomes trailers, END_STREAM on them.
        let mut send = respond.send_response(http::Response::new(()), false).expect("head");
        let (mut pipe_in, mut pipe) = tokio::io::duplex(64 * 1024);
        pipe_in.write_all(b"3\r\nabc\r\n0\r\ngrpc-status: 7\r\ngrpc-message: denied\r\n\r\n").await.expect("write");
        let mut buf = BytesMut::new();
        let ended = body(&mut pipe, &mut buf, &mut send, Framing::Chunked, Duration::from_secs(5)).await;
        assert_eq!(ended, Ended::Done);
        let mut down = response.await.expect("response").into_body();
        let mut payload = Vec::new();
        while let Some(data) = down.data().await {
            payload.extend_from_slice(&data.expect("data"));
        }
        assert_eq!(payload, b"abc");
        let trailers = down.trailers().await.expect("trailers").expect("some");
        assert_eq!(trailers.get("grpc-status").map(|v| v.as_bytes()), Some(&b"7"[..]));
        assert_eq!(trailers.get("grpc-message").map(|v| v.as_bytes()), Some(&b"denied"[..]));
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
