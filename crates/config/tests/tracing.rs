//! `[tracing]`: what a valid table turns into, the reload diff, and every
//! refusal with its position and hint.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use switchyard_config::*;

const BASE: &str = "[[service]]\nname = \"web\"\nlisten = \"10.0.0.100:80\"\npool = \"main\"\n\n\
                    [[pool]]\nname = \"main\"\nservers = [ { address = \"10.0.0.11:8080\" } ]\n\n";

fn parse_tracing(tracing: &str) -> Result<Config, Diagnostics> {
    parse(&format!("{BASE}{tracing}"), "t.toml")
}

/// Errors as `LINE:COL message | hint`.
fn errors(tracing: &str) -> Vec<String> {
    parse_tracing(tracing)
        .unwrap_err()
        .errors()
        .map(|d| format!("{}:{} {} | {}", d.line, d.col, d.message, d.hint.clone().unwrap_or_default()))
        .collect()
}

#[test]
fn an_empty_table_has_the_defaults_and_no_table_is_off() {
    let t = parse_tracing("[tracing]\n").unwrap().tracing.unwrap();
    assert_eq!(t.endpoint.url, "http://127.0.0.1:4318/v1/traces");
    assert_eq!((t.endpoint.host.as_str(), t.endpoint.port), ("127.0.0.1", 4318));
    assert_eq!((t.sample_millionths, t.parent_based), (1_000_000, true));
    assert_eq!(t.service_name, "switchyard");
    assert_eq!((t.batch_size, t.queue_size), (512, 2048));
    assert_eq!((t.interval, t.timeout), (Duration::from_secs(5), Duration::from_secs(10)));
    assert!(parse(BASE, "t.toml").unwrap().tracing.is_none());
}

#[test]
fn settings_are_read() {
    let t = parse_tracing(
        "[tracing]\nendpoint = \"http://collector.internal:4318\"\nprotocol = \"http/protobuf\"\n\
         sample_ratio = 0.015\nparent_based = false\nservice_name = \"edge\"\nbatch_size = 100\n\
         queue_size = 1000\ninterval = \"250ms\"\ntimeout = \"2s\"\n",
    )
    .unwrap()
    .tracing
    .unwrap();
    assert_eq!(t.endpoint.url, "http://collector.internal:4318/v1/traces");
    assert_eq!((t.sample_millionths, t.parent_based, t.service_name.as_str()), (15_000, false, "edge"));
    assert_eq!((t.batch_size, t.queue_size), (100, 1000));
    assert_eq!((t.interval, t.timeout), (Duration::from_millis(250), Duration::from_secs(2)));
    for (ratio, millionths) in [("0", 0), ("1", 1_000_000), ("0.0", 0), ("1.0", 1_000_000), ("0.5", 500_000)] {
        let t = parse_tracing(&format!("[tracing]\nsample_ratio = {ratio}\n")).unwrap().tracing.unwrap();
        assert_eq!(t.sample_millionths, millionths, "{ratio}");
    }
}

#[test]
fn refusals_are_located_with_hints() {
    // Line 10 is `[tracing]` (BASE has nine lines).
    assert_eq!(
        errors("[tracing]\nendpoint = \"https://c:4318\"\nprotocol = \"grpc\"\nsample_ratio = 1.5\n"),
        vec![
            "11:12 TLS towards the collector is not supported | run the collector (or an agent) where plain HTTP is safe; for example endpoint = \"http://127.0.0.1:4318/v1/traces\"",
            "12:12 OTLP over gRPC is not supported | use protocol = \"http/protobuf\" and the collector's OTLP/HTTP port (4318)",
            "13:16 `sample_ratio` must be between 0 and 1, not 1.5 | 0.01 records 1 % of new traces, 1 all of them, 0 none",
        ]
    );
    assert_eq!(
        errors("[tracing]\nsample_ratio = \"1%\"\nbatch_size = 600\nqueue_size = 500\ninterval = \"2m\"\n"),
        vec![
            "11:16 `sample_ratio` must be a number from 0 to 1, not a string | write the ratio without quotes: 0.01 for 1 %",
            "12:14 `batch_size` (600) is larger than `queue_size` (500) | a batch is taken from the queue: make queue_size at least batch_size",
            "14:12 `interval` must be between 10ms and 60s | ",
        ]
    );
    assert_eq!(
        errors("[tracing]\nendpoint = \"http://c:0\"\nservice_name = \" \"\nqueue_size = 0\nsampel_ratio = 1\n"),
        vec![
            "11:12 `0` is not a port number | for example endpoint = \"http://127.0.0.1:4318/v1/traces\"",
            "12:16 `service_name` must not be empty | service_name = \"switchyard\"",
            "13:14 `queue_size` must be between 1 and 1048576, not 0 | ",
            "14:1 unknown key `sampel_ratio` in [tracing] | did you mean `sample_ratio`?",
        ]
    );
    assert_eq!(
        errors("[tracing]\nprotocol = \"http/json\"\n"),
        vec!["11:12 unknown OTLP protocol `http/json` | protocols are: http/protobuf"]
    );
}

#[test]
fn a_changed_table_is_in_the_reload_diff() {
    let off = parse(BASE, "t.toml").unwrap();
    let on = parse_tracing("[tracing]\n").unwrap();
    let sampled = parse_tracing("[tracing]\nsample_ratio = 0.1\n").unwrap();
    assert!(diff(&off, &on).tracing_changed);
    assert!(diff(&on, &sampled).tracing_changed);
    assert!(diff(&on, &off).to_string().contains("tracing changed"));
    assert!(!diff(&on, &on.clone()).tracing_changed);
}
