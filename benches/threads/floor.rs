//! The floor of the uncapped `observe` (issue 29's one-thread goal, >= 3x pingora-limits per
//! event): today's observe beside the same call with the parts that every variant of it must
//! keep taken away one by one, and pingora-limits, in one run, timed by each thread's time on a
//! CPU. `--workloads floor` (with `--threads 1` for the one-thread figure):
//!
//! - `observe`: `observe(key, 1, now)` with a `MonotonicClock` reading per event, as the
//!   issue's workload asks (the `tollgate` column of the other tables);
//! - `observe-noclock`: the same call, the clock read once per [`TICK_EVERY`] events;
//! - `reads-noclock`: what an observe reads and nothing it writes: the key's hash, its four
//!   cells' loads (the observe's own code path: `observe_capped` with cap 0, which counts
//!   nothing), the front register's line fetched, the minimum and the slide;
//! - `estimate-noclock`: `estimate(key, now)`, the same reads with the front register loaded
//!   and its bits decoded (by the path for any depth);
//! - `hash`: the key's hash alone; `clock`: the clock reading alone;
//! - `pingora`: pingora-limits' `observe` then `rate_with`, two clock readings of its own.
//!
//! The reading contenders' sketches are filled first, by observing the whole stream once at
//! one tick that their reads then use, so they read cells that hold counts of their window.

use std::hint::black_box;

use tollgate_benches::sizes;
use tollgate_sketch::{Clock, MonotonicClock, RateSketch, Tick};

use crate::peers::{Contender, Pingora};
use crate::streams::Key;

/// Events per clock reading in the `-noclock` contenders.
pub(crate) const TICK_EVERY: usize = 1024;

/// What a floor contender does per event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    Observe,
    ObserveNoClock,
    Reads,
    Estimate,
    Hash,
    Clock,
}

/// One of the floor's contenders, on a sketch of its own.
struct Floor {
    name: &'static str,
    part: Part,
    sketch: RateSketch,
    /// The tick the reading contenders read at: the one their sketch was filled at.
    filled_at: Tick,
}

impl Contender<Key> for Floor {
    fn name(&self) -> &str {
        self.name
    }

    fn pass(&self, keys: &[Key], clock: &MonotonicClock) {
        let sketch = &self.sketch;
        // One loop per part, the match outside: each loop is its call alone.
        match self.part {
            Part::Observe => {
                for key in keys {
                    black_box(sketch.observe(key, 1, clock.now()));
                }
            }
            Part::ObserveNoClock => {
                for group in keys.chunks(TICK_EVERY) {
                    let now = clock.now();
                    for key in group {
                        black_box(sketch.observe(key, 1, now));
                    }
                }
            }
            Part::Reads => {
                for key in keys {
                    black_box(sketch.observe_capped(key, 1, 0, self.filled_at));
                }
            }
            Part::Estimate => {
                for key in keys {
                    black_box(sketch.estimate(key, self.filled_at));
                }
            }
            Part::Hash => {
                for key in keys {
                    black_box(sketch.hash(key));
                }
            }
            Part::Clock => {
                for key in keys {
                    black_box((key, clock.now()));
                }
            }
        }
    }
}

/// The floor's contenders at `budget` bytes, the reading ones filled with `fill` (the whole
/// stream, one thread's slice).
pub(crate) fn contenders(
    budget: usize,
    fill: &[Key],
    clock: &MonotonicClock,
) -> Vec<Box<dyn Contender<Key>>> {
    let floors = [
        ("observe", Part::Observe),
        ("observe-noclock", Part::ObserveNoClock),
        ("reads-noclock", Part::Reads),
        ("estimate-noclock", Part::Estimate),
        ("hash", Part::Hash),
        ("clock", Part::Clock),
    ];
    let mut contenders: Vec<Box<dyn Contender<Key>>> = Vec::new();
    for (name, part) in floors {
        let sketch = sizes::sketch(budget, sizes::DEFAULT_DEPTH);
        let filled_at = clock.now();
        if matches!(part, Part::Reads | Part::Estimate) {
            for key in fill {
                black_box(sketch.observe(key, 1, filled_at));
            }
        }
        contenders.push(Box::new(Floor {
            name,
            part,
            sketch,
            filled_at,
        }));
    }
    contenders.push(Box::new(Pingora(sizes::pingora(budget))));
    contenders
}
