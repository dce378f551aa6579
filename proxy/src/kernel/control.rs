//! The fast path over the proxy's life: the table in force ([`Current`]), replaced, made or
//! deleted when a reload changes, adds or removes `[kernel]` ([`follow`]), each time with a
//! fresh [`Updater`].

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::KernelConfig;

use super::host::Host;
use super::nft::{self, NftError};
use super::ruleset::Ruleset;
use super::table::Table;
use super::updater::Updater;

/// The table in force, if any. Every nft transaction on it runs while holding it, so none
/// runs against a table that was replaced or deleted meanwhile, and a stop that deletes it
/// waits for a replacement under way.
#[derive(Debug, Default)]
pub(crate) struct Current(Mutex<Option<Arc<Table>>>);

impl Current {
    /// Holding nothing yet.
    #[must_use]
    pub(crate) fn new() -> Current {
        Current::default()
    }

    /// The table in force.
    #[must_use]
    pub(crate) fn table(&self) -> Option<Arc<Table>> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Arc<Table>>> {
        // A panic while holding it left a whole value (each write is one assignment).
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Puts `ruleset`'s table in place of the one in force (or of none), in one transaction:
    /// the old table (under its own name, if that differs) and any table of the new name are
    /// deleted and the new one made, or nothing changes. Blocks on nft.
    ///
    /// # Errors
    /// [`NftError`] if nft is missing or refused; the table in force stays.
    pub(crate) fn replace(&self, ruleset: Ruleset) -> Result<Arc<Table>, NftError> {
        let mut current = self.lock();
        let old = current.as_ref().map(|t| t.ruleset().table().to_owned());
        nft::run(&ruleset.replace(old.as_deref()))?;
        let table = Arc::new(Table::made(ruleset));
        *current = Some(Arc::clone(&table));
        Ok(table)
    }

    /// Runs `text` on `table` if it is still the one in force (`Ok(false)` if not: nothing
    /// ran). Blocks on nft.
    ///
    /// # Errors
    /// [`NftError`] if it did not commit; then nothing of it did.
    pub(crate) fn apply(&self, table: &Arc<Table>, text: &str) -> Result<bool, NftError> {
        let current = self.lock();
        if !current.as_ref().is_some_and(|c| Arc::ptr_eq(c, table)) {
            return Ok(false);
        }
        table.apply(text)?;
        Ok(true)
    }

    /// Deletes the table in force, if any; its name. Blocks on nft.
    ///
    /// # Errors
    /// [`NftError`] if nft could not (the table stays until the next start replaces it, and
    /// is forgotten here).
    pub(crate) fn delete(&self) -> Result<Option<String>, NftError> {
        let Some(table) = self.lock().take() else {
            return Ok(None);
        };
        table.delete()?;
        Ok(Some(table.ruleset().table().to_owned()))
    }
}

/// The listeners the rules guard: their bound addresses.
#[derive(Clone, Debug, Default)]
pub(crate) struct Guarded {
    /// TCP listeners.
    pub(crate) tcp: Vec<SocketAddr>,
    /// UDP listeners.
    pub(crate) udp: Vec<SocketAddr>,
}

impl Guarded {
    /// The ruleset of `config` for these listeners.
    #[must_use]
    pub(crate) fn ruleset(&self, config: &KernelConfig) -> Ruleset {
        Ruleset::new(config, self.tcp.iter().copied(), self.udp.iter().copied())
    }
}

/// What a reload needs to make the table itself, before it puts its policy in force: a
/// reload that adds or changes `[kernel]` with `required = true` is refused whole when the
/// table cannot be made (see [`Setup::make`]). Set by the server once its listeners are bound.
#[derive(Debug)]
pub(crate) struct Setup {
    current: Arc<Current>,
    guarded: Guarded,
    /// The table the last [`Setup::make`] put in force, and the section it was made for: the
    /// kernel task ([`follow`]) takes it instead of making it again.
    made: Mutex<Option<(KernelConfig, Arc<Table>)>>,
}

impl Setup {
    /// For the table in `current` and the listeners `guarded`.
    #[must_use]
    pub(crate) fn new(current: Arc<Current>, guarded: Guarded) -> Setup {
        Setup {
            current,
            guarded,
            made: Mutex::new(None),
        }
    }

    /// Puts the table of `config` in place of the one in force (see [`Current::replace`]),
    /// for [`follow`] to start its updater on. Blocks on nft.
    ///
    /// # Errors
    /// [`NftError`] if nft is missing or refused; the table in force stays.
    pub(crate) fn make(&self, config: &KernelConfig) -> Result<(), NftError> {
        let table = self.current.replace(self.guarded.ruleset(config))?;
        *self.made_lock() = Some((config.clone(), table));
        Ok(())
    }

    /// The table [`Setup::make`] made for `config`, if it is still the one in force.
    fn take_made(&self, config: &KernelConfig) -> Option<Arc<Table>> {
        let (made_for, table) = self.made_lock().take()?;
        let in_force = self
            .current
            .table()
            .is_some_and(|t| Arc::ptr_eq(&t, &table));
        (made_for == *config && in_force).then_some(table)
    }

    fn made_lock(&self) -> std::sync::MutexGuard<'_, Option<(KernelConfig, Arc<Table>)>> {
        // A panic while holding it left a whole value (each write is one assignment).
        self.made.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Starts an updater for `table` (the one in force in `current`).
#[must_use]
pub(crate) fn start_updater(
    config: KernelConfig,
    host: &Arc<dyn Host>,
    current: &Arc<Current>,
    table: Arc<Table>,
    stopped: &watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(Updater::new(config).run(
        Arc::clone(host),
        Arc::clone(current),
        table,
        stopped.clone(),
    ))
}

/// Follows the `[kernel]` section across reloads until `stopped`: `configs` yields each
/// section a reload put in force (`None`: removed). Starting from `running` (the section of
/// the table made at start and its updater, if any), a change replaces the table and its
/// updater, an added section makes them (or takes the table the reload made, see
/// [`Setup`]), a removed one deletes them. A table that cannot be made is logged and counted;
/// the one in force, if any, stays with its updater. A section added exports the kernel
/// metrics from then on.
pub(crate) async fn follow(
    host: Arc<dyn Host>,
    setup: Arc<Setup>,
    mut configs: watch::Receiver<Option<KernelConfig>>,
    running: Option<(KernelConfig, JoinHandle<()>)>,
    mut stopped: watch::Receiver<bool>,
) {
    let (mut in_force, mut running) = match running {
        Some((config, updater)) => (Some(config), Some(updater)),
        None => (None, None),
    };
    let metrics = host.metrics().clone();
    loop {
        tokio::select! {
            changed = configs.changed() => if changed.is_err() { return },
            _ = stopped.changed() => return,
        }
        if *stopped.borrow() {
            return;
        }
        let config = configs.borrow_and_update().clone();
        if config.is_some() {
            host.export_metrics();
        }
        if let Some(updater) = running.take() {
            updater.abort();
        }
        // A replaced or deleted table holds nothing; a new one is empty until its updater
        // commits.
        host.view().set([]);
        let current = Arc::clone(&setup.current);
        let from = Arc::clone(&current);
        let made = config.as_ref().and_then(|c| setup.take_made(c));
        let done = match (config.clone(), made) {
            (Some(_), Some(table)) => Ok(Ok(Some(table))),
            (None, _) => tokio::task::spawn_blocking(move || from.delete().map(|_| None)).await,
            (Some(config), None) => {
                let ruleset = setup.guarded.ruleset(&config);
                tokio::task::spawn_blocking(move || from.replace(ruleset).map(Some)).await
            }
        };
        match (done, config) {
            (Ok(Ok(Some(table))), Some(config)) => {
                tracing::info!(
                    table = %config.table,
                    action = config.action.as_str(),
                    "kernel fast path: reload put table `inet {}` in place",
                    config.table
                );
                metrics.active.set(1);
                in_force = Some(config.clone());
                running = Some(start_updater(config, &host, &current, table, &stopped));
            }
            (Ok(Ok(_)), _) => {
                in_force = None;
                host.wake().disarm();
                tracing::info!("kernel fast path: [kernel] removed by a reload, table deleted");
                metrics.active.set(0);
                for set in super::SETS {
                    metrics.set_elements(set, 0);
                }
            }
            (Ok(Err(err)), _) => {
                metrics.errors.inc();
                tracing::error!(%err, "kernel fast path: the reloaded [kernel] cannot be put in place; the table in force stays");
            }
            (Err(err), _) => {
                metrics.errors.inc();
                tracing::error!(%err, "kernel fast path: the reload's table task failed");
            }
        }
        // After a failure, the table in force (if any) goes on being updated.
        if running.is_none()
            && let (Some(table), Some(config)) = (current.table(), in_force.clone())
        {
            running = Some(start_updater(config, &host, &current, table, &stopped));
        }
        metrics.active.set(i64::from(current.table().is_some()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table as if made for `config` (no nft runs).
    fn made(config: &KernelConfig) -> Arc<Table> {
        Arc::new(Table::made(Guarded::default().ruleset(config)))
    }

    /// `table` in force.
    fn in_force(table: &Arc<Table>) -> Current {
        Current(Mutex::new(Some(Arc::clone(table))))
    }

    #[test]
    fn nothing_runs_on_a_table_no_longer_in_force() {
        let config = KernelConfig::default();
        let (old, new) = (made(&config), made(&config));
        // Not nft's language: were it run, nft would refuse it (or be missing).
        let text = "not a transaction";
        assert!(matches!(Current::new().apply(&old, text), Ok(false)));
        assert!(matches!(in_force(&new).apply(&old, text), Ok(false)));
        assert!(in_force(&new).apply(&new, text).is_err(), "it ran");
    }

    #[test]
    fn the_table_in_force_is_the_one_held_and_without_one_nothing_is_deleted() {
        let table = made(&KernelConfig::default());
        let held = in_force(&table).table();
        assert!(held.is_some_and(|t| Arc::ptr_eq(&t, &table)));
        let none = Current::new();
        assert!(none.table().is_none());
        assert!(matches!(none.delete(), Ok(None)));
    }

    #[test]
    fn a_reload_takes_the_table_made_for_its_section_only_while_it_is_in_force() {
        let config = KernelConfig::default();
        let table = made(&config);
        let setup = |current: Current| {
            let setup = Setup::new(Arc::new(current), Guarded::default());
            *setup.made_lock() = Some((config.clone(), Arc::clone(&table)));
            setup
        };
        let taking = setup(in_force(&table));
        let taken = taking.take_made(&config);
        assert!(taken.is_some_and(|t| Arc::ptr_eq(&t, &table)));
        assert!(taking.take_made(&config).is_none(), "taken twice");
        // Made for another section, or replaced since: the reload makes its own.
        let other = KernelConfig {
            table: "other".into(),
            ..KernelConfig::default()
        };
        assert!(setup(in_force(&table)).take_made(&other).is_none());
        let replaced = setup(in_force(&made(&config)));
        assert!(replaced.take_made(&config).is_none());
    }
}
