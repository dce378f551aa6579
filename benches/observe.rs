//! The cost of one limiter decision: count an event for a key and read the key's sliding-window
//! rate, for Tollgate's [`RateSketch`] and for the peers a user would pick instead, in one run.
//!
//! ```text
//! cargo bench -p tollgate-benches --bench observe                # everything, a few minutes
//! cargo bench -p tollgate-benches --bench observe -- 2_threads   # a filter on the names
//! ```
//!
//! # Workload
//! One stream of 2^22 key ids drawn from Zipf(1.1) over 10 M distinct ids
//! ([`workload::zipf_stream`], fixed seed), generated once before anything is timed and replayed
//! in a loop. Every peer sees the same ids in the same order.
//!
//! # Cases
//! - `tollgate/{2,32}MiB`: [`RateSketch::observe`] (key = the id's 8 little-endian bytes,
//!   weight 1), 10 s window, default depth and front, at a total budget of 2 MiB and 32 MiB;
//!   `tollgate_depth8/*` the same with 8 rows (one thread only).
//! - `tollgate_capped/{2,32}MiB`: the same sketch through [`RateSketch::observe_capped`] with
//!   the cap the filter passes for a limit of 100 per window ([`CAP`], 8 times the limit plus
//!   one): keys
//!   under it are counted exactly as above, keys at it only read their cells (no
//!   compare-and-swap), which is what the filter does for every limit.
//! - `tollgate_batch/{2,32}MiB`: the capped sketch through its batch API,
//!   [`RateSketch::observe_batch`], 16 events per call (hashed and prefetched, then counted in
//!   order, each with the estimate `observe_capped` gives). Not one call per event: a caller
//!   needs several events at hand (a receive batch), so it is reported apart.
//! - `pingora/{2,32}MiB`: pingora-limits' `Rate` at the same total memory. A `Rate` holds two
//!   estimators of `4 x slots` 8-byte counters, so 2 MiB is `slots = 2^15` and 32 MiB is
//!   `slots = 2^19`. Per event it does what a limiter needs: `observe(&id, 1)` and then
//!   `rate_with(&id, PROPORTIONAL_RATE_ESTIMATE_CALC_FN)`, the sliding estimate.
//! - `floor_five_lines/2MiB` (one thread only): **not a limiter**, a reference. Per event the
//!   least any sketch with Tollgate's accuracy must do: hash the key (the sketch's own xxh3,
//!   [`RateSketch::hash`]), load five words at random in an array as large as the sketch's
//!   counters and front (the four cells of four rows and the front's register: five cache
//!   lines, as the sketch reads), and one locked read-modify-write (a `fetch_add` on the
//!   register, as a first sighting's compare-and-swap). It counts nothing usable and decides
//!   nothing; the time of the sketch's cases above it is what the sketch adds to memory and
//!   hashing. At 2 MiB only: the sketch's 32 MiB arrays sit on huge pages (see
//!   `sketch/src/memory.rs`), which this array, safe code, cannot ask for, so at 32 MiB it would
//!   pay TLB misses the sketch does not and be no floor.
//! - `governor/unbounded` (one thread only): governor's keyed limiter, `check_key(&id)`. It keeps
//!   one map entry per distinct key and never evicts on its own, so its memory is not fixed: it
//!   holds every distinct id of the stream (printed at start), unlike the two sketches above.
//!
//! Groups `observe_1_thread` and `observe_2_threads` run the same cases; with two threads the
//! stream is split in halves, one per thread, both limiters shared (hot keys then contend for
//! the same cache lines, as they would in a proxy). The `*_disjoint_keys` groups replay a stream
//! whose halves have no key in common, on one thread and on two: their ratio shows the scaling
//! when the two cores never update the same key.
//!
//! # Reading the numbers
//! One iteration is [`BATCH`] events in total, whatever the thread count, and the throughput is
//! reported in events: events per second of the 1- and 2-thread groups compare directly, and
//! time per event is the time per iteration divided by [`BATCH`]. The time is wall time from the
//! moment every thread is ready (a barrier; spawning is not timed) until the last one finishes.
//!
//! `TOLLGATE_BENCH_CLOCK=cpu` times each iteration by the longest thread's time on a CPU
//! (`/proc/thread-self/schedstat`) instead of wall time: on a machine shared with other work
//! the wall time includes whatever the scheduler ran meanwhile, the time on a CPU does not
//! (the caches the others dirty still count).
//!
//! # Time
//! The sketch takes `now` as an argument; here it is a synthetic clock that moves
//! [`NANOS_PER_EVENT`] per event (about the real pace of a single thread), so a case crosses a
//! window boundary about once and the sketch rotates as it would in production. No clock is read
//! inside the timed call for Tollgate; pingora-limits (`Instant`) and governor (quanta) read their
//! own clocks on every call, which is part of their cost as a user would pay it.

#[path = "workload.rs"]
mod workload;

use workload::{cpu_clock, on_cpu};

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{BenchmarkGroup, BenchmarkId, Criterion, Throughput, measurement::WallTime};
use criterion::{criterion_group, criterion_main};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use pingora_limits::rate::{PROPORTIONAL_RATE_ESTIMATE_CALC_FN, Rate};
use tollgate_benches::sizes::{self, DEFAULT_DEPTH};
use tollgate_sketch::{RateSketch, Tick};

/// Distinct ids the Zipf distribution draws from.
const DISTINCT: u64 = 10_000_000;
/// The Zipf exponent: a realistic skew of sources.
const EXPONENT: f64 = 1.1;
/// Events in the pre-generated stream (32 MiB of ids, read sequentially).
const STREAM_LEN: usize = 1 << 22;
/// The stream's seed: every run and every peer replays the same ids.
const SEED: u64 = 0x0b5e_17e0;

/// Events per iteration, over all threads. Large enough that per-iteration overhead vanishes,
/// small enough that criterion gets many iterations per sample.
const BATCH: usize = 1 << 14;
/// Synthetic time per event: 10 M events per second of sketch time.
const NANOS_PER_EVENT: u64 = 100;

/// Total memory of the fixed-memory limiters: 2 MiB and 32 MiB.
const BUDGETS: [usize; 2] = [2 << 20, 32 << 20];
/// governor's sustained rate: 10 per second is the 100 per 10 s window used elsewhere. GCRA
/// does the same work whatever the quota, so the choice only decides how many checks fail.
const GOVERNOR_PER_SECOND: u32 = 10;

/// What every limiter under test does per event: count it and compute what a limit is checked
/// against. `now` is the benchmark's synthetic clock; the peers ignore it and read their own.
trait Limiter: Sync {
    /// Events per call of `hit_many`: 1 (one call per event) for every case but the batch API.
    const GROUP: usize = 1;

    fn hit(&self, id: u64, now: Tick);

    /// `GROUP` events at once, for a limiter with a batch API.
    fn hit_many(&self, ids: &[u64], now: Tick) {
        for &id in ids {
            self.hit(id, now);
        }
    }
}

struct Tollgate(RateSketch);

impl Limiter for Tollgate {
    #[inline]
    fn hit(&self, id: u64, now: Tick) {
        black_box(self.0.observe(&id.to_le_bytes(), 1, now));
    }
}

struct Pingora(Rate);

impl Limiter for Pingora {
    #[inline]
    fn hit(&self, id: u64, _now: Tick) {
        // The count `observe` returns covers the current interval only; a limiter decides on
        // the sliding estimate, which takes the second call.
        black_box(self.0.observe(&id, 1));
        black_box(self.0.rate_with(&id, PROPORTIONAL_RATE_ESTIMATE_CALC_FN));
    }
}

struct Governor(DefaultKeyedRateLimiter<u64>);

impl Limiter for Governor {
    #[inline]
    fn hit(&self, id: u64, _now: Tick) {
        // The verdict is data (allowed, or not before some instant), never an error to handle.
        let _ = black_box(self.0.check_key(&id));
    }
}

/// The cap of `tollgate_capped`: what the filter passes for a limit of 100 per window (as for
/// governor), `EXACT_MULTIPLE * count + 1`: keys up to 8 times their limit count exactly as
/// without a cap.
const CAP: u64 = tollgate_filter::EXACT_MULTIPLE * 100 + 1;

struct TollgateCapped(RateSketch);

impl Limiter for TollgateCapped {
    #[inline]
    fn hit(&self, id: u64, now: Tick) {
        black_box(self.0.observe_capped(&id.to_le_bytes(), 1, CAP, now));
    }
}

/// `tollgate_batch`: the same capped counting through [`RateSketch::observe_batch`], a group of
/// [`RateSketch::OBSERVE_BATCH`] events per call (hashed and prefetched, then counted).
struct TollgateBatch(RateSketch);

thread_local! {
    /// Where `tollgate_batch` puts a group's estimates: allocated once per thread.
    static ESTIMATES: std::cell::RefCell<Vec<u64>> =
        std::cell::RefCell::new(Vec::with_capacity(RateSketch::OBSERVE_BATCH));
}

impl Limiter for TollgateBatch {
    const GROUP: usize = RateSketch::OBSERVE_BATCH;

    fn hit(&self, id: u64, now: Tick) {
        self.hit_many(&[id], now);
    }

    #[inline]
    fn hit_many(&self, ids: &[u64], now: Tick) {
        ESTIMATES.with_borrow_mut(|estimates| {
            estimates.clear();
            let keys = ids.iter().map(|id| id.to_le_bytes());
            self.0.observe_batch(keys, 1, CAP, now, estimates);
            black_box(&estimates);
        });
    }
}

/// `floor_five_lines`: not a sketch (see the crate docs): a hash, five random loads in an array
/// of the sketch's size and one locked read-modify-write per event.
struct Floor {
    /// Only for its hash: the same xxh3 under a seed that every observe of the sketch runs.
    hasher: RateSketch,
    /// As many words as the sketch's counters and front, each written once at the start (an
    /// array never written would read the kernel's one zero page, always in cache).
    words: Box<[AtomicU64]>,
}

/// The rows a sketch of the default depth reads, plus its front's register.
const FLOOR_LINES: usize = DEFAULT_DEPTH + 1;

impl Floor {
    fn new(budget: usize) -> Floor {
        let hasher = tollgate(budget, DEFAULT_DEPTH).0;
        let words = hasher.memory_bytes() / std::mem::size_of::<u64>();
        Floor {
            hasher,
            words: (0..words).map(|_| AtomicU64::new(1)).collect(),
        }
    }
}

impl Limiter for Floor {
    #[inline]
    fn hit(&self, id: u64, _now: Tick) {
        let hash = self.hasher.hash(&id.to_le_bytes()).as_u64();
        // Five indices from the one hash, double hashing and multiply-shift as the sketch
        // derives its rows' cells and its register (no division).
        let step = (hash ^ (hash >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let len = self.words.len() as u128;
        let at = |probe: usize| {
            let g = hash.wrapping_add((probe as u64).wrapping_mul(step));
            // The high half of a product by `len`: below `len`, a usize.
            ((u128::from(g) * len) >> 64) as usize
        };
        // All five loads first, so their misses overlap (the register's too: the locked
        // instruction below waits for every earlier load, then finds its line on the way).
        let mut min = u64::MAX;
        for probe in 0..FLOOR_LINES {
            // Relaxed: a reference load, as the sketch's reads of its cells.
            min = min.min(self.words[at(probe)].load(Ordering::Relaxed));
        }
        // Relaxed: the one locked instruction an event that writes cannot avoid.
        let register = self.words[at(FLOOR_LINES - 1)].fetch_add(1, Ordering::Relaxed);
        black_box(min.min(register));
    }
}

/// The sketch in `budget` bytes, as [`sizes::sketch`] builds it.
fn tollgate(budget: usize, depth: usize) -> Tollgate {
    Tollgate(sizes::sketch(budget, depth))
}

/// pingora's `Rate` at the same memory ([`sizes::pingora`]: 2 MiB is `slots = 2^15`).
fn pingora(budget: usize) -> Pingora {
    Pingora(sizes::pingora(budget))
}

fn governor() -> Governor {
    let per_second = NonZeroU32::new(GOVERNOR_PER_SECOND).expect("the quota is not zero");
    Governor(RateLimiter::keyed(Quota::per_second(per_second)))
}

/// One case's walk through the stream: where each thread's part resumes and how many events
/// (hence how much synthetic time) have gone by. Each case starts its own at zero.
struct Replay<'a> {
    stream: &'a [u64],
    cursor: usize,
    events: u64,
}

impl<'a> Replay<'a> {
    fn new(stream: &'a [u64]) -> Replay<'a> {
        Replay {
            stream,
            cursor: 0,
            events: 0,
        }
    }

    /// Feeds `iters * BATCH` events to `limiter` from `threads` threads, each walking its own
    /// equal part of the stream, and returns the wall time from the moment all of them are
    /// ready until the last one is done.
    fn run<L: Limiter>(&mut self, limiter: &L, threads: usize, iters: u64) -> Duration {
        let part_len = self.stream.len() / threads;
        // Parts of a power-of-two length wrap with a mask, which keeps the loop overhead tiny.
        debug_assert!(part_len.is_power_of_two());
        debug_assert_eq!(BATCH % threads, 0, "every thread gets the same share");
        let wrap = part_len - 1;
        let iters = usize::try_from(iters).expect("criterion's iteration count fits in usize");
        let per_thread = iters * (BATCH / threads);
        let (cursor, first_event) = (self.cursor, self.events);
        let barrier = Barrier::new(threads);

        let spans: Vec<(Instant, Instant, Duration)> = thread::scope(|scope| {
            let workers: Vec<_> = self
                .stream
                .chunks_exact(part_len)
                .enumerate()
                .map(|(lane, part)| {
                    let barrier = &barrier;
                    scope.spawn(move || {
                        barrier.wait();
                        let cpu = on_cpu();
                        let start = Instant::now();
                        // Groups never straddle the wrap: the cursor, the part and every
                        // thread's share are multiples of the group.
                        for n in (0..per_thread).step_by(L::GROUP) {
                            // Threads interleave in synthetic time, so it runs at the same pace
                            // per event whatever the thread count.
                            let event = first_event + (n * threads + lane) as u64;
                            let now = Tick::from_nanos(event * NANOS_PER_EVENT);
                            let at = (cursor + n) & wrap;
                            if L::GROUP == 1 {
                                limiter.hit(part[at], now);
                            } else {
                                limiter.hit_many(&part[at..at + L::GROUP], now);
                            }
                        }
                        let end = Instant::now();
                        (start, end, on_cpu().saturating_sub(cpu))
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|worker| worker.join().expect("a benchmark thread panicked"))
                .collect()
        });

        self.cursor = (cursor + per_thread) & wrap;
        self.events += (per_thread * threads) as u64;
        let start = spans.iter().map(|span| span.0).min();
        let end = spans.iter().map(|span| span.1).max();
        let (start, end) = start.zip(end).expect("there is at least one thread");
        if cpu_clock() {
            // The longest thread's time on a CPU: the wall time had each had its own core.
            spans.iter().map(|span| span.2).max().unwrap_or_default()
        } else {
            end - start
        }
    }
}

fn bench<L: Limiter>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    id: BenchmarkId,
    stream: &[u64],
    threads: usize,
    limiter: &L,
) {
    let mut replay = Replay::new(stream);
    group.bench_function(id, |b| {
        b.iter_custom(|iters| replay.run(limiter, threads, iters));
    });
}

/// The stream rearranged so that its first half holds only even ids and its second only odd
/// ones (each cycled to half the length): two threads then share no key, only the sketch. Set
/// beside `observe_2_threads`, it separates the cost of two cores updating the same hot keys
/// from what the machine itself allows.
fn disjoint_halves(stream: &[u64]) -> Vec<u64> {
    let half = stream.len() / 2;
    let side = |parity: u64| {
        let ids: Vec<u64> = stream
            .iter()
            .copied()
            .filter(|id| id & 1 == parity)
            .collect();
        ids.into_iter().cycle().take(half)
    };
    side(0).chain(side(1)).collect()
}

fn observe(c: &mut Criterion) {
    let stream = workload::zipf_stream(DISTINCT, EXPONENT, STREAM_LEN, SEED);
    let mut distinct = stream.clone();
    distinct.sort_unstable();
    distinct.dedup();
    eprintln!(
        "stream: {} events of Zipf({EXPONENT}) over {DISTINCT} ids, {} distinct",
        stream.len(),
        distinct.len()
    );
    drop(distinct);

    let disjoint = disjoint_halves(&stream);
    let runs: [(usize, &str, &[u64]); 4] = [
        (1, "observe_1_thread", &stream),
        (2, "observe_2_threads", &stream),
        (1, "observe_1_thread_disjoint_keys", &disjoint),
        (2, "observe_2_threads_disjoint_keys", &disjoint),
    ];
    for (threads, name, stream) in runs {
        let mut group = c.benchmark_group(name);
        group.throughput(Throughput::Elements(BATCH as u64));
        for budget in BUDGETS {
            let size = format!("{}MiB", budget >> 20);
            let id = |peer| BenchmarkId::new(peer, &size);
            // Each limiter is built just before its case and dropped after it: only one of
            // them occupies memory (and cache) at a time.
            bench(
                &mut group,
                id("tollgate"),
                stream,
                threads,
                &tollgate(budget, DEFAULT_DEPTH),
            );
            bench(
                &mut group,
                id("tollgate_capped"),
                stream,
                threads,
                &TollgateCapped(tollgate(budget, DEFAULT_DEPTH).0),
            );
            bench(
                &mut group,
                id("tollgate_batch"),
                stream,
                threads,
                &TollgateBatch(tollgate(budget, DEFAULT_DEPTH).0),
            );
            if threads == 1 && name == "observe_1_thread" {
                // The deeper sketch the accuracy tool shows meeting the 2 MiB skew goal.
                bench(
                    &mut group,
                    id("tollgate_depth8"),
                    stream,
                    threads,
                    &tollgate(budget, 8),
                );
            }
            bench(&mut group, id("pingora"), stream, threads, &pingora(budget));
            if name == "observe_1_thread" && budget == BUDGETS[0] {
                let floor = Floor::new(budget);
                bench(&mut group, id("floor_five_lines"), stream, threads, &floor);
            }
        }
        if name == "observe_1_thread" {
            let id = BenchmarkId::new("governor", "unbounded");
            bench(&mut group, id, stream, threads, &governor());
        }
        group.finish();
    }
}

criterion_group! {
    name = benches;
    // A 2-core machine shared with other work: few, long samples keep the run to a few minutes
    // (28 cases) while the medians stay stable.
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(3))
        .measurement_time(Duration::from_secs(6));
    targets = observe
}
criterion_main!(benches);
