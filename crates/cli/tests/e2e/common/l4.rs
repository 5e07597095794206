//! Layer-4 test peers: a TCP server that names itself, and the first bytes a Remote
//! Desktop client sends (an X.224 Connection Request with its `mstshash` cookie).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::Duration;

use super::PATIENCE;

/// A TCP server that reads one TPKT packet (RDP) or TLS record, or else one line,
/// and answers with its one-byte name followed by the bytes
/// it received, then closes.
pub fn tagged_server(name: u8) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            thread::spawn(move || {
                let _ = stream.set_read_timeout(Some(PATIENCE));
                let (mut got, mut buf) = (Vec::new(), [0u8; 4096]);
                loop {
                    let complete = match got.first() {
                        None => false,
                        Some(3) => got.len() >= packet_len(&got, 2, 0),
                        Some(0x16) => got.len() >= packet_len(&got, 3, 5),
                        Some(_) => got.ends_with(b"\n"),
                    };
                    if complete {
                        break;
                    }
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let mut reply = vec![name];
                reply.extend_from_slice(&got);
                let _ = stream.write_all(&reply);
            });
        }
    });
    addr
}

/// The length a packet's header announces (a big-endian u16 at `at`, plus `plus`),
/// or, while the header is incomplete, more than has been read.
pub fn packet_len(got: &[u8], at: usize, plus: usize) -> usize {
    match got.get(at..at + 2) {
        Some(l) => usize::from(u16::from_be_bytes([l[0], l[1]])) + plus,
        None => at + 2,
    }
}

/// An X.224 Connection Request in a TPKT packet as a Remote Desktop client sends it:
/// the `mstshash` cookie line (when `user` is given) and an RDP negotiation request
/// for TLS and CredSSP.
pub fn rdp_request(user: Option<&str>) -> Vec<u8> {
    let mut data = Vec::new();
    if let Some(user) = user {
        data.extend_from_slice(format!("Cookie: mstshash={user}\r\n").as_bytes());
    }
    data.extend_from_slice(&[0x01, 0x00, 0x08, 0x00, 0x03, 0x00, 0x00, 0x00]);
    let len = 4 + 7 + data.len();
    let mut packet = vec![0x03, 0x00];
    packet.extend_from_slice(&(len as u16).to_be_bytes());
    packet.push((6 + data.len()) as u8);
    packet.extend_from_slice(&[0xE0, 0x00, 0x00, 0x00, 0x00, 0x00]);
    packet.extend_from_slice(&data);
    packet
}

/// Sends `first` to `to` (in two pieces when `split`), and returns the name of the
/// server that answered, checking it received exactly those bytes.
pub fn through(to: SocketAddr, first: &[u8], split: bool) -> u8 {
    let mut stream = TcpStream::connect(to).expect("connect");
    stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
    stream.set_nodelay(true).expect("nodelay");
    if split {
        stream.write_all(&first[..3]).expect("send");
        thread::sleep(Duration::from_millis(50));
        stream.write_all(&first[3..]).expect("send");
    } else {
        stream.write_all(first).expect("send");
    }
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply).expect("reply");
    assert_eq!(reply.get(1..), Some(first), "the server received the client's bytes unchanged");
    reply[0]
}
