//! Our sketch as a [`Limiter`]: with its Bloom front (the default share) or plain (no front).

use std::time::Duration;

use tollgate_sketch::{BuildError, RateSketch, Tick};

use crate::limiter::Limiter;

/// A fixed seed, so every run hashes the same keys to the same counters.
const SEED: u64 = 0x7a11_6a7e;

/// Which variant of the sketch: with or without its Bloom front, default or deeper.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Front {
    /// The builder's default front share.
    Default,
    /// `front_share(0.0)`: counters only.
    Plain,
    /// The default front with `depth(8)`.
    Deep,
    /// The default sketch counted as the filter counts a limit of 100: with
    /// `observe_capped` and [`CAP`].
    Capped,
}

/// The cap the filter passes for the tables' limit of 100 per window: keys are counted exactly
/// up to `EXACT_MULTIPLE` times it, plus one.
const CAP: u64 = tollgate_filter::EXACT_MULTIPLE * 100 + 1;

/// A [`RateSketch`] keyed by a `u64`'s little-endian bytes, counting events of weight 1.
#[derive(Debug)]
pub(crate) struct Ours {
    sketch: RateSketch,
    front: Front,
}

impl Ours {
    /// A sketch over windows of `window` in a budget of `memory_bytes`.
    pub(crate) fn new(
        window: Duration,
        memory_bytes: usize,
        front: Front,
    ) -> Result<Ours, BuildError> {
        let builder = RateSketch::builder()
            .window(window)
            .memory_bytes(memory_bytes)
            .seed(SEED);
        let builder = match front {
            Front::Default | Front::Capped => builder,
            Front::Plain => builder.front_share(0.0),
            Front::Deep => builder.depth(8),
        };
        Ok(Ours {
            sketch: builder.build()?,
            front,
        })
    }

    /// The key's estimate at `now`, counting nothing.
    pub(crate) fn estimate(&self, key: u64, now: u64) -> u64 {
        self.sketch
            .estimate_capped(&key.to_le_bytes(), self.cap(), Tick::from_nanos(now))
    }

    /// The cap it counts with: none (`u64::MAX`) but for [`Front::Capped`].
    fn cap(&self) -> u64 {
        if self.front == Front::Capped {
            CAP
        } else {
            u64::MAX
        }
    }
}

impl Limiter for Ours {
    fn observe(&mut self, key: u64, now: u64) -> u64 {
        self.sketch
            .observe_capped(&key.to_le_bytes(), 1, self.cap(), Tick::from_nanos(now))
    }

    fn name(&self) -> String {
        match self.front {
            Front::Default => "tollgate (front)".into(),
            Front::Plain => "tollgate (plain)".into(),
            Front::Deep => "tollgate (front, depth 8)".into(),
            Front::Capped => "tollgate (front, capped as the filter)".into(),
        }
    }

    fn memory_bytes(&self) -> Option<usize> {
        Some(self.sketch.memory_bytes())
    }

    fn sketch(&self) -> Option<&RateSketch> {
        Some(&self.sketch)
    }
}
