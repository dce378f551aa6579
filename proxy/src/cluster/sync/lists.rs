//! The run-time lists that travel through Redis: read when their version changes, laid over
//! this node's lists, and written again after Redis lost them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tollgate_filter::ListEntry;
use tollgate_sketch::Clock;

use super::Syncer;
use crate::cluster::lists::{self, Change, ListKey, State, Travelled};
use crate::cluster::redis::Cost;

impl Syncer {
    /// Reads the lists' whole state (the version changed since the last read) and lays the
    /// difference over this node's lists.
    pub(super) async fn read_lists(&mut self) {
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
    pub(super) fn apply_lists(&mut self, state: State) {
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
    pub(super) fn rewrite_own_lists(&mut self) {
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
            if out.len() >= crate::cluster::LISTS_OUT {
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
}
