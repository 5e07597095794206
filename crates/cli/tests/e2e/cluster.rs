//! High availability over loopback: two switchyard processes replicate their stick
//! tables (`[cluster]`). A node that starts takes a full copy before it reports ready,
//! later updates stream both ways, a peer that was away converges when it returns
//! (what was dropped meanwhile is counted), a peer with another key is refused and
//! logged, a client's rate-limit buckets follow it to the other node, and
//! `switchyard ctl health` says whether the node may hold the address.
//!
//! The failover itself (keepalived moving the address) is in `ha_netns.rs`.

use crate::common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::Command;

use common::*;

const KEY: &str = "test-cluster-key-0123456789";

struct Node {
    listen: SocketAddr,
    admin: SocketAddr,
    cluster: SocketAddr,
}

impl Node {
    fn new() -> Node {
        let port = || SocketAddr::from(([127, 0, 0, 1], free_port()));
        Node { listen: port(), admin: port(), cluster: port() }
    }
}

/// Node `name` (listening as `me`) with peer `peer_name` at `peer`, header persistence
/// on `x-user` over `servers`, and `extra` lines in `[cluster]`.
fn config(
    name: &str,
    me: &Node,
    peer_name: &str,
    peer: &Node,
    key: &str,
    servers: [&Origin; 2],
    extra: &str,
) -> String {
    format!(
        "workers = 2\ndrain_timeout = \"2s\"\n\n[admin]\nlisten = \"{admin}\"\n\n\
         [cluster]\nname = \"{name}\"\nlisten = \"{cl}\"\nkey = \"{key}\"\n{extra}\n\
         [[cluster.peers]]\nname = \"{peer_name}\"\naddress = \"{pcl}\"\n\n\
         [[service]]\nname = \"web\"\nlisten = \"{listen}\"\npool = \"main\"\n\n\
         [[pool]]\nname = \"main\"\npersistence = {{ header = \"x-user\" }}\n\
         servers = [{{ address = \"{a}\", name = \"{an}\" }}, {{ address = \"{b}\", name = \"{bn}\" }}]\n",
        admin = me.admin,
        cl = me.cluster,
        pcl = peer.cluster,
        listen = me.listen,
        a = servers[0].addr,
        an = servers[0].name,
        b = servers[1].addr,
        bn = servers[1].name,
    )
}

fn api(admin: SocketAddr, path: &str) -> Response {
    let host = admin.to_string();
    Client::connect(admin).request("GET", path, &[("host", host.as_str()), ("connection", "close")])
}

fn cluster_view(admin: SocketAddr) -> serde_json::Value {
    api(admin, "/api/v1/cluster").json()
}

fn table_size(admin: SocketAddr) -> u64 {
    api(admin, "/api/v1/pools/main/persistence?limit=1").json()["total"].as_u64().unwrap_or(0)
}

/// One request as user `user`; the server that answered.
fn server_for(listen: SocketAddr, user: &str) -> String {
    let r = Client::connect(listen).request("GET", "/", &[("x-user", user), ("connection", "close")]);
    assert_eq!(r.status, 200);
    r.origin().to_string()
}

fn ctl_health(admin: SocketAddr) -> (i32, String) {
    let out = Command::new(binary())
        .args(["ctl", "--admin", &format!("http://{admin}"), "health"])
        .output()
        .expect("run switchyard ctl health");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

fn origins() -> [Origin; 2] {
    [Origin::start("server-a"), Origin::start("server-b")]
}

#[test]
fn a_starting_node_takes_a_full_copy_then_updates_stream_both_ways() {
    let servers = origins();
    let (a, b) = (Node::new(), Node::new());
    let servers = [&servers[0], &servers[1]];
    let lb1 = Proxy::start(&config("lb1", &a, "lb2", &b, KEY, servers, "sync_timeout = \"1s\""), a.listen);
    let mut sticky: HashMap<String, String> = HashMap::new();
    for i in 0..300 {
        let user = format!("user-{i}");
        sticky.insert(user.clone(), server_for(a.listen, &user));
    }
    let used: std::collections::HashSet<&String> = sticky.values().collect();
    assert_eq!(used.len(), 2, "round robin spreads users over both servers");

    let lb2 = Proxy::start(&config("lb2", &b, "lb1", &a, KEY, servers, ""), b.listen);
    wait_for("lb2 to hold a full copy", || (cluster_view(b.admin)["ready"] == true).then_some(()));
    assert_eq!(cluster_view(b.admin)["synced"], true);
    assert_eq!(table_size(b.admin), 300);
    assert_eq!(ctl_health(b.admin).0, 0);
    for (user, server) in &sticky {
        assert_eq!(&server_for(b.listen, user), server, "{user} moved on the standby");
    }

    // New clients on lb2 reach lb1.
    for i in 300..400 {
        let user = format!("user-{i}");
        sticky.insert(user.clone(), server_for(b.listen, &user));
    }
    wait_for("lb1 to receive lb2's entries", || (table_size(a.admin) == 400).then_some(()));
    for (user, server) in &sticky {
        assert_eq!(&server_for(a.listen, user), server, "{user} moved back on lb1");
    }
    let view = cluster_view(a.admin);
    let peer = &view["peers"][0];
    assert_eq!(peer["name"], "lb2");
    assert_eq!(peer["connected"], true);
    assert_eq!(peer["inbound"], true);
    assert!(peer["received"].as_u64().unwrap_or(0) >= 100, "{view}");
    assert_eq!(peer["dropped"], 0);
    let metrics = api(a.admin, "/metrics").text();
    assert!(metrics.contains("switchyard_cluster_peer_connected{peer=\"lb2\",direction=\"out\"} 1"), "{metrics}");
    drop((lb1, lb2));
}

#[test]
fn a_peer_away_converges_when_it_returns_and_drops_are_counted() {
    let servers = origins();
    let (a, b) = (Node::new(), Node::new());
    let servers = [&servers[0], &servers[1]];
    let lb1 = Proxy::start(&config("lb1", &a, "lb2", &b, KEY, servers, "sync_timeout = \"1s\"\nqueue = 16"), a.listen);
    let lb2_config = config("lb2", &b, "lb1", &a, KEY, servers, "queue = 16");
    let lb2 = Proxy::start(&lb2_config, b.listen);
    wait_for("the pair to connect", || {
        let v = cluster_view(a.admin);
        (v["peers"][0]["connected"] == true && v["peers"][0]["inbound"] == true).then_some(())
    });
    drop(lb2);
    // lb2 is gone: lb1 keeps serving, its queue for lb2 fills and drops.
    let mut sticky = HashMap::new();
    for i in 0..200 {
        let user = format!("away-{i}");
        sticky.insert(user.clone(), server_for(a.listen, &user));
    }
    let dropped = cluster_view(a.admin)["peers"][0]["dropped"].as_u64().unwrap_or(0);
    assert!(dropped > 0, "200 updates into a queue of 16 with the peer away drop some");
    let lb2 = Proxy::start(&lb2_config, b.listen);
    wait_for("lb2 to converge", || (table_size(b.admin) == 200).then_some(()));
    for (user, server) in &sticky {
        assert_eq!(&server_for(b.listen, user), server, "{user} moved after the resync");
    }
    drop((lb1, lb2));
}

#[test]
fn a_client_limited_on_one_node_is_limited_on_the_other() {
    let servers = origins();
    let (a, b) = (Node::new(), Node::new());
    let servers = [&servers[0], &servers[1]];
    // Four requests an hour: after the fourth the bucket is empty for 15 minutes.
    let limited = |text: String| {
        text.replace(
            "pool = \"main\"\n\n[[pool]]",
            "pool = \"main\"\nprotection = { request_rate = { count = 4, per = \"1h\" } }\n\n[[pool]]",
        )
    };
    let lb1 = Proxy::start(&limited(config("lb1", &a, "lb2", &b, KEY, servers, "sync_timeout = \"1s\"")), a.listen);
    let lb2_config = limited(config("lb2", &b, "lb1", &a, KEY, servers, ""));
    let lb2 = Proxy::start(&lb2_config, b.listen);
    wait_for("lb2 to hold a full copy", || (cluster_view(b.admin)["ready"] == true).then_some(()));
    let status = |listen: SocketAddr| Client::connect(listen).request("GET", "/", &[("connection", "close")]).status;
    let statuses: Vec<u16> = (0..5).map(|_| status(a.listen)).collect();
    assert_eq!(statuses, [200, 200, 200, 200, 429], "the limit holds on lb1");
    // The buckets left more than half used (requests 2 to 4) travel to lb2.
    wait_for("lb2 to receive the buckets", || {
        (cluster_view(b.admin)["peers"][0]["received"].as_u64() >= Some(3)).then_some(())
    });
    assert_eq!(status(b.listen), 429, "a client limited on lb1 is limited on lb2 after a failover");

    // A node that restarts gets the buckets with its full copy.
    drop(lb2);
    let lb2 = Proxy::start(&lb2_config, b.listen);
    wait_for("lb2 to hold a full copy again", || (cluster_view(b.admin)["synced"] == true).then_some(()));
    assert_eq!(status(b.listen), 429, "the full copy carries the buckets");
    drop((lb1, lb2));
}

#[test]
fn a_peer_with_another_key_is_refused_and_logged() {
    let servers = origins();
    let (a, b) = (Node::new(), Node::new());
    let servers = [&servers[0], &servers[1]];
    let lb1 = Proxy::start(&config("lb1", &a, "lb2", &b, KEY, servers, "sync_timeout = \"1s\""), a.listen);
    let other = "another-key-9876543210abcdef";
    let lb2 = Proxy::start(&config("lb2", &b, "lb1", &a, other, servers, "sync_timeout = \"1s\""), b.listen);
    wait_for("lb1 to refuse lb2", || (cluster_view(a.admin)["refused"].as_u64() >= Some(1)).then_some(()));
    wait_for("lb1's refusal in its log", || lb1.log().contains("cluster connection refused").then_some(()));
    wait_for("lb2's refusal in its log", || lb2.log().contains("failed authentication").then_some(()));
    for i in 0..20 {
        server_for(b.listen, &format!("intruder-{i}"));
    }
    let view = cluster_view(a.admin);
    assert_eq!(view["peers"][0]["inbound"], false, "{view}");
    assert_eq!(view["peers"][0]["connected"], false, "{view}");
    assert_eq!(view["synced"], false);
    assert_eq!(table_size(a.admin), 0, "nothing from an unauthenticated peer is taken");
}

#[test]
fn ctl_health_fails_until_a_full_copy_arrives_and_while_stopping() {
    let servers = origins();
    let (a, b) = (Node::new(), Node::new());
    let servers = [&servers[0], &servers[1]];
    // The peer never comes: not ready for the whole (long) sync timeout.
    let lb1 = Proxy::start(&config("lb1", &a, "lb2", &b, KEY, servers, "sync_timeout = \"1h\""), a.listen);
    wait_for("the admin listener", || std::net::TcpStream::connect(a.admin).ok());
    let (code, text) = ctl_health(a.admin);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("not ready"), "{text}");
    assert_eq!(server_for(a.listen, "early"), "server-a", "the data path serves while not ready");
    drop(lb1);
    let (code, text) = ctl_health(a.admin);
    assert_eq!(code, 1, "a stopped node is not healthy: {text}");

    // Without [cluster], a running node is healthy.
    let listen = proxy_addr();
    let admin = proxy_addr();
    let single = simple_config(listen, &[servers[0].addr], "") + &format!("\n[admin]\nlisten = \"{admin}\"\n");
    let _single = Proxy::start(&single, listen);
    wait_for("the admin listener", || std::net::TcpStream::connect(admin).ok());
    assert_eq!(ctl_health(admin).0, 0);
}

/// Node `name` with one `tcp` service on `me.listen` whose pool sticks Remote Desktop
/// users to `servers` by their `mstshash` cookie.
fn rdp_config(name: &str, me: &Node, peer_name: &str, peer: &Node, servers: &[SocketAddr]) -> String {
    let list: Vec<String> =
        servers.iter().enumerate().map(|(i, a)| format!("{{ address = \"{a}\", name = \"s{i}\" }}")).collect();
    format!(
        "workers = 2\ndrain_timeout = \"2s\"\n\n[admin]\nlisten = \"{admin}\"\n\n\
         [cluster]\nname = \"{name}\"\nlisten = \"{cl}\"\nkey = \"{KEY}\"\nsync_timeout = \"1s\"\n\n\
         [[cluster.peers]]\nname = \"{peer_name}\"\naddress = \"{pcl}\"\n\n\
         [[service]]\nname = \"desktops\"\nmode = \"tcp\"\nlisten = \"{listen}\"\npool = \"farm\"\n\n\
         [[pool]]\nname = \"farm\"\npersistence = {{ rdp_cookie = true, idle_timeout = \"10m\" }}\nservers = [{}]\n",
        list.join(", "),
        admin = me.admin,
        cl = me.cluster,
        pcl = peer.cluster,
        listen = me.listen,
    )
}

#[test]
fn remote_desktop_users_keep_their_server_on_the_other_node() {
    use common::l4::{rdp_request, tagged_server, through};
    let servers = [tagged_server(b'a'), tagged_server(b'b'), tagged_server(b'c')];
    let (a, b) = (Node::new(), Node::new());
    let lb1 = Proxy::start(&rdp_config("lb1", &a, "lb2", &b, &servers), a.listen);
    let lb2 = Proxy::start(&rdp_config("lb2", &b, "lb1", &a, &servers), b.listen);
    wait_for("both nodes ready", || {
        (cluster_view(a.admin)["ready"] == true && cluster_view(b.admin)["ready"] == true).then_some(())
    });
    // Users learned on lb1 (round robin spreads them), streamed to lb2.
    let users: Vec<String> = (0..60).map(|i| format!("desk{i}")).collect();
    let homes: Vec<u8> = users.iter().map(|u| through(a.listen, &rdp_request(Some(u)), false)).collect();
    assert_eq!(homes.iter().collect::<std::collections::HashSet<_>>().len(), 3, "{homes:?}");
    let size = |admin| api(admin, "/api/v1/pools/farm/persistence?limit=1").json()["total"].as_u64().unwrap_or(0);
    wait_for("lb2 to hold every RDP entry", || (size(b.admin) == 60).then_some(()));
    // After the address moved (here: the client goes to lb2), each user reaches the same server.
    for (user, home) in users.iter().zip(&homes) {
        assert_eq!(through(b.listen, &rdp_request(Some(user)), false), *home, "{user} moved\n{}", lb2.log());
    }
    drop(lb1);
}
