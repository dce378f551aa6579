//! The XDP mode's metrics, registered under `tollgate_xdp_`.

use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::program::Counters;

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

/// The XDP mode's metrics (see [`crate::xdp`]).
#[derive(Debug, Default)]
pub(crate) struct XdpMetrics {
    /// Attempts the program counted and passed (its per-CPU counter, summed).
    passed: Counter,
    /// Attempts the program dropped, over a level's limit.
    dropped: Counter,
    /// Frames cut short or with an impossible header (passed).
    malformed: Counter,
    /// Frames that are not attempts to a guarded port (passed, uncounted).
    ignored: Counter,
    /// Attempts from allowed networks (passed, uncounted).
    allowed: Counter,
    /// Drop events the kernel's ring had no room for.
    drop_events_lost: Counter,
    /// Drop events read from the ring and reported (`xdp::events`).
    pub(crate) drop_events: Counter,
    /// Entries in the kernel's allow tries.
    pub(crate) allow_entries: Gauge,
    /// Allow-list entries the tries could not hold: while above 0, a family is counted at
    /// the driver but never dropped there.
    pub(crate) allow_left_out: Gauge,
    /// What the kernel's counters read last, so that each read adds what is new.
    last: Mutex<Counters>,
    /// Slices cleared by the rotation task, by result.
    clears: Family<ResultLabel, Counter>,
    /// 1 while the program is attached, 0 otherwise.
    pub(crate) active: Gauge,
    /// Loads, attaches, map updates and reads that failed.
    pub(crate) errors: Counter,
    /// 1 when the program could not attach and nftables (`[kernel]`) stands in for it.
    pub(crate) fallback: Gauge,
}

/// How a slice's clearing went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cleared {
    /// Every cell, before the window the slice counts began.
    Done,
    /// Stopped with a quarter of the window left: the cells not reached keep older counts,
    /// so the kernel overestimates during the slice's window.
    Stopped,
    /// Done, but the slice's window had begun when the last chunk was written.
    Late,
}

impl Cleared {
    fn as_str(self) -> &'static str {
        match self {
            Cleared::Done => "done",
            Cleared::Stopped => "stopped",
            Cleared::Late => "late",
        }
    }
}

impl XdpMetrics {
    /// Registers every series into `registry`.
    pub(crate) fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("xdp");
        r.register(
            "passed",
            "Attempts the XDP program counted and passed (its per-CPU counters, summed)",
            self.passed.clone(),
        );
        r.register(
            "dropped",
            "Attempts the XDP program dropped at the driver, over a level's limit",
            self.dropped.clone(),
        );
        r.register(
            "malformed",
            "Frames the XDP program passed as cut short or with an impossible header",
            self.malformed.clone(),
        );
        r.register(
            "ignored",
            "Frames the XDP program passed uncounted: not an attempt to a guarded port",
            self.ignored.clone(),
        );
        r.register(
            "allowed",
            "Attempts the XDP program passed uncounted: from a network on the allow lists",
            self.allowed.clone(),
        );
        r.register(
            "drop_events",
            "Drops the XDP program reported (at most one per key and window), read from its ring",
            self.drop_events.clone(),
        );
        r.register(
            "drop_events_lost",
            "Drop events the XDP program's ring had no room for",
            self.drop_events_lost.clone(),
        );
        r.register(
            "allow_entries",
            "Entries in the XDP program's allow tries (allowed networks and the holes in them)",
            self.allow_entries.clone(),
        );
        r.register(
            "allow_left_out",
            "Allow-list entries the XDP program's tries could not hold: while above 0, a \
             family is counted at the driver but never dropped there",
            self.allow_left_out.clone(),
        );
        r.register(
            "clears",
            "Slices of the kernel's sketch cleared by the rotation task, by result",
            self.clears.clone(),
        );
        r.register(
            "active",
            "1 while the XDP program is attached",
            self.active.clone(),
        );
        r.register(
            "errors",
            "XDP loads, attaches, map updates and reads that failed",
            self.errors.clone(),
        );
        r.register(
            "fallback",
            "1 when the XDP program could not attach at start and the nftables fast path \
             ([kernel]) stands in for it",
            self.fallback.clone(),
        );
    }

    /// Adds to the counters what the kernel counted since the last call (`now`: the
    /// kernel's counters, summed over CPUs).
    pub(crate) fn observe(&self, now: Counters) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        self.passed.inc_by(now.passed.saturating_sub(last.passed));
        self.dropped
            .inc_by(now.dropped.saturating_sub(last.dropped));
        self.malformed
            .inc_by(now.malformed.saturating_sub(last.malformed));
        self.ignored
            .inc_by(now.ignored.saturating_sub(last.ignored));
        self.allowed
            .inc_by(now.allowed.saturating_sub(last.allowed));
        self.drop_events_lost
            .inc_by(now.events_lost.saturating_sub(last.events_lost));
        *last = now;
    }

    /// Counts a slice cleared.
    pub(crate) fn cleared(&self, how: Cleared) {
        self.clears
            .get_or_create(&ResultLabel {
                result: how.as_str(),
            })
            .inc();
    }
}
