//! Phases 7 to 9 of a request: the server's response head rewritten and
//! written by the client's head writer ([`write_head`]), the compression
//! decision, and the body relayed to the client ([`respond`]).

use std::cell::Cell;
use std::time::Instant;

use bytes::{Buf, BytesMut};
use switchyard_config::Service;
use switchyard_http::error::{Kind, ProxyError};
use switchyard_http::head_writer::{FieldList, HeadWriter, Http1Head};
use tokio::io::AsyncReadExt;
use tokio::time::timeout_at;

use super::body::{write_all, Body, RelayError};
use super::log::micros;
use super::parse::{Field, Framing, Version};
use super::parts::relay;
use super::{body, cached, compress, parse, rewrite, Client, Failed, Outcome, RequestInfo, Routed, MAX_RESPONSE_HEAD};
use crate::transport::ClientStream;
use crate::upstream::stream::ServerRead;
use crate::worker::Worker;

/// Phase 10's facts of a response relayed (`done`, sent to the server at
/// `sent`): its trace record and span mark, and the compression counters.
pub(super) fn note_response<S>(
    client: &mut Client<S>,
    worker: &Worker,
    grpc_status: Option<u16>,
    sent: tokio::time::Instant,
    done: &Responded,
) {
    client.trace.grpc_status = grpc_status;
    if let Some(span) = &mut client.otel {
        span.responded(sent.into_std(), done.head_us, done.compressed);
    }
    client.trace.response_us = Some(done.head_us);
    client.trace.bytes_out = done.bytes_out;
    client.trace.body_out = done.bytes_out.saturating_sub(done.head_len);
    count_compressed(client, worker, done);
}

/// Adds an encoded response's payload bytes to the service's compression counters.
pub(super) fn count_compressed<S>(client: &Client<S>, worker: &Worker, done: &Responded) {
    if let Some((algorithm, payload_in, payload_out)) = done.compressed {
        let metrics = &client.local.gen.services[client.service];
        metrics.compressed(worker.id, algorithm, payload_in, payload_out);
    }
}

/// Where the response phases write: the client's reused head buffer and field index.
pub(super) struct Response<'a> {
    pub(super) out: &'a mut Vec<u8>,
    pub(super) fields: &'a mut Vec<Field>,
    /// The status of the response head once it went to the client: from
    /// then on a failure can only cut the response short, never answer it.
    pub(super) relayed: &'a Cell<Option<u16>>,
    /// When the request was sent to the server (the response's deadline
    /// counts from it).
    pub(super) sent: tokio::time::Instant,
    /// What persistence adds to or learns from the response.
    pub(super) sticky: Sticky<'a>,
    /// The request's stick-table key (empty: none), for cookie learn.
    pub(super) presented: &'a [u8],
    /// The worker clock when the request went out (for stick-table updates).
    pub(super) now: Instant,
    /// Responses the cache answers instead of the client.
    pub(super) intercept: cached::Intercept,
    /// The gRPC status the response carried (in its head or trailers), when
    /// the request asked for trailers.
    pub(super) grpc_status: Option<u16>,
    /// The port HTTP/3 is advertised on (`Alt-Svc`), when it is.
    pub(super) alt_svc: Option<u16>,
    /// The client asked to close after this response and sent nothing past
    /// its request: the response's last write may leave with the FIN.
    pub(super) last: bool,
}

/// The port to advertise HTTP/3 on in a response to `client`: its
/// listener's own (QUIC takes the UDP side of each TCP listener), for a
/// service with `http3` and a client that did not come by HTTP/3.
pub(super) fn alt_svc<S: ClientStream>(client: &Client<S>, service: &Service) -> Option<u16> {
    if !service.http3.enabled || client.transport.http3 || !client.transport.secure {
        return None;
    }
    client.stream.local().ok().map(|a| a.port())
}

/// Adds `alt-svc: h3=":PORT"; ma=86400` after the status line of the
/// response head at the start of `out`, when there is a `port` to advertise
/// ([`alt_svc`]): on relayed responses and the proxy's own alike (rule
/// answers, errors, cache hits). A head that has an `Alt-Svc` already (a
/// server's own, or one stored with a cached response) keeps it alone.
pub(super) fn add_alt_svc(out: &mut Vec<u8>, port: Option<u16>) {
    if let Some(port) = port {
        Http1Head::new(out).alt_svc(port);
    }
}

/// What phase 7 decided about the response head besides the rules' edits.
#[derive(Clone, Copy)]
pub(super) struct HeadEdits<'a> {
    /// Persistence's cookie to insert.
    pub(super) set_cookie: Option<&'a str>,
    /// The port to advertise HTTP/3 on.
    pub(super) alt_svc: Option<u16>,
    /// `connection: close` (an HTTP/1.1 writer's only).
    pub(super) close: bool,
    /// `connection: keep-alive` for an HTTP/1.0 client.
    pub(super) keep_alive_10: bool,
    /// The body goes decoded from chunked coding (to an HTTP/1.0 client).
    pub(super) dechunk: bool,
    /// Phase 8's compression decision.
    pub(super) decision: Result<compress::Coding, compress::Skip>,
    /// An encoded body goes in chunked coding.
    pub(super) chunked: bool,
}

/// Phases 7 and 8's response head, written by `w` in the same order for
/// every client protocol: the rewrite (hop-by-hop removal, the rules'
/// edits, connection handling), persistence's `set-cookie`, `alt-svc`, the
/// compression edits.
pub(super) fn write_head<W: HeadWriter>(
    w: &mut W,
    raw: &[u8],
    head: &parse::ResponseHead,
    fields: &[Field],
    routed: &Routed<'_>,
    e: HeadEdits<'_>,
) {
    rewrite::write_response_head(w, raw, head, fields, &routed.edits, e.close, e.keep_alive_10, e.dechunk);
    if let Some(cookie) = e.set_cookie {
        w.append(b"set-cookie", cookie.as_bytes());
    }
    if let Some(port) = e.alt_svc {
        w.alt_svc(port);
    }
    match e.decision {
        Ok(coding) => w.encoded(Some(coding), e.chunked),
        Err(compress::Skip::NotAccepted) => w.encoded(None, false),
        Err(compress::Skip::Ineligible) => {}
    }
}

/// Persistence at the response: a cookie to insert, or the pool whose servers'
/// session cookie is learned from their `Set-Cookie` (cookie learn), for `server`.
#[derive(Clone, Copy)]
pub(super) struct Sticky<'a> {
    /// A persistence cookie to add to the response.
    pub(super) set_cookie: Option<&'a str>,
    /// Cookie learn: the pool's persistence, told about the server's `Set-Cookie`.
    pub(super) learn: Option<&'a crate::persist::PoolPersistence>,
    /// The server (index in the pool) that answers.
    pub(super) server: usize,
}

/// What [`respond`] learned about the finished response.
pub(super) struct Responded {
    pub(super) outcome: Outcome,
    pub(super) server_keeps: bool,
    /// The server switched protocols: the connection is now a byte tunnel.
    pub(super) switched: bool,
    /// From the request sent to the response head received, in µs.
    pub(super) head_us: u64,
    /// Bytes sent to the client (head and body).
    pub(super) bytes_out: u64,
    /// Of which the head's (as HTTP/1.1 text, for a header list).
    pub(super) head_len: u64,
    /// An encoded body: the algorithm, payload bytes in and out (metrics).
    pub(super) compressed: Option<(switchyard_config::Encoding, u64, u64)>,
}

/// Phases 7–9: read the response head (skipping interim 1xx responses),
/// rewrite it, decide on compression, and stream the response to the client.
#[allow(clippy::too_many_arguments)]
// Not an `async fn`: its arguments stay in the future's upvars, not copied into
// locals of its state (ADR 0004, "The common path without futures").
#[allow(clippy::manual_async_fn)]
pub(super) fn respond<'a, 'p, 'r, R: ServerRead, W: body::Sink, D: Fn() -> bool>(
    server: &'a mut R,
    buf: &'a mut BytesMut,
    client: &'a mut W,
    response: &'a mut Response<'p>,
    service: &'a Service,
    routed: &'a Routed<'r>,
    info: RequestInfo,
    draining: D,
) -> impl std::future::Future<Output = Result<Responded, Failed>> + use<'a, 'p, 'r, R, W, D> {
    async move {
        let t = &service.timeouts;
        let early = |error| Err(Failed { error, relayed: None });
        let deadline = response.sent + t.server_response;
        // An HTTP/2 stream's heads come decoded: nothing to parse.
        let decoded = server.decodes_heads();
        let head = loop {
            let parsed = if decoded {
                // The server's connection keeps the deadline: no timer per request.
                match std::future::poll_fn(|cx| server.poll_head(cx, buf, response.fields, deadline)).await {
                    Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                        return early(ProxyError::new(Kind::ServerTimeout))
                    }
                    // Nothing of the response came: as a closed connection.
                    Err(_) => return early(ProxyError::retryable(Kind::ServerClosed)),
                    Ok(head) => Ok(Some(head)),
                }
            } else {
                parse::parse_response(buf, MAX_RESPONSE_HEAD, response.fields)
            };
            match parsed {
                Err(error) => return early(error),
                Ok(Some(head)) if head.status == 101 && info.upgrade => {
                    // The switch is relayed: pass the head on; the caller then
                    // tunnels bytes both ways.
                    rewrite::switching_head(response.out, &buf[..head.len], &head, response.fields, &routed.edits);
                    buf.advance(head.len);
                    response.relayed.set(Some(101));
                    if write_all(client, response.out, t.server_response).await.is_err() {
                        return Err(Failed { error: ProxyError::new(Kind::ClientClosed), relayed: Some(101) });
                    }
                    let outcome = Outcome { status: 101, client_keep_alive: false, intercepted: false };
                    let (head_us, bytes_out) = (micros(response.sent.elapsed()), response.out.len() as u64);
                    return Ok(Responded {
                        outcome,
                        server_keeps: false,
                        switched: true,
                        head_us,
                        bytes_out,
                        head_len: bytes_out,
                        compressed: None,
                    });
                }
                Ok(Some(head)) if head.status == 101 => {
                    return early(ProxyError::new(Kind::BadResponse("unexpected protocol switch")))
                }
                Ok(Some(head)) if head.status < 200 => {
                    // Interim responses (103 Early Hints, 102...) go on to an HTTP/1.1
                    // client, hop-by-hop fields removed (RFC 9110 15.2); never to an
                    // HTTP/1.0 one. A 100 is not: the proxy answers `Expect` itself.
                    if head.status != 100 && info.version == Version::Http11 {
                        let (raw, fields) = (&buf[..head.len], &response.fields[..]);
                        let sent = if client.takes_fields() {
                            let mut list = FieldList::default();
                            rewrite::write_response_head(&mut list, raw, &head, fields, &[], false, false, false);
                            client.send_fields(&list).is_ok()
                        } else {
                            rewrite::response_head(response.out, raw, &head, fields, &[], false, false, false);
                            write_all(client, response.out, t.server_response).await.is_ok()
                        };
                        if !sent {
                            return early(ProxyError::new(Kind::ClientClosed));
                        }
                    }
                    buf.advance(head.len);
                    continue;
                }
                Ok(Some(head)) => break head,
                Ok(None) => {}
            }
            buf.reserve(4096);
            let nothing_yet = buf.is_empty();
            match timeout_at(deadline, server.read_buf(buf)).await {
                Err(_) => return early(ProxyError::new(Kind::ServerTimeout)),
                // A server that closes before answering anything has not acted on
                // the request if it was a reused idle connection.
                Ok(Ok(0)) | Ok(Err(_)) if nothing_yet => return early(ProxyError::retryable(Kind::ServerClosed)),
                Ok(Ok(0)) | Ok(Err(_)) => return early(ProxyError::new(Kind::ServerClosed)),
                Ok(Ok(_)) => {}
            }
        };

        let head_us = micros(response.sent.elapsed());

        if response.intercept.takes(head.status) {
            // Cache hook: a 304 to the cache's revalidation, or an error a stale
            // entry covers, is answered by the cache; its head is kept in `out`.
            let bodiless = head.status == 304 || head.framing == Framing::Empty || head.framing == Framing::Length(0);
            let server_keeps = bodiless && head.version == Version::Http11 && !head.connection.close;
            response.out.clear();
            if decoded {
                // The cache keeps the head as HTTP/1.1 text.
                let mut w = Http1Head::new(response.out);
                w.start(head.status, b"");
                for f in response.fields.iter() {
                    w.field(&buf[f.name.clone()], &buf[f.value.clone()]);
                }
                w.end();
            } else {
                response.out.extend_from_slice(&buf[..head.len]);
            }
            buf.advance(head.len);
            let outcome = Outcome { status: head.status, client_keep_alive: info.keep_alive, intercepted: true };
            return Ok(Responded {
                outcome,
                server_keeps,
                switched: false,
                head_us,
                bytes_out: 0,
                head_len: 0,
                compressed: None,
            });
        }

        if info.trailers {
            // A gRPC answer without a body ("trailers-only") has its status in the head.
            response.grpc_status = response
                .fields
                .iter()
                .find(|f| buf[f.name.clone()].eq_ignore_ascii_case(b"grpc-status"))
                .and_then(|f| grpc_status(&buf[f.value.clone()]));
        }

        // Phase 7: response rewrite.
        let body_framing =
            if parse::response_has_body(info.head_method, head.status) { head.framing } else { Framing::Empty };
        let server_keeps = body_framing != Framing::UntilClose
            && match head.version {
                Version::Http11 => !head.connection.close,
                Version::Http10 => head.connection.keep_alive && !head.connection.close,
            };
        // HTTP/1.0 clients do not know chunked coding: they get the payload,
        // delimited by the end of the connection.
        let dechunk = info.version == Version::Http10 && body_framing == Framing::Chunked;
        // Phase 8 (compress) decides here, from the server's head, before the
        // connection handling that depends on it.
        let length = match body_framing {
            Framing::Length(n) => Some(n),
            _ => None,
        };
        let request = compress::RequestFacts {
            accepted: info.accepted,
            head_method: info.head_method,
            switched_off: routed.edits.iter().any(|e| e.no_compress),
        };
        let has_body = body_framing != Framing::Empty;
        let decision = compress::decide(
            service.compression.as_ref(),
            request,
            head.status,
            has_body,
            length,
            &buf[..head.len],
            response.fields,
        );
        let coding = decision.ok();
        // An encoded body's length is unknown: chunked to an HTTP/1.1 client,
        // ended by closing the connection to an HTTP/1.0 one.
        let encoded_until_close = coding.is_some() && info.version == Version::Http10;
        // A drain that began while this request was in flight still tells the
        // client, so it does not send another request on a closing connection.
        let client_keep_alive =
            info.keep_alive && body_framing != Framing::UntilClose && !dechunk && !encoded_until_close && !draining();
        if let Some(p) = response.sticky.learn {
            // Learned before the client sees the cookie, so its next request finds it.
            let set_cookies =
                response.fields.iter().filter(|f| buf[f.name.clone()].eq_ignore_ascii_case(b"set-cookie"));
            let presented = (!response.presented.is_empty()).then_some(response.presented);
            for field in set_cookies {
                p.learn_response(&buf[field.value.clone()], presented, response.sticky.server, response.now);
            }
        }
        let edits = HeadEdits {
            set_cookie: response.sticky.set_cookie,
            alt_svc: response.alt_svc,
            close: !client_keep_alive,
            keep_alive_10: client_keep_alive && info.version == Version::Http10,
            dechunk,
            decision,
            chunked: info.version == Version::Http11,
        };
        // The head in the client's form: a header list for an HTTP/2 stream,
        // HTTP/1.1 bytes in `out` for the others.
        // Room for the server's fields and a few added, so the list grows no more.
        let mut list =
            client.takes_fields().then(|| FieldList::with_capacity(head.len + 256, response.fields.len() + 6));
        let head_len = match list.as_mut() {
            Some(list) => {
                write_head(list, &buf[..head.len], &head, response.fields, routed, edits);
                response.out.clear();
                list.text_len()
            }
            None => {
                let w = &mut Http1Head::new(response.out);
                write_head(w, &buf[..head.len], &head, response.fields, routed, edits);
                response.out.len()
            }
        } as u64;
        buf.advance(head.len);

        // Phase 9: stream the response body, through the coder when compressing.
        if let Some(list) = &list {
            if client.send_fields(list).is_err() {
                return early(ProxyError::new(Kind::ClientClosed));
            }
        }
        response.relayed.set(Some(head.status));
        let outcome = Outcome { status: head.status, client_keep_alive, intercepted: false };
        // The head's bytes are in `out` (HTTP/1.1) or counted apart (a header list).
        let listed = if list.is_some() { head_len } else { 0 };
        let done = |bytes_out: u64, compressed| Responded {
            outcome,
            server_keeps,
            switched: false,
            head_us,
            bytes_out: bytes_out + listed,
            head_len,
            compressed,
        };
        if let Some(coding) = coding {
            let body = Body::unlimited(body_framing).decoded();
            let chunked = info.version == Version::Http11;
            let idle = t.server_response;
            return match compress::relay(response.out, server, buf, client, body, coding, length, chunked, idle).await {
                Ok(coded) => {
                    let algorithm = match coding {
                        compress::Coding::Encode(algorithm, _) => Some(algorithm),
                        compress::Coding::Gunzip => None,
                    };
                    Ok(done(coded.sent, algorithm.map(|a| (a, coded.payload_in, coded.payload_out))))
                }
                Err(e) => Err(response_relay_error(e, head.status)),
            };
        }
        let mut body = if dechunk { Body::unlimited(body_framing).decoded() } else { Body::unlimited(body_framing) };
        if info.trailers {
            body = body.keeping_trailers();
        }
        if response.last {
            body = body.last_on_connection();
        }
        // The body's relay state is made now, in a block allocated now (likely one just
        // freed, still cached), rather than in the request's future, untouched since the
        // request went out (with 500 streams in flight cachegrind finds it cold).
        let relayed = Box::pin(relay(response.out, server, buf, client, &mut body, t.server_response)).await;
        if let Some(status) = body.trailer(b"grpc-status").and_then(grpc_status) {
            response.grpc_status = Some(status);
        }
        match relayed {
            Ok(body_bytes) => Ok(done(response.out.len() as u64 + body_bytes, None)),
            Err(e) => Err(response_relay_error(e, head.status)),
        }
    }
}

/// A `grpc-status` value: a decimal code (0–16 are defined; others are kept
/// as sent, up to 999).
pub(super) fn grpc_status(value: &[u8]) -> Option<u16> {
    if value.is_empty() || value.len() > 3 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// Maps a failure while relaying the response (server → client) to its cause.
pub(super) fn response_relay_error(e: RelayError, status: u16) -> Failed {
    let error = match e {
        RelayError::Read(_) => ProxyError::new(Kind::ServerClosed),
        RelayError::ReadTimeout => ProxyError::new(Kind::ServerTimeout),
        RelayError::Framing(why) => ProxyError::new(Kind::BadResponse(why)),
        RelayError::Write(_) | RelayError::WriteTimeout | RelayError::TooLarge => ProxyError::new(Kind::ClientClosed),
    };
    Failed { error, relayed: Some(status) }
}

/// Maps a failure while relaying the request (client → server) to its cause.
pub(super) fn request_relay_error(e: RelayError) -> ProxyError {
    match e {
        RelayError::Read(_) => ProxyError::new(Kind::ClientClosed),
        RelayError::ReadTimeout => ProxyError::new(Kind::ClientBodyTimeout),
        RelayError::Framing(why) => ProxyError::new(Kind::BadRequest(why)),
        RelayError::TooLarge => ProxyError::new(Kind::BodyTooLarge),
        // The server may not have seen the request at all; replay is decided
        // by the caller from the request's method and body.
        RelayError::Write(_) | RelayError::WriteTimeout => ProxyError::retryable(Kind::ServerClosed),
    }
}
