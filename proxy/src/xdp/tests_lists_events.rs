//! The allow tries and the drop events in the kernel, through `BPF_PROG_TEST_RUN`: allowed
//! networks pass uncounted and their holes are counted, lists past the tries' bound keep a
//! family from dropping, a drop writes one event per key and window, and a full ring counts
//! what it loses. They need root and a build with clang, so the plain run ignores them; CI
//! runs them with the other `xdp::tests` (`.ci/run`).

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv6Addr};

use aya::maps::{MapData, RingBuf};
use tollgate_filter::{Cidr, ListKind};

use super::events::DropEvent;
use super::layout::{
    self, Config, EVENT_RING_BYTES, Geometry, LISTS_KEEP_V4, LISTS_V4, LISTS_V6, Level,
    SAMPLE_SLOTS,
};
use super::lists::{ALLOW_ENTRIES, KernelLists};
use super::program::{Program, Verdict};

const WIDTH: u32 = 1000;
const SEED: u64 = 0x5eed;

/// A window of 1,000 ticks, the clock fixed at the start of window 3 (slice 0 counts).
fn config() -> Config {
    Config {
        seed: SEED,
        window: 1000,
        width: WIDTH,
        fixed_tick: 3000,
        bank: 0,
        lists: 0,
    }
}

/// The program with a ring of `ring_bytes`; a refusal fails the test with the verifier's log.
fn load(ring_bytes: u32) -> Program {
    match Program::load_with_ring(Geometry { width: WIDTH }, config(), ring_bytes) {
        Ok(program) => program,
        Err(err) => panic!("{err}"),
    }
}

fn addr(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn cidrs(texts: &[&str]) -> Vec<Cidr> {
    texts.iter().map(|t| Cidr::parse(t).unwrap()).collect()
}

/// A UDP datagram from `src` to port 53, as an Ethernet frame.
fn udp_from(src: IpAddr) -> Vec<u8> {
    let mut frame = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    match src {
        IpAddr::V4(v4) => {
            // Version 4, 20 bytes; 28 in all; id 1; no fragment; TTL 64, UDP; no checksum.
            frame.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 28, 0, 1, 0, 0, 64, 17, 0, 0]);
            frame.extend_from_slice(&v4.octets());
            frame.extend_from_slice(&[198, 51, 100, 1]);
        }
        IpAddr::V6(v6) => {
            // Version 6; 8 bytes of payload, UDP, hop limit 64.
            frame.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 8, 17, 64]);
            frame.extend_from_slice(&v6.octets());
            frame.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        }
    }
    frame.extend_from_slice(&[0x30, 0x39, 0x00, 0x35, 0x00, 0x08, 0x00, 0x00]);
    frame
}

fn run(program: &Program, src: &str) -> Verdict {
    program.run(&udp_from(addr(src))).unwrap()
}

/// Every event waiting in `ring`.
fn events(ring: &mut RingBuf<MapData>) -> Vec<DropEvent> {
    let mut found = Vec::new();
    while let Some(item) = ring.next() {
        found.push(DropEvent::parse(&item).expect("an event the layout names"));
    }
    found
}

/// The current slice's cells of `src` at `level`.
fn cells(program: &Program, src: &str, level: Level) -> Vec<u32> {
    let h = layout::hash(SEED, level, addr(src)).unwrap();
    layout::cells(h, 0, WIDTH)
        .iter()
        .map(|&index| program.cell(index).unwrap())
        .collect()
}

#[test]
#[ignore = "needs root and clang (CI installs clang)"]
fn a_drop_writes_one_event_per_key_and_window() {
    let mut program = load(EVENT_RING_BYTES);
    let mut ring = program.take_events().expect("the ring");
    program.set_limit(Level::V4Host, 1).unwrap();
    program.set_limit(Level::V6Net64, 2).unwrap();

    assert_eq!(run(&program, "192.0.2.1"), Verdict::Pass);
    assert_eq!(events(&mut ring), [], "a pass writes no event");
    assert_eq!(run(&program, "192.0.2.1"), Verdict::Drop);
    let first = DropEvent {
        source: addr("192.0.2.1"),
        level: Level::V4Host,
        limit: 1,
        estimate: 2,
        window: 3,
    };
    assert_eq!(events(&mut ring), [first], "the first drop of a key");
    for _ in 0..3 {
        assert_eq!(run(&program, "192.0.2.1"), Verdict::Drop);
    }
    assert_eq!(events(&mut ring), [], "the same key in the same window");

    // Another key reports its own drop; a /64 over its limit reports once, whichever of its
    // sources is dropped.
    assert_eq!(run(&program, "192.0.2.2"), Verdict::Pass);
    assert_eq!(run(&program, "192.0.2.2"), Verdict::Drop);
    for source in ["2001:db8:77:1::1", "2001:db8:77:1::2"] {
        assert_eq!(run(&program, source), Verdict::Pass);
    }
    for source in ["2001:db8:77:1::3", "2001:db8:77:1::4", "2001:db8:77:1::5"] {
        assert_eq!(run(&program, source), Verdict::Drop);
    }
    let found = events(&mut ring);
    assert_eq!(
        found
            .iter()
            .map(|e| (e.source, e.level, e.estimate))
            .collect::<Vec<_>>(),
        [
            (addr("192.0.2.2"), Level::V4Host, 2),
            (addr("2001:db8:77:1::3"), Level::V6Net64, 3),
        ]
    );
    assert_eq!(found[1].network(), addr("2001:db8:77:1::"));

    // The next window: the key over its limit reports again (1 now, and the previous
    // window's 5 all inside the sliding window at its start).
    program
        .configure(Config {
            fixed_tick: 4000,
            ..program.config()
        })
        .unwrap();
    assert_eq!(run(&program, "192.0.2.1"), Verdict::Drop);
    assert_eq!(
        events(&mut ring),
        [DropEvent {
            estimate: 6,
            window: 4,
            ..first
        }]
    );
    assert_eq!(program.counters().unwrap().events_lost, 0);
}

#[test]
#[ignore = "needs root and clang (CI installs clang)"]
fn a_full_ring_counts_the_events_it_loses() {
    // One page of ring: 85 events of 48 bytes (with the ring's header).
    let mut program = load(4096);
    let mut ring = program.take_events().expect("the ring");
    program.set_limit(Level::V4Host, 1).unwrap();
    let sources: Vec<String> = (0..200)
        .map(|i| format!("10.0.{}.{}", i / 100, i % 100))
        .collect();
    // Every key is dropped by its second attempt (its first may be, where the small sketch
    // makes it share cells with another).
    for source in &sources {
        run(&program, source);
        assert_eq!(run(&program, source), Verdict::Drop);
    }
    // Two keys whose hashes share a slot share one report.
    let slots: BTreeSet<u64> = sources
        .iter()
        .map(|s| {
            (layout::hash(SEED, Level::V4Host, addr(s)).unwrap() >> 32)
                & u64::from(SAMPLE_SLOTS - 1)
        })
        .collect();
    let written = events(&mut ring).len() as u64;
    let lost = program.counters().unwrap().events_lost;
    assert!(
        written < slots.len() as u64 && lost > 0,
        "{written} written, {lost} lost"
    );
    assert_eq!(written + lost, slots.len() as u64);
}

#[test]
#[ignore = "needs root and clang (CI installs clang)"]
fn allowed_networks_pass_uncounted_and_their_holes_are_counted() {
    let mut program = load(EVENT_RING_BYTES);
    program.set_limit(Level::V4Host, 1).unwrap();
    program.set_limit(Level::V6Net64, 1).unwrap();
    let mut lists = KernelLists::new(ALLOW_ENTRIES);
    let allow = cidrs(&["192.0.2.0/24", "2001:db8:77:1::/64"]);
    let deny = cidrs(&["192.0.2.128/25"]);
    let runtime = [(Cidr::parse("198.51.100.7").unwrap(), ListKind::Allow)];
    let synced = lists
        .sync(&mut program, &allow, &deny, &runtime)
        .unwrap()
        .expect("a change");
    assert_eq!((synced.put, synced.held, synced.left_out), (4, 4, [0, 0]));
    assert_eq!(program.config().lists, LISTS_V4 | LISTS_V6);
    assert_eq!(program.listed(addr("192.0.2.200")), Some(false));

    for source in ["192.0.2.1", "198.51.100.7", "2001:db8:77:1::9"] {
        for _ in 0..5 {
            assert_eq!(run(&program, source), Verdict::Pass, "{source} is allowed");
        }
    }
    assert_eq!(cells(&program, "192.0.2.1", Level::V4Host), [0, 0]);
    assert_eq!(cells(&program, "2001:db8:77:1::9", Level::V6Net64), [0, 0]);
    let counters = program.counters().unwrap();
    assert_eq!((counters.allowed, counters.passed), (15, 0));
    // The hole, and sources on no list, are counted and held to the limit.
    for source in ["192.0.2.200", "203.0.113.1", "2001:db8:77:2::1"] {
        assert_eq!(run(&program, source), Verdict::Pass, "{source}");
        assert_eq!(run(&program, source), Verdict::Drop, "{source}");
    }
    // The same lists again change nothing; without the /24 (a reload), its sources are
    // counted again, and the IPv4 trie keeps the run-time entry alone.
    assert_eq!(
        lists.sync(&mut program, &allow, &deny, &runtime).unwrap(),
        None
    );
    let synced = lists
        .sync(&mut program, &allow[1..], &deny, &runtime)
        .unwrap()
        .expect("a change");
    assert_eq!((synced.put, synced.taken, synced.held), (0, 2, 2));
    assert_eq!(run(&program, "192.0.2.1"), Verdict::Pass);
    assert_eq!(run(&program, "192.0.2.1"), Verdict::Drop);
    assert_eq!(run(&program, "198.51.100.7"), Verdict::Pass);
    assert_eq!(run(&program, "198.51.100.7"), Verdict::Pass);
    // With no entry left, no trie is looked up.
    lists.sync(&mut program, &[], &[], &[]).unwrap();
    assert_eq!((lists.held(), program.config().lists), (0, 0));
    assert_eq!(program.listed(addr("198.51.100.7")), None);
}

#[test]
#[ignore = "needs root and clang (CI installs clang)"]
fn lists_past_the_bound_keep_their_family_from_dropping() {
    let mut program = load(EVENT_RING_BYTES);
    program.set_limit(Level::V4Host, 1).unwrap();
    program.set_limit(Level::V6Net64, 1).unwrap();
    let mut lists = KernelLists::new(2);
    let allow = cidrs(&["192.0.2.1", "192.0.2.2", "192.0.2.3", "2001:db8:77:1::/64"]);
    let synced = lists.sync(&mut program, &allow, &[], &[]).unwrap().unwrap();
    assert_eq!((synced.held, synced.left_out), (3, [1, 0]));
    assert_eq!(program.config().lists, LISTS_V4 | LISTS_V6 | LISTS_KEEP_V4);
    // The proxy reads the same: it decides IPv4 arrivals itself.
    let undropped = lists.undropped();
    let read = || {
        undropped
            .each_ref()
            .map(|u| u.load(std::sync::atomic::Ordering::SeqCst))
    };
    assert_eq!(read(), [true, false]);
    // Every IPv4 source passes, counted (the one left out included); IPv6 is dropped as
    // before.
    for source in ["192.0.2.3", "203.0.113.1"] {
        for _ in 0..3 {
            assert_eq!(run(&program, source), Verdict::Pass, "{source}");
        }
        assert_eq!(cells(&program, source, Level::V4Host), [3, 3], "{source}");
    }
    assert_eq!(run(&program, "2001:db8:77:2::1"), Verdict::Pass);
    assert_eq!(run(&program, "2001:db8:77:2::1"), Verdict::Drop);
    // Back within the bound: IPv4 drops again.
    lists.sync(&mut program, &allow[1..], &[], &[]).unwrap();
    assert_eq!(program.config().lists, LISTS_V4 | LISTS_V6);
    assert_eq!(read(), [false, false]);
    assert_eq!(run(&program, "203.0.113.1"), Verdict::Drop);
}
