//! The process's allocator: mimalloc, asked the way that takes its fast
//! paths.
//!
//! A connection's buffers and task, and each busy period's pipeline future,
//! are allocated and freed on the worker that uses them, which mimalloc
//! serves from per-thread free lists where glibc's malloc spent a fifth of
//! the proxy's user time (bins, coalescing) on short connections
//! (docs/adr/0008-allocator.md).
//!
//! The `mimalloc` crate's allocator passes every request to
//! `mi_malloc_aligned`, alignment 8 included. mimalloc 3 serves that from its
//! free lists only up to 1 KiB, or for power-of-two sizes; any other larger
//! block (a pipeline future, a read buffer) takes the over-allocating path,
//! several hundred instructions each. Every mimalloc block is aligned to the
//! pointer size, so a request for no more than that goes to `mi_malloc`, and
//! only stricter alignments (tokio's task cells) to the aligned functions.
//!
//! Transparent huge pages are off for the proxy's memory ([`huge_pages_off`]):
//! mimalloc asks for them on its arenas, and the memory an idle connection
//! holds then grows in 2 MiB steps; measured, they bought no CPU on the
//! data path (ADR 0008).
//!
//! Invariants: a pointer handed out satisfies its layout's alignment; every
//! pointer is freed by `mi_free`, whichever function allocated it.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as mi;

/// The alignment every mimalloc block has, whatever its size.
const BLOCK_ALIGN: usize = std::mem::size_of::<usize>();

/// mimalloc, by plain or aligned calls as the layout needs.
pub struct Allocator;

#[allow(unsafe_code)]
// SAFETY: each function forwards to mimalloc, which returns blocks of at
// least the size asked for (or null) aligned to at least `BLOCK_ALIGN`, and
// to the requested alignment through its aligned functions; `mi_free` and
// the realloc functions accept any block mimalloc handed out.
unsafe impl GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= BLOCK_ALIGN {
            unsafe { mi::mi_malloc(layout.size()).cast() }
        } else {
            unsafe { mi::mi_malloc_aligned(layout.size(), layout.align()).cast() }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= BLOCK_ALIGN {
            unsafe { mi::mi_zalloc(layout.size()).cast() }
        } else {
            unsafe { mi::mi_zalloc_aligned(layout.size(), layout.align()).cast() }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        unsafe { mi::mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if layout.align() <= BLOCK_ALIGN {
            unsafe { mi::mi_realloc(ptr.cast::<c_void>(), new_size).cast() }
        } else {
            unsafe { mi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast() }
        }
    }
}

/// Turns transparent huge pages off for this process (`PR_SET_THP_DISABLE`,
/// what mimalloc itself does with `MIMALLOC_ALLOW_THP=0`), unless the
/// operator set `MIMALLOC_ALLOW_THP` (to 1: keep them). Called before the
/// proxy starts, so every page its workers touch is a 4 KiB one. The flag
/// survives `execve`: the bench and the origin simulator, which start
/// HAProxy and NGINX, do not call this.
pub fn huge_pages_off() {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        #[allow(unsafe_code)]
        // SAFETY: prctl with PR_SET_THP_DISABLE takes plain integers and
        // touches no memory of ours.
        let rc = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
        if rc != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "cannot turn transparent huge pages off");
        }
    }
}

#[cfg(test)]
mod tests {
    /// The binary's allocator serves this test binary too: blocks of every
    /// size class and alignment keep their alignment and their bytes.
    #[test]
    fn blocks_keep_their_alignment_and_contents_across_growth() {
        #[repr(align(16))]
        struct A16([u8; 48]);
        #[repr(align(128))]
        struct A128([u8; 384]);
        for size in [1usize, 7, 8, 24, 1000, 1025, 4096, 5528, 70_000] {
            let mut v: Vec<u8> = (0..size).map(|i| i as u8).collect();
            assert_eq!(v.as_ptr() as usize % 8, 0, "{size} bytes");
            v.extend_from_slice(&[0xAB; 3000]);
            assert!(v[..size].iter().enumerate().all(|(i, b)| *b == i as u8), "{size} bytes kept on growth");
            let zeroed = vec![0u64; size];
            assert!(zeroed.iter().all(|x| *x == 0));
        }
        let a = Box::new(A16([7; 48]));
        assert_eq!(&*a as *const A16 as usize % 16, 0);
        let b: Vec<A128> = (0..5).map(|_| A128([9; 384])).collect();
        assert_eq!(b.as_ptr() as usize % 128, 0);
        assert!(a.0.iter().all(|x| *x == 7) && b.iter().all(|x| x.0.iter().all(|y| *y == 9)));
    }
}
