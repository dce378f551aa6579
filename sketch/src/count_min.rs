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
use crate::pair::{COUNTER, Fold, Halves, UNKNOWN};
use crate::reserve::Reserve;
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
    /// What a roll forward keeps of the window it drops, for lagging ticks.
    fold: Fold,
}

/// The depth of the default build (see `Builder::depth`). Its observes take a path of their
/// own, with `D` = `FIXED_DEPTH` in [`Cells`] and [`Snapshot`]: the rows' loops have a constant
/// count, so they unroll, the arrays stay in registers and no bounds check remains (callgrind
/// and the timed runs: see the README's "### Speed").
pub(crate) const FIXED_DEPTH: usize = 4;

/// How many of an array of `D` rows are a key's, in a sketch of `depth` rows: all `D` for the
/// fixed depth, the first `depth` of `MAX_DEPTH` otherwise. Known at compile time for
/// `D` = [`FIXED_DEPTH`].
#[inline(always)]
const fn rows<const D: usize>(depth: usize) -> usize {
    if D == MAX_DEPTH { depth } else { D }
}

/// A key's cells, one per row, in an array of `D` entries: `D` = [`FIXED_DEPTH`] only for a
/// matrix of exactly that depth, where every entry is the key's; `D` = [`MAX_DEPTH`] for any
/// depth, where only the first `depth` entries are the key's and the rest repeat cell 0 and are
/// never used.
///
/// The cells are held as references, located once: the reads, the prefetches and the swaps
/// that follow index nothing, so they carry no bounds checks.
pub(crate) struct Cells<'a, const D: usize> {
    cells: [&'a AtomicU64; D],
    depth: usize,
}

impl<'a, const D: usize> Cells<'a, D> {
    /// The key's cells.
    #[inline]
    fn get(&self) -> &[&'a AtomicU64] {
        &self.cells[..rows::<D>(self.depth)]
    }
}

/// A key's cells (borrowed: located once, never copied) and the words read from them.
pub(crate) struct Snapshot<'a, const D: usize> {
    cells: &'a Cells<'a, D>,
    words: [u64; D],
}

impl<const D: usize> Snapshot<'_, D> {
    /// The words read from the key's cells.
    #[inline]
    fn words(&self) -> &[u64] {
        &self.words[..rows::<D>(self.cells.depth)]
    }
}

impl CountMin {
    /// Wraps `cells`, which must hold `depth * width` zeroed cells.
    /// Rolls fold with `fold` (see [`crate::pair`]).
    pub(crate) fn new(cells: Box<[AtomicU64]>, depth: usize, width: usize, fold: Fold) -> CountMin {
        debug_assert!((1..=MAX_DEPTH).contains(&depth) && width > 0);
        debug_assert_eq!(cells.len(), depth * width);
        CountMin {
            cells,
            depth,
            width,
            fold,
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

    /// What a roll keeps of the window it drops.
    pub(crate) fn fold(&self) -> Fold {
        self.fold
    }

    /// Locates a key's cells, one per row, without reading them (see [`CountMin::read`]).
    ///
    /// Row `r`'s cell is `r * width + index(r)`, with the probes of double hashing stepped
    /// here rather than recomputed per row (the same indices as [`KeyHash::index`]).
    #[inline]
    pub(crate) fn locate<const D: usize>(&self, hash: KeyHash) -> Cells<'_, D> {
        debug_assert!(D == MAX_DEPTH || D == self.depth);
        // A placeholder for the rows past `depth`: cell 0 exists (depth and width are >= 1).
        let mut cells = [&self.cells[0]; D];
        let (mut probe, step) = (hash.as_u64(), hash.step());
        let mut row = 0;
        for cell in &mut cells[..rows::<D>(self.depth)] {
            *cell = &self.cells[row + crate::hash::reduce(probe, self.width)];
            probe = probe.wrapping_add(step);
            row += self.width;
        }
        Cells {
            cells,
            depth: self.depth,
        }
    }

    /// Locates a key's cells like [`CountMin::locate`] and reads them like [`CountMin::read`],
    /// in one pass: each cell's load is issued as soon as its address is known. Apart, the
    /// references went to the stack and were copied and reloaded before the first load.
    #[inline]
    pub(crate) fn locate_read<const D: usize>(&self, hash: KeyHash) -> (Cells<'_, D>, [u64; D]) {
        debug_assert!(D == MAX_DEPTH || D == self.depth);
        // A placeholder for the rows past `depth`: cell 0 exists (depth and width are >= 1).
        let mut cells = [&self.cells[0]; D];
        let mut words = [0; D];
        let (mut probe, step) = (hash.as_u64(), hash.step());
        let mut row = 0;
        for (cell, word) in cells[..rows::<D>(self.depth)]
            .iter_mut()
            .zip(words.iter_mut())
        {
            let found = &self.cells[row + crate::hash::reduce(probe, self.width)];
            // Relaxed: as in `reload`.
            *word = found.load(Ordering::Relaxed);
            *cell = found;
            probe = probe.wrapping_add(step);
            row += self.width;
        }
        let located = Cells {
            cells,
            depth: self.depth,
        };
        (located, words)
    }

    /// The snapshot of `cells` holding `words`, read from them by [`CountMin::locate_read`].
    #[inline]
    pub(crate) fn snapshot<'a, const D: usize>(
        cells: &'a Cells<'a, D>,
        words: [u64; D],
    ) -> Snapshot<'a, D> {
        Snapshot { cells, words }
    }

    /// Reads the cells of `located` (from [`CountMin::locate`]). All loads are issued before
    /// any is used, so their cache misses overlap instead of adding up.
    #[inline]
    pub(crate) fn read<'a, const D: usize>(&self, cells: &'a Cells<'a, D>) -> Snapshot<'a, D> {
        let mut words = [0; D];
        for (word, cell) in words.iter_mut().zip(cells.get()) {
            // Relaxed: as in `reload`.
            *word = cell.load(Ordering::Relaxed);
        }
        Snapshot { cells, words }
    }

    #[inline(always)]
    fn min<const D: usize>(&self, snapshot: &Snapshot<'_, D>, window: u64) -> Halves {
        if let Some(min) = COUNTER.min_if_held(snapshot.words(), window) {
            return min;
        }
        let mut min = Halves {
            current: u32::MAX,
            previous: u32::MAX,
        };
        for &word in snapshot.words() {
            let halves = COUNTER.halves(word, window);
            min.current = min.current.min(halves.current);
            min.previous = min.previous.min(halves.previous);
        }
        // Every row was ahead of a lagging tick: none knows the window before, and none needs
        // to, for each row's older half, read as current, includes its fold of that window.
        // With some rows not ahead the minimum is still sound: an ahead row's current value
        // alone bounds the sliding count, the others' halves each bound their own window.
        if min.previous == UNKNOWN {
            min.previous = 0;
        }
        min
    }

    /// Prefetches the key's cells, waiting for nothing: their cache lines are on their way in when a
    /// later observe of the key needs them. A batch of keys touched first, then counted, has
    /// its misses overlap across keys instead of paying them one key after another.
    ///
    /// `D` as in [`Cells`]: for [`FIXED_DEPTH`] the rows' loop has a constant count and
    /// unrolls.
    #[inline]
    pub(crate) fn touch<const D: usize>(&self, hash: KeyHash) {
        debug_assert!(D == MAX_DEPTH || D == self.depth);
        // Each cell prefetched as it is found, with no array of them built (callgrind: the
        // array cost a batched frame 65 instructions more than the indices it replaced).
        let (mut probe, step) = (hash.as_u64(), hash.step());
        let mut row = 0;
        for _ in 0..rows::<D>(self.depth) {
            crate::memory::prefetch(&self.cells[row + crate::hash::reduce(probe, self.width)]);
            probe = probe.wrapping_add(step);
            row += self.width;
        }
    }

    /// Prefetches the cells of `located` (see [`CountMin::touch`]).
    #[inline]
    pub(crate) fn prefetch<const D: usize>(&self, cells: &Cells<'_, D>) {
        // A prefetch, not a load: it retires at once, so a batch's touches never wait for
        // their lines and all of them are in flight together.
        for cell in cells.get() {
            crate::memory::prefetch(cell);
        }
    }

    /// The key's estimated counts in `window` and the one before, from the words of
    /// `snapshot` as they were read.
    #[inline(always)]
    pub(crate) fn counts<const D: usize>(&self, snapshot: &Snapshot<'_, D>, window: u64) -> Halves {
        self.min(snapshot, window)
    }

    /// The key's estimated counts in `window` and the one before, from a fresh read of the
    /// cells of `snapshot` (left in it).
    #[inline]
    pub(crate) fn reread<const D: usize>(
        &self,
        snapshot: &mut Snapshot<'_, D>,
        window: u64,
    ) -> Halves {
        self.reload(snapshot);
        self.min(snapshot, window)
    }

    /// The key's estimated counts in `window` and the one before.
    pub(crate) fn estimate(&self, hash: KeyHash, window: u64) -> Halves {
        self.min(&self.read(&self.locate::<MAX_DEPTH>(hash)), window)
    }

    /// Counts `weight` for the key of `snapshot` in `window` (conservative update) and returns
    /// its estimated counts including it, and how many events it reserved on top (see
    /// [`crate::reserve`]: by `reserve`, and only when every cell holds exactly `window`).
    /// `read` is [`CountMin::counts`] of `snapshot` as it is (the caller has it already: the
    /// first attempt does not work it out again). The first attempt starts from the words in
    /// `snapshot`, however old: a swap lands only on the exact word read, so a stale word
    /// fails its swap and the update starts again from a fresh read (left in `snapshot`).
    ///
    /// Inlined into the observe that counts (see `RateSketch::count`): out of line its frame
    /// cost about 20 instructions per counted event.
    #[inline(always)]
    pub(crate) fn add<const D: usize>(
        &self,
        snapshot: &mut Snapshot<'_, D>,
        read: Halves,
        weight: u32,
        window: u64,
        reserve: Reserve,
    ) -> (Halves, u32) {
        debug_assert_eq!(read, self.min(snapshot, window));
        #[cfg(tollgate_contention)]
        crate::contention::update();
        let mut min = read;
        loop {
            let counted = min.current.saturating_add(weight).min(COUNT_MAX);
            // Only on words of exactly this window: a lagging tick's rows ahead are added to,
            // not raised, and a reservation there would follow the fold into the next window.
            let extra =
                if reserve.is_on() && COUNTER.min_if_held(snapshot.words(), window).is_some() {
                    reserve.of(counted, weight)
                } else {
                    0
                };
            // At most COUNT_MAX: `of` keeps `counted + extra` within the ceiling, which is.
            let target = counted + extra;
            if self.raise(snapshot, window, target, weight) {
                let counts = Halves {
                    current: target,
                    previous: min.previous,
                };
                return (counts, extra);
            }
            #[cfg(tollgate_contention)]
            crate::contention::failed_swap();
            self.reload(snapshot);
            min = self.min(snapshot, window);
        }
    }

    /// Reads the snapshot's cells again, in place.
    #[inline]
    fn reload<const D: usize>(&self, snapshot: &mut Snapshot<'_, D>) {
        for (word, cell) in snapshot.words.iter_mut().zip(snapshot.cells.get()) {
            // Relaxed: a stale value is caught by the compare-and-swap that must follow any use
            // of it in `add`, and in `estimate` it is only an older (smaller) count.
            *word = cell.load(Ordering::Relaxed);
        }
    }

    /// Raises every cell below `target` to it, each from exactly the word read, and adds
    /// `weight` to the cells a newer tick has rolled past `window`; false if any cell changed
    /// since it was read.
    ///
    /// A cell ahead is added to, not raised: its older half is this window's count plus the
    /// fold of the window before, and that fold must survive on top of every count added
    /// later. Raising it to `target` could swallow the fold when the minimum came from a row
    /// without one.
    #[inline]
    fn raise<const D: usize>(
        &self,
        snapshot: &Snapshot<'_, D>,
        window: u64,
        target: u32,
        weight: u32,
    ) -> bool {
        for (cell, &word) in snapshot.cells.get().iter().zip(snapshot.words()) {
            let raised = match COUNTER.current_in(word, window) {
                // The usual case, a word of this window: decoded once, and `target` is at
                // most COUNT_MAX, the largest value a half holds.
                Some(current) if current >= target => continue,
                Some(_) => COUNTER.with_current(word, target),
                None => {
                    let ahead = COUNTER.is_ahead(word, window);
                    if !ahead && COUNTER.halves(word, window).current >= target {
                        continue;
                    }
                    COUNTER.update_current(word, window, self.fold, |count| {
                        if ahead {
                            count.saturating_add(weight)
                        } else {
                            count.max(target)
                        }
                    })
                }
            };
            // Relaxed: each cell is an independent counter; what makes the update correct is
            // that the swap lands only on the exact word read (one location's modification
            // order), not any ordering with other memory.
            if cell
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
            COUNTER.merge_into(&self.cells[index], window, self.fold, |count| {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::zeroed_atomics;

    #[test]
    fn a_lagging_add_keeps_the_fold_of_a_row_ahead() {
        // Windows of 100 ns, tolerance 25: a roll keeps a quarter of the window it drops.
        let fold = Fold::new(25, 100);
        let counters = CountMin::new(zeroed_atomics(2 * 16), 2, 16, fold);
        let hash = KeyHash::of(1, b"x");
        let located = counters.locate::<MAX_DEPTH>(hash);
        let word = |row: usize| located.cells[row];
        // The key had 40 events in window 1 and 5 in window 2, in both rows; another key's
        // tick in window 3 rolled row 1: it holds 5 + ceil(40 / 4) for window 2.
        let two =
            COUNTER.update_current(COUNTER.update_current(0, 1, fold, |_| 40), 2, fold, |_| 5);
        word(0).store(two, Ordering::Relaxed);
        word(1).store(
            COUNTER.update_current(two, 3, fold, |_| 1),
            Ordering::Relaxed,
        );
        // A lagging tick of window 2 counts 1: row 0 is raised to 6, row 1 (ahead) is added
        // to, 16. Raising row 1 to 6 would leave it at 15 and swallow a point of its fold.
        let located = counters.locate::<MAX_DEPTH>(hash);
        let mut snapshot = counters.read(&located);
        let read = counters.counts(&snapshot, 2);
        let (counts, reserved) = counters.add(&mut snapshot, read, 1, 2, Reserve::NONE);
        assert_eq!(reserved, 0);
        assert_eq!(
            counts,
            Halves {
                current: 6,
                previous: 40
            }
        );
        // Row 0 rolls too (another key, window 3): every row is ahead of window 2 now. A tick
        // of window 2 that lags by the whole tolerance owes window 1 a quarter: 6 + 10.
        let rolled = COUNTER.update_current(word(0).load(Ordering::Relaxed), 3, fold, |_| 1);
        word(0).store(rolled, Ordering::Relaxed);
        assert_eq!(
            counters.estimate(hash, 2),
            Halves {
                current: 16,
                previous: 0
            }
        );
    }
}
