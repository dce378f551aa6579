//! The Bloom front: a key's first event in a window only sets bits; its counters see it from the
//! second event on.
//!
//! This is the Cold Filter idea (Zhou et al., "Cold Filter: A Meta-Framework for Faster and More
//! Accurate Stream Processing", SIGMOD 2018) cut down to one bit-layer: one-event sources
//! (scanners, spoofed floods) then never touch the counters, so they cannot raise the
//! estimates of real clients.
//!
//! The front is register-blocked: all `HASHES` bits of a key sit in one register (a window pair of
//! two 28-bit sets, see [`crate::pair`]), so the "was it already there?" decision is a single
//! compare-and-swap, and of two racing first events exactly one is absorbed (the loom model
//! `front_first_sighting` checks this). The price of blocking is a higher false-positive rate
//! than a classic Bloom filter of the same size: with `n` keys per register it is about
//! `(1 - e^(-k n / 28))^k` for `k = 3`. A false positive only means a new key's first event
//! goes to the counters like any later one.

use crate::hash::KeyHash;
use crate::pair::{Fold, REGISTER};
use crate::sync::{AtomicU64, Ordering};

/// Bits set per key in its register.
const HASHES: u32 = 3;

/// Bits in one window's half of a register.
pub(crate) const REGISTER_BITS: u32 = 28;

/// The hash probe that picks a key's register (the rows of the counters use probes below it).
const PROBE: u32 = crate::count_min::MAX_DEPTH as u32;

/// Whether a key was already in the front when an event of it arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sighting {
    /// Its first event in this window: the event was recorded in the front.
    First,
    /// Seen before in this window (or a false positive).
    Again,
}

/// Which windows' fronts hold a key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Presence {
    pub(crate) current: bool,
    pub(crate) previous: bool,
}

/// An array of Bloom registers.
#[derive(Debug)]
pub(crate) struct Front {
    registers: Box<[AtomicU64]>,
}

impl Front {
    /// Wraps `registers` (zeroed). An empty front is allowed: it never absorbs anything.
    pub(crate) fn new(registers: Box<[AtomicU64]>) -> Front {
        Front { registers }
    }

    pub(crate) fn len(&self) -> usize {
        self.registers.len()
    }

    pub(crate) fn is_enabled(&self) -> bool {
        !self.registers.is_empty()
    }

    fn locate(&self, hash: KeyHash) -> (&AtomicU64, u32) {
        let register = &self.registers[hash.index(PROBE, self.registers.len())];
        (register, mask(hash))
    }

    /// The key's register, `None` when the front is disabled: located once, for a
    /// [`Front::prefetch`] and then a [`Front::sight_in`] of the same key.
    #[inline]
    pub(crate) fn register(&self, hash: KeyHash) -> Option<&AtomicU64> {
        if !self.is_enabled() {
            return None;
        }
        Some(&self.registers[hash.index(PROBE, self.registers.len())])
    }

    /// Records the key in the front of `window`; says whether this was its first event there,
    /// and whether the previous window's front holds it.
    #[cfg(test)]
    pub(crate) fn sight(&self, hash: KeyHash, window: u64) -> (Sighting, Presence) {
        Self::sight_in(self.register(hash), hash, window)
    }

    /// [`Front::sight`] in the key's `register`, from [`Front::register`] of this front.
    #[inline(always)]
    pub(crate) fn sight_in(
        register: Option<&AtomicU64>,
        hash: KeyHash,
        window: u64,
    ) -> (Sighting, Presence) {
        let Some(register) = register else {
            return (Sighting::Again, Presence::default());
        };
        let mask = mask(hash);
        // Relaxed: the decision rests on the compare-and-swap below, which sees the latest word.
        let mut word = register.load(Ordering::Relaxed);
        loop {
            let halves = REGISTER.halves(word, window);
            let presence = Presence {
                current: true,
                previous: halves.previous & mask == mask,
            };
            if halves.current & mask == mask {
                return (Sighting::Again, presence);
            }
            let set = REGISTER.update_current(word, window, Fold::NONE, |bits| bits | mask);
            // Relaxed: only this register's modification order matters. Of two racing first
            // events, the second swap fails, rereads a word holding the first one's bits and
            // returns `Again`: exactly one event is absorbed.
            match register.compare_exchange(word, set, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return (Sighting::First, presence),
                Err(actual) => word = actual,
            }
        }
    }

    /// Prefetches the key's register (see `CountMin::touch`).
    #[inline]
    pub(crate) fn touch(&self, hash: KeyHash) {
        Self::prefetch(self.register(hash));
    }

    /// Prefetches `register` (from [`Front::register`]), if there is one.
    #[inline]
    pub(crate) fn prefetch(register: Option<&AtomicU64>) {
        if let Some(register) = register {
            crate::memory::prefetch(register);
        }
    }

    /// Which windows' fronts hold the key, counting nothing.
    pub(crate) fn presence(&self, hash: KeyHash, window: u64) -> Presence {
        if !self.is_enabled() {
            return Presence::default();
        }
        let (register, mask) = self.locate(hash);
        // Relaxed: a possibly older word can only miss a bit set concurrently, i.e. an event
        // that has not finished being counted.
        let halves = REGISTER.halves(register.load(Ordering::Relaxed), window);
        Presence {
            current: halves.current & mask == mask,
            previous: halves.previous & mask == mask,
        }
    }

    /// Bits set in `window`'s half across all registers.
    pub(crate) fn bits_set(&self, window: u64) -> u64 {
        self.registers
            .iter()
            // Relaxed: a statistic.
            .map(|r| {
                u64::from(
                    REGISTER
                        .value_of(r.load(Ordering::Relaxed), window)
                        .count_ones(),
                )
            })
            .sum()
    }

    /// The total number of bits per window.
    pub(crate) fn capacity_bits(&self) -> u64 {
        self.registers.len() as u64 * u64::from(REGISTER_BITS)
    }

    /// Register `index`'s bits for `window`, for exporting a window.
    pub(crate) fn register_bits(&self, index: usize, window: u64) -> u32 {
        // Relaxed: a snapshot; any value it had is a valid export.
        REGISTER.value_of(self.registers[index].load(Ordering::Relaxed), window)
    }

    /// Sets `bits` in register `index` for `window`, for merging another sketch's window in.
    pub(crate) fn merge_register(&self, index: usize, bits: u32, window: u64) {
        if bits != 0 {
            REGISTER.merge_into(&self.registers[index], window, Fold::NONE, |old| old | bits);
        }
    }
}

/// The key's bits within its register.
fn mask(hash: KeyHash) -> u32 {
    let mut bits = hash.bits();
    let mut mask = 0;
    for _ in 0..HASHES {
        // Multiply-shift of a 16-bit chunk onto 0..28; the result is < 28, so the cast is exact.
        let position = ((bits & 0xFFFF) * u64::from(REGISTER_BITS)) >> 16;
        mask |= 1 << position as u32;
        bits >>= 16;
    }
    mask
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::zeroed_atomics;

    #[test]
    fn masks_have_up_to_three_bits_inside_a_half() {
        for key in 0..1000u32 {
            let m = mask(KeyHash::of(3, &key.to_le_bytes()));
            assert!((1..=3).contains(&m.count_ones()));
            assert!(m < 1 << REGISTER_BITS);
        }
    }

    /// Each of a key's three bits comes from its own 16 bits of the hash: three distinct
    /// positions out of 28 for about 89% of keys (27/28 * 26/28), and no bit shared by all.
    #[test]
    fn mask_bits_come_from_three_independent_chunks() {
        let masks: Vec<u32> = (0..1000u32)
            .map(|key| mask(KeyHash::of(3, &key.to_le_bytes())))
            .collect();
        let three_bits = masks.iter().filter(|m| m.count_ones() == 3).count();
        let most_keys_on_one_bit = (0..REGISTER_BITS)
            .map(|bit| masks.iter().filter(|&&m| m & (1 << bit) != 0).count())
            .max();
        assert_eq!((three_bits, most_keys_on_one_bit), (890, Some(130)));
    }

    #[test]
    fn first_then_again_then_first_in_the_next_window() {
        let front = Front::new(zeroed_atomics(64));
        let h = KeyHash::of(1, b"k");
        assert_eq!(front.sight(h, 0).0, Sighting::First);
        assert_eq!(front.sight(h, 0).0, Sighting::Again);
        let (sighting, presence) = front.sight(h, 1);
        assert_eq!(sighting, Sighting::First);
        assert!(presence.previous);
        assert_eq!(
            front.presence(h, 2),
            Presence {
                current: false,
                previous: true
            }
        );
        assert_eq!(front.presence(h, 3), Presence::default());
    }

    #[test]
    fn a_lagging_tick_sights_its_own_window_and_assumes_the_one_before() {
        // One register: both keys share it. A newer tick rolls it to window 6.
        let front = Front::new(zeroed_atomics(1));
        let (h, other) = (KeyHash::of(1, b"k"), KeyHash::of(1, b"j"));
        assert_eq!(front.sight(h, 5).0, Sighting::First);
        let _ = front.sight(other, 6);
        // A tick of window 5 finds h's bits of window 5 in the older half, and cannot know
        // whether window 4 held it: it says so (present), an overestimate, never a miss.
        assert_eq!(
            front.presence(h, 5),
            Presence {
                current: true,
                previous: true
            }
        );
        assert_eq!(front.sight(h, 5).0, Sighting::Again);
        // Its first event of window 5 is recorded there, where window 6 reads it as previous.
        assert_eq!(front.sight(other, 5).0, Sighting::First);
        assert!(front.presence(other, 6).previous);
    }

    #[test]
    fn a_disabled_front_absorbs_nothing() {
        let front = Front::new(zeroed_atomics(0));
        assert_eq!(front.sight(KeyHash::of(1, b"k"), 0).0, Sighting::Again);
        assert_eq!(front.bits_set(0), 0);
    }

    /// What a window exports of a register is the bits its keys set in that window, and only
    /// those: a key sighted in window 3 is there for window 3, not for window 4 or 2.
    #[test]
    fn a_register_exports_the_bits_of_its_window() {
        let front = Front::new(zeroed_atomics(1));
        let h = KeyHash::of(1, b"k");
        let _ = front.sight(h, 3);
        assert_eq!(front.register_bits(0, 3), mask(h));
        assert_eq!(front.register_bits(0, 4), 0);
        assert_eq!(front.register_bits(0, 2), 0);
    }

    /// The fill statistic's denominator: 28 bits a window in each register.
    #[test]
    fn capacity_is_28_bits_per_register() {
        assert_eq!(Front::new(zeroed_atomics(5)).capacity_bits(), 140);
        assert_eq!(Front::new(zeroed_atomics(0)).capacity_bits(), 0);
    }

    /// Merging another sketch's window sets its bits beside the ones already there, in that
    /// window only: a key the other sketch saw is seen here, and a key seen here stays seen.
    #[test]
    fn merged_bits_join_the_window_s_own() {
        let front = Front::new(zeroed_atomics(1));
        let (here, there) = (KeyHash::of(1, b"k"), KeyHash::of(1, b"j"));
        assert_ne!(
            mask(there) & !mask(here),
            0,
            "the keys need bits of their own"
        );
        let _ = front.sight(here, 3);
        front.merge_register(0, mask(there), 3);
        assert_eq!(front.register_bits(0, 3), mask(here) | mask(there));
        assert_eq!(front.sight(there, 3).0, Sighting::Again);
        assert_eq!(front.sight(here, 3).0, Sighting::Again);
    }
}
