//! Retry-After for a source past what is counted exactly: never shorter than the exact
//! sliding count's, though the sketch stopped counting the key at 8 times its limit.

use std::net::IpAddr;
use std::time::Duration;

use tollgate_filter::{Config, Event, Filter, Source, Transport, Verdict};
use tollgate_sketch::Tick;

const LIMIT: u64 = 10;
const PERIOD_MS: u64 = 10_000;

const POLICY: &str = r#"
[sketch]
memory = "4MiB"

[[rule]]
name = "per-source"
limits = [{ rate = "10/10s" }]
"#;

fn at(millis: u64) -> Tick {
    Tick::from_nanos(millis * 1_000_000)
}

/// The exact sliding count at `t` (ms) of `events` (ms each): the current window's count plus
/// the previous window's, weighted by the part of it still inside the sliding window.
fn exact(events: &[u64], t: u64) -> f64 {
    let window = t / PERIOD_MS;
    let into = (t % PERIOD_MS) as f64 / PERIOD_MS as f64;
    let count = |k: u64| {
        events
            .iter()
            .filter(|&&e| e / PERIOD_MS == k && e <= t)
            .count() as f64
    };
    count(window) + window.checked_sub(1).map_or(0.0, count) * (1.0 - into)
}

/// The oracle: how long after `now` (ms) the exact sliding count of `events` is back under the
/// limit if the source sends nothing more, to the millisecond.
fn oracle(events: &[u64], now: u64) -> Duration {
    let back = (now..now + 3 * PERIOD_MS)
        .find(|&t| exact(events, t) <= LIMIT as f64)
        .expect("back under within three periods");
    Duration::from_millis(back - now)
}

#[test]
fn a_source_at_twenty_times_its_limit_is_told_no_shorter_than_the_exact_count_says() {
    let source = Source::new("203.0.113.9".parse::<IpAddr>().expect("an address"));
    let event = Event {
        source,
        transport: Transport::Tcp,
        bytes: 0,
    };
    // 20 x the limit: early in a window, late in one, and split across two.
    let floods: [&[(u64, u64)]; 3] = [
        &[(103_000, 200)],
        &[(109_900, 200)],
        &[(95_000, 100), (104_000, 100)],
    ];
    for flood in floods {
        let filter = Filter::new(Config::parse(POLICY).expect("valid")).expect("fits");
        let mut events = Vec::new();
        let mut last = None;
        for &(millis, count) in flood {
            for _ in 0..count {
                events.push(millis);
                last = Some(filter.decide(&event, at(millis)).verdict);
            }
        }
        let now = events.last().copied().expect("events");
        let expected = oracle(&events, now);
        let Some(Verdict::Throttle(throttle)) = last else {
            panic!("{flood:?}: not throttled: {last:?}");
        };
        assert!(throttle.capped, "{flood:?}: {throttle:?}");
        assert!(
            throttle.retry_after >= expected,
            "{flood:?}: decide says back under in {:?}, the exact count in {expected:?}",
            throttle.retry_after
        );
        // A bound, not a guess: at most the rest of this window and the next.
        assert!(throttle.retry_after <= Duration::from_millis(2 * PERIOD_MS));
        let why = filter.policy().explain(source, Transport::Tcp, at(now));
        let limit = &why.rules[0].limits[0];
        assert!(limit.capped, "{flood:?}: {limit:?}");
        let told = limit.retry_after.expect("over");
        assert!(
            told >= expected,
            "{flood:?}: explain says back under in {told:?}, the exact count in {expected:?}"
        );
        let estimates = filter.policy().estimates(source, at(now));
        assert!(estimates[0].capped, "{estimates:?}");
    }
}

#[test]
fn a_source_under_the_cap_is_not_marked_capped() {
    let filter = Filter::new(Config::parse(POLICY).expect("valid")).expect("fits");
    let source = Source::new("203.0.113.10".parse::<IpAddr>().expect("an address"));
    let event = Event {
        source,
        transport: Transport::Tcp,
        bytes: 0,
    };
    let mut last = None;
    for _ in 0..5 * LIMIT {
        last = Some(filter.decide(&event, at(103_000)).verdict);
    }
    let Some(Verdict::Throttle(throttle)) = last else {
        panic!("not throttled: {last:?}");
    };
    assert!(!throttle.capped, "{throttle:?}");
    assert!(!filter.policy().estimates(source, at(103_000))[0].capped);
}
