//! Validation of a pool's `persistence` table.
//!
//! The table names exactly one kind: `cookie = "NAME"` (cookie insert),
//! `source = true` (stick table by client address) or `header = "NAME"`
//! (stick table by that header's value). Each kind has its own options, and
//! an option of another kind is an error rather than ignored, so a reader of
//! the file never wonders whether `capacity` bounds a cookie.
//!
//! Invariants of an accepted [`Persistence`]: a cookie name is an RFC 6265
//! token; a cookie path starts with `/`; path and domain hold no spaces,
//! `;` or control characters (they are written into `Set-Cookie`); a header name is
//! a token, lower-cased; a stick table's capacity is 1..=10,000,000.

use std::ops::Range;
use std::time::Duration;

use crate::model::{CookieInsert, Persistence, StickTableSpec};
use crate::raw::{RawPersistence, S};
use crate::units::{is_token, parse_duration};
use crate::validate::{broken, Ctx};

const KINDS: &[&str] = &["cookie", "source", "header"];
const COOKIE_MODES: &[&str] = &["insert"];
/// Cookie modes of the product that are not built yet.
const FUTURE_COOKIE_MODES: &[&str] = &["learn"];

/// Validates a pool's `persistence`; `None` when it is unusable (reported).
pub(crate) fn validate_persistence(cx: &mut Ctx<'_, '_>, raw: &S<RawPersistence>) -> Option<Persistence> {
    let p = raw.get_ref();
    let mut kinds: Vec<(&str, Range<usize>)> = [
        ("cookie", p.cookie.as_ref().map(S::span)),
        ("source", p.source.as_ref().map(S::span)),
        ("header", p.header.as_ref().map(S::span)),
    ]
    .into_iter()
    .filter_map(|(kind, span)| Some((kind, span?)))
    .collect();
    kinds.sort_by_key(|(_, span)| span.start);
    let (kind, _) = match kinds.as_slice() {
        [] => {
            if !KINDS.iter().any(|k| broken(&p.broken, k)) {
                cx.r.error_hint(
                    &raw.span(),
                    "`persistence` must name one of `cookie`, `source` or `header`",
                    "write { cookie = \"SRV\" }, { source = true } or { header = \"x-user\" }",
                );
            }
            return None;
        }
        [one] => one,
        [(first, _), rest @ ..] => {
            for (_, span) in rest {
                cx.r.error_hint(
                    span,
                    format!("`persistence` takes only one of `cookie`, `source` and `header`, and `{first}` is set"),
                    "a pool has one kind of persistence: keep one",
                );
            }
            return None;
        }
    };
    foreign_options(cx, p, kind);
    match *kind {
        "cookie" => cookie(cx, p).map(Persistence::CookieInsert),
        "source" => source(cx, p),
        _ => header(cx, p),
    }
}

fn source(cx: &mut Ctx<'_, '_>, p: &RawPersistence) -> Option<Persistence> {
    let table = stick_table(cx, p);
    let source = p.source.as_ref()?;
    if !*source.get_ref() {
        cx.r.error_hint(
            &source.span(),
            "`source = false` turns nothing on",
            "write source = true to stick clients by address, or remove `persistence`",
        );
        return None;
    }
    Some(Persistence::Source(table))
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

/// Reports each option that belongs to another kind than `kind`.
fn foreign_options(cx: &mut Ctx<'_, '_>, p: &RawPersistence, kind: &str) {
    let cookie_options = [
        ("mode", p.mode.as_ref().map(S::span)),
        ("path", p.path.as_ref().map(S::span)),
        ("domain", p.domain.as_ref().map(S::span)),
        ("max_age", p.max_age.as_ref().map(S::span)),
        ("secure", p.secure.as_ref().map(S::span)),
        ("http_only", p.http_only.as_ref().map(S::span)),
    ];
    let table_options =
        [("idle_timeout", p.idle_timeout.as_ref().map(S::span)), ("capacity", p.capacity.as_ref().map(S::span))];
    let (foreign, hint): (&[Written], _) = if kind == "cookie" {
        (
            &table_options,
            "`idle_timeout` and `capacity` bound a stick table (`source` or `header`); a cookie lasts `max_age`",
        )
    } else {
        (&cookie_options, "`source` and `header` persistence take only `idle_timeout` and `capacity`")
    };
    for (option, span) in foreign {
        if let Some(span) = span {
            cx.r.error_hint(span, format!("`{option}` does not apply to `{kind}` persistence"), hint);
        }
    }
}

fn cookie(cx: &mut Ctx<'_, '_>, p: &RawPersistence) -> Option<CookieInsert> {
    let name = p.cookie.as_ref()?;
    let mut ok = true;
    if name.get_ref().is_empty() {
        cx.r.error_hint(&name.span(), "a cookie name must not be empty", "write cookie = \"SRV\"");
        ok = false;
    } else if !is_token(name.get_ref()) {
        cx.r.error_hint(
            &name.span(),
            format!("`{}` is not a valid cookie name", name.get_ref()),
            "a cookie name is a token: letters, digits and !#$%&'*+-.^_`|~ (no spaces, `=`, `;`, `,` or quotes)",
        );
        ok = false;
    }
    if let Some(mode) = &p.mode {
        ok &= check_mode(cx, mode);
    }
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

fn check_mode(cx: &mut Ctx<'_, '_>, mode: &S<String>) -> bool {
    let m = mode.get_ref().as_str();
    if COOKIE_MODES.contains(&m) {
        return true;
    }
    let hint = "the only mode for now is \"insert\": switchyard sets the cookie";
    if FUTURE_COOKIE_MODES.contains(&m) {
        cx.r.error_hint(&mode.span(), format!("mode `{m}` is not supported yet"), hint);
    } else {
        cx.r.error_hint(&mode.span(), format!("unknown persistence mode `{m}`"), hint);
    }
    false
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
