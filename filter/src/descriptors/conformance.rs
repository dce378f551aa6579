//! Conformance with the reference server's configuration semantics: the examples of
//! envoyproxy/ratelimit's `README.md` ("Examples" 2 to 9), each asserting codes and statuses.
//! The sketch may overcount by its stated bound (`DescriptorPolicy::overcount_bound`), so a
//! key may be refused up to that many requests early, never late: each run of codes is
//! checked as "OK for the first `limit - bound`, OVER_LIMIT from `limit + 1` on", and each
//! `limit_remaining` as at most the exact one and at least that minus the bound.

use std::time::Duration;

use proptest::prelude::*;
use tollgate_sketch::{Clock, ManualClock, Tick};

use super::*;

const MEMORY: usize = 1 << 20;

fn policy(text: &str) -> DescriptorPolicy {
    let config = DescriptorConfig::parse(&[("example.yaml", text)]).unwrap();
    DescriptorPolicy::new(&config, MEMORY, None).unwrap()
}

fn request(domain: &str, descriptors: &[&[(&str, &str)]]) -> Request {
    Request {
        domain: domain.into(),
        descriptors: descriptors.iter().map(|d| Descriptor::of(d)).collect(),
        hits_addend: 0,
    }
}

/// The codes of `n` requests in a row at `now`.
fn codes(policy: &DescriptorPolicy, request: &Request, n: usize, now: Tick) -> Vec<Code> {
    (0..n)
        .map(|_| policy.decide(request, now).unwrap().code)
        .collect()
}

/// The largest stated overcount of the policy's sketches at `now`.
fn bound(policy: &DescriptorPolicy, now: Tick) -> usize {
    let most = Unit::ALL
        .into_iter()
        .map(|u| policy.overcount_bound(u, now))
        .max();
    usize::try_from(most.unwrap_or(0)).unwrap()
}

/// `codes` are OK for the first `ok` less the sketch's bound, OVER_LIMIT past `ok`.
fn within(policy: &DescriptorPolicy, codes: &[Code], ok: usize) {
    let sure = ok.saturating_sub(bound(policy, T0));
    assert!(
        codes[..sure].iter().all(|c| *c == Code::Ok),
        "{codes:?}, {ok} OK"
    );
    assert!(
        codes[ok..].iter().all(|c| *c == Code::OverLimit),
        "{codes:?}, {ok} OK"
    );
    assert!(!codes[ok..].is_empty(), "the test must go past the limit");
}

/// `remaining` is the exact one, or less by at most the sketch's bound.
fn near(policy: &DescriptorPolicy, remaining: u32, exact: u32) {
    let low = exact.saturating_sub(u32::try_from(bound(policy, T0)).unwrap());
    assert!(
        (low..=exact).contains(&remaining),
        "{remaining} not in {low}..={exact}"
    );
}

const T0: Tick = Tick::from_nanos(1_000_000_000);

/// Example 2: nested descriptors, a placeholder without a limit, and two descriptors in one
/// request answered together (OVER_LIMIT when either is).
#[test]
fn example_2_nested_descriptors_and_the_or_of_two() {
    let p = policy(
        "domain: messaging\ndescriptors:\n  - key: message_type\n    value: marketing\n    descriptors:\n      - key: to_number\n        rate_limit:\n          unit: day\n          requests_per_unit: 5\n  - key: to_number\n    rate_limit:\n      unit: day\n      requests_per_unit: 100\n",
    );
    let both = request(
        "messaging",
        &[
            &[("message_type", "marketing"), ("to_number", "2061111111")],
            &[("to_number", "2061111111")],
        ],
    );
    let first = p.decide(&both, T0).unwrap();
    assert_eq!(first.code, Code::Ok);
    let limits: Vec<_> = first
        .statuses
        .iter()
        .map(|s| (s.current_limit, s.limit_remaining))
        .collect();
    let day = |n| {
        Some(CurrentLimit {
            requests_per_unit: n,
            unit: Unit::Day,
        })
    };
    assert_eq!((limits[0].0, limits[1].0), (day(5), day(100)));
    near(&p, limits[0].1, 4);
    near(&p, limits[1].1, 99);
    assert_eq!(first.statuses[0].duration_until_reset, Some(Duration::ZERO));
    within(&p, &codes(&p, &both, 5, T0), 4);
    let last = p.decide(&both, T0).unwrap();
    assert_eq!(last.statuses[0].code, Code::OverLimit);
    assert_eq!(last.statuses[1].code, Code::Ok);
    near(&p, last.statuses[1].limit_remaining, 93);
    // Over, the reset is in the future and at most two days (the window's rest and one more).
    let reset = last.statuses[0].duration_until_reset.unwrap();
    assert!(reset > Duration::ZERO && reset <= Duration::from_secs(2 * 86_400));
    // Another number: its own counts. The placeholder alone: no limit.
    let other = request(
        "messaging",
        &[&[("message_type", "marketing"), ("to_number", "2062222222")]],
    );
    assert_eq!(p.decide(&other, T0).unwrap().code, Code::Ok);
    let placeholder = p.decide(
        &request("messaging", &[&[("message_type", "marketing")]]),
        T0,
    );
    assert_eq!(placeholder.unwrap().statuses[0].outcome, Outcome::NoRule);
}

/// Example 3: the exact value before the key alone: the blocked address gets 0, any other 10.
#[test]
fn example_3_the_exact_value_is_tried_before_the_key() {
    let p = policy(
        "domain: edge_proxy_per_ip\ndescriptors:\n  - key: remote_address\n    rate_limit:\n      unit: second\n      requests_per_unit: 10\n  - key: remote_address\n    value: 50.0.0.5\n    rate_limit:\n      unit: second\n      requests_per_unit: 0\n",
    );
    let any = request("edge_proxy_per_ip", &[&[("remote_address", "50.0.0.1")]]);
    within(&p, &codes(&p, &any, 11, T0), 10);
    let blocked = request("edge_proxy_per_ip", &[&[("remote_address", "50.0.0.5")]]);
    assert_eq!(codes(&p, &blocked, 1, T0), [Code::OverLimit]);
}

/// Example 4: a request deeper than the tree, or landing on a node without a limit, matches
/// nothing.
#[test]
fn example_4_the_request_depth_must_match_the_config_depth() {
    let shallow = policy(
        "domain: example4\ndescriptors:\n  - key: key\n    value: value\n    rate_limit:\n      requests_per_unit: 300\n      unit: second\n",
    );
    let deep = request("example4", &[&[("key", "value"), ("subkey", "subvalue")]]);
    let status = &shallow.decide(&deep, T0).unwrap().statuses[0];
    assert_eq!(
        (status.outcome, status.current_limit, status.limit_remaining),
        (Outcome::NoRule, None, 0)
    );
    let nested = policy(
        "domain: example4\ndescriptors:\n  - key: key\n    value: value\n    descriptors:\n      - key: subkey\n        rate_limit:\n          requests_per_unit: 300\n          unit: second\n",
    );
    let status = &nested.decide(&deep, T0).unwrap().statuses[0];
    assert_eq!(
        (status.outcome, status.limit_remaining),
        (Outcome::Limited, 299)
    );
    // An unknown domain: OK, counted apart.
    let elsewhere = request("nowhere", &[&[("key", "value")]]);
    assert_eq!(
        nested.decide(&elsewhere, T0).unwrap().statuses[0].outcome,
        Outcome::UnknownDomain
    );
}

/// Example 5: unlimited is OK with `limit_remaining` u32::MAX and no limit, never counted.
#[test]
fn example_5_unlimited_is_ok_with_the_most_remaining() {
    let p = policy(
        "domain: internal\ndescriptors:\n  - key: ldap\n    rate_limit:\n      unlimited: true\n  - key: azure\n    rate_limit:\n      unit: minute\n      requests_per_unit: 100\n",
    );
    let ldap = request("internal", &[&[("ldap", "x")]]);
    for _ in 0..1_000 {
        let response = p.decide(&ldap, T0).unwrap();
        let status = &response.statuses[0];
        assert_eq!(response.code, Code::Ok);
        assert_eq!(
            (status.outcome, status.limit_remaining, status.current_limit),
            (Outcome::Unlimited, u32::MAX, None)
        );
    }
    let azure = request("internal", &[&[("azure", "x")]]);
    within(&p, &codes(&p, &azure, 101, T0), 100);
}

/// Example 6: a shadow rule over its limit answers OK, marked shadowed; its neighbour limits.
#[test]
fn example_6_shadow_mode_is_counted_and_reported_never_enforced() {
    let p = policy(
        "domain: example6\ndescriptors:\n  - key: service\n    descriptors:\n      - key: user\n        value: user-a\n        rate_limit:\n          requests_per_unit: 10\n          unit: second\n        shadow_mode: true\n      - key: user\n        value: user-b\n        rate_limit:\n          requests_per_unit: 20\n          unit: second\n",
    );
    let a = request(
        "example6",
        &[&[("service", "auth-service"), ("user", "user-a")]],
    );
    let answers: Vec<_> = (0..12).map(|_| p.decide(&a, T0).unwrap()).collect();
    assert!(answers.iter().all(|r| r.code == Code::Ok));
    let shadowed: Vec<Code> = answers
        .iter()
        .map(|r| match r.statuses[0].shadowed {
            true => Code::OverLimit,
            false => Code::Ok,
        })
        .collect();
    within(&p, &shadowed, 10);
    assert_eq!(answers[11].statuses[0].limit_remaining, 0);
    let b = request(
        "example6",
        &[&[("service", "auth-service"), ("user", "user-b")]],
    );
    within(&p, &codes(&p, &b, 21, T0), 20);
}

/// Example 7: `replaces` drops the named rule from a request that also matches the replacing
/// one, and leaves its count alone; alone, the named rule applies.
#[test]
fn example_7_replaces_drops_the_named_rule_and_leaves_its_count() {
    let p = policy(
        "domain: example7\ndescriptors:\n  - key: key_1\n    value: value_1\n    descriptors:\n      - key: user\n        value: bkthomps\n        rate_limit:\n          name: specific_limit\n          requests_per_unit: 5\n          unit: second\n  - key: key_2\n    value: value_2\n    descriptors:\n      - key: user\n        value: bkthomps\n        rate_limit:\n          replaces:\n            - name: specific_limit\n          requests_per_unit: 10\n          unit: second\n",
    );
    let one: &[(&str, &str)] = &[("key_1", "value_1"), ("user", "bkthomps")];
    let two: &[(&str, &str)] = &[("key_2", "value_2"), ("user", "bkthomps")];
    let both = request("example7", &[one, two]);
    let first = p.decide(&both, T0).unwrap();
    assert_eq!(first.statuses[0].outcome, Outcome::Replaced);
    assert_eq!(first.statuses[0].current_limit, None);
    near(&p, first.statuses[1].limit_remaining, 9);
    within(&p, &codes(&p, &both, 10, T0), 9);
    // The replaced rule counted nothing: had it counted the 11, its estimate (never below the
    // truth) would be at least 11. Alone, it applies.
    let alone = request("example7", &[one]);
    assert!(p.estimate_of(&alone, T0) < 11);
    within(&p, &codes(&p, &alone, 6, T0), 5);
}

/// Example 9 (its trailing wildcard; the middle ones are refused): a prefix matches, each
/// value counted apart; an exact value elsewhere in the file still wins.
#[test]
fn example_9_a_trailing_wildcard_matches_by_prefix_each_value_apart() {
    let p = policy(
        "domain: example9\ndescriptors:\n  - key: key1\n    value: value*\n    rate_limit:\n      unit: minute\n      requests_per_unit: 2\n  - key: key1\n    value: value9\n    rate_limit:\n      unit: minute\n      requests_per_unit: 1\n",
    );
    for value in ["value1", "valueXYZ", "value"] {
        let r = request("example9", &[&[("key1", value)]]);
        within(&p, &codes(&p, &r, 3, T0), 2);
    }
    let nine = request("example9", &[&[("key1", "value9")]]);
    within(&p, &codes(&p, &nine, 2, T0), 1);
    let other = request("example9", &[&[("key1", "valu")]]);
    assert_eq!(
        p.decide(&other, T0).unwrap().statuses[0].outcome,
        Outcome::NoRule
    );
    let config = DescriptorConfig::parse(&[(
        "mid.yaml",
        "domain: example9\ndescriptors:\n  - key: path\n    value: /api/*/action\n",
    )]);
    assert_eq!(
        config.unwrap_err().to_string(),
        "mid.yaml:4:12: a '*' inside a value is not supported (only a trailing '*')"
    );
}

/// `hits_addend` is the weight (0 means 1); a request heavier than the room left is over.
#[test]
fn hits_addend_is_the_weight_and_zero_means_one() {
    let p = policy(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10}\n",
    );
    let mut r = request("d", &[&[("k", "v")]]);
    r.hits_addend = 4;
    near(&p, p.decide(&r, T0).unwrap().statuses[0].limit_remaining, 6);
    r.hits_addend = 0;
    near(&p, p.decide(&r, T0).unwrap().statuses[0].limit_remaining, 5);
    r.hits_addend = 6;
    assert_eq!(p.decide(&r, T0).unwrap().code, Code::OverLimit);
}

/// A reload keeps the counts of a rule whose path is unchanged, whatever its limit; a rule
/// whose path changed starts from 0.
#[test]
fn a_reload_keeps_the_counts_of_an_unchanged_path_even_with_a_new_limit() {
    let text = |value: &str, limit: u32| {
        format!(
            "domain: d\ndescriptors:\n  - key: k\n    value: {value}\n    rate_limit: {{unit: minute, requests_per_unit: {limit}}}\n"
        )
    };
    let parse = |t: String| DescriptorConfig::parse(&[("d.yaml", &t)]).unwrap();
    // Estimates are never below the truth, and above it by at most the bound (here 5 or
    // less, against 40 events).
    let first = DescriptorPolicy::new(&parse(text("v", 50)), MEMORY, None).unwrap();
    let r = request("d", &[&[("k", "v")]]);
    let _ = codes(&first, &r, 40, T0);
    let raised = DescriptorPolicy::new(&parse(text("v", 60)), MEMORY, Some((&first, T0))).unwrap();
    assert!(raised.estimate_of(&r, T0) >= 40);
    within(&raised, &codes(&raised, &r, 21, T0), 20);
    let moved = DescriptorPolicy::new(&parse(text("v*", 60)), MEMORY, Some((&raised, T0))).unwrap();
    assert!(moved.estimate_of(&r, T0) < 40);
}

/// Bad requests are refused before anything is counted.
#[test]
fn a_refused_request_counts_nothing() {
    let p = policy(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    );
    let one: &[(&str, &str)] = &[("k", "v")];
    let mut r = request("d", &[one; MAX_DESCRIPTORS + 1]);
    assert_eq!(p.decide(&r, T0).unwrap_err().name(), "too_many_descriptors");
    r.descriptors.truncate(1);
    assert_eq!(p.decide(&r, T0).unwrap().code, Code::Ok);
}

/// Reservations: a hot key's sketch counts ahead of its requests (a few at a time, kept as
/// this thread's credit), and the answers take this thread's credit off, so one thread's
/// `limit_remaining` stays exactly the reference's while the sketch holds more.
#[test]
fn one_thread_answers_exactly_while_its_sketch_counts_ahead() {
    let p = policy(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1000}\n",
    );
    let r = request("d", &[&[("k", "v")]]);
    let mut ahead = 0;
    for n in 1..=1000 {
        let status = p.decide(&r, T0).unwrap().statuses.remove(0);
        assert_eq!(status.code, Code::Ok, "request {n}");
        assert_eq!(status.limit_remaining, 1000 - n, "request {n}");
        // Room for one more request now, until the last.
        let room = status.duration_until_reset == Some(Duration::ZERO);
        assert_eq!(room, n < 1000, "request {n}: {status:?}");
        let (counted, held, _) = p.counted_of(&r, T0);
        assert_eq!(counted - held, u64::from(n), "request {n}");
        ahead += u32::from(held > 0);
    }
    assert!(ahead > 100, "the sketch counted ahead {ahead} times only");
    let status = p.decide(&r, T0).unwrap().statuses.remove(0);
    assert_eq!((status.code, status.limit_remaining), (Code::OverLimit, 0));
}

/// The window formula on exact counts: `count` events per window index.
fn formula(counts: &std::collections::BTreeMap<u64, u64>, t: u64, period: u64) -> u64 {
    let k = t / period;
    let this = counts.get(&k).copied().unwrap_or(0);
    let before = k
        .checked_sub(1)
        .and_then(|p| counts.get(&p))
        .copied()
        .unwrap_or(0);
    let rest = period - t % period;
    this + (u128::from(before) * u128::from(rest)).div_ceil(u128::from(period)) as u64
}

proptest! {
    /// Driven by a manual clock, a key is never let through more than its limit per window:
    /// in each of the sketch's windows the weight let through is at most the limit, and at
    /// every request let through the sliding window formula over what was let through so far
    /// is at most the limit; and `duration_until_reset` is never early: back then, a request
    /// of the same weight has room.
    #[test]
    fn a_key_is_never_let_through_more_than_its_limit_per_window(
        // Small limits with gaps up to 400 ms, and limits whose keys reserve (a cap past
        // 2^8 + 1) with gaps up to 10 ms, so that a second's requests reach a count of 2^8.
        (limit, most_gap) in prop_oneof![
            (0u32..20).prop_map(|limit| (limit, 400u64)),
            (300u32..500).prop_map(|limit| (limit, 10u64)),
        ],
        steps in prop::collection::vec((0u64..400, 0u64..4), 1..400),
    ) {
        let p = policy(&format!("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {{unit: second, requests_per_unit: {limit}}}\n"));
        let clock = ManualClock::new(T0);
        let period = 1_000_000_000u64;
        let mut through = std::collections::BTreeMap::<u64, u64>::new();
        for (gap_ms, addend) in steps {
            clock.advance(Duration::from_millis(gap_ms % most_gap));
            let now = clock.now();
            let mut r = request("d", &[&[("k", "v")]]);
            r.hits_addend = addend;
            let status = p.decide(&r, now).unwrap().statuses.remove(0);
            if status.code == Code::Ok {
                *through.entry(now.as_nanos() / period).or_default() += r.weight();
                prop_assert!(formula(&through, now.as_nanos(), period) <= u64::from(limit));
            }
            prop_assert!(through.values().all(|&w| w <= u64::from(limit)));
            // Never early: back at `now + reset`, a request of this weight has room (the
            // estimate reads counting nothing).
            let reset = status.duration_until_reset.unwrap();
            let target = u64::from(limit).saturating_sub(r.weight());
            prop_assert!(p.estimate_of(&r, now + reset) <= target);
        }
    }
}
