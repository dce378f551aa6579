//! The legitimate clients: hundreds of distinct sources, each far under every limit, each
//! doing one small exchange per [`Sizes::legit_interval`] from before the attack (the
//! baseline) until it ends. Every exchange is recorded with its start time, so one run yields
//! the baseline and the attacked figures.
//!
//! Three shapes: TCP straight from 127.1.x.y (connect, 64 B, read the echo, close); TCP through
//! a trusted balancer (127.0.0.201-207) whose PROXY v2 header names an IPv6 client, one /48
//! each; and UDP from 127.3.x.y (a request, its answer from the UDP echo).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UdpSocket;
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;
use tollgate::listeners::proxy_protocol::{V2Transport, encode_v2};
pub(crate) use tollgate_benches::sources::connect_from as connect;

use crate::cli::Sizes;

/// What each TCP exchange writes and expects back.
const PAYLOAD: [u8; 64] = [b'l'; 64];
/// Legitimate sources per /24 (or per /48 behind the balancer): far under the network limits.
const PER_NETWORK: usize = 8;

/// How the legitimate clients reach the proxy.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Route {
    /// TCP from their own addresses.
    Direct(SocketAddr),
    /// TCP through the trusted balancers, with PROXY v2 headers naming IPv6 clients.
    Balanced(SocketAddr),
    /// UDP request and answer.
    Udp(SocketAddr),
}

/// One exchange: when it started, and how long it took (`Err`: why it failed).
#[derive(Debug)]
pub(crate) struct Exchange {
    pub(crate) started: Instant,
    pub(crate) result: Result<Duration, String>,
}

/// Figures of the exchanges in one phase.
#[derive(Debug, Default, Clone)]
pub(crate) struct Phase {
    pub(crate) attempts: u64,
    pub(crate) served: u64,
    /// p99 latency of the served exchanges, in microseconds.
    pub(crate) p99_us: Option<f64>,
    /// The first few distinct failure reasons, with counts.
    pub(crate) failures: Vec<(String, u64)>,
}

impl Phase {
    /// The exchanges that started in `[from, to)`.
    pub(crate) fn of(exchanges: &[Exchange], from: Instant, to: Instant) -> Phase {
        let mut phase = Phase::default();
        let mut latencies = Vec::new();
        for exchange in exchanges
            .iter()
            .filter(|e| e.started >= from && e.started < to)
        {
            phase.attempts += 1;
            match &exchange.result {
                Ok(latency) => {
                    phase.served += 1;
                    latencies.push(*latency);
                }
                Err(why) => {
                    if let Some((_, count)) = phase.failures.iter_mut().find(|(w, _)| w == why) {
                        *count += 1;
                    } else if phase.failures.len() < 4 {
                        phase.failures.push((why.clone(), 1));
                    }
                }
            }
        }
        phase.p99_us = percentile(&mut latencies, 0.99).map(|d| d.as_secs_f64() * 1e6);
        phase
    }

    /// Served over attempted, in percent.
    pub(crate) fn success_percent(&self) -> f64 {
        if self.attempts == 0 {
            return 0.0;
        }
        self.served as f64 * 100.0 / self.attempts as f64
    }
}

/// The `q` quantile (nearest rank) of `values`, sorted in place.
pub(crate) fn percentile(values: &mut [Duration], q: f64) -> Option<Duration> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    let rank = ((values.len() as f64 * q).ceil() as usize).clamp(1, values.len());
    Some(values[rank - 1])
}

/// The running clients.
#[derive(Debug)]
pub(crate) struct Clients {
    tasks: Vec<JoinHandle<Vec<Exchange>>>,
}

impl Clients {
    /// Starts `sizes.legit` clients on `route`, spread evenly over one interval, each stopping
    /// at `end`.
    pub(crate) fn start(runtime: &Runtime, route: Route, sizes: &Sizes, end: Instant) -> Clients {
        let count = sizes.legit;
        let interval = sizes.legit_interval;
        let timeout = sizes.legit_timeout;
        let tasks = (0..count)
            .map(|i| {
                let offset = interval.mul_f64(i as f64 / count as f64);
                runtime.spawn(client(i, route, offset, interval, timeout, end))
            })
            .collect();
        Clients { tasks }
    }

    /// Waits for every client to stop and returns all exchanges.
    pub(crate) fn finish(self, runtime: &Runtime) -> Vec<Exchange> {
        runtime.block_on(async {
            let mut all = Vec::new();
            for task in self.tasks {
                if let Ok(exchanges) = task.await {
                    all.extend(exchanges);
                }
            }
            all
        })
    }
}

/// Client `i`'s IPv4 address: 127.`net`.(i / 8).(i % 8 + 1), eight per /24.
pub(crate) fn ipv4(net: u8, i: usize) -> IpAddr {
    let third = u8::try_from(i / PER_NETWORK).unwrap_or(u8::MAX);
    let fourth = u8::try_from(i % PER_NETWORK + 1).unwrap_or(u8::MAX);
    IpAddr::V4(Ipv4Addr::new(127, net, third, fourth))
}

/// Client `i`'s IPv6 address behind the balancer: 2001:db8:(0x1000 + i / 8):(i % 8)::1, eight
/// per /48 in distinct /64s.
fn ipv6(i: usize) -> IpAddr {
    let network = u16::try_from(0x1000 + i / PER_NETWORK).unwrap_or(u16::MAX);
    let subnet = u16::try_from(i % PER_NETWORK).unwrap_or(0);
    IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, network, subnet, 0, 0, 0, 1))
}

/// The balancer addresses legitimate traffic comes through (attack traffic uses .200): several,
/// so thousands of short connections do not run one address out of ports.
pub(crate) fn balancer(i: usize) -> IpAddr {
    let last = 201 + u8::try_from(i % 7).unwrap_or(0);
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
}

/// What the balancer's PROXY v2 header says for client address `client`.
pub(crate) fn proxy_header(client: IpAddr, port: u16) -> Vec<u8> {
    let destination = SocketAddr::new(
        IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
        443,
    );
    encode_v2(
        SocketAddr::new(client, port),
        destination,
        V2Transport::Stream,
    )
}

async fn client(
    i: usize,
    route: Route,
    offset: Duration,
    interval: Duration,
    timeout: Duration,
    end: Instant,
) -> Vec<Exchange> {
    let mut exchanges = Vec::new();
    let start = tokio::time::Instant::now() + offset;
    tokio::time::sleep_until(start).await;
    let udp = match route {
        Route::Udp(target) => match udp_socket(ipv4(3, i), target).await {
            Ok(socket) => Some(socket),
            Err(err) => {
                exchanges.push(Exchange {
                    started: Instant::now(),
                    result: Err(format!("cannot bind a UDP client: {err}")),
                });
                return exchanges;
            }
        },
        _ => None,
    };
    let mut sequence = 0u64;
    let mut next = start;
    // Bounded: stops at `end`, one exchange per interval.
    while Instant::now() < end {
        let started = Instant::now();
        let outcome = match (route, &udp) {
            (Route::Direct(target), _) => tcp(ipv4(1, i), target, None, timeout).await,
            (Route::Balanced(target), _) => {
                let header = proxy_header(ipv6(i), 40_000 + u16::try_from(i).unwrap_or(0));
                tcp(balancer(i), target, Some(&header), timeout).await
            }
            (Route::Udp(_), Some(socket)) => {
                sequence += 1;
                datagram(socket, sequence, timeout).await
            }
            (Route::Udp(_), None) => Err(io::Error::other("no socket")),
        };
        exchanges.push(Exchange {
            started,
            result: outcome.map(|()| started.elapsed()).map_err(|e| reason(&e)),
        });
        next += interval;
        tokio::time::sleep_until(next).await;
    }
    exchanges
}

/// A failure reason short enough to count by: the error kind, or its text for `Other`.
fn reason(err: &io::Error) -> String {
    match err.kind() {
        io::ErrorKind::Other => err.to_string(),
        kind => format!("{kind:?}"),
    }
}

/// One TCP exchange: connect from `source`, write `header` (if any) and [`PAYLOAD`], read the
/// echo, close.
async fn tcp(
    source: IpAddr,
    target: SocketAddr,
    header: Option<&[u8]>,
    timeout: Duration,
) -> io::Result<()> {
    let exchange = async {
        let mut stream = connect(source, target).await?;
        if let Some(header) = header {
            stream.write_all(header).await?;
        }
        stream.write_all(&PAYLOAD).await?;
        let mut echoed = [0u8; PAYLOAD.len()];
        stream.read_exact(&mut echoed).await?;
        if echoed != PAYLOAD {
            return Err(io::Error::other("echo differs"));
        }
        Ok(())
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "timed out"))?
}

async fn udp_socket(source: IpAddr, target: SocketAddr) -> io::Result<Arc<UdpSocket>> {
    let socket = UdpSocket::bind(SocketAddr::new(source, 0)).await?;
    socket.connect(target).await?;
    Ok(Arc::new(socket))
}

/// One UDP request with `sequence` in it, until its answer (late answers to earlier requests
/// are skipped) or `timeout`.
async fn datagram(socket: &UdpSocket, sequence: u64, timeout: Duration) -> io::Result<()> {
    let request = sequence.to_be_bytes();
    let exchange = async {
        socket.send(&request).await?;
        let mut buffer = [0u8; 64];
        // Bounded by the timeout around it.
        loop {
            let n = socket.recv(&mut buffer).await?;
            if buffer[..n] == request {
                return Ok(());
            }
        }
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no answer"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_is_nearest_rank() {
        let mut values: Vec<Duration> = (1..=100).rev().map(Duration::from_millis).collect();
        assert_eq!(
            percentile(&mut values, 0.99),
            Some(Duration::from_millis(99))
        );
        assert_eq!(
            percentile(&mut values, 0.5),
            Some(Duration::from_millis(50))
        );
        assert_eq!(percentile(&mut [], 0.99), None);
    }

    #[test]
    fn legitimate_sources_are_eight_per_network() {
        assert_eq!(ipv4(1, 0).to_string(), "127.1.0.1");
        assert_eq!(ipv4(1, 8).to_string(), "127.1.1.1");
        assert_eq!(ipv6(9).to_string(), "2001:db8:1001:1::1");
        assert_eq!(balancer(7).to_string(), "127.0.0.201");
    }

    #[test]
    fn phases_split_by_start_time_and_count_failures() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let exchanges = vec![
            Exchange {
                started: at(0),
                result: Ok(Duration::from_millis(1)),
            },
            Exchange {
                started: at(10),
                result: Err("TimedOut".to_owned()),
            },
            Exchange {
                started: at(20),
                result: Ok(Duration::from_millis(3)),
            },
        ];
        let late = Phase::of(&exchanges, at(5), at(30));
        assert_eq!((late.attempts, late.served), (2, 1));
        assert_eq!(late.failures, vec![("TimedOut".to_owned(), 1)]);
        assert!((late.success_percent() - 50.0).abs() < 1e-9);
        assert_eq!(Phase::of(&exchanges, at(0), at(5)).p99_us, Some(1000.0));
    }
}
