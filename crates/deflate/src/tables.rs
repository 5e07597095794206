//! The fixed tables of RFC 1951: length and distance symbols with their
//! extra bits, and the fixed Huffman code lengths.

/// Length symbols 257..=285 as offsets 0..29: smallest length of each.
pub const LEN_BASE: [u16; 29] =
    [3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258];

/// Extra bits after each length symbol.
pub const LEN_EXTRA: [u8; 29] = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0];

/// Distance symbols 0..30: smallest distance of each.
pub const DIST_BASE: [u16; 30] = [
    1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145,
    8193, 12289, 16385, 24577,
];

/// Extra bits after each distance symbol.
pub const DIST_EXTRA: [u8; 30] =
    [0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13];

/// Length symbol offset (0..29) of every match length; indexes below 3 are unused.
pub static LEN_SYM: [u8; 259] = len_sym();

const fn len_sym() -> [u8; 259] {
    let mut table = [0u8; 259];
    let mut sym = 0;
    while sym < 29 {
        let end = if sym + 1 < 29 { LEN_BASE[sym + 1] as usize } else { 259 };
        let mut len = LEN_BASE[sym] as usize;
        while len < end {
            table[len] = sym as u8;
            len += 1;
        }
        sym += 1;
    }
    // 258 has a symbol of its own (285), not 284 with all extra bits set.
    table[258] = 28;
    table
}

/// Distance symbol (0..30) of `d = distance - 1` (0..32768): two symbols per
/// power of two, told apart by the bit below the highest.
#[inline(always)]
pub fn dist_sym(d: u32) -> u32 {
    let high = 31 - (d | 1).leading_zeros();
    if d < 2 {
        d
    } else {
        2 * high + ((d >> (high - 1)) & 1)
    }
}

/// Code lengths of the fixed literal/length code (288 symbols).
pub fn fixed_lit_lengths() -> [u8; 288] {
    let mut lengths = [8u8; 288];
    lengths[144..256].fill(9);
    lengths[256..280].fill(7);
    lengths
}

/// Order in which code-length code lengths are written.
pub const CLEN_ORDER: [usize; 19] = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_length_maps_into_its_symbols_range() {
        for (len, &sym) in LEN_SYM.iter().enumerate().skip(3) {
            let sym = usize::from(sym);
            let base = LEN_BASE[sym] as usize;
            assert!(len >= base, "{len}");
            assert!(len - base < (1 << LEN_EXTRA[sym]) || (len == base), "{len}");
        }
        assert_eq!(LEN_SYM[258], 28);
        assert_eq!(LEN_SYM[257], 27);
    }

    #[test]
    fn every_distance_maps_into_its_symbols_range() {
        for d in 0..32768u32 {
            let sym = dist_sym(d) as usize;
            let base = u32::from(DIST_BASE[sym]);
            assert!(d + 1 >= base, "{d}");
            assert!(d + 1 - base < (1 << DIST_EXTRA[sym]), "{d}");
        }
    }
}
