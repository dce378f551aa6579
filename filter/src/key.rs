//! Keys from addresses: the source as the filter sees it, and the sketch key of a limit, a
//! penalty or a plain scope.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use xxhash_rust::xxh3::xxh3_64;

use crate::prefix::Prefix;

/// A source address with IPv4-mapped IPv6 (`::ffff:a.b.c.d`) folded to IPv4, so a dual-stack
/// listener counts one client once whichever socket family it arrived on.
///
/// # Examples
/// ```
/// use std::net::{IpAddr, Ipv4Addr};
/// use tollgate_filter::Source;
/// let mapped: IpAddr = "::ffff:192.0.2.1".parse()?;
/// assert_eq!(Source::new(mapped).addr(), IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)));
/// # Ok::<(), std::net::AddrParseError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Source(IpAddr);

impl Source {
    /// The source of an event from `addr`.
    #[must_use]
    pub fn new(addr: IpAddr) -> Source {
        match addr {
            // `Ipv6Addr::to_ipv4_mapped` on the address as one integer: the std one matches
            // its sixteen bytes one by one, which leaves them in sixteen places for the
            // caller to gather (a byte copy per parsed frame).
            IpAddr::V6(v6) => {
                let bits = v6.to_bits();
                if bits >> 32 == 0xffff {
                    Source(IpAddr::V4(Ipv4Addr::from_bits(bits as u32)))
                } else {
                    Source(addr)
                }
            }
            IpAddr::V4(_) => Source(addr),
        }
    }

    /// The (folded) address.
    #[must_use]
    pub fn addr(self) -> IpAddr {
        self.0
    }

    /// Of two prefix lengths, the one for this source's family.
    #[must_use]
    pub fn pick(self, v4: Prefix, v6: Prefix) -> Prefix {
        match self.0 {
            IpAddr::V4(_) => v4,
            IpAddr::V6(_) => v6,
        }
    }

    /// The address with the bits past `prefix` cleared (a prefix of the other family keeps the
    /// whole address).
    #[must_use]
    pub fn masked(self, prefix: Prefix) -> IpAddr {
        match self.0 {
            IpAddr::V4(v4) => IpAddr::V4(prefix.mask_v4(v4)),
            IpAddr::V6(v6) => IpAddr::V6(prefix.mask_v6(v6)),
        }
    }
}

impl From<IpAddr> for Source {
    fn from(addr: IpAddr) -> Source {
        Source::new(addr)
    }
}

impl From<Ipv4Addr> for Source {
    fn from(addr: Ipv4Addr) -> Source {
        Source(IpAddr::V4(addr))
    }
}

/// A rule's stable identity: a hash of its name. Keys carry it, so the counters of a rule
/// whose name is unchanged survive a reload, and two rules never share a counter.
///
/// # Examples
/// ```
/// use tollgate_filter::RuleId;
/// assert_eq!(RuleId::from_name("per-source"), RuleId::from_name("per-source"));
/// assert_ne!(RuleId::from_name("per-source"), RuleId::from_name("per-prefix"));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleId(u64);

impl RuleId {
    /// The id of the rule named `name`.
    #[must_use]
    pub fn from_name(name: &str) -> RuleId {
        RuleId(xxh3_64(name.as_bytes()))
    }

    /// Its 64 bits, to build a key of another kind (the rate-limit service's descriptors).
    pub(crate) fn bits(self) -> u64 {
        self.0
    }
}

/// What a [`LimitKey`] counts: a key of one kind never equals a key of another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    /// A plain scope (the proxy's open-connection counts): rule, prefix, address.
    Scope = 1,
    /// The events of a rule's limits of one period.
    Limit = 2,
    /// The marks of a rule's penalty.
    Penalty = 3,
    /// The second key of each penalty mark (see the `penalty` module).
    PenaltyTwin = 4,
    /// A descriptor of the rate-limit service under one rule, as a cluster shares it.
    Descriptor = 5,
}

/// A sketch key: what it counts (a plain scope, a limit or a penalty), the rule, the period,
/// the prefix length and the masked source address. Two keys are equal only if every one of
/// these fields is; nothing in a key depends on where a limit sits in the file, so a rule
/// that keeps its name and limits keeps its keys across reloads.
///
/// # Examples
/// ```
/// use std::net::Ipv4Addr;
/// use std::time::Duration;
/// use tollgate_filter::{LimitKey, Prefix, RuleId, Source};
/// let rule = RuleId::from_name("per-source");
/// let slash24 = Prefix::v4(24)?;
/// let a = LimitKey::new(rule, Source::from(Ipv4Addr::new(198, 51, 100, 1)), slash24);
/// let b = LimitKey::new(rule, Source::from(Ipv4Addr::new(198, 51, 100, 200)), slash24);
/// assert_eq!(a, b); // one /24, one counter
/// let minute = Duration::from_secs(60);
/// let source = Source::from(Ipv4Addr::new(198, 51, 100, 1));
/// // A limit's counter and a penalty's never coincide.
/// assert_ne!(LimitKey::limit(rule, minute, source, slash24), LimitKey::penalty(rule, minute, source, slash24));
/// # Ok::<(), tollgate_filter::PrefixError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LimitKey {
    bytes: [u8; LimitKey::LEN],
}

impl LimitKey {
    /// Bytes in a key: kind (1), rule (8), period in nanoseconds (8), family (1), prefix
    /// length (1), address (16).
    pub const LEN: usize = 35;

    /// The key of `source` under the plain scope `rule` at `prefix` (which should be of the
    /// source's family; see [`Source::pick`]). Plain scopes have no period: the proxy counts
    /// open connections with them.
    #[must_use]
    pub fn new(rule: RuleId, source: Source, prefix: Prefix) -> LimitKey {
        LimitKey::of(Kind::Scope, rule, Duration::ZERO, source, prefix)
    }

    /// The key of `source` under the limits of `rule` with period `per`, counted at `prefix`.
    /// Limits of one rule with one period and one prefix count the same events: they share it.
    #[must_use]
    pub fn limit(rule: RuleId, per: Duration, source: Source, prefix: Prefix) -> LimitKey {
        LimitKey::of(Kind::Limit, rule, per, source, prefix)
    }

    /// The key of the penalty of `rule` (of length `length`) for `source` at `prefix`.
    #[must_use]
    pub fn penalty(rule: RuleId, length: Duration, source: Source, prefix: Prefix) -> LimitKey {
        LimitKey::of(Kind::Penalty, rule, length, source, prefix)
    }

    fn of(kind: Kind, rule: RuleId, per: Duration, source: Source, prefix: Prefix) -> LimitKey {
        let mut bytes = [0; Self::LEN];
        bytes[0] = kind as u8;
        bytes[1..9].copy_from_slice(&rule.0.to_le_bytes());
        // Periods are whole nanoseconds of at most ~584 years in a checked config.
        let nanos = u64::try_from(per.as_nanos()).unwrap_or(u64::MAX);
        bytes[9..17].copy_from_slice(&nanos.to_le_bytes());
        match source.masked(prefix) {
            IpAddr::V4(v4) => {
                bytes[17] = 4;
                bytes[18] = match prefix {
                    Prefix::V4(len) => len,
                    Prefix::V6(_) => 32,
                };
                bytes[19..23].copy_from_slice(&v4.octets());
            }
            IpAddr::V6(v6) => {
                bytes[17] = 6;
                bytes[18] = match prefix {
                    Prefix::V6(len) => len,
                    Prefix::V4(_) => 128,
                };
                bytes[19..35].copy_from_slice(&v6.octets());
            }
        }
        LimitKey { bytes }
    }

    /// The part of every key of `source`'s family under the limits of `rule` with period
    /// `per` at `prefix` that does not depend on the address: built once when a policy is
    /// compiled, so the key of each event is a copy and a mask (see [`KeyHead::key`]).
    pub(crate) fn limit_head(
        rule: RuleId,
        per: Duration,
        family: Source,
        prefix: Prefix,
    ) -> KeyHead {
        // The unspecified address of the family: every address byte of the head is zero.
        let zero = match family.addr() {
            IpAddr::V4(_) => Source::from(Ipv4Addr::UNSPECIFIED),
            IpAddr::V6(_) => Source(IpAddr::V6(Ipv6Addr::UNSPECIFIED)),
        };
        KeyHead {
            key: LimitKey::limit(rule, per, zero, prefix),
            mask_v4: u32::from(prefix.mask_v4(Ipv4Addr::from(u32::MAX))),
            mask_v6: u128::from(prefix.mask_v6(Ipv6Addr::from(u128::MAX))),
        }
    }

    /// The key a cluster shares a descriptor's count by: the rule's identity, the unit's
    /// length and the 128-bit hash of the descriptor's values (see `descriptors`), under a
    /// kind of its own, so that it never equals an address's key.
    pub(crate) fn descriptor(rule: RuleId, per: Duration, values: [u8; 16]) -> LimitKey {
        let mut bytes = [0; Self::LEN];
        bytes[0] = Kind::Descriptor as u8;
        bytes[1..9].copy_from_slice(&rule.0.to_le_bytes());
        let nanos = u64::try_from(per.as_nanos()).unwrap_or(u64::MAX);
        bytes[9..17].copy_from_slice(&nanos.to_le_bytes());
        // Family and prefix length 0: no address kind writes 0 there.
        bytes[19..35].copy_from_slice(&values);
        LimitKey { bytes }
    }

    /// The same key under the kind that hashes it apart: a penalty key's twin.
    pub(crate) fn twin(mut self) -> LimitKey {
        self.bytes[0] = Kind::PenaltyTwin as u8;
        self
    }

    /// The key as bytes, for [`tollgate_sketch::RateSketch::observe`].
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// A [`LimitKey`] without its address: what [`LimitKey::limit_head`] builds once per limit and
/// family. Two heads are equal exactly when the keys they give for any one source of their
/// family are (the prefix byte decides the masking: an other-family prefix masks nothing, as
/// the whole address's length does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KeyHead {
    /// The key of the family's unspecified address: every field but the address.
    key: LimitKey,
    /// What `prefix` keeps of an IPv4 address, and of an IPv6 one.
    mask_v4: u32,
    mask_v6: u128,
}

impl KeyHead {
    /// The key of `source`, which must be of the family the head was built for (the policy
    /// picks the head by the source's family): `LimitKey::limit(rule, per, source, prefix)`.
    #[inline]
    pub(crate) fn key(&self, source: Source) -> LimitKey {
        let mut key = self.key;
        match source.addr() {
            IpAddr::V4(v4) => {
                debug_assert_eq!(key.bytes[17], 4, "an IPv4 source under an IPv6 head");
                let masked = u32::from(v4) & self.mask_v4;
                key.bytes[19..23].copy_from_slice(&masked.to_be_bytes());
            }
            IpAddr::V6(v6) => {
                debug_assert_eq!(key.bytes[17], 6, "an IPv6 source under an IPv4 head");
                let masked = u128::from(v6) & self.mask_v6;
                key.bytes[19..35].copy_from_slice(&masked.to_be_bytes());
            }
        }
        key
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn mapped_addresses_fold_and_others_do_not() {
        let v4 = Ipv4Addr::new(10, 1, 2, 3);
        let mapped = IpAddr::V6(v4.to_ipv6_mapped());
        assert_eq!(Source::new(mapped).addr(), IpAddr::V4(v4));
        // The deprecated IPv4-compatible form (::a.b.c.d) is a plain IPv6 address.
        let compatible = IpAddr::V6(Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0x0a01, 0x0203));
        assert_eq!(Source::new(compatible).addr(), compatible);
    }

    #[test]
    fn kinds_periods_families_prefixes_and_rules_never_share_a_key() {
        let rule = RuleId::from_name("r");
        let zero4 = Source::from(Ipv4Addr::UNSPECIFIED);
        let zero6 = Source::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED));
        let keys = [
            LimitKey::new(rule, zero4, Prefix::V4(0)),
            LimitKey::new(rule, zero4, Prefix::V4(8)),
            LimitKey::new(rule, zero6, Prefix::V6(0)),
            LimitKey::new(rule, zero6, Prefix::V6(8)),
            LimitKey::new(RuleId::from_name("s"), zero4, Prefix::V4(0)),
            LimitKey::limit(rule, Duration::ZERO, zero4, Prefix::V4(0)),
            LimitKey::limit(rule, Duration::from_secs(1), zero4, Prefix::V4(0)),
            LimitKey::limit(rule, Duration::from_secs(2), zero4, Prefix::V4(0)),
            LimitKey::penalty(rule, Duration::ZERO, zero4, Prefix::V4(0)),
            LimitKey::penalty(rule, Duration::from_secs(1), zero4, Prefix::V4(0)),
            LimitKey::limit(rule, Duration::from_secs(1), zero6, Prefix::V6(0)),
            LimitKey::penalty(rule, Duration::from_secs(1), zero6, Prefix::V6(0)),
            LimitKey::descriptor(rule, Duration::ZERO, [0; 16]),
            LimitKey::descriptor(rule, Duration::from_secs(1), [0; 16]),
            LimitKey::descriptor(rule, Duration::from_secs(1), [1; 16]),
        ];
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    proptest! {
        /// The fold is std's `to_ipv4_mapped`: for any address, for every mapped one, and for
        /// each address one bit away from a mapped one in its 96-bit prefix.
        #[test]
        fn the_fold_is_the_std_one(bits in any::<u128>(), low in any::<u32>(), flip in 32u32..128) {
            let mapped = (0xffff_u128 << 32) | u128::from(low);
            for bits in [bits, mapped, mapped ^ (1 << flip)] {
                let v6 = Ipv6Addr::from_bits(bits);
                let std = v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4);
                prop_assert_eq!(Source::new(IpAddr::V6(v6)).addr(), std);
            }
        }

        /// A key from a head is the key `LimitKey::limit` builds, for every source of the
        /// head's family and every prefix (of either family) and period.
        #[test]
        fn a_head_gives_the_limit_key(
            v4 in any::<u32>(),
            v6 in any::<u128>(),
            len in 0u8..=128,
            other_family in any::<bool>(),
            nanos in any::<u64>(),
        ) {
            let rule = RuleId::from_name("r");
            let per = Duration::from_nanos(nanos);
            for source in [Source::from(Ipv4Addr::from(v4)), Source::new(IpAddr::V6(Ipv6Addr::from(v6)))] {
                let prefix = match (source.addr(), other_family) {
                    (IpAddr::V4(_), false) | (IpAddr::V6(_), true) => Prefix::V4(len.min(32)),
                    (IpAddr::V6(_), false) | (IpAddr::V4(_), true) => Prefix::V6(len),
                };
                let head = LimitKey::limit_head(rule, per, source, prefix);
                prop_assert_eq!(head.key(source), LimitKey::limit(rule, per, source, prefix));
            }
        }
    }
}
