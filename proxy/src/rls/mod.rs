//! The rate-limit service Envoy calls (`[rls]`): `envoy.service.ratelimit.v3`'s
//! `ShouldRateLimit` over the filter's [`DescriptorPolicy`], configured by
//! envoyproxy/ratelimit's own YAML files (see `tollgate_filter::descriptors`).
//!
//! The part's narrow entry points: `load` (the YAML files of a section, for `tollgate
//! check`), `start` (bind and serve, for the server) and `Rls::prepare` / `Rls::commit`
//! (a reload: the files re-read, the counts kept). The gRPC answers are in `service.rs`.

mod callers;
mod metrics;
pub mod proto;
mod service;

pub(crate) use metrics::{RlsMetrics, code_label, outcome_label};

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tollgate_filter::{
    DescriptorConfig, DescriptorErrors, DescriptorPolicy, Refusal, Remote, Request,
    RequestExplanation, Response, SavedSketch,
};
use tollgate_sketch::{BuildError, Clock, MonotonicClock};

use crate::cluster::Cluster;
use crate::config::RlsConfig;

/// Why the descriptor files could not be made a policy.
#[derive(Debug)]
pub enum RlsError {
    /// A file could not be read.
    Read(PathBuf, std::io::Error),
    /// The files have errors, each `FILE:LINE:COL`.
    Invalid(DescriptorErrors),
    /// `[rls] memory` is too small for the sketches of the units the files use.
    Memory(BuildError),
    /// `[rls] listen` could not be bound (at start; the server names it as a listener).
    Bind(SocketAddr, std::io::Error),
}

impl std::fmt::Display for RlsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RlsError::Read(path, err) => write!(f, "{}: cannot read: {err}", path.display()),
            RlsError::Invalid(errors) => write!(f, "{errors}"),
            RlsError::Memory(err) => write!(f, "[rls] memory: {err}"),
            RlsError::Bind(address, err) => write!(f, "[rls] cannot listen on {address}: {err}"),
        }
    }
}

impl std::error::Error for RlsError {}

/// Reads and checks the descriptor files of `config`; a relative path is read from `dir`,
/// the config file's directory (from the working directory without one). Each file is named
/// by the path read, so its errors read `that/path.yaml:LINE:COL`.
///
/// # Errors
/// [`RlsError::Read`] for the first file that cannot be read, else every problem of every file.
pub(crate) fn load(config: &RlsConfig, dir: Option<&Path>) -> Result<DescriptorConfig, RlsError> {
    let mut files = Vec::with_capacity(config.configs.len());
    for path in &config.configs {
        let path = match dir {
            Some(dir) => dir.join(path),
            None => path.clone(),
        };
        let text = std::fs::read_to_string(&path).map_err(|e| RlsError::Read(path.clone(), e))?;
        files.push((path.display().to_string(), text));
    }
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    DescriptorConfig::parse(&files).map_err(RlsError::Invalid)
}

/// The service's state: the policy in force (swapped whole on reload) and its clock.
#[derive(Debug)]
pub(crate) struct Rls {
    policy: ArcSwap<DescriptorPolicy>,
    clock: MonotonicClock,
    /// Where relative file paths are read from (see [`load`]).
    dir: Option<PathBuf>,
}

/// A policy built from re-read files, waiting for the rest of a reload to succeed.
#[derive(Debug)]
pub(crate) struct Prepared(DescriptorPolicy);

impl Rls {
    /// The service of `config`, its files read now (relative ones from `dir`, see [`load`]),
    /// counting on `clock` (the filter's: the state file holds one tick, and a cluster's
    /// node reads the same clock) from the counts of `saved` (the state file's, see
    /// [`DescriptorPolicy::restore`]; none on a cold start); in `cluster`, if given, its
    /// descriptors' counts are shared as the addresses' are (and kept across reloads).
    ///
    /// # Errors
    /// [`RlsError`] if the files cannot be read or checked, or the memory is too small.
    pub(crate) fn new(
        config: &RlsConfig,
        dir: Option<&Path>,
        clock: MonotonicClock,
        saved: &[SavedSketch],
        cluster: Option<&Arc<Cluster>>,
    ) -> Result<Rls, RlsError> {
        let descriptors = load(config, dir)?;
        let mut policy =
            DescriptorPolicy::new(&descriptors, config.memory, None).map_err(RlsError::Memory)?;
        if !saved.is_empty() {
            let (restored, report) = policy
                .restore(saved, clock.now())
                .map_err(RlsError::Memory)?;
            tracing::info!(
                windows = report.windows,
                retired = report.retired,
                stale = report.stale,
                "descriptor counts restored from the state file"
            );
            for dropped in &report.dropped {
                tracing::warn!("state file: {dropped}; not restored");
            }
            policy = restored;
        }
        let policy = match cluster {
            Some(cluster) => policy.with_remote(Arc::clone(cluster) as Arc<dyn Remote>),
            None => policy,
        };
        Ok(Rls {
            policy: ArcSwap::from_pointee(policy),
            clock,
            dir: dir.map(Path::to_owned),
        })
    }

    /// The policy in force (for a save of its counts).
    #[must_use]
    pub(crate) fn policy(&self) -> Arc<DescriptorPolicy> {
        self.policy.load_full()
    }

    /// How many descriptor rules (nodes with a `rate_limit`) the files in force configure.
    #[must_use]
    pub(crate) fn rules(&self) -> usize {
        self.policy.load().matcher().rules().len()
    }

    /// Bytes of descriptor sketches held.
    #[must_use]
    pub(crate) fn memory_bytes(&self) -> usize {
        self.policy.load().memory_bytes()
    }

    /// Re-reads the files of `config` and builds their policy over the one in force: every
    /// rule whose path is unchanged keeps its counts (see [`DescriptorPolicy::new`]). Nothing
    /// changes until [`Rls::commit`].
    ///
    /// # Errors
    /// As [`Rls::new`]; the policy in force stays.
    pub(crate) fn prepare(&self, config: &RlsConfig) -> Result<Prepared, RlsError> {
        let descriptors = load(config, self.dir.as_deref())?;
        let current = self.policy.load();
        let previous = Some((&**current, self.clock.now()));
        DescriptorPolicy::new(&descriptors, config.memory, previous)
            .map(Prepared)
            .map_err(RlsError::Memory)
    }

    /// Puts a prepared policy in force.
    pub(crate) fn commit(&self, prepared: Prepared) {
        self.policy.store(Arc::new(prepared.0));
    }

    /// What deciding `request` now would answer, counting nothing (see
    /// [`DescriptorPolicy::explain`]), with the policy that read it.
    pub(crate) fn explain(
        &self,
        request: &Request,
    ) -> (Arc<DescriptorPolicy>, Result<RequestExplanation, Refusal>) {
        let policy = self.policy.load_full();
        let explained = policy.explain(request, self.clock.now());
        (policy, explained)
    }

    /// Decides `request` now (see [`DescriptorPolicy::decide`]), with the policy that decided.
    fn decide(&self, request: &Request) -> (Arc<DescriptorPolicy>, Result<Response, Refusal>) {
        let policy = self.policy.load_full();
        let decided = policy.decide(request, self.clock.now());
        (policy, decided)
    }
}

/// Whether a reload from `old` to `new` changes what only a restart applies: whether the
/// service runs, its address and its bounds on callers (the files and the memory reload).
#[must_use]
pub(crate) fn needs_restart(old: Option<&RlsConfig>, new: Option<&RlsConfig>) -> bool {
    let fixed = |c: Option<&RlsConfig>| {
        c.map(|c| {
            (
                c.listen,
                c.max_concurrent_requests,
                c.max_message_bytes,
                c.callers,
            )
        })
    };
    fixed(old) != fixed(new)
}

/// Builds the service of `config` (relative file paths read from `dir`) on `clock` from the
/// counts of `saved` (see [`Rls::new`]), its counts shared through `cluster` if given, binds
/// its address
/// and serves it until `stopped` says stop: the task, the bound address and the service's
/// state (for reloads).
///
/// # Errors
/// [`RlsError`] if the files cannot be read or checked (their errors located), or
/// [`RlsError::Bind`] if the address cannot be bound.
pub(crate) async fn start(
    config: &RlsConfig,
    dir: Option<&Path>,
    metrics: RlsMetrics,
    stopped: watch::Receiver<bool>,
    (clock, saved): (MonotonicClock, Vec<SavedSketch>),
    cluster: Option<&Arc<Cluster>>,
) -> Result<(JoinHandle<()>, SocketAddr, Arc<Rls>), RlsError> {
    let rls = Arc::new(Rls::new(config, dir, clock, &saved, cluster)?);
    let bind_error = |error| RlsError::Bind(config.listen, error);
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(bind_error)?;
    let address = listener.local_addr().map_err(bind_error)?;
    let task = tokio::spawn(service::serve(
        Arc::clone(&rls),
        listener,
        config.clone(),
        metrics,
        stopped,
    ));
    Ok((task, address, rls))
}
