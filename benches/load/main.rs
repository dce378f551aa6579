//! The load benchmark: tollgate with real loopback sockets, next to a direct connection to the
//! upstream and, when installed, HAProxy and nginx, in the same run.
//!
//! ```text
//! cargo build --release -p tollgate
//! cargo run --release -p tollgate-benches --bin load -- [--quick] [--only direct,tollgate] [--json]
//! ```
//!
//! Clients come from many 127.x.y.z sources (all of 127.0.0.0/8 is loopback on Linux); the
//! upstreams (echo, TCP sink, UDP sink) run inside this tool
//! ([`tollgate_benches::upstream`]); each proxy is a child process with one worker thread and a
//! generated config ([`peers`]). Five scenarios ([`scenarios`]): short proxied connections,
//! refused connections, sequential latency, one long connection's throughput, and UDP
//! forwarding. Beside the rates, the proxy's CPU time per operation is read from `/proc`
//! ([`tollgate_benches::cpu`]): the load generator shares the two cores and saturates first, so
//! CPU per operation is the figure that compares the proxies. Each scenario runs `--repeat`
//! times per column, interleaved, and the table ([`report`]) shows medians.

mod cli;
mod peers;
mod pin;
mod report;
mod scenarios;
mod syscalls;

use std::error::Error;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use serde_json::json;
use tollgate_benches::exit::exit_code;
use tollgate_benches::kind::Kind;
use tollgate_benches::launch;
use tollgate_benches::machine;
use tollgate_benches::process::WorkDir;
use tollgate_benches::upstream::Upstreams;

use cli::Options;
use peers::Peer;
use report::Report;
use scenarios::Context;

fn main() -> ExitCode {
    let options = Options::parse();
    exit_code(run(&options))
}

fn run(options: &Options) -> Result<(), Box<dyn Error>> {
    let started = Instant::now();
    let sizes = options.sizes();
    let tollgate = launch::tollgate_binary(options.tollgate.as_deref())?;
    let command: Vec<String> = std::env::args().collect();
    let machine = machine::describe();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(options.client_threads.clamp(1, 64))
        .thread_name("load")
        .enable_all()
        .build()?;
    if let Some(cpu) = options.client_cpu {
        // After the runtime is built: `-a` sets its threads too.
        pin::pin(std::process::id(), cpu).map_err(|e| format!("--client-cpu {cpu}: {e}"))?;
    }
    let setup = peers::Setup {
        threads: options.proxy_threads.clamp(1, 64),
        cpu: options.proxy_cpu,
    };
    let dir = WorkDir::create("load")?;
    let upstreams = Upstreams::start(&runtime)?;

    let mut columns: Vec<Kind> = options.only.clone();
    columns.sort();
    columns.dedup();
    let mut peers = Vec::new();
    let mut skipped = Vec::new();
    for kind in columns {
        match Peer::start(kind, &upstreams, &dir, &tollgate, setup) {
            Ok(peer) => peers.push(peer),
            Err(err) => {
                eprintln!("{kind}: {err}");
                skipped.push(format!("{kind}: {err}"));
            }
        }
    }
    let mut report = Report::new(peers.iter().map(|p| p.kind).collect());
    for note in skipped {
        report.note(note);
    }

    let context = Context {
        runtime: &runtime,
        upstreams: &upstreams,
        sizes,
        dir: dir.path(),
    };
    let mut alive = vec![true; peers.len()];
    for &scenario in &options.scenarios {
        for round in 1..=sizes.repeat {
            for (peer, alive) in peers.iter_mut().zip(alive.iter_mut()) {
                if !*alive {
                    continue;
                }
                if let Err(why) = scenarios::applies(scenario, peer) {
                    if round == 1 && peer.kind != Kind::Direct {
                        report.note(format!("{}: {scenario:?} skipped: {why}", peer.kind));
                    }
                    continue;
                }
                match scenarios::run(scenario, peer, &context) {
                    Ok(outcome) => {
                        eprintln!(
                            "{scenario:?} {round}/{} {:>8}: {}",
                            sizes.repeat,
                            peer.kind.name(),
                            outcome
                                .figures
                                .iter()
                                .map(|(metric, value)| format!("{metric:?} {value:.1}"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        );
                        for (metric, value) in outcome.figures {
                            report.record(metric, peer.kind, value);
                        }
                        for (name, value) in outcome.syscalls {
                            report.record_syscall(scenario, name, peer.kind, value);
                        }
                        for note in outcome.notes {
                            report.note(format!("{} round {round}: {note}", peer.kind));
                        }
                    }
                    Err(err) => report.note(format!("{} {scenario:?}: {err}", peer.kind)),
                }
                if let Err(err) = peer.check_alive() {
                    report.note(format!("{}: stopped measuring: {err}", peer.kind));
                    *alive = false;
                }
            }
        }
    }
    // Stop the proxies before the upstreams they hold connections to.
    drop(peers);
    drop(upstreams);
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));

    let elapsed = started.elapsed().as_secs_f64();
    if options.json {
        let header = json!({
            "command": command,
            "machine": machine,
            "tollgate": tollgate.display().to_string(),
            "repeat": sizes.repeat,
            "proxy_threads": setup.threads,
            "client_cpu": options.client_cpu,
            "proxy_cpu": options.proxy_cpu,
            "seconds": elapsed,
        });
        println!("{}", serde_json::to_string_pretty(&report.json(header))?);
    } else {
        println!("command: {}", command.join(" "));
        println!(
            "  (= cargo run --release -p tollgate-benches --bin load -- {})",
            command.get(1..).unwrap_or_default().join(" ")
        );
        println!("machine: {machine}");
        println!(
            "medians of {} run(s) per cell; proxies run with {} worker thread(s){}; took {elapsed:.0} s\n",
            sizes.repeat,
            setup.threads,
            pinned(options),
        );
        print!("{}", report.table());
    }
    Ok(())
}

/// What the header says of pinning.
fn pinned(options: &Options) -> String {
    match (options.client_cpu, options.proxy_cpu) {
        (None, None) => String::new(),
        (client, proxy) => {
            let cpu = |c: Option<usize>| c.map_or_else(|| "any".to_owned(), |c| c.to_string());
            format!(
                ", clients on CPU {}, proxies on CPU {}",
                cpu(client),
                cpu(proxy)
            )
        }
    }
}
