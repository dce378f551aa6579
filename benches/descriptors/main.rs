//! What a rate-limit service's decision costs inside the service, gRPC excluded (issue 31):
//! Tollgate's `DescriptorPolicy` against limitador's in-memory limiter and a Redis counter per
//! descriptor as envoyproxy/ratelimit keeps one, on the same requests in the same run.
//!
//! ```text
//! cargo run --release -p tollgate-benches --features limitador --bin descriptors -- \
//!     [--keys 10000000] [--requests 2000000] [--redis-requests 50000] \
//!     [--limitador-cache 100000,1000000] [--limitador-requests 100000] [--memory 64MiB] \
//!     [--rounds 3] [--quick]
//! ```
//!
//! Without `--features limitador` (its 113 crates took 197 s of CPU to build from clean) the
//! limitador rows are left out and the tool says so; CI runs `--quick` without it.
//!
//! # Workload ([`calls`])
//! Every request has three descriptors: `api_key`; `api_key` and `path` (one of 4); `user`
//! (4 keys a user), limited to 1000, 100 and 2000 an hour. `--keys` distinct API keys (10 M):
//! first a fill, each key once (untimed by the rounds, timed on its own), so every key is in
//! each limiter; then streams of `--requests` requests, keys drawn from Zipf(1.1) (a few
//! hundred keys pass their limits) and uniformly. Each contender writes the request's strings
//! itself, as it would read them out of the gRPC message.
//!
//! # Contenders
//! - `tollgate`: `DescriptorPolicy::decide` on one reused `Request`, `--memory` of sketch
//!   (the `[rls]` default, 64 MiB), a `MonotonicClock` reading per request.
//! - `limitador`: limitador 0.14's `RateLimiter` with its in-memory storage of
//!   `--limitador-cache` counters (a moka cache; its default is 10 000), the limits on
//!   `descriptors[i].key` as limitador-server binds an Envoy request, a `Context` built per
//!   request; over the last `--limitador-requests` of the fill (the keys a cache holds after
//!   the whole fill) and the first of each stream (about 20 us of CPU a request: all 10 M of
//!   the fill would take hours on a shared machine). The keys are the same 10 M, so what its
//!   cache holds and evicts is as on the whole run once the fill's part has filled it (3
//!   counters a request).
//! - `redis`: `INCRBY` and `EXPIRE` per descriptor, one pipeline a request, against a
//!   `redis-server` started on a free loopback port (skipped, and said so, without one); over
//!   `--redis-requests` of each stream, without the fill (a round trip each: its cost does not
//!   depend on how many keys Redis holds).
//!
//! # Figures
//! Nanoseconds per request: medians of `--rounds` rounds, the contenders taking turns within
//! each round, in wall time and in this thread's time on a CPU (`/proc/thread-self/schedstat`,
//! read around each stream): on a shared machine wall time also counts the time the scheduler
//! gave to others, so the goal is judged on CPU time; Redis' cost is its round trip, wall time. Resident memory: the growth of this process's `VmRSS` over each contender's own
//! build, fill and rounds (the contenders take turns, so what one holds is not counted as
//! another's). Enforcement: every rule's window is an hour, so the run falls in one window and
//! a limiter that lets a key through more than its limit (counted exactly per key) is wrong,
//! whatever its algorithm; Tollgate doing so makes the tool exit non-zero.

#[path = "../workload.rs"]
mod workload;

mod calls;
mod peers;

use std::error::Error;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use tollgate_benches::exit::exit_code;
use tollgate_benches::table::{median, number, render};
use tollgate_benches::{cpu, machine, usage};
use tollgate_sketch::MonotonicClock;

use calls::{Allowed, Call};
use peers::{Contender, Redis, RedisServer, Tollgate};

/// The goal of issue 31, per request with three descriptors.
const GOAL_NS: f64 = 2000.0;

/// Decision cost of Tollgate's descriptor policy against limitador and Redis (issue 31).
#[derive(Debug, Parser)]
#[command(name = "descriptors")]
struct Options {
    /// A CI-sized run, seconds: 100k keys, 20k requests, 1 round.
    #[arg(long)]
    quick: bool,
    /// Distinct API keys [default: 10000000, quick 100000].
    #[arg(long)]
    keys: Option<u32>,
    /// Requests of each timed stream [default: 2000000, quick 20000].
    #[arg(long)]
    requests: Option<usize>,
    /// Requests of each stream sent to Redis [default: 50000, quick 1000].
    #[arg(long)]
    redis_requests: Option<usize>,
    /// Requests of the fill (its last) and of each stream (their first) that limitador
    /// decides [default: 100000, quick: all of them].
    #[arg(long)]
    limitador_requests: Option<usize>,
    /// limitador's cache sizes in counters, comma-separated [default: 100000,1000000, quick
    /// 1000].
    #[arg(long, value_delimiter = ',')]
    limitador_cache: Vec<u64>,
    /// Tollgate's sketch memory [default: 64MiB, the `[rls]` default].
    #[arg(long, value_parser = tollgate_filter::parse_size)]
    memory: Option<usize>,
    /// Rounds; the tables show medians [default: 3, quick 1].
    #[arg(long)]
    rounds: Option<usize>,
}

/// One contender and what was measured of it.
struct Entry<'a> {
    contender: Box<dyn Contender + 'a>,
    /// Its own memory setting, for the table.
    memory: String,
    /// Requests of each stream it decides.
    requests: usize,
    /// Requests of the fill it decides (none for Redis).
    fill_requests: usize,
    fill: Option<Timing>,
    zipf: Vec<Timing>,
    uniform: Vec<Timing>,
    rss_growth: i64,
    decided: u64,
    allowed: Allowed,
    passed: u64,
    ours: bool,
}

fn main() -> ExitCode {
    exit_code(run(&Options::parse()))
}

fn rss() -> i64 {
    usage::rss_bytes(std::process::id()).map_or(0, |b| b as i64)
}

fn run(options: &Options) -> Result<(), Box<dyn Error>> {
    let quick = options.quick;
    let keys = options
        .keys
        .unwrap_or(if quick { 100_000 } else { 10_000_000 });
    let requests = options
        .requests
        .unwrap_or(if quick { 20_000 } else { 2_000_000 });
    let redis_requests = options
        .redis_requests
        .unwrap_or(if quick { 1000 } else { 50_000 })
        .min(requests);
    let memory = options.memory.unwrap_or(64 << 20);
    let rounds = options.rounds.unwrap_or(if quick { 1 } else { 3 }).max(1);
    let features = if cfg!(feature = "limitador") {
        " --features limitador"
    } else {
        ""
    };
    println!(
        "command: cargo run --release -p tollgate-benches{features} --bin descriptors -- {}",
        std::env::args().skip(1).collect::<Vec<_>>().join(" ")
    );
    println!("machine: {}", machine::describe());
    println!(
        "{keys} API keys, 3 descriptors a request; streams of {requests} requests (Redis: \
         {redis_requests}); {rounds} round(s)"
    );

    let fill = calls::fill(keys);
    let zipf = calls::zipf(keys, requests, 0x31);
    let uniform = calls::uniform(keys, requests, 0x32);
    let clock = MonotonicClock::new();

    let mut entries: Vec<Entry<'_>> = Vec::new();
    let before = rss();
    let tollgate = Tollgate::new(memory, clock)?;
    let held = tollgate.memory_bytes();
    entries.push(Entry::new(
        Box::new(tollgate),
        format!("{:.0} MiB sketch", held as f64 / f64::from(1 << 20)),
        (requests, fill.len()),
        keys,
        true,
    ));
    entries[0].rss_growth = rss() - before;
    let limitador_requests =
        options
            .limitador_requests
            .unwrap_or(if quick { usize::MAX } else { 100_000 });
    let limitador = (
        limitador_requests.min(requests),
        limitador_requests.min(fill.len()),
    );
    add_limitador(&mut entries, options, quick, limitador, keys)?;
    let server = RedisServer::start()?;
    match &server {
        Some(server) => entries.push(Entry::new(
            Box::new(Redis::connect(server)?),
            "grows in redis-server".into(),
            (redis_requests, 0),
            keys,
            false,
        )),
        None => {
            println!("redis: skipped, no redis-server on the PATH (apt-get install redis-server)")
        }
    }

    let mut verdicts = vec![false; fill.len().max(requests)];
    for entry in entries.iter_mut().filter(|e| e.fill_requests > 0) {
        // The fill's last keys: what a cache holds after the whole fill.
        let timing = entry.decide(&fill[fill.len() - entry.fill_requests..], &mut verdicts);
        entry.fill = Some(timing);
        eprintln!("fill: {}: {timing}", entry.contender.name());
    }
    for round in 0..rounds {
        for (stream, name) in [(&zipf, "zipf"), (&uniform, "uniform")] {
            for entry in &mut entries {
                let n = entry.requests;
                let timing = entry.decide(&stream[..n], &mut verdicts);
                if name == "zipf" {
                    entry.zipf.push(timing);
                } else {
                    entry.uniform.push(timing);
                }
                eprintln!(
                    "round {}: {name}: {}: {timing}",
                    round + 1,
                    entry.contender.name()
                );
            }
        }
    }
    report(&entries)
}

#[cfg(feature = "limitador")]
fn add_limitador(
    entries: &mut Vec<Entry<'_>>,
    options: &Options,
    quick: bool,
    (requests, fill_requests): (usize, usize),
    keys: u32,
) -> Result<(), Box<dyn Error>> {
    println!(
        "limitador: the first {requests} requests of each stream, the last {fill_requests} of the fill"
    );
    let caches = if options.limitador_cache.is_empty() {
        if quick {
            vec![1000]
        } else {
            vec![100_000, 1_000_000]
        }
    } else {
        options.limitador_cache.clone()
    };
    for cache in caches {
        let before = rss();
        let limitador = peers::Limitador::new(cache)?;
        entries.push(Entry::new(
            Box::new(limitador),
            format!("cache of {cache} counters"),
            (requests, fill_requests),
            keys,
            false,
        ));
        if let Some(entry) = entries.last_mut() {
            entry.rss_growth = rss() - before;
        }
    }
    Ok(())
}

#[cfg(not(feature = "limitador"))]
fn add_limitador(
    _entries: &mut Vec<Entry<'_>>,
    _options: &Options,
    _quick: bool,
    _requests: (usize, usize),
    _keys: u32,
) -> Result<(), Box<dyn Error>> {
    println!("limitador: left out, built without `--features limitador`");
    Ok(())
}

impl<'a> Entry<'a> {
    fn new(
        contender: Box<dyn Contender + 'a>,
        memory: String,
        (requests, fill_requests): (usize, usize),
        keys: u32,
        ours: bool,
    ) -> Entry<'a> {
        Entry {
            contender,
            memory,
            requests,
            fill_requests,
            fill: None,
            zipf: Vec::new(),
            uniform: Vec::new(),
            rss_growth: 0,
            decided: 0,
            allowed: Allowed::new(keys),
            passed: 0,
            ours,
        }
    }

    /// Decides `calls` in turn and returns the time per request; then (untimed) counts what
    /// it let through, and the growth of resident memory over the timed part.
    fn decide(&mut self, calls: &[Call], verdicts: &mut [bool]) -> Timing {
        let before = rss();
        let cpu_before = cpu::thread_time();
        let started = Instant::now();
        for (call, verdict) in calls.iter().zip(verdicts.iter_mut()) {
            *verdict = self.contender.decide(*call);
        }
        let elapsed = started.elapsed();
        let cpu = cpu_before
            .zip(cpu::thread_time())
            .map(|(at, now)| now.saturating_sub(at));
        self.rss_growth += rss() - before;
        for (call, &passed) in calls.iter().zip(verdicts.iter()) {
            if passed {
                self.allowed.add(*call);
                self.passed += 1;
            }
        }
        self.decided += calls.len() as u64;
        let n = calls.len().max(1) as f64;
        Timing {
            wall: elapsed.as_nanos() as f64 / n,
            cpu: cpu.map(|cpu| cpu.as_nanos() as f64 / n),
        }
    }
}

/// Nanoseconds per request of one stream.
#[derive(Clone, Copy, Debug)]
struct Timing {
    wall: f64,
    /// On this thread's CPU time, where `/proc/thread-self/schedstat` could be read.
    cpu: Option<f64>,
}

impl std::fmt::Display for Timing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.0} ns/request wall", self.wall)?;
        match self.cpu {
            Some(cpu) => write!(f, ", {cpu:.0} on CPU"),
            None => Ok(()),
        }
    }
}

/// The medians of the wall and CPU figures of `timings`, as "wall / cpu".
fn medians(timings: &[Timing]) -> (Option<f64>, Option<f64>) {
    let wall: Vec<f64> = timings.iter().map(|t| t.wall).collect();
    let cpu: Vec<f64> = timings.iter().filter_map(|t| t.cpu).collect();
    (median(&wall), median(&cpu))
}

/// Prints the tables; an error if Tollgate let a key through more than its limit.
fn report(entries: &[Entry<'_>]) -> Result<(), Box<dyn Error>> {
    let figure = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), number);
    let pair =
        |(wall, cpu): (Option<f64>, Option<f64>)| format!("{} / {}", figure(wall), figure(cpu));
    let mut time = vec![
        [
            "contender",
            "memory",
            "fill ns/req",
            "Zipf ns/req",
            "uniform ns/req",
            "RSS growth MiB",
        ]
        .map(String::from)
        .to_vec(),
    ];
    let mut enforcement = vec![
        [
            "contender",
            "decided",
            "let through",
            "let through past a limit",
            "keys let past their limit",
        ]
        .map(String::from)
        .to_vec(),
    ];
    let mut broken = Vec::new();
    let mut goal = None;
    for entry in entries {
        let name = entry.contender.name();
        let zipf = medians(&entry.zipf);
        let uniform = medians(&entry.uniform);
        let fill = entry
            .fill
            .as_ref()
            .map_or((None, None), |t| (Some(t.wall), t.cpu));
        time.push(vec![
            name.clone(),
            entry.memory.clone(),
            pair(fill),
            pair(zipf),
            pair(uniform),
            number(entry.rss_growth as f64 / f64::from(1 << 20)),
        ]);
        let excess = entry.allowed.excess();
        enforcement.push(vec![
            name.clone(),
            entry.decided.to_string(),
            entry.passed.to_string(),
            excess.requests.to_string(),
            excess.keys.to_string(),
        ]);
        if entry.ours {
            if excess.requests > 0 {
                broken.push(format!(
                    "{name} let {} requests through past their key's limit",
                    excess.requests
                ));
            }
            goal = zipf.1.zip(uniform.1).map(|(z, u)| z.max(u));
        }
    }
    println!("\ndecision cost, ns per request (wall / on CPU, medians of rounds), gRPC excluded");
    print!("{}", render(&time));
    if let Some(worst) = goal {
        println!(
            "goal: tollgate <= {GOAL_NS:.0} ns per request on CPU: {} ({worst:.0} ns, the slower stream)",
            if worst <= GOAL_NS { "met" } else { "MISSED" }
        );
    }
    println!("\nenforcement over the whole run (one window): requests let through past a limit");
    print!("{}", render(&enforcement));
    match broken.as_slice() {
        [] => Ok(()),
        broken => Err(broken.join("; ").into()),
    }
}
