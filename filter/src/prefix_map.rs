//! Longest-prefix match over IPv4 and IPv6 networks.
//!
//! One hash table per prefix length present, searched from the longest length down: a lookup
//! costs one hash probe per distinct length in the map (a handful in real allow/deny lists and
//! rules), whatever the number of networks, instead of a scan over all of them.

use std::collections::HashMap;
use std::net::IpAddr;

use crate::key::Source;
use crate::prefix::{Prefix, mask_u32, mask_u128};

/// Networks of one family, keyed by prefix length then by masked address.
#[derive(Clone, Debug)]
struct Family<V> {
    /// `(length, networks of that length)`, longest first.
    by_len: Vec<(u8, HashMap<u128, V>)>,
}

impl<V> Default for Family<V> {
    fn default() -> Self {
        Family { by_len: Vec::new() }
    }
}

impl<V> Family<V> {
    fn insert(&mut self, len: u8, masked: u128, value: V) -> Option<V> {
        let at = match self.by_len.binary_search_by(|(l, _)| len.cmp(l)) {
            Ok(at) => at,
            Err(at) => {
                self.by_len.insert(at, (len, HashMap::new()));
                at
            }
        };
        self.by_len[at].1.insert(masked, value)
    }

    fn longest(&self, addr: u128, mask: impl Fn(u128, u8) -> u128) -> Option<(u8, &V)> {
        self.by_len
            .iter()
            .find_map(|(len, nets)| nets.get(&mask(addr, *len)).map(|value| (*len, value)))
    }

    fn all<'a>(
        &'a self,
        addr: u128,
        mask: impl Fn(u128, u8) -> u128 + 'a,
    ) -> impl Iterator<Item = (u8, &'a V)> + 'a {
        self.by_len
            .iter()
            .filter_map(move |(len, nets)| nets.get(&mask(addr, *len)).map(|value| (*len, value)))
    }

    fn len(&self) -> usize {
        self.by_len.iter().map(|(_, nets)| nets.len()).sum()
    }
}

/// The network `addr/prefix` as a map stores it: an IPv4-mapped IPv6 network folded to IPv4,
/// a prefix of the other family taken as the whole address, host bits cleared.
pub(crate) fn network(addr: IpAddr, prefix: Prefix) -> (IpAddr, Prefix) {
    let source = Source::new(addr);
    let prefix = match (source.addr(), addr, prefix) {
        // `::ffff:a.b.c.d/len` folds to `a.b.c.d/(len - 96)`.
        (IpAddr::V4(_), IpAddr::V6(_), Prefix::V6(len)) => Prefix::V4(len.saturating_sub(96)),
        (IpAddr::V4(_), _, Prefix::V6(_)) => Prefix::V4(32),
        (IpAddr::V6(_), _, Prefix::V4(_)) => Prefix::V6(128),
        _ => prefix,
    };
    (source.masked(prefix), prefix)
}

/// A map from networks to values with longest-prefix lookup, for both families.
///
/// # Examples
/// ```
/// use std::net::IpAddr;
/// use tollgate_filter::{Prefix, PrefixMap, Source};
/// let mut lists = PrefixMap::new();
/// lists.insert("10.0.0.0".parse()?, Prefix::v4(8)?, "allow");
/// lists.insert("10.66.0.0".parse()?, Prefix::v4(16)?, "deny");
/// let source = Source::new("10.66.1.2".parse()?);
/// assert_eq!(lists.longest_match(source), Some((Prefix::V4(16), &"deny")));
/// assert_eq!(lists.longest_match(Source::new("192.0.2.1".parse()?)), None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct PrefixMap<V> {
    v4: Family<V>,
    v6: Family<V>,
}

impl<V> Default for PrefixMap<V> {
    fn default() -> Self {
        PrefixMap {
            v4: Family::default(),
            v6: Family::default(),
        }
    }
}

impl<V> PrefixMap<V> {
    /// An empty map.
    #[must_use]
    pub fn new() -> PrefixMap<V> {
        PrefixMap::default()
    }

    /// Maps the network `addr/prefix` (host bits past the prefix are ignored) to `value`;
    /// returns the value it replaces. An IPv4-mapped IPv6 network is stored as IPv4. A prefix
    /// of the other family than `addr` is taken as the whole address.
    pub fn insert(&mut self, addr: IpAddr, prefix: Prefix, value: V) -> Option<V> {
        match network(addr, prefix) {
            (IpAddr::V4(v4), prefix) => {
                self.v4
                    .insert(prefix.len(), u128::from(u32::from(v4)), value)
            }
            (IpAddr::V6(v6), prefix) => self.v6.insert(prefix.len(), u128::from(v6), value),
        }
    }

    /// The value of the longest network containing `source`, with that network's length.
    #[must_use]
    pub fn longest_match(&self, source: Source) -> Option<(Prefix, &V)> {
        match source.addr() {
            IpAddr::V4(v4) => self
                .v4
                .longest(u128::from(u32::from(v4)), |bits, len| {
                    // The IPv4 table holds 32-bit values widened to u128.
                    u128::from(mask_u32(bits as u32, u32::from(len)))
                })
                .map(|(len, value)| (Prefix::V4(len), value)),
            IpAddr::V6(v6) => self
                .v6
                .longest(u128::from(v6), |bits, len| mask_u128(bits, u32::from(len)))
                .map(|(len, value)| (Prefix::V6(len), value)),
        }
    }

    /// Every network containing `source` with its value, longest first.
    pub fn matches(&self, source: Source) -> impl Iterator<Item = (Prefix, &V)> {
        let (v4, v6) = match source.addr() {
            IpAddr::V4(v4) => (
                Some(
                    self.v4
                        .all(u128::from(u32::from(v4)), |bits, len| {
                            // The IPv4 table holds 32-bit values widened to u128.
                            u128::from(mask_u32(bits as u32, u32::from(len)))
                        })
                        .map(|(len, value)| (Prefix::V4(len), value)),
                ),
                None,
            ),
            IpAddr::V6(v6) => (
                None,
                Some(
                    self.v6
                        .all(u128::from(v6), |bits, len| mask_u128(bits, u32::from(len)))
                        .map(|(len, value)| (Prefix::V6(len), value)),
                ),
            ),
        };
        v4.into_iter().flatten().chain(v6.into_iter().flatten())
    }

    /// Networks in the map.
    #[must_use]
    pub fn len(&self) -> usize {
        self.v4.len() + self.v6.len()
    }

    /// Whether the map holds no network.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mapped_network_is_stored_as_ipv4() {
        let mut map = PrefixMap::new();
        let mapped: IpAddr = "::ffff:10.0.0.0".parse().unwrap();
        map.insert(mapped, Prefix::V6(104), "ten");
        let inside = Source::new("10.1.2.3".parse().unwrap());
        assert_eq!(map.longest_match(inside), Some((Prefix::V4(8), &"ten")));
        assert_eq!(
            map.longest_match(Source::new("11.0.0.1".parse().unwrap())),
            None
        );
    }

    #[test]
    fn a_zero_length_network_matches_its_whole_family_only() {
        let mut map = PrefixMap::new();
        map.insert("0.0.0.0".parse().unwrap(), Prefix::V4(0), 4);
        assert_eq!(
            map.longest_match(Source::new("203.0.113.9".parse().unwrap())),
            Some((Prefix::V4(0), &4))
        );
        assert_eq!(
            map.longest_match(Source::new("2001:db8::1".parse().unwrap())),
            None
        );
    }

    #[test]
    fn a_prefix_of_the_other_family_is_the_whole_address() {
        let mut map = PrefixMap::new();
        let at = |text: &str| Source::new(text.parse().unwrap());
        // A v6 length on a v4 address (and the reverse) means that one address, not a
        // network of that many bits.
        map.insert("192.0.2.7".parse().unwrap(), Prefix::V6(16), "v4");
        map.insert("2001:db8::7".parse().unwrap(), Prefix::V4(16), "v6");
        assert_eq!(
            map.longest_match(at("192.0.2.7")),
            Some((Prefix::V4(32), &"v4"))
        );
        assert_eq!(map.longest_match(at("192.0.2.8")), None);
        assert_eq!(
            map.longest_match(at("2001:db8::7")),
            Some((Prefix::V6(128), &"v6"))
        );
        assert_eq!(map.longest_match(at("2001:db8::8")), None);
        assert_eq!(
            network("192.0.2.7".parse().unwrap(), Prefix::V6(16)),
            ("192.0.2.7".parse().unwrap(), Prefix::V4(32))
        );
        assert_eq!(
            network("2001:db8::7".parse().unwrap(), Prefix::V4(16)),
            ("2001:db8::7".parse().unwrap(), Prefix::V6(128))
        );
    }

    #[test]
    fn len_counts_both_families_and_insert_returns_what_it_replaces() {
        let mut map = PrefixMap::new();
        assert!(map.is_empty());
        assert_eq!(
            map.insert("10.0.0.0".parse().unwrap(), Prefix::V4(8), 1),
            None
        );
        assert_eq!(
            map.insert("2001:db8::".parse().unwrap(), Prefix::V6(32), 2),
            None
        );
        assert_eq!(
            map.insert("2001:db8:1::".parse().unwrap(), Prefix::V6(48), 3),
            None
        );
        assert_eq!((map.len(), map.is_empty()), (3, false));
        // Host bits are ignored: the same network, its value replaced.
        assert_eq!(
            map.insert("10.9.9.9".parse().unwrap(), Prefix::V4(8), 4),
            Some(1)
        );
        assert_eq!(map.len(), 3);
    }
}
