//! How often threads sharing hot keys collide in the sketch's counters: 1, 2 and 4 threads
//! observing one hot key (and 16 hot keys), with reservations off and on, printing per observe
//! the conservative updates (each writes the key's cells), the compare-and-swaps that failed
//! (each a cache line lost to another core between a read and a write, and an update started
//! again) and the events answered from a reservation.
//!
//! The counts exist only in a build with the contention counter:
//!
//! ```text
//! RUSTFLAGS="--cfg tollgate_contention" cargo run --release -p tollgate-sketch --example contention [EVENTS_PER_THREAD]
//! ```
//!
//! The rate printed beside them is one run's, on whatever machine runs it: a hint, not a
//! benchmark (the benches in `benches/` are).

#[cfg(tollgate_contention)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    use std::sync::Barrier;
    use std::time::{Duration, Instant};
    use tollgate_sketch::{RateSketch, Tick, contention};

    let events: u64 = match std::env::args().nth(1) {
        Some(arg) => arg.parse()?,
        None => 1_000_000,
    };
    println!("{events} events per thread, one 10 s window, 2 MiB, default depth and front");
    println!(
        "{:>7} {:>4} {:>8} {:>12} {:>12} {:>12} {:>10}",
        "threads", "keys", "reserve", "updates/obs", "failed/obs", "credited/obs", "M obs/s"
    );
    for keys in [1u64, 16] {
        for threads in [1u64, 2, 4] {
            for reserve in [None, Some(8)] {
                let sketch = RateSketch::builder()
                    .window(Duration::from_secs(10))
                    .memory_bytes(2 << 20)
                    .reserve_shift(reserve)
                    .seed(7)
                    .build()?;
                let names: Vec<[u8; 16]> = (0..keys)
                    .map(|k| {
                        let mut name = [0x20; 16];
                        name[..8].copy_from_slice(&k.to_le_bytes());
                        name
                    })
                    .collect();
                let start = Barrier::new(threads as usize + 1);
                contention::reset();
                let elapsed = std::thread::scope(|s| {
                    for t in 0..threads {
                        let (sketch, names, start) = (&sketch, &names, &start);
                        s.spawn(move || {
                            start.wait();
                            let now = Tick::from_nanos(1_000);
                            let mut sum = 0u64;
                            for i in 0..events {
                                // Each thread walks the keys from its own offset.
                                let key = &names[((i + t) % keys) as usize];
                                sum = sum.wrapping_add(sketch.observe(key, 1, now));
                            }
                            std::hint::black_box(sum);
                        });
                    }
                    start.wait();
                    let began = Instant::now();
                    // The scope joins the threads as it ends; the time includes them all.
                    began
                });
                let elapsed = elapsed.elapsed();
                let counts = contention::snapshot();
                let observes = (threads * events) as f64;
                println!(
                    "{:>7} {:>4} {:>8} {:>12.4} {:>12.4} {:>12.4} {:>10.1}",
                    threads,
                    keys,
                    reserve.map_or("off".to_string(), |s| format!("1/2^{s}")),
                    counts.updates as f64 / observes,
                    counts.failed_swaps as f64 / observes,
                    counts.credited as f64 / observes,
                    observes / elapsed.as_secs_f64() / 1e6,
                );
            }
        }
    }
    Ok(())
}

#[cfg(not(tollgate_contention))]
fn main() {
    eprintln!(
        "the contention counter is compiled only with RUSTFLAGS=\"--cfg tollgate_contention\"; \
         run: RUSTFLAGS=\"--cfg tollgate_contention\" cargo run --release -p tollgate-sketch \
         --example contention"
    );
}
