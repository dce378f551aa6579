//! (e) Descriptor limits at 10M API keys in the rate-limit service's default memory (issue
//! 31): no request under its limits refused, and no key let through more than its limit in
//! any sliding window.
//!
//! The policy is Tollgate's `DescriptorPolicy` over envoyproxy/ratelimit rules ([`CONFIG`]):
//! three descriptors a request, `api_key` (600 a minute), `api_key` and `path` (60 a minute)
//! and `user` (1200 a minute), in 64 MiB (the `[rls]` default), deciding on a simulated clock
//! over three one-minute windows. The traffic, merged in time order:
//!
//! - **cold**: 10M distinct API keys, one request each, spread evenly over the three windows
//!   (4 keys a user): every one of them is far under every limit, so any refusal is false.
//! - **steady**: 1000 keys, each on one path at 58 requests a minute (the path limit less 2),
//!   evenly spaced: at their limit's edge.
//! - **hot**: 100 keys at 3, 4, 8 or 20 times the path limit, the 3 and 8 on one path, the 4
//!   and 20 across the four (the 4 at the path limit, the 20 past the key's limit too).
//!
//! `--quick` divides the cold and steady keys by 100 and keeps 8 hot ones.
//!
//! The steady and hot keys (and their users) are checked against two exact sliding-window
//! counters each ([`Exact`], the same interpolation, rounded up): one of every request (the
//! truth the policy decides on: over-limit requests count, as the reference's `INCRBY` counts
//! them) and one of the requests let through. Scored:
//! - **false refusals**: a request refused although every descriptor's exact count including
//!   it is within its limit (a cold request refused at all). Those within the sketch's stated
//!   overcount bound of the limit (`DescriptorPolicy::overcount_bound`) are counted apart.
//! - **let through past a limit**: a request let through while the exact sliding count of
//!   what its key was let through, including it, passes the key's limit.
//!
//! Both must be 0: the tool exits non-zero otherwise.

use std::error::Error;
use std::time::{Duration, Instant};

use tollgate_filter::{Code, Descriptor, DescriptorConfig, DescriptorPolicy, Request, Unit};
use tollgate_sketch::Tick;

use crate::cli::{Scale, Workload};
use crate::limiter::{Limiter, spread};
use crate::oracle::Exact;
use crate::peer::MIB;
use crate::report::{Report, Table, mib, progress, status};
use crate::workload::scramble;

/// The rules, in envoyproxy/ratelimit's format.
const CONFIG: &str = "\
domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 600}
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 60}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1200}
";
/// The limits of the three descriptors, in the request's order.
const LIMITS: [u64; 3] = [600, 60, 1200];
const WINDOW: Duration = Duration::from_secs(60);
const WINDOWS: u64 = 3;
/// The `[rls]` default memory.
const MEMORY: usize = 64 * MIB;
const COLD: usize = 10_000_000;
const STEADY: usize = 1000;
const HOT: usize = 100;
/// Requests a minute of a steady key: its path limit less 2.
const STEADY_RATE: u64 = 58;
/// Hot keys' rates, as multiples of the path limit, taken in turn.
const HOT_TIMES: [u64; 4] = [3, 4, 8, 20];
const PATHS: [&str; 4] = ["/v1/orders", "/v1/users", "/v1/search", "/v1/items"];

/// The traffic a request belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Cold,
    Steady,
    Hot,
}

/// One request: when, which key on which path, which user.
#[derive(Clone, Copy, Debug)]
struct Call {
    at: u64,
    key: u64,
    path: u8,
    user: u64,
    kind: Kind,
}

/// What one group of requests got.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    requests: u64,
    refused: u64,
    /// Refused with every descriptor within its limit.
    false_refusals: u64,
    /// Of those, within the stated overcount bound of a limit.
    within_bound: u64,
    /// Let through while what its key was let through passes a limit.
    past_limit: u64,
}

/// The requests, in time order. Cold key ids are `0..cold`, the others follow; cold users are
/// `key / 4`, the others have a user of their own.
fn calls(cold: usize, steady: usize, hot: usize) -> Vec<Call> {
    let window = WINDOW.as_nanos() as u64;
    let span = window * WINDOWS;
    let mut calls: Vec<Call> = (0..cold)
        .map(|i| Call {
            at: spread(0, span, i, cold),
            key: i as u64,
            path: (i % PATHS.len()) as u8,
            user: i as u64 / 4,
            kind: Kind::Cold,
        })
        .collect();
    let first = cold as u64;
    let own_user = |key: u64| (1 << 40) + key;
    for s in 0..steady as u64 {
        let key = first + s;
        let n = (STEADY_RATE * WINDOWS) as usize;
        // Each steady key starts at its own offset, so they do not all arrive at once.
        let offset = scramble(key) % (window / STEADY_RATE);
        calls.extend((0..n).map(|i| Call {
            at: offset + spread(0, span - offset, i, n),
            key,
            path: 0,
            user: own_user(key),
            kind: Kind::Steady,
        }));
    }
    for h in 0..hot as u64 {
        let key = first + steady as u64 + h;
        let times = HOT_TIMES[h as usize % HOT_TIMES.len()];
        let n = (times * LIMITS[1] * WINDOWS) as usize;
        let offset = scramble(key) % (window / (times * LIMITS[1]));
        // Half the hot keys use one path, half spread over the four.
        let paths = if h % 2 == 0 { 1 } else { PATHS.len() };
        calls.extend((0..n).map(|i| Call {
            at: offset + spread(0, span - offset, i, n),
            key,
            path: (i % paths) as u8,
            user: own_user(key),
            kind: Kind::Hot,
        }));
    }
    calls.sort_by_key(|c| c.at);
    calls
}

/// The oracle's key of descriptor `d` of `call`.
fn oracle_key(call: &Call, d: usize) -> u64 {
    match d {
        0 => call.key << 3,
        1 => (call.key << 3) | (1 + u64::from(call.path)),
        _ => (call.user << 3) | 7,
    }
}

/// Writes `call`'s values into the reused `request`.
fn write(request: &mut Request, call: &Call) {
    use std::fmt::Write as _;
    let key = format!("{:016x}", scramble(call.key));
    let [by_key, by_path, by_user] = &mut request.descriptors[..] else {
        unreachable!("three descriptors");
    };
    by_key.entries[0].value.clone_from(&key);
    by_path.entries[0].value = key;
    by_path.entries[1].value = PATHS[usize::from(call.path)].to_owned();
    let user = &mut by_user.entries[0].value;
    user.clear();
    let _ = write!(user, "u{:x}", scramble(call.user));
}

pub(crate) fn run(scale: Scale, report: &mut Report) -> Result<(), Box<dyn Error>> {
    let cold = scale.of(COLD);
    let steady = scale.of(STEADY);
    let hot = scale.of(HOT).max(8);
    let config = DescriptorConfig::parse(&[("api.yaml", CONFIG)])?;
    let policy = DescriptorPolicy::new(&config, MEMORY, None)?;
    let calls = calls(cold, steady, hot);
    let window = WINDOW.as_nanos() as u64;
    let mut request = Request {
        domain: "api".into(),
        descriptors: vec![
            Descriptor::of(&[("api_key", "")]),
            Descriptor::of(&[("api_key", ""), ("path", "")]),
            Descriptor::of(&[("user", "")]),
        ],
        hits_addend: 0,
    };
    let mut every = Exact::sliding(window);
    let mut passed = Exact::sliding(window);
    let mut tallies = [Tally::default(); 3];
    let mut bound_max = 0;
    let started = Instant::now();
    for call in &calls {
        write(&mut request, call);
        let now = Tick::from_nanos(call.at);
        let response = policy.decide(&request, now)?;
        let refused = response.code == Code::OverLimit;
        let tally = &mut tallies[call.kind as usize];
        tally.requests += 1;
        tally.refused += u64::from(refused);
        if call.kind == Kind::Cold {
            // Each key once, 4 a user: far under every limit.
            tally.false_refusals += u64::from(refused);
            continue;
        }
        let truth: Vec<u64> = (0..3)
            .map(|d| every.observe(oracle_key(call, d), call.at))
            .collect();
        if refused && truth.iter().zip(LIMITS).all(|(&t, l)| t <= l) {
            tally.false_refusals += 1;
            let bound = policy.overcount_bound(Unit::Minute, now);
            bound_max = bound_max.max(bound);
            if truth.iter().zip(LIMITS).any(|(&t, l)| t + bound > l) {
                tally.within_bound += 1;
            }
        }
        if !refused {
            let through: Vec<u64> = (0..3)
                .map(|d| passed.observe(oracle_key(call, d), call.at))
                .collect();
            if through.iter().zip(LIMITS).any(|(&t, l)| t > l) {
                tally.past_limit += 1;
            }
        }
    }
    let elapsed = started.elapsed();
    progress(
        Workload::Descriptors,
        &format!("{} requests", calls.len()),
        started,
    );
    let bound_end = policy.overcount_bound(Unit::Minute, Tick::from_nanos(WINDOWS * window));

    let mut table = Table::new(
        Workload::Descriptors,
        format!(
            "{cold} API keys and 3 descriptors a request into {} (the [rls] default): false \
             refusals and requests let through past a limit",
            mib(policy.memory_bytes())
        ),
        &[
            "traffic",
            "requests",
            "refused",
            "false refusals",
            "within bound",
            "let through past a limit",
        ],
    );
    let mut total = Tally::default();
    for (name, tally) in [
        (format!("cold: {cold} keys, 1 request each"), tallies[0]),
        (
            format!("steady: {steady} keys at {STEADY_RATE}/min (limit 60)"),
            tallies[1],
        ),
        (
            format!("hot: {hot} keys at 3-20x the path limit"),
            tallies[2],
        ),
    ] {
        total.requests += tally.requests;
        total.refused += tally.refused;
        total.false_refusals += tally.false_refusals;
        total.within_bound += tally.within_bound;
        total.past_limit += tally.past_limit;
        table.row(vec![
            name,
            tally.requests.to_string(),
            tally.refused.to_string(),
            tally.false_refusals.to_string(),
            tally.within_bound.to_string(),
            tally.past_limit.to_string(),
        ]);
    }
    table.row(vec![
        "all".into(),
        total.requests.to_string(),
        total.refused.to_string(),
        total.false_refusals.to_string(),
        total.within_bound.to_string(),
        total.past_limit.to_string(),
    ]);
    table.note(format!(
        "limits a minute: api_key 600, api_key+path 60, user 1200, sliding, over 3 windows; \
         stated overcount bound of the minute sketch: {bound_end} at the end (at most {bound_max} \
         at a false refusal); {:.0} ns per decide",
        elapsed.as_nanos() as f64 / calls.len().max(1) as f64
    ));
    table.note(format!(
        "goal: no request under its limits refused: {} ({}); no key let through past its limit \
         in a sliding window: {} ({})",
        status(total.false_refusals == 0),
        total.false_refusals,
        status(total.past_limit == 0),
        total.past_limit
    ));
    report.require(
        total.false_refusals == 0,
        format!(
            "(e) {} requests refused under their limits ({} within the stated bound)",
            total.false_refusals, total.within_bound
        ),
    );
    report.require(
        total.past_limit == 0,
        format!(
            "(e) {} requests let through past their key's limit",
            total.past_limit
        ),
    );
    report.add(table);
    Ok(())
}
