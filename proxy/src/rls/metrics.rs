//! The rate-limit service's metrics, under `tollgate_rls_`: its callers' connections and
//! requests against their bounds, and its answers per configured rule (the rule's path, as
//! envoyproxy/ratelimit names its stats), per value only where the YAML sets
//! `detailed_metric: true`, and then at most [`MAX_DETAILED_VALUES`] values per rule.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use tollgate_filter::{Code, Descriptor, DescriptorPolicy, Outcome, Request, Response};

use super::callers::Bound;

/// The most values of one `detailed_metric` rule counted in series of their own; the
/// values past them count together under [`OTHER_VALUES`].
pub(crate) const MAX_DETAILED_VALUES: usize = 100;
/// The `value` label of the values past [`MAX_DETAILED_VALUES`].
pub(crate) const OTHER_VALUES: &str = "_other";
/// The longest `value` label, in bytes: a longer one is cut (at a character's edge), so
/// values that share these first bytes share a series.
const MAX_VALUE_LABEL: usize = 128;

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RuleLabel {
    rule: String,
    result: &'static str,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct NearLabel {
    rule: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ValueLabel {
    rule: String,
    value: String,
    result: &'static str,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct CodeLabel {
    code: &'static str,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

/// The service's series; clones count into the same ones.
#[derive(Clone, Debug, Default)]
pub(crate) struct RlsMetrics {
    /// Connections open now.
    pub(crate) connections: Gauge,
    refused_connections: Family<ReasonLabel, Counter>,
    closed_connections: Family<ReasonLabel, Counter>,
    /// Requests in flight now (headers read, answer not yet ready).
    pub(crate) requests_in_flight: Gauge,
    refused_requests: Family<ReasonLabel, Counter>,
    requests: Family<CodeLabel, Counter>,
    invalid: Family<ReasonLabel, Counter>,
    descriptors: Family<OutcomeLabel, Counter>,
    rule_answers: Family<RuleLabel, Counter>,
    rule_near_limit: Family<NearLabel, Counter>,
    value_answers: Family<ValueLabel, Counter>,
    /// The values of each `detailed_metric` rule (by path) that have series of their own.
    values: Arc<Mutex<HashMap<String, HashSet<String>>>>,
}

impl RlsMetrics {
    /// Counts a connection closed at accept, over `bound`.
    pub(crate) fn refused_connection(&self, bound: Bound) {
        let reason = bound.label();
        self.refused_connections
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    /// Counts a connection closed at its deadline: idle after a request, or without one.
    pub(crate) fn closed(&self, idle: bool) {
        let reason = if idle {
            "idle_timeout"
        } else {
            "header_timeout"
        };
        self.closed_connections
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    /// Counts a request answered `RESOURCE_EXHAUSTED`, over `bound`.
    pub(crate) fn refused_request(&self, bound: Bound) {
        let reason = bound.label();
        self.refused_requests
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    /// Counts a request refused as invalid (`INVALID_ARGUMENT`), by the bound or rule it
    /// breaks (`Refusal::name`, or `limit_override`).
    pub(crate) fn invalid(&self, reason: &'static str) {
        self.invalid.get_or_create(&ReasonLabel { reason }).inc();
    }

    /// Counts `response`, the answer of `policy` to `request`: the request by its overall
    /// code, each descriptor by what it landed on, and each limited one under its rule (and
    /// its value, for a `detailed_metric` rule).
    pub(crate) fn answered(
        &self,
        policy: &DescriptorPolicy,
        request: &Request,
        response: &Response,
    ) {
        self.requests
            .get_or_create(&CodeLabel {
                code: code_label(response.code),
            })
            .inc();
        let rules = policy.matcher().rules();
        for (descriptor, status) in request.descriptors.iter().zip(&response.statuses) {
            self.descriptors
                .get_or_create(&OutcomeLabel {
                    outcome: outcome_label(status.outcome),
                })
                .inc();
            let rule = status.rule.and_then(|r| rules.get(r));
            let (Some(rule), Some(limit)) = (rule, status.current_limit) else {
                continue;
            };
            let result = if status.shadowed {
                "shadow_over_limit"
            } else {
                code_label(status.code)
            };
            let path = &rule.path;
            self.rule_answers
                .get_or_create(&RuleLabel {
                    rule: path.clone(),
                    result,
                })
                .inc();
            // The reference's near limit: answered OK past 80 % of the limit.
            let remaining = u64::from(status.limit_remaining);
            if status.code == Code::Ok
                && !status.shadowed
                && remaining * 5 < u64::from(limit.requests_per_unit)
            {
                self.rule_near_limit
                    .get_or_create(&NearLabel { rule: path.clone() })
                    .inc();
            }
            if rule.detailed_metric {
                let value = self.value_label(path, descriptor);
                self.value_answers
                    .get_or_create(&ValueLabel {
                        rule: path.clone(),
                        value,
                        result,
                    })
                    .inc();
            }
        }
    }

    /// The `value` label of `descriptor` under the detailed rule `path`: its entries as the
    /// reference writes a detailed stat (`key_value.key_value`), cut to
    /// [`MAX_VALUE_LABEL`] bytes; [`OTHER_VALUES`] once the rule has
    /// [`MAX_DETAILED_VALUES`] others.
    fn value_label(&self, path: &str, descriptor: &Descriptor) -> String {
        let mut text = String::new();
        for (at, entry) in descriptor.entries.iter().enumerate() {
            if at > 0 {
                text.push('.');
            }
            text.push_str(&entry.key);
            text.push('_');
            text.push_str(&entry.value);
        }
        if text.len() > MAX_VALUE_LABEL {
            let mut end = MAX_VALUE_LABEL;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
        }
        // Each update completes under the lock: a poisoned set is whole.
        let mut values = self.values.lock().unwrap_or_else(PoisonError::into_inner);
        let seen = values.entry(path.to_owned()).or_default();
        if seen.contains(&text) || seen.len() < MAX_DETAILED_VALUES {
            seen.insert(text.clone());
            text
        } else {
            OTHER_VALUES.to_owned()
        }
    }

    /// Registers them under `rls_` in `registry`'s namespace.
    pub(crate) fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("rls");
        r.register(
            "connections",
            "Connections to the rate-limit service open now",
            self.connections.clone(),
        );
        r.register(
            "connections_refused",
            "Connections closed at accept, over a bound: total (max_connections), address \
             (max_connections_per_address) or prefix (max_connections_per_prefix)",
            self.refused_connections.clone(),
        );
        r.register(
            "connections_closed",
            "Connections closed at their deadline, with an HTTP/2 GOAWAY: header_timeout (no \
             request since accept) or idle_timeout (no request since the last)",
            self.closed_connections.clone(),
        );
        r.register(
            "requests_in_flight",
            "Requests whose headers are read and whose answer is not yet ready",
            self.requests_in_flight.clone(),
        );
        r.register(
            "requests_refused",
            "Requests answered RESOURCE_EXHAUSTED, over a bound: total \
             (max_requests_in_flight), address (max_requests_in_flight_per_address) or prefix \
             (max_requests_in_flight_per_prefix)",
            self.refused_requests.clone(),
        );
        r.register(
            "requests",
            "Requests answered, by overall code: ok or over_limit",
            self.requests.clone(),
        );
        r.register(
            "requests_invalid",
            "Requests answered INVALID_ARGUMENT, by the bound or rule broken",
            self.invalid.clone(),
        );
        r.register(
            "descriptors",
            "Descriptors answered, by what they landed on: unknown_domain, no_rule, \
             unlimited, replaced or limited",
            self.descriptors.clone(),
        );
        r.register(
            "rule_descriptors",
            "Descriptors answered under each limited rule (domain.key_value.key, as \
             envoyproxy/ratelimit names its stats), by result: ok, over_limit or \
             shadow_over_limit (over, answered OK)",
            self.rule_answers.clone(),
        );
        r.register(
            "rule_near_limit",
            "Descriptors answered OK under each limited rule with less than a fifth of the \
             limit left",
            self.rule_near_limit.clone(),
        );
        r.register(
            "rule_value_descriptors",
            "As rule_descriptors, per value, for rules with detailed_metric: true: at most \
             100 values per rule, the rest under value=\"_other\"",
            self.value_answers.clone(),
        );
    }
}

/// `ok` or `over_limit`, as the metrics and the admin's `/explain` name a code.
pub(crate) fn code_label(code: Code) -> &'static str {
    match code {
        Code::Ok => "ok",
        Code::OverLimit => "over_limit",
    }
}

/// What a descriptor landed on, as the metrics and the admin's `/explain` name it.
pub(crate) fn outcome_label(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::UnknownDomain => "unknown_domain",
        Outcome::NoRule => "no_rule",
        Outcome::Unlimited => "unlimited",
        Outcome::Replaced => "replaced",
        Outcome::Limited => "limited",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_detailed_rule_has_at_most_its_cap_of_values_and_the_rest_together() {
        let metrics = RlsMetrics::default();
        let label =
            |value: &str| metrics.value_label("api.user", &Descriptor::of(&[("user", value)]));
        for n in 0..MAX_DETAILED_VALUES {
            assert_eq!(label(&n.to_string()), format!("user_{n}"));
        }
        assert_eq!(label("one more"), OTHER_VALUES);
        assert_eq!(label("0"), "user_0", "a value with its own series keeps it");
        // Another rule has a cap of its own; a long value is cut at a character's edge.
        let long = "é".repeat(100);
        let cut = metrics.value_label("api.other", &Descriptor::of(&[("k", &long)]));
        assert!(
            cut.len() <= MAX_VALUE_LABEL && cut.starts_with("k_é"),
            "{cut}"
        );
    }
}
