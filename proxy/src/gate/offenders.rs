//! The current top offenders: the sources rejected most often, in fixed memory.
//!
//! The sketch counts every source but cannot list them (it keeps no keys). This keeps up to
//! `capacity` rejected sources with the Space-Saving algorithm (Metwally, Agrawal and El Abbadi,
//! "Efficient computation of frequent and top-k elements in data streams", 2005): a new source
//! takes the place of the entry with the smallest count and inherits that count as its error, so
//! any source rejected more than `total / capacity` times is on the list. The entries form a
//! min-heap on the count with an index by source, so a rejection costs O(log capacity) even
//! when every rejected source is new (a linear scan for the minimum showed up at 4.5% of the
//! proxy's CPU under 1000 rotating rejected sources). Only rejections are recorded: the lock is
//! never taken for an allowed connection.
//!
//! A flood repeats its sources, so the common case is a source already listed. A small
//! direct-mapped hint (slot by a cheap fold of the address, holding a position) finds it without
//! the index's SipHash; a hint is checked against the entry it names, so a stale or colliding
//! one (an attacker can choose addresses that collide) only falls back to the index.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

/// One listed source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Offender {
    /// The source address (after PROXY headers).
    pub source: IpAddr,
    /// Rejections counted for it (an overestimate by at most `error`).
    pub count: u64,
    /// How much of `count` may belong to sources it replaced.
    pub(crate) error: u64,
    /// The rule or reason of its latest rejection.
    pub last: String,
}

/// Space-Saving over rejected sources.
#[derive(Debug)]
pub struct Offenders {
    capacity: usize,
    heap: Mutex<Heap>,
}

/// Slots of the position hint (a power of two).
const HINTS: usize = 64;

/// A binary min-heap of entries by count, with each source's position.
#[derive(Debug)]
struct Heap {
    entries: Vec<Offender>,
    position: HashMap<IpAddr, usize>,
    /// A position per slot of [`hint_slot`], possibly stale: checked before use.
    hints: [usize; HINTS],
}

impl Default for Heap {
    fn default() -> Heap {
        Heap {
            entries: Vec::new(),
            position: HashMap::new(),
            hints: [0; HINTS],
        }
    }
}

/// The hint slot of `source`: its bytes folded (not keyed: a collision only costs a lookup).
fn hint_slot(source: IpAddr) -> usize {
    let folded = match source {
        IpAddr::V4(v4) => u64::from(v4.to_bits()),
        IpAddr::V6(v6) => {
            let bits = v6.to_bits();
            (bits as u64) ^ ((bits >> 64) as u64)
        }
    };
    let mixed = folded.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    // The top bits of the product, masked: multiply-shift, no `%`.
    (mixed >> 58) as usize & (HINTS - 1)
}

impl Heap {
    /// Where `source` is listed, if it is: by its hint when that is right, else by the index.
    fn find(&self, source: IpAddr) -> Option<usize> {
        let hinted = self.hints[hint_slot(source)];
        if self.entries.get(hinted).is_some_and(|e| e.source == source) {
            return Some(hinted);
        }
        self.position.get(&source).copied()
    }

    /// Records that `at` holds `source`, in the index and the hint.
    fn place(&mut self, source: IpAddr, at: usize) {
        self.position.insert(source, at);
        self.hints[hint_slot(source)] = at;
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.entries.swap(a, b);
        self.place(self.entries[a].source, a);
        self.place(self.entries[b].source, b);
    }

    /// Restores the heap below `at` after its count grew.
    fn sift_down(&mut self, mut at: usize) {
        loop {
            let (left, right) = (2 * at + 1, 2 * at + 2);
            let mut smallest = at;
            for child in [left, right] {
                if child < self.entries.len()
                    && self.entries[child].count < self.entries[smallest].count
                {
                    smallest = child;
                }
            }
            if smallest == at {
                return;
            }
            self.swap(at, smallest);
            at = smallest;
        }
    }

    /// Restores the heap above `at` after an insertion there.
    fn sift_up(&mut self, mut at: usize) {
        while at > 0 {
            let parent = (at - 1) / 2;
            if self.entries[parent].count <= self.entries[at].count {
                return;
            }
            self.swap(at, parent);
            at = parent;
        }
    }
}

impl Offenders {
    /// Tracks at most `capacity` sources.
    #[must_use]
    pub(crate) fn new(capacity: usize) -> Offenders {
        Offenders {
            capacity: capacity.max(1),
            heap: Mutex::new(Heap::default()),
        }
    }

    /// Records one rejection of `source` by `why`.
    pub fn record(&self, source: IpAddr, why: &str) {
        let mut heap = self.heap.lock().unwrap_or_else(|e| e.into_inner());
        let heap = &mut *heap;
        if let Some(at) = heap.find(source) {
            heap.hints[hint_slot(source)] = at;
            let entry = &mut heap.entries[at];
            entry.count += 1;
            if entry.last != why {
                why.clone_into(&mut entry.last);
            }
            heap.sift_down(at);
        } else if heap.entries.len() < self.capacity {
            let at = heap.entries.len();
            heap.place(source, at);
            heap.entries.push(Offender {
                source,
                count: 1,
                error: 0,
                last: why.to_owned(),
            });
            heap.sift_up(heap.entries.len() - 1);
        } else {
            // Replace the least counted (the root), which passes its count on as error.
            let root = &mut heap.entries[0];
            let replaced = std::mem::replace(&mut root.source, source);
            root.error = root.count;
            root.count += 1;
            why.clone_into(&mut root.last);
            heap.position.remove(&replaced);
            heap.place(source, 0);
            heap.sift_down(0);
        }
    }

    /// The `n` most rejected sources, most first.
    #[must_use]
    pub fn top(&self, n: usize) -> Vec<Offender> {
        let heap = self.heap.lock().unwrap_or_else(|e| e.into_inner());
        let mut listed = heap.entries.clone();
        listed.sort_by(|a, b| b.count.cmp(&a.count).then(a.source.cmp(&b.source)));
        listed.truncate(n);
        listed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heavy_sources_stay_listed_while_one_off_sources_churn() {
        let offenders = Offenders::new(8);
        for round in 0..1000u32 {
            offenders.record(IpAddr::from([10, 0, 0, 1]), "r");
            if round % 2 == 0 {
                offenders.record(IpAddr::from([10, 0, 0, 2]), "r");
            }
            // A stream of distinct sources seen once each.
            offenders.record(IpAddr::from(round.to_be_bytes()), "r");
        }
        let top = offenders.top(2);
        assert_eq!(top[0].source, IpAddr::from([10, 0, 0, 1]));
        assert_eq!(top[1].source, IpAddr::from([10, 0, 0, 2]));
        assert!(top[0].count >= 1000 && top[0].count - top[0].error <= 1000);
    }

    #[test]
    fn counts_match_a_plain_space_saving_and_never_undercount() {
        // Against an exact tally: every listed count is at least the true count and at most
        // the true count plus its error; with capacity 16 over 40 sources, the 5 heavy ones
        // (sent far more than total / 16) are all listed.
        let offenders = Offenders::new(16);
        let mut truth = std::collections::HashMap::new();
        let mut state = 12345u64;
        for _ in 0..20_000 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let pick = (state >> 33) % 100;
            let host = if pick < 50 { pick % 5 } else { 5 + pick % 35 } as u8;
            let source = IpAddr::from([10, 0, 0, host]);
            *truth.entry(source).or_insert(0u64) += 1;
            offenders.record(source, "r");
        }
        let top = offenders.top(16);
        for entry in &top {
            let exact = truth[&entry.source];
            assert!(
                entry.count >= exact && entry.count - entry.error <= exact,
                "{entry:?} vs {exact}"
            );
        }
        for host in 0..5u8 {
            assert!(
                top.iter()
                    .any(|e| e.source == IpAddr::from([10, 0, 0, host]))
            );
        }
    }

    /// Fails unless `heap` is a min-heap on the count whose index and entries agree.
    fn assert_sound(heap: &Heap) {
        for at in 1..heap.entries.len() {
            let parent = (at - 1) / 2;
            assert!(
                heap.entries[parent].count <= heap.entries[at].count,
                "entry {at} counts less than its parent: {:?}",
                heap.entries
            );
        }
        assert_eq!(heap.position.len(), heap.entries.len());
        for (at, entry) in heap.entries.iter().enumerate() {
            assert_eq!(heap.position.get(&entry.source), Some(&at), "{entry:?}");
        }
    }

    #[test]
    fn the_heap_stays_a_heap_at_every_step_and_never_grows_past_its_capacity() {
        // A skewed stream over 40 sources into 12 places: insertions, increments deep in the
        // heap and replacements of the root all happen many times.
        let offenders = Offenders::new(12);
        let mut state = 99u64;
        for step in 0..5_000 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let pick = (state >> 33) % 100;
            let host = if pick < 60 { pick % 6 } else { 6 + pick % 34 } as u8;
            offenders.record(IpAddr::from([10, 0, 0, host]), "r");
            let heap = offenders.heap.lock().unwrap();
            assert_sound(&heap);
            assert!(
                heap.entries.len() <= 12,
                "step {step}: {}",
                heap.entries.len()
            );
        }
        assert_eq!(offenders.top(usize::MAX).len(), 12);
    }

    #[test]
    fn a_new_source_replaces_the_least_counted_one_and_inherits_its_count_as_error() {
        let offenders = Offenders::new(3);
        let source = |host: u8| IpAddr::from([192, 0, 2, host]);
        // Recorded heaviest first, so each newcomer has to climb to the root.
        for (host, times) in [(1, 3), (2, 2), (3, 1)] {
            for _ in 0..times {
                offenders.record(source(host), "r");
            }
        }
        offenders.record(source(4), "r");
        let listed: Vec<_> = offenders
            .top(usize::MAX)
            .iter()
            .map(|o| (o.source, o.count, o.error))
            .collect();
        assert_eq!(
            listed,
            [(source(1), 3, 0), (source(2), 2, 0), (source(4), 2, 1)]
        );
    }

    #[test]
    fn the_last_reason_is_the_latest_one() {
        let offenders = Offenders::new(4);
        let source = IpAddr::from([192, 0, 2, 1]);
        offenders.record(source, "per-network");
        offenders.record(source, "banned");
        assert_eq!(offenders.top(1)[0].last, "banned");
    }

    #[test]
    fn the_hint_spreads_a_floods_sources_over_its_slots() {
        // A hint shared by every source would send each lookup to the index: consecutive
        // addresses, and IPv6 ones that differ in either half, take many slots.
        let slots = |sources: Vec<IpAddr>| {
            let taken: std::collections::HashSet<usize> =
                sources.into_iter().map(hint_slot).collect();
            taken.len()
        };
        let v4 = (0..64u32).map(|n| IpAddr::from((0xc000_0200 + n).to_be_bytes()));
        let high = (0..64u16).map(|n| IpAddr::from([0x2001, 0xdb8, n, 0, 0, 0, 0, 1]));
        let low = (0..64u16).map(|n| IpAddr::from([0x2001, 0xdb8, 0, 0, 0, 0, 0, n]));
        // Halves folded with `|` instead of `^` would put these in one slot: the high half's
        // ones hide every bit in which the low halves differ.
        let under_ones = (0..64u16)
            .map(|n| IpAddr::from([0x2001, 0xdb8, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff, n]));
        for (name, sources) in [
            ("IPv4", v4.collect::<Vec<_>>()),
            ("IPv6, high half", high.collect()),
            ("IPv6, low half", low.collect()),
            ("IPv6, low half under ones", under_ones.collect()),
        ] {
            let taken = slots(sources);
            assert!(taken >= 16, "{name}: 64 sources in {taken} slots");
        }
    }

    /// A newcomer inserted where its parent is not its index's half (index 4's parent is 1,
    /// not 2) climbs past the right parent: with the parent taken as `at / 2` it stopped at a
    /// sibling's equal count and stayed below a heavier parent, so the heap no longer held:
    /// the entry replaced next (the root) need not be the least counted, and a heavier source
    /// could fall off `/top` before a lighter one.
    #[test]
    fn a_newcomer_climbs_past_its_own_parent_not_its_indexs_half() {
        let offenders = Offenders::new(8);
        let source = |host: u8| IpAddr::from([198, 51, 100, host]);
        // A, B, C at 1 each, then B at 3: [A 1, B 3, C 1]; D arrives under B and takes its
        // place, then counts 3: [A 1, D 3, C 1, B 3]; E then arrives at index 4, under D.
        for (host, times) in [(1, 1), (2, 1), (3, 1), (2, 2), (4, 3), (5, 1)] {
            for _ in 0..times {
                offenders.record(source(host), "r");
                assert_sound(&offenders.heap.lock().unwrap());
            }
        }
        assert_eq!(offenders.top(usize::MAX).len(), 5);
    }
}
