//! Pre-generated response bodies and the [`Buf`] that streams them.
//!
//! Two buffers are generated once per process from a fixed seed, so every run (and every
//! origin) serves byte-identical bodies: 64 KiB of random bytes (incompressible,
//! `application/octet-stream`) and 256 KiB of HTML-like text that deflate shrinks to about
//! a quarter (`text/html`). A body of `size` bytes is byte `i % len` of the buffer for each
//! `i < size`, streamed by [`CycledBody`] without ever allocating `size` bytes. The HTML is
//! longer than the largest size of the compression tests (128 KiB) so that no such body
//! repeats itself: a compressor whose window spans the repeat (brotli, zstd; not deflate's
//! 32 KiB) would otherwise find it and report a flattering ratio.

use std::io::IoSlice;
use std::sync::OnceLock;

use bytes::Buf;

/// Length of the random buffer. Bodies longer than this repeat it.
pub const BUFFER_LEN: usize = 64 * 1024;

/// Length of the HTML buffer: twice the largest compression test size.
pub const HTML_LEN: usize = 256 * 1024;

/// Seed shared by both generators; changing it changes every body the origin serves.
const SEED: u64 = 0x5157_4954_4348_5944;

/// Which pre-generated buffer a body is cut from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyKind {
    /// Seeded random bytes: incompressible.
    Random,
    /// HTML-like text, about 75 % compressible with deflate.
    Compressible,
}

impl BodyKind {
    /// The `content-type` this body is served with.
    pub fn content_type(self) -> &'static str {
        match self {
            BodyKind::Random => "application/octet-stream",
            BodyKind::Compressible => "text/html; charset=utf-8",
        }
    }

    /// The buffer ([`BUFFER_LEN`] or [`HTML_LEN`] bytes, generated on first use).
    pub fn buffer(self) -> &'static [u8] {
        static RANDOM: OnceLock<Box<[u8]>> = OnceLock::new();
        static HTML: OnceLock<Box<[u8]>> = OnceLock::new();
        match self {
            BodyKind::Random => RANDOM.get_or_init(random_buffer),
            BodyKind::Compressible => HTML.get_or_init(html_buffer),
        }
    }
}

/// SplitMix64: tiny, seedable, good enough for filler bytes.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

fn random_buffer() -> Box<[u8]> {
    let mut rng = SplitMix64(SEED);
    let mut buf = Vec::with_capacity(BUFFER_LEN);
    while buf.len() < BUFFER_LEN {
        buf.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    buf.truncate(BUFFER_LEN);
    buf.into_boxed_slice()
}

const WORDS: &[&str] = &[
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "for",
    "on",
    "that",
    "with",
    "as",
    "by",
    "at",
    "from",
    "this",
    "are",
    "be",
    "or",
    "an",
    "was",
    "it",
    "not",
    "but",
    "which",
    "have",
    "has",
    "balancer",
    "origin",
    "server",
    "request",
    "response",
    "proxy",
    "header",
    "cache",
    "pool",
    "health",
    "check",
    "listener",
    "rule",
    "route",
    "latency",
    "throughput",
    "connection",
    "stream",
    "upstream",
    "client",
    "socket",
    "buffer",
    "queue",
    "worker",
    "thread",
    "timeout",
    "retry",
    "weight",
    "session",
    "cookie",
    "persistence",
    "table",
    "metric",
    "counter",
    "gauge",
    "histogram",
    "bucket",
    "quantile",
    "sample",
    "window",
];

/// Paragraphs of words from a small vocabulary with the odd link to a random id: deflate
/// (level 6) compresses the result to ≈ 26 % of its size.
fn html_buffer() -> Box<[u8]> {
    use std::fmt::Write as _;
    let mut rng = SplitMix64(SEED);
    let mut html = String::with_capacity(HTML_LEN + 1024);
    html.push_str(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>switchyard origin</title></head>\n<body>\n",
    );
    while html.len() < HTML_LEN {
        let _ = write!(html, "<p class=\"c{}\">", rng.next_u64() % 8);
        let words = 8 + rng.next_u64() % 24;
        for i in 0..words {
            let x = rng.next_u64();
            if i > 0 {
                html.push(' ');
            }
            let word = WORDS[((x >> 8) % WORDS.len() as u64) as usize];
            if x % 100 < 5 {
                let _ = write!(html, "<a href=\"/item/{:08x}\">{word}</a>", (x >> 16) as u32);
            } else {
                html.push_str(word);
            }
        }
        html.push_str("</p>\n");
    }
    let mut bytes = html.into_bytes();
    bytes.truncate(HTML_LEN);
    bytes.into_boxed_slice()
}

/// A body of `remaining` bytes cut from a pre-generated buffer, starting at offset 0.
///
/// Its [`Buf::chunks_vectored`] hands out several passes over the buffer at once, so a large
/// body goes out in few `writev` calls.
pub struct CycledBody {
    buffer: &'static [u8],
    pos: usize,
    remaining: u64,
}

impl CycledBody {
    /// `len` bytes of `kind`'s buffer, repeated as needed.
    pub fn new(kind: BodyKind, len: u64) -> Self {
        CycledBody { buffer: kind.buffer(), pos: 0, remaining: len }
    }

    /// `len` bytes of `kind`'s body starting at byte `offset` of it (a range).
    pub fn starting_at(kind: BodyKind, offset: u64, len: u64) -> Self {
        let buffer = kind.buffer();
        CycledBody { buffer, pos: (offset % buffer.len() as u64) as usize, remaining: len }
    }

    /// Where in the buffer the next byte comes from (the start of [`Buf::chunk`]).
    pub fn position(&self) -> usize {
        self.pos
    }
}

impl Buf for CycledBody {
    fn remaining(&self) -> usize {
        usize::try_from(self.remaining).unwrap_or(usize::MAX)
    }

    fn chunk(&self) -> &[u8] {
        let len = (self.buffer.len() - self.pos).min(self.remaining());
        &self.buffer[self.pos..self.pos + len]
    }

    fn advance(&mut self, cnt: usize) {
        assert!(cnt <= self.remaining(), "advance past end of body");
        self.remaining -= cnt as u64;
        self.pos = (self.pos + cnt) % self.buffer.len();
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        let mut pos = self.pos;
        let mut left = self.remaining();
        let mut n = 0;
        while n < dst.len() && left > 0 {
            let len = (self.buffer.len() - pos).min(left);
            dst[n] = IoSlice::new(&self.buffer[pos..pos + len]);
            n += 1;
            left -= len;
            pos = 0;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_full_length_and_deterministic() {
        assert_eq!(BodyKind::Random.buffer().len(), BUFFER_LEN);
        assert_eq!(BodyKind::Compressible.buffer().len(), HTML_LEN);
        assert_eq!(&*random_buffer(), BodyKind::Random.buffer());
        assert!(BodyKind::Compressible.buffer().is_ascii());
        assert!(BodyKind::Compressible.buffer().starts_with(b"<!doctype html>"));
    }

    #[test]
    fn cycled_body_repeats_the_buffer() {
        let len = (BUFFER_LEN * 2 + 10) as u64;
        let mut body = CycledBody::new(BodyKind::Random, len);
        let mut slices = [IoSlice::new(&[]); 8];
        assert_eq!(body.chunks_vectored(&mut slices), 3);
        assert_eq!(slices[2].len(), 10);
        let mut collected = Vec::new();
        while body.has_remaining() {
            let chunk = body.chunk();
            let take = chunk.len().min(1000);
            collected.extend_from_slice(&chunk[..take]);
            body.advance(take);
        }
        assert_eq!(collected.len() as u64, len);
        let buffer = BodyKind::Random.buffer();
        assert!(collected.iter().enumerate().all(|(i, b)| *b == buffer[i % BUFFER_LEN]));
    }

    #[test]
    fn a_128_kib_html_body_does_not_repeat_itself() {
        let html = BodyKind::Compressible.buffer();
        let body = &html[..128 * 1024];
        // No 64-byte run of the second half appears at the same offset in the first.
        let (a, b) = body.split_at(64 * 1024);
        assert_ne!(a, b);
        const { assert!(HTML_LEN >= 2 * 128 * 1024) };
        // Deflate still shrinks it to about a quarter (the ≈75 % of the F5 test).
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
        std::io::Write::write_all(&mut enc, body).expect("compress");
        let ratio = enc.finish().expect("finish").len() as f64 / body.len() as f64;
        assert!((0.2..0.35).contains(&ratio), "deflate ratio {ratio}");
    }
}
