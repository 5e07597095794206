//! Persistence end to end: an inserted cookie brings a client back to its server (a
//! thousand clients at once, forged and corrupted cookies ignored, the attributes as
//! configured), unavailable servers re-point it and draining ones keep it, stick tables
//! expire and evict, cookie learn follows the servers' own session cookie, RDP and SNI
//! connections stick at layer 4, and every table survives a reload.

use crate::common;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::l4::{rdp_request, tagged_server, through};
use common::*;

fn config(listen: SocketAddr, a: SocketAddr, b: SocketAddr, persistence: &str, marker: &str) -> String {
    format!(
        "workers = 2\n\n[[service]]\nname = \"web\"\nlisten = \"{listen}\"\npool = \"main\"\n\
         rules = [{{ path_prefix = \"/\", set_response_headers = {{ x-marker = \"{marker}\" }} }}]\n\n\
         [[pool]]\nname = \"main\"\npersistence = {persistence}\n\
         servers = [{{ address = \"{a}\", name = \"server-a\" }}, {{ address = \"{b}\", name = \"server-b\" }}]\n"
    )
}

/// One HTTP service on `listen` over servers `a` and `b` (named after their origins),
/// one worker (so round robin strictly alternates), an open admin listener on `admin`,
/// and `pool_extra` lines in the pool.
fn admin_config(listen: SocketAddr, admin: SocketAddr, servers: [(&str, SocketAddr); 2], pool_extra: &str) -> String {
    let [(a, a_addr), (b, b_addr)] = servers;
    format!(
        "workers = 1\n\n[admin]\nlisten = \"{admin}\"\n\n\
         [[service]]\nname = \"web\"\nlisten = \"{listen}\"\npool = \"main\"\n\n\
         [[pool]]\nname = \"main\"\n{pool_extra}\n\
         servers = [{{ address = \"{a_addr}\", name = \"{a}\" }}, {{ address = \"{b_addr}\", name = \"{b}\" }}]\n"
    )
}

fn cookie_of(response: &Response) -> Option<String> {
    let value = response.header("set-cookie")?;
    value.split(';').next().map(str::to_string)
}

/// A request to the admin API (no tokens configured).
fn api(admin: SocketAddr, method: &str, path: &str) -> Response {
    let host = admin.to_string();
    let headers = [("host", host.as_str()), ("connection", "close"), ("content-length", "0")];
    Client::connect(admin).request(method, path, &headers)
}

/// Sets a server's admin state: `enable`, `disable` (maintenance) or `drain`.
fn server_action(admin: SocketAddr, server: &str, action: &str) {
    let r = api(admin, "POST", &format!("/api/v1/pools/main/servers/{server}/{action}"));
    assert_eq!(r.status, 200, "{action} {server}: {}", r.text());
}

/// A server's state in the admin API's stats (`up`, `draining`, `maintenance`, `down`).
fn server_state(admin: SocketAddr, server: &str) -> String {
    let stats = api(admin, "GET", "/api/v1/stats").json();
    let pools = stats["pools"].as_array().cloned().unwrap_or_default();
    let servers = pools.iter().flat_map(|p| p["servers"].as_array().cloned().unwrap_or_default());
    servers.filter(|s| s["name"] == server).find_map(|s| s["state"].as_str().map(str::to_string)).unwrap_or_default()
}

/// A pool's persistence table from the admin API: key → server, and the kind.
fn table(admin: SocketAddr, pool: &str) -> (String, HashMap<String, String>) {
    let view = api(admin, "GET", &format!("/api/v1/pools/{pool}/persistence?limit=1000")).json();
    let entries = view["entries"].as_array().cloned().unwrap_or_default();
    let map = entries
        .iter()
        .map(|e| (e["key"].as_str().unwrap_or("").to_string(), e["server"].as_str().unwrap_or("").to_string()))
        .collect();
    (view["kind"].as_str().unwrap_or("").to_string(), map)
}

fn wait_admin(admin: SocketAddr) {
    wait_for("the admin listener", || TcpStream::connect(admin).ok());
}

#[test]
fn an_inserted_cookie_brings_the_client_back_to_its_server() {
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    let listen = proxy_addr();
    let proxy = Proxy::start(&config(listen, a.addr, b.addr, "{ cookie = \"SRV\" }", "1"), listen);

    let first = proxy.get("/");
    let cookie = cookie_of(&first).expect("the first response sets the persistence cookie");
    assert!(cookie.starts_with("SRV="), "{cookie}");
    let set_cookie = first.header("set-cookie").unwrap_or_default();
    assert!(set_cookie.contains("Path=/") && set_cookie.contains("HttpOnly"), "{set_cookie}");
    let token = &cookie["SRV=".len()..];
    assert!(!token.contains("server") && !token.contains("127.0.0.1"), "the cookie must not name the server");

    // Round robin alone would alternate; the cookie pins every request, on
    // new connections (possibly other workers) too.
    for _ in 0..10 {
        let again = Client::connect(listen).request("GET", "/", &[("cookie", &format!("theme=dark; {cookie}"))]);
        assert_eq!(again.origin(), first.origin());
        assert!(again.header("set-cookie").is_none(), "a valid cookie is not set again");
    }
    // A forged or stale value is ignored and replaced.
    let forged = Client::connect(listen).request("GET", "/", &[("cookie", "SRV=AAAAAAAAAAAAAAAA")]);
    assert_eq!(forged.status, 200);
    assert!(cookie_of(&forged).is_some(), "a forged cookie gets a real one");
}

#[test]
fn a_thousand_clients_each_keep_their_server_across_ten_requests() {
    const CLIENTS: usize = 1000;
    const THREADS: usize = 8;
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    let listen = proxy_addr();
    let _proxy = Proxy::start(&config(listen, a.addr, b.addr, "{ cookie = \"SRV\" }", "1"), listen);

    // Each thread plays its share of the clients over two keep-alive connections
    // (each may be served by another worker): first every client's first request,
    // without a cookie, then nine rounds in which each presents its cookie.
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            thread::spawn(move || {
                let mut conns = [Client::connect(listen), Client::connect(listen)];
                let clients: Vec<usize> = (t..CLIENTS).step_by(THREADS).collect();
                let mut sessions = Vec::new();
                for &c in &clients {
                    let first = conns[c % 2].get("/");
                    assert_eq!(first.status, 200, "client {c}");
                    let cookie = cookie_of(&first).unwrap_or_else(|| panic!("client {c} got no cookie"));
                    sessions.push((c, cookie, first.origin().to_string()));
                }
                for round in 1..10 {
                    for (c, cookie, origin) in &sessions {
                        let r = conns[(c + round) % 2].request("GET", "/", &[("cookie", cookie)]);
                        assert_eq!(r.status, 200, "client {c} request {round}");
                        assert_eq!(r.origin(), origin, "client {c} request {round} left its server");
                        assert!(r.header("set-cookie").is_none(), "client {c}: a valid cookie is not reset");
                    }
                }
                sessions.into_iter().map(|(_, _, origin)| origin).collect::<Vec<_>>()
            })
        })
        .collect();
    let origins: Vec<String> = workers.into_iter().flat_map(|w| w.join().expect("client thread")).collect();
    assert_eq!(origins.len(), CLIENTS);
    let on_a = origins.iter().filter(|o| *o == "a").count();
    assert!((300..=700).contains(&on_a), "new clients are balanced: {on_a} of {CLIENTS} on a");
    // Every request reached an origin: 10 per client.
    assert_eq!(a.requests() + b.requests(), (CLIENTS * 10) as u64);
}

#[test]
fn forged_and_corrupted_cookies_are_ignored_safely() {
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    let listen = proxy_addr();
    let toml = config(listen, a.addr, b.addr, "{ cookie = \"SRV\" }", "1").replace("workers = 2", "workers = 1");
    let proxy = Proxy::start(&toml, listen);
    let genuine = cookie_of(&proxy.get("/")).expect("a cookie");
    let token = genuine["SRV=".len()..].to_string();

    let mut one_changed = token.clone().into_bytes();
    let last = one_changed.len() - 1;
    one_changed[last] = if one_changed[last] == b'A' { b'B' } else { b'A' };
    let one_changed = String::from_utf8(one_changed).expect("ascii");
    let truncated = token[..token.len() - 2].to_string();
    let extended = format!("{token}A");
    let very_long = "A".repeat(6000);
    let variants = [
        one_changed.as_str(),
        truncated.as_str(),
        extended.as_str(),
        "garbage!#$%&'*+-.^_`|~",
        "\"quoted-garbage\"",
        "",
        "=====",
        very_long.as_str(),
    ];
    // One keep-alive connection: one worker, whose round robin alternates.
    let mut client = proxy.connect();
    let mut seen = HashSet::new();
    for variant in variants {
        let header = format!("SRV={variant}");
        let r = client.request("GET", "/", &[("cookie", &header)]);
        assert_eq!(r.status, 200, "cookie {:.40}", header);
        seen.insert(r.origin().to_string());
        let fresh = cookie_of(&r).unwrap_or_else(|| panic!("cookie {header:.40} is replaced by a fresh one"));
        assert!(fresh == format!("SRV={}", &fresh[4..]) && fresh.len() == genuine.len(), "{fresh}");
        // The fresh cookie is a real one: it pins its client.
        let back = Client::connect(listen).request("GET", "/", &[("cookie", &fresh)]);
        assert_eq!(back.origin(), r.origin(), "the fresh cookie {fresh} pins");
        assert!(back.header("set-cookie").is_none());
    }
    assert_eq!(seen.len(), 2, "requests with a bad cookie are balanced: {seen:?}");
    // A bad cookie beside a genuine one does not hide it.
    let mixed = format!("SRV={very_long}; {genuine}");
    let r = client.request("GET", "/", &[("cookie", &mixed)]);
    assert_eq!((r.status, r.header("set-cookie")), (200, None));
    assert!(proxy.log().lines().all(|l| !l.contains("panic")), "{}", proxy.log());
}

#[test]
fn cookie_attributes_appear_as_configured() {
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    let listen = proxy_addr();
    let persistence = "{ cookie = \"LB_ID\", path = \"/app\", domain = \"example.test\", max_age = \"2h\", \
                       secure = true, http_only = false }";
    let proxy = Proxy::start(&config(listen, a.addr, b.addr, persistence, "1"), listen);
    let r = proxy.get("/app/page");
    let set_cookie = r.header("set-cookie").expect("a cookie").to_string();
    let mut parts = set_cookie.split("; ");
    let pair = parts.next().unwrap_or_default();
    assert!(pair.starts_with("LB_ID=") && pair.len() > "LB_ID=".len(), "{set_cookie}");
    let attributes: HashSet<&str> = parts.collect();
    let want: HashSet<&str> = ["Path=/app", "Domain=example.test", "Max-Age=7200", "Secure"].into_iter().collect();
    assert_eq!(attributes, want, "{set_cookie}");
    assert_eq!(r.headers_named("set-cookie").len(), 1);
}

#[test]
fn unavailable_servers_re_point_persistence_and_draining_ones_keep_it() {
    let a = Origin::start("a");
    let mut b = Some(Origin::start("b"));
    let b_addr = b.as_ref().map(|o| o.addr).expect("b");
    let (listen, admin) = (proxy_addr(), proxy_addr());
    let extra = "persistence = { cookie = \"SRV\" }\n\
                 health_check = { type = \"tcp\", interval = \"200ms\", rise = 1, fall = 1 }";
    let toml = admin_config(listen, admin, [("a", a.addr), ("b", b_addr)], extra);
    let proxy = Proxy::start(&toml, listen);
    wait_admin(admin);
    let ask = |cookie: &str| Client::connect(listen).request("GET", "/", &[("cookie", cookie)]);

    let first = proxy.get("/");
    let (mine, other) = match first.origin() {
        "a" => ("a", "b"),
        _ => ("b", "a"),
    };
    let cookie = cookie_of(&first).expect("a cookie");

    // Draining: the persistent client stays, new clients go elsewhere.
    server_action(admin, mine, "drain");
    for _ in 0..3 {
        let r = ask(&cookie);
        assert_eq!((r.origin(), r.header("set-cookie")), (mine, None), "a draining server keeps its clients");
    }
    for _ in 0..4 {
        assert_eq!(proxy.get("/").origin(), other, "a draining server takes no new client");
    }

    // Maintenance: the client moves, and its cookie is re-pointed.
    server_action(admin, mine, "disable");
    let moved = ask(&cookie);
    assert_eq!((moved.status, moved.origin()), (200, other), "maintenance sends the client elsewhere");
    let repointed = cookie_of(&moved).expect("the cookie is re-pointed");
    assert_ne!(repointed, cookie);
    server_action(admin, mine, "enable");
    for _ in 0..3 {
        let r = ask(&repointed);
        assert_eq!((r.origin(), r.header("set-cookie")), (other, None), "the client stays where it was moved");
    }
    assert_eq!(ask(&cookie).origin(), mine, "the old cookie still names its server, available again");

    // Down: the server's process is gone and the health check says so. Its
    // client goes elsewhere and the cookie is re-pointed again.
    let cookie_b = if other == "b" { repointed.clone() } else { cookie.clone() };
    drop(b.take());
    wait_for("server b to be marked down", || (server_state(admin, "b") == "down").then_some(()));
    for _ in 0..3 {
        let r = ask(&cookie_b);
        assert_eq!((r.status, r.origin()), (200, "a"), "a down server's client goes elsewhere");
        let fresh = cookie_of(&r).expect("a cookie naming the new server");
        assert_eq!(ask(&fresh).origin(), "a");
    }
}

#[test]
fn a_stick_table_expires_idle_entries_and_evicts_the_least_recently_used() {
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    let (listen, admin) = (proxy_addr(), proxy_addr());
    let extra = "persistence = { header = \"x-user\", capacity = 2, idle_timeout = \"2s\" }";
    let proxy = Proxy::start(&admin_config(listen, admin, [("a", a.addr), ("b", b.addr)], extra), listen);
    wait_admin(admin);
    let mut client = proxy.connect();
    let mut as_user = |user: &str| client.request("GET", "/", &[("x-user", user)]).origin().to_string();

    // Capacity 2: a third user evicts the least recently used one.
    let u1 = as_user("u1");
    let u2 = as_user("u2");
    assert_ne!(u1, u2, "round robin balances new users");
    assert_eq!(as_user("u1"), u1, "u1 sticks, and is now the most recently used");
    as_user("u3");
    let (kind, entries) = table(admin, "main");
    assert_eq!(kind, "header");
    let keys: HashSet<&str> = entries.keys().map(String::as_str).collect();
    assert_eq!(keys, ["u1", "u3"].into_iter().collect(), "u2 was evicted: {entries:?}");

    // Idle expiry: once u4's entry has expired, u4 is balanced again (round robin,
    // one worker: to the other server than the one it had, the last one picked).
    let fresh = as_user("u4");
    assert_eq!(as_user("u4"), fresh, "u4 sticks while its entry lives");
    wait_for("the idle entries to expire", || table(admin, "main").1.is_empty().then_some(()));
    // The admin API reads the time afresh; workers use a clock refreshed every second,
    // so give theirs the time to catch up (a request now would refresh the entry).
    thread::sleep(Duration::from_secs(2));
    let after = as_user("u4");
    assert_ne!(after, fresh, "u4 was balanced as a new user");
    assert_eq!(table(admin, "main").1.get("u4"), Some(&after), "and learned again");
    drop(proxy);
}

/// An HTTP/1.1 server with sessions: a request without one of its own `JSESSIONID`
/// values gets a new one; `/logout` deletes it. Every response names the server in
/// `x-origin`. Keep-alive; bodiless requests only.
fn session_server(name: &'static str) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let issued = Arc::new(AtomicU64::new(0));
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let issued = issued.clone();
            thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut writer = stream;
                loop {
                    let (mut target, mut session) = (String::new(), None);
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    target.push_str(line.split(' ').nth(1).unwrap_or("/"));
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let l = line.trim_end();
                        if l.is_empty() {
                            break;
                        }
                        if let Some((n, v)) = l.split_once(':') {
                            if n.eq_ignore_ascii_case("cookie") {
                                session = v
                                    .split(';')
                                    .filter_map(|p| p.trim().strip_prefix("JSESSIONID="))
                                    .find(|s| s.starts_with(&format!("{name}-")))
                                    .map(str::to_string);
                            }
                        }
                    }
                    let set = if target == "/logout" {
                        "set-cookie: JSESSIONID=; Path=/; Max-Age=0\r\n".to_string()
                    } else if session.is_none() {
                        let n = issued.fetch_add(1, Ordering::Relaxed);
                        format!("set-cookie: JSESSIONID={name}-{n}; Path=/; HttpOnly\r\n")
                    } else {
                        String::new()
                    };
                    let response = format!(
                        "HTTP/1.1 200 OK\r\nx-origin: {name}\r\nset-cookie: theme=dark\r\n{set}content-length: 2\r\n\r\nok"
                    );
                    if writer.write_all(response.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

fn session_of(response: &Response) -> Option<String> {
    response.headers_named("set-cookie").into_iter().find_map(|v| {
        let pair = v.split(';').next()?;
        pair.starts_with("JSESSIONID=").then(|| pair.to_string())
    })
}

#[test]
fn cookie_learn_follows_the_servers_own_session_cookie_across_reloads() {
    let (a, b) = (session_server("a"), session_server("b"));
    let (listen, admin) = (proxy_addr(), proxy_addr());
    let extra = "persistence = { cookie = \"JSESSIONID\", mode = \"learn\", capacity = 100 }";
    let file =
        write_temp("persist-learn", "switchyard.toml", &admin_config(listen, admin, [("a", a), ("b", b)], extra));
    let proxy = Proxy::run_file(&file, listen);
    wait_admin(admin);
    let ask = |cookie: &str| Client::connect(listen).request("GET", "/", &[("cookie", cookie)]);

    // The server's own cookie passes through untouched, and is learned.
    let first = proxy.get("/");
    let session = session_of(&first).expect("the server starts a session");
    let mine = first.origin().to_string();
    let other = if mine == "a" { "b" } else { "a" };
    assert!(session.starts_with(&format!("JSESSIONID={mine}-")), "{session}");
    assert_eq!(first.headers_named("set-cookie").len(), 2, "nothing added, nothing removed");
    for _ in 0..6 {
        let r = ask(&format!("theme=dark; {session}"));
        assert_eq!(r.origin(), mine, "the session cookie brings the client back");
        assert_eq!(session_of(&r), None, "its server knows the session");
    }
    let (kind, entries) = table(admin, "main");
    assert_eq!(kind, "cookie-learn");
    assert_eq!(entries.get(&session["JSESSIONID=".len()..]), Some(&mine), "{entries:?}");

    // A value no server set is balanced; the server that took it starts a session.
    let mut seen = HashSet::new();
    let mut client = proxy.connect();
    for i in 0..4 {
        let r = client.request("GET", "/", &[("cookie", &format!("JSESSIONID=forged-{i}"))]);
        assert_eq!(r.status, 200);
        seen.insert(r.origin().to_string());
        assert!(session_of(&r).is_some());
    }
    assert_eq!(seen.len(), 2, "unknown sessions are balanced: {seen:?}");

    // The persistent server in maintenance: the client moves, and both its old value
    // and the new session the other server starts now stick there.
    server_action(admin, &mine, "disable");
    let moved = ask(&session);
    assert_eq!(moved.origin(), other);
    let new_session = session_of(&moved).expect("the other server starts a session");
    server_action(admin, &mine, "enable");
    assert_eq!(ask(&session).origin(), other, "the old value was re-pointed");
    assert_eq!(ask(&new_session).origin(), other, "the new value was learned");

    // The table survives a reload that keeps the pool's persistence.
    let reloaded =
        admin_config(listen, admin, [("a", a), ("b", b)], extra).replace("workers = 1", "workers = 1\n# reloaded");
    std::fs::write(&file, reloaded).expect("rewrite");
    proxy.reload(1);
    assert!(proxy.log().contains("configuration reloaded"), "{}", proxy.log());
    for _ in 0..4 {
        assert_eq!(ask(&new_session).origin(), other, "the learned session survived the reload");
    }

    // Logging out deletes the cookie, and the entry with it.
    let out = Client::connect(listen).request("GET", "/logout", &[("cookie", &new_session)]);
    assert_eq!(out.status, 200);
    let gone = &new_session["JSESSIONID=".len()..];
    assert!(!table(admin, "main").1.contains_key(gone), "the deleted session left the table");
}

// ---------------------------------------------------------------------------------------
// Layer 4: RDP cookie and SNI affinity
// ---------------------------------------------------------------------------------------

fn l4_config(
    mode: &str,
    listen: SocketAddr,
    admin: SocketAddr,
    servers: &[SocketAddr],
    persistence: &str,
    weight: u32,
) -> String {
    let list: Vec<String> = servers
        .iter()
        .enumerate()
        .map(|(i, a)| format!("{{ address = \"{a}\", name = \"s{i}\", weight = {} }}", if i == 0 { weight } else { 1 }))
        .collect();
    format!(
        "workers = 1\n\n[admin]\nlisten = \"{admin}\"\n\n\
         [[service]]\nname = \"l4\"\nmode = \"{mode}\"\nlisten = \"{listen}\"\npool = \"farm\"\n\n\
         [[pool]]\nname = \"farm\"\npersistence = {persistence}\nservers = [{}]\n",
        list.join(", ")
    )
}

#[test]
fn rdp_connections_stick_by_their_mstshash_cookie_across_reloads() {
    let servers = [tagged_server(b'a'), tagged_server(b'b'), tagged_server(b'c')];
    let (listen, admin) = (proxy_addr(), proxy_addr());
    let persistence = "{ rdp_cookie = true, idle_timeout = \"10m\" }";
    let file = write_temp("persist-rdp", "switchyard.toml", &l4_config("tcp", listen, admin, &servers, persistence, 1));
    let proxy = Proxy::run_file(&file, listen);
    wait_admin(admin);

    let users = ["alice", "bob", "carol", "dave"];
    let homes: Vec<u8> = users.iter().map(|u| through(listen, &rdp_request(Some(u)), false)).collect();
    assert!(homes.iter().collect::<HashSet<_>>().len() > 1, "users are balanced: {homes:?}");
    for (user, home) in users.iter().zip(&homes) {
        for i in 0..5 {
            // Every other connection sends its request in two pieces.
            let name = through(listen, &rdp_request(Some(user)), i % 2 == 1);
            assert_eq!(name, *home, "{user} connection {i} reached server {}", name as char);
        }
    }
    let (kind, entries) = table(admin, "farm");
    assert_eq!(kind, "rdp_cookie");
    assert_eq!(entries.len(), users.len(), "{entries:?}");

    // Without a cookie, or not RDP at all: balanced normally, bytes intact.
    let plain: HashSet<u8> = (0..6).map(|_| through(listen, &rdp_request(None), false)).collect();
    assert!(plain.len() > 1, "connections without a cookie are balanced: {plain:?}");
    let other: HashSet<u8> = (0..6).map(|_| through(listen, b"SSH-2.0-client\r\n", false)).collect();
    assert!(other.len() > 1, "other protocols are balanced: {other:?}");
    assert_eq!(table(admin, "farm").1.len(), users.len(), "nothing learned without a cookie");

    // A reload that keeps the pool's persistence keeps the table.
    std::fs::write(&file, l4_config("tcp", listen, admin, &servers, persistence, 3)).expect("rewrite");
    proxy.reload(1);
    assert!(proxy.log().contains("configuration reloaded"), "{}", proxy.log());
    for (user, home) in users.iter().zip(&homes) {
        assert_eq!(through(listen, &rdp_request(Some(user)), false), *home, "{user} after the reload");
    }
}

/// The ClientHello a real TLS client (rustls) sends for `name`.
fn client_hello(name: &str) -> Vec<u8> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let server_name = rustls::pki_types::ServerName::try_from(name.to_string()).expect("name");
    let mut conn = rustls::ClientConnection::new(Arc::new(config), server_name).expect("client");
    let mut hello = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut hello).expect("hello");
    }
    hello
}

#[test]
fn tls_passthrough_connections_stick_by_server_name_across_reloads() {
    let servers = [tagged_server(b'a'), tagged_server(b'b'), tagged_server(b'c')];
    let (listen, admin) = (proxy_addr(), proxy_addr());
    let persistence = "{ sni = true, capacity = 1000 }";
    let file = write_temp(
        "persist-sni",
        "switchyard.toml",
        &l4_config("tls-passthrough", listen, admin, &servers, persistence, 1),
    );
    let proxy = Proxy::run_file(&file, listen);
    wait_admin(admin);

    let names = ["shop.test", "api.test", "www.example.test", "mail.example.test"];
    let hellos: Vec<Vec<u8>> = names.iter().map(|n| client_hello(n)).collect();
    let homes: Vec<u8> = hellos.iter().map(|h| through(listen, h, false)).collect();
    assert!(homes.iter().collect::<HashSet<_>>().len() > 1, "server names are balanced: {homes:?}");
    for ((name, hello), home) in names.iter().zip(&hellos).zip(&homes) {
        for i in 0..5 {
            // A new ClientHello each time (fresh random and key share), same name.
            let fresh = if i % 2 == 0 { hello.clone() } else { client_hello(name) };
            assert_eq!(through(listen, &fresh, i == 3), *home, "{name} connection {i}");
        }
    }
    let (kind, entries) = table(admin, "farm");
    assert_eq!(kind, "sni");
    let keys: HashSet<&str> = entries.keys().map(String::as_str).collect();
    assert_eq!(keys, names.into_iter().collect(), "keyed by server name");

    std::fs::write(&file, l4_config("tls-passthrough", listen, admin, &servers, persistence, 3)).expect("rewrite");
    proxy.reload(1);
    assert!(proxy.log().contains("configuration reloaded"), "{}", proxy.log());
    for (hello, home) in hellos.iter().zip(&homes) {
        assert_eq!(through(listen, hello, false), *home, "after the reload");
    }
}

#[test]
fn a_source_stick_table_survives_reloads() {
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    let listen = proxy_addr();
    let persistence = "{ source = true, idle_timeout = \"10m\" }";
    let file = write_temp("persist-reload", "switchyard.toml", &config(listen, a.addr, b.addr, persistence, "1"));
    let proxy = Proxy::run_file_with(&file, listen, 2);

    let first = proxy.get("/").origin().to_string();
    for _ in 0..6 {
        assert_eq!(proxy.get("/").origin(), first, "source persistence pins the client");
    }
    for round in 1..=3 {
        std::fs::write(&file, config(listen, a.addr, b.addr, persistence, &format!("{round}x"))).expect("rewrite");
        proxy.reload(round);
        for _ in 0..4 {
            let response = proxy.get("/");
            assert_eq!(response.header("x-marker"), Some(format!("{round}x").as_str()), "reload {round} applied");
            assert_eq!(response.origin(), first, "the stick table survived reload {round}");
        }
    }
}

#[test]
fn check_reports_persistence_a_service_cannot_use() {
    let (listen, admin) = (proxy_addr(), proxy_addr());
    let servers = [dead_addr(), dead_addr()];
    let good = l4_config("tcp", listen, admin, &servers, "{ rdp_cookie = true }", 1);
    let (code, _, stderr) = check(&write_temp("persist-check", "ok.toml", &good));
    assert_eq!(code, 0, "{stderr}");

    let bad = l4_config("tcp", listen, admin, &servers, "{ cookie = \"JSESSIONID\", mode = \"learn\" }", 1);
    let path = write_temp("persist-check", "bad.toml", &bad);
    let (code, stdout, stderr) = check(&path);
    let out = format!("{stdout}{stderr}");
    assert_eq!(code, 1, "{out}");
    let want = format!(
        "{}:14:26: error: pool `farm` has `cookie-learn` persistence, which a `tcp` service (`l4`) cannot use",
        path.display()
    );
    assert!(out.contains(&want), "{out}");
    assert!(out.contains("hint: cookies and headers are read from HTTP requests"), "{out}");
}
