//! Tests of the per-worker counters, their sums and the reason mapping.

use super::*;
use crate::protection::Refusal;
use switchyard_http::error::{Kind, ProxyError};

pub(crate) fn record(status: u16, error: Option<ProxyError>) -> Record<'static> {
    Record {
        service: "web",
        client: "192.0.2.7:40000".parse().expect("addr"),
        method: b"GET",
        target: b"/index.html?x=1",
        version: "HTTP/1.1",
        host: Some(b"example.test"),
        status,
        bytes_in: 100,
        bytes_out: 1000,
        body_bytes_out: 900,
        streamed: (0, 0),
        upstream: Some(Upstream { pool: "main", server: "a", addr: "127.0.0.1:9001".parse().expect("addr") }),
        timings: Timings { head_us: 5, connect_us: Some(150), response_us: Some(900), total_us: 1200 },
        reason: error.map(|e| e.reason()),
        side: error.map(|e| side_name(e.side())),
        user_agent: Some(b"curl/8"),
        referer: None,
        start: SystemTime::UNIX_EPOCH,
        cache: None,
        grpc_status: None,
        trace_id: None,
    }
}

#[test]
fn every_error_kind_has_its_own_reason_label() {
    let table = [
        (Kind::BadRequest("invalid content-length"), "bad-request"),
        (Kind::ClientHeaderTimeout, "client-header-timeout"),
        (Kind::HeaderTooLarge, "header-too-large"),
        (Kind::ExpectationFailed, "expectation-failed"),
        (Kind::BodyTooLarge, "body-too-large"),
        (Kind::ClientClosed, "client-closed"),
        (Kind::ClientBodyTimeout, "client-body-timeout"),
        (Kind::NoPool, "no-pool"),
        (Kind::NoServer, "no-server"),
        (Kind::QueueFull, "queue-full"),
        (Kind::QueueTimeout, "queue-timeout"),
        (Kind::ConnectFailed, "connect-failed"),
        (Kind::ConnectTimeout, "connect-timeout"),
        (Kind::ServerTimeout, "server-timeout"),
        (Kind::ServerClosed, "server-closed"),
        (Kind::ServerTls, "server-tls-failed"),
        (Kind::ServerNotH2, "server-tls-failed"),
        (Kind::SwitchToH2Pool, "other"),
        (Kind::BadResponse("malformed status line"), "bad-response"),
        (Kind::UriTooLong, "uri-too-long"),
        (Kind::Refused(Refusal::Denied), "denied"),
        (Kind::Refused(Refusal::TooManyConnections), "too-many-connections"),
        (Kind::Refused(Refusal::ConnectionRate), "connection-rate-limited"),
        (Kind::Refused(Refusal::RequestRate(1)), "rate-limited"),
    ];
    for (kind, label) in table {
        let e = ProxyError::new(kind);
        let i = reason_index(e.reason(), Some(side_name(e.side())));
        assert_eq!(REASONS[i], label, "{kind:?} ({})", e.reason());
        assert_eq!(is_server_reason(i), e.side() == Side::Server, "{kind:?}");
        // The labels map to themselves, so reasons may be renamed to them.
        assert_eq!(reason_index(label, None), i);
    }
    assert_eq!(REASONS[reason_index("something new", Some("internal"))], "other");
    assert_eq!(REASONS[reason_index("something new", None)], "other");
    // The connection-level reasons of the HTTP/2 and HTTP/3 defences.
    for label in ["rapid-reset", "control-frame-flood", "uni-stream-flood"] {
        assert_eq!(REASONS[reason_index(label, None)], label);
    }
}

#[test]
fn status_classes() {
    assert_eq!([0, 99, 100, 204, 399, 404, 503, 600, 999].map(class_index), [0, 0, 1, 2, 3, 4, 5, 0, 0]);
}

#[test]
fn slots_do_not_share_cache_lines() {
    assert_eq!(std::mem::align_of::<Padded<ServiceSlot>>(), 128);
    assert_eq!(std::mem::size_of::<Padded<AtomicU64>>(), 128);
    assert_eq!(std::mem::size_of::<Padded<ServerSlot>>() % 128, 0);
}

#[test]
fn each_worker_writes_its_slot_and_the_snapshot_sums_them() {
    const WORKERS: usize = 4;
    const EACH: u64 = 20_000;
    let m = std::sync::Arc::new(ServiceMetrics::new(WORKERS));
    let threads: Vec<_> = (0..WORKERS)
        .map(|w| {
            let m = m.clone();
            std::thread::spawn(move || {
                let ok = record(200, None);
                let failed = record(502, Some(ProxyError::new(Kind::ConnectFailed)));
                for i in 0..EACH {
                    m.connection_opened(w);
                    m.request(w, if i % 10 == 0 { &failed } else { &ok });
                    m.connection_closed(w);
                }
                m.connection_opened(w);
            })
        })
        .collect();
    for t in threads {
        t.join().expect("worker thread");
    }
    let t = m.snapshot();
    let n = EACH * WORKERS as u64;
    assert_eq!(t.requests, n, "no increment lost with one writer per slot");
    assert_eq!(t.responses.get("2xx"), n / 10 * 9);
    assert_eq!(t.responses.get("5xx"), n / 10);
    assert_eq!(t.errors.get("connect-failed"), n / 10);
    assert_eq!(t.errors.0.iter().sum::<u64>(), n / 10);
    assert_eq!((t.bytes_in, t.bytes_out), (n * 100, n * 1000));
    assert_eq!(t.connections_opened, n + WORKERS as u64);
    assert_eq!(t.connections_current, WORKERS as u64);
    assert_eq!(t.latency.count, n);
    assert_eq!(t.latency.sum_us, n * 1200);
}

#[test]
fn a_request_without_response_counts_as_none() {
    let m = ServiceMetrics::new(1);
    m.request(0, &record(0, Some(ProxyError::new(Kind::ClientClosed))));
    let t = m.snapshot();
    assert_eq!((t.responses.get("none"), t.errors.get("client-closed")), (1, 1));
}

#[test]
fn server_counts_latencies_when_measured_and_only_server_failures() {
    let m = ServerMetrics::new(2);
    m.request(0, &record(200, None));
    let mut reused = record(200, None);
    reused.timings.connect_us = None;
    m.request(1, &reused);
    m.request(1, &record(400, Some(ProxyError::new(Kind::BadRequest("invalid chunk size")))));
    m.request(0, &record(504, Some(ProxyError::new(Kind::ServerTimeout))));
    m.request(0, &record(502, Some(ProxyError::new(Kind::BadResponse("invalid status code")))));
    m.connect_failed(1, ProxyError::new(Kind::ConnectFailed).reason());
    let t = m.snapshot();
    assert_eq!(t.requests, 5);
    assert_eq!(t.connect_latency.count, 4, "reused connection has no connect time");
    assert_eq!(t.response_latency.count, 5);
    assert_eq!(t.responses.get("4xx"), 1);
    assert_eq!(t.failures.get("bad-request"), 0, "the client's fault is not the server's");
    assert_eq!(t.failures.get("server-timeout"), 1);
    assert_eq!(t.failures.get("bad-response"), 1);
    assert_eq!(t.failures.get("connect-failed"), 1);
}

#[test]
fn tls_handshakes_sum_over_workers() {
    let m = TlsMetrics::new(3);
    m.handshake(0, Handshake::Full);
    m.handshake(2, Handshake::Full);
    m.handshake(1, Handshake::Resumed);
    m.handshake(2, Handshake::Failed);
    assert_eq!(m.snapshot(), TlsTotals { full: 2, resumed: 1, failed: 1 });
}

#[test]
fn totals_serialize_for_json_stats() {
    let m = ServiceMetrics::new(1);
    m.connection_opened(0);
    m.request(0, &record(200, None));
    m.request(0, &record(503, Some(ProxyError::new(Kind::NoServer))));
    let v = serde_json::to_value(m.snapshot()).expect("serializes");
    assert_eq!(v["requests"], 2);
    assert_eq!(v["responses"]["2xx"], 1);
    assert_eq!(v["responses"]["none"], 0);
    assert_eq!(v["errors"], serde_json::json!({ "no-server": 1 }));
    assert_eq!(v["connections_current"], 1);
    assert_eq!(v["latency"]["count"], 2);
    let s = ServerMetrics::new(1).snapshot();
    let v = serde_json::to_value(s).expect("serializes");
    assert_eq!(v["connect_latency"]["count"], 0);
    assert_eq!(v["failures"], serde_json::json!({}));
}
