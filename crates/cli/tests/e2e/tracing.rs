//! OpenTelemetry tracing end to end: the real binary, and a receiver we did not
//! write: `tests/otel/collector.py` decodes every OTLP/HTTP export with the
//! OpenTelemetry project's generated protobuf classes (`opentelemetry-proto`,
//! in `.tools/venv`, which scripts/test.sh installs) and also serves as the
//! origin, recording the trace headers it receives. Without that package the
//! tests say they skipped.
//!
//! Checked: a client `traceparent` is continued (same trace, the proxy's spans
//! parented on the client's, the server given the proxy's client span as its
//! parent, `tracestate` passed on); an invalid or missing one starts a new
//! trace and is not forwarded; sampling at ratio 0 and 1 and parent-based;
//! the span attributes of the HTTP semantic conventions; the trace id in the
//! access log; a collector that is down or stalled costs no request, and its
//! dropped spans are counted in the metrics.

use crate::common;

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use serde_json::Value;

const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// The receiver and origin, killed by PID when dropped.
struct Collector {
    child: Child,
    dir: PathBuf,
    addr: SocketAddr,
}

impl Collector {
    /// Starts the receiver (`stall`: it holds every export for a minute);
    /// `None` when the venv lacks `opentelemetry-proto`.
    fn start(stall: bool) -> Option<Collector> {
        let python = workspace_root().join(".tools/venv/bin/python");
        let ok = Command::new(&python)
            .args(["-c", "import opentelemetry.proto.collector.trace.v1.trace_service_pb2"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("opentelemetry-proto is not installed in .tools/venv: skipped (scripts/test.sh installs it)");
            return None;
        }
        let dir = temp_dir("otel");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otel/collector.py");
        let mut cmd = Command::new(&python);
        cmd.arg(&script).arg(&dir);
        if stall {
            cmd.arg("--stall");
        }
        let mut child =
            cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("spawn collector");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("stdout");
        BufReader::new(stdout).read_line(&mut line).expect("collector says where it listens");
        let port: u16 = line.trim().strip_prefix("listening ").and_then(|p| p.parse().ok()).expect("a port");
        Some(Collector { child, dir, addr: SocketAddr::from(([127, 0, 0, 1], port)) })
    }

    fn lines(&self, file: &str) -> Vec<Value> {
        let text = std::fs::read_to_string(self.dir.join(file)).unwrap_or_default();
        text.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect()
    }

    /// Spans received so far.
    fn spans(&self) -> Vec<Value> {
        self.lines("spans.jsonl")
    }

    /// Trace headers of the requests the origin served, in order.
    fn requests(&self) -> Vec<Value> {
        self.lines("requests.jsonl")
    }

    /// The spans of the trace the origin's request `path` belongs to, once
    /// `count` of them arrived.
    fn trace_of(&self, path: &str, count: usize) -> (Value, Vec<Value>) {
        let seen = wait_for(&format!("the origin's request {path}"), || {
            self.requests().into_iter().find(|r| r["path"] == path)
        });
        let trace = trace_id_of(&seen);
        let spans = wait_for(&format!("{count} spans of trace {trace}"), || {
            let spans: Vec<Value> = self.spans().into_iter().filter(|s| s["trace_id"] == trace.as_str()).collect();
            (spans.len() >= count).then_some(spans)
        });
        (seen, spans)
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The trace id of the single `traceparent` a request carried to the origin.
fn trace_id_of(request: &Value) -> String {
    let values = request["traceparent"].as_array().expect("list");
    assert_eq!(values.len(), 1, "one traceparent: {request}");
    let v = values[0].as_str().expect("text");
    v.split('-').nth(1).expect("trace id").to_string()
}

/// The parts of a `traceparent`: (trace id, parent id, flags), strictly checked.
fn parts(traceparent: &str) -> (String, String, String) {
    let p: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(p.len(), 4, "{traceparent}");
    let hex = |s: &str, n| s.len() == n && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    assert!(p[0] == "00" && hex(p[1], 32) && hex(p[2], 16) && hex(p[3], 2), "{traceparent}");
    assert!(p[1] != "0".repeat(32) && p[2] != "0".repeat(16), "{traceparent}");
    (p[1].to_string(), p[2].to_string(), p[3].to_string())
}

fn named<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    spans.iter().find(|s| s["name"] == name).unwrap_or_else(|| panic!("no span {name}: {spans:?}"))
}

fn config(listen: SocketAddr, collector: &Collector, tracing: &str, extra: &str) -> String {
    let url = format!("http://{}/v1/traces", collector.addr);
    simple_config(listen, &[collector.addr], extra)
        + &format!("\n[tracing]\nendpoint = \"{url}\"\nservice_name = \"edge-lb\"\ninterval = \"50ms\"\n{tracing}\n")
}

fn get(proxy: &Proxy, path: &str, headers: &[(&str, &str)]) -> Response {
    let mut all = vec![("host", "shop.example:8080")];
    all.extend_from_slice(headers);
    proxy.connect().request("GET", path, &all)
}

/// One sample of the classic text exposition of `admin`.
fn metric(admin: SocketAddr, sample: &str) -> Option<f64> {
    let host = admin.to_string();
    let r = Client::connect(admin).request("GET", "/metrics", &[("host", &host), ("connection", "close")]);
    r.text().lines().find_map(|l| l.strip_prefix(sample)?.trim().parse().ok())
}

#[test]
fn a_client_trace_is_continued_with_parented_spans_and_logged() {
    let Some(collector) = Collector::start(false) else { return };
    let listen = proxy_addr();
    let log = temp_dir("otel-log").join("access.log");
    // Ratio 0: only the client's sampled flag can make this trace recorded.
    let extra = format!("\n[access_log]\npath = \"{}\"\nformat = \"json\"\n", log.display());
    let toml = config(listen, &collector, "sample_ratio = 0\nparent_based = true", "") + &extra;
    let proxy = Proxy::start(&toml, listen);
    let parent = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    let r = get(&proxy, "/shop/cart?item=7", &[("traceparent", &parent), ("tracestate", "rojo=00f067aa0ba902b7")]);
    assert_eq!(r.status, 200);

    let (seen, spans) = collector.trace_of("/shop/cart?item=7", 4);
    let (trace, upstream_parent, flags) = parts(seen["traceparent"][0].as_str().expect("text"));
    assert_eq!((trace.as_str(), flags.as_str()), (CLIENT_TRACE, "01"));
    assert_ne!(upstream_parent, CLIENT_SPAN, "the server's parent is the proxy's span");
    assert_eq!(seen["tracestate"], serde_json::json!(["rojo=00f067aa0ba902b7"]));

    let server = spans.iter().find(|s| s["kind"] == 2).expect("a SERVER span");
    let client = spans.iter().find(|s| s["kind"] == 3).expect("a CLIENT span");
    assert_eq!(server["parent_span_id"], CLIENT_SPAN);
    assert_eq!(client["parent_span_id"], server["span_id"]);
    assert_eq!(client["span_id"], upstream_parent.as_str(), "the origin's parent is the CLIENT span");
    for phase in ["connect", "time to first byte"] {
        let s = named(&spans, phase);
        assert_eq!((s["parent_span_id"].clone(), s["kind"].clone()), (client["span_id"].clone(), 1.into()));
        assert!(s["start"].as_u64() >= server["start"].as_u64() && s["end"].as_u64() <= server["end"].as_u64());
    }
    assert!(spans.iter().all(|s| s["trace_state"] == "rojo=00f067aa0ba902b7"));
    assert_eq!(server["resource"]["service.name"], "edge-lb");
    let a = &server["attributes"];
    assert_eq!(server["name"], "GET");
    assert_eq!(a["http.request.method"], "GET");
    assert_eq!((a["url.path"].clone(), a["url.query"].clone()), ("/shop/cart".into(), "item=7".into()));
    assert_eq!((a["url.scheme"].clone(), a["network.protocol.version"].clone()), ("http".into(), "1.1".into()));
    assert_eq!((a["server.address"].clone(), a["server.port"].clone()), ("shop.example".into(), 8080.into()));
    assert_eq!(
        (a["client.address"].clone(), a["network.peer.address"].clone()),
        ("127.0.0.1".into(), "127.0.0.1".into())
    );
    assert_eq!(a["http.response.status_code"], 200);
    assert!(a.get("error.type").is_none(), "{a}");
    let c = &client["attributes"];
    assert_eq!(
        (c["server.address"].clone(), c["server.port"].clone()),
        ("127.0.0.1".into(), collector.addr.port().into())
    );
    assert_eq!((c["http.response.status_code"].clone(), c["switchyard.pool"].clone()), (200.into(), "main".into()));

    // The access log line carries the trace id.
    let line = wait_for("the access log line", || {
        let text = std::fs::read_to_string(&log).ok()?;
        text.lines().find(|l| l.contains("/shop/cart")).map(str::to_string)
    });
    let entry: Value = serde_json::from_str(&line).expect("JSON line");
    assert_eq!(entry["trace_id"], CLIENT_TRACE);
}

#[test]
fn an_invalid_or_missing_traceparent_starts_a_new_trace() {
    let Some(collector) = Collector::start(false) else { return };
    let listen = proxy_addr();
    let proxy = Proxy::start(&config(listen, &collector, "sample_ratio = 1", ""), listen);
    let upper = format!("00-{}-{CLIENT_SPAN}-01", CLIENT_TRACE.to_uppercase());
    let zero = format!("00-{}-{CLIENT_SPAN}-01", "0".repeat(32));
    let cases: [(&str, Vec<(&str, &str)>); 4] = [
        ("/upper", vec![("traceparent", &upper), ("tracestate", "rojo=1")]),
        ("/zero", vec![("traceparent", &zero)]),
        ("/none", vec![]),
        ("/none-again", vec![]),
    ];
    let mut traces = Vec::new();
    for (path, headers) in &cases {
        assert_eq!(get(&proxy, path, headers).status, 200);
        let (seen, spans) = collector.trace_of(path, 2);
        let (trace, _, flags) = parts(seen["traceparent"][0].as_str().expect("text"));
        assert_ne!(trace, CLIENT_TRACE, "{path}: the invalid trace id is not forwarded");
        assert_eq!(flags, "01", "{path}: ratio 1 records every new trace");
        assert_eq!(seen["tracestate"], serde_json::json!([]), "{path}: no tracestate of another trace");
        let server = spans.iter().find(|s| s["kind"] == 2).expect("a SERVER span");
        assert_eq!(server["parent_span_id"], "", "{path}: a new trace starts at the proxy");
        traces.push(trace);
    }
    traces.sort();
    traces.dedup();
    assert_eq!(traces.len(), cases.len(), "every request its own trace");
}

#[test]
fn ratio_zero_records_only_what_a_sampled_parent_asks_for() {
    let Some(collector) = Collector::start(false) else { return };
    let listen = proxy_addr();
    let proxy = Proxy::start(&config(listen, &collector, "sample_ratio = 0.0", ""), listen);
    let unsampled = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-00");
    for _ in 0..5 {
        assert_eq!(get(&proxy, "/quiet", &[]).status, 200);
    }
    assert_eq!(get(&proxy, "/unsampled", &[("traceparent", &unsampled)]).status, 200);
    // A marker: a sampled parent is recorded; once its spans are in, earlier ones would be too.
    let sampled = "00-11111111111111111111111111111111-2222222222222222-01";
    assert_eq!(get(&proxy, "/marker", &[("traceparent", sampled)]).status, 200);
    collector.trace_of("/marker", 2);
    std::thread::sleep(Duration::from_millis(300));
    let spans = collector.spans();
    assert!(spans.iter().all(|s| s["trace_id"] == "11111111111111111111111111111111"), "{spans:?}");
    for r in collector.requests() {
        let (trace, _, flags) = parts(r["traceparent"][0].as_str().expect("text"));
        match r["path"].as_str() {
            Some("/marker") => assert_eq!(flags, "01"),
            Some("/unsampled") => assert_eq!((trace.as_str(), flags.as_str()), (CLIENT_TRACE, "00")),
            _ => assert_eq!(flags, "00", "{r}"),
        }
    }
}

#[test]
fn a_collector_that_is_down_costs_no_request_and_drops_are_counted() {
    // Started only to serve as the origin; the collector address is dead.
    let Some(origin) = Collector::start(false) else { return };
    let (listen, admin) = (proxy_addr(), proxy_addr());
    let toml = simple_config(listen, &[origin.addr], "")
        + &format!(
            "\n[admin]\nlisten = \"{admin}\"\n\n[tracing]\nendpoint = \"http://{}/v1/traces\"\ninterval = \"20ms\"\ntimeout = \"1s\"\n",
            dead_addr()
        );
    let proxy = Proxy::start(&toml, listen);
    wait_for("the admin listener", || TcpStream::connect(admin).ok());
    let mut client = proxy.connect();
    for i in 0..200 {
        let r = client.request("GET", &format!("/r{i}"), &[("host", "a")]);
        assert_eq!(r.status, 200, "request {i}");
    }
    let failed = r#"switchyard_tracing_dropped_spans_total{reason="export_failed"}"#;
    wait_for("export failures counted", || metric(admin, failed).filter(|&n| n > 0.0));
    assert_eq!(metric(admin, "switchyard_tracing_exported_spans_total"), Some(0.0));
    assert_eq!(origin.requests().len(), 200);
}

#[test]
fn a_stalled_collector_fills_the_queue_and_drops_are_counted() {
    let Some(collector) = Collector::start(true) else { return };
    let (listen, admin) = (proxy_addr(), proxy_addr());
    let tracing = "batch_size = 1\nqueue_size = 4\ntimeout = \"30s\"";
    let toml = config(listen, &collector, tracing, "") + &format!("\n[admin]\nlisten = \"{admin}\"\n");
    let proxy = Proxy::start(&toml, listen);
    wait_for("the admin listener", || TcpStream::connect(admin).ok());
    // Every export is held for a minute: the requests are answered meanwhile.
    let mut client = proxy.connect();
    for i in 0..100 {
        assert_eq!(client.request("GET", &format!("/s{i}"), &[("host", "a")]).status, 200, "request {i}");
    }
    let full = r#"switchyard_tracing_dropped_spans_total{reason="queue_full"}"#;
    let dropped = wait_for("queue drops counted", || metric(admin, full).filter(|&n| n > 0.0));
    // One export in flight and at most `queue_size` requests queued: the rest were dropped.
    assert!(dropped >= f64::from((100 - 1 - 4) * 2), "dropped {dropped}");
}

#[test]
fn off_passes_trace_headers_untouched_and_a_reload_turns_it_on() {
    let Some(collector) = Collector::start(false) else { return };
    let listen = proxy_addr();
    let proxy = Proxy::start(&simple_config(listen, &[collector.addr], ""), listen);
    // Off: switchyard is not part of the trace; even an invalid header passes as it came.
    let odd = "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01";
    assert_eq!(get(&proxy, "/before", &[("traceparent", odd), ("tracestate", "rojo=1")]).status, 200);
    let before = wait_for("the origin's request", || collector.requests().into_iter().find(|r| r["path"] == "/before"));
    assert_eq!(
        (before["traceparent"].clone(), before["tracestate"].clone()),
        (serde_json::json!([odd]), serde_json::json!(["rojo=1"]))
    );

    std::fs::write(&proxy.config, config(listen, &collector, "", "")).expect("rewrite the config");
    proxy.reload(1);
    assert!(proxy.log().contains("tracing changed"), "{}", proxy.log());
    let parent = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    assert_eq!(get(&proxy, "/after", &[("traceparent", &parent)]).status, 200);
    let (seen, spans) = collector.trace_of("/after", 2);
    assert_eq!(trace_id_of(&seen), CLIENT_TRACE);
    assert!(spans.iter().any(|s| s["kind"] == 2 && s["parent_span_id"] == CLIENT_SPAN), "{spans:?}");
}
