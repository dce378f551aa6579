//! A fixed-memory, lock-free, sliding-window Count-Min sketch with a Bloom front: counts events
//! for millions of keys (source addresses, prefixes, anything as bytes) in memory fixed at
//! build, and tells for each key how many events it had in the last window, never less than
//! the truth.
//!
//! ```
//! use std::time::Duration;
//! use tollgate_sketch::{RateSketch, Tick};
//! let sketch = RateSketch::builder()
//!     .window(Duration::from_secs(10))
//!     .memory_bytes(2 << 20)      // the whole budget: every window, counters and Bloom front
//!     .build()?;                  // bad sizes are an error, not a panic
//! let now = Tick::from_nanos(1_000_000);
//! let est: u64 = sketch.observe(b"any key bytes", 1, now); // counts, returns the estimate
//! let peek: u64 = sketch.estimate(b"any key bytes", now);  // the same estimate, counting nothing
//! assert_eq!((est, peek), (1, 1));
//! assert!(sketch.memory_bytes() <= 2 << 20);
//! # Ok::<(), tollgate_sketch::BuildError>(())
//! ```
//!
//! # What it promises
//! - **Never below the truth.** A key's estimate is at least its true count over the sliding
//!   window (single-threaded and under concurrency; property tests and loom models check it).
//!   A limiter that refuses when `observe(..) > limit` therefore never lets a key through more
//!   than `limit` times per sliding window: being over the limit is always seen.
//! - **Above it by a stated amount.** The estimate exceeds the truth by at most
//!   [`RateSketch::overcount_bound`] with the probability [`Stats::confidence`], plus what
//!   threads hold of a hot key in reservations: at most `P * estimate / 2^s` with `P` threads
//!   observing it (1/256 of the estimate per thread at the default; "Many cores" below). A key
//!   under its limit can be refused only when its headroom is smaller than that: size the
//!   sketch so the bound stays well under your smallest limit (below).
//! - **Fixed memory.** Everything is allocated by [`Builder::build`];
//!   [`RateSketch::memory_bytes`] is exact, whatever the number of keys.
//! - **No lock.** [`RateSketch::observe`] takes `&self`: share one sketch between threads with an
//!   `Arc` (or a reference). No lock, allocation, system call or log per event.
//! - **Time is an argument.** Every call takes `now`; [`MonotonicClock`] for services,
//!   [`ManualClock`] for tests and replays.
//!
//! # As a rate limiter
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use tollgate_sketch::{Clock, ManualClock, RateSketch, Tick};
//!
//! const LIMIT: u64 = 3; // requests per sliding 10 s
//! let sketch = Arc::new(
//!     RateSketch::builder().window(Duration::from_secs(10)).memory_bytes(1 << 20).build()?,
//! );
//! let clock = ManualClock::new(Tick::ZERO);
//! let allow = |client: &[u8], now| sketch.observe(client, 1, now) <= LIMIT;
//!
//! let verdicts: Vec<bool> = (0..5).map(|_| allow(b"203.0.113.7", clock.now())).collect();
//! assert_eq!(verdicts, [true, true, true, false, false]);
//! assert!(allow(b"198.51.100.1", clock.now())); // another client has its own count
//!
//! // Twenty seconds on, the window has slid past those requests.
//! clock.advance(Duration::from_secs(20));
//! assert!(allow(b"203.0.113.7", clock.now()));
//! # Ok::<(), tollgate_sketch::BuildError>(())
//! ```
//!
//! Runnable programs, each ends by itself:
//! `cargo run -p tollgate-sketch --example axum_limit` (a per-client limit in an axum / tower
//! service, 429 with `Retry-After` and the `RateLimit-*` headers) and
//! `cargo run -p tollgate-sketch --example shared_counter` (four threads counting into one
//! sketch through an `Arc`, every estimate checked against the exact count).
//!
//! # How it counts
//! - **Windows.** Window `k` covers `[kT, (k+1)T)`. At time `t` in window `k` the estimate is
//!   `count_k + count_{k-1} * (1 - (t - kT) / T)`, the previous share rounded up (the sliding
//!   window counter of HAProxy and Cloudflare).
//! - **Counters.** `depth` rows of `width` cells, Count-Min with conservative update. Each cell
//!   is one 64-bit word holding the current and the previous window's count (24 bits each) and
//!   the window it belongs to, so a key's estimate costs one cache line per row and windows
//!   rotate lazily, cell by cell, in the same compare-and-swap that counts: no clearing, no
//!   stall, no lock.
//! - **Front.** A register-blocked Bloom filter per window absorbs each key's first event, so
//!   one-event sources never reach the counters.
//!
//! # Error bound
//! An estimate never falls below the true sliding count (for ticks in order, or lagging by at
//! most the lag tolerance: see below). With `N` events in the sliding window
//! it exceeds it by more than `e / width * N` (plus the front weight) with probability at most
//! `e^-depth` (Cormode and Muthukrishnan 2005); conservative update (Estan and Varghese 2002)
//! keeps that bound and makes the usual error far smaller on skewed traffic. The sketch states
//! the bound for its current load: [`RateSketch::stats`] and [`RateSketch::overcount_bound`].
//! With a lag tolerance `L` (below) the stated bound also covers what a roll folds forward of
//! older windows' collisions (`L / T` of their `eps * N`, plus 2 for rounding); the fold of a
//! key's own count, up to `L / (T - L)` of it before the previous window, comes on top.
//!
//! # Tick order
//! Ticks may arrive out of order (threads read the clock, then race to count). An observe at
//! tick `t` returns at least the exact sliding count at `t` of the events stamped at or before
//! `t` (under concurrency: of those that finished before it began) whenever `t` lags the
//! newest tick counted by at most the lag tolerance `L` ([`Builder::lag_tolerance`], default
//! `T / 64`, at most `T / 2`). It costs the in-order reader a little: a cell rolled to a new
//! window keeps `ceil(L / T)` of the window it drops for lagging ticks, so the previous window
//! reads up to `L / (T - L)` of the counts before it as well (plus 1 for rounding), weighted by
//! its share. Beyond `L` a tick may read up to its share of the window before its own too
//! little, and a tick two windows behind the newest reads only what is left of its own window.
//! How it works is in the `pair` module's source docs.
//!
//! # Many cores
//! When every core counts the same hot key, a write per event to the key's cells would bounce
//! their cache lines between the cores, and every compare-and-swap that loses its line restarts
//! the key's update. So a thread that counts a key with `n >= 2^s` events in the window counts
//! `n >> s` more than it was given in the same update and keeps them as its own credit; the
//! key's next events on that thread are answered from the credit, reading the cells (which
//! hold them already) without writing (the sloppy counters of Boyd-Wickizer et al., "An
//! Analysis of Linux Scalability to Many Cores", OSDI 2010). A hot key's cells are then written
//! about `2^s * (1 + ln(N / 2^s))` times per window (all threads together) instead of `N`.
//! A credit answers only events of its own sketch, key and window, so estimates still never
//! fall below the truth; unspent credits are overcount, at most `P * estimate / 2^s` for `P`
//! threads, and the events they stand for are tallied in `N` (so `eps * N` covers their
//! collisions). Keys below `2^s` events in the window read exactly as without. A thread keeps
//! its credits in a table of its own (256 entries, 8 KiB); where more keys are past `2^s` than
//! it holds, an entry stays with its key for the window against colder keys, so the hottest
//! keep theirs. [`Builder::reserve_shift`] sets `s` (default 8); `None` turns reservations off. The `reserve`
//! module's source docs have the argument.
//!
//! # What the front buys
//! Measured with the accuracy tool (`benches/accuracy`, 8 MiB, one-event keys): at 1 M keys the
//! front holds them (fill 0.55) and the mean overcount is 0.12 against 1.08 for the same budget
//! without a front; at 100 M keys it is saturated (fill 1.0) and its 12.5% share of memory
//! costs the counters: 194 against 173. `front_share(0.0)` builds the plain sketch;
//! [`Stats::front_fill`] says which side of that line a running sketch is on.
//!
//! # Sizing
//! Each counter cell costs 8 bytes and serves both windows. The bound says
//! `width >= e * N / allowed_error`: for a 10 s window with 5 M events and an error of 100
//! events, `width >= 136,000`, i.e. about 4.4 MiB at depth 4. The memory to ask for is then
//! `8 * depth * width / (1 - front_share)` (the front takes 1/8 by default) plus about 5 KiB of
//! bookkeeping, plus 128 KiB from 8 MiB up for the table of keys at their cap (see
//! [`Builder::hot_keys_bytes`]); `depth` sets the confidence, `1 - e^-depth`
//! (98.2% at the default 4).
//! Skewed traffic with conservative update does much better than the bound; the accuracy
//! table in the README gives measured figures. A count per window saturates at
//! [`RateSketch::max_count`] (16,777,215): limits above that need a coarser weight (KiB
//! instead of bytes). A running sketch states its bound for the load it has
//! ([`RateSketch::stats`]), so undersizing shows before it hurts:
//!
//! ```
//! use std::time::Duration;
//! use tollgate_sketch::{RateSketch, Tick};
//!
//! // Up to 100,000 events per 10 s window, at most 50 events of overcount.
//! let (events, error, depth) = (100_000.0_f64, 50.0_f64, 4);
//! let width = (std::f64::consts::E * events / error).ceil();            // 5,437 cells a row
//! let bytes = (8.0 * depth as f64 * width / (1.0 - 0.125)) as usize + (16 << 10);
//! let sketch = RateSketch::builder()
//!     .window(Duration::from_secs(10))
//!     .depth(depth)
//!     .memory_bytes(bytes)                                              // about 215 KiB
//!     .build()?;
//! assert!(sketch.width() as f64 >= width);
//! let now = Tick::from_nanos(1);
//! for i in 0..100_000u32 {
//!     let _ = sketch.observe(&(i % 20_000).to_le_bytes(), 1, now);
//! }
//! let stats = sketch.stats(now);
//! assert_eq!(stats.events_current, 100_000);
//! // e * N / width, plus the front's weight and 2 for rounding.
//! assert!(stats.overcount_bound <= 50 + 1 + 2, "{stats:?}");
//! assert!(stats.confidence > 0.98);
//! # Ok::<(), tollgate_sketch::BuildError>(())
//! ```

#![warn(missing_docs)]

mod bloom;
mod builder;
mod clock;
mod concurrency;
#[cfg(tollgate_contention)]
pub mod contention;
mod count_min;
mod error;
mod hash;
mod hot;
mod memory;
mod pair;
mod reserve;
mod sketch;
mod snapshot;
mod stats;
mod sync;
mod tally;
mod window;

pub use builder::Builder;
pub use clock::{Clock, ManualClock, MonotonicClock, Tick};
pub use concurrency::ConcurrencySketch;
pub use error::{BuildError, MergeError};
pub use hash::KeyHash;
pub use sketch::{Moment, Prepared, RateSketch};
pub use snapshot::{Shape, WindowSnapshot};
pub use stats::Stats;
