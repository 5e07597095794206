//! The report's tables, built from the results (shared by the Markdown and HTML writers).

use crate::results::{Outcome, Results, TestKind, TestResult};

use super::document::Table;
use super::model::{
    self, cell, fmt_bytes, fmt_int, fmt_latency, fmt_num, fmt_opt, fmt_rate, fmt_ratio, fmt_size, fmt_udp_size,
    test_name, test_short, Figures, Spread, View, LARGE, SMALL,
};

/// The view of (test, size, target); a missing cell reads as "not in this run".
fn view(r: &Results, test: TestKind, size: Option<u64>, target: &str) -> View {
    cell(r, test, size, target).map_or_else(|| View::Failed("not in this run".into()), |c| View::of(&c.outcome))
}

/// `peer`'s CPU per request over switchyard's in (test, size), median and range over the
/// rounds ([`model::paired_efficiency`]); `None` unless both cells were measured.
fn efficiency(r: &Results, test: TestKind, size: Option<u64>, peer: &str) -> Option<Spread> {
    let measured = |target: &str| match &cell(r, test, size, target)?.outcome {
        Outcome::Measured(m) => Some(m),
        _ => None,
    };
    model::paired_efficiency(measured("switchyard")?, measured(peer)?)
}

/// " (per round 1.02–1.31)" after an efficiency measured over several rounds; empty for one.
fn rounds(s: &Spread) -> String {
    if s.min == s.max {
        String::new()
    } else {
        format!(" (per round {:.2}–{:.2})", s.min, s.max)
    }
}

/// "12.3 (11.9–12.8)" style spread of proxy CPU per request.
fn cpu_spread(f: &Figures) -> String {
    match f.cpu_us {
        Some(s) if f.runs > 1 => format!("{}–{}", fmt_num(s.min), fmt_num(s.max)),
        Some(_) => "one run".into(),
        None => "—".into(),
    }
}

/// The generator column: "ok", or "⚠ saturated (n/m runs)".
fn generator(f: &Figures) -> String {
    if f.saturated_runs == 0 {
        "ok".into()
    } else {
        format!("⚠ saturated ({}/{} runs)", f.saturated_runs, f.runs)
    }
}

fn fraction(x: Option<f64>) -> String {
    x.map_or_else(|| "—".into(), |f| format!("{:.0} %", f * 100.0))
}

/// The proxy CPU figure, "—" for the baseline (no proxy).
fn cpu_median(f: &Figures, target: &str) -> String {
    match f.cpu_us {
        Some(s) => fmt_num(s.median),
        None if target == "direct" => "— (no proxy)".into(),
        None => "—".into(),
    }
}

/// "2.8 / 9.5": the proxy's user and kernel µs of CPU per request (medians).
fn cpu_split(f: &Figures) -> String {
    match (f.user_us, f.kernel_us) {
        (Some(u), Some(k)) => format!("{} / {}", fmt_num(u.median), fmt_num(k.median)),
        _ => "—".into(),
    }
}

/// The floor's median µs of CPU per request for (test, size), if measured.
fn floor_cpu(r: &Results, test: TestKind, size: Option<u64>) -> Option<f64> {
    view(r, test, size, model::FLOOR).figures().and_then(|f| f.cpu_us).map(|s| s.median)
}

/// A target's distance above the floor: "+3.2 (1.30×)"; "—" without both figures.
fn above_floor(f: &Figures, floor: Option<f64>, target: &str) -> String {
    match (f.cpu_us, floor) {
        (Some(_), _) if target == model::FLOOR => "the floor".into(),
        (Some(c), Some(fl)) if fl > 0.0 => format!("{:+.1} ({:.2}×)", c.median - fl, c.median / fl),
        _ => "—".into(),
    }
}

/// System calls per request of a cell's counting run, with per connection where a
/// connection carries more than one request: "4.1 (41/conn)".
fn syscalls_per_request(f: &Figures) -> String {
    let Some(s) = &f.syscalls else { return "—".into() };
    match (s.per_request(), s.per_connection()) {
        (Some(r), Some(c)) if s.connections < s.requests => format!("{r:.1} ({c:.0}/conn)"),
        (Some(r), _) => format!("{r:.1}"),
        _ => "not counted".into(),
    }
}

/// Sizes of a test shown in the summary: 128 B and 128 KB (or the unsized cell).
fn summary_sizes(r: &Results, t: TestKind) -> Vec<Option<u64>> {
    model::sizes_of(r, t).into_iter().filter(|s| matches!(s, None | Some(SMALL) | Some(LARGE))).collect()
}

/// The headline table: switchyard against each peer (or the baseline when there is no peer).
pub(crate) fn summary(r: &Results) -> Table {
    let peers = model::peers(r);
    let others = if peers.is_empty() { vec!["direct".to_string()] } else { peers };
    let mut t = Table::new(&[
        "Test",
        "Size",
        "vs",
        "switchyard µs CPU/req",
        "peer µs CPU/req",
        "switchyard efficiency",
        "floor µs CPU/req",
        "switchyard above floor",
        "peer above floor",
        "switchyard req/s",
        "peer req/s",
        "req/s ratio",
    ]);
    for test in model::tests_in_order(r) {
        if matches!(test, TestKind::ConcurrentConnections | TestKind::ConcurrentConnectionsL4 | TestKind::L7Failover) {
            continue;
        }
        for size in summary_sizes(r, test) {
            let sw = view(r, test, size, "switchyard");
            for other in &others {
                let lead = vec![test_short(test).to_string(), fmt_size(size), other.clone()];
                let peer = view(r, test, size, other);
                let (Some(a), Some(b)) = (sw.figures(), peer.figures()) else {
                    let why = match (sw.reason(), peer.reason()) {
                        (Some(x), _) => format!("switchyard {x}"),
                        (None, Some(y)) => format!("{other} {y}"),
                        (None, None) => "no figures".into(),
                    };
                    t.note(lead, why);
                    continue;
                };
                let efficiency = match efficiency(r, test, size, other) {
                    Some(s) if s.median >= 1.0 => format!("**{:.2}× more efficient**{}", s.median, rounds(&s)),
                    Some(s) => {
                        format!("{:.2}× ({other} {:.2}× more efficient){}", s.median, 1.0 / s.median, rounds(&s))
                    }
                    None => "—".into(),
                };
                let rps_ratio = match (a.rps, b.rps) {
                    (Some(x), Some(y)) if y.median > 0.0 => fmt_ratio(x.median / y.median),
                    _ => "—".into(),
                };
                let mark = |f: &Figures| if f.saturated_runs > 0 { " ⚠" } else { "" };
                let floor = floor_cpu(r, test, size);
                let mut cells = lead;
                cells.extend([
                    cpu_median(a, "switchyard"),
                    cpu_median(b, other),
                    efficiency,
                    fmt_opt(floor),
                    above_floor(a, floor, "switchyard"),
                    above_floor(b, floor, other),
                    format!("{}{}", fmt_opt(a.rps.map(|s| s.median)), mark(a)),
                    format!("{}{}", fmt_opt(b.rps.map(|s| s.median)), mark(b)),
                    rps_ratio,
                ]);
                t.row(cells);
            }
        }
    }
    t
}

/// What switchyard's HTTP/2 rows aim at (issue 16): at least this many times HAProxy's
/// CPU efficiency per request (HAProxy's µs of CPU per request over switchyard's).
pub(crate) const HTTP2_TARGET: f64 = 1.3;

/// Whether a test is one of the HTTP/2 rows.
pub(crate) fn is_http2(t: TestKind) -> bool {
    matches!(t, TestKind::Http2Tls | TestKind::Http2Clear | TestKind::Http2Upstream)
}

/// One line per size of an HTTP/2 test: switchyard's efficiency against HAProxy's in this
/// run, and whether it meets [`HTTP2_TARGET`].
pub(crate) fn http2_target(r: &Results, test: TestKind) -> Vec<String> {
    let mut out = Vec::new();
    for size in model::sizes_of(r, test) {
        let (sw, ha) = (view(r, test, size, "switchyard"), view(r, test, size, "haproxy"));
        let cpu = (sw.figures().and_then(|f| f.cpu_us), ha.figures().and_then(|f| f.cpu_us));
        let line = match (cpu, efficiency(r, test, size, "haproxy")) {
            ((Some(x), Some(y)), Some(e)) => {
                let verdict = if e.median >= HTTP2_TARGET { "met" } else { "not met" };
                format!(
                    "{}: switchyard {} µs CPU/req, HAProxy {} µs: {:.2}× HAProxy's efficiency{} (target ≥ \
                     {HTTP2_TARGET:.1}×: {verdict})",
                    fmt_size(size),
                    fmt_num(x.median),
                    fmt_num(y.median),
                    e.median,
                    rounds(&e)
                )
            }
            _ => {
                let why = sw
                    .reason()
                    .map(|w| format!("switchyard {w}"))
                    .or_else(|| ha.reason().map(|w| format!("haproxy {w}")));
                format!(
                    "{}: target ≥ {HTTP2_TARGET:.1}× HAProxy's efficiency not evaluated ({})",
                    fmt_size(size),
                    why.unwrap_or_else(|| "no CPU figures".into())
                )
            }
        };
        out.push(line);
    }
    out
}

/// Lines under the summary: memory per connection of each target.
pub(crate) fn summary_notes(r: &Results) -> Vec<String> {
    let mut out = Vec::new();
    for (test, layer) in
        [(TestKind::ConcurrentConnections, "HTTP keep-alive"), (TestKind::ConcurrentConnectionsL4, "L4 relay")]
    {
        let conc: Vec<String> = model::targets_in_order(r)
            .iter()
            .filter_map(|target| {
                let v = view(r, test, None, target);
                v.figures().and_then(|f| f.memory_per_connection).map(|m| format!("{target} {}", fmt_bytes(m)))
            })
            .collect();
        if !conc.is_empty() {
            out.push(format!("Proxy memory per idle connection, {layer}: {}.", conc.join(", ")));
        }
    }
    let failover: Vec<String> = model::targets_in_order(r)
        .iter()
        .filter_map(|target| {
            let v = view(r, TestKind::L7Failover, None, target);
            let f = v.figures()?.failover.clone()?;
            let down =
                f.down_ms.map_or_else(|| format!("not within {}", model::fmt_secs(f.observed_s)), |m| fmt_ms(Some(m)));
            Some(format!("{target} {down} ({} failed requests)", fmt_int(f.failed)))
        })
        .collect();
    if !failover.is_empty() {
        out.push(format!("Failover after a server is killed under load: {}.", failover.join(", ")));
    }
    for test in model::tests_in_order(r).into_iter().filter(|t| t.coding().is_some()) {
        let Some(size) = model::sizes_of(r, test).into_iter().flatten().max() else { continue };
        let ratios: Vec<String> = model::targets_in_order(r)
            .iter()
            .filter_map(|target| {
                let v = view(r, test, Some(size), target);
                v.figures().filter(|f| f.compression_ratio.is_some()).map(|f| format!("{target} {}", ratio(f)))
            })
            .collect();
        if !ratios.is_empty() {
            out.push(format!(
                "{} ratio at {} (bytes sent / origin bytes, lower is better): {}.",
                test_name(test),
                fmt_size(Some(size)),
                ratios.join(", ")
            ));
        }
    }
    out
}

/// Milliseconds after the kill, "—" when nothing was seen.
fn fmt_ms(ms: Option<f64>) -> String {
    ms.map_or_else(|| "—".into(), |m| format!("{} ms", fmt_num(m)))
}

/// The failover table: one row per target.
pub(crate) fn failover_table(r: &Results) -> Table {
    let mut t = Table::new(&[
        "Target",
        "failover (marked down)",
        "last failure counted on it",
        "failures counted on it",
        "failed client requests",
        "last failed client request",
        "slowest request after the kill",
        "requests after the kill",
        "req/s",
    ]);
    for (_, target, c) in model::cells_in_order(r, TestKind::L7Failover) {
        let v = View::of(&c.outcome);
        let Some((f, fo)) = v.figures().and_then(|f| Some((f, f.failover.as_ref()?))) else {
            t.note(vec![target.clone()], v.reason().unwrap_or_else(|| "no failover figures".into()));
            continue;
        };
        let not_within = format!("not within {}", model::fmt_secs(fo.observed_s));
        t.row(vec![
            target.clone(),
            fo.down_ms.map_or(not_within, |m| fmt_ms(Some(m))),
            fmt_ms(fo.last_attempt_ms),
            fmt_int(fo.attempts),
            fmt_int(fo.failed),
            fmt_ms(fo.last_failure_ms),
            fmt_ms(fo.slowest_ms),
            fmt_int(fo.failed + fo.succeeded),
            fmt_opt(f.rps.map(|s| s.median)),
        ]);
    }
    t
}

/// How each target's failover figures were observed, one line each.
pub(crate) fn failover_notes(r: &Results) -> Vec<String> {
    model::cells_in_order(r, TestKind::L7Failover)
        .into_iter()
        .filter_map(|(_, target, c)| {
            let f = View::of(&c.outcome).figures()?.failover.clone()?;
            Some(format!("{target}: {}; polled every {} ms.", f.source, fmt_num(f.poll_ms)))
        })
        .collect()
}

/// Every (test, size, target) whose generator was saturated in at least one run.
pub(crate) fn saturated_cells(r: &Results) -> Vec<(TestKind, Option<u64>, String)> {
    r.tests
        .iter()
        .filter(|c| View::of(&c.outcome).figures().is_some_and(|f| f.saturated_runs > 0))
        .map(|c| (c.test, c.size, c.target.clone()))
        .collect()
}

/// The table of one request test: size × target (compression tests add the ratio).
pub(crate) fn test_table(r: &Results, test: TestKind) -> Table {
    let compression = test.coding().is_some();
    let mut headers = vec![
        "Size",
        "Target",
        "req/s",
        "MB/s",
        "proxy µs CPU/req",
        "spread (min–max)",
        "user / kernel µs",
        "above floor µs",
        "syscalls/req",
        "req per CPU-s",
        "p50",
        "p99",
        "errors",
        "generator",
        "of limit",
    ];
    if compression {
        headers.insert(4, "ratio");
    }
    let mut t = Table::new(&headers);
    for (size, target, c) in model::cells_in_order(r, test) {
        let lead = vec![fmt_size(size), target.clone()];
        let v = View::of(&c.outcome);
        let Some(f) = v.figures() else {
            t.note(lead, v.reason().unwrap_or_default());
            continue;
        };
        let mut cells = lead;
        cells.extend([
            fmt_opt(f.rps.map(|s| s.median)),
            fmt_opt(f.mb_per_s.map(|s| s.median)),
            cpu_median(f, &target),
            cpu_spread(f),
            cpu_split(f),
            above_floor(f, floor_cpu(r, test, size), &target),
            syscalls_per_request(f),
            fmt_opt(f.per_cpu_s.map(|s| s.median)),
            fmt_latency(f.p50_us),
            fmt_latency(f.p99_us),
            fmt_int(f.errors),
            generator(f),
            fraction(f.limit_fraction),
        ]);
        if compression {
            cells.insert(4, ratio(f));
        }
        t.row(cells);
    }
    t
}

/// A compression ratio as a percentage of the original bytes.
fn ratio(f: &Figures) -> String {
    f.compression_ratio.map_or_else(|| "—".into(), |s| format!("{:.1} %", s.median * 100.0))
}

/// Most calls named in one row of the system-call table.
const TOP_CALLS: usize = 8;

/// The system calls of a test's counted cells: per target, the counter, the calls per
/// request and per connection, and the most frequent calls per request by name.
/// `None` when no cell of the test was counted.
pub(crate) fn syscalls_table(r: &Results, test: TestKind) -> Option<Table> {
    let mut t = Table::new(&[
        "Size",
        "Target",
        "counted with",
        "requests",
        "connections",
        "calls/req",
        "calls/conn",
        "most frequent, per request",
    ]);
    let mut any = false;
    for (size, target, c) in model::cells_in_order(r, test) {
        let Some(s) = View::of(&c.outcome).figures().and_then(|f| f.syscalls.clone()) else { continue };
        any = true;
        let lead = vec![fmt_size(size), target.clone()];
        if let Some(why) = &s.unavailable {
            t.note(lead, format!("not counted: {why}"));
            continue;
        }
        let mut named: Vec<(&String, &u64)> = s.by_name.iter().collect();
        named.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let per = |n: u64| if s.requests > 0 { n as f64 / s.requests as f64 } else { 0.0 };
        let top: Vec<String> =
            named.iter().take(TOP_CALLS).map(|(name, n)| format!("{name} {:.2}", per(**n))).collect();
        let mut cells = lead;
        cells.extend([
            s.tool.clone(),
            fmt_int(s.requests),
            fmt_int(s.connections),
            s.per_request().map_or_else(|| "—".into(), |x| format!("{x:.2}")),
            s.per_connection().map_or_else(|| "—".into(), |x| format!("{x:.1}")),
            top.join(", "),
        ]);
        t.row(cells);
    }
    any.then_some(t)
}

/// The cost of the access log per target: L7 keep-alive at 128 B with and without it.
pub(crate) fn logging_cost(r: &Results) -> Table {
    let mut t = Table::new(&[
        "Target",
        "µs CPU/req without log",
        "µs CPU/req with log",
        "added µs CPU/req",
        "added",
        "req/s without log",
        "req/s with log",
    ]);
    let targets = model::targets_in_order(r);
    for target in targets.iter().filter(|t| *t != "direct" && !model::is_floor(t)) {
        let plain = view(r, TestKind::L7KeepaliveRps, Some(SMALL), target);
        let logged = view(r, TestKind::L7KeepaliveAccessLog, Some(SMALL), target);
        let lead = vec![target.clone()];
        let (Some(a), Some(b)) = (plain.figures(), logged.figures()) else {
            let why = logged.reason().or(plain.reason()).unwrap_or_else(|| "no figures".into());
            t.note(lead, why);
            continue;
        };
        let (without, with) = (a.cpu_us.map(|s| s.median), b.cpu_us.map(|s| s.median));
        let (added, percent) = match (without, with) {
            (Some(x), Some(y)) if x > 0.0 => (format!("{:+.1}", y - x), format!("{:+.0} %", (y - x) / x * 100.0)),
            _ => ("—".into(), "—".into()),
        };
        let mut cells = lead;
        cells.extend([
            fmt_opt(without),
            fmt_opt(with),
            added,
            percent,
            fmt_opt(a.rps.map(|s| s.median)),
            fmt_opt(b.rps.map(|s| s.median)),
        ]);
        t.row(cells);
    }
    t
}

/// HTTP/3 against HTTP/2 over TLS, same run: per target and size, each protocol's proxy
/// CPU per request (with its user / kernel split) and requests per second.
pub(crate) fn http3_against_http2(r: &Results) -> Table {
    let mut t = Table::new(&[
        "Target",
        "Size",
        "h2 TLS µs CPU/req",
        "h2 user / kernel µs",
        "h3 µs CPU/req",
        "h3 user / kernel µs",
        "h3 / h2 CPU",
        "h2 TLS req/s",
        "h3 req/s",
    ]);
    let targets = model::targets_in_order(r);
    for target in targets.iter().filter(|t| *t != "direct" && !model::is_floor(t)) {
        for size in model::sizes_of(r, TestKind::Http3) {
            let (h2, h3) = (view(r, TestKind::Http2Tls, size, target), view(r, TestKind::Http3, size, target));
            let lead = vec![target.clone(), fmt_size(size)];
            let (Some(a), Some(b)) = (h2.figures(), h3.figures()) else {
                let why = h3.reason().or(h2.reason()).unwrap_or_else(|| "no figures".into());
                t.note(lead, why);
                continue;
            };
            let ratio = match (a.cpu_us, b.cpu_us) {
                (Some(x), Some(y)) if x.median > 0.0 => format!("{:.2}×", y.median / x.median),
                _ => "—".into(),
            };
            let mut cells = lead;
            cells.extend([
                cpu_median(a, target),
                cpu_split(a),
                cpu_median(b, target),
                cpu_split(b),
                ratio,
                fmt_opt(a.rps.map(|s| s.median)),
                fmt_opt(b.rps.map(|s| s.median)),
            ]);
            t.row(cells);
        }
    }
    t
}

/// The flags of a test's measured cells, one line each.
pub(crate) fn cell_notes(r: &Results, test: TestKind) -> Vec<String> {
    let mut out = Vec::new();
    for c in r.tests.iter().filter(|c| c.test == test) {
        let v = View::of(&c.outcome);
        let Some(f) = v.figures() else { continue };
        let name = if model::is_udp(test) { fmt_udp_size(test, c.size) } else { fmt_size(c.size) };
        let place = if c.size.is_some() { format!("{name}, {}", c.target) } else { c.target.clone() };
        if f.saturated_runs > 0 {
            out.push(format!(
                "{place}: ⚠ generator saturated in {}/{} runs — this figure measures the generator, not the proxy.",
                f.saturated_runs, f.runs
            ));
        }
        for flag in f.flags.iter().filter(|x| f.saturated_runs == 0 || !x.contains("saturat")) {
            out.push(format!("{place}: {flag}"));
        }
    }
    out
}

/// The (test, size) pairs that have latency-at-load points.
pub(crate) fn latency_cells(r: &Results) -> Vec<(TestKind, Option<u64>)> {
    let mut out: Vec<(TestKind, Option<u64>)> = Vec::new();
    for test in model::tests_in_order(r) {
        for size in model::sizes_of(r, test) {
            let any = r.tests.iter().any(|c| {
                c.test == test
                    && c.size == size
                    && matches!(&c.outcome, crate::results::Outcome::Measured(m) if !m.latency_at_load.is_empty())
            });
            if any {
                out.push((test, size));
            }
        }
    }
    out
}

/// Latency at fixed fractions of the maximum, per target.
pub(crate) fn latency_table(r: &Results, test: TestKind, size: Option<u64>) -> Table {
    let mut t = Table::new(&["Target", "load", "offered req/s", "achieved req/s", "p50", "p90", "p99", "p99.9"]);
    for target in model::targets_in_order(r) {
        let Some(c) = cell(r, test, size, &target) else { continue };
        match &c.outcome {
            crate::results::Outcome::Measured(m) => {
                for p in &m.latency_at_load {
                    t.row(vec![
                        target.clone(),
                        format!("{:.0} %", p.fraction * 100.0),
                        fmt_num(p.offered_rps),
                        fmt_num(p.achieved_rps),
                        fmt_latency(Some(p.latency.p50_us)),
                        fmt_latency(Some(p.latency.p90_us)),
                        fmt_latency(Some(p.latency.p99_us)),
                        fmt_latency(Some(p.latency.p999_us)),
                    ]);
                }
            }
            other => t.note(vec![target.clone()], View::of(other).reason().unwrap_or_default()),
        }
    }
    t
}

/// The concurrent-connections table: each target's HTTP keep-alive row, then its layer-4
/// row where the run has one.
pub(crate) fn concurrency_table(r: &Results) -> Table {
    let mut t =
        Table::new(&["Target", "service", "connections held", "proxy memory per connection", "errors", "generator"]);
    let l4 = model::cells_in_order(r, TestKind::ConcurrentConnectionsL4);
    for (_, target, c) in model::cells_in_order(r, TestKind::ConcurrentConnections) {
        concurrency_row(&mut t, &target, "HTTP keep-alive", c);
        if let Some((_, _, c4)) = l4.iter().find(|(_, t4, _)| *t4 == target) {
            concurrency_row(&mut t, &target, "L4 relay", c4);
        }
    }
    // Targets measured at layer 4 only (`--only concurrent-connections-l4`).
    let l7 = model::cells_in_order(r, TestKind::ConcurrentConnections);
    for (_, target, c4) in &l4 {
        if !l7.iter().any(|(_, t7, _)| t7 == target) {
            concurrency_row(&mut t, target, "L4 relay", c4);
        }
    }
    t
}

/// One row of [`concurrency_table`].
fn concurrency_row(t: &mut Table, target: &str, service: &str, c: &TestResult) {
    let v = View::of(&c.outcome);
    let Some(f) = v.figures() else {
        t.note(vec![target.to_string(), service.to_string()], v.reason().unwrap_or_default());
        return;
    };
    t.row(vec![
        target.to_string(),
        service.to_string(),
        fmt_opt(f.connections),
        f.memory_per_connection.map_or_else(|| "—".into(), fmt_bytes),
        fmt_int(f.errors),
        generator(f),
    ]);
}

/// A UDP test's table: frame size × target.
pub(crate) fn udp_table(r: &Results, test: TestKind) -> Table {
    let mut t = Table::new(&[
        "Frames",
        "Target",
        "frames/s",
        "Mbit/s",
        "proxy µs CPU/frame",
        "spread (min–max)",
        "errors",
        "generator",
    ]);
    for (size, target, c) in model::cells_in_order(r, test) {
        let lead = vec![fmt_udp_size(test, size), target.clone()];
        let v = View::of(&c.outcome);
        let Some(f) = v.figures() else {
            t.note(lead, v.reason().unwrap_or_default());
            continue;
        };
        let mut cells = lead;
        cells.extend([
            fmt_opt(f.rps.map(|s| s.median)),
            fmt_opt(f.mb_per_s.map(|s| s.median * 8.0)),
            cpu_median(f, &target),
            cpu_spread(f),
            fmt_int(f.errors),
            generator(f),
        ]);
        t.row(cells);
    }
    t
}

/// Facts about the machine.
pub(crate) fn machine_table(r: &Results) -> Table {
    let m = &r.machine;
    let mut t = Table::new(&["Fact", "Value"]);
    for (k, v) in [
        ("CPU", m.cpu_model.clone()),
        ("Logical CPUs", m.cpus.to_string()),
        ("Memory", fmt_bytes(m.memory_bytes as f64)),
        ("Kernel", m.kernel.clone()),
        ("OS", m.os.clone()),
        ("Open file limit", fmt_num(m.fd_limit as f64)),
        ("TLS library", m.tls_library.clone()),
    ] {
        t.row(vec![k.into(), if v.is_empty() { "unknown".into() } else { v }]);
    }
    t
}

/// Each target's version and generated configuration files.
pub(crate) fn versions_table(r: &Results) -> Table {
    let mut t = Table::new(&["Target", "Version", "Configuration files"]);
    for target in &r.targets {
        let configs = if target.configs.is_empty() { "—".into() } else { target.configs.join(", ") };
        t.row(vec![target.name.clone(), target.version.clone(), configs]);
    }
    t
}

/// The physical limits and the tests each bounds.
pub(crate) fn limits_table(r: &Results) -> Table {
    let l = &r.limits;
    let per_s = |x: f64| if x > 0.0 { format!("{}/s", fmt_num(x)) } else { "not measured".into() };
    let rate = |x: f64| if x > 0.0 { fmt_rate(x) } else { "not measured".into() };
    let mut t = Table::new(&["Limit", "Value", "Bounds"]);
    t.row(vec![
        "RSA-2048 signatures (one core)".into(),
        per_s(l.rsa2048_sign_per_s),
        test_name(TestKind::TlsHandshakeRsa2048).into(),
    ]);
    t.row(vec![
        "ECDSA P-256 signatures (one core)".into(),
        per_s(l.ecdsa_p256_sign_per_s),
        test_name(TestKind::TlsHandshakeEcdsaP256).into(),
    ]);
    t.row(vec![
        "AES-128-GCM seal (one core)".into(),
        rate(l.aes128gcm_bytes_per_s),
        test_name(TestKind::TlsBulk).into(),
    ]);
    t.row(vec![
        "gzip level 1, switchyard-deflate (one core)".into(),
        rate(l.gzip_bytes_per_s),
        test_name(TestKind::CompressionGzip).into(),
    ]);
    t.row(vec![
        "brotli level 4 (one core)".into(),
        rate(l.brotli_bytes_per_s),
        test_name(TestKind::CompressionBrotli).into(),
    ]);
    t.row(vec![
        "zstd level 3 (one core)".into(),
        rate(l.zstd_bytes_per_s),
        test_name(TestKind::CompressionZstd).into(),
    ]);
    t.row(vec!["Loopback TCP copy (one stream)".into(), rate(l.loopback_bytes_per_s), "throughput tests".into()]);
    t
}
