//! The two Prometheus text formats, written by hand: OpenMetrics 1.0 and the
//! classic text format 0.0.4.
//!
//! Both describe the same series; they differ in how a family is declared:
//!
//! | | OpenMetrics 1.0 | text 0.0.4 |
//! |---|---|---|
//! | counter family name | `x` (samples `x_total`) | `x_total` |
//! | `# UNIT` line | yes | no |
//! | info family | `# TYPE x info`, sample `x_info 1` | a gauge `x_info` |
//! | end marker | `# EOF` | none |
//!
//! So a scraper reading either stores the same series names. A family with no
//! sample is not written at all: a scraper has nothing to learn from it, and
//! some parsers refuse a family without samples.
//!
//! Invariants: every name passed in is a valid metric name (they are
//! constants of this crate); label values and help texts are escaped here.

use std::fmt::Write as _;

/// Which text format a scrape gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 (`application/openmetrics-text; version=1.0.0`).
    OpenMetrics,
    /// The classic Prometheus text format (`text/plain; version=0.0.4`).
    Text,
}

impl Format {
    /// The `Content-Type` of an exposition in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// The type of a metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Type {
    Counter,
    Gauge,
    Histogram,
    /// A constant 1 whose labels carry the information.
    Info,
}

/// An exposition being written.
pub(crate) struct Writer {
    out: String,
    format: Format,
    prefix: &'static str,
}

impl Writer {
    pub(crate) fn new(format: Format, prefix: &'static str) -> Writer {
        Writer { out: String::with_capacity(16 * 1024), format, prefix }
    }

    /// The finished text.
    pub(crate) fn finish(mut self) -> String {
        if self.format == Format::OpenMetrics {
            self.out.push_str("# EOF\n");
        }
        self.out
    }

    /// Writes a counter, gauge or info family (`name` without `_total` or
    /// `_info`; with its unit as the last word when `unit` is given).
    pub(crate) fn family<'l>(
        &mut self,
        name: &str,
        help: &str,
        ty: Type,
        unit: Option<&str>,
        rows: impl IntoIterator<Item = (impl Labels<'l>, u64)>,
    ) {
        let mut rows = rows.into_iter().peekable();
        if rows.peek().is_none() {
            return;
        }
        let sample = self.header(name, help, ty, unit);
        for (labels, v) in rows {
            self.sample(&sample, labels.pairs(), None, &v.to_string());
        }
    }

    /// Writes a gauge family of fractional values (`name` ends in its unit).
    pub(crate) fn gauge_f64<'l>(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<&str>,
        rows: impl IntoIterator<Item = (impl Labels<'l>, f64)>,
    ) {
        let mut rows = rows.into_iter().peekable();
        if rows.peek().is_none() {
            return;
        }
        let sample = self.header(name, help, Type::Gauge, unit);
        for (labels, v) in rows {
            self.sample(&sample, labels.pairs(), None, &float(v));
        }
    }

    /// Writes a histogram family. Each row: labels, cumulative-ready buckets
    /// as (upper bound in the family's unit, count in that bucket alone; the
    /// last one `+Inf`), sum, count.
    pub(crate) fn histogram<'l>(
        &mut self,
        name: &str,
        help: &str,
        unit: &str,
        rows: impl IntoIterator<Item = (impl Labels<'l>, Vec<(f64, u64)>, f64, u64)>,
    ) {
        let mut rows = rows.into_iter().peekable();
        if rows.peek().is_none() {
            return;
        }
        let base = self.header(name, help, Type::Histogram, Some(unit));
        let (bucket, sum, count) = (format!("{base}_bucket"), format!("{base}_sum"), format!("{base}_count"));
        for (labels, buckets, total, n) in rows {
            let pairs = labels.pairs();
            let mut acc = 0;
            for (le, c) in buckets {
                acc += c;
                let le = if le.is_infinite() { "+Inf".to_string() } else { float(le) };
                self.sample(&bucket, pairs, Some(("le", &le)), &acc.to_string());
            }
            self.sample(&sum, pairs, None, &float(total));
            self.sample(&count, pairs, None, &n.to_string());
        }
    }

    /// Writes `# HELP`, `# TYPE` (and `# UNIT`) and returns the name samples
    /// carry (histograms: the base of `_bucket`, `_sum`, `_count`).
    fn header(&mut self, name: &str, help: &str, ty: Type, unit: Option<&str>) -> String {
        let base = format!("{}_{name}", self.prefix);
        let (declared, sample, word) = match (self.format, ty) {
            (Format::OpenMetrics, Type::Counter) => (base.clone(), format!("{base}_total"), "counter"),
            (Format::Text, Type::Counter) => (format!("{base}_total"), format!("{base}_total"), "counter"),
            (Format::OpenMetrics, Type::Info) => (base.clone(), format!("{base}_info"), "info"),
            (Format::Text, Type::Info) => (format!("{base}_info"), format!("{base}_info"), "gauge"),
            (_, Type::Gauge) => (base.clone(), base.clone(), "gauge"),
            (_, Type::Histogram) => (base.clone(), base.clone(), "histogram"),
        };
        let help = escape(help, self.format == Format::OpenMetrics);
        let _ = writeln!(self.out, "# HELP {declared} {help}");
        let _ = writeln!(self.out, "# TYPE {declared} {word}");
        if let (Format::OpenMetrics, Some(unit)) = (self.format, unit) {
            let _ = writeln!(self.out, "# UNIT {declared} {unit}");
        }
        sample
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], extra: Option<(&str, &str)>, value: &str) {
        self.out.push_str(name);
        if !labels.is_empty() || extra.is_some() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().chain(extra.iter()).enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape(v, true));
            }
            self.out.push('}');
        }
        self.out.push(' ');
        self.out.push_str(value);
        self.out.push('\n');
    }
}

/// A sample's label set.
pub(crate) trait Labels<'a> {
    fn pairs(&self) -> &[(&'a str, &'a str)];
}

impl<'a, const N: usize> Labels<'a> for [(&'a str, &'a str); N] {
    fn pairs(&self) -> &[(&'a str, &'a str)] {
        self
    }
}

/// Escapes a label value (`quotes`: also `"`) or a help text: both formats
/// escape backslash and line feed; OpenMetrics help texts and every label
/// value escape the double quote too.
fn escape(s: &str, quotes: bool) -> std::borrow::Cow<'_, str> {
    if !s.contains(['\\', '\n', '"']) {
        return s.into();
    }
    let mut out = String::with_capacity(s.len() + 4);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quotes => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out.into()
}

/// A float as both formats read it (`1e-5` style is fine; always a dot or an
/// exponent so it is never mistaken for an integer where that matters).
fn float(v: f64) -> String {
    let s = format!("{v}");
    if s.contains(['.', 'e', 'E']) || s.contains("inf") || s.contains("NaN") {
        s
    } else {
        format!("{s}.0")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(format: Format) -> String {
        let mut w = Writer::new(format, "t");
        w.family("hits", "Hits.", Type::Counter, None, [([("a", "x\"y")], 3)]);
        w.family("sent_bytes", "Bytes.", Type::Counter, Some("bytes"), [([("a", "b")], 9)]);
        w.family("thing", "Things.", Type::Info, None, [([("k", "v")], 1)]);
        w.family("up", "Up.", Type::Gauge, None, std::iter::empty::<([(&str, &str); 0], u64)>());
        w.histogram("wait_seconds", "Wait.", "seconds", [([("a", "b")], vec![(0.5, 1), (f64::INFINITY, 1)], 2.0, 2)]);
        w.finish()
    }

    #[test]
    fn openmetrics_declares_base_names_units_and_ends_with_eof() {
        let t = write(Format::OpenMetrics);
        for line in [
            "# TYPE t_hits counter",
            "t_hits_total{a=\"x\\\"y\"} 3",
            "# TYPE t_sent_bytes counter",
            "# UNIT t_sent_bytes bytes",
            "# TYPE t_thing info",
            "t_thing_info{k=\"v\"} 1",
            "# UNIT t_wait_seconds seconds",
            "t_wait_seconds_bucket{a=\"b\",le=\"0.5\"} 1",
            "t_wait_seconds_bucket{a=\"b\",le=\"+Inf\"} 2",
            "t_wait_seconds_sum{a=\"b\"} 2.0",
            "# EOF",
        ] {
            assert!(t.lines().any(|l| l == line), "missing `{line}` in\n{t}");
        }
        assert!(!t.contains("t_up"), "a family without samples is left out");
    }

    #[test]
    fn classic_text_declares_total_names_no_units_no_info_no_eof() {
        let t = write(Format::Text);
        for line in [
            "# TYPE t_hits_total counter",
            "# HELP t_sent_bytes_total Bytes.",
            "# TYPE t_thing_info gauge",
            "t_thing_info{k=\"v\"} 1",
            "# TYPE t_wait_seconds histogram",
        ] {
            assert!(t.lines().any(|l| l == line), "missing `{line}` in\n{t}");
        }
        assert!(!t.contains("# UNIT") && !t.contains("# EOF") && !t.contains(" info\n"), "{t}");
    }
}
