//! HTTP/2 conformance with h2spec (the public suite, which we did not write): every case
//! against an h2c listener (an `http` service, prior knowledge) and a TLS listener (an
//! `https` service, ALPN `h2`), in front of an HTTP/1.1 origin.
//!
//! h2spec comes from `go install` (scripts/test.sh puts it in `.tools/bin` when Go is
//! present; `H2SPEC` may name another binary). Without it each test says it skipped.
//! A failure lists the failing cases with what h2spec expected and saw. One case is
//! known to fail on h2c (see [`KNOWN_H2C`]); it is asserted to fail, so a fix shows.

use crate::common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::pki::Pki;
use common::{proxy_addr, temp_dir, wait_exit, workspace_root, Origin, Proxy};

/// Seconds h2spec waits for an expected frame before a case fails: generous, for a
/// loaded two-core machine (a conforming server answers at once).
const CASE_TIMEOUT_S: &str = "5";

/// The h2spec binary: `H2SPEC`, else the project's `.tools/bin/h2spec`, else `PATH`.
fn h2spec() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("H2SPEC") {
        return Some(PathBuf::from(path));
    }
    let local = workspace_root().join(".tools/bin/h2spec");
    if local.is_file() {
        return Some(local);
    }
    let found = Command::new("h2spec").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status();
    found.is_ok_and(|s| s.success()).then(|| PathBuf::from("h2spec"))
}

/// Cases known to fail on a listener, as (h2spec section, case title), with why. A known
/// case that passes fails the test too, so this list cannot go stale.
///
/// `http2/3.5` #2 on h2c: the listener serves HTTP/1.1 as well, so bytes that are not the
/// HTTP/2 preface are an HTTP/1.1 request; h2spec's "INVALID CONNECTION PREFACE" line gets
/// the 400 that RFC 9112 asks for, then the connection closes, where h2spec wants the
/// connection closed with nothing written. An HTTP/2-only listener would pass it.
const KNOWN_H2C: &[(&str, &str)] = &[("http2/3.5", "Sends invalid connection preface")];

/// (section, case) of every failed case of an h2spec JUnit report.
fn failed_cases(junit: &str) -> Vec<(String, String)> {
    let attr = |piece: &str, name: &str| {
        let start = piece.find(&format!("{name}=\"")).map(|i| i + name.len() + 2)?;
        let len = piece[start..].find('"')?;
        Some(piece[start..start + len].to_string())
    };
    junit
        .split("<testcase ")
        .skip(1)
        .filter_map(|piece| {
            let piece = piece.split("</testcase>").next().unwrap_or(piece);
            let failed = piece.contains("<error") || piece.contains("<failure");
            failed.then(|| Some((attr(piece, "package")?, attr(piece, "classname")?))).flatten()
        })
        .collect()
}

/// Runs every h2spec case against `addr`; panics listing the failures beyond `known`.
fn conform(h2spec: &PathBuf, addr: SocketAddr, tls: bool, known: &[(&str, &str)], proxy: &Proxy) {
    let dir = temp_dir("h2spec");
    let (out_path, junit_path) = (dir.join("h2spec.out"), dir.join("junit.xml"));
    let out = std::fs::File::create(&out_path).expect("h2spec output file");
    let mut cmd = Command::new(h2spec);
    cmd.args(["-h", "127.0.0.1", "-p", &addr.port().to_string(), "-o", CASE_TIMEOUT_S, "-j"]).arg(&junit_path);
    if tls {
        cmd.args(["-t", "-k"]);
    }
    let mut child =
        cmd.stdin(Stdio::null()).stdout(out.try_clone().expect("clone")).stderr(out).spawn().expect("spawn h2spec");
    // 146 cases, each bounded by CASE_TIMEOUT_S: a hung run is a failure, not a hang.
    if wait_exit(&mut child, Duration::from_secs(300)).is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let text = std::fs::read_to_string(&out_path).unwrap_or_default();
    let summary = text.lines().rev().find(|l| l.contains(" tests, ")).unwrap_or("no summary line").trim();
    let listener = if tls { "TLS (ALPN h2)" } else { "h2c" };
    let junit = std::fs::read_to_string(&junit_path).unwrap_or_default();
    assert!(junit.contains("<testcase "), "h2spec on the {listener} listener ran no case:\n{text}");
    let failed = failed_cases(&junit);
    let unexpected: Vec<_> = failed.iter().filter(|(s, c)| !known.contains(&(s.as_str(), c.as_str()))).collect();
    let fixed: Vec<_> = known.iter().filter(|(s, c)| !failed.iter().any(|(fs, fc)| fs == s && fc == c)).collect();
    let details = text.split_once("Failures:").map_or("", |(_, rest)| rest);
    let details = details.split("Finished in").next().unwrap_or("").trim();
    let log = proxy.log();
    let tail: Vec<&str> = log.lines().rev().take(30).collect();
    assert!(
        unexpected.is_empty(),
        "h2spec on the {listener} listener: {summary}\nfailing cases: {unexpected:?}\n\n{details}\n\n\
         proxy log (last lines, newest first):\n{}",
        tail.join("\n")
    );
    assert!(fixed.is_empty(), "h2spec on the {listener} listener: {fixed:?} pass now: take them off the known list");
    eprintln!("h2spec on the {listener} listener: {summary} (known: {known:?})");
}

/// An `http` service (h2c) or an `https` one on a fresh port, before an HTTP/1.1 origin.
fn proxy(origin: &Origin, tls: bool) -> Proxy {
    let listen = proxy_addr();
    let mut service = String::new();
    if tls {
        let pki = Pki::new("h2spec CA");
        let (cert, key) = pki.leaf(&["localhost", "127.0.0.1"]);
        let dir = temp_dir("h2spec-tls");
        let (cert_path, key_path) = (dir.join("front.crt"), dir.join("front.key"));
        std::fs::write(&cert_path, cert).expect("write certificate");
        std::fs::write(&key_path, key).expect("write key");
        service = format!(
            "mode = \"https\"\ntls = {{ certificates = [{{ certificate = \"{}\", key = \"{}\" }}] }}\n",
            cert_path.display(),
            key_path.display()
        );
    }
    let config = format!(
        "workers = 1\ndrain_timeout = \"1s\"\n\n[[service]]\nname = \"h2spec\"\nlisten = [\"{listen}\"]\npool = \"main\"\n\
         {service}\n[[pool]]\nname = \"main\"\nservers = [{{ address = \"{}\" }}]\n",
        origin.addr
    );
    Proxy::start(&config, listen)
}

fn run(tls: bool, known: &[(&str, &str)]) {
    let Some(h2spec) = h2spec() else {
        eprintln!("h2spec is not installed: skipped (scripts/test.sh installs it into .tools/bin when Go is present)");
        return;
    };
    let origin = Origin::start("h2spec");
    let proxy = proxy(&origin, tls);
    conform(&h2spec, proxy.addr, tls, known, &proxy);
}

#[test]
fn h2spec_passes_on_an_h2c_listener() {
    run(false, KNOWN_H2C);
}

#[test]
fn h2spec_passes_on_a_tls_listener() {
    run(true, &[]);
}
