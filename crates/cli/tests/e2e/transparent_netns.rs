//! Transparent mode end to end, in network namespaces this test creates and
//! removes: a client (10.79.1.2), a balancer with one leg towards the client
//! and one towards the servers (10.79.1.1 / 10.79.2.1 and 10.79.2.5), and a
//! server namespace (10.79.2.2) whose default route goes back through the
//! balancer. The balancer gets the routing recipe of
//! docs/high-availability.md (an nftables socket match marking replies to
//! transparent sockets, `ip rule fwmark 1 lookup 100`, a local route).
//!
//! The servers are Python's `http.server` and a plain TCP server, both
//! answering with the peer address their own socket saw: no forwarding
//! header or PROXY protocol is involved. Each mode has its own service:
//! transparent (`source = "client"`) for `http` and `tcp`, source NAT beside
//! it, and a fixed source address.
//!
//! Skipped, with a message, when not root or when `ip netns`, nft, curl or
//! python3 is missing. Guards remove every namespace and stop every process,
//! also when an assertion fails.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::netns::*;
use common::*;

const CLIENT: &str = "10.79.1.2";
const LB_FRONT: &str = "10.79.1.1";
const LB_BACK: &str = "10.79.2.1";
const FIXED: &str = "10.79.2.5";
const SERVER: &str = "10.79.2.2";

/// Answers every HTTP request and every TCP connection with the peer
/// address of its own socket.
const SERVERS: &str = r#"
import http.server, socketserver, sys, threading
class Http(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = self.client_address[0].encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
class Tcp(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.sendall(self.client_address[0].encode())
socketserver.ThreadingTCPServer.allow_reuse_address = True
http.server.ThreadingHTTPServer.allow_reuse_address = True
tcp = socketserver.ThreadingTCPServer((sys.argv[1], 8081), Tcp)
threading.Thread(target=tcp.serve_forever, daemon=True).start()
print("ready", flush=True)
http.server.ThreadingHTTPServer((sys.argv[1], 8080), Http).serve_forever()
"#;

/// The balancer's policy routing for transparent mode (the documented recipe).
const NFT: &str = "table ip switchyard_transparent {
  chain prerouting {
    type filter hook prerouting priority mangle; policy accept;
    meta l4proto tcp socket transparent 1 meta mark set 1 accept
  }
}
";

fn config() -> String {
    let pool = |name: &str, port: u16, source: &str| {
        format!("[[pool]]\nname = \"{name}\"\nservers = [ {{ address = \"{SERVER}:{port}\" }} ]\n{source}\n")
    };
    let service = |name: &str, mode: &str, port: u16, pool: &str| {
        format!(
            "[[service]]\nname = \"{name}\"\nmode = \"{mode}\"\nlisten = \"{LB_FRONT}:{port}\"\npool = \"{pool}\"\n\n"
        )
    };
    [
        "workers = 1\n\n".to_string(),
        service("http-transparent", "http", 80, "transparent"),
        service("http-nat", "http", 81, "nat"),
        service("http-fixed", "http", 82, "fixed"),
        service("tcp-transparent", "tcp", 90, "transparent-tcp"),
        service("tcp-nat", "tcp", 91, "nat-tcp"),
        pool("transparent", 8080, "source = \"client\""),
        pool("nat", 8080, ""),
        pool("fixed", 8080, &format!("source = \"{FIXED}\"")),
        pool("transparent-tcp", 8081, "source = \"client\""),
        pool("nat-tcp", 8081, ""),
    ]
    .concat()
}

/// Runs `args` in namespace `ns`; its stdout, or "" when it fails.
fn run_in(ns: &str, args: &[&str]) -> String {
    let out = Command::new("ip").args(["netns", "exec", ns]).args(args).output().expect("ip netns exec");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Two HTTP requests on one client connection (curl reuses it): both bodies.
fn http_twice(ns: &str, port: u16) -> String {
    let url = format!("http://{LB_FRONT}:{port}/");
    run_in(ns, &["curl", "-s", "--max-time", "5", "-w", "\n", &url, &url])
}

/// What the TCP server wrote back on one connection through the balancer.
fn tcp_once(ns: &str, port: u16) -> String {
    let script = format!(
        "import socket\ns = socket.create_connection(('{LB_FRONT}', {port}), timeout=5)\nd = b''\nwhile True:\n    \
         c = s.recv(100)\n    if not c: break\n    d += c\nprint(d.decode())"
    );
    run_in(ns, &["python3", "-c", &script]).trim().to_string()
}

fn veth(net: &Net, a: (&str, &str, &str), b: (&str, &str, &str)) {
    let (ns_a, ns_b) = (net.name(a.0), net.name(b.0));
    sh(&["ip", "-n", &ns_a, "link", "add", a.1, "type", "veth", "peer", "name", b.1, "netns", &ns_b]);
    for (ns, dev, addr) in [(&ns_a, a.1, a.2), (&ns_b, b.1, b.2)] {
        sh(&["ip", "-n", ns, "addr", "add", addr, "dev", dev]);
        sh(&["ip", "-n", ns, "link", "set", dev, "up"]);
    }
}

#[test]
fn servers_see_the_clients_own_address_and_nat_works_beside_it() {
    let tools = [("python3", "--version", "python3"), ("nft", "--version", "nftables"), ("curl", "--version", "curl")];
    if let Some(why) = unavailable(&tools) {
        eprintln!("SKIPPED transparent_netns: {why}");
        return;
    }
    let dir = temp_dir("transparent");
    let mut net = Net::new();
    let (c, lb, s) = (net.add("tc"), net.add("tl"), net.add("ts"));
    veth(&net, ("tc", "eth0", &format!("{CLIENT}/24")), ("tl", "front", &format!("{LB_FRONT}/24")));
    veth(&net, ("tl", "back", &format!("{LB_BACK}/24")), ("ts", "eth0", &format!("{SERVER}/24")));
    sh(&["ip", "-n", &lb, "addr", "add", &format!("{FIXED}/24"), "dev", "back"]);
    sh(&["ip", "-n", &c, "route", "add", "default", "via", LB_FRONT]);
    // The servers' replies to clients go back through the balancer.
    sh(&["ip", "-n", &s, "route", "add", "default", "via", LB_BACK]);
    // The balancer delivers replies addressed to a client to its own transparent socket.
    sh_input(&["ip", "netns", "exec", &lb, "nft", "-f", "-"], NFT);
    sh(&["ip", "-n", &lb, "rule", "add", "fwmark", "1", "lookup", "100"]);
    sh(&["ip", "-n", &lb, "route", "add", "local", "0.0.0.0/0", "dev", "lo", "table", "100"]);

    let script = dir.join("servers.py");
    std::fs::write(&script, SERVERS).expect("write the servers");
    let servers = Proc::spawn(&s, &["python3", script.to_str().unwrap_or_default(), SERVER], dir.join("servers.log"));
    let config_path = write_temp("transparent", "lb.toml", &config());
    let (code, _, err) = check(&config_path);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("warning"), "root has the capability: no warning expected: {err}");
    let balancer = Proc::spawn(
        &lb,
        &[binary(), "run", "-c", config_path.to_str().unwrap_or_default()],
        dir.join("switchyard.log"),
    );
    wait_for("the balancer and the servers", || {
        (http_twice(&c, 81).lines().count() == 2 && servers.log().contains("ready")).then_some(())
    });
    let shown = |what: &str, got: &str| format!("{what}: got {got:?}\nbalancer log:\n{}", balancer.log());

    let nat = http_twice(&c, 81);
    assert_eq!(nat.lines().collect::<Vec<_>>(), [LB_BACK, LB_BACK], "{}", shown("http, source NAT", &nat));
    let transparent = http_twice(&c, 80);
    assert_eq!(
        transparent.lines().collect::<Vec<_>>(),
        [CLIENT, CLIENT],
        "{}",
        shown("http, transparent", &transparent)
    );
    let fixed = http_twice(&c, 82);
    assert_eq!(fixed.lines().collect::<Vec<_>>(), [FIXED, FIXED], "{}", shown("http, fixed source", &fixed));
    let tcp = tcp_once(&c, 90);
    assert_eq!(tcp, CLIENT, "{}", shown("tcp, transparent", &tcp));
    let tcp_nat = tcp_once(&c, 91);
    assert_eq!(tcp_nat, LB_BACK, "{}", shown("tcp, source NAT", &tcp_nat));
    // NAT still answers after transparent connections came and went.
    assert_eq!(http_twice(&c, 81).lines().next(), Some(LB_BACK));
    drop((balancer, servers));
}

#[test]
fn check_warns_when_the_process_cannot_be_transparent() {
    let text = format!(
        "[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:{}\"\npool = \"main\"\n\n\
         [[pool]]\nname = \"main\"\nservers = [ {{ address = \"127.0.0.1:9\" }} ]\nsource = \"client\"\n",
        free_port()
    );
    let path = write_temp("transparent-check", "t.toml", &text);
    let lacking = if is_root() {
        // Root keeps every capability; drop the two from the bounding set before exec.
        if !have("setpriv", "--version") {
            eprintln!("SKIPPED check_warns_when_the_process_cannot_be_transparent: setpriv missing (util-linux)");
            return;
        }
        let (code, out, err) = run_check(
            &["setpriv", "--bounding-set=-net_admin,-net_raw", "--inh-caps=-net_admin,-net_raw", "--", binary()],
            &path,
        );
        let (root_code, _, root_err) = check(&path);
        assert_eq!(root_code, 0, "{root_err}");
        assert!(!root_err.contains("warning"), "root may be transparent: {root_err}");
        (code, out, err)
    } else {
        run_check(&[binary()], &path)
    };
    let (code, _, err) = lacking;
    assert_eq!(code, 0, "a missing capability is a warning, not an error: {err}");
    assert!(err.contains(":9:10: warning: transparent mode"), "{err}");
    assert!(err.contains("CAP_NET_ADMIN"), "{err}");
}

/// `switchyard check -c PATH` run through `prefix` (whose last element is the binary).
fn run_check(prefix: &[&str], path: &Path) -> (i32, String, String) {
    let out = Command::new(prefix[0])
        .args(&prefix[1..])
        .args(["check", "-c", path.to_str().unwrap_or_default()])
        .output()
        .expect("run check");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}
