//! Reports of a benchmark run: `results.json` (raw, schema-versioned), `report.md` and a
//! self-contained `report.html` (inline CSS and SVG charts, nothing fetched from
//! anywhere), and the comparison of two results files behind `switchyard bench compare`.
//!
//! The report shows every cell of the matrix — measured, not supported or failed, with
//! the reason — and says which figure to trust: on a shared 2-core machine the proxy's
//! CPU time per request, not requests/s, which mostly measures the load generator. Runs
//! where the generator was saturated are flagged.
//!
//! Layout: [`model`] derives medians and spreads from the runs; [`document`] lays the
//! report out as blocks (tables from [`tables`]) that [`markdown`] and [`html`] render
//! alike; [`charts`] draws the SVG charts; [`compare`](compare()) compares two files.

mod charts;
mod compare;
mod document;
mod html;
mod markdown;
mod model;
mod tables;
#[cfg(test)]
mod tests;

use std::fs;
use std::io::{self, Write as _};
use std::path::Path;

use crate::results::{Results, SCHEMA_VERSION};

/// Name of the raw results file inside an output folder.
pub const RESULTS_FILE: &str = "results.json";
/// Name of the Markdown report inside an output folder.
pub const MARKDOWN_FILE: &str = "report.md";
/// Name of the HTML report inside an output folder.
pub const HTML_FILE: &str = "report.html";

/// Writes `results.json` (pretty, schema-versioned), `report.md` and `report.html`
/// into `out`, creating the folder if missing. Each file is written to a temporary
/// name first and renamed, so a reader never sees half a file.
pub fn write(results: &Results, out: &Path) -> io::Result<()> {
    fs::create_dir_all(out)?;
    let mut versioned = results.clone();
    versioned.schema = SCHEMA_VERSION;
    let json = serde_json::to_string_pretty(&versioned).map_err(io::Error::other)?;
    write_file(&out.join(RESULTS_FILE), json.as_bytes())?;
    write_file(&out.join(MARKDOWN_FILE), markdown::render(&versioned).as_bytes())?;
    write_file(&out.join(HTML_FILE), html::render(&versioned).as_bytes())?;
    Ok(())
}

/// Writes `bytes` to `path` through a temporary file in the same folder.
fn write_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path)
}

/// Reads a `results.json`, refusing a file of another schema version with an error
/// that names both versions (the error kind is [`io::ErrorKind::InvalidData`]).
pub fn read(path: &Path) -> io::Result<Results> {
    let text = fs::read_to_string(path)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot read {}: {e}", path.display())))?;
    parse(&text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", path.display())))
}

/// Parses results JSON, checking the schema version before the rest.
fn parse(text: &str) -> Result<Results, String> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
    let schema = value.get("schema").ok_or("not a switchyard results file (no `schema` field)")?;
    match schema.as_u64() {
        Some(v) if v == u64::from(SCHEMA_VERSION) => {}
        Some(v) => {
            return Err(format!(
                "results schema version {v}, but this switchyard reads version {SCHEMA_VERSION}; \
                 use the switchyard version that wrote it, or re-run `switchyard bench`"
            ))
        }
        None => return Err(format!("`schema` is not a version number: {schema}")),
    }
    serde_json::from_value(value).map_err(|e| format!("does not match results schema {SCHEMA_VERSION}: {e}"))
}

/// Compares two results files: per test, a Markdown table of every (size, target)
/// measured in both with the headline figures of A and B and their ratio B/A
/// (requests/s and proxy CPU µs per request, marked when the difference exceeds the
/// runs' spread), after the machine, method and version differences; cells found in
/// only one file, or measured in only one, are listed.
pub fn compare(a: &Path, b: &Path) -> io::Result<String> {
    let ra = read(a)?;
    let rb = read(b)?;
    Ok(compare::compare_results(&ra, &rb, a, b))
}
