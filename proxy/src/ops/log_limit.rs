//! Rate-limited logging of rejections: under a flood, every refused connection would otherwise
//! write a log line, and the log would become the attacker's amplifier.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use prometheus_client::metrics::counter::Counter;

/// Lets at most `per_second` log lines through in each second; counts the rest.
#[derive(Debug)]
pub struct LogLimit {
    per_second: u64,
    start: Instant,
    /// The current second (since `start`) in the high 32 bits, lines written in it in the low.
    state: AtomicU64,
    suppressed: Counter,
}

impl LogLimit {
    /// A limit of `per_second` lines, counting suppressed lines in `suppressed`.
    #[must_use]
    pub fn new(per_second: u32, suppressed: Counter) -> LogLimit {
        LogLimit {
            per_second: u64::from(per_second),
            start: Instant::now(),
            state: AtomicU64::new(0),
            suppressed,
        }
    }

    /// Whether a line may be written now; if not, it is counted as suppressed.
    pub fn allow(&self) -> bool {
        let second = self.start.elapsed().as_secs() & 0xFFFF_FFFF;
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
}
