//! The sketch's central promise, checked against an exact oracle: for every key, at every
//! moment, the sketch's sliding estimate is at least the true sliding count computed with the
//! same interpolation. Streams, weights, shapes and clock jumps are random; sketches are kept
//! small so that keys collide constantly.

use std::collections::HashMap;
use std::time::Duration;

use proptest::prelude::*;
use tollgate_sketch::{RateSketch, Tick};

const WINDOW: u64 = 1_000;

/// Exact per-key counts per window, with the sketch's interpolation.
#[derive(Default)]
struct Oracle {
    counts: HashMap<(u16, u64), u64>,
}

impl Oracle {
    fn observe(&mut self, key: u16, weight: u64, now: u64) {
        *self.counts.entry((key, now / WINDOW)).or_default() += weight;
    }

    fn estimate(&self, key: u16, now: u64) -> u64 {
        let window = now / WINDOW;
        let count = |w: u64| self.counts.get(&(key, w)).copied().unwrap_or(0);
        let remaining = WINDOW - now % WINDOW;
        let previous = if window == 0 { 0 } else { count(window - 1) };
        count(window) + (previous * remaining).div_ceil(WINDOW)
    }

    /// The key's total over the windows before `window`.
    fn before(&self, key: u16, window: u64) -> u64 {
        self.counts
            .iter()
            .filter(|((k, w), _)| *k == key && *w < window)
            .map(|(_, count)| count)
            .sum()
    }
}

#[derive(Clone, Debug)]
enum Step {
    Observe { key: u16, weight: u64 },
    Advance(u64),
}

fn step(keys: u16) -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0..keys, prop_oneof![3 => Just(1u64), 1 => 1..2_000u64])
            .prop_map(|(key, weight)| Step::Observe { key, weight }),
        1 => prop_oneof![
            Just(0u64),
            1..WINDOW,                      // inside a window
            Just(WINDOW),                   // exactly one rotation
            (1..4u64).prop_map(|n| n * WINDOW - 1),
            WINDOW..40 * WINDOW,            // jumps of many windows
        ]
        .prop_map(Step::Advance),
    ]
}

/// A sketch with `extra` bytes beyond the smallest of its shape: small, so keys collide; with
/// reservations by `reserve` (see `Builder::reserve_shift`).
fn sketch(
    extra: usize,
    depth: usize,
    front_share: f64,
    front_weight: u32,
    reserve: Option<u32>,
) -> RateSketch {
    hot_sketch(extra, depth, front_share, front_weight, 0, reserve)
}

/// [`sketch`] with a table of `hot` bytes for keys seen at their cap.
fn hot_sketch(
    extra: usize,
    depth: usize,
    front_share: f64,
    front_weight: u32,
    hot: usize,
    reserve: Option<u32>,
) -> RateSketch {
    let builder = RateSketch::builder()
        .window(Duration::from_nanos(WINDOW))
        .depth(depth)
        .front_share(front_share)
        .front_weight(front_weight)
        .hot_keys_bytes(hot)
        .reserve_shift(reserve)
        .seed(42);
    let memory = builder.min_memory_bytes() + extra;
    builder
        .memory_bytes(memory)
        .build()
        .expect("valid test shape")
}

/// Reserve shifts to draw: none, small ones that reserve from a few events on (1: half the
/// count, so credits are taken and spent constantly), and the default.
fn reserve() -> impl Strategy<Value = Option<u32>> {
    prop_oneof![Just(None), Just(Some(1)), Just(Some(2)), Just(Some(8))]
}

/// A roomy plain sketch for one key, with the given lag tolerance.
fn lone(lag: Duration) -> RateSketch {
    lone_reserving(lag, None)
}

/// [`lone`] with reservations by `reserve`.
fn lone_reserving(lag: Duration, reserve: Option<u32>) -> RateSketch {
    RateSketch::builder()
        .window(Duration::from_nanos(WINDOW))
        .front_share(0.0)
        .lag_tolerance(lag)
        .reserve_shift(reserve)
        .memory_bytes(1 << 16)
        .seed(42)
        .build()
        .expect("valid test shape")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn estimates_never_fall_below_the_true_sliding_count(
        steps in prop::collection::vec(step(64), 1..600),
        extra in 0usize..8_000,
        depth in 1usize..=8,
        front_share in prop_oneof![Just(0.0), Just(0.125), 0.0..0.5f64],
        front_weight in prop_oneof![Just(1u32), 1..3_000u32],
        start in prop_oneof![Just(0u64), 0..u64::MAX / 4],
        reserve in reserve(),
    ) {
        let sketch = sketch(extra, depth, front_share, front_weight, reserve);
        let mut oracle = Oracle::default();
        let mut now = start;
        for step in steps {
            match step {
                Step::Observe { key, weight } => {
                    oracle.observe(key, weight, now);
                    let estimate = sketch.observe(&key.to_le_bytes(), weight, Tick::from_nanos(now));
                    let truth = oracle.estimate(key, now);
                    prop_assert!(estimate >= truth, "observe of key {key}: {estimate} < {truth}");
                }
                Step::Advance(by) => now += by,
            }
        }
        for probe in [0, 1, WINDOW / 2, WINDOW - 1, WINDOW, 2 * WINDOW] {
            let at = now + probe;
            for key in 0..64u16 {
                let estimate = sketch.estimate(&key.to_le_bytes(), Tick::from_nanos(at));
                let truth = oracle.estimate(key, at);
                prop_assert!(estimate >= truth, "key {key} at +{probe}: {estimate} < {truth}");
            }
        }
    }

    #[test]
    fn capped_estimates_never_fall_below_the_cap_or_the_true_count(
        steps in prop::collection::vec(step(64), 1..600),
        extra in 0usize..8_000,
        depth in 1usize..=8,
        front_share in prop_oneof![Just(0.0), Just(0.125), 0.0..0.5f64],
        cap in prop_oneof![1..8u64, 1..3_000u64, Just(u64::MAX)],
        start in prop_oneof![Just(0u64), 0..u64::MAX / 4],
        // No table, one line (64 keys share 8 slots), and room for all.
        hot in prop_oneof![Just(0usize), Just(64), Just(4_096)],
        reserve in reserve(),
    ) {
        // The caps' promise: estimate >= min(cap, truth). Keys stop counting at the cap, so
        // the oracle's truth goes on above what the sketch holds; keys noted at their cap
        // are answered from the hot keys' table, and must be counted again the next window.
        let sketch = hot_sketch(extra, depth, front_share, 1, hot, reserve);
        let mut oracle = Oracle::default();
        let mut now = start;
        for step in steps {
            match step {
                Step::Observe { key, weight } => {
                    oracle.observe(key, weight, now);
                    let at = Tick::from_nanos(now);
                    let estimate = sketch.observe_capped(&key.to_le_bytes(), weight, cap, at);
                    let owed = oracle.estimate(key, now).min(cap);
                    prop_assert!(estimate >= owed, "observe of key {key}: {estimate} < {owed}");
                }
                Step::Advance(by) => now += by,
            }
        }
        for probe in [0, 1, WINDOW / 2, WINDOW - 1, WINDOW, 2 * WINDOW - 1, 2 * WINDOW] {
            let at = now + probe;
            for key in 0..64u16 {
                let estimate = sketch.estimate_capped(&key.to_le_bytes(), cap, Tick::from_nanos(at));
                let owed = oracle.estimate(key, at).min(cap);
                prop_assert!(estimate >= owed, "key {key} at +{probe}: {estimate} < {owed}");
            }
        }
    }

    #[test]
    fn a_lone_key_is_counted_exactly(
        weights in prop::collection::vec(1u64..100, 1..50),
        offsets in prop::collection::vec(0..WINDOW, 1..50),
    ) {
        // With no other key there is nothing to collide with: with no lag tolerance the
        // estimate is the truth (plus nothing: the first event's weight is <= the front weight
        // only when it is 1). With the default tolerance (T / 64) each roll keeps a fold of
        // the window it drops, for ticks that step back: the estimate is then above the truth
        // by at most that fold, `ceil(older * L / T)` repeated, below `older / 63 + 2`.
        let exact = lone(Duration::ZERO);
        let tolerant = lone(Duration::from_nanos(WINDOW / 64));
        let mut oracle = Oracle::default();
        let mut now = 0;
        let key = 7u16.to_le_bytes();
        for (weight, offset) in weights.iter().zip(&offsets) {
            now += offset;
            oracle.observe(7, *weight, now);
            let truth = oracle.estimate(7, now);
            prop_assert_eq!(exact.observe(&key, *weight, Tick::from_nanos(now)), truth);
            let estimate = tolerant.observe(&key, *weight, Tick::from_nanos(now));
            let older = oracle.before(7, (now / WINDOW).saturating_sub(1));
            prop_assert!(
                (truth..=truth + older / 63 + 2).contains(&estimate),
                "{estimate} outside {truth} + fold of {older}"
            );
        }
    }

    #[test]
    fn a_lone_key_reads_at_most_its_reservations_above_the_truth(
        steps in prop::collection::vec(
            (prop_oneof![3 => Just(1u64), 1 => 1..40u64], 0..WINDOW / 4),
            1..600,
        ),
        shift in 1u32..=8,
    ) {
        // One thread, one key, no collisions, no fold (no lag tolerance): without
        // reservations the estimate is the truth. With them, each window's cells hold the
        // truth plus the one unspent credit, at most `count >> s` of that window's count, so
        // the estimate reads at most `estimate / 2^s` above the truth (+ 1: the previous
        // share's rounding, done once on both parts together).
        let sketch = lone_reserving(Duration::ZERO, Some(shift));
        let mut oracle = Oracle::default();
        let mut now = 0;
        let key = 7u16.to_le_bytes();
        for (weight, offset) in steps {
            now += offset;
            oracle.observe(7, weight, now);
            let truth = oracle.estimate(7, now);
            let estimate = sketch.observe(&key, weight, Tick::from_nanos(now));
            let bound = truth + estimate.div_ceil(1 << shift) + 1;
            prop_assert!(
                (truth..=bound).contains(&estimate),
                "{estimate} outside {truth}..={bound} (shift {shift})"
            );
            for probe in [1, WINDOW / 2, WINDOW] {
                let (at, truth) = (now + probe, oracle.estimate(7, now + probe));
                let estimate = sketch.estimate(&key, Tick::from_nanos(at));
                let bound = truth + estimate.div_ceil(1 << shift) + 1;
                prop_assert!(
                    (truth..=bound).contains(&estimate),
                    "at +{probe}: {estimate} outside {truth}..={bound} (shift {shift})"
                );
            }
        }
    }

    #[test]
    fn many_keys_read_at_most_their_reservations_above_the_truth(
        steps in prop::collection::vec(
            (0..1_000u16, prop_oneof![3 => Just(1u64), 1 => 1..8u64], 0..2u64),
            1..3_000,
        ),
        keys in prop_oneof![Just(8u16), 1..1_000u16],
        shift in 1u32..=3,
    ) {
        // The bound above with up to a thousand keys reserving on one thread: more than its
        // table's entries, so keys share sets, take each other's spent entries, and find them
        // held. However the table hands its entries out, a key holds at most one unspent
        // credit per window, so each reads at most `estimate / 2^s` (+ 1) above its truth. A
        // roomy sketch: the keys' cells do not collide in every row. Steps of 0 or 1 ns: the
        // keys' counts grow over one to three windows, where credits are large.
        let sketch = RateSketch::builder()
            .window(Duration::from_nanos(WINDOW))
            .front_share(0.0)
            .reserve_shift(Some(shift))
            .memory_bytes(1 << 22)
            .seed(42)
            .build()
            .expect("valid test shape");
        let mut oracle = Oracle::default();
        let mut now = 0;
        for (key, weight, offset) in steps {
            let key = key % keys;
            now += offset;
            oracle.observe(key, weight, now);
            let truth = oracle.estimate(key, now);
            let estimate = sketch.observe(&key.to_le_bytes(), weight, Tick::from_nanos(now));
            let bound = truth + estimate.div_ceil(1 << shift) + 1;
            prop_assert!(
                (truth..=bound).contains(&estimate),
                "key {key}: {estimate} outside {truth}..={bound} (shift {shift})"
            );
        }
    }
}

#[test]
fn racing_threads_lose_no_count() {
    // Not a model (loom covers the interleavings); a smoke test that real threads on one tiny
    // sketch, hammering the same few keys, never end below the true count.
    let sketch = sketch(0, 2, 0.125, 1, Some(8));
    let now = Tick::from_nanos(5);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for i in 0..20_000u32 {
                    let _ = sketch.observe(&(i % 8).to_le_bytes(), 1, now);
                }
            });
        }
    });
    for key in 0..8u32 {
        let estimate = sketch.estimate(&key.to_le_bytes(), now);
        assert!(estimate >= 10_000, "key {key}: {estimate} < 10000");
    }
}

#[test]
fn threads_spending_reservations_on_one_key_lose_no_count() {
    // Four threads, one key, reservations of half the count (shift 1) and of 1/256: each
    // thread's credits answer most of its events without a write, and every one of them was
    // counted in the cells before it was answered: the key ends at or above the total.
    for shift in [1, 8] {
        let sketch = lone_reserving(Duration::ZERO, Some(shift));
        let now = Tick::from_nanos(5);
        let events = 20_000u64;
        let least = std::thread::scope(|s| {
            let threads: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        (0..events)
                            .map(|_| sketch.observe(b"hot", 1, now))
                            .min()
                            .unwrap_or(0)
                    })
                })
                .collect();
            threads
                .into_iter()
                .map(|t| t.join().expect("no panic"))
                .min()
        });
        assert!(least >= Some(1));
        let estimate = sketch.estimate(b"hot", now);
        assert!(
            estimate >= 4 * events,
            "shift {shift}: {estimate} < {}",
            4 * events
        );
    }
}
