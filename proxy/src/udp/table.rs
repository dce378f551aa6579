//! The session table of one UDP listener: who holds a session, and how many each source, each
//! prefix and the listener hold, so that every cap is checked in O(1) and released in O(1).
//!
//! A source is an IPv4 address or an IPv6 /64 (as for TCP's per-source cap: one host, or one
//! customer's LAN); a prefix is an IPv4 /24 or an IPv6 /48 (one site's allocation). The table
//! never iterates over its sessions: expiry removes one entry at a time (see
//! [`super::session`]).

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use tollgate_filter::{Prefix, Source};

use crate::metrics::Refusal;

/// How many sessions a listener holds at most: per source, per prefix and in all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// Sessions in all.
    pub total: usize,
    /// Sessions of one source (IPv4 address, IPv6 /64).
    pub per_source: u32,
    /// Sessions of one prefix (IPv4 /24, IPv6 /48).
    pub per_prefix: u32,
}

/// Sessions by client address, with the counts the caps need.
#[derive(Debug)]
pub(super) struct SessionTable<S> {
    caps: Caps,
    sessions: HashMap<SocketAddr, Arc<S>>,
    per_source: HashMap<IpAddr, u32>,
    per_prefix: HashMap<IpAddr, u32>,
}

/// The source (IPv4 address, IPv6 /64) `client` counts against.
fn source_of(client: SocketAddr) -> IpAddr {
    let source = Source::new(client.ip());
    source.masked(source.pick(Prefix::V4(32), Prefix::V6(64)))
}

/// The prefix (IPv4 /24, IPv6 /48) `client` counts against.
fn prefix_of(client: SocketAddr) -> IpAddr {
    let source = Source::new(client.ip());
    source.masked(source.pick(Prefix::V4(24), Prefix::V6(48)))
}

fn held(counts: &HashMap<IpAddr, u32>, key: IpAddr) -> u32 {
    counts.get(&key).copied().unwrap_or(0)
}

fn release(counts: &mut HashMap<IpAddr, u32>, key: IpAddr) {
    if let Entry::Occupied(mut entry) = counts.entry(key) {
        *entry.get_mut() -= 1;
        if *entry.get() == 0 {
            entry.remove();
        }
    }
}

impl<S> SessionTable<S> {
    /// An empty table enforcing `caps`.
    pub(super) fn new(caps: Caps) -> SessionTable<S> {
        SessionTable {
            caps,
            sessions: HashMap::new(),
            per_source: HashMap::new(),
            per_prefix: HashMap::new(),
        }
    }

    /// Sessions held.
    pub(super) fn len(&self) -> usize {
        self.sessions.len()
    }

    /// The session of `client`, if it has one.
    pub(super) fn get(&self, client: SocketAddr) -> Option<&Arc<S>> {
        self.sessions.get(&client)
    }

    /// Whether a new session for `client` fits under every cap; if not, the most specific cap
    /// it hits (source, then prefix, then the listener's).
    pub(super) fn admits(&self, client: SocketAddr) -> Result<(), Refusal> {
        if held(&self.per_source, source_of(client)) >= self.caps.per_source {
            Err(Refusal::SourceSessions)
        } else if held(&self.per_prefix, prefix_of(client)) >= self.caps.per_prefix {
            Err(Refusal::PrefixSessions)
        } else if self.sessions.len() >= self.caps.total {
            Err(Refusal::SessionsFull)
        } else {
            Ok(())
        }
    }

    /// Holds `session` for `client` if it fits under every cap (a client that has a session
    /// already keeps the one it has and is refused nothing).
    pub(super) fn insert(&mut self, client: SocketAddr, session: Arc<S>) -> Result<(), Refusal> {
        if self.sessions.contains_key(&client) {
            return Ok(());
        }
        self.admits(client)?;
        self.sessions.insert(client, session);
        *self.per_source.entry(source_of(client)).or_default() += 1;
        *self.per_prefix.entry(prefix_of(client)).or_default() += 1;
        Ok(())
    }

    /// Removes `client`'s session if it is `session` (not a newer one opened since), giving
    /// its place back to its source, prefix and the listener. Whether it was removed.
    pub(super) fn remove(&mut self, client: SocketAddr, session: &Arc<S>) -> bool {
        let Entry::Occupied(entry) = self.sessions.entry(client) else {
            return false;
        };
        if !Arc::ptr_eq(entry.get(), session) {
            return false;
        }
        entry.remove();
        release(&mut self.per_source, source_of(client));
        release(&mut self.per_prefix, prefix_of(client));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPS: Caps = Caps {
        total: 6,
        per_source: 2,
        per_prefix: 3,
    };

    fn at(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[test]
    fn each_cap_refuses_with_its_own_reason() {
        let mut table = SessionTable::new(CAPS);
        table.insert(at("10.0.0.1:1"), Arc::new(())).unwrap();
        table.insert(at("10.0.0.1:2"), Arc::new(())).unwrap();
        assert_eq!(table.admits(at("10.0.0.1:3")), Err(Refusal::SourceSessions));
        table.insert(at("10.0.0.2:1"), Arc::new(())).unwrap();
        assert_eq!(table.admits(at("10.0.0.3:1")), Err(Refusal::PrefixSessions));
        for client in ["10.0.1.1:1", "10.0.2.1:1", "10.0.3.1:1"] {
            table.insert(at(client), Arc::new(())).unwrap();
        }
        assert_eq!(table.admits(at("10.0.4.1:1")), Err(Refusal::SessionsFull));
        assert_eq!(
            table.insert(at("10.0.4.1:1"), Arc::new(())),
            Err(Refusal::SessionsFull)
        );
        assert_eq!(table.len(), 6);
    }

    #[test]
    fn ipv6_sources_are_counted_per_64_and_prefixes_per_48() {
        let mut table = SessionTable::new(CAPS);
        table
            .insert(at("[2001:db8:0:1::1]:1"), Arc::new(()))
            .unwrap();
        table
            .insert(at("[2001:db8:0:1::2]:1"), Arc::new(()))
            .unwrap();
        assert_eq!(
            table.admits(at("[2001:db8:0:1:ffff::3]:1")),
            Err(Refusal::SourceSessions),
            "one /64 is one source"
        );
        table
            .insert(at("[2001:db8:0:2::1]:1"), Arc::new(()))
            .unwrap();
        assert_eq!(
            table.admits(at("[2001:db8:0:ffff::1]:1")),
            Err(Refusal::PrefixSessions),
            "one /48 is one prefix"
        );
        assert_eq!(table.admits(at("[2001:db8:1::1]:1")), Ok(()));
        // IPv4-mapped addresses count as the IPv4 address they carry.
        table.insert(at("192.0.2.1:1"), Arc::new(())).unwrap();
        table.insert(at("192.0.2.1:2"), Arc::new(())).unwrap();
        assert_eq!(
            table.admits(at("[::ffff:192.0.2.1]:3")),
            Err(Refusal::SourceSessions)
        );
    }

    #[test]
    fn removing_gives_the_places_back_and_only_for_the_same_session() {
        let mut table = SessionTable::new(CAPS);
        let first = Arc::new(());
        table.insert(at("10.0.0.1:1"), Arc::clone(&first)).unwrap();
        table.insert(at("10.0.0.1:2"), Arc::new(())).unwrap();
        assert!(
            !table.remove(at("10.0.0.1:1"), &Arc::new(())),
            "another session"
        );
        assert_eq!(table.admits(at("10.0.0.1:3")), Err(Refusal::SourceSessions));
        assert!(table.remove(at("10.0.0.1:1"), &first));
        assert!(!table.remove(at("10.0.0.1:1"), &first), "removed once");
        assert_eq!(table.admits(at("10.0.0.1:3")), Ok(()));
        assert_eq!(table.len(), 1);
        assert!(table.per_source.len() == 1 && table.per_prefix.len() == 1);
    }
}
