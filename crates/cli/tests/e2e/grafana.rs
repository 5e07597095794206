//! The Grafana dashboard shipped in `examples/grafana-dashboard.json`: every
//! PromQL query of every panel runs against a real Prometheus server
//! (Debian's `prometheus`) that scraped a running switchyard with every kind
//! of family (HTTP service with cache and compression, a queued pool, a
//! `udp` service), and returns series; every metric it names was scraped.

use crate::common;

use std::collections::BTreeSet;
use std::net::{SocketAddr, UdpSocket};
use std::thread;
use std::time::Duration;

use common::prometheus::{Job, Prometheus};
use common::*;

/// Every `expr` of every panel target, with the panel's title.
fn queries(dashboard: &serde_json::Value) -> Vec<(String, String)> {
    let panels = dashboard["panels"].as_array().expect("panels");
    let mut out = Vec::new();
    for panel in panels {
        let title = panel["title"].as_str().expect("a panel title").to_string();
        for target in panel["targets"].as_array().expect("targets") {
            out.push((title.clone(), target["expr"].as_str().expect("expr").to_string()));
        }
    }
    out
}

/// The metric names a query uses.
fn metric_names(expr: &str) -> BTreeSet<String> {
    expr.match_indices("switchyard_")
        .map(|(at, _)| expr[at..].chars().take_while(|c| c.is_ascii_lowercase() || *c == '_').collect())
        .collect()
}

fn udp_echo() -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let addr = socket.local_addr().expect("addr");
    thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = socket.recv_from(&mut buf) {
            let _ = socket.send_to(&buf[..n], from);
        }
    });
    addr
}

#[test]
fn every_dashboard_query_returns_series_from_a_real_scrape() {
    let text = std::fs::read_to_string(workspace_root().join("examples/grafana-dashboard.json")).expect("dashboard");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let all = queries(&dashboard);
    assert!(all.len() >= 20, "{} queries", all.len());
    for (title, expr) in &all {
        assert!(!expr.contains('$'), "{title}: `{expr}` uses a Grafana variable the test cannot evaluate");
    }

    let (a, b, dns) = (Origin::start("a"), Origin::start("b"), udp_echo());
    let (listen, udp_listen, admin) = (proxy_addr(), proxy_addr(), proxy_addr());
    let toml = format!(
        "workers = 1\n\n[admin]\nlisten = \"{admin}\"\n\n\
         [[service]]\nname = \"web\"\nlisten = \"{listen}\"\npool = \"main\"\n\
         compression = {{ algorithms = [\"gzip\"], min_size = 256 }}\ncache = {{ size = \"16MiB\" }}\n\n\
         [[service]]\nname = \"dns\"\nmode = \"udp\"\nlisten = \"{udp_listen}\"\npool = \"u\"\n\n\
         [[pool]]\nname = \"main\"\nqueue = {{ size = 8, timeout = \"5s\" }}\n\
         servers = [{{ address = \"{}\", name = \"a\" }}, {{ address = \"{}\", name = \"b\" }}]\n\n\
         [[pool]]\nname = \"u\"\nservers = [{{ address = \"{dns}\", name = \"d\" }}]\n",
        a.addr, b.addr
    );
    let proxy = Proxy::start(&toml, listen);
    let prometheus = Prometheus::start(&[Job { name: "switchyard", target: admin, format: None }]);

    // Traffic of every kind: cached and compressed pages, misses, an error, datagrams.
    let mut client = proxy.connect();
    for i in 0..20 {
        let path = format!("/p{}?compressible=1&size=4000&cache=60", i % 4);
        let r = client.request("GET", &path, &[("accept-encoding", "gzip")]);
        assert_eq!(r.status, 200);
    }
    assert_eq!(client.get("/?status=503").status, 503);
    let socket = UdpSocket::bind("127.0.0.1:0").expect("client");
    socket.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    for i in 0..10 {
        socket.send_to(format!("q{i}").as_bytes(), udp_listen).expect("send");
        let mut buf = [0u8; 64];
        socket.recv_from(&mut buf).expect("a reply");
    }

    // Every query returns series once a few scrapes have happened.
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let empty: Vec<String> =
            all.iter().filter(|(_, e)| prometheus.query(e).is_empty()).map(|(t, e)| format!("{t}: {e}")).collect();
        if empty.is_empty() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "queries without series: {empty:#?}\n{}", prometheus.log());
        thread::sleep(Duration::from_millis(500));
    }
    let names = prometheus.api("/api/v1/label/__name__/values", &[]).expect("metric names");
    let scraped: BTreeSet<String> =
        names.as_array().expect("names").iter().filter_map(|n| n.as_str().map(String::from)).collect();
    for (title, expr) in &all {
        for name in metric_names(expr) {
            assert!(scraped.contains(&name), "{title}: `{name}` was never scraped (scraped: {scraped:?})");
        }
    }
    // The values mean what the panels say.
    let hits = prometheus.value("sum(switchyard_cache_hits_total{service=\"web\"})").expect("cache hits");
    assert!(hits >= 10.0, "cache hits {hits}");
    let saved = prometheus.value("sum(switchyard_compression_input_bytes_total)").expect("compression input");
    assert!(saved >= 4000.0, "compressed payload {saved}");
}
