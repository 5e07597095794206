//! `switchyard`: the command line. Thin by design: parse arguments, set up
//! logging and signals, then hand over to the config, engine and bench crates.

#[cfg_attr(feature = "system-alloc", allow(dead_code))]
mod alloc;
mod backend;
mod bench;
mod commands;
mod event_log;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// mimalloc instead of the system allocator ([`alloc`], docs/adr/0008-allocator.md),
/// unless built with the `system-alloc` feature (for heap profilers).
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static ALLOCATOR: alloc::Allocator = alloc::Allocator;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// The version and the build it is (`dist, profile-guided`, `release`...), named by
/// `build.rs`: benchmark reports record this line.
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("SWITCHYARD_BUILD"), ")");

/// An application delivery controller: L4/L7 load balancer with its own benchmark suite.
#[derive(Parser)]
#[command(name = "switchyard", version = VERSION, about)]
struct Cli {
    /// Log filter (tracing syntax), e.g. `info`, `debug`, `switchyard_engine=debug`.
    #[arg(long, global = true, env = "SWITCHYARD_LOG", default_value = "info")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the zero-config demo: the balancer on 127.0.0.1:8080 in front of two built-in origins.
    Up,
    /// Run a configuration file. SIGTERM or SIGINT drains in-flight requests, then exits.
    Run {
        /// Configuration file (TOML).
        #[arg(short, long)]
        config: PathBuf,
        /// Worker threads (overrides the file's `workers`).
        #[arg(long)]
        workers: Option<usize>,
    },
    /// Validate a configuration file: exit 0 if valid, 1 with every problem listed if not.
    Check {
        /// Configuration file (TOML).
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Run the origin simulator (the test and benchmark server).
    Origin {
        /// Address to listen on, e.g. 127.0.0.1:19001 or [::1]:19001.
        #[arg(long)]
        listen: std::net::SocketAddr,
        /// Name sent in every response's `x-origin` header.
        #[arg(long, default_value = "origin")]
        name: String,
        /// Worker threads.
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Serve HTTPS with this certificate chain (PEM); needs --tls-key.
        #[arg(long, requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// The private key (PEM) of --tls-cert.
        #[arg(long, requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// Require client certificates that chain to this CA (PEM); needs --tls-cert.
        #[arg(long, requires = "tls_cert")]
        tls_client_ca: Option<PathBuf>,
    },
    /// Run the benchmark suite against switchyard (and peers), or compare two results.
    Bench(bench::BenchArgs),
    /// Talk to a running switchyard's admin API: status, stats, server changes, reload.
    Ctl(switchyard_admin::ctl::CtlArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter =
        tracing_subscriber::EnvFilter::try_new(&cli.log).unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let stderr = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .with_target(false);
    tracing_subscriber::registry().with(event_log::layer()).with(stderr).with(filter).init();
    if matches!(cli.command, Command::Up | Command::Run { .. }) {
        alloc::huge_pages_off();
    }
    let result = match cli.command {
        Command::Up => commands::up(),
        Command::Run { config, workers } => commands::run(&config, workers),
        Command::Check { config } => return commands::check(&config),
        Command::Origin { listen, name, threads, tls_cert, tls_key, tls_client_ca } => {
            let tls = tls_cert.zip(tls_key).map(|(cert, key)| switchyard_bench::origin::TlsFiles {
                cert,
                key,
                client_ca: tls_client_ca,
            });
            switchyard_bench::origin::run(listen, &name, threads, tls.as_ref()).map_err(anyhow::Error::from)
        }
        Command::Bench(args) => bench::run(args),
        Command::Ctl(args) => return switchyard_admin::ctl::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("switchyard: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
