//! Descriptor files: [`DescriptorConfig::parse`] (envoyproxy/ratelimit's YAML, read by the
//! rate-limit service and `tollgate check`) on any text, and the policy it compiles to
//! deciding requests built from its own tree.

use tollgate_filter::{
    Code, Descriptor, DescriptorConfig, DescriptorErrors, DescriptorLimit, DescriptorPolicy,
    DescriptorRule, Entry, Request, ValueMatch,
};
use tollgate_sketch::Tick;

/// The sketch memory the harness compiles a parsed config with: small, so each input is fast.
const COMPILE_MEMORY: usize = 1 << 16;

/// The most requests one input decides, however large its tree.
const MAX_REQUESTS: usize = 256;

/// The name the harness gives the file; every error must carry it.
const FILE: &str = "fuzz.yaml";

/// Parses `data` (when it is UTF-8) as one descriptor file.
///
/// # Panics
/// When an invariant breaks: a refused file with no error, an error that names another file
/// or a line or column outside the text; or, for a file that parses, a request built from a
/// path of its own tree (each node's exact value, or a value its prefix matches) that the
/// matcher does not find although the node it ends on has a `rate_limit`, or a first request
/// to a rule with room for it answered over the limit.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match DescriptorConfig::parse(&[(FILE, text)]) {
        Ok(config) => decide_own_paths(&config),
        Err(errors) => assert_located(text, &errors),
    }
}

/// Asserts that every error of `errors` names [`FILE`] and a place inside `text`.
fn assert_located(text: &str, errors: &DescriptorErrors) {
    assert!(!errors.0.is_empty(), "a refused file with no error");
    let lines: Vec<&str> = text.split('\n').collect();
    for error in &errors.0 {
        assert_eq!(error.file, FILE, "{error}");
        let line = error
            .error
            .line
            .checked_sub(1)
            .and_then(|i| lines.get(i))
            .unwrap_or_else(|| panic!("error at a line of a {}-line text: {error}", lines.len()));
        assert!(
            (1..=line.len() + 1).contains(&error.error.column),
            "error at a column of a {}-byte line: {error}",
            line.len()
        );
    }
}

/// Every path from a top-level descriptor down (at most [`MAX_REQUESTS`]), each with the
/// entries a request would carry to reach its last node: a wildcard or key-only node gets a
/// value starting with `\u{1}`, which an exact sibling may take first.
fn paths<'a>(
    rules: &'a [DescriptorRule],
    above: &mut Vec<Entry>,
    out: &mut Vec<(Vec<Entry>, &'a DescriptorRule)>,
) {
    for rule in rules {
        if out.len() >= MAX_REQUESTS {
            return;
        }
        let value = match &rule.value {
            ValueMatch::Exact(value) => value.clone(),
            // Reached, but an exact sibling may take it first: only paths of exact values
            // are asserted below.
            ValueMatch::Prefix(prefix) => format!("{prefix}\u{1}"),
            ValueMatch::Any => "\u{1}any".to_owned(),
        };
        above.push(Entry::new(rule.key.clone(), value));
        out.push((above.clone(), rule));
        paths(&rule.descriptors, above, out);
        above.pop();
    }
}

/// Compiles `config` and decides one request per path of its tree.
fn decide_own_paths(config: &DescriptorConfig) {
    let Ok(policy) = DescriptorPolicy::new(config, COMPILE_MEMORY, None) else {
        return;
    };
    let now = Tick::from_nanos(1);
    for domain in &config.domains {
        let mut found = Vec::new();
        paths(&domain.descriptors, &mut Vec::new(), &mut found);
        for (entries, rule) in found {
            let exact = entries.iter().all(|e| !e.value.starts_with('\u{1}'));
            let descriptor = Descriptor { entries };
            let matched = policy.matcher().find(&domain.name, &descriptor);
            if exact && all_exact(&domain.descriptors, &descriptor) {
                assert_eq!(
                    matched.is_some(),
                    rule.rate_limit.is_some(),
                    "{descriptor:?} in {}",
                    domain.name
                );
            }
            let request = Request {
                domain: domain.name.clone(),
                descriptors: vec![descriptor],
                hits_addend: 1,
            };
            let Ok(response) = policy.decide(&request, now) else {
                continue;
            };
            // Each path ends on its own node and counts its own key once: a limit above the
            // stated overcount has room for it.
            let room = rule.rate_limit.as_ref().is_some_and(|r| match r.limit {
                DescriptorLimit::Unlimited => true,
                DescriptorLimit::PerUnit {
                    requests_per_unit,
                    unit,
                } => u64::from(requests_per_unit) > 1 + policy.overcount_bound(unit, now),
            });
            let replaces_none = rule
                .rate_limit
                .as_ref()
                .is_some_and(|r| r.replaces.is_empty());
            if exact && room && replaces_none {
                assert_eq!(response.code, Code::Ok, "{:?}", request.descriptors);
            }
        }
    }
}

/// True if every entry of `descriptor` lands on an exact-value node at its level: then the
/// walk cannot prefer another node, so the node the path was built from is the one found.
fn all_exact(mut level: &[DescriptorRule], descriptor: &Descriptor) -> bool {
    for entry in &descriptor.entries {
        let Some(node) = level
            .iter()
            .find(|r| r.key == entry.key && r.value == ValueMatch::Exact(entry.value.clone()))
        else {
            return false;
        };
        level = &node.descriptors;
    }
    true
}
