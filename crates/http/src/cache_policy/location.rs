//! Which stored responses an unsafe request's answer names besides its own
//! target (RFC 9111 §4.4): the URIs in `Location` and `Content-Location`,
//! invalidated only when they are on the same origin as the request — same
//! scheme, host and port — so a response cannot make the cache drop another
//! site's entries.
//!
//! Only references whose origin can be told without resolving paths are
//! followed: an absolute URI, a network-path reference (`//host/p`) and an
//! absolute-path reference (`/p?q`). Relative paths (`p`, `../p`, `?q`) and
//! anything with user information are left alone (the RFC allows, never
//! requires, this invalidation).

/// The origin-form target — (path, query) — that `reference` names, when it
/// is on the origin of a request with `scheme` (`http` or `https`) and
/// `authority` (its `Host`, or the authority of an absolute-form target).
/// The fragment is ignored; an empty path is `/`.
pub fn same_origin_target<'a>(
    reference: &'a [u8],
    scheme: &str,
    authority: &[u8],
) -> Option<(&'a [u8], Option<&'a [u8]>)> {
    let reference = super::trim(reference);
    let reference = reference.split(|&b| b == b'#').next().unwrap_or_default();
    let rest = if let Some(rest) = reference.strip_prefix(b"//") {
        Some(rest)
    } else if reference.starts_with(b"/") {
        None
    } else {
        let colon = reference.iter().position(|&b| b == b':')?;
        let (their_scheme, rest) = (&reference[..colon], &reference[colon + 1..]);
        if !their_scheme.eq_ignore_ascii_case(scheme.as_bytes()) {
            return None;
        }
        Some(rest.strip_prefix(b"//")?)
    };
    let target = match rest {
        Some(rest) => {
            let end = rest.iter().position(|&b| b == b'/' || b == b'?').unwrap_or(rest.len());
            if origin(&rest[..end], scheme)? != origin(authority, scheme)? {
                return None;
            }
            &rest[end..]
        }
        None => reference,
    };
    let (path, query) = match target.iter().position(|&b| b == b'?') {
        Some(q) => (&target[..q], Some(&target[q + 1..])),
        None => (target, None),
    };
    Some((if path.is_empty() { b"/" } else { path }, query))
}

/// An authority as (lower-case host, port), the port defaulting to the
/// scheme's; `None` with user information, an empty host or a bad port.
fn origin(authority: &[u8], scheme: &str) -> Option<(Vec<u8>, u16)> {
    if authority.contains(&b'@') {
        return None;
    }
    let split = if authority.starts_with(b"[") {
        let end = authority.iter().position(|&b| b == b']')?;
        (end + 1 < authority.len()).then_some(end + 1)
    } else {
        authority.iter().rposition(|&b| b == b':')
    };
    let (host, port) = match split {
        Some(at) if authority[at] == b':' => (&authority[..at], Some(&authority[at + 1..])),
        Some(_) => return None,
        None => (authority, None),
    };
    let default = if scheme.eq_ignore_ascii_case("https") { 443 } else { 80 };
    let port = match port {
        None | Some(b"") => default,
        Some(p) => std::str::from_utf8(p).ok()?.parse().ok()?,
    };
    (!host.is_empty()).then(|| (host.to_ascii_lowercase(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_same_origin_references_name_a_target() {
        type Target = Option<(&'static str, Option<&'static str>)>;
        let table: &[(&str, &str, &str, Target)] = &[
            ("/a/b?x=1", "http", "example.com", Some(("/a/b", Some("x=1")))),
            ("/a#frag", "http", "example.com", Some(("/a", None))),
            ("http://example.com/a", "http", "example.com", Some(("/a", None))),
            ("HTTP://Example.COM:80/a?q", "http", "example.com", Some(("/a", Some("q")))),
            ("http://example.com", "http", "example.com:80", Some(("/", None))),
            ("http://example.com?q", "http", "example.com", Some(("/", Some("q")))),
            ("//example.com/a", "http", "EXAMPLE.com", Some(("/a", None))),
            ("https://example.com:443/s", "https", "example.com", Some(("/s", None))),
            ("http://[::1]:8080/v6", "http", "[::1]:8080", Some(("/v6", None))),
            // Another origin: host, port or scheme differ.
            ("http://other.com/a", "http", "example.com", None),
            ("http://example.com:8080/a", "http", "example.com", None),
            ("https://example.com/a", "http", "example.com", None),
            ("//example.com:81/a", "http", "example.com", None),
            ("http://[::1]/v6", "http", "[::1]:8080", None),
            // Not followed: relative paths, user information, nonsense.
            ("a/b", "http", "example.com", None),
            ("../a", "http", "example.com", None),
            ("?q", "http", "example.com", None),
            ("http://user@example.com/a", "http", "example.com", None),
            ("http:/a", "http", "example.com", None),
            ("http://example.com:x/a", "http", "example.com", None),
            ("mailto:a@example.com", "http", "example.com", None),
            ("", "http", "example.com", None),
        ];
        for (reference, scheme, authority, expected) in table {
            let got = same_origin_target(reference.as_bytes(), scheme, authority.as_bytes());
            let expected = expected.map(|(p, q)| (p.as_bytes(), q.map(str::as_bytes)));
            assert_eq!(got, expected, "{reference} from {scheme}://{authority}");
        }
    }
}
