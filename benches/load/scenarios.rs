//! The scenarios, one module each, and what they share: where clients connect from, how the
//! proxy's CPU is read around a run, and what a run hands to the report.
//!
//! Every scenario is bounded twice, by a count and by time, and every socket operation by
//! [`Sizes::op_timeout`]: a proxy that stalls costs a few seconds and a note, never a hang.

mod bulk;
mod connections;
mod latency;
mod udp;

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use tokio::runtime::Runtime;

use crate::cli::{Scenario, Sizes};
use crate::peers::Peer;
use crate::report::Metric;
use crate::upstream::Upstreams;

/// What the scenarios run with.
#[derive(Debug)]
pub(crate) struct Context<'a> {
    /// Drives the concurrent clients.
    pub(crate) runtime: &'a Runtime,
    /// The upstreams, for the sinks' counters.
    pub(crate) upstreams: &'a Upstreams,
    pub(crate) sizes: Sizes,
}

/// What one run of a scenario measured.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    /// Figures for the table.
    pub(crate) figures: Vec<(Metric, f64)>,
    /// Anything the reader should know (failed operations, drops).
    pub(crate) notes: Vec<String>,
}

/// Runs `scenario` once against `peer`.
///
/// # Errors
/// Why the scenario could not run at all against this column (a failed operation is a note,
/// not an error).
pub(crate) fn run(
    scenario: Scenario,
    peer: &Peer,
    context: &Context<'_>,
) -> Result<Outcome, String> {
    match scenario {
        Scenario::Short => connections::short(peer, context),
        Scenario::Rejected => connections::rejected(peer, context),
        Scenario::Latency => latency::run(peer, context),
        Scenario::Bulk => bulk::run(peer, context),
        Scenario::Udp => udp::run(peer, context),
    }
}

/// Whether `scenario` means anything for `peer` (the direct column refuses nobody; HAProxy
/// carries no UDP).
pub(crate) fn applies(scenario: Scenario, peer: &Peer) -> Result<(), &'static str> {
    match scenario {
        Scenario::Rejected if !peer.endpoints.rejects => Err("refuses nobody"),
        Scenario::Udp if peer.endpoints.udp.is_none() => Err("has no UDP proxying"),
        _ => Ok(()),
    }
}

/// Source address `i` of a rotation over `count` addresses of 127.`net`.0.0/16, from
/// 127.`net`.0.1: 250 per /24, so no address ends in .0 or .255. All of 127.0.0.0/8 is
/// loopback on Linux, so each is a distinct client to the proxy.
pub(crate) fn source(net: u8, i: u64, count: u64) -> IpAddr {
    let j = i % count.clamp(1, 250 * 256);
    // Both fit a byte: j < 64_000, so j / 250 < 256 and j % 250 + 1 <= 250.
    let third = u8::try_from(j / 250).unwrap_or(u8::MAX);
    let fourth = u8::try_from(j % 250 + 1).unwrap_or(u8::MAX);
    IpAddr::V4(Ipv4Addr::new(127, net, third, fourth))
}

/// The proxy CPU time `body` took (`None` for the direct column), with `body`'s result.
///
/// # Errors
/// The proxy exited during the run.
pub(crate) fn with_cpu<T>(
    peer: &Peer,
    body: impl FnOnce() -> T,
) -> Result<(T, Option<Duration>), String> {
    let before = peer
        .cpu()
        .transpose()
        .map_err(|e| format!("cannot read CPU: {e}"))?;
    let result = body();
    let after = peer
        .cpu()
        .transpose()
        .map_err(|e| format!("cannot read CPU: {e}"))?;
    let spent = before.zip(after).map(|(b, a)| a.saturating_sub(b));
    Ok((result, spent))
}

/// Microseconds of CPU per operation.
pub(crate) fn micros_per(cpu: Duration, operations: u64) -> f64 {
    cpu.as_secs_f64() * 1e6 / operations.max(1) as f64
}

/// Operations that failed in one run, reported as a note.
#[derive(Debug, Default)]
pub(crate) struct Failures {
    pub(crate) count: u64,
    pub(crate) first: Option<String>,
}

impl Failures {
    pub(crate) fn record(&mut self, error: impl ToString) {
        self.count += 1;
        if self.first.is_none() {
            self.first = Some(error.to_string());
        }
    }

    pub(crate) fn merge(&mut self, other: Failures) {
        self.count += other.count;
        if self.first.is_none() {
            self.first = other.first;
        }
    }

    /// A note if anything failed.
    pub(crate) fn note(&self, what: &str, of: u64) -> Option<String> {
        (self.count > 0).then(|| {
            format!(
                "{what}: {} of {of} failed (first: {})",
                self.count,
                self.first.as_deref().unwrap_or("?")
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_rotate_within_the_range_and_skip_0_and_255() {
        assert_eq!(source(1, 0, 10_000).to_string(), "127.1.0.1");
        assert_eq!(source(1, 249, 10_000).to_string(), "127.1.0.250");
        assert_eq!(source(1, 250, 10_000).to_string(), "127.1.1.1");
        assert_eq!(source(1, 9_999, 10_000).to_string(), "127.1.39.250");
        assert_eq!(source(1, 10_000, 10_000), source(1, 0, 10_000));
        assert_eq!(source(9, 63_999, u64::MAX).to_string(), "127.9.255.250");
    }
}
