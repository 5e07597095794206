//! The access log: one line per finished request, formatted on the worker and
//! written by one writer thread, without ever blocking a worker.
//!
//! Each worker holds a [`LineWriter`]. It formats a [`Record`] into its own
//! scratch buffer, then appends the line to its pending buffer, shared with the
//! writer thread under a mutex taken with `try_lock` only. The writer thread
//! holds that mutex just long enough to swap the pending buffer for an empty
//! one (double buffering), then writes the batch. So:
//!
//! - a worker never waits: if the writer is swapping at that instant, the line
//!   stays in the worker's scratch and goes out with its next line (or when
//!   the `LineWriter` is dropped);
//! - the queue is bounded: a line that would take a pending buffer past
//!   [`Options::capacity`] bytes is dropped and counted ([`AccessLog::dropped`]);
//! - the writer writes at least every [`Options::flush_interval`], and sooner
//!   when a pending buffer passes a high-water mark;
//! - a line logged after [`AccessLog::reopen`] returns goes to the reopened
//!   file (the writer swaps the buffers out before it reopens, and writes
//!   them after), so rotation by rename loses nothing.
//!
//! Formatting allocates nothing per line beyond buffer growth ([`format`]).
//!
//! A syslog target ([`syslog`]) gets one RFC 5424 message per line,
//! sent by the writer thread; a line the receiver does not take within the
//! send timeout is dropped and counted like any other.

pub(crate) mod format;
pub mod syslog;

use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, TryLockError};
use std::thread::{JoinHandle, Thread};
use std::time::Duration;

use switchyard_config::{LogFormat, LogTarget};

use crate::metrics::Record;
use format::Clock;

/// Tuning of an access log.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Bytes a worker may have waiting for the writer before its lines are dropped.
    pub capacity: usize,
    /// Longest time a line waits before it is written.
    pub flush_interval: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options { capacity: 4 << 20, flush_interval: Duration::from_millis(100) }
    }
}

/// A pending buffer past this many bytes wakes the writer early.
const HIGH_WATER: usize = 64 << 10;
/// Buffers grown past this by a burst are shrunk back after their write.
const KEEP_CAPACITY: usize = 1 << 20;
/// Longest [`AccessLog::flush`] waits.
const FLUSH_WAIT: Duration = Duration::from_secs(5);

/// Lines a worker handed over, waiting for the writer.
#[derive(Debug, Default)]
struct Pending {
    buf: Vec<u8>,
    lines: u64,
}

/// One worker's pending buffer.
#[derive(Debug, Default)]
struct Slot {
    pending: Mutex<Pending>,
}

/// State shared by the handles, the line writers and the writer thread.
#[derive(Debug)]
struct Shared {
    format: LogFormat,
    options: Options,
    slots: Mutex<Vec<Arc<Slot>>>,
    stop: AtomicBool,
    reopen: AtomicBool,
    dropped: AtomicU64,
    written: AtomicU64,
    /// Writer cycles completed, for [`AccessLog::flush`].
    cycles: Mutex<u64>,
    cycle_done: Condvar,
}

/// Poisoning cannot leave these buffers inconsistent (nothing panics while
/// holding them), so a poisoned lock is used as is.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// An open access log and its writer thread. Cheap to clone; the thread
/// stops (after writing everything) with [`AccessLog::shutdown`] or when the
/// last clone is dropped.
#[derive(Debug, Clone)]
pub struct AccessLog {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    shared: Arc<Shared>,
    writer: Thread,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl AccessLog {
    /// Opens the configured target (a file is created if missing and appended
    /// to) and starts the writer thread.
    pub fn open(config: &switchyard_config::AccessLog) -> io::Result<AccessLog> {
        AccessLog::open_with(config, Options::default())
    }

    /// [`AccessLog::open`] with explicit tuning.
    pub fn open_with(config: &switchyard_config::AccessLog, options: Options) -> io::Result<AccessLog> {
        let sink = match &config.target {
            LogTarget::Stdout => Sink::Stdout,
            LogTarget::File(path) => Sink::File { file: open_file(path)?, path: path.clone() },
            LogTarget::Syslog(syslog) => Sink::Syslog(self::syslog::Sender::connect(syslog, "switchyard", true)?),
        };
        AccessLog::start(sink, config.format, options)
    }

    fn start(sink: Sink, format: LogFormat, options: Options) -> io::Result<AccessLog> {
        let shared = Arc::new(Shared {
            format,
            options,
            slots: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            reopen: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
            written: AtomicU64::new(0),
            cycles: Mutex::new(0),
            cycle_done: Condvar::new(),
        });
        let for_thread = shared.clone();
        let thread =
            std::thread::Builder::new().name("switchyard-log".into()).spawn(move || write_loop(&for_thread, sink))?;
        let writer = thread.thread().clone();
        Ok(AccessLog { inner: Arc::new(Inner { shared, writer, thread: Mutex::new(Some(thread)) }) })
    }

    /// Whether two handles are the same open log.
    pub fn same(&self, other: &AccessLog) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// A handle for one worker (call once per worker thread).
    pub fn line_writer(&self) -> LineWriter {
        let slot = Arc::new(Slot::default());
        lock(&self.inner.shared.slots).push(slot.clone());
        LineWriter {
            shared: self.inner.shared.clone(),
            slot,
            writer: self.inner.writer.clone(),
            local: RefCell::new(Local { scratch: Vec::with_capacity(1024), lines: 0, clock: Clock::new() }),
        }
    }

    /// Asks the writer to reopen a file target (after a rotation by rename;
    /// SIGUSR1). Returns at once; lines logged from now on go to the new
    /// file. A failure to reopen is logged and the old file kept.
    pub fn reopen(&self) {
        self.inner.shared.reopen.store(true, Ordering::Release);
        self.inner.writer.unpark();
    }

    /// Lines dropped so far because a worker's pending buffer was full, the
    /// log was shut down, or a write failed.
    pub fn dropped(&self) -> u64 {
        self.inner.shared.dropped.load(Ordering::Relaxed)
    }

    /// Lines written so far.
    pub fn written(&self) -> u64 {
        self.inner.shared.written.load(Ordering::Relaxed)
    }

    /// Waits (up to 5 s; never call it on a worker) until every line handed
    /// over before the call is written. Lines still in a worker's scratch
    /// after a contended hand-over are not covered.
    pub fn flush(&self) {
        let shared = &self.inner.shared;
        let mut cycles = lock(&shared.cycles);
        // The cycle running now may have swapped before our lines arrived:
        // wait for the one after it.
        let target = *cycles + 2;
        self.inner.writer.unpark();
        let deadline = std::time::Instant::now() + FLUSH_WAIT;
        while *cycles < target && !shared.stop.load(Ordering::Acquire) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            cycles = shared.cycle_done.wait_timeout(cycles, left).unwrap_or_else(PoisonError::into_inner).0;
            self.inner.writer.unpark();
        }
    }

    /// Writes everything handed over and stops the writer thread. Lines
    /// logged afterwards are dropped (and counted). Call it after the
    /// workers have stopped logging; calling it again does nothing.
    pub fn shutdown(&self) {
        self.inner.stop();
    }
}

impl Inner {
    fn stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
        self.writer.unpark();
        if let Some(t) = lock(&self.thread).take() {
            let _ = t.join();
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A worker's handle on the access log. Not shared between threads: each
/// worker gets its own from [`AccessLog::line_writer`].
#[derive(Debug)]
pub struct LineWriter {
    shared: Arc<Shared>,
    slot: Arc<Slot>,
    writer: Thread,
    local: RefCell<Local>,
}

/// Lines formatted but not yet handed over, and the worker's time cache.
#[derive(Debug)]
struct Local {
    scratch: Vec<u8>,
    lines: u64,
    clock: Clock,
}

impl LineWriter {
    /// Formats `record` and hands it to the writer, or drops it (counted)
    /// when the worker's pending buffer is full. Never blocks.
    pub fn log(&self, record: &Record) {
        let shared = &self.shared;
        // Not re-entered (nothing here calls back), so the borrow always
        // succeeds; were it not to, dropping the line beats panicking.
        let Ok(mut local) = self.local.try_borrow_mut() else {
            shared.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if shared.stop.load(Ordering::Relaxed) {
            shared.dropped.fetch_add(1 + local.lines, Ordering::Relaxed);
            local.scratch.clear();
            local.lines = 0;
            return;
        }
        let Local { scratch, clock, .. } = &mut *local;
        match shared.format {
            LogFormat::Json => format::json(scratch, record, clock),
            LogFormat::Combined => format::combined(scratch, record, clock),
        }
        local.lines += 1;
        self.hand_over(&mut local, false);
    }

    /// Moves the scratch lines into the pending buffer: with `try_lock`
    /// unless `wait` (only when dropping the writer).
    fn hand_over(&self, local: &mut Local, wait: bool) {
        let capacity = self.shared.options.capacity;
        let mut pending = match self.slot.pending.try_lock() {
            Ok(p) => p,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) if wait => lock(&self.slot.pending),
            Err(TryLockError::WouldBlock) => {
                // The writer is swapping right now: keep the lines for the
                // next call, unless they alone are past the bound.
                if local.scratch.len() > capacity {
                    self.shared.dropped.fetch_add(local.lines, Ordering::Relaxed);
                    local.scratch.clear();
                    local.lines = 0;
                }
                return;
            }
        };
        let before = pending.buf.len();
        if before + local.scratch.len() > capacity {
            self.shared.dropped.fetch_add(local.lines, Ordering::Relaxed);
        } else {
            pending.buf.extend_from_slice(&local.scratch);
            pending.lines += local.lines;
        }
        let crossed = before < HIGH_WATER.min(capacity / 2) && pending.buf.len() >= HIGH_WATER.min(capacity / 2);
        drop(pending);
        local.scratch.clear();
        local.lines = 0;
        if crossed {
            self.writer.unpark();
        }
    }
}

impl Drop for LineWriter {
    fn drop(&mut self) {
        let local = self.local.get_mut();
        if local.lines > 0 && self.shared.stop.load(Ordering::Acquire) {
            self.shared.dropped.fetch_add(local.lines, Ordering::Relaxed);
        } else if local.lines > 0 {
            let mut local = std::mem::replace(local, Local { scratch: Vec::new(), lines: 0, clock: Clock::new() });
            self.hand_over(&mut local, true);
            self.writer.unpark();
        }
    }
}

/// Where the writer thread writes.
enum Sink {
    Stdout,
    File {
        path: PathBuf,
        file: File,
    },
    Syslog(self::syslog::Sender),
    #[cfg(test)]
    Custom(Box<dyn Write + Send>),
}

fn open_file(path: &std::path::Path) -> io::Result<File> {
    OpenOptions::new().append(true).create(true).open(path)
}

impl Sink {
    /// Writes a batch of `lines` lines; on failure, the error and how many
    /// of the lines were lost.
    fn write_batch(&mut self, buf: &[u8], lines: u64) -> Result<(), (io::Error, u64)> {
        let Sink::Syslog(sender) = self else {
            return self.write_all(buf).map_err(|e| (e, lines));
        };
        let mut failed = (None, 0);
        for line in buf.split_inclusive(|&b| b == b'\n') {
            if let Err(e) = sender.send(self::syslog::INFO, "access", line) {
                failed = (Some(e), failed.1 + 1);
            }
        }
        match failed {
            (Some(e), lost) => Err((e, lost)),
            _ => Ok(()),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Sink::Stdout => {
                let mut out = io::stdout().lock();
                out.write_all(buf)?;
                out.flush()
            }
            Sink::File { file, .. } => file.write_all(buf),
            Sink::Syslog(_) => Ok(()),
            #[cfg(test)]
            Sink::Custom(w) => w.write_all(buf),
        }
    }

    fn reopen(&mut self) {
        if let Sink::File { path, file } = self {
            match open_file(path) {
                Ok(new) => *file = new,
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot reopen the access log; still writing to the old file")
                }
            }
        }
    }
}

/// The writer thread: every interval (or when woken), swap every worker's
/// pending buffer out, reopen if asked, write the batches.
fn write_loop(shared: &Shared, mut sink: Sink) {
    let mut spares: Vec<Vec<u8>> = Vec::new();
    let mut batches: Vec<(Vec<u8>, u64)> = Vec::new();
    let mut failing = false;
    loop {
        let stopping = shared.stop.load(Ordering::Acquire);
        {
            let mut slots = lock(&shared.slots);
            for slot in slots.iter() {
                let mut p = lock(&slot.pending);
                if p.lines > 0 {
                    let buf = std::mem::replace(&mut p.buf, spares.pop().unwrap_or_default());
                    batches.push((buf, std::mem::take(&mut p.lines)));
                }
            }
            // A slot only the list still holds belongs to a dropped LineWriter,
            // whose last lines were just taken.
            slots.retain(|s| Arc::strong_count(s) > 1);
        }
        if shared.reopen.swap(false, Ordering::AcqRel) {
            sink.reopen();
        }
        for (mut buf, lines) in batches.drain(..) {
            match sink.write_batch(&buf, lines) {
                Ok(()) => {
                    shared.written.fetch_add(lines, Ordering::Relaxed);
                    failing = false;
                }
                Err((e, lost)) => {
                    shared.written.fetch_add(lines - lost.min(lines), Ordering::Relaxed);
                    shared.dropped.fetch_add(lost.min(lines), Ordering::Relaxed);
                    if !failing {
                        tracing::warn!(error = %e, "access log write failed; lines are dropped until it works again");
                    }
                    failing = true;
                }
            }
            buf.clear();
            if buf.capacity() > KEEP_CAPACITY {
                buf.shrink_to(HIGH_WATER);
            }
            spares.push(buf);
        }
        *lock(&shared.cycles) += 1;
        shared.cycle_done.notify_all();
        if stopping {
            return;
        }
        std::thread::park_timeout(shared.options.flush_interval);
    }
}

#[cfg(test)]
mod tests;
