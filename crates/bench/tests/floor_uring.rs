//! The floor on io_uring against the bench's origin simulator over loopback: L7 keep-alive,
//! pipelined and one-request-per-connection exchanges, L4 relays with responses larger
//! than a provided buffer and half-closes; and a clean "not supported" where the kernel
//! refuses io_uring (a seccomp filter on the calling thread makes it refuse here).
//!
//! Where io_uring is not available on the machine running the tests, the relay tests say
//! they skipped.
#![allow(clippy::unwrap_used)]
// tests: a panic is the failure report
// The refusal test installs a seccomp filter with prctl, which only unsafe code can do.
#![allow(unsafe_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

use switchyard_bench::floor::Mode;
use switchyard_bench::floor_uring;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap()
}

fn connect_retrying(addr: SocketAddr) -> TcpStream {
    for _ in 0..300 {
        if let Ok(s) = TcpStream::connect(addr) {
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            return s;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("nothing listens on {addr}");
}

/// Two origins (`a`, `b`) and the floor on io_uring in front of them, or `None` (after
/// saying so) where io_uring is not available.
fn start(mode: Mode) -> Option<SocketAddr> {
    if let Err(e) = floor_uring::probe() {
        eprintln!("skipped: {e}");
        return None;
    }
    let origins: Vec<SocketAddr> = ["a", "b"]
        .into_iter()
        .map(|name| {
            let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
            std::thread::spawn(move || switchyard_bench::origin::run(addr, name, 1, None));
            drop(connect_retrying(addr));
            addr
        })
        .collect();
    let floor = SocketAddr::from(([127, 0, 0, 1], free_port()));
    std::thread::spawn(move || floor_uring::run(floor, origins, mode));
    Some(floor)
}

/// A response as read off the wire: head and body.
struct Response {
    head: String,
    body: Vec<u8>,
}

/// Reads one response framed by its `content-length`, and nothing after it.
fn read_response(s: &mut TcpStream) -> Response {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        // read_exact retries a read a signal interrupted (a socket with a timeout is not
        // restarted after one).
        match s.read_exact(&mut byte) {
            Ok(()) => head.push(byte[0]),
            Err(e) => panic!("closed mid-head after {head:?}: {e}"),
        }
    }
    let head = String::from_utf8(head).unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .and_then(|v| v.trim().parse().ok())
        .expect("a content-length");
    let mut body = vec![0u8; length];
    s.read_exact(&mut body).unwrap();
    Response { head, body }
}

fn get(path: &str, close: bool) -> String {
    let close = if close { "connection: close\r\n" } else { "" };
    format!("GET {path} HTTP/1.1\r\nhost: bench\r\n{close}\r\n")
}

#[test]
fn l7_relays_whole_responses_in_order_over_kept_alive_connections() {
    let Some(floor) = start(Mode::L7) else { return };
    let mut s = connect_retrying(floor);
    // Smaller and larger than a provided buffer (32 KiB), on one connection.
    for size in [128usize, 70_000, 5, 200_000, 0] {
        s.write_all(get(&format!("/x?size={size}"), false).as_bytes()).unwrap();
        let r = read_response(&mut s);
        assert!(r.head.starts_with("HTTP/1.1 200"), "{}", r.head);
        assert_eq!(r.body.len(), size);
    }
    // Two requests in one write: two responses, in order.
    s.write_all(format!("{}{}", get("/p?size=3", false), get("/q?size=9", false)).as_bytes()).unwrap();
    assert_eq!((read_response(&mut s).body.len(), read_response(&mut s).body.len()), (3, 9));
    // A head that comes in two pieces.
    let request = get("/split?size=11", false);
    let (first, second) = request.as_bytes().split_at(10);
    s.write_all(first).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    s.write_all(second).unwrap();
    assert_eq!(read_response(&mut s).body.len(), 11);
    drop(s);

    // A second connection takes over the idle origin connections.
    let mut again = connect_retrying(floor);
    again.write_all(get("/y?size=10", false).as_bytes()).unwrap();
    assert_eq!(read_response(&mut again).body.len(), 10);

    // One request per connection: the response, then the floor's close; the origin
    // connection stays open (it never saw `connection: close`) and serves the next one.
    for i in 0..20 {
        let mut once = connect_retrying(floor);
        once.write_all(get(&format!("/z?size={i}"), true).as_bytes()).unwrap();
        let r = read_response(&mut once);
        assert_eq!(r.body.len(), i);
        assert!(!r.head.to_ascii_lowercase().contains("connection: close"), "{}", r.head);
        let mut rest = Vec::new();
        once.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty(), "nothing after the response, then the close");
    }
}

#[test]
fn l7_clients_at_once_each_get_their_own_responses() {
    let Some(floor) = start(Mode::L7) else { return };
    let clients: Vec<_> = (0..8)
        .map(|c| {
            std::thread::spawn(move || {
                let mut s = connect_retrying(floor);
                for i in 0..50 {
                    let size = 1000 * c + i;
                    s.write_all(get(&format!("/c?size={size}"), false).as_bytes()).unwrap();
                    assert_eq!(read_response(&mut s).body.len(), size);
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
}

#[test]
fn l4_copies_both_ways_and_passes_the_close_on() {
    let Some(floor) = start(Mode::L4) else { return };
    let mut s = connect_retrying(floor);
    for size in [128usize, 200_000, 5] {
        s.write_all(get(&format!("/x?size={size}"), false).as_bytes()).unwrap();
        assert_eq!(read_response(&mut s).body.len(), size);
    }
    s.write_all(format!("{}{}", get("/p?size=3", false), get("/q?size=70000", false)).as_bytes()).unwrap();
    assert_eq!((read_response(&mut s).body.len(), read_response(&mut s).body.len()), (3, 70_000));
    // The client's half-close reaches the origin, whose close comes back.
    s.shutdown(Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());

    // One connection per request, to both origins in turn.
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..20 {
        let mut once = connect_retrying(floor);
        once.write_all(get(&format!("/z?size={i}"), true).as_bytes()).unwrap();
        let r = read_response(&mut once);
        assert_eq!(r.body.len(), i);
        let mut rest = Vec::new();
        once.read_to_end(&mut rest).unwrap();
        seen.extend(r.head.lines().find_map(|l| l.strip_prefix("x-origin: ")).map(str::to_string));
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), ["a", "b"]);
}

/// Makes `io_uring_setup` fail with ENOSYS on the calling thread (and threads it starts),
/// as a kernel without io_uring or a container's seccomp profile does.
fn refuse_io_uring_on_this_thread() {
    use libc::{sock_filter, sock_fprog};
    let nr = libc::SYS_io_uring_setup as u32;
    let filter = [
        // Load the system call number (offset 0 of seccomp_data).
        sock_filter { code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16, jt: 0, jf: 0, k: 0 },
        sock_filter { code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16, jt: 0, jf: 1, k: nr },
        sock_filter { code: libc::BPF_RET as u16, jt: 0, jf: 0, k: libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32 },
        sock_filter { code: libc::BPF_RET as u16, jt: 0, jf: 0, k: libc::SECCOMP_RET_ALLOW },
    ];
    let prog = sock_fprog { len: filter.len() as u16, filter: filter.as_ptr().cast_mut() };
    // SAFETY: prctl reads the program during the call; no-new-privs lets an unprivileged
    // thread install a filter; both apply to this thread only (no TSYNC).
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0, "no_new_privs");
        assert_eq!(
            libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog as *const sock_fprog),
            0,
            "seccomp filter: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[test]
fn a_kernel_that_refuses_io_uring_gets_a_clear_not_supported() {
    let outcome = std::thread::spawn(|| {
        refuse_io_uring_on_this_thread();
        let probe = floor_uring::probe();
        let origin = SocketAddr::from(([127, 0, 0, 1], 9));
        let run = floor_uring::run(SocketAddr::from(([127, 0, 0, 1], free_port())), vec![origin], Mode::L7);
        (probe.map_err(|e| (e.kind(), e.to_string())), run.map_err(|e| (e.kind(), e.to_string())))
    })
    .join()
    .unwrap();
    for result in [outcome.0.map(|_| ()), outcome.1] {
        let (kind, message) = result.expect_err("refused");
        assert_eq!(kind, std::io::ErrorKind::Unsupported, "{message}");
        assert!(message.contains("io_uring is not available here: io_uring_setup"), "{message}");
    }
}
