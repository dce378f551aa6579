//! Latency one connection at a time: connect, 64 B echo, close, timed from before the socket is
//! made until after it is closed. Blocking sockets on this thread, so the figure holds no
//! scheduler hand-offs of the load generator's own.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

use super::connections::PAYLOAD;
use super::{Context, Failures, Outcome, Rows, Spent, measured, source};
use crate::peers::Peer;
use crate::report::Metric;

/// The /16 latency clients come from; each sample from the next address.
const LATENCY_NET: u8 = 2;

/// p50 and p99 of `sizes.latency_samples` sequential exchanges, in microseconds, and the
/// proxy's CPU and context switches per exchange (a proxy that sleeps between the steps of one
/// exchange wakes once per step: the switches show it).
pub(super) fn run(peer: &Peer, context: &Context<'_>) -> Result<Outcome, String> {
    let sizes = context.sizes;
    // `--strace` traces the short and rejected scenarios only: traced, latency means nothing.
    let ((samples, failures), spent) = if sizes.strace {
        (exchanges(peer, context), Spent::default())
    } else {
        measured(peer, context, "latency", || exchanges(peer, context))?
    };
    if samples.is_empty() {
        return Err(failures
            .note("latency", sizes.latency_samples)
            .unwrap_or_else(|| "no samples".to_owned()));
    }
    let mut outcome = Outcome::default();
    let micros = |q: f64| {
        let index = ((samples.len() - 1) as f64 * q).round() as usize;
        samples[index.min(samples.len() - 1)].as_secs_f64() * 1e6
    };
    outcome.figures.push((Metric::LatencyP50, micros(0.50)));
    outcome.figures.push((Metric::LatencyP99, micros(0.99)));
    spent.record(
        &mut outcome,
        samples.len() as u64,
        Rows {
            cpu: Metric::LatencyCpu,
            modes: Some((Metric::LatencyUser, Metric::LatencySystem)),
            switches: Metric::LatencySwitches,
        },
    );
    outcome
        .notes
        .extend(failures.note("latency exchanges", sizes.latency_samples));
    Ok(outcome)
}

/// The timed exchanges, sorted, and what failed.
fn exchanges(peer: &Peer, context: &Context<'_>) -> (Vec<Duration>, Failures) {
    let sizes = context.sizes;
    let deadline = Instant::now() + sizes.scenario_limit;
    let mut samples = Vec::new();
    let mut failures = Failures::default();
    for i in 0..sizes.latency_samples {
        if Instant::now() >= deadline {
            failures.record(format!(
                "time limit reached after {i} of {}",
                sizes.latency_samples
            ));
            break;
        }
        let start = Instant::now();
        match exchange(
            source(LATENCY_NET, i, sizes.latency_sources),
            peer.endpoints.echo,
            sizes.op_timeout,
        ) {
            Ok(()) => samples.push(start.elapsed()),
            Err(err) => failures.record(err),
        }
    }
    samples.sort_unstable();
    (samples, failures)
}

fn exchange(source: IpAddr, target: SocketAddr, timeout: Duration) -> io::Result<()> {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    socket.bind(&SocketAddr::new(source, 0).into())?;
    socket.connect_timeout(&target.into(), timeout)?;
    let mut stream: TcpStream = socket.into();
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.write_all(&PAYLOAD)?;
    let mut echoed = [0u8; PAYLOAD.len()];
    stream.read_exact(&mut echoed)?;
    if echoed != PAYLOAD {
        return Err(io::Error::other("echo differs from what was sent"));
    }
    Ok(())
}
