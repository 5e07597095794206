//! `switchyard ctl`: the admin API from the command line.
//!
//! Every command is one or two HTTP calls to a running switchyard's admin
//! listener, rendered as aligned text tables (or the raw JSON with `--json`).
//! Exit status: 0 on success, 1 on any failure, including an invalid
//! configuration given to `validate` (its diagnostics go to stderr).

pub mod cache;
mod client;
pub mod table;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde::de::DeserializeOwned;
use ureq::http::Method;

pub use client::CtlError;
use client::{encode_query_value, Client};

use crate::backend::{CertificateView, ClusterView, HealthView, PersistenceView, ReloadView, ServerView, StatsView};

/// `switchyard ctl`: arguments.
#[derive(Debug, Clone, Args)]
pub struct CtlArgs {
    /// Admin API address.
    #[arg(long, env = "SWITCHYARD_ADMIN", default_value = "http://127.0.0.1:9090")]
    pub admin: String,
    /// Bearer token, when the admin API requires one.
    #[arg(long, env = "SWITCHYARD_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Print the API's raw answer (JSON) instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: CtlCommand,
}

/// `switchyard ctl` commands.
#[derive(Debug, Clone, Subcommand)]
pub enum CtlCommand {
    /// Health: version, uptime, workers, configuration generation.
    Status,
    /// Exit 0 when this node may hold the virtual address, 1 when not (stopping,
    /// not yet synced with its cluster peer, or unreachable): keepalived's `track_script`.
    Health,
    /// This node's cluster peers: connections, updates sent/received/dropped, lag.
    Cluster,
    /// Services and every pool's servers, with their counters.
    Stats,
    /// Servers of one pool, or of all pools.
    Servers {
        /// Only this pool.
        pool: Option<String>,
    },
    /// Put a server back into rotation.
    Enable(ServerRef),
    /// Take a server out of rotation (maintenance).
    Disable(ServerRef),
    /// Send a server no new clients; persisted sessions may still reach it.
    Drain(ServerRef),
    /// Set a server's effective weight (0..=1000).
    Weight {
        /// Pool name.
        pool: String,
        /// Server name.
        server: String,
        /// New weight.
        weight: u32,
    },
    /// Show (or flush) a pool's persistence table.
    Persistence {
        /// Pool name.
        pool: String,
        /// Remove every entry instead of listing them.
        #[arg(long)]
        flush: bool,
        /// Entries to list.
        #[arg(long, default_value_t = crate::DEFAULT_PERSISTENCE_LIMIT)]
        limit: usize,
    },
    /// The response caches: counters (no command), keys with their age,
    /// freshness and hits (`list`), one key (`show`), purge (`purge`).
    Cache {
        /// What to show or do; without one, every cache's counters and hit ratio.
        #[command(subcommand)]
        command: Option<cache::CacheCommand>,
    },
    /// Remove a key (or, with --prefix, every key starting with it) from a service's cache.
    Purge {
        /// Service name.
        service: String,
        /// Cache key, e.g. `example.com/path?query` (with the default key parts).
        key: Option<String>,
        /// Remove every key starting with this instead.
        #[arg(long, conflicts_with = "key")]
        prefix: Option<String>,
    },
    /// Certificates from ACME: state, expiry, next attempt, failures.
    Certificates,
    /// Print the running configuration (TOML).
    Config,
    /// Check a configuration file against the running switchyard, without applying it.
    Validate {
        /// Configuration file (TOML).
        file: PathBuf,
    },
    /// Re-read the configuration file and apply the difference.
    Reload,
    /// Print the Prometheus metrics.
    Metrics,
}

/// A server named by its pool.
#[derive(Debug, Clone, Args)]
pub struct ServerRef {
    /// Pool name.
    pub pool: String,
    /// Server name.
    pub server: String,
}

/// Runs `switchyard ctl`, printing to stdout and errors to stderr.
pub fn run(args: &CtlArgs) -> ExitCode {
    let stdout = std::io::stdout();
    match execute(args, &mut stdout.lock()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let CtlError::Refused { diagnostics, .. } = &e {
                for line in diagnostics {
                    eprintln!("{line}");
                }
            }
            eprintln!("switchyard ctl: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs one command, writing its output to `out`.
///
/// # Errors
/// The admin API is unreachable or refused the request, a file cannot be
/// read, or a named pool does not exist.
pub fn execute(args: &CtlArgs, out: &mut dyn Write) -> Result<(), CtlError> {
    let client = Client::new(&args.admin, args.token.clone())?;
    let text = match &args.command {
        CtlCommand::Status => view(&client, args, "/api/v1/health", |h: HealthView| table::render_health(&h))?,
        CtlCommand::Health => health(&client, args)?,
        CtlCommand::Cluster => view(&client, args, "/api/v1/cluster", |c: ClusterView| table::render_cluster(&c))
            .or_else(|e| match e {
                // Not ready is still an answer worth showing.
                CtlError::Refused { status: 503, .. } => cluster_anyway(&client, args),
                other => Err(other),
            })?,
        CtlCommand::Stats => view(&client, args, "/api/v1/stats", |s: StatsView| table::render_stats(&s))?,
        CtlCommand::Servers { pool } => servers(&client, args, pool.as_deref())?,
        CtlCommand::Enable(s) => server_change(&client, args, s, "enable")?,
        CtlCommand::Disable(s) => server_change(&client, args, s, "disable")?,
        CtlCommand::Drain(s) => server_change(&client, args, s, "drain")?,
        CtlCommand::Weight { pool, server, weight } => {
            let path = server_path(pool, server, "weight");
            let body = serde_json::json!({ "weight": weight }).to_string();
            let answer = client.call(Method::PUT, &path, Some(("application/json", body)))?;
            render(args, &path, &answer, |s: ServerView| table::render_server_line(&s))?
        }
        CtlCommand::Persistence { pool, flush, limit } => persistence(&client, args, pool, *flush, *limit)?,
        CtlCommand::Cache { command } => cache::run(&client, args, command.as_ref())?,
        CtlCommand::Purge { service, key, prefix } => purge(&client, args, service, key.as_deref(), prefix.as_deref())?,
        CtlCommand::Certificates => {
            let path = "/api/v1/certificates";
            let answer = client.call(Method::GET, path, None)?;
            render(args, path, &answer, |v: serde_json::Value| {
                let certs: Vec<CertificateView> = serde_json::from_value(v["certificates"].clone()).unwrap_or_default();
                table::render_certificates(&certs, std::time::SystemTime::now())
            })?
        }
        CtlCommand::Config => client.call(Method::GET, "/api/v1/config", None)?,
        CtlCommand::Validate { file } => validate(&client, args, file)?,
        CtlCommand::Reload => {
            let path = "/api/v1/reload";
            let answer = client.call(Method::POST, path, None)?;
            render(args, path, &answer, |r: ReloadView| {
                let mut text = format!("reloaded: generation {}: {}\n", r.generation, r.summary);
                r.warnings.iter().for_each(|w| text.push_str(&format!("{w}\n")));
                text
            })?
        }
        CtlCommand::Metrics => client.call(Method::GET, "/metrics", None)?,
    };
    out.write_all(text.as_bytes()).map_err(|e| CtlError::Usage(format!("cannot write output: {e}")))?;
    if !text.is_empty() && !text.ends_with('\n') {
        let _ = out.write_all(b"\n");
    }
    Ok(())
}

/// `ctl health`: `Ok` (exit 0) only when the node says it is ready.
fn health(client: &Client, args: &CtlArgs) -> Result<String, CtlError> {
    let path = "/api/v1/cluster";
    let (status, answer) = client.call_any(Method::GET, path, None)?;
    let view: ClusterView = match serde_json::from_str(&answer) {
        Ok(v) => v,
        Err(_) => return Err(client_refusal(status, &answer)),
    };
    let text = if args.json { answer.clone() } else { table::render_readiness(&view) };
    if view.ready && status == 200 {
        return Ok(text);
    }
    let reason = if view.stopping {
        "switchyard is stopping".to_string()
    } else {
        "no full copy from a cluster peer yet (waiting up to sync_timeout)".to_string()
    };
    Err(CtlError::NotReady(reason))
}

fn client_refusal(status: u16, body: &str) -> CtlError {
    CtlError::Refused { status, message: body.trim().to_owned(), diagnostics: Vec::new() }
}

fn cluster_anyway(client: &Client, args: &CtlArgs) -> Result<String, CtlError> {
    let path = "/api/v1/cluster";
    let (status, answer) = client.call_any(Method::GET, path, None)?;
    if status != 503 {
        return Err(client_refusal(status, &answer));
    }
    render(args, path, &answer, |c: ClusterView| table::render_cluster(&c))
}

/// GETs `path` and renders it (or returns it raw with `--json`).
fn view<T: DeserializeOwned>(
    client: &Client,
    args: &CtlArgs,
    path: &str,
    f: impl FnOnce(T) -> String,
) -> Result<String, CtlError> {
    let answer = client.call(Method::GET, path, None)?;
    render(args, path, &answer, f)
}

/// Decodes an answer and renders it; `--json` pretty-prints it instead.
pub(crate) fn render<T: DeserializeOwned>(
    args: &CtlArgs,
    path: &str,
    answer: &str,
    f: impl FnOnce(T) -> String,
) -> Result<String, CtlError> {
    let protocol =
        |e: serde_json::Error| CtlError::Protocol { url: path.to_owned(), reason: format!("invalid JSON: {e}") };
    if args.json {
        let value: serde_json::Value = serde_json::from_str(answer).map_err(protocol)?;
        return serde_json::to_string_pretty(&value).map_err(protocol);
    }
    serde_json::from_str(answer).map(f).map_err(protocol)
}

fn server_path(pool: &str, server: &str, action: &str) -> String {
    format!("/api/v1/pools/{}/servers/{}/{action}", encode_path_segment(pool), encode_path_segment(server))
}

/// Percent-encodes a path segment (a `/` inside a name must not split it).
pub(crate) fn encode_path_segment(segment: &str) -> String {
    encode_query_value(segment).replace('/', "%2F")
}

fn server_change(client: &Client, args: &CtlArgs, s: &ServerRef, action: &str) -> Result<String, CtlError> {
    let path = server_path(&s.pool, &s.server, action);
    let answer = client.call(Method::POST, &path, None)?;
    render(args, &path, &answer, |v: ServerView| table::render_server_line(&v))
}

fn servers(client: &Client, args: &CtlArgs, pool: Option<&str>) -> Result<String, CtlError> {
    let path = "/api/v1/stats";
    let answer = client.call(Method::GET, path, None)?;
    let stats: StatsView = serde_json::from_str(&answer)
        .map_err(|e| CtlError::Protocol { url: path.to_owned(), reason: format!("invalid JSON: {e}") })?;
    let pools: Vec<_> = stats.pools.iter().filter(|p| pool.is_none_or(|name| p.name == name)).collect();
    if let (Some(name), true) = (pool, pools.is_empty()) {
        let known: Vec<&str> = stats.pools.iter().map(|p| p.name.as_str()).collect();
        return Err(CtlError::Usage(format!("no pool `{name}` (pools: {})", known.join(", "))));
    }
    if args.json {
        return serde_json::to_string_pretty(&pools).map_err(|e| CtlError::Usage(e.to_string()));
    }
    Ok(pools.iter().map(|p| table::render_pool(p)).collect::<Vec<_>>().join("\n"))
}

fn persistence(client: &Client, args: &CtlArgs, pool: &str, flush: bool, limit: usize) -> Result<String, CtlError> {
    let path = format!("/api/v1/pools/{}/persistence", encode_path_segment(pool));
    if flush {
        let answer = client.call(Method::DELETE, &path, None)?;
        return render(args, &path, &answer, |v: serde_json::Value| {
            format!("pool {pool}: removed {} persistence entries\n", v["removed"])
        });
    }
    let path = format!("{path}?limit={limit}");
    let answer = client.call(Method::GET, &path, None)?;
    render(args, &path, &answer, |p: PersistenceView| table::render_persistence(&p))
}

pub(crate) fn purge(
    client: &Client,
    args: &CtlArgs,
    service: &str,
    key: Option<&str>,
    prefix: Option<&str>,
) -> Result<String, CtlError> {
    let body = match (key, prefix) {
        (Some(key), None) => serde_json::json!({ "service": service, "key": key }),
        (None, Some(prefix)) => serde_json::json!({ "service": service, "prefix": prefix }),
        _ => return Err(CtlError::Usage("give a KEY or --prefix PREFIX".to_owned())),
    };
    let path = "/api/v1/cache/purge";
    let answer = client.call(Method::POST, path, Some(("application/json", body.to_string())))?;
    render(args, path, &answer, |v: serde_json::Value| format!("service {service}: purged {} keys\n", v["purged"]))
}

fn validate(client: &Client, args: &CtlArgs, file: &std::path::Path) -> Result<String, CtlError> {
    let source =
        std::fs::read_to_string(file).map_err(|e| CtlError::Usage(format!("cannot read {}: {e}", file.display())))?;
    let name = file.display().to_string();
    let path = format!("/api/v1/config/validate?name={}", encode_query_value(&name));
    let answer = client.call(Method::POST, &path, Some(("application/toml", source)))?;
    render(args, &path, &answer, |v: serde_json::Value| {
        let mut text = format!("{name}: valid\n");
        for w in v["warnings"].as_array().into_iter().flatten() {
            text.push_str(w.as_str().unwrap_or_default());
            text.push('\n');
        }
        text
    })
}
