//! Loom models of the sketch: observe vs observe on one key, observe vs rotation, and the
//! front's first-sighting decision racing itself.

#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use tollgate_loom::{WINDOW, check, tiny};
use tollgate_sketch::Tick;

const KEY: &[u8] = b"203.0.113.7";

/// Two observes of one key race (plain sketch, two rows, conservative update): neither count
/// is lost, and each observe returns at least its own event.
#[test]
fn observe_observe_one_key() {
    check(|| {
        let sketch = Arc::new(tiny(2, 0.0));
        let now = Tick::from_nanos(10);
        let other = Arc::clone(&sketch);
        let racer = thread::spawn(move || other.observe(KEY, 1, now));
        let mine = sketch.observe(KEY, 2, now);
        let theirs = racer.join().expect("no panic");
        assert!(mine >= 2 && theirs >= 1, "returned {mine} and {theirs}");
        assert!(
            mine.max(theirs) >= 3,
            "the later observe saw both: {mine}, {theirs}"
        );
        assert!(sketch.estimate(KEY, now) >= 3, "lost a count");
        assert_eq!(sketch.stats(now).events_current, 3);
    });
}

/// An observe in window 0 races the first observe of window 1, which rolls the key's cells
/// forward: no count is lost from either window, and once both windows have passed nothing is
/// read as current.
#[test]
fn observe_vs_rotation() {
    check(|| {
        let sketch = Arc::new(tiny(1, 0.0));
        let late = Tick::from_nanos(WINDOW - 1);
        let next = Tick::from_nanos(WINDOW);
        let _ = sketch.observe(KEY, 1, late);
        let other = Arc::clone(&sketch);
        let racer = thread::spawn(move || other.observe(KEY, 1, late));
        let rotated = sketch.observe(KEY, 1, next);
        racer.join().expect("no panic");
        // At the start of window 1 the whole of window 0 still counts: 2 + 1.
        assert!(rotated >= 1);
        assert!(
            sketch.estimate(KEY, next) >= 3,
            "lost a count across the rotation"
        );
        // Two windows on, neither window is in the sliding window any more.
        assert_eq!(
            sketch.estimate(KEY, Tick::from_nanos(3 * WINDOW)),
            0,
            "stale read"
        );
    });
}

/// Two first events of one key race on the Bloom front: exactly one is absorbed. The other
/// reaches the counters, so the estimate is exactly 2 (absorbing both would give 1, neither 3).
#[test]
fn front_first_sighting() {
    check(|| {
        let sketch = Arc::new(tiny(1, 0.5));
        let now = Tick::from_nanos(10);
        let other = Arc::clone(&sketch);
        let racer = thread::spawn(move || other.observe(KEY, 1, now));
        let mine = sketch.observe(KEY, 1, now);
        let theirs = racer.join().expect("no panic");
        assert_eq!(sketch.estimate(KEY, now), 2, "both or neither absorbed");
        assert_eq!(mine.max(theirs), 2);
    });
}

/// A window merged in from another node races an observe of the same key: the merged counts and
/// the local event are both kept.
#[test]
fn merge_vs_observe() {
    check(|| {
        let remote = tiny(1, 0.0);
        let now = Tick::from_nanos(10);
        let _ = remote.observe(KEY, 2, now);
        let snapshot = remote.export_window(0);
        let sketch = Arc::new(tiny(1, 0.0));
        let other = Arc::clone(&sketch);
        let racer = thread::spawn(move || other.observe(KEY, 1, now));
        sketch
            .merge_window(&snapshot, now)
            .expect("same shape, current window");
        racer.join().expect("no panic");
        assert!(
            sketch.estimate(KEY, now) >= 3,
            "lost the merge or the event"
        );
    });
}

/// Acquires and releases of one key race on the open-count sketch: no change is lost, and once
/// everything is released the key reads 0.
#[test]
fn acquire_vs_release() {
    check(|| {
        let open = Arc::new(tollgate_sketch::ConcurrencySketch::new(64 * 2, 2, 1).expect("valid"));
        assert_eq!(open.acquire(KEY), 1);
        let other = Arc::clone(&open);
        let racer = thread::spawn(move || {
            let held = other.acquire(KEY);
            other.release(KEY);
            held
        });
        open.release(KEY);
        let theirs = racer.join().expect("no panic");
        assert!((1..=2).contains(&theirs), "saw {theirs}");
        assert_eq!(open.estimate(KEY), 0, "a change was lost");
    });
}
