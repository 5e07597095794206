//! Measurement: the runs of one setup's tests against the targets started for it.
//!
//! Repeats are interleaved over targets (target A, B, C, then A, B, C again) so that slow
//! drift of the machine spreads over all of them. Each run is a closed-loop
//! [`crate::load::run`] with its own warm-up; the proxy's CPU time (utime + stime of its
//! whole process tree) is sampled when the warm-up ends and again when the run returns,
//! so it covers the measured part only. Latency at load (headline tests, full suite) is
//! measured open loop at fixed fractions of the median maximum.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;

use super::plan::{Plan, Setup, TargetKind, TestPlan, UDP_PROBE};
use super::procs::{core_ticks, Proc};
use crate::load::{LoadReport, LoadSpec, Pace, Protocol, TlsSpec, UdpSpec};
use crate::results::{Limits, LoadPoint, Measurement, Outcome, RunFigures, Syscalls, TestKind, UdpSearch};

/// Flows (source sockets) of the UDP tests.
const UDP_FLOWS: usize = 4;
/// Lowest first rate of a UDP search (frames/s), should the probe see next to nothing.
const UDP_MIN_START: f64 = 1_000.0;

/// Key of a cell: (index into [`Plan::tests`], size, target).
pub type CellKey = (usize, Option<u64>, TargetKind);

/// A target started for the current setup.
pub struct Live<'a> {
    /// Which target.
    pub target: TargetKind,
    /// Its process (none for `direct`).
    pub proc: Option<&'a Proc>,
    /// Where the generator connects.
    pub addr: SocketAddr,
}

/// What the runner needs besides the targets.
pub struct Ctx<'a> {
    /// The plan.
    pub plan: &'a Plan,
    /// Machine limits (for `limit_fraction`).
    pub limits: &'a Limits,
    /// Core of the generator and origins.
    pub load_cpu: usize,
    /// Progress bar (one step per run).
    pub bar: &'a ProgressBar,
    /// Ports, certificates and the run folder of the targets' configurations.
    pub env: &'a super::targets::Env<'a>,
    /// The switchyard binary (origins the runner starts itself).
    pub bin: &'a std::path::Path,
    /// Folder of the processes' logs.
    pub logs: &'a std::path::Path,
    /// The system-call counter ([`super::syscalls::pick`]): none when off, the reason
    /// when none works here.
    pub syscalls: Result<Option<super::syscalls::Tool>, String>,
}

/// The request paths of a test at a size: 9 in 10 go to pool `main`, 1 in 10 is a `.png`
/// for pool `images` in the L7 tests.
pub fn paths(t: &TestPlan, size: Option<u64>) -> Vec<String> {
    let n = size.unwrap_or(128);
    match t.setup {
        Setup::L7 | Setup::L7Log | Setup::Cookie | Setup::Traced1 | Setup::TracedAll => {
            let mut v = vec![format!("/index.html?size={n}"); 9];
            v.push(format!("/img/logo.png?size={n}"));
            v
        }
        Setup::Gzip | Setup::Brotli | Setup::Zstd => vec![format!("/page.html?size={n}&compressible=1")],
        Setup::Cache => vec![format!("/cached.html?size={n}&cache=3600")],
        _ => vec![format!("/index.html?size={n}")],
    }
}

/// The load spec of a closed-loop run of test `t` at `size` against `addr`.
pub fn spec(plan: &Plan, t: &TestPlan, size: Option<u64>, addr: SocketAddr) -> LoadSpec {
    let tls = t.setup.tls().then(|| TlsSpec {
        server_name: "localhost".into(),
        resume: false,
        group: plan.tls_group,
        insecure: true,
    });
    // Compression tests ask for their coding alone, so each target's answer is that or none.
    let mut headers =
        t.setup.coding().map(|c| vec![("accept-encoding".to_string(), c.to_string())]).unwrap_or_default();
    // One request per connection: the request says so, and the proxy closes once it has
    // answered (as `bench scaling --per-connection` and wrk with `Connection: close` do); the
    // generator waits for that close, so every target does the active close of its client
    // connections and none is measured on a generator busy with its own TIME_WAIT sockets.
    if t.requests_per_connection == Some(1) {
        headers.push(("connection".to_string(), "close".to_string()));
    }
    LoadSpec {
        target: addr,
        host: if tls.is_some() { "localhost".into() } else { "bench".into() },
        tls,
        protocol: match t.setup {
            s if s.http3() => Protocol::Http3,
            s if s.http2() => Protocol::Http2,
            _ => Protocol::Http1,
        },
        paths: paths(t, size),
        headers,
        cookies: t.kind == TestKind::L7CookiePersistence,
        connections: plan.timing.connections,
        requests_per_connection: t.requests_per_connection,
        pace: Pace::Closed,
        warmup: plan.timing.warmup,
        duration: plan.timing.duration,
        threads: 1,
    }
}

/// Figures of one run from the generator's report and the proxy's CPU seconds.
pub fn figures(r: &LoadReport, proxy_cpu_s: f64) -> RunFigures {
    let secs = r.elapsed.as_secs_f64().max(1e-9);
    let req = r.requests as f64;
    RunFigures {
        requests: r.requests,
        connections: r.connections,
        errors: r.errors,
        duration_s: secs,
        rps: req / secs,
        cps: r.connections as f64 / secs,
        bytes_per_s: r.body_bytes as f64 / secs,
        proxy_cpu_s,
        proxy_user_cpu_s: None,
        proxy_kernel_cpu_s: None,
        proxy_cpu_us_per_request: if r.requests > 0 { proxy_cpu_s * 1e6 / req } else { 0.0 },
        requests_per_cpu_s: if proxy_cpu_s > 0.0 { req / proxy_cpu_s } else { 0.0 },
        generator_cpu_s: r.cpu_s,
        generator_saturated: r.cpu_s >= 0.9 * secs,
        latency: r.latency,
        memory_per_connection_bytes: None,
        udp_search: None,
        failover: None,
        compression_ratio: None,
        uncompressed_responses: None,
        origin_requests: None,
    }
}

/// The compression figures of a run of `size`-byte responses: the ratio of the bytes
/// the generator received to the bytes the origin sent for the same responses, and the
/// responses that came back without a content coding.
pub fn add_compression(f: &mut RunFigures, r: &LoadReport, size: u64) {
    let original = r.requests.saturating_mul(size);
    if original > 0 {
        f.compression_ratio = Some(r.body_bytes as f64 / original as f64);
    }
    f.uncompressed_responses = Some(r.requests.saturating_sub(r.encoded_responses));
}

/// Proxy CPU seconds over a run, apart: (user, kernel).
pub type CpuSplit = (f64, f64);

/// One closed- or open-loop run with the proxy CPU sampled over the measured part.
/// Returns the report, the proxy CPU seconds (user, kernel) and the load core's busy
/// fraction.
fn load_run(spec: &LoadSpec, proc: Option<&Proc>, load_cpu: usize) -> anyhow::Result<(LoadReport, CpuSplit, f64)> {
    let (report, cpu, busy) = std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            std::thread::sleep(spec.warmup);
            (proc.map(Proc::cpu_split_s), core_ticks(load_cpu))
        });
        let report = crate::load::run(spec);
        let (cpu0, core0) = sampler.join().unwrap_or((None, None));
        let cpu = match (proc, cpu0) {
            (Some(p), Some((u0, s0))) => {
                let (u1, s1) = p.cpu_split_s();
                ((u1 - u0).max(0.0), (s1 - s0).max(0.0))
            }
            _ => (0.0, 0.0),
        };
        let busy = match (core0, core_ticks(load_cpu)) {
            (Some((b0, t0)), Some((b1, t1))) if t1 > t0 => (b1 - b0) as f64 / (t1 - t0) as f64,
            _ => 0.0,
        };
        (report, cpu, busy)
    });
    Ok((report?, cpu, busy))
}

/// [`figures`] with the proxy's CPU time given apart (user, kernel); the baseline,
/// with no proxy, gets no split.
pub fn figures_split(r: &LoadReport, (user, kernel): CpuSplit, proxy: bool) -> RunFigures {
    let mut f = figures(r, user + kernel);
    if proxy {
        f.proxy_user_cpu_s = Some(user);
        f.proxy_kernel_cpu_s = Some(kernel);
    }
    f
}

/// Accumulates a cell's runs and flags while the setup runs.
#[derive(Default)]
pub struct CellRuns {
    /// Measured runs.
    pub runs: Vec<RunFigures>,
    /// Latency points.
    pub points: Vec<LoadPoint>,
    /// Runs whose load core was ≥ 95 % busy.
    pub core_busy: u32,
    /// The first failure, if the cell failed.
    pub failure: Option<String>,
    /// The proxy's system calls over the cell's extra counting run.
    pub syscalls: Option<crate::results::Syscalls>,
}

impl CellRuns {
    /// The cell's outcome.
    pub fn outcome(self, t: &TestPlan, size: Option<u64>, limits: &Limits) -> Outcome {
        if let Some(reason) = self.failure.filter(|_| self.runs.is_empty()) {
            return Outcome::Failed { reason };
        }
        let mut flags = Vec::new();
        let n = self.runs.len();
        let sat = self.runs.iter().filter(|r| r.generator_saturated).count();
        if sat > 0 {
            flags.push(format!("generator saturated in {sat} of {n} runs: the figure may measure the generator"));
        }
        if self.core_busy > 0 {
            flags.push(format!(
                "load core ≥ 95 % busy in {} of {n} runs (generator and origins share it)",
                self.core_busy
            ));
        }
        for s in self.runs.iter().filter_map(|r| r.udp_search.as_ref()) {
            if s.generator_limited {
                flags.push(
                    "generator-limited: the generator could not offer more; the loss-free rate is at least this".into(),
                );
            }
            if s.none_loss_free {
                flags.push(format!("no loss-free rate found in {} trials", s.trials.len()));
            }
        }
        for (i, r) in self.runs.iter().enumerate().filter(|(_, r)| r.errors > 0) {
            flags.push(format!("run {}: {} errors beside {} requests", i + 1, r.errors, r.requests));
        }
        for (i, r) in self.runs.iter().enumerate() {
            if let Some(n) = r.uncompressed_responses.filter(|n| *n > 0) {
                flags.push(format!("run {}: {n} of {} responses came back uncompressed", i + 1, r.requests));
            }
            if let Some(n) = r.origin_requests.filter(|n| *n > 0) {
                flags.push(format!(
                    "run {}: the origins received {n} requests (a hit reaches none): not every request was a hit",
                    i + 1
                ));
            }
        }
        let limit_fraction = median_run(&self.runs).and_then(|m| limit_fraction(t.kind, size, m, limits));
        Outcome::Measured(Measurement {
            runs: self.runs,
            latency_at_load: self.points,
            limit_fraction,
            flags,
            syscalls: self.syscalls,
        })
    }
}

/// The run with the median requests per second.
pub fn median_run(runs: &[RunFigures]) -> Option<&RunFigures> {
    let mut v: Vec<&RunFigures> = runs.iter().collect();
    v.sort_by(|a, b| a.rps.total_cmp(&b.rps));
    v.get(v.len() / 2).copied()
}

/// The result as a fraction of the machine limit that bounds the test, when one does.
pub fn limit_fraction(kind: TestKind, size: Option<u64>, r: &RunFigures, l: &Limits) -> Option<f64> {
    let (value, limit) = match kind {
        TestKind::TlsHandshakeRsa2048 => (r.cps, l.rsa2048_sign_per_s),
        TestKind::TlsHandshakeEcdsaP256 => (r.cps, l.ecdsa_p256_sign_per_s),
        TestKind::TlsBulk => (r.bytes_per_s, l.aes128gcm_bytes_per_s),
        // Input (origin) bytes compressed per second against one core's compressor.
        TestKind::CompressionGzip => (r.rps * size.unwrap_or(0) as f64, l.gzip_bytes_per_s),
        TestKind::CompressionBrotli => (r.rps * size.unwrap_or(0) as f64, l.brotli_bytes_per_s),
        TestKind::CompressionZstd => (r.rps * size.unwrap_or(0) as f64, l.zstd_bytes_per_s),
        TestKind::L4Throughput | TestKind::L7Throughput | TestKind::CacheHit => (r.bytes_per_s, l.loopback_bytes_per_s),
        _ => return None,
    };
    (limit > 0.0).then(|| value / limit)
}

/// Measures the tests `tests` (indices into the plan) of one setup against `live`,
/// adding runs to `cells`.
pub fn measure_setup(ctx: &Ctx, tests: &[usize], live: &[Live], cells: &mut BTreeMap<CellKey, CellRuns>) {
    for &ti in tests {
        let t = &ctx.plan.tests[ti];
        for &size in &t.sizes {
            let here: Vec<&Live> = live.iter().filter(|l| cells.contains_key(&(ti, size, l.target))).collect();
            match t.kind {
                TestKind::ConcurrentConnections | TestKind::ConcurrentConnectionsL4 => {
                    for l in &here {
                        ctx.bar.set_message(format!("{:?} {}", t.kind, l.target.name()));
                        let cell = cells.entry((ti, size, l.target)).or_default();
                        match idle_connections(l, ctx.plan.timing.idle_connections) {
                            Ok(r) => cell.runs.push(r),
                            Err(e) => cell.failure = Some(format!("{e:#}")),
                        }
                        ctx.bar.inc(1);
                    }
                }
                TestKind::L7Failover => {
                    for l in &here {
                        ctx.bar.set_message(format!("{:?} {}", t.kind, l.target.name()));
                        let cell = cells.entry((ti, size, l.target)).or_default();
                        match super::failover::run(ctx, l) {
                            Ok(r) => cell.runs.push(r),
                            Err(e) => cell.failure = Some(format!("{e:#}")),
                        }
                        ctx.bar.inc(1);
                    }
                }
                TestKind::UdpFrames | TestKind::UdpImix => {
                    for l in &here {
                        ctx.bar.set_message(format!("{:?} {} B {}", t.kind, size.unwrap_or(0), l.target.name()));
                        let cell = cells.entry((ti, size, l.target)).or_default();
                        match udp_run(ctx, t, size, l) {
                            Ok(r) => cell.runs.push(r),
                            Err(e) => cell.failure = Some(format!("{e:#}")),
                        }
                        ctx.bar.inc(1);
                    }
                }
                _ => {
                    if t.kind == TestKind::CacheHit {
                        cache_precheck(ctx, size, &here, ti, cells);
                    }
                    let here: Vec<&Live> = here
                        .iter()
                        .copied()
                        .filter(|l| cells.get(&(ti, size, l.target)).is_some_and(|c| c.failure.is_none()))
                        .collect();
                    for rep in 0..t.repeats {
                        for l in &here {
                            ctx.bar.set_message(format!(
                                "{:?} {} B {} (run {}/{})",
                                t.kind,
                                size.unwrap_or(0),
                                l.target.name(),
                                rep + 1,
                                t.repeats
                            ));
                            let cell = cells.entry((ti, size, l.target)).or_default();
                            let origins = &ctx.env.ports.origins[..2];
                            let seen0 = (t.kind == TestKind::CacheHit)
                                .then(|| super::checks::origins_requests(origins).ok())
                                .flatten();
                            match load_run(&spec(ctx.plan, t, size, l.addr), l.proc, ctx.load_cpu) {
                                Ok((r, cpu, busy)) => {
                                    cell.core_busy += u32::from(busy >= 0.95);
                                    let mut f = figures_split(&r, cpu, l.proc.is_some());
                                    if let (Some(_), Some(n)) = (t.kind.coding(), size) {
                                        add_compression(&mut f, &r, n);
                                    }
                                    if let Some(n0) = seen0 {
                                        let n1 = super::checks::origins_requests(origins).ok();
                                        f.origin_requests = n1.map(|n1| n1.saturating_sub(n0));
                                    }
                                    cell.runs.push(f);
                                }
                                Err(e) => cell.failure = Some(format!("{e:#}")),
                            }
                            ctx.bar.inc(1);
                        }
                    }
                    for l in here.iter().filter(|l| super::plan::counts_syscalls(ctx.plan, t, size, l.target)) {
                        ctx.bar.set_message(format!(
                            "{:?} {} B {}: counting system calls",
                            t.kind,
                            size.unwrap_or(0),
                            l.target.name()
                        ));
                        let counted = count_syscalls(ctx, t, size, l);
                        cells.entry((ti, size, l.target)).or_default().syscalls = counted;
                    }
                    if t.headline && !ctx.plan.timing.latency_fractions.is_empty() {
                        for l in &here {
                            latency_points(ctx, t, size, l, cells.entry((ti, size, l.target)).or_default());
                        }
                    }
                }
            }
        }
    }
}

/// Before a cache-hit size is measured: one request fills each target's cache with the
/// object the load asks for (so the warm-up is all hits), then a few more must not reach
/// the origins. A target that fails gets the cell failed with the reason.
fn cache_precheck(ctx: &Ctx, size: Option<u64>, here: &[&Live], ti: usize, cells: &mut BTreeMap<CellKey, CellRuns>) {
    let n = size.unwrap_or(128);
    let t = &ctx.plan.tests[ti];
    for l in here {
        ctx.bar.set_message(format!("{:?} {n} B {}: filling the cache", t.kind, l.target.name()));
        let origins = &ctx.env.ports.origins[..2];
        let r = super::checks::get(l.addr, &paths(t, size)[0], &[])
            .map_err(anyhow::Error::from)
            .and_then(|_| super::checks::check_cache_hits(l.addr, origins, n, 3, "precheck"));
        if let Err(e) = r {
            let cell = cells.entry((ti, size, l.target)).or_default();
            cell.failure = Some(format!("responses of {n} bytes are not answered from the cache: {e:#}"));
            ctx.bar.inc(u64::from(t.repeats));
        }
    }
}

/// Open-loop runs at the plan's fractions of the cell's median maximum.
fn latency_points(ctx: &Ctx, t: &TestPlan, size: Option<u64>, l: &Live, cell: &mut CellRuns) {
    let Some(max) = median_run(&cell.runs).map(|r| r.rps).filter(|r| *r > 0.0) else { return };
    for &fraction in &ctx.plan.timing.latency_fractions {
        ctx.bar.set_message(format!(
            "{:?} {} B {} at {:.0} %",
            t.kind,
            size.unwrap_or(0),
            l.target.name(),
            fraction * 100.0
        ));
        let mut s = spec(ctx.plan, t, size, l.addr);
        s.pace = Pace::Open { rate: max * fraction };
        s.warmup = Duration::from_millis(500);
        s.duration = ctx.plan.timing.latency_duration;
        if let Ok((r, _, _)) = load_run(&s, l.proc, ctx.load_cpu) {
            cell.points.push(LoadPoint {
                fraction,
                offered_rps: max * fraction,
                achieved_rps: r.requests as f64 / r.elapsed.as_secs_f64().max(1e-9),
                latency: r.latency,
            });
        }
        ctx.bar.inc(1);
    }
}

/// The extra run of a cell on which the proxy's system calls are counted: the counter
/// attached to its process tree, the cell's load once more with no warm-up for at most
/// [`super::plan::COUNT_RUN`], then detached. The counter's own output is kept in the
/// logs folder. `None` for a target without a process or when counting is off.
fn count_syscalls(ctx: &Ctx, t: &TestPlan, size: Option<u64>, l: &Live) -> Option<Syscalls> {
    let proc = l.proc?;
    let unavailable = |why: String| Some(Syscalls { unavailable: Some(why), ..Syscalls::default() });
    let tool = match &ctx.syscalls {
        Ok(Some(tool)) => *tool,
        Ok(None) => return None,
        Err(why) => return unavailable(why.clone()),
    };
    let file = ctx.logs.join(format!("syscalls-{}-{}-{}.txt", t.kind.slug(), size.unwrap_or(0), l.target.name()));
    let counter = match super::syscalls::Counter::attach(tool, &proc.tree(), &file) {
        Ok(c) => c,
        Err(why) => return unavailable(why),
    };
    let mut s = spec(ctx.plan, t, size, l.addr);
    s.warmup = Duration::ZERO;
    s.duration = ctx.plan.timing.duration.min(super::plan::COUNT_RUN);
    let report = crate::load::run(&s);
    let counts = counter.finish();
    let report = match report {
        Ok(r) => r,
        Err(e) => return unavailable(format!("the counting run failed: {e}")),
    };
    match counts {
        Ok((total, by_name)) => Some(Syscalls {
            tool: tool.name().into(),
            requests: report.requests,
            connections: report.connections,
            total,
            by_name,
            unavailable: None,
        }),
        Err(why) => unavailable(why),
    }
}

/// Opens up to `n` keep-alive connections (each answered once, then left idle) and
/// measures the proxy's resident memory per connection.
fn idle_connections(l: &Live, n: usize) -> anyhow::Result<RunFigures> {
    let proc = l.proc.ok_or_else(|| anyhow::anyhow!("no proxy process"))?;
    let rss0 = proc.rss_bytes();
    let cpu0 = proc.cpu_s();
    let start = Instant::now();
    let mut open = Vec::with_capacity(n);
    let mut errors = 0u64;
    let req = b"GET /index.html?size=128 HTTP/1.1\r\nhost: bench\r\n\r\n";
    while open.len() < n && errors < 50 {
        let r = TcpStream::connect_timeout(&l.addr, Duration::from_secs(2)).and_then(|mut s| {
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            s.write_all(req)?;
            super::failover::read_response(&mut s, &mut Vec::new())?;
            Ok(s)
        });
        match r {
            Ok(s) => open.push(s),
            Err(_) => errors += 1,
        }
    }
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    std::thread::sleep(Duration::from_millis(300));
    let rss1 = proc.rss_bytes();
    let cpu = (proc.cpu_s() - cpu0).max(0.0);
    let opened = open.len() as u64;
    drop(open);
    anyhow::ensure!(opened > 0, "no connection could be opened ({errors} errors)");
    Ok(RunFigures {
        requests: opened,
        connections: opened,
        errors,
        duration_s: secs,
        rps: opened as f64 / secs,
        cps: opened as f64 / secs,
        proxy_cpu_s: cpu,
        proxy_cpu_us_per_request: cpu * 1e6 / opened as f64,
        requests_per_cpu_s: if cpu > 0.0 { opened as f64 / cpu } else { 0.0 },
        memory_per_connection_bytes: Some(rss1.saturating_sub(rss0) as f64 / opened as f64),
        ..RunFigures::default()
    })
}

/// The frames a UDP cell cycles through: one size (sweep) or an IMIX mix (`size` is the
/// mix's mean frame).
fn udp_frames(t: &TestPlan, size: Option<u64>) -> anyhow::Result<Vec<usize>> {
    if t.kind != TestKind::UdpImix {
        return Ok(vec![size.unwrap_or(64) as usize]);
    }
    let mix = (0..super::plan::IMIX.len())
        .find(|&m| Some(super::plan::imix_mean(m)) == size)
        .ok_or_else(|| anyhow::anyhow!("unknown IMIX mean {size:?}"))?;
    Ok(super::plan::imix_frames(mix))
}

/// CPU seconds spent by the proxy and by this process over one trial.
#[derive(Clone, Copy, Default)]
struct TrialCpu {
    proxy: f64,
    generator: f64,
}

/// One UDP cell: a short closed-loop probe, then the RFC 2544-style search for the
/// loss-free rate over open-loop trials starting at 4 × the probe's rate. The figures are
/// those of the best loss-free trial: frames/s, frame bytes/s (payload + headers, see
/// [`crate::load::FRAME_OVERHEAD`]) and the proxy's CPU per frame at that rate.
fn udp_run(ctx: &Ctx, t: &TestPlan, size: Option<u64>, l: &Live) -> anyhow::Result<RunFigures> {
    use crate::load::search::{search, SearchParams, Trial};
    let frames = udp_frames(t, size)?;
    let tm = &ctx.plan.timing;
    let probe = UdpSpec { target: l.addr, frame_sizes: frames.clone(), flows: UDP_FLOWS, duration: UDP_PROBE };
    let p = crate::load::run_udp(&probe)?;
    let probe_rate = p.received as f64 / p.elapsed.as_secs_f64().max(1e-9);
    let params = SearchParams {
        start: (probe_rate * 4.0).max(UDP_MIN_START),
        max_trials: tm.udp_trials,
        ..SearchParams::default()
    };
    let spec = UdpSpec { duration: tm.udp_trial, ..probe };
    let mut cpu = Vec::new();
    let found = search(&params, |rate| {
        let (cpu0, self0) = (l.proc.map(Proc::cpu_s), own_cpu_s());
        let r = crate::load::run_udp_open(&spec, rate)?;
        let proxy = match (l.proc, cpu0) {
            (Some(p), Some(c0)) => (p.cpu_s() - c0).max(0.0),
            _ => 0.0,
        };
        cpu.push(TrialCpu { proxy, generator: (own_cpu_s() - self0).max(0.0) });
        Ok::<_, std::io::Error>(Trial {
            offered: rate,
            sent: r.sent,
            received: r.received,
            secs: r.elapsed.as_secs_f64(),
        })
    })?;
    let mean_frame = frames.iter().map(|&f| crate::load::payload_len(f) + crate::load::FRAME_OVERHEAD).sum::<usize>()
        as f64
        / frames.len() as f64;
    let best = found.best.map(|i| (found.trials[i], cpu.get(i).copied().unwrap_or_default()));
    let (trial, c) = best.unwrap_or_default();
    let (secs, got) = (trial.secs.max(1e-9), trial.received as f64);
    let rate = found.rate();
    Ok(RunFigures {
        requests: trial.received,
        connections: UDP_FLOWS as u64,
        errors: trial.lost(),
        duration_s: secs,
        rps: rate,
        bytes_per_s: rate * mean_frame,
        proxy_cpu_s: c.proxy,
        proxy_cpu_us_per_request: if trial.received > 0 { c.proxy * 1e6 / got } else { 0.0 },
        requests_per_cpu_s: if c.proxy > 0.0 { got / c.proxy } else { 0.0 },
        generator_cpu_s: c.generator,
        generator_saturated: found.generator_limited || c.generator >= 0.9 * secs,
        latency: p.latency,
        udp_search: Some(UdpSearch {
            loss_tolerance: params.loss_tolerance,
            trial_s: tm.udp_trial.as_secs_f64(),
            trials: found.trials.iter().map(|t| (t.offered, t.achieved(), t.lost())).collect(),
            none_loss_free: found.best.is_none(),
            generator_limited: found.generator_limited,
        }),
        ..RunFigures::default()
    })
}

/// CPU seconds of this process (all threads).
fn own_cpu_s() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| super::procs::parse_stat(&s))
        .map_or(0.0, |(_, t)| t as f64 / super::procs::clk_tck())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn l7_paths_carry_one_png_in_ten() {
        let p = super::super::plan::plan(true);
        let v = paths(&p.tests[2], Some(5120));
        assert_eq!(v.len(), 10);
        assert_eq!(v.iter().filter(|x| x.starts_with("/img/logo.png?size=5120")).count(), 1);
    }

    #[test]
    fn figures_divide_cpu_by_requests() {
        let r = LoadReport {
            requests: 10_000,
            connections: 100,
            body_bytes: 1_280_000,
            elapsed: Duration::from_secs(2),
            cpu_s: 1.9,
            ..LoadReport::default()
        };
        let f = figures(&r, 0.3);
        assert_eq!(f.rps, 5000.0);
        assert!((f.proxy_cpu_us_per_request - 30.0).abs() < 1e-9);
        assert!((f.requests_per_cpu_s - 33_333.333).abs() < 0.01);
        assert!(f.generator_saturated);
        assert_eq!(f.bytes_per_s, 640_000.0);
    }

    #[test]
    fn limit_fractions_pick_the_bounding_limit() {
        let l = Limits {
            rsa2048_sign_per_s: 2000.0,
            loopback_bytes_per_s: 1e9,
            gzip_bytes_per_s: 1e8,
            ..Limits::default()
        };
        let r = RunFigures { cps: 1000.0, rps: 100.0, bytes_per_s: 5e8, ..RunFigures::default() };
        assert_eq!(limit_fraction(TestKind::TlsHandshakeRsa2048, Some(128), &r, &l), Some(0.5));
        assert_eq!(limit_fraction(TestKind::L7Throughput, None, &r, &l), Some(0.5));
        assert_eq!(limit_fraction(TestKind::CompressionGzip, Some(131072), &r, &l), Some(0.131072));
        assert_eq!(limit_fraction(TestKind::L7Rps, None, &r, &l), None);
        assert_eq!(limit_fraction(TestKind::TlsBulk, None, &r, &l), None);
    }

    #[test]
    fn compression_ratio_is_bytes_received_over_origin_bytes() {
        let r = LoadReport { requests: 100, body_bytes: 100 * 4096, encoded_responses: 98, ..LoadReport::default() };
        let mut f = figures(&r, 0.1);
        add_compression(&mut f, &r, 16384);
        assert_eq!(f.compression_ratio, Some(0.25));
        assert_eq!(f.uncompressed_responses, Some(2));
        let none = LoadReport::default();
        let mut g = figures(&none, 0.0);
        add_compression(&mut g, &none, 16384);
        assert_eq!(g.compression_ratio, None, "no request, no ratio");
        let l = Limits { gzip_bytes_per_s: 1e8, brotli_bytes_per_s: 5e7, zstd_bytes_per_s: 2e8, ..Limits::default() };
        let run = RunFigures { rps: 100.0, ..RunFigures::default() };
        assert_eq!(limit_fraction(TestKind::CompressionBrotli, Some(131072), &run, &l), Some(0.262144));
        assert_eq!(limit_fraction(TestKind::CompressionZstd, Some(131072), &run, &l), Some(0.065536));
    }

    #[test]
    fn uncompressed_responses_and_cache_misses_are_flagged() {
        let t = &super::super::plan::plan(false).tests[0];
        let run = |uncompressed, origin| RunFigures {
            requests: 10,
            rps: 1.0,
            uncompressed_responses: uncompressed,
            origin_requests: origin,
            ..RunFigures::default()
        };
        let cell = CellRuns { runs: vec![run(Some(0), Some(0)), run(Some(3), Some(2))], ..CellRuns::default() };
        let Outcome::Measured(m) = cell.outcome(t, None, &Limits::default()) else { panic!("measured") };
        assert_eq!(m.flags.len(), 2, "{:?}", m.flags);
        assert!(m.flags[0].starts_with("run 2: 3 of 10 responses came back uncompressed"), "{:?}", m.flags);
        assert!(m.flags[1].contains("the origins received 2 requests"), "{:?}", m.flags);
    }

    #[test]
    fn median_run_by_rps() {
        let runs: Vec<RunFigures> =
            [3.0, 1.0, 2.0].iter().map(|&rps| RunFigures { rps, ..RunFigures::default() }).collect();
        assert_eq!(median_run(&runs).map(|r| r.rps), Some(2.0));
        assert!(median_run(&[]).is_none());
    }
}
