//! Counters a limit can trust: penalties keyed apart from the limits and out of the sketch
//! noise's reach, limits of one period and prefix counting each event once, and counts and
//! penalties that survive any reload of the rules that keep their name and limits.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use tollgate_filter::{Config, DenyReason, Event, Filter, Source, Transport, Verdict};
use tollgate_sketch::Tick;

fn filter(text: &str) -> Filter {
    Filter::new(Config::parse(text).expect("valid config")).expect("valid policy")
}

fn event(addr: Ipv4Addr) -> Event {
    Event {
        source: Source::from(addr),
        transport: Transport::Tcp,
        bytes: 60,
    }
}

fn at_secs(secs: f64) -> Tick {
    Tick::from_duration(Duration::from_secs_f64(secs))
}

fn reload(filter: &Filter, text: &str, now: Tick) {
    filter
        .reload(Config::parse(text).expect("valid config"), now)
        .expect("reload");
}

/// Issue 9, item 1: 7 connections from 3 sources, 1 s apart, under `100/1m` with a penalty.
#[test]
fn a_penalty_never_falls_on_sources_under_their_limit() {
    let f = filter("[[rule]]\nname = \"r\"\nlimits = [{ rate = \"100/1m\" }]\npenalty = \"1m\"\n");
    let sources = [1u8, 2, 3, 1, 2, 3, 1];
    for (i, last) in sources.into_iter().enumerate() {
        let verdict = f
            .decide(&event(Ipv4Addr::new(198, 51, 100, last)), at_secs(i as f64))
            .verdict;
        assert_eq!(verdict, Verdict::Allow, "event {i} from .{last}");
    }
}

/// The sketch's noise never crosses the penalty threshold: many sources penalised at once
/// (their marks are the penalty sketches' whole load) leave every other source free, within
/// the sketches' capacity (all penalised sources serve) and far past it (some penalties end
/// early, still no innocent is refused).
#[test]
fn penalties_of_many_sources_do_not_spill_onto_others() {
    // 128 KiB for the penalty, 64 KiB per sketch (width 1,787): marks made 3 s into a 10 s
    // window weigh 1.43 times the threshold, twice (two keys), and all go to one sketch,
    // which then holds about 1,787 / (4 * e * 2 * 1.43) = 57 (README: about one per KiB).
    for (bad, within) in [(50u32, true), (3_000, false)] {
        let f = filter(
            "[sketch]\nmemory = \"256KiB\"\n[[rule]]\nname = \"r\"\nlimits = [{ rate = \"1/10s\" }]\npenalty = \"10s\"\n",
        );
        let now = at_secs(3.0);
        let penalised = |addr: Ipv4Addr| {
            f.policy().recheck(&event(addr), now).verdict
                == Verdict::Deny(DenyReason::Penalty { rule: 0 })
        };
        for i in 0..bad {
            // Two events: over the limit, penalised (the limit's own overcount may already
            // throttle the first one, which is the limit's business, not the penalty's).
            let addr = Ipv4Addr::from(0x0a00_0000 + i);
            let _ = f.decide(&event(addr), now);
            let verdict = f.decide(&event(addr), now).verdict;
            assert_ne!(verdict, Verdict::Allow, "{addr}");
        }
        if within {
            let serving = (0..bad)
                .filter(|&i| penalised(Ipv4Addr::from(0x0a00_0000 + i)))
                .count();
            assert_eq!(serving, bad as usize);
        }
        let refused = (0..20_000u32)
            .filter(|&i| penalised(Ipv4Addr::from(0x0b00_0000 + i)))
            .count();
        assert_eq!(refused, 0, "{bad} penalised");
    }
}

/// A penalty lasts its length from the event that went over the limit, wherever that event
/// falls in the penalty's window: never less, and more by at most 1/32768 of it.
#[test]
fn a_penalty_lasts_its_length_from_the_event_that_started_it() {
    let f = filter("[[rule]]\nname = \"r\"\nlimits = [{ rate = \"1/1s\" }]\npenalty = \"60s\"\n");
    let penalty = 60.0;
    for (i, start) in [0.0, 0.5, 13.0, 30.0, 44.4, 59.0, 59.9, 59.999]
        .into_iter()
        .enumerate()
    {
        // Each start is a new source, and well after the last one's penalty.
        let source = Ipv4Addr::new(203, 0, 113, i as u8);
        let t = 1_000.0 * i as f64 + 60.0 * 17.0 + start;
        let _ = f.decide(&event(source), at_secs(t));
        assert!(matches!(
            f.decide(&event(source), at_secs(t)).verdict,
            Verdict::Throttle(_)
        ));
        let penalised = |dt: f64| {
            // `recheck` reads without counting, so probing does not feed the limit.
            let d = f.policy().recheck(&event(source), at_secs(t + dt)).verdict;
            d == Verdict::Deny(DenyReason::Penalty { rule: 0 })
        };
        for dt in [0.0, 1.5, 30.0, 59.0, 59.99, penalty - 0.0001] {
            assert!(penalised(dt), "start {start}: served at +{dt}");
        }
        for dt in [
            penalty * (1.0 + 1.0 / 32_768.0) + 0.0001,
            61.0,
            119.0,
            200.0,
        ] {
            assert!(!penalised(dt), "start {start}: over at +{dt}");
        }
    }
}

/// Issue 9, item 6: two limits with one period and one prefix count each event once.
#[test]
fn limits_of_one_period_and_prefix_count_each_event_once() {
    let f = filter(
        "[[rule]]\nname = \"r\"\nlimits = [{ rate = \"100/10s\", ipv4_prefix = 32 }, { rate = \"500/10s\", ipv4_prefix = 32 }]\n",
    );
    let source = Ipv4Addr::new(198, 51, 100, 7);
    for i in 0..100 {
        let verdict = f.decide(&event(source), at_secs(i as f64 * 0.01)).verdict;
        assert_eq!(verdict, Verdict::Allow, "event {i}");
    }
    let verdict = f.decide(&event(source), at_secs(1.0)).verdict;
    assert!(
        matches!(verdict, Verdict::Throttle(t) if t.estimate == 101),
        "{verdict:?}"
    );
}

const FIVE_PER_MINUTE: &str =
    "[[rule]]\nname = \"slow\"\nlimits = [{ rate = \"5/1m\" }]\npenalty = \"10m\"\n";

/// Issue 9, item 2: a reload that adds a period re-splits the memory; counts and penalties
/// of the rule it keeps survive.
#[test]
fn a_reload_that_resplits_memory_keeps_counts_and_penalties() {
    let f = filter(FIVE_PER_MINUTE);
    let source = Ipv4Addr::new(198, 51, 100, 9);
    let now = at_secs(10.0);
    let verdicts: Vec<Verdict> = (0..7)
        .map(|_| f.decide(&event(source), now).verdict)
        .collect();
    assert!(matches!(verdicts[5], Verdict::Throttle(_)), "{verdicts:?}");
    let other = format!(
        "{FIVE_PER_MINUTE}\n[[rule]]\nname = \"hourly\"\nprotocol = \"udp\"\nlimits = [{{ rate = \"1000/1h\" }}]\n"
    );
    let before = f.policy().estimates(Source::from(source), now)[0].estimate;
    reload(&f, &other, now);
    let after = f.policy().estimates(Source::from(source), now)[0].estimate;
    assert!(
        after >= before && before >= 7,
        "before {before}, after {after}"
    );
    // The penalty in force is kept: refused long after the limit alone would let it in.
    let later = at_secs(200.0);
    assert_eq!(
        f.decide(&event(source), later).verdict,
        Verdict::Deny(DenyReason::Penalty { rule: 0 })
    );
    // Removing the other rule again re-splits once more: still kept.
    reload(&f, FIVE_PER_MINUTE, later);
    assert_eq!(
        f.policy().recheck(&event(source), at_secs(300.0)).verdict,
        Verdict::Deny(DenyReason::Penalty { rule: 0 })
    );
    // And an unrelated source is free throughout.
    assert_eq!(
        f.decide(&event(Ipv4Addr::new(198, 51, 100, 10)), later)
            .verdict,
        Verdict::Allow
    );
}

/// After a reload that re-splits the memory, decisions count on from the counts before it
/// (which the retired sketch holds), one event at a time and in batches of frames alike.
#[test]
fn decisions_after_a_resplitting_reload_count_on_from_the_counts_before_it() {
    const FIVE: &str = "[[rule]]\nname = \"slow\"\nlimits = [{ rate = \"5/1m\" }]\n";
    let other = format!(
        "{FIVE}\n[[rule]]\nname = \"hourly\"\nprotocol = \"udp\"\nlimits = [{{ rate = \"1000/1h\" }}]\n"
    );
    let source = Ipv4Addr::new(198, 51, 100, 9);
    let mut frame = Vec::new();
    etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(source.octets(), [192, 0, 2, 1], 64)
        .tcp(40_000, 443, 1, 64_240)
        .syn()
        .write(&mut frame, &[])
        .expect("a well-formed frame");
    let now = at_secs(10.0);
    let one = filter(FIVE);
    let batched = filter(FIVE);
    let mut decisions = Vec::new();
    for _ in 0..4 {
        assert_eq!(one.decide(&event(source), now).verdict, Verdict::Allow);
        batched.decide_frames(&[&frame], now, &mut decisions);
    }
    assert!(
        decisions.iter().all(|d| d.verdict == Verdict::Allow),
        "{decisions:?}"
    );
    reload(&one, &other, now);
    reload(&batched, &other, now);
    // The fifth is in, the sixth over: four of the six are only in the retired sketch.
    let singles = [
        one.decide(&event(source), now),
        one.decide(&event(source), now),
    ];
    decisions.clear();
    batched.decide_frames(&[&frame, &frame], now, &mut decisions);
    for verdicts in [
        singles.map(|d| d.verdict),
        [decisions[0].verdict, decisions[1].verdict],
    ] {
        assert_eq!(verdicts[0], Verdict::Allow, "{verdicts:?}");
        assert!(
            matches!(verdicts[1], Verdict::Throttle(t) if t.estimate >= 6),
            "{verdicts:?}"
        );
    }
}

/// Keys do not depend on the order of the limits in the file.
#[test]
fn reordering_limits_keeps_their_counts() {
    let a = "[[rule]]\nname = \"r\"\nlimits = [{ rate = \"5/10s\" }, { rate = \"50/1m\", ipv4_prefix = 24 }]\n";
    let b = "[[rule]]\nname = \"r\"\nlimits = [{ rate = \"50/1m\", ipv4_prefix = 24 }, { rate = \"5/10s\" }]\n";
    let f = filter(a);
    let source = Ipv4Addr::new(198, 51, 100, 9);
    let now = at_secs(1.0);
    for _ in 0..5 {
        assert_eq!(f.decide(&event(source), now).verdict, Verdict::Allow);
    }
    reload(&f, b, now);
    let verdict = f.decide(&event(source), now).verdict;
    assert!(
        matches!(verdict, Verdict::Throttle(t) if t.at.limit == 1 && t.estimate == 6),
        "{verdict:?}"
    );
}

#[test]
fn ipv6_and_ipv4_sources_keep_apart() {
    let f = filter(
        "[[rule]]\nname = \"r\"\nlimits = [{ rate = \"1/10s\", ipv4_prefix = 0, ipv6_prefix = 0 }]\n",
    );
    let v6 = Event {
        source: Source::new("2001:db8::1".parse::<IpAddr>().expect("address")),
        transport: Transport::Tcp,
        bytes: 1,
    };
    let now = at_secs(1.0);
    assert_eq!(
        f.decide(&event(Ipv4Addr::new(1, 2, 3, 4)), now).verdict,
        Verdict::Allow
    );
    assert_eq!(f.decide(&v6, now).verdict, Verdict::Allow);
}

mod reloads {
    use std::fmt::Write as _;
    use std::net::Ipv4Addr;
    use std::time::Duration;

    use proptest::prelude::*;
    use tollgate_filter::{Config, Event, Filter, Policy, Source, Transport};
    use tollgate_sketch::Tick;

    /// One rule as text: a name from a small pool, limits from few periods and prefixes.
    #[derive(Clone, Debug)]
    struct RuleText {
        name: u8,
        limits: Vec<(u64, &'static str, u8)>,
        penalty: Option<&'static str>,
        bytes: bool,
    }

    fn rule() -> impl Strategy<Value = RuleText> {
        let period = prop::sample::select(vec!["1s", "10s", "1m", "1h"]);
        let limit = (1u64..40, period, prop::sample::select(vec![16u8, 24, 32]));
        (
            0u8..4,
            prop::collection::vec(limit, 1..4),
            prop::option::of(prop::sample::select(vec!["10s", "1m", "5m"])),
            any::<bool>(),
        )
            .prop_map(|(name, limits, penalty, bytes)| RuleText {
                name,
                limits,
                penalty,
                bytes,
            })
    }

    /// A policy's text: its rules (the first of each name), a memory, maybe a named period.
    fn text(rules: &[RuleText], memory: &str, name_one: bool) -> String {
        let mut text = format!("[sketch]\nmemory = \"{memory}\"\n");
        let mut seen = Vec::new();
        let mut body = String::new();
        for rule in rules {
            if seen.contains(&rule.name) {
                continue;
            }
            seen.push(rule.name);
            let limits: Vec<String> = rule
                .limits
                .iter()
                .map(|(count, per, v4)| {
                    format!("{{ rate = \"{count}/{per}\", ipv4_prefix = {v4} }}")
                })
                .collect();
            let _ = write!(
                body,
                "[[rule]]\nname = \"r{}\"\nlimits = [{}]\nweight = \"{}\"\n",
                rule.name,
                limits.join(", "),
                if rule.bytes { "bytes" } else { "events" }
            );
            if let Some(penalty) = rule.penalty {
                let _ = writeln!(body, "penalty = \"{penalty}\"");
            }
        }
        if name_one {
            let per = rules[0].limits[0].1;
            let _ = writeln!(text, "periods = {{ \"{per}\" = \"64KiB\" }}");
        }
        text + &body
    }

    /// Two policies: the second keeps some rules of the first as they are (in any order),
    /// changes or drops others and adds new ones, with its own memory and named period.
    fn pair() -> impl Strategy<Value = (String, String)> {
        let memory = || prop::sample::select(vec!["256KiB", "1MiB", "3MiB"]);
        (
            prop::collection::vec(rule(), 1..5),
            prop::collection::vec((0u8..3, rule()), 1..5),
            prop::collection::vec(rule(), 0..3),
            (memory(), memory(), any::<bool>(), any::<bool>()),
            any::<u64>(),
        )
            .prop_map(|(before, fates, added, (m1, m2, n1, n2), seed)| {
                let mut after: Vec<RuleText> = Vec::new();
                for (rule, (fate, other)) in before.iter().zip(fates.iter().cycle()) {
                    match fate {
                        // Kept, limits reordered.
                        0 => {
                            let mut kept = rule.clone();
                            let len = kept.limits.len();
                            kept.limits.rotate_left((seed as usize) % len);
                            after.push(kept);
                        }
                        // Changed: the same name, other limits.
                        1 => after.push(RuleText {
                            name: rule.name,
                            ..other.clone()
                        }),
                        // Dropped.
                        _ => {}
                    }
                }
                after.extend(added.into_iter().map(|r| RuleText {
                    name: r.name + 4,
                    ..r
                }));
                if after.is_empty() {
                    after.push(before[0].clone());
                }
                let len = after.len();
                after.rotate_left((seed >> 8) as usize % len);
                (text(&before, m1, n1), text(&after, m2, n2))
            })
    }

    fn event(source: u8) -> Event {
        Event {
            // Sources share /24s and /16s in pairs.
            source: Source::from(Ipv4Addr::new(198, 51, source / 2, source)),
            transport: Transport::Tcp,
            bytes: 3,
        }
    }

    /// Rule name and limit -> estimate, for `source` under `policy` at `now`.
    fn estimates(policy: &Policy, source: u8, now: Tick) -> Vec<(String, String, u64)> {
        policy
            .estimates(event(source).source, now)
            .into_iter()
            .map(|e| {
                let rule = policy.rule(e.at.rule).expect("rule");
                let limit = format!("{}@{}", e.limit.rate, e.prefix.len());
                (rule.name.clone(), limit, e.estimate)
            })
            .collect()
    }

    /// The names of the rules whose penalty `source` serves.
    fn penalised(policy: &Policy, source: u8, now: Tick) -> Vec<String> {
        let names = policy.penalties(event(source).source, now).into_iter();
        names
            .map(|rule| policy.rule(rule).expect("rule").name.clone())
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Issue 9, item 2: for random pairs of valid policies, every rule whose name and
        /// limits are unchanged reads an estimate at least its estimate before the reload, now
        /// and later, and every penalty in force under a rule that keeps its name, limits and
        /// penalty stays in force.
        #[test]
        fn a_reload_never_lowers_the_counts_of_rules_it_keeps(
            (before, after) in pair(),
            events in prop::collection::vec((0u8..6, 0u64..120_000), 1..200),
            reload_at in 60_000u64..130_000,
            later in prop::sample::select(vec![0u64, 500, 5_000, 30_000]),
        ) {
            let filter = Filter::new(Config::parse(&before).expect("valid")).expect("policy");
            let ms = |ms: u64| Tick::from_duration(Duration::from_millis(ms));
            let mut events = events;
            events.sort_by_key(|&(_, t)| t);
            for &(source, t) in events.iter().filter(|&&(_, t)| t <= reload_at) {
                let _ = filter.decide(&event(source), ms(t));
            }
            let old = filter.policy();
            filter.reload(Config::parse(&after).expect("valid"), ms(reload_at)).expect("reload");
            let new = filter.policy();
            let kept = |name: &str| {
                let rules = |p: &Policy| {
                    p.config().rules.iter().find(|r| r.name == name).map(|r| {
                        let mut limits = r.limits.clone();
                        limits.sort_by_key(|l| (l.rate.per, l.rate.count, l.ipv4_prefix.len()));
                        (limits, r.penalty)
                    })
                };
                (rules(&old), rules(&new))
            };
            // At the reload: never below what the old policy read, penalties kept.
            let at = reload_at;
            for source in 0..6u8 {
                let is = estimates(&new, source, ms(at));
                for (rule, limit, estimate) in estimates(&old, source, ms(at)) {
                    let (a, b) = kept(&rule);
                    if a.map(|x| x.0) != b.map(|x| x.0) {
                        continue;
                    }
                    let now = is
                        .iter()
                        .filter(|(r, l, _)| *r == rule && *l == limit)
                        .map(|e| e.2)
                        .min()
                        .expect("the kept limit is there");
                    prop_assert!(
                        now >= estimate,
                        "{rule} {limit} source {source} at {at}: {estimate} -> {now}\n{before}\n{after}"
                    );
                }
                let serving = penalised(&new, source, ms(at));
                for rule in penalised(&old, source, ms(at)) {
                    let (a, b) = kept(&rule);
                    if a.is_some() && a == b {
                        prop_assert!(
                            serving.contains(&rule),
                            "{rule}: penalty of source {source} lost at {at}\n{before}\n{after}"
                        );
                    }
                }
            }
            // Later (the old sketches read stale windows as current now and then, an
            // overcount, so compare with the exact count): never below the sliding count of
            // the events before the reload.
            let at = reload_at + later;
            let config = old.config();
            for source in 0..6u8 {
                let is = estimates(&new, source, ms(at));
                for rule in &config.rules {
                    let (a, b) = kept(&rule.name);
                    if a.map(|x| x.0) != b.map(|x| x.0) {
                        continue;
                    }
                    let weight = if rule.weight == tollgate_filter::Weight::Bytes { 3 } else { 1 };
                    for limit in &rule.limits {
                        let len = limit.ipv4_prefix.len();
                        let same = |other: u8| {
                            let addr = |s: u8| u32::from(Ipv4Addr::new(198, 51, s / 2, s));
                            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                            addr(other) & mask == addr(source) & mask
                        };
                        let per = limit.rate.per.as_millis() as u64;
                        let window = at / per;
                        let sum = |w: u64| -> u64 {
                            events
                                .iter()
                                .filter(|&&(s, t)| t <= reload_at && same(s) && t / per == w)
                                .map(|_| weight)
                                .sum()
                        };
                        let remaining = per - (at - window * per);
                        let previous = window.checked_sub(1).map_or(0, sum);
                        let exact = sum(window) + previous * remaining / per;
                        // A key is counted exactly up to its cap, EXACT_MULTIPLE times the
                        // largest limit that shares it plus one; above it, at least the cap.
                        let cap = rule
                            .limits
                            .iter()
                            .filter(|o| o.rate.per == limit.rate.per && o.ipv4_prefix.len() == len)
                            .map(|o| tollgate_filter::EXACT_MULTIPLE * o.rate.count + 1)
                            .max()
                            .expect("the limit itself");
                        let exact = exact.min(cap);
                        let name = format!("{}@{len}", limit.rate);
                        let now = is
                            .iter()
                            .filter(|(r, l, _)| *r == rule.name && *l == name)
                            .map(|e| e.2)
                            .min()
                            .expect("the kept limit is there");
                        prop_assert!(
                            now >= exact,
                            "{} {name} source {source} at {at}: exact {exact}, read {now}\n{before}\n{after}",
                            rule.name
                        );
                    }
                }
            }
        }
    }
}
