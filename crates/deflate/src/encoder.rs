//! The raw deflate encoder: a greedy single-pass LZ77 match finder that
//! codes text as it scans (a fixed-code first block, then codes made from
//! the previous block's counts), and collects a binary stream's first block
//! to give it the cheapest of a dynamic Huffman code, the fixed code or
//! stored bytes.

use crate::bits::{BitWriter, Pending};
use crate::huffman::{Code, Scratch};
use crate::tables::{dist_sym, fixed_lit_lengths, CLEN_ORDER, DIST_BASE, DIST_EXTRA, LEN_BASE, LEN_EXTRA, LEN_SYM};

/// log2 of the match finder's table size.
const HASH_BITS: u32 = 14;
/// Entries of the match finder's table.
const TABLE: usize = 1 << HASH_BITS;
/// Deflate's window.
const WINDOW: usize = 32 * 1024;
/// Longest match deflate can express.
const MAX_MATCH: usize = 258;
/// Matches shorter than this are checked against the match from the next
/// byte (one step of lazy matching); longer ones are taken at once.
const LAZY_BELOW: usize = 5;
/// Tokens (literals and matches) per collected block.
const BLOCK_TOKENS: usize = 16 * 1024;
/// Input bytes of a stream's first block, which is collected as tokens and
/// coded with its own Huffman code (the best code for a small response).
const BLOCK_BYTES: usize = 16 * 1024;
/// Input bytes per block once blocks are coded directly.
const DIRECT_BYTES: usize = 64 * 1024;
/// Input bytes of a text stream's first block, coded directly with the fixed
/// code (no code to build or describe: the cheapest start for a small response).
const FIXED_BYTES: usize = 8 * 1024;
/// A stream starts with a fixed-code block when fewer than 1 in this many of
/// its first [`SAMPLE_BYTES`] need 9-bit literals (144..=255): text. Others (binary,
/// non-Latin UTF-8) collect their first block, which may then be stored.
const TEXT_SHARE: usize = 32;
/// Bytes looked at to tell text from other data.
const SAMPLE_BYTES: usize = 4096;
/// Symbols a block must have counted before its statistics make the next
/// block's code (fewer: the current code stays and counting goes on).
const ADOPT_SYMBOLS: u32 = 2048;
/// Input scanned between two slides of the window (each moves [`WINDOW`]
/// bytes back to the front).
const SLIDE_SPAN: usize = 128 * 1024;
/// Input appended at a time.
const PIECE: usize = 64 * 1024;
/// Absolute positions are renumbered from 1 past this.
const REBASE_AT: u32 = 0xC000_0000;

/// A streaming raw deflate (RFC 1951) encoder with reusable state.
///
/// Built for compressing HTTP responses on the fly: one pass, a small hash
/// table, and no work at the start of a stream (the table is not cleared:
/// positions are numbered across streams, and entries from before the
/// current stream are ignored).
///
/// Text (fewer than 1 in [`TEXT_SHARE`] of the first bytes above 143) starts
/// with a block of up to [`FIXED_BYTES`] coded *directly* while it is
/// scanned, with deflate's fixed code: nothing to build or describe, which
/// is most of a small response's cost otherwise; one step of lazy matching
/// (below [`LAZY_BELOW`]) there keeps its ratio at least as good as libslz's
/// (HAProxy's encoder, fixed code throughout). Each later block is coded
/// directly too, with a Huffman code built from the symbols counted in the
/// block before (every symbol kept encodable) when the block opens: no token
/// buffer, no second pass, and no code built for a stream that ends. Web
/// content is uniform enough within a response that the previous block's
/// statistics cost little ratio against the block's own.
///
/// Other data collects its first block (up to [`BLOCK_BYTES`] of input) as
/// tokens, counted, and writes it with the cheapest of its own Huffman code,
/// the fixed code or stored bytes (so noise is stored, not grown), then
/// continues directly like text.
pub struct Deflater {
    /// Most recent absolute position of each hashed 4-byte sequence; 0: none.
    table: Box<[u32; TABLE]>,
    /// Up to [`WINDOW`] bytes of history, then the input not yet emitted.
    window: Vec<u8>,
    /// Absolute position of `window[0]`.
    base: u32,
    /// Absolute position where the current stream began.
    stream_start: u32,
    /// Next byte to scan (window index).
    pos: usize,
    /// First byte of the block being collected (window index).
    block_start: usize,
    /// Literals (`< 256`) and matches (`length << 20 | distance symbol << 15
    /// | distance - 1`).
    tokens: Vec<u32>,
    lit_freq: [u32; 286],
    dist_freq: [u32; 30],
    pending: Pending,
    lit: Code<286>,
    dist: Code<30>,
    clen: Code<19>,
    fixed_lit: Code<286>,
    fixed_dist: Code<30>,
    /// Buffers for building codes.
    sorting: Scratch,
    /// The first block's strategy is chosen (at the stream's first scan).
    started: bool,
    /// Blocks are coded directly with `lit` and `dist`.
    direct: bool,
    /// `lit` and `dist` are the fixed code (a text stream's first block).
    fixed: bool,
    /// Input bytes the open direct block takes before it ends.
    block_bytes: usize,
    /// The last direct block's counts are not made into a code yet: that
    /// happens when the next block opens (never for a stream that ends).
    stale: bool,
    /// A direct block's header is written and its end-of-block is not.
    open: bool,
    /// Direct coding's tables for `lit` and `dist` when they are dynamic.
    tables: Tables,
    /// The same for the fixed code (made once).
    fixed_tables: Box<Tables>,
    /// Matches per length in the direct block, folded into `lit_freq` when
    /// the block ends.
    len_freq: [u32; MAX_MATCH + 1],
    /// The run-length coded code lengths of the block being written.
    items: Vec<u64>,
    finished: bool,
}

impl Default for Deflater {
    fn default() -> Self {
        Deflater::new()
    }
}

impl Deflater {
    /// A fresh encoder (about 130 KiB of state).
    pub fn new() -> Deflater {
        // Built over all 288 symbols: the two unused 8-bit ones come before
        // the 9-bit codes in canonical order.
        let mut all = Code::<288>::empty();
        all.len = fixed_lit_lengths();
        all.assign();
        let mut fixed_lit = Code::empty();
        fixed_lit.len.copy_from_slice(&all.len[..286]);
        fixed_lit.bits.copy_from_slice(&all.bits[..286]);
        let mut fixed_dist = Code::empty();
        fixed_dist.len = [5; 30];
        fixed_dist.assign();
        let fixed_tables = Box::new(Tables::new(&fixed_lit, &fixed_dist));
        Deflater {
            table: Box::new([0; TABLE]),
            window: Vec::with_capacity(WINDOW + SLIDE_SPAN + DIRECT_BYTES + PIECE),
            base: 1,
            stream_start: 1,
            pos: 0,
            block_start: 0,
            tokens: Vec::with_capacity(BLOCK_TOKENS),
            lit_freq: [0; 286],
            dist_freq: [0; 30],
            pending: Pending::default(),
            lit: Code::empty(),
            dist: Code::empty(),
            clen: Code::empty(),
            fixed_lit,
            fixed_dist,
            sorting: Scratch::default(),
            started: false,
            direct: false,
            fixed: false,
            block_bytes: DIRECT_BYTES,
            stale: false,
            open: false,
            tables: Tables::new(&Code::empty(), &Code::empty()),
            fixed_tables,
            len_freq: [0; MAX_MATCH + 1],
            items: Vec::with_capacity(320),
            finished: false,
        }
    }

    /// Starts a new stream; nothing of the previous one is referenced.
    pub fn reset(&mut self) {
        let next = self.base.saturating_add(self.window.len() as u32);
        self.window.clear();
        self.tokens.clear();
        self.lit_freq = [0; 286];
        self.dist_freq = [0; 30];
        self.pending = Pending::default();
        self.pos = 0;
        self.block_start = 0;
        self.finished = false;
        self.started = false;
        self.direct = false;
        self.fixed = false;
        self.block_bytes = DIRECT_BYTES;
        self.stale = false;
        self.open = false;
        self.len_freq = [0; MAX_MATCH + 1];
        if next >= REBASE_AT {
            self.table.fill(0);
            self.base = 1;
        } else {
            self.base = next;
        }
        self.stream_start = self.base;
    }

    /// Compresses `input`, appending finished output to `out`. Some input
    /// may be held until more arrives or [`Deflater::flush`] /
    /// [`Deflater::finish`] is called.
    pub fn write(&mut self, input: &[u8], out: &mut Vec<u8>) {
        debug_assert!(!self.finished, "write after finish");
        for piece in input.chunks(PIECE) {
            self.window.extend_from_slice(piece);
            self.compress(out);
        }
    }

    /// Emits everything written so far and aligns the output to a byte with
    /// an empty stored block (a "sync flush"): a decoder can then decode all
    /// input given so far.
    pub fn flush(&mut self, out: &mut Vec<u8>) {
        if self.direct {
            self.direct_tail(out);
            self.end_direct_block(out);
        } else {
            self.take_tail();
            if self.pos > self.block_start {
                self.emit_block(out, false);
                self.adopt_statistics();
            }
        }
        let mut w = BitWriter::new(out, self.pending, 8);
        w.put(0, 3);
        w.align();
        w.bytes(&[0, 0, 0xff, 0xff]);
        self.pending = w.finish();
        self.slide();
    }

    /// Ends the stream: the last block, padded to a byte.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if self.finished {
            return;
        }
        if self.direct {
            self.direct_tail(out);
            self.end_direct_block(out);
            // A direct block's header was written before it was known to be
            // the last: an empty final block with the fixed code ends it.
            let mut w = BitWriter::new(out, self.pending, 2);
            w.put(1 | 1 << 1, 3);
            w.put(0, 7);
            w.align();
            self.pending = w.finish();
        } else {
            self.take_tail();
            self.emit_block(out, true);
            let mut w = BitWriter::new(out, self.pending, 1);
            w.align();
            self.pending = w.finish();
        }
        self.finished = true;
    }

    /// Scans what the window holds, emitting blocks as they fill up.
    fn compress(&mut self, out: &mut Vec<u8>) {
        if !self.started {
            self.choose_start();
        }
        loop {
            if self.direct {
                self.scan_direct(out);
                if self.pos - self.block_start < self.block_bytes {
                    return;
                }
                self.end_direct_block(out);
            } else {
                self.scan();
                let full = self.tokens.len() >= BLOCK_TOKENS || self.pos - self.block_start >= BLOCK_BYTES;
                if !full {
                    return;
                }
                self.emit_block(out, false);
                self.adopt_statistics();
            }
            self.slide();
        }
    }

    /// At a stream's first bytes: text starts with a block coded directly
    /// with the fixed code; other data collects its first block as tokens.
    fn choose_start(&mut self) {
        self.started = true;
        let sample = &self.window[self.pos..self.window.len().min(self.pos + SAMPLE_BYTES)];
        // Counted in bytes, a chunk at a time: this vectorizes to a few
        // instructions per 16 bytes (a `usize` sum takes several times more).
        let wide: usize =
            sample.chunks(255).map(|chunk| usize::from(chunk.iter().fold(0u8, |n, &b| n + u8::from(b >= 144)))).sum();
        if wide * TEXT_SHARE > sample.len() {
            return;
        }
        self.direct = true;
        self.fixed = true;
        self.block_bytes = FIXED_BYTES;
    }

    /// The tables of the direct block's code.
    fn direct_tables(&self) -> &Tables {
        if self.fixed {
            &self.fixed_tables
        } else {
            &self.tables
        }
    }

    /// Starts a direct block: makes the code from the last block's counts if
    /// that is pending, then writes the block's header.
    fn open_direct_block(&mut self, w: &mut BitWriter<'_>) {
        if self.stale {
            self.stale = false;
            self.adopt_statistics();
        }
        if self.fixed {
            w.put(1 << 1, 3);
        } else {
            self.write_dynamic_header(w, false);
        }
        self.open = true;
    }

    /// After a block: with enough symbols counted, the next block is coded
    /// directly with a code built from them, every symbol given a length.
    fn adopt_statistics(&mut self) {
        for (len, n) in self.len_freq.iter_mut().enumerate().skip(3) {
            self.lit_freq[257 + usize::from(LEN_SYM[len])] += std::mem::take(n);
        }
        let counted: u32 = self.lit_freq.iter().chain(&self.dist_freq).sum();
        if counted < ADOPT_SYMBOLS {
            if !self.direct {
                // Collected blocks are counted on their own.
                self.lit_freq = [0; 286];
                self.dist_freq = [0; 30];
            }
            return;
        }
        self.lit.build_covering(&self.lit_freq, 15, &mut self.sorting);
        self.dist.build_covering(&self.dist_freq, 15, &mut self.sorting);
        self.describe_codes();
        self.tables = Tables::new(&self.lit, &self.dist);
        self.lit_freq = [0; 286];
        self.dist_freq = [0; 30];
        self.direct = true;
        self.fixed = false;
        self.block_bytes = DIRECT_BYTES;
    }

    /// Ends the open direct block, if any; its counts make the next block's
    /// code when that block opens.
    fn end_direct_block(&mut self, out: &mut Vec<u8>) {
        if self.open {
            let mut w = BitWriter::new(out, self.pending, 4);
            let eob = self.direct_tables().literals[256];
            w.put(u64::from(eob & 0xffff), eob >> 16);
            self.pending = w.finish();
            self.open = false;
            self.stale = true;
        }
        self.block_start = self.pos;
    }

    /// The last few bytes, too short to hash, as literals of the direct block.
    fn direct_tail(&mut self, out: &mut Vec<u8>) {
        let end = self.window.len();
        if self.pos >= end {
            return;
        }
        let mut w = BitWriter::new(out, self.pending, (end - self.pos) * 2 + 64);
        if !self.open {
            self.open_direct_block(&mut w);
        }
        let literals = if self.fixed { &self.fixed_tables.literals } else { &self.tables.literals };
        for &byte in &self.window[self.pos..end] {
            let b = usize::from(byte);
            w.put(u64::from(literals[b] & 0xffff), literals[b] >> 16);
            w.spill();
            self.lit_freq[b] += 1;
        }
        self.pending = w.finish();
        self.pos = end;
    }

    /// The match finder coding as it goes: from `pos` while 4 bytes are
    /// left to hash, until the direct block is full.
    fn scan_direct(&mut self, out: &mut Vec<u8>) {
        let end = self.window.len();
        if end < 4 {
            return;
        }
        let last = end - 4;
        if self.pos > last {
            return;
        }
        if !self.open {
            // May adopt a new code, and with it a new block size.
            let mut w = BitWriter::new(out, self.pending, 320);
            self.open_direct_block(&mut w);
            self.pending = w.finish();
        }
        let stop = (last + 1).min(self.block_start + self.block_bytes);
        let scan = Scan {
            w: &self.window,
            last,
            table: &mut self.table,
            tables: if self.fixed { &self.fixed_tables } else { &self.tables },
            lit_freq: &mut self.lit_freq,
            dist_freq: &mut self.dist_freq,
            len_freq: &mut self.len_freq,
            numbering: (self.base, self.stream_start),
        };
        // Lazy matching where the code is fixed: a fixed-code block is what
        // small responses get, and a longer match saves more there.
        let (pos, pending) = if self.fixed {
            scan.code::<true>(self.pos, stop, self.pending, out)
        } else {
            scan.code::<false>(self.pos, stop, self.pending, out)
        };
        self.pos = pos;
        self.pending = pending;
    }

    /// The match finder: from `pos` while 4 bytes are left to hash, until the
    /// block is full.
    fn scan(&mut self) {
        let w = &self.window[..];
        let end = w.len();
        if end < 4 {
            return;
        }
        let last = end - 4;
        let table = &mut *self.table;
        let tokens = &mut self.tokens;
        let lit_freq = &mut self.lit_freq;
        let dist_freq = &mut self.dist_freq;
        let numbering = (self.base, self.stream_start);
        let block_end = self.block_start + BLOCK_BYTES;
        let mut i = self.pos;
        while i <= last && tokens.len() < BLOCK_TOKENS && i < block_end {
            if let Some((len, dist)) = find_match(w, table, i, read32(w, i), numbering) {
                let sym = dist_sym(dist - 1);
                tokens.push((len as u32) << 20 | sym << 15 | (dist - 1));
                lit_freq[257 + usize::from(LEN_SYM[len])] += 1;
                dist_freq[sym as usize] += 1;
                i += len;
                continue;
            }
            let byte = w[i];
            tokens.push(u32::from(byte));
            lit_freq[usize::from(byte)] += 1;
            i += 1;
        }
        self.pos = i;
    }

    /// The last few bytes, too short to hash, as literals.
    fn take_tail(&mut self) {
        while self.pos < self.window.len() {
            let byte = self.window[self.pos];
            self.tokens.push(u32::from(byte));
            self.lit_freq[usize::from(byte)] += 1;
            self.pos += 1;
        }
    }

    /// Drops input older than the window once a block has been emitted.
    fn slide(&mut self) {
        debug_assert_eq!(self.pos, self.block_start);
        if self.pos < WINDOW + SLIDE_SPAN {
            return;
        }
        let cut = self.pos - WINDOW;
        self.window.drain(..cut);
        self.pos -= cut;
        self.block_start -= cut;
        self.base += cut as u32;
        if self.base >= REBASE_AT {
            self.table.fill(0);
            self.base = 1;
            self.stream_start = 1;
        }
    }

    /// Writes the tokens collected since `block_start` as one block (or, if
    /// stored, as many stored blocks as its bytes need). The symbol counts
    /// stay for [`Deflater::adopt_statistics`].
    fn emit_block(&mut self, out: &mut Vec<u8>, last: bool) {
        self.lit_freq[256] = 1;
        let extra: u64 = (0..29).map(|s| u64::from(self.lit_freq[257 + s]) * u64::from(LEN_EXTRA[s])).sum::<u64>()
            + (0..30).map(|s| u64::from(self.dist_freq[s]) * u64::from(DIST_EXTRA[s])).sum::<u64>();
        let fixed_bits = 3 + self.fixed_lit.cost(&self.lit_freq) + self.fixed_dist.cost(&self.dist_freq) + extra;
        let raw_len = self.pos - self.block_start;
        let stored_bits = (raw_len as u64 + 5 * raw_len.div_ceil(0xffff).max(1) as u64) * 8 + 7;
        // A dynamic code pays for its description; tiny blocks skip building it.
        let dynamic_bits = if self.tokens.len() > 64 { Some(self.plan_dynamic() + extra) } else { None };
        let mut bits = fixed_bits;
        let mut kind = Kind::Fixed;
        if let Some(d) = dynamic_bits.filter(|&d| d < bits) {
            bits = d;
            kind = Kind::Dynamic;
        }
        if stored_bits < bits {
            kind = Kind::Stored;
            bits = stored_bits;
        }
        let room = (bits / 8) as usize + 8;
        let mut w = BitWriter::new(out, self.pending, room);
        match kind {
            Kind::Stored => {
                let raw = &self.window[self.block_start..self.pos];
                let mut chunks = raw.chunks(0xffff).peekable();
                if raw.is_empty() {
                    write_stored(&mut w, &[], last);
                }
                while let Some(chunk) = chunks.next() {
                    write_stored(&mut w, chunk, last && chunks.peek().is_none());
                }
            }
            Kind::Fixed => {
                w.put(u64::from(last) | 1 << 1, 3);
                write_tokens(&mut w, &self.tokens, &self.fixed_lit, &self.fixed_dist);
            }
            Kind::Dynamic => {
                self.write_dynamic_header(&mut w, last);
                write_tokens(&mut w, &self.tokens, &self.lit, &self.dist);
            }
        }
        self.pending = w.finish();
        self.tokens.clear();
        self.block_start = self.pos;
    }

    /// Builds the block's codes from its counts and describes them; returns
    /// the bits of the header and of the symbols (without extra bits).
    fn plan_dynamic(&mut self) -> u64 {
        self.lit.build(&self.lit_freq, 15, &mut self.sorting);
        self.dist.build(&self.dist_freq, 15, &mut self.sorting);
        self.describe_codes() + self.lit.cost(&self.lit_freq) + self.dist.cost(&self.dist_freq)
    }

    /// Run-length codes the lengths of `lit` and `dist` into `items`
    /// (symbol | extra value << 8) and builds the code-length code; returns
    /// the header's bits.
    fn describe_codes(&mut self) -> u64 {
        self.items.clear();
        let hlit = 257 + self.lit.len[257..].iter().rposition(|&l| l != 0).map_or(0, |p| p + 1);
        let hdist = 1 + self.dist.len.iter().rposition(|&l| l != 0).unwrap_or(0);
        let mut lengths = [0u8; 286 + 30];
        lengths[..hlit].copy_from_slice(&self.lit.len[..hlit]);
        lengths[hlit..hlit + hdist].copy_from_slice(&self.dist.len[..hdist]);
        let mut clen_freq = [0u32; 19];
        run_length(&lengths[..hlit + hdist], &mut self.items, &mut clen_freq);
        self.clen.build(&clen_freq, 7, &mut self.sorting);
        let hclen = hclen(&self.clen);
        let runs: u64 = u64::from(clen_freq[16]) * 2 + u64::from(clen_freq[17]) * 3 + u64::from(clen_freq[18]) * 7;
        3 + 5 + 5 + 4 + 3 * hclen as u64 + self.clen.cost(&clen_freq) + runs
    }

    fn write_dynamic_header(&self, w: &mut BitWriter<'_>, last: bool) {
        let hlit = 257 + self.lit.len[257..].iter().rposition(|&l| l != 0).map_or(0, |p| p + 1);
        let hdist = 1 + self.dist.len.iter().rposition(|&l| l != 0).unwrap_or(0);
        let hclen = hclen(&self.clen);
        w.put(u64::from(last) | 2 << 1, 3);
        w.put((hlit - 257) as u64, 5);
        w.put((hdist - 1) as u64, 5);
        w.put((hclen - 4) as u64, 4);
        w.spill();
        for &sym in &CLEN_ORDER[..hclen] {
            w.put(u64::from(self.clen.len[sym]), 3);
            w.spill();
        }
        for &item in &self.items {
            let sym = (item & 0xff) as usize;
            w.put(u64::from(self.clen.bits[sym]), u32::from(self.clen.len[sym]));
            match sym {
                16 => w.put(item >> 8, 2),
                17 => w.put(item >> 8, 3),
                18 => w.put(item >> 8, 7),
                _ => {}
            }
            w.spill();
        }
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Stored,
    Fixed,
    Dynamic,
}

/// Number of code-length code lengths written (trailing zeros in
/// [`CLEN_ORDER`] are left out, but at least 4).
fn hclen(clen: &Code<19>) -> usize {
    CLEN_ORDER.iter().rposition(|&s| clen.len[s] != 0).map_or(4, |p| (p + 1).max(4))
}

/// Run-length codes a sequence of code lengths with symbols 16 (repeat the
/// previous length 3-6 times), 17 (3-10 zeros) and 18 (11-138 zeros).
fn run_length(lengths: &[u8], items: &mut Vec<u64>, freq: &mut [u32; 19]) {
    let mut push = |sym: u64, extra: u64| {
        items.push(sym | extra << 8);
        freq[sym as usize] += 1;
    };
    let mut i = 0;
    while i < lengths.len() {
        let l = lengths[i];
        let run = lengths[i..].iter().take_while(|&&x| x == l).count();
        i += run;
        if l == 0 {
            let mut left = run;
            while left >= 11 {
                let n = left.min(138);
                push(18, (n - 11) as u64);
                left -= n;
            }
            if left >= 3 {
                push(17, (left - 3) as u64);
                left = 0;
            }
            for _ in 0..left {
                push(0, 0);
            }
        } else {
            push(u64::from(l), 0);
            let mut left = run - 1;
            while left >= 3 {
                let n = left.min(6);
                push(16, (n - 3) as u64);
                left -= n;
            }
            for _ in 0..left {
                push(u64::from(l), 0);
            }
        }
    }
}

fn write_stored(w: &mut BitWriter<'_>, chunk: &[u8], last: bool) {
    w.put(u64::from(last), 3);
    w.align();
    let len = chunk.len() as u16;
    let mut head = [0u8; 4];
    head[..2].copy_from_slice(&len.to_le_bytes());
    head[2..].copy_from_slice(&(!len).to_le_bytes());
    w.bytes(&head);
    w.bytes(chunk);
}

/// Per match length: its length code in `lit` and extra bits, packed as
/// `bits << 5 | bit count`.
fn length_table(lit: &Code<286>) -> [u32; MAX_MATCH + 1] {
    let mut lens = [0u32; MAX_MATCH + 1];
    for (len, packed) in lens.iter_mut().enumerate().skip(3) {
        let s = usize::from(LEN_SYM[len]);
        let n = u32::from(lit.len[257 + s]);
        let bits = u32::from(lit.bits[257 + s]) | (len as u32 - u32::from(LEN_BASE[s])) << n;
        *packed = bits << 5 | (n + u32::from(LEN_EXTRA[s]));
    }
    lens
}

/// Input bytes coded between two checks of the output's room.
const SEGMENT: usize = 4096;

/// What the direct coding loop reads and counts.
struct Scan<'a> {
    w: &'a [u8],
    /// Last window index with 4 bytes to hash.
    last: usize,
    table: &'a mut [u32; TABLE],
    tables: &'a Tables,
    lit_freq: &'a mut [u32; 286],
    dist_freq: &'a mut [u32; 30],
    len_freq: &'a mut [u32; MAX_MATCH + 1],
    numbering: (u32, u32),
}

impl Scan<'_> {
    /// Finds matches in `w[from..stop]` and codes them and the literals
    /// between them at once into `out` after the `pending` bits; returns
    /// where scanning stopped and the bits left over. `LAZY`: a match shorter
    /// than [`LAZY_BELOW`] gives way to a longer one from the next byte.
    ///
    /// The bit accumulator lives in locals (registers), and the output's
    /// room is made a segment at a time (2 bytes per input byte covers any
    /// code), so the loop itself never grows the buffer.
    #[inline(always)]
    fn code<const LAZY: bool>(self, from: usize, stop: usize, pending: Pending, out: &mut Vec<u8>) -> (usize, Pending) {
        let Scan { w, last, table, tables, lit_freq, dist_freq, len_freq, numbering } = self;
        let (lens, dists, literals) = (&tables.lens, &tables.dists, &tables.literals);
        let (mut acc, mut count) = (pending.acc, pending.count);
        let mut at = out.len();
        let mut i = from;
        while i < stop {
            let seg_end = stop.min(i + SEGMENT);
            // A literal takes at most 2 bytes, a match at most 6 for 4 or
            // more; the last may run past `seg_end`; a spill writes 8.
            let need = at + (seg_end - i) * 2 + 32;
            if out.len() < need {
                out.resize(need, 0);
            }
            let buf = &mut out[..];
            while i < seg_end {
                let word = read32(w, i);
                let Some((mut len, mut dist)) = find_match(w, table, i, word, numbering) else {
                    literal(buf, &mut at, &mut acc, &mut count, literals, lit_freq, word);
                    i += 1;
                    continue;
                };
                if LAZY && len < LAZY_BELOW && i < last {
                    if let Some((next_len, next_dist)) = find_match(w, table, i + 1, read32(w, i + 1), numbering) {
                        if next_len > len {
                            literal(buf, &mut at, &mut acc, &mut count, literals, lit_freq, word);
                            i += 1;
                            (len, dist) = (next_len, next_dist);
                        }
                    }
                }
                let d = dist - 1;
                let ds = dist_sym(d) as usize;
                let (code, n) = match_bits(lens[len], dists[ds & 31], d);
                acc |= code << count;
                count += n;
                spill(buf, &mut at, &mut acc, &mut count);
                len_freq[len] += 1;
                dist_freq[ds] += 1;
                i += len;
            }
        }
        out.truncate(at);
        (i, Pending { acc, count })
    }
}

/// Codes the low byte of `word` as a literal (its packed code from
/// `literals`) and counts it.
#[inline(always)]
fn literal(
    buf: &mut [u8],
    at: &mut usize,
    acc: &mut u64,
    count: &mut u32,
    literals: &[u32],
    lit_freq: &mut [u32; 286],
    word: u32,
) {
    let b = (word & 0xff) as usize;
    let c = literals[b];
    *acc |= u64::from(c & 0xffff) << *count;
    *count += c >> 16;
    spill(buf, at, acc, count);
    lit_freq[b] += 1;
}

/// Moves the whole bytes of `acc` (`count` < 64 bits) to `buf[at..]`.
#[inline(always)]
fn spill(buf: &mut [u8], at: &mut usize, acc: &mut u64, count: &mut u32) {
    buf[*at..*at + 8].copy_from_slice(&acc.to_le_bytes());
    let bytes = *count >> 3;
    *at += bytes as usize;
    *acc >>= bytes * 8;
    *count &= 7;
}

/// A code's symbols packed for coding while scanning.
struct Tables {
    /// Per match length, its code and extra bits (see [`length_table`]).
    lens: [u32; MAX_MATCH + 1],
    /// Per distance symbol, its code (see [`distance_table`]).
    dists: [u64; 32],
    /// Per literal and end-of-block, its code packed as `length << 16 | bits`.
    literals: [u32; 257],
}

impl Tables {
    fn new(lit: &Code<286>, dist: &Code<30>) -> Tables {
        Tables {
            lens: length_table(lit),
            dists: distance_table(dist),
            literals: std::array::from_fn(|b| u32::from(lit.len[b]) << 16 | u32::from(lit.bits[b])),
        }
    }
}

/// Per distance symbol: its code in `dist`, its code length, the length
/// with the extra bits, and the `distance - 1` it starts at, packed as
/// `base << 32 | total << 24 | length << 16 | code`.
fn distance_table(dist: &Code<30>) -> [u64; 32] {
    let mut dists = [0u64; 32];
    for (s, d) in dists.iter_mut().enumerate().take(30) {
        let n = u64::from(dist.len[s]);
        let total = n + u64::from(DIST_EXTRA[s]);
        *d = (u64::from(DIST_BASE[s]) - 1) << 32 | total << 24 | n << 16 | u64::from(dist.bits[s]);
    }
    dists
}

/// The bits of a match and their count, from its entries in
/// [`length_table`] and [`distance_table`] and `d = distance - 1`.
#[inline(always)]
fn match_bits(len: u32, dist: u64, d: u32) -> (u64, u32) {
    let dcode = dist & 0xffff;
    let dn = (dist >> 16) & 0xff;
    let dtotal = ((dist >> 24) & 0xff) as u32;
    let dbits = dcode | (u64::from(d) - (dist >> 32)) << dn;
    let ltotal = len & 31;
    (u64::from(len >> 5) | dbits << ltotal, ltotal + dtotal)
}

/// The block's symbols, then end-of-block.
fn write_tokens(w: &mut BitWriter<'_>, tokens: &[u32], lit: &Code<286>, dist: &Code<30>) {
    let lens = length_table(lit);
    let dists = distance_table(dist);
    for &t in tokens {
        if t < 256 {
            let t = t as usize;
            w.put(u64::from(lit.bits[t]), u32::from(lit.len[t]));
        } else {
            let len = (t >> 20) as usize & 0x1ff;
            let (code, n) = match_bits(lens[len.min(MAX_MATCH)], dists[(t >> 15) as usize & 31], t & 0x7fff);
            w.put(code, n);
        }
        w.spill();
    }
    w.put(u64::from(lit.bits[256]), u32::from(lit.len[256]));
    w.spill();
}

/// The match at `w[i..]` (`i + 4 <= w.len()`): the last position of the
/// stream with the same hash of 4 bytes, if those bytes are equal and within
/// the window, extended as far as it goes. Records `i` in the table either
/// way. `word` holds the 4 bytes at `i`; `numbering` is the absolute
/// position of `w[0]` and of the stream's first byte. Returns the length and
/// the distance.
#[inline(always)]
fn find_match(w: &[u8], table: &mut [u32; TABLE], i: usize, word: u32, numbering: (u32, u32)) -> Option<(usize, u32)> {
    let (base, start) = numbering;
    let slot = (word.wrapping_mul(0x9E37_79B1) >> (32 - HASH_BITS)) as usize;
    let here = base + i as u32;
    let seen = table[slot];
    table[slot] = here;
    let dist = here.wrapping_sub(seen);
    if seen < start || dist > WINDOW as u32 {
        return None;
    }
    let c = i.checked_sub(dist as usize)?;
    if read32(w, c) != word {
        return None;
    }
    Some((extend(w, c, i, (w.len() - i).min(MAX_MATCH)), dist))
}

#[inline(always)]
fn read32(w: &[u8], i: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&w[i..i + 4]);
    u32::from_le_bytes(b)
}

#[inline(always)]
fn read64(w: &[u8], i: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&w[i..i + 8]);
    u64::from_le_bytes(b)
}

/// Length of the match between `w[c..]` and `w[i..]` (`c < i`), known to
/// be at least 4, at most `max`.
#[inline(always)]
fn extend(w: &[u8], c: usize, i: usize, max: usize) -> usize {
    let mut len = 4;
    while len + 8 <= max {
        let x = read64(w, i + len) ^ read64(w, c + len);
        if x != 0 {
            return len + (x.trailing_zeros() / 8) as usize;
        }
        len += 8;
    }
    while len < max && w[i + len] == w[c + len] {
        len += 1;
    }
    len
}

#[cfg(test)]
impl Deflater {
    /// Moves the position numbering close to `at`, as after that many bytes.
    pub(crate) fn jump_positions_for_test(&mut self, at: u32) {
        self.reset();
        self.base = at;
        self.stream_start = at;
    }
}
