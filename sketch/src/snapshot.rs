//! Exporting one window and adding it into another sketch of the same shape.
//!
//! Count-Min counters are linear: the sum of two sketches' counters bounds the sum of their
//! keys' counts from above, so adding a window exported from one node into another gives an
//! estimate of the combined traffic that still never underestimates (cluster sync and warm
//! restart build on this). Fronts merge by OR; because a key may have had its first event
//! absorbed by each front merged in, the sketch counts the fronts merged into each window and
//! adds the front weight once per front to the estimate of any key the front holds.

use crate::clock::Tick;
use crate::error::MergeError;
use crate::sketch::RateSketch;

/// What two sketches must share for a window of one to be added into the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    /// Rows of counters.
    pub depth: usize,
    /// Counters per row.
    pub width: usize,
    /// Front registers.
    pub registers: usize,
    /// Window length in nanoseconds.
    pub window_nanos: u64,
    /// Hash seed.
    pub seed: u64,
    /// Front weight.
    pub front_weight: u32,
}

impl Shape {
    fn check(&self, theirs: &Shape) -> Result<(), MergeError> {
        let fields = [
            ("depth", self.depth as u64, theirs.depth as u64),
            ("width", self.width as u64, theirs.width as u64),
            (
                "front registers",
                self.registers as u64,
                theirs.registers as u64,
            ),
            ("window length (ns)", self.window_nanos, theirs.window_nanos),
            ("seed", self.seed, theirs.seed),
            (
                "front weight",
                u64::from(self.front_weight),
                u64::from(theirs.front_weight),
            ),
        ];
        match fields.into_iter().find(|(_, ours, theirs)| ours != theirs) {
            Some((field, ours, theirs)) => Err(MergeError::ShapeMismatch {
                field,
                ours,
                theirs,
            }),
            None => Ok(()),
        }
    }
}

/// One window of a sketch: its counters, front bits and totals, detached from the sketch.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use tollgate_sketch::{RateSketch, Tick};
/// let build = || RateSketch::builder().window(Duration::from_secs(1)).memory_bytes(1 << 16).seed(7).build();
/// let (a, b) = (build()?, build()?);
/// let now = Tick::ZERO;
/// for _ in 0..3 {
///     let _ = a.observe(b"k", 1, now);
///     let _ = b.observe(b"k", 1, now);
/// }
/// a.merge_window(&b.export_window(b.window_index(now)), now)?;
/// assert!(a.estimate(b"k", now) >= 6);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowSnapshot {
    shape: Shape,
    window: u64,
    counts: Vec<u32>,
    front: Vec<u32>,
    fronts: u64,
    events: u64,
}

impl WindowSnapshot {
    /// The shape of the sketch it came from.
    #[must_use]
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The window's index.
    #[must_use]
    pub fn window_index(&self) -> u64 {
        self.window
    }

    /// The counter values, row after row.
    #[must_use]
    pub fn counts(&self) -> &[u32] {
        &self.counts
    }

    /// The front's bits for this window, one 28-bit set per register.
    #[must_use]
    pub fn front_bits(&self) -> &[u32] {
        &self.front
    }

    /// How many fronts this window combines (1 plus those merged into it), 0 with no front.
    #[must_use]
    pub fn fronts(&self) -> u64 {
        self.fronts
    }

    /// Total weight observed in the window.
    #[must_use]
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Reassembles a snapshot from its parts (for one sent over the network or read from disk).
    ///
    /// # Errors
    /// [`MergeError::Corrupt`] if the parts do not fit the shape.
    pub fn from_parts(
        shape: Shape,
        window: u64,
        counts: Vec<u32>,
        front: Vec<u32>,
        fronts: u64,
        events: u64,
    ) -> Result<WindowSnapshot, MergeError> {
        if counts.len() != shape.depth * shape.width {
            return Err(MergeError::Corrupt {
                what: "counter count does not match depth x width",
            });
        }
        if front.len() != shape.registers {
            return Err(MergeError::Corrupt {
                what: "front length does not match the register count",
            });
        }
        if front
            .iter()
            .any(|&bits| bits >= 1 << crate::bloom::REGISTER_BITS)
        {
            return Err(MergeError::Corrupt {
                what: "front register has bits beyond its 28",
            });
        }
        Ok(WindowSnapshot {
            shape,
            window,
            counts,
            front,
            fronts,
            events,
        })
    }
}

impl RateSketch {
    /// This sketch's shape.
    #[must_use]
    pub fn shape(&self) -> Shape {
        Shape {
            depth: self.depth(),
            width: self.width(),
            registers: self.front_registers(),
            window_nanos: self.windows.len_nanos(),
            seed: self.seed,
            front_weight: self.front_weight,
        }
    }

    /// Copies out window `window` (an index from [`RateSketch::window_index`]). A window the
    /// sketch no longer holds exports as empty. Allocates: not for the hot path.
    #[must_use]
    pub fn export_window(&self, window: u64) -> WindowSnapshot {
        let (counters, front) = (&self.counters, &self.front);
        let counts = (0..counters.len())
            .map(|i| counters.cell_count(i, window))
            .collect();
        let bits = (0..front.len())
            .map(|i| front.register_bits(i, window))
            .collect();
        WindowSnapshot {
            shape: self.shape(),
            window,
            counts,
            front: bits,
            fronts: if front.is_enabled() {
                1 + self.merged_fronts.get(window)
            } else {
                0
            },
            events: self.events.get(window),
        }
    }

    /// Adds a window exported from a sketch of the same shape into the same window here, if
    /// that window is the current or the previous one at `now` (an older one no longer counts;
    /// a later one would roll this sketch's cells past its own present).
    ///
    /// # Errors
    /// [`MergeError::ShapeMismatch`] if the snapshot's shape differs from this sketch's;
    /// [`MergeError::WindowOutOfRange`] if its window is neither current nor previous at `now`.
    pub fn merge_window(&self, snapshot: &WindowSnapshot, now: Tick) -> Result<(), MergeError> {
        self.add_window(snapshot, now, snapshot.fronts)
    }

    /// Puts back a window a sketch of the same shape exported (a state file's, at a restart):
    /// as [`RateSketch::merge_window`], except that where this sketch has counted nothing in
    /// that window yet (it was just built), the snapshot's own front becomes this sketch's
    /// own rather than one merged in. Each key then reads what it read in the exported
    /// sketch, and a key first seen after it reads as in a sketch never restarted: a merged
    /// front adds the front weight to every key its window's front holds (that front may have
    /// absorbed a first event of the key, and so may this sketch's own), which for a front
    /// that is this sketch's own earlier life counts its first events twice.
    ///
    /// # Errors
    /// As [`RateSketch::merge_window`].
    pub fn restore_window(&self, snapshot: &WindowSnapshot, now: Tick) -> Result<(), MergeError> {
        let window = snapshot.window;
        let untouched = self.events.get(window) == 0 && self.merged_fronts.get(window) == 0;
        let fronts = if untouched {
            snapshot.fronts.saturating_sub(1)
        } else {
            snapshot.fronts
        };
        self.add_window(snapshot, now, fronts)
    }

    /// Adds `snapshot` into its window, counting `fronts` fronts merged into it.
    fn add_window(
        &self,
        snapshot: &WindowSnapshot,
        now: Tick,
        fronts: u64,
    ) -> Result<(), MergeError> {
        self.shape().check(&snapshot.shape)?;
        let current = self.window_index(now);
        if snapshot.window != current && Some(snapshot.window) != current.checked_sub(1) {
            return Err(MergeError::WindowOutOfRange {
                window: snapshot.window,
                current,
            });
        }
        for (index, &count) in snapshot.counts.iter().enumerate() {
            self.counters.merge_cell(index, count, snapshot.window);
        }
        for (index, &bits) in snapshot.front.iter().enumerate() {
            self.front.merge_register(index, bits, snapshot.window);
        }
        self.merged_fronts.add(snapshot.window, fronts);
        self.events.add(snapshot.window, snapshot.events);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn build(seed: u64) -> RateSketch {
        RateSketch::builder()
            .window(Duration::from_nanos(100))
            .memory_bytes(1 << 16)
            .seed(seed)
            .build()
            .unwrap()
    }

    #[test]
    fn merged_windows_add_up_and_never_underestimate() {
        let (a, b) = (build(3), build(3));
        let t = Tick::from_nanos(10);
        for i in 0..200u32 {
            let key = (i % 20).to_le_bytes();
            let _ = a.observe(&key, 1, t);
            let _ = b.observe(&key, 2, t);
        }
        let snapshot = b.export_window(0);
        assert_eq!(snapshot.events(), 400);
        a.merge_window(&snapshot, t).unwrap();
        for i in 0..20u32 {
            let est = a.estimate(&i.to_le_bytes(), t);
            assert!(est >= 30, "key {i}: {est}");
        }
        assert_eq!(a.stats(t).events_current, 600);
        // The merged window slides like a local one.
        assert!(a.estimate(&0u32.to_le_bytes(), Tick::from_nanos(150)) >= 15);
    }

    #[test]
    fn a_restored_window_reads_as_saved_and_a_merged_one_adds_its_front() {
        let saved = build(3);
        let t = Tick::from_nanos(10);
        let _ = saved.observe(b"once", 1, t);
        for _ in 0..3 {
            let _ = saved.observe(b"thrice", 1, t);
        }
        let snapshot = saved.export_window(saved.window_index(t));
        let (restored, merged) = (build(3), build(3));
        restored.restore_window(&snapshot, t).unwrap();
        merged.merge_window(&snapshot, t).unwrap();
        for key in [&b"once"[..], b"thrice", b"never"] {
            assert_eq!(restored.estimate(key, t), saved.estimate(key, t), "{key:?}");
        }
        // Another node's front may have absorbed a first event of a key this one's also did.
        assert_eq!(merged.estimate(b"once", t), saved.estimate(b"once", t) + 1);
        // A key first seen after the restore reads as in the sketch that never stopped.
        for sketch in [&saved, &restored] {
            let _ = sketch.observe(b"new", 1, t);
        }
        assert_eq!(restored.estimate(b"new", t), saved.estimate(b"new", t));
        assert_eq!(restored.estimate(b"new", t), 1);
        // Into a window that has counted, a restore merges as any window does.
        let busy = build(3);
        let _ = busy.observe(b"other", 1, t);
        busy.restore_window(&snapshot, t).unwrap();
        assert_eq!(busy.estimate(b"once", t), merged.estimate(b"once", t));
    }

    #[test]
    fn shapes_must_match() {
        let err = build(1)
            .merge_window(&build(2).export_window(0), Tick::ZERO)
            .unwrap_err();
        assert_eq!(
            err,
            MergeError::ShapeMismatch {
                field: "seed",
                ours: 1,
                theirs: 2
            }
        );
    }

    #[test]
    fn only_the_current_and_previous_windows_merge() {
        let (a, b) = (build(3), build(3));
        let at = |window: u64| Tick::from_nanos(window * 100 + 50);
        for window in [0, 6, 7, 9] {
            let result = a.merge_window(&b.export_window(window), at(7));
            assert_eq!(
                result.is_ok(),
                window == 6 || window == 7,
                "window {window}"
            );
        }
        assert_eq!(
            a.merge_window(&b.export_window(9), at(7)).unwrap_err(),
            MergeError::WindowOutOfRange {
                window: 9,
                current: 7
            }
        );
    }

    #[test]
    fn corrupt_parts_are_refused() {
        let shape = build(1).shape();
        let ok = WindowSnapshot::from_parts(
            shape,
            0,
            vec![0; shape.depth * shape.width],
            vec![0; shape.registers],
            1,
            0,
        );
        assert!(ok.is_ok());
        let short = WindowSnapshot::from_parts(shape, 0, vec![0; 3], vec![], 1, 0);
        assert!(matches!(short, Err(MergeError::Corrupt { .. })));
    }
}
