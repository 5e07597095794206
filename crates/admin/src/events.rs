//! The live feed of the dashboard: one sampling task, any number of
//! server-sent-event subscribers.
//!
//! Invariants:
//! - One sampler per [`AdminState`], whatever the number of subscribers: it
//!   snapshots [`Backend::stats`](crate::Backend::stats) every interval,
//!   turns two consecutive snapshots into a [`Sample`], encodes it once and
//!   broadcasts the text.
//! - Memory is bounded: the broadcast channel holds [`CHANNEL_CAPACITY`]
//!   samples, and a subscriber that falls behind skips to the newest instead
//!   of queueing; the history ring holds the configured number of samples.
//! - A new subscriber first gets one `history` event (a JSON array of the
//!   retained samples, oldest first) so its charts start full, then a `stats`
//!   event per sample. It may see one sample in both; clients skip samples
//!   whose `t` is not newer than the last one they plotted.
//! - Closing the state (server shutdown) ends the sampler and every stream,
//!   so graceful shutdown is not held open by dashboards.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, Stream, StreamExt};
use tokio::sync::{broadcast, watch};

use crate::sample::{Sample, Snapshot};
use crate::{AdminState, Inner};

/// Samples a subscriber may fall behind before it skips ahead.
pub(crate) const CHANNEL_CAPACITY: usize = 8;

/// The shared sampler's output and lifecycle.
pub(crate) struct Events {
    tx: broadcast::Sender<Arc<str>>,
    history: Mutex<VecDeque<Arc<str>>>,
    history_len: usize,
    interval: Duration,
    started: AtomicBool,
    closed: watch::Sender<bool>,
}

impl Events {
    pub(crate) fn new(interval: Duration, history_len: usize) -> Self {
        let (tx, _) = broadcast::channel(CHANNEL_CAPACITY);
        let (closed, _) = watch::channel(false);
        Events {
            tx,
            history: Mutex::new(VecDeque::with_capacity(history_len)),
            history_len,
            interval,
            started: AtomicBool::new(false),
            closed,
        }
    }

    /// Ends the sampler and every open stream.
    pub(crate) fn close(&self) {
        self.closed.send_replace(true);
    }

    fn publish(&self, sample: &Sample) {
        let Ok(text) = serde_json::to_string(sample) else {
            return;
        };
        let text: Arc<str> = text.into();
        if let Ok(mut history) = self.history.lock() {
            if history.len() >= self.history_len {
                history.pop_front();
            }
            if self.history_len > 0 {
                history.push_back(text.clone());
            }
        }
        // No subscriber is not an error: the history still fills.
        let _ = self.tx.send(text);
    }

    fn history_json(&self) -> String {
        let history = self.history.lock().map(|h| h.iter().cloned().collect::<Vec<_>>()).unwrap_or_default();
        let mut json = String::from("[");
        for (i, sample) in history.iter().enumerate() {
            if i > 0 {
                json.push(',');
            }
            json.push_str(sample);
        }
        json.push(']');
        json
    }
}

/// Starts the sampler of `state` unless it runs already. Needs a tokio runtime.
pub(crate) fn start_sampler(state: &AdminState) {
    let events = &state.inner.events;
    if events.started.swap(true, Ordering::AcqRel) {
        return;
    }
    let weak = Arc::downgrade(&state.inner);
    let closed = events.closed.subscribe();
    tokio::spawn(sample_loop(weak, closed, events.interval));
}

/// Resolves once `closed` turns true (or its sender is gone).
async fn until_closed(closed: &mut watch::Receiver<bool>) {
    let _ = closed.wait_for(|c| *c).await;
}

/// Snapshots the backend every `interval` until the state is closed or dropped.
async fn sample_loop(state: Weak<Inner>, mut closed: watch::Receiver<bool>, interval: Duration) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut previous: Option<Snapshot> = None;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = until_closed(&mut closed) => return,
        }
        let Some(inner) = state.upgrade() else {
            return;
        };
        let backend = inner.backend.clone();
        let Ok(stats) = tokio::task::spawn_blocking(move || backend.stats()).await else {
            continue;
        };
        let now = Snapshot::now(stats);
        if let Some(before) = &previous {
            inner.events.publish(&Sample::between(before, &now));
        }
        previous = Some(now);
    }
}

/// `GET /api/v1/events`: the history, then one `stats` event per sample.
pub(crate) async fn stream(State(state): State<AdminState>) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    start_sampler(&state);
    let events = &state.inner.events;
    // Subscribe before reading the history so no sample falls between the two.
    let rx = events.tx.subscribe();
    let closed = events.closed.subscribe();
    let history = Event::default().event("history").data(events.history_json());
    let live = stream::unfold((rx, closed), |(mut rx, mut closed)| async move {
        loop {
            tokio::select! {
                received = rx.recv() => match received {
                    Ok(text) => return Some((Ok(Event::default().event("stats").data(&*text)), (rx, closed))),
                    // Fell behind: the receiver has already skipped to the oldest retained sample.
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
                _ = until_closed(&mut closed) => return None,
            }
        }
    });
    Sse::new(stream::once(async move { Ok(history) }).chain(live)).keep_alive(KeepAlive::default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::StatsView;

    fn sample() -> Sample {
        let a = Snapshot::now(StatsView::default());
        let b = Snapshot::now(StatsView::default());
        Sample::between(&a, &b)
    }

    #[test]
    fn a_subscriber_that_never_reads_holds_a_bounded_backlog() {
        let events = Events::new(Duration::from_secs(1), 5);
        let mut idle = events.tx.subscribe();
        for _ in 0..1000 {
            events.publish(&sample());
        }
        // The channel is a fixed ring: the reader learns it lagged, then finds
        // only the newest CHANNEL_CAPACITY samples, not the thousand sent.
        assert!(matches!(idle.try_recv(), Err(broadcast::error::TryRecvError::Lagged(_))));
        let mut readable = 0;
        while idle.try_recv().is_ok() {
            readable += 1;
        }
        assert_eq!(readable, CHANNEL_CAPACITY);
        let history: serde_json::Value = serde_json::from_str(&events.history_json()).expect("JSON");
        assert_eq!(history.as_array().map(Vec::len), Some(5));
    }

    #[test]
    fn no_history_is_kept_when_asked_for_none() {
        let events = Events::new(Duration::from_secs(1), 0);
        events.publish(&sample());
        assert_eq!(events.history_json(), "[]");
    }
}
