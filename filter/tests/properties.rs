//! Invariants of keys and prefixes: masking is right for every length of both families, and
//! the longest-prefix map answers what a naive scan of its networks answers.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use tollgate_filter::{Prefix, PrefixMap, Source};

/// Bit by bit: keep the first `len` bits (from the most significant), clear the rest.
fn naive_mask(bits: u128, width: u32, len: u32) -> u128 {
    (0..width)
        .filter(|i| *i < len)
        .map(|i| bits & (1u128 << (width - 1 - i)))
        .fold(0, |acc, bit| acc | bit)
}

fn addr() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<u32>().prop_map(|b| IpAddr::V4(Ipv4Addr::from(b))),
        any::<u128>().prop_map(|b| IpAddr::V6(Ipv6Addr::from(b))),
        // Mapped addresses, which fold to IPv4.
        any::<u32>().prop_map(|b| IpAddr::V6(Ipv4Addr::from(b).to_ipv6_mapped())),
    ]
}

/// A network: an address and a prefix length of its family (after folding).
fn network() -> impl Strategy<Value = (IpAddr, Prefix)> {
    (addr(), any::<u8>()).prop_map(|(addr, len)| match Source::new(addr).addr() {
        a @ IpAddr::V4(_) => (a, Prefix::V4(len % 33)),
        a @ IpAddr::V6(_) => (a, Prefix::V6(len % 129)),
    })
}

fn bits(addr: IpAddr) -> (u32, u128) {
    match addr {
        IpAddr::V4(v4) => (32, u128::from(u32::from(v4))),
        IpAddr::V6(v6) => (128, u128::from(v6)),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn masking_keeps_exactly_the_prefix(addr in addr(), len in 0u32..=128) {
        let source = Source::new(addr);
        let (width, raw) = bits(source.addr());
        let len = len.min(width);
        let prefix = if width == 32 { Prefix::v4(len) } else { Prefix::v6(len) }.unwrap();
        let masked = source.masked(prefix);
        let (_, got) = bits(masked);
        prop_assert_eq!(got, naive_mask(raw, width, len));
        // Idempotent, and the source lies inside its masked network.
        prop_assert_eq!(Source::new(masked).masked(prefix), masked);
        prop_assert_eq!(raw & got, got);
    }

    #[test]
    fn longest_match_equals_a_naive_scan(
        networks in prop::collection::vec(network(), 0..60),
        probes in prop::collection::vec(addr(), 1..60),
    ) {
        let mut map = PrefixMap::new();
        // The naive model: every network as (family width, length, masked bits) -> value, later
        // inserts of the same network replacing earlier ones, as in the map.
        let mut naive: HashMap<(u32, u32, u128), usize> = HashMap::new();
        for (value, (addr, prefix)) in networks.iter().enumerate() {
            map.insert(*addr, *prefix, value);
            let (width, raw) = bits(*addr);
            let len = u32::from(prefix.len());
            naive.insert((width, len, naive_mask(raw, width, len)), value);
        }
        prop_assert_eq!(map.len(), naive.len());
        // Probe the networks' own addresses (hits) as well as random ones.
        let inside = networks.iter().map(|(addr, _)| *addr);
        for probe in probes.into_iter().chain(inside) {
            let source = Source::new(probe);
            let (width, raw) = bits(source.addr());
            let expected = naive
                .iter()
                .filter(|((w, len, net), _)| *w == width && naive_mask(raw, width, *len) == *net)
                .max_by_key(|((_, len, _), _)| *len)
                .map(|((_, len, _), value)| (*len, *value));
            let got = map.longest_match(source).map(|(p, v)| (u32::from(p.len()), *v));
            prop_assert_eq!(got, expected, "probe {}", probe);
        }
    }
}

mod round_trip {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    use std::time::Duration;

    use proptest::prelude::*;
    use tollgate_filter::{
        Action, Cidr, Config, Limit, Prefix, ProtocolMatch, Rate, Rule, RuleId, Weight,
    };

    fn cidr() -> impl Strategy<Value = Cidr> {
        prop_oneof![
            (any::<u32>(), 0u32..=32).prop_map(|(a, len)| Cidr {
                addr: IpAddr::V4(Ipv4Addr::from(a)),
                prefix: Prefix::v4(len).unwrap(),
            }),
            (any::<u128>(), 0u32..=128).prop_map(|(a, len)| Cidr {
                addr: IpAddr::V6(Ipv6Addr::from(a)),
                prefix: Prefix::v6(len).unwrap(),
            }),
        ]
    }

    fn duration() -> impl Strategy<Value = Duration> {
        prop_oneof![
            (1u64..100_000).prop_map(Duration::from_millis),
            (1u64..100_000).prop_map(Duration::from_secs),
        ]
    }

    fn limit() -> impl Strategy<Value = Limit> {
        (1u64..10_000_000, duration(), 0u32..=32, 0u32..=128).prop_map(|(count, per, v4, v6)| {
            Limit {
                rate: Rate { count, per },
                ipv4_prefix: Prefix::v4(v4).unwrap(),
                ipv6_prefix: Prefix::v6(v6).unwrap(),
            }
        })
    }

    fn rule(index: usize) -> impl Strategy<Value = Rule> {
        (
            "[a-z\"\\\\ é-]{0,12}",
            prop::sample::select(vec![
                ProtocolMatch::Tcp,
                ProtocolMatch::Udp,
                ProtocolMatch::Any,
            ]),
            prop::collection::vec(cidr(), 0..3),
            prop::collection::vec(limit(), 1..4),
            prop::sample::select(vec![Weight::Events, Weight::Bytes]),
            prop::sample::select(vec![
                Action::Close,
                Action::Reset,
                Action::Delay,
                Action::Reply,
                Action::Drop,
            ]),
            any::<bool>(),
            prop::option::of(duration()),
            prop::option::of(duration()),
            prop::option::of("[ -~\n\r\té]{0,40}"),
        )
            .prop_map(
                move |(
                    stem,
                    protocol,
                    sources,
                    limits,
                    weight,
                    action,
                    shadow,
                    penalty,
                    delay,
                    reply,
                )| {
                    // A unique, non-empty name, with characters TOML must escape.
                    let name = format!("r{index}{stem}");
                    Rule {
                        id: RuleId::from_name(&name),
                        name,
                        protocol,
                        sources,
                        limits,
                        weight,
                        action,
                        shadow,
                        penalty,
                        // Only the action that uses them may carry them.
                        delay: delay.filter(|_| action == Action::Delay),
                        reply: reply.filter(|_| action == Action::Reply),
                    }
                },
            )
    }

    fn config() -> impl Strategy<Value = Config> {
        (
            // Enough for the sketches of 3 rules of 3 limits and a penalty each.
            16usize << 20..1 << 40,
            prop::collection::vec(cidr(), 0..4),
            prop::collection::vec(cidr(), 0..4),
            0usize..4,
        )
            .prop_flat_map(|(memory, allow, deny, rules)| {
                let rules: Vec<_> = (0..rules).map(rule).collect();
                (Just(memory), Just(allow), Just(deny), rules)
            })
            .prop_flat_map(|(memory, allow, deny, rules)| {
                // Some of the periods in use, each with a share that keeps the sum in memory.
                let mut used: Vec<Duration> = rules
                    .iter()
                    .flat_map(|r: &Rule| r.limits.iter().map(|l| l.rate.per).chain(r.penalty))
                    .collect();
                used.sort_unstable();
                used.dedup();
                let share = memory / (used.len() + 1);
                // Each named share at least what any sketch needs (a penalty's two included).
                let least = 1usize << 16;
                let picks =
                    prop::collection::vec((any::<bool>(), least..=share.max(least)), used.len());
                (
                    Just(memory),
                    Just(allow),
                    Just(deny),
                    Just(rules),
                    Just(used),
                    picks,
                )
            })
            .prop_map(|(memory, allow, deny, rules, used, picks)| Config {
                memory,
                periods: used
                    .into_iter()
                    .zip(picks)
                    .filter_map(|(period, (named, size))| named.then_some((period, size)))
                    .collect(),
                allow,
                deny,
                rules,
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn a_config_round_trips_through_print_and_parse(config in config()) {
            let printed = config.to_string();
            let parsed = Config::parse(&printed);
            prop_assert_eq!(parsed.as_ref(), Ok(&config), "printed:\n{}", printed);
        }
    }
}
