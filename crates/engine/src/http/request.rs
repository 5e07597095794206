//! Phases 2 to 4 of a request: what the later phases need to know of it
//! ([`request_info`]), client protection ([`protect`], [`refuse`]), the
//! answer to an ACME http-01 validation ([`acme_challenge`]), routing
//! ([`route`], [`pool_or_reply`], [`switch_to`]), the cache's lookup
//! ([`cache_lookup`]) and the request's rewrite ([`rewrite_request`]).

use std::rc::Rc;
use std::time::Instant;

use bytes::Buf;
use switchyard_config::{Action, PoolId, Service, UpstreamProtocol};
use switchyard_http::error::{Kind, ProxyError};
use switchyard_http::request_writer::Http1Request;
use switchyard_http::route;

use super::answer::{fail, send_own, Answer, Own};
use super::log::{keep_meta, log};
use super::parse::{Connection, Framing, RequestHead, Version};
use super::rewrite::Forwarding;
use super::{
    cached, compress, https_location, is_idempotent, parse, rewrite, split_query, split_target, Client, RequestInfo,
    Routed,
};
use crate::protection::Refusal;
use crate::transport::ClientStream;
use crate::upstream;
use crate::worker::{Local, Worker};

/// Client protection of one request: a refusal of its connection, the
/// address lists for an address a trusted front proxy names, and the request
/// rate. No cost for a service without protection.
pub(super) fn protect<S>(client: &Client<S>, head: &RequestHead, service: usize, now: Instant) -> Result<(), Refusal> {
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
pub(super) async fn refuse<S: ClientStream>(
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

/// Phase 2: the request line for the log, the trace, and the facts about the
/// request the later phases need.
pub(super) fn request_info<S>(
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
pub(super) fn line_parts<'l>(line: &'l str, method: &'l [u8], target: &'l [u8]) -> (&'l str, Option<&'l str>) {
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
pub(super) fn acme_challenge<S>(
    client: &Client<S>,
    head: &RequestHead,
    service: &Service,
    local: &Local,
) -> Option<String> {
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
pub(super) fn route<'a, S>(
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
pub(super) enum Reply<'a> {
    /// A redirect or a fixed response.
    Answer(Answer<'a>),
    /// `deny`: the status, with its reason phrase as the body.
    Deny(u16),
}

/// Phase 3's outcome: the pool to forward to (`None`: the service has none
/// for this request), or the rule's own response.
pub(super) fn pool_or_reply<'r>(routed: &'r Routed<'_>, service: &Service) -> Result<Option<PoolId>, Reply<'r>> {
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
pub(super) fn switch_to<S>(
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
pub(super) async fn cache_lookup<'l, S: ClientStream>(
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
pub(super) fn rewrite_request<S>(
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

#[cfg(test)]
mod tests {
    use super::line_parts;

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
}
