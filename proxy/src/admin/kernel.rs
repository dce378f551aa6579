//! The admin answers' word on the kernel fast path: what [`crate::kernel::View`] holds for a
//! source, as `/top`, `/estimate` and `/explain` print it (nothing without `[kernel]`).

use std::net::IpAddr;
use std::time::Instant;

use crate::shared::Shared;

/// `/top`'s kernel column for `source` (`None`: the header): whether and how long the
/// kernel holds it, padded; empty without `[kernel]`.
#[must_use]
pub(super) fn top_column(shared: &Shared, source: Option<IpAddr>) -> String {
    if shared.reloader().kernel().borrow().is_none() {
        return String::new();
    }
    match source {
        None => format!(" {:<36}", "kernel"),
        Some(source) => format!(" {:<36}", shared.kernel_view().column(source)),
    }
}

/// `/estimate`'s last line for `source`: `ADDRESS: held in the kernel as ...` or `... not
/// held in the kernel`; empty without `[kernel]`.
#[must_use]
pub(super) fn estimate_line(shared: &Shared, source: IpAddr) -> String {
    if shared.reloader().kernel().borrow().is_none() {
        return String::new();
    }
    format!("{source}: {}\n", shared.kernel_view().describe(source))
}

/// The JSON answers' `kernel` field for `source`: `null` without `[kernel]` or when not held,
/// else the network held and the seconds left (`null` for a deny entry, held while listed).
#[must_use]
pub(super) fn held(shared: &Shared, source: IpAddr) -> serde_json::Value {
    if shared.reloader().kernel().borrow().is_none() {
        return serde_json::Value::Null;
    }
    match shared.kernel_view().hold(source, Instant::now()) {
        Some(hold) => serde_json::json!({
            "network": format!("{}/{}", hold.network, hold.len),
            "seconds_left": hold.left.map(|left| left.as_secs_f64()),
        }),
        None => serde_json::Value::Null,
    }
}
