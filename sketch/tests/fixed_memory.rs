//! All memory is allocated at build: a heap profiler (dhat, in testing mode) shows that
//! observing 1k or 10M distinct keys allocates nothing, and that `memory_bytes()` is exactly
//! what `build` allocated plus the struct itself.

use std::time::Duration;

use tollgate_sketch::{RateSketch, Tick};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// Runs `f` and returns what it allocated: (blocks, bytes).
fn allocated<T>(f: impl FnOnce() -> T) -> (T, u64, u64) {
    let before = dhat::HeapStats::get();
    let value = f();
    let after = dhat::HeapStats::get();
    (
        value,
        after.total_blocks - before.total_blocks,
        after.total_bytes - before.total_bytes,
    )
}

// One test per file, without libtest's harness (`harness = false` in Cargo.toml): dhat allows
// one profiler per process and counts every thread's allocations, and libtest's own thread
// allocates while a test runs (it made the build count 900 bytes high about one run in
// three). Here nothing else runs.
fn main() {
    observing_any_number_of_keys_allocates_nothing();
    println!("fixed_memory: observing any number of keys allocates nothing: ok");
}

fn observing_any_number_of_keys_allocates_nothing() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let budget = 8 << 20;
    let (sketch, _, built_bytes) = allocated(|| {
        RateSketch::builder()
            .window(Duration::from_secs(10))
            .memory_bytes(budget)
            .build()
            .expect("valid shape")
    });
    let built_bytes = usize::try_from(built_bytes).expect("fits");
    assert_eq!(
        built_bytes + std::mem::size_of::<RateSketch>(),
        sketch.memory_bytes()
    );
    assert!(sketch.memory_bytes() <= budget);

    // Warm up this thread (its statistics stripe number) before counting.
    let _ = sketch.observe(b"warm-up", 1, Tick::ZERO);
    let run = |keys: u64, at: u64| {
        allocated(|| {
            (0..keys)
                .map(|key| sketch.observe(&key.to_le_bytes(), 1, Tick::from_nanos(at)))
                .sum::<u64>()
        })
    };
    let (_, small_blocks, small_bytes) = run(1_000, 1);
    let (_, large_blocks, large_bytes) = run(10_000_000, 20_000_000_000);
    assert_eq!((small_blocks, small_bytes), (0, 0), "1k keys allocated");
    assert_eq!((large_blocks, large_bytes), (0, 0), "10M keys allocated");
    let (stats, _, _) = allocated(|| sketch.stats(Tick::from_nanos(20_000_000_000)));
    assert_eq!(stats.events_current, 10_000_000);
    assert_eq!(stats.memory_bytes, sketch.memory_bytes());
}
