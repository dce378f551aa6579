//! The command line, and the sizes it resolves to: full-run defaults or `--quick` ones.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use tollgate_benches::kind::Kind;

/// Attacks on loopback against tollgate and, when installed, HAProxy and nginx configured to
/// the same limits, each while legitimate clients keep working; prints whether they are still
/// served.
#[derive(Debug, Parser)]
#[command(name = "attack")]
pub(crate) struct Options {
    /// A smoke run: every attack small and a second or two long (about 70 s in all).
    #[arg(long)]
    pub(crate) quick: bool,
    /// The attacks to run, comma-separated [default: all].
    #[arg(long, value_delimiter = ',')]
    pub(crate) only: Vec<Attack>,
    /// The proxies to attack, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "tollgate,haproxy,nginx")]
    pub(crate) peers: Vec<Kind>,
    /// Also write every row as CSV to this file.
    #[arg(long)]
    pub(crate) csv: Option<PathBuf>,
    /// The tollgate release binary [default: `tollgate` next to this executable].
    #[arg(long)]
    pub(crate) tollgate: Option<PathBuf>,
    /// Seconds each attack lasts (the legitimate clients run through it) [default: 10, quick 1].
    #[arg(long)]
    pub(crate) seconds: Option<f64>,
    /// Legitimate TCP and UDP clients, each its own source [default: 200, quick 20].
    #[arg(long)]
    pub(crate) legit: Option<usize>,
}

/// One named attack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, ValueEnum)]
pub(crate) enum Attack {
    /// Connections as fast as allowed from a few sources.
    Flood,
    /// One connection each from 100k+ distinct sources, rate-bounded.
    Distributed,
    /// One source over a `delay` rule, holding thousands of connections.
    Tarpit,
    /// Idle connections from one /24, each address within its limits, held.
    #[value(name = "idle-24")]
    Idle24,
    /// Idle connections from one IPv6 /48 through PROXY v2 from a trusted balancer, held.
    #[value(name = "idle-48")]
    Idle48,
    /// One datagram each from 20k+ loopback sources.
    #[value(name = "udp-spoof")]
    UdpSpoof,
    /// Thousands of idle and trickling connections to the admin port; /metrics scraped.
    #[value(name = "admin-slowloris")]
    AdminSlowloris,
    /// A trusted balancer trickling its PROXY headers one byte at a time.
    #[value(name = "proxy-trickle")]
    ProxyTrickle,
}

impl Attack {
    /// Every attack, in the order they run.
    pub(crate) const ALL: [Attack; 8] = [
        Attack::Flood,
        Attack::Distributed,
        Attack::Tarpit,
        Attack::Idle24,
        Attack::Idle48,
        Attack::UdpSpoof,
        Attack::AdminSlowloris,
        Attack::ProxyTrickle,
    ];

    /// The name on the command line and in the table.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Attack::Flood => "flood",
            Attack::Distributed => "distributed",
            Attack::Tarpit => "tarpit",
            Attack::Idle24 => "idle-24",
            Attack::Idle48 => "idle-48",
            Attack::UdpSpoof => "udp-spoof",
            Attack::AdminSlowloris => "admin-slowloris",
            Attack::ProxyTrickle => "proxy-trickle",
        }
    }
}

/// How much each phase and attack does, resolved from the options.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sizes {
    /// Legitimate clients alone, before the attack: the latency baseline.
    pub(crate) baseline: Duration,
    /// The attack, legitimate clients running through it.
    pub(crate) attack: Duration,
    /// Legitimate clients (TCP, and UDP in the UDP attack).
    pub(crate) legit: usize,
    /// Each legitimate client's pause between operations.
    pub(crate) legit_interval: Duration,
    /// The longest a legitimate operation may take before it counts as failed.
    pub(crate) legit_timeout: Duration,
    /// Flood: attacking sources, and connections open at once over all of them.
    pub(crate) flood_sources: u64,
    pub(crate) flood_concurrency: usize,
    /// Flood: new connections per second at most.
    pub(crate) flood_rate: u64,
    /// Distributed: distinct sources (one connection each) and their rate.
    pub(crate) distributed_sources: u64,
    pub(crate) distributed_rate: u64,
    /// Tarpit: new connections per second from the one source, and held at once at most.
    pub(crate) tarpit_rate: u64,
    pub(crate) tarpit_held: usize,
    /// Idle holds: connections held, and opened per second (within the /24 or /48 rate).
    pub(crate) idle_connections: u64,
    pub(crate) idle_rate: u64,
    /// UDP: spoofed sources (one datagram each) and their rate.
    pub(crate) udp_sources: u64,
    pub(crate) udp_rate: u64,
    /// Admin slowloris: connections held, opened per second.
    pub(crate) admin_connections: u64,
    pub(crate) admin_rate: u64,
    /// PROXY trickle: connections, opened per second, and the pause between header bytes.
    pub(crate) trickle_connections: u64,
    pub(crate) trickle_rate: u64,
    pub(crate) trickle_gap: Duration,
}

impl Options {
    /// The sizes: `--quick` or full defaults, with `--seconds` and `--legit` on top.
    pub(crate) fn sizes(&self) -> Sizes {
        let quick = self.quick;
        let pick = |full: u64, small: u64| if quick { small } else { full };
        let attack = self.seconds.unwrap_or(if quick { 1.0 } else { 10.0 });
        Sizes {
            baseline: Duration::from_secs(pick(4, 1)),
            attack: Duration::from_secs_f64(attack.clamp(1.0, 300.0)),
            legit: self
                .legit
                .unwrap_or(if quick { 50 } else { 200 })
                .clamp(1, 2000),
            legit_interval: Duration::from_secs(1),
            legit_timeout: Duration::from_secs(2),
            flood_sources: 4,
            flood_concurrency: 64,
            flood_rate: pick(1_500, 1_000),
            distributed_sources: pick(100_000, 2_000),
            distributed_rate: pick(2_500, 2_000),
            tarpit_rate: pick(1_000, 500),
            tarpit_held: usize::try_from(pick(3_000, 600)).unwrap_or(600),
            idle_connections: pick(720, 90),
            idle_rate: 90,
            udp_sources: pick(20_000, 1_000),
            udp_rate: pick(2_500, 1_000),
            admin_connections: pick(3_000, 300),
            admin_rate: pick(1_000, 300),
            trickle_connections: pick(1_000, 200),
            trickle_rate: pick(200, 100),
            trickle_gap: Duration::from_millis(500),
        }
    }
}
