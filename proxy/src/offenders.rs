//! The current top offenders: the sources throttled most often, in fixed memory.
//!
//! The sketch counts every source but cannot list them (it keeps no keys). This keeps up to
//! `capacity` throttled sources with the Space-Saving algorithm (Metwally, Agrawal and El Abbadi,
//! "Efficient computation of frequent and top-k elements in data streams", 2005): a new source
//! takes the place of the entry with the smallest count and inherits that count as its error, so
//! any source throttled more than `total / capacity` times is on the list. Only throttles and
//! refusals are recorded, so the lock is taken on the rejection path, never on an allowed
//! connection.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

/// One listed source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Offender {
    /// The source address (after PROXY headers).
    pub source: IpAddr,
    /// Throttles and refusals counted for it (an overestimate by at most `error`).
    pub count: u64,
    /// How much of `count` may belong to sources it replaced.
    pub error: u64,
    /// The rule or reason of its latest rejection.
    pub last: String,
}

/// Space-Saving over rejected sources.
#[derive(Debug)]
pub struct Offenders {
    capacity: usize,
    entries: Mutex<HashMap<IpAddr, Offender>>,
}

impl Offenders {
    /// Tracks at most `capacity` sources.
    #[must_use]
    pub fn new(capacity: usize) -> Offenders {
        Offenders {
            capacity: capacity.max(1),
            entries: Mutex::new(HashMap::with_capacity(capacity + 1)),
        }
    }

    /// Records one rejection of `source` by `why`.
    pub fn record(&self, source: IpAddr, why: &str) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = entries.get_mut(&source) {
            entry.count += 1;
            if entry.last != why {
                why.clone_into(&mut entry.last);
            }
            return;
        }
        let mut inherited = 0;
        if entries.len() >= self.capacity {
            // A linear scan of at most `capacity` entries, on the rejection path only.
            if let Some(smallest) = entries.values().min_by_key(|e| e.count).map(|e| e.source) {
                inherited = entries.remove(&smallest).map_or(0, |e| e.count);
            }
        }
        entries.insert(
            source,
            Offender {
                source,
                count: inherited + 1,
                error: inherited,
                last: why.to_owned(),
            },
        );
    }

    /// The `n` most rejected sources, most first.
    #[must_use]
    pub fn top(&self, n: usize) -> Vec<Offender> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let mut listed: Vec<Offender> = entries.values().cloned().collect();
        listed.sort_by(|a, b| b.count.cmp(&a.count).then(a.source.cmp(&b.source)));
        listed.truncate(n);
        listed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heavy_sources_stay_listed_while_one_off_sources_churn() {
        let offenders = Offenders::new(8);
        for round in 0..1000u32 {
            offenders.record(IpAddr::from([10, 0, 0, 1]), "r");
            if round % 2 == 0 {
                offenders.record(IpAddr::from([10, 0, 0, 2]), "r");
            }
            // A stream of distinct sources seen once each.
            offenders.record(IpAddr::from(round.to_be_bytes()), "r");
        }
        let top = offenders.top(2);
        assert_eq!(top[0].source, IpAddr::from([10, 0, 0, 1]));
        assert_eq!(top[1].source, IpAddr::from([10, 0, 0, 2]));
        assert!(top[0].count >= 1000 && top[0].count - top[0].error <= 1000);
    }
}
