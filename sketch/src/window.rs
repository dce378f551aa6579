//! Window arithmetic for the sliding-window counter.
//!
//! Time is cut into windows of length `T`; window `k` covers `[kT, (k+1)T)`. At time `t` inside
//! window `k` the estimate is the two-window interpolation HAProxy and Cloudflare use:
//!
//! ```text
//! estimate(t) = count_k + count_{k-1} * (1 - (t - kT) / T)
//! ```
//!
//! The previous window's share is rounded up, so the estimate is never below the same formula
//! computed exactly on the true counts.

use std::time::Duration;

use strength_reduce::StrengthReducedU64;

use crate::clock::Tick;

/// Where a tick falls: its window and how far into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Position {
    /// The window index `k = floor(t / T)`.
    pub(crate) index: u64,
    /// Nanoseconds left until the window ends, `(k+1)T - t`, in `1..=T`.
    pub(crate) remaining: u64,
}

/// The length of one window and the arithmetic on it.
///
/// Every observe divides by the window length twice (which window, how much of the previous
/// one still counts); a 64-bit `div` costs tens of cycles, so the length is kept as a
/// precomputed reciprocal (strength_reduce: a multiply and a shift per division, exact).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Windows {
    len: u64,
    divisor: StrengthReducedU64,
}

impl Windows {
    /// Windows of `len` nanoseconds; `len` must be non-zero (the builder checks).
    pub(crate) fn new(len: u64) -> Windows {
        debug_assert!(len > 0);
        let len = len.max(1);
        Windows {
            len,
            divisor: StrengthReducedU64::new(len),
        }
    }

    pub(crate) fn len(self) -> Duration {
        Duration::from_nanos(self.len)
    }

    pub(crate) fn len_nanos(self) -> u64 {
        self.len
    }

    pub(crate) fn position(self, now: Tick) -> Position {
        let t = now.as_nanos();
        let index = t / self.divisor;
        let remaining = self.len - (t - index * self.len);
        Position { index, remaining }
    }

    /// The sliding estimate from the current and previous window's counts at `at`.
    pub(crate) fn slide(self, at: Position, current: u64, previous: u64) -> u64 {
        current.saturating_add(self.share(at, previous))
    }

    /// `ceil(previous * remaining / T)`: the part of the previous window still inside the
    /// sliding window.
    pub(crate) fn share(self, at: Position, previous: u64) -> u64 {
        if previous == 0 {
            return 0;
        }
        match previous.checked_mul(at.remaining) {
            Some(product) => {
                let quotient = product / self.divisor;
                quotient + u64::from(quotient * self.len != product)
            }
            // Only with windows over ~18 minutes and huge counts; correct, just slower.
            None => {
                let wide = (u128::from(previous) * u128::from(at.remaining))
                    .div_ceil(u128::from(self.len));
                u64::try_from(wide).unwrap_or(u64::MAX)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_splits_time_into_windows() {
        let w = Windows::new(10);
        assert_eq!(
            w.position(Tick::from_nanos(0)),
            Position {
                index: 0,
                remaining: 10
            }
        );
        assert_eq!(
            w.position(Tick::from_nanos(9)),
            Position {
                index: 0,
                remaining: 1
            }
        );
        assert_eq!(
            w.position(Tick::from_nanos(10)),
            Position {
                index: 1,
                remaining: 10
            }
        );
        assert_eq!(w.position(Tick::from_nanos(u64::MAX)).index, u64::MAX / 10);
    }

    #[test]
    fn share_rounds_up_and_fades_out() {
        let w = Windows::new(10);
        let start = w.position(Tick::from_nanos(10));
        let mid = w.position(Tick::from_nanos(15));
        let end = w.position(Tick::from_nanos(19));
        assert_eq!(w.share(start, 7), 7);
        assert_eq!(w.share(mid, 7), 4); // 3.5 rounded up
        assert_eq!(w.share(end, 7), 1); // 0.7 rounded up
        assert_eq!(w.slide(mid, 2, 7), 6);
    }

    #[test]
    fn share_survives_huge_windows() {
        let w = Windows::new(u64::MAX / 2);
        let at = w.position(Tick::from_nanos(1));
        assert_eq!(w.share(at, u64::MAX / 4), u64::MAX / 4);
    }
}
