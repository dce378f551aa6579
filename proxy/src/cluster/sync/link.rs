//! The link to Redis: which server is talked to (found through the sentinels, or the next
//! configured one), the Redis process and dataset it holds, and the back-off while it is away.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate_sketch::Clock;

use super::{ALONE_LOG_EVERY, Syncer};
use crate::cluster::redis::{Link, LinkError, Refusal, Target, dataset_key};
use crate::cluster::view::View;

/// The longest wait between two connection attempts while Redis is away. Short, because it
/// sets how soon a node follows a failover (the replica is promoted about a second after the
/// master dies; at 2 s the nodes took up to 2.6 s more to find it). An attempt against a dead
/// server costs a refused connect or one `timeout`, and the sentinels answer one command.
const RETRY_MAX: Duration = Duration::from_millis(500);

impl Syncer {
    pub(super) async fn connect(&mut self) {
        let cluster = Arc::clone(&self.cluster);
        let config = &cluster.config;
        let name = format!("tollgate:{}:{}", config.name, config.node);
        let (address, host) = match self.discover().await {
            Ok(found) => found,
            Err(why) => match config.redis.get(self.server % config.redis.len().max(1)) {
                Some(&address) => (address, config.server_name(address)),
                None => {
                    self.failed(&LinkError::from(format!(
                        "no sentinel answered (last: {}) and no `redis` address to fall back to",
                        why.as_deref().unwrap_or("none asked")
                    )));
                    return;
                }
            },
        };
        self.current = Some(address);
        let target = Target {
            address,
            tls: config.tls.as_ref().map(|tls| (tls, host.as_str())),
        };
        let key = dataset_key(&config.name);
        let connected =
            match Link::connect(target, config.auth.as_ref(), &name, &key, config.timeout).await {
                Ok(mut link) => {
                    // The first reading on a connection aligns the windows to this Redis (after a
                    // failover, to the new primary's clock): its correction is no error.
                    let sent = self.cluster.clock.now();
                    let time = link.time(config.timeout).await;
                    time.map(|redis_ns| {
                        let reading =
                            self.cluster
                                .redis_clock
                                .read(sent, self.cluster.clock.now(), redis_ns);
                        let error = reading.error.saturating_sub(Duration::from_nanos(
                            reading.correction_ns.unsigned_abs(),
                        ));
                        self.clock_read(redis_ns, error);
                        link
                    })
                }
                Err(error) => Err(error),
            };
        match connected {
            Ok(link) => {
                let (dataset_changed, run_id_changed) = (
                    self.dataset.as_ref().is_some_and(|id| *id != link.dataset),
                    self.run_id.as_ref().is_some_and(|id| *id != link.run_id),
                );
                if dataset_changed {
                    // A Redis without the counts (restarted without persistence, flushed,
                    // or another server): what was pushed before is gone; push it all again.
                    for own in self.own.values_mut() {
                        own.pushed = [0, 0];
                    }
                    self.rewrite_own_lists();
                    self.penalties_again = penalties_in_force(
                        &self.cluster.penalties_in.load(),
                        self.cluster.cluster_ms_now(),
                    );
                    tracing::info!(
                        cluster = %config.name,
                        node = %config.node,
                        redis = %self.address(),
                        suspects = self.own.len(),
                        penalties = self.penalties_again.len(),
                        "cluster: Redis holds another dataset (it lost the counts); pushing \
                         this node's counts of the last two windows and the penalties in force \
                         again"
                    );
                } else if run_id_changed {
                    // A replica promoted, or a restart from persistence: the counts are
                    // there (but for the writes not yet replicated or saved: see `mod.rs`).
                    tracing::info!(
                        cluster = %config.name,
                        node = %config.node,
                        redis = %self.address(),
                        "cluster: another Redis process with the same dataset (a failover, or \
                         a restart from persistence); counts kept, not pushed again"
                    );
                }
                self.dataset = Some(link.dataset.clone());
                self.run_id = Some(link.run_id.clone());
                self.link = Some(link);
                self.retry_wait = config.sync;
            }
            Err(error) => self.failed(&error),
        }
    }

    /// The master's address as the first sentinel to answer knows it (starting with the one
    /// that answered last), and the name its certificate must carry with TLS
    /// (`tls_server_name`, else the host the sentinel gave). Without sentinels `Err(None)`;
    /// when none answers, the last one's error (each failure logged at debug level: the
    /// fallback list or the retry follows, and logs it if nothing else answers). With TLS the
    /// sentinels are reached with TLS too.
    pub(super) async fn discover(
        &mut self,
    ) -> Result<(std::net::SocketAddr, String), Option<String>> {
        let cluster = Arc::clone(&self.cluster);
        let config = &cluster.config;
        let sentinel = config.sentinel.as_ref().ok_or(None)?;
        let count = sentinel.sentinels.len();
        let mut last = None;
        for _ in 0..count {
            let at = sentinel.sentinels[self.sentinel % count];
            let name = config.server_name(at);
            let target = Target {
                address: at,
                tls: config.tls.as_ref().map(|tls| (tls, name.as_str())),
            };
            match crate::cluster::redis::master_of(target, &sentinel.master, config.timeout).await {
                Ok((address, host)) => {
                    let name = match config.tls.as_ref().and_then(|t| t.server_name.clone()) {
                        Some(name) => name,
                        None => host,
                    };
                    return Ok((address, name));
                }
                Err(error) => {
                    tracing::debug!(sentinel = %at, %error, "cluster: sentinel did not answer");
                    last = Some(format!("sentinel {at}: {error}"));
                    self.sentinel = self.sentinel.wrapping_add(1);
                }
            }
        }
        Err(last)
    }

    /// The Redis server talked to now (or last tried), for logs.
    pub(super) fn address(&self) -> String {
        self.current
            .map_or_else(|| "none yet".to_owned(), |a| a.to_string())
    }

    /// Redis is away, or refused (see [`Failure`]): limit alone (an empty view), count the
    /// error, log what happened within the budget, move to the next configured server (but
    /// for a Redis that only lost its data: it answers, and is reconnected to), and back off
    /// before the next attempt.
    pub(super) fn failed(&mut self, error: &LinkError) {
        let config = &self.cluster.config;
        let metrics = &self.cluster.metrics;
        metrics.redis_errors.inc();
        if !self.view.is_empty() {
            self.view.clear();
            self.cluster.view.store(Arc::new(View::default()));
        }
        let was_alone = metrics.alone.get() == 1;
        metrics.alone.set(1);
        let due = self
            .alone_logged
            .is_none_or(|at| at.elapsed() >= ALONE_LOG_EVERY);
        let failure = Failure::of(error);
        if !was_alone || due {
            tracing::warn!(
                cluster = %config.name,
                node = %config.node,
                redis = %self.address(),
                %error,
                "{}",
                failure.message()
            );
            self.alone_logged = Some(Instant::now());
        }
        if failure != Failure::DataLost {
            self.server = self.server.wrapping_add(1);
        }
        self.retry_at = Instant::now() + self.retry_wait;
        self.retry_wait = (self.retry_wait * 2).min(RETRY_MAX);
    }
}

/// What a failed connection or round says of Redis: each is logged as what it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Failure {
    /// No answer, a cut connection, a failed login or handshake, an unexpected reply.
    Unreachable,
    /// It answered, but is not a master ([`Refusal::NotMaster`]).
    NotMaster,
    /// It answered, but lost its data since the connection read its dataset id
    /// ([`Refusal::DatasetChanged`]).
    DataLost,
}

impl Failure {
    pub(super) fn of(error: &LinkError) -> Failure {
        match error.downcast_ref::<Refusal>() {
            Some(Refusal::NotMaster(_)) => Failure::NotMaster,
            Some(Refusal::DatasetChanged { .. }) => Failure::DataLost,
            None => Failure::Unreachable,
        }
    }

    /// The log line's message.
    pub(super) fn message(self) -> &'static str {
        match self {
            Failure::Unreachable => {
                "cluster: Redis unreachable; limiting alone with local counts, retrying"
            }
            Failure::NotMaster => {
                "cluster: Redis is not a master (a replica, a stale address, or an old master \
                 back after a failover); limiting alone with local counts, trying the next \
                 server"
            }
            Failure::DataLost => {
                "cluster: Redis lost its data during a round (its dataset id changed: a \
                 FLUSHALL, or the id evicted); limiting alone until reconnected, then pushing \
                 this node's counts and the penalties in force again"
            }
        }
    }
}

/// The penalties of `held` (penalty key to the Redis-time ms it ends) that have not ended at
/// `now_ms`: what a Redis that lost its data gets back.
pub(super) fn penalties_in_force(
    held: &HashMap<[u8; tollgate_filter::LimitKey::LEN], u64>,
    now_ms: u64,
) -> Vec<([u8; tollgate_filter::LimitKey::LEN], u64)> {
    held.iter()
        .filter(|&(_, &until)| until > now_ms)
        .map(|(&key, &until)| (key, until))
        .collect()
}
