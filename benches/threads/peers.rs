//! The contenders, each driven by one thread's slice of a workload, and the timed run that
//! starts every thread together.

use std::hint::black_box;
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use pingora_limits::rate::{PROPORTIONAL_RATE_ESTIMATE_CALC_FN, Rate};
use tollgate_benches::{cpu, sizes};
use tollgate_filter::{Decision, FRAME_BATCH, Filter, Verdict};
use tollgate_sketch::{Builder, Clock, MonotonicClock, RateSketch};

use crate::streams::Key;

/// The cap of the capped and batch cases: a limit of 100, plus one.
pub(crate) const CAP: u64 = 100 + 1;

/// A limiter under test: what one thread does with its slice of `T`s (keys or frames), one
/// clock reading per event (per group of events for the batch APIs, which take one tick).
pub(crate) trait Contender<T>: Sync {
    /// Its column in the tables.
    fn name(&self) -> &str;

    /// Whether it is Tollgate's (its failed swaps are counted, its ratio to pingora shown).
    fn ours(&self) -> bool {
        true
    }

    /// Every item of `items`, in order.
    fn pass(&self, items: &[T], clock: &MonotonicClock);
}

/// One call per event: `observe(key, 1, now)` as an embedder calls it, or (`capped`)
/// `observe_capped(key, 1, CAP, now)` as the filter counts.
pub(crate) struct PerEvent {
    pub(crate) name: String,
    pub(crate) sketch: RateSketch,
    pub(crate) capped: bool,
}

impl Contender<Key> for PerEvent {
    fn name(&self) -> &str {
        &self.name
    }

    fn pass(&self, keys: &[Key], clock: &MonotonicClock) {
        // The branch outside the loops: each loop is the call alone.
        if self.capped {
            for key in keys {
                black_box(self.sketch.observe_capped(key, 1, CAP, clock.now()));
            }
        } else {
            for key in keys {
                black_box(self.sketch.observe(key, 1, clock.now()));
            }
        }
    }
}

/// `observe_batch` of [`RateSketch::OBSERVE_BATCH`] keys at a time, capped at `CAP`, one tick
/// per group.
pub(crate) struct Batch {
    pub(crate) name: String,
    pub(crate) sketch: RateSketch,
}

impl Contender<Key> for Batch {
    fn name(&self) -> &str {
        &self.name
    }

    fn pass(&self, keys: &[Key], clock: &MonotonicClock) {
        // Allocated once a pass: one allocation for a million events or so.
        let mut estimates = Vec::with_capacity(RateSketch::OBSERVE_BATCH);
        for group in keys.chunks(RateSketch::OBSERVE_BATCH) {
            estimates.clear();
            self.sketch
                .observe_batch(group, 1, CAP, clock.now(), &mut estimates);
            black_box(&estimates);
        }
    }
}

/// pingora-limits' `Rate`: `observe` and the proportional sliding estimate, reading its own
/// clock (`Instant`) as a user pays it.
pub(crate) struct Pingora(pub(crate) Rate);

impl Contender<Key> for Pingora {
    fn name(&self) -> &str {
        "pingora"
    }

    fn ours(&self) -> bool {
        false
    }

    fn pass(&self, keys: &[Key], _clock: &MonotonicClock) {
        for key in keys {
            black_box(self.0.observe(key, 1));
            black_box(self.0.rate_with(key, PROPORTIONAL_RATE_ESTIMATE_CALC_FN));
        }
    }
}

/// The key contenders, each at `budget` bytes, from zero counts: Tollgate's three for each
/// reserve shift of `reserves` (`Builder::reserve_shift`; the sketch's default unmarked, any
/// other named by a suffix: `-off` for none, `-rS` for shift `S`), then pingora.
pub(crate) fn key_contenders(
    budget: usize,
    reserves: &[Option<u32>],
) -> Vec<Box<dyn Contender<Key>>> {
    let mut contenders: Vec<Box<dyn Contender<Key>>> = Vec::new();
    for &reserve in reserves {
        let suffix = match reserve {
            Some(Builder::DEFAULT_RESERVE_SHIFT) => String::new(),
            None | Some(0) => "-off".to_owned(),
            Some(shift) => format!("-r{shift}"),
        };
        let sketch = || sizes::reserving(budget, sizes::DEFAULT_DEPTH, reserve);
        contenders.push(Box::new(PerEvent {
            name: format!("tollgate{suffix}"),
            sketch: sketch(),
            capped: false,
        }));
        contenders.push(Box::new(PerEvent {
            name: format!("capped{suffix}"),
            sketch: sketch(),
            capped: true,
        }));
        contenders.push(Box::new(Batch {
            name: format!("batch{suffix}"),
            sketch: sketch(),
        }));
    }
    contenders.push(Box::new(Pingora(sizes::pingora(budget))));
    contenders
}

/// A shared [`Filter`] deciding frames `FRAME_BATCH` at a time (`decide_frames`, one tick a
/// batch), each batch's decisions read and dropped before the next (a receive loop's buffer).
pub(crate) struct Frames {
    /// Its column: `filter`, or `filter-off` for one without reservations.
    pub(crate) name: &'static str,
    pub(crate) filter: Filter,
}

impl<'a> Contender<&'a [u8]> for Frames {
    fn name(&self) -> &str {
        self.name
    }

    fn pass(&self, frames: &[&'a [u8]], clock: &MonotonicClock) {
        let mut decisions: Vec<Decision> = Vec::with_capacity(FRAME_BATCH);
        let mut allowed = 0usize;
        for batch in frames.chunks(FRAME_BATCH) {
            decisions.clear();
            self.filter
                .decide_frames(batch, clock.now(), &mut decisions);
            allowed += decisions
                .iter()
                .filter(|d| d.verdict == Verdict::Allow)
                .count();
        }
        black_box(allowed);
    }
}

/// What one run of a contender measured.
pub(crate) struct Measured {
    /// Events (or frames) a second, all threads together.
    pub(crate) per_second: f64,
    /// Nanoseconds on a CPU per event, all threads' time on a CPU together
    /// (`/proc/thread-self/schedstat`), where that could be read: what a machine shared with
    /// other work does not inflate, as it does wall time.
    pub(crate) cpu_nanos: Option<f64>,
    /// What the sketch's contention counter saw, per event (`--cfg tollgate_contention`
    /// builds, Tollgate's contenders only).
    pub(crate) contention: Option<Contended>,
}

/// The contention counter's figures per event (see `tollgate_sketch::contention`).
// Made only by counted builds (and the tests).
#[cfg_attr(not(tollgate_contention), allow(dead_code))]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Contended {
    /// Compare-and-swaps that failed (each restarts a conservative update).
    pub(crate) failed_swaps: f64,
    /// Conservative updates: events that wrote the key's shared cells (credited events and
    /// events the front absorbed do not).
    pub(crate) updates: f64,
    /// Of those, updates of keys counted far enough to reserve whose thread's table had no
    /// free entry for them (see `tollgate_sketch::contention::Contention::blocked`).
    pub(crate) blocked: f64,
}

/// `contender` over `slices`, one thread each, started together on a barrier: the wall time
/// from the first thread leaving the barrier to the last one's end.
pub(crate) fn run<T: Sync, C: Contender<T> + ?Sized>(
    contender: &C,
    slices: &[&[T]],
    clock: &MonotonicClock,
) -> Measured {
    let barrier = Barrier::new(slices.len());
    #[cfg(tollgate_contention)]
    tollgate_sketch::contention::reset();
    let spans: Vec<(Instant, Instant, Option<Duration>)> = thread::scope(|scope| {
        let workers: Vec<_> = slices
            .iter()
            .map(|slice| {
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    let cpu = cpu::thread_time();
                    let start = Instant::now();
                    contender.pass(slice, clock);
                    let end = Instant::now();
                    let cpu = cpu::thread_time()
                        .zip(cpu)
                        .map(|(end, start)| end.saturating_sub(start));
                    (start, end, cpu)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| worker.join().expect("a benchmark thread panicked"))
            .collect()
    });
    let events: usize = slices.iter().map(|slice| slice.len()).sum();
    let start = spans.iter().map(|span| span.0).min();
    let end = spans.iter().map(|span| span.1).max();
    let elapsed = start
        .zip(end)
        .map_or(Duration::ZERO, |(start, end)| end - start);
    let cpu: Option<Duration> = spans.iter().map(|span| span.2).sum();
    Measured {
        per_second: events as f64 / elapsed.as_secs_f64().max(f64::MIN_POSITIVE),
        cpu_nanos: cpu.map(|cpu| cpu.as_nanos() as f64 / events.max(1) as f64),
        contention: contended(contender.ours(), events),
    }
}

/// The contention counter's figures per event since the run's reset.
#[cfg(tollgate_contention)]
fn contended(ours: bool, events: usize) -> Option<Contended> {
    let counted = tollgate_sketch::contention::snapshot();
    let per_event = |count: u64| count as f64 / events.max(1) as f64;
    ours.then(|| Contended {
        failed_swaps: per_event(counted.failed_swaps),
        updates: per_event(counted.updates),
        blocked: per_event(counted.blocked),
    })
}

/// Not counted in a plain build.
#[cfg(not(tollgate_contention))]
fn contended(_ours: bool, _events: usize) -> Option<Contended> {
    None
}
