//! OpenTelemetry tracing of HTTP requests (`[tracing]`): W3C trace context
//! taken from the client or started here, passed to the server, and spans for
//! the request and the phases that cost time, exported by OTLP/HTTP.
//!
//! The parts, in the order a request meets them:
//! - [`Tracer::start`] (phase 3, per worker): reads `traceparent` and
//!   `tracestate` ([`context`]), decides sampling (parent-based, else the
//!   configured ratio on the trace id), draws the span ids;
//! - the request rewrite writes [`RequestSpan::propagation`]'s
//!   `traceparent` in place of the client's;
//! - the pipeline marks the phases on the [`RequestSpan`] (cache lookup,
//!   connect, time to first byte, compression): a store of an `Instant`
//!   already read, only for a sampled request;
//! - the log phase hands the finished spans to the exporter queue
//!   ([`span::Finished`]) with a `try_send`, and the trace id to the access log;
//! - one exporter thread per configuration ([`export`]) batches, encodes
//!   with the generated OTLP types and POSTs them.
//!
//! Invariants: with no `[tracing]` table there is no tracer and no thread,
//! and each hook in the pipeline is one test of an empty `Option`; a worker
//! never waits for the exporter: a full queue drops the request's spans and
//! counts them, and so does a failed export ([`Counters`]); a request's
//! spans all carry the trace id the access log shows.

pub mod context;
mod export;
pub mod span;

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use switchyard_config::Tracing;
use switchyard_http::parse::Field;

pub use export::Exporter;
pub use span::RequestSpan;

/// Spans counted since start, carried across reloads (the metrics).
#[derive(Debug, Default)]
pub struct Counters {
    /// Spans the collector accepted.
    pub exported: AtomicU64,
    /// Spans dropped because the export queue was full.
    pub dropped_queue_full: AtomicU64,
    /// Spans dropped because their export failed (collector down, slow or refusing).
    pub dropped_export_failed: AtomicU64,
}

impl Counters {
    /// (exported, dropped with a full queue, dropped by failed exports).
    pub fn read(&self) -> (u64, u64, u64) {
        (
            self.exported.load(Ordering::Relaxed),
            self.dropped_queue_full.load(Ordering::Relaxed),
            self.dropped_export_failed.load(Ordering::Relaxed),
        )
    }
}

/// The tracing state of a generation: its exporter (none when tracing is
/// off) and the process's counters.
#[derive(Debug, Clone)]
pub struct Shared {
    /// The exporter of the generation's `[tracing]`; shared with the
    /// previous generation while that table is unchanged.
    pub exporter: Option<Arc<Exporter>>,
    /// Counted spans, kept across reloads.
    pub counters: Arc<Counters>,
}

impl Shared {
    /// The state for `config`, keeping `previous`'s exporter when its
    /// configuration is the same, else starting a new one (the old one's
    /// thread exports what it holds and ends when its last handle goes).
    pub fn new(config: Option<&Tracing>, previous: Option<&Shared>) -> Shared {
        let counters = previous.map_or_else(|| Arc::new(Counters::default()), |p| p.counters.clone());
        let exporter = config.map(|c| match previous.and_then(|p| p.exporter.as_ref()) {
            Some(kept) if kept.config() == c => kept.clone(),
            _ => Arc::new(Exporter::start(c.clone(), counters.clone())),
        });
        Shared { exporter, counters }
    }
}

/// One worker's tracer: the sampling settings, a random generator for ids,
/// and the exporter queue.
pub struct Tracer {
    exporter: Arc<Exporter>,
    /// SplitMix64 state, seeded from the system's random source.
    rng: Cell<u64>,
}

impl Tracer {
    /// A tracer feeding `exporter`.
    pub fn new(exporter: Arc<Exporter>) -> Tracer {
        let mut seed = [0u8; 8];
        // Without the system source, the clock still makes ids differ between processes.
        if aws_lc_rs::rand::fill(&mut seed).is_err() {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            seed = (now.as_nanos() as u64 ^ u64::from(std::process::id())).to_le_bytes();
        }
        Tracer { exporter, rng: Cell::new(u64::from_le_bytes(seed)) }
    }

    /// Whether this tracer feeds `exporter` (a reload kept it).
    pub fn feeds(&self, exporter: &Arc<Exporter>) -> bool {
        Arc::ptr_eq(&self.exporter, exporter)
    }

    /// The request's span context, from the head in `buf` (its `fields`):
    /// the client's trace when its `traceparent` is valid, else a new one.
    /// `started`: when the head's first byte arrived.
    pub fn start(&self, buf: &[u8], fields: &[Field], started: Instant) -> RequestSpan {
        let config = self.exporter.config();
        let mut parent = None;
        let mut traceparents = 0;
        for f in fields.iter().filter(|f| buf[f.name.clone()].eq_ignore_ascii_case(b"traceparent")) {
            traceparents += 1;
            parent = context::parse_traceparent(&buf[f.value.clone()]);
        }
        // Two `traceparent` fields cannot both be the parent: neither is.
        let parent = parent.filter(|_| traceparents == 1);
        let trace_id = match parent {
            Some(p) => p.trace_id,
            None => self.trace_id(),
        };
        let sampled = match parent {
            Some(p) if config.parent_based => p.sampled,
            _ => context::ratio_samples(&trace_id, config.sample_millionths),
        };
        let tracestate = parent.is_some() && {
            let values = fields
                .iter()
                .filter(|f| buf[f.name.clone()].eq_ignore_ascii_case(b"tracestate"))
                .map(|f| &buf[f.value.clone()]);
            context::valid_tracestate(values)
        };
        let ids = span::Ids { trace_id, server: self.span_id(), upstream: self.span_id() };
        RequestSpan::new(ids, parent.map(|p| p.span_id), sampled, tracestate, started, buf, fields)
    }

    /// Hands a finished request's spans to the exporter; never waits.
    pub(crate) fn export(&self, finished: span::Finished) {
        self.exporter.offer(finished);
    }

    fn next(&self) -> u64 {
        let x = self.rng.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
        self.rng.set(x);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn trace_id(&self) -> [u8; 16] {
        loop {
            let mut id = [0; 16];
            id[..8].copy_from_slice(&self.next().to_be_bytes());
            id[8..].copy_from_slice(&self.next().to_be_bytes());
            if id != [0; 16] {
                return id;
            }
        }
    }

    fn span_id(&self) -> [u8; 8] {
        loop {
            let id = self.next().to_be_bytes();
            if id != [0; 8] {
                return id;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_http::parse::{parse_request, HeadLimits};

    const PARENT: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

    fn tracer(sample_millionths: u32, parent_based: bool) -> Tracer {
        let Ok(endpoint) = switchyard_config::parse_endpoint(Tracing::DEFAULT_ENDPOINT) else {
            panic!("the default endpoint parses")
        };
        let config = Tracing {
            endpoint,
            sample_millionths,
            parent_based,
            service_name: "test".to_string(),
            batch_size: Tracing::DEFAULT_BATCH,
            queue_size: Tracing::DEFAULT_QUEUE,
            interval: Tracing::DEFAULT_INTERVAL,
            timeout: Tracing::DEFAULT_TIMEOUT,
        };
        Tracer::new(Arc::new(Exporter::start(config, Arc::default())))
    }

    fn start(tracer: &Tracer, headers: &str) -> RequestSpan {
        let head = format!("GET / HTTP/1.1\r\nhost: h\r\n{headers}\r\n");
        let mut fields = Vec::new();
        let limits = HeadLimits { max_bytes: 8192, max_fields: 100 };
        let parsed = parse_request(head.as_bytes(), limits, &mut fields);
        assert!(matches!(parsed, Ok(Some(_))), "{head}");
        tracer.start(head.as_bytes(), &fields, Instant::now())
    }

    fn hex(span: &RequestSpan) -> String {
        String::from_utf8_lossy(&context::trace_id_hex(&span.trace_id())).into_owned()
    }

    #[test]
    fn sampling_follows_the_parent_or_the_ratio() {
        let sampled = format!("traceparent: 00-{PARENT}-00f067aa0ba902b7-01\r\n");
        let unsampled = format!("traceparent: 00-{PARENT}-00f067aa0ba902b7-00\r\n");
        // Parent-based: the flag decides, whatever the ratio.
        let s = start(&tracer(0, true), &sampled);
        assert!(s.sampled() && hex(&s) == PARENT);
        assert!(!start(&tracer(1_000_000, true), &unsampled).sampled());
        // Not parent-based: the ratio decides, on the client's trace id.
        let s = start(&tracer(1_000_000, false), &unsampled);
        assert!(s.sampled() && hex(&s) == PARENT);
        assert!(!start(&tracer(0, false), &sampled).sampled());
        // No parent: the ratio, on a new trace id.
        let s = start(&tracer(1_000_000, true), "");
        assert!(s.sampled() && hex(&s) != PARENT);
        assert!(!start(&tracer(0, true), "").sampled());
    }

    #[test]
    fn what_is_forwarded() {
        let t = tracer(1_000_000, true);
        let parent = format!("traceparent: 00-{PARENT}-00f067aa0ba902b7-01\r\n");
        let s = start(&t, &format!("{parent}tracestate: rojo=1\r\n"));
        let p = s.propagation();
        let sent = String::from_utf8_lossy(p.traceparent).into_owned();
        let mut upstream = [0u8; 16];
        context::encode(&s.ids().upstream, &mut upstream);
        let upstream = String::from_utf8_lossy(&upstream).into_owned();
        assert_eq!(sent, format!("00-{PARENT}-{upstream}-01"));
        assert!(p.keep_tracestate);
        // An invalid tracestate is not passed on; nor one of a trace that does not continue.
        assert!(!start(&t, &format!("{parent}tracestate: Rojo=1\r\n")).propagation().keep_tracestate);
        assert!(!start(&t, "tracestate: rojo=1\r\n").propagation().keep_tracestate);
        // Two traceparent fields: neither is the parent.
        let twice = format!("{parent}traceparent: 00-{PARENT}-1111111111111111-01\r\n");
        assert_ne!(hex(&start(&t, &twice)), PARENT);
        // Ids differ request to request.
        assert_ne!(start(&t, "").trace_id(), start(&t, "").trace_id());
    }
}
