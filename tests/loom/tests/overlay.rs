//! Loom models of the run-time lists (`filter/src/overlay.rs`): an entry changed through the
//! admin endpoint while decisions read the overlay. A decision that starts after a change
//! returned sees it, one decision never sees an added entry and then loses it, and two changes
//! at once (two admin requests, or a request and a sweep) both stay.

#![cfg(loom)]

use std::net::Ipv4Addr;
use std::time::Duration;

use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;
use tollgate_filter::{Cidr, ListKind, RuntimeLists, Source};
use tollgate_loom::check;
use tollgate_sketch::Tick;

const HOUR: Duration = Duration::from_secs(3600);

fn network(text: &str) -> Cidr {
    Cidr::parse(text).expect("a network")
}

fn source(last: u8) -> Source {
    Source::from(Ipv4Addr::new(192, 0, 2, last))
}

fn denied(lists: &RuntimeLists, last: u8) -> bool {
    lists
        .find(source(last), Tick::ZERO)
        .is_some_and(|entry| entry.kind == ListKind::Deny)
}

#[test]
fn an_added_entry_applies_to_every_decision_after_the_add_returns() {
    check(|| {
        let lists = Arc::new(RuntimeLists::default());
        let done = Arc::new(AtomicBool::new(false));
        let (adder, added) = (Arc::clone(&lists), Arc::clone(&done));
        let admin = thread::spawn(move || {
            adder
                .add(
                    network("192.0.2.0/24"),
                    ListKind::Deny,
                    HOUR,
                    "flood".into(),
                    Tick::ZERO,
                )
                .expect("room");
            // Release: whoever reads `true` started after the add returned.
            added.store(true, Ordering::Release);
        });
        // The decision path's first look: a count above 0 means the overlay it then reads
        // is at least as new as the change that stored the count.
        let nonempty = !lists.is_empty();
        let first = denied(&lists, 1);
        assert!(
            !nonempty || first,
            "the count said held, the overlay read had nothing"
        );
        // Acquire: pairs with the Release above.
        let after = done.load(Ordering::Acquire);
        let second = denied(&lists, 1);
        assert!(
            !first || second,
            "an entry seen once was lost by the next decision"
        );
        assert!(
            !after || second,
            "a decision after the add returned missed it"
        );
        admin.join().expect("no panic");
        assert!(denied(&lists, 1));
    });
}

#[test]
fn a_removed_entry_stops_applying_once_the_remove_returns() {
    check(|| {
        let lists = Arc::new(RuntimeLists::default());
        lists
            .add(
                network("192.0.2.0/24"),
                ListKind::Deny,
                HOUR,
                String::new(),
                Tick::ZERO,
            )
            .expect("room");
        let done = Arc::new(AtomicBool::new(false));
        let (remover, removed) = (Arc::clone(&lists), Arc::clone(&done));
        let admin = thread::spawn(move || {
            remover
                .remove(network("192.0.2.0/24"), ListKind::Deny, Tick::ZERO)
                .expect("held");
            // Release: whoever reads `true` started after the remove returned.
            removed.store(true, Ordering::Release);
        });
        // Acquire: pairs with the Release above.
        let after = done.load(Ordering::Acquire);
        let held = denied(&lists, 1);
        assert!(
            !after || !held,
            "a decision after the remove returned still refused"
        );
        admin.join().expect("no panic");
        assert!(!denied(&lists, 1));
    });
}

#[test]
fn two_changes_at_once_both_stay() {
    check(|| {
        let lists = Arc::new(RuntimeLists::default());
        // Expired by the time the sweep and the second add look: both copy without it.
        lists
            .add(
                network("198.51.100.0/24"),
                ListKind::Allow,
                Duration::from_nanos(1),
                String::new(),
                Tick::ZERO,
            )
            .expect("room");
        let later = Tick::ZERO + Duration::from_secs(1);
        let sweeper = Arc::clone(&lists);
        let sweep = thread::spawn(move || sweeper.sweep(later));
        let adder = Arc::clone(&lists);
        let admin = thread::spawn(move || {
            adder
                .add(
                    network("192.0.2.0/25"),
                    ListKind::Deny,
                    HOUR,
                    String::new(),
                    later,
                )
                .expect("room");
        });
        lists
            .add(
                network("192.0.2.128/25"),
                ListKind::Deny,
                HOUR,
                String::new(),
                later,
            )
            .expect("room");
        sweep.join().expect("no panic");
        admin.join().expect("no panic");
        // Unserialised, a change copying the entries before another stored its copy would
        // store over it and lose that entry.
        let held: Vec<String> = lists
            .entries(later)
            .iter()
            .map(|e| e.cidr.to_string())
            .collect();
        assert_eq!(held, ["192.0.2.0/25", "192.0.2.128/25"]);
        let stats = lists.stats();
        assert_eq!(stats.expired, 1, "{stats:?}");
    });
}
