//! What the kernel's tasks read of the rest of the proxy and write back, as a trait the
//! proxy's shared state implements: the kernel's folder names nothing above it.

use std::net::IpAddr;

use tollgate_filter::Filter;
use tollgate_sketch::Tick;

use super::metrics::KernelMetrics;
use super::view::View;
use super::wake::Wake;

/// The kernel tasks' narrow handle on the proxy ([`super::follow`], [`super::Updater::run`]).
pub(crate) trait Host: Send + Sync + std::fmt::Debug {
    /// The kernel's metrics.
    fn metrics(&self) -> &KernelMetrics;

    /// Exports the kernel's metrics from now on (a reload added `[kernel]`).
    fn export_metrics(&self);

    /// What the kernel holds, as the updater last committed it.
    fn view(&self) -> &View;

    /// The doorbell a decision far over a limit rings.
    fn wake(&self) -> &Wake;

    /// The `n` most rejected sources and their rejection counts, most first.
    fn offenders(&self, n: usize) -> Vec<(IpAddr, u64)>;

    /// The filter whose policy and run-time lists say what goes into the kernel.
    fn filter(&self) -> &Filter;

    /// The filter's clock now.
    fn now(&self) -> Tick;
}
