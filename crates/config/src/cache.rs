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
    Some(Cache { size, max_object, key, heuristic })
}
