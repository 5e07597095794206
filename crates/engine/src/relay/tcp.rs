//! The TCP relay: moves bytes between a client and a server connection until
//! both directions have ended.
//!
//! Each direction is a pump: read from one socket into a stage, write the
//! stage out to the other socket. The stage is either a pipe (Linux: bytes
//! go socket → pipe → socket with splice(2) and never enter user space) or a
//! fixed buffer allocated once per direction, on its first read. Every
//! direction starts with a buffer: small exchanges cost a read and a write
//! each, where a pipe would cost two `pipe2`, four `fcntl` and four `close`
//! more per connection. With `zero_copy` a direction moves to a pipe once a
//! single read fills its buffer (bulk), at a moment the buffer is empty.
//! Both pumps and an idle timer run inside one future, so the caller spawns
//! one task per connection.
//!
//! Invariants:
//! - A direction ends only when its reader has sent FIN *and* every byte read
//!   has been written out; then the writer gets `shutdown(Write)`, so a
//!   half-close travels through and the other direction keeps going. The
//!   direction that ends last skips it: both sockets close at once, and the
//!   close sends the FIN.
//! - A FIN that arrived with the last bytes (epoll reported the peer's
//!   half-close with them) is read before those bytes are written, so they
//!   are written with `MSG_MORE` and leave with the FIN in one packet. It is
//!   only concluded from a read that returns 0, never from readiness alone.
//! - A reset (or any other error) on either socket ends both directions at
//!   once; a reset is passed on to the other peer as a reset (SO_LINGER 0),
//!   so it never mistakes a broken stream for a complete one.
//! - Readiness is cleared only by an operation that really found the socket
//!   empty (or full): a splice into a pipe that already holds bytes may fail
//!   because the pipe is full, so that failure leaves the socket's readiness
//!   alone and the pump drains the pipe first.
//! - Byte counts are bytes *written* to the far side.

use std::cell::Cell;
use std::io;
use std::net::Shutdown;
use std::time::Duration;

use socket2::SockRef;
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::time::Instant;

use switchyard_http::error::Side;

/// How a relay moves bytes and when it gives up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelayOptions {
    /// Move bulk bytes with splice(2) through a pipe per direction (Linux
    /// only): a direction starts with a buffer and takes a pipe once a single
    /// read fills the buffer. Buffered copies only when off, or when pipes
    /// cannot be made (out of file descriptors, other systems).
    pub zero_copy: bool,
    /// No byte in either direction for this long ends the relay
    /// ([`End::IdleTimeout`]). Zero means no idle timeout.
    pub idle: Duration,
    /// Capacity asked for each direction's pipe (F_SETPIPE_SZ). The kernel
    /// may refuse (above `/proc/sys/fs/pipe-max-size` for unprivileged
    /// processes); the pipe then keeps its default size. Zero: leave it.
    pub pipe_size: usize,
    /// Size of each direction's buffer when copying through user space.
    pub buffer_size: usize,
}

impl Default for RelayOptions {
    fn default() -> Self {
        RelayOptions { zero_copy: true, idle: Duration::from_secs(300), pipe_size: 128 * 1024, buffer_size: 32 * 1024 }
    }
}

/// Why a relay ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Both directions finished with a FIN and were fully delivered.
    Closed,
    /// No byte moved in either direction for the idle timeout.
    IdleTimeout,
    /// The client reset (or aborted) the connection.
    ClientReset,
    /// The server reset (or aborted) the connection.
    ServerReset,
    /// Any other failure: on whose socket ([`Side::Internal`] for the
    /// relay's own pipes or runtime) and the system's error kind.
    Error(Side, io::ErrorKind),
}

impl End {
    /// A short reason for the log.
    pub fn reason(&self) -> &'static str {
        match self {
            End::Closed => "closed",
            End::IdleTimeout => "idle-timeout",
            End::ClientReset => "client-reset",
            End::ServerReset => "server-reset",
            End::Error(Side::Client, _) => "client-error",
            End::Error(Side::Server, _) => "server-error",
            End::Error(Side::Internal, _) => "internal-error",
        }
    }
}

/// What a relay did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelayOutcome {
    /// Bytes written to the server.
    pub client_to_server: u64,
    /// Bytes written to the client.
    pub server_to_client: u64,
    /// Why it ended.
    pub end: End,
    /// Whether bytes went through a pipe (splice) in either direction, rather
    /// than through buffers only.
    pub zero_copy: bool,
}

/// Relays bytes between `client` and `server` until both directions have
/// ended, one of them fails, or nothing moves for `opts.idle`; then closes
/// both connections.
pub async fn relay(client: TcpStream, server: TcpStream, opts: RelayOptions) -> RelayOutcome {
    let (mut up, mut down) = (Stage::start(&opts), Stage::start(&opts));
    let meter = Meter::new();
    let end = {
        let c2s = pump(&client, &server, &mut up, Dir::ClientToServer, &meter);
        let s2c = pump(&server, &client, &mut down, Dir::ServerToClient, &meter);
        drive(c2s, s2c, &meter, opts.idle).await
    };
    let zero_copy = up.is_pipe() || down.is_pipe();
    match end {
        End::ClientReset => pass_reset(&server),
        End::ServerReset => pass_reset(&client),
        _ => {}
    }
    RelayOutcome { client_to_server: meter.c2s.get(), server_to_client: meter.s2c.get(), end, zero_copy }
}

/// Runs both pumps and the idle timer until both pumps are done or one
/// fails or the timer fires.
async fn drive(
    c2s: impl std::future::Future<Output = Result<(), End>>,
    s2c: impl std::future::Future<Output = Result<(), End>>,
    meter: &Meter,
    idle: Duration,
) -> End {
    tokio::pin!(c2s, s2c);
    // A zero idle means no timeout; a year stands in for "never".
    let idle = if idle.is_zero() { Duration::from_secs(365 * 24 * 3600) } else { idle };
    let timer = tokio::time::sleep_until(meter.last.get() + idle);
    tokio::pin!(timer);
    let (mut c2s_done, mut s2c_done) = (false, false);
    while !(c2s_done && s2c_done) {
        tokio::select! {
            r = &mut c2s, if !c2s_done => match r {
                Ok(()) => c2s_done = true,
                Err(end) => return end,
            },
            r = &mut s2c, if !s2c_done => match r {
                Ok(()) => s2c_done = true,
                Err(end) => return end,
            },
            () = &mut timer => {
                // The timer is re-armed lazily: pumps only stamp the time of
                // their last move, and the timer checks it when it fires.
                let deadline = meter.last.get() + idle;
                if Instant::now() >= deadline {
                    return End::IdleTimeout;
                }
                timer.as_mut().reset(deadline);
            }
        }
    }
    End::Closed
}

/// Sends `data` with `MSG_MORE` (Linux): the kernel queues a tail shorter
/// than a segment until the FIN that follows, and sends both in one packet.
fn send_held(to: &TcpStream, data: &[u8]) -> io::Result<usize> {
    #[cfg(target_os = "linux")]
    return to
        .try_io(Interest::WRITABLE, || SockRef::from(to).send_with_flags(data, libc::MSG_MORE | libc::MSG_NOSIGNAL));
    #[cfg(not(target_os = "linux"))]
    to.try_write(data)
}

/// Makes the peer of `stream` see a reset rather than a clean close when the
/// stream is dropped.
fn pass_reset(stream: &TcpStream) {
    // Why ignore: if it fails the peer sees a FIN instead; nothing better to do.
    let _ = SockRef::from(stream).set_linger(Some(Duration::ZERO));
}

/// Which way a pump moves bytes.
#[derive(Debug, Clone, Copy)]
enum Dir {
    ClientToServer,
    ServerToClient,
}

impl Dir {
    fn reader(self) -> Side {
        match self {
            Dir::ClientToServer => Side::Client,
            Dir::ServerToClient => Side::Server,
        }
    }

    fn writer(self) -> Side {
        match self {
            Dir::ClientToServer => Side::Server,
            Dir::ServerToClient => Side::Client,
        }
    }
}

/// How a failed operation on `side`'s socket ends the relay.
fn failure(side: Side, e: &io::Error) -> End {
    use io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset};
    match (e.kind(), side) {
        (ConnectionReset | ConnectionAborted | BrokenPipe, Side::Client) => End::ClientReset,
        (ConnectionReset | ConnectionAborted | BrokenPipe, Side::Server) => End::ServerReset,
        (kind, side) => End::Error(side, kind),
    }
}

/// Errors after which the same operation is simply tried again later.
fn is_transient(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted)
}

/// Byte counts and the time of the last move, shared by both pumps.
struct Meter {
    c2s: Cell<u64>,
    s2c: Cell<u64>,
    last: Cell<Instant>,
    /// One direction has ended cleanly (FIN passed on).
    one_ended: Cell<bool>,
}

impl Meter {
    fn new() -> Self {
        Meter { c2s: Cell::new(0), s2c: Cell::new(0), last: Cell::new(Instant::now()), one_ended: Cell::new(false) }
    }

    fn touch(&self) {
        self.last.set(Instant::now());
    }

    fn delivered(&self, dir: Dir, n: usize) {
        let counter = match dir {
            Dir::ClientToServer => &self.c2s,
            Dir::ServerToClient => &self.s2c,
        };
        counter.set(counter.get() + n as u64);
        self.touch();
    }
}

/// Moves bytes `from` → `to` until `from` has sent FIN and everything read
/// has been written, then half-closes `to`.
async fn pump(from: &TcpStream, to: &TcpStream, stage: &mut Stage, dir: Dir, meter: &Meter) -> Result<(), End> {
    let mut eof = false;
    loop {
        let pending = stage.pending();
        if eof && pending == 0 {
            // The last direction to end leaves its FIN to the close that follows
            // at once (nothing is left unread on either socket, so it is a FIN).
            if !meter.one_ended.replace(true) {
                // Why ignore: if `to` is gone already, the other direction says so.
                let _ = SockRef::from(to).shutdown(Shutdown::Write);
            }
            return Ok(());
        }
        let can_fill = !eof && stage.has_room();
        // Draining first keeps the stage empty, so each fill can take more.
        tokio::select! {
            biased;
            ready = to.writable(), if pending > 0 => {
                ready.map_err(|e| End::Error(Side::Internal, e.kind()))?;
                // Bytes after which the reader's FIN follows are held for it (MSG_MORE).
                match stage.drain(to, eof) {
                    Ok(n) => {
                        meter.delivered(dir, n);
                        stage.settle();
                    }
                    Err(e) if is_transient(&e) => {}
                    Err(e) => return Err(failure(dir.writer(), &e)),
                }
            }
            ready = from.ready(Interest::READABLE), if can_fill => {
                let ready = ready.map_err(|e| End::Error(Side::Internal, e.kind()))?;
                match stage.fill(from, ready.is_read_closed()) {
                    Ok(Fill::Moved) => meter.touch(),
                    Ok(Fill::MovedThenEof) => {
                        meter.touch();
                        eof = true;
                    }
                    Ok(Fill::Eof) => eof = true,
                    Ok(Fill::Stalled) => {}
                    Err(e) if is_transient(&e) => {}
                    Err(e) => return Err(failure(dir.reader(), &e)),
                }
            }
            // Unreachable by the stage invariants (no room implies pending
            // bytes); ending beats spinning or panicking if they ever break.
            else => return Err(End::Error(Side::Internal, io::ErrorKind::Other)),
        }
    }
}

/// The result of one successful read into a stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fill {
    /// Some bytes came in.
    Moved,
    /// Some bytes came in, then the reader's FIN (a second read returned 0).
    MovedThenEof,
    /// The reader sent FIN.
    Eof,
    /// Nothing came in, maybe because the stage is full: drain before reading
    /// again. The socket's readiness is kept.
    Stalled,
}

/// One direction's bytes in transit: read from one socket, not yet written
/// to the other.
enum Stage {
    #[cfg(target_os = "linux")]
    Pipe(super::splice::Pipe),
    Buffer(Buffer),
}

impl Stage {
    /// A direction's first stage: a buffer, to take a pipe on bulk when
    /// `zero_copy` is on (Linux).
    fn start(opts: &RelayOptions) -> Stage {
        let pipe = (opts.zero_copy && cfg!(target_os = "linux")).then_some(opts.pipe_size);
        Stage::Buffer(Buffer::new(opts.buffer_size, pipe))
    }

    /// After a drain: a buffer that saw bulk and is empty becomes a pipe (once;
    /// if no pipe can be made, the direction stays buffered).
    fn settle(&mut self) {
        let Stage::Buffer(b) = self else { return };
        if !(b.bulk && b.buf.is_empty()) {
            return;
        }
        let Some(size) = b.pipe.take() else { return };
        #[cfg(target_os = "linux")]
        match super::splice::Pipe::new(size) {
            Ok(p) => *self = Stage::Pipe(p),
            Err(e) => tracing::debug!(error = %e, "cannot make a pipe; relaying through a buffer"),
        }
        #[cfg(not(target_os = "linux"))]
        let _ = size;
    }

    fn is_pipe(&self) -> bool {
        match self {
            #[cfg(target_os = "linux")]
            Stage::Pipe(_) => true,
            Stage::Buffer(_) => false,
        }
    }

    fn pending(&self) -> usize {
        match self {
            #[cfg(target_os = "linux")]
            Stage::Pipe(p) => p.pending(),
            Stage::Buffer(b) => b.buf.len() - b.start,
        }
    }

    fn has_room(&self) -> bool {
        match self {
            #[cfg(target_os = "linux")]
            Stage::Pipe(p) => p.has_room(),
            Stage::Buffer(b) => b.buf.len() < b.size,
        }
    }

    /// Reads what `from` has (up to the room left). `WouldBlock` means the
    /// socket is empty, and its readiness has been cleared; a buffer also
    /// clears it after a short read, which proves the socket empty. With
    /// `closed` (the peer's FIN has arrived), a buffer reads once more after a
    /// short read, to find the end before writing the bytes.
    fn fill(&mut self, from: &TcpStream, closed: bool) -> io::Result<Fill> {
        match self {
            #[cfg(target_os = "linux")]
            Stage::Pipe(p) => p.fill(from),
            Stage::Buffer(b) => b.fill(from, closed),
        }
    }

    /// Writes pending bytes to `to`; returns how many went out. `WouldBlock`
    /// means the socket is full, and its readiness has been cleared. With
    /// `last` (the FIN follows these bytes), a buffer sends with `MSG_MORE`.
    fn drain(&mut self, to: &TcpStream, last: bool) -> io::Result<usize> {
        match self {
            #[cfg(target_os = "linux")]
            Stage::Pipe(p) => p.drain(to),
            Stage::Buffer(b) => b.drain(to, last),
        }
    }
}

/// Relay buffers between uses, per worker thread: a short connection or one
/// message of a long one takes a buffer for its bytes in transit and gives it
/// back once they are written, and a 32 KiB allocation and free each time
/// cost more than the relaying of a small message itself.
mod spare {
    use std::cell::RefCell;

    /// Buffers kept per thread at most (32 KiB each by default).
    const KEEP: usize = 32;

    thread_local! {
        static SPARE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    }

    /// An empty buffer of capacity `size`, reused when one is spare.
    pub(super) fn take(size: usize) -> Vec<u8> {
        let reused = SPARE.with(|s| {
            let mut spare = s.borrow_mut();
            let at = spare.iter().rposition(|b| b.capacity() == size)?;
            Some(spare.swap_remove(at))
        });
        reused.unwrap_or_else(|| Vec::with_capacity(size))
    }

    /// Keeps `buf` for the next [`take`], or frees it when enough are kept.
    pub(super) fn give_back(mut buf: Vec<u8>) {
        buf.clear();
        SPARE.with(|s| {
            let mut spare = s.borrow_mut();
            if spare.len() < KEEP {
                spare.push(buf);
            }
        });
    }
}

/// A fixed buffer: bytes `start..buf.len()` are pending. Reads append until
/// `size`; once everything is written the buffer is emptied, so pending bytes
/// are always one plain slice (no wrap-around). The memory is taken by a read
/// into an empty buffer and given back (to the thread's spares) once
/// everything read is written, never zeroed (reads go into spare capacity):
/// an idle direction holds none.
struct Buffer {
    buf: Vec<u8>,
    size: usize,
    start: usize,
    /// Pipe capacity to move to on bulk (`None`: stay buffered).
    pipe: Option<usize>,
    /// A single read filled the buffer: the peer sends in bulk.
    bulk: bool,
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if self.buf.capacity() == self.size {
            spare::give_back(std::mem::take(&mut self.buf));
        }
    }
}

impl Buffer {
    fn new(size: usize, pipe: Option<usize>) -> Self {
        Buffer { buf: Vec::new(), size: size.max(1), start: 0, pipe, bulk: false }
    }

    fn fill(&mut self, from: &TcpStream, closed: bool) -> io::Result<Fill> {
        use bytes::BufMut;
        if self.buf.capacity() == 0 {
            self.buf = spare::take(self.size);
        }
        let room = self.size - self.buf.len();
        let mut read = None;
        let mut then_eof = false;
        let buf = &mut self.buf;
        let tried = from.try_io(Interest::READABLE, || {
            let n = from.try_read_buf(&mut buf.limit(room))?;
            read = Some(n);
            if n > 0 && n < room && closed {
                // The FIN is here: this read proves it (0) before the bytes go
                // out, so they can leave with it. Bytes instead (the read above
                // was short for another reason) are simply more to relay.
                match from.try_read_buf(&mut buf.limit(room - n)) {
                    Ok(0) => then_eof = true,
                    Ok(more) => read = Some(n + more),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
                return Ok(());
            }
            // A short read emptied the socket: report it empty, so its readiness
            // is cleared now rather than by a next read failing with EAGAIN.
            // Readiness is cleared as it was before this read (tokio's tick):
            // bytes arriving after it raise a new edge, and none is missed.
            if n > 0 && n < room {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(())
        });
        if self.buf.is_empty() && self.buf.capacity() == self.size {
            // Nothing came (the socket was empty after all, or at its end):
            // an idle direction holds no buffer.
            spare::give_back(std::mem::take(&mut self.buf));
        }
        match (read, tried) {
            (Some(0), _) => Ok(Fill::Eof),
            (Some(_), _) if then_eof => Ok(Fill::MovedThenEof),
            (Some(n), _) => {
                self.bulk |= n == room;
                Ok(Fill::Moved)
            }
            (None, Err(e)) => Err(e),
            (None, Ok(())) => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn drain(&mut self, to: &TcpStream, last: bool) -> io::Result<usize> {
        let pending = &self.buf[self.start..];
        let n = if last { send_held(to, pending)? } else { to.try_write(pending)? };
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        self.start += n;
        if self.start == self.buf.len() {
            // Everything went out: give the memory back, so an idle connection
            // holds no buffer (the next read takes one again).
            self.start = 0;
            spare::give_back(std::mem::take(&mut self.buf));
        }
        Ok(n)
    }
}
