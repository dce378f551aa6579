//! Loom models of the filter's policy swap, run through the real path (`Filter::reload`, the
//! `Swap<T>` and reload lock of `filter/src/sync.rs`): a decide racing a reload sees one policy
//! whole and its count survives the swap; two reloads at once (a SIGHUP and a POST /reload)
//! run one after the other, so a count made between them is never dropped.

#![cfg(loom)]

use std::net::Ipv4Addr;

use loom::sync::Arc;
use loom::thread;
use tollgate_filter::{Config, Event, Filter, Source, Transport, Verdict};
use tollgate_loom::check;
use tollgate_sketch::Tick;

/// A policy with one rule, `r`, limit 1 per 10 s; `memory` says which policy it is (and a
/// change of it re-splits the memory, so the reload builds a new sketch).
fn config(memory: &str) -> Config {
    Config::parse(&format!(
        "[sketch]\nmemory = \"{memory}\"\n[[rule]]\nname = \"r\"\nlimits = [{{ rate = \"1/10s\" }}]\n"
    ))
    .expect("valid")
}

fn event() -> Event {
    Event {
        source: Source::from(Ipv4Addr::new(192, 0, 2, 1)),
        transport: Transport::Tcp,
        bytes: 1,
    }
}

/// The estimate of the rule's one limit for the event's source.
fn count(filter: &Filter) -> u64 {
    filter.policy().estimates(event().source, Tick::ZERO)[0].estimate
}

#[test]
fn decide_vs_policy_swap_keeps_the_count() {
    check(|| {
        let filter = Arc::new(Filter::new(config("16KiB")).expect("policy"));
        let reloader = Arc::clone(&filter);
        let swap = thread::spawn(move || {
            reloader
                .reload(config("24KiB"), Tick::ZERO)
                .expect("reload")
        });
        let first = filter.decide(&event(), Tick::ZERO).verdict;
        let second = filter.decide(&event(), Tick::ZERO).verdict;
        let memory = filter.policy().config().memory;
        assert!(
            memory == 16 << 10 || memory == 24 << 10,
            "a policy mixed from two"
        );
        swap.join().expect("no panic");
        // Whichever policy counted each event, the one in force reads both: the same rule
        // keeps its count across the swap, so the second event is over the limit.
        assert_eq!(first, Verdict::Allow);
        assert!(matches!(second, Verdict::Throttle(_)), "{second:?}");
        assert_eq!(filter.policy().config().memory, 24 << 10);
        assert!(count(&filter) >= 2, "count lost: {}", count(&filter));
    });
}

#[test]
fn two_reloads_at_once_keep_a_count_made_between_them() {
    check(|| {
        let filter = Arc::new(Filter::new(config("16KiB")).expect("policy"));
        let reloads: Vec<_> = ["24KiB", "32KiB"]
            .into_iter()
            .map(|memory| {
                let reloader = Arc::clone(&filter);
                thread::spawn(move || reloader.reload(config(memory), Tick::ZERO).expect("reload"))
            })
            .collect();
        let _ = filter.decide(&event(), Tick::ZERO);
        for reload in reloads {
            reload.join().expect("no panic");
        }
        // Unserialised, both reloads could build on the first policy: the second to store
        // would drop the sketch the first made, and the event counted in it.
        let memory = filter.policy().config().memory;
        assert!(memory == 24 << 10 || memory == 32 << 10, "{memory}");
        assert_eq!(count(&filter), 1);
    });
}
