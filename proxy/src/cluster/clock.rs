//! The cluster's clock: Redis's own time (`TIME`), read every sync round and carried between
//! rounds by this node's monotonic clock, so that every node cuts the same windows whatever
//! its wall clock says (NTP is not needed).
//!
//! A round sends `TIME` first in its pipeline; Redis answered somewhere between the ticks the
//! round was sent and its reply arrived, so taking the middle is off by at most half the round
//! trip. Each round then moves the origin (Redis's time at tick 0) to the new reading: the
//! *error* of the node's window edges is that half round trip plus how far the round moved
//! them (a Redis that failed over to a host with another clock, or a stalled reading, shows
//! up there). Beyond `max_clock_error` the node refuses to share (see the sync task).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tollgate_sketch::Tick;

/// Redis's time against this node's ticks.
#[derive(Debug)]
pub(crate) struct RedisClock {
    /// Redis's unix time in nanoseconds at tick 0 (the node's own wall clock until the first
    /// reading).
    origin_ns: AtomicU64,
}

/// What one reading found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reading {
    /// How far the reading moved the origin (signed nanoseconds; 0 when it agrees).
    pub(crate) correction_ns: i64,
    /// How far this node's window edges may be from Redis's: half the round trip plus the
    /// size of the correction.
    pub(crate) error: Duration,
}

impl RedisClock {
    /// A clock whose origin is `origin_ns` until the first reading.
    pub(crate) fn new(origin_ns: u64) -> RedisClock {
        RedisClock {
            origin_ns: AtomicU64::new(origin_ns),
        }
    }

    /// Redis's unix time in milliseconds at `now`.
    pub(crate) fn ms(&self, now: Tick) -> u64 {
        // Relaxed: a plain value; a decider that reads the origin a round late cuts windows
        // off by that round's correction, which is what `error` states.
        let origin = self.origin_ns.load(Ordering::Relaxed);
        origin.wrapping_add(now.as_nanos()) / 1_000_000
    }

    /// Redis's unix time in nanoseconds at tick 0.
    #[cfg(test)]
    pub(crate) fn origin_ns(&self) -> u64 {
        // Relaxed: as in `ms`.
        self.origin_ns.load(Ordering::Relaxed)
    }

    /// Moves the origin by `by_ns` (a node whose clock stepped), until the next reading.
    pub(crate) fn shift(&self, by_ns: i64) {
        // Relaxed: as in `ms`.
        let origin = self.origin_ns.load(Ordering::Relaxed);
        self.origin_ns
            .store(origin.wrapping_add(by_ns as u64), Ordering::Relaxed);
    }

    /// Takes a `TIME` reading: sent at tick `sent`, answered `redis_ns` (unix nanoseconds),
    /// received at tick `received`. Moves the origin to it and says by how much.
    pub(crate) fn read(&self, sent: Tick, received: Tick, redis_ns: u64) -> Reading {
        let (sent, received) = (sent.as_nanos(), received.as_nanos().max(sent.as_nanos()));
        let half_trip = (received - sent) / 2;
        let middle = sent + half_trip;
        let origin = redis_ns.wrapping_sub(middle);
        // Relaxed: as in `ms`; only the sync task stores.
        let before = self.origin_ns.swap(origin, Ordering::Relaxed);
        let correction_ns = origin.wrapping_sub(before) as i64;
        Reading {
            correction_ns,
            error: Duration::from_nanos(half_trip.saturating_add(correction_ns.unsigned_abs())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    #[test]
    fn windows_follow_redis_time_not_the_nodes_clock() {
        // The node's clock says 1000 s at tick 0; Redis says 1003 s (the node is 3 s late).
        let clock = RedisClock::new(1000 * SECOND);
        let sent = Tick::from_nanos(10 * SECOND);
        let received = Tick::from_nanos(10 * SECOND + 2_000_000);
        let reading = clock.read(sent, received, 1013 * SECOND + 1_000_000);
        assert_eq!(reading.correction_ns, 3 * SECOND as i64);
        assert_eq!(reading.error, Duration::from_millis(3001));
        // From then on, the node cuts Redis's windows.
        assert_eq!(clock.ms(Tick::from_nanos(20 * SECOND)), 1_023_000);
        // A second reading that agrees corrects nothing: only half its round trip is error.
        let again = clock.read(
            Tick::from_nanos(30 * SECOND),
            Tick::from_nanos(30 * SECOND + 4_000_000),
            1033 * SECOND + 2_000_000,
        );
        assert_eq!(again.correction_ns, 0);
        assert_eq!(again.error, Duration::from_millis(2));
    }

    #[test]
    fn a_redis_clock_that_steps_back_shows_as_error() {
        let clock = RedisClock::new(1000 * SECOND);
        let at = Tick::from_nanos(SECOND);
        let reading = clock.read(at, at, 1000 * SECOND);
        assert_eq!(reading.correction_ns, -(SECOND as i64));
        assert_eq!(reading.error, Duration::from_secs(1));
        assert_eq!(clock.origin_ns(), 999 * SECOND);
    }

    #[test]
    fn a_shift_moves_the_windows_by_as_much_until_the_next_reading() {
        let clock = RedisClock::new(1000 * SECOND);
        clock.shift(-2 * SECOND as i64);
        assert_eq!(clock.origin_ns(), 998 * SECOND);
        assert_eq!(clock.ms(Tick::ZERO), 998_000);
        clock.shift(5 * SECOND as i64);
        assert_eq!(clock.ms(Tick::ZERO), 1_003_000);
    }
}
