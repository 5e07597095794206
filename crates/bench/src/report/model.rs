//! Derived figures: what the report shows of each cell (medians and spreads over the
//! runs), the order of tests, sizes and targets, the tests' names, and number
//! formatting shared by the Markdown, HTML and comparison writers.

use std::collections::BTreeSet;

use crate::results::{Measurement, Outcome, Results, TestKind, TestResult};

/// The size the summary calls "128 B".
pub(crate) const SMALL: u64 = 128;
/// The size the summary calls "128 KB" (the F5 appendix's 128 KB, in KiB).
pub(crate) const LARGE: u64 = 128 * 1024;

/// Median, minimum and maximum of a figure over a cell's runs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Spread {
    /// Median (mean of the middle two for an even count).
    pub median: f64,
    /// Smallest run.
    pub min: f64,
    /// Largest run.
    pub max: f64,
}

impl Spread {
    /// The spread of `values`; `None` when there are none.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        Some(Spread { median, min: v[0], max: v[n - 1] })
    }

    /// Whether the two ranges `[min, max]` are disjoint: a difference larger than the runs' spread.
    pub fn disjoint(&self, other: &Spread) -> bool {
        self.max < other.min || other.max < self.min
    }
}

/// What the report shows of one measured cell.
#[derive(Debug, Clone, Default)]
pub(crate) struct Figures {
    /// Measured runs.
    pub runs: usize,
    /// Requests per second.
    pub rps: Option<Spread>,
    /// Response payload megabytes (10^6) per second.
    pub mb_per_s: Option<Spread>,
    /// Proxy CPU µs per request; `None` for the baseline (no proxy).
    pub cpu_us: Option<Spread>,
    /// Of which in user space (`utime`), µs per request; `None` in older files.
    pub user_us: Option<Spread>,
    /// Of which in the kernel (`stime`), µs per request; `None` in older files.
    pub kernel_us: Option<Spread>,
    /// The system calls counted on the cell's extra run.
    pub syscalls: Option<crate::results::Syscalls>,
    /// Requests per proxy CPU-second.
    pub per_cpu_s: Option<Spread>,
    /// Median of the runs' p50 latency (µs).
    pub p50_us: Option<f64>,
    /// Median of the runs' p99 latency (µs).
    pub p99_us: Option<f64>,
    /// Failed requests over all runs.
    pub errors: u64,
    /// Number of runs in which the generator was saturated.
    pub saturated_runs: usize,
    /// Fraction of the machine limit that bounds the figure.
    pub limit_fraction: Option<f64>,
    /// Median connections held (concurrency test).
    pub connections: Option<f64>,
    /// Median proxy memory per connection, bytes (concurrency test).
    pub memory_per_connection: Option<f64>,
    /// What the failover test saw (its first run).
    pub failover: Option<crate::results::Failover>,
    /// Compressed bytes received / original bytes (compression tests).
    pub compression_ratio: Option<Spread>,
    /// The cell's warnings.
    pub flags: Vec<String>,
}

impl Figures {
    /// Derives the figures of a measured cell.
    pub fn of(m: &Measurement) -> Figures {
        let runs = &m.runs;
        let positive = |f: fn(&crate::results::RunFigures) -> f64| {
            let v: Vec<f64> = runs.iter().map(f).filter(|x| *x > 0.0).collect();
            Spread::of(v)
        };
        Figures {
            runs: runs.len(),
            rps: Spread::of(runs.iter().map(|r| r.rps)),
            mb_per_s: Spread::of(runs.iter().map(|r| r.bytes_per_s / 1e6)),
            cpu_us: positive(|r| r.proxy_cpu_us_per_request),
            user_us: per_request(runs, |r| r.proxy_user_cpu_s),
            kernel_us: per_request(runs, |r| r.proxy_kernel_cpu_s),
            syscalls: m.syscalls.clone(),
            per_cpu_s: positive(|r| r.requests_per_cpu_s),
            p50_us: Spread::of(runs.iter().map(|r| r.latency.p50_us).filter(|x| *x > 0.0)).map(|s| s.median),
            p99_us: Spread::of(runs.iter().map(|r| r.latency.p99_us).filter(|x| *x > 0.0)).map(|s| s.median),
            errors: runs.iter().map(|r| r.errors).sum(),
            saturated_runs: runs.iter().filter(|r| r.generator_saturated).count(),
            limit_fraction: m.limit_fraction,
            connections: Spread::of(runs.iter().map(|r| r.connections as f64)).map(|s| s.median),
            memory_per_connection: Spread::of(runs.iter().filter_map(|r| r.memory_per_connection_bytes))
                .map(|s| s.median),
            failover: runs.iter().find_map(|r| r.failover.clone()),
            compression_ratio: Spread::of(runs.iter().filter_map(|r| r.compression_ratio)),
            flags: m.flags.clone(),
        }
    }
}

/// A peer's CPU per request over switchyard's, round by round: a test's repeats run the
/// targets in turn (switchyard's run *i*, then each peer's run *i*), so the two runs of one
/// round saw the same minute of a shared machine, and their ratio drifts far less than
/// either figure does. Median and range over the rounds where both have a figure; `None`
/// without one.
pub(crate) fn paired_efficiency(switchyard: &Measurement, peer: &Measurement) -> Option<Spread> {
    let cpu = |r: &crate::results::RunFigures| Some(r.proxy_cpu_us_per_request).filter(|x| *x > 0.0);
    Spread::of(switchyard.runs.iter().zip(&peer.runs).filter_map(|(a, b)| Some(cpu(b)? / cpu(a)?)))
}

/// A part of the proxy's CPU time (`part` of a run, seconds) per request, in µs, over
/// the runs that have it and completed requests.
fn per_request(
    runs: &[crate::results::RunFigures],
    part: fn(&crate::results::RunFigures) -> Option<f64>,
) -> Option<Spread> {
    Spread::of(runs.iter().filter(|r| r.requests > 0).filter_map(|r| Some(part(r)? * 1e6 / r.requests as f64)))
}

/// A cell as the report sees it.
#[derive(Debug, Clone)]
pub(crate) enum View {
    /// Measured, with its figures.
    Measured(Box<Figures>),
    /// Not supported by the target, with the reason.
    NotSupported(String),
    /// Failed, with the reason.
    Failed(String),
}

impl View {
    /// The view of a cell's outcome.
    pub fn of(outcome: &Outcome) -> View {
        match outcome {
            Outcome::Measured(m) => View::Measured(Box::new(Figures::of(m))),
            Outcome::NotSupported { reason } => View::NotSupported(reason.clone()),
            Outcome::Failed { reason } => View::Failed(reason.clone()),
        }
    }

    /// The figures, when measured.
    pub fn figures(&self) -> Option<&Figures> {
        match self {
            View::Measured(f) => Some(f),
            _ => None,
        }
    }

    /// One line saying why there are no figures ("not supported: …", "failed: …").
    pub fn reason(&self) -> Option<String> {
        match self {
            View::Measured(_) => None,
            View::NotSupported(r) => Some(format!("not supported: {r}")),
            View::Failed(r) => Some(format!("failed: {r}")),
        }
    }
}

/// Tests in the order the run produced them, each once.
pub(crate) fn tests_in_order(r: &Results) -> Vec<TestKind> {
    let mut seen = BTreeSet::new();
    r.tests.iter().map(|t| t.test).filter(|t| seen.insert(*t)).collect()
}

/// Sizes of one test, ascending (`None` first).
pub(crate) fn sizes_of(r: &Results, test: TestKind) -> Vec<Option<u64>> {
    let set: BTreeSet<Option<u64>> = r.tests.iter().filter(|t| t.test == test).map(|t| t.size).collect();
    set.into_iter().collect()
}

/// The name of the floor target (a minimal forwarder, see `crate::floor`).
pub(crate) const FLOOR: &str = "floor";

/// The name of the floor on io_uring (see `crate::floor_uring`).
pub(crate) const FLOOR_URING: &str = "floor-uring";

/// Whether a target is one of the bench's own minimal forwarders (not a peer).
pub(crate) fn is_floor(name: &str) -> bool {
    name == FLOOR || name == FLOOR_URING
}

/// Rank of a target name: switchyard first, then the peers, the floors, the baseline last.
fn target_rank(name: &str) -> u8 {
    match name {
        "switchyard" => 0,
        FLOOR | FLOOR_URING => 2,
        "direct" => 3,
        _ => 1,
    }
}

/// Target names in report order: switchyard, the peers as listed, the floor, the `direct`
/// baseline last.
pub(crate) fn targets_in_order(r: &Results) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let all = r.targets.iter().map(|t| t.name.as_str()).chain(r.tests.iter().map(|t| t.target.as_str()));
    for n in all {
        if !names.iter().any(|x| x == n) {
            names.push(n.to_string());
        }
    }
    names.sort_by_key(|n| target_rank(n));
    names
}

/// The peers of the run (targets other than switchyard and the baseline).
pub(crate) fn peers(r: &Results) -> Vec<String> {
    targets_in_order(r).into_iter().filter(|n| target_rank(n) == 1).collect()
}

/// Every (size, target, cell) of `test` in report order: sizes ascending,
/// then targets in [`targets_in_order`]; absent cells are skipped.
pub(crate) fn cells_in_order(r: &Results, test: TestKind) -> Vec<(Option<u64>, String, &TestResult)> {
    let targets = targets_in_order(r);
    let mut out = Vec::new();
    for size in sizes_of(r, test) {
        for target in &targets {
            if let Some(c) = cell(r, test, size, target) {
                out.push((size, target.clone(), c));
            }
        }
    }
    out
}

/// The cell of (test, size, target), if the results hold it.
pub(crate) fn cell<'a>(r: &'a Results, test: TestKind, size: Option<u64>, target: &str) -> Option<&'a TestResult> {
    r.tests.iter().find(|t| t.test == test && t.size == size && t.target == target)
}

/// Human name of a test.
pub(crate) fn test_name(t: TestKind) -> &'static str {
    match t {
        TestKind::L4Cps => "L4 connections per second",
        TestKind::L4Throughput => "L4 throughput",
        TestKind::L7Cps => "L7 connections per second (1 request/connection)",
        TestKind::L7Rps => "L7 requests per second (10 requests/connection, .png rule)",
        TestKind::L7KeepaliveRps => "L7 keep-alive requests per second (.png rule)",
        TestKind::L7KeepaliveAccessLog => "L7 keep-alive with access log (.png rule)",
        TestKind::L7Throughput => "L7 throughput",
        TestKind::L7CookiePersistence => "L7 cookie persistence",
        TestKind::TlsHandshakeRsa2048 => "TLS handshakes per second, RSA-2048",
        TestKind::TlsHandshakeEcdsaP256 => "TLS handshakes per second, ECDSA P-256",
        TestKind::TlsBulk => "TLS bulk throughput",
        TestKind::CompressionGzip => "gzip compression",
        TestKind::CompressionBrotli => "brotli compression",
        TestKind::CompressionZstd => "zstd compression",
        TestKind::CacheHit => "Cache hits",
        TestKind::ConcurrentConnections => "Concurrent connections",
        TestKind::ConcurrentConnectionsL4 => "Concurrent connections at L4",
        TestKind::UdpFrames => "UDP forwarding per frame size",
        TestKind::UdpImix => "UDP forwarding, IMIX",
        TestKind::L7Failover => "L7 failover: a server killed under load",
        TestKind::Http2Tls => "HTTP/2 over TLS requests per second",
        TestKind::Http2Clear => "HTTP/2 clear text (h2c) requests per second",
        TestKind::Http2Upstream => "HTTP/2 to the servers requests per second",
        TestKind::L7KeepaliveTracedOnePercent => "L7 keep-alive with tracing, 1 % sampled (.png rule)",
        TestKind::L7KeepaliveTracedAll => "L7 keep-alive with tracing, every request sampled (.png rule)",
        TestKind::Http3 => "HTTP/3 requests per second",
    }
}

/// Short name of a test, for chart labels and compact tables.
pub(crate) fn test_short(t: TestKind) -> &'static str {
    match t {
        TestKind::L4Cps => "L4 CPS",
        TestKind::L4Throughput => "L4 thr.",
        TestKind::L7Cps => "L7 CPS",
        TestKind::L7Rps => "L7 RPS",
        TestKind::L7KeepaliveRps => "L7 KA RPS",
        TestKind::L7KeepaliveAccessLog => "L7 KA + log",
        TestKind::L7Throughput => "L7 thr.",
        TestKind::L7CookiePersistence => "Cookie",
        TestKind::TlsHandshakeRsa2048 => "TLS RSA",
        TestKind::TlsHandshakeEcdsaP256 => "TLS ECDSA",
        TestKind::TlsBulk => "TLS bulk",
        TestKind::CompressionGzip => "gzip",
        TestKind::CompressionBrotli => "brotli",
        TestKind::CompressionZstd => "zstd",
        TestKind::CacheHit => "Cache",
        TestKind::ConcurrentConnections => "Conns",
        TestKind::ConcurrentConnectionsL4 => "L4 conns",
        TestKind::UdpFrames => "UDP",
        TestKind::UdpImix => "IMIX",
        TestKind::L7Failover => "Failover",
        TestKind::Http2Tls => "h2 TLS",
        TestKind::Http2Clear => "h2c",
        TestKind::Http2Upstream => "h2 → h2",
        TestKind::L7KeepaliveTracedOnePercent => "L7 KA + 1 % traces",
        TestKind::L7KeepaliveTracedAll => "L7 KA + all traces",
        TestKind::Http3 => "h3",
    }
}

/// One sentence defining what a test measures (after the F5 report's appendix).
pub(crate) fn test_definition(t: TestKind) -> &'static str {
    match t {
        TestKind::L4Cps => {
            "A new TCP connection per request (1 request/connection), relayed at L4 without HTTP inspection."
        }
        TestKind::L4Throughput => "100 requests per connection relayed at L4; the figure is payload bytes per second.",
        TestKind::L7Cps => "A new connection per request (1 request/connection), each request inspected and routed.",
        TestKind::L7Rps => {
            "10 requests per connection; every request is inspected and paths ending in `.png` go to the `images` pool."
        }
        TestKind::L7KeepaliveRps => {
            "Unlimited requests per connection with the `.png` rule: the cost of HTTP processing alone."
        }
        TestKind::L7KeepaliveAccessLog => {
            "The L7 keep-alive test with every request written to an access log file (switchyard: JSON lines; \
             HAProxy: `option httplog` on standard output redirected to a file; NGINX: `access_log`, combined \
             format): its difference from L7 keep-alive is the cost of logging."
        }
        TestKind::L7Throughput => "100 requests per connection with L7 processing; payload bytes per second.",
        TestKind::L7CookiePersistence => {
            "10 requests per connection; the proxy inserts a persistence cookie and routes on it."
        }
        TestKind::TlsHandshakeRsa2048 => {
            "One request per connection, full handshake each time (no resumption), RSA-2048 certificate."
        }
        TestKind::TlsHandshakeEcdsaP256 => {
            "One request per connection, full handshake each time (no resumption), ECDSA P-256 certificate."
        }
        TestKind::TlsBulk => "100 requests per TLS connection: symmetric encryption throughput.",
        TestKind::CompressionGzip => {
            "10 requests per connection of ≈75 % compressible HTML (`Accept-Encoding: gzip`), compressed by the \
             proxy with gzip level 1; the ratio is the bytes received over the origin's bytes (lower is better)."
        }
        TestKind::CompressionBrotli => {
            "The gzip test's load with `Accept-Encoding: br`, compressed by the proxy with brotli level 4."
        }
        TestKind::CompressionZstd => {
            "The gzip test's load with `Accept-Encoding: zstd`, compressed by the proxy with zstd level 3."
        }
        TestKind::CacheHit => {
            "Unlimited requests per connection for one cacheable object (`cache-control: public, max-age=3600`) \
             per size, answered from the proxy's cache: the object is fetched once before the run and the \
             origins must see no request during it."
        }
        TestKind::ConcurrentConnections => {
            "Idle keep-alive connections held at once, with the proxy's memory per connection."
        }
        TestKind::ConcurrentConnectionsL4 => {
            "The same idle connections through a layer-4 (TCP relay) service: each client connection holds a \
             connection to a server too, and the memory per connection covers both."
        }
        TestKind::UdpFrames => "UDP datagrams forwarded per Ethernet frame size (64…1518 bytes).",
        TestKind::UdpImix => "UDP datagrams forwarded with the three IMIX frame mixes.",
        TestKind::L7Failover => {
            "Keep-alive load from 8 clients over two servers with an active TCP health check (every 250 ms, \
             fall 2, rise 2; NGINX open source has none and uses its passive check, max_fails=1); one server \
             is killed (SIGKILL) after 3 s and the load goes on for 6 s: how long until the target stops \
             sending requests to it, and how many client requests fail."
        }
        TestKind::Http2Tls => {
            "HTTP/2 over TLS (ALPN `h2`, ECDSA P-256 certificate), 10 concurrent streams on each of the \
             generator's connections, unlimited requests per connection; HTTP/1.1 keep-alive to the servers."
        }
        TestKind::Http2Clear => {
            "HTTP/2 in clear text with prior knowledge (h2c), 10 concurrent streams on each connection, \
             unlimited requests per connection; HTTP/1.1 keep-alive to the servers."
        }
        TestKind::Http2Upstream => {
            "h2c from the generator as in the h2c test, and HTTP/2 (h2c, prior knowledge) from the proxy to \
             the servers: requests of many clients multiplexed over few server connections."
        }
        TestKind::L7KeepaliveTracedOnePercent => {
            "The L7 keep-alive test with OpenTelemetry tracing on, 1 % of requests sampled, spans exported by \
             OTLP/HTTP to an origin: its difference from L7 keep-alive (tracing off) is the cost of tracing."
        }
        TestKind::L7KeepaliveTracedAll => {
            "The L7 keep-alive test with every request traced: spans of the request and its phases exported \
             by OTLP/HTTP in batches off the data path (the exporter thread shares the proxy's core)."
        }
        TestKind::Http3 => {
            "HTTP/3 over QUIC (ALPN `h3`, TLS 1.3, the ECDSA P-256 certificate, no resumption, no 0-RTT) to \
             the proxy, the HTTP/2 over TLS test's load otherwise: 10 concurrent streams on each of the \
             generator's connections, unlimited requests per connection, HTTP/1.1 keep-alive to the servers; \
             the generator is quinn + h3, one UDP socket per generator thread."
        }
    }
}

/// Whether a test is a UDP test (frames rather than requests).
pub(crate) fn is_udp(t: TestKind) -> bool {
    matches!(t, TestKind::UdpFrames | TestKind::UdpImix)
}

/// Formats a size in bytes the way the F5 report names them (128 B, 5 KB, 128 KB, 1 MB).
pub(crate) fn fmt_size(size: Option<u64>) -> String {
    match size {
        None => "—".into(),
        Some(s) if s >= 1024 * 1024 && s % (1024 * 1024) == 0 => format!("{} MB", s / (1024 * 1024)),
        Some(s) if s >= 1024 && s % 1024 == 0 => format!("{} KB", s / 1024),
        Some(s) => format!("{s} B"),
    }
}

/// Formats a size of a UDP test: a frame size, or an IMIX mix's mean frame size.
pub(crate) fn fmt_udp_size(test: TestKind, size: Option<u64>) -> String {
    match (test, size) {
        (TestKind::UdpImix, Some(s)) => format!("IMIX (mean {s} B)"),
        (_, Some(s)) => format!("{s} B frames"),
        (_, None) => "—".into(),
    }
}

/// Formats a number with thousands separators, rounded to an integer at ≥ 100, else
/// with up to 2 significant decimals.
pub(crate) fn fmt_num(x: f64) -> String {
    if !x.is_finite() {
        return "—".into();
    }
    if x.abs() >= 100.0 {
        let n = x.round() as i128;
        let digits = n.unsigned_abs().to_string();
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        if n < 0 {
            out.insert(0, '-');
        }
        out
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// Formats a count with thousands separators.
pub(crate) fn fmt_int(n: u64) -> String {
    if n < 100 {
        n.to_string()
    } else {
        fmt_num(n as f64)
    }
}

/// Formats seconds without trailing zeros: "1 s", "1.5 s".
pub(crate) fn fmt_secs(s: f64) -> String {
    let t = format!("{s:.2}");
    format!("{} s", t.trim_end_matches('0').trim_end_matches('.'))
}

/// Formats an optional figure, "—" when missing.
pub(crate) fn fmt_opt(x: Option<f64>) -> String {
    x.map_or_else(|| "—".into(), fmt_num)
}

/// Formats a latency in µs, switching to ms from 10 ms.
pub(crate) fn fmt_latency(us: Option<f64>) -> String {
    match us {
        None => "—".into(),
        Some(u) if u >= 10_000.0 => format!("{} ms", fmt_num(u / 1000.0)),
        Some(u) => format!("{} µs", fmt_num(u)),
    }
}

/// Formats a byte rate in bytes per second as MB/s or GB/s.
pub(crate) fn fmt_rate(bytes_per_s: f64) -> String {
    if bytes_per_s <= 0.0 || !bytes_per_s.is_finite() {
        "—".into()
    } else if bytes_per_s >= 1e9 {
        format!("{:.2} GB/s", bytes_per_s / 1e9)
    } else {
        format!("{} MB/s", fmt_num(bytes_per_s / 1e6))
    }
}

/// Formats a byte count in KiB/MiB/GiB.
pub(crate) fn fmt_bytes(b: f64) -> String {
    if b >= 1024.0 * 1024.0 * 1024.0 {
        format!("{:.1} GiB", b / (1024.0 * 1024.0 * 1024.0))
    } else if b >= 1024.0 * 1024.0 {
        format!("{:.1} MiB", b / (1024.0 * 1024.0))
    } else if b >= 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        format!("{b:.0} B")
    }
}

/// Formats a ratio as "1.23".
pub(crate) fn fmt_ratio(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.2}")
    } else {
        "—".into()
    }
}

/// The date and time part of an RFC 3339 timestamp, "2025-01-31 14:05 UTC".
pub(crate) fn fmt_when(rfc3339: &str) -> String {
    let t = rfc3339.trim();
    if t.len() >= 16 && t.as_bytes().get(10) == Some(&b'T') {
        format!("{} {} UTC", &t[..10], &t[11..16])
    } else {
        t.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_median_of_odd_and_even_counts() {
        let s = Spread::of([3.0, 1.0, 2.0]).expect("values");
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        let s = Spread::of([4.0, 1.0, 2.0, 3.0]).expect("values");
        assert_eq!(s.median, 2.5);
        assert!(Spread::of([]).is_none());
        assert!(Spread::of([1.0, 2.0]).expect("v").disjoint(&Spread::of([3.0]).expect("v")));
        assert!(!Spread::of([1.0, 3.0]).expect("v").disjoint(&Spread::of([2.0]).expect("v")));
    }

    #[test]
    fn number_and_size_formats() {
        assert_eq!(fmt_num(1234567.4), "1,234,567");
        assert_eq!(fmt_num(28.46), "28.5");
        assert_eq!(fmt_num(1.234), "1.23");
        assert_eq!(fmt_num(-1500.0), "-1,500");
        assert_eq!(fmt_size(Some(128)), "128 B");
        assert_eq!(fmt_size(Some(5 * 1024)), "5 KB");
        assert_eq!(fmt_size(Some(1024 * 1024)), "1 MB");
        assert_eq!(fmt_size(None), "—");
        assert_eq!(fmt_latency(Some(250.0)), "250 µs");
        assert_eq!(fmt_latency(Some(25_000.0)), "25.0 ms");
        assert_eq!(fmt_when("2025-01-31T14:05:09Z"), "2025-01-31 14:05 UTC");
    }
}
