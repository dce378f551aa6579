//! The attacks, and what they share: where they aim ([`Targets`]), how many connections they
//! start per second and hold at once ([`paced`]), and what they count ([`Tally`]): served,
//! refused, cut by the proxy while held, or still open when the attack ends.
//!
//! Every attack is bounded by a count and by its end time, and every task it starts ends by
//! that time (or an operation timeout) on its own: a proxy that stalls costs seconds, never a
//! hang.

mod slow;
mod tcp;
mod udp;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::Instant;

pub(crate) use slow::scrape_metrics;

use crate::cli::{Attack, Sizes};
use crate::legit::Route;

/// How long after its end an attack's tasks get to wind down.
const GRACE: Duration = Duration::from_secs(3);
/// The bytes attackers send where they send something.
const PAYLOAD: [u8; 64] = [b'a'; 64];

/// Where a proxy listens.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Targets {
    pub(crate) front: SocketAddr,
    pub(crate) balanced: SocketAddr,
    pub(crate) udp: SocketAddr,
    pub(crate) admin: SocketAddr,
}

impl Attack {
    /// How long the attack lasts: its sizes' duration, or as long as its count takes at its
    /// rate, at most four times that.
    pub(crate) fn span(self, sizes: &Sizes) -> Duration {
        let base = sizes.attack;
        let needs = |count: u64, rate: u64| Duration::from_secs_f64(count as f64 / rate as f64);
        let span = match self {
            Attack::Distributed => needs(sizes.distributed_sources, sizes.distributed_rate),
            Attack::UdpSpoof => needs(sizes.udp_sources, sizes.udp_rate),
            // Opened, then held a while longer (a fifth of the attack time).
            Attack::Idle24 | Attack::Idle48 => {
                needs(sizes.idle_connections, sizes.idle_rate) + base / 5
            }
            _ => base,
        };
        span.clamp(base, base * 4)
    }

    /// How the legitimate clients reach the proxy during this attack.
    pub(crate) fn route(self, targets: &Targets) -> Route {
        match self {
            Attack::Idle48 | Attack::ProxyTrickle => Route::Balanced(targets.balanced),
            Attack::UdpSpoof => Route::Udp(targets.udp),
            _ => Route::Direct(targets.front),
        }
    }

    /// Whether `udp` or `balanced` listening is needed and missing: HAProxy carries no UDP.
    pub(crate) fn needs_udp(self) -> bool {
        self == Attack::UdpSpoof
    }

    /// Runs the attack until `end`; returns what it saw, as notes.
    pub(crate) async fn run(self, targets: Targets, sizes: Sizes, end: Instant) -> Vec<String> {
        match self {
            Attack::Flood => tcp::flood(targets.front, &sizes, end).await,
            Attack::Distributed => tcp::distributed(targets.front, &sizes, end).await,
            Attack::Tarpit => tcp::tarpit(targets.front, &sizes, end).await,
            Attack::Idle24 => tcp::idle_24(targets.front, &sizes, end).await,
            Attack::Idle48 => tcp::idle_48(targets.balanced, &sizes, end).await,
            Attack::UdpSpoof => udp::spoof(targets.udp, &sizes, end).await,
            Attack::AdminSlowloris => slow::admin(targets.admin, &sizes, end).await,
            Attack::ProxyTrickle => slow::proxy_trickle(targets.balanced, &sizes, end).await,
        }
    }
}

/// What an attack's connections met.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// Started (a connect attempted, a datagram sent).
    pub(crate) started: AtomicU64,
    /// Served: the echo came back.
    pub(crate) served: AtomicU64,
    /// Refused before any echo: reset, closed, or the connect failed.
    pub(crate) refused: AtomicU64,
    /// No answer within the operation timeout.
    pub(crate) timed_out: AtomicU64,
    /// Held, then closed by the proxy before the attack ended.
    pub(crate) cut: AtomicU64,
    /// Held and still open when the attack ended.
    pub(crate) open_at_end: AtomicU64,
}

impl Tally {
    pub(crate) fn add(counter: &AtomicU64) {
        // Relaxed: a counter, read after every task that adds to it has been waited for.
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn get(counter: &AtomicU64) -> u64 {
        // Relaxed: read after the tasks are done (see `add`).
        counter.load(Ordering::Relaxed)
    }

    /// One line: the non-zero counts.
    pub(crate) fn note(&self, what: &str) -> String {
        let parts: Vec<String> = [
            ("started", &self.started),
            ("served", &self.served),
            ("refused", &self.refused),
            ("timed out", &self.timed_out),
            ("cut by the proxy", &self.cut),
            ("still open at the end", &self.open_at_end),
        ]
        .iter()
        .filter(|(_, c)| Tally::get(c) > 0)
        .map(|(name, c)| format!("{} {name}", Tally::get(c)))
        .collect();
        format!("{what}: {}", parts.join(", "))
    }
}

/// Starts `make(i)` for i in 0..count at `rate` per second, at most `at_once` running, until
/// `end`; then waits (up to [`GRACE`] past `end`) for the started tasks to finish. Returns how
/// many were started.
pub(crate) async fn paced<F, Fut>(
    count: u64,
    rate: u64,
    at_once: usize,
    end: Instant,
    make: F,
) -> u64
where
    F: Fn(u64) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    // A semaphore holds at most `Semaphore::MAX_PERMITS`; no attack holds a million at once.
    let at_once = at_once.clamp(1, 1 << 20);
    let slots = Arc::new(Semaphore::new(at_once));
    let start = Instant::now();
    let gap = 1.0 / rate.max(1) as f64;
    let mut started = 0;
    for i in 0..count {
        let due = start + Duration::from_secs_f64(i as f64 * gap);
        if due >= end {
            break;
        }
        tokio::time::sleep_until(due).await;
        let Ok(Ok(slot)) = tokio::time::timeout_at(end, Arc::clone(&slots).acquire_owned()).await
        else {
            break;
        };
        let task = make(i);
        tokio::spawn(async move {
            task.await;
            drop(slot);
        });
        started += 1;
    }
    let all = u32::try_from(at_once).unwrap_or(u32::MAX);
    let _ = tokio::time::timeout_at(end + GRACE, slots.acquire_many(all)).await;
    started
}
