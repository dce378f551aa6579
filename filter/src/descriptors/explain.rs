//! What a request's descriptors land on and how their keys stand, counting nothing: the
//! rate-limit service's half of the admin's `/explain`.

use std::time::Duration;

use tollgate_sketch::Tick;

use super::bounds::Refusal;
use super::config::DescriptorLimit;
use super::decision::{Code, CurrentLimit, DescriptorPolicy, Outcome, back_under, key, rest};
use super::matcher::RuleIndex;
use super::request::Request;
use crate::policy::cap;

/// How one descriptor of a request stands, read without counting (see
/// [`DescriptorPolicy::explain`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub struct DescriptorExplanation {
    /// What it lands on.
    pub outcome: Outcome,
    /// The rule, where one matched (an unlimited or replaced one too).
    pub rule: Option<RuleIndex>,
    /// The limit, for a limited rule that is not replaced.
    pub limit: Option<CurrentLimit>,
    /// Its key's estimate now, before the request, on this node (0 where nothing is
    /// counted).
    pub estimate: u64,
    /// What the rest of a cluster counted of the key, as `decide` adds it to `estimate` (0
    /// while the key is below the cluster's suspect threshold); `None` outside a cluster or
    /// where nothing is counted.
    pub cluster: Option<u64>,
    /// The stated overcount of `estimate` (see [`DescriptorPolicy::overcount_bound`]).
    pub overcount_bound: u64,
    /// Whether the estimate reached the key's cap ([`crate::EXACT_MULTIPLE`] times the limit,
    /// plus one): the true count is at least the estimate then.
    pub capped: bool,
    /// Whether the request, counted now, would pass the limit (the cluster's count included).
    pub over: bool,
    /// Over, in a shadow-mode rule: the service would answer OK and count it as shadowed.
    pub shadowed: bool,
    /// What the service would answer for this descriptor.
    pub code: Code,
    /// What would be left after the request: 0 when over, as [`super::Status`] says it.
    pub limit_remaining: u32,
    /// How long until the key has room for the request if it sends nothing more (zero if it
    /// has room now); never early.
    pub duration_until_reset: Option<Duration>,
}

/// What [`DescriptorPolicy::explain`] says of a request: the code the service would answer
/// and each descriptor's reading, in the request's order.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub struct RequestExplanation {
    /// OVER_LIMIT when any descriptor would be (a shadow one's over answers OK).
    pub code: Code,
    /// One per descriptor.
    pub descriptors: Vec<DescriptorExplanation>,
}

impl DescriptorExplanation {
    fn pass(outcome: Outcome, rule: Option<RuleIndex>) -> DescriptorExplanation {
        DescriptorExplanation {
            outcome,
            rule,
            limit: None,
            estimate: 0,
            cluster: None,
            overcount_bound: 0,
            capped: false,
            over: false,
            shadowed: false,
            code: Code::Ok,
            limit_remaining: if outcome == Outcome::Unlimited {
                u32::MAX
            } else {
                0
            },
            duration_until_reset: None,
        }
    }
}

impl DescriptorPolicy {
    /// What [`DescriptorPolicy::decide`] would answer for `request` at `now`, and why, counting
    /// nothing: the rule each descriptor lands on, its key's estimate and the stated bound.
    ///
    /// # Errors
    /// The [`Refusal`] `decide` gives for the same request.
    ///
    /// # Examples
    /// ```
    /// use tollgate_filter::{Code, Descriptor, DescriptorConfig, DescriptorPolicy, Request};
    /// use tollgate_sketch::Tick;
    /// let text = "domain: api\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 1}\n";
    /// let policy = DescriptorPolicy::new(&DescriptorConfig::parse(&[("api.yaml", text)])?, 1 << 20, None)?;
    /// let request = Request {
    ///     domain: "api".into(),
    ///     descriptors: vec![Descriptor::of(&[("api_key", "k1")])],
    ///     hits_addend: 0,
    /// };
    /// let now = Tick::from_nanos(1);
    /// assert_eq!(policy.explain(&request, now)?.code, Code::Ok);
    /// assert_eq!(policy.explain(&request, now)?.code, Code::Ok); // nothing counted
    /// let _ = policy.decide(&request, now)?;
    /// let why = policy.explain(&request, now)?;
    /// assert_eq!((why.code, why.descriptors[0].estimate), (Code::OverLimit, 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn explain(&self, request: &Request, now: Tick) -> Result<RequestExplanation, Refusal> {
        self.bounds.check(request)?;
        let matcher = &self.matcher;
        if !matcher.has_domain(&request.domain) {
            let descriptors = request
                .descriptors
                .iter()
                .map(|_| DescriptorExplanation::pass(Outcome::UnknownDomain, None))
                .collect();
            return Ok(RequestExplanation {
                code: Code::Ok,
                descriptors,
            });
        }
        let rules = matcher.rules();
        let found: Vec<Option<RuleIndex>> = request
            .descriptors
            .iter()
            .map(|d| matcher.find(&request.domain, d))
            .collect();
        // As `decide`: a rule named in the `replaces` of any matched rule is dropped.
        let replaced = |name: &str| {
            found
                .iter()
                .flatten()
                .any(|&r| rules[r].replaces.iter().any(|n| n == name))
        };
        let weight = request.weight();
        let mut code = Code::Ok;
        let mut descriptors = Vec::with_capacity(found.len());
        for (descriptor, &rule) in request.descriptors.iter().zip(&found) {
            let Some(index) = rule else {
                descriptors.push(DescriptorExplanation::pass(Outcome::NoRule, None));
                continue;
            };
            let rule = &rules[index];
            let DescriptorLimit::PerUnit {
                requests_per_unit,
                unit,
            } = rule.limit
            else {
                descriptors.push(DescriptorExplanation::pass(Outcome::Unlimited, Some(index)));
                continue;
            };
            if rule.name.as_deref().is_some_and(replaced) {
                descriptors.push(DescriptorExplanation::pass(Outcome::Replaced, Some(index)));
                continue;
            }
            let at = self.units.iter().position(|u| *u == unit);
            let Some(counter) = at.and_then(|at| self.counters.get(at)) else {
                // Every unit a rule uses has its counter (see `decide`): unreachable.
                debug_assert!(false, "no counter for {unit:?}");
                descriptors.push(DescriptorExplanation::pass(Outcome::Limited, Some(index)));
                continue;
            };
            let key = key(rule.id, descriptor);
            let limit = u64::from(requests_per_unit);
            let cap = cap(limit);
            let estimate = counter.estimate_capped(&key, cap, now);
            // As `decide` adds it; weight 0: the rest of the cluster is asked, nothing is
            // reported to it.
            let cluster = self.remote.as_ref().map(|remote| {
                let rest = rest(
                    &**remote, counter, rule.id, unit, &key, limit, estimate, 0, now,
                );
                rest.counted.saturating_add(rest.ahead)
            });
            let others = cluster.unwrap_or(0);
            // What `decide` compares: the estimate including this request.
            let after = estimate.saturating_add(others).saturating_add(weight);
            let over = after > limit;
            let shadowed = over && rule.shadow_mode;
            if over && !shadowed {
                code = Code::OverLimit;
            }
            descriptors.push(DescriptorExplanation {
                outcome: Outcome::Limited,
                rule: Some(index),
                limit: Some(CurrentLimit {
                    requests_per_unit,
                    unit,
                }),
                estimate,
                cluster,
                overcount_bound: counter.overcount_bound(now),
                capped: estimate >= cap,
                over,
                shadowed,
                code: if over && !shadowed {
                    Code::OverLimit
                } else {
                    Code::Ok
                },
                limit_remaining: u32::try_from(limit.saturating_sub(after)).unwrap_or(u32::MAX),
                // Held 0: the explaining thread holds no credit of its own, so every
                // thread's credit counts as requests would (never early).
                duration_until_reset: Some(back_under(
                    counter,
                    &key,
                    0,
                    others,
                    limit.saturating_sub(weight),
                    cap,
                    now,
                )),
            });
        }
        Ok(RequestExplanation { code, descriptors })
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Descriptor, DescriptorConfig};
    use super::*;

    const YAML: &str = "\
domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    shadow_mode: true
    rate_limit: {name: by_path, unit: second, requests_per_unit: 1}
  - key: plan
    value: free
    rate_limit: {unit: hour, requests_per_unit: 5, replaces: [{name: by_path}]}
  - key: vip
    rate_limit: {unlimited: true}
";

    fn policy() -> DescriptorPolicy {
        let config = DescriptorConfig::parse(&[("api.yaml", YAML)]).unwrap();
        DescriptorPolicy::new(&config, 1 << 20, None).unwrap()
    }

    fn request(descriptors: &[&[(&str, &str)]]) -> Request {
        Request {
            domain: "api".into(),
            descriptors: descriptors.iter().map(|d| Descriptor::of(d)).collect(),
            hits_addend: 0,
        }
    }

    /// `explain` says what `decide` answers next, at every step to past the limit, and
    /// counts nothing itself.
    #[test]
    fn explain_says_what_decide_answers_and_counts_nothing() {
        let policy = policy();
        let now = Tick::from_nanos(1);
        let both = request(&[&[("api_key", "k")], &[("path", "/v1")]]);
        for _ in 0..4 {
            let why = policy.explain(&both, now).unwrap();
            let again = policy.explain(&both, now).unwrap();
            assert_eq!(why, again, "explain counted");
            let answer = policy.decide(&both, now).unwrap();
            assert_eq!(why.code, answer.code);
            for (explained, status) in why.descriptors.iter().zip(&answer.statuses) {
                assert_eq!(explained.code, status.code);
                assert_eq!(explained.shadowed, status.shadowed);
                assert_eq!(explained.limit_remaining, status.limit_remaining);
                // Before counting: room now exactly when the request would not be over.
                let room_now = explained.duration_until_reset == Some(Duration::ZERO);
                assert_eq!(room_now, !explained.over, "{explained:?}");
                assert_eq!(explained.limit, status.current_limit);
            }
        }
        let why = policy.explain(&both, now).unwrap();
        let key = &why.descriptors[0];
        assert_eq!((key.estimate, key.over, key.shadowed), (4, true, false));
        let path = &why.descriptors[1];
        assert_eq!(
            (path.over, path.shadowed, path.code),
            (true, true, Code::Ok)
        );
    }

    #[test]
    fn no_rule_unlimited_replaced_and_unknown_domains_are_said() {
        let policy = policy();
        let now = Tick::from_nanos(1);
        let why = policy
            .explain(
                &request(&[
                    &[("user", "ann")],
                    &[("vip", "yes")],
                    &[("path", "/v1")],
                    &[("plan", "free")],
                ]),
                now,
            )
            .unwrap();
        let outcomes: Vec<Outcome> = why.descriptors.iter().map(|d| d.outcome).collect();
        assert_eq!(
            outcomes,
            [
                Outcome::NoRule,
                Outcome::Unlimited,
                Outcome::Replaced,
                Outcome::Limited
            ]
        );
        let mut unknown = request(&[&[("api_key", "k")]]);
        unknown.domain = "other".into();
        let why = policy.explain(&unknown, now).unwrap();
        assert_eq!(why.descriptors[0].outcome, Outcome::UnknownDomain);
        let empty = request(&[]);
        assert_eq!(
            policy.explain(&empty, now).unwrap_err(),
            Refusal::NoDescriptors
        );
    }
}
