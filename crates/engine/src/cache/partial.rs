//! Incomplete responses, stored and combined (RFC 9111 §3.3, §3.4).
//!
//! A `206` to a forwarded `Range` request is kept as pieces of one
//! representation when the response could be stored whole, carries one
//! `bytes` range with a known complete length no larger than `max_object`,
//! has a strong validator ([`policy::range::strong_validator`]) and no `Vary`.
//! A later `206` with the same validator and complete length adds its piece;
//! one with another validator or length replaces what was held (the newer
//! response wins, §3.4). Once the pieces cover the whole representation they
//! become one `200` entry ([`Partial::complete`]), which answers full `GET`s
//! and ranges like any stored response.
//!
//! Invariants: the pieces are disjoint and never adjacent (a new piece is
//! merged with every piece it touches, by copying), so what is held never
//! exceeds the complete length; a [`Partial`] is immutable once in the store
//! (combining builds a new one outside the shard lock).

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::time::SystemTime;

use bytes::{Bytes, BytesMut};

use super::{policy, Headers};

/// The response fields a combined response does not take from a piece.
const PIECE_FIELDS: [&str; 2] = ["content-range", "content-length"];

/// A storable `206`, checked: the piece it carries and what identifies its representation.
#[derive(Debug, Clone)]
pub struct Piece {
    /// Strong validator token ([`policy::range::strong_validator`]).
    pub validator: Vec<u8>,
    /// First byte's offset in the representation.
    pub first: u64,
    /// The representation's complete length.
    pub length: u64,
    /// The response's fields, minus `Content-Range` and `Content-Length`.
    pub headers: Headers,
    /// The bytes of the range.
    pub body: Bytes,
    /// When the request was sent (for the age of the combined response).
    pub requested: SystemTime,
}

impl Piece {
    /// A piece from a `206`'s fields and body, when it may be combined:
    /// one `bytes` range whose size is the body's, a complete length of at
    /// most `max_object`, a strong validator, no `Vary`. `None` otherwise.
    pub fn of(headers: Headers, body: Bytes, requested: SystemTime, max_object: u64) -> Option<Piece> {
        let (range, length) = policy::range::content_range(policy::header(&headers, "content-range")?)?;
        let size = range.end() - range.start() + 1;
        if size != body.len() as u64 || length > max_object || policy::header(&headers, "vary").is_some() {
            return None;
        }
        let stored = |n| policy::header(&headers, n);
        let validator = policy::range::strong_validator(
            stored("etag"),
            stored("last-modified"),
            stored("date"),
            SystemTime::now(),
        )?;
        let headers = headers.into_iter().filter(|(n, _)| !PIECE_FIELDS.contains(&n.as_str())).collect();
        Some(Piece { validator, first: *range.start(), length, headers, body, requested })
    }

    fn range(&self) -> RangeInclusive<u64> {
        self.first..=self.first + self.body.len() as u64 - 1
    }
}

/// The pieces of one representation held so far.
#[derive(Debug, Clone)]
pub struct Partial {
    /// Strong validator token every piece carried.
    pub validator: Vec<u8>,
    /// Complete length of the representation.
    pub length: u64,
    /// The newest piece's fields (RFC 9111 §3.4: the combined response uses them).
    pub headers: Headers,
    /// When the newest piece was requested.
    pub requested: SystemTime,
    /// Disjoint, non-adjacent pieces by first offset.
    pieces: BTreeMap<u64, Bytes>,
}

impl Partial {
    /// `held` (when it holds pieces of the same representation) with `piece`
    /// added; otherwise the piece alone (a changed validator or length means
    /// a new representation: the older pieces are dropped).
    pub fn combine(held: Option<&Partial>, piece: Piece) -> Partial {
        let same = held.filter(|h| h.validator == piece.validator && h.length == piece.length);
        let mut pieces = same.map(|h| h.pieces.clone()).unwrap_or_default();
        let range = piece.range();
        // Every held piece that overlaps or touches the new one merges with it.
        let touching: Vec<u64> = pieces
            .iter()
            .filter(|(first, bytes)| {
                let last = **first + bytes.len() as u64 - 1;
                **first <= range.end().saturating_add(1) && last.saturating_add(1) >= *range.start()
            })
            .map(|(first, _)| *first)
            .collect();
        let merged = if touching.is_empty() {
            (piece.first, piece.body)
        } else {
            let start = touching.iter().copied().chain([*range.start()]).min().unwrap_or(*range.start());
            let old: Vec<(u64, Bytes)> = touching.iter().filter_map(|f| pieces.remove(f).map(|b| (*f, b))).collect();
            let end = old.iter().map(|(f, b)| f + b.len() as u64).chain([range.end() + 1]).max().unwrap_or(0);
            let mut out = BytesMut::zeroed(usize::try_from(end - start).unwrap_or(0));
            // Older bytes first, the new piece last: where they overlap, the newest wins.
            for (first, bytes) in old.iter().chain([&(piece.first, piece.body)]) {
                let at = usize::try_from(first - start).unwrap_or(0);
                out[at..at + bytes.len()].copy_from_slice(bytes);
            }
            (start, out.freeze())
        };
        pieces.insert(merged.0, merged.1);
        Partial {
            validator: piece.validator,
            length: piece.length,
            headers: piece.headers,
            requested: piece.requested,
            pieces,
        }
    }

    /// The whole representation, once the pieces cover it.
    pub fn complete(&self) -> Option<Bytes> {
        match self.pieces.first_key_value() {
            Some((0, bytes)) if bytes.len() as u64 == self.length => Some(bytes.clone()),
            _ => None,
        }
    }

    /// The pieces held: (offset in the representation, bytes), by offset.
    pub fn pieces(&self) -> impl Iterator<Item = (u64, &Bytes)> {
        self.pieces.iter().map(|(at, bytes)| (*at, bytes))
    }

    /// Body bytes held.
    pub fn held(&self) -> u64 {
        self.pieces.values().map(|b| b.len() as u64).sum()
    }

    /// Bytes charged to the store: fields and pieces.
    pub fn bytes(&self) -> u64 {
        let head: usize = self.headers.iter().map(|(n, v)| n.len() + v.len() + 4).sum();
        head as u64 + self.held() + self.validator.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(tag: &str, range: &str, body: &[u8]) -> Piece {
        let headers = vec![
            ("content-range".to_string(), format!("bytes {range}").into_bytes()),
            ("etag".to_string(), tag.as_bytes().to_vec()),
            ("content-length".to_string(), body.len().to_string().into_bytes()),
        ];
        Piece::of(headers, Bytes::copy_from_slice(body), SystemTime::now(), 1024).expect("a storable piece")
    }

    #[test]
    fn pieces_combine_into_the_whole_representation() {
        let whole = b"0123456789";
        let p = Partial::combine(None, piece("\"a\"", "6-9/10", &whole[6..]));
        assert_eq!((p.held(), p.complete()), (4, None));
        assert!(p.headers.iter().all(|(n, _)| n == "etag"), "content-range and content-length are not kept");
        let p = Partial::combine(Some(&p), piece("\"a\"", "0-2/10", &whole[..3]));
        assert_eq!((p.held(), p.complete()), (7, None));
        // Overlapping both held pieces: one piece remains, the whole.
        let p = Partial::combine(Some(&p), piece("\"a\"", "2-7/10", &whole[2..8]));
        assert_eq!(p.complete().as_deref(), Some(&whole[..]));
        assert_eq!(p.held(), 10);
    }

    #[test]
    fn adjacent_pieces_merge_and_another_validator_replaces() {
        let p = Partial::combine(None, piece("\"a\"", "0-4/10", b"01234"));
        let p = Partial::combine(Some(&p), piece("\"a\"", "5-9/10", b"56789"));
        assert_eq!(p.complete().as_deref(), Some(&b"0123456789"[..]));
        let p = Partial::combine(None, piece("\"a\"", "0-4/10", b"01234"));
        let p = Partial::combine(Some(&p), piece("\"b\"", "5-9/10", b"56789"));
        assert_eq!((p.held(), p.complete()), (5, None), "a new representation starts over");
        let p = Partial::combine(Some(&p), piece("\"b\"", "0-4/11", b"01234"));
        assert_eq!(p.length, 11, "another length starts over too");
        assert_eq!(p.held(), 5);
    }

    #[test]
    fn only_some_partial_responses_are_pieces() {
        let now = SystemTime::now();
        let with = |fields: &[(&str, &str)], body: &[u8]| {
            let headers = fields.iter().map(|(n, v)| (n.to_string(), v.as_bytes().to_vec())).collect();
            Piece::of(headers, Bytes::copy_from_slice(body), now, 100).is_some()
        };
        assert!(with(&[("content-range", "bytes 0-1/10"), ("etag", "\"x\"")], b"ab"));
        assert!(!with(&[("content-range", "bytes 0-1/10"), ("etag", "W/\"x\"")], b"ab"), "weak validator");
        assert!(!with(&[("content-range", "bytes 0-1/10")], b"ab"), "no validator");
        assert!(!with(&[("content-range", "bytes 0-2/10"), ("etag", "\"x\"")], b"ab"), "body of another size");
        assert!(!with(&[("content-range", "bytes 0-1/101"), ("etag", "\"x\"")], b"ab"), "larger than max_object");
        assert!(!with(&[("content-range", "bytes 0-1/*"), ("etag", "\"x\"")], b"ab"), "unknown length");
        assert!(!with(&[("content-range", "bytes 0-1/10"), ("etag", "\"x\""), ("vary", "accept")], b"ab"));
        assert!(!with(&[("content-type", "multipart/byteranges; boundary=x"), ("etag", "\"x\"")], b"ab"));
    }
}
