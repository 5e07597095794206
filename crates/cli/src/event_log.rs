//! The event log's syslog output (`[event_log]`): every event the process
//! logs to standard error is also sent as an RFC 5424 message.
//!
//! The subscriber is built at start, before any configuration is read, with
//! an empty slot for this output ([`layer`]); [`start`] fills the slot once
//! the configuration names a receiver. An event is formatted on the thread
//! that logs it and handed to one sender thread through a bounded queue with
//! `try_send`: a worker never waits on syslog; when the queue is full the
//! event is dropped (standard error still has it).

use std::io::Write;
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::OnceLock;

use tracing::Level;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::{reload, Layer, Registry};

/// Events waiting for the sender thread; more are dropped.
const QUEUE: usize = 4096;

type Slot = Option<Box<dyn Layer<Registry> + Send + Sync>>;

static HANDLE: OnceLock<reload::Handle<Slot, Registry>> = OnceLock::new();

/// The empty slot for the syslog output, to put first in the subscriber.
pub fn layer() -> reload::Layer<Slot, Registry> {
    let (layer, handle) = reload::Layer::new(None);
    let _ = HANDLE.set(handle);
    layer
}

/// Starts sending events to `config`'s receiver.
///
/// # Errors
/// The receiver's socket cannot be opened.
pub fn start(config: &switchyard_config::EventLog) -> anyhow::Result<()> {
    let mut sender = switchyard_engine::syslog::Sender::connect(&config.syslog, "switchyard", true)?;
    let (tx, rx) = sync_channel::<(u8, Vec<u8>)>(QUEUE);
    std::thread::Builder::new().name("switchyard-syslog".into()).spawn(move || {
        for (severity, line) in rx {
            // A lost event stays on standard error; nothing more to do.
            let _ = sender.send(severity, "event", &line);
        }
    })?;
    let output = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .without_time()
        .with_target(false)
        .with_writer(Events { tx })
        .boxed();
    if let Some(handle) = HANDLE.get() {
        handle.reload(Some(output))?;
    }
    Ok(())
}

/// Makes one [`Event`] writer per logged event.
struct Events {
    tx: SyncSender<(u8, Vec<u8>)>,
}

impl<'a> MakeWriter<'a> for Events {
    type Writer = Event;

    fn make_writer(&'a self) -> Event {
        Event { severity: 6, line: Vec::new(), tx: self.tx.clone() }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Event {
        // RFC 5424 severities: error 3, warning 4, informational 6, debug 7.
        let severity = match *meta.level() {
            Level::ERROR => 3,
            Level::WARN => 4,
            Level::INFO => 6,
            Level::DEBUG | Level::TRACE => 7,
        };
        Event { severity, line: Vec::new(), tx: self.tx.clone() }
    }
}

/// One formatted event, queued for the sender when dropped.
struct Event {
    severity: u8,
    line: Vec<u8>,
    tx: SyncSender<(u8, Vec<u8>)>,
}

impl Write for Event {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.line.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if !self.line.is_empty() {
            let _ = self.tx.try_send((self.severity, std::mem::take(&mut self.line)));
        }
    }
}
