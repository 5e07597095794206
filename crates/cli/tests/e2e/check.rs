//! `switchyard check -c FILE`: exit 0 on a valid file, exit 1 with every problem listed as
//! `FILE:LINE:COL: error: message` (plus `  hint:` lines) on an invalid one.

use crate::common;

use common::{check, write_temp};

const VALID: &str = r#"
[[service]]
name = "web"
listen = ["127.0.0.1:18999"]
pool = "main"
rules = [{ path_suffix = ".png", pool = "main" }]

[[pool]]
name = "main"
servers = [{ address = "127.0.0.1:19999" }]
"#;

/// Two independent mistakes on known lines: an unknown pool (line 5) and a misspelt key
/// (line 9).
const INVALID: &str = r#"
[[service]]
name = "web"
listen = ["127.0.0.1:18999"]
pool = "mian"

[[pool]]
name = "main"
balanse = "round-robin"
servers = [{ address = "127.0.0.1:19999" }]
"#;

#[test]
fn valid_file_exits_0() {
    let path = write_temp("check", "valid.toml", VALID);
    let (code, stdout, stderr) = check(&path);
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("ok"), "{stdout}");
    assert!(!stderr.contains("error:"), "{stderr}");
}

#[test]
fn invalid_file_exits_1_with_located_errors_and_hints() {
    let path = write_temp("check", "invalid.toml", INVALID);
    let file = path.display().to_string();
    let (code, stdout, stderr) = check(&path);
    assert_eq!(code, 1, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let errors: Vec<&str> =
        stderr.lines().filter(|l| l.starts_with(&format!("{file}:")) && l.contains(": error: ")).collect();
    assert_eq!(errors.len(), 2, "every problem at once, each on its own line:\n{stderr}");
    for line in &errors {
        // FILE:LINE:COL: error: message, with LINE and COL numbers from 1.
        let rest = &line[file.len() + 1..];
        let mut parts = rest.splitn(3, ':');
        let l: u32 = parts.next().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no line in {line:?}"));
        let c: u32 = parts.next().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no column in {line:?}"));
        assert!(l >= 1 && c >= 1, "{line}");
        assert!(parts.next().is_some_and(|m| m.starts_with(" error: ")), "{line}");
    }
    assert!(
        errors.iter().any(|l| l.starts_with(&format!("{file}:5:")) && l.contains("mian")),
        "unknown pool on line 5:\n{stderr}"
    );
    assert!(
        errors.iter().any(|l| l.starts_with(&format!("{file}:9:")) && l.contains("balanse")),
        "unknown key on line 9:\n{stderr}"
    );
    let hints: Vec<&str> = stderr.lines().filter(|l| l.starts_with("  hint:")).collect();
    assert!(hints.iter().any(|h| h.contains("`main`")), "did-you-mean hint for the pool:\n{stderr}");
    assert!(hints.iter().any(|h| h.contains("`balance`")), "did-you-mean hint for the key:\n{stderr}");
}

#[test]
fn toml_syntax_error_exits_1_with_a_location() {
    let path = write_temp("check", "syntax.toml", "[[service]]\nname = \"web\nlisten = 1\n");
    let file = path.display().to_string();
    let (code, _, stderr) = check(&path);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.lines().any(|l| l.starts_with(&format!("{file}:")) && l.contains(": error: ")), "{stderr}");
}

#[test]
fn missing_file_exits_1() {
    let path = std::env::temp_dir().join("switchyard-e2e-no-such-file.toml");
    let (code, _, stderr) = check(&path);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("error:"), "{stderr}");
}

/// Health check, passive checking and slow start mistakes, on the lines named below.
const HEALTH: &str = r#"
[[pool]]
name = "main"
servers = [{ address = "127.0.0.1:19999", slow_start = "2h" }]
health_check = { type = "ping" }
passive = { failures = 0 }

[[pool]]
name = "web"
servers = [{ address = "127.0.0.1:19998" }]
health_check = { type = "tcp", path = "/healthz" }

[[pool]]
name = "api"
servers = [{ address = "127.0.0.1:19997" }]
health_check = { type = "http", expect_status = ["2xx", 700] }

[[service]]
name = "web"
listen = ["127.0.0.1:18999"]
pool = "main"
rules = [{ path_prefix = "/web", pool = "web" }, { path_prefix = "/api", pool = "api" }]
"#;

#[test]
fn health_check_passive_and_slow_start_mistakes_are_located() {
    let path = write_temp("check", "health.toml", HEALTH);
    let file = path.display().to_string();
    let (code, stdout, stderr) = check(&path);
    assert_eq!(code, 1, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let error_at = |line: u32, text: &str| {
        stderr.lines().any(|l| l.starts_with(&format!("{file}:{line}:")) && l.contains(": error: ") && l.contains(text))
    };
    assert!(error_at(4, "`slow_start` must be at most 1h"), "{stderr}");
    assert!(error_at(5, "unknown health check type `ping`"), "{stderr}");
    assert!(error_at(6, "`failures` must be between 1 and 1000, not 0"), "{stderr}");
    assert!(error_at(11, "`path` does not apply to a health check of type `tcp`"), "{stderr}");
    assert!(error_at(16, "`700` is not a status"), "{stderr}");
    assert_eq!(stderr.lines().filter(|l| l.contains(": error: ")).count(), 5, "{stderr}");
    assert!(stderr.contains("hint: `path` belongs to type = \"http\""), "{stderr}");
}

/// A gRPC health check with a bad service name, and one with an HTTP key.
const GRPC_CHECK: &str = r#"
[[pool]]
name = "orders"
servers = [{ address = "127.0.0.1:19996" }]
health_check = { type = "grpc", service = "shop Orders" }

[[pool]]
name = "carts"
servers = [{ address = "127.0.0.1:19995" }]
health_check = { type = "grpc", expect_status = [200] }

[[service]]
name = "web"
listen = ["127.0.0.1:18998"]
pool = "orders"
rules = [{ path_prefix = "/carts", pool = "carts" }]
"#;

#[test]
fn grpc_health_check_mistakes_are_located_with_a_hint() {
    let path = write_temp("check", "grpc.toml", GRPC_CHECK);
    let file = path.display().to_string();
    let (code, stdout, stderr) = check(&path);
    assert_eq!(code, 1, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stderr.contains(&format!("{file}:5:43: error: `service` must be a gRPC service name")), "{stderr}");
    assert!(stderr.contains("hint: write service = \"my.package.MyService\""), "{stderr}");
    assert!(
        stderr
            .contains(&format!("{file}:10:49: error: `expect_status` does not apply to a health check of type `grpc`")),
        "{stderr}"
    );
    assert_eq!(stderr.lines().filter(|l| l.contains(": error: ")).count(), 2, "{stderr}");
}

/// `--version` names the build beside the version (the build profile, and whether the
/// build was profile-guided): benchmark reports record that line.
#[test]
fn the_version_names_the_build() {
    let bin = std::path::Path::new(common::binary());
    let out = std::process::Command::new(bin).arg("--version").output().expect("run --version");
    assert!(out.status.success());
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    // Test builds put the binary in target/<profile>/, the folder the build script reads.
    let profile = bin.parent().and_then(|p| p.file_name()).and_then(|n| n.to_str()).expect("profile folder");
    assert_eq!(line, format!("switchyard {} ({profile})", env!("CARGO_PKG_VERSION")));
}
