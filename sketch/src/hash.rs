//! One hash per key, every index derived from it.
//!
//! A key is hashed once with xxh3 (seeded, so an attacker who does not know the seed cannot
//! aim keys at one counter). Row indices come from Kirsch–Mitzenmacher double hashing
//! (`g_i = h1 + i * h2`, as fastbloom does) and are reduced to a table width with Lemire's
//! multiply-shift, which works for any width, so the memory budget is used whole instead of
//! being rounded down to a power of two.

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// The hash of a key under one sketch's seed.
///
/// Computing it once and passing it to the `*_hashed` methods saves rehashing when one key is
/// checked several times (the filter checks one address under several rules).
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use tollgate_sketch::{RateSketch, Tick};
/// let sketch = RateSketch::builder().window(Duration::from_secs(1)).memory_bytes(1 << 16).build()?;
/// let hash = sketch.hash(b"10.0.0.1");
/// assert_eq!(sketch.observe_hashed(hash, 1, Tick::ZERO), 1);
/// # Ok::<(), tollgate_sketch::BuildError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyHash(u64);

/// Golden-ratio multiplier: mixes the first hash into an independent-looking second one.
const MIX: u64 = 0x9E37_79B9_7F4A_7C15;

impl KeyHash {
    /// Hashes `key` with `seed`.
    #[must_use]
    pub(crate) fn of(seed: u64, key: &[u8]) -> KeyHash {
        KeyHash(xxh3_64_with_seed(key, seed))
    }

    /// The raw 64-bit hash value.
    #[must_use]
    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// The second hash of double hashing; odd, so successive probes never repeat.
    #[inline]
    pub(crate) fn step(self) -> u64 {
        (self.0 ^ (self.0 >> 29)).wrapping_mul(MIX) | 1
    }

    /// The `probe`-th index into a table of `width` entries.
    #[inline]
    pub(crate) fn index(self, probe: u32, width: usize) -> usize {
        let g = self
            .0
            .wrapping_add(u64::from(probe).wrapping_mul(self.step()));
        reduce(g, width)
    }

    /// 64 more bits from the same hash, for choosing bits inside a Bloom register.
    pub(crate) fn bits(self) -> u64 {
        self.step().rotate_left(32).wrapping_mul(MIX)
    }
}

/// Maps a uniform 64-bit value onto `0..width` without division (Lemire, "Fast random integer
/// generation in an interval", 2019): the high half of the 128-bit product.
#[inline]
pub(crate) fn reduce(value: u64, width: usize) -> usize {
    // The product's high half is < width, which came from a usize: the cast cannot truncate.
    ((u128::from(value) * width as u128) >> 64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reduce_covers_the_range_evenly() {
        let width = 10;
        let mut seen = [0u32; 10];
        for i in 0..10_000u64 {
            let h = KeyHash::of(7, &i.to_le_bytes());
            seen[reduce(h.as_u64(), width)] += 1;
        }
        for count in seen {
            assert!((850..1150).contains(&count), "uneven: {seen:?}");
        }
        assert_eq!(reduce(u64::MAX, width), width - 1);
        assert_eq!(reduce(0, width), 0);
    }

    #[test]
    fn probes_differ_and_stay_in_range() {
        let h = KeyHash::of(1, b"key");
        let idx: Vec<usize> = (0..4).map(|p| h.index(p, 1 << 20)).collect();
        assert!(idx.iter().all(|&i| i < 1 << 20));
        let mut dedup = idx.clone();
        dedup.sort_unstable();
        dedup.dedup();
        assert_eq!(dedup.len(), 4, "{idx:?}");
    }

    #[test]
    fn seed_changes_the_hash() {
        assert_ne!(KeyHash::of(1, b"key"), KeyHash::of(2, b"key"));
    }
}
