//! The cell planner: which tests run, over which sizes, against which targets, how
//! often and for how long, and what the whole run is expected to take.
//!
//! A *cell* is one (test, size, target). Every cell of the plan ends up in the results:
//! measured, `NotSupported` (the target cannot do the test, with the reason) or `Failed`.
//! The planner is pure (no processes, no clock), so it is unit tested.

use std::time::Duration;

use crate::results::TestKind;

/// The response sizes of the F5 appendix (128 B, 5 KB, 16 KB, 32 KB, 128 KB), in bytes.
pub const SIZES: [u64; 5] = [128, 5 * 1024, 16 * 1024, 32 * 1024, 128 * 1024];

/// The sizes of the compression tests: the F5 sizes from 1 KB up (128 B is below every
/// target's minimum worth compressing; switchyard's default `min_size` is 256 bytes).
pub const COMPRESSION_SIZES: [u64; 5] = [1024, 5 * 1024, 16 * 1024, 32 * 1024, 128 * 1024];

/// The sizes `--quick` keeps: the two ends of the envelope.
pub const QUICK_SIZES: [u64; 2] = [128, 128 * 1024];

/// Ethernet frame sizes of the UDP sweep (LANCOM seed).
pub const FRAME_SIZES: [u64; 7] = [64, 128, 256, 512, 1024, 1280, 1518];

/// The three IMIX mixes of the LANCOM seed, as (frame size, share) lists.
pub const IMIX: [&[(usize, usize)]; 3] = [
    &[(64, 45), (128, 20), (256, 5), (512, 3), (1024, 2), (1280, 1), (1364, 24)],
    &[(64, 7), (570, 4), (1418, 1)],
    &[(90, 58), (92, 2), (594, 24), (1418, 16)],
];

/// The frame sequence one IMIX mix cycles through (each size repeated by its share).
pub fn imix_frames(mix: usize) -> Vec<usize> {
    IMIX[mix].iter().flat_map(|&(size, n)| std::iter::repeat_n(size, n)).collect()
}

/// Mean frame size of an IMIX mix, rounded: the `size` of a [`TestKind::UdpImix`] cell.
pub fn imix_mean(mix: usize) -> u64 {
    let frames = imix_frames(mix);
    (frames.iter().sum::<usize>() as f64 / frames.len() as f64).round() as u64
}

/// The targets a run can measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TargetKind {
    /// Client → origin, no proxy: the baseline.
    Direct,
    /// switchyard itself.
    Switchyard,
    /// A second switchyard build, measured as a peer in the same run
    /// (`--peers switchyard=/path/to/binary`): a before/after comparison of two
    /// builds on the same machine at the same time.
    SwitchyardB,
    /// HAProxy (peer).
    Haproxy,
    /// NGINX (peer).
    Nginx,
    /// The floor: a minimal forwarder of the bench's own (`crate::floor`), the least a
    /// relay does for the test on this machine.
    Floor,
    /// The floor on io_uring (`crate::floor_uring`), measured beside the floor on epoll
    /// when asked for (`--peers floor-uring`).
    FloorUring,
}

impl TargetKind {
    /// Name used in results and file names.
    pub fn name(self) -> &'static str {
        match self {
            TargetKind::Direct => "direct",
            TargetKind::Switchyard => "switchyard",
            TargetKind::SwitchyardB => "switchyard-b",
            TargetKind::Haproxy => "haproxy",
            TargetKind::Nginx => "nginx",
            TargetKind::Floor => "floor",
            TargetKind::FloorUring => "floor-uring",
        }
    }

    /// Parses a peer name given to `--peers` (`floor`, always measured, is accepted too;
    /// `switchyard=PATH` is a second switchyard build, see [`second_build`]).
    pub fn peer(name: &str) -> Option<TargetKind> {
        match name.trim() {
            "haproxy" => Some(TargetKind::Haproxy),
            "nginx" => Some(TargetKind::Nginx),
            "floor" => Some(TargetKind::Floor),
            "floor-uring" => Some(TargetKind::FloorUring),
            n if second_build(n).is_some() => Some(TargetKind::SwitchyardB),
            _ => None,
        }
    }

    /// Whether this is a switchyard build (the one under test or the second one).
    pub fn is_switchyard(self) -> bool {
        matches!(self, TargetKind::Switchyard | TargetKind::SwitchyardB)
    }

    /// Whether this is one of the bench's own minimal forwarders.
    pub fn is_floor(self) -> bool {
        matches!(self, TargetKind::Floor | TargetKind::FloorUring)
    }
}

/// The binary of a second switchyard build given to `--peers` as `switchyard=PATH`
/// (measured as `switchyard-b`); `None` for any other peer name or an empty path.
pub fn second_build(peer: &str) -> Option<&str> {
    let path = peer.trim().strip_prefix("switchyard=")?.trim();
    (!path.is_empty()).then_some(path)
}

/// The configuration a test needs from a target; tests sharing one run against the
/// same started processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Setup {
    /// HTTP: pools `main` (2 servers, round robin) and `images`, the `.png` rule.
    L7,
    /// [`Setup::L7`] plus an access log line per request, written to a file.
    L7Log,
    /// TCP relay to pool `main`.
    L4,
    /// [`Setup::L7`] plus cookie-insert persistence.
    Cookie,
    /// HTTPS with the RSA-2048 certificate, no session cache, no tickets.
    TlsRsa,
    /// HTTPS with the ECDSA P-256 certificate, no session cache, no tickets.
    TlsEcdsa,
    /// [`Setup::L7`] plus gzip (level 1) of `text/html`.
    Gzip,
    /// [`Setup::L7`] plus brotli (level 4) of `text/html`.
    Brotli,
    /// [`Setup::L7`] plus zstd (level 3) of `text/html`.
    Zstd,
    /// [`Setup::L7`] plus a response cache.
    Cache,
    /// UDP relay to the echo server.
    Udp,
    /// HTTP: pool `main` over two origins of the target's own, with an active TCP health
    /// check where the target has one (see [`crate::suite::failover`]).
    Failover,
    /// [`Setup::L7`] with HTTP/2 over TLS (ALPN `h2`, the ECDSA P-256 certificate) to clients.
    H2Tls,
    /// [`Setup::L7`] with HTTP/2 in clear text (h2c, prior knowledge) to clients.
    H2c,
    /// [`Setup::H2c`] with HTTP/2 (h2c, prior knowledge) to the servers too.
    H2Upstream,
    /// [`Setup::L7`] plus OpenTelemetry tracing, 1 % of requests sampled, spans exported
    /// by OTLP/HTTP to an origin (which reads and drops them).
    Traced1,
    /// [`Setup::Traced1`] with every request sampled.
    TracedAll,
    /// [`Setup::H2Tls`] with HTTP/3 over QUIC to clients on the same address (UDP side).
    H3,
}

impl Setup {
    /// Short name used in file names.
    pub fn name(self) -> &'static str {
        match self {
            Setup::L7 => "l7",
            Setup::L7Log => "l7-log",
            Setup::L4 => "l4",
            Setup::Cookie => "cookie",
            Setup::TlsRsa => "tls-rsa2048",
            Setup::TlsEcdsa => "tls-ecdsa-p256",
            Setup::Gzip => "gzip",
            Setup::Brotli => "brotli",
            Setup::Zstd => "zstd",
            Setup::Cache => "cache",
            Setup::Udp => "udp",
            Setup::Failover => "failover",
            Setup::H2Tls => "h2-tls",
            Setup::H2c => "h2c",
            Setup::H2Upstream => "h2-upstream",
            Setup::Traced1 => "traced-1pct",
            Setup::TracedAll => "traced-all",
            Setup::H3 => "h3",
        }
    }

    /// The content coding of a compression setup (`gzip`, `br`, `zstd`).
    pub fn coding(self) -> Option<&'static str> {
        match self {
            Setup::Gzip => Some("gzip"),
            Setup::Brotli => Some("br"),
            Setup::Zstd => Some("zstd"),
            _ => None,
        }
    }

    /// Whether the target speaks TLS to clients in this setup.
    pub fn tls(self) -> bool {
        matches!(self, Setup::TlsRsa | Setup::TlsEcdsa | Setup::H2Tls | Setup::H3)
    }

    /// Whether the generator speaks HTTP/2 to the target in this setup.
    pub fn http2(self) -> bool {
        matches!(self, Setup::H2Tls | Setup::H2c | Setup::H2Upstream)
    }

    /// Whether the generator speaks HTTP/3 (QUIC, UDP) to the target in this setup.
    pub fn http3(self) -> bool {
        self == Setup::H3
    }
}

/// One test of the matrix as planned.
#[derive(Debug, Clone)]
pub struct TestPlan {
    /// Which test.
    pub kind: TestKind,
    /// Configuration it needs.
    pub setup: Setup,
    /// Sizes it is run at (`None`: not swept).
    pub sizes: Vec<Option<u64>>,
    /// HTTP requests per connection (`None`: unlimited).
    pub requests_per_connection: Option<u32>,
    /// Measured runs per cell.
    pub repeats: u32,
    /// Headline test: gets latency-at-load points in the full suite.
    pub headline: bool,
}

/// Durations and sizes of the run.
#[derive(Debug, Clone)]
pub struct Timing {
    /// Warm-up before each measured run (discarded).
    pub warmup: Duration,
    /// Each measured run.
    pub duration: Duration,
    /// Each open-loop latency point.
    pub latency_duration: Duration,
    /// Fractions of the measured maximum for latency points (empty: none).
    pub latency_fractions: Vec<f64>,
    /// Closed-loop connections of the generator.
    pub connections: usize,
    /// Idle connections opened by the concurrency test.
    pub idle_connections: usize,
    /// Time spent on each physical-limit measurement.
    pub limit_time: Duration,
    /// Sending time of each open-loop trial of the UDP loss-free rate search.
    pub udp_trial: Duration,
    /// Most trials of one UDP cell's search.
    pub udp_trials: u32,
}

/// The closed-loop UDP run that seeds a cell's search (its rate × 4 is the first trial).
pub const UDP_PROBE: Duration = Duration::from_millis(500);

/// The whole plan.
#[derive(Debug, Clone)]
pub struct Plan {
    /// `--quick`.
    pub quick: bool,
    /// Tests in the order they run.
    pub tests: Vec<TestPlan>,
    /// Durations.
    pub timing: Timing,
    /// Key-exchange group the generator offers in TLS tests.
    pub tls_group: crate::load::KxGroup,
    /// Whether each proxy's system calls are counted on an extra run at the smallest size
    /// of each request test (see [`counts_syscalls`]).
    pub syscalls: bool,
}

/// Seconds of `perf stat`'s set-up before an extra counting run (measured: 2–3 s for the
/// events counted, most of it before the load starts).
const COUNT_SETUP_S: f64 = 3.0;

/// The longest extra run on which system calls are counted.
pub const COUNT_RUN: Duration = Duration::from_secs(2);

/// Whether the floor target runs test `t`: the HTTP/1.1 clear-text tests whose bytes it
/// can move without HTTP logic (L7 keep-alive, RPS, CPS, throughput; L4 CPS, throughput).
pub fn has_floor(t: TestKind) -> bool {
    use TestKind::*;
    matches!(t, L7KeepaliveRps | L7Rps | L7Cps | L7Throughput | L4Cps | L4Throughput)
}

/// Whether a cell gets an extra run on which the proxy's system calls are counted: the
/// smallest size of each request test, for every target with a process.
pub fn counts_syscalls(plan: &Plan, t: &TestPlan, size: Option<u64>, target: TargetKind) -> bool {
    use TestKind::*;
    let request_test =
        !matches!(t.kind, ConcurrentConnections | ConcurrentConnectionsL4 | L7Failover | UdpFrames | UdpImix);
    plan.syscalls && request_test && target != TargetKind::Direct && t.sizes.first() == Some(&size)
}

/// Fixed cost of one measured run beyond warm-up and duration (set-up, teardown, sampling).
const RUN_OVERHEAD_S: f64 = 0.3;
/// Cost of starting, checking and stopping one target for one setup.
const START_S: f64 = 1.5;
/// Time budget of the full suite; [`fit`] shortens runs to stay inside it. (39 minutes
/// since the concurrency test's L4 cell, whose fixed cost runs cannot shorten.)
pub const FULL_BUDGET: Duration = Duration::from_secs(39 * 60);

fn sized(sizes: &[u64]) -> Vec<Option<u64>> {
    sizes.iter().map(|&s| Some(s)).collect()
}

fn test(kind: TestKind, setup: Setup, sizes: Vec<Option<u64>>, rpc: Option<u32>, repeats: u32) -> TestPlan {
    let headline = matches!(kind, TestKind::L7KeepaliveRps | TestKind::L7Rps);
    TestPlan { kind, setup, sizes, requests_per_connection: rpc, repeats, headline }
}

/// The plan for `--quick` or the full suite.
pub fn plan(quick: bool) -> Plan {
    use TestKind::*;
    if quick {
        let s = sized(&QUICK_SIZES);
        return Plan {
            quick,
            tests: vec![
                test(ConcurrentConnections, Setup::L7, vec![None], None, 1),
                test(L7KeepaliveRps, Setup::L7, s.clone(), None, 1),
                test(L7Rps, Setup::L7, s.clone(), Some(10), 1),
                test(L7Cps, Setup::L7, s, Some(1), 1),
                // One more start and one short run: cheap enough for the CI smoke test.
                test(L7KeepaliveAccessLog, Setup::L7Log, sized(&[128]), None, 1),
                // HTTP/2 to the proxy and to the servers, 128 B only: two more starts.
                test(Http2Clear, Setup::H2c, sized(&[128]), None, 1),
                test(Http2Upstream, Setup::H2Upstream, sized(&[128]), None, 1),
                // HTTP/3 beside HTTP/2 over TLS, 128 B only: two more starts.
                test(Http2Tls, Setup::H2Tls, sized(&[128]), None, 1),
                test(Http3, Setup::H3, sized(&[128]), None, 1),
                // Idle connections through a TCP relay, beside the L7 cell: one more start.
                test(ConcurrentConnectionsL4, Setup::L4, vec![None], None, 1),
            ],
            timing: Timing {
                warmup: Duration::from_millis(500),
                duration: Duration::from_millis(1500),
                latency_duration: Duration::from_secs(1),
                latency_fractions: Vec::new(),
                connections: 50,
                idle_connections: 500,
                limit_time: Duration::from_millis(250),
                udp_trial: Duration::from_millis(500),
                udp_trials: 6,
            },
            tls_group: crate::load::KxGroup::X25519,
            syscalls: true,
        };
    }
    let all = sized(&SIZES);
    let frames = sized(&FRAME_SIZES);
    let imix = (0..IMIX.len()).map(|m| Some(imix_mean(m))).collect();
    Plan {
        quick,
        tests: vec![
            test(ConcurrentConnections, Setup::L7, vec![None], None, 1),
            test(L7KeepaliveRps, Setup::L7, all.clone(), None, 3),
            test(L7Rps, Setup::L7, all.clone(), Some(10), 3),
            test(L7Cps, Setup::L7, all.clone(), Some(1), 2),
            test(L7Throughput, Setup::L7, all.clone(), Some(100), 2),
            // After every Setup::L7 test: the runner starts each setup's targets once.
            test(L7KeepaliveAccessLog, Setup::L7Log, sized(&[128]), None, 3),
            // Tracing off is the L7 keep-alive test's figure: the same load, same run.
            test(L7KeepaliveTracedOnePercent, Setup::Traced1, sized(&[128]), None, 3),
            test(L7KeepaliveTracedAll, Setup::TracedAll, sized(&[128]), None, 3),
            test(L4Cps, Setup::L4, all.clone(), Some(1), 2),
            test(L4Throughput, Setup::L4, all.clone(), Some(100), 2),
            test(ConcurrentConnectionsL4, Setup::L4, vec![None], None, 1),
            test(L7CookiePersistence, Setup::Cookie, vec![Some(128 * 1024)], Some(10), 2),
            test(TlsHandshakeRsa2048, Setup::TlsRsa, vec![Some(128)], Some(1), 2),
            test(TlsBulk, Setup::TlsRsa, all.clone(), Some(100), 2),
            test(TlsHandshakeEcdsaP256, Setup::TlsEcdsa, vec![Some(128)], Some(1), 2),
            test(CompressionGzip, Setup::Gzip, sized(&COMPRESSION_SIZES), Some(10), 2),
            // switchyard alone: neither peer has brotli or zstd (see targets.rs).
            test(CompressionBrotli, Setup::Brotli, sized(&COMPRESSION_SIZES), Some(10), 2),
            test(CompressionZstd, Setup::Zstd, sized(&COMPRESSION_SIZES), Some(10), 2),
            test(CacheHit, Setup::Cache, all, None, 2),
            test(UdpFrames, Setup::Udp, frames, None, 1),
            test(UdpImix, Setup::Udp, imix, None, 1),
            test(L7Failover, Setup::Failover, vec![None], None, 1),
            test(Http2Tls, Setup::H2Tls, sized(&QUICK_SIZES), None, 2),
            // Right after HTTP/2 over TLS: the same load over QUIC, same run.
            test(Http3, Setup::H3, sized(&QUICK_SIZES), None, 2),
            test(Http2Clear, Setup::H2c, sized(&QUICK_SIZES), None, 2),
            test(Http2Upstream, Setup::H2Upstream, sized(&QUICK_SIZES), None, 2),
        ],
        timing: Timing {
            warmup: Duration::from_secs(1),
            duration: Duration::from_secs(3),
            latency_duration: Duration::from_secs(2),
            latency_fractions: vec![0.1, 0.5, 0.8],
            connections: 50,
            idle_connections: 8000,
            limit_time: Duration::from_secs(1),
            udp_trial: Duration::from_secs(1),
            udp_trials: 8,
        },
        tls_group: crate::load::KxGroup::X25519,
        syscalls: true,
    }
}

/// Parses `--only` names ([`TestKind::slug`]); an unknown name is an error listing the
/// valid ones.
pub fn parse_only(names: &[String]) -> Result<Vec<TestKind>, String> {
    let mut out = Vec::new();
    for name in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        let kind = TestKind::from_slug(name).ok_or_else(|| {
            let valid: Vec<&str> = TestKind::ALL.iter().map(|k| k.slug()).collect();
            format!("unknown test {name:?}; valid tests: {}", valid.join(", "))
        })?;
        if !out.contains(&kind) {
            out.push(kind);
        }
    }
    Ok(out)
}

/// Keeps only the tests in `only` (all when empty), in plan order. Errors when none of
/// them is in the plan (e.g. a UDP test with `--quick`).
pub fn restrict(plan: &mut Plan, only: &[TestKind]) -> Result<(), String> {
    if only.is_empty() {
        return Ok(());
    }
    plan.tests.retain(|t| only.contains(&t.kind));
    if plan.tests.is_empty() {
        let which = if plan.quick { "quick" } else { "full" };
        let names: Vec<&str> = only.iter().map(|k| k.slug()).collect();
        return Err(format!("none of {} is in the {which} plan", names.join(", ")));
    }
    Ok(())
}

/// Keeps only the sizes in `sizes` (bytes; all when empty) of the sized tests, dropping
/// the tests left with none; unsized tests stay. Errors when no test is left.
pub fn restrict_sizes(plan: &mut Plan, sizes: &[u64]) -> Result<(), String> {
    if sizes.is_empty() {
        return Ok(());
    }
    for t in &mut plan.tests {
        t.sizes.retain(|s| s.is_none_or(|s| sizes.contains(&s)));
    }
    plan.tests.retain(|t| !t.sizes.is_empty());
    if plan.tests.is_empty() {
        return Err(format!("no test of the plan is run at {sizes:?} bytes"));
    }
    Ok(())
}

/// Sets the measured runs of every load test of `plan` to `n` (`--repeats`): runs that
/// alternate between the targets, so more of them, each as long, tighten the per-round
/// efficiency ([`crate::report`]). The tests measured once by nature (concurrent
/// connections, failover, the UDP rate searches) keep their one run.
pub fn set_repeats(plan: &mut Plan, n: u32) -> Result<(), String> {
    if n == 0 {
        return Err("must be at least 1".into());
    }
    for t in plan.tests.iter_mut().filter(|t| !measured_once(t.kind)) {
        t.repeats = n;
    }
    Ok(())
}

/// The tests measured once by nature: the concurrency tests, failover, the UDP rate
/// searches (each run is a whole search).
fn measured_once(kind: TestKind) -> bool {
    matches!(
        kind,
        TestKind::ConcurrentConnections
            | TestKind::ConcurrentConnectionsL4
            | TestKind::L7Failover
            | TestKind::UdpFrames
            | TestKind::UdpImix
    )
}

/// Whether a target can run a test, as decided before measuring.
#[derive(Debug, Clone, PartialEq)]
pub enum Support {
    /// Measure it.
    Yes,
    /// Report `NotSupported` with this reason.
    No(String),
}

/// One planned cell.
#[derive(Debug, Clone)]
pub struct Cell {
    /// Index into [`Plan::tests`].
    pub test: usize,
    /// Size, when swept.
    pub size: Option<u64>,
    /// Target.
    pub target: TargetKind,
    /// Whether it will be measured.
    pub support: Support,
}

/// Every cell of the plan for these targets; `support` says whether a target can do a
/// test (capability probes, installed modules, ...).
pub fn cells(plan: &Plan, targets: &[TargetKind], support: impl Fn(TargetKind, &TestPlan) -> Support) -> Vec<Cell> {
    let mut out = Vec::new();
    for (i, t) in plan.tests.iter().enumerate() {
        for &size in &t.sizes {
            for &target in targets {
                out.push(Cell { test: i, size, target, support: support(target, t) });
            }
        }
    }
    out
}

/// What the direct baseline can do: plain HTTP (L7 traffic and the same traffic for the
/// L4 tests) and UDP echo; everything else is a proxy function the origin does not have.
pub fn direct_support(t: &TestPlan) -> Support {
    if matches!(t.kind, TestKind::ConcurrentConnections | TestKind::ConcurrentConnectionsL4) {
        return Support::No("baseline: no proxy process whose memory could be measured".into());
    }
    match t.setup {
        // The origins serve h2c with prior knowledge as they serve HTTP/1.1.
        Setup::L7 | Setup::L4 | Setup::Udp | Setup::H2c => Support::Yes,
        Setup::H2Upstream => Support::No("baseline: the same client→server h2c traffic as the h2c test's".into()),
        Setup::H2Tls => Support::No("baseline: the bench runs its origins in clear text".into()),
        Setup::H3 => Support::No("baseline: the bench's origins speak HTTP/1.1 and h2c over TCP, not QUIC".into()),
        Setup::L7Log => Support::No("baseline: the origin simulator writes no access log".into()),
        Setup::Traced1 | Setup::TracedAll => Support::No("baseline: no proxy whose requests could be traced".into()),
        Setup::Cookie => Support::No("baseline: the origin does not insert persistence cookies".into()),
        Setup::TlsRsa | Setup::TlsEcdsa => Support::No("baseline: the bench runs its origins in clear text".into()),
        Setup::Gzip | Setup::Brotli | Setup::Zstd => {
            Support::No("baseline: the origin simulator does not compress".into())
        }
        Setup::Cache => Support::No("baseline: the origin has no cache in front of it".into()),
        Setup::Failover => Support::No("baseline: no proxy to take a dead server out of rotation".into()),
    }
}

/// Counts of a plan's cells.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counts {
    /// All cells.
    pub cells: usize,
    /// Cells to measure.
    pub measured: usize,
    /// Cells reported as not supported.
    pub not_supported: usize,
    /// Measured runs (repeats summed).
    pub runs: usize,
    /// Open-loop latency points.
    pub latency_points: usize,
    /// Distinct (setup, target) process starts.
    pub starts: usize,
}

/// Counts the cells, runs and starts.
pub fn count(plan: &Plan, cells: &[Cell]) -> Counts {
    let mut c = Counts { cells: cells.len(), ..Counts::default() };
    let mut starts = std::collections::BTreeSet::new();
    for cell in cells {
        if cell.support != Support::Yes {
            c.not_supported += 1;
            continue;
        }
        let t = &plan.tests[cell.test];
        c.measured += 1;
        c.runs += t.repeats as usize;
        if t.headline {
            c.latency_points += plan.timing.latency_fractions.len();
        }
        starts.insert((t.setup, cell.target));
    }
    c.starts = starts.len();
    c
}

/// Expected wall time of the plan (limits and machine facts included).
pub fn estimate(plan: &Plan, cells: &[Cell]) -> Duration {
    let tm = &plan.timing;
    let mut secs = 7.0 * tm.limit_time.as_secs_f64() + 3.0;
    for cell in cells.iter().filter(|c| c.support == Support::Yes) {
        let t = &plan.tests[cell.test];
        secs += match t.kind {
            TestKind::ConcurrentConnections | TestKind::ConcurrentConnectionsL4 => {
                2.0 + tm.idle_connections as f64 / 2000.0
            }
            TestKind::L7Failover => super::failover::BUDGET.as_secs_f64(),
            TestKind::UdpFrames | TestKind::UdpImix => {
                // The probe, then at most `udp_trials` trials, each drained and sampled.
                let trial = tm.udp_trial.as_secs_f64() + crate::load::DRAIN.as_secs_f64() + RUN_OVERHEAD_S;
                f64::from(t.repeats) * (UDP_PROBE.as_secs_f64() + f64::from(tm.udp_trials) * trial)
            }
            _ => f64::from(t.repeats) * (tm.warmup.as_secs_f64() + tm.duration.as_secs_f64() + RUN_OVERHEAD_S),
        };
        if t.headline {
            let points = tm.latency_fractions.len() as f64;
            secs += points * (tm.latency_duration.as_secs_f64() + 0.5 + RUN_OVERHEAD_S);
        }
        if counts_syscalls(plan, t, cell.size, cell.target) {
            secs += COUNT_SETUP_S + tm.duration.min(COUNT_RUN).as_secs_f64() + RUN_OVERHEAD_S;
        }
    }
    secs += count(plan, cells).starts as f64 * START_S;
    Duration::from_secs_f64(secs)
}

/// Shortens the runs of a full plan until [`estimate`] fits `budget` (down to 1 s runs
/// with 0.5 s warm-up); `--quick` plans are left alone. Returns the final estimate.
pub fn fit(plan: &mut Plan, cells: &[Cell], budget: Duration) -> Duration {
    let mut est = estimate(plan, cells);
    while !plan.quick && est > budget && plan.timing.duration > Duration::from_secs(1) {
        let tm = &mut plan.timing;
        tm.duration = (tm.duration.mul_f64(0.8)).max(Duration::from_secs(1));
        tm.warmup = (tm.warmup.mul_f64(0.8)).max(Duration::from_millis(500));
        tm.latency_duration = (tm.latency_duration.mul_f64(0.8)).max(Duration::from_secs(1));
        est = estimate(plan, cells);
    }
    est
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_yes(_: TargetKind, _: &TestPlan) -> Support {
        Support::Yes
    }

    #[test]
    fn repeats_set_every_load_test_and_leave_the_one_run_tests() {
        let mut p = plan(false);
        assert!(set_repeats(&mut p, 0).is_err());
        set_repeats(&mut p, 7).expect("7 runs");
        for t in &p.tests {
            assert_eq!(t.repeats, if measured_once(t.kind) { 1 } else { 7 }, "{:?}", t.kind);
        }
        assert!(p.tests.iter().any(|t| t.kind == TestKind::L7Failover && t.repeats == 1));
        assert!(p.tests.iter().any(|t| t.kind == TestKind::Http2Upstream && t.repeats == 7));
    }

    #[test]
    fn a_second_switchyard_build_is_a_peer_with_its_path() {
        assert_eq!(TargetKind::peer("switchyard=/opt/old/switchyard"), Some(TargetKind::SwitchyardB));
        assert_eq!(second_build(" switchyard= /opt/old/switchyard "), Some("/opt/old/switchyard"));
        assert_eq!(TargetKind::peer("switchyard="), None, "a path is needed");
        assert_eq!(TargetKind::peer("switchyard"), None, "switchyard itself is always measured");
        assert_eq!(second_build("haproxy"), None);
        assert_eq!(TargetKind::SwitchyardB.name(), "switchyard-b");
        assert!(TargetKind::SwitchyardB.is_switchyard() && !TargetKind::SwitchyardB.is_floor());
    }

    #[test]
    fn floor_uring_is_asked_for_as_a_peer_and_has_its_own_port() {
        assert_eq!(TargetKind::peer("floor-uring"), Some(TargetKind::FloorUring));
        assert_eq!(TargetKind::peer(" floor "), Some(TargetKind::Floor));
        assert_eq!(TargetKind::FloorUring.name(), "floor-uring");
        assert!(TargetKind::FloorUring.is_floor() && TargetKind::Floor.is_floor());
        assert!(!TargetKind::Haproxy.is_floor());
        let ports = crate::suite::targets::Ports::from_base(30000);
        assert_eq!((ports.targets[&TargetKind::Floor], ports.targets[&TargetKind::FloorUring]), (30014, 30015));
        assert_eq!(ports.targets[&TargetKind::SwitchyardB], 30016);
        let mut all = ports.all();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "every port once");
    }

    #[test]
    fn sizes_restrict_the_sweeps_and_keep_unsized_tests() {
        let mut p = plan(false);
        restrict_sizes(&mut p, &[128]).expect("some tests run at 128 B");
        let l7 = p.tests.iter().find(|t| t.kind == TestKind::L7Cps).expect("L7 CPS kept");
        assert_eq!(l7.sizes, vec![Some(128)]);
        assert!(p.tests.iter().any(|t| t.kind == TestKind::ConcurrentConnections));
        assert!(!p.tests.iter().any(|t| t.kind == TestKind::CompressionGzip), "gzip has no 128 B size");
        let mut q = plan(true);
        assert!(restrict_sizes(&mut q, &[7]).is_ok(), "the concurrency test is unsized");
        q.tests.retain(|t| !matches!(t.kind, TestKind::ConcurrentConnections | TestKind::ConcurrentConnectionsL4));
        assert!(restrict_sizes(&mut q, &[7]).is_err());
    }

    #[test]
    fn quick_is_a_small_subset_at_two_sizes() {
        let p = plan(true);
        let kinds: Vec<_> = p.tests.iter().map(|t| t.kind).collect();
        assert_eq!(
            kinds,
            [
                TestKind::ConcurrentConnections,
                TestKind::L7KeepaliveRps,
                TestKind::L7Rps,
                TestKind::L7Cps,
                TestKind::L7KeepaliveAccessLog,
                TestKind::Http2Clear,
                TestKind::Http2Upstream,
                TestKind::Http2Tls,
                TestKind::Http3,
                TestKind::ConcurrentConnectionsL4,
            ]
        );
        for t in &p.tests {
            assert_eq!(t.repeats, 1);
            match t.kind {
                TestKind::ConcurrentConnections | TestKind::ConcurrentConnectionsL4 => {}
                TestKind::L7KeepaliveAccessLog
                | TestKind::Http2Clear
                | TestKind::Http2Upstream
                | TestKind::Http2Tls
                | TestKind::Http3 => assert_eq!(t.sizes, vec![Some(128)]),
                _ => assert_eq!(t.sizes, vec![Some(128), Some(131072)]),
            }
        }
        assert!(p.timing.latency_fractions.is_empty());
        assert_eq!(p.timing.idle_connections, 500);
    }

    #[test]
    fn quick_against_switchyard_fits_in_three_minutes() {
        let p = plan(true);
        let c = cells(&p, &[TargetKind::Direct, TargetKind::Switchyard], |t, tp| match t {
            TargetKind::Direct => direct_support(tp),
            _ => Support::Yes,
        });
        let n = count(&p, &c);
        assert_eq!(n.cells, 26);
        assert_eq!(
            n.measured, 20,
            "the baseline has no proxy memory, no access log, one h2c baseline, no TLS and no QUIC"
        );
        assert!(estimate(&p, &c) < Duration::from_secs(120), "{:?}", estimate(&p, &c));
    }

    #[test]
    fn full_sweeps_every_size_and_covers_the_matrix() {
        let p = plan(false);
        let l7 = p.tests.iter().find(|t| t.kind == TestKind::L7Rps).expect("L7 RPS planned");
        assert_eq!(l7.sizes.len(), SIZES.len());
        assert_eq!(l7.requests_per_connection, Some(10));
        assert!(l7.headline && l7.repeats == 3);
        for k in TestKind::ALL {
            assert!(p.tests.iter().any(|t| t.kind == k), "{k:?} missing");
        }
    }

    #[test]
    fn not_supported_cells_are_kept_not_dropped() {
        let p = plan(false);
        let targets = [TargetKind::Direct, TargetKind::Switchyard, TargetKind::Nginx];
        let c = cells(&p, &targets, |t, tp| match (t, tp.setup) {
            (TargetKind::Direct, _) => direct_support(tp),
            (TargetKind::Nginx, Setup::Cookie) => Support::No("no sticky cookie".into()),
            (TargetKind::Switchyard, Setup::L7) => Support::Yes,
            _ => Support::No("not built".into()),
        });
        let per_target = p.tests.iter().map(|t| t.sizes.len()).sum::<usize>();
        assert_eq!(c.len(), per_target * targets.len());
        let cookie_nginx = c
            .iter()
            .find(|x| x.target == TargetKind::Nginx && p.tests[x.test].kind == TestKind::L7CookiePersistence)
            .expect("cookie cell for nginx");
        assert_eq!(cookie_nginx.support, Support::No("no sticky cookie".into()));
        let direct_gzip = c
            .iter()
            .find(|x| x.target == TargetKind::Direct && p.tests[x.test].kind == TestKind::CompressionGzip)
            .expect("gzip cell for direct");
        assert!(matches!(direct_gzip.support, Support::No(_)));
        let n = count(&p, &c);
        assert_eq!(n.measured + n.not_supported, n.cells);
    }

    #[test]
    fn full_with_both_peers_fits_the_budget() {
        let mut p = plan(false);
        let targets = [TargetKind::Direct, TargetKind::Switchyard, TargetKind::Haproxy, TargetKind::Nginx];
        let c = cells(&p, &targets, all_yes);
        let est = fit(&mut p, &c, FULL_BUDGET);
        assert!(est <= FULL_BUDGET, "{est:?}");
        assert!(p.timing.duration >= Duration::from_secs(1));
    }

    #[test]
    fn setups_are_contiguous_and_the_log_test_mirrors_keep_alive() {
        for quick in [true, false] {
            let p = plan(quick);
            // The runner starts the targets once per run of equal setups.
            let mut setups: Vec<Setup> = p.tests.iter().map(|t| t.setup).collect();
            setups.dedup();
            let distinct: std::collections::BTreeSet<Setup> = setups.iter().copied().collect();
            assert_eq!(setups.len(), distinct.len(), "quick {quick}: {setups:?}");
            let find = |k| p.tests.iter().find(|t| t.kind == k).expect("planned");
            let (ka, log) = (find(TestKind::L7KeepaliveRps), find(TestKind::L7KeepaliveAccessLog));
            assert_eq!(log.setup, Setup::L7Log);
            assert_eq!((log.requests_per_connection, log.repeats), (ka.requests_per_connection, ka.repeats));
            assert_eq!(log.sizes, vec![Some(128)]);
            assert!(ka.sizes.contains(&Some(128)) && !log.headline);
            let paths = crate::suite::runner::paths;
            assert_eq!(paths(log, Some(128)), paths(ka, Some(128)), "same load as L7 keep-alive");
        }
    }

    #[test]
    fn only_parses_slugs_and_rejects_unknown_names() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            parse_only(&names(&["udp-frames", " udp-imix", "udp-frames", ""])),
            Ok(vec![TestKind::UdpFrames, TestKind::UdpImix])
        );
        assert_eq!(parse_only(&[]), Ok(vec![]));
        let err = parse_only(&names(&["udp-frames", "udp-jumbo"])).expect_err("unknown");
        assert!(err.contains("\"udp-jumbo\"") && err.contains("udp-imix") && err.contains("l7-rps"), "{err}");
    }

    #[test]
    fn only_keeps_the_named_tests_of_either_plan() {
        let mut full = plan(false);
        restrict(&mut full, &[TestKind::UdpImix, TestKind::UdpFrames]).expect("in the full plan");
        let kinds: Vec<_> = full.tests.iter().map(|t| t.kind).collect();
        assert_eq!(kinds, [TestKind::UdpFrames, TestKind::UdpImix], "plan order kept");
        let mut quick = plan(true);
        assert!(restrict(&mut quick, &[TestKind::UdpFrames]).expect_err("not quick").contains("quick plan"));
        let mut quick = plan(true);
        restrict(&mut quick, &[TestKind::L7Cps]).expect("in the quick plan");
        assert_eq!(quick.tests.len(), 1);
        let mut all = plan(true);
        restrict(&mut all, &[]).expect("no filter");
        assert_eq!(all.tests.len(), plan(true).tests.len());
    }

    #[test]
    fn udp_estimate_counts_every_search_trial() {
        let mut p = plan(false);
        restrict(&mut p, &[TestKind::UdpFrames]).expect("planned");
        let c = cells(&p, &[TargetKind::Switchyard], all_yes);
        let est = estimate(&p, &c).as_secs_f64();
        let per_cell = UDP_PROBE.as_secs_f64() + 8.0 * (1.0 + crate::load::DRAIN.as_secs_f64() + RUN_OVERHEAD_S);
        let fixed = 7.0 * p.timing.limit_time.as_secs_f64() + 3.0 + START_S;
        assert!((est - fixed - FRAME_SIZES.len() as f64 * per_cell).abs() < 0.01, "{est}");
    }

    #[test]
    fn compression_tests_sweep_from_one_kb_and_ask_for_their_coding_alone() {
        let p = plan(false);
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 9));
        let find = |k| p.tests.iter().find(|t| t.kind == k).expect("planned");
        for (kind, coding) in [
            (TestKind::CompressionGzip, "gzip"),
            (TestKind::CompressionBrotli, "br"),
            (TestKind::CompressionZstd, "zstd"),
        ] {
            let t = find(kind);
            assert_eq!((kind.coding(), t.setup.coding()), (Some(coding), Some(coding)));
            assert_eq!(t.sizes, sized(&COMPRESSION_SIZES));
            assert_eq!(t.requests_per_connection, Some(10));
            let s = crate::suite::runner::spec(&p, t, Some(1024), addr);
            assert_eq!(s.headers, vec![("accept-encoding".to_string(), coding.to_string())]);
            assert_eq!(s.paths, vec!["/page.html?size=1024&compressible=1".to_string()]);
            assert!(matches!(direct_support(t), Support::No(_)));
        }
        let cache = find(TestKind::CacheHit);
        assert_eq!((cache.sizes.clone(), cache.requests_per_connection), (sized(&SIZES), None));
        let s = crate::suite::runner::spec(&p, cache, Some(128), addr);
        assert!(s.headers.is_empty());
        assert_eq!(s.paths, vec!["/cached.html?size=128&cache=3600".to_string()]);
        assert_eq!(TestKind::CacheHit.coding(), None);
    }

    #[test]
    fn one_request_per_connection_says_close_and_more_do_not() {
        let p = plan(false);
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 9));
        let close = ("connection".to_string(), "close".to_string());
        let mut seen = (0, 0);
        for t in &p.tests {
            let s = crate::suite::runner::spec(&p, t, Some(128), addr);
            let says_close = s.headers.contains(&close);
            assert_eq!(says_close, t.requests_per_connection == Some(1), "{:?}", t.kind);
            if says_close {
                seen.0 += 1;
            } else {
                seen.1 += 1;
            }
        }
        assert!(seen.0 > 0 && seen.1 > 0, "both kinds planned: {seen:?}");
    }

    #[test]
    fn imix_mixes_match_the_seed() {
        assert_eq!(imix_frames(0).len(), 100);
        assert_eq!(imix_frames(1).len(), 12);
        assert_eq!(imix_frames(2).len(), 100);
        assert_eq!(imix_mean(1), 346);
        assert_eq!(imix_mean(0), 443);
    }
}
