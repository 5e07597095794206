//! Validation of `tls.acme.on_demand`: certificates issued at the first
//! handshake for a name that has none, behind an allow check.
//!
//! Invariants of an accepted [`OnDemand`]: it has an allow check — an `ask`
//! endpoint (`http://` URL, no query fragment) or a non-empty `allow` list,
//! or both; every `allow` entry is a DNS name or `*.` and a DNS name (one
//! label), lower case, listed once; the limits are positive and bounded.

use std::time::Duration;

use crate::acme::is_dns_name;
use crate::model::*;
use crate::raw::*;
use crate::validate::{broken, Ctx};

/// On-demand certificates held at most, unless `max_certificates` says.
pub const DEFAULT_MAX_CERTIFICATES: usize = 100;
/// Names decided or ordered at once, unless `max_pending` says.
pub const DEFAULT_MAX_PENDING: usize = 4;
/// New orders per `order_period`, unless `max_orders` says.
pub const DEFAULT_MAX_ORDERS: u32 = 20;
const DEFAULT_ORDER_PERIOD: Duration = Duration::from_secs(3600);
const DEFAULT_DENY_FOR: Duration = Duration::from_secs(60);
const DEFAULT_ASK_TIMEOUT: Duration = Duration::from_secs(3);
const DEFAULT_WAIT: Duration = Duration::from_secs(20);

/// Validates `on_demand`; `None` on errors.
pub(crate) fn validate_on_demand(cx: &mut Ctx<'_, '_>, raw: &S<RawOnDemand>) -> Option<OnDemand> {
    let span = raw.span();
    let raw = raw.get_ref();
    let mut ok = true;
    let ask = match &raw.ask {
        Some(url) => {
            let url = ask_url(cx, url);
            ok &= url.is_some();
            url
        }
        None => None,
    };
    let allow = match &raw.allow {
        Some(list) => {
            let names = allow(cx, list);
            ok &= names.is_some();
            names.unwrap_or_default()
        }
        None => Vec::new(),
    };
    let empty_allow = raw.allow.as_ref().is_some_and(|l| l.get_ref().is_empty());
    if raw.ask.is_none()
        && (raw.allow.is_none() || empty_allow)
        && !broken(&raw.broken, "ask")
        && !broken(&raw.broken, "allow")
    {
        cx.r.error_hint(
            &span,
            "`on_demand` has no allow check: any name a client sends would get a certificate",
            "add ask = \"http://127.0.0.1:5555/allowed\" (an endpoint that answers 2xx for the names to allow) \
             and/or allow = [\"*.example.com\"] (the names and patterns allowed)",
        );
        ok = false;
    }
    let mut limit = |key: &str, value: &Option<S<i64>>, default: usize, max: i64| match value {
        Some(v) => cx.int_in(key, v, 1..=max).and_then(|n| usize::try_from(n).ok()).ok_or(()),
        None => Ok(default),
    };
    let max_certificates = limit("max_certificates", &raw.max_certificates, DEFAULT_MAX_CERTIFICATES, 100_000);
    let max_pending = limit("max_pending", &raw.max_pending, DEFAULT_MAX_PENDING, 1_000);
    let max_orders = limit("max_orders", &raw.max_orders, DEFAULT_MAX_ORDERS as usize, 100_000);
    let order_period = cx.duration(&raw.order_period, DEFAULT_ORDER_PERIOD);
    let deny_for = cx.duration(&raw.deny_for, DEFAULT_DENY_FOR);
    let ask_timeout = cx.duration(&raw.ask_timeout, DEFAULT_ASK_TIMEOUT);
    let wait = cx.duration(&raw.wait, DEFAULT_WAIT);
    let on_demand = OnDemand {
        ask,
        allow,
        max_certificates: max_certificates.ok()?,
        max_pending: max_pending.ok()?,
        max_orders: u32::try_from(max_orders.ok()?).ok()?,
        order_period,
        deny_for,
        ask_timeout,
        wait,
    };
    ok.then_some(on_demand)
}

/// The `ask` endpoint: an `http://` URL with a host and no fragment.
fn ask_url(cx: &mut Ctx<'_, '_>, value: &S<String>) -> Option<String> {
    let url = value.get_ref().trim();
    let rest = url.get(..7).filter(|s| s.eq_ignore_ascii_case("http://")).map(|_| &url[7..]);
    let host = rest.map(|rest| rest.split(['/', '?', '#']).next().unwrap_or(""));
    if url.get(..8).is_some_and(|s| s.eq_ignore_ascii_case("https://")) {
        cx.r.error_hint(
            &value.span(),
            format!("`{url}`: the `ask` endpoint must be an http:// URL (switchyard asks it over plain HTTP)"),
            "run the endpoint on a local or private address and write its http:// URL",
        );
        return None;
    }
    let valid = host.is_some_and(|h| !h.is_empty() && !h.contains(char::is_whitespace)) && !url.contains('#');
    if !valid {
        cx.r.error_hint(
            &value.span(),
            format!("`{url}` is not an `ask` URL"),
            "write an http:// URL such as \"http://127.0.0.1:5555/allowed\" (switchyard adds ?domain=<name>)",
        );
        return None;
    }
    Some(url.to_string())
}

/// The `allow` list: names and `*.` patterns, lower case, each once.
fn allow(cx: &mut Ctx<'_, '_>, list: &S<Vec<S<String>>>) -> Option<Vec<String>> {
    let mut names: Vec<String> = Vec::new();
    let mut ok = true;
    for item in list.get_ref() {
        let name = item.get_ref().trim().trim_end_matches('.').to_ascii_lowercase();
        let base = name.strip_prefix("*.").unwrap_or(&name);
        if !is_dns_name(base) {
            cx.r.error_hint(
                &item.span(),
                format!("`{}` is not a name or a `*.` pattern", item.get_ref()),
                "write a name such as \"shop.example.com\", or \"*.example.com\" for the names one label below it",
            );
            ok = false;
        } else if names.contains(&name) {
            cx.r.error(&item.span(), format!("`{name}` is listed twice in `allow`"));
            ok = false;
        } else {
            names.push(name);
        }
    }
    ok.then_some(names)
}
