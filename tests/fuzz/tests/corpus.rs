//! Replays every kept input through the fuzz harnesses, so CI guards them without a fuzzer:
//! `corpus/<target>/` (seeds and what the fuzzer found worth keeping) and
//! `regressions/<target>/` (inputs that once broke an invariant).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

/// The files of `dir` (none if it does not exist), sorted.
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries
        .map(|e| e.expect("a readable directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    paths
}

/// Runs `check` on every corpus and regression file of `target`; fails naming each file that
/// panics, and if the corpus is empty (a replay of nothing guards nothing).
fn replay(target: &str, check: fn(&[u8])) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let corpus = files(&root.join("corpus").join(target));
    assert!(!corpus.is_empty(), "no corpus for {target}");
    let regressions = files(&root.join("regressions").join(target));
    let mut failed = Vec::new();
    for path in corpus.iter().chain(&regressions) {
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if catch_unwind(AssertUnwindSafe(|| check(&bytes))).is_err() {
            failed.push(path.display().to_string());
        }
    }
    assert!(
        failed.is_empty(),
        "{target}: these inputs fail: {failed:#?}"
    );
}

#[test]
fn frame() {
    replay("frame", tollgate_fuzz::frame::check);
}

#[test]
fn proxy_header() {
    replay("proxy_header", tollgate_fuzz::proxy_header::check);
}

#[test]
fn config() {
    replay("config", tollgate_fuzz::config::check);
}

#[test]
fn descriptors() {
    replay("descriptors", tollgate_fuzz::descriptors::check);
}

#[test]
fn capture() {
    replay("capture", tollgate_fuzz::capture::check);
}

#[test]
fn state() {
    replay("state", tollgate_fuzz::state::check);
}

#[test]
fn admin() {
    replay("admin", tollgate_fuzz::admin::check);
}

#[test]
fn cluster_lists() {
    replay("cluster_lists", tollgate_fuzz::cluster_lists::check);
}
