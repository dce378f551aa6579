//! Decisions under a policy, driven by a manual clock: limits per address and per network,
//! lists, shadow rules, penalties, and reloads that keep counters or are refused whole.

use std::net::{IpAddr, Ipv4Addr};

use proptest::prelude::*;
use tollgate_filter::{Config, DenyReason, Event, Filter, Source, Transport, Verdict};
use tollgate_sketch::Tick;

const POLICY: &str = r#"
[sketch]
memory = "4MiB"

[lists]
allow = ["10.0.0.0/8"]
deny = ["192.0.2.0/24"]

[[rule]]
name = "per-source"
limits = [
  { rate = "10/10s", ipv4_prefix = 32, ipv6_prefix = 128 },
  { rate = "40/10s", ipv4_prefix = 24, ipv6_prefix = 64 },
]
"#;

fn filter(text: &str) -> Filter {
    Filter::new(Config::parse(text).expect("valid config")).expect("valid policy")
}

fn event(addr: &str) -> Event {
    Event {
        source: Source::new(addr.parse::<IpAddr>().expect("an address")),
        transport: Transport::Tcp,
        bytes: 100,
    }
}

fn throttled(filter: &Filter, addr: &str, times: usize, now: Tick) -> usize {
    (0..times)
        .filter(|_| {
            matches!(
                filter.decide(&event(addr), now).verdict,
                Verdict::Throttle(_)
            )
        })
        .count()
}

#[test]
fn sources_up_to_eight_times_their_limit_count_exactly_and_a_flood_stays_over_after() {
    // 10 per 10 s per address: the sketch counts a key exactly up to 81 (EXACT_MULTIPLE times
    // the limit, plus one), then only reads it. The sources are in different /24s (limit 40).
    assert_eq!(tollgate_filter::EXACT_MULTIPLE, 8);
    let f = filter(POLICY);
    let at = |millis: u64| Tick::from_nanos(millis * 1_000_000);
    assert_eq!(throttled(&f, "203.0.113.1", 80, at(1_000)), 70);
    assert_eq!(throttled(&f, "198.51.100.2", 500, at(1_000)), 490);
    // Late in the next window the share of the previous one has faded: 1 of 80 (and 5 of
    // 500) plus the event itself.
    assert_eq!(
        throttled(&f, "203.0.113.1", 1, at(19_900)),
        0,
        "eight times the limit: counted exactly, the share fades"
    );
    assert_eq!(
        throttled(&f, "198.51.100.2", 1, at(19_900)),
        1,
        "past the cap: at least the cap until the next window ends"
    );
    assert_eq!(
        throttled(&f, "198.51.100.2", 1, at(20_000)),
        0,
        "and then no more"
    );
}

#[test]
fn heavy_sources_are_throttled_and_benign_ones_are_not() {
    let f = filter(POLICY);
    let now = Tick::from_nanos(1);
    assert_eq!(throttled(&f, "203.0.113.1", 10, now), 0, "at the limit");
    assert_eq!(throttled(&f, "203.0.113.1", 5, now), 5, "over it");
    assert_eq!(
        throttled(&f, "198.51.100.9", 9, now),
        0,
        "another source is unaffected"
    );
}

#[test]
fn a_network_limit_catches_many_addresses_and_a_rotating_ipv6_attacker() {
    let f = filter(POLICY);
    let now = Tick::from_nanos(1);
    // 8 addresses of one /24, 5 events each: every address under 10, the /24 over 40.
    let over: usize = (1..=8)
        .map(|host| throttled(&f, &format!("203.0.113.{host}"), 5, now))
        .sum();
    assert_eq!(over, 0);
    assert_eq!(
        throttled(&f, "203.0.113.200", 1, now),
        1,
        "the 41st event of the /24"
    );
    // An attacker using a fresh address inside one /64 for every event.
    let rotating = (0..60u32)
        .map(|i| format!("2001:db8:7:7::{i:x}"))
        .filter(|addr| matches!(f.decide(&event(addr), now).verdict, Verdict::Throttle(_)))
        .count();
    assert_eq!(rotating, 20, "everything past 40 in the /64");
}

#[test]
fn lists_come_first_and_the_most_specific_network_decides() {
    let f = filter(POLICY);
    let now = Tick::from_nanos(1);
    assert_eq!(throttled(&f, "10.1.2.3", 100, now), 0, "allow-listed");
    let verdict = f.decide(&event("192.0.2.55"), now).verdict;
    assert!(
        matches!(verdict, Verdict::Deny(DenyReason::Listed(cidr)) if cidr.to_string() == "192.0.2.0/24")
    );
    // IPv4-mapped IPv6 is the same source.
    let mapped = f.decide(&event("::ffff:192.0.2.55"), now).verdict;
    assert_eq!(mapped, verdict);
}

#[test]
fn shadow_rules_report_and_never_enforce() {
    let f = filter("[[rule]]\nname = \"watch\"\nshadow = true\nlimits = [{ rate = \"1/10s\" }]\n");
    let now = Tick::from_nanos(1);
    let _ = f.decide(&event("203.0.113.1"), now);
    let decision = f.decide(&event("203.0.113.1"), now);
    assert_eq!(decision.verdict, Verdict::Allow);
    assert_eq!(decision.shadow_count, 1);
    assert_eq!(decision.shadow.map(|t| t.estimate), Some(2));
}

/// The verdict and the shadow verdict name the first rule over a limit, and of its limits
/// the first in file order, whichever order the periods are counted in.
#[test]
fn the_first_rule_and_limit_in_file_order_are_the_ones_reported() {
    let rule = |name: &str, shadow: bool, limits: &str| {
        format!("[[rule]]\nname = \"{name}\"\nshadow = {shadow}\nlimits = [{limits}]\n")
    };
    let now = Tick::from_nanos(1);
    let reported = |text: String| {
        let f = filter(&format!("[sketch]\nmemory = \"1MiB\"\n{text}"));
        let _ = f.decide(&event("203.0.113.1"), now);
        let decision = f.decide(&event("203.0.113.1"), now);
        let at = |verdict: Verdict| match verdict {
            Verdict::Throttle(t) => Some((t.at.rule, t.at.limit)),
            _ => None,
        };
        (
            at(decision.verdict),
            decision.shadow.map(|t| (t.at.rule, t.at.limit)),
            decision.shadow_count,
        )
    };
    let both = [
        "{ rate = \"1/60s\" }, { rate = \"1/1s\" }",
        "{ rate = \"1/1s\" }, { rate = \"1/60s\" }",
    ];
    for limits in both {
        assert_eq!(reported(rule("r", false, limits)), (Some((0, 0)), None, 0));
        assert_eq!(reported(rule("r", true, limits)), (None, Some((0, 0)), 2));
    }
    // Rule 0 is over its second limit only; rule 1 is over too, later in the file.
    let second_only = "{ rate = \"100/60s\" }, { rate = \"1/1s\" }";
    let one = "{ rate = \"1/1s\" }";
    let rules = |shadow| rule("a", shadow, second_only) + &rule("b", shadow, one);
    assert_eq!(reported(rules(false)), (Some((0, 1)), None, 0));
    assert_eq!(reported(rules(true)), (None, Some((0, 1)), 2));
}

#[test]
fn a_penalty_outlasts_the_limit() {
    let f = filter("[[rule]]\nname = \"p\"\npenalty = \"60s\"\nlimits = [{ rate = \"2/1s\" }]\n");
    let at = |secs: u64| Tick::from_nanos(secs * 1_000_000_000);
    assert_eq!(throttled(&f, "203.0.113.1", 3, at(0)), 1);
    // Ten seconds on the rate is long forgotten; the penalty is not.
    let verdict = f.decide(&event("203.0.113.1"), at(10)).verdict;
    assert_eq!(verdict, Verdict::Deny(DenyReason::Penalty { rule: 0 }));
    // One penalty length (and a second) after the event that started it, it has expired.
    assert_eq!(
        f.decide(&event("203.0.113.1"), at(61)).verdict,
        Verdict::Allow
    );
}

/// The point query names a penalty only where it is served: the rule and the prefix of the
/// limit that started it, and nothing for a source that serves none.
#[test]
fn penalties_are_named_only_where_they_are_served() {
    let f = filter(
        "[sketch]\nmemory = \"1MiB\"\n[[rule]]\nname = \"p\"\npenalty = \"60s\"\n\
         limits = [{ rate = \"2/1s\" }, { rate = \"100/1s\", ipv4_prefix = 24 }]\n",
    );
    let now = Tick::from_nanos(1);
    assert_eq!(throttled(&f, "203.0.113.1", 3, now), 1);
    let policy = f.policy();
    let serving = Source::new("203.0.113.1".parse().expect("an address"));
    let other = Source::new("203.0.113.2".parse().expect("an address"));
    let slash32 = tollgate_filter::Prefix::v4(32).expect("a prefix");
    assert_eq!(policy.penalty_networks(serving, now), [(0, slash32)]);
    assert_eq!(policy.penalties(serving, now), [0]);
    assert_eq!(policy.penalty_networks(other, now), []);
    assert_eq!(policy.penalties(other, now), []);
}

#[test]
fn a_reload_keeps_the_counters_of_rules_it_keeps_and_a_bad_one_changes_nothing() {
    let f = filter(POLICY);
    let now = Tick::from_nanos(1);
    assert_eq!(throttled(&f, "203.0.113.1", 10, now), 0);
    // Same rule name and limits, one rule added: the source is still at its limit.
    let more = format!(
        "{POLICY}\n[[rule]]\nname = \"extra\"\nprotocol = \"udp\"\nlimits = [{{ rate = \"5/10s\" }}]\n"
    );
    f.reload(Config::parse(&more).expect("valid"), now)
        .expect("reload");
    assert_eq!(f.policy().config().rules.len(), 2);
    assert_eq!(throttled(&f, "203.0.113.1", 1, now), 1, "counters survived");
    // Renamed: a new rule with new counters.
    let renamed = POLICY.replace("per-source", "per-address");
    f.reload(Config::parse(&renamed).expect("valid"), now)
        .expect("reload");
    assert_eq!(
        throttled(&f, "203.0.113.1", 1, now),
        0,
        "a renamed rule starts afresh"
    );
    // A policy whose memory cannot hold its sketches is refused, at its line; the old one
    // stays.
    let tiny = renamed.replace("4MiB", "1KiB");
    let refused = Config::parse(&tiny).expect_err("too small").0;
    assert_eq!((refused.len(), refused[0].line), (1, 3), "{refused:?}");
    assert_eq!(f.policy().config().memory, 4 << 20);
}

#[test]
fn frames_are_decided_and_malformed_ones_are_a_verdict() {
    let f =
        filter("[[rule]]\nname = \"udp\"\nprotocol = \"udp\"\nlimits = [{ rate = \"2/10s\" }]\n");
    let builder = etherparse::PacketBuilder::ethernet2([1; 6], [2; 6])
        .ipv4([203, 0, 113, 5], [198, 51, 100, 1], 64)
        .udp(5353, 53);
    let mut frame = Vec::new();
    builder.write(&mut frame, b"query").expect("a frame");
    let now = Tick::from_nanos(1);
    let verdicts: Vec<Verdict> = (0..3)
        .map(|_| f.decide_frame(&frame, now).verdict)
        .collect();
    assert_eq!(verdicts[..2], [Verdict::Allow, Verdict::Allow]);
    assert!(matches!(verdicts[2], Verdict::Throttle(_)));
    let cut = f.decide_frame(&frame[..20], now).verdict;
    assert!(
        matches!(cut, Verdict::Deny(DenyReason::Malformed(_))),
        "{cut:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Events of sources that share no limit, at the same instant, may arrive in any order:
    /// each source's verdicts stay the same.
    #[test]
    fn verdicts_do_not_depend_on_how_sources_interleave(
        events in prop::collection::vec((0u8..6, 0u64..4), 1..150),
        seed in any::<u64>(),
    ) {
        let mut sorted = events.clone();
        sorted.sort_by_key(|&(_, t)| t);
        // Another order with the same times: reverse the events within each instant, rotated
        // by the seed.
        let mut shuffled = sorted.clone();
        for chunk in shuffled.chunk_by_mut(|a, b| a.1 == b.1) {
            chunk.reverse();
            let len = chunk.len();
            chunk.rotate_left((seed as usize) % len);
        }
        let run = |order: &[(u8, u64)]| {
            let f = filter(POLICY);
            let mut per_source: Vec<Vec<Verdict>> = vec![Vec::new(); 6];
            for &(source, t) in order {
                // Each source in its own /24, so no limit is shared between them.
                let addr = IpAddr::V4(Ipv4Addr::new(203, source, 0, 1));
                let e = Event { source: Source::new(addr), transport: Transport::Tcp, bytes: 1 };
                let verdict = f.decide(&e, Tick::from_nanos(t * 3_000_000_000)).verdict;
                per_source[usize::from(source)].push(verdict);
            }
            per_source
        };
        prop_assert_eq!(run(&sorted), run(&shuffled));
    }
}

#[test]
fn a_recheck_counts_nothing_and_sees_the_source_back_under_its_limit() {
    let filter = filter(POLICY);
    let policy = filter.policy();
    let t0 = Tick::ZERO;
    assert_eq!(throttled(&filter, "198.51.100.7", 11, t0), 1);
    let held = event("198.51.100.7");
    // However often it is rechecked, nothing more is counted: still exactly 11 in the window.
    for _ in 0..100 {
        assert!(
            matches!(policy.recheck(&held, t0).verdict, Verdict::Throttle(t) if t.estimate == 11)
        );
    }
    // A window later the sliding estimate has decayed: 11 * (1 - 0.5) after half a window.
    let later = Tick::from_duration(std::time::Duration::from_secs(15));
    assert_eq!(policy.recheck(&held, later).verdict, Verdict::Allow);
}

#[test]
fn frames_decided_in_batches_get_the_decisions_of_one_at_a_time() {
    // 100 frames (several batches and a partial one) from 7 sources over two /24s, TCP and
    // UDP, IPv4 and IPv6, every 13th cut short: the same decisions in the same order.
    let frame = |i: u8| {
        let eth = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        let source = i % 7;
        let ip = if source == 6 {
            let mut src = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
            src[15] = i % 3;
            eth.ipv6(
                src,
                [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
                64,
            )
        } else {
            eth.ipv4([203, 0, 113 + source % 2, source], [192, 0, 2, 1], 64)
        };
        let mut bytes = Vec::new();
        let written = if i % 2 == 0 {
            ip.udp(40_000, 53).write(&mut bytes, &[0; 8])
        } else {
            ip.tcp(40_000, 443, 1, 64_240).syn().write(&mut bytes, &[])
        };
        written.expect("a well-formed frame");
        if i % 13 == 12 {
            bytes.truncate(20);
        }
        bytes
    };
    let frames: Vec<Vec<u8>> = (0..100u8).map(frame).collect();
    let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
    let now = Tick::from_nanos(1);
    let one = filter(POLICY);
    let singles: Vec<_> = refs.iter().map(|f| one.decide_frame(f, now)).collect();
    let batched_filter = filter(POLICY);
    let mut batched = Vec::new();
    batched_filter.decide_frames(&refs, now, &mut batched);
    assert_eq!(singles, batched);
    let count = |pick: fn(&Verdict) -> bool| singles.iter().filter(|d| pick(&d.verdict)).count();
    assert!(count(|v| matches!(v, Verdict::Throttle(_))) > 10);
    assert!(count(|v| matches!(v, Verdict::Deny(DenyReason::Malformed(_)))) == 7);
    assert!(count(|v| matches!(v, Verdict::Allow)) > 10);
}

#[test]
fn frames_past_their_caps_in_batches_get_the_decisions_of_one_at_a_time() {
    // Two floods (an IPv4 address and an IPv6 one) at 10 per 10 s: each passes its cap (81)
    // inside a batch, is noted in the sketch's hot keys' table and prepared as noted in later
    // batches, then meets a new window. A batch prepares every key before it counts any: the
    // decisions (estimates, `capped`, retry-after) must still be those of one frame at a time.
    let frame = |i: usize| {
        let eth = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        let ip = if i % 2 == 0 {
            eth.ipv4([203, 0, 113, 9], [192, 0, 2, 1], 64)
        } else {
            let mut src = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9];
            src[14] = 1;
            eth.ipv6(
                src,
                [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
                64,
            )
        };
        let mut bytes = Vec::new();
        ip.tcp(40_000, 443, 1, 64_240)
            .syn()
            .write(&mut bytes, &[])
            .expect("a well-formed frame");
        bytes
    };
    let frames: Vec<Vec<u8>> = (0..301).map(frame).collect();
    let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
    let one = filter(POLICY);
    let batched_filter = filter(POLICY);
    let mut batched = Vec::new();
    let mut singles = Vec::new();
    // Half a window apart: the second and third bursts meet a capped key's earlier window.
    for secs in [1, 6, 12, 17] {
        let now = Tick::from_duration(std::time::Duration::from_secs(secs));
        singles.extend(refs.iter().map(|f| one.decide_frame(f, now)));
        batched_filter.decide_frames(&refs, now, &mut batched);
    }
    assert_eq!(singles.len(), batched.len());
    for (i, (single, batch)) in singles.iter().zip(&batched).enumerate() {
        assert_eq!(single, batch, "frame {i}");
    }
    let capped = singles
        .iter()
        .filter(|d| matches!(d.verdict, Verdict::Throttle(t) if t.capped))
        .count();
    assert!(capped > 400, "{capped} capped throttles");
}

#[test]
fn batched_frames_keep_each_keys_hash_under_many_rules() {
    // The batch's first pass hashes every key of the rules of a frame's protocol and hands the
    // hashes to the second in that order: a rule of the other protocol, a rule the source
    // does not match, limits that share a key, and more keys than are kept (9 per IPv4 TCP
    // frame, 8 kept) must all leave each limit with its own key's count.
    const RULES: &str = r#"
[sketch]
memory = "8MiB"

[[rule]]
name = "udp-only"
protocol = "udp"
limits = [{ rate = "3/10s", ipv4_prefix = 32, ipv6_prefix = 128 }]

[[rule]]
name = "one-network"
sources = ["203.0.113.0/25"]
limits = [
  { rate = "4/10s", ipv4_prefix = 32, ipv6_prefix = 128 },
  { rate = "9/10s", ipv4_prefix = 24, ipv6_prefix = 64 },
]

[[rule]]
name = "many"
limits = [
  { rate = "5/10s", ipv4_prefix = 32, ipv6_prefix = 128 },
  { rate = "6/10s", ipv4_prefix = 32, ipv6_prefix = 128 },
  { rate = "7/10s", ipv4_prefix = 31, ipv6_prefix = 127 },
  { rate = "8/10s", ipv4_prefix = 30, ipv6_prefix = 126 },
  { rate = "11/10s", ipv4_prefix = 29, ipv6_prefix = 125 },
  { rate = "12/10s", ipv4_prefix = 28, ipv6_prefix = 124 },
  { rate = "13/1s", ipv4_prefix = 28, ipv6_prefix = 124 },
]
"#;
    let frame = |i: u8| {
        let eth = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        // Sources on both sides of 203.0.113.128, a few per /28.
        let ip = eth.ipv4([203, 0, 113, (i % 5) * 37], [192, 0, 2, 1], 64);
        let mut bytes = Vec::new();
        let written = if i % 3 == 0 {
            ip.udp(40_000, 53).write(&mut bytes, &[0; 8])
        } else {
            ip.tcp(40_000, 443, 1, 64_240).syn().write(&mut bytes, &[])
        };
        written.expect("a well-formed frame");
        bytes
    };
    let frames: Vec<Vec<u8>> = (0..120u8).map(frame).collect();
    let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
    let now = Tick::from_nanos(1);
    let one = filter(RULES);
    let singles: Vec<_> = refs.iter().map(|f| one.decide_frame(f, now)).collect();
    let batched_filter = filter(RULES);
    let mut batched = Vec::new();
    batched_filter.decide_frames(&refs, now, &mut batched);
    for (i, (single, batch)) in singles.iter().zip(&batched).enumerate() {
        assert_eq!(single, batch, "frame {i}");
    }
    assert_eq!(singles.len(), batched.len());
    // And every key holds the same count (a hash handed to the wrong limit counts into
    // another cell, which the decisions alone may not show).
    for last in (0..5u8).map(|i| i * 37) {
        let source = Source::new(IpAddr::from([203, 0, 113, last]));
        let single = one.policy().estimates(source, now);
        assert_eq!(
            single,
            batched_filter.policy().estimates(source, now),
            "{source:?}"
        );
        assert!(single.iter().all(|e| e.estimate > 0), "{single:?}");
    }
    // Every rule throttles some frame: each was counted.
    for rule in 0..3 {
        let by = |d: &tollgate_filter::Decision| matches!(d.verdict, Verdict::Throttle(t) if t.at.rule == rule);
        assert!(singles.iter().any(by), "rule {rule} throttled nothing");
    }
}

/// An event that came through the counter ahead (the proxy's XDP program) is counted once:
/// the limits that counter takes are left out of the policy's count, every other limit and
/// every other event is counted as before, and a reload keeps the counter ahead.
#[test]
fn events_counted_ahead_are_not_counted_again_under_the_limits_taken() {
    use std::time::Duration;
    use tollgate_filter::CountedAhead;
    let text = r#"
        [[rule]]
        name = "per-source"
        limits = [
          { rate = "10/10s", ipv4_prefix = 32, ipv6_prefix = 64 },
          { rate = "100/10s", ipv4_prefix = 16, ipv6_prefix = 32 },
          { rate = "50/1m", ipv4_prefix = 32, ipv6_prefix = 64 },
        ]
        [[rule]]
        name = "tcp"
        protocol = "tcp"
        limits = [{ rate = "10/10s" }]
    "#;
    let f = filter(text);
    let ahead = CountedAhead {
        window: Duration::from_secs(10),
        ipv4: vec![32, 24],
        ipv6: vec![128, 64, 48],
    };
    let now = Tick::from_nanos(1_000_000_000);
    f.count_ahead(Some(ahead.clone()), now).unwrap();
    let estimates = |addr: &str| -> Vec<u64> {
        let source = Source::new(addr.parse::<IpAddr>().unwrap());
        f.policy()
            .estimates(source, now)
            .iter()
            .map(|e| e.estimate)
            .collect()
    };
    // 30 events through the counter ahead: over 10/10s at /32, which it takes (it passed
    // them, so the policy does not refuse them there); the tcp rule's 10/10s, which it
    // does not take, refuses the last 20.
    let mut throttled_by = Vec::new();
    for _ in 0..30 {
        if let Verdict::Throttle(t) = f.decide_counted_ahead(&event("203.0.113.7"), now).verdict {
            throttled_by.push(t.at.rule);
        }
    }
    assert_eq!(throttled_by, [1; 20]);
    // per-source 10/10s at /32: taken, not counted; /16 and the minute: counted; the tcp
    // rule (one protocol): counted.
    assert_eq!(estimates("203.0.113.7"), [0, 30, 30, 30]);
    // An event that did not come through it is counted under every limit.
    for _ in 0..3 {
        let _ = f.decide(&event("198.51.100.1"), now);
    }
    assert_eq!(estimates("198.51.100.1"), [3, 3, 3, 3]);
    // A reload keeps the counter ahead.
    f.reload(Config::parse(text).unwrap(), now).unwrap();
    assert_eq!(f.policy().counted_ahead(), Some(&ahead));
    let _ = f.decide_counted_ahead(&event("203.0.113.7"), now);
    assert_eq!(estimates("203.0.113.7"), [0, 31, 31, 31]);
    // Taken out again, every limit counts.
    f.count_ahead(None, now).unwrap();
    let _ = f.decide_counted_ahead(&event("203.0.113.7"), now);
    assert_eq!(estimates("203.0.113.7"), [1, 32, 32, 32]);
}
