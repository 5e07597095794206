//! The failover test: steady keep-alive load through a target to two servers, one of
//! them killed part-way through.
//!
//! Each target gets two origins of its own (`fo-a`, `fo-b`, started here on the load
//! core: one is killed, so they cannot be shared). Once requests through the target reach
//! both, [`CLIENTS`] blocking keep-alive clients send requests for [`BEFORE`]; then
//! `fo-a` gets SIGKILL, which closes its listening socket and its connections as a crash
//! would, and the load goes on for [`AFTER`].
//!
//! A dead server receives nothing, so what the target still sends it can only be read
//! from the target's own account, polled every [`POLL`] from the kill on:
//!
//! - switchyard: its admin metrics, `switchyard_server_state` (down) and
//!   `switchyard_server_failures_total` of server `a` (requests that failed on it,
//!   retried ones included);
//! - HAProxy: `show stat` on its stats socket, the `status` of server `a` and its
//!   `econ + wretr + wredis` (connection errors, retries and redispatches);
//! - NGINX (no active check in the open-source version; passive `max_fails=1`): its error
//!   log, each line naming `fo-a`'s address (a failed connect or read), and the
//!   `upstream server temporarily disabled` line.
//!
//! The figures: when the target first reported the server unavailable (the failover
//! time: from then on it sends no new request there), when its count of requests that
//! failed there last rose, and what the clients saw after the kill: failed requests,
//! when the last one ended, and the slowest request (a delayed retry shows there).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::plan::TargetKind;
use super::procs::Proc;
use super::runner::{Ctx, Live};
use super::targets;
use crate::load::Latency;
use crate::results::{Failover, RunFigures};

/// Blocking keep-alive clients of the load.
pub const CLIENTS: usize = 8;
/// Load before the kill.
pub const BEFORE: Duration = Duration::from_secs(3);
/// Load after the kill.
pub const AFTER: Duration = Duration::from_secs(6);
/// Interval of the polls of the target's account.
pub const POLL: Duration = Duration::from_millis(10);
/// Longest wait for the target to reach both fresh origins.
const READY: Duration = Duration::from_secs(10);
/// Wall time of one failover cell, start-up included (for the plan's estimate).
pub const BUDGET: Duration = Duration::from_secs(14);
/// The request of the load.
const REQUEST: &[u8] = b"GET /index.html?size=128 HTTP/1.1\r\nhost: bench\r\n\r\n";
/// How long a client waits for a response before counting it failed.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// What a target said about the killed server at one poll.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Look {
    /// The target takes it for unavailable.
    down: bool,
    /// Requests it tried there, by its own count so far.
    attempts: u64,
}

/// Where a target's account of its servers is read.
enum Observer {
    /// switchyard's admin listener.
    Metrics(SocketAddr),
    /// HAProxy's stats socket.
    Stats(PathBuf),
    /// NGINX's error log, from an offset, and the killed server's address as it appears there.
    ErrorLog { path: PathBuf, from: u64, needle: String },
}

impl Observer {
    fn of(target: TargetKind, env: &targets::Env, killed: u16) -> anyhow::Result<Observer> {
        Ok(match target {
            TargetKind::Switchyard => Observer::Metrics(SocketAddr::from(([127, 0, 0, 1], env.ports.admin))),
            TargetKind::Haproxy => Observer::Stats(targets::haproxy_stats_socket(env.run_dir)),
            TargetKind::Nginx => Observer::ErrorLog {
                path: targets::nginx_error_log(env.run_dir),
                from: 0,
                needle: format!("127.0.0.1:{killed}"),
            },
            TargetKind::Direct | TargetKind::Floor | TargetKind::FloorUring => {
                bail!("the baseline and the floor have no servers to fail over")
            }
            TargetKind::SwitchyardB => bail!("the second switchyard build has no failover setup"),
        })
    }

    /// What the figures' `source` says.
    fn source(&self) -> &'static str {
        match self {
            Observer::Metrics(_) => {
                "switchyard admin metrics: server_state down; server_failures_total (active TCP check, \
                 interval 250ms, fall 2, rise 2; retries = 1)"
            }
            Observer::Stats(_) => {
                "HAProxy stats socket: status DOWN; econ + wretr + wredis (check inter 250 fall 2 rise 2; \
                 retries 1, option redispatch 1)"
            }
            Observer::ErrorLog { .. } => {
                "NGINX error log: `upstream server temporarily disabled`; lines naming the server (no active \
                 check in NGINX open source: passive max_fails=1 fail_timeout=10s, so NGINX sends it a live \
                 request again every 10 s, after this run)"
            }
        }
    }

    /// Starts counting from now (the error log: only lines written from now on).
    fn mark(&mut self) {
        if let Observer::ErrorLog { path, from, .. } = self {
            *from = std::fs::metadata(&*path).map_or(0, |m| m.len());
        }
    }

    fn look(&self) -> anyhow::Result<Look> {
        match self {
            Observer::Metrics(admin) => {
                // The admin API answers only loopback names without tokens: the host is the address.
                let mut s = TcpStream::connect_timeout(admin, Duration::from_secs(1)).context("admin listener")?;
                s.set_read_timeout(Some(Duration::from_secs(1)))?;
                s.write_all(format!("GET /metrics HTTP/1.1\r\nhost: {admin}\r\nconnection: close\r\n\r\n").as_bytes())?;
                let mut buf = Vec::new();
                s.read_to_end(&mut buf)?;
                let r = super::checks::parse_response(&buf)?;
                anyhow::ensure!(r.status == 200, "admin metrics answered {}", r.status);
                Ok(parse_metrics(&String::from_utf8_lossy(&r.body)))
            }
            Observer::Stats(socket) => {
                let mut s = std::os::unix::net::UnixStream::connect(socket)
                    .with_context(|| format!("stats socket {}", socket.display()))?;
                s.set_read_timeout(Some(Duration::from_secs(1)))?;
                s.write_all(b"show stat\n")?;
                let mut text = String::new();
                s.read_to_string(&mut text)?;
                parse_stat(&text).context("no server `a` of backend `main` in `show stat`")
            }
            Observer::ErrorLog { path, from, needle } => {
                let mut f = std::fs::File::open(path).with_context(|| format!("{}", path.display()))?;
                let mut bytes = Vec::new();
                std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(*from))?;
                f.read_to_end(&mut bytes)?;
                Ok(parse_error_log(&String::from_utf8_lossy(&bytes), needle))
            }
        }
    }
}

/// switchyard's metrics: server `a` of pool `main`.
fn parse_metrics(text: &str) -> Look {
    let mut look = Look::default();
    for line in text.lines().filter(|l| l.contains("pool=\"main\"") && l.contains("server=\"a\"")) {
        let value = line.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()).unwrap_or(0.0);
        if line.starts_with("switchyard_server_state{") && line.contains("state=\"down\"") {
            look.down = value > 0.0;
        } else if line.starts_with("switchyard_server_failures_total{") {
            look.attempts += value as u64;
        }
    }
    look
}

/// HAProxy's `show stat` CSV: server `a` of backend `main`.
fn parse_stat(text: &str) -> Option<Look> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next()?.trim_start_matches("# ").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name);
    let (px, sv, status) = (col("pxname")?, col("svname")?, col("status")?);
    let counters: Vec<usize> = ["econ", "wretr", "wredis"].iter().filter_map(|n| col(n)).collect();
    lines
        .map(|l| l.split(',').collect::<Vec<&str>>())
        .find(|f| f.get(px) == Some(&"main") && f.get(sv) == Some(&"a"))
        .map(|f| Look {
            down: f.get(status).is_some_and(|s| s.starts_with("DOWN") || s.starts_with("MAINT")),
            attempts: counters.iter().filter_map(|&i| f.get(i)?.parse::<u64>().ok()).sum(),
        })
}

/// NGINX's error log lines written since the kill that name the killed server.
fn parse_error_log(text: &str, needle: &str) -> Look {
    let mut look = Look::default();
    for line in text.lines().filter(|l| l.contains(needle)) {
        if line.contains("temporarily disabled") {
            look.down = true;
        } else {
            look.attempts += 1;
        }
    }
    look
}

/// One client request's outcome.
struct Sample {
    /// When it ended, from the start of the load.
    end: Duration,
    latency_us: u64,
    ok: bool,
}

/// One blocking keep-alive client until `stop`: a request at a time, a new connection
/// after any failure.
fn client(addr: SocketAddr, t0: Instant, stop: &AtomicBool) -> Vec<Sample> {
    let mut out = Vec::with_capacity(64 * 1024);
    let mut conn: Option<TcpStream> = None;
    let mut buf = Vec::with_capacity(4096);
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let stream = match conn.take() {
            Some(s) => Ok(s),
            None => TcpStream::connect_timeout(&addr, RESPONSE_TIMEOUT).and_then(|s| {
                s.set_read_timeout(Some(RESPONSE_TIMEOUT))?;
                s.set_nodelay(true)?;
                Ok(s)
            }),
        };
        let result = stream.and_then(|mut s| {
            s.write_all(REQUEST)?;
            let (status, keep) = read_response(&mut s, &mut buf)?;
            Ok((status, keep.then_some(s)))
        });
        let ok = match result {
            Ok((status, kept)) => {
                conn = kept;
                status == 200
            }
            Err(_) => false,
        };
        if !ok {
            conn = None;
        }
        let end = t0.elapsed();
        out.push(Sample { end, latency_us: started.elapsed().as_micros() as u64, ok });
    }
    out
}

/// Reads one `content-length` response from a keep-alive connection: its status and
/// whether the connection stays open.
pub(super) fn read_response(s: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<(u16, bool)> {
    let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_string());
    buf.clear();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut hs = [httparse::EMPTY_HEADER; 32];
        let mut r = httparse::Response::new(&mut hs);
        let head = match r.parse(buf).map_err(|e| bad(&e.to_string()))? {
            httparse::Status::Complete(n) => n,
            httparse::Status::Partial => continue,
        };
        let value = |name: &str| r.headers.iter().find(|h| h.name.eq_ignore_ascii_case(name)).map(|h| h.value);
        let len: usize = value("content-length")
            .and_then(|v| std::str::from_utf8(v).ok()?.trim().parse().ok())
            .ok_or_else(|| bad("no content-length"))?;
        let close = value("connection").is_some_and(|v| v.eq_ignore_ascii_case(b"close"));
        let status = r.code.unwrap_or(0);
        while buf.len() < head + len {
            let n = s.read(&mut chunk)?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        return Ok((status, !close));
    }
}

/// Starts origin `name` on `port` (load core) and waits until it listens.
fn origin(ctx: &Ctx, name: &str, port: u16) -> anyhow::Result<Proc> {
    let addr = format!("127.0.0.1:{port}");
    let args = ["origin", "--listen", &addr, "--name", name, "--threads", "1"].map(String::from);
    let log = ctx.logs.join(format!("origin-{name}.log"));
    let mut p = Proc::spawn(&format!("origin {name}"), ctx.load_cpu, ctx.bin, &args, &log)?;
    p.wait_ready(SocketAddr::from(([127, 0, 0, 1], port)), false, &log)?;
    Ok(p)
}

/// Waits until requests through the target have reached both origins (the target's
/// checks have found them up).
fn both_reached(addr: SocketAddr) -> anyhow::Result<()> {
    let deadline = Instant::now() + READY;
    let (mut a, mut b) = (false, false);
    while !(a && b) {
        if Instant::now() > deadline {
            bail!("requests through the target did not reach both fresh origins within {} s", READY.as_secs());
        }
        match super::checks::get(addr, "/index.html?size=128", &[]) {
            Ok(r) if r.status == 200 => match r.header("x-origin") {
                Some("fo-a") => a = true,
                Some("fo-b") => b = true,
                _ => {}
            },
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    Ok(())
}

/// One failover run against `l`.
pub fn run(ctx: &Ctx, l: &Live) -> anyhow::Result<RunFigures> {
    let [pa, pb] = *ctx.env.ports.failover.get(&l.target).context("no failover ports for this target")?;
    let mut observer = Observer::of(l.target, ctx.env, pa)?;
    let mut killed = origin(ctx, "fo-a", pa)?;
    let mut survivor = origin(ctx, "fo-b", pb)?;
    both_reached(l.addr)?;
    observer.look().context("cannot read the target's view of its servers")?;

    let stop = AtomicBool::new(false);
    let t0 = Instant::now();
    let cpu0 = l.proc.map(Proc::cpu_s);
    let (samples, polls, kill_at) = std::thread::scope(|s| {
        let clients: Vec<_> = (0..CLIENTS).map(|_| s.spawn(|| client(l.addr, t0, &stop))).collect();
        std::thread::sleep(BEFORE);
        observer.mark();
        let before = observer.look().ok();
        let kill_at = t0.elapsed();
        killed.kill();
        let mut polls: Vec<(Duration, Look)> = before.map(|b| (kill_at, b)).into_iter().collect();
        while t0.elapsed() < kill_at + AFTER {
            std::thread::sleep(POLL);
            if let Ok(look) = observer.look() {
                polls.push((t0.elapsed(), look));
            }
        }
        stop.store(true, Ordering::Relaxed);
        let samples: Vec<Sample> = clients.into_iter().flat_map(|c| c.join().unwrap_or_default()).collect();
        (samples, polls, kill_at)
    });
    let elapsed = t0.elapsed();
    let cpu = match (l.proc, cpu0) {
        (Some(p), Some(c0)) => (p.cpu_s() - c0).max(0.0),
        _ => 0.0,
    };
    survivor.stop();

    let since = |t: Duration| t.saturating_sub(kill_at).as_secs_f64() * 1000.0;
    let after: Vec<&Sample> = samples.iter().filter(|x| x.end >= kill_at).collect();
    let base = polls.first().map_or(0, |(_, look)| look.attempts);
    let mut last_attempt = None;
    let mut seen = base;
    for (t, look) in &polls {
        if look.attempts > seen {
            seen = look.attempts;
            last_attempt = Some(since(*t));
        }
    }
    let failover = Failover {
        kill_after_s: kill_at.as_secs_f64(),
        observed_s: elapsed.saturating_sub(kill_at).as_secs_f64(),
        poll_ms: POLL.as_secs_f64() * 1000.0,
        down_ms: polls.iter().find(|(_, look)| look.down).map(|(t, _)| since(*t)),
        last_attempt_ms: last_attempt,
        attempts: seen - base,
        source: observer.source().to_string(),
        failed: after.iter().filter(|x| !x.ok).count() as u64,
        last_failure_ms: after.iter().filter(|x| !x.ok).map(|x| since(x.end)).reduce(f64::max),
        slowest_ms: after.iter().map(|x| x.latency_us as f64 / 1000.0).reduce(f64::max),
        succeeded: after.iter().filter(|x| x.ok).count() as u64,
    };
    let mut latency = Latency::new();
    for x in samples.iter().filter(|x| x.ok) {
        latency.record(x.latency_us);
    }
    let ok = samples.iter().filter(|x| x.ok).count() as u64;
    let secs = elapsed.as_secs_f64().max(1e-9);
    if polls.len() < 2 {
        bail!("the target's view of its servers could not be read during the run ({})", observer.source());
    }
    Ok(RunFigures {
        requests: ok,
        connections: CLIENTS as u64,
        errors: samples.len() as u64 - ok,
        duration_s: secs,
        rps: ok as f64 / secs,
        proxy_cpu_s: cpu,
        proxy_cpu_us_per_request: if ok > 0 { cpu * 1e6 / ok as f64 } else { 0.0 },
        requests_per_cpu_s: if cpu > 0.0 { ok as f64 / cpu } else { 0.0 },
        latency: latency.percentiles(),
        failover: Some(failover),
        ..RunFigures::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switchyard_metrics_give_the_state_and_the_failures_of_server_a() {
        let text = "switchyard_server_state{pool=\"main\",server=\"a\",state=\"up\"} 0\n\
                    switchyard_server_state{pool=\"main\",server=\"a\",state=\"down\"} 1\n\
                    switchyard_server_state{pool=\"main\",server=\"b\",state=\"down\"} 0\n\
                    switchyard_server_failures_total{pool=\"main\",server=\"a\",reason=\"connect-failed\"} 7\n\
                    switchyard_server_failures_total{pool=\"main\",server=\"a\",reason=\"server-closed\"} 3\n\
                    switchyard_server_failures_total{pool=\"main\",server=\"b\",reason=\"connect-failed\"} 100\n";
        assert_eq!(parse_metrics(text), Look { down: true, attempts: 10 });
    }

    #[test]
    fn haproxy_show_stat_gives_status_and_error_counters() {
        let text = "# pxname,svname,qcur,econ,wretr,wredis,status,\n\
                    bench,FRONTEND,0,,,,OPEN,\n\
                    main,a,0,5,2,3,DOWN,\n\
                    main,b,0,0,0,0,UP,\n";
        assert_eq!(parse_stat(text), Some(Look { down: true, attempts: 10 }));
        let going = text.replace("DOWN", "UP 1/2");
        assert_eq!(parse_stat(&going).map(|l| l.down), Some(false));
        assert_eq!(parse_stat("# pxname,svname,status\nmain,b,UP\n"), None);
    }

    #[test]
    fn nginx_error_lines_naming_the_server_count() {
        let text = "2026/01/01 [error] 1#1: *3 connect() failed (111: Connection refused) while connecting to \
                    upstream, upstream: \"http://127.0.0.1:31021/index.html\"\n\
                    2026/01/01 [warn] 1#1: *3 upstream server temporarily disabled while connecting to upstream, \
                    upstream: \"http://127.0.0.1:31021/index.html\"\n\
                    2026/01/01 [error] 1#1: *9 connect() failed (111: Connection refused) while connecting to \
                    upstream, upstream: \"http://127.0.0.1:31022/index.html\"\n";
        assert_eq!(parse_error_log(text, "127.0.0.1:31021"), Look { down: true, attempts: 1 });
    }
}
