//! Counting a proxy's system calls over a short extra run, with `perf stat` or `strace`.
//!
//! Counting is never done during a measured run: `strace` stops the proxy at every call
//! (it runs several times slower under it) and even `perf`'s tracepoints cost a little.
//! After a cell's measured runs the runner attaches a counter to the proxy's process tree
//! ([`Counter::attach`]), runs the same load once more with no warm-up, and detaches
//! ([`Counter::finish`]): the counts cover the whole run, so dividing by everything the
//! generator completed gives calls per request and per connection.
//!
//! `perf stat` counts the `syscalls:sys_enter_*` tracepoints of [`NAMED`] one by one and
//! every call through `raw_syscalls:sys_enter`; it is attached with a `sleep` as its
//! workload, which it starts once its counters are enabled (so the `sleep`'s `exec` tells
//! the runner counting has begun) and which the runner stops, by PID, to end the count.
//! `strace -c -f` (the fallback) counts every call by name; it is stopped by SIGINT.
//! Both are stopped by the PID the runner started, never by name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::procs;

/// The calls `perf stat` counts one by one (the rest only in the total): the socket,
/// event-loop, memory and thread calls a proxy's data path makes.
pub const NAMED: [&str; 40] = [
    "accept",
    "accept4",
    "bind",
    "brk",
    "close",
    "connect",
    "epoll_ctl",
    "epoll_pwait",
    "epoll_pwait2",
    "epoll_wait",
    "eventfd2",
    "fcntl",
    "futex",
    "getpeername",
    "getsockname",
    "getsockopt",
    "io_uring_enter",
    "ioctl",
    "madvise",
    "mmap",
    "mprotect",
    "munmap",
    "openat",
    "pipe2",
    "poll",
    "read",
    "readv",
    "recvfrom",
    "recvmsg",
    "sched_yield",
    "sendmsg",
    "sendto",
    "setsockopt",
    "shutdown",
    "socket",
    "splice",
    "timerfd_settime",
    "write",
    "writev",
    "clock_nanosleep",
];

/// Which counter `--syscalls` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Choice {
    /// `perf stat` when it can count here, else `strace`, else none (with the reason).
    #[default]
    Auto,
    /// `perf stat` only.
    Perf,
    /// `strace -c -f` only.
    Strace,
    /// No counting run.
    Off,
}

/// A counter that works on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// `perf stat` on the syscall tracepoints.
    Perf,
    /// `strace -c -f`.
    Strace,
}

impl Tool {
    /// The name written into the results.
    pub fn name(self) -> &'static str {
        match self {
            Tool::Perf => "perf stat",
            Tool::Strace => "strace -c -f",
        }
    }
}

/// The counter to use: the first of those `choice` allows that counts a short `true`
/// here; `Err` says why none (`Ok(None)`: counting is off).
pub fn pick(choice: Choice) -> Result<Option<Tool>, String> {
    let order: &[Tool] = match choice {
        Choice::Off => return Ok(None),
        Choice::Auto => &[Tool::Perf, Tool::Strace],
        Choice::Perf => &[Tool::Perf],
        Choice::Strace => &[Tool::Strace],
    };
    let mut why = Vec::new();
    for &tool in order {
        match probe(tool) {
            Ok(()) => return Ok(Some(tool)),
            Err(e) => why.push(format!("{}: {e}", tool.name())),
        }
    }
    Err(why.join("; "))
}

/// Whether `tool` counts the calls of a `true` on this machine.
fn probe(tool: Tool) -> Result<(), String> {
    let out = match tool {
        Tool::Perf => Command::new("perf")
            .args(["stat", "-x,", "-e", "raw_syscalls:sys_enter", "--", "true"])
            .stdout(Stdio::null())
            .output(),
        Tool::Strace => Command::new("strace").args(["-c", "-f", "-o", "/dev/stdout", "true"]).output(),
    }
    .map_err(|e| format!("cannot run it ({e})"))?;
    let text = String::from_utf8_lossy(if tool == Tool::Perf { &out.stderr } else { &out.stdout }).into_owned();
    let counts = match tool {
        Tool::Perf => parse_perf(&text).map(|(total, _)| total),
        Tool::Strace => parse_strace(&text).map(|(total, _)| total),
    };
    match counts {
        Some(n) if out.status.success() && n > 0 => Ok(()),
        _ => Err(format!("it counted nothing ({})", text.lines().last().unwrap_or("no output").trim())),
    }
}

/// A counter attached to a process tree.
pub struct Counter {
    tool: Tool,
    child: Child,
    output: PathBuf,
}

impl Counter {
    /// Attaches `tool` to `pids` (every thread of each), writing its figures to `output`;
    /// returns once it counts.
    pub fn attach(tool: Tool, pids: &[u32], output: &Path) -> Result<Counter, String> {
        let list = pids.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        let mut cmd = Command::new(if tool == Tool::Perf { "perf" } else { "strace" });
        match tool {
            Tool::Perf => {
                let mut events = vec!["raw_syscalls:sys_enter".to_string()];
                events.extend(NAMED.iter().map(|n| format!("syscalls:sys_enter_{n}")));
                cmd.args(["stat", "-x,", "-o"]).arg(output).args(["-e", &events.join(","), "-p", &list]);
                cmd.args(["--", "sleep", "600"]);
            }
            Tool::Strace => {
                cmd.args(["-c", "-f", "-o"]).arg(output);
                for p in pids {
                    cmd.arg("-p").arg(p.to_string());
                }
            }
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", tool.name()))?;
        let mut c = Counter { tool, child, output: output.to_path_buf() };
        c.wait_counting()?;
        Ok(c)
    }

    /// Waits until the counter counts: perf's `sleep` has been exec'd (perf starts its
    /// workload after enabling its counters); strace gets a fixed moment to attach.
    fn wait_counting(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return Err(format!("{} exited before counting", self.tool.name()));
            }
            let ready = match self.tool {
                Tool::Perf => self.workload().is_some(),
                Tool::Strace => true,
            };
            if ready {
                std::thread::sleep(Duration::from_millis(200));
                return Ok(());
            }
            if Instant::now() > deadline {
                self.stop();
                return Err(format!("{} did not start counting within 30 s", self.tool.name()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// perf's `sleep` workload, once it has been exec'd.
    fn workload(&self) -> Option<u32> {
        procs::descendants(self.child.id())
            .into_iter()
            .find(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "sleep"))
    }

    /// Stops counting and returns (total, by name).
    pub fn finish(mut self) -> Result<(u64, BTreeMap<String, u64>), String> {
        self.stop();
        let text = std::fs::read_to_string(&self.output)
            .map_err(|e| format!("{} wrote nothing readable: {e}", self.tool.name()))?;
        let counts = match self.tool {
            Tool::Perf => parse_perf(&text),
            Tool::Strace => parse_strace(&text),
        };
        counts.ok_or_else(|| format!("{} counted nothing: {}", self.tool.name(), text.trim()))
    }

    /// Ends the count (perf: its workload; strace: SIGINT) and reaps the counter.
    fn stop(&mut self) {
        match (self.tool, self.workload()) {
            (Tool::Perf, Some(sleep)) => procs::signal(sleep, "TERM"),
            _ => procs::signal(self.child.id(), "INT"),
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.stop();
        }
    }
}

/// Parses `perf stat -x,` output: (every call, calls by name). Lines are
/// `COUNT,UNIT,EVENT,...`; `<not counted>` reads as zero.
pub fn parse_perf(text: &str) -> Option<(u64, BTreeMap<String, u64>)> {
    let mut total = None;
    let mut by_name = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split(',').collect();
        let (Some(count), Some(event)) = (f.first(), f.get(2)) else { continue };
        let n = count.trim().parse::<u64>().unwrap_or(0);
        if *event == "raw_syscalls:sys_enter" {
            total = Some(n);
        } else if let Some(name) = event.strip_prefix("syscalls:sys_enter_") {
            if n > 0 {
                by_name.insert(name.to_string(), n);
            }
        }
    }
    total.map(|t| (t, by_name))
}

/// Parses the table of `strace -c`: (every call, calls by name). Rows are
/// `% time  seconds  usecs/call  calls  [errors]  syscall`; the `total` row is skipped
/// and the sum taken instead.
pub fn parse_strace(text: &str) -> Option<(u64, BTreeMap<String, u64>)> {
    let mut by_name = BTreeMap::new();
    let mut header = false;
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.first() == Some(&"%") {
            header = true;
            continue;
        }
        if !header || f.len() < 5 || line.starts_with('-') {
            continue;
        }
        let (Some(name), Ok(calls)) = (f.last(), f[3].parse::<u64>()) else { continue };
        if *name != "total" {
            *by_name.entry((*name).to_string()).or_insert(0) += calls;
        }
    }
    header.then(|| (by_name.values().sum(), by_name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_csv_counts_the_total_and_the_named_calls() {
        let text = "# started on Wed Nov 25 18:44:48 2026\n\n\
                    1774,,raw_syscalls:sys_enter,16424672,100.00,,\n\
                    887,,syscalls:sys_enter_recvfrom,16424672,100.00,,\n\
                    <not counted>,,syscalls:sys_enter_splice,0,100.00,,\n\
                    0,,syscalls:sys_enter_accept4,16424672,100.00,,\n";
        let (total, by) = parse_perf(text).expect("parses");
        assert_eq!(total, 1774);
        assert_eq!(by.get("recvfrom"), Some(&887));
        assert!(!by.contains_key("splice") && !by.contains_key("accept4"), "{by:?}");
        assert_eq!(parse_perf("# nothing\n"), None);
    }

    #[test]
    fn strace_table_sums_the_rows_and_skips_the_total() {
        let text = "% time     seconds  usecs/call     calls    errors syscall\n\
                    ------ ----------- ----------- --------- --------- ----------------\n\
                    \x20 40.00    0.000400           4       100           recvfrom\n\
                    \x20 30.00    0.000300           3       100        50 epoll_ctl\n\
                    \x20 30.00    0.000300           3         2           close\n\
                    ------ ----------- ----------- --------- --------- ----------------\n\
                    100.00    0.001000           4       202        50 total\n";
        let (total, by) = parse_strace(text).expect("parses");
        assert_eq!(total, 202);
        assert_eq!((by["recvfrom"], by["epoll_ctl"], by["close"]), (100, 100, 2));
        assert_eq!(parse_strace("strace: attach: ptrace(PTRACE_SEIZE, 1): Operation not permitted\n"), None);
    }

    #[test]
    fn counts_per_request_and_connection() {
        let s = crate::results::Syscalls { requests: 100, connections: 10, total: 450, ..Default::default() };
        assert_eq!((s.per_request(), s.per_connection()), (Some(4.5), Some(45.0)));
        let none = crate::results::Syscalls { unavailable: Some("no perf".into()), requests: 5, ..s.clone() };
        assert_eq!(none.per_request(), None);
    }
}
