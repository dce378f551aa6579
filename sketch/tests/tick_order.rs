//! Ticks out of order: an observe at tick `t` returns at least the exact sliding count at `t`
//! of the events stamped at or before `t` (under concurrency: of those that finished before it
//! began), as long as `t` lags the newest tick counted by no more than the sketch's lag
//! tolerance. One thread with random steps back (a property test against an exact oracle), and
//! racing threads with random ticks inside the tolerance (ordered by a global sequence counter).

use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use tollgate_sketch::{RateSketch, Tick};

const WINDOW: u64 = 1_000;

/// One counted event.
#[derive(Clone, Copy, Debug)]
struct Event {
    key: u16,
    tick: u64,
    weight: u64,
}

/// The exact sliding count at `at` of the events given, with the sketch's interpolation, of
/// those stamped at or before `at`.
fn truth<'a>(events: impl IntoIterator<Item = &'a Event>, key: u16, at: u64) -> u64 {
    let window = at / WINDOW;
    let (mut current, mut previous) = (0, 0);
    for event in events {
        if event.key != key || event.tick > at {
            continue;
        }
        match window - event.tick / WINDOW {
            0 => current += event.weight,
            1 => previous += event.weight,
            _ => {}
        }
    }
    let remaining = WINDOW - at % WINDOW;
    current + (previous * remaining).div_ceil(WINDOW)
}

/// A small sketch, so keys collide, with lag tolerance `lag`.
/// With reservations by `reserve` (see `Builder::reserve_shift`).
fn sketch(
    extra: usize,
    depth: usize,
    front_share: f64,
    lag: u64,
    reserve: Option<u32>,
) -> RateSketch {
    let builder = RateSketch::builder()
        .window(Duration::from_nanos(WINDOW))
        .depth(depth)
        .front_share(front_share)
        .lag_tolerance(Duration::from_nanos(lag))
        .reserve_shift(reserve)
        .seed(42);
    let memory = builder.min_memory_bytes() + extra;
    builder
        .memory_bytes(memory)
        .build()
        .expect("valid test shape")
}

#[derive(Clone, Debug)]
enum Step {
    /// An event `back` nanoseconds before the clock (at most the tolerance).
    Observe { key: u16, weight: u64, back: u64 },
    /// The clock moves on.
    Advance(u64),
}

/// Steps with steps back as a share of the tolerance: none, a little, all of it.
fn step(keys: u16) -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (
            0..keys,
            prop_oneof![3 => Just(1u64), 1 => 1..50u64],
            prop_oneof![Just(0u64), 0..=1_000u64, Just(1_000u64)],
        )
            .prop_map(|(key, weight, back)| Step::Observe { key, weight, back }),
        1 => prop_oneof![
            1..WINDOW / 4,
            Just(WINDOW),
            (1..4u64).prop_map(|n| n * WINDOW - 1),
            WINDOW..5 * WINDOW,
        ]
        .prop_map(Step::Advance),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn ticks_within_the_tolerance_never_read_below_the_truth(
        steps in prop::collection::vec(step(24), 1..400),
        extra in 0usize..4_000,
        depth in 1usize..=4,
        front_share in prop_oneof![Just(0.0), Just(0.125), 0.0..0.5f64],
        lag in prop_oneof![Just(WINDOW / 64), Just(WINDOW / 4), Just(WINDOW / 2), 0..=WINDOW / 2],
        // None, half the count (credits taken and spent constantly), and the default.
        reserve in prop_oneof![Just(None), Just(Some(1)), Just(Some(2)), Just(Some(8))],
    ) {
        let sketch = sketch(extra, depth, front_share, lag, reserve);
        let mut events = Vec::new();
        // The clock starts a few windows in, so that stepping back never goes below zero.
        let mut now = 4 * WINDOW;
        for step in steps {
            match step {
                Step::Observe { key, weight, back } => {
                    // `back` is a share (per mille) of the tolerance.
                    let tick = now - lag * back / 1_000;
                    events.push(Event { key, tick, weight });
                    let estimate = sketch.observe(&key.to_le_bytes(), weight, Tick::from_nanos(tick));
                    let exact = truth(&events, key, tick);
                    prop_assert!(estimate >= exact, "observe of {key} at {tick} ({now} - {}): {estimate} < {exact}", now - tick);
                }
                Step::Advance(by) => now += by,
            }
        }
        for back in [0, 1, lag / 2, lag] {
            let at = now - back;
            for key in 0..24u16 {
                let estimate = sketch.estimate(&key.to_le_bytes(), Tick::from_nanos(at));
                let exact = truth(&events, key, at);
                prop_assert!(estimate >= exact, "key {key} at {now} - {back}: {estimate} < {exact}");
            }
        }
    }
}

/// What one observe did, and when it began and ended in the global sequence.
#[derive(Clone, Copy, Debug)]
struct Record {
    event: Event,
    begin: u64,
    end: u64,
    estimate: u64,
}

/// SplitMix64: a seeded generator for the threads' choices (reproducible per thread seed).
struct Rng(u64);

impl Rng {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % bound
    }
}

#[test]
fn racing_threads_with_lagging_ticks_never_read_below_what_finished_before() {
    // Rounds of time: in round r every thread observes at ticks in [base_r - L, base_r], and a
    // barrier ends the round, so no tick counted before or during an observe is newer than
    // base_r: every observe lags the newest tick by at most L. Rounds advance by less than a
    // tenth of a window, so many observes step back over a window edge that a racing thread
    // has just rolled the cells across.
    const THREADS: usize = 4;
    const ROUNDS: u64 = 500;
    const PER_ROUND: usize = 3;
    const LAG: u64 = WINDOW / 4;
    const STEP: u64 = 70;
    const KEYS: u64 = 6;
    // Reserving from 4 events on: credits taken and spent while ticks step back.
    let sketch = sketch(256, 2, 0.125, LAG, Some(2));
    let sequence = AtomicU64::new(0);
    let barrier = Barrier::new(THREADS);
    let records: Vec<Record> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS as u64)
            .map(|thread| {
                let (sketch, sequence, barrier) = (&sketch, &sequence, &barrier);
                s.spawn(move || {
                    let mut rng = Rng(thread + 1);
                    let mut done = Vec::new();
                    for round in 0..ROUNDS {
                        let base = 4 * WINDOW + round * STEP;
                        for _ in 0..PER_ROUND {
                            let event = Event {
                                // KEYS < 2^16: the cast is exact.
                                key: rng.below(KEYS) as u16,
                                tick: base - rng.below(LAG + 1),
                                weight: 1 + rng.below(3),
                            };
                            // SeqCst: the two counters put every observe's start and end in
                            // one order: an observe that ended before another began
                            // happens-before it.
                            let begin = sequence.fetch_add(1, Ordering::SeqCst);
                            let estimate = sketch.observe(
                                &event.key.to_le_bytes(),
                                event.weight,
                                Tick::from_nanos(event.tick),
                            );
                            // SeqCst: as above.
                            let end = sequence.fetch_add(1, Ordering::SeqCst);
                            done.push(Record {
                                event,
                                begin,
                                end,
                                estimate,
                            });
                        }
                        barrier.wait();
                    }
                    done
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("no panic"))
            .collect()
    });
    let mut crossed = 0;
    for record in &records {
        let event = record.event;
        let finished = records
            .iter()
            .filter(|r| r.end < record.begin || std::ptr::eq(*r, record))
            .map(|r| &r.event);
        let exact = truth(finished, event.key, event.tick);
        assert!(
            record.estimate >= exact,
            "{record:?}: {} < {exact}",
            record.estimate
        );
        // Observes that stepped back over an edge some thread had crossed before them.
        crossed += usize::from(
            records
                .iter()
                .any(|r| r.end < record.begin && r.event.tick / WINDOW > event.tick / WINDOW),
        );
    }
    // The test means something only if the races it is about happened.
    assert!(
        crossed > 50,
        "only {crossed} observes stepped back over an edge"
    );
}
