//! A count of the sketch's contention, for measuring only: compiled with
//! `RUSTFLAGS="--cfg tollgate_contention"` and absent from every other build.
//!
//! It counts the conservative updates attempted (one per counted event that reaches the
//! counters), the compare-and-swaps that failed in them (each failure restarts its update),
//! the reservations taken, the events answered from them (see `crate::reserve`) and the
//! updates of keys that could have reserved but found their thread's table set held. Failed
//! swaps per observe is the number a 2-core machine can show of what many cores on one hot key
//! suffer: every failure is a cache line lost to another core between a read and a write.
//!
//! Each thread counts into its own counters (a line no other thread writes), registered once in
//! a global list; [`snapshot`] sums the list, [`reset`] zeroes it. The counts of threads that
//! have ended stay in the list.
//!
//! # Examples
//! ```
//! # #[cfg(tollgate_contention)] {
//! use tollgate_sketch::{RateSketch, Tick, contention};
//! let sketch = RateSketch::builder().front_share(0.0).build()?;
//! contention::reset();
//! let _ = sketch.observe(b"k", 1, Tick::ZERO);
//! assert_eq!(contention::snapshot().updates, 1);
//! # }
//! # Ok::<(), tollgate_sketch::BuildError>(())
//! ```

use std::sync::{Arc, Mutex, PoisonError};

use crate::sync::plain::{AtomicU64, Ordering};

/// What the sketch's observes met, summed over every thread since the last [`reset`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Contention {
    /// Conservative updates attempted: counted events that reached the counters.
    pub updates: u64,
    /// Compare-and-swaps that failed in them (each restarts its update).
    pub failed_swaps: u64,
    /// Reservations taken (updates that counted ahead).
    pub reserved: u64,
    /// Events answered from a reservation, writing nothing.
    pub credited: u64,
    /// Updates of a key counted far enough to reserve that found no free entry in its
    /// thread's table (other keys' live credits held its set): counted as they came.
    pub blocked: u64,
}

/// One thread's counts.
#[derive(Debug, Default)]
struct Counters {
    updates: AtomicU64,
    failed_swaps: AtomicU64,
    reserved: AtomicU64,
    credited: AtomicU64,
    blocked: AtomicU64,
}

/// Every thread's counters, each registered by its thread's first count.
static THREADS: Mutex<Vec<Arc<Counters>>> = Mutex::new(Vec::new());

std::thread_local! {
    static MINE: Arc<Counters> = {
        let mine = Arc::new(Counters::default());
        // A poisoned list still holds valid counters: a count never panics halfway.
        THREADS.lock().unwrap_or_else(PoisonError::into_inner).push(Arc::clone(&mine));
        mine
    };
}

/// Adds 1 to this thread's counter `which`.
#[inline]
fn bump(which: fn(&Counters) -> &AtomicU64) {
    // Relaxed: a count, read only after the measured threads are joined.
    MINE.with(|mine| which(mine).fetch_add(1, Ordering::Relaxed));
}

pub(crate) fn update() {
    bump(|c| &c.updates);
}

pub(crate) fn failed_swap() {
    bump(|c| &c.failed_swaps);
}

pub(crate) fn reserved() {
    bump(|c| &c.reserved);
}

pub(crate) fn credited() {
    bump(|c| &c.credited);
}

pub(crate) fn blocked() {
    bump(|c| &c.blocked);
}

/// The counts summed over every thread since the last [`reset`].
#[must_use]
pub fn snapshot() -> Contention {
    let threads = THREADS.lock().unwrap_or_else(PoisonError::into_inner);
    // Relaxed: as in `bump`.
    let sum = |which: fn(&Counters) -> &AtomicU64| {
        threads
            .iter()
            .map(|c| which(c).load(Ordering::Relaxed))
            .sum()
    };
    Contention {
        updates: sum(|c| &c.updates),
        failed_swaps: sum(|c| &c.failed_swaps),
        reserved: sum(|c| &c.reserved),
        credited: sum(|c| &c.credited),
        blocked: sum(|c| &c.blocked),
    }
}

/// Zeroes every thread's counts.
pub fn reset() {
    let threads = THREADS.lock().unwrap_or_else(PoisonError::into_inner);
    for c in threads.iter() {
        for which in [
            &c.updates,
            &c.failed_swaps,
            &c.reserved,
            &c.credited,
            &c.blocked,
        ] {
            // Relaxed: as in `bump`.
            which.store(0, Ordering::Relaxed);
        }
    }
}
