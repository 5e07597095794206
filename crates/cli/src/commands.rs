//! The subcommands that run something: `up`, `run`, `check`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{anyhow, Context};
use switchyard_bench::origin::Origin;
use switchyard_config::Severity;
use switchyard_engine::{Applied, ApplyError, Change, Control};

use crate::backend::EngineBackend;
use tokio::signal::unix::{signal, SignalKind};

/// The embedded demo configuration of `switchyard up`.
const DEMO: &str = include_str!("demo.toml");
/// The demo's built-in origins: (address, name).
const DEMO_ORIGINS: [(&str, &str); 2] = [("127.0.0.1:9101", "origin-a"), ("127.0.0.1:9102", "origin-b")];

/// `switchyard check -c FILE`.
pub fn check(path: &Path) -> ExitCode {
    let source = match std::fs::read_to_string(path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{}:1:1: error: cannot read file: {e}", path.display());
            return ExitCode::FAILURE;
        }
    };
    let (config, diagnostics) = switchyard_config::parse_file_with_warnings(&source, path);
    for d in &diagnostics.0 {
        eprintln!("{d}");
    }
    let errors = diagnostics.0.iter().filter(|d| d.severity == Severity::Error).count();
    match config {
        Some(config) if errors == 0 => {
            println!("{}: ok ({} service(s), {} pool(s))", path.display(), config.services.len(), config.pools.len());
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("{}: {errors} error(s)", path.display());
            ExitCode::FAILURE
        }
    }
}

/// `switchyard run -c FILE [--workers N]`.
pub fn run(path: &Path, workers: Option<usize>) -> anyhow::Result<()> {
    let source = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let (config, diagnostics) = switchyard_config::parse_file_with_warnings(&source, path);
    let config = config.ok_or_else(|| anyhow!("invalid configuration\n{diagnostics}"))?;
    for d in &diagnostics.0 {
        tracing::warn!("{d}");
    }
    serve(config, workers, Vec::new(), Some(path.to_path_buf()), source)
}

/// `switchyard up`: the demo configuration plus its two origins, in one process.
pub fn up() -> anyhow::Result<()> {
    let config = switchyard_config::parse(DEMO, "<demo>").map_err(|d| anyhow!("demo configuration: {d}"))?;
    let origins = DEMO_ORIGINS
        .iter()
        .map(|(addr, name)| Ok((addr.parse()?, *name)))
        .collect::<anyhow::Result<Vec<(std::net::SocketAddr, &str)>>>()?;
    serve(config, None, origins, None, DEMO.to_string())
}

/// Starts the engine (and any in-process origins), prints where it listens,
/// and waits for a signal. The first SIGTERM/SIGINT drains; a second one exits at once.
fn serve(
    config: switchyard_config::Config,
    workers: Option<usize>,
    origins: Vec<(std::net::SocketAddr, &str)>,
    file: Option<PathBuf>,
    source: String,
) -> anyhow::Result<()> {
    if let Some(events) = &config.event_log {
        crate::event_log::start(events).context("cannot open the event log's syslog socket")?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("cannot start control runtime")?;
    runtime.block_on(async move {
        // Before anything listens: a SIGHUP that arrives once clients can
        // be served must reload, never meet the default action (exit).
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let mut hup = signal(SignalKind::hangup())?;
        let mut usr1 = signal(SignalKind::user_defined1())?;
        let (origin_stop, origin_stopped) = tokio::sync::watch::channel(false);
        for (addr, name) in &origins {
            let origin = Origin::bind(*addr, name).await.with_context(|| format!("origin {name} on {addr}"))?;
            let mut stopped = origin_stopped.clone();
            tokio::spawn(origin.serve(async move {
                let _ = stopped.wait_for(|s| *s).await;
            }));
        }
        let admin = config.admin.clone();
        let handle = switchyard_engine::start(config, workers)?;
        for (service, mode, addr) in handle.listening() {
            println!("switchyard: service `{service}` listening on {}", listener_url(mode, addr));
        }
        let backend = Arc::new(EngineBackend::new(handle.control(), file.clone(), source));
        if let Some(admin) = &admin {
            let mut stopped = origin_stopped.clone();
            let (addr, served) = switchyard_admin::serve(admin, backend.clone(), async move {
                let _ = stopped.wait_for(|s| *s).await;
            })
            .await
            .with_context(|| format!("admin listener on {}", admin.listen))?;
            tokio::spawn(served);
            println!("switchyard: dashboard and admin API on http://{addr}/");
        }
        if !origins.is_empty() {
            print_demo_tour(&origins);
        }
        loop {
            tokio::select! {
                _ = term.recv() => break,
                _ = int.recv() => break,
                _ = usr1.recv() => {
                    tracing::info!("SIGUSR1: reopening the access log");
                    handle.control().reopen_logs();
                }
                _ = hup.recv() => {
                    let backend = backend.clone();
                    let _ = tokio::task::spawn_blocking(move || backend.reload_now()).await;
                }
            }
        }
        tracing::info!("draining: finishing in-flight requests (signal again to exit at once)");
        handle.shutdown();
        let mut join = tokio::task::spawn_blocking(move || handle.join());
        tokio::select! {
            _ = &mut join => {}
            _ = term.recv() => std::process::exit(130),
            _ = int.recv() => std::process::exit(130),
        }
        let _ = origin_stop.send(true);
        tracing::info!("stopped");
        Ok(())
    })
}

/// Re-reads the configuration file and applies it. An invalid file is
/// refused with the same diagnostics as `check`, and the running
/// configuration stays.
pub fn reload_file(control: &Control, file: Option<&Path>) -> Result<Applied, ReloadError> {
    let Some(path) = file else {
        tracing::warn!("reload: running the embedded demo configuration, there is no file to re-read");
        return Err(ReloadError::NoFile);
    };
    let (config, diagnostics) = switchyard_config::load_with_warnings(path);
    let Some(config) = config else {
        for d in &diagnostics.0 {
            tracing::error!("{d}");
        }
        tracing::error!("reload refused: {} is invalid; the running configuration stays", path.display());
        return Err(ReloadError::Invalid(diagnostics.0.iter().map(|d| d.to_string()).collect()));
    };
    for d in &diagnostics.0 {
        tracing::warn!("{d}");
    }
    match control.apply(Change::Reload(Box::new(config))) {
        Ok(applied) => {
            if let Applied::Reloaded { warnings, .. } = &applied {
                for w in warnings {
                    tracing::warn!("reload: {w}");
                }
            }
            Ok(applied)
        }
        Err(e) => {
            tracing::error!("reload refused: {e}; the running configuration stays");
            Err(ReloadError::Apply(e))
        }
    }
}

/// Why a reload did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// Running without a configuration file (the demo).
    #[error("no configuration file to re-read (running the embedded demo)")]
    NoFile,
    /// The file is invalid; the diagnostics, one per line.
    #[error("invalid configuration")]
    Invalid(Vec<String>),
    /// The engine refused the change.
    #[error(transparent)]
    Apply(#[from] ApplyError),
}

fn print_demo_tour(origins: &[(std::net::SocketAddr, &str)]) {
    println!(
        "switchyard: demo origins: {}",
        origins.iter().map(|(a, n)| format!("{n} on {a}")).collect::<Vec<_>>().join(", ")
    );
    println!(
        "Try:\n  curl -i http://127.0.0.1:8080/             # balanced over origin-a and origin-b (see x-origin)\n  \
         curl -i http://127.0.0.1:8080/logo.png     # the .png rule sends it to the images pool\n  \
         curl -i http://127.0.0.1:8080/hello        # answered by a rule, no origin involved\n  \
         curl -i 'http://127.0.0.1:8080/?size=5000&compressible=1'\n  \
         curl -s http://127.0.0.1:9101/__origin/stats\n\
         Dashboard: http://127.0.0.1:9090/   (switchyard ctl stats | drain web origin-a | enable web origin-a)\n\
         Ctrl-C stops."
    );
}

/// How the start-up banner names a listener: a URL for the HTTP modes, the
/// transport and address for the layer-4 ones (`tls-passthrough` relays TLS
/// over TCP).
fn listener_url(mode: switchyard_config::Mode, addr: std::net::SocketAddr) -> String {
    use switchyard_config::Mode;
    match mode {
        Mode::Http => format!("http://{addr}/"),
        Mode::Https => format!("https://{addr}/"),
        Mode::Tcp | Mode::TlsPassthrough => format!("tcp://{addr} ({})", mode.name()),
        Mode::Udp => format!("udp://{addr}"),
    }
}
