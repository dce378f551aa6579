//! What the proxy's parts share: the data path's door (`Gate`, which holds the metrics),
//! the cluster link, the state file, the config lifecycle (`Reloader`), the kernel's view and
//! the listeners serving; each read through an accessor.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tollgate_filter::{DescriptorPolicy, Filter, ListError, Policy, Remote, SavedSketch};
use tollgate_sketch::{MonotonicClock, Tick};

use crate::cluster::Cluster;
use crate::config::ProxyConfig;
use crate::gate::Gate;
use crate::listeners::Serving;
use crate::metrics::Metrics;
use crate::reload::Reloader;
use crate::state::lists::{self as saved_lists, SavedEntry};
use crate::state::{Saver, Saving, StateMetrics, WarmStart};

/// State shared by every listener and the admin endpoint: the data path's door and what the
/// rest of the proxy keeps beside it.
#[derive(Debug)]
pub struct Shared {
    /// The data path's door (the filter, its clock and what decisions are counted in: every
    /// metric, see [`Shared::metrics`]).
    gate: Arc<Gate>,
    /// This node's part of a cluster (`[cluster]`, fixed at start); its sync task is started
    /// by [`crate::server::Server::start`].
    cluster: Option<Arc<Cluster>>,
    /// The warm-restart state file (`[proxy] state_file`, fixed at start); saved by the task
    /// [`crate::server::Server::start`] starts and at shutdown.
    state: Option<Saver>,
    /// The config's lifecycle: reload, apply, the `[kernel]` section in force.
    reloader: Arc<Reloader>,
    /// What the kernel holds, as the updater last committed it (the admin's `/top` and
    /// `/estimate` read it).
    kernel_view: crate::kernel::View,
    /// The listeners serving now, as bound (the admin's status page shows them).
    running: Serving,
    /// The filter's clock and the rate-limit service's saved sketches, until the server
    /// starts the service (`[rls]`) with them: one clock, so one tick in the state file.
    rls_start: std::sync::Mutex<Option<(MonotonicClock, Vec<SavedSketch>)>>,
}

impl Shared {
    /// State for `config`, read from `path` if it came from a file, counting into `metrics`
    /// and starting from `warm` (see [`crate::state::warm_start`], which the server calls first).
    ///
    /// # Errors
    /// When the connection counts' memory is too small.
    pub(crate) fn new(
        config: ProxyConfig,
        path: Option<PathBuf>,
        metrics: Metrics,
        warm: WarmStart,
    ) -> Result<Shared, Box<dyn std::error::Error + Send + Sync>> {
        let clock = warm.clock;
        let cluster = config
            .cluster
            .clone()
            .map(|c| Arc::new(Cluster::new(c, clock, metrics.cluster.clone())));
        let policy = warm.policy;
        let filter = Filter::from_policy(match &cluster {
            Some(cluster) => policy.with_remote(Arc::clone(cluster) as Arc<dyn Remote>),
            None => policy,
        });
        if let Some(cluster) = &cluster {
            // Entries other nodes add at run time are laid over these lists.
            cluster.attach_lists(filter.lists());
        }
        let restoring = warm.lists;
        let saver = config
            .state
            .as_ref()
            .map(|file| Saver::new(file.path.clone(), file.interval));
        let metrics = Arc::new(metrics);
        let settings = &config.settings;
        let gate = Gate::new(
            filter,
            clock,
            Arc::clone(&metrics),
            settings.connection_memory,
            settings.log_rejections,
            settings.delay,
        )?;
        let gate = Arc::new(gate);
        let shared = Shared {
            reloader: Arc::new(Reloader::new(Arc::clone(&gate), path, config)),
            gate,
            cluster,
            state: saver,
            kernel_view: crate::kernel::View::new(),
            running: Serving::default(),
            rls_start: std::sync::Mutex::new(Some((clock, warm.descriptors))),
        };
        if let Some((path, saved)) = restoring {
            match shared.restore_lists(saved) {
                Ok(entries) => {
                    tracing::info!(path = %path.display(), entries, "run-time list entries restored");
                }
                Err(err) => tracing::error!(
                    path = %path.display(),
                    "run-time list entries not restored: {err}"
                ),
            }
        }
        Ok(shared)
    }

    /// The data path's door, for the listeners.
    #[must_use]
    pub fn gate(&self) -> &Arc<Gate> {
        &self.gate
    }

    /// The filter's clock and the rate-limit service's sketches from the state file, for
    /// the service's start; `None` after the first call.
    pub(crate) fn take_rls_start(&self) -> Option<(MonotonicClock, Vec<SavedSketch>)> {
        self.rls_start
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    /// The config's lifecycle (reload, apply, the `[kernel]` section in force).
    #[must_use]
    pub fn reloader(&self) -> &Arc<Reloader> {
        &self.reloader
    }

    /// Every metric (held by the gate: the data path counts into them, the other parts too).
    #[must_use]
    pub fn metrics(&self) -> &Metrics {
        self.gate.metrics()
    }

    /// This node's part of a cluster, when `[cluster]` is configured.
    #[must_use]
    pub fn cluster(&self) -> Option<&Arc<Cluster>> {
        self.cluster.as_ref()
    }

    /// The warm-restart state file, when `[proxy] state_file` is configured.
    #[must_use]
    pub(crate) fn saver(&self) -> Option<&Saver> {
        self.state.as_ref()
    }

    /// What the kernel holds, as the updater last committed it.
    #[must_use]
    pub(crate) fn kernel_view(&self) -> &crate::kernel::View {
        &self.kernel_view
    }

    /// The listeners serving now, as bound.
    #[must_use]
    pub(crate) fn running(&self) -> &Serving {
        &self.running
    }

    /// The filter whose policy decides.
    #[must_use]
    pub fn filter(&self) -> &Filter {
        self.gate.filter()
    }

    /// The filter's clock now.
    #[must_use]
    pub fn now(&self) -> Tick {
        self.gate.now()
    }

    /// How long this process has run at `now` (a reading of [`Shared::now`]): the time base
    /// of its counters, which start at zero at every start, warm restarts included.
    pub(crate) fn uptime(&self, now: Tick) -> Duration {
        self.gate.uptime(now)
    }
}

// The run-time list entries as the state file keeps them.
impl Shared {
    /// The run-time list entries in force now, for the state file (see [`saved_lists::save`]).
    #[must_use]
    pub(crate) fn saved_lists(&self) -> Vec<SavedEntry> {
        saved_lists::save(
            &self.filter().lists(),
            self.now(),
            saved_lists::unix_ms_now(),
        )
    }

    /// Puts run-time list entries read from the state file back (see [`saved_lists::restore`]); they
    /// apply at once.
    ///
    /// # Errors
    /// As [`saved_lists::restore`]: nothing is restored then.
    pub(crate) fn restore_lists(&self, saved: Vec<SavedEntry>) -> Result<usize, ListError> {
        saved_lists::restore(
            &self.filter().lists(),
            saved,
            self.now(),
            saved_lists::unix_ms_now(),
        )
    }
}

impl Saving for Shared {
    fn saver(&self) -> Option<&Saver> {
        Shared::saver(self)
    }

    fn now(&self) -> Tick {
        Shared::now(self)
    }

    fn policy(&self) -> Arc<Policy> {
        self.filter().policy()
    }

    fn saved_lists(&self) -> Vec<SavedEntry> {
        Shared::saved_lists(self)
    }

    fn descriptors(&self) -> Option<Arc<DescriptorPolicy>> {
        self.reloader.rls().get().map(|rls| rls.policy())
    }

    fn metrics(&self) -> &StateMetrics {
        &Shared::metrics(self).state
    }
}

impl crate::kernel::Host for Shared {
    fn metrics(&self) -> &crate::kernel::KernelMetrics {
        &Shared::metrics(self).kernel
    }

    fn export_metrics(&self) {
        Shared::metrics(self).export_kernel();
    }

    fn view(&self) -> &crate::kernel::View {
        &self.kernel_view
    }

    fn wake(&self) -> &crate::kernel::Wake {
        self.gate.kernel_wake()
    }

    fn offenders(&self, n: usize) -> Vec<(std::net::IpAddr, u64)> {
        let top = self.gate.offenders().top(n);
        top.into_iter().map(|o| (o.source, o.count)).collect()
    }

    fn filter(&self) -> &Filter {
        self.gate.filter()
    }

    fn now(&self) -> Tick {
        self.gate.now()
    }
}

impl crate::xdp::Host for Shared {
    fn record(&self, key: std::net::IpAddr, why: &str) {
        self.gate.offenders().record(key, why);
    }

    fn log_allows(&self) -> bool {
        self.gate.logs().allow()
    }

    fn filter(&self) -> &Filter {
        self.gate.filter()
    }

    fn now(&self) -> Tick {
        self.gate.now()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tollgate_filter::{Cidr, ListKind};

    #[test]
    fn a_proxys_entries_are_saved_and_put_back_into_another() {
        let config = || {
            crate::config::ProxyConfig::parse(
                "[admin]\nenabled = false\n[[rule]]\nname = \"r\"\nlimits = [{ rate = \"3/60s\" }]\n",
            )
            .unwrap()
        };
        let first = crate::server::shared_state(config(), None).unwrap();
        for cidr in ["192.0.2.0/24", "2001:db8::/32"] {
            let cidr = Cidr::parse(cidr).unwrap();
            let ttl = Duration::from_secs(600);
            let lists = first.filter().lists();
            lists
                .add(cidr, ListKind::Deny, ttl, "r".into(), first.now())
                .unwrap();
        }
        let saved = first.saved_lists();
        assert_eq!(saved.len(), 2);
        let second = crate::server::shared_state(config(), None).unwrap();
        assert_eq!(second.restore_lists(saved), Ok(2));
        assert_eq!(second.filter().lists().entries(second.now()).len(), 2);
    }
}
