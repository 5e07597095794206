//! `switchyard ctl` against a fake backend served on 127.0.0.1:0: each
//! command's output, `--json`, and the errors an operator meets.

mod common;

use std::sync::Arc;

use clap::Parser;
use common::{serve_in_background, Call, Fake, ADMIN, READER};
use switchyard_admin::ctl::{execute, CtlArgs, CtlError};
use switchyard_admin::{AdminState, ServerOp};

/// `switchyard ctl …` as the binary parses it.
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    ctl: CtlArgs,
}

struct Served {
    fake: Arc<Fake>,
    admin: String,
    _server: common::Stopper,
}

fn served(tokens: bool) -> Served {
    let fake = Fake::new();
    let tokens = if tokens { common::tokens() } else { Vec::new() };
    let (addr, server) = serve_in_background(AdminState::new(fake.clone(), tokens));
    Served { fake, admin: format!("http://{addr}"), _server: server }
}

/// Runs `ctl --admin ADMIN [--token T] ARGS…`; returns stdout or the error.
fn ctl(admin: &str, token: Option<&str>, args: &[&str]) -> Result<String, CtlError> {
    let mut argv = vec!["ctl", "--admin", admin];
    if let Some(t) = token {
        argv.extend(["--token", t]);
    }
    argv.extend(args);
    let cli = Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let mut out = Vec::new();
    execute(&cli.ctl, &mut out)?;
    Ok(String::from_utf8(out).expect("utf-8 output"))
}

fn ok(admin: &str, args: &[&str]) -> String {
    ctl(admin, None, args).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

#[test]
fn reading_commands_render_tables() {
    let s = served(false);
    let status = ok(&s.admin, &["status"]);
    assert!(status.starts_with("status      ok\nversion     0.1.0-test\n"), "{status}");
    assert!(status.contains("config      /etc/switchyard.toml\n"), "{status}");

    let stats = ok(&s.admin, &["stats"]);
    assert!(stats.starts_with("SERVICE  MODE  LISTEN"), "{stats}");
    assert!(stats.contains("\npool web (round-robin, persistence source-ip)\n"), "{stats}");
    assert!(stats.contains("\npool images (least-conn)\n"), "{stats}");

    let servers = ok(&s.admin, &["servers", "images"]);
    assert!(servers.starts_with("pool images (least-conn)\nSERVER    ADDRESS         STATE"), "{servers}");
    assert!(!servers.contains("pool web"), "{servers}");
    let all = ok(&s.admin, &["servers"]);
    assert!(all.contains("pool web") && all.contains("pool images"), "{all}");

    let config = ok(&s.admin, &["config"]);
    assert_eq!(config, "[[service]]\nname = \"demo\"\n");
    let metrics = ok(&s.admin, &["metrics"]);
    assert!(metrics.contains("switchyard_requests_total{service=\"demo\"} 42"), "{metrics}");
}

#[test]
fn changing_commands_reach_the_backend() {
    let s = served(false);
    assert_eq!(ok(&s.admin, &["drain", "web", "origin-a"]), "web/origin-a: draining, weight 100, 0 active\n");
    assert_eq!(ok(&s.admin, &["disable", "web", "origin-a"]), "web/origin-a: maintenance, weight 100, 0 active\n");
    assert_eq!(ok(&s.admin, &["enable", "web", "origin-a"]), "web/origin-a: up, weight 100, 0 active\n");
    assert_eq!(ok(&s.admin, &["weight", "web", "origin-b", "7"]), "web/origin-b: up, weight 7 (of 100), 0 active\n");
    let listing = ok(&s.admin, &["persistence", "web", "--limit", "2"]);
    assert!(listing.starts_with("pool web (source-ip): 3 entries, showing 2\nKEY"), "{listing}");
    assert_eq!(ok(&s.admin, &["persistence", "web", "--flush"]), "pool web: removed 3 persistence entries\n");
    assert_eq!(ok(&s.admin, &["reload"]), "reloaded: generation 2: 1 pool changed\n");
    let server = |name: &str, op| Call::Server("web".into(), name.into(), op);
    assert_eq!(
        s.fake.calls(),
        vec![
            server("origin-a", ServerOp::Drain),
            server("origin-a", ServerOp::Disable),
            server("origin-a", ServerOp::Enable),
            server("origin-b", ServerOp::Weight(7)),
            Call::Persistence("web".into(), 2),
            Call::Flush("web".into()),
            Call::Reload,
        ]
    );
}

#[test]
fn validate_sends_the_file_and_its_name() {
    let s = served(false);
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("ctl-validate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let good = dir.join("good config.toml");
    std::fs::write(&good, "[admin]\n").expect("write");
    let good = good.display().to_string();
    let out = ok(&s.admin, &["validate", &good]);
    assert_eq!(out, format!("{good}: valid\n{good}: warning: no health check\n"));

    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "invalid = true\n").expect("write");
    let bad = bad.display().to_string();
    match ctl(&s.admin, None, &["validate", &bad]) {
        Err(CtlError::Refused { status: 422, diagnostics, .. }) => {
            assert_eq!(
                diagnostics,
                vec![format!("{bad}:1:1: error: unknown key `invalid`"), "  hint: remove it".to_owned()]
            );
        }
        other => panic!("expected 422 with diagnostics, got {other:?}"),
    }
    let missing = ctl(&s.admin, None, &["validate", "/nonexistent/switchyard.toml"]).expect_err("no such file");
    assert!(missing.to_string().starts_with("cannot read /nonexistent/switchyard.toml"), "{missing}");
}

#[test]
fn json_output_is_the_raw_answer() {
    let s = served(false);
    let out = ok(&s.admin, &["--json", "status"]);
    let json: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(json["version"], "0.1.0-test");
    let out = ok(&s.admin, &["servers", "web", "--json"]);
    let json: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(json[0]["servers"][0]["name"], "origin-a");
}

#[test]
fn errors_say_what_went_wrong() {
    let s = served(true);
    let e = ctl(&s.admin, None, &["status"]).expect_err("no token");
    assert!(e.to_string().starts_with("401 Unauthorized: "), "{e}");
    assert!(e.to_string().contains("hint: pass a token with --token or SWITCHYARD_TOKEN"), "{e}");
    let e = ctl(&s.admin, Some("wrong"), &["status"]).expect_err("wrong token");
    assert!(e.to_string().contains("unknown token\nhint: the token given"), "{e}");
    let e = ctl(&s.admin, Some(READER), &["drain", "web", "origin-a"]).expect_err("read-only");
    assert!(e.to_string().starts_with("403 Forbidden: this token is read-only"), "{e}");
    let e = ctl(&s.admin, Some(ADMIN), &["drain", "web", "nope"]).expect_err("unknown server");
    assert_eq!(e.to_string(), "404 Not Found: no server `nope` in pool `web`");
    let e = ctl(&s.admin, Some(ADMIN), &["servers", "nope"]).expect_err("unknown pool");
    assert_eq!(e.to_string(), "no pool `nope` (pools: web, images)");
    assert!(ctl(&s.admin, Some(READER), &["status"]).is_ok());

    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port").port();
    let e = ctl(&format!("127.0.0.1:{port}"), None, &["status"]).expect_err("nothing listens");
    assert!(matches!(e, CtlError::Unreachable { .. }), "{e:?}");
    assert!(
        e.to_string().contains(&format!(
            "cannot reach the admin API at http://127.0.0.1:{port}/api/v1/health: connection refused"
        )),
        "{e}"
    );
}

#[test]
fn cache_commands_list_show_and_purge() {
    let s = served(true);
    let run = |args: &[&str]| ctl(&s.admin, Some(ADMIN), args).unwrap_or_else(|e| panic!("{args:?}: {e}"));

    let summary = run(&["cache"]);
    let row: Vec<&str> = summary.lines().nth(1).unwrap_or_default().split_whitespace().collect();
    // demo: 2 keys, 4.0 KiB of 1.0 MiB, 80 % of lookups answered from the store.
    assert_eq!(row[..6], ["demo", "2", "4.0", "KiB", "1.0", "MiB"], "{summary}");
    assert!(summary.contains("80.0%"), "{summary}");

    let list = run(&["cache", "list", "demo", "--prefix", "demo.test/", "--limit", "5"]);
    assert!(list.starts_with("service demo: 2 keys\nKEY "), "{list}");
    assert!(list.contains("\ndemo.test/a  "), "{list}");
    let shown = run(&["cache", "show", "demo", "demo.test/b"]);
    assert!(shown.starts_with("key demo.test/b (service demo): 1 variant(s)"), "{shown}");
    assert!(shown.contains("fresh for  48s") && shown.contains("hits       5"), "{shown}");
    let missing = ctl(&s.admin, Some(ADMIN), &["cache", "show", "demo", "demo.test/zzz"]).expect_err("no such key");
    assert!(missing.to_string().contains("no key `demo.test/zzz`"), "{missing}");

    let purged = run(&["cache", "purge", "demo", "--prefix", "demo.test/"]);
    assert_eq!(purged, "service demo: purged 2 keys\n");
    let json = run(&["--json", "cache", "list", "demo"]);
    assert!(json.contains("\"matched\": 2"), "{json}");
    // A read-only token may look, not purge.
    assert!(ctl(&s.admin, Some(READER), &["cache", "list", "demo"]).is_ok());
    let refused = ctl(&s.admin, Some(READER), &["cache", "purge", "demo", "demo.test/a"]).expect_err("read-only");
    assert!(refused.to_string().starts_with("403"), "{refused}");

    let calls = s.fake.calls();
    assert!(calls.contains(&Call::CacheEntries("demo".into(), "demo.test/".into(), true, 5)), "{calls:?}");
    assert!(calls.contains(&Call::Purge("demo".into(), "demo.test/".into(), true)), "{calls:?}");
    assert!(!calls.contains(&Call::Purge("demo".into(), "demo.test/a".into(), false)), "{calls:?}");
}
