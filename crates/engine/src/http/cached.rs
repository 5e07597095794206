//! The cache's two places in the pipeline ([`crate::cache`] holds the store):
//!
//! - **cache lookup** (after route, before request rewrite and pick server):
//!   [`lookup`] answers a fresh hit (or a 304 to the client's own
//!   conditional request) without touching a server, serves stale within
//!   `stale-while-revalidate` while another request refreshes the entry,
//!   waits for a concurrent fetch of the same key (coalescing), or returns
//!   a [`Plan`] for the forwarded request: revalidate a stale entry, or fetch.
//! - **cache store** (after the response went to the client): [`finish`]
//!   stores a complete capture, turns a server's 304 into the stored
//!   response, and covers a server error or failure with a stale entry
//!   within `stale-if-error`.
//!
//! `stale-while-revalidate`: a request that finds the entry stale within the
//! window gets it at once, and the first one starts a background
//! revalidation ([`refresh`], one per key across workers); an entry nobody
//! asks for is never refreshed. Unsafe requests (any method not known safe)
//! invalidate their target's entry after a non-error answer (RFC 9111 §4.4).
//! A GET's `Range` is answered from a fresh stored 200 ([`crate::cache::range`]);
//! otherwise it is forwarded, and the server's `206` may be kept as a piece
//! of the representation, combined with later pieces until it is complete
//! (RFC 9111 §3.3–3.4, [`crate::cache::Partial`]).

mod refresh;

use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::{Buf, Bytes};
use switchyard_config::{Compression, Service};

use super::body::{write_all, write_all_two};
use super::{route, Client, ClientStream, RequestInfo, Routed};
use crate::cache::policy::range::Ranges;
use crate::cache::{self, policy, range, Cache, Capture, Coalesce, Entry, Fetch, Found, Piece};
use crate::worker::Worker;
use switchyard_http::head_writer::{FieldList, HeadWriter, Http1Head};
use switchyard_http::parse::{self, RequestHead, Version};
use switchyard_http::request_writer::RequestWriter;

/// Longest a request waits for another request's fetch of the same key.
const MAX_COALESCE_WAIT: Duration = Duration::from_secs(10);
/// Bytes of an unsafe request's response copied to read its `Location` and
/// `Content-Location`: a longer head is not read for them.
const INVALIDATING_HEAD: usize = 16 * 1024;

/// Which response the cache holds back from the client and answers itself.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Intercept {
    /// A 304 to the cache's own revalidation.
    pub(super) not_modified: bool,
    /// A 5xx, covered by a stale entry (`stale-if-error`).
    pub(super) server_error: bool,
}

impl Intercept {
    /// Whether a response with `status` goes to the cache instead of the client.
    pub(super) fn takes(self, status: u16) -> bool {
        (self.not_modified && status == 304) || (self.server_error && status >= 500)
    }
}

/// A forwarded request the cache follows: what it may store, and what it
/// falls back on.
pub(super) struct Plan<'c> {
    cache: &'c Cache,
    key: String,
    /// Request headers (names lower case), for `Vary` and conditionals.
    request: Vec<(String, Vec<u8>)>,
    /// The stale entry being revalidated or kept for `stale-if-error`.
    stale: Option<Arc<Entry>>,
    /// Held while this request fetches the key for others.
    _fetch: Option<Fetch<'c>>,
    requested: SystemTime,
    head_method: bool,
    /// The service's compression, when it has one: `Accept-Encoding` variants
    /// are then keyed by what compression would do ([`super::compress::variant_key`]).
    compression: Option<&'c Compression>,
    /// The validators were added to the forwarded request.
    pub(super) revalidating: bool,
    /// An unsafe request: a non-error answer invalidates `key` (RFC 9111 §4.4),
    /// and the same-origin targets its `Location` and `Content-Location`
    /// name ([`invalidate_named`]); nothing is stored.
    invalidate: bool,
    /// The request's scheme and authority (`Host` or absolute-form), for
    /// telling which of those targets share its origin.
    origin: (&'static str, Vec<u8>),
    /// A `Range` request nothing fresh answered: a `206` may be kept as a
    /// piece ([`keep_piece`]), a `200` stored as usual.
    ranged: bool,
}

impl Plan<'_> {
    /// What the pipeline does with a response before it reaches the client.
    pub(super) fn intercept(&self, now: Instant) -> Intercept {
        let covers = self.stale.as_ref().is_some_and(|e| e.within(e.directives.stale_if_error, now));
        Intercept { not_modified: self.revalidating, server_error: covers }
    }

    /// The capture the response is teed into (the cache's `max_object` plus
    /// room for the head); for an invalidating request, which stores
    /// nothing, its first bytes only (the head names what else to invalidate).
    pub(super) fn capture(&self) -> Option<Capture> {
        if self.invalidate {
            return Some(Capture::head(INVALIDATING_HEAD));
        }
        let limit = usize::try_from(self.cache.config.max_object).unwrap_or(usize::MAX).saturating_add(64 * 1024);
        Some(Capture::new(limit))
    }

    /// A `Vary`-selected request header, normalised (RFC 9111 §4.1); `None`
    /// when the request lacks it. On a service with compression,
    /// `Accept-Encoding` is keyed by the coding compression would pick, its
    /// absence included.
    fn value(&self, name: &str) -> Option<Vec<u8>> {
        let lines = || self.request.iter().filter(move |(n, _)| n == name).map(|(_, v)| &v[..]);
        if name == "accept-encoding" {
            if let Some(c) = &self.compression {
                return Some(super::compress::variant_key(c, lines()));
            }
            lines().next()?;
            return Some(policy::normalise_accept_encoding(&lines().collect::<Vec<_>>().join(&b","[..])));
        }
        policy::selecting_value(name, lines())
    }

    fn header(&self, name: &str) -> Option<&[u8]> {
        policy::header(&self.request, name)
    }
}

/// What the lookup phase decided.
pub(super) enum Lookup<'c> {
    /// The cache answered; whether the connection stays open.
    Served(bool),
    /// Forward the request, followed by the cache when `Some`.
    Forward(Option<Plan<'c>>),
}

/// Phase "cache lookup". `client.buf` still holds the request head.
#[allow(clippy::too_many_arguments)]
pub(super) async fn lookup<'c, S: ClientStream>(
    client: &mut Client<S>,
    cache: &'c Cache,
    service: &'c Service,
    worker: &Rc<Worker>,
    head: &RequestHead,
    routed: &Routed<'_>,
    info: RequestInfo,
    draining: bool,
) -> Lookup<'c> {
    let (mut plan, rcc, ranged_request) = match plan_of(client, cache, service, head, routed, info) {
        Planned::Candidate(plan, rcc, ranged) => (plan, rcc, ranged),
        Planned::Forward(plan) => return Lookup::Forward(plan),
    };
    let wait = service.timeouts.server_response.min(MAX_COALESCE_WAIT);
    // A HEAD stores nothing, so it neither leads nor waits for a fetch.
    let mut coalesce = !info.head_method;
    loop {
        let now = Instant::now();
        let found = match cache.lookup(&plan.key, &|n| plan.value(n)) {
            Found::Entry(e) => Some(e),
            Found::Nothing => None,
        };
        if let Some(entry) = &found {
            let within_max_age = rcc.max_age.is_none_or(|m| entry.age(now) <= Duration::from_secs(m));
            if entry.usable_fresh(now) && !rcc.no_cache && within_max_age {
                cache.stats.hits.fetch_add(1, Ordering::Relaxed);
                return Lookup::Served(serve(client, service, info, head.len, &plan, entry, "hit", draining).await);
            }
        }
        if rcc.only_if_cached {
            // RFC 9111 §5.2.1.7: nothing usable stored, and the client forbids going to a server.
            return Lookup::Served(gateway_timeout(client, service, info, head.len, draining).await);
        }
        if ranged_request {
            // Not fresh: the server answers the range, and its 206 may be
            // kept as a piece of the representation (RFC 9111 §3.3).
            plan.ranged = true;
            cache.stats.misses.fetch_add(1, Ordering::Relaxed);
            return Lookup::Forward(Some(plan));
        }
        plan.stale = found;
        // The cache's own refresh is never answered stale: it must reach a server.
        let swr = |e: &Arc<Entry>| {
            !client.transport.cache_refresh && !rcc.no_cache && e.within(e.directives.stale_while_revalidate, now)
        };
        if let Some(entry) = plan.stale.clone().filter(swr) {
            // Stale within stale-while-revalidate: answered now, refreshed in
            // the background (which needs a Host to address its request).
            let shared = client.local.gen.caches.get(client.service).and_then(Option::clone);
            let refresh =
                shared.as_ref().filter(|_| head.host.is_some()).and_then(|c| cache::begin_refresh(c, &plan.key));
            if let Some(refresh) = refresh {
                refresh::spawn(client, worker, head, refresh);
            }
            cache.stats.stale.fetch_add(1, Ordering::Relaxed);
            return Lookup::Served(serve(client, service, info, head.len, &plan, &entry, "stale", draining).await);
        }
        match coalesce.then(|| cache.coalesce(&plan.key)) {
            Some(Coalesce::Lead(fetch)) => {
                plan._fetch = Some(fetch);
                break;
            }
            Some(Coalesce::Wait(mut done)) => {
                let _ = tokio::time::timeout(wait, done.changed()).await;
                // Look once more; a second miss fetches without coalescing
                // (the response may not have been storable).
                coalesce = false;
            }
            None => break,
        }
    }
    // Revalidation needs validators and a request without its own conditionals.
    let own_conditional = plan.header("if-none-match").is_some() || plan.header("if-modified-since").is_some();
    if let Some(entry) = plan.stale.as_ref().filter(|_| !own_conditional) {
        let (etag, modified) = entry.validators();
        plan.revalidating = etag.is_some() || modified.is_some();
    }
    if !plan.revalidating {
        cache.stats.misses.fetch_add(1, Ordering::Relaxed);
    }
    Lookup::Forward(Some(plan))
}

/// What the lookup works with for a request the cache may answer — its
/// plan, its own directives, whether it asks for a `Range` — or, for any
/// other request, what to do instead: forward it untouched, or with a plan
/// that invalidates its target (an unsafe method).
fn plan_of<'c, S: ClientStream>(
    client: &Client<S>,
    cache: &'c Cache,
    service: &'c Service,
    head: &RequestHead,
    routed: &Routed<'_>,
    info: RequestInfo,
) -> Planned<'c> {
    let buf = &client.buf[..head.len];
    let method = std::str::from_utf8(&buf[head.method.clone()]).unwrap_or("");
    if !policy::safe_method(method.as_bytes()) {
        // RFC 9111 §4.4: any unsafe method (an unknown one included)
        // invalidates what is stored for its target, once a non-error
        // response says the server acted on it ([`finish`]).
        let origin = (scheme(client), authority_of(client, head).to_vec());
        return Planned::Forward(Some(Plan::invalidating(cache, key_of(client, cache, head, "GET"), origin)));
    }
    let bypass = !matches!(method, "GET" | "HEAD")
        || info.framing != parse::Framing::Empty
        || info.upgrade
        || routed.edits.iter().any(|e| e.no_cache);
    if bypass {
        return Planned::Forward(None);
    }
    let request: Vec<(String, Vec<u8>)> = client
        .fields
        .iter()
        .map(|f| (String::from_utf8_lossy(&buf[f.name.clone()]).to_ascii_lowercase(), buf[f.value.clone()].to_vec()))
        .collect();
    // RFC 9110 §14.2: only a GET's Range is answered; a fresh entry
    // answers it ([`ranged`]), anything else goes to a server as it is.
    let ranged_request = !info.head_method && policy::header(&request, "range").is_some();
    let rcc = request_directives(&request);
    if rcc.no_store {
        return Planned::Forward(None);
    }
    let key = key_of(client, cache, head, method);
    let plan = Plan {
        cache,
        key,
        request,
        stale: None,
        _fetch: None,
        requested: SystemTime::now(),
        head_method: info.head_method,
        compression: service.compression.as_ref(),
        revalidating: false,
        invalidate: false,
        origin: (scheme(client), Vec::new()),
        ranged: false,
    };
    Planned::Candidate(plan, rcc, ranged_request)
}

/// What [`plan_of`] found.
enum Planned<'c> {
    /// A request the cache may answer: its plan, its own directives, whether it has a `Range`.
    Candidate(Plan<'c>, policy::Directives, bool),
    /// Any other: forwarded, with a plan only to invalidate.
    Forward(Option<Plan<'c>>),
}

/// The cache key of the request whose head is at the front of `client.buf`, as `method`.
fn key_of<S: ClientStream>(client: &Client<S>, cache: &Cache, head: &RequestHead, method: &str) -> String {
    let buf = &client.buf[..head.len];
    let (origin_target, _) = super::split_target(&buf[head.target.clone()]);
    target_key(cache, scheme(client), authority_of(client, head), origin_target, method)
}

/// The cache key of `origin_target` (path and query) on `authority`, as `method`.
fn target_key(cache: &Cache, scheme: &str, authority: &[u8], origin_target: &[u8], method: &str) -> String {
    let mut host = String::new();
    let host = route::routing_host(authority, &mut host).to_string();
    let (path, query) = super::split_query(origin_target);
    cache::key(
        &cache.config.key,
        scheme,
        method,
        &host,
        std::str::from_utf8(path).unwrap_or(""),
        query.and_then(|q| std::str::from_utf8(q).ok()),
    )
}

fn scheme<S: ClientStream>(client: &Client<S>) -> &'static str {
    if client.transport.secure {
        "https"
    } else {
        "http"
    }
}

/// The authority of the request at the front of `client.buf`: an
/// absolute-form target's, or its `Host`.
fn authority_of<'b, S: ClientStream>(client: &'b Client<S>, head: &RequestHead) -> &'b [u8] {
    let buf = &client.buf[..head.len];
    let (_, authority) = super::split_target(&buf[head.target.clone()]);
    authority.or_else(|| head.host.clone().map(|r| &buf[r])).unwrap_or(b"")
}

/// The request's own `Cache-Control` (RFC 9111 §5.2.1); `Pragma: no-cache`
/// counts as `no-cache` when there is no `Cache-Control` (§5.4).
fn request_directives(request: &[(String, Vec<u8>)]) -> policy::Directives {
    let mut rcc = policy::Directives::parse(policy::headers(request, "cache-control"));
    if policy::header(request, "cache-control").is_none()
        && policy::header(request, "pragma").is_some_and(|p| p.eq_ignore_ascii_case(b"no-cache"))
    {
        rcc.no_cache = true;
    }
    rcc
}

impl<'c> Plan<'c> {
    /// The plan of an unsafe request: invalidate `key` after a non-error answer.
    fn invalidating(cache: &'c Cache, key: String, origin: (&'static str, Vec<u8>)) -> Plan<'c> {
        Plan {
            cache,
            key,
            request: Vec::new(),
            stale: None,
            _fetch: None,
            requested: SystemTime::now(),
            head_method: false,
            compression: None,
            revalidating: false,
            invalidate: true,
            origin,
            ranged: false,
        }
    }
}

/// 504 for an `only-if-cached` request the cache cannot answer.
async fn gateway_timeout<S: ClientStream>(
    client: &mut Client<S>,
    service: &Service,
    info: RequestInfo,
    head_len: usize,
    draining: bool,
) -> bool {
    client.buf.advance(head_len);
    let keep = info.keep_alive && !draining;
    let connection = parse::Connection {
        close: !keep,
        keep_alive: keep && info.version == Version::Http10,
        ..parse::Connection::default()
    };
    let body: &[u8] = if info.head_method { b"" } else { b"504 not in cache\n" };
    let own = super::Own { status: 504, location: None, content_type: "text/plain", body, connection };
    let (ok, bytes_out) = super::send_own(client, service, own, None).await;
    client.trace.bytes_out = bytes_out;
    client.trace.body_out = body.len() as u64;
    client.trace.cache = Some("miss");
    client.trace.cache_status = 504;
    keep && ok
}

/// Adds the stale entry's validators to the forwarded request head `w` wrote.
pub(super) fn add_validators<W: RequestWriter>(w: &mut W, plan: &Plan<'_>) {
    let Some(entry) = plan.stale.as_ref().filter(|_| plan.revalidating) else { return };
    let (etag, modified) = entry.validators();
    if let Some(etag) = etag {
        w.append(b"if-none-match", etag);
    }
    if let Some(modified) = modified {
        w.append(b"if-modified-since", modified);
    }
}

/// How the forwarded request ended, as the cache sees it.
pub(super) enum Ended<'a> {
    /// The server's response went to the client (teed into `capture`).
    Relayed { status: u16, capture: Option<&'a Capture> },
    /// The cache held the response back ([`Intercept`]); its head is in `client.out`.
    Intercepted { status: u16 },
    /// No response: the server could not be reached or failed first.
    Failed,
}

/// Phase "cache store". `Some(keep_alive)` when the cache answered the
/// client itself (revalidated, or stale on error), `None` otherwise.
pub(super) async fn finish<S: ClientStream>(
    client: &mut Client<S>,
    service: &Service,
    info: RequestInfo,
    mut plan: Plan<'_>,
    ended: Ended<'_>,
    draining: bool,
) -> Option<bool> {
    let cache = plan.cache;
    if plan.invalidate {
        // RFC 9111 §4.4: only a non-error status says the state changed.
        if let Ended::Relayed { status, capture } = ended {
            if policy::invalidates(status) {
                cache.purge(&plan.key, false);
                invalidate_named(&plan, capture);
            }
        }
        return None;
    }
    match ended {
        Ended::Relayed { status, capture } => {
            let captured = capture.and_then(Capture::bytes).filter(|_| !plan.head_method);
            match captured.and_then(cache::parse_captured) {
                Some((206, headers, body)) if plan.ranged => keep_piece(&plan, headers, body),
                Some((status, headers, body)) if !plan.ranged || status == 200 => store(&plan, status, headers, body),
                _ => {}
            }
            // (A HEAD's response says nothing about the body: nothing is stored from it.)
            if plan.revalidating && status != 0 {
                // The server sent a new response instead of a 304: it counts as a miss.
                cache.stats.misses.fetch_add(1, Ordering::Relaxed);
            }
            client.trace.cache = Some(if plan.revalidating { "revalidated" } else { "miss" });
            None
        }
        Ended::Intercepted { status: 304 } => {
            let stale = plan.stale.clone()?;
            let (_, update) = cache::parse_head(&client.out)?;
            let update: Vec<_> = update
                .into_iter()
                .filter(|(n, _)| !matches!(n.as_str(), "content-type" | "content-encoding"))
                .collect();
            let refreshed = Arc::new(stale.refreshed(&update, plan.requested, &cache.config));
            cache.insert_shared(&plan.key, refreshed.clone());
            // Waiters for this key need not wait for our client's write.
            plan._fetch = None;
            cache.stats.revalidated.fetch_add(1, Ordering::Relaxed);
            Some(serve(client, service, info, 0, &plan, &refreshed, "revalidated", draining).await)
        }
        Ended::Intercepted { .. } | Ended::Failed => {
            let stale = plan.stale.clone().filter(|e| e.within(e.directives.stale_if_error, Instant::now()))?;
            cache.stats.stale.fetch_add(1, Ordering::Relaxed);
            Some(serve(client, service, info, 0, &plan, &stale, "stale", draining).await)
        }
    }
}

/// Invalidates the targets an unsafe request's answer names in `Location`
/// and `Content-Location`, when they share the request's origin (RFC 9111
/// §4.4, [`policy::location`]).
fn invalidate_named(plan: &Plan<'_>, capture: Option<&Capture>) {
    let Some((_, headers)) = capture.and_then(Capture::bytes).and_then(cache::parse_head) else { return };
    let (scheme, authority) = (plan.origin.0, &plan.origin.1[..]);
    for name in ["location", "content-location"] {
        let named =
            policy::header(&headers, name).and_then(|v| policy::location::same_origin_target(v, scheme, authority));
        if let Some((path, query)) = named {
            let target = match query {
                Some(q) => [path, b"?", q].concat(),
                None => path.to_vec(),
            };
            plan.cache.purge(&target_key(plan.cache, scheme, authority, &target, "GET"), false);
        }
    }
}

/// Whether a shared cache may store a response with `status` and `headers` to this request.
fn may_store(plan: &Plan<'_>, status: u16, headers: &[(String, Vec<u8>)]) -> bool {
    let config = &plan.cache.config;
    let control = policy::control(headers, &config.targeted);
    let authorized = plan.header("authorization").is_some();
    policy::storable(status, &control, headers, authorized, config.heuristic)
}

/// Stores a complete response when a shared cache may.
fn store(plan: &Plan<'_>, status: u16, headers: Vec<(String, Vec<u8>)>, body: bytes::Bytes) {
    let cache = plan.cache;
    if !may_store(plan, status, &headers) {
        return;
    }
    let vary = policy::headers(&headers, "vary").collect::<Vec<_>>().join(&b","[..]);
    let vary = cache::vary_values(&vary, &|n| plan.value(n));
    let entry = Entry::new(status, headers, body, vary, plan.requested, SystemTime::now(), &cache.config);
    cache.insert(&plan.key, entry);
}

/// Keeps a `206` as a piece of its representation (RFC 9111 §3.3) when the
/// whole response could be stored (§3.3: "if the cache may store the
/// response") and [`Piece::of`] accepts it; once the pieces make the whole,
/// it is stored as the `200` it would have been (§3.4). Not on a service
/// with compression: its stored variants are keyed by the coding it picks,
/// which a combined identity response would not be.
fn keep_piece(plan: &Plan<'_>, headers: Vec<(String, Vec<u8>)>, body: bytes::Bytes) {
    let cache = plan.cache;
    if plan.compression.is_some() || !may_store(plan, 200, &headers) {
        return;
    }
    let Some(piece) = Piece::of(headers, body, plan.requested, cache.config.max_object) else { return };
    let combined = cache.combine(&plan.key, piece);
    if let Some(body) = combined.complete() {
        let (headers, requested) = (combined.headers.clone(), combined.requested);
        let entry = Entry::new(200, headers, body, Vec::new(), requested, SystemTime::now(), &cache.config);
        cache.insert(&plan.key, entry);
    }
}

/// Writes a stored response to the client: the entry, or 304 when the
/// client's own conditional request matches it (RFC 9111 §4.3.2), or the
/// ranges a GET asks of it (206, 416: [`ranged`]); a HEAD gets the head only.
/// The head goes through the client's head writer, as a relayed one does:
/// HTTP/1.1 bytes, or a header list for an HTTP/2 or HTTP/3 stream (no text
/// for the stream to parse). `head_len`: request head bytes still to
/// consume from `client.buf`.
#[allow(clippy::too_many_arguments)]
async fn serve<S: ClientStream>(
    client: &mut Client<S>,
    service: &Service,
    info: RequestInfo,
    head_len: usize,
    plan: &Plan<'_>,
    entry: &Entry,
    how: &'static str,
    draining: bool,
) -> bool {
    client.buf.advance(head_len);
    let keep = info.keep_alive && !draining;
    let port = super::alt_svc(client, service);
    let idle = service.timeouts.client_idle;
    let (status, body, ok, head_bytes) = if client.stream.takes_fields() {
        let mut list = FieldList::with_capacity(256 + entry.headers.len() * 48, entry.headers.len() + 4);
        let (status, body) = hit(&mut list, plan, entry, info, keep, port);
        let ok = client.stream.send_fields(&list).is_ok() && write_all(&mut client.stream, &body, idle).await.is_ok();
        (status, body, ok, list.text_len())
    } else {
        let (status, body) = hit(&mut Http1Head::new(&mut client.out), plan, entry, info, keep, port);
        let ok = write_all_two(&mut client.stream, &client.out, &body, idle).await.is_ok();
        (status, body, ok, client.out.len())
    };
    entry.hits.fetch_add(1, Ordering::Relaxed);
    plan.cache.stats.served_bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
    client.trace.bytes_out = (head_bytes + body.len()) as u64;
    client.trace.body_out = body.len() as u64;
    client.trace.cache = Some(how);
    client.trace.cache_status = status;
    keep && ok
}

/// Writes the head of a stored response (see [`serve`]) through `w`, with
/// `alt-svc` when HTTP/3 is advertised on `port`; its status and body.
fn hit<W: HeadWriter>(
    w: &mut W,
    plan: &Plan<'_>,
    entry: &Entry,
    info: RequestInfo,
    keep: bool,
    port: Option<u16>,
) -> (u16, Bytes) {
    let (close, keep_alive_10) = (!keep, keep && info.version == Version::Http10);
    let age = entry.age(Instant::now());
    let conditional = cache::not_modified(entry, plan.header("if-none-match"), plan.header("if-modified-since"));
    let answer = match ranged(plan, entry, info).filter(|_| !conditional) {
        Some(ranges) => range::answer(w, entry, age, ranges, close, keep_alive_10),
        None => {
            let status = if conditional { 304 } else { entry.status };
            cache::hit_head(w, entry, age, status, close, keep_alive_10);
            let body =
                if info.head_method || status == 304 || status == 204 { Bytes::new() } else { entry.body.clone() };
            (status, body)
        }
    };
    if let Some(port) = port {
        w.alt_svc(port);
    }
    answer
}

/// The byte ranges a GET asks of a stored 200 (RFC 9110 §14.2), when its
/// `If-Range`, if any, holds (§13.1.5); `None`: answer the whole response.
fn ranged(plan: &Plan<'_>, entry: &Entry, info: RequestInfo) -> Option<Ranges> {
    let value = plan.header("range").filter(|_| !info.head_method && entry.status == 200)?;
    if let Some(if_range) = plan.header("if-range") {
        let stored = |n| policy::header(&entry.headers, n);
        let holds =
            range::if_range_holds(if_range, stored("etag"), stored("last-modified"), stored("date"), entry.received_at);
        if !holds {
            return None;
        }
    }
    match range::evaluate(value, entry.body.len() as u64) {
        Ranges::Whole => None,
        ranges => Some(ranges),
    }
}
