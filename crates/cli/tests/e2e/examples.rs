//! Every `examples/*.toml` is valid (`switchyard check` exits 0) and does what its comments
//! say when run in front of origin simulators on the ports it names.
//!
//! The examples use fixed ports, so the scenarios run one after the other inside a single
//! test function.

use crate::common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{check, workspace_root, Client, Origin, Proxy};
use rcgen::{CertificateParams, KeyPair, PKCS_ECDSA_P256_SHA256, PKCS_RSA_SHA256};

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
        let file = prepared(&file);
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
            "https.toml" => https(&prepared(&file)),
            "persistence.toml" => persistence(&file),
            "cache-compress.toml" => cache_compress(&file),
            "protection.toml" => protection(&file),
            other => panic!("examples/{other} has no scenario in crates/cli/tests/e2e/examples.rs: add one"),
        }
        covered.push(name);
    }
    assert!(covered.len() >= 4, "covered {covered:?}");
}

/// The example to check or run: the file itself, or for an example that reads certificate
/// files, a copy in a fresh directory beside the certificates it names (generated here, as
/// its comments tell a user to do with `openssl`).
fn prepared(file: &Path) -> PathBuf {
    if file.file_name().is_none_or(|n| n != "https.toml") {
        return file.to_path_buf();
    }
    let dir = common::temp_dir("example-https");
    std::fs::create_dir_all(dir.join("certs")).expect("certs dir");
    for (name, host, rsa) in [("site", "localhost", true), ("api", "api.localhost", false)] {
        let key = if rsa {
            KeyPair::generate_rsa_for(&PKCS_RSA_SHA256, rcgen::RsaKeySize::_2048).expect("RSA key")
        } else {
            KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).expect("ECDSA key")
        };
        let cert = CertificateParams::new(vec![host.to_string()]).expect("params").self_signed(&key).expect("sign");
        std::fs::write(dir.join(format!("certs/{name}.crt")), cert.pem()).expect("write certificate");
        std::fs::write(dir.join(format!("certs/{name}.key")), key.serialize_pem()).expect("write key");
    }
    let copy = dir.join("https.toml");
    std::fs::copy(file, &copy).expect("copy the example");
    copy
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

fn protection(file: &std::path::Path) {
    let _app = origin_at("127.0.0.1:19121", "app");
    let proxy = Proxy::run_file(file, addr("127.0.0.1:18120"));
    // A burst of 20 is allowed; going on at once runs into the rate (a refused
    // request closes its connection, so each goes on a fresh one).
    let statuses: Vec<u16> = (0..25).map(|_| proxy.get("/").status).collect();
    assert!(statuses[..20].iter().all(|&s| s == 200), "{statuses:?}");
    assert!(statuses[20..].contains(&429), "{statuses:?}");
    let long = format!("/{}", "a".repeat(5000));
    assert_eq!(Client::connect(addr("127.0.0.1:18120")).get(&long).status, 414);
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

/// curl against the example's HTTPS listener, trusting `ca` (a self-signed certificate of
/// the example's directory), resolving `host` to 127.0.0.1. Returns (status, body, HTTP
/// version, response headers).
fn curl(ca: &Path, host: &str, path: &str, http2: bool) -> (u16, String, String, String) {
    let dir = common::temp_dir("example-curl");
    let headers = dir.join("headers.txt");
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert"])
        .arg(ca)
        .args(["--resolve", &format!("{host}:18443:127.0.0.1"), "-D"])
        .arg(&headers)
        .args(["-w", "\n%{http_code} %{http_version}", if http2 { "--http2" } else { "--http1.1" }])
        .arg(format!("https://{host}:18443{path}"))
        .output()
        .expect("run curl (scripts/test.sh installs it)");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "curl https://{host}{path} failed: {}{stdout}", String::from_utf8_lossy(&out.stderr));
    let (body, last) = stdout.rsplit_once('\n').unwrap_or(("", &stdout));
    let (code, version) = last.split_once(' ').unwrap_or((last, ""));
    let headers = std::fs::read_to_string(&headers).unwrap_or_default().to_ascii_lowercase();
    (code.parse().unwrap_or(0), body.to_string(), version.to_string(), headers)
}

fn https(file: &Path) {
    let _app_1 = origin_at("127.0.0.1:19041", "app-1");
    let _app_2 = origin_at("127.0.0.1:19042", "app-2");
    let _proxy = Proxy::run_file(file, addr("127.0.0.1:18443"));
    let certs = file.parent().expect("example directory").join("certs");

    // HTTP/2 by ALPN with the default (RSA) certificate; both servers answer in turn.
    let mut origins = Vec::new();
    for _ in 0..2 {
        let (status, body, version, headers) =
            curl(&certs.join("site.crt"), "localhost", "/?size=64&compressible=1", true);
        assert_eq!((status, version.as_str(), body.len()), (200, "2", 64), "{headers}");
        assert!(headers.contains("strict-transport-security: max-age=31536000; includesubdomains"), "{headers}");
        let origin = headers.lines().find_map(|l| l.strip_prefix("x-origin: ")).unwrap_or_default();
        origins.push(origin.trim().to_string());
    }
    origins.sort();
    assert_eq!(origins, ["app-1", "app-2"]);

    // SNI api.localhost gets the ECDSA certificate: curl trusts only that one and succeeds.
    let (status, _, version, _) = curl(&certs.join("api.crt"), "api.localhost", "/", false);
    assert_eq!((status, version.as_str()), (200, "1.1"));

    // Clear text is redirected to the HTTPS port, keeping the target.
    let r = Client::connect(addr("127.0.0.1:18088")).get("/some/page?x=1");
    assert_eq!(r.status, 301);
    assert_eq!(
        r.header("location"),
        Some("https://test:18443/some/page?x=1"),
        "Host of the request (the client sends `test`)"
    );
}

/// The admin API's state of server `name` in pool `pool`.
fn server_state(admin: SocketAddr, pool: &str, name: &str) -> Option<String> {
    let host = admin.to_string();
    let stats =
        Client::connect(admin).request("GET", "/api/v1/stats", &[("host", &host), ("connection", "close")]).json();
    let pool = stats["pools"].as_array()?.iter().find(|p| p["name"] == pool)?.clone();
    let server = pool["servers"].as_array()?.iter().find(|s| s["name"] == name)?.clone();
    server["state"].as_str().map(str::to_string)
}

fn persistence(file: &Path) {
    // Separate processes: killing one closes its connections too (an in-process origin
    // stopped by dropping it still answers on connections the proxy keeps pooled).
    let start =
        |i: usize| common::OriginProcess::start(addr(&format!("127.0.0.1:{}", 19100 + i)), &format!("app-{}", i + 1));
    let mut origins: Vec<Option<common::OriginProcess>> = (0..3).map(|i| Some(start(i))).collect();
    let (shop, api, admin) = (addr("127.0.0.1:18100"), addr("127.0.0.1:18101"), addr("127.0.0.1:18109"));
    let _proxy = Proxy::run_file(file, shop);
    let get = |to: SocketAddr, headers: &[(&str, &str)]| Client::connect(to).request("GET", "/", headers);
    let cookie_of = |r: &common::Response| {
        let set = r.header("set-cookie").unwrap_or_else(|| panic!("no Set-Cookie in {r:?}"));
        assert!(set.contains("Max-Age=28800") && set.contains("HttpOnly"), "{set}");
        set.split(';').next().unwrap_or_default().to_string()
    };

    // A browser keeps its server across requests and connections.
    let first = get(shop, &[]);
    assert_eq!(first.status, 200);
    let cookie = cookie_of(&first);
    let home = first.origin().to_string();
    for _ in 0..6 {
        let again = get(shop, &[("cookie", &cookie)]);
        assert_eq!((again.status, again.origin()), (200, home.as_str()));
        assert!(again.header("set-cookie").is_none(), "a valid cookie is not set again");
    }
    // One tenant, one server.
    let tenant = get(api, &[("x-tenant", "acme")]).origin().to_string();
    for _ in 0..4 {
        assert_eq!(get(api, &[("x-tenant", "acme")]).origin(), tenant);
    }

    // The cookie's server dies: the next request with that cookie goes elsewhere (a
    // connect failure is retried on another server) and the cookie is re-pointed;
    // no request fails, and the health check soon shows the server down.
    let index = (0..3).find(|i| format!("app-{}", i + 1) == home).expect("home origin");
    drop(origins[index].take());
    let moved = get(shop, &[("cookie", &cookie)]);
    assert_eq!(moved.status, 200, "no client error when a persistent server dies");
    assert_ne!(moved.origin(), home);
    let new_cookie = cookie_of(&moved);
    assert_ne!(new_cookie, cookie, "persistence re-pointed");
    for _ in 0..4 {
        let again = get(shop, &[("cookie", &new_cookie)]);
        assert_eq!((again.status, again.origin()), (200, moved.origin()));
    }
    common::wait_for(&format!("{home} marked down"), || {
        (server_state(admin, "shop", &home).as_deref() == Some("down")).then_some(())
    });
    assert_eq!(get(shop, &[("cookie", &cookie)]).status, 200, "the old cookie is still served");

    // It comes back after `rise` passing checks.
    origins[index] = Some(start(index));
    common::wait_for(&format!("{home} back up"), || {
        (server_state(admin, "shop", &home).as_deref() == Some("up")).then_some(())
    });
}

fn cache_compress(file: &Path) {
    let app_1 = origin_at("127.0.0.1:19110", "app-1");
    let app_2 = origin_at("127.0.0.1:19111", "app-2");
    let web = addr("127.0.0.1:18110");
    let _proxy = Proxy::run_file(file, web);
    let fetches = || app_1.requests() + app_2.requests();
    let get = |path: &str, accept: &str| {
        // The Host curl sends: the cache key is host (port stripped), path and query.
        let r = Client::connect(web).request("GET", path, &[("host", "127.0.0.1:18110"), ("accept-encoding", accept)]);
        assert_eq!(r.status, 200, "{path}: {:?}", r.headers);
        r
    };
    let page = "/page?compressible=1&size=65536&cache=60";
    let want = Client::connect(app_1.addr).get(page).body;
    let zstd = |r: &common::Response| {
        assert_eq!(r.header("content-encoding"), Some("zstd"), "{:?}", r.headers);
        zstd::stream::decode_all(&r.body[..]).expect("zstd decode")
    };

    // A miss is fetched once and compressed with the client's preferred coding ...
    let before = fetches();
    let first = get(page, "gzip, br, zstd");
    assert!(zstd(&first) == want, "the compressed page decodes to the origin's bytes");
    assert_eq!(fetches(), before + 1);
    // ... and then served from the cache, still compressed, without the origin.
    for _ in 0..3 {
        let hit = get(page, "zstd, gzip, br");
        assert!(hit.header("age").is_some(), "a hit carries Age: {:?}", hit.headers);
        assert!(zstd(&hit) == want);
    }
    assert_eq!(fetches(), before + 1, "hits never reach a server");

    // /api/ is never cached; /downloads/ is never compressed.
    let api = "/api/items?compressible=1&size=4096&cache=60";
    get(api, "zstd");
    get(api, "zstd");
    assert_eq!(fetches(), before + 3, "both /api/ requests reached a server");
    let download = get("/downloads/file?compressible=1&size=4096", "zstd, gzip");
    assert_eq!(download.header("content-encoding"), None);
    assert_eq!(fetches(), before + 4);

    // Purge by prefix through ctl: the next request is a miss again.
    let out = Command::new(common::binary())
        .args(["ctl", "--admin", "http://127.0.0.1:18119", "purge", "web", "--prefix", "127.0.0.1/page"])
        .output()
        .expect("run switchyard ctl");
    assert!(
        out.status.success(),
        "ctl purge: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let after = get(page, "zstd");
    assert!(zstd(&after) == want);
    assert_eq!(fetches(), before + 5, "the purged page was fetched again");
}
