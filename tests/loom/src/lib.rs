//! Loom models of the lock-free races (in `tests/`), one race per model: the sketch's counters,
//! rotation, front and merge (`tests/sketch.rs`), the filter's policy swap
//! (`tests/policy.rs`), the run-time allow/deny lists (`tests/overlay.rs`), and the cluster's
//! suspects table (`tests/suspects.rs`).
//!
//! Run them with
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p tollgate-loom --release`.
//! Without `--cfg loom` the models compile to nothing.

#![cfg(loom)]

use std::time::Duration;

use tollgate_sketch::RateSketch;

/// Window length of the models' sketches, in nanoseconds.
pub const WINDOW: u64 = 100;

/// The smallest sketch of this shape: few cells, so that the model stays small.
pub fn tiny(depth: usize, front_share: f64) -> RateSketch {
    let builder = RateSketch::builder()
        .window(Duration::from_nanos(WINDOW))
        .depth(depth)
        .front_share(front_share)
        .seed(1);
    let minimum = builder.min_memory_bytes();
    builder
        .memory_bytes(minimum)
        .build()
        .expect("the minimum size builds")
}

/// Runs `model` under loom with a preemption bound, which keeps every model within seconds
/// while still covering all interleavings with up to that many forced preemptions (loom's
/// documentation: most concurrency bugs need two or three).
pub fn check(model: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.check(model);
}
