//! The rate-limit service's metrics, under `tollgate_rls_`: its callers' connections and
//! requests against their bounds.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::callers::Bound;

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

/// The service's series; clones count into the same ones.
#[derive(Clone, Debug, Default)]
pub(crate) struct RlsMetrics {
    /// Connections open now.
    pub(crate) connections: Gauge,
    refused_connections: Family<ReasonLabel, Counter>,
    closed_connections: Family<ReasonLabel, Counter>,
    /// Requests in flight now (headers read, answer not yet ready).
    pub(crate) requests_in_flight: Gauge,
    refused_requests: Family<ReasonLabel, Counter>,
}

impl RlsMetrics {
    /// Counts a connection closed at accept, over `bound`.
    pub(crate) fn refused_connection(&self, bound: Bound) {
        let reason = bound.label();
        self.refused_connections
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    /// Counts a connection closed at its deadline: idle after a request, or without one.
    pub(crate) fn closed(&self, idle: bool) {
        let reason = if idle {
            "idle_timeout"
        } else {
            "header_timeout"
        };
        self.closed_connections
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    /// Counts a request answered `RESOURCE_EXHAUSTED`, over `bound`.
    pub(crate) fn refused_request(&self, bound: Bound) {
        let reason = bound.label();
        self.refused_requests
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    /// Registers them under `rls_` in `registry`'s namespace.
    pub(crate) fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("rls");
        r.register(
            "connections",
            "Connections to the rate-limit service open now",
            self.connections.clone(),
        );
        r.register(
            "connections_refused",
            "Connections closed at accept, over a bound: total (max_connections), address \
             (max_connections_per_address) or prefix (max_connections_per_prefix)",
            self.refused_connections.clone(),
        );
        r.register(
            "connections_closed",
            "Connections closed at their deadline: header_timeout (no request since accept) \
             or idle_timeout (no request since the last)",
            self.closed_connections.clone(),
        );
        r.register(
            "requests_in_flight",
            "Requests whose headers are read and whose answer is not yet ready",
            self.requests_in_flight.clone(),
        );
        r.register(
            "requests_refused",
            "Requests answered RESOURCE_EXHAUSTED, over a bound: total \
             (max_requests_in_flight) or address (max_requests_in_flight_per_address)",
            self.refused_requests.clone(),
        );
    }
}
