//! The sync task: once per interval, collect the suspects' weight, push it to Redis and read
//! back the cluster-wide counts in one round trip, and swap in a new view. It runs apart from
//! the decide path, which never waits for it; when Redis is away it keeps the counts, says so
//! and retries, and when Redis is back it pushes what it kept and the view returns.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;
use tokio::time::MissedTickBehavior;

use super::Cluster;
use super::lists::{self, Change, Keys, ListKey, Outgoing, State, Travelled};
use super::redis::{
    Cost, Link, LinkError, Penalties, Push, Refusal, Round, Target, dataset_key, key_name,
    penalty_set,
};
use super::view::{Rest, View};
use tollgate_filter::{Collected, ListEntry};
use tollgate_sketch::Clock;

/// The longest wait between two connection attempts while Redis is away. Short, because it
/// sets how soon a node follows a failover (the replica is promoted about a second after the
/// master dies; at 2 s the nodes took up to 2.6 s more to find it). An attempt against a dead
/// server costs a refused connect or one `timeout`, and the sentinels answer one command.
const RETRY_MAX: Duration = Duration::from_millis(500);
/// While alone, at most one log line per this long says so.
const ALONE_LOG_EVERY: Duration = Duration::from_secs(30);

/// This node's own counts of one suspect, in the Redis-time windows Redis keys them by.
#[derive(Clone, Copy, Debug)]
struct Own {
    key: [u8; tollgate_filter::LimitKey::LEN],
    period_ms: u64,
    /// The key's rule's shape (`tollgate_filter::Rule::shape`).
    shape: u64,
    /// The window index of `counted[0]` and `pushed[0]`.
    window: u64,
    /// Weight counted here: current window, previous window.
    counted: [u64; 2],
    /// Of it, what Redis has (the rest of the cluster is the total less this).
    pushed: [u64; 2],
    /// Counted since the last successful round.
    touched: bool,
}

impl Own {
    fn roll(&mut self, window: u64) {
        match window.saturating_sub(self.window) {
            0 => return,
            1 => {
                self.counted = [0, self.counted[0]];
                self.pushed = [0, self.pushed[0]];
            }
            _ => {
                self.counted = [0, 0];
                self.pushed = [0, 0];
            }
        }
        self.window = window;
    }
}

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
    fn new(cluster: Arc<Cluster>) -> Syncer {
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

    fn own_cap(&self) -> usize {
        8 * self.cluster.suspects.capacity()
    }

    /// One round; an `early` one pushes and reads only the suspects the view does not hold
    /// yet (the rest wait for the next regular round).
    async fn round(&mut self, early: bool) {
        let cluster = Arc::clone(&self.cluster);
        let metrics = &cluster.metrics;
        if self.link.is_none() && Instant::now() >= self.retry_at {
            self.connect().await;
        }
        // After a connection's first `TIME` reading, so that the windows are Redis's.
        let now_ms = cluster.cluster_ms_now();
        self.collect(now_ms);
        metrics
            .suspects_overflow
            .inc_by(cluster.suspects.take_overflow());
        if self.link.is_some() {
            self.push(now_ms, early).await;
        }
        metrics
            .suspects
            .set(i64::try_from(self.own.len()).unwrap_or(i64::MAX));
        let age = self
            .last_success
            .map_or(f64::INFINITY, |at| at.elapsed().as_secs_f64());
        metrics.view_age.set(age);
    }

    /// Takes the suspects' weight into the own counts, rolled to the current windows;
    /// forgets suspects with nothing counted in either.
    fn collect(&mut self, now_ms: u64) {
        let cap = self.own_cap();
        self.collected.clear();
        self.cluster.suspects.drain(&mut self.collected);
        for item in &self.collected {
            let window = now_ms / item.period_ms.max(1);
            let full = self.own.len() >= cap;
            let own = match self.own.get_mut(&item.hash) {
                Some(own) => own,
                None if full => {
                    self.cluster.metrics.suspects_overflow.inc();
                    continue;
                }
                // A new suspect brings what was counted here before it became one, so the
                // others see all of it, not only what came after the threshold: the current
                // window's part as a count of the current window, the previous window's share
                // (already faded here) as one of the previous window, so that it fades out of
                // the others' estimates no later than out of this node's.
                None => self.own.entry(item.hash).or_insert(Own {
                    key: item.key,
                    period_ms: item.period_ms,
                    shape: item.shape,
                    window,
                    counted: [item.before.current, item.before.previous],
                    pushed: [0, 0],
                    touched: true,
                }),
            };
            own.roll(window);
            own.counted[0] += item.weight;
            own.touched = true;
        }
        let view = &mut self.view;
        self.own.retain(|hash, own| {
            own.roll(now_ms / own.period_ms.max(1));
            let keep = own.counted != [0, 0];
            if !keep {
                view.remove(hash);
            }
            keep
        });
    }

    async fn connect(&mut self) {
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

    async fn push(&mut self, now_ms: u64, early: bool) {
        let cluster = Arc::clone(&self.cluster);
        let config = &cluster.config;
        let sync_ms = u64::try_from(config.sync.as_millis()).unwrap_or(u64::MAX);
        let mut hashes = Vec::new();
        let mut pushes = Vec::new();
        for (&hash, own) in self.own.iter().filter(|_| !self.clock_refused) {
            // A suspect with nothing new is still read when the view lacks it (emptied while
            // Redis was away or the clock refused): with nothing to add the script only reads,
            // and the rest returns at once, not at the suspect's next event.
            let unchanged = !own.touched && own.counted == own.pushed;
            if (unchanged && self.view.contains_key(&hash))
                || (early
                    && self
                        .view
                        .get(&hash)
                        .is_some_and(|rest| !rest.unsettled(now_ms, sync_ms)))
            {
                continue;
            }
            let window = now_ms / own.period_ms.max(1);
            hashes.push(hash);
            pushes.push(Push {
                current: key_name(&config.name, own.shape, &own.key, own.period_ms, window),
                previous: key_name(
                    &config.name,
                    own.shape,
                    &own.key,
                    own.period_ms,
                    window.saturating_sub(1),
                ),
                ttl_ms: 2 * own.period_ms,
                add_current: own.counted[0] - own.pushed[0],
                add_previous: own.counted[1] - own.pushed[1],
            });
        }
        let Some(link) = self.link.as_mut() else {
            return;
        };
        let started = Instant::now();
        let added: Vec<_> = std::mem::take(
            &mut *cluster
                .penalties_out
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        let again = std::mem::take(&mut self.penalties_again);
        let set = penalty_set(&config.name);
        let penalties = Penalties {
            set: &set,
            add: &added,
            again: &again,
            now_ms,
        };
        let changes: Vec<Change> =
            std::mem::take(&mut *cluster.lists_out.lock().unwrap_or_else(|e| e.into_inner()));
        self.lists_writes += 1;
        let token = format!("{}:{now_ms}:{}", config.node, self.lists_writes);
        let outgoing = Outgoing {
            keys: &self.lists_keys,
            changes: &changes,
            now_ms,
            token: &token,
        };
        let sent = cluster.clock.now();
        let result = link
            .round(&pushes, &penalties, &outgoing, config.timeout)
            .await;
        let received = cluster.clock.now();
        let metrics = &cluster.metrics;
        match result {
            Ok(Round {
                totals,
                cost,
                redis_ns,
                live,
                lists_version,
            }) => {
                metrics.penalties_shared.inc_by(added.len() as u64);
                metrics
                    .penalties_held
                    .set(i64::try_from(live.len()).unwrap_or(i64::MAX));
                cluster
                    .penalties_in
                    .store(Arc::new(live.into_iter().collect()));
                let took = started.elapsed().as_secs_f64();
                metrics.sync_seconds.observe(took);
                metrics.last_sync.set(took);
                metrics.sent_bytes.inc_by(cost.sent);
                metrics.received_bytes.inc_by(cost.received);
                metrics.redis_commands.inc_by(cost.commands);
                metrics.syncs.inc();
                metrics.list_entries_sent.inc_by(changes.len() as u64);
                for change in changes {
                    match change {
                        Change::Put(key, travelled) => self.lists_known.insert(key, travelled),
                        Change::Remove(key) => self.lists_known.remove(&key),
                    };
                }
                if lists_version.is_some() && lists_version != self.lists_version {
                    self.read_lists().await;
                }
                let reading = cluster.redis_clock.read(sent, received, redis_ns);
                let refused = self.clock_refused;
                self.clock_read(redis_ns, reading.error);
                if refused {
                    // This round shared nothing: the view stays empty, the counts are kept.
                    return;
                }
                for (hash, (current, previous)) in hashes.iter().zip(totals) {
                    let Some(own) = self.own.get_mut(hash) else {
                        continue;
                    };
                    own.pushed = own.counted;
                    own.touched = false;
                    let current = current.saturating_sub(own.pushed[0]);
                    let first_ms = self.view.get(hash).map_or(now_ms, |last| last.first_ms);
                    let (growth, growth_ms) = match self.view.get(hash) {
                        Some(last) if last.window == own.window && last.read_ms < now_ms => {
                            (current.saturating_sub(last.current), now_ms - last.read_ms)
                        }
                        _ => (0, 0),
                    };
                    self.view.insert(
                        *hash,
                        Rest {
                            window: own.window,
                            period_ms: own.period_ms,
                            current,
                            previous: previous.saturating_sub(own.pushed[1]),
                            read_ms: now_ms,
                            growth,
                            growth_ms,
                            own: Rest::sliding(own.counted, own.period_ms, now_ms),
                            first_ms,
                        },
                    );
                }
                if self.link.is_none() {
                    // The lists' read after the round failed: `failed` cleared the view and
                    // said the node is alone until a round on a new link. The counts above
                    // went with this round and are not pushed again.
                    self.view.clear();
                    return;
                }
                self.cluster.view.store(Arc::new(self.view.clone()));
                // Relaxed: a hint (see `Cluster::wake_early`); the suspects seen so far are in
                // the view now.
                self.cluster
                    .wake_pending
                    .store(false, std::sync::atomic::Ordering::Relaxed);
                self.last_success = Some(Instant::now());
                if metrics.alone.get() == 1 {
                    metrics.alone.set(0);
                    tracing::info!(
                        cluster = %config.name,
                        node = %config.node,
                        redis = %self.address(),
                        "cluster: joined; limits count the whole cluster"
                    );
                    self.alone_logged = None;
                }
            }
            Err(error) => {
                // Not shared yet: they go with the next round (the ones that ended by then
                // are removed by it at once).
                let mut out = cluster
                    .penalties_out
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                let room = super::PENALTIES_OUT.saturating_sub(out.len());
                out.extend(added.into_iter().take(room));
                drop(out);
                // Unless the next connection finds yet another dataset (then they are read
                // from the penalties in force again), they go with the next round too.
                self.penalties_again = again;
                let mut out = cluster.lists_out.lock().unwrap_or_else(|e| e.into_inner());
                let room = super::LISTS_OUT.saturating_sub(out.len());
                let lost = changes.len().saturating_sub(room);
                // Older first: a later change to one entry must stay the later.
                let newer = std::mem::take(&mut *out);
                out.extend(changes.into_iter().take(room));
                out.extend(newer);
                out.truncate(super::LISTS_OUT);
                drop(out);
                metrics.list_entries_dropped.inc_by(lost as u64);
                self.link = None;
                self.failed(&error);
            }
        }
    }

    /// Reads the lists' whole state (the version changed since the last read) and lays the
    /// difference over this node's lists.
    async fn read_lists(&mut self) {
        let cluster = Arc::clone(&self.cluster);
        let Some(link) = self.link.as_mut() else {
            return;
        };
        let mut cost = Cost::default();
        let pipe = lists::read_pipeline(&self.lists_keys, &mut cost);
        let read = link.query(&pipe, cluster.config.timeout).await;
        match read {
            Ok(raw) => {
                let state = lists::parse_state(raw, &mut cost);
                let metrics = &cluster.metrics;
                metrics.sent_bytes.inc_by(cost.sent);
                metrics.received_bytes.inc_by(cost.received);
                metrics.redis_commands.inc_by(cost.commands);
                self.apply_lists(state);
            }
            Err(error) => {
                self.link = None;
                self.failed(&error);
            }
        }
    }

    /// Lays what `state` holds and this node does not (and takes out what was known and is
    /// gone) over the filter's lists, leaving alone the entries this node changed since its
    /// last round (its own change is the later one).
    fn apply_lists(&mut self, state: State) {
        let cluster = Arc::clone(&self.cluster);
        let metrics = &cluster.metrics;
        metrics
            .list_entries_held
            .set(i64::try_from(state.entries.len()).unwrap_or(i64::MAX));
        if state.version.is_none() {
            // Never written, or Redis lost them: keep what is held.
            return;
        }
        let pending: HashMap<ListKey, Option<String>> = cluster
            .lists_out
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|change| match change {
                Change::Put(key, travelled) => (*key, Some(travelled.node.clone())),
                Change::Remove(key) => (*key, None),
            })
            .collect();
        if let Some(lists) = cluster.lists.get() {
            let now = cluster.clock.now();
            let now_ms = cluster.cluster_ms(now);
            let held: HashMap<ListKey, ListEntry> = lists
                .entries(now)
                .into_iter()
                .map(|entry| ((entry.kind, entry.cidr), entry))
                .collect();
            let mut puts = Vec::new();
            for (key, travelled) in &state.entries {
                if pending.contains_key(key) || travelled.until_ms <= now_ms {
                    continue;
                }
                let expires = now + Duration::from_millis(travelled.until_ms - now_ms);
                let same = held.get(key).is_some_and(|entry| {
                    let apart = entry
                        .expires
                        .saturating_since(expires)
                        .max(expires.saturating_since(entry.expires));
                    entry.reason == travelled.reason && apart < Duration::from_secs(1)
                });
                if !same {
                    puts.push(ListEntry {
                        cidr: key.1,
                        kind: key.0,
                        expires,
                        reason: travelled.reason.clone(),
                    });
                }
            }
            let removes: Vec<ListKey> = self
                .lists_known
                .keys()
                .filter(|key| {
                    !state.entries.contains_key(key)
                        && !pending.contains_key(key)
                        && held.contains_key(key)
                })
                .copied()
                .collect();
            let merged = lists.merge(puts, &removes, now);
            metrics.list_entries_received.inc_by(merged.applied as u64);
            metrics.list_entries_dropped.inc_by(merged.dropped as u64);
            if merged.applied > 0 || merged.dropped > 0 {
                tracing::info!(
                    cluster = %cluster.config.name,
                    node = %cluster.config.node,
                    applied = merged.applied,
                    dropped = merged.dropped,
                    "cluster: run-time list changes from other nodes applied"
                );
            }
        }
        let mut origins: HashMap<ListKey, String> = state
            .entries
            .iter()
            .map(|(key, travelled)| (*key, travelled.node.clone()))
            .collect();
        for (key, node) in pending {
            match node {
                Some(node) => origins.insert(key, node),
                None => origins.remove(&key),
            };
        }
        cluster.list_origins.store(Arc::new(origins));
        self.lists_known = state.entries;
        self.lists_version = state.version;
    }

    /// After Redis restarted (it lost the lists): writes again the entries this node added
    /// and still holds, and forgets what it knew, so that the first read of the new Redis
    /// removes nothing (the others write theirs again too; a node that is gone as well leaves
    /// its entries where they are held until they end).
    fn rewrite_own_lists(&mut self) {
        let cluster = Arc::clone(&self.cluster);
        self.lists_known.clear();
        self.lists_version = None;
        let Some(lists) = cluster.lists.get() else {
            return;
        };
        let origins = cluster.list_origins.load();
        let now = cluster.clock.now();
        let now_ms = cluster.cluster_ms(now);
        let mut out = cluster.lists_out.lock().unwrap_or_else(|e| e.into_inner());
        for entry in lists.entries(now) {
            let key = (entry.kind, entry.cidr);
            if origins.get(&key) != Some(&cluster.config.node) {
                continue;
            }
            if out.len() >= super::LISTS_OUT {
                cluster.metrics.list_entries_dropped.inc();
                continue;
            }
            let left =
                u64::try_from(entry.expires.saturating_since(now).as_millis()).unwrap_or(u64::MAX);
            out.push(Change::Put(
                key,
                Travelled {
                    until_ms: now_ms.saturating_add(left),
                    node: cluster.config.node.clone(),
                    reason: entry.reason,
                },
            ));
        }
    }

    /// Records a `TIME` reading of `redis_ns` whose window edges are off by up to `error`:
    /// the metrics, and whether the next round may share (logged, within the budget, when
    /// that changes).
    fn clock_read(&mut self, redis_ns: u64, error: Duration) {
        let config = &self.cluster.config;
        let metrics = &self.cluster.metrics;
        let wall_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        metrics
            .clock_offset
            .set((redis_ns as f64 - wall_ns as f64) / 1e9);
        metrics.clock_error.set(error.as_secs_f64());
        let refuse = error > config.max_clock_error;
        if refuse {
            metrics.clock_refusals.inc();
            if !self.view.is_empty() {
                self.view.clear();
                self.cluster.view.store(Arc::new(View::default()));
            }
        }
        let due = self
            .clock_logged
            .is_none_or(|at| at.elapsed() >= ALONE_LOG_EVERY);
        if refuse && (!self.clock_refused || due) {
            tracing::warn!(
                cluster = %config.name,
                node = %config.node,
                redis = %self.address(),
                error_ms = error.as_millis(),
                max_clock_error_ms = config.max_clock_error.as_millis(),
                "cluster: this node's windows may be further from Redis's clock than \
                 max_clock_error; not sharing counts until a reading agrees"
            );
            self.clock_logged = Some(Instant::now());
        } else if !refuse && self.clock_refused {
            tracing::info!(
                cluster = %config.name,
                node = %config.node,
                error_ms = error.as_millis(),
                "cluster: clock reading within max_clock_error again; sharing counts"
            );
            self.clock_logged = None;
        }
        metrics.clock_refused.set(i64::from(refuse));
        self.clock_refused = refuse;
    }

    /// The master's address as the first sentinel to answer knows it (starting with the one
    /// that answered last), and the name its certificate must carry with TLS
    /// (`tls_server_name`, else the host the sentinel gave). Without sentinels `Err(None)`;
    /// when none answers, the last one's error (each failure logged at debug level: the
    /// fallback list or the retry follows, and logs it if nothing else answers). With TLS the
    /// sentinels are reached with TLS too.
    async fn discover(&mut self) -> Result<(std::net::SocketAddr, String), Option<String>> {
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
            match super::redis::master_of(target, &sentinel.master, config.timeout).await {
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
    fn address(&self) -> String {
        self.current
            .map_or_else(|| "none yet".to_owned(), |a| a.to_string())
    }

    /// Redis is away, or refused (see [`Failure`]): limit alone (an empty view), count the
    /// error, log what happened within the budget, move to the next configured server (but
    /// for a Redis that only lost its data: it answers, and is reconnected to), and back off
    /// before the next attempt.
    fn failed(&mut self, error: &LinkError) {
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
enum Failure {
    /// No answer, a cut connection, a failed login or handshake, an unexpected reply.
    Unreachable,
    /// It answered, but is not a master ([`Refusal::NotMaster`]).
    NotMaster,
    /// It answered, but lost its data since the connection read its dataset id
    /// ([`Refusal::DatasetChanged`]).
    DataLost,
}

impl Failure {
    fn of(error: &LinkError) -> Failure {
        match error.downcast_ref::<Refusal>() {
            Some(Refusal::NotMaster(_)) => Failure::NotMaster,
            Some(Refusal::DatasetChanged { .. }) => Failure::DataLost,
            None => Failure::Unreachable,
        }
    }

    /// The log line's message.
    fn message(self) -> &'static str {
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
fn penalties_in_force(
    held: &HashMap<[u8; tollgate_filter::LimitKey::LEN], u64>,
    now_ms: u64,
) -> Vec<([u8; tollgate_filter::LimitKey::LEN], u64)> {
    held.iter()
        .filter(|&(_, &until)| until > now_ms)
        .map(|(&key, &until)| (key, until))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use tollgate_filter::{Event, Filter, Remote, Source, Transport};
    use tollgate_sketch::{MonotonicClock, Tick};

    use super::*;
    use crate::cluster::ClusterMetrics;
    use crate::config::ProxyConfig;
    use crate::test_log::{Capture, lines_with};

    #[test]
    fn a_new_suspect_pushes_each_windows_part_in_its_window() {
        let config = ProxyConfig::parse(
            r#"
            [sketch]
            memory = "4MiB"
            [cluster]
            redis = ["127.0.0.1:1"]
            node = "a"
            name = "t"
            threshold = 0.25
            [[rule]]
            name = "r"
            limits = [{ rate = "100/10s" }]
            "#,
        )
        .expect("valid");
        let cluster = Arc::new(Cluster::new(
            config.cluster.clone().expect("a [cluster]"),
            MonotonicClock::new(),
            ClusterMetrics::new(),
        ));
        let remote = Arc::clone(&cluster) as Arc<dyn Remote>;
        let filter = Filter::with_remote(config.policy.clone(), remote).expect("fits");
        let event = Event {
            source: Source::from(Ipv4Addr::new(192, 0, 2, 1)),
            transport: Transport::Tcp,
            bytes: 1,
        };
        // 20 events in the sketch's first window: under the threshold of 25.
        for _ in 0..20 {
            let _ = filter.decide(&event, Tick::from_nanos(1_000_000_000));
        }
        // Halfway through the next window 10 of them still count: with 16 more events here
        // the key becomes a suspect on the way.
        let now = Tick::from_nanos(15_000_000_000);
        for _ in 0..16 {
            let _ = filter.decide(&event, now);
        }
        let mut syncer = Syncer::new(Arc::clone(&cluster));
        syncer.collect(cluster.cluster_ms(now));
        let owns: Vec<Own> = syncer.own.values().copied().collect();
        let [own] = owns[..] else {
            panic!("one suspect, got {owns:?}");
        };
        // Never more in the current window than the 16 events counted in it; the previous
        // window's share (10) in the previous window.
        assert!(own.counted[0] <= 16, "current {:?}", own.counted);
        assert!(
            (1..=10).contains(&own.counted[1]),
            "previous {:?}",
            own.counted
        );
    }

    #[test]
    fn a_refusal_is_logged_as_what_it_is_not_as_unreachable() {
        let not_master = LinkError::from(Refusal::NotMaster("slave".to_owned()));
        let lost = LinkError::from(Refusal::DatasetChanged {
            read: "a".to_owned(),
            held: Some("b".to_owned()),
        });
        let cut = LinkError::from("timed out");
        assert_eq!(Failure::of(&not_master), Failure::NotMaster);
        assert_eq!(Failure::of(&lost), Failure::DataLost);
        assert_eq!(Failure::of(&cut), Failure::Unreachable);
        assert!(Failure::NotMaster.message().contains("not a master"));
        assert!(Failure::DataLost.message().contains("lost its data"));
        for refusal in [Failure::NotMaster, Failure::DataLost] {
            assert!(!refusal.message().contains("unreachable"), "{refusal:?}");
        }
        assert!(lost.to_string().contains("\"b\" where \"a\""), "{lost}");
    }

    #[test]
    fn own_counts_roll_with_the_windows() {
        let mut own = Own {
            key: [0; tollgate_filter::LimitKey::LEN],
            period_ms: 1000,
            shape: 0,
            window: 7,
            counted: [5, 3],
            pushed: [4, 3],
            touched: true,
        };
        own.roll(7);
        assert_eq!((own.counted, own.pushed), ([5, 3], [4, 3]));
        // One window on: what was current is previous, and its unpushed 1 is still owed.
        own.roll(8);
        assert_eq!((own.window, own.counted, own.pushed), (8, [0, 5], [0, 4]));
        own.roll(10);
        assert_eq!((own.counted, own.pushed), ([0, 0], [0, 0]));
    }

    /// A node of cluster `t` whose first `redis` address is `redis`, with `extra` settings in
    /// its `[cluster]` section (a limit of 100 per 10 s).
    /// A filter of one rule (100 per 10 s) whose suspects go to `cluster`.
    fn counting_to(cluster: &Arc<Cluster>) -> Filter {
        let config = ProxyConfig::parse(
            r#"
            [[rule]]
            name = "r"
            limits = [{ rate = "100/10s" }]
            "#,
        )
        .expect("valid");
        let remote = Arc::clone(cluster) as Arc<dyn Remote>;
        Filter::with_remote(config.policy.clone(), remote).expect("fits")
    }

    fn cluster_at(redis: &str, extra: &str) -> Arc<Cluster> {
        let config = ProxyConfig::parse(&format!(
            r#"
            [sketch]
            memory = "4MiB"
            [cluster]
            redis = ["{redis}"]
            node = "a"
            name = "t"
            threshold = 0.25
            {extra}
            [[rule]]
            name = "r"
            limits = [{{ rate = "100/10s" }}]
            "#
        ))
        .expect("valid");
        Arc::new(Cluster::new(
            config.cluster.clone().expect("a [cluster]"),
            MonotonicClock::new(),
            ClusterMetrics::new(),
        ))
    }

    #[test]
    fn redis_away_backs_off_doubling_to_its_cap_and_tries_the_next_server() {
        let cluster = cluster_at("127.0.0.1:1", r#"sync = "100ms""#);
        let mut syncer = Syncer::new(Arc::clone(&cluster));
        syncer.view.insert(7, Rest::default());
        cluster.view.store(Arc::new(syncer.view.clone()));
        let cut = LinkError::from("connection refused");
        let mut waits = Vec::new();
        for _ in 0..5 {
            // `failed` reads the clock between these two: the wait it added lies between
            // `retry_at - after` and `retry_at - before`, however slow the machine.
            let before = Instant::now();
            syncer.failed(&cut);
            let after = Instant::now();
            waits.push((
                syncer.retry_at.saturating_duration_since(after),
                syncer.retry_at.saturating_duration_since(before),
            ));
        }
        // Each wait is the one before doubled, up to RETRY_MAX: not a retry storm against a
        // Redis that is down, and not a wait that grows past how soon a failover is followed.
        for ((least, most), ms) in waits.iter().zip([100, 200, 400, 500, 500]) {
            let expected = Duration::from_millis(ms);
            assert!((*least..=*most).contains(&expected), "{waits:?}");
        }
        assert_eq!(syncer.server, 5, "each failure tries the next server");
        assert!(syncer.view.is_empty() && cluster.view.load().is_empty());
        assert_eq!(cluster.metrics.redis_errors.get(), 5);
        assert_eq!(cluster.metrics.alone.get(), 1);
        // A Redis that only lost its data answers: it is the one reconnected to.
        syncer.failed(&LinkError::from(Refusal::DatasetChanged {
            read: "a".to_owned(),
            held: None,
        }));
        assert_eq!(syncer.server, 5);
    }

    #[test]
    fn only_penalties_that_have_not_ended_are_added_back() {
        const LEN: usize = tollgate_filter::LimitKey::LEN;
        // Ended before now, ending now (`penalised` no longer refuses it), ending after.
        let held = HashMap::from([([1; LEN], 99), ([2; LEN], 100), ([3; LEN], 101)]);
        assert_eq!(penalties_in_force(&held, 100), [([3; LEN], 101)]);
    }

    #[test]
    fn a_clock_reading_beyond_max_clock_error_stops_sharing_until_one_agrees() {
        let cluster = cluster_at("127.0.0.1:1", r#"max_clock_error = "250ms""#);
        let mut syncer = Syncer::new(Arc::clone(&cluster));
        syncer.view.insert(7, Rest::default());
        cluster.view.store(Arc::new(syncer.view.clone()));
        let metrics = &cluster.metrics;
        let wall_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        // Redis 5 s ahead of this node's wall clock; edges off by exactly the budget: shared.
        syncer.clock_read(wall_ns + 5_000_000_000, Duration::from_millis(250));
        assert!(!syncer.clock_refused);
        assert!(
            (metrics.clock_offset.get() - 5.0).abs() < 1.0,
            "{}",
            metrics.clock_offset.get()
        );
        assert!((metrics.clock_error.get() - 0.25).abs() < 1e-9);
        assert_eq!(syncer.view.len(), 1, "the view is kept");
        // A millisecond beyond: nothing shared, the others' counts out of the decisions.
        syncer.clock_read(wall_ns, Duration::from_millis(251));
        assert!(syncer.clock_refused);
        assert_eq!(metrics.clock_refused.get(), 1);
        assert_eq!(metrics.clock_refusals.get(), 1);
        assert!(syncer.view.is_empty() && cluster.view.load().is_empty());
        syncer.clock_read(wall_ns, Duration::ZERO);
        assert!(!syncer.clock_refused);
        assert_eq!(metrics.clock_refused.get(), 0);
    }

    #[test]
    fn own_counts_stop_growing_at_their_cap_and_count_the_overflow() {
        let cluster = cluster_at("127.0.0.1:1", "suspects = 64");
        let filter = counting_to(&cluster);
        let now = Tick::from_nanos(1_000_000_000);
        // Two sources over the threshold: two new suspects.
        for last in [1, 2] {
            let event = Event {
                source: Source::from(Ipv4Addr::new(192, 0, 2, last)),
                transport: Transport::Tcp,
                bytes: 1,
            };
            for _ in 0..30 {
                let _ = filter.decide(&event, now);
            }
        }
        let mut syncer = Syncer::new(Arc::clone(&cluster));
        let now_ms = cluster.cluster_ms(now);
        let cap = syncer.own_cap();
        assert_eq!(cap, 8 * 64);
        // Room for one more.
        for hash in 0..cap as u64 - 1 {
            syncer.own.insert(
                hash << 1,
                Own {
                    key: [0; tollgate_filter::LimitKey::LEN],
                    period_ms: 10_000,
                    shape: 0,
                    window: now_ms / 10_000,
                    counted: [1, 0],
                    pushed: [0, 0],
                    touched: true,
                },
            );
        }
        syncer.collect(now_ms);
        assert_eq!(syncer.own.len(), cap);
        assert_eq!(cluster.metrics.suspects_overflow.get(), 1);
    }

    #[test]
    fn a_read_lays_over_what_changed_and_not_what_ended_or_is_changing_here() {
        use tollgate_filter::{Cidr, ListKind, RuntimeLists};
        let cluster = cluster_at("127.0.0.1:1", "");
        let lists = Arc::new(RuntimeLists::new(100, Duration::from_secs(3600)));
        cluster.attach_lists(Arc::clone(&lists));
        let mut syncer = Syncer::new(Arc::clone(&cluster));
        let deny = |cidr: &str| (ListKind::Deny, Cidr::parse(cidr).unwrap());
        let now = cluster.clock.now();
        let now_ms = cluster.cluster_ms(now);
        let travelled = |in_ms: u64, node: &str, reason: &str| Travelled {
            until_ms: now_ms + in_ms,
            node: node.to_owned(),
            reason: reason.to_owned(),
        };
        // Held here from the last read, or (the last) added here and not written yet.
        let [same, reason, longer, gone, changing] = [
            "192.0.2.0/24",
            "192.0.2.1/32",
            "192.0.2.2/32",
            "198.51.100.0/24",
            "203.0.113.0/24",
        ]
        .map(deny);
        for key in [same, reason, longer, gone, changing] {
            let ttl = Duration::from_secs(60);
            let added = lists.add(key.1, key.0, ttl, "x".to_owned(), now);
            added.expect("room");
            syncer.lists_known.insert(key, travelled(60_000, "b", "x"));
        }
        syncer.lists_known.remove(&changing);
        cluster
            .lists_out
            .lock()
            .unwrap()
            .push(Change::Put(changing, travelled(60_000, "a", "x")));
        let (new, ended) = (deny("10.1.0.0/16"), deny("10.2.0.0/16"));
        let state = State {
            version: Some("v2".to_owned()),
            entries: HashMap::from([
                (same, travelled(60_000, "b", "x")),
                (reason, travelled(60_000, "b", "y")),
                (longer, travelled(120_000, "b", "x")),
                (new, travelled(30_000, "c", "z")),
                // A replayed or stale entry that has ended by Redis's clock.
                (ended, travelled(0, "c", "z")),
            ]),
        };
        syncer.apply_lists(state);
        let held: HashMap<ListKey, ListEntry> = lists
            .entries(cluster.clock.now())
            .into_iter()
            .map(|entry| ((entry.kind, entry.cidr), entry))
            .collect();
        let keys: std::collections::HashSet<_> = held.keys().copied().collect();
        let expected = [same, reason, longer, changing, new].into_iter().collect();
        assert_eq!(keys, expected, "`gone` removed, `ended` left out");
        let left = |key| held[&key].expires.saturating_since(now).as_millis();
        assert_eq!(held[&reason].reason, "y");
        assert!(
            (119_000..=120_000).contains(&left(longer)),
            "{}",
            left(longer)
        );
        assert!((29_000..=30_000).contains(&left(new)), "{}", left(new));
        assert_eq!(held[&new].reason, "z");
        // Put: `reason`, `longer`, `new`; taken out: `gone`. `same` is not put again.
        assert_eq!(cluster.metrics.list_entries_received.get(), 4);
        assert_eq!(cluster.list_origin(new.0, new.1).as_deref(), Some("c"));
        assert_eq!(
            cluster.list_origin(changing.0, changing.1).as_deref(),
            Some("a")
        );
        assert_eq!(syncer.lists_version.as_deref(), Some("v2"));
    }

    /// The window (of 10 s) the scripted Redis's `TIME`, 1,700,000,000.012345 s, falls in.
    const SCRIPTED_WINDOW: u64 = 170_000_000;

    /// The key of the suspect the push tests use, in `window`.
    fn pushed_key(window: u64) -> Vec<u8> {
        key_name("t", 1, &[3; tollgate_filter::LimitKey::LEN], 10_000, window)
    }

    /// A node connected to a scripted Redis where the others have counted `others` of the
    /// push tests' suspect (current window, previous window), with that suspect counted
    /// `own` here (nothing pushed yet).
    async fn connected(
        others: [i64; 2],
        own: [u64; 2],
    ) -> (
        Arc<Cluster>,
        Syncer,
        tokio::task::JoinHandle<Vec<super::super::redis::tests::Exchange>>,
    ) {
        use super::super::redis::tests::{Answers, scripted};
        let mut answers = Answers::default();
        answers.counters = vec![
            (pushed_key(SCRIPTED_WINDOW), others[0]),
            (pushed_key(SCRIPTED_WINDOW - 1), others[1]),
        ];
        let (address, serve) = scripted(answers).await;
        // Its `TIME` stands still: a wide budget for the rounds' readings.
        let cluster = cluster_at(&address.to_string(), r#"max_clock_error = "1h""#);
        let mut syncer = Syncer::new(Arc::clone(&cluster));
        syncer.connect().await;
        assert!(syncer.link.is_some(), "connected");
        assert_eq!(cluster.cluster_ms_now() / 10_000, SCRIPTED_WINDOW);
        // The lists' version every round finds (the scripted Redis cannot answer their read).
        syncer.lists_version = Some("v7".to_owned());
        syncer.own.insert(
            1,
            Own {
                key: [3; tollgate_filter::LimitKey::LEN],
                period_ms: 10_000,
                shape: 1,
                window: SCRIPTED_WINDOW,
                counted: own,
                pushed: [0, 0],
                touched: true,
            },
        );
        (cluster, syncer, serve)
    }

    #[tokio::test]
    async fn the_view_holds_the_rest_of_the_cluster_and_each_count_is_pushed_once() {
        let (cluster, mut syncer, serve) = connected([40, 100], [10, 4]).await;
        let now_ms = cluster.cluster_ms_now();
        syncer.push(now_ms, false).await;
        let rest = syncer.view[&1];
        // Redis holds 50 and 104 now; the rest of the cluster is what this node did not count.
        assert_eq!(
            (rest.window, rest.current, rest.previous),
            (SCRIPTED_WINDOW, 40, 100)
        );
        assert_eq!(cluster.view.load().get(&1).copied(), Some(rest));
        assert_eq!(syncer.own[&1].pushed, [10, 4]);
        assert_eq!(cluster.metrics.alone.get(), 0, "joined");
        // Nothing new here, and the view holds it: not pushed nor read again (no script sent:
        // see the count of scripts below).
        syncer.push(now_ms, false).await;
        // 5 more here. An early round leaves out a suspect the others have counted (it is
        // settled): it waits for the next regular round.
        syncer.own.get_mut(&1).unwrap().counted[0] += 5;
        syncer.own.get_mut(&1).unwrap().touched = true;
        syncer.push(now_ms + 1, true).await;
        assert_eq!(syncer.own[&1].pushed, [10, 4]);
        // The regular round pushes only the 5, and the rest stays 40 and 100 (pushing 15
        // again would make it 50, an overcount that throttles the source early everywhere).
        syncer.push(now_ms + 100, false).await;
        let rest = syncer.view[&1];
        assert_eq!((rest.current, rest.previous), (40, 100));
        assert_eq!((rest.growth, rest.growth_ms), (0, 100));
        assert_eq!(syncer.own[&1].pushed, [15, 4]);
        // The next window: what was current is previous, and the rest of it is still 40
        // (the 15 of this node taken out, not 0 nor 55); no growth across the edge.
        let next_ms = now_ms + 10_000;
        let own = syncer.own.get_mut(&1).unwrap();
        own.roll(next_ms / 10_000);
        own.counted[0] += 1;
        own.touched = true;
        syncer.push(next_ms, false).await;
        let rest = syncer.view[&1];
        assert_eq!(
            (rest.window, rest.current, rest.previous),
            (SCRIPTED_WINDOW + 1, 0, 40)
        );
        assert_eq!((rest.growth, rest.growth_ms), (0, 0));
        // Every round wrote its lists' part with a token of its own.
        assert_eq!(syncer.lists_writes, 5);
        // Each counter lives two periods: the previous window's count is there to be read
        // until that window has passed out of every estimate.
        drop(syncer);
        let exchanges = serve.await.unwrap();
        let scripts: Vec<_> = exchanges
            .iter()
            .filter(|e| e.args[0] == b"EVALSHA")
            .collect();
        // The first round, the regular one with 5 more, the next window's: not the one with
        // nothing new, nor the early one.
        assert_eq!(scripts.len(), 3);
        for script in scripts {
            // EVALSHA sha 3 dataset-key current previous dataset ttl add-current add-previous
            assert_eq!(script.args[7], b"20000");
        }
    }

    /// A round whose script went through but whose lists' read after it failed: the link is
    /// dropped and the node is alone (limits count this node only) until a round on a new
    /// link, so it must not say it joined; the round's counts went to Redis and are not
    /// pushed again.
    #[tokio::test]
    async fn a_lists_read_that_fails_after_the_round_leaves_the_node_alone() {
        let (cluster, mut syncer, _serve) = connected([40, 100], [10, 4]).await;
        // A version other than the one the round finds: the lists are read after it, and the
        // scripted Redis cannot answer that read.
        syncer.lists_version = Some("v6".to_owned());
        syncer.push(cluster.cluster_ms_now(), false).await;
        assert!(
            syncer.link.is_none(),
            "the read failed: the link is dropped"
        );
        assert_eq!(syncer.own[&1].pushed, [10, 4], "pushed once");
        assert_eq!(cluster.metrics.alone.get(), 1, "alone, not joined");
        assert!(syncer.view.is_empty() && cluster.view.load().is_empty());
    }

    #[tokio::test]
    async fn a_round_while_the_clock_is_refused_shares_nothing_and_pushes_nothing() {
        let (cluster, mut syncer, _serve) = connected([40, 0], [10, 0]).await;
        syncer.clock_refused = true;
        let now_ms = cluster.cluster_ms_now();
        syncer.push(now_ms, false).await;
        assert!(syncer.view.is_empty());
        assert_eq!(syncer.own[&1].pushed, [0, 0]);
        // The next round agrees again: the 10 counted here reach Redis once, not twice.
        syncer.push(now_ms + 1, false).await;
        assert_eq!(syncer.view[&1].current, 40);
    }

    #[tokio::test]
    async fn a_round_reconnects_only_once_its_wait_is_over_and_to_the_next_server() {
        // Nothing listens on either: each attempt is refused at once.
        let cluster = cluster_at("127.0.0.1:1\", \"127.0.0.1:2", r#"sync = "100ms""#);
        let mut syncer = Syncer::new(Arc::clone(&cluster));
        let first: std::net::SocketAddr = "127.0.0.1:1".parse().unwrap();
        let second: std::net::SocketAddr = "127.0.0.1:2".parse().unwrap();
        syncer.round(false).await;
        assert_eq!(cluster.metrics.redis_errors.get(), 1);
        assert_eq!(syncer.current, Some(first));
        // Within the backoff: no attempt. (Its end set an hour away: a machine stalled past
        // the real 100 ms must not make this round due.)
        syncer.retry_at = Instant::now() + Duration::from_secs(3600);
        syncer.round(false).await;
        assert_eq!(cluster.metrics.redis_errors.get(), 1);
        for expected in [second, first] {
            syncer.retry_at = Instant::now();
            syncer.round(false).await;
            assert_eq!(syncer.current, Some(expected));
        }
        assert_eq!(cluster.metrics.redis_errors.get(), 3);
    }

    #[test]
    fn a_suspect_with_nothing_in_either_window_is_forgotten_and_leaves_the_view() {
        let cluster = cluster_at("127.0.0.1:1", "");
        let mut syncer = Syncer::new(Arc::clone(&cluster));
        let now_ms = 1_700_000_000_000;
        for (hash, window) in [(2, now_ms / 10_000 - 2), (4, now_ms / 10_000 - 1)] {
            syncer.own.insert(
                hash,
                Own {
                    key: [0; tollgate_filter::LimitKey::LEN],
                    period_ms: 10_000,
                    shape: 0,
                    window,
                    counted: [1, 0],
                    pushed: [1, 0],
                    touched: false,
                },
            );
            syncer.view.insert(hash, Rest::default());
        }
        syncer.collect(now_ms);
        // Two windows on, nothing left; one window on, its count is the previous window's.
        assert!(!syncer.own.contains_key(&2) && !syncer.view.contains_key(&2));
        let kept = syncer.own[&4];
        assert_eq!((kept.window, kept.counted), (now_ms / 10_000, [0, 1]));
        assert!(syncer.view.contains_key(&4));
    }

    #[tokio::test]
    async fn a_redis_that_lost_the_counts_gets_them_again_and_one_that_kept_them_does_not() {
        use super::super::redis::tests::{Answers, ID, scripted};
        const LEN: usize = tollgate_filter::LimitKey::LEN;
        for (before, lost) in [(ID, false), ("an id of another dataset", true)] {
            let (address, _serve) = scripted(Answers::default()).await;
            let cluster = cluster_at(&address.to_string(), r#"max_clock_error = "1h""#);
            let far = cluster.cluster_ms_now() + 3_600_000;
            cluster
                .penalties_in
                .store(Arc::new(HashMap::from([([1; LEN], far), ([2; LEN], 1)])));
            let mut syncer = Syncer::new(Arc::clone(&cluster));
            syncer.dataset = Some(before.to_owned());
            syncer.own.insert(
                1,
                Own {
                    key: [3; LEN],
                    period_ms: 10_000,
                    shape: 1,
                    window: SCRIPTED_WINDOW,
                    counted: [10, 4],
                    pushed: [10, 4],
                    touched: false,
                },
            );
            syncer.connect().await;
            assert_eq!(syncer.dataset.as_deref(), Some(ID));
            let (pushed, again) = if lost {
                ([0, 0], vec![([1; LEN], far)])
            } else {
                // Pushing them again would count them twice after every failover.
                ([10, 4], Vec::new())
            };
            assert_eq!(syncer.own[&1].pushed, pushed, "lost: {lost}");
            assert_eq!(syncer.penalties_again, again, "lost: {lost}");
        }
    }

    #[test]
    fn a_known_suspects_new_weight_is_added_to_its_count() {
        // A count that shrinks or grows wrong here reaches the others: too little lets a
        // source spread over the nodes through each one's limit, too much throttles it early.
        let cluster = cluster_at("127.0.0.1:1", "");
        let filter = counting_to(&cluster);
        let event = Event {
            source: Source::from(Ipv4Addr::new(192, 0, 2, 1)),
            transport: Transport::Tcp,
            bytes: 1,
        };
        let now = Tick::from_nanos(1_000_000_000);
        let now_ms = cluster.cluster_ms(now);
        let mut syncer = Syncer::new(Arc::clone(&cluster));
        let mut counted = Vec::new();
        // 30 events make it a suspect (threshold 25); 7 more come after the first collect.
        for events in [30, 7] {
            for _ in 0..events {
                let _ = filter.decide(&event, now);
            }
            syncer.collect(now_ms);
            let owns: Vec<Own> = syncer.own.values().copied().collect();
            let [own] = owns[..] else {
                panic!("one suspect, got {owns:?}");
            };
            // In the window Redis keys it by: one off, it would never roll nor be forgotten.
            assert_eq!(own.window, now_ms / 10_000);
            counted.push(own.counted[0]);
        }
        assert_eq!(counted[1].checked_sub(counted[0]), Some(7), "{counted:?}");
    }

    #[tokio::test]
    async fn a_new_redis_process_is_logged_once_as_a_failover_or_a_lost_dataset() {
        use super::super::redis::tests::{Answers, ID, scripted};
        const FAILOVER: &str = "another Redis process with the same dataset";
        const LOST: &str = "Redis holds another dataset";
        // The scripted Redis's process is `r1`, its dataset `ID`.
        let capture = Capture::start();
        let mut seen = 0;
        for (run_id, dataset, failover, lost) in [
            ("r1", ID, 0, 0),
            ("r0", ID, 1, 0),
            ("r0", "an id of another dataset", 0, 1),
        ] {
            let (address, _serve) = scripted(Answers::default()).await;
            let cluster = cluster_at(&address.to_string(), r#"max_clock_error = "1h""#);
            let mut syncer = Syncer::new(Arc::clone(&cluster));
            syncer.run_id = Some(run_id.to_owned());
            syncer.dataset = Some(dataset.to_owned());
            syncer.connect().await;
            assert!(syncer.link.is_some(), "connected");
            let log = capture.since(&mut seen);
            assert_eq!(lines_with(&log, FAILOVER), failover, "{run_id}: {log}");
            assert_eq!(lines_with(&log, LOST), lost, "{run_id} {dataset}: {log}");
            let said = log
                .lines()
                .find(|l| l.contains(FAILOVER) || l.contains(LOST));
            if let Some(line) = said {
                assert!(line.contains(&format!("redis={address}")), "{line}");
            }
        }
    }

    #[test]
    fn going_alone_is_logged_at_once_then_at_most_every_thirty_seconds() {
        let cluster = cluster_at("127.0.0.1:1", "");
        let mut syncer = Syncer::new(Arc::clone(&cluster));
        syncer.current = Some("127.0.0.1:1".parse().unwrap());
        let cut = LinkError::from("connection refused");
        let capture = Capture::start();
        let mut seen = 0;
        let mut fail = |syncer: &mut Syncer| {
            syncer.failed(&cut);
            capture
                .since(&mut seen)
                .lines()
                .filter(|l| l.contains("cluster: Redis unreachable"))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        // The node starts alone: its first failure says so, with the server and the error.
        let lines = fail(&mut syncer);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].contains("redis=127.0.0.1:1") && lines[0].contains("error=connection refused"),
            "{lines:?}"
        );
        // Still alone, within 30 s of the last line (set in the future: however slow the
        // machine): nothing, not a line per retry while Redis is down.
        let later = Instant::now() + Duration::from_secs(3600);
        syncer.alone_logged = Some(later);
        assert_eq!(fail(&mut syncer), Vec::<String>::new());
        // 30 s after the last line: said again.
        syncer.alone_logged = Instant::now().checked_sub(ALONE_LOG_EVERY);
        assert_eq!(fail(&mut syncer).len(), 1);
        // Joined, then lost within 30 s of the last line: said at once (limits count this
        // node only from now on).
        syncer.alone_logged = Some(later);
        cluster.metrics.alone.set(0);
        assert_eq!(fail(&mut syncer).len(), 1);
        assert_eq!(cluster.metrics.alone.get(), 1);
    }

    #[test]
    fn a_clock_refusal_is_logged_as_it_starts_and_ends_and_every_thirty_seconds_between() {
        const REFUSED: &str = "not sharing counts until a reading agrees";
        const AGREES: &str = "within max_clock_error again";
        let cluster = cluster_at("127.0.0.1:1", r#"max_clock_error = "250ms""#);
        let mut syncer = Syncer::new(Arc::clone(&cluster));
        let capture = Capture::start();
        let mut seen = 0;
        let mut read = |syncer: &mut Syncer, error_ms: u64| {
            syncer.clock_read(0, Duration::from_millis(error_ms));
            let log = capture.since(&mut seen);
            (lines_with(&log, REFUSED), lines_with(&log, AGREES), log)
        };
        // Within the budget, as before: nothing to say.
        let (refused, agrees, log) = read(&mut syncer, 250);
        assert_eq!((refused, agrees), (0, 0), "{log}");
        // Beyond it: said once, with the figures.
        let (refused, agrees, log) = read(&mut syncer, 251);
        assert_eq!((refused, agrees), (1, 0), "{log}");
        assert!(
            log.contains("error_ms=251") && log.contains("max_clock_error_ms=250"),
            "{log}"
        );
        // Still beyond, within 30 s of the line (set in the future: however slow the machine).
        syncer.clock_logged = Some(Instant::now() + Duration::from_secs(3600));
        let (refused, agrees, log) = read(&mut syncer, 400);
        assert_eq!((refused, agrees), (0, 0), "{log}");
        // 30 s after it: said again.
        syncer.clock_logged = Instant::now().checked_sub(ALONE_LOG_EVERY);
        let (refused, agrees, log) = read(&mut syncer, 400);
        assert_eq!((refused, agrees), (1, 0), "{log}");
        // Within the budget again: said once.
        let (refused, agrees, log) = read(&mut syncer, 10);
        assert_eq!((refused, agrees), (0, 1), "{log}");
        let (refused, agrees, log) = read(&mut syncer, 10);
        assert_eq!((refused, agrees), (0, 0), "{log}");
    }

    #[test]
    fn list_changes_from_others_are_logged_when_some_are_applied_or_dropped_and_only_then() {
        use tollgate_filter::{Cidr, ListKind, RuntimeLists};
        const APPLIED: &str = "run-time list changes from other nodes applied";
        let cluster = cluster_at("127.0.0.1:1", "");
        // Entries live at most an hour here.
        let lists = Arc::new(RuntimeLists::new(100, Duration::from_secs(3600)));
        cluster.attach_lists(Arc::clone(&lists));
        let mut syncer = Syncer::new(Arc::clone(&cluster));
        let now_ms = cluster.cluster_ms(cluster.clock.now());
        let entry = |cidr: &str, in_ms: u64| {
            (
                (ListKind::Deny, Cidr::parse(cidr).unwrap()),
                Travelled {
                    until_ms: now_ms + in_ms,
                    node: "b".to_owned(),
                    reason: "a flood".to_owned(),
                },
            )
        };
        let new = entry("10.1.0.0/16", 60_000);
        // A peer's entry that would outlive this node's longest time to live (forged, or from a
        // node configured otherwise): dropped, counted and said.
        let long = entry("10.2.0.0/16", 2 * 3_600_000);
        let capture = Capture::start();
        let mut seen = 0;
        let mut apply = |version: &str, entries: Vec<(ListKey, Travelled)>| {
            syncer.apply_lists(State {
                version: Some(version.to_owned()),
                entries: entries.into_iter().collect(),
            });
            capture
                .since(&mut seen)
                .lines()
                .filter(|l| l.contains(APPLIED))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        let lines = apply("v1", vec![new.clone()]);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains("applied=1 dropped=0"), "{lines:?}");
        // Nothing new: nothing said.
        assert_eq!(apply("v2", vec![new.clone()]), Vec::<String>::new());
        let lines = apply("v3", vec![new, long.clone()]);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains("applied=0 dropped=1"), "{lines:?}");
        let held = lists.entries(cluster.clock.now());
        assert!(held.iter().all(|e| e.cidr != long.0.1), "{held:?}");
    }

    #[test]
    fn a_peers_entry_is_not_laid_over_a_change_made_here_nor_once_it_has_ended() {
        use tollgate_filter::{Cidr, ListKind, RuntimeLists};
        let cluster = cluster_at("127.0.0.1:1", "");
        let lists = Arc::new(RuntimeLists::new(100, Duration::from_secs(3600)));
        cluster.attach_lists(Arc::clone(&lists));
        let mut syncer = Syncer::new(Arc::clone(&cluster));
        let deny = |cidr: &str| (ListKind::Deny, Cidr::parse(cidr).unwrap());
        let (removed, ended) = (deny("192.0.2.0/24"), deny("198.51.100.0/24"));
        // Removed here since the last round (not written yet): the peer's entry is the older.
        cluster
            .lists_out
            .lock()
            .unwrap()
            .push(Change::Remove(removed));
        let now_ms = cluster.cluster_ms(cluster.clock.now());
        let peer = |until_ms| Travelled {
            until_ms,
            node: "b".to_owned(),
            reason: "a flood".to_owned(),
        };
        // The other ended 5 s ago by Redis's clock (stale, or replayed).
        syncer.apply_lists(State {
            version: Some("v1".to_owned()),
            entries: HashMap::from([
                (removed, peer(now_ms + 60_000)),
                (ended, peer(now_ms - 5_000)),
            ]),
        });
        let held = lists.entries(cluster.clock.now());
        assert!(held.is_empty(), "{held:?}");
        assert_eq!(cluster.metrics.list_entries_received.get(), 0);
        assert_eq!(cluster.list_origin(removed.0, removed.1), None);
    }

    #[test]
    fn after_redis_lost_the_lists_a_node_writes_again_only_what_it_added_itself() {
        use tollgate_filter::{Cidr, ListKind, RuntimeLists};
        let cluster = cluster_at("127.0.0.1:1", "");
        let lists = Arc::new(RuntimeLists::new(100, Duration::from_secs(3600)));
        cluster.attach_lists(Arc::clone(&lists));
        let deny = |cidr: &str| (ListKind::Deny, Cidr::parse(cidr).unwrap());
        // Added here (this node is `a`), and one another node added.
        let (own, others) = (deny("192.0.2.0/24"), deny("198.51.100.0/24"));
        let added = cluster.clock.now();
        let added_ms = cluster.cluster_ms(added);
        for key in [own, others] {
            let ttl = Duration::from_secs(60);
            let done = lists.add(key.1, key.0, ttl, "a flood".to_owned(), added);
            done.expect("room");
        }
        cluster.list_origins.store(Arc::new(HashMap::from([
            (own, "a".to_owned()),
            (others, "b".to_owned()),
        ])));
        let mut syncer = Syncer::new(Arc::clone(&cluster));
        let travelled = Travelled {
            until_ms: added_ms + 60_000,
            node: "b".to_owned(),
            reason: "a flood".to_owned(),
        };
        syncer.lists_known.insert(others, travelled);
        syncer.lists_version = Some("v7".to_owned());
        syncer.rewrite_own_lists();
        // Only its own: writing the other's again would bring it back after its node removed
        // it. It ends when it ends here (ms rounding on either side).
        let out = cluster.lists_out.lock().unwrap().clone();
        let [Change::Put(key, travelled)] = &out[..] else {
            panic!("one put, got {out:?}");
        };
        assert_eq!(*key, own);
        assert_eq!(
            (&travelled.node[..], &travelled.reason[..]),
            ("a", "a flood")
        );
        let end = added_ms + 60_000;
        assert!(
            (end - 2..=end + 1).contains(&travelled.until_ms),
            "{travelled:?}"
        );
        // What it knew of the old Redis is forgotten: the first read of the new one removes
        // nothing.
        assert!(syncer.lists_known.is_empty() && syncer.lists_version.is_none());
        // With the changes' queue full, it stays local and is counted.
        cluster
            .lists_out
            .lock()
            .unwrap()
            .resize(super::super::LISTS_OUT, Change::Remove(others));
        syncer.rewrite_own_lists();
        assert_eq!(
            cluster.lists_out.lock().unwrap().len(),
            super::super::LISTS_OUT
        );
        assert_eq!(cluster.metrics.list_entries_dropped.get(), 1);
    }

    #[tokio::test]
    async fn a_sentinel_that_does_not_answer_is_passed_over_for_the_next() {
        use super::super::redis::tests::{Answers, scripted};
        // The first sentinel refuses at once; the second (scripted) names 127.0.0.1:6380.
        let (address, _serve) = scripted(Answers::default()).await;
        let sentinels = format!("sentinels = [\"127.0.0.1:1\", \"{address}\"]\nmaster = \"m\"");
        let cluster = cluster_at("127.0.0.1:2", &sentinels);
        let mut syncer = Syncer::new(Arc::clone(&cluster));
        let found = syncer.discover().await;
        let master: std::net::SocketAddr = "127.0.0.1:6380".parse().unwrap();
        assert_eq!(found, Ok((master, "127.0.0.1".to_owned())));
        // The one that answered is asked first next time.
        assert_eq!(syncer.sentinel % 2, 1);
    }
}
