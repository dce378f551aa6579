//! A compiled policy: the config's lists and rules turned into lookup structures over shared
//! sketches, and the decision for one event.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tollgate_sketch::{BuildError, RateSketch, Stats, Tick};

use crate::config::Config;
use crate::key::{LimitKey, Source};
use crate::packet::{PacketInfo, parse_frame};
use crate::prefix::Prefix;
use crate::prefix_map::PrefixMap;
use crate::remote::{Remote, Suspect};
use crate::rules::{Cidr, Limit, Rule, Transport, Weight};
use crate::verdict::{Decision, DenyReason, LimitRef, Throttle, Verdict};

/// One event to decide on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// Where it came from.
    pub source: Source,
    /// Its transport.
    pub transport: Transport,
    /// Its size in bytes (what `weight = "bytes"` limits count).
    pub bytes: u64,
}

impl Event {
    /// The event a parsed frame stands for: its size is its byte weight.
    #[must_use]
    pub fn from_packet(packet: &PacketInfo) -> Event {
        Event {
            source: packet.source,
            transport: packet.protocol.into(),
            bytes: packet.frame_len as u64,
        }
    }
}

/// Where a source stands under one limit (see [`Policy::estimates`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitEstimate {
    /// The rule and limit.
    pub at: LimitRef,
    /// The limit itself.
    pub limit: Limit,
    /// The prefix the source is counted at under this limit.
    pub prefix: Prefix,
    /// The sliding-window estimate now (an upper bound of the true count, whp close to it).
    pub estimate: u64,
}

/// Why a checked config could not be made into a policy.
#[derive(Clone, Debug, PartialEq)]
pub enum PolicyError {
    /// The memory, split between the sketches the limits need, is too small for one of them.
    Memory {
        /// Sketches needed (one per distinct period and penalty).
        sketches: usize,
        /// The sketch's refusal.
        error: BuildError,
    },
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyError::Memory { sketches, error } => write!(
                f,
                "[sketch] memory split between {sketches} sketches (one per distinct period and \
                 penalty) is too small: {error}"
            ),
        }
    }
}

impl std::error::Error for PolicyError {}

/// A sketch for one window length, shared by every limit with that period.
#[derive(Debug)]
struct Counter {
    window: Duration,
    budget: usize,
    sketch: Arc<RateSketch>,
}

/// A rule made ready to decide with.
#[derive(Debug)]
struct Compiled {
    sources: PrefixMap<()>,
    /// Each limit with the index of its sketch.
    limits: Vec<(Limit, usize)>,
    /// The penalty sketch, if the rule has a penalty.
    penalty: Option<usize>,
}

/// An immutable policy: swap a new one in to reload (see [`crate::Filter`]).
#[derive(Debug)]
pub struct Policy {
    config: Config,
    lists: PrefixMap<(bool, Cidr)>,
    rules: Vec<Compiled>,
    counters: Vec<Counter>,
    /// The rest of a cluster, if this node is part of one.
    remote: Option<Shared>,
}

/// A remote and its suspect threshold, read once.
#[derive(Clone, Debug)]
struct Shared {
    remote: Arc<dyn Remote>,
    threshold: f64,
}

impl Policy {
    /// Builds the policy for `config`. Sketches of `previous` whose window length and memory
    /// share are unchanged are kept, with their counts: keys carry the rule's name, so the
    /// counters of every rule whose name is unchanged survive. So is `previous`'s remote.
    ///
    /// # Errors
    /// [`PolicyError::Memory`] if the memory is too small for the sketches needed.
    pub fn compile(config: Config, previous: Option<&Policy>) -> Result<Policy, PolicyError> {
        let mut windows: Vec<Duration> = Vec::new();
        let mut seen = HashSet::new();
        for rule in &config.rules {
            let periods = rule.limits.iter().map(|l| l.rate.per).chain(rule.penalty);
            for period in periods {
                if seen.insert(period) {
                    windows.push(period);
                }
            }
        }
        // Named periods get their share; the others split what is left evenly.
        let named: usize = config.periods.iter().map(|(_, size)| size).sum();
        let unnamed = windows
            .iter()
            .filter(|w| !config.periods.iter().any(|(p, _)| p == *w))
            .count();
        let even = config.memory.saturating_sub(named) / unnamed.max(1);
        let budget_of = |window: Duration| {
            config
                .periods
                .iter()
                .find(|(p, _)| *p == window)
                .map_or(even, |(_, size)| *size)
        };
        let mut counters = Vec::with_capacity(windows.len());
        for &window in &windows {
            let budget = budget_of(window);
            let kept = previous.and_then(|p| {
                p.counters
                    .iter()
                    .find(|c| c.window == window && c.budget == budget)
                    .map(|c| Arc::clone(&c.sketch))
            });
            let sketch = match kept {
                Some(sketch) => sketch,
                None => Arc::new(
                    RateSketch::builder()
                        .window(window)
                        .memory_bytes(budget)
                        .build()
                        .map_err(|error| PolicyError::Memory {
                            sketches: windows.len(),
                            error,
                        })?,
                ),
            };
            counters.push(Counter {
                window,
                budget,
                sketch,
            });
        }
        let index_of = |period: Duration| windows.iter().position(|&w| w == period);
        let rules = config
            .rules
            .iter()
            .map(|rule| Compiled {
                sources: networks(rule.sources.iter().map(|c| (*c, ()))),
                limits: rule
                    .limits
                    .iter()
                    // Every period was collected above: the lookup finds it.
                    .filter_map(|l| index_of(l.rate.per).map(|i| (*l, i)))
                    .collect(),
                penalty: rule.penalty.and_then(index_of),
            })
            .collect();
        // Deny entries go in last, so an identical network in both lists denies.
        let lists = networks(
            config
                .allow
                .iter()
                .map(|c| (*c, (false, *c)))
                .chain(config.deny.iter().map(|c| (*c, (true, *c)))),
        );
        Ok(Policy {
            config,
            lists,
            rules,
            counters,
            remote: previous.and_then(|p| p.remote.clone()),
        })
    }

    /// This policy, adding what `remote` reports the rest of a cluster counted to every key
    /// whose local estimate reaches `remote.threshold()` of a limit, and reporting those keys'
    /// events to it (see [`Remote`]).
    #[must_use]
    pub fn with_remote(self, remote: Arc<dyn Remote>) -> Policy {
        let threshold = remote.threshold();
        Policy {
            remote: Some(Shared { remote, threshold }),
            ..self
        }
    }

    /// The config this policy was built from.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Rule `index` (as in a [`LimitRef`]).
    #[must_use]
    pub fn rule(&self, index: usize) -> Option<&Rule> {
        self.config.rules.get(index)
    }

    /// Bytes held by the policy's sketches.
    #[must_use]
    pub fn memory_bytes(&self) -> usize {
        self.counters.iter().map(|c| c.sketch.memory_bytes()).sum()
    }

    /// Each sketch's report on itself (events, front fill, overcount bound), one per distinct
    /// period and penalty, for metrics.
    #[must_use]
    pub fn sketch_stats(&self, now: Tick) -> Vec<Stats> {
        self.counters.iter().map(|c| c.sketch.stats(now)).collect()
    }

    /// Where `source` stands under every limit of every rule whose sources it matches, counting
    /// nothing (the admin's point query). Empty if a list decides for it.
    #[must_use]
    pub fn estimates(&self, source: Source, now: Tick) -> Vec<LimitEstimate> {
        if self.lists.longest_match(source).is_some() {
            return Vec::new();
        }
        let mut found = Vec::new();
        for (index, (rule, compiled)) in self.config.rules.iter().zip(&self.rules).enumerate() {
            if !compiled.sources.is_empty() && compiled.sources.longest_match(source).is_none() {
                continue;
            }
            for (limit_index, (limit, counter)) in compiled.limits.iter().enumerate() {
                let prefix = source.pick(limit.ipv4_prefix, limit.ipv6_prefix);
                let key = LimitKey::new(rule.id, source, prefix);
                found.push(LimitEstimate {
                    at: LimitRef {
                        rule: index,
                        limit: limit_index,
                    },
                    limit: *limit,
                    prefix,
                    estimate: self.counters[*counter].sketch.estimate(key.as_bytes(), now),
                });
            }
        }
        found
    }

    /// Decides on one raw Ethernet frame at `now` (its size is its byte weight). A malformed or
    /// truncated frame is a verdict, `Deny(Malformed)`, never a panic or an error.
    pub fn decide_frame(&self, frame: &[u8], now: Tick) -> Decision {
        match parse_frame(frame) {
            Ok(packet) => self.decide(&Event::from_packet(&packet), now),
            Err(malformed) => Decision::of(Verdict::Deny(DenyReason::Malformed(malformed))),
        }
    }

    /// Decides on `event` at `now`, counting it against every limit of every rule it matches
    /// (throttled events count too: a source over its limit stays over while it keeps sending).
    pub fn decide(&self, event: &Event, now: Tick) -> Decision {
        self.judge(event, now, true)
    }

    /// The decision `event` would get at `now` if it had already been counted: every limit's
    /// estimate as it stands, counting nothing and starting no penalty. For an event decided
    /// before (a held connection, see the proxy's `delay` action) this says whether its source
    /// is back under its limits.
    pub fn recheck(&self, event: &Event, now: Tick) -> Decision {
        self.judge(event, now, false)
    }

    fn judge(&self, event: &Event, now: Tick, count: bool) -> Decision {
        let source = event.source;
        if let Some((_, (deny, cidr))) = self.lists.longest_match(source) {
            return Decision::of(if *deny {
                Verdict::Deny(DenyReason::Listed(*cidr))
            } else {
                Verdict::Allow
            });
        }
        let mut decision = Decision::of(Verdict::Allow);
        for (index, (rule, compiled)) in self.config.rules.iter().zip(&self.rules).enumerate() {
            if !rule.protocol.matches(event.transport)
                || (!compiled.sources.is_empty()
                    && compiled.sources.longest_match(source).is_none())
            {
                continue;
            }
            let weight = match rule.weight {
                Weight::Events => 1,
                Weight::Bytes => event.bytes,
            };
            for (limit_index, (limit, counter)) in compiled.limits.iter().enumerate() {
                let key = LimitKey::new(
                    rule.id,
                    source,
                    source.pick(limit.ipv4_prefix, limit.ipv6_prefix),
                );
                if let Some(penalty) = compiled.penalty.filter(|_| !rule.shadow) {
                    let serving = self.counters[penalty].sketch.estimate(key.as_bytes(), now) > 0;
                    if serving && decision.verdict == Verdict::Allow {
                        decision.verdict = Verdict::Deny(DenyReason::Penalty { rule: index });
                    }
                }
                let sketch = &self.counters[*counter].sketch;
                let mut estimate = if count {
                    sketch.observe(key.as_bytes(), weight, now)
                } else {
                    sketch.estimate(key.as_bytes(), now)
                };
                if let Some(shared) = &self.remote {
                    let counted = if count { weight } else { 0 };
                    estimate = shared.with_rest(&key, limit, estimate, counted, now);
                }
                if estimate <= limit.rate.count {
                    continue;
                }
                let throttle = Throttle {
                    at: LimitRef {
                        rule: index,
                        limit: limit_index,
                    },
                    estimate,
                    allowed: limit.rate.count,
                    retry_after: retry_after(estimate, limit.rate.count, limit.rate.per),
                    action: rule.action,
                };
                if rule.shadow {
                    decision.shadow_count += 1;
                    decision.shadow.get_or_insert(throttle);
                    continue;
                }
                if decision.verdict == Verdict::Allow {
                    decision.verdict = Verdict::Throttle(throttle);
                }
                if let Some(penalty) = compiled.penalty.filter(|_| count) {
                    let _ = self.counters[penalty]
                        .sketch
                        .observe(key.as_bytes(), 1, now);
                }
            }
        }
        decision
    }
}

impl Shared {
    /// `estimate` plus the rest of the cluster's count if the key is a suspect under `limit`
    /// (reporting the `counted` weight), or `estimate` as it is.
    #[inline]
    fn with_rest(
        &self,
        key: &LimitKey,
        limit: &Limit,
        estimate: u64,
        counted: u64,
        now: Tick,
    ) -> u64 {
        if (estimate as f64) < self.threshold * limit.rate.count as f64 {
            return estimate;
        }
        let rest = self.remote.suspect(&Suspect {
            key,
            per: limit.rate.per,
            before: estimate.saturating_sub(counted),
            weight: counted,
            now,
        });
        estimate.saturating_add(rest)
    }
}

fn networks<V>(entries: impl Iterator<Item = (Cidr, V)>) -> PrefixMap<V> {
    let mut map = PrefixMap::new();
    for (cidr, value) in entries {
        map.insert(cidr.addr, cidr.prefix, value);
    }
    map
}

/// How long until an estimate of `estimate` decays to `allowed` if the source stops: the
/// sliding count fades linearly over one period.
fn retry_after(estimate: u64, allowed: u64, per: Duration) -> Duration {
    let excess = estimate.saturating_sub(allowed) as f64 / estimate.max(1) as f64;
    Duration::from_millis((per.as_millis() as f64 * excess).ceil() as u64)
}
