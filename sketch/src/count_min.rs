//! The Count-Min matrix with conservative update, lock-free.
//!
//! Count-Min (Cormode and Muthukrishnan, "An improved data stream summary: the count-min sketch
//! and its applications", 2005): `depth` rows of `width` counters; a key adds to one counter per
//! row and its estimate is the minimum over its counters. With `N` events in a window, the
//! estimate of any key exceeds its true count by more than `eps * N`, `eps = e / width`, with
//! probability at most `delta = e^-depth`, and it never falls below the true count.
//!
//! Conservative update (Estan and Varghese, "New directions in traffic measurement and
//! accounting", 2002) raises each of the key's counters only to `min + weight` instead of adding
//! `weight` to all of them, which keeps the bound and makes the typical error far smaller on
//! skewed traffic. Done naively with `fetch_max` it loses counts when two threads update one
//! key at once (both read the same minimum). Here the update is a snapshot then a
//! compare-and-swap of every counter that must rise, from exactly the value read; if any swap
//! fails the whole update starts again from a fresh read. A completed update therefore raised
//! every counter of the key from a state in which its minimum was what it read, so no count is
//! lost (the loom model `observe_observe_one_key` checks this). A retry after a partly applied
//! update may count that update twice in some rows: an overestimate, and only under contention
//! on the very same counters.

use crate::hash::KeyHash;
use crate::pair::{COUNTER, Halves};
use crate::sync::{AtomicU64, Ordering};

/// The most rows a sketch may have.
pub(crate) const MAX_DEPTH: usize = 8;

/// The largest count a counter holds per window; counts saturate here and never wrap.
pub(crate) const COUNT_MAX: u32 = COUNTER.half_max();

/// `depth` rows of `width` counter cells (window pairs), row after row in one allocation.
#[derive(Debug)]
pub(crate) struct CountMin {
    cells: Box<[AtomicU64]>,
    depth: usize,
    width: usize,
}

/// A key's cell positions and the words read from them.
struct Snapshot {
    slots: [usize; MAX_DEPTH],
    words: [u64; MAX_DEPTH],
}

impl CountMin {
    /// Wraps `cells`, which must hold `depth * width` zeroed cells.
    pub(crate) fn new(cells: Box<[AtomicU64]>, depth: usize, width: usize) -> CountMin {
        debug_assert!((1..=MAX_DEPTH).contains(&depth) && width > 0);
        debug_assert_eq!(cells.len(), depth * width);
        CountMin {
            cells,
            depth,
            width,
        }
    }

    pub(crate) fn depth(&self) -> usize {
        self.depth
    }

    pub(crate) fn width(&self) -> usize {
        self.width
    }

    pub(crate) fn len(&self) -> usize {
        self.cells.len()
    }

    /// The positions of a key's cells, one per row.
    fn slots(&self, hash: KeyHash) -> [usize; MAX_DEPTH] {
        let mut slots = [0; MAX_DEPTH];
        for (row, slot) in slots.iter_mut().enumerate().take(self.depth) {
            // `row` < MAX_DEPTH, so the cast is exact.
            *slot = row * self.width + hash.index(row as u32, self.width);
        }
        slots
    }

    /// Reads the key's cells. All loads are issued before any is used, so their cache misses
    /// overlap instead of adding up.
    fn read(&self, slots: [usize; MAX_DEPTH]) -> Snapshot {
        let mut words = [0; MAX_DEPTH];
        for row in 0..self.depth {
            // Relaxed: a stale value is caught by the compare-and-swap that must follow any use
            // of it in `add`, and in `estimate` it is only an older (smaller) count.
            words[row] = self.cells[slots[row]].load(Ordering::Relaxed);
        }
        Snapshot { slots, words }
    }

    fn min(&self, snapshot: &Snapshot, window: u64) -> Halves {
        let mut min = Halves {
            current: u32::MAX,
            previous: u32::MAX,
        };
        for &word in &snapshot.words[..self.depth] {
            let halves = COUNTER.halves(word, window);
            min.current = min.current.min(halves.current);
            min.previous = min.previous.min(halves.previous);
        }
        min
    }

    /// Touches the key's cells so that their cache lines are on the way in while the caller
    /// does other work.
    pub(crate) fn prefetch(&self, hash: KeyHash) {
        let _ = self.read(self.slots(hash));
    }

    /// The key's estimated counts in `window` and the one before.
    pub(crate) fn estimate(&self, hash: KeyHash, window: u64) -> Halves {
        self.min(&self.read(self.slots(hash)), window)
    }

    /// Counts `weight` for the key in `window` (conservative update) and returns its estimated
    /// counts including it.
    pub(crate) fn add(&self, hash: KeyHash, weight: u32, window: u64) -> Halves {
        let slots = self.slots(hash);
        loop {
            let snapshot = self.read(slots);
            let min = self.min(&snapshot, window);
            let target = min.current.saturating_add(weight).min(COUNT_MAX);
            if self.raise(&snapshot, window, target) {
                return Halves {
                    current: target,
                    previous: min.previous,
                };
            }
        }
    }

    /// Raises every cell below `target` to it, each from exactly the word read; false if any
    /// cell changed since it was read.
    fn raise(&self, snapshot: &Snapshot, window: u64, target: u32) -> bool {
        for row in 0..self.depth {
            let word = snapshot.words[row];
            if COUNTER.halves(word, window).current >= target {
                continue;
            }
            let raised = COUNTER.update_current(word, window, |count| count.max(target));
            // Relaxed: each cell is an independent counter; what makes the update correct is
            // that the swap lands only on the exact word read (one location's modification
            // order), not any ordering with other memory.
            if self.cells[snapshot.slots[row]]
                .compare_exchange(word, raised, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
            {
                return false;
            }
        }
        true
    }

    /// Adds `add` to cell `index` in `window`, for merging another sketch's window in.
    pub(crate) fn merge_cell(&self, index: usize, add: u32, window: u64) {
        if add != 0 {
            COUNTER.merge_into(&self.cells[index], window, |count| {
                count.saturating_add(add)
            });
        }
    }

    /// What cell `index` counted in `window`, for exporting a window.
    pub(crate) fn cell_count(&self, index: usize, window: u64) -> u32 {
        // Relaxed: a snapshot of a live counter; any value it had is a valid export.
        COUNTER.value_of(self.cells[index].load(Ordering::Relaxed), window)
    }
}
