//! The metrics endpoint against the tools operators run: a real Prometheus
//! server (Debian's `prometheus` 2.42) scraping a running switchyard in both
//! text formats, `promtool check metrics` on the classic format, and the
//! strict OpenMetrics parser of the Python client library (Debian's
//! `python3-prometheus-client`) on the OpenMetrics one.

use crate::common;

use std::net::SocketAddr;
use std::process::Command;

use common::prometheus::{promtool_check, Job, Prometheus};
use common::*;

/// The `Accept` header Prometheus 2.42 sends on every scrape.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                                 version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// `/metrics` of `admin` with an `Accept` header: (content type, body).
fn scrape(admin: SocketAddr, accept: &str) -> (String, String) {
    let host = admin.to_string();
    let headers = [("host", host.as_str()), ("accept", accept), ("connection", "close")];
    let r = Client::connect(admin).request("GET", "/metrics", &headers);
    assert_eq!(r.status, 200, "{}", r.text());
    (r.header("content-type").unwrap_or_default().to_string(), r.text())
}

/// Parses `text` with the Python client's OpenMetrics parser; its error if it refuses.
fn openmetrics_parse(text: &str) -> Result<String, String> {
    let script = "import sys\nfrom prometheus_client.openmetrics.parser import text_string_to_metric_families as p\n\
                  for f in p(sys.stdin.read()): print(f.name, f.type, len(f.samples))\n";
    let path = write_temp("openmetrics", "exposition.txt", text);
    let out = Command::new("/usr/bin/python3")
        .args(["-c", script])
        .stdin(std::fs::File::open(&path).expect("open exposition"))
        .output()
        .expect("run python3 (apt-get install -y python3-prometheus-client)");
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(said)
    } else {
        Err(format!("{said}{}", String::from_utf8_lossy(&out.stderr)))
    }
}

/// Every family's type as Prometheus recorded it for `job`'s target.
fn types(prometheus: &Prometheus, job: &str) -> Vec<(String, String)> {
    let matcher = format!("match_target={{job=\"{job}\"}}");
    let data = wait_for("target metadata", || {
        prometheus.api("/api/v1/targets/metadata", &[&matcher]).filter(|d| d.as_array().is_some_and(|a| !a.is_empty()))
    });
    let rows = data.as_array().cloned().unwrap_or_default();
    rows.iter()
        .map(|r| (r["metric"].as_str().unwrap_or("").to_string(), r["type"].as_str().unwrap_or("").to_string()))
        .collect()
}

#[test]
fn prometheus_scrapes_both_formats_and_sees_a_counter_move() {
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    let (listen, admin) = (proxy_addr(), proxy_addr());
    let toml = format!("{}\n[admin]\nlisten = \"{admin}\"\n", simple_config(listen, &[a.addr, b.addr], ""));
    let proxy = Proxy::start(&toml, listen);
    wait_for("the admin listener", || std::net::TcpStream::connect(admin).ok());
    assert_eq!(proxy.get("/").status, 200);

    // Both formats, as served: the content type the Accept asks for, and
    // clean for the reference parsers.
    let (open_type, open) = scrape(admin, PROMETHEUS_ACCEPT);
    assert!(open_type.starts_with("application/openmetrics-text; version=1.0.0"), "{open_type}");
    let parsed = openmetrics_parse(&open).unwrap_or_else(|e| panic!("OpenMetrics parser refused it: {e}\n{open}"));
    assert!(parsed.lines().any(|l| l.starts_with("switchyard_requests counter")), "{parsed}");
    let (text_type, text) = scrape(admin, "*/*");
    assert!(text_type.starts_with("text/plain; version=0.0.4"), "{text_type}");
    let (clean, said) = promtool_check(&text);
    assert!(clean && said.trim().is_empty(), "promtool check metrics: {said}\n{text}");
    assert!(!text.contains("# EOF") && !text.contains(" info\n"), "OpenMetrics-only lines in:\n{text}");

    let prometheus = Prometheus::start(&[
        Job { name: "negotiated", target: admin, format: None },
        Job { name: "classic", target: admin, format: Some("text") },
    ]);
    let up = |job: &str| prometheus.value(&format!("up{{job=\"{job}\"}}"));
    wait_for("both targets up", || (up("negotiated") == Some(1.0) && up("classic") == Some(1.0)).then_some(()));

    let negotiated = types(&prometheus, "negotiated");
    let classic = types(&prometheus, "classic");
    for (set, family, ty) in [
        (&negotiated, "switchyard_requests", "counter"),
        (&negotiated, "switchyard_request_duration_seconds", "histogram"),
        (&negotiated, "switchyard_server", "info"),
        (&negotiated, "switchyard_server_state", "gauge"),
        (&negotiated, "switchyard_received_bytes", "counter"),
        (&classic, "switchyard_requests_total", "counter"),
        (&classic, "switchyard_request_duration_seconds", "histogram"),
        (&classic, "switchyard_server_info", "gauge"),
        (&classic, "switchyard_server_state", "gauge"),
        (&classic, "switchyard_received_bytes_total", "counter"),
    ] {
        assert!(set.iter().any(|(f, t)| f == family && t == ty), "{family} {ty} not in {set:?}");
    }

    // A counter moves after traffic, seen through both jobs.
    let requests = |job: &str| prometheus.value(&format!("switchyard_requests_total{{job=\"{job}\",service=\"web\"}}"));
    let before = wait_for("a first sample", || requests("negotiated").zip(requests("classic")));
    for _ in 0..5 {
        assert_eq!(proxy.get("/").status, 200);
    }
    wait_for("the counter to move in both jobs", || {
        let (n, c) = requests("negotiated").zip(requests("classic"))?;
        (n >= before.0 + 5.0 && c >= before.1 + 5.0).then_some(())
    });
    let buckets = prometheus.query("switchyard_request_duration_seconds_bucket{job=\"classic\",service=\"web\"}");
    assert!(buckets.len() > 40, "histogram buckets scraped: {}\n{}", buckets.len(), prometheus.log());
}
