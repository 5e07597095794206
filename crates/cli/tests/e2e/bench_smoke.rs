//! CI smoke test of `switchyard bench --quick` against switchyard alone: the report files
//! exist and `results.json` (schema 1) holds measured figures, HTTP/2 and HTTP/3 rows included, the
//! proxy CPU split into user and kernel time, the floor target's rows and the system calls
//! counted on the extra run (or the reason they could not be). It checks structure, not
//! speed: under the debug binary the figures are small, but they must be there.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use serde_json::Value;

#[test]
fn quick_bench_writes_a_report_with_figures() {
    let _bench = crate::common::one_bench_at_a_time();
    let out = crate::common::temp_dir("bench-smoke");
    let _ = std::fs::remove_dir_all(&out);
    let start = Instant::now();
    let status = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["bench", "--quick", "--out"])
        .arg(&out)
        .status()
        .expect("run switchyard bench");
    assert!(status.success(), "switchyard bench --quick failed: {status}");
    eprintln!("quick run took {:?}", start.elapsed());

    for f in ["results.json", "report.md", "report.html"] {
        let p: PathBuf = out.join(f);
        assert!(p.is_file() && std::fs::metadata(&p).map_or(0, |m| m.len()) > 0, "{} missing or empty", p.display());
    }
    let text = std::fs::read_to_string(out.join("results.json")).expect("read results.json");
    let r: Value = serde_json::from_str(&text).expect("results.json parses");
    assert_eq!(r["schema"], 1);
    assert_eq!(r["quick"], true);
    let targets: Vec<&str> =
        r["targets"].as_array().expect("targets").iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(targets, ["direct", "switchyard", "floor"]);
    assert!(r["limits"]["rsa2048_sign_per_s"].as_f64().unwrap_or(0.0) > 0.0);

    let tests = r["tests"].as_array().expect("tests");
    let cell = tests
        .iter()
        .find(|t| t["test"] == "l7_keepalive_rps" && t["target"] == "switchyard" && t["size"] == 128)
        .expect("switchyard L7 keep-alive 128 B cell");
    assert_eq!(cell["outcome"]["status"], "measured", "{cell}");
    let run = &cell["outcome"]["runs"][0];
    assert!(run["requests"].as_u64().unwrap_or(0) > 0, "{run}");
    assert!(run["proxy_cpu_us_per_request"].as_f64().unwrap_or(0.0) > 0.0, "{run}");
    // User and kernel time apart, adding up to the total.
    let (user, kernel, total) = (&run["proxy_user_cpu_s"], &run["proxy_kernel_cpu_s"], &run["proxy_cpu_s"]);
    let sum = user.as_f64().expect("user time") + kernel.as_f64().expect("kernel time");
    assert!((sum - total.as_f64().unwrap_or(-1.0)).abs() < 1e-6, "{run}");
    // System calls counted on the extra run, or why not (no perf nor strace that works here).
    let sys = &cell["outcome"]["syscalls"];
    match sys["unavailable"].as_str() {
        Some(why) => eprintln!("system calls not counted on this machine: {why}"),
        None => {
            assert!(sys["requests"].as_u64().unwrap_or(0) > 0, "{sys}");
            assert!(sys["total"].as_u64().unwrap_or(0) >= sys["requests"].as_u64().unwrap_or(0), "{sys}");
            assert!(sys["by_name"]["recvfrom"].as_u64().unwrap_or(0) > 0, "a proxy reads its requests: {sys}");
        }
    }
    // The floor: measured at L7, with its own CPU figures; none beside HTTP/2.
    for test in ["l7_keepalive_rps", "l7_rps", "l7_cps"] {
        let floor = tests
            .iter()
            .find(|t| t["test"] == test && t["target"] == "floor" && t["size"] == 128)
            .unwrap_or_else(|| panic!("floor {test} 128 B cell"));
        assert_eq!(floor["outcome"]["status"], "measured", "{floor}");
        let run = &floor["outcome"]["runs"][0];
        assert!(run["requests"].as_u64().unwrap_or(0) > 0 && run["errors"] == 0, "{test}: {run}");
        assert!(run["proxy_cpu_us_per_request"].as_f64().unwrap_or(0.0) > 0.0, "{test}: {run}");
    }
    assert!(!tests.iter().any(|t| t["target"] == "floor" && t["test"] == "http2_clear"), "no floor for h2c");
    let md = std::fs::read_to_string(out.join("report.md")).expect("read report.md");
    for column in ["user / kernel µs", "above floor µs", "syscalls/req", "floor µs CPU/req"] {
        assert!(md.contains(column), "report.md lacks the `{column}` column");
    }
    // HTTP/2 to the proxy (h2c, and over TLS) and from it to the servers; HTTP/3 over QUIC.
    for test in ["http2_clear", "http2_upstream", "http2_tls", "http3"] {
        let cell = tests
            .iter()
            .find(|t| t["test"] == test && t["target"] == "switchyard" && t["size"] == 128)
            .unwrap_or_else(|| panic!("switchyard {test} 128 B cell"));
        assert_eq!(cell["outcome"]["status"], "measured", "{cell}");
        let run = &cell["outcome"]["runs"][0];
        assert!(run["requests"].as_u64().unwrap_or(0) > 0 && run["errors"] == 0, "{test}: {run}");
    }
    // HTTP/3 beside HTTP/2 over TLS: the proxy's CPU split as in every row, a handshake per
    // connection, and the table that puts the two side by side.
    let h3 = tests
        .iter()
        .find(|t| t["test"] == "http3" && t["target"] == "switchyard" && t["size"] == 128)
        .expect("switchyard HTTP/3 128 B cell");
    let run = &h3["outcome"]["runs"][0];
    assert!(run["proxy_user_cpu_s"].as_f64().is_some() && run["proxy_kernel_cpu_s"].as_f64().is_some(), "{run}");
    assert!(run["proxy_cpu_us_per_request"].as_f64().unwrap_or(0.0) > 0.0, "{run}");
    let direct = tests.iter().find(|t| t["test"] == "http3" && t["target"] == "direct").expect("direct HTTP/3 cell");
    assert_eq!(direct["outcome"]["status"], "not_supported", "{direct}");
    assert!(
        md.contains("HTTP/3 against HTTP/2 over TLS") && md.contains("h3 / h2 CPU"),
        "report.md lacks the h3 table"
    );
    let conc = tests
        .iter()
        .find(|t| t["test"] == "concurrent_connections" && t["target"] == "switchyard")
        .expect("concurrency cell");
    assert!(conc["outcome"]["runs"][0]["memory_per_connection_bytes"].as_f64().is_some(), "{conc}");
    let _ = std::fs::remove_dir_all(&out);
}

/// `--peers switchyard=PATH`: a second switchyard build measured in the same run, as the
/// peer `switchyard-b`, with the same configuration on its own port (here the same binary:
/// the test checks the plumbing, not a difference).
#[test]
fn a_second_switchyard_build_is_measured_as_a_peer() {
    let _bench = crate::common::one_bench_at_a_time();
    let out = crate::common::temp_dir("bench-second-build");
    let _ = std::fs::remove_dir_all(&out);
    let bin = env!("CARGO_BIN_EXE_switchyard");
    let status = Command::new(bin)
        .args(["bench", "--quick", "--only", "l7-keepalive-rps", "--sizes", "128", "--syscalls", "off"])
        .arg("--peers")
        .arg(format!("switchyard={bin}"))
        .arg("--out")
        .arg(&out)
        .status()
        .expect("run switchyard bench");
    assert!(status.success(), "switchyard bench with a second build failed: {status}");
    let text = std::fs::read_to_string(out.join("results.json")).expect("read results.json");
    let r: Value = serde_json::from_str(&text).expect("results.json parses");
    let second = r["targets"].as_array().expect("targets").iter().find(|t| t["name"] == "switchyard-b");
    let version = second.expect("a switchyard-b target")["version"].as_str().unwrap_or_default();
    assert!(version.contains(bin), "its version names the binary: {version}");
    let tests = r["tests"].as_array().expect("tests");
    for target in ["switchyard", "switchyard-b"] {
        let cell = tests
            .iter()
            .find(|t| t["test"] == "l7_keepalive_rps" && t["target"] == target && t["size"] == 128)
            .unwrap_or_else(|| panic!("{target} L7 keep-alive 128 B cell"));
        assert_eq!(cell["outcome"]["status"], "measured", "{cell}");
        let run = &cell["outcome"]["runs"][0];
        assert!(run["requests"].as_u64().unwrap_or(0) > 0 && run["errors"] == 0, "{target}: {run}");
    }
    let md = std::fs::read_to_string(out.join("report.md")).expect("read report.md");
    assert!(md.contains("switchyard-b"), "the report names the second build");
    let _ = std::fs::remove_dir_all(&out);
}
