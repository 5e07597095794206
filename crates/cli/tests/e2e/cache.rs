//! The response cache end to end: a fresh hit never reaches the origin (its request
//! count does not move) and carries a growing `Age`; HEAD is answered from a GET's
//! entry; `no-store`, `private` and `Set-Cookie` responses are not stored; a stale
//! entry is revalidated with its ETag and a 304 serves the stored body; `Vary` keeps
//! one variant per request value; `stale-if-error` covers a failing origin; the size
//! bound holds under a flood of unique keys; a hundred concurrent misses make one
//! origin request; purge by key and by prefix through the admin API and `ctl`.

use crate::common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::*;

const ADMIN_TOKEN: &str = "admin-secret";
const READ_TOKEN: &str = "read-secret";

fn local() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

/// One service on `listen` with `cache` over one server, two workers, and an admin
/// listener with an admin and a read-only token.
fn config(listen: SocketAddr, admin: SocketAddr, server: SocketAddr, cache: &str) -> String {
    format!(
        "workers = 2\n\n[admin]\nlisten = \"{admin}\"\ntokens = [\n  {{ token = \"{ADMIN_TOKEN}\", role = \"admin\" }},\n  \
         {{ token = \"{READ_TOKEN}\", role = \"read-only\" }},\n]\n\n\
         [[service]]\nname = \"web\"\nlisten = \"{listen}\"\npool = \"main\"\ncache = {cache}\n\
         rules = [{{ path_prefix = \"/nocache/\", cache = false }}]\n\n\
         [[pool]]\nname = \"main\"\nservers = [{{ address = \"{server}\", name = \"origin\" }}]\n"
    )
}

fn start(server: SocketAddr, cache: &str) -> (Proxy, SocketAddr) {
    let (listen, admin) = (local(), local());
    let file = write_temp("cache", "switchyard.toml", &config(listen, admin, server, cache));
    let proxy = Proxy::run_file_with(&file, listen, 2);
    wait_for("the admin listener", || TcpStream::connect(admin).ok());
    (proxy, admin)
}

/// The value of `name{service="web"}` in the proxy's metrics.
fn metric(admin: SocketAddr, name: &str) -> f64 {
    let host = admin.to_string();
    let bearer = format!("Bearer {READ_TOKEN}");
    let headers = [("host", host.as_str()), ("connection", "close"), ("authorization", bearer.as_str())];
    let r = Client::connect(admin).request("GET", "/metrics", &headers);
    assert_eq!(r.status, 200, "{}", r.text());
    r.text()
        .lines()
        .find_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            (series == format!("{name}{{service=\"web\"}}")).then(|| value.parse().ok()).flatten()
        })
        .unwrap_or_else(|| panic!("no {name} in the metrics"))
}

fn purge(admin: SocketAddr, token: &str, body: &str) -> Response {
    let host = admin.to_string();
    let bearer = format!("Bearer {token}");
    let len = body.len().to_string();
    let headers = [
        ("host", host.as_str()),
        ("connection", "close"),
        ("authorization", bearer.as_str()),
        ("content-type", "application/json"),
        ("content-length", len.as_str()),
    ];
    let mut client = Client::connect(admin);
    let mut head = String::from("POST /api/v1/cache/purge HTTP/1.1\r\n");
    for (n, v) in headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str("\r\n");
    head.push_str(body);
    client.send(head.as_bytes()).expect("send purge");
    client.read_response().expect("purge response")
}

fn ctl(admin: SocketAddr, args: &[&str]) -> Output {
    Command::new(binary())
        .arg("ctl")
        .arg("--admin")
        .arg(format!("http://{admin}"))
        .arg("--token")
        .arg(ADMIN_TOKEN)
        .args(args)
        .env_remove("SWITCHYARD_TOKEN")
        .output()
        .expect("run switchyard ctl")
}

#[test]
fn fresh_hits_skip_the_origin_and_carry_a_growing_age() {
    let origin = Origin::start("o");
    let (proxy, admin) = start(origin.addr, "true");
    let mut client = proxy.connect();

    let first = client.get("/a?cache=60&size=300");
    assert_eq!(first.status, 200);
    assert_eq!(origin.requests(), 1);
    let hit = client.get("/a?cache=60&size=300");
    assert_eq!(hit.status, 200);
    assert_eq!(hit.body, first.body, "a hit serves the stored body");
    assert_eq!(origin.requests(), 1, "a fresh hit never reaches the origin");
    let age: u64 = hit.header("age").expect("a hit has an Age").parse().expect("Age is a number");
    thread::sleep(Duration::from_millis(1100));
    let later = client.get("/a?cache=60&size=300");
    let later_age: u64 = later.header("age").expect("Age").parse().expect("Age is a number");
    assert!(later_age > age, "Age grows: {age} then {later_age}");

    // HEAD from the GET's entry: same length, no body, no origin request.
    let head = client.request("HEAD", "/a?cache=60&size=300", &[]);
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-length"), Some("300"));
    assert!(head.body.is_empty());
    // The client's own conditional request against a fresh entry: 304 from the cache.
    let etagless =
        client.request("GET", "/a?cache=60&size=300", &[("if-modified-since", "Tue, 01 Jan 2030 00:00:00 GMT")]);
    assert_eq!(etagless.status, 304, "no Last-Modified stored: stored before that date (RFC 9111 §4.3.2)");
    assert_eq!(origin.requests(), 1);

    // only-if-cached: the stored entry, or 504 without asking the origin.
    let cached_only = [("cache-control", "only-if-cached")];
    assert_eq!(client.request("GET", "/a?cache=60&size=300", &cached_only).status, 200);
    assert_eq!(client.request("GET", "/never?cache=60", &cached_only).status, 504);
    assert_eq!(origin.requests(), 1);

    // A different query is a different key; no-store (the origin's default) is never stored.
    client.get("/a?cache=60&size=10");
    assert_eq!(origin.requests(), 2);
    client.get("/b");
    client.get("/b");
    assert_eq!(origin.requests(), 4, "no-store responses are not stored");
    // A rule's `cache = false` bypasses the cache.
    client.get("/nocache/x?cache=60");
    client.get("/nocache/x?cache=60");
    assert_eq!(origin.requests(), 6);

    assert!(metric(admin, "switchyard_cache_hits_total") >= 3.0);
    assert!(metric(admin, "switchyard_cache_misses_total") >= 3.0);
    assert!(metric(admin, "switchyard_cache_bytes") > 300.0);
}

/// A scripted origin: each request head goes to `seen`; `answer` maps (path, request
/// head lower-cased, how many times this path was asked) to the raw response.
fn scripted(answer: fn(&str, &str, usize) -> String) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind scripted origin");
    let addr = listener.local_addr().expect("addr");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    thread::spawn(move || {
        let counts = Arc::new(Mutex::new(HashMap::<String, usize>::new()));
        for stream in listener.incoming().flatten() {
            let (log, counts) = (log.clone(), counts.clone());
            thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut stream = stream;
                loop {
                    let mut head = String::new();
                    loop {
                        let mut line = String::new();
                        match reader.read_line(&mut line) {
                            Ok(0) | Err(_) => return,
                            Ok(_) => {}
                        }
                        if line == "\r\n" {
                            break;
                        }
                        head.push_str(&line.to_ascii_lowercase());
                    }
                    let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                    let n = {
                        let mut c = counts.lock().expect("counts");
                        let n = c.entry(path.clone()).or_default();
                        *n += 1;
                        *n
                    };
                    log.lock().expect("log").push(head.clone());
                    if stream.write_all(answer(&path, &head, n).as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, seen)
}

fn response(status: &str, headers: &[&str], body: &str) -> String {
    let mut r = format!("HTTP/1.1 {status}\r\ncontent-length: {}\r\n", body.len());
    for h in headers {
        r.push_str(h);
        r.push_str("\r\n");
    }
    r.push_str("\r\n");
    r.push_str(body);
    r
}

fn answer(path: &str, head: &str, n: usize) -> String {
    match path {
        "/etag" if head.contains("if-none-match: \"v1\"") => {
            response("304 Not Modified", &["cache-control: max-age=0", "etag: \"v1\""], "")
        }
        "/etag" => response("200 OK", &["cache-control: max-age=0", "etag: \"v1\""], "etag-body"),
        "/private" => response("200 OK", &["cache-control: private, max-age=60"], "mine"),
        "/cookie" => response("200 OK", &["cache-control: max-age=60", "set-cookie: s=1"], "cookie"),
        "/vary" => {
            let lang = head.lines().find_map(|l| l.strip_prefix("accept-language: ")).unwrap_or("none").trim();
            response("200 OK", &["cache-control: max-age=60", "vary: Accept-Language"], &format!("lang={lang}"))
        }
        "/sie" if n == 1 => response("200 OK", &["cache-control: max-age=0, stale-if-error=60"], "good"),
        "/sie" => response("500 Internal Server Error", &[], "broken"),
        _ => response("404 Not Found", &[], ""),
    }
}

fn count(seen: &Mutex<Vec<String>>, path: &str) -> usize {
    let prefix = format!("get {path} ");
    seen.lock().expect("seen").iter().filter(|h| h.starts_with(&prefix)).count()
}

#[test]
fn revalidation_vary_private_cookies_and_stale_if_error() {
    let (server, seen) = scripted(answer);
    let (proxy, admin) = start(server, "{ size = \"1MiB\", max_object = \"64KiB\" }");
    let mut client = proxy.connect();

    // Stale (max-age=0) with an ETag: each use is revalidated; the 304 serves the stored body.
    assert_eq!(client.get("/etag").text(), "etag-body");
    let again = client.get("/etag");
    assert_eq!(again.status, 200);
    assert_eq!(again.text(), "etag-body", "the body comes from the cache after a 304");
    assert_eq!(count(&seen, "/etag"), 2);
    let conditional = seen.lock().expect("seen").iter().filter(|h| h.contains("if-none-match: \"v1\"")).count();
    assert_eq!(conditional, 1, "the origin saw one conditional request");
    assert!(metric(admin, "switchyard_cache_revalidated_total") >= 1.0);

    // private and Set-Cookie: never stored.
    client.get("/private");
    client.get("/private");
    assert_eq!(count(&seen, "/private"), 2);
    client.get("/cookie");
    client.get("/cookie");
    assert_eq!(count(&seen, "/cookie"), 2);

    // Vary: one variant per Accept-Language value.
    let fr = client.request("GET", "/vary", &[("accept-language", "fr")]);
    let de = client.request("GET", "/vary", &[("accept-language", "de")]);
    assert_eq!((fr.text().as_str(), de.text().as_str()), ("lang=fr", "lang=de"));
    assert_eq!(client.request("GET", "/vary", &[("accept-language", "fr")]).text(), "lang=fr");
    assert_eq!(client.request("GET", "/vary", &[("accept-language", "de")]).text(), "lang=de");
    assert_eq!(count(&seen, "/vary"), 2, "each variant was fetched once");

    // stale-if-error: the origin now fails, the stale entry answers.
    assert_eq!(client.get("/sie").text(), "good");
    let covered = client.get("/sie");
    assert_eq!((covered.status, covered.text().as_str()), (200, "good"));
    assert_eq!(count(&seen, "/sie"), 2, "the origin was asked and failed");
    assert!(metric(admin, "switchyard_cache_stale_total") >= 1.0);
}

#[test]
fn the_size_bound_holds_under_a_flood_of_unique_keys() {
    let origin = Origin::start("o");
    let (proxy, admin) = start(origin.addr, "{ size = \"64KiB\", max_object = \"4KiB\" }");
    let mut client = proxy.connect();
    for i in 0..300 {
        assert_eq!(client.get(&format!("/flood/{i}?cache=60&size=1000")).status, 200);
    }
    let bytes = metric(admin, "switchyard_cache_bytes");
    assert!(bytes > 0.0 && bytes <= 65536.0, "cache bytes {bytes} within size");
    assert!(metric(admin, "switchyard_cache_evictions_total") > 0.0);
    // A response over max_object is streamed whole and not stored.
    let big = client.get("/big?cache=60&size=10000");
    assert_eq!(big.body.len(), 10000);
    client.get("/big?cache=60&size=10000");
    assert_eq!(origin.requests(), 302);
}

#[test]
fn a_hundred_concurrent_misses_make_one_origin_request() {
    let origin = Origin::start("o");
    let (proxy, _admin) = start(origin.addr, "true");
    let addr = proxy.addr;
    let threads: Vec<_> = (0..100)
        .map(|_| {
            thread::spawn(move || {
                let r = Client::connect(addr).get("/slow?cache=60&delay_ms=500&size=2000");
                (r.status, r.body.len())
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().expect("client thread"), (200, 2000));
    }
    assert_eq!(origin.requests(), 1, "concurrent misses for one key coalesce into one fetch");
}

#[test]
fn purge_by_key_and_prefix_through_the_api_and_ctl() {
    let origin = Origin::start("o");
    let (proxy, admin) = start(origin.addr, "true");
    let mut client = proxy.connect();
    for path in ["/p/1?cache=60", "/p/2?cache=60", "/q?cache=60"] {
        client.get(path);
        client.get(path);
    }
    assert_eq!(origin.requests(), 3);

    let refused = purge(admin, READ_TOKEN, r#"{"service":"web","key":"test/q?cache=60"}"#);
    assert_eq!(refused.status, 403, "purge needs an admin token: {}", refused.text());
    let by_key = purge(admin, ADMIN_TOKEN, r#"{"service":"web","key":"test/q?cache=60"}"#);
    assert_eq!(by_key.status, 200, "{}", by_key.text());
    assert_eq!(by_key.json()["purged"], 1);
    client.get("/q?cache=60");
    assert_eq!(origin.requests(), 4, "a purged key is fetched again");

    let out = ctl(admin, &["purge", "web", "--prefix", "test/p/"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success() && text.contains("purged 2"), "{text}{}", String::from_utf8_lossy(&out.stderr));
    client.get("/p/1?cache=60");
    client.get("/p/2?cache=60");
    assert_eq!(origin.requests(), 6);
    let out = ctl(admin, &["purge", "web", "test/p/1?cache=60"]);
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("purged 1"));
    // An unsafe method invalidates its target's entry (RFC 9111 §4.4).
    let before = origin.requests();
    client.get("/q?cache=60");
    assert_eq!(origin.requests(), before, "stored");
    client.request("POST", "/q?cache=60", &[("content-length", "0")]);
    client.get("/q?cache=60");
    assert_eq!(origin.requests(), before + 2, "the POST went through and the GET after it missed");
    let unknown = purge(admin, ADMIN_TOKEN, r#"{"service":"nope","prefix":"x"}"#);
    assert_eq!(unknown.status, 404);
}

#[test]
fn the_cache_survives_a_reload_that_keeps_its_settings() {
    let origin = Origin::start("o");
    let (listen, admin) = (local(), local());
    let file =
        write_temp("cache-reload", "switchyard.toml", &config(listen, admin, origin.addr, "{ size = \"1MiB\" }"));
    let proxy = Proxy::run_file_with(&file, listen, 2);
    let get = || Client::connect(listen).get("/r?cache=60");
    get();
    get();
    assert_eq!(origin.requests(), 1);

    // Another change to the service (its forwarding headers), the same cache settings.
    let changed = config(listen, admin, origin.addr, "{ size = \"1MiB\" }")
        .replace("cache = {", "x_forwarded_for = false\ncache = {");
    std::fs::write(&file, changed).expect("rewrite config");
    proxy.reload(1);
    assert!(proxy.log().contains("configuration reloaded"), "{}", proxy.log());
    assert_eq!(get().status, 200);
    assert_eq!(origin.requests(), 1, "entries survive a reload with the same cache settings");

    // New settings: a new, empty cache.
    std::fs::write(&file, config(listen, admin, origin.addr, "{ size = \"2MiB\" }")).expect("rewrite config");
    proxy.reload(2);
    get();
    assert_eq!(origin.requests(), 2);
}

/// An h2c (prior knowledge) GET; returns status, `age` and the body.
async fn h2_get(addr: SocketAddr, path: &str) -> (u16, Option<String>, Vec<u8>) {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (client, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
    tokio::spawn(conn);
    let mut client = client.ready().await.expect("ready");
    let req = http::Request::get(format!("http://test{path}")).body(()).expect("request");
    let (response, _) = client.send_request(req, true).expect("send");
    let (parts, mut recv) = response.await.expect("response").into_parts();
    let body = h2_body(&mut recv).await.expect("body");
    let age = parts.headers.get("age").and_then(|v| v.to_str().ok()).map(str::to_string);
    (parts.status.as_u16(), age, body)
}

#[test]
fn http2_clients_share_the_cache_with_http1_clients() {
    let origin = Origin::start("o");
    let (proxy, _admin) = start(origin.addr, "true");
    let stored = proxy.connect().get("/h2?cache=60&size=5000");
    assert_eq!(origin.requests(), 1);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let (status, age, body) = rt.block_on(h2_get(proxy.addr, "/h2?cache=60&size=5000"));
    assert_eq!((status, body.len()), (200, 5000));
    assert_eq!(body, stored.body);
    assert!(age.is_some(), "an HTTP/2 hit carries Age");
    assert_eq!(origin.requests(), 1, "the HTTP/2 request was a hit");
    // And an HTTP/2 miss is stored for HTTP/1.1 clients.
    rt.block_on(h2_get(proxy.addr, "/h2b?cache=60&size=100"));
    let hit = proxy.connect().get("/h2b?cache=60&size=100");
    assert!(hit.header("age").is_some());
    assert_eq!(origin.requests(), 2);
}

/// An h2c (prior knowledge) request for `path` with `headers`: status, fields and body.
async fn h2_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (client, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
    tokio::spawn(conn);
    let mut client = client.ready().await.expect("ready");
    let mut req = http::Request::builder().method(method).uri(format!("http://test{path}"));
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let (response, _) = client.send_request(req.body(()).expect("request"), true).expect("send");
    let (parts, mut recv) = response.await.expect("response").into_parts();
    let body = h2_body(&mut recv).await.expect("body");
    let fields = parts
        .headers
        .iter()
        .map(|(n, v)| (n.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
        .collect();
    (parts.status.as_u16(), fields, body)
}

#[test]
fn a_cache_hit_reaches_http2_clients_with_the_head_http1_clients_get() {
    let origin = Origin::start("o");
    let (proxy, _admin) = start(origin.addr, "true");
    let path = "/same?cache=60&size=300";
    proxy.connect().get(path);
    let hit = proxy.connect().get(path);
    assert!(hit.header("age").is_some(), "an HTTP/1.1 hit");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let (status, fields, body) = rt.block_on(h2_request(proxy.addr, "GET", path, &[]));
    assert_eq!((status, body.len()), (200, 300));
    assert_eq!(comparable_fields(fields, &[]), comparable_fields(hit.headers.clone(), &[]));
    // A range of the stored response, a HEAD, and a conditional request the cache
    // answers 304: every head through the same writer.
    let (status, fields, body) = rt.block_on(h2_request(proxy.addr, "GET", path, &[("range", "bytes=0-9")]));
    assert_eq!((status, body.len()), (206, 10));
    assert!(fields.contains(&("content-range".to_string(), "bytes 0-9/300".to_string())), "{fields:?}");
    let (status, fields, body) = rt.block_on(h2_request(proxy.addr, "HEAD", path, &[]));
    assert_eq!((status, body.len()), (200, 0));
    assert!(fields.contains(&("content-length".to_string(), "300".to_string())), "{fields:?}");
    if let Some(etag) = hit.header("etag") {
        let (status, _, body) = rt.block_on(h2_request(proxy.addr, "GET", path, &[("if-none-match", etag)]));
        assert_eq!((status, body.len()), (304, 0));
    }
    assert_eq!(origin.requests(), 1, "every HTTP/2 request was a hit");
}

#[test]
fn the_access_log_says_what_the_cache_did() {
    let origin = Origin::start("o");
    let (listen, admin) = (local(), local());
    let log = temp_dir("cache-log").join("access.log");
    let toml = config(listen, admin, origin.addr, "true")
        + &format!("\n[access_log]\npath = \"{}\"\nformat = \"json\"\n", log.display());
    let proxy = Proxy::start(&toml, listen);
    let mut client = proxy.connect();
    client.get("/l?cache=60");
    client.get("/l?cache=60");
    client.get("/nocache/l?cache=60");
    let lines = wait_for("three access log lines", || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<serde_json::Value> =
            text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect::<Vec<_>>();
        (lines.len() >= 3).then_some(lines)
    });
    assert_eq!(lines[0]["cache"], "miss");
    assert_eq!(lines[1]["cache"], "hit");
    assert_eq!(lines[1]["status"], 200);
    assert!(lines[1]["server"].is_null(), "a hit picks no server");
    assert!(lines[2].get("cache").is_none(), "a bypassed request has no cache field");
}

/// `GET path` on the admin API with the read-only token, as JSON.
fn admin_json(admin: SocketAddr, path: &str) -> serde_json::Value {
    let host = admin.to_string();
    let bearer = format!("Bearer {READ_TOKEN}");
    let headers = [("host", host.as_str()), ("connection", "close"), ("authorization", bearer.as_str())];
    let r = Client::connect(admin).request("GET", path, &headers);
    assert_eq!(r.status, 200, "{path}: {}", r.text());
    r.json()
}

#[test]
fn the_admin_view_shows_keys_with_age_freshness_size_and_hits() {
    let origin = Origin::start("o");
    let (proxy, admin) = start(origin.addr, "true");
    let mut client = proxy.connect();
    // a: one miss, three hits; b: one miss; c: an incomplete response (a 206 piece).
    for _ in 0..4 {
        client.get("/v/a?cache=60&size=2000");
    }
    client.get("/v/b?cache=5&size=10");
    client.request("GET", "/v/c?cache=60&size=1000&etag=e&ranges=1", &[("range", "bytes=0-99")]);
    assert_eq!(origin.requests(), 3);

    // A response is stored once its last byte went to the client (phase 10),
    // so the client may ask before the last store is done.
    let listing = wait_for("three keys in the cache's admin view", || {
        let listing = admin_json(admin, "/api/v1/cache/web/entries?prefix=test/v/");
        (listing["matched"] == 3).then_some(listing)
    });
    assert_eq!(listing["matched"], 3, "{listing}");
    let a = &listing["keys"][0];
    assert_eq!(a["key"], "test/v/a?cache=60&size=2000");
    let entry = &a["variants"][0];
    assert_eq!(
        (entry["status"].as_u64(), entry["size"].as_u64(), entry["hits"].as_u64()),
        (Some(200), Some(2000), Some(3))
    );
    let fresh = entry["fresh_for_s"].as_f64().expect("fresh_for_s");
    assert!(fresh > 50.0 && fresh <= 60.0, "{entry}");
    assert!(entry["age_s"].as_u64().is_some_and(|age| age < 10), "{entry}");
    assert_eq!(listing["keys"][1]["variants"][0]["hits"], 0);
    let c = &listing["keys"][2];
    assert_eq!(
        (c["variants"].as_array().map(Vec::len), &c["partial"]),
        (Some(0), &serde_json::json!({"held": 100, "length": 1000}))
    );
    let exact = admin_json(admin, "/api/v1/cache/web/entries?key=test/v/b%3Fcache%3D5%26size%3D10");
    assert_eq!(exact["matched"], 1, "{exact}");

    // The counters behind the dashboard's panel: 3 hits of 2000 bytes served from the store.
    let caches = admin_json(admin, "/api/v1/cache");
    let web = &caches["caches"][0];
    assert_eq!(
        (web["service"].as_str(), web["hits"].as_u64(), web["misses"].as_u64()),
        (Some("web"), Some(3), Some(3))
    );
    assert_eq!(
        (web["served_bytes"].as_u64(), web["pieces"].as_u64(), web["keys"].as_u64()),
        (Some(6000), Some(1), Some(3))
    );

    // ctl: the table, one key, and a purge by prefix.
    let out = ctl(admin, &["cache", "list", "web", "--prefix", "test/v/"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let row: Vec<&str> =
        text.lines().find(|l| l.starts_with("test/v/a")).expect("a's row").split_whitespace().collect();
    assert_eq!((row[1], row.last().copied()), ("200", Some("3")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("test/v/c") && l.contains("partial")), "{text}");
    let out = ctl(admin, &["cache", "show", "web", "test/v/a?cache=60&size=2000"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(text.contains("hits       3") && text.contains("size       2.0 KiB"), "{text}");
    let out = ctl(admin, &["cache"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(text.lines().nth(1).is_some_and(|l| l.starts_with("web") && l.contains("50.0%")), "{text}");
    let out = ctl(admin, &["cache", "purge", "web", "--prefix", "test/v/"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("purged 3"), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(admin_json(admin, "/api/v1/cache/web/entries")["matched"], 0);
}
