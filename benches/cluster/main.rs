//! Three cluster nodes against a local `redis-server`: what sharing limits costs (Redis
//! operations per second, bytes per node per second, Redis memory per counter) at 1k, 100k and 10M
//! distinct sources, and how far over its limit one source spread across the nodes gets, with
//! the cluster and with three independent nodes.
//!
//! ```text
//! cargo run --release -p tollgate-benches --bin cluster [-- --seconds 4 --rate 100000]
//! ```
//!
//! With `--processes` it runs the three nodes as real `tollgate run` processes instead (see
//! [`processes`]; `cargo build --release -p tollgate` first):
//!
//! ```text
//! cargo run --release -p tollgate-benches --bin cluster -- --processes [--seconds 20 --rate 10000]
//! ```
//!
//! The nodes are in-process and skip the sockets: each is a `tollgate_filter::Filter` with its
//! own `tollgate::cluster::Cluster` as its remote and its own sync task, the proxy's code from
//! the decide call down; one thread per node paces `--rate` decisions per second (in 1 ms
//! steps). The traffic: sources drawn from Zipf(1.1) or uniformly over the distinct sources,
//! plus one source over its limit (10 x the limit per period) spread evenly over the nodes.
//! The policy: one rule, 100 per 1 s per address. `redis-server` is started on a free
//! loopback port (or `--redis ADDR` is used and flushed).

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod processes;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use rand::{RngExt, SeedableRng, rngs::SmallRng};
use rand_distr::{Distribution, Zipf};
use tollgate::cluster::ClusterMetrics;
use tollgate::cluster::{Cluster, run};
use tollgate::config::ProxyConfig;
use tollgate_filter::{Event, Filter, Source, Transport, Verdict};
use tollgate_sketch::{Clock, MonotonicClock};

const NODES: usize = 3;
const LIMIT: u64 = 100;

#[derive(Parser, Debug)]
struct Args {
    /// Run three `tollgate run` processes, a password-protected redis-server and a
    /// Sentinel failover instead of in-process nodes.
    #[arg(long)]
    processes: bool,
    /// With --processes: the tollgate binary (default: `tollgate` next to this tool).
    #[arg(long)]
    tollgate: Option<PathBuf>,
    /// Seconds per scenario (default 4; with --processes 20).
    #[arg(long)]
    seconds: Option<u64>,
    /// Decisions per second per node (default 100000; with --processes, datagrams offered
    /// per node per second, default 10000).
    #[arg(long)]
    rate: Option<u64>,
    /// Distinct sources, comma-separated (default 1000,100000,10000000; with --processes
    /// 1000,10000000).
    #[arg(long, value_delimiter = ',')]
    sources: Option<Vec<u64>>,
    /// A running Redis to use (flushed) instead of starting one (in-process nodes only).
    #[arg(long)]
    redis: Option<SocketAddr>,
    /// The sync interval (default 200ms; with --processes 100ms).
    #[arg(long)]
    sync: Option<String>,
    /// The limit's period (the limit is 100 per period; in-process nodes only: --processes
    /// runs 1 s and 10 s).
    #[arg(long, default_value = "1s")]
    per: String,
}

/// The in-process run's settings, the defaults filled in.
#[derive(Debug)]
struct Settings {
    seconds: u64,
    rate: u64,
    sources: Vec<u64>,
    sync: String,
    per: String,
}

struct RedisServer(Child);

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_redis() -> (RedisServer, SocketAddr) {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server on the PATH (apt-get install redis-server)");
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(10);
    while redis_client(address).get_connection().is_err() {
        assert!(Instant::now() < deadline, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    (RedisServer(child), address)
}

fn redis_client(address: SocketAddr) -> redis::Client {
    redis::Client::open(format!("redis://{address}/")).expect("a redis URL")
}

fn redis_dbsize(address: SocketAddr) -> u64 {
    let mut connection = redis_client(address).get_connection().expect("redis");
    redis::cmd("DBSIZE").query(&mut connection).expect("DBSIZE")
}

/// Redis' own count of the bytes one counter takes (`MEMORY USAGE`), averaged over up to 200
/// random keys.
fn key_bytes(address: SocketAddr) -> f64 {
    let mut connection = redis_client(address).get_connection().expect("redis");
    let mut sizes = Vec::new();
    for _ in 0..200 {
        let key: Option<Vec<u8>> = redis::cmd("RANDOMKEY")
            .query(&mut connection)
            .expect("RANDOMKEY");
        let Some(key) = key else { break };
        let size: Option<u64> = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(&key)
            .query(&mut connection)
            .expect("MEMORY USAGE");
        sizes.extend(size);
    }
    sizes.iter().sum::<u64>() as f64 / sizes.len().max(1) as f64
}

fn flush(address: SocketAddr) {
    let mut connection = redis_client(address).get_connection().expect("redis");
    let () = redis::cmd("FLUSHALL")
        .query(&mut connection)
        .expect("FLUSHALL");
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mix {
    Zipf,
    Uniform,
}

struct Outcome {
    key_bytes: f64,
    attacker_admitted: u64,
    decide_ns: f64,
    suspects: f64,
    commands: f64,
    sent: f64,
    received: f64,
    sync_ms: f64,
    overflow: u64,
    errors: u64,
    keys: u64,
}

fn policy(redis: Option<SocketAddr>, node: usize, sync: &str, per: &str) -> ProxyConfig {
    let cluster = redis.map_or(String::new(), |r| {
        format!("[cluster]\nredis = [\"{r}\"]\nnode = \"bench-{node}\"\nname = \"bench\"\nsync = \"{sync}\"\n")
    });
    ProxyConfig::parse(&format!(
        "{cluster}\n[sketch]\nmemory = \"16MiB\"\n[[rule]]\nname = \"per-source\"\nlimits = [{{ rate = \"{LIMIT}/{per}\" }}]\n"
    ))
    .expect("a valid config")
}

fn scenario(
    args: &Settings,
    redis: Option<SocketAddr>,
    sources: u64,
    mix: Mix,
    runtime: &tokio::runtime::Runtime,
) -> Outcome {
    if let Some(address) = redis {
        flush(address);
    }
    let clock = MonotonicClock::new();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut nodes = Vec::new();
    for node in 0..NODES {
        let config = policy(redis, node, &args.sync, &args.per);
        let (filter, cluster) = match config.cluster {
            Some(cluster) => {
                let cluster = Arc::new(Cluster::new(cluster, clock, ClusterMetrics::new()));
                runtime.spawn(run(Arc::clone(&cluster), stop_rx.clone()));
                (
                    Filter::with_remote(config.policy, Arc::clone(&cluster) as _).expect("policy"),
                    Some(cluster),
                )
            }
            None => (Filter::new(config.policy).expect("policy"), None),
        };
        nodes.push((filter, cluster));
    }
    if redis.is_some() {
        let deadline = Instant::now() + Duration::from_secs(10);
        while nodes
            .iter()
            .any(|(_, c)| c.as_ref().is_some_and(|c| c.metrics().alone.get() == 1))
        {
            assert!(Instant::now() < deadline, "nodes did not join");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let nodes = Arc::new(nodes);
    let attacker = Source::from(Ipv4Addr::new(192, 0, 2, 1));
    let per_step = args.rate / 1000;
    // The attacker: 10 x the limit per period, cluster-wide, spread evenly.
    let period = tollgate_filter::parse_duration(&args.per).expect("a period");
    let attacker_per_second = (10 * LIMIT) as f64 / period.as_secs_f64();
    let attacker_every = ((args.rate * NODES as u64) as f64 / attacker_per_second) as u64;
    let steps = args.seconds * 1000;
    let suspects_sampled: Arc<std::sync::Mutex<Vec<(f64, f64)>>> = Arc::default();
    let threads: Vec<_> = (0..NODES)
        .map(|node| {
            let nodes = Arc::clone(&nodes);
            let sampled = Arc::clone(&suspects_sampled);
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(node as u64 + 1);
                let zipf = Zipf::new(sources as f64, 1.1).expect("zipf");
                let (filter, cluster) = &nodes[node];
                let start = Instant::now();
                let mut admitted = 0u64;
                let mut busy = Duration::ZERO;
                let mut decided = 0u64;
                let mut counter = node as u64;
                for step in 0..steps {
                    let began = Instant::now();
                    for _ in 0..per_step {
                        counter += 1;
                        let source = if counter.is_multiple_of(attacker_every) {
                            attacker
                        } else {
                            let id = match mix {
                                Mix::Zipf => zipf.sample(&mut rng) as u64 - 1,
                                Mix::Uniform => rng.random_range(0..sources),
                            };
                            Source::from(Ipv4Addr::from(0x0A00_0000 + id as u32))
                        };
                        let event = Event {
                            source,
                            transport: Transport::Tcp,
                            bytes: 60,
                        };
                        let verdict = filter.decide(&event, clock.now()).verdict;
                        if source == attacker && verdict == Verdict::Allow {
                            admitted += 1;
                        }
                    }
                    busy += began.elapsed();
                    decided += per_step;
                    if let Some(cluster) = cluster.as_ref().filter(|_| step % 100 == 0) {
                        let metrics = cluster.metrics();
                        sampled
                            .lock()
                            .unwrap()
                            .push((metrics.suspects.get() as f64, metrics.last_sync.get()));
                    }
                    let next = start + Duration::from_millis(step + 1);
                    if let Some(wait) = next.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                }
                (admitted, busy, decided)
            })
        })
        .collect();
    let results: Vec<(u64, Duration, u64)> = threads
        .into_iter()
        .map(|t| t.join().expect("node thread"))
        .collect();
    let attacker_admitted = results.iter().map(|r| r.0).sum();
    let decide_ns = results.iter().map(|r| r.1.as_nanos() as f64).sum::<f64>()
        / results.iter().map(|r| r.2 as f64).sum::<f64>().max(1.0);
    let keys = redis.map_or(0, redis_dbsize);
    let key_bytes = redis.map_or(0.0, key_bytes);
    let _ = stop_tx.send(true);
    let seconds = args.seconds as f64;
    let per_node = |f: &dyn Fn(&ClusterMetrics) -> f64| {
        nodes
            .iter()
            .filter_map(|(_, c)| c.as_ref())
            .map(|c| f(c.metrics()))
            .sum::<f64>()
            / NODES as f64
    };
    let sampled = suspects_sampled.lock().unwrap();
    Outcome {
        key_bytes,
        attacker_admitted,
        decide_ns,
        suspects: sampled.iter().map(|s| s.0).sum::<f64>() / sampled.len().max(1) as f64,
        commands: per_node(&|m| m.redis_commands.get() as f64) * NODES as f64 / seconds,
        sent: per_node(&|m| m.sent_bytes.get() as f64) / seconds,
        received: per_node(&|m| m.received_bytes.get() as f64) / seconds,
        sync_ms: 1000.0 * sampled.iter().map(|s| s.1).sum::<f64>() / sampled.len().max(1) as f64,
        overflow: per_node(&|m| m.suspects_overflow.get() as f64) as u64 * NODES as u64,
        errors: per_node(&|m| m.redis_errors.get() as f64) as u64 * NODES as u64,
        keys,
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.processes {
        let options =
            tollgate_benches::launch::tollgate_binary(args.tollgate.as_deref()).map(|tollgate| {
                processes::Options {
                    seconds: args.seconds.unwrap_or(20),
                    rate: args.rate.unwrap_or(10_000),
                    sources: args.sources.unwrap_or_else(|| vec![1000, 10_000_000]),
                    sync: args.sync.unwrap_or_else(|| "100ms".to_owned()),
                    tollgate,
                    interrupted: Arc::default(),
                }
            });
        return tollgate_benches::exit::exit_code(
            options
                .map_err(Into::into)
                .and_then(|options| processes::run(&options)),
        );
    }
    in_process(
        &Settings {
            seconds: args.seconds.unwrap_or(4),
            rate: args.rate.unwrap_or(100_000),
            sources: args
                .sources
                .unwrap_or_else(|| vec![1000, 100_000, 10_000_000]),
            sync: args.sync.unwrap_or_else(|| "200ms".to_owned()),
            per: args.per,
        },
        args.redis,
    );
    ExitCode::SUCCESS
}

/// The three nodes in this process.
fn in_process(args: &Settings, redis: Option<SocketAddr>) {
    let (_server, redis) = match redis {
        Some(address) => (None, address),
        None => {
            let (server, address) = start_redis();
            (Some(server), address)
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    println!(
        "3 nodes, {} decisions/s each for {} s per run, limit {LIMIT}/{} per address, sync {}, \
         threshold 0.25; one source at 10x the limit spread evenly over the nodes",
        args.rate, args.seconds, args.per, args.sync
    );
    println!(
        "admitted: that source's admitted events over the run, in limits (L); ops/s: commands \
         Redis ran for all 3 nodes; B/s/node: RESP bytes per node; decide: ns per decision"
    );
    println!(
        "{:>9} {:>7} | {:>8} {:>8} | {:>8} {:>8} | {:>8} {:>9} {:>10} {:>10} {:>7} {:>9} {:>9} {:>8}",
        "sources",
        "mix",
        "admitted",
        "alone",
        "decide",
        "alone",
        "suspects",
        "ops/s",
        "sent B/s/n",
        "recv B/s/n",
        "sync ms",
        "redis keys",
        "B/key",
        "ovfl/err"
    );
    for &sources in &args.sources {
        for mix in [Mix::Zipf, Mix::Uniform] {
            let shared = scenario(args, Some(redis), sources, mix, &runtime);
            let alone = scenario(args, None, sources, mix, &runtime);
            println!(
                "{:>9} {:>7} | {:>7.2}L {:>7.2}L | {:>8.0} {:>8.0} | {:>8.0} {:>9.0} {:>10.0} {:>10.0} {:>7.2} {:>9} {:>9.0} {:>4}/{:<3}",
                sources,
                format!("{mix:?}").to_lowercase(),
                shared.attacker_admitted as f64 / LIMIT as f64,
                alone.attacker_admitted as f64 / LIMIT as f64,
                shared.decide_ns,
                alone.decide_ns,
                shared.suspects,
                shared.commands,
                shared.sent,
                shared.received,
                shared.sync_ms,
                shared.keys,
                shared.key_bytes,
                shared.overflow,
                shared.errors,
            );
        }
    }
}
