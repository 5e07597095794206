//! Round trips through a real decoder (zlib-rs via flate2).

use std::io::Read;

use proptest::prelude::*;

use super::{Deflater, Gzip};

fn inflate(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::DeflateDecoder::new(data).read_to_end(&mut out).expect("valid deflate stream");
    out
}

fn gunzip(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(data).read_to_end(&mut out).expect("valid gzip member");
    out
}

fn deflate_all(d: &mut Deflater, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    d.reset();
    d.write(data, &mut out);
    d.finish(&mut out);
    out
}

/// HTML-ish text with repeats at every distance class.
fn text(len: usize, seed: u64) -> Vec<u8> {
    let words = ["<div class=\"row\">", "</div>", "balancer ", "origin ", "the ", "request ", "\n", "<p>", "cache "];
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 32);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if x.is_multiple_of(7) {
            out.extend_from_slice(format!("{}", x % 100_000).as_bytes());
        } else {
            out.extend_from_slice(words[(x % words.len() as u64) as usize].as_bytes());
        }
    }
    out.truncate(len);
    out
}

fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn empty_input_is_a_valid_stream() {
    let mut d = Deflater::new();
    let out = deflate_all(&mut d, b"");
    assert_eq!(inflate(&out), b"");
    assert!(out.len() <= 2, "{out:?}");
}

#[test]
fn shapes_of_input_round_trip() {
    let mut d = Deflater::new();
    let cases: Vec<Vec<u8>> = vec![
        b"a".to_vec(),
        b"abc".to_vec(),
        b"abcd".to_vec(),
        b"abcdabcdabcd".to_vec(),
        vec![0; 1_000_000],
        text(1000, 1),
        text(128 * 1024, 2),
        text(3 * 1024 * 1024, 3),
        noise(100_000, 4),
        [text(50_000, 5), noise(70_000, 6), text(50_000, 7)].concat(),
        (0..=255u8).cycle().take(300_000).collect(),
    ];
    for data in &cases {
        let out = deflate_all(&mut d, data);
        assert_eq!(inflate(&out), *data, "length {}", data.len());
    }
}

#[test]
fn text_compresses_and_noise_stays_near_its_size() {
    let mut d = Deflater::new();
    let t = text(128 * 1024, 9);
    let out = deflate_all(&mut d, &t);
    assert!(out.len() < t.len() / 3, "{} of {}", out.len(), t.len());
    let n = noise(128 * 1024, 9);
    let out = deflate_all(&mut d, &n);
    assert!(out.len() <= n.len() + n.len() / 1000 + 16, "{} of {}", out.len(), n.len());
}

#[test]
fn a_reused_encoder_never_refers_to_a_previous_stream() {
    let mut d = Deflater::new();
    let first = text(40_000, 11);
    deflate_all(&mut d, &first);
    // The same bytes again: a stale table entry would produce a distance into
    // the previous stream, which the decoder would reject or mis-decode.
    let out = deflate_all(&mut d, &first);
    assert_eq!(inflate(&out), first);
    let fresh = deflate_all(&mut Deflater::new(), &first);
    assert_eq!(out, fresh, "a reused encoder produces what a fresh one does");
}

#[test]
fn positions_are_renumbered_before_they_overflow() {
    let mut d = Deflater::new();
    let data = text(200_000, 12);
    // ~1.07 GB per pass of 5,400 streams would take long; jump instead.
    for _ in 0..3 {
        d.reset();
        let mut out = Vec::new();
        d.write(&data, &mut out);
        d.finish(&mut out);
        assert_eq!(inflate(&out), data);
    }
    d.jump_positions_for_test(0xC000_0000 - 100_000);
    for _ in 0..3 {
        let out = deflate_all(&mut d, &data);
        assert_eq!(inflate(&out), data);
    }
}

#[test]
fn sync_flush_makes_everything_so_far_decodable() {
    let mut d = Deflater::new();
    d.reset();
    let data = text(20_000, 13);
    let mut out = Vec::new();
    d.write(&data[..10_000], &mut out);
    d.flush(&mut out);
    assert_eq!(&out[out.len() - 4..], &[0, 0, 0xff, 0xff]);
    let mut partial = Vec::new();
    let mut dec = flate2::Decompress::new(false);
    partial.reserve(20_000);
    dec.decompress_vec(&out, &mut partial, flate2::FlushDecompress::Sync).expect("decodes");
    assert_eq!(partial, &data[..10_000]);
    d.write(&data[10_000..], &mut out);
    d.finish(&mut out);
    assert_eq!(inflate(&out), data);
}

#[test]
fn gzip_members_carry_crc_and_length() {
    let mut g = Gzip::new();
    for data in [text(70_000, 14), Vec::new(), noise(5_000, 15)] {
        let mut out = Vec::new();
        g.start(&mut out);
        g.write(&data, &mut out);
        g.finish(&mut out);
        assert_eq!(gunzip(&out), data);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_split_and_flush_pattern_round_trips(
        seed in any::<u64>(),
        len in 0usize..200_000,
        cuts in proptest::collection::vec((0usize..200_000, any::<bool>()), 0..12),
        noisy in any::<bool>(),
    ) {
        let data = if noisy { [text(len / 2, seed), noise(len / 2, seed)].concat() } else { text(len, seed) };
        let mut cuts: Vec<(usize, bool)> = cuts.into_iter().map(|(c, f)| (c % (data.len() + 1), f)).collect();
        cuts.sort();
        let mut d = Deflater::new();
        d.reset();
        let mut out = Vec::new();
        let mut at = 0;
        for (cut, flush) in cuts {
            d.write(&data[at..cut], &mut out);
            at = cut;
            if flush {
                d.flush(&mut out);
            }
        }
        d.write(&data[at..], &mut out);
        d.finish(&mut out);
        prop_assert_eq!(inflate(&out), data);
    }

    #[test]
    fn arbitrary_bytes_round_trip(data in proptest::collection::vec(any::<u8>(), 0..5000), repeat in 1usize..20) {
        let data: Vec<u8> = data.iter().copied().cycle().take(data.len() * repeat).collect();
        let mut d = Deflater::new();
        prop_assert_eq!(inflate(&deflate_all(&mut d, &data)), data);
    }
}

#[test]
fn noise_with_repeats_round_trips_in_every_block_kind() {
    // Short inputs pick the fixed code, longer ones a dynamic one.
    for n in [100usize, 300, 1000, 5000] {
        let data: Vec<u8> = noise(n, 77).into_iter().cycle().take(n * 13).collect();
        assert_eq!(inflate(&deflate_all(&mut Deflater::new(), &data)), data, "period {n}");
    }
}

/// The block type of a raw deflate stream's first block (RFC 1951 3.2.3).
fn first_block_type(stream: &[u8]) -> u8 {
    (stream[0] >> 1) & 3
}

#[test]
fn text_starts_with_a_fixed_code_block_and_binary_does_not() {
    let mut d = Deflater::new();
    for len in [5_000, 100_000] {
        let t = text(len, 21);
        let out = deflate_all(&mut d, &t);
        assert_eq!(first_block_type(&out), 1, "text of {len} bytes");
        assert_eq!(inflate(&out), t);
    }
    let n = noise(20_000, 22);
    let out = deflate_all(&mut d, &n);
    assert_ne!(first_block_type(&out), 1, "noise");
    assert_eq!(inflate(&out), n);
}

#[test]
fn fixed_then_adopted_codes_round_trip_at_every_block_edge() {
    // The fixed-code first block ends after 8 KiB; the next block's code is
    // made from its counts only when that block opens. Cut the input and
    // flush around those edges, and end streams right on them.
    let data = text(3 * 64 * 1024, 23);
    let mut d = Deflater::new();
    for edge in [8 * 1024, 8 * 1024 + 64 * 1024] {
        for delta in [-5i64, -1, 0, 1, 3, 4, 5, 300] {
            let cut = (edge as i64 + delta) as usize;
            for flush in [false, true] {
                d.reset();
                let mut out = Vec::new();
                d.write(&data[..cut], &mut out);
                if flush {
                    d.flush(&mut out);
                }
                d.write(&data[cut..cut + 70_000], &mut out);
                d.finish(&mut out);
                assert_eq!(inflate(&out), &data[..cut + 70_000], "cut {cut} flush {flush}");
                let whole = deflate_all(&mut d, &data[..cut]);
                assert_eq!(inflate(&whole), &data[..cut], "ending at {cut}");
            }
        }
    }
}

#[test]
fn bytes_of_every_value_in_a_fixed_block_round_trip() {
    // Mostly text (so the stream starts with the fixed code), with every
    // byte value twice: 8- and 9-bit literals, then a match over them.
    let mut data = text(7000, 24);
    data.extend((0..=255u8).chain(0..=255u8));
    data.extend(text(2000, 25));
    let mut d = Deflater::new();
    let out = deflate_all(&mut d, &data);
    assert_eq!(first_block_type(&out), 1);
    assert_eq!(inflate(&out), data);
}
