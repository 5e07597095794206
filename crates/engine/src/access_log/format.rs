//! Formatting one [`Record`] as an access log line, JSON or combined, into a
//! reused buffer.
//!
//! Nothing here allocates beyond the growth of the output buffer: numbers go
//! through `itoa`, addresses through their `Display` into the buffer, and the
//! calendar part of the time is computed once per second ([`Clock`]) — the
//! milliseconds are appended per line.
//!
//! Escaping: JSON strings escape `"`, `\` and control bytes, and write each
//! byte that is not valid UTF-8 as `\u00XX` (the byte as a code point), so a
//! line is always valid JSON and the byte stays visible. Combined lines escape
//! `"`, `\`, control bytes and non-ASCII bytes as `\xHH`, like NGINX.

use std::io::Write as _;
use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::metrics::Record;

const MONTHS: [&[u8; 3]; 12] =
    [b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec"];

/// The calendar part of the current second, formatted once per second.
#[derive(Debug, Clone)]
pub(crate) struct Clock {
    second: u64,
    /// `2000-10-10T13:55:36`
    rfc3339: [u8; 19],
    /// `10/Oct/2000:13:55:36`
    clf: [u8; 20],
}

impl Clock {
    pub(crate) fn new() -> Self {
        Clock { second: u64::MAX, rfc3339: [b'0'; 19], clf: [b'0'; 20] }
    }

    /// Seconds and milliseconds since the epoch of `t` (0 before the epoch),
    /// with the cached texts made current for that second.
    pub(crate) fn at(&mut self, t: SystemTime) -> (&[u8; 19], &[u8; 20], u32) {
        let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
        let second = d.as_secs();
        if second != self.second {
            self.set(second);
        }
        (&self.rfc3339, &self.clf, d.subsec_millis())
    }

    fn set(&mut self, second: u64) {
        self.second = second;
        let (y, mo, d) = civil(second / 86_400);
        let rem = second % 86_400;
        let (h, mi, s) = ((rem / 3600) as u32, (rem % 3600 / 60) as u32, (rem % 60) as u32);
        let y = y.min(9999);
        let two = |buf: &mut [u8], at: usize, v: u32| {
            buf[at] = b'0' + (v / 10 % 10) as u8;
            buf[at + 1] = b'0' + (v % 10) as u8;
        };
        let r = &mut self.rfc3339;
        r.copy_from_slice(b"0000-00-00T00:00:00");
        two(r, 0, y / 100);
        two(r, 2, y % 100);
        two(r, 5, mo);
        two(r, 8, d);
        two(r, 11, h);
        two(r, 14, mi);
        two(r, 17, s);
        let c = &mut self.clf;
        c.copy_from_slice(b"00/Jan/0000:00:00:00");
        two(c, 0, d);
        c[3..6].copy_from_slice(MONTHS[(mo - 1) as usize]);
        two(c, 7, y / 100);
        two(c, 9, y % 100);
        two(c, 12, h);
        two(c, 15, mi);
        two(c, 18, s);
    }
}

/// (year, month 1-12, day 1-31) of a day count since 1970-01-01
/// (Howard Hinnant's days-from-civil inverse).
fn civil(days: u64) -> (u32, u32, u32) {
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = (yoe + era * 400 + i64::from(m <= 2)) as u32;
    (y, m, d)
}

fn num(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

fn addr(out: &mut Vec<u8>, a: SocketAddr) {
    // Writing into a Vec cannot fail.
    let _ = write!(out, "{a}");
}

/// Appends one JSON object and a newline.
pub(crate) fn json(out: &mut Vec<u8>, r: &Record, clock: &mut Clock) {
    let (rfc3339, _, ms) = clock.at(r.start);
    out.extend_from_slice(b"{\"time\":\"");
    out.extend_from_slice(rfc3339);
    out.push(b'.');
    out.extend_from_slice(&[b'0' + (ms / 100) as u8, b'0' + (ms / 10 % 10) as u8, b'0' + (ms % 10) as u8]);
    out.extend_from_slice(b"Z\",\"service\":");
    json_str(out, r.service.as_bytes());
    out.extend_from_slice(b",\"client\":\"");
    addr(out, r.client);
    out.extend_from_slice(b"\",\"method\":");
    json_str(out, r.method);
    out.extend_from_slice(b",\"uri\":");
    json_str(out, r.target);
    out.extend_from_slice(b",\"version\":");
    json_str(out, r.version.as_bytes());
    out.extend_from_slice(b",\"host\":");
    json_opt(out, r.host);
    out.extend_from_slice(b",\"status\":");
    num(out, u64::from(r.status));
    out.extend_from_slice(b",\"bytes_in\":");
    num(out, r.bytes_in);
    out.extend_from_slice(b",\"bytes_out\":");
    num(out, r.bytes_out);
    out.extend_from_slice(b",\"body_bytes_out\":");
    num(out, r.body_bytes_out);
    match &r.upstream {
        Some(u) => {
            out.extend_from_slice(b",\"pool\":");
            json_str(out, u.pool.as_bytes());
            out.extend_from_slice(b",\"server\":");
            json_str(out, u.server.as_bytes());
            out.extend_from_slice(b",\"server_addr\":\"");
            addr(out, u.addr);
            out.push(b'"');
        }
        None => out.extend_from_slice(b",\"pool\":null,\"server\":null,\"server_addr\":null"),
    }
    let t = &r.timings;
    out.extend_from_slice(b",\"head_us\":");
    num(out, t.head_us);
    out.extend_from_slice(b",\"connect_us\":");
    json_num_opt(out, t.connect_us);
    out.extend_from_slice(b",\"response_us\":");
    json_num_opt(out, t.response_us);
    out.extend_from_slice(b",\"total_us\":");
    num(out, t.total_us);
    out.extend_from_slice(b",\"reason\":");
    json_opt(out, r.reason.map(str::as_bytes));
    out.extend_from_slice(b",\"side\":");
    json_opt(out, r.side.map(str::as_bytes));
    out.extend_from_slice(b",\"user_agent\":");
    json_opt(out, r.user_agent);
    out.extend_from_slice(b",\"referer\":");
    json_opt(out, r.referer);
    if let Some(cache) = r.cache {
        // Only on a service with a cache, so other lines keep their shape.
        out.extend_from_slice(b",\"cache\":\"");
        out.extend_from_slice(cache.as_bytes());
        out.push(b'"');
    }
    if let Some(status) = r.grpc_status {
        // Only on gRPC answers, likewise.
        out.extend_from_slice(b",\"grpc_status\":");
        num(out, u64::from(status));
    }
    if let Some(id) = &r.trace_id {
        // Only with tracing on, like `cache`.
        out.extend_from_slice(b",\"trace_id\":\"");
        out.extend_from_slice(&crate::otel::context::trace_id_hex(id));
        out.push(b'"');
    }
    out.extend_from_slice(b"}\n");
}

fn json_num_opt(out: &mut Vec<u8>, v: Option<u64>) {
    match v {
        Some(v) => num(out, v),
        None => out.extend_from_slice(b"null"),
    }
}

fn json_opt(out: &mut Vec<u8>, v: Option<&[u8]>) {
    match v {
        Some(v) => json_str(out, v),
        None => out.extend_from_slice(b"null"),
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// A JSON string of arbitrary bytes (see the module docs for the escaping).
pub(crate) fn json_str(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'"');
    for chunk in bytes.utf8_chunks() {
        let valid = chunk.valid().as_bytes();
        let mut start = 0;
        for (i, &b) in valid.iter().enumerate() {
            let short: &[u8] = match b {
                b'"' => b"\\\"",
                b'\\' => b"\\\\",
                b'\n' => b"\\n",
                b'\r' => b"\\r",
                b'\t' => b"\\t",
                0..=0x1f | 0x7f => b"",
                _ => continue,
            };
            out.extend_from_slice(&valid[start..i]);
            if short.is_empty() {
                unicode_escape(out, b);
            } else {
                out.extend_from_slice(short);
            }
            start = i + 1;
        }
        out.extend_from_slice(&valid[start..]);
        for &b in chunk.invalid() {
            unicode_escape(out, b);
        }
    }
    out.push(b'"');
}

fn unicode_escape(out: &mut Vec<u8>, b: u8) {
    out.extend_from_slice(&[b'\\', b'u', b'0', b'0', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
}

/// Appends one combined-format line and a newline:
/// `client - - [time] "request" status body-bytes "referer" "user-agent"` then
/// ` service=… server=pool/server total_us=… reason=…`, and ` trace_id=…`
/// with tracing on.
pub(crate) fn combined(out: &mut Vec<u8>, r: &Record, clock: &mut Clock) {
    let (_, clf, _) = clock.at(r.start);
    let _ = write!(out, "{}", r.client.ip());
    out.extend_from_slice(b" - - [");
    out.extend_from_slice(clf);
    out.extend_from_slice(b" +0000] \"");
    if r.method.is_empty() {
        out.push(b'-');
    } else {
        // What the request line carried: an unparseable one may lack its
        // target or a version we know (`-`).
        clf_escaped(out, r.method);
        if !r.target.is_empty() {
            out.push(b' ');
            clf_escaped(out, r.target);
        }
        if r.version != "-" {
            out.push(b' ');
            out.extend_from_slice(r.version.as_bytes());
        }
    }
    out.extend_from_slice(b"\" ");
    num(out, u64::from(r.status));
    // The body's bytes, as Apache's `%b` and NGINX's `$body_bytes_sent`
    // (log analysers sum this field as bandwidth).
    out.push(b' ');
    num(out, r.body_bytes_out);
    out.extend_from_slice(b" \"");
    clf_escaped(out, r.referer.unwrap_or(b"-"));
    out.extend_from_slice(b"\" \"");
    clf_escaped(out, r.user_agent.unwrap_or(b"-"));
    out.extend_from_slice(b"\" service=");
    clf_escaped(out, r.service.as_bytes());
    out.extend_from_slice(b" server=");
    match &r.upstream {
        Some(u) => {
            clf_escaped(out, u.pool.as_bytes());
            out.push(b'/');
            clf_escaped(out, u.server.as_bytes());
        }
        None => out.push(b'-'),
    }
    out.extend_from_slice(b" total_us=");
    num(out, r.timings.total_us);
    out.extend_from_slice(b" reason=");
    match r.reason {
        Some(why) => {
            out.push(b'"');
            clf_escaped(out, why.as_bytes());
            out.push(b'"');
        }
        None => out.push(b'-'),
    }
    if let Some(id) = &r.trace_id {
        out.extend_from_slice(b" trace_id=");
        out.extend_from_slice(&crate::otel::context::trace_id_hex(id));
    }
    out.push(b'\n');
}

/// Bytes for a combined line: printable ASCII as is, except `"` and `\`;
/// those, controls and non-ASCII bytes as `\xHH`.
fn clf_escaped(out: &mut Vec<u8>, bytes: &[u8]) {
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\' {
            continue;
        }
        out.extend_from_slice(&bytes[start..i]);
        out.extend_from_slice(&[
            b'\\',
            b'x',
            HEX[usize::from(b >> 4)].to_ascii_uppercase(),
            HEX[usize::from(b & 15)].to_ascii_uppercase(),
        ]);
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calendar_of_known_days() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(11_016), (2000, 2, 29));
        assert_eq!(civil(11_017), (2000, 3, 1));
        assert_eq!(civil(20_454), (2026, 1, 1));
        let mut c = Clock::new();
        let t = UNIX_EPOCH + std::time::Duration::from_millis(971_186_136_007);
        let (rfc, clf, ms) = c.at(t);
        assert_eq!((&rfc[..], &clf[..], ms), (&b"2000-10-10T13:55:36"[..], &b"10/Oct/2000:13:55:36"[..], 7));
    }

    #[test]
    fn clock_changes_with_the_second_only() {
        let mut c = Clock::new();
        let base = UNIX_EPOCH + std::time::Duration::from_secs(1_767_323_045);
        assert_eq!(&c.at(base).0[..], b"2026-01-02T03:04:05");
        let later = base + std::time::Duration::from_millis(999);
        let (rfc, _, ms) = c.at(later);
        assert_eq!((&rfc[..], ms), (&b"2026-01-02T03:04:05"[..], 999));
        assert_eq!(&c.at(base + std::time::Duration::from_secs(1)).0[..], b"2026-01-02T03:04:06");
        assert_eq!(&c.at(UNIX_EPOCH - std::time::Duration::from_secs(5)).0[..], b"1970-01-01T00:00:00");
    }

    #[test]
    fn json_escaping_of_quotes_controls_and_invalid_utf8() {
        let cases: [(&[u8], &str); 6] = [
            (b"plain /a?b=c", r#""plain /a?b=c""#),
            (b"q\"uo\\te", r#""q\"uo\\te""#),
            (b"a\nb\rc\td\x01\x1f\x7f", r#""a\nb\rc\td\u0001\u001f\u007f""#),
            ("é ✓".as_bytes(), "\"é ✓\""),
            (b"bad\xff\xfe!", r#""bad\u00ff\u00fe!""#),
            (b"cut\xe2\x9c", r#""cut\u00e2\u009c""#),
        ];
        for (input, want) in cases {
            let mut out = Vec::new();
            json_str(&mut out, input);
            assert_eq!(String::from_utf8(out.clone()).expect("utf-8"), want, "{input:?}");
            let back: String = serde_json::from_slice(&out).expect("valid JSON");
            assert!(!back.is_empty());
        }
    }

    #[test]
    fn combined_escaping() {
        let mut out = Vec::new();
        clf_escaped(&mut out, b"Mozilla \"x\" \\ \x01 \xc3\xa9");
        assert_eq!(out, br#"Mozilla \x22x\x22 \x5C \x01 \xC3\xA9"#);
    }
}
