//! The admin API and `switchyard ctl` against a real engine: tokens, server
//! operations that change traffic, persistence inspection and flush, metrics,
//! validation and reload through the API.

use crate::common;

use std::net::SocketAddr;
use std::process::{Command, Output};

use common::*;

const ADMIN_TOKEN: &str = "adm1n-secret";
const READ_TOKEN: &str = "r3ad-only";

fn config(listen: SocketAddr, admin: SocketAddr, a: SocketAddr, b: SocketAddr, extra: &str) -> String {
    format!(
        "workers = 1\n\n[admin]\nlisten = \"{admin}\"\ntokens = [\n  {{ token = \"{ADMIN_TOKEN}\", role = \"admin\" }},\n  \
         {{ token = \"{READ_TOKEN}\", role = \"read-only\" }},\n]\n\n\
         [[service]]\nname = \"web\"\nlisten = \"{listen}\"\npool = \"main\"\n{extra}\n\n\
         [[pool]]\nname = \"main\"\npersistence = {{ source = true }}\n\
         servers = [{{ address = \"{a}\", name = \"a\" }}, {{ address = \"{b}\", name = \"b\" }}]\n"
    )
}

fn ctl(admin: SocketAddr, token: &str, args: &[&str]) -> Output {
    Command::new(binary())
        .arg("ctl")
        .arg("--admin")
        .arg(format!("http://{admin}"))
        .arg("--token")
        .arg(token)
        .args(args)
        .env_remove("SWITCHYARD_TOKEN")
        .output()
        .expect("run switchyard ctl")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn api(admin: SocketAddr, method: &str, path: &str, token: Option<&str>) -> Response {
    let host = admin.to_string();
    let bearer = token.map(|t| format!("Bearer {t}"));
    let mut headers: Vec<(&str, &str)> = vec![("host", &host), ("connection", "close"), ("content-length", "0")];
    if let Some(b) = &bearer {
        headers.push(("authorization", b));
    }
    Client::connect(admin).request(method, path, &headers)
}

#[test]
fn tokens_server_operations_persistence_and_reload() {
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    let (listen, admin) = (proxy_addr(), proxy_addr());
    let file = write_temp("admin", "switchyard.toml", &config(listen, admin, a.addr, b.addr, ""));
    let proxy = Proxy::run_file(&file, listen);
    wait_for("the admin listener", || std::net::TcpStream::connect(admin).ok());

    // Authentication and roles.
    assert_eq!(api(admin, "GET", "/api/v1/stats", None).status, 401);
    assert_eq!(api(admin, "GET", "/api/v1/stats", Some("wrong")).status, 401);
    assert_eq!(api(admin, "GET", "/api/v1/stats", Some(READ_TOKEN)).status, 200);
    let refused = ctl(admin, READ_TOKEN, &["drain", "main", "a"]);
    assert!(!refused.status.success(), "a read-only token must not drain: {}", text(&refused));
    let status = ctl(admin, READ_TOKEN, &["status"]);
    assert!(status.status.success() && text(&status).contains("generation"), "{}", text(&status));

    // Bad input: clear errors, nothing changed.
    let unknown = ctl(admin, ADMIN_TOKEN, &["drain", "main", "nope"]);
    assert!(!unknown.status.success() && text(&unknown).contains("nope"), "{}", text(&unknown));
    let heavy = ctl(admin, ADMIN_TOKEN, &["weight", "main", "a", "5000"]);
    assert!(!heavy.status.success() && text(&heavy).contains("5000"), "{}", text(&heavy));

    // The client sticks to one server (source persistence); the table shows it.
    let first = proxy.get("/").origin().to_string();
    let other = if first == "a" { "b" } else { "a" };
    let table = ctl(admin, READ_TOKEN, &["persistence", "main"]);
    assert!(table.status.success() && text(&table).contains("127.0.0.1"), "{}", text(&table));

    // Draining keeps the persistent client; disabling moves it.
    assert!(ctl(admin, ADMIN_TOKEN, &["drain", "main", &first]).status.success());
    assert_eq!(proxy.get("/").origin(), first, "a draining server keeps its persistent clients");
    assert!(ctl(admin, ADMIN_TOKEN, &["disable", "main", &first]).status.success());
    for _ in 0..4 {
        assert_eq!(proxy.get("/").origin(), other, "a server in maintenance gets nothing new");
    }
    assert!(ctl(admin, ADMIN_TOKEN, &["enable", "main", &first]).status.success());
    assert_eq!(proxy.get("/").origin(), other, "the persistence was re-pointed");
    let flushed = ctl(admin, ADMIN_TOKEN, &["persistence", "main", "--flush"]);
    assert!(flushed.status.success(), "{}", text(&flushed));
    let after = api(admin, "GET", "/api/v1/pools/main/persistence", Some(READ_TOKEN)).json();
    assert_eq!(after["total"], 0, "{after}");

    // Weight 0 takes a server out of balancing without changing its state.
    assert!(ctl(admin, ADMIN_TOKEN, &["weight", "main", "b", "0"]).status.success());
    assert!(ctl(admin, ADMIN_TOKEN, &["persistence", "main", "--flush"]).status.success());
    for _ in 0..4 {
        assert_eq!(Client::connect(listen).get("/").origin(), "a");
        assert!(ctl(admin, ADMIN_TOKEN, &["persistence", "main", "--flush"]).status.success());
    }

    // Metrics count what went through.
    let metrics = api(admin, "GET", "/metrics", Some(READ_TOKEN));
    assert_eq!(metrics.status, 200);
    let body = metrics.text();
    assert!(body.contains("switchyard_requests_total{service=\"web\"}"), "{body}");
    assert!(body.contains("switchyard_server_weight{pool=\"main\",server=\"b\"} 0"), "{body}");

    // Validation and reload through the API.
    let bad = write_temp("admin-bad", "bad.toml", "[[service]]\nname = 1\n");
    let invalid = ctl(admin, READ_TOKEN, &["validate", bad.to_str().unwrap_or_default()]);
    assert!(!invalid.status.success() && text(&invalid).contains("error:"), "{}", text(&invalid));
    let marked = config(listen, admin, a.addr, b.addr, "rules = [{ path = \"/marker\", respond = \"reloaded\" }]");
    std::fs::write(&file, marked).expect("rewrite");
    let reloaded = ctl(admin, ADMIN_TOKEN, &["reload"]);
    assert!(reloaded.status.success(), "{}", text(&reloaded));
    assert_eq!(proxy.get("/marker").text(), "reloaded");
    std::fs::write(&file, "not toml [").expect("rewrite");
    let refused = ctl(admin, ADMIN_TOKEN, &["reload"]);
    assert!(!refused.status.success() && text(&refused).contains("invalid TOML"), "{}", text(&refused));
    assert_eq!(proxy.get("/marker").text(), "reloaded", "a refused reload changes nothing");
}
