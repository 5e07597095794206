//! The HTTP pipeline (HTTP/1.1 and 1.0 connections, each HTTP/2 stream:
//! [`crate::http2`], and each HTTP/3 stream: [`crate::http3`]). One client
//! connection is served by [`serve`]; each request on it goes through these
//! phases, in this order, in this file —
//! [`handle`] calls one function per phase:
//!
//! 1. **read head**: bytes until a complete head, under the header timeout ([`read_head`])
//! 2. **parse**: strict framing checks ([`parse::parse_request`]); what the
//!    later phases need of the request ([`request_info`]); client protection ([`protect`])
//! 3. **route**: rules choose a pool or a direct answer ([`fn@route`], [`pool_or_reply`]);
//!    persistence names the client's server, if any ([`crate::persist`]);
//!    the response cache answers a hit, or plans what to store ([`cache_lookup`])
//! 4. **request rewrite**: hop-by-hop removal, forwarding headers, edits ([`rewrite_request`])
//! 5. **pick server**: persistent server or balancer, connection limits, retries ([`forward`])
//! 6. **forward**: head and streamed body to the server ([`exchange`])
//! 7. **response rewrite**: hop-by-hop removal, edits, connection handling, written by
//!    the client's head writer — HTTP/1.1 bytes, or a header list for an HTTP/2
//!    stream ([`write_head`], [`rewrite::write_response_head`], [`send_own`])
//! 8. **compress**: whether the body is encoded on its way, and the head edits
//!    that go with it ([`compress::decide`], [`compress::rewrite_head`])
//! 9. **stream response**: body relayed to the client ([`parts::relay`]), through
//!    the coder when compressing ([`compress::relay`]), or a byte tunnel after a
//!    relayed protocol switch (WebSocket, [`tunnel`]) — through a [`cache::Tee`]
//!    that copies what the client gets (compressed or not) for the cache, which
//!    then stores it or answers a 304 / covered error itself ([`cached::finish`])
//! 10. **log**: metrics, the access log line, failures at `warn` ([`conclude`], [`log`])
//!
//! Invariants: no peer input can panic this code; a failure of one request
//! closes at most its own client connection and its own server connection.

pub mod body;
mod cached;
pub mod compress;
mod log;
pub mod parts;
#[cfg(test)]
mod pipeline_tests;
pub use switchyard_http::parse;
pub use switchyard_http::rewrite;
pub use switchyard_http::route;

use std::cell::Cell;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::rc::Rc;
use std::time::Instant;

use bytes::{Buf, BytesMut};
use switchyard_config::{Action, HeaderEdits, PoolId, Service, UpstreamProtocol};
use tokio::io::AsyncReadExt;
use tokio::time::timeout_at;

use self::body::{write_all, Body, RelayError};
pub(crate) use self::log::CloseGuard as ConnectionGuard;
use self::log::{keep_meta, log, micros, CloseGuard, Trace};
use self::parse::{Connection, Field, Framing, HeadLimits, RequestHead, Version};
use self::parts::relay;
use self::rewrite::Forwarding;
use crate::cache;
use crate::live::{ActiveGuard, PickView};
use crate::protection::Refusal;
pub use crate::transport::{ClientStream, Transport};
use crate::upstream::stream::ServerRead;
use crate::upstream::{self, UpstreamConn};
use crate::worker::{Local, Scratch, Worker};
use switchyard_http::error::{Kind, ProxyError};
use switchyard_http::head_writer::{FieldList, HeadWriter, Http1Head};
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

/// Client protection of one request: a refusal of its connection, the
/// address lists for an address a trusted front proxy names, and the request
/// rate. No cost for a service without protection.
fn protect<S>(client: &Client<S>, head: &RequestHead, service: usize, now: Instant) -> Result<(), Refusal> {
    if let Some(why) = client.transport.refused {
        return Err(why);
    }
    let Some(guard) = client.local.gen.protection.get(service).and_then(Option::as_ref) else {
        return Ok(());
    };
    let mut ip = client.ip;
    if let Some(named) = guard.config.client_address_header.as_ref().filter(|_| guard.trusts(client.ip)) {
        let buf = &client.buf[..head.len];
        let values = client
            .fields
            .iter()
            .filter(|f| buf[f.name.clone()].eq_ignore_ascii_case(named.name.as_bytes()))
            .map(|f| &buf[f.value.clone()]);
        if let Some(from_header) = crate::protection::address_from_header(values, &named.trusted) {
            ip = from_header;
        }
        if !guard.permits(ip) {
            return Err(Refusal::Denied);
        }
    }
    guard.admit_request(ip, now)
}

/// Phase 2b's answer: the refusal's status (429 with `Retry-After` for a
/// request rate). A bodiless request over the rate leaves its connection open
/// (a front proxy's connection carries other clients); every other refusal
/// closes it.
async fn refuse<S: ClientStream>(
    client: &mut Client<S>,
    service: &Service,
    info: RequestInfo,
    head_len: usize,
    why: Refusal,
    started: Instant,
) -> bool {
    let error = ProxyError::new(Kind::Refused(why));
    let keep = matches!(why, Refusal::RequestRate(_)) && info.keep_alive && info.framing == Framing::Empty;
    if !keep {
        fail(client, service, &error, started).await;
        return false;
    }
    client.buf.advance(head_len);
    let status = error.status().unwrap_or(429);
    let body = format!("{status} {}\n", switchyard_http::error::reason_phrase(status));
    let body = if info.head_method { "" } else { body.as_str() };
    let connection = Connection { keep_alive: info.version == Version::Http10, ..Connection::default() };
    let own = Own { status, location: None, content_type: "text/plain", body: body.as_bytes(), connection };
    let (ok, bytes_out) = send_own(client, service, own, Some(&error)).await;
    client.trace.bytes_out = bytes_out;
    client.trace.body_out = body.len() as u64;
    log(client, service, status, Some(&error), started);
    ok
}

/// A response of the proxy's own (a rule's answer, an error, a refusal).
struct Own<'a> {
    status: u16,
    location: Option<&'a str>,
    content_type: &'a str,
    body: &'a [u8],
    connection: Connection,
}

/// Sends a response of the proxy's own through the client's head writer —
/// `retry-after` for an `error` that has one, `alt-svc` where HTTP/3 is
/// advertised — then its body. Whether all was written, and the bytes the
/// access log counts (head as HTTP/1.1 text, and body).
async fn send_own<S: ClientStream>(
    client: &mut Client<S>,
    service: &Service,
    own: Own<'_>,
    error: Option<&ProxyError>,
) -> (bool, u64) {
    let port = alt_svc(client, service);
    let idle = service.timeouts.client_idle;
    if client.stream.takes_fields() {
        let mut list = FieldList::default();
        let body =
            rewrite::write_local_head(&mut list, own.status, own.location, own.content_type, own.body, own.connection);
        if let Some(secs) = error.and_then(ProxyError::retry_after) {
            list.append(b"retry-after", itoa::Buffer::new().format(secs).as_bytes());
        }
        if let Some(port) = port {
            list.alt_svc(port);
        }
        let ok = client.stream.send_fields(&list).is_ok() && write_all(&mut client.stream, body, idle).await.is_ok();
        return (ok, (list.text_len() + body.len()) as u64);
    }
    rewrite::local_response(&mut client.out, own.status, own.location, own.content_type, own.body, own.connection);
    if let Some(error) = error {
        add_retry_after(&mut client.out, error);
    }
    add_alt_svc(&mut client.out, port);
    let ok = write_all(&mut client.stream, &client.out, idle).await.is_ok();
    (ok, client.out.len() as u64)
}

/// Adds `Retry-After` to a local response head for an error that has one.
fn add_retry_after(out: &mut Vec<u8>, error: &ProxyError) {
    if let Some(secs) = error.retry_after() {
        // After the status line: the order of fields carries no meaning.
        let at = memchr::memchr(b'\n', out).map_or(0, |i| i + 1);
        let field = format!("retry-after: {secs}\r\n");
        out.splice(at..at, field.into_bytes());
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

/// Phase 2: the request line for the log, the trace, and the facts about the
/// request the later phases need.
fn request_info<S>(
    client: &mut Client<S>,
    head: &RequestHead,
    service: &Service,
    local: &Local,
    started: Instant,
) -> RequestInfo {
    if local.log.is_some() {
        keep_meta(client, head);
    }
    let buf = &client.buf[..head.len];
    let method = std::str::from_utf8(&buf[head.method.clone()]).unwrap_or("");
    client.line.clear();
    client.line.push_str(method);
    client.line.push(' ');
    client.line.push_str(std::str::from_utf8(&buf[head.target.clone()]).unwrap_or("?"));
    client.trace.http10 = head.version == Version::Http10;
    client.trace.bytes_in = head.len as u64;
    if let Some(tracer) = &local.tracer {
        client.otel = Some(Box::new(tracer.start(buf, &client.fields, client.trace.head_started.unwrap_or(started))));
    }
    RequestInfo {
        framing: head.framing,
        head_method: method == "HEAD",
        replayable: head.framing == Framing::Empty && is_idempotent(method),
        expect_continue: head.expect_continue && head.framing != Framing::Empty,
        keep_alive: match head.version {
            Version::Http11 => !head.connection.close,
            Version::Http10 => head.connection.keep_alive && !head.connection.close,
        },
        version: head.version,
        // Only a bodiless HTTP/1.1 request can switch protocols (RFC 9110 7.8).
        upgrade: head.connection.upgrade
            && head.upgrade.is_some()
            && head.framing == Framing::Empty
            && head.version == Version::Http11,
        accepted: match service.compression {
            Some(_) => compress::Accepted::parse(
                client
                    .fields
                    .iter()
                    .filter(|f| buf[f.name.clone()].eq_ignore_ascii_case(b"accept-encoding"))
                    .map(|f| &buf[f.value.clone()]),
            ),
            None => compress::Accepted::default(),
        },
        trailers: head.te_trailers,
    }
}

/// The method and the target as text, from the request line phase 2 wrote
/// (`METHOD target`), when it holds both as the head has them (it holds a
/// stand-in for one that is not UTF-8: the target is then `None`, the method `""`).
fn line_parts<'l>(line: &'l str, method: &'l [u8], target: &'l [u8]) -> (&'l str, Option<&'l str>) {
    let m = method.len();
    let exact = line.len() == m + 1 + target.len()
        && line.as_bytes().get(..m) == Some(method)
        && line.as_bytes().get(m + 1..) == Some(target);
    match (exact, line.get(..m), line.get(m + 1..)) {
        (true, Some(method), Some(target)) => (method, Some(target)),
        _ => (std::str::from_utf8(method).unwrap_or(""), std::str::from_utf8(target).ok()),
    }
}

/// Phase 3, first: the key authorization of an ACME http-01 challenge being
/// validated (RFC 8555 8.3), for a GET of its token on an `http` service.
fn acme_challenge<S>(client: &Client<S>, head: &RequestHead, service: &Service, local: &Local) -> Option<String> {
    if service.mode != switchyard_config::Mode::Http {
        return None;
    }
    let buf = &client.buf[..head.len];
    if &buf[head.method.clone()] != b"GET" {
        return None;
    }
    let (origin_target, _) = split_target(&buf[head.target.clone()]);
    let (path, _) = split_query(origin_target);
    if !path.starts_with(crate::acme::HTTP01_PREFIX.as_bytes()) {
        return None;
    }
    local.gen.acme.challenges.http01(std::str::from_utf8(path).ok()?)
}

/// Phase 3: the rules' decision, the balancing hash, and the server
/// persistence names for this client. The stick-table key (a header or
/// cookie value) is kept for the table update after the head has left the buffer.
fn route<'a, S>(
    client: &mut Client<S>,
    head: &RequestHead,
    service: &'a Service,
    worker: &Worker,
    local: &Local,
) -> Routed<'a> {
    let buf = &client.buf[..head.len];
    // Phase 2 wrote "METHOD target" as text into `line` (UTF-8 checked
    // there): both are taken from it when it holds them as they are.
    let (method, target) = line_parts(&client.line, &buf[head.method.clone()], &buf[head.target.clone()]);
    let (origin_target, authority) = split_target(&buf[head.target.clone()]);
    let host_value = authority.or_else(|| head.host.clone().map(|r| &buf[r])).unwrap_or(b"");
    let host = route::routing_host(host_value, &mut client.host);
    // In origin form (no authority in the target) the target is the origin target.
    let origin_text = target.filter(|_| authority.is_none());
    let (path, query) = match origin_text.or_else(|| std::str::from_utf8(origin_target).ok()) {
        Some(t) => match memchr::memchr(b'?', t.as_bytes()) {
            // `?` is ASCII: both sides of it are whole characters.
            Some(i) => (&t[..i], Some(&t[i + 1..])),
            None => (t, None),
        },
        None => {
            let (p, q) = split_query(origin_target);
            (std::str::from_utf8(p).unwrap_or(""), q.and_then(|q| std::str::from_utf8(q).ok()))
        }
    };
    let view = route::RequestView {
        method,
        host,
        path,
        query,
        head: buf,
        fields: &client.fields,
        client: client.ip,
        client_cert: client.transport.client_cert_verified,
    };
    let decision = route::evaluate(&service.rules, &view);
    let pool_for_hash = match decision.action {
        Some(Action::Pool(id)) => Some(*id),
        None => service.default_pool,
        Some(_) => None,
    };
    let hash = pool_for_hash.map(|id| {
        let pool = local.gen.config.pool(id);
        let header = match &pool.hash_key {
            switchyard_config::HashKey::Header(name) => view.header_values(name).next(),
            _ => None,
        };
        upstream::hash_key(&pool.hash_key, view.client, origin_target, header)
    });
    let persistence = pool_for_hash.and_then(|id| local.gen.persistence.get(id.0)?.as_ref());
    let sticky = persistence.and_then(|p| {
        client.stick_key.clear();
        if let Some(key) = p.request_key(&view) {
            client.stick_key.extend_from_slice(key);
        }
        p.lookup(&view, worker.clock.get())
    });
    let https_location = match decision.action {
        Some(Action::RedirectHttps { port, .. }) => Some(https_location(host, *port, origin_target)),
        _ => None,
    };
    Routed { action: decision.action, edits: decision.edits, hash, sticky, https_location }
}

/// A response a rule gives instead of a pool.
enum Reply<'a> {
    /// A redirect or a fixed response.
    Answer(Answer<'a>),
    /// `deny`: the status, with its reason phrase as the body.
    Deny(u16),
}

/// Phase 3's outcome: the pool to forward to (`None`: the service has none
/// for this request), or the rule's own response.
fn pool_or_reply<'r>(routed: &'r Routed<'_>, service: &Service) -> Result<Option<PoolId>, Reply<'r>> {
    let reply = |status: u16, location, content_type, body| Answer { status, location, content_type, body };
    let https_location = routed.https_location.as_deref();
    match routed.action {
        Some(Action::Redirect { status, location }) => {
            Err(Reply::Answer(reply(*status, Some(location.as_str()), "text/plain", b"")))
        }
        Some(Action::Respond { status, body, content_type }) => {
            Err(Reply::Answer(reply(*status, None, content_type.as_str(), body.as_bytes())))
        }
        Some(Action::RedirectHttps { status, .. }) => {
            Err(Reply::Answer(reply(*status, https_location, "text/plain", b"")))
        }
        Some(Action::Deny { status }) => Err(Reply::Deny(*status)),
        Some(Action::Pool(id)) => Ok(Some(*id)),
        None => Ok(service.default_pool),
    }
}

/// An HTTP/2 stream to a server cannot become a tunnel: a WebSocket (or
/// other) switch to such a pool is refused; an h2c upgrade offer is
/// declined by forwarding the request without it.
fn switch_to<S>(
    client: &Client<S>,
    head: &RequestHead,
    local: &Local,
    pool: PoolId,
    info: RequestInfo,
) -> Result<RequestInfo, ProxyError> {
    if !info.upgrade || local.gen.config.pool(pool).protocol != UpstreamProtocol::Http2 {
        return Ok(info);
    }
    let token = head.upgrade.clone().map_or(&b""[..], |r| &client.buf[r]);
    if !parse::trim(token).eq_ignore_ascii_case(b"h2c") {
        return Err(ProxyError::new(Kind::SwitchToH2Pool));
    }
    Ok(RequestInfo { upgrade: false, ..info })
}

/// Phase 3's cache lookup: a hit is answered here, before a server is picked;
/// otherwise what to store (or revalidate) on the way back.
async fn cache_lookup<'l, S: ClientStream>(
    client: &mut Client<S>,
    head: &RequestHead,
    service: &'l Service,
    worker: &Rc<Worker>,
    local: &'l Local,
    routed: &Routed<'_>,
    info: RequestInfo,
) -> cached::Lookup<'l> {
    let Some(cache) = local.gen.caches.get(client.service).and_then(Option::as_ref) else {
        return cached::Lookup::Forward(None);
    };
    let draining = worker.closing(local.gen.number, &service.name);
    let lookup_started = crate::otel::RequestSpan::now(client.otel.as_deref());
    let looked_up = cached::lookup(client, cache, service, worker, head, routed, info, draining).await;
    crate::otel::RequestSpan::cache_lookup(client.otel.as_deref_mut(), lookup_started);
    looked_up
}

/// Phase 4: the head towards the server (hop-by-hop fields removed,
/// forwarding headers, the rules' edits), written by the server's head
/// writer: HTTP/1.1 bytes into `client.out`, or for an HTTP/2 pool a
/// request list into `client.up_head` (then the result is true). The head
/// is consumed from the buffer once rewritten; what follows it is body or
/// the next request.
fn rewrite_request<S>(
    client: &mut Client<S>,
    head: &RequestHead,
    service: &Service,
    local: &Local,
    pool: PoolId,
    routed: &Routed<'_>,
    info: RequestInfo,
) -> bool {
    let buf = &client.buf[..head.len];
    let (origin_target, authority) = split_target(&buf[head.target.clone()]);
    let upgrade = head.upgrade.clone().filter(|_| info.upgrade).map(|r| &buf[r]);
    let fwd = Forwarding {
        client: client.ip,
        client_text: client.ip_text.as_str(),
        proto: if client.transport.secure { "https" } else { "http" },
        headers: service.forwarded,
        upgrade,
        client_cert: service.tls.as_ref().and_then(|t| t.client_auth.as_ref()).map(|_| {
            let t = &client.transport;
            (t.client_cert_verified, t.client_cert_subject.as_str())
        }),
        trace: client.otel.as_ref().map(|s| s.propagation()),
    };
    let pool = local.gen.config.pool(pool);
    let listed = pool.protocol == UpstreamProtocol::Http2;
    // Only HTTP/1.0 requests may lack a Host; they get the server's address
    // (an HTTP/2 stream fills in the address of the server it goes to).
    let server_host = match head.host {
        Some(_) => String::new(),
        None if listed => String::new(),
        None => pool.servers.first().map(|s| s.addr.to_string()).unwrap_or_default(),
    };
    let (fields, edits, host) = (&client.fields, &routed.edits, server_host.as_bytes());
    if listed {
        client.out.clear();
        let w = &mut **client.up_head.get_or_insert_with(Box::default);
        rewrite::write_request_head(w, buf, head, fields, origin_target, authority, host, edits, &fwd);
    } else {
        let w = &mut Http1Request::new(&mut client.out);
        rewrite::write_request_head(w, buf, head, fields, origin_target, authority, host, edits, &fwd);
    }
    client.buf.advance(head.len);
    listed
}

/// Phase 10, after the exchange: the cache stores a complete response or
/// answers itself (304, stale-if-error); then the log line, or the failure's
/// answer. Returns whether the client connection stays open.
#[allow(clippy::too_many_arguments)]
async fn conclude<S: ClientStream>(
    client: &mut Client<S>,
    service: &Service,
    worker: &Worker,
    local: &Local,
    info: RequestInfo,
    plan: Option<cached::Plan<'_>>,
    forwarded: Result<Outcome, Failed>,
    started: Instant,
) -> bool {
    let capture = client.capture.take();
    client.intercept = cached::Intercept::default();
    if let Some(plan) = plan {
        let ended = match &forwarded {
            Ok(o) if o.intercepted => cached::Ended::Intercepted { status: o.status },
            Ok(o) => cached::Ended::Relayed { status: o.status, capture: capture.as_ref() },
            Err(Failed { relayed: None, .. }) => cached::Ended::Failed,
            Err(_) => cached::Ended::Relayed { status: 0, capture: None },
        };
        let draining = worker.closing(local.gen.number, &service.name);
        if let Some(keep) = cached::finish(client, service, info, plan, ended, draining).await {
            log(client, service, client.trace.cache_status, None, started);
            return keep && !draining;
        }
    }
    match forwarded {
        Ok(outcome) if outcome.intercepted => {
            // The cache held the response back but could not answer after all
            // (its stale entry expired meanwhile, or the 304 was malformed).
            fail(client, service, &ProxyError::new(Kind::BadResponse("response held for the cache")), started).await;
            false
        }
        Ok(outcome) => relayed(client, service, worker, local, &outcome, started),
        Err(Failed { error, relayed: None }) => {
            // A stream the server refused was not processed (RFC 9113 8.7): an
            // HTTP/2 client gets the refusal itself, which it may retry anywhere.
            if client.trace.server_reset == Some(REFUSED_STREAM) && reset_client(client, REFUSED_STREAM) {
                log(client, service, 0, Some(&error), started);
            } else {
                fail(client, service, &error, started).await;
            }
            false
        }
        Err(Failed { error, relayed: Some(status) }) => {
            // Headers already went out: the only honest signal left is to
            // close the connection before the body is complete (an HTTP/2
            // client's stream is reset with the server's own code, if it gave
            // one, else INTERNAL_ERROR).
            reset_client(client, client.trace.server_reset.unwrap_or(INTERNAL_ERROR));
            log(client, service, status, Some(&error), started);
            false
        }
    }
}

/// RST_STREAM's REFUSED_STREAM code (RFC 9113 7).
const REFUSED_STREAM: u32 = 0x7;
/// RST_STREAM's INTERNAL_ERROR code (RFC 9113 7).
const INTERNAL_ERROR: u32 = 0x2;

/// Asks an HTTP/2 client's stream to be reset with `code` instead of being
/// answered or finished; false when the client has no stream to reset.
fn reset_client<S: ClientStream>(client: &Client<S>, code: u32) -> bool {
    client.stream.resets().map(|r| r.to_client.set(Some(code))).is_some()
}

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
fn forward<'a, 'r, S: ClientStream>(
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
fn pick_server<'l>(
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
fn at_hand<S: ClientStream>(
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
const REPLAY_MAX: usize = 64 * 1024;

/// A copy of the request body, when all of it is in the client's buffer
/// already and small (empty for a bodiless request): sent again if an
/// HTTP/2 server refuses the request unprocessed. `None` otherwise (a
/// chunked body, one still to come, one the client waits to send until
/// `100 Continue`): such a request is never sent twice.
fn whole_body<S>(client: &Client<S>, info: RequestInfo) -> Option<Vec<u8>> {
    let n = match info.framing {
        _ if info.expect_continue => return None,
        Framing::Empty => 0,
        Framing::Length(n) => usize::try_from(n).ok()?,
        Framing::Chunked | Framing::UntilClose => return None,
    };
    (n <= REPLAY_MAX && n <= client.buf.len()).then(|| client.buf[..n].to_vec())
}

/// Puts `taken` back in front of `buf`.
fn put_back(buf: &mut BytesMut, taken: &[u8]) {
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
fn exchange<'a, 'r, 's, S: ClientStream>(
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
enum HeadSent {
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
fn send_request_head_now<S>(
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
async fn send_request_head<S>(
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

/// Phase 10's facts of a response relayed (`done`, sent to the server at
/// `sent`): its trace record and span mark, and the compression counters.
fn note_response<S>(
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
fn count_compressed<S>(client: &Client<S>, worker: &Worker, done: &Responded) {
    if let Some((algorithm, payload_in, payload_out)) = done.compressed {
        let metrics = &client.local.gen.services[client.service];
        metrics.compressed(worker.id, algorithm, payload_in, payload_out);
    }
}

/// The pool's PROXY protocol header (the client's address) for a new server
/// connection; empty when the pool sends none.
fn proxy_header<S: ClientStream>(pool: &switchyard_config::Pool, client: &Client<S>) -> Vec<u8> {
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
async fn tunnel<S: ClientStream>(client: &mut Client<S>, conn: &mut UpstreamConn) {
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
    self::log::counted_tunnel(client, &mut conn.stream, pre).await;
}

/// Where the response phases write: the client's reused head buffer and field index.
struct Response<'a> {
    out: &'a mut Vec<u8>,
    fields: &'a mut Vec<Field>,
    /// The status of the response head once it went to the client: from
    /// then on a failure can only cut the response short, never answer it.
    relayed: &'a Cell<Option<u16>>,
    /// When the request was sent to the server (the response's deadline
    /// counts from it).
    sent: tokio::time::Instant,
    /// What persistence adds to or learns from the response.
    sticky: Sticky<'a>,
    /// The request's stick-table key (empty: none), for cookie learn.
    presented: &'a [u8],
    /// The worker clock when the request went out (for stick-table updates).
    now: Instant,
    /// Responses the cache answers instead of the client.
    intercept: cached::Intercept,
    /// The gRPC status the response carried (in its head or trailers), when
    /// the request asked for trailers.
    grpc_status: Option<u16>,
    /// The port HTTP/3 is advertised on (`Alt-Svc`), when it is.
    alt_svc: Option<u16>,
    /// The client asked to close after this response and sent nothing past
    /// its request: the response's last write may leave with the FIN.
    last: bool,
}

/// The port to advertise HTTP/3 on in a response to `client`: its
/// listener's own (QUIC takes the UDP side of each TCP listener), for a
/// service with `http3` and a client that did not come by HTTP/3.
fn alt_svc<S: ClientStream>(client: &Client<S>, service: &Service) -> Option<u16> {
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
fn add_alt_svc(out: &mut Vec<u8>, port: Option<u16>) {
    if let Some(port) = port {
        Http1Head::new(out).alt_svc(port);
    }
}

/// What phase 7 decided about the response head besides the rules' edits.
#[derive(Clone, Copy)]
struct HeadEdits<'a> {
    /// Persistence's cookie to insert.
    set_cookie: Option<&'a str>,
    /// The port to advertise HTTP/3 on.
    alt_svc: Option<u16>,
    /// `connection: close` (an HTTP/1.1 writer's only).
    close: bool,
    /// `connection: keep-alive` for an HTTP/1.0 client.
    keep_alive_10: bool,
    /// The body goes decoded from chunked coding (to an HTTP/1.0 client).
    dechunk: bool,
    /// Phase 8's compression decision.
    decision: Result<compress::Coding, compress::Skip>,
    /// An encoded body goes in chunked coding.
    chunked: bool,
}

/// Phases 7 and 8's response head, written by `w` in the same order for
/// every client protocol: the rewrite (hop-by-hop removal, the rules'
/// edits, connection handling), persistence's `set-cookie`, `alt-svc`, the
/// compression edits.
fn write_head<W: HeadWriter>(
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
struct Sticky<'a> {
    /// A persistence cookie to add to the response.
    set_cookie: Option<&'a str>,
    /// Cookie learn: the pool's persistence, told about the server's `Set-Cookie`.
    learn: Option<&'a crate::persist::PoolPersistence>,
    /// The server (index in the pool) that answers.
    server: usize,
}

/// What [`respond`] learned about the finished response.
struct Responded {
    outcome: Outcome,
    server_keeps: bool,
    /// The server switched protocols: the connection is now a byte tunnel.
    switched: bool,
    /// From the request sent to the response head received, in µs.
    head_us: u64,
    /// Bytes sent to the client (head and body).
    bytes_out: u64,
    /// Of which the head's (as HTTP/1.1 text, for a header list).
    head_len: u64,
    /// An encoded body: the algorithm, payload bytes in and out (metrics).
    compressed: Option<(switchyard_config::Encoding, u64, u64)>,
}

/// Phases 7–9: read the response head (skipping interim 1xx responses),
/// rewrite it, decide on compression, and stream the response to the client.
#[allow(clippy::too_many_arguments)]
// Not an `async fn`: its arguments stay in the future's upvars, not copied into
// locals of its state (ADR 0004, "The common path without futures").
#[allow(clippy::manual_async_fn)]
fn respond<'a, 'p, 'r, R: ServerRead, W: body::Sink, D: Fn() -> bool>(
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
fn grpc_status(value: &[u8]) -> Option<u16> {
    if value.is_empty() || value.len() > 3 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// Maps a failure while relaying the response (server → client) to its cause.
fn response_relay_error(e: RelayError, status: u16) -> Failed {
    let error = match e {
        RelayError::Read(_) => ProxyError::new(Kind::ServerClosed),
        RelayError::ReadTimeout => ProxyError::new(Kind::ServerTimeout),
        RelayError::Framing(why) => ProxyError::new(Kind::BadResponse(why)),
        RelayError::Write(_) | RelayError::WriteTimeout | RelayError::TooLarge => ProxyError::new(Kind::ClientClosed),
    };
    Failed { error, relayed: Some(status) }
}

/// Maps a failure while relaying the request (client → server) to its cause.
fn request_relay_error(e: RelayError) -> ProxyError {
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

/// A response the proxy writes itself, chosen by a rule.
struct Answer<'a> {
    status: u16,
    location: Option<&'a str>,
    content_type: &'a str,
    body: &'a [u8],
}

/// A direct answer from a rule (redirect, respond, deny). The connection stays
/// open only when the request had no body to skip.
async fn answer<S: ClientStream>(
    client: &mut Client<S>,
    service: &Service,
    info: RequestInfo,
    head_len: usize,
    reply: Answer<'_>,
    started: Instant,
) -> bool {
    let keep = info.keep_alive && info.framing == Framing::Empty;
    client.buf.advance(head_len);
    let connection =
        Connection { close: !keep, keep_alive: keep && info.version == Version::Http10, ..Connection::default() };
    let body = if info.head_method { &b""[..] } else { reply.body };
    let own =
        Own { status: reply.status, location: reply.location, content_type: reply.content_type, body, connection };
    let (ok, bytes_out) = send_own(client, service, own, None).await;
    client.trace.bytes_out = bytes_out;
    client.trace.body_out = body.len() as u64;
    log(client, service, reply.status, None, started);
    keep && ok
}

/// Sends the error's status (when it has one) with a short body, logs it, and
/// leaves the connection to be closed by the caller.
async fn fail<S: ClientStream>(client: &mut Client<S>, service: &Service, error: &ProxyError, started: Instant) {
    if let Some(status) = error.status() {
        let body = format!("{status} {}\n", switchyard_http::error::reason_phrase(status));
        let close = Connection { close: true, ..Connection::default() };
        let own = Own { status, location: None, content_type: "text/plain", body: body.as_bytes(), connection: close };
        let (ok, bytes_out) = send_own(client, service, own, Some(error)).await;
        if ok {
            client.trace.bytes_out = bytes_out;
            client.trace.body_out = body.len() as u64;
        }
    }
    log(client, service, error.status().unwrap_or(0), Some(error), started);
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

    /// Route takes the method and target from phase 2's request line only
    /// when the line holds them as the head has them.
    #[test]
    fn the_request_line_lends_method_and_target_only_when_it_holds_them() {
        assert_eq!(line_parts("GET /a?b", b"GET", b"/a?b"), ("GET", Some("/a?b")));
        // A target that is not UTF-8 is written as "?": not taken from the line.
        assert_eq!(line_parts("GET ?", b"GET", b"/\xff"), ("GET", None));
        assert_eq!(line_parts("GET ?", b"GET", b"?"), ("GET", Some("?")));
        // A line of another request (never the case, still not trusted).
        assert_eq!(line_parts("PUT /x", b"GET", b"/x"), ("GET", Some("/x")));
        assert_eq!(line_parts("", b"GET", b"/"), ("GET", Some("/")));
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
