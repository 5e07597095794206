//! CPU per response and ratio of switchyard-deflate's gzip on the bench's
//! compression corpus, at the sizes the bench's compression test serves:
//! `cargo run --release -p switchyard-deflate --example sizes [-- SIZE_KB]`.
//!
//! The corpus is the bench origin's `compressible=1` HTML (the generator of
//! `crates/bench/src/origin/body.rs`, repeated here so this crate needs no
//! bench dependency; [`check_corpus`] pins its fingerprint, so a change to
//! one copy must be made to the other): a response of N bytes is its first
//! N bytes, compressed as one gzip member (start, one write, finish) by one
//! reused encoder, as the proxy does for a response that arrives in one
//! read. Every output is decoded by flate2 (zlib-rs) and compared with the
//! input before anything is timed.
//!
//! Timing is the best of 7 batches of about 50 ms. `SPEED_ROUNDS=N` runs
//! exactly N rounds of the one SIZE_KB given instead, for counting
//! instructions (`perf stat -e instructions`, or cachegrind where the
//! machine has no counters: the difference between two round counts,
//! divided by their difference, is the figure per response).

use std::io::Read;
use std::time::{Duration, Instant};

/// Response sizes of the bench's compression test, plus 8 KiB.
const SIZES_KB: [usize; 6] = [1, 5, 8, 16, 32, 128];

fn main() {
    let mut args = std::env::args().skip(1);
    let only: Option<usize> = args.next().and_then(|s| s.parse().ok());
    let html = html_buffer();
    check_corpus(&html);
    let mut gzip = switchyard_deflate::Gzip::new();
    let mut out = Vec::with_capacity(256 * 1024);
    println!("switchyard-deflate (gzip level 1), bench HTML corpus");
    println!("{:>7} {:>10} {:>9} {:>8}", "size", "ns/resp", "ns/KiB", "ratio");
    for kb in SIZES_KB.into_iter().filter(|&kb| only.is_none_or(|o| o == kb)) {
        let input = &html[..kb * 1024];
        let size = compress(&mut gzip, input, &mut out);
        let mut back = Vec::new();
        flate2::read::GzDecoder::new(&out[..]).read_to_end(&mut back).expect("valid gzip member");
        assert!(back == input, "round trip failed at {kb} KiB");
        let per = measure(input.len(), &mut || compress(&mut gzip, input, &mut out));
        let ns = per.as_secs_f64() * 1e9;
        println!("{:>5}KB {:>10.0} {:>9.1} {:>7.1}%", kb, ns, ns / kb as f64, size as f64 * 100.0 / input.len() as f64);
    }
}

/// One response: a gzip member of `input` in `out`; returns its size.
fn compress(gzip: &mut switchyard_deflate::Gzip, input: &[u8], out: &mut Vec<u8>) -> usize {
    out.clear();
    gzip.start(out);
    gzip.write(input, out);
    gzip.finish(out);
    out.len()
}

/// Best time per round over several batches.
fn measure(len: usize, round: &mut impl FnMut() -> usize) -> Duration {
    let fixed = std::env::var("SPEED_ROUNDS").ok().and_then(|r| r.parse::<usize>().ok());
    let rounds = fixed.unwrap_or((50_000_000 / len.max(1)).clamp(5, 100_000));
    let mut best = Duration::MAX;
    for _ in 0..if fixed.is_some() { 1 } else { 7 } {
        let start = Instant::now();
        for _ in 0..rounds {
            std::hint::black_box(round());
        }
        best = best.min(start.elapsed() / rounds as u32);
    }
    best
}

/// Fails loudly if the generator drifted from the bench origin's.
fn check_corpus(html: &[u8]) {
    assert_eq!(html.len(), HTML_LEN);
    assert!(html.starts_with(b"<!doctype html>\n<html><head><meta charset=\"utf-8\">"));
    let sum = html.iter().fold(0u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    assert_eq!(sum, CORPUS_FNV, "corpus changed: FNV {sum:#x}");
}

/// FNV-1a-style fingerprint of the bench origin's 256 KiB HTML buffer.
const CORPUS_FNV: u64 = 0xabac_186c_586b_4e26;

const HTML_LEN: usize = 256 * 1024;
const SEED: u64 = 0x5157_4954_4348_5944;

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

fn html_buffer() -> Vec<u8> {
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
    bytes
}
