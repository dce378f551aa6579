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
//! A hot key's count grows by a factor `1 + 2^-s` or more per update once it passes `2^s`,
//! whichever thread updates it, so a window of `N` events of one key costs all threads together
//! about `2^s * (1 + ln(N / 2^s))` updates instead of `N` (at the default and a million
//! events, about 2,400: the contention example counted 2,300, and 2,800 for 4 threads of a
//! million each against 2,700), and the credited events only read lines that stay shared in
//! every core's cache.

use std::cell::Cell;

use crate::hash::KeyHash;

/// Entries in a thread's table (8 KiB): one per hot key the thread counts at once, in sets of
/// [`WAYS`] chosen by the key's hash. A key whose set is held by other keys' credits is counted
/// as it comes, never lost, but then it writes its shared cells on every event: on a skewed
/// stream with more keys past `2^s` than entries, that is where the bouncing lines come back.
/// Measured with the threads bench's Zipf stream (benches/README.md, "blocked/event"): at 64
/// entries in sets of 2, 0.28 to 0.39 of all events (1 to 16 threads) were such updates, up to
/// half of them of keys past 4,096 events; at 256 in sets of 4, with the rule of
/// [`free_for_another`], 0.05 to 0.16, and almost none of keys past 4,096.
const SLOTS: usize = 256;

/// Entries per set: a key may take any of its set's entries. Four entries of 32 bytes: one
/// set is two cache lines of the table, which is aligned to them.
const WAYS: usize = 4;

/// A thread's table: [`SLOTS`] entries, each set on lines of its own.
#[repr(align(128))]
struct Table([Cell<Entry>; SLOTS]);

/// A credit: `credit` events of the key of hash `hash` in window `window` of sketch `sketch`,
/// counted in its cells already.
#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    /// The sketch's id (see [`crate::sync::sketch_id`]); 0, which no sketch has, for none.
    sketch: u64,
    hash: u64,
    window: u64,
    credit: u32,
    /// The key's count when it last reserved here: how hot it was (see
    /// [`free_for_another`]).
    count: u32,
}

impl Entry {
    const EMPTY: Entry = Entry {
        sketch: 0,
        hash: 0,
        window: 0,
        credit: 0,
        count: 0,
    };
}

#[cfg(not(loom))]
std::thread_local! {
    // Const-initialised and without a destructor: a thread's first use registers nothing, and
    // every access is an offset from the thread pointer.
    static TABLE: Table = const { Table([const { Cell::new(Entry::EMPTY) }; SLOTS]) };
}

// Under loom each model thread has its own table, as real threads do, and a fresh one per
// execution.
#[cfg(loom)]
loom::thread_local! {
    static TABLE: Table = Table(std::array::from_fn(|_| Cell::new(Entry::EMPTY)));
}

/// The first entry of the set of the key of `hash`, from the hash's top bits, which no cell
/// index depends on alone.
#[inline(always)]
fn set(hash: KeyHash) -> usize {
    // The top 6 bits, times 4: at most SLOTS - WAYS.
    ((hash.as_u64() >> (64 - (SLOTS / WAYS).trailing_zeros())) as usize) * WAYS
}

/// What this thread's table gives an event (see [`claim`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Claim {
    /// The events of it answered from the credit: all of it, or what the credit had left.
    pub(crate) taken: u32,
    /// The entry a reservation for the key may be held in now, if any: the key's own entry
    /// if it has one (and it is free), else a free entry of its set. Free: no credit left, or
    /// one of this sketch's for an older window; never another key's or sketch's live credit,
    /// nor this sketch's of a newer window.
    pub(crate) entry: Option<u8>,
}

/// Whether a key of sketch `sketch` counted to `count` in `window` may take `entry`, another
/// key's: an empty entry, another sketch's spent one, this sketch's of an older window, or this
/// sketch's spent one of `window` whose key was counted to less than `count` when it last
/// reserved there. So a spent entry stays with its key for the window against colder keys:
/// keys just past `2^s` hold credits of one or two events, spend them and reserve again, and
/// under the first-free rule they took the entries that hotter keys left spent for an event,
/// and then held them live (measured: the hottest keys blocked on 0.07 of all events at 16
/// threads with 256 entries, 0.014 with this rule; see [`SLOTS`]). Live credits are never
/// taken whatever the count (see [`claim`]).
#[inline(always)]
fn free_for_another(entry: Entry, sketch: u64, window: u64, count: u32) -> bool {
    if entry.sketch == sketch {
        entry.window < window
            || (entry.window == window && entry.credit == 0 && count > entry.count)
    } else {
        entry.credit == 0
    }
}

/// Takes up to `weight` events from this thread's credit for the key of `hash` in `window` of
/// sketch `sketch` (none if its set holds no credit of that key, window and sketch), and says
/// which entry, if any, may hold a new reservation of the key, counted to `count` with this
/// event (see [`free_for_another`]).
///
/// A credit smaller than the event is used up, the rest of the event counted: a credit is
/// never replaced while it holds anything for its window, so each thread holds at most one
/// unspent credit per key and window (the module docs' bound). Likewise a reservation never
/// replaces the live credit of another key or sketch (it would leave that key's credit unspent
/// and let the key reserve again: two alternating keys would each grow by `1 / 2^s` per
/// event), nor this sketch's credit of a newer window (a tick that lags back into an older
/// window would take a second credit there); it only replaces a credit of an older window of
/// this sketch, which no in-order tick can spend any more. A key with an entry in its set
/// reserves only in that entry, so it never holds two. A set held by credits nobody spends (keys
/// gone quiet, a dropped sketch) only stops the keys of that set reserving on this thread:
/// they are counted as they come.
#[inline(always)]
pub(crate) fn claim(sketch: u64, hash: KeyHash, window: u64, weight: u32, count: u32) -> Claim {
    TABLE.with(|table| {
        let first = set(hash);
        let (mut taken, mut own, mut spare) = (0, None, None);
        for (index, cell) in table.0[first..first + WAYS].iter().enumerate() {
            let mut entry = cell.get();
            if entry.sketch == sketch && entry.hash == hash.as_u64() {
                if entry.window == window && entry.credit != 0 {
                    taken = entry.credit.min(weight);
                    entry.credit -= taken;
                    cell.set(entry);
                }
                // The key's own entry: free for it once spent, or from an older window.
                let free = entry.window < window || (entry.window == window && entry.credit == 0);
                own = Some((index, free));
                // A key has one entry in its set at most, and its own entry decides: the rest
                // of the set (for a set of four, its second line) need not be read.
                break;
            } else if spare.is_none() && free_for_another(entry, sketch, window, count) {
                spare = Some(index);
            }
        }
        let entry = match own {
            Some((index, true)) => Some(index),
            Some((_, false)) => None,
            None => spare,
        };
        // At most SLOTS - 1 < 256.
        let entry = entry.map(|index| (first + index) as u8);
        Claim { taken, entry }
    })
}

/// Gives this thread `credit` events of the key of `hash` in `window` of sketch `sketch`,
/// which the caller has just counted in the key's cells (to `count`, the credit included), in
/// `entry`: one a [`claim`] of the key gave, with nothing in between.
#[inline]
pub(crate) fn hold(entry: u8, sketch: u64, hash: KeyHash, window: u64, credit: u32, count: u32) {
    TABLE.with(|table| {
        table.0[usize::from(entry)].set(Entry {
            sketch,
            hash: hash.as_u64(),
            window,
            credit,
            count,
        });
    });
}

/// This thread's unspent credit for the key of `hash` in `window` of sketch `sketch` (0 if
/// its set holds none), taking nothing: events the key's cells already hold that no observe
/// of this thread has answered yet.
#[inline]
pub(crate) fn held(sketch: u64, hash: KeyHash, window: u64) -> u32 {
    TABLE.with(|table| {
        let first = set(hash);
        table.0[first..first + WAYS]
            .iter()
            .map(Cell::get)
            .find(|entry| {
                entry.sketch == sketch && entry.hash == hash.as_u64() && entry.window == window
            })
            .map_or(0, |entry| entry.credit)
    })
}

/// How many events to reserve on top of an update, by the rule in the module docs: set per
/// sketch at build, bounded per observe by its cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reserve {
    /// `s`: a credit is `count >> s`; 0 reserves nothing.
    shift: u32,
    /// The largest count a reservation may raise the key to.
    ceiling: u32,
    /// The entry of this thread's table the credit goes to (see [`claim`]).
    entry: u8,
}

impl Reserve {
    /// Reserves nothing: every event is counted as it comes.
    pub(crate) const NONE: Reserve = Reserve {
        shift: 0,
        ceiling: 0,
        entry: 0,
    };

    /// Reservations of `count >> shift` (none for shift 0), up to `ceiling`.
    pub(crate) const fn new(shift: u32, ceiling: u32) -> Reserve {
        Reserve {
            shift,
            ceiling,
            entry: 0,
        }
    }

    /// Whether a key counted to `count` may hold or take a credit: `count >= 2^s` (never
    /// with reservations off).
    #[inline(always)]
    pub(crate) fn reaches(self, count: u32) -> bool {
        self.shift != 0 && self.shift < 32 && count >> self.shift != 0
    }

    /// The same, its credit held in `entry` of this thread's table (from [`claim`]).
    #[inline(always)]
    pub(crate) fn held_in(self, entry: u8) -> Reserve {
        Reserve { entry, ..self }
    }

    /// The entry of this thread's table its credit goes to.
    #[inline(always)]
    pub(crate) fn entry(self) -> u8 {
        self.entry
    }

    /// Whether this reserves anything at all.
    #[inline(always)]
    pub(crate) const fn is_on(self) -> bool {
        self.shift != 0
    }

    /// The most that one thread's unspent credits add to the estimate `estimate` of a key
    /// counted with cap `cap` (`u64::MAX`: uncapped): `ceil(estimate / 2^s)` (the module
    /// docs' bound, per thread); 0 with reservations off, or for a cap of `2^s + 1` or less,
    /// below which no credit fits (one needs a count of `2^s` and room for at least one
    /// event more below the cap).
    pub(crate) fn share(self, estimate: u64, cap: u64) -> u64 {
        if self.shift == 0 || self.shift >= 32 || cap <= (1 << self.shift) + 1 {
            return 0;
        }
        estimate.div_ceil(1 << self.shift)
    }

    /// The same shift, and a ceiling of `ceiling` at most.
    #[inline(always)]
    pub(crate) fn below(self, ceiling: u32) -> Reserve {
        Reserve {
            ceiling: self.ceiling.min(ceiling),
            ..self
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

    /// Holds a credit for the key where a claim of it says it may, as an update that counted
    /// it to `count` would.
    fn give(sketch: u64, hash: KeyHash, window: u64, credit: u32, count: u32) {
        let entry = claim(sketch, hash, window, 0, count)
            .entry
            .expect("a free entry");
        hold(entry, sketch, hash, window, credit, count);
    }

    /// `n` distinct keys of one set of the table.
    fn one_set(n: usize) -> Vec<KeyHash> {
        let mut keys = (0..100_000u32).map(|i| KeyHash::of(2, &i.to_le_bytes()));
        let first = keys.next().expect("a key");
        let mut same: Vec<KeyHash> = keys.filter(|k| set(*k) == set(first)).take(n - 1).collect();
        same.insert(0, first);
        assert_eq!(same.len(), n);
        same
    }

    #[test]
    fn a_credit_answers_its_own_key_window_and_sketch_only() {
        let (hash, other) = (KeyHash::of(1, b"a"), KeyHash::of(1, b"b"));
        let taken = |sketch, hash, window, weight| claim(sketch, hash, window, weight, 300).taken;
        give(7, hash, 3, 5, 300);
        assert_eq!(taken(8, hash, 3, 1), 0, "another sketch");
        assert_eq!(taken(7, hash, 4, 1), 0, "the next window");
        assert_eq!(taken(7, other, 3, 1), 0, "another key");
        assert_eq!(taken(7, hash, 3, 0), 0, "no weight");
        assert_eq!(taken(7, hash, 3, 2), 2);
        // A live credit: the key may not reserve again, nor for an older window.
        assert_eq!(claim(7, hash, 3, 0, 300).entry, None);
        assert_eq!(claim(7, hash, 2, 0, 300).entry, None);
        assert!(
            claim(7, hash, 4, 0, 300).entry.is_some(),
            "an older window's credit is dead"
        );
        // A larger event uses the rest up, and then the key's own entry is free.
        let own = claim(7, hash, 3, 9, 300);
        assert_eq!(own.taken, 3);
        assert!(own.entry.is_some());
        assert_eq!(taken(7, hash, 3, 1), 0, "spent");
        // A newer window's credit, even spent, keeps a lagging tick from reserving again.
        give(7, hash, 5, 1, 300);
        assert_eq!(taken(7, hash, 5, 1), 1);
        assert_eq!(claim(7, hash, 4, 0, 300).entry, None);
    }

    #[test]
    fn live_credits_of_other_keys_are_never_replaced() {
        // A set's every entry holds a live credit: one key more finds no free entry, however
        // hot, in this sketch or another.
        let keys = one_set(WAYS + 1);
        let (holders, late) = (&keys[..WAYS], keys[WAYS]);
        for &key in holders {
            give(9, key, 1, 4, 1_000);
        }
        assert_eq!(
            claim(9, late, 1, 1, u32::MAX).entry,
            None,
            "every entry live"
        );
        assert_eq!(
            claim(10, late, 1, 1, u32::MAX).entry,
            None,
            "another sketch neither"
        );
        // Once one is spent, a hotter key may take its entry.
        assert_eq!(claim(9, holders[0], 1, 4, 1_000).taken, 4);
        assert!(claim(9, late, 1, 1, 1_001).entry.is_some());
        for &key in &holders[1..] {
            assert_eq!(claim(9, key, 1, 4, 1_000).taken, 4, "untouched");
        }
    }

    /// The rule of `free_for_another`: a spent entry of this sketch's window stays with its key
    /// against keys counted no further than it was; a hotter key, another sketch's key (the
    /// entry is spent) or any key in a later window may take it.
    #[test]
    fn a_spent_entry_stays_with_its_key_against_colder_keys() {
        let keys = one_set(WAYS + 1);
        let (holders, late) = (&keys[..WAYS], keys[WAYS]);
        for &key in holders {
            give(11, key, 1, 1, 5_000);
            assert_eq!(claim(11, key, 1, 1, 5_000).taken, 1, "spent");
        }
        assert_eq!(claim(11, late, 1, 1, 300).entry, None, "colder");
        assert_eq!(claim(11, late, 1, 1, 5_000).entry, None, "as hot");
        assert!(claim(11, late, 1, 1, 5_001).entry.is_some(), "hotter");
        assert!(claim(12, late, 1, 1, 1).entry.is_some(), "another sketch");
        assert!(claim(11, late, 2, 1, 1).entry.is_some(), "a later window");
        // The owners themselves reserve again in their own entries.
        for &key in holders {
            assert!(claim(11, key, 1, 1, 5_001).entry.is_some());
        }
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
        assert!(!reserve.reaches(255) && reserve.reaches(256));
        assert!(!Reserve::NONE.reaches(u32::MAX));
        assert_eq!(reserve.share(0, u64::MAX), 0);
        assert_eq!(reserve.share(256, u64::MAX), 1);
        assert_eq!(reserve.share(257, u64::MAX), 2, "rounded up");
        assert_eq!(reserve.share(300, 258), 2);
        assert_eq!(reserve.share(300, 257), 0, "no credit fits below the cap");
        assert_eq!(Reserve::NONE.share(1 << 20, u64::MAX), 0);
    }
}
