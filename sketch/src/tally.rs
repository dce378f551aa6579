//! Per-window running totals: events counted, fronts merged.
//!
//! A [`Tally`] keeps one word for each of the last [`WINDOWS`] windows (slot `window & 7`),
//! `[epoch:16 | total:48]`, reset lazily by the first add that finds it holding an older
//! window, like the counter cells. Eight, not two: the overcount bound needs the totals of the
//! windows whose counts a roll folds forward for lagging ticks (see [`crate::pair`]), and a
//! stripe's cache line has the room. Events are tallied
//! on a stripe per thread ([`Stripes`]), each stripe on its own cache line, so two threads
//! counting events never share a line, and a thread updates its own stripe with a plain load
//! and store: a locked instruction per event for a statistic cost 12% of an observe (measured
//! with perf on the observe benchmark). Reading a total sums the stripes.

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicU64, Ordering, thread_stripe};

const TOTAL_BITS: u32 = 48;
const TOTAL_MAX: u64 = (1 << TOTAL_BITS) - 1;
const EPOCH_MASK: u64 = 0xFFFF;

/// How many of the latest windows a tally keeps (a power of two).
pub(crate) const WINDOWS: usize = 8;

/// A total per window for the last [`WINDOWS`] windows.
#[derive(Debug)]
pub(crate) struct Tally {
    slots: [AtomicU64; WINDOWS],
}

impl Tally {
    pub(crate) fn new() -> Tally {
        Tally {
            slots: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    fn slot(&self, window: u64) -> &AtomicU64 {
        // Masked below WINDOWS: the cast is exact.
        &self.slots[(window & (WINDOWS as u64 - 1)) as usize]
    }

    /// Adds `amount` to `window`'s total (saturating at 2^48 - 1), atomically.
    pub(crate) fn add(&self, window: u64, amount: u64) {
        let slot = self.slot(window);
        // Relaxed: a statistic; the swap lands on the latest word.
        let mut seen = slot.load(Ordering::Relaxed);
        loop {
            let next = Self::plus(seen, window, amount);
            match slot.compare_exchange_weak(seen, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(actual) => seen = actual,
            }
        }
    }

    /// Adds `amount` to `window`'s total with a plain load and store, no locked instruction:
    /// for a tally only one thread writes (a thread's own stripe). Should two threads ever
    /// share it, a racing add may be lost from the total, never anything else.
    pub(crate) fn add_owned(&self, window: u64, amount: u64) {
        let slot = self.slot(window);
        // Relaxed: a statistic written by one thread; readers want any recent value.
        let seen = slot.load(Ordering::Relaxed);
        slot.store(Self::plus(seen, window, amount), Ordering::Relaxed);
    }

    fn plus(word: u64, window: u64, amount: u64) -> u64 {
        let epoch = window & EPOCH_MASK;
        let total = if word >> TOTAL_BITS == epoch {
            word & TOTAL_MAX
        } else {
            0
        };
        (epoch << TOTAL_BITS) | total.saturating_add(amount).min(TOTAL_MAX)
    }

    /// `window`'s total (0 once the slot has moved on to a later window).
    pub(crate) fn get(&self, window: u64) -> u64 {
        // Relaxed: a statistic.
        let word = self.slot(window).load(Ordering::Relaxed);
        if word >> TOTAL_BITS == window & EPOCH_MASK {
            word & TOTAL_MAX
        } else {
            0
        }
    }
}

/// Event totals striped by thread.
#[derive(Debug)]
pub(crate) struct Stripes {
    stripes: Box<[CachePadded<Tally>]>,
}

impl Stripes {
    /// Stripes are handed out to threads round-robin, so threads share one only when more than
    /// this many have ever counted events in the process.
    #[cfg(not(loom))]
    pub(crate) const COUNT: usize = 64;
    /// Under loom, enough for a model's threads (at most 3, each still on its own stripe): every
    /// stripe's load is a branch loom explores, and 64 stripes of 8 windows passed its limit
    /// in a model that reads the stats.
    #[cfg(loom)]
    pub(crate) const COUNT: usize = 4;

    pub(crate) fn new() -> Stripes {
        Stripes {
            stripes: (0..Self::COUNT)
                .map(|_| CachePadded::new(Tally::new()))
                .collect(),
        }
    }

    /// Heap bytes every `Stripes` holds.
    pub(crate) const HEAP_BYTES: usize = Self::COUNT * std::mem::size_of::<CachePadded<Tally>>();

    pub(crate) fn add(&self, window: u64, amount: u64) {
        self.stripes[thread_stripe() % Self::COUNT].add_owned(window, amount);
    }

    pub(crate) fn get(&self, window: u64) -> u64 {
        self.stripes.iter().map(|s| s.get(window)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_follow_their_window() {
        let tally = Tally::new();
        tally.add(4, 3);
        tally.add(4, 2);
        tally.add(5, 7);
        assert_eq!((tally.get(4), tally.get(5)), (5, 7));
        tally.add(6, 1);
        assert_eq!((tally.get(4), tally.get(5), tally.get(6)), (5, 7, 1));
        tally.add(12, 2);
        assert_eq!((tally.get(4), tally.get(5), tally.get(12)), (0, 7, 2));
    }

    /// A total stops at the largest value its bits hold and never carries into the epoch above
    /// it, even in a window whose epoch bits are all ones (where a carry would wrap the word).
    #[test]
    fn totals_saturate_below_their_epoch() {
        let tally = Tally::new();
        for window in [5, EPOCH_MASK, 3 * (EPOCH_MASK + 1) + EPOCH_MASK] {
            tally.add(window, TOTAL_MAX - 2);
            tally.add_owned(window, 2);
            assert_eq!(tally.get(window), TOTAL_MAX, "window {window}");
            tally.add(window, 1);
            tally.add_owned(window, u64::MAX);
            assert_eq!(tally.get(window), TOTAL_MAX, "window {window}");
            assert_eq!(tally.get(window + 1), 0, "window {window}");
            tally.add(window + 8, 3);
            assert_eq!(
                tally.get(window + 8),
                3,
                "window {window}: a later window starts over"
            );
        }
    }

    /// A thread counts on the stripe of its number, so threads numbered below
    /// [`Stripes::COUNT`] never share one. Two threads in turn: at most one of them can have a
    /// number whose stripe any other mapping (such as number / COUNT) happens to give.
    #[test]
    fn each_thread_counts_on_its_own_stripe() {
        let stripes = Stripes::new();
        for amount in [5, 7] {
            std::thread::scope(|s| {
                s.spawn(|| {
                    let own = thread_stripe() % Stripes::COUNT;
                    let before = stripes.stripes[own].get(9);
                    stripes.add(9, amount);
                    assert_eq!(stripes.stripes[own].get(9), before + amount);
                });
            });
        }
        assert_eq!(stripes.get(9), 12);
    }

    #[test]
    fn stripes_sum_across_threads() {
        let stripes = Stripes::new();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| (0..1000).for_each(|_| stripes.add(9, 1)));
            }
        });
        assert_eq!(stripes.get(9), 4000);
    }
}
