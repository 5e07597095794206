//! Resilience end to end: the pool queue (requests wait for a connection slot when every
//! server is at its `max_connections`, bounded in size and in time, across workers) and
//! retries (a failed request moves on to another server only when that cannot do harm).
//!
//! Two hand-written servers stand in where the origin simulator cannot: a [`Gate`] that
//! holds every request until the test lets it through (so "a slot is busy" is a state the
//! test controls, not a race against a delay), and a [`Closer`] that reads a request and
//! closes without answering. Nothing here asserts a duration.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use common::*;

// ---------------------------------------------------------------------------------------
// Hand-written servers
// ---------------------------------------------------------------------------------------

/// Reads one request head (up to the blank line) from `stream`; `None` at EOF or error.
fn read_head(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    Some(String::from_utf8_lossy(&head).into_owned())
}

/// Runs `serve` on a thread for every connection accepted on a fresh loopback port.
fn listen(serve: impl Fn(TcpStream) + Send + Sync + 'static) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let serve = Arc::new(serve);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let serve = serve.clone();
            std::thread::spawn(move || serve(stream));
        }
    });
    addr
}

#[derive(Debug, Default)]
struct GateState {
    /// Requests received.
    arrived: u64,
    /// Requests received and not answered yet.
    held: u32,
    /// The most requests held at once.
    most_held: u32,
    /// Requests the test let through that no held request has used yet.
    passes: u64,
    /// Everything goes through from now on.
    open: bool,
}

/// A keep-alive HTTP/1.1 server that answers each request (200, `x-origin: gate`) only
/// once the test lets it through, and counts how many it held at once.
struct Gate {
    addr: SocketAddr,
    state: Arc<(Mutex<GateState>, Condvar)>,
}

impl Gate {
    fn start() -> Gate {
        let state = Arc::new((Mutex::new(GateState::default()), Condvar::new()));
        let shared = state.clone();
        let addr = listen(move |mut stream| {
            let (lock, changed) = &*shared;
            while read_head(&mut stream).is_some() {
                let mut s = lock.lock().expect("gate lock");
                s.arrived += 1;
                s.held += 1;
                s.most_held = s.most_held.max(s.held);
                changed.notify_all();
                while !s.open && s.passes == 0 {
                    s = changed.wait(s).expect("gate lock");
                }
                s.passes = s.passes.saturating_sub(1);
                s.held -= 1;
                drop(s);
                let answer = b"HTTP/1.1 200 OK\r\nx-origin: gate\r\ncontent-length: 2\r\n\r\nok";
                if stream.write_all(answer).is_err() {
                    return;
                }
            }
        });
        Gate { addr, state }
    }

    fn read<T>(&self, f: impl FnOnce(&GateState) -> T) -> T {
        f(&self.state.0.lock().expect("gate lock"))
    }

    fn arrived(&self) -> u64 {
        self.read(|s| s.arrived)
    }

    fn most_held(&self) -> u32 {
        self.read(|s| s.most_held)
    }

    /// Lets one held (or the next) request through.
    fn pass_one(&self) {
        self.state.0.lock().expect("gate lock").passes += 1;
        self.state.1.notify_all();
    }

    /// Lets every request through, now and from now on.
    fn open(&self) {
        self.state.0.lock().expect("gate lock").open = true;
        self.state.1.notify_all();
    }

    /// Waits until `n` requests have arrived.
    fn wait_arrived(&self, n: u64) {
        wait_for(&format!("{n} requests at the gate"), || (self.arrived() >= n).then_some(()));
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        // Held connection threads answer and end with the proxy.
        self.open();
    }
}

/// A server that reads one request head per connection and closes without answering;
/// it counts the heads it read (the request "reached" it).
struct Closer {
    addr: SocketAddr,
    heads: Arc<Mutex<Vec<String>>>,
}

impl Closer {
    fn start() -> Closer {
        let heads = Arc::new(Mutex::new(Vec::new()));
        let seen = heads.clone();
        let addr = listen(move |mut stream| {
            if let Some(head) = read_head(&mut stream) {
                seen.lock().expect("closer lock").push(head);
            }
        });
        Closer { addr, heads }
    }

    /// Requests that reached it.
    fn requests(&self) -> usize {
        self.heads.lock().expect("closer lock").len()
    }
}

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

/// One request on its own connection, on a thread: the response's status and `x-origin`.
fn spawn_get(addr: SocketAddr, path: &str) -> JoinHandle<(u16, String)> {
    let path = path.to_string();
    std::thread::spawn(move || {
        let r = Client::connect(addr).get(&path);
        (r.status, r.origin().to_string())
    })
}

/// The value of a sample of the proxy's metrics: `name{labels…}` with every label given.
fn metric(admin: SocketAddr, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let host = admin.to_string();
    let r = Client::connect(admin).request("GET", "/metrics", &[("host", &host), ("connection", "close")]);
    assert_eq!(r.status, 200, "{}", r.text());
    r.text().lines().find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let (n, rest) = series.split_once('{').unwrap_or((series, ""));
        let all = labels.iter().all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")));
        (n == name && all).then(|| value.parse().ok()).flatten()
    })
}

/// Waits until `n` requests wait in pool `pool`'s queue.
fn wait_queued(admin: SocketAddr, pool: &str, n: u32) {
    wait_for(&format!("{n} requests queued in `{pool}`"), || {
        (metric(admin, "switchyard_pool_queue_waiting", &[("pool", pool)]) == Some(f64::from(n))).then_some(())
    });
}

/// The access log's JSON line for `uri`, once written.
fn log_line(log: &Path, uri: &str) -> serde_json::Value {
    wait_for(&format!("the access log line of {uri}"), || {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        text.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()).find(|v| v["uri"] == uri)
    })
}

/// A proxy config: service `web` on `listen` (`rules` among its keys) with pool `main`
/// (`pool` holds its keys, servers included), an admin listener and a JSON access log;
/// `extra` is appended (more pools).
fn config(listen: SocketAddr, admin: SocketAddr, log: &Path, rules: &str, pool: &str, extra: &str) -> String {
    format!(
        "drain_timeout = \"1s\"\n\n[admin]\nlisten = \"{admin}\"\n\n[access_log]\npath = \"{}\"\nformat = \"json\"\n\n\
         [[service]]\nname = \"web\"\nlisten = \"{listen}\"\npool = \"main\"\n{rules}\n\n\
         [[pool]]\nname = \"main\"\n{pool}\n{extra}",
        log.display()
    )
}

/// A running proxy with its admin address and access log.
struct Setup {
    proxy: Proxy,
    admin: SocketAddr,
    log: PathBuf,
}

/// Starts a proxy (see [`config`]) with `workers` workers.
fn start(workers: usize, rules: &str, pool: &str, extra: &str) -> Setup {
    let (listen, admin) = (proxy_addr(), proxy_addr());
    let log = temp_dir("resilience").join("access.log");
    let file = write_temp("resilience", "switchyard.toml", &config(listen, admin, &log, rules, pool, extra));
    let proxy = Proxy::run_file_with(&file, listen, workers);
    wait_for("the admin listener", || TcpStream::connect(admin).ok());
    Setup { proxy, admin, log }
}

/// A POST with a body on a fresh connection.
fn post(addr: SocketAddr, path: &str, body: &str) -> Response {
    let mut c = Client::connect(addr);
    let head = format!("POST {path} HTTP/1.1\r\nhost: test\r\ncontent-length: {}\r\n\r\n{body}", body.len());
    c.send(head.as_bytes()).expect("send");
    c.read_response().expect("a response")
}

// ---------------------------------------------------------------------------------------
// The queue
// ---------------------------------------------------------------------------------------

#[test]
fn waiting_requests_are_served_when_a_slot_frees_and_the_queue_is_bounded() {
    let gate = Gate::start();
    let pool = format!(
        "servers = [{{ address = \"{}\", max_connections = 1 }}]\nqueue = {{ size = 2, timeout = \"30s\" }}",
        gate.addr
    );
    let Setup { proxy, admin, log } = start(1, "", &pool, "");

    let first = spawn_get(proxy.addr, "/first");
    gate.wait_arrived(1);
    let waiting = [spawn_get(proxy.addr, "/second"), spawn_get(proxy.addr, "/third")];
    wait_queued(admin, "main", 2);

    // The slot is taken and two wait: one more is refused at once, without reaching the server.
    let refused = proxy.get("/refused");
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(gate.arrived(), 1);
    assert_eq!(log_line(&log, "/refused")["reason"], "queue-full");

    gate.open();
    assert_eq!(first.join().expect("first"), (200, "gate".to_string()));
    for w in waiting {
        assert_eq!(w.join().expect("a waiter"), (200, "gate".to_string()), "a waiting request is served");
    }
    assert_eq!(gate.arrived(), 3);
    assert_eq!(gate.most_held(), 1, "the server never had more than max_connections requests");
    assert_eq!(metric(admin, "switchyard_pool_queue_waiting", &[("pool", "main")]), Some(0.0));
    assert_eq!(metric(admin, "switchyard_errors_total", &[("service", "web"), ("reason", "queue-full")]), Some(1.0));
}

#[test]
fn a_request_that_waits_past_the_queue_timeout_gets_503() {
    let gate = Gate::start();
    let pool = format!(
        "servers = [{{ address = \"{}\", max_connections = 1 }}]\nqueue = {{ size = 2, timeout = \"300ms\" }}",
        gate.addr
    );
    let Setup { proxy, admin, log } = start(1, "", &pool, "");

    let first = spawn_get(proxy.addr, "/first");
    gate.wait_arrived(1);
    // The gate holds the only slot until told otherwise: the waiter can only time out.
    let late = proxy.get("/late");
    assert_eq!(late.status, 503, "{}", late.text());
    assert_eq!(gate.arrived(), 1, "a request that timed out in the queue never reaches a server");
    let line = log_line(&log, "/late");
    assert_eq!(line["reason"], "queue-timeout", "{line}");
    assert_eq!(metric(admin, "switchyard_errors_total", &[("service", "web"), ("reason", "queue-timeout")]), Some(1.0));
    assert!(proxy.log().contains("queue timeout"), "the refusal is logged:\n{}", proxy.log());

    gate.open();
    assert_eq!(first.join().expect("first").0, 200);
    assert_eq!(proxy.get("/after").status, 200, "the slot is free again");
}

#[test]
fn a_slot_freed_on_one_worker_serves_a_request_waiting_on_another() {
    // Eight clients on their own connections: the kernel spreads them over both workers,
    // while the one slot is counted across workers. Each pass frees the slot on whichever
    // worker held it, and the next waiter, on either worker, takes it.
    const CLIENTS: u64 = 8;
    let gate = Gate::start();
    let pool = format!(
        "servers = [{{ address = \"{}\", max_connections = 1 }}]\nqueue = {{ size = 16, timeout = \"30s\" }}",
        gate.addr
    );
    let Setup { proxy, admin, .. } = start(2, "", &pool, "");

    let clients: Vec<_> = (0..CLIENTS).map(|i| spawn_get(proxy.addr, &format!("/c{i}"))).collect();
    gate.wait_arrived(1);
    wait_queued(admin, "main", (CLIENTS - 1) as u32);
    for served in 1..CLIENTS {
        gate.pass_one();
        gate.wait_arrived(served + 1);
    }
    gate.pass_one();
    for c in clients {
        assert_eq!(c.join().expect("a client"), (200, "gate".to_string()));
    }
    assert_eq!(gate.arrived(), CLIENTS);
    assert_eq!(gate.most_held(), 1, "one request at a time at the server, over both workers");
}

// ---------------------------------------------------------------------------------------
// Retries
// ---------------------------------------------------------------------------------------

/// A pool whose servers are tried in file order (`balance = "first"`), so the failing
/// server is always the first choice.
fn first_pool(servers: &[SocketAddr], extra: &str) -> String {
    let list: Vec<String> = servers.iter().map(|a| format!("{{ address = \"{a}\" }}")).collect();
    format!("balance = \"first\"\nservers = [{}]\n{extra}", list.join(", "))
}

#[test]
fn a_get_whose_server_closes_without_answering_is_retried_on_another() {
    let (closer, good) = (Closer::start(), Origin::start("good"));
    let Setup { proxy, admin, log } = start(1, "", &first_pool(&[closer.addr, good.addr], ""), "");
    let r = proxy.get("/page");
    assert_eq!((r.status, r.origin()), (200, "good"), "{}", r.text());
    assert_eq!(closer.requests(), 1);
    assert_eq!(good.requests(), 1);
    assert_eq!(log_line(&log, "/page")["status"], 200);
    assert!(proxy.log().contains("idempotent request retried on another server"), "{}", proxy.log());
    // The client saw nothing, but the failed server's metrics count it.
    let closer_name = closer.addr.to_string();
    let failed = [("server", closer_name.as_str()), ("reason", "server-closed")];
    assert_eq!(metric(admin, "switchyard_server_failures_total", &failed), Some(1.0));
}

#[test]
fn a_post_that_reached_a_server_is_never_sent_again() {
    let (closer, good) = (Closer::start(), Origin::start("good"));
    let Setup { proxy, .. } = start(1, "", &first_pool(&[closer.addr, good.addr], ""), "");
    let r = post(proxy.addr, "/order", "item=1");
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(closer.requests(), 1, "the POST reached the first server once");
    assert_eq!(good.requests(), 0, "and was not repeated elsewhere");
    // An idempotent method with a body is not replayed either: the body is gone.
    let mut c = proxy.connect();
    c.send(b"PUT /doc HTTP/1.1\r\nhost: test\r\ncontent-length: 3\r\n\r\nabc").expect("send");
    assert_eq!(c.read_response().expect("a response").status, 502);
    assert_eq!(closer.requests(), 2);
    assert_eq!(good.requests(), 0);
}

#[test]
fn a_post_whose_connect_fails_goes_to_another_server() {
    let good = Origin::start("good");
    let Setup { proxy, .. } = start(1, "", &first_pool(&[dead_addr(), good.addr], ""), "");
    let r = post(proxy.addr, "/order", "item=1");
    assert_eq!((r.status, r.origin()), (200, "good"), "nothing was sent to the dead server: {}", r.text());
    assert_eq!(r.header("x-received-bytes"), Some("6"));
    assert_eq!(good.requests(), 1);
}

#[test]
fn retries_zero_sends_nothing_elsewhere() {
    let (closer, good) = (Closer::start(), Origin::start("good"));
    let rules = "rules = [{ path_prefix = \"/refused\", pool = \"refused\" }]";
    let refused = first_pool(&[dead_addr(), good.addr], "retries = 0");
    let extra = format!("\n[[pool]]\nname = \"refused\"\n{refused}\n");
    let Setup { proxy, log, .. } = start(1, rules, &first_pool(&[closer.addr, good.addr], "retries = 0"), &extra);

    assert_eq!(proxy.get("/closed").status, 502);
    assert_eq!(log_line(&log, "/closed")["reason"], "server-closed");
    assert_eq!(closer.requests(), 1);
    // A connect failure is not retried either.
    assert_eq!(proxy.get("/refused").status, 502);
    assert_eq!(log_line(&log, "/refused")["reason"], "connect-failed");
    assert_eq!(good.requests(), 0, "nothing moves to another server with retries = 0");
}

#[test]
fn retries_are_bounded_by_the_pool_setting() {
    let closers = [Closer::start(), Closer::start(), Closer::start()];
    let good = Origin::start("good");
    let servers = [closers[0].addr, closers[1].addr, closers[2].addr, good.addr];
    let rules = "rules = [{ path_prefix = \"/three\", pool = \"three\" }]";
    let extra = format!("\n[[pool]]\nname = \"three\"\n{}\n", first_pool(&servers, "retries = 3"));
    let Setup { proxy, log, .. } = start(1, rules, &first_pool(&servers, "retries = 2"), &extra);
    let counts = || closers.iter().map(Closer::requests).collect::<Vec<_>>();

    // Two retries: three servers tried, each once; the fourth never.
    let r = proxy.get("/two");
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(log_line(&log, "/two")["reason"], "server-closed");
    assert_eq!(counts(), [1, 1, 1]);
    assert_eq!(good.requests(), 0);
    // Three retries reach the fourth server.
    let r = proxy.get("/three");
    assert_eq!((r.status, r.origin()), (200, "good"), "{}", r.text());
    assert_eq!(counts(), [2, 2, 2]);
    assert_eq!(good.requests(), 1);
}
