//! The scenarios, one module each, and what they share: where clients connect from, how the
//! proxy's CPU is read around a run, and what a run hands to the report.
//!
//! Every scenario is bounded twice, by a count and by time, and every socket operation by
//! [`Sizes::op_timeout`]: a proxy that stalls costs a few seconds and a note, never a hang.

mod bulk;
mod connections;
mod latency;
mod udp;

use std::path::Path;
use std::time::Duration;

use tokio::runtime::Runtime;
use tollgate_benches::cpu;

pub(crate) use tollgate_benches::sources::source;
use tollgate_benches::upstream::Upstreams;

use crate::cli::{Scenario, Sizes};
use crate::peers::Peer;
use crate::report::Metric;
use crate::syscalls;

/// What the scenarios run with.
#[derive(Debug)]
pub(crate) struct Context<'a> {
    /// Drives the concurrent clients.
    pub(crate) runtime: &'a Runtime,
    /// The upstreams, for the sinks' counters.
    pub(crate) upstreams: &'a Upstreams,
    pub(crate) sizes: Sizes,
    /// Where strace writes its summaries (`--strace`).
    pub(crate) dir: &'a Path,
}

/// What one run of a scenario measured.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    /// Figures for the table.
    pub(crate) figures: Vec<(Metric, f64)>,
    /// Anything the reader should know (failed operations, drops).
    pub(crate) notes: Vec<String>,
    /// System calls per operation, by name (`--strace` only).
    pub(crate) syscalls: Vec<(String, f64)>,
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

/// What a proxy spent during one measured run.
#[derive(Debug, Default)]
pub(crate) struct Spent {
    /// CPU time (`None` for the direct column, and when traced: tracing inflates it).
    pub(crate) cpu: Option<Duration>,
    /// That CPU time split into user and system time (`None` also when no tick was counted).
    pub(crate) modes: Option<(Duration, Duration)>,
    /// Context switches of its threads (`None` for the direct column and when traced).
    pub(crate) switches: Option<u64>,
    /// System calls by name, with `--strace`.
    pub(crate) syscalls: Option<syscalls::Counts>,
}

/// The rows a scenario's [`Spent`] goes to: CPU, its user and system parts (if the scenario
/// shows them), and context switches.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rows {
    pub(crate) cpu: Metric,
    pub(crate) modes: Option<(Metric, Metric)>,
    pub(crate) switches: Metric,
}

impl Spent {
    /// Its figures per operation into `outcome`, in `rows`, and the syscall counts.
    pub(crate) fn record(&self, outcome: &mut Outcome, operations: u64, rows: Rows) {
        if let Some(cpu) = self.cpu {
            outcome
                .figures
                .push((rows.cpu, micros_per(cpu, operations)));
        }
        if let (Some((user, system)), Some((user_row, system_row))) = (self.modes, rows.modes) {
            outcome
                .figures
                .push((user_row, micros_per(user, operations)));
            outcome
                .figures
                .push((system_row, micros_per(system, operations)));
        }
        if let Some(switches) = self.switches {
            outcome
                .figures
                .push((rows.switches, switches as f64 / operations.max(1) as f64));
        }
        if let Some(counts) = &self.syscalls {
            outcome.syscalls.extend(
                counts
                    .iter()
                    .map(|(name, &calls)| (name.clone(), calls as f64 / operations.max(1) as f64)),
            );
        }
    }
}

/// Runs `body` and reads what the proxy spent on it: CPU and context switches from `/proc`,
/// or, with `--strace`, the system calls of its processes (and then neither of the others).
///
/// # Errors
/// The proxy exited during the run, or strace could not attach.
pub(crate) fn measured<T>(
    peer: &Peer,
    context: &Context<'_>,
    what: &str,
    body: impl FnOnce() -> T,
) -> Result<(T, Spent), String> {
    let Some(pid) = peer.pid() else {
        return Ok((body(), Spent::default()));
    };
    if context.sizes.strace {
        let mut pids = vec![pid];
        pids.extend(cpu::descendants(pid));
        let file = context
            .dir
            .join(format!("strace-{}-{what}.txt", peer.kind.name()));
        let trace = syscalls::Trace::attach(&pids, &file)?;
        let result = body();
        let counts = trace.finish()?;
        return Ok((
            result,
            Spent {
                syscalls: Some(counts),
                ..Spent::default()
            },
        ));
    }
    let switches_before =
        cpu::tree_switches(pid).map_err(|e| format!("cannot read switches: {e}"))?;
    let modes_before = cpu::tree_modes(pid).map_err(|e| format!("cannot read ticks: {e}"))?;
    let (result, cpu) = with_cpu(peer, body)?;
    let modes_after = cpu::tree_modes(pid).map_err(|e| format!("cannot read ticks: {e}"))?;
    let switches_after =
        cpu::tree_switches(pid).map_err(|e| format!("cannot read switches: {e}"))?;
    Ok((
        result,
        Spent {
            cpu,
            modes: cpu.and_then(|cpu| modes_after.split(modes_before, cpu)),
            switches: Some(switches_after.saturating_sub(switches_before)),
            syscalls: None,
        },
    ))
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
