//! `GET /explain?source=ADDRESS[&transport=tcp|udp]`: why a source gets the verdict it gets,
//! as text or JSON (see [`tollgate_filter::Policy::explain`]). Counts nothing.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::time::Duration;

use hyper::StatusCode;
use serde_json::{Value, json};
use tollgate_filter::{
    DenyReason, DurationText, Event, Explanation, LimitExplanation, LimitRef, Listed, Policy,
    Source, Throttle, Transport, Verdict,
};
use tollgate_sketch::Tick;

use super::answer::{Answer, Format, json, text};
use crate::shared::Shared;

use super::kernel;
use crate::state::lists::unix_ms_now;

/// Answers `/explain` for `source` (the query's text) on `transport` (`tcp` when absent).
pub(crate) fn explain(
    shared: &Shared,
    format: Format,
    source: Option<&str>,
    transport: Option<&str>,
) -> Answer {
    let addr = match source_of(source, "/explain?source=ADDRESS") {
        Ok(addr) => addr,
        Err(message) => return format.refuse(StatusCode::BAD_REQUEST, &message),
    };
    let transport = match transport {
        None | Some("tcp") => Transport::Tcp,
        Some("udp") => Transport::Udp,
        Some(other) => {
            return format.refuse(
                StatusCode::BAD_REQUEST,
                &format!("transport `{other}` is neither `tcp` nor `udp`"),
            );
        }
    };
    let policy = shared.filter().policy();
    let now = shared.now();
    let kernel = super::xdp::deciding_estimates(shared, addr);
    let kernel = kernel.as_deref();
    let why = explained(&policy, Source::new(addr), transport, now, kernel);
    // The kernel fast path's hold on the source, if `[kernel]` is on (what its updater last
    // committed; see `crate::kernel::View`).
    // The cluster node that added the run-time entry deciding, if it travels.
    let node = why
        .listed
        .as_ref()
        .and_then(|listed| listed.entry.as_ref())
        .and_then(|entry| super::lists::origin(shared, entry));
    match format {
        Format::Json => {
            let mut value = to_json(&policy, &why, now, kernel);
            if let Some(node) = &node {
                value["list"]["node"] = json!(node);
            }
            value["kernel"] = kernel::held(shared, addr);
            value["xdp"] = super::xdp::explain_json(shared, addr);
            json(StatusCode::OK, &value)
        }
        Format::Text => {
            let mut body = to_text(&policy, &why, now, kernel);
            if let Some(node) = &node {
                let _ = writeln!(body, "node     the list entry was added on node {node}");
            }
            body.push_str(&kernel::estimate_line(shared, addr));
            body.push_str(&super::xdp::explain_lines(shared, addr));
            text(StatusCode::OK, body)
        }
    }
}

/// [`Policy::explain`] for `source`; while the XDP program counts ahead for it (`kernel`:
/// the kernel's estimates by prefix length), the limits the kernel takes are counted and
/// decided there, so the proxy's own count under them (near 0) is left out of the decision
/// (as the data path leaves it out, see [`Policy::decide_counted_ahead`]).
fn explained(
    policy: &Policy,
    source: Source,
    transport: Transport,
    now: Tick,
    kernel: Option<&[(u32, u64)]>,
) -> Explanation {
    let mut why = policy.explain(source, transport, now);
    if kernel.is_some() {
        let event = Event {
            source: why.source,
            transport,
            bytes: 0,
        };
        why.decision = policy.peek_counted_ahead(&event, now);
    }
    why
}

/// The address in `source`, or a refusal naming what is wrong (`usage` when it is absent).
pub(crate) fn source_of(source: Option<&str>, usage: &str) -> Result<IpAddr, String> {
    let source = source.ok_or_else(|| format!("say which source: {usage}"))?;
    source
        .parse()
        .map_err(|_| format!("source `{source}` is not an IP address"))
}

/// Whole milliseconds, rounded up: a time to wait is never said shorter than it is.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// What the numbers of a limit's reading are: `exact` below the cap (the estimate is an
/// upper bound of the true count and the retry-after an estimate of when it is back under);
/// past it the true count is at least the estimate and the retry-after is at most what is
/// said (see [`tollgate_filter::Throttle::capped`]).
pub(crate) fn bound(capped: bool) -> &'static str {
    if capped {
        "estimate at least, retry_after at most"
    } else {
        "exact"
    }
}

/// "at least " before a capped key's estimate, nothing before another.
fn at_least(capped: bool) -> &'static str {
    if capped { "at least " } else { "" }
}

/// The kernel's estimate under `limit`, where the kernel counts and decides it for the
/// source explained (`kernel`: its estimates by prefix length, from
/// `xdp::deciding_estimates`; `None` while the proxy decides every limit itself), or `None`
/// where the proxy does.
fn by_kernel(
    policy: &Policy,
    why: &Explanation,
    limit: &LimitExplanation,
    kernel: Option<&[(u32, u64)]>,
) -> Option<u64> {
    let kernel = kernel?;
    let rule = policy.rule(limit.at.rule)?;
    if !policy
        .counted_ahead()?
        .takes(rule, &limit.limit, why.source.addr().is_ipv6())
    {
        return None;
    }
    let at = u32::from(limit.prefix.len());
    kernel.iter().find(|(len, _)| *len == at).map(|(_, e)| *e)
}

/// The first limit, in file order, under which the kernel drops the source's next attempt
/// (its estimate has reached the limit), with the kernel's estimate; `None` while a list
/// decides for the source or the kernel drops nothing of it. The program runs before the
/// proxy: its drop is the verdict.
fn kernel_drop(
    policy: &Policy,
    why: &Explanation,
    kernel: Option<&[(u32, u64)]>,
) -> Option<(LimitRef, u64, u64)> {
    if why.listed.is_some() {
        return None;
    }
    why.rules.iter().flat_map(|r| &r.limits).find_map(|l| {
        let estimate = by_kernel(policy, why, l, kernel)?;
        (estimate >= l.limit.rate.count).then_some((l.at, estimate, l.limit.rate.count))
    })
}

fn rule_name(policy: &Policy, index: usize) -> &str {
    policy.rule(index).map_or("?", |r| r.name.as_str())
}

fn throttle_json(policy: &Policy, throttle: &Throttle) -> Value {
    json!({
        "rule": rule_name(policy, throttle.at.rule),
        "limit": throttle.at.limit,
        "estimate": throttle.estimate,
        "allowed": throttle.allowed,
        "retry_after_ms": millis(throttle.retry_after),
        "capped": throttle.capped,
        "bound": bound(throttle.capped),
        "action": throttle.action.as_str(),
    })
}

fn verdict_json(policy: &Policy, verdict: &Verdict) -> Value {
    match verdict {
        Verdict::Allow => json!({ "verdict": "allow" }),
        Verdict::Throttle(throttle) => {
            let mut value = throttle_json(policy, throttle);
            value["verdict"] = json!("throttle");
            value
        }
        Verdict::Deny(DenyReason::Listed(cidr)) => {
            json!({ "verdict": "deny", "reason": "listed", "cidr": cidr.to_string() })
        }
        Verdict::Deny(DenyReason::Penalty { rule }) => {
            json!({ "verdict": "deny", "reason": "penalty", "rule": rule_name(policy, *rule) })
        }
        Verdict::Deny(DenyReason::Malformed(malformed)) => {
            json!({ "verdict": "deny", "reason": "malformed", "detail": malformed.to_string() })
        }
    }
}

fn listed_json(listed: &Listed, now: Tick, unix_ms: u64) -> Value {
    let mut value = json!({
        "list": listed.kind.as_str(),
        "cidr": listed.cidr.to_string(),
        "origin": if listed.entry.is_some() { "runtime" } else { "file" },
    });
    if let Some(entry) = &listed.entry {
        let left = millis(entry.expires.saturating_since(now));
        value["reason"] = json!(entry.reason);
        value["expires_in_ms"] = json!(left);
        value["expires_unix_ms"] = json!(unix_ms.saturating_add(left));
    }
    value
}

/// A limit's JSON; `kernel`: the kernel's estimate where the kernel counts and decides the
/// limit (its `estimate` and `over` are then the kernel's, the proxy's own count is
/// `proxy_estimate`, and no `retry_after_ms` is said).
fn limit_json(policy: &Policy, limit: &LimitExplanation, kernel: Option<u64>) -> Value {
    let mut value = json!({
        "limit": limit.at.limit,
        "rate": limit.limit.rate.to_string(),
        "count": limit.limit.rate.count,
        "period_ms": millis(limit.limit.rate.per),
        "weight": policy.rule(limit.at.rule).map_or("?", |r| r.weight.as_str()),
        "counted_as": format!("{}/{}", limit.network, limit.prefix.len()),
        "prefix": limit.prefix.len(),
        "estimate": limit.estimate,
        "overcount_bound": limit.overcount_bound,
        "reserved_per_thread": limit.reserved_per_thread,
        "cluster": limit.cluster,
        "over": limit.over,
        "retry_after_ms": limit.retry_after.map(millis),
        "capped": limit.capped,
        "bound": bound(limit.capped),
        "counted_by": "proxy",
    });
    if let Some(estimate) = kernel {
        value["counted_by"] = json!("kernel");
        value["proxy_estimate"] = json!(limit.estimate);
        value["estimate"] = json!(estimate);
        value["over"] = json!(estimate >= limit.limit.rate.count);
        value["retry_after_ms"] = Value::Null;
    }
    value
}

fn to_json(policy: &Policy, why: &Explanation, now: Tick, kernel: Option<&[(u32, u64)]>) -> Value {
    let unix_ms = unix_ms_now();
    let rules: Vec<Value> = why
        .rules
        .iter()
        .map(|rule| {
            let config = policy.rule(rule.rule);
            json!({
                "rule": rule_name(policy, rule.rule),
                "index": rule.rule,
                "action": config.map(|r| r.action.as_str()),
                "shadow": config.is_some_and(|r| r.shadow),
                "protocol": config.map(|r| r.protocol.as_str()),
                "penalty": rule.penalty.map(|p| json!({
                    "length_ms": millis(p.length),
                    "serving": p.left.is_some(),
                    "left_ms": p.left.map(millis),
                })),
                "limits": rule
                    .limits
                    .iter()
                    .map(|l| limit_json(policy, l, by_kernel(policy, why, l, kernel)))
                    .collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "source": why.source.addr().to_string(),
        "transport": match why.transport {
            Transport::Udp => "udp",
            _ => "tcp",
        },
        "verdict": match kernel_drop(policy, why, kernel) {
            Some((at, estimate, limit)) => json!({
                "verdict": "drop",
                "by": "kernel",
                "rule": rule_name(policy, at.rule),
                "limit": at.limit,
                "estimate": estimate,
                "allowed": limit,
            }),
            None => verdict_json(policy, &why.decision.verdict),
        },
        "shadow": why.decision.shadow.map(|t| throttle_json(policy, &t)),
        "list": why.listed.as_ref().map(|l| listed_json(l, now, unix_ms)),
        "rules": rules,
        "cluster": why.cluster,
    })
}

fn verdict_text(policy: &Policy, verdict: &Verdict) -> String {
    match verdict {
        Verdict::Allow => "allow".into(),
        Verdict::Throttle(t) => format!(
            "throttle by rule {} limit {} (estimate {}{}, {} allowed; retry after {}{}ms; action {})",
            rule_name(policy, t.at.rule),
            t.at.limit,
            at_least(t.capped),
            t.estimate,
            t.allowed,
            if t.capped { "at most " } else { "" },
            millis(t.retry_after),
            t.action.as_str()
        ),
        Verdict::Deny(DenyReason::Listed(cidr)) => format!("deny: listed ({cidr})"),
        Verdict::Deny(DenyReason::Penalty { rule }) => {
            format!(
                "deny: serving the penalty of rule {}",
                rule_name(policy, *rule)
            )
        }
        Verdict::Deny(DenyReason::Malformed(m)) => format!("deny: malformed ({m})"),
    }
}

fn to_text(policy: &Policy, why: &Explanation, now: Tick, kernel: Option<&[(u32, u64)]>) -> String {
    let verdict = match kernel_drop(policy, why, kernel) {
        Some((at, estimate, limit)) => format!(
            "drop in the kernel (XDP) by rule {} limit {} (the kernel's estimate {estimate} of \
             {limit}: it drops the next attempt)",
            rule_name(policy, at.rule),
            at.limit
        ),
        None => verdict_text(policy, &why.decision.verdict),
    };
    let mut body = format!("source   {}\nverdict  {verdict}\n", why.source.addr());
    if let Some(shadow) = why.decision.shadow {
        let _ = writeln!(
            body,
            "shadow   {}",
            verdict_text(policy, &Verdict::Throttle(shadow))
        );
    }
    match &why.listed {
        None => body.push_str("list     no entry matches\n"),
        Some(listed) => {
            let _ = write!(body, "list     {} {}", listed.kind.as_str(), listed.cidr);
            match &listed.entry {
                None => body.push_str(" (config file)\n"),
                Some(entry) => {
                    let _ = writeln!(
                        body,
                        " (run time, expires in {}s: {:?})",
                        entry.expires.saturating_since(now).as_secs(),
                        entry.reason
                    );
                }
            }
            body.push_str("         a list decides first: the rules below are not consulted\n");
        }
    }
    if why.rules.is_empty() {
        body.push_str("rules    none applies\n");
    }
    for rule in &why.rules {
        let config = policy.rule(rule.rule);
        let _ = write!(
            body,
            "rule     {} (action {}{})",
            rule_name(policy, rule.rule),
            config.map_or("?", |r| r.action.as_str()),
            if config.is_some_and(|r| r.shadow) {
                ", shadow"
            } else {
                ""
            }
        );
        match rule.penalty {
            None => body.push('\n'),
            Some(p) => match p.left {
                None => {
                    let _ = writeln!(body, "; penalty {}, not serving", DurationText(p.length));
                }
                Some(left) => {
                    let _ = writeln!(
                        body,
                        "; penalty {}, serving: {}ms left",
                        DurationText(p.length),
                        millis(left)
                    );
                }
            },
        }
        for limit in &rule.limits {
            if let Some(estimate) = by_kernel(policy, why, limit, kernel) {
                // The proxy's own count here is of arrivals that did not cross the program
                // (another listener, a PROXY header): said only where there is any.
                let own = match limit.estimate {
                    0 => String::new(),
                    own => format!(" (and {own} counted by the proxy, not through XDP)"),
                };
                let _ = writeln!(
                    body,
                    "  limit {} {:<12} counted as {}/{}: counted and decided by the kernel (XDP): \
                     the kernel's estimate {estimate} of {}{own} -> {}",
                    limit.at.limit,
                    limit.limit.rate.to_string(),
                    limit.network,
                    limit.prefix.len(),
                    limit.limit.rate.count,
                    if estimate >= limit.limit.rate.count {
                        "over (the kernel drops the next attempt)"
                    } else {
                        "within"
                    }
                );
                continue;
            }
            let cluster = limit
                .cluster
                .map_or(String::new(), |c| format!(" + {c} from the cluster"));
            // Hot keys' events counted ahead by each counting thread (see the filter's
            // `LimitExplanation::reserved_per_thread`): said only where there can be any.
            let reserved = match limit.reserved_per_thread {
                0 => String::new(),
                r => format!(" + {r} per counting thread"),
            };
            let _ = writeln!(
                body,
                "  limit {} {:<12} counted as {}/{}: estimate {}{} (overcount at most {}{}){} -> {}",
                limit.at.limit,
                limit.limit.rate.to_string(),
                limit.network,
                limit.prefix.len(),
                at_least(limit.capped),
                limit.estimate,
                limit.overcount_bound,
                reserved,
                cluster,
                match limit.retry_after {
                    Some(retry) if limit.capped => format!(
                        "over (past {}x its limit: counted no further), back under in at most {}ms",
                        tollgate_filter::EXACT_MULTIPLE,
                        millis(retry)
                    ),
                    Some(retry)
                        if limit.estimate.saturating_add(limit.cluster.unwrap_or(0))
                            <= limit.limit.rate.count =>
                    {
                        format!(
                            "at the limit (the next event is over), room in {}ms",
                            millis(retry)
                        )
                    }
                    Some(retry) => format!("over, back under in {}ms", millis(retry)),
                    None => "within".into(),
                }
            );
        }
    }
    body
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tollgate_filter::{Config, CountedAhead, Filter};

    use super::*;

    /// While the kernel counts ahead for a source, a limit it takes is said to be the
    /// kernel's, with the kernel's estimate, and the verdict follows the kernel's estimate,
    /// not the proxy's own count under that limit; without it, today's lines.
    #[test]
    fn a_limit_the_kernel_takes_is_explained_by_the_kernels_estimate() {
        let config = Config::parse(
            "[[rule]]\nname = \"r\"\nlimits = [{ rate = \"5/10s\" }, { rate = \"9/1m\" }]\n",
        )
        .unwrap();
        let filter = Filter::new(config).unwrap();
        let ahead = CountedAhead {
            window: Duration::from_secs(10),
            ipv4: vec![32, 24],
            ipv6: vec![128, 64, 48],
        };
        filter.count_ahead(Some(ahead), Tick::ZERO).unwrap();
        let policy = filter.policy();
        let source = Source::new("192.0.2.1".parse().unwrap());
        let event = Event {
            source,
            transport: Transport::Udp,
            bytes: 0,
        };
        // Counted by the proxy (before the program was on every interface, say): 7 of 5.
        for _ in 0..7 {
            let _ = policy.decide(&event, Tick::ZERO);
        }
        let explain = |kernel: Option<&[(u32, u64)]>| {
            let why = explained(&policy, source, Transport::Udp, Tick::ZERO, kernel);
            (
                to_text(&policy, &why, Tick::ZERO, kernel),
                to_json(&policy, &why, Tick::ZERO, kernel),
            )
        };

        // The proxy decides every limit: its own count throttles.
        let (text, json) = explain(None);
        assert!(
            text.contains("verdict  throttle by rule r limit 0"),
            "{text}"
        );
        assert!(text.contains("192.0.2.1/32: estimate 7 "), "{text}");
        assert_eq!(json["rules"][0]["limits"][0]["counted_by"], "proxy");

        // The kernel counts 2 of 5: within, whatever the proxy counted before.
        let (text, json) = explain(Some(&[(32, 2), (24, 2)]));
        assert!(text.contains("verdict  allow\n"), "{text}");
        assert!(
            text.contains(
                "192.0.2.1/32: counted and decided by the kernel (XDP): the kernel's estimate 2 \
                 of 5 (and 7 counted by the proxy, not through XDP) -> within"
            ),
            "{text}"
        );
        // The one-minute limit is not the kernel's: the proxy's line as before.
        assert!(text.contains("192.0.2.1/32: estimate 7 "), "{text}");
        let limit = &json["rules"][0]["limits"][0];
        assert_eq!(limit["counted_by"], "kernel", "{json}");
        assert_eq!(limit["estimate"], 2, "{json}");
        assert_eq!(limit["proxy_estimate"], 7, "{json}");
        assert_eq!(limit["over"], false, "{json}");
        assert_eq!(json["rules"][0]["limits"][1]["counted_by"], "proxy");
        assert_eq!(json["verdict"]["verdict"], "allow", "{json}");

        // The kernel counts 5 of 5: it drops the next attempt.
        let (text, json) = explain(Some(&[(32, 5), (24, 5)]));
        assert!(
            text.contains(
                "verdict  drop in the kernel (XDP) by rule r limit 0 (the kernel's estimate 5 of 5"
            ),
            "{text}"
        );
        assert!(text.contains("of 5 (and 7 counted by the proxy, not through XDP) -> over"));
        assert_eq!(json["verdict"]["verdict"], "drop", "{json}");
        assert_eq!(json["verdict"]["by"], "kernel", "{json}");
        assert_eq!(json["verdict"]["estimate"], 5, "{json}");
        assert_eq!(json["rules"][0]["limits"][0]["over"], true, "{json}");
    }
}
