//! Tests of the exposition text: descriptors, labels, histogram buckets, and
//! a line-by-line syntax check.

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::metrics::tests::record;
use crate::metrics::{Handshake, OVERFLOW_US};
use switchyard_http::error::{Kind, ProxyError};

struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Checks every line's syntax and returns the samples. A sample must belong
/// to the family of the closest `# TYPE` line above it.
fn parse(text: &str) -> Vec<Sample> {
    parse_as(text, Format::OpenMetrics)
}

/// [`parse`] for either format: the classic one has no `# EOF`, no `# UNIT`
/// and no info type, and declares counters with their `_total` name.
fn parse_as(text: &str, format: Format) -> Vec<Sample> {
    if format == Format::Text {
        assert!(!text.contains("# EOF") && !text.contains("# UNIT "), "OpenMetrics lines in classic text");
        let text = format!("{text}# EOF\n");
        let samples = parse_lines(&text, &["counter", "gauge", "histogram"]);
        for line in text.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
            assert!(!line.ends_with(" counter") || line.contains("_total "), "{line}");
        }
        return samples;
    }
    parse_lines(text, &["counter", "gauge", "histogram", "info"])
}

fn parse_lines(text: &str, types: &[&str]) -> Vec<Sample> {
    let sample = regex::Regex::new(r#"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? ([^ ]+)$"#).expect("regex");
    let label = regex::Regex::new(r#"^([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)"#).expect("regex");
    assert!(text.ends_with("# EOF\n"), "no EOF marker");
    let mut family = String::new();
    let mut declared = BTreeSet::new();
    let mut out = Vec::new();
    for line in text.lines().filter(|l| *l != "# EOF") {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            assert!(types.contains(&kind), "{line}");
            assert!(declared.insert(name.to_string()), "family {name} declared twice");
            family = name.to_string();
            continue;
        }
        if line.starts_with("# HELP ") || line.starts_with("# UNIT ") {
            assert!(line.split(' ').count() >= 4, "{line}");
            continue;
        }
        let c = sample.captures(line).unwrap_or_else(|| panic!("bad line: {line}"));
        let name = c[1].to_string();
        assert!(name.starts_with(&family), "{name} outside its family {family}");
        let mut labels = BTreeMap::new();
        let mut rest = c.get(3).map_or("", |m| m.as_str());
        while !rest.is_empty() {
            let l = label.captures(rest).unwrap_or_else(|| panic!("bad labels in: {line}"));
            labels.insert(l[1].to_string(), l[2].to_string());
            rest = &rest[l[0].len()..];
        }
        let value = match &c[4] {
            "+Inf" => f64::INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("bad value in: {line}")),
        };
        out.push(Sample { name, labels, value });
    }
    out
}

fn find<'a>(samples: &'a [Sample], name: &str, labels: &[(&str, &str)]) -> Vec<&'a Sample> {
    samples
        .iter()
        .filter(|s| s.name == name && labels.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v)))
        .collect()
}

fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    let found = find(samples, name, labels);
    assert_eq!(found.len(), 1, "{name} {labels:?}: {} samples", found.len());
    found[0].value
}

fn fixture() -> (ServiceMetrics, ServiceMetrics, ServerMetrics, ServerMetrics, TlsMetrics) {
    let (web, api) = (ServiceMetrics::new(2), ServiceMetrics::new(2));
    web.connection_opened(0);
    web.connection_opened(1);
    web.connection_closed(1);
    web.request(0, &record(200, None));
    web.request(1, &record(200, None));
    let mut slow = record(200, None);
    slow.timings.total_us = OVERFLOW_US * 2;
    web.request(1, &slow);
    web.request(0, &record(502, Some(ProxyError::new(Kind::ConnectFailed))));
    // Two gRPC answers: UNAVAILABLE, and a code past the defined ones (read as UNKNOWN).
    for code in [14, 99] {
        api.request(0, &crate::metrics::Record { grpc_status: Some(code), ..record(200, None) });
    }
    let (a, b) = (ServerMetrics::new(2), ServerMetrics::new(2));
    a.request(0, &record(200, None));
    a.request(1, &record(504, Some(ProxyError::new(Kind::ServerTimeout))));
    b.connect_failed(0, "server connect failed");
    let tls = TlsMetrics::new(2);
    tls.handshake(1, Handshake::Resumed);
    (web, api, a, b, tls)
}

fn view<'a>(
    web: &'a ServiceMetrics,
    api: &'a ServiceMetrics,
    a: &'a ServerMetrics,
    b: &'a ServerMetrics,
    tls: &'a TlsMetrics,
) -> ExpositionView<'a> {
    let row = |server, state, metrics| ServerRow {
        pool: "main",
        server,
        address: "127.0.0.1:9001".parse().expect("addr"),
        state,
        weight: 3,
        active: 2,
        metrics,
    };
    ExpositionView {
        services: vec![("web", web), ("a\"p\\i", api)],
        servers: vec![row("a", "up", a), row("b", "draining", b)],
        queues: vec![("main", 3)],
        udp: Vec::new(),
        caches: Vec::new(),
        tls: Some(tls),
        process: ProcessGauges {
            workers: 2,
            config_generation: 7,
            reloads_ok: 6,
            reloads_failed: 1,
            access_log_dropped: 42,
            tracing_spans_exported: 11,
            tracing_spans_dropped_queue_full: 5,
            tracing_spans_dropped_export_failed: 3,
        },
        peers: Vec::new(),
        acme: vec![
            AcmeRow {
                service: "site".into(),
                not_after: Some(1_800_000_000),
                issued: 3,
                failed: 1,
                consecutive_failures: 0,
                on_demand: Some((2, vec![("issued", 2), ("denied", 7)])),
            },
            AcmeRow {
                service: "new".into(),
                not_after: None,
                issued: 0,
                failed: 4,
                consecutive_failures: 4,
                on_demand: None,
            },
        ],
    }
}

#[test]
fn cluster_peers_are_exposed_per_peer() {
    let peer = PeerRow {
        peer: "lb2".into(),
        connected: true,
        inbound: false,
        sent: 10,
        received: 4,
        dropped: 3,
        queued: 2,
        lag_seconds: 0.25,
    };
    let text = encode(&ExpositionView { peers: vec![peer], ..ExpositionView::default() }, Format::Text);
    for line in [
        "switchyard_cluster_peer_connected{peer=\"lb2\",direction=\"out\"} 1",
        "switchyard_cluster_peer_connected{peer=\"lb2\",direction=\"in\"} 0",
        "switchyard_cluster_peer_updates_total{peer=\"lb2\",event=\"dropped\"} 3",
        "switchyard_cluster_peer_queued_updates{peer=\"lb2\"} 2",
        "switchyard_cluster_peer_lag_seconds{peer=\"lb2\"} 0.25",
    ] {
        assert!(text.contains(line), "missing `{line}` in:\n{text}");
    }
    let single = encode(&ExpositionView::default(), Format::Text);
    assert!(!single.contains("cluster_peer"));
}

#[test]
fn exposition_has_descriptors_labels_and_values() {
    let (web, api, a, b, tls) = fixture();
    let open_metrics = [
        "# HELP switchyard_requests Requests finished, per service.",
        "# TYPE switchyard_requests counter",
        "# UNIT switchyard_request_duration_seconds seconds",
        "# TYPE switchyard_server info",
        "# TYPE switchyard_received_bytes counter",
        "# UNIT switchyard_received_bytes bytes",
    ];
    let classic = [
        "# HELP switchyard_requests_total Requests finished, per service.",
        "# TYPE switchyard_requests_total counter",
        "# TYPE switchyard_server_info gauge",
        "# TYPE switchyard_received_bytes_total counter",
    ];
    for (format, declared) in [(Format::OpenMetrics, &open_metrics[..]), (Format::Text, &classic[..])] {
        let text = encode(&view(&web, &api, &a, &b, &tls), format);
        assert!(!text.contains("{}"), "an unlabelled sample has no braces");
        for line in declared.iter().chain(&[
            "# TYPE switchyard_request_duration_seconds histogram",
            "# TYPE switchyard_connections_current gauge",
            "# TYPE switchyard_server_state gauge",
            "switchyard_server_info{pool=\"main\",server=\"a\",address=\"127.0.0.1:9001\"} 1",
            "switchyard_requests_total{service=\"a\\\"p\\\\i\"} 2",
            "switchyard_workers 2",
        ]) {
            assert!(text.lines().any(|l| l == *line), "{format:?}: missing `{line}` in\n{text}");
        }
        check_values(&parse_as(&text, format));
    }
}

fn check_values(s: &[Sample]) {
    let web_l = [("service", "web")];
    assert_eq!(value(s, "switchyard_requests_total", &web_l), 4.0);
    assert_eq!(value(s, "switchyard_responses_total", &[("service", "web"), ("class", "2xx")]), 3.0);
    assert_eq!(value(s, "switchyard_responses_total", &[("service", "web"), ("class", "5xx")]), 1.0);
    assert_eq!(value(s, "switchyard_connections_current", &web_l), 1.0);
    assert_eq!(value(s, "switchyard_connections_total", &web_l), 2.0);
    assert_eq!(value(s, "switchyard_received_bytes_total", &web_l), 400.0);
    assert_eq!(value(s, "switchyard_sent_bytes_total", &web_l), 4000.0);
    assert_eq!(value(s, "switchyard_errors_total", &[("service", "web"), ("reason", "connect-failed")]), 1.0);
    assert_eq!(find(s, "switchyard_errors_total", &web_l).len(), REASONS.len(), "every reason, zeros included");
    let api_l = |code| [("service", "a\\\"p\\\\i"), ("grpc_code", code)];
    assert_eq!(value(s, "switchyard_grpc_responses_total", &api_l("UNAVAILABLE")), 1.0);
    assert_eq!(value(s, "switchyard_grpc_responses_total", &api_l("UNKNOWN")), 1.0);
    assert!(find(s, "switchyard_grpc_responses_total", &web_l).is_empty(), "no gRPC on web, no series");
    let main_a = [("pool", "main"), ("server", "a")];
    let main_b = [("pool", "main"), ("server", "b")];
    assert_eq!(value(s, "switchyard_server_requests_total", &main_a), 2.0);
    assert_eq!(value(s, "switchyard_server_failures_total", &[("server", "a"), ("reason", "server-timeout")]), 1.0);
    assert_eq!(value(s, "switchyard_server_failures_total", &[("server", "b"), ("reason", "connect-failed")]), 1.0);
    assert!(find(s, "switchyard_server_failures_total", &[("reason", "bad-request")]).is_empty());
    assert_eq!(value(s, "switchyard_server_weight", &main_a), 3.0);
    assert_eq!(value(s, "switchyard_server_active_requests", &main_b), 2.0);
    assert_eq!(value(s, "switchyard_server_state", &[("server", "b"), ("state", "draining")]), 1.0);
    assert_eq!(value(s, "switchyard_pool_queue_waiting", &[("pool", "main")]), 3.0);
    assert_eq!(value(s, "switchyard_server_state", &[("server", "b"), ("state", "up")]), 0.0);
    assert_eq!(find(s, "switchyard_server_state", &main_a).iter().map(|x| x.value).sum::<f64>(), 1.0);
    assert_eq!(value(s, "switchyard_tls_handshakes_total", &[("kind", "resumed")]), 1.0);
    assert_eq!(value(s, "switchyard_tls_handshakes_total", &[("kind", "full")]), 0.0);
    assert_eq!(value(s, "switchyard_acme_certificate_present", &[("service", "site")]), 1.0);
    assert_eq!(value(s, "switchyard_acme_certificate_present", &[("service", "new")]), 0.0);
    assert_eq!(value(s, "switchyard_acme_certificate_expiry_timestamp_seconds", &[("service", "site")]), 1.8e9);
    assert!(find(s, "switchyard_acme_certificate_expiry_timestamp_seconds", &[("service", "new")]).is_empty());
    assert_eq!(value(s, "switchyard_acme_orders_total", &[("service", "site"), ("result", "issued")]), 3.0);
    assert_eq!(value(s, "switchyard_acme_orders_total", &[("service", "new"), ("result", "failed")]), 4.0);
    assert_eq!(value(s, "switchyard_acme_consecutive_failures", &[("service", "new")]), 4.0);
    assert_eq!(value(s, "switchyard_acme_on_demand_certificates", &[("service", "site")]), 2.0);
    assert_eq!(value(s, "switchyard_acme_on_demand_total", &[("service", "site"), ("result", "denied")]), 7.0);
    assert!(find(s, "switchyard_acme_on_demand_certificates", &[("service", "new")]).is_empty());
    assert_eq!(value(s, "switchyard_workers", &[]), 2.0);
    assert_eq!(value(s, "switchyard_config_generation", &[]), 7.0);
    assert_eq!(value(s, "switchyard_reloads_total", &[("result", "failed")]), 1.0);
    assert_eq!(value(s, "switchyard_access_log_dropped_lines_total", &[]), 42.0);
    assert_eq!(value(s, "switchyard_tracing_exported_spans_total", &[]), 11.0);
    assert_eq!(value(s, "switchyard_tracing_dropped_spans_total", &[("reason", "queue_full")]), 5.0);
    assert_eq!(value(s, "switchyard_tracing_dropped_spans_total", &[("reason", "export_failed")]), 3.0);
}

/// Buckets are cumulative, `le` increasing, and `+Inf` equals `_count`.
fn check_histogram(s: &[Sample], name: &str, labels: &[(&str, &str)], count: f64, sum_s: f64) {
    let buckets = find(s, &format!("{name}_bucket"), labels);
    assert_eq!(buckets.len(), 46, "{name}: 45 finite bounds and +Inf");
    let mut last = (0.0, 0.0);
    for b in &buckets {
        let le = match b.labels["le"].as_str() {
            "+Inf" => f64::INFINITY,
            v => v.parse::<f64>().expect("le is a number"),
        };
        assert!(le > last.0 && b.value >= last.1, "{name}: not cumulative at le={le}");
        last = (le, b.value);
    }
    assert_eq!(last, (f64::INFINITY, count), "{name}: +Inf bucket is the count");
    assert_eq!(value(s, &format!("{name}_count"), labels), count);
    assert!((value(s, &format!("{name}_sum"), labels) - sum_s).abs() < 1e-6, "{name}_sum");
}

#[test]
fn histograms_are_cumulative_with_inf_equal_to_count() {
    let (web, api, a, b, tls) = fixture();
    let s = parse(&encode(&view(&web, &api, &a, &b, &tls), Format::OpenMetrics));
    let web_sum = (3.0 * 1200.0 + (OVERFLOW_US * 2) as f64) / 1e6;
    check_histogram(&s, "switchyard_request_duration_seconds", &[("service", "web")], 4.0, web_sum);
    let first = find(&s, "switchyard_request_duration_seconds_bucket", &[("service", "web")])[0];
    assert_eq!(first.labels["le"].parse::<f64>().expect("number"), 16e-6, "first bound 16 µs");
    // 1200 µs sits in the bucket bounded by 1536 µs, not the one below (1024 µs).
    let le = |bound: f64| {
        let buckets = find(&s, "switchyard_request_duration_seconds_bucket", &[("service", "web")]);
        buckets.iter().find(|b| b.labels["le"].parse::<f64>().ok() == Some(bound)).map(|b| b.value)
    };
    assert_eq!((le(1024e-6), le(1536e-6)), (Some(0.0), Some(3.0)));
    let main_a = [("pool", "main"), ("server", "a")];
    check_histogram(&s, "switchyard_server_connect_duration_seconds", &main_a, 2.0, 300e-6);
    check_histogram(&s, "switchyard_server_response_duration_seconds", &main_a, 2.0, 1800e-6);
    check_histogram(&s, "switchyard_request_duration_seconds", &[("service", "a\\\"p\\\\i")], 2.0, 2.0 * 1200e-6);
}

#[test]
fn an_empty_view_still_parses() {
    let text = encode(&ExpositionView::default(), Format::OpenMetrics);
    let s = parse(&text);
    assert_eq!(value(&s, "switchyard_tls_handshakes_total", &[("kind", "failed")]), 0.0);
    assert!(find(&s, "switchyard_requests_total", &[]).is_empty());
}

#[test]
fn cache_counters_are_exposed_per_service() {
    use std::sync::atomic::Ordering;
    let stats = crate::cache::CacheStats::default();
    stats.hits.store(5, Ordering::Relaxed);
    stats.bytes.store(1234, Ordering::Relaxed);
    stats.evictions.store(2, Ordering::Relaxed);
    stats.served_bytes.store(4096, Ordering::Relaxed);
    stats.pieces.store(3, Ordering::Relaxed);
    let view = ExpositionView { caches: vec![("web", &stats)], ..ExpositionView::default() };
    let text = encode(&view, Format::Text);
    assert!(text.contains("switchyard_cache_hits_total{service=\"web\"} 5\n"), "{text}");
    assert!(text.contains("switchyard_cache_bytes{service=\"web\"} 1234\n"), "{text}");
    assert!(text.contains("switchyard_cache_evictions_total{service=\"web\"} 2\n"), "{text}");
    assert!(text.contains("switchyard_cache_misses_total{service=\"web\"} 0\n"), "{text}");
    assert!(text.contains("switchyard_cache_served_bytes_total{service=\"web\"} 4096\n"), "{text}");
    assert!(text.contains("switchyard_cache_pieces_total{service=\"web\"} 3\n"), "{text}");
}
