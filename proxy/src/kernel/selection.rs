//! Which sources go into the kernel, and for how long: asked of the policy without counting
//! anything (the admin's point queries), for the sources the offender list names.

use std::net::IpAddr;
use std::time::Duration;

use tollgate_filter::{EXACT_MULTIPLE, Policy, Source};
use tollgate_sketch::Tick;

use super::element::Element;

/// Bisection steps for a penalty's timeout: the answer is within `2 * length / 2^STEPS`
/// above the exact instant (about 0.05% of the length).
const STEPS: u32 = 12;

/// The elements for `sources` (each with the rejections the offender list counted for it) at
/// `now`, heaviest first, at most `max`, no two overlapping.
///
/// Heaviest: a key is counted only up to [`EXACT_MULTIPLE`] times its limits (plus one), so
/// every flood source past that reads the same estimate, and ordering by it would rank them by
/// noise. Elements of keys past the cap come first (each is at least that multiple over), in
/// the order of their sources' rejections (counted by the offender list, uncapped: how much
/// of the flood they carried); then the others by how far over their limit they are, then
/// penalties.
///
/// A source is in when, under a rule that is not `shadow`, its estimate has reached `factor`
/// times a limit (the element is the source's network at that limit's prefix, held until the
/// estimate would fall back under the limit with no further event, as
/// [`tollgate_filter::LimitEstimate::back_under`] solves it: the kernel lets nothing through
/// to count meanwhile), or when it serves a penalty (its network at the prefix the
/// penalty is keyed at, that of the limit that started it, held until the penalty ends).
#[must_use]
pub(crate) fn select(
    policy: &Policy,
    sources: impl IntoIterator<Item = (IpAddr, u64)>,
    factor: f64,
    now: Tick,
    max: usize,
) -> Vec<Element> {
    // Each element with what orders it: past the cap, and its source's rejections then.
    let mut found: Vec<(Element, bool, u64)> = Vec::new();
    for (addr, rejected) in sources {
        let source = Source::new(addr);
        for estimate in policy.estimates(source, now) {
            if policy.rule(estimate.at.rule).is_none_or(|r| r.shadow) {
                continue;
            }
            let limit = estimate.limit.rate.count;
            // Limits are at most MAX_LIMIT (well under 2^53): exact as f64.
            #[allow(clippy::cast_precision_loss)]
            let weight = estimate.estimate as f64 / limit as f64;
            // Keys are counted exactly only up to EXACT_MULTIPLE times a limit (plus one): an
            // estimate past that is over any factor.
            let over_any = estimate.estimate > EXACT_MULTIPLE.saturating_mul(limit);
            if weight < factor && !over_any {
                continue;
            }
            let element = Element {
                network: source.masked(estimate.prefix),
                len: estimate.prefix.len(),
                timeout: estimate.back_under,
                weight,
            };
            found.push((element, estimate.capped, rejected));
        }
        for (rule, prefix) in policy.penalty_networks(source, now) {
            let Some(length) = policy.rule(rule).and_then(|r| r.penalty) else {
                continue;
            };
            let serving = |at: Tick| {
                policy
                    .penalty_networks(source, at)
                    .contains(&(rule, prefix))
            };
            let element = Element {
                network: source.masked(prefix),
                len: prefix.len(),
                timeout: until(now, 2 * length, serving),
                weight: factor,
            };
            found.push((element, false, 0));
        }
    }
    found.sort_by(|(a, a_capped, a_rejected), (b, b_capped, b_rejected)| {
        b_capped
            .cmp(a_capped)
            .then(if *a_capped {
                b_rejected.cmp(a_rejected)
            } else {
                std::cmp::Ordering::Equal
            })
            .then(b.weight.total_cmp(&a.weight))
    });
    let mut chosen: Vec<Element> = Vec::new();
    for (element, _, _) in found {
        if chosen.len() == max {
            break;
        }
        if !chosen
            .iter()
            .any(|c| c.overlaps(element.network, element.len))
        {
            chosen.push(element);
        }
    }
    chosen
}

/// The least `d` in `(0, horizon]` with `holds(now + d)` false, by bisection (so `holds` must
/// turn false once and stay false, as an estimate with no further events does); `horizon` if
/// it never does before then.
fn until(now: Tick, horizon: Duration, holds: impl Fn(Tick) -> bool) -> Duration {
    let (mut low, mut high) = (Duration::ZERO, horizon);
    if holds(now + high) {
        return horizon;
    }
    for _ in 0..STEPS {
        let middle = (low + high) / 2;
        if holds(now + middle) {
            low = middle;
        } else {
            high = middle;
        }
    }
    high
}

#[cfg(test)]
mod tests {
    use tollgate_filter::{Config, Event, Transport};

    use super::*;

    fn policy(rules: &str) -> Policy {
        let text = format!("[sketch]\nmemory = \"1MiB\"\n{rules}");
        Policy::compile(Config::parse(&text).unwrap(), None).unwrap()
    }

    fn flood(policy: &Policy, addr: &str, events: u32, now: Tick) {
        let event = Event {
            source: Source::new(addr.parse().unwrap()),
            transport: Transport::Tcp,
            bytes: 0,
        };
        for _ in 0..events {
            let _ = policy.decide(&event, now);
        }
    }

    const RULE: &str = "[[rule]]\nname = \"r\"\nlimits = [{ rate = \"10/10s\" }]\n";

    #[test]
    fn a_source_over_the_factor_is_held_until_its_estimate_is_back_under_the_limit() {
        let policy = policy(RULE);
        let now = Tick::from_duration(Duration::from_secs(100));
        flood(&policy, "192.0.2.1", 40, now);
        flood(&policy, "192.0.2.2", 15, now);
        flood(&policy, "192.0.2.3", 5, now);
        let sources = ["192.0.2.1", "192.0.2.2", "192.0.2.3"].map(|s| (s.parse().unwrap(), 0));
        let chosen = select(&policy, sources, 2.0, now, 10);
        assert_eq!(chosen.len(), 1, "{chosen:?}");
        let element = chosen[0];
        assert_eq!(element.network, "192.0.2.1".parse::<IpAddr>().unwrap());
        assert_eq!(element.len, 32);
        // Exactly the instant the estimate falls under the limit: over just before, under at it.
        let at = |d: Duration| {
            policy
                .estimates(Source::new(element.network), now + d)
                .first()
                .map_or(0, |e| e.estimate)
        };
        assert!(at(element.timeout) < 10, "{element:?}");
        assert!(at(element.timeout - Duration::from_nanos(1)) >= 10);
        assert!(element.timeout <= Duration::from_secs(20));
        // With factor 1 both over the limit go in, the heavier first.
        let both = select(&policy, sources, 1.0, now, 10);
        assert_eq!(both.len(), 2);
        assert!(both[0].weight > both[1].weight);
        // Bounded: the heaviest only.
        assert_eq!(select(&policy, sources, 1.0, now, 1), both[..1]);
    }

    #[test]
    fn shadow_rules_never_reach_the_kernel() {
        let policy = policy(&format!("{RULE}shadow = true\n"));
        let now = Tick::from_duration(Duration::from_secs(100));
        flood(&policy, "192.0.2.1", 100, now);
        assert!(select(&policy, [("192.0.2.1".parse().unwrap(), 0)], 1.0, now, 10).is_empty());
    }

    #[test]
    fn a_prefix_limit_and_its_penalty_hold_the_network_once() {
        let policy = policy(
            "[[rule]]\nname = \"net\"\nlimits = [{ rate = \"10/10s\", ipv4_prefix = 24 }]\n\
             penalty = \"1m\"\n",
        );
        let now = Tick::from_duration(Duration::from_secs(100));
        flood(&policy, "198.51.100.1", 30, now);
        flood(&policy, "198.51.100.2", 30, now);
        let sources = ["198.51.100.1", "198.51.100.2"].map(|s| (s.parse().unwrap(), 0));
        let chosen = select(&policy, sources, 1.0, now, 10);
        // The /24 covers both addresses and their penalties: one element.
        assert_eq!(chosen.len(), 1, "{chosen:?}");
        assert_eq!(chosen[0].network, "198.51.100.0".parse::<IpAddr>().unwrap());
        assert_eq!(chosen[0].len, 24);
        // The /24's estimate (60 events, limit 10 per 10s) is under 10 once the previous
        // window's share, ceil(60 x remaining / 10s), is 9: 1.5s before the next window ends.
        let exact = Duration::from_millis(18_500);
        assert_eq!(chosen[0].timeout, exact);
        // Later, the estimate is back under but the penalty, keyed at the /24, still runs:
        // the /24 again, until the penalty ends; an address of it never seen is in it too.
        let later = now + Duration::from_secs(25);
        let held = select(&policy, sources, 1.0, later, 10);
        assert_eq!(held.len(), 1, "{held:?}");
        assert_eq!((held[0].network, held[0].len), (chosen[0].network, 24));
        // Marked at `now` for 1m, read 25s later: 35s left (to the bisection's 30ms).
        let left = Duration::from_secs(35);
        assert!(
            held[0].timeout >= left && held[0].timeout - left < Duration::from_millis(30),
            "{held:?}"
        );
        let unseen = select(
            &policy,
            [("198.51.100.77".parse().unwrap(), 0)],
            1.0,
            later,
            10,
        );
        assert_eq!(unseen, held);
    }

    #[test]
    fn an_address_limit_s_penalty_holds_the_address() {
        let policy = policy(&format!("{RULE}penalty = \"1m\"\n"));
        let now = Tick::from_duration(Duration::from_secs(100));
        flood(&policy, "192.0.2.1", 30, now);
        let later = now + Duration::from_secs(25);
        let held = select(&policy, [("192.0.2.1".parse().unwrap(), 0)], 1.0, later, 10);
        assert_eq!(held.len(), 1, "{held:?}");
        assert_eq!(held[0].network, "192.0.2.1".parse::<IpAddr>().unwrap());
        assert_eq!(held[0].len, 32);
    }

    #[test]
    fn flood_sources_past_the_cap_go_in_by_their_rejections_not_by_noise() {
        let policy = policy(RULE);
        let now = Tick::from_duration(Duration::from_secs(100));
        // All three past 8x the limit (81): their estimates read the cap, so tie. The
        // offender list counted their rejections: the third carried the most.
        flood(&policy, "192.0.2.1", 300, now);
        flood(&policy, "192.0.2.2", 200, now);
        flood(&policy, "192.0.2.3", 1000, now);
        // One well over its limit but under the cap.
        flood(&policy, "192.0.2.4", 70, now);
        let at = |s: &str| s.parse::<IpAddr>().unwrap();
        let sources = [
            (at("192.0.2.4"), 60),
            (at("192.0.2.1"), 290),
            (at("192.0.2.2"), 190),
            (at("192.0.2.3"), 990),
        ];
        let chosen = select(&policy, sources, 2.0, now, 10);
        let order: Vec<IpAddr> = chosen.iter().map(|e| e.network).collect();
        assert_eq!(
            order,
            ["192.0.2.3", "192.0.2.1", "192.0.2.2", "192.0.2.4"].map(at),
            "{chosen:?}"
        );
        // Room for two: the two that carried the most of the flood.
        let two = select(&policy, sources, 2.0, now, 2);
        assert_eq!(two, chosen[..2]);
    }

    #[test]
    fn a_source_exactly_at_factor_times_its_limit_is_in() {
        // "Reached `factor` times a limit": 20 events under 10/10s at factor 2 is in, 19 is not.
        let policy = policy(RULE);
        let now = Tick::from_duration(Duration::from_secs(100));
        flood(&policy, "192.0.2.1", 20, now);
        flood(&policy, "192.0.2.2", 19, now);
        let sources = ["192.0.2.1", "192.0.2.2"].map(|s| (s.parse().unwrap(), 0));
        let chosen = select(&policy, sources, 2.0, now, 10);
        let networks: Vec<IpAddr> = chosen.iter().map(|e| e.network).collect();
        assert_eq!(
            networks,
            ["192.0.2.1".parse::<IpAddr>().unwrap()],
            "{chosen:?}"
        );
    }

    #[test]
    fn past_the_cap_is_over_any_factor_and_at_it_is_not() {
        // A factor above EXACT_MULTIPLE (8): an estimate of 8x the limit (80, counted exactly)
        // is under it and stays out; one past it (81, the cap) is over any factor and goes in.
        let policy = policy(RULE);
        let now = Tick::from_duration(Duration::from_secs(100));
        flood(&policy, "192.0.2.1", 80, now);
        flood(&policy, "192.0.2.2", 81, now);
        flood(&policy, "192.0.2.3", 500, now);
        let at = |s: &str| s.parse::<IpAddr>().unwrap();
        let sources = ["192.0.2.1", "192.0.2.2", "192.0.2.3"].map(|s| (at(s), 0));
        let chosen = select(&policy, sources, 9.0, now, 10);
        let mut networks: Vec<IpAddr> = chosen.iter().map(|e| e.network).collect();
        networks.sort();
        assert_eq!(networks, ["192.0.2.2", "192.0.2.3"].map(at), "{chosen:?}");
    }
}
