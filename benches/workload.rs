//! Streams shared by the benchmarks and the accuracy tool: seeded, so every run and every
//! peer sees the same keys in the same order.

#![allow(dead_code)] // each bench target uses a different part of this module

use std::time::Duration;

use etherparse::PacketBuilder;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Zipf};

/// `len` key ids drawn from Zipf(`exponent`) over `distinct` ids (id 1 the most frequent),
/// scrambled so that frequent ids are not small numbers.
pub(crate) fn zipf_stream(distinct: u64, exponent: f64, len: usize, seed: u64) -> Vec<u64> {
    let zipf = Zipf::new(distinct as f64, exponent).expect("valid Zipf parameters");
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..len)
        .map(|_| scramble(zipf.sample(&mut rng) as u64))
        .collect()
}

/// `len` ids that are (with overwhelming probability) all distinct.
pub(crate) fn distinct_stream(len: usize, seed: u64) -> Vec<u64> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..len).map(|_| rng.random::<u64>()).collect()
}

/// A bijection on u64 (SplitMix64's finaliser): spreads ids without colliding them.
pub(crate) fn scramble(id: u64) -> u64 {
    let mut z = id.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A minimum-size frame from source id `id`, for the filter and replay benchmarks: the id picks
/// the family (IPv6 one time in four, spread over /64s), the transport (UDP one time in three,
/// else a TCP SYN) and the address.
pub(crate) fn synthetic_frame(id: u64) -> Vec<u8> {
    let builder = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    let ip = if id % 4 == 3 {
        let mut src = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        src[4..12].copy_from_slice(&(id >> 2).to_be_bytes());
        builder.ipv6(
            src,
            [
                0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x53,
            ],
            64,
        )
    } else {
        // The low 32 bits of the id, in 10.0.0.0/8: the cast keeps exactly those.
        let [a, b, c, d] = ((id as u32) & 0x00FF_FFFF | 0x0A00_0000).to_be_bytes();
        builder.ipv4([a, b, c, d], [192, 0, 2, 1], 64)
    };
    let mut bytes = Vec::new();
    let written = if id % 3 == 2 {
        ip.udp(40_000, 53).write(&mut bytes, &[0; 18])
    } else {
        ip.tcp(40_000, 443, 1, 64_240).syn().write(&mut bytes, &[])
    };
    written.expect("a well-formed frame");
    bytes
}

/// The frame benchmarks' policy (`benches/frames.rs`, `benches/threads`): one rule, 100 per
/// 10 s per address and 1000 per 10 s per IPv4 /24 or IPv6 /64, 64 MiB of sketches.
pub(crate) const FRAME_POLICY: &str = r#"
[sketch]
memory = "64MiB"

[[rule]]
name = "per-source"
limits = [
  { rate = "100/10s",  ipv4_prefix = 32, ipv6_prefix = 128 },
  { rate = "1000/10s", ipv4_prefix = 24, ipv6_prefix = 64 },
]
"#;

/// A filter under [`FRAME_POLICY`], from zero counts.
pub(crate) fn frame_filter() -> tollgate_filter::Filter {
    let config = tollgate_filter::Config::parse(FRAME_POLICY).expect("valid policy");
    tollgate_filter::Filter::new(config).expect("policy")
}

/// [`frame_filter`] with its limits' reservations off (`Filter::without_reservations`).
pub(crate) fn frame_filter_without_reservations() -> tollgate_filter::Filter {
    let config = tollgate_filter::Config::parse(FRAME_POLICY).expect("valid policy");
    tollgate_filter::Filter::without_reservations(config).expect("policy")
}

/// Whether to time on-CPU time instead of wall time (`TOLLGATE_BENCH_CLOCK=cpu`): on a
/// machine shared with other work, wall time counts the time the scheduler gave to others.
pub(crate) fn cpu_clock() -> bool {
    std::env::var("TOLLGATE_BENCH_CLOCK").is_ok_and(|clock| clock == "cpu")
}

/// This thread's time on a CPU so far (`/proc/thread-self/schedstat`, nanoseconds), or zero
/// where that is not available. Read outside the timed loop only.
pub(crate) fn on_cpu() -> Duration {
    if !cpu_clock() {
        return Duration::ZERO;
    }
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .map_or(Duration::ZERO, Duration::from_nanos)
}
