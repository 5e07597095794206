//! The admin API in process: `router(state)` driven with `oneshot`, a fake
//! backend that records calls. Every endpoint's happy path, authentication
//! and roles, and bad input.

mod common;

use std::sync::Arc;

use axum::http::StatusCode;
use common::{send, Call, Fake, ADMIN, READER};
use switchyard_admin::{router, AdminState, ServerOp};

fn open_app(fake: &Arc<Fake>) -> axum::Router {
    router(AdminState::new(fake.clone(), Vec::new()))
}

fn locked_app(fake: &Arc<Fake>) -> axum::Router {
    router(AdminState::new(fake.clone(), common::tokens()))
}

#[tokio::test]
async fn reads_answer_json_and_text() {
    let fake = Fake::new();
    let app = open_app(&fake);

    let health = send(&app, "GET", "/api/v1/health", None, "").await;
    assert_eq!(health.status, StatusCode::OK);
    assert_eq!(health.json()["status"], "ok");
    assert_eq!(health.json()["generation"], 1);
    assert_eq!(health.json()["config_source"], "/etc/switchyard.toml");

    let config = send(&app, "GET", "/api/v1/config", None, "").await;
    assert_eq!(config.status, StatusCode::OK);
    assert!(config.headers["content-type"].to_str().expect("ascii").starts_with("text/plain"));
    assert!(config.body.contains("[[service]]"));

    let stats = send(&app, "GET", "/api/v1/stats", None, "").await;
    assert_eq!(stats.status, StatusCode::OK);
    let json = stats.json();
    assert_eq!(json["services"][0]["name"], "demo");
    assert_eq!(json["services"][0]["responses"]["2xx"], 10);
    assert_eq!(json["pools"][0]["servers"][1]["name"], "origin-b");

    let metrics = send(&app, "GET", "/metrics", None, "").await;
    assert_eq!(metrics.status, StatusCode::OK);
    assert_eq!(metrics.headers["content-type"], "text/plain; version=0.0.4; charset=utf-8");
    assert!(metrics.body.contains("switchyard_requests_total"));
}

#[tokio::test]
async fn server_actions_reach_the_backend() {
    let fake = Fake::new();
    let app = open_app(&fake);
    for (action, state) in [("drain", "draining"), ("disable", "maintenance"), ("enable", "up")] {
        let uri = format!("/api/v1/pools/web/servers/origin-a/{action}");
        let answer = send(&app, "POST", &uri, None, "").await;
        assert_eq!(answer.status, StatusCode::OK, "{action}: {}", answer.body);
        assert_eq!(answer.json()["state"], state);
        assert_eq!(answer.json()["name"], "origin-a");
    }
    let weight = send(&app, "PUT", "/api/v1/pools/web/servers/origin-b/weight", None, r#"{"weight": 25}"#).await;
    assert_eq!(weight.status, StatusCode::OK, "{}", weight.body);
    assert_eq!(weight.json()["weight"], 25);
    assert_eq!(weight.json()["configured_weight"], 100);
    let server = |s: &str, op| Call::Server("web".into(), s.into(), op);
    assert_eq!(
        fake.calls(),
        vec![
            server("origin-a", ServerOp::Drain),
            server("origin-a", ServerOp::Disable),
            server("origin-a", ServerOp::Enable),
            server("origin-b", ServerOp::Weight(25)),
        ]
    );
}

#[tokio::test]
async fn unknown_pools_servers_and_actions_are_404_with_a_message() {
    let fake = Fake::new();
    let app = open_app(&fake);
    let answer = send(&app, "POST", "/api/v1/pools/web/servers/nope/drain", None, "").await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert_eq!(answer.error(), "no server `nope` in pool `web`");
    let answer = send(&app, "POST", "/api/v1/pools/nope/servers/origin-a/enable", None, "").await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert_eq!(answer.error(), "no pool `nope`");
    let answer = send(&app, "POST", "/api/v1/pools/web/servers/origin-a/explode", None, "").await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert!(answer.error().contains("unknown server action `explode`"), "{}", answer.body);
    let answer = send(&app, "GET", "/api/v1/nothing", None, "").await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert_eq!(answer.error(), "no such endpoint: /api/v1/nothing");
    // Only the two known server names reached the backend; the bad action did not.
    assert_eq!(fake.calls().len(), 2);
}

#[tokio::test]
async fn bad_weights_are_400_with_a_message() {
    let fake = Fake::new();
    let app = open_app(&fake);
    let uri = "/api/v1/pools/web/servers/origin-a/weight";
    for (body, expected) in [
        (r#"{"weight": 1001}"#, "weight must be an integer from 0 to 1000, got 1001"),
        (r#"{"weight": -5}"#, "weight must be an integer from 0 to 1000, got -5"),
        (r#"{"weight": "heavy"}"#, "weight must be an integer from 0 to 1000, got \"heavy\""),
        (r#"{"weigth": 5}"#, "missing field `weight`; expected {\"weight\": N}"),
    ] {
        let answer = send(&app, "PUT", uri, None, body).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(answer.error(), expected, "{body}");
    }
    let answer = send(&app, "PUT", uri, None, "{not json").await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert!(answer.error().starts_with("malformed JSON body"), "{}", answer.body);
    assert!(fake.calls().is_empty(), "no bad weight reaches the backend");
}

#[tokio::test]
async fn persistence_lists_and_flushes() {
    let fake = Fake::new();
    let app = open_app(&fake);
    let answer = send(&app, "GET", "/api/v1/pools/web/persistence", None, "").await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.json()["total"], 3);
    assert_eq!(answer.json()["entries"][0]["key"], "10.0.0.0");
    let answer = send(&app, "GET", "/api/v1/pools/web/persistence?limit=2", None, "").await;
    assert_eq!(answer.json()["entries"].as_array().map(Vec::len), Some(2));
    let answer = send(&app, "GET", "/api/v1/pools/web/persistence?limit=50000", None, "").await;
    assert_eq!(answer.status, StatusCode::OK);
    let answer = send(&app, "GET", "/api/v1/pools/web/persistence?limit=many", None, "").await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    let answer = send(&app, "GET", "/api/v1/pools/images/persistence", None, "").await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    assert_eq!(answer.error(), "pool `images` has no persistence");
    let answer = send(&app, "DELETE", "/api/v1/pools/web/persistence", None, "").await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.json()["removed"], 3);
    let answer = send(&app, "DELETE", "/api/v1/pools/nope/persistence", None, "").await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert_eq!(
        fake.calls(),
        vec![
            Call::Persistence("web".into(), 100),
            Call::Persistence("web".into(), 2),
            Call::Persistence("web".into(), 10_000),
            Call::Persistence("images".into(), 100),
            Call::Flush("web".into()),
            Call::Flush("nope".into()),
        ]
    );
}

#[tokio::test]
async fn validate_answers_200_or_422_with_diagnostics() {
    let fake = Fake::new();
    let app = open_app(&fake);
    let answer = send(&app, "POST", "/api/v1/config/validate?name=conf%2Fa.toml", None, "[admin]\n").await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.json()["valid"], true);
    assert_eq!(answer.json()["warnings"][0], "conf/a.toml: warning: no health check");
    let answer = send(&app, "POST", "/api/v1/config/validate", None, "invalid = 1\n").await;
    assert_eq!(answer.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(answer.json()["valid"], false);
    assert_eq!(answer.json()["diagnostics"][0], "<request>:1:1: error: unknown key `invalid`");
    assert_eq!(answer.json()["diagnostics"][1], "  hint: remove it");
    assert_eq!(
        fake.calls(),
        vec![
            Call::Validate("[admin]\n".into(), "conf/a.toml".into()),
            Call::Validate("invalid = 1\n".into(), "<request>".into())
        ]
    );
}

#[tokio::test]
async fn oversize_and_non_utf8_bodies_are_refused() {
    let fake = Fake::new();
    let app = open_app(&fake);
    let big = "#".repeat(switchyard_admin::BODY_LIMIT + 1);
    let answer = send(&app, "POST", "/api/v1/config/validate", None, big).await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(!answer.error().is_empty());
    let answer = send(&app, "POST", "/api/v1/config/validate", None, vec![0xff, 0xfe]).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    let big_weight = format!(r#"{{"weight": 1, "pad": "{}"}}"#, "x".repeat(switchyard_admin::BODY_LIMIT));
    let answer = send(&app, "PUT", "/api/v1/pools/web/servers/origin-a/weight", None, big_weight).await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(fake.calls().is_empty());
}

#[tokio::test]
async fn reload_applies_or_explains() {
    let fake = Fake::new();
    let app = open_app(&fake);
    let answer = send(&app, "POST", "/api/v1/reload", None, "").await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.json()["generation"], 2);
    assert_eq!(answer.json()["summary"], "1 pool changed");

    let demo = Fake::demo();
    let answer = send(&open_app(&demo), "POST", "/api/v1/reload", None, "").await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    assert_eq!(answer.error(), "the demo has no configuration file to reload");
}

#[tokio::test]
async fn tokens_are_required_when_configured() {
    let fake = Fake::new();
    let app = locked_app(&fake);
    for uri in ["/api/v1/health", "/api/v1/stats", "/api/v1/config", "/metrics", "/api/v1/events"] {
        let answer = send(&app, "GET", uri, None, "").await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{uri}");
        assert_eq!(answer.headers["www-authenticate"], "Bearer realm=\"switchyard\"");
        let answer = send(&app, "GET", uri, Some("wrong"), "").await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{uri}");
        assert_eq!(answer.error(), "unknown token");
    }
    for token in [ADMIN, READER] {
        let answer = send(&app, "GET", "/api/v1/health", Some(token), "").await;
        assert_eq!(answer.status, StatusCode::OK);
    }
    let answer = send(&app, "POST", "/api/v1/reload", None, "").await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    assert!(fake.calls().is_empty(), "nothing reached the backend without a token");
}

#[tokio::test]
async fn read_only_tokens_read_and_validate_but_change_nothing() {
    let fake = Fake::new();
    let app = locked_app(&fake);
    for (method, uri, body) in [
        ("POST", "/api/v1/pools/web/servers/origin-a/drain", ""),
        ("PUT", "/api/v1/pools/web/servers/origin-a/weight", r#"{"weight": 1}"#),
        ("DELETE", "/api/v1/pools/web/persistence", ""),
        ("POST", "/api/v1/reload", ""),
    ] {
        let answer = send(&app, method, uri, Some(READER), body).await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "{method} {uri}");
        assert!(answer.error().contains("read-only"), "{}", answer.body);
    }
    assert!(fake.calls().is_empty(), "no refused change reached the backend");
    let answer = send(&app, "POST", "/api/v1/config/validate", Some(READER), "[admin]\n").await;
    assert_eq!(answer.status, StatusCode::OK);
    let answer = send(&app, "GET", "/api/v1/pools/web/persistence", Some(READER), "").await;
    assert_eq!(answer.status, StatusCode::OK);
    let answer = send(&app, "POST", "/api/v1/pools/web/servers/origin-a/drain", Some(ADMIN), "").await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(fake.calls().last(), Some(&Call::Server("web".into(), "origin-a".into(), ServerOp::Drain)));
}

#[tokio::test]
async fn the_dashboard_needs_no_token_and_embeds_its_assets() {
    let fake = Fake::new();
    let app = locked_app(&fake);
    let page = send(&app, "GET", "/", None, "").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.headers["content-type"].to_str().expect("ascii").starts_with("text/html"));
    assert!(page.headers["content-security-policy"].to_str().expect("ascii").contains("default-src 'self'"));
    assert_eq!(page.headers["x-frame-options"], "DENY");
    assert!(page.body.contains(r#"<canvas id="chart-requests""#));
    for (path, kind) in [("/assets/dashboard.js", "text/javascript"), ("/assets/dashboard.css", "text/css")] {
        let asset = send(&app, "GET", path, None, "").await;
        assert_eq!(asset.status, StatusCode::OK, "{path}");
        assert!(asset.headers["content-type"].to_str().expect("ascii").starts_with(kind), "{path}");
        assert!(asset.body.len() > 1000, "{path}");
    }
}

/// A request as a browser would send it, with `Host` and `Origin`.
async fn browser_request(app: &axum::Router, method: &str, uri: &str, host: &str, origin: Option<&str>) -> StatusCode {
    let mut request = axum::http::Request::builder().method(method).uri(uri).header("host", host);
    if let Some(o) = origin {
        request = request.header("origin", o);
    }
    let request = request.body(axum::body::Body::empty()).expect("request");
    tower::ServiceExt::oneshot(app.clone(), request).await.expect("infallible").status()
}

#[tokio::test]
async fn an_open_api_refuses_other_hosts_and_cross_origin_changes() {
    let fake = Fake::new();
    let app = open_app(&fake);
    let drain = "/api/v1/pools/web/servers/origin-a/drain";
    assert_eq!(browser_request(&app, "GET", "/api/v1/health", "127.0.0.1:9090", None).await, StatusCode::OK);
    assert_eq!(browser_request(&app, "GET", "/api/v1/health", "localhost:9090", None).await, StatusCode::OK);
    // DNS rebinding: a hostile name pointed at 127.0.0.1.
    assert_eq!(browser_request(&app, "GET", "/api/v1/health", "evil.example:9090", None).await, StatusCode::FORBIDDEN);
    // A cross-site form post.
    let status = browser_request(&app, "POST", drain, "127.0.0.1:9090", Some("http://evil.example")).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(fake.calls().is_empty());
    // The dashboard's own requests.
    let status = browser_request(&app, "POST", drain, "127.0.0.1:9090", Some("http://127.0.0.1:9090")).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn cache_views_by_key_and_prefix() {
    let fake = Fake::new();
    let app = locked_app(&fake);

    let caches = send(&app, "GET", "/api/v1/cache", Some(READER), "").await;
    assert_eq!(caches.status, StatusCode::OK, "{}", caches.body);
    assert_eq!(caches.json()["caches"][0]["service"], "demo");
    assert_eq!(caches.json()["caches"][0]["keys"], 2);

    let all = send(&app, "GET", "/api/v1/cache/demo/entries?limit=1", Some(READER), "").await;
    assert_eq!(all.status, StatusCode::OK, "{}", all.body);
    assert_eq!(all.json()["matched"], 2);
    assert_eq!(all.json()["keys"].as_array().map(Vec::len), Some(1));
    let one = send(&app, "GET", "/api/v1/cache/demo/entries?key=demo.test/b", Some(READER), "").await;
    assert_eq!(one.json()["keys"][0]["key"], "demo.test/b");
    assert_eq!(one.json()["keys"][0]["variants"][0]["hits"], 5);
    assert_eq!(one.json()["keys"][0]["variants"][0]["fresh_for_s"], 48.0);
    let prefix = send(&app, "GET", "/api/v1/cache/demo/entries?prefix=demo.test%2Fa", Some(READER), "").await;
    assert_eq!(prefix.json()["matched"], 1);

    let both = send(&app, "GET", "/api/v1/cache/demo/entries?key=a&prefix=b", Some(READER), "").await;
    assert_eq!(both.status, StatusCode::BAD_REQUEST);
    let bad = send(&app, "GET", "/api/v1/cache/demo/entries?limit=many", Some(READER), "").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    let unknown = send(&app, "GET", "/api/v1/cache/nope/entries", Some(READER), "").await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert!(unknown.json()["error"].as_str().is_some_and(|e| e.contains("nope")), "{}", unknown.body);
    let anonymous = send(&app, "GET", "/api/v1/cache/demo/entries", None, "").await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);

    // The refused requests (both key and prefix, a bad limit, no token) never reach the backend.
    let entries =
        |service: &str, key: &str, prefix, limit| Call::CacheEntries(service.into(), key.into(), prefix, limit);
    let default = switchyard_admin::DEFAULT_CACHE_LIMIT;
    assert_eq!(
        fake.calls(),
        vec![
            entries("demo", "", true, 1),
            entries("demo", "demo.test/b", false, default),
            entries("demo", "demo.test/a", true, default),
            entries("nope", "", true, default),
        ]
    );
}
