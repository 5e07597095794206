//! The access log end to end: one JSON line per request with the server and
//! timings, failures with their reason, the combined format, and reopening
//! on SIGUSR1 after a rotation by rename.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::*;

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_string).collect()
}

fn wait_lines(path: &Path, n: usize) -> Vec<String> {
    wait_for(&format!("{n} access log lines in {}", path.display()), || {
        let l = lines(path);
        (l.len() >= n).then_some(l)
    })
}

#[test]
fn json_lines_name_the_server_and_the_reason_and_survive_rotation() {
    let origin = Origin::start("o");
    let dir = temp_dir("access-log");
    let log = dir.join("access.log");
    let listen = proxy_addr();
    let extra = format!(
        "\n[access_log]\npath = \"{}\"\nformat = \"json\"\n\n[[pool]]\nname = \"dead\"\nservers = [{{ address = \"{}\", name = \"gone\" }}]\n",
        log.display(),
        dead_addr()
    );
    let rules = "rules = [{ path_prefix = \"/dead\", pool = \"dead\" }]";
    let proxy = Proxy::start(&(simple_config(listen, &[origin.addr], rules) + &extra), listen);

    let ok = Client::connect(listen).request("GET", "/ok?size=300", &[("user-agent", "tester/1 \"quoted\"")]);
    assert_eq!(ok.status, 200);
    assert_eq!(proxy.get("/dead").status, 502);
    let l = wait_lines(&log, 2);
    let first: serde_json::Value = serde_json::from_str(&l[0]).expect("a JSON line");
    assert_eq!(first["service"], "web");
    assert_eq!(first["method"], "GET");
    assert_eq!(first["uri"], "/ok?size=300");
    assert_eq!(first["status"], 200);
    assert_eq!(first["pool"], "main");
    assert_eq!(first["user_agent"], "tester/1 \"quoted\"");
    assert!(first["bytes_out"].as_u64().unwrap_or(0) > 300, "{first}");
    assert!(first["total_us"].as_u64().is_some() && first["reason"].is_null(), "{first}");
    assert!(first["time"].as_str().is_some_and(|t| t.ends_with('Z')), "{first}");
    let second: serde_json::Value = serde_json::from_str(&l[1]).expect("a JSON line");
    assert_eq!(second["status"], 502);
    assert_eq!(second["reason"], "connect-failed");
    assert_eq!(second["side"], "server");
    assert_eq!(second["server"], "gone");

    // Rotation: rename, SIGUSR1, and the next lines go to a new file.
    let rotated = dir.join("access.log.1");
    std::fs::rename(&log, &rotated).expect("rename");
    let _ = Command::new("kill").arg("-USR1").arg(proxy.pid().to_string()).status();
    wait_for("the reopen", || proxy.log().contains("reopening the access log").then_some(()));
    wait_for("the new file", || {
        assert_eq!(proxy.get("/after").status, 200);
        lines(&log).iter().any(|l| l.contains("\"/after\"")).then_some(())
    });
    assert_eq!(lines(&rotated).len(), 2, "the rotated file keeps its lines");
}

#[test]
fn the_combined_format_reads_like_apache() {
    let origin = Origin::start("o");
    let log = temp_dir("access-log-combined").join("access.log");
    let listen = proxy_addr();
    let extra = format!("\n[access_log]\npath = \"{}\"\nformat = \"combined\"\n", log.display());
    let proxy = Proxy::start(&(simple_config(listen, &[origin.addr], "") + &extra), listen);
    let response = Client::connect(listen).request("GET", "/x?size=10", &[("referer", "http://r/")]);
    assert_eq!(response.status, 200);
    let line = wait_lines(&log, 1).remove(0);
    assert!(line.starts_with("127.0.0.1 - - ["), "{line}");
    assert!(line.contains("\"GET /x?size=10 HTTP/1.1\" 200 "), "{line}");
    assert!(line.contains("\"http://r/\""), "{line}");
    assert!(line.contains("service=web server=main/"), "{line}");
    drop(proxy);
}
