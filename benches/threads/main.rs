//! Many threads on one limiter: how Tollgate's sketch (plain `observe`, `observe_capped`, the
//! batch API) and pingora-limits' `Rate` at the same memory scale with threads, on a stream
//! whose hot keys every thread meets and on the same stream with the keys made disjoint per
//! thread; and a shared `Filter` deciding frames (issue 29).
//!
//! ```text
//! cargo run --release -p tollgate-benches --bin threads -- [--threads 1,2,4,8,16] \
//!     [--events N] [--memory 2MiB,32MiB] [--rounds 3] [--reserve-shift 8,none] \
//!     [--workloads shared,disjoint,frames,floor] [--csv FILE] [--quick]
//! ```
//!
//! # Workloads (built once, before anything is timed)
//! - Keys: a Zipf(1.1) stream of `--events` events (4 M) over 10 M distinct 16-byte IPv6-like
//!   keys, cut into one contiguous slice per thread. "Shared hot keys": every thread sees the
//!   same hot keys. "Disjoint keys": each key of a thread's slice moved to the thread's own
//!   /48 (the thread index in the key), so the shape is the same and no key is shared.
//! - Frames: a capture of `--frames` synthetic frames (2 M) from Zipf(1.1) sources over 4 M
//!   ids (`workload::synthetic_frame`), one slice per thread, through one `Filter` under the
//!   frames bench's policy (`workload::FRAME_POLICY`: two limits a frame, 64 MiB), decided
//!   `FRAME_BATCH` frames at a time: `filter` as `Filter::new` builds it (its limits reserve),
//!   and with `--reserve-shift` holding `none`, `filter-off` (`Filter::without_reservations`,
//!   the same policy with no reservations) in the same run. The filter's shift is its own
//!   (the sketch's default); any other shift given runs the one `filter`.
//!
//! # Contenders, per memory size (`--memory`), in the same process and run
//! `tollgate`: `observe(key, 1, now)`; `capped`: `observe_capped(key, 1, 101, now)` (a limit of
//! 100, plus one); `batch`: `observe_batch` of 16 keys, capped the same; these three once per
//! `--reserve-shift` (the sketch's `Builder::reserve_shift`, default its default 8; `none` for
//! reservations off, whose columns end in `-off`); `pingora`:
//! pingora-limits 0.9.1 `Rate` at the same total memory (`sizes::pingora`), `observe` then
//! `rate_with` the proportional estimate. Tollgate gets one `MonotonicClock` reading
//! (`Instant`-derived) per event, the batch one per group of 16 (its API takes one tick);
//! pingora reads `Instant` itself.
//!
//! # Timing
//! Each limiter is built once per workload and memory size and warmed by an untimed pass over
//! the first part of the stream (its pages faulted in), then kept across thread counts and
//! rounds. A run starts its threads together on a barrier and is timed from the first to
//! leave it to the last to finish. Every round runs each contender once, in turn (rounds
//! interleave the contenders, so a noisy moment of a shared machine falls on all of them);
//! the tables show medians of `--rounds` rounds, each contender's scaling over its own 1-thread
//! median, and Tollgate's ratio to pingora.
//!
//! `--workloads floor` adds a table of the uncapped observe's parts (see `floor.rs`: the same
//! call without its clock reading, its reads alone, the hash, the clock) against pingora, in
//! nanoseconds on a CPU per event (`/proc/thread-self/schedstat`), which a machine shared with
//! other work does not inflate.
//!
//! Built with `RUSTFLAGS="--cfg tollgate_contention"`, where the sketch counts its
//! compare-and-swaps (`tollgate_sketch::contention`), the tables add Tollgate's failed swaps and
//! conservative updates (writes of a key's shared cells) per event.

#[path = "../workload.rs"]
mod workload;

mod floor;
mod peers;
mod streams;
mod table;

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use tollgate_sketch::MonotonicClock;

use peers::{Contender, Frames};
use streams::{Capture, Sharing, Stream};
use table::Table;

/// Distinct keys of the key stream.
const DISTINCT: u64 = 10_000_000;
/// Distinct sources of the frame capture.
const SOURCES: u64 = 4_000_000;
/// Events of the untimed warm-up pass at most.
const WARM_UP: usize = 1 << 18;

/// Many threads sharing one limiter, Tollgate against pingora-limits (issue 29).
#[derive(Debug, Parser)]
#[command(name = "threads")]
struct Options {
    /// A CI-sized run, a few seconds: 1 and 2 threads, 2 MiB, 1 round, 1/10 of the events.
    #[arg(long)]
    quick: bool,
    /// Thread counts, comma-separated [default: 1, 2, 4, ... up to the machine's CPUs].
    #[arg(long, value_delimiter = ',')]
    threads: Vec<usize>,
    /// Events of the key stream [default: 4000000, quick 400000].
    #[arg(long)]
    events: Option<usize>,
    /// Frames of the capture [default: 2000000, quick 200000].
    #[arg(long)]
    frames: Option<usize>,
    /// Total memory of each limiter, comma-separated [default: 2MiB,32MiB, quick 2MiB].
    #[arg(long, value_delimiter = ',', value_parser = tollgate_filter::parse_size)]
    memory: Vec<usize>,
    /// Rounds; the tables show medians [default: 3, quick 1].
    #[arg(long)]
    rounds: Option<usize>,
    /// The sketches' reserve shifts, comma-separated, `none` for no reservations; Tollgate's
    /// contenders are run once per shift [default: 8, the sketch's default].
    #[arg(long, value_delimiter = ',', value_parser = reserve_shift)]
    reserve_shift: Vec<Reserve>,
    /// The workloads to run, comma-separated: shared, disjoint, frames, and floor (the uncapped
    /// observe's parts on the shared stream, on CPU time; only when named) [default: the first
    /// three].
    #[arg(long, value_delimiter = ',', value_parser = ["shared", "disjoint", "frames", "floor"])]
    workloads: Vec<String>,
    /// Also write the tables' rows to this CSV file.
    #[arg(long)]
    csv: Option<PathBuf>,
}

/// A `--reserve-shift` value: a shift, or `None` for no reservations.
type Reserve = Option<u32>;

/// Reads a `--reserve-shift` value: `none` or a shift.
fn reserve_shift(text: &str) -> Result<Reserve, String> {
    if text == "none" {
        return Ok(None);
    }
    text.parse::<u32>()
        .map(Some)
        .map_err(|error| format!("{text:?}: a shift or none ({error})"))
}

/// 1, 2, 4, ... up to `cpus`, and `cpus` itself.
fn default_threads(cpus: usize) -> Vec<usize> {
    let mut threads: Vec<usize> = std::iter::successors(Some(1), |n| Some(n * 2))
        .take_while(|&n| n <= cpus)
        .collect();
    if threads.last() != Some(&cpus) {
        threads.push(cpus);
    }
    threads
}

/// A size as the tables show it: "2MiB".
fn size(bytes: usize) -> String {
    match bytes {
        b if b % (1 << 20) == 0 => format!("{}MiB", b >> 20),
        b if b % (1 << 10) == 0 => format!("{}KiB", b >> 10),
        b => format!("{b}B"),
    }
}

/// Runs every contender on `slices`, `rounds` times in turn, into `table`.
fn rounds<T: Sync>(
    table: &mut Table,
    memory: &str,
    contenders: &[Box<dyn Contender<T> + '_>],
    slices: &[&[T]],
    rounds: usize,
    clock: &MonotonicClock,
) {
    for _ in 0..rounds {
        for contender in contenders {
            let measured = peers::run(contender.as_ref(), slices, clock);
            table.record(
                memory,
                slices.len(),
                contender.name(),
                contender.ours(),
                &measured,
            );
        }
    }
}

/// The frame path: threads sharing one `Filter`, into `tables`; one filter per kind of
/// `reserves` (`filter` where any shift is asked for, `filter-off` for `none`: the same
/// policy built by `Filter::without_reservations`), in the same run.
fn frame_path(
    capture: &Capture,
    threads: &[usize],
    reserves: &[Reserve],
    rounds_of: usize,
    clock: &MonotonicClock,
    tables: &mut Vec<Table>,
) {
    let all = capture.frames();
    let mut filter: Vec<Box<dyn Contender<&[u8]>>> = Vec::new();
    if reserves
        .iter()
        .any(|reserve| reserve.is_some_and(|shift| shift != 0))
    {
        filter.push(Box::new(Frames {
            name: "filter",
            filter: workload::frame_filter(),
        }));
    }
    if reserves
        .iter()
        .any(|reserve| matches!(reserve, None | Some(0)))
    {
        filter.push(Box::new(Frames {
            name: "filter-off",
            filter: workload::frame_filter_without_reservations(),
        }));
    }
    for contender in &filter {
        contender.pass(&all[..all.len().min(WARM_UP)], clock);
    }
    let mut table = Table::new("frames: M frames/s through one shared Filter".to_owned());
    for &n in threads {
        let slices: Vec<&[&[u8]]> = streams::slices(&all, n).collect();
        rounds(&mut table, "64MiB", &filter, &slices, rounds_of, clock);
    }
    println!("{}", table.text());
    tables.push(table);
}

fn main() {
    let options = Options::parse();
    let began = Instant::now();
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let threads = match (options.threads.is_empty(), options.quick) {
        (false, _) => options.threads.clone(),
        (true, true) => vec![1, 2],
        (true, false) => default_threads(cpus),
    };
    assert!(!threads.contains(&0), "a thread count is at least 1");
    let events = options
        .events
        .unwrap_or(if options.quick { 400_000 } else { 4_000_000 });
    let frames = options
        .frames
        .unwrap_or(if options.quick { 200_000 } else { 2_000_000 });
    let memory = match (options.memory.is_empty(), options.quick) {
        (false, _) => options.memory.clone(),
        (true, true) => vec![2 << 20],
        (true, false) => vec![2 << 20, 32 << 20],
    };
    let rounds_of = options.rounds.unwrap_or(if options.quick { 1 } else { 3 });
    let reserves = if options.reserve_shift.is_empty() {
        vec![Some(tollgate_sketch::Builder::DEFAULT_RESERVE_SHIFT)]
    } else {
        options.reserve_shift.clone()
    };
    let named = |workload: &str| options.workloads.iter().any(|w| w == workload);
    let runs = |workload: &str| options.workloads.is_empty() || named(workload);
    let clock = MonotonicClock::new();

    let stream = Stream::zipf(DISTINCT, events);
    let capture = Capture::zipf(SOURCES, frames);
    println!(
        "threads {threads:?} on {cpus} CPUs; {events} events of Zipf({}) over {DISTINCT} keys, \
         {frames} frames over {SOURCES} sources; medians of {rounds_of} round(s); built in {:.1} s\n",
        streams::EXPONENT,
        began.elapsed().as_secs_f64()
    );

    let mut tables = Vec::new();
    for sharing in [Sharing::Shared, Sharing::Disjoint] {
        if !runs(sharing.key()) {
            continue;
        }
        let mut table = Table::new(format!(
            "{}: M events/s, all threads together",
            sharing.name()
        ));
        for &budget in &memory {
            let contenders = peers::key_contenders(budget, &reserves);
            let warm = stream.keys(1, sharing);
            let warm = &warm[0][..warm[0].len().min(WARM_UP)];
            for contender in &contenders {
                contender.pass(warm, &clock);
            }
            for &n in &threads {
                let keys = stream.keys(n, sharing);
                let slices: Vec<&[streams::Key]> = keys.iter().map(Vec::as_slice).collect();
                rounds(
                    &mut table,
                    &size(budget),
                    &contenders,
                    &slices,
                    rounds_of,
                    &clock,
                );
            }
        }
        println!("{}", table.text());
        tables.push(table);
    }

    if named("floor") {
        let mut table = Table::on_cpu(
            "floor: ns on a CPU per event (all threads together), the shared stream".to_owned(),
        );
        let whole = stream.keys(1, Sharing::Shared);
        for &budget in &memory {
            let contenders = floor::contenders(budget, &whole[0], &clock);
            let warm = &whole[0][..whole[0].len().min(WARM_UP)];
            for contender in &contenders {
                contender.pass(warm, &clock);
            }
            for &n in &threads {
                let keys = stream.keys(n, Sharing::Shared);
                let slices: Vec<&[streams::Key]> = keys.iter().map(Vec::as_slice).collect();
                rounds(
                    &mut table,
                    &size(budget),
                    &contenders,
                    &slices,
                    rounds_of,
                    &clock,
                );
            }
        }
        println!("{}", table.text());
        tables.push(table);
    }

    if runs("frames") {
        frame_path(
            &capture,
            &threads,
            &reserves,
            rounds_of,
            &clock,
            &mut tables,
        );
    }

    if let Some(path) = &options.csv {
        let csv: String = tables
            .iter()
            .map(|table| table.csv(true))
            .collect::<Vec<_>>()
            .join("\n");
        if let Err(error) = std::fs::write(path, csv) {
            eprintln!("cannot write {}: {error}", path.display());
            std::process::exit(1);
        }
    }
    println!("took {:.1} s", began.elapsed().as_secs_f64());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_counts_double_up_to_the_cpus() {
        assert_eq!(default_threads(1), [1]);
        assert_eq!(default_threads(2), [1, 2]);
        assert_eq!(default_threads(6), [1, 2, 4, 6]);
        assert_eq!(default_threads(16), [1, 2, 4, 8, 16]);
    }

    #[test]
    fn sizes_read_back() {
        assert_eq!(size(2 << 20), "2MiB");
        assert_eq!(size(512 << 10), "512KiB");
    }
}
