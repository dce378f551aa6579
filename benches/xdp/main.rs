//! One spoofed flood offered to the three ways Tollgate has of refusing it, in one run: the XDP
//! program (`proxy/bpf/`) attached to a veth, the nftables path (the proxy's `[kernel]` table,
//! its set holding the offender as the updater writes it) and the user-space frame path
//! (`tollgate_filter::Filter::decide_frames`, batched). For each: frames handled per second
//! of CPU, CPU per frame, and how late the first drop comes after the aggregate crosses its
//! limit.
//!
//! ```text
//! cargo run --release -p tollgate-benches --bin xdp -- [--quick] [--frames N] [--rounds N]
//! ```
//!
//! Floods (`flood.rs`): IPv6 datagrams from a new host of one /64 each frame (a /64 rotation:
//! the /64 crosses its limit, no /128 does), and IPv4 datagrams from random sources over
//! 11.0.0.0/8 (nothing to contain: the cost of counting cold keys). One policy for all paths:
//! 100 a minute per address, 1,000 a minute per IPv4 /24 or IPv6 /64, 8 MiB of sketch.
//!
//! - XDP: the program built from this checkout's `proxy/bpf/tollgate.bpf.c` with clang,
//!   attached natively to tg0 of a veth pair; a sender program run by `BPF_PROG_TEST_RUN` in
//!   live-frames mode (batches of 64) writes each frame's source and redirects it out of tg1.
//!   The program's per-CPU counters say what it counted; the /64 flood's first drop is
//!   exact: with a fresh sketch, `passed` is the number of frames let through.
//! - nftables: the same sender, a pass-only XDP program on tg0 (a veth takes redirected
//!   frames only with one), then the stack: the proxy's table (`tollgate::kernel`, one UDP
//!   listener on port 9) with the /64 in its set, loaded by the same transaction the updater
//!   sends (timed: until it commits, the kernel passes the flood to the proxy). Frames
//!   counted by the table's rule counters and `/proc/net/snmp{,6}`.
//! - User space: the same frames built in memory beforehand, decided `FRAME_BATCH` at a time
//!   (no receive cost: a floor for the proxy's own path), synthetic time at 1 M frames/s.
//!
//! The process runs pinned to CPU 0 (`taskset -c 0`), so each path has one vCPU. CPU per
//! frame is this thread's time on the CPU (`/proc/thread-self/schedstat`) plus, for the kernel
//! paths, `ksoftirqd/0`'s (the veth's NAPI poll runs in softirq, on this thread when the
//! sender's batch ends or in ksoftirqd; this kernel has no IRQ time accounting, so softirq
//! time counts to the thread it interrupts). The kernel paths need root, `unshare`, `ip`,
//! `clang` (and `nft` for the nftables path): without them the tool says so and runs the
//! user-space path alone. Everything kernel-side lives in a network namespace of its own.
//! `--quick`: 200,000 frames, one round (CI's smoke run).

mod flood;
mod kernel;

use std::error::Error;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use tollgate_benches::table::{median, number, render};
use tollgate_benches::{cpu, exit, machine};
use tollgate_filter::{Decision, FRAME_BATCH, Filter, Verdict};
use tollgate_sketch::Tick;

use flood::Flood;

/// Set in the copy of this tool that runs pinned (and, as root, inside its namespace): to
/// `kernel` when the kernel paths may run, `user` otherwise.
const INSIDE: &str = "TOLLGATE_XDP_BENCH";

/// The limit of an IPv4 /24 or an IPv6 /64 in a window, and of one address.
pub(crate) const NET_LIMIT: u32 = 1000;
pub(crate) const HOST_LIMIT: u32 = 100;
/// The window, for every path.
pub(crate) const WINDOW: Duration = Duration::from_secs(60);

/// The user-space path's policy: the limits above.
const POLICY: &str = r#"
[sketch]
memory = "8MiB"

[[rule]]
name = "flood"
limits = [
  { rate = "100/1m", ipv4_prefix = 32, ipv6_prefix = 128 },
  { rate = "1000/1m", ipv4_prefix = 24, ipv6_prefix = 64 },
]
"#;

/// What the command line asks.
#[derive(Clone, Copy, Debug)]
struct Args {
    frames: u64,
    rounds: usize,
}

impl Args {
    fn parse(args: &[String]) -> Result<Args, Box<dyn Error>> {
        let mut parsed = Args {
            frames: 2_000_000,
            rounds: 3,
        };
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--quick" => {
                    parsed.frames = 200_000;
                    parsed.rounds = 1;
                }
                "--frames" => parsed.frames = args.next().ok_or("--frames N")?.parse()?,
                "--rounds" => parsed.rounds = args.next().ok_or("--rounds N")?.parse()?,
                other => return Err(format!("unknown argument {other}").into()),
            }
        }
        if parsed.frames <= u64::from(NET_LIMIT) || parsed.rounds == 0 {
            return Err(
                "--frames must exceed the /64's limit of 1000, --rounds be 1 or more".into(),
            );
        }
        Ok(parsed)
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    exit::exit_code(match std::env::var(INSIDE) {
        Ok(mode) => Args::parse(&args).and_then(|parsed| measure(parsed, mode == "kernel")),
        Err(_) => reexec(&args),
    })
}

/// Whether this process runs as root (its effective uid, from `/proc/self/status`).
fn root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|line| line.starts_with("Uid:"))?;
            line.split_whitespace().nth(2).map(|euid| euid == "0")
        })
        .unwrap_or(false)
}

/// Runs this tool again pinned to CPU 0, inside a network namespace of its own as root.
fn reexec(args: &[String]) -> Result<(), Box<dyn Error>> {
    Args::parse(args)?;
    println!("{}", machine::describe());
    let exe = std::env::current_exe()?;
    let kernel = root();
    let mut command = if kernel {
        let mut command = Command::new("unshare");
        command.args(["-n", "taskset", "-c", "0"]).arg(&exe);
        command
    } else {
        println!(
            "not root: the XDP and nftables paths are skipped (they need root, unshare, ip, \
             clang and nft); the user-space path alone"
        );
        let mut command = Command::new("taskset");
        command.args(["-c", "0"]).arg(&exe);
        command
    };
    let status = command
        .args(args)
        .env(INSIDE, if kernel { "kernel" } else { "user" })
        .status()
        .map_err(|e| format!("cannot run unshare or taskset (util-linux): {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("the measurement failed: {status}").into())
    }
}

/// One path's round on one flood.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Round {
    /// Frames offered.
    pub(crate) sent: u64,
    /// Frames the path accounted for (decided, counted, dropped or delivered).
    pub(crate) handled: u64,
    /// Of those, the frames dropped (refused, for the user-space path).
    pub(crate) dropped: u64,
    pub(crate) wall: Duration,
    pub(crate) cpu: Duration,
    /// Where the first drop came, in frames after the one that crosses the limit (0: that
    /// very frame; negative: before it, an overestimate; `None`: none dropped, or not
    /// measured in the run).
    pub(crate) late: Option<i64>,
    /// The nftables path only: the transaction that puts the /64 into the set.
    pub(crate) load: Option<Duration>,
}

/// This thread's time on a CPU (zero where it cannot be read).
pub(crate) fn thread_cpu() -> Duration {
    cpu::thread_time().unwrap_or_default()
}

/// The time on a CPU in a schedstat file (zero where it cannot be read).
pub(crate) fn schedstat(path: &str) -> Duration {
    cpu::schedstat(path).unwrap_or_default()
}

/// The user-space frame path: `frames` decided `FRAME_BATCH` at a time by a fresh filter.
fn user_space(frames: &[&[u8]]) -> Result<Round, Box<dyn Error>> {
    let filter = Filter::new(tollgate_filter::Config::parse(POLICY)?)?;
    let mut decisions: Vec<Decision> = Vec::with_capacity(FRAME_BATCH);
    let mut first_drop = None;
    let mut dropped = 0;
    let mut now = 0u64;
    let cpu = thread_cpu();
    let started = Instant::now();
    for (batch, chunk) in frames.chunks(FRAME_BATCH).enumerate() {
        // 1 M frames/s of synthetic time.
        now += 1000 * chunk.len() as u64;
        decisions.clear();
        filter.decide_frames(chunk, Tick::from_nanos(now), &mut decisions);
        let refused = decisions
            .iter()
            .filter(|d| d.verdict != Verdict::Allow)
            .count();
        dropped += refused as u64;
        if first_drop.is_none() && refused > 0 {
            first_drop = decisions
                .iter()
                .position(|d| d.verdict != Verdict::Allow)
                .map(|i| (batch * FRAME_BATCH + i) as u64);
        }
    }
    let wall = started.elapsed();
    Ok(Round {
        sent: frames.len() as u64,
        handled: frames.len() as u64,
        dropped,
        wall,
        cpu: thread_cpu().saturating_sub(cpu),
        // Frame NET_LIMIT (from 0) is the first over the limit.
        late: first_drop.map(|i| i as i64 - i64::from(NET_LIMIT)),
        load: None,
    })
}

fn measure(args: Args, kernel: bool) -> Result<(), Box<dyn Error>> {
    let mut bed = if kernel {
        match kernel::Bed::new() {
            Ok(bed) => Some(bed),
            Err(err) => {
                println!("kernel paths skipped: {err}");
                None
            }
        }
    } else {
        None
    };
    println!(
        "{} frames a flood, {} round(s), pinned to CPU 0; medians",
        number(args.frames as f64),
        args.rounds
    );
    let mut rows = vec![vec![
        "flood / path".to_owned(),
        "M frames/s (CPU)".to_owned(),
        "ns CPU a frame".to_owned(),
        "M frames/s (wall)".to_owned(),
        "handled / sent".to_owned(),
        "dropped".to_owned(),
        "first drop after the crossing".to_owned(),
    ]];
    for flood in Flood::ALL {
        let built: Vec<Vec<u8>> = (0..args.frames).map(|i| flood.frame(i)).collect();
        let frames: Vec<&[u8]> = built.iter().map(Vec::as_slice).collect();
        let mut paths: Vec<(&str, Vec<Round>)> = vec![("user space", Vec::new())];
        if bed.is_some() {
            paths.push(("XDP", Vec::new()));
            paths.push(("nftables", Vec::new()));
        }
        for _ in 0..args.rounds {
            paths[0].1.push(user_space(&frames)?);
            if let Some(bed) = bed.as_mut() {
                paths[1].1.push(bed.xdp(flood, args.frames)?);
                paths[2].1.push(bed.nftables(flood, args.frames)?);
            }
        }
        for (path, rounds) in &paths {
            rows.push(row(flood, path, rounds));
        }
    }
    print!("{}", render(&rows));
    println!(
        "first drop: frames let through after the frame that takes the /64 over its limit \
         (negative: the first drop came before it, an overestimate; IPv6 flood only, the IPv4 \
         flood has no aggregate over a limit). nftables: the updater's \
         transaction that loads the /64, timed; frames at 1 M frames/s pass meanwhile (plus up \
         to the updater's 20 ms gap when it has just sent another)."
    );
    Ok(())
}

/// A table row: the medians of a path's rounds on a flood.
fn row(flood: Flood, path: &str, rounds: &[Round]) -> Vec<String> {
    let of = |f: &dyn Fn(&Round) -> f64| median(&rounds.iter().map(f).collect::<Vec<_>>());
    let cpu_rate = of(&|r: &Round| r.handled as f64 / r.cpu.as_secs_f64().max(1e-9) / 1e6);
    let cpu_ns = of(&|r: &Round| r.cpu.as_nanos() as f64 / r.handled.max(1) as f64);
    let wall_rate = of(&|r: &Round| r.handled as f64 / r.wall.as_secs_f64().max(1e-9) / 1e6);
    let handled = of(&|r: &Round| r.handled as f64);
    let sent = of(&|r: &Round| r.sent as f64);
    let dropped = of(&|r: &Round| r.dropped as f64);
    let first = if flood != Flood::Rotation64 {
        "no aggregate over a limit".to_owned()
    } else if let Some(load) = of(&|r: &Round| r.load.map_or(f64::NAN, |l| l.as_secs_f64() * 1e3))
        .filter(|ms| !ms.is_nan())
    {
        format!(
            "{} ms: {} frames at 1 M/s",
            number(load),
            number(load * 1e3)
        )
    } else {
        match of(&|r: &Round| r.late.map_or(f64::NAN, |l| l as f64)) {
            Some(late) if !late.is_nan() => format!("{late:.0} frames"),
            _ => "never".to_owned(),
        }
    };
    vec![
        format!("{} / {path}", flood.name()),
        number(cpu_rate.unwrap_or(0.0)),
        number(cpu_ns.unwrap_or(0.0)),
        number(wall_rate.unwrap_or(0.0)),
        format!(
            "{} / {}",
            number(handled.unwrap_or(0.0)),
            number(sent.unwrap_or(0.0))
        ),
        number(dropped.unwrap_or(0.0)),
        first,
    ]
}
