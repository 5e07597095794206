//! Range requests answered from a stored complete response (RFC 9110 §14):
//! which byte ranges a `Range` header asks of a representation of known
//! length, and whether an `If-Range` lets the ranges through (§13.1.5).
//!
//! Only the `bytes` unit exists; a `Range` that does not parse is ignored
//! (the whole representation is sent, §14.2), never answered 400. Overlapping
//! ranges are coalesced and a range-set of more than [`MAX_RANGES`] ranges is
//! ignored, as §14.2 allows, so that a request cannot make the answer larger
//! than a few times the representation.

use std::ops::RangeInclusive;
use std::time::SystemTime;

/// Most ranges answered in one multipart response; more: the whole representation.
pub const MAX_RANGES: usize = 16;

/// What to answer to a `Range` on a representation of `len` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ranges {
    /// Ignore the header: 200 with the whole representation.
    Whole,
    /// 206 with these byte ranges (first..=last), in the client's order; one
    /// range is a plain 206, several a `multipart/byteranges` body.
    Parts(Vec<RangeInclusive<u64>>),
    /// 416: no range overlaps the representation.
    Unsatisfiable,
}

/// Evaluates a `Range` field value against a representation of `len` bytes
/// (RFC 9110 §14.1.1 syntax, §14.1.2 `bytes` semantics).
pub fn evaluate(value: &[u8], len: u64) -> Ranges {
    let value = super::trim(value);
    let Some(eq) = value.iter().position(|&b| b == b'=') else { return Ranges::Whole };
    if !super::trim(&value[..eq]).eq_ignore_ascii_case(b"bytes") {
        return Ranges::Whole;
    }
    let mut parts: Vec<RangeInclusive<u64>> = Vec::new();
    let mut specs = 0;
    for spec in value[eq + 1..].split(|&b| b == b',') {
        let spec = super::trim(spec);
        if spec.is_empty() {
            continue; // empty list elements are allowed (RFC 9110 §5.6.1.2)
        }
        specs += 1;
        if specs > MAX_RANGES {
            return Ranges::Whole;
        }
        let Some(dash) = spec.iter().position(|&b| b == b'-') else { return Ranges::Whole };
        let (first, last) = (&spec[..dash], &spec[dash + 1..]);
        let range = match (digits(first), digits(last)) {
            // suffix-range: the last N bytes.
            (None, Some(n)) if first.is_empty() => {
                if n == 0 || len == 0 {
                    continue;
                }
                len.saturating_sub(n)..=len - 1
            }
            (Some(a), None) if last.is_empty() => {
                if a >= len {
                    continue;
                }
                a..=len - 1
            }
            (Some(a), Some(b)) if a <= b => {
                if a >= len {
                    continue;
                }
                a..=b.min(len - 1)
            }
            // last-pos < first-pos, or not digits: the whole header is invalid.
            _ => return Ranges::Whole,
        };
        parts.push(range);
    }
    if specs == 0 {
        return Ranges::Whole;
    }
    if parts.is_empty() {
        return Ranges::Unsatisfiable;
    }
    Ranges::Parts(coalesce(parts))
}

/// Merges overlapping ranges (RFC 9110 §14.2 lets a server coalesce them);
/// ranges that do not overlap keep the client's order.
fn coalesce(parts: Vec<RangeInclusive<u64>>) -> Vec<RangeInclusive<u64>> {
    let overlaps = parts
        .iter()
        .enumerate()
        .any(|(i, a)| parts[i + 1..].iter().any(|b| a.start() <= b.end() && b.start() <= a.end()));
    if !overlaps {
        return parts;
    }
    let mut sorted = parts;
    sorted.sort_by_key(|r| *r.start());
    let mut merged: Vec<RangeInclusive<u64>> = Vec::with_capacity(sorted.len());
    for r in sorted {
        match merged.last_mut() {
            Some(m) if *r.start() <= m.end().saturating_add(1) => {
                *m = *m.start()..=(*m.end()).max(*r.end());
            }
            _ => merged.push(r),
        }
    }
    merged
}

fn digits(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// Whether an `If-Range` value lets the `Range` apply to the stored response
/// (RFC 9110 §13.1.5): an entity-tag must match the stored `ETag` by the
/// strong comparison (a weak tag never does); a date must equal the stored
/// `Last-Modified`, which must itself be strong — at least a second before
/// the stored `Date` (§8.8.2.2). Otherwise the whole representation is sent.
pub fn if_range_holds(
    if_range: &[u8],
    etag: Option<&[u8]>,
    last_modified: Option<&[u8]>,
    date: Option<&[u8]>,
    now: SystemTime,
) -> bool {
    let if_range = super::trim(if_range);
    if if_range.starts_with(b"\"") || if_range.starts_with(b"W/") {
        let strong = |t: &[u8]| t.starts_with(b"\"") && t.len() >= 2 && t.ends_with(b"\"");
        return etag.map(super::trim).is_some_and(|e| strong(e) && strong(if_range) && e == if_range);
    }
    let (Some(asked), Some(modified), Some(date)) = (
        super::date::parse(if_range, now),
        last_modified.and_then(|v| super::date::parse(v, now)),
        date.and_then(|v| super::date::parse(v, now)),
    ) else {
        return false;
    };
    asked == modified && date.duration_since(modified).is_ok_and(|d| d.as_secs() >= 1)
}

/// The range a single-part `206 Partial Content` carries, from its
/// `Content-Range` (RFC 9110 §14.4): `bytes FIRST-LAST/COMPLETE` with a known
/// complete length and `FIRST <= LAST < COMPLETE`. `None` for anything else
/// (another unit, `*` as the length, an unsatisfied-range form, bad syntax):
/// such a response is not stored.
pub fn content_range(value: &[u8]) -> Option<(RangeInclusive<u64>, u64)> {
    let value = super::trim(value);
    let rest = value.strip_prefix(b"bytes ").or_else(|| value.strip_prefix(b"BYTES "))?;
    let slash = rest.iter().position(|&b| b == b'/')?;
    let (span, complete) = (&rest[..slash], &rest[slash + 1..]);
    let dash = span.iter().position(|&b| b == b'-')?;
    let (first, last, complete) = (digits(&span[..dash])?, digits(&span[dash + 1..])?, digits(complete)?);
    (first <= last && last < complete).then_some((first..=last, complete))
}

/// The strong validator of a response, as one comparable token, for
/// combining partial responses (RFC 9111 §3.4: only responses whose
/// validators match by the strong comparison are combined): a strong `ETag`
/// (`E` + the tag); without an `ETag`, a `Last-Modified` that is strong by
/// RFC 9110 §8.8.2.2 — at least a second before the response's `Date`
/// (`L` + the date as sent). A weak `ETag` gives `None` (no fallback to the
/// date: the server said the representation's identity is weak).
pub fn strong_validator(
    etag: Option<&[u8]>,
    last_modified: Option<&[u8]>,
    date: Option<&[u8]>,
    now: SystemTime,
) -> Option<Vec<u8>> {
    if let Some(tag) = etag.map(super::trim) {
        let strong = tag.len() >= 2 && tag.starts_with(b"\"") && tag.ends_with(b"\"");
        return strong.then(|| [&b"E"[..], tag].concat());
    }
    let raw = last_modified.map(super::trim)?;
    let modified = super::date::parse(raw, now)?;
    let date = super::date::parse(date?, now)?;
    date.duration_since(modified).is_ok_and(|d| d.as_secs() >= 1).then(|| [&b"L"[..], raw].concat())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn parts(v: &[RangeInclusive<u64>]) -> Ranges {
        Ranges::Parts(v.to_vec())
    }

    #[test]
    fn byte_ranges_of_a_thousand_bytes() {
        let table: &[(&str, Ranges)] = &[
            ("bytes=0-499", parts(&[0..=499])),
            ("bytes=500-999", parts(&[500..=999])),
            ("bytes=500-", parts(&[500..=999])),
            ("bytes=-200", parts(&[800..=999])),
            ("bytes=-2000", parts(&[0..=999])),
            ("bytes=900-5000", parts(&[900..=999])),
            ("Bytes = 0-0 , -1", parts(&[0..=0, 999..=999])),
            ("bytes=500-599,0-99", parts(&[500..=599, 0..=99])),
            ("bytes=0-499,400-599,900-", parts(&[0..=599, 900..=999])),
            ("bytes=0-1,2-3", parts(&[0..=1, 2..=3])),
            ("bytes=,0-9", parts(&[0..=9])),
            ("bytes=1000-", Ranges::Unsatisfiable),
            ("bytes=-0", Ranges::Unsatisfiable),
            ("bytes=1000-2000,5000-", Ranges::Unsatisfiable),
            ("bytes=500-400", Ranges::Whole),
            ("bytes=abc", Ranges::Whole),
            ("bytes=1-2-3", Ranges::Whole),
            ("bytes=", Ranges::Whole),
            ("items=0-5", Ranges::Whole),
            ("0-5", Ranges::Whole),
            ("bytes=0-0,1-1,2-2,3-3,4-4,5-5,6-6,7-7,8-8,9-9,10-10,11-11,12-12,13-13,14-14,15-15,16-16", Ranges::Whole),
        ];
        for (value, expected) in table {
            assert_eq!(evaluate(value.as_bytes(), 1000), *expected, "{value}");
        }
        assert_eq!(evaluate(b"bytes=0-", 0), Ranges::Unsatisfiable);
        assert_eq!(evaluate(b"bytes=-5", 0), Ranges::Unsatisfiable);
    }

    #[test]
    fn if_range_needs_a_strong_match() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000);
        let lm = Some(&b"Sun, 06 Nov 1994 08:49:37 GMT"[..]);
        let date = Some(&b"Sun, 06 Nov 1994 09:00:00 GMT"[..]);
        assert!(if_range_holds(b"\"v1\"", Some(b"\"v1\""), None, None, now));
        assert!(!if_range_holds(b"\"v2\"", Some(b"\"v1\""), None, None, now));
        assert!(!if_range_holds(b"W/\"v1\"", Some(b"W/\"v1\""), None, None, now), "weak tags never match");
        assert!(!if_range_holds(b"\"v1\"", Some(b"W/\"v1\""), None, None, now));
        assert!(!if_range_holds(b"\"v1\"", None, lm, date, now));
        assert!(if_range_holds(b"Sun, 06 Nov 1994 08:49:37 GMT", None, lm, date, now));
        assert!(if_range_holds(b"Sunday, 06-Nov-94 08:49:37 GMT", None, lm, date, now));
        assert!(!if_range_holds(b"Sun, 06 Nov 1994 08:49:38 GMT", None, lm, date, now));
        assert!(!if_range_holds(b"Sun, 06 Nov 1994 08:49:37 GMT", None, lm, lm, now), "a weak Last-Modified");
        assert!(!if_range_holds(b"Sun, 06 Nov 1994 08:49:37 GMT", None, lm, None, now));
        assert!(!if_range_holds(b"garbage", None, lm, date, now));
    }

    #[test]
    fn content_ranges_of_single_part_responses() {
        type Expected = Option<(RangeInclusive<u64>, u64)>;
        let table: &[(&str, Expected)] = &[
            ("bytes 0-499/1234", Some((0..=499, 1234))),
            ("bytes 1233-1233/1234", Some((1233..=1233, 1234))),
            (" bytes 0-0/1 ", Some((0..=0, 1))),
            ("bytes 0-1234/1234", None),
            ("bytes 500-400/1234", None),
            ("bytes 0-499/*", None),
            ("bytes */1234", None),
            ("items 0-4/5", None),
            ("bytes=0-4/5", None),
            ("bytes 0-4", None),
            ("bytes -4/5", None),
            ("bytes 0--4/5", None),
            ("bytes 0-99999999999999999999/5", None),
            ("", None),
        ];
        for (value, expected) in table {
            assert_eq!(content_range(value.as_bytes()), *expected, "{value}");
        }
    }

    #[test]
    fn only_strong_validators_identify_a_representation() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000);
        let lm = Some(&b"Sun, 06 Nov 1994 08:49:37 GMT"[..]);
        let date = Some(&b"Sun, 06 Nov 1994 09:00:00 GMT"[..]);
        assert_eq!(strong_validator(Some(b"\"v1\""), None, None, now), Some(b"E\"v1\"".to_vec()));
        assert_eq!(strong_validator(Some(b"W/\"v1\""), lm, date, now), None, "a weak tag, no fallback");
        assert_eq!(strong_validator(Some(b"v1"), None, None, now), None, "not a tag");
        assert_eq!(strong_validator(None, lm, date, now), Some(b"LSun, 06 Nov 1994 08:49:37 GMT".to_vec()));
        assert_eq!(strong_validator(None, lm, lm, now), None, "modified in the second of the Date: weak");
        assert_eq!(strong_validator(None, lm, None, now), None, "no Date: cannot tell");
        assert_eq!(strong_validator(None, None, date, now), None);
    }
}
