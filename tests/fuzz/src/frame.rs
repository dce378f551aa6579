//! Frames: [`parse_frame`], the decision's own read ([`decision_reads`]) and
//! [`Policy::decide_frame`] on any bytes.

use std::net::IpAddr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use tollgate_filter::{Config, DenyReason, Policy, Protocol, Verdict, decision_reads, parse_frame};
use tollgate_sketch::Tick;

/// A policy that sends frames down every branch of the decision: lists, a per-address and
/// per-network TCP rule with a penalty, a byte-weighted UDP rule and a shadow rule.
const POLICY: &str = r#"
[sketch]
memory = "256KiB"

[lists]
allow = ["10.255.0.0/16", "2001:db8:ffff::/48"]
deny = ["192.0.2.0/24", "2001:db8:dead::/48"]

[[rule]]
name = "tcp"
protocol = "tcp"
limits = [
  { rate = "3/1s", ipv4_prefix = 32, ipv6_prefix = 64 },
  { rate = "20/1s", ipv4_prefix = 24, ipv6_prefix = 48 },
]
penalty = "2s"

[[rule]]
name = "udp-bytes"
protocol = "udp"
weight = "bytes"
limits = [{ rate = "2000/1s" }]
action = "drop"

[[rule]]
name = "shadow"
sources = ["10.0.0.0/8", "2001:db8::/32"]
limits = [{ rate = "1/1s", ipv4_prefix = 16, ipv6_prefix = 32 }]
shadow = true
"#;

/// The policy, built once per process (the fuzzer runs many inputs in one process).
fn policy() -> &'static Policy {
    static POLICY_CELL: OnceLock<Policy> = OnceLock::new();
    POLICY_CELL.get_or_init(|| {
        let config = Config::parse(POLICY).expect("the harness policy parses");
        Policy::compile(config, None).expect("the harness policy fits its memory")
    })
}

/// The next tick: 1 ms per frame, so windows turn over and penalties start and end.
fn now() -> Tick {
    static FRAMES: AtomicU64 = AtomicU64::new(0);
    // Relaxed: only the count matters, no other memory is published through it.
    Tick::from_nanos(FRAMES.fetch_add(1, Ordering::Relaxed) * 1_000_000)
}

/// Parses `data` as an Ethernet frame and decides on it.
///
/// # Panics
/// When an invariant breaks: `frame_len` is not the frame's length, a protocol number 6 or 17
/// is reported as `Other`, ports are given for a protocol without them or only one of the
/// two, an IPv4-mapped source is not folded, the decision's read (header bytes first for
/// plain frames) differs from the etherparse slices' read or from [`parse_frame`]'s source
/// and protocol (or errs differently), or the decision disagrees with the parse (a malformed
/// frame must be exactly `Deny(Malformed)` with the parser's reason, and a frame that parses
/// must never be).
pub fn check(data: &[u8]) {
    let parsed = parse_frame(data);
    let [decided, sliced] = decision_reads(data);
    assert_eq!(
        decided, sliced,
        "the fast read differs from the sliced read"
    );
    assert_eq!(
        sliced,
        parsed.map(|info| (info.source, info.protocol)),
        "the sliced read differs from parse_frame"
    );
    if let Ok(info) = &parsed {
        assert_eq!(info.frame_len, data.len(), "frame_len of {info:?}");
        match info.protocol {
            Protocol::Other(n) => {
                assert!(n != 6 && n != 17, "TCP or UDP reported as Other: {info:?}");
                assert!(
                    info.source_port.is_none(),
                    "ports without TCP/UDP: {info:?}"
                );
            }
            Protocol::Tcp | Protocol::Udp => {}
        }
        assert_eq!(
            info.source_port.is_some(),
            info.destination_port.is_some(),
            "one port without the other: {info:?}"
        );
        if let IpAddr::V6(v6) = info.source.addr() {
            assert!(v6.to_ipv4_mapped().is_none(), "unfolded source: {info:?}");
        }
    }
    let decision = policy().decide_frame(data, now());
    match parsed {
        Err(malformed) => assert_eq!(
            decision.verdict,
            Verdict::Deny(DenyReason::Malformed(malformed)),
            "a malformed frame must get its parser's reason"
        ),
        Ok(info) => assert!(
            !matches!(decision.verdict, Verdict::Deny(DenyReason::Malformed(_))),
            "a frame that parses ({info:?}) was judged malformed: {decision:?}"
        ),
    }
}
