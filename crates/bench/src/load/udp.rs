//! The UDP datagram generator ([`run_udp`]), its echo origin ([`udp_echo`]) and the IMIX
//! frame-size mixes ([`imix`]).
//!
//! [`run_udp`]: each flow is one socket and a closed loop: send a datagram, wait for its
//! echo (1 s, then it counts as lost), send the next. Datagrams carry a sequence number in
//! their first 8 bytes so a late echo is never taken for the current one.
//!
//! [`run_udp_open`]: open loop at a fixed aggregate rate, the trial of the RFC 2544 search
//! (`search.rs`). Each flow's sender keeps its count of sent frames at `rate / flows ×
//! elapsed` (checked every millisecond, so frames leave in small batches) while a receiver
//! task on the same socket counts echoes; receiving goes on for [`DRAIN`] after sending
//! stops, so frames still in flight are not counted as lost.

use std::io;
use std::net::{SocketAddr, UdpSocket as StdUdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::net::UdpSocket;

use super::hist::Latency;
use super::spec::{UdpReport, UdpSpec};

/// Ethernet (14 + 4 FCS), IPv4 (20) and UDP (8) header bytes of a frame: RFC 2544 frame
/// sizes include the FCS, so a 1518-byte frame carries 1472 bytes of UDP payload (a
/// 1500-byte IP packet).
pub const FRAME_OVERHEAD: usize = 46;
/// How long a datagram's echo is awaited before it counts as lost.
pub const ECHO_TIMEOUT: Duration = Duration::from_secs(1);
/// Smallest payload sent (room for the sequence number).
const MIN_PAYLOAD: usize = 8;
/// Pause after a socket error (e.g. ICMP port unreachable), so a dead target is not spun on.
const ERROR_BACKOFF: Duration = Duration::from_millis(10);

/// How long echoes are still counted after an open-loop trial stops sending.
pub const DRAIN: Duration = Duration::from_millis(200);
/// Pacing tick of the open-loop sender.
const PACE_TICK: Duration = Duration::from_millis(1);
/// Frames an open-loop sender sends before yielding, so its receiver keeps draining the
/// socket buffer during a burst.
const BURST: u64 = 32;

/// The IMIX mixes of the LANCOM seed, in its order: names for [`imix`].
pub const IMIX_MIXES: [&str; 3] = ["imix0", "imix1", "imix2"];

/// The frame sizes of an IMIX mix, in proportion and interleaved (each size spread evenly
/// over the cycle), for [`UdpSpec::frame_sizes`]. `None` for an unknown name.
///
/// The three mixes are those of the LANCOM techpaper "Routing Performance" (seed
/// 001, section "IPSec routing with different IMIXs"):
/// - `imix0`, the IXIA preset: 45 % 64, 20 % 128, 5 % 256, 3 % 512, 2 % 1024, 1 % 1280,
///   24 % 1364 bytes (100 frames a cycle);
/// - `imix1`: 7 × 64, 4 × 570, 1 × 1418 (the simple 7:4:1 IMIX, capped at 1418 bytes, the
///   largest frame that stays under 1518 once IPsec-encrypted);
/// - `imix2`: 58 % 90, 2 % 92, 24 % 594, 16 % 1418 (50 frames a cycle).
///
/// `simple` is the classic simple IMIX (7 × 64, 4 × 594, 1 × 1518; Agilent/Cisco, see
/// RFC 6985's discussion and the "Internet Mix" literature), for unencrypted forwarding.
pub fn imix(name: &str) -> Option<Vec<usize>> {
    let weights: &[(usize, u32)] = match name {
        "imix0" => &[(64, 45), (128, 20), (256, 5), (512, 3), (1024, 2), (1280, 1), (1364, 24)],
        "imix1" => &[(64, 7), (570, 4), (1418, 1)],
        "imix2" => &[(90, 29), (92, 1), (594, 12), (1418, 8)],
        "simple" => &[(64, 7), (594, 4), (1518, 1)],
        _ => return None,
    };
    Some(interleave(weights))
}

/// Smooth weighted round-robin: each size appears `weight` times, spread over the cycle.
fn interleave(weights: &[(usize, u32)]) -> Vec<usize> {
    let total: i64 = weights.iter().map(|&(_, w)| i64::from(w)).sum();
    let mut current = vec![0i64; weights.len()];
    (0..total)
        .map(|_| {
            for (c, &(_, w)) in current.iter_mut().zip(weights) {
                *c += i64::from(w);
            }
            let best = (0..weights.len()).max_by_key(|&i| (current[i], std::cmp::Reverse(i))).unwrap_or(0);
            current[best] -= total;
            weights[best].0
        })
        .collect()
}

/// The UDP payload carried by an Ethernet frame of `frame` bytes.
pub fn payload_len(frame: usize) -> usize {
    frame.saturating_sub(FRAME_OVERHEAD).max(MIN_PAYLOAD)
}

/// Runs `spec` to completion and reports. Blocking: runs on a thread of its own with a
/// current-thread runtime, one task per flow.
pub fn run_udp(spec: &UdpSpec) -> io::Result<UdpReport> {
    if spec.flows == 0 || spec.frame_sizes.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a UDP run needs at least one flow and one frame size",
        ));
    }
    let spec = spec.clone();
    std::thread::Builder::new()
        .name("load-udp".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let local_set = tokio::task::LocalSet::new();
            local_set.block_on(&runtime, udp_run(spec))
        })?
        .join()
        .map_err(|_| io::Error::other("UDP generator thread panicked"))?
}

async fn udp_run(spec: UdpSpec) -> io::Result<UdpReport> {
    let bind: SocketAddr =
        if spec.target.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { (std::net::Ipv6Addr::UNSPECIFIED, 0).into() };
    let start = Instant::now();
    let end = start + spec.duration;
    let sizes: Arc<[usize]> = spec.frame_sizes.iter().map(|&f| payload_len(f)).collect();
    let mut flows = tokio::task::JoinSet::new();
    for flow in 0..spec.flows {
        let socket = UdpSocket::bind(bind).await?;
        socket.connect(spec.target).await?;
        flows.spawn_local(udp_flow(socket, Arc::clone(&sizes), flow, end));
    }
    let mut report = UdpReport::default();
    let mut latency = Latency::new();
    while let Some(flow) = flows.join_next().await {
        let (sent, received, bytes, hist) = flow.map_err(io::Error::other)?;
        report.sent += sent;
        report.received += received;
        report.bytes += bytes;
        latency.merge(&hist);
    }
    report.elapsed = spec.duration;
    report.latency = latency.percentiles();
    Ok(report)
}

/// One flow's closed loop until `end`: (sent, received, payload bytes received, RTTs).
async fn udp_flow(socket: UdpSocket, sizes: Arc<[usize]>, flow: usize, end: Instant) -> (u64, u64, u64, Latency) {
    let largest = sizes.iter().copied().max().unwrap_or(MIN_PAYLOAD);
    let mut out = vec![0xa5u8; largest];
    let mut back = vec![0u8; largest.max(2048)];
    let (mut sent, mut received, mut bytes, mut latency) = (0u64, 0u64, 0u64, Latency::new());
    let mut next = flow % sizes.len();
    let mut seq = (flow as u64) << 40;
    while Instant::now() < end {
        let len = sizes[next];
        next = (next + 1) % sizes.len();
        seq += 1;
        out[..8].copy_from_slice(&seq.to_be_bytes());
        let t0 = Instant::now();
        if socket.send(&out[..len]).await.is_err() {
            tokio::time::sleep(ERROR_BACKOFF).await;
            continue;
        }
        sent += 1;
        let deadline = tokio::time::Instant::from(t0 + ECHO_TIMEOUT);
        loop {
            match tokio::time::timeout_at(deadline, socket.recv(&mut back)).await {
                Ok(Ok(n)) if n >= 8 && back[..8] == seq.to_be_bytes() => {
                    received += 1;
                    bytes += n as u64;
                    latency.record(t0.elapsed().as_micros() as u64);
                    break;
                }
                Ok(Ok(_)) => continue, // a late echo of an earlier datagram
                Ok(Err(_)) => {
                    tokio::time::sleep(ERROR_BACKOFF).await;
                    break;
                }
                Err(_) => break, // lost
            }
        }
    }
    (sent, received, bytes, latency)
}

/// Runs one open-loop trial of `spec` at `rate` frames per second (all flows together) for
/// `spec.duration`, then drains for [`DRAIN`]. `elapsed` is the sending time; `latency` is
/// left empty (an open-loop trial measures loss, not round trips). Blocking, like
/// [`run_udp`].
pub fn run_udp_open(spec: &UdpSpec, rate: f64) -> io::Result<UdpReport> {
    if spec.flows == 0 || spec.frame_sizes.is_empty() || !rate.is_finite() || rate <= 0.0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "an open-loop UDP trial needs a flow, a frame size and a positive rate",
        ));
    }
    let spec = spec.clone();
    std::thread::Builder::new()
        .name("load-udp-open".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let local_set = tokio::task::LocalSet::new();
            local_set.block_on(&runtime, open_run(spec, rate))
        })?
        .join()
        .map_err(|_| io::Error::other("UDP generator thread panicked"))?
}

async fn open_run(spec: UdpSpec, rate: f64) -> io::Result<UdpReport> {
    let bind: SocketAddr =
        if spec.target.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { (std::net::Ipv6Addr::UNSPECIFIED, 0).into() };
    let sizes: Arc<[usize]> = spec.frame_sizes.iter().map(|&f| payload_len(f)).collect();
    let mut sockets = Vec::with_capacity(spec.flows);
    for _ in 0..spec.flows {
        let socket = UdpSocket::bind(bind).await?;
        socket.connect(spec.target).await?;
        sockets.push(Arc::new(socket));
    }
    let per_flow = rate / spec.flows as f64;
    let start = Instant::now();
    let end = start + spec.duration;
    let stop = tokio::time::Instant::from(end + DRAIN);
    let (mut senders, mut receivers) = (tokio::task::JoinSet::new(), tokio::task::JoinSet::new());
    for (flow, socket) in sockets.into_iter().enumerate() {
        receivers.spawn_local(open_receive(Arc::clone(&socket), stop));
        senders.spawn_local(open_send(socket, Arc::clone(&sizes), flow, per_flow, start, end));
    }
    let mut report = UdpReport::default();
    while let Some(sent) = senders.join_next().await {
        report.sent += sent.map_err(io::Error::other)?;
    }
    report.elapsed = start.elapsed().max(spec.duration);
    while let Some(got) = receivers.join_next().await {
        let (received, bytes) = got.map_err(io::Error::other)?;
        report.received += received;
        report.bytes += bytes;
    }
    Ok(report)
}

/// One flow's paced sender until `end`; returns the frames sent. A failed send (e.g. the
/// ICMP error of an earlier frame surfacing) still counts as sent: the frame was offered.
async fn open_send(
    socket: Arc<UdpSocket>,
    sizes: Arc<[usize]>,
    flow: usize,
    rate: f64,
    start: Instant,
    end: Instant,
) -> u64 {
    let largest = sizes.iter().copied().max().unwrap_or(MIN_PAYLOAD);
    let mut out = vec![0xa5u8; largest];
    let mut next = flow % sizes.len();
    let mut sent = 0u64;
    let mut seq = (flow as u64) << 40;
    loop {
        let now = Instant::now();
        if now >= end {
            return sent;
        }
        let due = (rate * (now - start).as_secs_f64()).ceil() as u64;
        let mut burst = 0;
        while sent < due {
            let len = sizes[next];
            next = (next + 1) % sizes.len();
            seq += 1;
            out[..8].copy_from_slice(&seq.to_be_bytes());
            let _ = socket.send(&out[..len]).await;
            sent += 1;
            burst += 1;
            if burst % BURST == 0 {
                tokio::task::yield_now().await;
                if Instant::now() >= end {
                    return sent;
                }
            }
        }
        tokio::time::sleep(PACE_TICK).await;
    }
}

/// One flow's receiver until `stop`: (echoes received, their payload bytes).
async fn open_receive(socket: Arc<UdpSocket>, stop: tokio::time::Instant) -> (u64, u64) {
    let mut back = vec![0u8; 65536];
    let (mut received, mut bytes) = (0u64, 0u64);
    while tokio::time::Instant::now() < stop {
        match tokio::time::timeout_at(stop, socket.recv(&mut back)).await {
            Ok(Ok(n)) => {
                received += 1;
                bytes += n as u64;
            }
            Ok(Err(_)) => tokio::time::sleep(ERROR_BACKOFF).await,
            Err(_) => break,
        }
    }
    (received, bytes)
}

/// A UDP echo server (the origin side of the UDP tests) bound on `addr` (port 0 picks a
/// free port): every datagram is sent back to its sender unchanged. Serves on a thread of
/// its own until `stop` is set (noticed within 100 ms); returns the bound address.
pub fn udp_echo(addr: SocketAddr, stop: Arc<AtomicBool>) -> io::Result<(SocketAddr, JoinHandle<()>)> {
    let socket = StdUdpSocket::bind(addr)?;
    socket.set_read_timeout(Some(Duration::from_millis(100)))?;
    let local = socket.local_addr()?;
    let handle = std::thread::Builder::new().name("udp-echo".into()).spawn(move || {
        let mut buf = vec![0u8; 65536];
        while !stop.load(Ordering::Relaxed) {
            if let Ok((n, peer)) = socket.recv_from(&mut buf) {
                let _ = socket.send_to(&buf[..n], peer);
            }
        }
    })?;
    Ok((local, handle))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(mix: &[usize], size: usize) -> usize {
        mix.iter().filter(|&&s| s == size).count()
    }

    #[test]
    fn imix_proportions() {
        let m0 = imix("imix0").expect("imix0");
        assert_eq!(m0.len(), 100);
        assert_eq!((count(&m0, 64), count(&m0, 1364), count(&m0, 1280)), (45, 24, 1));
        let m1 = imix("imix1").expect("imix1");
        assert_eq!(m1.len(), 12);
        assert_eq!((count(&m1, 64), count(&m1, 570), count(&m1, 1418)), (7, 4, 1));
        assert_eq!(m1.iter().sum::<usize>(), 4146); // mean frame 345.5 bytes
        let m2 = imix("imix2").expect("imix2");
        assert_eq!(m2.len(), 50);
        // 58 % 90, 2 % 92, 24 % 594, 16 % 1418
        assert_eq!([90, 92, 594, 1418].map(|s| count(&m2, s) * 2), [58, 2, 24, 16]);
        let simple = imix("simple").expect("simple");
        assert_eq!((count(&simple, 64), count(&simple, 594), count(&simple, 1518)), (7, 4, 1));
        assert!(imix("nope").is_none());
        assert!(IMIX_MIXES.iter().all(|m| imix(m).is_some()));
    }

    #[test]
    fn imix_is_interleaved() {
        // The 4 × 570 frames of imix1 are spread out, not in one block.
        let m1 = imix("imix1").expect("imix1");
        let at: Vec<usize> = (0..m1.len()).filter(|&i| m1[i] == 570).collect();
        assert!(at.windows(2).all(|w| w[1] - w[0] >= 2), "{m1:?}");
    }

    #[test]
    fn open_loop_trial_on_loopback_loses_nothing() {
        let stop = Arc::new(AtomicBool::new(false));
        let (addr, echo) = udp_echo(([127, 0, 0, 1], 0).into(), Arc::clone(&stop)).expect("echo");
        let spec = UdpSpec { target: addr, frame_sizes: vec![64, 512], flows: 4, duration: Duration::from_millis(300) };
        let r = run_udp_open(&spec, 2_000.0).expect("trial");
        stop.store(true, Ordering::Relaxed);
        let _ = echo.join();
        assert!(r.sent > 0);
        assert_eq!(r.received, r.sent, "no loss at a modest rate");
        let achieved = r.sent as f64 / r.elapsed.as_secs_f64();
        assert!(achieved >= 1_000.0, "at least half the requested rate: {achieved}");
        assert!(achieved <= 2_000.0 * 1.5, "paced, not flat out: {achieved}");
        assert!(run_udp_open(&spec, 0.0).is_err());
    }

    #[test]
    fn payloads() {
        assert_eq!(payload_len(64), 18);
        assert_eq!(payload_len(512), 466);
        assert_eq!(payload_len(1518), 1472);
        assert_eq!(payload_len(10), MIN_PAYLOAD);
    }
}
