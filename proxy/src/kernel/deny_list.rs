//! The policy's `deny` list as the kernel holds it: the networks whose longest match among
//! the `allow` and `deny` entries is a `deny`, cut into disjoint prefixes.
//!
//! The policy answers a source by its longest match over both lists (an identical network in
//! both denies), so a `deny` entry with a longer `allow` entry inside it must not go into the
//! kernel whole: the kernel would drop the allowed hole too. What goes in instead is the
//! `deny` entry minus its holes, as prefixes: at most `128 - len` of them per hole, found by
//! walking down only where a longer entry lies.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use tollgate_filter::Cidr;

/// A network: its address (masked to the length) and its prefix length.
pub(crate) type Network = (IpAddr, u8);

/// The disjoint networks that `allow` and `deny` together deny, IPv4 ones first, each
/// family in address order.
#[must_use]
pub(crate) fn denied(allow: &[Cidr], deny: &[Cidr]) -> Vec<Network> {
    let mut found = Vec::new();
    for bits in [32, 128] {
        // (network, length) -> denies; deny entries are inserted last and win a tie, as in
        // the policy.
        let mut entries: BTreeMap<(u128, u8), bool> = BTreeMap::new();
        for (cidr, denies) in allow
            .iter()
            .map(|c| (c, false))
            .chain(deny.iter().map(|c| (c, true)))
        {
            let (value, family_bits) = match cidr.addr {
                IpAddr::V4(a) => (u128::from(u32::from(a)), 32),
                IpAddr::V6(a) => (u128::from(a), 128),
            };
            if family_bits != bits {
                continue;
            }
            let len = cidr.prefix.len();
            entries.insert((value & mask(len, bits), len), denies);
        }
        let sorted: Vec<(u128, u8, bool)> = entries
            .into_iter()
            .map(|((network, len), denies)| (network, len, denies))
            .collect();
        walk(0, 0, bits, false, &sorted, &mut found);
    }
    found
}

/// The mask of a `len`-bit prefix in a `bits`-bit address.
fn mask(len: u8, bits: u8) -> u128 {
    let all = if bits == 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    };
    all & !(all.checked_shr(u32::from(len)).unwrap_or(0))
}

/// Adds to `found` the denied parts of the network `network/len`, whose longest match above
/// it denies when `inherited`; `inside` are the entries within it, sorted by network then
/// length (so the network's own entry, if any, comes first). A network is walked into only
/// where an entry inside it disagrees with its verdict.
fn walk(
    network: u128,
    len: u8,
    bits: u8,
    inherited: bool,
    inside: &[(u128, u8, bool)],
    found: &mut Vec<Network>,
) {
    let (denies, rest) = match inside.first() {
        Some(&(n, l, denies)) if n == network && l == len => (denies, &inside[1..]),
        _ => (inherited, inside),
    };
    // Entries inside that all agree with this network's verdict change nothing in it.
    if rest.iter().all(|&(_, _, d)| d == denies) {
        if denies {
            found.push((address(network, bits), len));
        }
        return;
    }
    // Some entry of `rest` is longer than `len`: `len < bits`.
    let upper = network | (1u128 << (bits - len - 1));
    let split = rest.partition_point(|&(n, _, _)| n < upper);
    walk(network, len + 1, bits, denies, &rest[..split], found);
    walk(upper, len + 1, bits, denies, &rest[split..], found);
}

fn address(value: u128, bits: u8) -> IpAddr {
    if bits == 32 {
        // A 32-bit family's values are masked to 32 bits: the conversion is exact.
        IpAddr::V4(Ipv4Addr::from(u32::try_from(value).unwrap_or(u32::MAX)))
    } else {
        IpAddr::V6(Ipv6Addr::from(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidrs(list: &[&str]) -> Vec<Cidr> {
        list.iter().map(|c| Cidr::parse(c).unwrap()).collect()
    }

    fn shown(found: &[Network]) -> Vec<String> {
        found.iter().map(|(a, l)| format!("{a}/{l}")).collect()
    }

    #[test]
    fn deny_entries_without_holes_go_in_as_written_and_masked() {
        let found = denied(
            &[],
            &cidrs(&["192.0.2.77/24", "203.0.113.9", "2001:db8::1/32"]),
        );
        assert_eq!(
            shown(&found),
            ["192.0.2.0/24", "203.0.113.9/32", "2001:db8::/32"]
        );
        // A deny inside a deny adds nothing: the networks stay disjoint.
        let nested = denied(&[], &cidrs(&["10.0.0.0/8", "10.1.2.0/24"]));
        assert_eq!(shown(&nested), ["10.0.0.0/8"]);
    }

    #[test]
    fn a_longer_allow_entry_is_cut_out_of_the_deny_entry_around_it() {
        let found = denied(&cidrs(&["10.1.0.0/16"]), &cidrs(&["10.0.0.0/8"]));
        // 10/8 minus 10.1/16: the eight siblings on the way down.
        assert_eq!(
            shown(&found),
            [
                "10.0.0.0/16",
                "10.2.0.0/15",
                "10.4.0.0/14",
                "10.8.0.0/13",
                "10.16.0.0/12",
                "10.32.0.0/11",
                "10.64.0.0/10",
                "10.128.0.0/9"
            ]
        );
        // A deny inside the allowed hole is denied again; a shorter allow around a deny
        // leaves the deny whole; the same network in both lists denies.
        let found = denied(
            &cidrs(&["10.0.0.0/9", "172.16.0.0/12", "192.0.2.0/24"]),
            &cidrs(&["10.0.0.0/8", "10.0.0.0/10", "172.16.5.0/24", "192.0.2.0/24"]),
        );
        assert_eq!(
            shown(&found),
            [
                "10.0.0.0/10",
                "10.128.0.0/9",
                "172.16.5.0/24",
                "192.0.2.0/24"
            ]
        );
        // Allow entries alone put nothing in.
        assert!(denied(&cidrs(&["0.0.0.0/0", "::/0"]), &[]).is_empty());
    }

    #[test]
    fn the_networks_are_exactly_the_addresses_the_lists_deny() {
        // Against a naive longest match, on a small space: 10.0.0.0/28 and its neighbours.
        let allow = cidrs(&["10.0.0.4/30", "10.0.0.0/24", "10.0.0.9"]);
        let deny = cidrs(&["10.0.0.0/28", "10.0.0.6/31", "10.0.0.8/29", "10.0.0.0/24"]);
        let found = denied(&allow, &deny);
        let covered = |a: u32| {
            found.iter().any(|&(n, l)| match n {
                IpAddr::V4(n) => u128::from(a) & mask(l, 32) == u128::from(u32::from(n)),
                IpAddr::V6(_) => false,
            })
        };
        let naive = |a: u32| {
            let mut best: Option<(u8, bool)> = None;
            for (c, d) in allow
                .iter()
                .map(|c| (c, false))
                .chain(deny.iter().map(|c| (c, true)))
            {
                let IpAddr::V4(n) = c.addr else { continue };
                let l = c.prefix.len();
                let m = mask(l, 32);
                if u128::from(a) & m == u128::from(u32::from(n)) & m
                    && best.is_none_or(|(bl, _)| l >= bl)
                {
                    best = Some((l, d));
                }
            }
            best.is_some_and(|(_, d)| d)
        };
        let base = u32::from(Ipv4Addr::new(10, 0, 0, 0));
        for a in base - 16..base + 300 {
            assert_eq!(covered(a), naive(a), "{}", Ipv4Addr::from(a));
        }
        for (i, x) in found.iter().enumerate() {
            for y in &found[i + 1..] {
                let e = super::super::Element {
                    network: x.0,
                    len: x.1,
                    timeout: std::time::Duration::ZERO,
                    weight: 0.0,
                };
                assert!(!e.overlaps(y.0, y.1), "{x:?} and {y:?} overlap");
            }
        }
    }
}
