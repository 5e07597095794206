//! High availability end to end, in network namespaces this test creates and removes:
//! a client, two balancer nodes (switchyard + Debian's keepalived each, configured
//! from `examples/ha/`), three origin servers, and a bridge between them all.
//!
//! The clients (1,200 addresses) reach the bridge through a router namespace.
//!
//! Scenarios, in order on one topology (setting it up costs seconds):
//! 1. 1,000 client addresses stick to servers through lb1 (source persistence);
//!    lb2 holds a full copy of lb1's table;
//! 2. lb1's switchyard is killed: its track script fails, keepalived moves the
//!    address, lb2 serves, and every client reaches the server it had;
//! 3. lb1's switchyard restarts: it takes a full copy from lb2 before its track
//!    script passes and becomes the standby; with the examples' `nopreempt` the
//!    address stays on lb2 and no request of a probe running throughout fails;
//! 4. lb2's link is cut: lb1 takes over (failover time measured: cut → first answer
//!    from lb1), clients still stick, lb1 learns 200 new clients;
//! 5. the link returns: lb2 converges (it learns lb1's new clients), both tables
//!    are equal, every client still sticks, and lb1 keeps the address.
//!
//! lb2's keepalived starts once lb1 holds the address: with `nopreempt` the first
//! healthy node keeps it, and the scenarios start from lb1.
//!
//! Skipped, with a message, when not root or when `ip netns`, keepalived or python3
//! (the client, which binds 1,000 source addresses) is missing. Every namespace and
//! process is removed by guards, also when an assertion fails. Measured times are
//! printed, never asserted.

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::netns::*;
use common::*;

const VIP: &str = "10.77.0.100";
const CLIENTS: usize = 1000;
/// The client address of the failover probe.
const PROBE: &str = "10.78.200.9";

/// The python client: `sweep FILE` requests once from every source address in FILE;
/// `probe SRC STOPFILE SECONDS [TIMEOUT]` requests from SRC every 5 ms until STOPFILE
/// exists, each attempt given TIMEOUT seconds (0.2 by default: a fine-grained clock
/// for failover times; a longer one lets a lost SYN be retransmitted, as real clients do).
const CLIENT: &str = r#"
import os, socket, sys, time
VIP = ("10.77.0.100", 80)
def get(src, timeout):
    s = socket.socket()
    s.settimeout(timeout)
    try:
        s.bind((src, 0)); s.connect(VIP)
        s.sendall(b"GET / HTTP/1.1\r\nhost: vip\r\nconnection: close\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk: break
            data += chunk
        lines = data.split(b"\r\n\r\n", 1)[0].decode("latin1").lower().split("\r\n")
        h = dict(l.split(": ", 1) for l in lines[1:] if ": " in l)
        return lines[0].split()[1], h.get("x-origin", "-"), h.get("x-node", "-")
    except Exception as e:
        return "ERR", type(e).__name__, "-"
    finally:
        s.close()
if sys.argv[1] == "sweep":
    for src in open(sys.argv[2]).read().split():
        print(src, *get(src, 3.5))
else:
    src, stop, end = sys.argv[2], sys.argv[3], time.time() + float(sys.argv[4])
    timeout = float(sys.argv[5]) if len(sys.argv) > 5 else 0.2
    while time.time() < end and not os.path.exists(stop):
        t = time.time()
        st, origin, node = get(src, timeout)
        print("%.4f %.4f %s %s %s" % (t, time.time(), st, origin, node), flush=True)
        time.sleep(0.005)
"#;

struct Ha {
    dir: PathBuf,
    // Field order is drop order: processes before namespaces.
    lb1: Option<Proc>,
    ka1: Proc,
    _lb2: Proc,
    /// Started once lb1 holds the address: with `nopreempt` the first healthy
    /// node keeps it, and the scenarios start from lb1.
    ka2: Option<Proc>,
    _origins: Vec<Proc>,
    net: Net,
}

impl Ha {
    fn ns(&self, role: &str) -> String {
        self.net.name(role)
    }

    fn client(&self, args: &[&str]) -> String {
        let script = self.dir.join("client.py");
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns("c"), "python3"])
            .arg(&script)
            .args(args)
            .output()
            .expect("run the client");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// One request from each address in `file`: address → (status, server, node).
    fn sweep(&self, file: &Path) -> BTreeMap<String, (String, String, String)> {
        let out = self.client(&["sweep", file.to_str().unwrap_or_default()]);
        out.lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() == 4).then(|| (f[0].to_string(), (f[1].to_string(), f[2].to_string(), f[3].to_string())))
            })
            .collect()
    }

    /// A node's persistence table: client address → server.
    fn table(&self, node: &str) -> HashMap<String, String> {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns(node),
                binary(),
                "ctl",
                "--json",
                "persistence",
                "main",
                "--limit",
                "10000",
            ])
            .output()
            .expect("ctl persistence");
        let view: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        view["entries"]
            .as_array()
            .map(|entries| {
                entries
                    .iter()
                    .map(|e| {
                        (e["key"].as_str().unwrap_or("").to_string(), e["server"].as_str().unwrap_or("").to_string())
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    fn start_ka2(&mut self) {
        self.ka2 = Some(keepalived(&self.dir, &self.net, "lb2"));
    }

    fn start_lb1(&mut self) {
        let config = workspace_root().join("examples/ha/lb1.toml");
        let log = self.dir.join(format!("lb1-{}.log", now()));
        self.lb1 =
            Some(Proc::spawn(&self.ns("l1"), &[binary(), "run", "-c", config.to_str().unwrap_or_default()], log));
    }

    /// Starts a probe from `src` (attempts of `timeout` seconds); returns the stop file,
    /// the child and its output file.
    fn probe(&self, src: &str, timeout: &str) -> (PathBuf, Child, PathBuf) {
        let stop = self.dir.join(format!("stop-{}", now()));
        let out_path = self.dir.join(format!("probe-{}.log", now()));
        let out = std::fs::File::create(&out_path).expect("probe log");
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns("c"), "python3"])
            .arg(self.dir.join("client.py"))
            .args(["probe", src, stop.to_str().unwrap_or_default(), "60", timeout])
            .stdout(out)
            .spawn()
            .expect("probe");
        (stop, child, out_path)
    }
}

fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// Builds the topology and starts everything; `None` with a message when unavailable.
fn setup() -> Option<Ha> {
    let tools = [("keepalived", "--version", "keepalived"), ("python3", "--version", "python3")];
    if let Some(why) = unavailable(&tools) {
        eprintln!("SKIPPED ha_netns: {why}");
        return None;
    }
    let dir = temp_dir("ha");
    eprintln!("ha_netns: logs in {}", dir.display());
    let mut net = Net::new();
    for role in ["sw", "r", "c", "l1", "l2", "s"] {
        let ns = net.name(role);
        sh(&["ip", "netns", "add", &ns]);
        net.ns.push(ns.clone());
        sh(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
    }
    let sw = net.name("sw");
    sh(&["ip", "-n", &sw, "link", "add", "br0", "type", "bridge"]);
    sh(&["ip", "-n", &sw, "link", "set", "br0", "up"]);
    for role in ["r", "l1", "l2", "s"] {
        let (ns, port) = (net.name(role), format!("p{role}"));
        sh(&["ip", "-n", &sw, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &ns]);
        sh(&["ip", "-n", &sw, "link", "set", &port, "master", "br0", "up"]);
        sh(&["ip", "-n", &ns, "link", "set", "eth0", "up"]);
    }
    // The recipe's sysctl (docs/high-availability.md): a node that lost the address
    // must not announce it as the source of its own ARP requests.
    for role in ["l1", "l2"] {
        sh(&["ip", "netns", "exec", &net.name(role), "sysctl", "-qw", "net.ipv4.conf.all.arp_announce=2"]);
    }
    for (role, addr) in [
        ("r", "10.77.0.254"),
        ("l1", "10.77.0.1"),
        ("l2", "10.77.0.2"),
        ("s", "10.77.0.11"),
        ("s", "10.77.0.12"),
        ("s", "10.77.0.13"),
    ] {
        sh(&["ip", "-n", &net.name(role), "addr", "add", &format!("{addr}/16"), "dev", "eth0"]);
    }
    for role in ["l1", "l2", "s"] {
        sh(&["ip", "-n", &net.name(role), "route", "add", "10.78.0.0/16", "via", "10.77.0.254"]);
    }
    // Clients sit behind a router, as on the internet: the balancers' neighbour tables
    // hold the router, not 1,200 clients (the kernel's ARP table is shared by every
    // namespace and holds 1,024 entries by default).
    let (r, c) = (net.name("r"), net.name("c"));
    sh(&["ip", "-n", &r, "link", "add", "eth1", "type", "veth", "peer", "name", "eth0", "netns", &c]);
    sh(&["ip", "-n", &r, "addr", "add", "10.79.0.1/24", "dev", "eth1"]);
    sh(&["ip", "-n", &r, "link", "set", "eth1", "up"]);
    sh(&["ip", "netns", "exec", &r, "sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    sh(&["ip", "-n", &r, "route", "add", "10.78.0.0/16", "via", "10.79.0.2"]);
    sh(&["ip", "-n", &c, "addr", "add", "10.79.0.2/24", "dev", "eth0"]);
    sh(&["ip", "-n", &c, "link", "set", "eth0", "up"]);
    sh(&["ip", "-n", &c, "route", "add", "default", "via", "10.79.0.1"]);
    let mut batch = String::new();
    for a in client_addresses(0, CLIENTS).iter().chain(client_addresses(CLIENTS, 200).iter()) {
        batch.push_str(&format!("addr add {a}/32 dev lo\n"));
    }
    batch.push_str(&format!("addr add {PROBE}/32 dev lo\n"));
    let batch_file = dir.join("client-addresses.batch");
    std::fs::write(&batch_file, batch).expect("batch");
    sh(&["ip", "-n", &c, "-batch", batch_file.to_str().unwrap_or_default()]);
    std::fs::write(dir.join("client.py"), CLIENT).expect("client script");

    let s = net.name("s");
    let origins = (1..=3)
        .map(|i| {
            let listen = format!("10.77.0.1{i}:8080");
            let args = [binary(), "origin", "--listen", &listen, "--name", &format!("s{i}")];
            Proc::spawn(&s, &args, dir.join(format!("origin-{i}.log")))
        })
        .collect();
    let lb2_config = workspace_root().join("examples/ha/lb2.toml");
    let lb2 = Proc::spawn(
        &net.name("l2"),
        &[binary(), "run", "-c", lb2_config.to_str().unwrap_or_default()],
        dir.join("lb2.log"),
    );
    let mut ha = Ha {
        dir: dir.clone(),
        lb1: None,
        ka1: keepalived(&dir, &net, "lb1"),
        _lb2: lb2,
        ka2: None,
        _origins: origins,
        net,
    };
    ha.start_lb1();
    Some(ha)
}

/// keepalived for `node` from examples/ha (only the switchyard path substituted).
fn keepalived(dir: &Path, net: &Net, node: &str) -> Proc {
    let text = std::fs::read_to_string(workspace_root().join(format!("examples/ha/keepalived-{node}.conf")))
        .expect("example keepalived.conf")
        .replace("/usr/local/bin/switchyard", binary());
    let conf = dir.join(format!("keepalived-{node}.conf"));
    std::fs::write(&conf, text).expect("keepalived.conf");
    let pid = dir.join(format!("keepalived-{node}.pid"));
    let vrrp = dir.join(format!("vrrp-{node}.pid"));
    let ns = net.name(if node == "lb1" { "l1" } else { "l2" });
    let args = [
        "keepalived",
        "-P",
        "-n",
        "-l",
        "-D",
        "-f",
        conf.to_str().unwrap_or_default(),
        "-p",
        pid.to_str().unwrap_or_default(),
        "-r",
        vrrp.to_str().unwrap_or_default(),
    ];
    Proc::spawn(&ns, &args, dir.join(format!("keepalived-{node}.log")))
}

fn client_addresses(from: usize, count: usize) -> Vec<String> {
    (from..from + count).map(|i| format!("10.78.{}.{}", 1 + i / 250, 1 + i % 250)).collect()
}

fn kept(
    before: &BTreeMap<String, (String, String, String)>,
    after: &BTreeMap<String, (String, String, String)>,
) -> usize {
    let same = |a: &String, server: &String| after.get(a).is_some_and(|(st, s, _)| st == "200" && s == server);
    let moved: Vec<_> = before.iter().filter(|(a, (_, s, _))| !same(a, s)).take(5).collect();
    if !moved.is_empty() {
        let now: Vec<_> = moved.iter().map(|(a, _)| after.get(*a)).collect();
        eprintln!("ha_netns: not kept (first 5): before {moved:?}, after {now:?}");
    }
    before.iter().filter(|(a, (_, server, _))| same(a, server)).count()
}

/// Stops a probe and returns its lines: (start, end, status, node).
fn finish_probe(stop: &Path, mut child: Child, out: &Path) -> Vec<(f64, f64, String, String)> {
    std::fs::write(stop, b"").expect("stop file");
    let _ = wait_exit(&mut child, Duration::from_secs(5)).is_none().then(|| child.kill());
    let file = std::fs::File::open(out).expect("probe log");
    std::io::BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((f.first()?.parse().ok()?, f.get(1)?.parse().ok()?, f.get(2)?.to_string(), f.get(4)?.to_string()))
        })
        .collect()
}

/// Seconds from `t0` to the end of the first successful answer from `node` started after `t0`.
fn first_answer(lines: &[(f64, f64, String, String)], t0: f64, node: &str) -> Option<f64> {
    lines.iter().find(|(start, _, st, n)| *start >= t0 && st == "200" && n == node).map(|(_, end, _, _)| end - t0)
}

/// Waits until the probe writing `out` has an answer from `node` started after `t0`.
fn wait_probe(out: &Path, t0: f64, node: &str) {
    wait_for(&format!("the probe to be answered by {node}"), || {
        let text = std::fs::read_to_string(out).unwrap_or_default();
        text.lines()
            .any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.first().and_then(|t| t.parse::<f64>().ok()).is_some_and(|t| t >= t0)
                    && f.get(2) == Some(&"200")
                    && f.get(4) == Some(&node)
            })
            .then_some(())
    });
}

fn wait_node(ha: &Ha, node: &str) {
    wait_for(&format!("{VIP} to be served by {node}"), || {
        let out = ha.client(&["probe", PROBE, "/nonexistent", "0.01"]);
        let served = |l: &str| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.get(2) == Some(&"200") && f.get(4) == Some(&node)
        };
        out.lines().any(served).then_some(())
    });
}

#[test]
fn failover_keeps_persistent_clients() {
    let Some(mut ha) = setup() else { return };
    let first: Vec<String> = client_addresses(0, CLIENTS);
    let first_file = ha.dir.join("first.txt");
    std::fs::write(&first_file, first.join("\n")).expect("addresses");
    let later_file = ha.dir.join("later.txt");
    std::fs::write(&later_file, client_addresses(CLIENTS, 200).join("\n")).expect("addresses");

    // 1. lb1 holds the address and stickiness is learned there, copied to lb2.
    wait_node(&ha, "lb1");
    ha.start_ka2();
    wait_for("lb2's keepalived to be the standby", || {
        ha.ka2.as_ref().is_some_and(|k| k.log().contains("Entering BACKUP STATE")).then_some(())
    });
    let before = ha.sweep(&first_file);
    assert_eq!(before.values().filter(|(st, _, n)| st == "200" && n == "lb1").count(), CLIENTS, "{before:?}");
    let servers: std::collections::HashSet<&String> = before.values().map(|(_, s, _)| s).collect();
    assert_eq!(servers.len(), 3, "clients spread over the three servers");
    // (The probe address is one more entry.)
    wait_for("lb2 to hold lb1's 1,000 entries", || (ha.table("l2").len() > CLIENTS).then_some(()));

    // 2. lb1's switchyard dies: keepalived on lb1 sees its track script fail.
    let (stop, child, out) = ha.probe(PROBE, "0.2");
    std::thread::sleep(Duration::from_millis(300));
    let t0 = now();
    if let Some(p) = ha.lb1.as_mut() {
        p.kill();
    }
    wait_probe(&out, t0, "lb2");
    let lines = finish_probe(&stop, child, &out);
    let killed = first_answer(&lines, t0, "lb2");
    let after_kill = ha.sweep(&first_file);
    assert_eq!(kept(&before, &after_kill), CLIENTS, "every client keeps its server on lb2");
    assert!(after_kill.values().all(|(_, _, n)| n == "lb2"));

    // 3. lb1's switchyard restarts: it takes a full copy from lb2 and becomes the
    //    standby. With `nopreempt` the address stays on lb2: no request fails.
    let backups = ha.ka1.log().matches("Entering BACKUP STATE").count();
    let (stop, child, out) = ha.probe(PROBE, "3");
    let t0 = now();
    ha.start_lb1();
    wait_for("lb1's keepalived to be the standby again", || {
        (ha.ka1.log().matches("Entering BACKUP STATE").count() > backups).then_some(())
    });
    // Two more track-script rounds: the address must not move.
    std::thread::sleep(Duration::from_secs(2));
    let lines = finish_probe(&stop, child, &out);
    let restart: Vec<_> = lines.iter().filter(|(s, _, _, _)| *s >= t0).collect();
    let failed: Vec<_> = restart.iter().filter(|(_, _, st, node)| st != "200" || node != "lb2").collect();
    assert!(!restart.is_empty() && failed.is_empty(), "requests failed or moved while lb1 returned: {failed:?}");
    let lb1_log = ha.lb1.as_ref().map(Proc::log).unwrap_or_default();
    assert!(lb1_log.contains("full copy received"), "lb1 resynced:\n{lb1_log}");

    // 4. lb2's link is cut: lb1 takes over on VRRP silence.
    let (stop, child, out) = ha.probe(PROBE, "0.2");
    std::thread::sleep(Duration::from_millis(300));
    let t0 = now();
    sh(&["ip", "-n", &ha.ns("sw"), "link", "set", "pl2", "down"]);
    wait_probe(&out, t0, "lb1");
    let lines = finish_probe(&stop, child, &out);
    let cut = first_answer(&lines, t0, "lb1");
    let after_cut = ha.sweep(&first_file);
    assert_eq!(kept(&before, &after_cut), CLIENTS, "every client keeps its server after the cut");
    let later = ha.sweep(&later_file);
    assert!(later.values().all(|(st, _, n)| st == "200" && n == "lb1"));

    // 5. The link returns: lb2 converges, both tables are equal, clients stick, and
    //    lb1 keeps the address (lb2, master alone meanwhile, yields to the higher priority).
    sh(&["ip", "-n", &ha.ns("sw"), "link", "set", "pl2", "up"]);
    wait_for("both tables to converge", || {
        let (t1, t2) = (ha.table("l1"), ha.table("l2"));
        (t1.len() > CLIENTS + 200 && t1 == t2).then_some(())
    });
    wait_node(&ha, "lb1");
    let final_first = ha.sweep(&first_file);
    assert_eq!(kept(&before, &final_first), CLIENTS);
    let final_later = ha.sweep(&later_file);
    assert_eq!(kept(&later, &final_later), 200, "lb2 learned lb1's clients while cut off");

    let ka1 = ha.ka1.log();
    assert!(ka1.contains("Entering MASTER STATE"), "keepalived log:\n{ka1}");
    eprintln!(
        "MEASURED ha_netns: switchyard killed -> first answer from lb2: {killed:?} s; link cut -> first answer from lb1: {cut:?} s; \
         lb1 restart: {} probe requests, none failed (nopreempt: the address stayed on lb2)",
        restart.len()
    );
}

/// The pair's example configurations pass `switchyard check` without warnings (this
/// part needs no privileges and always runs).
#[test]
fn example_pair_passes_check() {
    for node in ["lb1", "lb2"] {
        let file = workspace_root().join(format!("examples/ha/{node}.toml"));
        let (code, stdout, stderr) = check(&file);
        assert_eq!(code, 0, "{node}: {stdout}{stderr}");
        assert!(!stderr.contains("warning:"), "{node}: {stderr}");
        let text = std::fs::read_to_string(workspace_root().join(format!("examples/ha/keepalived-{node}.conf")))
            .expect("keepalived example");
        assert!(text.contains("ctl --admin http://127.0.0.1:9090 health"), "{node}'s track script runs ctl health");
        assert!(text.contains("vrrp_version 3"), "100 ms adverts need VRRPv3");
    }
}
