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

    /// A code in which every symbol has a length, for symbols yet to come:
    /// as if each unused symbol had been seen once, but the unused ones are
    /// one leaf of the tree (weighted by their number) that then becomes a
    /// complete subtree of them, so the tree is built over the used symbols
    /// only (a few dozen of a literal code's 286, several times cheaper).
    pub fn build_covering(&mut self, freq: &[u32; N], limit: u8, scratch: &mut Scratch) {
        let unused = freq.iter().filter(|&&f| f == 0).count();
        let used = N - unused;
        if unused < 2 || used == 0 {
            let mut all = *freq;
            for f in all.iter_mut() {
                *f = (*f).max(1);
            }
            return self.build(&all, limit, scratch);
        }
        let Scratch { sorted, tree, spare } = scratch;
        sorted.clear();
        sorted.extend(freq.iter().enumerate().filter(|(_, &f)| f != 0).map(|(s, &f)| (u64::from(f) << 32) | s as u64));
        // The unused symbols' leaf, numbered past every symbol.
        sorted.push((unused as u64) << 32 | N as u64);
        sort_by_frequency(sorted, spare);
        let mut count = depths(sorted, tree);
        // Its depth: leaves take the depths deepest first, rarest first.
        let at = sorted.iter().position(|&x| x & 0xffff_ffff == N as u64).unwrap_or(0);
        let mut seen = 0;
        let mut depth = 63;
        while depth > 0 {
            seen += count[depth] as usize;
            if seen > at {
                break;
            }
            depth -= 1;
        }
        // A complete subtree of `unused` leaves in its place: 2^(m+1) - k at
        // depth m below it and 2 (k - 2^m) one deeper.
        count[depth] -= 1;
        let m = unused.ilog2() as usize;
        count[(depth + m).min(63)] += ((2 << m) - unused) as u32;
        count[(depth + m + 1).min(63)] += (2 * (unused - (1 << m))) as u32;
        limit_lengths(&mut count, usize::from(limit));
        // Longest codes to the rarest: the unused symbols, then the used
        // ones from the rarest.
        let rarest = (0..N)
            .filter(|&s| freq[s] == 0)
            .chain(sorted.iter().map(|&x| (x & 0xffff_ffff) as usize).filter(|&s| s < N));
        let lengths =
            (1..=usize::from(limit)).rev().flat_map(|len| std::iter::repeat_n(len as u8, count[len] as usize));
        for (sym, len) in rarest.zip(lengths) {
            self.len[sym] = len;
        }
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
    /// Where the sort by frequency builds its result.
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
    let mut count = depths(sorted, a);
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

/// How many leaves of an optimal (unlimited) Huffman tree over the `sorted`
/// weights (`weight << 32 | symbol`, at least 2, ascending) lie at each
/// depth (deeper than 63 counted at 63).
fn depths(sorted: &[u64], a: &mut Vec<u64>) -> [u32; 64] {
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
    count
}

/// Sorts `frequency << 32 | symbol` items given in symbol order by
/// frequency, then symbol. Items of frequency 0 and 1 (rare symbols, and
/// every unused one of a code made to cover all symbols) keep their order
/// and go first; only the rest, a few dozen in a code built from counts, is
/// compared.
fn sort_by_frequency(items: &mut Vec<u64>, spare: &mut Vec<u64>) {
    spare.clear();
    for low in [0, 1] {
        spare.extend(items.iter().copied().filter(|&x| x >> 32 == low));
    }
    let split = spare.len();
    spare.extend(items.iter().copied().filter(|&x| x >> 32 > 1));
    spare[split..].sort_unstable();
    std::mem::swap(items, spare);
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

    use proptest::prelude::any;

    proptest::proptest! {
        #[test]
        fn the_sort_orders_by_frequency_then_symbol(freq in proptest::collection::vec((any::<bool>(), any::<u32>()), 0..400)) {
            // Half of the frequencies small (0, 1, 2), as in a code's rare symbols.
            let freq = freq.iter().map(|&(small, f)| if small { f % 3 } else { f });
            let mut items: Vec<u64> = freq.enumerate().map(|(s, f)| u64::from(f) << 32 | s as u64).collect();
            let mut expect = items.clone();
            expect.sort_unstable();
            sort_by_frequency(&mut items, &mut Vec::new());
            proptest::prop_assert_eq!(items, expect);
        }
    }

    proptest::proptest! {
        #[test]
        fn covering_codes_are_complete_and_give_every_symbol_a_length(
            freq in proptest::collection::vec((any::<bool>(), 0u32..100_000), 286),
        ) {
            let mut f = [0u32; 286];
            for (x, &(unused, n)) in f.iter_mut().zip(&freq) {
                *x = if unused { 0 } else { n };
            }
            let mut code = Code::<286>::empty();
            code.build_covering(&f, 15, &mut Scratch::default());
            proptest::prop_assert!(code.len.iter().all(|&l| (1..=15).contains(&l)), "{:?}", code.len);
            proptest::prop_assert_eq!(kraft(&code.len, 15), 1 << 15);
            // No used symbol gets a longer code than an unused one.
            let longest_used = f.iter().zip(&code.len).filter(|(&x, _)| x != 0).map(|(_, &l)| l).max().unwrap_or(0);
            let shortest_unused = f.iter().zip(&code.len).filter(|(&x, _)| x == 0).map(|(_, &l)| l).min().unwrap_or(15);
            proptest::prop_assert!(longest_used <= shortest_unused, "{} > {}", longest_used, shortest_unused);
        }
    }

    #[test]
    fn covering_a_few_used_symbols_or_none() {
        let mut scratch = Scratch::default();
        for used in [0usize, 1, 2, 3, 29, 30] {
            let mut f = [0u32; 30];
            for (s, x) in f.iter_mut().enumerate().take(used) {
                *x = 1000 >> s.min(9);
            }
            let mut code = Code::<30>::empty();
            code.build_covering(&f, 15, &mut scratch);
            assert!(code.len.iter().all(|&l| (1..=15).contains(&l)), "{used}: {:?}", code.len);
            assert_eq!(kraft(&code.len, 15), 1 << 15, "{used}");
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
