//! The kernel fast path's metrics, registered under `tollgate_kernel_`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct SetLabel {
    set: &'static str,
}

/// The kernel fast path's metrics (see [`crate::kernel`]).
#[derive(Clone, Debug)]
pub struct KernelMetrics {
    elements: Family<SetLabel, Gauge>,
    /// Transactions the kernel accepted (one per update that had something new).
    pub(crate) updates: Counter,
    /// Elements sent to the kernel in accepted transactions.
    pub(crate) added: Counter,
    /// Duration of each transaction, from writing it to nft's answer.
    pub(crate) update_seconds: Histogram,
    /// Transactions the kernel or nft refused, and set-up failures.
    pub errors: Counter,
    /// Sources over the factor left out because `max_elements` were held.
    pub(crate) skipped: Counter,
    /// 1 while the table is in place and updated, 0 without the fast path.
    pub(crate) active: Gauge,
}

impl Default for KernelMetrics {
    fn default() -> KernelMetrics {
        KernelMetrics::new()
    }
}

impl KernelMetrics {
    /// All at zero, registered nowhere (see [`crate::metrics::Metrics::for_sections`]).
    #[must_use]
    pub(crate) fn new() -> KernelMetrics {
        KernelMetrics {
            elements: Family::default(),
            updates: Counter::default(),
            added: Counter::default(),
            // 100 us to ~3 s.
            update_seconds: Histogram::new(exponential_buckets(0.0001, 2.0, 15)),
            errors: Counter::default(),
            skipped: Counter::default(),
            active: Gauge::default(),
        }
    }

    /// The elements the proxy holds in set `set` (`"v4"` or `"v6"`) now (expired ones left
    /// out).
    pub fn set_elements(&self, set: &'static str, count: usize) {
        self.elements
            .get_or_create(&SetLabel { set })
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// Registers every series under `kernel_` in `registry`'s namespace.
    pub(crate) fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("kernel");
        r.register(
            "elements",
            "Elements the proxy holds in each nftables set of the kernel fast path",
            self.elements.clone(),
        );
        r.register(
            "updates",
            "Transactions of the kernel fast path that the kernel accepted",
            self.updates.clone(),
        );
        r.register(
            "added",
            "Elements sent to the kernel fast path's sets in accepted transactions",
            self.added.clone(),
        );
        r.register(
            "update_seconds",
            "Duration of each kernel fast path transaction (nft run included)",
            self.update_seconds.clone(),
        );
        r.register(
            "errors",
            "Kernel fast path transactions or set-ups that failed",
            self.errors.clone(),
        );
        r.register(
            "skipped",
            "Sources over the kernel factor left out because max_elements were held",
            self.skipped.clone(),
        );
        r.register(
            "active",
            "1 while the kernel fast path's table is in place, 0 otherwise",
            self.active.clone(),
        );
    }
}
