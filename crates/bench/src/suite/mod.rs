//! The benchmark methodology runner behind `switchyard bench`.
//!
//! [`run`] plans the matrix ([`plan`]), generates a functionally identical configuration
//! per test for every target ([`targets`]), starts each target pinned to the proxy core
//! with one worker and the origins on the load core ([`procs`]), checks that every target
//! really does the function before measuring it ([`checks`]), measures ([`runner`]) with
//! the machine's physical limits ([`limits`]) and facts ([`machine`]) recorded in the same
//! run, and hands the [`Results`] to the report writer. Every cell of the matrix ends up
//! in the results: measured, not supported (with the reason) or failed (with the reason).

pub mod checks;
pub mod failover;
pub mod limits;
pub mod machine;
pub mod plan;
pub mod procs;
pub mod runner;
pub mod scaling;
pub mod syscalls;
pub mod targets;

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};

use crate::results::{Method, Outcome, Results, TargetInfo, TestResult, SCHEMA_VERSION};
use plan::{Setup, Support, TargetKind};
use procs::Proc;
use runner::{CellKey, CellRuns, Live};

/// Options of one `switchyard bench` run.
#[derive(Debug, Clone)]
pub struct SuiteOptions {
    /// `--quick`: a subset of tests at two sizes, one short run each.
    pub quick: bool,
    /// Peers to measure beside switchyard (`haproxy`, `nginx`).
    pub peers: Vec<String>,
    /// Output folder (results, report, configs, logs).
    pub out: PathBuf,
    /// The switchyard binary (proxy and origins).
    pub switchyard_bin: PathBuf,
    /// Core the proxy is pinned to.
    pub proxy_cpu: usize,
    /// Core the generator and the origins are pinned to.
    pub load_cpu: usize,
    /// Key-exchange group the generator offers in TLS tests (the post-quantum
    /// hybrid costs the client about 20 % more than X25519).
    pub tls_group: crate::load::KxGroup,
    /// `--only`: run just these tests of the plan (all when empty); see
    /// [`plan::parse_only`].
    pub only: Vec<crate::results::TestKind>,
    /// `--syscalls`: how each proxy's system calls are counted (an extra run per test).
    pub syscalls: syscalls::Choice,
    /// `--sizes`: run the sized tests at just these sizes, bytes (all when empty).
    pub sizes: Vec<u64>,
    /// `--repeats`: measured runs per cell of every load test (each test's own when `None`).
    pub repeats: Option<u32>,
}

/// A target as discovered at start: its program (none for `direct`) or why it is missing.
struct Target {
    kind: TargetKind,
    program: Result<PathBuf, String>,
    version: String,
    configs: Vec<String>,
}

/// Writes a line above the progress bar (or to stderr when the bar is hidden).
fn say(bar: &ProgressBar, line: &str) {
    if bar.is_hidden() {
        eprintln!("{line}");
    } else {
        bar.println(line);
    }
}

/// Runs the suite, writes the report into `opts.out`, and returns the results.
pub fn run(opts: &SuiteOptions) -> anyhow::Result<Results> {
    let started = rfc3339(SystemTime::now());
    let t0 = Instant::now();
    // Absolute, because peers (NGINX's prefix) resolve relative paths from elsewhere.
    let out = &std::path::absolute(&opts.out).with_context(|| format!("bad output folder {}", opts.out.display()))?;
    for d in ["configs", "logs", "run"] {
        std::fs::create_dir_all(out.join(d)).with_context(|| format!("cannot create {}", out.join(d).display()))?;
    }
    if let Err(e) = procs::pin_self(opts.load_cpu) {
        eprintln!("bench: warning: cannot pin the generator to core {}: {e}", opts.load_cpu);
    }
    let machine = machine::facts();
    let ports = free_ports()?;
    let certs = targets::generate_certs(&out.join("configs/certs"))?;
    let nginx_v = procs::which("nginx")
        .and_then(|n| std::process::Command::new(n).arg("-V").output().ok())
        .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
        .unwrap_or_default();
    let stream = targets::nginx_stream(&nginx_v);
    let env = targets::Env { ports: &ports, certs: &certs, run_dir: &out.join("run"), nginx_stream: &stream };

    let mut tlist = discover(opts)?;
    let mut plan = plan::plan(opts.quick);
    plan::restrict(&mut plan, &opts.only).map_err(anyhow::Error::msg)?;
    plan::restrict_sizes(&mut plan, &opts.sizes).map_err(|e| anyhow::anyhow!("--sizes: {e}"))?;
    if let Some(n) = opts.repeats {
        plan::set_repeats(&mut plan, n).map_err(|e| anyhow::anyhow!("--repeats: {e}"))?;
    }
    plan.tls_group = opts.tls_group;
    let counter = syscalls::pick(opts.syscalls);
    match &counter {
        Ok(Some(tool)) => eprintln!("bench: system calls counted with {} on an extra run per test", tool.name()),
        Ok(None) => plan.syscalls = false,
        Err(why) => eprintln!("bench: warning: system calls cannot be counted here: {why}"),
    }
    // Generate every configuration and decide support per (target, setup).
    let mut support: BTreeMap<(TargetKind, Setup), Support> = BTreeMap::new();
    let setups: Vec<Setup> = {
        let mut v: Vec<Setup> = plan.tests.iter().map(|t| t.setup).collect();
        v.dedup();
        v
    };
    for t in &mut tlist {
        for &setup in &setups {
            let s = configure(t, setup, &env, out);
            support.insert((t.kind, setup), s);
        }
    }
    let kinds: Vec<TargetKind> = tlist.iter().map(|t| t.kind).collect();
    let mut cells = plan::cells(&plan, &kinds, |k, tp| match k {
        TargetKind::Direct => plan::direct_support(tp),
        _ => support[&(k, tp.setup)].clone(),
    });
    // The floor has a row only where it can move the test's bytes.
    cells.retain(|c| !c.target.is_floor() || plan::has_floor(plan.tests[c.test].kind));
    for c in cells.iter_mut().filter(|c| plan.tests[c.test].setup == Setup::Cache && c.support == Support::Yes) {
        if let (Some(size), Some(max)) = (c.size, targets::cache_max_object(c.target)) {
            if size > max {
                c.support = Support::No(format!(
                    "objects of {size} bytes are above the largest this cache stores as configured ({max} bytes)"
                ));
            }
        }
    }
    let est = plan::fit(&mut plan, &cells, plan::FULL_BUDGET);
    let counts = plan::count(&plan, &cells);
    eprintln!(
        "bench: {} cells ({} measured, {} not supported), {} runs + {} latency points; \
         warm-up {:.1} s, runs {:.1} s; estimated {:.0} min {:.0} s",
        counts.cells,
        counts.measured,
        counts.not_supported,
        counts.runs,
        counts.latency_points,
        plan.timing.warmup.as_secs_f64(),
        plan.timing.duration.as_secs_f64(),
        (est.as_secs() / 60) as f64,
        (est.as_secs() % 60) as f64
    );

    // Origins and the UDP echo on the load core.
    let logs = out.join("logs");
    let mut origins = Vec::new();
    for (i, name) in ["main-a", "main-b", "images-c"].iter().enumerate() {
        let port = ports.origins[i];
        let args =
            ["origin", "--listen", &format!("127.0.0.1:{port}"), "--name", name, "--threads", "1"].map(String::from);
        let log = logs.join(format!("origin-{name}.log"));
        let mut p = Proc::spawn(&format!("origin {name}"), opts.load_cpu, &opts.switchyard_bin, &args, &log)?;
        p.wait_ready(SocketAddr::from(([127, 0, 0, 1], port)), false, &log)?;
        origins.push(p);
    }
    let echo_stop = Arc::new(AtomicBool::new(false));
    let echo = udp_echo(ports.udp_echo, echo_stop.clone())?;

    let bar = ProgressBar::new((counts.runs + counts.latency_points) as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} ETA {eta} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );

    // Physical limits, on the load core, with the origin's own compressible body.
    let html = checks::get(SocketAddr::from(([127, 0, 0, 1], ports.origins[0])), "/l?size=131072&compressible=1", &[])
        .map(|r| r.body)
        .ok()
        .filter(|b| b.len() == 131072)
        .unwrap_or_else(|| limits::synthetic_html(131072));
    bar.set_message("physical limits");
    let (limits, warnings) = limits::measure(plan.timing.limit_time, &html);
    for w in warnings {
        say(&bar, &format!("bench: warning: {w}"));
    }

    // Cells to measure, and the final outcomes of those that will not be.
    let mut outcomes: BTreeMap<CellKey, Outcome> = BTreeMap::new();
    let mut pending: BTreeMap<CellKey, CellRuns> = BTreeMap::new();
    for c in &cells {
        match &c.support {
            Support::Yes => {
                pending.insert((c.test, c.size, c.target), CellRuns::default());
            }
            Support::No(reason) => {
                outcomes.insert((c.test, c.size, c.target), Outcome::NotSupported { reason: reason.clone() });
            }
        }
    }

    let ctx = runner::Ctx {
        plan: &plan,
        limits: &limits,
        load_cpu: opts.load_cpu,
        bar: &bar,
        env: &env,
        bin: &opts.switchyard_bin,
        logs: &logs,
        syscalls: counter,
    };
    for &setup in &setups {
        let tests: Vec<usize> = (0..plan.tests.len()).filter(|&i| plan.tests[i].setup == setup).collect();
        let wanted: Vec<&Target> =
            tlist.iter().filter(|t| pending.keys().any(|k| k.2 == t.kind && tests.contains(&k.0))).collect();
        let mut procs: Vec<(TargetKind, Option<Proc>, SocketAddr)> = Vec::new();
        for t in wanted {
            let addr = SocketAddr::from(([127, 0, 0, 1], ports.target_port(t.kind, setup)));
            bar.set_message(format!("starting {} ({})", t.kind.name(), setup.name()));
            let started = start(t, setup, opts, out, &ports).and_then(|mut p| {
                if let Some(p) = p.as_mut() {
                    let log = logs.join(format!("{}-{}.log", t.kind.name(), setup.name()));
                    p.wait_ready(addr, setup == Setup::Udp, &log)?;
                }
                checks::check(t.kind, setup, addr, &ports.origins[..2], env.run_dir)
                    .context("function check failed")?;
                Ok(p)
            });
            match started {
                Ok(p) => procs.push((t.kind, p, addr)),
                Err(e) => {
                    let reason = format!("{e:#}");
                    say(&bar, &format!("bench: {} ({}): {reason}", t.kind.name(), setup.name()));
                    for (k, cell) in pending.iter_mut().filter(|(k, _)| k.2 == t.kind && tests.contains(&k.0)) {
                        cell.failure = Some(reason.clone());
                        let runs = plan.tests[k.0].repeats as u64;
                        bar.inc(runs);
                    }
                }
            }
        }
        let live: Vec<Live> =
            procs.iter().map(|(k, p, addr)| Live { target: *k, proc: p.as_ref(), addr: *addr }).collect();
        let mut here: BTreeMap<CellKey, CellRuns> = BTreeMap::new();
        for l in &live {
            let keys: Vec<CellKey> =
                pending.keys().filter(|k| k.2 == l.target && tests.contains(&k.0)).copied().collect();
            for k in keys {
                if let Some(c) = pending.remove(&k) {
                    here.insert(k, c);
                }
            }
        }
        runner::measure_setup(&ctx, &tests, &live, &mut here);
        drop(live);
        for (kind, p, _) in &mut procs {
            if let Some(p) = p.as_mut() {
                p.stop();
            }
            if setup == Setup::L7Log {
                keep_log_sample(&targets::access_log_path(env.run_dir, *kind), &logs, *kind);
            }
        }
        pending.extend(here);
    }
    bar.finish_and_clear();
    echo_stop.store(true, Ordering::Relaxed);
    let _ = echo.join();
    drop(origins);

    for (k, cell) in pending {
        let t = &plan.tests[k.0];
        outcomes.insert(k, cell.outcome(t, k.1, &limits));
    }
    // Results in plan order: test, size, then target order.
    let mut tests = Vec::new();
    for c in &cells {
        let k = (c.test, c.size, c.target);
        if let Some(o) = outcomes.remove(&k) {
            tests.push(TestResult {
                test: plan.tests[c.test].kind,
                size: c.size,
                target: c.target.name().into(),
                outcome: o,
            });
        }
    }
    let results = Results {
        schema: SCHEMA_VERSION,
        started,
        finished: rfc3339(SystemTime::now()),
        quick: opts.quick,
        machine,
        targets: tlist
            .into_iter()
            .map(|t| TargetInfo { name: t.kind.name().into(), version: t.version, configs: t.configs })
            .collect(),
        limits,
        method: Method {
            warmup_s: plan.timing.warmup.as_secs_f64(),
            duration_s: plan.timing.duration.as_secs_f64(),
            repeats: plan.tests.iter().map(|t| t.repeats).max().unwrap_or(1),
            proxy_cpu: opts.proxy_cpu,
            load_cpu: opts.load_cpu,
            connections: plan.timing.connections,
            tls_group: format!("{:?}", plan.tls_group),
        },
        tests,
    };
    crate::report::write(&results, out).with_context(|| format!("cannot write the report into {}", out.display()))?;
    eprintln!("bench: done in {:.0} s; report in {}", t0.elapsed().as_secs_f64(), out.display());
    Ok(results)
}

/// The targets of this run: direct, switchyard, and the requested peers (missing ones
/// kept, so their cells say why).
fn discover(opts: &SuiteOptions) -> anyhow::Result<Vec<Target>> {
    let sw = procs::version_of(&opts.switchyard_bin, &["--version"])
        .with_context(|| format!("cannot run {} --version", opts.switchyard_bin.display()))?;
    let mut v = vec![
        Target {
            kind: TargetKind::Direct,
            program: Err("baseline".into()),
            version: format!("origin simulator ({sw})"),
            configs: Vec::new(),
        },
        Target {
            kind: TargetKind::Switchyard,
            program: Ok(opts.switchyard_bin.clone()),
            version: sw.clone(),
            configs: Vec::new(),
        },
        Target {
            kind: TargetKind::Floor,
            program: Ok(opts.switchyard_bin.clone()),
            version: format!("minimal forwarder, `switchyard bench floor` ({sw})"),
            configs: Vec::new(),
        },
    ];
    for name in &opts.peers {
        let Some(kind) = TargetKind::peer(name) else {
            bail!("unknown peer `{name}` (known: haproxy, nginx, floor-uring, switchyard=PATH)")
        };
        if v.iter().any(|t| t.kind == kind) {
            continue;
        }
        if kind == TargetKind::FloorUring {
            v.push(floor_uring_target(opts, &sw));
            continue;
        }
        if let Some(path) = plan::second_build(name) {
            v.push(second_build_target(Path::new(path)));
            continue;
        }
        let (program, version) = match procs::which(kind.name()) {
            Some(p) => {
                let ver = match kind {
                    TargetKind::Haproxy => procs::version_of(&p, &["-v"]).map(|v| haproxy_with_compressor(&p, v)),
                    _ => procs::version_of(&p, &["-v"]).map(|s| s.trim_start_matches("nginx version: ").to_string()),
                };
                (Ok(p), ver.unwrap_or_else(|| "unknown".into()))
            }
            None => (Err(format!("{name} is not installed")), "not installed".into()),
        };
        if let Err(e) = &program {
            eprintln!("bench: {e}: its cells are reported as not supported");
        }
        v.push(Target { kind, program, version, configs: Vec::new() });
    }
    Ok(v)
}

/// A second switchyard build as a target (`--peers switchyard=PATH`): not supported,
/// with the reason, when the binary does not run.
fn second_build_target(path: &Path) -> Target {
    let (program, version) = match procs::version_of(path, &["--version"]) {
        Some(v) => (Ok(path.to_path_buf()), format!("{v} ({})", path.display())),
        None => {
            let why = format!("cannot run {} --version", path.display());
            eprintln!("bench: switchyard-b: {why}: its cells are reported as not supported");
            (Err(why), "not runnable".into())
        }
    };
    Target { kind: TargetKind::SwitchyardB, program, version, configs: Vec::new() }
}

/// The floor on io_uring as a target: not supported, with the kernel's reason, where
/// io_uring cannot run it (probed in this process, on the kernel the target would use).
fn floor_uring_target(opts: &SuiteOptions, sw: &str) -> Target {
    let (program, version) = match crate::floor_uring::probe() {
        Ok(setup) => (
            Ok(opts.switchyard_bin.clone()),
            format!("minimal forwarder on io_uring, `switchyard bench floor --io-uring` ({sw}; {setup})"),
        ),
        Err(e) => {
            eprintln!("bench: floor-uring: {e}: its cells are reported as not supported");
            (Err(e.to_string()), "not supported here".into())
        }
    };
    Target { kind: TargetKind::FloorUring, program, version, configs: Vec::new() }
}

/// Writes the target's configuration for `setup` and says whether it can be measured.
fn configure(t: &mut Target, setup: Setup, env: &targets::Env, out: &Path) -> Support {
    match (t.kind, setup) {
        (TargetKind::Direct, _) | (TargetKind::Floor, Setup::L7 | Setup::L4) => return Support::Yes,
        (TargetKind::FloorUring, Setup::L7 | Setup::L4) => {
            return t.program.as_ref().map_or_else(|why| Support::No(why.clone()), |_| Support::Yes)
        }
        (TargetKind::Floor | TargetKind::FloorUring, _) => {
            return Support::No("the floor moves HTTP/1.1 and TCP bytes only".into())
        }
        (TargetKind::SwitchyardB, Setup::Failover) => {
            return Support::No("the second switchyard build is compared on the other tests".into())
        }
        _ => {}
    }
    let program = match &t.program {
        Ok(p) => p.clone(),
        Err(why) => return Support::No(why.clone()),
    };
    let text = match t.kind {
        TargetKind::Switchyard | TargetKind::SwitchyardB => Ok(targets::switchyard_as(t.kind, setup, env)),
        TargetKind::Haproxy => targets::haproxy(setup, env),
        _ => targets::nginx(setup, env),
    };
    let text = match text {
        Ok(s) => s,
        Err(why) => return Support::No(why),
    };
    let rel = format!("configs/{}/{}", t.kind.name(), targets::config_file_name(t.kind, setup));
    let file = out.join(&rel);
    if let Some(dir) = file.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Err(e) = std::fs::write(&file, text) {
        return Support::No(format!("cannot write {}: {e}", file.display()));
    }
    t.configs.push(rel);
    if !t.kind.is_switchyard() {
        return Support::Yes;
    }
    // switchyard decides itself what it supports: its checker refuses features not built.
    match std::process::Command::new(&program).arg("check").arg("-c").arg(&file).output() {
        Ok(o) if o.status.success() => Support::Yes,
        Ok(o) => {
            let msg = String::from_utf8_lossy(&o.stderr);
            let first = msg
                .lines()
                .find(|l| l.contains("error:"))
                .map(|l| l.split_once("error:").map_or(l, |(_, m)| m).trim().to_string())
                .unwrap_or_else(|| msg.trim().to_string());
            Support::No(format!("switchyard check refuses the configuration: {first}"))
        }
        Err(e) => Support::No(format!("cannot run switchyard check: {e}")),
    }
}

/// Starts a target for a setup (none for `direct`).
fn start(
    t: &Target,
    setup: Setup,
    opts: &SuiteOptions,
    out: &Path,
    ports: &targets::Ports,
) -> anyhow::Result<Option<Proc>> {
    let Ok(program) = &t.program else { return Ok(None) };
    let file = out.join(format!("configs/{}/{}", t.kind.name(), targets::config_file_name(t.kind, setup)));
    let log = out.join(format!("logs/{}-{}.log", t.kind.name(), setup.name()));
    let run_dir = out.join("run");
    let access_log = targets::access_log_path(&run_dir, t.kind);
    if setup == Setup::L7Log {
        // A fresh file per start: the check counts the lines this start writes.
        let _ = std::fs::remove_file(&access_log);
    }
    let args: Vec<String> = match t.kind {
        TargetKind::Switchyard | TargetKind::SwitchyardB => vec!["run".into(), "-c".into(), file.display().to_string()],
        TargetKind::Haproxy => vec!["-db".into(), "-f".into(), file.display().to_string()],
        TargetKind::Nginx => {
            vec![
                "-p".into(),
                run_dir.display().to_string(),
                "-e".into(),
                targets::nginx_error_log(&run_dir).display().to_string(),
                "-c".into(),
                file.display().to_string(),
            ]
        }
        TargetKind::Floor | TargetKind::FloorUring => {
            let mode = if setup == Setup::L4 { "l4" } else { "l7" };
            let main: Vec<String> = ports.origins[..2].iter().map(|p| format!("127.0.0.1:{p}")).collect();
            let listen = format!("127.0.0.1:{}", ports.target_port(t.kind, setup));
            let mut args: Vec<String> =
                ["bench", "floor", "--mode", mode, "--listen", &listen, "--origins", &main.join(",")]
                    .map(String::from)
                    .to_vec();
            if t.kind == TargetKind::FloorUring {
                args.push("--io-uring".into());
            }
            args
        }
        TargetKind::Direct => return Ok(None),
    };
    // HAProxy logs to standard output in this setup (see targets::access_log_path).
    let stdout = if setup == Setup::L7Log && t.kind == TargetKind::Haproxy { &access_log } else { &log };
    Proc::spawn_split(t.kind.name(), opts.proxy_cpu, program, &args, stdout, &log).map(Some)
}

/// HAProxy's version line with the library its gzip comes from (`haproxy -vv`: libslz
/// or zlib), which matters to the compression test.
fn haproxy_with_compressor(program: &Path, version: String) -> String {
    let vv = std::process::Command::new(program).arg("-vv").output().ok();
    let text = vv.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    match haproxy_compressor(&text) {
        Some(lib) => format!("{version} (gzip by {lib})"),
        None => version,
    }
}

/// The compression library named in `haproxy -vv` output.
pub fn haproxy_compressor(vv: &str) -> Option<&'static str> {
    if vv.contains("Built with libslz") {
        Some("libslz")
    } else if vv.contains("Built with zlib") {
        Some("zlib")
    } else {
        None
    }
}

/// Keeps the first lines of a target's access log under `logs/` (so the report shows
/// what each target wrote) and removes the file: a run writes tens of megabytes.
fn keep_log_sample(access_log: &Path, logs: &Path, target: TargetKind) {
    use std::io::BufRead;
    let Ok(file) = std::fs::File::open(access_log) else { return };
    let sample: Vec<String> = std::io::BufReader::new(file).lines().take(5).map_while(Result::ok).collect();
    let _ = std::fs::write(logs.join(format!("{}-access-sample.log", target.name())), sample.join("\n") + "\n");
    let _ = std::fs::remove_file(access_log);
}

/// Loopback ports, from base 31000 upwards in steps of 100 until all are free
/// (see [`targets::Ports::from_base`]).
pub fn free_ports() -> anyhow::Result<targets::Ports> {
    for i in 0..40u16 {
        let ports = targets::Ports::from_base(31000 + i * 100);
        let free = ports
            .all()
            .iter()
            .all(|&p| TcpListener::bind(("127.0.0.1", p)).is_ok() && UdpSocket::bind(("127.0.0.1", p)).is_ok());
        if free {
            return Ok(ports);
        }
    }
    bail!("no free block of loopback ports found from 31000 to 35000")
}

/// A UDP echo server on a thread (it inherits the load-core pinning).
fn udp_echo(port: u16, stop: Arc<AtomicBool>) -> anyhow::Result<std::thread::JoinHandle<()>> {
    let sock = UdpSocket::bind(("127.0.0.1", port)).with_context(|| format!("UDP echo on port {port}"))?;
    sock.set_read_timeout(Some(Duration::from_millis(100)))?;
    Ok(std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        while !stop.load(Ordering::Relaxed) {
            if let Ok((n, peer)) = sock.recv_from(&mut buf) {
                let _ = sock.send_to(&buf[..n], peer);
            }
        }
    }))
}

/// Formats a time as RFC 3339 UTC (`2026-01-02T03:04:05Z`).
pub fn rfc3339(t: SystemTime) -> String {
    let (y, mo, d, h, mi, s) = civil(t);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

/// A time as a folder name (`20260102-030405`), for the default output folder.
pub fn timestamp_slug(t: SystemTime) -> String {
    let (y, mo, d, h, mi, s) = civil(t);
    format!("{y:04}{mo:02}{d:02}-{h:02}{mi:02}{s:02}")
}

/// UTC calendar fields of a time (Hinnant's days-to-civil).
fn civil(t: SystemTime) -> (i64, u32, u32, u32, u32, u32) {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d, (rem / 3600) as u32, (rem % 3600 / 60) as u32, (rem % 60) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_of_known_instants() {
        let at = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        assert_eq!(rfc3339(at(0)), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(at(951_782_400)), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(at(1_767_323_045)), "2026-01-02T03:04:05Z");
        assert_eq!(timestamp_slug(at(1_767_323_045)), "20260102-030405");
    }

    #[test]
    fn haproxy_compressor_from_vv() {
        assert_eq!(
            haproxy_compressor("Support for malloc_trim() is enabled.\nBuilt with libslz for stateless compression.\n"),
            Some("libslz")
        );
        assert_eq!(haproxy_compressor("Built with zlib version : 1.2.13\n"), Some("zlib"));
        assert_eq!(haproxy_compressor("Built without compression support\n"), None);
    }
}
