//! Reaching an upstream: round-robin over the listener's pool, a connect timeout per attempt,
//! and retries on the next upstream after an exponential backoff with jitter (so a pool that
//! comes back is not hit by every waiting client at the same instant).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rand::RngExt;
use tokio::net::TcpStream;

use crate::config::Listener;
use crate::listeners::socket;
use crate::ops::metrics::{ListenerMetrics, Metrics};

/// A listener's upstream pool.
#[derive(Debug)]
pub struct Pool {
    upstreams: Vec<SocketAddr>,
    next: AtomicUsize,
    connect_timeout: Duration,
    retries: u32,
    backoff: Duration,
}

impl Pool {
    /// The pool `config` names.
    #[must_use]
    pub fn new(config: &Listener) -> Pool {
        Pool {
            upstreams: config.upstreams.clone(),
            next: AtomicUsize::new(0),
            connect_timeout: config.connect_timeout,
            retries: config.retries,
            backoff: config.backoff,
        }
    }

    /// The upstream the next session starts at (round-robin).
    pub fn pick(&self) -> SocketAddr {
        // Relaxed: only spreads load; no ordering with anything else.
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        self.upstreams[start % self.upstreams.len()]
    }

    /// The wait before retry `attempt` (1-based): `backoff * 2^(attempt-1)`, times a random
    /// factor in [0.5, 1.5).
    fn backoff(&self, attempt: u32) -> Duration {
        let base = self.backoff.saturating_mul(1 << (attempt - 1).min(16));
        base.mul_f64(rand::rng().random_range(0.5..1.5))
    }

    /// A connection to an upstream, trying up to `1 + retries` of them in turn; `None` when
    /// every attempt failed (each failure is counted).
    pub async fn connect(
        &self,
        metrics: &Metrics,
        listener: &ListenerMetrics,
    ) -> Option<TcpStream> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        for attempt in 0..=self.retries {
            if attempt > 0 {
                tokio::time::sleep(self.backoff(attempt)).await;
            }
            let upstream = self.upstreams[(start + attempt as usize) % self.upstreams.len()];
            match tokio::time::timeout(self.connect_timeout, TcpStream::connect(upstream)).await {
                Ok(Ok(stream)) => {
                    socket::connected(&stream);
                    return Some(stream);
                }
                Ok(Err(err)) => {
                    tracing::debug!(%upstream, %err, attempt, "upstream connect failed");
                    metrics.upstream_error(listener, upstream);
                }
                Err(_) => {
                    tracing::debug!(%upstream, attempt, "upstream connect timed out");
                    metrics.upstream_error(listener, upstream);
                }
            }
        }
        listener.upstream_unavailable.inc();
        None
    }
}
