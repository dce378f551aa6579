//! Penalties: a source that goes over a limit of a rule with `penalty = P` is refused for `P`
//! from that event.
//!
//! A penalty is a *mark* under a key of its own ([`crate::LimitKey::penalty`]) in sketches of
//! its own (window `P`, no front), so no limit's events ever read as a penalty. A source
//! serves its penalty while its mark's estimate is at least [`THRESHOLD`] *and* more than
//! [`MARGIN`] times the sketch's stated overcount
//! ([`tollgate_sketch::RateSketch::overcount_bound`], `e * N / width`).
//!
//! The stated bound holds for a key with probability `1 - e^-depth` (98% at depth 4), too
//! weak for refusing people: marks are heavy, so one mark colliding with a key in every row
//! reads as a mark. The sketch derives its rows from one hash (double hashing), so two keys
//! whose hashes agree in two places collide in every row: about `m / width^2` for a key among
//! `m` marks (measured: 5e-6 with 60 marks at width 1,787), not `(m / width)^depth`. So each
//! mark is made under two keys hashed apart (the penalty key and its twin), and a penalty is
//! in force only if both read it: a source with no mark is refused only if both of its keys
//! collide in every row, about `(m / width^2)^2`, 1e-10 at the capacity below for a 64 KiB
//! sketch. Sketch noise does not refuse an innocent source.
//!
//! The mark's weight makes it last `P`. A mark of weight `w` made `a` into a window of length
//! `P` reads `w` until that window ends, then `ceil(w * (1 - b / P))` at `b` into the next one
//! (the sliding window counter). With `w = ceil(THRESHOLD * P / (P - a))` it falls below
//! [`THRESHOLD`] at `b` just past `a`: `P` after the mark, late by at most `2P / THRESHOLD`
//! (1/32768 of `P`), never early. So that `a` stays below `P / 2` (and `w` below twice
//! [`THRESHOLD`]), each penalty length has two sketches, the second read at ticks shifted by
//! `P / 2`; a mark goes to the one whose window it falls in the first half of, and a source is
//! refused if either holds its mark.
//!
//! A source serving a penalty is not marked again: if it is still over its limit when the
//! penalty ends, its next event starts a new one.
//!
//! Every mark adds to its sketch's load, and the stated overcount grows with the load (`e /
//! width` of it). A penalty's two keys weigh 2.8 times [`THRESHOLD`] on average, so past
//! about `width / 30` penalties per sketch in the sliding window (about one penalty per KiB
//! of the penalty's memory, its two sketches together) [`MARGIN`] times the bound passes a
//! mark's weight and penalties stop being in force: they end early rather than fall on
//! sources that went over no limit. The limits still apply.

use std::time::Duration;

use tollgate_sketch::Tick;

use crate::counter::Counter;
use crate::key::LimitKey;

/// The least estimate that counts as a penalty in force (see the module docs).
pub(crate) const THRESHOLD: u64 = 1 << 16;

/// How many times the stated overcount a penalty's estimate must exceed.
pub(crate) const MARGIN: u64 = 4;

/// One rule's penalty: its length and its two sketches, the second read at shifted ticks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Penalty<'a> {
    pub(crate) length: Duration,
    pub(crate) sketches: [&'a Counter; 2],
}

impl Penalty<'_> {
    /// Whether `key`'s penalty is in force at `now`.
    pub(crate) fn in_force(&self, key: &LimitKey, now: Tick) -> bool {
        (0..2).any(|phase| {
            let (sketch, at) = (self.sketches[phase], self.tick(phase, now));
            let estimate = sketch.estimate(key.as_bytes(), at);
            // The bound (a sum over the sketch's stripes) and the twin are read only when the
            // key itself reads a mark: a source with no penalty costs one estimate per sketch.
            if estimate < THRESHOLD {
                return false;
            }
            let bound = sketch.overcount_bound(at);
            in_force(estimate, bound) && in_force(sketch.estimate(key.twin().as_bytes(), at), bound)
        })
    }

    /// How long `key`'s penalty stays in force after `now` if nothing marks it again; `None`
    /// if it is not in force. Found by reading the marks at later ticks (counting nothing), to
    /// within a millionth of the length; a mark ends at most `2P / THRESHOLD` after `P`.
    pub(crate) fn time_left(&self, key: &LimitKey, now: Tick) -> Option<Duration> {
        if !self.in_force(key, now) {
            return None;
        }
        // In force at `now + low`, over at `now + high` (a mark lasts its length and a little).
        let (mut low, mut high) = (0u128, self.length.as_nanos().saturating_mul(2).max(1));
        let step = (self.length.as_nanos() / 1_000_000).max(1);
        while high - low > step {
            let mid = low + (high - low) / 2;
            let at = now + Duration::from_nanos(u64::try_from(mid).unwrap_or(u64::MAX));
            if self.in_force(key, at) {
                low = mid;
            } else {
                high = mid;
            }
        }
        Some(Duration::from_nanos(
            u64::try_from(high).unwrap_or(u64::MAX),
        ))
    }

    /// Starts `key`'s penalty at `now`.
    pub(crate) fn mark(&self, key: &LimitKey, now: Tick) {
        let into = |phase| offset(self.length, self.tick(phase, now));
        let phase = usize::from(into(1) < into(0));
        let weight = mark_weight(self.length, into(phase));
        let (sketch, at) = (self.sketches[phase], self.tick(phase, now));
        let _ = sketch.observe(key.as_bytes(), weight, at);
        let _ = sketch.observe(key.twin().as_bytes(), weight, at);
    }

    /// `now` as sketch `phase` reads it.
    fn tick(&self, phase: usize, now: Tick) -> Tick {
        if phase == 0 {
            now
        } else {
            now + self.length / 2
        }
    }
}

/// How far into its window of `length` the tick `at` is, in nanoseconds.
fn offset(length: Duration, at: Tick) -> u128 {
    u128::from(at.as_nanos()) % length.as_nanos().max(1)
}

/// The weight of a mark made `into` nanoseconds into a window of `length` (at most about
/// twice [`THRESHOLD`] for `into` up to half the window).
fn mark_weight(length: Duration, into: u128) -> u64 {
    let length = length.as_nanos().max(1);
    // `length - into` >= 1: `into` is a remainder of `length`.
    let weight = (u128::from(THRESHOLD) * length).div_ceil(length - into.min(length - 1));
    u64::try_from(weight).unwrap_or(u64::MAX)
}

/// Whether an estimate of `estimate` with a stated overcount of `bound` is a penalty in force.
fn in_force(estimate: u64, bound: u64) -> bool {
    estimate >= THRESHOLD && estimate > bound.saturating_mul(MARGIN)
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::budget::{Counts, Share};
    use crate::key::{RuleId, Source};
    use crate::prefix::Prefix;

    const MINUTE: Duration = Duration::from_secs(60);

    /// A penalty length's two sketches, 1 MiB each.
    fn sketches() -> [Counter; 2] {
        sketches_of(MINUTE)
    }

    fn key(last: u8) -> LimitKey {
        let source = Source::from(Ipv4Addr::new(192, 0, 2, last));
        LimitKey::penalty(RuleId::from_name("r"), MINUTE, source, Prefix::V4(32))
    }

    #[test]
    fn a_mark_at_a_window_start_weighs_the_threshold_and_is_in_force_for_its_length() {
        let counters = sketches();
        let penalty = Penalty {
            length: MINUTE,
            sketches: [&counters[0], &counters[1]],
        };
        // Window 10 starts here: the mark weighs exactly THRESHOLD, read with no slack.
        let start = Tick::ZERO + MINUTE * 10;
        penalty.mark(&key(1), start);
        assert_eq!(counters[0].estimate(key(1).as_bytes(), start), THRESHOLD);
        assert!(penalty.in_force(&key(1), start));
        assert!(penalty.in_force(&key(1), start + (MINUTE - Duration::from_nanos(1))));
        assert!(!penalty.in_force(&key(1), start + MINUTE + MINUTE / 1000));
        assert!(!penalty.in_force(&key(2), start));
        let left = penalty.time_left(&key(1), start).unwrap();
        assert!(left >= MINUTE && left <= MINUTE + MINUTE / 1000, "{left:?}");
    }

    #[test]
    fn a_mark_late_in_a_window_goes_to_the_shifted_sketch_and_stays_light() {
        let counters = sketches();
        let penalty = Penalty {
            length: MINUTE,
            sketches: [&counters[0], &counters[1]],
        };
        // 1 ms before window 11 starts: the shifted sketch, read 30 s ahead, is half-way
        // through its window, so the mark weighs about twice THRESHOLD there, not 60,000
        // times it in the plain one (which would saturate the counters, end the penalty early
        // and add a heavy load to the sketch's stated overcount).
        let at = Tick::ZERO + (MINUTE * 11 - Duration::from_millis(1));
        penalty.mark(&key(1), at);
        assert_eq!(counters[0].estimate(key(1).as_bytes(), at), 0);
        let weight = counters[1].estimate(key(1).as_bytes(), at + MINUTE / 2);
        assert!(
            (2 * THRESHOLD - THRESHOLD / 100..=2 * THRESHOLD).contains(&weight),
            "{weight}"
        );
        assert!(penalty.in_force(&key(1), at + (MINUTE - Duration::from_millis(1))));
        assert!(!penalty.in_force(&key(1), at + MINUTE + MINUTE / 1000));
    }

    #[test]
    fn a_mark_under_one_of_the_two_keys_is_no_penalty() {
        let counters = sketches();
        let penalty = Penalty {
            length: MINUTE,
            sketches: [&counters[0], &counters[1]],
        };
        let now = Tick::ZERO + MINUTE * 10;
        // What a collision in every row with another source's mark looks like: one key reads
        // heavy, its twin does not.
        let _ = counters[0].observe(key(1).as_bytes(), 4 * THRESHOLD, now);
        let _ = counters[1].observe(key(2).twin().as_bytes(), 4 * THRESHOLD, now);
        assert!(!penalty.in_force(&key(1), now));
        assert!(!penalty.in_force(&key(2), now));
        assert_eq!(penalty.time_left(&key(1), now), None);
    }

    #[test]
    fn a_mark_weighs_what_makes_it_last_its_length() {
        let minute = Duration::from_secs(60);
        let nanos = |secs: f64| (secs * 1e9) as u128;
        assert_eq!(mark_weight(minute, 0), THRESHOLD);
        assert_eq!(mark_weight(minute, nanos(30.0)), 2 * THRESHOLD);
        assert_eq!(mark_weight(minute, nanos(45.0)), 4 * THRESHOLD);
        // The sliding share of a mark made at `a`, read `b` into the next window: in force
        // until `a`, over within 1/32768 of the length after it.
        for a in [0.0, 7.5, 29.0, 30.0] {
            let weight = mark_weight(minute, nanos(a)) as f64;
            let share = |b: f64| (weight * (1.0 - b / 60.0)).ceil() as u64;
            assert!(in_force(share(a), 0), "a = {a}");
            assert!(!in_force(share(a + 60.0 / 32_768.0), 0), "a = {a}");
        }
    }

    #[test]
    fn the_threshold_stays_above_the_stated_overcount() {
        assert!(in_force(THRESHOLD, 0));
        assert!(!in_force(THRESHOLD - 1, 0));
        assert!(in_force(THRESHOLD, THRESHOLD / MARGIN - 1));
        assert!(!in_force(THRESHOLD, THRESHOLD / MARGIN));
        assert!(in_force(MARGIN * THRESHOLD + 1, THRESHOLD));
        assert!(!in_force(MARGIN * THRESHOLD, THRESHOLD));
        assert!(!in_force(u64::MAX, u64::MAX));
    }

    /// A penalty of `length` reading `counters`.
    fn penalty_of(length: Duration, counters: &[Counter; 2]) -> Penalty<'_> {
        Penalty {
            length,
            sketches: [&counters[0], &counters[1]],
        }
    }

    /// The two sketches of a penalty of `length`, 1 MiB each.
    fn sketches_of(length: Duration) -> [Counter; 2] {
        [false, true].map(|shifted| {
            let share = Share {
                counts: Counts::Penalties { shifted },
                window: length,
                bytes: 1 << 20,
                named: false,
                reserves: false,
            };
            // 1 MiB is far above a sketch's least memory.
            Counter::from_parts(share, share.builder().build().unwrap(), Vec::new())
        })
    }

    #[test]
    fn time_left_is_found_to_within_a_millionth_of_the_length() {
        // A length whose millionth (1,999 ns) is far below its remainder by a million
        // (500,000 ns): a search that stopped at the coarser step would end up to 0.5 ms late.
        let length = Duration::from_nanos(1_999_500_000);
        let counters = sketches_of(length);
        let penalty = penalty_of(length, &counters);
        let start = Tick::ZERO + length * 10;
        penalty.mark(&key(1), start);
        let left = penalty.time_left(&key(1), start).unwrap();
        // Over at `left`, still in force a millionth of the length before it.
        assert!(!penalty.in_force(&key(1), start + left), "{left:?}");
        assert!(
            penalty.in_force(&key(1), start + (left - length / 1_000_000)),
            "{left:?}"
        );
    }

    #[test]
    fn time_left_of_a_penalty_under_two_milliseconds_ends() {
        // A millionth of 1 ms is 1 ns, the least step: the search must stop when its
        // bounds are 1 ns apart (no midpoint between them), not loop there.
        let length = Duration::from_millis(1);
        let counters = sketches_of(length);
        let penalty = penalty_of(length, &counters);
        let start = Tick::ZERO + length * 10;
        penalty.mark(&key(1), start);
        let left = penalty.time_left(&key(1), start).unwrap();
        assert!(left >= length && left <= length + length / 1000, "{left:?}");
    }

    #[test]
    fn a_mark_weight_past_its_window_is_the_heaviest_not_a_division_by_zero() {
        // `offset` never gives `into >= length`; the weight is still defined there (the
        // divisor clamped to 1 ns), not a panic on the decide path.
        let length = Duration::from_secs(60);
        let heaviest = u64::try_from(length.as_nanos()).unwrap() * THRESHOLD;
        assert_eq!(mark_weight(length, length.as_nanos()), heaviest);
        assert_eq!(mark_weight(length, u128::MAX), heaviest);
    }
}
