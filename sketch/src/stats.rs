//! What a sketch reports about itself, so an operator can see when it is undersized.

use std::time::Duration;

/// A sketch's state at one moment. See [`crate::RateSketch::stats`].
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use tollgate_sketch::{RateSketch, Tick};
/// let sketch = RateSketch::builder().window(Duration::from_secs(1)).memory_bytes(1 << 20).build()?;
/// for i in 0..1000u32 {
///     sketch.observe(&i.to_le_bytes(), 1, Tick::ZERO);
/// }
/// let stats = sketch.stats(Tick::ZERO);
/// assert_eq!(stats.events_current, 1000);
/// assert!(stats.overcount_bound >= 1);
/// # Ok::<(), tollgate_sketch::BuildError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Stats {
    /// The index of the current window (`now / window`).
    pub window_index: u64,
    /// The window length.
    pub window: Duration,
    /// Total weight observed in the current window, with the events reserved ahead for hot
    /// keys (see [`crate::Builder::reserve_shift`]) counted when reserved.
    pub events_current: u64,
    /// Total weight observed in the previous window.
    pub events_previous: u64,
    /// Fraction of the current window's front bits that are set (0 with no front).
    pub front_fill: f64,
    /// The chance that a key never seen in this window looks seen to the front (the front
    /// then stops absorbing first events; at 0.5 and above it is saturated).
    pub front_false_positive_rate: f64,
    /// With probability at least [`Stats::confidence`], no key's sliding estimate exceeds its
    /// true sliding count by more than this (Count-Min's `eps * N` plus the front's slack, plus
    /// what the folds for lagging ticks keep of the collisions of older windows), besides the
    /// fold of the key's own count: up to `L / (T - L)` of its count before the previous
    /// window, weighted by the previous window's share (see
    /// [`crate::Builder::lag_tolerance`]), and besides what threads hold of the key in
    /// reservations: at most `P * estimate / 2^s` with `P` threads observing it (see
    /// [`crate::Builder::reserve_shift`]; the reserved events themselves are in the events
    /// totals, so this bound covers their collisions).
    pub overcount_bound: u64,
    /// `1 - delta`, the probability that [`Stats::overcount_bound`] holds for a given key.
    pub confidence: f64,
    /// Bytes the sketch holds, all allocated at build.
    pub memory_bytes: usize,
}
