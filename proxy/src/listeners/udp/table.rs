//! The session table of one UDP listener: who holds a session, and how many each source, each
//! prefix and the listener hold, so that every cap is checked in O(1) and released in O(1).
//!
//! A source is an IPv4 address or an IPv6 /64 (as for TCP's per-source cap: one host, or one
//! customer's LAN); a prefix is an IPv4 /24 or an IPv6 /48 (one site's allocation). The table
//! never iterates over its sessions: expiry removes one entry at a time (see
//! [`super::session`]).
//!
//! A session whose client has sent one datagram only is *fresh*: that is all a spoofed source
//! can leave behind (it never sees the replies, so it has no reason to talk on). When the
//! listener's cap is reached, a new client takes the place of the oldest fresh session, so a
//! flood of one-datagram sources churns through the fresh sessions instead of locking new
//! clients out for a whole session timeout; a session whose client has sent again is never
//! evicted, only expired. The fresh sessions are a queue in creation order whose stale entries
//! (confirmed, expired or evicted since) are dropped when they reach its front: O(1) amortised,
//! at most two entries per place in the table.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use tollgate_filter::{Prefix, Source};

use crate::listener_metrics::Refusal;

/// How many sessions a listener holds at most: per source, per prefix and in all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Caps {
    /// Sessions in all.
    pub(crate) total: usize,
    /// Sessions of one source (IPv4 address, IPv6 /64).
    pub(crate) per_source: u32,
    /// Sessions of one prefix (IPv4 /24, IPv6 /48).
    pub(crate) per_prefix: u32,
}

/// Sessions by client address, with the counts the caps need.
#[derive(Debug)]
pub(super) struct SessionTable<S> {
    caps: Caps,
    sessions: HashMap<SocketAddr, Held<S>>,
    per_source: HashMap<IpAddr, u32>,
    per_prefix: HashMap<IpAddr, u32>,
    /// Fresh sessions, oldest first, by client and creation number; stale entries included.
    fresh: VecDeque<(SocketAddr, u64)>,
    /// Sessions created so far: the next one's number.
    created: u64,
}

/// A held session.
#[derive(Debug)]
struct Held<S> {
    session: Arc<S>,
    /// Its creation number, which tells it from a later session of the same client.
    number: u64,
    /// Whether its client has sent more than one datagram.
    confirmed: bool,
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
            fresh: VecDeque::new(),
            created: 0,
        }
    }

    /// Sessions held.
    pub(super) fn len(&self) -> usize {
        self.sessions.len()
    }

    /// The session of `client`, which has just sent a further datagram (so its session is
    /// confirmed), if it has one.
    pub(super) fn again(&mut self, client: SocketAddr) -> Option<&Arc<S>> {
        self.sessions.get_mut(&client).map(|held| {
            held.confirmed = true;
            &held.session
        })
    }

    /// The client of the oldest fresh session, dropping the stale entries before it.
    fn oldest_fresh(&mut self) -> Option<SocketAddr> {
        while let Some(&(client, number)) = self.fresh.front() {
            match self.sessions.get(&client) {
                Some(held) if held.number == number && !held.confirmed => return Some(client),
                _ => {
                    self.fresh.pop_front();
                }
            }
        }
        None
    }

    /// Whether a new session for `client` fits under every cap (the listener's by evicting
    /// the oldest fresh session); if not, the most specific cap it hits (source, then prefix,
    /// then the listener's).
    pub(super) fn admits(&mut self, client: SocketAddr) -> Result<(), Refusal> {
        if held(&self.per_source, source_of(client)) >= self.caps.per_source {
            Err(Refusal::SourceSessions)
        } else if held(&self.per_prefix, prefix_of(client)) >= self.caps.per_prefix {
            Err(Refusal::PrefixSessions)
        } else if self.sessions.len() >= self.caps.total && self.oldest_fresh().is_none() {
            Err(Refusal::SessionsFull)
        } else {
            Ok(())
        }
    }

    /// Holds `session` for `client` if it fits under every cap (a client that has a session
    /// already keeps the one it has and is refused nothing). If the listener's cap is reached,
    /// the oldest fresh session makes room: it is returned, for the caller to close.
    pub(super) fn insert(
        &mut self,
        client: SocketAddr,
        session: Arc<S>,
    ) -> Result<Option<Arc<S>>, Refusal> {
        if self.sessions.contains_key(&client) {
            return Ok(None);
        }
        self.admits(client)?;
        let evicted = if self.sessions.len() >= self.caps.total {
            // `admits` found a fresh session at the front of the queue.
            self.fresh
                .pop_front()
                .and_then(|(oldest, _)| self.take(oldest))
        } else {
            None
        };
        let number = self.created;
        self.created += 1;
        self.sessions.insert(
            client,
            Held {
                session,
                number,
                confirmed: false,
            },
        );
        *self.per_source.entry(source_of(client)).or_default() += 1;
        *self.per_prefix.entry(prefix_of(client)).or_default() += 1;
        self.fresh.push_back((client, number));
        // Bound the queue: past two entries per place, the oldest goes even if it is still
        // fresh (that session is then only expired, never evicted).
        if self.fresh.len() > 2 * self.caps.total {
            self.fresh.pop_front();
        }
        Ok(evicted)
    }

    /// Removes `client`'s session whatever it is, giving its places back.
    fn take(&mut self, client: SocketAddr) -> Option<Arc<S>> {
        let held = self.sessions.remove(&client)?;
        release(&mut self.per_source, source_of(client));
        release(&mut self.per_prefix, prefix_of(client));
        Some(held.session)
    }

    /// Removes `client`'s session if it is `session` (not a newer one opened since), giving
    /// its place back to its source, prefix and the listener. Whether it was removed.
    pub(super) fn remove(&mut self, client: SocketAddr, session: &Arc<S>) -> bool {
        let same = self
            .sessions
            .get(&client)
            .is_some_and(|held| Arc::ptr_eq(&held.session, session));
        same && self.take(client).is_some()
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
        // Every session confirmed: none can be evicted.
        for client in [
            "10.0.0.1:1",
            "10.0.0.1:2",
            "10.0.0.2:1",
            "10.0.1.1:1",
            "10.0.2.1:1",
            "10.0.3.1:1",
        ] {
            assert!(table.again(at(client)).is_some());
        }
        assert_eq!(table.admits(at("10.0.4.1:1")), Err(Refusal::SessionsFull));
        assert_eq!(
            table.insert(at("10.0.4.1:1"), Arc::new(())),
            Err(Refusal::SessionsFull)
        );
        assert_eq!(table.len(), 6);
    }

    #[test]
    fn a_full_table_evicts_its_oldest_fresh_session_and_never_a_confirmed_one() {
        let mut table = SessionTable::new(Caps {
            total: 3,
            per_source: 10,
            per_prefix: 10,
        });
        let confirmed = Arc::new(());
        table
            .insert(at("10.0.0.1:1"), Arc::clone(&confirmed))
            .unwrap();
        table.again(at("10.0.0.1:1"));
        let oldest = Arc::new(());
        table.insert(at("10.0.1.1:1"), Arc::clone(&oldest)).unwrap();
        table.insert(at("10.0.2.1:1"), Arc::new(())).unwrap();
        let evicted = table.insert(at("10.0.3.1:1"), Arc::new(())).unwrap();
        assert!(evicted.is_some_and(|e| Arc::ptr_eq(&e, &oldest)));
        assert!(table.again(at("10.0.1.1:1")).is_none(), "evicted");
        assert!(
            table.again(at("10.0.0.1:1")).is_some(),
            "the confirmed one stays"
        );
        // The two fresh ones confirmed too: now a newcomer is refused.
        table.again(at("10.0.2.1:1"));
        table.again(at("10.0.3.1:1"));
        assert_eq!(
            table.insert(at("10.0.4.1:1"), Arc::new(())),
            Err(Refusal::SessionsFull)
        );
        assert!(table.fresh.is_empty(), "stale entries dropped");
    }

    #[test]
    fn the_fresh_queue_stays_within_two_entries_per_place() {
        let mut table = SessionTable::new(Caps {
            total: 4,
            per_source: 1000,
            per_prefix: 1000,
        });
        for port in 0..1000 {
            let client = SocketAddr::from(([10, 0, 0, 1], port));
            let session = Arc::new(());
            table.insert(client, Arc::clone(&session)).unwrap();
            table.again(client);
            assert!(table.remove(client, &session));
            assert!(table.fresh.len() <= 8, "{}", table.fresh.len());
        }
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

    #[test]
    fn a_client_back_after_its_session_ended_is_queued_as_new_not_in_its_old_place() {
        let mut table = SessionTable::new(Caps {
            total: 3,
            per_source: 10,
            per_prefix: 10,
        });
        let ended = Arc::new(());
        table.insert(at("10.0.0.1:1"), Arc::clone(&ended)).unwrap();
        let oldest = Arc::new(());
        table.insert(at("10.0.1.1:1"), Arc::clone(&oldest)).unwrap();
        assert!(table.remove(at("10.0.0.1:1"), &ended), "expired");
        table.insert(at("10.0.2.1:1"), Arc::new(())).unwrap();
        // Back with a new session, the newest fresh one: its old queue entry is stale.
        table.insert(at("10.0.0.1:1"), Arc::new(())).unwrap();
        let evicted = table.insert(at("10.0.3.1:1"), Arc::new(())).unwrap();
        assert!(evicted.is_some_and(|e| Arc::ptr_eq(&e, &oldest)));
        assert!(
            table.again(at("10.0.0.1:1")).is_some(),
            "the newcomer stays"
        );
    }

    #[test]
    fn a_fresh_session_stays_evictable_with_two_entries_per_place_queued() {
        let mut table = SessionTable::new(Caps {
            total: 4,
            per_source: 10,
            per_prefix: 10,
        });
        let spoofed = Arc::new(());
        table
            .insert(at("10.0.0.1:1"), Arc::clone(&spoofed))
            .unwrap();
        // Four sessions come and go, then three stay and talk on: 8 entries, the bound.
        for port in 1..=4 {
            let client = SocketAddr::from(([10, 0, 9, 1], port));
            let session = Arc::new(());
            table.insert(client, Arc::clone(&session)).unwrap();
            assert!(table.remove(client, &session));
        }
        for client in ["10.0.1.1:1", "10.0.2.1:1", "10.0.3.1:1"] {
            table.insert(at(client), Arc::new(())).unwrap();
            table.again(at(client));
        }
        assert_eq!(table.fresh.len(), 8);
        let evicted = table.insert(at("10.0.4.1:1"), Arc::new(())).unwrap();
        assert!(evicted.is_some_and(|e| Arc::ptr_eq(&e, &spoofed)));
    }
}
