//! Validation of a pool's `health_check` and `passive` tables.
//!
//! Active kinds: `tcp` (connect), `tls` (handshake), `http` (request and
//! expected response), `grpc` (the standard `grpc.health.v1` call) and `udp`
//! (send and expect). Keys that belong to
//! another kind are refused with a pointer to the one they belong to, so a
//! check never silently tests less than its author wrote.
//!
//! Invariants of an accepted [`HealthCheck`]: a `udp` check's `send` holds at
//! least one byte, its `expect`, when present, too; an `http` check's path
//! starts with `/`, its method is an upper-case token, its status ranges lie
//! in 100..=599 and its `expect_body` is not empty (and absent with `HEAD`); a `grpc`
//! check's `service` holds only visible ASCII (it goes into a protobuf string); `interval` is
//! 100ms..=1h; `timeout` is shorter than `interval` (a probe ends before the
//! next starts); `rise` and `fall` are 1..=100; `port`, when present, is
//! 1..=65535. An accepted [`Passive`] has `failures` 1..=1000 and `eject`
//! 1s..=1h.

use std::time::Duration;

use crate::model::{CheckKind, GrpcCheck, HealthCheck, HttpCheck, Passive};
use crate::raw::{RawHealthCheck, RawPassive, S};
use crate::validate::{broken, Ctx};

const KINDS: &str = "\"tcp\", \"http\", \"grpc\", \"tls\" or \"udp\"";
const DEFAULT_INTERVAL: Duration = Duration::from_secs(2);
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);
const MIN_INTERVAL: Duration = Duration::from_millis(100);
const MAX_INTERVAL: Duration = Duration::from_secs(3600);

/// Validates a pool's `health_check`; `None` when it is unusable (reported).
pub(crate) fn validate_health_check(cx: &mut Ctx<'_, '_>, raw: &S<RawHealthCheck>) -> Option<HealthCheck> {
    let h = raw.get_ref();
    let kind = check_kind(cx, raw);
    let kind = kind.and_then(|k| match k {
        "udp" => udp(cx, raw),
        "http" => http(cx, h).map(CheckKind::Http),
        "grpc" => grpc(cx, h).map(CheckKind::Grpc),
        "tcp" => none_of_http_udp(cx, h, "tcp").then_some(CheckKind::Tcp),
        _ => none_of_http_udp(cx, h, "tls").then_some(CheckKind::Tls),
    });
    let (interval, timeout) = times(cx, h)?;
    let count = |cx: &mut Ctx<'_, '_>, key: &str, v: &Option<S<i64>>| {
        v.as_ref().map_or(Some(2), |v| cx.int_in(key, v, 1..=100)).and_then(|n| u32::try_from(n).ok())
    };
    let rise = count(cx, "rise", &h.rise);
    let fall = count(cx, "fall", &h.fall);
    let port = match &h.port {
        None => Some(None),
        Some(p) => cx.int_in("port", p, 1..=65_535).and_then(|n| u16::try_from(n).ok()).map(Some),
    };
    Some(HealthCheck { kind: kind?, interval, timeout, rise: rise?, fall: fall?, port: port? })
}

/// Checks `type`: required, one of the four kinds.
fn check_kind<'a>(cx: &mut Ctx<'_, '_>, raw: &'a S<RawHealthCheck>) -> Option<&'a str> {
    let h = raw.get_ref();
    let Some(kind) = &h.kind else {
        if !broken(&h.broken, "type") {
            cx.r.error_hint(&raw.span(), "`health_check` needs `type`", format!("write type = {KINDS}"));
        }
        return None;
    };
    let k = kind.get_ref().as_str();
    if ["udp", "http", "grpc", "tcp", "tls"].contains(&k) {
        return Some(k);
    }
    cx.r.error_hint(&kind.span(), format!("unknown health check type `{k}`"), format!("known types are {KINDS}"));
    None
}

/// The `udp` kind: `send` required, `expect` optional, no HTTP keys.
fn udp(cx: &mut Ctx<'_, '_>, raw: &S<RawHealthCheck>) -> Option<CheckKind> {
    let h = raw.get_ref();
    let http_ok = no_keys(cx, "udp", &http_keys(h), "http") & no_keys(cx, "udp", &grpc_keys(h), "grpc");
    let send = h.send.as_ref().and_then(|s| payload(cx, "send", s));
    if h.send.is_none() && !broken(&h.broken, "send") {
        cx.r.error_hint(&raw.span(), "`health_check` needs `send`", "write send = \"ping\\n\": the datagram sent");
    }
    let expect = h.expect.as_ref().map(|e| payload(cx, "expect", e));
    let expect = expect.map_or(Some(None), |e| e.map(Some));
    http_ok.then_some(CheckKind::Udp { send: send?, expect: expect? })
}

/// The HTTP keys written, with their spans.
fn http_keys(h: &RawHealthCheck) -> Vec<(&'static str, std::ops::Range<usize>)> {
    let mut keys = Vec::new();
    let strings = [("method", &h.method), ("path", &h.path), ("host", &h.host), ("expect_body", &h.expect_body)];
    keys.extend(strings.into_iter().filter_map(|(k, v)| Some((k, v.as_ref()?.span()))));
    keys.extend(h.expect_status.as_ref().map(|v| ("expect_status", v.span())));
    keys
}

/// The gRPC keys written, with their spans.
fn grpc_keys(h: &RawHealthCheck) -> Vec<(&'static str, std::ops::Range<usize>)> {
    h.service.as_ref().map(|v| ("service", v.span())).into_iter().collect()
}

/// The UDP keys written, with their spans.
fn udp_keys(h: &RawHealthCheck) -> Vec<(&'static str, std::ops::Range<usize>)> {
    [("send", &h.send), ("expect", &h.expect)].into_iter().filter_map(|(k, v)| Some((k, v.as_ref()?.span()))).collect()
}

/// Refuses each of `keys` in a check of type `kind`: they belong to `owner`.
fn no_keys(cx: &mut Ctx<'_, '_>, kind: &str, keys: &[(&str, std::ops::Range<usize>)], owner: &str) -> bool {
    for (key, span) in keys {
        cx.r.error_hint(
            span,
            format!("`{key}` does not apply to a health check of type `{kind}`"),
            format!("`{key}` belongs to type = \"{owner}\""),
        );
    }
    keys.is_empty()
}

/// `tcp` and `tls` take neither HTTP, gRPC nor UDP keys.
fn none_of_http_udp(cx: &mut Ctx<'_, '_>, h: &RawHealthCheck, kind: &str) -> bool {
    let http_ok = no_keys(cx, kind, &http_keys(h), "http");
    let grpc_ok = no_keys(cx, kind, &grpc_keys(h), "grpc");
    no_keys(cx, kind, &udp_keys(h), "udp") && http_ok && grpc_ok
}

/// The `grpc` kind: `service` optional, no HTTP or UDP keys.
fn grpc(cx: &mut Ctx<'_, '_>, h: &RawHealthCheck) -> Option<GrpcCheck> {
    let http_ok = no_keys(cx, "grpc", &http_keys(h), "http");
    let udp_ok = no_keys(cx, "grpc", &udp_keys(h), "udp");
    let service = match &h.service {
        None => String::new(),
        Some(v) if v.get_ref().bytes().all(|b| b.is_ascii_graphic()) => v.get_ref().clone(),
        Some(v) => {
            cx.r.error_hint(
                &v.span(),
                "`service` must be a gRPC service name (visible ASCII, no spaces)",
                "write service = \"my.package.MyService\", or leave it out to ask about the whole server",
            );
            return None;
        }
    };
    (http_ok && udp_ok).then_some(GrpcCheck { service })
}

/// The `http` kind.
fn http(cx: &mut Ctx<'_, '_>, h: &RawHealthCheck) -> Option<HttpCheck> {
    let udp_ok = no_keys(cx, "http", &udp_keys(h), "udp") & no_keys(cx, "http", &grpc_keys(h), "grpc");
    let method = match &h.method {
        None => Some("GET".to_string()),
        Some(m) if !m.get_ref().is_empty() && m.get_ref().bytes().all(|b| b.is_ascii_uppercase()) => {
            Some(m.get_ref().clone())
        }
        Some(m) => {
            cx.r.error_hint(&m.span(), "`method` must be an upper-case HTTP method", "write method = \"HEAD\"");
            None
        }
    };
    let path = match &h.path {
        None => Some("/".to_string()),
        Some(p) if p.get_ref().starts_with('/') && p.get_ref().bytes().all(|b| b.is_ascii_graphic()) => {
            Some(p.get_ref().clone())
        }
        Some(p) => {
            cx.r.error_hint(&p.span(), "`path` must start with `/` and hold no spaces", "write path = \"/healthz\"");
            None
        }
    };
    let host = match &h.host {
        None => Some(None),
        Some(v) if !v.get_ref().is_empty() && v.get_ref().bytes().all(|b| b.is_ascii_graphic()) => {
            Some(Some(v.get_ref().clone()))
        }
        Some(v) => {
            cx.r.error(&v.span(), "`host` must be a non-empty host name without spaces");
            None
        }
    };
    let statuses = h.expect_status.as_ref().map_or(Some(vec![(200, 399)]), |s| statuses(cx, s));
    let body = h.expect_body.as_ref().map(|b| payload(cx, "expect_body", b));
    let body = body.map_or(Some(None), |b| b.map(Some));
    if let (Some(Some(_)), Some("HEAD"), Some(b)) = (&body, method.as_deref(), &h.expect_body) {
        cx.r.error_hint(
            &b.span(),
            "`expect_body` can never match the answer to a HEAD request (it has no body)",
            "use method = \"GET\", or drop `expect_body`",
        );
        return None;
    }
    if !udp_ok {
        return None;
    }
    Some(HttpCheck { method: method?, path: path?, host: host?, statuses: statuses?, body: body? })
}

/// `expect_status`: each entry a code ("200"), a class ("2xx") or a range ("200-399").
fn statuses(cx: &mut Ctx<'_, '_>, raw: &S<Vec<S<String>>>) -> Option<Vec<(u16, u16)>> {
    if raw.get_ref().is_empty() {
        cx.r.error_hint(&raw.span(), "`expect_status` must not be empty", "write expect_status = [200, 204]");
        return None;
    }
    let mut all = Some(Vec::new());
    for entry in raw.get_ref() {
        let text = entry.get_ref().trim();
        let code = |s: &str| s.trim().parse::<u16>().ok().filter(|c| (100..=599).contains(c));
        let range = if let Some(class) = text.strip_suffix("xx").or_else(|| text.strip_suffix("XX")) {
            class.parse::<u16>().ok().filter(|c| (1..=5).contains(c)).map(|c| (c * 100, c * 100 + 99))
        } else if let Some((lo, hi)) = text.split_once('-') {
            code(lo).zip(code(hi)).filter(|(lo, hi)| lo <= hi)
        } else {
            code(text).map(|c| (c, c))
        };
        match (range, all.as_mut()) {
            (Some(r), Some(list)) => list.push(r),
            (Some(_), None) => {}
            (None, _) => {
                cx.r.error_hint(
                    &entry.span(),
                    format!("`{text}` is not a status, a class or a range of statuses"),
                    "write a code in 100..=599 (200), a class (\"2xx\") or a range (\"200-399\")",
                );
                all = None;
            }
        }
    }
    all
}

/// A payload string as bytes; an empty one is refused (reported).
fn payload(cx: &mut Ctx<'_, '_>, key: &str, v: &S<String>) -> Option<Vec<u8>> {
    if v.get_ref().is_empty() {
        cx.r.error(&v.span(), format!("`{key}` must not be empty"));
        return None;
    }
    Some(v.get_ref().as_bytes().to_vec())
}

/// `interval` and `timeout`. An absent timeout is 1s, or half the interval
/// when that is shorter, so setting only a short interval is accepted.
fn times(cx: &mut Ctx<'_, '_>, h: &RawHealthCheck) -> Option<(Duration, Duration)> {
    let interval = cx.duration(&h.interval, DEFAULT_INTERVAL);
    let mut ok = true;
    if let Some(v) = &h.interval {
        if !(MIN_INTERVAL..=MAX_INTERVAL).contains(&interval) {
            cx.r.error(&v.span(), "`interval` must be between 100ms and 1h");
            ok = false;
        }
    }
    let timeout = cx.duration(&h.timeout, DEFAULT_TIMEOUT.min(interval / 2));
    if let Some(v) = &h.timeout {
        if ok && timeout >= interval {
            cx.r.error_hint(
                &v.span(),
                "`timeout` must be shorter than `interval`",
                "a probe must end before the next one starts",
            );
            ok = false;
        }
    }
    ok.then_some((interval, timeout))
}

/// Validates a pool's `passive` table; `None` when unusable (reported).
pub(crate) fn validate_passive(cx: &mut Ctx<'_, '_>, raw: &S<RawPassive>) -> Option<Passive> {
    let p = raw.get_ref();
    let failures = p.failures.as_ref().map_or(Some(3), |f| cx.int_in("failures", f, 1..=1000));
    let eject = cx.duration(&p.eject, Duration::from_secs(10));
    let eject_ok = match &p.eject {
        Some(v) if !(Duration::from_secs(1)..=MAX_INTERVAL).contains(&eject) => {
            cx.r.error(&v.span(), "`eject` must be between 1s and 1h");
            false
        }
        _ => true,
    };
    let failures = u32::try_from(failures?).ok()?;
    eject_ok.then_some(Passive { failures, eject })
}

/// A `slow_start` duration: zero (none) up to 1h. Unlike other durations it
/// may be written as zero (`"0s"`), which turns off a slow start a server
/// would otherwise take from its pool.
pub(crate) fn slow_start(cx: &mut Ctx<'_, '_>, raw: &Option<S<String>>, default: Duration) -> Duration {
    if raw.as_ref().is_some_and(|v| is_zero_duration(v.get_ref())) {
        return Duration::ZERO;
    }
    let d = cx.duration(raw, default);
    match raw {
        Some(v) if d > MAX_INTERVAL => {
            cx.r.error(&v.span(), "`slow_start` must be at most 1h");
            default
        }
        _ => d,
    }
}

/// Whether `text` is a zero duration with a valid unit (`"0s"`, `"0ms"`).
fn is_zero_duration(text: &str) -> bool {
    let text = text.trim();
    let unit = text.trim_start_matches('0');
    unit.len() < text.len() && ["ms", "s", "m", "h", "d"].contains(&unit.trim_start())
}
