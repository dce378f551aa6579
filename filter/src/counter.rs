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

    /// The stated overcount of [`Counter::estimate`] at `now`: the sum of the sketches' bounds.
    pub(crate) fn overcount_bound(&self, now: Tick) -> u64 {
        self.retired
            .iter()
            .filter(|r| now < r.until)
            .fold(self.sketch.overcount_bound(now), |sum, r| {
                sum.saturating_add(r.sketch.overcount_bound(now))
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
