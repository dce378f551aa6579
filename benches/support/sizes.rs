//! The limiters the micro-benchmarks compare, sized to one memory budget: Tollgate's sketch and
//! pingora-limits' `Rate` at the same total bytes, as `benches/observe.rs` and
//! `benches/threads` build them.
//!
//! ```
//! use tollgate_benches::sizes;
//!
//! let sketch = sizes::sketch(2 << 20, sizes::DEFAULT_DEPTH);
//! assert!(sketch.memory_bytes() <= 2 << 20);
//! let _rate = sizes::pingora(2 << 20);
//! ```

use std::time::Duration;

use pingora_limits::rate::Rate;
use tollgate_sketch::{Builder, RateSketch};

/// The window of every limiter.
pub const WINDOW: Duration = Duration::from_secs(10);
/// The sketch's default number of rows (`Builder::depth`).
pub const DEFAULT_DEPTH: usize = 4;
/// pingora-limits' default number of rows (`Rate::new` uses 4).
pub const PINGORA_HASHES: usize = 4;

/// A sketch of `depth` rows and a [`WINDOW`] window in at most `budget` bytes.
///
/// # Panics
/// If `budget` is not a valid sketch size, or the sketch comes out over it.
#[must_use]
pub fn sketch(budget: usize, depth: usize) -> RateSketch {
    reserving(budget, depth, Some(Builder::DEFAULT_RESERVE_SHIFT))
}

/// [`sketch`] with reservations of shift `reserve` (`Builder::reserve_shift`; `None` off).
///
/// # Panics
/// As [`sketch`].
#[must_use]
pub fn reserving(budget: usize, depth: usize, reserve: Option<u32>) -> RateSketch {
    let sketch = RateSketch::builder()
        .window(WINDOW)
        .memory_bytes(budget)
        .depth(depth)
        .reserve_shift(reserve)
        .build()
        .expect("the benchmark budgets are valid sketch sizes");
    assert!(
        sketch.memory_bytes() <= budget,
        "the sketch holds {} bytes, over its budget of {budget}",
        sketch.memory_bytes()
    );
    sketch
}

/// pingora-limits' `Rate` in `budget` bytes: two estimators (current and previous interval)
/// of `PINGORA_HASHES x slots` `AtomicIsize` each, so 2 MiB is `slots = 2^15` and 32 MiB is
/// `slots = 2^19`.
///
/// # Panics
/// If `budget` is not a whole number of pingora's slots.
#[must_use]
pub fn pingora(budget: usize) -> Rate {
    let per_slot = 2 * PINGORA_HASHES * std::mem::size_of::<isize>();
    assert_eq!(
        budget % per_slot,
        0,
        "{budget} bytes is not a whole pingora shape"
    );
    Rate::new_with_estimator_config(WINDOW, PINGORA_HASHES, budget / per_slot)
}
