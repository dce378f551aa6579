//! Counting and deciding: each limited descriptor's key counted in the sketch of its unit,
//! and the answer per descriptor and overall.

use std::sync::Arc;
use std::time::Duration;

use tollgate_sketch::{BuildError, KeyHash, Tick};
use xxhash_rust::xxh3::Xxh3Default;

use super::bounds::{Bounds, Refusal};
use super::config::{DescriptorConfig, DescriptorLimit, Unit};
use super::matcher::{Matcher, RuleIndex};
use super::request::{Descriptor, Request};
use crate::budget::{Counts, Share};
use crate::counter::Counter;
use crate::fade::Halves;
use crate::key::{LimitKey, RuleId};
use crate::policy::cap;
use crate::remote::{Before, Remote, Rest, Suspect};

/// A response code, as Envoy's `RateLimitResponse.Code` (its `UNKNOWN` is never answered).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    /// Let it through.
    Ok,
    /// Refuse it.
    OverLimit,
}

/// What a descriptor landed on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Its domain is not configured: OK, nothing counted.
    UnknownDomain,
    /// No rule: OK, nothing counted.
    NoRule,
    /// An `unlimited` rule: OK, nothing counted.
    Unlimited,
    /// A rule another matched rule of the same request `replaces`: OK, nothing counted.
    Replaced,
    /// A limited rule: counted and decided.
    Limited,
}

/// The limit a descriptor was decided by: Envoy's `current_limit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CurrentLimit {
    /// Requests per unit.
    pub requests_per_unit: u32,
    /// The unit (a sliding window of that length).
    pub unit: Unit,
}

/// The answer for one descriptor: Envoy's `DescriptorStatus`, and what the proxy counts.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub struct Status {
    /// OK or OVER_LIMIT (a shadow rule's over-limit answers OK).
    pub code: Code,
    /// The limit, where a limited rule decided it.
    pub current_limit: Option<CurrentLimit>,
    /// What is left in the window after this request: 0 when over; `u32::MAX` for an
    /// unlimited rule and 0 with no rule, as the reference answers.
    pub limit_remaining: u32,
    /// For a limited rule: how long until the key has room for one more request of this
    /// weight if it sends nothing more (zero if it has room now); never early.
    pub duration_until_reset: Option<Duration>,
    /// What the descriptor landed on.
    pub outcome: Outcome,
    /// The rule, where one matched.
    pub rule: Option<RuleIndex>,
    /// Over its limit but in shadow mode: answered OK, to be counted as such.
    pub shadowed: bool,
}

impl Status {
    fn pass(outcome: Outcome, rule: Option<RuleIndex>) -> Status {
        Status {
            code: Code::Ok,
            current_limit: None,
            limit_remaining: if outcome == Outcome::Unlimited {
                u32::MAX
            } else {
                0
            },
            duration_until_reset: None,
            outcome,
            rule,
            shadowed: false,
        }
    }
}

/// The answer to a request: OVER_LIMIT when any descriptor is, and a status per descriptor
/// in the request's order.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub struct Response {
    /// The overall code.
    pub code: Code,
    /// One per descriptor.
    pub statuses: Vec<Status>,
}

/// The descriptor policy: the matcher of a [`DescriptorConfig`] and a sketch per unit its
/// limits use, sharing the memory evenly.
#[derive(Debug)]
pub struct DescriptorPolicy {
    pub(super) matcher: Matcher,
    /// The units in use, shortest first.
    pub(super) units: Vec<Unit>,
    /// The counter of each unit of `units`, in the same order.
    pub(super) counters: Vec<Counter>,
    pub(super) bounds: Bounds,
    /// The rest of a cluster, if this service is part of one (see
    /// [`DescriptorPolicy::with_remote`]).
    pub(super) remote: Option<Arc<dyn Remote>>,
}

impl DescriptorPolicy {
    /// The policy of `config` with `memory` bytes of sketches and the default [`Bounds`].
    /// With `previous` (a reload at that tick), a unit whose share is unchanged counts on in
    /// the same sketch, so every rule whose path is unchanged keeps its counts, whatever its
    /// limit; a changed share retires the old sketch as the address policy does. So is
    /// `previous`'s remote (see [`DescriptorPolicy::with_remote`]).
    ///
    /// # Errors
    /// The sketch's [`BuildError`] if a unit's share of `memory` is too small.
    ///
    /// # Examples
    /// ```
    /// use tollgate_filter::{Code, Descriptor, DescriptorConfig, DescriptorPolicy, Request};
    /// use tollgate_sketch::Tick;
    /// let text = "domain: api\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 2}\n";
    /// let config = DescriptorConfig::parse(&[("api.yaml", text)])?;
    /// let policy = DescriptorPolicy::new(&config, 1 << 20, None)?;
    /// let request = Request {
    ///     domain: "api".into(),
    ///     descriptors: vec![Descriptor::of(&[("api_key", "k1")])],
    ///     hits_addend: 0,
    /// };
    /// let now = Tick::from_nanos(1);
    /// let codes: Vec<Code> = (0..3).map(|_| policy.decide(&request, now).unwrap().code).collect();
    /// assert_eq!(codes, [Code::Ok, Code::Ok, Code::OverLimit]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(
        config: &DescriptorConfig,
        memory: usize,
        previous: Option<(&DescriptorPolicy, Tick)>,
    ) -> Result<DescriptorPolicy, BuildError> {
        let matcher = Matcher::new(config);
        let mut units: Vec<Unit> = matcher
            .rules()
            .iter()
            .filter_map(|rule| match rule.limit {
                DescriptorLimit::PerUnit { unit, .. } => Some(unit),
                DescriptorLimit::Unlimited => None,
            })
            .collect();
        units.sort_unstable();
        units.dedup();
        let bytes = memory / units.len().max(1);
        let remote = previous.and_then(|(policy, _)| policy.remote.clone());
        // `Counter::succeed` finds the predecessor of the same window among these.
        let previous = previous.map(|(policy, now)| (policy.counters.as_slice(), now));
        let counters = units
            .iter()
            .map(|&unit| {
                let share = Share {
                    counts: Counts::Limits,
                    window: unit.duration(),
                    bytes,
                    named: false,
                    // `count` takes this thread's own credit off what it answers.
                    reserves: true,
                };
                Counter::succeed(share, previous)
            })
            .collect::<Result<_, _>>()?;
        Ok(DescriptorPolicy {
            matcher,
            units,
            counters,
            bounds: Bounds::default(),
            remote,
        })
    }

    /// This policy with `bounds` instead of the default ones.
    #[must_use]
    pub fn with_bounds(mut self, bounds: Bounds) -> DescriptorPolicy {
        self.bounds = bounds;
        self
    }

    /// This policy, adding what `remote` reports the rest of a cluster counted to every
    /// descriptor key whose local estimate reaches `remote.threshold()` of its limit, and
    /// reporting those keys' requests to it, as [`crate::Policy::with_remote`] does for
    /// addresses. The key it shares is the rule's identity, the unit and the hash of the
    /// values (a kind of [`LimitKey`] no address key equals), with shape 0: nodes share a
    /// descriptor's count when their rule has the same path, whatever its limit, as a reload
    /// keeps it.
    #[must_use]
    pub fn with_remote(mut self, remote: Arc<dyn Remote>) -> DescriptorPolicy {
        self.remote = Some(remote);
        self
    }

    /// Its matcher (rules by index, for metrics and `/explain`).
    #[must_use]
    pub fn matcher(&self) -> &Matcher {
        &self.matcher
    }

    /// Bytes of sketch held, retired ones included.
    #[must_use]
    pub fn memory_bytes(&self) -> usize {
        self.counters.iter().map(Counter::memory_bytes).sum()
    }

    /// The stated overcount of the estimates of `unit`'s rules at `now` (see
    /// `RateSketch::overcount_bound`): a key with less headroom than this may be refused
    /// early; 0 where no rule uses `unit`. With `P` threads deciding one key, the other
    /// threads' unspent reservations may add up to `(P - 1) * ceil(estimate / 256)` on top
    /// (`RateSketch::reserved_per_thread`; the deciding thread's own are taken off).
    /// The estimate answered is never below the truth: `limit_remaining` is never above what
    /// is truly left.
    #[must_use]
    pub fn overcount_bound(&self, unit: Unit, now: Tick) -> u64 {
        let at = self.units.iter().position(|u| *u == unit);
        at.and_then(|at| self.counters.get(at))
            .map_or(0, |counter| counter.overcount_bound(now))
    }

    /// Decides `request` at `now`: every limited descriptor's key is counted (over-limit ones
    /// too, as the reference counts them), then each is answered.
    ///
    /// # Errors
    /// A [`Refusal`] if the request passes one of the [`Bounds`] or is empty; nothing is
    /// counted then.
    pub fn decide(&self, request: &Request, now: Tick) -> Result<Response, Refusal> {
        self.bounds.check(request)?;
        if !self.matcher.has_domain(&request.domain) {
            let statuses = request
                .descriptors
                .iter()
                .map(|_| Status::pass(Outcome::UnknownDomain, None))
                .collect();
            return Ok(Response {
                code: Code::Ok,
                statuses,
            });
        }
        let rules = self.matcher.rules();
        let found: Vec<Option<RuleIndex>> = request
            .descriptors
            .iter()
            .map(|d| self.matcher.find(&request.domain, d))
            .collect();
        // `replaces`: the names every matched rule (unlimited ones too) replaces.
        let replaced = |name: &str| {
            found
                .iter()
                .flatten()
                .any(|&r| rules[r].replaces.iter().any(|n| n == name))
        };
        // Every limited descriptor is planned, its key hashed and its cells asked for, before
        // any is counted: in a sketch of many megabytes each row is a cache miss, and this way
        // the misses of a request's descriptors overlap instead of following one another.
        let plans: Vec<Plan<'_>> = request
            .descriptors
            .iter()
            .zip(&found)
            .map(|(descriptor, &rule)| {
                let Some(index) = rule else {
                    return Plan::Pass(Outcome::NoRule, None);
                };
                let rule = &rules[index];
                let DescriptorLimit::PerUnit {
                    requests_per_unit,
                    unit,
                } = rule.limit
                else {
                    return Plan::Pass(Outcome::Unlimited, Some(index));
                };
                if rule.name.as_deref().is_some_and(replaced) {
                    return Plan::Pass(Outcome::Replaced, Some(index));
                }
                let Some(counter) = self.counter_of(unit) else {
                    // Every unit a rule uses has its counter (built from the same rules):
                    // unreachable, and refusing nothing is the safe answer for a limiter
                    // that fails open.
                    debug_assert!(false, "no counter for {unit:?}");
                    return Plan::Pass(Outcome::NoRule, None);
                };
                let key = key(rule.id, descriptor);
                let hash = counter.sketch().hash(&key);
                counter
                    .sketch()
                    .touch_capped(hash, cap(u64::from(requests_per_unit)), now);
                Plan::Count {
                    index,
                    limit: CurrentLimit {
                        requests_per_unit,
                        unit,
                    },
                    keyed: Keyed { counter, key, hash },
                }
            })
            .collect();
        let weight = request.weight();
        let mut code = Code::Ok;
        let statuses = plans
            .into_iter()
            .map(|plan| {
                let (index, limit, keyed) = match plan {
                    Plan::Pass(outcome, rule) => return Status::pass(outcome, rule),
                    Plan::Count {
                        index,
                        limit,
                        keyed,
                    } => (index, limit, keyed),
                };
                let rule = &rules[index];
                let (over, limit_remaining, reset) =
                    self.count(rule.id, &keyed, limit, weight, now);
                let shadowed = over && rule.shadow_mode;
                if over && !shadowed {
                    code = Code::OverLimit;
                }
                Status {
                    code: if over && !shadowed {
                        Code::OverLimit
                    } else {
                        Code::Ok
                    },
                    current_limit: Some(limit),
                    limit_remaining,
                    duration_until_reset: Some(reset),
                    outcome: Outcome::Limited,
                    rule: Some(index),
                    shadowed,
                }
            })
            .collect();
        Ok(Response { code, statuses })
    }

    /// The estimate of the first descriptor's key at `now` as [`DescriptorPolicy::decide`]
    /// answers from it, counting nothing: this thread's unspent credit taken off below the
    /// cap (0 without a limited rule).
    #[cfg(test)]
    pub(crate) fn estimate_of(&self, request: &Request, now: Tick) -> u64 {
        let (counted, held, cap) = self.counted_of(request, now);
        if counted < cap {
            counted.saturating_sub(held)
        } else {
            counted
        }
    }

    /// The sketch's estimate of the first descriptor's key at `now`, counting nothing, with
    /// this thread's unspent credit of it and its cap ((0, 0, 0) without a limited rule).
    #[cfg(test)]
    pub(crate) fn counted_of(&self, request: &Request, now: Tick) -> (u64, u64, u64) {
        let descriptor = &request.descriptors[0];
        let Some(index) = self.matcher.find(&request.domain, descriptor) else {
            return (0, 0, 0);
        };
        let rule = &self.matcher.rules()[index];
        let DescriptorLimit::PerUnit {
            requests_per_unit,
            unit,
        } = rule.limit
        else {
            return (0, 0, 0);
        };
        let at = self.units.iter().position(|u| *u == unit).unwrap();
        let key = key(rule.id, descriptor);
        let counter = &self.counters[at];
        let cap = cap(u64::from(requests_per_unit));
        let held = counter
            .sketch()
            .held_credit(counter.sketch().hash(&key), now);
        (counter.estimate_capped(&key, cap, now), held, cap)
    }

    /// The counter of `unit`'s rules.
    fn counter_of(&self, unit: Unit) -> Option<&Counter> {
        let at = self.units.iter().position(|u| *u == unit)?;
        self.counters.get(at)
    }

    /// Counts `weight` for the descriptor's key (`keyed`) under `rule` and `limit`: whether it
    /// is over, what is left and how long until there is room for one more such request.
    fn count(
        &self,
        rule: RuleId,
        keyed: &Keyed<'_>,
        limit: CurrentLimit,
        weight: u64,
        now: Tick,
    ) -> (bool, u32, Duration) {
        let Keyed { counter, key, hash } = *keyed;
        let unit = limit.unit;
        let limit = u64::from(limit.requests_per_unit);
        let cap = cap(limit);
        let counted = counter.observe_hashed_capped(&key, hash, weight, cap, now);
        // A hot key's sketch counts ahead (reservations): this thread's unspent credit is in
        // `counted` but is no request yet, so it is taken off, and one thread's answers stay
        // exact as the reference's. Never below the truth (`RateSketch::held_credit`): the
        // cells hold every request plus every thread's unspent credit; at the cap requests
        // may have gone uncounted, so nothing is taken off there. Other threads' credits stay
        // in: `limit_remaining` is at most what is truly left.
        let held = if counted < cap {
            counter.sketch().held_credit(hash, now)
        } else {
            0
        };
        let local = counted.saturating_sub(held);
        let rest = match &self.remote {
            Some(remote) => rest(
                &**remote, counter, rule, unit, &key, limit, local, weight, now,
            ),
            None => Rest::default(),
        };
        let others = rest.counted.saturating_add(rest.ahead);
        let estimate = local.saturating_add(others);
        let over = estimate > limit;
        let remaining = u32::try_from(limit.saturating_sub(estimate)).unwrap_or(u32::MAX);
        let reset = back_under(
            counter,
            &key,
            held,
            others,
            limit.saturating_sub(weight),
            cap,
            now,
        );
        (over, remaining, reset)
    }
}

/// What `decide` does with one descriptor, worked out before anything is counted.
enum Plan<'a> {
    /// Answered OK without counting.
    Pass(Outcome, Option<RuleIndex>),
    /// Counted under the limited rule `index`.
    Count {
        index: RuleIndex,
        limit: CurrentLimit,
        keyed: Keyed<'a>,
    },
}

/// A limited descriptor's sketch key, with its hash under the counter of its rule's unit.
#[derive(Clone, Copy)]
struct Keyed<'a> {
    counter: &'a Counter,
    key: [u8; 25],
    hash: KeyHash,
}

/// The rest of the cluster's count for the descriptor `key` (local estimate `local`, of which
/// `weight` from this request) under a limit of `limit` per `unit`, when the key is a suspect
/// (its local estimate at `remote.threshold()` of the limit); nothing otherwise. With a
/// `weight` of 0 (`/explain`) the rest is asked and nothing is reported. Out of line, as the
/// address policy's: a service outside a cluster pays one branch.
#[inline(never)]
#[allow(clippy::too_many_arguments)] // two call sites; a struct would only rename them
pub(super) fn rest(
    remote: &dyn Remote,
    counter: &Counter,
    rule: RuleId,
    unit: Unit,
    key: &[u8; 25],
    limit: u64,
    local: u64,
    weight: u64,
    now: Tick,
) -> Rest {
    if (local as f64) < remote.threshold() * limit as f64 {
        return Rest::default();
    }
    let per = unit.duration();
    let mut values = [0u8; 16];
    values.copy_from_slice(&key[9..]);
    let shared = LimitKey::descriptor(rule, per, values);
    remote.suspect(&Suspect {
        key: &shared,
        per,
        shape: 0,
        before: Before::new(local, weight, key, counter, now),
        weight,
        now,
    })
}

/// The sketch key of a descriptor under a rule: a tag, the rule's id, and a 128-bit hash of
/// the request's values, each length-prefixed (the path fixes the keys). Fixed size: any
/// number and length of values costs one hash pass and no allocation.
pub(super) fn key(rule: RuleId, descriptor: &Descriptor) -> [u8; 25] {
    let mut hasher = Xxh3Default::new();
    for entry in &descriptor.entries {
        hasher.update(&(entry.value.len() as u64).to_le_bytes());
        hasher.update(entry.value.as_bytes());
    }
    let mut key = [0u8; 25];
    // Apart from every address key (`LimitKey` starts with its kind, 1 to 3).
    key[0] = b'D';
    key[1..9].copy_from_slice(&rule.bits().to_le_bytes());
    key[9..].copy_from_slice(&hasher.digest128().to_le_bytes());
    key
}

/// How long until `key`'s estimate in `counter`, with `others` counted by the rest of a
/// cluster, is at most `target` if it sends nothing more: the one computation `/explain`,
/// Retry-After, `delay` and the kernel hold use ([`crate::Halves::back_under`]): exact below
/// the cap, never early at it. The cluster's counts are taken as this window's (they hold
/// longest), as the address policy takes them, so the time is never early for them either.
/// `held`, this thread's unspent credit of the key in the current window (0 at the cap, see
/// [`DescriptorPolicy::count`]), is no request and is taken off the current half, but only
/// for a time within the current window: from the next one on, this thread's answers no
/// longer take it off (it was counted in this window, and a credit answers its own window
/// only), so the credit's events fade out with the window as requests' do.
#[allow(clippy::too_many_arguments)]
pub(super) fn back_under(
    counter: &Counter,
    key: &[u8],
    held: u64,
    others: u64,
    target: u64,
    cap: u64,
    now: Tick,
) -> Duration {
    let window = counter.sketch().window();
    let halves = counter.halves(key, cap, now);
    let counted = Halves {
        current: halves.current.saturating_add(others),
        ..halves
    };
    if held == 0 || halves.current == Halves::UNKNOWN {
        return counted.back_under(target, window, now);
    }
    let requests = Halves {
        current: counted.current.saturating_sub(held),
        ..counted
    };
    let sooner = requests.back_under(target, window, now);
    let per = window.as_nanos().max(1);
    let now = u128::from(now.as_nanos());
    let end = (now / per + 1) * per;
    if now + sooner.as_nanos() < end {
        sooner
    } else {
        counted.back_under(target, window, Tick::from_nanos(now as u64))
    }
}
