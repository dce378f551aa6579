//! Run-time allow/deny entries: networks added and removed while the proxy runs (through its
//! admin endpoint), each with a time to live and a reason, laid over the config file's lists.
//!
//! The entries in force are an immutable [`Overlay`] behind an atomic swap: a decision reads
//! it without a lock, and only when the overlay holds an entry (one atomic load otherwise). A
//! change copies the overlay, edits the copy and swaps it in, one change at a time. The
//! overlay is shared by every policy a reload builds (see [`crate::Policy::compile`]), so
//! entries survive reloads.
//!
//! An entry stops applying the moment its expiry passes (the decision compares it with `now`);
//! it is taken out, and counted as expired, by the next change or [`RuntimeLists::sweep`].
//!
//! # Bounds
//!
//! Whoever holds the admin token can add entries, so what they can cost is bounded: at most
//! [`RuntimeLists::capacity`] entries (10,000 by default) with reasons of at most
//! [`MAX_REASON`] bytes, each living at most [`RuntimeLists::max_ttl`] (7 days by default).
//! A change beyond those is refused with a [`ListError`] naming the bound; nothing is evicted
//! to make room. At the cap the overlay holds about 5 MiB (estimated: about 450 bytes per entry
//! with a reason of 256 bytes), twice that while a change copies it.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use tollgate_sketch::Tick;

use crate::key::Source;
use crate::prefix::Prefix;
use crate::prefix_map::{PrefixMap, network};
use crate::rules::Cidr;
use crate::sync::{AtomicU64, AtomicUsize, Mutex, Ordering, Swap};

/// The most bytes a run-time entry's reason may hold.
pub const MAX_REASON: usize = 256;

/// Which list an entry belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ListKind {
    /// Let the network through whatever the limits say.
    Allow,
    /// Refuse the network outright.
    Deny,
}

impl ListKind {
    /// `"allow"` or `"deny"`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ListKind::Allow => "allow",
            ListKind::Deny => "deny",
        }
    }
}

/// One run-time entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListEntry {
    /// The network, host bits cleared (an IPv4-mapped IPv6 network folded to IPv4).
    pub cidr: Cidr,
    /// Its list.
    pub kind: ListKind,
    /// When it stops applying.
    pub expires: Tick,
    /// Why it was added (as the operator wrote it).
    pub reason: String,
}

/// Why a change to the run-time lists was refused; nothing changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListError {
    /// The lists hold their cap of entries already.
    Full {
        /// The cap.
        capacity: usize,
    },
    /// The time to live is zero or longer than the maximum.
    Ttl {
        /// The time to live asked for.
        ttl: Duration,
        /// The longest allowed.
        max: Duration,
    },
    /// The reason is longer than [`MAX_REASON`] bytes.
    Reason {
        /// Its length in bytes.
        len: usize,
    },
    /// There is no such entry to remove.
    NotFound {
        /// The network asked for.
        cidr: Cidr,
        /// The list asked for.
        kind: ListKind,
    },
}

impl fmt::Display for ListError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListError::Full { capacity } => write!(
                f,
                "the run-time lists hold their cap of {capacity} entries: remove some or wait \
                 for them to expire"
            ),
            ListError::Ttl { ttl, max } => write!(
                f,
                "ttl {}s is out of range: it must be more than 0 and at most {}s",
                ttl.as_secs_f64(),
                max.as_secs()
            ),
            ListError::Reason { len } => write!(
                f,
                "reason is {len} bytes long: at most {MAX_REASON} are kept"
            ),
            ListError::NotFound { cidr, kind } => {
                write!(f, "no run-time {} entry for {cidr}", kind.as_str())
            }
        }
    }
}

impl std::error::Error for ListError {}

/// What [`RuntimeLists::merge`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Merged {
    /// Entries put or taken out.
    pub applied: usize,
    /// Entries left out: past the cap, a reason too long, or an expiry too far.
    pub dropped: usize,
}

/// What the run-time lists hold and have done, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListStats {
    /// Allow entries held (expired ones not yet swept included).
    pub allow: usize,
    /// Deny entries held (expired ones not yet swept included).
    pub deny: usize,
    /// Entries added (or replaced) since start.
    pub added: u64,
    /// Entries taken out because their time to live ran out.
    pub expired: u64,
    /// Entries removed on request.
    pub removed: u64,
}

/// The entries of one network.
#[derive(Clone, Debug, Default)]
struct Slot {
    allow: Option<Arc<ListEntry>>,
    deny: Option<Arc<ListEntry>>,
}

/// The entries in force at one moment, immutable.
#[derive(Debug, Default)]
struct Overlay {
    entries: HashMap<(ListKind, Cidr), Arc<ListEntry>>,
    map: PrefixMap<Slot>,
}

impl Overlay {
    fn from_entries(entries: HashMap<(ListKind, Cidr), Arc<ListEntry>>) -> Overlay {
        let mut map: PrefixMap<Slot> = PrefixMap::new();
        let mut slots: HashMap<Cidr, Slot> = HashMap::new();
        for entry in entries.values() {
            let slot = slots.entry(entry.cidr).or_default();
            match entry.kind {
                ListKind::Allow => slot.allow = Some(Arc::clone(entry)),
                ListKind::Deny => slot.deny = Some(Arc::clone(entry)),
            }
        }
        for (cidr, slot) in slots {
            map.insert(cidr.addr, cidr.prefix, slot);
        }
        Overlay { entries, map }
    }

    /// The entry deciding for `source` at `now`: of the networks containing it with an entry
    /// in force, the longest; at one network, deny before allow.
    fn find(&self, source: Source, now: Tick) -> Option<(Prefix, &Arc<ListEntry>)> {
        self.map.matches(source).find_map(|(prefix, slot)| {
            live(&slot.deny, now)
                .or_else(|| live(&slot.allow, now))
                .map(|entry| (prefix, entry))
        })
    }
}

fn live(entry: &Option<Arc<ListEntry>>, now: Tick) -> Option<&Arc<ListEntry>> {
    entry.as_ref().filter(|e| now < e.expires)
}

/// The run-time allow/deny entries shared by a filter's policies (see the module docs).
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use tollgate_filter::{Cidr, ListKind, RuntimeLists, Source};
/// use tollgate_sketch::Tick;
/// let lists = RuntimeLists::default();
/// let hour = Duration::from_secs(3600);
/// lists.add(Cidr::parse("203.0.113.0/24")?, ListKind::Deny, hour, "scraper".into(), Tick::ZERO)?;
/// let source = Source::new("203.0.113.9".parse()?);
/// assert_eq!(lists.find(source, Tick::ZERO).map(|e| e.kind), Some(ListKind::Deny));
/// assert_eq!(lists.find(source, Tick::ZERO + hour), None, "expired");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct RuntimeLists {
    overlay: Swap<Overlay>,
    /// Entries in `overlay`: 0 lets a decision skip it with one load.
    held: AtomicUsize,
    /// Held for the whole of a change, so that two changes never both edit one copy.
    changing: Mutex<()>,
    added: AtomicU64,
    expired: AtomicU64,
    removed: AtomicU64,
    capacity: usize,
    max_ttl: Duration,
}

impl Default for RuntimeLists {
    fn default() -> Self {
        RuntimeLists::new(
            RuntimeLists::DEFAULT_CAPACITY,
            RuntimeLists::DEFAULT_MAX_TTL,
        )
    }
}

impl RuntimeLists {
    /// The default cap on entries, both lists together.
    pub const DEFAULT_CAPACITY: usize = 10_000;
    /// The default longest time to live.
    pub const DEFAULT_MAX_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

    /// Empty lists holding at most `capacity` entries of at most `max_ttl` each.
    #[must_use]
    pub fn new(capacity: usize, max_ttl: Duration) -> RuntimeLists {
        RuntimeLists {
            overlay: Swap::new(Arc::new(Overlay::default())),
            held: AtomicUsize::new(0),
            changing: Mutex::new(()),
            added: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            removed: AtomicU64::new(0),
            capacity,
            max_ttl,
        }
    }

    /// The cap on entries, both lists together.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The longest time to live an entry may be given.
    #[must_use]
    pub fn max_ttl(&self) -> Duration {
        self.max_ttl
    }

    /// Adds `cidr` to the `kind` list from `now` for `ttl`, or replaces its entry there (a new
    /// expiry and reason). Applies to the next decision. Returns the entry as stored (its
    /// network with host bits cleared) and whether it replaced one.
    ///
    /// # Errors
    /// [`ListError::Ttl`] for a zero time to live or one over [`RuntimeLists::max_ttl`],
    /// [`ListError::Reason`] for a reason over [`MAX_REASON`] bytes, [`ListError::Full`] at the
    /// cap (entries whose time to live has run out are taken out first).
    pub fn add(
        &self,
        cidr: Cidr,
        kind: ListKind,
        ttl: Duration,
        reason: String,
        now: Tick,
    ) -> Result<(ListEntry, bool), ListError> {
        if ttl.is_zero() || ttl > self.max_ttl {
            return Err(ListError::Ttl {
                ttl,
                max: self.max_ttl,
            });
        }
        let entry = ListEntry {
            cidr: normal(cidr),
            kind,
            expires: now + ttl,
            reason,
        };
        self.put(vec![entry], now).map(|mut done| done.remove(0))
    }

    /// Puts back entries saved before (see the proxy's state file), each keeping its expiry;
    /// entries already expired at `now` are skipped. Returns how many were put back.
    ///
    /// # Errors
    /// As [`RuntimeLists::add`]; an expiry further than [`RuntimeLists::max_ttl`] from `now`
    /// is refused as a time to live. Nothing is restored if one entry is refused.
    pub fn restore(&self, entries: Vec<ListEntry>, now: Tick) -> Result<usize, ListError> {
        let mut live = Vec::with_capacity(entries.len().min(self.capacity));
        for entry in entries {
            if entry.expires <= now {
                continue;
            }
            let ttl = entry.expires.saturating_since(now);
            if ttl > self.max_ttl {
                return Err(ListError::Ttl {
                    ttl,
                    max: self.max_ttl,
                });
            }
            live.push(ListEntry {
                cidr: normal(entry.cidr),
                ..entry
            });
        }
        self.put(live, now).map(|done| done.len())
    }

    /// Lays changes that came from the rest of a cluster over these lists (the proxy's
    /// cluster carries what [`crate::Remote::list_entry_added`] and
    /// [`crate::Remote::list_entry_removed`] report on another node): takes out the entries of
    /// `removes` that are held, then puts `puts`, each keeping its expiry, in one change.
    ///
    /// Unlike [`RuntimeLists::add`] nothing is refused as a whole, and this node's bounds hold
    /// whatever another node sends: an entry that would grow the lists past their cap, whose
    /// reason is over [`MAX_REASON`] bytes or whose expiry is further than
    /// [`RuntimeLists::max_ttl`] from `now` is left out and counted in [`Merged::dropped`];
    /// one already expired at `now` is skipped (and not counted).
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use tollgate_filter::{Cidr, ListEntry, ListKind, RuntimeLists};
    /// use tollgate_sketch::Tick;
    /// let lists = RuntimeLists::new(1, Duration::from_secs(3600));
    /// let entry = |cidr: &str| ListEntry {
    ///     cidr: Cidr::parse(cidr).unwrap(),
    ///     kind: ListKind::Deny,
    ///     expires: Tick::ZERO + Duration::from_secs(60),
    ///     reason: "from edge-2".into(),
    /// };
    /// let merged = lists.merge(vec![entry("192.0.2.0/24"), entry("198.51.100.0/24")], &[], Tick::ZERO);
    /// assert_eq!((merged.applied, merged.dropped), (1, 1), "at the cap of 1");
    /// ```
    pub fn merge(&self, puts: Vec<ListEntry>, removes: &[(ListKind, Cidr)], now: Tick) -> Merged {
        let result = self.change(now, |held| {
            let mut merged = Merged::default();
            for &(kind, cidr) in removes {
                if held.remove(&(kind, normal(cidr))).is_some() {
                    merged.applied += 1;
                    // Relaxed: a statistic.
                    self.removed.fetch_add(1, Ordering::Relaxed);
                }
            }
            for entry in puts {
                if entry.expires <= now {
                    continue;
                }
                let key = (entry.kind, normal(entry.cidr));
                let fits = held.contains_key(&key) || held.len() < self.capacity;
                if !fits
                    || entry.reason.len() > MAX_REASON
                    || entry.expires.saturating_since(now) > self.max_ttl
                {
                    merged.dropped += 1;
                    continue;
                }
                held.insert(
                    key,
                    Arc::new(ListEntry {
                        cidr: key.1,
                        ..entry
                    }),
                );
                merged.applied += 1;
                // Relaxed: a statistic.
                self.added.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, ListError>(merged)
        });
        // The edit above never fails.
        result.unwrap_or_default()
    }

    fn put(&self, entries: Vec<ListEntry>, now: Tick) -> Result<Vec<(ListEntry, bool)>, ListError> {
        if let Some(long) = entries.iter().find(|e| e.reason.len() > MAX_REASON) {
            return Err(ListError::Reason {
                len: long.reason.len(),
            });
        }
        self.change(now, |held| {
            let mut done = Vec::with_capacity(entries.len());
            for entry in entries {
                let key = (entry.kind, entry.cidr);
                let replaces = held.contains_key(&key);
                if !replaces && held.len() >= self.capacity {
                    return Err(ListError::Full {
                        capacity: self.capacity,
                    });
                }
                held.insert(key, Arc::new(entry.clone()));
                done.push((entry, replaces));
            }
            // Relaxed: a statistic.
            self.added.fetch_add(done.len() as u64, Ordering::Relaxed);
            Ok(done)
        })
    }

    /// Removes `cidr`'s entry from the `kind` list (host bits are ignored).
    ///
    /// # Errors
    /// [`ListError::NotFound`] if there is none (or it has expired).
    pub fn remove(&self, cidr: Cidr, kind: ListKind, now: Tick) -> Result<ListEntry, ListError> {
        let cidr = normal(cidr);
        self.change(now, |held| {
            let entry = held
                .remove(&(kind, cidr))
                .ok_or(ListError::NotFound { cidr, kind })?;
            // Relaxed: a statistic.
            self.removed.fetch_add(1, Ordering::Relaxed);
            Ok(ListEntry::clone(&entry))
        })
    }

    /// Takes out the entries whose time to live has run out by `now`, counting them as
    /// expired; returns how many. Decisions ignore them already: this frees their memory and
    /// keeps the counts in [`RuntimeLists::stats`] current.
    pub fn sweep(&self, now: Tick) -> usize {
        // A cheap look first: most sweeps find nothing to do and need not copy.
        let due = self
            .overlay
            .with(|o| o.entries.values().any(|e| e.expires <= now));
        if !due {
            return 0;
        }
        let before = self.overlay.with(|o| o.entries.len());
        let _ = self.change(now, |_| Ok::<(), ListError>(()));
        before.saturating_sub(self.overlay.with(|o| o.entries.len()))
    }

    /// Runs `edit` on a copy of the entries with the expired ones taken out, and swaps the
    /// copy in if it succeeds.
    fn change<R>(
        &self,
        now: Tick,
        edit: impl FnOnce(&mut HashMap<(ListKind, Cidr), Arc<ListEntry>>) -> Result<R, ListError>,
    ) -> Result<R, ListError> {
        // A change that panicked stored nothing: the overlay in force is whole, go on.
        let _one_at_a_time = self.changing.lock().unwrap_or_else(|e| e.into_inner());
        let mut held = self.overlay.with(|o| o.entries.clone());
        let before = held.len();
        held.retain(|_, e| now < e.expires);
        let expired = before - held.len();
        if expired > 0 {
            // Expired entries go even when the edit is refused.
            // Relaxed: a statistic.
            self.expired.fetch_add(expired as u64, Ordering::Relaxed);
            self.publish(held.clone());
        }
        let result = edit(&mut held)?;
        self.publish(held);
        Ok(result)
    }

    fn publish(&self, held: HashMap<(ListKind, Cidr), Arc<ListEntry>>) {
        let len = held.len();
        self.overlay.store(Arc::new(Overlay::from_entries(held)));
        // Release, after the store: a decision that reads a count above 0 then loads an
        // overlay at least this new. (An add racing a decision may miss that one decision
        // either way; it applies to every decision that starts after `add` returns.)
        self.held.store(len, Ordering::Release);
    }

    /// Whether no entry is held (the decision path's first look).
    #[inline]
    #[must_use]
    pub fn is_empty(&self) -> bool {
        // Acquire: pairs with the Release in `change` (see there).
        self.held.load(Ordering::Acquire) == 0
    }

    /// The entry deciding for `source` at `now`, if any: of the networks holding it with an
    /// entry in force, the longest; at one network, a deny entry before an allow one.
    #[must_use]
    pub fn find(&self, source: Source, now: Tick) -> Option<Arc<ListEntry>> {
        self.find_with(source, now, |_, entry| Arc::clone(entry))
    }

    /// [`RuntimeLists::find`] without taking a reference count: `f` gets the matching
    /// network's prefix and the entry.
    #[inline]
    pub(crate) fn find_with<R>(
        &self,
        source: Source,
        now: Tick,
        f: impl FnOnce(Prefix, &Arc<ListEntry>) -> R,
    ) -> Option<R> {
        if self.is_empty() {
            return None;
        }
        self.overlay
            .with(|o| o.find(source, now).map(|(prefix, entry)| f(prefix, entry)))
    }

    /// The entries in force at `now`, allow entries first, each list by network.
    #[must_use]
    pub fn entries(&self, now: Tick) -> Vec<ListEntry> {
        let mut entries: Vec<ListEntry> = self.overlay.with(|o| {
            o.entries
                .values()
                .filter(|e| now < e.expires)
                .map(|e| ListEntry::clone(e))
                .collect()
        });
        entries.sort_by_key(|e| (e.kind, order(e.cidr)));
        entries
    }

    /// Entries held per list and what was added, expired and removed since start.
    #[must_use]
    pub fn stats(&self) -> ListStats {
        let (allow, deny) = self.overlay.with(|o| {
            let allow = o
                .entries
                .keys()
                .filter(|(k, _)| *k == ListKind::Allow)
                .count();
            (allow, o.entries.len() - allow)
        });
        ListStats {
            allow,
            deny,
            // Relaxed: statistics.
            added: self.added.load(Ordering::Relaxed),
            expired: self.expired.load(Ordering::Relaxed),
            removed: self.removed.load(Ordering::Relaxed),
        }
    }
}

/// `cidr` as the lists hold it: host bits cleared, IPv4-mapped folded to IPv4.
fn normal(cidr: Cidr) -> Cidr {
    let (addr, prefix) = network(cidr.addr, cidr.prefix);
    Cidr { addr, prefix }
}

/// A sort key: IPv4 networks before IPv6 ones, by address then length.
fn order(cidr: Cidr) -> (u8, u128, u8) {
    match cidr.addr {
        IpAddr::V4(v4) => (4, u128::from(u32::from(v4)), cidr.prefix.len()),
        IpAddr::V6(v6) => (6, u128::from(v6), cidr.prefix.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    fn cidr(text: &str) -> Cidr {
        Cidr::parse(text).unwrap()
    }

    fn source(text: &str) -> Source {
        Source::new(text.parse().unwrap())
    }

    #[test]
    fn the_longest_network_decides_and_deny_wins_at_one_network() {
        let lists = RuntimeLists::default();
        let t = Tick::ZERO;
        lists
            .add(cidr("10.0.0.0/8"), ListKind::Deny, HOUR, "wide".into(), t)
            .unwrap();
        lists
            .add(
                cidr("10.1.0.0/16"),
                ListKind::Allow,
                HOUR,
                "office".into(),
                t,
            )
            .unwrap();
        let found = |s| lists.find(source(s), t).map(|e| (e.kind, e.cidr));
        assert_eq!(
            found("10.1.2.3"),
            Some((ListKind::Allow, cidr("10.1.0.0/16")))
        );
        assert_eq!(
            found("10.2.2.3"),
            Some((ListKind::Deny, cidr("10.0.0.0/8")))
        );
        lists
            .add(cidr("10.1.9.9/16"), ListKind::Deny, HOUR, "both".into(), t)
            .unwrap();
        assert_eq!(
            found("10.1.2.3"),
            Some((ListKind::Deny, cidr("10.1.0.0/16")))
        );
        assert_eq!(found("192.0.2.1"), None);
    }

    #[test]
    fn an_expired_entry_stops_applying_at_once_and_a_shorter_one_takes_over() {
        let lists = RuntimeLists::default();
        let t = Tick::ZERO;
        lists
            .add(
                cidr("2001:db8::/32"),
                ListKind::Deny,
                HOUR * 2,
                "long".into(),
                t,
            )
            .unwrap();
        lists
            .add(
                cidr("2001:db8:1:2::/64"),
                ListKind::Allow,
                HOUR,
                "short".into(),
                t,
            )
            .unwrap();
        let inside = source("2001:db8:1:2::7");
        assert_eq!(
            lists
                .find(inside, t + (HOUR - Duration::from_nanos(1)))
                .unwrap()
                .kind,
            ListKind::Allow
        );
        assert_eq!(lists.find(inside, t + HOUR).unwrap().kind, ListKind::Deny);
        assert_eq!(lists.stats().expired, 0, "not swept yet");
        assert_eq!(lists.sweep(t + HOUR), 1);
        let stats = lists.stats();
        assert_eq!(
            (stats.allow, stats.deny, stats.expired, stats.added),
            (0, 1, 1, 2)
        );
        assert_eq!(lists.find(inside, t + HOUR * 2), None);
        assert_eq!(lists.entries(t + HOUR * 2), Vec::new());
    }

    #[test]
    fn bounds_are_refused_by_name_and_change_nothing() {
        let lists = RuntimeLists::new(2, HOUR);
        let t = Tick::ZERO;
        let add =
            |c: &str, ttl, reason: &str| lists.add(cidr(c), ListKind::Deny, ttl, reason.into(), t);
        assert_eq!(
            add("192.0.2.1", HOUR * 2, ""),
            Err(ListError::Ttl {
                ttl: HOUR * 2,
                max: HOUR
            })
        );
        assert!(matches!(
            add("192.0.2.1", Duration::ZERO, ""),
            Err(ListError::Ttl { .. })
        ));
        let long = "x".repeat(MAX_REASON + 1);
        assert_eq!(
            add("192.0.2.1", HOUR, &long),
            Err(ListError::Reason {
                len: MAX_REASON + 1
            })
        );
        add("192.0.2.1", HOUR, "a").unwrap();
        add("192.0.2.2", HOUR, "b").unwrap();
        assert_eq!(
            add("192.0.2.3", HOUR, "c"),
            Err(ListError::Full { capacity: 2 })
        );
        // Replacing an entry at the cap is not growing.
        let (entry, replaced) = add("192.0.2.2/32", HOUR, "b again").unwrap();
        assert!(replaced);
        assert_eq!(entry.reason, "b again");
        assert_eq!(lists.entries(t).len(), 2);
        // Once one expires there is room again.
        assert!(
            lists
                .add(
                    cidr("192.0.2.3"),
                    ListKind::Deny,
                    HOUR,
                    "c".into(),
                    t + HOUR
                )
                .is_ok()
        );
        assert_eq!(lists.stats().expired, 2);
        assert_eq!(
            lists.remove(cidr("192.0.2.9"), ListKind::Deny, t + HOUR),
            Err(ListError::NotFound {
                cidr: cidr("192.0.2.9/32"),
                kind: ListKind::Deny
            })
        );
    }

    #[test]
    fn networks_are_stored_with_host_bits_cleared_and_mapped_ones_folded() {
        let lists = RuntimeLists::default();
        let (entry, _) = lists
            .add(
                cidr("::ffff:198.51.100.77/120"),
                ListKind::Deny,
                HOUR,
                String::new(),
                Tick::ZERO,
            )
            .unwrap();
        assert_eq!(entry.cidr, cidr("198.51.100.0/24"));
        assert!(
            lists
                .remove(cidr("198.51.100.1/24"), ListKind::Deny, Tick::ZERO)
                .is_ok()
        );
        assert!(lists.is_empty());
    }

    #[test]
    fn a_merge_keeps_this_nodes_bounds_and_counts_what_it_leaves_out() {
        let lists = RuntimeLists::new(2, HOUR);
        let t = Tick::ZERO;
        lists
            .add(cidr("192.0.2.1"), ListKind::Deny, HOUR, "here".into(), t)
            .unwrap();
        let entry = |c: &str, expires, reason: &str| ListEntry {
            cidr: cidr(c),
            kind: ListKind::Deny,
            expires,
            reason: reason.into(),
        };
        let merged = lists.merge(
            vec![
                entry("192.0.2.2", t + HOUR, "fits"),
                entry("192.0.2.3", t + HOUR, "past the cap"),
                entry("192.0.2.1", t + HOUR, "replaces, at the cap"),
                entry("192.0.2.4", t + HOUR * 2, "too far"),
                entry("192.0.2.5", t, "expired: skipped"),
            ],
            &[],
            t,
        );
        assert_eq!(
            merged,
            Merged {
                applied: 2,
                dropped: 2
            }
        );
        let reasons: Vec<String> = lists.entries(t).into_iter().map(|e| e.reason).collect();
        assert_eq!(reasons, ["replaces, at the cap", "fits"]);
        let long = "x".repeat(MAX_REASON + 1);
        let merged = lists.merge(
            vec![
                entry("192.0.2.9", t + HOUR, &long),
                entry("192.0.2.6/24", t + HOUR, ""),
            ],
            &[
                (ListKind::Deny, cidr("192.0.2.2/32")),
                (ListKind::Allow, cidr("192.0.2.1")),
            ],
            t,
        );
        // One taken out (the allow entry is not held), then the /24 fits; the long reason not.
        assert_eq!(
            merged,
            Merged {
                applied: 2,
                dropped: 1
            }
        );
        assert_eq!(lists.entries(t)[0].cidr, cidr("192.0.2.0/24"));
    }

    #[test]
    fn the_defaults_are_the_documented_bounds_and_errors_name_them() {
        let lists = RuntimeLists::default();
        assert_eq!(lists.capacity(), 10_000);
        assert_eq!(lists.max_ttl(), Duration::from_secs(7 * 24 * 3600));
        let small = RuntimeLists::new(3, HOUR);
        assert_eq!((small.capacity(), small.max_ttl()), (3, HOUR));
        assert_eq!(
            [ListKind::Allow.as_str(), ListKind::Deny.as_str()],
            ["allow", "deny"]
        );
        let messages = [
            ListError::Full { capacity: 3 }.to_string(),
            ListError::Ttl {
                ttl: Duration::from_millis(1500),
                max: HOUR,
            }
            .to_string(),
            ListError::Reason { len: 300 }.to_string(),
            ListError::NotFound {
                cidr: cidr("192.0.2.0/24"),
                kind: ListKind::Allow,
            }
            .to_string(),
        ];
        assert_eq!(
            messages,
            [
                "the run-time lists hold their cap of 3 entries: remove some or wait for them \
                 to expire",
                "ttl 1.5s is out of range: it must be more than 0 and at most 3600s",
                "reason is 300 bytes long: at most 256 are kept",
                "no run-time allow entry for 192.0.2.0/24",
            ]
        );
    }

    #[test]
    fn a_merge_takes_each_bound_up_to_its_edge_and_not_past_it() {
        let lists = RuntimeLists::new(100, HOUR);
        let t = Tick::ZERO + HOUR;
        let entry = |c: &str, expires, reason: String| ListEntry {
            cidr: cidr(c),
            kind: ListKind::Deny,
            expires,
            reason,
        };
        let ns = Duration::from_nanos(1);
        let merged = lists.merge(
            vec![
                entry("192.0.2.1", t + HOUR, String::new()),
                entry("192.0.2.2", t + HOUR + ns, String::new()),
                entry("192.0.2.3", t + ns, "x".repeat(MAX_REASON)),
                entry("192.0.2.4", t + ns, "x".repeat(MAX_REASON + 1)),
            ],
            &[],
            t,
        );
        assert_eq!(
            merged,
            Merged {
                applied: 2,
                dropped: 2
            }
        );
        let held: Vec<Cidr> = lists.entries(t).into_iter().map(|e| e.cidr).collect();
        assert_eq!(held, [cidr("192.0.2.1"), cidr("192.0.2.3")]);
        // As `add` does.
        let longest = "x".repeat(MAX_REASON);
        assert!(
            lists
                .add(cidr("192.0.2.5"), ListKind::Deny, HOUR, longest, t)
                .is_ok()
        );
    }

    #[test]
    fn entries_list_allow_first_then_ipv4_before_ipv6_by_address_and_stats_count_each_list() {
        let lists = RuntimeLists::default();
        let t = Tick::ZERO;
        for (c, kind) in [
            ("2001:db8::/32", ListKind::Allow),
            ("198.51.100.0/24", ListKind::Deny),
            ("192.0.2.0/24", ListKind::Allow),
            ("192.0.2.0/25", ListKind::Allow),
            ("10.0.0.0/8", ListKind::Deny),
        ] {
            lists.add(cidr(c), kind, HOUR, String::new(), t).unwrap();
        }
        let listed: Vec<(ListKind, Cidr)> = lists
            .entries(t)
            .into_iter()
            .map(|e| (e.kind, e.cidr))
            .collect();
        assert_eq!(
            listed,
            [
                (ListKind::Allow, cidr("192.0.2.0/24")),
                (ListKind::Allow, cidr("192.0.2.0/25")),
                (ListKind::Allow, cidr("2001:db8::/32")),
                (ListKind::Deny, cidr("10.0.0.0/8")),
                (ListKind::Deny, cidr("198.51.100.0/24")),
            ]
        );
        let stats = lists.stats();
        assert_eq!((stats.allow, stats.deny, stats.added), (3, 2, 5));
    }

    #[test]
    fn a_sweep_takes_out_entries_when_every_one_has_expired() {
        let lists = RuntimeLists::default();
        let t = Tick::ZERO;
        lists
            .add(cidr("192.0.2.1"), ListKind::Deny, HOUR, String::new(), t)
            .unwrap();
        assert_eq!(lists.sweep(t + (HOUR - Duration::from_nanos(1))), 0);
        assert_eq!(lists.sweep(t + HOUR), 1);
        assert!(lists.is_empty());
        assert_eq!(lists.stats().expired, 1);
    }

    #[test]
    fn restore_keeps_expiries_and_skips_the_expired() {
        let lists = RuntimeLists::default();
        let t = Tick::ZERO + HOUR;
        let saved = vec![
            ListEntry {
                cidr: cidr("192.0.2.0/24"),
                kind: ListKind::Allow,
                expires: t + HOUR,
                reason: "kept".into(),
            },
            ListEntry {
                cidr: cidr("192.0.2.0/25"),
                kind: ListKind::Deny,
                expires: t,
                reason: "gone".into(),
            },
        ];
        assert_eq!(lists.restore(saved, t), Ok(1));
        assert_eq!(lists.entries(t)[0].expires, t + HOUR);
        let far = vec![ListEntry {
            cidr: cidr("192.0.2.9"),
            kind: ListKind::Deny,
            expires: t + HOUR * 1000,
            reason: String::new(),
        }];
        assert!(matches!(lists.restore(far, t), Err(ListError::Ttl { .. })));
    }

    #[test]
    fn restore_takes_an_expiry_exactly_max_ttl_away_and_clears_host_bits() {
        let lists = RuntimeLists::new(10, HOUR);
        let t = Tick::ZERO + HOUR;
        let saved = vec![ListEntry {
            cidr: cidr("192.0.2.77/24"),
            kind: ListKind::Deny,
            expires: t + HOUR,
            reason: "at the edge".into(),
        }];
        assert_eq!(lists.restore(saved, t), Ok(1));
        assert_eq!(lists.entries(t)[0].cidr, cidr("192.0.2.0/24"));
        // Held under its network, so the operator's remove by network finds it.
        assert!(
            lists
                .remove(cidr("192.0.2.0/24"), ListKind::Deny, t)
                .is_ok()
        );
        assert!(lists.is_empty());
    }
}
