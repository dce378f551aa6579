//! Warm restart: the sketches' windows, the penalties in force and the run-time list entries
//! saved to a state file (`[proxy] state_file`) every `state_interval` and at SIGTERM, and
//! read back at start, so that a restart does not hand a flood a fresh budget.
//!
//! - **What is saved.** Every sketch of the policy ([`tollgate_filter::Policy::save`]): its
//!   previous and current window (counters and Bloom front) with its shape and hash seed,
//!   penalties included (they are marks in sketches of their own), and the sketches a reload
//!   retired but still reads. Then the run-time allow/deny entries, `(cidr, allow|deny, expiry
//!   in Unix ms, reason)`, in a section of their own, put back at start (those expired by
//!   then are left out) through [`crate::state::lists`]. With `[rls]`, the rate-limit
//!   service's sketches too, in a section of their own (format version 2), put back into its
//!   policy at start ([`tollgate_filter::DescriptorPolicy::restore`], the same migration as
//!   the address sketches'), so a key over its limit stays refused across a restart.
//! - **Time.** The file holds the proxy's tick and the wall-clock time of the save. A restart
//!   resumes the clock at the saved tick plus the wall-clock time since (zero if the wall
//!   clock went back), so every window ages by the time the proxy was down: a restart after
//!   N seconds reads what a proxy that never stopped would read N seconds on, and a restart
//!   after two periods reads nothing of that period.
//! - **Shape.** The windows go back into the sketches of the policy the config now gives, as
//!   a reload migrates them ([`tollgate_filter::Policy::restore`]): same period and memory
//!   share, restored in place; share changed, read alongside the new sketch for three
//!   windows; period gone, dropped (logged).
//! - **Integrity.** Written atomically (`file::write_atomic`: temporary file in the same
//!   directory, fsync, rename, fsync of the directory; mode 0600, since it holds the hash
//!   seeds), versioned and checksummed ([`mod@format`]). A file that is damaged, cut, of another
//!   version or not a state file at all is refused with its path and what is wrong, and the
//!   proxy starts cold; no input makes it panic (a fuzz target and a property test say so).
//! - **Bounds.** The file is the policy's sketch memory plus about a hundred bytes a sketch; a
//!   file larger than `read_limit` of the config's `[sketch] memory` is refused unread. A
//!   save copies the counters with relaxed loads while deciding goes on (no lock, no stall:
//!   each counter is a value it held during the save, every event counted before the save
//!   began is in it), on a blocking thread; at SIGTERM the proxy waits at most `SAVE_BOUND`
//!   for it, and a save that does not finish leaves the previous file whole.

pub(crate) mod file;
pub mod format;
pub mod lists;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tollgate_filter::{DescriptorPolicy, ListKind, Policy, PolicyError, Restored, SavedSketch};
use tollgate_sketch::{Clock, MonotonicClock, Tick};

pub use format::{FormatError, ListEntry, State, decode, encode};

use crate::config::ProxyConfig;
use lists::SavedEntry;

/// What a save reads and where it reports: the proxy's clock, policy and run-time lists, its
/// saver and the state file's metrics. The proxy's shared state is one; this module does not
/// name it, so the state file sits below what it saves.
pub(crate) trait Saving: Send + Sync + 'static {
    /// The saver, `None` without `[proxy] state_file`.
    fn saver(&self) -> Option<&Saver>;
    /// The filter's clock now.
    fn now(&self) -> Tick;
    /// The policy in force.
    fn policy(&self) -> Arc<Policy>;
    /// The run-time list entries in force now.
    fn saved_lists(&self) -> Vec<SavedEntry>;
    /// The rate-limit service's policy (`[rls]`), counted on the same clock; `None` without it.
    fn descriptors(&self) -> Option<Arc<DescriptorPolicy>>;
    /// The state file's metrics.
    fn metrics(&self) -> &StateMetrics;
}

/// The longest the proxy waits for a save at SIGTERM before it exits without it.
pub(crate) const SAVE_BOUND: Duration = Duration::from_secs(10);

/// The largest state file read for a config with `memory` bytes of `[sketch] memory`: four
/// times that plus 1 MiB. A file is about the saving policy's memory (retired sketches
/// included, up to twice `memory`); the rest is room for a config whose memory shrank.
#[must_use]
pub(crate) fn read_limit(memory: usize) -> u64 {
    (memory as u64).saturating_mul(4).saturating_add(1 << 20)
}

/// Why a state file could not be read or written.
#[derive(Debug)]
pub(crate) enum StateError {
    /// Reading failed.
    Read(PathBuf, std::io::Error),
    /// The file is larger than [`read_limit`].
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The bytes are not a state file this build reads.
    Format(PathBuf, FormatError),
    /// Writing failed (the previous file, if any, is whole).
    Write(PathBuf, std::io::Error),
    /// A save that did not wait found another one still writing (a slow or hung disk).
    Busy(PathBuf),
}

impl std::fmt::Display for StateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StateError::Read(path, err) => {
                write!(f, "state file {}: cannot read: {err}", path.display())
            }
            StateError::TooLarge { path, size, limit } => write!(
                f,
                "state file {}: {size} bytes, more than the {limit} this config reads (4 x \
                 [sketch] memory + 1 MiB)",
                path.display()
            ),
            StateError::Format(path, err) => write!(f, "state file {}: {err}", path.display()),
            StateError::Write(path, err) => {
                write!(f, "state file {}: cannot write: {err}", path.display())
            }
            StateError::Busy(path) => write!(
                f,
                "state file {}: the previous save is still writing; this one is skipped",
                path.display()
            ),
        }
    }
}

impl std::error::Error for StateError {}

/// A state file read at start, and the tick the clock resumes from.
#[derive(Debug)]
pub(crate) struct Resumed {
    /// What the file holds.
    pub(crate) state: State,
    /// The saved tick plus the wall-clock time since the save.
    pub(crate) tick: Tick,
    /// The wall-clock time since the save (zero if the wall clock went back).
    pub(crate) age: Duration,
}

/// Reads the state file at `path` for a config of `memory` bytes of sketch memory, at Unix
/// time `now_unix_ms`. `Ok(None)` if there is no file yet.
///
/// # Errors
/// [`StateError`] naming the file and what is wrong with it.
pub(crate) fn load(
    path: &Path,
    memory: usize,
    now_unix_ms: u64,
) -> Result<Option<Resumed>, StateError> {
    let limit = read_limit(memory);
    let bytes = match file::read_bounded(path, limit) {
        Ok(file::Found::Missing) => return Ok(None),
        Ok(file::Found::Bytes(bytes)) => bytes,
        Ok(file::Found::TooLarge { size }) => {
            return Err(StateError::TooLarge {
                path: path.to_owned(),
                size,
                limit,
            });
        }
        Err(err) => return Err(StateError::Read(path.to_owned(), err)),
    };
    let state = decode(&bytes).map_err(|err| StateError::Format(path.to_owned(), err))?;
    let age = Duration::from_millis(now_unix_ms.saturating_sub(state.saved_at_unix_ms));
    Ok(Some(Resumed {
        tick: state.tick + age,
        age,
        state,
    }))
}

pub(crate) use crate::unix_time::unix_ms;

/// What one save wrote.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    /// The file's size.
    pub(crate) bytes: usize,
    /// Sketches in it.
    pub(crate) sketches: usize,
    /// How long it took, copy, encoding and syncs included.
    pub(crate) took: Duration,
}

/// The state file of a running proxy: where it goes, and what it carries over.
#[derive(Debug)]
pub(crate) struct Saver {
    path: PathBuf,
    interval: Duration,
    /// Held for a whole save: the periodic save and the one at SIGTERM write one temporary
    /// file.
    writing: Mutex<()>,
}

impl Saver {
    /// The saver of `path`, every `interval`.
    #[must_use]
    pub(crate) fn new(path: PathBuf, interval: Duration) -> Saver {
        Saver {
            path,
            interval,
            writing: Mutex::new(()),
        }
    }

    /// The file.
    #[must_use]
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Saves `shared`'s state now, on this thread (it syncs the disk: call it off the
    /// runtime's workers), after the save under way if `wait`, else only if none is.
    ///
    /// # Errors
    /// [`StateError::Write`], the previous file whole; [`StateError::Busy`] if another save
    /// is under way and not `wait`.
    pub(crate) fn save(&self, shared: &dyn Saving, wait: bool) -> Result<Saved, StateError> {
        let _one_at_a_time = match self.writing.try_lock() {
            Ok(guard) => guard,
            Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) if wait => {
                self.writing.lock().unwrap_or_else(|e| e.into_inner())
            }
            Err(std::sync::TryLockError::WouldBlock) => {
                return Err(StateError::Busy(self.path.clone()));
            }
        };
        let started = Instant::now();
        let tick = shared.now();
        let saved_at_unix_ms = unix_ms();
        let lists: Vec<ListEntry> = shared
            .saved_lists()
            .into_iter()
            .map(ListEntry::from)
            .collect();
        let policy = shared.policy();
        let descriptors = shared.descriptors().map(|d| d.save(tick));
        let mut sketches = descriptors.as_ref().map_or(0, Vec::len);
        // Each sketch's copy is encoded and dropped before the next is made; the buffer is
        // sized for the whole policy (the file is at most that, plus a little).
        let bytes = format::encode_parts(
            saved_at_unix_ms,
            tick,
            policy.saved_sketches(tick).inspect(|_| sketches += 1),
            &lists,
            descriptors.as_deref(),
            policy.memory_bytes() + (64 << 10),
        );
        file::write_atomic(&self.path, &bytes)
            .map_err(|err| StateError::Write(self.path.clone(), err))?;
        Ok(Saved {
            bytes: bytes.len(),
            sketches,
            took: started.elapsed(),
        })
    }
}

/// What a start reads of the state file: the clock resumed at the saved tick (or a fresh
/// one), the policy with the saved windows put back (or a fresh one), and the run-time list
/// entries to put back once the proxy's state is built (with the file they came from).
#[derive(Debug)]
pub(crate) struct WarmStart {
    /// The filter's clock.
    pub(crate) clock: MonotonicClock,
    /// The policy of `config`, its sketches restored.
    pub(crate) policy: Policy,
    /// The saved run-time list entries and the file's path.
    pub(crate) lists: Option<(PathBuf, Vec<SavedEntry>)>,
    /// The rate-limit service's saved sketches, for its policy at start (on `clock`).
    pub(crate) descriptors: Vec<SavedSketch>,
}

/// Reads `config`'s state file, if it names one, into a [`WarmStart`]; counts the windows
/// restored in `metrics`. Anything wrong with the file is logged and the start is cold.
///
/// # Errors
/// When the policy cannot be built (its memory too small for its sketches).
pub(crate) fn warm_start(
    config: &ProxyConfig,
    metrics: &StateMetrics,
) -> Result<WarmStart, PolicyError> {
    // A state file that reads resumes the saved ticks: its windows age by the time the
    // proxy was down. Anything wrong with it is logged and the start is cold.
    let mut resumed = config.state.as_ref().and_then(|file| {
        // The descriptor sketches are at most `[rls] memory` (retired ones included, twice).
        let memory = config.policy.memory + config.rls.as_ref().map_or(0, |rls| rls.memory);
        match load(&file.path, memory, unix_ms()) {
            Ok(Some(resumed)) => Some(resumed),
            Ok(None) => {
                tracing::info!(
                    path = %file.path.display(),
                    "no state file yet: a cold start"
                );
                None
            }
            Err(err) => {
                tracing::error!("{err}; refused, starting cold");
                None
            }
        }
    });
    let clock = resumed
        .as_ref()
        .map_or_else(MonotonicClock::new, |r| MonotonicClock::starting_at(r.tick));
    let policy = match (&resumed, &config.state) {
        (Some(resumed), Some(file)) => {
            let (policy, report) =
                Policy::restore(config.policy.clone(), &resumed.state.sketches, clock.now())?;
            log_restored(&file.path, resumed, &report);
            metrics
                .restored_windows
                .set(i64::try_from(report.windows).unwrap_or(i64::MAX));
            policy
        }
        _ => Policy::compile(config.policy.clone(), None)?,
    };
    let descriptors = resumed
        .as_mut()
        .and_then(|resumed| resumed.state.descriptors.take())
        .unwrap_or_default();
    // The run-time list entries go back once the proxy's state is built (see
    // `Shared::restore_lists`).
    let restoring = match (resumed, &config.state) {
        (Some(resumed), Some(file)) => Some((
            file.path.clone(),
            resumed
                .state
                .lists
                .into_iter()
                .map(SavedEntry::from)
                .collect(),
        )),
        _ => None,
    };
    Ok(WarmStart {
        clock,
        policy,
        lists: restoring,
        descriptors,
    })
}

/// Saves `shared`'s state on a blocking thread, waiting at most [`SAVE_BOUND`]; logs and
/// counts the outcome. Whether it was saved. With `wait`, after a save under way (at
/// shutdown); without, skipped if one is (the periodic save: a hung disk then holds one
/// blocking thread, not one more per interval).
pub(crate) async fn save_bounded<S: Saving>(shared: &Arc<S>, wait: bool) -> bool {
    let Some(saver) = shared.saver() else {
        return false;
    };
    let path = saver.path().to_owned();
    let task = {
        let shared = Arc::clone(shared);
        tokio::task::spawn_blocking(move || match shared.saver() {
            Some(saver) => saver.save(&*shared, wait),
            // `shared.saver()` was `Some` above and never changes.
            None => Ok(Saved {
                bytes: 0,
                sketches: 0,
                took: Duration::ZERO,
            }),
        })
    };
    let metrics = shared.metrics();
    let error = match tokio::time::timeout(SAVE_BOUND, task).await {
        Ok(Ok(Ok(saved))) => {
            metrics.saved(true);
            metrics
                .bytes
                .set(i64::try_from(saved.bytes).unwrap_or(i64::MAX));
            tracing::debug!(
                path = %path.display(),
                bytes = saved.bytes,
                sketches = saved.sketches,
                took = ?saved.took,
                "state saved"
            );
            return true;
        }
        Ok(Ok(Err(err))) => err.to_string(),
        Ok(Err(err)) => format!("state file {}: the save failed: {err}", path.display()),
        Err(_) => format!(
            "state file {}: the save took longer than {SAVE_BOUND:?}; the previous file stays",
            path.display()
        ),
    };
    metrics.saved(false);
    tracing::error!("{error}");
    false
}

/// Saves every `[proxy] state_interval` until `stopped` says stop (the save at SIGTERM is
/// [`crate::server::Server::shutdown`]'s).
pub(crate) async fn run<S: Saving>(shared: Arc<S>, mut stopped: watch::Receiver<bool>) {
    let Some(interval) = shared.saver().map(|s| s.interval) else {
        return;
    };
    loop {
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            _ = stopped.changed() => return,
        }
        if *stopped.borrow() {
            return;
        }
        // One save at a time: the next interval starts when this one is done.
        let _ = save_bounded(&shared, false).await;
    }
}

impl From<SavedEntry> for ListEntry {
    fn from(entry: SavedEntry) -> ListEntry {
        ListEntry {
            cidr: entry.cidr,
            deny: entry.kind == ListKind::Deny,
            expires_unix_ms: entry.expires_unix_ms,
            reason: entry.reason,
        }
    }
}

impl From<ListEntry> for SavedEntry {
    fn from(entry: ListEntry) -> SavedEntry {
        SavedEntry {
            cidr: entry.cidr,
            kind: if entry.deny {
                ListKind::Deny
            } else {
                ListKind::Allow
            },
            expires_unix_ms: entry.expires_unix_ms,
            reason: entry.reason,
        }
    }
}

/// Logs what a restore put back and left out.
pub(crate) fn log_restored(path: &Path, resumed: &Resumed, report: &Restored) {
    tracing::info!(
        path = %path.display(),
        age = ?resumed.age,
        windows = report.windows,
        retired = report.retired,
        stale = report.stale,
        list_entries = resumed.state.lists.len(),
        "warm restart: state restored"
    );
    for dropped in &report.dropped {
        tracing::warn!(path = %path.display(), "warm restart: left out {dropped}");
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

/// The state file's metrics.
#[derive(Clone, Debug, Default)]
pub(crate) struct StateMetrics {
    saves: Family<ResultLabel, Counter>,
    /// The last state file's size.
    pub(crate) bytes: Gauge,
    /// Windows put back at start (0 for a cold start).
    pub(crate) restored_windows: Gauge,
}

impl StateMetrics {
    /// Counts a save by its result.
    pub(crate) fn saved(&self, ok: bool) {
        self.saves
            .get_or_create(&ResultLabel {
                result: if ok { "ok" } else { "error" },
            })
            .inc();
    }

    /// Registers them under `state_` in `registry`'s namespace.
    pub(crate) fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("state");
        r.register(
            "saves",
            "State file saves (every state_interval and at SIGTERM) by result",
            self.saves.clone(),
        );
        r.register(
            "file_bytes",
            "Size of the last state file saved",
            self.bytes.clone(),
        );
        r.register(
            "restored_windows",
            "Sketch windows restored from the state file at start (0: a cold start)",
            self.restored_windows.clone(),
        );
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;
    use std::os::unix::fs::PermissionsExt;
    use std::time::{SystemTime, UNIX_EPOCH};

    use tollgate_filter::{Config, Event, Policy, Source, Transport, Verdict};

    use super::*;
    use crate::shared::Shared;
    use crate::test_log::logged;

    /// A fresh directory, removed when dropped (not named after the process id: ids are
    /// reused, and a directory an earlier process left would hold its files).
    fn dir(name: &str) -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix(&format!("tollgate-state-{name}-"))
            .tempdir()
            .unwrap()
    }

    const MINUTE: &str =
        "[sketch]\nmemory = \"64KiB\"\n[[rule]]\nname = \"r\"\nlimits = [{ rate = \"3/60s\" }]\n";
    const SAVED_AT: u64 = 1_795_000_000_000;

    fn event() -> Event {
        Event {
            source: Source::from(Ipv4Addr::new(192, 0, 2, 1)),
            transport: Transport::Tcp,
            bytes: 60,
        }
    }

    /// A state file at `path` in which 192.0.2.1 flooded at tick 100 s, saved at
    /// [`SAVED_AT`].
    fn flooded(path: &Path) {
        let policy = Policy::compile(Config::parse(MINUTE).unwrap(), None).unwrap();
        let tick = Tick::from_nanos(100_000_000_000);
        for _ in 0..10 {
            let _ = policy.decide(&event(), tick);
        }
        let state = State {
            saved_at_unix_ms: SAVED_AT,
            tick,
            sketches: policy.save(tick),
            lists: Vec::new(),
            descriptors: None,
        };
        file::write_atomic(path, &encode(&state)).unwrap();
    }

    #[test]
    fn the_clock_resumes_by_the_wall_clock_time_down_and_nothing_stale_is_read() {
        let dir = dir("resume");
        let path = dir.path().join("state");
        flooded(&path);
        let restore = |down_ms: u64| {
            let resumed = load(&path, 64 << 10, SAVED_AT + down_ms).unwrap().unwrap();
            let config = Config::parse(MINUTE).unwrap();
            let (policy, report) =
                Policy::restore(config, &resumed.state.sketches, resumed.tick).unwrap();
            let verdict = policy.recheck(&event(), resumed.tick).verdict;
            (resumed.tick.as_nanos() / 1_000_000, report, verdict)
        };
        // Down 5 s: the clock reads 105 s, the flood is throttled.
        let (tick_ms, report, verdict) = restore(5_000);
        assert_eq!((tick_ms, report.windows), (105_000, 1));
        assert!(matches!(verdict, Verdict::Throttle(_)), "{verdict:?}");
        // Down two minutes: its window (60-120 s) is two windows back at 220 s, stale.
        let (tick_ms, report, verdict) = restore(120_000);
        assert_eq!((tick_ms, report.windows, report.stale), (220_000, 0, 1));
        assert_eq!(verdict, Verdict::Allow);
        // A wall clock that went back counts as no time down.
        let resumed = load(&path, 64 << 10, SAVED_AT - 1_000).unwrap().unwrap();
        assert_eq!(
            (resumed.tick.as_nanos(), resumed.age),
            (100_000_000_000, Duration::ZERO)
        );
    }

    #[test]
    fn a_missing_file_is_a_first_start_and_an_oversized_one_is_refused_unread() {
        let scratch = dir("bounds");
        let dir = scratch.path();
        assert!(
            load(&dir.join("none"), 64 << 10, SAVED_AT)
                .unwrap()
                .is_none()
        );
        let big = dir.join("big");
        std::fs::write(&big, vec![0u8; (1 << 20) + 1]).unwrap();
        let err = load(&big, 0, SAVED_AT).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "state file {}: 1048577 bytes, more than the 1048576 this config reads (4 x \
                 [sketch] memory + 1 MiB)",
                big.display()
            )
        );
    }

    #[test]
    fn a_save_that_does_not_wait_skips_while_another_writes() {
        let dir = dir("busy");
        let path = dir.path().join("state");
        let text = format!(
            "[proxy]\nstate_file = \"{}\"\n[admin]\nenabled = false\n{MINUTE}",
            path.display()
        );
        let config = crate::config::ProxyConfig::parse(&text).unwrap();
        let shared = crate::server::shared_state(config, None).unwrap();
        let saver = shared.saver().unwrap();
        let writing = saver.writing.lock().unwrap();
        let err = saver.save(&shared, false).unwrap_err();
        assert!(matches!(err, StateError::Busy(_)), "{err}");
        assert!(!path.exists());
        drop(writing);
        assert!(saver.save(&shared, false).is_ok());
        assert!(path.exists());
    }

    #[test]
    fn a_write_replaces_the_file_whole_and_private() {
        let dir = dir("atomic");
        let path = dir.path().join("state");
        file::write_atomic(&path, b"first").unwrap();
        file::write_atomic(&path, b"second").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        assert!(!file::temp_path(&path).exists());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // A directory that is not there: an error, nothing written.
        let nowhere = path.with_file_name("missing").join("state");
        assert!(file::write_atomic(&nowhere, b"x").is_err());
    }

    /// A proxy whose state file is `state` in a fresh directory (removed when dropped).
    fn saving(name: &str) -> (tempfile::TempDir, PathBuf, Shared) {
        let dir = dir(name);
        let path = dir.path().join("state");
        let text = format!(
            "[proxy]\nstate_file = \"{}\"\n[admin]\nenabled = false\n{MINUTE}",
            path.display()
        );
        let config = crate::config::ProxyConfig::parse(&text).unwrap();
        (
            dir,
            path,
            crate::server::shared_state(config, None).unwrap(),
        )
    }

    fn unix_ms_by_the_system_clock() -> u64 {
        let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        u64::try_from(since.as_millis()).unwrap()
    }

    #[test]
    fn a_save_says_what_it_wrote_and_the_file_says_when() {
        let (_dir, path, shared) = saving("what");
        let saver = shared.saver().unwrap();
        assert_eq!(saver.path(), path);
        let before = unix_ms_by_the_system_clock();
        let saved = saver.save(&shared, false).unwrap();
        let after = unix_ms_by_the_system_clock();
        let bytes = std::fs::read(&path).unwrap();
        let state = decode(&bytes).unwrap();
        assert!(
            (before..=after).contains(&state.saved_at_unix_ms),
            "saved at {} ms, between {before} and {after}",
            state.saved_at_unix_ms
        );
        assert!(!state.sketches.is_empty());
        assert_eq!(
            (saved.bytes, saved.sketches),
            (bytes.len(), state.sketches.len())
        );
    }

    #[test]
    fn a_save_that_waits_writes_once_the_one_under_way_is_done() {
        let (_dir, path, shared) = saving("wait");
        let saver = shared.saver().unwrap();
        std::thread::scope(|scope| {
            let (held, holding) = std::sync::mpsc::channel();
            scope.spawn(move || {
                let _writing = saver.writing.lock().unwrap();
                held.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(100));
            });
            holding.recv().unwrap();
            let saved = saver.save(&shared, true);
            assert!(saved.is_ok(), "{saved:?}");
        });
        assert!(path.exists());
    }

    #[tokio::test]
    async fn a_bounded_save_is_counted_and_a_proxy_without_a_state_file_saves_nothing() {
        let (_dir, path, shared) = saving("bounded");
        let shared = Arc::new(shared);
        assert!(save_bounded(&shared, true).await);
        assert!(path.exists());
        let metrics = shared
            .metrics()
            .render(&shared.filter().policy(), shared.now());
        assert!(
            metrics.contains("tollgate_state_saves_total{result=\"ok\"} 1\n"),
            "{metrics}"
        );
        let text = format!("[admin]\nenabled = false\n{MINUTE}");
        let config = crate::config::ProxyConfig::parse(&text).unwrap();
        let without = Arc::new(crate::server::shared_state(config, None).unwrap());
        assert!(!save_bounded(&without, true).await);
    }

    #[test]
    fn a_list_entry_keeps_its_list_in_the_files_form() {
        for kind in [ListKind::Allow, ListKind::Deny] {
            let saved = SavedEntry {
                cidr: tollgate_filter::Cidr::parse("192.0.2.0/24").unwrap(),
                kind,
                expires_unix_ms: 1_795_000_600_000,
                reason: "r".into(),
            };
            let entry = ListEntry::from(saved.clone());
            assert_eq!(entry.deny, kind == ListKind::Deny);
            assert_eq!(SavedEntry::from(entry), saved);
        }
    }

    #[test]
    fn a_restore_tells_the_operator_what_it_put_back_and_what_it_left_out() {
        let dir = dir("logged");
        let path = dir.path().join("state");
        flooded(&path);
        let resumed = load(&path, 64 << 10, SAVED_AT + 5_000).unwrap().unwrap();
        let report = Restored {
            windows: 1,
            dropped: vec!["a sketch of period 1m: no limit has that period now".into()],
            ..Restored::default()
        };
        let log = logged(|| log_restored(&path, &resumed, &report));
        assert!(log.contains("warm restart: state restored"), "{log}");
        assert!(
            log.contains("warm restart: left out a sketch of period 1m"),
            "{log}"
        );
    }
}
