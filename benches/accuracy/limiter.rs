//! The decision model every limiter is judged by, and the one loop that applies it.
//!
//! A limiter with a limit of `L` events per window `T` judges an event over the limit when its
//! sliding-window estimate *including that event* exceeds `L`. Every event is counted, over the
//! limit or not (a throttled attempt is still an attempt). Our sketch, pingora's `Rate`, the
//! exact oracle and the fixed-window counter all implement [`Limiter`] and are driven through
//! [`replay`], so each sees the same events in the same order and is judged by the same rule.

use tollgate_sketch::RateSketch;

/// Anything that counts events per key and returns an estimate.
pub(crate) trait Limiter {
    /// Counts one event of `key` at `now` (nanoseconds from the start of the run) and returns
    /// the key's sliding-window estimate including it, rounded up to a whole event.
    fn observe(&mut self, key: u64, now: u64) -> u64;

    /// What it is, for the tables.
    fn name(&self) -> String;

    /// Bytes of counting state it holds, if fixed.
    fn memory_bytes(&self) -> Option<usize>;

    /// Our sketch, if this is one, for the statistics it states about itself.
    fn sketch(&self) -> Option<&RateSketch> {
        None
    }
}

/// One event of a workload: a key, a time, and what the workload needs to score it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Event<T> {
    pub(crate) key: u64,
    /// Nanoseconds from the start of the run.
    pub(crate) at: u64,
    pub(crate) tag: T,
}

/// What a limiter said about one event.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Verdict {
    /// The estimate including the event.
    pub(crate) estimate: u64,
    /// `estimate > limit`.
    pub(crate) over: bool,
}

/// Feeds `events` to `limiter` in order and hands each event's verdict under `limit` to
/// `score`.
pub(crate) fn replay<L, T>(
    limiter: &mut L,
    limit: u64,
    events: impl IntoIterator<Item = Event<T>>,
    mut score: impl FnMut(&Event<T>, Verdict),
) where
    L: Limiter + ?Sized,
{
    for event in events {
        let estimate = limiter.observe(event.key, event.at);
        let over = estimate > limit;
        score(&event, Verdict { estimate, over });
    }
}

/// The time of the `i`-th of `n` events spread evenly over `span` nanoseconds from `start`.
pub(crate) fn spread(start: u64, span: u64, i: usize, n: usize) -> u64 {
    let offset = u128::from(span) * i as u128 / n.max(1) as u128;
    // `i < n`, so the offset is below `span`, a u64.
    start + offset as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts every event of every key together, so estimates are easy to predict.
    struct Total(u64);

    impl Limiter for Total {
        fn observe(&mut self, _key: u64, _now: u64) -> u64 {
            self.0 += 1;
            self.0
        }
        fn name(&self) -> String {
            "total".into()
        }
        fn memory_bytes(&self) -> Option<usize> {
            Some(8)
        }
    }

    #[test]
    fn over_means_the_estimate_including_the_event_exceeds_the_limit() {
        let events = (0..5).map(|i| Event {
            key: i,
            at: 0,
            tag: (),
        });
        let mut overs = Vec::new();
        replay(&mut Total(0), 3, events, |_, v| overs.push(v.over));
        assert_eq!(overs, [false, false, false, true, true]);
    }

    #[test]
    fn spread_fills_the_span_evenly_and_stays_inside() {
        let times: Vec<u64> = (0..4).map(|i| spread(100, 10, i, 4)).collect();
        assert_eq!(times, [100, 102, 105, 107]);
        assert_eq!(spread(0, u64::MAX, 9, 10), 16_602_069_666_338_596_453);
    }
}
