//! switchyard configuration: file → raw types → validated model.
//!
//! The pipeline is `TOML text → spanned document (toml's parser) → Raw*
//! types (crate-private `raw`, located, only type-checked; see `read` for why
//! they are not filled by serde derive) → model ([`model`], fully
//! validated)`. Every stage reports into one collector, so a file with ten
//! mistakes gets ten diagnostics, each with `FILE:LINE:COL`, a message and,
//! where useful, a hint. Only a TOML syntax error stops early: the parser
//! cannot recover, so it is the single diagnostic.
//!
//! Validation reads the PEM files the configuration names (certificates,
//! keys, CAs; see `pem`) and keeps their contents in the model, so a
//! running engine never opens a file the check did not see, and a reload
//! reads renewed files again. Relative paths start at the configuration
//! file's directory ([`load`]) or the working directory ([`parse`]).
//!
//! Entry points:
//! - [`load`] / [`parse`]: `Ok(Config)` or every diagnostic (errors and
//!   warnings). Warnings alone do not fail; they are dropped on success.
//! - [`load_with_warnings`] / [`parse_with_warnings`]: the configuration when
//!   there is no error, together with all diagnostics, warnings included.
//!   `switchyard check` uses these so it can print warnings of a valid file.
//! - [`parse_offline`]: like [`parse_with_warnings`], reading no file (fuzzing).
//! - [`diff()`]: what changed between two validated configurations, by name
//!   (the input of a reload; its `Display` is a one-line summary for logs).

mod acme;
mod cache;
mod cluster;
mod compression;
mod diagnostic;
mod diff;
mod health;
mod l4;
pub mod model;
mod on_demand;
mod ops;
mod pem;
mod persistence;
mod protection;
mod raw;
mod read;
mod rule;
mod source;
mod syslog;
mod tls;
mod tracing;
mod units;
mod validate;

pub use acme::{is_dns_name, DEFAULT_STORAGE as DEFAULT_ACME_STORAGE};
pub use compression::{Compression, Encoding};
pub use diagnostic::{Diagnostic, Diagnostics, Severity};
pub use diff::{diff, Changes, Diff, PoolChange};
pub use model::*;
pub use protection::{ClientAddressHeader, Protection, Rate, DEFAULT_TABLE_SIZE};
pub use tls::{cipher_suite, kx_group, DEFAULT_SESSION_CACHE, GROUP_NAMES};
pub use tracing::{parse_endpoint, Endpoint, Tracing};

use std::path::Path;

/// Reads and validates the file at `path`. Diagnostics name the file as
/// `path.display()` shows it. Relative paths in it (certificates, keys) are
/// relative to the file's directory.
pub fn load(path: &Path) -> Result<Config, Diagnostics> {
    into_result(load_with_warnings(path))
}

/// Validates `source`; `file_name` is only used in diagnostics. Relative
/// paths in it (certificates, keys) are relative to the working directory.
pub fn parse(source: &str, file_name: &str) -> Result<Config, Diagnostics> {
    into_result(parse_with_warnings(source, file_name))
}

/// Like [`load`], but also returns the warnings of a valid file. The
/// configuration is `Some` exactly when no diagnostic is an error. An
/// unreadable file is one error at 1:1.
pub fn load_with_warnings(path: &Path) -> (Option<Config>, Diagnostics) {
    let file = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(source) => check(&source, &file, &pem::Files::beside(path)),
        Err(e) => {
            let diag = Diagnostic {
                file,
                line: 1,
                col: 1,
                severity: Severity::Error,
                message: format!("cannot read the configuration file: {e}"),
                hint: None,
            };
            (None, Diagnostics(vec![diag]))
        }
    }
}

/// Validates `source` as the contents of the file at `path` (already read by
/// the caller, who needs the text too): diagnostics name `path`, and relative
/// paths in it are relative to the file's directory, as with [`load`]. Also
/// returns the warnings of a valid file.
pub fn parse_file_with_warnings(source: &str, path: &Path) -> (Option<Config>, Diagnostics) {
    check(source, &path.display().to_string(), &pem::Files::beside(path))
}

/// Like [`parse`], but also returns the warnings of a valid file. The
/// configuration is `Some` exactly when no diagnostic is an error.
pub fn parse_with_warnings(source: &str, file_name: &str) -> (Option<Config>, Diagnostics) {
    check(source, file_name, &pem::Files::working_directory())
}

/// Like [`parse_with_warnings`], but reads no file the text names: each
/// certificate, key or CA file reports as unreadable. For text from an
/// untrusted source (the fuzzers), where a path such as `/dev/stdin` must
/// neither block nor be read.
pub fn parse_offline(source: &str, file_name: &str) -> (Option<Config>, Diagnostics) {
    check(source, file_name, &pem::Files::offline())
}

fn check(source: &str, file_name: &str, files: &pem::Files) -> (Option<Config>, Diagnostics) {
    let mut report = diagnostic::Report::new(source, file_name);
    let document = match toml::de::DeTable::parse(source) {
        Ok(document) => document,
        Err(e) => {
            let span = e.span().unwrap_or(0..0);
            let message = e.message().trim().replace('\n', "; ");
            report.error_hint(&span, format!("invalid TOML: {message}"), "see https://toml.io for the syntax");
            return (None, report.finish());
        }
    };
    let raw = read::read_config(&mut report, document.get_ref());
    let config = validate::validate(&mut report, &raw, files);
    let config = (!report.has_errors()).then_some(config);
    (config, report.finish())
}

fn into_result((config, diagnostics): (Option<Config>, Diagnostics)) -> Result<Config, Diagnostics> {
    config.ok_or(diagnostics)
}
