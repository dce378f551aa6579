//! Loom models of the filter's policy swap, run through the real path (`Filter::reload`, the
//! `Swap<T>` and reload lock of `filter/src/sync.rs`): a decide racing a reload sees one policy
//! whole and its count survives the swap; two reloads at once (a SIGHUP and a POST /reload)
//! run one after the other, so a count made between them is never dropped; and two threads
//! deciding one hot source through its limit's reservations (a credit spent while another
//! thread counts) never read it below its events nor above the bound `explain` states.

#![cfg(loom)]

use std::net::Ipv4Addr;

use loom::sync::Arc;
use loom::thread;
use tollgate_filter::{Config, Event, Filter, LimitExplanation, Source, Transport, Verdict};
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

/// The explanation of the one limit of `filter`'s rule for the event's source.
fn explained(filter: &Filter) -> LimitExplanation {
    let why = filter
        .policy()
        .explain(event().source, event().transport, Tick::ZERO);
    why.rules[0].limits[0]
}

/// Under loom the filter's limits reserve half a key's count (shift 1, see the filter's
/// `budget` module): this source's second decision counts 2 and a credit of 1, and its third
/// is answered from the credit while another thread decides the source twice. Every event
/// is in the cells before its decision reads them, so the count ends at or above all five,
/// and above them by at most the stated overcount plus one reservation share per thread.
#[test]
fn decide_decide_through_reservations_keeps_every_event() {
    check(|| {
        let filter = Arc::new(
            Filter::new(
                Config::parse(
                    "[sketch]\nmemory = \"16KiB\"\n[[rule]]\nname = \"r\"\n\
                     limits = [{ rate = \"100/10s\" }]\n",
                )
                .expect("valid"),
            )
            .expect("policy"),
        );
        for _ in 0..2 {
            assert_eq!(filter.decide(&event(), Tick::ZERO).verdict, Verdict::Allow);
        }
        let other = Arc::clone(&filter);
        let racer = thread::spawn(move || {
            for _ in 0..2 {
                let _ = other.decide(&event(), Tick::ZERO);
            }
        });
        let _ = filter.decide(&event(), Tick::ZERO);
        racer.join().expect("no panic");
        let limit = explained(&filter);
        let most = 5 + limit.overcount_bound + 2 * limit.reserved_per_thread;
        assert!(limit.estimate >= 5, "lost an event: {limit:?}");
        assert!(limit.estimate <= most, "above the stated bound: {limit:?}");
    });
}
