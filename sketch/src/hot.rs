//! [`HotKeys`]: the keys found at their cap in the current window, in a table small enough to
//! stay in a core's cache.
//!
//! # Why
//! On a bad day most events come from a few thousand keys far over their limits. A capped
//! observe already only reads such a key's cells (see [`crate::RateSketch::observe_capped`]),
//! but on a sketch of megabytes reading them is `depth` cache misses per event, and the
//! front's line besides. A key found at its cap is noted here, in one word; its later events in
//! the same window read that word and nothing else, from a table of
//! [`HotKeys::MAX_BYTES`] that a core's L2 cache holds (by default for budgets from 8 MiB).
//!
//! # Why it is sound
//! A note says "the key's current-window count read at least `cap` in window `w`". It is
//! written only after the counters showed exactly that, and a window's count never falls while
//! the window is current. An observe that finds its note counts nothing and returns `cap`,
//! which is what the capped path promises (never below `min(cap, true sliding count)`), so a
//! noted key is treated exactly as the counters would have treated it. A note holds for its own
//! window only: in the next window the key is counted again until its count there reaches the
//! cap, or the window after would find too little in its previous half.
//!
//! # One word per note
//! A note is the key's 64-bit hash XOR a mix of the window and the cap, with its low byte
//! replaced by a tag of the window, so one word can neither tear nor mix two notes. Another
//! key, window or cap reads as this note only by a 56-bit coincidence: the hash is seeded, so
//! an attacker cannot aim keys at it. Each key may sit in either of two slots of one cache
//! line. Notes lost to a race or never written cost nothing but the slow path.
//!
//! # Writes are bounded
//! A note is written only over a slot whose tag is not the current window's: an empty slot or
//! a note of an earlier window. So each slot is written at most once per window (twice when
//! two cores race on it), however many keys reach their caps: once a window's slots are
//! taken, further hot keys take the slow path without writing. An attacker who brings more hot
//! keys than slots therefore costs no writes into lines that other cores read, only the path
//! the sketch took before the table for the keys left out.

use crate::hash::KeyHash;
use crate::sync::{AtomicU64, Ordering};

/// Slots per cache line.
const SLOTS: usize = 8;

/// One cache line of notes.
#[repr(align(64))]
#[derive(Debug)]
struct Line([AtomicU64; SLOTS]);

/// The notes of one sketch (see the module docs).
#[derive(Debug)]
pub(crate) struct HotKeys {
    lines: Box<[Line]>,
}

/// A key's two slots in its line.
#[derive(Clone, Copy)]
struct Place {
    line: usize,
    first: usize,
    second: usize,
}

impl HotKeys {
    /// The largest table: 128 KiB, 16,384 notes, well inside a core's L2 cache.
    pub(crate) const MAX_BYTES: usize = 128 << 10;

    /// The smallest budget given a table by default: 8 MiB, of which [`HotKeys::MAX_BYTES`]
    /// is 1/64. With a smaller one, two threads over one fell from 1.8x to about 1x (32 KiB
    /// at 2 MiB, with and without bounded writes), for reasons not yet measured; rerun with
    /// 32 and 16 KiB at 2 MiB, one thread gained ~5% and 32 KiB never scaled on two (README,
    /// "The hot keys' table below 8 MiB, again").
    const MIN_BUDGET: usize = 64 * Self::MAX_BYTES;

    /// The bytes a sketch of `budget` bytes gives its notes by default: [`HotKeys::MAX_BYTES`]
    /// from [`HotKeys::MIN_BUDGET`] up, none below.
    pub(crate) fn bytes_for(budget: usize) -> usize {
        if budget < Self::MIN_BUDGET {
            0
        } else {
            Self::MAX_BYTES
        }
    }

    /// `bytes` rounded down to whole lines.
    pub(crate) fn whole(bytes: usize) -> usize {
        bytes / std::mem::size_of::<Line>() * std::mem::size_of::<Line>()
    }

    /// A table of `bytes` (a whole number of lines, see [`HotKeys::bytes_for`]), all empty.
    pub(crate) fn new(bytes: usize) -> HotKeys {
        let lines = bytes / std::mem::size_of::<Line>();
        HotKeys {
            lines: (0..lines)
                .map(|_| Line(std::array::from_fn(|_| AtomicU64::new(0))))
                .collect(),
        }
    }

    /// Whether the table has no room at all (a sketch built without one).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// The bytes the table holds.
    pub(crate) fn bytes(&self) -> usize {
        std::mem::size_of_val(&*self.lines)
    }

    /// The note of `hash` at its cap `cap` in `window`: the hash's bits changed by a mix of
    /// the two (a bijective mix of each: no other window with the same cap, nor another cap in
    /// the same window, gives the same high 56 bits for the same key), and the window's tag in
    /// the low byte.
    #[inline]
    fn note(hash: KeyHash, window: Stamp, cap: u64) -> u64 {
        let mixed = hash.as_u64() ^ window.mixed ^ mix(cap.rotate_left(32) ^ 0x6361_7070_6564_2121);
        (mixed & !TAG_MASK) | window.tag
    }

    /// Whether `word` is a note of `window` (or, once in 255 windows, of one 255 windows
    /// earlier, which only keeps its slot from being written for a window).
    #[inline]
    fn of_window(word: u64, window: u64) -> bool {
        word & TAG_MASK == tag(window)
    }

    #[inline]
    fn place(&self, hash: KeyHash) -> Option<Place> {
        if self.lines.is_empty() {
            return None;
        }
        let bits = hash.bits();
        let line = crate::hash::reduce(bits, self.lines.len());
        // The low six bits name the two slots; `reduce` used the high bits for the line.
        let first = (bits & 7) as usize;
        let second = ((bits >> 3) & 7) as usize;
        let second = if second == first { first ^ 1 } else { second };
        Some(Place {
            line,
            first,
            second,
        })
    }

    /// Whether the key of `hash` was noted at `cap` in `window`.
    #[inline]
    pub(crate) fn holds(&self, hash: KeyHash, window: u64, cap: u64) -> bool {
        self.holds_in(hash, Stamp::of(window), cap)
    }

    /// [`HotKeys::holds`] in the window of `window`'s stamp: for keys that share one.
    #[inline]
    pub(crate) fn holds_in(&self, hash: KeyHash, window: Stamp, cap: u64) -> bool {
        let Some(place) = self.place(hash) else {
            return false;
        };
        let note = Self::note(hash, window, cap);
        let line = &self.lines[place.line].0;
        // Relaxed: a note is one word, whole or absent; what it says was true when written and
        // stays true for its window (see the module docs), whichever write it comes from.
        line[place.first].load(Ordering::Relaxed) == note
            || line[place.second].load(Ordering::Relaxed) == note
    }

    /// Notes that the key of `hash` read at least `cap` in `window`'s counts, in one of its two
    /// slots that holds no note of `window` (`coin` picks which when both are free); nothing
    /// when both hold one (see "Writes are bounded" in the module docs).
    #[inline]
    pub(crate) fn note_capped(&self, hash: KeyHash, window: u64, cap: u64, coin: u64) {
        let Some(place) = self.place(hash) else {
            return;
        };
        let note = Self::note(hash, Stamp::of(window), cap);
        let line = &self.lines[place.line].0;
        let (preferred, other) = if coin & 1 == 0 {
            (place.first, place.second)
        } else {
            (place.second, place.first)
        };
        // Relaxed: see `holds`. A slot taken by another core between this load and the store
        // below is written twice in the window: the bound above is per core, and the note
        // lost costs that key the slow path once more.
        let free = |slot: usize| !Self::of_window(line[slot].load(Ordering::Relaxed), window);
        let slot = if free(preferred) {
            preferred
        } else if free(other) {
            other
        } else {
            return;
        };
        line[slot].store(note, Ordering::Relaxed);
    }
}

/// What every note of one window shares: the window's mix and its tag, worked out once for a
/// batch of keys observed in that window (see `RateSketch::moment`) instead of once per key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stamp {
    mixed: u64,
    tag: u64,
}

impl Stamp {
    /// The stamp of `window`.
    #[inline]
    pub(crate) fn of(window: u64) -> Stamp {
        Stamp {
            mixed: mix(window),
            tag: tag(window),
        }
    }
}

/// The low byte of a note: its window's tag.
const TAG_MASK: u64 = 0xFF;

/// The tag of `window`: 1 to 255, never 0, so an empty slot is never taken for a note of any
/// window.
#[inline]
fn tag(window: u64) -> u64 {
    window % 255 + 1
}

/// A bijective 64-bit mix (the finaliser of splitmix64).
#[inline]
fn mix(value: u64) -> u64 {
    let mut z = value.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn hash(n: u64) -> KeyHash {
        KeyHash::of(7, &n.to_le_bytes())
    }

    #[test]
    fn a_note_holds_for_its_key_window_and_cap_only() {
        let hot = HotKeys::new(4_096);
        let key = hash(1);
        assert!(!hot.holds(key, 5, 801), "an empty table holds nothing");
        hot.note_capped(key, 5, 801, 0);
        assert!(hot.holds(key, 5, 801));
        assert!(!hot.holds(key, 6, 801), "the next window counts again");
        assert!(!hot.holds(key, 4, 801));
        assert!(!hot.holds(key, 5, 802), "a higher cap was not reached");
        assert!(!hot.holds(hash(2), 5, 801));
    }

    #[test]
    fn a_key_keeps_its_note_beside_one_other_key_in_its_line() {
        let hot = HotKeys::new(4_096);
        let key = hash(1);
        hot.note_capped(key, 5, 801, 0);
        hot.note_capped(key, 5, 801, 1);
        assert!(hot.holds(key, 5, 801));
        // Another key noted over one of the two slots leaves the other.
        let place = hot.place(key).unwrap();
        hot.lines[place.line].0[place.first].store(0, Ordering::Relaxed);
        assert!(hot.holds(key, 5, 801));
        hot.lines[place.line].0[place.second].store(0, Ordering::Relaxed);
        assert!(!hot.holds(key, 5, 801));
    }

    #[test]
    fn a_note_of_the_current_window_is_never_written_over() {
        let hot = HotKeys::new(4_096);
        let key = hash(1);
        let place = hot.place(key).unwrap();
        let line = &hot.lines[place.line].0;
        // Both of the key's slots hold other keys' notes of window 5.
        line[place.first].store(HotKeys::note(hash(2), Stamp::of(5), 801), Ordering::Relaxed);
        line[place.second].store(HotKeys::note(hash(3), Stamp::of(5), 801), Ordering::Relaxed);
        hot.note_capped(key, 5, 801, 0);
        hot.note_capped(key, 5, 801, 1);
        assert!(!hot.holds(key, 5, 801), "no room in window 5");
        assert_eq!(
            line[place.first].load(Ordering::Relaxed),
            HotKeys::note(hash(2), Stamp::of(5), 801)
        );
        // In window 6 both are another window's notes: the key takes the slot its coin picks.
        hot.note_capped(key, 6, 801, 1);
        assert!(hot.holds(key, 6, 801));
        assert_eq!(
            line[place.first].load(Ordering::Relaxed),
            HotKeys::note(hash(2), Stamp::of(5), 801),
            "the other slot is left alone"
        );
    }

    #[test]
    fn tags_are_never_zero_and_follow_the_window() {
        for window in [0, 1, 254, 255, 256, u64::MAX - 1] {
            assert_ne!(tag(window), 0);
            assert!(HotKeys::of_window(
                HotKeys::note(hash(9), Stamp::of(window), 3),
                window
            ));
            assert!(!HotKeys::of_window(
                HotKeys::note(hash(9), Stamp::of(window), 3),
                window + 1
            ));
        }
        assert!(
            !HotKeys::of_window(0, 0),
            "an empty slot is free in every window"
        );
    }

    #[test]
    fn the_table_is_whole_from_eight_mebibytes_of_budget_and_absent_below() {
        assert_eq!(
            HotKeys::bytes_for((8 << 20) - 1),
            0,
            "too small to keep one"
        );
        assert_eq!(HotKeys::bytes_for(2 << 20), 0);
        assert_eq!(HotKeys::bytes_for(8 << 20), HotKeys::MAX_BYTES);
        assert_eq!(HotKeys::bytes_for(1 << 30), HotKeys::MAX_BYTES);
        assert_eq!(HotKeys::whole(4_000), 3_968, "whole lines");
        let hot = HotKeys::new(HotKeys::bytes_for(32 << 20));
        assert_eq!(hot.bytes(), 128 << 10);
        assert_eq!(HotKeys::new(0).bytes(), 0);
        assert!(!HotKeys::new(0).holds(hash(1), 0, 1));
    }

    /// The module docs' "one word per note": a note is the key's hash XOR a mix of window and
    /// cap, so two keys' notes of one window and cap differ exactly where their hashes do
    /// (above the tag byte), and keys with distinct hashes never share a note.
    #[test]
    fn notes_of_one_window_and_cap_differ_exactly_where_the_hashes_do() {
        let above_tag = !TAG_MASK;
        let first = hash(0);
        for n in 1..200 {
            let other = hash(n);
            for (window, cap) in [(0, 1), (5, 801), (300, 1 << 20), (u64::MAX - 1, 3)] {
                let notes = HotKeys::note(first, Stamp::of(window), cap)
                    ^ HotKeys::note(other, Stamp::of(window), cap);
                let hashes = first.as_u64() ^ other.as_u64();
                assert_eq!(
                    notes & above_tag,
                    hashes & above_tag,
                    "key {n}, window {window}"
                );
            }
        }
    }

    /// The mixes are bijective: no two windows (at one cap) nor two caps (in one window) give
    /// one key the same note, not even caps that differ only in bits the cap's constant sets.
    #[test]
    fn no_two_windows_or_caps_give_a_key_the_same_note() {
        let key = hash(1);
        let high = |note: u64| note & !TAG_MASK;
        let by_window: std::collections::HashSet<u64> = (0..1_000)
            .map(|window| high(HotKeys::note(key, Stamp::of(window), 801)))
            .collect();
        assert_eq!(by_window.len(), 1_000);
        let by_cap: std::collections::HashSet<u64> = (0..1_000)
            .map(|cap| high(HotKeys::note(key, Stamp::of(5), cap)))
            .collect();
        assert_eq!(by_cap.len(), 1_000);
    }

    /// Each mix reaches every bit above the tag: over a few windows (at one cap), and over a
    /// few caps (in one window), each of a key's 56 note bits takes both values.
    #[test]
    fn every_note_bit_moves_with_the_window_and_with_the_cap() {
        let key = hash(1);
        let moved = |notes: &mut dyn Iterator<Item = u64>| {
            let first = notes.next().unwrap();
            notes.fold(0, |moved, note| moved | (note ^ first))
        };
        let by_window =
            moved(&mut (0..64).map(|window| HotKeys::note(key, Stamp::of(window), 801)));
        let by_cap = moved(&mut (1..65).map(|cap| HotKeys::note(key, Stamp::of(5), cap)));
        assert_eq!(by_window & !TAG_MASK, !TAG_MASK);
        assert_eq!(by_cap & !TAG_MASK, !TAG_MASK);
    }

    /// `mix` is splitmix64's output function: the generator seeded with 0 gives these three
    /// first values (Vigna's reference `splitmix64.c`), the state advancing by the constant.
    #[test]
    fn mix_gives_splitmix64_s_reference_values() {
        let gamma = 0x9E37_79B9_7F4A_7C15_u64;
        assert_eq!(mix(0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(mix(gamma), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(mix(gamma.wrapping_mul(2)), 0x06C4_5D18_8009_454F);
    }

    /// A key's two slots are always two (so one other key cannot push its note out), and the
    /// hash's low six bits spread keys over all 56 ordered pairs of a line's eight slots.
    #[test]
    fn a_key_has_two_distinct_slots_and_keys_use_every_pair() {
        let hot = HotKeys::new(4_096);
        let mut pairs = std::collections::HashSet::new();
        for n in 0..2_000 {
            let place = hot.place(hash(n)).unwrap();
            assert_ne!(place.first, place.second, "key {n}");
            pairs.insert((place.first, place.second));
        }
        assert_eq!(pairs.len(), SLOTS * (SLOTS - 1));
    }

    /// With both slots free, an even coin writes the first slot and an odd one the second.
    #[test]
    fn a_free_key_takes_the_slot_its_coin_picks() {
        for (coin, picks_first) in [(0, true), (1, false), (2, true), (3, false)] {
            let hot = HotKeys::new(4_096);
            let key = hash(1);
            let place = hot.place(key).unwrap();
            hot.note_capped(key, 5, 801, coin);
            let line = &hot.lines[place.line].0;
            let written = |slot: usize| line[slot].load(Ordering::Relaxed) != 0;
            assert_eq!(
                (written(place.first), written(place.second)),
                (picks_first, !picks_first),
                "coin {coin}"
            );
        }
    }
}
