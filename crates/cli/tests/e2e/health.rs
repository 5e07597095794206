//! End to end: active health checks (`http`, `tcp`, `tls`, with `check_address`), passive
//! ejection, slow start, draining and requests in flight over two workers, with the real binary, origin simulators (in-process
//! and killed child processes) and a tiny server whose health answer the test changes.
//!
//! States are read through the admin API (`GET /api/v1/stats`); traffic is counted by the
//! `x-origin` header of responses and by the servers' own counters, never by timings.
//! Checks run every 100–200 ms so each test takes a few seconds.

use crate::common;

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::pki::Pki;
use common::*;

/// What a [`Backend`] answers, and what it counted.
#[derive(Debug)]
struct Answers {
    /// Status and body of `/healthz`.
    health: (u16, String),
    /// Status of any other path.
    traffic: u16,
    /// How long an answer to any other path waits.
    delay: Duration,
    /// `/healthz` answers given since `health` was last set.
    health_answers: u64,
    /// Requests to other paths.
    hits: u64,
}

/// A tiny HTTP/1.1 server (a thread per connection, one request per connection) whose
/// `/healthz` answer and traffic status the test changes; every response carries
/// `x-origin: NAME`. Its thread lives as long as the test binary.
struct Backend {
    addr: SocketAddr,
    answers: Arc<Mutex<Answers>>,
}

impl Backend {
    fn start(name: &'static str) -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind backend");
        let addr = listener.local_addr().expect("backend address");
        let answers = Arc::new(Mutex::new(Answers {
            health: (200, "ok".to_string()),
            traffic: 200,
            delay: Duration::ZERO,
            health_answers: 0,
            hits: 0,
        }));
        let shared = answers.clone();
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let shared = shared.clone();
                thread::spawn(move || answer(stream, name, &shared));
            }
        });
        Backend { addr, answers }
    }

    fn set_health(&self, status: u16, body: &str) {
        let mut a = self.answers.lock().expect("lock");
        a.health = (status, body.to_string());
        a.health_answers = 0;
    }

    fn set_traffic(&self, status: u16) {
        self.answers.lock().expect("lock").traffic = status;
    }

    fn set_delay(&self, delay: Duration) {
        self.answers.lock().expect("lock").delay = delay;
    }

    fn health_answers(&self) -> u64 {
        self.answers.lock().expect("lock").health_answers
    }

    fn hits(&self) -> u64 {
        self.answers.lock().expect("lock").hits
    }
}

/// Reads one request head and answers it, closing the connection.
fn answer(stream: TcpStream, name: &str, answers: &Mutex<Answers>) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut reader = BufReader::new(&stream);
    let mut first = String::new();
    if reader.read_line(&mut first).unwrap_or(0) == 0 {
        return; // a TCP check: connected and closed
    }
    let mut line = String::new();
    while reader.read_line(&mut line).unwrap_or(0) > 0 && line.trim_end() != "" {
        line.clear();
    }
    let path = first.split_whitespace().nth(1).unwrap_or("/");
    let (status, body, delay) = {
        let mut a = answers.lock().expect("lock");
        if path == "/healthz" {
            a.health_answers += 1;
            (a.health.0, a.health.1.clone(), Duration::ZERO)
        } else {
            a.hits += 1;
            (a.traffic, format!("{name}\n"), a.delay)
        }
    };
    thread::sleep(delay);
    let response = format!(
        "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\nx-origin: {name}\r\n\r\n{body}",
        body.len()
    );
    let _ = (&stream).write_all(response.as_bytes());
}

/// `{ name = "NAME", address = "ADDR" }` plus any extra keys.
fn server(name: &str, addr: SocketAddr, extra: &str) -> String {
    format!("{{ name = \"{name}\", address = \"{addr}\"{extra} }}")
}

/// One worker, an open admin API on `admin`, service `web` on `listen` over pool `main`.
fn config(listen: SocketAddr, admin: SocketAddr, servers: &[String], pool_extra: &str) -> String {
    format!(
        "workers = 1\ndrain_timeout = \"5s\"\n[admin]\nlisten = \"{admin}\"\n\n\
         [[service]]\nname = \"web\"\nlisten = \"{listen}\"\npool = \"main\"\n\n\
         [[pool]]\nname = \"main\"\nservers = [{}]\n{pool_extra}\n",
        servers.join(", ")
    )
}

/// The admin API's view of server `name` in pool `pool`.
fn server_view(admin: SocketAddr, pool: &str, name: &str) -> serde_json::Value {
    let host = admin.to_string();
    let stats =
        Client::connect(admin).request("GET", "/api/v1/stats", &[("host", &host), ("connection", "close")]).json();
    let pools = stats["pools"].as_array().cloned().unwrap_or_default();
    let found = pools
        .iter()
        .find(|p| p["name"] == pool)
        .and_then(|p| p["servers"].as_array().and_then(|s| s.iter().find(|s| s["name"] == name).cloned()));
    found.unwrap_or_else(|| panic!("no server {pool}/{name} in {stats}"))
}

/// The state the admin API shows for server `name` of pool `main`.
fn state(admin: SocketAddr, name: &str) -> String {
    server_view(admin, "main", name)["state"].as_str().unwrap_or("").to_string()
}

/// Waits until server `name` of pool `main` shows `want`.
fn wait_state(admin: SocketAddr, name: &str, want: &str) {
    wait_for(&format!("server {name} to be {want}"), || (state(admin, name) == want).then_some(()));
}

/// Requests sent to and connect failures met at server `name`, as the admin API counts them.
fn attempts(admin: SocketAddr, name: &str) -> u64 {
    let view = server_view(admin, "main", name);
    view["requests"].as_u64().unwrap_or(0) + view["failures"].as_u64().unwrap_or(0)
}

/// `n` GETs of `path` on one keep-alive connection: the `x-origin` of each 200, panicking
/// on any other status.
fn origins(proxy: &Proxy, path: &str, n: usize) -> Vec<String> {
    let mut client = proxy.connect();
    (0..n)
        .map(|i| {
            let r = client.get(path);
            assert_eq!(r.status, 200, "request {i} of {n}: {}", r.text());
            r.origin().to_string()
        })
        .collect()
}

/// Sends GETs until `done` holds (bounded by [`PATIENCE`]); the origins seen.
fn get_until(proxy: &Proxy, what: &str, mut done: impl FnMut(&str) -> bool) {
    let mut client = proxy.connect();
    wait_for(what, || {
        let r = client.get("/");
        done(r.origin()).then_some(())
    });
}

/// Prints the proxy's log when the test fails (dropped before the proxy).
struct LogOnFailure<'a>(&'a Proxy);

impl Drop for LogOnFailure<'_> {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!("--- proxy log\n{}", self.0.log());
        }
    }
}

fn kill_hard(pid: u32) {
    let status = Command::new("kill").arg("-KILL").arg(pid.to_string()).status().expect("run kill");
    assert!(status.success(), "kill -KILL {pid}");
}

#[test]
fn an_http_check_takes_a_failing_server_down_and_rise_passes_bring_it_back() {
    // Both answer `/healthz` with `ok` (an origin simulator's random body would not hold it).
    let (a, b) = (Backend::start("a"), Backend::start("b"));
    let (listen, admin) = (proxy_addr(), proxy_addr());
    let check = "health_check = { type = \"http\", path = \"/healthz\", expect_status = [200, \"204\"], \
                 expect_body = \"ok\", interval = \"200ms\", timeout = \"150ms\", rise = 2, fall = 2 }";
    let servers = [server("a", a.addr, ""), server("b", b.addr, "")];
    let proxy = Proxy::start(&config(listen, admin, &servers, check), listen);
    let _log = LogOnFailure(&proxy);
    let seen: HashSet<String> = origins(&proxy, "/", 10).into_iter().collect();
    assert_eq!(seen.len(), 2, "both servers take traffic at first: {seen:?}");
    wait_for("a passing check of a", || (a.health_answers() >= 1).then_some(()));
    assert_eq!(state(admin, "a"), "up");

    // A status outside expect_status.
    a.set_health(503, "ok");
    wait_state(admin, "a", "down");
    let log = proxy.log();
    assert!(
        log.lines().any(|l| l.contains("server down: health check failed") && l.contains("status 503")),
        "the change is logged with its reason:\n{log}"
    );
    let hits = a.hits();
    assert!(origins(&proxy, "/", 20).iter().all(|o| o == "b"), "a down server gets no traffic");
    assert_eq!(a.hits(), hits, "nothing reached a while it was down");
    assert_eq!(state(admin, "b"), "up");

    // Back after `rise` passing checks in a row.
    a.set_health(200, "all ok");
    wait_state(admin, "a", "up");
    assert!(a.health_answers() >= 2, "up only after rise = 2 passing checks, saw {}", a.health_answers());
    assert!(proxy.log().contains("server up: health check passed"), "{}", proxy.log());
    get_until(&proxy, "a request to reach a again", |o| o == "a");

    // A body without expect_body.
    a.set_health(200, "degraded");
    wait_state(admin, "a", "down");
    let log = proxy.log();
    assert!(
        log.lines().any(|l| l.contains("server down: health check failed") && l.contains("body mismatch")),
        "{log}"
    );
    // 204 is in expect_status, but its empty body lacks `ok`: more than rise checks later, still down.
    a.set_health(204, "");
    wait_for("three checks answered 204", || (a.health_answers() >= 3).then_some(()));
    assert_eq!(state(admin, "a"), "down");
    a.set_health(200, "ok");
    wait_state(admin, "a", "up");
}

#[test]
fn a_killed_server_is_marked_down_and_no_idempotent_request_fails() {
    let (a_addr, b_addr) = (SocketAddr::from(([127, 0, 0, 1], free_port())), proxy_addr());
    let a = OriginProcess::start(a_addr, "a");
    let _b = OriginProcess::start(b_addr, "b");
    let (listen, admin) = (proxy_addr(), proxy_addr());
    let check = "health_check = { type = \"tcp\", interval = \"200ms\", timeout = \"100ms\", rise = 2, fall = 2 }";
    let proxy =
        Proxy::start(&config(listen, admin, &[server("a", a_addr, ""), server("b", b_addr, "")], check), listen);
    let _log = LogOnFailure(&proxy);

    // A client sending GETs in a loop on one keep-alive connection, counting what answers.
    let stop = Arc::new(AtomicBool::new(false));
    let (total, from_a) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let load = {
        let (stop, total, from_a, failures) = (stop.clone(), total.clone(), from_a.clone(), failures.clone());
        thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut client = Client::connect(listen);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline && n < 200_000 {
                n += 1;
                let sent = client.send(b"GET /?size=16 HTTP/1.1\r\nhost: test\r\n\r\n");
                match sent.and_then(|()| client.read_response()) {
                    Ok(r) if r.status == 200 => {
                        if r.origin() == "a" {
                            from_a.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Ok(r) => failures.lock().expect("lock").push(format!("status {}: {}", r.status, r.text())),
                    Err(e) => {
                        failures.lock().expect("lock").push(format!("error: {e}"));
                        client = Client::connect(listen);
                    }
                }
                total.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    wait_for("the load to reach a", || (from_a.load(Ordering::Relaxed) >= 20).then_some(()));

    let (attempts_at_kill, sent_at_kill) = (attempts(admin, "a"), total.load(Ordering::Relaxed));
    let killed = Instant::now();
    kill_hard(a.pid());
    wait_state(admin, "a", "down");
    let down_after = killed.elapsed();
    // interval × fall is 400 ms; the bound only catches a check that never fires.
    assert!(down_after < Duration::from_secs(10), "marked down {down_after:?} after the kill");
    let (attempts_at_down, sent_at_down) = (attempts(admin, "a"), total.load(Ordering::Relaxed));
    wait_for("100 more requests", || (total.load(Ordering::Relaxed) >= sent_at_down + 100).then_some(()));
    let tried_after = attempts(admin, "a") - attempts_at_down;
    // One request may have picked a just before the verdict flipped.
    assert!(tried_after <= 1, "{tried_after} requests went to a after it was marked down");
    eprintln!(
        "failover: a killed → marked down after {down_after:?}; meanwhile {} requests, {} of them tried a first",
        sent_at_down - sent_at_kill,
        attempts_at_down - attempts_at_kill
    );

    // The same address comes back: up after `rise` checks, and traffic returns.
    drop(a);
    let _a = OriginProcess::start(a_addr, "a");
    wait_state(admin, "a", "up");
    let back = from_a.load(Ordering::Relaxed);
    wait_for("the load to reach a again", || (from_a.load(Ordering::Relaxed) > back).then_some(()));
    stop.store(true, Ordering::Relaxed);
    load.join().expect("load thread");
    let failures = failures.lock().expect("lock");
    assert!(
        failures.is_empty(),
        "{} of {} requests failed: {:?}",
        failures.len(),
        total.load(Ordering::Relaxed),
        *failures
    );
    assert!(proxy.log().contains("reason=connection refused"), "{}", proxy.log());
}

#[test]
fn a_tls_check_needs_a_completed_handshake() {
    let pki = Pki::new("health CA");
    let (cert, key) = pki.leaf(&["origin.test", "127.0.0.1"]);
    let tls = switchyard_bench::origin::tls_config(cert.as_bytes(), key.as_bytes(), None).expect("origin TLS");
    let secure = Origin::start_tls("secure", tls);
    let other = Pki::new("another CA");
    let (cert, key) = other.leaf(&["origin.test", "127.0.0.1"]);
    let untrusted_tls = switchyard_bench::origin::tls_config(cert.as_bytes(), key.as_bytes(), None).expect("TLS");
    let untrusted = Origin::start_tls("untrusted", untrusted_tls);
    let plain = Origin::start("plain");
    let ca = write_temp("health-ca", "ca.pem", &pki.ca);
    let (listen, verified_listen, admin) = (proxy_addr(), proxy_addr(), proxy_addr());
    let check = "health_check = { type = \"tls\", interval = \"200ms\", timeout = \"150ms\", rise = 1, fall = 2 }";
    let servers = [server("secure", secure.addr, ""), server("plain", plain.addr, "")];
    let mut toml = config(listen, admin, &servers, check);
    // A pool with `tls` settings: its checks verify certificates, and an http check goes over TLS.
    toml.push_str(&format!(
        "\n[[service]]\nname = \"verified\"\nlisten = \"{verified_listen}\"\npool = \"verified\"\n\n\
         [[pool]]\nname = \"verified\"\ntls = {{ ca = \"{}\", server_name = \"origin.test\" }}\n\
         servers = [{}, {}]\n\
         health_check = {{ type = \"http\", path = \"/\", interval = \"200ms\", timeout = \"150ms\", rise = 1, fall = 2 }}\n",
        ca.display(),
        server("secure", secure.addr, ""),
        server("untrusted", untrusted.addr, "")
    ));
    let proxy = Proxy::start(&toml, listen);
    let _log = LogOnFailure(&proxy);

    wait_state(admin, "plain", "down");
    let log = proxy.log();
    assert!(log.lines().any(|l| l.contains("server down") && l.contains("TLS handshake failed")), "{log}");
    wait_for("untrusted to be down", || (server_view(admin, "verified", "untrusted")["state"] == "down").then_some(()));
    wait_for("handshakes with the secure origin", || (secure.tls_handshakes().0 >= 4).then_some(()));
    assert_eq!(state(admin, "secure"), "up");
    assert_eq!(server_view(admin, "verified", "secure")["state"], "up");
    let mut client = Client::connect(verified_listen);
    for _ in 0..6 {
        let r = client.get("/");
        assert_eq!((r.status, r.origin()), (200, "secure"), "only the server that passed its check gets traffic");
    }
}

#[test]
fn checks_go_to_the_check_address_not_the_traffic_address() {
    let (a, b, b_check) = (Origin::start("a"), Origin::start("b"), Origin::start("b-check"));
    let dead = dead_addr();
    let (listen, admin) = (proxy_addr(), proxy_addr());
    let check = "health_check = { type = \"tcp\", interval = \"200ms\", timeout = \"100ms\", rise = 1, fall = 2 }";
    let servers = [
        server("a", a.addr, &format!(", check_address = \"{dead}\"")),
        server("b", b.addr, &format!(", check_address = \"{}\"", b_check.addr)),
    ];
    let proxy = Proxy::start(&config(listen, admin, &servers, check), listen);
    let _log = LogOnFailure(&proxy);

    // a's traffic address is alive, but its check address is not.
    wait_state(admin, "a", "down");
    let log = proxy.log();
    assert!(
        log.lines().any(|l| l.contains("server down") && l.contains(&dead.to_string())),
        "the log names the probed address:\n{log}"
    );
    wait_for("checks of b at its check address", || (b_check.connections() >= 3).then_some(()));
    assert_eq!(state(admin, "b"), "up");
    assert!(origins(&proxy, "/", 10).iter().all(|o| o == "b"));
    assert_eq!(a.requests(), 0, "the down server got no traffic");
}

#[test]
fn passive_checking_ejects_a_failing_server_for_the_eject_period() {
    let (a, b) = (Backend::start("a"), Origin::start("b"));
    let (listen, admin) = (proxy_addr(), proxy_addr());
    let passive = "passive = { failures = 2, eject = \"1s\" }";
    let proxy =
        Proxy::start(&config(listen, admin, &[server("a", a.addr, ""), server("b", b.addr, "")], passive), listen);
    let _log = LogOnFailure(&proxy);
    a.set_traffic(500);

    // Round robin on one connection: a answers 500 every other request.
    let mut client = proxy.connect();
    let mut fives = 0;
    for _ in 0..10 {
        if client.get("/").status == 500 {
            fives += 1;
        }
        if fives == 2 {
            break;
        }
    }
    assert_eq!(fives, 2, "a answered 500 twice");
    // The client may read the second 500 just before the proxy counts it.
    wait_state(admin, "a", "down");
    let ejected = Instant::now();
    let log = proxy.log();
    assert!(
        log.lines().any(|l| l.contains("ejected by passive check") && l.contains("5xx response")),
        "the ejection is logged with its reason:\n{log}"
    );

    // Within the eject period (which began before `ejected`), a gets nothing.
    let hits = a.hits();
    let mut during = 0;
    while ejected.elapsed() < Duration::from_millis(600) {
        let r = client.get("/");
        assert_eq!((r.status, r.origin()), (200, "b"));
        during += 1;
    }
    assert!(during > 0);
    assert_eq!(a.hits(), hits, "nothing reached a while it was ejected");

    // Then it comes back by itself (no active check).
    a.set_traffic(200);
    wait_state(admin, "a", "up");
    get_until(&proxy, "a request to reach a again", |o| o == "a");
    assert!(proxy.log().contains("passive ejection over"), "{}", proxy.log());
}

#[test]
fn passive_checking_ejects_a_server_refusing_connections_and_retries_hide_it() {
    let (dead, b) = (dead_addr(), Origin::start("b"));
    let (listen, admin) = (proxy_addr(), proxy_addr());
    let passive = "passive = { failures = 2, eject = \"1s\" }";
    let proxy =
        Proxy::start(&config(listen, admin, &[server("a", dead, ""), server("b", b.addr, "")], passive), listen);
    let _log = LogOnFailure(&proxy);
    let mut client = proxy.connect();
    wait_for("a to be ejected", || {
        let r = client.get("/");
        assert_eq!((r.status, r.origin()), (200, "b"), "a refused connection is retried on b");
        (state(admin, "a") == "down").then_some(())
    });
    let ejected = Instant::now();
    let tried = attempts(admin, "a");
    assert_eq!(tried, 2, "ejected after failures = 2 connect failures");
    while ejected.elapsed() < Duration::from_millis(600) {
        assert_eq!(client.get("/").origin(), "b");
    }
    assert_eq!(attempts(admin, "a"), tried, "no connection attempt to a while it was ejected");
    // After the period it is tried again (and, refusing still, ejected again).
    wait_for("a to be tried again", || {
        assert_eq!(client.get("/").status, 200);
        (attempts(admin, "a") > tried).then_some(())
    });
}

#[test]
fn an_ejected_server_with_an_active_check_returns_only_once_the_check_passes() {
    let (a, b) = (Backend::start("a"), Origin::start("b"));
    let (listen, admin) = (proxy_addr(), proxy_addr());
    // fall = 100: the active check alone would need 20 s to take a down.
    let extra = "passive = { failures = 2, eject = \"1s\" }\n\
                 health_check = { type = \"http\", path = \"/healthz\", interval = \"200ms\", timeout = \"150ms\", \
                 rise = 1, fall = 100 }";
    let proxy =
        Proxy::start(&config(listen, admin, &[server("a", a.addr, ""), server("b", b.addr, "")], extra), listen);
    let _log = LogOnFailure(&proxy);
    a.set_health(503, "");
    a.set_traffic(500);
    // Once a failing answer was given, no passing probe of a is still in flight.
    wait_for("a failing check", || (a.health_answers() >= 1).then_some(()));
    assert_eq!(state(admin, "a"), "up", "one failure of fall = 100");
    let mut client = proxy.connect();
    wait_for("a to be ejected", || {
        client.get("/");
        (state(admin, "a") == "down").then_some(())
    });
    let ejected = Instant::now();

    // Well past the eject period, a is still down: its check has not passed since.
    a.set_traffic(200);
    let hits = a.hits();
    while ejected.elapsed() < Duration::from_millis(1800) {
        assert_eq!(client.get("/").origin(), "b");
        thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(state(admin, "a"), "down", "the eject period is over, but the check still fails");
    assert_eq!(a.hits(), hits);

    a.set_health(200, "ok");
    wait_state(admin, "a", "up");
    get_until(&proxy, "a request to reach a again", |o| o == "a");
}

#[test]
fn slow_start_ramps_a_returning_server_up() {
    let (a, b) = (Backend::start("a"), Origin::start("b"));
    let (listen, admin) = (proxy_addr(), proxy_addr());
    let extra = "slow_start = \"3s\"\n\
                 health_check = { type = \"http\", path = \"/healthz\", interval = \"100ms\", timeout = \"80ms\", \
                 rise = 1, fall = 1 }";
    let servers = [server("a", a.addr, ", weight = 100"), server("b", b.addr, ", weight = 100")];
    let proxy = Proxy::start(&config(listen, admin, &servers, extra), listen);
    let _log = LogOnFailure(&proxy);
    a.set_health(503, "");
    wait_state(admin, "a", "down");
    a.set_health(200, "ok");
    wait_state(admin, "a", "up");

    // Right after it returns: a small share, bounded by the weight the ramp has reached.
    let started = Instant::now();
    let mut client = proxy.connect();
    let (mut to_a, mut total) = (0u32, 0u32);
    while started.elapsed() < Duration::from_millis(400) && total < 5000 {
        total += 1;
        if client.get("/").origin() == "a" {
            to_a += 1;
        }
    }
    let weight = server_view(admin, "main", "a")["weight"].as_u64().unwrap_or(0);
    eprintln!("slow start: {to_a} of {total} requests to a in the first 400 ms; its weight then {weight} of 100");
    assert!(weight < 100, "still ramping when the window ended (weight {weight})");
    assert!(total >= 10, "only {total} requests in the window");
    if weight <= 50 {
        assert!(f64::from(to_a) < 0.30 * f64::from(total), "{to_a} of {total} went to a while it ramped");
    }

    // After the ramp: about half.
    wait_for("the ramp to end", || (server_view(admin, "main", "a")["weight"] == 100).then_some(()));
    let after = origins(&proxy, "/", 200);
    let share = after.iter().filter(|o| *o == "a").count();
    assert!((70..=130).contains(&share), "{share} of 200 went to a after the ramp");
}

#[test]
fn a_drained_server_finishes_its_request_and_takes_no_new_ones() {
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    let (listen, admin) = (proxy_addr(), proxy_addr());
    let proxy = Proxy::start(&config(listen, admin, &[server("a", a.addr, ""), server("b", b.addr, "")], ""), listen);
    let _log = LogOnFailure(&proxy);
    let slow = thread::spawn(move || Client::connect(listen).get("/?delay_ms=1500"));
    let busy = wait_for("the slow request to be in flight", || {
        ["a", "b"].into_iter().find(|name| server_view(admin, "main", name)["active"] == 1)
    });
    let host = admin.to_string();
    let drained = Client::connect(admin).request(
        "POST",
        &format!("/api/v1/pools/main/servers/{busy}/drain"),
        &[("host", &host), ("connection", "close"), ("content-length", "0")],
    );
    assert_eq!(drained.status, 200, "{}", drained.text());
    assert_eq!(state(admin, busy), "draining");
    let other = if busy == "a" { "b" } else { "a" };
    assert!(origins(&proxy, "/", 10).iter().all(|o| o == other), "no new request goes to the draining server");
    let finished = slow.join().expect("slow client");
    assert_eq!((finished.status, finished.origin()), (200, busy), "the request in flight finished");
    // The slot is released just after the response went out.
    wait_for("the draining server to be idle", || (server_view(admin, "main", busy)["active"] == 0).then_some(()));
}

#[test]
fn requests_in_flight_count_over_both_workers_and_least_connections_evens_them_out() {
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    let (listen, admin) = (proxy_addr(), proxy_addr());
    let servers = [server("a", a.addr, ""), server("b", b.addr, "")];
    let toml =
        config(listen, admin, &servers, "balance = \"least-connections\"").replace("workers = 1\n", "workers = 2\n");
    let proxy = Proxy::start(&toml, listen);
    let _log = LogOnFailure(&proxy);
    let in_flight = || ["a", "b"].map(|name| server_view(admin, "main", name)["active"].as_u64().unwrap_or(u64::MAX));
    let host = admin.to_string();
    let set = |action: &str| {
        let path = format!("/api/v1/pools/main/servers/b/{action}");
        let r = Client::connect(admin).request(
            "POST",
            &path,
            &[("host", &host), ("connection", "close"), ("content-length", "0")],
        );
        assert_eq!(r.status, 200, "{action}: {}", r.text());
    };
    // Slow requests, each on a connection of its own (the kernel spreads them over both
    // workers), one after the other: each is picked once the one before is counted.
    let mut open = Vec::new();
    let mut send = |expect: u64| {
        let mut s = TcpStream::connect(listen).expect("connect");
        s.write_all(b"GET /?delay_ms=4000 HTTP/1.1\r\nhost: web\r\nconnection: close\r\n\r\n").expect("send");
        open.push(s);
        wait_for("the request to be in flight", || (in_flight().iter().sum::<u64>() == expect).then_some(()));
    };
    // Four on a while b drains, then four with b back: a pick on either worker sees a's
    // four, whichever worker took them, and sends each to b.
    set("drain");
    (1..=4).for_each(&mut send);
    assert_eq!(in_flight(), [4, 0], "the admin API sums both workers' counts");
    set("enable");
    (5..=8).for_each(&mut send);
    assert_eq!(in_flight(), [4, 4], "each went to the server with fewer in flight, whichever worker took it");
    for mut s in open {
        let mut answer = Vec::new();
        std::io::Read::read_to_end(&mut s, &mut answer).expect("answer");
        assert!(answer.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&answer));
    }
    wait_for("no request in flight", || (in_flight() == [0, 0]).then_some(()));
}

#[test]
fn a_tcp_service_ejects_a_server_refusing_connections() {
    let (dead, b) = (dead_addr(), Origin::start("b"));
    let (listen, admin) = (proxy_addr(), proxy_addr());
    let passive = "passive = { failures = 1, eject = \"1s\" }";
    let toml = config(listen, admin, &[server("a", dead, ""), server("b", b.addr, "")], passive)
        .replace("pool = \"main\"\n", "mode = \"tcp\"\npool = \"main\"\n");
    let proxy = Proxy::start(&toml, listen);
    let _log = LogOnFailure(&proxy);
    // Every connection is relayed (to b, the relay moving on from a refusing server).
    wait_for("a to be ejected", || {
        let r = proxy.get("/");
        assert_eq!((r.status, r.origin()), (200, "b"));
        (state(admin, "a") == "down").then_some(())
    });
    let ejected = Instant::now();
    let tried = attempts(admin, "a");
    assert_eq!(tried, 1, "one refused connection ejects it (failures = 1)");
    while ejected.elapsed() < Duration::from_millis(600) {
        assert_eq!(proxy.get("/").origin(), "b");
    }
    assert_eq!(attempts(admin, "a"), tried, "no connection attempt to a while it was ejected");
    wait_for("a to be tried again", || {
        assert_eq!(proxy.get("/").status, 200);
        (attempts(admin, "a") > tried).then_some(())
    });
}

#[test]
fn a_reload_keeps_the_verdict_of_a_down_server() {
    let (a, b) = (Backend::start("a"), Backend::start("b"));
    let (listen, admin) = (proxy_addr(), proxy_addr());
    let check = "health_check = { type = \"http\", path = \"/healthz\", interval = \"200ms\", timeout = \"150ms\", \
                 rise = 2, fall = 1 }";
    let toml = config(listen, admin, &[server("a", a.addr, ""), server("b", b.addr, "")], check);
    let proxy = Proxy::start(&toml, listen);
    let _log = LogOnFailure(&proxy);
    a.set_health(500, "");
    wait_state(admin, "a", "down");

    // The check itself changes (not its target): the verdict is kept, no new start "up".
    std::fs::write(&proxy.config, toml.replace("interval = \"200ms\"", "interval = \"300ms\"")).expect("rewrite");
    proxy.reload(1);
    assert!(proxy.log().contains("configuration reloaded"), "{}", proxy.log());
    assert_eq!(state(admin, "a"), "down");
    assert!(origins(&proxy, "/", 10).iter().all(|o| o == "b"));
    assert!(!proxy.log().contains("server up"), "{}", proxy.log());

    a.set_health(200, "ok");
    wait_state(admin, "a", "up");
}

#[test]
fn passive_checking_ejects_a_server_that_stalls_past_server_response() {
    let (a, b) = (Backend::start("a"), Origin::start("b"));
    a.set_delay(Duration::from_millis(1500));
    let (listen, admin) = (proxy_addr(), proxy_addr());
    let passive = "passive = { failures = 2, eject = \"1s\" }";
    let toml = config(listen, admin, &[server("a", a.addr, ""), server("b", b.addr, "")], passive)
        .replace("pool = \"main\"\n", "pool = \"main\"\ntimeouts = { server_response = \"200ms\" }\n");
    let proxy = Proxy::start(&toml, listen);
    let _log = LogOnFailure(&proxy);
    let mut timeouts = 0;
    wait_for("a to be ejected", || {
        // A fresh connection each: a 504 closes the client's connection.
        let r = proxy.get("/");
        match r.status {
            504 => timeouts += 1,
            status => assert_eq!((status, r.origin()), (200, "b")),
        }
        (state(admin, "a") == "down").then_some(())
    });
    assert_eq!(timeouts, 2, "two stalled responses (504) eject it");
    let log = proxy.log();
    assert!(
        log.lines().any(|l| l.contains("ejected by passive check") && l.contains("server response timeout")),
        "{log}"
    );
    assert!(origins(&proxy, "/", 10).iter().all(|o| o == "b"));
}
