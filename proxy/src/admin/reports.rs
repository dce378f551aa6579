//! `GET /top?n=20` and `GET /estimate?source=ADDRESS`, as text or JSON.

use std::fmt::Write as _;
use std::net::IpAddr;

use hyper::StatusCode;
use serde_json::json;
use tollgate_filter::{DurationText, EXACT_MULTIPLE, LimitEstimate, Policy, Source};
use tollgate_sketch::Tick;

use super::answer::{Answer, Format, json, text};
use super::explain::source_of;
use crate::shared::Shared;

use super::kernel;

/// The kernel's count under limit `l` of a source of one family (`ipv6`), if the filter
/// leaves that limit to the kernel (`kernel`: the kernel's estimates by prefix length, from
/// `xdp::deciding_estimates`; `None` while it leaves none).
fn from_kernel(
    policy: &Policy,
    l: &LimitEstimate,
    ipv6: bool,
    kernel: Option<&[(u32, u64)]>,
) -> Option<u64> {
    let kernel = kernel?;
    let rule = policy.rule(l.at.rule)?;
    if !policy.counted_ahead()?.takes(rule, &l.limit, ipv6) {
        return None;
    }
    let at = u32::from(l.prefix.len());
    kernel.iter().find(|(len, _)| *len == at).map(|(_, e)| *e)
}

/// How far over its limits a source stands now: the largest estimate / limit of the limits
/// that apply, and whether that key is past its cap (the factor is then a floor: the key is
/// counted no further, see [`tollgate_filter::Throttle::capped`]). Under the limits the
/// filter leaves to the kernel, the estimate is `/estimate`'s: the kernel's count (`kernel`,
/// as [`from_kernel`] reads it) plus the proxy's own. `None`: no limit applies.
fn over(
    policy: &Policy,
    source: IpAddr,
    now: Tick,
    kernel: Option<&[(u32, u64)]>,
) -> Option<(f64, bool)> {
    let ipv6 = Source::new(source).addr().is_ipv6();
    policy
        .estimates(Source::new(source), now)
        .iter()
        .map(|e| {
            let estimate = e
                .estimate
                .saturating_add(from_kernel(policy, e, ipv6, kernel).unwrap_or(0));
            // Limits are at most MAX_LIMIT (well under 2^53): exact as f64.
            #[allow(clippy::cast_precision_loss)]
            let factor = estimate as f64 / e.limit.rate.count.max(1) as f64;
            (factor, e.capped)
        })
        .max_by(|a, b| a.0.total_cmp(&b.0))
}

/// [`over`] for people: `>=8.1x` past the cap, `2.5x` under it, `-` with no limit.
fn over_text(over: Option<(f64, bool)>) -> String {
    match over {
        Some((factor, true)) => format!(">={factor:.1}x"),
        Some((factor, false)) => format!("{factor:.1}x"),
        None => "-".into(),
    }
}

/// `/top`: the `n` most rejected sources, in the order of their rejections (counted by the
/// offender list, never capped), each with how far over its limits it stands now.
pub(crate) fn top(shared: &Shared, format: Format, n: usize) -> Answer {
    let top = shared.gate().offenders().top(n);
    let policy = shared.filter().policy();
    let now = shared.now();
    if format == Format::Json {
        let rows: Vec<_> = top
            .iter()
            .map(|o| {
                let kernel = super::xdp::deciding_estimates(shared, o.source);
                let over = over(&policy, o.source, now, kernel.as_deref());
                json!({
                    "source": o.source.to_string(),
                    "rejected": o.count,
                    "error": o.error,
                    "over": over.map(|(factor, _)| factor),
                    "capped": over.is_some_and(|(_, capped)| capped),
                    "last": o.last,
                    "kernel": kernel::held(shared, o.source),
                })
            })
            .collect();
        return json(StatusCode::OK, &json!({ "order": "rejected", "top": rows }));
    }
    let mut body = format!(
        "{:<40} {:>10} {:>10} {:>9}{}  last\n",
        "source",
        "rejected",
        "error",
        "over",
        kernel::top_column(shared, None)
    );
    for offender in top {
        let _ = writeln!(
            body,
            "{:<40} {:>10} {:>10} {:>9}{}  {}",
            offender.source.to_string(),
            offender.count,
            offender.error,
            over_text(over(
                &policy,
                offender.source,
                now,
                super::xdp::deciding_estimates(shared, offender.source).as_deref()
            )),
            kernel::top_column(shared, Some(offender.source)),
            offender.last
        );
    }
    let _ = writeln!(
        body,
        "(ordered by rejections; over: estimate / limit now, the kernel's count added under the \
         limits XDP takes, >= past {}x: counted no further)",
        EXACT_MULTIPLE
    );
    text(StatusCode::OK, body)
}

/// `/estimate`: where `source` stands under each limit of each rule, counting nothing; with
/// the XDP mode, the kernel's estimate at each level it counts, and, under the limits the
/// filter leaves to the kernel, the kernel's count added to the proxy's own (what came in
/// through the program is counted there only: see [`crate::gate::ahead`]).
pub(crate) fn estimate(shared: &Shared, format: Format, source: Option<&str>) -> Answer {
    let addr = match source_of(source, "/estimate?source=ADDRESS") {
        Ok(addr) => addr,
        Err(message) => return format.refuse(StatusCode::BAD_REQUEST, &message),
    };
    let policy = shared.filter().policy();
    let found = policy.estimates(Source::new(addr), shared.now());
    let kernel = super::xdp::deciding_estimates(shared, addr);
    let ipv6 = Source::new(addr).addr().is_ipv6();
    let from_kernel = |l: &LimitEstimate| from_kernel(&policy, l, ipv6, kernel.as_deref());
    let rule = |index: usize| policy.rule(index).map_or("?", |r| r.name.as_str());
    let counted_as = |prefix: tollgate_filter::Prefix| {
        format!("{}/{}", Source::new(addr).masked(prefix), prefix.len())
    };
    if format == Format::Json {
        let limits: Vec<_> = found
            .iter()
            .map(|l| {
                let xdp = from_kernel(l);
                json!({
                    "rule": rule(l.at.rule),
                    "limit": l.at.limit,
                    "counted_as": counted_as(l.prefix),
                    "estimate": l.estimate.saturating_add(xdp.unwrap_or(0)),
                    "xdp": xdp,
                    "capped": l.capped,
                    "bound": super::explain::bound(l.capped),
                    "rate": l.limit.rate.to_string(),
                })
            })
            .collect();
        return json(
            StatusCode::OK,
            &json!({
                "source": addr.to_string(),
                "limits": limits,
                "kernel": kernel::held(shared, addr),
                "xdp": super::xdp::explain_json(shared, addr),
            }),
        );
    }
    if found.is_empty() {
        return text(
            StatusCode::OK,
            format!(
                "{addr}: no limit applies (a list decides for it, or no rule matches)\n{}{}",
                kernel::estimate_line(shared, addr),
                super::xdp::explain_lines(shared, addr)
            ),
        );
    }
    let mut body = format!(
        "{:<24} {:>5} {:<44} {:>12} {:>12}\n",
        "rule", "limit", "counted as", "estimate", "allowed"
    );
    let mut added = false;
    for limit in found {
        let xdp = from_kernel(&limit);
        added |= xdp.is_some();
        let _ = writeln!(
            body,
            "{:<24} {:>5} {:<44} {:>12} {:>12}",
            rule(limit.at.rule),
            limit.at.limit,
            counted_as(limit.prefix),
            format!(
                "{}{}",
                if limit.capped { ">= " } else { "" },
                limit.estimate.saturating_add(xdp.unwrap_or(0))
            ),
            format!(
                "{}/{}",
                limit.limit.rate.count,
                DurationText(limit.limit.rate.per)
            ),
        );
    }
    if added {
        body.push_str(
            "(under the limits the kernel takes: its count of what came in through XDP plus the \
             proxy's own)\n",
        );
    }
    body.push_str(&kernel::estimate_line(shared, addr));
    body.push_str(&super::xdp::explain_lines(shared, addr));
    text(StatusCode::OK, body)
}
