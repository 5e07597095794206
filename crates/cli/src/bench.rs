//! `switchyard bench`: the benchmark suite, and `switchyard bench compare A B`.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::Context;
use clap::{Args, Subcommand};
use switchyard_bench::load::KxGroup;
use switchyard_bench::suite::{self, SuiteOptions};

/// Arguments of `switchyard bench`.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: Option<BenchCommand>,
    /// A subset of tests at two sizes, one short run each (under 3 minutes).
    #[arg(long)]
    quick: bool,
    /// Peers to measure beside switchyard, comma-separated: haproxy, nginx,
    /// floor-uring (the floor on io_uring, beside the floor on epoll), and
    /// switchyard=PATH (a second switchyard build, e.g. the one before a change,
    /// measured in the same run and reported as `switchyard-b`).
    #[arg(long, value_delimiter = ',')]
    peers: Vec<String>,
    /// Output folder (default: bench-out/<timestamp>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Core the proxy under test is pinned to.
    #[arg(long, default_value_t = 0)]
    proxy_cpu: usize,
    /// Core the load generator and the origins are pinned to.
    #[arg(long, default_value_t = 1)]
    load_cpu: usize,
    /// Key-exchange group the load generator offers in TLS tests. The
    /// post-quantum hybrid costs the client about 20 % more CPU.
    #[arg(long, value_enum, default_value_t = TlsGroup::X25519)]
    tls_group: TlsGroup,
    /// Run just these tests of the (quick or full) plan, comma-separated: l4-cps,
    /// l4-throughput, l7-cps, l7-rps, l7-keepalive-rps, l7-keepalive-access-log,
    /// l7-throughput, l7-cookie-persistence, tls-handshake-rsa2048,
    /// tls-handshake-ecdsa-p256, tls-bulk, compression-gzip, compression-brotli,
    /// compression-zstd, cache-hit, concurrent-connections, concurrent-connections-l4, udp-frames,
    /// udp-imix, l7-failover, http2-tls, http2-clear, http2-upstream, l7-keepalive-traced-one-percent,
    /// l7-keepalive-traced-all, http3.
    #[arg(long, value_delimiter = ',', value_name = "TESTS")]
    only: Vec<String>,
    /// How each proxy's system calls are counted, on one extra run at the smallest size
    /// of each request test (never during the measured runs): perf (`perf stat` on the
    /// syscall tracepoints), strace (`strace -c -f`), auto (perf, else strace), or off.
    #[arg(long, value_enum, default_value_t = SyscallCounter::Auto)]
    syscalls: SyscallCounter,
    /// Run the sized tests at just these response sizes, in bytes, comma-separated
    /// (e.g. 128,131072); tests with none of them are left out.
    #[arg(long, value_delimiter = ',', value_name = "BYTES")]
    sizes: Vec<u64>,
    /// Measured runs per cell of every load test (default: each test's own, 1 to 3),
    /// alternating between the targets: the efficiency against a peer is the median of
    /// the rounds' ratios, so more rounds give a tighter figure on a noisy machine.
    #[arg(long, value_name = "N")]
    repeats: Option<u32>,
}

/// `--syscalls` values.
#[derive(Clone, Copy, clap::ValueEnum)]
enum SyscallCounter {
    /// perf when it counts here, else strace.
    Auto,
    /// `perf stat -e 'syscalls:sys_enter_*'`.
    Perf,
    /// `strace -c -f`.
    Strace,
    /// No counting run.
    Off,
}

impl From<SyscallCounter> for suite::syscalls::Choice {
    fn from(c: SyscallCounter) -> Self {
        match c {
            SyscallCounter::Auto => Self::Auto,
            SyscallCounter::Perf => Self::Perf,
            SyscallCounter::Strace => Self::Strace,
            SyscallCounter::Off => Self::Off,
        }
    }
}

/// `--tls-group` values.
#[derive(Clone, Copy, clap::ValueEnum)]
enum TlsGroup {
    /// X25519.
    #[value(name = "x25519")]
    X25519,
    /// NIST P-256.
    #[value(name = "p256")]
    P256,
    /// X25519 + ML-KEM-768 hybrid.
    #[value(name = "x25519mlkem768")]
    X25519MlKem768,
}

impl From<TlsGroup> for KxGroup {
    fn from(g: TlsGroup) -> KxGroup {
        match g {
            TlsGroup::X25519 => KxGroup::X25519,
            TlsGroup::P256 => KxGroup::P256,
            TlsGroup::X25519MlKem768 => KxGroup::X25519MlKem768,
        }
    }
}

#[derive(Subcommand)]
enum BenchCommand {
    /// One load run against a running target (HTTP/1.1 keep-alive, clear text): closed
    /// loop, or open loop with --rate. Prints one line of key=value figures.
    Load(LoadArgs),
    /// The floor target the suite starts itself: a minimal forwarder (no HTTP logic
    /// beyond framing the bench's messages), pinned like the proxies, whose CPU per
    /// request is the least a relay spends on each test.
    Floor(FloorArgs),
    /// Requests per second from 1 to N proxy workers (multi-core scaling), switchyard and
    /// the peers asked for: the proxy on cores 0..n, the generator and origins on the
    /// cores above the largest n.
    Scaling(ScalingArgs),
    /// Compare two results (results.json files or the folders holding them).
    Compare {
        /// The first (baseline) results.
        a: PathBuf,
        /// The second results.
        b: PathBuf,
    },
}

/// Arguments of `switchyard bench load`.
#[derive(Args)]
struct LoadArgs {
    /// Where to connect, e.g. 127.0.0.1:8080.
    #[arg(long)]
    target: std::net::SocketAddr,
    /// Requests per second over all connections (open loop); without it, as fast as
    /// the target answers (closed loop).
    #[arg(long)]
    rate: Option<f64>,
    /// Connections (closed loop) or most requests in flight (open loop).
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Measured seconds (after one second of warm-up).
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Request path (with query).
    #[arg(long, default_value = "/")]
    path: String,
    /// Generator threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

/// Arguments of `switchyard bench scaling`.
#[derive(Args)]
struct ScalingArgs {
    /// Worker counts, comma-separated (default: 1, 2, 4, ... up to half the cores).
    #[arg(long, value_delimiter = ',')]
    workers: Vec<usize>,
    /// Closed-loop connections per worker.
    #[arg(long, default_value_t = 64)]
    connections_per_worker: usize,
    /// One request per connection (connections per second) instead of keep-alive.
    #[arg(long)]
    per_connection: bool,
    /// Response body bytes.
    #[arg(long, default_value_t = 128)]
    size: u64,
    /// Measured seconds per worker count (after 2 s of warm-up).
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Peers to measure beside switchyard, comma-separated: haproxy, nginx.
    #[arg(long, value_delimiter = ',')]
    peers: Vec<String>,
    /// Output folder (default: bench-out/scaling-<timestamp>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Times the whole sweep runs, targets and worker counts interleaved; the report's
    /// first table gives each cell's median over them (and its range).
    #[arg(long, default_value_t = 1)]
    rounds: usize,
}

/// Runs `switchyard bench scaling`.
fn scaling(args: ScalingArgs) -> anyhow::Result<()> {
    use std::time::Duration;
    use suite::scaling::{self, ScalingOptions};
    anyhow::ensure!(args.duration.is_finite() && args.duration > 0.0, "--duration must be positive");
    anyhow::ensure!(args.connections_per_worker > 0, "--connections-per-worker must be positive");
    anyhow::ensure!(args.rounds > 0, "--rounds must be positive");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = if args.workers.is_empty() { scaling::default_workers(cores) } else { args.workers };
    let out = args.out.unwrap_or_else(|| scaling::default_out(&suite::timestamp_slug(SystemTime::now())));
    let opts = ScalingOptions {
        switchyard_bin: std::env::current_exe().context("cannot find the switchyard binary")?,
        out: out.clone(),
        workers,
        connections_per_worker: args.connections_per_worker,
        requests_per_connection: args.per_connection.then_some(1),
        size: args.size,
        warmup: Duration::from_secs(2),
        duration: Duration::from_secs_f64(args.duration),
        cores,
        peers: args.peers.into_iter().filter(|p| !p.trim().is_empty()).collect(),
        rounds: args.rounds,
    };
    stop_children_on_signal();
    let result = scaling::run(&opts)?;
    print!("{}", scaling::markdown(&result));
    eprintln!("bench scaling: report in {}", out.join("scaling.md").display());
    Ok(())
}

/// Arguments of `switchyard bench floor`.
#[derive(Args)]
struct FloorArgs {
    /// What it relays: l7 (one HTTP/1.1 request and response at a time over kept-alive
    /// origin connections) or l4 (bytes both ways).
    #[arg(long, value_parser = ["l4", "l7"])]
    mode: String,
    /// Where it listens, e.g. 127.0.0.1:31014.
    #[arg(long)]
    listen: std::net::SocketAddr,
    /// Origins, comma-separated, taken in turn.
    #[arg(long, value_delimiter = ',', required = true)]
    origins: Vec<std::net::SocketAddr>,
    /// Run on io_uring instead of epoll (the `floor-uring` target): multishot accept and
    /// receive, provided buffers, direct descriptors, one submission per loop turn.
    #[arg(long)]
    io_uring: bool,
}

/// Runs `switchyard bench load`.
fn load(args: &LoadArgs) -> anyhow::Result<()> {
    use std::time::Duration;
    use switchyard_bench::load::{LoadSpec, Pace, Protocol};
    anyhow::ensure!(args.duration.is_finite() && args.duration > 0.0, "--duration must be positive");
    let spec = LoadSpec {
        target: args.target,
        host: args.target.to_string(),
        tls: None,
        protocol: Protocol::Http1,
        paths: vec![args.path.clone()],
        headers: Vec::new(),
        cookies: false,
        connections: args.connections,
        requests_per_connection: None,
        pace: args.rate.map_or(Pace::Closed, |rate| Pace::Open { rate }),
        warmup: Duration::from_secs(1),
        duration: Duration::from_secs_f64(args.duration),
        threads: args.threads,
    };
    let r = switchyard_bench::load::run(&spec).context("load run")?;
    let secs = r.elapsed.as_secs_f64().max(1e-9);
    let l = &r.latency;
    println!(
        "requests={} errors={} rps={:.0} p50_us={:.0} p90_us={:.0} p99_us={:.0} p999_us={:.0} max_us={:.0}",
        r.requests,
        r.errors,
        r.requests as f64 / secs,
        l.p50_us,
        l.p90_us,
        l.p99_us,
        l.p999_us,
        l.max_us
    );
    Ok(())
}

/// Runs `switchyard bench ...`.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    if let Some(BenchCommand::Load(load_args)) = &args.command {
        return load(load_args);
    }
    if let Some(BenchCommand::Scaling(s)) = args.command {
        return scaling(s);
    }
    if let Some(BenchCommand::Floor(f)) = args.command {
        use switchyard_bench::floor::{run, Mode};
        let mode = if f.mode == "l4" { Mode::L4 } else { Mode::L7 };
        if f.io_uring {
            return switchyard_bench::floor_uring::run(f.listen, f.origins, mode)
                .with_context(|| format!("floor on io_uring on {}", f.listen));
        }
        return run(f.listen, f.origins, mode).with_context(|| format!("floor on {}", f.listen));
    }
    if let Some(BenchCommand::Compare { a, b }) = args.command {
        let text = switchyard_bench::report::compare(&results_file(&a), &results_file(&b))
            .with_context(|| format!("cannot compare {} and {}", a.display(), b.display()))?;
        println!("{text}");
        return Ok(());
    }
    let only = suite::plan::parse_only(&args.only).map_err(|e| anyhow::anyhow!("--only: {e}"))?;
    let out = args.out.unwrap_or_else(|| PathBuf::from("bench-out").join(suite::timestamp_slug(SystemTime::now())));
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (proxy_cpu, load_cpu) = if cpus < 2 && args.proxy_cpu == 0 && args.load_cpu == 1 {
        eprintln!("bench: warning: one CPU only: proxy and generator share core 0; figures are not comparable");
        (0, 0)
    } else {
        (args.proxy_cpu, args.load_cpu)
    };
    let opts = SuiteOptions {
        quick: args.quick,
        peers: args.peers.into_iter().filter(|p| !p.trim().is_empty()).collect(),
        out,
        switchyard_bin: std::env::current_exe().context("cannot find the switchyard binary")?,
        proxy_cpu,
        load_cpu,
        tls_group: args.tls_group.into(),
        only,
        syscalls: args.syscalls.into(),
        sizes: args.sizes,
        repeats: args.repeats,
    };
    stop_children_on_signal();
    suite::run(&opts)?;
    Ok(())
}

/// On SIGINT or SIGTERM, stops every process the run started (proxies,
/// origins) before exiting, instead of leaving them running.
fn stop_children_on_signal() {
    std::thread::spawn(|| {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
            return;
        };
        rt.block_on(async {
            use tokio::signal::unix::{signal, SignalKind};
            let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else {
                return;
            };
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            eprintln!("\nbench: interrupted: stopping the processes it started");
            suite::procs::stop_all();
            std::process::exit(130);
        });
    });
}

/// A results.json path: the file itself, or the file inside a report folder.
fn results_file(p: &Path) -> PathBuf {
    if p.is_dir() {
        p.join("results.json")
    } else {
        p.to_path_buf()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use switchyard_bench::results::TestKind;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    #[test]
    fn repeats_is_optional() {
        let cli = Cli::try_parse_from(["bench", "--only", "http2-upstream", "--repeats", "9"]).expect("parses");
        assert_eq!(cli.bench.repeats, Some(9));
        assert_eq!(Cli::try_parse_from(["bench"]).expect("parses").bench.repeats, None);
    }

    #[test]
    fn only_takes_a_comma_separated_list() {
        let cli = Cli::try_parse_from(["bench", "--only", "udp-frames,udp-imix"]).expect("parses");
        assert_eq!(cli.bench.only, ["udp-frames", "udp-imix"]);
        let kinds = suite::plan::parse_only(&cli.bench.only).expect("known");
        assert_eq!(kinds, [TestKind::UdpFrames, TestKind::UdpImix]);
        let none = Cli::try_parse_from(["bench", "--quick"]).expect("parses");
        assert!(none.bench.only.is_empty());
    }

    #[test]
    fn load_takes_a_target_and_an_optional_rate() {
        let cli =
            Cli::try_parse_from(["bench", "load", "--target", "127.0.0.1:8080", "--rate", "5000"]).expect("parses");
        let Some(BenchCommand::Load(args)) = cli.bench.command else { panic!("not load") };
        assert_eq!((args.target.port(), args.rate, args.connections), (8080, Some(5000.0), 64));
        assert!(Cli::try_parse_from(["bench", "load"]).is_err(), "--target is required");
    }

    #[test]
    fn floor_takes_a_mode_a_listener_and_origins() {
        let cli = Cli::try_parse_from([
            "bench",
            "floor",
            "--mode",
            "l7",
            "--listen",
            "127.0.0.1:9000",
            "--origins",
            "127.0.0.1:9001,127.0.0.1:9002",
        ])
        .expect("parses");
        let Some(BenchCommand::Floor(f)) = cli.bench.command else { panic!("not floor") };
        assert_eq!((f.mode.as_str(), f.origins.len(), f.io_uring), ("l7", 2, false));
        let uring = Cli::try_parse_from([
            "bench",
            "floor",
            "--io-uring",
            "--mode",
            "l4",
            "--listen",
            "127.0.0.1:9000",
            "--origins",
            "127.0.0.1:9001",
        ])
        .expect("parses");
        let Some(BenchCommand::Floor(f)) = uring.bench.command else { panic!("not floor") };
        assert!(f.io_uring);
        assert!(Cli::try_parse_from([
            "bench",
            "floor",
            "--mode",
            "l5",
            "--listen",
            "127.0.0.1:1",
            "--origins",
            "127.0.0.1:2"
        ])
        .is_err());
        let off = Cli::try_parse_from(["bench", "--syscalls", "off"]).expect("parses");
        assert!(matches!(off.bench.syscalls, SyscallCounter::Off));
    }

    #[test]
    fn help_lists_every_test_name() {
        use clap::CommandFactory;
        let help = Cli::command().render_long_help().to_string();
        for k in TestKind::ALL {
            assert!(help.contains(k.slug()), "--help misses {}", k.slug());
        }
    }
}
