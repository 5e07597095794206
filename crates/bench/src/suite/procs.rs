//! Child processes (origins and proxies) and what /proc says about them.
//!
//! Every process is started pinned with `taskset -c CPU` (which execs the program, so the
//! PID is the program's), its output to a log file, and stopped by its PID only: SIGTERM,
//! a second SIGTERM (switchyard exits at once on the second), then SIGKILL for it and any
//! descendants it left (NGINX workers). CPU time is `utime + stime` of the process and all
//! its descendants, every thread included (the /proc/PID/stat figures are per thread
//! group), also read apart (user, kernel); memory is the sum of their `VmRSS`.

use std::fs::File;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// PIDs of every child started and not yet stopped, so an interrupted run
/// can still stop what it started ([`stop_all`]).
static LIVE: Mutex<Vec<u32>> = Mutex::new(Vec::new());

fn live() -> std::sync::MutexGuard<'static, Vec<u32>> {
    LIVE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Stops every child still running (SIGTERM, then SIGKILL after 2 s), with
/// their descendants. For signal handlers: `Drop` does not run on exit.
pub fn stop_all() {
    let pids: Vec<u32> = live().drain(..).collect();
    let mut all = Vec::new();
    for pid in pids {
        all.extend(descendants(pid));
        all.push(pid);
    }
    for &pid in &all {
        signal(pid, "TERM");
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline && all.iter().any(|p| running(*p)) {
        std::thread::sleep(Duration::from_millis(20));
    }
    for &pid in all.iter().filter(|p| running(**p)) {
        signal(pid, "KILL");
    }
}

/// Whether a PID is a live (not zombie) process.
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')))
}

/// A started child process, stopped when dropped.
pub struct Proc {
    /// Name used in messages and log file names.
    pub name: String,
    child: Child,
    stopped: bool,
}

impl Proc {
    /// Starts `program args` pinned to `cpu`, stdout and stderr appended to `log`.
    pub fn spawn(name: &str, cpu: usize, program: &Path, args: &[String], log: &Path) -> anyhow::Result<Proc> {
        Proc::spawn_split(name, cpu, program, args, log, log)
    }

    /// [`Proc::spawn`] on a set of cores, a `taskset` list such as `0-3` or `4,6`.
    pub fn spawn_on(name: &str, cpus: &str, program: &Path, args: &[String], log: &Path) -> anyhow::Result<Proc> {
        Proc::start(name, cpus, program, args, log, log)
    }

    /// [`Proc::spawn`] with stdout appended to `stdout` and stderr to `stderr`
    /// (the same file when both paths are equal).
    pub fn spawn_split(
        name: &str,
        cpu: usize,
        program: &Path,
        args: &[String],
        stdout: &Path,
        stderr: &Path,
    ) -> anyhow::Result<Proc> {
        Proc::start(name, &cpu.to_string(), program, args, stdout, stderr)
    }

    fn start(
        name: &str,
        cpus: &str,
        program: &Path,
        args: &[String],
        stdout: &Path,
        stderr: &Path,
    ) -> anyhow::Result<Proc> {
        let append =
            |p: &Path| File::options().create(true).append(true).open(p).with_context(|| format!("{}", p.display()));
        let out = append(stdout)?;
        let err = if stderr == stdout { out.try_clone()? } else { append(stderr)? };
        let child = Command::new("taskset")
            .arg("-c")
            .arg(cpus)
            .arg(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("cannot start {name} ({})", program.display()))?;
        live().push(child.id());
        Ok(Proc { name: name.to_string(), child, stopped: false })
    }

    /// The process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits until `addr` accepts TCP connections (or, for UDP targets with `udp`, just
    /// until the process has been up briefly), failing if the process exits first.
    pub fn wait_ready(&mut self, addr: SocketAddr, udp: bool, log: &Path) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if !self.alive() {
                bail!("{} exited during start-up: {}", self.name, tail(log, 5));
            }
            if udp {
                std::thread::sleep(Duration::from_millis(300));
                if self.alive() {
                    return Ok(());
                }
                continue;
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{} did not listen on {addr} within 10 s: {}", self.name, tail(log, 5));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// This process and its descendants.
    pub fn tree(&self) -> Vec<u32> {
        let mut pids = vec![self.pid()];
        pids.extend(descendants(self.pid()));
        pids
    }

    /// CPU seconds (user + system) of the process and its descendants.
    pub fn cpu_s(&self) -> f64 {
        let (user, system) = self.cpu_split_s();
        user + system
    }

    /// CPU seconds of the process and its descendants, apart: (user, system).
    pub fn cpu_split_s(&self) -> (f64, f64) {
        let (mut user, mut system) = (0u64, 0u64);
        for (_, u, s) in self.tree().iter().filter_map(|p| stat_split(*p)) {
            user += u;
            system += s;
        }
        (user as f64 / clk_tck(), system as f64 / clk_tck())
    }

    /// Resident memory (VmRSS) of the process and its descendants, bytes.
    pub fn rss_bytes(&self) -> u64 {
        self.tree()
            .iter()
            .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
            .filter_map(|s| parse_vmrss(&s))
            .sum()
    }

    /// Stops the process by PID: SIGTERM, again after 1 s, SIGKILL after 3 s (descendants too).
    pub fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        let pid = self.pid();
        live().retain(|&p| p != pid);
        let kids = descendants(pid);
        let deadline = Instant::now() + Duration::from_secs(3);
        let mut second = Instant::now() + Duration::from_secs(1);
        signal(self.pid(), "TERM");
        while self.alive() && Instant::now() < deadline {
            if Instant::now() > second {
                signal(self.pid(), "TERM");
                second = deadline;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if self.alive() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        for k in kids {
            if std::fs::metadata(format!("/proc/{k}")).is_ok() {
                signal(k, "KILL");
            }
        }
    }

    /// Kills the process at once (SIGKILL), as a crash would: the kernel closes its
    /// listening socket and its connections. Nothing happens once it is stopped.
    pub fn kill(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        let pid = self.pid();
        live().retain(|&p| p != pid);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Sends a signal to one PID with kill(1) (the crate forbids `unsafe`, so no libc).
pub fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The last `n` lines of a log file, joined with ` | `.
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

/// Clock ticks per second (`getconf CLK_TCK`, 100 when it cannot be asked).
pub fn clk_tck() -> f64 {
    static TCK: OnceLock<f64> = OnceLock::new();
    *TCK.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse::<f64>().ok())
            .filter(|t| *t > 0.0)
            .unwrap_or(100.0)
    })
}

/// Parses /proc/PID/stat: (parent PID, utime + stime in ticks). The command name (field 2)
/// may contain spaces and parentheses, so fields are counted from the last `)`.
pub fn parse_stat(stat: &str) -> Option<(u32, u64)> {
    parse_stat_split(stat).map(|(ppid, utime, stime)| (ppid, utime + stime))
}

/// Parses /proc/PID/stat: (parent PID, utime, stime), times in ticks.
pub fn parse_stat_split(stat: &str) -> Option<(u32, u64, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] is field 3 (state): ppid is field 4, utime 14, stime 15.
    let ppid = f.get(1)?.parse().ok()?;
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some((ppid, utime, stime))
}

/// (parent PID, utime, stime) of one process, ticks.
fn stat_split(pid: u32) -> Option<(u32, u64, u64)> {
    parse_stat_split(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Parses `VmRSS:   1234 kB` from /proc/PID/status, in bytes.
pub fn parse_vmrss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// All descendants of `root` (a scan of /proc; never a lookup by name).
pub fn descendants(root: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            if let Some((ppid, _)) =
                std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().and_then(|s| parse_stat(&s))
            {
                parents.push((pid, ppid));
            }
        }
    }
    let mut set = vec![root];
    let mut changed = true;
    while changed {
        changed = false;
        for &(pid, ppid) in &parents {
            if set.contains(&ppid) && !set.contains(&pid) {
                set.push(pid);
                changed = true;
            }
        }
    }
    set.remove(0);
    set
}

/// Busy and total ticks of one core from /proc/stat.
pub fn core_ticks(cpu: usize) -> Option<(u64, u64)> {
    parse_core_ticks(&std::fs::read_to_string("/proc/stat").ok()?, cpu)
}

/// Parses the `cpuN` line of /proc/stat: (busy, total) ticks; idle and iowait are not busy.
pub fn parse_core_ticks(stat: &str, cpu: usize) -> Option<(u64, u64)> {
    let name = format!("cpu{cpu}");
    let line = stat.lines().find(|l| l.split_whitespace().next() == Some(name.as_str()))?;
    let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    if v.len() < 8 {
        return None;
    }
    let idle = v[3] + v[4];
    let total: u64 = v.iter().take(8).sum();
    Some((total - idle, total))
}

/// Pins every thread of this process to `cpu` (`taskset -acp`); threads started later
/// inherit it. Returns taskset's complaint when it fails.
pub fn pin_self(cpu: usize) -> io::Result<()> {
    pin_self_to(&cpu.to_string())
}

/// [`pin_self`] to a set of cores, a `taskset` list such as `8-11`.
pub fn pin_self_to(cpus: &str) -> io::Result<()> {
    let out = Command::new("taskset")
        .args(["-acp", cpus, &std::process::id().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_string()))
    }
}

/// First line of `program args` output (stdout, else stderr); `None` if it cannot run.
pub fn version_of(program: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    let text = if out.stdout.is_empty() { out.stderr } else { out.stdout };
    let line = String::from_utf8_lossy(&text).lines().next()?.trim().to_string();
    (!line.is_empty()).then_some(line)
}

/// Finds a program on `PATH` (and the sbin folders, where Debian puts haproxy and nginx).
pub fn which(program: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"])
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file());
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_count_from_the_last_parenthesis() {
        let s = "1234 (nginx: worker (x) y) S 1200 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 1 0";
        assert_eq!(parse_stat(s), Some((1200, 325)));
        assert_eq!(parse_stat_split(s), Some((1200, 250, 75)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn own_stat_parses() {
        let own = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
        let (ppid, _) = parse_stat(&own).expect("parses");
        assert!(ppid > 0);
    }

    #[test]
    fn vmrss_in_bytes() {
        let s = "Name:\tx\nVmPeak:\t  9000 kB\nVmRSS:\t    4096 kB\nThreads: 3\n";
        assert_eq!(parse_vmrss(s), Some(4096 * 1024));
        assert_eq!(parse_vmrss("Name: x\n"), None);
    }

    #[test]
    fn core_ticks_exclude_idle_and_iowait() {
        let s = "cpu  1 2 3 4 5 6 7 8 0 0\ncpu0 10 0 10 100 5 1 1 0 0 0\ncpu1 1 1 1 1 1 1 1 1 0 0\n";
        assert_eq!(parse_core_ticks(s, 0), Some((22, 127)));
        assert_eq!(parse_core_ticks(s, 1), Some((6, 8)));
        assert_eq!(parse_core_ticks(s, 7), None);
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        let dir = std::env::temp_dir().join(format!("sy-tail-{}", std::process::id()));
        std::fs::write(&dir, "a\nb\n\nc\n").expect("write");
        assert_eq!(tail(&dir, 2), "b | c");
        let _ = std::fs::remove_file(&dir);
    }
}
