//! End to end: a UDP pool's "send and expect" health probe takes a silent
//! server down (shown as "down" by the admin API, no new flows) and brings it
//! back once it answers again.

use crate::common;

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::*;

/// A UDP server that answers `ping` with `pong` and anything else with
/// `name:payload`, but only while `alive` is true.
fn udp_server(name: &'static str) -> (SocketAddr, Arc<AtomicBool>) {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let addr = socket.local_addr().expect("addr");
    let alive = Arc::new(AtomicBool::new(true));
    let flag = alive.clone();
    thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = socket.recv_from(&mut buf) {
            if !flag.load(Ordering::Relaxed) {
                continue;
            }
            let reply = if &buf[..n] == b"ping" {
                b"pong".to_vec()
            } else {
                let mut r = format!("{name}:").into_bytes();
                r.extend_from_slice(&buf[..n]);
                r
            };
            let _ = socket.send_to(&reply, from);
        }
    });
    (addr, alive)
}

fn ask(socket: &UdpSocket, to: SocketAddr, payload: &str) -> Option<String> {
    socket.set_read_timeout(Some(Duration::from_millis(500))).ok();
    socket.send_to(payload.as_bytes(), to).ok()?;
    let mut buf = [0u8; 2048];
    let (n, _) = socket.recv_from(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// The admin API's state of server `name` in pool `u`.
fn state(admin: SocketAddr, name: &str) -> Option<String> {
    let host = admin.to_string();
    let stats =
        Client::connect(admin).request("GET", "/api/v1/stats", &[("host", &host), ("connection", "close")]).json();
    let pool = stats["pools"].as_array()?.iter().find(|p| p["name"] == "u")?.clone();
    let server = pool["servers"].as_array()?.iter().find(|s| s["name"] == name)?.clone();
    server["state"].as_str().map(str::to_string)
}

#[test]
fn a_silent_udp_server_goes_down_and_comes_back() {
    let ((a, a_alive), (b, _b_alive)) = (udp_server("a"), udp_server("b"));
    let listen = SocketAddr::from(([127, 0, 0, 1], free_udp_port_on("127.0.0.1:0".parse().expect("address"))));
    let admin = proxy_addr();
    let config = format!(
        "workers = 1\n[admin]\nlisten = \"{admin}\"\n\n\
         [[service]]\nname = \"dns\"\nmode = \"udp\"\nlisten = \"{listen}\"\npool = \"u\"\n\n\
         [[pool]]\nname = \"u\"\n\
         servers = [ {{ name = \"a\", address = \"{a}\" }}, {{ name = \"b\", address = \"{b}\" }} ]\n\
         health_check = {{ type = \"udp\", send = \"ping\", expect = \"pong\", interval = \"200ms\", \
         timeout = \"100ms\", rise = 1, fall = 2 }}\n"
    );
    let proxy = Proxy::start(&config, admin);
    assert_eq!(state(admin, "a").as_deref(), Some("up"));

    a_alive.store(false, Ordering::Relaxed);
    wait_for("server a to be reported down", || (state(admin, "a")? == "down").then_some(()));
    assert_eq!(state(admin, "b").as_deref(), Some("up"));
    // The state changes before the log line is written: wait for it.
    wait_for("the transition to be logged", || proxy.log().contains("health check failed").then_some(()));
    for client in 0..6 {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("client");
        let reply = wait_for("a reply through the balancer", || ask(&socket, listen, "hello"));
        assert_eq!(reply, "b:hello", "client {client} went to the healthy server");
    }

    a_alive.store(true, Ordering::Relaxed);
    wait_for("server a to be reported up", || (state(admin, "a")? == "up").then_some(()));
    wait_for("a new client to reach server a again", || {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("client");
        (ask(&socket, listen, "hello")? == "a:hello").then_some(())
    });
}
