//! The hook a cluster plugs into a policy: counts of the rest of the cluster for the keys
//! that matter, and a report of those keys as they are counted here.
//!
//! A limit shared by several proxies must see the traffic the others let through, but a
//! decision must never wait for the network. The filter therefore knows nothing of how counts
//! travel: it asks a [`Remote`] for what the rest of the cluster has counted (from a view the
//! remote keeps in memory) and tells it about every event that counts against a key whose
//! local estimate has reached [`Remote::threshold`] of its limit (a *suspect*). Keys below the
//! threshold cost one comparison; without a remote, one branch.

use std::fmt;
use std::time::Duration;

use tollgate_sketch::Tick;

use crate::counter::Counter;
use crate::key::LimitKey;
use crate::overlay::{ListEntry, ListKind};
use crate::rules::Cidr;

/// A suspect key as one decision sees it (see [`Remote::suspect`]).
#[derive(Clone, Copy, Debug)]
pub struct Suspect<'a> {
    /// The key.
    pub key: &'a LimitKey,
    /// The period of the limit it is counted under (also in the key; limits of a rule with one
    /// period and one prefix share the key and its count, and report each event once).
    pub per: Duration,
    /// [`crate::Rule::shape`] of the key's rule: nodes share a key's count only when their
    /// rules of that name count the same things.
    pub shape: u64,
    /// The local sliding estimate before this event, and its parts on demand.
    pub before: Before<'a>,
    /// The weight this event added (0 when nothing was counted, as in a recheck).
    pub weight: u64,
    /// When.
    pub now: Tick,
}

/// A suspect's local sliding estimate before an event ([`Before::estimate`]) and, computed
/// only when asked (a remote needs it once per key, when the key becomes a suspect), the part
/// of it each window holds ([`Before::split`]).
#[derive(Clone, Copy, Debug)]
pub struct Before<'a> {
    estimate: u64,
    counted: u64,
    key: &'a [u8],
    counter: &'a Counter,
    now: Tick,
}

/// A local sliding estimate split by window.
///
/// The sliding estimate is `current + previous * (1 - elapsed / period)`. Pushed to a cluster
/// as one current-window count it would weigh the previous window's share in full until the
/// window ends (and half of it for the next window); split, the share fades out of the others'
/// estimates no later than out of this node's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Split {
    /// Counted in the current window.
    pub current: u64,
    /// The previous window's share still inside the sliding window (already faded).
    pub previous: u64,
}

impl<'a> Before<'a> {
    /// The estimate `estimate` of `key` in `counter` at `now`, of which `counted` is the event
    /// being decided.
    pub(crate) fn new(
        estimate: u64,
        counted: u64,
        key: &'a [u8],
        counter: &'a Counter,
        now: Tick,
    ) -> Before<'a> {
        Before {
            estimate,
            counted,
            key,
            counter,
            now,
        }
    }

    /// The local sliding estimate before the event (the overcount included).
    #[must_use]
    pub fn estimate(&self) -> u64 {
        self.estimate.saturating_sub(self.counted)
    }

    /// [`Before::estimate`] split by window. Reads the sketch again: call it once per key,
    /// not per event.
    ///
    /// The sketch's overcount stays in (the split is of the estimate, which never falls below
    /// the true count): the stated bound is an upper bound that includes the key's own first
    /// event in a window (held by the Bloom front), and taking it off made three processes
    /// admit 1.40x a limit of 30 per 10 s instead of 1.07x. What remains of it makes the
    /// cluster stricter by at most that bound per node, never looser.
    #[must_use]
    pub fn split(&self) -> Split {
        let estimate = self.estimate();
        let current = self
            .counter
            .current_count(self.key, self.now)
            .saturating_sub(self.counted)
            .min(estimate);
        Split {
            current,
            previous: estimate - current,
        }
    }
}

/// What the rest of a cluster holds of a suspect key (see [`Remote::suspect`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rest {
    /// Counted by the others, as of the remote's last read.
    pub counted: u64,
    /// Likely added by the others since that read (a prediction): it counts towards a
    /// throttle, never towards starting a penalty.
    pub ahead: u64,
}

/// Counts from the rest of a cluster, for keys over the suspect threshold.
///
/// Implementations are called on the decide path: they must not block, allocate per call or
/// wait on the network (the proxy's answers from an in-memory view swapped in by a background
/// task).
pub trait Remote: Send + Sync + fmt::Debug {
    /// The fraction of a limit a key's local estimate must reach to be a suspect, in `(0, 1]`.
    fn threshold(&self) -> f64;

    /// Records `suspect` (when its weight is not 0) and returns what the rest of the cluster
    /// has counted for its key under its limit, as a sliding-window estimate at its `now` (0
    /// when unknown), and what it is likely to have added since.
    fn suspect(&self, suspect: &Suspect<'_>) -> Rest;

    /// This node has just put `key` (a penalty key: rule, penalty length, prefix, masked
    /// address) in a penalty of `length` at `now`: the rest of the cluster should refuse it
    /// too. Called once per penalty started, not per event; the default does nothing.
    fn penalty_started(&self, key: &LimitKey, length: Duration, now: Tick) {
        let _ = (key, length, now);
    }

    /// Whether another node holds `key` (a penalty key) in a penalty at `now`: one lookup in
    /// memory, called for every event a rule with a penalty counts. The default: never.
    fn penalised(&self, key: &LimitKey, now: Tick) -> bool {
        let _ = (key, now);
        false
    }

    /// This node has just added (or replaced) `entry` in its run-time lists (the admin's
    /// `POST /lists/...`, at `now`): the rest of the cluster should hold it too, until the
    /// same end. Called once per change, never per event, and never for entries the remote
    /// itself put there (see [`crate::RuntimeLists::merge`]) or that come from the config
    /// file. The default does nothing.
    fn list_entry_added(&self, entry: &ListEntry, now: Tick) {
        let _ = (entry, now);
    }

    /// This node has just removed `cidr`'s entry from its `kind` run-time list (the admin's
    /// `DELETE /lists/...`): the rest of the cluster should remove it too. The default does
    /// nothing.
    fn list_entry_removed(&self, kind: ListKind, cidr: Cidr, now: Tick) {
        let _ = (kind, cidr, now);
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::{Config, Event, Filter, Source, Transport, Verdict};

    /// Remembers what it was told; reports a fixed count for the rest of the cluster.
    #[derive(Debug, Default)]
    struct Fixed {
        rest: u64,
        ahead: u64,
        seen: Mutex<Vec<(u64, u64, Duration)>>,
    }

    impl Remote for Fixed {
        fn threshold(&self) -> f64 {
            0.5
        }

        fn suspect(&self, suspect: &Suspect<'_>) -> Rest {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            seen.push((suspect.before.estimate(), suspect.weight, suspect.per));
            Rest {
                counted: self.rest,
                ahead: self.ahead,
            }
        }
    }

    fn filter(remote: &Arc<Fixed>) -> Filter {
        let config = Config::parse(
            "[sketch]\nmemory = \"1MiB\"\n[[rule]]\nname = \"r\"\nlimits = [{ rate = \"10/10s\" }]\n",
        )
        .expect("valid");
        Filter::with_remote(config, Arc::clone(remote) as Arc<dyn Remote>).expect("fits")
    }

    fn event() -> Event {
        Event {
            source: Source::from(Ipv4Addr::new(192, 0, 2, 1)),
            transport: Transport::Tcp,
            bytes: 1,
        }
    }

    #[test]
    fn keys_below_the_threshold_are_not_reported_and_suspects_get_the_rest_added() {
        let remote = Arc::new(Fixed {
            rest: 5,
            ..Fixed::default()
        });
        let filter = filter(&remote);
        for _ in 0..4 {
            assert_eq!(filter.decide(&event(), Tick::ZERO).verdict, Verdict::Allow);
        }
        assert!(
            remote.seen.lock().unwrap().is_empty(),
            "below half the limit"
        );
        // The fifth event reaches the threshold: 5 here and 5 elsewhere is still 10.
        assert_eq!(filter.decide(&event(), Tick::ZERO).verdict, Verdict::Allow);
        let Verdict::Throttle(throttle) = filter.decide(&event(), Tick::ZERO).verdict else {
            panic!("6 here and 5 elsewhere is over 10");
        };
        assert_eq!(throttle.estimate, 11);
        let seen = remote.seen.lock().unwrap().clone();
        let per = Duration::from_secs(10);
        assert_eq!(seen, [(4, 1, per), (5, 1, per)]);
    }

    #[test]
    fn a_descriptor_key_is_reported_from_the_threshold_and_the_rest_counts_against_its_limit() {
        use crate::{Code, Descriptor, DescriptorConfig, DescriptorPolicy, Request};
        let remote = Arc::new(Fixed {
            rest: 5,
            ..Fixed::default()
        });
        let text = "domain: api\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 10}\n";
        let config = DescriptorConfig::parse(&[("api.yaml", text)]).expect("valid");
        let policy = DescriptorPolicy::new(&config, 1 << 20, None)
            .expect("fits")
            .with_remote(Arc::clone(&remote) as Arc<dyn Remote>);
        // A reload keeps the remote.
        let policy =
            DescriptorPolicy::new(&config, 1 << 20, Some((&policy, Tick::ZERO))).expect("fits");
        let request = Request {
            domain: "api".into(),
            descriptors: vec![Descriptor::of(&[("api_key", "k1")])],
            hits_addend: 0,
        };
        let decide = || policy.decide(&request, Tick::ZERO).expect("valid");
        let cluster = || {
            policy
                .explain(&request, Tick::ZERO)
                .expect("valid")
                .descriptors[0]
                .cluster
        };
        assert_eq!(cluster(), Some(0), "in a cluster, below its threshold");
        for _ in 0..4 {
            assert_eq!(decide().code, Code::Ok);
        }
        assert!(
            remote.seen.lock().unwrap().is_empty(),
            "below half the limit"
        );
        // 5 here and 5 elsewhere is still 10; 6 and 5 is over.
        let at_ten = decide();
        assert_eq!(
            (at_ten.code, at_ten.statuses[0].limit_remaining),
            (Code::Ok, 0)
        );
        let over = decide();
        assert_eq!(over.code, Code::OverLimit);
        assert!(over.statuses[0].duration_until_reset > Some(Duration::ZERO));
        let minute = Duration::from_secs(60);
        let seen = remote.seen.lock().unwrap().clone();
        assert_eq!(seen, [(4, 1, minute), (5, 1, minute)]);
        // `explain` adds the rest as `decide` does, and reports nothing to it.
        let why = policy.explain(&request, Tick::ZERO).expect("valid");
        let key = &why.descriptors[0];
        assert_eq!(
            (key.estimate, key.cluster, key.over, why.code),
            (6, Some(5), true, Code::OverLimit)
        );
        assert!(key.duration_until_reset > Some(Duration::ZERO));
        assert_eq!(remote.seen.lock().unwrap().last(), Some(&(6, 0, minute)));
    }

    #[test]
    fn a_predicted_rest_throttles_but_never_starts_a_penalty() {
        let remote = Arc::new(Fixed {
            ahead: 100,
            ..Fixed::default()
        });
        let config = Config::parse(
            "[sketch]\nmemory = \"1MiB\"\n[[rule]]\nname = \"r\"\nlimits = [{ rate = \"10/10s\" }]\n\
             penalty = \"60s\"\n",
        )
        .expect("valid");
        let filter =
            Filter::with_remote(config, Arc::clone(&remote) as Arc<dyn Remote>).expect("fits");
        for _ in 0..4 {
            assert_eq!(filter.decide(&event(), Tick::ZERO).verdict, Verdict::Allow);
        }
        // A suspect from the fifth event: 5 counted and 100 predicted is over 10.
        for _ in 0..3 {
            let verdict = filter.decide(&event(), Tick::ZERO).verdict;
            assert!(matches!(verdict, Verdict::Throttle(_)), "{verdict:?}");
        }
    }

    #[test]
    fn a_recheck_adds_the_rest_without_reporting_weight() {
        let remote = Arc::new(Fixed {
            rest: 100,
            ..Fixed::default()
        });
        let filter = filter(&remote);
        for _ in 0..5 {
            let _ = filter.decide(&event(), Tick::ZERO);
        }
        let policy = filter.policy();
        assert!(matches!(
            policy.recheck(&event(), Tick::ZERO).verdict,
            Verdict::Throttle(_)
        ));
        assert_eq!(remote.seen.lock().unwrap().last().map(|s| s.1), Some(0));
    }

    #[test]
    fn a_split_puts_the_current_window_apart_from_the_previous_share() {
        use crate::budget::{Counts, Share};
        let window = Duration::from_secs(10);
        let share = Share {
            counts: Counts::Limits,
            window,
            bytes: 1 << 20,
            named: false,
            reserves: false,
        };
        // 1 MiB is far above a sketch's least memory.
        let counter = Counter::from_parts(share, share.builder().build().unwrap(), Vec::new());
        let key = b"one source";
        let start = Tick::ZERO + window * 3;
        for _ in 0..40 {
            let _ = counter.observe(key, 1, start);
        }
        // A fifth into the next window, with 8 events in it (the last one being decided).
        let now = start + window + window / 5;
        let mut estimate = 0;
        for _ in 0..8 {
            estimate = counter.observe(key, 1, now);
        }
        let current = counter.current_count(key, now);
        assert!(
            current >= 7 && estimate > current + 20,
            "{current} {estimate}"
        );
        let before = Before::new(estimate, 1, key, &counter, now);
        assert_eq!(before.estimate(), estimate - 1);
        assert_eq!(
            before.split(),
            Split {
                current: current - 1,
                previous: estimate - current,
            }
        );
    }
}
