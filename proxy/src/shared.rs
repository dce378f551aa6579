//! What every listener shares: the filter and its clock, the open-connection counts, metrics,
//! the offender list, the rejection log budget and the cluster link; and the one place a
//! decision is made.

use std::net::IpAddr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tollgate_filter::{
    Decision, DenyReason, Event, Filter, LimitKey, ListError, Policy, Prefix, Remote, Rule, RuleId,
    Source, Transport, Verdict,
};
use tollgate_sketch::{Clock, MonotonicClock, Tick};

use crate::cluster::Cluster;
use crate::config::{ProxyConfig, Settings, located};
use crate::gate::connections::Connections;
use crate::gate::log_limit::LogLimit;
use crate::gate::offenders::Offenders;
use crate::listeners::{ListenerMetrics, Offence, Refusal, Serving};
use crate::metrics::Metrics;
use crate::state::lists::{self as saved_lists, SavedEntry};
use crate::state::{self, Saver, Saving, StateMetrics};

/// How many sources the offender list keeps.
const OFFENDERS: usize = 256;
/// State shared by every listener and the admin endpoint.
#[derive(Debug)]
pub struct Shared {
    /// The policy in force, swapped whole on reload.
    pub filter: Filter,
    clock: MonotonicClock,
    /// The clock's reading when this process started it (a warm restart's clock resumes
    /// where the last process's stopped: not zero).
    started: Tick,
    connections: Connections,
    /// Every metric.
    pub metrics: Metrics,
    /// The most rejected sources.
    pub offenders: Offenders,
    /// The rejection log budget.
    pub logs: LogLimit,
    /// Process settings (fixed at start).
    pub settings: Settings,
    /// This node's part of a cluster (`[cluster]`, fixed at start); its sync task is started
    /// by [`crate::server::Server::start`].
    pub cluster: Option<Arc<Cluster>>,
    /// The warm-restart state file (`[proxy] state_file`, fixed at start); saved by the task
    /// [`crate::server::Server::start`] starts and at shutdown.
    pub state: Option<Saver>,
    /// Where the config came from (reloads re-read it); `None` for an in-memory config.
    path: Option<PathBuf>,
    /// The config last loaded successfully (listener changes need a restart: a reload
    /// compares against it to say so).
    loaded: Mutex<ProxyConfig>,
    /// The `[kernel]` section in force: a reload that changes it sends the new one (the
    /// server's kernel task follows it, see [`crate::kernel::follow`]).
    pub kernel: tokio::sync::watch::Sender<Option<crate::config::KernelConfig>>,
    /// Rung by a decision that puts a source over `[kernel] factor` times a limit, so the
    /// kernel's updater sends it at once (see [`crate::kernel::Wake`]).
    pub kernel_wake: crate::kernel::Wake,
    /// What a reload needs to make the kernel's table itself (`[kernel] required = true`);
    /// set by the server once its listeners are bound, unset without a server.
    pub kernel_setup: std::sync::OnceLock<Arc<crate::kernel::Setup>>,
    /// What the kernel holds, as the updater last committed it (the admin's `/top` and
    /// `/estimate` read it).
    pub kernel_view: crate::kernel::View,
    /// The listeners serving now, as bound (the admin's status page shows them).
    pub running: Serving,
    /// The rate-limit service (`[rls]`), set by the server that started it: a reload
    /// re-reads its files.
    pub rls: std::sync::OnceLock<Arc<crate::rls::Rls>>,
}

/// Why a reload was refused; the old policy stays in force.
#[derive(Debug)]
pub enum ReloadError {
    /// There is no file to re-read (the proxy was started from an in-memory config).
    NoFile,
    /// The file could not be read.
    Read(PathBuf, std::io::Error),
    /// The file has errors, each located.
    Invalid(PathBuf, tollgate_filter::ConfigErrors),
    /// The policy could not be built (memory too small for its sketches).
    Policy(tollgate_filter::PolicyError),
    /// The runtime shut down while the reload waited for its thread; nothing changed.
    Cancelled,
    /// The reload adds or changes `[kernel]` with `required = true`, and its table cannot be
    /// made: the table (name) and nft's error. The policy and table in force stay.
    Kernel(String, crate::kernel::NftError),
    /// `[rls]`'s descriptor files cannot be read or checked (each error located), or its
    /// memory is too small; everything in force stays.
    Rls(crate::rls::RlsError),
}

impl std::fmt::Display for ReloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReloadError::NoFile => write!(f, "no config file to reload from"),
            ReloadError::Read(path, err) => write!(f, "{}: cannot read: {err}", path.display()),
            ReloadError::Invalid(path, errors) => write!(f, "{}", located(path, errors)),
            ReloadError::Policy(err) => write!(f, "{err}"),
            ReloadError::Cancelled => write!(f, "the proxy is stopping; nothing was reloaded"),
            ReloadError::Kernel(table, err) => write!(
                f,
                "[kernel] required = true, and its table `inet {table}` cannot be made: {err}"
            ),
            ReloadError::Rls(err) => write!(f, "{err}"),
        }
    }
}

impl std::error::Error for ReloadError {}

/// A decision and the policy that made it (its rule indices point into that policy, which a
/// reload may have replaced since).
#[derive(Debug)]
pub struct Decided {
    /// The decision.
    pub decision: Decision,
    /// The policy it was made under.
    policy: Arc<Policy>,
}

impl Decided {
    /// The rule a throttle or a penalty names, as the policy that decided holds it (`None`
    /// for an allow or a listed source): what a listener carries out.
    #[must_use]
    pub fn rule(&self) -> Option<&Rule> {
        match self.decision.verdict {
            Verdict::Throttle(throttle) => self.policy.rule(throttle.at.rule),
            Verdict::Deny(DenyReason::Penalty { rule }) => self.policy.rule(rule),
            Verdict::Allow | Verdict::Deny(_) => None,
        }
    }
}

impl Shared {
    /// State for `config`, read from `path` if it came from a file.
    ///
    /// # Errors
    /// When the policy's or the connection counts' memory is too small.
    pub fn new(
        config: ProxyConfig,
        path: Option<PathBuf>,
    ) -> Result<Shared, Box<dyn std::error::Error + Send + Sync>> {
        let metrics = Metrics::for_sections(config.cluster.is_some(), config.kernel.is_some());
        if let Some(cluster) = &config.cluster {
            Cluster::check_secret(cluster)?;
        }
        let warm = state::warm_start(&config, &metrics.state)?;
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
        let connections = Connections::new(config.settings.connection_memory)?;
        metrics
            .connection_memory
            .set(i64::try_from(connections.memory_bytes()).unwrap_or(i64::MAX));
        let logs = LogLimit::new(
            config.settings.log_rejections,
            metrics.logs_suppressed.clone(),
        );
        let shared = Shared {
            filter,
            started: clock.now(),
            clock,
            cluster,
            state: saver,
            connections,
            offenders: Offenders::new(OFFENDERS),
            logs,
            settings: config.settings,
            metrics,
            path,
            kernel: tokio::sync::watch::Sender::new(config.kernel.clone()),
            kernel_wake: crate::kernel::Wake::new(),
            kernel_setup: std::sync::OnceLock::new(),
            kernel_view: crate::kernel::View::new(),
            loaded: Mutex::new(config),
            running: Serving::default(),
            rls: std::sync::OnceLock::new(),
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

    /// The filter's clock now.
    #[must_use]
    pub fn now(&self) -> Tick {
        self.clock.now()
    }

    /// How long this process has run at `now` (a reading of [`Shared::now`]): the time base
    /// of its counters, which start at zero at every start, warm restarts included.
    pub fn uptime(&self, now: Tick) -> Duration {
        now.saturating_since(self.started)
    }

    /// Decides on one connection or datagram from `source` on `listener`, and counts the
    /// decision (see [`Shared::account`]): the data path's one call per arrival. If the limiter
    /// fails (a bug: it is not meant to), the traffic is let through and counted: a rate
    /// limiter must not take the service down.
    pub fn pass(
        &self,
        listener: &ListenerMetrics,
        source: Source,
        transport: Transport,
        bytes: u64,
    ) -> Decided {
        let decided = self.judge(source, transport, bytes, Policy::decide);
        self.account(listener, &decided, source);
        decided
    }

    /// Counts a connection or datagram refused on `listener` for `refusal`, which is not a
    /// verdict (a cap, a PROXY header): in the metrics, and as its kind says
    /// ([`Refusal::offence`]) in the offender list and the rejection log. True when the caller
    /// is to log its own line about it (within the log budget).
    #[must_use = "true asks the caller for its own log line"]
    pub fn refuse(&self, listener: &ListenerMetrics, refusal: Refusal, source: IpAddr) -> bool {
        self.metrics.listeners.refused(listener, refusal);
        match refusal.offence() {
            Offence::Offender(why) => {
                self.rejected(listener, source, why);
                false
            }
            Offence::Warning => self.logs.allow(),
            Offence::Counted => false,
        }
    }

    /// Whether a connection decided before may pass now (see [`Policy::recheck`]); fails open
    /// like [`Shared::decide`].
    pub fn recheck(&self, source: Source, transport: Transport) -> Decided {
        self.judge(source, transport, 0, Policy::recheck)
    }

    fn judge(
        &self,
        source: Source,
        transport: Transport,
        bytes: u64,
        how: fn(&Policy, &Event, Tick) -> Decision,
    ) -> Decided {
        let event = Event {
            source,
            transport,
            bytes,
        };
        let policy = self.filter.policy();
        let now = self.now();
        let decision =
            catch_unwind(AssertUnwindSafe(|| how(&policy, &event, now))).unwrap_or_else(|_| {
                self.metrics.decide_failures.inc();
                Decision {
                    verdict: Verdict::Allow,
                    shadow: None,
                    shadow_count: 0,
                }
            });
        Decided { decision, policy }
    }

    /// Takes one open-connection slot of the network of `source` (`prefixes`: its IPv4 and
    /// IPv6 lengths) in `scope`, or `None` if that network holds `cap` already. The key returned
    /// gives the slot back through [`Shared::close_connection`].
    #[must_use]
    pub fn open_in_network(
        &self,
        scope: RuleId,
        source: Source,
        prefixes: (Prefix, Prefix),
        cap: u32,
    ) -> Option<LimitKey> {
        self.connections.open(scope, source, prefixes, cap)
    }

    /// Gives back a slot taken by [`Shared::open_in_network`] (once per slot).
    pub fn close_connection(&self, key: &LimitKey) {
        self.connections.close(key);
    }

    /// Counts a decision on `listener` in the metrics and, if it rejects, in the offender list
    /// and (within the budget) the log.
    fn account(&self, listener: &ListenerMetrics, decided: &Decided, source: Source) {
        let metrics = &self.metrics;
        let rule_name = |index: usize| decided.policy.rule(index).map_or("?", |r| r.name.as_str());
        if let Some(shadow) = decided.decision.shadow {
            metrics
                .listeners
                .shadow_throttled(listener, &decided.policy, shadow.at.rule);
        }
        match decided.decision.verdict {
            Verdict::Allow => {
                listener.allowed.inc();
            }
            Verdict::Throttle(throttle) => {
                metrics
                    .listeners
                    .throttled(listener, &decided.policy, throttle.at.rule);
                self.rejected(listener, source.addr(), rule_name(throttle.at.rule));
                self.kernel_wake.over(throttle.estimate, throttle.allowed);
            }
            Verdict::Deny(DenyReason::Penalty { rule }) => {
                metrics.listeners.refused(listener, Refusal::Penalty);
                self.rejected(listener, source.addr(), rule_name(rule));
                self.kernel_wake.penalty();
            }
            Verdict::Deny(_) => {
                metrics.listeners.refused(listener, Refusal::Listed);
                self.rejected(listener, source.addr(), "deny list");
            }
        }
    }

    /// Bytes held for per-source open-connection counts.
    #[must_use]
    pub fn connections_memory(&self) -> usize {
        self.connections.memory_bytes()
    }

    /// Records a rejection of `source` for the offender list and, within the log budget, the
    /// log.
    fn rejected(&self, listener: &ListenerMetrics, source: IpAddr, why: &str) {
        self.offenders.record(source, why);
        if self.logs.allow() {
            tracing::info!(listener = &*listener.name.0, %source, why, "rejected");
        }
    }

    /// Re-reads the config file and swaps in its policy, keeping the counters of unchanged
    /// rules. A bad file is refused and the old policy stays.
    ///
    /// # Errors
    /// [`ReloadError`], already logged and counted.
    pub fn reload(&self) -> Result<(), ReloadError> {
        let result = self.try_reload();
        self.metrics.reloaded(result.is_ok());
        match &result {
            Ok(()) => tracing::info!("policy reloaded"),
            Err(err) => tracing::error!("reload refused, the old policy stays: {err}"),
        }
        result
    }

    /// [`Shared::reload`] on a blocking thread, for callers on the runtime (SIGHUP, the admin
    /// endpoint). Reading the file and resolving upstream host names may block for seconds (a
    /// DNS server that does not answer, a file on a hung mount), and the runtime's few workers
    /// serve all traffic meanwhile.
    pub async fn reload_off_runtime(self: &Arc<Self>) -> Result<(), ReloadError> {
        let shared = Arc::clone(self);
        match tokio::task::spawn_blocking(move || shared.reload()).await {
            Ok(result) => result,
            // A reload that panicked is a bug: let it surface where it would have inline.
            Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
            Err(_) => Err(ReloadError::Cancelled),
        }
    }

    fn try_reload(&self) -> Result<(), ReloadError> {
        let path = self.path.as_ref().ok_or(ReloadError::NoFile)?;
        // One reload at a time (a SIGHUP and a POST /reload may race), from reading the file
        // to the swap: the last file read is the policy in force, a refused one changes nothing.
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        let text = std::fs::read_to_string(path).map_err(|e| ReloadError::Read(path.clone(), e))?;
        let config =
            ProxyConfig::parse(&text).map_err(|e| ReloadError::Invalid(path.clone(), e))?;
        self.apply_locked(config, &mut loaded)
    }

    /// Swaps in the policy of `config` (the proxy's own sections need a restart to change).
    ///
    /// # Errors
    /// [`ReloadError::Policy`] if the policy cannot be built; the old one stays.
    pub fn apply(&self, config: ProxyConfig) -> Result<(), ReloadError> {
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        self.apply_locked(config, &mut loaded)
    }

    fn apply_locked(
        &self,
        config: ProxyConfig,
        loaded: &mut ProxyConfig,
    ) -> Result<(), ReloadError> {
        // The descriptor files are re-read first: a bad one refuses the whole reload.
        let rls = match (self.rls.get(), &config.rls) {
            (Some(rls), Some(section)) => {
                Some((rls, rls.prepare(section).map_err(ReloadError::Rls)?))
            }
            _ => None,
        };
        self.filter
            .reload(config.policy.clone(), self.now())
            .map_err(ReloadError::Policy)?;
        // A required fast path is made before the reload counts as done: one that cannot be
        // made refuses the reload, and the policy in force before it is put back (its counts
        // carry over both ways, as at any reload that keeps the rules).
        if let (true, Some(kernel), Some(setup)) = (
            loaded.kernel != config.kernel,
            config.kernel.as_ref().filter(|k| k.required),
            self.kernel_setup.get(),
        ) && let Err(err) = setup.make(kernel)
        {
            self.metrics.kernel.errors.inc();
            if let Err(back) = self.filter.reload(loaded.policy.clone(), self.now()) {
                tracing::error!(%back, "the policy in force before the refused reload cannot be rebuilt");
            }
            return Err(ReloadError::Kernel(kernel.table.clone(), err));
        }
        if loaded.listeners != config.listeners
            || loaded.admin != config.admin
            || loaded.settings != config.settings
            || loaded.cluster != config.cluster
            || loaded.state != config.state
            || crate::rls::needs_restart(loaded.rls.as_ref(), config.rls.as_ref())
        {
            tracing::warn!(
                "listener, admin, [proxy] (state_file too), [cluster] or [rls] (listen and bounds) \
                 settings changed: they take effect on restart; the policy is reloaded now"
            );
        }
        if loaded.kernel != config.kernel {
            // Nobody listening (no server, or it stopped): nothing to follow it.
            let _ = self.kernel.send(config.kernel.clone());
        }
        if let Some((rls, prepared)) = rls {
            rls.commit(prepared);
        }
        *loaded = config;
        Ok(())
    }
}

// The run-time list entries as the state file keeps them.
impl Shared {
    /// The run-time list entries in force now, for the state file (see [`saved_lists::save`]).
    #[must_use]
    pub fn saved_lists(&self) -> Vec<SavedEntry> {
        saved_lists::save(&self.filter.lists(), self.now(), saved_lists::unix_ms_now())
    }

    /// Puts run-time list entries read from the state file back (see [`saved_lists::restore`]); they
    /// apply at once.
    ///
    /// # Errors
    /// As [`saved_lists::restore`]: nothing is restored then.
    pub fn restore_lists(&self, saved: Vec<SavedEntry>) -> Result<usize, ListError> {
        saved_lists::restore(
            &self.filter.lists(),
            saved,
            self.now(),
            saved_lists::unix_ms_now(),
        )
    }
}

impl Saving for Shared {
    fn saver(&self) -> Option<&Saver> {
        self.state.as_ref()
    }

    fn now(&self) -> Tick {
        Shared::now(self)
    }

    fn policy(&self) -> Arc<Policy> {
        self.filter.policy()
    }

    fn saved_lists(&self) -> Vec<SavedEntry> {
        Shared::saved_lists(self)
    }

    fn metrics(&self) -> &StateMetrics {
        &self.metrics.state
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tollgate_filter::{Cidr, ListKind};

    use super::*;

    const GOOD: &str = r#"
        [[rule]]
        name = "r"
        limits = [{ rate = "100/10s" }]
    "#;

    const CHANGED: &str = r#"
        [[rule]]
        name = "r"
        limits = [{ rate = "5/10s" }]
        [[rule]]
        name = "s"
        limits = [{ rate = "7/10s" }]
    "#;

    #[test]
    fn a_refused_reload_keeps_the_last_good_policy_and_a_good_one_replaces_it() {
        let (_dir, path) = config_file(GOOD);
        let config = ProxyConfig::parse(GOOD).expect("valid");
        let shared = Shared::new(config, Some(path.clone())).expect("fits");
        let first = shared.filter.policy();
        let same = |policy: &Arc<Policy>| Arc::ptr_eq(policy, &shared.filter.policy());
        std::fs::write(&path, "[[rule]]\nname = ").unwrap();
        assert!(matches!(shared.reload(), Err(ReloadError::Invalid(..))));
        assert!(same(&first), "a bad file changes nothing");
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(shared.reload(), Err(ReloadError::Read(..))));
        assert!(same(&first), "a missing file changes nothing");
        std::fs::write(&path, CHANGED).unwrap();
        shared.reload().expect("a good file");
        let second = shared.filter.policy();
        assert!(!same(&first));
        assert_eq!(second.rule(1).map(|r| r.name.as_str()), Some("s"));
        // A bad file after a good one: the good one stays, not the first.
        std::fs::write(&path, "[[rule]]\nname = ").unwrap();
        assert!(shared.reload().is_err());
        assert!(same(&second));
        // `[kernel]` changes are sent to whoever follows them, and only changes.
        let mut kernel = shared.kernel.subscribe();
        shared
            .apply(ProxyConfig::parse(&format!("{CHANGED}\n[kernel]\n")).expect("valid"))
            .expect("applied");
        assert!(kernel.has_changed().unwrap());
        assert!(kernel.borrow_and_update().is_some());
        shared
            .apply(ProxyConfig::parse(&format!("{GOOD}\n[kernel]\n")).expect("valid"))
            .expect("applied");
        assert!(!kernel.has_changed().unwrap(), "the same [kernel]");
        assert!(shared.filter.policy().rule(1).is_none(), "GOOD's one rule");
        let without = Shared::new(ProxyConfig::parse(GOOD).expect("valid"), None).expect("fits");
        assert!(matches!(without.reload(), Err(ReloadError::NoFile)));
    }

    /// The line an operator acts on when a reload's sections need a restart.
    const RESTART: &str = "take effect on restart; the policy is reloaded now";

    /// What applying GOOD's policy with `sections` over a proxy started from GOOD logs.
    fn applied(sections: &str) -> String {
        let shared = Shared::new(ProxyConfig::parse(GOOD).expect("valid"), None).expect("fits");
        let config = ProxyConfig::parse(&format!("{sections}\n{GOOD}"))
            .unwrap_or_else(|e| panic!("{sections}: {e}"));
        crate::test_log::logged(|| shared.apply(config).expect("applied"))
    }

    #[test]
    fn an_apply_says_once_which_sections_wait_for_a_restart_and_nothing_when_none_changed() {
        let shared = Shared::new(ProxyConfig::parse(GOOD).expect("valid"), None).expect("fits");
        let log = crate::test_log::logged(|| {
            shared
                .apply(ProxyConfig::parse(CHANGED).expect("valid"))
                .expect("applied");
        });
        assert!(!log.contains(RESTART), "only the policy changed: {log}");
        // Each section alone: a restart is needed, and the line says so once.
        for sections in [
            "[[listener]]\nname = \"front\"\nlisten = \"127.0.0.1:0\"\nupstreams = [\"127.0.0.1:9\"]",
            "[admin]\nlisten = \"127.0.0.1:1\"",
            "[proxy]\ndrain = \"7s\"",
            "[proxy]\nstate_file = \"/nonexistent/tollgate.state\"",
            "[cluster]\nredis = [\"127.0.0.1:1\"]\nname = \"edge\"",
        ] {
            let log = applied(sections);
            let lines: Vec<_> = log.lines().filter(|l| l.contains(RESTART)).collect();
            assert_eq!(lines.len(), 1, "{sections}: {log}");
            assert!(lines[0].contains("WARN"), "{sections}: {log}");
        }
    }

    #[test]
    fn a_reload_says_once_whether_it_applied_and_a_refused_one_names_its_error() {
        let (_dir, path) = config_file(GOOD);
        let shared = Shared::new(ProxyConfig::parse(GOOD).expect("valid"), Some(path.clone()))
            .expect("fits");
        let reload = || {
            let mut result = None;
            let log = crate::test_log::logged(|| result = Some(shared.reload()));
            (result.expect("ran"), log)
        };
        const REFUSED: &str = "reload refused, the old policy stays: ";

        // Refused: the error, located in the file, on one ERROR line; nothing says it applied.
        std::fs::write(&path, "[[rule]]\nname = ").unwrap();
        let (result, log) = reload();
        assert!(matches!(result, Err(ReloadError::Invalid(..))), "{log}");
        assert_eq!(crate::test_log::lines_with(&log, REFUSED), 1, "{log}");
        let line = log.lines().find(|l| l.contains(REFUSED)).unwrap();
        let located = format!("{}:2:8: ", path.display());
        assert!(line.contains("ERROR") && line.contains(&located), "{log}");
        assert_eq!(
            crate::test_log::lines_with(&log, "policy reloaded"),
            0,
            "{log}"
        );

        // A file gone: the path and why it cannot be read.
        std::fs::remove_file(&path).unwrap();
        let (result, log) = reload();
        assert!(matches!(result, Err(ReloadError::Read(..))), "{log}");
        let said = format!("{REFUSED}{}: cannot read: ", path.display());
        assert_eq!(crate::test_log::lines_with(&log, &said), 1, "{log}");

        // Applied: said once, and nothing says it was refused.
        std::fs::write(&path, CHANGED).unwrap();
        let (result, log) = reload();
        result.expect("a good file");
        assert_eq!(
            crate::test_log::lines_with(&log, "policy reloaded"),
            1,
            "{log}"
        );
        assert_eq!(crate::test_log::lines_with(&log, "refused"), 0, "{log}");
    }

    /// A config file holding `text`, in a directory removed when the first is dropped.
    fn config_file(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::Builder::new()
            .prefix("tollgate-shared")
            .tempdir()
            .expect("temp dir writable");
        let path = dir.path().join("tollgate.toml");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    /// A proxy's shared state started from GOOD, reloading from `path`.
    fn reloading_from(path: PathBuf) -> Arc<Shared> {
        let config = ProxyConfig::parse(GOOD).expect("valid");
        Arc::new(Shared::new(config, Some(path)).expect("fits"))
    }

    #[tokio::test]
    async fn a_reload_off_the_runtime_answers_what_the_reload_decided() {
        let (_dir, path) = config_file(GOOD);
        let shared = reloading_from(path.clone());
        let first = shared.filter.policy();
        std::fs::write(&path, "[[rule]]\nname = ").unwrap();
        let refused = shared.reload_off_runtime().await;
        assert!(
            matches!(refused, Err(ReloadError::Invalid(..))),
            "{refused:?}"
        );
        assert!(Arc::ptr_eq(&first, &shared.filter.policy()));
        std::fs::write(&path, CHANGED).unwrap();
        shared.reload_off_runtime().await.expect("a good file");
        let rule = shared.filter.policy().rule(1).map(|r| r.name.clone());
        assert_eq!(rule.as_deref(), Some("s"));
    }

    /// A SIGHUP or POST /reload whose thread never runs (the runtime stopped first): refused as
    /// cancelled, not a panic, and the policy in force stays.
    #[test]
    fn a_reload_asked_for_as_the_runtime_stops_is_cancelled_and_changes_nothing() {
        use std::future::Future;
        use std::task::{Context, Poll, Waker};

        let (_dir, path) = config_file(CHANGED);
        let shared = reloading_from(path);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let handle = runtime.handle().clone();
        drop(runtime);
        let _inside = handle.enter();
        let mut reload = std::pin::pin!(shared.reload_off_runtime());
        let mut context = Context::from_waker(Waker::noop());
        let result = (0..1_000)
            .find_map(|_| match reload.as_mut().poll(&mut context) {
                Poll::Ready(result) => Some(result),
                Poll::Pending => None,
            })
            .expect("a stopped runtime answers at once");
        assert!(matches!(result, Err(ReloadError::Cancelled)), "{result:?}");
        assert!(shared.filter.policy().rule(1).is_none(), "GOOD's one rule");
    }

    /// A log line that panics, to make a reload panic on the thread it runs on.
    struct Panicking;

    impl std::io::Write for Panicking {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            panic!("the reload's thread panicked");
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A reload that panics is a bug: it surfaces where the reload was asked for, as it would
    /// inline, not as a quiet "cancelled".
    #[test]
    fn a_reload_that_panics_off_the_runtime_panics_where_it_was_asked_for() {
        let (_dir, path) = config_file("[[rule]]\nname = ");
        let shared = reloading_from(path);
        // Only the runtime's own threads (the blocking one the reload runs on) log through it.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .on_thread_start(|| {
                let panicking = tracing_subscriber::fmt().with_writer(|| Panicking).finish();
                std::mem::forget(tracing::subscriber::set_default(panicking));
            })
            .build()
            .unwrap();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            runtime.block_on(shared.reload_off_runtime())
        }));
        let panic = outcome.expect_err("the reload's panic surfaces");
        assert_eq!(
            panic.downcast_ref::<&str>(),
            Some(&"the reload's thread panicked")
        );
    }

    #[test]
    fn a_proxys_entries_are_saved_and_put_back_into_another() {
        let config = || {
            crate::config::ProxyConfig::parse(
                "[admin]\nenabled = false\n[[rule]]\nname = \"r\"\nlimits = [{ rate = \"3/60s\" }]\n",
            )
            .unwrap()
        };
        let first = Shared::new(config(), None).unwrap();
        for cidr in ["192.0.2.0/24", "2001:db8::/32"] {
            let cidr = Cidr::parse(cidr).unwrap();
            let ttl = Duration::from_secs(600);
            let lists = first.filter.lists();
            lists
                .add(cidr, ListKind::Deny, ttl, "r".into(), first.now())
                .unwrap();
        }
        let saved = first.saved_lists();
        assert_eq!(saved.len(), 2);
        let second = Shared::new(config(), None).unwrap();
        assert_eq!(second.restore_lists(saved), Ok(2));
        assert_eq!(second.filter.lists().entries(second.now()).len(), 2);
    }
}
