//! The only module that names atomic types.
//!
//! Under `--cfg loom` the atomics come from loom, so the models in `tests/loom` explore every
//! interleaving of the real code (crossbeam's pattern). Nothing else in the crate imports
//! `std::sync::atomic` directly.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};

/// A new sketch's id, never handed out before in this process (from 1: 0 is no sketch), so that
/// what a thread keeps per sketch (see [`crate::reserve`]) never answers for another.
///
/// A std atomic under loom too: ids are handed out once per build, outside any race a model
/// checks, and they must stay unique across a model's executions.
pub(crate) fn sketch_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    // Relaxed: the read-modify-write alone makes each id unique; it orders nothing else.
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The std atomics for the contention counter (see `crate::contention`), which loom must not
/// see: it counts, it decides nothing, and it is compiled into measuring builds only.
#[cfg(tollgate_contention)]
pub(crate) mod plain {
    pub(crate) use std::sync::atomic::{AtomicU64, Ordering};
}

/// A small per-thread number used to spread shared statistics over stripes, so that two threads
/// counting events do not bounce one cache line between their cores.
#[cfg(not(loom))]
pub(crate) fn thread_stripe() -> usize {
    use std::cell::Cell;
    use std::sync::atomic::AtomicUsize;

    // Hands out stripe numbers round-robin, once per thread; never on the hot path after that.
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    STRIPE.with(|stripe| {
        let mut value = stripe.get();
        if value == usize::MAX {
            // Relaxed: the number only needs to be unique-ish, it orders nothing.
            value = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            stripe.set(value);
        }
        value
    })
}

/// Under loom each model thread gets its own stripe, as real threads do.
#[cfg(loom)]
pub(crate) fn thread_stripe() -> usize {
    use loom::sync::atomic::AtomicUsize;

    loom::lazy_static! {
        static ref NEXT: AtomicUsize = AtomicUsize::new(0);
    }
    loom::thread_local! {
        static STRIPE: std::cell::Cell<usize> = std::cell::Cell::new(usize::MAX);
    }
    STRIPE.with(|stripe| {
        if stripe.get() == usize::MAX {
            // Relaxed: as in the std version.
            stripe.set(NEXT.fetch_add(1, Ordering::Relaxed));
        }
        stripe.get()
    })
}

/// Allocates `len` zeroed atomics in one boxed slice (the sketch's only allocations), on huge
/// pages where the kernel gives them (see [`crate::memory`]): the allocation is marked before
/// its first write, so its pages are faulted in as huge ones.
pub(crate) fn zeroed_atomics(len: usize) -> Box<[AtomicU64]> {
    let mut cells: Vec<AtomicU64> = Vec::with_capacity(len);
    crate::memory::prefer_huge(
        cells.as_ptr().cast(),
        len.saturating_mul(std::mem::size_of::<AtomicU64>()),
    );
    cells.extend((0..len).map(|_| AtomicU64::new(0)));
    // The capacity is exactly `len`: no reallocation, one allocation of `len` words.
    cells.into_boxed_slice()
}
