//! The admin answers' word on the XDP mode: the kernel's estimate of a source at each level
//! it counts, read from the program's cells, as `/explain` prints it (nothing without an
//! attached program).

use std::fmt::Write as _;
use std::net::IpAddr;

use tollgate_filter::DurationText;

use crate::shared::Shared;

/// `/explain`'s and `/estimate`'s lines for `source`: one per level the kernel counts for its
/// family, with the kernel's estimate and limit; empty without an attached program.
#[must_use]
pub(super) fn explain_lines(shared: &Shared, source: IpAddr) -> String {
    let Some(xdp) = shared.reloader().xdp().get() else {
        return String::new();
    };
    let window = DurationText(xdp.rules().window);
    let mut out = String::new();
    match xdp.estimates(source) {
        Ok(estimates) if estimates.is_empty() => {
            let _ = writeln!(out, "xdp      the kernel counts no level of this family");
        }
        Ok(estimates) => {
            for e in estimates {
                let next = if e.drops_next() { "drops" } else { "passes" };
                let _ = writeln!(
                    out,
                    "xdp      {}: the kernel's estimate {} of {} per {window} ({next} the next attempt)",
                    e.level.name(),
                    e.estimate,
                    e.limit
                );
            }
        }
        Err(err) => {
            xdp.metrics().errors.inc();
            let _ = writeln!(out, "xdp      the kernel's cells cannot be read: {err}");
        }
    }
    out
}

/// The JSON answers' `xdp` field for `source`: `null` without an attached program, else the
/// window and, per level counted, the kernel's estimate, limit and whether its next attempt
/// is dropped.
#[must_use]
pub(super) fn explain_json(shared: &Shared, source: IpAddr) -> serde_json::Value {
    let Some(xdp) = shared.reloader().xdp().get() else {
        return serde_json::Value::Null;
    };
    match xdp.estimates(source) {
        Ok(estimates) => serde_json::json!({
            "window": DurationText(xdp.rules().window).to_string(),
            "levels": estimates.iter().map(|e| serde_json::json!({
                "level": e.level.name(),
                "estimate": e.estimate,
                "limit": e.limit,
                "drops_next": e.drops_next(),
            })).collect::<Vec<_>>(),
        }),
        Err(err) => {
            xdp.metrics().errors.inc();
            serde_json::json!({ "error": err.to_string() })
        }
    }
}

/// The kernel's estimates of `source` by prefix length, where its arrivals are counted and
/// decided by the kernel under the limits it takes (see `gate::ahead::Ahead::left_to_kernel`):
/// `None` without an attached program, for a source of this host or of a family the
/// program does not drop, while the proxy counts every arrival itself, or when the cells
/// cannot be read (`explain_lines` says so). `/explain` decides those limits by these,
/// and `/estimate` and `/top` add them to the proxy's own count.
#[must_use]
pub(super) fn deciding_estimates(shared: &Shared, source: IpAddr) -> Option<Vec<(u32, u64)>> {
    let xdp = shared.reloader().xdp().get()?;
    if !shared.gate().ahead().left_to_kernel(source) {
        return None;
    }
    let estimates = xdp.estimates(source).ok()?;
    Some(
        estimates
            .iter()
            .map(|e| (e.level.prefix(), e.estimate))
            .collect(),
    )
}

/// Reads the kernel's counters into the metrics before a render.
pub(super) fn refresh_metrics(shared: &Shared) {
    if let Some(xdp) = shared.reloader().xdp().get() {
        xdp.refresh_metrics();
    }
}

/// Brings the kernel's allow tries in step with the lists after a run-time change, before the
/// answer: a source allowed by then passes the driver too.
pub(super) fn sync_lists(shared: &Shared) {
    if let Some(xdp) = shared.reloader().xdp().get() {
        xdp.sync_lists_of(shared.filter(), shared.now());
    }
}
