//! The command line, and the sizes it resolves to: full-run defaults, `--quick` ones, and any
//! size given explicitly on top of either.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

use tollgate_benches::kind::Kind;

/// Load benchmark of tollgate with real loopback sockets, against a direct connection to the
/// upstream and, when installed, HAProxy and nginx.
#[derive(Debug, Parser)]
#[command(name = "load")]
pub(crate) struct Options {
    /// Small sizes and one run each: the whole run finishes in under 30 s.
    #[arg(long)]
    pub(crate) quick: bool,
    /// The columns to measure, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "direct,tollgate,haproxy,nginx"
    )]
    pub(crate) only: Vec<Kind>,
    /// The scenarios to run, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "short,rejected,latency,bulk,udp"
    )]
    pub(crate) scenarios: Vec<Scenario>,
    /// The tollgate release binary [default: `tollgate` next to this executable].
    #[arg(long)]
    pub(crate) tollgate: Option<PathBuf>,
    /// Runs of each scenario per column; the table shows medians [default: 3, quick 1].
    #[arg(long)]
    pub(crate) repeat: Option<usize>,
    /// Connections in the short and rejected scenarios [default: 20000, quick 2000].
    #[arg(long)]
    pub(crate) connections: Option<u64>,
    /// Connections open at once in the short and rejected scenarios.
    #[arg(long, default_value_t = 64)]
    pub(crate) concurrency: usize,
    /// Sequential connections timed in the latency scenario [default: 2000, quick 300].
    #[arg(long)]
    pub(crate) latency_samples: Option<u64>,
    /// MiB written through one connection in the bulk scenario [default: 4096, quick 512].
    #[arg(long)]
    pub(crate) bulk_mib: Option<u64>,
    /// Seconds the bulk scenario may write for at most [default: 10, quick 2].
    #[arg(long)]
    pub(crate) bulk_secs: Option<f64>,
    /// Seconds of UDP sending [default: 5, quick 1].
    #[arg(long)]
    pub(crate) udp_secs: Option<f64>,
    /// UDP client sockets, each a separate source (and a proxy session).
    #[arg(long, default_value_t = 4)]
    pub(crate) udp_clients: usize,
    /// UDP datagrams in flight at most (sent, not yet seen by the sink).
    #[arg(long, default_value_t = 128)]
    pub(crate) udp_window: u64,
    /// Threads of the load generator's runtime (clients and echo upstream).
    #[arg(long, default_value_t = 2)]
    pub(crate) client_threads: usize,
    /// Worker threads of each proxy: tollgate's `threads`, HAProxy's `nbthread`, nginx's
    /// `worker_processes`.
    #[arg(long, default_value_t = 1)]
    pub(crate) proxy_threads: usize,
    /// Pins this tool (its clients, the echo and sink upstreams, every thread) to this CPU,
    /// with `taskset` (give `--proxy-cpu` too, so that the two sides do not share a core).
    #[arg(long)]
    pub(crate) client_cpu: Option<usize>,
    /// Pins every proxy (each process and thread of it) to this CPU, with `taskset`.
    #[arg(long)]
    pub(crate) proxy_cpu: Option<usize>,
    /// Distinct sources the latency scenario rotates over (one address per sample).
    #[arg(long, default_value_t = 10_000)]
    pub(crate) latency_sources: u64,
    /// Count the proxies' system calls per connection in the short and rejected scenarios with
    /// `strace -c -f` attached (their rates and CPU are then not recorded: tracing slows them).
    #[arg(long)]
    pub(crate) strace: bool,
    /// Print the results as JSON instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// One scenario of the benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub(crate) enum Scenario {
    /// Many short proxied connections: connect, 64 B echo, close.
    Short,
    /// Connections from a blocked prefix, refused at accept.
    Rejected,
    /// Sequential short connections, timed one by one.
    Latency,
    /// One long connection writing into a sink.
    Bulk,
    /// 64-byte datagrams into a sink.
    Udp,
}

/// How much each scenario does, resolved from the options.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sizes {
    pub(crate) repeat: usize,
    pub(crate) connections: u64,
    pub(crate) concurrency: usize,
    /// Distinct blocked sources the rejected scenario rotates over (each warmed up once).
    pub(crate) rejected_sources: u64,
    pub(crate) latency_samples: u64,
    /// Distinct sources the latency scenario rotates over.
    pub(crate) latency_sources: u64,
    pub(crate) bulk_bytes: u64,
    pub(crate) bulk_time: Duration,
    pub(crate) udp_time: Duration,
    pub(crate) udp_clients: usize,
    pub(crate) udp_window: u64,
    /// The longest any single connect, write or read may take.
    pub(crate) op_timeout: Duration,
    /// The longest a connection scenario may run, whatever its count.
    pub(crate) scenario_limit: Duration,
    /// Count system calls with strace instead of reading CPU (`--strace`).
    pub(crate) strace: bool,
}

impl Options {
    /// The sizes: `--quick` or full defaults, overridden by explicit flags.
    pub(crate) fn sizes(&self) -> Sizes {
        let pick = |explicit: Option<u64>, full: u64, quick: u64| {
            explicit.unwrap_or(if self.quick { quick } else { full })
        };
        let secs = |explicit: Option<f64>, full: f64, quick: f64| {
            let value = explicit.unwrap_or(if self.quick { quick } else { full });
            Duration::from_secs_f64(value.clamp(0.1, 600.0))
        };
        Sizes {
            repeat: self.repeat.unwrap_or(if self.quick { 1 } else { 3 }).max(1),
            connections: pick(self.connections, 20_000, 2_000).max(1),
            concurrency: self.concurrency.clamp(1, 4096),
            rejected_sources: if self.quick { 200 } else { 1_000 },
            latency_samples: pick(self.latency_samples, 2_000, 300).max(1),
            latency_sources: self.latency_sources.clamp(1, 60_000),
            bulk_bytes: pick(self.bulk_mib, 4_096, 512).max(1) << 20,
            bulk_time: secs(self.bulk_secs, 10.0, 2.0),
            udp_time: secs(self.udp_secs, 5.0, 1.0),
            udp_clients: self.udp_clients.clamp(1, 250),
            udp_window: self.udp_window.max(1),
            op_timeout: Duration::from_secs(3),
            scenario_limit: Duration::from_secs(if self.quick { 10 } else { 60 }),
            strace: self.strace,
        }
    }
}
