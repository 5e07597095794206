//! UDP tests: the flow table with an injected clock (expiry, refusal,
//! counters), then the relay over loopback between clients and two echo
//! servers that prefix each reply with their name.

use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::rc::Rc;
use std::time::{Duration, Instant};

use tokio::net::UdpSocket;
use tokio::sync::oneshot;
use tokio::task::{spawn_local, JoinHandle, LocalSet};

use super::udp::{Admit, FlowStats, FlowTable, UdpOptions, UdpRelay};

const IDLE: Duration = Duration::from_secs(10);

fn addr(port: u16) -> SocketAddr {
    (Ipv4Addr::LOCALHOST, port).into()
}

fn clock() -> impl Fn(u64) -> Instant {
    let t0 = Instant::now();
    move |ms| t0 + Duration::from_millis(ms)
}

/// Whether `client` has a live flow at `now` (a lookup, as the relay does).
fn has_flow(table: &mut FlowTable<u32>, client: SocketAddr, now: Instant) -> bool {
    matches!(table.admit(client, now), Admit::Flow(_))
}

#[test]
fn flows_expire_after_idle() {
    let at = clock();
    let mut table = FlowTable::new(8, IDLE);
    assert!(table.insert(addr(1), addr(100), 7, at(0)).is_some());
    assert!(table.insert(addr(2), addr(100), 8, at(4_000)).is_some());
    assert_eq!(table.expire(at(9_999)), 0);
    assert_eq!(table.expire(at(10_000)), 1, "the first flow idled out");
    assert_eq!(table.len(), 1);
    assert_eq!(table.expire(at(14_000)), 1);
    assert!(table.is_empty());
    assert_eq!(table.stats().expired, 2);
}

#[test]
fn traffic_either_way_keeps_a_flow_alive() {
    let at = clock();
    let mut table = FlowTable::new(8, IDLE);
    table.insert(addr(1), addr(100), 7, at(0));
    table.note_to_server(addr(1), 10, at(6_000));
    table.note_to_client(addr(1), 20, at(12_000));
    assert_eq!(table.expire(at(21_999)), 0);
    assert!(has_flow(&mut table, addr(1), at(21_999)));
    assert_eq!(table.expire(at(22_000)), 1);
}

#[test]
fn lookup_forgets_an_idle_flow_before_any_sweep() {
    let at = clock();
    let mut table = FlowTable::new(8, IDLE);
    table.insert(addr(1), addr(100), 7, at(0));
    assert!(has_flow(&mut table, addr(1), at(9_999)));
    assert!(matches!(table.admit(addr(1), at(10_000)), Admit::Vacant));
    assert_eq!(table.stats().expired, 1);
    assert!(table.is_empty());
}

#[test]
fn a_late_reply_does_not_revive_an_idle_flow() {
    let at = clock();
    let mut table = FlowTable::new(8, IDLE);
    table.insert(addr(1), addr(100), 7, at(0));
    table.note_to_client(addr(1), 5, at(10_500));
    assert_eq!(table.expire(at(10_500)), 1);
}

#[test]
fn a_full_table_refuses_new_clients_and_keeps_the_others() {
    let at = clock();
    let mut table = FlowTable::new(2, IDLE);
    table.insert(addr(1), addr(100), 1, at(0));
    table.insert(addr(2), addr(101), 2, at(0));
    assert!(matches!(table.admit(addr(3), at(1)), Admit::Refused));
    assert!(table.insert(addr(3), addr(100), 3, at(1)).is_none());
    assert_eq!(table.stats().refused, 2);
    for (client, server) in [(addr(1), addr(100)), (addr(2), addr(101))] {
        match table.admit(client, at(2)) {
            Admit::Flow(flow) => assert_eq!(flow.server(), Some(server)),
            _ => panic!("existing flow of {client} lost"),
        }
    }
    // Idle expiry makes room again.
    table.note_to_server(addr(2), 1, at(5_000));
    table.expire(at(10_000));
    assert!(matches!(table.admit(addr(3), at(10_000)), Admit::Vacant));
    assert!(table.insert(addr(3), addr(100), 3, at(10_000)).is_some());
    let stats = table.stats();
    assert_eq!((stats.active, stats.created, stats.expired, stats.refused), (2, 3, 1, 2));
}

#[test]
fn flows_gain_one_upstream_per_server() {
    let at = clock();
    let mut table = FlowTable::new(2, IDLE);
    table.insert(addr(1), addr(100), 1, at(0));
    let Admit::Flow(flow) = table.admit(addr(1), at(1)) else { panic!("flow lost") };
    flow.add_upstream(addr(101), 2);
    assert_eq!(flow.server(), Some(addr(100)), "the first server stays the sticky one");
    assert_eq!(flow.upstream(addr(101)), Some(&2));
    assert_eq!(flow.servers().collect::<Vec<_>>(), [addr(100), addr(101)]);
}

#[test]
fn counters_add_up() {
    let at = clock();
    let mut table = FlowTable::new(2, IDLE);
    table.insert(addr(1), addr(100), 1, at(0));
    table.note_to_server(addr(1), 100, at(1));
    table.note_to_server(addr(1), 50, at(2));
    table.note_to_client(addr(1), 70, at(3));
    table.note_dropped();
    let s = table.stats();
    assert_eq!((s.datagrams_to_server, s.bytes_to_server, s.datagrams_to_client, s.bytes_to_client), (2, 150, 1, 70));
    assert_eq!(s.dropped, 1);
}

/// An echo server answering `NAME:payload`.
async fn echo_server(name: &'static str) -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").await.expect("bind echo");
    let local = socket.local_addr().expect("echo addr");
    spawn_local(async move {
        let mut buf = vec![0; 2048];
        while let Ok((n, from)) = socket.recv_from(&mut buf).await {
            let mut reply = format!("{name}:").into_bytes();
            reply.extend_from_slice(&buf[..n]);
            let _ = socket.send_to(&reply, from).await;
        }
    });
    local
}

struct Running {
    addr: SocketAddr,
    relay: Rc<UdpRelay>,
    stop: oneshot::Sender<()>,
    served: JoinHandle<FlowStats>,
}

/// A relay on loopback picking `servers` in turn.
async fn start_relay(opts: UdpOptions, servers: Vec<SocketAddr>) -> Running {
    let listener = UdpSocket::bind("127.0.0.1:0").await.expect("bind listener");
    let addr = listener.local_addr().expect("listener addr");
    let relay = UdpRelay::new(Rc::new(listener), opts);
    let mut turn = 0;
    let pick = move |_client| {
        turn += 1;
        servers.get(turn % servers.len()).copied()
    };
    let (stop, stopped) = oneshot::channel();
    let served = spawn_local(relay.clone().serve(pick, stopped));
    Running { addr, relay, stop, served }
}

async fn client() -> UdpSocket {
    UdpSocket::bind("127.0.0.1:0").await.expect("bind client")
}

/// Sends `payload` through the relay; returns the name of the server that
/// echoed it, checking the echo is this payload.
async fn exchange(client: &UdpSocket, relay: SocketAddr, payload: &str) -> String {
    client.send_to(payload.as_bytes(), relay).await.expect("send");
    let mut buf = [0; 2048];
    let (n, from) = tokio::time::timeout(Duration::from_secs(10), client.recv_from(&mut buf))
        .await
        .expect("a reply in time")
        .expect("recv");
    assert_eq!(from, relay, "replies come from the listener address");
    let reply = std::str::from_utf8(&buf[..n]).expect("utf-8 reply");
    let (server, echoed) = reply.split_once(':').expect("NAME:payload");
    assert_eq!(echoed, payload, "the reply belongs to this client's datagram");
    server.to_owned()
}

async fn stop(running: Running) -> FlowStats {
    let _ = running.stop.send(());
    running.served.await.expect("serve task")
}

#[tokio::test(flavor = "current_thread")]
async fn each_client_sticks_to_one_server_and_gets_its_own_replies() {
    LocalSet::new()
        .run_until(async {
            let servers = vec![echo_server("a").await, echo_server("b").await];
            let running = start_relay(UdpOptions::default(), servers).await;
            let relay = running.addr;
            let clients: Vec<_> = (0..4)
                .map(|c| {
                    spawn_local(async move {
                        let socket = client().await;
                        let mut used = HashSet::new();
                        for k in 0..20 {
                            used.insert(exchange(&socket, relay, &format!("c{c}-{k}")).await);
                        }
                        used
                    })
                })
                .collect();
            let mut all = HashSet::new();
            for task in clients {
                let used = task.await.expect("client task");
                assert_eq!(used.len(), 1, "a client's datagrams stay on one server: {used:?}");
                all.extend(used);
            }
            assert_eq!(all.len(), 2, "both servers serve some clients");
            let stats = stop(running).await;
            assert_eq!((stats.created, stats.refused, stats.dropped), (4, 0, 0));
            assert_eq!((stats.datagrams_to_server, stats.datagrams_to_client), (80, 80));
            assert_eq!(stats.active, 0, "stopping closes every flow");
        })
        .await;
}

#[tokio::test(flavor = "current_thread")]
async fn per_datagram_mode_spreads_one_client_over_both_servers() {
    LocalSet::new()
        .run_until(async {
            let servers = vec![echo_server("a").await, echo_server("b").await];
            let opts = UdpOptions { per_datagram: true, ..UdpOptions::default() };
            let running = start_relay(opts, servers).await;
            let socket = client().await;
            let mut used = HashSet::new();
            for k in 0..20 {
                used.insert(exchange(&socket, running.addr, &format!("d{k}")).await);
            }
            assert_eq!(used.len(), 2, "datagrams went to both servers");
            let stats = stop(running).await;
            assert_eq!((stats.created, stats.datagrams_to_client), (1, 20));
        })
        .await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_full_table_refuses_a_new_client_and_serves_the_others() {
    LocalSet::new()
        .run_until(async {
            let servers = vec![echo_server("a").await, echo_server("b").await];
            let opts = UdpOptions { max_flows: 2, ..UdpOptions::default() };
            let running = start_relay(opts, servers).await;
            let (one, two, three) = (client().await, client().await, client().await);
            let first = [exchange(&one, running.addr, "1").await, exchange(&two, running.addr, "2").await];

            three.send_to(b"3", running.addr).await.expect("send");
            let mut waited = 0;
            while running.relay.stats().refused == 0 {
                assert!(waited < 1000, "the relay never saw the third client");
                tokio::time::sleep(Duration::from_millis(5)).await;
                waited += 1;
            }
            let mut buf = [0; 64];
            assert!(three.try_recv_from(&mut buf).is_err(), "no reply for a refused client");

            let again = [exchange(&one, running.addr, "1b").await, exchange(&two, running.addr, "2b").await];
            assert_eq!(first, again, "existing flows keep their servers");
            let stats = stop(running).await;
            assert_eq!((stats.created, stats.refused), (2, 1));
        })
        .await;
}
