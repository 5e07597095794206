//! The exporter: a bounded queue the workers offer finished requests to, and
//! one thread that batches them and sends them to the collector by OTLP/HTTP
//! (protobuf bodies, the generated types of `opentelemetry-proto`).
//!
//! The thread sends a batch when it holds `batch_size` requests or when the
//! oldest has waited `interval`; one POST is bounded by `timeout`. While a
//! POST is slow the queue fills and further requests are dropped at
//! [`Exporter::offer`], counted in `dropped_queue_full`; a batch whose POST
//! fails (refused, unreachable, not 2xx) is dropped and counted in
//! `dropped_export_failed`. The thread ends after a last export once every
//! handle on the queue is gone (a reload replaced the `[tracing]` table, or
//! the process stops).

use std::sync::atomic::Ordering;
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Instant;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{span, status, ResourceSpans, ScopeSpans, Span, Status};
use prost::Message as _;
use switchyard_config::Tracing;

use super::span::{Finished, Kind, SpanRecord, Value};
use super::Counters;

/// The queue of one `[tracing]` configuration and its thread.
#[derive(Debug)]
pub struct Exporter {
    config: Tracing,
    queue: SyncSender<Finished>,
    counters: Arc<Counters>,
}

impl Exporter {
    /// Starts the exporter thread for `config`. If the thread cannot be
    /// spawned, every offered request is dropped and counted.
    pub fn start(config: Tracing, counters: Arc<Counters>) -> Exporter {
        let (queue, rx) = sync_channel(config.queue_size);
        let batcher = Batcher::new(config.clone(), counters.clone());
        let spawned = std::thread::Builder::new().name("switchyard-otlp".into()).spawn(move || batcher.run(rx));
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the trace exporter thread: spans will be dropped");
        }
        Exporter { config, queue, counters }
    }

    /// The configuration the exporter serves.
    pub fn config(&self) -> &Tracing {
        &self.config
    }

    /// Queues a finished request's spans, or drops and counts them when the
    /// queue is full (never waits).
    pub(crate) fn offer(&self, finished: Finished) {
        let spans = finished.spans.len() as u64;
        match self.queue.try_send(finished) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.counters.dropped_queue_full.fetch_add(spans, Ordering::Relaxed);
            }
        }
    }
}

/// The exporter thread's state.
struct Batcher {
    config: Tracing,
    counters: Arc<Counters>,
    agent: ureq::Agent,
    /// Whether the last export failed (a failure is logged once, not per batch).
    failing: bool,
}

impl Batcher {
    fn new(config: Tracing, counters: Arc<Counters>) -> Batcher {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(config.timeout))
            .http_status_as_error(false)
            .build()
            .new_agent();
        Batcher { config, counters, agent, failing: false }
    }

    fn run(mut self, rx: Receiver<Finished>) {
        let mut batch = Vec::with_capacity(self.config.batch_size);
        // When the oldest request of the batch must be sent by.
        let mut due: Option<Instant> = None;
        loop {
            let received = match due {
                Some(at) => rx.recv_timeout(at.saturating_duration_since(Instant::now())),
                None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            match received {
                Ok(finished) => {
                    due.get_or_insert_with(|| Instant::now() + self.config.interval);
                    batch.push(finished);
                    if batch.len() < self.config.batch_size {
                        continue;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    self.export(&mut batch);
                    return;
                }
            }
            self.export(&mut batch);
            due = None;
        }
    }

    /// Sends `batch` (emptied) in one request.
    fn export(&mut self, batch: &mut Vec<Finished>) {
        if batch.is_empty() {
            return;
        }
        let spans: u64 = batch.iter().map(|f| f.spans.len() as u64).sum();
        let body = encode(&self.config.service_name, batch.drain(..)).encode_to_vec();
        let sent =
            self.agent.post(&self.config.endpoint.url).header("content-type", "application/x-protobuf").send(&body[..]);
        let failure = match sent {
            Ok(response) if response.status().is_success() => None,
            Ok(response) => Some(format!("collector answered {}", response.status())),
            Err(e) => Some(e.to_string()),
        };
        match failure {
            None => {
                self.counters.exported.fetch_add(spans, Ordering::Relaxed);
                if self.failing {
                    tracing::info!(endpoint = %self.config.endpoint.url, "trace export works again");
                }
                self.failing = false;
            }
            Some(why) => {
                self.counters.dropped_export_failed.fetch_add(spans, Ordering::Relaxed);
                if !self.failing {
                    tracing::warn!(endpoint = %self.config.endpoint.url, error = %why, "trace export failed: spans are dropped until it works");
                }
                self.failing = true;
            }
        }
    }
}

/// One OTLP export request for the finished requests.
pub(super) fn encode(service_name: &str, batch: impl Iterator<Item = Finished>) -> ExportTraceServiceRequest {
    let spans = batch
        .flat_map(|f| {
            let (trace_id, state) = (f.trace_id, f.tracestate);
            f.spans.into_iter().map(move |s| span(&trace_id, &state, s))
        })
        .collect();
    let resource = Resource {
        attributes: vec![
            attribute("service.name", Value::Str(service_name.to_string())),
            attribute("telemetry.sdk.name", Value::Str("switchyard".to_string())),
            attribute("telemetry.sdk.language", Value::Str("rust".to_string())),
            attribute("telemetry.sdk.version", Value::Str(env!("CARGO_PKG_VERSION").to_string())),
        ],
        ..Default::default()
    };
    let scope = InstrumentationScope {
        name: "switchyard".to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        ..Default::default()
    };
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(resource),
            scope_spans: vec![ScopeSpans { scope: Some(scope), spans, schema_url: String::new() }],
            schema_url: String::new(),
        }],
    }
}

fn span(trace_id: &[u8; 16], tracestate: &str, s: SpanRecord) -> Span {
    let kind = match s.kind {
        Kind::Internal => span::SpanKind::Internal,
        Kind::Server => span::SpanKind::Server,
        Kind::Client => span::SpanKind::Client,
    };
    let status = match &s.error {
        Some(why) => Status { code: status::StatusCode::Error as i32, message: why.clone() },
        None => Status::default(),
    };
    Span {
        trace_id: trace_id.to_vec(),
        span_id: s.span_id.to_vec(),
        trace_state: tracestate.to_string(),
        parent_span_id: s.parent.map_or_else(Vec::new, |p| p.to_vec()),
        name: s.name,
        kind: kind as i32,
        start_time_unix_nano: s.start,
        end_time_unix_nano: s.end.max(s.start),
        attributes: s.attributes.into_iter().map(|(k, v)| attribute(k, v)).collect(),
        status: Some(status),
        ..Default::default()
    }
}

fn attribute(key: &str, value: Value) -> KeyValue {
    let value = match value {
        Value::Str(s) => any_value::Value::StringValue(s),
        Value::Int(i) => any_value::Value::IntValue(i),
    };
    KeyValue { key: key.to_string(), value: Some(AnyValue { value: Some(value) }), ..Default::default() }
}
