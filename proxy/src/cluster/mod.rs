//! Cluster-wide limits through Redis: several proxies enforce one limit, with a bounded cost,
//! and each keeps limiting alone when Redis is gone (`[cluster]` in the config).
//!
//! ```
//! use tollgate::config::ProxyConfig;
//! let config = ProxyConfig::parse(r#"
//!     [cluster]
//!     redis = ["127.0.0.1:6379", "127.0.0.1:6380"]  # in order; on failure, the next
//!     node = "edge-1"             # default: the host name
//!     name = "edge"               # the key namespace in Redis (required)
//!     sync = "200ms"              # how often counts are pushed and read back
//!     max_clock_error = "250ms"   # window edges further from Redis's clock: do not share
//!     threshold = 0.25            # the fraction of a limit from which a key is shared
//!     on_failure = "local"        # Redis away: keep limiting with the local counts
//!
//!     [[rule]]
//!     name = "per-source"
//!     limits = [{ rate = "100/10s" }]
//! "#)?;
//! let cluster = config.cluster.expect("a [cluster] section");
//! assert_eq!((cluster.name.as_str(), cluster.redis.len()), ("edge", 2));
//! # Ok::<(), tollgate_filter::ConfigErrors>(())
//! ```
//!
//! # Design: suspects as exact counters
//!
//! Behind a load balancer a source's traffic spreads over `n` proxies; each alone would let
//! `n` times the limit through. Only the keys near a limit matter for that, so only they are
//! shared:
//!
//! 1. **Suspects.** When the local sliding estimate of a key (rule, prefix, masked address)
//!    under a limit reaches `threshold x limit`, the filter reports each further event of it
//!    to this node's [`Cluster`] (see [`tollgate_filter::Remote`]), which adds its weight to a
//!    fixed-size lock-free table (two tables of `suspects` slots, 128 bytes each, taking turns;
//!    overflow is counted, never grown).
//! 2. **Sync.** Every `sync` interval a background task collects the table and, in one
//!    pipelined round trip, runs a Lua script that, per suspect, `INCRBY`s this node's new
//!    weight into a counter per (cluster, rule and its shape, prefix, masked address, period,
//!    window) with `PEXPIRE` of two periods in the same atomic step, and returns the
//!    cluster-wide counts of the current and the previous window. A new suspect brings the
//!    local estimate it had when it crossed the threshold, so the others see its traffic from
//!    the start, not only what came after. When a decider meets a suspect the view does not
//!    hold yet, it wakes the task for an early round (no sooner than `sync / 4` after the last)
//!    that pushes and reads only such new suspects: a source that starts spreading over the
//!    nodes is seen by the others sooner, at the cost of the new suspects only. A new
//!    suspect whose first reads found nothing of the others (they crossed at the same
//!    moment and pushed just after) asks for such rounds again during its first interval
//!    (at most four).
//! 3. **Decide.** The task swaps in a new view (arc-swap): per suspect, the cluster-wide counts
//!    less this node's own, i.e. the rest of the cluster, and how much the rest grew between
//!    the last two reads (in one window). Until the next read the rest is predicted to grow
//!    by the larger of: that pace (for at most as long as those reads were apart), and this
//!    node's own growth since it collected for the read, in proportion (the suspects table
//!    returns it with every add; at most doubling the rest). The second needs no second
//!    read: a source that uses up its limit within one interval is met at every event, not
//!    one interval later (at 1 s periods it took the three-process figures from 1.27-1.77 L
//!    to 1.00-1.37 L). That prediction counts
//!    towards a throttle, never towards starting a penalty (`tollgate_filter::Rest`). For a suspect, the filter adds the
//!    rest's sliding estimate to the local one (one hash lookup); keys below the threshold
//!    cost one comparison. No decision ever waits for Redis.
//! 4. **Alone.** If Redis does not answer within `timeout`, the view is emptied (every node
//!    limits with its local counts, as without a cluster), `tollgate_cluster_alone` goes to 1
//!    and a warning is logged (then at most every 30 s). Counts keep being collected; the task
//!    retries (backing off to 500 ms) and, once Redis answers, pushes what it counted
//!    meanwhile (everything it holds of the current and previous windows if that Redis does
//!    not hold the counts: see "When Redis is another process" below) and the view returns.
//!
//! 4b. **Descriptors.** The rate-limit service's policy reports to the same node
//!    (`tollgate_filter::DescriptorPolicy::with_remote`, on this node's clock): a descriptor
//!    key (its rule's path, the unit, a hash of the values; a kind of `LimitKey` of its own,
//!    shape 0) is a suspect from `threshold x requests_per_unit` on, and goes through the same
//!    table, rounds, view and metrics as the address keys, with the same lag, bound and
//!    failure semantics.
//! 5. **Penalties.** A penalty this node starts is queued (at most 4,096 between two rounds;
//!    a lock, once per penalty started) and added by the next round to the sorted set
//!    `tollgate:NAME:penalties` (member the penalty key, score the Redis-time ms it ends);
//!    each round also removes the ones that ended and reads back the rest (at most
//!    4,096), which deciders look up for every event a rule with a
//!    penalty counts: the others refuse the source from their next round on, and keep doing
//!    so while Redis is away. A Redis that lost its data (a new dataset id, see "When Redis
//!    is another process") gets them back: every node that reconnects to it adds, in its
//!    first round, the penalties of its last read that are still in force (at most 4,096,
//!    the read's cap; `ZADD NX`, so one started since, or added back by another node first,
//!    stays as it is). So a source in a penalty is not let through because Redis restarted
//!    empty or was flushed; only one that no reconnecting node held (its node gone too, or
//!    past the 4,096 read) is lost, and the node that started it still refuses it.
//! 6. **Run-time lists.** An entry added to or removed from this node's run-time lists (the
//!    admin's `/lists`, reported through [`Remote::list_entry_added`] and
//!    [`Remote::list_entry_removed`]) is written by the next round to a hash in Redis with a
//!    new version; every round reads the version, and a node that finds it changed reads the
//!    hash and lays the difference over its lists within its own bounds (see `lists.rs`).
//!
//! # When Redis is another process
//!
//! A node that reconnects may find another Redis process (its `run_id` changed): a restart,
//! or a replica promoted by a failover (by sentinels, or the next `redis` address made
//! master). What matters is whether it holds the counts, and the `run_id` does not say: a
//! promoted replica and a restart from RDB or AOF files hold them; a restart without
//! persistence, a `FLUSHALL` or an unrelated server does not. Pushing everything again on a
//! new `run_id` counted every shared count twice after each failover, for up to two windows,
//! and refused sources early. So each connection reads the cluster's dataset id instead:
//! after the `ROLE` check, one round trip sends `SET tollgate:NAME:dataset ID NX` and `GET`
//! of it. The first node to reach a Redis without one sets its offer (its wall clock in
//! microseconds and 64 random bits); every node reads back whichever came first. The key
//! lives with the data (no expiry: one key per cluster name, 120 bytes by `MEMORY USAGE`),
//! so replicas and persistence files carry it, and it reaches a replica ahead of every count
//! pushed after it. A node pushes again everything it holds of the current and previous
//! windows, and writes its run-time list entries again (`lists.rs`), only when the id differs
//! from the one it last saw (and adds back the penalties in force, see 5.); otherwise it
//! pushes only what Redis does not have yet. Either
//! way, its first round reads back (with nothing to add: the script only `GET`s) every
//! suspect its view lost while Redis was away, so that the others' counts are in its
//! decisions again from that round, not from each suspect's next event.
//!
//! What this leaves, by choice:
//!
//! - **Replication lag.** Replication is asynchronous: a promoted replica may lack the last
//!   writes the master acknowledged. The nodes do not push them again: an undercount of at
//!   most what each node pushed in the rounds not yet replicated. Redis writes a command to
//!   its replicas' buffers in the same event-loop turn as the reply to the node, so that is
//!   what was on the wire when the master died: at most the last round (`s` of each node's
//!   pushes, the same order as the `r (s + rtt)` in flight that the error bound below already
//!   admits), and none when the master died more than a round trip after it. Measured on
//!   loopback (`redis-cli -r` sending `INCR`s one at a time to a master with one replica,
//!   the master `SIGKILL`ed 0.1-0.9 s in, 10 runs, load average 10): the replica held every
//!   acknowledged write each time, and in 2 of 10 one more, whose reply never came. Pushing
//!   the last round again on every failover would count it twice whenever it had arrived
//!   (every one of those runs): an overcount that refuses sources early, which no bound here
//!   admits. (Exact would be a per-node round number written in one `MULTI` with its pushes
//!   and compared after a failover; not built.) The other side, as for any round whose reply
//!   is lost (a timeout, a connection cut): its writes may have been applied, and the node,
//!   not knowing, pushes them again at its next round, an overcount of at most that round.
//! - **RDB snapshots.** A Redis restarted from a snapshot lacks what was pushed after it was
//!   taken, but brings back the id: an undercount of those pushes (of the last two windows
//!   only; with AOF and `appendfsync everysec`, about a second's).
//! - **Lost while connected.** Every round also `GET`s the id, and the script writes nothing
//!   unless the id is the one the connection read (it fails with `TOLLGATE_DATASET`): after
//!   a `FLUSHALL` each node's next round fails, even with nothing to push, and the node
//!   reconnects to the same server (one retry interval, `sync`, limiting alone meanwhile,
//!   counted in `_redis_errors_total` and logged as Redis having lost its data, not as
//!   unreachable; a server whose `ROLE` is not master is logged as such too) and pushes
//!   everything again; no push lands in the flushed dataset
//!   first, to be pushed twice. Counters evicted under `maxmemory` (their id kept) are not
//!   seen: an undercount; the id evicted (an `allkeys-*` policy) is taken for a flush, and
//!   what other counters survived are pushed again, an overcount for up to two windows. Use
//!   a `volatile-*` policy (the counters expire, the id does not) or enough memory.
//! - **Two independent servers** in `redis` (no replication between them): a node that moves
//!   to the second and back to the first finds a new id each time and pushes everything to
//!   the first again, which may still hold what it pushed before the move (as before this
//!   check: the `run_id` changed too).
//!
//! Windows are cut by Redis's clock (`TIME / period`), not by each node's: every round
//! reads `TIME` first in its pipeline and carries it to the next with the node's monotonic
//! clock, so nodes agree on window edges to within half a round trip whatever their own
//! clocks say (NTP is not needed). `tollgate_cluster_clock_offset_seconds` shows how far a
//! node's wall clock is from Redis's; `_clock_error_seconds` how far its window edges may be
//! (half the round trip plus the correction the last reading made, e.g. after a clock step or
//! a failover to a host with another clock). Beyond `max_clock_error` (default 250 ms) the
//! node shares nothing that round (`_clock_refused` 1, `_clock_refusals_total`, a warning at
//! most every 30 s) and limits alone until a reading agrees.
//!
//! With `tls = true` every connection, to Redis and to the sentinels, is TLS (rustls) and the
//! server's certificate is always verified: its chain up to `ca_file` (else the system's
//! roots) and its name (`tls_server_name`, else the host of the address as written, or as a
//! sentinel reported it; an IP address as an IP address SAN). The CA and client certificate
//! files are read at start and at each connection, like the password (`tls.rs`).
//!
//! # Costs and bounds
//!
//! `n` nodes, sync interval `s`, Redis round trip `rtt`, threshold `θ`, a limit of `L` per
//! period `T`, a cluster name of `c` bytes, and `k` suspects with events on a node in one
//! interval (`k <= 2 x suspects` by construction, and `k <= events per period / (θ L)`).
//! Measured with `cargo run --release -p tollgate-benches --bin cluster`: 3 in-process nodes,
//! 100k decisions/s each, limit 100 per 1 s, `s` = 200 ms, `θ` = 0.25, Redis 7.0 on loopback,
//! a 2-core machine.
//!
//! - **Redis memory:** one counter per (suspect, period, window), `107 + c` bytes each
//!   (`MEMORY USAGE`: 104 bytes with `c` = 5, measured before the 8-byte tag), and at most 3 alive per suspect (every counter
//!   expires 2 periods after its last write; Redis reclaims expired keys lazily, so `DBSIZE`
//!   may lag). So `3 x (107 + c) x` the distinct suspects of the last two periods. Measured:
//!   1,000 sources all over their limit, 3,003 counters, 312 kB.
//! - **Bytes per node per second:** about `k x (166 + 2c) / s` sent and `k x 12 / s`
//!   received (the RESP sizes, counted exactly by `tollgate_cluster_sent_bytes_total` and
//!   `_received_bytes_total`), plus per round the dataset id's `GET` (`37 + c` bytes sent,
//!   37 received) and per `EVALSHA` its key and value (`61 + c` bytes). Measured (before the
//!   8-byte tag, 16 bytes less per suspect, before the dataset id, and received counting 2
//!   bytes a suspect too many):
//!   271 kB/s sent and 23 kB/s received with 401 suspects (1k sources, Zipf 1.1); 734 kB/s
//!   and 64 kB/s with 922 (1k sources, all over the limit); 196 kB/s with 273 (10M sources,
//!   Zipf); 1.2 kB/s when only one source is near its limit (100k or 10M sources, uniform).
//! - **Redis operations:** per suspect per round 3 commands inside the script (`INCRBY` and
//!   `PEXPIRE` on the current window, `GET` on the previous), plus one `EVALSHA` and the
//!   dataset id's `GET` in it per 512 suspects, and one `GET` of the id per round: `3 k / s`
//!   per node. Measured: 16.7k/s for the three nodes at 401 suspects each,
//!   43.6k/s at 922; a round trip took 0.7-4.7 ms.
//! - **Staleness:** the others' counts are at most `s + rtt` old (`s / 4 + rtt` for a new
//!   suspect); the view's age is `tollgate_cluster_view_age_seconds`.
//! - **Error:** a source of cluster-wide rate `r` spread over the nodes is admitted at most
//!   `max(L, n θ L) + r (s + rtt)` per period: up to `θ L` per node before any node shares
//!   anything (under `L` in all when `θ <= 1/n`), then whatever arrives while counts are in
//!   flight. Three `tollgate run` processes (the `three_processes_...` test: `L` = 30,
//!   `s` = 100 ms, a source at `10 L` per period spread in turn, Redis with a password):
//!   0.97-1.03 L admitted per 10 s period, 1.07-1.37 L per 1 s period (median 1.13 L, 21
//!   of 23 floods at most 1.3 L; 1.27-1.77 L before the prediction by share and the early
//!   rereads of a new suspect, 1.37-1.67 L without any prediction), and a source at 2/3 L
//!   served in full. In-process, measured earlier, one source at `10 L` per period spread
//!   evenly: 1.69-2.04 L admitted
//!   against 3.00 L for three independent nodes (bound 3 L); with `T` = 10 s, 1.14-1.18 L
//!   (bound 1.2 L); with `s` = 50 ms, 1.18-1.38 L (bound 1.5 L). Counts are never lost while
//!   the suspects table has room; an event that finds none is counted in
//!   `tollgate_cluster_suspects_overflow_total` and stays local.
//! - **Decide path:** without `[cluster]`, one branch per limit (the `frames` benchmark is
//!   unchanged); with it, one comparison per limit below the threshold, and for a suspect a
//!   hash, an atomic add into the table and one lookup in the view: measured 60-180 ns more
//!   per decision on average when most events are suspects' (596 against 420 ns, every
//!   event a suspect's), none measurable when few are.

mod clock;
#[cfg(test)]
mod fake_redis;
mod lists;
mod metrics;
mod redis;
mod sync;
mod tls;
mod view;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::Notify;
use tollgate_filter::{Cidr, LimitKey, ListEntry, ListKind, Remote, RuntimeLists, Suspect};
use tollgate_sketch::{Clock, MonotonicClock, Tick};
use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::config::ClusterConfig;
use clock::RedisClock;
use lists::{Change, LISTS_OUT, ListKey, Travelled};
use tollgate_filter::SuspectTable;
use view::View;

pub use metrics::ClusterMetrics;
pub use sync::run;

/// For the fuzz harness (`tests/fuzz/src/cluster_lists.rs`): what a node makes of one read of
/// the travelling list entries, Redis's replies as they came, in bytes (the version, then the
/// hash's fields with their values; see `lists.rs`): the version as the node names it, each
/// entry it took as its hash field and its value as this node would write them, and the
/// reply bytes it counted.
#[doc(hidden)]
#[must_use]
pub fn read_list_entries(
    version: Option<Vec<u8>>,
    fields: Vec<(Vec<u8>, Vec<u8>)>,
) -> (Option<String>, Vec<(String, String)>, u64) {
    let mut cost = redis::Cost::default();
    let state = lists::parse_state((version, fields), &mut cost);
    let entries = state
        .entries
        .into_iter()
        // A `Travelled` (a number and two strings) always encodes.
        .map(|(key, travelled)| {
            let value = serde_json::to_string(&travelled).unwrap_or_default();
            (lists::field(key), value)
        })
        .collect();
    (state.version, entries, cost.received)
}

/// One node's part of a cluster: the suspects table the decide path writes, the view of the
/// rest of the cluster it reads, and what the sync task ([`run`]) needs.
#[derive(Debug)]
pub struct Cluster {
    config: ClusterConfig,
    suspects: SuspectTable,
    view: ArcSwap<View>,
    clock: MonotonicClock,
    /// Redis's time (this node's wall clock until the first reading): windows are cut by
    /// it, so all nodes cut them alike.
    redis_clock: RedisClock,
    metrics: ClusterMetrics,
    /// Set by the first decider to meet a suspect the view does not hold yet; cleared by the
    /// sync task after each successful round.
    wake_pending: AtomicBool,
    /// Wakes the sync task early for such a suspect.
    wake: Notify,
    /// The sync interval in milliseconds.
    sync_ms: u64,
    /// Penalties started here since the last round: (penalty key, Redis-time ms it ends), at
    /// most [`PENALTIES_OUT`].
    penalties_out: Mutex<Vec<([u8; LimitKey::LEN], u64)>>,
    /// Penalties in force anywhere in the cluster, as of the last round: penalty key to the
    /// Redis-time ms it ends.
    penalties_in: ArcSwap<HashMap<[u8; LimitKey::LEN], u64>>,
    /// The filter's run-time lists, which travelled entries are laid over (set once at start,
    /// see [`Cluster::attach_lists`]).
    lists: OnceLock<Arc<RuntimeLists>>,
    /// Run-time list changes made here since the last round, at most [`LISTS_OUT`].
    lists_out: Mutex<Vec<Change>>,
    /// The node that added each travelling entry, as of the last read (and this node's own
    /// changes since): what `/lists` and `/explain` show.
    list_origins: ArcSwap<HashMap<ListKey, String>>,
}

/// Penalties one node may start between two rounds and share; more are counted in
/// `tollgate_cluster_penalties_dropped_total` and stay local.
const PENALTIES_OUT: usize = 4096;

impl Cluster {
    /// A node of the cluster `config` describes, deciding with ticks of `clock`, reporting in
    /// `metrics`. Nothing runs until [`run`] is spawned; until it syncs, the node limits alone.
    #[must_use]
    pub fn new(config: ClusterConfig, clock: MonotonicClock, metrics: ClusterMetrics) -> Cluster {
        let unix_ns = crate::unix_time::unix_ns();
        let suspects = SuspectTable::new(config.suspects);
        metrics
            .memory
            .set(i64::try_from(suspects.memory_bytes()).unwrap_or(i64::MAX));
        metrics.alone.set(1);
        let sync_ms = u64::try_from(config.sync.as_millis()).unwrap_or(u64::MAX);
        Cluster {
            redis_clock: RedisClock::new(unix_ns.saturating_sub(clock.now().as_nanos())),
            suspects,
            view: ArcSwap::from_pointee(View::default()),
            clock,
            config,
            metrics,
            wake_pending: AtomicBool::new(false),
            wake: Notify::new(),
            sync_ms,
            penalties_out: Mutex::new(Vec::new()),
            penalties_in: ArcSwap::from_pointee(HashMap::new()),
            lists: OnceLock::new(),
            lists_out: Mutex::new(Vec::new()),
            list_origins: ArcSwap::from_pointee(HashMap::new()),
        }
    }

    /// Lets run-time list entries travel: `lists` (the filter's, shared by every policy a
    /// reload builds) receives the entries other nodes add and loses the ones they remove.
    /// Without it the node still sends its own changes. Only the first call counts.
    pub(crate) fn attach_lists(&self, lists: Arc<RuntimeLists>) {
        let _ = self.lists.set(lists);
    }

    /// The node that added the run-time `kind` entry of `cidr` (host bits cleared), if it
    /// travels: `None` for an entry the cluster does not hold (one from before this node
    /// joined, or restored from its state file).
    #[must_use]
    pub(crate) fn list_origin(&self, kind: ListKind, cidr: Cidr) -> Option<String> {
        self.list_origins.load().get(&(kind, cidr)).cloned()
    }

    /// Queues `change` for the next round (an early one is asked for), or counts it dropped.
    fn queue_list_change(&self, change: Change) {
        let key = change.key();
        let mut out = self.lists_out.lock().unwrap_or_else(|e| e.into_inner());
        if out.len() >= LISTS_OUT {
            drop(out);
            self.metrics.list_entries_dropped.inc();
            return;
        }
        let node = match &change {
            Change::Put(_, travelled) => Some(travelled.node.clone()),
            Change::Remove(_) => None,
        };
        out.push(change);
        drop(out);
        self.list_origins.rcu(|origins| {
            let mut origins = HashMap::clone(origins);
            match &node {
                Some(node) => origins.insert(key, node.clone()),
                None => origins.remove(&key),
            };
            origins
        });
        self.wake_early();
    }

    /// Reads the password `config` names, if any, and with TLS the CA and client certificate
    /// files, so that a node whose secret or certificate is missing says so at start rather
    /// than at every connection attempt (each connection reads them again: a rotated secret
    /// or renewed certificate is picked up).
    ///
    /// # Errors
    /// A message naming the file or variable (never the password).
    pub(crate) fn check_secret(config: &ClusterConfig) -> Result<(), String> {
        if let Some(auth) = &config.auth {
            redis::read_password(&auth.password)?;
        }
        if let Some(tls) = &config.tls {
            tls::client_config(tls)?;
        }
        Ok(())
    }

    /// The settings it runs with.
    #[must_use]
    pub(crate) fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// Its metrics.
    #[must_use]
    pub fn metrics(&self) -> &ClusterMetrics {
        &self.metrics
    }

    /// Redis's time in milliseconds at `now`: the clock windows are cut by.
    fn cluster_ms(&self, now: Tick) -> u64 {
        self.redis_clock.ms(now)
    }

    fn cluster_ms_now(&self) -> u64 {
        self.cluster_ms(self.clock.now())
    }

    /// For tests: moves this node's window edges by `by` milliseconds (as a clock that stepped
    /// would) until the next `TIME` reading, which finds and corrects it.
    #[doc(hidden)]
    pub fn shift_clock_ms(&self, by: i64) {
        self.redis_clock.shift(by.saturating_mul(1_000_000));
    }

    /// For tests: the script a round runs per batch of suspects (see `redis.rs`), so that a
    /// test can run it against a real Redis.
    #[doc(hidden)]
    #[must_use]
    pub fn push_script() -> &'static str {
        redis::SCRIPT
    }

    /// Asks the sync task for an early round: a key has just become a suspect here, and the
    /// sooner the others see it the less a source spread over them gets through. One flag
    /// read per call once set; at most one wake per round.
    fn wake_early(&self) {
        // Relaxed: a hint; a lost race costs one extra wake or one round's delay.
        if !self.wake_pending.load(Ordering::Relaxed)
            && !self.wake_pending.swap(true, Ordering::Relaxed)
        {
            self.wake.notify_one();
        }
    }
}

impl Remote for Cluster {
    fn threshold(&self) -> f64 {
        self.config.threshold.get()
    }

    fn suspect(&self, suspect: &Suspect<'_>) -> tollgate_filter::Rest {
        let period_ms = u64::try_from(suspect.per.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        // Odd: 0 marks a free slot in the suspects table.
        let seed = period_ms.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ suspect.shape;
        let hash = xxh3_64_with_seed(suspect.key.as_bytes(), seed) | 1;
        let grown = if suspect.weight > 0 {
            self.suspects.add(
                suspect.key,
                hash,
                period_ms,
                suspect.shape,
                || suspect.before.split(),
                suspect.weight,
            )
        } else {
            0
        };
        let view = self.view.load();
        match view.get(&hash) {
            Some(rest) => {
                let now_ms = self.cluster_ms(suspect.now);
                if suspect.weight > 0 && rest.unsettled(now_ms, self.sync_ms) {
                    self.wake_early();
                }
                rest.at(now_ms, grown)
            }
            None => {
                if suspect.weight > 0 {
                    self.wake_early();
                }
                tollgate_filter::Rest::default()
            }
        }
    }

    /// Queued for the next round (a lock, but once per penalty started, not per event).
    fn penalty_started(&self, key: &LimitKey, length: Duration, now: Tick) {
        let length_ms = u64::try_from(length.as_millis()).unwrap_or(u64::MAX);
        let until = self.cluster_ms(now).saturating_add(length_ms);
        let mut out = self.penalties_out.lock().unwrap_or_else(|e| e.into_inner());
        if out.len() < PENALTIES_OUT {
            let mut bytes = [0u8; LimitKey::LEN];
            bytes.copy_from_slice(key.as_bytes());
            out.push((bytes, until));
            drop(out);
            self.wake_early();
        } else {
            self.metrics.penalties_dropped.inc();
        }
    }

    /// Queued for the next round, which writes it to Redis (a lock, once per change).
    fn list_entry_added(&self, entry: &ListEntry, now: Tick) {
        let left =
            u64::try_from(entry.expires.saturating_since(now).as_millis()).unwrap_or(u64::MAX);
        self.queue_list_change(Change::Put(
            (entry.kind, entry.cidr),
            Travelled {
                until_ms: self.cluster_ms(now).saturating_add(left),
                node: self.config.node.clone(),
                reason: entry.reason.clone(),
            },
        ));
    }

    fn list_entry_removed(&self, kind: ListKind, cidr: Cidr, _now: Tick) {
        self.queue_list_change(Change::Remove((kind, cidr)));
    }

    fn penalised(&self, key: &LimitKey, now: Tick) -> bool {
        self.penalties_in
            .load()
            .get(key.as_bytes())
            .is_some_and(|&until| until > self.cluster_ms(now))
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use tollgate_filter::{Prefix, RuleId, Source};

    use super::*;
    use crate::config::ProxyConfig;

    fn cluster() -> Cluster {
        let config = ProxyConfig::parse(
            r#"
            [cluster]
            redis = ["127.0.0.1:1"]
            node = "a"
            name = "t"
            [[rule]]
            name = "r"
            limits = [{ rate = "100/10s" }]
            "#,
        )
        .expect("valid");
        Cluster::new(
            config.cluster.expect("a [cluster]"),
            MonotonicClock::new(),
            ClusterMetrics::new(),
        )
    }

    fn penalty_key(last: u8) -> LimitKey {
        let source = Source::from(Ipv4Addr::new(192, 0, 2, last));
        LimitKey::penalty(
            RuleId::from_name("r"),
            Duration::from_secs(60),
            source,
            Prefix::V4(32),
        )
    }

    #[test]
    fn a_shared_penalty_refuses_until_the_millisecond_it_ends() {
        let cluster = cluster();
        let key = penalty_key(1);
        let now = cluster.clock.now();
        let until = cluster.cluster_ms(now) + 1_000;
        let mut bytes = [0u8; LimitKey::LEN];
        bytes.copy_from_slice(key.as_bytes());
        cluster
            .penalties_in
            .store(Arc::new(HashMap::from([(bytes, until)])));
        assert!(cluster.penalised(&key, now));
        assert!(!cluster.penalised(&penalty_key(2), now), "another source");
        // At its end it is over (as `penalties_in_force` leaves it out of a lost Redis).
        let at_end = now + Duration::from_millis(1_000);
        assert_eq!(cluster.cluster_ms(at_end), until);
        assert!(!cluster.penalised(&key, at_end));
    }

    #[test]
    fn penalties_and_list_changes_queue_up_to_their_cap_and_count_the_rest() {
        let cluster = cluster();
        let now = cluster.clock.now();
        let key = penalty_key(1);
        cluster
            .penalties_out
            .lock()
            .unwrap()
            .resize(PENALTIES_OUT - 1, ([0; LimitKey::LEN], 0));
        cluster.penalty_started(&key, Duration::from_secs(60), now);
        cluster.penalty_started(&key, Duration::from_secs(60), now);
        let out = cluster.penalties_out.lock().unwrap().clone();
        assert_eq!(out.len(), PENALTIES_OUT);
        assert_eq!(out[PENALTIES_OUT - 1].0, key.as_bytes());
        assert_eq!(out[PENALTIES_OUT - 1].1, cluster.cluster_ms(now) + 60_000);
        assert_eq!(cluster.metrics.penalties_dropped.get(), 1);

        let cidr = |text: &str| Cidr::parse(text).unwrap();
        let entry = ListEntry {
            cidr: cidr("192.0.2.0/24"),
            kind: ListKind::Deny,
            expires: now + Duration::from_secs(30),
            reason: "flood".to_owned(),
        };
        cluster.list_entry_added(&entry, now);
        assert_eq!(
            cluster.list_origin(ListKind::Deny, entry.cidr).as_deref(),
            Some("a")
        );
        cluster.list_entry_removed(ListKind::Deny, entry.cidr, now);
        assert_eq!(cluster.list_origin(ListKind::Deny, entry.cidr), None);
        let queued = cluster.lists_out.lock().unwrap().clone();
        let key = (ListKind::Deny, entry.cidr);
        let put = Travelled {
            until_ms: cluster.cluster_ms(now) + 30_000,
            node: "a".to_owned(),
            reason: "flood".to_owned(),
        };
        assert_eq!(queued, [Change::Put(key, put), Change::Remove(key)]);
        // Full: the change stays local and counted, and is not shown as travelling.
        cluster
            .lists_out
            .lock()
            .unwrap()
            .resize(LISTS_OUT, Change::Remove(key));
        let other = ListEntry {
            cidr: cidr("198.51.100.0/24"),
            ..entry
        };
        cluster.list_entry_added(&other, now);
        assert_eq!(cluster.lists_out.lock().unwrap().len(), LISTS_OUT);
        assert_eq!(cluster.metrics.list_entries_dropped.get(), 1);
        assert_eq!(cluster.list_origin(ListKind::Deny, other.cidr), None);
    }

    #[tokio::test]
    async fn an_early_round_is_asked_for_once_until_a_round_clears_the_flag() {
        let cluster = cluster();
        let woken = || tokio::time::timeout(Duration::from_millis(20), cluster.wake.notified());
        cluster.wake_early();
        assert!(cluster.wake_pending.load(Ordering::Relaxed));
        assert!(woken().await.is_ok(), "woken");
        cluster.wake_early();
        assert!(woken().await.is_err(), "asked for already");
        cluster.wake_pending.store(false, Ordering::Relaxed);
        cluster.wake_early();
        assert!(woken().await.is_ok(), "woken again after a round");
    }
}
