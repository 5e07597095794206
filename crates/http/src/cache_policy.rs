//! RFC 9111 rules, sans I/O: which responses a shared cache may store
//! (§3), how long they stay fresh (§4.2.1, §4.2.2), how old they are (§4.2.3),
//! and what a request's own `Cache-Control` asks of the cache (§5.2.1).
//!
//! Headers are given as `(lower-case name, value)` pairs. Times are passed in:
//! `SystemTime` only where the protocol speaks in dates (`Date`, `Expires`,
//! `Last-Modified`), durations everywhere else.

use std::time::{Duration, SystemTime};

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
    /// except for `max-age`, which then counts as 0 (stale: the safe side).
    pub fn parse<'a>(values: impl Iterator<Item = &'a [u8]>) -> Directives {
        let mut d = Directives::default();
        for value in values {
            for item in value.split(|&b| b == b',') {
                let item = trim(item);
                let (name, arg) = match item.iter().position(|&b| b == b'=') {
                    Some(i) => (trim(&item[..i]), Some(trim_quotes(trim(&item[i + 1..])))),
                    None => (item, None),
                };
                let seconds = || arg.and_then(|a| std::str::from_utf8(a).ok()?.parse::<u64>().ok());
                let lower = name.to_ascii_lowercase();
                match lower.as_slice() {
                    b"max-age" => d.max_age = Some(seconds().unwrap_or(0)),
                    b"s-maxage" => d.s_maxage = Some(seconds().unwrap_or(0)),
                    b"no-store" => d.no_store = true,
                    b"no-cache" => d.no_cache = true,
                    b"private" => d.private = true,
                    b"public" => d.public = true,
                    b"must-revalidate" | b"proxy-revalidate" => d.must_revalidate = true,
                    b"stale-while-revalidate" => d.stale_while_revalidate = seconds(),
                    b"stale-if-error" => d.stale_if_error = seconds(),
                    b"only-if-cached" => d.only_if_cached = true,
                    _ => {}
                }
            }
        }
        d
    }
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

/// An HTTP date (`Date`, `Expires`, `Last-Modified`); `None` when invalid.
pub fn date(value: Option<&[u8]>) -> Option<SystemTime> {
    httpdate::parse_http_date(std::str::from_utf8(value?).ok()?.trim()).ok()
}

/// The freshness lifetime of a response (RFC 9111 §4.2.1): `s-maxage`, then
/// `max-age`, then `Expires` minus `Date`, then — only when `heuristic` —
/// 10 % of the time since `Last-Modified`, at most a day. `None`: no
/// freshness information at all.
pub fn freshness(
    d: &Directives,
    headers: &[(String, Vec<u8>)],
    received: SystemTime,
    heuristic: bool,
) -> Option<Duration> {
    if let Some(s) = d.s_maxage.or(d.max_age) {
        return Some(Duration::from_secs(s));
    }
    let date_value = date(header(headers, "date")).unwrap_or(received);
    if let Some(expires) = header(headers, "expires") {
        // An invalid Expires (often "0") means already expired (§5.3).
        return Some(date(Some(expires)).and_then(|e| e.duration_since(date_value).ok()).unwrap_or_default());
    }
    if heuristic {
        let modified = date(header(headers, "last-modified"))?;
        let age = date_value.duration_since(modified).ok()?;
        return Some((age / 10).min(HEURISTIC_MAX));
    }
    None
}

/// The age of a response when it was received (RFC 9111 §4.2.3,
/// `corrected_initial_age`): the larger of what its `Date` says and what its
/// `Age` says plus the time the request took.
pub fn initial_age(headers: &[(String, Vec<u8>)], requested: SystemTime, received: SystemTime) -> Duration {
    let apparent = date(header(headers, "date")).and_then(|d| received.duration_since(d).ok()).unwrap_or_default();
    let age_value = header(headers, "age")
        .and_then(|a| std::str::from_utf8(a).ok()?.trim().parse::<u64>().ok())
        .map_or(Duration::ZERO, Duration::from_secs);
    let delay = received.duration_since(requested).unwrap_or_default();
    apparent.max(age_value + delay)
}

/// Whether a shared cache may store this response to a GET (RFC 9111 §3).
/// `Set-Cookie` responses are refused too: a cookie is usually meant for
/// one client, and handing it to every client is the classic shared-cache
/// leak (a choice stricter than the RFC, documented in the configuration).
pub fn storable(
    status: u16,
    d: &Directives,
    headers: &[(String, Vec<u8>)],
    request_authorized: bool,
    heuristic: bool,
) -> bool {
    if d.no_store || d.private || header(headers, "set-cookie").is_some() {
        return false;
    }
    if self::headers(headers, "vary").any(|v| v.split(|&b| b == b',').any(|t| trim(t) == b"*")) {
        return false;
    }
    if request_authorized && !(d.s_maxage.is_some() || d.public || d.must_revalidate) {
        return false;
    }
    let explicit = d.s_maxage.is_some() || d.max_age.is_some() || header(headers, "expires").is_some();
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
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> Vec<(String, Vec<u8>)> {
        pairs.iter().map(|(n, v)| (n.to_string(), v.as_bytes().to_vec())).collect()
    }

    #[test]
    fn directives_are_read_from_every_value() {
        let d = Directives::parse(
            [&b"public, max-age=60"[..], b"s-maxage=\"120\", stale-if-error=30, Must-Revalidate"].into_iter(),
        );
        assert_eq!(d.max_age, Some(60));
        assert_eq!(d.s_maxage, Some(120));
        assert_eq!(d.stale_if_error, Some(30));
        assert!(d.public && d.must_revalidate && !d.no_store);
        assert_eq!(Directives::parse([&b"max-age=junk"[..]].into_iter()).max_age, Some(0));
    }

    #[test]
    fn s_maxage_wins_then_max_age_then_expires() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let d = Directives::parse([&b"max-age=10, s-maxage=20"[..]].into_iter());
        assert_eq!(freshness(&d, &[], now, false), Some(Duration::from_secs(20)));
        let hs = h(&[("date", "Tue, 14 Nov 2023 22:13:20 GMT"), ("expires", "Tue, 14 Nov 2023 22:14:20 GMT")]);
        assert_eq!(freshness(&Directives::default(), &hs, now, false), Some(Duration::from_secs(60)));
        let bad = h(&[("expires", "0")]);
        assert_eq!(freshness(&Directives::default(), &bad, now, false), Some(Duration::ZERO));
        let lm = h(&[("date", "Tue, 14 Nov 2023 22:13:20 GMT"), ("last-modified", "Tue, 14 Nov 2023 22:11:40 GMT")]);
        assert_eq!(freshness(&Directives::default(), &lm, now, false), None);
        assert_eq!(freshness(&Directives::default(), &lm, now, true), Some(Duration::from_secs(10)));
    }

    #[test]
    fn age_takes_the_larger_estimate() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let hs = h(&[("age", "5"), ("date", "Tue, 14 Nov 2023 22:13:18 GMT")]);
        assert_eq!(initial_age(&hs, t0, t0 + Duration::from_secs(1)), Duration::from_secs(6));
        let hs = h(&[("date", "Tue, 14 Nov 2023 22:13:00 GMT")]);
        assert_eq!(initial_age(&hs, t0, t0), Duration::from_secs(20));
    }

    #[test]
    fn what_a_shared_cache_may_store() {
        let d = |s: &str| Directives::parse([s.as_bytes()].into_iter());
        assert!(storable(200, &d("max-age=5"), &[], false, false));
        assert!(!storable(200, &d("max-age=5, private"), &[], false, false));
        assert!(!storable(200, &d("no-store, max-age=5"), &[], false, false));
        assert!(!storable(200, &d(""), &[], false, false));
        assert!(storable(200, &d(""), &h(&[("etag", "\"a\"")]), false, false));
        assert!(!storable(200, &d("max-age=5"), &h(&[("set-cookie", "a=b")]), false, false));
        assert!(!storable(200, &d("max-age=5"), &h(&[("vary", "accept, *")]), false, false));
        assert!(!storable(200, &d("max-age=5"), &[], true, false));
        assert!(storable(200, &d("s-maxage=5"), &[], true, false));
        assert!(!storable(206, &d("max-age=5"), &[], false, false));
        assert!(storable(302, &d("max-age=5"), &[], false, false));
        assert!(!storable(302, &d("public"), &[], false, false));
    }

    #[test]
    fn accept_encoding_is_normalised() {
        assert_eq!(normalise_accept_encoding(b"gzip, BR"), b"br,gzip");
        assert_eq!(normalise_accept_encoding(b"br,gzip;q=0.5, zstd;q=0"), b"br,gzip");
        assert_eq!(normalise_accept_encoding(b""), b"");
    }
}
