//! [`RateSketch`]: the windows, the front and the counters behind one call.

use std::time::Duration;

use crate::bloom::{Front, Presence, Sighting};
use crate::builder::Builder;
use crate::clock::Tick;
use crate::count_min::{COUNT_MAX, CountMin, FIXED_DEPTH, MAX_DEPTH, Snapshot};
use crate::hash::KeyHash;
use crate::hot::{HotKeys, Stamp};
use crate::pair::{Fold, Halves};
use crate::reserve::Reserve;
use crate::stats::Stats;
use crate::sync::AtomicU64;
use crate::tally::{Stripes, Tally, WINDOWS};
use crate::window::{Position, Windows};

/// A weight as one counter takes it: saturated at [`COUNT_MAX`].
#[inline]
fn clamp(weight: u64) -> u32 {
    u32::try_from(weight).unwrap_or(u32::MAX).min(COUNT_MAX)
}

/// `estimate` raised to `cap` if the key's counts say it reached `cap` in either window: its
/// count stopped there (see [`RateSketch::observe_capped`]), so the share of the previous
/// window cannot fade below it.
#[inline]
fn saturated(estimate: u64, counts: Halves, cap: u64) -> u64 {
    if u64::from(counts.current) >= cap || u64::from(counts.previous) >= cap {
        estimate.max(cap)
    } else {
        estimate
    }
}

/// A key prepared for an observe (see [`RateSketch::prepare`]): its hash, its cap, the window
/// position of the tick it was prepared at, and whether the hot keys' table answered it then.
/// Valid for the sketch that prepared it only.
#[derive(Clone, Copy, Debug)]
#[must_use = "a prepared key is for `observe_prepared`"]
pub struct Prepared {
    hash: KeyHash,
    cap: u64,
    at: Position,
    noted: bool,
}

/// A tick as every key prepared at it shares it (see [`RateSketch::moment`]): its window
/// position and its window's stamp in the hot keys' table (see `crate::hot`), worked out once
/// for a batch instead of once per key. Made for one sketch; another sketch with windows of
/// another length works the tick out again (see [`RateSketch::prepare_at`]), so a moment
/// handed to the wrong sketch costs time, never a count.
#[derive(Clone, Copy, Debug)]
pub struct Moment {
    at: Position,
    stamp: Stamp,
    /// The tick and the window length `at` was worked out from.
    now: Tick,
    window_nanos: u64,
}

/// What an observe has left to count once this thread's credit took its part (see
/// [`RateSketch::claim`]), and how the count may reserve ahead.
#[derive(Clone, Copy)]
struct Event {
    /// The weight to count, clamped.
    weight: u32,
    reserve: Reserve,
}

/// Whether an observe has consulted the hot keys' table for its key yet.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Looked {
    Up,
    Not,
}

/// A fixed-memory, lock-free, sliding-window event counter for any number of keys.
///
/// `observe` counts an event and returns the key's sliding-window estimate; `estimate` reads it
/// without counting. Estimates never fall below the true sliding count, for ticks in order or
/// lagging the newest by at most [`RateSketch::lag_tolerance`] (see the crate docs for how far
/// above they can go). `RateSketch` is `Send + Sync`: share it by reference or `Arc`.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use tollgate_sketch::{RateSketch, Tick};
/// let sketch = RateSketch::builder()
///     .window(Duration::from_secs(10))
///     .memory_bytes(2 << 20)
///     .build()?;
/// let now = Tick::from_nanos(1_000_000);
/// assert_eq!(sketch.observe(b"203.0.113.7", 1, now), 1);
/// assert_eq!(sketch.observe(b"203.0.113.7", 1, now), 2);
/// assert_eq!(sketch.estimate(b"203.0.113.7", now), 2);
/// // A window later, half of the previous window still counts.
/// let later = now + Duration::from_secs(15);
/// assert_eq!(sketch.estimate(b"203.0.113.7", later), 1);
/// # Ok::<(), tollgate_sketch::BuildError>(())
/// ```
#[derive(Debug)]
pub struct RateSketch {
    // Built by `Builder::build`; read directly by the snapshot module.
    pub(crate) counters: CountMin,
    pub(crate) front: Front,
    /// Keys found at their cap in the current window, for `observe_capped`.
    pub(crate) hot: HotKeys,
    pub(crate) events: Stripes,
    /// How many other sketches' fronts were merged into each window.
    pub(crate) merged_fronts: Tally,
    pub(crate) windows: Windows,
    pub(crate) seed: u64,
    pub(crate) front_weight: u32,
    /// How far a tick may lag the newest and still never underestimate.
    pub(crate) lag_tolerance: Duration,
    /// This sketch's id, which no other sketch of the process has had: the threads' credits
    /// (see [`crate::reserve`]) name it.
    pub(crate) id: u64,
    /// How uncapped observes reserve (see [`crate::reserve`]); capped ones lower its ceiling.
    pub(crate) reserve: Reserve,
}

impl RateSketch {
    /// A builder with the default settings.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Bytes every sketch holds besides its counters and front.
    pub(crate) fn fixed_bytes() -> usize {
        std::mem::size_of::<RateSketch>() + Stripes::HEAP_BYTES
    }

    /// The key's hash under this sketch's seed, for the `*_hashed` methods.
    #[must_use]
    pub fn hash(&self, key: &[u8]) -> KeyHash {
        KeyHash::of(self.seed, key)
    }

    /// Counts an event of `weight` for `key` at `now` and returns the key's sliding-window
    /// estimate including it, rounded up. Lock-free, allocation-free, constant time.
    ///
    /// Weights above the largest per-window count ([`RateSketch::max_count`]) saturate.
    #[must_use = "the estimate is the point of observing; use `estimate` to read without counting"]
    pub fn observe(&self, key: &[u8], weight: u64, now: Tick) -> u64 {
        // The observe's body in this frame, not a call of `observe_hashed`: a second frame
        // cost 20 instructions an event or more in saving and moving registers (callgrind).
        self.observe_by_depth(self.hash(key), weight, now)
    }

    /// [`RateSketch::observe`] with a hash from [`RateSketch::hash`].
    #[must_use = "the estimate is the point of observing; use `estimate` to read without counting"]
    pub fn observe_hashed(&self, hash: KeyHash, weight: u64, now: Tick) -> u64 {
        self.observe_by_depth(hash, weight, now)
    }

    /// The body of [`RateSketch::observe_hashed`], inlined into it and into
    /// [`RateSketch::observe`].
    #[inline(always)]
    fn observe_by_depth(&self, hash: KeyHash, weight: u64, now: Tick) -> u64 {
        // The default depth takes a path of its own, its rows' loops unrolled (see
        // `crate::count_min::FIXED_DEPTH`); the branch goes the same way for every event.
        if self.counters.depth() == FIXED_DEPTH {
            self.observe_rows::<FIXED_DEPTH>(hash, weight, now)
        } else {
            self.observe_rows::<MAX_DEPTH>(hash, weight, now)
        }
    }

    /// [`RateSketch::observe_hashed`] with the key's cells in an array of `D` (see
    /// [`crate::count_min::Cells`]).
    #[inline(always)]
    fn observe_rows<const D: usize>(&self, hash: KeyHash, weight: u64, now: Tick) -> u64 {
        let at = self.windows.position(now);
        // Read the counters before the front's swap, which on x86 waits for all earlier loads:
        // the misses then overlap instead of adding up, and the update starts from these words.
        let (located, words) = self.counters.locate_read::<D>(hash);
        // The front's line too, now, as in `observe_located`: its load came after the branch
        // on the cells' counts below, so its miss started only once theirs were in (perf: the
        // register's load held 8% of an observe's samples at 2 MiB).
        let register = self.front.register(hash);
        Front::prefetch(register);
        let snapshot = CountMin::snapshot(&located, words);
        let read = self.counters.counts(&snapshot, at.index);
        let Some(event) = self.claim(hash, clamp(weight), read, at, self.reserve) else {
            // Counted already, when the credit was reserved: the cells hold it (and the events
            // tally), so only read them.
            return self.slide(at, read, self.front.presence(hash, at.index));
        };
        let (counts, presence) = self.count(hash, register, snapshot, read, event, at);
        self.slide(at, counts, presence)
    }

    /// What this thread's credit for the key of `hash` (read as `read`) in `at`'s window leaves
    /// of an event of `weight` (clamped) to count, and how that count may reserve: by `reserve` if the key's
    /// slot is free, not at all otherwise (see [`crate::reserve::claim`]). `None` if the
    /// credit answers the whole event.
    #[inline(always)]
    fn claim(
        &self,
        hash: KeyHash,
        weight: u32,
        read: Halves,
        at: Position,
        reserve: Reserve,
    ) -> Option<Event> {
        // A key whose count read below `2^s - weight` holds no credit on this thread (the
        // update that reserved it raised every cell to `2^s` or more, and this thread reads
        // that or later) and reserves nothing now: counted with no look at the table. (A read
        // that missed a credit only counts the event again: never unsafe.) Most keys of a
        // skewed stream are such: the test keeps the table off their path.
        // The key's count with this event, as the table weighs keys (see `crate::reserve`).
        let count = read.current.saturating_add(weight);
        if !reserve.reaches(count) || weight == 0 {
            // An event of no weight is counted as ever: its first sighting marks the front.
            let reserve = Reserve::NONE;
            return Some(Event { weight, reserve });
        }
        let claim = crate::reserve::claim(self.id, hash, at.index, weight, count);
        let reserve = match claim.entry {
            Some(entry) => reserve.held_in(entry),
            None => Reserve::NONE,
        };
        if claim.taken == weight {
            #[cfg(tollgate_contention)]
            crate::contention::credited();
            return None;
        }
        #[cfg(tollgate_contention)]
        if claim.entry.is_none() {
            crate::contention::blocked();
        }
        Some(Event {
            weight: weight - claim.taken,
            reserve,
        })
    }

    /// Loads the cache lines an observe of the key at `hash` will need, counting nothing and
    /// waiting for nothing. For batches: touch every key of a batch first, then observe them;
    /// the memory misses of the batch then overlap instead of coming one key at a time.
    ///
    /// # Examples
    /// ```
    /// use tollgate_sketch::{RateSketch, Tick};
    /// let sketch = RateSketch::builder().build()?;
    /// let keys: [&[u8]; 3] = [b"a", b"b", b"c"];
    /// let hashes = keys.map(|key| sketch.hash(key));
    /// hashes.iter().for_each(|&hash| sketch.touch(hash));
    /// let counts = hashes.map(|hash| sketch.observe_hashed(hash, 1, Tick::ZERO));
    /// assert_eq!(counts, [1, 1, 1]);
    /// # Ok::<(), tollgate_sketch::BuildError>(())
    /// ```
    #[inline]
    pub fn touch(&self, hash: KeyHash) {
        // As in `observe_hashed`: the default depth on a path of its own (its rows' loop
        // unrolled: about 20 instructions a key fewer in the frames bench's floor, callgrind).
        if self.counters.depth() == FIXED_DEPTH {
            self.counters.touch::<FIXED_DEPTH>(hash);
        } else {
            self.counters.touch::<MAX_DEPTH>(hash);
        }
        self.front.touch(hash);
    }

    /// Counts an event like [`RateSketch::observe`] for a caller that acts on counts up to
    /// `cap` only (a limiter: its limit + 1, or more), and returns the key's sliding-window
    /// estimate, **never below `min(cap, true sliding count)`**.
    ///
    /// Below `cap` this is `observe`: same count, same estimate, same guarantees (but for
    /// reservations, which stop below the cap: see [`Builder::reserve_shift`]). Once
    /// the key's count in the current window has reached `cap`, an observe only reads: no
    /// compare-and-swap, no write, so the cache lines of a flood's hot keys stay shared between
    /// cores. Its events are not counted (the event totals of [`RateSketch::stats`] still
    /// include them, so the stated bound only overstates). What the promise costs above
    /// `cap`: how far above it a key went is not known, so a key whose count reached `cap` in a
    /// window reads at least `cap` for the rest of that window **and the whole next one**,
    /// where `observe` would let the previous window's share fade. A limiter that passes
    /// `limit + 1` then holds a key that went over its limit within one window over it until
    /// the next window ends; one that passes `2 * limit + 1` changes nothing for keys up to
    /// twice their limit, and those above are over it for at least the first half of the next
    /// window anyway.
    ///
    /// Read the key with [`RateSketch::estimate_capped`] and the same `cap`: the plain
    /// `estimate` of a capped key may fall below its true count. `cap` 0 counts nothing.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use tollgate_sketch::{RateSketch, Tick};
    /// // No Bloom front here: with one, the counters reach the cap an event later.
    /// let sketch = RateSketch::builder()
    ///     .window(Duration::from_secs(10))
    ///     .front_share(0.0)
    ///     .build()?;
    /// let now = Tick::from_nanos(1_000);
    /// for expected in 1..=3 {
    ///     assert_eq!(sketch.observe_capped(b"flood", 1, 3, now), expected);
    /// }
    /// // At the cap: read-only from here on, and never below the cap.
    /// assert_eq!(sketch.observe_capped(b"flood", 1, 3, now), 3);
    /// // The whole next window reads at least the cap, even where the share would fade.
    /// let late = now + Duration::from_millis(19_000);
    /// assert_eq!(sketch.estimate_capped(b"flood", 3, late), 3);
    /// # Ok::<(), tollgate_sketch::BuildError>(())
    /// ```
    #[must_use = "the estimate is the point of observing; use `estimate_capped` to read"]
    pub fn observe_capped(&self, key: &[u8], weight: u64, cap: u64, now: Tick) -> u64 {
        // The observe's body in this frame too, not a call of `observe_hashed_capped` (see
        // `observe`).
        self.capped_by_depth(self.hash(key), weight, cap, now)
    }

    /// [`RateSketch::observe_capped`] with a hash from [`RateSketch::hash`].
    #[must_use = "the estimate is the point of observing; use `estimate_capped` to read"]
    pub fn observe_hashed_capped(&self, hash: KeyHash, weight: u64, cap: u64, now: Tick) -> u64 {
        self.capped_by_depth(hash, weight, cap, now)
    }

    /// The body of [`RateSketch::observe_hashed_capped`], inlined into it and into
    /// [`RateSketch::observe_capped`].
    #[inline(always)]
    fn capped_by_depth(&self, hash: KeyHash, weight: u64, cap: u64, now: Tick) -> u64 {
        // As in `observe_hashed`: the default depth on a path of its own.
        if self.counters.depth() == FIXED_DEPTH {
            self.observe_capped_rows::<FIXED_DEPTH>(hash, weight, cap, now)
        } else {
            self.observe_capped_rows::<MAX_DEPTH>(hash, weight, cap, now)
        }
    }

    /// [`RateSketch::observe_hashed_capped`] with the key's cells in an array of `D` (see
    /// [`crate::count_min::Cells`]).
    #[inline(always)]
    fn observe_capped_rows<const D: usize>(
        &self,
        hash: KeyHash,
        weight: u64,
        cap: u64,
        now: Tick,
    ) -> u64 {
        let at = self.windows.position(now);
        if Self::notable(cap) && !self.hot.is_empty() {
            let located = self.counters.locate::<D>(hash);
            // Prefetches retire at once: on a hit below nothing waits for them, and when the
            // branch is guessed wrong the cells' misses have started anyway.
            self.counters.prefetch(&located);
            if self.hot.holds(hash, at.index, cap) {
                // Seen at its cap in this window already: what the read-only path below would
                // do, without reading the cells (see `crate::hot`).
                self.events.add(at.index, u64::from(clamp(weight)));
                return cap;
            }
            let snapshot = self.counters.read(&located);
            return self.observe_located(hash, snapshot, weight, cap, at, Looked::Up);
        }
        // No table to ask: the cells' loads go out as each is found.
        let (located, words) = self.counters.locate_read::<D>(hash);
        let snapshot = CountMin::snapshot(&located, words);
        self.observe_located(hash, snapshot, weight, cap, at, Looked::Up)
    }

    /// The rest of [`RateSketch::observe_hashed_capped`] once the key's cells are located and
    /// read (`snapshot`) and the hot keys' table was consulted (`Looked::Up`) or not
    /// (`Looked::Not`: then only for a key whose cells read the cap, the one case where the
    /// answer may come from a note).
    #[inline(always)]
    fn observe_located<const D: usize>(
        &self,
        hash: KeyHash,
        snapshot: Snapshot<'_, D>,
        weight: u64,
        cap: u64,
        at: Position,
        looked: Looked,
    ) -> u64 {
        // The front's line too, now: the branch below waits for the cells, and when it guesses
        // wrong the front's miss would otherwise start only after theirs (measured: capped
        // observes were slower than plain ones at 32 MiB without this).
        let register = self.front.register(hash);
        Front::prefetch(register);
        // A stale word only reads lower (a window's count never falls while it is current, and
        // a word of an older window decodes as older), so a stale read never stops a count
        // that should go on; it just takes the counting path below.
        let read = self.counters.counts(&snapshot, at.index);
        if u64::from(read.current) >= cap {
            // Read-only: the events total still counts the event, so the bound overstates.
            self.events.add(at.index, u64::from(clamp(weight)));
            if Self::notable(cap) {
                if looked == Looked::Not && self.hot.holds(hash, at.index, cap) {
                    // Noted since it was prepared (an earlier event of a batch): the answer
                    // `observe_hashed_capped` gives, and no note written over another key's.
                    return cap;
                }
                // The nanoseconds left in the window pick one of the key's two slots.
                self.hot.note_capped(hash, at.index, cap, at.remaining);
            }
            return self
                .windows
                .slide(at, u64::from(read.current), u64::from(read.previous))
                .max(cap);
        }
        // Reservations stop below the cap: a key reads its cap (and turns read-only, and is
        // noted) on its own events and collisions, never on events counted ahead.
        let reserve = self
            .reserve
            .below(u32::try_from(cap.saturating_sub(1)).unwrap_or(u32::MAX));
        let Some(event) = self.claim(hash, clamp(weight), read, at, reserve) else {
            // As in `observe_rows`: counted when reserved, below the cap.
            let presence = self.front.presence(hash, at.index);
            return saturated(self.slide(at, read, presence), read, cap);
        };
        let (counts, presence) = match looked {
            // One event (`observe_hashed_capped`): counted in this frame.
            Looked::Up => self.count(hash, register, snapshot, read, event, at),
            // A batch's (`observe_prepared`): see `count_in_batch`.
            Looked::Not => self.count_in_batch(hash, register, snapshot, read, event, at),
        };
        saturated(self.slide(at, counts, presence), counts, cap)
    }

    /// Touches the key of `hash` like [`RateSketch::touch_capped`] for an observe capped at
    /// `cap` at `now`, and keeps what that observe needs: its window position and whether the
    /// hot keys' table already answers it. [`RateSketch::observe_prepared`] then counts the
    /// event without working either out again. For batches: prepare every key of a batch,
    /// then observe them (as [`RateSketch::observe_batch`] does).
    ///
    /// # Examples
    /// ```
    /// use tollgate_sketch::{RateSketch, Tick};
    /// let sketch = RateSketch::builder().front_share(0.0).build()?;
    /// let keys: [&[u8]; 3] = [b"a", b"b", b"a"];
    /// let prepared = keys.map(|key| sketch.prepare(sketch.hash(key), 100, Tick::ZERO));
    /// let counts = prepared.map(|p| sketch.observe_prepared(p, 1));
    /// assert_eq!(counts, [1, 1, 2]);
    /// # Ok::<(), tollgate_sketch::BuildError>(())
    /// ```
    #[inline]
    pub fn prepare(&self, hash: KeyHash, cap: u64, now: Tick) -> Prepared {
        self.prepare_at(hash, cap, &self.moment(now))
    }

    /// The tick `now` as keys prepared at it share it (see [`RateSketch::prepare_at`]).
    #[inline]
    pub fn moment(&self, now: Tick) -> Moment {
        let at = self.windows.position(now);
        Moment {
            at,
            stamp: Stamp::of(at.index),
            now,
            window_nanos: self.windows.len_nanos(),
        }
    }

    /// `moment` if it was worked out for windows of this sketch's length (a position depends
    /// on nothing else), or its tick worked out again for this sketch.
    #[inline(always)]
    fn own(&self, moment: &Moment) -> Moment {
        if moment.window_nanos == self.windows.len_nanos() {
            *moment
        } else {
            self.moment(moment.now)
        }
    }

    /// [`RateSketch::prepare`] at a tick worked out once for a batch: `moment`, from
    /// [`RateSketch::moment`] of this sketch (one of a sketch with windows of another length
    /// is worked out again here, one compare a key otherwise). The same key prepared at the
    /// same tick either way counts the same; this way the window's division and the hot keys'
    /// window mix are done once per batch instead of once per key.
    ///
    /// # Examples
    /// ```
    /// use tollgate_sketch::{RateSketch, Tick};
    /// let sketch = RateSketch::builder().front_share(0.0).build()?;
    /// let moment = sketch.moment(Tick::ZERO);
    /// let keys: [&[u8]; 3] = [b"a", b"b", b"a"];
    /// let prepared = keys.map(|key| sketch.prepare_at(sketch.hash(key), 100, &moment));
    /// let counts = prepared.map(|p| sketch.observe_prepared(p, 1));
    /// assert_eq!(counts, [1, 1, 2]);
    /// # Ok::<(), tollgate_sketch::BuildError>(())
    /// ```
    // Inlined into the batch's loop: out of line its call and frame cost the frames bench's
    // floor 31 instructions a frame (callgrind); `touch` forced in too cost 2.5 more.
    #[inline(always)]
    pub fn prepare_at(&self, hash: KeyHash, cap: u64, moment: &Moment) -> Prepared {
        let moment = self.own(moment);
        let noted = self.noted(hash, moment.stamp, cap);
        if !noted {
            self.touch(hash);
        }
        Prepared {
            hash,
            cap,
            at: moment.at,
            noted,
        }
    }

    /// Counts an event of `weight` for a key prepared with [`RateSketch::prepare`]: exactly
    /// what [`RateSketch::observe_hashed_capped`] returns for the hash, cap and tick given to
    /// `prepare`, with the same guarantees.
    #[must_use = "the estimate is the point of observing; use `estimate_capped` to read"]
    #[inline]
    pub fn observe_prepared(&self, prepared: Prepared, weight: u64) -> u64 {
        let Prepared {
            hash,
            cap,
            at,
            noted,
        } = prepared;
        if noted {
            // Noted at its cap in this window when prepared, and a note stays true for its
            // whole window (see `crate::hot`): the answer of `observe_hashed_capped`.
            self.events.add(at.index, u64::from(clamp(weight)));
            return cap;
        }
        // As in `observe_hashed`: the default depth on a path of its own.
        if self.counters.depth() == FIXED_DEPTH {
            self.observe_prepared_rows::<FIXED_DEPTH>(hash, weight, cap, at)
        } else {
            self.observe_prepared_rows::<MAX_DEPTH>(hash, weight, cap, at)
        }
    }

    /// The counting part of [`RateSketch::observe_prepared`], for a key the table did not
    /// answer, with its cells in an array of `D` (see [`crate::count_min::Cells`]).
    #[inline(always)]
    fn observe_prepared_rows<const D: usize>(
        &self,
        hash: KeyHash,
        weight: u64,
        cap: u64,
        at: Position,
    ) -> u64 {
        let (located, words) = self.counters.locate_read::<D>(hash);
        let snapshot = CountMin::snapshot(&located, words);
        self.observe_located(hash, snapshot, weight, cap, at, Looked::Not)
    }

    /// [`RateSketch::touch`] for an observe capped at `cap` at `now`: nothing to load for a key
    /// already seen at its cap in that window (its next observe reads one word, in cache).
    #[inline]
    pub fn touch_capped(&self, hash: KeyHash, cap: u64, now: Tick) {
        if !self.noted(hash, Stamp::of(self.windows.position(now).index), cap) {
            self.touch(hash);
        }
    }

    /// Whether a cap can be noted in [`HotKeys`]: one a count can reach, and not 0 (which
    /// counts nothing and is answered from the cells as they are).
    #[inline]
    fn notable(cap: u64) -> bool {
        (1..=u64::from(COUNT_MAX)).contains(&cap)
    }

    /// Whether the key of `hash` was seen at `cap` in the window of `window`'s stamp (see
    /// [`crate::hot`]).
    #[inline]
    fn noted(&self, hash: KeyHash, window: Stamp, cap: u64) -> bool {
        Self::notable(cap) && self.hot.holds_in(hash, window, cap)
    }

    /// Counts one event of `weight` for each of `keys` at `now`, capped at `cap` (`u64::MAX`:
    /// no cap), and appends each key's estimate to `estimates`, in order: exactly what
    /// [`RateSketch::observe_capped`] returns for each key in turn. Keys go in groups of
    /// [`RateSketch::OBSERVE_BATCH`]: a group is hashed and its cache lines prefetched (see
    /// [`RateSketch::touch`]) before any of it is counted, so the group's memory misses
    /// overlap instead of coming one key after another. For a caller that holds several
    /// events at once (a receive batch of packets); allocation-free if `estimates` has room.
    ///
    /// # Examples
    /// ```
    /// use tollgate_sketch::{RateSketch, Tick};
    /// let sketch = RateSketch::builder().front_share(0.0).build()?;
    /// let mut estimates = Vec::new();
    /// sketch.observe_batch([b"a", b"b", b"a"], 1, u64::MAX, Tick::ZERO, &mut estimates);
    /// assert_eq!(estimates, [1, 1, 2]);
    /// # Ok::<(), tollgate_sketch::BuildError>(())
    /// ```
    pub fn observe_batch<K: AsRef<[u8]>>(
        &self,
        keys: impl IntoIterator<Item = K>,
        weight: u64,
        cap: u64,
        now: Tick,
        estimates: &mut Vec<u64>,
    ) {
        let moment = self.moment(now);
        let mut keys = keys.into_iter();
        loop {
            let mut prepared = [None; Self::OBSERVE_BATCH];
            let mut len = 0;
            for (slot, key) in prepared.iter_mut().zip(keys.by_ref()) {
                *slot = Some(self.prepare_at(self.hash(key.as_ref()), cap, &moment));
                len += 1;
            }
            // Borrowed, not moved: moving the array copied all of it first.
            for key in prepared.iter().flatten() {
                estimates.push(self.observe_prepared(*key, weight));
            }
            if len < Self::OBSERVE_BATCH {
                return;
            }
        }
    }

    /// Keys per group in [`RateSketch::observe_batch`]: about five cache lines each, enough
    /// misses in flight to keep a core's line-fill buffers busy.
    pub const OBSERVE_BATCH: usize = 16;

    /// Counts `event`'s weight for the key of `hash` and `snapshot` in `at`'s window: the front
    /// first (in `register`, the key's from [`Front::register`]), then the counters with what
    /// it did not absorb, starting from `read`, the snapshot's counts, with a reservation on top
    /// by `event`'s reserve (then held as this thread's credit, see [`crate::reserve`]). The
    /// key's counts (including it) and which fronts hold it.
    ///
    /// Inlined: out of line, its call and frame cost about 40 instructions per counted event
    /// (callgrind).
    #[inline(always)]
    fn count<const D: usize>(
        &self,
        hash: KeyHash,
        register: Option<&AtomicU64>,
        mut snapshot: Snapshot<'_, D>,
        read: Halves,
        event: Event,
        at: Position,
    ) -> (Halves, Presence) {
        let Event { weight, reserve } = event;
        let (sighting, presence) = Front::sight_in(register, hash, at.index);
        let absorbed = match sighting {
            Sighting::First => weight.min(self.front_weight),
            Sighting::Again => 0,
        };
        let (counts, reserved) = if weight > absorbed {
            self.counters
                .add(&mut snapshot, read, weight - absorbed, at.index, reserve)
        } else {
            (self.counters.reread(&mut snapshot, at.index), 0)
        };
        if reserved != 0 {
            // After the update that counted it: the credit answers only events the cells hold.
            crate::reserve::hold(
                reserve.entry(),
                self.id,
                hash,
                at.index,
                reserved,
                counts.current,
            );
            #[cfg(tollgate_contention)]
            crate::contention::reserved();
        }
        // Reserved events are tallied now, credited ones never again: the stated eps * N
        // covers every event the cells hold.
        self.events
            .add(at.index, u64::from(weight) + u64::from(reserved));
        (counts, presence)
    }

    /// [`RateSketch::count`] for an event of a batch, left to the compiler to inline or not
    /// (as `count` was for every path before it was forced inline): forced into
    /// `observe_prepared` too, the batch of 16 at 2 MiB ran about 9% slower (pinned runs,
    /// medians 721 against 662 us per 2^14 events).
    #[inline]
    fn count_in_batch<const D: usize>(
        &self,
        hash: KeyHash,
        register: Option<&AtomicU64>,
        snapshot: Snapshot<'_, D>,
        read: Halves,
        event: Event,
        at: Position,
    ) -> (Halves, Presence) {
        self.count(hash, register, snapshot, read, event, at)
    }

    /// The key's sliding-window estimate at `now`, counting nothing.
    #[must_use]
    pub fn estimate(&self, key: &[u8], now: Tick) -> u64 {
        self.estimate_hashed(self.hash(key), now)
    }

    /// [`RateSketch::estimate`] with a hash from [`RateSketch::hash`].
    #[must_use]
    pub fn estimate_hashed(&self, hash: KeyHash, now: Tick) -> u64 {
        let at = self.windows.position(now);
        let presence = self.front.presence(hash, at.index);
        self.slide(at, self.counters.estimate(hash, at.index), presence)
    }

    /// The part of [`RateSketch::estimate`] counted in the window `now` falls in (with what
    /// the front may have absorbed of the key there), rounded up like the estimate; the rest
    /// of the estimate is the previous window's fading share. A cluster sharing a key's count
    /// needs the two apart: the current window's count holds until the window ends, the
    /// previous window's share is gone by then.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use tollgate_sketch::{RateSketch, Tick};
    /// let sketch = RateSketch::builder()
    ///     .window(Duration::from_secs(10))
    ///     .memory_bytes(2 << 20)
    ///     .build()?;
    /// let now = Tick::from_nanos(1_000_000);
    /// let _ = sketch.observe(b"k", 4, now);
    /// let later = now + Duration::from_secs(15);
    /// let _ = sketch.observe(b"k", 3, later);
    /// // 3 in this window, and half of the previous window's 4.
    /// assert_eq!(sketch.estimate(b"k", later), 5);
    /// assert_eq!(sketch.current_count(b"k", later), 3);
    /// # Ok::<(), tollgate_sketch::BuildError>(())
    /// ```
    #[must_use]
    pub fn current_count(&self, key: &[u8], now: Tick) -> u64 {
        let hash = self.hash(key);
        let at = self.windows.position(now);
        let presence = self.front.presence(hash, at.index);
        let counts = self.counters.estimate(hash, at.index);
        let current = u64::from(counts.current);
        if presence.current {
            current.saturating_add(self.front_slack(at.index))
        } else {
            current
        }
    }

    /// The estimate of a key counted with [`RateSketch::observe_capped`] and `cap`, counting
    /// nothing: never below `min(cap, true sliding count)`.
    #[must_use]
    pub fn estimate_capped(&self, key: &[u8], cap: u64, now: Tick) -> u64 {
        self.estimate_hashed_capped(self.hash(key), cap, now)
    }

    /// [`RateSketch::estimate_capped`] with a hash from [`RateSketch::hash`].
    #[must_use]
    pub fn estimate_hashed_capped(&self, hash: KeyHash, cap: u64, now: Tick) -> u64 {
        let at = self.windows.position(now);
        let presence = self.front.presence(hash, at.index);
        let counts = self.counters.estimate(hash, at.index);
        saturated(self.slide(at, counts, presence), counts, cap)
    }

    /// Adds what the fronts may have absorbed of the key to the counters' estimate and
    /// interpolates the windows.
    ///
    /// (A key the front does not hold had no event in that window, so its count could be taken
    /// as 0 there. It is not: a register's epoch wraps, and a register stale for a multiple of
    /// its epoch range reads as current, hiding a key's new window. The property test found
    /// exactly that. Misreads must only ever overestimate.)
    fn slide(&self, at: Position, counts: Halves, presence: Presence) -> u64 {
        let mut current = u64::from(counts.current);
        let mut previous = u64::from(counts.previous);
        if presence.current {
            current = current.saturating_add(self.front_slack(at.index));
        }
        if presence.previous {
            previous = previous.saturating_add(self.front_slack(at.index.wrapping_sub(1)));
        }
        self.windows.slide(at, current, previous)
    }

    /// What the fronts merged into `window` may have absorbed of one key: the front weight for
    /// this sketch's own front and for each one merged in.
    fn front_slack(&self, window: u64) -> u64 {
        // Saturating: the merged count comes from snapshots, which are outside input.
        u64::from(self.front_weight)
            .saturating_mul(self.merged_fronts.get(window).saturating_add(1))
    }

    /// The window length.
    #[must_use]
    pub fn window(&self) -> Duration {
        self.windows.len()
    }

    /// How far a tick may lag behind the newest tick counted and still read no less than the
    /// exact sliding count (see [`Builder::lag_tolerance`]).
    #[must_use]
    pub fn lag_tolerance(&self) -> Duration {
        self.lag_tolerance
    }

    /// The index of the window `now` falls in (`now / window`), as used by
    /// [`RateSketch::export_window`].
    #[must_use]
    pub fn window_index(&self, now: Tick) -> u64 {
        self.windows.position(now).index
    }

    /// The largest count one counter holds per window (2^24 - 1 = 16,777,215): the largest
    /// per-window limit the sketch can enforce. Counts saturate there, never wrap.
    #[must_use]
    pub const fn max_count() -> u64 {
        COUNT_MAX as u64
    }

    /// Bytes held by the sketch, exactly: the struct, its counters, front and statistics. All
    /// of it is allocated by `build`; nothing is allocated afterwards.
    #[must_use]
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<RateSketch>()
            + (self.counters.len() + self.front.len()) * std::mem::size_of::<u64>()
            + self.hot.bytes()
            + Stripes::HEAP_BYTES
    }

    /// Rows of counters.
    #[must_use]
    pub fn depth(&self) -> usize {
        self.counters.depth()
    }

    /// Counters per row.
    #[must_use]
    pub fn width(&self) -> usize {
        self.counters.width()
    }

    /// Registers in the Bloom front (0 when it is disabled).
    #[must_use]
    pub fn front_registers(&self) -> usize {
        self.front.len()
    }

    /// The most that one thread's reservations (see [`Builder::reserve_shift`]) add to a key
    /// whose estimate reads `estimate`, counted with cap `cap` (`u64::MAX` for `observe`):
    /// `ceil(estimate / 2^s)`; 0 without reservations, or for a cap of `2^s + 1` or less
    /// (a capped observe reserves only below its cap, from `2^s` events on). With `P` threads
    /// observing the key its estimate exceeds what it would read without reservations by at
    /// most `P` times this, always (not only with high probability): add it to
    /// [`RateSketch::overcount_bound`] once per thread that counts into the sketch.
    ///
    /// # Examples
    /// ```
    /// use tollgate_sketch::RateSketch;
    /// let sketch = RateSketch::builder().reserve_shift(Some(8)).build()?;
    /// assert_eq!(sketch.reserved_per_thread(1_000, u64::MAX), 4);
    /// assert_eq!(sketch.reserved_per_thread(1_000, 101), 0, "capped below 2^8");
    /// let exact = RateSketch::builder().reserve_shift(None).build()?;
    /// assert_eq!(exact.reserved_per_thread(1_000, u64::MAX), 0);
    /// # Ok::<(), tollgate_sketch::BuildError>(())
    /// ```
    #[must_use]
    pub fn reserved_per_thread(&self, estimate: u64, cap: u64) -> u64 {
        self.reserve.share(estimate, cap)
    }

    /// The events of the key of `hash` that this thread's reservations (see
    /// [`Builder::reserve_shift`]) have counted in the window `now` falls in and no observe
    /// of this thread has spent yet: part of every estimate of the key now, and not (yet)
    /// events. Taking it off an estimate read on this thread at `now` never reads below the
    /// truth, for the cells hold every event counted plus every credit unspent on any thread;
    /// for a capped count, only while the estimate is below the cap (at the cap, events may
    /// have gone uncounted, and the estimate is the cap already). 0 with reservations off,
    /// for a key this thread holds no credit for, and in any other window.
    ///
    /// # Examples
    /// ```
    /// use tollgate_sketch::{RateSketch, Tick};
    /// let sketch = RateSketch::builder().reserve_shift(Some(8)).front_share(0.0).build()?;
    /// let hash = sketch.hash(b"hot");
    /// let mut estimate = 0;
    /// for _ in 0..300 {
    ///     estimate = sketch.observe_hashed(hash, 1, Tick::ZERO);
    /// }
    /// // Counted ahead: the estimate is above the 300 events, by this thread's credit.
    /// assert!(estimate > 300);
    /// assert_eq!(estimate - sketch.held_credit(hash, Tick::ZERO), 300);
    /// # Ok::<(), tollgate_sketch::BuildError>(())
    /// ```
    #[must_use]
    pub fn held_credit(&self, hash: KeyHash, now: Tick) -> u64 {
        if !self.reserve.is_on() {
            return 0;
        }
        let window = self.windows.position(now).index;
        u64::from(crate::reserve::held(self.id, hash, window))
    }

    /// The overcount bound alone (see [`Stats::overcount_bound`]); cheap enough to poll.
    #[must_use]
    pub fn overcount_bound(&self, now: Tick) -> u64 {
        let at = self.windows.position(now);
        let events = self.windows.slide(
            at,
            self.events.get(at.index),
            self.events.get(at.index.wrapping_sub(1)),
        );
        // eps * N with eps = e / width (Cormode and Muthukrishnan), rounded up.
        let counters = (std::f64::consts::E * events as f64 / self.width() as f64).ceil() as u64;
        let front = if self.front.is_enabled() {
            let slack = self.front_slack(at.index);
            self.windows
                .slide(at, slack, self.front_slack(at.index.wrapping_sub(1)))
        } else {
            0
        };
        counters
            .saturating_add(front)
            .saturating_add(self.folded(at))
    }

    /// What a roll's fold for lagging ticks (see [`Builder::lag_tolerance`]) may add to a
    /// key's estimate at `at` beyond the key's own history: the fold of the collisions in the
    /// windows before the previous one, and the rounding of each fold, weighted by the previous
    /// window's share. (The fold of the key's own count, up to `L / (T - L)` of it, is relative
    /// to that count, not to the load, and is stated in the crate docs instead.)
    ///
    /// A cell's count for window `j` is at most the key's own count, `eps * N_j` of collisions
    /// and its fold of window `j - 1`; so the collisions' part of the fold follows the tallied
    /// windows forward, `H_j = N_j + H_{j-1} * L / T`, from six windows before the previous one
    /// (an older window weighs `(L / T)^6` of its events or less).
    fn folded(&self, at: Position) -> u64 {
        let fold = self.counters.fold();
        if fold == Fold::NONE {
            return 0;
        }
        let mut older: u32 = 0;
        for back in (2..WINDOWS as u64).rev() {
            let events = self.events.get(at.index.wrapping_sub(back));
            let total = events.saturating_add(u64::from(fold.of(older)));
            // Capped at COUNT_MAX (a cell saturates there): the conversion cannot fail.
            older = u32::try_from(total.min(u64::from(COUNT_MAX))).unwrap_or(COUNT_MAX);
        }
        // eps * H as in `overcount_bound`, then folded; each fold rounds up by less than 1,
        // and the folds of folds add less than 1 more (L <= T / 2).
        let collisions = (std::f64::consts::E * f64::from(older) / self.width() as f64).ceil();
        // At most COUNT_MAX * e / 16 (a row has 16 cells or more): within u32.
        let collisions = u32::try_from(collisions as u64).unwrap_or(u32::MAX);
        self.windows
            .share(at, u64::from(fold.of(collisions)).saturating_add(2))
    }

    /// The sketch's state at `now`: events per window, front fill, the overcount bound. Scans
    /// the front (microseconds per MiB): for a stats endpoint, not for every event.
    #[must_use]
    pub fn stats(&self, now: Tick) -> Stats {
        let at = self.windows.position(now);
        let front_fill = if self.front.is_enabled() {
            self.front.bits_set(at.index) as f64 / self.front.capacity_bits() as f64
        } else {
            0.0
        };
        Stats {
            window_index: at.index,
            window: self.window(),
            events_current: self.events.get(at.index),
            events_previous: self.events.get(at.index.wrapping_sub(1)),
            front_fill,
            // A key's bits are about three independent positions: all set with fill^3.
            front_false_positive_rate: front_fill.powi(3),
            overcount_bound: self.overcount_bound(now),
            confidence: 1.0 - (-(self.depth() as f64)).exp(),
            memory_bytes: self.memory_bytes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sketch() -> RateSketch {
        RateSketch::builder()
            .window(Duration::from_nanos(100))
            .memory_bytes(1 << 16)
            .seed(1)
            .build()
            .unwrap()
    }

    #[test]
    fn counts_and_slides() {
        let s = sketch();
        let t = |n| Tick::from_nanos(n);
        for i in 1..=10 {
            assert_eq!(s.observe(b"a", 1, t(10)), i);
        }
        assert_eq!(s.estimate(b"a", t(99)), 10);
        assert_eq!(s.estimate(b"a", t(100)), 10);
        assert_eq!(s.estimate(b"a", t(150)), 5);
        assert_eq!(s.estimate(b"a", t(199)), 1);
        assert_eq!(s.estimate(b"a", t(200)), 0);
        assert_eq!(s.estimate(b"b", t(10)), 0);
    }

    #[test]
    fn weights_count_fully_even_on_a_first_event() {
        let s = sketch();
        assert_eq!(s.observe(b"a", 1500, Tick::ZERO), 1500);
        assert_eq!(s.observe(b"a", 40, Tick::ZERO), 1540);
    }

    #[test]
    fn weights_clamp_to_a_count_without_wrapping() {
        assert_eq!(clamp(0), 0);
        assert_eq!(clamp(u64::from(COUNT_MAX)), COUNT_MAX);
        // Each would wrap to a small count if cut to 32 bits first.
        for weight in [u64::from(COUNT_MAX) + 1, 1 << 32, (1 << 32) + 5, u64::MAX] {
            assert_eq!(clamp(weight), COUNT_MAX, "{weight}");
        }
    }

    #[test]
    fn huge_weights_saturate() {
        let s = sketch();
        assert_eq!(
            s.observe(b"a", u64::MAX, Tick::ZERO),
            RateSketch::max_count()
        );
        assert!(s.estimate(b"a", Tick::ZERO) >= RateSketch::max_count());
    }

    #[test]
    fn a_capped_key_stops_writing_and_reads_at_least_the_cap() {
        let s = sketch();
        let t = |n| Tick::from_nanos(n);
        for i in 1..=4 {
            assert_eq!(
                s.observe_capped(b"a", 1, 4, t(10)),
                i,
                "below the cap: exact"
            );
        }
        // The front absorbed the first event: the counters hold 3, and the cap is on them.
        assert_eq!(s.observe_capped(b"a", 1, 4, t(10)), 5);
        let before = s.export_window(0);
        for _ in 0..100 {
            assert_eq!(s.observe_capped(b"a", 1, 4, t(20)), 4);
        }
        let after = s.export_window(0);
        let same = before.counts() == after.counts() && before.front_bits() == after.front_bits();
        assert!(same, "a key at its cap writes nothing");
        assert_eq!(
            s.stats(t(20)).events_current,
            105,
            "the totals still count it"
        );
        // The next window: the share of window 0 fades for `estimate`, not below the cap.
        assert_eq!(s.estimate(b"a", t(190)), 1);
        assert_eq!(s.estimate_capped(b"a", 4, t(190)), 4);
        assert_eq!(s.observe_capped(b"a", 1, 4, t(190)), 4);
        // Two windows on, nothing is left.
        assert_eq!(s.estimate_capped(b"a", 4, t(300)), 0);
        // Under the cap, capped and plain observes agree.
        let plain = sketch();
        for i in 0..30u64 {
            let now = t(i * 9);
            assert_eq!(
                s.observe_capped(b"b", 2, 1_000, now),
                plain.observe(b"b", 2, now)
            );
        }
    }

    #[test]
    fn a_batch_counts_exactly_as_observes_one_after_another() {
        // 100 keys (6 groups, the last partial), repeats inside a group and across groups,
        // weights through the front, some keys past the cap: the same estimates in order.
        // With a hot keys' table too (a key noted by its earlier event in the same group, or
        // before it was prepared), whose notes answer both ways alike: with cap 8 a count
        // stops at 9 (weight 2 over the front's 1), so a note's 8 and the cells' 9 tell apart.
        let keys: Vec<[u8; 1]> = (0..100u32).map(|i| [(i * i % 23) as u8]).collect();
        let hot = || {
            RateSketch::builder()
                .window(Duration::from_nanos(100))
                .memory_bytes(1 << 16)
                .hot_keys_bytes(4_096)
                .seed(1)
                .build()
                .unwrap()
        };
        for (cap, table) in [(u64::MAX, false), (9, false), (9, true), (8, true)] {
            let build: fn() -> RateSketch = if table { hot } else { sketch };
            let (one, batch) = (build(), build());
            assert_eq!(one.hot.is_empty(), !table);
            let t = Tick::from_nanos(10);
            let singles: Vec<u64> = keys
                .iter()
                .map(|k| one.observe_capped(k, 2, cap, t))
                .collect();
            let mut batched = Vec::new();
            batch.observe_batch(&keys, 2, cap, t, &mut batched);
            assert_eq!(singles, batched, "cap {cap}, table {table}");
            assert!(singles.iter().any(|&e| e >= cap.min(9)));
        }
    }

    #[test]
    fn a_moment_finds_the_notes_of_its_own_window_only() {
        // A key at its cap is noted in the hot keys' table; a key prepared at a moment of that
        // window is answered by the note (nothing to fetch), as when prepared with the tick,
        // and one of the next window is not.
        let s = RateSketch::builder()
            .window(Duration::from_nanos(100))
            .memory_bytes(1 << 16)
            .hot_keys_bytes(4_096)
            .seed(1)
            .build()
            .unwrap();
        let (hash, cap) = (s.hash(b"flood"), 3);
        let t = Tick::from_nanos;
        // Past the cap: the front takes the first event, the counters the rest.
        for _ in 0..cap + 2 {
            let _ = s.observe_hashed_capped(hash, 1, cap, t(10));
        }
        assert!(s.hot.holds(hash, 0, cap), "noted at its cap");
        let now = s.prepare_at(hash, cap, &s.moment(t(20)));
        assert!(now.noted && s.prepare(hash, cap, t(20)).noted);
        assert_eq!(s.observe_prepared(now, 1), cap);
        let next = s.prepare_at(hash, cap, &s.moment(t(120)));
        assert!(!next.noted && !s.prepare(hash, cap, t(120)).noted);
        assert!(!s.prepare_at(hash, cap + 1, &s.moment(t(20))).noted);
    }

    #[test]
    fn a_moment_of_another_window_length_counts_as_the_tick_does() {
        // Two sketches alike but for their windows (10 s and 1 s); at 2.5 s a key's events of
        // 0.5 s before fall in this window for the first and in the previous one for the
        // second. A moment of the first handed to the second must count as its own tick.
        let build = |window| {
            RateSketch::builder()
                .window(window)
                .memory_bytes(1 << 16)
                .front_share(0.0)
                .seed(1)
                .build()
                .unwrap()
        };
        let (long, short) = (
            build(Duration::from_secs(10)),
            build(Duration::from_secs(1)),
        );
        let by_tick = build(Duration::from_secs(1));
        let (t, hash) = (Tick::from_nanos, short.hash(b"key"));
        for sketch in [&short, &by_tick] {
            let _ = sketch.observe_hashed(hash, 4, t(1_900_000_000));
        }
        let later = t(2_500_000_000);
        let foreign = short.prepare_at(hash, u64::MAX, &long.moment(later));
        let own = by_tick.prepare(hash, u64::MAX, later);
        assert_eq!(
            short.observe_prepared(foreign, 1),
            by_tick.observe_prepared(own, 1)
        );
        assert_eq!(
            short.estimate(b"key", later),
            by_tick.estimate(b"key", later)
        );
        assert_eq!(
            short.current_count(b"key", later),
            1,
            "counted in the 1 s window of 2.5 s"
        );
    }

    #[test]
    fn the_fixed_depth_path_counts_exactly_as_the_general_one() {
        // Two sketches of the default depth, one driven through the path specialised for it,
        // one through the path for any depth: the same estimates for every event (plain,
        // capped, prepared; windows rolling, a tick stepping back, keys past their cap, with
        // and without a hot keys' table) and the same cells at the end.
        for table in [None, Some(4_096)] {
            let build = || {
                let builder = RateSketch::builder()
                    .window(Duration::from_nanos(100))
                    .lag_tolerance(Duration::from_nanos(25))
                    .memory_bytes(1 << 16)
                    .seed(3);
                let builder = match table {
                    Some(bytes) => builder.hot_keys_bytes(bytes),
                    None => builder,
                };
                builder.build().unwrap()
            };
            let (fixed, general) = (build(), build());
            assert_eq!(fixed.depth(), FIXED_DEPTH);
            for i in 0..3_000u64 {
                let hash = fixed.hash(&(i * i % 37).to_le_bytes());
                // Mostly forward, every seventh tick 20 ns back.
                let now = Tick::from_nanos(i / 4 * 3 + if i % 7 == 0 { 0 } else { 20 });
                let (weight, cap) = (1 + i % 3, 6 + i % 5);
                let (a, b) = match i % 3 {
                    0 => (
                        fixed.observe_rows::<FIXED_DEPTH>(hash, weight, now),
                        general.observe_rows::<MAX_DEPTH>(hash, weight, now),
                    ),
                    1 => (
                        fixed.observe_capped_rows::<FIXED_DEPTH>(hash, weight, cap, now),
                        general.observe_capped_rows::<MAX_DEPTH>(hash, weight, cap, now),
                    ),
                    _ => {
                        let at = fixed.windows.position(now);
                        (
                            fixed.observe_prepared_rows::<FIXED_DEPTH>(hash, weight, cap, at),
                            general.observe_prepared_rows::<MAX_DEPTH>(hash, weight, cap, at),
                        )
                    }
                };
                assert_eq!(a, b, "event {i}, table {table:?}");
            }
            let last = fixed.window_index(Tick::from_nanos(3_000 / 4 * 3 + 20));
            for window in [last - 1, last] {
                assert_eq!(
                    fixed.export_window(window).counts(),
                    general.export_window(window).counts()
                );
            }
        }
    }

    #[test]
    fn a_plain_sketch_counts_exactly_when_alone() {
        let s = RateSketch::builder()
            .front_share(0.0)
            .memory_bytes(1 << 16)
            .build()
            .unwrap();
        assert_eq!(s.front_registers(), 0);
        assert_eq!(s.observe(b"a", 3, Tick::ZERO), 3);
        assert_eq!(s.estimate(b"a", Tick::ZERO), 3);
        assert_eq!(s.stats(Tick::ZERO).front_fill, 0.0);
    }

    #[test]
    fn rotation_clears_nothing_ahead() {
        // Fill window 0, then observe one key in window 1: only that key's cells are rolled
        // forward, every other cell still holds window 0 exactly as it was. The rotation did
        // no work for the rest of the sketch: no observe ever waits for a window to be cleared.
        let s = sketch();
        for i in 0..200u32 {
            let _ = s.observe(&i.to_le_bytes(), 1 + u64::from(i % 5), Tick::from_nanos(10));
        }
        let before = s.export_window(0);
        // Weight 3: the front absorbs 1, the counters take 2, so cells are written.
        let _ = s.observe(b"first of window 1", 3, Tick::from_nanos(100));
        let jumped = s.observe(b"first of window 5", 3, Tick::from_nanos(500));
        assert_eq!(jumped, 3, "a window four on starts from nothing");
        let after = s.export_window(0);
        let changed = before
            .counts()
            .iter()
            .zip(after.counts())
            .filter(|(b, a)| b != a)
            .count();
        // Window 1's observe keeps window 0 as its cells' previous window; window 5's rolls
        // its own cells (at most `depth` of them) past it.
        assert!(changed <= s.depth(), "{changed} cells changed");
        assert!(before.counts().iter().filter(|&&c| c > 0).count() > 100);
    }

    #[test]
    fn a_tick_that_steps_back_over_a_window_edge_reads_its_whole_window() {
        // The review's case: window 1 ms, 307 events in window 3, then two at the newest tick
        // early in window 4 (the second reaches the counters and rolls the key's cells), then
        // one 48.8 us before the newest tick, back in window 3. Before the fix the lagging
        // observe read window 4's count as current and weighted window 3's by its own tiny
        // remaining share: 15 here (19 in the review), against 308.
        let s = RateSketch::builder()
            .window(Duration::from_millis(1))
            .memory_bytes(1 << 16)
            .seed(1)
            .build()
            .unwrap();
        for i in 0..307u64 {
            let _ = s.observe(b"k", 1, Tick::from_nanos(3_000_000 + i * 3_000));
        }
        let newest = Tick::from_nanos(4_010_000);
        let _ = s.observe(b"k", 1, newest);
        let _ = s.observe(b"k", 1, newest);
        let lagging = Tick::from_nanos(4_010_000 - 48_800);
        let estimate = s.observe(b"k", 1, lagging);
        assert!(estimate >= 308, "{estimate} < 308");
        assert!(s.estimate(b"k", lagging) >= 308);
        // The newest tick sees window 3 (now 308) at its share, 99%, and its own 2.
        assert!(s.estimate(b"k", newest) >= 305 + 2);
    }

    #[test]
    fn a_tick_within_the_tolerance_still_owes_the_window_before() {
        // Window 100 ns, tolerance 25 ns. 40 events in window 0, 10 in window 1, then a tick
        // at 200 rolls the cells to window 2, dropping window 0. A tick at 190 (10 behind)
        // owes window 0 a tenth: 10 + 4 + its own 1. The roll kept ceil(40 / 4) = 10 for it.
        let s = RateSketch::builder()
            .window(Duration::from_nanos(100))
            .lag_tolerance(Duration::from_nanos(25))
            .front_share(0.0)
            .memory_bytes(1 << 16)
            .seed(1)
            .build()
            .unwrap();
        let t = Tick::from_nanos;
        let _ = s.observe(b"k", 40, t(50));
        let _ = s.observe(b"k", 10, t(150));
        let _ = s.observe(b"k", 1, t(200));
        let lagging = s.observe(b"k", 1, t(190));
        assert!(lagging >= 15, "{lagging} < 10 + 4 + 1");
        // Normal readers pay for it: window 1 reads 11 + 10 at the start of window 2.
        assert_eq!(s.estimate(b"k", t(200)), 1 + 11 + 10);
        assert_eq!(s.estimate(b"k", t(250)), 1 + 11);
        // With no tolerance nothing is kept, and the lagging tick may read too little.
        let exact = RateSketch::builder()
            .window(Duration::from_nanos(100))
            .lag_tolerance(Duration::ZERO)
            .front_share(0.0)
            .memory_bytes(1 << 16)
            .seed(1)
            .build()
            .unwrap();
        let _ = exact.observe(b"k", 40, t(50));
        let _ = exact.observe(b"k", 10, t(150));
        let _ = exact.observe(b"k", 1, t(200));
        assert_eq!(exact.observe(b"k", 1, t(190)), 10 + 1);
        assert_eq!(exact.estimate(b"k", t(200)), 1 + 11);
    }

    #[test]
    fn stats_report_events_and_fill() {
        let s = sketch();
        for i in 0..50u32 {
            let _ = s.observe(&i.to_le_bytes(), 2, Tick::from_nanos(5));
        }
        let _ = s.observe(b"x", 1, Tick::from_nanos(105));
        let stats = s.stats(Tick::from_nanos(105));
        assert_eq!(stats.window_index, 1);
        assert_eq!((stats.events_current, stats.events_previous), (1, 100));
        assert!(
            stats.front_fill > 0.0 && stats.front_fill < 0.1,
            "{stats:?}"
        );
        assert_eq!(stats.memory_bytes, s.memory_bytes());
        assert!(stats.overcount_bound >= 1);
    }

    #[test]
    fn the_overcount_bound_includes_the_fold_of_collisions() {
        // One row of 17 cells, no front, tolerance a quarter window. 6400 events in window 2,
        // 64 in window 3, 1 in window 4. At the start of window 4 Count-Min's part is
        // ceil(e * 65 / 17) = 11; a cell's previous count may also hold a quarter of its
        // collisions in window 2, whose bound is ceil(e * 6400 / 17) = 1024: 256, plus 2 for
        // rounding.
        let builder = RateSketch::builder()
            .window(Duration::from_nanos(100))
            .lag_tolerance(Duration::from_nanos(25))
            .depth(1)
            .front_share(0.0)
            .seed(1);
        let build = |b: Builder| {
            b.clone()
                .memory_bytes(b.min_memory_bytes())
                .build()
                .unwrap()
        };
        let t = Tick::from_nanos;
        for (sketch, folded) in [
            (build(builder.clone()), 256 + 2),
            (build(builder.lag_tolerance(Duration::ZERO)), 0),
        ] {
            assert_eq!(sketch.width(), 17);
            let _ = sketch.observe(b"heavy", 6400, t(250));
            let _ = sketch.observe(b"heavy", 64, t(350));
            let _ = sketch.observe(b"other", 1, t(400));
            assert_eq!(sketch.overcount_bound(t(400)), 11 + folded);
            // Half a window on, the previous window counts half.
            assert_eq!(sketch.overcount_bound(t(450)), 6 + folded / 2);
        }
    }
}
