//! Facts about the machine a run happened on, from /proc, `uname` and /etc/os-release.

use std::process::Command;

use crate::results::Machine;

/// TLS library of the load generator and of switchyard.
pub const TLS_LIBRARY: &str = "rustls 0.23 / aws-lc-rs";

/// Collects the machine facts; anything unreadable stays empty or 0.
pub fn facts() -> Machine {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    Machine {
        cpu_model: cpu_model(&cpuinfo),
        // Counted from /proc, not from the affinity mask: the run pins itself
        // to the load core before collecting facts.
        cpus: match cpu_count(&cpuinfo) {
            0 => std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            n => n,
        },
        memory_bytes: mem_total(&read("/proc/meminfo")),
        kernel: Command::new("uname")
            .arg("-r")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default(),
        os: os_name(&read("/etc/os-release")),
        fd_limit: fd_limit(&read("/proc/self/limits")),
        tls_library: TLS_LIBRARY.to_string(),
    }
}

/// Logical CPUs listed in /proc/cpuinfo.
pub fn cpu_count(cpuinfo: &str) -> usize {
    cpuinfo.lines().filter(|l| l.split(':').next().is_some_and(|k| k.trim() == "processor")).count()
}

/// `model name` of /proc/cpuinfo (first CPU).
pub fn cpu_model(cpuinfo: &str) -> String {
    cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default()
}

/// `MemTotal` of /proc/meminfo, bytes.
pub fn mem_total(meminfo: &str) -> u64 {
    meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// `PRETTY_NAME` of /etc/os-release, unquoted.
pub fn os_name(os_release: &str) -> String {
    os_release
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim().trim_matches('"').to_string())
        .unwrap_or_default()
}

/// Soft `Max open files` of /proc/self/limits.
pub fn fd_limit(limits: &str) -> u64 {
    limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_files() {
        assert_eq!(cpu_model("processor\t: 0\nmodel name\t: AMD EPYC 7B13\n"), "AMD EPYC 7B13");
        assert_eq!(mem_total("MemTotal:        8000000 kB\nMemFree: 1 kB\n"), 8_192_000_000);
        assert_eq!(
            os_name("NAME=\"Debian\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n"),
            "Debian GNU/Linux 12 (bookworm)"
        );
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            20000                20000                files\n";
        assert_eq!(fd_limit(limits), 20000);
    }

    #[test]
    fn facts_of_this_machine() {
        let m = facts();
        assert!(m.cpus >= 1 && m.memory_bytes > 0 && m.fd_limit > 0);
        assert_eq!(cpu_count("processor\t: 0\nmodel name\t: X\n\nprocessor\t: 1\nmodel name\t: X\n"), 2);
        assert_eq!(m.tls_library, TLS_LIBRARY);
    }
}
