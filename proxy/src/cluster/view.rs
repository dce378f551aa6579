//! The view: what the rest of the cluster has counted for this node's suspects, as of the last
//! sync, swapped in whole each round and read by deciders with one hash lookup.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The rest of the cluster's counts of one suspect (cluster-wide counts less this node's own),
/// in the Redis-time windows they were read in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Rest {
    /// The window index (Redis-time milliseconds / period) of `current`.
    pub(crate) window: u64,
    /// The limit's period in milliseconds.
    pub(crate) period_ms: u64,
    /// Counted by the others in window `window`.
    pub(crate) current: u64,
    /// Counted by the others in window `window - 1`.
    pub(crate) previous: u64,
    /// Redis time of the read, in milliseconds.
    pub(crate) read_ms: u64,
    /// What the others added between the read before and this one (0 for a new suspect or
    /// across a window edge), and over how long.
    pub(crate) growth: u64,
    pub(crate) growth_ms: u64,
    /// This node's own sliding estimate when the counts were collected for the read.
    pub(crate) own: u64,
    /// Redis time of the suspect's first read, in milliseconds.
    pub(crate) first_ms: u64,
}

impl Rest {
    /// The others' sliding-window estimate at Redis time `now_ms`: the two-window
    /// interpolation the sketch uses, `current + previous * (1 - elapsed / period)`, moved on
    /// by however many windows have passed since the read (a window the view has not seen
    /// counts 0 until the next sync), plus what the others are likely to have added since the
    /// read, the larger of two predictions:
    ///
    /// - *by time*: they go on as between the last two reads, for at most as long as those
    ///   were apart;
    /// - *by share*: they grow in the proportion this node has since the counts were
    ///   collected (`grown`, its weight since then, against its own estimate `own` then), at
    ///   most doubling: a source spread over the nodes grows everywhere at once, and this
    ///   node sees its own part of that growth at every event, not one interval later. It is
    ///   what keeps a source that uses up its limit within one interval near the limit (the
    ///   prediction by time needs two reads of it first).
    ///
    /// A source spread over the nodes then meets the others' traffic of the sync interval in
    /// flight, not only what had reached Redis; one that stops elsewhere is over-counted until
    /// the next read.
    pub(crate) fn at(&self, now_ms: u64, grown: u64) -> tollgate_filter::Rest {
        let counted = self.counted_at(now_ms);
        let since = now_ms.saturating_sub(self.read_ms).min(self.growth_ms);
        let by_time = (u128::from(self.growth) * u128::from(since))
            .checked_div(u128::from(self.growth_ms))
            .map_or(0, |a| a as u64);
        let by_share = (u128::from(counted) * u128::from(grown))
            .checked_div(u128::from(self.own))
            .map_or(0, |a| a.min(u128::from(counted)) as u64);
        tollgate_filter::Rest {
            counted,
            ahead: by_time.max(by_share),
        }
    }

    /// Whether the read found none of the others' counts while the suspect is new (read
    /// first less than `sync_ms` before `now_ms`): the others may have become suspects at
    /// the same moment and pushed just after; an early round reads it again (rounds are a
    /// quarter interval apart at least, so a suspect costs at most four of them).
    pub(crate) fn unsettled(&self, now_ms: u64, sync_ms: u64) -> bool {
        self.current == 0 && self.previous == 0 && now_ms < self.first_ms.saturating_add(sync_ms)
    }

    /// `counted` (this window, the previous one) as a sliding estimate at `now_ms`, windows
    /// of `period_ms`.
    pub(crate) fn sliding(counted: [u64; 2], period_ms: u64, now_ms: u64) -> u64 {
        let period = period_ms.max(1);
        let left = u128::from(period - now_ms % period);
        counted[0] + (u128::from(counted[1]) * left / u128::from(period)) as u64
    }

    /// [`Rest::at`] without what the others are likely to have added since the read.
    fn counted_at(&self, now_ms: u64) -> u64 {
        let period = self.period_ms.max(1);
        let window = now_ms / period;
        let left = u128::from(period - now_ms % period);
        let fade = |count: u64| (u128::from(count) * left / u128::from(period)) as u64;
        match window.saturating_sub(self.window) {
            0 => self.current + fade(self.previous),
            1 => fade(self.current),
            _ => 0,
        }
    }
}

/// The suspects' hashes are xxh3 already: the map uses them as they are.
#[derive(Debug, Default)]
pub(crate) struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

/// Rest-of-cluster counts by suspect hash.
pub(crate) type View = HashMap<u64, Rest, BuildHasherDefault<Prehashed>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_fades_like_the_sketch_and_expires_after_two_windows() {
        let rest = Rest {
            window: 10,
            period_ms: 1000,
            current: 40,
            previous: 100,
            ..Rest::default()
        };
        let at = |ms| rest.at(ms, 0).counted;
        assert_eq!(at(10_000), 140);
        assert_eq!(at(10_250), 40 + 75);
        assert_eq!(at(11_000), 40);
        assert_eq!(at(11_500), 20);
        assert_eq!(at(12_000), 0);
    }

    #[test]
    fn the_others_are_taken_to_go_on_for_at_most_one_interval() {
        let rest = Rest {
            window: 10,
            period_ms: 1000,
            current: 40,
            previous: 0,
            read_ms: 10_200,
            growth: 10,
            growth_ms: 100,
            own: 0,
            first_ms: 0,
        };
        let at = |ms| {
            let rest = rest.at(ms, 0);
            (rest.counted, rest.ahead)
        };
        assert_eq!(at(10_200), (40, 0));
        assert_eq!(at(10_250), (40, 5));
        assert_eq!(at(10_300), (40, 10));
        // No further than the interval the growth was seen over.
        assert_eq!(at(10_900), (40, 10));
    }

    #[test]
    fn the_others_are_taken_to_grow_in_this_nodes_proportion_at_most_doubling() {
        let rest = Rest {
            window: 10,
            period_ms: 1000,
            current: 20,
            read_ms: 10_100,
            own: 10,
            ..Rest::default()
        };
        // Nothing added here since: nothing predicted there.
        assert_eq!(rest.at(10_150, 0).ahead, 0);
        // Half as much again here: half as much again there.
        assert_eq!(rest.at(10_150, 5).ahead, 10);
        assert_eq!(rest.at(10_150, 50).ahead, 20, "at most doubling");
        // A suspect new here (own 0): no share to go by.
        assert_eq!(Rest { own: 0, ..rest }.at(10_150, 5).ahead, 0);
        assert_eq!(Rest::sliding([10, 40], 1000, 10_250), 40);
    }

    #[test]
    fn only_a_new_suspect_the_others_have_not_counted_is_unsettled() {
        let rest = Rest {
            first_ms: 10_000,
            ..Rest::default()
        };
        assert!(rest.unsettled(10_099, 100));
        assert!(
            !rest.unsettled(10_100, 100),
            "read first a sync interval ago"
        );
        assert!(!rest.unsettled(10_500, 100));
        assert!(!Rest { current: 1, ..rest }.unsettled(10_050, 100));
        assert!(
            !Rest {
                previous: 1,
                ..rest
            }
            .unsettled(10_050, 100)
        );
    }

    #[test]
    fn the_view_hashes_a_suspect_hash_as_it_is() {
        let hash = |value: u64| {
            let mut hasher = Prehashed::default();
            hasher.write_u64(value);
            hasher.finish()
        };
        assert_eq!(hash(0x0123_4567_89ab_cdef), 0x0123_4567_89ab_cdef);
        assert_eq!(hash(7), 7);
        // Bytes (no suspect's hash comes as bytes) are mixed in, not dropped.
        let bytes = |bytes: &[u8]| {
            let mut hasher = Prehashed::default();
            hasher.write(bytes);
            hasher.finish()
        };
        assert_eq!(bytes(&[1, 2]), 0x0102);
        assert_ne!(bytes(&[1, 2]), bytes(&[1, 3]));
    }
}
