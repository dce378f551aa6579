//! The sync task: once per interval, collect the suspects' weight, push it to Redis and read
//! back the cluster-wide counts in one round trip, and swap in a new view. It runs apart from
//! the decide path, which never waits for it; when Redis is away it keeps the counts, says so
//! and retries, and when Redis is back it pushes what it kept and the view returns.
//!
//! The task's state is one [`Syncer`], its parts kept apart by the state each keeps: the
//! rounds (`round`: the own counts of the suspects and the view they build), the link to Redis
//! (`link`: which server, its process and dataset, the back-off while it is away), the
//! run-time lists that travel through Redis (`lists`) and the clock readings that decide
//! whether a round may share (`clock`).

mod clock;
mod link;
mod lists;
mod round;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::time::MissedTickBehavior;

use super::Cluster;
use super::lists::{Keys, ListKey, Travelled};
use super::redis::Link;
use super::view::View;
use tollgate_filter::Collected;

use round::Own;

/// While alone, at most one log line per this long says so.
const ALONE_LOG_EVERY: Duration = Duration::from_secs(30);

/// The sync task's state: the own counts of every suspect of the last two windows (at most
/// `8 x suspects` of them), the view being built, and the link to Redis.
#[derive(Debug)]
struct Syncer {
    cluster: Arc<Cluster>,
    own: HashMap<u64, Own>,
    view: View,
    link: Option<Link>,
    /// The `run_id` of the Redis last connected to (for the log: a new one with the same
    /// dataset is a failover or a restart that kept the counts).
    run_id: Option<String>,
    /// The dataset id of the Redis last connected to: a new one means the counts pushed
    /// before are gone (see `redis::dataset_key`).
    dataset: Option<String>,
    /// Which of the configured Redis servers is talked to (modulo their number).
    server: usize,
    /// Which sentinel is asked first (modulo their number).
    sentinel: usize,
    /// The server talked to (or last tried).
    current: Option<std::net::SocketAddr>,
    collected: Vec<Collected>,
    retry_at: Instant,
    retry_wait: Duration,
    last_success: Option<Instant>,
    alone_logged: Option<Instant>,
    /// The last `TIME` reading put this node's window edges further from Redis's than
    /// `max_clock_error`: the next round shares nothing.
    clock_refused: bool,
    clock_logged: Option<Instant>,
    /// The Redis keys of the travelling list entries.
    lists_keys: Keys,
    /// The lists' version this node last read (`None`: not read yet on this Redis).
    lists_version: Option<String>,
    /// What this node believes Redis holds of the lists: the last read, with this node's
    /// own writes since. An entry that was here and is gone from the next read was removed
    /// by another node.
    lists_known: HashMap<ListKey, Travelled>,
    /// Writes made, for unique versions.
    lists_writes: u64,
    /// Penalties in force that a Redis which lost its data (a new dataset id) gets back from
    /// this node at its next round, where it lacks them: what the last read before held
    /// (at most [`super::redis::PENALTIES_READ`]).
    penalties_again: Vec<([u8; tollgate_filter::LimitKey::LEN], u64)>,
}

/// Runs the sync task of `cluster` until `stop` says so (or its sender is gone): a round
/// every sync interval, and an early one (no sooner than a quarter interval after the last)
/// when a decider meets a suspect the view does not hold yet.
pub async fn run(cluster: Arc<Cluster>, mut stop: watch::Receiver<bool>) {
    let sync = cluster.config.sync;
    let mut syncer = Syncer::new(Arc::clone(&cluster));
    let mut interval = tokio::time::interval(sync);
    interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut last = tokio::time::Instant::now();
    loop {
        let early = tokio::select! {
            _ = interval.tick() => false,
            () = cluster.wake.notified() => {
                tokio::time::sleep_until(last + sync / 4).await;
                true
            }
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    break;
                }
                continue;
            }
        };
        syncer.round(early).await;
        last = tokio::time::Instant::now();
    }
}

impl Syncer {
    pub(super) fn new(cluster: Arc<Cluster>) -> Syncer {
        cluster.metrics.alone.set(1);
        Syncer {
            own: HashMap::new(),
            view: View::default(),
            link: None,
            run_id: None,
            dataset: None,
            server: 0,
            sentinel: 0,
            current: None,
            collected: Vec::new(),
            retry_at: Instant::now(),
            retry_wait: cluster.config.sync,
            last_success: None,
            alone_logged: None,
            clock_refused: false,
            clock_logged: None,
            lists_keys: Keys::new(&cluster.config.name),
            lists_version: None,
            lists_known: HashMap::new(),
            lists_writes: 0,
            penalties_again: Vec::new(),
            cluster,
        }
    }
}
