//! Hot reload (SIGHUP) end to end: reloads under load lose nothing, a
//! removed service drains, an invalid file is refused while traffic goes on.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::*;

/// A WebSocket echo server (tungstenite) on a fresh port; one thread per connection.
fn websocket_echo() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            thread::spawn(move || {
                let Ok(mut ws) = tungstenite::accept(stream) else { return };
                while let Ok(msg) = ws.read() {
                    if msg.is_close() || ws.send(msg).is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

fn config(listen: SocketAddr, a: SocketAddr, b: SocketAddr, ws: SocketAddr, variant: usize) -> String {
    // Every variant changes something real: a rule's response header, and
    // server b's weight, so pools and services are rebuilt.
    format!(
        "workers = 2\ndrain_timeout = \"10s\"\n\n\
         [[service]]\nname = \"web\"\nlisten = \"{listen}\"\npool = \"main\"\n\
         rules = [\n  {{ path_prefix = \"/ws\", pool = \"ws\" }},\n  \
         {{ path_prefix = \"/\", set_response_headers = {{ x-variant = \"{variant}\" }} }},\n]\n\n\
         [[pool]]\nname = \"main\"\nservers = [{{ address = \"{a}\", name = \"a\" }}, {{ address = \"{b}\", name = \"b\", weight = {} }}]\n\n\
         [[pool]]\nname = \"ws\"\nservers = [{{ address = \"{ws}\" }}]\n",
        1 + variant % 3
    )
}

#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    failed: AtomicU64,
}

impl Tally {
    fn record(&self, ok: bool, what: &str) {
        if ok {
            self.ok.fetch_add(1, Ordering::Relaxed);
        } else {
            eprintln!("failure: {what}");
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Requests on one keep-alive connection until `stop`; a connection the
/// proxy closes politely (`connection: close`) is replaced, anything else
/// is a failure.
fn keep_alive_load(addr: SocketAddr, stop: Arc<AtomicBool>, tally: Arc<Tally>) {
    let mut client = Client::connect(addr);
    for _ in 0..200_000 {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let response = client.request("GET", "/?size=512", &[]);
        tally.record(response.status == 200, &format!("keep-alive request got {}", response.status));
        if response.closes() {
            client = Client::connect(addr);
        }
    }
}

/// One request per new connection until `stop`.
fn new_connection_load(addr: SocketAddr, stop: Arc<AtomicBool>, tally: Arc<Tally>) {
    for _ in 0..200_000 {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let response = Client::connect(addr).request("GET", "/?size=128", &[("connection", "close")]);
        tally.record(response.status == 200, &format!("new-connection request got {}", response.status));
    }
}

/// A large download that reads half, holds the rest in flight (back-pressure
/// all the way to the origin) until `resume`, then finishes. Returns the bytes read.
fn held_download(addr: SocketAddr, size: usize, halfway: Arc<AtomicBool>, resume: Arc<AtomicBool>) -> usize {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
    write!(stream, "GET /?size={size} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").expect("send");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(stream.read(&mut byte).expect("read head"), 1, "download: closed in the head");
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 200"), "download: {}", String::from_utf8_lossy(&head));
    let mut total = 0;
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => return total,
            Ok(n) => total += n,
            Err(e) => panic!("download broken after {total} bytes: {e}"),
        }
        if total >= size / 2 && !halfway.swap(true, Ordering::Relaxed) {
            for _ in 0..6000 {
                if resume.load(Ordering::Relaxed) {
                    break;
                }
                thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

#[test]
fn twenty_reloads_under_load_fail_no_request() {
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    let ws = websocket_echo();
    let listen = proxy_addr();
    let file = write_temp("reload", "switchyard.toml", &config(listen, a.addr, b.addr, ws, 0));
    let proxy = Proxy::run_file_with(&file, listen, 2);

    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let mut load = Vec::new();
    for i in 0..4 {
        let (stop, tally) = (stop.clone(), tally.clone());
        load.push(thread::spawn(move || {
            if i % 2 == 0 {
                keep_alive_load(listen, stop, tally)
            } else {
                new_connection_load(listen, stop, tally)
            }
        }));
    }
    let size = 32 * 1024 * 1024;
    let (halfway, resume) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let download = {
        let (halfway, resume) = (halfway.clone(), resume.clone());
        thread::spawn(move || held_download(listen, size, halfway, resume))
    };
    wait_for("the download to be half-way", || halfway.load(Ordering::Relaxed).then_some(()));

    let (mut socket, _) = {
        let stream = TcpStream::connect(listen).expect("connect");
        tungstenite::client(format!("ws://{listen}/ws"), stream).expect("websocket handshake through the proxy")
    };
    let mut echoed = 0;
    for round in 1..=20 {
        std::fs::write(&file, config(listen, a.addr, b.addr, ws, round)).expect("rewrite config");
        proxy.reload(round);
        let text = format!("message {round}");
        socket.send(tungstenite::Message::text(text.clone())).expect("websocket send after a reload");
        let reply = socket.read().expect("websocket read after a reload");
        assert_eq!(reply.into_text().expect("text").as_str(), text);
        echoed += 1;
        // The new rules apply to new requests.
        let variant = Client::connect(listen).get("/");
        assert_eq!(variant.header("x-variant"), Some(round.to_string().as_str()), "reload {round} not in effect");
        thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    resume.store(true, Ordering::Relaxed);
    for t in load {
        t.join().expect("load thread");
    }
    assert_eq!(download.join().expect("download thread"), size, "the long download was cut");
    assert_eq!(echoed, 20);
    socket.close(None).ok();

    let failed = tally.failed.load(Ordering::Relaxed);
    let ok = tally.ok.load(Ordering::Relaxed);
    assert_eq!(failed, 0, "{failed} failed requests out of {}\n{}", ok + failed, proxy.log());
    assert!(ok > 1000, "the load generator barely ran ({ok} requests)");
    eprintln!("{ok} requests during 20 reloads, none failed");
    let log = proxy.log();
    assert_eq!(log.matches("configuration reloaded").count(), 20, "{log}");
    assert!(!log.contains("request failed"), "{log}");
}

#[test]
fn a_reload_that_removes_a_service_drains_it() {
    let origin = Origin::start("o");
    let (keep, gone) = (proxy_addr(), proxy_addr());
    let (both, only_keep) = common::keep_and_gone(keep, gone, origin.addr);
    let file = write_temp("reload-remove", "switchyard.toml", &both);
    let proxy = Proxy::run_file(&file, keep);

    let mut idle = Client::connect(gone);
    assert_eq!(idle.get("/").status, 200);
    // A slow request in flight on the service being removed.
    let in_flight = thread::spawn(move || Client::connect(gone).get("/?delay_ms=1500"));
    thread::sleep(Duration::from_millis(300));

    std::fs::write(&file, only_keep).expect("rewrite");
    proxy.reload(1);

    let finished = in_flight.join().expect("in-flight thread");
    assert_eq!(finished.status, 200, "the request in flight on the removed service must finish");
    assert!(finished.closes(), "and its connection must close after it");
    wait_for("the idle connection of the removed service to close", || idle.is_closed().then_some(()));
    wait_for("the removed listener to refuse connections", || TcpStream::connect(gone).is_err().then_some(()));
    assert_eq!(Client::connect(keep).get("/").status, 200, "the kept service still serves");
}

#[test]
fn an_invalid_reload_is_refused_and_traffic_continues() {
    let origin = Origin::start("o");
    let listen = proxy_addr();
    let good = simple_config(listen, &[origin.addr], "");
    let file = write_temp("reload-invalid", "switchyard.toml", &good);
    let proxy = Proxy::run_file(&file, listen);
    let mut client = Client::connect(listen);
    assert_eq!(client.get("/").status, 200);

    std::fs::write(&file, good.replace("pool = \"main\"\n", "pool = \"mian\"\n")).expect("rewrite");
    proxy.reload(1);
    let log = proxy.log();
    assert!(log.contains("error: pool `mian` is not defined") || log.contains("`mian`"), "{log}");
    assert!(log.contains("reload refused"), "{log}");
    assert_eq!(client.get("/").status, 200, "the open connection keeps working");
    assert_eq!(Client::connect(listen).get("/").status, 200, "new connections keep working");

    // A reload whose new listener cannot be bound changes nothing either.
    let blocker = TcpListener::bind("127.0.0.1:0").expect("bind");
    let taken = blocker.local_addr().expect("addr");
    let extra = format!("\n[[service]]\nname = \"second\"\nlisten = \"{taken}\"\npool = \"main\"\n");
    std::fs::write(&file, format!("{good}{extra}")).expect("rewrite");
    proxy.reload(2);
    assert!(proxy.log().contains(&format!("cannot listen on {taken}")), "{}", proxy.log());
    assert_eq!(client.get("/").status, 200);

    let started = Instant::now();
    std::fs::write(&file, &good).expect("rewrite");
    proxy.reload(3);
    assert!(started.elapsed() < PATIENCE);
    assert_eq!(proxy.log().matches("configuration reloaded").count(), 1);
    assert_eq!(client.get("/").status, 200);
}
