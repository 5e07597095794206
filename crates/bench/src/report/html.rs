//! `report.html`: one self-contained page (inline CSS and SVG; no scripts, no fonts,
//! no external resources) with the same blocks as `report.md` plus the charts.

use std::fmt::Write as _;

use crate::results::Results;

use super::charts::{self, escape};
use super::document::{self, Block, Chart, Row, Table};

const STYLE: &str = "\
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:2rem auto;max-width:1200px;\
padding:0 1rem;color:#222;line-height:1.45}\
h1{font-size:1.6rem}h2{margin-top:2.2rem;border-bottom:1px solid #ddd;padding-bottom:.2rem}\
table{border-collapse:collapse;margin:.8rem 0;font-size:.88rem}\
th,td{border:1px solid #ddd;padding:.25rem .5rem;vertical-align:top}\
th{background:#f4f4f4;text-align:left}td.n{text-align:right;font-variant-numeric:tabular-nums}\
td.note{color:#7a4b00;background:#fffaf0;font-style:italic}\
tr:nth-child(even) td{background-color:#fbfbfb}\
code,pre{font-family:ui-monospace,Menlo,Consolas,monospace;background:#f6f6f6}\
pre{padding:.7rem;overflow-x:auto}code{padding:0 .2rem}\
.chart{display:block;max-width:100%;height:auto;margin:1rem 0;border:1px solid #eee}\
nav ul{columns:2}";

/// Renders the report as a self-contained HTML page.
pub(crate) fn render(r: &Results) -> String {
    let blocks = document::build(r);
    let mut out = String::new();
    let title = document::title(r);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n",
        escape(&title)
    );
    let toc: Vec<(&str, &str)> = blocks
        .iter()
        .filter_map(|b| match b {
            Block::Heading(2, text, id) => Some((text.as_str(), id.as_str())),
            _ => None,
        })
        .collect();
    for (i, block) in blocks.iter().enumerate() {
        match block {
            Block::Heading(level, text, id) => {
                let l = level.clamp(&1, &6);
                let _ = writeln!(out, "<h{l} id=\"{}\">{}</h{l}>", escape(id), inline(text));
                if i == 0 && !toc.is_empty() {
                    out.push_str("<nav><ul>");
                    for (text, id) in &toc {
                        let _ = write!(out, "<li><a href=\"#{}\">{}</a></li>", escape(id), inline(text));
                    }
                    out.push_str("</ul></nav>\n");
                }
            }
            Block::Para(text) => {
                let _ = writeln!(out, "<p>{}</p>", inline(text));
            }
            Block::List(items) => {
                out.push_str("<ul>");
                for item in items {
                    let _ = write!(out, "<li>{}</li>", inline(item));
                }
                out.push_str("</ul>\n");
            }
            Block::Table(t) => table(&mut out, t),
            Block::Code(code) => {
                let _ = writeln!(out, "<pre><code>{}</code></pre>", escape(code));
            }
            Block::Links(links) => {
                out.push_str("<ul>");
                for (text, href) in links {
                    let _ = write!(out, "<li><a href=\"{}\">{}</a></li>", escape(&relative_href(href)), escape(text));
                }
                out.push_str("</ul>\n");
            }
            Block::Chart(chart) => {
                let svg = match *chart {
                    Chart::Envelope(test) => charts::envelope(r, test),
                    Chart::CpuBars(size) => charts::cpu_bars(r, size),
                    Chart::Latency(test, size) => charts::latency(r, test, size),
                };
                if let Some(svg) = svg {
                    out.push_str(&svg);
                    out.push('\n');
                }
            }
        }
    }
    out.push_str("</body>\n</html>\n");
    out
}

/// A link target kept relative to the report folder: anything with a scheme or an
/// absolute path is reduced to its file name, and unsafe characters are percent-encoded.
fn relative_href(path: &str) -> String {
    let p = if path.contains(':') || path.starts_with('/') || path.starts_with('\\') {
        path.rsplit(['/', '\\', ':']).next().unwrap_or_default()
    } else {
        path
    };
    let mut out = String::new();
    for b in p.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Escapes text and renders the two inline marks: `` `code` `` and `**bold**`.
pub(crate) fn inline(text: &str) -> String {
    let mut out = String::new();
    for (i, part) in text.split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(out, "<code>{}</code>", escape(part));
            continue;
        }
        for (j, piece) in part.split("**").enumerate() {
            if j % 2 == 1 {
                let _ = write!(out, "<strong>{}</strong>", escape(piece));
            } else {
                out.push_str(&escape(piece));
            }
        }
    }
    out
}

fn table(out: &mut String, t: &Table) {
    out.push_str("<table>\n<thead><tr>");
    for h in &t.headers {
        let _ = write!(out, "<th>{}</th>", escape(h));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for row in &t.rows {
        out.push_str("<tr>");
        match row {
            Row::Cells(cells) => {
                for (i, c) in cells.iter().enumerate() {
                    let class =
                        if t.headers.get(i).is_some_and(|h| document::numeric(h)) { " class=\"n\"" } else { "" };
                    let _ = write!(out, "<td{class}>{}</td>", inline(c));
                }
            }
            Row::Note(lead, text) => {
                for c in lead {
                    let _ = write!(out, "<td>{}</td>", inline(c));
                }
                let span = t.headers.len().saturating_sub(lead.len()).max(1);
                let _ = write!(out, "<td class=\"note\" colspan=\"{span}\">{}</td>", escape(text));
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_marks_and_escaping() {
        assert_eq!(inline("a `<b>` **c&d** e"), "a <code>&lt;b&gt;</code> <strong>c&amp;d</strong> e");
    }

    #[test]
    fn hrefs_stay_relative() {
        assert_eq!(relative_href("configs/haproxy l7.cfg"), "configs/haproxy%20l7.cfg");
        assert_eq!(relative_href("https://evil.example/x.js"), "x.js");
        assert_eq!(relative_href("/etc/passwd"), "passwd");
    }
}
