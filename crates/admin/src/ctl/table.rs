//! Plain-text rendering of the API's views for `switchyard ctl`: aligned
//! columns (text left, numbers right), two spaces between columns, no
//! trailing spaces, no colour, so the output reads well and greps well.

use std::fmt::Write as _;

use crate::backend::{
    CertificateView, ClusterView, HealthView, HistogramView, PersistenceView, PoolView, ServerView, StatsView,
};
use crate::sample::percentile;

/// How a column's cells line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text: padded on the right.
    Left,
    /// Numbers: padded on the left.
    Right,
}

/// A table of text cells with a header row.
#[derive(Debug, Clone)]
pub struct Table {
    headers: Vec<&'static str>,
    align: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these columns.
    pub fn new(columns: &[(&'static str, Align)]) -> Self {
        Table {
            headers: columns.iter().map(|c| c.0).collect(),
            align: columns.iter().map(|c| c.1).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row; missing cells are empty, extra cells are dropped.
    pub fn row(&mut self, mut cells: Vec<String>) {
        cells.resize(self.headers.len(), String::new());
        self.rows.push(cells);
    }

    /// The table as lines of text, each ending in a newline.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let header: Vec<String> = self.headers.iter().map(|h| (*h).to_owned()).collect();
        for row in std::iter::once(&header).chain(&self.rows) {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                let pad = widths[i].saturating_sub(cell.chars().count());
                if i > 0 {
                    line.push_str("  ");
                }
                match self.align[i] {
                    Align::Left => {
                        line.push_str(cell);
                        line.extend(std::iter::repeat_n(' ', pad));
                    }
                    Align::Right => {
                        line.extend(std::iter::repeat_n(' ', pad));
                        line.push_str(cell);
                    }
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `ctl status`.
pub fn render_health(h: &HealthView) -> String {
    let mut t = Table::new(&[("", Align::Left), ("", Align::Left)]);
    t.row(vec!["status".into(), h.status.clone()]);
    t.row(vec!["version".into(), h.version.clone()]);
    t.row(vec!["uptime".into(), duration(h.uptime_s)]);
    t.row(vec!["workers".into(), h.workers.to_string()]);
    t.row(vec!["generation".into(), h.generation.to_string()]);
    t.row(vec!["config".into(), h.config_source.clone()]);
    // The header row of a key/value table is empty: drop it.
    t.render().lines().skip(1).map(|l| format!("{l}\n")).collect()
}

/// `ctl health`: one line.
pub fn render_readiness(c: &ClusterView) -> String {
    match (&c.node, c.ready) {
        (Some(node), true) => format!("ready: node {node}, {}\n", if c.synced { "synced" } else { "not synced" }),
        (None, true) => "ready\n".to_string(),
        (_, false) => "not ready\n".to_string(),
    }
}

/// `ctl cluster`: the node's state, then one row per peer.
pub fn render_cluster(c: &ClusterView) -> String {
    use Align::{Left as L, Right as R};
    let node = c.node.as_deref().unwrap_or("(no [cluster]: a single node)");
    let mut text = format!(
        "node {node}: {}, {}, {} refused connection(s)\n",
        if c.ready { "ready" } else { "not ready" },
        if c.synced { "synced" } else { "not synced" },
        c.refused
    );
    if c.peers.is_empty() {
        return text;
    }
    let mut t = Table::new(&[
        ("PEER", L),
        ("ADDRESS", L),
        ("OUT", L),
        ("IN", L),
        ("SENT", R),
        ("RECEIVED", R),
        ("DROPPED", R),
        ("QUEUED", R),
        ("LAG", R),
        ("SYNCS", R),
    ]);
    let yes = |b: bool| if b { "up" } else { "down" }.to_string();
    for p in &c.peers {
        t.row(vec![
            p.name.clone(),
            p.address.clone(),
            yes(p.connected),
            yes(p.inbound),
            p.sent.to_string(),
            p.received.to_string(),
            p.dropped.to_string(),
            p.queued.to_string(),
            format!("{:.1} ms", p.lag_ms),
            format!("{}/{}", p.syncs_sent, p.syncs_received),
        ]);
    }
    text.push_str(&t.render());
    text
}

/// `ctl stats`: the services table, then every pool's servers.
pub fn render_stats(stats: &StatsView) -> String {
    use Align::{Left as L, Right as R};
    let mut t = Table::new(&[
        ("SERVICE", L),
        ("MODE", L),
        ("LISTEN", L),
        ("CONNS", R),
        ("TOTAL", R),
        ("REQUESTS", R),
        ("2XX", R),
        ("3XX", R),
        ("4XX", R),
        ("5XX", R),
        ("IN", R),
        ("OUT", R),
        ("P50", R),
        ("P99", R),
    ]);
    for s in &stats.services {
        t.row(vec![
            s.name.clone(),
            s.mode.clone(),
            s.listeners.join(","),
            s.connections_current.to_string(),
            s.connections_total.to_string(),
            s.requests.to_string(),
            s.responses.xx2.to_string(),
            s.responses.xx3.to_string(),
            s.responses.xx4.to_string(),
            s.responses.xx5.to_string(),
            bytes(s.bytes_in),
            bytes(s.bytes_out),
            latency(&s.latency, 0.50),
            latency(&s.latency, 0.99),
        ]);
    }
    let mut out = t.render();
    for pool in &stats.pools {
        out.push('\n');
        out.push_str(&render_pool(pool));
    }
    out
}

/// One pool: a title line and its servers.
pub fn render_pool(pool: &PoolView) -> String {
    use Align::{Left as L, Right as R};
    let mut out = format!("pool {} ({}", pool.name, pool.algorithm);
    if let Some(p) = &pool.persistence {
        let _ = write!(out, ", persistence {p}");
    }
    out.push_str(")\n");
    let mut t = Table::new(&[
        ("SERVER", L),
        ("ADDRESS", L),
        ("STATE", L),
        ("WEIGHT", R),
        ("ACTIVE", R),
        ("REQUESTS", R),
        ("2XX", R),
        ("4XX", R),
        ("5XX", R),
        ("FAILURES", R),
    ]);
    for s in &pool.servers {
        t.row(vec![
            s.name.clone(),
            s.address.clone(),
            if s.backup { format!("{} (backup)", s.state) } else { s.state.clone() },
            weight(s),
            s.active.to_string(),
            s.requests.to_string(),
            s.responses.xx2.to_string(),
            s.responses.xx4.to_string(),
            s.responses.xx5.to_string(),
            s.failures.to_string(),
        ]);
    }
    out.push_str(&t.render());
    out
}

/// The one-line answer to a server change.
pub fn render_server_line(s: &ServerView) -> String {
    format!("{}/{}: {}, weight {}, {} active\n", s.pool, s.name, s.state, weight(s), s.active)
}

/// `ctl persistence POOL`.
pub fn render_persistence(p: &PersistenceView) -> String {
    let mut out = format!("pool {} ({}): {} entries", p.pool, p.kind, p.total);
    if (p.entries.len() as u64) < p.total {
        let _ = write!(out, ", showing {}", p.entries.len());
    }
    out.push('\n');
    if p.entries.is_empty() {
        return out;
    }
    let mut t = Table::new(&[("KEY", Align::Left), ("SERVER", Align::Left), ("IDLE", Align::Right)]);
    for e in &p.entries {
        t.row(vec![e.key.clone(), e.server.clone(), format!("{:.1}s", e.idle_s)]);
    }
    out.push_str(&t.render());
    out
}

/// `50` when at its configured weight, `50 (of 100)` otherwise.
fn weight(s: &ServerView) -> String {
    if s.weight == s.configured_weight {
        s.weight.to_string()
    } else {
        format!("{} (of {})", s.weight, s.configured_weight)
    }
}

/// `1.5 KiB`, `12.0 MiB`: powers of 1024, one decimal; plain bytes below 1 KiB.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// A latency percentile since start, `-` without observations.
fn latency(h: &HistogramView, q: f64) -> String {
    match percentile(&h.bounds_us, &h.counts, q) {
        Some(us) if us < 1000.0 => format!("{us:.0}us"),
        Some(us) => format!("{:.1}ms", us / 1000.0),
        None => "-".to_owned(),
    }
}

/// `ctl certificates`: one line per certificate from ACME, then its warning.
pub fn render_certificates(certs: &[CertificateView], now: std::time::SystemTime) -> String {
    if certs.is_empty() {
        return "no certificate from ACME\n".to_string();
    }
    let now = now.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let until = |t: Option<u64>| match t {
        Some(t) if t > now => duration(t - now),
        Some(_) => "now".to_string(),
        None => "-".to_string(),
    };
    let mut table = Table::new(&[
        ("SERVICE", Align::Left),
        ("DOMAINS", Align::Left),
        ("STATE", Align::Left),
        ("EXPIRES IN", Align::Right),
        ("NEXT ATTEMPT", Align::Right),
        ("FAILURES", Align::Right),
        ("SERIAL", Align::Left),
    ]);
    for c in certs {
        let next = format!("{}{}", until(c.next_attempt), if c.ari { " (ARI)" } else { "" });
        let mark = if c.issued_on_demand { " (on demand)" } else { "" };
        table.row(vec![
            c.service.clone(),
            format!("{}{mark}", c.domains.join(",")),
            c.state.clone(),
            until(c.not_after),
            next,
            c.failures.to_string(),
            c.serial.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    let mut out = table.render();
    for (c, od) in certs.iter().filter_map(|c| Some((c, c.on_demand.as_ref()?))) {
        let counts: Vec<String> = od.results.iter().filter(|(_, n)| **n > 0).map(|(r, n)| format!("{r} {n}")).collect();
        let counts = if counts.is_empty() { "none yet".to_string() } else { counts.join(", ") };
        let _ = writeln!(
            out,
            "on demand: {}: {} certificate(s), {} pending; decisions: {counts}",
            c.service, od.certificates, od.pending
        );
        if let Some(last) = od.recent.last() {
            let _ = writeln!(out, "  latest refusal: {} ({})", last.name, last.reason);
        }
    }
    for c in certs {
        if let Some(w) = &c.warning {
            let _ = writeln!(out, "warning: {}: {w}", c.service);
        }
    }
    out
}

/// `3d 04h`, `1h 02m`, `5m 07s`, `42s`.
pub fn duration(seconds: u64) -> String {
    let (d, h, m, s) = (seconds / 86_400, seconds / 3600 % 24, seconds / 60 % 60, seconds % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m {s:02}s"),
        (0, _, _) => format!("{h}h {m:02}m"),
        _ => format!("{d}d {h:02}h"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificates_show_expiry_and_warnings() {
        let now = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        let certs = [
            CertificateView {
                service: "site".into(),
                domains: vec!["a.example".into()],
                state: "expiring".into(),
                not_after: Some(1_000_000 + 3 * 3600),
                next_attempt: Some(1_000_000 + 60),
                ari: true,
                serial: Some("0a1b".into()),
                warning: Some("the certificate expires soon and is not renewed yet".into()),
                ..CertificateView::default()
            },
            CertificateView {
                service: "new".into(),
                state: "pending".into(),
                failures: 2,
                ..CertificateView::default()
            },
            CertificateView {
                service: "shops".into(),
                state: "on-demand".into(),
                on_demand: Some(crate::backend::OnDemandView {
                    certificates: 1,
                    pending: 0,
                    results: [("issued".to_string(), 1), ("denied".to_string(), 3)].into_iter().collect(),
                    recent: vec![crate::backend::OnDemandRefusal {
                        name: "x.shops.example".into(),
                        reason: "denied: the ask endpoint answered 403".into(),
                        at: 1_000_000,
                    }],
                }),
                ..CertificateView::default()
            },
            CertificateView {
                service: "shops".into(),
                domains: vec!["a.shops.example".into()],
                state: "valid".into(),
                issued_on_demand: true,
                ..CertificateView::default()
            },
        ];
        let text = render_certificates(&certs, now);
        assert!(text.contains("3h 00m"), "{text}");
        assert!(text.contains("1m 00s (ARI)"), "{text}");
        assert!(text.contains("warning: site: the certificate expires soon"), "{text}");
        assert!(text.lines().any(|l| l.starts_with("new") && l.contains("pending")), "{text}");
        assert!(text.contains("a.shops.example (on demand)"), "{text}");
        assert!(
            text.contains("on demand: shops: 1 certificate(s), 0 pending; decisions: denied 3, issued 1"),
            "{text}"
        );
        assert!(text.contains("latest refusal: x.shops.example (denied: the ask endpoint answered 403)"), "{text}");
    }
    use crate::backend::{PersistenceEntryView, ServiceView};

    #[test]
    fn columns_align_text_left_and_numbers_right() {
        let mut t = Table::new(&[("NAME", Align::Left), ("COUNT", Align::Right), ("NOTE", Align::Left)]);
        t.row(vec!["a".into(), "7".into(), "x".into()]);
        t.row(vec!["longer-name".into(), "12345".into()]);
        let expected = "NAME         COUNT  NOTE\na                7  x\nlonger-name  12345\n";
        assert_eq!(t.render(), expected);
    }

    #[test]
    fn wide_characters_count_once() {
        let mut t = Table::new(&[("K", Align::Left), ("V", Align::Right)]);
        t.row(vec!["é".into(), "1".into()]);
        assert_eq!(t.render(), "K  V\né  1\n");
    }

    #[test]
    fn human_units() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(5 * 1024 * 1024 * 1024), "5.0 GiB");
        assert_eq!(duration(42), "42s");
        assert_eq!(duration(307), "5m 07s");
        assert_eq!(duration(3720), "1h 02m");
        assert_eq!(duration(3 * 86_400 + 4 * 3600 + 5), "3d 04h");
    }

    fn server(name: &str, state: &str, weight: u32) -> ServerView {
        ServerView {
            pool: "web".into(),
            name: name.into(),
            address: "127.0.0.1:9101".into(),
            state: state.into(),
            weight,
            configured_weight: 100,
            requests: 1234,
            ..ServerView::default()
        }
    }

    #[test]
    fn stats_render_services_then_pools() {
        let stats = StatsView {
            services: vec![ServiceView {
                name: "demo".into(),
                mode: "http".into(),
                listeners: vec!["127.0.0.1:8080".into()],
                requests: 2000,
                bytes_out: 3 * 1024 * 1024,
                latency: HistogramView { bounds_us: vec![500, 2000], counts: vec![10, 10, 0], sum_us: 0, count: 20 },
                ..ServiceView::default()
            }],
            pools: vec![PoolView {
                name: "web".into(),
                algorithm: "round-robin".into(),
                persistence: Some("cookie-insert".into()),
                servers: vec![server("origin-a", "up", 100), server("origin-b", "draining", 50)],
            }],
            caches: Vec::new(),
        };
        let text = render_stats(&stats);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("SERVICE  MODE  LISTEN"), "{text}");
        assert!(lines[1].starts_with("demo     http  127.0.0.1:8080"), "{text}");
        assert!(lines[1].contains("3.0 MiB"), "{text}");
        assert!(lines[1].ends_with("500us  2.0ms"), "{text}");
        assert_eq!(lines[2], "");
        assert_eq!(lines[3], "pool web (round-robin, persistence cookie-insert)");
        assert!(lines[4].starts_with("SERVER    ADDRESS         STATE          WEIGHT  ACTIVE"), "{text}");
        assert!(lines[5].starts_with("origin-a  127.0.0.1:9101  up                100"), "{text}");
        assert!(lines[6].starts_with("origin-b  127.0.0.1:9101  draining  50 (of 100)"), "{text}");
        // Every line of one table has the same width up to its last column's right edge.
        assert_eq!(lines[5].find("1234"), lines[6].find("1234"));
    }

    #[test]
    fn health_and_persistence() {
        let h = HealthView {
            status: "ok".into(),
            version: "0.1.0".into(),
            uptime_s: 75,
            workers: 2,
            generation: 3,
            config_source: "<demo>".into(),
        };
        assert_eq!(
            render_health(&h),
            "status      ok\nversion     0.1.0\nuptime      1m 15s\nworkers     2\ngeneration  3\nconfig      <demo>\n"
        );
        let p = PersistenceView {
            pool: "web".into(),
            kind: "source-ip".into(),
            entries: vec![PersistenceEntryView { key: "10.0.0.1".into(), server: "origin-a".into(), idle_s: 2.04 }],
            total: 5,
        };
        assert_eq!(
            render_persistence(&p),
            "pool web (source-ip): 5 entries, showing 1\nKEY       SERVER    IDLE\n10.0.0.1  origin-a  2.0s\n"
        );
        assert_eq!(
            render_server_line(&server("origin-b", "draining", 50)),
            "web/origin-b: draining, weight 50 (of 100), 0 active\n"
        );
    }
}
