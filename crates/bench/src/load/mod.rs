//! The load generator: HTTP/1.1 and HTTP/2, clear text and TLS, HTTP/3 over QUIC, closed and
//! open loop, and a UDP datagram generator. Independent of the engine (it shares no code with what it
//! measures).
//!
//! [`run`] spawns `spec.threads` threads, each with its own current-thread tokio runtime
//! (epoll) driving its share of the connections (see `worker.rs`). Latencies go into
//! per-thread HdrHistograms (µs, 3 significant digits) merged at the end; only requests
//! that complete inside the measured window count (warm-up and the grace period after it
//! are discarded). In open loop the rate is split over the threads in proportion to
//! their connections and each request's latency runs from its intended send time (see
//! [`pace`]). The generator's own CPU time over the window is read from
//! `/proc/thread-self` on each of its threads.
//!
//! HTTP/1.1 is hand-written on `httparse` (one write per request, buffers reused; after a
//! response that says `connection: close` it waits up to a second for the server's close
//! before closing its side);
//! HTTP/2 uses the `h2` crate with [`H2_STREAMS_PER_CONNECTION`] concurrent streams per
//! connection; HTTP/3 uses `quinn`, `h3` and `h3-quinn` (the crates the engine uses, none of
//! its code) with as many streams per connection as HTTP/2 and one QUIC endpoint per
//! thread (see `http3.rs`); TLS is rustls with the aws-lc-rs provider (see `tls.rs`).

mod cpu;
mod hist;
mod http1;
mod http2;
mod http3;
pub mod pace;
pub mod search;
pub mod spec;
mod tls;
mod udp;
mod worker;

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use hist::Latency;
pub use spec::*;
pub use udp::{imix, payload_len, run_udp, run_udp_open, udp_echo, DRAIN, ECHO_TIMEOUT, FRAME_OVERHEAD, IMIX_MIXES};
pub use worker::REQUEST_TIMEOUT;

/// Concurrent HTTP/2 and HTTP/3 streams per connection (closed loop: requests in flight
/// per connection; open loop: at most this many per connection).
pub const H2_STREAMS_PER_CONNECTION: usize = 10;

/// After the measured window, how long in-flight requests get to finish (uncounted)
/// before their connections are dropped.
pub const GRACE: Duration = Duration::from_secs(2);

/// Time between `run` being called and traffic starting (threads and runtimes set up).
const SETUP: Duration = Duration::from_millis(20);

/// Runs `spec` to completion (warm-up, then the measured duration) and reports.
///
/// Blocking: spawns `spec.threads` threads (at most one per connection), each with its own
/// current-thread tokio runtime driving many connections, and returns after
/// warm-up + duration (+ at most [`GRACE`]). Safe to call from inside an async runtime's
/// blocking context (it builds its runtimes on its own threads).
///
/// Errors only for an unusable spec (no path, no connection, a bad TLS name or header);
/// failures of the target are counted in [`LoadReport::errors`].
pub fn run(spec: &LoadSpec) -> io::Result<LoadReport> {
    if spec.paths.is_empty() || spec.connections == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a load run needs at least one path and one connection",
        ));
    }
    if let Pace::Open { rate } = spec.pace {
        if !(rate.is_finite() && rate > 0.0) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("open-loop rate {rate} is not positive")));
        }
    }
    let threads = spec.threads.clamp(1, spec.connections);
    let start = Instant::now() + SETUP;
    let measure_start = start + spec.warmup;
    let measure_end = measure_start + spec.duration;
    let window = worker::Window { start, measure_start, measure_end, hard_end: measure_end + GRACE };
    let shared = Arc::new(worker::Shared::new(spec, window)?);

    let shares = pace::split(spec.connections, threads);
    let mut handles = Vec::with_capacity(threads);
    let mut first_user = 0;
    for (i, &conns) in shares.iter().enumerate() {
        let schedule = match spec.pace {
            Pace::Closed => None,
            Pace::Open { rate } => {
                Some(pace::Schedule::new(pace::share_rate(rate, conns, spec.connections), i as f64 / threads as f64))
            }
        };
        let shared = Arc::clone(&shared);
        let handle = std::thread::Builder::new()
            .name(format!("load-{i}"))
            .spawn(move || worker::thread_main(shared, conns, first_user, schedule))?;
        handles.push(handle);
        first_user += conns;
    }

    let mut report = LoadReport { elapsed: spec.duration, ..LoadReport::default() };
    let mut latency = Latency::new();
    let mut failure = None;
    for handle in handles {
        match handle.join() {
            Ok(Ok(stats)) => {
                report.requests += stats.requests;
                report.errors += stats.errors;
                report.connections += stats.connections;
                report.tls_handshakes += stats.tls_handshakes;
                report.tls_resumed += stats.tls_resumed;
                report.tls_suite = report.tls_suite.or(stats.tls_suite);
                report.body_bytes += stats.body_bytes;
                report.encoded_responses += stats.encoded;
                report.cpu_s += stats.cpu.as_secs_f64();
                latency.merge(&stats.latency);
            }
            Ok(Err(e)) => failure = Some(e),
            Err(_) => failure = Some(io::Error::other("a load generator thread panicked")),
        }
    }
    if let Some(e) = failure {
        return Err(e);
    }
    report.latency = latency.percentiles();
    Ok(report)
}
