//! The steering program in the kernel: a group of real sockets on loopback,
//! datagrams shaped as QUIC packets sent from many client ports, and which
//! socket each reaches.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

use super::*;

/// A steered group of `n` sockets on a free loopback port, bound in order.
fn group(n: usize) -> (SocketAddr, Vec<QuicSocket>) {
    let probe = UdpSocket::bind("127.0.0.1:0").expect("free port");
    let addr = probe.local_addr().expect("address");
    drop(probe);
    let bind = |reuse_port: bool| {
        let socket = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
        socket.set_reuse_port(reuse_port)?;
        socket.set_nonblocking(true)?;
        socket.bind(&addr.into())?;
        Ok(socket)
    };
    let sockets = QuicGroup::bind(addr, n, bind).expect("bind the group");
    assert!(sockets[0].group.steered, "the kernel took the steering program");
    assert_eq!(sockets.len(), n);
    (addr, sockets)
}

/// The index of the socket `datagram`, sent from `from`, reaches.
fn landing(sockets: &[QuicSocket], from: &UdpSocket, to: SocketAddr, datagram: &[u8]) -> usize {
    from.send_to(datagram, to).expect("send");
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut buf = [0u8; 2048];
    loop {
        for (i, s) in sockets.iter().enumerate() {
            if let Ok((n, _)) = s.socket.recv_from(&mut buf) {
                assert_eq!(&buf[..n], datagram);
                return i;
            }
        }
        assert!(Instant::now() < deadline, "the datagram reached no socket");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A short-header packet for connection ID `cid`.
fn short(cid: &[u8]) -> Vec<u8> {
    let mut p = vec![0x40];
    p.extend_from_slice(cid);
    p.extend_from_slice(&[0xAB; 30]);
    p
}

/// A QUIC v1 long-header packet of `kind` (0 Initial, 1 0-RTT, 2 Handshake)
/// for destination connection ID `dcid`.
fn long(kind: u8, dcid: &[u8]) -> Vec<u8> {
    let mut p = vec![0xC0 | (kind << 4), 0, 0, 0, 1, u8::try_from(dcid.len()).expect("short ID")];
    p.extend_from_slice(dcid);
    p.extend_from_slice(&[8, 1, 2, 3, 4, 5, 6, 7, 8]);
    p.extend_from_slice(&[0xCD; 40]);
    p
}

fn clients(n: usize) -> Vec<UdpSocket> {
    (0..n).map(|_| UdpSocket::bind("127.0.0.1:0").expect("client socket")).collect()
}

#[test]
fn short_and_handshake_packets_reach_the_worker_named_in_their_connection_id() {
    let (addr, sockets) = group(3);
    let mut cids = WorkerCids { index: 0 };
    // From 24 client ports (a 4-tuple hash would spread them), every
    // connection ID lands on its worker's socket.
    for client in clients(24) {
        for worker in 0..3u8 {
            cids.index = worker;
            let cid = cids.generate_cid();
            assert_eq!(cid[0], worker);
            assert_eq!(landing(&sockets, &client, addr, &short(&cid)), usize::from(worker));
            assert_eq!(landing(&sockets, &client, addr, &long(2, &cid)), usize::from(worker), "Handshake packet");
        }
    }
}

#[test]
fn initial_packets_and_unknown_ids_follow_the_four_tuple_hash() {
    let (addr, sockets) = group(3);
    let mut seen = std::collections::HashSet::new();
    for client in clients(24) {
        // The client's own connection ID, whatever its first byte: one socket
        // per client address, the same for its Initial and 0-RTT packets.
        let first = landing(&sockets, &client, addr, &long(0, &[1, 9, 9, 9, 9, 9, 9, 9]));
        assert_eq!(landing(&sockets, &client, addr, &long(0, &[2; 8])), first);
        assert_eq!(landing(&sockets, &client, addr, &long(1, &[0; 8])), first, "0-RTT");
        // A connection ID naming no socket of the group, and a runt.
        assert_eq!(landing(&sockets, &client, addr, &short(&[200, 1, 2, 3, 4, 5, 6, 7])), first);
        assert_eq!(landing(&sockets, &client, addr, &[0x40, 1, 2]), first);
        seen.insert(first);
    }
    assert!(seen.len() > 1, "24 client ports all hashed to one socket of 3: {seen:?}");
}

#[test]
fn a_worker_recognises_only_its_own_connection_ids() {
    let mut cids = WorkerCids { index: 7 };
    let own = cids.generate_cid();
    assert_eq!((own.len(), cids.cid_len()), (CID_LEN, CID_LEN));
    assert!(cids.validate(&own).is_ok());
    assert_ne!(cids.generate_cid(), own, "random after the worker byte");
    let other = WorkerCids { index: 6 };
    assert!(other.validate(&own).is_err());
    assert!(cids.validate(&ConnectionId::new(&[7, 1, 2])).is_err(), "wrong length");
}
