//! A pool's request queue: where an HTTP request waits when every server it
//! could go to is at its `max_connections`, instead of overloading a server
//! or being refused at once.
//!
//! One [`PoolQueue`] per pool, shared by every worker and carried across
//! reloads with the pool's servers (each `live::ServerLive` points
//! at it). Workers are single-threaded runtimes, while in-flight counts are
//! process-wide atomics, so a slot freed on one worker must be able to wake a
//! request waiting on another: the queue is a count of waiters plus a
//! [`Notify`], whose waker works across runtimes.
//!
//! - **Bounded size**: [`PoolQueue::join`] counts the waiter in, or refuses
//!   when `size` requests already wait (the caller answers 503).
//! - **Wake-up**: releasing a slot of a server with a `max_connections`
//!   (`live::ActiveGuard`'s drop; a server without one is never full, so its
//!   slots free nothing a waiter waits for) calls [`PoolQueue::released`],
//!   which wakes one waiter only when someone waits, so pools without
//!   waiters pay one fence and one atomic load per such request.
//!   A waiter registers for the wake-up *before* it looks for a free slot,
//!   and a `SeqCst` fence on both sides makes sure that either the releaser
//!   sees the waiter or the waiter sees the freed slot: no lost wake-up.
//! - **Order**: [`Notify`] wakes waiters oldest first. A woken waiter that
//!   takes a slot passes the wake-up on when others still wait, so several
//!   slots freed at once are all used. A request arriving while others wait
//!   may still take a slot freed that instant (it looks before it queues),
//!   so the order is first-in first-out among waiters, not strict over all
//!   requests.
//! - **Re-check**: a waiter also looks again every [`RECHECK`], because a
//!   slot is not the only way a server becomes available (it comes back up,
//!   leaves maintenance) and those do not notify. A waiter keeps the limits
//!   of the generation its request started under.
//! - **Timeout**: a request waits at most the pool's queue `timeout`.

use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::time::Duration;

use switchyard_config::Queue;
use tokio::sync::Notify;

use switchyard_http::error::Kind;

/// Longest sleep of a waiter between two looks for a free slot.
pub const RECHECK: Duration = Duration::from_millis(100);

/// The waiters of one pool, across all workers.
#[derive(Debug, Default)]
pub struct PoolQueue {
    /// Requests waiting now.
    waiting: AtomicU32,
    /// Woken when a slot is released and someone waits.
    freed: Notify,
}

/// A place in the queue; leaving (drop) counts the waiter out.
#[derive(Debug)]
pub struct Ticket<'a>(&'a PoolQueue);

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

impl PoolQueue {
    /// Requests waiting now (for metrics and the admin API).
    pub fn waiting(&self) -> u32 {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Counts a waiter in, unless `size` already wait.
    pub fn join(&self, size: u32) -> Option<Ticket<'_>> {
        self.waiting
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < size).then_some(n + 1))
            .ok()
            .map(|_| Ticket(self))
    }

    /// A connection slot of one of the pool's servers was released: wakes
    /// the oldest waiter, if any.
    pub fn released(&self) {
        // Pairs with the fence in `wait`: the slot's release is visible to a
        // waiter, or that waiter's count is visible here.
        fence(Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.freed.notify_one();
        }
    }

    /// Waits for `pick` to find a server (and take a slot on it), as one of at
    /// most `spec.size` waiters, for at most `spec.timeout`. Returns what `pick`
    /// found, or why the request is refused ([`Kind::QueueFull`],
    /// [`Kind::QueueTimeout`]).
    pub async fn wait<T>(&self, spec: Queue, mut pick: impl FnMut() -> Option<T>) -> Result<T, Kind> {
        let Some(_ticket) = self.join(spec.size) else {
            return Err(Kind::QueueFull);
        };
        let deadline = tokio::time::Instant::now() + spec.timeout;
        loop {
            let notified = self.freed.notified();
            tokio::pin!(notified);
            // Registered before looking, so a release after the look wakes us.
            notified.as_mut().enable();
            fence(Ordering::SeqCst);
            if let Some(server) = pick() {
                if self.waiting.load(Ordering::SeqCst) > 1 {
                    // Others wait too: let the next one look, in case more
                    // than one slot is free.
                    self.freed.notify_one();
                }
                return Ok(server);
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err(Kind::QueueTimeout);
            }
            let _ = tokio::time::timeout_at(deadline.min(now + RECHECK), notified).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::sync::Arc;

    fn spec(size: u32, ms: u64) -> Queue {
        Queue { size, timeout: Duration::from_millis(ms) }
    }

    #[test]
    fn the_queue_is_bounded() {
        let q = PoolQueue::default();
        let a = q.join(2);
        let b = q.join(2);
        assert!(a.is_some() && b.is_some());
        assert!(q.join(2).is_none(), "a third waiter is refused");
        drop(a);
        assert!(q.join(2).is_some(), "a place freed is taken again");
        assert_eq!(q.waiting(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_times_out_when_nothing_frees() {
        let q = PoolQueue::default();
        let looks = Cell::new(0);
        let got: Result<usize, Kind> = q
            .wait(spec(1, 1000), || {
                looks.set(looks.get() + 1);
                None
            })
            .await;
        assert_eq!(got, Err(Kind::QueueTimeout));
        assert!(looks.get() >= 2, "it looked again while waiting");
        assert_eq!(q.waiting(), 0, "the waiter left the queue");
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_queue_refuses_at_once() {
        let q = PoolQueue::default();
        let _held = q.join(1);
        assert_eq!(q.wait(spec(1, 1000), || Some(0)).await, Err(Kind::QueueFull));
    }

    #[test]
    fn a_release_on_another_thread_wakes_the_waiter() {
        let q = Arc::new(PoolQueue::default());
        let free = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime");
        let (q2, free2) = (q.clone(), free.clone());
        let releaser = std::thread::spawn(move || {
            while q2.waiting() == 0 {
                std::thread::yield_now();
            }
            free2.store(true, Ordering::SeqCst);
            q2.released();
        });
        let got = rt.block_on(q.wait(spec(4, 60_000), || free.load(Ordering::SeqCst).then_some(3)));
        assert_eq!(got, Ok(3));
        releaser.join().expect("releaser");
    }
}
