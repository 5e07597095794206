//! Length-limited Huffman codes in canonical form (RFC 1951 section 3.2.2).

/// A prefix code: per symbol its length in bits (0: unused) and its bits,
/// already reversed for deflate's least-significant-bit-first packing.
#[derive(Clone)]
pub struct Code<const N: usize> {
    /// Code length of each symbol.
    pub len: [u8; N],
    /// Bit-reversed code of each symbol.
    pub bits: [u16; N],
}

impl<const N: usize> Code<N> {
    /// A code with every symbol unused.
    pub const fn empty() -> Self {
        Code { len: [0; N], bits: [0; N] }
    }

    /// Optimal code lengths for `freq`, none longer than `limit` bits, then
    /// the canonical codes for them. `scratch` is reused between calls.
    pub fn build(&mut self, freq: &[u32; N], limit: u8, scratch: &mut Scratch) {
        self.len = [0; N];
        lengths(freq, limit, &mut self.len, scratch);
        self.assign();
    }

    /// The canonical codes for the lengths in `self.len`.
    pub fn assign(&mut self) {
        let mut count = [0u16; 16];
        for &l in &self.len {
            count[usize::from(l)] += 1;
        }
        count[0] = 0;
        let mut next = [0u16; 16];
        let mut code = 0u16;
        for bits in 1..16 {
            code = (code + count[bits - 1]) << 1;
            next[bits] = code;
        }
        for (sym, &l) in self.len.iter().enumerate() {
            if l != 0 {
                let c = next[usize::from(l)];
                next[usize::from(l)] += 1;
                self.bits[sym] = c.reverse_bits() >> (16 - l);
            }
        }
    }

    /// Bits `freq` costs in this code (extra bits not counted).
    pub fn cost(&self, freq: &[u32; N]) -> u64 {
        freq.iter().zip(&self.len).map(|(&f, &l)| u64::from(f) * u64::from(l)).sum()
    }
}

/// Buffers reused from one code to the next.
#[derive(Default)]
pub struct Scratch {
    /// Frequency << 32 | symbol of the used symbols, sorted.
    sorted: Vec<u64>,
    /// Weights, then parent pointers, then depths (Moffat and Katajainen).
    tree: Vec<u64>,
    /// The other half of the radix sort's ping-pong.
    spare: Vec<u64>,
}

/// Writes into `out` the lengths of a Huffman code for `freq` limited to
/// `limit` bits. Symbols with frequency 0 get length 0. At least two symbols
/// get a length, so the code is complete (decoders refuse most incomplete
/// codes): unused ones are added with the smallest indexes when needed.
fn lengths(freq: &[u32], limit: u8, out: &mut [u8], scratch: &mut Scratch) {
    let Scratch { sorted, tree: a, spare } = scratch;
    sorted.clear();
    // Frequency in the high half, symbol in the low: sorting orders by
    // frequency, then by symbol, so the result is deterministic.
    sorted.extend(freq.iter().enumerate().filter(|(_, &f)| f != 0).map(|(s, &f)| (u64::from(f) << 32) | s as u64));
    let mut filler = 0u64;
    while sorted.len() < 2 {
        if freq[filler as usize] == 0 {
            sorted.push(filler);
        }
        filler += 1;
    }
    sort_by_frequency(sorted, spare);
    let n = sorted.len();
    // Moffat and Katajainen's in-place method, on the sorted weights: the
    // array first holds parent pointers of internal nodes, then their depths,
    // then the leaves' depths.
    a.clear();
    a.extend(sorted.iter().map(|&x| x >> 32));
    let (mut leaf, mut node) = (0usize, 0usize);
    for next in 0..n - 1 {
        // First child: the lighter of the next leaf and the next internal node.
        if leaf >= n || (node < next && a[node] < a[leaf]) {
            a[next] = a[node];
            a[node] = next as u64;
            node += 1;
        } else {
            a[next] = a[leaf];
            leaf += 1;
        }
        // Second child, added to it.
        if leaf >= n || (node < next && a[node] < a[leaf]) {
            a[next] += a[node];
            a[node] = next as u64;
            node += 1;
        } else {
            a[next] += a[leaf];
            leaf += 1;
        }
    }
    a[n - 2] = 0;
    for t in (0..n - 2).rev() {
        a[t] = a[a[t] as usize] + 1;
    }
    let mut count = [0u32; 64];
    let (mut avail, mut used, mut depth) = (1u32, 0u32, 0usize);
    let mut t = n as isize - 2;
    let mut leaves = 0u32;
    while avail > 0 {
        while t >= 0 && a[t as usize] == depth as u64 {
            used += 1;
            t -= 1;
        }
        while avail > used {
            count[depth.min(63)] += 1;
            leaves += 1;
            avail -= 1;
        }
        avail = 2 * used;
        depth += 1;
        used = 0;
    }
    debug_assert_eq!(leaves as usize, n);
    limit_lengths(&mut count, usize::from(limit));
    // Longest codes to the rarest symbols.
    let mut i = 0;
    for len in (1..=usize::from(limit)).rev() {
        for _ in 0..count[len] {
            out[(sorted[i] & 0xffff_ffff) as usize] = len as u8;
            i += 1;
        }
    }
}

/// Sorts `frequency << 32 | symbol` items given in symbol order by
/// frequency, then symbol: a stable radix sort on the frequency's bytes
/// (several times cheaper than a comparison sort for a code's few hundred
/// symbols), skipping the bytes that are the same in every item.
fn sort_by_frequency(items: &mut Vec<u64>, spare: &mut Vec<u64>) {
    let max = items.iter().map(|&x| x >> 32).max().unwrap_or(0);
    let mut shift = 32;
    while shift < 64 && max >> (shift - 32) != 0 {
        let mut count = [0u32; 256];
        for &x in items.iter() {
            count[((x >> shift) & 0xff) as usize] += 1;
        }
        if !count.iter().any(|&c| c as usize == items.len()) {
            let mut sum = 0;
            for c in count.iter_mut() {
                (*c, sum) = (sum, sum + *c);
            }
            spare.clear();
            spare.resize(items.len(), 0);
            for &x in items.iter() {
                let d = ((x >> shift) & 0xff) as usize;
                spare[count[d] as usize] = x;
                count[d] += 1;
            }
            std::mem::swap(items, spare);
        }
        shift += 8;
    }
}

/// Moves leaves deeper than `limit` up to it, then restores the Kraft
/// equality by pushing leaves down from the deepest level above `limit`.
fn limit_lengths(count: &mut [u32; 64], limit: usize) {
    let mut overflow = false;
    for len in limit + 1..64 {
        if count[len] != 0 {
            count[limit] += count[len];
            count[len] = 0;
            overflow = true;
        }
    }
    if !overflow {
        return;
    }
    let mut total: u64 = (1..=limit).map(|len| u64::from(count[len]) << (limit - len)).sum();
    while total > 1 << limit {
        count[limit] -= 1;
        if let Some(len) = (1..limit).rev().find(|&len| count[len] != 0) {
            count[len] -= 1;
            count[len + 1] += 2;
        }
        total -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kraft(len: &[u8], limit: u8) -> u64 {
        len.iter().filter(|&&l| l != 0).map(|&l| 1u64 << (limit - l)).sum()
    }

    #[test]
    fn lengths_form_a_complete_code_within_the_limit() {
        let mut scratch = Scratch::default();
        // Fibonacci weights make the deepest unlimited trees.
        let mut freq = [0u32; 30];
        let (mut x, mut y) = (1u32, 1u32);
        for f in freq.iter_mut() {
            *f = x;
            (x, y) = (y, x.saturating_add(y));
        }
        for limit in [7u8, 9, 15] {
            let mut code = Code::<30>::empty();
            code.build(&freq, limit, &mut scratch);
            assert!(code.len.iter().all(|&l| (1..=limit).contains(&l)), "{:?}", code.len);
            assert_eq!(kraft(&code.len, limit), 1 << limit);
        }
    }

    proptest::proptest! {
        #[test]
        fn the_radix_sort_orders_by_frequency_then_symbol(freq in proptest::collection::vec(0u32..u32::MAX, 0..400)) {
            let mut items: Vec<u64> = freq.iter().enumerate().map(|(s, &f)| u64::from(f) << 32 | s as u64).collect();
            let mut expect = items.clone();
            expect.sort_unstable();
            sort_by_frequency(&mut items, &mut Vec::new());
            proptest::prop_assert_eq!(items, expect);
        }
    }

    #[test]
    fn one_used_symbol_still_gets_a_complete_code() {
        let mut scratch = Scratch::default();
        let mut freq = [0u32; 19];
        freq[5] = 10;
        let mut code = Code::<19>::empty();
        code.build(&freq, 7, &mut scratch);
        assert_eq!(code.len[5], 1);
        assert_eq!(code.len.iter().filter(|&&l| l != 0).count(), 2);
    }

    #[test]
    fn canonical_codes_match_rfc_1951_example() {
        // RFC 1951 3.2.2: lengths (3, 3, 3, 3, 3, 2, 4, 4) give F=00, A=010 ... H=1111.
        let mut code = Code::<8>::empty();
        code.len = [3, 3, 3, 3, 3, 2, 4, 4];
        code.assign();
        let expect = [0b010u16, 0b011, 0b100, 0b101, 0b110, 0b00, 0b1110, 0b1111];
        for (sym, &e) in expect.iter().enumerate() {
            let l = code.len[sym];
            assert_eq!(code.bits[sym], e.reverse_bits() >> (16 - l), "symbol {sym}");
        }
    }

    proptest::proptest! {
        #[test]
        fn limited_codes_are_complete_and_no_worse_than_needed(freq in proptest::collection::vec(0u32..100_000, 286)) {
            let mut f = [0u32; 286];
            f.copy_from_slice(&freq);
            let mut code = Code::<286>::empty();
            code.build(&f, 15, &mut Scratch::default());
            let used = f.iter().filter(|&&x| x != 0).count();
            proptest::prop_assert!(code.len.iter().all(|&l| l <= 15));
            for (sym, &x) in f.iter().enumerate() {
                if x != 0 {
                    proptest::prop_assert!(code.len[sym] != 0);
                }
            }
            if used >= 2 {
                proptest::prop_assert_eq!(kraft(&code.len, 15), 1 << 15);
            }
        }
    }
}
