//! pingora-limits' `Rate` with its proportional estimate, replayed on the workload's clock.
//!
//! `pingora_limits::rate::Rate` reads `Instant::now()` itself, so a recorded workload cannot
//! be fed to it. This is its logic (pingora-limits 0.9.1, `src/rate.rs`) over its own
//! [`Estimator`]s, with the clock passed in:
//!
//! - two Estimators of 4 rows, red and blue; one collects the current interval, the other holds
//!   the previous one;
//! - time is whole milliseconds since construction; `maybe_reset` starts a new interval at the
//!   first call at least one interval after the last reset (so intervals begin at that call, not
//!   at multiples of the interval): it clears the previous Estimator and swaps the two, and if
//!   two intervals or more have passed it clears the other one too;
//! - `observe` is `maybe_reset` then `incr` on the current Estimator, and the estimate is
//!   `rate_with(key, PROPORTIONAL_RATE_ESTIMATE_CALC_FN)` times the interval in seconds, i.e.
//!   `curr + prev * (1 - fraction)` with `fraction = (past_ms % interval_ms) / interval_ms`.
//!
//! A caller limits with `observe` then `rate_with`, and that is what [`Limiter::observe`] does
//! here. The float estimate is rounded up: for a whole-number limit `L`, `ceil(x) > L` exactly
//! when `x > L`. Memory is what the counters hold: 2 Estimators x 4 rows x `slots` x 8 bytes.

use std::time::Duration;

use pingora_limits::estimator::Estimator;

use crate::limiter::Limiter;

/// Printed under tables with pingora rows: its hashes cannot be seeded, so they vary.
pub(crate) const UNSEEDED: &str = "pingora's Estimator hashes with ahash keys drawn at random per process: \
     its rows vary a little from run to run (ours use a fixed seed)";

/// Rows per Estimator, pingora's default (`HASHES` in `rate.rs`).
const HASHES: usize = 4;

/// Bytes per counter (`AtomicIsize`).
const COUNTER_BYTES: usize = 8;

/// pingora's `Rate`, driven by a simulated clock.
pub(crate) struct PingoraRate {
    red: Estimator,
    blue: Estimator,
    red_is_current: bool,
    interval: Duration,
    interval_ms: u64,
    last_reset_ms: u64,
    slots: usize,
}

impl std::fmt::Debug for PingoraRate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `Estimator` is not `Debug`: show the shape and the clock instead.
        f.debug_struct("PingoraRate")
            .field("slots", &self.slots)
            .field("interval", &self.interval)
            .field("last_reset_ms", &self.last_reset_ms)
            .finish_non_exhaustive()
    }
}

impl PingoraRate {
    /// A `Rate` over `interval` whose two Estimators together take `memory_bytes`.
    pub(crate) fn new(interval: Duration, memory_bytes: usize) -> PingoraRate {
        let slots = (memory_bytes / (2 * HASHES * COUNTER_BYTES)).max(1);
        PingoraRate {
            red: Estimator::new(HASHES, slots),
            blue: Estimator::new(HASHES, slots),
            red_is_current: true,
            interval,
            interval_ms: interval.as_millis() as u64,
            last_reset_ms: 0,
            slots,
        }
    }

    fn current(&self) -> &Estimator {
        if self.red_is_current {
            &self.red
        } else {
            &self.blue
        }
    }

    fn previous(&self) -> &Estimator {
        if self.red_is_current {
            &self.blue
        } else {
            &self.red
        }
    }

    /// `Rate::maybe_reset`: rotates if an interval has passed; returns the milliseconds since
    /// the last reset as they were before rotating.
    fn maybe_reset(&mut self, now_ms: u64) -> u64 {
        let past_ms = now_ms - self.last_reset_ms;
        if past_ms < self.interval_ms {
            return past_ms;
        }
        self.last_reset_ms = now_ms;
        self.previous().reset();
        self.red_is_current = !self.red_is_current;
        if past_ms >= self.interval_ms * 2 {
            // The one just swapped out of "current" is stale as well.
            self.previous().reset();
        }
        past_ms
    }

    /// `Rate::rate_with(key, PROPORTIONAL_RATE_ESTIMATE_CALC_FN)`, in events per second.
    fn proportional_rate(&mut self, key: u64, now_ms: u64) -> f64 {
        let past_ms = self.maybe_reset(now_ms);
        let (prev_samples, curr_samples) = if past_ms >= self.interval_ms * 2 {
            (0, 0)
        } else if past_ms >= self.interval_ms {
            (self.previous().get(key), 0)
        } else {
            (self.previous().get(key), self.current().get(key))
        };
        let fraction = (past_ms % self.interval_ms) as f64 / self.interval_ms as f64;
        let weighted = prev_samples as f64 * (1. - fraction) + curr_samples as f64;
        weighted / self.interval.as_secs_f64()
    }
}

impl Limiter for PingoraRate {
    fn observe(&mut self, key: u64, now: u64) -> u64 {
        let now_ms = now / 1_000_000;
        self.maybe_reset(now_ms);
        self.current().incr(key, 1);
        let estimate = self.proportional_rate(key, now_ms) * self.interval.as_secs_f64();
        // Counts are non-negative and far below 2^53: the cast is exact after `ceil`.
        estimate.ceil() as u64
    }

    fn name(&self) -> String {
        "pingora Rate (4 rows)".into()
    }

    fn memory_bytes(&self) -> Option<usize> {
        Some(2 * HASHES * self.slots * COUNTER_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn rotates_and_slides_like_pingora() {
        let mut rate = PingoraRate::new(Duration::from_secs(1), 1 << 16);
        assert_eq!(rate.memory_bytes(), Some(1 << 16));
        for i in 1..=10 {
            assert_eq!(rate.observe(7, 100 * MS), i);
        }
        // The next interval begins at the first call after 1 s, here at 1,200 ms; 1,700 ms is
        // half-way into it: 1 + 10 * 0.5.
        assert_eq!(rate.observe(7, 1_200 * MS), 1 + 10);
        assert_eq!(rate.observe(7, 1_700 * MS), 2 + 5);
        // Two intervals later both Estimators are cleared.
        assert_eq!(rate.observe(7, 4_000 * MS), 1);
    }
}
