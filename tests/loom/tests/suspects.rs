//! Loom models of the suspects table (`tollgate_filter::SuspectTable`), where decide paths
//! leave suspect keys' weight for a cluster's sync task: two first events of one key claim one
//! slot between them, two keys with one home slot get a slot each, and weight added while the
//! sync task drains is collected exactly once.

#![cfg(loom)]

use std::net::Ipv4Addr;

use loom::sync::Arc;
use loom::thread;
use tollgate_filter::{Collected, LimitKey, PROBES, Prefix, RuleId, Source, Split, SuspectTable};
use tollgate_loom::check;

const HASH: u64 = 0x0123_4567_89ab_cdef;
const PERIOD_MS: u64 = 1_000;
const SHAPE: u64 = 0x5ea;
/// The local estimate every first event brings.
const BEFORE: Split = Split {
    current: 7,
    previous: 3,
};

fn key() -> LimitKey {
    LimitKey::new(
        RuleId::from_name("r"),
        Source::from(Ipv4Addr::new(192, 0, 2, 1)),
        Prefix::V4(32),
    )
}

/// Adds `weight` for the model's key from another thread.
fn adder(table: &Arc<SuspectTable>, weight: u64) -> thread::JoinHandle<()> {
    let table = Arc::clone(table);
    thread::spawn(move || {
        let _ = table.add(&key(), HASH, PERIOD_MS, SHAPE, || BEFORE, weight);
    })
}

/// Every collected entry is the model's key, whole, and their weights sum to `total`.
fn assert_collected(collected: &[Collected], total: u64) {
    for entry in collected {
        assert_eq!(&entry.key[..], key().as_bytes(), "a torn or foreign key");
        assert_eq!(
            (entry.period_ms, entry.shape, entry.before),
            (PERIOD_MS, SHAPE, BEFORE)
        );
    }
    assert_eq!(collected.iter().map(|c| c.weight).sum::<u64>(), total);
}

#[test]
fn two_first_events_of_one_key_claim_one_slot() {
    check(|| {
        let table = Arc::new(SuspectTable::new(PROBES));
        let other = adder(&table, 2);
        table.add(&key(), HASH, PERIOD_MS, SHAPE, || BEFORE, 1);
        other.join().expect("adder");
        let mut collected = Vec::new();
        table.drain(&mut collected);
        assert_eq!(collected.len(), 1, "one slot per key: {collected:?}");
        assert_collected(&collected, 3);
    });
}

#[test]
fn first_events_of_two_keys_at_one_home_claim_two_slots() {
    check(|| {
        let table = Arc::new(SuspectTable::new(PROBES));
        let second = LimitKey::new(
            RuleId::from_name("r"),
            Source::from(Ipv4Addr::new(198, 51, 100, 9)),
            Prefix::V4(32),
        );
        // Same home slot (the bits above the low 7 agree), different tags.
        let second_hash = HASH ^ 0b10;
        let other = {
            let table = Arc::clone(&table);
            thread::spawn(move || {
                let _ = table.add(&second, second_hash, PERIOD_MS, SHAPE, || BEFORE, 2);
            })
        };
        table.add(&key(), HASH, PERIOD_MS, SHAPE, || BEFORE, 1);
        other.join().expect("adder");
        let mut collected = Vec::new();
        table.drain(&mut collected);
        collected.sort_by_key(|c| c.weight);
        assert_eq!(collected.len(), 2, "{collected:?}");
        assert_eq!(
            (&collected[0].key[..], collected[0].weight),
            (key().as_bytes(), 1)
        );
        assert_eq!(
            (&collected[1].key[..], collected[1].weight),
            (second.as_bytes(), 2)
        );
    });
}

#[test]
fn weight_added_during_a_drain_is_collected_once() {
    check(|| {
        let table = Arc::new(SuspectTable::new(PROBES));
        let other = adder(&table, 1);
        let mut collected = Vec::new();
        table.drain(&mut collected);
        other.join().expect("adder");
        // The next rounds pick up whatever the racing drain could not see yet.
        table.drain(&mut collected);
        table.drain(&mut collected);
        assert_collected(&collected, 1);
    });
}
