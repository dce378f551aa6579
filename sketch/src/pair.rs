//! A window pair: one 64-bit word that holds a value for the current and the previous window.
//!
//! ```text
//! +---------+-----------+-------------------------+------------------------+
//! | written |   epoch   | value of window `epoch` | value of `epoch - 1`   |
//! +---------+-----------+-------------------------+------------------------+
//! ```
//!
//! Counter cells (a count per window) and Bloom registers (a bit set per window) are both
//! window pairs. Keeping both windows in one word is what makes the sketch fast and its rotation
//! free: a key's sliding estimate needs one cache line per row, not two, and no window is ever
//! cleared. A word is rolled forward lazily by the first write that finds it behind, in the same
//! compare-and-swap that updates it, so no observe waits for a window to be cleared and a stale
//! value is never read as current: the epoch says which window the word holds.
//!
//! # Ticks that step back
//! Ticks need not arrive in order: two threads read the clock and race, a capture's interfaces
//! interleave. A word rolled forward to window `k + 1` by a newer tick is then read or written
//! for window `k` by a lagging one. Such a word is *ahead* of the window asked for, and its
//! older half holds exactly that window, so a lagging tick reads its count from there (as the
//! whole of its current window) and adds its event there. What the roll dropped, window
//! `k - 1`, is gone, yet a lagging tick `t` in window `k` still owes it its share
//! `count_{k-1} * ((k + 1)T - t) / T`. Two halves cannot hold three windows, so the roll
//! pays it in advance: it folds `ceil(count_{k-1} * L / T)` into the half that keeps
//! `count_k` ([`Fold`]), where `L` is the sketch's lag tolerance. A tick at most `L` older
//! than the tick that rolled the word owes at most that share, so it reads no less than the
//! exact count. The price is an overestimate for everyone else: the previous window reads up to
//! `L / T` of the window before it too (`L / (T - L)` once repeated folds add up, since a fold
//! is itself folded at the next roll). A Bloom register cannot fold bits of a window it no
//! longer holds, so a lagging read of a rolled register says "present" for the window before
//! ([`UNKNOWN`]): only an overestimate, of the front weight times that window's share.
//!
//! A tick more than `L` older than the newest can underestimate by up to the share of window
//! `k - 1` that was not folded; a tick two or more windows older than the newest finds nothing
//! of its windows and reads what the word holds for the oldest window it keeps. Nothing worse.
//!
//! The top bit says the word was ever written: a fresh (zero) word is empty for every window,
//! never mistaken for one a window or two ahead. The epoch is the window index modulo
//! `2^epoch_bits`. A word left untouched for a multiple of that many windows, or one window
//! or two short of one, is read as current or ahead: for a counter an overestimate (never an
//! underestimate), for a Bloom register a key that looks seen (it then costs one event of
//! overestimate and is not absorbed).
//!
//! Nearly every word the hot path touches holds exactly the window it is read for, so
//! [`Layout::halves`] and [`Layout::update_current`] check that first (one mask and compare) and
//! work out the word's age only otherwise. With the snapshot reuse in [`crate::count_min`] this
//! took an observe on the Zipf benchmark from 774 to 589 instructions (cachegrind, 2 MiB).

use crate::sync::{AtomicU64, Ordering};

/// Where the two halves and the epoch sit in a word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    half_bits: u32,
    epoch_bits: u32,
}

/// Counter cells: 15-bit epoch (wraps after 32,768 windows), two 24-bit counts.
pub(crate) const COUNTER: Layout = Layout {
    half_bits: 24,
    epoch_bits: 15,
};

/// Bloom registers: 7-bit epoch (wraps after 128 windows), two 28-bit bit sets.
pub(crate) const REGISTER: Layout = Layout {
    half_bits: 28,
    epoch_bits: 7,
};

/// The "written" flag: the top bit of every layout.
const WRITTEN: u64 = 1 << 63;

/// The previous half as a lagging tick reads a word that is ahead of it: the word no longer
/// holds that window. Every bit set, so a Bloom register reads "present" (an overestimate); a
/// count reads it as "no information" and takes the minimum of the other rows, or 0 when no
/// row knows (the word's older half then includes the fold, see the module docs).
pub(crate) const UNKNOWN: u32 = u32::MAX;

/// The values a word holds for a window and the one before it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Halves {
    pub(crate) current: u32,
    pub(crate) previous: u32,
}

/// How a word's epoch relates to the window it is read or written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Age {
    /// The word holds this window.
    Current,
    /// The word holds the window before.
    Previous,
    /// The word holds a window one or two ahead of this one (a lagging tick).
    Ahead,
    /// The word holds nothing of this window or the one before.
    Stale,
}

/// What a roll forward adds to the kept half for the window it drops: `ceil(count * L / T)`
/// for a lag tolerance `L` and a window `T`, as a 32.32 fixed-point fraction rounded up (a
/// multiply, an add and a shift; rolls are rare, once per word per window).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fold {
    /// `ceil(L * 2^32 / T)`, at most `2^31` (`L <= T / 2`).
    fraction: u64,
}

impl Fold {
    /// No fold: for Bloom registers, and for a sketch whose ticks never step back.
    pub(crate) const NONE: Fold = Fold { fraction: 0 };

    /// The fold for a lag tolerance of `lag` nanoseconds in windows of `window` nanoseconds;
    /// `lag <= window / 2` (the builder checks; larger values are clamped to it).
    pub(crate) fn new(lag: u64, window: u64) -> Fold {
        let window = u128::from(window.max(1));
        let lag = u128::from(lag).min(window / 2);
        let fraction = (lag << 32).div_ceil(window);
        // At most 2^31 because lag <= window / 2: the conversion cannot fail.
        Fold {
            fraction: u64::try_from(fraction).unwrap_or(1 << 31),
        }
    }

    /// `ceil(count * L / T)`, never below the exact share.
    #[inline]
    pub(crate) fn of(self, count: u32) -> u32 {
        // count < 2^32 and fraction <= 2^31: the product fits in 63 bits, the result in 31.
        ((u64::from(count) * self.fraction).div_ceil(1 << 32)) as u32
    }
}

impl Layout {
    /// The largest value one half holds.
    #[inline]
    pub(crate) const fn half_max(self) -> u32 {
        (1 << self.half_bits) - 1
    }

    #[inline]
    const fn epoch_mask(self) -> u64 {
        (1 << self.epoch_bits) - 1
    }

    fn epoch(self, word: u64) -> u64 {
        (word >> (2 * self.half_bits)) & self.epoch_mask()
    }

    fn written(word: u64) -> bool {
        word & WRITTEN != 0
    }

    #[inline]
    fn current(self, word: u64) -> u32 {
        // Masked to `half_bits` <= 32 bits: the cast is exact.
        ((word >> self.half_bits) & u64::from(self.half_max())) as u32
    }

    #[inline]
    fn previous(self, word: u64) -> u32 {
        // As in `current`.
        (word & u64::from(self.half_max())) as u32
    }

    fn pack(self, window: u64, current: u32, previous: u32) -> u64 {
        let max = u64::from(self.half_max());
        WRITTEN
            | ((window & self.epoch_mask()) << (2 * self.half_bits))
            | ((u64::from(current) & max) << self.half_bits)
            | (u64::from(previous) & max)
    }

    /// How many windows `window` is past the word's epoch, modulo the epoch range.
    fn distance(self, word: u64, window: u64) -> u64 {
        window.wrapping_sub(self.epoch(word)) & self.epoch_mask()
    }

    fn age(self, word: u64, window: u64) -> Age {
        if !Self::written(word) {
            return Age::Stale;
        }
        match self.distance(word, window) {
            0 => Age::Current,
            1 => Age::Previous,
            d if d >= self.epoch_mask() - 1 => Age::Ahead,
            _ => Age::Stale,
        }
    }

    /// The bits that say whether a word holds exactly `window`: the written flag and the epoch.
    #[inline]
    fn tag_mask(self) -> u64 {
        WRITTEN | (self.epoch_mask() << (2 * self.half_bits))
    }

    /// What a word that holds exactly `window` has in its tag bits.
    #[inline]
    fn tag(self, window: u64) -> u64 {
        WRITTEN | ((window & self.epoch_mask()) << (2 * self.half_bits))
    }

    /// Whether the word holds exactly `window` (written, epoch equal): the usual case on the hot
    /// path, decoded without working out the word's age.
    #[inline]
    fn holds(self, word: u64, window: u64) -> bool {
        word & self.tag_mask() == self.tag(window)
    }

    /// The current half of a word that holds exactly `window`; `None` for any other word
    /// (see [`Layout::halves`] for those).
    #[inline]
    pub(crate) fn current_in(self, word: u64, window: u64) -> Option<u32> {
        self.holds(word, window).then(|| self.current(word))
    }

    /// A word that holds exactly its window (see [`Layout::current_in`]) with its current
    /// half set to `value`, at most [`Layout::half_max`]: what [`Layout::update_current`]
    /// gives for such a word, without decoding it again.
    #[inline]
    pub(crate) fn with_current(self, word: u64, value: u32) -> u64 {
        debug_assert!(value <= self.half_max());
        let current = u64::from(self.half_max()) << self.half_bits;
        (word & !current) | (u64::from(value) << self.half_bits)
    }

    /// Whether the word was rolled past `window` by a newer tick: a tick of `window` lags.
    #[inline]
    pub(crate) fn is_ahead(self, word: u64, window: u64) -> bool {
        !self.holds(word, window) && self.age(word, window) == Age::Ahead
    }

    /// What the word holds for `window` and the window before it, as a tick of `window` reads
    /// it: for a word ahead of it, the older half as current and [`UNKNOWN`] as previous.
    #[inline]
    pub(crate) fn halves(self, word: u64, window: u64) -> Halves {
        if self.holds(word, window) {
            return Halves {
                current: self.current(word),
                previous: self.previous(word),
            };
        }
        self.halves_by_age(word, window)
    }

    /// [`Layout::halves`] for a word that may hold another window.
    fn halves_by_age(self, word: u64, window: u64) -> Halves {
        match self.age(word, window) {
            Age::Current => Halves {
                current: self.current(word),
                previous: self.previous(word),
            },
            Age::Previous => Halves {
                current: 0,
                previous: self.current(word),
            },
            Age::Ahead => Halves {
                current: self.previous(word),
                previous: UNKNOWN,
            },
            Age::Stale => Halves::default(),
        }
    }

    /// The minimum of each half over `words` when every word holds exactly `window` (the usual
    /// case on the hot path), worked out with no branch per word; `None` when any word holds
    /// another window (then decode each with [`Layout::halves`]).
    ///
    /// Words that hold the same window share their tag bits, above both halves, so the least
    /// word has the least current half; the previous halves are compared on their own.
    #[inline(always)]
    pub(crate) fn min_if_held(self, words: &[u64], window: u64) -> Option<Halves> {
        let (tag, tag_mask) = (self.tag(window), self.tag_mask());
        let max = u64::from(self.half_max());
        let (mut differ, mut least, mut previous) = (0, u64::MAX, max);
        for &word in words {
            differ |= (word ^ tag) & tag_mask;
            least = least.min(word);
            previous = previous.min(word & max);
        }
        // Masked to `half_bits` <= 32 bits: the cast is exact.
        (differ == 0 && !words.is_empty()).then(|| Halves {
            current: self.current(least),
            previous: previous as u32,
        })
    }

    /// The word rolled forward to `window` if it is behind (folding what the roll drops, see
    /// [`Fold`]), with `update` applied to the half that holds `window`: the current half, which
    /// starts at 0 in a rolled word, or the older half of a word that is ahead of `window`.
    #[inline]
    pub(crate) fn update_current(
        self,
        word: u64,
        window: u64,
        fold: Fold,
        update: impl Fn(u32) -> u32,
    ) -> u64 {
        let bounded = |value: u32| update(value).min(self.half_max());
        if self.holds(word, window) {
            let current = u64::from(self.half_max()) << self.half_bits;
            return (word & !current) | (u64::from(bounded(self.current(word))) << self.half_bits);
        }
        match self.age(word, window) {
            Age::Current => {
                let epoch = self.epoch(word);
                self.pack(epoch, bounded(self.current(word)), self.previous(word))
            }
            Age::Ahead => {
                let epoch = self.epoch(word);
                self.pack(epoch, self.current(word), bounded(self.previous(word)))
            }
            Age::Previous | Age::Stale => {
                self.pack(window, bounded(0), self.rolled(word, window, fold))
            }
        }
    }

    /// What the previous half of a word rolled forward to `window` holds: the word's count of
    /// `window - 1` plus the fold of its count of `window - 2`.
    fn rolled(self, word: u64, window: u64, fold: Fold) -> u32 {
        if !Self::written(word) {
            return 0;
        }
        let (last, before) = match self.distance(word, window) {
            1 => (self.current(word), self.previous(word)),
            2 => (0, self.current(word)),
            _ => (0, 0),
        };
        last.saturating_add(fold.of(before)).min(self.half_max())
    }

    /// The word with `update` applied to the half that holds exactly `window`, rolling the word
    /// forward if it is behind (with `fold`); `None` if the word has moved two or more windows
    /// past it (the window is gone here). Used to merge another sketch's window in.
    pub(crate) fn update_window(
        self,
        word: u64,
        window: u64,
        fold: Fold,
        update: impl Fn(u32) -> u32,
    ) -> Option<u64> {
        let bounded = |value: u32| update(value).min(self.half_max());
        if !Self::written(word) {
            return Some(self.pack(window, bounded(0), 0));
        }
        let ahead = self.epoch_mask() + 1 - self.distance(word, window);
        match self.distance(word, window) {
            0 => Some(self.pack(window, bounded(self.current(word)), self.previous(word))),
            _ if ahead == 1 => {
                let epoch = self.epoch(word);
                Some(self.pack(epoch, self.current(word), bounded(self.previous(word))))
            }
            d if d < self.epoch_mask() / 2 => {
                Some(self.pack(window, bounded(0), self.rolled(word, window, fold)))
            }
            _ => None,
        }
    }

    /// Applies [`Layout::update_window`] to an atomic word, retrying until the swap lands; a
    /// no-op if the word has moved past the window.
    pub(crate) fn merge_into(
        self,
        word: &AtomicU64,
        window: u64,
        fold: Fold,
        update: impl Fn(u32) -> u32,
    ) {
        // Relaxed: the loop retries until its own swap lands on the latest word; merging orders
        // nothing else.
        let mut seen = word.load(Ordering::Relaxed);
        while let Some(next) = self.update_window(seen, window, fold, &update) {
            match word.compare_exchange_weak(seen, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(actual) => seen = actual,
            }
        }
    }

    /// Exactly what the word holds for `window`, 0 if it holds another.
    pub(crate) fn value_of(self, word: u64, window: u64) -> u32 {
        if !Self::written(word) {
            return 0;
        }
        match self.distance(word, window) {
            0 => self.current(word),
            d if d == self.epoch_mask() => self.previous(word),
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raise(word: u64, window: u64, to: u32) -> u64 {
        COUNTER.update_current(word, window, Fold::NONE, |c| c.max(to))
    }

    #[test]
    fn the_min_of_held_words_is_the_min_of_their_halves() {
        // Words of window 9 with counts whose least current and least previous sit in
        // different words, then one word of another window (or never written) among them.
        let held = |current: u32, previous: u32| {
            COUNTER.update_current(raise(0, 8, previous), 9, Fold::NONE, |_| current)
        };
        let words = [
            held(5, 70),
            held(3, 90),
            held(12, 2),
            held(COUNTER.half_max(), 40),
        ];
        let by_word = |words: &[u64]| {
            let halves = words.iter().map(|&w| COUNTER.halves(w, 9));
            let current = halves.clone().map(|h| h.current).min();
            (current, halves.map(|h| h.previous).min())
        };
        let min = COUNTER.min_if_held(&words, 9).unwrap();
        assert_eq!(
            min,
            Halves {
                current: 3,
                previous: 2
            }
        );
        assert_eq!(by_word(&words), (Some(3), Some(2)));
        for other in [0, raise(0, 8, 1), raise(0, 10, 1), raise(0, 9 + 32_768, 1)] {
            let mut mixed = words;
            mixed[2] = other;
            let expected = (other == raise(0, 9 + 32_768, 1)).then(|| {
                let (current, previous) = by_word(&mixed);
                Halves {
                    current: current.unwrap(),
                    previous: previous.unwrap(),
                }
            });
            assert_eq!(COUNTER.min_if_held(&mixed, 9), expected, "{other:#x}");
        }
        assert_eq!(COUNTER.min_if_held(&[], 9), None);
    }

    #[test]
    fn a_fresh_word_is_empty_for_every_window() {
        assert_eq!(COUNTER.halves(0, 0), Halves::default());
        assert_eq!(COUNTER.halves(0, 5), Halves::default());
    }

    #[test]
    fn updates_roll_the_window_forward() {
        let word = raise(0, 7, 3);
        assert_eq!(
            COUNTER.halves(word, 7),
            Halves {
                current: 3,
                previous: 0
            }
        );
        assert_eq!(
            COUNTER.halves(word, 8),
            Halves {
                current: 0,
                previous: 3
            }
        );
        assert_eq!(COUNTER.halves(word, 9), Halves::default());
        let next = raise(word, 8, 5);
        assert_eq!(
            COUNTER.halves(next, 8),
            Halves {
                current: 5,
                previous: 3
            }
        );
        let skipped = raise(next, 10, 1);
        assert_eq!(
            COUNTER.halves(skipped, 10),
            Halves {
                current: 1,
                previous: 0
            }
        );
    }

    #[test]
    fn raising_never_lowers() {
        let word = raise(0, 1, 9);
        assert_eq!(COUNTER.halves(raise(word, 1, 4), 1).current, 9);
    }

    #[test]
    fn values_saturate_at_half_max() {
        let word = raise(0, 1, u32::MAX);
        assert_eq!(COUNTER.halves(word, 1).current, COUNTER.half_max());
        let merged = COUNTER
            .update_window(word, 1, Fold::NONE, |c| c.saturating_add(10))
            .unwrap();
        assert_eq!(COUNTER.halves(merged, 1).current, COUNTER.half_max());
        assert_eq!(REGISTER.half_max(), (1 << 28) - 1);
    }

    #[test]
    fn a_lagging_tick_reads_and_writes_its_own_window_in_a_word_ahead() {
        // Window 9 holds 4; a newer tick rolls the word to 10 and counts 1 there.
        let word = raise(raise(0, 9, 4), 10, 1);
        // A tick of window 9 reads 9's count as its current one; 8 is gone.
        assert_eq!(
            COUNTER.halves(word, 9),
            Halves {
                current: 4,
                previous: UNKNOWN
            }
        );
        assert!(COUNTER.is_ahead(word, 9) && COUNTER.is_ahead(word, 8));
        assert!(!COUNTER.is_ahead(word, 10) && !COUNTER.is_ahead(word, 7));
        // Its event goes to window 9, where the tick of window 10 reads it as previous.
        let lagged = COUNTER.update_current(word, 9, Fold::NONE, |c| c + 2);
        assert_eq!(
            COUNTER.halves(lagged, 10),
            Halves {
                current: 1,
                previous: 6
            }
        );
        assert_eq!(COUNTER.halves(word, 7), Halves::default());
    }

    #[test]
    fn a_roll_folds_the_window_it_drops() {
        // A quarter-window tolerance: a roll keeps ceil(count / 4) of the window it drops.
        let fold = Fold::new(25, 100);
        let word = COUNTER.update_current(raise(0, 8, 10), 9, fold, |c| c.max(7));
        let rolled = COUNTER.update_current(word, 10, fold, |c| c.max(1));
        assert_eq!(
            COUNTER.halves(rolled, 10),
            Halves {
                current: 1,
                previous: 7 + 3
            }
        );
        // Skipping a window folds the one two back.
        let skipped = COUNTER.update_current(word, 11, fold, |c| c.max(1));
        assert_eq!(COUNTER.halves(skipped, 11).previous, 2);
        // Three windows on nothing is owed.
        assert_eq!(
            COUNTER
                .halves(COUNTER.update_current(word, 12, fold, |c| c.max(1)), 12)
                .previous,
            0
        );
        assert_eq!(Fold::NONE.of(1000), 0);
        assert_eq!(Fold::new(1, 4).of(4), 1);
        assert_eq!(Fold::new(1, 4).of(5), 2);
        // A fraction that is not exact in 32.32 rounds up, never down.
        assert_eq!(Fold::new(1, 3).of(3), 2);
        assert_eq!(Fold::new(u64::MAX, u64::MAX).of(u32::MAX), u32::MAX / 2 + 1);
    }

    #[test]
    fn epochs_wrap() {
        let word = raise(0, 32_767, 2);
        assert_eq!(
            COUNTER.halves(word, 32_768),
            Halves {
                current: 0,
                previous: 2
            }
        );
        let register = REGISTER.update_current(0, 127, Fold::NONE, |b| b | 1);
        assert_eq!(
            REGISTER.halves(register, 128),
            Halves {
                current: 0,
                previous: 1
            }
        );
    }

    #[test]
    fn a_fresh_word_is_never_taken_for_a_later_window() {
        // Without the written flag, epoch 0 read at window 2^15 - 1 looks one window ahead.
        for window in [0, 1, 32_766, 32_767, 65_535, u64::MAX] {
            assert_eq!(
                COUNTER.halves(0, window),
                Halves::default(),
                "window {window}"
            );
            assert_eq!(
                REGISTER.halves(0, window),
                Halves::default(),
                "window {window}"
            );
            assert_eq!(COUNTER.halves(raise(0, window, 3), window).current, 3);
        }
    }

    #[test]
    fn merging_adds_into_the_window_named() {
        let add = |c: u32| c + 3;
        let word = raise(0, 5, 2);
        let same = COUNTER.update_window(word, 5, Fold::NONE, add).unwrap();
        assert_eq!(COUNTER.value_of(same, 5), 5);
        let older = COUNTER.update_window(word, 4, Fold::NONE, add).unwrap();
        assert_eq!(
            COUNTER.halves(older, 5),
            Halves {
                current: 2,
                previous: 3
            }
        );
        let newer = COUNTER.update_window(word, 6, Fold::NONE, add).unwrap();
        assert_eq!(
            COUNTER.halves(newer, 6),
            Halves {
                current: 3,
                previous: 2
            }
        );
        let much_newer = COUNTER.update_window(word, 9, Fold::NONE, add).unwrap();
        assert_eq!(
            COUNTER.halves(much_newer, 9),
            Halves {
                current: 3,
                previous: 0
            }
        );
        assert_eq!(COUNTER.update_window(word, 3, Fold::NONE, add), None);
    }

    #[test]
    fn merging_tells_newer_from_older_windows_at_half_the_epoch_range() {
        // 2^15 epochs: a window up to 16,382 past the word's is newer and rolls it forward;
        // from 16,383 on the epoch reads as an older window, which the word no longer holds.
        let word = raise(0, 5, 2);
        let add = |c: u32| c + 3;
        let newest = 5 + COUNTER.epoch_mask() / 2 - 1;
        let rolled = COUNTER.update_window(word, newest, Fold::NONE, add);
        assert_eq!(
            rolled.map(|w| COUNTER.halves(w, newest)),
            Some(Halves {
                current: 3,
                previous: 0
            })
        );
        assert_eq!(
            COUNTER.update_window(word, newest + 1, Fold::NONE, add),
            None
        );
    }

    #[test]
    fn value_of_is_exact() {
        let word = raise(0, 5, 2);
        assert_eq!(COUNTER.value_of(word, 5), 2);
        assert_eq!(COUNTER.value_of(raise(word, 6, 1), 5), 2);
        assert_eq!(COUNTER.value_of(raise(word, 7, 1), 5), 0);
        assert_eq!(COUNTER.value_of(word, 4), 0);
    }

    /// On a word that holds its window, `update` sets the current half to exactly what it
    /// returns, lower or higher, as `with_current` does, and leaves the previous half alone.
    /// (The sketch's own updates only raise; the contract does not depend on that.)
    #[test]
    fn updating_a_held_word_sets_its_current_half_exactly() {
        let word = COUNTER.update_current(raise(0, 8, 4), 9, Fold::NONE, |_| 5);
        for value in [2, 6, 0] {
            let updated = COUNTER.update_current(word, 9, Fold::NONE, |_| value);
            assert_eq!(updated, COUNTER.with_current(word, value));
            assert_eq!(
                COUNTER.halves(updated, 9),
                Halves {
                    current: value,
                    previous: 4
                }
            );
        }
    }

    /// A word's previous half answers for the window just before its own only: not for one
    /// two back, nor for any window after the word's.
    #[test]
    fn the_previous_half_is_the_value_of_one_window_only() {
        let word = raise(raise(0, 5, 2), 6, 1);
        assert_eq!(
            (COUNTER.value_of(word, 6), COUNTER.value_of(word, 5)),
            (1, 2)
        );
        assert_eq!(COUNTER.value_of(word, 4), 0);
        assert_eq!(COUNTER.value_of(word, 7), 0);
        assert_eq!(COUNTER.value_of(word, 8), 0);
    }
}
