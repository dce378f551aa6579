//! The suspects table: where the decide path leaves the weight of suspect keys (see
//! [`crate::Remote`]) for a cluster's sync task to collect, in fixed memory and without a lock.
//! It lives here, beside the hook, and not in the proxy, so that its races can be modelled
//! with loom (`tests/loom/tests/suspects.rs`) in a crate that does not depend on tokio.
//!
//! Two tables of `capacity` slots (128 bytes each, two cache lines) take turns: deciders add to
//! the active one; each sync round the sync task makes the other active and drains the one it
//! left. A slot is claimed with one compare-and-swap on the key's hash, then written (key,
//! period, the estimate before the first event) and published with a Release store of its
//! period; deciders that find the hash add their weight with one `fetch_add`. When no slot is
//! free within [`PROBES`] of a key's home, the event's weight is not shared (counted in
//! [`SuspectTable::take_overflow`]): memory stays fixed whatever the traffic.
//!
//! A decider that read the active index just before a turn may still add to the old table
//! after it was drained; the next round drains that table again before clearing it, so only a
//! decider stalled for a whole sync interval between reading the index and adding (a thread
//! descheduled that long) can lose its event's weight.

use crate::key::LimitKey;
use crate::remote::Split;
use crate::sync::{AtomicU64, AtomicUsize, Ordering};

/// Slots probed from a key's home before the event counts as overflow.
pub const PROBES: usize = 8;

const KEY_WORDS: usize = LimitKey::LEN.div_ceil(8);

#[derive(Debug)]
#[repr(align(64))]
struct Slot {
    /// The key's hash (odd); 0 when free.
    tag: AtomicU64,
    /// Weight added since the last drain.
    weight: AtomicU64,
    /// The local estimate before the event that claimed the slot: the current window's part.
    before_current: AtomicU64,
    /// And the previous window's share.
    before_previous: AtomicU64,
    /// The key's rule's [`crate::Rule::shape`].
    shape: AtomicU64,
    /// The limit's period in milliseconds; 0 until the key is written (the publishing store).
    period_ms: AtomicU64,
    key: [AtomicU64; KEY_WORDS],
}

impl Slot {
    fn new() -> Slot {
        Slot {
            tag: AtomicU64::new(0),
            weight: AtomicU64::new(0),
            before_current: AtomicU64::new(0),
            before_previous: AtomicU64::new(0),
            shape: AtomicU64::new(0),
            period_ms: AtomicU64::new(0),
            key: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// One suspect's weight since the last drain, as the sync task collects it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Collected {
    /// The key's bytes ([`LimitKey::as_bytes`]).
    pub key: [u8; LimitKey::LEN],
    /// The key's hash (with the period), as the decide path computed it.
    pub hash: u64,
    /// The limit's period in milliseconds.
    pub period_ms: u64,
    /// The key's rule's [`crate::Rule::shape`].
    pub shape: u64,
    /// The local estimate before the first event the slot saw, by window.
    pub before: Split,
    /// The weight added since the last drain.
    pub weight: u64,
}

/// Two fixed tables of suspect slots taking turns (see the module docs).
#[derive(Debug)]
pub struct SuspectTable {
    tables: [Box<[Slot]>; 2],
    mask: usize,
    active: AtomicUsize,
    overflow: AtomicU64,
}

impl SuspectTable {
    /// Two tables of `capacity` slots each (rounded up to a power of two, at least [`PROBES`]).
    pub fn new(capacity: usize) -> SuspectTable {
        let capacity = capacity.max(PROBES).next_power_of_two();
        let table = || (0..capacity).map(|_| Slot::new()).collect::<Box<[Slot]>>();
        SuspectTable {
            tables: [table(), table()],
            mask: capacity - 1,
            active: AtomicUsize::new(0),
            overflow: AtomicU64::new(0),
        }
    }

    /// Slots per table.
    pub fn capacity(&self) -> usize {
        self.mask + 1
    }

    /// Bytes held by both tables.
    pub fn memory_bytes(&self) -> usize {
        2 * self.capacity() * std::mem::size_of::<Slot>()
    }

    /// Adds `weight` to suspect `key` (hash `hash`, odd, of the key, a limit's period
    /// `period_ms` and its rule's shape `shape`); `before` gives its local estimate before this event, called only by the
    /// event that claims a slot for the key. Lock-free; no allocation. Returns the weight
    /// the key has had since the last [`SuspectTable::drain`], this event's included (0 when
    /// no slot was free): how much this node added since the sync task last collected.
    pub fn add(
        &self,
        key: &LimitKey,
        hash: u64,
        period_ms: u64,
        shape: u64,
        before: impl FnOnce() -> Split,
        weight: u64,
    ) -> u64 {
        // Acquire: pairs with the sync task's Release store of a freshly cleared table.
        let table = &self.tables[self.active.load(Ordering::Acquire) & 1];
        let tag = hash;
        let home = (hash >> 7) as usize;
        for probe in 0..PROBES {
            let slot = &table[(home + probe) & self.mask];
            // Relaxed: the tag is compared, not used to reach data; a stale 0 only makes the
            // compare-and-swap below fail and reread.
            let mut seen = slot.tag.load(Ordering::Relaxed);
            if seen == 0 {
                // Relaxed: the claim's data is published by the Release store of `period_ms`.
                match slot
                    .tag
                    .compare_exchange(0, tag, Ordering::Relaxed, Ordering::Relaxed)
                {
                    Ok(_) => {
                        let bytes = key.as_bytes();
                        for (word, chunk) in slot.key.iter().zip(bytes.chunks(8)) {
                            let mut padded = [0u8; 8];
                            padded[..chunk.len()].copy_from_slice(chunk);
                            // Relaxed: published by the Release store below.
                            word.store(u64::from_le_bytes(padded), Ordering::Relaxed);
                        }
                        // Relaxed: published by the Release store below.
                        slot.shape.store(shape, Ordering::Relaxed);
                        let before = before();
                        // Relaxed: published by the Release store below.
                        slot.before_current.store(before.current, Ordering::Relaxed);
                        // Relaxed: published by the Release store below.
                        slot.before_previous
                            .store(before.previous, Ordering::Relaxed);
                        // Release: the key and estimate above are visible to whoever sees
                        // the period (the sync task's Acquire load).
                        slot.period_ms.store(period_ms.max(1), Ordering::Release);
                        // Relaxed: a counter, read by swap in the drain.
                        return slot.weight.fetch_add(weight, Ordering::Relaxed) + weight;
                    }
                    Err(current) => seen = current,
                }
            }
            if seen == tag {
                // Relaxed: a counter, read by swap in the drain.
                return slot.weight.fetch_add(weight, Ordering::Relaxed) + weight;
            }
        }
        // Relaxed: a counter.
        self.overflow.fetch_add(1, Ordering::Relaxed);
        0
    }

    /// One sync round's collection: the weight left in the table deciders just stopped using,
    /// and what arrived late in the other (which is then cleared and made active). Only the
    /// sync task calls this.
    pub fn drain(&self, into: &mut Vec<Collected>) {
        // Relaxed: only this task stores `active`.
        let old = self.active.load(Ordering::Relaxed) & 1;
        let next = 1 - old;
        collect(&self.tables[next], into);
        for slot in self.tables[next].iter() {
            // Relaxed: the table is published whole by the Release store of `active` below.
            slot.period_ms.store(0, Ordering::Relaxed);
            slot.weight.store(0, Ordering::Relaxed);
            slot.tag.store(0, Ordering::Relaxed);
        }
        // Release: deciders that Acquire the new index see the cleared slots.
        self.active.store(next, Ordering::Release);
        collect(&self.tables[old], into);
    }

    /// Events whose weight found no slot since the last call.
    pub fn take_overflow(&self) -> u64 {
        // Relaxed: a counter.
        self.overflow.swap(0, Ordering::Relaxed)
    }
}

fn collect(table: &[Slot], into: &mut Vec<Collected>) {
    for slot in table {
        // Acquire: pairs with the claimer's Release store; the key words are then complete.
        let period_ms = slot.period_ms.load(Ordering::Acquire);
        if period_ms == 0 {
            continue;
        }
        // Relaxed: a counter; swap hands each unit of weight to exactly one drain.
        let weight = slot.weight.swap(0, Ordering::Relaxed);
        if weight == 0 {
            continue;
        }
        let mut bytes = [0u8; KEY_WORDS * 8];
        for (word, chunk) in slot.key.iter().zip(bytes.chunks_mut(8)) {
            // Relaxed: ordered by the Acquire load of the period above.
            chunk.copy_from_slice(&word.load(Ordering::Relaxed).to_le_bytes());
        }
        let mut key = [0u8; LimitKey::LEN];
        key.copy_from_slice(&bytes[..LimitKey::LEN]);
        into.push(Collected {
            key,
            // Relaxed: written before the period's Release store.
            hash: slot.tag.load(Ordering::Relaxed),
            period_ms,
            // Relaxed: as the key.
            shape: slot.shape.load(Ordering::Relaxed),
            before: Split {
                // Relaxed: as the key.
                current: slot.before_current.load(Ordering::Relaxed),
                // Relaxed: as the key.
                previous: slot.before_previous.load(Ordering::Relaxed),
            },
            weight,
        });
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use crate::{Prefix, RuleId, Source};

    use super::*;

    fn key(last: u8) -> LimitKey {
        LimitKey::new(
            RuleId::from_name("r"),
            Source::from(Ipv4Addr::new(10, 0, 0, last)),
            Prefix::V4(32),
        )
    }

    fn split(current: u64) -> Split {
        Split {
            current,
            previous: 1,
        }
    }

    #[test]
    fn weight_is_collected_once_per_key_and_the_tables_take_turns() {
        let table = SuspectTable::new(64);
        table.add(&key(1), 3, 1000, 9, || split(10), 1);
        table.add(&key(1), 3, 1000, 9, || split(11), 2);
        table.add(&key(2), 5, 1000, 9, || split(7), 4);
        let mut got = Vec::new();
        table.drain(&mut got);
        got.sort_by_key(|c| c.hash);
        assert_eq!(got.len(), 2);
        assert_eq!(
            (got[0].key, got[0].before, got[0].weight),
            (*key(1).as_bytes().first_chunk().unwrap(), split(10), 3)
        );
        assert_eq!((got[1].before, got[1].weight), (split(7), 4));
        // A late add to the drained table is picked up by the next drain, once.
        // Hashes 3 and 5 share home slot 0: 3 took it first.
        table.tables[0][0].weight.fetch_add(5, Ordering::Relaxed);
        table.add(&key(2), 5, 1000, 9, || split(20), 1);
        got.clear();
        table.drain(&mut got);
        got.sort_by_key(|c| c.hash);
        assert_eq!(
            got.iter().map(|c| (c.hash, c.weight)).collect::<Vec<_>>(),
            [(3, 5), (5, 1)]
        );
        got.clear();
        table.drain(&mut got);
        assert!(got.is_empty());
    }

    #[test]
    fn add_returns_the_weight_since_the_last_drain_and_keys_spread_by_their_hash() {
        let table = SuspectTable::new(64);
        assert_eq!(table.add(&key(1), 3, 1000, 9, || split(10), 2), 2);
        assert_eq!(table.add(&key(1), 3, 1000, 9, || split(10), 3), 5);
        table.drain(&mut Vec::new());
        table.drain(&mut Vec::new());
        assert_eq!(table.add(&key(1), 3, 1000, 9, || split(10), 3), 3);
        // Hashes with distinct bits above the low 7 have distinct homes: 40 keys fit 64 slots.
        let table = SuspectTable::new(64);
        for i in 0..40u64 {
            table.add(&key(i as u8), (i << 7) | 1, 1000, 9, Split::default, 1);
        }
        assert_eq!(table.take_overflow(), 0);
    }

    #[test]
    fn capacity_rounds_up_to_a_power_of_two_and_memory_is_two_tables_of_it() {
        assert_eq!(SuspectTable::new(0).capacity(), PROBES);
        assert_eq!(SuspectTable::new(100).capacity(), 128);
        assert_eq!(SuspectTable::new(128).capacity(), 128);
        // Two cache lines a slot, as the module docs say.
        assert_eq!(std::mem::size_of::<Slot>(), 128);
        assert_eq!(SuspectTable::new(100).memory_bytes(), 2 * 128 * 128);
    }

    #[test]
    fn a_full_neighbourhood_counts_overflow_instead_of_growing() {
        let table = SuspectTable::new(8);
        for i in 0..PROBES as u64 + 3 {
            // Odd hashes with one home: every key probes the same slots.
            table.add(&key(i as u8), (i << 20) | 1, 1000, 9, Split::default, 1);
        }
        assert_eq!(table.take_overflow(), 3);
        let mut got = Vec::new();
        table.drain(&mut got);
        assert_eq!(got.len(), PROBES);
    }
}
