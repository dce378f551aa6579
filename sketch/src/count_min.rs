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
//!
//! # Layout
//! Rows stay separate (row `r` is cells `r * width ..`), so a key's cells are `depth`
//! independent random cells and the bound above holds as stated. Blocked layouts, all of a
//! key's cells in one cache line or two, were measured and rejected: on the accuracy tool's
//! workload (a) at 2 MiB and depth 4 (light keys judged over / events wrongly over), rows give
//! 9 / 28; 4 of the 8 words of one 64-byte line 2,289 / 11,045; 4 of the 16 words of a 128-byte
//! pair of lines 537 / 2,276; 2 cells in each of two 128-byte blocks 49 / 98. Keys that share a
//! block share most of their cells, so one heavy key shadows all its block's light keys. The
//! speed they buy is small: one line per key was about 20% faster at 32 MiB and no faster at
//! 2 MiB, where the cost is the compare-and-swap per raised cell (3.5 per event on the Zipf
//! benchmark, about 10 ns each here), which blocking does not remove.
//!
//! The hot path instead does less around the misses: [`CountMin::snapshot`] locates and reads a
//! key's cells once, early (the caller then checks the front while the lines come in), and
//! [`CountMin::add`] starts its first attempt from those words instead of reading them again;
//! a stale word just fails its swap.

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
pub(crate) struct Snapshot {
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
    #[inline]
    fn slots(&self, hash: KeyHash) -> [usize; MAX_DEPTH] {
        let mut slots = [0; MAX_DEPTH];
        for (row, slot) in slots.iter_mut().enumerate().take(self.depth) {
            // `row` < MAX_DEPTH, so the cast is exact.
            *slot = row * self.width + hash.index(row as u32, self.width);
        }
        slots
    }

    /// Reads the cells at `slots`. All loads are issued before any is used, so their cache
    /// misses overlap instead of adding up.
    #[inline]
    fn read(&self, slots: [usize; MAX_DEPTH]) -> Snapshot {
        let mut words = [0; MAX_DEPTH];
        for row in 0..self.depth {
            // Relaxed: a stale value is caught by the compare-and-swap that must follow any use
            // of it in `add`, and in `estimate` it is only an older (smaller) count.
            words[row] = self.cells[slots[row]].load(Ordering::Relaxed);
        }
        Snapshot { slots, words }
    }

    #[inline]
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

    /// Locates and reads the key's cells: issued early, the loads are on their way in while the
    /// caller does other work, and [`CountMin::add`] starts from them.
    #[inline]
    pub(crate) fn snapshot(&self, hash: KeyHash) -> Snapshot {
        self.read(self.slots(hash))
    }

    /// The key's estimated counts in `window` and the one before, from a fresh read of the
    /// cells of `snapshot` (left in it).
    #[inline]
    pub(crate) fn reread(&self, snapshot: &mut Snapshot, window: u64) -> Halves {
        self.reload(snapshot);
        self.min(snapshot, window)
    }

    /// The key's estimated counts in `window` and the one before.
    pub(crate) fn estimate(&self, hash: KeyHash, window: u64) -> Halves {
        self.min(&self.snapshot(hash), window)
    }

    /// Counts `weight` for the key of `snapshot` in `window` (conservative update) and returns
    /// its estimated counts including it. The first attempt starts from the words in
    /// `snapshot`, however old: a swap lands only on the exact word read, so a stale word fails
    /// its swap and the update starts again from a fresh read (left in `snapshot`).
    #[inline]
    pub(crate) fn add(&self, snapshot: &mut Snapshot, weight: u32, window: u64) -> Halves {
        loop {
            let min = self.min(snapshot, window);
            let target = min.current.saturating_add(weight).min(COUNT_MAX);
            if self.raise(snapshot, window, target) {
                return Halves {
                    current: target,
                    previous: min.previous,
                };
            }
            self.reload(snapshot);
        }
    }

    /// Reads the snapshot's cells again, in place.
    #[inline]
    fn reload(&self, snapshot: &mut Snapshot) {
        for row in 0..self.depth {
            // Relaxed: as in `read`.
            snapshot.words[row] = self.cells[snapshot.slots[row]].load(Ordering::Relaxed);
        }
    }

    /// Raises every cell below `target` to it, each from exactly the word read; false if any
    /// cell changed since it was read.
    #[inline]
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
