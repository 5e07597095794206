//! Compression speed and ratio of switchyard-deflate beside zlib-rs level 1
//! on one file, in one run: `cargo run --release -p switchyard-deflate
//! --example speed -- FILE [CHUNK_BYTES]`.
//!
//! Each round compresses the whole file as one gzip member, written in
//! pieces of CHUNK_BYTES (default: all at once) with a sync flush after each
//! piece but the last, as the proxy does when a server's bytes arrive in
//! several reads. A third argument, `ours` or `zlib`, runs only one of the
//! two (for `perf stat`).

use std::time::{Duration, Instant};

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        eprintln!("usage: speed FILE [CHUNK_BYTES]");
        std::process::exit(2);
    };
    let data = std::fs::read(&path).unwrap_or_else(|e| {
        eprintln!("{path}: {e}");
        std::process::exit(1)
    });
    let chunk = args.next().and_then(|c| c.parse().ok()).unwrap_or(data.len()).max(1);
    let only = args.next();
    let run = |name: &str| only.as_deref().is_none_or(|o| o == name);
    let mut out = Vec::with_capacity(data.len() * 2);
    let mut gzip = switchyard_deflate::Gzip::new();
    let ours = run("ours").then(|| {
        measure(&data, || {
            out.clear();
            gzip.start(&mut out);
            let mut pieces = data.chunks(chunk).peekable();
            while let Some(piece) = pieces.next() {
                gzip.write(piece, &mut out);
                if pieces.peek().is_some() {
                    gzip.flush(&mut out);
                }
            }
            gzip.finish(&mut out);
            out.len()
        })
    });
    let mut z = flate2::Compress::new(flate2::Compression::new(1), false);
    let zlib = run("zlib").then(|| {
        measure(&data, || {
            out.clear();
            z.reset();
            let mut crc = flate2::Crc::new();
            let mut pieces = data.chunks(chunk).peekable();
            while let Some(piece) = pieces.next() {
                crc.update(piece);
                let flush =
                    if pieces.peek().is_some() { flate2::FlushCompress::Sync } else { flate2::FlushCompress::Finish };
                let mut input = piece;
                loop {
                    out.reserve(64 * 1024);
                    let before = z.total_in();
                    let status = z.compress_vec(input, &mut out, flush).unwrap_or(flate2::Status::StreamEnd);
                    input = &input[(z.total_in() - before) as usize..];
                    if input.is_empty() && (status == flate2::Status::StreamEnd || out.len() < out.capacity()) {
                        break;
                    }
                }
            }
            out.len() + 18
        })
    });
    for (name, result) in [("switchyard-deflate", ours), ("zlib-rs level 1", zlib)] {
        let Some((size, per)) = result else { continue };
        let mbs = data.len() as f64 / per.as_secs_f64() / 1e6;
        println!(
            "{name:20} {:7.1} µs per member  {mbs:7.1} MB/s  ratio {:5.1} %",
            per.as_secs_f64() * 1e6,
            size as f64 * 100.0 / data.len() as f64
        );
    }
}

/// Output size and the best time per round over several batches.
fn measure(data: &[u8], mut round: impl FnMut() -> usize) -> (usize, Duration) {
    // SPEED_ROUNDS=N: one batch of N rounds (for counting instructions).
    let fixed = std::env::var("SPEED_ROUNDS").ok().and_then(|r| r.parse::<usize>().ok());
    let rounds = fixed.unwrap_or((50_000_000 / data.len().max(1)).clamp(5, 100_000));
    let mut best = Duration::MAX;
    let mut size = 0;
    for _ in 0..if fixed.is_some() { 1 } else { 7 } {
        let start = Instant::now();
        for _ in 0..rounds {
            size = round();
        }
        best = best.min(start.elapsed() / rounds as u32);
    }
    (size, best)
}
