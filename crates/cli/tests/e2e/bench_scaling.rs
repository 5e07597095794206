//! Smoke test of `switchyard bench scaling` with the one worker count a 2-core machine
//! allows: the report files exist and hold a measured row per target (HAProxy and NGINX
//! where they are installed, a "not measured" line with the reason where not), and a
//! worker count that leaves no core for the generator is refused; with `--rounds 2`, a
//! row per round and one summary cell over them. It checks structure, not speed.

use std::process::Command;

use serde_json::Value;

#[test]
fn scaling_writes_a_row_per_target_and_worker_count() {
    let _bench = crate::common::one_bench_at_a_time();
    let out = crate::common::temp_dir("bench-scaling");
    let _ = std::fs::remove_dir_all(&out);
    let output = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["bench", "scaling", "--workers", "1", "--duration", "1", "--connections-per-worker", "8"])
        .args(["--peers", "haproxy,nginx", "--out"])
        .arg(&out)
        .output()
        .expect("run switchyard bench scaling");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "bench scaling failed: {}{stdout}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("## Requests per second (efficiency)"), "{stdout}");

    let r: Value = serde_json::from_str(&std::fs::read_to_string(out.join("scaling.json")).expect("scaling.json"))
        .expect("scaling.json parses");
    assert_eq!(r["layout"]["proxy"], serde_json::json!([0]), "{r}");
    let rows = r["rows"].as_array().expect("rows");
    let not_measured = r["not_measured"].as_array().expect("not_measured");
    assert_eq!(rows.len() + not_measured.len(), 3, "one row or one reason per target: {r}");
    for missing in not_measured {
        let why = missing[1].as_str().unwrap_or_default();
        assert!(why.contains("not installed"), "{missing}");
        eprintln!("{} not measured here: {why}", missing[0]);
    }
    assert_eq!(rows[0]["target"], "switchyard", "{r}");
    for row in rows {
        assert_eq!((row["workers"].as_u64(), row["connections"].as_u64()), (Some(1), Some(8)), "{row}");
        assert!(row["requests"].as_u64().unwrap_or(0) > 0 && row["errors"] == 0, "{row}");
        assert!(row["kernel_us_per_request"].as_f64().unwrap_or(0.0) > 0.0, "{row}");
        assert_eq!(row["efficiency"].as_f64(), Some(1.0), "the first row is the baseline: {row}");
    }
    let config = std::fs::read_to_string(out.join("configs/switchyard-1.conf")).expect("switchyard config");
    assert!(config.contains("workers = 1\n"), "{config}");
    assert!(out.join("scaling.md").is_file());

    // One request per connection: each one asks the proxy to close, and every request is
    // a new connection.
    let cps = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["bench", "scaling", "--workers", "1", "--duration", "1", "--connections-per-worker", "4"])
        .args(["--per-connection", "--rounds", "2", "--out"])
        .arg(out.join("cps"))
        .output()
        .expect("run switchyard bench scaling --per-connection");
    assert!(cps.status.success(), "{}", String::from_utf8_lossy(&cps.stderr));
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("cps/scaling.json")).expect("cps scaling.json"))
            .expect("parses");
    assert!(r["test"].as_str().unwrap_or_default().contains("one request per connection"), "{r}");
    let row = &r["rows"][0];
    assert!(row["requests"].as_u64().unwrap_or(0) > 0 && row["errors"] == 0, "{row}");
    let (rps, cps) = (row["rps"].as_f64().unwrap_or(0.0), row["cps"].as_f64().unwrap_or(-1.0));
    assert!((rps - cps).abs() <= rps * 0.05 + 5.0, "a connection per request: {row}");
    // Two rounds: a row each, and one summary cell whose median lies between them.
    let rounds: Vec<u64> = r["rows"].as_array().expect("rows").iter().filter_map(|r| r["round"].as_u64()).collect();
    assert_eq!(rounds, [1, 2], "{r}");
    let cell = &r["summary"][0];
    assert_eq!((cell["runs"].as_u64(), cell["workers"].as_u64()), (Some(2), Some(1)), "{r}");
    let (lo, mid, hi) = (cell["rps_min"].as_f64(), cell["rps"].as_f64(), cell["rps_max"].as_f64());
    assert!(lo <= mid && mid <= hi && lo > Some(0.0), "{cell}");

    // More workers than the machine can give the proxy and still load it: refused, said why.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let too_many = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["bench", "scaling", "--workers", &cores.to_string(), "--duration", "1", "--out"])
        .arg(out.join("refused"))
        .output()
        .expect("run switchyard bench scaling");
    assert!(!too_many.status.success());
    let err = String::from_utf8_lossy(&too_many.stderr);
    assert!(err.contains("cores"), "{err}");
    let _ = std::fs::remove_dir_all(&out);
}
