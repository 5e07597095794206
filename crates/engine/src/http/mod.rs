//! The HTTP pipeline (HTTP/1.1 and 1.0 connections, each HTTP/2 stream:
//! [`crate::http2`], and each HTTP/3 stream: [`crate::http3`]). One client
//! connection is served by [`serve`]; each request on it goes through these
//! phases, in this order — [`handle`], in this file, calls one function per
//! phase; phases 2–4 are in `request.rs`, 5–6 in `forward.rs`, 7–9 in
//! `respond.rs`, the proxy's own answers and phase 10 after a failure or the
//! cache in `answer.rs`:
//!
//! 1. **read head**: bytes until a complete head, under the header timeout ([`read_head`])
//! 2. **parse**: strict framing checks ([`parse::parse_request`]); what the
//!    later phases need of the request ([`request_info`]); client protection ([`protect`])
//! 3. **route**: rules choose a pool or a direct answer ([`fn@route`], [`pool_or_reply`]);
//!    persistence names the client's server, if any ([`crate::persist`]);
//!    the response cache answers a hit, or plans what to store ([`cache_lookup`])
//! 4. **request rewrite**: hop-by-hop removal, forwarding headers, edits ([`rewrite_request`])
//! 5. **pick server**: persistent server or balancer, connection limits, retries ([`forward`])
//! 6. **forward**: head and streamed body to the server ([`forward::exchange`])
//! 7. **response rewrite**: hop-by-hop removal, edits, connection handling, written by
//!    the client's head writer — HTTP/1.1 bytes, or a header list for an HTTP/2
//!    stream ([`respond::write_head`], [`rewrite::write_response_head`], [`send_own`])
//! 8. **compress**: whether the body is encoded on its way, and the head edits
//!    that go with it ([`compress::decide`], [`compress::rewrite_head`])
//! 9. **stream response**: body relayed to the client ([`parts::relay`]), through
//!    the coder when compressing ([`compress::relay`]), or a byte tunnel after a
//!    relayed protocol switch (WebSocket, [`forward::tunnel`]) — through a [`cache::Tee`]
//!    that copies what the client gets (compressed or not) for the cache, which
//!    then stores it or answers a 304 / covered error itself ([`cached::finish`])
//! 10. **log**: metrics, the access log line, failures at `warn` ([`conclude`], [`log`])
//!
//! Invariants: no peer input can panic this code; a failure of one request
//! closes at most its own client connection and its own server connection.

mod answer;
pub mod body;
mod cached;
pub mod compress;
mod forward;
mod log;
pub mod parts;
#[cfg(test)]
mod pipeline_tests;
mod request;
mod respond;
pub use switchyard_http::parse;
pub use switchyard_http::rewrite;
pub use switchyard_http::route;

use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::rc::Rc;
use std::time::Instant;

use bytes::BytesMut;
use switchyard_config::{Action, HeaderEdits, Service};
use tokio::io::AsyncReadExt;
use tokio::time::timeout_at;

use self::answer::{answer, conclude, fail, send_own, Answer, Own};
use self::forward::forward;
pub(crate) use self::log::CloseGuard as ConnectionGuard;
use self::log::{log, micros, CloseGuard, Trace};
use self::parse::{Field, Framing, HeadLimits, RequestHead, Version};
use self::request::{
    acme_challenge, cache_lookup, pool_or_reply, protect, refuse, request_info, rewrite_request, route, switch_to,
    Reply,
};
use self::respond::alt_svc;
use crate::cache;
pub use crate::transport::{ClientStream, Transport};
use crate::worker::{Local, Scratch, Worker};
use switchyard_http::error::{Kind, ProxyError};
use switchyard_http::request_writer::{Http1Request, RequestList};

/// Initial size of a client connection's read buffer.
const CLIENT_BUF: usize = 4 * 1024;
/// Room for the method and version around a request target at its length
/// limit, before a request line without its end counts as too long.
const URI_SLACK: usize = 32;
/// The whole-body bound of an HTTP/2 stream's upload: none in practice (a
/// year); each read is still bounded by `client_idle`.
const STREAM_BODY_LIMIT: std::time::Duration = std::time::Duration::from_secs(365 * 24 * 3600);
/// Largest response head accepted from a server.
const MAX_RESPONSE_HEAD: usize = 64 * 1024;

/// Most scratch sets a worker keeps for reuse.
pub(crate) const SCRATCH_POOL: usize = 1024;
/// Buffers that grew beyond this (large bodies) are freed rather than pooled.
const SCRATCH_KEEP: usize = 64 * 1024;

/// One client connection's state.
struct Client<S> {
    stream: S,
    peer: SocketAddr,
    /// Bytes read from the client and not yet consumed.
    buf: BytesMut,
    /// Header positions of the current request head.
    fields: Vec<Field>,
    /// A head decoded before the pipeline started (an HTTP/2 stream's),
    /// which the read-head phase takes instead of parsing `buf`.
    decoded: Option<Box<RequestHead>>,
    /// Head sent towards the server or client, rebuilt per message.
    out: Vec<u8>,
    /// The request head towards an HTTP/2 server, as a list (`out` is not
    /// used for it).
    up_head: Option<Box<RequestList>>,
    /// Header positions of the current response head.
    resp_fields: Vec<Field>,
    /// Lower-cased host, when the request's was not already.
    host: String,
    /// "METHOD path" of the current request, for logs.
    line: String,
    /// The client's IP address (IPv4-mapped addresses unmapped), and as text.
    ip: IpAddr,
    ip_text: IpText,
    /// The generation serving the current request, and the connection's
    /// service in it (an index into its `config.services`).
    local: Rc<Local>,
    service: usize,
    /// Index of the worker serving the connection (metrics slots).
    worker: usize,
    /// What the log phase reports about the current request.
    trace: Trace,
    /// Copies of header values the access log needs after the head is gone
    /// from `buf` (host, user agent, referer); filled only when logging.
    meta: Vec<u8>,
    meta_at: [Option<(u32, u32)>; 3],
    /// The header value a header-keyed stick table is updated with.
    stick_key: Vec<u8>,
    /// TLS facts of the connection.
    transport: Transport,
    /// Cache hook: the copy of the response being written to the client
    /// (set for a request the cache may store), and which responses the
    /// cache answers instead of the client ([`cached`]).
    capture: Option<cache::Capture>,
    intercept: cached::Intercept,
    /// The current request's trace context, when tracing is on ([`crate::otel`]);
    /// boxed, so that a connection that waits for its next request does not hold its room.
    otel: Option<Box<crate::otel::RequestSpan>>,
}

/// What the route phase decided, detached from the request buffer.
struct Routed<'a> {
    action: Option<&'a Action>,
    edits: Vec<&'a HeaderEdits>,
    hash: Option<u64>,
    /// The server persistence names for this client, if any (index in the pool).
    sticky: Option<usize>,
    /// `Location` of an HTTP-to-HTTPS redirect.
    https_location: Option<String>,
}

/// Facts about the current request the later phases need.
#[derive(Clone, Copy)]
struct RequestInfo {
    framing: Framing,
    head_method: bool,
    replayable: bool,
    expect_continue: bool,
    keep_alive: bool,
    version: Version,
    /// The client asked for a protocol switch (WebSocket) the proxy will relay.
    upgrade: bool,
    /// The request's `Accept-Encoding`, read only when the service compresses.
    accepted: compress::Accepted,
    /// The client reads trailers (`TE: trailers`, as gRPC clients send):
    /// the response's `grpc-status` is looked for, in its head or trailers.
    trailers: bool,
}

/// How a forwarded request ended, when it did not fail.
struct Outcome {
    status: u16,
    client_keep_alive: bool,
    /// The cache held the response back ([`cached::Intercept`]): nothing went to the client.
    intercepted: bool,
}

/// A failed exchange, and the status of the response head already relayed
/// to the client, if it got one (the log says what the client saw).
struct Failed {
    error: ProxyError,
    relayed: Option<u16>,
}

/// What a connection keeps while it waits for its next request. The rest of
/// a [`Client`] (the scratch buffers, the request's trace and cache hooks)
/// exists only while requests are in progress, inside a boxed future: an
/// idle keep-alive connection's task holds this and its wait, nothing more.
struct Idle<S> {
    stream: S,
    peer: SocketAddr,
    ip: IpAddr,
    ip_text: IpText,
    local: Rc<Local>,
    service: usize,
    worker: usize,
    transport: Transport,
}

impl<S> Idle<S> {
    /// The connection's state while busy; `scratch` holds bytes already
    /// read, or is empty (lent from the worker's pool when bytes arrive).
    fn busy(self, scratch: Scratch) -> Client<S> {
        let Scratch { buf, fields, resp_fields, out, host, line, meta, stick_key, up_head, head } = scratch;
        Client {
            stream: self.stream,
            peer: self.peer,
            buf,
            fields,
            decoded: head,
            resp_fields,
            out,
            up_head,
            host,
            line,
            ip: self.ip,
            ip_text: self.ip_text,
            local: self.local,
            service: self.service,
            worker: self.worker,
            trace: Trace::default(),
            meta,
            meta_at: [None; 3],
            stick_key,
            transport: self.transport,
            capture: None,
            intercept: cached::Intercept::default(),
            otel: None,
        }
    }
}

impl<S> Client<S> {
    /// Back to waiting, once the scratch set went back to the pool: what
    /// only a request needed is dropped.
    fn idle(self) -> Idle<S> {
        Idle {
            stream: self.stream,
            peer: self.peer,
            ip: self.ip,
            ip_text: self.ip_text,
            local: self.local,
            service: self.service,
            worker: self.worker,
            transport: self.transport,
        }
    }
}

/// Serves one client connection until it closes, fails, or the worker drains.
///
/// Each request runs on the generation current when its head arrived; a
/// reload between two requests applies to the next one. A connection whose
/// service a reload removed finishes its request in progress and closes.
/// `scratch` is the connection's working memory if it already has some: its
/// `buf` holds bytes already read from the connection (after a PROXY protocol
/// header, or while [`crate::front`] told HTTP/1.1 from h2c); an empty one
/// (`Scratch::default()`, no allocation) is lent from the worker's pool when
/// the first bytes arrive.
///
/// The connection alternates between waiting ([`Idle`], in this future) and
/// serving the requests whose bytes have arrived ([`Client`], in a boxed
/// future that ends when no byte is left to read): an idle connection's
/// task is a few hundred bytes, whatever a request in progress needs.
///
/// Not an `async fn`: the connection's state is built first and moved into
/// the future once, which keeps an idle connection's future smaller than
/// an `async fn` that keeps its arguments beside what it builds from them.
pub fn serve<S: ClientStream + 'static>(
    stream: S,
    peer: SocketAddr,
    scratch: Scratch,
    local: Rc<Local>,
    service: usize,
    worker: Rc<Worker>,
    transport: Transport,
) -> impl std::future::Future<Output = ()> + 'static {
    let ip = client_ip(peer);
    let mut idle =
        Some(Idle { stream, peer, ip, ip_text: IpText::new(ip), local, service, worker: worker.id, transport });
    // Boxed while it waits for the first busy period: the future keeps a
    // pointer's room for it, not a whole scratch set's, for its whole life.
    let mut pre = (scratch.buf.capacity() > 0).then(|| Box::new(scratch));
    async move {
        // `idle` is kept where it lies, taken only to be moved into the busy
        // future and put back: a local copy would give it a second place.
        let Some(conn) = idle.as_ref().filter(|c| c.service < c.local.gen.config.services.len()) else {
            return;
        };
        let metrics = conn.local.gen.services[conn.service].clone();
        // A request of an HTTP/2 or HTTP/3 stream is not a connection of its own.
        let counted = !conn.transport.is_stream() && !conn.transport.cache_refresh;
        if counted {
            metrics.connection_opened(worker.id);
        }
        let _closed = counted.then(|| CloseGuard(&metrics, worker.id));
        let mut first = true;
        loop {
            let Some(conn) = idle.as_mut() else { return };
            let held = pre.as_ref().is_some_and(|s| !s.buf.is_empty());
            if !held && !wait_idle(conn, &worker, first).await {
                break;
            }
            let Some(conn) = idle.take() else { return };
            let scratch = pre.take().map_or_else(Scratch::default, |s| *s);
            // Written into its allocation, not built here and moved there:
            // a busy future is kilobytes, most of them not yet in use.
            let period = Box::write(Box::new_uninit(), busy(conn, scratch, &worker, first));
            let (conn, open) = Box::into_pin(period).await;
            idle = Some(conn);
            first = false;
            if !open {
                break;
            }
        }
        if let Some(conn) = idle.as_mut() {
            conn.stream.close().await;
        }
    }
}

/// What a stream's request is served with: its connection's client and
/// transport, and the generation and service the stream runs on.
pub struct StreamContext {
    /// The client's address (the stream's connection's).
    pub peer: SocketAddr,
    /// The generation the stream runs on.
    pub local: Rc<Local>,
    /// The service's index in that generation.
    pub service: usize,
    /// The worker serving the connection.
    pub worker: Rc<Worker>,
    /// The connection's transport facts (TLS, HTTP/2 or HTTP/3).
    pub transport: Transport,
}

/// Serves the one request of an HTTP/2 or HTTP/3 stream, whose decoded head
/// is in `scratch`: the busy period of [`serve`] alone, with no wait for a
/// next request (a stream carries one) and no connection counted (the
/// stream's connection is). Boxed here, where it is made: the request's
/// state is written into its box once, with no future of [`serve`]'s and no
/// box of the scratch set in between.
pub fn serve_stream<S: ClientStream + 'static>(
    stream: S,
    scratch: Scratch,
    context: StreamContext,
) -> Pin<Box<dyn std::future::Future<Output = ()>>> {
    let StreamContext { peer, local, service, worker, transport } = context;
    let ip = client_ip(peer);
    let conn = Idle { stream, peer, ip, ip_text: IpText::new(ip), local, service, worker: worker.id, transport };
    // The stream's state is made here and captured: an async block keeps what it captured
    // in place, in the box, where a call to `busy` would move it into its own arguments and
    // then into the state it builds — each move writing lines of the fresh box (a stream
    // starts with its box cold).
    let mut client = conn.busy(scratch);
    let period = Box::write(Box::new_uninit(), async move {
        if client.service < client.local.gen.config.services.len() {
            if !requests(&mut client, &worker, true).await {
                client.buf.clear();
            }
            stash(&mut client, &worker);
        }
    });
    Box::into_pin(period)
}

/// Serves the requests whose bytes have arrived, until the connection would
/// wait for more (`true`) or must close (`false`); the scratch set is back
/// in the worker's pool either way.
async fn busy<S: ClientStream>(conn: Idle<S>, scratch: Scratch, worker: &Rc<Worker>, first: bool) -> (Idle<S>, bool) {
    let mut client = conn.busy(scratch);
    let open = requests(&mut client, worker, first).await;
    if !open {
        // Unread bytes of a closing connection are dropped with it.
        client.buf.clear();
    }
    stash(&mut client, worker);
    (client.idle(), open)
}

/// Waits for the first bytes of the next request without holding any buffer
/// (`client_header` for the connection's first request, `client_idle` after
/// one), in the worker's table of idle connections ([`crate::idle`]: no
/// timer or notification of its own). `false`: close instead — the wait ran
/// out, the peer closed or failed, the worker is draining, or a reload
/// removed the service.
fn wait_idle<'a, S: ClientStream>(
    idle: &'a mut Idle<S>,
    worker: &'a Worker,
    first: bool,
) -> crate::idle::Wait<'a, S, impl FnMut() -> bool + Unpin + 'a> {
    let (local, service) = (&idle.local, idle.service);
    let t = &local.gen.config.services[service].timeouts;
    let deadline = tokio::time::Instant::now() + if first { t.client_header } else { t.client_idle };
    // A reload wakes every idle connection: it may stay if its service does.
    let still = move || {
        let now = worker.local();
        now.gen.number == local.gen.number || now.gen.service_index(&local.gen.config.services[service].name).is_some()
    };
    crate::idle::Wait::new(&mut idle.stream, worker, deadline, still)
}

/// Serves requests on the connection until it closes, fails, is no longer
/// kept alive, the worker drains, its one request is done (a stream of a
/// multiplexed connection) (`false`), or no byte of a next request is left
/// to read (`true`: the connection waits idle in [`serve`]).
// Not an `async fn`: its arguments stay in the future's upvars, not copied into
// locals of its state (ADR 0004, "The common path without futures").
#[allow(clippy::manual_async_fn)]
fn requests<'a, S: ClientStream>(
    client: &'a mut Client<S>,
    worker: &'a Rc<Worker>,
    first: bool,
) -> impl std::future::Future<Output = bool> + use<'a, S> {
    async move {
        let mut first = first;
        loop {
            // Phases 1 and 2: read and parse the head.
            client.trace = Trace::default();
            client.otel = None;
            let (local, index) = (client.local.clone(), client.service);
            // An HTTP/2 stream's head is here, decoded: no read future is made for it.
            let read = match decoded_head(client, &local.gen.config.services[index]) {
                Some(decoded) => decoded.map(|head| Some(HeadAt::Boxed(head))),
                None => read_head(client, &local.gen.config.services[index], worker, first)
                    .await
                    .map(|head| head.map(HeadAt::Parsed)),
            };
            let head = match read {
                Ok(Some(head)) => head,
                Ok(None) => return false,
                Err(error) => {
                    self::log::keep_unparsed(client);
                    fail(client, &local.gen.config.services[index], &error, Instant::now()).await;
                    return false;
                }
            };
            first = false;
            let started = Instant::now();
            client.trace.head_us = client.trace.head_started.map_or(0, |t| micros(started - t));
            let now = worker.local();
            if now.gen.number != client.local.gen.number {
                // A service removed by a reload while this request was arriving
                // still serves it from the generation the connection belongs to.
                if let Some(i) = now.gen.service_index(&client.local.gen.config.services[client.service].name) {
                    (client.local, client.service) = (now, i);
                }
            }
            let (local, index) = (client.local.clone(), client.service);
            let keep_alive = handle(client, &head, &local.gen.config.services[index], worker, &local, started).await;
            if !keep_alive || worker.draining.get() {
                return false;
            }
            if client.buf.is_empty() {
                // A stream of a multiplexed connection, like the cache's refresh,
                // carries one request: it is done, with nothing to wait for.
                return !client.transport.is_stream() && !client.transport.cache_refresh;
            }
        }
    }
}

/// Lends the connection a scratch set from the worker's pool. Inlined: it
/// runs on every request's read-head phase and mostly returns at once.
#[inline]
fn lend<S>(client: &mut Client<S>, worker: &Worker) {
    if client.buf.capacity() > 0 {
        return;
    }
    let s = worker.scratch.take();
    client.buf = s.buf;
    client.fields = s.fields;
    client.resp_fields = s.resp_fields;
    client.out = s.out;
    client.host = s.host;
    client.line = s.line;
    client.meta = s.meta;
    client.stick_key = s.stick_key;
    client.up_head = s.up_head;
    if client.buf.capacity() == 0 {
        client.buf.reserve(CLIENT_BUF);
    }
}

/// Returns the scratch set of an idle or finished connection to the worker's pool.
fn stash<S>(client: &mut Client<S>, worker: &Worker) {
    if !client.buf.is_empty() {
        return;
    }
    // A buffer read (advanced) to its end shows no room though it still
    // holds its allocation (an HTTP/2 or HTTP/3 stream's head fills its
    // buffer exactly): the room is taken back, or the set would look never
    // used and be dropped, and the next stream would allocate it all anew.
    // No room even then: the connection never borrowed a set.
    if !client.buf.try_reclaim(1) {
        return;
    }
    let mut s = Scratch {
        buf: std::mem::take(&mut client.buf),
        fields: std::mem::take(&mut client.fields),
        resp_fields: std::mem::take(&mut client.resp_fields),
        out: std::mem::take(&mut client.out),
        host: std::mem::take(&mut client.host),
        line: std::mem::take(&mut client.line),
        meta: std::mem::take(&mut client.meta),
        stick_key: std::mem::take(&mut client.stick_key),
        up_head: client.up_head.take(),
        head: None,
    };
    if s.buf.capacity() <= SCRATCH_KEEP && s.out.capacity() <= SCRATCH_KEEP {
        s.buf.clear();
        // Another connection's request must not find this one's values.
        s.meta.clear();
        s.stick_key.clear();
        worker.scratch.give(s, SCRATCH_POOL);
    }
}

/// Phase 1 for an HTTP/2 or HTTP/3 stream: its head, decoded by the
/// connection into `buf` and `fields`, with the limits the parser would
/// apply applied. `None` when no decoded head waits (bytes are to be parsed).
fn decoded_head<S>(client: &mut Client<S>, service: &Service) -> Option<Result<Box<RequestHead>, ProxyError>> {
    let head = client.decoded.take()?;
    Some(if head.target.len() > service.limits.max_uri_bytes {
        Err(ProxyError::new(Kind::UriTooLong))
    } else if client.fields.len() > service.limits.max_headers {
        Err(ProxyError::new(Kind::HeaderTooLarge))
    } else {
        Ok(head)
    })
}

/// A request head where phase 1 left it: in the box an HTTP/2 or HTTP/3
/// stream's connection decoded it into (the pipeline keeps the box, not a
/// copy of the head), or parsed from the connection's bytes.
enum HeadAt {
    Boxed(Box<RequestHead>),
    Parsed(RequestHead),
}

impl std::ops::Deref for HeadAt {
    type Target = RequestHead;

    fn deref(&self) -> &RequestHead {
        match self {
            HeadAt::Boxed(head) => head,
            HeadAt::Parsed(head) => head,
        }
    }
}

/// Phase 1: reads until `client.buf` starts with a complete request head.
/// `Ok(None)`: the connection ended cleanly (closed, idle, draining).
async fn read_head<S: ClientStream>(
    client: &mut Client<S>,
    service: &Service,
    worker: &Worker,
    first: bool,
) -> Result<Option<RequestHead>, ProxyError> {
    let limits = HeadLimits { max_bytes: service.limits.max_header_bytes, max_fields: service.limits.max_headers };
    let t = &service.timeouts;
    let wait = if first { t.client_header } else { t.client_idle };
    if let Some(decoded) = decoded_head(client, service) {
        return decoded.map(|head| Some(*head));
    }
    let mut deadline = tokio::time::Instant::now() + wait;
    let mut started = !client.buf.is_empty();
    loop {
        if !client.buf.is_empty() {
            // A request line still incomplete past the URI limit is refused
            // before the head limit (431) would be reached.
            let max_uri = service.limits.max_uri_bytes;
            if client.buf.len() > max_uri + URI_SLACK && memchr::memchr(b'\n', &client.buf).is_none() {
                return Err(ProxyError::new(Kind::UriTooLong));
            }
            if let Some(head) = parse::parse_request(&client.buf, limits, &mut client.fields)? {
                if head.target.len() > max_uri {
                    return Err(ProxyError::new(Kind::UriTooLong));
                }
                return Ok(Some(head));
            }
            if !started {
                // The head's own clock starts with its first byte.
                started = true;
                let now = tokio::time::Instant::now();
                client.trace.head_started = Some(now.into_std());
                deadline = now + t.client_header;
            }
        }
        if client.buf.is_empty() {
            // The wait for these bytes was `wait_idle`'s, before this busy
            // period (draining and reloads included): borrow the buffers now.
            lend(client, worker);
        }
        if client.buf.capacity() - client.buf.len() < 1024 {
            client.buf.reserve(CLIENT_BUF);
        }
        let read = timeout_at(deadline, client.stream.read_buf(&mut client.buf)).await;
        match read {
            Err(_) if client.buf.is_empty() => return Ok(None),
            Err(_) => return Err(ProxyError::new(Kind::ClientHeaderTimeout)),
            Ok(Ok(0)) | Ok(Err(_)) if client.buf.is_empty() => return Ok(None),
            Ok(Ok(0)) | Ok(Err(_)) => return Err(ProxyError::new(Kind::ClientClosed)),
            Ok(Ok(_)) => {}
        }
    }
}

/// Phases 2–10 for one request whose head is at the start of `client.buf`,
/// one function per phase in the order of docs/request-lifecycle.md.
/// Returns whether the client connection stays open for another request.
// Not an `async fn`: its arguments stay in the future's upvars, not copied into
// locals of its state (ADR 0004, "The common path without futures").
#[allow(clippy::manual_async_fn)]
fn handle<'a, S: ClientStream>(
    client: &'a mut Client<S>,
    head: &'a RequestHead,
    service: &'a Service,
    worker: &'a Rc<Worker>,
    local: &'a Local,
    started: Instant,
) -> impl std::future::Future<Output = bool> + use<'a, S> {
    async move {
        // Phase 2: what the later phases need to know of the request.
        let info = request_info(client, head, service, local, started);
        // Phase 2b: client protection, and a declared body over the limit.
        if let Err(why) = protect(client, head, client.service, started) {
            return refuse(client, service, info, head.len, why, started).await;
        }
        if let (Framing::Length(n), Some(max)) = (head.framing, service.limits.max_body_bytes) {
            if n > max {
                fail(client, service, &ProxyError::new(Kind::BodyTooLarge), started).await;
                return false;
            }
        }
        // Phase 3: an ACME http-01 validation is answered before the rules.
        if let Some(key_authorization) = acme_challenge(client, head, service, local) {
            let reply = Answer {
                status: 200,
                location: None,
                content_type: "application/octet-stream",
                body: key_authorization.as_bytes(),
            };
            return answer(client, service, info, head.len, reply, started).await;
        }
        // Phase 3: route — a rule may answer by itself; persistence; the cache.
        let routed = route(client, head, service, worker, local);
        let pool = match pool_or_reply(&routed, service) {
            Ok(Some(pool)) => pool,
            Ok(None) => {
                fail(client, service, &ProxyError::new(Kind::NoPool), started).await;
                return false;
            }
            Err(Reply::Deny(status)) => {
                let body = format!("{status} {}\n", switchyard_http::error::reason_phrase(status));
                let reply = Answer { status, location: None, content_type: "text/plain", body: body.as_bytes() };
                return answer(client, service, info, head.len, reply, started).await;
            }
            Err(Reply::Answer(reply)) => return answer(client, service, info, head.len, reply, started).await,
        };
        let info = match switch_to(client, head, local, pool, info) {
            Ok(info) => info,
            Err(error) => {
                fail(client, service, &error, started).await;
                return false;
            }
        };
        // Without a cache no lookup future is built (its arguments would be written into
        // the request's future for nothing).
        let cached = local.gen.caches.get(client.service).is_some_and(Option::is_some);
        let plan = if !cached {
            None
        } else {
            match cache_lookup(client, head, service, worker, local, &routed, info).await {
                cached::Lookup::Served(keep) => {
                    log(client, service, client.trace.cache_status, None, started);
                    return keep && !worker.closing(local.gen.number, &service.name);
                }
                cached::Lookup::Forward(plan) => plan,
            }
        };
        // Phase 4: request rewrite (and the cache's validators and capture).
        let listed = rewrite_request(client, head, service, local, pool, &routed, info);
        if let Some(plan) = &plan {
            if listed {
                cached::add_validators(&mut **client.up_head.get_or_insert_with(Box::default), plan);
            } else {
                cached::add_validators(&mut Http1Request::new(&mut client.out), plan);
            }
            client.capture = plan.capture();
            client.intercept = plan.intercept(Instant::now());
        }
        // Phases 5–9: pick a server, forward, stream the response.
        let forwarded = forward(client, service, worker, local, pool, &routed, info).await;
        // Phase 10: a response relayed whole, which the cache has no part in, is only logged,
        // here: no future is built for it (its arguments would be written into lines of the
        // request's future that the round trip to the server left cold).
        if let (None, Ok(outcome)) = (&plan, &forwarded) {
            if !outcome.intercepted {
                client.capture = None;
                client.intercept = cached::Intercept::default();
                return relayed(client, service, worker, local, outcome, started);
            }
        }
        // Phase 10 (with the cache's store): log, or answer a failure.
        conclude(client, service, worker, local, info, plan, forwarded, started).await
    }
}

/// Phase 10 for a response relayed to the client: logged; whether the
/// connection stays open.
fn relayed<S>(
    client: &mut Client<S>,
    service: &Service,
    worker: &Worker,
    local: &Local,
    outcome: &Outcome,
    started: Instant,
) -> bool {
    log(client, service, outcome.status, None, started);
    outcome.client_keep_alive && !worker.closing(local.gen.number, &service.name)
}

/// Splits an absolute-form target into (origin-form target, authority).
pub(crate) fn split_target(target: &[u8]) -> (&[u8], Option<&[u8]>) {
    if !parse::has_http_scheme(target) {
        return (target, None);
    }
    let after_scheme = target.iter().position(|&b| b == b':').map_or(0, |i| i + 3);
    let rest = &target[after_scheme.min(target.len())..];
    match rest.iter().position(|&b| b == b'/' || b == b'?') {
        Some(i) if rest[i] == b'/' => (&rest[i..], Some(&rest[..i])),
        // "http://host?q" has an empty path: the origin form is "/?q", which
        // cannot borrow from the target, so keep "/" and lose nothing routable.
        Some(i) => (b"/", Some(&rest[..i])),
        None => (b"/", Some(rest)),
    }
}

/// `https://host[:port]/target` for an HTTP-to-HTTPS redirect.
pub(crate) fn https_location(host: &str, port: Option<u16>, target: &[u8]) -> String {
    let target = String::from_utf8_lossy(target);
    let bare_v6 = host.contains(':') && !host.starts_with('[');
    let host = if bare_v6 { format!("[{host}]") } else { host.to_string() };
    match port {
        Some(port) if port != 443 => format!("https://{host}:{port}{target}"),
        _ => format!("https://{host}{target}"),
    }
}

pub(crate) fn split_query(target: &[u8]) -> (&[u8], Option<&[u8]>) {
    match memchr::memchr(b'?', target) {
        Some(i) => (&target[..i], Some(&target[i + 1..])),
        None => (target, None),
    }
}

fn client_ip(peer: SocketAddr) -> IpAddr {
    match peer.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// The client's address as the forwarding headers write it, kept inline:
/// made for each connection and each HTTP/2 or HTTP/3 stream, it allocates
/// nothing. An IPv4 address is written octet by octet (`to_string` goes
/// through the formatting machinery, about a thousand instructions); 45
/// bytes hold the longest form of either family.
#[derive(Clone, Copy)]
struct IpText {
    len: u8,
    bytes: [u8; 45],
}

impl IpText {
    /// `ip` written as the standard library writes it.
    fn new(ip: IpAddr) -> Self {
        use std::io::Write as _;
        let mut text = IpText { len: 0, bytes: [0; 45] };
        let mut at = 0;
        match ip {
            IpAddr::V4(v4) => {
                let mut digits = itoa::Buffer::new();
                for (i, octet) in v4.octets().into_iter().enumerate() {
                    if i > 0 {
                        text.bytes[at] = b'.';
                        at += 1;
                    }
                    let d = digits.format(octet).as_bytes();
                    text.bytes[at..at + d.len()].copy_from_slice(d);
                    at += d.len();
                }
            }
            IpAddr::V6(v6) => {
                let mut cursor = std::io::Cursor::new(&mut text.bytes[..]);
                // Cannot fail: the longest IPv6 text fits.
                let _ = write!(cursor, "{v6}");
                at = cursor.position() as usize;
            }
        }
        text.len = at as u8;
        text
    }

    /// The text.
    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }
}

/// Bit of server `i` in a request's set of tried servers (servers past the
/// 64th are never marked, so they may be tried again).
fn bit(i: usize) -> u64 {
    if i < 64 {
        1 << i
    } else {
        0
    }
}

/// Whether a failure before any response byte sends an idempotent request to
/// another server: the server closed, reset or answered garbage. Not a
/// response timeout: the server may still be working on it, and waiting as
/// long again elsewhere doubles what the client waits.
fn redispatchable(kind: Kind) -> bool {
    matches!(kind, Kind::ServerClosed | Kind::BadResponse(_) | Kind::ServerTls | Kind::ServerNotH2)
}

fn is_idempotent(method: &str) -> bool {
    matches!(method, "GET" | "HEAD" | "OPTIONS" | "TRACE" | "PUT" | "DELETE")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_targets_become_origin_form() {
        assert_eq!(split_target(b"/a?b"), (&b"/a?b"[..], None));
        assert_eq!(split_target(b"http://h:8/a?b"), (&b"/a?b"[..], Some(&b"h:8"[..])));
        assert_eq!(split_target(b"HTTPS://h"), (&b"/"[..], Some(&b"h"[..])));
        assert_eq!(split_query(b"/p?x=1"), (&b"/p"[..], Some(&b"x=1"[..])));
    }

    #[test]
    fn https_redirects_keep_host_and_target() {
        assert_eq!(https_location("example.com", None, b"/a?b=1"), "https://example.com/a?b=1");
        assert_eq!(https_location("example.com", Some(443), b"/"), "https://example.com/");
        assert_eq!(https_location("example.com", Some(8443), b"/x"), "https://example.com:8443/x");
        assert_eq!(https_location("[::1]", Some(8443), b"/"), "https://[::1]:8443/");
    }

    #[test]
    fn client_addresses_are_written_as_std_writes_them() {
        let addresses = [
            "0.0.0.0",
            "127.0.0.1",
            "10.20.30.40",
            "255.255.255.255",
            "192.0.2.7",
            "::1",
            "2001:db8::42",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "::ffff:255.255.255.255",
            "1111:2222:3333:4444:5555:6666:255.255.255.255",
        ];
        for text in addresses {
            let ip: IpAddr = text.parse().expect("address");
            assert_eq!(IpText::new(ip).as_str(), ip.to_string());
        }
        let mapped: SocketAddr = "[::ffff:192.0.2.9]:80".parse().expect("address");
        assert_eq!(IpText::new(client_ip(mapped)).as_str(), "192.0.2.9");
    }

    /// An idle keep-alive connection's task is the `serve` future (its steps
    /// before the first request run in boxed futures, `front::Http1`): what
    /// it holds between requests is `Idle` and the wait (an entry in the
    /// worker's `idle::Table`, no timer of its own), not a `Client`.
    /// Bounds with room for compiler changes (a test build's sizes; release
    /// ones are smaller), so that a state put back inline fails here rather
    /// than as memory per connection in the bench.
    /// Served connections are [`crate::lazy_tcp::LazyTcp`]s (the accept loop's).
    #[test]
    fn an_idle_connection_holds_a_small_future() {
        fn size<A, B, C, D, E, G, H, F>(_: fn(A, B, C, D, E, G, H) -> F) -> usize {
            std::mem::size_of::<F>()
        }
        let idle = std::mem::size_of::<Idle<crate::lazy_tcp::LazyTcp>>();
        let client = std::mem::size_of::<Client<crate::lazy_tcp::LazyTcp>>();
        let serve = size(serve::<crate::lazy_tcp::LazyTcp>);
        assert!(idle <= 256, "Idle is {idle} bytes");
        assert!(serve <= 512, "an idle connection's future is {serve} bytes");
        assert!(serve < client + idle, "the future ({serve}) holds a Client ({client})");
    }
}
