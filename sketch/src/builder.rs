//! Sizing a sketch: validated once, then every byte of the budget is placed.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use crate::bloom::Front;
use crate::count_min::{COUNT_MAX, CountMin, MAX_DEPTH};
use crate::error::BuildError;
use crate::hot::HotKeys;
use crate::pair::Fold;
use crate::reserve::Reserve;
use crate::sketch::RateSketch;
use crate::sync::{sketch_id, zeroed_atomics};
use crate::tally::{Stripes, Tally};
use crate::window::Windows;

/// Bytes per counter cell and per front register (one 64-bit window pair each).
const WORD_BYTES: usize = 8;

/// The narrowest row worth building.
const MIN_WIDTH: usize = 16;

/// Builds a [`RateSketch`]. Every setting has a default; the memory budget is the one to think
/// about (see the crate docs on sizing).
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use tollgate_sketch::RateSketch;
/// let sketch = RateSketch::builder()
///     .window(Duration::from_secs(10))
///     .memory_bytes(8 << 20)
///     .depth(4)
///     .front_share(0.125)
///     .build()?;
/// assert!(sketch.memory_bytes() <= 8 << 20);
/// # Ok::<(), tollgate_sketch::BuildError>(())
/// ```
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct Builder {
    window: Duration,
    memory_bytes: usize,
    depth: usize,
    front_share: f64,
    front_weight: u32,
    lag_tolerance: Option<Duration>,
    seed: Option<u64>,
    hot_bytes: Option<usize>,
    reserve_shift: u32,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            window: Duration::from_secs(10),
            memory_bytes: 4 << 20,
            depth: 4,
            front_share: 0.125,
            front_weight: 1,
            lag_tolerance: None,
            seed: None,
            hot_bytes: None,
            reserve_shift: Builder::DEFAULT_RESERVE_SHIFT,
        }
    }
}

impl Builder {
    /// The window length `T` (default 10 s). A limit of "N per T" is enforced on the sliding
    /// estimate over the last `T`.
    pub fn window(mut self, window: Duration) -> Builder {
        self.window = window;
        self
    }

    /// The whole memory budget in bytes: both windows, counters, front and bookkeeping
    /// (default 4 MiB). Nothing is allocated after `build`.
    pub fn memory_bytes(mut self, bytes: usize) -> Builder {
        self.memory_bytes = bytes;
        self
    }

    /// Rows of counters, 1 to 8 (default 4). More rows lower the chance that the overcount
    /// bound fails (`delta = e^-depth`) but cost one more cache line per event.
    pub fn depth(mut self, depth: usize) -> Builder {
        self.depth = depth;
        self
    }

    /// The share of memory given to the Bloom front, 0.0 to 0.5 (default 0.125). 0.0 builds a
    /// plain sketch with no front.
    pub fn front_share(mut self, share: f64) -> Builder {
        self.front_share = share;
        self
    }

    /// The most weight the front absorbs from a key's first event in a window (default 1).
    /// Every estimate of a key the front holds includes this much, so set it to a typical
    /// first event's weight: 1 for events, a packet's size for bytes. A heavier first event
    /// passes the rest on to the counters.
    pub fn front_weight(mut self, weight: u32) -> Builder {
        self.front_weight = weight;
        self
    }

    /// How far a tick may lag behind the newest tick already counted and still be promised an
    /// estimate no lower than the exact sliding count (default: the window / 64; at most half
    /// a window; zero for ticks that never step back).
    ///
    /// Ticks step back when threads read the clock and then race to count, or when a capture's
    /// interfaces interleave. A tick in window `k` that arrives after a newer tick has rolled
    /// the key's cells to window `k + 1` owes a share of window `k - 1`, which the cells no
    /// longer hold; the roll keeps `ceil(count_{k-1} * L / T)` for it. The cost: the previous
    /// window's count reads up to `L / (T - L)` of the counts before it too (1.6% at the
    /// default), weighted by the previous window's share. A tick that lags further than `L`
    /// may read up to that share of window `k - 1` too little; see the crate docs.
    ///
    /// Half a window is the ceiling because the fold is itself folded at the next roll: with
    /// `L = T` a steady key's previous count would grow by its whole history.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use tollgate_sketch::{RateSketch, Tick};
    /// let sketch = RateSketch::builder()
    ///     .window(Duration::from_millis(1))
    ///     .lag_tolerance(Duration::from_micros(100))
    ///     .build()?;
    /// let newest = Tick::from_nanos(1_000_000);
    /// let _ = sketch.observe(b"k", 2, Tick::from_nanos(500_000));
    /// let _ = sketch.observe(b"k", 2, newest);
    /// // 60 us behind the newest tick, back in the window before: that window counts whole,
    /// // 2 events and this one.
    /// assert!(sketch.observe(b"k", 1, Tick::from_nanos(940_000)) >= 3);
    /// # Ok::<(), tollgate_sketch::BuildError>(())
    /// ```
    pub fn lag_tolerance(mut self, lag: Duration) -> Builder {
        self.lag_tolerance = Some(lag);
        self
    }

    /// Bytes of the budget for the table of keys seen at their cap (default: 128 KiB for a
    /// budget of 8 MiB or more, none below), in whole 64-byte lines; 0 keeps none.
    ///
    /// [`RateSketch::observe_capped`] notes a key there once its count in the current window
    /// reached the cap; the key's later events in that window read one word of the table
    /// instead of its cells, the same answer from memory a core's cache holds. On a flood's
    /// hot keys that spares `depth + 1` cache lines per event. The table costs the counters
    /// its bytes, so a bigger one is only worth it when more keys than it holds sit at their
    /// cap at once.
    pub fn hot_keys_bytes(mut self, bytes: usize) -> Builder {
        self.hot_bytes = Some(bytes);
        self
    }

    /// Reservations for hot keys (default `Some(8)`): a thread that counts a key whose count
    /// in the window is `n >= 2^s` counts `n >> s` events more than it was given, in the same
    /// update, and answers the key's next events on that thread from that credit without
    /// writing any shared cell (see the crate docs, "Many cores"). `None` or `Some(0)` counts
    /// every event as it comes, as before reservations.
    ///
    /// What it costs: with `P` threads observing a key, its estimate reads at most
    /// `P * estimate / 2^s` above what it would read without reservations (1/256 of it per
    /// thread at the default); keys below `2^s` events in the window read exactly as without.
    /// What it buys: a hot key's cells are written about `2^s * (1 + ln(N / 2^s))` times per
    /// window for `N` events, all threads together, instead of `N`, so threads sharing hot keys
    /// stop bouncing their cache lines. It never reads below the truth.
    ///
    /// # Examples
    /// ```
    /// use tollgate_sketch::{RateSketch, Tick};
    /// let exact = RateSketch::builder().front_share(0.0).reserve_shift(None).build()?;
    /// let sloppy = RateSketch::builder().front_share(0.0).reserve_shift(Some(4)).build()?;
    /// for _ in 0..15 {
    ///     let _ = (exact.observe(b"k", 1, Tick::ZERO), sloppy.observe(b"k", 1, Tick::ZERO));
    /// }
    /// // At 16 events the sloppy sketch reserves 16 >> 4 = 1 event ahead.
    /// assert_eq!(exact.observe(b"k", 1, Tick::ZERO), 16);
    /// assert_eq!(sloppy.observe(b"k", 1, Tick::ZERO), 17);
    /// // Its next event is the one reserved: answered without a write.
    /// assert_eq!(sloppy.observe(b"k", 1, Tick::ZERO), 17);
    /// # Ok::<(), tollgate_sketch::BuildError>(())
    /// ```
    pub fn reserve_shift(mut self, shift: Option<u32>) -> Builder {
        self.reserve_shift = shift.unwrap_or(0);
        self
    }

    /// The default of [`Builder::reserve_shift`]: a hot key's thread reserves 1/256 of its
    /// count.
    pub const DEFAULT_RESERVE_SHIFT: u32 = 8;

    /// The largest [`Builder::reserve_shift`]: reservations start at `2^16` events a window.
    pub const MAX_RESERVE_SHIFT: u32 = 16;

    /// The hash seed (default: random per sketch). Sketches whose windows are merged must share
    /// it; a secret random seed keeps attackers from aiming keys at one counter.
    pub fn seed(mut self, seed: u64) -> Builder {
        self.seed = Some(seed);
        self
    }

    /// Checks the settings and allocates the sketch, all of its memory at once.
    ///
    /// # Errors
    /// A [`BuildError`] naming the setting that is out of range: a zero window, a depth outside
    /// 1 to 8, a front share outside 0.0 to 0.5, a zero front weight, or a budget too small for
    /// a sketch of this depth, a lag tolerance over half the window, or a reserve shift over
    /// [`Builder::MAX_RESERVE_SHIFT`].
    pub fn build(self) -> Result<RateSketch, BuildError> {
        if self.window.is_zero() {
            return Err(BuildError::ZeroWindow);
        }
        if !(1..=MAX_DEPTH).contains(&self.depth) {
            return Err(BuildError::DepthOutOfRange {
                requested: self.depth,
            });
        }
        if !(0.0..=0.5).contains(&self.front_share) {
            return Err(BuildError::FrontShareOutOfRange {
                requested: self.front_share,
            });
        }
        if self.front_weight == 0 {
            return Err(BuildError::ZeroFrontWeight);
        }
        let lag_tolerance = self.lag_tolerance.unwrap_or(self.window / 64);
        if lag_tolerance > self.window / 2 {
            return Err(BuildError::LagToleranceOutOfRange {
                requested: lag_tolerance,
                window: self.window,
            });
        }
        if self.reserve_shift > Builder::MAX_RESERVE_SHIFT {
            return Err(BuildError::ReserveShiftOutOfRange {
                requested: self.reserve_shift,
            });
        }
        let plan = self.plan()?;
        let window_nanos = u64::try_from(self.window.as_nanos()).unwrap_or(u64::MAX);
        let lag_nanos = u64::try_from(lag_tolerance.as_nanos()).unwrap_or(u64::MAX);
        Ok(RateSketch {
            counters: CountMin::new(
                zeroed_atomics(self.depth * plan.width),
                self.depth,
                plan.width,
                Fold::new(lag_nanos, window_nanos),
            ),
            front: Front::new(zeroed_atomics(plan.registers)),
            hot: HotKeys::new(plan.hot_bytes),
            events: Stripes::new(),
            merged_fronts: Tally::new(),
            windows: Windows::new(window_nanos),
            seed: self.seed.unwrap_or_else(random_seed),
            front_weight: self.front_weight,
            lag_tolerance,
            id: sketch_id(),
            reserve: Reserve::new(self.reserve_shift, COUNT_MAX),
        })
    }

    /// Splits the budget: fixed bookkeeping first, then the hot keys' table (see
    /// [`crate::hot`]: 128 KiB from 8 MiB of budget up), then the front's share, then the
    /// counters.
    fn plan(&self) -> Result<Plan, BuildError> {
        let hot_bytes = self.hot_bytes();
        let words = self
            .memory_bytes
            .saturating_sub(RateSketch::fixed_bytes() + hot_bytes)
            / WORD_BYTES;
        // Truncation toward zero keeps the front inside its share.
        let registers = (words as f64 * self.front_share) as usize;
        let width = (words - registers) / self.depth;
        if width < MIN_WIDTH {
            return Err(BuildError::MemoryTooSmall {
                requested: self.memory_bytes,
                minimum: self.min_memory_bytes(),
            });
        }
        Ok(Plan {
            width,
            registers,
            hot_bytes,
        })
    }

    /// The smallest memory budget that builds with the other settings as they are: 16 cells
    /// per row after the front's share, plus the fixed bookkeeping (about 5 KiB).
    ///
    /// # Examples
    /// ```
    /// use tollgate_sketch::RateSketch;
    /// let builder = RateSketch::builder().depth(2);
    /// let smallest = builder.min_memory_bytes();
    /// assert!(builder.clone().memory_bytes(smallest).build().is_ok());
    /// assert!(builder.memory_bytes(smallest / 2).build().is_err());
    /// ```
    #[must_use]
    pub fn min_memory_bytes(&self) -> usize {
        let cells = self.depth * MIN_WIDTH;
        // Rounded up, plus one word, so that truncating the front's share cannot starve a row.
        let words = (cells as f64 / (1.0 - self.front_share)).ceil() as usize + 1;
        RateSketch::fixed_bytes() + words * WORD_BYTES + self.hot_bytes.map_or(0, HotKeys::whole)
    }

    /// The bytes the hot keys' table takes from the budget.
    fn hot_bytes(&self) -> usize {
        self.hot_bytes
            .map_or_else(|| HotKeys::bytes_for(self.memory_bytes), HotKeys::whole)
    }
}

/// Where the budget goes.
struct Plan {
    width: usize,
    registers: usize,
    hot_bytes: usize,
}

/// A seed from the standard library's per-process random keys (no extra dependency).
fn random_seed() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(0x746f_6c6c_6761_7465);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_settings_are_errors() {
        let b = || RateSketch::builder();
        assert_eq!(
            b().window(Duration::ZERO).build().unwrap_err(),
            BuildError::ZeroWindow
        );
        assert_eq!(
            b().depth(0).build().unwrap_err(),
            BuildError::DepthOutOfRange { requested: 0 }
        );
        assert_eq!(
            b().depth(9).build().unwrap_err(),
            BuildError::DepthOutOfRange { requested: 9 }
        );
        assert!(matches!(
            b().front_share(0.6).build().unwrap_err(),
            BuildError::FrontShareOutOfRange { .. }
        ));
        assert!(matches!(
            b().front_share(f64::NAN).build().unwrap_err(),
            BuildError::FrontShareOutOfRange { .. }
        ));
        assert_eq!(
            b().front_weight(0).build().unwrap_err(),
            BuildError::ZeroFrontWeight
        );
        let window = Duration::from_secs(1);
        assert_eq!(
            b().window(window)
                .lag_tolerance(Duration::from_millis(501))
                .build()
                .unwrap_err(),
            BuildError::LagToleranceOutOfRange {
                requested: Duration::from_millis(501),
                window
            }
        );
        let half = b().window(window).lag_tolerance(window / 2).build();
        assert_eq!(half.unwrap().lag_tolerance(), window / 2);
        assert_eq!(
            b().window(window).build().unwrap().lag_tolerance(),
            window / 64
        );
        assert_eq!(
            b().reserve_shift(Some(17)).build().unwrap_err(),
            BuildError::ReserveShiftOutOfRange { requested: 17 }
        );
        for shift in [None, Some(0), Some(1), Some(16)] {
            assert!(b().reserve_shift(shift).build().is_ok());
        }
        let err = b().memory_bytes(100).build().unwrap_err();
        let BuildError::MemoryTooSmall { minimum, .. } = err else {
            panic!("{err:?}")
        };
        assert!(b().memory_bytes(minimum).build().is_ok());
        assert!(b().memory_bytes(minimum / 2).build().is_err());
    }

    #[test]
    fn the_budget_is_used_whole_and_never_exceeded() {
        for budget in [40_000, 1 << 20, (2 << 20) + 12_345, 32 << 20] {
            for share in [0.0, 0.125, 0.5] {
                let sketch = RateSketch::builder()
                    .memory_bytes(budget)
                    .front_share(share)
                    .build()
                    .unwrap();
                let used = sketch.memory_bytes();
                assert!(used <= budget, "{used} > {budget}");
                // Rounding loses less than one word per row plus one.
                assert!(
                    budget - used < WORD_BYTES * (MAX_DEPTH + 2),
                    "{used} of {budget}"
                );
            }
        }
    }
}
