//! Every `examples/*.toml` is valid (`switchyard check` exits 0) and does what its comments
//! say when run in front of origin simulators on the ports it names.
//!
//! The examples use fixed ports, so the scenarios run one after the other inside a single
//! test function.

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;

use common::{check, workspace_root, Client, Origin, Proxy};

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
            "l4-tcp.toml" => l4_tcp(&file),
            "l4-udp.toml" => l4_udp(&file),
            other => panic!("examples/{other} has no scenario in crates/cli/tests/examples.rs: add one"),
        }
        covered.push(name);
    }
    assert!(covered.len() >= 4, "covered {covered:?}");
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

fn l4_tcp(file: &std::path::Path) {
    let _app_1 = origin_at("127.0.0.1:19021", "app-1");
    let _app_2 = origin_at("127.0.0.1:19022", "app-2");
    let _proxy = Proxy::run_file(file, addr("127.0.0.1:18090"));
    // HTTP over a plain TCP relay: one connection, one server.
    let mut seen: Vec<String> =
        (0..4).map(|_| Client::connect(addr("127.0.0.1:18090")).get("/").origin().to_string()).collect();
    for pair in seen.windows(2) {
        assert_ne!(pair[0], pair[1], "round robin per connection: {seen:?}");
    }
    seen.clear();
    for _ in 0..4 {
        seen.push(Client::connect(addr("127.0.0.1:18091")).get("/").origin().to_string());
    }
    assert!(seen.windows(2).all(|w| w[0] == w[1]), "source persistence keeps one server: {seen:?}");
}

fn l4_udp(file: &std::path::Path) {
    let servers: Vec<std::net::UdpSocket> = ["127.0.0.1:19031", "127.0.0.1:19032"]
        .iter()
        .map(|a| std::net::UdpSocket::bind(a).expect("bind a UDP server"))
        .collect();
    for (i, socket) in servers.into_iter().enumerate() {
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while let Ok((n, from)) = socket.recv_from(&mut buf) {
                let mut reply = format!("dns-{}:", i + 1).into_bytes();
                reply.extend_from_slice(&buf[..n]);
                let _ = socket.send_to(&reply, from);
            }
        });
    }
    let _proxy = Proxy::run_file(file, addr("127.0.0.1:19099"));
    let mut seen = std::collections::HashSet::new();
    for _ in 0..4 {
        let client = std::net::UdpSocket::bind("127.0.0.1:0").expect("client");
        client.set_read_timeout(Some(std::time::Duration::from_secs(2))).expect("timeout");
        let ask = |m: &str| -> Option<String> {
            client.send_to(m.as_bytes(), "127.0.0.1:18095").ok()?;
            let mut buf = [0u8; 512];
            let (n, _) = client.recv_from(&mut buf).ok()?;
            Some(String::from_utf8_lossy(&buf[..n]).into_owned())
        };
        let first = common::wait_for("a UDP reply through the balancer", || ask("q1"));
        let server = first.split(':').next().unwrap_or_default().to_string();
        assert_eq!(ask("q2"), Some(format!("{server}:q2")), "a flow stays on its server");
        seen.insert(server);
    }
    assert_eq!(seen.len(), 2, "flows of different clients use both servers: {seen:?}");
}
