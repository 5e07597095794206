//! Golden tests: each `tests/golden/<kind>/NAME.toml` is validated and its
//! diagnostics (as `switchyard check` prints them) are compared with
//! `NAME.expected`.
//!
//! - `invalid/`: must be refused; `.expected` holds every diagnostic.
//! - `warnings/`: must be accepted; `.expected` holds its warnings.
//! - `valid/`: must be accepted without any diagnostic (no `.expected`).
//!
//! Run with `UPDATE_GOLDEN=1` to rewrite the `.expected` files after an
//! intended change, then review the diff.

#![allow(clippy::unwrap_used)]

use std::fs;
use std::path::{Path, PathBuf};

fn cases(kind: &str) -> Vec<PathBuf> {
    let dir = Path::new("tests/golden").join(kind);
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no cases in {}", dir.display());
    files
}

/// Compares (or rewrites) `.expected` for each case; `accept` says whether
/// the file must be valid.
fn check(kind: &str, accept: bool) {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut failures = Vec::new();
    for path in cases(kind) {
        let (config, diagnostics) = switchyard_config::load_with_warnings(&path);
        if config.is_some() != accept {
            failures.push(format!(
                "{}: expected it to be {}, got:\n{diagnostics}",
                path.display(),
                if accept { "accepted" } else { "refused" }
            ));
            continue;
        }
        let actual = format!("{diagnostics}\n");
        let expected_path = path.with_extension("expected");
        if update {
            fs::write(&expected_path, &actual).unwrap();
            continue;
        }
        let expected = fs::read_to_string(&expected_path).unwrap_or_default();
        if expected != actual {
            failures.push(format!(
                "{}: diagnostics differ (UPDATE_GOLDEN=1 to accept)\n--- expected\n{expected}--- actual\n{actual}",
                path.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn invalid_files_report_every_error() {
    check("invalid", false);
}

#[test]
fn warning_files_are_accepted_with_warnings() {
    check("warnings", true);
}

#[test]
fn valid_files_parse_cleanly() {
    for path in cases("valid") {
        let (config, diagnostics) = switchyard_config::load_with_warnings(&path);
        assert!(config.is_some() && diagnostics.is_empty(), "{}:\n{diagnostics}", path.display());
    }
}

#[test]
fn every_invalid_file_has_an_error_with_a_position() {
    for path in cases("invalid") {
        let err = switchyard_config::load(&path).unwrap_err();
        assert!(err.has_errors(), "{}", path.display());
        for d in err.iter() {
            assert!(d.line >= 1 && d.col >= 1, "{d}");
            assert!(d.to_string().starts_with(&format!("{}:{}:{}: ", path.display(), d.line, d.col)));
        }
    }
}
