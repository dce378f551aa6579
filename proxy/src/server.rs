//! A running proxy: its listeners, the admin endpoint, and the signals that steer it
//! (`tollgate run`). Tests and the demo start one in-process with [`Server::start`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cluster;
use crate::config::{Protocol, ProxyConfig, located};
use crate::kernel::{self, Current, Guarded};
use crate::listeners::Running;
use crate::listeners::descriptors::{self, Budget};
use crate::listeners::tcp::Frontend;
use crate::listeners::udp::UdpFrontend;
use crate::listeners::{socket, tcp, udp};
use crate::metrics::Metrics;
use crate::shared::Shared;
use crate::{admin, state};

/// Why the proxy could not start.
#[derive(Debug)]
pub enum StartError {
    /// The config file could not be read.
    Read(PathBuf, std::io::Error),
    /// The config file has errors.
    Invalid(String),
    /// The state could not be built (memory too small).
    State(Box<dyn std::error::Error + Send + Sync>),
    /// The admin's token could not be read.
    Token(String),
    /// `[kernel] required = true` and the kernel fast path could not be set up.
    Kernel(crate::kernel::NftError),
    /// `[xdp] required = true` and the XDP program could not be loaded or attached.
    Xdp(String),
    /// A listener could not be bound.
    Bind {
        /// The listener (or "admin").
        listener: String,
        /// Its address.
        address: SocketAddr,
        /// What the system said.
        error: std::io::Error,
    },
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Read(path, err) => write!(f, "{}: cannot read: {err}", path.display()),
            StartError::Invalid(errors) => write!(f, "{errors}"),
            StartError::State(err) => write!(f, "{err}"),
            StartError::Token(err) => write!(f, "{err}"),
            StartError::Kernel(err) => write!(
                f,
                "[kernel] required = true, and the kernel fast path cannot be set up: {err} \
                 (it needs nft and CAP_NET_ADMIN)"
            ),
            StartError::Xdp(err) => write!(
                f,
                "[xdp] required = true, and the XDP mode cannot start: {err} (it needs \
                 CAP_NET_ADMIN and CAP_BPF, and the program built in: clang at build time)"
            ),
            StartError::Bind {
                listener,
                address,
                error,
            } => write!(
                f,
                "listener `{listener}`: cannot listen on {address}: {error}"
            ),
        }
    }
}

impl std::error::Error for StartError {}

impl From<crate::rls::RlsError> for StartError {
    /// The service's address is named as a listener's; its files' errors as the config's.
    fn from(error: crate::rls::RlsError) -> StartError {
        match error {
            crate::rls::RlsError::Bind(address, error) => StartError::Bind {
                listener: "rls".to_owned(),
                address,
                error,
            },
            other => StartError::Invalid(other.to_string()),
        }
    }
}

/// A proxy serving its listeners.
#[derive(Debug)]
pub struct Server {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    tcp: Vec<(Arc<Frontend>, SocketAddr)>,
    udp: Vec<(Arc<UdpFrontend>, SocketAddr)>,
    admin: Option<SocketAddr>,
    rls: Option<SocketAddr>,
    tasks: Vec<JoinHandle<()>>,
    drain: Duration,
    kernel: Arc<Current>,
}

/// How `[xdp]` started (see `Server::say_fast_path`).
#[derive(Debug)]
enum XdpStart {
    /// No `[xdp]`.
    Off,
    /// The program is attached.
    Attached,
    /// It could not be (`required = false`): why.
    Failed(String),
}

impl Server {
    /// Binds every listener and the admin endpoint of `config` and starts serving. `path` is
    /// where reloads re-read the config (none for an in-memory config).
    ///
    /// # Errors
    /// [`StartError`] naming the listener that could not bind, or the state that could not be
    /// built. Nothing is left running.
    pub async fn start(config: ProxyConfig, path: Option<PathBuf>) -> Result<Server, StartError> {
        let listeners = config.listeners.clone();
        let admin = config.admin.clone();
        // Read before anything binds: a missing token stops the start.
        let access = match &admin {
            Some(admin) => Some(admin::Access::new(admin).map_err(StartError::Token)?),
            None => None,
        };
        let drain = config.settings.drain;
        let kernel = config.kernel.clone();
        let xdp = config.xdp.clone().map(|x| (x, config.policy.clone()));
        let rls = config.rls.clone();
        let dir = path.as_deref().and_then(Path::parent).map(Path::to_owned);
        let shared = Arc::new(shared_state(config, path).map_err(StartError::State)?);
        let budget = Budget::new(open_files(&shared), &listeners);
        if let (Some(excess), Some(advice)) = (budget.excess(&listeners), budget.advice(&listeners))
        {
            tracing::warn!(limit = budget.limit, excess, "{advice}");
        }
        let (stop, stopped) = watch::channel(false);
        let bind_error = |listener: &str, address, error| StartError::Bind {
            listener: listener.to_owned(),
            address,
            error,
        };
        let mut server = Server {
            shared: Arc::clone(&shared),
            stop,
            tcp: Vec::new(),
            udp: Vec::new(),
            admin: None,
            rls: None,
            tasks: Vec::new(),
            drain,
            kernel: Arc::new(Current::new()),
        };
        if shared.saver().is_some() {
            server.tasks.push(tokio::spawn(state::run(
                Arc::clone(&shared),
                stopped.clone(),
            )));
        }
        if let Some(node) = shared.cluster() {
            server.tasks.push(tokio::spawn(cluster::run(
                Arc::clone(node),
                stopped.clone(),
            )));
        }
        for config in listeners {
            match config.protocol {
                Protocol::Tcp => {
                    let listener = socket::tcp_listener(&config)
                        .map_err(|e| bind_error(&config.name, config.listen, e))?;
                    let address = listener
                        .get_ref()
                        .local_addr()
                        .map_err(|e| bind_error(&config.name, config.listen, e))?;
                    shared.running().add(Running {
                        name: config.name.clone(),
                        protocol: Protocol::Tcp,
                        address,
                    });
                    let frontend = Arc::new(Frontend::new(config, shared.gate()));
                    server.tasks.push(tokio::spawn(tcp::serve(
                        Arc::clone(shared.gate()),
                        Arc::clone(&frontend),
                        listener,
                        stopped.clone(),
                    )));
                    server.tcp.push((frontend, address));
                }
                Protocol::Udp => {
                    let socket = socket::udp_socket(&config)
                        .map_err(|e| bind_error(&config.name, config.listen, e))?;
                    let address = socket
                        .local_addr()
                        .map_err(|e| bind_error(&config.name, config.listen, e))?;
                    shared.running().add(Running {
                        name: config.name.clone(),
                        protocol: Protocol::Udp,
                        address,
                    });
                    let sessions = budget.sessions(&config);
                    let frontend =
                        Arc::new(UdpFrontend::new(config, address, shared.gate(), sessions));
                    server.tasks.push(tokio::spawn(udp::serve(
                        Arc::clone(shared.gate()),
                        Arc::clone(&frontend),
                        Arc::new(socket),
                        stopped.clone(),
                    )));
                    server.udp.push((frontend, address));
                }
            }
        }
        if let Some(config) = &rls {
            let metrics = shared.metrics().rls.clone();
            // Taken once, here: the service starts once per process.
            let warm = shared
                .take_rls_start()
                .unwrap_or_else(|| (tollgate_sketch::MonotonicClock::new(), Vec::new()));
            let cluster = shared.cluster();
            let started = crate::rls::start(
                config,
                dir.as_deref(),
                metrics,
                stopped.clone(),
                warm,
                cluster,
            )
            .await;
            match started {
                Ok((task, address, rls)) => {
                    shared.metrics().export_rls();
                    let _ = shared.reloader().rls().set(rls);
                    server.rls = Some(address);
                    server.tasks.push(task);
                }
                Err(err) => {
                    for task in &server.tasks {
                        task.abort();
                    }
                    return Err(err.into());
                }
            }
        }
        let started = server.start_xdp(xdp, &stopped).and_then(|xdp| {
            let nftables = server.start_kernel(kernel, &stopped)?;
            Ok((xdp, nftables))
        });
        match started {
            Ok((xdp, nftables)) => server.say_fast_path(&xdp, nftables),
            Err(err) => {
                for task in &server.tasks {
                    task.abort();
                }
                return Err(err);
            }
        }
        if let (Some(config), Some(access)) = (admin, access) {
            let address = config.listen;
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .map_err(|e| bind_error("admin", address, e))?;
            server.admin = Some(
                listener
                    .local_addr()
                    .map_err(|e| bind_error("admin", address, e))?,
            );
            server.tasks.push(tokio::spawn(admin::serve(
                Arc::clone(&shared),
                listener,
                config,
                access,
                stopped,
            )));
        }
        Ok(server)
    }

    /// Loads the XDP program with the policy's kernel rules, guards the bound listeners'
    /// ports (and `[xdp] ports`), attaches it to each interface and starts its rotation;
    /// without the program, the permission or an interface, says so in one line and goes on
    /// without it unless `required`. Once attached, the filter leaves the kernel's limits
    /// to it for the arrivals that came in through it (see [`crate::gate::ahead`]).
    fn start_xdp(
        &mut self,
        config: Option<(crate::config::XdpConfig, tollgate_filter::Config)>,
        stopped: &watch::Receiver<bool>,
    ) -> Result<XdpStart, StartError> {
        let Some((config, policy)) = config else {
            return Ok(XdpStart::Off);
        };
        let tcp = self
            .tcp
            .iter()
            .map(|(f, a)| (f.config.name.clone(), a.port()));
        let udp = self
            .udp
            .iter()
            .map(|(f, a)| (f.config.name.clone(), a.port()));
        let ports = config.guarded_ports(&tcp.chain(udp).collect::<Vec<_>>());
        let metrics = Arc::clone(&self.shared.metrics().xdp);
        self.shared.metrics().export_xdp();
        match crate::xdp::Attachment::start(&config, &policy, ports, Arc::clone(&metrics)) {
            Ok(attachment) => {
                tracing::info!("{}", attachment.describe());
                if attachment.rules().counted() == 0 {
                    tracing::warn!(
                        "XDP mode: no limit fits the kernel (a rule for every source and both \
                         protocols, counting events, at /32, /24, /128, /64 or /48 over the \
                         kernel's window): it counts nothing"
                    );
                }
                metrics.active.set(1);
                let attachment = Arc::new(attachment);
                self.tasks.push(tokio::spawn(crate::xdp::rotate(
                    Arc::clone(&attachment),
                    stopped.clone(),
                )));
                self.count_ahead(&attachment, &config, stopped);
                // The drop events, and the run-time lists into the kernel's allow tries.
                self.tasks.push(tokio::spawn(crate::xdp::follow(
                    Arc::clone(&attachment),
                    Arc::clone(&self.shared),
                    stopped.clone(),
                )));
                // Set once: a server is started once per shared state.
                let _ = self.shared.reloader().xdp().set(attachment);
                Ok(XdpStart::Attached)
            }
            Err(err) if config.required => {
                metrics.errors.inc();
                Err(StartError::Xdp(err.to_string()))
            }
            Err(crate::xdp::XdpError::Missing) => {
                metrics.errors.inc();
                tracing::error!(
                    "{}; running without it ([xdp] required = false)",
                    crate::xdp::XdpError::Missing
                );
                Ok(XdpStart::Failed(crate::xdp::XdpError::Missing.to_string()))
            }
            Err(err) => {
                metrics.errors.inc();
                tracing::error!(
                    "XDP mode unavailable ({err}): running without it, every attempt is \
                     counted by the proxy ([xdp] required = false)"
                );
                // Its first line: a verifier's refusal carries the whole log.
                let why = err.to_string();
                Ok(XdpStart::Failed(
                    why.lines().next().unwrap_or_default().to_owned(),
                ))
            }
        }
    }

    /// Leaves the limits `attachment`'s kernel rules take to the program for the arrivals
    /// that came in through it: marks them in the filter (reloads keep the mark) and starts
    /// the task that tells, from the host's interfaces, which arrivals did
    /// ([`crate::gate::ahead::follow`]). Guarded listeners: those whose port the program
    /// counts.
    fn count_ahead(
        &mut self,
        attachment: &crate::xdp::Attachment,
        config: &crate::config::XdpConfig,
        stopped: &watch::Receiver<bool>,
    ) {
        let gate = self.shared.gate();
        let ahead = attachment.rules().counted_ahead();
        if let Err(err) = gate.filter().count_ahead(Some(ahead), gate.now()) {
            tracing::error!(%err, "XDP mode: the proxy counts every arrival itself");
            return;
        }
        let ports = attachment.ports();
        let listeners = self
            .tcp
            .iter()
            .map(|(f, a)| (&f.config.name, a.port()))
            .chain(self.udp.iter().map(|(f, a)| (&f.config.name, a.port())))
            .filter(|(_, port)| ports.contains(port))
            .map(|(name, _)| name.clone())
            .collect();
        self.tasks.push(tokio::spawn(crate::gate::ahead::follow(
            Arc::clone(gate),
            config.interfaces.clone(),
            listeners,
            attachment.undropped(),
            stopped.clone(),
        )));
    }

    /// Says in one line at start which fast path stands in front of the proxy, when
    /// `[xdp]` or `[kernel]` is configured, and counts a fallback
    /// (`tollgate_xdp_fallback`): `[xdp]` that could not attach, with the nftables table
    /// (`nftables`) in place, which then keeps its whole role.
    fn say_fast_path(&self, xdp: &XdpStart, nftables: bool) {
        let fallback = matches!(xdp, XdpStart::Failed(_)) && nftables;
        self.shared.metrics().xdp.fallback.set(i64::from(fallback));
        match (xdp, nftables) {
            (XdpStart::Failed(why), true) => tracing::warn!(
                "fast path: nftables in place of XDP, which could not attach ({why}): the proxy \
                 counts every attempt and the nftables set holds its worst offenders"
            ),
            (XdpStart::Attached, true) => tracing::info!(
                "fast path: XDP, then nftables: the program drops over the kernel's limits at the \
                 driver; the nftables set holds the offenders the proxy counts (arrivals that did \
                 not cross XDP, limits the kernel does not take), after XDP"
            ),
            // Said by start_xdp's own line: the proxy counts every attempt.
            (XdpStart::Failed(_), false) | (XdpStart::Attached, false) | (XdpStart::Off, _) => {}
        }
    }

    /// Sets up the kernel fast path for the bound listeners and starts its updater; without
    /// nft or CAP_NET_ADMIN, says so and goes on without it unless `required`. Then follows
    /// `[kernel]` across reloads (see [`kernel::follow`]), with or without a section now.
    /// True when the table is in place.
    fn start_kernel(
        &mut self,
        config: Option<crate::config::KernelConfig>,
        stopped: &watch::Receiver<bool>,
    ) -> Result<bool, StartError> {
        let guarded = Guarded {
            tcp: self.tcp.iter().map(|(_, a)| *a).collect(),
            udp: self.udp.iter().map(|(_, a)| *a).collect(),
        };
        let metrics = &self.shared.metrics().kernel;
        let mut running = None;
        if let Some(config) = config {
            match self.kernel.replace(guarded.ruleset(&config)) {
                Ok(table) => {
                    tracing::info!(
                        table = %config.table,
                        interval = ?config.interval,
                        factor = config.factor,
                        action = config.action.as_str(),
                        max_elements = config.max_elements,
                        "kernel fast path: nftables table `inet {}` in place",
                        config.table
                    );
                    metrics.active.set(1);
                    let updater = kernel::start_updater(
                        config.clone(),
                        &(Arc::clone(&self.shared) as Arc<dyn kernel::Host>),
                        &self.kernel,
                        table,
                        stopped,
                    );
                    running = Some((config, updater));
                }
                Err(err) if config.required => {
                    metrics.errors.inc();
                    return Err(StartError::Kernel(err));
                }
                Err(err) => {
                    metrics.errors.inc();
                    tracing::error!(
                        %err,
                        "kernel fast path unavailable (it needs nft and CAP_NET_ADMIN): running \
                         without it, every offender is refused at accept ([kernel] required = false)"
                    );
                }
            }
        }
        let setup = Arc::new(kernel::Setup::new(Arc::clone(&self.kernel), guarded));
        // Set once: a server is started once per shared state.
        let _ = self
            .shared
            .reloader()
            .kernel_setup()
            .set(Arc::clone(&setup));
        let in_place = running.is_some();
        self.tasks.push(tokio::spawn(kernel::follow(
            Arc::clone(&self.shared) as Arc<dyn kernel::Host>,
            setup,
            self.shared.reloader().kernel().subscribe(),
            running,
            stopped.clone(),
        )));
        Ok(in_place)
    }

    /// The address listener `name` is bound to (a port 0 in the config is the real port here).
    #[must_use]
    pub fn local_addr(&self, name: &str) -> Option<SocketAddr> {
        let tcp = self.tcp.iter().map(|(f, a)| (&f.config.name, *a));
        let udp = self.udp.iter().map(|(f, a)| (&f.config.name, *a));
        tcp.chain(udp).find(|(n, _)| *n == name).map(|(_, a)| a)
    }

    /// The admin endpoint's address, if it is enabled.
    #[must_use]
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin
    }

    /// The rate-limit service's address (`[rls]`), if it runs.
    #[must_use]
    pub fn rls_addr(&self) -> Option<SocketAddr> {
        self.rls
    }

    /// The shared state (filter, metrics, offenders).
    #[must_use]
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// TCP connections open now, over all listeners.
    #[must_use]
    pub fn open_connections(&self) -> usize {
        self.tcp.iter().map(|(f, _)| f.open()).sum()
    }

    /// TCP rejections held now (`delay`, `close`, `reply`), over all listeners; they are
    /// counted in [`Server::open_connections`] too.
    #[must_use]
    pub fn held_connections(&self) -> usize {
        self.tcp.iter().map(|(f, _)| f.held()).sum()
    }

    /// UDP sessions held now, over all listeners.
    #[must_use]
    pub fn udp_sessions(&self) -> usize {
        self.udp.iter().map(|(f, _)| f.sessions()).sum()
    }

    /// Stops accepting, saves the state file (if `[proxy] state_file`; waiting at most
    /// `state::SAVE_BOUND`), then waits up to the configured drain time for open connections
    /// to finish. Returns how many were still open (they end when the runtime does).
    pub async fn shutdown(self) -> usize {
        let _ = self.stop.send(true);
        for task in &self.tasks {
            task.abort();
        }
        // Nothing is decided any more: the counts saved are the last ones.
        if state::save_bounded(&self.shared, true).await {
            if let Some(saver) = self.shared.saver() {
                tracing::info!(path = %saver.path().display(), "state saved");
            }
        }
        if let Some(xdp) = self.shared.reloader().xdp().get() {
            match xdp.detach() {
                Ok(interfaces) => {
                    tracing::info!("XDP mode: detached from {}", interfaces.join(", "))
                }
                Err(err) => tracing::warn!(%err, "XDP mode: cannot detach"),
            }
        }
        let current = Arc::clone(&self.kernel);
        match tokio::task::spawn_blocking(move || current.delete()).await {
            Ok(Ok(None)) => {}
            Ok(Ok(Some(name))) => tracing::info!(table = %name, "kernel fast path: table deleted"),
            Ok(Err(err)) => tracing::warn!(%err, "cannot delete the kernel table"),
            Err(err) => tracing::warn!(%err, "cannot delete the kernel table"),
        }
        self.shared.metrics().kernel.active.set(0);
        let deadline = tokio::time::Instant::now() + self.drain;
        while self.open_connections() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.open_connections()
    }

    /// Serves until SIGTERM or SIGINT, reloading on SIGHUP.
    ///
    /// The handlers are installed here, once the proxy already serves: a signal sent between
    /// the two gets its default action (SIGHUP ends the process). `tollgate run` installs them
    /// before it starts serving ([`Signals::install`], [`Server::run_until`]).
    ///
    /// # Errors
    /// If the signal handlers cannot be installed.
    #[cfg(unix)]
    pub async fn run_until_signalled(self) -> std::io::Result<usize> {
        Ok(self.run_until(Signals::install()?).await)
    }

    /// Serves until `signals` receives SIGTERM or SIGINT, reloading on SIGHUP; how many
    /// connections were cut at the end of the drain.
    #[cfg(unix)]
    pub async fn run_until(self, mut signals: Signals) -> usize {
        loop {
            tokio::select! {
                _ = signals.hangup.recv() => {
                    tracing::info!("SIGHUP: reloading");
                    let _ = self.shared.reloader().reload_off_runtime().await;
                }
                _ = signals.terminate.recv() => break,
                _ = signals.interrupt.recv() => break,
            }
        }
        tracing::info!(
            open = self.open_connections(),
            drain = ?self.drain,
            "stopping: no new connections; draining open ones"
        );
        let cut = self.shutdown().await;
        tracing::info!(cut, "stopped");
        cut
    }
}

/// The signals a proxy answers (SIGHUP, SIGTERM, SIGINT), caught from the moment they are
/// installed: one that arrives before [`Server::run_until`] listens waits for it, instead of
/// taking its default action (for SIGHUP, ending the process) while the listeners already
/// serve.
#[cfg(unix)]
#[derive(Debug)]
pub struct Signals {
    hangup: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

#[cfg(unix)]
impl Signals {
    /// Installs the handlers (on the current Tokio runtime).
    ///
    /// # Errors
    /// If a handler cannot be installed.
    pub fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            hangup: signal(SignalKind::hangup())?,
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }
}

/// The state the proxy's parts share for `config`, read from `path` if it came from a file:
/// its metrics, the cluster's secrets checked, then the state file read (`state::warm_start`)
/// and the filter, the gate and the reloader made from it.
///
/// # Errors
/// A cluster secret that cannot be read, or a policy or connection counts whose memory is too
/// small.
pub fn shared_state(
    config: ProxyConfig,
    path: Option<PathBuf>,
) -> Result<Shared, Box<dyn std::error::Error + Send + Sync>> {
    let metrics = Metrics::for_sections(config.cluster.is_some(), config.kernel.is_some());
    if let Some(cluster) = &config.cluster {
        cluster::Cluster::check_secret(cluster)?;
    }
    let warm = state::warm_start(&config, &metrics.state)?;
    Shared::new(config, path, metrics, warm)
}

/// Raises the open-file limit to the hard limit, logs and exports it; the limit in force.
fn open_files(shared: &Shared) -> u64 {
    let limit = match descriptors::raise() {
        Ok(raised) => {
            tracing::info!(
                before = raised.before,
                after = raised.after,
                hard = raised.hard,
                "open-file limit (RLIMIT_NOFILE) raised to the hard limit"
            );
            raised.after
        }
        Err(err) => {
            let limit = descriptors::limit();
            tracing::warn!(%err, limit, "cannot raise the open-file limit; keeping it");
            limit
        }
    };
    shared
        .metrics()
        .open_files_limit
        .set(i64::try_from(limit).unwrap_or(i64::MAX));
    limit
}

/// `tollgate run --config FILE`: serves until a signal says stop.
///
/// # Errors
/// [`StartError`] if the config is bad or a listener cannot bind; I/O errors from the runtime.
pub(crate) fn run(path: &Path) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(path).map_err(|e| StartError::Read(path.to_owned(), e))?;
    let config =
        ProxyConfig::parse(&text).map_err(|errors| StartError::Invalid(located(path, &errors)))?;
    let threads = match config.settings.threads {
        0 => std::thread::available_parallelism().map_or(1, usize::from),
        n => n,
    };
    let runtime = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()?
    };
    runtime.block_on(async {
        // Before anything serves: a test or a supervisor that sends SIGHUP as soon as the
        // admin endpoint answers must find it caught, not end the process.
        let signals = Signals::install()?;
        let server = Server::start(config, Some(path.to_owned())).await?;
        for (frontend, address) in &server.tcp {
            tracing::info!(listener = %frontend.config.name, %address, "listening (tcp)");
        }
        for (frontend, address) in &server.udp {
            let caps = frontend.caps();
            tracing::info!(
                listener = %frontend.config.name,
                %address,
                max_sessions = caps.total,
                per_source = caps.per_source,
                per_prefix = caps.per_prefix,
                "listening (udp)"
            );
        }
        if let Some(address) = server.admin {
            tracing::info!(%address, "admin endpoint");
        }
        if let Some(address) = server.rls {
            tracing::info!(%address, "rate-limit service (envoy.service.ratelimit.v3, HTTP/2)");
        }
        if let Some(node) = server.shared.cluster() {
            let config = node.config();
            tracing::info!(
                cluster = %config.name,
                node = %config.node,
                redis = ?config.redis,
                tls = config.tls.is_some(),
                sync = ?config.sync,
                "cluster node: limits are shared through Redis"
            );
        }
        server.run_until(signals).await;
        Ok::<_, Box<dyn std::error::Error>>(ExitCode::SUCCESS)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a paused clock: the drain's 20 s pass in no time when waited out, and the elapsed
    /// time is the proxy's own, not the machine's.
    #[tokio::test(start_paused = true)]
    async fn a_shutdown_with_nothing_open_does_not_wait_out_the_drain() {
        let config = ProxyConfig::parse(
            r#"
            [proxy]
            drain = "20s"
            [admin]
            enabled = false
            [[rule]]
            name = "r"
            limits = [{ rate = "100/10s" }]
            "#,
        )
        .expect("valid");
        let server = Server::start(config, None).await.expect("starts");
        let started = tokio::time::Instant::now();
        assert_eq!(server.shutdown().await, 0);
        // An operator's restart is not held up by a drain with nothing to drain.
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{:?}",
            started.elapsed()
        );
    }

    /// A relay still open when the drain ends is cut and counted, after the whole drain and
    /// no longer: a restart neither drops a live connection early nor waits forever for one.
    /// On a paused clock, as above.
    #[tokio::test(start_paused = true)]
    async fn a_shutdown_waits_out_the_drain_for_an_open_connection_then_counts_it_cut() {
        // An upstream that never accepts: the relay stays open until it is cut.
        let upstream = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
        let config = ProxyConfig::parse(&format!(
            r#"
            [proxy]
            drain = "20s"
            [admin]
            enabled = false
            [[listener]]
            name = "front"
            listen = "127.0.0.1:0"
            upstreams = ["{}"]
            idle_timeout = "1h"
            [[rule]]
            name = "r"
            limits = [{{ rate = "100/10s" }}]
            "#,
            upstream.local_addr().expect("bound"),
        ))
        .expect("valid");
        let server = Server::start(config, None).await.expect("starts");
        let front = server.local_addr("front").expect("bound");
        let _client = tokio::net::TcpStream::connect(front)
            .await
            .expect("accepted");
        for _ in 0..10_000 {
            if server.open_connections() == 1 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(server.open_connections(), 1, "the relay is open");
        let started = tokio::time::Instant::now();
        let cut = tokio::time::timeout(Duration::from_secs(60), server.shutdown())
            .await
            .expect("the drain ends");
        assert_eq!(cut, 1);
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_secs(20) && waited < Duration::from_secs(21),
            "{waited:?}"
        );
    }
}
