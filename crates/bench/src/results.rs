//! The results schema: what one `switchyard bench` run measured, written as
//! `results.json` and read back by the report and by `switchyard bench compare`.
//!
//! The schema is versioned ([`SCHEMA_VERSION`]); a reader refuses files of
//! another major version instead of misreading them. Every figure is what was
//! measured; derived figures (ratios, medians) are recomputed by readers.

use serde::{Deserialize, Serialize};

/// Version of this schema. Bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// A whole benchmark run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Results {
    /// [`SCHEMA_VERSION`] of the writer.
    pub schema: u32,
    /// When the run started and ended (RFC 3339, UTC).
    pub started: String,
    /// When the run ended.
    pub finished: String,
    /// `--quick` was given.
    pub quick: bool,
    /// The machine the run happened on.
    pub machine: Machine,
    /// Each target's name and version string (`direct` is the client→origin baseline).
    pub targets: Vec<TargetInfo>,
    /// The machine's physical limits, measured in the same run.
    pub limits: Limits,
    /// How the run was conducted.
    pub method: Method,
    /// One entry per (test, size, target).
    pub tests: Vec<TestResult>,
}

/// Facts about the machine.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Machine {
    /// CPU model name.
    pub cpu_model: String,
    /// Online logical CPUs.
    pub cpus: usize,
    /// Total memory in bytes.
    pub memory_bytes: u64,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// Distribution (`PRETTY_NAME` of /etc/os-release).
    pub os: String,
    /// Per-process open file limit.
    pub fd_limit: u64,
    /// TLS library used by the load generator and by switchyard.
    pub tls_library: String,
}

/// A target under test.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TargetInfo {
    /// `switchyard`, `haproxy`, `nginx` or `direct`.
    pub name: String,
    /// Version string as reported by the program.
    pub version: String,
    /// Files of the generated configuration, relative to the output folder.
    pub configs: Vec<String>,
}

/// Physical limits of the machine, each on one core unless said otherwise.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Limits {
    /// RSA-2048 signatures per second (PKCS#1 v1.5, SHA-256).
    pub rsa2048_sign_per_s: f64,
    /// ECDSA P-256 signatures per second.
    pub ecdsa_p256_sign_per_s: f64,
    /// AES-128-GCM seal throughput in bytes per second (16 KiB records).
    pub aes128gcm_bytes_per_s: f64,
    /// gzip (level 1) throughput in bytes per second over ≈75 % compressible HTML.
    pub gzip_bytes_per_s: f64,
    /// brotli (level 4) throughput in input bytes per second over the same HTML (absent
    /// in older files).
    #[serde(default)]
    pub brotli_bytes_per_s: f64,
    /// zstd (level 3) throughput in input bytes per second over the same HTML (absent in
    /// older files).
    #[serde(default)]
    pub zstd_bytes_per_s: f64,
    /// Loopback TCP copy bandwidth in bytes per second (one stream).
    pub loopback_bytes_per_s: f64,
}

/// How the run was conducted.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Method {
    /// Warm-up before each measured run, discarded (seconds).
    pub warmup_s: f64,
    /// Length of each measured run (seconds).
    pub duration_s: f64,
    /// Measured runs per (test, size, target).
    pub repeats: u32,
    /// Core the proxy is pinned to.
    pub proxy_cpu: usize,
    /// Core the load generator and origins are pinned to.
    pub load_cpu: usize,
    /// Connections the closed-loop generator keeps open.
    pub connections: usize,
    /// Key-exchange group the generator offered in TLS tests (absent in older files).
    #[serde(default)]
    pub tls_group: String,
}

/// The tests of the matrix (names follow the F5 report's appendix).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TestKind {
    /// L4: new TCP connection per request.
    L4Cps,
    /// L4: 100 requests per connection, large responses.
    L4Throughput,
    /// L7: one request per connection.
    L7Cps,
    /// L7: 10 requests per connection, with the `.png` content rule.
    L7Rps,
    /// L7: unlimited requests per connection.
    L7KeepaliveRps,
    /// [`TestKind::L7KeepaliveRps`] with every request written to an access log file.
    L7KeepaliveAccessLog,
    /// L7: 100 requests per connection, large responses.
    L7Throughput,
    /// L7 with cookie-insert persistence.
    L7CookiePersistence,
    /// Full TLS handshakes per second, RSA-2048 certificate.
    TlsHandshakeRsa2048,
    /// Full TLS handshakes per second, ECDSA P-256 certificate.
    TlsHandshakeEcdsaP256,
    /// TLS with 100 requests per connection, large responses.
    TlsBulk,
    /// gzip compression (level 1) of ≈75 % compressible HTML.
    CompressionGzip,
    /// Cache hits.
    CacheHit,
    /// Idle keep-alive connections held at once, with memory per connection.
    ConcurrentConnections,
    /// UDP forwarding per Ethernet frame size.
    UdpFrames,
    /// UDP forwarding of the IMIX mixes.
    UdpImix,
    /// L7 keep-alive load over two servers, one killed mid-run: how long until the
    /// target stops sending requests to it, and how many client requests fail.
    L7Failover,
    /// brotli compression (level 4) of ≈75 % compressible HTML.
    CompressionBrotli,
    /// zstd compression (level 3) of ≈75 % compressible HTML.
    CompressionZstd,
    /// HTTP/2 over TLS (ALPN `h2`) to the proxy, HTTP/1.1 to the servers; unlimited requests
    /// per connection.
    Http2Tls,
    /// HTTP/2 in clear text (h2c, prior knowledge) to the proxy, HTTP/1.1 to the servers.
    Http2Clear,
    /// h2c to the proxy and HTTP/2 (h2c) from the proxy to the servers.
    Http2Upstream,
    /// [`TestKind::L7KeepaliveRps`] with OpenTelemetry tracing sampling 1 % of requests.
    L7KeepaliveTracedOnePercent,
    /// [`TestKind::L7KeepaliveRps`] with OpenTelemetry tracing sampling every request.
    L7KeepaliveTracedAll,
    /// HTTP/3 over QUIC to the proxy, HTTP/1.1 to the servers; unlimited requests per
    /// connection, beside [`TestKind::Http2Tls`] in the same run.
    Http3,
    /// [`TestKind::ConcurrentConnections`] through a layer-4 (TCP relay) service: each
    /// idle client connection holds a server connection too.
    ConcurrentConnectionsL4,
}

impl TestKind {
    /// Every test, in the order of the enum.
    pub const ALL: [TestKind; 26] = [
        TestKind::L4Cps,
        TestKind::L4Throughput,
        TestKind::L7Cps,
        TestKind::L7Rps,
        TestKind::L7KeepaliveRps,
        TestKind::L7KeepaliveAccessLog,
        TestKind::L7Throughput,
        TestKind::L7CookiePersistence,
        TestKind::TlsHandshakeRsa2048,
        TestKind::TlsHandshakeEcdsaP256,
        TestKind::TlsBulk,
        TestKind::CompressionGzip,
        TestKind::CacheHit,
        TestKind::ConcurrentConnections,
        TestKind::UdpFrames,
        TestKind::UdpImix,
        TestKind::L7Failover,
        TestKind::CompressionBrotli,
        TestKind::CompressionZstd,
        TestKind::Http2Tls,
        TestKind::Http2Clear,
        TestKind::Http2Upstream,
        TestKind::L7KeepaliveTracedOnePercent,
        TestKind::L7KeepaliveTracedAll,
        TestKind::Http3,
        TestKind::ConcurrentConnectionsL4,
    ];

    /// Machine-friendly name (`--only`): the serialized name with `-` for `_`.
    pub fn slug(self) -> &'static str {
        match self {
            TestKind::L4Cps => "l4-cps",
            TestKind::L4Throughput => "l4-throughput",
            TestKind::L7Cps => "l7-cps",
            TestKind::L7Rps => "l7-rps",
            TestKind::L7KeepaliveRps => "l7-keepalive-rps",
            TestKind::L7KeepaliveAccessLog => "l7-keepalive-access-log",
            TestKind::L7Throughput => "l7-throughput",
            TestKind::L7CookiePersistence => "l7-cookie-persistence",
            TestKind::TlsHandshakeRsa2048 => "tls-handshake-rsa2048",
            TestKind::TlsHandshakeEcdsaP256 => "tls-handshake-ecdsa-p256",
            TestKind::TlsBulk => "tls-bulk",
            TestKind::CompressionGzip => "compression-gzip",
            TestKind::CacheHit => "cache-hit",
            TestKind::ConcurrentConnections => "concurrent-connections",
            TestKind::UdpFrames => "udp-frames",
            TestKind::UdpImix => "udp-imix",
            TestKind::L7Failover => "l7-failover",
            TestKind::CompressionBrotli => "compression-brotli",
            TestKind::CompressionZstd => "compression-zstd",
            TestKind::Http2Tls => "http2-tls",
            TestKind::Http2Clear => "http2-clear",
            TestKind::Http2Upstream => "http2-upstream",
            TestKind::L7KeepaliveTracedOnePercent => "l7-keepalive-traced-one-percent",
            TestKind::L7KeepaliveTracedAll => "l7-keepalive-traced-all",
            TestKind::Http3 => "http3",
            TestKind::ConcurrentConnectionsL4 => "concurrent-connections-l4",
        }
    }

    /// The content coding a compression test asks for (`Accept-Encoding`) and expects
    /// back (`Content-Encoding`); `None` for other tests.
    pub fn coding(self) -> Option<&'static str> {
        match self {
            TestKind::CompressionGzip => Some("gzip"),
            TestKind::CompressionBrotli => Some("br"),
            TestKind::CompressionZstd => Some("zstd"),
            _ => None,
        }
    }

    /// The test of a [`TestKind::slug`] (surrounding blanks ignored).
    pub fn from_slug(slug: &str) -> Option<TestKind> {
        TestKind::ALL.into_iter().find(|k| k.slug() == slug.trim())
    }
}

/// One (test, size, target) cell of the matrix.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TestResult {
    /// Which test.
    pub test: TestKind,
    /// Response (or frame) size in bytes, when the test is swept over sizes.
    pub size: Option<u64>,
    /// Target name (see [`TargetInfo::name`]).
    pub target: String,
    /// What happened.
    pub outcome: Outcome,
}

/// The outcome of one cell.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    /// Measured; figures follow.
    Measured(Measurement),
    /// The target cannot do this test (yet); never silently dropped.
    NotSupported {
        /// Why.
        reason: String,
    },
    /// The target failed its function check or the run failed.
    Failed {
        /// What went wrong.
        reason: String,
    },
}

/// Figures of a measured cell.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Measurement {
    /// Each measured run, in order.
    pub runs: Vec<RunFigures>,
    /// Latency at fixed fractions of the measured maximum (open loop).
    pub latency_at_load: Vec<LoadPoint>,
    /// Result as a fraction of the machine limit that bounds it, when one does.
    pub limit_fraction: Option<f64>,
    /// Warnings about this cell (generator saturated, errors seen, ...).
    pub flags: Vec<String>,
    /// The proxy's system calls, counted on a short extra run after the measured ones
    /// (never during them); absent where not counted (older files, the baseline, sizes
    /// other than a test's smallest, `--syscalls off`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscalls: Option<Syscalls>,
}

/// The system calls a proxy made over one extra run, from `perf stat` (the
/// `syscalls:sys_enter_*` tracepoints) or `strace -c -f`, attached to its process tree.
/// The counting window covers the whole run (no warm-up), so `requests` and
/// `connections` are everything the generator completed in it; the few requests in
/// flight when it ended, and the idle proxy's own calls, are counted in `total` too.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Syscalls {
    /// How they were counted (`perf stat` or `strace -c -f`).
    pub tool: String,
    /// Requests the generator completed in the window.
    pub requests: u64,
    /// Connections the generator opened in the window.
    pub connections: u64,
    /// Every system call of the proxy in the window.
    pub total: u64,
    /// Calls per name (those counted one by one; `total` also holds the rest).
    pub by_name: std::collections::BTreeMap<String, u64>,
    /// Why there are no counts, when counting failed (then the counts are zero).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
}

impl Syscalls {
    /// Calls per completed request.
    pub fn per_request(&self) -> Option<f64> {
        (self.requests > 0 && self.unavailable.is_none()).then(|| self.total as f64 / self.requests as f64)
    }

    /// Calls per connection opened.
    pub fn per_connection(&self) -> Option<f64> {
        (self.connections > 0 && self.unavailable.is_none()).then(|| self.total as f64 / self.connections as f64)
    }
}

/// Figures of one measured run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunFigures {
    /// Completed requests (or transactions / datagrams).
    pub requests: u64,
    /// Connections opened.
    pub connections: u64,
    /// Failed requests (errors, unexpected statuses, function check failures).
    pub errors: u64,
    /// Measured duration in seconds.
    pub duration_s: f64,
    /// Requests per second.
    pub rps: f64,
    /// New connections per second.
    pub cps: f64,
    /// Response payload bytes per second received by the generator.
    pub bytes_per_s: f64,
    /// Proxy CPU seconds (user + system) over the run; 0 for the baseline.
    pub proxy_cpu_s: f64,
    /// Of `proxy_cpu_s`, the seconds in user space (`utime`; absent in older files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_user_cpu_s: Option<f64>,
    /// Of `proxy_cpu_s`, the seconds in the kernel (`stime`; absent in older files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_kernel_cpu_s: Option<f64>,
    /// Proxy CPU microseconds per request.
    pub proxy_cpu_us_per_request: f64,
    /// Requests per proxy CPU-second (efficiency).
    pub requests_per_cpu_s: f64,
    /// Load generator CPU seconds over the run.
    pub generator_cpu_s: f64,
    /// The generator used nearly all of its core: the figure may measure it, not the target.
    pub generator_saturated: bool,
    /// Latency percentiles in microseconds.
    pub latency: Percentiles,
    /// Proxy resident memory per open connection (concurrency test only).
    pub memory_per_connection_bytes: Option<f64>,
    /// The loss-free rate search behind a UDP figure (absent in older files and other
    /// tests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_search: Option<UdpSearch>,
    /// What the failover test saw (absent in older files and other tests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<Failover>,
    /// Compression tests: bytes the generator received (response bodies as sent,
    /// compressed) divided by the bytes the origin sent for the same responses
    /// (requests × size); lower is better (absent in older files and other tests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression_ratio: Option<f64>,
    /// Compression tests: responses that came back without a `content-encoding`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncompressed_responses: Option<u64>,
    /// Cache tests: requests the origins received during the run (warm-up included);
    /// 0 when every request was answered from the cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin_requests: Option<u64>,
}

/// One failover run: steady keep-alive load over two servers, one of them killed
/// (SIGKILL: its listener and connections close) part-way through. Times are in
/// milliseconds from the kill; "seen" times come from polling the target every
/// [`Failover::poll_ms`], so they are that coarse.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Failover {
    /// Seconds of load before the kill.
    pub kill_after_s: f64,
    /// Seconds of load after the kill.
    pub observed_s: f64,
    /// Interval of the polls of the target's own account, milliseconds.
    pub poll_ms: f64,
    /// When the target first reported the killed server unavailable: the failover time,
    /// after which it sends no new request there; `None`: not within the run.
    pub down_ms: Option<f64>,
    /// When the target's count of requests that failed on the killed server last rose;
    /// `None`: none counted. A target may count a request late: HAProxy waits up to 1 s
    /// (its turn-around timer) before a retry, and its retry and redispatch counters
    /// rise then.
    pub last_attempt_ms: Option<f64>,
    /// Requests that failed on the killed server after the kill, by the target's own
    /// count (retried ones included: the client may not have seen them fail).
    pub attempts: u64,
    /// Where `down_ms` and the attempts come from (admin metrics, stats socket, error log).
    pub source: String,
    /// Client requests that failed after the kill (error status, reset, timeout).
    pub failed: u64,
    /// When the last failed client request ended; `None`: none failed.
    pub last_failure_ms: Option<f64>,
    /// The longest client request among those that ended after the kill, milliseconds
    /// (a retry's delay shows here).
    pub slowest_ms: Option<f64>,
    /// Client requests that succeeded after the kill.
    pub succeeded: u64,
}

/// How a UDP cell's loss-free rate was found (RFC 2544-style search over open-loop
/// trials); the run's `rps` is the rate found, `errors` the frames lost in its trial.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UdpSearch {
    /// Lost frames allowed per frame sent (0: zero loss).
    pub loss_tolerance: f64,
    /// Seconds each trial sent for.
    pub trial_s: f64,
    /// Each trial as (offered frames/s, achieved frames/s, frames lost), in order.
    pub trials: Vec<(f64, f64, u64)>,
    /// No trial was loss-free: the figure is 0.
    pub none_loss_free: bool,
    /// The generator could not offer the requested rate at the figure: the target's
    /// loss-free rate is at least the figure, and may be higher.
    pub generator_limited: bool,
}

/// Latency percentiles, microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Maximum.
    pub max_us: f64,
}

/// Latency under a fixed offered load.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LoadPoint {
    /// Offered load as a fraction of the measured maximum.
    pub fraction: f64,
    /// Offered requests per second.
    pub offered_rps: f64,
    /// Achieved requests per second.
    pub achieved_rps: f64,
    /// Latency from the intended send time (coordinated omission corrected).
    pub latency: Percentiles,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_the_serialized_names_and_round_trip() {
        for k in TestKind::ALL {
            let json = serde_json::to_string(&k).expect("serializes");
            assert_eq!(json.trim_matches('"').replace('_', "-"), k.slug());
            assert_eq!(TestKind::from_slug(k.slug()), Some(k));
        }
        assert_eq!(TestKind::from_slug(" udp-imix "), Some(TestKind::UdpImix));
        assert_eq!(TestKind::from_slug("udp_imix"), None);
    }

    #[test]
    fn run_figures_without_a_search_still_read() {
        let old = r#"{"requests":1,"connections":1,"errors":0,"duration_s":1.0,"rps":1.0,"cps":0.0,
            "bytes_per_s":0.0,"proxy_cpu_s":0.0,"proxy_cpu_us_per_request":0.0,"requests_per_cpu_s":0.0,
            "generator_cpu_s":0.0,"generator_saturated":false,
            "latency":{"p50_us":0.0,"p90_us":0.0,"p99_us":0.0,"p999_us":0.0,"max_us":0.0},
            "memory_per_connection_bytes":null}"#;
        let r: RunFigures = serde_json::from_str(old).expect("old run figures read");
        assert!(r.udp_search.is_none());
        assert!(!serde_json::to_string(&r).expect("writes").contains("udp_search"));
    }
}
