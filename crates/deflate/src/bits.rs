//! Least-significant-bit-first bit packing into a byte buffer.

/// Bytes zero-filled at a time ahead of the writes.
const GROW: usize = 16 * 1024;

/// Bits not yet written out (fewer than 8 between calls) and their count.
#[derive(Default, Clone, Copy)]
pub struct Pending {
    pub acc: u64,
    pub count: u32,
}

/// Writes bits at the end of `out`, growing it (zero-filled) a step at a time
/// as bytes are written, then truncates it to the bytes written.
pub struct BitWriter<'a> {
    out: &'a mut Vec<u8>,
    at: usize,
    acc: u64,
    count: u32,
}

impl<'a> BitWriter<'a> {
    /// Starts writing at the end of `out`, with room for about `room` more
    /// bytes made at once (more is made when needed).
    pub fn new(out: &'a mut Vec<u8>, pending: Pending, room: usize) -> BitWriter<'a> {
        let at = out.len();
        out.resize(at + room.min(GROW) + 16, 0);
        BitWriter { out, at, acc: pending.acc, count: pending.count }
    }

    #[cold]
    fn grow(&mut self) {
        let len = self.out.len();
        self.out.resize(len + GROW, 0);
    }

    /// Adds the low `n` bits of `bits` (`n` + the bits held ≤ 64; after a
    /// [`BitWriter::spill`] at most 7 are held, so up to 56 bits fit).
    #[inline(always)]
    pub fn put(&mut self, bits: u64, n: u32) {
        self.acc |= bits << self.count;
        self.count += n;
    }

    /// Moves whole bytes out of the accumulator.
    #[inline(always)]
    pub fn spill(&mut self) {
        match self.out.get_mut(self.at..self.at + 8) {
            Some(dst) => dst.copy_from_slice(&self.acc.to_le_bytes()),
            None => {
                self.grow();
                self.out[self.at..self.at + 8].copy_from_slice(&self.acc.to_le_bytes());
            }
        }
        let bytes = self.count / 8;
        self.at += bytes as usize;
        // `bytes` ≤ 7 here: callers keep fewer than 64 bits held, so the
        // shift is below 64.
        self.acc >>= bytes * 8;
        self.count -= bytes * 8;
    }

    /// Pads to a byte boundary with zero bits.
    pub fn align(&mut self) {
        self.count = self.count.div_ceil(8) * 8;
        self.spill();
    }

    /// Appends bytes at a byte boundary (after [`BitWriter::align`]).
    pub fn bytes(&mut self, data: &[u8]) {
        debug_assert_eq!(self.count, 0);
        let end = self.at + data.len();
        if self.out.len() < end + 16 {
            self.out.resize(end + 16, 0);
        }
        self.out[self.at..end].copy_from_slice(data);
        self.at = end;
    }

    /// Stops writing: the buffer keeps the whole bytes, the rest is returned.
    pub fn finish(mut self) -> Pending {
        self.spill();
        self.out.truncate(self.at);
        Pending { acc: self.acc, count: self.count }
    }
}
