//! One sketch shared by threads through an `Arc`: four threads count a skewed stream of keys
//! at once, with no lock and no per-key entry, then every key's estimate is checked against
//! its exact count: never below it, and above it by no more than the sketch says it may be.
//!
//! Runs by itself and exits (non-zero if a promise was broken):
//!
//! ```sh
//! cargo run -p tollgate-sketch --example shared_counter
//! ```

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use tollgate_sketch::{Clock, ManualClock, RateSketch, Tick};

const THREADS: u64 = 4;
const EVENTS_PER_THREAD: u64 = 100_000;
/// Distinct keys the stream draws from.
const KEYS: u64 = 50_000;

/// A small deterministic generator (xorshift64*): the example needs no `rand`.
struct Stream(u64);

impl Stream {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A skewed key: the product of two uniform draws makes low keys far more frequent, as a
    /// few heavy clients among many light ones.
    fn key(&mut self) -> u64 {
        let a = self.next() % KEYS;
        let b = self.next() % KEYS;
        a * b / KEYS
    }
}

fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let sketch = Arc::new(
        RateSketch::builder()
            .window(Duration::from_secs(10))
            .memory_bytes(1 << 20)
            .build()?,
    );
    // Time is an argument: a manual clock, shared like the sketch, keeps the run inside one
    // window so the exact counts below are simple sums. A service would use MonotonicClock.
    let clock = Arc::new(ManualClock::new(Tick::ZERO));
    clock.advance(Duration::from_secs(1));

    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let sketch = Arc::clone(&sketch);
            let clock = Arc::clone(&clock);
            thread::spawn(move || {
                let mut stream = Stream(0x9e37_79b9_7f4a_7c15 ^ (t + 1));
                let mut exact: HashMap<u64, u64> = HashMap::new();
                let mut below = 0u64;
                for _ in 0..EVENTS_PER_THREAD {
                    let key = stream.key();
                    let estimate = sketch.observe(&key.to_le_bytes(), 1, clock.now());
                    // While other threads count too, the estimate is at least this thread's
                    // own count of the key (its events all finished before this one).
                    let mine = exact.entry(key).or_default();
                    *mine += 1;
                    below += u64::from(estimate < *mine);
                }
                (exact, below)
            })
        })
        .collect();
    let mut exact: HashMap<u64, u64> = HashMap::new();
    let mut below_while_counting = 0;
    for worker in workers {
        let (counts, below) = worker.join().map_err(|_| "a counting thread panicked")?;
        below_while_counting += below;
        for (key, count) in counts {
            *exact.entry(key).or_default() += count;
        }
    }

    let now = clock.now();
    let stats = sketch.stats(now);
    let (mut under, mut over_bound, mut largest) = (0, 0, 0);
    for (key, &count) in &exact {
        let estimate = sketch.estimate(&key.to_le_bytes(), now);
        under += u64::from(estimate < count);
        over_bound += u64::from(estimate > count + stats.overcount_bound);
        largest = largest.max(estimate.saturating_sub(count));
    }
    let heaviest = exact.values().max().copied().unwrap_or(0);
    println!(
        "{THREADS} threads, {} events, {} distinct keys (the heaviest {heaviest} events)",
        stats.events_current,
        exact.len()
    );
    println!(
        "memory {} bytes, fixed at build; front fill {:.2}",
        stats.memory_bytes, stats.front_fill
    );
    println!(
        "stated overcount bound {} (with probability {:.3}); largest overcount seen {largest}",
        stats.overcount_bound, stats.confidence
    );
    println!(
        "keys estimated below their count: {under} (while counting: {below_while_counting}); \
         above the bound: {over_bound}"
    );
    // The bound holds per key with the stated probability, so a few keys over it would not
    // break the promise; none below their count would.
    let allowed_over = (exact.len() as f64 * (1.0 - stats.confidence)).ceil() as u64;
    Ok(
        if under == 0 && below_while_counting == 0 && over_bound <= allowed_over {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        },
    )
}
