//! The rounds: the own counts of every suspect of the last two windows, taken from the
//! suspects table, pushed to Redis with the penalties and the list changes, and the view of
//! the rest of the cluster they read back.

use std::sync::Arc;
use std::time::Instant;

use tollgate_sketch::Clock;

use super::Syncer;
use crate::cluster::lists::{Change, Outgoing};
use crate::cluster::redis::{Penalties, Push, Round, key_name, penalty_set};
use crate::cluster::view::Rest;

/// This node's own counts of one suspect, in the Redis-time windows Redis keys them by.
#[derive(Clone, Copy, Debug)]
pub(super) struct Own {
    pub(super) key: [u8; tollgate_filter::LimitKey::LEN],
    pub(super) period_ms: u64,
    /// The key's rule's shape (`tollgate_filter::Rule::shape`).
    pub(super) shape: u64,
    /// The window index of `counted[0]` and `pushed[0]`.
    pub(super) window: u64,
    /// Weight counted here: current window, previous window.
    pub(super) counted: [u64; 2],
    /// Of it, what Redis has (the rest of the cluster is the total less this).
    pub(super) pushed: [u64; 2],
    /// Counted since the last successful round.
    pub(super) touched: bool,
}

impl Own {
    pub(super) fn roll(&mut self, window: u64) {
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

impl Syncer {
    pub(super) fn own_cap(&self) -> usize {
        8 * self.cluster.suspects.capacity()
    }

    /// One round; an `early` one pushes and reads only the suspects the view does not hold
    /// yet (the rest wait for the next regular round).
    pub(super) async fn round(&mut self, early: bool) {
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
    pub(super) fn collect(&mut self, now_ms: u64) {
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

    pub(super) async fn push(&mut self, now_ms: u64, early: bool) {
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
                let room = crate::cluster::PENALTIES_OUT.saturating_sub(out.len());
                out.extend(added.into_iter().take(room));
                drop(out);
                // Unless the next connection finds yet another dataset (then they are read
                // from the penalties in force again), they go with the next round too.
                self.penalties_again = again;
                let mut out = cluster.lists_out.lock().unwrap_or_else(|e| e.into_inner());
                let room = crate::cluster::LISTS_OUT.saturating_sub(out.len());
                let lost = changes.len().saturating_sub(room);
                // Older first: a later change to one entry must stay the later.
                let newer = std::mem::take(&mut *out);
                out.extend(changes.into_iter().take(room));
                out.extend(newer);
                out.truncate(crate::cluster::LISTS_OUT);
                drop(out);
                metrics.list_entries_dropped.inc_by(lost as u64);
                self.link = None;
                self.failed(&error);
            }
        }
    }
}
