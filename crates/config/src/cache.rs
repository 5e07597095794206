//! Validation of a service's `cache` table (the response cache).

use crate::model::{Cache, CacheKeyPart};
use crate::raw::{RawCache, S};
use crate::units::closest;
use crate::validate::Ctx;

const KEY_PARTS: &[&str] = &["host", "path", "query", "scheme", "method"];

/// The service's cache, `None` when it is off (`cache = false`).
pub(crate) fn validate_cache(cx: &mut Ctx<'_, '_>, raw: &S<RawCache>) -> Option<Cache> {
    let raw = raw.get_ref();
    if raw.enabled.as_ref().is_some_and(|e| !*e.get_ref()) {
        return None;
    }
    let d = Cache::default();
    let size = raw.size.as_ref().and_then(|v| cx.size("size", v)).unwrap_or(d.size);
    if let Some(v) = raw.size.as_ref().filter(|_| size == 0) {
        cx.r.error_hint(&v.span(), "a cache `size` of 0 stores nothing", "remove `cache` to turn the cache off");
    }
    // Left out, `max_object` shrinks to a small `size`; written, it must fit.
    let max_object =
        raw.max_object.as_ref().and_then(|v| cx.size("max_object", v)).unwrap_or_else(|| d.max_object.min(size));
    if let Some(written) = raw.max_object.as_ref().filter(|_| max_object > size) {
        let span = written.span();
        cx.r.error_hint(
            &span,
            format!("`max_object` ({max_object} bytes) is larger than the cache `size` ({size} bytes)"),
            "no object could be stored whole: make `size` larger or `max_object` smaller",
        );
    }
    let key = match &raw.key {
        None => d.key,
        Some(list) => {
            let mut parts = Vec::new();
            for item in list.get_ref() {
                let part = match item.get_ref().as_str() {
                    "host" => CacheKeyPart::Host,
                    "path" => CacheKeyPart::Path,
                    "query" => CacheKeyPart::Query,
                    "scheme" => CacheKeyPart::Scheme,
                    "method" => CacheKeyPart::Method,
                    other => {
                        let hint = match closest(other, KEY_PARTS.iter().copied()) {
                            Some(c) => format!("did you mean `{c}`? (parts: {})", KEY_PARTS.join(", ")),
                            None => format!("the parts are {}", KEY_PARTS.join(", ")),
                        };
                        cx.r.error_hint(&item.span(), format!("unknown cache key part `{other}`"), hint);
                        continue;
                    }
                };
                if parts.contains(&part) {
                    cx.r.warning(&item.span(), format!("cache key part `{}` is listed twice", item.get_ref()), None);
                    continue;
                }
                parts.push(part);
            }
            if list.get_ref().is_empty() {
                cx.r.error_hint(&list.span(), "the cache `key` is empty", "leave `key` out for host, path and query");
            }
            parts
        }
    };
    let heuristic = raw.heuristic.as_ref().is_some_and(|h| *h.get_ref());
    let targeted = match &raw.targeted {
        None => d.targeted,
        Some(list) => targeted_fields(cx, list.get_ref()),
    };
    Some(Cache { size, max_object, key, heuristic, targeted })
}

/// Header fields that are not targeted cache-control fields (RFC 9213 §2),
/// though a typo could make them look like one.
const NOT_TARGETED: &[&str] = &["cache-control", "expires", "pragma", "age", "vary", "surrogate-control"];

/// The `targeted` field names, lower case: each a field-name token (RFC 9110
/// §5.1), none of the fields the cache reads anyway, none twice.
fn targeted_fields(cx: &mut Ctx<'_, '_>, list: &[S<String>]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for item in list {
        let name = item.get_ref().to_ascii_lowercase();
        let token =
            !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !token {
            cx.r.error_hint(
                &item.span(),
                format!("`{}` is not a header field name", item.get_ref()),
                "a field name is letters, digits and `-` (e.g. \"CDN-Cache-Control\" or \"Switchyard-Cache-Control\")",
            );
        } else if NOT_TARGETED.contains(&name.as_str()) {
            cx.r.error_hint(
                &item.span(),
                format!("`{}` cannot be a targeted cache-control field", item.get_ref()),
                "the cache always reads it; targeted fields (RFC 9213) are fields such as \"CDN-Cache-Control\" that \
                 take precedence over it",
            );
        } else if names.contains(&name) {
            cx.r.warning(&item.span(), format!("targeted field `{}` is listed twice", item.get_ref()), None);
        } else {
            names.push(name);
        }
    }
    names
}
