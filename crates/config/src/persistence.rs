//! Validation of a pool's `persistence` table.
//!
//! The table names exactly one kind: `cookie = "NAME"` (cookie insert, or with
//! `mode = "learn"` cookie learn: following the servers' own session cookie),
//! `source = true` (stick table by client address), `header = "NAME"` (stick
//! table by that header's value), `rdp_cookie = true` (stick table by the RDP
//! `mstshash` cookie) or `sni = true` (stick table by the TLS server name).
//! Each kind has its own options, and an option of another kind is an error
//! rather than ignored, so a reader of the file never wonders whether
//! `capacity` bounds an inserted cookie.
//!
//! Across the file, [`check_persistence_modes`] matches each pool's kind to the
//! modes of the services using it: the cookie and header kinds read HTTP
//! requests (`http`, `https`), `rdp_cookie` reads the first bytes of a `tcp`
//! connection, `sni` the ClientHello of a `tls-passthrough` one; `source`
//! works for every TCP-based mode.
//!
//! Invariants of an accepted [`Persistence`]: a cookie name is an RFC 6265
//! token; a cookie path starts with `/`; path and domain hold no spaces,
//! `;` or control characters (they are written into `Set-Cookie`); a header name is
//! a token, lower-cased; a stick table's capacity is 1..=10,000,000.

use std::ops::Range;
use std::time::Duration;

use crate::model::{Action, CookieInsert, Mode, Persistence, Pool, PoolId, Service, StickTableSpec};
use crate::raw::{RawPersistence, RawPool, S};
use crate::units::{is_token, parse_duration};
use crate::validate::{broken, Ctx};

const KINDS: &[&str] = &["cookie", "source", "header", "rdp_cookie", "sni"];
const COOKIE_MODES: &[&str] = &["insert", "learn"];

/// Validates a pool's `persistence`; `None` when it is unusable (reported).
pub(crate) fn validate_persistence(cx: &mut Ctx<'_, '_>, raw: &S<RawPersistence>) -> Option<Persistence> {
    let p = raw.get_ref();
    let mut kinds = written_kinds(p);
    kinds.sort_by_key(|(_, span)| span.start);
    let (kind, _) = match kinds.as_slice() {
        [] => {
            if !KINDS.iter().any(|k| broken(&p.broken, k)) {
                cx.r.error_hint(
                    &raw.span(),
                    "`persistence` must name one of `cookie`, `source`, `header`, `rdp_cookie` or `sni`",
                    "write { cookie = \"SRV\" }, { source = true }, { header = \"x-user\" }, \
                     { rdp_cookie = true } or { sni = true }",
                );
            }
            return None;
        }
        [one] => one,
        [(first, _), rest @ ..] => {
            for (other, span) in rest {
                cx.r.error_hint(
                    span,
                    format!("`persistence` takes only one kind, and `{first}` is set before `{other}`"),
                    "a pool has one kind of persistence: keep one",
                );
            }
            return None;
        }
    };
    match *kind {
        "cookie" => {
            // An unknown mode is reported, and the rest still checked as an inserted cookie.
            let mode = p.mode.as_ref().map(|m| check_mode(cx, m));
            if mode == Some(Some("learn")) {
                foreign_options(cx, p, "cookie learn");
                cookie_learn(cx, p)
            } else {
                foreign_options(cx, p, "cookie");
                let insert = cookie(cx, p).map(Persistence::CookieInsert);
                insert.filter(|_| mode != Some(None))
            }
        }
        "source" => {
            foreign_options(cx, p, kind);
            let table = stick_table(cx, p);
            enabled(cx, p.source.as_ref()?, kind).then_some(Persistence::Source(table))
        }
        "rdp_cookie" => {
            foreign_options(cx, p, kind);
            let table = stick_table(cx, p);
            enabled(cx, p.rdp_cookie.as_ref()?, kind).then_some(Persistence::RdpCookie(table))
        }
        "sni" => {
            foreign_options(cx, p, kind);
            let table = stick_table(cx, p);
            enabled(cx, p.sni.as_ref()?, kind).then_some(Persistence::Sni(table))
        }
        _ => {
            foreign_options(cx, p, kind);
            header(cx, p)
        }
    }
}

/// The kind keys written in `p`, with their spans.
fn written_kinds(p: &RawPersistence) -> Vec<(&'static str, Range<usize>)> {
    [
        ("cookie", p.cookie.as_ref().map(S::span)),
        ("source", p.source.as_ref().map(S::span)),
        ("header", p.header.as_ref().map(S::span)),
        ("rdp_cookie", p.rdp_cookie.as_ref().map(S::span)),
        ("sni", p.sni.as_ref().map(S::span)),
    ]
    .into_iter()
    .filter_map(|(kind, span)| Some((kind, span?)))
    .collect()
}

/// `KIND = false` turns nothing on: an error rather than silently no persistence.
fn enabled(cx: &mut Ctx<'_, '_>, flag: &S<bool>, kind: &str) -> bool {
    if !*flag.get_ref() {
        cx.r.error_hint(
            &flag.span(),
            format!("`{kind} = false` turns nothing on"),
            format!("write {kind} = true, or remove `persistence`"),
        );
        return false;
    }
    true
}

fn header(cx: &mut Ctx<'_, '_>, p: &RawPersistence) -> Option<Persistence> {
    let table = stick_table(cx, p);
    let header = p.header.as_ref()?;
    let name = header.get_ref().trim();
    if !is_token(name) {
        let message = if name.is_empty() {
            "a header name must not be empty".to_string()
        } else {
            format!("`{name}` is not a valid header name")
        };
        cx.r.error_hint(&header.span(), message, "name the request header to stick by, e.g. header = \"x-user\"");
        return None;
    }
    Some(Persistence::Header { name: name.to_ascii_lowercase(), table })
}

/// An option's name and, when it is written, its span.
type Written = (&'static str, Option<Range<usize>>);

/// Reports each option that belongs to another kind than `kind` (`cookie`,
/// `cookie learn`, `source`, `header`, `rdp_cookie` or `sni`).
fn foreign_options(cx: &mut Ctx<'_, '_>, p: &RawPersistence, kind: &str) {
    let attributes = [
        ("path", p.path.as_ref().map(S::span)),
        ("domain", p.domain.as_ref().map(S::span)),
        ("max_age", p.max_age.as_ref().map(S::span)),
        ("secure", p.secure.as_ref().map(S::span)),
        ("http_only", p.http_only.as_ref().map(S::span)),
    ];
    let mode = [("mode", p.mode.as_ref().map(S::span))];
    let table_options =
        [("idle_timeout", p.idle_timeout.as_ref().map(S::span)), ("capacity", p.capacity.as_ref().map(S::span))];
    let (foreign, hint): (Vec<Written>, _) = match kind {
        "cookie" => (
            table_options.to_vec(),
            "`idle_timeout` and `capacity` bound a stick table; an inserted cookie lasts `max_age` \
             (with mode = \"learn\", switchyard keeps a table of the servers' cookies)",
        ),
        "cookie learn" => (
            attributes.to_vec(),
            "with mode = \"learn\" the servers set their own cookie: only `idle_timeout` and `capacity` apply",
        ),
        _ => (
            attributes.iter().chain(&mode).cloned().collect(),
            "stick-table persistence takes only `idle_timeout` and `capacity`",
        ),
    };
    for (option, span) in foreign {
        if let Some(span) = span {
            cx.r.error_hint(&span, format!("`{option}` does not apply to `{kind}` persistence"), hint);
        }
    }
}

/// `cookie = "NAME", mode = "learn"`: a stick table of the servers' cookie values.
fn cookie_learn(cx: &mut Ctx<'_, '_>, p: &RawPersistence) -> Option<Persistence> {
    let table = stick_table(cx, p);
    let name = p.cookie.as_ref()?;
    cookie_name(cx, name).then(|| Persistence::CookieLearn { name: name.get_ref().clone(), table })
}

/// Whether `name` is a usable cookie name (reported if not).
fn cookie_name(cx: &mut Ctx<'_, '_>, name: &S<String>) -> bool {
    if name.get_ref().is_empty() {
        cx.r.error_hint(&name.span(), "a cookie name must not be empty", "write cookie = \"SRV\"");
        false
    } else if !is_token(name.get_ref()) {
        cx.r.error_hint(
            &name.span(),
            format!("`{}` is not a valid cookie name", name.get_ref()),
            "a cookie name is a token: letters, digits and !#$%&'*+-.^_`|~ (no spaces, `=`, `;`, `,` or quotes)",
        );
        false
    } else {
        true
    }
}

fn cookie(cx: &mut Ctx<'_, '_>, p: &RawPersistence) -> Option<CookieInsert> {
    let name = p.cookie.as_ref()?;
    let mut ok = cookie_name(cx, name);
    let path = match &p.path {
        None => "/".to_string(),
        Some(path) => {
            ok &= attribute(cx, "path", path);
            if !path.get_ref().starts_with('/') {
                cx.r.error_hint(
                    &path.span(),
                    "a cookie `path` must start with `/`",
                    format!("write \"/{}\"", path.get_ref()),
                );
                ok = false;
            }
            path.get_ref().clone()
        }
    };
    let domain = p.domain.as_ref().map(|d| {
        ok &= attribute(cx, "domain", d);
        if d.get_ref().is_empty() {
            cx.r.error_hint(&d.span(), "a cookie `domain` must not be empty", "remove `domain` for a host-only cookie");
            ok = false;
        }
        d.get_ref().clone()
    });
    let max_age =
        p.max_age.as_ref().and_then(|m| parse_duration(m.get_ref()).map_err(|e| cx.problem(&m.span(), e)).ok());
    let flag = |v: &Option<S<bool>>, default: bool| v.as_ref().map_or(default, |b| *b.get_ref());
    ok.then(|| CookieInsert {
        name: name.get_ref().clone(),
        path,
        domain,
        max_age,
        secure: flag(&p.secure, false),
        http_only: flag(&p.http_only, true),
    })
}

/// The cookie mode, `insert` or `learn`; `None` when unknown (reported).
fn check_mode<'m>(cx: &mut Ctx<'_, '_>, mode: &'m S<String>) -> Option<&'m str> {
    let m = mode.get_ref().as_str();
    if COOKIE_MODES.contains(&m) {
        return Some(m);
    }
    cx.r.error_hint(
        &mode.span(),
        format!("unknown cookie persistence mode `{m}`"),
        "write mode = \"insert\" (switchyard sets the cookie, the default) or mode = \"learn\" \
         (switchyard follows the servers' own cookie)",
    );
    None
}

/// A cookie attribute value goes verbatim into `Set-Cookie`: a `;` would
/// end it early, a control character would break the header, and a space is
/// never meant (paths are compared percent-encoded, domains have none).
fn attribute(cx: &mut Ctx<'_, '_>, key: &str, value: &S<String>) -> bool {
    let text = value.get_ref();
    if text.chars().any(|c| c == ';' || c.is_whitespace() || c.is_control()) {
        cx.r.error_hint(
            &value.span(),
            format!("a cookie `{key}` must not contain spaces, `;` or control characters"),
            "it is written as is into the `Set-Cookie` header",
        );
        return false;
    }
    true
}

fn stick_table(cx: &mut Ctx<'_, '_>, p: &RawPersistence) -> StickTableSpec {
    let d = StickTableSpec::default();
    let idle_timeout: Duration = cx.duration(&p.idle_timeout, d.idle_timeout);
    let capacity = p
        .capacity
        .as_ref()
        .and_then(|c| cx.int_in("capacity", c, 1..=10_000_000))
        .and_then(|c| usize::try_from(c).ok())
        .unwrap_or(d.capacity);
    StickTableSpec { idle_timeout, capacity }
}

/// The service modes that can use each persistence kind, and why.
fn modes_for(kind: &Persistence) -> (&'static [Mode], &'static str) {
    match kind {
        Persistence::CookieInsert(_) | Persistence::CookieLearn { .. } | Persistence::Header { .. } => (
            &[Mode::Http, Mode::Https],
            "cookies and headers are read from HTTP requests (services of mode \"http\" and \"https\")",
        ),
        Persistence::Source(_) => {
            (&[Mode::Http, Mode::Https, Mode::Tcp, Mode::TlsPassthrough], "the client address is known in every mode")
        }
        Persistence::RdpCookie(_) => {
            (&[Mode::Tcp], "the `mstshash` cookie is read from the first bytes of a `tcp` connection")
        }
        Persistence::Sni(_) => {
            (&[Mode::TlsPassthrough], "the server name is read from the ClientHello by `tls-passthrough` services")
        }
    }
}

/// Reports a pool whose persistence kind cannot work in the mode of a service
/// using it (as default pool, SNI route or rule target): once per pool, at the
/// kind's key, naming the first such service.
pub(crate) fn check_persistence_modes(
    cx: &mut Ctx<'_, '_>,
    raw_pools: &[S<RawPool>],
    pools: &[Pool],
    services: &[Service],
) {
    let mut reported: Vec<PoolId> = Vec::new();
    // A udp service's pool has no persistence at all (see `check_udp_pools`).
    for service in services.iter().filter(|s| s.mode != Mode::Udp) {
        let rules = service.rules.iter().filter_map(|r| match &r.action {
            Some(Action::Pool(id)) => Some(id),
            _ => None,
        });
        let used = service.default_pool.iter().chain(service.sni_routes.iter().map(|r| &r.pool)).chain(rules);
        for id in used {
            let (Some(raw), Some(pool)) = (raw_pools.get(id.0), pools.get(id.0)) else { continue };
            let Some(kind) = &pool.persistence else { continue };
            let (modes, why) = modes_for(kind);
            if modes.contains(&service.mode) || reported.contains(id) {
                continue;
            }
            reported.push(*id);
            let Some(raw) = raw.get_ref().persistence.as_ref() else { continue };
            let span = written_kinds(raw.get_ref()).first().map_or(raw.span(), |(_, span)| span.clone());
            let article = if matches!(service.mode, Mode::Http | Mode::Https) { "an" } else { "a" };
            cx.r.error_hint(
                &span,
                format!(
                    "pool `{}` has `{}` persistence, which {article} `{}` service (`{}`) cannot use",
                    pool.name,
                    kind.kind(),
                    service.mode.name(),
                    service.name
                ),
                format!("{why}: choose another kind, or give service `{}` a pool of its own", service.name),
            );
        }
    }
}
