//! Validation of the service mode and the layer-4 keywords.
//!
//! A service's `mode` decides which of its keys mean something: the HTTP keys
//! (`rules`, `timeouts`, `limits`, the forwarding headers, `http2`) only in
//! `http` and `https`; `tls` only in `https`;
//! `idle_timeout` and `zero_copy` in `tcp` and `tls-passthrough`;
//! `max_connections` and `when_full` everywhere but `udp`; `udp` only in `udp`; `sni` only in `tls-passthrough`;
//! `accept_proxy` everywhere but `udp`. A key written for another mode is an
//! error rather than ignored, so a reader never wonders whether `timeouts`
//! bound a TCP relay. When the mode itself is unusable these checks are
//! skipped: the mode's error is the one to fix, and guessing a mode would
//! only add noise.
//!
//! Invariants of an accepted service: a layer-4 service has somewhere to send
//! connections (a `pool`, or for `tls-passthrough` at least `sni` routes);
//! an SNI pattern is a lower-case DNS name, optionally `*.` followed by one
//! (a `*` nowhere else); `when_full` is only written with `max_connections`.
//! Across the file, a pool used by a `udp` service has neither `persistence`
//! nor `send_proxy` or `source`, which the UDP relay does not implement.

use std::net::IpAddr;
use std::ops::Range;

use crate::model::{Cidr, Mode, Pool, PoolId, ProxyVersion, Service, SniRoute, WhenFull, L4};
use crate::raw::{RawPool, RawService, RawSniRoute, RawUdp, S};
use crate::units::{parse_cidr, suggest, Problem};
use crate::validate::{broken, Ctx};

const MODES: &[&str] = &["http", "https", "tcp", "udp", "tls-passthrough"];
const WHEN_FULL: &[&str] = &["wait", "refuse"];
const PROXY_VERSIONS: &[&str] = &["v1", "v2"];
const NAME_HINT: &str =
    "write a DNS name of letters, digits, `-` and dots, optionally starting with `*.`, such as `*.example.com`";

/// The layer-4 parts of a [`Service`].
pub(crate) struct Layer4 {
    pub(crate) l4: L4,
    pub(crate) accept_proxy: Vec<Cidr>,
    pub(crate) sni_routes: Vec<SniRoute>,
}

/// The mode as written in the file.
pub(crate) fn mode_name(mode: Mode) -> &'static str {
    mode.name()
}

/// "an `http`", "a `tcp`", … for messages.
fn a_mode(mode: Mode) -> String {
    let article = if matches!(mode, Mode::Http | Mode::Https) { "an" } else { "a" };
    format!("{article} `{}`", mode_name(mode))
}

/// `mode "http"` or `modes "tcp" and "tls-passthrough"`.
fn mode_list(modes: &[Mode]) -> String {
    let quoted: Vec<String> = modes.iter().map(|m| format!("\"{}\"", mode_name(*m))).collect();
    match quoted.as_slice() {
        [one] => format!("mode {one}"),
        [rest @ .., last] => format!("modes {} and {last}", rest.join(", ")),
        [] => String::new(),
    }
}

/// Parses `mode`; `None` when it is unknown or not supported (reported).
pub(crate) fn parse_mode(cx: &mut Ctx<'_, '_>, mode: &S<String>) -> Option<Mode> {
    let m = mode.get_ref().as_str();
    let parsed = match m {
        "http" => Mode::Http,
        "tcp" => Mode::Tcp,
        "udp" => Mode::Udp,
        "tls-passthrough" => Mode::TlsPassthrough,
        "https" => Mode::Https,
        other => {
            let hint = suggest(&other.replace('_', "-"), MODES, "modes are");
            cx.r.error_hint(&mode.span(), format!("unknown mode `{other}`"), hint);
            return None;
        }
    };
    Some(parsed)
}

/// Validates the layer-4 keys of a service whose mode is `mode` (`None`:
/// unusable, see the module doc) and checks that the keys written apply to it.
pub(crate) fn validate_layer4(cx: &mut Ctx<'_, '_>, service: &S<RawService>, mode: Option<Mode>) -> Layer4 {
    let raw = service.get_ref();
    if let Some(mode) = mode {
        check_keys(cx, raw, mode);
        check_destination(cx, service, mode);
    }
    let mut l4 = L4::default();
    l4.idle_timeout = cx.duration(&raw.idle_timeout, l4.idle_timeout);
    l4.max_connections = raw
        .max_connections
        .as_ref()
        .and_then(|m| cx.int_in("max_connections", m, 1..=1_000_000))
        .and_then(|m| u32::try_from(m).ok());
    if let Some(w) = &raw.when_full {
        l4.when_full = parse_when_full(cx, w).unwrap_or(l4.when_full);
        // Where `when_full` does not apply at all, that is the one error to report.
        let applies = mode.is_some_and(|m| modes_of("when_full").is_some_and(|modes| modes.contains(&m)));
        if applies && raw.max_connections.is_none() && !broken(&raw.broken, "max_connections") {
            cx.r.error_hint(
                &w.span(),
                "`when_full` needs `max_connections`",
                "it says what happens to connections beyond `max_connections`: add max_connections = 10000, \
                 or remove `when_full`",
            );
        }
    }
    l4.zero_copy = raw.zero_copy.as_ref().map_or(l4.zero_copy, |z| *z.get_ref());
    if let Some(udp) = &raw.udp {
        udp_settings(cx, udp.get_ref(), &mut l4);
    }
    let accept_proxy = raw.accept_proxy.as_ref().map(|list| networks(cx, list.get_ref())).unwrap_or_default();
    let sni_routes = raw.sni.as_ref().map(|routes| sni_routes(cx, routes.get_ref())).unwrap_or_default();
    Layer4 { l4, accept_proxy, sni_routes }
}

fn parse_when_full(cx: &mut Ctx<'_, '_>, value: &S<String>) -> Option<WhenFull> {
    match value.get_ref().as_str() {
        "wait" => Some(WhenFull::Wait),
        "refuse" => Some(WhenFull::Refuse),
        other => {
            let hint = suggest(other, WHEN_FULL, "values are");
            cx.r.error_hint(&value.span(), format!("unknown `when_full` value `{other}`"), hint);
            None
        }
    }
}

fn udp_settings(cx: &mut Ctx<'_, '_>, raw: &RawUdp, l4: &mut L4) {
    if let Some(n) = raw.max_flows.as_ref().and_then(|m| cx.int_in("max_flows", m, 1..=10_000_000)) {
        l4.max_flows = usize::try_from(n).unwrap_or(l4.max_flows);
    }
    l4.flow_idle = cx.duration(&raw.flow_idle, l4.flow_idle);
    l4.per_datagram = raw.per_datagram.as_ref().map_or(l4.per_datagram, |p| *p.get_ref());
}

/// The networks of a list of CIDR strings; each bad one is reported at its place.
pub(crate) fn networks(cx: &mut Ctx<'_, '_>, list: &[S<String>]) -> Vec<Cidr> {
    let mut nets = Vec::new();
    for item in list {
        match parse_cidr(item.get_ref()) {
            Ok(net) => nets.push(net),
            Err(p) => cx.problem(&item.span(), p),
        }
    }
    nets
}

/// The modes a service key applies to; `None` for keys of every mode.
fn modes_of(key: &str) -> Option<&'static [Mode]> {
    Some(match key {
        "x_forwarded_for" | "x_forwarded_proto" | "forwarded" | "timeouts" | "limits" | "rules" | "http2"
        | "compression" | "cache" => &[Mode::Http, Mode::Https],
        "tls" | "http3" => &[Mode::Https],
        "idle_timeout" | "zero_copy" => &[Mode::Tcp, Mode::TlsPassthrough],
        "max_connections" | "when_full" => &[Mode::Http, Mode::Https, Mode::Tcp, Mode::TlsPassthrough],
        "udp" => &[Mode::Udp],
        "accept_proxy" | "protection" => &[Mode::Http, Mode::Https, Mode::Tcp, Mode::TlsPassthrough],
        "sni" => &[Mode::TlsPassthrough],
        _ => return None,
    })
}

/// The keys with a mode-specific meaning that `raw` writes, and where.
fn written_keys(raw: &RawService) -> Vec<(&'static str, Range<usize>)> {
    [
        ("x_forwarded_for", raw.x_forwarded_for.as_ref().map(S::span)),
        ("x_forwarded_proto", raw.x_forwarded_proto.as_ref().map(S::span)),
        ("forwarded", raw.forwarded.as_ref().map(S::span)),
        ("timeouts", raw.timeouts.as_ref().map(S::span)),
        ("limits", raw.limits.as_ref().map(S::span)),
        ("rules", raw.rules.first().map(S::span)),
        ("idle_timeout", raw.idle_timeout.as_ref().map(S::span)),
        ("max_connections", raw.max_connections.as_ref().map(S::span)),
        ("when_full", raw.when_full.as_ref().map(S::span)),
        ("zero_copy", raw.zero_copy.as_ref().map(S::span)),
        ("udp", raw.udp.as_ref().map(S::span)),
        ("accept_proxy", raw.accept_proxy.as_ref().map(S::span)),
        ("sni", raw.sni.as_ref().map(S::span)),
        ("tls", raw.tls.as_ref().map(S::span)),
        ("http2", raw.http2.as_ref().map(S::span)),
        ("http3", raw.http3.as_ref().map(S::span)),
        ("compression", raw.compression.as_ref().map(S::span)),
        ("cache", raw.cache.as_ref().map(S::span)),
        ("protection", raw.protection.as_ref().map(S::span)),
    ]
    .into_iter()
    .filter_map(|(key, span)| Some((key, span?)))
    .collect()
}

/// Reports each written key that does not apply to `mode`.
fn check_keys(cx: &mut Ctx<'_, '_>, raw: &RawService, mode: Mode) {
    for (key, span) in written_keys(raw) {
        let Some(modes) = modes_of(key).filter(|modes| !modes.contains(&mode)) else {
            continue;
        };
        let mut hint = format!("`{key}` applies only to {}", mode_list(modes));
        hint.push_str(match (key, mode) {
            ("idle_timeout", Mode::Http | Mode::Https) => "; an http service has `timeouts`",
            ("idle_timeout" | "max_connections" | "when_full" | "zero_copy", Mode::Udp) => {
                "; a udp service is tuned in `udp = { ... }`"
            }
            ("accept_proxy", Mode::Udp) => "; a PROXY protocol header arrives over TCP",
            ("timeouts", _) => "; a layer-4 relay has `idle_timeout`",
            ("rules", Mode::TlsPassthrough) => "; route by server name with `sni`",
            ("tls", Mode::Http) => "; write mode = \"https\" to terminate TLS",
            ("tls", Mode::TlsPassthrough) => "; a `tls-passthrough` service relays TLS without decrypting it",
            _ => "",
        });
        let message = format!("`{key}` does not apply to {} service", a_mode(mode));
        cx.r.error_hint(&span, message, hint);
    }
}

/// A layer-4 service must have somewhere to send a connection: unlike HTTP,
/// there is no response to answer with when nothing chose a pool.
fn check_destination(cx: &mut Ctx<'_, '_>, service: &S<RawService>, mode: Mode) {
    let raw = service.get_ref();
    if matches!(mode, Mode::Http | Mode::Https) || raw.pool.is_some() || broken(&raw.broken, "pool") {
        return;
    }
    if mode == Mode::TlsPassthrough {
        if raw.sni.as_ref().is_some_and(|routes| !routes.get_ref().is_empty()) || broken(&raw.broken, "sni") {
            return;
        }
        cx.r.error_hint(
            &service.span(),
            "this `tls-passthrough` service has neither `sni` routes nor a default `pool`",
            "add sni = [ { name = \"*.example.com\", pool = \"NAME\" } ], or pool = \"NAME\" for every connection",
        );
        return;
    }
    cx.r.error_hint(
        &service.span(),
        format!("this {} service has no `pool`", a_mode(mode)),
        "add pool = \"NAME\": every connection goes to a server of that pool",
    );
}

fn sni_routes(cx: &mut Ctx<'_, '_>, raw: &[S<RawSniRoute>]) -> Vec<SniRoute> {
    // Accepted patterns with their spans, to find routes an earlier one hides.
    let mut seen: Vec<(String, Range<usize>)> = Vec::new();
    let mut routes = Vec::new();
    for entry in raw {
        let route = entry.get_ref();
        let pool = route.pool.as_ref().and_then(|p| cx.resolve_pool(p));
        if route.pool.is_none() && !broken(&route.broken, "pool") {
            cx.r.error_hint(&entry.span(), "this `sni` route has no `pool`", "add pool = \"NAME\"");
        }
        let Some(name) = &route.name else {
            if !broken(&route.broken, "name") {
                cx.r.error_hint(&entry.span(), "this `sni` route has no `name`", "add name = \"www.example.com\"");
            }
            continue;
        };
        let pattern = match sni_pattern(name.get_ref()) {
            Ok(p) => p,
            Err(p) => {
                cx.problem(&name.span(), p);
                continue;
            }
        };
        if let Some((earlier, span)) = seen.iter().find(|(earlier, _)| covers(earlier, &pattern)) {
            let line = cx.r.line_of(span);
            cx.r.warning(
                &name.span(),
                format!("`sni` route `{pattern}` is never used: `{earlier}` (line {line}) comes first and matches it"),
                Some("routes are tried in order: put the more specific name first, or remove this one".to_string()),
            );
        }
        seen.push((pattern.clone(), name.span()));
        if let Some(pool) = pool {
            routes.push(SniRoute { pattern, pool });
        }
    }
    routes
}

/// Whether every name `later` matches is matched by `earlier` (see the
/// engine's `sni_matches`: `*.suffix` matches exactly one more label).
fn covers(earlier: &str, later: &str) -> bool {
    if earlier == later {
        return true;
    }
    match (earlier.strip_prefix("*."), later.split_once('.')) {
        (Some(suffix), Some((label, rest))) => !later.starts_with("*.") && label != "*" && rest == suffix,
        _ => false,
    }
}

/// An SNI pattern: a DNS name, optionally `*.` then one, lower-cased.
pub(crate) fn sni_pattern(text: &str) -> Result<String, Problem> {
    let lower = text.to_ascii_lowercase();
    let name = lower.strip_prefix("*.").unwrap_or(&lower);
    if text.is_empty() {
        return Err(Problem::new("an `sni` name must not be empty").hint(NAME_HINT));
    }
    if text == "*" {
        return Err(Problem::new("`*` alone is not an `sni` name")
            .hint("connections that no route matches go to the service's `pool`"));
    }
    if name.contains('*') {
        return Err(Problem::new(format!("`*` in `{text}` may only be the whole first label"))
            .hint("write `*.example.com`: it matches exactly one label in front of `example.com`"));
    }
    if name.ends_with('.') {
        return Err(Problem::new(format!("`{text}` ends with a dot"))
            .hint("TLS clients send server names without the final dot: remove it"));
    }
    if name.parse::<IpAddr>().is_ok() {
        return Err(Problem::new(format!("`{text}` is an IP address, not a server name"))
            .hint("TLS clients never send an IP address as the server name; use the service's `pool` for them"));
    }
    let label_ok = |l: &str| {
        (1..=63).contains(&l.len())
            && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if name.len() > 253 || !name.split('.').all(label_ok) {
        let hint = if text.is_ascii() {
            NAME_HINT.to_string()
        } else {
            "write an internationalized name in its ASCII form (`xn--...`), as TLS clients send it".to_string()
        };
        return Err(Problem::new(format!("`{text}` is not a valid server name")).hint(hint));
    }
    Ok(lower)
}

/// Parses a pool's `send_proxy`.
pub(crate) fn parse_send_proxy(cx: &mut Ctx<'_, '_>, value: &S<String>) -> Option<ProxyVersion> {
    match value.get_ref().as_str() {
        "v1" => Some(ProxyVersion::V1),
        "v2" => Some(ProxyVersion::V2),
        other => {
            let hint = suggest(other, PROXY_VERSIONS, "versions are");
            cx.r.error_hint(&value.span(), format!("unknown PROXY protocol version `{other}`"), hint);
            None
        }
    }
}

/// Reports pool settings the UDP relay does not implement, once per pool,
/// at the setting, naming the first `udp` service that uses the pool.
pub(crate) fn check_udp_pools(cx: &mut Ctx<'_, '_>, raw_pools: &[S<RawPool>], pools: &[Pool], services: &[Service]) {
    let mut reported: Vec<PoolId> = Vec::new();
    let udp = services.iter().filter(|s| s.mode == Mode::Udp);
    for (service, id) in udp.filter_map(|s| Some((s, s.default_pool?))) {
        let (Some(raw), Some(pool)) = (raw_pools.get(id.0), pools.get(id.0)) else { continue };
        if reported.contains(&id) {
            continue;
        }
        reported.push(id);
        let raw = raw.get_ref();
        let unsupported = [
            ("persistence", raw.persistence.as_ref().map(S::span), "UDP flows already stick to their server"),
            ("send_proxy", raw.send_proxy.as_ref().map(S::span), "PROXY protocol is sent only over TCP"),
            ("source", raw.source.as_ref().map(S::span), "the UDP relay sends from the balancer's own address"),
        ];
        for (key, span, why) in unsupported {
            let Some(span) = span else { continue };
            cx.r.error_hint(
                &span,
                format!(
                    "pool `{}` is used by udp service `{}`, which does not support `{key}`",
                    pool.name, service.name
                ),
                format!("{why}: remove `{key}`, or give the udp service a pool of its own"),
            );
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn sni_patterns() {
        assert_eq!(sni_pattern("A.Example.COM").unwrap(), "a.example.com");
        assert_eq!(sni_pattern("*.example.com").unwrap(), "*.example.com");
        assert_eq!(sni_pattern("xn--bcher-kva.example").unwrap(), "xn--bcher-kva.example");
        assert_eq!(sni_pattern("localhost").unwrap(), "localhost");
        let long_label = format!("{}.example", "a".repeat(64));
        for bad in
            ["", "*", "a.*.example.com", "*a.example.com", "**.example.com", "*.", "example.com.", "192.0.2.1", "::1"]
                .into_iter()
                .chain(["-a.example", "a-.example", "a..example", "a_b.example", "bücher.example", &long_label])
        {
            assert!(sni_pattern(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn earlier_routes_cover_later_ones() {
        assert!(covers("a.example.com", "a.example.com"));
        assert!(covers("*.example.com", "a.example.com"));
        assert!(covers("*.example.com", "*.example.com"));
        assert!(!covers("*.example.com", "example.com"));
        assert!(!covers("*.example.com", "a.b.example.com"));
        assert!(!covers("*.b.example.com", "*.example.com"));
        assert!(!covers("a.example.com", "*.example.com"));
    }
}
