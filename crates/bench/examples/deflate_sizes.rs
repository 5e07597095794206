//! CPU per response and ratio of switchyard-deflate's gzip on the bench's
//! compression corpus, at the sizes the bench's compression test serves:
//! `cargo run --release -p switchyard-bench --example deflate_sizes [-- SIZE_KB]`.
//!
//! The corpus is the bench origin's `compressible=1` HTML
//! ([`BodyKind::Compressible`], the very buffer the origin serves): a response
//! of N bytes is its first N bytes, compressed as one gzip member (start, one
//! write, finish) by one reused encoder, as the proxy does for a response that
//! arrives in one read. Every output is decoded by flate2 (zlib-rs) and
//! compared with the input before anything is timed.
//!
//! Timing is the best of 7 batches of about 50 ms. `SPEED_ROUNDS=N` runs
//! exactly N rounds of the one SIZE_KB given instead, for counting
//! instructions (`perf stat -e instructions`, or cachegrind where the
//! machine has no counters: the difference between two round counts,
//! divided by their difference, is the figure per response).

use std::io::Read;
use std::time::{Duration, Instant};

use switchyard_bench::origin::BodyKind;

/// Response sizes of the bench's compression test, plus 8 KiB.
const SIZES_KB: [usize; 6] = [1, 5, 8, 16, 32, 128];

fn main() {
    let mut args = std::env::args().skip(1);
    let only: Option<usize> = args.next().and_then(|s| s.parse().ok());
    let html = BodyKind::Compressible.buffer();
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
