//! The machine's physical limits, measured in the same run on the load core: RSA-2048 and
//! ECDSA P-256 signatures per second and AES-128-GCM seal bytes per second (aws-lc-rs,
//! the library under rustls), gzip level 1, brotli level 4 and zstd level 3 input bytes
//! per second (switchyard-deflate, the encoder switchyard uses for gzip level 1; the
//! `brotli` crate; libzstd: the levels of the compression tests) and loopback TCP copy bandwidth (one stream). Cells bounded by one of them report their
//! result as a fraction of it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM};
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::rsa::KeySize;
use aws_lc_rs::signature::{EcdsaKeyPair, KeyPair as _, RsaKeyPair, ECDSA_P256_SHA256_ASN1_SIGNING, RSA_PKCS1_SHA256};

use crate::results::Limits;

/// Repeats `f` for about `time`; returns operations per second (`f` returns units done).
fn rate(time: Duration, mut f: impl FnMut() -> u64) -> f64 {
    let start = Instant::now();
    let mut units = 0u64;
    while start.elapsed() < time {
        units += f();
    }
    units as f64 / start.elapsed().as_secs_f64()
}

/// RSA-2048 PKCS#1 v1.5 SHA-256 signatures per second.
pub fn rsa2048(time: Duration) -> anyhow::Result<f64> {
    let key = RsaKeyPair::generate(KeySize::Rsa2048).map_err(|_| anyhow::anyhow!("RSA key generation"))?;
    let rng = SystemRandom::new();
    let mut sig = vec![0u8; key.public_modulus_len()];
    Ok(rate(time, || u64::from(key.sign(&RSA_PKCS1_SHA256, &rng, b"switchyard bench", &mut sig).is_ok())))
}

/// ECDSA P-256 SHA-256 signatures per second.
pub fn ecdsa_p256(time: Duration) -> anyhow::Result<f64> {
    let key = EcdsaKeyPair::generate(&ECDSA_P256_SHA256_ASN1_SIGNING).map_err(|_| anyhow::anyhow!("ECDSA key"))?;
    let _ = key.public_key();
    let rng = SystemRandom::new();
    Ok(rate(time, || u64::from(key.sign(&rng, b"switchyard bench").is_ok())))
}

/// AES-128-GCM seal throughput on 16 KiB records, bytes per second.
pub fn aes128gcm(time: Duration) -> anyhow::Result<f64> {
    let key = LessSafeKey::new(UnboundKey::new(&AES_128_GCM, &[7u8; 16]).map_err(|_| anyhow::anyhow!("AES key"))?);
    let mut record = vec![0x5au8; 16 * 1024];
    let mut n = 0u64;
    Ok(rate(time, || {
        n += 1;
        let mut nonce = [0u8; 12];
        nonce[4..].copy_from_slice(&n.to_be_bytes());
        match key.seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::empty(), &mut record) {
            Ok(_) => record.len() as u64,
            Err(_) => 0,
        }
    }))
}

/// gzip level 1 throughput over `input` (compressible HTML), input bytes per second, with
/// switchyard's own encoder (what its gzip level 1 uses).
pub fn gzip(time: Duration, input: &[u8]) -> anyhow::Result<f64> {
    anyhow::ensure!(!input.is_empty(), "no input to compress");
    let mut gzip = switchyard_deflate::Gzip::new();
    let mut out = Vec::with_capacity(input.len());
    Ok(rate(time, || {
        out.clear();
        gzip.start(&mut out);
        gzip.write(input, &mut out);
        gzip.finish(&mut out);
        input.len() as u64
    }))
}

/// brotli level 4 (window 2^22) throughput over `input`, input bytes per second.
pub fn brotli(time: Duration, input: &[u8]) -> anyhow::Result<f64> {
    anyhow::ensure!(!input.is_empty(), "no input to compress");
    Ok(rate(time, || {
        let mut enc = brotli::CompressorWriter::new(Vec::with_capacity(input.len()), 4096, 4, 22);
        if enc.write_all(input).is_err() || enc.flush().is_err() {
            return 0;
        }
        drop(enc.into_inner());
        input.len() as u64
    }))
}

/// zstd level 3 throughput over `input`, input bytes per second.
pub fn zstd(time: Duration, input: &[u8]) -> anyhow::Result<f64> {
    anyhow::ensure!(!input.is_empty(), "no input to compress");
    let mut cx = zstd::bulk::Compressor::new(3)?;
    Ok(rate(time, || match cx.compress(input) {
        Ok(_) => input.len() as u64,
        Err(_) => 0,
    }))
}

/// HTML-like text about 75 % compressible, for when no origin body is at hand.
pub fn synthetic_html(len: usize) -> Vec<u8> {
    let words = ["<div class=\"item\">", "switchyard", "balancer", "</div>\n", "<p>", "request", "pool", "</p>"];
    let mut out = Vec::with_capacity(len + 64);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(words[(x % words.len() as u64) as usize].as_bytes());
        out.extend_from_slice(format!("{:x} ", x & 0xfff).as_bytes());
    }
    out.truncate(len);
    out
}

/// Loopback TCP copy bandwidth of one stream, bytes per second.
pub fn loopback(time: Duration) -> anyhow::Result<f64> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let writer = std::thread::spawn(move || -> std::io::Result<()> {
        let mut s = TcpStream::connect(addr)?;
        let buf = vec![0u8; 64 * 1024];
        let end = Instant::now() + time + Duration::from_millis(100);
        while Instant::now() < end {
            s.write_all(&buf)?;
        }
        Ok(())
    });
    let (mut conn, _) = listener.accept()?;
    let mut buf = vec![0u8; 256 * 1024];
    let start = Instant::now();
    let mut bytes = 0u64;
    while start.elapsed() < time {
        match conn.read(&mut buf)? {
            0 => break,
            n => bytes += n as u64,
        }
    }
    let secs = start.elapsed().as_secs_f64();
    drop(conn);
    let _ = writer.join();
    Ok(bytes as f64 / secs)
}

/// Measures every limit for `time` each; `html` is the origin's compressible body.
/// A limit that cannot be measured stays 0 and is named in the returned warnings.
pub fn measure(time: Duration, html: &[u8]) -> (Limits, Vec<String>) {
    let mut warn = Vec::new();
    let mut take = |name: &str, r: anyhow::Result<f64>| match r {
        Ok(v) => v,
        Err(e) => {
            warn.push(format!("limit {name} not measured: {e:#}"));
            0.0
        }
    };
    let limits = Limits {
        rsa2048_sign_per_s: take("rsa2048", rsa2048(time)),
        ecdsa_p256_sign_per_s: take("ecdsa", ecdsa_p256(time)),
        aes128gcm_bytes_per_s: take("aes-gcm", aes128gcm(time)),
        gzip_bytes_per_s: take("gzip", gzip(time, html)),
        brotli_bytes_per_s: take("brotli", brotli(time, html)),
        zstd_bytes_per_s: take("zstd", zstd(time, html)),
        loopback_bytes_per_s: take("loopback", loopback(time)),
    };
    (limits, warn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_limit_measures_something() {
        let html = synthetic_html(64 * 1024);
        let (l, warn) = measure(Duration::from_millis(30), &html);
        assert!(warn.is_empty(), "{warn:?}");
        assert!(l.rsa2048_sign_per_s > 0.0 && l.ecdsa_p256_sign_per_s > l.rsa2048_sign_per_s);
        assert!(l.aes128gcm_bytes_per_s > 0.0 && l.gzip_bytes_per_s > 0.0 && l.loopback_bytes_per_s > 0.0);
        assert!(l.brotli_bytes_per_s > 0.0 && l.zstd_bytes_per_s > 0.0);
    }

    #[test]
    fn synthetic_html_compresses_about_like_the_origin_body() {
        let html = synthetic_html(64 * 1024);
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(&html).expect("compress");
        let ratio = enc.finish().expect("finish").len() as f64 / html.len() as f64;
        assert!(ratio < 0.6, "ratio {ratio}");
    }
}
