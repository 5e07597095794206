//! The admin API over a real socket on 127.0.0.1:0: authentication, the
//! event stream (rates computed from moving counters, history for late
//! subscribers, one sampler for all), shutdown, and the loopback rule.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::sync::Arc;
use std::time::Duration;

use common::{serve_in_background, Fake, ADMIN, PATIENCE, READER};
use switchyard_admin::{AdminState, Options};

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(PATIENCE)).build().new_agent()
}

fn fast_state(fake: &Arc<Fake>, tokens: Vec<switchyard_config::AdminToken>) -> AdminState {
    let options = Options { sample_interval: Duration::from_millis(100), history: 300 };
    AdminState::with_options(fake.clone(), tokens, options)
}

fn get(url: &str, token: Option<&str>) -> (u16, String) {
    let mut request = agent().get(url);
    if let Some(t) = token {
        request = request.header("authorization", format!("Bearer {t}"));
    }
    let mut response = request.call().expect("answer");
    let status = response.status().as_u16();
    (status, response.body_mut().read_to_string().expect("body"))
}

/// Reads server-sent events from `reader` until one named `name`; returns its data.
fn next_event(reader: &mut impl BufRead, name: &str) -> String {
    let mut current = String::new();
    for _ in 0..10_000 {
        let mut line = String::new();
        let n = reader.read_line(&mut line).expect("read event stream");
        assert!(n > 0, "event stream ended before a `{name}` event");
        let line = line.trim_end_matches(['\r', '\n']);
        if let Some(event) = line.strip_prefix("event:") {
            current = event.trim().to_owned();
        } else if let Some(data) = line.strip_prefix("data:") {
            if current == name {
                return data.trim_start().to_owned();
            }
        }
    }
    panic!("no `{name}` event in 10000 lines");
}

fn open_events(url: &str) -> BufReader<impl Read> {
    let response = agent().get(url).call().expect("event stream");
    assert_eq!(response.status().as_u16(), 200);
    let content_type = response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default();
    assert_eq!(content_type, "text/event-stream");
    BufReader::new(response.into_body().into_reader())
}

#[test]
fn tokens_are_checked_over_the_wire() {
    let fake = Fake::new();
    let (addr, _server) = serve_in_background(fast_state(&fake, common::tokens()));
    let url = format!("http://{addr}/api/v1/stats");
    assert_eq!(get(&url, None).0, 401);
    assert_eq!(get(&url, Some("wrong")).0, 401);
    let (status, body) = get(&url, Some(READER));
    assert_eq!(status, 200);
    assert!(body.contains("\"origin-a\""));
    assert_eq!(get(&url, Some(ADMIN)).0, 200);
    // The page itself is public.
    assert_eq!(get(&format!("http://{addr}/"), None).0, 200);
}

#[test]
fn events_carry_rates_computed_from_consecutive_snapshots() {
    let fake = Fake::new();
    let (addr, _server) = serve_in_background(fast_state(&fake, common::tokens()));
    // EventSource cannot send headers: the token travels in the query, on this path only.
    assert_eq!(get(&format!("http://{addr}/api/v1/stats?token={ADMIN}"), None).0, 401);
    let mut events = open_events(&format!("http://{addr}/api/v1/events?token={READER}"));
    let history: serde_json::Value = serde_json::from_str(&next_event(&mut events, "history")).expect("history JSON");
    assert!(history.is_array());
    let sample: serde_json::Value = serde_json::from_str(&next_event(&mut events, "stats")).expect("sample JSON");
    // The fake adds 10 requests, 1000 bytes in and 10000 out per snapshot.
    let rps = sample["total"]["rps"].as_f64().expect("rps");
    let bytes_in = sample["total"]["in"].as_f64().expect("in");
    let bytes_out = sample["total"]["out"].as_f64().expect("out");
    assert!(rps > 0.0, "{sample}");
    assert!((bytes_in / rps - 100.0).abs() < 1e-6, "bytes in per request: {sample}");
    assert!((bytes_out / bytes_in - 10.0).abs() < 1e-6, "out/in: {sample}");
    assert_eq!(sample["total"]["conns"], 4);
    // Every interval observation sits in the (1 ms, 2 ms] bucket.
    let p50 = sample["total"]["p50"].as_f64().expect("p50");
    let p99 = sample["total"]["p99"].as_f64().expect("p99");
    assert!((1.0..=2.0).contains(&p50) && p50 <= p99 && p99 <= 2.0, "{sample}");
    assert_eq!(sample["services"][0]["name"], "demo");
    let server = &sample["pools"][0]["servers"][0];
    assert_eq!(server["name"], "origin-a");
    assert_eq!(server["state"], "up");
    assert!(server["rps"].as_f64().expect("server rps") > 0.0, "{sample}");
    assert!(sample["t"].as_u64().expect("t") > 0);
}

#[test]
fn late_subscribers_get_the_history_and_share_one_sampler() {
    let fake = Fake::new();
    let (addr, _server) = serve_in_background(fast_state(&fake, Vec::new()));
    let url = format!("http://{addr}/api/v1/events");
    let mut first = open_events(&url);
    let mut seen = Vec::new();
    for _ in 0..3 {
        let sample: serde_json::Value = serde_json::from_str(&next_event(&mut first, "stats")).expect("sample");
        seen.push(sample["t"].as_u64().expect("t"));
    }
    let mut second = open_events(&url);
    let history: serde_json::Value = serde_json::from_str(&next_event(&mut second, "history")).expect("history");
    let history: Vec<u64> = history.as_array().expect("array").iter().filter_map(|s| s["t"].as_u64()).collect();
    assert!(history.len() >= 3, "history holds the samples already sent: {history:?}");
    assert!(seen.iter().all(|t| history.contains(t)), "{seen:?} ⊄ {history:?}");
    // Both subscribers receive the very same samples: one sampler, broadcast.
    let a: serde_json::Value = serde_json::from_str(&next_event(&mut first, "stats")).expect("sample");
    let b: serde_json::Value = serde_json::from_str(&next_event(&mut second, "stats")).expect("sample");
    let (ta, tb) = (a["t"].as_u64().expect("t"), b["t"].as_u64().expect("t"));
    let mut later = if ta < tb { first } else { second };
    let target = ta.max(tb);
    let mut t = ta.min(tb);
    while t < target {
        let s: serde_json::Value = serde_json::from_str(&next_event(&mut later, "stats")).expect("sample");
        t = s["t"].as_u64().expect("t");
    }
    assert_eq!(t, target, "the lagging subscriber meets the same sample");
}

#[test]
fn shutdown_ends_event_streams_and_the_server() {
    let fake = Fake::new();
    let (addr, server) = serve_in_background(fast_state(&fake, Vec::new()));
    let mut events = open_events(&format!("http://{addr}/api/v1/events"));
    next_event(&mut events, "stats");
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(server); // Signals shutdown and joins the server thread.
        let _ = done_tx.send(());
    });
    let mut rest = String::new();
    let _ = events.read_to_string(&mut rest); // Returns at end of stream (or errors on reset).
    done_rx.recv_timeout(PATIENCE).expect("the server stopped although a dashboard was connected");
    assert!(std::net::TcpStream::connect(addr).is_err(), "nothing listens after shutdown");
}

#[tokio::test]
async fn an_open_admin_api_is_served_only_on_loopback() {
    let fake = Fake::new();
    let state = AdminState::new(fake.clone(), Vec::new());
    let refused = switchyard_admin::serve_with("0.0.0.0:0".parse().expect("addr"), state, std::future::pending()).await;
    let error = refused.err().expect("refused");
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
    assert!(error.to_string().contains("not a loopback address"), "{error}");

    let admin = switchyard_config::Admin { listen: "127.0.0.1:0".parse().expect("addr"), tokens: Vec::new() };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (addr, served) = switchyard_admin::serve(&admin, fake, async move {
        let _ = stopped.await;
    })
    .await
    .expect("serve on loopback");
    assert!(addr.ip().is_loopback() && addr.port() != 0);
    let task = tokio::spawn(served);
    let _ = stop.send(());
    common::bounded("the server to stop", task).await.expect("served");
}
