//! Validation of a pool's `health_check` table.
//!
//! Only the UDP "send and expect" probe exists for now; other kinds the
//! product plans are refused with a pointer to their issue, so a file
//! written for a later version fails loudly instead of probing nothing.
//!
//! Invariants of an accepted [`HealthCheck`]: `send` holds at least one byte;
//! `expect`, when present, too; `interval` is 100ms..=1h; `timeout` is
//! shorter than `interval` (a probe ends before the next starts); `rise` and
//! `fall` are 1..=100; `port`, when present, is 1..=65535.

use std::time::Duration;

use crate::model::{CheckKind, HealthCheck};
use crate::raw::{RawHealthCheck, S};
use crate::validate::{broken, Ctx};

/// Kinds of the product that are not built yet, with their issue.
const FUTURE_KINDS: &[(&str, u32)] = &[("http", 7), ("tcp", 7)];
const DEFAULT_INTERVAL: Duration = Duration::from_secs(2);
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);
const MIN_INTERVAL: Duration = Duration::from_millis(100);
const MAX_INTERVAL: Duration = Duration::from_secs(3600);

/// Validates a pool's `health_check`; `None` when it is unusable (reported).
pub(crate) fn validate_health_check(cx: &mut Ctx<'_, '_>, raw: &S<RawHealthCheck>) -> Option<HealthCheck> {
    let h = raw.get_ref();
    let kind_ok = check_kind(cx, raw);
    let send = h.send.as_ref().and_then(|s| payload(cx, "send", s));
    if h.send.is_none() && !broken(&h.broken, "send") {
        cx.r.error_hint(&raw.span(), "`health_check` needs `send`", "write send = \"ping\\n\": the datagram sent");
    }
    let expect = h.expect.as_ref().map(|e| payload(cx, "expect", e));
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
    if !kind_ok {
        return None;
    }
    let expect = expect.map_or(Some(None), |e| e.map(Some))?;
    Some(HealthCheck {
        kind: CheckKind::Udp { send: send?, expect },
        interval,
        timeout,
        rise: rise?,
        fall: fall?,
        port: port?,
    })
}

/// Checks `type`: required, and only "udp" for now.
fn check_kind(cx: &mut Ctx<'_, '_>, raw: &S<RawHealthCheck>) -> bool {
    let h = raw.get_ref();
    let Some(kind) = &h.kind else {
        if !broken(&h.broken, "type") {
            cx.r.error_hint(&raw.span(), "`health_check` needs `type`", "write type = \"udp\"");
        }
        return false;
    };
    let k = kind.get_ref().as_str();
    if k == "udp" {
        return true;
    }
    if let Some((_, issue)) = FUTURE_KINDS.iter().find(|(name, _)| *name == k) {
        cx.r.error_hint(
            &kind.span(),
            format!("health check type `{k}` is not supported yet (issue {issue})"),
            "the only type for now is \"udp\"",
        );
    } else {
        cx.r.error_hint(&kind.span(), format!("unknown health check type `{k}`"), "the only type for now is \"udp\"");
    }
    false
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
