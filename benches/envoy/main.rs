//! What Tollgate's rate-limit service adds to a request's latency through a real Envoy
//! (issue 31): one Envoy, two listeners with the same route to the same upstream, `plain`
//! without the `ratelimit` filter and `limited` with it (asking `tollgate run`'s `[rls]` about
//! the request's `x-api-key`, a fresh key of 100,000 per request, none over its limit). Each
//! rate is offered to both listeners in turn, open loop, and the table gives each one's p50
//! and p99 and the difference: the filter's cost, gRPC round trip and decision included.
//!
//! ```text
//! cargo build --release -p tollgate -p tollgate-benches
//! target/release/envoy-latency [--rates 1000,2000,...] [--seconds 5] [--rounds 3] \
//!     [--envoy PATH] [--tollgate PATH] [--quick]
//! ```
//!
//! # Load
//! A dispatcher enqueues requests at the rate (each stamped when enqueued) to 64 keep-alive
//! HTTP/1.1 connections, each sending its next request when the last is answered; a request's
//! latency runs from its stamp to the end of its answer, so time spent waiting for a free
//! connection counts (no coordinated omission). A run is *sustained* when it completed at
//! least 97% of the requests offered within its duration plus one second and every answer
//! was 200. Without `--rates`, the rates are 1,000 and then doubling from 2,000 while the
//! limited listener sustains them; the table reports 1,000 and the highest sustained one.
//!
//! # Processes
//! Envoy with `--concurrency 1`, `tollgate run` (release) and this tool (load and upstream on
//! one thread each) share the machine. Envoy's timeout for the call is raised to 1 s so a
//! slow answer is measured, not failed open; Envoy's `ratelimit.ok` counter is checked
//! against the requests sent, so every limited request was decided by Tollgate.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;
use tollgate_benches::exit::exit_code;
use tollgate_benches::launch::{free_tcp_ports, tollgate_binary};
use tollgate_benches::machine;
use tollgate_benches::process::{Process, WorkDir};
use tollgate_benches::table::{median, number, render};

/// Connections the load keeps open to each listener.
const CONNECTIONS: usize = 64;
/// A median latency past this (ms) says requests queue: the rate is not sustained.
const QUEUED_MS: f64 = 10.0;
/// Distinct API keys the limited requests cycle through.
const KEYS: u64 = 100_000;

/// Envoy's added latency with and without Tollgate's rate-limit filter.
#[derive(Debug, Parser)]
#[command(name = "envoy-latency")]
struct Options {
    /// Offered rates (requests/s), comma-separated [default: 1000, then doubling from 2000
    /// while sustained].
    #[arg(long, value_delimiter = ',')]
    rates: Vec<u64>,
    /// Seconds each listener is loaded at each rate.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Rounds: each runs both listeners at each rate; medians are shown.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// The Envoy binary [default: $TOLLGATE_ENVOY, else `envoy` on the PATH].
    #[arg(long)]
    envoy: Option<PathBuf>,
    /// The tollgate binary [default: `tollgate` beside this one].
    #[arg(long)]
    tollgate: Option<PathBuf>,
    /// One second per run, one round, 1,000 requests/s only: a smoke run.
    #[arg(long)]
    quick: bool,
}

fn main() -> std::process::ExitCode {
    exit_code(run(Options::parse()))
}

fn run(mut options: Options) -> Result<(), Box<dyn std::error::Error>> {
    if options.quick {
        options.seconds = 1;
        options.rounds = 1;
        options.rates = vec![1_000];
    }
    let dir = WorkDir::create("envoy-latency")?;
    let upstream_runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let upstream = upstream_runtime.block_on(TcpListener::bind("127.0.0.1:0"))?;
    let upstream_address = upstream.local_addr()?;
    let upstream_thread = std::thread::spawn(move || upstream_runtime.block_on(serve(upstream)));
    drop(upstream_thread);

    let ports = free_tcp_ports(5)?;
    let [rls, admin, tollgate_admin, plain, limited] = ports[..] else {
        unreachable!("five ports asked for")
    };
    let rls = SocketAddr::from(([127, 0, 0, 1], rls));
    let _tollgate = start_tollgate(&dir, options.tollgate.as_deref(), rls, tollgate_admin)?;
    let envoy_admin = SocketAddr::from(([127, 0, 0, 1], admin));
    let listeners = [
        ("plain", SocketAddr::from(([127, 0, 0, 1], plain))),
        ("limited", SocketAddr::from(([127, 0, 0, 1], limited))),
    ];
    let mut envoy = start_envoy(
        &dir,
        options.envoy.clone(),
        envoy_admin,
        &listeners,
        upstream_address,
        rls,
    )?;
    envoy.wait_ready(&[envoy_admin, listeners[0].1, listeners[1].1])?;
    ready(envoy_admin)?;

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    println!("machine: {}", machine::describe());
    println!(
        "envoy: {}",
        String::from_utf8_lossy(
            &Command::new(envoy_binary(options.envoy.clone()))
                .arg("--version")
                .output()?
                .stdout
        )
        .trim()
    );
    let searching = options.rates.is_empty();
    let mut rates = if searching {
        vec![1_000, 2_000]
    } else {
        options.rates.clone()
    };
    let duration = Duration::from_secs(options.seconds);
    // rates[i] -> per listener -> per round: (p50 ms, p99 ms, achieved/s, sustained)
    let mut results: Vec<[Vec<Run>; 2]> = Vec::new();
    let mut index = 0;
    let mut limited_sent = 0;
    while index < rates.len() {
        let rate = rates[index];
        let mut runs: [Vec<Run>; 2] = [Vec::new(), Vec::new()];
        for _ in 0..options.rounds {
            for (which, (name, address)) in listeners.iter().enumerate() {
                let run = runtime.block_on(load(*address, rate, duration, *name == "limited"));
                if *name == "limited" {
                    limited_sent += run.completed;
                }
                eprintln!(
                    "{rate}/s {name}: p50 {:.3} ms, p99 {:.3} ms, {:.0}/s{}",
                    run.p50_ms,
                    run.p99_ms,
                    run.achieved,
                    if run.sustained {
                        ""
                    } else {
                        " (not sustained)"
                    }
                );
                runs[which].push(run);
            }
        }
        let sustained = runs[1].iter().filter(|r| r.sustained).count() * 2 > runs[1].len();
        results.push(runs);
        if searching && sustained && index + 1 == rates.len() && rate >= 2_000 {
            rates.push(rate * 2);
        }
        if searching && !sustained {
            break;
        }
        index += 1;
    }
    let decided = counter(envoy_admin, "cluster.upstream.ratelimit.ok")?;
    let failed = counter(envoy_admin, "cluster.upstream.ratelimit.error")?
        + counter(
            envoy_admin,
            "cluster.upstream.ratelimit.failure_mode_allowed",
        )?;
    println!(
        "limited requests answered {limited_sent}; decided by Tollgate (Envoy's ratelimit.ok) \
         {decided}; failed open {failed}"
    );
    if failed > 0 {
        return Err(format!("{failed} calls to Tollgate failed: the figures are not its").into());
    }

    let mut rows = vec![
        [
            "offered/s",
            "plain p50 ms",
            "limited p50 ms",
            "added p50 ms",
            "plain p99 ms",
            "limited p99 ms",
            "added p99 ms",
            "limited achieved/s",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for (rate, runs) in rates.iter().zip(&results) {
        let med = |which: usize, f: fn(&Run) -> f64| {
            median(&runs[which].iter().map(f).collect::<Vec<_>>()).unwrap_or(f64::NAN)
        };
        let sustained = runs[1].iter().filter(|r| r.sustained).count() * 2 > runs[1].len();
        let (p50, p50l) = (med(0, |r| r.p50_ms), med(1, |r| r.p50_ms));
        let (p99, p99l) = (med(0, |r| r.p99_ms), med(1, |r| r.p99_ms));
        rows.push(vec![
            format!(
                "{}{}",
                number(*rate as f64),
                if sustained { "" } else { " (not sustained)" }
            ),
            format!("{p50:.3}"),
            format!("{p50l:.3}"),
            format!("{:.3}", p50l - p50),
            format!("{p99:.3}"),
            format!("{p99l:.3}"),
            format!("{:.3}", p99l - p99),
            number(med(1, |r| r.achieved)),
        ]);
    }
    println!("{}", render(&rows));
    Ok(())
}

/// One listener loaded at one rate.
#[derive(Debug, Clone)]
struct Run {
    p50_ms: f64,
    p99_ms: f64,
    achieved: f64,
    completed: u64,
    sustained: bool,
}

/// Offers `rate` requests/s to `address` for `duration`, open loop (see the module's docs).
async fn load(address: SocketAddr, rate: u64, duration: Duration, keyed: bool) -> Run {
    let (send, receive) = tokio::sync::mpsc::unbounded_channel::<(Instant, u64)>();
    let receive = Arc::new(Mutex::new(receive));
    let mut workers = Vec::new();
    for _ in 0..CONNECTIONS {
        let receive = Arc::clone(&receive);
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let Ok(stream) = TcpStream::connect(address).await else {
                return (latencies, 1);
            };
            let _ = stream.set_nodelay(true);
            let (read, mut write) = stream.into_split();
            let mut read = BufReader::new(read);
            let mut failed = 0u64;
            // The next request, whichever idle connection asks first; none once the
            // dispatcher is done and the queue empty.
            loop {
                // The lock is held while waiting (one idle connection waits at a time), not
                // while the request is out.
                let next = receive.lock().await.recv().await;
                let Some((stamp, i)) = next else { break };
                let key = if keyed {
                    format!("x-api-key: k{}\r\n", i % KEYS)
                } else {
                    String::new()
                };
                let request = format!("GET /v1/items HTTP/1.1\r\nhost: bench\r\n{key}\r\n");
                match exchange(&mut read, &mut write, request.as_bytes()).await {
                    Some(200) => latencies.push(stamp.elapsed()),
                    _ => failed += 1,
                }
            }
            (latencies, failed)
        }));
    }
    let start = Instant::now();
    let total = rate * duration.as_secs();
    let mut sent = 0;
    while sent < total {
        let due = ((start.elapsed().as_secs_f64() * rate as f64) as u64).min(total);
        let now = Instant::now();
        for i in sent..due {
            let _ = send.send((now, i));
        }
        sent = due;
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    drop(send);
    let grace = duration + Duration::from_secs(1);
    let mut latencies = Vec::new();
    let mut failed = 0u64;
    for mut worker in workers {
        let left = grace.saturating_sub(start.elapsed());
        match tokio::time::timeout(left, &mut worker).await {
            Ok(Ok((got, bad))) => {
                latencies.extend(got);
                failed += bad;
            }
            // Still busy past the grace: the rate was not sustained (and its backlog must
            // not load the next run).
            _ => {
                worker.abort();
                failed += 1;
            }
        }
    }
    latencies.sort();
    let completed = latencies.len() as u64;
    let at = |q: f64| {
        latencies
            .get(((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1)))
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
    };
    Run {
        p50_ms: at(0.50),
        p99_ms: at(0.99),
        achieved: completed as f64 / duration.as_secs_f64(),
        completed,
        sustained: failed == 0 && completed * 100 >= total * 97 && at(0.50) < QUEUED_MS,
    }
}

/// Sends one request and reads its answer (status line, headers, `content-length` body);
/// the status, or `None` if the connection failed.
async fn exchange(
    read: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
    write: &mut tokio::net::tcp::OwnedWriteHalf,
    request: &[u8],
) -> Option<u16> {
    write.write_all(request).await.ok()?;
    let mut line = String::new();
    read.read_line(&mut line).await.ok()?;
    let status = line.split(' ').nth(1)?.parse().ok()?;
    let mut length = 0usize;
    loop {
        line.clear();
        if read.read_line(&mut line).await.ok()? == 0 {
            return None;
        }
        if line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; length];
    read.read_exact(&mut body).await.ok()?;
    Some(status)
}

/// The upstream: `200 ok` to every request, keep-alive.
async fn serve(listener: TcpListener) {
    while let Ok((stream, _)) = listener.accept().await {
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let (read, mut write) = stream.into_split();
            let mut read = BufReader::new(read);
            let mut line = String::new();
            loop {
                line.clear();
                match read.read_line(&mut line).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) if line == "\r\n" => {
                        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if write.write_all(answer).await.is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                }
            }
        });
    }
}

fn envoy_binary(explicit: Option<PathBuf>) -> PathBuf {
    explicit
        .or_else(|| std::env::var_os("TOLLGATE_ENVOY").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("envoy"))
}

/// `tollgate run` serving `[rls]` at `rls`: one rule, 1,000,000 a second per API key (no key
/// is ever over it: every request is decided and served).
fn start_tollgate(
    dir: &WorkDir,
    explicit: Option<&std::path::Path>,
    rls: SocketAddr,
    admin: u16,
) -> Result<Process, Box<dyn std::error::Error>> {
    dir.write(
        "api.yaml",
        "domain: api\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: second, requests_per_unit: 1000000}\n",
    )?;
    let config = dir.write(
        "tollgate.toml",
        &format!(
            "[admin]\nlisten = \"127.0.0.1:{admin}\"\n[rls]\nlisten = \"{rls}\"\nconfigs = [\"api.yaml\"]\n"
        ),
    )?;
    let binary = tollgate_binary(explicit)?;
    let mut command = Command::new(&binary);
    command
        .arg("run")
        .arg("--config")
        .arg(config)
        .env("RUST_LOG", "warn");
    let mut process = Process::spawn("tollgate", command, dir.path())?;
    process.wait_ready(&[rls])?;
    Ok(process)
}

/// One listener of the bootstrap: the same route to `upstream`, with the rate-limit filter
/// and the route's `x-api-key` descriptor when `limited`.
fn listener(name: &str, address: SocketAddr, limited: bool) -> String {
    let (rate_limits, filter) = if limited {
        (
            "
                            rate_limits:
                              - actions:
                                  - request_headers: {header_name: x-api-key, descriptor_key: api_key}",
            "
                  - name: envoy.filters.http.ratelimit
                    typed_config:
                      \"@type\": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
                      domain: api
                      timeout: 1s
                      rate_limit_service:
                        transport_api_version: V3
                        grpc_service:
                          envoy_grpc: {cluster_name: tollgate_rls}",
        )
    } else {
        ("", "")
    };
    format!(
        "
    - name: {name}
      address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}
      filter_chains:
        - filters:
            - name: envoy.filters.network.http_connection_manager
              typed_config:
                \"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
                stat_prefix: {name}
                route_config:
                  virtual_hosts:
                    - name: api
                      domains: [\"*\"]
                      routes:
                        - match: {{prefix: \"/\"}}
                          route:
                            cluster: upstream{rate_limits}
                http_filters:{filter}
                  - name: envoy.filters.http.router
                    typed_config:
                      \"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router",
        port = address.port()
    )
}

/// Envoy with an admin at `admin`, the `listeners`, and the clusters of the upstream and of
/// Tollgate (HTTP/2).
fn start_envoy(
    dir: &WorkDir,
    explicit: Option<PathBuf>,
    admin: SocketAddr,
    listeners: &[(&str, SocketAddr)],
    upstream: SocketAddr,
    rls: SocketAddr,
) -> Result<Process, Box<dyn std::error::Error>> {
    let listeners: String = listeners
        .iter()
        .map(|(name, address)| listener(name, *address, *name == "limited"))
        .collect();
    let cluster = |name: &str, address: SocketAddr, http2: bool| {
        let protocol = if http2 {
            "
      typed_extension_protocol_options:
        envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
          \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
          explicit_http_config:
            http2_protocol_options: {}"
        } else {
            ""
        };
        format!(
            "
    - name: {name}
      type: STATIC{protocol}
      load_assignment:
        cluster_name: {name}
        endpoints:
          - lb_endpoints:
              - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {}}}}}}}",
            address.port()
        )
    };
    let bootstrap = format!(
        "admin:\n  address: {{socket_address: {{address: 127.0.0.1, port_value: {}}}}}\n\
         static_resources:\n  listeners:{listeners}\n  clusters:{}{}\n",
        admin.port(),
        cluster("upstream", upstream, false),
        cluster("tollgate_rls", rls, true),
    );
    let path = dir.write("envoy.yaml", &bootstrap)?;
    let mut command = Command::new(envoy_binary(explicit));
    command.arg("--config-path").arg(path).args([
        "--disable-hot-restart",
        "--concurrency",
        "1",
        "--log-level",
        "warn",
    ]);
    Ok(Process::spawn("envoy", command, dir.path())?)
}

/// A GET to Envoy's admin: status and body.
fn admin_get(admin: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(admin)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.write_all(
        format!("GET {path} HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n").as_bytes(),
    )?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    Ok((status, body))
}

/// Waits (bounded) until Envoy's `/ready` answers 200.
fn ready(admin: SocketAddr) -> Result<(), Box<dyn std::error::Error>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while admin_get(admin, "/ready").map(|(s, _)| s).unwrap_or(0) != 200 {
        if Instant::now() > deadline {
            return Err("envoy not ready within 30 s".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Envoy's counter `name`, 0 when absent.
fn counter(admin: SocketAddr, name: &str) -> Result<u64, Box<dyn std::error::Error>> {
    let (_, body) = admin_get(admin, &format!("/stats?filter=^{name}$"))?;
    Ok(body
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{name}: ")))
        .map_or(Ok(0), |v| v.trim().parse())?)
}
