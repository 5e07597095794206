//! Tests of the report writer, reader and comparison over a synthetic run.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::results::{
    Failover, Limits, LoadPoint, Machine, Measurement, Method, Outcome, Percentiles, Results, RunFigures, TargetInfo,
    TestKind, TestResult, SCHEMA_VERSION,
};

use super::model::{self, test_name, LARGE, SMALL};
use super::{compare, read, write, HTML_FILE, MARKDOWN_FILE, RESULTS_FILE};

/// A fresh, empty folder under the system temporary folder, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "switchyard-report-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&p);
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn run(rps: f64, cpu_us: f64, size: u64, saturated: bool) -> RunFigures {
    let duration = 3.0;
    let requests = (rps * duration) as u64;
    RunFigures {
        requests,
        connections: requests / 10,
        errors: 0,
        duration_s: duration,
        rps,
        cps: rps / 10.0,
        bytes_per_s: rps * size as f64,
        proxy_cpu_s: if cpu_us > 0.0 { requests as f64 * cpu_us / 1e6 } else { 0.0 },
        proxy_user_cpu_s: (cpu_us > 0.0).then(|| requests as f64 * cpu_us * 0.25 / 1e6),
        proxy_kernel_cpu_s: (cpu_us > 0.0).then(|| requests as f64 * cpu_us * 0.75 / 1e6),
        proxy_cpu_us_per_request: cpu_us,
        requests_per_cpu_s: if cpu_us > 0.0 { 1e6 / cpu_us } else { 0.0 },
        generator_cpu_s: 2.9,
        generator_saturated: saturated,
        latency: Percentiles { p50_us: 180.0, p90_us: 260.0, p99_us: 410.0, p999_us: 900.0, max_us: 2_000.0 },
        memory_per_connection_bytes: None,
        udp_search: None,
        failover: None,
        compression_ratio: None,
        uncompressed_responses: None,
        origin_requests: None,
    }
}

/// A measured cell with three runs around `rps` and `cpu_us`.
fn measured(rps: f64, cpu_us: f64, size: u64, saturated: bool, latency: bool) -> Outcome {
    let runs = vec![
        run(rps * 0.98, cpu_us * 1.02, size, saturated),
        run(rps, cpu_us, size, false),
        run(rps * 1.01, cpu_us * 0.99, size, false),
    ];
    let latency_at_load = if latency {
        [0.1, 0.5, 0.8]
            .iter()
            .map(|&f| LoadPoint {
                fraction: f,
                offered_rps: rps * f,
                achieved_rps: rps * f * 0.999,
                latency: Percentiles {
                    p50_us: 100.0 + 200.0 * f,
                    p90_us: 150.0 + 300.0 * f,
                    p99_us: 300.0 + 900.0 * f,
                    p999_us: 800.0 + 2000.0 * f,
                    max_us: 5000.0,
                },
            })
            .collect()
    } else {
        Vec::new()
    };
    let flags = if saturated { vec!["generator saturated in 1 of 3 runs".into()] } else { Vec::new() };
    Outcome::Measured(Measurement { runs, latency_at_load, limit_fraction: None, flags, syscalls: None })
}

fn cell(test: TestKind, size: Option<u64>, target: &str, outcome: Outcome) -> TestResult {
    TestResult { test, size, target: target.into(), outcome }
}

/// A synthetic run: switchyard, haproxy, nginx and the baseline, with measured,
/// not-supported and failed cells, latency points, concurrency and UDP cells.
pub(crate) fn sample() -> Results {
    let mut tests = Vec::new();
    let cpu = |target: &str| match target {
        "switchyard" => 20.0,
        "haproxy" => 30.0,
        "nginx" => 28.5,
        _ => 0.0,
    };
    for test in [TestKind::L7KeepaliveRps, TestKind::L7Rps, TestKind::L7Cps] {
        for size in [SMALL, 5 * 1024, LARGE] {
            for target in ["switchyard", "haproxy", "nginx", "direct"] {
                let rps = 40_000.0 / (1.0 + size as f64 / 16_384.0);
                let saturated = target == "haproxy" && size == SMALL && test == TestKind::L7Rps;
                let latency = test == TestKind::L7Rps && size == SMALL;
                tests.push(cell(test, Some(size), target, measured(rps, cpu(target), size, saturated, latency)));
            }
        }
    }
    // The floor (8 µs) at L7 keep-alive, and switchyard's system calls at 128 B there.
    for size in [SMALL, 5 * 1024, LARGE] {
        let rps = 40_000.0 / (1.0 + size as f64 / 16_384.0);
        tests.push(cell(TestKind::L7KeepaliveRps, Some(size), "floor", measured(rps, 8.0, size, false, false)));
    }
    if let Some(Outcome::Measured(m)) = tests
        .iter_mut()
        .find(|c| c.test == TestKind::L7KeepaliveRps && c.size == Some(SMALL) && c.target == "switchyard")
        .map(|c| &mut c.outcome)
    {
        m.syscalls = Some(crate::results::Syscalls {
            tool: "perf stat".into(),
            requests: 1000,
            connections: 50,
            total: 4100,
            by_name: [("recvfrom", 2000), ("sendto", 1000), ("writev", 1000), ("epoll_wait", 100)]
                .into_iter()
                .map(|(n, c)| (n.to_string(), c))
                .collect(),
            unavailable: None,
        });
    }
    for target in ["switchyard", "haproxy", "nginx", "direct"] {
        let outcome = match target {
            "direct" => Outcome::NotSupported { reason: "baseline: the origin simulator writes no access log".into() },
            "nginx" => {
                Outcome::Failed { reason: "function check failed: 0 of 7 requests reached the access log".into() }
            }
            t => measured(40_000.0 / (1.0 + SMALL as f64 / 16_384.0), cpu(t) * 1.1, SMALL, false, false),
        };
        tests.push(cell(TestKind::L7KeepaliveAccessLog, Some(SMALL), target, outcome));
    }
    for target in ["switchyard", "haproxy", "nginx", "direct"] {
        let outcome = match target {
            "switchyard" => Outcome::NotSupported { reason: "L4 mode arrives with a later issue".into() },
            "nginx" => Outcome::Failed { reason: "function check: stream module missing".into() },
            _ => measured(50_000.0, cpu(target) * 3.0, SMALL, false, false),
        };
        tests.push(cell(TestKind::L4Cps, Some(SMALL), target, outcome));
    }
    for target in ["switchyard", "haproxy", "nginx", "direct"] {
        let outcome = match target {
            "direct" => Outcome::NotSupported { reason: "baseline: the origin simulator does not speak TLS".into() },
            "switchyard" => Outcome::NotSupported { reason: "TLS termination arrives with a later issue".into() },
            _ => {
                let mut o = measured(1_200.0, 830.0, SMALL, false, false);
                if let Outcome::Measured(m) = &mut o {
                    m.limit_fraction = Some(0.37);
                }
                o
            }
        };
        tests.push(cell(TestKind::TlsHandshakeRsa2048, Some(SMALL), target, outcome));
    }
    for target in ["switchyard", "haproxy", "nginx", "direct"] {
        let outcome = if target == "direct" {
            Outcome::NotSupported { reason: "baseline: no proxy process whose memory could be measured".into() }
        } else {
            let mut o = measured(0.0, 0.0, 0, false, false);
            if let Outcome::Measured(m) = &mut o {
                for r in &mut m.runs {
                    r.connections = 8_000;
                    r.memory_per_connection_bytes = Some(if target == "switchyard" { 3_100.0 } else { 9_000.0 });
                }
            }
            o
        };
        tests.push(cell(TestKind::ConcurrentConnections, None, target, outcome));
    }
    for size in [64, 512, 1518] {
        for target in ["switchyard", "haproxy", "nginx", "direct"] {
            let outcome = match target {
                "direct" => measured(300_000.0, 0.0, size, false, false),
                _ => Outcome::NotSupported { reason: format!("{target}: UDP mode not configured <yet>") },
            };
            tests.push(cell(TestKind::UdpFrames, Some(size), target, outcome));
        }
    }
    tests.push(cell(TestKind::UdpImix, Some(353), "direct", measured(250_000.0, 0.0, 353, false, false)));
    for target in ["switchyard", "haproxy", "nginx", "direct"] {
        let outcome = if target == "direct" {
            Outcome::NotSupported { reason: "baseline: no proxy to take a dead server out of rotation".into() }
        } else {
            let mut r = run(20_000.0, cpu(target), SMALL, false);
            r.failover = Some(Failover {
                kill_after_s: 3.0,
                observed_s: 6.0,
                poll_ms: 10.0,
                down_ms: (target != "nginx").then_some(if target == "switchyard" { 412.0 } else { 455.0 }),
                last_attempt_ms: Some(440.0),
                attempts: 2_500,
                source: format!("{target} <own account>"),
                failed: if target == "haproxy" { 3 } else { 0 },
                last_failure_ms: (target == "haproxy").then_some(1.5),
                slowest_ms: Some(if target == "haproxy" { 1_004.0 } else { 40.0 }),
                succeeded: 120_000,
            });
            Outcome::Measured(Measurement {
                runs: vec![r],
                latency_at_load: vec![],
                limit_fraction: None,
                flags: vec![],
                syscalls: None,
            })
        };
        tests.push(cell(TestKind::L7Failover, None, target, outcome));
    }
    Results {
        schema: SCHEMA_VERSION,
        started: "2025-03-01T10:00:00Z".into(),
        finished: "2025-03-01T10:35:00Z".into(),
        quick: false,
        machine: Machine {
            cpu_model: "AMD EPYC <test> & Co".into(),
            cpus: 2,
            memory_bytes: 4 * 1024 * 1024 * 1024,
            kernel: "6.1.0-test".into(),
            os: "Debian GNU/Linux 12 (bookworm)".into(),
            fd_limit: 20_000,
            tls_library: "rustls 0.23".into(),
        },
        targets: vec![
            TargetInfo { name: "direct".into(), version: "origin simulator".into(), configs: vec![] },
            TargetInfo {
                name: "switchyard".into(),
                version: "switchyard 0.1.0".into(),
                configs: vec!["configs/switchyard-l7.toml".into()],
            },
            TargetInfo {
                name: "haproxy".into(),
                version: "HAProxy 2.6.12".into(),
                configs: vec!["configs/haproxy-l7.cfg".into(), "configs/haproxy-l4.cfg".into()],
            },
            TargetInfo {
                name: "nginx".into(),
                version: "nginx/1.22.1".into(),
                configs: vec!["configs/nginx-l7.conf".into()],
            },
        ],
        limits: Limits {
            rsa2048_sign_per_s: 3_200.0,
            ecdsa_p256_sign_per_s: 40_000.0,
            aes128gcm_bytes_per_s: 2.5e9,
            gzip_bytes_per_s: 150e6,
            brotli_bytes_per_s: 60e6,
            zstd_bytes_per_s: 300e6,
            loopback_bytes_per_s: 4e9,
        },
        method: Method {
            warmup_s: 1.0,
            duration_s: 3.0,
            repeats: 3,
            proxy_cpu: 0,
            load_cpu: 1,
            connections: 50,
            tls_group: "X25519".into(),
        },
        tests,
    }
}

fn written(r: &Results) -> (TempDir, String, String) {
    let dir = TempDir::new();
    let out = dir.0.join("nested").join("out");
    write(r, &out).expect("write");
    let md = fs::read_to_string(out.join(MARKDOWN_FILE)).expect("report.md");
    let html = fs::read_to_string(out.join(HTML_FILE)).expect("report.html");
    (dir, md, html)
}

fn out_of(dir: &TempDir) -> PathBuf {
    dir.0.join("nested").join("out")
}

#[test]
fn write_creates_the_folder_and_three_files() {
    let (dir, _, _) = written(&sample());
    for f in [RESULTS_FILE, MARKDOWN_FILE, HTML_FILE] {
        let p = out_of(&dir).join(f);
        assert!(p.is_file(), "{} missing", p.display());
        assert!(fs::metadata(&p).expect("meta").len() > 100);
    }
    let leftovers: Vec<_> = fs::read_dir(out_of(&dir))
        .expect("dir")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left behind");
}

#[test]
fn markdown_has_every_section_and_every_reason() {
    let r = sample();
    let (_dir, md, _) = written(&r);
    assert!(md.starts_with("# switchyard benchmark report — 2025-03-01 10:00 UTC"), "{}", &md[..80]);
    for t in model::tests_in_order(&r) {
        assert!(md.contains(test_name(t)), "no section for {t:?}");
    }
    for section in [
        "## Summary",
        "## Latency against offered load",
        "## Concurrent connections",
        "## UDP forwarding",
        "## Machine",
        "### Physical limits",
        "## Method",
        "## How to reproduce",
        "## Generated configuration files",
    ] {
        assert!(md.contains(section), "missing {section}");
    }
    for reason in [
        "not supported: L4 mode arrives with a later issue",
        "not supported: TLS termination arrives with a later issue",
        "failed: function check: stream module missing",
        "not supported: baseline: no proxy process whose memory could be measured",
        "UDP mode not configured \\<yet>",
    ] {
        assert!(md.contains(reason), "missing reason {reason}");
    }
    assert!(md.contains("switchyard bench --peers haproxy,nginx --out DIR"));
    assert!(md.contains("[haproxy: configs/haproxy-l7.cfg](<configs/haproxy-l7.cfg>)"));
    assert!(md.contains("this figure measures the generator"));
    assert!(md.contains("robust figure is the proxy's CPU time per request"));
    // switchyard 20 µs against haproxy 30 µs and nginx 28.5 µs.
    assert!(md.contains("1.50× more efficient"), "{md}");
    assert!(md.contains("1.43× more efficient"));
    assert!(md.contains("3.0 KiB"), "memory per connection");
    // The 128 KB headline rows are there too.
    assert!(md.contains("| L7 RPS | 128 KB | haproxy |"));
}

#[test]
fn failover_has_its_own_table_and_a_summary_line() {
    let (_dir, md, html) = written(&sample());
    assert!(md.contains("## L7 failover: a server killed under load"), "{md}");
    let row = |target: &str| {
        md.lines().find(|l| l.starts_with(&format!("| {target} | ")) && l.contains(" ms |")).unwrap_or("").to_string()
    };
    assert!(row("switchyard").starts_with("| switchyard | 412 ms | 440 ms | 2,500 | 0 | — | 40.0 ms |"), "{md}");
    assert!(row("haproxy").contains("| 455 ms |") && row("haproxy").contains("| 1,004 ms |"), "{md}");
    assert!(row("nginx").starts_with("| nginx | not within 6 s |"), "{md}");
    assert!(md.contains("- haproxy: haproxy \\<own account>; polled every 10.0 ms."), "{md}");
    assert!(md.contains("Failover after a server is killed under load: switchyard 412 ms (0 failed requests)"));
    assert!(!md.contains("| Failover | — |"), "failover is not in the efficiency summary");
    assert!(html.contains("L7 failover: a server killed under load"));
}

#[test]
fn the_cost_of_logging_is_the_difference_from_keep_alive() {
    let (_dir, md, html) = written(&sample());
    assert!(md.contains("### L7 keep-alive with access log (.png rule)"), "{md}");
    assert!(md.contains("The cost of access logging"));
    let row = |target: &str| {
        md.lines()
            .find(|l| l.starts_with(&format!("| {target} |")) && l.contains(" % |"))
            .unwrap_or_default()
            .to_string()
    };
    // switchyard 20 µs → 22 µs, HAProxy 30 → 33: +10 % each.
    assert!(row("switchyard").contains("| 20.0 | 22.0 | +2.0 | +10 % |"), "{}", row("switchyard"));
    assert!(row("haproxy").contains("| +3.0 | +10 % |"), "{}", row("haproxy"));
    assert!(md.contains("| nginx | *failed: function check failed: 0 of 7 requests reached the access log*"), "{md}");
    assert!(html.contains("The cost of access logging"));
}

#[test]
fn cpu_is_split_and_set_beside_the_floor_with_the_system_calls() {
    let (_dir, md, html) = written(&sample());
    let ka = md.split("### L7 keep-alive").nth(1).unwrap_or_default();
    let row = |target: &str| ka.lines().find(|l| l.starts_with(&format!("| 128 B | {target} |"))).unwrap_or_default();
    // switchyard 20 µs = 5 user + 15 kernel, 12 µs above the floor's 8 (2.5×); 4,100 calls
    // over 1,000 requests on 50 connections.
    let sw = row("switchyard");
    assert!(sw.contains("| 5.00 / 15.0 | +12.0 (2.50×) | 4.1 (82/conn) |"), "{sw}");
    assert!(row("floor").contains("| 2.00 / 6.00 | the floor |"), "{}", row("floor"));
    assert!(row("haproxy").contains("| +22.0 (3.75×) | — |"), "{}", row("haproxy"));
    assert!(row("direct").contains("| — (no proxy) |"), "{}", row("direct"));
    assert!(ka.contains("| 128 B | switchyard | perf stat | 1,000 | 50 | 4.10 | 82.0 | recvfrom 2.00, sendto 1.00, writev 1.00, epoll_wait 0.10 |"), "{ka}");
    // The summary prints the floor and each proxy's distance above it.
    let summary = md.lines().find(|l| l.starts_with("| L7 KA RPS | 128 B | haproxy |")).unwrap_or_default();
    assert!(summary.contains("| 8.00 | +12.0 (2.50×) | +22.0 (3.75×) |"), "{summary}");
    assert!(html.contains("above floor"));
}

#[test]
fn floor_uring_sits_beside_the_floor_and_is_no_peer() {
    let mut r = sample();
    let rps = 40_000.0 / (1.0 + SMALL as f64 / 16_384.0);
    r.tests.push(cell(TestKind::L7KeepaliveRps, Some(SMALL), "floor-uring", measured(rps, 6.0, SMALL, false, false)));
    let (_dir, md, _html) = written(&r);
    let ka = md.split("### L7 keep-alive").nth(1).unwrap_or_default();
    let row = ka.lines().find(|l| l.starts_with("| 128 B | floor-uring |")).unwrap_or_default();
    // 6 µs against the floor's 8: its distance from the floor on epoll.
    assert!(row.contains("| -2.0 (0.75×) |"), "{row}");
    let at = |t: &str| ka.find(&format!("| 128 B | {t} |")).unwrap_or(usize::MAX);
    assert!(at("nginx") < at("floor") && at("floor") < at("floor-uring") && at("floor-uring") < at("direct"));
    // Not a peer: the summary compares switchyard with HAProxy and NGINX only.
    assert!(!md.lines().any(|l| l.starts_with("| L7 KA RPS | 128 B | floor-uring |")), "{md}");
}

#[test]
fn markdown_tables_have_consistent_columns() {
    let (_dir, md, _) = written(&sample());
    let mut columns: Option<usize> = None;
    for line in md.lines() {
        if line.starts_with('|') {
            let n = line.replace("\\|", "").matches('|').count();
            match columns {
                None => columns = Some(n),
                Some(c) => assert_eq!(c, n, "ragged table row: {line}"),
            }
        } else {
            columns = None;
        }
    }
}

#[test]
fn html_is_self_contained_and_escaped() {
    let (_dir, _, html) = written(&sample());
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.trim_end().ends_with("</html>"));
    assert!(html.contains("<svg"), "no charts");
    assert!(html.contains("Performance envelope"));
    assert!(html.contains("Proxy CPU per request at 128 B"));
    assert!(html.contains("Latency against offered load — L7 RPS, 128 B"));
    for bad in ["<script", "<link", "@import", "url(", "src=", "http://", "https://"] {
        assert!(!html.contains(bad), "external reference or script: {bad}");
    }
    assert!(html.contains("AMD EPYC &lt;test&gt; &amp; Co"));
    assert!(!html.contains("<test>"));
    assert!(html.contains("UDP mode not configured &lt;yet&gt;"));
    assert_eq!(html.matches("<svg").count(), html.matches("</svg>").count());
    assert_eq!(html.matches("<table>").count(), html.matches("</table>").count());
    assert!(html.contains("href=\"configs/haproxy-l7.cfg\""));
}

#[test]
fn read_round_trips_write() {
    let r = sample();
    let (dir, _, _) = written(&r);
    let back = read(&out_of(&dir).join(RESULTS_FILE)).expect("read");
    let (x, y) = (serde_json::to_value(&back).expect("json"), serde_json::to_value(&r).expect("json"));
    assert!(same(&x, &y), "results changed on the way through results.json");
    assert_eq!(back.tests.len(), r.tests.len());
}

/// JSON equality with floats equal to 1e-12 relative (serde_json's float parsing may differ in the last bit).
fn same(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => (x - y).abs() <= 1e-12 * x.abs().max(y.abs()).max(1.0),
            _ => x == y,
        },
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

#[test]
fn read_refuses_another_schema_version() {
    let dir = TempDir::new();
    fs::create_dir_all(&dir.0).expect("dir");
    let mut v = serde_json::to_value(sample()).expect("json");
    v["schema"] = serde_json::json!(999);
    let p = dir.0.join("old.json");
    fs::write(&p, serde_json::to_string(&v).expect("json")).expect("write");
    let err = read(&p).expect_err("schema 999 must be refused");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    let msg = err.to_string();
    assert!(msg.contains("999") && msg.contains(&format!("version {SCHEMA_VERSION}")), "{msg}");
    fs::write(&p, "{\"hello\": 1}").expect("write");
    assert!(read(&p).expect_err("no schema").to_string().contains("no `schema` field"));
    assert_eq!(read(Path::new("/nonexistent/results.json")).expect_err("missing").kind(), std::io::ErrorKind::NotFound);
}

#[test]
fn compare_with_itself_gives_ratios_of_one() {
    let (dir, _, _) = written(&sample());
    let p = out_of(&dir).join(RESULTS_FILE);
    let text = compare(&p, &p).expect("compare");
    assert!(text.contains("Same machine facts, method and versions."));
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("| ") && !l.starts_with("| Size")).collect();
    assert!(rows.len() > 10, "{text}");
    for row in &rows {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        assert!(cells[5] == "1.00" || cells[3] == "0.00", "{row}");
        assert!(cells[8] == "1.00" || cells[8] == "—", "{row}");
    }
    assert!(!rows.iter().any(|r| r.contains('◆')), "no difference can exceed the spread");
    assert!(text.contains("L4 connections per second — 128 B — switchyard: A not supported"));
}

#[test]
fn compare_marks_differences_beyond_the_spread_and_lone_cells() {
    let a = sample();
    let mut b = sample();
    b.machine.kernel = "6.12.0-other".into();
    for c in &mut b.tests {
        if let Outcome::Measured(m) = &mut c.outcome {
            for r in &mut m.runs {
                r.rps *= 1.5;
            }
        }
    }
    b.tests.push(cell(TestKind::CacheHit, Some(SMALL), "switchyard", measured(1000.0, 10.0, SMALL, false, false)));
    let dir = TempDir::new();
    write(&a, &dir.0.join("a")).expect("a");
    write(&b, &dir.0.join("b")).expect("b");
    let text = compare(&dir.0.join("a").join(RESULTS_FILE), &dir.0.join("b").join(RESULTS_FILE)).expect("compare");
    assert!(text.contains("| Kernel | 6.1.0-test | 6.12.0-other |"), "{text}");
    assert!(text.contains("1.50 ◆"));
    assert!(text.contains("Cache hits — 128 B — switchyard: only in B"));
}

#[test]
fn quick_run_without_peers_compares_with_the_baseline() {
    let mut r = sample();
    r.quick = true;
    r.targets.retain(|t| t.name == "switchyard" || t.name == "direct");
    r.tests.retain(|c| c.target == "switchyard" || c.target == "direct");
    let (_dir, md, html) = written(&r);
    assert!(md.contains("`--quick`"));
    assert!(md.contains("| L7 RPS | 128 B | direct |"), "{md}");
    assert!(!md.contains("| haproxy |"));
    assert!(html.contains("<svg"));
}

#[test]
fn empty_run_still_writes_a_report() {
    let mut r = sample();
    r.tests.clear();
    let (_dir, md, html) = written(&r);
    assert!(md.contains("## Summary"));
    assert!(html.starts_with("<!DOCTYPE html>"));
}

#[test]
fn compression_tables_show_the_ratio_and_the_summary_names_it() {
    let mut r = sample();
    let with_ratio = |ratio: f64| {
        let Outcome::Measured(mut m) = measured(2000.0, 80.0, LARGE, false, false) else { unreachable!() };
        for run in &mut m.runs {
            run.compression_ratio = Some(ratio);
            run.uncompressed_responses = Some(0);
        }
        Outcome::Measured(m)
    };
    r.tests.push(cell(TestKind::CompressionGzip, Some(LARGE), "switchyard", with_ratio(0.29)));
    r.tests.push(cell(TestKind::CompressionGzip, Some(LARGE), "haproxy", with_ratio(0.408)));
    r.tests.push(cell(
        TestKind::CompressionBrotli,
        Some(LARGE),
        "haproxy",
        Outcome::NotSupported { reason: "HAProxy 2.6 compresses with gzip and deflate only".into() },
    ));
    let (_dir, md, _) = written(&r);
    assert!(md.contains("| Size | Target | req/s | MB/s | ratio | proxy µs CPU/req |"), "{md}");
    assert!(md.contains("| 128 KB | switchyard | 2,000 | 262 | 29.0 % |"), "{md}");
    assert!(md.contains("gzip compression ratio at 128 KB (bytes sent / origin bytes, lower is better): switchyard 29.0 %, haproxy 40.8 %."), "{md}");
    assert!(
        md.contains("| 128 KB | haproxy | *not supported: HAProxy 2.6 compresses with gzip and deflate only*"),
        "{md}"
    );
    assert!(md.contains("| brotli level 4 (one core) | 60.0 MB/s | brotli compression |"), "{md}");
    // Other tests keep their columns.
    assert!(md.contains("| Size | Target | req/s | MB/s | proxy µs CPU/req |"), "{md}");
}

/// A cell whose runs took `cpu_us` µs of CPU per request, in this order.
fn rounds_of(cpu_us: &[f64]) -> Outcome {
    let runs = cpu_us.iter().map(|&c| run(60_000.0, c, 128, false)).collect();
    Outcome::Measured(Measurement {
        runs,
        latency_at_load: Vec::new(),
        limit_fraction: None,
        flags: Vec::new(),
        syscalls: None,
    })
}

#[test]
fn efficiency_is_the_median_of_the_rounds_ratios() {
    // Round 2 ran on a slow minute for both targets, round 3 slowed HAProxy alone: the
    // medians of each target (12 and 32 µs) would say 2.67×; round by round it is 1.30×,
    // 1.07× and 3.25×.
    let mut r = sample();
    r.tests.retain(|t| t.test != TestKind::Http2Upstream);
    r.tests.push(cell(TestKind::Http2Upstream, Some(128), "switchyard", rounds_of(&[10.0, 30.0, 12.0])));
    r.tests.push(cell(TestKind::Http2Upstream, Some(128), "haproxy", rounds_of(&[13.0, 32.0, 39.0])));
    let (_dir, md, _html) = written(&r);
    let row = md.lines().find(|l| l.starts_with("| h2 → h2 | 128 B | haproxy |")).unwrap_or_default();
    assert!(row.contains("**1.30× more efficient** (per round 1.07–3.25)"), "{md}");
    assert!(
        md.contains("switchyard 12.0 µs CPU/req, HAProxy 32.0 µs: 1.30× HAProxy's efficiency (per round 1.07–3.25) (target ≥ 1.3×: met)"),
        "{md}"
    );
    // A lone round has no range to show.
    r.tests.retain(|t| t.test != TestKind::Http2Upstream);
    r.tests.push(cell(TestKind::Http2Upstream, Some(128), "switchyard", rounds_of(&[10.0])));
    r.tests.push(cell(TestKind::Http2Upstream, Some(128), "haproxy", rounds_of(&[12.0])));
    let (_dir, md, _html) = written(&r);
    assert!(md.contains("1.20× HAProxy's efficiency (target ≥ 1.3×: not met)"), "{md}");
}
