//! `GET /top?n=20` and `GET /estimate?source=ADDRESS`, as text or JSON.

use std::fmt::Write as _;

use hyper::StatusCode;
use serde_json::json;
use tollgate_filter::{DurationText, Source};

use super::answer::{Answer, Format, json, text};
use super::explain::source_of;
use crate::kernel;
use crate::shared::Shared;

/// `/top`: the `n` most rejected sources.
pub(crate) fn top(shared: &Shared, format: Format, n: usize) -> Answer {
    let top = shared.offenders.top(n);
    if format == Format::Json {
        let rows: Vec<_> = top
            .iter()
            .map(|o| {
                json!({
                    "source": o.source.to_string(),
                    "rejected": o.count,
                    "error": o.error,
                    "last": o.last,
                    "kernel": kernel::held(shared, o.source),
                })
            })
            .collect();
        return json(StatusCode::OK, &json!({ "top": rows }));
    }
    let mut body = format!(
        "{:<40} {:>10} {:>10}{}  last\n",
        "source",
        "rejected",
        "error",
        kernel::top_column(shared, None)
    );
    for offender in top {
        let _ = writeln!(
            body,
            "{:<40} {:>10} {:>10}{}  {}",
            offender.source.to_string(),
            offender.count,
            offender.error,
            kernel::top_column(shared, Some(offender.source)),
            offender.last
        );
    }
    text(StatusCode::OK, body)
}

/// `/estimate`: where `source` stands under each limit of each rule, counting nothing.
pub(crate) fn estimate(shared: &Shared, format: Format, source: Option<&str>) -> Answer {
    let addr = match source_of(source, "/estimate?source=ADDRESS") {
        Ok(addr) => addr,
        Err(message) => return format.refuse(StatusCode::BAD_REQUEST, &message),
    };
    let policy = shared.filter.policy();
    let found = policy.estimates(Source::new(addr), shared.now());
    let rule = |index: usize| policy.rule(index).map_or("?", |r| r.name.as_str());
    let counted_as = |prefix: tollgate_filter::Prefix| {
        format!("{}/{}", Source::new(addr).masked(prefix), prefix.len())
    };
    if format == Format::Json {
        let limits: Vec<_> = found
            .iter()
            .map(|l| {
                json!({
                    "rule": rule(l.at.rule),
                    "limit": l.at.limit,
                    "counted_as": counted_as(l.prefix),
                    "estimate": l.estimate,
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
            }),
        );
    }
    if found.is_empty() {
        return text(
            StatusCode::OK,
            format!(
                "{addr}: no limit applies (a list decides for it, or no rule matches)\n{}",
                kernel::estimate_line(shared, addr)
            ),
        );
    }
    let mut body = format!(
        "{:<24} {:>5} {:<44} {:>12} {:>12}\n",
        "rule", "limit", "counted as", "estimate", "allowed"
    );
    for limit in found {
        let _ = writeln!(
            body,
            "{:<24} {:>5} {:<44} {:>12} {:>12}",
            rule(limit.at.rule),
            limit.at.limit,
            counted_as(limit.prefix),
            format!(
                "{}{}",
                if limit.capped { ">= " } else { "" },
                limit.estimate
            ),
            format!(
                "{}/{}",
                limit.limit.rate.count,
                DurationText(limit.limit.rate.per)
            ),
        );
    }
    body.push_str(&kernel::estimate_line(shared, addr));
    text(StatusCode::OK, body)
}
