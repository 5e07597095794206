//! `switchyard bench scaling`: requests per second from 1 to N workers.
//!
//! The single-core suite pins every proxy to one core; this measures what the product
//! promises beyond it: that throughput grows with workers. For each target (switchyard,
//! and the peers asked for: HAProxy with `nbthread n`, NGINX with `worker_processes n`)
//! and worker count `n`, the proxy runs pinned to cores `0..n` with the suite's own L7
//! configuration (the `.png` rule, three origins) and only its worker line changed; the
//! load generator (this process) and the origins keep the same cores for every `n` — the
//! cores above the largest `n`, split between them — so only the proxy's share changes.
//! The load is the suite's L7 request mix at 128 B (by default), keep-alive or one
//! request per connection, closed loop with a fixed number of connections per worker.
//!
//! Each row reports requests per second, the proxy's CPU per request (user and kernel
//! apart) and how busy each group of cores was over the measured window: scaling is
//! only the proxy's when its cores are the busy ones. When the generator's or the
//! origins' cores are saturated, the row says so and its efficiency is a lower bound.
//! Efficiency at `n` is `rps(n) / (n × rps(1))`; the product's target is ≥ 0.85.
//!
//! Every efficiency divides by the one-worker row, and on a shared or virtual machine that
//! row alone moves by ±10 % from run to run (seen on a lent 16-core machine, 2026-11-27),
//! which moves every efficiency of the run with it. `rounds` repeats the whole sweep,
//! targets and worker counts interleaved, and the summary takes each cell's median over
//! the rounds, the efficiency from the medians.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use serde::Serialize;

use super::plan::{Setup, TargetKind};
use super::procs::{self, Proc};
use super::targets::{self, NginxStream};
use crate::load::{self, LoadSpec, Pace, Protocol};

/// A core group's busy fraction above which it, not the proxy, may be what limits a row.
const SATURATED: f64 = 0.9;

/// What the scaling run is asked to do.
#[derive(Debug, Clone)]
pub struct ScalingOptions {
    /// The switchyard binary (proxy and origins).
    pub switchyard_bin: PathBuf,
    /// Output folder (scaling.json, scaling.md, configs, logs).
    pub out: PathBuf,
    /// Worker counts to measure, ascending (the first is the baseline, normally 1).
    pub workers: Vec<usize>,
    /// Closed-loop connections per proxy worker.
    pub connections_per_worker: usize,
    /// Requests per connection: `None` keeps connections alive for the whole run.
    pub requests_per_connection: Option<u32>,
    /// Response body bytes.
    pub size: u64,
    /// Warm-up before each measured window.
    pub warmup: Duration,
    /// Measured window of each run.
    pub duration: Duration,
    /// Cores of this machine that may be used (all online cores, normally).
    pub cores: usize,
    /// Peers to measure beside switchyard (`haproxy`, `nginx`).
    pub peers: Vec<String>,
    /// Times the whole sweep runs (at least 1); see the module docs.
    pub rounds: usize,
}

/// Which cores each party gets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Layout {
    /// The proxy's cores for the largest worker count (a run with `n` uses the first `n`).
    pub proxy: Vec<usize>,
    /// The load generator's cores.
    pub generator: Vec<usize>,
    /// The origins' cores.
    pub origins: Vec<usize>,
}

/// Splits `cores` between the proxy (the first `max_workers`), the generator and the
/// origins (the rest, half each, the generator taking the odd one). With a single spare
/// core, generator and origins share it.
pub fn layout(cores: usize, max_workers: usize) -> Result<Layout, String> {
    if max_workers == 0 {
        return Err("at least one worker".into());
    }
    if cores <= max_workers {
        return Err(format!(
            "{max_workers} workers need at least {} cores (one more for the generator and origins); this machine has {cores}",
            max_workers + 1
        ));
    }
    let proxy: Vec<usize> = (0..max_workers).collect();
    let rest: Vec<usize> = (max_workers..cores).collect();
    if rest.len() == 1 {
        return Ok(Layout { proxy, generator: rest.clone(), origins: rest });
    }
    let generator_share = rest.len().div_ceil(2);
    Ok(Layout { proxy, generator: rest[..generator_share].to_vec(), origins: rest[generator_share..].to_vec() })
}

/// A `taskset` core list: `0-3` for a contiguous run, else `0,2,5`.
pub fn cpu_list(cores: &[usize]) -> String {
    match (cores.first(), cores.last()) {
        (Some(&a), Some(&b)) if cores.len() > 1 && b - a + 1 == cores.len() => format!("{a}-{b}"),
        _ => cores.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(","),
    }
}

/// One worker count's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The proxy measured (`switchyard`, `haproxy`, `nginx`).
    pub target: String,
    /// The sweep this row belongs to, from 1.
    pub round: usize,
    /// Proxy workers (and cores).
    pub workers: usize,
    /// Connections the generator held open (closed loop).
    pub connections: usize,
    /// Requests completed in the measured window.
    pub requests: u64,
    /// Failed requests (should be 0).
    pub errors: u64,
    /// Requests per second.
    pub rps: f64,
    /// Connections per second opened by the generator.
    pub cps: f64,
    /// Proxy CPU per request, user space, µs.
    pub user_us_per_request: f64,
    /// Proxy CPU per request, kernel, µs.
    pub kernel_us_per_request: f64,
    /// Busy fraction of the proxy's `workers` cores over the window.
    pub proxy_busy: f64,
    /// Busy fraction of the generator's cores.
    pub generator_busy: f64,
    /// Busy fraction of the origins' cores.
    pub origins_busy: f64,
    /// `rps / (workers × rps of the first row)`, the first row of the same round.
    pub efficiency: f64,
    /// 50th and 99th percentile latency, µs.
    pub p50_us: f64,
    /// See `p50_us`.
    pub p99_us: f64,
    /// What else than the proxy may have limited this row, if anything.
    pub limited_by: Option<String>,
}

/// One target at one worker count over the rounds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cell {
    /// The proxy measured.
    pub target: String,
    /// Proxy workers.
    pub workers: usize,
    /// Rows (rounds) it has.
    pub runs: usize,
    /// Median requests per second over the rounds.
    pub rps: f64,
    /// Lowest and highest requests per second of the rounds.
    pub rps_min: f64,
    /// See `rps_min`.
    pub rps_max: f64,
    /// Median proxy CPU per request (user and kernel), µs.
    pub cpu_us_per_request: f64,
    /// `rps / (workers × rps of the target's first cell / its workers)`, from medians.
    pub efficiency: f64,
    /// Some round's row was limited by something other than the proxy's cores.
    pub limited: bool,
}

/// The median of `v` (the mean of the middle two for an even count); 0 when empty.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Each target's worker counts over the rounds, in the order first measured.
pub fn summarize(rows: &[Row]) -> Vec<Cell> {
    let mut cells: Vec<Cell> = Vec::new();
    for r in rows {
        if cells.iter().any(|c| c.target == r.target && c.workers == r.workers) {
            continue;
        }
        let same: Vec<&Row> = rows.iter().filter(|o| o.target == r.target && o.workers == r.workers).collect();
        let rps: Vec<f64> = same.iter().map(|o| o.rps).collect();
        cells.push(Cell {
            target: r.target.clone(),
            workers: r.workers,
            runs: same.len(),
            rps: median(rps.clone()),
            rps_min: rps.iter().copied().fold(f64::INFINITY, f64::min),
            rps_max: rps.iter().copied().fold(0.0, f64::max),
            cpu_us_per_request: median(same.iter().map(|o| o.user_us_per_request + o.kernel_us_per_request).collect()),
            efficiency: 0.0,
            limited: same.iter().any(|o| o.limited_by.is_some()),
        });
    }
    // A target's first cell (in the order measured) is its baseline.
    let base = |target: &str, cells: &[Cell]| {
        cells.iter().find(|c| c.target == target).map_or(0.0, |c| c.rps / c.workers.max(1) as f64)
    };
    for i in 0..cells.len() {
        let b = base(&cells[i].target, &cells);
        let c = &mut cells[i];
        c.efficiency = if b > 0.0 { c.rps / (c.workers as f64 * b) } else { 0.0 };
    }
    cells
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub struct Scaling {
    /// Cores used and how they were split.
    pub layout: Layout,
    /// Test description (protocol, size, connection reuse).
    pub test: String,
    /// CPU model and kernel, as read from /proc.
    pub machine: String,
    /// Measured seconds per row.
    pub duration_s: f64,
    /// Sweeps run.
    pub rounds: usize,
    /// One row per round, target and worker count.
    pub rows: Vec<Row>,
    /// One cell per target and worker count, over the rounds.
    pub summary: Vec<Cell>,
    /// Targets asked for that could not be measured, with the reason.
    pub not_measured: Vec<(String, String)>,
}

/// Runs every target at every worker count, writes `scaling.json` and `scaling.md` into
/// `opts.out`, and returns the figures.
pub fn run(opts: &ScalingOptions) -> anyhow::Result<Scaling> {
    let mut workers = opts.workers.clone();
    workers.sort_unstable();
    workers.dedup();
    let Some(&max) = workers.last() else { bail!("no worker counts to measure") };
    let layout = layout(opts.cores, max).map_err(anyhow::Error::msg)?;
    // Absolute, because NGINX resolves relative paths from its prefix.
    let out = &std::path::absolute(&opts.out).with_context(|| format!("bad output folder {}", opts.out.display()))?;
    for dir in ["configs", "logs", "run"] {
        std::fs::create_dir_all(out.join(dir)).with_context(|| format!("{}", out.display()))?;
    }
    let ports = super::free_ports()?;
    let certs = targets::generate_certs(&out.join("configs/certs"))?;
    let run_dir = out.join("run");
    let env = targets::Env { ports: &ports, certs: &certs, run_dir: &run_dir, nginx_stream: &NginxStream::Static };

    procs::pin_self_to(&cpu_list(&layout.generator)).context("pinning the generator")?;
    let origin_threads = layout.origins.len().to_string();
    let mut origins = Vec::new();
    for (port, name) in ports.origins.iter().zip(["a", "b", "c"]) {
        let addr = SocketAddr::from(([127, 0, 0, 1], *port));
        let log = out.join(format!("logs/origin-{name}.log"));
        let args =
            ["origin", "--listen", &addr.to_string(), "--name", name, "--threads", &origin_threads].map(String::from);
        let mut o =
            Proc::spawn_on(&format!("origin {name}"), &cpu_list(&layout.origins), &opts.switchyard_bin, &args, &log)?;
        o.wait_ready(addr, false, &log)?;
        origins.push(o);
    }

    let mut kinds = vec![(TargetKind::Switchyard, Ok(opts.switchyard_bin.clone()))];
    for peer in &opts.peers {
        let kind = match peer.as_str() {
            "haproxy" => TargetKind::Haproxy,
            "nginx" => TargetKind::Nginx,
            other => bail!("unknown peer `{other}` (haproxy, nginx)"),
        };
        kinds.push((kind, procs::which(kind.name()).ok_or_else(|| format!("{} is not installed", kind.name()))));
    }
    let mut not_measured = Vec::new();
    let mut programs = Vec::new();
    for (kind, program) in kinds {
        match program {
            Ok(p) => programs.push((kind, p)),
            Err(why) => {
                eprintln!("bench scaling: {}: not measured: {why}", kind.name());
                not_measured.push((kind.name().to_string(), why));
            }
        }
    }
    let rounds = opts.rounds.max(1);
    let mut rows: Vec<Row> = Vec::new();
    for round in 1..=rounds {
        for (kind, program) in &programs {
            let first = rows.len();
            for &n in &workers {
                let target = Target { kind: *kind, program, n, ports: &ports, env: &env, out };
                let row = measure(opts, &layout, &target)
                    .with_context(|| format!("{} with {n} worker{}", kind.name(), if n == 1 { "" } else { "s" }))?;
                let base = rows.get(first).map_or(row.rps / n as f64, |r: &Row| r.rps / r.workers as f64);
                let efficiency = if base > 0.0 { row.rps / (n as f64 * base) } else { 0.0 };
                eprintln!(
                    "bench scaling: round {round}/{rounds}: {} {n} workers: {:.0} requests/s, efficiency {:.2}, proxy cores {:.0} % busy{}",
                    kind.name(),
                    row.rps,
                    efficiency,
                    row.proxy_busy * 100.0,
                    row.limited_by.as_deref().map(|l| format!(" ({l})")).unwrap_or_default()
                );
                rows.push(Row { efficiency, round, ..row });
            }
        }
    }
    for mut o in origins {
        o.stop();
    }

    let reuse = match opts.requests_per_connection {
        None => "keep-alive".to_string(),
        Some(1) => "one request per connection (`connection: close`)".to_string(),
        Some(k) => format!("{k} requests per connection"),
    };
    let scaling = Scaling {
        layout,
        test: format!(
            "HTTP/1.1 GET, {} B responses, 1 in 10 a `.png` routed to its own pool, {reuse}, closed loop",
            opts.size
        ),
        machine: {
            let m = super::machine::facts();
            format!("{}, {} CPUs, kernel {}, {}", m.cpu_model, m.cpus, m.kernel, m.os)
        },
        duration_s: opts.duration.as_secs_f64(),
        rounds,
        summary: summarize(&rows),
        rows,
        not_measured,
    };
    std::fs::write(out.join("scaling.json"), serde_json::to_string_pretty(&scaling)?)?;
    std::fs::write(out.join("scaling.md"), markdown(&scaling))?;
    Ok(scaling)
}

/// One target at one worker count.
struct Target<'a> {
    kind: TargetKind,
    program: &'a Path,
    n: usize,
    ports: &'a targets::Ports,
    env: &'a targets::Env<'a>,
    out: &'a Path,
}

impl Target<'_> {
    /// The suite's L7 configuration of this target with `n` workers, and the program's arguments.
    fn start(&self, cores: &str) -> anyhow::Result<(Proc, PathBuf)> {
        let n = self.n;
        let (config, args): (String, Vec<String>) = match self.kind {
            TargetKind::Haproxy => (
                with_workers(&haproxy_l7(self.env)?, "nbthread 1", &format!("nbthread {n}"))?,
                vec!["-db".into(), "-f".into()],
            ),
            TargetKind::Nginx => (
                with_workers(&nginx_l7(self.env)?, "worker_processes 1;", &format!("worker_processes {n};"))?,
                vec![
                    "-p".into(),
                    self.env.run_dir.display().to_string(),
                    "-e".into(),
                    targets::nginx_error_log(self.env.run_dir).display().to_string(),
                    "-c".into(),
                ],
            ),
            _ => (proxy_config(n, self.env), vec!["run".into(), "-c".into()]),
        };
        let name = self.kind.name();
        let file = self.out.join(format!("configs/{name}-{n}.conf"));
        std::fs::write(&file, config)?;
        let mut args = args;
        args.push(file.display().to_string());
        let log = self.out.join(format!("logs/{name}-{n}.log"));
        let p = Proc::spawn_on(name, cores, self.program, &args, &log)?;
        Ok((p, log))
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.ports.targets[&self.kind]))
    }
}

/// Replaces the single-worker line of a generated configuration.
fn with_workers(config: &str, one: &str, n: &str) -> anyhow::Result<String> {
    anyhow::ensure!(config.contains(one), "the generated configuration has no `{one}` line");
    Ok(config.replacen(one, n, 1))
}

fn haproxy_l7(env: &targets::Env) -> anyhow::Result<String> {
    targets::haproxy(Setup::L7, env).map_err(anyhow::Error::msg)
}

fn nginx_l7(env: &targets::Env) -> anyhow::Result<String> {
    targets::nginx(Setup::L7, env).map_err(anyhow::Error::msg)
}

/// One run of `target`: start it on cores `0..n`, load it, stop it.
fn measure(opts: &ScalingOptions, layout: &Layout, target: &Target) -> anyhow::Result<Row> {
    let n = target.n;
    let proxy_cores = &layout.proxy[..n];
    let (mut p, log) = target.start(&cpu_list(proxy_cores))?;
    let proxy = target.addr();
    p.wait_ready(proxy, false, &log)?;

    let connections = opts.connections_per_worker * n;
    let mut paths = vec![format!("/index.html?size={}", opts.size); 9];
    paths.push(format!("/img/logo.png?size={}", opts.size));
    let spec = LoadSpec {
        target: proxy,
        host: "bench".into(),
        tls: None,
        protocol: Protocol::Http1,
        paths,
        // One request per connection: the request asks the proxy to close, and the
        // generator waits for that close (as HTTP/1.0-style clients do), so the TIME_WAIT
        // sockets stay on the proxy's side. When the generator closed first, its
        // connect(2) calls spent their time searching a port space full of them.
        headers: match opts.requests_per_connection {
            Some(1) => vec![("connection".to_string(), "close".to_string())],
            _ => Vec::new(),
        },
        cookies: false,
        connections,
        requests_per_connection: opts.requests_per_connection,
        pace: Pace::Closed,
        warmup: opts.warmup,
        duration: opts.duration,
        threads: layout.generator.len(),
    };
    // The window is sampled by a thread that sleeps through the warm-up, so CPU and
    // core figures cover the same seconds as the generator's counts. The process tree
    // is read then, when NGINX's workers exist.
    let root = p.pid();
    let (warmup, duration) = (opts.warmup, opts.duration);
    let cores: Vec<Vec<usize>> = vec![proxy_cores.to_vec(), layout.generator.clone(), layout.origins.clone()];
    let sampler = std::thread::spawn(move || {
        std::thread::sleep(warmup + Duration::from_millis(20));
        let mut tree = vec![root];
        tree.extend(procs::descendants(root));
        let before = (tree_cpu(&tree), cores.iter().map(|c| group_ticks(c)).collect::<Vec<_>>());
        std::thread::sleep(duration);
        let after = (tree_cpu(&tree), cores.iter().map(|c| group_ticks(c)).collect::<Vec<_>>());
        (before, after)
    });
    let report = load::run(&spec).context("load run")?;
    let ((cpu0, ticks0), (cpu1, ticks1)) = sampler.join().map_err(|_| anyhow::anyhow!("sampler panicked"))?;
    p.stop();
    let busy = |i: usize| {
        let (b, t) = (ticks1[i].0.saturating_sub(ticks0[i].0), ticks1[i].1.saturating_sub(ticks0[i].1));
        if t == 0 {
            0.0
        } else {
            b as f64 / t as f64
        }
    };
    let (proxy_busy, generator_busy, origins_busy) = (busy(0), busy(1), busy(2));
    let secs = report.elapsed.as_secs_f64().max(1e-9);
    let per_request = |s: f64| if report.requests > 0 { s * 1e6 / report.requests as f64 } else { 0.0 };
    let limited_by = if layout.generator == layout.origins {
        (generator_busy >= SATURATED).then(|| "generator and origins share a saturated core".to_string())
    } else if generator_busy >= SATURATED {
        Some(format!("generator cores {:.0} % busy", generator_busy * 100.0))
    } else if origins_busy >= SATURATED {
        Some(format!("origin cores {:.0} % busy", origins_busy * 100.0))
    } else if proxy_busy < SATURATED {
        Some(format!("proxy cores only {:.0} % busy", proxy_busy * 100.0))
    } else {
        None
    };
    Ok(Row {
        target: target.kind.name().to_string(),
        round: 0,
        workers: n,
        connections,
        requests: report.requests,
        errors: report.errors,
        rps: report.requests as f64 / secs,
        cps: report.connections as f64 / secs,
        user_us_per_request: per_request(cpu1.0 - cpu0.0),
        kernel_us_per_request: per_request(cpu1.1 - cpu0.1),
        proxy_busy,
        generator_busy,
        origins_busy,
        efficiency: 0.0,
        p50_us: report.latency.p50_us,
        p99_us: report.latency.p99_us,
        limited_by,
    })
}

/// switchyard's L7 configuration of the suite, with `n` workers.
pub fn proxy_config(n: usize, env: &targets::Env) -> String {
    targets::switchyard(Setup::L7, env).replacen("workers = 1\n", &format!("workers = {n}\n"), 1)
}

/// (user, kernel) CPU seconds of a set of processes (a proxy and its children).
fn tree_cpu(pids: &[u32]) -> (f64, f64) {
    let tck = procs::clk_tck();
    pids.iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).ok())
        .filter_map(|s| procs::parse_stat_split(&s))
        .fold((0.0, 0.0), |(u, k), (_, ut, st)| (u + ut as f64 / tck, k + st as f64 / tck))
}

/// (busy, total) ticks summed over some cores.
fn group_ticks(cores: &[usize]) -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    cores.iter().filter_map(|&c| procs::parse_core_ticks(&stat, c)).fold((0, 0), |(b, t), (cb, ct)| (b + cb, t + ct))
}

/// The report: requests/s of every target by worker count, then a table per target.
pub fn markdown(s: &Scaling) -> String {
    let mut m = String::new();
    let _ = writeln!(m, "# switchyard bench scaling\n");
    let _ = writeln!(m, "- test: {}", s.test);
    let _ = writeln!(m, "- machine: {}", s.machine);
    let _ = writeln!(
        m,
        "- cores: proxy {} (a run with n workers uses the first n), generator {}, origins {}",
        cpu_list(&s.layout.proxy),
        cpu_list(&s.layout.generator),
        cpu_list(&s.layout.origins)
    );
    let _ = writeln!(m, "- measured window: {:.0} s per row", s.duration_s);
    if s.rounds > 1 {
        let _ = writeln!(
            m,
            "- rounds: {} (targets and worker counts interleaved; the first table gives each cell's median \
             and, in brackets, its lowest and highest)",
            s.rounds
        );
    }
    for (target, why) in &s.not_measured {
        let _ = writeln!(m, "- {target}: not measured: {why}");
    }
    let mut targets: Vec<&str> = Vec::new();
    for r in &s.rows {
        if !targets.contains(&r.target.as_str()) {
            targets.push(&r.target);
        }
    }
    let mut workers: Vec<usize> = s.summary.iter().map(|c| c.workers).collect();
    workers.sort_unstable();
    workers.dedup();
    let _ = writeln!(m, "\n## Requests per second (efficiency)\n");
    let _ = writeln!(m, "| workers | {} |", targets.join(" | "));
    let _ = writeln!(m, "|---:|{}", "---:|".repeat(targets.len()));
    for n in &workers {
        let cells: Vec<String> = targets
            .iter()
            .map(|t| {
                s.summary.iter().find(|c| c.target == *t && c.workers == *n).map_or("–".into(), |c| {
                    let mark = if c.limited { "*" } else { "" };
                    let range =
                        if c.runs > 1 { format!(" [{:.0}–{:.0}]", c.rps_min, c.rps_max) } else { String::new() };
                    format!("{:.0} ({:.2}){mark}{range}", c.rps, c.efficiency)
                })
            })
            .collect();
        let _ = writeln!(m, "| {n} | {} |", cells.join(" | "));
    }
    let _ = writeln!(m, "\n\\* limited by something other than the proxy's cores: see the target's table.");
    for t in &targets {
        let _ = writeln!(m, "\n## {t}\n");
        let _ = writeln!(
            m,
            "| round | workers | connections | requests/s | efficiency | proxy µs/req (user + kernel) | proxy cores busy | generator busy | origins busy | p50 / p99 µs | errors | limited by |"
        );
        let _ = writeln!(m, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
        for r in s.rows.iter().filter(|r| r.target == *t) {
            let _ = writeln!(
                m,
                "| {} | {} | {} | {:.0} | {:.2} | {:.2} ({:.2} + {:.2}) | {:.0} % | {:.0} % | {:.0} % | {:.0} / {:.0} | {} | {} |",
                r.round,
                r.workers,
                r.connections,
                r.rps,
                r.efficiency,
                r.user_us_per_request + r.kernel_us_per_request,
                r.user_us_per_request,
                r.kernel_us_per_request,
                r.proxy_busy * 100.0,
                r.generator_busy * 100.0,
                r.origins_busy * 100.0,
                r.p50_us,
                r.p99_us,
                r.errors,
                r.limited_by.as_deref().unwrap_or("proxy")
            );
        }
    }
    let _ = writeln!(
        m,
        "\nEfficiency is requests/s at n workers over n times the first row's requests/s per worker \
         (target ≥ 0.85); in the first table, of the medians over the rounds, in a target's table, \
         of that round's rows. A row is the proxy's own figure only when its cores are the busy ones; \
         when the generator's or origins' cores are saturated, its efficiency is a lower bound."
    );
    m
}

/// The default worker counts on a machine of `cores` cores: powers of two up to the
/// largest count that leaves at least half the cores to the generator and origins.
pub fn default_workers(cores: usize) -> Vec<usize> {
    let max = (cores / 2).max(1);
    let mut v: Vec<usize> = std::iter::successors(Some(1usize), |n| Some(n * 2)).take_while(|&n| n <= max).collect();
    if v.last() != Some(&max) {
        v.push(max);
    }
    v
}

/// Where the report of a run is written when `--out` is not given.
pub fn default_out(stamp: &str) -> PathBuf {
    Path::new("bench-out").join(format!("scaling-{stamp}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_gives_the_proxy_the_low_cores_and_splits_the_rest() {
        let l = layout(16, 8).expect("fits");
        assert_eq!(l.proxy, (0..8).collect::<Vec<_>>());
        assert_eq!(l.generator, vec![8, 9, 10, 11]);
        assert_eq!(l.origins, vec![12, 13, 14, 15]);
        let odd = layout(8, 3).expect("fits");
        assert_eq!((odd.generator, odd.origins), (vec![3, 4, 5], vec![6, 7]));
        let two = layout(2, 1).expect("fits");
        assert_eq!((two.proxy, two.generator, two.origins), (vec![0], vec![1], vec![1]));
        assert!(layout(4, 4).expect_err("too many").contains("at least 5 cores"));
        assert!(layout(4, 0).is_err());
    }

    #[test]
    fn cpu_lists_are_ranges_when_contiguous() {
        assert_eq!(cpu_list(&[0, 1, 2, 3]), "0-3");
        assert_eq!(cpu_list(&[5]), "5");
        assert_eq!(cpu_list(&[1, 3]), "1,3");
    }

    fn row(target: &str, round: usize, workers: usize, rps: f64, limited: bool) -> Row {
        Row {
            target: target.into(),
            round,
            workers,
            connections: 64 * workers,
            requests: rps as u64,
            errors: 0,
            rps,
            cps: 0.0,
            user_us_per_request: 1.0,
            kernel_us_per_request: 1_000_000.0 * workers as f64 / rps - 1.0,
            proxy_busy: 1.0,
            generator_busy: 0.5,
            origins_busy: 0.5,
            efficiency: 0.0,
            p50_us: 0.0,
            p99_us: 0.0,
            limited_by: limited.then(|| "generator cores 95 % busy".to_string()),
        }
    }

    #[test]
    fn the_summary_takes_medians_over_the_rounds_and_efficiency_from_them() {
        // A noisy one-worker row in round 2 moves that round's efficiencies, not the summary's.
        let rows = vec![
            row("switchyard", 1, 1, 60_000.0, false),
            row("switchyard", 1, 2, 108_000.0, false),
            row("haproxy", 1, 1, 50_000.0, false),
            row("haproxy", 1, 2, 80_000.0, true),
            row("switchyard", 2, 1, 50_000.0, false),
            row("switchyard", 2, 2, 110_000.0, false),
            row("haproxy", 2, 1, 52_000.0, false),
            row("haproxy", 2, 2, 90_000.0, false),
            row("switchyard", 3, 1, 62_000.0, false),
            row("switchyard", 3, 2, 104_000.0, false),
        ];
        let s = summarize(&rows);
        let cell = |t: &str, n: usize| s.iter().find(|c| c.target == t && c.workers == n).expect("cell").clone();
        assert_eq!(s.len(), 4, "one cell per target and worker count");
        let (one, two) = (cell("switchyard", 1), cell("switchyard", 2));
        assert_eq!((one.runs, one.rps, one.rps_min, one.rps_max), (3, 60_000.0, 50_000.0, 62_000.0));
        assert_eq!(two.rps, 108_000.0);
        assert!((two.efficiency - 0.9).abs() < 1e-9, "{}", two.efficiency);
        assert!((two.cpu_us_per_request - 1e6 * 2.0 / 108_000.0).abs() < 1e-6);
        let h = cell("haproxy", 2);
        assert_eq!((h.runs, h.rps), (2, 85_000.0), "an even count: the mean of the middle two");
        assert!(h.limited, "one limited round marks the cell");
        assert!((h.efficiency - 85_000.0 / (2.0 * 51_000.0)).abs() < 1e-9);
        assert_eq!(cell("haproxy", 1).efficiency, 1.0);
    }

    #[test]
    fn default_workers_are_powers_of_two_up_to_half_the_cores() {
        assert_eq!(default_workers(16), vec![1, 2, 4, 8]);
        assert_eq!(default_workers(12), vec![1, 2, 4, 6]);
        assert_eq!(default_workers(2), vec![1]);
        assert_eq!(default_workers(1), vec![1]);
    }

    #[test]
    fn each_target_gets_its_worker_count() {
        let ports = targets::Ports::from_base(40000);
        let dir = std::env::temp_dir().join(format!("sy-scaling-{}", std::process::id()));
        let certs = targets::generate_certs(&dir.join("certs")).expect("certs");
        let env = targets::Env { ports: &ports, certs: &certs, run_dir: &dir, nginx_stream: &NginxStream::Static };
        let c = proxy_config(4, &env);
        assert!(c.contains("workers = 4\n") && !c.contains("workers = 1\n"), "{c}");
        assert!(c.contains("listen = \"127.0.0.1:40011\""), "{c}");
        let h = with_workers(&haproxy_l7(&env).expect("haproxy"), "nbthread 1", "nbthread 4").expect("line");
        assert!(h.contains("nbthread 4\n") && !h.contains("nbthread 1\n"), "{h}");
        let x = with_workers(&nginx_l7(&env).expect("nginx"), "worker_processes 1;", "worker_processes 4;");
        assert!(x.expect("line").contains("worker_processes 4;"));
        assert!(with_workers("global\n", "nbthread 1", "nbthread 4").is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_report_names_what_limited_a_row() {
        let row = |workers, rps, limited_by: Option<&str>| Row {
            target: "switchyard".into(),
            round: 1,
            workers,
            connections: 64 * workers,
            requests: 1000,
            errors: 0,
            rps,
            cps: 0.0,
            user_us_per_request: 2.0,
            kernel_us_per_request: 8.0,
            proxy_busy: 0.99,
            generator_busy: 0.5,
            origins_busy: 0.5,
            efficiency: rps / (workers as f64 * 100.0),
            p50_us: 100.0,
            p99_us: 300.0,
            limited_by: limited_by.map(String::from),
        };
        let s = Scaling {
            layout: layout(8, 4).expect("fits"),
            test: "t".into(),
            machine: "m".into(),
            duration_s: 5.0,
            rounds: 1,
            summary: Vec::new(),
            rows: vec![row(1, 100.0, None), row(4, 300.0, Some("generator cores 95 % busy"))],
            not_measured: vec![("nginx".into(), "nginx is not installed".into())],
        };
        let s = Scaling { summary: summarize(&s.rows), ..s };
        let md = markdown(&s);
        assert!(md.contains("| 1 | 1 | 64 | 100 | 1.00 | 10.00 (2.00 + 8.00) | 99 % |"), "{md}");
        assert!(!md.contains("rounds:"), "one round: no ranges {md}");
        assert!(md.contains("| 0.75 |") && md.contains("generator cores 95 % busy"), "{md}");
        assert!(md.contains("proxy 0-3"), "{md}");
        assert!(md.contains("| 4 | 300 (0.75)* |"), "{md}");
        assert!(md.contains("nginx: not measured: nginx is not installed"), "{md}");

        let again = |r: Row| Row { round: 2, rps: r.rps * 0.9, ..r };
        let rows =
            vec![row(1, 100.0, None), row(4, 300.0, None), again(row(1, 100.0, None)), again(row(4, 300.0, None))];
        let two = Scaling { rounds: 2, summary: summarize(&rows), rows, ..s };
        let md = markdown(&two);
        assert!(md.contains("- rounds: 2"), "{md}");
        assert!(md.contains("| 4 | 285 (0.75) [270–300] |"), "medians and ranges: {md}");
        assert!(md.contains("| 2 | 4 | 256 | 270 |"), "every round's row: {md}");
    }
}
