//! Client protection (`protection` on a service): the validated model and
//! its validation.
//!
//! Every key is optional and a service without the table has no protection
//! state at all. `allow`, `deny`, `max_connections_per_client` and
//! `connection_rate` apply to every TCP mode (`http`, `https`, `tcp`,
//! `tls-passthrough`); `request_rate` and `client_address_header` need HTTP
//! requests and are an error elsewhere, like any key written for another mode.
//! A table that sets nothing is refused: it would read as protection that is
//! not there.

use std::time::Duration;

use crate::l4::networks;
use crate::model::{Cidr, Mode};
use crate::raw::*;
use crate::units::{is_token, parse_duration};
use crate::validate::Ctx;

/// Default for [`Protection::table_size`].
pub const DEFAULT_TABLE_SIZE: usize = 65_536;

/// A service's client protection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protection {
    /// Most connections one client address holds at once; `None`: unlimited.
    pub max_connections_per_client: Option<u32>,
    /// New connections per client address per window; `None`: unlimited.
    pub connection_rate: Option<Rate>,
    /// HTTP requests per client address per window; `None`: unlimited.
    pub request_rate: Option<Rate>,
    /// When not empty, only these networks are served.
    pub allow: Vec<Cidr>,
    /// Networks refused; wins over `allow`.
    pub deny: Vec<Cidr>,
    /// Where trusted front proxies put the client's address (HTTP only).
    pub client_address_header: Option<ClientAddressHeader>,
    /// Most client addresses tracked at once (counters for the limits above).
    pub table_size: usize,
}

impl Protection {
    /// Whether any limit needs the per-client table (the address lists do not).
    pub fn counts(&self) -> bool {
        self.max_connections_per_client.is_some() || self.connection_rate.is_some() || self.request_rate.is_some()
    }
}

/// A rate: at most `count` events per `per`, refilled evenly (see docs/security.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Events allowed per window (also the largest burst).
    pub count: u32,
    /// The window.
    pub per: Duration,
}

/// A header that carries the client address, set by trusted front proxies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientAddressHeader {
    /// Header name, lower case (`x-forwarded-for`).
    pub name: String,
    /// Peers (and earlier hops) whose header entries are believed.
    pub trusted: Vec<Cidr>,
}

/// Validates a `protection` table of a service in `mode` (`None`: unusable mode).
pub(crate) fn validate_protection(cx: &mut Ctx<'_, '_>, raw: &S<RawProtection>, mode: Option<Mode>) -> Protection {
    let p = raw.get_ref();
    let l4_only = matches!(mode, Some(Mode::Tcp | Mode::TlsPassthrough));
    for (key, span) in [
        ("request_rate", p.request_rate.as_ref().map(S::span)),
        ("client_address_header", p.client_address_header.as_ref().map(S::span)),
    ] {
        if let (Some(span), true) = (span, l4_only) {
            cx.r.error_hint(
                &span,
                format!("`protection.{key}` does not apply to a `{}` service", mode.map_or("", Mode::name)),
                "it needs HTTP requests: it applies only to modes \"http\" and \"https\"",
            );
        }
    }
    let max_connections_per_client = p
        .max_connections_per_client
        .as_ref()
        .and_then(|v| cx.int_in("max_connections_per_client", v, 1..=1_000_000))
        .and_then(|n| u32::try_from(n).ok());
    let connection_rate = p.connection_rate.as_ref().and_then(|r| rate(cx, "connection_rate", r));
    let request_rate = p.request_rate.as_ref().and_then(|r| rate(cx, "request_rate", r));
    let allow = p.allow.as_ref().map(|l| networks(cx, l.get_ref())).unwrap_or_default();
    let deny = p.deny.as_ref().map(|l| networks(cx, l.get_ref())).unwrap_or_default();
    let client_address_header = p.client_address_header.as_ref().and_then(|h| header(cx, h));
    let table_size = p
        .table_size
        .as_ref()
        .and_then(|v| cx.int_in("table_size", v, 16..=10_000_000))
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(DEFAULT_TABLE_SIZE);
    let written = [
        p.max_connections_per_client.is_some(),
        p.connection_rate.is_some(),
        p.request_rate.is_some(),
        p.allow.as_ref().is_some_and(|l| !l.get_ref().is_empty()),
        p.deny.as_ref().is_some_and(|l| !l.get_ref().is_empty()),
    ];
    if !written.contains(&true) {
        cx.r.error_hint(
            &raw.span(),
            "this `protection` table sets no limit and no address list",
            "add max_connections_per_client, connection_rate, request_rate, allow or deny, or remove the table",
        );
    }
    Protection {
        max_connections_per_client,
        connection_rate,
        request_rate,
        allow,
        deny,
        client_address_header,
        table_size,
    }
}

fn rate(cx: &mut Ctx<'_, '_>, key: &str, raw: &S<RawRate>) -> Option<Rate> {
    let r = raw.get_ref();
    let hint = format!("write {key} = {{ count = 100, per = \"10s\" }}");
    let (Some(count), Some(per)) = (&r.count, &r.per) else {
        let missing = if r.count.is_none() { "count" } else { "per" };
        cx.r.error_hint(&raw.span(), format!("`{key}` has no `{missing}`"), hint);
        return None;
    };
    let count = cx.int_in("count", count, 1..=1_000_000).and_then(|n| u32::try_from(n).ok());
    let per_value = match parse_duration(per.get_ref()) {
        Ok(d) => Some(d),
        Err(p) => {
            cx.problem(&per.span(), p);
            None
        }
    };
    let per_value = per_value.filter(|d| {
        let ok = (Duration::from_millis(100)..=Duration::from_secs(86_400)).contains(d);
        if !ok {
            cx.r.error(&per.span(), format!("`per` in `{key}` must be between 100ms and 24h"));
        }
        ok
    });
    Some(Rate { count: count?, per: per_value? })
}

fn header(cx: &mut Ctx<'_, '_>, raw: &S<RawClientAddressHeader>) -> Option<ClientAddressHeader> {
    let h = raw.get_ref();
    let name = match &h.name {
        Some(n) if is_token(n.get_ref()) => Some(n.get_ref().to_ascii_lowercase()),
        Some(n) => {
            cx.r.error(&n.span(), format!("`{}` is not a valid header name", n.get_ref()));
            None
        }
        None => Some("x-forwarded-for".to_string()),
    };
    let trusted = h.trusted.as_ref().map(|l| networks(cx, l.get_ref())).unwrap_or_default();
    if h.trusted.as_ref().is_none_or(|l| l.get_ref().is_empty()) {
        cx.r.error_hint(
            &raw.span(),
            "`client_address_header` has no `trusted` networks",
            "list the front proxies whose header is believed, e.g. trusted = [\"10.0.0.0/8\"]",
        );
        return None;
    }
    Some(ClientAddressHeader { name: name?, trusted })
}
