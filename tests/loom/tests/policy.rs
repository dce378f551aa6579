//! Loom model of the filter's one shared mutable thing: a decide racing a policy swap sees
//! either the old policy or the new one, whole.

#![cfg(loom)]

use std::net::Ipv4Addr;

use loom::sync::Arc;
use loom::thread;
use tollgate_filter::{Config, Event, Filter, Source, Transport, Verdict};
use tollgate_loom::check;
use tollgate_sketch::Tick;

/// A policy with one rule whose name and limit say which policy it is.
fn config(name: &str, limit: u32) -> Config {
    Config::parse(&format!(
        "[sketch]\nmemory = \"16KiB\"\n[[rule]]\nname = \"{name}\"\nlimits = [{{ rate = \"{limit}/10s\" }}]\n"
    ))
    .expect("valid")
}

#[test]
fn decide_vs_policy_swap() {
    check(|| {
        let filter = Arc::new(Filter::new(config("old", 1)).expect("policy"));
        let reloader = Arc::clone(&filter);
        let swap = thread::spawn(move || reloader.reload(config("new", 5)).expect("reload"));
        let event = Event {
            source: Source::from(Ipv4Addr::new(192, 0, 2, 1)),
            transport: Transport::Tcp,
            bytes: 1,
        };
        // The second event is over the old limit (1) and under the new one (5).
        let _ = filter.decide(&event, Tick::ZERO);
        let second = filter.decide(&event, Tick::ZERO).verdict;
        let policy = filter.policy();
        let rule = &policy.config().rules[0];
        let whole = matches!(
            (rule.name.as_str(), rule.limits[0].rate.count),
            ("old", 1) | ("new", 5)
        );
        assert!(
            whole,
            "a policy mixed from two: {} {}",
            rule.name, rule.limits[0].rate.count
        );
        if let Verdict::Throttle(throttle) = second {
            assert_eq!(
                throttle.allowed, 1,
                "only the old policy throttles the second event"
            );
        }
        swap.join().expect("no panic");
        assert_eq!(filter.policy().config().rules[0].name, "new");
    });
}
