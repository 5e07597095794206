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
//!
//! A relay is one future ([`Relay`]) and one poll function over both sockets:
//! each round steps both directions with tokio's `poll_read_ready` /
//! `poll_write_ready` and non-blocking operations (what a step reads it
//! writes on in the same step), until neither can go on without waiting. A
//! readiness that answered `Pending` is not asked again in the same poll: it
//! has registered the task's waker already. No `select!`, no future per direction, no timer: a relay
//! waiting for bytes holds its two sockets, two stages (empty buffers hold no
//! memory), a few counters and the key of its entry in the worker's deadline
//! table ([`Deadlines`], the idle table L7's keep-alive connections use),
//! whose one expiry task wakes it when its idle timeout may have passed. The
//! deadline is re-set lazily: moving bytes only stamps `last`, and a wake
//! from the table reads the clock and re-arms the entry if bytes moved since.
//! A drain or a reload that removes the relay's service wakes every entry;
//! such a relay then closes once quiet for [`QUIET_TO_LEAVE`].
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

use std::future::Future;
use std::io;
use std::net::Shutdown;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
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
    /// The relay could no longer stay (its worker drains, or a reload
    /// removed its service) and was quiet for [`QUIET_TO_LEAVE`].
    Drained,
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
            End::Drained => "drain",
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

/// Where a relay keeps its deadline while it waits: the worker's idle table
/// (`idle::Table`), whose one expiry task wakes each entry once its deadline
/// has passed, and wakes them all on a drain or a reload. A relay thus holds
/// no timer of its own, only the key of its entry.
pub trait Deadlines {
    /// Adds an entry, to wake `waker` once `deadline` has passed; its key.
    fn insert(&self, deadline: Instant, waker: Waker) -> usize;
    /// Whether the deadline of entry `key` has passed; keeps `waker` as the
    /// one to wake otherwise.
    fn check(&self, key: usize, waker: &Waker) -> bool;
    /// Gives entry `key` a new deadline and waker (its old one may have
    /// passed: the relay moved bytes since, or must leave sooner).
    fn reset(&self, key: usize, deadline: Instant, waker: &Waker);
    /// Removes entry `key`.
    fn remove(&self, key: usize);
}

/// What a relay answers to besides its two sockets: the table that keeps
/// its deadline, and whether it may stay open (`false` once its worker
/// drains or a reload removed its service; checked at every wake, the
/// table's drain and reload wakes included).
#[derive(Clone, Copy)]
pub struct Watch<'a> {
    /// The worker's deadline table.
    pub table: &'a dyn Deadlines,
    /// Whether the relay may stay open.
    pub stay: &'a dyn Fn() -> bool,
}

/// How long a relay must have been quiet (nothing moved either way, nothing
/// in transit) to close when it may no longer stay ([`End::Drained`]): a
/// layer-4 relay has no request boundaries, so a pause is the only sign
/// that closing it interrupts nothing.
pub const QUIET_TO_LEAVE: Duration = Duration::from_secs(1);

/// Rounds of both directions a relay makes in one poll before it lets other
/// tasks run (tokio's budget usually stops it sooner).
const ROUNDS: usize = 64;

/// Relays bytes between `client` and `server` until both directions have
/// ended, one of them fails, nothing moves for `opts.idle`, or the relay may
/// no longer stay and has been quiet for [`QUIET_TO_LEAVE`]; then closes both
/// connections. The relay is one future polling both sockets, with no timer
/// and no future per direction (see the module's doc).
pub fn relay(client: TcpStream, server: TcpStream, opts: RelayOptions, watch: Watch<'_>) -> Relay<'_> {
    Relay {
        client,
        server,
        up: Half::new(&opts),
        down: Half::new(&opts),
        last: Instant::now(),
        // A zero idle means no timeout; a year stands in for "never".
        idle: if opts.idle.is_zero() { Duration::from_secs(365 * 24 * 3600) } else { opts.idle },
        watch,
        key: None,
    }
}

/// A relay in progress: [`relay`]'s future, resolving to its
/// [`RelayOutcome`] once both connections are closed.
pub struct Relay<'a> {
    client: TcpStream,
    server: TcpStream,
    /// Client to server.
    up: Half,
    /// Server to client.
    down: Half,
    /// When bytes last moved.
    last: Instant,
    idle: Duration,
    watch: Watch<'a>,
    /// The relay's entry in the deadline table, once it has waited.
    key: Option<usize>,
}

/// One direction of a relay.
struct Half {
    stage: Stage,
    /// The reader sent FIN.
    eof: bool,
    /// Ended: FIN seen and everything read written out.
    done: bool,
    /// Bytes written to the far side.
    moved: u64,
}

impl Half {
    fn new(opts: &RelayOptions) -> Self {
        Half { stage: Stage::start(opts), eof: false, done: false, moved: 0 }
    }
}

impl Future for Relay<'_> {
    type Output = RelayOutcome;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<RelayOutcome> {
        let this = self.get_mut();
        let end = std::task::ready!(this.advance(cx));
        match end {
            End::ClientReset => pass_reset(&this.server),
            End::ServerReset => pass_reset(&this.client),
            _ => {}
        }
        let zero_copy = this.up.stage.is_pipe() || this.down.stage.is_pipe();
        Poll::Ready(RelayOutcome { client_to_server: this.up.moved, server_to_client: this.down.moved, end, zero_copy })
    }
}

impl Drop for Relay<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.watch.table.remove(key);
        }
    }
}

impl Relay<'_> {
    /// Moves what both sockets allow until neither can go on without
    /// waiting (every socket it waits on then holds this task's waker), then
    /// checks its deadlines.
    fn advance(&mut self, cx: &mut Context<'_>) -> Poll<End> {
        let mut waiting = Waiting::default();
        for _ in 0..ROUNDS {
            if self.up.done && self.down.done {
                return Poll::Ready(End::Closed);
            }
            match self.round(cx, &mut waiting) {
                Err(end) => return Poll::Ready(end),
                Ok(false) => return self.poll_watch(cx),
                Ok(true) => {}
            }
        }
        // Still busy: let the worker's other tasks run first.
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// One step of each direction; whether either changed anything.
    fn round(&mut self, cx: &mut Context<'_>, waiting: &mut Waiting) -> Result<bool, End> {
        let last = &mut self.last;
        let (client, server) = (&self.client, &self.server);
        let up = Ends { from: client, to: server, dir: Dir::ClientToServer };
        let up = pump(up, &mut self.up, self.down.done, &mut waiting.up, cx, last)?;
        let down = Ends { from: server, to: client, dir: Dir::ServerToClient };
        let down = pump(down, &mut self.down, self.up.done, &mut waiting.down, cx, last)?;
        Ok(up || down)
    }

    /// Bytes read and not yet written, both ways.
    fn in_transit(&self) -> usize {
        self.up.stage.pending() + self.down.stage.pending()
    }

    /// When the idle timeout falls, and, for a relay that may no longer stay
    /// and has nothing in transit, when it has been quiet long enough to leave.
    fn deadlines(&self, leaving: bool) -> (Instant, Option<Instant>) {
        let quiet = (leaving && self.in_transit() == 0).then(|| self.last + QUIET_TO_LEAVE);
        (self.last + self.idle, quiet)
    }

    /// With nothing to move: keeps the relay's entry in the deadline table,
    /// and ends the relay once a deadline has passed. The clock is read only
    /// when the table says the entry's deadline passed (it was set from an
    /// older `last`, so the relay may simply have moved bytes since) or when
    /// the relay may no longer stay.
    fn poll_watch(&mut self, cx: &mut Context<'_>) -> Poll<End> {
        let table = self.watch.table;
        let leaving = !(self.watch.stay)();
        let key = match self.key {
            Some(key) if table.check(key, cx.waker()) || leaving => key,
            Some(_) => return Poll::Pending,
            None => {
                let (idle, quiet) = self.deadlines(leaving);
                let key = table.insert(quiet.map_or(idle, |q| q.min(idle)), cx.waker().clone());
                self.key = Some(key);
                if !leaving {
                    return Poll::Pending;
                }
                key
            }
        };
        let now = Instant::now();
        let (idle, quiet) = self.deadlines(leaving);
        if now >= idle {
            return Poll::Ready(End::IdleTimeout);
        }
        if quiet.is_some_and(|q| now >= q) {
            return Poll::Ready(End::Drained);
        }
        table.reset(key, quiet.map_or(idle, |q| q.min(idle)), cx.waker());
        Poll::Pending
    }
}

/// One step of one direction: writes what its stage holds, ends the
/// direction once its reader's FIN has come and everything is written
/// (half-closing the far side unless the other direction has ended already:
/// the close that follows then sends the FIN), reads what the reader has and
/// writes it on at once. Whether anything changed; a failure ends the relay.
fn pump(
    ends: Ends<'_>,
    half: &mut Half,
    other_done: bool,
    waiting: &mut Wait,
    cx: &mut Context<'_>,
    last: &mut Instant,
) -> Result<bool, End> {
    if half.done {
        return Ok(false);
    }
    // Draining first keeps the stage empty, so each fill can take more.
    let mut changed = drain(ends, half, waiting, cx)?;
    if changed {
        *last = Instant::now();
    }
    if half.eof && half.stage.pending() == 0 {
        if !other_done {
            // Why ignore: if `to` is gone already, the other direction says so.
            let _ = SockRef::from(ends.to).shutdown(Shutdown::Write);
        }
        half.done = true;
        return Ok(true);
    }
    if half.eof || !half.stage.has_room() || waiting.read {
        return Ok(changed);
    }
    let Poll::Ready(fill) = poll_fill(ends.from, &mut half.stage, ends.dir, cx)? else {
        waiting.read = true;
        return Ok(changed);
    };
    match fill {
        Fill::Moved => *last = Instant::now(),
        Fill::MovedThenEof => {
            *last = Instant::now();
            half.eof = true;
        }
        Fill::Eof => half.eof = true,
        // The pipe is full: the next round drains it.
        Fill::Stalled => return Ok(true),
    }
    // What came in goes out in the same step: a small message then costs
    // one round, not two (and one reading of the clock, the fill's).
    changed = true;
    drain(ends, half, waiting, cx)?;
    Ok(changed)
}

/// Writes what the stage of `half` holds, unless the writer was found full
/// earlier in this poll; whether anything went out (the caller stamps when).
fn drain(ends: Ends<'_>, half: &mut Half, waiting: &mut Wait, cx: &mut Context<'_>) -> Result<bool, End> {
    if half.stage.pending() == 0 || waiting.write {
        return Ok(false);
    }
    match poll_drain(ends.to, &mut half.stage, half.eof, ends.dir, cx)? {
        Poll::Ready(n) => {
            half.moved += n as u64;
            half.stage.settle();
            Ok(true)
        }
        Poll::Pending => {
            waiting.write = true;
            Ok(false)
        }
    }
}

/// The two sockets of one direction: read `from`, write `to`.
#[derive(Clone, Copy)]
struct Ends<'s> {
    from: &'s TcpStream,
    to: &'s TcpStream,
    dir: Dir,
}

/// What one direction waits for since it last asked, within one poll of the
/// relay: a readiness that answered `Pending` has registered the task's
/// waker, which the event loop wakes once the socket is ready, so asking
/// again in a later round of the same poll would only take the socket's
/// waker lock to store the same waker once more.
#[derive(Debug, Default, Clone, Copy)]
struct Wait {
    /// The reader is not readable.
    read: bool,
    /// The writer is not writable.
    write: bool,
}

/// Both directions' [`Wait`], for one poll of the relay.
#[derive(Debug, Default)]
struct Waiting {
    up: Wait,
    down: Wait,
}

/// Writes what `stage` holds to `to` once it is writable; the count written.
/// Bytes after which the reader's FIN follows (`last`) are held for it
/// (`MSG_MORE`).
fn poll_drain(
    to: &TcpStream,
    stage: &mut Stage,
    last: bool,
    dir: Dir,
    cx: &mut Context<'_>,
) -> Poll<Result<usize, End>> {
    loop {
        if let Err(e) = std::task::ready!(to.poll_write_ready(cx)) {
            return Poll::Ready(Err(End::Error(Side::Internal, e.kind())));
        }
        match stage.drain(to, last) {
            Ok(n) => return Poll::Ready(Ok(n)),
            // The socket was full after all: its readiness is cleared, so the
            // next poll registers this task to be woken.
            Err(e) if is_transient(&e) => {}
            Err(e) => return Poll::Ready(Err(failure(dir.writer(), &e))),
        }
    }
}

/// Reads what `from` has into `stage` once it is readable.
fn poll_fill(from: &TcpStream, stage: &mut Stage, dir: Dir, cx: &mut Context<'_>) -> Poll<Result<Fill, End>> {
    loop {
        if let Err(e) = std::task::ready!(from.poll_read_ready(cx)) {
            return Poll::Ready(Err(End::Error(Side::Internal, e.kind())));
        }
        let closed = stage.wants_close_hint() && read_closed(from);
        match stage.fill(from, closed) {
            Ok(fill) => return Poll::Ready(Ok(fill)),
            Err(e) if is_transient(&e) => {}
            Err(e) => return Poll::Ready(Err(failure(dir.reader(), &e))),
        }
    }
}

/// Whether the event loop has seen the peer of `from` half-close (epoll's
/// `EPOLLRDHUP`), once `from` is known readable. tokio's `poll_read_ready`
/// does not say; its `ready()` future does, and, the socket being readable
/// already, answers on its first poll without registering anything (a
/// `Pending` there could only mean the readiness was cleared meanwhile,
/// and then nothing is known).
fn read_closed(from: &TcpStream) -> bool {
    let ready = std::pin::pin!(from.ready(Interest::READABLE));
    let mut cx = Context::from_waker(Waker::noop());
    matches!(ready.poll(&mut cx), Poll::Ready(Ok(r)) if r.is_read_closed())
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
        let Some(size) = b.pipe.take().map(|s| s as usize) else { return };
        #[cfg(target_os = "linux")]
        match super::splice::Pipe::new(size) {
            Ok(p) => *self = Stage::Pipe(p),
            Err(e) => tracing::debug!(error = %e, "cannot make a pipe; relaying through a buffer"),
        }
        #[cfg(not(target_os = "linux"))]
        let _ = size;
    }

    /// Whether a fill uses the hint that the reader's FIN has arrived (a
    /// buffer does, to read the FIN before writing the last bytes).
    fn wants_close_hint(&self) -> bool {
        matches!(self, Stage::Buffer(_))
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
            Stage::Buffer(b) => b.buf.len() - b.start as usize,
        }
    }

    fn has_room(&self) -> bool {
        match self {
            #[cfg(target_os = "linux")]
            Stage::Pipe(p) => p.has_room(),
            Stage::Buffer(b) => b.buf.len() < b.size as usize,
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
    /// Capacity (`u32`: a relay's buffer is far below 4 GiB; the narrower
    /// fields keep an idle relay small).
    size: u32,
    start: u32,
    /// Pipe capacity to move to on bulk (`None`: stay buffered).
    pipe: Option<u32>,
    /// A single read filled the buffer: the peer sends in bulk.
    bulk: bool,
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if self.buf.capacity() == self.size as usize {
            spare::give_back(std::mem::take(&mut self.buf));
        }
    }
}

impl Buffer {
    fn new(size: usize, pipe: Option<usize>) -> Self {
        let narrow = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Buffer { buf: Vec::new(), size: narrow(size.max(1)), start: 0, pipe: pipe.map(narrow), bulk: false }
    }

    fn fill(&mut self, from: &TcpStream, closed: bool) -> io::Result<Fill> {
        use bytes::BufMut;
        if self.buf.capacity() == 0 {
            self.buf = spare::take(self.size as usize);
        }
        let room = self.size as usize - self.buf.len();
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
        if self.buf.is_empty() && self.buf.capacity() == self.size as usize {
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
        let pending = &self.buf[self.start as usize..];
        let n = if last { send_held(to, pending)? } else { to.try_write(pending)? };
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        self.start += n as u32;
        if self.start as usize == self.buf.len() {
            // Everything went out: give the memory back, so an idle connection
            // holds no buffer (the next read takes one again).
            self.start = 0;
            spare::give_back(std::mem::take(&mut self.buf));
        }
        Ok(n)
    }
}
