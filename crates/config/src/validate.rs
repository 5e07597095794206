//! Validation: raw types → the model, reporting every problem.
//!
//! Pools are validated first so that services and rules can resolve pool
//! names to [`PoolId`]s; listeners are compared across the whole file at the
//! end, and then with the admin listener. `[admin]` and `[access_log]` are
//! checked in [`crate::ops`], a pool's `persistence` in [`crate::persistence`],
//! the service mode and layer-4 keys in [`crate::l4`], TLS and HTTP/2 in
//! [`crate::tls`] (the files it names in [`crate::pem`]). A value that is wrong
//! is reported and replaced by its default, so the rest of the file is still checked and one mistake does not hide another
//! (nor cause a cascade: a pool with a bad field still exists by name). The
//! [`Config`] built here is only handed out when no error was reported.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::ops::{Range, RangeInclusive};
use std::time::Duration;

use crate::compression::validate_compression;
use crate::diagnostic::Report;
use crate::health::{slow_start, validate_health_check, validate_passive};
use crate::l4::{check_udp_pools, parse_mode, parse_send_proxy, validate_layer4};
use crate::model::*;
use crate::ops::{validate_access_log, validate_admin, validate_event_log};
use crate::pem::Files;
use crate::persistence::{check_persistence_modes, validate_persistence};
use crate::raw::*;
use crate::rule::{validate_rule, RuleScope};
use crate::source::validate_source;
use crate::tls::{
    check_layer4_pools, parse_protocol, validate_http2, validate_http3, validate_server_tls, validate_upstream_tls,
};
use crate::units::{closest, is_token, parse_duration, parse_size, parse_socket_addr, suggest, Problem};

/// Idle keep-alive connections a worker keeps per server when the pool does
/// not say: enough for the concurrency of a busy HTTP/2 front (a hundred
/// streams on a few connections each take a server connection at once), so
/// that load does not close and reopen server connections.
const DEFAULT_MAX_IDLE_PER_SERVER: usize = 1024;

const BALANCE_METHODS: &[&str] =
    &["round-robin", "least-connections", "random-two", "source-hash", "hash", "maglev", "first"];

/// Shared state while validating: the report and the pool names.
pub(crate) struct Ctx<'r, 's> {
    pub(crate) r: &'r mut Report<'s>,
    pools: HashMap<String, PoolId>,
    /// Defined pool names in file order, for hints.
    pool_names: Vec<String>,
    /// Per pool (by id): whether a service or rule uses it, and its line.
    used: Vec<bool>,
    pool_lines: Vec<usize>,
    /// Where relative file paths start, and the time certificates are checked at.
    pub(crate) files: &'r Files,
}

impl Ctx<'_, '_> {
    /// Reports `problem` at `span`.
    pub(crate) fn problem(&mut self, span: &Range<usize>, problem: Problem) {
        let Problem { message, hint } = problem;
        self.r.push(crate::Severity::Error, span, message, hint);
    }

    /// Resolves a pool name, reporting an unknown one with a suggestion.
    pub(crate) fn resolve_pool(&mut self, name: &S<String>) -> Option<PoolId> {
        if let Some(&id) = self.pools.get(name.get_ref()) {
            self.used[id.0] = true;
            return Some(id);
        }
        let hint = match closest(name.get_ref(), self.pool_names.iter().map(String::as_str)) {
            Some(c) => format!("did you mean `{c}`?"),
            None if self.pool_names.is_empty() => "no pools are defined; add a [[pool]] table".to_string(),
            None => format!("defined pools: {}", self.pool_names.join(", ")),
        };
        self.r.error_hint(&name.span(), format!("pool `{}` is not defined", name.get_ref()), hint);
        None
    }

    /// An integer in `range`, or an error naming the range.
    pub(crate) fn int_in(&mut self, key: &str, value: &S<i64>, range: RangeInclusive<i64>) -> Option<i64> {
        let n = *value.get_ref();
        if range.contains(&n) {
            return Some(n);
        }
        self.r.error(&value.span(), format!("`{key}` must be between {} and {}, not {n}", range.start(), range.end()));
        None
    }

    /// A duration, or `default` when absent or wrong (the latter reported).
    pub(crate) fn duration(&mut self, value: &Option<S<String>>, default: Duration) -> Duration {
        let Some(v) = value else { return default };
        match parse_duration(v.get_ref()) {
            Ok(d) => d,
            Err(p) => {
                self.problem(&v.span(), p);
                default
            }
        }
    }

    pub(crate) fn size(&mut self, key: &str, value: &S<RawSize>) -> Option<u64> {
        match value.get_ref() {
            RawSize::Bytes(n) => match u64::try_from(*n) {
                Ok(n) => Some(n),
                Err(_) => {
                    self.r.error(&value.span(), format!("`{key}` must not be negative"));
                    None
                }
            },
            RawSize::Text(t) => parse_size(t).map_err(|p| self.problem(&value.span(), p)).ok(),
        }
    }
}

/// True when `key` was written but unusable (see `broken` in the raw types),
/// so it must not also be reported as missing.
pub(crate) fn broken(broken: &[String], key: &str) -> bool {
    broken.iter().any(|k| k == key)
}

/// Validates a whole raw configuration. The result is meaningful only when
/// `r` holds no error afterwards.
pub(crate) fn validate(r: &mut Report<'_>, raw: &RawConfig, files: &Files) -> Config {
    let mut cx =
        Ctx { r, pools: HashMap::new(), pool_names: Vec::new(), used: Vec::new(), pool_lines: Vec::new(), files };
    let workers =
        raw.workers.as_ref().and_then(|w| cx.int_in("workers", w, 1..=1024)).and_then(|w| usize::try_from(w).ok());
    let drain_timeout = cx.duration(&raw.drain_timeout, Duration::from_secs(30));

    let pools: Vec<Pool> = raw.pools.iter().map(|p| validate_pool(&mut cx, p)).collect();

    if raw.services.is_empty() && !broken(&raw.broken, "service") {
        cx.r.error_hint(
            &(0..0),
            "no [[service]] is defined",
            "add a [[service]] table with a name, a listen address and a pool",
        );
    }
    let mut service_names: HashMap<String, usize> = HashMap::new();
    let mut listeners: Vec<Listener> = Vec::new();
    let mut services = Vec::new();
    for raw_service in &raw.services {
        let service = validate_service(&mut cx, raw_service, &mut listeners);
        if let Some(name) = &raw_service.get_ref().name {
            if let Some(first) = service_names.get(name.get_ref()) {
                cx.r.error_hint(
                    &name.span(),
                    format!("service `{}` is defined twice (first at line {first})", name.get_ref()),
                    "service names must be unique",
                );
            } else {
                let line = cx.r.line_of(&raw_service.span());
                service_names.insert(name.get_ref().clone(), line);
            }
        }
        services.push(service);
    }
    check_listeners(cx.r, &listeners);
    check_udp_pools(&mut cx, &raw.pools, &pools, &services);
    check_layer4_pools(&mut cx, &raw.pools, &services);
    crate::acme::check_http01_listener(&mut cx, &raw.services, &services);
    check_persistence_modes(&mut cx, &raw.pools, &pools, &services);
    let admin = raw.admin.as_ref().map(|a| validate_admin(&mut cx, a, &listeners));
    let access_log = raw.access_log.as_ref().map(|l| validate_access_log(&mut cx, l));
    let event_log = raw.event_log.as_ref().and_then(|l| validate_event_log(&mut cx, l));
    let cluster = raw.cluster.as_ref().map(|c| crate::cluster::validate_cluster(&mut cx, c, &listeners));
    let tracing = raw.tracing.as_ref().map(|t| crate::tracing::validate_tracing(&mut cx, t));

    for (i, raw_pool) in raw.pools.iter().enumerate() {
        if cx.used.get(i) == Some(&false) {
            let name = raw_pool.get_ref().name.as_ref();
            // A duplicate name is already an error, and does not name this pool.
            if let Some(name) = name.filter(|n| cx.pools.get(n.get_ref()) == Some(&PoolId(i))) {
                cx.r.warning(
                    &name.span(),
                    format!("pool `{}` is not used by any service or rule", name.get_ref()),
                    None,
                );
            }
        }
    }
    Config { workers, drain_timeout, services, pools, admin, access_log, event_log, cluster, tracing }
}

fn validate_service(cx: &mut Ctx<'_, '_>, service: &S<RawService>, listeners: &mut Vec<Listener>) -> Service {
    let span = service.span();
    let raw = service.get_ref();
    let name = match &raw.name {
        Some(n) if n.get_ref().is_empty() => {
            cx.r.error(&n.span(), "a service name must not be empty");
            String::new()
        }
        Some(n) => n.get_ref().clone(),
        None => {
            if !broken(&raw.broken, "name") {
                cx.r.error_hint(&span, "this service has no `name`", "add name = \"web\" (names must be unique)");
            }
            String::new()
        }
    };
    let mode = match &raw.mode {
        Some(m) => parse_mode(cx, m),
        None => Some(Mode::Http),
    };
    let udp = mode == Some(Mode::Udp);
    let own = validate_listen(cx, raw, &span, &name, udp, listeners);
    let default_pool = raw.pool.as_ref().and_then(|p| cx.resolve_pool(p));
    let defaults = Forwarded::default();
    let flag = |v: &Option<S<bool>>, d: bool| v.as_ref().map_or(d, |b| *b.get_ref());
    let forwarded = Forwarded {
        x_forwarded_for: flag(&raw.x_forwarded_for, defaults.x_forwarded_for),
        x_forwarded_proto: flag(&raw.x_forwarded_proto, defaults.x_forwarded_proto),
        forwarded: flag(&raw.forwarded, defaults.forwarded),
    };
    let timeouts = raw.timeouts.as_ref().map_or_else(Timeouts::default, |t| validate_timeouts(cx, t.get_ref()));
    let limits = raw.limits.as_ref().map_or_else(Limits::default, |l| validate_limits(cx, l.get_ref()));
    let tls = raw.tls.as_ref().and_then(|t| validate_server_tls(cx, t));
    if mode == Some(Mode::Https) && raw.tls.is_none() && !broken(&raw.broken, "tls") {
        cx.r.error_hint(
            &span,
            "this `https` service has no `tls`",
            "add tls = { certificate = \"site.crt\", key = \"site.key\" } (PEM files)",
        );
    }
    let http2 = raw.http2.as_ref().map_or_else(Http2::default, |h| validate_http2(cx, h.get_ref()));
    let http3 = raw.http3.as_ref().map_or_else(Http3::default, |h| validate_http3(cx, h.get_ref()));
    if let (Some(raw3), Some(tls)) = (raw.http3.as_ref().filter(|_| http3.early_data), tls.as_ref()) {
        early_data_needs(cx, &raw3.span(), tls);
    }
    if http3.enabled && mode == Some(Mode::Https) {
        // QUIC takes the UDP side of every listener's port.
        let quic: Vec<Listener> = own
            .iter()
            .filter_map(|addr| listeners.iter().find(|l| l.addr == *addr && !l.udp && l.service == name))
            .map(|l| Listener { addr: l.addr, span: l.span.clone(), service: l.service.clone(), udp: true })
            .collect();
        listeners.extend(quic);
    }
    let compression = raw.compression.as_ref().and_then(|c| validate_compression(cx, c.get_ref()));
    let cache = raw.cache.as_ref().and_then(|c| crate::cache::validate_cache(cx, c));
    let scope = RuleScope { mode, client_auth: tls.as_ref().is_some_and(|t| t.client_auth.is_some()) };
    let rules = raw.rules.iter().map(|rule| validate_rule(cx, rule, &scope)).collect();
    let layer4 = validate_layer4(cx, service, mode);
    let protection = raw.protection.as_ref().map(|p| crate::protection::validate_protection(cx, p, mode));
    Service {
        name,
        mode: mode.unwrap_or(Mode::Http),
        listeners: own,
        default_pool,
        rules,
        timeouts,
        limits,
        forwarded,
        l4: layer4.l4,
        accept_proxy: layer4.accept_proxy,
        sni_routes: layer4.sni_routes,
        tls: tls.filter(|_| mode == Some(Mode::Https)),
        http2,
        http3: if mode == Some(Mode::Https) { http3 } else { Http3::default() },
        compression: compression.filter(|_| matches!(mode, Some(Mode::Http | Mode::Https))),
        cache: cache.filter(|_| matches!(mode, Some(Mode::Http | Mode::Https))),
        protection: protection.filter(|_| mode != Some(Mode::Udp)),
    }
}

/// The service's listener addresses; each is also added to `listeners`.
fn validate_listen(
    cx: &mut Ctx<'_, '_>,
    raw: &RawService,
    span: &Range<usize>,
    name: &str,
    udp: bool,
    listeners: &mut Vec<Listener>,
) -> Vec<SocketAddr> {
    let mut own = Vec::new();
    match &raw.listen {
        None if broken(&raw.broken, "listen") => {}
        None => cx.r.error_hint(
            span,
            if name.is_empty() {
                "this service has no `listen` address".to_string()
            } else {
                format!("service `{name}` has no `listen` address")
            },
            "add listen = \"127.0.0.1:8080\" (or an array of addresses)",
        ),
        Some(list) if list.get_ref().is_empty() => {
            cx.r.error_hint(&list.span(), "`listen` is empty", "give at least one address, e.g. \"127.0.0.1:8080\"")
        }
        Some(list) => {
            for item in list.get_ref() {
                match parse_socket_addr(item.get_ref()) {
                    Ok(addr) => {
                        own.push(addr);
                        listeners.push(Listener { addr, span: item.span(), service: name.to_string(), udp });
                    }
                    Err(p) => cx.problem(&item.span(), p),
                }
            }
        }
    }
    own
}

fn validate_timeouts(cx: &mut Ctx<'_, '_>, raw: &RawTimeouts) -> Timeouts {
    let d = Timeouts::default();
    Timeouts {
        client_header: cx.duration(&raw.client_header, d.client_header),
        client_idle: cx.duration(&raw.client_idle, d.client_idle),
        connect: cx.duration(&raw.connect, d.connect),
        server_response: cx.duration(&raw.server_response, d.server_response),
        server_idle: cx.duration(&raw.server_idle, d.server_idle),
        client_body: cx.duration(&raw.client_body, d.client_body),
    }
}

fn validate_limits(cx: &mut Ctx<'_, '_>, raw: &RawLimits) -> Limits {
    let d = Limits::default();
    let max_header_bytes = raw.max_header_bytes.as_ref().and_then(|v| {
        let n = cx.size("max_header_bytes", v)?;
        if (1024..=1 << 20).contains(&n) {
            usize::try_from(n).ok()
        } else {
            cx.r.error_hint(
                &v.span(),
                format!("`max_header_bytes` must be between 1KiB and 1MiB, not {n} bytes"),
                "the default, 16KiB, suits most sites",
            );
            None
        }
    });
    let max_headers = raw
        .max_headers
        .as_ref()
        .and_then(|v| cx.int_in("max_headers", v, 1..=1000))
        .and_then(|n| usize::try_from(n).ok());
    let max_body_bytes = raw.max_body_bytes.as_ref().and_then(|v| cx.size("max_body_bytes", v));
    let max_uri_bytes = raw.max_uri_bytes.as_ref().and_then(|v| {
        let n = cx.size("max_uri_bytes", v)?;
        if (64..=1 << 20).contains(&n) {
            usize::try_from(n).ok()
        } else {
            cx.r.error_hint(
                &v.span(),
                format!("`max_uri_bytes` must be between 64 bytes and 1MiB, not {n} bytes"),
                "the default, 8KiB, suits most sites",
            );
            None
        }
    });
    Limits {
        max_header_bytes: max_header_bytes.unwrap_or(d.max_header_bytes),
        max_headers: max_headers.unwrap_or(d.max_headers),
        max_body_bytes: max_body_bytes.or(d.max_body_bytes),
        max_uri_bytes: max_uri_bytes.unwrap_or(d.max_uri_bytes),
    }
}

/// A service listener.
pub(crate) struct Listener {
    /// The address listened on.
    pub(crate) addr: SocketAddr,
    /// Where it is written.
    pub(crate) span: Range<usize>,
    /// Its service's name.
    pub(crate) service: String,
    /// A UDP socket (mode `udp`); the others are TCP. A UDP and a TCP socket
    /// can be bound to the same address and port.
    pub(crate) udp: bool,
}

/// Whether two listeners could not both be bound: the same address and port,
/// or a wildcard address and a specific address of its family on the same
/// port. (IPv4 and IPv6 wildcards are not compared with each other: the
/// engine binds IPv6 sockets v6-only.)
pub(crate) fn overlaps(a: &SocketAddr, b: &SocketAddr) -> bool {
    a == b || (a.port() == b.port() && a.is_ipv4() == b.is_ipv4() && a.ip().is_unspecified() != b.ip().is_unspecified())
}

/// Each address:port is listened on once per protocol (see [`overlaps`]).
fn check_listeners(r: &mut Report<'_>, listeners: &[Listener]) {
    for (j, Listener { addr, span, udp, .. }) in listeners.iter().enumerate() {
        let earlier = listeners[..j].iter().find(|l| l.udp == *udp && overlaps(&l.addr, addr));
        let Some(Listener { addr: other, span: other_span, service, .. }) = earlier else {
            continue;
        };
        let line = r.line_of(other_span);
        if other == addr {
            r.error_hint(
                span,
                format!("listener `{addr}` is already used by service `{service}` (line {line})"),
                if *udp {
                    "a udp service may share its address and port with a tcp or http service, not with another \
                     udp service"
                } else {
                    "an address and port can be listened on only once; route by host or path with rules instead"
                },
            );
        } else {
            r.error_hint(
                span,
                format!("listener `{addr}` overlaps `{other}` of service `{service}` (line {line})"),
                format!("a wildcard address already covers every address of its family on port {}", addr.port()),
            );
        }
    }
}

fn validate_pool(cx: &mut Ctx<'_, '_>, raw: &S<RawPool>) -> Pool {
    let span = raw.span();
    let raw = raw.get_ref();
    let id = PoolId(cx.used.len());
    cx.used.push(false);
    cx.pool_lines.push(cx.r.line_of(&span));
    let name = match &raw.name {
        Some(n) if n.get_ref().is_empty() => {
            cx.r.error(&n.span(), "a pool name must not be empty");
            String::new()
        }
        Some(n) => {
            if let Some(first) = cx.pools.get(n.get_ref()) {
                let line = cx.pool_lines[first.0];
                cx.r.error_hint(
                    &n.span(),
                    format!("pool `{}` is defined twice (first at line {line})", n.get_ref()),
                    "pool names must be unique",
                );
            } else {
                cx.pools.insert(n.get_ref().clone(), id);
                cx.pool_names.push(n.get_ref().clone());
            }
            n.get_ref().clone()
        }
        None => {
            if !broken(&raw.broken, "name") {
                cx.r.error_hint(&span, "this pool has no `name`", "add name = \"main\" (names must be unique)");
            }
            String::new()
        }
    };
    let algorithm = raw.balance.as_ref().map_or(Some(Algorithm::RoundRobin), |b| parse_balance(cx, b));
    let hash_key = match &raw.hash_key {
        None => HashKey::ClientAddr,
        Some(k) => {
            if let Some(a) = algorithm.filter(|a| !matches!(a, Algorithm::Hash | Algorithm::Maglev)) {
                cx.r.error_hint(
                    &k.span(),
                    format!("`hash_key` applies only to balance = \"hash\" or \"maglev\", not {}", balance_name(a)),
                    "remove `hash_key`, or set balance = \"hash\" or \"maglev\"",
                );
            }
            parse_hash_key(cx, k)
        }
    };
    let max_idle_per_server = raw
        .max_idle_per_server
        .as_ref()
        .and_then(|v| cx.int_in("max_idle_per_server", v, 0..=10_000))
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(DEFAULT_MAX_IDLE_PER_SERVER);
    let servers = match &raw.servers {
        None if broken(&raw.broken, "servers") => Vec::new(),
        None => {
            cx.r.error_hint(
                &span,
                format!("pool `{name}` has no servers"),
                "add servers = [ { address = \"127.0.0.1:8081\" } ]",
            );
            Vec::new()
        }
        Some(list) if list.get_ref().is_empty() => {
            cx.r.error_hint(
                &list.span(),
                format!("pool `{name}` has no servers"),
                "add at least one { address = \"IP:port\" }",
            );
            Vec::new()
        }
        Some(list) => {
            let ramp = slow_start(cx, &raw.slow_start, Duration::ZERO);
            validate_servers(cx, &name, list.get_ref(), ramp)
        }
    };
    let queue = raw.queue.as_ref().and_then(|q| validate_queue(cx, q, &name, &servers));
    let retries = raw
        .retries
        .as_ref()
        .and_then(|v| cx.int_in("retries", v, 0..=10))
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(Pool::DEFAULT_RETRIES);
    let protocol = raw.protocol.as_ref().map_or_else(UpstreamProtocol::default, |p| parse_protocol(cx, p));
    let source = raw.source.as_ref().and_then(|v| validate_source(cx, v, &servers, protocol)).unwrap_or_default();
    let max_streams_per_connection = max_streams_per_connection(cx, raw.max_streams_per_connection.as_ref(), protocol);
    Pool {
        queue,
        retries,
        name,
        algorithm: algorithm.unwrap_or(Algorithm::RoundRobin),
        hash_key,
        servers,
        max_idle_per_server,
        max_streams_per_connection,
        send_proxy: raw.send_proxy.as_ref().and_then(|v| parse_send_proxy(cx, v)),
        source,
        persistence: raw.persistence.as_ref().and_then(|p| validate_persistence(cx, p)),
        health_check: raw.health_check.as_ref().and_then(|h| validate_health_check(cx, h)),
        tls: raw.tls.as_ref().and_then(|t| validate_upstream_tls(cx, t)),
        protocol,
        passive: raw.passive.as_ref().and_then(|p| validate_passive(cx, p)),
    }
}

/// A pool's `max_streams_per_connection`: 1..=10,000, and only where the pool
/// speaks HTTP/2 (an HTTP/1.1 connection carries one request at a time).
fn max_streams_per_connection(cx: &mut Ctx<'_, '_>, raw: Option<&S<i64>>, protocol: UpstreamProtocol) -> u32 {
    let default = Pool::DEFAULT_MAX_STREAMS_PER_CONNECTION;
    let Some(value) = raw else {
        return default;
    };
    if protocol != UpstreamProtocol::Http2 {
        cx.r.error_hint(
            &value.span(),
            "`max_streams_per_connection` applies only to a pool with protocol = \"h2\"",
            "an HTTP/1.1 server connection carries one request at a time; remove it, or add protocol = \"h2\"",
        );
        return default;
    }
    cx.int_in("max_streams_per_connection", value, 1..=10_000).and_then(|n| u32::try_from(n).ok()).unwrap_or(default)
}

/// A pool's `queue`: `size` 1..=1,000,000, `timeout` from 1 ms to 1 hour. A queue
/// in a pool without any `max_connections` can never fill: that is a warning.
fn validate_queue(cx: &mut Ctx<'_, '_>, raw: &S<RawQueue>, pool: &str, servers: &[Server]) -> Option<Queue> {
    let q = raw.get_ref();
    let size = match &q.size {
        None => Some(Queue::DEFAULT_SIZE),
        Some(v) => cx.int_in("size", v, 1..=1_000_000).and_then(|n| u32::try_from(n).ok()),
    };
    let timeout = cx.duration(&q.timeout, Queue::DEFAULT_TIMEOUT);
    let mut ok = size.is_some();
    if let Some(t) =
        q.timeout.as_ref().filter(|_| timeout < Duration::from_millis(1) || timeout > Duration::from_secs(3600))
    {
        cx.r.error_hint(
            &t.span(),
            "a queue `timeout` must be between 1ms and 1h",
            "a request waits at most this long for a connection slot, then gets 503",
        );
        ok = false;
    }
    if !servers.is_empty() && servers.iter().all(|s| s.max_connections.is_none()) {
        cx.r.warning(
            &raw.span(),
            format!("pool `{pool}` has a `queue` but none of its servers has `max_connections`, so nothing ever waits"),
            Some("give the servers a limit, e.g. { address = \"10.0.0.1:80\", max_connections = 100 }".to_string()),
        );
    }
    Some(Queue { size: size?, timeout }).filter(|_| ok)
}

fn parse_balance(cx: &mut Ctx<'_, '_>, value: &S<String>) -> Option<Algorithm> {
    let algorithm = match value.get_ref().as_str() {
        "round-robin" => Algorithm::RoundRobin,
        "least-connections" => Algorithm::LeastConnections,
        "random-two" => Algorithm::RandomTwo,
        "source-hash" => Algorithm::SourceHash,
        "hash" => Algorithm::Hash,
        "maglev" => Algorithm::Maglev,
        "first" => Algorithm::First,
        other => {
            let hint = suggest(&other.replace('_', "-"), BALANCE_METHODS, "methods are");
            cx.r.error_hint(&value.span(), format!("unknown balance method `{other}`"), hint);
            return None;
        }
    };
    Some(algorithm)
}

fn balance_name(a: Algorithm) -> &'static str {
    match a {
        Algorithm::RoundRobin => "\"round-robin\"",
        Algorithm::LeastConnections => "\"least-connections\"",
        Algorithm::RandomTwo => "\"random-two\"",
        Algorithm::SourceHash => "\"source-hash\"",
        Algorithm::Hash => "\"hash\"",
        Algorithm::Maglev => "\"maglev\"",
        Algorithm::First => "\"first\"",
    }
}

fn parse_hash_key(cx: &mut Ctx<'_, '_>, value: &S<String>) -> HashKey {
    let text = value.get_ref().as_str();
    match text {
        "client" => return HashKey::ClientAddr,
        "uri" => return HashKey::Uri,
        _ => {}
    }
    if let Some(header) = text.strip_prefix("header:") {
        let header = header.trim();
        if is_token(header) {
            return HashKey::Header(header.to_ascii_lowercase());
        }
        cx.r.error(&value.span(), format!("`{header}` is not a valid header name"));
    } else {
        cx.r.error_hint(
            &value.span(),
            format!("unknown hash_key `{text}`"),
            "write \"client\", \"uri\" or \"header:NAME\"",
        );
    }
    HashKey::ClientAddr
}

fn validate_servers(cx: &mut Ctx<'_, '_>, pool: &str, raw: &[S<RawServer>], ramp: Duration) -> Vec<Server> {
    let mut servers = Vec::new();
    let mut seen: Vec<(SocketAddr, usize)> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for raw_server in raw {
        let span = raw_server.span();
        let s = raw_server.get_ref();
        let addr = match &s.address {
            None => {
                if !broken(&s.broken, "address") {
                    cx.r.error_hint(&span, "this server has no `address`", "add address = \"127.0.0.1:8081\"");
                }
                None
            }
            Some(a) => match parse_socket_addr(a.get_ref()) {
                Ok(addr) => {
                    if let Some((_, line)) = seen.iter().find(|(other, _)| *other == addr) {
                        cx.r.error_hint(
                            &a.span(),
                            format!("server `{addr}` appears twice in pool `{pool}` (first at line {line})"),
                            "to send it more traffic, raise its `weight` instead",
                        );
                    } else {
                        seen.push((addr, cx.r.line_of(&a.span())));
                    }
                    Some(addr)
                }
                Err(p) => {
                    cx.problem(&a.span(), p);
                    None
                }
            },
        };
        if let Some(n) = &s.name {
            if names.contains(n.get_ref()) {
                cx.r.warning(
                    &n.span(),
                    format!("server name `{}` is used twice in pool `{pool}`", n.get_ref()),
                    Some("statistics and logs will not tell the two apart".to_string()),
                );
            }
            names.push(n.get_ref().clone());
        }
        let weight = s.weight.as_ref().and_then(|w| cx.int_in("weight", w, 0..=1000)).unwrap_or(1);
        let max_connections = s
            .max_connections
            .as_ref()
            .and_then(|m| cx.int_in("max_connections", m, 1..=i64::from(u32::MAX)))
            .and_then(|m| u32::try_from(m).ok());
        let check_addr = s.check_address.as_ref().and_then(|a| match parse_socket_addr(a.get_ref()) {
            Ok(addr) => Some(addr),
            Err(p) => {
                cx.problem(&a.span(), p);
                None
            }
        });
        let slow_start = slow_start(cx, &s.slow_start, ramp);
        let Some(addr) = addr else { continue };
        servers.push(Server {
            name: s.name.as_ref().or(s.address.as_ref()).map_or_else(|| addr.to_string(), |n| n.get_ref().clone()),
            addr,
            weight: u32::try_from(weight).unwrap_or(1),
            backup: s.backup.as_ref().is_some_and(|b| *b.get_ref()),
            max_connections,
            check_addr,
            slow_start,
        });
    }
    servers
}

/// `http3.early_data` needs a session cache (rustls takes 0-RTT only from
/// stateful resumption) and no client certificates (0-RTT requests and the
/// answers sent before the handshake ends precede their check).
fn early_data_needs(cx: &mut Ctx<'_, '_>, span: &Range<usize>, tls: &ServerTls) {
    if tls.client_auth.is_some() {
        cx.r.error_hint(
            span,
            "`http3.early_data` cannot be used with `tls.client_auth`",
            "early data and early answers precede the client certificate check: remove early_data",
        );
    }
    if tls.session_cache == 0 {
        cx.r.error_hint(
            span,
            "`http3.early_data` needs the TLS session cache",
            "0-RTT resumes sessions from `tls.session_cache`: remove `session_cache = 0` or early_data",
        );
    }
}
