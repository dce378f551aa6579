//! The program in the kernel, through `BPF_PROG_TEST_RUN`: the verifier accepts it, verdicts
//! over crafted and malformed frames, the golden cells, the sliding estimate, and two CPUs
//! counting one key. They need root (CAP_BPF, CAP_NET_ADMIN) and a build with clang, so the
//! plain run ignores them; CI runs them in their own step (`.ci/run`: `xdp::`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::process::Command;
use std::sync::Barrier;

use super::layout::{self, Config, GOLDEN, GOLDEN_SEED, GOLDEN_WIDTH, Geometry, Level};
use super::program::{Counters, Program, Verdict};

const NEEDS: &str = "needs root and clang (CI installs clang)";

/// A window of 1,000 ticks, the clock fixed at the start of window 3 (slice 0 counts).
fn config(width: u32) -> Config {
    Config {
        seed: GOLDEN_SEED,
        window: 1000,
        width,
        fixed_tick: 3000,
        bank: 0,
        lists: 0,
    }
}

/// The program with a sketch `width` cells wide; a refusal (the verifier's log with it) fails
/// the test with the whole message.
fn load(width: u32) -> Program {
    match Program::load(Geometry { width }, config(width)) {
        Ok(program) => program,
        Err(err) => panic!("{err}"),
    }
}

/// Every cell of the map, by index (every slice, and the cells no key uses).
fn all_cells(program: &Program, width: u32) -> Vec<u32> {
    (0..Geometry { width }.entries())
        .map(|index| program.cell(index).unwrap())
        .collect()
}

// Frames, built by hand so that every header can be cut, padded or bent.

const SRC4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const SRC6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 2, 3, 4, 5, 6);
const UDP: u8 = 17;
const TCP: u8 = 6;
const SYN: u8 = 0x02;
const ACK: u8 = 0x10;

fn ethernet(vlan: bool, ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut frame = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    if vlan {
        frame.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
    }
    frame.extend_from_slice(&ethertype.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

fn udp() -> Vec<u8> {
    vec![0x30, 0x39, 0x00, 0x35, 0x00, 0x08, 0x00, 0x00]
}

fn tcp(flags: u8) -> Vec<u8> {
    let mut header = vec![0x30, 0x39, 0x00, 0x50, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, flags];
    header.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
    header
}

/// An IPv4 header from `src` with `options` (a multiple of 4 bytes) and the fragment field
/// `fragment` (flags and offset), then `l4`.
fn ipv4(src: Ipv4Addr, proto: u8, options: &[u8], fragment: u16, l4: &[u8]) -> Vec<u8> {
    let ihl = 5 + options.len() / 4;
    let total = (ihl * 4 + l4.len()) as u16;
    let mut packet = vec![0x40 | ihl as u8, 0];
    packet.extend_from_slice(&total.to_be_bytes());
    packet.extend_from_slice(&[0, 1]);
    packet.extend_from_slice(&fragment.to_be_bytes());
    packet.extend_from_slice(&[64, proto, 0, 0]);
    packet.extend_from_slice(&src.octets());
    packet.extend_from_slice(&[198, 51, 100, 1]);
    packet.extend_from_slice(options);
    packet.extend_from_slice(l4);
    packet
}

/// An IPv6 header from `src`, then `extensions` (each a header type and its bytes, whose first
/// byte the builder sets to the next header), then `l4` of protocol `proto`.
fn ipv6(src: Ipv6Addr, extensions: &[(u8, Vec<u8>)], proto: u8, l4: &[u8]) -> Vec<u8> {
    let first = extensions.first().map_or(proto, |(kind, _)| *kind);
    let mut rest = Vec::new();
    for (i, (_, bytes)) in extensions.iter().enumerate() {
        let mut bytes = bytes.clone();
        bytes[0] = extensions.get(i + 1).map_or(proto, |(kind, _)| *kind);
        rest.extend_from_slice(&bytes);
    }
    rest.extend_from_slice(l4);
    let mut packet = vec![0x60, 0, 0, 0];
    packet.extend_from_slice(&(rest.len() as u16).to_be_bytes());
    packet.extend_from_slice(&[first, 64]);
    packet.extend_from_slice(&src.octets());
    packet.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
    packet.extend_from_slice(&rest);
    packet
}

/// An extension header of `units` 8-byte units (hop-by-hop, routing, destination options).
fn extension(units: usize) -> Vec<u8> {
    let mut bytes = vec![0; units * 8];
    bytes[1] = (units - 1) as u8;
    bytes
}

/// A fragment header at `offset` (in 8-byte units), more fragments following.
fn fragment(offset: u16) -> Vec<u8> {
    let mut bytes = vec![0; 8];
    bytes[2..4].copy_from_slice(&((offset << 3) | 1).to_be_bytes());
    bytes
}

/// An authentication header of 24 bytes (its length field counts 4-byte units, minus 2).
fn authentication() -> Vec<u8> {
    let mut bytes = vec![0; 24];
    bytes[1] = 4;
    bytes
}

fn v4_udp(vlan: bool, options: &[u8]) -> Vec<u8> {
    ethernet(vlan, 0x0800, &ipv4(SRC4, UDP, options, 0, &udp()))
}

fn v6_syn(vlan: bool, extensions: &[(u8, Vec<u8>)]) -> Vec<u8> {
    ethernet(vlan, 0x86DD, &ipv6(SRC6, extensions, TCP, &tcp(SYN)))
}

/// What a frame is to the program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// An attempt from this source: counted at its levels.
    Attempt(IpAddr),
    Ignored,
    Malformed,
}

fn cases() -> Vec<(&'static str, Vec<u8>, Kind)> {
    let v4 = Kind::Attempt(IpAddr::V4(SRC4));
    let v6 = Kind::Attempt(IpAddr::V6(SRC6));
    let hop = (0, extension(1));
    let routing = (43, extension(3));
    let options = (60, extension(2));
    vec![
        ("v4 udp", v4_udp(false, &[]), v4),
        ("v4 udp, vlan", v4_udp(true, &[]), v4),
        (
            "v4 udp, 8 bytes of options",
            v4_udp(false, &[1, 1, 1, 1, 1, 1, 1, 0]),
            v4,
        ),
        (
            "v4 udp, 40 bytes of options, vlan",
            v4_udp(true, &[1; 40]),
            v4,
        ),
        (
            "v4 syn",
            ethernet(false, 0x0800, &ipv4(SRC4, TCP, &[], 0, &tcp(SYN))),
            v4,
        ),
        (
            "v4 syn-ack",
            ethernet(false, 0x0800, &ipv4(SRC4, TCP, &[], 0, &tcp(SYN | ACK))),
            Kind::Ignored,
        ),
        (
            "v4 ack",
            ethernet(false, 0x0800, &ipv4(SRC4, TCP, &[], 0, &tcp(ACK))),
            Kind::Ignored,
        ),
        (
            "v4 icmp",
            ethernet(false, 0x0800, &ipv4(SRC4, 1, &[], 0, &[8, 0, 0, 0])),
            Kind::Ignored,
        ),
        (
            "v4 first fragment",
            ethernet(false, 0x0800, &ipv4(SRC4, UDP, &[], 0x2000, &udp())),
            v4,
        ),
        (
            "v4 later fragment",
            ethernet(false, 0x0800, &ipv4(SRC4, UDP, &[], 0x2000 | 185, &udp())),
            Kind::Ignored,
        ),
        (
            "v4 last fragment",
            ethernet(false, 0x0800, &ipv4(SRC4, UDP, &[], 185, &udp())),
            Kind::Ignored,
        ),
        (
            "v4 header length 4",
            {
                let mut frame = v4_udp(false, &[]);
                frame[14] = 0x44;
                frame
            },
            Kind::Malformed,
        ),
        (
            "v4 ethertype, version 6",
            {
                let mut frame = v4_udp(false, &[]);
                frame[14] = 0x65;
                frame
            },
            Kind::Malformed,
        ),
        (
            "v4 options past the frame",
            {
                let mut frame = v4_udp(false, &[]);
                frame[14] = 0x4f;
                frame
            },
            Kind::Malformed,
        ),
        ("arp", ethernet(false, 0x0806, &[0; 28]), Kind::Ignored),
        (
            "two vlan tags",
            ethernet(true, 0x8100, &[0, 7, 0x08, 0x00]),
            Kind::Ignored,
        ),
        ("v6 syn", v6_syn(false, &[]), v6),
        ("v6 syn, vlan", v6_syn(true, &[]), v6),
        (
            "v6 syn-ack",
            ethernet(false, 0x86DD, &ipv6(SRC6, &[], TCP, &tcp(SYN | ACK))),
            Kind::Ignored,
        ),
        (
            "v6 udp",
            ethernet(false, 0x86DD, &ipv6(SRC6, &[], UDP, &udp())),
            v6,
        ),
        (
            "v6 udp, hop-by-hop",
            ethernet(
                false,
                0x86DD,
                &ipv6(SRC6, std::slice::from_ref(&hop), UDP, &udp()),
            ),
            v6,
        ),
        (
            "v6 syn, hop-by-hop, routing, options, vlan",
            v6_syn(true, &[hop.clone(), routing.clone(), options.clone()]),
            v6,
        ),
        (
            "v6 syn, authentication",
            v6_syn(false, &[(51, authentication())]),
            v6,
        ),
        (
            "v6 syn, first fragment",
            v6_syn(false, &[(44, fragment(0))]),
            v6,
        ),
        (
            "v6 udp, later fragment",
            ethernet(
                false,
                0x86DD,
                &ipv6(SRC6, &[(44, fragment(100))], UDP, &udp()),
            ),
            Kind::Ignored,
        ),
        (
            "v6 syn, four extension headers",
            v6_syn(
                false,
                &[
                    hop.clone(),
                    routing.clone(),
                    options.clone(),
                    (44, fragment(0)),
                ],
            ),
            v6,
        ),
        (
            "v6 syn, five extension headers: past the bound",
            v6_syn(
                false,
                &[
                    hop.clone(),
                    routing.clone(),
                    options.clone(),
                    options.clone(),
                    (44, fragment(0)),
                ],
            ),
            Kind::Ignored,
        ),
        (
            "v6 esp",
            ethernet(false, 0x86DD, &ipv6(SRC6, &[], 50, &[0; 16])),
            Kind::Ignored,
        ),
        (
            "v6 ethertype, version 4",
            {
                let mut frame = v6_syn(false, &[]);
                frame[14] = 0x45;
                frame
            },
            Kind::Malformed,
        ),
        (
            "v6 extension past the frame",
            {
                let mut frame = ethernet(
                    false,
                    0x86DD,
                    &ipv6(SRC6, &[(60, extension(1))], UDP, &udp()),
                );
                frame[14 + 40 + 1] = 200;
                frame
            },
            Kind::Malformed,
        ),
    ]
}

/// Runs `frame` and checks what the counters and cells say against `kind`. Limits are high:
/// every attempt passes.
fn check(program: &Program, width: u32, name: &str, frame: &[u8], kind: Kind) {
    let counters = program.counters().unwrap();
    let before = all_cells(program, width);
    let verdict = program.run(frame).unwrap();
    assert_eq!(verdict, Verdict::Pass, "{name}");
    let after = program.counters().unwrap();
    let delta = Counters {
        passed: after.passed - counters.passed,
        dropped: after.dropped - counters.dropped,
        malformed: after.malformed - counters.malformed,
        ignored: after.ignored - counters.ignored,
        allowed: after.allowed - counters.allowed,
        events_lost: after.events_lost - counters.events_lost,
    };
    let expected = Counters {
        passed: u64::from(matches!(kind, Kind::Attempt(_))),
        malformed: u64::from(kind == Kind::Malformed),
        ignored: u64::from(kind == Kind::Ignored),
        dropped: 0,
        allowed: 0,
        events_lost: 0,
    };
    assert_eq!(delta, expected, "{name}: {kind:?}");
    let raised: Vec<u32> = (0..before.len() as u32)
        .filter(|&i| after_cell(program, i) != before[i as usize])
        .collect();
    let mut wanted: Vec<u32> = match kind {
        Kind::Attempt(addr) => Level::ALL
            .into_iter()
            .filter_map(|level| layout::hash(GOLDEN_SEED, level, addr))
            .flat_map(|h| layout::cells(h, 0, width))
            .collect(),
        _ => Vec::new(),
    };
    wanted.sort_unstable();
    wanted.dedup();
    assert_eq!(raised, wanted, "{name}: the cells raised");
}

fn after_cell(program: &Program, index: u32) -> u32 {
    program.cell(index).unwrap()
}

/// A program counting every level, with limits no test reaches.
fn counting_everything(width: u32) -> Program {
    let mut program = load(width);
    for level in Level::ALL {
        program.set_limit(level, u32::MAX).unwrap();
    }
    program
}

#[test]
#[ignore = "needs root and clang (CI installs clang)"]
fn the_verifier_accepts_the_program() {
    let _ = NEEDS;
    let program = load(1024);
    assert_eq!(program.counters().unwrap(), Counters::default());
}

#[test]
#[ignore = "needs root and clang (CI installs clang)"]
fn verdicts_over_crafted_frames() {
    let program = counting_everything(64);
    for (name, frame, kind) in cases() {
        check(&program, 64, name, &frame, kind);
    }
}

#[test]
#[ignore = "needs root and clang (CI installs clang)"]
fn frames_cut_at_every_byte_are_malformed() {
    let program = counting_everything(64);
    let frames = [
        ("v4 udp, options, vlan", v4_udp(true, &[1; 12])),
        (
            "v4 syn",
            ethernet(false, 0x0800, &ipv4(SRC4, TCP, &[], 0, &tcp(SYN))),
        ),
        (
            "v6 syn, extensions, vlan",
            v6_syn(
                true,
                &[(0, extension(1)), (44, fragment(0)), (51, authentication())],
            ),
        ),
        (
            "v6 udp",
            ethernet(false, 0x86DD, &ipv6(SRC6, &[], UDP, &udp())),
        ),
    ];
    for (name, frame) in frames {
        // The kernel refuses test runs shorter than an Ethernet header.
        for len in 14..frame.len() {
            check(
                &program,
                64,
                &format!("{name}, cut at {len}"),
                &frame[..len],
                Kind::Malformed,
            );
        }
    }
}

#[test]
#[ignore = "needs root and clang (CI installs clang)"]
fn the_kernel_finds_the_golden_cells() {
    assert!(!GOLDEN.is_empty());
    for golden in GOLDEN {
        let mut program = load(GOLDEN_WIDTH);
        program.set_limit(golden.level, 100).unwrap();
        let addr: IpAddr = golden.addr.parse().unwrap();
        let frame = match addr {
            IpAddr::V4(v4) => ethernet(false, 0x0800, &ipv4(v4, UDP, &[], 0, &udp())),
            IpAddr::V6(v6) => ethernet(false, 0x86DD, &ipv6(v6, &[], UDP, &udp())),
        };
        assert_eq!(program.run(&frame).unwrap(), Verdict::Pass);
        let cells = all_cells(&program, GOLDEN_WIDTH);
        let raised: Vec<u32> = (0..cells.len() as u32)
            .filter(|&i| cells[i as usize] != 0)
            .collect();
        assert_eq!(raised, golden.cells.to_vec(), "{golden:?}");
        assert!(raised.iter().all(|&i| cells[i as usize] == 1), "{golden:?}");
    }
}

#[test]
#[ignore = "needs root and clang (CI installs clang)"]
fn the_kernel_slides_as_layout_says() {
    // At tick 3250 of windows of 1000: window 3 (slice 0) with 750 ticks left; the previous
    // window (slice 2) held 7 attempts, of which 5.25 still count: 6, rounded up.
    let width = 64;
    let mut program = load(width);
    program
        .configure(Config {
            fixed_tick: 3250,
            ..config(width)
        })
        .unwrap();
    program.set_limit(Level::V4Host, 10).unwrap();
    let at = layout::position(3250, 1000);
    assert_eq!((at.current, at.previous, at.remaining), (0, 2, 750));
    let h = layout::hash(GOLDEN_SEED, Level::V4Host, IpAddr::V4(SRC4)).unwrap();
    for index in layout::cells(h, at.previous, width) {
        program.set_cell(index, 7).unwrap();
    }
    let frame = v4_udp(false, &[]);
    for attempt in 1..=6u64 {
        let estimate = layout::estimate(attempt, 7, at, 1000);
        let expected = if estimate > 10 {
            Verdict::Drop
        } else {
            Verdict::Pass
        };
        assert_eq!(
            program.run(&frame).unwrap(),
            expected,
            "attempt {attempt}, estimate {estimate}"
        );
    }
    let counters = program.counters().unwrap();
    assert_eq!((counters.passed, counters.dropped), (4, 2));
    // The clear of the slice after next: window 4 counts in slice 1, which user space
    // cleared during window 3.
    assert_eq!(layout::slice_to_clear(at.index), 1);
    assert_eq!(layout::position(4000, 1000).current, 1);
}

/// Pins the calling thread to `cpu`: `taskset` on its thread id (the workspace forbids the
/// `unsafe` of calling `sched_setaffinity` itself).
fn pin_to(cpu: usize) {
    let me = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
    let tid = me
        .file_name()
        .and_then(|name| name.to_str())
        .expect("PID/task/TID")
        .to_owned();
    sh(&format!("taskset -p -c {cpu} {tid} >/dev/null"));
}

#[test]
#[ignore = "needs root and clang (CI installs clang)"]
fn two_cpus_lose_no_increment() {
    // Two threads pinned to CPUs 0 and 1 run the program on one source, 40 calls of 100,000
    // repeats each: a test run disables migration, so each thread's runs stay on its CPU and
    // both add to the key's cells at once. Many calls each, so the two overlap for long even
    // on a loaded machine: a plain read-add-write in place of the atomic add loses
    // thousands here (benches/README.md says how that was seen).
    const RUNS: u32 = 100_000;
    const CALLS: u32 = 40;
    let program = counting_everything(64);
    let frame = v4_udp(false, &[]);
    let barrier = Barrier::new(2);
    let (shared, frame, barrier) = (&program, &frame, &barrier);
    std::thread::scope(|scope| {
        for cpu in 0..2 {
            scope.spawn(move || {
                pin_to(cpu);
                barrier.wait();
                for _ in 0..CALLS {
                    shared.run_repeated(frame, RUNS).unwrap();
                }
            });
        }
    });
    let total = 2 * CALLS * RUNS;
    let h = layout::hash(GOLDEN_SEED, Level::V4Host, IpAddr::V4(SRC4)).unwrap();
    for index in layout::cells(h, 0, 64) {
        assert_eq!(program.cell(index).unwrap(), total, "cell {index}");
    }
    // Each CPU's own counter holds its thread's runs exactly: both CPUs counted.
    let passed = program.counter_per_cpu(0).unwrap();
    assert_eq!(
        passed.get(..2),
        Some(&[u64::from(CALLS * RUNS); 2][..]),
        "passed, CPU by CPU: {passed:?}"
    );
    assert_eq!(program.counters().unwrap().passed, u64::from(total));
}

#[test]
fn without_clang_the_mode_says_so_in_one_line() {
    let said = super::program::MISSING;
    assert!(
        !said.contains('\n') && said.contains("install clang"),
        "{said}"
    );
}

/// Set, to the variant's object, in the environment of the cost test's re-run for a random
/// source.
const ROTATING: &str = "TOLLGATE_XDP_TEST_ROTATING";

/// The median over `rounds` of the kernel's mean time per run of `frame`, repeated
/// 1,000,000 times, in nanoseconds.
fn median_ns(program: &Program, frame: &[u8], rounds: usize) -> f64 {
    let mut times: Vec<f64> = (0..rounds)
        .map(|_| program.run_repeated(frame, 1_000_000).unwrap().1.as_nanos() as f64)
        .collect();
    times.sort_by(f64::total_cmp);
    times[rounds / 2]
}

/// The program over a sketch of 8 MiB, counting /32 and /24 with limits never reached, on
/// its clock.
fn costed() -> Program {
    let geometry = Geometry::of_memory(8 << 20);
    let mut program = load(geometry.width);
    program
        .configure(Config {
            fixed_tick: 0,
            ..config(geometry.width)
        })
        .unwrap();
    program.set_limit(Level::V4Host, u32::MAX).unwrap();
    program.set_limit(Level::V4Net24, u32::MAX).unwrap();
    program
}

/// Per-packet cost by BPF_PROG_TEST_RUN with repeat: not a test (it asserts nothing), run by
/// hand (benches/README.md):
/// `cargo test -p tollgate --lib xdp::tests::cost -- --exact --ignored --nocapture`.
///
/// Medians of 9 rounds of 1,000,000 runs each: an ARP frame (parsed and passed: the runner's
/// own cost and the parse), a hot key (one IPv4 source), and a random source. For the last,
/// a repeat runs one frame, so the test builds a variant of the program with clang
/// (`-DTOLLGATE_BENCH_ROTATE`: each run writes the next source of an LCG into the frame) and
/// runs itself again on it: every run counts a new source at both levels, over 8 MiB.
#[test]
#[ignore = "a measurement, run by hand (benches/README.md)"]
fn cost() {
    const ROUNDS: usize = 9;
    let hot = v4_udp(false, &[]);
    let program = costed();
    if std::env::var_os(ROTATING).is_some() {
        println!("random source: {:.1} ns", median_ns(&program, &hot, ROUNDS));
        return;
    }
    let arp = ethernet(false, 0x0806, &[0; 28]);
    println!(
        "ARP: {:.1} ns; hot key: {:.1} ns",
        median_ns(&program, &arp, ROUNDS),
        median_ns(&program, &hot, ROUNDS)
    );
    drop(program);
    let dir = std::env::temp_dir().join(format!("tollgate-xdp-cost-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let variant = dir.join("rotating.bpf.o");
    let manifest = env!("CARGO_MANIFEST_DIR");
    sh(&format!(
        "${{TOLLGATE_CLANG:-clang}} -target bpf -mcpu=v3 -O2 -g -Wall -Werror \
         -DTOLLGATE_BENCH_ROTATE -c {manifest}/bpf/tollgate.bpf.c -o {}",
        variant.display()
    ));
    let exe = std::env::current_exe().expect("the test binary's path");
    let output = Command::new(exe)
        .args([
            "xdp::tests::cost",
            "--exact",
            "--include-ignored",
            "--nocapture",
        ])
        .env(ROTATING, "1")
        .env("TOLLGATE_XDP_OBJECT", &variant)
        .output()
        .expect("the test binary runs");
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .find(|line| line.starts_with("random source"))
        .unwrap_or_else(|| panic!("{stdout}{}", String::from_utf8_lossy(&output.stderr)));
    println!("{line} (sketch 8 MiB, 2 levels)");
}

/// Set in the environment of a test re-run inside its own namespaces.
const INSIDE: &str = "TOLLGATE_XDP_TEST_INSIDE";

/// Runs test `name` of this module again, alone, inside new network and mount namespaces
/// (so the veth pair and the named namespace vanish with it, whatever happens).
fn in_namespace(name: &str) {
    let exe = std::env::current_exe().expect("the test binary's path");
    let exact = format!("xdp::tests::{name}");
    let output = Command::new("unshare")
        .args(["-n", "-m", "--propagation", "private"])
        .arg(exe)
        .args([&exact, "--exact", "--include-ignored", "--nocapture"])
        .env(INSIDE, "1")
        .output()
        .expect("unshare runs (util-linux)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    print!("{stdout}");
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    assert!(
        output.status.success(),
        "the test inside the namespace failed: {}",
        output.status
    );
    // A name that matches no test passes with nothing run: the inner run must have run this one.
    assert!(
        stdout.contains("test result: ok. 1 passed"),
        "{exact} did not run inside"
    );
}

/// Runs `script` with sh; fails the test with its output if it fails.
fn sh(script: &str) {
    let output = Command::new("sh")
        .args(["-c", script])
        .output()
        .expect("sh runs");
    assert!(
        output.status.success(),
        "`{script}`: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Datagrams that reached UDP in this network namespace (`/proc/net/snmp`: delivered, to no
/// port, or in error, a full receive buffer included): what got past the program.
fn udp_arrived() -> u64 {
    let snmp = std::fs::read_to_string("/proc/net/snmp").unwrap();
    let mut lines = snmp.lines().filter(|line| line.starts_with("Udp:"));
    let (names, values) = (lines.next().unwrap(), lines.next().unwrap());
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .filter(|(name, _)| ["InDatagrams", "NoPorts", "InErrors"].contains(name))
        .map(|(_, value)| value.parse::<u64>().unwrap())
        .sum()
}

#[test]
#[ignore = "needs root, unshare, ip and clang (CI installs clang)"]
fn a_veth_peer_gets_exactly_the_limit_through() {
    if std::env::var_os(INSIDE).is_none() {
        in_namespace("a_veth_peer_gets_exactly_the_limit_through");
        return;
    }
    // tg0 here (the program on it), tg1 in the namespace `tg_peer`, which sends 200
    // datagrams from 10.9.0.2 (bash's /dev/udp: one socket per datagram) to 10.9.0.1.
    // /run/netns on a tmpfs of this mount namespace: the named namespace's file goes with it.
    sh(
        "mkdir -p /run/netns && mount -t tmpfs tollgate-test /run/netns && ip link set lo up && ip netns add tg_peer \
        && ip link add tg0 type veth peer name tg1 && ip link set tg1 netns tg_peer \
        && ip addr add 10.9.0.1/24 dev tg0 && ip link set tg0 up \
        && ip netns exec tg_peer sh -c 'ip link set lo up && ip addr add 10.9.0.2/24 dev tg1 && ip link set tg1 up'",
    );
    for native in [true, false] {
        let mut program = load(64);
        program.set_limit(Level::V4Host, 50).unwrap();
        if let Err(err) = program.attach("tg0", native) {
            panic!("attaching (native {native}): {err}");
        }
        let before = udp_arrived();
        sh(
            "ip netns exec tg_peer bash -c 'for i in $(seq 1 200); do echo x >/dev/udp/10.9.0.1/9; done'",
        );
        // What reached UDP in this namespace: the limit, not one more.
        assert_eq!(udp_arrived() - before, 50, "native {native}");
        let counters = program.counters().unwrap();
        assert_eq!(
            (counters.passed, counters.dropped),
            (50, 150),
            "native {native}: {counters:?}"
        );
        assert_eq!(counters.malformed, 0, "native {native}");
        let h = layout::hash(GOLDEN_SEED, Level::V4Host, "10.9.0.2".parse().unwrap()).unwrap();
        for index in layout::cells(h, 0, 64) {
            assert_eq!(program.cell(index).unwrap(), 200, "native {native}");
        }
        // Dropping the program detaches it, so the next round attaches afresh.
        drop(program);
    }
}

/// A sender for the throughput measurement: every run redirects its frame out of the
/// interface of index `IFINDEX` (set with -D), so `BPF_PROG_TEST_RUN` in live-frames mode
/// sends one frame per repeat into a veth, whose peer runs the program at its driver.
const SENDER: &str = r#"
#define SEC(name) __attribute__((section(name), used))
static long (*bpf_redirect)(unsigned int ifindex, unsigned long long flags) = (void *)23;
SEC("xdp") int send(void *ctx) { return bpf_redirect(IFINDEX, 0); }
char LICENSE[] SEC("license") = "GPL";
"#;

/// Throughput through a veth on one vCPU: not a test (it asserts only that every frame sent
/// was counted), run by hand (benches/README.md):
/// `cargo test -p tollgate --lib xdp::tests::cost_through_veth -- --ignored --nocapture`.
///
/// tg1 -> tg0 in a namespace of its own; the program attached natively on tg0 with a /32
/// limit of 1,000 (so nearly every frame is dropped); a sender program run by
/// `BPF_PROG_TEST_RUN` in live-frames mode (batches of 64) redirects 10,000,000 copies of one
/// UDP frame out of tg1. The sender and tg0's NAPI run on the calling CPU. Frames per second
/// are the program's counters (passed + dropped, exact, read from its map) over the wall time
/// of the run; 5 rounds. Named `cost_...` so that CI's `--skip xdp::tests::cost` leaves it out.
#[test]
#[ignore = "a measurement, run by hand (benches/README.md)"]
fn cost_through_veth() {
    if std::env::var_os(INSIDE).is_none() {
        in_namespace("cost_through_veth");
        return;
    }
    use aya::programs::{TestRun, TestRunAttrs, TestRunOptions, Xdp};
    const FRAMES: u32 = 10_000_000;
    sh(
        "ip link set lo up && ip link add tg0 type veth peer name tg1 \
        && ip link set tg0 up && ip link set tg1 up",
    );
    // `ip -o link show tg1` begins with the index: "7: tg1@tg0: ..." (this namespace's /sys
    // is not remounted, so its files name the outer namespace's links).
    let shown = Command::new("ip")
        .args(["-o", "link", "show", "tg1"])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    let ifindex = shown.split(':').next().unwrap().to_owned();
    let dir = std::env::temp_dir().join(format!("tollgate-xdp-veth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join("sender.c");
    std::fs::write(&source, SENDER).unwrap();
    let object = dir.join("sender.o");
    sh(&format!(
        "${{TOLLGATE_CLANG:-clang}} -target bpf -O2 -DIFINDEX={} -c {} -o {}",
        ifindex.trim(),
        source.display(),
        object.display()
    ));
    let bytes = std::fs::read(&object).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let mut sender = aya::Ebpf::load(&bytes).unwrap();
    let send: &mut Xdp = sender.program_mut("send").unwrap().try_into().unwrap();
    send.load().unwrap();
    let frame = ethernet(false, 0x0800, &ipv4(SRC4, UDP, &[], 0, &udp()));
    let mut rates = Vec::new();
    for round in 0..5 {
        let mut program = load(64);
        program.set_limit(Level::V4Host, 1000).unwrap();
        program.attach("tg0", true).unwrap();
        let started = std::time::Instant::now();
        send.test_run(TestRunOptions {
            data_in: Some(&frame),
            repeat: FRAMES,
            attrs: TestRunAttrs::new().xdp_live_frames(64),
            ..TestRunOptions::new()
        })
        .unwrap();
        let elapsed = started.elapsed();
        let counters = program.counters().unwrap();
        let counted = counters.passed + counters.dropped;
        let rate = counted as f64 / elapsed.as_secs_f64();
        println!(
            "round {round}: {counted} frames counted of {FRAMES} sent ({} passed, {} dropped) in {elapsed:?}: {:.2} M frames/s",
            counters.passed,
            counters.dropped,
            rate / 1e6
        );
        assert_eq!(counters.passed, 1000);
        rates.push(rate);
        drop(program);
    }
    rates.sort_by(f64::total_cmp);
    println!("median: {:.2} M frames/s", rates[2] / 1e6);
}

#[test]
#[ignore = "needs root and clang (CI installs clang)"]
fn a_spoofed_rotation_is_dropped_from_the_frame_that_crosses_the_limit() {
    // Every frame a new source: 2,000 addresses inside one /64, then 2,000 across the /64s of
    // one /48. The kernel decides per frame, so the aggregate's limit holds at the frame that
    // crosses it: no frame late, at any rate (at 1 M frames/s, 1 ms would be 1,000 frames).
    const LIMIT: u32 = 500;
    for (level, name) in [(Level::V6Net64, "/64"), (Level::V6Net48, "/48")] {
        let mut program = load(1024);
        program.set_limit(Level::V6Host, u32::MAX).unwrap();
        program.set_limit(level, LIMIT).unwrap();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for frame in 1..=2000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let base = 0x2001_0db8_0001_0002u128 << 64;
            let src = match level {
                Level::V6Net64 => base | u128::from(x),
                // The /64 varies under the /48: the low 16 bits of the /64's word and the host.
                _ => base & !(0xffffu128 << 64) | u128::from(x & 0xffff) << 64 | u128::from(x),
            };
            let bytes = ethernet(
                false,
                0x86DD,
                &ipv6(Ipv6Addr::from_bits(src), &[], UDP, &udp()),
            );
            let expected = if frame <= LIMIT {
                Verdict::Pass
            } else {
                Verdict::Drop
            };
            assert_eq!(
                program.run(&bytes).unwrap(),
                expected,
                "{name}: frame {frame}"
            );
        }
        let counters = program.counters().unwrap();
        assert_eq!((counters.passed, counters.dropped), (500, 1500), "{name}");
    }
}

#[test]
#[ignore = "needs root and clang (CI installs clang)"]
fn rules_swap_whole_and_only_guarded_ports_count() {
    let mut program = load(64);
    program.set_limit(Level::V4Host, 2).unwrap();
    let (datagram, syn) = (
        v4_udp(false, &[]),
        ethernet(false, 0x0800, &ipv4(SRC4, TCP, &[], 0, &tcp(SYN))),
    );
    let runs = |program: &Program, frame: &[u8], n: usize| -> Vec<Verdict> {
        (0..n).map(|_| program.run(frame).unwrap()).collect()
    };
    assert_eq!(
        runs(&program, &datagram, 3),
        [Verdict::Pass, Verdict::Pass, Verdict::Drop]
    );
    // The new rules go into the other bank whole; the program reads them from the next frame.
    program.swap_limits([5, 0, 0, 0, 0]).unwrap();
    assert_eq!(
        (program.config().bank, program.limit(Level::V4Host).unwrap()),
        (1, 5)
    );
    // 3 counted so far (a drop is counted too): 4 and 5 pass, 6 is over.
    assert_eq!(
        runs(&program, &datagram, 3),
        [Verdict::Pass, Verdict::Pass, Verdict::Drop]
    );
    program.swap_limits([0, 0, 0, 0, 0]).unwrap();
    assert_eq!(program.config().bank, 0);
    assert_eq!(runs(&program, &datagram, 2), [Verdict::Pass, Verdict::Pass]);
    // Port 53 (the datagram's) guarded, 80 (the SYN's) not: the SYN passes uncounted.
    program.swap_limits([1, 0, 0, 0, 0]).unwrap();
    program.guard_ports(Some(&[53])).unwrap();
    let before = program.counters().unwrap();
    assert_eq!(runs(&program, &syn, 3), [Verdict::Pass; 3]);
    assert_eq!(runs(&program, &datagram, 1), [Verdict::Drop]);
    let after = program.counters().unwrap();
    assert_eq!(
        (
            after.ignored - before.ignored,
            after.dropped - before.dropped
        ),
        (3, 1)
    );
    program.guard_ports(Some(&[80])).unwrap();
    assert_eq!(runs(&program, &syn, 1), [Verdict::Drop]);
    assert_eq!(runs(&program, &datagram, 1), [Verdict::Pass]);
    assert_eq!(program.counters().unwrap().ignored - after.ignored, 1);
    program.guard_ports(None).unwrap();
    assert_eq!(runs(&program, &datagram, 1), [Verdict::Drop]);
}

#[test]
#[ignore = "needs root and clang (CI installs clang)"]
fn the_rotation_clears_the_slice_after_next_and_nothing_else() {
    use super::attachment::{Attachment, kernel_tick};
    use super::metrics::Cleared;
    let config = crate::config::XdpConfig {
        interfaces: Vec::new(),
        mode: crate::config::XdpMode::Native,
        listeners: None,
        ports: Vec::new(),
        memory: 64 << 10,
        window: Some(std::time::Duration::from_secs(60)),
        required: false,
    };
    let policy =
        tollgate_filter::Config::parse("[[rule]]\nname = \"r\"\nlimits = [{ rate = \"5/1m\" }]")
            .unwrap();
    let attachment =
        Attachment::start(&config, &policy, vec![53], std::sync::Arc::default()).unwrap();
    let (window, width) = attachment.shape();
    let cells = layout::blocks(width) * layout::BLOCK_CELLS;
    let fill = |value: u32| {
        attachment.with_program(|program| {
            for index in 0..cells {
                program.set_cell(index, value).unwrap();
            }
        });
    };
    let per_slice = |slice: u32| -> Vec<u32> {
        attachment.with_program(|p| {
            layout::slice_cells(slice, width)
                .map(|index| p.cell(index).unwrap())
                .collect()
        })
    };
    // A window ten ahead: its deadline is far, the whole slice is cleared.
    let now = layout::position(kernel_tick(), window).index;
    for index in now + 10..now + 13 {
        fill(7);
        assert_eq!(attachment.clear_for(index).unwrap(), Cleared::Done);
        let cleared = layout::slice_to_clear(index);
        for slice in 0..layout::SLICES {
            let expected = if slice == cleared { 0 } else { 7 };
            assert!(
                per_slice(slice).iter().all(|&c| c == expected),
                "window {index}, slice {slice}"
            );
        }
    }
    // A window long past: less than a quarter of it is left (none), nothing is cleared.
    fill(7);
    assert_eq!(attachment.clear_for(now - 10).unwrap(), Cleared::Stopped);
    for slice in 0..layout::SLICES {
        assert!(per_slice(slice).iter().all(|&c| c == 7), "slice {slice}");
    }
}

/// The rotation's clear, timed: not a test (it asserts only that the clear reached the
/// slice's first and last cells), run by hand (benches/README.md):
/// `cargo test -p tollgate --lib xdp::tests::cost_of_clearing -- --ignored --nocapture`.
///
/// Over sketches of 8 MiB and of 1 GiB (the most `[xdp] memory` takes): one slice cleared
/// by a map update per cell (the rotation before the clearing program: a syscall per cell),
/// then by `Attachment::clear_for` (the clearing program: a syscall per 64 blocks). At 1 GiB
/// the per-cell way is timed over the slice's first 2,000,000 cells and scaled to the whole
/// slice. Medians of 3 rounds (the per-cell way at 1 GiB: one).
#[test]
#[ignore = "a measurement, run by hand (benches/README.md)"]
fn cost_of_clearing() {
    use super::attachment::{Attachment, kernel_tick};
    use super::metrics::Cleared;
    use std::time::{Duration, Instant};
    const SAMPLE: u32 = 2_000_000;
    let median = |mut times: Vec<Duration>| {
        times.sort();
        times[times.len() / 2]
    };
    for (memory, name) in [(8u64 << 20, "8 MiB"), (1 << 30, "1 GiB")] {
        let config = crate::config::XdpConfig {
            interfaces: Vec::new(),
            mode: crate::config::XdpMode::Native,
            listeners: None,
            ports: Vec::new(),
            memory,
            window: Some(Duration::from_secs(60)),
            required: false,
        };
        let policy = tollgate_filter::Config::parse(
            "[[rule]]\nname = \"r\"\nlimits = [{ rate = \"5/1m\" }]",
        )
        .unwrap();
        let attachment =
            Attachment::start(&config, &policy, vec![53], std::sync::Arc::default()).unwrap();
        let (window, width) = attachment.shape();
        let blocks = layout::blocks(width);
        let cells = blocks * layout::DEPTH * layout::COLUMNS;
        let now = layout::position(kernel_tick(), window).index;
        let sample = cells.min(SAMPLE);
        let mut per_cell = Vec::new();
        let rounds = if cells > SAMPLE { 1 } else { 3 };
        for _ in 0..rounds {
            let slice = layout::slice_to_clear(now + 10);
            let started = Instant::now();
            attachment.with_program(|program| {
                for index in layout::slice_cells(slice, width).take(sample as usize) {
                    program.set_cell(index, 0).unwrap();
                }
            });
            per_cell.push(
                started
                    .elapsed()
                    .mul_f64(f64::from(cells) / f64::from(sample)),
            );
        }
        let mut by_program = Vec::new();
        for round in 0..3 {
            let index = now + 10 + round;
            let slice = layout::slice_to_clear(index);
            let mut ends = layout::slice_cells(slice, width);
            let first = ends.next().unwrap();
            let last = ends.last().unwrap();
            attachment.with_program(|program| {
                program.set_cell(first, 7).unwrap();
                program.set_cell(last, 7).unwrap();
            });
            let started = Instant::now();
            assert_eq!(attachment.clear_for(index).unwrap(), Cleared::Done);
            by_program.push(started.elapsed());
            attachment.with_program(|program| {
                assert_eq!(
                    (program.cell(first).unwrap(), program.cell(last).unwrap()),
                    (0, 0)
                );
            });
        }
        println!(
            "{name}: {cells} cells a slice; a map update a cell: {cells} syscalls, {:?}{}; \
             the clearing program: {} syscalls, {:?} (median of 3)",
            median(per_cell),
            if cells > SAMPLE {
                format!(" (scaled from the first {sample})")
            } else {
                " (median of 3)".to_owned()
            },
            blocks.div_ceil(64),
            median(by_program)
        );
    }
}
