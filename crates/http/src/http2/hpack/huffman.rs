//! HPACK's Huffman coding (RFC 7541 5.2, Appendix B).
//!
//! Decoding walks the code's tree four bits at a time through a table built
//! once from [`CODES`]: each of the tree's 256 inner nodes has 16 entries
//! saying where the nibble leads and which symbol (at most one: the shortest
//! code is five bits) it completes. Padding is checked as the RFC asks: at
//! most seven bits, all ones (a prefix of EOS); EOS itself is an error.

use std::sync::OnceLock;

use super::huffman_table::CODES;
use super::Error;

/// The EOS symbol.
const EOS: u16 = 256;

/// One step of the nibble decoder.
#[derive(Clone, Copy, Default)]
struct Step {
    /// The inner node reached.
    next: u8,
    /// Bit 0: a symbol was completed; bit 1: EOS was met (an error); bit 2:
    /// the state reached may end the string (root, or ≤ 7 one-bits into a code).
    flags: u8,
    /// The symbol completed.
    symbol: u8,
}

impl Step {
    /// `next | flags << 8 | symbol << 16`.
    fn packed(self) -> u32 {
        u32::from(self.next) | u32::from(self.flags) << 8 | u32::from(self.symbol) << 16
    }
}

const EMIT: u8 = 1;
const FAIL: u8 = 2;
const ACCEPT: u8 = 4;

/// The code's tree: inner nodes with two children each; a child is an inner
/// node index or a leaf (symbol | 0x8000).
struct Tree {
    nodes: Vec<[u16; 2]>,
    /// Per inner node: depth from the root and whether its path is all ones.
    depth: Vec<(u8, bool)>,
}

const LEAF: u16 = 0x8000;
const NONE: u16 = 0xffff;

fn tree() -> Tree {
    let mut t = Tree { nodes: vec![[NONE, NONE]], depth: vec![(0, true)] };
    for (symbol, &(code, bits)) in CODES.iter().enumerate() {
        let mut node = 0usize;
        for i in (0..bits).rev() {
            let bit = ((code >> i) & 1) as usize;
            if i == 0 {
                t.nodes[node][bit] = LEAF | symbol as u16;
            } else {
                if t.nodes[node][bit] == NONE {
                    let (d, ones) = t.depth[node];
                    t.nodes.push([NONE, NONE]);
                    t.depth.push((d + 1, ones && bit == 1));
                    t.nodes[node][bit] = (t.nodes.len() - 1) as u16;
                }
                node = t.nodes[node][bit] as usize;
            }
        }
    }
    t
}

/// Inner nodes of the code's tree (257 symbols, EOS included, make 256).
const NODES: usize = 256;

/// The decoding table: 16 steps per inner node, each packed in a `u32`
/// (next node, flags, symbol: [`Step::packed`]); indexed by a `u8` node and a
/// nibble, so no index is out of bounds.
fn table() -> &'static [u32; NODES * 16] {
    static TABLE: OnceLock<Box<[u32; NODES * 16]>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let t = tree();
        assert_eq!(t.nodes.len(), NODES, "the code's tree");
        let mut steps = Box::new([0u32; NODES * 16]);
        for state in 0..t.nodes.len() {
            for nibble in 0..16u8 {
                let mut node = state;
                let mut step = Step::default();
                for i in (0..4).rev() {
                    let child = t.nodes[node][usize::from((nibble >> i) & 1)];
                    if child & LEAF != 0 && child != NONE {
                        let symbol = child & !LEAF;
                        if symbol == EOS {
                            // The string is refused; the walk goes on from the root, so
                            // that every symbol after this one still takes five bits.
                            step.flags |= FAIL;
                            node = 0;
                            break;
                        }
                        step.flags |= EMIT;
                        step.symbol = symbol as u8;
                        node = 0;
                    } else {
                        node = usize::from(child);
                    }
                }
                let (depth, ones) = t.depth[node];
                if node == 0 || (ones && depth <= 7) {
                    step.flags |= ACCEPT;
                }
                step.next = node as u8;
                steps[state * 16 + usize::from(nibble)] = step.packed();
            }
        }
        steps
    })
}

/// Decodes `src` onto the end of `out`.
///
/// Each nibble's symbol is stored whether or not the step completes one and
/// the length advances only when it does: no branch per symbol, and room for
/// the longest result (eight symbols per five bytes, the shortest code being
/// five bits, and a step that meets EOS going back to the root) is made once.
/// A failure is looked at once, after the loop.
pub fn decode(src: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
    let table = table();
    let start = out.len();
    out.resize(start + src.len() * 8 / 5 + 1, 0);
    let room = &mut out[start..];
    let mut n = 0usize;
    let mut step = u32::from(ACCEPT) << 8;
    let mut failed = 0u32;
    for &byte in src {
        for nibble in [byte >> 4, byte & 0xf] {
            step = table[(step & 0xff) as usize * 16 + usize::from(nibble)];
            failed |= step;
            room[n] = (step >> 16) as u8;
            n += ((step >> 8) & u32::from(EMIT)) as usize;
        }
    }
    if failed & u32::from(FAIL) << 8 != 0 || step & u32::from(ACCEPT) << 8 == 0 {
        out.truncate(start);
        return Err(Error::Huffman);
    }
    out.truncate(start + n);
    Ok(())
}

/// The length of `src` once encoded, in bytes.
pub fn encoded_len(src: &[u8]) -> usize {
    let bits: usize = src.iter().map(|&b| usize::from(CODES[usize::from(b)].1)).sum();
    bits.div_ceil(8)
}

/// Encodes `src` onto the end of `out`, padded with ones.
pub fn encode(src: &[u8], out: &mut Vec<u8>) {
    let mut acc: u64 = 0;
    let mut bits: u32 = 0;
    for &b in src {
        let (code, len) = CODES[usize::from(b)];
        acc = (acc << len) | u64::from(code);
        bits += u32::from(len);
        while bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
        acc &= (1u64 << bits) - 1;
    }
    if bits > 0 {
        out.push(((acc << (8 - bits)) | (0xff >> bits)) as u8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex")).collect()
    }

    /// RFC 7541 C.4.1 – C.4.3 and C.6.1 strings.
    const VECTORS: &[(&str, &str)] = &[
        ("www.example.com", "f1e3 c2e5 f23a 6ba0 ab90 f4ff"),
        ("no-cache", "a8eb 1064 9cbf"),
        ("custom-key", "25a8 49e9 5ba9 7d7f"),
        ("custom-value", "25a8 49e9 5bb8 e8b4 bf"),
        ("302", "6402"),
        ("private", "aec3 771a 4b"),
        ("Mon, 21 Oct 2013 20:13:21 GMT", "d07a be94 1054 d444 a820 0595 040b 8166 e082 a62d 1bff"),
        ("https://www.example.com", "9d29 ad17 1863 c78f 0b97 c8e9 ae82 ae43 d3"),
    ];

    #[test]
    fn rfc_vectors_decode_and_encode() {
        for (plain, coded) in VECTORS {
            let coded = hex(coded);
            let mut out = Vec::new();
            decode(&coded, &mut out).expect("decodes");
            assert_eq!(out, plain.as_bytes());
            let mut enc = Vec::new();
            encode(plain.as_bytes(), &mut enc);
            assert_eq!(enc, coded, "{plain}");
            assert_eq!(encoded_len(plain.as_bytes()), coded.len());
        }
    }

    #[test]
    fn every_byte_round_trips() {
        let all: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
        let mut enc = Vec::new();
        encode(&all, &mut enc);
        let mut dec = Vec::new();
        decode(&enc, &mut dec).expect("decodes");
        assert_eq!(dec, all);
    }

    /// Any bytes at all, EOS anywhere among them: refused or decoded, never
    /// past the room made, and nothing left behind on a refusal.
    #[test]
    fn arbitrary_bytes_never_overrun() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut out = b"kept".to_vec();
        for len in 0..300 {
            let src: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    // Mostly ones: long codes and EOS come often.
                    (seed as u8) | if seed & 0x100 != 0 { 0xfe } else { 0 }
                })
                .collect();
            out.truncate(4);
            if decode(&src, &mut out).is_err() {
                assert_eq!(out, b"kept");
            }
        }
        out.truncate(4);
        assert!(decode(&[0xff; 64], &mut out).is_err());
        assert_eq!(out, b"kept");
    }

    #[test]
    fn bad_padding_and_eos_are_refused() {
        let mut out = Vec::new();
        // 'a' is 00011 (5 bits); padding of zeros instead of ones.
        assert_eq!(decode(&[0b0001_1000], &mut out), Err(Error::Huffman));
        // Eight bits or more of padding: a whole 0xff byte after a full code.
        let mut enc = Vec::new();
        encode(b"0", &mut enc); // '0' is 00000: one byte with 3 bits of padding
        enc.push(0xff);
        assert_eq!(decode(&enc, &mut out), Err(Error::Huffman));
        // EOS in the string: 30 ones.
        assert_eq!(decode(&[0xff, 0xff, 0xff, 0xff], &mut out), Err(Error::Huffman));
        out.clear();
        decode(&[], &mut out).expect("empty is fine");
        assert!(out.is_empty());
    }
}
