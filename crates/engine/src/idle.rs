//! Client connections waiting for their next request: one table per worker
//! holds their deadlines and wakers, and one timer serves them all.
//!
//! An idle keep-alive connection is most of what a busy balancer holds, so
//! what it keeps is what its memory is. Waiting with a timer of its own and
//! the worker's two notifications (drain, reload) cost a connection's future
//! about 300 bytes (tokio's `Sleep` is 96, each `Notified` 64, a readiness
//! future its own waiter); here a connection keeps a [`Wait`] of a few words
//! and an [`Entry`] in its worker's [`Table`] while it waits, and its socket's
//! readiness is polled without a waiter of its own
//! ([`ClientStream::poll_ready`]).
//!
//! The worker's [`expire`] task sleeps until the earliest deadline in the
//! table (no earlier than [`GRANULARITY`] after its last pass, so a crowd of
//! connections with spread deadlines costs a pass per granule, not one per
//! connection; only a new entry whose deadline comes before the one the task
//! sleeps until brings a pass forward), marks the entries whose deadline has
//! passed and wakes them.
//! On a drain or a reload it wakes every entry: each checks whether it
//! still may wait ([`Wait`]'s `poll`). A connection whose bytes arrive
//! removes its entry when its wait ends, which is what the keep-alive path
//! pays: a slab insert and remove, no timer.
//!
//! A layer-4 relay keeps its idle deadline here the same way (the table
//! implements [`crate::relay::tcp::Deadlines`]): its entry lives as long as
//! the relay, moving bytes does not touch it, and a wake from the expiry task
//! makes the relay read the clock and either end or re-set its deadline.
//!
//! Invariants: an entry exists only while its [`Wait`] (or its relay) does
//! (dropping either removes it); an expired entry's wait ends with `false` on
//! its next poll; a deadline fires at most [`GRANULARITY`] late, never early.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use slab::Slab;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::transport::ClientStream;
use crate::worker::Worker;

/// How late a deadline may fire, at most: the expiry task's passes are at
/// least this far apart.
pub const GRANULARITY: Duration = Duration::from_millis(50);

/// The waiting connections of one worker.
#[derive(Default)]
pub struct Table {
    entries: RefCell<Slab<Entry>>,
    /// The time the expiry task sleeps until; `None` while it sleeps until
    /// told ([`Table::rearm`]) because the table was empty.
    armed: Cell<Option<Instant>>,
    /// Tells the expiry task to sleep until an earlier deadline.
    rearm: Notify,
}

/// One waiting connection.
struct Entry {
    deadline: Instant,
    waker: Waker,
    /// The deadline has passed.
    expired: bool,
}

impl Table {
    /// Adds a waiting connection; its key.
    fn insert(&self, deadline: Instant, waker: Waker) -> usize {
        let key = self.entries.borrow_mut().insert(Entry { deadline, waker, expired: false });
        self.arm(deadline);
        key
    }

    /// Brings the expiry task's next pass forward to `deadline` if it
    /// sleeps until later.
    fn arm(&self, deadline: Instant) {
        if self.armed.get().is_none_or(|at| deadline < at) {
            self.armed.set(Some(deadline));
            self.rearm.notify_one();
        }
    }

    /// Gives the entry `key` a new deadline and waker, expired or not.
    fn reset(&self, key: usize, deadline: Instant, waker: &Waker) {
        if let Some(entry) = self.entries.borrow_mut().get_mut(key) {
            entry.deadline = deadline;
            entry.expired = false;
            if !entry.waker.will_wake(waker) {
                entry.waker.clone_from(waker);
            }
        }
        self.arm(deadline);
    }

    /// Whether the entry's deadline has passed; keeps `waker` as the one to
    /// wake otherwise.
    fn check(&self, key: usize, waker: &Waker) -> bool {
        let mut entries = self.entries.borrow_mut();
        let Some(entry) = entries.get_mut(key) else { return true };
        if !entry.expired && !entry.waker.will_wake(waker) {
            entry.waker.clone_from(waker);
        }
        entry.expired
    }

    fn remove(&self, key: usize) {
        self.entries.borrow_mut().try_remove(key);
    }

    /// Connections waiting now.
    pub fn len(&self) -> usize {
        self.entries.borrow().len()
    }

    /// Whether no connection waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Wakes every waiting connection (a drain or a reload: each checks
    /// whether it may go on waiting).
    pub fn wake_all(&self) {
        // Wakers are taken out first: a wake on this thread only schedules.
        let wakers: Vec<Waker> = self.entries.borrow().iter().map(|(_, e)| e.waker.clone()).collect();
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Marks and wakes the entries whose deadline is not after `now`;
    /// returns the earliest deadline left.
    fn expire(&self, now: Instant) -> Option<Instant> {
        let mut due = Vec::new();
        let mut next: Option<Instant> = None;
        for (_, e) in self.entries.borrow_mut().iter_mut().filter(|(_, e)| !e.expired) {
            if e.deadline <= now {
                e.expired = true;
                due.push(e.waker.clone());
            } else if next.is_none_or(|n| e.deadline < n) {
                next = Some(e.deadline);
            }
        }
        due.into_iter().for_each(Waker::wake);
        next
    }
}

/// Expires the idle connections of `worker` at their deadlines and wakes
/// them all on a drain or a reload: one task per worker, for its life (the
/// worker's runtime drops it when the worker ends).
pub async fn expire(worker: Rc<Worker>) {
    run(&worker.idle, &worker.drain, &worker.reloaded).await;
}

/// The expiry of `table`: [`expire`]'s loop, which wakes every entry when
/// `drain` or `reloaded` is notified. Never ends.
pub(crate) async fn run(table: &Table, drain: &Notify, reloaded: &Notify) {
    loop {
        let until = table.armed.get();
        tokio::select! {
            () = sleep_until(until) => {
                let now = Instant::now();
                let next = table.expire(now);
                table.armed.set(next.map(|n| n.max(now + GRANULARITY)));
            }
            () = table.rearm.notified() => {}
            () = drain.notified() => table.wake_all(),
            () = reloaded.notified() => table.wake_all(),
        }
    }
}

/// A layer-4 relay's idle deadline is an entry here too
/// ([`crate::relay::tcp::Deadlines`]): a relay waiting for bytes holds no
/// timer of its own.
impl crate::relay::tcp::Deadlines for Table {
    fn insert(&self, deadline: Instant, waker: Waker) -> usize {
        Table::insert(self, deadline, waker)
    }

    fn check(&self, key: usize, waker: &Waker) -> bool {
        Table::check(self, key, waker)
    }

    fn reset(&self, key: usize, deadline: Instant, waker: &Waker) {
        Table::reset(self, key, deadline, waker);
    }

    fn remove(&self, key: usize) {
        Table::remove(self, key);
    }
}

/// Sleeps until `at`, or for ever.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A connection's wait for the first bytes of its next request, until
/// `deadline`. Resolves to `true` when the socket is readable (bytes, an
/// end or an error: the read says which), `false` when the deadline passed,
/// the worker drains or `still` says the connection may not wait any more
/// (checked at each wake, a drain's and a reload's included).
pub struct Wait<'a, S, F> {
    stream: &'a mut S,
    worker: &'a Worker,
    deadline: Instant,
    still: F,
    key: Option<usize>,
}

impl<'a, S: ClientStream, F: FnMut() -> bool> Wait<'a, S, F> {
    /// A wait on `stream` until `deadline` (`still`: see [`Wait`]).
    pub fn new(stream: &'a mut S, worker: &'a Worker, deadline: Instant, still: F) -> Self {
        Wait { stream, worker, deadline, still, key: None }
    }
}

impl<S: ClientStream, F: FnMut() -> bool + Unpin> Future for Wait<'_, S, F> {
    type Output = bool;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<bool> {
        let this = self.get_mut();
        let table = &this.worker.idle;
        if this.worker.draining.get() || !(this.still)() {
            return Poll::Ready(false);
        }
        if this.key.is_some_and(|key| table.check(key, cx.waker())) {
            return Poll::Ready(false);
        }
        match this.stream.poll_ready(cx) {
            Poll::Ready(r) => Poll::Ready(r.is_ok()),
            Poll::Pending => {
                if this.key.is_none() {
                    this.key = Some(table.insert(this.deadline, cx.waker().clone()));
                }
                Poll::Pending
            }
        }
    }
}

impl<S, F> Drop for Wait<'_, S, F> {
    fn drop(&mut self) {
        if let Some(key) = self.key {
            self.worker.idle.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waker() -> Waker {
        Waker::noop().clone()
    }

    #[tokio::test(start_paused = true)]
    async fn entries_expire_at_their_deadline_not_before() {
        let table = Table::default();
        let now = Instant::now();
        let a = table.insert(now + Duration::from_secs(1), waker());
        let b = table.insert(now + Duration::from_secs(3), waker());
        assert_eq!(table.expire(now + Duration::from_millis(999)), Some(now + Duration::from_secs(1)));
        assert!(!table.check(a, &waker()));
        assert_eq!(table.expire(now + Duration::from_secs(1)), Some(now + Duration::from_secs(3)));
        assert!(table.check(a, &waker()), "a's deadline passed");
        assert!(!table.check(b, &waker()));
        table.remove(a);
        table.remove(b);
        assert!(table.is_empty());
        assert_eq!(table.expire(now + Duration::from_secs(9)), None);
    }

    #[tokio::test(start_paused = true)]
    async fn an_earlier_deadline_rearms_the_expiry() {
        let table = Table::default();
        let now = Instant::now();
        table.insert(now + Duration::from_secs(60), waker());
        assert_eq!(table.armed.get(), Some(now + Duration::from_secs(60)));
        table.insert(now + Duration::from_secs(90), waker());
        assert_eq!(table.armed.get(), Some(now + Duration::from_secs(60)), "a later deadline changes nothing");
        table.insert(now + Duration::from_secs(5), waker());
        assert_eq!(table.armed.get(), Some(now + Duration::from_secs(5)));
    }
}
