//! Every `examples/*.toml` is valid (`switchyard check` exits 0) and does what its comments
//! say when run in front of origin simulators on the ports it names.
//!
//! The examples use fixed ports, so the scenarios run one after the other inside a single
//! test function.

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;

use common::{check, workspace_root, Origin, Proxy};

/// The example files, sorted.
fn examples() -> Vec<PathBuf> {
    let dir = workspace_root().join("examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    files
}

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("address")
}

fn origin_at(address: &str, name: &str) -> Origin {
    Origin::start_at(addr(address), name)
        .unwrap_or_else(|e| panic!("cannot start origin {name} on {address} (port in use?): {e}"))
}

#[test]
fn every_example_passes_check() {
    let files = examples();
    assert!(files.len() >= 2, "expected the examples, found {files:?}");
    for file in files {
        let (code, stdout, stderr) = check(&file);
        assert_eq!(code, 0, "{} fails check:\n{stdout}{stderr}", file.display());
        assert!(!stderr.contains("warning:"), "{} has warnings:\n{stderr}", file.display());
    }
}

#[test]
fn every_example_runs() {
    let mut covered = Vec::new();
    for file in examples() {
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        match name.as_str() {
            "l7-content-switching.toml" => l7_content_switching(&file),
            "quickstart.toml" => quickstart(&file),
            other => panic!("examples/{other} has no scenario in crates/cli/tests/examples.rs: add one"),
        }
        covered.push(name);
    }
    assert!(covered.len() >= 2, "covered {covered:?}");
}

fn l7_content_switching(file: &std::path::Path) {
    let main_1 = origin_at("127.0.0.1:19001", "main-1");
    let main_2 = origin_at("127.0.0.1:19002", "main-2");
    let images = origin_at("127.0.0.1:19003", "images");
    let proxy = Proxy::run_file(file, addr("127.0.0.1:18080"));
    let mut client = proxy.connect();

    for path in ["/a.png", "/img/b.png?v=2", "/a.png"] {
        let r = client.get(path);
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.origin(), "images", "{path} must go to the images pool");
    }
    let mut seen = Vec::new();
    for _ in 0..6 {
        let r = client.get("/index.html");
        assert_eq!(r.status, 200);
        seen.push(r.origin().to_string());
    }
    for pair in seen.windows(2) {
        assert_ne!(pair[0], pair[1], "round robin must alternate main-1 and main-2: {seen:?}");
    }
    assert!(seen.iter().all(|o| o == "main-1" || o == "main-2"), "{seen:?}");
    assert_eq!(images.requests(), 3);
    assert_eq!(main_1.requests() + main_2.requests(), 6);
}

fn quickstart(file: &std::path::Path) {
    let app_1 = origin_at("127.0.0.1:19011", "app-1");
    let app_2 = origin_at("127.0.0.1:19012", "app-2");
    let proxy = Proxy::run_file(file, addr("127.0.0.1:18081"));
    let mut client = proxy.connect();

    let a = client.get("/");
    let b = client.get("/");
    assert_eq!((a.status, b.status), (200, 200));
    let mut pair = [a.origin().to_string(), b.origin().to_string()];
    pair.sort();
    assert_eq!(pair, ["app-1", "app-2"], "both servers answer in turn");

    let health = client.get("/health");
    assert_eq!((health.status, health.text().as_str()), (200, "ok\n"));

    let redirect = client.get("/old/page");
    assert_eq!(redirect.status, 301);
    assert_eq!(redirect.header("location"), Some("/new/"));

    let api = client.get("/api/users");
    assert_eq!(api.status, 200);
    assert_eq!(api.header("x-served-by"), Some("switchyard"), "response edit of the first rule");
    assert_eq!(app_1.requests() + app_2.requests(), 3, "health and redirect never reach a server");
}
