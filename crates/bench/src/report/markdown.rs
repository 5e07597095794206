//! `report.md`: the report's blocks as GitHub-flavoured Markdown (charts are in the
//! HTML report only; the Markdown says so once).

use std::fmt::Write as _;

use crate::results::Results;

use super::document::{self, Block, Row, Table};

/// Renders the report as Markdown.
pub(crate) fn render(r: &Results) -> String {
    let mut out = String::new();
    let mut chart_note = false;
    for block in document::build(r) {
        match block {
            Block::Heading(level, text, _) => {
                let _ = writeln!(out, "{} {}\n", "#".repeat(usize::from(level.clamp(1, 6))), text_md(&text));
            }
            Block::Para(text) => {
                let _ = writeln!(out, "{}\n", text_md(&text));
            }
            Block::List(items) => {
                for i in items {
                    let _ = writeln!(out, "- {}", text_md(&i.replace('\n', " ")));
                }
                out.push('\n');
            }
            Block::Table(t) => table(&mut out, &t),
            Block::Code(code) => {
                let _ = writeln!(out, "```sh\n{code}\n```\n");
            }
            Block::Links(links) => {
                for (text, href) in links {
                    let _ = writeln!(out, "- [{}](<{}>)", cell(&text), href.replace(['<', '>'], ""));
                }
                out.push('\n');
            }
            Block::Chart(_) => {
                if !chart_note {
                    out.push_str(
                        "*Charts (envelopes, CPU per request, latency against load) are in `report.html`.*\n\n",
                    );
                    chart_note = true;
                }
            }
        }
    }
    out
}

/// Text with `<` escaped outside code spans, so that no measured string (a reason, a
/// CPU model) is taken for HTML by a Markdown renderer.
fn text_md(s: &str) -> String {
    s.split('`')
        .enumerate()
        .map(|(i, part)| if i % 2 == 1 { part.to_string() } else { part.replace('<', "\\<") })
        .collect::<Vec<_>>()
        .join("`")
}

/// Text safe inside a table cell.
fn cell(s: &str) -> String {
    text_md(&s.replace('|', "\\|").replace(['\n', '\r'], " "))
}

fn table(out: &mut String, t: &Table) {
    let n = t.headers.len();
    let _ = writeln!(out, "| {} |", t.headers.iter().map(|h| cell(h)).collect::<Vec<_>>().join(" | "));
    let align: Vec<&str> = t.headers.iter().map(|h| if document::numeric(h) { "---:" } else { "---" }).collect();
    let _ = writeln!(out, "|{}|", align.join("|"));
    for row in &t.rows {
        let cells: Vec<String> = match row {
            Row::Cells(c) => c.iter().map(|x| cell(x)).collect(),
            Row::Note(lead, text) => {
                let mut c: Vec<String> = lead.iter().map(|x| cell(x)).collect();
                c.push(format!("*{}*", cell(text).replace('*', "\\*")));
                c.resize(n.max(c.len()), String::new());
                c
            }
        };
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    out.push('\n');
}
