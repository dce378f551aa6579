//! `--processes`: the cluster benchmark on three real `tollgate run` processes, a real
//! password-protected `redis-server` and, for the failover, one master, one replica and three
//! sentinels, all local child processes the tool starts and stops (every one of them is
//! killed when its holder is dropped, on error and panic paths too).
//!
//! The load reaches the proxies as UDP datagrams from up to 16 M loopback sources through one
//! socket ([`driver`]); the source over its limit opens TCP connections to the three in turn
//! and counts those the echo upstream answered. Each node's `/metrics` gives what it sent to
//! and received from Redis, the commands it ran, its suspects, and how many datagrams it
//! decided: the rate reached, which on a small box is far below what the in-process tool
//! drives through the filter.

mod driver;
mod node;
mod redis;

use std::error::Error;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use tollgate_benches::process::WorkDir;
use tollgate_benches::table::{number, render};
use tollgate_benches::upstream::Upstreams;
use tollgate_benches::{cpu, machine};

use driver::{Mix, Sent};
use node::{Discovery, LIMIT, Metrics, NAMES, Node, Setup};
use redis::{MASTER_NAME, Redis};

/// Redis's `requirepass` in every run (the nodes read it from a file).
const PASSWORD: &str = "cluster-bench-secret";
/// How long nodes may take to join (every `tollgate_cluster_alone` 0) after they start.
const JOIN_LIMIT: Duration = Duration::from_secs(15);
/// How long the failover may take, from the master's crash to every node synced again.
const FAILOVER_LIMIT: Duration = Duration::from_secs(30);

/// What the three-process run is asked to do.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// Seconds of each load scenario (the 10 s period run lasts at least 30).
    pub(crate) seconds: u64,
    /// Datagrams per second per node the driver offers.
    pub(crate) rate: u64,
    /// Key spaces (distinct sources) to run.
    pub(crate) sources: Vec<u64>,
    /// The cluster's `sync`.
    pub(crate) sync: String,
    /// The tollgate binary.
    pub(crate) tollgate: PathBuf,
    /// Set on SIGINT or SIGTERM: the run stops at its next pause, and every child with it.
    pub(crate) interrupted: Arc<AtomicBool>,
}

/// Runs every scenario and prints the tables.
///
/// # Errors
/// The tollgate binary or `redis-server` is missing (the message says what to do), a process
/// did not start or exited, or the nodes did not join or converge within their bounds.
pub(crate) fn run(options: &Options) -> Result<(), Box<dyn Error>> {
    if !options.tollgate.is_file() {
        return Err(format!(
            "{} not found: run `cargo build --release -p tollgate` first (or pass --tollgate PATH)",
            options.tollgate.display()
        )
        .into());
    }
    let dir = WorkDir::create("cluster")?;
    let password_file = dir.write("redis-password", &format!("{PASSWORD}\n"))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    runtime.spawn(watch_signals(Arc::clone(&options.interrupted)));
    let upstreams = Upstreams::start(&runtime)?;
    let server = Redis::server("redis", &dir, PASSWORD)?;
    println!(
        "3 tollgate processes, limit {LIMIT} per period per address, sync {}, one redis-server \
         (requirepass) on loopback; {}; load average {}",
        options.sync,
        machine::describe(),
        load_average()
    );
    println!(
        "load: UDP datagrams (60 B) from sources drawn from the key space, round-robin over \
         the nodes, {} per node per second offered, {} s per row; over: one source at 10 x \
         its limit over TCP, in turn to each node",
        options.rate, options.seconds
    );
    let setup = |discovery: Discovery, per: &str| Setup {
        discovery,
        password_file: password_file.clone(),
        sync: options.sync.clone(),
        per: per.to_owned(),
        udp_upstream: upstreams.udp,
        tcp_upstream: upstreams.echo,
    };
    let mut rows = vec![header()];
    print!("{}", render(&rows));
    for &sources in &options.sources {
        for mix in [Mix::Zipf, Mix::Uniform] {
            server.flush()?;
            let nodes = start_nodes(
                &setup(Discovery::Server(server.address), "1s"),
                &dir,
                options,
            )?;
            let outcome = scenario(&runtime, nodes, options, sources, mix, 1, options.seconds)?;
            rows.push(outcome.row(sources, mix, "1s"));
            print!("{}", render(&rows[rows.len() - 1..]));
        }
    }
    // The 10 s period: at least three periods, with the 1k Zipf load around it.
    server.flush()?;
    let long = options.seconds.max(30).next_multiple_of(10);
    let nodes = start_nodes(
        &setup(Discovery::Server(server.address), "10s"),
        &dir,
        options,
    )?;
    let outcome = scenario(&runtime, nodes, options, 1000, Mix::Zipf, 10, long)?;
    rows.push(outcome.row(1000, Mix::Zipf, "10s"));
    println!();
    print!("{}", render(&rows));
    println!(
        "sent/s: datagrams the driver sent per second (asked for {}); decided/s: those the 3 \
         nodes decided; suspects, bytes \
         to and from Redis, Redis commands: per node per second (mean of the 3); over: the source at 10 x \
         its limit, connections served/attempted over the row, and served in its first period \
         and per later period, in limits (L); CPU: each node's mean share of one core, and its CPU time per decided datagram (the \
         source over its limit's connections and the sync included); errors: \
         Redis errors (all 3) / datagrams the driver failed to send",
        number((options.rate * 3) as f64)
    );
    drop(server);
    failover(&dir, &setup, options)?;
    Ok(())
}

/// `/proc/loadavg`'s three averages.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "unknown".to_owned())
}

/// Starts the three nodes and waits until all share.
fn start_nodes(
    setup: &Setup,
    dir: &WorkDir,
    options: &Options,
) -> Result<Vec<Node>, Box<dyn Error>> {
    let mut nodes = Vec::new();
    for index in 0..NAMES.len() {
        nodes.push(Node::start(index, setup, dir, &options.tollgate)?);
    }
    let deadline = Instant::now() + JOIN_LIMIT;
    loop {
        let mut joined = true;
        for node in &mut nodes {
            joined &= !node.metrics()?.alone();
        }
        if joined {
            return Ok(nodes);
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "the nodes did not join Redis within {JOIN_LIMIT:?} (logs in {})",
                dir.path().display()
            )
            .into());
        }
        pause(Duration::from_millis(50), options)?;
    }
}

/// What one scenario measured.
#[derive(Debug)]
struct Outcome {
    /// Datagrams the driver sent per second.
    offered: f64,
    sent: Sent,
    /// Per node: counters' increase over the run, per second.
    per_node: Vec<Rates>,
    /// Per node: mean of the suspects sampled each second.
    suspects: Vec<f64>,
    admitted: driver::Admitted,
    /// Periods the source over its limit sent for.
    periods: f64,
}

#[derive(Debug, Default, Clone, Copy)]
struct Rates {
    decided: f64,
    sent: f64,
    received: f64,
    commands: f64,
    errors: f64,
    cpu: f64,
}

/// Runs the load and the source over its limit through `nodes` for `seconds`.
fn scenario(
    runtime: &tokio::runtime::Runtime,
    mut nodes: Vec<Node>,
    options: &Options,
    sources: u64,
    mix: Mix,
    period: u64,
    seconds: u64,
) -> Result<Outcome, Box<dyn Error>> {
    let before: Vec<(Metrics, Duration)> = nodes
        .iter_mut()
        .map(|n| Ok((n.metrics()?, n.cpu())))
        .collect::<Result<_, String>>()?;
    let start = Instant::now();
    let load = Load::start(&nodes, sources, mix, options.rate)?;
    let over = runtime.spawn(driver::over_limit(
        nodes.iter().map(|n| n.tcp).collect(),
        (10 * LIMIT) as f64 / period as f64,
        seconds as f64,
        10 * LIMIT,
    ));
    let mut samples = vec![Vec::new(); nodes.len()];
    let end = start + Duration::from_secs(seconds);
    while Instant::now() < end {
        pause(
            Duration::from_secs(1).min(end.saturating_duration_since(Instant::now())),
            options,
        )?;
        for (node, sampled) in nodes.iter_mut().zip(&mut samples) {
            sampled.push(node.metrics()?.sum("tollgate_cluster_suspects", &[]));
        }
    }
    let sent = load.finish()?;
    let admitted = runtime.block_on(over)?;
    let elapsed = start.elapsed().as_secs_f64();
    let offered = sent.datagrams as f64 / elapsed;
    let mut per_node = Vec::new();
    for (node, (old, cpu)) in nodes.iter_mut().zip(&before) {
        let new = node.metrics()?;
        let rate =
            |name: &str, labels: &[&str]| (new.sum(name, labels) - old.sum(name, labels)) / elapsed;
        per_node.push(Rates {
            decided: rate("tollgate_decisions_total", &["listener=\"load\""]),
            sent: rate("tollgate_cluster_sent_bytes_total", &[]),
            received: rate("tollgate_cluster_received_bytes_total", &[]),
            commands: rate("tollgate_cluster_redis_commands_total", &[]),
            errors: rate("tollgate_cluster_redis_errors_total", &[]) * elapsed,
            cpu: node.cpu().saturating_sub(*cpu).as_secs_f64() / elapsed,
        });
    }
    Ok(Outcome {
        offered,
        sent,
        per_node,
        suspects: samples
            .iter()
            .map(|s| s.iter().sum::<f64>() / s.len().max(1) as f64)
            .collect(),
        admitted,
        periods: seconds as f64 / period as f64,
    })
}

fn header() -> Vec<String> {
    [
        "sources",
        "mix",
        "period",
        "sent/s",
        "decided/s",
        "suspects",
        "to Redis B/s",
        "from Redis B/s",
        "cmds/s",
        "over",
        "1st period",
        "after",
        "CPU/node",
        "us/decision",
        "errors",
    ]
    .map(str::to_owned)
    .to_vec()
}

impl Outcome {
    fn row(&self, sources: u64, mix: Mix, period: &str) -> Vec<String> {
        let mean = |f: &dyn Fn(&Rates) -> f64| {
            self.per_node.iter().map(f).sum::<f64>() / self.per_node.len().max(1) as f64
        };
        vec![
            number(sources as f64),
            format!("{mix:?}").to_lowercase(),
            period.to_owned(),
            number(self.offered),
            number(mean(&|r| r.decided) * self.per_node.len() as f64),
            number(self.suspects.iter().sum::<f64>() / self.suspects.len().max(1) as f64),
            number(mean(&|r| r.sent)),
            number(mean(&|r| r.received)),
            number(mean(&|r| r.commands)),
            format!("{}/{}", self.admitted.served, self.admitted.attempts),
            format!("{:.2}L", self.admitted.first as f64 / LIMIT as f64),
            format!(
                "{:.2}L",
                (self.admitted.served - self.admitted.first) as f64
                    / (LIMIT as f64 * (self.periods - 1.0).max(1.0))
            ),
            format!("{:.0}%", 100.0 * mean(&|r| r.cpu)),
            number(1e6 * mean(&|r| r.cpu) / mean(&|r| r.decided).max(1.0)),
            format!(
                "{}/{}",
                number(mean(&|r| r.errors) * self.per_node.len() as f64),
                self.sent.failed
            ),
        ]
    }
}

/// One master, one replica, three sentinels; the nodes find the master through the
/// sentinels. The master is killed (SIGKILL) under the 1k Zipf load; the time until the
/// replica says it is master, and until each node has synced again, is printed.
fn failover(
    dir: &WorkDir,
    setup: &dyn Fn(Discovery, &str) -> Setup,
    options: &Options,
) -> Result<(), Box<dyn Error>> {
    let master = Redis::server("master", dir, PASSWORD)?;
    let replica = Redis::replica_of("replica", dir, &master, PASSWORD)?;
    let sentinels = ["sentinel-0", "sentinel-1", "sentinel-2"]
        .into_iter()
        .map(|name| Redis::sentinel_of(name, dir, &master, PASSWORD))
        .collect::<Result<Vec<_>, _>>()?;
    let discovery =
        Discovery::Sentinels(sentinels.iter().map(|s| s.address).collect(), MASTER_NAME);
    let mut nodes = start_nodes(&setup(discovery, "1s"), dir, options)?;
    let load = Load::start(&nodes, 1000, Mix::Zipf, options.rate)?;
    // Let the load settle for two seconds, then crash the master.
    pause(Duration::from_secs(2), options)?;
    let crashed = Instant::now();
    master.crash();
    let mut alone_at: Vec<Option<(Duration, f64)>> = vec![None; nodes.len()];
    let mut synced_at: Vec<Option<Duration>> = vec![None; nodes.len()];
    let mut promoted_at = None;
    while synced_at.iter().any(Option::is_none) {
        let now = crashed.elapsed();
        if now > FAILOVER_LIMIT {
            return Err(format!(
                "the nodes did not follow the failover within {FAILOVER_LIMIT:?}: alone at {alone_at:?}, synced at {synced_at:?}, replica promoted at {promoted_at:?} (logs in {})",
                dir.path().display()
            )
            .into());
        }
        if promoted_at.is_none() && replica.is_master() {
            promoted_at = Some(now);
        }
        for (index, node) in nodes.iter_mut().enumerate() {
            let metrics = node.metrics()?;
            match (alone_at[index], metrics.alone()) {
                (None, true) => alone_at[index] = Some((now, metrics.syncs())),
                // Synced again: not alone, and a round completed since it was seen alone
                // (with the old master dead, with the promoted one).
                (Some((_, syncs)), false)
                    if synced_at[index].is_none() && metrics.syncs() > syncs =>
                {
                    synced_at[index] = Some(now);
                }
                _ => {}
            }
        }
        pause(Duration::from_millis(20), options)?;
    }
    load.finish()?;
    println!();
    println!(
        "failover (master SIGKILLed under the 1k Zipf load; sentinels: quorum 2, down after {} ms, \
         failover timeout 3 s; times from the kill, polled every 20 ms):",
        redis::DOWN_AFTER.as_millis()
    );
    let mut rows = vec![
        ["node", "alone at", "synced with the new master at"]
            .map(str::to_owned)
            .to_vec(),
    ];
    for (index, name) in NAMES.iter().enumerate() {
        rows.push(vec![
            (*name).to_owned(),
            alone_at[index].map_or("never".to_owned(), |(t, _)| seconds(t)),
            synced_at[index].map_or("never".to_owned(), seconds),
        ]);
    }
    rows.push(vec![
        "replica".to_owned(),
        String::new(),
        format!(
            "promoted (ROLE master) at {}",
            promoted_at.map_or("?".to_owned(), seconds)
        ),
    ]);
    print!("{}", render(&rows));
    let converged = synced_at
        .iter()
        .flatten()
        .max()
        .copied()
        .unwrap_or_default();
    println!(
        "converged (every node synced with the promoted master): {}; after the promotion: {}",
        seconds(converged),
        promoted_at.map_or("?".to_owned(), |p| seconds(converged.saturating_sub(p)))
    );
    drop(nodes);
    Ok(())
}

fn seconds(duration: Duration) -> String {
    format!("{:.2} s", duration.as_secs_f64())
}

impl Node {
    /// CPU time of the node's process so far (zero if `/proc` cannot say).
    fn cpu(&self) -> Duration {
        cpu::tree_time(self.pid()).unwrap_or_default()
    }
}

/// Sleeps `duration`, then fails if the run was interrupted.
fn pause(duration: Duration, options: &Options) -> Result<(), String> {
    thread::sleep(duration);
    // Relaxed: a flag polled between steps; nothing else is published through it.
    if options.interrupted.load(Ordering::Relaxed) {
        return Err("interrupted: every child process is being stopped".to_owned());
    }
    Ok(())
}

/// Sets `interrupted` on SIGINT or SIGTERM (the run then stops at its next pause and drops,
/// so stops, every child it started).
async fn watch_signals(interrupted: Arc<AtomicBool>) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    // Relaxed: a flag the main thread polls.
    interrupted.store(true, Ordering::Relaxed);
}

/// The UDP load on its own thread; stopped (and joined) by [`Load::finish`] or when dropped.
struct Load {
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<std::io::Result<Sent>>>,
}

impl Load {
    /// Starts `rate` datagrams per node per second from `sources` drawn by `mix`, round-robin
    /// over `nodes`.
    fn start(nodes: &[Node], sources: u64, mix: Mix, rate: u64) -> std::io::Result<Load> {
        let targets: Vec<SocketAddr> = nodes.iter().map(|n| n.udp).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let total = rate * nodes.len() as u64;
        let thread = thread::Builder::new().name("load".to_owned()).spawn({
            let stop = Arc::clone(&stop);
            move || driver::udp_load(&targets, sources, mix, total, &stop)
        })?;
        Ok(Load {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the load: what it sent.
    fn finish(mut self) -> Result<Sent, String> {
        self.halt()
            .ok_or("the load thread panicked")?
            .map_err(|e| format!("the load driver's socket: {e}"))
    }

    fn halt(&mut self) -> Option<std::io::Result<Sent>> {
        // Relaxed: a stop flag; joining the thread is the synchronisation.
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take()?.join().ok()
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        let _ = self.halt();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_has_a_cell_under_each_heading() {
        let outcome = Outcome {
            offered: 1.0,
            sent: Sent::default(),
            per_node: vec![Rates::default(); 3],
            suspects: vec![0.0; 3],
            admitted: driver::Admitted::default(),
            periods: 2.0,
        };
        assert_eq!(
            outcome.row(1000, Mix::Zipf, "1s").len(),
            header().len(),
            "{:?} under {:?}",
            outcome.row(1000, Mix::Zipf, "1s"),
            header()
        );
    }
}
