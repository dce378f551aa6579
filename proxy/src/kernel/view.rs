//! What the updater last pushed into the kernel, kept for the admin endpoint (`/top`,
//! `/estimate`): whether a source is held and for how long, answered from memory, never by
//! asking nft.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tollgate_filter::{Prefix, Source};

use super::deny_list::Network;

/// The networks the kernel holds, as the updater last committed them.
#[derive(Debug, Default)]
pub(crate) struct View(Mutex<Held>);

#[derive(Debug, Default)]
struct Held {
    /// Each network and when its timeout ends (`None`: the `deny` list's, no timeout).
    until: HashMap<Network, Option<Instant>>,
    /// The prefix lengths in `until`, per family (`true` for IPv4): a lookup masks the
    /// source to each.
    lengths: BTreeSet<(bool, u8)>,
}

/// How the kernel holds a source: the network that covers it, and for how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hold {
    /// The held network's address.
    pub(crate) network: IpAddr,
    /// Its prefix length.
    pub(crate) len: u8,
    /// The time left (`None`: a `deny` entry, held while listed).
    pub(crate) left: Option<Duration>,
}

/// `192.0.2.0/24 for 2.3s`, or `192.0.2.0/24 while denied`.
impl fmt::Display for Hold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.left {
            Some(left) => write!(
                f,
                "{}/{} for {:.1}s",
                self.network,
                self.len,
                left.as_secs_f64()
            ),
            None => write!(f, "{}/{} while denied", self.network, self.len),
        }
    }
}

impl View {
    /// Holding nothing.
    #[must_use]
    pub(crate) fn new() -> View {
        View::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        // Each write replaces the whole value: a panic elsewhere left it whole.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The kernel holds exactly `networks` now (after a commit; an empty list after the table
    /// went).
    pub(crate) fn set(&self, networks: impl IntoIterator<Item = (Network, Option<Instant>)>) {
        let until: HashMap<Network, Option<Instant>> = networks.into_iter().collect();
        let lengths = until
            .keys()
            .map(|(network, len)| (network.is_ipv4(), *len))
            .collect();
        *self.lock() = Held { until, lengths };
    }

    /// How the kernel holds `source` at `now`, if it does (the longest held network that
    /// covers it).
    #[must_use]
    pub(crate) fn hold(&self, source: IpAddr, now: Instant) -> Option<Hold> {
        let source = Source::new(source);
        let v4 = source.addr().is_ipv4();
        let held = self.lock();
        for &(_, len) in held.lengths.iter().rev().filter(|(f, _)| *f == v4) {
            let prefix = if v4 {
                Prefix::v4(u32::from(len))
            } else {
                Prefix::v6(u32::from(len))
            };
            // Lengths come from held networks of this family: always valid.
            let Ok(prefix) = prefix else { continue };
            let network = source.masked(prefix);
            match held.until.get(&(network, len)) {
                Some(None) => {
                    return Some(Hold {
                        network,
                        len,
                        left: None,
                    });
                }
                Some(Some(until)) if *until > now => {
                    return Some(Hold {
                        network,
                        len,
                        left: Some(*until - now),
                    });
                }
                _ => {}
            }
        }
        None
    }

    /// For `/top`: `192.0.2.0/24 for 2.3s`, or `-` when not held.
    #[must_use]
    pub(crate) fn column(&self, source: IpAddr) -> String {
        self.hold(source, Instant::now())
            .map_or_else(|| "-".to_owned(), |hold| hold.to_string())
    }

    /// For the admin endpoint: `held in the kernel as 192.0.2.0/24 for 2.3s`, or `not held
    /// in the kernel`.
    #[must_use]
    pub(crate) fn describe(&self, source: IpAddr) -> String {
        match self.hold(source, Instant::now()) {
            Some(hold) => format!("held in the kernel as {hold}"),
            None => "not held in the kernel".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_is_held_by_the_longest_live_network_that_covers_it() {
        let view = View::new();
        let now = Instant::now();
        let at = |s: &str| s.parse::<IpAddr>().unwrap();
        view.set([
            ((at("192.0.2.0"), 24), Some(now + Duration::from_secs(3))),
            ((at("192.0.2.7"), 32), Some(now + Duration::from_secs(9))),
            ((at("198.51.100.0"), 24), None),
            ((at("203.0.113.5"), 32), Some(now + Duration::from_secs(1))),
            ((at("2001:db8::"), 64), Some(now + Duration::from_secs(2))),
        ]);
        let hold = view.hold(at("192.0.2.7"), now).unwrap();
        assert_eq!((hold.len, hold.left), (32, Some(Duration::from_secs(9))));
        assert_eq!(hold.to_string(), "192.0.2.7/32 for 9.0s");
        let hold = view.hold(at("192.0.2.8"), now).unwrap();
        assert_eq!(hold.to_string(), "192.0.2.0/24 for 3.0s");
        assert_eq!(
            view.hold(at("198.51.100.200"), now).unwrap().to_string(),
            "198.51.100.0/24 while denied"
        );
        assert_eq!(view.hold(at("2001:db8::5"), now).unwrap().len, 64);
        // An IPv4-mapped source is its IPv4 address.
        assert_eq!(view.hold(at("::ffff:192.0.2.8"), now).unwrap().len, 24);
        // Expired, or never held.
        let later = now + Duration::from_secs(2);
        assert_eq!(view.hold(at("203.0.113.5"), later), None);
        assert_eq!(view.hold(at("192.0.3.1"), now), None);
        assert_eq!(view.describe(at("192.0.3.1")), "not held in the kernel");
        view.set([]);
        assert_eq!(view.hold(at("192.0.2.7"), now), None);
    }

    #[test]
    fn a_network_is_let_go_the_instant_its_timeout_ends() {
        // The kernel's timeout ends at `until`: from then on the source is not held, and
        // `/top`'s column reads `-`.
        let view = View::new();
        let now = Instant::now();
        let source = "192.0.2.7".parse::<IpAddr>().unwrap();
        view.set([((source, 32), Some(now))]);
        assert_eq!(view.hold(source, now), None);
        assert_eq!(view.column(source), "-");
        view.set([((source, 32), None)]);
        assert_eq!(view.column(source), "192.0.2.7/32 while denied");
    }
}
