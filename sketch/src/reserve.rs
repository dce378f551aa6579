//! Reservations: a hot key's events counted ahead, a few at a time, so that most of its events
//! write nothing shared.
//!
//! Every counted event raises the key's cells by a compare-and-swap per row, and when every core
//! counts the same hot key those cells' lines bounce between the cores: a swap that loses the
//! line fails and the update starts again, and no per-event write to a line that every core
//! shares can scale with cores. This is the sloppy counter of Boyd-Wickizer et al. ("An
//! Analysis of Linux Scalability to Many Cores", OSDI 2010) applied to one key's cells: a
//! thread that counts a key whose count is already large counts a few more events than it was
//! given, in the same update, and keeps them as its own credit; the key's next events on that
//! thread are answered from the credit, reading the cells (which already hold them) without
//! writing. The credit lives in a small per-thread table that only its own thread touches:
//! plain cells, no atomics, nothing shared.
//!
//! # The rule
//! An event of weight `w` for key `k` in window `j`, on a thread whose table holds credit
//! `c >= w` for (this sketch, `k`, `j`): `c -= w`, and the estimate is read from the cells as
//! they are. Otherwise it is counted as always (less the credit `c < w`, used up), and if the
//! slot is free (see [`claim`]) and the update lands on cells that all hold
//! exactly window `j` (no lagging tick, no row rolled ahead) and the key's count after it would
//! be `n = min + w`, it counts `n + r` instead, `r = n >> s` (`s` the reserve shift,
//! [`crate::Builder::reserve_shift`], default 8: 1/256) if `r >= w`, and the thread's entry
//! becomes credit `r` for (this sketch, `k`, `j`), replacing whatever it held. (A credit
//! smaller than the event that took it would rarely answer another; so a single heavy event,
//! bytes rather than packets, stays exact.) A capped observe reserves only
//! below its cap (`n + r <= cap - 1`), so a reservation never makes a key read its cap.
//!
//! # Why it never reads below the truth
//! A credited event was counted before it happened: `r` was added to every one of the key's
//! cells in window `j`, by this thread's own successful update, before the credit was written.
//! Within a window a cell's count never falls, and a roll forward keeps window `j`'s count as
//! the older half (which is what a tick of `j` that lags reads), so from the credit's taking
//! on, the cells hold every event the credit will answer. A credit answers only events of its
//! own window `j` (the entry holds `j`): the next window starts from nothing and is counted as
//! ever. The entry names its sketch by an id handed out once per build and never reused, so
//! the credit of a dropped sketch never answers for a new one at the same address. So every
//! argument for "never below the true sliding count" goes through unchanged: the cells hold at
//! least every event, reserved ones a little early.
//!
//! # What it costs
//! Reserved events that are never spent are overcount. For ticks in order each thread holds at
//! most one unspent credit per key and window: a credit is used up before its key reserves
//! again (an event larger than the credit spends what is left), and is replaced by another
//! key's or sketch's only once spent, or by this sketch's newer window, which an in-order
//! thread never leaves again (see [`claim`]). A credit is at most `n >> s` of the count `n` it
//! was taken at, which is at most the key's current count in the cells. With
//! `P` threads observing the key, its estimate exceeds what it would read without reservations
//! by at most
//!
//! ```text
//! P * estimate / 2^s
//! ```
//!
//! (each window's unspent credits are at most `P / 2^s` of that window's count, and the
//! estimate weighs both windows as it weighs their counts): with one thread at most 1/256 of
//! the estimate at the default. The events tally counts reserved events when they are reserved
//! (and credited ones not again), so Count-Min's stated `eps * N`
//! ([`crate::RateSketch::overcount_bound`]) covers the collisions of reserved events too. Keys
//! below `2^s` events in the window reserve nothing: small counts stay exact.
//!
//! # Why it scales
//! A hot key's count grows by a factor `1 + 2^-s` or more per update once it passes `2^s`, so
//! a window of `N` events of one key costs each thread about `2^s * (1 + ln(N / 2^s))` writes
//! instead of `N` (at the default and a million events, about 2,400), and the credited events
//! only read lines that stay shared in every core's cache.

use std::cell::Cell;

use crate::hash::KeyHash;

/// Entries in a thread's table: one per hot key the thread counts at once, direct-mapped by
/// the key's hash. A hot key evicted by another costs one more update, never a count.
const SLOTS: usize = 16;

/// A credit: `credit` events of the key of hash `hash` in window `window` of sketch `sketch`,
/// counted in its cells already.
#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    /// The sketch's id (see [`crate::sync::sketch_id`]); 0, which no sketch has, for none.
    sketch: u64,
    hash: u64,
    window: u64,
    credit: u32,
}

impl Entry {
    const EMPTY: Entry = Entry {
        sketch: 0,
        hash: 0,
        window: 0,
        credit: 0,
    };
}

#[cfg(not(loom))]
std::thread_local! {
    // Const-initialised and without a destructor: a thread's first use registers nothing, and
    // every access is an offset from the thread pointer.
    static TABLE: [Cell<Entry>; SLOTS] = const { [const { Cell::new(Entry::EMPTY) }; SLOTS] };
}

// Under loom each model thread has its own table, as real threads do, and a fresh one per
// execution.
#[cfg(loom)]
loom::thread_local! {
    static TABLE: [Cell<Entry>; SLOTS] = Default::default();
}

/// The slot of the key of `hash`: the hash's top bits, which no cell index depends on alone.
#[inline(always)]
fn slot(hash: KeyHash) -> usize {
    // The top 4 bits: less than SLOTS.
    (hash.as_u64() >> (64 - SLOTS.trailing_zeros())) as usize
}

/// What this thread's table gives an event (see [`claim`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Claim {
    /// The events of it answered from the credit: all of it, or what the credit had left.
    pub(crate) taken: u32,
    /// Whether a reservation for the key may be held now: the slot holds no credit of another
    /// key or sketch, and none of this sketch's for a newer window.
    pub(crate) free: bool,
}

/// Takes up to `weight` events from this thread's credit for the key of `hash` in `window` of
/// sketch `sketch` (none if the slot holds another key's, another window's or another
/// sketch's credit), and says whether the slot is free for a new reservation of the key.
///
/// A credit smaller than the event is used up, the rest of the event counted: a credit is
/// never replaced while it holds anything for its window, so each thread holds at most one
/// unspent credit per key and window (the module docs' bound). Likewise a reservation never
/// replaces the live credit of another key or sketch (it would leave that key's credit unspent
/// and let the key reserve again: two alternating keys would each grow by `1 / 2^s` per
/// event), nor this sketch's credit of a newer window (a tick that lags back into an older
/// window would take a second credit there); it only replaces a credit of an older window of
/// this sketch, which no in-order tick can spend any more. A slot held by a credit nobody
/// spends (a key gone quiet, a dropped sketch) only stops the keys of that slot reserving on
/// this thread: they are counted as they come.
#[inline(always)]
pub(crate) fn claim(sketch: u64, hash: KeyHash, window: u64, weight: u32) -> Claim {
    TABLE.with(|table| {
        let cell = &table[slot(hash)];
        let mut entry = cell.get();
        let mut taken = 0;
        if entry.sketch == sketch
            && entry.hash == hash.as_u64()
            && entry.window == window
            && entry.credit != 0
        {
            taken = entry.credit.min(weight);
            entry.credit -= taken;
            cell.set(entry);
        }
        let free = if entry.sketch == sketch {
            entry.window < window || (entry.window == window && entry.credit == 0)
        } else {
            entry.credit == 0
        };
        Claim { taken, free }
    })
}

/// Gives this thread `credit` events of the key of `hash` in `window` of sketch `sketch`,
/// which the caller has just counted in the key's cells, in the key's slot: only after a
/// [`claim`] of the key said the slot is free, with nothing in between.
#[inline]
pub(crate) fn hold(sketch: u64, hash: KeyHash, window: u64, credit: u32) {
    TABLE.with(|table| {
        table[slot(hash)].set(Entry {
            sketch,
            hash: hash.as_u64(),
            window,
            credit,
        });
    });
}

/// How many events to reserve on top of an update, by the rule in the module docs: set per
/// sketch at build, bounded per observe by its cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reserve {
    /// `s`: a credit is `count >> s`; 0 reserves nothing.
    shift: u32,
    /// The largest count a reservation may raise the key to.
    ceiling: u32,
}

impl Reserve {
    /// Reserves nothing: every event is counted as it comes.
    pub(crate) const NONE: Reserve = Reserve {
        shift: 0,
        ceiling: 0,
    };

    /// Reservations of `count >> shift` (none for shift 0), up to `ceiling`.
    pub(crate) const fn new(shift: u32, ceiling: u32) -> Reserve {
        Reserve { shift, ceiling }
    }

    /// Whether this reserves anything at all.
    #[inline(always)]
    pub(crate) const fn is_on(self) -> bool {
        self.shift != 0
    }

    /// The same shift, and a ceiling of `ceiling` at most.
    #[inline(always)]
    pub(crate) fn below(self, ceiling: u32) -> Reserve {
        Reserve {
            shift: self.shift,
            ceiling: self.ceiling.min(ceiling),
        }
    }

    /// The events to reserve on top of an update of `weight` that brings the key's count to
    /// `count`: none if that is less than `weight`, a credit that would likely never answer an
    /// event of the weight that took it (a heavy single event stays exact).
    #[inline(always)]
    pub(crate) fn of(self, count: u32, weight: u32) -> u32 {
        if self.shift == 0 || self.shift >= 32 || weight == 0 {
            return 0;
        }
        let extra = (count >> self.shift).min(self.ceiling.saturating_sub(count));
        if extra < weight { 0 } else { extra }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credit_answers_its_own_key_window_and_sketch_only() {
        let (hash, other) = (KeyHash::of(1, b"a"), KeyHash::of(1, b"b"));
        let taken = |sketch, hash, window, weight| claim(sketch, hash, window, weight).taken;
        hold(7, hash, 3, 5);
        assert_eq!(taken(8, hash, 3, 1), 0, "another sketch");
        assert_eq!(taken(7, hash, 4, 1), 0, "the next window");
        if slot(other) != slot(hash) {
            assert_eq!(taken(7, other, 3, 1), 0, "another key");
        }
        assert_eq!(taken(7, hash, 3, 0), 0, "no weight");
        assert_eq!(taken(7, hash, 3, 2), 2);
        // A live credit: no other key, sketch or older window may take the slot.
        assert!(!claim(8, hash, 3, 1).free);
        assert!(!claim(7, hash, 2, 1).free);
        assert!(
            claim(7, hash, 4, 1).free,
            "an older window's credit is dead"
        );
        // A larger event uses the rest up, and then the slot is free.
        assert_eq!(
            claim(7, hash, 3, 9),
            Claim {
                taken: 3,
                free: true
            }
        );
        assert_eq!(taken(7, hash, 3, 1), 0, "spent");
        assert!(claim(8, hash, 3, 1).free, "a spent credit holds nothing");
        // A newer window's credit, even spent, keeps a lagging tick from reserving again.
        hold(7, hash, 5, 1);
        assert_eq!(taken(7, hash, 5, 1), 1);
        assert!(!claim(7, hash, 4, 1).free);
    }

    #[test]
    fn reservations_follow_the_count_and_stop_below_the_ceiling() {
        let reserve = Reserve::new(8, 1_000);
        assert_eq!(reserve.of(255, 1), 0, "small counts stay exact");
        assert_eq!(reserve.of(256, 1), 1);
        assert_eq!(reserve.of(900, 1), 3);
        assert_eq!(reserve.of(900, 3), 3);
        assert_eq!(reserve.of(900, 4), 0, "less than the event that took it");
        assert_eq!(reserve.of(999, 1), 1);
        assert_eq!(reserve.of(1_000, 1), 0);
        assert_eq!(reserve.below(901).of(900, 1), 1);
        assert_eq!(Reserve::NONE.of(1 << 20, 1), 0);
        assert_eq!(reserve.of(900, 0), 0, "no weight, no credit");
        assert!(!Reserve::NONE.is_on());
    }
}
