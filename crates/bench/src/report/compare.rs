//! `switchyard bench compare A B`: two results files side by side, as Markdown.
//!
//! For every (test, size, target) measured in both, the headline figures of A and B and
//! the ratio B/A of requests/s and of proxy CPU µs per request, with a marker (◆) when
//! the two runs' ranges `[min, max]` do not overlap (the difference exceeds the spread).
//! Machine, method, version and limit differences come first; cells present in only one
//! file, or measured in only one, are listed after the tables.

use std::fmt::Write as _;
use std::path::Path;

use crate::results::Results;

use super::model::{self, fmt_num, fmt_opt, fmt_ratio, fmt_size, test_name, Figures, Spread, View};

/// Compares two results already read.
pub(crate) fn compare_results(a: &Results, b: &Results, a_name: &Path, b_name: &Path) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# switchyard bench compare\n");
    let _ = writeln!(out, "- **A**: `{}` — {}, {}", a_name.display(), model::fmt_when(&a.started), machine_line(a));
    let _ = writeln!(out, "- **B**: `{}` — {}, {}\n", b_name.display(), model::fmt_when(&b.started), machine_line(b));
    differences(&mut out, a, b);

    let _ = writeln!(
        out,
        "## Cells measured in both\n\nRatios are B/A: a req/s ratio above 1 and a CPU ratio below 1 mean B is better. \
         ◆ marks a difference larger than the runs' spread (the min–max ranges of A and B do not overlap).\n"
    );
    let mut only: Vec<String> = Vec::new();
    let mut tests = model::tests_in_order(a);
    for t in model::tests_in_order(b) {
        if !tests.contains(&t) {
            tests.push(t);
        }
    }
    let mut targets = model::targets_in_order(a);
    for t in model::targets_in_order(b) {
        if !targets.contains(&t) {
            targets.push(t);
        }
    }
    for test in tests {
        let mut sizes = model::sizes_of(a, test);
        sizes.extend(model::sizes_of(b, test));
        sizes.sort();
        sizes.dedup();
        let mut rows = Vec::new();
        for &size in &sizes {
            for target in &targets {
                let ca = model::cell(a, test, size, target);
                let cb = model::cell(b, test, size, target);
                let place = format!("{} — {} — {target}", test_name(test), fmt_size(size));
                match (ca, cb) {
                    (None, None) => {}
                    (Some(_), None) => only.push(format!("{place}: only in A")),
                    (None, Some(_)) => only.push(format!("{place}: only in B")),
                    (Some(ca), Some(cb)) => {
                        let (va, vb) = (View::of(&ca.outcome), View::of(&cb.outcome));
                        match (va.figures(), vb.figures()) {
                            (Some(fa), Some(fb)) => rows.push(row(size, target, fa, fb)),
                            _ => only.push(format!(
                                "{place}: A {}, B {}",
                                va.reason().unwrap_or_else(|| "measured".into()),
                                vb.reason().unwrap_or_else(|| "measured".into())
                            )),
                        }
                    }
                }
            }
        }
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(out, "### {}\n", test_name(test));
        let _ = writeln!(
            out,
            "| Size | Target | A req/s | B req/s | req/s B/A | A µs CPU/req | B µs CPU/req | CPU B/A |\n\
             |---|---|---:|---:|---:|---:|---:|---:|"
        );
        for r in rows {
            let _ = writeln!(out, "{r}");
        }
        out.push('\n');
    }
    if !only.is_empty() {
        let _ = writeln!(out, "## Cells not comparable\n");
        for line in only {
            let _ = writeln!(out, "- {line}");
        }
        out.push('\n');
    }
    out
}

/// One table row of a cell measured in both.
fn row(size: Option<u64>, target: &str, a: &Figures, b: &Figures) -> String {
    format!(
        "| {} | {target} | {} | {} | {} | {} | {} | {} |",
        fmt_size(size),
        fmt_opt(a.rps.map(|s| s.median)),
        fmt_opt(b.rps.map(|s| s.median)),
        ratio(a.rps, b.rps),
        fmt_opt(a.cpu_us.map(|s| s.median)),
        fmt_opt(b.cpu_us.map(|s| s.median)),
        ratio(a.cpu_us, b.cpu_us),
    )
}

/// B/A of two medians, with ◆ when the ranges are disjoint.
fn ratio(a: Option<Spread>, b: Option<Spread>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if a.median > 0.0 => {
            let mark = if a.disjoint(&b) { " ◆" } else { "" };
            format!("{}{mark}", fmt_ratio(b.median / a.median))
        }
        _ => "—".into(),
    }
}

fn machine_line(r: &Results) -> String {
    format!(
        "{} × {}",
        r.machine.cpus,
        if r.machine.cpu_model.is_empty() { "unknown CPU" } else { &r.machine.cpu_model }
    )
}

/// Machine, method, version and limit differences.
fn differences(out: &mut String, a: &Results, b: &Results) {
    let (ma, mb) = (&a.machine, &b.machine);
    let mut diffs: Vec<(String, String, String)> = Vec::new();
    let mut diff = |what: &str, x: String, y: String| {
        if x != y {
            diffs.push((what.to_string(), x, y));
        }
    };
    diff("CPU", ma.cpu_model.clone(), mb.cpu_model.clone());
    diff("Logical CPUs", ma.cpus.to_string(), mb.cpus.to_string());
    diff("Memory", model::fmt_bytes(ma.memory_bytes as f64), model::fmt_bytes(mb.memory_bytes as f64));
    diff("Kernel", ma.kernel.clone(), mb.kernel.clone());
    diff("OS", ma.os.clone(), mb.os.clone());
    diff("Open file limit", ma.fd_limit.to_string(), mb.fd_limit.to_string());
    diff("TLS library", ma.tls_library.clone(), mb.tls_library.clone());
    diff("--quick", a.quick.to_string(), b.quick.to_string());
    let (wa, wb) = (&a.method, &b.method);
    diff("Warm-up (s)", fmt_num(wa.warmup_s), fmt_num(wb.warmup_s));
    diff("Run duration (s)", fmt_num(wa.duration_s), fmt_num(wb.duration_s));
    diff("Repeats", wa.repeats.to_string(), wb.repeats.to_string());
    diff("Proxy core", wa.proxy_cpu.to_string(), wb.proxy_cpu.to_string());
    diff("Load core", wa.load_cpu.to_string(), wb.load_cpu.to_string());
    diff("Connections", wa.connections.to_string(), wb.connections.to_string());
    let version = |r: &Results, name: &str| {
        r.targets.iter().find(|t| t.name == name).map_or_else(|| "absent".to_string(), |t| t.version.clone())
    };
    let mut names: Vec<String> = a.targets.iter().map(|t| t.name.clone()).collect();
    for t in &b.targets {
        if !names.contains(&t.name) {
            names.push(t.name.clone());
        }
    }
    for n in &names {
        diff(&format!("{n} version"), version(a, n), version(b, n));
    }
    let _ = writeln!(out, "## Machine, method and versions\n");
    if diffs.is_empty() {
        let _ = writeln!(out, "Same machine facts, method and versions.\n");
    } else {
        let _ = writeln!(out, "| | A | B |\n|---|---|---|");
        for (what, x, y) in diffs {
            let _ = writeln!(out, "| {what} | {} | {} |", x.replace('|', "\\|"), y.replace('|', "\\|"));
        }
        out.push('\n');
    }
    let (la, lb) = (&a.limits, &b.limits);
    let _ = writeln!(out, "Physical limits, B/A: ");
    let limits = [
        ("RSA-2048 sign/s", la.rsa2048_sign_per_s, lb.rsa2048_sign_per_s),
        ("ECDSA P-256 sign/s", la.ecdsa_p256_sign_per_s, lb.ecdsa_p256_sign_per_s),
        ("AES-128-GCM bytes/s", la.aes128gcm_bytes_per_s, lb.aes128gcm_bytes_per_s),
        ("gzip bytes/s", la.gzip_bytes_per_s, lb.gzip_bytes_per_s),
        ("loopback bytes/s", la.loopback_bytes_per_s, lb.loopback_bytes_per_s),
    ];
    let parts: Vec<String> = limits
        .iter()
        .map(|(n, x, y)| format!("{n} {}", if *x > 0.0 && *y > 0.0 { fmt_ratio(y / x) } else { "—".into() }))
        .collect();
    let _ = writeln!(out, "{}.\n", parts.join(", "));
}
