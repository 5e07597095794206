//! Range answers from a stored complete response (RFC 9110 §14, §15.3.7,
//! §15.5.17): the head and body of a 206 for one range, a 206
//! `multipart/byteranges` for several (§14.6), or a 416. Which ranges to
//! send is the policy's decision ([`evaluate`], [`if_range_holds`]).
//!
//! One range is a slice of the stored body (no copy); several are copied
//! into one body, bounded by the stored body's length plus a part head per
//! range, since overlapping ranges are coalesced and at most
//! [`super::policy::range::MAX_RANGES`] are answered.

use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use bytes::Bytes;

pub use super::policy::range::{evaluate, if_range_holds, Ranges};
use super::{policy, write_head, Entry, Head};
use switchyard_http::head_writer::HeadWriter;

/// Writes the head of the answer through the client's head writer `out`
/// and returns its status and body.
pub fn answer<W: HeadWriter>(
    out: &mut W,
    entry: &Entry,
    age: Duration,
    ranges: Ranges,
    close: bool,
    keep_alive_10: bool,
) -> (u16, Bytes) {
    let len = entry.body.len() as u64;
    match ranges {
        Ranges::Parts(parts) if parts.len() == 1 => {
            let r = &parts[0];
            let content_range = content_range(r, len);
            let extra = [("content-range", content_range.as_bytes())];
            let head =
                Head { status: 206, length: Some(r.end() - r.start() + 1), drop_content_type: false, extra: &extra };
            write_head(out, entry, age, &head, close, keep_alive_10);
            (206, slice(&entry.body, r))
        }
        Ranges::Parts(parts) => {
            let boundary = boundary();
            let body = multipart(entry, &parts, &boundary);
            let content_type = format!("multipart/byteranges; boundary={boundary}");
            let extra = [("content-type", content_type.as_bytes())];
            let head = Head { status: 206, length: Some(body.len() as u64), drop_content_type: true, extra: &extra };
            write_head(out, entry, age, &head, close, keep_alive_10);
            (206, body)
        }
        Ranges::Whole => {
            super::hit_head(out, entry, age, entry.status, close, keep_alive_10);
            (entry.status, entry.body.clone())
        }
        Ranges::Unsatisfiable => {
            // §15.5.17: a 416 says the representation's length.
            let content_range = format!("bytes */{len}");
            let extra = [("content-range", content_range.as_bytes())];
            let head = Head { status: 416, length: Some(0), drop_content_type: true, extra: &extra };
            write_head(out, entry, age, &head, close, keep_alive_10);
            (416, Bytes::new())
        }
    }
}

fn content_range(r: &RangeInclusive<u64>, len: u64) -> String {
    format!("bytes {}-{}/{len}", r.start(), r.end())
}

fn slice(body: &Bytes, r: &RangeInclusive<u64>) -> Bytes {
    // The policy only returns ranges within the body.
    let (start, end) = (usize::try_from(*r.start()).unwrap_or(0), usize::try_from(*r.end()).unwrap_or(0));
    body.slice(start.min(body.len())..(end + 1).min(body.len()))
}

/// A `multipart/byteranges` body (RFC 9110 §14.6): each part with the stored
/// `Content-Type` and its `Content-Range`.
fn multipart(entry: &Entry, parts: &[RangeInclusive<u64>], boundary: &str) -> Bytes {
    let len = entry.body.len() as u64;
    let content_type = policy::header(&entry.headers, "content-type");
    let total: u64 = parts.iter().map(|r| r.end() - r.start() + 1).sum();
    let mut body = Vec::with_capacity(usize::try_from(total).unwrap_or(0) + parts.len() * 128);
    for r in parts {
        body.extend_from_slice(b"--");
        body.extend_from_slice(boundary.as_bytes());
        body.extend_from_slice(b"\r\n");
        if let Some(ct) = content_type {
            body.extend_from_slice(b"content-type: ");
            body.extend_from_slice(ct);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(b"content-range: ");
        body.extend_from_slice(content_range(r, len).as_bytes());
        body.extend_from_slice(b"\r\n\r\n");
        body.extend_from_slice(&slice(&entry.body, r));
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(b"--");
    body.extend_from_slice(boundary.as_bytes());
    body.extend_from_slice(b"--\r\n");
    Bytes::from(body)
}

/// A boundary that differs per answer (a stored body could contain any fixed one).
fn boundary() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    format!("switchyard-{:016x}", t.rotate_left(17) ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}
