//! The end-to-end harness: the real `switchyard` binary as a child process, origin
//! simulators in-process (on a shared tokio runtime) or as children, generated configs in a
//! temporary directory, and a tiny raw HTTP/1.1 client over `std::net::TcpStream`.
//!
//! Everything here is built for a loaded two-core machine: waits are bounded polls with
//! generous limits, nothing asserts on timings, and every port is picked fresh (below the kernel's
//! ephemeral range, see [`free_port_on`]) so tests run in parallel safely.

pub mod grpc;
pub mod l4;
pub mod netns;
pub mod pki;
pub mod prometheus;

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use switchyard_bench::origin::OriginStats;

/// How long any single wait in a test may last before it is a failure.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// The `switchyard` binary under test.
pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_switchyard")
}

/// The workspace root (where `examples/` lives).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A free TCP port on 127.0.0.1 (bound, read, released).
pub fn free_port() -> u16 {
    free_port_on("127.0.0.1:0".parse().expect("address"))
}

/// A free TCP port on the given address's IP, below the kernel's ephemeral range and
/// never one this test process was handed before.
///
/// A port handed out here is released before the process under test binds it. A port
/// from the ephemeral range could meanwhile be given to anything that binds port 0 or
/// connects (another test's origin, a client's source port), and the process under test
/// would then fail to bind while its readiness check found the other listener. Below the
/// ephemeral range only explicit binds take ports, and every explicit bind in the tests
/// takes its port from here; the bench suite's blocks start at 31000, above this range.
pub fn free_port_on(addr: SocketAddr) -> u16 {
    pick_port(addr, |a| TcpListener::bind(a).is_ok())
}

/// Held by a test while it runs `switchyard bench`: a bench takes the first free block of
/// loopback ports when it starts, so two started at once could both take the same block.
pub fn one_bench_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static BENCH: Mutex<()> = Mutex::new(());
    BENCH.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// An address on 127.0.0.1 whose port is free for TCP and for UDP alike (an HTTP/3
/// service listens on both), from the same range as [`free_port_on`].
pub fn proxy_addr_tcp_udp() -> SocketAddr {
    let ip: SocketAddr = "127.0.0.1:0".parse().expect("address");
    let port = pick_port(ip, |a| TcpListener::bind(a).is_ok() && std::net::UdpSocket::bind(a).is_ok());
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A free UDP port on the given address's IP, from the same range as [`free_port_on`].
pub fn free_udp_port_on(addr: SocketAddr) -> u16 {
    pick_port(addr, |a| std::net::UdpSocket::bind(a).is_ok())
}

fn pick_port(addr: SocketAddr, free: impl Fn(SocketAddr) -> bool) -> u16 {
    static NEXT: Mutex<Option<u16>> = Mutex::new(None);
    const LOW: u16 = 10_000;
    let high = ephemeral_low().clamp(LOW + 1_000, 31_000);
    let span = high - LOW;
    let mut next = NEXT.lock().unwrap_or_else(|e| e.into_inner());
    // Each test binary starts at its own offset so binaries run side by side rarely meet.
    let mut offset = *next.get_or_insert((std::process::id() % u32::from(span)) as u16);
    for _ in 0..span {
        let port = LOW + offset;
        offset = (offset + 1) % span;
        let mut candidate = addr;
        candidate.set_port(port);
        if free(candidate) {
            *next = Some(offset);
            return port;
        }
    }
    panic!("no free port between {LOW} and {high} on {}", addr.ip());
}

/// The first port of the kernel's ephemeral range (32768 where it cannot be read).
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// An address on 127.0.0.1 where nothing listens (a port just released).
pub fn dead_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

/// A fresh directory, unique to this call, inside this test process's own directory under
/// the system temp dir (`switchyard-e2e-<pid>`). Tests cannot clean up after themselves when
/// they fail, so the first call removes what earlier runs left: the directories of test
/// processes that no longer exist.
pub fn temp_dir(tag: &str) -> PathBuf {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let root = ROOT.get_or_init(|| {
        remove_dead_runs();
        std::env::temp_dir().join(format!("switchyard-e2e-{}", std::process::id()))
    });
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = root.join(format!("{tag}-{n}"));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// Removes `switchyard-e2e-<pid>…` entries of the temp dir whose process is gone.
fn remove_dead_runs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("switchyard-e2e-")) else { continue };
        let pid = rest.split('-').next().unwrap_or("");
        if !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()) && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Writes `contents` to `name` in a fresh temp dir and returns the path.
pub fn write_temp(tag: &str, name: &str, contents: &str) -> PathBuf {
    let path = temp_dir(tag).join(name);
    std::fs::write(&path, contents).expect("write temp file");
    path
}

/// Polls `f` every 20 ms until it returns `Some`, or panics with `what` after [`PATIENCE`].
pub fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends SIGTERM to a process by id (through `kill(1)`: the workspace forbids `unsafe`).
pub fn sigterm(pid: u32) {
    let _ = Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
}

/// Sends SIGHUP (reload) to a process by id.
pub fn sighup(pid: u32) {
    let _ = Command::new("kill").arg("-HUP").arg(pid.to_string()).status();
}

/// Waits for `child` to exit within `limit`; `None` if it is still running.
pub fn wait_exit(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGTERM, then SIGKILL if the child has not exited after `grace`.
fn terminate(child: &mut Child, grace: Duration) {
    if matches!(child.try_wait(), Ok(Some(_))) {
        return;
    }
    sigterm(child.id());
    if wait_exit(child, grace).is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

// ---------------------------------------------------------------------------------------
// The proxy
// ---------------------------------------------------------------------------------------

/// A running `switchyard run -c FILE`, terminated (SIGTERM, then SIGKILL) on drop.
pub struct Proxy {
    child: Child,
    /// The address the test waits on and talks to.
    pub addr: SocketAddr,
    /// The configuration file it runs.
    pub config: PathBuf,
    log: PathBuf,
}

impl Proxy {
    /// Writes `toml` to a temp file and runs it with one worker; returns once `addr` accepts
    /// connections.
    pub fn start(toml: &str, addr: SocketAddr) -> Proxy {
        let config = write_temp("proxy", "switchyard.toml", toml);
        Proxy::run_file(&config, addr)
    }

    /// Runs an existing configuration file; returns once `addr` accepts connections.
    pub fn run_file(config: &Path, addr: SocketAddr) -> Proxy {
        Proxy::run_file_with(config, addr, 1)
    }

    /// Runs an existing configuration file with `workers` workers.
    pub fn run_file_with(config: &Path, addr: SocketAddr, workers: usize) -> Proxy {
        Proxy::run_file_logging(config, addr, workers, "info")
    }

    /// [`Proxy::run_file_with`], logging as the `SWITCHYARD_LOG` filter `log` says.
    pub fn run_file_logging(config: &Path, addr: SocketAddr, workers: usize, log_filter: &str) -> Proxy {
        Proxy::spawn(config, addr, workers, log_filter, &[])
    }

    /// Writes `toml` to a temp file and runs it with one worker and the
    /// environment variables `env` set.
    pub fn start_with_env(toml: &str, addr: SocketAddr, env: &[(&str, &str)]) -> Proxy {
        let config = write_temp("proxy", "switchyard.toml", toml);
        Proxy::spawn(&config, addr, 1, "info", env)
    }

    fn spawn(config: &Path, addr: SocketAddr, workers: usize, log_filter: &str, env: &[(&str, &str)]) -> Proxy {
        let log = temp_dir("proxy-log").join("stderr.log");
        let stderr = std::fs::File::create(&log).expect("create log file");
        let child = Command::new(binary())
            .args(["run", "--workers", &workers.to_string(), "-c"])
            .arg(config)
            .env("SWITCHYARD_LOG", log_filter)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn switchyard");
        let mut proxy = Proxy { child, addr, config: config.to_path_buf(), log };
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Ok(Some(status)) = proxy.child.try_wait() {
                panic!("switchyard exited early ({status}):\n{}", proxy.log());
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok() {
                return proxy;
            }
            assert!(Instant::now() < deadline, "switchyard never listened on {addr}:\n{}", proxy.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The process id (for signals and `/proc`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the proxy wrote to stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A new client connection to the proxy.
    pub fn connect(&self) -> Client {
        Client::connect(self.addr)
    }

    /// One request on a fresh connection.
    pub fn get(&self, path: &str) -> Response {
        self.connect().get(path)
    }

    /// Sends SIGHUP (reload the configuration file) without waiting.
    pub fn sighup(&self) {
        sighup(self.child.id());
    }

    /// Sends SIGHUP and waits until the log shows `count` reloads in total
    /// (applied or refused).
    pub fn reload(&self, count: usize) {
        self.sighup();
        wait_for("the reload to be applied or refused", || {
            let log = self.log();
            let done = log.matches("configuration reloaded").count() + log.matches("reload refused").count();
            (done >= count).then_some(())
        });
    }

    /// Sends SIGTERM without waiting.
    pub fn sigterm(&self) {
        sigterm(self.child.id());
    }

    /// Waits for the process to exit within `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        wait_exit(&mut self.child, limit)
    }

    /// Resident set size in KiB, from `/proc/PID/status` (Linux only).
    pub fn rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        line.split_whitespace().nth(1)?.parse().ok()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        terminate(&mut self.child, Duration::from_secs(5));
    }
}

/// Runs `switchyard check -c FILE`: (exit code, stdout, stderr).
pub fn check(path: &Path) -> (i32, String, String) {
    let out = Command::new(binary()).args(["check", "-c"]).arg(path).output().expect("run switchyard check");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

// ---------------------------------------------------------------------------------------
// Origins
// ---------------------------------------------------------------------------------------

/// The runtime every in-process origin of this test binary runs on.
fn origin_runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("e2e-origin")
            .enable_all()
            .build()
            .expect("origin runtime")
    })
}

/// An in-process origin simulator; stops (and releases its port) on drop.
pub struct Origin {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its name, sent as `x-origin`.
    pub name: String,
    stats: Arc<OriginStats>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

/// 127.0.0.1 on a port from [`free_port`], so that an origin never takes a port
/// handed to a proxy that has not bound it yet.
fn fresh_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

impl Origin {
    /// An origin on a fresh port of 127.0.0.1.
    pub fn start(name: &str) -> Origin {
        Origin::start_fresh(name, None)
    }

    /// An origin on a given address.
    pub fn start_at(addr: SocketAddr, name: &str) -> io::Result<Origin> {
        Origin::start_with(addr, name, None)
    }

    /// An HTTPS origin on a fresh port of 127.0.0.1, with a server configuration from
    /// `switchyard_bench::origin::tls_config`.
    pub fn start_tls(name: &str, tls: Arc<rustls::ServerConfig>) -> Origin {
        Origin::start_fresh(name, Some(tls))
    }

    /// On a port from [`free_port`]; another port if something else took that one meanwhile.
    fn start_fresh(name: &str, tls: Option<Arc<rustls::ServerConfig>>) -> Origin {
        let mut tries = 0;
        loop {
            match Origin::start_with(fresh_addr(), name, tls.clone()) {
                Err(e) if e.kind() == io::ErrorKind::AddrInUse && tries < 5 => tries += 1,
                started => return started.expect("start origin"),
            }
        }
    }

    fn start_with(addr: SocketAddr, name: &str, tls: Option<Arc<rustls::ServerConfig>>) -> io::Result<Origin> {
        let rt = origin_runtime();
        let mut origin = rt.block_on(switchyard_bench::origin::Origin::bind(addr, name))?;
        if let Some(tls) = tls {
            origin = origin.with_tls(tls);
        }
        let addr = origin.local_addr();
        let stats = origin.stats();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        rt.spawn(origin.serve(async move {
            let _ = stopped.await;
        }));
        Ok(Origin { addr, name: name.to_string(), stats, stop: Some(stop) })
    }

    /// Requests served (not counting `/__origin/stats`).
    pub fn requests(&self) -> u64 {
        self.stats.requests()
    }

    /// Connections accepted.
    pub fn connections(&self) -> u64 {
        self.stats.connections()
    }

    /// Request body bytes received.
    pub fn bytes_received(&self) -> u64 {
        self.stats.bytes_received()
    }

    /// TLS handshakes completed, and how many of them resumed a session.
    pub fn tls_handshakes(&self) -> (u64, u64) {
        (self.stats.tls_handshakes(), self.stats.tls_resumed())
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// An origin simulator as a child process (`switchyard origin`), killed on drop.
pub struct OriginProcess {
    child: Child,
}

impl OriginProcess {
    /// Spawns `switchyard origin --listen ADDR --name NAME` and waits until it accepts.
    pub fn start(addr: SocketAddr, name: &str) -> OriginProcess {
        OriginProcess::start_with(addr, name, &[])
    }

    /// Like [`OriginProcess::start`], with extra arguments (`--tls-cert FILE`...).
    pub fn start_with(addr: SocketAddr, name: &str, extra: &[&std::ffi::OsStr]) -> OriginProcess {
        let child = Command::new(binary())
            .args(["origin", "--listen", &addr.to_string(), "--name", name])
            .args(extra)
            .env("SWITCHYARD_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn switchyard origin");
        let mut origin = OriginProcess { child };
        wait_for(&format!("origin {name} on {addr}"), || {
            if let Ok(Some(status)) = origin.child.try_wait() {
                panic!("origin {name} on {addr} exited early ({status}); is the port in use?");
            }
            TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()
        });
        origin
    }

    /// The process id (to kill it abruptly with `kill -KILL`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for OriginProcess {
    fn drop(&mut self) {
        terminate(&mut self.child, Duration::from_secs(5));
    }
}

// ---------------------------------------------------------------------------------------
// A raw HTTP/1.1 client
// ---------------------------------------------------------------------------------------

/// One response as read by [`Client`].
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Header fields in order, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body (empty when streamed into a sink).
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }

    /// Every value of header `name`.
    pub fn headers_named(&self, name: &str) -> Vec<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().filter(|(n, _)| *n == name).map(|(_, v)| v.as_str()).collect()
    }

    /// The `x-origin` header, or "" when absent.
    pub fn origin(&self) -> &str {
        self.header("x-origin").unwrap_or("")
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.text()))
    }

    /// Whether the response says the connection closes after it.
    pub fn closes(&self) -> bool {
        self.header("connection").is_some_and(|v| v.to_ascii_lowercase().contains("close"))
    }
}

/// A request header pair for [`Client::request`].
pub type Header<'a> = (&'a str, &'a str);

/// A raw HTTP/1.1 client connection. Writes bytes as given; reads one response at a time,
/// honouring `content-length`, `chunked` and close-delimited bodies.
pub struct Client {
    reader: BufReader<TcpStream>,
    /// The underlying stream (for raw writes and shutdown).
    pub stream: TcpStream,
}

impl Client {
    /// Connects (with bounded retries) and sets generous read/write timeouts.
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = wait_for(&format!("connect to {addr}"), || TcpStream::connect(addr).ok());
        Client::from_stream(stream)
    }

    /// Wraps a connected stream.
    pub fn from_stream(stream: TcpStream) -> Client {
        stream.set_read_timeout(Some(PATIENCE)).expect("set read timeout");
        stream.set_write_timeout(Some(PATIENCE)).expect("set write timeout");
        let _ = stream.set_nodelay(true);
        let reader = BufReader::with_capacity(64 * 1024, stream.try_clone().expect("clone stream"));
        Client { reader, stream }
    }

    /// Writes raw bytes.
    pub fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// `GET path` with a `host` header, keep-alive; returns the response.
    pub fn get(&mut self, path: &str) -> Response {
        self.request("GET", path, &[])
    }

    /// Sends a body-less request with a `host: test` header (unless given) and reads the response.
    pub fn request(&mut self, method: &str, path: &str, headers: &[Header<'_>]) -> Response {
        let mut head = format!("{method} {path} HTTP/1.1\r\n");
        if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
            head.push_str("host: test\r\n");
        }
        for (n, v) in headers {
            head.push_str(&format!("{n}: {v}\r\n"));
        }
        head.push_str("\r\n");
        self.send(head.as_bytes()).unwrap_or_else(|e| panic!("send {method} {path}: {e}"));
        self.read_response_for(method == "HEAD").unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// Reads one response (skipping `1xx` interim responses), body buffered.
    pub fn read_response(&mut self) -> io::Result<Response> {
        self.read_response_for(false)
    }

    /// Reads one response; `head_request` says a body is not to be expected.
    pub fn read_response_for(&mut self, head_request: bool) -> io::Result<Response> {
        let mut body = Vec::new();
        let mut response = self.read_response_with(head_request, &mut |chunk| body.extend_from_slice(chunk))?;
        response.body = body;
        Ok(response)
    }

    /// Reads one response, handing each piece of the body to `sink` instead of buffering it.
    pub fn read_response_with(&mut self, head_request: bool, sink: &mut dyn FnMut(&[u8])) -> io::Result<Response> {
        loop {
            let response = self.read_head()?;
            if (100..200).contains(&response.status) && response.status != 101 {
                continue;
            }
            let no_body = head_request || response.status == 204 || response.status == 304;
            if no_body {
                return Ok(response);
            }
            let chunked =
                response.header("transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
            if chunked {
                self.read_chunked(sink)?;
            } else if let Some(len) = response.header("content-length") {
                let len: u64 = len.trim().parse().map_err(|_| invalid(format!("bad content-length {len:?}")))?;
                self.read_exact_to(len, sink)?;
            } else {
                self.read_to_end_into(sink)?;
            }
            return Ok(response);
        }
    }

    fn read_head(&mut self) -> io::Result<Response> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed before a response"));
        }
        let mut parts = line.trim_end().splitn(3, ' ');
        let version = parts.next().unwrap_or("");
        if !version.starts_with("HTTP/1.") {
            return Err(invalid(format!("bad status line {line:?}")));
        }
        let status =
            parts.next().and_then(|s| s.parse().ok()).ok_or_else(|| invalid(format!("bad status line {line:?}")))?;
        let mut headers = Vec::new();
        loop {
            line.clear();
            if self.reader.read_line(&mut line)? == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed inside a response head"));
            }
            let l = line.trim_end_matches(['\r', '\n']);
            if l.is_empty() {
                break;
            }
            let (n, v) = l.split_once(':').ok_or_else(|| invalid(format!("bad header line {l:?}")))?;
            headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
        Ok(Response { status, headers, body: Vec::new() })
    }

    fn read_exact_to(&mut self, mut len: u64, sink: &mut dyn FnMut(&[u8])) -> io::Result<()> {
        while len > 0 {
            let buf = self.reader.fill_buf()?;
            if buf.is_empty() {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, format!("body ended {len} bytes short")));
            }
            let n = buf.len().min(usize::try_from(len).unwrap_or(usize::MAX));
            sink(&buf[..n]);
            self.reader.consume(n);
            len -= n as u64;
        }
        Ok(())
    }

    fn read_chunked(&mut self, sink: &mut dyn FnMut(&[u8])) -> io::Result<()> {
        let mut line = String::new();
        loop {
            line.clear();
            self.reader.read_line(&mut line)?;
            let size = line.trim_end().split(';').next().unwrap_or("").trim();
            let size = u64::from_str_radix(size, 16).map_err(|_| invalid(format!("bad chunk size {line:?}")))?;
            if size == 0 {
                // Trailers, then the empty line.
                loop {
                    line.clear();
                    if self.reader.read_line(&mut line)? == 0 || line.trim_end().is_empty() {
                        return Ok(());
                    }
                }
            }
            self.read_exact_to(size, sink)?;
            line.clear();
            self.reader.read_line(&mut line)?;
            if line != "\r\n" {
                return Err(invalid(format!("missing CRLF after chunk, got {line:?}")));
            }
        }
    }

    fn read_to_end_into(&mut self, sink: &mut dyn FnMut(&[u8])) -> io::Result<()> {
        loop {
            let buf = self.reader.fill_buf()?;
            if buf.is_empty() {
                return Ok(());
            }
            let n = buf.len();
            sink(buf);
            self.reader.consume(n);
        }
    }

    /// Whether the peer has closed the connection: waits (up to [`PATIENCE`]) for EOF or a
    /// reset; `false` if data arrives instead or the wait times out.
    pub fn is_closed(&mut self) -> bool {
        let mut byte = [0u8; 1];
        match self.reader.read(&mut byte) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => matches!(e.kind(), io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted),
        }
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// A config for one service on `listen` with default pool `main` over `servers` (addresses),
/// plus any extra service keys (`extra`, TOML lines inside `[[service]]`) and extra tables.
pub fn simple_config(listen: SocketAddr, servers: &[SocketAddr], extra: &str) -> String {
    let servers: Vec<String> = servers.iter().map(|a| format!("{{ address = \"{a}\" }}")).collect();
    format!(
        "workers = 1\ndrain_timeout = \"5s\"\n\n[[service]]\nname = \"web\"\nlisten = [\"{listen}\"]\npool = \"main\"\n{extra}\n\n\
         [[pool]]\nname = \"main\"\nservers = [{}]\n",
        servers.join(", ")
    )
}

/// The two configurations of a reload that removes a service: services `keep` and `gone`
/// (`http`, one worker) on one pool of `origin`, then `keep` alone.
pub fn keep_and_gone(keep: SocketAddr, gone: SocketAddr, origin: SocketAddr) -> (String, String) {
    let service = |name: &str, addr: SocketAddr| {
        format!("[[service]]\nname = \"{name}\"\nlisten = \"{addr}\"\npool = \"main\"\n\n")
    };
    let pool = format!("[[pool]]\nname = \"main\"\nservers = [{{ address = \"{origin}\" }}]\n");
    let both = format!("workers = 1\n{}{}{pool}", service("keep", keep), service("gone", gone));
    (both, format!("workers = 1\n{}{pool}", service("keep", keep)))
}

/// A proxy address on a fresh 127.0.0.1 port.
pub fn proxy_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

/// An h2c (prior knowledge) client connected to `addr`, ready to send; its connection
/// runs on the current runtime.
pub async fn h2c_client(addr: SocketAddr) -> h2::client::SendRequest<bytes::Bytes> {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (client, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
    tokio::spawn(conn);
    client.ready().await.expect("ready")
}

/// Reads an HTTP/2 response body to its end, giving the flow-control window back as it goes.
pub async fn h2_body(recv: &mut h2::RecvStream) -> Result<Vec<u8>, h2::Error> {
    let mut body = Vec::new();
    while let Some(data) = recv.data().await {
        let data = data?;
        body.extend_from_slice(&data);
        let _ = recv.flow_control().release_capacity(data.len());
    }
    Ok(body)
}

/// Response fields comparable across protocols: names lower-cased, sorted, without the
/// connection-specific ones (never sent over HTTP/2 or HTTP/3) nor those named in `drop`,
/// and with `age`'s value left out (it grows).
pub fn comparable_fields(fields: impl IntoIterator<Item = (String, String)>, drop: &[&str]) -> Vec<(String, String)> {
    let hop = ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"];
    let mut out: Vec<(String, String)> = fields
        .into_iter()
        .map(|(n, v)| (n.to_ascii_lowercase(), v))
        .filter(|(n, _)| !hop.contains(&n.as_str()) && !drop.contains(&n.as_str()))
        .map(|(n, v)| if n == "age" { (n, String::new()) } else { (n, v) })
        .collect();
    out.sort();
    out
}

/// An h2c test server on a thread of its own: each accepted connection is served by the
/// future `serve` makes of it.
pub fn h2c_test_server<F, Fut>(serve: F) -> SocketAddr
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    listener.set_nonblocking(true).expect("nonblocking");
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            while let Ok((tcp, _)) = listener.accept().await {
                tokio::spawn(serve(tcp));
            }
        });
    });
    addr
}

/// An h2c server that answers each request with what it received: its body's payload
/// (with a `content-length` when `/length`, else none), then its trailers as trailers, with
/// one of its own added (`x-from: server`); it tells `seen` whether the request came with a
/// `transfer-encoding` field (HTTP/2 has none).
pub fn trailer_echo_server(seen: std::sync::mpsc::Sender<bool>) -> SocketAddr {
    h2c_test_server(move |tcp| {
        let seen = seen.clone();
        async move {
            let Ok(mut conn) = h2::server::handshake(tcp).await else { return };
            while let Some(Ok((req, mut respond))) = conn.accept().await {
                let _ = seen.send(req.headers().contains_key("transfer-encoding"));
                let length = req.uri().path() == "/length";
                tokio::spawn(async move {
                    let mut body = req.into_body();
                    let mut payload = Vec::new();
                    while let Some(Ok(data)) = body.data().await {
                        let _ = body.flow_control().release_capacity(data.len());
                        payload.extend_from_slice(&data);
                    }
                    let mut trailers = body.trailers().await.ok().flatten().unwrap_or_default();
                    trailers.insert("x-from", http::HeaderValue::from_static("server"));
                    let mut head = http::Response::builder();
                    if length {
                        head = head.header("content-length", payload.len());
                    }
                    let Ok(mut send) = respond.send_response(head.body(()).expect("head"), false) else { return };
                    // In two DATA frames, then the trailers.
                    let half = payload.len() / 2;
                    let _ = send.send_data(bytes::Bytes::copy_from_slice(&payload[..half]), false);
                    let _ = send.send_data(bytes::Bytes::copy_from_slice(&payload[half..]), false);
                    let _ = send.send_trailers(trailers);
                });
            }
        }
    })
}
