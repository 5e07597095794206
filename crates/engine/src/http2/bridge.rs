//! One HTTP/2 stream through the HTTP/1.1 pipeline.
//!
//! The stream's request head is translated to HTTP/1.1 ([`head::request_head`])
//! and handed, with a fresh [`Pipe`], to [`crate::http::serve`] on its own
//! task: every phase (route, persistence, rewrite, pick, forward, log) is the
//! pipeline's, unchanged. The bridge then moves the request body from DATA
//! frames into the pipe (releasing flow-control capacity as the pipeline
//! takes it) while it reads the pipeline's HTTP/1.1 response from the pipe
//! and sends it as HTTP/2 headers and DATA frames within the client's window.
//!
//! The pipeline's own error responses (400, 502, 504...) arrive on the pipe
//! like any response and are translated the same way. A failure after the
//! response head has gone out resets the stream with INTERNAL_ERROR.

use std::future::Future;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::head::{self, RequestBody};
use super::io::Pipe;
use super::Shared;
use crate::http::body::ChunkedScanner;
use crate::http::parse::{self, Framing};

/// Largest response head the pipeline writes on the pipe.
const MAX_RESPONSE_HEAD: usize = 64 * 1024;
/// Bytes read from the pipe at once.
const READ_CHUNK: usize = 16 * 1024;

/// How a stream ended, for the connection's bookkeeping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ended {
    /// The response went out whole.
    Done,
    /// The client reset the stream (counted by the rapid-reset defence).
    ClientReset,
    /// The response could not be completed; the stream was reset.
    Failed,
}

/// Serves one stream: the request through the pipeline, the response back.
pub(super) async fn stream(
    req: http::Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    conn: Rc<Shared>,
) -> Ended {
    let (parts, mut body) = req.into_parts();
    let head_request = parts.method == http::Method::HEAD;
    let mut pre = BytesMut::with_capacity(1024);
    let framing = match head::request_head(&parts, body.is_end_stream(), &mut pre) {
        Ok(framing) => framing,
        Err(_) => {
            respond.send_reset(Reason::PROTOCOL_ERROR);
            return Ended::Failed;
        }
    };
    drop(parts);
    let (local, service) = conn.current();
    let timeouts = local.gen.config.services[service].timeouts;
    let (pipe, mut end) = Pipe::pair(conn.local_addr);
    let pipeline = tokio::task::spawn_local(crate::http::serve(
        pipe,
        conn.peer,
        pre,
        local,
        service,
        conn.worker.clone(),
        conn.transport.clone(),
    ));
    let up = upload(&mut body, &mut end.to_pipeline, framing);
    let down = download(&mut end.from_pipeline, &mut respond, head_request, timeouts.server_response);
    tokio::pin!(up, down);
    let mut uploading = true;
    let ended = loop {
        tokio::select! {
            r = &mut up, if uploading => {
                uploading = false;
                if r == Upload::ClientReset {
                    break Ended::ClientReset;
                }
            }
            r = &mut down => break r,
        }
    };
    if ended == Ended::ClientReset {
        // Nobody is left to answer: stop the request where it is, without a
        // failure log line per reset stream (a reset flood would become a log flood).
        pipeline.abort();
    }
    ended
}

/// How the request body upload ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Upload {
    Done,
    ClientReset,
    /// The pipeline stopped reading (it answered early or failed).
    Stopped,
}

/// Moves the request body from DATA frames into the pipe, releasing each
/// frame's flow-control capacity once the pipeline has taken it.
async fn upload(body: &mut RecvStream, pipe: &mut DuplexStream, framing: RequestBody) -> Upload {
    if framing == RequestBody::None {
        return Upload::Done;
    }
    while let Some(data) = body.data().await {
        let data = match data {
            Ok(data) => data,
            Err(e) if e.is_reset() && e.is_remote() => return Upload::ClientReset,
            Err(_) => return Upload::Stopped,
        };
        let n = data.len();
        let written = match framing {
            RequestBody::Chunked if n > 0 => {
                let size = format!("{n:x}\r\n");
                let mut ok = pipe.write_all(size.as_bytes()).await.is_ok();
                ok = ok && pipe.write_all(&data).await.is_ok();
                ok && pipe.write_all(b"\r\n").await.is_ok()
            }
            _ => pipe.write_all(&data).await.is_ok(),
        };
        if !written {
            return Upload::Stopped;
        }
        let _ = body.flow_control().release_capacity(n);
    }
    // Trailers are not forwarded: the chunked body ends without them.
    if framing == RequestBody::Chunked && pipe.write_all(b"0\r\n\r\n").await.is_err() {
        return Upload::Stopped;
    }
    Upload::Done
}

/// Reads the pipeline's response and sends it on the stream.
async fn download(
    pipe: &mut DuplexStream,
    respond: &mut SendResponse<Bytes>,
    head_request: bool,
    idle: Duration,
) -> Ended {
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let mut fields = Vec::new();
    let head = loop {
        match parse::parse_response(&buf, MAX_RESPONSE_HEAD, &mut fields) {
            Ok(Some(head)) if (100..200).contains(&head.status) && head.status != 101 => {
                // `100 Continue` the pipeline sent for `expect: 100-continue`.
                let interim = head::response_head(&buf, &head, &fields);
                if let Ok(r) = interim {
                    let _ = respond.send_informational(r);
                }
                buf.advance(head.len);
                continue;
            }
            Ok(Some(head)) if head.status >= 200 => break head,
            // The pipeline writes only heads it parsed itself; anything else is a bug.
            Ok(Some(_)) | Err(_) => return reset_early(respond),
            Ok(None) => {}
        }
        buf.reserve(READ_CHUNK);
        match unless_reset(|cx| respond.poll_reset(cx), pipe.read_buf(&mut buf)).await {
            Err(ended) => return ended,
            Ok(Ok(0)) | Ok(Err(_)) => return reset_early(respond),
            Ok(Ok(_)) => {}
        }
    };
    let Ok(response) = head::response_head(&buf, &head, &fields) else {
        return reset_early(respond);
    };
    let framing = if parse::response_has_body(head_request, head.status) { head.framing } else { Framing::Length(0) };
    let empty = framing == Framing::Length(0) || framing == Framing::Empty;
    let mut send = match respond.send_response(response, empty) {
        Ok(send) => send,
        Err(e) if e.is_reset() => return Ended::ClientReset,
        Err(_) => return Ended::Failed,
    };
    if empty {
        return Ended::Done;
    }
    buf.advance(head.len);
    let ended = body(pipe, &mut buf, &mut send, framing, idle).await;
    if ended == Ended::Failed {
        send.send_reset(Reason::INTERNAL_ERROR);
    }
    ended
}

/// Streams the response body from the pipe (`buf` holds what was already
/// read) as DATA frames, END_STREAM on the last.
async fn body(
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
            // The pipeline closes the pipe to end a body without a length.
            Ok(Ok(0)) if framing == Framing::UntilClose => {
                return send_data(send, Bytes::new(), true, idle).await.err().unwrap_or(Ended::Done)
            }
            Ok(Ok(0)) | Ok(Err(_)) => return Ended::Failed,
            Ok(Ok(_)) => {}
        }
    }
}

/// Sends `data` as DATA frames as the client's flow-control window allows,
/// waiting at most `idle` for each window opening.
async fn send_data(send: &mut SendStream<Bytes>, mut data: Bytes, end: bool, idle: Duration) -> Result<(), Ended> {
    let mut ended = false;
    while !data.is_empty() {
        send.reserve_capacity(data.len());
        let granted = tokio::time::timeout(idle, std::future::poll_fn(|cx| send.poll_capacity(cx))).await;
        let n = match granted {
            Ok(Some(Ok(n))) => n,
            // A client that keeps its window closed is treated like one that stops reading.
            Err(_) => return Err(Ended::Failed),
            Ok(Some(Err(e))) if e.is_reset() && e.is_remote() => return Err(Ended::ClientReset),
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

/// Runs `work` unless the stream is reset first: by the client
/// (`Err(ClientReset)`) or with its connection (`Err(Failed)`).
async fn unless_reset<F: Future>(
    mut poll_reset: impl FnMut(&mut Context<'_>) -> Poll<Result<Reason, h2::Error>>,
    work: F,
) -> Result<F::Output, Ended> {
    tokio::pin!(work);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = work.as_mut().poll(cx) {
            return Poll::Ready(Ok(out));
        }
        match poll_reset(cx) {
            Poll::Ready(Ok(_)) => Poll::Ready(Err(Ended::ClientReset)),
            Poll::Ready(Err(_)) => Poll::Ready(Err(Ended::Failed)),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

/// The pipeline ended without a usable response: reset the stream.
fn reset_early(respond: &mut SendResponse<Bytes>) -> Ended {
    respond.send_reset(Reason::INTERNAL_ERROR);
    Ended::Failed
}
