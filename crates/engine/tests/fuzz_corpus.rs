//! Replays every saved fuzz input through the fuzz entry points on the stable
//! toolchain: the corpora under `fuzz/corpus/TARGET/` (seeds and what the
//! campaigns kept) and the inputs that once broke something, under
//! `fuzz/regressions/TARGET/`. Each entry point checks its invariants and
//! panics when one breaks, so a regression fails here with the file's name.

use std::path::{Path, PathBuf};

use switchyard_engine::fuzz::TARGETS;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The files directly in `dir`, sorted; none when it does not exist.
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_file()).collect();
    files.sort();
    files
}

/// Runs every file of `fuzz/KIND/TARGET/` through its target; returns how
/// many ran. Fails naming every file that broke an invariant.
fn replay(kind: &str) -> usize {
    let mut count = 0;
    let mut broken = Vec::new();
    for (name, check) in TARGETS {
        for path in inputs(&fuzz_dir().join(kind).join(name)) {
            let data = std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            if std::panic::catch_unwind(|| check(&data)).is_err() {
                broken.push(format!("{name}: {}", path.display()));
            }
            count += 1;
        }
    }
    assert!(broken.is_empty(), "inputs breaking an invariant (panics above):\n{}", broken.join("\n"));
    count
}

#[test]
fn every_target_has_a_seed_corpus() {
    for (name, _) in TARGETS {
        let dir = fuzz_dir().join("corpus").join(name);
        assert!(!inputs(&dir).is_empty(), "no corpus for fuzz target {name} in {}", dir.display());
        assert!(fuzz_dir().join("fuzz_targets").join(format!("{name}.rs")).is_file(), "no fuzz target file for {name}");
    }
}

#[test]
fn corpora_replay_cleanly() {
    assert!(replay("corpus") >= TARGETS.len());
}

#[test]
fn regressions_replay_cleanly() {
    replay("regressions");
}
