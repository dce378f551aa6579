//! Counting what is open right now (connections per source) in fixed memory.
//!
//! A plain Count-Min sketch that goes up and down: `acquire` adds 1 to each of the key's
//! counters, `release` takes 1 away. Every counter is the sum of the open counts of the keys
//! that share it, so the minimum over a key's counters never falls below the key's own open
//! count, whatever the interleaving (each change is one atomic add), and it is exact for a key
//! that shares no counter. Conservative update is not used: it cannot be undone by a release.
//!
//! A cap must hold under races too: of two acquires of one key under a cap of 1, at most one
//! may see 1. Taking the minimum of the values the acquire's own adds returned does not give
//! that: A adds to row 0 (1), B to row 0 (2) and row 1 (1), A to row 1 (2), and both see a 1.
//! So `acquire` adds to every row first, then reads every row again after a `SeqCst` fence;
//! why that suffices is in [`ConcurrencySketch::acquire`] (the loom model
//! `acquire_acquire_cap_one` fails without it).

use crate::error::BuildError;
use crate::hash::KeyHash;
use crate::sync::{AtomicU32, Ordering, fence};

/// Bytes per counter.
const CELL_BYTES: usize = 4;

/// The most rows.
const MAX_DEPTH: usize = 8;

/// Open counts per key (for example, concurrent connections per source address) in fixed
/// memory.
///
/// Every [`ConcurrencySketch::release`] must match one earlier
/// [`ConcurrencySketch::acquire`] of the same key; tie them together with an RAII guard in
/// the caller (the proxy releases when a connection ends).
///
/// # Examples
/// ```
/// use tollgate_sketch::ConcurrencySketch;
/// let open = ConcurrencySketch::new(1 << 16, 4, 7)?;
/// assert_eq!(open.acquire(b"198.51.100.1"), 1);
/// assert_eq!(open.acquire(b"198.51.100.1"), 2);
/// open.release(b"198.51.100.1");
/// assert_eq!(open.estimate(b"198.51.100.1"), 1);
/// # Ok::<(), tollgate_sketch::BuildError>(())
/// ```
#[derive(Debug)]
pub struct ConcurrencySketch {
    cells: Box<[AtomicU32]>,
    depth: usize,
    width: usize,
    seed: u64,
}

impl ConcurrencySketch {
    /// A sketch of `depth` rows in `memory_bytes`, hashing with `seed`.
    ///
    /// # Errors
    /// [`BuildError::DepthOutOfRange`] for a depth outside 1 to 8,
    /// [`BuildError::MemoryTooSmall`] for fewer than 16 counters per row.
    pub fn new(
        memory_bytes: usize,
        depth: usize,
        seed: u64,
    ) -> Result<ConcurrencySketch, BuildError> {
        if !(1..=MAX_DEPTH).contains(&depth) {
            return Err(BuildError::DepthOutOfRange { requested: depth });
        }
        let width = memory_bytes / (CELL_BYTES * depth);
        if width < 16 {
            return Err(BuildError::MemoryTooSmall {
                requested: memory_bytes,
                minimum: 16 * CELL_BYTES * depth,
            });
        }
        Ok(ConcurrencySketch {
            cells: (0..width * depth).map(|_| AtomicU32::new(0)).collect(),
            depth,
            width,
            seed,
        })
    }

    fn cell(&self, hash: KeyHash, row: usize) -> &AtomicU32 {
        // `row` < MAX_DEPTH: the cast is exact.
        &self.cells[row * self.width + hash.index(row as u32, self.width)]
    }

    /// Counts one more open item for `key` and returns its estimated open count, including it
    /// and every acquire of the key that raced it: of two racing acquires, at least one sees
    /// the other (so under a cap of 1 at most one is admitted; both may be refused).
    #[must_use = "the estimate is what a cap is checked against"]
    pub fn acquire(&self, key: &[u8]) -> u64 {
        let hash = KeyHash::of(self.seed, key);
        for row in 0..self.depth {
            // Relaxed: atomicity of the add is all the sum needs; the fence below orders it
            // before this acquire's reads.
            let _ = self.cell(hash, row).fetch_add(1, Ordering::Relaxed);
        }
        // SeqCst fence: the fences of two racing acquires are ordered one before the other,
        // and the reads after the later fence see every add before the earlier one (C++
        // [atomics.fences]), i.e. the later acquire sees all of the earlier one's adds in
        // every row. Without it both can miss the other's add in a different row (the
        // store-buffering pattern): neither Acquire/Release nor the adds' own return values
        // prevent that.
        fence(Ordering::SeqCst);
        (0..self.depth)
            // Relaxed: ordered after every add of an earlier fence by the fence above.
            .map(|row| u64::from(self.cell(hash, row).load(Ordering::Relaxed)))
            .min()
            .unwrap_or(0)
    }

    /// Counts one item of `key` closed. Must match an earlier `acquire` of the same key.
    pub fn release(&self, key: &[u8]) {
        let hash = KeyHash::of(self.seed, key);
        for row in 0..self.depth {
            // Relaxed: as in `acquire`. A release without its acquire would wrap the counter
            // to a huge value (an overestimate); debug builds catch it.
            let before = self.cell(hash, row).fetch_sub(1, Ordering::Relaxed);
            debug_assert!(before > 0, "release without a matching acquire");
        }
    }

    /// The key's estimated open count, changing nothing.
    #[must_use]
    pub fn estimate(&self, key: &[u8]) -> u64 {
        let hash = KeyHash::of(self.seed, key);
        (0..self.depth)
            // Relaxed: a snapshot of independent counters.
            .map(|row| u64::from(self.cell(hash, row).load(Ordering::Relaxed)))
            .min()
            .unwrap_or(0)
    }

    /// Bytes held, all allocated by `new`.
    #[must_use]
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.cells.len() * CELL_BYTES
    }
}
