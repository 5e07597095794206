//! Network namespaces for the end-to-end tests that need several hosts
//! (high availability, transparent mode): the test creates them and removes
//! them on drop ([`Net`]), runs processes inside them that stop on drop
//! ([`Proc`]), and says why it cannot run ([`unavailable`]) instead of failing
//! where it is not root or namespaces are missing.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{sigterm, wait_exit};

/// Runs a command; panics with its output when it fails.
pub fn sh(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(out.status.success(), "{args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// Runs a command with `input` on its stdin; panics with its output when it fails.
pub fn sh_input(args: &[&str], input: &str) {
    use std::io::Write;
    let mut child = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input.as_bytes()).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    }
    let out = child.wait_with_output().unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(out.status.success(), "{args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// Whether `cmd arg` runs and succeeds.
pub fn have(cmd: &str, arg: &str) -> bool {
    Command::new(cmd).arg(arg).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Whether the command runs and succeeds (its output discarded).
pub fn have_args(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0")))
        .unwrap_or(false)
}

/// Why this machine cannot run a namespace test, if it cannot: not root, a
/// tool of `tools` missing (`(command, version argument, package)`), or no
/// network namespaces.
pub fn unavailable(tools: &[(&str, &str, &str)]) -> Option<String> {
    if !is_root() {
        return Some("not root".into());
    }
    for (cmd, arg, package) in tools {
        if !have(cmd, arg) {
            return Some(format!("{cmd} is not installed (apt-get install {package})"));
        }
    }
    let probe = format!("syprobe{}", std::process::id());
    if !have_args(&["ip", "netns", "add", &probe]) {
        return Some("cannot create network namespaces".into());
    }
    let _ = have_args(&["ip", "netns", "del", &probe]);
    None
}

/// The namespaces; deleted on drop (after the processes, which are dropped first).
pub struct Net {
    /// Names of the namespaces created so far.
    pub ns: Vec<String>,
}

impl Net {
    /// No namespace yet.
    pub fn new() -> Net {
        Net { ns: Vec::new() }
    }

    /// The namespace name of `role`, unique to this test process.
    pub fn name(&self, role: &str) -> String {
        format!("sy{role}{}", std::process::id())
    }

    /// Creates the namespace of `role` with its loopback up; returns its name.
    pub fn add(&mut self, role: &str) -> String {
        let ns = self.name(role);
        sh(&["ip", "netns", "add", &ns]);
        self.ns.push(ns.clone());
        sh(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
        ns
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = Command::new("ip").args(["netns", "del", ns]).stderr(Stdio::null()).status();
        }
    }
}

/// A process in a namespace, stopped on drop (SIGTERM, then SIGKILL).
pub struct Proc {
    /// The `ip netns exec` child (it execs the command: same PID).
    pub child: Child,
    log: PathBuf,
}

impl Proc {
    /// Starts `args` in namespace `ns`, stdout and stderr to `log`.
    pub fn spawn(ns: &str, args: &[&str], log: PathBuf) -> Proc {
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .args(args)
            .env("SWITCHYARD_LOG", "info")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {args:?}: {e}"));
        Proc { child, log }
    }

    /// What the process wrote so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL, and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        sigterm(self.child.id());
        if wait_exit(&mut self.child, Duration::from_secs(5)).is_none() {
            self.kill();
        }
    }
}
