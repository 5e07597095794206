//! OpenTelemetry tracing against Jaeger (v2, the OpenTelemetry Collector based
//! all-in-one binary with its in-memory store), a receiver we did not write: a request
//! with a client `traceparent` yields spans in the client's trace, the proxy's server span
//! parented on the client's span and its client span on that, the origin told the client
//! span's id; a Jaeger that is gone costs no request.
//!
//! Jaeger is big to build (about 12 minutes on a 2-core machine), so scripts/test.sh
//! builds it into `.tools/bin/jaeger` only when asked (`SWITCHYARD_JAEGER=1`); without it
//! this test says it skipped. It uses Jaeger's default ports (OTLP/HTTP 4318, query 16686)
//! and skips when another process holds them.

use crate::common;

use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use serde_json::Value;

const OTLP: &str = "127.0.0.1:4318";
const QUERY: &str = "127.0.0.1:16686";
const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const CLIENT_SPAN: &str = "b7ad6b7169203331";

/// Jaeger, killed by PID when dropped.
struct Jaeger(Child);

impl Drop for Jaeger {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn listening(addr: &str) -> bool {
    let addr: SocketAddr = addr.parse().expect("address");
    TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
}

/// Starts Jaeger when it is installed and its ports are free.
fn start_jaeger() -> Option<Jaeger> {
    let binary = workspace_root().join(".tools/bin/jaeger");
    if !binary.exists() {
        eprintln!("SKIPPED tracing_jaeger: no .tools/bin/jaeger (SWITCHYARD_JAEGER=1 ./scripts/test.sh builds it)");
        return None;
    }
    if listening(OTLP) || listening(QUERY) {
        eprintln!("SKIPPED tracing_jaeger: ports 4318 or 16686 are taken by another process");
        return None;
    }
    let log = temp_dir("jaeger").join("jaeger.log");
    let out = std::fs::File::create(&log).expect("log file");
    let child = Command::new(binary)
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("log file"))
        .stderr(out)
        .spawn()
        .expect("spawn jaeger");
    let jaeger = Jaeger(child);
    wait_for("Jaeger to listen", || (listening(OTLP) && listening(QUERY)).then_some(()));
    Some(jaeger)
}

/// The spans Jaeger holds for `trace`, once there are at least `n`.
fn spans(trace: &str, n: usize) -> Vec<Value> {
    let query: SocketAddr = QUERY.parse().expect("address");
    wait_for(&format!("{n} spans of trace {trace} in Jaeger"), || {
        let r = Client::connect(query).request("GET", &format!("/api/traces/{trace}"), &[("host", QUERY)]);
        let spans = r.json()["data"].get(0)?["spans"].as_array()?.clone();
        (spans.len() >= n).then_some(spans)
    })
}

fn parent(span: &Value) -> Option<&str> {
    span["references"].as_array()?.iter().find(|r| r["refType"] == "CHILD_OF")?["spanID"].as_str()
}

fn kind(span: &Value) -> Option<&str> {
    span["tags"].as_array()?.iter().find(|t| t["key"] == "span.kind")?["value"].as_str()
}

#[test]
fn jaeger_receives_the_trace_correctly_parented_and_its_absence_costs_nothing() {
    let Some(jaeger) = start_jaeger() else { return };
    let origin = Origin::start("traced");
    let listen = proxy_addr();
    let config = simple_config(
        listen,
        &[origin.addr],
        &format!("\n[tracing]\nendpoint = \"http://{OTLP}/v1/traces\"\nsample_ratio = 1.0\n"),
    );
    let proxy = Proxy::start(&config, listen);
    let traceparent = format!("00-{TRACE}-{CLIENT_SPAN}-01");
    let r = proxy.connect().request("GET", "/__origin/request", &[("host", "t"), ("traceparent", &traceparent)]);
    assert_eq!(r.status, 200);
    let seen = r.json()["headers"]
        .as_array()
        .and_then(|h| h.iter().find(|h| h[0].as_str().is_some_and(|n| n.eq_ignore_ascii_case("traceparent"))).cloned())
        .and_then(|h| h[1].as_str().map(String::from))
        .expect("the origin received a traceparent");
    let sent_parent = seen.split('-').nth(2).expect("a parent id").to_string();
    assert!(seen.starts_with(&format!("00-{TRACE}-")) && sent_parent != CLIENT_SPAN, "{seen}");

    let spans = spans(TRACE, 2);
    let server = spans.iter().find(|s| kind(s) == Some("server")).expect("a server span");
    assert_eq!(parent(server), Some(CLIENT_SPAN), "{server}");
    let client = spans.iter().find(|s| kind(s) == Some("client")).expect("a client span");
    assert_eq!(parent(client), server["spanID"].as_str(), "{client}");
    assert_eq!(client["spanID"].as_str(), Some(sent_parent.as_str()), "the origin's parent is the client span");

    // Jaeger gone: every request is still answered.
    drop(jaeger);
    let mut c = proxy.connect();
    for i in 0..20 {
        assert_eq!(c.request("GET", &format!("/after/{i}"), &[("host", "t")]).status, 200, "{}", proxy.log());
    }
}
