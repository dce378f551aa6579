//! The cost of a filter decision on a raw frame: parse (etherparse) plus decide under a rule
//! with two limits, on an in-memory capture of realistic frames.
//!
//! ```text
//! cargo bench -p tollgate-benches --bench frames
//! ```
//!
//! The capture: 2^16 frames, a mix of IPv4 and IPv6 (3:1), TCP and UDP (2:1), minimum-size
//! TCP SYNs and small UDP datagrams, from sources drawn from Zipf(1.1) over 100k addresses
//! (IPv6 sources spread over 100k /64s). The policy: one rule, 100 per 10 s per address and
//! 1000 per 10 s per IPv4 /24 or IPv6 /64, 64 MiB of sketches. The goal is 10 Mpps on one
//! core, 100 ns per frame (10 GbE at minimum frame size is 14.88 Mpps).
//!
//! `parse_and_decide` decides one frame at a time (`decide_frame`); `parse_and_decide_batched`
//! hands the filter `FRAME_BATCH` frames at a time (`decide_frames`), which parses them all,
//! hashes every key once and prefetches its cache lines before deciding any (with those
//! hashes), so their misses overlap. `sketch_only_batched` is the floor under that: the same
//! frames' two keys per frame, built beforehand, through a sketch of the policy's shape with
//! `RateSketch::prepare_at` / `observe_prepared` in batches of `FRAME_BATCH` frames (what the
//! sketch's `observe_batch` does: the batch's tick worked out once, `RateSketch::moment`): no parse, no rules, no verdicts.
//! `sketch_only_batched_streamed`: that floor with the memory streams the filter's batches
//! have beside it (each frame read, a decision's bytes a frame written; see
//! `sketch_only_streamed`).
//! `TOLLGATE_BENCH_CLOCK=cpu` times by this thread's time on a CPU instead of wall time.
//!
//! For counting instructions (callgrind), `TOLLGATE_FRAMES_PASSES=N` skips criterion and runs
//! exactly N passes of the capture one at a time (`one_at_a_time`), then N batched
//! (`batched`), each on a filter of its own from zero counts, then N of the floor
//! (`sketch_only_batched`, on a sketch of its own), then N of the floor with the streams
//! (`sketch_only_streamed`, on another), prints what they decided, and exits: the
//! same work whatever the machine's load (criterion's `--profile-time` is wall time).
//!
//! ```text
//! TOLLGATE_FRAMES_PASSES=1 valgrind --tool=callgrind --callgrind-out-file=cg target/release/deps/frames-*
//! callgrind_annotate --inclusive=yes --tree=calling cg
//! ```

#[path = "workload.rs"]
mod workload;

use workload::{cpu_clock, on_cpu};

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group};
use tollgate_filter::{
    Decision, FRAME_BATCH, Filter, LimitKey, Prefix, RuleId, Verdict, parse_frame,
};
use tollgate_sketch::{Prepared, RateSketch, Tick};

const FRAMES: usize = 1 << 16;

/// Runs `pass` `iters` times; wall time, or this thread's time on a CPU with
/// `TOLLGATE_BENCH_CLOCK=cpu` (see the observe bench).
fn timed(iters: u64, mut pass: impl FnMut()) -> Duration {
    let cpu = on_cpu();
    let start = Instant::now();
    for _ in 0..iters {
        pass();
    }
    if cpu_clock() {
        on_cpu().saturating_sub(cpu)
    } else {
        start.elapsed()
    }
}

/// The bench's capture: `FRAMES` frames from Zipf(1.1) sources over 100 k addresses.
fn capture() -> Vec<Vec<u8>> {
    workload::zipf_stream(100_000, 1.1, FRAMES, 11)
        .iter()
        .map(|&id| workload::synthetic_frame(id))
        .collect()
}

/// The policy's ([`workload::FRAME_POLICY`]) rule, its period, and its two limits' prefix lengths (IPv4, IPv6) and caps
/// (`EXACT_MULTIPLE` times the count, plus one), in the order the filter observes them:
/// the shorter prefix first.
const RULE: &str = "per-source";
const PERIOD: Duration = Duration::from_secs(10);
const LIMITS: [(u32, u32, u64); 2] = [(24, 64, 1000 * 8 + 1), (32, 128, 100 * 8 + 1)];

/// What `sketch_only_batched` counts per frame: the keys of the two limits, with their caps.
type FrameKeys = [(LimitKey, u64); 2];

/// Every frame's keys under the bench's policy, as the filter builds them.
fn frame_keys(capture: &[Vec<u8>]) -> Vec<FrameKeys> {
    let rule = RuleId::from_name(RULE);
    capture
        .iter()
        .map(|frame| {
            let source = parse_frame(frame)
                .expect("the capture's frames parse")
                .source;
            LIMITS.map(|(v4, v6, cap)| {
                let prefix = source.pick(
                    Prefix::v4(v4).expect("a v4 prefix"),
                    Prefix::v6(v6).expect("a v6 prefix"),
                );
                (LimitKey::limit(rule, PERIOD, source, prefix), cap)
            })
        })
        .collect()
}

/// A sketch of the shape the policy gives its one limit sketch (64 MiB, 10 s), from zero.
fn new_sketch() -> RateSketch {
    RateSketch::builder()
        .window(PERIOD)
        .memory_bytes(64 << 20)
        .build()
        .expect("a sketch")
}

/// The floor under [`batched`]: `keys` (two per frame) through `sketch`, `FRAME_BATCH`
/// frames at a time at one tick per batch: every key of a batch hashed and prepared, then
/// observed in order. The estimates go to `estimates`.
#[inline(never)]
fn sketch_only_batched(
    sketch: &RateSketch,
    keys: &[FrameKeys],
    now: &mut u64,
    estimates: &mut Vec<u64>,
) {
    sketch_only_in::<FRAME_BATCH>(sketch, keys, now, estimates);
}

/// [`sketch_only_batched`] in batches of `BATCH` frames.
#[inline(always)]
fn sketch_only_in<const BATCH: usize>(
    sketch: &RateSketch,
    keys: &[FrameKeys],
    now: &mut u64,
    estimates: &mut Vec<u64>,
) {
    estimates.clear();
    // One batch's prepared keys at a time, in a buffer allocated once a pass.
    let mut prepared = Vec::with_capacity(2 * BATCH);
    for batch in keys.chunks(BATCH) {
        sketch_only_batch(sketch, batch, now, &mut prepared, estimates);
    }
    black_box(&estimates);
}

/// One batch of [`sketch_only_in`]: the batch's tick worked out once, every key prepared
/// (into `prepared`), then each observed in order.
#[inline(always)]
fn sketch_only_batch(
    sketch: &RateSketch,
    batch: &[FrameKeys],
    now: &mut u64,
    prepared: &mut Vec<Prepared>,
    estimates: &mut Vec<u64>,
) {
    *now += 100 * batch.len() as u64;
    let moment = sketch.moment(Tick::from_nanos(*now));
    prepared.clear();
    prepared.extend(
        batch
            .as_flattened()
            .iter()
            .map(|(key, cap)| sketch.prepare_at(sketch.hash(key.as_bytes()), *cap, &moment)),
    );
    for key in prepared.iter() {
        estimates.push(sketch.observe_prepared(*key, 1));
    }
}

/// A [`Decision`]'s bytes, as [`sketch_only_streamed`] writes them.
type DecisionBytes = [u8; std::mem::size_of::<Decision>()];

/// [`sketch_only_batched`] with the memory streams [`batched`] has beside its sketch work:
/// before each batch, two bytes of each of its frames read (the EtherType's and the last)
/// and a decision's bytes a frame appended to `written`, held for the pass as `batched`
/// holds its decisions. What the streams cost the sketch's work, beyond their own cost.
#[inline(never)]
fn sketch_only_streamed(
    sketch: &RateSketch,
    keys: &[FrameKeys],
    frames: &[&[u8]],
    now: &mut u64,
    estimates: &mut Vec<u64>,
    written: &mut Vec<DecisionBytes>,
) {
    estimates.clear();
    written.clear();
    let mut prepared = Vec::with_capacity(2 * FRAME_BATCH);
    for (batch, chunk) in keys.chunks(FRAME_BATCH).zip(frames.chunks(FRAME_BATCH)) {
        let mut read = 0u8;
        for frame in chunk {
            read ^= frame.get(13).copied().unwrap_or(0) ^ frame.last().copied().unwrap_or(0);
            written.push([read; std::mem::size_of::<Decision>()]);
        }
        sketch_only_batch(sketch, batch, now, &mut prepared, estimates);
    }
    black_box(&estimates);
    black_box(&written);
}

/// One pass of `capture` through `filter`, one frame at a time, 100 ns of synthetic time apart
/// from `*now` on; how many frames were allowed.
#[inline(never)]
fn one_at_a_time(filter: &Filter, capture: &[Vec<u8>], now: &mut u64) -> usize {
    let mut allowed = 0;
    for frame in capture {
        // 100 ns apart: 10 Mpps of synthetic time.
        *now += 100;
        let decision = black_box(filter.decide_frame(frame, Tick::from_nanos(*now)));
        allowed += usize::from(decision.verdict == Verdict::Allow);
    }
    allowed
}

/// One pass of `frames` through `filter`, `FRAME_BATCH` at a time at one tick per batch
/// (advancing as [`one_at_a_time`] does per frame), into `decisions`.
#[inline(never)]
fn batched(filter: &Filter, frames: &[&[u8]], now: &mut u64, decisions: &mut Vec<Decision>) {
    decisions.clear();
    for chunk in frames.chunks(FRAME_BATCH) {
        *now += 100 * chunk.len() as u64;
        filter.decide_frames(chunk, Tick::from_nanos(*now), decisions);
    }
    black_box(&decisions);
}

/// `TOLLGATE_FRAMES_PASSES=N`: exactly `passes` passes of each case, then what they decided.
fn profile(passes: u64) {
    let capture = capture();
    let frames: Vec<&[u8]> = capture.iter().map(Vec::as_slice).collect();
    let single = workload::frame_filter();
    let mut now = 0;
    let mut allowed = 0;
    for _ in 0..passes {
        allowed = one_at_a_time(&single, &capture, &mut now);
    }
    let batch = workload::frame_filter();
    let mut batch_now = 0;
    let mut decisions = Vec::with_capacity(FRAMES);
    for _ in 0..passes {
        batched(&batch, &frames, &mut batch_now, &mut decisions);
    }
    let batch_allowed = decisions
        .iter()
        .filter(|d| d.verdict == Verdict::Allow)
        .count();
    let keys = frame_keys(&capture);
    let sketch = new_sketch();
    let mut sketch_now = 0;
    let mut estimates = Vec::with_capacity(2 * FRAMES);
    for _ in 0..passes {
        sketch_only_batched(&sketch, &keys, &mut sketch_now, &mut estimates);
    }
    let under = keys
        .iter()
        .flatten()
        .zip(&estimates)
        .filter(|((_, cap), estimate)| **estimate <= (cap - 1) / 8)
        .count();
    let streamed = new_sketch();
    let mut streamed_now = 0;
    let mut written = Vec::with_capacity(FRAMES);
    for _ in 0..passes {
        sketch_only_streamed(
            &streamed,
            &keys,
            &frames,
            &mut streamed_now,
            &mut estimates,
            &mut written,
        );
    }
    println!(
        "{passes} passes of {FRAMES} frames; allowed in the last: one at a time {allowed}, \
         batched {batch_allowed}; sketch only: {under} of {} estimates within their limit \
         (streamed: {} estimates, {} decisions' bytes written)",
        estimates.len(),
        estimates.len(),
        written.len()
    );
}

fn frames(c: &mut Criterion) {
    let capture = capture();
    let filter = workload::frame_filter();
    let mut group = c.benchmark_group("decide_frame");
    group.throughput(Throughput::Elements(FRAMES as u64));
    let mut now = 0u64;
    group.bench_function("parse_and_decide", |b| {
        b.iter_custom(|iters| {
            timed(iters, || {
                black_box(one_at_a_time(&filter, &capture, &mut now));
            })
        });
    });
    // The same capture through `decide_frames`, FRAME_BATCH frames at a time (parse, touch
    // every key's cells, then decide), on a filter of its own so both start from zero counts.
    let batch = workload::frame_filter();
    let frames: Vec<&[u8]> = capture.iter().map(Vec::as_slice).collect();
    let mut decisions = Vec::with_capacity(FRAMES);
    let mut batch_now = 0u64;
    group.bench_function("parse_and_decide_batched", |b| {
        b.iter_custom(|iters| {
            timed(iters, || {
                batched(&batch, &frames, &mut batch_now, &mut decisions);
            })
        });
    });
    // The same with 1,000 run-time deny entries (none holding a source of the capture, so the
    // verdicts are unchanged): what the overlay costs once it is not empty.
    let listed = workload::frame_filter();
    for i in 0..1000u32 {
        let network = std::net::Ipv4Addr::from(0xC612_0000 | (i << 2));
        let cidr = tollgate_filter::Cidr::parse(&format!("{network}/30")).expect("a network");
        let ttl = Duration::from_secs(3600);
        let _ = listed
            .lists()
            .add(
                cidr,
                tollgate_filter::ListKind::Deny,
                ttl,
                String::new(),
                Tick::ZERO,
            )
            .expect("within the cap");
    }
    let mut now = 0u64;
    group.bench_function("parse_and_decide_1000_runtime_entries", |b| {
        b.iter(|| {
            for frame in &capture {
                now += 100;
                let _ = black_box(listed.decide_frame(frame, Tick::from_nanos(now)));
            }
        });
    });
    // The floor: the same frames' keys through a sketch alone, batched as the sketch's
    // `observe_batch` does.
    let keys = frame_keys(&capture);
    let sketch = new_sketch();
    let mut estimates = Vec::with_capacity(2 * FRAMES);
    let mut sketch_now = 0u64;
    group.bench_function("sketch_only_batched", |b| {
        b.iter_custom(|iters| {
            timed(iters, || {
                sketch_only_batched(&sketch, &keys, &mut sketch_now, &mut estimates);
            })
        });
    });
    // The floor with the frames read and the decisions written beside it, as `batched` has
    // them (see `sketch_only_streamed`).
    let mut streamed_sketch = None;
    let mut written = Vec::with_capacity(FRAMES);
    group.bench_function("sketch_only_batched_streamed", |b| {
        // Built on the first call only: criterion calls this once per sample.
        let sketch = streamed_sketch.get_or_insert_with(new_sketch);
        b.iter_custom(|iters| {
            timed(iters, || {
                sketch_only_streamed(
                    sketch,
                    &keys,
                    &frames,
                    &mut sketch_now,
                    &mut estimates,
                    &mut written,
                );
            })
        });
    });
    // The floor with fewer and more frames per batch: whether the batch's size is a lever.
    group.bench_function("sketch_only_batched_8", |b| {
        b.iter_custom(|iters| {
            timed(iters, || {
                sketch_only_in::<8>(&sketch, &keys, &mut sketch_now, &mut estimates);
            })
        });
    });
    group.bench_function("sketch_only_batched_32", |b| {
        b.iter_custom(|iters| {
            timed(iters, || {
                sketch_only_in::<32>(&sketch, &keys, &mut sketch_now, &mut estimates);
            })
        });
    });
    // The filter's batches with each batch's decisions read and dropped before the next (a
    // receive loop's buffer) instead of all 2^16 kept (8 MiB written per pass): what holding
    // them costs.
    let reused_filter = workload::frame_filter();
    let mut reused_now = 0u64;
    let mut buffer = Vec::with_capacity(FRAME_BATCH);
    group.bench_function("parse_and_decide_batched_reused", |b| {
        b.iter_custom(|iters| {
            timed(iters, || {
                let mut allowed = 0usize;
                for chunk in frames.chunks(FRAME_BATCH) {
                    reused_now += 100 * chunk.len() as u64;
                    buffer.clear();
                    reused_filter.decide_frames(chunk, Tick::from_nanos(reused_now), &mut buffer);
                    allowed += buffer
                        .iter()
                        .filter(|d| d.verdict == Verdict::Allow)
                        .count();
                }
                black_box(allowed);
            })
        });
    });
    group.bench_function("parse_only", |b| {
        b.iter(|| {
            for frame in &capture {
                let _ = black_box(tollgate_filter::parse_frame(frame));
            }
        });
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(5));
    targets = frames
}
fn main() {
    if let Some(passes) = std::env::var("TOLLGATE_FRAMES_PASSES")
        .ok()
        .and_then(|passes| passes.parse().ok())
    {
        profile(passes);
        return;
    }
    // What `criterion_main!` expands to.
    benches();
    Criterion::default().configure_from_args().final_summary();
}
