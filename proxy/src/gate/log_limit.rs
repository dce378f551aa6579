//! Rate-limited logging of rejections: under a flood, every refused connection would otherwise
//! write a log line, and the log would become the attacker's amplifier.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use prometheus_client::metrics::counter::Counter;

/// Lets at most `per_second` log lines through in each second; counts the rest.
#[derive(Debug)]
pub(crate) struct LogLimit {
    per_second: u64,
    start: Instant,
    /// The current second (since `start`) in the high 32 bits, lines written in it in the low.
    state: AtomicU64,
    suppressed: Counter,
}

impl LogLimit {
    /// A limit of `per_second` lines, counting suppressed lines in `suppressed`.
    #[must_use]
    pub(crate) fn new(per_second: u32, suppressed: Counter) -> LogLimit {
        LogLimit {
            per_second: u64::from(per_second),
            start: Instant::now(),
            state: AtomicU64::new(0),
            suppressed,
        }
    }

    /// Whether a line may be written now; if not, it is counted as suppressed.
    pub(crate) fn allow(&self) -> bool {
        self.allow_in(self.start.elapsed().as_secs())
    }

    /// [`LogLimit::allow`] for a line in `second` (whole seconds since the limit was made).
    fn allow_in(&self, second: u64) -> bool {
        let second = second & 0xFFFF_FFFF;
        // Relaxed: a log budget, not a synchronisation point; a rare extra line is harmless.
        let allowed = self
            .state
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |state| {
                let (at, used) = (state >> 32, state & 0xFFFF_FFFF);
                match (at == second, used < self.per_second) {
                    (false, _) => Some(second << 32 | 1),
                    (true, true) => Some(state + 1),
                    (true, false) => None,
                }
            })
            .is_ok()
            && self.per_second > 0;
        if !allowed {
            self.suppressed.inc();
        }
        allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_cut_to_the_budget_and_the_rest_counted() {
        let suppressed = Counter::default();
        let limit = LogLimit::new(5, suppressed.clone());
        let written = (0..100).filter(|_| limit.allow()).count();
        // All 100 calls fall in one second unless the test straddles a boundary.
        assert!((5..=10).contains(&written), "{written}");
        assert_eq!(suppressed.get(), 100 - written as u64);
    }

    /// How many of `calls` lines in `second` `limit` lets through.
    fn written(limit: &LogLimit, second: u64, calls: usize) -> usize {
        (0..calls).filter(|_| limit.allow_in(second)).count()
    }

    #[test]
    fn each_second_has_its_own_budget_exactly() {
        let suppressed = Counter::default();
        let limit = LogLimit::new(3, suppressed.clone());
        assert_eq!(written(&limit, 0, 10), 3);
        assert_eq!(suppressed.get(), 7);
        // The next second starts a new budget, of the same size.
        assert_eq!(written(&limit, 1, 10), 3);
        assert_eq!(written(&limit, 1, 1), 0);
        // A second far on (past 32 bits of seconds, which wrap) as well.
        assert_eq!(written(&limit, 7 + (1 << 32), 10), 3);
        assert_eq!(written(&limit, 7 + (1 << 32), 1), 0);
        assert_eq!(suppressed.get(), 7 + 7 + 1 + 7 + 1);
        // The second is compared whole, not by its low bits only.
        assert_eq!(written(&limit, 8 + (1 << 32), 1), 1);
        assert_eq!(written(&limit, 8 + (1 << 31), 1), 1);
    }

    #[test]
    fn a_budget_of_one_writes_one_line_and_of_zero_none() {
        let one = LogLimit::new(1, Counter::default());
        assert_eq!(written(&one, 5, 4), 1);
        assert_eq!(written(&one, 6, 4), 1);
        let suppressed = Counter::default();
        let none = LogLimit::new(0, suppressed.clone());
        assert_eq!(written(&none, 0, 4) + written(&none, 1, 4), 0);
        assert_eq!(suppressed.get(), 8);
    }
}
