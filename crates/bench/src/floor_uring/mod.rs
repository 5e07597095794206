//! The floor on io_uring (`switchyard bench floor --io-uring`, target `floor-uring`): the
//! same relays as [`crate::floor`] — L4 copy both ways, L7 one HTTP/1.1 request and
//! response at a time over kept-alive origin connections — on one io_uring instead of
//! tokio's epoll, so the two event loops are measured side by side on the same tests.
//!
//! What it uses of io_uring (kernel 6.0 or later):
//!
//! - **multishot accept** into **direct descriptors** (a registered, sparse file table:
//!   no process file descriptor, no `fdget` per operation); origin sockets are made with
//!   `IORING_OP_SOCKET` into the same table, `TCP_NODELAY` set by `SOCKET_URING_OP_SETSOCKOPT`
//!   (6.7; harmless where refused) hard-linked before `IORING_OP_CONNECT`; client sockets
//!   inherit it from the listener;
//! - **multishot receive with a provided-buffer ring** (one request per socket for its
//!   whole life: no re-arming, no readiness interest to register or drop);
//! - **send without a copy**: bytes are sent from the provided buffer they were received
//!   into, which returns to the ring when the send completes (the one copy left is a
//!   request whose `connection: close` line is dropped, as the floor does, or a head
//!   split over two receives);
//! - **batched submission**: one `io_uring_enter` per loop turn submits every operation
//!   the turn's completions produced and waits for the next (single issuer, deferred task
//!   work where the kernel has them, so completions are posted only inside that call);
//! - closing a socket cancels its receive at once and closes its descriptor once nothing
//!   else of it is in flight (`Driver::close`).
//!
//! One thread, pinned by the suite like the floor. Same invariants as the floor: every
//! response is relayed whole and in order; an origin connection serves one client
//! connection at a time; a response without `content-length` or a malformed head ends
//! the client connection. Memory safety: every address an operation carries (a buffer of
//! the ring, a socket's own queued bytes, an origin address, the option value) stays put
//! until the operation's last completion, because a socket's state is freed only when
//! none of its operations is in flight (see `relay`).
//!
//! Where the kernel refuses io_uring (no io_uring, `kernel.io_uring_disabled`, a seccomp
//! filter, a kernel before 6.0) [`run`] and [`probe`] fail with
//! [`io::ErrorKind::Unsupported`] and say why.

// io_uring shares memory with the kernel: pushing an entry and the provided buffers are
// unsafe by nature. Each unsafe block states what keeps it sound; nothing of it is in the
// engine.
#![allow(unsafe_code)]

mod bufs;
mod relay;

use std::io;
use std::net::SocketAddr;

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use crate::floor::Mode;
use bufs::BufRing;
use relay::Socks;

/// Submission queue entries; the completion queue has four times as many.
const SQ_ENTRIES: u32 = 4096;
/// Provided buffers (a power of two) and their size: 16 MiB in all.
const BUFFERS: u16 = 512;
const BUFFER_SIZE: u32 = 32 * 1024;
/// The buffer group every receive picks from.
const BGID: u16 = 0;
/// Most direct descriptors; the kernel refuses a table larger than `RLIMIT_NOFILE`.
const MAX_SLOTS: u64 = 1 << 16;
/// Multishot receive came with 6.0 (multishot accept, `IORING_OP_SOCKET`, direct
/// descriptors allocated by the kernel and provided-buffer rings with 5.19).
const MIN_KERNEL: (u32, u32) = (6, 0);
/// The value of `TCP_NODELAY` set on origin sockets.
static ONE: libc::c_int = 1;

/// Runs the floor on io_uring on `listen`, relaying to `origins`, until the process is
/// stopped. Fails with [`io::ErrorKind::Unsupported`] where io_uring cannot be used.
pub fn run(listen: SocketAddr, origins: Vec<SocketAddr>, mode: Mode) -> io::Result<()> {
    if origins.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "the floor needs at least one origin"));
    }
    let (ring, setup) = Setup::ring()?;
    let listener = listener(listen)?;
    let mut d = Driver::new(ring, setup, listener, origins, mode)?;
    d.serve()
}

/// Whether io_uring can run the floor here: the kernel and setup it would use
/// ("kernel 6.18, single issuer, deferred task work, 65536 direct descriptors"), or why
/// not ([`io::ErrorKind::Unsupported`]).
pub fn probe() -> io::Result<String> {
    let (ring, setup) = Setup::ring()?;
    let slots = Setup::register(&ring)?;
    let _bufs = BufRing::register(&ring, BGID, 8, 4096).map_err(|e| unsupported("a provided-buffer ring", e))?;
    Ok(format!("kernel {}.{}, {}, {slots} direct descriptors", setup.kernel.0, setup.kernel.1, setup.flags))
}

/// How the ring was set up.
struct Setup {
    kernel: (u32, u32),
    flags: &'static str,
}

impl Setup {
    /// A ring with the cheapest completion mode the kernel accepts.
    fn ring() -> io::Result<(IoUring, Setup)> {
        let kernel = kernel_version()?;
        if kernel < MIN_KERNEL {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "io_uring here lacks multishot receive: kernel {}.{} (needs {}.{} or later)",
                    kernel.0, kernel.1, MIN_KERNEL.0, MIN_KERNEL.1
                ),
            ));
        }
        let mut best = IoUring::builder();
        best.setup_cqsize(SQ_ENTRIES * 4).setup_single_issuer().setup_defer_taskrun().setup_submit_all();
        match best.build(SQ_ENTRIES) {
            Ok(r) => return Ok((r, Setup { kernel, flags: "single issuer, deferred task work" })),
            Err(e) if e.raw_os_error() != Some(libc::EINVAL) => return Err(unsupported("io_uring_setup", e)),
            Err(_) => {}
        }
        // Before 6.1: no deferred task work; cooperative task work instead (5.19).
        let mut plain = IoUring::builder();
        plain.setup_cqsize(SQ_ENTRIES * 4).setup_coop_taskrun();
        let r = plain.build(SQ_ENTRIES).map_err(|e| unsupported("io_uring_setup", e))?;
        Ok((r, Setup { kernel, flags: "cooperative task work" }))
    }

    /// Registers the sparse table of direct descriptors (as many as `RLIMIT_NOFILE`
    /// allows, at most [`MAX_SLOTS`]); returns its size.
    fn register(ring: &IoUring) -> io::Result<u32> {
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes the struct it is given.
        let slots = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
            lim.rlim_cur.min(MAX_SLOTS)
        } else {
            1024
        };
        let slots = u32::try_from(slots).unwrap_or(1024);
        ring.submitter().register_files_sparse(slots).map_err(|e| unsupported("a direct descriptor table", e))?;
        Ok(slots)
    }
}

/// `err` (from setting up `what`) as an [`io::ErrorKind::Unsupported`] error that says why.
fn unsupported(what: &str, err: io::Error) -> io::Error {
    let why = match err.raw_os_error() {
        Some(libc::ENOSYS) => "the kernel has no io_uring, or a seccomp filter (a container's) refuses it",
        Some(libc::EPERM | libc::EACCES) => "refused by kernel.io_uring_disabled or a seccomp/LSM policy",
        Some(libc::EINVAL) => "the kernel does not know a flag or operation this needs",
        Some(libc::ENOMEM) => "not enough locked memory (RLIMIT_MEMLOCK) for the ring",
        _ => "refused",
    };
    io::Error::new(io::ErrorKind::Unsupported, format!("io_uring is not available here: {what}: {err} ({why})"))
}

/// The running kernel's (major, minor) version.
fn kernel_version() -> io::Result<(u32, u32)> {
    // SAFETY: utsname is plain data; uname fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::uname(&mut u) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let release: String = u.release.iter().take_while(|&&c| c != 0).map(|&c| c as u8 as char).collect();
    parse_release(&release)
        .ok_or_else(|| io::Error::new(io::ErrorKind::Unsupported, format!("unknown kernel release `{release}`")))
}

/// "6.18.44-fc" → (6, 18).
fn parse_release(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// The listening socket: `TCP_NODELAY` (inherited by accepted sockets), the same
/// backlog as tokio's listener.
fn listener(listen: SocketAddr) -> io::Result<std::net::TcpListener> {
    let s = socket2::Socket::new(socket2::Domain::for_address(listen), socket2::Type::STREAM, None)?;
    s.set_reuse_address(true)?;
    s.set_tcp_nodelay(true)?;
    s.bind(&listen.into())?;
    s.listen(1024)?;
    Ok(s.into())
}

/// What an operation was for; with the socket's index it makes the `user_data`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Accept = 1,
    Socket,
    SockOpt,
    Connect,
    Recv,
    Send,
    Shutdown,
    Cancel,
    Close,
}

impl Op {
    const ALL: [Op; 9] =
        [Op::Accept, Op::Socket, Op::SockOpt, Op::Connect, Op::Recv, Op::Send, Op::Shutdown, Op::Cancel, Op::Close];

    fn token(self, id: u32) -> u64 {
        (self as u64) << 32 | u64::from(id)
    }

    fn of(token: u64) -> Option<(Op, u32)> {
        let op = Op::ALL.into_iter().find(|&o| o as u64 == token >> 32)?;
        Some((op, token as u32))
    }
}

/// The event loop: the ring, its buffers, the sockets.
pub(crate) struct Driver {
    // Dropped first: the buffers must outlive the ring.
    ring: IoUring,
    bufs: BufRing,
    socks: Socks,
    /// Origin addresses (stable: connect operations point into them).
    origins: Vec<socket2::SockAddr>,
    next_origin: usize,
    mode: Mode,
    /// Idle origin connections (L7), most recent last.
    idle: Vec<u32>,
    /// Sockets whose multishot receive ended for want of buffers.
    starved: Vec<u32>,
    listener: std::net::TcpListener,
}

impl Driver {
    fn new(
        ring: IoUring,
        _setup: Setup,
        listener: std::net::TcpListener,
        origins: Vec<SocketAddr>,
        mode: Mode,
    ) -> io::Result<Driver> {
        Setup::register(&ring)?;
        let bufs = BufRing::register(&ring, BGID, BUFFERS, BUFFER_SIZE)
            .map_err(|e| unsupported("a provided-buffer ring", e))?;
        // One fewer file lookup per io_uring_enter (5.18); optional.
        let _ = ring.submitter().register_ring_fd();
        Ok(Driver {
            ring,
            bufs,
            socks: Socks::default(),
            origins: origins.into_iter().map(Into::into).collect(),
            next_origin: 0,
            mode,
            idle: Vec::new(),
            starved: Vec::new(),
            listener,
        })
    }

    /// Loop turns: publish recycled buffers, submit and wait in one call, handle what
    /// completed.
    fn serve(&mut self) -> io::Result<()> {
        self.arm_accept();
        let mut done: Vec<(u64, i32, u32)> = Vec::with_capacity(1024);
        loop {
            self.rearm_starved();
            self.bufs.publish();
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY | libc::EAGAIN)) => {}
                Err(e) => return Err(e),
            }
            done.clear();
            done.extend(self.ring.completion().map(|c| (c.user_data(), c.result(), c.flags())));
            for &(token, res, flags) in &done {
                self.complete(token, res, flags);
            }
        }
    }

    /// Queues one operation; submits the queue first if it is full.
    fn push(&mut self, entry: squeue::Entry) {
        for _ in 0..64 {
            // SAFETY: every address `entry` carries stays valid until its last completion
            // (see the module's invariants).
            if unsafe { self.ring.submission().push(&entry) }.is_ok() {
                return;
            }
            let _ = self.ring.submit();
        }
        // A ring that accepts nothing for 64 submissions is broken; the socket's state
        // waits for a completion that never comes, which leaks it but keeps it safe.
    }

    /// Multishot accept into kernel-allocated direct descriptors.
    fn arm_accept(&mut self) {
        use std::os::fd::AsRawFd;
        let fd = types::Fd(self.listener.as_raw_fd());
        let e = opcode::AcceptMulti::new(fd).allocate_file_index(true).build().user_data(Op::Accept.token(0));
        self.push(e);
    }

    /// One completion.
    fn complete(&mut self, token: u64, res: i32, flags: u32) {
        let Some((op, id)) = Op::of(token) else { return };
        match op {
            Op::Accept => {
                if res >= 0 {
                    self.accepted(res as u32);
                }
                if !cqueue::more(flags) {
                    self.arm_accept();
                }
            }
            Op::Recv => self.received(id, res, flags),
            _ => {
                self.socks.settle(id);
                match op {
                    Op::Socket => self.socket_made(id, res),
                    Op::Connect => self.connected(id, res),
                    Op::Send => self.sent(id, res),
                    _ => {}
                }
                self.maybe_free(id);
            }
        }
    }

    /// Re-arms the receives that ran out of buffers, once buffers are back.
    fn rearm_starved(&mut self) {
        if self.starved.is_empty() || !self.bufs.plenty() {
            return;
        }
        for id in std::mem::take(&mut self.starved) {
            self.arm_recv(id);
        }
    }

    /// Multishot receive on socket `id` (if it is open, connected and not yet armed).
    fn arm_recv(&mut self, id: u32) {
        let Some(s) = self.socks.get_mut(id) else { return };
        let Some(slot) = s.slot else { return };
        if s.recv_armed || s.closing || s.eof {
            return;
        }
        s.recv_armed = true;
        s.inflight += 1;
        let e = opcode::RecvMulti::new(types::Fixed(slot), BGID).build().user_data(Op::Recv.token(id));
        self.push(e);
    }

    /// Makes a socket for a new origin connection; connected in [`Driver::socket_made`].
    fn open_origin(&mut self, id: u32) {
        let Some(s) = self.socks.get_mut(id) else { return };
        let addr = self.next_origin;
        self.next_origin = (addr + 1) % self.origins.len();
        s.addr = addr;
        s.inflight += 1;
        let domain = libc::c_int::from(self.origins[addr].family());
        let e = opcode::Socket::new(domain, libc::SOCK_STREAM, 0)
            .file_index(Some(types::DestinationSlot::auto_target()))
            .build()
            .user_data(Op::Socket.token(id));
        self.push(e);
    }

    /// The origin socket exists (direct descriptor `res`): `TCP_NODELAY`, then connect.
    fn socket_made(&mut self, id: u32, res: i32) {
        let Some(s) = self.socks.get_mut(id) else { return };
        if res < 0 {
            self.fail(id);
            return;
        }
        let slot = res as u32;
        s.slot = Some(slot);
        if s.closing {
            // Closed by the caller once this completion is settled.
            return;
        }
        s.inflight += 2;
        let addr = &self.origins[s.addr];
        let (ptr, len) = (addr.as_ptr().cast::<libc::sockaddr>(), addr.len());
        let one = std::ptr::from_ref(&ONE).cast::<libc::c_void>();
        let opt =
            opcode::SetSockOpt::new(types::Fixed(slot), libc::IPPROTO_TCP as u32, libc::TCP_NODELAY as u32, one, 4)
                .build()
                .flags(squeue::Flags::IO_HARDLINK)
                .user_data(Op::SockOpt.token(id));
        self.push(opt);
        let e = opcode::Connect::new(types::Fixed(slot), ptr, len).build().user_data(Op::Connect.token(id));
        self.push(e);
    }

    /// The origin connection is up (or failed): receive, and send what waits.
    fn connected(&mut self, id: u32, res: i32) {
        let Some(s) = self.socks.get_mut(id) else { return };
        if s.closing {
            return;
        }
        if res < 0 {
            self.fail(id);
            return;
        }
        s.connected = true;
        self.arm_recv(id);
        self.kick_send(id);
    }

    /// Sends the front of socket `id`'s queue, or, with the queue empty, closes or shuts
    /// it down if it was asked to once drained.
    fn kick_send(&mut self, id: u32) {
        let Some(s) = self.socks.get_mut(id) else { return };
        let Some(slot) = s.slot else { return };
        if s.sending || s.closing || !s.connected {
            return;
        }
        let next = s.out.front().map(|chunk| chunk.remaining(&self.bufs));
        let e = match next {
            Some((ptr, len)) => {
                s.sending = true;
                opcode::Send::new(types::Fixed(slot), ptr, len)
                    .flags(libc::MSG_NOSIGNAL)
                    .build()
                    .user_data(Op::Send.token(id))
            }
            None if s.close_when_drained => return self.close(id),
            // A socket whose far end has closed its side too is about to close: no
            // shutdown first (it would run in a kernel worker, a context switch).
            None if s.shut_when_drained && !s.shut && !s.eof => {
                s.shut = true;
                opcode::Shutdown::new(types::Fixed(slot), libc::SHUT_WR).build().user_data(Op::Shutdown.token(id))
            }
            None => return,
        };
        s.inflight += 1;
        self.push(e);
    }

    /// Closes socket `id`: its receive is cancelled now, its descriptor closed once no
    /// operation of it is in flight (a shutdown runs in a kernel worker: closing the slot
    /// under it could let it act on the next socket given that slot), its state freed
    /// when that close has completed.
    fn close(&mut self, id: u32) {
        let Some(s) = self.socks.get_mut(id) else { return };
        if s.closing {
            return;
        }
        s.closing = true;
        // Nothing refers to a socket whose index may be reused.
        let peer = s.peer.take();
        let was_idle = std::mem::take(&mut s.idle);
        let cancel = s.recv_armed;
        if cancel {
            s.inflight += 1;
        }
        if was_idle {
            self.idle.retain(|&i| i != id);
        }
        if let Some(p) = peer.and_then(|p| self.socks.get_mut(p)) {
            p.peer = None;
        }
        if cancel {
            self.push(opcode::AsyncCancel::new(Op::Recv.token(id)).build().user_data(Op::Cancel.token(id)));
        }
        self.close_when_idle(id);
    }

    /// Submits the close of a closing socket's descriptor once nothing of it is in flight.
    fn close_when_idle(&mut self, id: u32) {
        let Some(s) = self.socks.get_mut(id) else { return };
        if !s.closing || s.inflight > 0 {
            return;
        }
        if let Some(slot) = s.slot.take() {
            s.inflight += 1;
            self.push(opcode::Close::new(types::Fixed(slot)).build().user_data(Op::Close.token(id)));
        }
    }

    /// Moves a closing socket on: its descriptor closed, then its state freed.
    fn maybe_free(&mut self, id: u32) {
        self.close_when_idle(id);
        if let Some(s) = self.socks.free_if_done(id) {
            for bid in s.ring_buffers() {
                self.bufs.recycle(bid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_releases_parse_to_major_and_minor() {
        assert_eq!(parse_release("6.18.44-fc-v782"), Some((6, 18)));
        assert_eq!(parse_release("5.15.0-91-generic"), Some((5, 15)));
        assert_eq!(parse_release("6.1"), Some((6, 1)));
        assert_eq!(parse_release("linux"), None);
    }

    #[test]
    fn tokens_carry_the_operation_and_the_socket() {
        for op in Op::ALL {
            assert_eq!(Op::of(op.token(77)), Some((op, 77)));
        }
        assert_eq!(Op::of(0), None);
    }

    #[test]
    fn refusals_say_why_and_are_unsupported() {
        let e = unsupported("io_uring_setup", io::Error::from_raw_os_error(libc::ENOSYS));
        assert_eq!(e.kind(), io::ErrorKind::Unsupported);
        assert!(e.to_string().contains("seccomp"), "{e}");
        let e = unsupported("io_uring_setup", io::Error::from_raw_os_error(libc::EPERM));
        assert!(e.to_string().contains("io_uring_disabled"), "{e}");
    }
}
