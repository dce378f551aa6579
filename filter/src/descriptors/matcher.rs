//! Which rule, if any, a descriptor lands on: a domain's tree compiled into per-level maps.
//!
//! The rules are the reference's `GetLimit` (envoyproxy/ratelimit `src/config/config_impl.go`),
//! see the module docs of `descriptors`. Each level maps an entry key to its exact values, its
//! prefixes in file order and its value-less node, so a lookup hashes each entry's key and
//! value once and scans only the prefixes of that key.

use std::collections::HashMap;

use super::config::{DescriptorConfig, DescriptorLimit, DescriptorRule, ValueMatch};
use super::request::Descriptor;
use crate::key::RuleId;

/// Index of a [`MatchedRule`] in [`Matcher::rules`].
pub type RuleIndex = usize;

/// A compiled `rate_limit`: what a descriptor that lands on it is decided with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatchedRule {
    /// Stable identity: the domain and the path of keys and value matches from the top, not
    /// the limit, so a reload that keeps the path keeps the counts (see `decision`).
    pub id: RuleId,
    /// The path as the reference names it in its stats: `domain.key_value.key`.
    pub path: String,
    /// The limit.
    pub limit: DescriptorLimit,
    /// Counted and reported, never enforced.
    pub shadow_mode: bool,
    /// Metrics per value (read by the proxy).
    pub detailed_metric: bool,
    /// `rate_limit.name`.
    pub name: Option<String>,
    /// `rate_limit.replaces`.
    pub replaces: Vec<String>,
}

#[derive(Debug, Default)]
struct KeyNodes {
    exact: HashMap<String, usize>,
    prefixes: Vec<(String, usize)>,
    any: Option<usize>,
}

#[derive(Debug)]
struct Node {
    rule: Option<RuleIndex>,
    /// The level below, or `None` where the tree ends (the walk stops there).
    children: Option<HashMap<String, KeyNodes>>,
}

/// Every domain's tree, ready to match.
#[derive(Debug)]
pub struct Matcher {
    domains: HashMap<String, HashMap<String, KeyNodes>>,
    nodes: Vec<Node>,
    rules: Vec<MatchedRule>,
}

impl Matcher {
    /// The trees of `config`.
    #[must_use]
    pub fn new(config: &DescriptorConfig) -> Matcher {
        let mut matcher = Matcher {
            domains: HashMap::new(),
            nodes: Vec::new(),
            rules: Vec::new(),
        };
        for domain in &config.domains {
            let mut identity = String::new();
            push_part(&mut identity, &domain.name);
            let top = matcher.level(&domain.descriptors, &identity, &domain.name);
            matcher.domains.insert(domain.name.clone(), top);
        }
        matcher
    }

    fn level(
        &mut self,
        descriptors: &[DescriptorRule],
        identity: &str,
        path: &str,
    ) -> HashMap<String, KeyNodes> {
        let mut level: HashMap<String, KeyNodes> = HashMap::new();
        for descriptor in descriptors {
            let mut identity = identity.to_owned();
            push_part(&mut identity, &descriptor.key);
            let mut path = format!("{path}.{}", descriptor.key);
            match &descriptor.value {
                ValueMatch::Any => identity.push('a'),
                ValueMatch::Exact(v) => {
                    identity.push('e');
                    push_part(&mut identity, v);
                    path.push('_');
                    path.push_str(v);
                }
                ValueMatch::Prefix(p) => {
                    identity.push('p');
                    push_part(&mut identity, p);
                    path.push('_');
                    path.push_str(p);
                    path.push('*');
                }
            }
            let rule = descriptor.rate_limit.as_ref().map(|limit| {
                self.rules.push(MatchedRule {
                    id: RuleId::from_name(&identity),
                    path: path.clone(),
                    limit: limit.limit,
                    shadow_mode: descriptor.shadow_mode,
                    detailed_metric: descriptor.detailed_metric,
                    name: limit.name.clone(),
                    replaces: limit.replaces.clone(),
                });
                self.rules.len() - 1
            });
            let children = (!descriptor.descriptors.is_empty())
                .then(|| self.level(&descriptor.descriptors, &identity, &path));
            self.nodes.push(Node { rule, children });
            let node = self.nodes.len() - 1;
            let nodes = level.entry(descriptor.key.clone()).or_default();
            match &descriptor.value {
                ValueMatch::Any => nodes.any = Some(node),
                ValueMatch::Exact(v) => {
                    nodes.exact.insert(v.clone(), node);
                }
                ValueMatch::Prefix(p) => nodes.prefixes.push((p.clone(), node)),
            }
        }
        level
    }

    /// The rules, indexed by [`RuleIndex`].
    #[must_use]
    pub fn rules(&self) -> &[MatchedRule] {
        &self.rules
    }

    /// Whether `domain` is configured.
    #[must_use]
    pub fn has_domain(&self, domain: &str) -> bool {
        self.domains.contains_key(domain)
    }

    /// The rule `descriptor` lands on in `domain`, if any (an unknown domain lands nowhere).
    ///
    /// # Examples
    /// ```
    /// use tollgate_filter::{Descriptor, DescriptorConfig, Matcher};
    /// let text = "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 5}\n    descriptors:\n      - key: path\n        value: /admin*\n        rate_limit: {unit: second, requests_per_unit: 1}\n";
    /// let matcher = Matcher::new(&DescriptorConfig::parse(&[("d.yaml", text)])?);
    /// let path = |rule: Option<usize>| rule.map(|r| matcher.rules()[r].path.as_str());
    /// assert_eq!(path(matcher.find("d", &Descriptor::of(&[("user", "ann")]))), Some("d.user"));
    /// let deep = Descriptor::of(&[("user", "ann"), ("path", "/admin/x")]);
    /// assert_eq!(path(matcher.find("d", &deep)), Some("d.user.path_/admin*"));
    /// // The limit is the node of the last entry's: no rule there, no limit.
    /// let other = Descriptor::of(&[("user", "ann"), ("path", "/home")]);
    /// assert_eq!(matcher.find("d", &other), None);
    /// # Ok::<(), tollgate_filter::DescriptorErrors>(())
    /// ```
    #[must_use]
    pub fn find(&self, domain: &str, descriptor: &Descriptor) -> Option<RuleIndex> {
        let mut level = self.domains.get(domain)?;
        let last = descriptor.entries.len().checked_sub(1)?;
        for (i, entry) in descriptor.entries.iter().enumerate() {
            let nodes = level.get(entry.key.as_str())?;
            let node = nodes
                .exact
                .get(entry.value.as_str())
                .or_else(|| {
                    nodes
                        .prefixes
                        .iter()
                        .find(|(prefix, _)| entry.value.starts_with(prefix.as_str()))
                        .map(|(_, node)| node)
                })
                .or(nodes.any.as_ref())?;
            let node = &self.nodes[*node];
            if i == last {
                return node.rule;
            }
            level = node.children.as_ref()?;
        }
        None
    }
}

/// Appends `part` length-prefixed, so no two paths share an identity text.
fn push_part(identity: &mut String, part: &str) {
    identity.push_str(&part.len().to_string());
    identity.push(':');
    identity.push_str(part);
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::config::{Domain, RateLimit, Unit};
    use super::*;

    /// The reference's walk, written as plainly as it reads: at each entry scan the level in
    /// file order for an exact value, then for a prefix, then for a value-less node; the
    /// limit is the one of the node of the last entry; a node without children ends the walk.
    fn naive<'c>(
        config: &'c DescriptorConfig,
        domain: &str,
        d: &Descriptor,
    ) -> Option<&'c DescriptorRule> {
        let mut level = &config
            .domains
            .iter()
            .find(|x| x.name == domain)?
            .descriptors;
        for (i, entry) in d.entries.iter().enumerate() {
            let exact = level
                .iter()
                .find(|r| r.key == entry.key && r.value == ValueMatch::Exact(entry.value.clone()));
            let prefix = || {
                level.iter().find(|r| r.key == entry.key && matches!(&r.value, ValueMatch::Prefix(p) if entry.value.starts_with(p.as_str())))
            };
            let any = || {
                level
                    .iter()
                    .find(|r| r.key == entry.key && r.value == ValueMatch::Any)
            };
            let node = exact.or_else(prefix).or_else(any)?;
            if i + 1 == d.entries.len() {
                return node.rate_limit.as_ref().map(|_| node);
            }
            if node.descriptors.is_empty() {
                return None;
            }
            level = &node.descriptors;
        }
        None
    }

    const KEYS: [&str; 2] = ["a", "b"];
    const VALUES: [&str; 4] = ["", "x", "xy", "y"];

    fn value_match() -> impl Strategy<Value = ValueMatch> {
        prop_oneof![
            Just(ValueMatch::Any),
            (1..VALUES.len()).prop_map(|v| ValueMatch::Exact(VALUES[v].into())),
            (0..VALUES.len()).prop_map(|v| ValueMatch::Prefix(VALUES[v].into())),
        ]
    }

    fn tree(depth: u32) -> BoxedStrategy<Vec<DescriptorRule>> {
        let node = (0..KEYS.len(), value_match(), any::<bool>());
        let children = if depth == 0 {
            Just(Vec::new()).boxed()
        } else {
            tree(depth - 1)
        };
        prop::collection::vec((node, children), 0..5)
            .prop_map(|nodes| {
                let mut seen = Vec::new();
                let mut out = Vec::new();
                for ((key, value, limited), descriptors) in nodes {
                    // One node per (key, value match) at a level, as the config check makes it.
                    if seen.contains(&(key, value.clone())) {
                        continue;
                    }
                    seen.push((key, value.clone()));
                    out.push(DescriptorRule {
                        key: KEYS[key].into(),
                        value,
                        rate_limit: limited.then_some(RateLimit {
                            limit: DescriptorLimit::PerUnit {
                                requests_per_unit: 1,
                                unit: Unit::Second,
                            },
                            name: None,
                            replaces: Vec::new(),
                        }),
                        shadow_mode: false,
                        detailed_metric: false,
                        descriptors,
                        line: 0,
                    });
                }
                out
            })
            .boxed()
    }

    fn descriptor() -> impl Strategy<Value = Descriptor> {
        prop::collection::vec((0..KEYS.len(), 0..VALUES.len()), 0..5).prop_map(|entries| {
            let pairs: Vec<(&str, &str)> =
                entries.iter().map(|&(k, v)| (KEYS[k], VALUES[v])).collect();
            Descriptor::of(&pairs)
        })
    }

    /// A rule's tree position, to compare the compiled match with the naive one: its path.
    fn path_of(rule: &DescriptorRule, config: &DescriptorConfig) -> Option<String> {
        fn walk(rules: &[DescriptorRule], target: &DescriptorRule, prefix: &str) -> Option<String> {
            for r in rules {
                let name = match &r.value {
                    ValueMatch::Any => format!("{prefix}.{}", r.key),
                    ValueMatch::Exact(v) => format!("{prefix}.{}_{v}", r.key),
                    ValueMatch::Prefix(p) => format!("{prefix}.{}_{p}*", r.key),
                };
                if std::ptr::eq(r, target) {
                    return Some(name);
                }
                if let Some(found) = walk(&r.descriptors, target, &name) {
                    return Some(found);
                }
            }
            None
        }
        walk(
            &config.domains[0].descriptors,
            rule,
            &config.domains[0].name,
        )
    }

    proptest! {
        /// The compiled match is the naive walk's, over random trees and descriptors.
        #[test]
        fn the_compiled_match_is_the_naive_walk(
            descriptors in tree(3),
            requests in prop::collection::vec(descriptor(), 1..20),
        ) {
            let config = DescriptorConfig {
                domains: vec![Domain { name: "d".into(), file: String::new(), descriptors }],
            };
            let matcher = Matcher::new(&config);
            for request in &requests {
                let compiled = matcher.find("d", request).map(|r| matcher.rules()[r].path.clone());
                let expected = naive(&config, "d", request).and_then(|r| path_of(r, &config));
                prop_assert_eq!(compiled, expected, "{:?}", request);
                prop_assert_eq!(matcher.find("e", request), None);
            }
        }
    }
}
