//! Validation of one rule: conditions, header edits and the terminal action.
//!
//! Conditions are collected in a fixed order (host, path, method, header,
//! query, client, client_cert) whatever the key order in the file; all must
//! hold, so the order only matters for speed, and cheap comparisons come
//! first. Host patterns are lower-cased here because the engine compares a
//! lower-cased host.
//!
//! `hsts` has no model type of its own: it becomes a `set_response` edit of
//! `strict-transport-security`, so the engine applies it like any other
//! header edit. Warnings tell about rules that cannot do what they say on
//! their service: HSTS over plain http (browsers ignore it), a client
//! certificate condition where none is asked for, a redirect to https on a
//! service that already is https.

use std::ops::Range;

use regex::Regex;

use crate::model::*;
use crate::raw::*;
use crate::units::{is_header_value, is_token, parse_cidr};
use crate::validate::{broken, Ctx};

const EDIT_KEYS: &[&str] = &[
    "set_request_headers",
    "add_request_headers",
    "remove_request_headers",
    "set_response_headers",
    "add_response_headers",
    "remove_response_headers",
];

/// What a rule needs to know about its service.
pub(crate) struct RuleScope {
    /// The service's mode; `None` when it is unusable (reported).
    pub(crate) mode: Option<Mode>,
    /// The service asks clients for certificates (`tls.client_auth`).
    pub(crate) client_auth: bool,
}

/// Validates one rule, reporting every problem in it.
pub(crate) fn validate_rule(cx: &mut Ctx<'_, '_>, raw: &S<RawRule>, scope: &RuleScope) -> Rule {
    let span = raw.span();
    let raw = raw.get_ref();
    let mut conditions = conditions(cx, raw);
    conditions.extend(raw.client_cert.as_ref().and_then(|c| client_cert(cx, c, scope)));
    let mut edits = edits(cx, raw);
    if let Some(hsts) = &raw.hsts {
        edits.set_response.extend(hsts_header(cx, hsts, &edits, scope));
    }
    if let Some(c) = raw.compress.as_ref().filter(|c| *c.get_ref()) {
        cx.r.warning(
            &c.span(),
            "`compress = true` in a rule does nothing: the service's `compression` decides",
            Some("remove it; only compress = false (no compression for matching requests) has an effect".into()),
        );
    }
    let action = action(cx, raw, scope);
    let written = |key: &str, present: bool| present || broken(&raw.broken, key);
    let has_edit_keys = raw.set_request_headers.is_some()
        || raw.add_request_headers.is_some()
        || raw.remove_request_headers.is_some()
        || raw.set_response_headers.is_some()
        || raw.add_response_headers.is_some()
        || raw.remove_response_headers.is_some()
        || raw.compress.as_ref().is_some_and(|c| !*c.get_ref())
        || broken(&raw.broken, "compress")
        || written("cache", raw.cache.is_some())
        || raw.hsts.as_ref().is_some_and(|h| h.get_ref().enabled.as_ref().is_none_or(|e| *e.get_ref()))
        || broken(&raw.broken, "hsts")
        || EDIT_KEYS.iter().any(|k| broken(&raw.broken, k));
    let has_action_keys = written("pool", raw.pool.is_some())
        || written("redirect", raw.redirect.is_some())
        || written("respond", raw.respond.is_some())
        || written("deny", raw.deny.as_ref().is_some_and(|d| *d.get_ref()))
        || written("redirect_https", raw.redirect_https.as_ref().is_some_and(redirect_https_set));
    if !has_edit_keys && !has_action_keys {
        cx.r.error_hint(
            &span,
            "this rule does nothing",
            "give it an action (pool, redirect, redirect_https, respond or deny) or a header edit \
             (set_request_headers, ..., hsts, compress = false)",
        );
    }
    Rule { name: raw.name.as_ref().map(|n| n.get_ref().clone()), conditions, edits, action }
}

fn conditions(cx: &mut Ctx<'_, '_>, raw: &RawRule) -> Vec<Condition> {
    let mut out = Vec::new();
    let host = [
        ("host", &raw.host, Kind::Exact),
        ("host_prefix", &raw.host_prefix, Kind::Prefix),
        ("host_suffix", &raw.host_suffix, Kind::Suffix),
        ("host_regex", &raw.host_regex, Kind::Regex),
    ];
    for (key, value, kind) in host {
        if let Some(v) = value {
            let text = if kind == Kind::Regex { v.get_ref().clone() } else { v.get_ref().to_ascii_lowercase() };
            if let Some(m) = str_match(cx, key, kind, &S::new(v.span(), text)) {
                out.push(Condition::Host(m));
            }
        }
    }
    let path = [
        ("path", &raw.path, Kind::Exact),
        ("path_prefix", &raw.path_prefix, Kind::Prefix),
        ("path_suffix", &raw.path_suffix, Kind::Suffix),
        ("path_regex", &raw.path_regex, Kind::Regex),
    ];
    for (key, value, kind) in path {
        if let Some(v) = value {
            if matches!(kind, Kind::Exact | Kind::Prefix) && !v.get_ref().starts_with('/') {
                cx.r.warning(
                    &v.span(),
                    format!("`{key}` does not start with `/`, so it never matches"),
                    Some(format!("write \"/{}\"", v.get_ref())),
                );
            }
            if let Some(m) = str_match(cx, key, kind, v) {
                out.push(Condition::Path(m));
            }
        }
    }
    if let Some(methods) = &raw.method {
        if let Some(list) = non_empty(cx, "method", methods) {
            let mut valid = Vec::new();
            for m in list {
                if is_token(m.get_ref()) {
                    valid.push(m.get_ref().to_ascii_uppercase());
                } else {
                    cx.r.error_hint(
                        &m.span(),
                        format!("`{}` is not a valid method", m.get_ref()),
                        "a method is a single word such as GET or POST",
                    );
                }
            }
            out.push(Condition::Method(valid));
        }
    }
    for h in &raw.header {
        if let Some((name, matcher)) = field_match(cx, "header", h) {
            out.push(Condition::Header { name, matcher });
        }
    }
    for q in &raw.query {
        if let Some((name, matcher)) = field_match(cx, "query", q) {
            out.push(Condition::Query { name, matcher });
        }
    }
    if let Some(client) = &raw.client {
        if let Some(list) = non_empty(cx, "client", client) {
            let mut nets = Vec::new();
            for item in list {
                match parse_cidr(item.get_ref()) {
                    Ok(net) => nets.push(net),
                    Err(p) => cx.problem(&item.span(), p),
                }
            }
            out.push(Condition::ClientAddr(nets));
        }
    }
    out
}

/// The four ways of comparing a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Exact,
    Prefix,
    Suffix,
    Regex,
}

fn str_match(cx: &mut Ctx<'_, '_>, key: &str, kind: Kind, value: &S<String>) -> Option<StrMatch> {
    let text = value.get_ref().clone();
    Some(match kind {
        Kind::Exact => StrMatch::Exact(text),
        Kind::Prefix => StrMatch::Prefix(text),
        Kind::Suffix => StrMatch::Suffix(text),
        Kind::Regex => match Regex::new(&text) {
            Ok(re) => StrMatch::Regex(re),
            Err(e) => {
                cx.r.error_hint(
                    &value.span(),
                    format!("`{key}` is not a valid regular expression: {}", regex_reason(&e)),
                    "see https://docs.rs/regex/latest/regex/#syntax",
                );
                return None;
            }
        },
    })
}

/// The one-line reason from a regex error (its syntax errors span several
/// lines, ending with `error: REASON`).
fn regex_reason(e: &regex::Error) -> String {
    let text = e.to_string();
    text.lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("error: "))
        .map_or_else(|| text.lines().last().unwrap_or_default().trim().to_string(), str::to_string)
}

fn non_empty<'a>(cx: &mut Ctx<'_, '_>, key: &str, list: &'a S<Vec<S<String>>>) -> Option<&'a [S<String>]> {
    if list.get_ref().is_empty() {
        cx.r.error_hint(
            &list.span(),
            format!("`{key}` is an empty list"),
            format!("remove `{key}` or give it a value"),
        );
        None
    } else {
        Some(list.get_ref())
    }
}

/// A `header` or `query` condition: the name (lower case for headers) and
/// the matcher, `None` meaning presence.
fn field_match(cx: &mut Ctx<'_, '_>, what: &str, raw: &S<RawFieldMatch>) -> Option<(String, Option<StrMatch>)> {
    let span = raw.span();
    let raw = raw.get_ref();
    let name = match &raw.name {
        None if broken(&raw.broken, "name") => None,
        None => {
            cx.r.error_hint(
                &span,
                format!("this `{what}` condition has no `name`"),
                format!("write {what} = {{ name = \"x-example\", value = \"...\" }}"),
            );
            None
        }
        Some(n) if what == "header" && !is_token(n.get_ref()) => {
            cx.r.error(&n.span(), format!("`{}` is not a valid header name", n.get_ref()));
            None
        }
        Some(n) if n.get_ref().is_empty() => {
            cx.r.error(&n.span(), "a query parameter name must not be empty");
            None
        }
        Some(n) if what == "header" => Some(n.get_ref().to_ascii_lowercase()),
        Some(n) => Some(n.get_ref().clone()),
    };
    let given: Vec<(&str, Kind, &S<String>)> = [
        ("value", Kind::Exact, &raw.value),
        ("prefix", Kind::Prefix, &raw.prefix),
        ("suffix", Kind::Suffix, &raw.suffix),
        ("regex", Kind::Regex, &raw.regex),
    ]
    .into_iter()
    .filter_map(|(k, kind, v)| v.as_ref().map(|v| (k, kind, v)))
    .collect();
    if let [(first, _, _), (second, _, v), ..] = given.as_slice() {
        cx.r.error_hint(
            &v.span(),
            format!("a `{what}` condition takes one of value, prefix, suffix or regex, but this one has `{first}` and `{second}`"),
            format!("use two `{what}` conditions (an array of tables) to require both"),
        );
        return None;
    }
    let matcher = match given.first() {
        None => None,
        Some((key, kind, v)) => Some(str_match(cx, &format!("{what}.{key}"), *kind, v)?),
    };
    Some((name?, matcher))
}

fn edits(cx: &mut Ctx<'_, '_>, raw: &RawRule) -> HeaderEdits {
    HeaderEdits {
        set_request: pairs(cx, "set_request_headers", &raw.set_request_headers),
        add_request: pairs(cx, "add_request_headers", &raw.add_request_headers),
        remove_request: names(cx, "remove_request_headers", &raw.remove_request_headers),
        set_response: pairs(cx, "set_response_headers", &raw.set_response_headers),
        add_response: pairs(cx, "add_response_headers", &raw.add_response_headers),
        remove_response: names(cx, "remove_response_headers", &raw.remove_response_headers),
        no_compress: raw.compress.as_ref().is_some_and(|c| !*c.get_ref()),
        no_cache: cache_switch(cx, &raw.cache),
    }
}

/// A rule's `cache` switch: only `false` means something.
fn cache_switch(cx: &mut Ctx<'_, '_>, raw: &Option<S<bool>>) -> bool {
    match raw {
        Some(v) if *v.get_ref() => {
            cx.r.error_hint(
                &v.span(),
                "a rule can only turn the cache off",
                "write cache = false, or remove the key (the service's `cache` turns it on)",
            );
            false
        }
        Some(_) => true,
        None => false,
    }
}

fn header_name(cx: &mut Ctx<'_, '_>, key: &str, name: &S<String>) -> Option<String> {
    if is_token(name.get_ref()) {
        return Some(name.get_ref().to_ascii_lowercase());
    }
    cx.r.error_hint(
        &name.span(),
        format!("`{}` in `{key}` is not a valid header name", name.get_ref()),
        "header names are letters, digits and !#$%&'*+-.^_`|~ (no spaces or colons)",
    );
    None
}

/// Fields the proxy frames messages by. An edit of one would make the next hop
/// read a different message than the one relayed (request smuggling, or a
/// response running into the next), so no rule may remove, set or add them.
const FRAMING_FIELDS: [&str; 2] = ["content-length", "transfer-encoding"];

/// A header name an edit may touch: a valid name, not a framing field.
fn edit_name(cx: &mut Ctx<'_, '_>, key: &str, name: &S<String>) -> Option<String> {
    let lower = header_name(cx, key, name)?;
    if FRAMING_FIELDS.contains(&lower.as_str()) {
        cx.r.error_hint(
            &name.span(),
            format!("`{key}` cannot edit `{lower}`"),
            "the proxy frames the message by it; an edit would make the next hop read a different message",
        );
        return None;
    }
    Some(lower)
}

fn pairs(cx: &mut Ctx<'_, '_>, key: &str, raw: &Option<S<RawHeaderPairs>>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (name, value) in raw.iter().flat_map(|p| p.get_ref()) {
        let name = edit_name(cx, key, name);
        if !is_header_value(value.get_ref()) {
            cx.r.error(&value.span(), "a header value must not contain CR, LF or NUL");
            continue;
        }
        if let Some(name) = name {
            out.push((name, value.get_ref().clone()));
        }
    }
    out
}

fn names(cx: &mut Ctx<'_, '_>, key: &str, raw: &Option<S<Vec<S<String>>>>) -> Vec<String> {
    raw.iter().flat_map(|l| l.get_ref()).filter_map(|n| edit_name(cx, key, n)).collect()
}

const CLIENT_CERT_STATES: &[&str] = &["verified", "absent"];

fn client_cert(cx: &mut Ctx<'_, '_>, value: &S<String>, scope: &RuleScope) -> Option<Condition> {
    let state = match value.get_ref().as_str() {
        "verified" => ClientCertState::Verified,
        "absent" => ClientCertState::Absent,
        other => {
            let hint = crate::units::suggest(other, CLIENT_CERT_STATES, "states are");
            cx.r.error_hint(&value.span(), format!("unknown `client_cert` state `{other}`"), hint);
            return None;
        }
    };
    if !scope.client_auth && scope.mode.is_some() {
        let hint = if scope.mode == Some(Mode::Https) {
            "add client_auth = { ca = \"clients-ca.crt\" } to the service's `tls`"
        } else {
            "client certificates need mode = \"https\" with `client_auth` in its `tls`"
        };
        cx.r.warning(
            &value.span(),
            "this service does not ask for client certificates, so `client_cert` is always \"absent\"",
            Some(hint.to_string()),
        );
    }
    Some(Condition::ClientCert(state))
}

/// The `strict-transport-security` header an enabled `hsts` sets.
fn hsts_header(
    cx: &mut Ctx<'_, '_>,
    hsts: &S<RawHsts>,
    edits: &HeaderEdits,
    scope: &RuleScope,
) -> Option<(String, String)> {
    const NAME: &str = "strict-transport-security";
    let raw = hsts.get_ref();
    if raw.enabled.as_ref().is_some_and(|e| !*e.get_ref()) {
        return None;
    }
    let max_age = cx.duration(&raw.max_age, std::time::Duration::from_secs(365 * 86_400)).as_secs();
    if let (0, Some(v)) = (max_age, &raw.max_age) {
        cx.r.error(&v.span(), "`max_age` of `hsts` must be at least 1s");
        return None;
    }
    if edits.set_response.iter().any(|(name, _)| name == NAME) {
        cx.r.error_hint(
            &hsts.span(),
            "`hsts` and `set_response_headers` both set strict-transport-security",
            "keep one of them",
        );
        return None;
    }
    if scope.mode == Some(Mode::Http) {
        cx.r.warning(
            &hsts.span(),
            "`hsts` on an `http` service: browsers ignore Strict-Transport-Security received over plain http",
            Some("set it on the https service; here, send clients there with redirect_https = true".to_string()),
        );
    }
    let mut value = format!("max-age={max_age}");
    if raw.include_subdomains.as_ref().is_some_and(|v| *v.get_ref()) {
        value.push_str("; includeSubDomains");
    }
    if raw.preload.as_ref().is_some_and(|v| *v.get_ref()) {
        value.push_str("; preload");
    }
    Some((NAME.to_string(), value))
}

/// Whether `redirect_https` asks for the action (`false` is no action).
fn redirect_https_set(value: &S<RawRedirectHttps>) -> bool {
    *value.get_ref() != RawRedirectHttps::Flag(false)
}

/// The terminal action, with its `status` and `content_type`.
fn action(cx: &mut Ctx<'_, '_>, raw: &RawRule, scope: &RuleScope) -> Option<Action> {
    let present: Vec<(&str, Range<usize>)> = [
        ("pool", raw.pool.as_ref().map(|v| v.span())),
        ("redirect", raw.redirect.as_ref().map(|v| v.span())),
        ("redirect_https", raw.redirect_https.as_ref().filter(|r| redirect_https_set(r)).map(|v| v.span())),
        ("respond", raw.respond.as_ref().map(|v| v.span())),
        ("deny", raw.deny.as_ref().filter(|d| *d.get_ref()).map(|v| v.span())),
    ]
    .into_iter()
    .filter_map(|(k, s)| s.map(|s| (k, s)))
    .collect();
    let mut sorted = present.clone();
    sorted.sort_by_key(|(_, s)| s.start);
    if let [(first, _), (second, span), ..] = sorted.as_slice() {
        cx.r.error_hint(
            span,
            format!("a rule has at most one action, but this one has `{first}` and `{second}`"),
            "split it into two rules",
        );
        return None;
    }
    let kind = present.first().map(|(k, _)| *k);
    if let Some(ct) = &raw.content_type {
        if kind != Some("respond") {
            cx.r.error_hint(
                &ct.span(),
                "`content_type` applies only to `respond`",
                "remove it, or add respond = \"...\"",
            );
        } else if !is_header_value(ct.get_ref()) {
            cx.r.error(&ct.span(), "a header value must not contain CR, LF or NUL");
        }
    }
    let status = |cx: &mut Ctx<'_, '_>, allowed: &[u16], range: Option<(u16, u16)>, default: u16| -> u16 {
        let Some(s) = &raw.status else { return default };
        let n = *s.get_ref();
        let ok = u16::try_from(n)
            .ok()
            .filter(|n| allowed.contains(n) || range.is_some_and(|(lo, hi)| (lo..=hi).contains(n)));
        ok.unwrap_or_else(|| {
            let what = match range {
                Some((lo, hi)) => format!("between {lo} and {hi}"),
                None => format!("one of {}", allowed.iter().map(u16::to_string).collect::<Vec<_>>().join(", ")),
            };
            cx.r.error(&s.span(), format!("`status` of `{}` must be {what}, not {n}", kind.unwrap_or_default()));
            default
        })
    };
    match kind {
        None | Some("pool") => {
            if let Some(s) = &raw.status {
                let msg = match kind {
                    Some(_) => "`status` does not apply to `pool`".to_string(),
                    None => "`status` without an action".to_string(),
                };
                cx.r.error_hint(&s.span(), msg, "`status` goes with redirect, redirect_https, respond or deny");
            }
            let name = raw.pool.as_ref()?;
            cx.resolve_pool(name).map(Action::Pool)
        }
        Some("redirect") => {
            let location = raw.redirect.as_ref()?;
            let status = status(cx, &[301, 302, 303, 307, 308], None, 302);
            if location.get_ref().is_empty() || !is_header_value(location.get_ref()) {
                cx.r.error(&location.span(), "`redirect` must be a non-empty URL without CR, LF or NUL");
            }
            Some(Action::Redirect { status, location: location.get_ref().clone() })
        }
        Some("redirect_https") => {
            let value = raw.redirect_https.as_ref()?;
            let status = status(cx, &[301, 302, 303, 307, 308], None, 301);
            let port = match *value.get_ref() {
                RawRedirectHttps::Port(n) => Some(
                    cx.int_in("redirect_https", &S::new(value.span(), n), 1..=65_535)
                        .and_then(|n| u16::try_from(n).ok())?,
                ),
                RawRedirectHttps::Flag(_) => None,
            };
            if scope.mode == Some(Mode::Https) && port.is_none() {
                cx.r.warning(
                    &value.span(),
                    "`redirect_https` on an `https` service: these requests already arrived over https",
                    Some("put the rule on the plain `http` service".to_string()),
                );
            }
            Some(Action::RedirectHttps { status, port })
        }
        Some("respond") => {
            let body = raw.respond.as_ref()?;
            let status = status(cx, &[], Some((200, 599)), 200);
            let content_type =
                raw.content_type.as_ref().map_or("text/plain; charset=utf-8", |c| c.get_ref().as_str()).to_string();
            Some(Action::Respond { status, body: body.get_ref().clone(), content_type })
        }
        _ => Some(Action::Deny { status: status(cx, &[], Some((400, 599)), 403) }),
    }
}
