//! Counting everything that passes, as an operator reads it: a WebSocket
//! tunnel's megabytes in the stats while it is open and in its log line, a
//! `udp` and a `tcp` service's flows, connections and bytes, a bad request
//! logged with what it carried, the combined log's byte field summed by a
//! real log analyser (Debian's GoAccess), and the start-up banner's schemes.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

use common::*;

/// `GET /api/v1/stats` of `admin`: the named service's JSON.
fn service_stats(admin: SocketAddr, name: &str) -> serde_json::Value {
    let host = admin.to_string();
    let r = Client::connect(admin).request("GET", "/api/v1/stats", &[("host", &host), ("connection", "close")]);
    assert_eq!(r.status, 200, "{}", r.text());
    let all = r.json();
    let services = all["services"].as_array().cloned().unwrap_or_default();
    services.into_iter().find(|s| s["name"] == name).unwrap_or_else(|| panic!("no service {name} in {all}"))
}

/// One sample of `/metrics` (classic text format): its value, if present.
fn metric(admin: SocketAddr, sample: &str) -> Option<f64> {
    let host = admin.to_string();
    let r = Client::connect(admin).request("GET", "/metrics", &[("host", &host), ("connection", "close")]);
    let text = r.text();
    text.lines().find_map(|l| l.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
}

fn admin_table(admin: SocketAddr) -> String {
    format!("\n[admin]\nlisten = \"{admin}\"\n")
}

fn log_lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

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

#[test]
fn a_websocket_tunnel_counts_its_megabytes_while_open_and_once_in_its_log_line() {
    const MESSAGE: usize = 64 * 1024;
    const MESSAGES: usize = 48; // 3 MiB each way
    let ws = websocket_echo();
    let (listen, admin) = (proxy_addr(), proxy_addr());
    let log = temp_dir("ws-count").join("access.log");
    let toml = format!(
        "{}{}\n[access_log]\npath = \"{}\"\nformat = \"json\"\n",
        simple_config(listen, &[ws], ""),
        admin_table(admin),
        log.display()
    );
    let _proxy = Proxy::start(&toml, listen);
    wait_for("the admin listener", || TcpStream::connect(admin).ok());
    let stream = TcpStream::connect(listen).expect("connect");
    let (mut socket, _) =
        tungstenite::client(format!("ws://{listen}/ws"), stream).expect("handshake through the proxy");
    let payload = vec![0x5a_u8; MESSAGE];
    for _ in 0..MESSAGES {
        socket.send(tungstenite::Message::binary(payload.clone())).expect("send");
        let echo = socket.read().expect("echo");
        assert_eq!(echo.len(), MESSAGE);
    }
    let moved = (MESSAGE * MESSAGES) as u64;

    // While the tunnel is open: the stats and the metrics show its bytes.
    let open = wait_for("the tunnel's bytes in the stats while open", || {
        let s = service_stats(admin, "web");
        (s["bytes_in"].as_u64()? >= moved && s["bytes_out"].as_u64()? >= moved).then_some(s)
    });
    assert!(log_lines(&log).is_empty(), "no log line before the tunnel closes");
    let received = metric(admin, "switchyard_received_bytes_total{service=\"web\"}").expect("metric");
    assert!(received >= moved as f64, "metrics while open: {received}");
    let server = format!("{{pool=\"main\",server=\"{ws}\"}}");
    let server_sent = metric(admin, &format!("switchyard_server_sent_bytes_total{server}")).expect("server metric");
    assert!(server_sent >= moved as f64, "server metrics while open: {server_sent}");

    // Closed: one line with the whole exchange, and nothing counted twice.
    socket.close(None).expect("close");
    while socket.read().is_ok() {}
    drop(socket);
    let line = wait_for("the tunnel's log line", || log_lines(&log).pop());
    assert_eq!(line["status"], 101, "{line}");
    let (bytes_in, bytes_out) = (line["bytes_in"].as_u64().expect("in"), line["bytes_out"].as_u64().expect("out"));
    assert!(bytes_in >= moved && bytes_out >= moved, "{line}");
    assert!(line["body_bytes_out"].as_u64().expect("body") < bytes_out, "the 101 head is not body: {line}");
    let closed = wait_for("the stats to settle", || {
        let s = service_stats(admin, "web");
        (s["requests"].as_u64()? == 1).then_some(s)
    });
    assert_eq!((closed["bytes_in"].as_u64(), closed["bytes_out"].as_u64()), (Some(bytes_in), Some(bytes_out)));
    assert!(open["bytes_in"].as_u64() <= Some(bytes_in), "{open}");
}

/// A UDP server that answers every datagram with `ok:` and the payload.
fn udp_echo() -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let addr = socket.local_addr().expect("addr");
    thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = socket.recv_from(&mut buf) {
            let mut reply = b"ok:".to_vec();
            reply.extend_from_slice(&buf[..n]);
            let _ = socket.send_to(&reply, from);
        }
    });
    addr
}

/// A TCP server that echoes until the client closes.
fn tcp_echo() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            thread::spawn(move || {
                let mut stream = stream;
                let mut buf = [0u8; 4096];
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 || stream.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

#[test]
fn udp_and_tcp_services_count_flows_connections_datagrams_and_bytes() {
    let (udp_server, tcp_server) = (udp_echo(), tcp_echo());
    let (udp_listen, tcp_listen, admin) = (proxy_addr(), proxy_addr(), proxy_addr());
    let toml = format!(
        "workers = 1\n{}\n[[service]]\nname = \"dns\"\nmode = \"udp\"\nlisten = \"{udp_listen}\"\npool = \"u\"\n\n\
         [[service]]\nname = \"db\"\nmode = \"tcp\"\nlisten = \"{tcp_listen}\"\npool = \"t\"\n\n\
         [[pool]]\nname = \"u\"\nservers = [{{ address = \"{udp_server}\" }}]\n\n\
         [[pool]]\nname = \"t\"\nservers = [{{ address = \"{tcp_server}\" }}]\n",
        admin_table(admin)
    );
    // Ready when the admin listener is: a probe of the tcp listener would be a session.
    let _proxy = Proxy::start(&toml, admin);

    // 250 datagrams from two clients (two flows), every one answered.
    let (mut sent, mut got) = (0u64, 0u64);
    for client in 0..2 {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("client");
        socket.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        for i in 0..125 {
            let payload = format!("query {client}-{i}");
            socket.send_to(payload.as_bytes(), udp_listen).expect("send");
            let mut buf = [0u8; 2048];
            let (n, _) = socket.recv_from(&mut buf).expect("a reply through the udp service");
            (sent, got) = (sent + payload.len() as u64, got + n as u64);
        }
    }
    // The udp relay publishes its counters once a second.
    let dns = wait_for("the udp counters", || {
        let s = service_stats(admin, "dns");
        (s["datagrams"]["to_client"].as_u64()? == 250).then_some(s)
    });
    assert_eq!(dns["datagrams"]["to_server"], 250, "{dns}");
    assert_eq!((dns["requests"].as_u64(), dns["connections_total"].as_u64()), (Some(250), Some(2)), "{dns}");
    assert_eq!((dns["bytes_in"].as_u64(), dns["bytes_out"].as_u64()), (Some(sent), Some(got)), "{dns}");
    assert_eq!(metric(admin, "switchyard_requests_total{service=\"dns\"}"), Some(250.0));
    assert_eq!(metric(admin, "switchyard_received_bytes_total{service=\"dns\"}"), Some(sent as f64));
    assert_eq!(metric(admin, "switchyard_connections_total{service=\"dns\"}"), Some(2.0));

    // 21 tcp connections, one held open while the counters are read.
    let held = TcpStream::connect(tcp_listen).expect("connect");
    wait_for("the held connection counted", || {
        (service_stats(admin, "db")["connections_current"].as_u64()? == 1).then_some(())
    });
    let mut payload_bytes = 0u64;
    for i in 0..20 {
        let mut c = TcpStream::connect(tcp_listen).expect("connect");
        let line = format!("hello {i}\n");
        c.write_all(line.as_bytes()).expect("write");
        let mut back = vec![0u8; line.len()];
        c.read_exact(&mut back).expect("echo through the tcp service");
        payload_bytes += line.len() as u64;
    }
    drop(held);
    let deadline = std::time::Instant::now() + PATIENCE;
    let db = loop {
        let last = service_stats(admin, "db");
        if last["requests"] == 21 && last["connections_current"] == 0 {
            break last;
        }
        assert!(std::time::Instant::now() < deadline, "the tcp sessions never ended: {last}");
        thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(db["connections_total"], 21, "{db}");
    assert_eq!(db["responses"]["none"], 21, "a tcp session has no HTTP status: {db}");
    assert_eq!((db["bytes_in"].as_u64(), db["bytes_out"].as_u64()), (Some(payload_bytes), Some(payload_bytes)));
    assert!(db.get("datagrams").is_none(), "{db}");
    assert_eq!(metric(admin, "switchyard_connections_total{service=\"db\"}"), Some(21.0));
}

#[test]
fn a_bad_request_is_logged_with_what_it_carried() {
    let origin = Origin::start("o");
    let (listen, admin) = (proxy_addr(), proxy_addr());
    let log = temp_dir("bad-request").join("access.log");
    let extra = format!("\n[access_log]\npath = \"{}\"\nformat = \"json\"\n{}", log.display(), admin_table(admin));
    let _proxy = Proxy::start(&(simple_config(listen, &[origin.addr], "") + &extra), listen);
    // A good request first, so a stale line would show.
    let mut client = Client::connect(listen);
    assert_eq!(client.get("/first").status, 200);
    let bad = b"GET /a b\x01d HTTP/1.1\r\nhost: x\r\n\r\n";
    client.send(bad).expect("send");
    let response = client.read_response().expect("an answer");
    assert_eq!(response.status, 400);
    let line = wait_for("the bad request's line", || log_lines(&log).into_iter().find(|l| l["status"] == 400));
    assert_eq!(line["method"], "GET", "{line}");
    assert_eq!(line["uri"], "/a", "{line}");
    assert_eq!(line["version"], "-", "the third word is no version: {line}");
    assert_eq!(line["bytes_in"].as_u64(), Some(bad.len() as u64), "{line}");
    assert!(line["bytes_out"].as_u64() > line["body_bytes_out"].as_u64(), "{line}");
    assert_eq!(line["reason"], "bad-request", "{line}");
    let stats = service_stats(admin, "web");
    assert_eq!((stats["responses"]["2xx"].as_u64(), stats["responses"]["4xx"].as_u64()), (Some(1), Some(1)), "{stats}");
}

#[test]
fn goaccess_sums_the_bodies_sent_as_bandwidth() {
    let origin = Origin::start("o");
    let listen = proxy_addr();
    let log = temp_dir("goaccess").join("access.log");
    let extra = format!("\n[access_log]\npath = \"{}\"\nformat = \"combined\"\n", log.display());
    let _proxy = Proxy::start(&(simple_config(listen, &[origin.addr], "") + &extra), listen);
    let mut client = Client::connect(listen);
    let mut bodies = 0u64;
    for (i, size) in [0usize, 1, 128, 1000, 4096, 65_536, 100_000].iter().enumerate() {
        let r = client.get(&format!("/file{i}?size={size}"));
        assert_eq!((r.status, r.body.len()), (200, *size));
        bodies += r.body.len() as u64;
    }
    let missing = client.get("/gone?status=404&size=300");
    assert_eq!(missing.status, 404);
    bodies += missing.body.len() as u64;
    let lines = wait_for("eight log lines", || {
        let text = std::fs::read_to_string(&log).ok()?;
        (text.lines().count() == 8).then_some(text)
    });
    let out = Command::new("goaccess")
        .arg(&log)
        .args(["--log-format=COMBINED", "--no-global-config", "-o", "json"])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("no goaccess ({e}): apt-get install -y goaccess (scripts/test.sh does)"));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "goaccess: {said}{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_str(&said).expect("goaccess JSON");
    let general = &report["general"];
    assert_eq!(general["valid_requests"], 8, "{general}\n{lines}");
    assert_eq!(general["bandwidth"].as_u64(), Some(bodies), "{general}\n{lines}");
}

#[test]
fn the_banner_prints_each_listeners_real_scheme() {
    let pki = pki::Pki::new("banner CA");
    let (chain, key) = pki.leaf(&["localhost"]);
    let dir = temp_dir("banner");
    std::fs::write(dir.join("leaf.crt"), chain).expect("write chain");
    std::fs::write(dir.join("leaf.key"), key).expect("write key");
    let (http, https, tcp, udp) = (proxy_addr(), proxy_addr(), proxy_addr(), proxy_addr());
    let origin = dead_addr();
    let toml = format!(
        "workers = 1\n\n[[service]]\nname = \"plain\"\nlisten = \"{http}\"\npool = \"p\"\n\n\
         [[service]]\nname = \"secure\"\nmode = \"https\"\nlisten = \"{https}\"\npool = \"p\"\n\
         tls = {{ certificates = [{{ certificate = \"{crt}\", key = \"{key}\" }}] }}\n\n\
         [[service]]\nname = \"raw\"\nmode = \"tcp\"\nlisten = \"{tcp}\"\npool = \"p\"\n\n\
         [[service]]\nname = \"dgram\"\nmode = \"udp\"\nlisten = \"{udp}\"\npool = \"p\"\n\n\
         [[pool]]\nname = \"p\"\nservers = [{{ address = \"{origin}\" }}]\n",
        crt = dir.join("leaf.crt").display(),
        key = dir.join("leaf.key").display(),
    );
    let file = write_temp("banner", "switchyard.toml", &toml);
    let mut child = Command::new(binary())
        .args(["run", "-c"])
        .arg(&file)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn switchyard");
    let guard = ChildGuard(child.id());
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut banner = Vec::new();
    while banner.len() < 4 {
        match rx.recv_timeout(PATIENCE) {
            Ok(line) => banner.push(line),
            Err(_) => break,
        }
    }
    drop(guard);
    let _ = child.wait();
    for want in [
        format!("service `plain` listening on http://{http}/"),
        format!("service `secure` listening on https://{https}/"),
        format!("service `raw` listening on tcp://{tcp}"),
        format!("service `dgram` listening on udp://{udp}"),
    ] {
        assert!(banner.iter().any(|l| l.contains(&want)), "`{want}` not in {banner:#?}");
    }
}

/// Kills a child process by PID when dropped (also on a failed assertion).
struct ChildGuard(u32);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.0.to_string()).status();
    }
}
