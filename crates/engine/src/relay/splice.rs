//! One direction's pipe for zero-copy relaying (Linux): socket → pipe →
//! socket with splice(2), so payload pages move by reference and never enter
//! user space.
//!
//! System calls go through `rustix` (safe, typed file descriptors, already in
//! the dependency tree), since the workspace denies `unsafe`.
//!
//! Invariants: the relay is the only reader and writer of the pipe, so
//! `pending` is exactly the number of bytes in it. A splice into a pipe that
//! already holds bytes can fail with EAGAIN because the pipe ran out of slots
//! (each slot holds one page or one socket fragment, so a pipe can be full
//! well below its byte capacity) even though the socket has data. That case is
//! reported as [`Fill::Stalled`] *without* clearing the socket's readiness;
//! only an EAGAIN into an empty pipe proves the socket empty.

use std::io;
use std::os::fd::OwnedFd;

use rustix::io::Errno;
use rustix::pipe::{fcntl_getpipe_size, fcntl_setpipe_size, pipe_with, splice, PipeFlags, SpliceFlags};
use tokio::io::Interest;
use tokio::net::TcpStream;

use super::tcp::Fill;

/// Linux's default pipe capacity, assumed if the kernel will not say.
const DEFAULT_PIPE_SIZE: usize = 64 * 1024;

/// A non-blocking pipe and the count of bytes in it.
pub(super) struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    capacity: usize,
    pending: usize,
    /// The last fill stalled with bytes in the pipe; no fill until a drain.
    stalled: bool,
}

impl Pipe {
    /// Makes a pipe, asking for `size` bytes of capacity (0: the default).
    pub(super) fn new(size: usize) -> io::Result<Pipe> {
        let (read, write) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        if size > 0 {
            // Why ignore: above pipe-max-size (or the user's pipe quota) the
            // kernel refuses; the default size still works, only slower.
            let _ = fcntl_setpipe_size(&write, size);
        }
        let capacity = fcntl_getpipe_size(&write).unwrap_or(DEFAULT_PIPE_SIZE);
        Ok(Pipe { read, write, capacity, pending: 0, stalled: false })
    }

    /// Bytes in the pipe.
    pub(super) fn pending(&self) -> usize {
        self.pending
    }

    /// Whether a fill may move bytes in.
    pub(super) fn has_room(&self) -> bool {
        !self.stalled && self.pending < self.capacity
    }

    /// Splices what `from` has into the pipe.
    pub(super) fn fill(&mut self, from: &TcpStream) -> io::Result<Fill> {
        let room = self.capacity - self.pending;
        let pending = self.pending;
        let write = &self.write;
        let moved = from.try_io(Interest::READABLE, || {
            match splice(from, None, write, None, room, SpliceFlags::NONBLOCK | SpliceFlags::MOVE) {
                Ok(n) => Ok(Some(n)),
                // Ambiguous (pipe full or socket empty): keep readiness, drain first.
                Err(Errno::AGAIN) if pending > 0 => Ok(None),
                Err(e) => Err(e.into()),
            }
        })?;
        match moved {
            Some(0) => Ok(Fill::Eof),
            Some(n) => {
                self.pending += n;
                Ok(Fill::Moved)
            }
            None => {
                self.stalled = true;
                Ok(Fill::Stalled)
            }
        }
    }

    /// Splices pending bytes out to `to`; returns how many went.
    pub(super) fn drain(&mut self, to: &TcpStream) -> io::Result<usize> {
        let (read, pending) = (&self.read, self.pending);
        let n = to.try_io(Interest::WRITABLE, || {
            // The pipe holds bytes, so EAGAIN here can only mean a full socket.
            splice(read, None, to, None, pending, SpliceFlags::NONBLOCK | SpliceFlags::MOVE).map_err(io::Error::from)
        })?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        self.pending -= n;
        self.stalled = false;
        Ok(n)
    }
}
