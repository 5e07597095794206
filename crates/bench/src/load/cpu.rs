//! CPU time of the calling thread, from `/proc/thread-self` (no `unsafe`, no libc).
//!
//! `schedstat` gives the thread's on-CPU time in nanoseconds (user and system together);
//! where the kernel lacks it, `stat`'s `utime + stime` (clock ticks of 10 ms) is used.

use std::time::Duration;

/// Clock ticks per second of `/proc/*/stat` (`USER_HZ`, 100 on every Linux ABI).
const USER_HZ: u64 = 100;

/// CPU time the calling thread has used so far; zero when `/proc` is unreadable.
pub fn thread_cpu() -> Duration {
    if let Ok(s) = std::fs::read_to_string("/proc/thread-self/schedstat") {
        if let Some(ns) = s.split_whitespace().next().and_then(|f| f.parse::<u64>().ok()) {
            return Duration::from_nanos(ns);
        }
    }
    std::fs::read_to_string("/proc/thread-self/stat").ok().and_then(|s| parse_stat(&s)).unwrap_or_default()
}

/// `utime + stime` of a `/proc/*/stat` line.
fn parse_stat(stat: &str) -> Option<Duration> {
    // The command name (field 2) may hold spaces; fields are counted after its ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // After ')': state is field 3, utime field 14, stime field 15.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 1000 / USER_HZ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_spaces_in_name() {
        let line = "1234 (a b) c) S 1 1 1 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 100 1000 10";
        assert_eq!(parse_stat(line), Some(Duration::from_millis(3_000)));
    }

    #[test]
    fn burning_cpu_is_seen() {
        let before = thread_cpu();
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(50) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        assert!(thread_cpu() > before);
    }
}
