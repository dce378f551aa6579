//! The system clock as Unix time: what is written down for another process or machine to read
//! (saved state, list expiries, dataset ids, the offset to Redis's clock). Decisions never use
//! it; they run on the monotonic clock.

use std::time::{SystemTime, UNIX_EPOCH};

/// The time since the Unix epoch in the units `in_units` counts a duration in, saturating at `u64::MAX` (0 if the
/// system clock is before the epoch).
fn since_epoch(in_units: impl FnOnce(std::time::Duration) -> u128) -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(in_units(d)).unwrap_or(u64::MAX))
}

/// Unix time now in milliseconds (0 if the clock is before 1970).
#[must_use]
pub fn unix_ms() -> u64 {
    since_epoch(|d| d.as_millis())
}

/// Unix time now in microseconds (0 if the clock is before 1970).
#[must_use]
pub(crate) fn unix_us() -> u64 {
    since_epoch(|d| d.as_micros())
}

/// Unix time now in nanoseconds (0 if the clock is before 1970).
#[must_use]
pub(crate) fn unix_ns() -> u64 {
    since_epoch(|d| d.as_nanos())
}
