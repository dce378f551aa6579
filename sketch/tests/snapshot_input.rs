//! A window snapshot is outside input (it arrives from another node or from disk): arbitrary
//! parts are either refused with an error or merged, never a panic, and a merge never lowers
//! an estimate.

use std::time::Duration;

use proptest::prelude::*;
use tollgate_sketch::{MergeError, RateSketch, Shape, Tick, WindowSnapshot};

fn sketch() -> RateSketch {
    let builder = RateSketch::builder()
        .window(Duration::from_nanos(1_000))
        .depth(2)
        .seed(9);
    let memory = builder.min_memory_bytes() + 2_000;
    builder.memory_bytes(memory).build().expect("valid shape")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn arbitrary_snapshots_are_refused_or_merged(
        counts in prop::collection::vec(any::<u32>(), 0..600),
        front in prop::collection::vec(any::<u32>(), 0..200),
        window in prop_oneof![Just(0u64), 0..4u64, any::<u64>()],
        fronts in any::<u64>(),
        events in any::<u64>(),
        bend_shape in any::<bool>(),
    ) {
        let sketch = sketch();
        let now = Tick::from_nanos(500);
        for key in 0..20u32 {
            let _ = sketch.observe(&key.to_le_bytes(), 3, now);
        }
        let before: Vec<u64> = (0..20u32).map(|k| sketch.estimate(&k.to_le_bytes(), now)).collect();
        let mut shape: Shape = sketch.shape();
        if bend_shape {
            shape.seed ^= 1;
        }
        // Sometimes the right lengths, so that merges of wild values happen too.
        let counts = if counts.len() % 3 == 0 {
            counts.iter().copied().cycle().take(shape.depth * shape.width).collect()
        } else {
            counts
        };
        let front = if front.len() % 2 == 0 {
            front.iter().map(|b| b & ((1 << 28) - 1)).cycle().take(shape.registers).collect()
        } else {
            front
        };
        if let Ok(snapshot) = WindowSnapshot::from_parts(shape, window, counts, front, fronts, events) {
            let merged = sketch.merge_window(&snapshot, now);
            prop_assert_eq!(merged.is_ok(), !bend_shape && window == 0);
        }
        for (key, was) in (0..20u32).zip(before) {
            prop_assert!(sketch.estimate(&key.to_le_bytes(), now) >= was);
        }
        let _ = sketch.stats(now);
    }
}

/// A sketch reports the window it was built with, and a snapshot of another window length is
/// refused by name (its counts would slide at the wrong rate).
#[test]
fn a_snapshot_of_another_window_length_is_refused() {
    let sketch = sketch();
    assert_eq!(sketch.window(), Duration::from_nanos(1_000));
    assert_eq!(sketch.shape().window_nanos, 1_000);
    let builder = RateSketch::builder()
        .window(Duration::from_nanos(2_000))
        .depth(2)
        .seed(9);
    let memory = builder.min_memory_bytes() + 2_000;
    let other = builder.memory_bytes(memory).build().expect("valid shape");
    assert_eq!(
        sketch.merge_window(&other.export_window(0), Tick::from_nanos(500)),
        Err(MergeError::ShapeMismatch {
            field: "window length (ns)",
            ours: 1_000,
            theirs: 2_000,
        })
    );
}

/// A snapshot carries the front's bits of its window: merged into another sketch, a key the
/// first sketch had seen is no first sighting there (the front absorbs a key's first event
/// once, cluster-wide), and the merged sketch exports the same bits again.
#[test]
fn front_bits_travel_with_a_snapshot() {
    let (seen_there, merged, fresh) = (sketch(), sketch(), sketch());
    let now = Tick::from_nanos(100);
    let _ = seen_there.observe(b"key", 1, now);
    let window = seen_there.window_index(now);
    let snapshot = seen_there.export_window(window);
    assert!(snapshot.front_bits().iter().any(|&bits| bits != 0));
    merged
        .merge_window(&snapshot, now)
        .expect("same shape, current window");
    assert_eq!(
        merged.export_window(window).front_bits(),
        snapshot.front_bits()
    );
    assert!(
        fresh
            .export_window(window)
            .front_bits()
            .iter()
            .all(|&bits| bits == 0)
    );
    // Here the key's next event reads at least its second there (2: the first absorbed by
    // that front, this one counted; here 3, each of two fronts owed a first event), not as
    // a first sighting (1, in a sketch that never heard of the key).
    let second = seen_there.observe(b"key", 1, now);
    let (merged, fresh) = (
        merged.observe(b"key", 1, now),
        fresh.observe(b"key", 1, now),
    );
    assert_eq!((second, fresh), (2, 1));
    assert!(merged >= second, "{merged} under {second}");
}
