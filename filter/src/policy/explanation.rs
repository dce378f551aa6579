//! Why a source gets the verdict it gets: every list entry, rule, limit and penalty that
//! applies to it, read without counting anything (the admin's `/explain`).

use std::net::IpAddr;
use std::time::Duration;

use tollgate_sketch::Tick;

use super::{Listed, Policy, back_under};
use crate::Event;
use crate::key::{LimitKey, Source};
use crate::penalty::Penalty;
use crate::prefix::Prefix;
use crate::remote::{Before, Suspect};
use crate::rules::{Limit, Transport, Weight};
use crate::verdict::{Decision, LimitRef};

/// Everything that decides for one source at one moment (see [`Policy::explain`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Explanation {
    /// The source (IPv4-mapped IPv6 folded to IPv4).
    pub source: Source,
    /// The transport the rules were matched for.
    pub transport: Transport,
    /// The list entry that decides for it, if one does (the rules are then not consulted, but
    /// are still shown).
    pub listed: Option<Listed>,
    /// Every rule whose sources and protocol match, in file order.
    pub rules: Vec<RuleExplanation>,
    /// The decision an event of `transport` would get now (as [`Policy::peek`]: the event's
    /// weight added to every estimate, nothing counted, no penalty started).
    pub decision: Decision,
    /// Whether a cluster's counts are added (see [`crate::Remote`]).
    pub cluster: bool,
}

/// One rule as it applies to a source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleExplanation {
    /// The rule's index (as in [`LimitRef::rule`]).
    pub rule: usize,
    /// Its penalty, if it has one and enforces it (shadow rules do not).
    pub penalty: Option<PenaltyState>,
    /// Its limits, in file order.
    pub limits: Vec<LimitExplanation>,
}

/// A rule's penalty as it stands for a source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PenaltyState {
    /// The penalty's length.
    pub length: Duration,
    /// How long the source still serves it if it is serving it now (to within a millionth
    /// of the length); `None`: it is not.
    pub left: Option<Duration>,
}

/// One limit as it applies to a source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitExplanation {
    /// The rule and limit.
    pub at: LimitRef,
    /// The limit itself.
    pub limit: Limit,
    /// The prefix length the source is counted at.
    pub prefix: Prefix,
    /// The network counted: the source with the bits past `prefix` cleared.
    pub network: IpAddr,
    /// This node's sliding-window estimate: never below the true count, and above it by at
    /// most `overcount_bound` with high probability, plus at most `reserved_per_thread` for
    /// each thread counting into the filter (always).
    pub estimate: u64,
    /// The sketch's stated overcount now (`e * N / width` plus what its front may hide).
    pub overcount_bound: u64,
    /// The most that one thread's reservations add to `estimate` (a hot key's events counted
    /// ahead, see `tollgate_sketch::Builder::reserve_shift`): `ceil(estimate / 256)` per
    /// sketch of the limit; 0 for a limit of 32 or less (its cap, `EXACT_MULTIPLE` times it
    /// plus one, stops reservations before they start at 256) and for one that counts
    /// without them. With `P` threads counting, the estimate is at most
    /// `overcount_bound + P * reserved_per_thread` above the truth. A bound, not a count: a
    /// key with fewer than 256 events in each window holds no credit.
    pub reserved_per_thread: u64,
    /// What the rest of the cluster counted, as added to the estimate (0 while the key is
    /// below the cluster's suspect threshold); `None` without a cluster.
    pub cluster: Option<u64>,
    /// Whether an event now would be over the limit: the estimate (with the cluster's count)
    /// plus the event's own weight (1 for limits on events, none for limits on bytes, as an
    /// explained event carries none) is above it.
    pub over: bool,
    /// If over: how long until an event would fit, if the source sends nothing meanwhile (the
    /// sliding count's fade, see [`crate::Halves::back_under`]; never early when `capped`).
    pub retry_after: Option<Duration>,
    /// Whether the key's count reached its cap: the true count is then at least `estimate`,
    /// and `retry_after` is an upper bound (see [`crate::Throttle::capped`]).
    pub capped: bool,
}

impl Policy {
    /// Everything that decides for `source` on `transport` at `now`, counting nothing: the
    /// list entry that matches, and for every rule that matches, its limits' keys, estimates,
    /// overcount bounds and verdicts, and its penalty's time left.
    ///
    /// # Examples
    /// ```
    /// use tollgate_filter::{Config, Filter, Source, Transport, Verdict};
    /// use tollgate_sketch::Tick;
    /// let filter = Filter::new(Config::parse(r#"
    ///     [sketch]
    ///     memory = "1MiB"
    ///     [[rule]]
    ///     name = "per-network"
    ///     limits = [{ rate = "100/10s", ipv4_prefix = 24 }]
    /// "#)?)?;
    /// let why = filter.policy().explain(Source::new("192.0.2.7".parse()?), Transport::Tcp, Tick::ZERO);
    /// let limit = &why.rules[0].limits[0];
    /// assert_eq!((limit.network.to_string(), limit.prefix.len()), ("192.0.2.0".into(), 24));
    /// assert_eq!(why.decision.verdict, Verdict::Allow);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn explain(&self, source: Source, transport: Transport, now: Tick) -> Explanation {
        let mut rules = Vec::new();
        for (index, (rule, compiled)) in self.config.rules.iter().zip(&self.rules).enumerate() {
            if !rule.protocol.matches(transport)
                || (!compiled.sources.is_empty()
                    && compiled.sources.longest_match(source).is_none())
            {
                continue;
            }
            let penalty = compiled
                .penalty
                .filter(|_| !rule.shadow)
                .map(|(length, at)| Penalty {
                    length,
                    sketches: [&self.counters[at[0]], &self.counters[at[1]]],
                });
            let mut left: Option<Duration> = None;
            let mut limits = Vec::with_capacity(compiled.limits.len());
            for (limit_index, bound) in compiled.limits.iter().enumerate() {
                let limit = bound.limit;
                let prefix = source.pick(limit.ipv4_prefix, limit.ipv6_prefix);
                let key = LimitKey::limit(rule.id, limit.rate.per, source, prefix);
                let counter = &self.counters[bound.counter];
                let cap = bound.cap[usize::from(!source.addr().is_ipv4())];
                // Capped as the decisions count it: the plain estimate of a key past its cap
                // may read below the count the decisions act on.
                let estimate = counter.estimate_capped(key.as_bytes(), cap, now);
                let capped = estimate >= cap;
                // Weight 0: the rest of the cluster is asked, nothing is reported to it.
                let cluster = self.remote.as_ref().map(|shared| {
                    let rest = shared.with_rest(&limit, estimate, || Suspect {
                        key: &key,
                        per: limit.rate.per,
                        shape: compiled.shape,
                        before: Before::new(estimate, 0, key.as_bytes(), counter, now),
                        weight: 0,
                        now,
                    });
                    rest.counted.saturating_add(rest.ahead)
                });
                let total = estimate.saturating_add(cluster.unwrap_or(0));
                let own = match compiled.weight {
                    Weight::Events => 1,
                    Weight::Bytes => 0,
                };
                let over = total.saturating_add(own) > limit.rate.count;
                if let Some(penalty) = &penalty {
                    let key = LimitKey::penalty(rule.id, penalty.length, source, prefix);
                    if let Some(here) = penalty.time_left(&key, now) {
                        left = Some(left.map_or(here, |l| l.max(here)));
                    }
                }
                limits.push(LimitExplanation {
                    at: LimitRef {
                        rule: index,
                        limit: limit_index,
                    },
                    limit,
                    prefix,
                    network: source.masked(prefix),
                    estimate,
                    overcount_bound: counter.overcount_bound(now),
                    reserved_per_thread: counter.reserved_per_thread(key.as_bytes(), cap, now),
                    cluster,
                    over,
                    retry_after: over.then(|| {
                        let halves = counter.halves(key.as_bytes(), cap, now);
                        let target = limit.rate.count.saturating_sub(own);
                        back_under(halves, cluster.unwrap_or(0), target, &limit, now)
                    }),
                    capped,
                });
            }
            rules.push(RuleExplanation {
                rule: index,
                penalty: penalty.map(|p| PenaltyState {
                    length: p.length,
                    left,
                }),
                limits,
            });
        }
        let event = Event {
            source,
            transport,
            bytes: 0,
        };
        Explanation {
            source,
            transport,
            listed: self.listed(source, now),
            rules,
            decision: self.peek(&event, now),
            cluster: self.remote.is_some(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::overlay::ListKind;
    use crate::rules::Cidr;
    use crate::verdict::{DenyReason, Verdict};
    use crate::{Config, Filter};

    const CONFIG: &str = r#"
        [sketch]
        memory = "1MiB"
        [lists]
        deny = ["198.51.100.0/24"]
        [[rule]]
        name = "per-network"
        limits = [{ rate = "3/10s", ipv4_prefix = 24, ipv6_prefix = 64 }]
        [[rule]]
        name = "udp-only"
        protocol = "udp"
        limits = [{ rate = "5/1s" }]
        [[rule]]
        name = "banned"
        sources = ["203.0.113.0/24"]
        penalty = "60s"
        limits = [{ rate = "1/10s" }]
    "#;

    fn filter() -> Filter {
        Filter::new(Config::parse(CONFIG).expect("valid")).expect("fits")
    }

    fn source(text: &str) -> Source {
        Source::new(text.parse().expect("an address"))
    }

    fn tcp(filter: &Filter, text: &str, now: Tick) -> Verdict {
        let event = Event {
            source: source(text),
            transport: Transport::Tcp,
            bytes: 100,
        };
        filter.decide(&event, now).verdict
    }

    #[test]
    fn an_allowed_source_sees_its_network_estimate_and_bound_and_explaining_counts_nothing() {
        let filter = filter();
        let now = Tick::ZERO;
        for _ in 0..2 {
            assert_eq!(tcp(&filter, "192.0.2.7", now), Verdict::Allow);
        }
        let policy = filter.policy();
        let why = policy.explain(source("192.0.2.9"), Transport::Tcp, now);
        assert_eq!(why.listed, None);
        assert_eq!(why.decision.verdict, Verdict::Allow);
        // The UDP rule does not apply to TCP; the third rule's sources do not match.
        assert_eq!(why.rules.len(), 1);
        let limit = why.rules[0].limits[0];
        assert_eq!(limit.network, "192.0.2.0".parse::<IpAddr>().unwrap());
        assert_eq!(limit.prefix, Prefix::V4(24));
        assert!(limit.estimate >= 2 && limit.estimate <= 2 + limit.overcount_bound);
        assert!(!limit.over && limit.retry_after.is_none() && limit.cluster.is_none());
        assert_eq!(why.rules[0].penalty, None);
        let before = policy.estimates(source("192.0.2.9"), now);
        for _ in 0..100 {
            let _ = policy.explain(source("192.0.2.9"), Transport::Tcp, now);
        }
        assert_eq!(policy.estimates(source("192.0.2.9"), now), before);
        let udp = policy.explain(source("192.0.2.9"), Transport::Udp, now);
        assert_eq!(udp.rules.len(), 2);
    }

    /// At its limit a source's next event is throttled (the decision counts the event
    /// itself), and the explanation says so: what an event now would get, as deciding it
    /// does. One under the limit, the next event is allowed, and so says the explanation.
    #[test]
    fn at_its_limit_the_explained_verdict_is_the_next_event_s() {
        let filter = filter();
        let now = Tick::ZERO;
        for _ in 0..2 {
            assert_eq!(tcp(&filter, "192.0.2.7", now), Verdict::Allow);
        }
        let explain = || {
            filter
                .policy()
                .explain(source("192.0.2.7"), Transport::Tcp, now)
        };
        let below = explain();
        assert!(!below.rules[0].limits[0].over);
        assert_eq!(below.decision.verdict, Verdict::Allow);
        assert_eq!(tcp(&filter, "192.0.2.7", now), Verdict::Allow);
        let at = explain();
        let limit = at.rules[0].limits[0];
        assert_eq!((limit.estimate, limit.limit.rate.count), (3, 3));
        // The fourth event would fit once the estimate is at 2: a third of the way into
        // the next window of 10 s.
        assert!(limit.over, "{limit:?}");
        assert_eq!(
            limit.retry_after,
            Some(Duration::from_nanos(13_333_333_334))
        );
        let Verdict::Throttle(said) = at.decision.verdict else {
            panic!("{:?}", at.decision.verdict);
        };
        assert_eq!(said.retry_after, limit.retry_after.unwrap());
        let Verdict::Throttle(got) = tcp(&filter, "192.0.2.7", now) else {
            panic!("the fourth event is over the limit");
        };
        assert_eq!((said.at, said.estimate), (got.at, got.estimate));
        // Counted, the fourth event is in the estimate too: a fifth fits once 4 fade to 2.
        assert_eq!(got.retry_after, Duration::from_secs(15));
    }

    /// A limit is read with the cap of its key for the source's family: two limits of one
    /// period share an IPv4 source's /32 key, so both count it up to the larger cap (81),
    /// though an IPv6 source's /64 and /48 keys are counted apart (caps 17 and 81).
    #[test]
    fn a_limit_is_read_with_the_cap_of_its_key_for_the_sources_family() {
        let filter = Filter::new(
            Config::parse(
                "[sketch]\nmemory = \"1MiB\"\n[[rule]]\nname = \"r\"\nlimits = [\
                 { rate = \"2/10s\", ipv6_prefix = 64 }, { rate = \"10/10s\", ipv6_prefix = 48 }]\n",
            )
            .expect("valid"),
        )
        .expect("fits");
        let now = Tick::ZERO;
        for _ in 0..20 {
            let _ = tcp(&filter, "192.0.2.7", now);
        }
        let why = filter
            .policy()
            .explain(source("192.0.2.7"), Transport::Tcp, now);
        let strict = why.rules[0].limits[0];
        assert_eq!(strict.estimate, 20, "{strict:?}");
        assert!(strict.over && !strict.capped, "{strict:?}");
        // The point query reads it with the same cap.
        let estimate = filter.policy().estimates(source("192.0.2.7"), now)[0];
        assert_eq!((estimate.estimate, estimate.capped), (20, false));
    }

    #[test]
    fn a_reload_keeps_the_cluster() {
        let config = || Config::parse(CONFIG).expect("valid");
        let filter = Filter::with_remote(config(), Arc::new(Rest::default())).expect("fits");
        filter.reload(config(), Tick::ZERO).expect("reloads");
        let why = filter
            .policy()
            .explain(source("192.0.2.1"), Transport::Tcp, Tick::ZERO);
        assert!(why.cluster);
        assert_eq!(why.rules[0].limits[0].cluster, Some(0));
    }

    #[test]
    fn a_throttled_ipv6_source_is_explained_by_its_64() {
        let filter = filter();
        let now = Tick::ZERO;
        for host in ["2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2:ffff::3"] {
            assert_eq!(tcp(&filter, host, now), Verdict::Allow);
        }
        assert!(matches!(
            tcp(&filter, "2001:db8:1:2::4", now),
            Verdict::Throttle(_)
        ));
        let why = filter
            .policy()
            .explain(source("2001:db8:1:2:abcd::9"), Transport::Tcp, now);
        let limit = why.rules[0].limits[0];
        assert_eq!(limit.network, "2001:db8:1:2::".parse::<IpAddr>().unwrap());
        assert_eq!(limit.prefix, Prefix::V6(64));
        assert!(limit.estimate >= 4, "{}", limit.estimate);
        assert!(limit.over);
        assert!(limit.retry_after.is_some_and(|r| r > Duration::ZERO));
        let Verdict::Throttle(throttle) = why.decision.verdict else {
            panic!("{:?}", why.decision.verdict);
        };
        assert_eq!(throttle.at, limit.at);
        // Another /64 of the same /48 is untouched.
        let other = filter
            .policy()
            .explain(source("2001:db8:1:3::1"), Transport::Tcp, now);
        assert_eq!(other.decision.verdict, Verdict::Allow);
        assert!(!other.rules[0].limits[0].over);
    }

    #[test]
    fn a_penalised_source_sees_the_time_left() {
        let filter = filter();
        let start = Tick::ZERO + Duration::from_secs(100);
        assert_eq!(tcp(&filter, "203.0.113.5", start), Verdict::Allow);
        assert!(matches!(
            tcp(&filter, "203.0.113.5", start),
            Verdict::Throttle(_)
        ));
        let later = start + Duration::from_secs(15);
        let why = filter
            .policy()
            .explain(source("203.0.113.5"), Transport::Tcp, later);
        let banned = why.rules.iter().find(|r| r.rule == 2).expect("applies");
        let penalty = banned.penalty.expect("the rule has a penalty");
        assert_eq!(penalty.length, Duration::from_secs(60));
        let left = penalty.left.expect("serving it");
        let expected = Duration::from_secs(45);
        assert!(
            left >= expected && left <= expected + Duration::from_millis(10),
            "{left:?}"
        );
        assert_eq!(
            why.decision.verdict,
            Verdict::Deny(DenyReason::Penalty { rule: 2 })
        );
        let after = start + Duration::from_secs(61);
        let why = filter
            .policy()
            .explain(source("203.0.113.5"), Transport::Tcp, after);
        let banned = why.rules.iter().find(|r| r.rule == 2).expect("applies");
        assert_eq!(banned.penalty.and_then(|p| p.left), None);
    }

    #[test]
    fn listed_sources_name_their_entry_from_the_file_or_run_time() {
        let filter = filter();
        let now = Tick::ZERO;
        let why = filter
            .policy()
            .explain(source("198.51.100.20"), Transport::Tcp, now);
        let listed = why.listed.expect("in the file's deny list");
        assert_eq!(listed.kind, ListKind::Deny);
        assert_eq!(listed.cidr, Cidr::parse("198.51.100.0/24").unwrap());
        assert_eq!(listed.entry, None, "from the file");
        assert_eq!(
            why.decision.verdict,
            Verdict::Deny(DenyReason::Listed(listed.cidr))
        );
        // A run-time allow of a longer network inside it wins, and says why and until when.
        let hour = Duration::from_secs(3600);
        let lists = filter.lists();
        lists
            .add(
                Cidr::parse("198.51.100.16/28").unwrap(),
                ListKind::Allow,
                hour,
                "monitoring".into(),
                now,
            )
            .unwrap();
        assert_eq!(tcp(&filter, "198.51.100.20", now), Verdict::Allow);
        let why = filter
            .policy()
            .explain(source("198.51.100.20"), Transport::Tcp, now);
        let listed = why.listed.expect("in the run-time allow list");
        assert_eq!(listed.kind, ListKind::Allow);
        let entry = listed.entry.expect("a run-time entry");
        assert_eq!(
            (entry.reason.as_str(), entry.expires),
            ("monitoring", now + hour)
        );
        // It survives a reload: the new policy shares the run-time lists.
        filter
            .reload(Config::parse(CONFIG).expect("valid"), now)
            .expect("reloads");
        assert!(Arc::ptr_eq(&lists, &filter.lists()));
        assert_eq!(tcp(&filter, "198.51.100.20", now), Verdict::Allow);
        // And stops applying when its time to live runs out: the file's entry is back.
        assert!(matches!(
            tcp(&filter, "198.51.100.20", now + hour),
            Verdict::Deny(DenyReason::Listed(_))
        ));
        let why = filter
            .policy()
            .explain(source("198.51.100.20"), Transport::Tcp, now + hour);
        assert_eq!(why.listed.and_then(|l| l.entry), None);
    }

    #[test]
    fn a_run_time_deny_applies_to_the_next_decision() {
        let filter = filter();
        let now = Tick::ZERO;
        assert_eq!(tcp(&filter, "2001:db8:9::1", now), Verdict::Allow);
        filter
            .lists()
            .add(
                Cidr::parse("2001:db8:9::/48").unwrap(),
                ListKind::Deny,
                Duration::from_secs(60),
                String::new(),
                now,
            )
            .unwrap();
        assert!(matches!(
            tcp(&filter, "2001:db8:9::1", now),
            Verdict::Deny(DenyReason::Listed(c)) if c == Cidr::parse("2001:db8:9::/48").unwrap()
        ));
        assert!(
            filter
                .policy()
                .estimates(source("2001:db8:9::1"), now)
                .is_empty()
        );
    }

    /// Reports a fixed count for the rest of a cluster and remembers the weights it was told.
    #[derive(Debug, Default)]
    struct Rest {
        seen: std::sync::Mutex<Vec<u64>>,
    }

    impl crate::Remote for Rest {
        fn threshold(&self) -> f64 {
            0.5
        }

        fn suspect(&self, suspect: &crate::Suspect<'_>) -> crate::Rest {
            self.seen.lock().unwrap().push(suspect.weight);
            crate::Rest {
                counted: 4,
                ahead: 0,
            }
        }
    }

    #[test]
    fn the_cluster_share_is_shown_for_suspects_and_nothing_is_reported() {
        let rest = Arc::new(Rest::default());
        let config = Config::parse(CONFIG).expect("valid");
        let filter =
            Filter::with_remote(config, Arc::clone(&rest) as Arc<dyn crate::Remote>).expect("fits");
        let now = Tick::ZERO;
        let why = filter
            .policy()
            .explain(source("192.0.2.1"), Transport::Tcp, now);
        assert!(why.cluster);
        assert_eq!(
            why.rules[0].limits[0].cluster,
            Some(0),
            "below the threshold"
        );
        assert_eq!(tcp(&filter, "192.0.2.1", now), Verdict::Allow);
        assert!(matches!(
            tcp(&filter, "192.0.2.1", now),
            Verdict::Throttle(_)
        ));
        let told = rest.seen.lock().unwrap().len();
        // 2 of 3 here is a suspect: the cluster's 4 are added, and the source is over.
        let why = filter
            .policy()
            .explain(source("192.0.2.1"), Transport::Tcp, now);
        let limit = why.rules[0].limits[0];
        assert_eq!(limit.cluster, Some(4));
        assert!(limit.over);
        assert!(matches!(why.decision.verdict, Verdict::Throttle(_)));
        let seen = rest.seen.lock().unwrap();
        assert!(
            seen[told..].iter().all(|&w| w == 0),
            "explain reported weight: {seen:?}"
        );
    }

    /// A policy whose one limit is large enough for a hot source to reserve (see
    /// `Share::builder`): 100,000 per 10 s, counted at a /32.
    const BIG: &str = "[sketch]\nmemory = \"1MiB\"\n[[rule]]\nname = \"big\"\n\
                       limits = [{ rate = \"100000/10s\", ipv4_prefix = 32 }]\n";

    /// The estimate never falls below the truth and exceeds it by at most the stated
    /// overcount plus `threads` reservation shares: the bound `/explain` states.
    fn within_the_stated_bound(limit: &LimitExplanation, truth: u64, threads: u64) {
        let most = truth
            .saturating_add(limit.overcount_bound)
            .saturating_add(threads.saturating_mul(limit.reserved_per_thread));
        assert!(
            limit.estimate >= truth && limit.estimate <= most,
            "truth {truth}, {limit:?}"
        );
    }

    /// One thread: after every event the explained estimate of a hot source is within the
    /// stated overcount plus one reservation share, and the share is needed (the source's
    /// events were counted ahead past the stated overcount alone).
    #[test]
    fn a_hot_source_reads_within_the_overcount_and_one_reservation_share() {
        let filter = Filter::new(Config::parse(BIG).expect("valid")).expect("fits");
        let now = Tick::ZERO;
        let mut ahead = false;
        for truth in 1..=3_000 {
            assert_eq!(tcp(&filter, "192.0.2.7", now), Verdict::Allow);
            let why = filter
                .policy()
                .explain(source("192.0.2.7"), Transport::Tcp, now);
            let limit = why.rules[0].limits[0];
            within_the_stated_bound(&limit, truth, 1);
            ahead |= limit.estimate > truth + limit.overcount_bound;
        }
        assert!(ahead, "the limit's sketch never counted ahead");
    }

    /// [`Filter::without_reservations`]: the same hot source is never counted ahead, and its
    /// explanation states no reservation share.
    #[test]
    fn a_filter_without_reservations_never_counts_ahead() {
        let filter =
            Filter::without_reservations(Config::parse(BIG).expect("valid")).expect("fits");
        let now = Tick::ZERO;
        for truth in 1..=3_000 {
            assert_eq!(tcp(&filter, "192.0.2.7", now), Verdict::Allow);
            let why = filter
                .policy()
                .explain(source("192.0.2.7"), Transport::Tcp, now);
            let limit = why.rules[0].limits[0];
            assert_eq!(limit.reserved_per_thread, 0, "{limit:?}");
            within_the_stated_bound(&limit, truth, 0);
        }
    }

    /// Threads sharing a hot source: the count after them all is within the stated overcount
    /// plus one reservation share per thread.
    #[test]
    fn threads_sharing_a_hot_source_read_within_one_reservation_share_each() {
        const THREADS: u64 = 4;
        const EACH: u64 = 2_000;
        let filter = Filter::new(Config::parse(BIG).expect("valid")).expect("fits");
        let now = Tick::ZERO;
        std::thread::scope(|scope| {
            for _ in 0..THREADS {
                scope.spawn(|| {
                    for _ in 0..EACH {
                        assert_eq!(tcp(&filter, "192.0.2.7", now), Verdict::Allow);
                    }
                });
            }
        });
        let why = filter
            .policy()
            .explain(source("192.0.2.7"), Transport::Tcp, now);
        let limit = why.rules[0].limits[0];
        assert!(limit.reserved_per_thread > 0, "{limit:?}");
        within_the_stated_bound(&limit, THREADS * EACH, THREADS);
    }
}
