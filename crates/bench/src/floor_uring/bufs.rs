//! The provided-buffer ring: buffers the kernel picks from for every multishot receive,
//! handed back once their bytes have been sent on.
//!
//! Invariants: the ring's entries and the buffers are allocated once, before the ring is
//! registered, and freed only after the `IoUring` that uses them is dropped (the driver
//! declares its ring before its buffers); a buffer is in exactly one place at a time —
//! the ring (the kernel may write it), or the driver (a receive completion named it, until
//! [`BufRing::recycle`]); the tail the kernel reads is published once per loop turn.

use std::alloc::{self, Layout};
use std::io;
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::types::BufRingEntry;
use io_uring::IoUring;

/// The provided buffers of one buffer group, and the ring that offers them to the kernel.
pub(super) struct BufRing {
    /// The ring's entries (page-aligned, as the kernel requires).
    entries: *mut BufRingEntry,
    entries_layout: Layout,
    /// The buffers, `count` of `size` bytes, back to back.
    mem: *mut u8,
    mem_layout: Layout,
    count: u16,
    size: u32,
    /// Tail as written so far; the kernel sees it at [`BufRing::publish`].
    tail: u16,
    /// Buffers the kernel has handed over and the driver holds.
    held: usize,
}

impl BufRing {
    /// Allocates `count` buffers of `size` bytes (`count` a power of two, at most 32,768)
    /// and registers them with `ring` as buffer group `bgid`.
    pub(super) fn register(ring: &IoUring, bgid: u16, count: u16, size: u32) -> io::Result<BufRing> {
        let invalid = |e: alloc::LayoutError| io::Error::new(io::ErrorKind::InvalidInput, e.to_string());
        let entries_layout =
            Layout::from_size_align(usize::from(count) * std::mem::size_of::<BufRingEntry>(), 4096).map_err(invalid)?;
        let mem_layout = Layout::from_size_align(usize::from(count) * size as usize, 4096).map_err(invalid)?;
        // SAFETY: both layouts have a non-zero size (count and size are non-zero constants).
        let entries = unsafe { alloc::alloc_zeroed(entries_layout) }.cast::<BufRingEntry>();
        // SAFETY: as above.
        let mem = unsafe { alloc::alloc_zeroed(mem_layout) };
        if entries.is_null() || mem.is_null() {
            return Err(io::Error::new(io::ErrorKind::OutOfMemory, "cannot allocate the provided buffers"));
        }
        let mut bufs = BufRing { entries, entries_layout, mem, mem_layout, count, size, tail: 0, held: count as usize };
        // SAFETY: the entries stay allocated until `bufs` is dropped, which the driver
        // does after dropping the ring.
        unsafe { ring.submitter().register_buf_ring_with_flags(entries as u64, count, bgid, 0)? };
        for bid in 0..count {
            bufs.recycle(bid);
        }
        bufs.publish();
        Ok(bufs)
    }

    /// Notes that a completion handed buffer `bid` to the driver.
    pub(super) fn taken(&mut self) {
        self.held += 1;
    }

    /// The first `len` bytes of buffer `bid`, which a completion handed to the driver.
    pub(super) fn slice(&self, bid: u16, len: u32) -> &[u8] {
        let len = len.min(self.size) as usize;
        // SAFETY: bid < count (the kernel only names buffers it was given) and len <= size;
        // the kernel does not write a buffer the driver holds.
        unsafe { std::slice::from_raw_parts(self.ptr(bid), len) }
    }

    /// Start of buffer `bid`.
    pub(super) fn ptr(&self, bid: u16) -> *const u8 {
        let bid = usize::from(bid % self.count);
        // SAFETY: within the allocation (bid < count).
        unsafe { self.mem.add(bid * self.size as usize) }
    }

    /// Gives buffer `bid` back to the kernel (seen at the next [`BufRing::publish`]).
    pub(super) fn recycle(&mut self, bid: u16) {
        let i = usize::from(self.tail & (self.count - 1));
        // SAFETY: i < count; the kernel reads entries only up to the published tail.
        let entry = unsafe { &mut *self.entries.add(i) };
        entry.set_addr(self.ptr(bid) as u64);
        entry.set_len(self.size);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
        self.held = self.held.saturating_sub(1);
    }

    /// Makes the recycled buffers visible to the kernel.
    pub(super) fn publish(&mut self) {
        // SAFETY: the tail field lives in the first entry, which is allocated and aligned
        // for a u16; the kernel reads it with acquire ordering.
        let tail = unsafe { &*BufRingEntry::tail(self.entries).cast::<AtomicU16>() };
        tail.store(self.tail, Ordering::Release);
    }

    /// Whether at least half of the buffers are back in the ring.
    pub(super) fn plenty(&self) -> bool {
        self.held <= usize::from(self.count) / 2
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: allocated in `register` with these layouts; the ring that used them is
        // gone (see the module's invariants).
        unsafe {
            alloc::dealloc(self.entries.cast(), self.entries_layout);
            alloc::dealloc(self.mem, self.mem_layout);
        }
    }
}
