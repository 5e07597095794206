//! Layer 4 end to end: TCP relay (large transfer, half-close, failover,
//! connection limits), UDP flows, TLS pass-through by SNI, PROXY protocol in
//! both directions, IPv6.

use crate::common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::*;

/// A TCP server on `bind` that runs `f` on every connection (one thread each).
fn tcp_server(bind: &str, f: fn(TcpStream)) -> SocketAddr {
    let listener = TcpListener::bind(bind).expect("bind");
    let addr = listener.local_addr().expect("addr");
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            thread::spawn(move || f(stream));
        }
    });
    addr
}

fn echo(mut s: TcpStream) {
    let mut buf = [0u8; 65536];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 || s.write_all(&buf[..n]).is_err() {
            break;
        }
    }
}

/// Reads everything, then answers with 8 MiB derived from what it read.
fn late_reply(mut s: TcpStream) {
    let mut got = Vec::new();
    if s.read_to_end(&mut got).is_err() {
        return;
    }
    let reply = pattern(8 << 20, got.len() as u64);
    let _ = s.write_all(&reply);
}

/// Answers with the PROXY header it received (up to the first CRLF or the v2 length).
fn proxy_reporter(mut s: TcpStream) {
    let mut buf = vec![0u8; 4096];
    let mut len = 0;
    while len < 16 {
        match s.read(&mut buf[len..]) {
            Ok(0) | Err(_) => return,
            Ok(n) => len += n,
        }
    }
    let _ = s.write_all(&buf[..len]);
}

fn pattern(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn digest(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

fn tcp_service(listen: SocketAddr, servers: &[SocketAddr], service_extra: &str, pool_extra: &str) -> String {
    let servers: Vec<String> = servers.iter().map(|a| format!("{{ address = \"{a}\" }}")).collect();
    format!(
        "workers = 2\n\n[[service]]\nname = \"l4\"\nmode = \"tcp\"\nlisten = \"{listen}\"\npool = \"p\"\n{service_extra}\n\n\
         [[pool]]\nname = \"p\"\n{pool_extra}\nservers = [{}]\n",
        servers.join(", ")
    )
}

#[test]
fn a_large_transfer_is_relayed_byte_exactly_and_a_refusing_server_is_skipped() {
    let server = tcp_server("127.0.0.1:0", echo);
    let listen = proxy_addr();
    let _proxy = Proxy::start(&tcp_service(listen, &[dead_addr(), server], "", ""), listen);
    for round in 0..3 {
        let data = Arc::new(pattern(16 << 20, round));
        let mut stream = TcpStream::connect(listen).expect("connect");
        stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
        let writer = {
            let (mut w, data) = (stream.try_clone().expect("clone"), data.clone());
            thread::spawn(move || {
                w.write_all(&data).expect("send");
                w.shutdown(Shutdown::Write).expect("half-close");
            })
        };
        let mut back = Vec::new();
        stream.read_to_end(&mut back).expect("read echo");
        writer.join().expect("writer");
        assert_eq!(back.len(), data.len(), "round {round}: every byte came back");
        assert_eq!(digest(&back), digest(&data), "round {round}: byte-exact");
    }
}

#[test]
fn half_close_lets_the_server_answer_after_the_client_finished_sending() {
    let server = tcp_server("127.0.0.1:0", late_reply);
    let listen = proxy_addr();
    let _proxy = Proxy::start(&tcp_service(listen, &[server], "zero_copy = false", ""), listen);
    let mut stream = TcpStream::connect(listen).expect("connect");
    stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
    stream.write_all(&pattern(1 << 20, 1)).expect("send");
    stream.shutdown(Shutdown::Write).expect("half-close");
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply).expect("reply after half-close");
    assert_eq!(digest(&reply), digest(&pattern(8 << 20, 1 << 20)));
}

/// The client's first bytes are read before the server's connect and sent
/// with it (that send confirms the connect): they arrive whole when the
/// first server tried refuses, also when the client half-closes at once; a
/// client that waits for its server to speak first is served past a refusing
/// server too.
#[test]
fn first_bytes_go_out_with_the_connect_even_past_a_refusing_server() {
    let (echoing, greeting) = (tcp_server("127.0.0.1:0", echo), tcp_named(b'g'));
    let (listen, listen_quiet) = (proxy_addr(), proxy_addr());
    let config = tcp_service(listen, &[dead_addr(), echoing], "", "")
        + &format!("\n[[service]]\nname = \"quiet\"\nmode = \"tcp\"\nlisten = \"{listen_quiet}\"\npool = \"q\"\n")
        + &format!(
            "\n[[pool]]\nname = \"q\"\nservers = [{{ address = \"{}\" }}, {{ address = \"{greeting}\" }}]\n",
            dead_addr()
        );
    let _proxy = Proxy::start(&config, listen);
    for round in 0..4u64 {
        let msg = pattern(100 + round as usize, round);
        let mut stream = TcpStream::connect(listen).expect("connect");
        stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
        stream.write_all(&msg).expect("send");
        if round % 2 == 0 {
            stream.shutdown(Shutdown::Write).expect("half-close");
        }
        let mut back = vec![0; msg.len()];
        stream.read_exact(&mut back).expect("echo");
        assert_eq!(back, msg, "round {round}: the first bytes came back whole");

        let mut quiet = TcpStream::connect(listen_quiet).expect("connect");
        quiet.set_read_timeout(Some(PATIENCE)).expect("timeout");
        let mut name = [0u8; 1];
        quiet.read_exact(&mut name).expect("the server speaks first");
        assert_eq!(name[0], b'g', "round {round}");
    }
}

#[test]
fn a_full_service_refuses_or_makes_new_connections_wait() {
    let server = tcp_server("127.0.0.1:0", echo);
    let (refuse, wait) = (proxy_addr(), proxy_addr());
    let config = tcp_service(refuse, &[server], "max_connections = 2\nwhen_full = \"refuse\"", "")
        + &format!(
            "\n[[service]]\nname = \"waits\"\nmode = \"tcp\"\nlisten = \"{wait}\"\npool = \"p\"\nmax_connections = 1\n"
        );
    let _proxy = Proxy::start(&config.replace("workers = 2", "workers = 1"), refuse);
    let ping = |s: &mut TcpStream| -> bool {
        s.set_read_timeout(Some(Duration::from_secs(2))).ok();
        let mut b = [0u8; 4];
        s.write_all(b"ping").is_ok() && s.read_exact(&mut b).is_ok() && &b == b"ping"
    };
    // The harness's own readiness probe holds a slot until its relay ends.
    let mut held = wait_for("two connections to be served", || {
        let mut two: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(refuse).expect("connect")).collect();
        two.iter_mut().all(&ping).then_some(two)
    });
    let mut third = TcpStream::connect(refuse).expect("the kernel accepts");
    assert!(!ping(&mut third), "the third connection is refused (closed)");
    drop(held.pop());
    wait_for("a slot to free", || ping(&mut TcpStream::connect(refuse).expect("connect")).then_some(()));

    let first = wait_for("the waiting service to serve one", || {
        let mut one = TcpStream::connect(wait).expect("connect");
        ping(&mut one).then_some(one)
    });
    let mut second = TcpStream::connect(wait).expect("connect: it waits in the backlog");
    second.set_read_timeout(Some(Duration::from_millis(500))).ok();
    second.write_all(b"ping").expect("send");
    let mut b = [0u8; 4];
    assert!(second.read_exact(&mut b).is_err(), "the waiting connection is not served yet");
    drop(first);
    second.set_read_timeout(Some(PATIENCE)).ok();
    second.read_exact(&mut b).expect("served once the first one closed");
    assert_eq!(&b, b"ping");
}

/// A TCP server that greets every connection with its one-byte name.
fn tcp_named(name: u8) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let _ = stream.write_all(&[name]);
        }
    });
    addr
}

/// The server a new connection from `source` lands on.
fn greeting_from(source: [u8; 4], to: SocketAddr) -> u8 {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    socket.bind(&SocketAddr::from((source, 0)).into()).expect("bind the client's source address");
    socket.connect(&to.into()).expect("connect");
    let mut stream = TcpStream::from(socket);
    stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
    let mut name = [0u8; 1];
    stream.read_exact(&mut name).expect("greeting through the relay");
    name[0]
}

#[test]
fn source_persistence_keeps_each_client_address_on_one_server() {
    let servers = [tcp_named(b'a'), tcp_named(b'b'), tcp_named(b'c')];
    let (sticky, plain) = (proxy_addr(), proxy_addr());
    let list: Vec<String> = servers.iter().map(|a| format!("{{ address = \"{a}\" }}")).collect();
    let list = list.join(", ");
    let config = format!(
        "workers = 1\n\n[[service]]\nname = \"sticky\"\nmode = \"tcp\"\nlisten = \"{sticky}\"\npool = \"s\"\n\n\
         [[service]]\nname = \"plain\"\nmode = \"tcp\"\nlisten = \"{plain}\"\npool = \"p\"\n\n\
         [[pool]]\nname = \"s\"\npersistence = {{ source = true, capacity = 100 }}\nservers = [{list}]\n\n\
         [[pool]]\nname = \"p\"\nservers = [{list}]\n"
    );
    let _proxy = Proxy::start(&config, sticky);
    // Without persistence, round robin spreads one address's connections.
    let spread: std::collections::HashSet<u8> = (0..6).map(|_| greeting_from([127, 0, 0, 1], plain)).collect();
    assert!(spread.len() > 1, "round robin without persistence spreads: {spread:?}");
    // With it, every connection of an address goes where its first one went.
    let mut firsts = std::collections::HashSet::new();
    for source in [[127, 0, 0, 2], [127, 0, 0, 3], [127, 0, 0, 4]] {
        let first = greeting_from(source, sticky);
        for _ in 0..8 {
            assert_eq!(greeting_from(source, sticky), first, "{source:?} sticks to server {}", first as char);
        }
        firsts.insert(first);
    }
    assert!(firsts.len() > 1, "new addresses are still balanced: {firsts:?}");
}

/// A UDP server that answers every datagram with `name:payload`.
fn udp_named(name: &'static str) -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let addr = socket.local_addr().expect("addr");
    thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = socket.recv_from(&mut buf) {
            let mut reply = format!("{name}:").into_bytes();
            reply.extend_from_slice(&buf[..n]);
            let _ = socket.send_to(&reply, from);
        }
    });
    addr
}

fn udp_config(listen: SocketAddr, servers: &[SocketAddr], extra: &str) -> String {
    let servers: Vec<String> = servers.iter().map(|a| format!("{{ address = \"{a}\" }}")).collect();
    format!(
        "workers = 2\n\n[[service]]\nname = \"dns\"\nmode = \"udp\"\nlisten = \"{listen}\"\npool = \"u\"\n{extra}\n\n\
         [[pool]]\nname = \"u\"\nservers = [{}]\n\n\
         [[service]]\nname = \"probe\"\nlisten = \"{}\"\npool = \"u\"\n",
        servers.join(", "),
        proxy_addr()
    )
}

/// Starts a `udp_config`: the proxy is ready once its HTTP probe service (the
/// last `listen` of the file) accepts connections.
fn start_udp(config: &str) -> Proxy {
    let probe: SocketAddr = config
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("listen = \"")?.strip_suffix('"')?.parse().ok())
        .expect("probe");
    Proxy::start(config, probe)
}

fn ask(socket: &UdpSocket, to: SocketAddr, payload: &str) -> Option<String> {
    socket.set_read_timeout(Some(Duration::from_secs(2))).ok();
    socket.send_to(payload.as_bytes(), to).ok()?;
    let mut buf = [0u8; 2048];
    let (n, _) = socket.recv_from(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

#[test]
fn udp_flows_are_sticky_and_spread_over_the_servers() {
    let (a, b) = (udp_named("a"), udp_named("b"));
    let listen = SocketAddr::from(([127, 0, 0, 1], free_udp_port()));
    let config = udp_config(listen, &[a, b], "");
    let _proxy = start_udp(&config);
    let mut seen = std::collections::HashSet::new();
    for client in 0..6 {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("client");
        let first = wait_for("a reply through the balancer", || ask(&socket, listen, "hello"));
        let server = first.split(':').next().unwrap_or_default().to_string();
        for i in 0..20 {
            let reply = ask(&socket, listen, &format!("m{i}")).expect("reply");
            assert_eq!(reply, format!("{server}:m{i}"), "client {client} stays on server {server}");
        }
        seen.insert(server);
    }
    assert_eq!(seen.len(), 2, "both servers got flows: {seen:?}");
}

#[test]
fn a_full_udp_flow_table_refuses_new_clients_only() {
    let a = udp_named("a");
    let listen = SocketAddr::from(([127, 0, 0, 1], free_udp_port()));
    let admin = proxy_addr();
    let config = udp_config(listen, &[a], "udp = { max_flows = 1, flow_idle = \"30s\" }")
        .replace("workers = 2", &format!("workers = 1\n[admin]\nlisten = \"{admin}\"\n"));
    let _proxy = start_udp(&config);
    let first = UdpSocket::bind("127.0.0.1:0").expect("client");
    wait_for("the first flow", || ask(&first, listen, "x"));
    let second = UdpSocket::bind("127.0.0.1:0").expect("client");
    assert_eq!(ask(&second, listen, "y"), None, "the table is full: a new client gets nothing");
    assert_eq!(ask(&first, listen, "z").as_deref(), Some("a:z"), "the existing flow keeps working");
    // The refusal shows in the metrics (published about once a second).
    wait_for("the refused flow in the metrics", || {
        let host = admin.to_string();
        let body =
            Client::connect(admin).request("GET", "/metrics", &[("host", &host), ("connection", "close")]).text();
        body.contains("switchyard_udp_flows_total{service=\"dns\",event=\"refused\"} 1").then_some(())
    });
}

fn free_udp_port() -> u16 {
    common::free_udp_port_on("127.0.0.1:0".parse().expect("address"))
}

#[test]
fn proxy_protocol_is_accepted_from_trusted_sources_and_sent_to_servers() {
    let reporter = tcp_server("127.0.0.1:0", proxy_reporter);
    let listen = proxy_addr();
    let _proxy = Proxy::start(
        &tcp_service(listen, &[reporter], "accept_proxy = [\"127.0.0.0/8\"]", "send_proxy = \"v1\""),
        listen,
    );
    let mut stream = TcpStream::connect(listen).expect("connect");
    stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
    // The client (a trusted front proxy) says the real client is 203.0.113.7 (v2 header).
    let mut v2 = b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c".to_vec();
    v2.extend_from_slice(&[203, 0, 113, 7, 127, 0, 0, 1, 0x30, 0x39, 0x00, 0x50]);
    stream.write_all(&v2).expect("send PROXY v2");
    let mut got = vec![0u8; 256];
    let n = stream.read(&mut got).expect("reply");
    let line = String::from_utf8_lossy(&got[..n]).to_string();
    assert!(line.starts_with("PROXY TCP4 203.0.113.7 127.0.0.1 12345 "), "the server got the client's address: {line}");

    // An untrusted source may not claim an address: its bytes go through as data.
    let origin = Origin::start("o");
    let http = proxy_addr();
    let _web = Proxy::start(&simple_config(http, &[origin.addr], "accept_proxy = [\"192.0.2.0/24\"]"), http);
    let mut c = TcpStream::connect(http).expect("connect");
    c.write_all(b"PROXY TCP4 198.51.100.1 127.0.0.1 1 2\r\nGET / HTTP/1.1\r\nHost: t\r\n\r\n").expect("send");
    let mut answer = [0u8; 12];
    c.set_read_timeout(Some(PATIENCE)).ok();
    c.read_exact(&mut answer).expect("an answer");
    assert_eq!(&answer, b"HTTP/1.1 400", "an untrusted PROXY line is a bad request");
}

/// An HTTP server answering every request with its own request head as the body.
fn head_echo(mut s: TcpStream) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let _ = write!(s, "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n", head.len());
    let _ = s.write_all(&head);
}

#[test]
fn proxy_protocol_feeds_the_http_client_address() {
    let server = tcp_server("127.0.0.1:0", head_echo);
    let http = proxy_addr();
    let _web = Proxy::start(&simple_config(http, &[server], "accept_proxy = [\"127.0.0.1/32\"]"), http);
    let mut c = Client::connect(http);
    c.send(b"PROXY TCP4 198.51.100.9 127.0.0.1 5555 80\r\n").expect("send");
    let response = c.request("GET", "/", &[]);
    assert_eq!(response.status, 200);
    assert!(response.text().contains("x-forwarded-for: 198.51.100.9"), "{}", response.text());
}

#[test]
fn ipv6_listeners_and_servers_mix_with_ipv4() {
    let v4_server = tcp_server("127.0.0.1:0", echo);
    let Ok(v6_listener) = TcpListener::bind("[::1]:0") else {
        eprintln!("no IPv6 loopback on this machine");
        return;
    };
    let v6_server = v6_listener.local_addr().expect("addr");
    thread::spawn(move || {
        for s in v6_listener.incoming().flatten() {
            thread::spawn(move || echo(s));
        }
    });
    let v6_listen = SocketAddr::new("::1".parse().expect("ip"), free_port_on("[::1]:0".parse().expect("addr")));
    let v4_listen = proxy_addr();
    let config = tcp_service(v6_listen, &[v4_server], "", "")
        + &format!("\n[[service]]\nname = \"to6\"\nmode = \"tcp\"\nlisten = \"{v4_listen}\"\npool = \"six\"\n\n[[pool]]\nname = \"six\"\nservers = [{{ address = \"{v6_server}\" }}]\n");
    let _proxy = Proxy::start(&config, v4_listen);
    for listen in [v6_listen, v4_listen] {
        let mut s = TcpStream::connect(listen).expect("connect");
        s.set_read_timeout(Some(PATIENCE)).ok();
        s.write_all(b"across families").expect("send");
        let mut b = [0u8; 15];
        s.read_exact(&mut b).expect("echo");
        assert_eq!(&b, b"across families", "via {listen}");
    }
}

/// A TLS server (rustls) for `names` answering every connection with `reply`.
fn tls_server(names: &[&str], reply: &'static str) -> (SocketAddr, rustls::pki_types::CertificateDer<'static>) {
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let cert = rcgen::generate_simple_self_signed(names).expect("certificate");
    let der = cert.cert.der().clone();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.signing_key.serialize_der()));
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![der.clone()], key)
        .expect("server config");
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let config = config.clone();
            thread::spawn(move || {
                let Ok(conn) = rustls::ServerConnection::new(config) else { return };
                let mut tls = rustls::StreamOwned::new(conn, stream);
                let mut line = [0u8; 5];
                if tls.read_exact(&mut line).is_ok() {
                    let _ = tls.write_all(reply.as_bytes());
                    let _ = tls.flush();
                }
            });
        }
    });
    (addr, der)
}

fn tls_ask(proxy: SocketAddr, name: &str, roots: &[rustls::pki_types::CertificateDer<'static>]) -> Option<String> {
    let mut store = rustls::RootCertStore::empty();
    for r in roots {
        store.add(r.clone()).ok()?;
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(store)
        .with_no_client_auth();
    let server_name = rustls::pki_types::ServerName::try_from(name.to_string()).ok()?;
    let conn = rustls::ClientConnection::new(Arc::new(config), server_name).ok()?;
    let stream = TcpStream::connect(proxy).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut tls = rustls::StreamOwned::new(conn, stream);
    tls.write_all(b"hello").ok()?;
    let mut reply = String::new();
    tls.read_to_string(&mut reply).ok();
    (!reply.is_empty()).then_some(reply)
}

#[test]
fn tls_passthrough_routes_by_server_name_without_terminating_tls() {
    let (a, cert_a) = tls_server(&["shop.test"], "I am A");
    let (b, cert_b) = tls_server(&["*.api.test"], "I am B");
    let listen = proxy_addr();
    let config = format!(
        "workers = 2\n\n[[service]]\nname = \"tls\"\nmode = \"tls-passthrough\"\nlisten = \"{listen}\"\n\
         sni = [\n  {{ name = \"shop.test\", pool = \"a\" }},\n  {{ name = \"*.api.test\", pool = \"b\" }},\n]\n\n\
         [[pool]]\nname = \"a\"\nservers = [{{ address = \"{a}\" }}]\n\n[[pool]]\nname = \"b\"\nservers = [{{ address = \"{b}\" }}]\n"
    );
    let _proxy = Proxy::start(&config, listen);
    let roots = [cert_a, cert_b];
    // The certificates verify end to end: the session is the server's, not the proxy's.
    assert_eq!(tls_ask(listen, "shop.test", &roots).as_deref(), Some("I am A"));
    assert_eq!(tls_ask(listen, "v1.api.test", &roots).as_deref(), Some("I am B"));
    assert_eq!(tls_ask(listen, "other.test", &roots), None, "no route and no default pool: closed");
    // Not TLS at all: closed, and the service keeps serving.
    let mut plain = TcpStream::connect(listen).expect("connect");
    plain.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").expect("send");
    plain.set_read_timeout(Some(PATIENCE)).ok();
    let mut b = [0u8; 1];
    assert!(matches!(plain.read(&mut b), Ok(0) | Err(_)), "plain text is refused");
    assert_eq!(tls_ask(listen, "shop.test", &roots).as_deref(), Some("I am A"));
}

/// A server that reads the PROXY line and one request head, and answers with the PROXY
/// line (without its CRLF) as the body.
fn proxy_line_server() -> SocketAddr {
    tcp_server("127.0.0.1:0", |mut s| {
        let mut got = Vec::new();
        let mut byte = [0u8; 1];
        while !got.ends_with(b"\r\n\r\n") {
            match s.read(&mut byte) {
                Ok(1) => got.push(byte[0]),
                _ => return,
            }
        }
        let line = got.split(|&b| b == b'\r').next().unwrap_or_default().to_vec();
        let _ = write!(s, "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", line.len());
        let _ = s.write_all(&line);
    })
}

#[test]
fn an_http_pool_sends_the_proxy_header_on_private_connections() {
    let server = proxy_line_server();
    let http = proxy_addr();
    let config = simple_config(http, &[server], "")
        .replace("[[pool]]\nname = \"main\"\n", "[[pool]]\nname = \"main\"\nsend_proxy = \"v1\"\n");
    let _web = Proxy::start(&config, http);
    let mut c = Client::connect(http);
    for _ in 0..2 {
        let r = c.get("/");
        assert!(r.text().starts_with("PROXY TCP4 127.0.0.1 127.0.0.1 "), "{}", r.text());
    }
}

/// The PROXY line a `send_proxy` pool sends for a client of an `https` service names the
/// TLS listener as destination, for HTTP/1.1 and for HTTP/2 (whose streams run on in-memory
/// pipes that must carry the connection's addresses).
#[test]
fn an_https_service_sends_the_listener_address_in_the_proxy_header() {
    let server = proxy_line_server();
    let pki = common::pki::Pki::new("proxy-header CA");
    let (chain, key) = pki.leaf(&["localhost"]);
    let dir = temp_dir("https-proxy-header");
    for (file, text) in [("ca.pem", &pki.ca), ("site.crt", &chain), ("site.key", &key)] {
        std::fs::write(dir.join(file), text).expect("write PEM");
    }
    let listen = proxy_addr();
    let tls = format!(
        "mode = \"https\"\ntls = {{ certificate = \"{}\", key = \"{}\" }}",
        dir.join("site.crt").display(),
        dir.join("site.key").display()
    );
    let config = simple_config(listen, &[server], &tls)
        .replace("[[pool]]\nname = \"main\"\n", "[[pool]]\nname = \"main\"\nsend_proxy = \"v1\"\n");
    let _proxy = Proxy::start(&config, listen);
    for version in ["--http1.1", "--http2"] {
        let out = std::process::Command::new("curl")
            .args(["-sS", "--max-time", "10", version, "--cacert"])
            .arg(dir.join("ca.pem"))
            .args(["--resolve", &format!("localhost:{}:127.0.0.1", listen.port())])
            .arg(format!("https://localhost:{}/", listen.port()))
            .output()
            .expect("run curl (scripts/test.sh installs it)");
        let body = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "curl {version}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(body.starts_with("PROXY TCP4 127.0.0.1 127.0.0.1 "), "{version}: {body}");
        assert!(body.ends_with(&format!(" {}", listen.port())), "{version}: destination port in {body}");
    }
}

#[test]
fn ipv6_http_and_udp_listeners_reach_ipv4_servers() {
    if TcpListener::bind("[::1]:0").is_err() {
        eprintln!("no IPv6 loopback on this machine");
        return;
    }
    let origin = Origin::start("v4-origin");
    let udp = udp_named("v4");
    let http = SocketAddr::new("::1".parse().expect("ip"), free_port_on("[::1]:0".parse().expect("addr")));
    let udp_listen = SocketAddr::new("::1".parse().expect("ip"), free_udp_port_v6());
    let config = simple_config(http, &[origin.addr], "")
        + &format!("\n[[service]]\nname = \"u6\"\nmode = \"udp\"\nlisten = \"{udp_listen}\"\npool = \"u\"\n\n[[pool]]\nname = \"u\"\nservers = [{{ address = \"{udp}\" }}]\n");
    let _proxy = Proxy::start(&config, http);
    let r = Client::connect(http).get("/");
    assert_eq!((r.status, r.origin()), (200, "v4-origin"));
    let client = UdpSocket::bind("[::1]:0").expect("udp v6 client");
    let reply = wait_for("a UDP reply over IPv6", || ask(&client, udp_listen, "six"));
    assert_eq!(reply, "v4:six");
}

fn free_udp_port_v6() -> u16 {
    common::free_udp_port_on("[::1]:0".parse().expect("address"))
}

/// Echoes `ask` on a connection through the proxy and checks it comes back.
fn echoed(stream: &mut TcpStream, ask: &[u8]) {
    stream.write_all(ask).expect("send");
    let mut back = vec![0; ask.len()];
    stream.read_exact(&mut back).expect("echo");
    assert_eq!(back, ask);
}

/// Whether the proxy closed `stream` (EOF or reset) within PATIENCE.
fn closed_by_proxy(stream: &mut TcpStream) -> bool {
    use std::io::ErrorKind::{TimedOut, WouldBlock};
    stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
    match stream.read(&mut [0; 16]) {
        Ok(n) => n == 0,
        Err(e) => !matches!(e.kind(), WouldBlock | TimedOut),
    }
}

/// A relay used within its `idle_timeout` goes on; one left alone for it is
/// closed. Then a drain closes quiet relays at once, long before their idle
/// timeout and the drain timeout (both 600 s: a drain that waited for them
/// would outlast each read's PATIENCE), and the process exits.
#[test]
fn idle_relays_close_at_their_idle_timeout_and_at_a_drain() {
    let server = tcp_server("127.0.0.1:0", echo);
    let listen = proxy_addr();
    let mut proxy = Proxy::start(&tcp_service(listen, &[server], "idle_timeout = \"2s\"", ""), listen);
    let mut stream = TcpStream::connect(listen).expect("connect");
    stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
    echoed(&mut stream, b"first");
    thread::sleep(Duration::from_millis(700));
    echoed(&mut stream, b"used again within idle_timeout");
    assert!(closed_by_proxy(&mut stream), "the idle relay is closed at idle_timeout");

    drop(proxy);
    let config = format!("drain_timeout = \"600s\"\n{}", tcp_service(listen, &[server], "idle_timeout = \"600s\"", ""));
    proxy = Proxy::start(&config, listen);
    let mut quiet: Vec<TcpStream> = (0..40).map(|_| TcpStream::connect(listen).expect("connect")).collect();
    for (i, s) in quiet.iter_mut().enumerate() {
        s.set_read_timeout(Some(PATIENCE)).expect("timeout");
        echoed(s, format!("connection {i}").as_bytes());
    }
    proxy.sigterm();
    for (i, s) in quiet.iter_mut().enumerate() {
        assert!(closed_by_proxy(s), "quiet relay {i} must be closed by the drain");
    }
    let status = proxy.wait_exit(PATIENCE).expect("switchyard exits after the drain");
    assert!(status.success(), "exit status {status}:\n{}", proxy.log());
}
