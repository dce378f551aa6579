//! The attack tool: named attacks on loopback against tollgate and, when installed, HAProxy and
//! nginx configured to the same limits, each while hundreds of legitimate clients keep working.
//!
//! ```text
//! cargo build --release -p tollgate -p tollgate-benches --bin tollgate --bin attack
//! target/release/attack [--quick] [--only flood,tarpit] [--peers tollgate] [--csv FILE]
//! ```
//!
//! For every attack and proxy, a fresh proxy process ([`peers`]) from a config written from one
//! statement of the limits ([`limits`], [`configs`]); the legitimate clients ([`legit`]) run
//! alone first (the baseline), then through the attack ([`attacks`]); meanwhile /metrics is
//! scraped once a second and the proxy's CPU, descriptors and RSS are read from `/proc`
//! ([`watch`]). Each row ([`report`]) is checked against the goals: at least 99.9% of
//! legitimate exchanges served, their p99 at most twice the unattacked one (and every scrape
//! answered under the admin attack). The upstreams (TCP echo, UDP echo) run inside this tool.

mod attacks;
mod cli;
mod configs;
mod legit;
mod limits;
mod peers;
mod report;
mod watch;

use std::error::Error;
use std::fs;
use std::path::Path;
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use clap::Parser;
use tokio::runtime::Runtime;
use tollgate_benches::exit::exit_code;
use tollgate_benches::kind::Kind;
use tollgate_benches::process::WorkDir;
use tollgate_benches::upstream::Upstreams;
use tollgate_benches::{launch, machine, usage};

use attacks::scrape_metrics;
use cli::{Attack, Options, Sizes};
use legit::{Clients, Phase};
use limits::Limits;
use peers::Proxy;
use report::Row;
use watch::{Resources, Watch};

/// How long the echo upstreams keep a silent connection: longer than any attack, so the idle
/// holds are ended by the proxy or not at all.
const UPSTREAM_IDLE: Duration = Duration::from_secs(600);

fn main() -> ExitCode {
    let options = Options::parse();
    exit_code(run(&options))
}

/// What every measurement runs with.
struct Bench<'a> {
    /// Runs the attacks.
    runtime: &'a Runtime,
    /// Runs the legitimate clients and the scrapes.
    legit_runtime: &'a Runtime,
    upstreams: &'a Upstreams,
    dir: &'a WorkDir,
    tollgate: &'a Path,
    limits: Limits,
    sizes: Sizes,
}

fn run(options: &Options) -> Result<(), Box<dyn Error>> {
    let started = Instant::now();
    let load_before = load_average();
    let sizes = options.sizes();
    let raised = usage::raise_nofile();
    let mut nofile = match &raised {
        Ok(limit) => format!("{limit} (raised to the hard limit; the proxies inherit it)"),
        Err(err) => format!("{:?} (not raised: {err})", usage::nofile().ok()),
    };
    // The most this tool holds at once: the largest held attack, the legitimate clients, slack.
    let needed = sizes.tarpit_held as u64
        + sizes.admin_connections.max(sizes.idle_connections)
        + 2 * sizes.legit as u64
        + 1_024;
    if raised.as_ref().map_or(true, |&limit| limit < needed) {
        nofile.push_str(&format!(
            "; WARNING: below the {needed} this run may hold: attacks will be smaller than stated"
        ));
    }
    let limits = Limits::standard();
    let tollgate = launch::tollgate_binary(options.tollgate.as_deref())?;
    // Three runtimes, so that neither the legitimate clients nor the upstream queue behind
    // thousands of attacking tasks inside this tool: what they measure is the proxy.
    let runtime = new_runtime("attack", 2)?;
    let legit_runtime = new_runtime("legit", 1)?;
    let upstream_runtime = new_runtime("upstream", 1)?;
    let dir = WorkDir::create("attack")?;
    let upstreams = Upstreams::start_with_idle(&upstream_runtime, UPSTREAM_IDLE)?;
    let interrupted = interruption(&legit_runtime)?;
    let bench = Bench {
        runtime: &runtime,
        legit_runtime: &legit_runtime,
        upstreams: &upstreams,
        dir: &dir,
        tollgate: &tollgate,
        limits,
        sizes,
    };

    let mut attacks = if options.only.is_empty() {
        Attack::ALL.to_vec()
    } else {
        options.only.clone()
    };
    attacks.sort();
    attacks.dedup();
    let mut peers = options.peers.clone();
    peers.dedup();

    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let mut unavailable: Vec<Kind> = Vec::new();
    'rows: for &attack in &attacks {
        for &peer in &peers {
            // Relaxed: a flag read between rows; nothing else is ordered by it.
            if interrupted.load(Ordering::Relaxed) {
                notes.push(format!(
                    "interrupted (SIGINT or SIGTERM) before {} against {peer}: the rest not run",
                    attack.name()
                ));
                break 'rows;
            }
            if unavailable.contains(&peer) {
                continue;
            }
            if peer == Kind::Haproxy && attack.needs_udp() {
                notes.push(format!("{}: {peer} skipped (no UDP)", attack.name()));
                continue;
            }
            eprintln!("{} against {peer} ...", attack.name());
            match measure(&bench, attack, peer) {
                Ok(row) => {
                    eprintln!(
                        "  legit {}/{}, p99 {:?} -> {:?} us",
                        row.attacked.served,
                        row.attacked.attempts,
                        row.base.p99_us,
                        row.attacked.p99_us
                    );
                    rows.push(row);
                }
                Err(err) => {
                    eprintln!("  {err}");
                    if err.contains("not installed")
                        || err.contains("not found")
                        || peer == Kind::Direct
                    {
                        unavailable.push(peer);
                    }
                    notes.push(format!("{}: {peer}: {err}", attack.name()));
                }
            }
        }
    }
    drop(upstreams);
    for runtime in [runtime, legit_runtime, upstream_runtime] {
        runtime.shutdown_timeout(Duration::from_secs(2));
    }

    let command: Vec<String> = std::env::args().collect();
    println!("command: {}", command.join(" "));
    println!(
        "  (= cargo run --release -p tollgate-benches --bin attack -- {})",
        command.get(1..).unwrap_or_default().join(" ")
    );
    println!("machine: {}", machine::describe());
    println!(
        "load average (1, 5, 15 min) at the start: {load_before}, at the end: {}",
        load_average()
    );
    if let Some(commit) = commit() {
        println!("commit: {commit}");
    }
    println!("tollgate: {}", tollgate.display());
    println!("open-file limit: {nofile}");
    println!(
        "legitimate clients: {} sources, one exchange each per {:?} (timeout {:?}); baseline {:?}, attacks {:?} (longer where the count needs it); took {:.0} s",
        sizes.legit,
        sizes.legit_interval,
        sizes.legit_timeout,
        sizes.baseline,
        sizes.attack,
        started.elapsed().as_secs_f64()
    );
    println!(
        "goals: legitimate served >= {}%, p99 <= {}x the same run before the attack; admin attack: every /metrics scrape answered",
        report::SERVED_GOAL,
        report::P99_GOAL
    );
    for line in limits.describe() {
        println!("limits: {line}");
    }
    for &peer in &peers {
        if !unavailable.contains(&peer) {
            println!(
                "{peer} cannot express: {}",
                Limits::unexpressed(peer).join("; ")
            );
        }
    }
    println!();
    print!("{}", report::table(&rows));
    for note in notes {
        println!("note: {note}");
    }
    if let Some(path) = &options.csv {
        fs::write(path, report::csv(&rows))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        println!("csv: {}", path.display());
    }
    Ok(())
}

/// One attack against one fresh proxy: baseline, then the attack, legitimate clients
/// throughout.
fn measure(bench: &Bench<'_>, attack: Attack, kind: Kind) -> Result<Row, String> {
    let sizes = bench.sizes;
    let mut proxy = Proxy::start(
        kind,
        &bench.limits,
        bench.upstreams,
        bench.dir,
        bench.tollgate,
    )?;
    let targets = proxy.targets;
    let start = Instant::now();
    let attack_start = start + sizes.baseline;
    let end = attack_start + attack.span(&sizes);
    let clients = Clients::start(bench.legit_runtime, attack.route(&targets), &sizes, end);
    thread::sleep(attack_start.saturating_duration_since(Instant::now()));

    let before = Resources::of(proxy.pid());
    let watch = Watch::start(proxy.pid());
    let tokio_end = tokio::time::Instant::from_std(end);
    let scrapes = bench
        .runtime
        .spawn(scrape_metrics(targets.admin, tokio_end));
    let attacking = bench.runtime.spawn(attack.run(targets, sizes, tokio_end));
    thread::sleep(end.saturating_duration_since(Instant::now()));
    let seen = watch.finish();

    let mut notes = bench
        .runtime
        .block_on(attacking)
        .map_err(|e| format!("the attack task failed: {e}"))?;
    let scrapes = bench.legit_runtime.block_on(scrapes).unwrap_or_default();
    let exchanges = clients.finish(bench.legit_runtime);
    if let Err(err) = proxy.check_alive() {
        notes.push(format!("the proxy died: {err}"));
    }
    notes.push(format!(
        "descriptors at the end {}, proxy log {} lines",
        seen.end.fds,
        proxy.log_lines()
    ));
    Ok(Row {
        attack,
        peer: kind,
        base: Phase::of(&exchanges, start, attack_start),
        attacked: Phase::of(&exchanges, attack_start, end),
        scrapes,
        before,
        seen,
        notes,
    })
}

/// A flag set on SIGINT or SIGTERM: the run then stops after the current row, so that every
/// proxy it started is stopped (dropped) and the rows so far are printed.
fn interruption(runtime: &Runtime) -> std::io::Result<Arc<AtomicBool>> {
    use tokio::signal::unix::{SignalKind, signal};
    let flag = Arc::new(AtomicBool::new(false));
    let _context = runtime.enter();
    for kind in [SignalKind::interrupt(), SignalKind::terminate()] {
        let mut signals = signal(kind)?;
        let flag = Arc::clone(&flag);
        runtime.spawn(async move {
            if signals.recv().await.is_some() {
                eprintln!("interrupted: stopping after the current attack");
                // Relaxed: see the reader.
                flag.store(true, Ordering::Relaxed);
            }
        });
    }
    Ok(flag)
}

/// A multi-threaded runtime of `threads` workers named `name`.
fn new_runtime(name: &str, threads: usize) -> std::io::Result<Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name(name)
        .enable_all()
        .build()
}

/// The first three fields of `/proc/loadavg`: how busy the shared machine was.
fn load_average() -> String {
    fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The commit of the working directory's repository, if there is one.
fn commit() -> Option<String> {
    let output = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}
