//! W3C Trace Context (<https://www.w3.org/TR/trace-context/>): reading the
//! client's `traceparent` and `tracestate`, writing the `traceparent` sent to
//! the server, and the sampling decision.
//!
//! Parsing is strict, as the recommendation asks: lower-case hex only, exact
//! lengths, version `ff` refused, all-zero trace and parent ids refused, and
//! for version `00` nothing after the flags. A header that fails any check
//! is treated as absent: the request starts a new trace and the invalid
//! header is not forwarded. A later version is read by its version-00
//! prefix (the forward-compatibility rule) and forwarded as version 00.

/// The trace a request belongs to, as the client sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parent {
    /// The trace id (16 bytes, not all zero).
    pub trace_id: [u8; 16],
    /// The client's span (8 bytes, not all zero): the parent of ours.
    pub span_id: [u8; 8],
    /// The `sampled` flag: the caller records this trace.
    pub sampled: bool,
}

/// Length of a version-00 `traceparent` value.
pub const TRACEPARENT_LEN: usize = 55;

/// Reads one `traceparent` value; `None` when it breaks any rule.
pub fn parse_traceparent(value: &[u8]) -> Option<Parent> {
    let value = trim(value);
    if value.len() < TRACEPARENT_LEN {
        return None;
    }
    let version = hex_byte(&value[0..2])?;
    if version == 0xff || value[2] != b'-' || value[35] != b'-' || value[52] != b'-' {
        return None;
    }
    // Version 00 ends after the flags; a later one may go on after a dash.
    match (version, value.get(TRACEPARENT_LEN)) {
        (_, None) => {}
        (0, Some(_)) => return None,
        (_, Some(b'-')) => {}
        (_, Some(_)) => return None,
    }
    let mut trace_id = [0; 16];
    let mut span_id = [0; 8];
    decode(&value[3..35], &mut trace_id)?;
    decode(&value[36..52], &mut span_id)?;
    let flags = hex_byte(&value[53..55])?;
    if trace_id == [0; 16] || span_id == [0; 8] {
        return None;
    }
    Some(Parent { trace_id, span_id, sampled: flags & 1 == 1 })
}

/// Writes `00-TRACE-SPAN-FLAGS`.
pub fn format_traceparent(trace_id: &[u8; 16], span_id: &[u8; 8], sampled: bool) -> [u8; TRACEPARENT_LEN] {
    let mut out = [b'-'; TRACEPARENT_LEN];
    out[0..2].copy_from_slice(b"00");
    encode(trace_id, &mut out[3..35]);
    encode(span_id, &mut out[36..52]);
    out[53..55].copy_from_slice(if sampled { b"01" } else { b"00" });
    out
}

/// Whether the `tracestate` values (the header may be split over several
/// fields, joined by commas) form a valid list: at most 32 members, each
/// `key=value` with the recommendation's grammar, empty members allowed.
pub fn valid_tracestate<'a>(values: impl Iterator<Item = &'a [u8]>) -> bool {
    let mut members = 0;
    for value in values {
        for member in value.split(|&b| b == b',') {
            let member = trim(member);
            if member.is_empty() {
                continue;
            }
            members += 1;
            let Some(eq) = member.iter().position(|&b| b == b'=') else { return false };
            if members > 32 || !valid_key(&member[..eq]) || !valid_value(&member[eq + 1..]) {
                return false;
            }
        }
    }
    true
}

/// `simple-key` or `tenant-id@system-id` (lower-case letters, digits, `_-*/`).
fn valid_key(key: &[u8]) -> bool {
    let part = |p: &[u8], max: usize, first_digit: bool| {
        !p.is_empty()
            && p.len() <= max
            && (p[0].is_ascii_lowercase() || (first_digit && p[0].is_ascii_digit()))
            && p.iter().all(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-*/".contains(&b))
    };
    match key.iter().position(|&b| b == b'@') {
        None => part(key, 256, false),
        Some(at) => part(&key[..at], 241, true) && part(&key[at + 1..], 14, false),
    }
}

/// Up to 256 printable ASCII characters other than `,` and `=`, not ending in a space.
fn valid_value(value: &[u8]) -> bool {
    !value.is_empty()
        && value.len() <= 256
        && value.last() != Some(&b' ')
        && value.iter().all(|&b| (0x20..=0x7e).contains(&b) && b != b',' && b != b'=')
}

/// Whether a trace is recorded at `millionths` (of 1,000,000): the
/// OpenTelemetry `TraceIdRatioBased` rule, so every service sampling the
/// same trace id at the same ratio decides the same way.
pub fn ratio_samples(trace_id: &[u8; 16], millionths: u32) -> bool {
    let mut low = [0; 8];
    low.copy_from_slice(&trace_id[8..]);
    let x = u64::from_be_bytes(low) >> 1;
    let bound = (u128::from(millionths.min(1_000_000)) << 63) / 1_000_000;
    u128::from(x) < bound
}

/// Lower-case hex of `bytes` into `out` (twice as long).
pub fn encode(bytes: &[u8], out: &mut [u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (i, b) in bytes.iter().enumerate() {
        out[2 * i] = HEX[usize::from(b >> 4)];
        out[2 * i + 1] = HEX[usize::from(b & 15)];
    }
}

/// Lower-case hex of a 16-byte trace id.
pub fn trace_id_hex(id: &[u8; 16]) -> [u8; 32] {
    let mut out = [0; 32];
    encode(id, &mut out);
    out
}

fn decode(hex: &[u8], out: &mut [u8]) -> Option<()> {
    for (i, pair) in hex.chunks_exact(2).enumerate() {
        out[i] = hex_byte(pair)?;
    }
    Some(())
}

fn hex_byte(pair: &[u8]) -> Option<u8> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    Some(digit(pair[0])? << 4 | digit(pair[1])?)
}

fn trim(v: &[u8]) -> &[u8] {
    let start = v.iter().position(|&b| b != b' ' && b != b'\t').unwrap_or(v.len());
    let end = v.iter().rposition(|&b| b != b' ' && b != b'\t').map_or(start, |i| i + 1);
    &v[start..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &[u8] = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn reads_the_recommendation_example() {
        let p = parse_traceparent(VALID).expect("valid");
        assert_eq!(trace_id_hex(&p.trace_id), *b"4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(p.span_id, [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]);
        assert!(p.sampled);
        assert_eq!(&format_traceparent(&p.trace_id, &p.span_id, true)[..], VALID);
        let unsampled = parse_traceparent(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
        assert!(!unsampled.expect("valid").sampled);
        // Optional whitespace around a field value is not part of it.
        assert!(parse_traceparent(b" 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\t").is_some());
    }

    #[test]
    fn refuses_every_malformed_value() {
        let cases: &[&[u8]] = &[
            b"",
            b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", // upper-case hex
            b"00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",  // short trace id
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01",  // short parent id
            b"00-00000000000000000000000000000000-00f067aa0ba902b7-01", // zero trace id
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", // zero parent id
            b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // forbidden version
            b"0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // not hex
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-", // 00 with a suffix
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x",
            b"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7.01",
            b"cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", // later version, bad suffix
        ];
        for case in cases {
            assert_eq!(parse_traceparent(case), None, "{}", String::from_utf8_lossy(case));
        }
    }

    #[test]
    fn reads_a_later_version_by_its_prefix() {
        let later = b"cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-holds";
        assert!(parse_traceparent(later).expect("forward compatible").sampled);
        assert!(parse_traceparent(&later[..TRACEPARENT_LEN]).is_some());
    }

    #[test]
    fn tracestate_grammar() {
        let ok: &[&[u8]] = &[b"", b"rojo=00f067aa0ba902b7", b"congo=t61rcWkgMzE, rojo=00f067aa0ba902b7", b"a@b=1,,c=2"];
        for v in ok {
            assert!(valid_tracestate([*v].into_iter()), "{}", String::from_utf8_lossy(v));
        }
        let bad: &[&[u8]] = &[b"Rojo=1", b"rojo", b"rojo=a,b", b"rojo=a\tb", b"a@=1", b"1a=1", b"k=\x01"];
        for v in bad {
            assert!(!valid_tracestate([*v].into_iter()), "{}", String::from_utf8_lossy(v));
        }
        let many = (0..33).map(|i| format!("k{i}=v")).collect::<Vec<_>>().join(",");
        assert!(!valid_tracestate([many.as_bytes()].into_iter()));
        // Split over two fields, counted together.
        assert!(valid_tracestate([&b"a=1"[..], b"b=2"].into_iter()));
    }

    #[test]
    fn ratio_bounds() {
        let ids = [[0u8; 16], [0xff; 16], [0x80; 16], [0x11; 16]];
        for id in &ids {
            assert!(!ratio_samples(id, 0));
            assert!(ratio_samples(id, 1_000_000));
        }
        // The decision reads the low half of the id only.
        let mut low = [0u8; 16];
        low[8] = 0x7f;
        assert!(ratio_samples(&low, 500_000));
        low[8] = 0x81;
        assert!(!ratio_samples(&low, 500_000));
    }
}
