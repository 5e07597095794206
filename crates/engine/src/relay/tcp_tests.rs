//! TCP relay tests over real loopback sockets: bulk both ways (splice and
//! buffered), half-close each way, idle timeout and drain through a worker's
//! idle table and its expiry task, resets. Each test asserts what arrived and
//! why the relay ended, never how fast.

use std::cell::Cell;
use std::future::Future;
use std::io;
use std::time::Duration;

use socket2::SockRef;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use super::tcp::{relay, End, Relay, RelayOptions, RelayOutcome, Watch};
use crate::idle::{self, Table};

/// A connected pair of loopback sockets.
async fn pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let (a, b) = tokio::join!(TcpStream::connect(addr), listener.accept());
    (a.expect("connect"), b.expect("accept").0)
}

/// The client, the server, and the two proxy-side ends the relay joins.
async fn setup() -> (TcpStream, TcpStream, TcpStream, TcpStream) {
    let (client, proxy_client) = pair().await;
    let (proxy_server, server) = pair().await;
    (client, server, proxy_client, proxy_server)
}

/// What a worker gives its relays: an idle table, its expiry task, the
/// drain and reload notifications and whether relays may stay.
#[derive(Default)]
struct Worker {
    table: Table,
    drain: Notify,
    reloaded: Notify,
    leaving: Cell<bool>,
}

impl Worker {
    /// Runs `relay` (made with this worker's [`Watch`]) beside the table's
    /// expiry task, as a worker's runtime does, until it ends.
    async fn run(&self, client: TcpStream, server: TcpStream, options: RelayOptions) -> RelayOutcome {
        let stay = || !self.leaving.get();
        let watch = Watch { table: &self.table, stay: &stay };
        tokio::select! {
            out = relay(client, server, options, watch) => out,
            () = idle::run(&self.table, &self.drain, &self.reloaded) => unreachable!("the expiry never ends"),
        }
    }

    /// What a worker does when it starts to drain.
    fn start_drain(&self) {
        self.leaving.set(true);
        self.drain.notify_waiters();
    }
}

/// Relays between `client` and `server` on a worker of its own.
async fn run_relay(client: TcpStream, server: TcpStream, options: RelayOptions) -> RelayOutcome {
    Worker::default().run(client, server, options).await
}

fn opts(zero_copy: bool) -> RelayOptions {
    RelayOptions { zero_copy, idle: Duration::from_secs(30), ..RelayOptions::default() }
}

/// Fails the test instead of hanging it if the relay never ends.
async fn bounded<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(120), f).await.expect("test did not finish")
}

/// Word `k` of the pseudo-random stream `seed` (splitmix64).
fn word(seed: u64, k: u64) -> u64 {
    let mut z = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(k.wrapping_mul(0xbf58_476d_1ce4_e5b9));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Fills `buf` with bytes `offset..` of the stream `seed`.
fn noise(seed: u64, offset: u64, buf: &mut [u8]) {
    let (mut pos, mut out) = (offset, 0);
    while out < buf.len() {
        let bytes = word(seed, pos / 8).to_le_bytes();
        let skip = (pos % 8) as usize;
        let take = (8 - skip).min(buf.len() - out);
        buf[out..out + take].copy_from_slice(&bytes[skip..skip + take]);
        out += take;
        pos += take as u64;
    }
}

/// Writes `len` bytes of the stream `seed`, then half-closes.
async fn send_noise(w: &mut (impl AsyncWrite + Unpin), seed: u64, len: u64) -> io::Result<()> {
    let mut buf = vec![0; 64 * 1024];
    let mut sent = 0;
    while sent < len {
        let n = (len - sent).min(buf.len() as u64) as usize;
        noise(seed, sent, &mut buf[..n]);
        w.write_all(&buf[..n]).await?;
        sent += n as u64;
    }
    w.shutdown().await
}

/// Reads to EOF, checking every byte against the stream `seed`; returns the
/// count.
async fn recv_checked(r: &mut (impl AsyncRead + Unpin), seed: u64) -> io::Result<u64> {
    let (mut buf, mut want) = (vec![0; 64 * 1024], vec![0; 64 * 1024]);
    let mut got = 0u64;
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            return Ok(got);
        }
        noise(seed, got, &mut want[..n]);
        assert!(buf[..n] == want[..n], "stream {seed} differs within bytes {got}..{}", got + n as u64);
        got += n as u64;
    }
}

/// `up` bytes client → server and `down` bytes server → client at the same
/// time, every byte checked.
async fn bulk(options: RelayOptions, up: u64, down: u64) {
    let (mut client, mut server, pc, ps) = setup().await;
    let (mut cr, mut cw) = client.split();
    let (mut sr, mut sw) = server.split();
    let (outcome, up_sent, down_sent, up_got, down_got) = bounded(async {
        tokio::join!(
            run_relay(pc, ps, options),
            send_noise(&mut cw, 1, up),
            send_noise(&mut sw, 2, down),
            recv_checked(&mut sr, 1),
            recv_checked(&mut cr, 2),
        )
    })
    .await;
    up_sent.expect("client sends");
    down_sent.expect("server sends");
    assert_eq!(up_got.expect("server receives"), up);
    assert_eq!(down_got.expect("client receives"), down);
    assert_eq!(outcome.end, End::Closed);
    assert_eq!((outcome.client_to_server, outcome.server_to_client), (up, down));
    assert_eq!(outcome.zero_copy, options.zero_copy && cfg!(target_os = "linux"));
}

#[tokio::test(flavor = "current_thread")]
async fn bulk_both_ways_with_splice() {
    bulk(opts(true), 64 << 20, 16 << 20).await;
}

#[tokio::test(flavor = "current_thread")]
async fn bulk_both_ways_buffered() {
    bulk(opts(false), 64 << 20, 16 << 20).await;
}

/// Small exchanges both ways stay in buffers even with `zero_copy`: a pipe per
/// direction would cost more system calls than the bytes it moves.
#[tokio::test(flavor = "current_thread")]
async fn small_exchanges_stay_buffered() {
    let (mut client, mut server, pc, ps) = setup().await;
    let exchange = async {
        client.write_all(&[7; 128]).await?;
        let mut got = [0u8; 128];
        server.read_exact(&mut got).await?;
        server.write_all(&got).await?;
        client.read_exact(&mut got).await?;
        client.shutdown().await?;
        server.shutdown().await?;
        io::Result::Ok(got)
    };
    let (outcome, got) = bounded(async { tokio::join!(run_relay(pc, ps, opts(true)), exchange) }).await;
    assert_eq!(got.expect("the exchange completes"), [7; 128]);
    assert_eq!((outcome.end, outcome.client_to_server, outcome.server_to_client), (End::Closed, 128, 128));
    assert!(!outcome.zero_copy, "128 bytes each way took a pipe");
}

/// One-page pipes: every fill leaves the pipe full, so each direction must
/// alternate strictly between filling and draining.
#[tokio::test(flavor = "current_thread")]
async fn bulk_through_one_page_pipes() {
    bulk(RelayOptions { pipe_size: 4096, ..opts(true) }, 8 << 20, 8 << 20).await;
}

/// Buffers far smaller than a socket's: many partial writes.
#[tokio::test(flavor = "current_thread")]
async fn bulk_through_tiny_buffers() {
    bulk(RelayOptions { buffer_size: 1000, ..opts(false) }, 8 << 20, 8 << 20).await;
}

/// The client sends its request and half-closes; the server reads it to EOF
/// (late, so the relay's stage and socket buffers fill up first), then sends
/// a long reply the client must receive in full.
async fn half_close(zero_copy: bool) {
    const REQUEST: u64 = 4 << 20;
    const REPLY: u64 = 8 << 20;
    let (mut client, mut server, pc, ps) = setup().await;
    let (mut cr, mut cw) = client.split();
    let (mut sr, mut sw) = server.split();
    let client_side = async {
        send_noise(&mut cw, 3, REQUEST).await?;
        recv_checked(&mut cr, 4).await
    };
    let server_side = async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let got = recv_checked(&mut sr, 3).await?;
        send_noise(&mut sw, 4, REPLY).await?;
        Ok::<_, io::Error>(got)
    };
    let (outcome, reply, request) =
        bounded(async { tokio::join!(run_relay(pc, ps, opts(zero_copy)), client_side, server_side) }).await;
    assert_eq!(request.expect("server side"), REQUEST);
    assert_eq!(reply.expect("client side"), REPLY);
    assert_eq!(outcome.end, End::Closed);
    assert_eq!((outcome.client_to_server, outcome.server_to_client), (REQUEST, REPLY));
}

#[tokio::test(flavor = "current_thread")]
async fn half_close_passes_through_with_splice() {
    half_close(true).await;
}

#[tokio::test(flavor = "current_thread")]
async fn half_close_passes_through_buffered() {
    half_close(false).await;
}

#[tokio::test(flavor = "current_thread")]
async fn idle_relay_times_out_and_closes_both() {
    for zero_copy in [true, false] {
        let (mut client, mut server, pc, ps) = setup().await;
        let options = RelayOptions { idle: Duration::from_millis(150), ..opts(zero_copy) };
        let peers = async {
            client.write_all(b"hi").await?;
            let mut two = [0; 2];
            server.read_exact(&mut two).await?;
            // Then silence, until the relay gives up and both see the end.
            let (mut a, mut b) = ([0; 8], [0; 8]);
            Ok::<_, io::Error>((client.read(&mut a).await?, server.read(&mut b).await?))
        };
        let (outcome, ends) = bounded(async { tokio::join!(run_relay(pc, ps, options), peers) }).await;
        assert_eq!(outcome.end, End::IdleTimeout);
        assert_eq!(outcome.client_to_server, 2);
        assert_eq!(ends.expect("peers"), (0, 0), "both peers see EOF");
    }
}

/// Reads until the connection ends; `true` if it ended (EOF or an error).
async fn ends(stream: &mut TcpStream) -> bool {
    let mut buf = [0; 1024];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return true,
            Ok(_) => {}
        }
    }
}

/// Resets `stream` (RST instead of FIN).
fn reset(stream: TcpStream) {
    SockRef::from(&stream).set_linger(Some(Duration::ZERO)).expect("linger");
    drop(stream);
}

#[tokio::test(flavor = "current_thread")]
async fn server_reset_ends_both_sides() {
    for zero_copy in [true, false] {
        let (mut client, mut server, pc, ps) = setup().await;
        let client_side = async {
            client.write_all(b"hello").await.expect("client writes");
            ends(&mut client).await
        };
        let server_side = async {
            let mut five = [0; 5];
            server.read_exact(&mut five).await.expect("server reads");
            reset(server);
        };
        let (outcome, client_saw_end, ()) =
            bounded(async { tokio::join!(run_relay(pc, ps, opts(zero_copy)), client_side, server_side) }).await;
        assert_eq!(outcome.end, End::ServerReset);
        assert_eq!(outcome.client_to_server, 5);
        assert!(client_saw_end);
    }
}

#[tokio::test(flavor = "current_thread")]
async fn client_reset_ends_both_sides() {
    for zero_copy in [true, false] {
        let (mut client, mut server, pc, ps) = setup().await;
        let server_side = async {
            server.write_all(b"banner").await.expect("server writes");
            ends(&mut server).await
        };
        let client_side = async {
            let mut six = [0; 6];
            client.read_exact(&mut six).await.expect("client reads");
            reset(client);
        };
        let (outcome, server_saw_end, ()) =
            bounded(async { tokio::join!(run_relay(pc, ps, opts(zero_copy)), server_side, client_side) }).await;
        assert_eq!(outcome.end, End::ClientReset);
        assert_eq!(outcome.server_to_client, 6);
        assert!(server_saw_end);
    }
}

/// Segments `stream` has received so far (Linux `TCP_INFO`). No safe
/// wrapper of `TCP_INFO` is at hand (socket2 and rustix have none); a read-only
/// getsockopt into plain data, in tests only.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub(crate) fn segments_in(stream: &TcpStream) -> u32 {
    use std::os::fd::AsRawFd;
    // SAFETY: `tcp_info` is plain data, and the kernel writes at most `len` bytes of it.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: a valid socket descriptor, and `info`/`len` describe a buffer of that size.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0, "TCP_INFO: {}", io::Error::last_os_error());
    info.tcpi_segs_in
}

/// A server that answers and closes at once: its last bytes and its FIN reach
/// the client in one segment (the relay reads the FIN before writing the
/// bytes, holds them with MSG_MORE, and the half-close carries them).
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_fin_that_came_with_the_last_bytes_leaves_with_them() {
    let (mut client, mut server, proxy_client, proxy_server) = setup().await;
    server.write_all(b"the whole answer").await.expect("write");
    server.shutdown().await.expect("shutdown");
    drop(server);
    // Both the bytes and the FIN are at the proxy's socket before the relay
    // first polls it, so its first readiness reports the half-close too.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let before = segments_in(&client);
    let read = async {
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.expect("read");
        let segments = segments_in(&client) - before;
        client.shutdown().await.expect("shutdown");
        (got, segments)
    };
    let (outcome, (got, segments)) =
        bounded(async { tokio::join!(run_relay(proxy_client, proxy_server, opts(false)), read) }).await;
    assert_eq!(got, b"the whole answer");
    assert_eq!(segments, 1, "the answer and the FIN in one segment");
    assert_eq!((outcome.end, outcome.server_to_client), (End::Closed, 16));
}

/// The server half-closes first (a greeting, then FIN) while the client goes
/// on sending: the client sees the greeting and the end, and the server still
/// receives everything the client sends afterwards.
async fn server_half_closes_first(zero_copy: bool) {
    const REQUEST: u64 = 4 << 20;
    let (mut client, mut server, pc, ps) = setup().await;
    let (mut cr, mut cw) = client.split();
    let (mut sr, mut sw) = server.split();
    let server_side = async {
        sw.write_all(b"greeting").await?;
        sw.shutdown().await?;
        recv_checked(&mut sr, 5).await
    };
    let client_side = async {
        let mut got = Vec::new();
        cr.read_to_end(&mut got).await?;
        send_noise(&mut cw, 5, REQUEST).await?;
        Ok::<_, io::Error>(got)
    };
    let (outcome, request, greeting) =
        bounded(async { tokio::join!(run_relay(pc, ps, opts(zero_copy)), server_side, client_side) }).await;
    assert_eq!(greeting.expect("client side"), b"greeting");
    assert_eq!(request.expect("server side"), REQUEST);
    assert_eq!(outcome.end, End::Closed);
    assert_eq!((outcome.client_to_server, outcome.server_to_client), (REQUEST, 8));
}

#[tokio::test(flavor = "current_thread")]
async fn a_server_half_close_passes_through_with_splice() {
    server_half_closes_first(true).await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_server_half_close_passes_through_buffered() {
    server_half_closes_first(false).await;
}

/// A drain ends a quiet relay long before its idle timeout: both peers see
/// the end, the outcome says why, and the bytes moved before are counted.
#[tokio::test(flavor = "current_thread")]
async fn a_drain_ends_a_quiet_relay() {
    let worker = Worker::default();
    let (mut client, mut server, pc, ps) = setup().await;
    let options = RelayOptions { idle: Duration::from_secs(600), ..opts(false) };
    let peers = async {
        client.write_all(b"ping").await?;
        let mut four = [0; 4];
        server.read_exact(&mut four).await?;
        server.write_all(b"pong").await?;
        client.read_exact(&mut four).await?;
        worker.start_drain();
        let (mut a, mut b) = ([0; 8], [0; 8]);
        Ok::<_, io::Error>((client.read(&mut a).await?, server.read(&mut b).await?))
    };
    let (outcome, ends) = bounded(async { tokio::join!(worker.run(pc, ps, options), peers) }).await;
    assert_eq!(ends.expect("peers"), (0, 0), "both peers see EOF");
    assert_eq!(outcome.end, End::Drained);
    assert_eq!((outcome.client_to_server, outcome.server_to_client), (4, 4));
    assert!(worker.table.is_empty(), "the relay's entry left the table with it");
}

/// A relay is one small future: its sockets, stages, counters and the key
/// of its table entry; no timer and no future per direction. A bound with
/// room for compiler changes, so that a timer or a per-direction future put
/// back fails here rather than as memory per connection in the bench.
#[test]
fn a_relay_is_a_small_future() {
    let size = std::mem::size_of::<Relay<'static>>();
    assert!(size <= 320, "a relay is {size} bytes");
}
