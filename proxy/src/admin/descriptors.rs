//! `/explain` for the rate-limit service's descriptors (`[rls]`): which rule a descriptor
//! lands on, its limit and window, its key's estimate with the stated overcount bound and,
//! in a cluster, what the other replicas counted, shadow mode, and what `ShouldRateLimit`
//! would answer now, counting nothing.
//!
//! `GET /explain?domain=DOMAIN&descriptor=KEY:VALUE,KEY:VALUE[&descriptor=...][&hits_addend=N]`:
//! a descriptor's entries in order, separated by `,`, each key from its value by the first
//! `:` (so a value may hold `:`, as an IPv6 address does). A `,` or `%` inside a key or value,
//! or a `:` inside a key, is written `%2C`, `%25`, `%3A`: the split happens before the escapes
//! are decoded. Several `descriptor`s make one request, as Envoy sends them, so `replaces`
//! applies across them.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use hyper::StatusCode;
use serde_json::{Value, json};
use tollgate_filter::{
    Code, Descriptor, DescriptorExplanation, DescriptorLimit, DescriptorPolicy, Entry, Outcome,
    Request,
};

use super::answer::{Answer, Format, decode, json, text};
use super::explain::bound;
use crate::rls::{code_label, outcome_label};
use crate::shared::Shared;

const USAGE: &str = "GET /explain?domain=DOMAIN&descriptor=KEY:VALUE,KEY:VALUE";

/// The answer to `/explain?domain=...`: `domain` and the raw (still escaped) values of every
/// `descriptor` parameter, `hits_addend` as given.
pub(crate) fn explain(
    shared: &Arc<Shared>,
    format: Format,
    domain: &str,
    descriptors: &[&str],
    hits_addend: Option<&str>,
) -> Answer {
    let refuse = |message: &str| format.refuse(StatusCode::BAD_REQUEST, message);
    let Some(rls) = shared.reloader().rls().get() else {
        return refuse("the rate-limit service is not running: no [rls] section");
    };
    let request = match request_of(domain, descriptors, hits_addend) {
        Ok(request) => request,
        Err(message) => return refuse(&message),
    };
    let (policy, explained) = rls.explain(&request);
    let explained = match explained {
        Ok(explained) => explained,
        Err(refusal) => return refuse(&format!("{}: {refusal}", refusal.name())),
    };
    if !policy.matcher().has_domain(&request.domain) {
        return refuse(&format!(
            "domain `{}` is not configured in [rls] configs (the service answers it OK, \
             counting nothing)",
            request.domain
        ));
    }
    match format {
        Format::Json => json(
            StatusCode::OK,
            &to_json(&policy, &request, explained.code, &explained.descriptors),
        ),
        Format::Text => text(
            StatusCode::OK,
            to_text(&policy, &request, explained.code, &explained.descriptors),
        ),
    }
}

/// The request `/explain` reads, or what is wrong with it.
fn request_of(
    domain: &str,
    descriptors: &[&str],
    hits_addend: Option<&str>,
) -> Result<Request, String> {
    if descriptors.is_empty() {
        return Err(format!("say which descriptor: {USAGE}"));
    }
    let descriptors = descriptors
        .iter()
        .enumerate()
        .map(|(at, raw)| descriptor_of(raw).map_err(|e| format!("descriptor {at} `{raw}`: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let hits_addend = match hits_addend {
        None => 0,
        Some(n) => n
            .parse()
            .map_err(|_| format!("hits_addend `{n}` is not a whole number of at most 2^32-1"))
            .map(|n: u32| u64::from(n))?,
    };
    Ok(Request {
        domain: domain.to_owned(),
        descriptors,
        hits_addend,
    })
}

/// One `descriptor` parameter, still escaped: `KEY:VALUE` entries separated by `,`.
fn descriptor_of(raw: &str) -> Result<Descriptor, String> {
    let entries = raw
        .split(',')
        .enumerate()
        .map(|(at, entry)| {
            let (key, value) = entry
                .split_once(':')
                .ok_or_else(|| format!("entry {at} `{entry}` has no `:` between key and value"))?;
            let key =
                decode(key).ok_or_else(|| format!("entry {at}: a bad %-escape in its key"))?;
            let value =
                decode(value).ok_or_else(|| format!("entry {at}: a bad %-escape in its value"))?;
            if key.is_empty() {
                return Err(format!("entry {at} `{entry}` has an empty key"));
            }
            Ok(Entry::new(key, value))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Descriptor { entries })
}

/// Whole milliseconds, rounded up: a time to wait is never said shorter than it is.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

fn rule_json(policy: &DescriptorPolicy, why: &DescriptorExplanation) -> Value {
    let Some(rule) = why.rule.and_then(|r| policy.matcher().rules().get(r)) else {
        return Value::Null;
    };
    let limit = match rule.limit {
        DescriptorLimit::Unlimited => json!("unlimited"),
        DescriptorLimit::PerUnit {
            requests_per_unit,
            unit,
        } => json!({
            "requests_per_unit": requests_per_unit,
            "unit": unit.name(),
            "window_ms": millis(unit.duration()),
        }),
    };
    json!({
        "path": rule.path,
        "name": rule.name,
        "limit": limit,
        "shadow_mode": rule.shadow_mode,
        "replaces": rule.replaces,
    })
}

fn to_json(
    policy: &DescriptorPolicy,
    request: &Request,
    code: Code,
    explained: &[DescriptorExplanation],
) -> Value {
    let descriptors: Vec<Value> = request
        .descriptors
        .iter()
        .zip(explained)
        .map(|(descriptor, why)| {
            let entries: Vec<Value> = descriptor
                .entries
                .iter()
                .map(|e| json!({ "key": e.key, "value": e.value }))
                .collect();
            let mut value = json!({
                "entries": entries,
                "outcome": outcome_label(why.outcome),
                "rule": rule_json(policy, why),
                "code": code_label(why.code),
                "limit_remaining": why.limit_remaining,
            });
            if why.outcome == Outcome::Limited {
                value["estimate"] = json!(why.estimate);
                value["cluster"] = json!(why.cluster);
                value["overcount_bound"] = json!(why.overcount_bound);
                value["capped"] = json!(why.capped);
                value["bound"] = json!(bound(why.capped));
                value["over"] = json!(why.over);
                value["shadowed"] = json!(why.shadowed);
                value["duration_until_reset_ms"] = json!(why.duration_until_reset.map(millis));
            }
            value
        })
        .collect();
    json!({
        "domain": request.domain,
        "hits_addend": request.weight(),
        "code": code_label(code),
        "counted": false,
        "descriptors": descriptors,
    })
}

fn to_text(
    policy: &DescriptorPolicy,
    request: &Request,
    code: Code,
    explained: &[DescriptorExplanation],
) -> String {
    let mut body = format!(
        "domain   {}\nverdict  {} (what ShouldRateLimit would answer now for {} hit{}; nothing \
         counted)\n",
        request.domain,
        code_label(code).to_uppercase(),
        request.weight(),
        if request.weight() == 1 { "" } else { "s" }
    );
    let rules = policy.matcher().rules();
    for (at, (descriptor, why)) in request.descriptors.iter().zip(explained).enumerate() {
        let entries: Vec<String> = descriptor
            .entries
            .iter()
            .map(|e| format!("{}:{}", e.key, e.value))
            .collect();
        let _ = writeln!(body, "descriptor {at}  {}", entries.join(","));
        let rule = why.rule.and_then(|r| rules.get(r));
        match (why.outcome, rule) {
            (Outcome::Limited, Some(rule)) => {
                let _ = writeln!(
                    body,
                    "  rule     {}{}{}",
                    rule.path,
                    rule.name
                        .as_ref()
                        .map_or(String::new(), |n| format!(" (name {n})")),
                    if rule.shadow_mode {
                        ", shadow mode: counted, never enforced"
                    } else {
                        ""
                    }
                );
                if let Some(limit) = why.limit {
                    let _ = writeln!(
                        body,
                        "  limit    {} per {} (a sliding window of {}s)",
                        limit.requests_per_unit,
                        limit.unit.name(),
                        limit.unit.duration().as_secs()
                    );
                }
                let verdict = match (why.over, why.shadowed) {
                    (false, _) => format!("within: OK, {} left after it", why.limit_remaining),
                    (true, true) => format!(
                        "over, in shadow mode: answered OK (room in {}ms)",
                        why.duration_until_reset.map_or(0, millis)
                    ),
                    (true, false) => format!(
                        "over: OVER_LIMIT, room in {}{}ms",
                        if why.capped { "at most " } else { "" },
                        why.duration_until_reset.map_or(0, millis)
                    ),
                };
                // As the address `/explain` says a limit's: what the other replicas counted
                // (0 below the cluster's suspect threshold), added to this one's estimate.
                let cluster = why
                    .cluster
                    .map_or(String::new(), |c| format!(" + {c} from the cluster"));
                let _ = writeln!(
                    body,
                    "  estimate {}{} (overcount at most {}){cluster} -> {verdict}",
                    if why.capped { "at least " } else { "" },
                    why.estimate,
                    why.overcount_bound,
                );
            }
            (Outcome::Unlimited, Some(rule)) => {
                let _ = writeln!(
                    body,
                    "  rule     {} (unlimited): OK, nothing counted",
                    rule.path
                );
            }
            (Outcome::Replaced, Some(rule)) => {
                let _ = writeln!(
                    body,
                    "  rule     {} replaced by another matched rule: OK, nothing counted",
                    rule.path
                );
            }
            _ => body.push_str("  rule     none matches: OK, nothing counted\n"),
        }
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_descriptor_is_split_before_its_escapes_are_decoded() {
        let d = descriptor_of("api_key:abc,remote_address:2001:db8::1,path:/a%2Cb").unwrap();
        let pairs: Vec<(&str, &str)> = d
            .entries
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("api_key", "abc"),
                ("remote_address", "2001:db8::1"),
                ("path", "/a,b")
            ]
        );
        assert_eq!(descriptor_of("k:").unwrap().entries[0].value, "");
    }

    #[test]
    fn the_cluster_count_is_said_in_text_and_json_only_in_a_cluster() {
        let text = "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 10}\n";
        let config = tollgate_filter::DescriptorConfig::parse(&[("api.yaml", text)]).unwrap();
        let policy = DescriptorPolicy::new(&config, 1 << 20, None).unwrap();
        let request = request_of("api", &["k:v"], None).unwrap();
        let now = tollgate_sketch::Tick::from_nanos(1);
        let mut why = policy.explain(&request, now).unwrap();
        let said = |why: &tollgate_filter::RequestExplanation| {
            (
                to_text(&policy, &request, why.code, &why.descriptors),
                to_json(&policy, &request, why.code, &why.descriptors),
            )
        };
        let (alone, alone_json) = said(&why);
        assert!(!alone.contains("cluster"), "{alone}");
        assert_eq!(alone_json["descriptors"][0]["cluster"], Value::Null);
        why.descriptors[0].cluster = Some(4);
        let (text, json) = said(&why);
        assert!(text.contains(") + 4 from the cluster -> "), "{text}");
        assert_eq!(json["descriptors"][0]["cluster"], 4);
    }

    #[test]
    fn malformed_descriptors_are_refused_by_what_is_wrong() {
        let wrong = |raw: &str| descriptor_of(raw).unwrap_err();
        assert!(wrong("api_key").contains("entry 0 `api_key` has no `:`"));
        assert!(wrong("a:1,b").contains("entry 1 `b` has no `:`"));
        assert!(wrong(":v").contains("empty key"));
        assert!(wrong("a:%zz").contains("bad %-escape in its value"));
        let none = request_of("api", &[], None).unwrap_err();
        assert!(none.contains("say which descriptor"), "{none}");
        let weight = request_of("api", &["a:1"], Some("-1")).unwrap_err();
        assert!(weight.contains("hits_addend `-1`"), "{weight}");
        assert_eq!(
            request_of("api", &["a:1"], Some("3")).unwrap().hits_addend,
            3
        );
    }
}
