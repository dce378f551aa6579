//! Exact per-key counters: the truth every limiter is scored against, and the fixed-window
//! counter the sliding estimate is compared with.
//!
//! Both keep, for every key, its true event counts in the current and the previous window in a
//! `HashMap` (memory grows with the keys; that is the point of a sketch). The oracle's estimate
//! at time `t`, `elapsed = t - kT` into window `k`, is the sliding-window counter computed
//! exactly: `current + ceil(previous * (T - elapsed) / T)`, the ceiling of the exact rational.
//! The fixed window's estimate is `current` alone.

use std::collections::HashMap;

use crate::limiter::Limiter;

/// How an exact counter turns its two windows into an estimate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Interpolation {
    /// The previous window's remaining share is added: the sliding-window counter.
    Sliding,
    /// Only the current window counts.
    Fixed,
}

/// A key's exact counts.
#[derive(Clone, Copy, Debug)]
struct Counts {
    window: u64,
    current: u64,
    previous: u64,
}

/// An exact per-key window counter.
#[derive(Debug)]
pub(crate) struct Exact {
    window: u64,
    interpolation: Interpolation,
    keys: HashMap<u64, Counts>,
}

impl Exact {
    /// The oracle: exact counts, sliding interpolation, over windows of `window` nanoseconds.
    pub(crate) fn sliding(window: u64) -> Exact {
        Exact::new(window, Interpolation::Sliding)
    }

    /// The exact fixed-window counter: a key's count since the current window began.
    pub(crate) fn fixed(window: u64) -> Exact {
        Exact::new(window, Interpolation::Fixed)
    }

    fn new(window: u64, interpolation: Interpolation) -> Exact {
        assert!(window > 0, "a window has a length");
        Exact {
            window,
            interpolation,
            keys: HashMap::new(),
        }
    }
}

impl Limiter for Exact {
    fn observe(&mut self, key: u64, now: u64) -> u64 {
        let window = now / self.window;
        let counts = self.keys.entry(key).or_insert(Counts {
            window,
            current: 0,
            previous: 0,
        });
        if counts.window != window {
            let previous = if counts.window + 1 == window {
                counts.current
            } else {
                0
            };
            *counts = Counts {
                window,
                current: 0,
                previous,
            };
        }
        counts.current += 1;
        let remaining = (window + 1) * self.window - now;
        let share = match self.interpolation {
            Interpolation::Sliding => {
                let exact = u128::from(counts.previous) * u128::from(remaining);
                // At most `previous`, a u64.
                exact.div_ceil(u128::from(self.window)) as u64
            }
            Interpolation::Fixed => 0,
        };
        counts.current + share
    }

    fn name(&self) -> String {
        match self.interpolation {
            Interpolation::Sliding => "exact sliding (oracle)".into(),
            Interpolation::Fixed => "exact fixed window".into(),
        }
    }

    fn memory_bytes(&self) -> Option<usize> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oracle_slides_and_rounds_the_previous_share_up() {
        let mut oracle = Exact::sliding(10);
        for _ in 0..7 {
            oracle.observe(1, 3);
        }
        assert_eq!(oracle.observe(1, 15), 1 + 4); // 7 * 5/10 = 3.5 -> 4
        assert_eq!(oracle.observe(1, 19), 2 + 1); // 7 * 1/10 = 0.7 -> 1
        assert_eq!(oracle.observe(1, 20), 1 + 2); // window 1 is now the previous one: 2 events
        assert_eq!(oracle.observe(1, 45), 1); // two windows passed: nothing left
        assert_eq!(oracle.observe(2, 45), 1); // keys are independent
    }

    #[test]
    fn the_fixed_window_forgets_at_the_boundary() {
        let mut fixed = Exact::fixed(10);
        for _ in 0..7 {
            fixed.observe(1, 9);
        }
        assert_eq!(fixed.observe(1, 9), 8);
        assert_eq!(fixed.observe(1, 10), 1);
    }
}
