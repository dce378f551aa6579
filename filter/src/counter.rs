//! One sketch of a policy, and the sketches it replaced at a reload that changed its memory
//! share: counts survive any reload of the rules that keep their name and limits.
//!
//! A sketch's cells are indexed by a multiply-shift of the key's hash (`tollgate-sketch`'s
//! `hash.rs`), not by hash bits under a mask, so a window cannot be folded into a sketch of
//! another width. Instead the old sketch is *retired*: it counts nothing more, and every
//! estimate adds the old sketch's estimate to the new one's until the old one's last window
//! has slid out (three windows after the reload; a decide that loaded the old policy just
//! before the swap may still count into it). Estimates never fall below the true count: every
//! event since the reload is in the new sketch, every one before it in the old. The old
//! sketch's memory is held until the first reload after that (`Policy::memory_bytes` counts it).

use std::sync::Arc;

use tollgate_sketch::{BuildError, KeyHash, Prepared, RateSketch, Tick};

use crate::budget::{Counts, Share};
use crate::fade::Halves;
use crate::key::LimitKey;

/// A sketch no longer counted into, read until `until`.
#[derive(Debug)]
pub(crate) struct Retired {
    pub(crate) sketch: Arc<RateSketch>,
    pub(crate) until: Tick,
}

/// A policy's sketch for one limit period or penalty length.
#[derive(Debug)]
pub(crate) struct Counter {
    share: Share,
    sketch: Arc<RateSketch>,
    retired: Vec<Retired>,
}

impl Counter {
    /// The counter for `share`: `previous`'s sketch of the same kind and window if its share is
    /// unchanged, else a new sketch that retires `previous`'s at `now`. Retired sketches whose
    /// windows have slid out by `now` are dropped.
    ///
    /// # Errors
    /// The sketch's [`BuildError`] if the share is too small for it.
    pub(crate) fn succeed(
        share: Share,
        previous: Option<(&[Counter], Tick)>,
    ) -> Result<Counter, BuildError> {
        let before = previous.and_then(|(counters, now)| {
            counters
                .iter()
                .find(|c| c.share.counts == share.counts && c.share.window == share.window)
                .map(|c| (c, now))
        });
        let Some((old, now)) = before else {
            return Ok(Counter {
                share,
                sketch: Arc::new(share.builder().build()?),
                retired: Vec::new(),
            });
        };
        let mut retired: Vec<Retired> = old
            .retired
            .iter()
            .filter(|r| now < r.until)
            .map(|r| Retired {
                sketch: Arc::clone(&r.sketch),
                until: r.until,
            })
            .collect();
        if old.share.bytes == share.bytes {
            return Ok(Counter {
                share,
                sketch: Arc::clone(&old.sketch),
                retired,
            });
        }
        retired.push(Retired {
            sketch: Arc::clone(&old.sketch),
            until: now + share.window.saturating_mul(3),
        });
        Ok(Counter {
            share,
            sketch: Arc::new(share.builder().build()?),
            retired,
        })
    }

    /// A counter of `share` counting into `sketch` and reading `retired` too (a warm restart's
    /// restored sketches, see the `saved` module).
    pub(crate) fn from_parts(share: Share, sketch: RateSketch, retired: Vec<Retired>) -> Counter {
        Counter {
            share,
            sketch: Arc::new(sketch),
            retired,
        }
    }

    /// Its share of the policy's memory.
    pub(crate) fn share(&self) -> Share {
        self.share
    }

    /// The retired sketches still read (or not yet dropped) at this counter.
    pub(crate) fn retired(&self) -> &[Retired] {
        &self.retired
    }

    /// What it counts.
    pub(crate) fn counts(&self) -> Counts {
        self.share.counts
    }

    /// The sketch counted into.
    pub(crate) fn sketch(&self) -> &RateSketch {
        &self.sketch
    }

    /// The sketch counted into, to hold beside it.
    pub(crate) fn shared_sketch(&self) -> &Arc<RateSketch> {
        &self.sketch
    }

    /// Counts `weight` for `key` at `now`, exactly up to `cap` (see
    /// [`RateSketch::observe_capped`]); the estimate including it, never below the smaller of
    /// `cap` and the true count.
    #[inline]
    pub(crate) fn observe_capped(&self, key: &[u8], weight: u64, cap: u64, now: Tick) -> u64 {
        self.observe_hashed_capped(key, self.sketch.hash(key), weight, cap, now)
    }

    /// [`Counter::observe_capped`] with `hash`, the key's hash under [`Counter::sketch`] (the
    /// retired sketches hash `key` themselves).
    #[inline]
    pub(crate) fn observe_hashed_capped(
        &self,
        key: &[u8],
        hash: KeyHash,
        weight: u64,
        cap: u64,
        now: Tick,
    ) -> u64 {
        let here = self.sketch.observe_hashed_capped(hash, weight, cap, now);
        here.saturating_add(self.retired_estimate(key, cap, now))
    }

    /// [`Counter::observe_hashed_capped`] for the decision path: `prepared` if the touch pass
    /// prepared the key (with this counter's sketch, `cap` and `now`: see
    /// [`RateSketch::prepare`]), and `key` built only when needed (to hash it here, or for a
    /// retired sketch).
    #[inline]
    pub(crate) fn observe_step(
        &self,
        key: impl Fn() -> LimitKey,
        prepared: Option<Prepared>,
        weight: u64,
        cap: u64,
        now: Tick,
    ) -> u64 {
        let here = match prepared {
            Some(prepared) => self.sketch.observe_prepared(prepared, weight),
            None => {
                let hash = self.sketch.hash(key().as_bytes());
                self.sketch.observe_hashed_capped(hash, weight, cap, now)
            }
        };
        if self.retired.is_empty() {
            return here;
        }
        here.saturating_add(self.retired_estimate(key().as_bytes(), cap, now))
    }

    /// The estimate of `key` counted with `cap` at `now`, counting nothing.
    #[inline]
    pub(crate) fn estimate_capped(&self, key: &[u8], cap: u64, now: Tick) -> u64 {
        let here = self.sketch.estimate_capped(key, cap, now);
        here.saturating_add(self.retired_estimate(key, cap, now))
    }

    /// Counts `weight` for `key` at `now`, exactly; the estimate including it.
    #[inline]
    pub(crate) fn observe(&self, key: &[u8], weight: u64, now: Tick) -> u64 {
        self.observe_capped(key, weight, u64::MAX, now)
    }

    /// The estimate of `key` at `now`, counting nothing.
    #[inline]
    pub(crate) fn estimate(&self, key: &[u8], now: Tick) -> u64 {
        self.estimate_capped(key, u64::MAX, now)
    }

    /// The part of [`Counter::estimate`] counted in the current window (see
    /// [`RateSketch::current_count`]); the rest is the previous window's share.
    pub(crate) fn current_count(&self, key: &[u8], now: Tick) -> u64 {
        self.retired
            .iter()
            .filter(|r| now < r.until)
            .fold(self.sketch.current_count(key, now), |sum, r| {
                sum.saturating_add(r.sketch.current_count(key, now))
            })
    }

    /// `key`'s counts in the window `now` falls in and the one before, as
    /// [`Counter::estimate_capped`] with `cap` reads them: a half that reached `cap` is
    /// [`Halves::UNKNOWN`]. The previous window's count is the estimate at the current
    /// window's start, where all of it is still inside the sliding window.
    pub(crate) fn halves(&self, key: &[u8], cap: u64, now: Tick) -> Halves {
        let per = self.sketch.window().as_nanos().max(1);
        let start = u128::from(now.as_nanos()) / per * per;
        let start = Tick::from_nanos(u64::try_from(start).unwrap_or(0));
        let current = self.current_count(key, now);
        let previous = self.estimate(key, start).saturating_sub(current);
        let known = |count: u64| if count >= cap { Halves::UNKNOWN } else { count };
        Halves {
            current: known(current),
            previous: known(previous),
        }
    }

    /// The stated overcount of [`Counter::estimate`] at `now`: the sum of the sketches' bounds.
    pub(crate) fn overcount_bound(&self, now: Tick) -> u64 {
        self.retired
            .iter()
            .filter(|r| now < r.until)
            .fold(self.sketch.overcount_bound(now), |sum, r| {
                sum.saturating_add(r.sketch.overcount_bound(now))
            })
    }

    /// The most that one thread's reservations add to `key`'s estimate counted with `cap` at
    /// `now` (see [`RateSketch::reserved_per_thread`]): each sketch's share of its own
    /// estimate, summed. With `P` threads counting, [`Counter::estimate_capped`] is above the
    /// truth by at most [`Counter::overcount_bound`] (with high probability) plus `P` times
    /// this (always).
    pub(crate) fn reserved_per_thread(&self, key: &[u8], cap: u64, now: Tick) -> u64 {
        let share = |sketch: &RateSketch| {
            sketch.reserved_per_thread(sketch.estimate_capped(key, cap, now), cap)
        };
        self.retired
            .iter()
            .filter(|r| now < r.until)
            .fold(share(&self.sketch), |sum, r| {
                sum.saturating_add(share(&r.sketch))
            })
    }

    /// Bytes held, retired sketches included.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.retired
            .iter()
            .map(|r| r.sketch.memory_bytes())
            .sum::<usize>()
            + self.sketch.memory_bytes()
    }

    #[inline]
    fn retired_estimate(&self, key: &[u8], cap: u64, now: Tick) -> u64 {
        self.retired
            .iter()
            .filter(|r| now < r.until)
            .map(|r| r.sketch.estimate_capped(key, cap, now))
            .fold(0, u64::saturating_add)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    fn secs(s: u64) -> Tick {
        Tick::from_nanos(s * 1_000_000_000)
    }

    fn share(bytes: usize) -> Share {
        Share {
            counts: Counts::Limits,
            window: MINUTE,
            bytes,
            named: false,
            reserves: false,
        }
    }

    /// A counter of 1 MiB reading a retired sketch of 2 MiB (until `until`) in which `key`
    /// saw 20 events at 100 s, in its window 1.
    fn retiring(key: &[u8], until: Tick) -> Counter {
        let old = share(2 << 20).builder().build().unwrap();
        for _ in 0..20 {
            let _ = old.observe(key, 1, secs(100));
        }
        let retired = Retired {
            sketch: Arc::new(old),
            until,
        };
        let new = share(1 << 20).builder().build().unwrap();
        Counter::from_parts(share(1 << 20), new, vec![retired])
    }

    /// Every read adds a retired sketch until its end and not at it, even while its windows
    /// would still be read (a restored sketch's end is the saved one).
    #[test]
    fn a_retired_sketch_is_read_until_its_end_and_not_at_it() {
        let key = b"key";
        let end = secs(110);
        let counter = retiring(key, end);
        let last = Tick::from_nanos(110 * 1_000_000_000 - 1);
        let alone = share(1 << 20).builder().build().unwrap();
        assert_eq!(counter.estimate(key, last), 20);
        assert_eq!(counter.current_count(key, last), 20);
        assert!(counter.overcount_bound(last) > alone.overcount_bound(last));
        assert_eq!(counter.estimate(key, end), 0);
        assert_eq!(counter.current_count(key, end), 0);
        assert_eq!(counter.overcount_bound(end), alone.overcount_bound(end));
        // Counting reads it too, with the same end.
        let counting = retiring(key, end);
        assert_eq!(counting.observe(key, 1, last), 21);
        let counting = retiring(key, end);
        assert_eq!(counting.observe(key, 1, end), 1);
    }

    /// A successor of the same share counts on into the same sketch; one of another share
    /// gets a sketch of that share and reads the old one beside it for three windows.
    #[test]
    fn a_successor_keeps_the_sketch_of_an_unchanged_share_and_retires_another() {
        let now = secs(100);
        let first = Counter::succeed(share(1 << 20), None).unwrap();
        let same = Counter::succeed(share(1 << 20), Some((std::slice::from_ref(&first), now)));
        let same = same.unwrap();
        assert!(Arc::ptr_eq(same.shared_sketch(), first.shared_sketch()));
        assert!(same.retired().is_empty());
        let bigger = Counter::succeed(share(2 << 20), Some((std::slice::from_ref(&first), now)));
        let bigger = bigger.unwrap();
        assert!(!Arc::ptr_eq(bigger.shared_sketch(), first.shared_sketch()));
        assert!(bigger.sketch().memory_bytes() > first.sketch().memory_bytes());
        assert_eq!(bigger.retired().len(), 1);
        assert!(Arc::ptr_eq(
            &bigger.retired()[0].sketch,
            first.shared_sketch()
        ));
        assert_eq!(bigger.retired()[0].until, now + MINUTE * 3);
    }

    /// A successor keeps a retired sketch until its end, and drops it (and its memory) there.
    #[test]
    fn a_successor_drops_a_retired_sketch_at_its_end() {
        let end = secs(110);
        let counter = retiring(b"key", end);
        let last = Tick::from_nanos(110 * 1_000_000_000 - 1);
        let before = Counter::succeed(share(1 << 20), Some((std::slice::from_ref(&counter), last)));
        assert_eq!(before.unwrap().retired().len(), 1);
        let at = Counter::succeed(share(1 << 20), Some((std::slice::from_ref(&counter), end)));
        let at = at.unwrap();
        assert!(at.retired().is_empty());
        assert_eq!(at.memory_bytes(), counter.sketch().memory_bytes());
    }
}
