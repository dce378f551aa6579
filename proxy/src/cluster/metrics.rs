//! A cluster node's metrics, registered under `tollgate_cluster_`.

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// A cluster node's metrics: the sync with Redis and the suspects it shares (see
/// [`crate::cluster`]).
#[derive(Clone, Debug)]
pub struct ClusterMetrics {
    /// Duration of each successful sync round trip.
    pub(crate) sync_seconds: Histogram,
    /// Duration of the last successful sync round trip.
    pub last_sync: Gauge<f64, AtomicU64>,
    /// Successful sync rounds.
    pub syncs: Counter,
    /// Bytes sent to Redis (the RESP encoding of the commands).
    pub sent_bytes: Counter,
    /// Bytes received from Redis (the RESP encoding of the replies).
    pub received_bytes: Counter,
    /// Commands Redis ran for this node (each `EVALSHA` and the commands inside it).
    pub redis_commands: Counter,
    /// Failed connection attempts and sync rounds.
    pub redis_errors: Counter,
    /// Seconds since the view of the rest of the cluster was last refreshed.
    pub view_age: Gauge<f64, AtomicU64>,
    /// 1 while the node limits alone (Redis away or not yet reached), 0 while it shares.
    pub alone: Gauge,
    /// Suspects whose counts the node holds (shared in the current or previous window).
    pub suspects: Gauge,
    /// Suspect events not shared because the suspects table or the own counts were full.
    pub suspects_overflow: Counter,
    /// Bytes held by the suspects tables.
    pub(crate) memory: Gauge,
    /// Redis's clock less this node's wall clock at the last round, in seconds (windows follow
    /// Redis's clock, so this may be anything; it shows how far off the node's clock is).
    pub clock_offset: Gauge<f64, AtomicU64>,
    /// How far this node's window edges may be from Redis's, in seconds: half the last `TIME`
    /// round trip plus the correction that round made.
    pub clock_error: Gauge<f64, AtomicU64>,
    /// 1 while the node refuses to share because `clock_error` is beyond `max_clock_error`.
    pub clock_refused: Gauge,
    /// Rounds in which the node refused to share for that reason.
    pub clock_refusals: Counter,
    /// Penalties this node started and shared with the cluster.
    pub penalties_shared: Counter,
    /// Penalties not shared: more than 4096 started between two rounds.
    pub(crate) penalties_dropped: Counter,
    /// Penalties in force in the cluster as of the last round (this node's included).
    pub penalties_held: Gauge,
    /// Run-time list changes (entries added or removed here) written to the cluster.
    pub(crate) list_entries_sent: Counter,
    /// Run-time list changes other nodes made, applied here.
    pub(crate) list_entries_received: Counter,
    /// Run-time list changes not carried: more than 4096 made here between two rounds, or
    /// entries from others left out by this node's bounds (its cap, longest time to live,
    /// longest reason).
    pub(crate) list_entries_dropped: Counter,
    /// Run-time list entries the cluster holds, as of this node's last read.
    pub(crate) list_entries_held: Gauge,
}

impl Default for ClusterMetrics {
    fn default() -> ClusterMetrics {
        ClusterMetrics::new()
    }
}

impl ClusterMetrics {
    /// All at zero (`alone` at 1 until a first sync), registered nowhere (see
    /// [`crate::metrics::Metrics::for_sections`]).
    #[must_use]
    pub fn new() -> ClusterMetrics {
        let metrics = ClusterMetrics {
            // 100 us to ~3 s.
            sync_seconds: Histogram::new(exponential_buckets(0.0001, 2.0, 15)),
            last_sync: Gauge::default(),
            syncs: Counter::default(),
            sent_bytes: Counter::default(),
            received_bytes: Counter::default(),
            redis_commands: Counter::default(),
            redis_errors: Counter::default(),
            view_age: Gauge::default(),
            alone: Gauge::default(),
            suspects: Gauge::default(),
            suspects_overflow: Counter::default(),
            memory: Gauge::default(),
            clock_offset: Gauge::default(),
            clock_error: Gauge::default(),
            clock_refused: Gauge::default(),
            clock_refusals: Counter::default(),
            penalties_shared: Counter::default(),
            penalties_dropped: Counter::default(),
            penalties_held: Gauge::default(),
            list_entries_sent: Counter::default(),
            list_entries_received: Counter::default(),
            list_entries_dropped: Counter::default(),
            list_entries_held: Gauge::default(),
        };
        metrics.alone.set(1);
        metrics
    }

    /// Registers every series under `cluster_` in `registry`'s namespace.
    pub(crate) fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("cluster");
        r.register(
            "sync_seconds",
            "Duration of each successful sync round trip with Redis",
            self.sync_seconds.clone(),
        );
        r.register(
            "last_sync_seconds",
            "Duration of the last successful sync round trip with Redis",
            self.last_sync.clone(),
        );
        r.register(
            "syncs",
            "Successful sync rounds with Redis",
            self.syncs.clone(),
        );
        r.register(
            "sent_bytes",
            "Bytes sent to Redis (RESP encoding of the commands)",
            self.sent_bytes.clone(),
        );
        r.register(
            "received_bytes",
            "Bytes received from Redis (RESP encoding of the replies)",
            self.received_bytes.clone(),
        );
        r.register(
            "redis_commands",
            "Commands Redis ran for this node: each EVALSHA and the commands inside it",
            self.redis_commands.clone(),
        );
        r.register(
            "redis_errors",
            "Failed connection attempts and sync rounds with Redis",
            self.redis_errors.clone(),
        );
        r.register(
            "view_age_seconds",
            "Seconds since the counts of the rest of the cluster were last refreshed",
            self.view_age.clone(),
        );
        r.register(
            "alone",
            "1 while this node limits with its local counts alone (Redis away), 0 while shared",
            self.alone.clone(),
        );
        r.register(
            "suspects",
            "Keys over the suspect threshold whose counts this node shares",
            self.suspects.clone(),
        );
        r.register(
            "suspects_overflow",
            "Suspect events not shared because the suspects table was full (they count locally)",
            self.suspects_overflow.clone(),
        );
        r.register(
            "clock_offset_seconds",
            "Redis's clock less this node's wall clock at the last sync round",
            self.clock_offset.clone(),
        );
        r.register(
            "clock_error_seconds",
            "How far this node's window edges may be from Redis's: half the last TIME round \
             trip plus the correction it made",
            self.clock_error.clone(),
        );
        r.register(
            "clock_refused",
            "1 while the node refuses to share counts: its clock error is beyond max_clock_error",
            self.clock_refused.clone(),
        );
        r.register(
            "clock_refusals",
            "Sync rounds in which the node refused to share counts for its clock error",
            self.clock_refusals.clone(),
        );
        r.register(
            "penalties_shared",
            "Penalties this node started and shared with the cluster",
            self.penalties_shared.clone(),
        );
        r.register(
            "penalties_dropped",
            "Penalties not shared: more than 4096 started between two sync rounds",
            self.penalties_dropped.clone(),
        );
        r.register(
            "penalties_held",
            "Penalties in force in the cluster as of the last sync round",
            self.penalties_held.clone(),
        );
        r.register(
            "list_entries_sent",
            "Run-time list changes made on this node and written to the cluster",
            self.list_entries_sent.clone(),
        );
        r.register(
            "list_entries_received",
            "Run-time list changes other nodes made, applied on this node",
            self.list_entries_received.clone(),
        );
        r.register(
            "list_entries_dropped",
            "Run-time list changes not carried: over 4096 between two rounds, or left out by \
             this node's bounds (cap, longest ttl, longest reason)",
            self.list_entries_dropped.clone(),
        );
        r.register(
            "list_entries_held",
            "Run-time list entries the cluster holds, as of this node's last read",
            self.list_entries_held.clone(),
        );
        r.register(
            "memory_bytes",
            "Bytes held by the suspects tables",
            self.memory.clone(),
        );
    }
}
