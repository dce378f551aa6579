//! The descriptor policy's counts taken out and put back: what the proxy's state file carries
//! for the rate-limit service, so a restart keeps a key over its limit refused.
//!
//! The same copy and the same migration as the address policy's (see the crate's `saved`
//! module): a sketch per unit (its window the unit's length), saved with its shape and seed;
//! restored in place where the unit and its memory share are unchanged, read alongside the new
//! sketch for three windows where the share changed, dropped where no rule uses the unit any
//! more. The sketch keys hold each rule's path, not its limit, so a rule whose path is
//! unchanged finds its counts again whatever its limit.

use tollgate_sketch::{BuildError, Tick};

use super::decision::DescriptorPolicy;
use crate::saved::{Restored, SavedKind, SavedSketch, restore, saved_counter};

impl DescriptorPolicy {
    /// Copies out every sketch's current and previous window at `now`, retired ones too (the
    /// consistency of [`crate::Policy::save`]). Allocates about the policy's memory.
    #[must_use]
    pub fn save(&self, now: Tick) -> Vec<SavedSketch> {
        self.counters
            .iter()
            .flat_map(|counter| saved_counter(counter, now))
            .collect()
    }

    /// This policy (fresh from [`DescriptorPolicy::new`]) holding the counts of `saved` (from
    /// [`DescriptorPolicy::save`], possibly of other files or memory) at `now`, in the saved
    /// policy's ticks; and what was restored.
    ///
    /// # Errors
    /// The sketch's [`BuildError`] if a unit's share is too small (it was not, to build this
    /// policy).
    ///
    /// # Examples
    /// ```
    /// use tollgate_filter::{Code, Descriptor, DescriptorConfig, DescriptorPolicy, Request};
    /// use tollgate_sketch::Tick;
    /// let text = "domain: api\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: hour, requests_per_unit: 1}\n";
    /// let config = DescriptorConfig::parse(&[("api.yaml", text)])?;
    /// let before = DescriptorPolicy::new(&config, 1 << 20, None)?;
    /// let request = Request {
    ///     domain: "api".into(),
    ///     descriptors: vec![Descriptor::of(&[("api_key", "k1")])],
    ///     hits_addend: 0,
    /// };
    /// let now = Tick::from_nanos(1);
    /// assert_eq!(before.decide(&request, now)?.code, Code::Ok);
    /// let saved = before.save(now);
    /// let (after, _) = DescriptorPolicy::new(&config, 1 << 20, None)?.restore(&saved, now)?;
    /// assert_eq!(after.decide(&request, now)?.code, Code::OverLimit);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn restore(
        mut self,
        saved: &[SavedSketch],
        now: Tick,
    ) -> Result<(DescriptorPolicy, Restored), BuildError> {
        let mut report = Restored::default();
        for counter in &mut self.counters {
            *counter = restore(counter.share(), saved, now, &mut report)?;
        }
        for sketch in saved {
            let needed = sketch.kind == SavedKind::Limits
                && self.units.iter().any(|u| u.duration() == sketch.period);
            if !needed {
                report.dropped.push(format!(
                    "descriptor sketch of {:?}: no rule has that unit any more",
                    sketch.period
                ));
            }
        }
        Ok((self, report))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Code, Descriptor, DescriptorConfig, Request};
    use super::*;

    fn config(limit: u32, unit: &str) -> DescriptorConfig {
        let text = format!(
            "domain: api\ndescriptors:\n  - key: api_key\n    rate_limit: {{unit: {unit}, requests_per_unit: {limit}}}\n"
        );
        DescriptorConfig::parse(&[("api.yaml", text.as_str())]).unwrap()
    }

    fn request(key: &str) -> Request {
        Request {
            domain: "api".into(),
            descriptors: vec![Descriptor::of(&[("api_key", key)])],
            hits_addend: 0,
        }
    }

    /// The key's estimate, checked within the stated bound of at least `counted`: a restore
    /// never reads less than the saved policy did.
    fn estimate(policy: &DescriptorPolicy, key: &str, now: Tick, counted: u64) -> u64 {
        let why = policy.explain(&request(key), now).unwrap();
        let (estimate, bound) = (
            why.descriptors[0].estimate,
            why.descriptors[0].overcount_bound,
        );
        assert!(
            (counted..=counted + bound).contains(&estimate),
            "{estimate} not within {counted} + {bound}"
        );
        estimate
    }

    #[test]
    fn counts_survive_a_restore_in_place_and_across_a_memory_change() {
        let now = Tick::from_nanos(1_000);
        let before = DescriptorPolicy::new(&config(3, "minute"), 1 << 20, None).unwrap();
        for _ in 0..5 {
            let _ = before.decide(&request("k1"), now).unwrap();
        }
        let saved = before.save(now);
        assert_eq!(saved.len(), 1, "one unit, one sketch");
        // Same files and memory: restored in place.
        let fresh = DescriptorPolicy::new(&config(3, "minute"), 1 << 20, None).unwrap();
        let (same, report) = fresh.restore(&saved, now).unwrap();
        assert_eq!((report.windows, report.retired), (1, 0), "{report:?}");
        estimate(&same, "k1", now, 5);
        // Exactly what it read before, for a key counted then and one first counted after
        // (the saved front is the restored sketch's own, not another node's: see
        // `RateSketch::restore_window`).
        let read = |policy: &DescriptorPolicy, key: &str| {
            policy.explain(&request(key), now).unwrap().descriptors[0].estimate
        };
        assert_eq!(read(&same, "k1"), read(&before, "k1"));
        for policy in [&same, &before] {
            let _ = policy.decide(&request("k3"), now).unwrap();
        }
        assert_eq!((read(&same, "k3"), read(&before, "k3")), (1, 1));
        assert_eq!(
            same.decide(&request("k1"), now).unwrap().code,
            Code::OverLimit
        );
        estimate(&same, "k2", now, 0);
        // Twice the memory and a new limit: read alongside, the key still over.
        let fresh = DescriptorPolicy::new(&config(4, "minute"), 2 << 20, None).unwrap();
        let (grown, report) = fresh.restore(&saved, now).unwrap();
        assert_eq!(report.retired, 1, "{report:?}");
        estimate(&grown, "k1", now, 5);
        assert_eq!(
            grown.decide(&request("k1"), now).unwrap().code,
            Code::OverLimit
        );
        // A unit no rule uses any more is dropped, and said.
        let fresh = DescriptorPolicy::new(&config(3, "hour"), 1 << 20, None).unwrap();
        let (other, report) = fresh.restore(&saved, now).unwrap();
        assert_eq!(report.dropped.len(), 1, "{report:?}");
        assert_eq!(estimate(&other, "k1", now, 0), 0);
    }
}
