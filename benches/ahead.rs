//! What the XDP mode saves the proxy's own decision: an arrival that came in through the XDP
//! program is decided with `Filter::decide_counted_ahead`, which neither counts nor compares
//! the limits the kernel takes (it counted and passed the attempt); before, it was decided
//! with `Filter::decide`, which counted it a second time. Both in one run, on one stream.
//!
//! ```text
//! cargo bench -p tollgate-benches --bench ahead
//! ```
//!
//! The stream: 2^16 sources, IPv4 and IPv6 (3:1), drawn from Zipf(1.1) over 100k addresses
//! (IPv6 spread over 100k /64s), each a TCP connection, replayed in a loop at one tick that
//! moves 100 ns per event. Policies (64 MiB of sketches):
//! - `kernel_takes_all`: one rule, 100 per 10 s per address (/32, /64) and 1000 per 10 s per
//!   /24 or /48: every limit is the kernel's (its window is 10 s).
//! - `kernel_takes_half`: the same rule with a third limit, 5000 per minute per /24 or /48,
//!   which the kernel does not take (another period).
//!
//! Cases per policy: `counted_twice` (`decide`, the path before), `counted_once`
//! (`decide_counted_ahead`). The test of which arrival crossed the program (`gate::ahead`: an
//! `ArcSwap` load, the listener's name and the host's addresses) is not in either.

#[path = "workload.rs"]
mod workload;

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tollgate_filter::{Config, CountedAhead, Event, Filter, Source, Transport};
use tollgate_sketch::Tick;

/// Events per iteration.
const BATCH: usize = 1 << 16;

fn policy(extra: &str) -> String {
    format!(
        "[sketch]\nmemory = \"64MiB\"\n[[rule]]\nname = \"per-source\"\nlimits = [\n\
         {{ rate = \"100/10s\", ipv4_prefix = 32, ipv6_prefix = 64 }},\n\
         {{ rate = \"1000/10s\", ipv4_prefix = 24, ipv6_prefix = 48 }},\n{extra}]\n"
    )
}

fn events() -> Vec<Event> {
    workload::zipf_stream(100_000, 1.1, BATCH, 11)
        .into_iter()
        .enumerate()
        .map(|(i, id)| {
            let id = id as u32;
            let addr = if i % 4 == 3 {
                IpAddr::V6(Ipv6Addr::new(
                    0x2001,
                    0xdb8,
                    (id >> 16) as u16,
                    id as u16,
                    0,
                    0,
                    0,
                    1,
                ))
            } else {
                IpAddr::V4(Ipv4Addr::from(0x0a00_0000 | id))
            };
            Event {
                source: Source::new(addr),
                transport: Transport::Tcp,
                bytes: 60,
            }
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let events = events();
    let ahead = CountedAhead {
        window: Duration::from_secs(10),
        ipv4: vec![32, 24],
        ipv6: vec![128, 64, 48],
    };
    let cases = [
        ("kernel_takes_all", policy("")),
        (
            "kernel_takes_half",
            policy("{ rate = \"5000/1m\", ipv4_prefix = 24, ipv6_prefix = 48 },\n"),
        ),
    ];
    for (name, text) in cases {
        let mut group = c.benchmark_group(name);
        group.throughput(Throughput::Elements(BATCH as u64));
        let filter = Filter::new(Config::parse(&text).expect("valid")).expect("fits");
        filter
            .count_ahead(Some(ahead.clone()), Tick::ZERO)
            .expect("fits");
        let mut at = 0_u64;
        group.bench_function("counted_twice", |b| {
            b.iter(|| {
                for event in &events {
                    at += 100;
                    let _ = black_box(filter.decide(event, Tick::from_nanos(at)));
                }
            });
        });
        group.bench_function("counted_once", |b| {
            b.iter(|| {
                for event in &events {
                    at += 100;
                    let _ = black_box(filter.decide_counted_ahead(event, Tick::from_nanos(at)));
                }
            });
        });
        group.finish();
    }
}

criterion_group! {
    name = benches;
    // A 2-core machine shared with other work: few, long samples (4 cases, under a minute).
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(5));
    targets = bench
}
criterion_main!(benches);
