//! The run-time list entries in a form that outlives the process: expiries as Unix time in
//! milliseconds instead of ticks of this process's monotonic clock. The state file writes
//! what `save` returns and gives it back to `restore` at start.

use std::time::Duration;

use tollgate_filter::{Cidr, ListEntry, ListError, ListKind, RuntimeLists};
use tollgate_sketch::Tick;

/// One run-time list entry as a state file keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SavedEntry {
    /// The network (host bits cleared).
    pub(crate) cidr: Cidr,
    /// Allow or deny.
    pub(crate) kind: ListKind,
    /// When it stops applying, in milliseconds since the Unix epoch.
    pub(crate) expires_unix_ms: u64,
    /// Why it was added.
    pub(crate) reason: String,
}

pub use crate::unix_time::unix_ms as unix_ms_now;

/// The entries of `lists` in force at `now`, which is `unix_ms` on the system clock (see the
/// test `an_entry_saved_and_restored_later_keeps_its_wall_clock_expiry`).
#[must_use]
pub(crate) fn save(lists: &RuntimeLists, now: Tick, unix_ms: u64) -> Vec<SavedEntry> {
    lists
        .entries(now)
        .into_iter()
        .map(|entry| {
            let left =
                u64::try_from(entry.expires.saturating_since(now).as_millis()).unwrap_or(u64::MAX);
            SavedEntry {
                cidr: entry.cidr,
                kind: entry.kind,
                expires_unix_ms: unix_ms.saturating_add(left),
                reason: entry.reason,
            }
        })
        .collect()
}

/// Puts `saved` entries back into `lists` at `now`, which is `unix_ms` on the system clock;
/// entries expired by then are skipped. Returns how many were put back.
///
/// # Errors
/// [`ListError`] if an entry breaks the lists' bounds (an expiry further away than the
/// longest time to live, a reason too long, more entries than the cap); nothing is restored
/// then.
pub(crate) fn restore(
    lists: &RuntimeLists,
    saved: Vec<SavedEntry>,
    now: Tick,
    unix_ms: u64,
) -> Result<usize, ListError> {
    let entries = saved
        .into_iter()
        .filter(|entry| entry.expires_unix_ms > unix_ms)
        .map(|entry| ListEntry {
            cidr: entry.cidr,
            kind: entry.kind,
            expires: now + Duration::from_millis(entry.expires_unix_ms - unix_ms),
            reason: entry.reason,
        })
        .collect();
    lists.restore(entries, now)
}

#[cfg(test)]
mod tests {
    use std::time::{SystemTime, UNIX_EPOCH};

    use super::*;

    /// `save`, then `restore` in a later process whose monotonic clock started elsewhere.
    #[test]
    fn an_entry_saved_and_restored_later_keeps_its_wall_clock_expiry() {
        let before = RuntimeLists::default();
        let hour = Duration::from_secs(3600);
        let cidr = Cidr::parse("192.0.2.0/24").unwrap();
        before
            .add(cidr, ListKind::Deny, hour, "abuse".into(), Tick::ZERO)
            .unwrap();
        let saved = save(&before, Tick::ZERO, 1_700_000_000_000);
        assert_eq!(saved[0].expires_unix_ms, 1_700_003_600_000);
        // A new process, its clock started later, ten minutes on.
        let after = RuntimeLists::default();
        let ten_minutes_on = 1_700_000_600_000;
        assert_eq!(
            restore(&after, saved, Tick::ZERO, ten_minutes_on).unwrap(),
            1
        );
        assert_eq!(
            after.entries(Tick::ZERO)[0].expires,
            Tick::ZERO + Duration::from_secs(3000)
        );
    }

    #[test]
    fn entries_round_trip_through_unix_time_and_expired_ones_stay_out() {
        let hour = Duration::from_secs(3600);
        let lists = RuntimeLists::default();
        let start = Tick::ZERO + hour;
        for (cidr, kind, ttl) in [
            ("2001:db8:1:2::/64", ListKind::Deny, hour),
            ("192.0.2.0/24", ListKind::Allow, hour * 2),
        ] {
            lists
                .add(Cidr::parse(cidr).unwrap(), kind, ttl, cidr.into(), start)
                .unwrap();
        }
        let saved = save(&lists, start, 5_000_000);
        assert_eq!(
            saved
                .iter()
                .map(|s| (s.kind, s.expires_unix_ms))
                .collect::<Vec<_>>(),
            [
                (ListKind::Allow, 5_000_000 + 7_200_000),
                (ListKind::Deny, 5_000_000 + 3_600_000)
            ]
        );
        // Restored 90 minutes later by a process whose clock started at zero.
        let restored = RuntimeLists::default();
        let later = 5_000_000 + 5_400_000;
        assert_eq!(restore(&restored, saved, Tick::ZERO, later), Ok(1));
        let entries = restored.entries(Tick::ZERO);
        assert_eq!(entries[0].cidr, Cidr::parse("192.0.2.0/24").unwrap());
        assert_eq!(entries[0].expires, Tick::ZERO + Duration::from_secs(1800));
        assert_eq!(entries[0].reason, "192.0.2.0/24");
    }

    #[test]
    fn the_clock_is_unix_time_in_milliseconds() {
        let by_the_system_clock = || {
            let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
            u64::try_from(since.as_millis()).unwrap()
        };
        let before = by_the_system_clock();
        let now = unix_ms_now();
        assert!((before..=by_the_system_clock()).contains(&now), "{now}");
    }
}
