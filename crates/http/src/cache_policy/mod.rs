//! RFC 9111 rules, sans I/O: which responses a shared cache may store
//! (§3), how long they stay fresh (§4.2.1, §4.2.2), how old they are (§4.2.3,
//! §5.1), what a request's own `Cache-Control` asks of the cache (§5.2.1),
//! which directives apply when a targeted field such as `CDN-Cache-Control`
//! is present (RFC 9213, [`targeted`]), how `Vary`-selected request headers
//! are compared (§4.1), which conditional requests the cache answers itself
//! (§4.3.2), HTTP dates in their three formats ([`date`]) and ranges served
//! from a stored response ([`range`]).
//!
//! Headers are given as `(lower-case name, value)` pairs. Times are passed in:
//! `SystemTime` only where the protocol speaks in dates (`Date`, `Expires`,
//! `Last-Modified`), durations everywhere else.

pub mod date;
pub mod location;
pub mod range;
pub mod targeted;

use std::time::{Duration, SystemTime};

/// The largest delta-seconds value the cache represents (RFC 9111 §1.2.2):
/// a larger one, or a calculation that overflows, counts as 2^31 seconds.
pub const DELTA_MAX: u64 = 1 << 31;

/// Longest heuristic freshness lifetime (RFC 9111 §4.2.2 suggests a bound).
const HEURISTIC_MAX: Duration = Duration::from_secs(24 * 3600);

/// The `Cache-Control` directives the cache acts on.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Directives {
    /// `max-age=N`
    pub max_age: Option<u64>,
    /// `s-maxage=N` (responses; wins over `max-age` in a shared cache)
    pub s_maxage: Option<u64>,
    /// `no-store`
    pub no_store: bool,
    /// `no-cache` (stored, but revalidated before every use)
    pub no_cache: bool,
    /// `private` (never stored by a shared cache)
    pub private: bool,
    /// `public`
    pub public: bool,
    /// `must-revalidate` or `proxy-revalidate`: never served stale
    pub must_revalidate: bool,
    /// `stale-while-revalidate=N`
    pub stale_while_revalidate: Option<u64>,
    /// `stale-if-error=N`
    pub stale_if_error: Option<u64>,
    /// `only-if-cached` (requests)
    pub only_if_cached: bool,
}

impl Directives {
    /// Reads every `Cache-Control` value among `headers`. Unknown directives
    /// are ignored; a malformed number makes its directive count as absent
    /// except for `max-age` and `s-maxage`, which then count as 0 (stale: the
    /// safe side). A directive given twice counts once, its first occurrence
    /// (RFC 9111 §4.2.1); delta-seconds past 2^31 are 2^31 (§1.2.2).
    pub fn parse<'a>(values: impl Iterator<Item = &'a [u8]>) -> Directives {
        let mut d = Directives::default();
        for value in values {
            for item in value.split(|&b| b == b',') {
                let item = trim(item);
                let (name, arg) = match item.iter().position(|&b| b == b'=') {
                    Some(i) => (trim(&item[..i]), Some(trim_quotes(trim(&item[i + 1..])))),
                    None => (item, None),
                };
                let seconds = || arg.and_then(delta_seconds);
                let lower = name.to_ascii_lowercase();
                match lower.as_slice() {
                    b"max-age" => d.max_age = d.max_age.or(Some(seconds().unwrap_or(0))),
                    b"s-maxage" => d.s_maxage = d.s_maxage.or(Some(seconds().unwrap_or(0))),
                    b"no-store" => d.no_store = true,
                    b"no-cache" => d.no_cache = true,
                    b"private" => d.private = true,
                    b"public" => d.public = true,
                    b"must-revalidate" | b"proxy-revalidate" => d.must_revalidate = true,
                    b"stale-while-revalidate" => d.stale_while_revalidate = d.stale_while_revalidate.or(seconds()),
                    b"stale-if-error" => d.stale_if_error = d.stale_if_error.or(seconds()),
                    b"only-if-cached" => d.only_if_cached = true,
                    _ => {}
                }
            }
        }
        d
    }
}

/// `delta-seconds = 1*DIGIT` (RFC 9111 §1.2.2), saturating at [`DELTA_MAX`];
/// `None` for anything else (a sign, a suffix, a space inside, a fraction).
pub fn delta_seconds(value: &[u8]) -> Option<u64> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut n: u64 = 0;
    for d in value {
        n = n.saturating_mul(10).saturating_add(u64::from(d - b'0'));
        if n >= DELTA_MAX {
            return Some(DELTA_MAX);
        }
    }
    Some(n)
}

/// The directives that govern a response in this cache, and where they came from.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Control {
    /// The directives in force.
    pub directives: Directives,
    /// They came from a targeted field (RFC 9213): `Cache-Control` and
    /// `Expires` are then ignored.
    pub targeted: bool,
}

/// RFC 9213 §2.2: the first field of `targets` (lower-case names, in order
/// of precedence) with a valid, non-empty value governs; without one,
/// `Cache-Control` does.
pub fn control(headers: &[(String, Vec<u8>)], targets: &[String]) -> Control {
    for target in targets {
        if let Some(directives) = targeted::parse(self::headers(headers, target)) {
            return Control { directives, targeted: true };
        }
    }
    Control { directives: Directives::parse(self::headers(headers, "cache-control")), targeted: false }
}

/// Status codes a response may be stored with without explicit freshness
/// (RFC 9110 §15.1 "heuristically cacheable").
pub fn heuristically_cacheable(status: u16) -> bool {
    matches!(status, 200 | 203 | 204 | 300 | 301 | 308 | 404 | 405 | 410 | 414 | 501)
}

/// Looks up the first value of `name` (lower case) in `headers`.
pub fn header<'a>(headers: &'a [(String, Vec<u8>)], name: &str) -> Option<&'a [u8]> {
    headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_slice())
}

/// Every value of `name` (lower case) in `headers`.
pub fn headers<'a>(headers: &'a [(String, Vec<u8>)], name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
    headers.iter().filter(move |(n, _)| n == name).map(|(_, v)| v.as_slice())
}

/// An HTTP date (`Date`, `Expires`, `Last-Modified`) in any of its three
/// formats (RFC 9110 §5.6.7, [`date::parse`]); `None` when absent or invalid.
pub fn date(value: Option<&[u8]>, now: SystemTime) -> Option<SystemTime> {
    date::parse(value?, now)
}

/// The freshness lifetime of a response (RFC 9111 §4.2.1): `s-maxage`, then
/// `max-age`, then `Expires` minus `Date` (not when a targeted field
/// governs, RFC 9213 §2.2), then — only when `heuristic` — 10 % of the time
/// since `Last-Modified`, at most a day. `None`: no freshness information.
pub fn freshness(
    control: &Control,
    headers: &[(String, Vec<u8>)],
    received: SystemTime,
    heuristic: bool,
) -> Option<Duration> {
    let d = &control.directives;
    if let Some(s) = d.s_maxage.or(d.max_age) {
        return Some(Duration::from_secs(s));
    }
    let date_value = date(header(headers, "date"), received).unwrap_or(received);
    if let Some(expires) = header(headers, "expires").filter(|_| !control.targeted) {
        // An invalid Expires (often "0") means already expired (§5.3); of
        // several, the first counts (§4.2.1). RFC 850 and asctime dates are
        // valid (RFC 9110 §5.6.7).
        return Some(date(Some(expires), received).and_then(|e| e.duration_since(date_value).ok()).unwrap_or_default());
    }
    if heuristic {
        let modified = date(header(headers, "last-modified"), received)?;
        let age = date_value.duration_since(modified).ok()?;
        return Some((age / 10).min(HEURISTIC_MAX));
    }
    None
}

/// The `Age` a response arrived with (RFC 9111 §5.1, `age_value` of
/// §4.2.3): the first member of the first `Age` field line (a list-based
/// value is cut to its first member); an invalid value (a sign, a suffix, a
/// fraction, empty) is ignored, i.e. 0; more than 2^31 is 2^31 (§1.2.2).
pub fn age_value(headers: &[(String, Vec<u8>)]) -> Duration {
    let Some(value) = header(headers, "age") else { return Duration::ZERO };
    let first = value.split(|&b| b == b',').next().unwrap_or_default();
    delta_seconds(trim(first)).map_or(Duration::ZERO, Duration::from_secs)
}

/// The age of a response when it was received (RFC 9111 §4.2.3,
/// `corrected_initial_age`): the larger of `apparent_age` (receipt time
/// minus its `Date`, never negative) and `corrected_age_value` (its `Age`
/// plus `response_delay`, the time from request to response), so that a
/// response that spent time in caches upstream, or on the way, is not
/// taken for newer than it is.
pub fn initial_age(headers: &[(String, Vec<u8>)], requested: SystemTime, received: SystemTime) -> Duration {
    let apparent =
        date(header(headers, "date"), received).and_then(|d| received.duration_since(d).ok()).unwrap_or_default();
    let delay = received.duration_since(requested).unwrap_or_default();
    apparent.max(age_value(headers) + delay).min(Duration::from_secs(DELTA_MAX))
}

/// Whether a shared cache may store this response to a GET (RFC 9111 §3).
/// `Set-Cookie` responses are refused too: a cookie is usually meant for
/// one client, and handing it to every client is the classic shared-cache
/// leak (a choice stricter than the RFC, documented in the configuration).
pub fn storable(
    status: u16,
    control: &Control,
    headers: &[(String, Vec<u8>)],
    request_authorized: bool,
    heuristic: bool,
) -> bool {
    let d = &control.directives;
    if d.no_store || d.private || header(headers, "set-cookie").is_some() {
        return false;
    }
    if self::headers(headers, "vary").any(|v| v.split(|&b| b == b',').any(|t| trim(t) == b"*")) {
        return false;
    }
    if request_authorized && !(d.s_maxage.is_some() || d.public || d.must_revalidate) {
        return false;
    }
    let expires = !control.targeted && header(headers, "expires").is_some();
    let explicit = d.s_maxage.is_some() || d.max_age.is_some() || expires;
    let validator = header(headers, "etag").is_some() || header(headers, "last-modified").is_some();
    match status {
        206 | 304 | 100..=199 => false,
        s if heuristically_cacheable(s) => explicit || d.public || d.no_cache || validator || heuristic,
        _ => explicit,
    }
}

/// A request's Accept-Encoding normalised for `Vary` matching: codings
/// lower case, q=0 ones dropped, sorted, so that `gzip, br` and `br,gzip`
/// select the same variant.
pub fn normalise_accept_encoding(value: &[u8]) -> Vec<u8> {
    let mut codings: Vec<Vec<u8>> = value
        .split(|&b| b == b',')
        .filter_map(|item| {
            let mut parts = item.split(|&b| b == b';');
            let coding = trim(parts.next()?).to_ascii_lowercase();
            let refused = parts.any(|p| {
                let p: Vec<u8> = p.iter().filter(|b| !b.is_ascii_whitespace()).copied().collect();
                p.eq_ignore_ascii_case(b"q=0") || p.eq_ignore_ascii_case(b"q=0.0") || p.starts_with(b"q=0.00")
            });
            (!coding.is_empty() && !refused).then_some(coding)
        })
        .collect();
    codings.sort();
    codings.dedup();
    codings.join(&b","[..])
}

/// Whether a method is safe (RFC 9110 §9.2.1); any other method, one this
/// proxy does not know included, invalidates the stored responses of its
/// target after a non-error answer (RFC 9111 §4.4).
pub fn safe_method(method: &[u8]) -> bool {
    matches!(method, b"GET" | b"HEAD" | b"OPTIONS" | b"TRACE")
}

/// Whether a status answers an unsafe request without error, so that the
/// stored responses of its target are invalidated (RFC 9111 §4.4: 2xx, 3xx).
pub fn invalidates(status: u16) -> bool {
    (200..400).contains(&status)
}

/// Request headers whose value is a comma-separated list of case-insensitive
/// items, normalised before `Vary` matching.
const CASELESS_LISTS: &[&str] = &["accept", "accept-charset", "accept-encoding", "accept-language"];

/// A `Vary`-selected request header, normalised for matching (RFC 9111
/// §4.1): `None` when absent (it then matches only another absence);
/// several field lines combined; the whitespace the syntax allows around
/// list members and parameters removed; for the `Accept*` fields, which are
/// case-insensitive lists, lower case. Values of other fields are compared
/// as sent, each line trimmed (their syntax is unknown here).
pub fn selecting_value<'a>(name: &str, values: impl Iterator<Item = &'a [u8]>) -> Option<Vec<u8>> {
    let list = CASELESS_LISTS.contains(&name);
    let mut out: Option<Vec<u8>> = None;
    for value in values {
        let out = out.get_or_insert_with(Vec::new);
        if !list {
            if !out.is_empty() {
                out.push(b',');
            }
            out.extend_from_slice(trim(value));
            continue;
        }
        for member in value.split(|&b| b == b',').map(trim).filter(|m| !m.is_empty()) {
            if !out.is_empty() {
                out.push(b',');
            }
            squeeze(member, out);
        }
    }
    out
}

/// Appends a list member lower case, without the blanks around `;` and `=`
/// (parameters), quoted strings kept as they are.
fn squeeze(member: &[u8], out: &mut Vec<u8>) {
    let blank = |c: &u8| matches!(c, b' ' | b'\t');
    let mut quoted = false;
    for (i, &b) in member.iter().enumerate() {
        if !quoted && blank(&b) {
            let next = member[i..].iter().find(|c| !blank(c));
            let delimited = |c: Option<&u8>| c.is_some_and(|c| matches!(c, b';' | b'='));
            if delimited(next) || delimited(out.last()) {
                continue;
            }
        }
        quoted ^= b == b'"';
        out.push(if quoted { b } else { b.to_ascii_lowercase() });
    }
}

/// Whether the cache answers a client's own conditional GET or HEAD with 304
/// from a stored response (RFC 9111 §4.3.2, RFC 9110 §13.1.1–§13.1.3):
/// `If-None-Match` takes precedence and matches `*` or the stored `ETag`
/// (weak comparison); without it, `If-Modified-Since` (a valid date) is
/// satisfied when the stored `Last-Modified` is not later — or, lacking one,
/// the stored `Date`, or lacking both, the time the cache received it.
pub fn not_modified(
    stored: &[(String, Vec<u8>)],
    received: SystemTime,
    if_none_match: Option<&[u8]>,
    if_modified_since: Option<&[u8]>,
) -> bool {
    if let Some(inm) = if_none_match {
        let weak = |t: &[u8]| t.strip_prefix(b"W/").unwrap_or(t).to_vec();
        let etag = header(stored, "etag").map(|e| weak(trim(e)));
        return inm.split(|&b| b == b',').map(trim).any(|t| t == b"*" || etag.as_ref().is_some_and(|e| weak(t) == *e));
    }
    let Some(since) = date(if_modified_since, received) else { return false };
    let validator = date(header(stored, "last-modified"), received).or_else(|| date(header(stored, "date"), received));
    validator.unwrap_or(received) <= since
}

/// Trims spaces and tabs on both ends.
pub fn trim(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|b| !matches!(b, b' ' | b'\t')).unwrap_or(s.len());
    let end = s.iter().rposition(|b| !matches!(b, b' ' | b'\t')).map_or(start, |i| i + 1);
    &s[start..end.max(start)]
}

fn trim_quotes(s: &[u8]) -> &[u8] {
    match s {
        [b'"', inner @ .., b'"'] => inner,
        _ => s,
    }
}

#[cfg(test)]
mod tests;
