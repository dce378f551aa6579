//! The config's lifecycle after start: re-reading the file ([`Reloader::reload`], on SIGHUP and
//! the admin's `POST /reload`) and swapping in a config's policy ([`Reloader::apply`]); the
//! `[kernel]` section in force, sent to whoever follows it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::watch;

use crate::config::{KernelConfig, ProxyConfig, located};
use crate::gate::Gate;
use crate::kernel::{NftError, Setup};

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
    Kernel(String, NftError),
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

/// Reloads and applies configs over the policy in force (one at a time), and keeps the config
/// last loaded to compare the next one with.
#[derive(Debug)]
pub struct Reloader {
    /// Where the policy is swapped in.
    gate: Arc<Gate>,
    /// Where the config came from (reloads re-read it); `None` for an in-memory config.
    path: Option<PathBuf>,
    /// The config last loaded successfully (listener changes need a restart: a reload
    /// compares against it to say so).
    loaded: Mutex<ProxyConfig>,
    /// The `[kernel]` section in force: a reload that changes it sends the new one (the
    /// server's kernel task follows it, see [`crate::kernel::follow`]).
    kernel: watch::Sender<Option<KernelConfig>>,
    /// What a reload needs to make the kernel's table itself (`[kernel] required = true`);
    /// set by the server once its listeners are bound, unset without a server.
    kernel_setup: OnceLock<Arc<Setup>>,
    /// The rate-limit service (`[rls]`), set by the server that started it: a reload
    /// re-reads its files.
    rls: OnceLock<Arc<crate::rls::Rls>>,
    /// The XDP program (`[xdp]`), set by the server that attached it: a reload swaps its
    /// kernel rules.
    xdp: OnceLock<Arc<crate::xdp::Attachment>>,
}

impl Reloader {
    /// Reloads into `gate`'s filter from `path` (if the config came from a file), starting
    /// from `config`, the one in force.
    #[must_use]
    pub(crate) fn new(gate: Arc<Gate>, path: Option<PathBuf>, config: ProxyConfig) -> Reloader {
        Reloader {
            gate,
            path,
            kernel: watch::Sender::new(config.kernel.clone()),
            kernel_setup: OnceLock::new(),
            rls: OnceLock::new(),
            xdp: OnceLock::new(),
            loaded: Mutex::new(config),
        }
    }

    /// The `[kernel]` section in force (subscribe to follow its changes).
    #[must_use]
    pub(crate) fn kernel(&self) -> &watch::Sender<Option<KernelConfig>> {
        &self.kernel
    }

    /// What a reload needs to make the kernel's table itself; set once, by the server.
    #[must_use]
    pub(crate) fn kernel_setup(&self) -> &OnceLock<Arc<Setup>> {
        &self.kernel_setup
    }

    /// The rate-limit service a reload re-reads the descriptor files of; set once, by the
    /// server that started it.
    #[must_use]
    pub(crate) fn rls(&self) -> &OnceLock<Arc<crate::rls::Rls>> {
        &self.rls
    }

    /// The XDP program the server attached (`[xdp]`); set once, by that server.
    #[must_use]
    pub(crate) fn xdp(&self) -> &OnceLock<Arc<crate::xdp::Attachment>> {
        &self.xdp
    }

    /// Re-reads the config file and swaps in its policy, keeping the counters of unchanged
    /// rules. A bad file is refused and the old policy stays.
    ///
    /// # Errors
    /// [`ReloadError`], already logged and counted.
    pub fn reload(&self) -> Result<(), ReloadError> {
        let result = self.try_reload();
        self.gate.metrics().reloaded(result.is_ok());
        match &result {
            Ok(()) => tracing::info!("policy reloaded"),
            Err(err) => tracing::error!("reload refused, the old policy stays: {err}"),
        }
        result
    }

    /// [`Reloader::reload`] on a blocking thread, for callers on the runtime (SIGHUP, the admin
    /// endpoint). Reading the file and resolving upstream host names may block for seconds (a
    /// DNS server that does not answer, a file on a hung mount), and the runtime's few workers
    /// serve all traffic meanwhile.
    pub async fn reload_off_runtime(self: &Arc<Self>) -> Result<(), ReloadError> {
        let reloader = Arc::clone(self);
        match tokio::task::spawn_blocking(move || reloader.reload()).await {
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
    #[cfg(test)]
    pub(crate) fn apply(&self, config: ProxyConfig) -> Result<(), ReloadError> {
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
        self.gate
            .filter()
            .reload(config.policy.clone(), self.gate.now())
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
            self.gate.metrics().kernel.errors.inc();
            if let Err(back) = self
                .gate
                .filter()
                .reload(loaded.policy.clone(), self.gate.now())
            {
                tracing::error!(%back, "the policy in force before the refused reload cannot be rebuilt");
            }
            return Err(ReloadError::Kernel(kernel.table.clone(), err));
        }
        // The kernel's rules follow the policy, swapped whole (the program's other settings,
        // `[xdp]`, need a restart).
        if let Some(xdp) = self.xdp.get() {
            match xdp.reload(&config.policy) {
                Ok(rules) => {
                    tracing::info!(limits = %rules.describe(), "XDP mode: kernel rules swapped")
                }
                Err(err) => {
                    xdp.metrics().errors.inc();
                    tracing::error!(%err, "XDP mode: the kernel keeps its rules from before the reload");
                }
            }
        }
        if loaded.listeners != config.listeners
            || loaded.admin != config.admin
            || loaded.xdp != config.xdp
            || loaded.settings != config.settings
            || loaded.cluster != config.cluster
            || loaded.state != config.state
            || crate::rls::needs_restart(loaded.rls.as_ref(), config.rls.as_ref())
        {
            tracing::warn!(
                "listener, admin, [proxy] (state_file too), [cluster], [xdp] or [rls] (listen and \
                 bounds) settings changed: they take effect on restart; the policy is reloaded now"
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

#[cfg(test)]
mod tests {
    use std::panic::{AssertUnwindSafe, catch_unwind};

    use super::*;
    use crate::shared::Shared;
    use tollgate_filter::Policy;

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
        let shared = crate::server::shared_state(config, Some(path.clone())).expect("fits");
        let first = shared.filter().policy();
        let same = |policy: &Arc<Policy>| Arc::ptr_eq(policy, &shared.filter().policy());
        std::fs::write(&path, "[[rule]]\nname = ").unwrap();
        assert!(matches!(
            shared.reloader().reload(),
            Err(ReloadError::Invalid(..))
        ));
        assert!(same(&first), "a bad file changes nothing");
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(
            shared.reloader().reload(),
            Err(ReloadError::Read(..))
        ));
        assert!(same(&first), "a missing file changes nothing");
        std::fs::write(&path, CHANGED).unwrap();
        shared.reloader().reload().expect("a good file");
        let second = shared.filter().policy();
        assert!(!same(&first));
        assert_eq!(second.rule(1).map(|r| r.name.as_str()), Some("s"));
        // A bad file after a good one: the good one stays, not the first.
        std::fs::write(&path, "[[rule]]\nname = ").unwrap();
        assert!(shared.reloader().reload().is_err());
        assert!(same(&second));
        // `[kernel]` changes are sent to whoever follows them, and only changes.
        let mut kernel = shared.reloader().kernel().subscribe();
        shared
            .reloader()
            .apply(ProxyConfig::parse(&format!("{CHANGED}\n[kernel]\n")).expect("valid"))
            .expect("applied");
        assert!(kernel.has_changed().unwrap());
        assert!(kernel.borrow_and_update().is_some());
        shared
            .reloader()
            .apply(ProxyConfig::parse(&format!("{GOOD}\n[kernel]\n")).expect("valid"))
            .expect("applied");
        assert!(!kernel.has_changed().unwrap(), "the same [kernel]");
        assert!(
            shared.filter().policy().rule(1).is_none(),
            "GOOD's one rule"
        );
        let without = crate::server::shared_state(ProxyConfig::parse(GOOD).expect("valid"), None)
            .expect("fits");
        assert!(matches!(
            without.reloader().reload(),
            Err(ReloadError::NoFile)
        ));
    }

    /// The line an operator acts on when a reload's sections need a restart.
    const RESTART: &str = "take effect on restart; the policy is reloaded now";

    /// What applying GOOD's policy with `sections` over a proxy started from GOOD logs.
    fn applied(sections: &str) -> String {
        let shared = crate::server::shared_state(ProxyConfig::parse(GOOD).expect("valid"), None)
            .expect("fits");
        let config = ProxyConfig::parse(&format!("{sections}\n{GOOD}"))
            .unwrap_or_else(|e| panic!("{sections}: {e}"));
        crate::test_log::logged(|| shared.reloader().apply(config).expect("applied"))
    }

    #[test]
    fn an_apply_says_once_which_sections_wait_for_a_restart_and_nothing_when_none_changed() {
        let shared = crate::server::shared_state(ProxyConfig::parse(GOOD).expect("valid"), None)
            .expect("fits");
        let log = crate::test_log::logged(|| {
            shared
                .reloader()
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
        let shared = crate::server::shared_state(
            ProxyConfig::parse(GOOD).expect("valid"),
            Some(path.clone()),
        )
        .expect("fits");
        let reload = || {
            let mut result = None;
            let log = crate::test_log::logged(|| result = Some(shared.reloader().reload()));
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
        Arc::new(crate::server::shared_state(config, Some(path)).expect("fits"))
    }

    #[tokio::test]
    async fn a_reload_off_the_runtime_answers_what_the_reload_decided() {
        let (_dir, path) = config_file(GOOD);
        let shared = reloading_from(path.clone());
        let first = shared.filter().policy();
        std::fs::write(&path, "[[rule]]\nname = ").unwrap();
        let refused = shared.reloader().reload_off_runtime().await;
        assert!(
            matches!(refused, Err(ReloadError::Invalid(..))),
            "{refused:?}"
        );
        assert!(Arc::ptr_eq(&first, &shared.filter().policy()));
        std::fs::write(&path, CHANGED).unwrap();
        shared
            .reloader()
            .reload_off_runtime()
            .await
            .expect("a good file");
        let rule = shared.filter().policy().rule(1).map(|r| r.name.clone());
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
        let mut reload = std::pin::pin!(shared.reloader().reload_off_runtime());
        let mut context = Context::from_waker(Waker::noop());
        let result = (0..1_000)
            .find_map(|_| match reload.as_mut().poll(&mut context) {
                Poll::Ready(result) => Some(result),
                Poll::Pending => None,
            })
            .expect("a stopped runtime answers at once");
        assert!(matches!(result, Err(ReloadError::Cancelled)), "{result:?}");
        assert!(
            shared.filter().policy().rule(1).is_none(),
            "GOOD's one rule"
        );
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
            runtime.block_on(shared.reloader().reload_off_runtime())
        }));
        let panic = outcome.expect_err("the reload's panic surfaces");
        assert_eq!(
            panic.downcast_ref::<&str>(),
            Some(&"the reload's thread panicked")
        );
    }
}
