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
//! events, `width >= 136,000`, i.e. about 4.4 MiB at depth 4. Skewed traffic with conservative
//! update does much better than the bound; the accuracy table in the README gives measured
//! figures. A count per window saturates at [`RateSketch::max_count`] (16,777,215): limits above
//! that need a coarser weight (KiB instead of bytes).

#![warn(missing_docs)]

mod bloom;
mod builder;
mod clock;
mod concurrency;
mod count_min;
mod error;
mod hash;
mod pair;
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
pub use sketch::RateSketch;
pub use snapshot::{Shape, WindowSnapshot};
pub use stats::Stats;
