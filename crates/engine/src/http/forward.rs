//! Phases 5 and 6 of a request: a server picked and a connection to it at
//! hand ([`forward`]: persistence, the balancer, connection limits, the
//! pool's queue, retries), then the request sent and its response awaited
//! on that connection ([`exchange`]); a relayed protocol switch becomes a
//! byte tunnel ([`tunnel`]).

use std::cell::Cell;
use std::time::Instant;

use bytes::BytesMut;
use switchyard_config::{PoolId, Service, UpstreamProtocol};
use switchyard_http::error::{Kind, ProxyError};
use switchyard_http::head_writer::{FieldList, HeadWriter};
use tokio::time::timeout_at;

use super::body::{write_all, Body, RelayError};
use super::log::micros;
use super::parse::Framing;
use super::respond::{alt_svc, note_response, request_relay_error, respond, Response, Sticky};
use super::{bit, parts, redispatchable, Client, Failed, Outcome, RequestInfo, Routed, STREAM_BODY_LIMIT};
use crate::live::{ActiveGuard, PickView};
use crate::transport::ClientStream;
use crate::upstream::UpstreamConn;
use crate::worker::{Local, Worker};
use crate::{cache, upstream};

/// Phase 5 with its retry policy: pick a server (waiting in the pool's queue
/// when every server is at its connection limit), get a connection, run the
/// exchange.
///
/// Retries, at most the pool's `retries` in all, each to a server not tried
/// yet for this request: after a connect failure (nothing was sent), and for
/// an idempotent bodiless request ([`RequestInfo::replayable`]) whose server
/// failed before any response byte. A request that is not replayable (a POST,
/// a body) is never sent twice once its head was written, unless an HTTP/2
/// server provably did not process it (REFUSED_STREAM, above a GOAWAY's
/// last stream id: RFC 9113 8.7) and its whole body is still at hand
/// ([`whole_body`]). Separately, such a retry-safe request that met a dead
/// reused connection is sent once more on a fresh connection to the same
/// server.
// Not an `async fn`: its arguments stay in the future's upvars, not copied into
// locals of its state (ADR 0004, "The common path without futures").
#[allow(clippy::manual_async_fn)]
pub(super) fn forward<'a, 'r, S: ClientStream>(
    client: &'a mut Client<S>,
    service: &'a Service,
    worker: &'a Worker,
    local: &'a Local,
    pool: PoolId,
    routed: &'a Routed<'r>,
    info: RequestInfo,
) -> impl std::future::Future<Output = Result<Outcome, Failed>> + use<'a, 'r, S> {
    async move {
        let pool_cfg = local.gen.config.pool(pool);
        let live = &local.gen.pools[pool.0];
        let persistence = local.gen.persistence.get(pool.0).and_then(Option::as_ref);
        let pool_local = &local.pools[pool.0];
        let mut tried = 0u64;
        let mut retries = 0;
        let mut last_error = None;
        let mut fresh_only = false;
        loop {
            // A server, with one of its connection slots taken. The common case waits for
            // nothing: what it computes is not kept in the request's state (only a wait's
            // future holds its own).
            let (server, _slot) = match (pick_server(routed, live, pool_cfg, pool_local, worker, tried), pool_cfg.queue)
            {
                (Some(picked), _) => picked,
                // Full servers, not failed ones, make a request wait.
                (None, Some(queue)) if last_error.is_none() && live.any_full(pool_cfg, tried) => {
                    let pick = || pick_server(routed, live, pool_cfg, pool_local, worker, tried);
                    match live.queue.wait(queue, pick).await {
                        Ok(picked) => picked,
                        Err(kind) => {
                            let error = ProxyError::new(kind);
                            if matches!(error.kind(), Kind::QueueFull | Kind::QueueTimeout) {
                                tracing::warn!(service = %service.name, pool = %pool_cfg.name, reason = error.reason(), "request refused");
                            }
                            return Err(Failed { error, relayed: None });
                        }
                    }
                }
                // With nothing left to try, the client learns why the last try failed.
                (None, _) => {
                    return Err(Failed { error: last_error.unwrap_or(ProxyError::new(Kind::NoServer)), relayed: None })
                }
            };
            client.trace.upstream = Some((pool.0, server));
            // A connection that carried a PROXY header, or comes from the
            // client's own address (transparent mode), speaks for one client:
            // it is neither taken from nor returned to the shared idle pool.
            let private = pool_cfg.send_proxy.is_some() || pool_cfg.source == switchyard_config::Source::Client;
            // HTTP/2 pools multiplex streams over shared connections instead.
            let h2 = pool_cfg.protocol == UpstreamProtocol::Http2;
            let (mut conn, reused) = match at_hand(client, service, worker, local, pool, server, fresh_only || private)
            {
                Some(conn) => {
                    client.trace.connect_us = None;
                    if let Some(span) = &mut client.otel {
                        span.connected(Instant::now(), true);
                    }
                    (conn, true)
                }
                None => {
                    let connect_started = Instant::now();
                    let addr = pool_cfg.servers[server].addr;
                    let header = if private { proxy_header(pool_cfg, client) } else { Vec::new() };
                    let tls = local.gen.upstream_tls.get(pool.0).and_then(Option::as_ref);
                    let opened = if h2 {
                        let target = upstream::h2::Target {
                            addr,
                            server,
                            tls,
                            connect: service.timeouts.connect,
                            proxy_header: &header,
                            client: client.stream.resets(),
                        };
                        pool_local.h2.stream(target, fresh_only).await
                    } else {
                        let bind = upstream::Bind::of(pool_cfg.source, client.ip);
                        upstream::connect_from(bind, addr, service.timeouts.connect, &header, tls, server)
                            .await
                            .map(|c| (c, false))
                    };
                    match opened {
                        Ok((conn, reused)) => {
                            client.trace.connect_us = (!reused).then(|| micros(connect_started.elapsed()));
                            if let Some(span) = &mut client.otel {
                                span.connected(connect_started, reused);
                            }
                            (conn, reused)
                        }
                        Err(error) => {
                            live.servers[server].metrics.connect_failed(worker.id, error.reason());
                            live.servers[server].observe(pool_cfg.passive.as_ref(), false, error.reason());
                            tracing::warn!(service = %service.name, server = %addr, reason = error.reason(), "connect failed");
                            if retries < pool_cfg.retries {
                                retries += 1;
                                last_error = Some(error);
                                tried |= bit(server);
                                continue;
                            }
                            return Err(Failed { error, relayed: None });
                        }
                    }
                }
            };
            // The server took the request: persistence remembers it.
            let set_cookie = persistence.and_then(|p| {
                let key = (!client.stick_key.is_empty()).then_some(client.stick_key.as_slice());
                p.learn_with(client.ip, key, server, routed.sticky, worker.clock.get());
                p.set_cookie(server, routed.sticky)
            });
            let sticky = Sticky { set_cookie, learn: persistence.filter(|p| p.learned_cookie().is_some()), server };
            // What a server that refuses the request unprocessed leaves to send
            // again elsewhere, whatever the method (HTTP/2 only: RFC 9113 8.7).
            let replay = if h2 && !info.replayable { whole_body(client, info) } else { None };
            let unread = client.buf.len();
            match exchange(client, &mut conn, service, worker, local.gen.number, routed, info, sticky).await {
                Ok((outcome, reusable)) => {
                    let healthy = !crate::live::passive_failure_status(outcome.status);
                    live.servers[server].observe(pool_cfg.passive.as_ref(), healthy, "5xx response");
                    if reusable && !private && conn.stream.poolable() {
                        conn.served += 1;
                        pool_local.idle.borrow_mut().put(
                            server,
                            conn,
                            pool_cfg.max_idle_per_server,
                            worker.clock.get(),
                        );
                    }
                    return Ok(outcome);
                }
                Err(mut failed) => {
                    client.trace.server_reset = conn.stream.h2_reset();
                    if let (Kind::ServerClosed, Some(why)) = (failed.error.kind(), conn.stream.h2_failure()) {
                        // The HTTP/2 side knows more than "closed": a reset, a GOAWAY, bad frames.
                        let kind = Kind::BadResponse(why);
                        failed.error = if failed.error.is_retry_safe() {
                            ProxyError::retryable(kind)
                        } else {
                            ProxyError::new(kind)
                        };
                    }
                    let stale = reused && failed.error.is_retry_safe() && failed.relayed.is_none();
                    if failed.error.side() == switchyard_http::error::Side::Server && !stale {
                        live.servers[server].observe(pool_cfg.passive.as_ref(), false, failed.error.reason());
                    }
                    let unprocessed = failed.relayed.is_none() && replay.is_some() && conn.stream.h2_unprocessed();
                    if failed.relayed.is_some() || !(info.replayable || unprocessed) {
                        return Err(failed);
                    }
                    if let Some(body) = replay.as_deref().filter(|_| unprocessed) {
                        // The body bytes this try took go back in front of the buffer.
                        let taken = unread.saturating_sub(client.buf.len()).min(body.len());
                        put_back(&mut client.buf, &body[..taken]);
                    }
                    if stale && !fresh_only {
                        // A keep-alive connection the server had closed: the same
                        // server, on a new connection.
                        fresh_only = true;
                        continue;
                    }
                    if redispatchable(failed.error.kind()) && retries < pool_cfg.retries {
                        // The final record names the next server: count this one's failure now.
                        live.servers[server].metrics.connect_failed(worker.id, failed.error.reason());
                        if info.replayable {
                            tracing::warn!(
                                service = %service.name, server = %pool_cfg.servers[server].addr,
                                reason = failed.error.reason(), "idempotent request retried on another server"
                            );
                        } else {
                            tracing::warn!(
                                service = %service.name, server = %pool_cfg.servers[server].addr,
                                reason = failed.error.reason(), "request the server did not process retried on another server"
                            );
                        }
                        retries += 1;
                        tried |= bit(server);
                        fresh_only = false;
                        last_error = Some(failed.error);
                        continue;
                    }
                    return Err(failed);
                }
            }
        }
    }
}

/// Phase 5: the server the balancer picks (or persistence names) among those
/// not `tried`, with one of its connection slots taken; `None` when every one
/// is full, down or tried.
pub(super) fn pick_server<'l>(
    routed: &Routed<'_>,
    live: &'l crate::live::PoolLive,
    pool_cfg: &switchyard_config::Pool,
    pool_local: &crate::worker::PoolLocal,
    worker: &Worker,
    tried: u64,
) -> Option<(usize, ActiveGuard<'l>)> {
    let server = match routed.sticky.filter(|&s| live.takes_sticky(pool_cfg, s, tried)) {
        Some(server) => server,
        None => {
            let view = PickView { pool: pool_cfg, live, tried };
            pool_local.balancer.borrow_mut().pick(routed.hash, &view)?
        }
    };
    // Another worker may have taken the last slot since the balancer looked:
    // then the server is full, as if the balancer had seen it so.
    ActiveGuard::take(&live.servers[server], worker.id, pool_cfg.servers[server].max_connections).map(|s| (server, s))
}

/// Phase 5: a connection to `server` at hand, with nothing to wait for — an
/// idle HTTP/1.1 one, or a stream on an open HTTP/2 connection with room —
/// unless the request needs one of its own (`own`: a fresh one after a stale
/// reuse, a private one).
pub(super) fn at_hand<S: ClientStream>(
    client: &Client<S>,
    service: &Service,
    worker: &Worker,
    local: &Local,
    pool: PoolId,
    server: usize,
    own: bool,
) -> Option<UpstreamConn> {
    if own {
        return None;
    }
    let pool_cfg = local.gen.config.pool(pool);
    let pool_local = &local.pools[pool.0];
    if pool_cfg.protocol != UpstreamProtocol::Http2 {
        return pool_local.idle.borrow_mut().take(server, service.timeouts.server_idle, worker.clock.get());
    }
    let target = upstream::h2::Target {
        addr: pool_cfg.servers[server].addr,
        server,
        tls: local.gen.upstream_tls.get(pool.0).and_then(Option::as_ref),
        connect: service.timeouts.connect,
        proxy_header: &[],
        client: client.stream.resets(),
    };
    pool_local.h2.ready(&target)
}

/// Largest request body kept to be sent again after an HTTP/2 server
/// refused the request unprocessed.
pub(super) const REPLAY_MAX: usize = 64 * 1024;

/// A copy of the request body, when all of it is in the client's buffer
/// already and small (empty for a bodiless request): sent again if an
/// HTTP/2 server refuses the request unprocessed. `None` otherwise (a
/// chunked body, one still to come, one the client waits to send until
/// `100 Continue`): such a request is never sent twice.
pub(super) fn whole_body<S>(client: &Client<S>, info: RequestInfo) -> Option<Vec<u8>> {
    let n = match info.framing {
        _ if info.expect_continue => return None,
        Framing::Empty => 0,
        Framing::Length(n) => usize::try_from(n).ok()?,
        Framing::Chunked | Framing::UntilClose => return None,
    };
    (n <= REPLAY_MAX && n <= client.buf.len()).then(|| client.buf[..n].to_vec())
}

/// Puts `taken` back in front of `buf`.
pub(super) fn put_back(buf: &mut BytesMut, taken: &[u8]) {
    if taken.is_empty() {
        return;
    }
    let mut joined = BytesMut::with_capacity(taken.len() + buf.len());
    joined.extend_from_slice(taken);
    joined.extend_from_slice(buf);
    *buf = joined;
}

/// Phases 6–9 on one server connection. On success, also says whether the
/// server connection can go back to the idle pool.
///
/// When the request body is not all sent with the head, the rest is relayed
/// while the response is already being read and streamed back (full duplex):
/// a server may answer before it has read the whole body (echo, streaming
/// APIs, an early 413), and waiting for the body first would deadlock once
/// every socket buffer on the path is full.
#[allow(clippy::too_many_arguments)]
// Not an `async fn`: its arguments stay in the future's upvars, not copied into
// locals of its state (ADR 0004, "The common path without futures").
#[allow(clippy::manual_async_fn)]
pub(super) fn exchange<'a, 'r, 's, S: ClientStream>(
    client: &'a mut Client<S>,
    conn: &'a mut UpstreamConn,
    service: &'a Service,
    worker: &'a Worker,
    gen: u64,
    routed: &'a Routed<'r>,
    info: RequestInfo,
    sticky: Sticky<'s>,
) -> impl std::future::Future<Output = Result<(Outcome, bool), Failed>> + use<'a, 'r, 's, S> {
    async move {
        let t = &service.timeouts;
        let early = |error| Err(Failed { error, relayed: None });
        // `client_body` is HTTP/1.1's slow-POST bound: a whole body within it. An
        // HTTP/2 stream is a stream (gRPC calls stream for as long as they last):
        // only each read's `client_idle` bounds it, and the connection's own
        // defences bound the client.
        // Counted from the head's going out (`Response::sent`): no clock is read for it
        // when the body is all there.
        let body_limit = if client.transport.is_stream() { STREAM_BODY_LIMIT } else { t.client_body };

        // Phase 6: forward the head and what of the body is already here.
        if info.expect_continue {
            let sent = if client.stream.takes_fields() {
                let mut list = FieldList::default();
                list.start(100, b"");
                client.stream.send_fields(&list).map_err(RelayError::Write)
            } else {
                write_all(&mut client.stream, b"HTTP/1.1 100 Continue\r\n\r\n", t.client_idle).await
            };
            if let Err(e) = sent {
                return early(request_relay_error(e));
            }
        }
        let mut upload = match Body::new(info.framing, service.limits.max_body_bytes) {
            Ok(body) => body,
            Err(e) => return early(request_relay_error(e)),
        };
        let sent = match send_request_head_now(client, conn, &upload, info.framing) {
            Ok(sent) => sent,
            Err(e) => return early(request_relay_error(e)),
        };
        if !matches!(sent, HeadSent::Whole) {
            if let Err(e) = send_request_head(client, conn, &mut upload, info.framing, t.client_idle, sent).await {
                return early(request_relay_error(e));
            }
        }
        let relayed = Cell::new(None);
        let alt_svc = alt_svc(client, service);
        let mut response = Response {
            out: &mut client.out,
            fields: &mut client.resp_fields,
            relayed: &relayed,
            sent: tokio::time::Instant::now(),
            sticky,
            presented: &client.stick_key,
            now: worker.clock.get(),
            intercept: client.intercept,
            grpc_status: None,
            alt_svc,
            // Set below where the whole request has been read.
            last: false,
        };
        let draining = || worker.closing(gen, &service.name);
        if upload.is_finished() {
            response.last = !info.keep_alive && client.buf.is_empty();
            // Cache hook: the response is copied as it goes to the client.
            let done = match client.capture.as_mut() {
                Some(capture) => {
                    let mut tee = cache::Tee { inner: &mut client.stream, capture };
                    respond(&mut conn.stream, &mut conn.buf, &mut tee, &mut response, service, routed, info, draining)
                        .await?
                }
                None => {
                    respond(
                        &mut conn.stream,
                        &mut conn.buf,
                        &mut client.stream,
                        &mut response,
                        service,
                        routed,
                        info,
                        draining,
                    )
                    .await?
                }
            };
            let (grpc_status, sent) = (response.grpc_status, response.sent);
            note_response(client, worker, grpc_status, sent, &done);
            if done.switched {
                tunnel(client, conn).await;
                return Ok((done.outcome, false));
            }
            let reusable = done.server_keeps && conn.buf.is_empty();
            return Ok((done.outcome, reusable));
        }

        // Phases 6–9 in full duplex: the rest of the body goes up while the response comes down.
        let (done, complete) = {
            let (mut client_rd, mut client_wr) = client
                .stream
                .halves()
                .map_err(|e| Failed { error: request_relay_error(RelayError::Read(e)), relayed: relayed.get() })?;
            let (mut server_rd, mut server_wr) = conn.stream.split();
            // The whole body within `client_body` (slow-POST), besides each read within `client_idle`.
            let body_deadline = response.sent + body_limit;
            let up = async {
                let pump = parts::pump_any(&mut client_rd, &mut client.buf, &mut server_wr, &mut upload, t.client_idle);
                timeout_at(body_deadline, pump).await.unwrap_or(Err(RelayError::ReadTimeout))
            };
            let down =
                respond(&mut server_rd, &mut conn.buf, &mut client_wr, &mut response, service, routed, info, draining);
            tokio::pin!(up, down);
            let mut up_result = None;
            let done = loop {
                tokio::select! {
                    r = &mut up, if up_result.is_none() => {
                        match r {
                            Ok(()) => up_result = Some(true),
                            // The client stopped sending or sent a bad body: nothing more can be
                            // forwarded. A response already under way is cut short, not answered
                            // with a status of its own in the middle of it.
                            Err(e @ (RelayError::Read(_) | RelayError::ReadTimeout | RelayError::Framing(_) | RelayError::TooLarge)) => {
                                return Err(Failed { error: request_relay_error(e), relayed: relayed.get() });
                            }
                            // The server stopped reading; its response may still come.
                            Err(RelayError::Write(_) | RelayError::WriteTimeout) => up_result = Some(false),
                        }
                    }
                    r = &mut down => break r?,
                }
            };
            // A response that ended before the body was all sent leaves both streams
            // out of step: neither connection can carry another message.
            (done, up_result == Some(true))
        };
        let (grpc_status, sent) = (response.grpc_status, response.sent);
        note_response(client, worker, grpc_status, sent, &done);
        client.trace.bytes_in += upload.total();
        let outcome = Outcome { client_keep_alive: done.outcome.client_keep_alive && complete, ..done.outcome };
        Ok((outcome, done.server_keeps && complete && conn.buf.is_empty()))
    }
}

/// How far phase 6's first step went without waiting ([`send_request_head_now`]).
pub(super) enum HeadSent {
    /// The request is whole on its way: a bodiless one whose head went out.
    Whole,
    /// An HTTP/1.1 head written up to this offset: the rest of it, then the body.
    From(usize),
    /// An HTTP/2 head sent: the body follows.
    Body,
    /// An HTTP/2 stream waits for the server's stream limit before its head.
    Wait,
}

/// Phase 6, first step, without a future: the request head towards an
/// HTTP/2 server's stream when the connection has room, and a bodiless
/// request's HTTP/1.1 head when the socket takes it whole (most requests:
/// nothing of either is written into the request's state).
pub(super) fn send_request_head_now<S>(
    client: &mut Client<S>,
    conn: &mut UpstreamConn,
    upload: &Body,
    framing: Framing,
) -> Result<HeadSent, RelayError> {
    let bodiless = framing == Framing::Empty && upload.is_finished();
    if let upstream::stream::ServerStream::H2(stream) = &mut conn.stream {
        let list = client.up_head.get_or_insert_with(Box::default);
        return match stream.try_send_head(list, framing) {
            None => Ok(HeadSent::Wait),
            Some(Err(e)) => Err(RelayError::Write(e)),
            // A bodiless request is whole once its head went out (END_STREAM).
            Some(Ok(())) if bodiless => Ok(HeadSent::Whole),
            Some(Ok(())) => Ok(HeadSent::Body),
        };
    }
    // The last request on a connection goes out with its end (`send_head`'s way).
    if !bodiless || upload.is_last_on_connection() {
        return Ok(HeadSent::From(0));
    }
    match crate::transport::Sink::try_write_now(&conn.stream, &client.out) {
        Ok(n) if n == client.out.len() => Ok(HeadSent::Whole),
        Ok(n) => Ok(HeadSent::From(n)),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(HeadSent::From(0)),
        Err(e) => Err(RelayError::Write(e)),
    }
}

/// Phase 6, the rest of what [`send_request_head_now`] could not send at
/// once (`sent`): the head (waiting for an HTTP/2 server's stream limit
/// within `idle`), then what of the body is already read.
pub(super) async fn send_request_head<S>(
    client: &mut Client<S>,
    conn: &mut UpstreamConn,
    upload: &mut Body,
    framing: Framing,
    idle: std::time::Duration,
    sent: HeadSent,
) -> Result<(), RelayError> {
    let head = match sent {
        HeadSent::Whole => return Ok(()),
        HeadSent::From(n) => &client.out[n..],
        HeadSent::Body => &[][..],
        HeadSent::Wait => {
            if let upstream::stream::ServerStream::H2(stream) = &mut conn.stream {
                let list = client.up_head.get_or_insert_with(Box::default);
                match crate::transport::within(idle, stream.send_head(list, framing)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => return Err(RelayError::Write(e)),
                    Err(_) => return Err(RelayError::WriteTimeout),
                }
                if framing == Framing::Empty && upload.is_finished() {
                    return Ok(());
                }
            }
            &[][..]
        }
    };
    parts::send_head(head, &mut client.buf, &mut conn.stream, upload, idle).await
}

/// The pool's PROXY protocol header (the client's address) for a new server
/// connection; empty when the pool sends none.
pub(super) fn proxy_header<S: ClientStream>(pool: &switchyard_config::Pool, client: &Client<S>) -> Vec<u8> {
    let local = client.stream.local().unwrap_or(client.peer);
    let mut head = Vec::with_capacity(64);
    match pool.send_proxy {
        Some(switchyard_config::ProxyVersion::V1) => {
            crate::wire::proxy_protocol::encode_v1(client.peer, local, &mut head)
        }
        Some(switchyard_config::ProxyVersion::V2) => {
            let _ = crate::wire::proxy_protocol::encode_v2(client.peer, local, &mut head, &[]);
        }
        None => {}
    }
    head
}

/// After a relayed protocol switch (WebSocket): bytes already read on either
/// side go across first, then both directions are copied until one side
/// closes (its FIN is passed on) or fails. No HTTP framing applies any more.
pub(super) async fn tunnel<S: ClientStream>(client: &mut Client<S>, conn: &mut UpstreamConn) {
    use tokio::io::AsyncWriteExt;
    let pre = (client.buf.len() as u64, conn.buf.len() as u64);
    // The flush matters for TLS (records buffered in rustls); a socket's is a no-op.
    if !conn.buf.is_empty()
        && (client.stream.write_all(&conn.buf).await.is_err() || client.stream.flush().await.is_err())
    {
        return;
    }
    conn.buf.clear();
    if !client.buf.is_empty() && conn.stream.write_all(&client.buf).await.is_err() {
        return;
    }
    client.buf.clear();
    super::log::counted_tunnel(client, &mut conn.stream, pre).await;
}
