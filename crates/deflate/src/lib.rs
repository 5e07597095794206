//! switchyard's deflate (RFC 1951) and gzip (RFC 1952) encoder.
//!
//! A proxy compresses every response once, as it streams through, so the
//! encoder's cost per byte is what counts: [`Deflater`] finds matches in a
//! single greedy pass over a 16 Ki-entry hash table of 4-byte sequences
//! (no chains) and codes them as it scans. Text starts with a block in
//! deflate's fixed code (no code to build: the cheapest start for a small
//! response), and each later block gets a Huffman code built from the
//! previous block's counts, which recovers most of the ratio the simple
//! match finder gives up; other data starts with a collected block coded
//! with its own code, the fixed code or stored bytes, whichever is shortest.
//! State is reusable: starting a stream clears nothing.
//!
//! `cargo run --release -p switchyard-bench --example deflate_sizes` measures CPU
//! per response and ratio on the benchmark's HTML at the sizes the bench's
//! compression test serves.
//!
//! ```
//! let mut gzip = switchyard_deflate::Gzip::new();
//! let mut out = Vec::new();
//! gzip.start(&mut out);
//! gzip.write(b"<p>hello hello hello</p>", &mut out);
//! gzip.finish(&mut out);
//! assert_eq!(&out[..2], &[0x1f, 0x8b]);
//! ```

mod bits;
mod encoder;
mod huffman;
mod tables;
#[cfg(test)]
mod tests;

pub use encoder::Deflater;

/// A gzip member around a [`Deflater`]: header, deflate stream, CRC-32 and
/// length. Reusable: [`Gzip::start`] begins the next member.
pub struct Gzip {
    deflate: Deflater,
    crc: crc32fast::Hasher,
    size: u32,
}

impl Default for Gzip {
    fn default() -> Self {
        Gzip::new()
    }
}

impl Gzip {
    /// A fresh encoder.
    pub fn new() -> Gzip {
        Gzip { deflate: Deflater::new(), crc: crc32fast::Hasher::new(), size: 0 }
    }

    /// Begins a member: resets the state and appends the 10-byte header (no
    /// name, no time, unknown OS).
    pub fn start(&mut self, out: &mut Vec<u8>) {
        self.deflate.reset();
        self.crc = crc32fast::Hasher::new();
        self.size = 0;
        out.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255]);
    }

    /// Compresses `data`; see [`Deflater::write`].
    pub fn write(&mut self, data: &[u8], out: &mut Vec<u8>) {
        self.crc.update(data);
        self.size = self.size.wrapping_add(data.len() as u32);
        self.deflate.write(data, out);
    }

    /// Makes everything written so far decodable; see [`Deflater::flush`].
    pub fn flush(&mut self, out: &mut Vec<u8>) {
        self.deflate.flush(out);
    }

    /// Ends the member: the last block, the CRC-32 and the length modulo 2³².
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        self.deflate.finish(out);
        out.extend_from_slice(&self.crc.clone().finalize().to_le_bytes());
        out.extend_from_slice(&self.size.to_le_bytes());
    }
}
