//! When a sliding-window count is back under a limit if its source sends nothing more: the
//! one computation behind `/explain`'s "back under in", the `reply` action's `Retry-After`, the
//! `delay` action's rechecks and the kernel fast path's hold.
//!
//! The sliding window counter (the two-window interpolation HAProxy and Cloudflare use, see
//! `tollgate-sketch`'s `window.rs`) reads, at `t` in window `k` of length `T`,
//!
//! ```text
//! estimate(t) = current + ceil(previous * (T - (t - kT)) / T)
//! ```
//!
//! With no new event, `previous`'s share fades linearly to nothing by the end of window `k`;
//! then `current` becomes the previous window and fades over window `k + 1`. So the estimate
//! reaches a `target` within this window if `current <= target` (once `previous`'s share is
//! down to `target - current`), and otherwise only in the next one (once `current`'s share
//! is down to `target`). Both instants are solved exactly in whole nanoseconds, the sketch's
//! tick, with the share rounded up as the sketch rounds it: the answer is the first tick at
//! which the sketch itself would read `target` or less.

use std::time::Duration;

use tollgate_sketch::Tick;

/// A key's counts in the window `now` falls in and the one before it. A half whose count
/// reached the key's cap is not known past it (the sketch counts no further): it reads
/// [`Halves::UNKNOWN`], at least anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Halves {
    /// Counted in the window `now` falls in.
    pub current: u64,
    /// Counted in the window before.
    pub previous: u64,
}

impl Halves {
    /// A half past the cap: at least the cap, how far above is not known.
    pub const UNKNOWN: u64 = u64::MAX;

    /// The least `d` such that, with no further event, the sliding estimate at `now + d` of
    /// windows of `per` is at most `target`: `Duration::ZERO` if it already is.
    ///
    /// Exact (to the nanosecond) for known halves. An [`Halves::UNKNOWN`] half is taken as
    /// unbounded, so the time is never early: an unknown current window keeps the estimate
    /// over any target for the rest of it and the whole next one, an unknown previous one
    /// for the rest of this one.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use tollgate_filter::Halves;
    /// use tollgate_sketch::Tick;
    /// // 8 events at the start of a 4 s window, a limit of 5: a sixth event fits once the
    /// // estimate is down to 4, half-way through the next window.
    /// let counts = Halves { current: 8, previous: 0 };
    /// let per = Duration::from_secs(4);
    /// let now = Tick::from_nanos(0);
    /// assert_eq!(counts.back_under(4, per, now), Duration::from_secs(6));
    /// ```
    #[must_use]
    pub fn back_under(self, target: u64, per: Duration, now: Tick) -> Duration {
        // The sketch's windows are whole nanoseconds in a u64.
        let period = per.as_nanos().clamp(1, u128::from(u64::MAX));
        let rest = period - u128::from(now.as_nanos()) % period;
        let target = u128::from(target);
        let nanos = if u128::from(self.current) <= target {
            // This window: the previous window's share, ceil(previous * r / T) at `r`
            // nanoseconds before the window ends, is at most `room` once r <= room * T /
            // previous.
            let room = target - u128::from(self.current);
            if self.previous == 0 {
                0
            } else {
                let r = room * period / u128::from(self.previous);
                rest.saturating_sub(r)
            }
        } else {
            // The next window: the current count's share is at most `target` once the next
            // window has r <= target * T / current nanoseconds left.
            let r = target * period / u128::from(self.current);
            rest + (period - r)
        };
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The sliding estimate of exact counts at `t` (nanoseconds), windows of `period`, after
    /// `current` events in the window of `now` and `previous` in the one before and none
    /// after: the window formula as the sketch rounds it.
    fn exact(current: u64, previous: u64, period: u64, now: u64, t: u64) -> u64 {
        let k = now / period;
        let (this, before) = match t / period - k {
            0 => (current, previous),
            1 => (0, current),
            _ => (0, 0),
        };
        let rest = period - t % period;
        this + (u128::from(before) * u128::from(rest)).div_ceil(u128::from(period)) as u64
    }

    /// The first tick from `now` at which the exact estimate is at most `target`, found by
    /// stepping the clock one nanosecond at a time.
    fn oracle(current: u64, previous: u64, period: u64, now: u64, target: u64) -> u64 {
        (now..)
            .find(|&t| exact(current, previous, period, now, t) <= target)
            .expect("every count is gone two windows on")
            - now
    }

    proptest! {
        /// Exact: the first tick at which the window formula reads the target, however far
        /// into the window, with the share rounded as the sketch rounds it.
        #[test]
        fn the_time_is_the_first_tick_the_window_formula_reads_the_target(
            period in 1u64..400,
            now in 0u64..2_000,
            current in 0u64..60,
            previous in 0u64..60,
            target in 0u64..60,
        ) {
            let counts = Halves { current, previous };
            let got = counts.back_under(target, Duration::from_nanos(period), Tick::from_nanos(now));
            prop_assert_eq!(got.as_nanos(), u128::from(oracle(current, previous, period, now, target)));
        }

        /// From a sketch's counts, together at most `over` above the true ones: never before
        /// the true counts are at the target, and no later than they are `over` under it (the
        /// stated overcount's share of the fade).
        #[test]
        fn from_overcounted_halves_never_early_and_late_by_at_most_the_overcount(
            period in 1u64..400,
            now in 0u64..2_000,
            current in 0u64..60,
            previous in 0u64..60,
            target in 0u64..60,
            over in 0u64..8,
            split in 0u64..8,
        ) {
            let extra = split.min(over);
            let read = Halves { current: current + extra, previous: previous + (over - extra) };
            let got = read.back_under(target, Duration::from_nanos(period), Tick::from_nanos(now));
            let got = u64::try_from(got.as_nanos()).expect("small");
            prop_assert!(got >= oracle(current, previous, period, now, target));
            // Below `over` the overcount alone may hold the read over the target until the
            // end of the next window, when every count has slid out: the latest any answer is.
            let latest = match target.checked_sub(over) {
                Some(lower) => oracle(current, previous, period, now, lower),
                None => period - now % period + period,
            };
            prop_assert!(got <= latest, "{} > {}", got, latest);
        }

        /// A half past the cap is unbounded: never earlier than any count it may hold.
        #[test]
        fn an_unknown_half_is_never_early(
            period in 1u64..400,
            now in 0u64..2_000,
            current in 0u64..60,
            previous in 0u64..60,
            flood in 60u64..100_000,
            target in 0u64..60,
            which in 0u8..2,
        ) {
            let per = Duration::from_nanos(period);
            let (counts, truth) = if which == 0 {
                (Halves { current: Halves::UNKNOWN, previous }, oracle(flood, previous, period, now, target))
            } else {
                (Halves { current, previous: Halves::UNKNOWN }, oracle(current, flood, period, now, target))
            };
            let got = counts.back_under(target, per, Tick::from_nanos(now));
            prop_assert!(got.as_nanos() >= u128::from(truth));
        }
    }

    /// The issue's case: 8 events at the start of a 4 s window on a limit of 5 (a sixth
    /// event fits at an estimate of 4) are back under 6 s on, not the `period x (1 -
    /// limit / estimate)` = 1.5 s the old formula said all through the window.
    #[test]
    fn eight_events_on_five_per_four_seconds_fit_a_sixth_six_seconds_on() {
        let per = Duration::from_secs(4);
        let counts = Halves {
            current: 8,
            previous: 0,
        };
        assert_eq!(
            counts.back_under(4, per, Tick::from_nanos(0)),
            Duration::from_secs(6)
        );
        // Half a second on, half a second less.
        assert_eq!(
            counts.back_under(4, per, Tick::from_nanos(500_000_000)),
            Duration::from_millis(5_500)
        );
    }
}
