//! The report as a list of blocks (headings, paragraphs, tables, lists, charts), built
//! once from the results and rendered by both [`super::markdown`] and [`super::html`],
//! so the two files always show the same tables and wording.
//!
//! Text in blocks uses two inline marks only, understood by both renderers: `` `code` ``
//! and `**bold**`. Everything else is plain text (the HTML renderer escapes it).

use crate::results::{Results, TestKind};

use super::model::{self, fmt_when, is_udp, test_definition, test_name};
use super::tables;

/// A chart the HTML report draws in place (the Markdown report skips it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Chart {
    /// Performance envelope of a test: requests/s against MB/s over the sizes, per target.
    Envelope(TestKind),
    /// Proxy CPU µs per request, grouped by test, one bar per target, at one size.
    CpuBars(u64),
    /// p50 and p99 latency against offered load of one (test, size).
    Latency(TestKind, Option<u64>),
}

/// One row of a table.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Row {
    /// One text per column.
    Cells(Vec<String>),
    /// The first cells, then one text spanning the remaining columns (a reason).
    Note(Vec<String>, String),
}

/// A table with a header row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Table {
    /// Column titles.
    pub headers: Vec<String>,
    /// Rows.
    pub rows: Vec<Row>,
}

impl Table {
    /// An empty table with these column titles.
    pub fn new(headers: &[&str]) -> Table {
        Table { headers: headers.iter().map(|h| h.to_string()).collect(), rows: Vec::new() }
    }

    /// Adds a row of cells.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(Row::Cells(cells));
    }

    /// Adds a row whose last columns hold one note.
    pub fn note(&mut self, lead: Vec<String>, text: String) {
        self.rows.push(Row::Note(lead, text));
    }
}

/// A block of the report.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Block {
    /// Heading of a level (1…3) with its anchor id.
    Heading(u8, String, String),
    /// A paragraph.
    Para(String),
    /// A bulleted list.
    List(Vec<String>),
    /// A table.
    Table(Table),
    /// A code block (shell commands).
    Code(String),
    /// Links to files relative to the report: (text, relative path).
    Links(Vec<(String, String)>),
    /// A chart (HTML only).
    Chart(Chart),
}

/// Whether a table column holds figures (right-aligned in both renderings).
pub(crate) fn numeric(header: &str) -> bool {
    !matches!(
        header,
        "Test"
            | "Size"
            | "vs"
            | "Target"
            | "Frames"
            | "Fact"
            | "Value"
            | "Version"
            | "Configuration files"
            | "Limit"
            | "Bounds"
            | "generator"
            | "spread (min–max)"
            | "switchyard efficiency"
    )
}

/// Anchor id of a heading: lowercase ASCII letters and digits joined by `-`.
pub(crate) fn anchor(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_string()
}

/// Builder of the block list.
struct Doc {
    blocks: Vec<Block>,
}

impl Doc {
    fn h(&mut self, level: u8, text: &str) {
        self.blocks.push(Block::Heading(level, text.to_string(), anchor(text)));
    }

    fn p(&mut self, text: impl Into<String>) {
        self.blocks.push(Block::Para(text.into()));
    }

    fn list(&mut self, items: Vec<String>) {
        if !items.is_empty() {
            self.blocks.push(Block::List(items));
        }
    }

    fn table(&mut self, t: Table) {
        self.blocks.push(Block::Table(t));
    }
}

/// The title of the report: date and machine.
pub(crate) fn title(r: &Results) -> String {
    let cpu = if r.machine.cpu_model.is_empty() { "unknown CPU" } else { r.machine.cpu_model.as_str() };
    format!("switchyard benchmark report — {} — {} × {}", fmt_when(&r.started), r.machine.cpus, cpu)
}

/// Builds the whole report.
pub(crate) fn build(r: &Results) -> Vec<Block> {
    let mut d = Doc { blocks: Vec::new() };
    d.h(1, &title(r));
    let targets = model::targets_in_order(r);
    d.p(format!(
        "Run from {} to {}{}. Targets: {}. Kernel {}, {}.",
        fmt_when(&r.started),
        fmt_when(&r.finished),
        if r.quick { " with `--quick` (a subset, one short run per cell: indicative only)" } else { "" },
        targets.iter().map(|t| format!("`{t}`")).collect::<Vec<_>>().join(", "),
        or_unknown(&r.machine.kernel),
        or_unknown(&r.machine.os),
    ));

    d.h(2, "Summary");
    d.p("**The robust figure is the proxy's CPU time per request** (user + system time of the proxy process \
         from /proc over the measured part of each run, divided by the requests completed). On a shared \
         2-core machine the generator and the origins saturate their core, so requests/s largely measures \
         the generator; CPU per request does not depend on how fast the generator is. \
         \"x× more efficient\" is the peer's CPU per request divided by switchyard's, both measured in this run: \
         the median over the rounds (a test's repeats run the targets in turn, so each round's two runs saw \
         the same minute of the machine), with the rounds' range after it.");
    d.table(tables::summary(r));
    d.list(tables::summary_notes(r));
    let saturated = tables::saturated_cells(r);
    if !saturated.is_empty() {
        d.p(format!(
            "⚠ The load generator was saturated in {} cell(s) (marked ⚠ below): there **this figure measures \
             the generator**, not the proxy; its requests/s is a lower bound of what the proxy can do. Compare \
             proxy CPU per request instead.",
            saturated.len()
        ));
    }
    for size in [model::SMALL, model::LARGE] {
        d.blocks.push(Block::Chart(Chart::CpuBars(size)));
    }

    d.h(2, "How to read this report");
    d.list(vec![
        "Each cell is one (test, size, target). Figures are the **median** over the measured runs; the \
         spread of proxy CPU per request is the min–max over the runs. Warm-up traffic is discarded."
            .into(),
        "`direct` is the client→origin baseline without a proxy: the ceiling the machine allows.".into(),
        "`floor` is a minimal forwarder of the bench's own (one tokio thread, no HTTP logic beyond framing \
         the messages), pinned like the proxies: the least a relay spends per request on this machine. \
         **Above floor** is a target's CPU per request minus the floor's (and their ratio): the part of its \
         cost that is its own rather than the kernel's."
            .into(),
        "`floor-uring` (with `--peers floor-uring`) is the same floor on io_uring (multishot accept and \
         receive, provided buffers, direct descriptors, one `io_uring_enter` per loop turn): its distance \
         from `floor` is what the event loop alone changes (docs/adr/0011-io-uring.md)."
            .into(),
        "**User / kernel µs** splits the proxy's CPU per request into user-space time (utime) and kernel \
         time (stime) from /proc; at small sizes on loopback most of it is the kernel's socket work."
            .into(),
        "**Syscalls/req** is the proxy's system calls per request (per connection in brackets where a \
         connection carries several), counted with `perf stat` or `strace` on a separate short run at the \
         smallest size of each test, never on a measured run."
            .into(),
        "**Performance envelopes** (HTML report) plot requests/s against MB/s over the file sizes, as in \
         the F5 report: a larger envelope is better at every size."
            .into(),
        "**Latency against offered load** uses an open loop at fixed fractions of the measured maximum; \
         latency counts from the intended send time, so coordinated omission is corrected."
            .into(),
        "**Of limit** is the figure as a fraction of the machine's physical limit that bounds it \
         (RSA-2048 signatures/s, AES-GCM bytes/s, gzip, brotli or zstd bytes/s, loopback bandwidth), measured \
         in the same run."
            .into(),
        "Cells a target cannot do are listed as **not supported** with the reason; failed cells say what failed. \
         Nothing is dropped."
            .into(),
    ]);

    let tests = model::tests_in_order(r);
    let plain: Vec<TestKind> = tests
        .iter()
        .copied()
        .filter(|t| {
            !is_udp(*t)
                && !matches!(
                    t,
                    TestKind::ConcurrentConnections | TestKind::ConcurrentConnectionsL4 | TestKind::L7Failover
                )
        })
        .collect();
    if !plain.is_empty() {
        d.h(2, "Results by test");
    }
    for t in &plain {
        d.h(3, test_name(*t));
        d.p(test_definition(*t));
        d.table(tables::test_table(r, *t));
        d.list(tables::cell_notes(r, *t));
        if let Some(table) = tables::syscalls_table(r, *t) {
            d.p("**System calls** of each proxy, counted on one extra run after the measured ones (the whole \
                 run, no warm-up), divided by the requests and connections the generator completed in it.");
            d.table(table);
        }
        if tables::is_http2(*t) {
            d.p(format!(
                "**Target**: switchyard ≥ {:.1}× HAProxy's CPU efficiency per request (HAProxy's µs of CPU per \
                 request divided by switchyard's, same run: the median over the rounds, their range in brackets).",
                tables::HTTP2_TARGET
            ));
            d.list(tables::http2_target(r, *t));
        }
        if *t == TestKind::Http3 {
            d.p("**HTTP/3 against HTTP/2 over TLS**, same run, same certificate and load: each target's \
                 proxy CPU per request and requests per second in both tests.");
            d.table(tables::http3_against_http2(r));
        }
        if *t == TestKind::L7KeepaliveAccessLog {
            d.p("**The cost of access logging**: each target's proxy CPU per request with the access log, \
                 against the same target in the L7 keep-alive test at 128 B of this run.");
            d.table(tables::logging_cost(r));
        }
        d.blocks.push(Block::Chart(Chart::Envelope(*t)));
    }

    let latency = tables::latency_cells(r);
    if !latency.is_empty() {
        d.h(2, "Latency against offered load");
        d.p("Open loop at fixed fractions of the maximum measured in the same cell. Latency is measured from \
             the intended send time (coordinated omission corrected); an achieved rate below the offered one \
             means the target could not keep up.");
        for (t, size) in latency {
            d.h(3, &format!("{} — {}", test_name(t), model::fmt_size(size)));
            d.table(tables::latency_table(r, t, size));
            d.blocks.push(Block::Chart(Chart::Latency(t, size)));
        }
    }

    let l4 = tests.contains(&TestKind::ConcurrentConnectionsL4);
    if tests.contains(&TestKind::ConcurrentConnections) || l4 {
        d.h(2, test_name(TestKind::ConcurrentConnections));
        d.p(format!(
            "{} The number held is bounded by the file-descriptor limit ({}), shared by the generator's \
             and the proxy's sockets. Memory per connection is the proxy's resident memory growth divided by \
             the connections held.",
            test_definition(TestKind::ConcurrentConnections),
            model::fmt_num(r.machine.fd_limit as f64)
        ));
        if l4 {
            d.p(format!("**L4 relay** rows: {}", test_definition(TestKind::ConcurrentConnectionsL4)));
        }
        d.table(tables::concurrency_table(r));
        d.list(tables::cell_notes(r, TestKind::ConcurrentConnections));
        d.list(tables::cell_notes(r, TestKind::ConcurrentConnectionsL4));
    }

    if tests.contains(&TestKind::L7Failover) {
        d.h(2, test_name(TestKind::L7Failover));
        d.p(format!(
            "{} **Failover** is the time from the kill until the target reported the server unavailable \
             (its own account, polled every 10 ms): from then on it sends no new request there. **Failures \
             counted on it** are the requests the target itself counted as failed on the dead server, most \
             of them retried on the other one: they cost the client latency, not an error (HAProxy waits up \
             to 1 s before a retry, and counts then). A **failed client request** is an error status, a \
             reset or a 2 s timeout.",
            test_definition(TestKind::L7Failover)
        ));
        d.table(tables::failover_table(r));
        d.list(tables::failover_notes(r));
        d.list(tables::cell_notes(r, TestKind::L7Failover));
    }

    let udp: Vec<TestKind> = tests.iter().copied().filter(|t| is_udp(*t)).collect();
    if !udp.is_empty() {
        d.h(2, "UDP forwarding");
        for t in udp {
            d.h(3, test_name(t));
            d.p(test_definition(t));
            d.table(tables::udp_table(r, t));
            d.list(tables::cell_notes(r, t));
            d.blocks.push(Block::Chart(Chart::Envelope(t)));
        }
    }

    d.h(2, "Machine");
    d.table(tables::machine_table(r));
    d.h(3, "Versions");
    d.table(tables::versions_table(r));
    d.h(3, "Physical limits");
    d.p("Measured on this machine in the same run, on one core unless said otherwise.");
    d.table(tables::limits_table(r));

    d.h(2, "Method");
    d.list(method(r));

    d.h(2, "How to reproduce");
    d.p("Install the peers (Debian: `apt install haproxy nginx`), build switchyard in release mode, then:");
    d.blocks.push(Block::Code(
        "cargo build --release\n\
         ./target/release/switchyard bench --peers haproxy,nginx --out DIR\n\
         # a subset in under 3 minutes:\n\
         ./target/release/switchyard bench --quick --out DIR\n\
         # compare two runs (or two machines):\n\
         ./target/release/switchyard bench compare DIR_A/results.json DIR_B/results.json"
            .into(),
    ));
    d.p("The raw figures are in `results.json` beside this report; `docs/benchmarking.md` defines each test.");

    d.h(2, "Generated configuration files");
    let links: Vec<(String, String)> =
        r.targets.iter().flat_map(|t| t.configs.iter().map(move |c| (format!("{}: {c}", t.name), c.clone()))).collect();
    if links.is_empty() {
        d.p("No configuration files were generated.");
    } else {
        d.p("Each target got a functionally identical configuration per test (same pools, rules and protocol):");
        d.blocks.push(Block::Links(links));
    }
    d.blocks
}

fn or_unknown(s: &str) -> &str {
    if s.is_empty() {
        "unknown"
    } else {
        s
    }
}

/// The method, as list items.
fn method(r: &Results) -> Vec<String> {
    let m = &r.method;
    vec![
        format!("Warm-up of {} before each measured run, discarded.", model::fmt_secs(m.warmup_s)),
        format!(
            "Measured runs of {}, up to {} per cell (median shown, min–max spread of proxy CPU per request).",
            model::fmt_secs(m.duration_s),
            m.repeats
        ),
        format!(
            "Pinning: the proxy on core {} with one worker; the load generator and the origins share core {}.",
            m.proxy_cpu, m.load_cpu
        ),
        format!("Closed loop (as fast as possible) with {} connections; open loop for latency points.", m.connections),
        format!(
            "TLS tests: the generator offers the {} key-exchange group (`--tls-group`) and the TLS 1.3 suites \
             in browser order; every target is checked to negotiate TLS_AES_128_GCM_SHA256 before it is \
             measured.",
            if m.tls_group.is_empty() { "X25519" } else { m.tls_group.as_str() }
        ),
        "Proxy CPU from /proc (utime + stime) sampled around each measured run; the generator's own CPU is \
         recorded too, and a run is flagged when the generator used nearly all of its core."
            .into(),
        "Each target is checked to really do the function (the `.png` rule reaches the images pool, cookies \
         inserted, responses compressed and decoding to the origin's bytes, cache hits not reaching the origins) \
         before it is measured."
            .into(),
    ]
}
