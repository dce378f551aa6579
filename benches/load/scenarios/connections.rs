//! Many short connections at once: proxied ones (connect, write 64 B, read the echo, close)
//! and refused ones (connect from the blocked prefix, see the reset or close). Each source is a
//! different loopback address, so the proxy sees as many clients as a real front door would.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tollgate_benches::sources::connect_from as connect;

use super::{Context, Failures, Outcome, Rows, measured, source};
use crate::peers::Peer;
use crate::report::Metric;

/// The bytes each proxied connection echoes.
pub(super) const PAYLOAD: [u8; 64] = [b'x'; 64];
/// Addresses the short scenario rotates over: 127.1.0.1 to 127.1.39.250.
const SHORT_SOURCES: u64 = 10_000;
/// The /16 short connections come from.
const SHORT_NET: u8 = 1;
/// The /16 refused connections come from (the peers' blocked prefix).
const BLOCKED_NET: u8 = 9;

/// Short proxied connections: conn/s and proxy CPU per connection.
pub(super) fn short(peer: &Peer, context: &Context<'_>) -> Result<Outcome, String> {
    let sizes = context.sizes;
    let target = peer.endpoints.echo;
    let timeout = sizes.op_timeout;
    let ((done, failures, elapsed), spent) = measured(peer, context, "short", || {
        many(context, sizes.connections, move |i| {
            echo_once(source(SHORT_NET, i, SHORT_SOURCES), target, timeout)
        })
    })?;
    let mut outcome = Outcome::default();
    if !sizes.strace {
        outcome
            .figures
            .push((Metric::ShortRate, done as f64 / elapsed.as_secs_f64()));
    }
    spent.record(
        &mut outcome,
        done,
        Rows {
            cpu: Metric::ShortCpu,
            modes: Some((Metric::ShortUser, Metric::ShortSystem)),
            switches: Metric::ShortSwitches,
        },
    );
    outcome
        .notes
        .extend(failures.note("short connections", sizes.connections));
    Ok(outcome)
}

/// Refused connections: conn/s and proxy CPU per refusal. Each blocked source first makes one
/// connection, unmeasured: tollgate's `1/1h` rule lets a source's first connection through.
pub(super) fn rejected(peer: &Peer, context: &Context<'_>) -> Result<Outcome, String> {
    let sizes = context.sizes;
    let target = peer.endpoints.echo;
    let timeout = sizes.op_timeout;
    let sources = sizes.rejected_sources;
    let _ = many(context, sources, move |i| {
        refused_once(source(BLOCKED_NET, i, sources), target, timeout)
    });
    let ((refused, failures, elapsed), spent) = measured(peer, context, "rejected", || {
        many(context, sizes.connections, move |i| {
            refused_once(source(BLOCKED_NET, i, sources), target, timeout)
        })
    })?;
    let mut outcome = Outcome::default();
    if !sizes.strace {
        outcome
            .figures
            .push((Metric::RejectedRate, refused as f64 / elapsed.as_secs_f64()));
    }
    spent.record(
        &mut outcome,
        refused,
        Rows {
            cpu: Metric::RejectedCpu,
            modes: Some((Metric::RejectedUser, Metric::RejectedSystem)),
            switches: Metric::RejectedSwitches,
        },
    );
    outcome
        .notes
        .extend(failures.note("rejected connections", sizes.connections));
    Ok(outcome)
}

/// Runs `operation(i)` for i in 0..count, `concurrency` at a time, until done or the scenario's
/// time limit: successes, failures, and the time taken.
fn many<F, Fut>(context: &Context<'_>, count: u64, operation: F) -> (u64, Failures, Duration)
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = io::Result<()>> + Send,
{
    let sizes = context.sizes;
    let operation = Arc::new(operation);
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + sizes.scenario_limit;
    let (done, failures) = context.runtime.block_on(async {
        let workers: Vec<_> = (0..sizes.concurrency)
            .map(|_| {
                let operation = Arc::clone(&operation);
                let next = Arc::clone(&next);
                tokio::spawn(async move {
                    let mut done = 0u64;
                    let mut failures = Failures::default();
                    loop {
                        // Relaxed: hands out distinct indices; nothing else is ordered by it.
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= count || Instant::now() >= deadline {
                            break;
                        }
                        match operation(i).await {
                            Ok(()) => done += 1,
                            Err(err) => failures.record(err),
                        }
                    }
                    (done, failures)
                })
            })
            .collect();
        let mut done = 0;
        let mut failures = Failures::default();
        for worker in workers {
            match worker.await {
                Ok((d, f)) => {
                    done += d;
                    failures.merge(f);
                }
                Err(err) => failures.record(err),
            }
        }
        (done, failures)
    });
    let mut failures = failures;
    let started = next.load(Ordering::Relaxed).min(count);
    if started < count {
        failures.record(format!(
            "time limit of {:?} reached after {started} of {count}",
            sizes.scenario_limit
        ));
    }
    (done, failures, start.elapsed())
}

/// One proxied connection: connect, write [`PAYLOAD`], read it back, close.
async fn echo_once(source: IpAddr, target: SocketAddr, timeout: Duration) -> io::Result<()> {
    let exchange = async {
        let mut stream = connect(source, target).await?;
        stream.write_all(&PAYLOAD).await?;
        let mut echoed = [0u8; PAYLOAD.len()];
        stream.read_exact(&mut echoed).await?;
        if echoed != PAYLOAD {
            return Err(io::Error::other("echo differs from what was sent"));
        }
        Ok(())
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "echo timed out"))?
}

/// One connection that should be refused: success is a reset or a close before any echo.
async fn refused_once(source: IpAddr, target: SocketAddr, timeout: Duration) -> io::Result<()> {
    let exchange = async {
        let mut stream = match connect(source, target).await {
            Err(err) if is_refusal(&err) => return Ok(()),
            other => other?,
        };
        // The write may land before the proxy has looked at the connection, or fail if the
        // reset came first; either way the read tells.
        let _ = stream.write_all(&PAYLOAD).await;
        let mut echoed = [0u8; PAYLOAD.len()];
        match stream.read(&mut echoed).await {
            Ok(0) => Ok(()),
            Err(err) if is_refusal(&err) => Ok(()),
            Ok(_) => Err(io::Error::other("served: a blocked source got an echo")),
            Err(err) => Err(err),
        }
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "refusal timed out"))?
}

fn is_refusal(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
    )
}
