//! The admin endpoint's own series (its connections against `[admin] max_connections`),
//! registered under `admin_`. A module of its own below both the metrics and the admin
//! endpoint, as `listener_metrics` is: the endpoint counts into them, the registry renders them.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The admin endpoint's connection counts.
#[derive(Clone, Debug, Default)]
pub(crate) struct AdminMetrics {
    /// Admin connections open now.
    pub(crate) connections: Gauge,
    /// Admin connections reset at accept because `[admin] max_connections` were open, every
    /// one being answered.
    pub(crate) refused: Counter,
    /// Admin connections closed at the cap, before their request head was complete, to
    /// make room for a newcomer.
    pub(crate) evicted: Counter,
}

impl AdminMetrics {
    /// Registers them under `admin_` in `registry`'s namespace.
    pub(crate) fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("admin");
        r.register(
            "connections",
            "Admin endpoint connections open now",
            self.connections.clone(),
        );
        r.register(
            "refused",
            "Admin connections reset at accept: [admin] max_connections were open, all being answered",
            self.refused.clone(),
        );
        r.register(
            "evicted",
            "Admin connections closed at [admin] max_connections, their request head \
             incomplete, to make room for a newcomer",
            self.evicted.clone(),
        );
    }
}
