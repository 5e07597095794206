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
//! response head has gone out resets the stream: with the server's own
//! RST_STREAM code when the pipeline passed one on ([`Resets`]; also a
//! REFUSED_STREAM before any response), else INTERNAL_ERROR. A client's
//! reset stops the pipeline and is passed on, with its code, to a server
//! stream it opened.

use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use h2::server::SendResponse;
use h2::{Reason, RecvStream};
use tokio::io::{AsyncReadExt, DuplexStream};

use super::Shared;
use crate::translate::data::{body, recv_to_pipe, unless_reset, Ended, RecvFailed};
use crate::translate::head::{self, RequestBody};
use crate::transport::{Pipe, Resets};
use switchyard_http::parse::{self, Framing};

/// Largest response head the pipeline writes on the pipe.
const MAX_RESPONSE_HEAD: usize = 64 * 1024;
/// Bytes read from the pipe at once.
const READ_CHUNK: usize = 16 * 1024;

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
    let scratch = crate::worker::Scratch { buf: pre, ..Default::default() };
    let pipeline = tokio::task::spawn_local(crate::http::serve(
        pipe,
        conn.peer,
        scratch,
        local,
        service,
        conn.worker.clone(),
        conn.transport.clone(),
    ));
    let up = async {
        if framing == RequestBody::None {
            return Ok(());
        }
        recv_to_pipe(&mut body, &mut end.to_pipeline, framing == RequestBody::Chunked).await
    };
    let resets = end.resets.clone();
    let down = download(&mut end.from_pipeline, &mut respond, head_request, timeouts.server_response, &resets);
    let ended = {
        tokio::pin!(up, down);
        let mut uploading = true;
        loop {
            tokio::select! {
                r = &mut up, if uploading => {
                    uploading = false;
                    if let Err(RecvFailed::Stream(e)) = r {
                        if e.is_reset() && e.is_remote() {
                            resets.by_client.set(e.reason().map(u32::from));
                            break Ended::PeerReset;
                        }
                    }
                }
                r = &mut down => break r,
            }
        }
    };
    if ended == Ended::PeerReset {
        if resets.by_client.get().is_none() {
            // Seen while sending: the stream still knows the client's code.
            let mut cx = Context::from_waker(Waker::noop());
            if let Poll::Ready(Ok(reason)) = respond.poll_reset(&mut cx) {
                resets.by_client.set(Some(u32::from(reason)));
            }
        }
        // Nobody is left to answer: stop the request where it is (a server
        // stream it opened is reset with the client's code), without a failure
        // log line per reset stream (a reset flood would become a log flood).
        pipeline.abort();
    }
    ended
}

/// Reads the pipeline's response and sends it on the stream.
async fn download(
    pipe: &mut DuplexStream,
    respond: &mut SendResponse<Bytes>,
    head_request: bool,
    idle: Duration,
    resets: &Resets,
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
            Ok(Some(_)) | Err(_) => return reset_early(respond, resets),
            Ok(None) => {}
        }
        buf.reserve(READ_CHUNK);
        match unless_reset(|cx| respond.poll_reset(cx), pipe.read_buf(&mut buf)).await {
            Err(ended) => return ended,
            Ok(Ok(0)) | Ok(Err(_)) => return reset_early(respond, resets),
            Ok(Ok(_)) => {}
        }
    };
    let Ok(response) = head::response_head(&buf, &head, &fields) else {
        return reset_early(respond, resets);
    };
    let framing = if parse::response_has_body(head_request, head.status) { head.framing } else { Framing::Length(0) };
    let empty = framing == Framing::Length(0) || framing == Framing::Empty;
    let mut send = match respond.send_response(response, empty) {
        Ok(send) => send,
        Err(e) if e.is_reset() => return Ended::PeerReset,
        Err(_) => return Ended::Failed,
    };
    if empty {
        return Ended::Done;
    }
    buf.advance(head.len);
    let ended = body(pipe, &mut buf, &mut send, framing, idle).await;
    if ended == Ended::Failed {
        send.send_reset(reset_reason(resets));
    }
    ended
}

/// The pipeline ended without a usable response: reset the stream.
fn reset_early(respond: &mut SendResponse<Bytes>, resets: &Resets) -> Ended {
    respond.send_reset(reset_reason(resets));
    Ended::Failed
}

/// The code a stream the pipeline could not finish is reset with: the
/// server's own, when the pipeline passed one on, else INTERNAL_ERROR.
fn reset_reason(resets: &Resets) -> Reason {
    resets.to_client.get().map_or(Reason::INTERNAL_ERROR, Reason::from)
}
