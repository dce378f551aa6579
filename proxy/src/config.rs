//! The proxy's part of the config file: `[proxy]`, `[admin]`, `[[listener]]` and `[cluster]`, read from the
//! same file as the policy (`[sketch]`, `[lists]`, `[[rule]]`, read by `tollgate-filter`). One
//! file describes one deployment; both halves are checked before anything runs, and every error
//! is located by line and column.
//!
//! Listener and admin settings take effect at start; a reload (SIGHUP or the admin's
//! `/reload`) applies the policy half and keeps the rest (a changed listener needs a restart,
//! and the reload says so in its log).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use serde::de::IgnoredAny;
use tollgate_filter::{
    Checker, Cidr, Config, ConfigError, ConfigErrors, DurationText, parse_duration, parse_size,
};
use toml::Spanned;

use crate::gate::connections::MIN_CONNECTION_MEMORY;

/// Everything one config file says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyConfig {
    /// Process-wide settings (`[proxy]`).
    pub settings: Settings,
    /// The admin endpoint (`[admin]`); `None` when disabled.
    pub admin: Option<Admin>,
    /// The listeners (`[[listener]]`), in file order.
    pub listeners: Vec<Listener>,
    /// Limits shared with other proxies through Redis (`[cluster]`); `None` without the
    /// section: no cluster, nothing changes and nothing is spent.
    pub cluster: Option<ClusterConfig>,
    /// The kernel fast path (`[kernel]`); `None` without the section: nothing is asked of
    /// the kernel.
    pub kernel: Option<KernelConfig>,
    /// The warm-restart state file (`[proxy] state_file`); `None` without it: nothing is
    /// saved, every start is cold.
    pub state: Option<StateFile>,
    /// The policy (`[sketch]`, `[lists]`, `[[rule]]`).
    pub policy: Config,
}

/// `[proxy] state_file` and `state_interval`: where the counts, penalties and run-time list
/// entries are saved (every interval and at SIGTERM) and read back at start (see
/// [`crate::state`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateFile {
    /// The file.
    pub path: PathBuf,
    /// How often it is written while running.
    pub interval: Duration,
}

/// The default `[proxy] state_interval`.
pub const DEFAULT_STATE_INTERVAL: Duration = Duration::from_secs(30);

/// `[proxy]`: settings for the whole process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Worker threads; 0 means one per core.
    pub threads: usize,
    /// On SIGTERM, how long open connections may take to finish before they are cut.
    pub drain: Duration,
    /// Memory for the per-source open-connection counts (all listeners together).
    pub connection_memory: usize,
    /// At most this many rejection log lines per second; the rest are counted and summarised.
    pub log_rejections: u32,
    /// How long a `delay` action holds a connection when its rule names no bound.
    pub delay: Duration,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            threads: 0,
            drain: Duration::from_secs(10),
            connection_memory: 1 << 20,
            log_rejections: 10,
            delay: Duration::from_secs(5),
        }
    }
}

/// The admin endpoint's default address: loopback only, so metrics and `/reload` are not
/// offered to the network unless the operator says so.
pub const DEFAULT_ADMIN: &str = "127.0.0.1:9090";

/// `[admin]`: the admin endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admin {
    /// Where it listens.
    pub listen: SocketAddr,
    /// Where its bearer token is read at start; `None`: no token, so no endpoint that changes
    /// state, and loopback only.
    pub token: Option<TokenSource>,
    /// How long a client may take to send a request's headers.
    pub header_timeout: Duration,
    /// A connection that moves no byte either way for this long is closed.
    pub idle_timeout: Duration,
    /// Admin connections open at once at most; more are reset at accept.
    pub max_connections: usize,
}

impl Admin {
    /// The endpoint at `listen` with the default timeouts and cap, and no token.
    #[must_use]
    pub fn at(listen: SocketAddr) -> Admin {
        Admin {
            listen,
            token: None,
            header_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(30),
            max_connections: 64,
        }
    }
}

/// Where the admin's bearer token comes from (never the config text itself).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenSource {
    /// A file holding the token (surrounding whitespace is ignored).
    File(std::path::PathBuf),
    /// An environment variable holding the token.
    Env(String),
}

/// `[cluster]`: limits shared with other proxies through Redis (see [`crate::cluster`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterConfig {
    /// The Redis servers, in order of preference: the sync task talks to one at a time and
    /// moves to the next when it fails (a primary, then the replicas a failover may promote).
    /// With `sentinel`, the fallback when no sentinel answers (may then be empty).
    pub redis: Vec<SocketAddr>,
    /// Sentinel discovery: the master's address is asked of these sentinels at each
    /// connection.
    pub sentinel: Option<Sentinel>,
    /// This node's name, for logs and Redis' client list (default: the host name).
    pub node: String,
    /// How the nodes log in to Redis (`AUTH`); `None`: no password.
    pub auth: Option<RedisAuth>,
    /// The cluster's name, required (no default two deployments sharing one Redis would both
    /// use): its keys' namespace, so several clusters can share one Redis.
    pub name: String,
    /// How often the suspects' counts are pushed and the cluster's read back.
    pub sync: Duration,
    /// How long a connection attempt or a sync round may take before Redis counts as away.
    pub timeout: Duration,
    /// How far this node's window edges may be from Redis's clock (half a `TIME` round trip
    /// plus the correction a reading makes) before it refuses to share counts.
    pub max_clock_error: Duration,
    /// The fraction of a limit a key's local estimate must reach to be shared.
    pub threshold: Threshold,
    /// What the node does while Redis is away.
    pub on_failure: OnFailure,
    /// Slots in the suspects table (each of its two), a power of two: at most this many keys
    /// are shared per sync interval; more are counted as overflow and stay local.
    pub suspects: usize,
    /// TLS to Redis and the sentinels (`tls = true`); `None`: plain TCP.
    pub tls: Option<RedisTls>,
    /// The host name each `redis` and `sentinels` address was written with, when it was a
    /// name and not an IP address: TLS verifies it, and the config is printed back with it.
    pub hosts: BTreeMap<SocketAddr, String>,
}

impl ClusterConfig {
    /// The name a certificate of the server at `address` (one of `redis` or `sentinels`) must
    /// carry: `tls_server_name` if given, else the host the address was written with (a DNS
    /// name, or the IP address, which then must be an IP address SAN).
    #[must_use]
    pub fn server_name(&self, address: SocketAddr) -> String {
        match self.tls.as_ref().and_then(|t| t.server_name.as_ref()) {
            Some(name) => name.clone(),
            None => self
                .hosts
                .get(&address)
                .cloned()
                .unwrap_or_else(|| address.ip().to_string()),
        }
    }

    /// The address as written (its host name if it had one), for printing back.
    fn written(&self, address: SocketAddr) -> String {
        match self.hosts.get(&address) {
            Some(host) => format!("{host}:{}", address.port()),
            None => address.to_string(),
        }
    }
}

/// `[cluster]`'s TLS: every connection to Redis and to the sentinels is TLS (rustls, TLS 1.2
/// or 1.3), and the server's certificate is always verified: its chain up to `ca_file` (or the
/// system's roots) and its name. There is no option to skip either.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisTls {
    /// A PEM file of the CA certificates the servers' certificates must chain to, read at
    /// each connection; `None`: the system's roots (the OpenSSL store: `/etc/ssl/certs`, or
    /// `SSL_CERT_FILE` / `SSL_CERT_DIR`).
    pub ca_file: Option<PathBuf>,
    /// This node's certificate, for servers that require one (`tls-auth-clients yes`).
    pub client: Option<ClientCertificate>,
    /// The name every server's certificate must carry (`tls_server_name`); `None`: the host
    /// of the address connected to.
    pub server_name: Option<String>,
}

/// A node's TLS client certificate: both files PEM, read at each connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientCertificate {
    /// The certificate chain, the node's own certificate first.
    pub cert: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// Where the sentinels are and which master they watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sentinel {
    /// The master's name (`sentinel monitor NAME ...`).
    pub master: String,
    /// The sentinels, asked in turn.
    pub sentinels: Vec<SocketAddr>,
}

/// How a cluster node logs in to Redis: `AUTH user password` (or `AUTH password` for the
/// default user), the password read from a file or the environment at each connection, never
/// from the config text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisAuth {
    /// The ACL user; `None`: the default user (`requirepass`).
    pub user: Option<String>,
    /// Where the password is.
    pub password: TokenSource,
}

/// `[kernel]`: the heaviest offenders dropped by nftables before they reach accept (see
/// [`crate::kernel`]).
#[derive(Clone, Debug, PartialEq)]
pub struct KernelConfig {
    /// The nftables table the proxy owns (family `inet`); one of that name is replaced at
    /// start and deleted at stop.
    pub table: String,
    /// How often the sets are updated (one transaction per update, only when something is new).
    pub interval: Duration,
    /// A source goes into the kernel once its estimate reaches `factor` times a limit.
    pub factor: f64,
    /// What the kernel does with a new connection from a listed source.
    pub action: KernelAction,
    /// Elements held at most in the two sets together; the heaviest go in first.
    pub max_elements: usize,
    /// Refuse to start when the table cannot be set up (no nft, no CAP_NET_ADMIN); otherwise
    /// the proxy runs without the fast path and says so.
    pub required: bool,
}

// Never NaN: `factor` is checked to be finite and at least 1.
impl Eq for KernelConfig {}

/// The default `[kernel] table`.
pub const DEFAULT_KERNEL_TABLE: &str = "tollgate";

impl Default for KernelConfig {
    fn default() -> KernelConfig {
        KernelConfig {
            table: DEFAULT_KERNEL_TABLE.to_owned(),
            interval: Duration::from_millis(100),
            factor: 1.0,
            action: KernelAction::Drop,
            max_elements: 65_536,
            required: false,
        }
    }
}

/// What the kernel does with a new TCP connection from a listed source (UDP datagrams from
/// one are always dropped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelAction {
    /// Drop the SYN: the client's connect times out.
    Drop,
    /// Answer the SYN with a TCP reset: the client's connect is refused at once.
    Reset,
}

impl KernelAction {
    /// The config file's word for it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            KernelAction::Drop => "drop",
            KernelAction::Reset => "reset",
        }
    }
}

/// A fraction of a limit, in `(0, 1]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Threshold(f64);

// Never NaN: `Threshold::new` accepts finite values only.
impl Eq for Threshold {}

impl Threshold {
    /// `fraction` if it lies in `(0, 1]`.
    ///
    /// # Errors
    /// A message saying the range.
    pub fn new(fraction: f64) -> Result<Threshold, String> {
        if fraction.is_finite() && fraction > 0.0 && fraction <= 1.0 {
            Ok(Threshold(fraction))
        } else {
            Err(format!(
                "threshold {fraction} is not a fraction of a limit: use a number above 0 and at most 1"
            ))
        }
    }

    /// The fraction.
    #[must_use]
    pub fn get(self) -> f64 {
        self.0
    }
}

/// What a node does while Redis is away.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnFailure {
    /// Keep limiting with the local counts alone (each node then admits up to a whole limit).
    #[default]
    Local,
}

impl OnFailure {
    /// The config file's word for it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            OnFailure::Local => "local",
        }
    }
}

/// What a listener carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// Stream connections, each decided on at accept.
    Tcp,
    /// Datagrams, each decided on as it arrives.
    Udp,
}

impl Protocol {
    /// The config file's word for it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        }
    }
}

/// Which PROXY protocol header the proxy writes to its upstreams.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SendProxy {
    /// None: upstreams see the proxy's address.
    #[default]
    None,
    /// The text header.
    V1,
    /// The binary header.
    V2,
}

impl SendProxy {
    /// The config file's word for it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            SendProxy::None => "none",
            SendProxy::V1 => "v1",
            SendProxy::V2 => "v2",
        }
    }
}

/// One `[[listener]]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listener {
    /// Unique name, used in metrics and logs.
    pub name: String,
    /// TCP or UDP.
    pub protocol: Protocol,
    /// The address to listen on.
    pub listen: SocketAddr,
    /// Where allowed traffic goes, tried in turn.
    pub upstreams: Vec<SocketAddr>,
    /// How long one connection attempt to an upstream may take.
    pub connect_timeout: Duration,
    /// Further attempts after the first fails, each on the next upstream.
    pub retries: u32,
    /// The wait before the first retry; it doubles for each further one, with jitter.
    pub backoff: Duration,
    /// The accept queue length asked of the kernel.
    pub backlog: u32,
    /// Set SO_REUSEPORT, so several processes can share the port.
    pub reuse_port: bool,
    /// Forwarded connections (TCP) this listener holds at most; more are reset at accept.
    /// Held rejections have a budget of their own (`max_held`).
    pub max_connections: usize,
    /// Forwarded connections one source (IPv4 address, IPv6 /64) may hold open. Default: a
    /// sixteenth of `max_connections`.
    pub max_connections_per_source: u32,
    /// Forwarded connections one network (IPv4 /24, IPv6 /48) may hold open. Default: a quarter
    /// of `max_connections`, so one network never takes the listener.
    pub max_connections_per_prefix: u32,
    /// Held rejections (`delay`, `close` lingering, `reply`) this listener keeps at most, apart
    /// from `max_connections`; one more is reset (0: every rejection is a reset).
    pub max_held: usize,
    /// Held rejections one source (IPv4 address, IPv6 /64) may have at once.
    pub max_held_per_source: u32,
    /// Held rejections one network (IPv4 /24, IPv6 /48) may have at once.
    pub max_held_per_prefix: u32,
    /// Connections from trusted peers still waiting for their PROXY header, at most; apart
    /// from `max_connections`, so a peer trickling headers cannot take the forwarding slots;
    /// one more is reset (`header_waits_full`). Default: a quarter of `max_connections`, at
    /// least 64. One trusted peer may hold a quarter of them (at least 64, or all when fewer).
    pub max_header_waits: usize,
    /// A relayed connection that moves no byte either way for this long is closed (also the
    /// bound on waiting for the first byte of either side).
    pub idle_timeout: Duration,
    /// Peers whose PROXY headers are believed (then the header's source is the key); a
    /// connection from one of them must start with a header.
    pub trusted_proxies: Vec<Cidr>,
    /// How long a trusted peer may take to send its header.
    pub proxy_header_timeout: Duration,
    /// The header written to upstreams.
    pub send_proxy: SendProxy,
    /// UDP: how long a client session lives without traffic.
    pub session_timeout: Duration,
    /// UDP: client sessions held at most; new clients are refused while it is full. `None`:
    /// derived at start from the open-file limit (see [`crate::listeners::descriptors`]).
    pub max_sessions: Option<usize>,
    /// UDP: sessions one source (IPv4 address, IPv6 /64) may hold.
    pub max_sessions_per_source: u32,
    /// UDP: sessions one prefix (IPv4 /24, IPv6 /48) may hold.
    pub max_sessions_per_prefix: u32,
}

/// UDP: the default cap of sessions per source (IPv4 address, IPv6 /64).
pub const DEFAULT_SESSIONS_PER_SOURCE: u32 = 64;
/// UDP: the default cap of sessions per prefix (IPv4 /24, IPv6 /48).
pub const DEFAULT_SESSIONS_PER_PREFIX: u32 = 256;

#[derive(Deserialize)]
struct RawFile {
    #[serde(default)]
    proxy: RawSettings,
    admin: Option<RawAdmin>,
    #[serde(default)]
    listener: Vec<RawListener>,
    cluster: Option<RawCluster>,
    kernel: Option<RawKernel>,
    // The policy's sections: checked by `Config::parse`.
    #[serde(default, rename = "sketch")]
    _sketch: Option<serde::de::IgnoredAny>,
    #[serde(default, rename = "lists")]
    _lists: Option<serde::de::IgnoredAny>,
    #[serde(default, rename = "rule")]
    _rule: Option<serde::de::IgnoredAny>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSettings {
    threads: Option<usize>,
    drain: Option<Spanned<String>>,
    connection_memory: Option<Spanned<String>>,
    log_rejections: Option<u32>,
    delay: Option<Spanned<String>>,
    state_file: Option<Spanned<String>>,
    state_interval: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAdmin {
    listen: Option<Spanned<String>>,
    #[serde(default = "yes")]
    enabled: bool,
    token_file: Option<Spanned<String>>,
    token_env: Option<Spanned<String>>,
    header_timeout: Option<Spanned<String>>,
    idle_timeout: Option<Spanned<String>>,
    max_connections: Option<Spanned<usize>>,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawListener {
    name: Spanned<String>,
    #[serde(default)]
    protocol: Option<Spanned<String>>,
    listen: Spanned<String>,
    upstreams: Spanned<Vec<Spanned<String>>>,
    connect_timeout: Option<Spanned<String>>,
    retries: Option<u32>,
    backoff: Option<Spanned<String>>,
    backlog: Option<u32>,
    #[serde(default)]
    reuse_port: bool,
    max_connections: Option<usize>,
    max_connections_per_source: Option<Spanned<u32>>,
    max_connections_per_prefix: Option<Spanned<u32>>,
    max_held: Option<usize>,
    max_held_per_source: Option<u32>,
    max_held_per_prefix: Option<u32>,
    max_header_waits: Option<usize>,
    idle_timeout: Option<Spanned<String>>,
    #[serde(default)]
    trusted_proxies: Vec<Spanned<String>>,
    proxy_header_timeout: Option<Spanned<String>>,
    #[serde(default)]
    send_proxy: SendProxy,
    session_timeout: Option<Spanned<String>>,
    max_sessions: Option<Spanned<usize>>,
    max_sessions_per_source: Option<Spanned<u32>>,
    max_sessions_per_prefix: Option<Spanned<u32>>,
}

/// The fields of a `[[listener]]` that only one transport honours, with their places: read
/// apart from [`RawListener`] so that a listener of the other transport naming one is refused at
/// the field.
#[derive(Deserialize)]
struct RawTransportOnly {
    protocol: Option<String>,
    backlog: Option<Spanned<IgnoredAny>>,
    connect_timeout: Option<Spanned<IgnoredAny>>,
    retries: Option<Spanned<IgnoredAny>>,
    backoff: Option<Spanned<IgnoredAny>>,
    max_connections: Option<Spanned<IgnoredAny>>,
    max_connections_per_source: Option<Spanned<IgnoredAny>>,
    max_connections_per_prefix: Option<Spanned<IgnoredAny>>,
    max_held: Option<Spanned<IgnoredAny>>,
    max_held_per_source: Option<Spanned<IgnoredAny>>,
    max_held_per_prefix: Option<Spanned<IgnoredAny>>,
    max_header_waits: Option<Spanned<IgnoredAny>>,
    idle_timeout: Option<Spanned<IgnoredAny>>,
    trusted_proxies: Option<Spanned<Vec<IgnoredAny>>>,
    proxy_header_timeout: Option<Spanned<IgnoredAny>>,
    send_proxy: Option<Spanned<SendProxy>>,
    session_timeout: Option<Spanned<IgnoredAny>>,
    max_sessions: Option<Spanned<IgnoredAny>>,
    max_sessions_per_source: Option<Spanned<IgnoredAny>>,
    max_sessions_per_prefix: Option<Spanned<IgnoredAny>>,
}

#[derive(Deserialize)]
struct RawTransportOnlyFile {
    #[serde(default)]
    listener: Vec<RawTransportOnly>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    redis: Option<Spanned<Vec<Spanned<String>>>>,
    sentinels: Option<Spanned<Vec<Spanned<String>>>>,
    master: Option<Spanned<String>>,
    node: Option<Spanned<String>>,
    name: Option<Spanned<String>>,
    user: Option<Spanned<String>>,
    /// Refused with a message: a password never goes into the config text.
    password: Option<Spanned<toml::Value>>,
    password_file: Option<Spanned<String>>,
    password_env: Option<Spanned<String>>,
    sync: Option<Spanned<String>>,
    timeout: Option<Spanned<String>>,
    max_clock_error: Option<Spanned<String>>,
    threshold: Option<Spanned<f64>>,
    on_failure: Option<Spanned<String>>,
    suspects: Option<Spanned<usize>>,
    tls: Option<Spanned<bool>>,
    ca_file: Option<Spanned<String>>,
    client_cert: Option<Spanned<String>>,
    client_key: Option<Spanned<String>>,
    tls_server_name: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKernel {
    table: Option<Spanned<String>>,
    interval: Option<Spanned<String>>,
    factor: Option<Spanned<f64>>,
    action: Option<Spanned<String>>,
    max_elements: Option<Spanned<usize>>,
    #[serde(default)]
    required: bool,
}

/// The filter's located-error checker, with what the proxy's sections need besides.
struct Errors<'a>(Checker<'a>);

impl Errors<'_> {
    fn check<T, V>(
        &mut self,
        value: &Spanned<V>,
        parse: impl FnOnce(&V) -> Result<T, String>,
    ) -> Option<T> {
        self.0.check(value, parse)
    }

    fn at<V>(&mut self, value: &Spanned<V>, message: String) {
        self.0.error(value.span(), message);
    }

    /// A duration from `value`, or `default` if it is absent (or wrong: the error is kept).
    fn duration(&mut self, value: Option<&Spanned<String>>, default: Duration) -> Duration {
        value
            .and_then(|v| self.check(v, |t| positive(parse_duration(t)?, t)))
            .unwrap_or(default)
    }
}

fn positive(duration: Duration, text: &str) -> Result<Duration, String> {
    if duration.is_zero() {
        Err(format!("`{text}` must be longer than zero"))
    } else {
        Ok(duration)
    }
}

fn socket_addr(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    text.to_socket_addrs()
        .map_err(|err| format!("`{text}` is not an address:port ({err})"))?
        .next()
        .ok_or_else(|| format!("`{text}` resolves to no address"))
}

impl ProxyConfig {
    /// Parses and checks a whole config file: the policy and the proxy's sections.
    ///
    /// # Errors
    /// Every problem in either half, each located.
    pub fn parse(text: &str) -> Result<ProxyConfig, ConfigErrors> {
        let policy = Config::parse(text);
        let raw: RawFile = match toml::from_str(text) {
            Ok(raw) => raw,
            // A syntax error: the policy half reported it already, located.
            Err(err) => {
                return Err(policy.err().unwrap_or_else(|| {
                    ConfigErrors(vec![ConfigError::at(
                        text,
                        err.span().map_or(0, |s| s.start),
                        err.message().trim(),
                    )])
                }));
            }
        };
        let mut errors = Errors(Checker::new(text));
        let defaults = Settings::default();
        let settings = Settings {
            threads: raw.proxy.threads.unwrap_or(defaults.threads),
            drain: errors.duration(raw.proxy.drain.as_ref(), defaults.drain),
            connection_memory: raw
                .proxy
                .connection_memory
                .as_ref()
                .and_then(|m| errors.check(m, |m| connection_memory(m)))
                .unwrap_or(defaults.connection_memory),
            log_rejections: raw.proxy.log_rejections.unwrap_or(defaults.log_rejections),
            delay: errors.duration(raw.proxy.delay.as_ref(), defaults.delay),
        };
        let state = state_file(&raw.proxy, &mut errors);
        let admin = match &raw.admin {
            Some(admin) if !admin.enabled => None,
            Some(admin) => admin_section(admin, &mut errors),
            None => DEFAULT_ADMIN.parse().ok().map(Admin::at),
        };
        let mut names: HashMap<String, usize> = HashMap::new();
        let listeners = raw
            .listener
            .iter()
            .filter_map(|raw| {
                let name = raw.name.get_ref();
                let line = ConfigError::at(text, raw.name.span().start, "").line;
                if let Some(first) = names.insert(name.clone(), line) {
                    errors.at(
                        &raw.name,
                        format!("duplicate listener name `{name}` (first used on line {first})"),
                    );
                }
                listener(raw, &mut errors)
            })
            .collect();
        transport_refusals(text, &mut errors);
        let cluster = raw.cluster.as_ref().and_then(|c| cluster(c, &mut errors));
        let kernel = raw.kernel.as_ref().and_then(|k| kernel(k, &mut errors));
        let own = errors.0.into_errors();
        match policy {
            Ok(policy) if own.is_empty() => Ok(ProxyConfig {
                settings,
                admin,
                listeners,
                cluster,
                kernel,
                state,
                policy,
            }),
            result => {
                let mut found = result.err().map(|e| e.0).unwrap_or_default();
                found.extend(own);
                found.sort_by_key(|e| (e.line, e.column));
                Err(ConfigErrors(found))
            }
        }
    }
}

/// `[proxy] state_file` and `state_interval` (which needs the file).
fn state_file(raw: &RawSettings, errors: &mut Errors<'_>) -> Option<StateFile> {
    let interval = errors.duration(raw.state_interval.as_ref(), DEFAULT_STATE_INTERVAL);
    let Some(file) = &raw.state_file else {
        if let Some(interval) = &raw.state_interval {
            errors.at(
                interval,
                "state_interval without state_file: name the file to save the state to".to_owned(),
            );
        }
        return None;
    };
    errors.check(file, |f| {
        if f.is_empty() || f.ends_with('/') {
            Err(format!("state_file `{f}` does not name a file"))
        } else {
            Ok(StateFile {
                path: f.into(),
                interval,
            })
        }
    })
}

fn admin_section(raw: &RawAdmin, errors: &mut Errors<'_>) -> Option<Admin> {
    let defaults = Admin::at(DEFAULT_ADMIN.parse().ok()?);
    let listen = match &raw.listen {
        Some(listen) => errors.check(listen, |l| socket_addr(l))?,
        None => defaults.listen,
    };
    let token = match (&raw.token_file, &raw.token_env) {
        (Some(_), Some(env)) => {
            errors.at(env, "give token_file or token_env, not both".to_owned());
            None
        }
        (Some(file), None) => errors.check(file, |f| {
            if f.is_empty() {
                Err("token_file is empty: name the file that holds the token".to_owned())
            } else {
                Ok(TokenSource::File(f.into()))
            }
        }),
        (None, Some(env)) => errors.check(env, |e| {
            if e.is_empty() || e.contains('=') || e.contains('\0') {
                Err(format!("`{e}` is not an environment variable name"))
            } else {
                Ok(TokenSource::Env(e.clone()))
            }
        }),
        (None, None) => None,
    };
    if token.is_none()
        && raw.token_file.is_none()
        && raw.token_env.is_none()
        && !listen.ip().is_loopback()
    {
        let message = format!(
            "the admin endpoint listens on {listen}, beyond loopback, without a token: set \
             token_file or token_env (every request then needs `Authorization: Bearer TOKEN`)"
        );
        match &raw.listen {
            Some(at) => errors.at(at, message),
            None => return None,
        }
    }
    let max_connections = match &raw.max_connections {
        Some(m) => errors.check(m, |&m| {
            if m == 0 {
                Err(
                    "max_connections = 0 would refuse every admin request; use enabled = false"
                        .to_owned(),
                )
            } else {
                Ok(m)
            }
        })?,
        None => defaults.max_connections,
    };
    Some(Admin {
        listen,
        token,
        header_timeout: errors.duration(raw.header_timeout.as_ref(), defaults.header_timeout),
        idle_timeout: errors.duration(raw.idle_timeout.as_ref(), defaults.idle_timeout),
        max_connections,
    })
}

fn listener(raw: &RawListener, errors: &mut Errors<'_>) -> Option<Listener> {
    let protocol = match &raw.protocol {
        None => Some(Protocol::Tcp),
        Some(p) => errors.check(p, |p| match p.as_str() {
            "tcp" => Ok(Protocol::Tcp),
            "udp" => Ok(Protocol::Udp),
            other => Err(format!(
                "unknown listener protocol `{other}` (use tcp or udp)"
            )),
        }),
    };
    let listen = errors.check(&raw.listen, |l| socket_addr(l));
    let upstreams: Vec<SocketAddr> = raw
        .upstreams
        .get_ref()
        .iter()
        .filter_map(|u| errors.check(u, |u| socket_addr(u)))
        .collect();
    if raw.upstreams.get_ref().is_empty() {
        errors.at(
            &raw.upstreams,
            format!("listener `{}` has no upstreams", raw.name.get_ref()),
        );
    }
    let trusted_proxies = raw
        .trusted_proxies
        .iter()
        .filter_map(|c| errors.check(c, |c| Cidr::parse(c)))
        .collect();
    let max_connections = raw.max_connections.unwrap_or(10_000);
    let (source_default, prefix_default) = network_caps(max_connections);
    let mut network_cap = |cap: &Option<Spanned<u32>>, default: u32| {
        cap.as_ref()
            .and_then(|m| {
                errors.check(m, |&m| {
                    if m == 0 {
                        Err("a cap of 0 refuses everyone; leave it out for the default".into())
                    } else {
                        Ok(m)
                    }
                })
            })
            .unwrap_or(default)
    };
    let max_connections_per_source = network_cap(&raw.max_connections_per_source, source_default);
    let max_connections_per_prefix = network_cap(&raw.max_connections_per_prefix, prefix_default);
    let max_sessions = match &raw.max_sessions {
        Some(m) => errors
            .check(m, |&m| {
                if m == 0 {
                    Err("max_sessions must be at least 1".to_owned())
                } else {
                    Ok(m)
                }
            })
            .map(Some),
        None => Some(None),
    };
    let session_cap = |cap: &Option<Spanned<u32>>, default: u32, errors: &mut Errors<'_>| {
        cap.as_ref().map_or(Some(default), |c| {
            errors.check(c, |&c| {
                if c == 0 {
                    Err("a session cap of 0 refuses everyone".to_owned())
                } else {
                    Ok(c)
                }
            })
        })
    };
    let max_sessions_per_source = session_cap(
        &raw.max_sessions_per_source,
        DEFAULT_SESSIONS_PER_SOURCE,
        errors,
    );
    let max_sessions_per_prefix = session_cap(
        &raw.max_sessions_per_prefix,
        DEFAULT_SESSIONS_PER_PREFIX,
        errors,
    );
    Some(Listener {
        name: raw.name.get_ref().clone(),
        protocol: protocol?,
        listen: listen?,
        upstreams,
        connect_timeout: errors.duration(raw.connect_timeout.as_ref(), Duration::from_secs(1)),
        retries: raw.retries.unwrap_or(2),
        backoff: errors.duration(raw.backoff.as_ref(), Duration::from_millis(10)),
        backlog: raw.backlog.unwrap_or(1024),
        reuse_port: raw.reuse_port,
        max_connections,
        max_connections_per_source,
        max_connections_per_prefix,
        max_held: raw.max_held.unwrap_or(DEFAULT_HELD.0),
        max_held_per_source: raw.max_held_per_source.unwrap_or(DEFAULT_HELD.1),
        max_held_per_prefix: raw.max_held_per_prefix.unwrap_or(DEFAULT_HELD.2),
        max_header_waits: raw
            .max_header_waits
            .unwrap_or((max_connections / 4).max(64)),
        idle_timeout: errors.duration(raw.idle_timeout.as_ref(), DEFAULT_IDLE_TIMEOUT),
        trusted_proxies,
        proxy_header_timeout: errors
            .duration(raw.proxy_header_timeout.as_ref(), Duration::from_secs(3)),
        send_proxy: raw.send_proxy,
        session_timeout: errors.duration(raw.session_timeout.as_ref(), Duration::from_secs(30)),
        max_sessions: max_sessions?,
        max_sessions_per_source: max_sessions_per_source?,
        max_sessions_per_prefix: max_sessions_per_prefix?,
    })
}

/// The default held-rejection budget of a listener: in all, per source, per network.
pub const DEFAULT_HELD: (usize, u32, u32) = (1_000, 8, 64);

/// The default idle timeout of a relayed TCP connection.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// The default open-connection caps of a listener of `max_connections`: per source a
/// sixteenth of it, per network (/24, /48) a quarter, each at least 1.
#[must_use]
pub fn network_caps(max_connections: usize) -> (u32, u32) {
    let part = |divisor: usize| {
        u32::try_from(max_connections / divisor)
            .unwrap_or(u32::MAX)
            .max(1)
    };
    (part(16), part(4))
}

/// `[proxy] connection_memory`: a size that holds the open-connection counts.
fn connection_memory(text: &str) -> Result<usize, String> {
    let size = parse_size(text)?;
    if size < MIN_CONNECTION_MEMORY {
        return Err(format!(
            "connection_memory `{text}` is too small for the open-connection counts: at least \
             {MIN_CONNECTION_MEMORY} bytes"
        ));
    }
    Ok(size)
}

/// Refuses, at the field, what a listener would otherwise ignore. A UDP listener cannot honour
/// the TCP connection caps, the PROXY header settings for clients (`trusted_proxies`,
/// `proxy_header_timeout`: datagrams from a balancer are not read for headers), a v1 header to
/// upstreams (it has no UDP form; v2 is sent, one header per datagram) or the TCP connect
/// settings; a TCP listener cannot honour the UDP session settings. Silence here would leave an
/// operator believing in a limit that is not there.
fn transport_refusals(text: &str, errors: &mut Errors<'_>) {
    let Ok(file) = toml::from_str::<RawTransportOnlyFile>(text) else {
        // A shape error: already reported, located, by the main parse.
        return;
    };
    for raw in &file.listener {
        match raw.protocol.as_deref() {
            Some("udp") => udp_refusals(raw, errors),
            // Any other protocol is refused, located, by the main parse.
            None | Some("tcp") => tcp_refusals(raw, errors),
            Some(_) => {}
        }
    }
}

/// Refuses the UDP session settings on a TCP listener.
fn tcp_refusals(raw: &RawTransportOnly, errors: &mut Errors<'_>) {
    let udp_only = [
        ("session_timeout", &raw.session_timeout),
        ("max_sessions", &raw.max_sessions),
        ("max_sessions_per_source", &raw.max_sessions_per_source),
        ("max_sessions_per_prefix", &raw.max_sessions_per_prefix),
    ];
    refuse_fields(&udp_only, errors, |field| {
        format!(
            "`{field}` is a UDP setting: a TCP listener cannot honour it; remove it (TCP \
             connections are capped by `max_connections` and its per-source and per-prefix \
             shares)"
        )
    });
}

/// Refuses the TCP settings on a UDP listener.
fn udp_refusals(raw: &RawTransportOnly, errors: &mut Errors<'_>) {
    let refusal = |field: &str| {
        format!("`{field}` is a TCP setting: a UDP listener cannot honour it; remove it")
    };
    let tcp_only = [
        ("backlog", &raw.backlog),
        ("connect_timeout", &raw.connect_timeout),
        ("retries", &raw.retries),
        ("backoff", &raw.backoff),
        ("max_connections", &raw.max_connections),
        (
            "max_connections_per_source",
            &raw.max_connections_per_source,
        ),
        (
            "max_connections_per_prefix",
            &raw.max_connections_per_prefix,
        ),
        ("max_held", &raw.max_held),
        ("max_held_per_source", &raw.max_held_per_source),
        ("max_held_per_prefix", &raw.max_held_per_prefix),
        ("max_header_waits", &raw.max_header_waits),
        ("idle_timeout", &raw.idle_timeout),
        ("proxy_header_timeout", &raw.proxy_header_timeout),
    ];
    refuse_fields(&tcp_only, errors, refusal);
    if let Some(trusted) = raw
        .trusted_proxies
        .as_ref()
        .filter(|t| !t.get_ref().is_empty())
    {
        errors.0.error(trusted.span(), refusal("trusted_proxies"));
    }
    if let Some(send) = raw
        .send_proxy
        .as_ref()
        .filter(|s| *s.get_ref() == SendProxy::V1)
    {
        errors.0.error(
            send.span(),
            "`send_proxy = \"v1\"`: the v1 header has no UDP form; a UDP listener sends \
                 v2 (one header per datagram) or none"
                .to_owned(),
        );
    }
}

/// Refuses, at its place, each of `fields` that the file sets, with `refusal(field)` as the
/// message.
fn refuse_fields(
    fields: &[(&str, &Option<Spanned<IgnoredAny>>)],
    errors: &mut Errors<'_>,
    refusal: impl Fn(&str) -> String,
) {
    for (field, value) in fields {
        if let Some(value) = value {
            errors.0.error(value.span(), refusal(field));
        }
    }
}

fn cluster(raw: &RawCluster, errors: &mut Errors<'_>) -> Option<ClusterConfig> {
    let addresses = raw.redis.as_ref().map_or(&[][..], |r| &r.get_ref()[..]);
    let sentinel = sentinel(raw, errors);
    let redis: Vec<SocketAddr> = addresses
        .iter()
        .filter_map(|a| errors.check(a, |a| socket_addr(a)))
        .collect();
    let redis = (redis.len() == addresses.len()).then_some(redis);
    if addresses.is_empty() && raw.sentinels.is_none() {
        match &raw.redis {
            Some(list) => errors.at(list, "give at least one Redis address".to_owned()),
            None => {
                let message = "[cluster] needs `redis = [\"HOST:PORT\", ...]` or `sentinels` \
                               and `master`"
                    .to_owned();
                // Located at the name if given, else at the file's start.
                match &raw.name {
                    Some(name) => errors.at(name, message),
                    None => errors.0.error(0..0, message),
                }
            }
        }
        return None;
    }
    let node = match &raw.node {
        Some(node) => errors.check(node, |n| name(n, "node")),
        None => Some(hostname()),
    };
    let cluster_name = match &raw.name {
        Some(n) => errors.check(n, |n| name(n, "cluster")),
        None => {
            let message = "[cluster] needs `name = \"...\"`: the namespace of this cluster's \
                           keys in Redis (there is no default, so two deployments sharing one \
                           Redis never count into each other's keys by accident)"
                .to_owned();
            // Located at the first line of the section there is.
            match raw.redis.as_ref().or(raw.sentinels.as_ref()) {
                Some(list) => errors.at(list, message),
                None => errors.0.error(0..0, message),
            }
            None
        }
    };
    let threshold = match &raw.threshold {
        Some(t) => errors.check(t, |&t| Threshold::new(t)),
        None => Some(Threshold(0.25)),
    };
    let auth = redis_auth(raw, errors);
    let on_failure = match &raw.on_failure {
        Some(o) => errors.check(o, |o| match o.as_str() {
            "local" => Ok(OnFailure::Local),
            other => Err(format!(
                "unknown on_failure `{other}` (use local: keep limiting with local counts)"
            )),
        }),
        None => Some(OnFailure::Local),
    };
    let suspects = match &raw.suspects {
        Some(s) => errors.check(s, |&s| {
            if (8..=1 << 24).contains(&s) {
                Ok(s.next_power_of_two())
            } else {
                Err(format!("suspects = {s}: use 8 to 16777216 slots"))
            }
        }),
        None => Some(4096),
    };
    // Checked before any `?` below, so their errors are reported with the others.
    let sync = errors.duration(raw.sync.as_ref(), Duration::from_millis(200));
    let timeout = errors.duration(raw.timeout.as_ref(), Duration::from_secs(1));
    let max_clock_error = errors.duration(raw.max_clock_error.as_ref(), Duration::from_millis(250));
    let tls = redis_tls(raw, errors);
    let sentinel_addresses = raw.sentinels.as_ref().map_or(&[][..], |s| &s.get_ref()[..]);
    let hosts = addresses
        .iter()
        .chain(sentinel_addresses)
        .filter_map(|text| written_host(text.get_ref()))
        .collect();
    Some(ClusterConfig {
        redis: redis?,
        sentinel: sentinel?,
        node: node?,
        auth: auth?,
        name: cluster_name?,
        sync,
        timeout,
        max_clock_error,
        threshold: threshold?,
        on_failure: on_failure?,
        suspects: suspects?,
        tls: tls?,
        hosts,
    })
}

/// The address `text` names and the host name it was written with, when it is a name (an IP
/// address, however written, or a name that does not resolve, gives `None`; the latter is
/// reported elsewhere).
fn written_host(text: &str) -> Option<(SocketAddr, String)> {
    let (host, _) = text.rsplit_once(':')?;
    if host.starts_with('[') || host.parse::<std::net::IpAddr>().is_ok() {
        return None;
    }
    let address = socket_addr(text).ok()?;
    Some((address, host.to_owned()))
}

/// `[cluster]`'s TLS: `Some(None)` without `tls = true`, `None` after an error (reported).
fn redis_tls(raw: &RawCluster, errors: &mut Errors<'_>) -> Option<Option<RedisTls>> {
    let enabled = raw.tls.as_ref().is_some_and(|t| *t.get_ref());
    let fields = [
        ("ca_file", &raw.ca_file),
        ("client_cert", &raw.client_cert),
        ("client_key", &raw.client_key),
        ("tls_server_name", &raw.tls_server_name),
    ];
    if !enabled {
        let mut ok = true;
        for (field, value) in fields {
            if let Some(value) = value {
                errors.at(
                    value,
                    format!(
                        "{field} needs `tls = true` (without it every connection to Redis is \
                         plain TCP and nothing is verified)"
                    ),
                );
                ok = false;
            }
        }
        return ok.then_some(None);
    }
    let path = |errors: &mut Errors<'_>, value: &Spanned<String>, field: &str| {
        errors.check(value, |p| {
            if p.is_empty() {
                Err(format!("{field} is empty: name a PEM file"))
            } else {
                Ok(PathBuf::from(p))
            }
        })
    };
    let mut ok = true;
    let ca_file = match &raw.ca_file {
        Some(file) => {
            let file = path(errors, file, "ca_file");
            ok &= file.is_some();
            file
        }
        None => None,
    };
    let client = match (&raw.client_cert, &raw.client_key) {
        (None, None) => None,
        (Some(cert), Some(key)) => {
            let (cert, key) = (
                path(errors, cert, "client_cert"),
                path(errors, key, "client_key"),
            );
            ok &= cert.is_some() && key.is_some();
            cert.zip(key)
                .map(|(cert, key)| ClientCertificate { cert, key })
        }
        (Some(cert), None) => {
            errors.at(
                cert,
                "client_cert needs client_key (the certificate's private key): give both or \
                 neither"
                    .to_owned(),
            );
            ok = false;
            None
        }
        (None, Some(key)) => {
            errors.at(
                key,
                "client_key needs client_cert (the certificate it is the key of): give both \
                 or neither"
                    .to_owned(),
            );
            ok = false;
            None
        }
    };
    let server_name = match &raw.tls_server_name {
        Some(name) => {
            let name = errors.check(name, |n| {
                tokio_rustls::rustls::pki_types::ServerName::try_from(n.as_str())
                    .map(|_| n.clone())
                    .map_err(|_| {
                        format!("tls_server_name `{n}` is neither a DNS name nor an IP address")
                    })
            });
            ok &= name.is_some();
            name
        }
        None => None,
    };
    ok.then_some(Some(RedisTls {
        ca_file,
        client,
        server_name,
    }))
}

/// `[cluster]`'s sentinels: `Some(None)` without them, `None` after an error (reported).
fn sentinel(raw: &RawCluster, errors: &mut Errors<'_>) -> Option<Option<Sentinel>> {
    match (&raw.sentinels, &raw.master) {
        (None, None) => Some(None),
        (Some(list), None) => {
            errors.at(
                list,
                "sentinels need `master = \"NAME\"`: the name they monitor it by".to_owned(),
            );
            None
        }
        (None, Some(master)) => {
            errors.at(
                master,
                "master needs `sentinels = [\"HOST:PORT\", ...]`".to_owned(),
            );
            None
        }
        (Some(list), Some(master)) => {
            if list.get_ref().is_empty() {
                errors.at(list, "give at least one sentinel address".to_owned());
            }
            let sentinels: Vec<SocketAddr> = list
                .get_ref()
                .iter()
                .filter_map(|a| errors.check(a, |a| socket_addr(a)))
                .collect();
            let master = errors.check(master, |m| {
                if m.is_empty() || m.chars().any(|c| c.is_whitespace() || c.is_control()) {
                    Err(format!(
                        "master `{m}`: a sentinel master name has no spaces"
                    ))
                } else {
                    Ok(m.clone())
                }
            })?;
            (sentinels.len() == list.get_ref().len() && !sentinels.is_empty())
                .then_some(Some(Sentinel { master, sentinels }))
        }
    }
}

/// `[cluster]`'s login: `Some(None)` without one, `None` after an error (reported).
fn redis_auth(raw: &RawCluster, errors: &mut Errors<'_>) -> Option<Option<RedisAuth>> {
    let mut ok = true;
    if let Some(literal) = &raw.password {
        errors.at(
            literal,
            "a password in the config text is refused (configs are copied, printed and \
             checked in): put it in a file and give `password_file = \"PATH\"`, or in the \
             environment and give `password_env = \"NAME\"`"
                .to_owned(),
        );
        ok = false;
    }
    let password = match (&raw.password_file, &raw.password_env) {
        (Some(_), Some(env)) => {
            errors.at(
                env,
                "give password_file or password_env, not both".to_owned(),
            );
            return None;
        }
        (Some(file), None) => Some(errors.check(file, |f| {
            if f.is_empty() {
                Err("password_file is empty: name the file that holds the password".to_owned())
            } else {
                Ok(TokenSource::File(f.into()))
            }
        })?),
        (None, Some(env)) => Some(errors.check(env, |e| {
            if e.is_empty() || e.contains('=') || e.contains('\0') {
                Err(format!("`{e}` is not an environment variable name"))
            } else {
                Ok(TokenSource::Env(e.clone()))
            }
        })?),
        (None, None) => None,
    };
    let user = match &raw.user {
        Some(user) => Some(errors.check(user, |u| {
            if u.is_empty() || u.chars().any(|c| c.is_whitespace() || c.is_control()) {
                Err(format!("user `{u}`: a Redis ACL user name has no spaces"))
            } else {
                Ok(u.clone())
            }
        })?),
        None => None,
    };
    match (user, password) {
        (Some(_), None) => {
            if let Some(user) = &raw.user {
                errors.at(
                    user,
                    "user needs its password: give password_file or password_env".to_owned(),
                );
            }
            None
        }
        (user, Some(password)) => ok.then_some(Some(RedisAuth { user, password })),
        (None, None) => ok.then_some(None),
    }
}

/// The `[kernel]` section, every field checked (see the README's kernel fast path).
fn kernel(raw: &RawKernel, errors: &mut Errors<'_>) -> Option<KernelConfig> {
    let defaults = KernelConfig::default();
    // Each field is checked even after one failed, so every error is reported at once.
    let table = match &raw.table {
        Some(table) => errors.check(table, |t| nft_name(t)),
        None => Some(defaults.table),
    };
    let factor = match &raw.factor {
        Some(factor) => errors.check(factor, |&f| {
            if f.is_finite() && f >= 1.0 {
                Ok(f)
            } else {
                Err(format!(
                    "factor {f} is below 1: a source goes into the kernel only once over its limit"
                ))
            }
        }),
        None => Some(defaults.factor),
    };
    let action = match &raw.action {
        Some(action) => errors.check(action, |a| match a.as_str() {
            "drop" => Ok(KernelAction::Drop),
            "reset" => Ok(KernelAction::Reset),
            other => Err(format!(
                "`{other}` is not a kernel action: use \"drop\" or \"reset\""
            )),
        }),
        None => Some(defaults.action),
    };
    let max_elements = match &raw.max_elements {
        Some(max) => errors.check(max, |&m| {
            if (1..=1 << 24).contains(&m) {
                Ok(m)
            } else {
                Err(format!("max_elements {m} is not between 1 and 16777216"))
            }
        }),
        None => Some(defaults.max_elements),
    };
    let interval = errors.duration(raw.interval.as_ref(), defaults.interval);
    Some(KernelConfig {
        table: table?,
        interval,
        factor: factor?,
        action: action?,
        max_elements: max_elements?,
        required: raw.required,
    })
}

/// An nftables table name: a letter, then letters, digits and `_`, at most 64 bytes (it is
/// written into nft's input, so nothing else may pass).
fn nft_name(text: &str) -> Result<String, String> {
    let mut chars = text.chars();
    let valid = text.len() <= 64
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if valid {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "`{text}` is not a table name: use a letter, then letters, digits or `_` (at most 64)"
        ))
    }
}

/// A node or cluster name: 1 to 64 letters, digits, `.`, `_` or `-` (it goes into Redis key
/// and client names).
fn name(text: &str, what: &str) -> Result<String, String> {
    let fits = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if (1..=64).contains(&text.len()) && text.chars().all(fits) {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "{what} name `{text}`: use 1 to 64 letters, digits, `.`, `_` or `-`"
        ))
    }
}

/// This machine's host name (the default node name), cut to what a node name may hold.
fn hostname() -> String {
    let raw = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default();
    let cleaned: String = raw
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .take(64)
        .collect();
    if cleaned.is_empty() {
        "tollgate".to_owned()
    } else {
        cleaned
    }
}

/// Every error of `errors` as `FILE:LINE:COLUMN: message`, one per line: the form editors and
/// terminals turn into links.
#[must_use]
pub fn located(path: &std::path::Path, errors: &ConfigErrors) -> String {
    let lines: Vec<String> = errors
        .0
        .iter()
        .map(|e| format!("{}:{}:{}: {}", path.display(), e.line, e.column, e.message))
        .collect();
    lines.join("\n")
}

/// A UDP listener's session settings, as the config file writes them.
fn write_sessions(f: &mut fmt::Formatter<'_>, l: &Listener) -> fmt::Result {
    let timeout = toml::Value::String(DurationText(l.session_timeout).to_string());
    if l.send_proxy != SendProxy::None {
        writeln!(f, "send_proxy = \"{}\"", l.send_proxy.as_str())?;
    }
    writeln!(f, "session_timeout = {timeout}")?;
    if let Some(cap) = l.max_sessions {
        writeln!(f, "max_sessions = {cap}")?;
    }
    writeln!(f, "max_sessions_per_source = {}", l.max_sessions_per_source)?;
    writeln!(f, "max_sessions_per_prefix = {}", l.max_sessions_per_prefix)
}

/// Prints the whole file as TOML that parses back to an equal config (`tollgate check`).
impl fmt::Display for ProxyConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let quoted = |text: &str| toml::Value::String(text.to_owned()).to_string();
        let duration = |d: Duration| quoted(&DurationText(d).to_string());
        let list = |items: Vec<String>| {
            let quoted: Vec<String> = items.iter().map(|i| quoted(i)).collect();
            format!("[{}]", quoted.join(", "))
        };
        let s = &self.settings;
        writeln!(f, "[proxy]\nthreads = {}", s.threads)?;
        writeln!(f, "drain = {}", duration(s.drain))?;
        writeln!(
            f,
            "connection_memory = {}",
            quoted(&s.connection_memory.to_string())
        )?;
        writeln!(f, "log_rejections = {}", s.log_rejections)?;
        writeln!(f, "delay = {}", duration(s.delay))?;
        if let Some(state) = &self.state {
            writeln!(
                f,
                "state_file = {}",
                quoted(&state.path.display().to_string())
            )?;
            writeln!(f, "state_interval = {}", duration(state.interval))?;
        }
        match &self.admin {
            Some(admin) => {
                writeln!(
                    f,
                    "\n[admin]\nlisten = {}",
                    quoted(&admin.listen.to_string())
                )?;
                match &admin.token {
                    Some(TokenSource::File(path)) => {
                        writeln!(f, "token_file = {}", quoted(&path.display().to_string()))?;
                    }
                    Some(TokenSource::Env(name)) => writeln!(f, "token_env = {}", quoted(name))?,
                    None => {}
                }
                writeln!(f, "header_timeout = {}", duration(admin.header_timeout))?;
                writeln!(f, "idle_timeout = {}", duration(admin.idle_timeout))?;
                writeln!(f, "max_connections = {}", admin.max_connections)?;
            }
            None => writeln!(f, "\n[admin]\nenabled = false")?,
        }
        for l in &self.listeners {
            writeln!(f, "\n[[listener]]\nname = {}", quoted(&l.name))?;
            writeln!(f, "protocol = {}", quoted(l.protocol.as_str()))?;
            writeln!(f, "listen = {}", quoted(&l.listen.to_string()))?;
            writeln!(
                f,
                "upstreams = {}",
                list(l.upstreams.iter().map(ToString::to_string).collect())
            )?;
            writeln!(f, "reuse_port = {}", l.reuse_port)?;
            if l.protocol == Protocol::Udp {
                // The TCP settings below are refused on a UDP listener.
                write_sessions(f, l)?;
                continue;
            }
            writeln!(f, "connect_timeout = {}", duration(l.connect_timeout))?;
            writeln!(f, "retries = {}", l.retries)?;
            writeln!(f, "backoff = {}", duration(l.backoff))?;
            writeln!(f, "backlog = {}", l.backlog)?;
            writeln!(f, "max_connections = {}", l.max_connections)?;
            writeln!(
                f,
                "max_connections_per_source = {}",
                l.max_connections_per_source
            )?;
            writeln!(
                f,
                "max_connections_per_prefix = {}",
                l.max_connections_per_prefix
            )?;
            writeln!(f, "max_held = {}", l.max_held)?;
            writeln!(f, "max_held_per_source = {}", l.max_held_per_source)?;
            writeln!(f, "max_held_per_prefix = {}", l.max_held_per_prefix)?;
            writeln!(f, "max_header_waits = {}", l.max_header_waits)?;
            writeln!(f, "idle_timeout = {}", duration(l.idle_timeout))?;
            writeln!(
                f,
                "trusted_proxies = {}",
                list(l.trusted_proxies.iter().map(ToString::to_string).collect())
            )?;
            writeln!(
                f,
                "proxy_header_timeout = {}",
                duration(l.proxy_header_timeout)
            )?;
            // The UDP session settings are refused on a TCP listener.
            writeln!(f, "send_proxy = {}", quoted(l.send_proxy.as_str()))?;
        }
        if let Some(c) = &self.cluster {
            writeln!(f, "\n[cluster]")?;
            writeln!(
                f,
                "redis = {}",
                list(c.redis.iter().map(|&a| c.written(a)).collect())
            )?;
            if let Some(sentinel) = &c.sentinel {
                writeln!(
                    f,
                    "sentinels = {}",
                    list(sentinel.sentinels.iter().map(|&a| c.written(a)).collect())
                )?;
                writeln!(f, "master = {}", quoted(&sentinel.master))?;
            }
            writeln!(f, "node = {}", quoted(&c.node))?;
            writeln!(f, "name = {}", quoted(&c.name))?;
            if let Some(auth) = &c.auth {
                if let Some(user) = &auth.user {
                    writeln!(f, "user = {}", quoted(user))?;
                }
                match &auth.password {
                    TokenSource::File(path) => {
                        writeln!(f, "password_file = {}", quoted(&path.display().to_string()))?
                    }
                    TokenSource::Env(name) => writeln!(f, "password_env = {}", quoted(name))?,
                }
            }
            writeln!(f, "sync = {}", duration(c.sync))?;
            writeln!(f, "timeout = {}", duration(c.timeout))?;
            writeln!(f, "max_clock_error = {}", duration(c.max_clock_error))?;
            writeln!(f, "threshold = {:?}", c.threshold.get())?;
            writeln!(f, "on_failure = {}", quoted(c.on_failure.as_str()))?;
            writeln!(f, "suspects = {}", c.suspects)?;
            if let Some(tls) = &c.tls {
                writeln!(f, "tls = true")?;
                let path = |p: &PathBuf| quoted(&p.display().to_string());
                if let Some(ca) = &tls.ca_file {
                    writeln!(f, "ca_file = {}", path(ca))?;
                }
                if let Some(client) = &tls.client {
                    writeln!(f, "client_cert = {}", path(&client.cert))?;
                    writeln!(f, "client_key = {}", path(&client.key))?;
                }
                if let Some(name) = &tls.server_name {
                    writeln!(f, "tls_server_name = {}", quoted(name))?;
                }
            }
        }
        if let Some(k) = &self.kernel {
            writeln!(f, "\n[kernel]\ntable = {}", quoted(&k.table))?;
            writeln!(f, "interval = {}", duration(k.interval))?;
            writeln!(f, "factor = {:?}", k.factor)?;
            writeln!(f, "action = {}", quoted(k.action.as_str()))?;
            writeln!(f, "max_elements = {}", k.max_elements)?;
            writeln!(f, "required = {}", k.required)?;
        }
        writeln!(f)?;
        write!(f, "{}", self.policy)
    }
}

#[cfg(test)]
mod tests {
    //! The parser's bounds and refusals, each at its edge: what an operator's file may say and
    //! what it must be refused for (a refused file keeps the running policy on reload).

    use super::*;

    const POLICY: &str =
        "[sketch]\nmemory = \"1MiB\"\n[[rule]]\nname = \"r\"\nlimits = [{ rate = \"100/10s\" }]\n";

    fn parse(proxy: &str) -> Result<ProxyConfig, ConfigErrors> {
        ProxyConfig::parse(&format!("{proxy}\n{POLICY}"))
    }

    fn parsed(proxy: &str) -> ProxyConfig {
        parse(proxy).unwrap_or_else(|e| panic!("refused:\n{proxy}\n{e}"))
    }

    /// The messages of a file that must be refused.
    fn refusals(proxy: &str) -> Vec<String> {
        match parse(proxy) {
            Ok(_) => panic!("accepted:\n{proxy}"),
            Err(e) => e.0.into_iter().map(|e| e.message).collect(),
        }
    }

    fn refused(proxy: &str, needle: &str) {
        let messages = refusals(proxy);
        assert!(
            messages.iter().any(|m| m.contains(needle)),
            "`{needle}` not in {messages:?}"
        );
    }

    fn listener(fields: &str) -> String {
        format!(
            "[[listener]]\nname = \"l\"\nlisten = \"127.0.0.1:1\"\nupstreams = [\"127.0.0.1:2\"]\n{fields}"
        )
    }

    const CLUSTER: &str = "[cluster]\nname = \"c\"\nredis = [\"127.0.0.2:6379\"]\n";

    fn cluster(fields: &str) -> ClusterConfig {
        parsed(&format!("{CLUSTER}{fields}"))
            .cluster
            .expect("a cluster")
    }

    fn kernel(fields: &str) -> KernelConfig {
        parsed(&format!("[kernel]\n{fields}"))
            .kernel
            .expect("a kernel section")
    }

    /// One of `[cluster]`'s parts on its own: what it returns and how many errors it reported.
    fn cluster_part<T>(text: &str, part: fn(&RawCluster, &mut Errors<'_>) -> T) -> (T, usize) {
        let raw: RawCluster = toml::from_str(text).expect("a [cluster] body");
        let mut errors = Errors(Checker::new(text));
        let result = part(&raw, &mut errors);
        (result, errors.0.into_errors().len())
    }

    #[test]
    fn proxy_settings_are_read_and_zero_durations_refused() {
        let config =
            parsed("[proxy]\ndrain = \"3s\"\ndelay = \"250ms\"\nconnection_memory = \"2MiB\"");
        assert_eq!(config.settings.drain, Duration::from_secs(3));
        assert_eq!(config.settings.delay, Duration::from_millis(250));
        assert_eq!(config.settings.connection_memory, 2 << 20);
        assert_eq!(parsed("").settings, Settings::default());
        refused("[proxy]\ndrain = \"0s\"", "must be longer than zero");
    }

    #[test]
    fn connection_memory_has_a_floor_at_exactly_its_minimum() {
        let at = |bytes: usize| format!("[proxy]\nconnection_memory = \"{bytes}\"");
        let floor = MIN_CONNECTION_MEMORY;
        assert_eq!(parsed(&at(floor)).settings.connection_memory, floor);
        refused(&at(floor - 1), "is too small");
    }

    #[test]
    fn state_file_names_a_file_and_its_interval_needs_it() {
        let state = parsed("[proxy]\nstate_file = \"/var/lib/t/state\"\nstate_interval = \"5s\"")
            .state
            .expect("a state file");
        assert_eq!(state.path, PathBuf::from("/var/lib/t/state"));
        assert_eq!(state.interval, Duration::from_secs(5));
        refused(
            "[proxy]\nstate_file = \"/var/lib/t/\"",
            "does not name a file",
        );
        refused("[proxy]\nstate_file = \"\"", "does not name a file");
        refused("[proxy]\nstate_interval = \"5s\"", "without state_file");
    }

    #[test]
    fn admin_section_is_on_unless_disabled() {
        let admin = parsed("[admin]\nlisten = \"127.0.0.1:9191\"\nmax_connections = 5")
            .admin
            .expect("enabled by default");
        assert_eq!(admin.listen, "127.0.0.1:9191".parse().unwrap());
        assert_eq!(admin.max_connections, 5);
        assert!(parsed("[admin]\nenabled = false").admin.is_none());
        refused("[admin]\nmax_connections = 0", "use enabled = false");
    }

    #[test]
    fn admin_beyond_loopback_needs_a_token() {
        refused("[admin]\nlisten = \"0.0.0.0:9090\"", "without a token");
        let env = parsed("[admin]\nlisten = \"0.0.0.0:9090\"\ntoken_env = \"TOKEN\"").admin;
        assert_eq!(env.unwrap().token, Some(TokenSource::Env("TOKEN".into())));
        let file = parsed("[admin]\nlisten = \"0.0.0.0:9090\"\ntoken_file = \"/t\"").admin;
        assert_eq!(file.unwrap().token, Some(TokenSource::File("/t".into())));
        // A bad token is one error, not also a missing one.
        assert_eq!(
            refusals("[admin]\nlisten = \"0.0.0.0:9090\"\ntoken_file = \"\"").len(),
            1
        );
        for name in ["", "A=B", "A\\u0000B"] {
            refused(
                &format!("[admin]\ntoken_env = \"{name}\""),
                "is not an environment variable name",
            );
        }
    }

    #[test]
    fn listener_caps_of_zero_are_refused_and_others_kept() {
        let l = &parsed(&listener(
            "max_connections = 1000\nmax_connections_per_source = 3\nmax_connections_per_prefix = 7",
        ))
        .listeners[0];
        assert_eq!(
            (l.max_connections_per_source, l.max_connections_per_prefix),
            (3, 7)
        );
        assert_eq!(l.max_header_waits, 250, "a quarter of max_connections");
        for cap in ["max_connections_per_source", "max_connections_per_prefix"] {
            refused(
                &listener(&format!("{cap} = 0")),
                "a cap of 0 refuses everyone",
            );
        }
        let udp = |fields: &str| listener(&format!("protocol = \"udp\"\n{fields}"));
        let l = &parsed(&udp(
            "max_sessions = 9\nmax_sessions_per_source = 2\nmax_sessions_per_prefix = 4",
        ))
        .listeners[0];
        assert_eq!(
            (
                l.max_sessions,
                l.max_sessions_per_source,
                l.max_sessions_per_prefix
            ),
            (Some(9), 2, 4)
        );
        refused(&udp("max_sessions = 0"), "max_sessions must be at least 1");
        for cap in ["max_sessions_per_source", "max_sessions_per_prefix"] {
            refused(&udp(&format!("{cap} = 0")), "a session cap of 0");
        }
    }

    #[test]
    fn network_caps_are_a_sixteenth_and_a_quarter_at_least_one() {
        assert_eq!(network_caps(1000), (62, 250));
        assert_eq!(network_caps(0), (1, 1));
        assert_eq!(network_caps(usize::MAX), (u32::MAX, u32::MAX));
    }

    #[test]
    fn a_listener_refuses_the_other_transports_fields() {
        refused(&listener("session_timeout = \"5s\""), "is a UDP setting");
        let udp = |fields: &str| listener(&format!("protocol = \"udp\"\n{fields}"));
        refused(&udp("backlog = 10"), "is a TCP setting");
        refused(
            &udp("trusted_proxies = [\"10.0.0.0/8\"]"),
            "is a TCP setting",
        );
        refused(&udp("send_proxy = \"v1\""), "has no UDP form");
        let l = &parsed(&udp("trusted_proxies = []\nsend_proxy = \"v2\"")).listeners[0];
        assert_eq!(l.send_proxy, SendProxy::V2);
    }

    #[test]
    fn a_whole_config_prints_back_to_itself() {
        let text = format!(
            "[proxy]\nstate_file = \"/s\"\n[admin]\ntoken_env = \"T\"\n{}\nsend_proxy = \"v2\"\n\
             {}\nprotocol = \"udp\"\nsend_proxy = \"v2\"\nsession_timeout = \"7s\"\n\
             max_sessions = 9\nmax_sessions_per_source = 2\nmax_sessions_per_prefix = 4\n\
             {CLUSTER}node = \"n\"\nthreshold = 0.5\nuser = \"u\"\npassword_env = \"P\"\n\
             sentinels = [\"127.0.0.3:26379\"]\nmaster = \"m\"\ntls = true\nca_file = \"/ca\"\n\
             client_cert = \"/c\"\nclient_key = \"/k\"\ntls_server_name = \"redis.test\"\n\
             [kernel]\naction = \"reset\"\nfactor = 2.5\nrequired = true\n",
            listener(""),
            listener("").replace("\"l\"", "\"u\"")
        );
        let config = parsed(&text);
        assert_eq!(config.cluster.as_ref().unwrap().threshold.get(), 0.5);
        let printed = config.to_string();
        assert_eq!(ProxyConfig::parse(&printed), Ok(config), "{printed}");
        for line in [
            "protocol = \"tcp\"",
            "protocol = \"udp\"",
            "action = \"reset\"",
            "on_failure = \"local\"",
        ] {
            assert!(printed.contains(line), "{line} not in\n{printed}");
        }
    }

    #[test]
    fn a_cluster_keeps_the_host_names_it_was_written_with() {
        let text = "[cluster]\nname = \"c\"\ntls = true\n\
                    redis = [\"localhost:6379\", \"127.0.0.2:6379\", \"[::1]:6379\"]\n";
        let c = parsed(text).cluster.expect("a cluster");
        let named = c.redis[0];
        assert_eq!(c.server_name(named), "localhost");
        assert_eq!(c.server_name(c.redis[1]), "127.0.0.2");
        assert_eq!(c.server_name(c.redis[2]), "::1");
        assert_eq!(c.hosts.len(), 1, "only names are kept: {:?}", c.hosts);
        let written: Vec<String> = c.redis.iter().map(|&a| c.written(a)).collect();
        assert_eq!(written, ["localhost:6379", "127.0.0.2:6379", "[::1]:6379"]);
        let named = cluster("tls = true\ntls_server_name = \"redis.test\"");
        assert_eq!(named.server_name(named.redis[0]), "redis.test");
    }

    #[test]
    fn cluster_bounds_are_refused_past_their_edges() {
        assert_eq!(cluster("").redis, vec!["127.0.0.2:6379".parse().unwrap()]);
        assert_eq!(cluster("suspects = 1000").suspects, 1024);
        assert_eq!(cluster("suspects = 8").suspects, 8);
        assert_eq!(cluster("suspects = 16777216").suspects, 1 << 24);
        for s in [7, 16_777_217] {
            refused(
                &format!("{CLUSTER}suspects = {s}"),
                "use 8 to 16777216 slots",
            );
        }
        refused(&format!("{CLUSTER}threshold = 0.0"), "not a fraction");
        refused(
            "[cluster]\nname = \"c\"\nredis = []",
            "give at least one Redis address",
        );
    }

    #[test]
    fn cluster_tls_fields_need_tls_and_a_bad_one_fails_the_part() {
        assert_eq!(cluster("").tls, None);
        let tls = cluster("tls = true\nca_file = \"/ca\"").tls.expect("tls");
        assert_eq!(tls.ca_file, Some(PathBuf::from("/ca")));
        refused(&format!("{CLUSTER}ca_file = \"/ca\""), "needs `tls = true`");
        for body in [
            "tls = true\nca_file = \"\"",
            "tls = true\nclient_cert = \"\"\nclient_key = \"/k\"",
            "tls = true\nclient_cert = \"/c\"\nclient_key = \"\"",
            "tls = true\ntls_server_name = \"a b\"",
        ] {
            let (tls, errors) = cluster_part(body, redis_tls);
            assert_eq!((tls, errors), (None, 1), "{body}");
        }
    }

    #[test]
    fn sentinels_need_a_master_name_without_spaces() {
        let s = cluster("sentinels = [\"127.0.0.3:26379\"]\nmaster = \"m\"")
            .sentinel
            .expect("sentinels");
        assert_eq!(s.master, "m");
        assert_eq!(s.sentinels, vec!["127.0.0.3:26379".parse().unwrap()]);
        for master in ["", "a b", "a\\u0001b"] {
            refused(
                &format!("{CLUSTER}sentinels = [\"127.0.0.3:26379\"]\nmaster = \"{master}\""),
                "has no spaces",
            );
        }
        let body = "sentinels = [\"127.0.0.3:26379\", \"nowhere\"]\nmaster = \"m\"";
        assert_eq!(cluster_part(body, sentinel), (None, 1));
    }

    #[test]
    fn redis_auth_names_come_without_spaces_and_passwords_not_in_the_text() {
        let auth = cluster("user = \"u\"\npassword_env = \"P\"")
            .auth
            .expect("auth");
        assert_eq!(auth.user.as_deref(), Some("u"));
        assert_eq!(auth.password, TokenSource::Env("P".into()));
        for env in ["", "A=B", "A\\u0000B"] {
            refused(
                &format!("{CLUSTER}password_env = \"{env}\""),
                "is not an environment variable name",
            );
        }
        for user in ["", "a b", "a\\u0001b"] {
            refused(
                &format!("{CLUSTER}user = \"{user}\"\npassword_env = \"P\""),
                "has no spaces",
            );
        }
        refused(&format!("{CLUSTER}password = \"x\""), "is refused");
    }

    #[test]
    fn kernel_factor_and_elements_are_bounded() {
        let k = kernel("table = \"fast_path1\"\nfactor = 2.0\nmax_elements = 16777216");
        assert_eq!(
            (k.table.as_str(), k.factor, k.max_elements),
            ("fast_path1", 2.0, 1 << 24)
        );
        assert_eq!(kernel("max_elements = 1").max_elements, 1);
        for factor in ["0.5", "inf"] {
            refused(&format!("[kernel]\nfactor = {factor}"), "is below 1");
        }
        for max in [0, 16_777_217] {
            refused(&format!("[kernel]\nmax_elements = {max}"), "is not between");
        }
    }

    #[test]
    fn names_are_checked_at_both_ends() {
        let letters = |n: usize| "a".repeat(n);
        assert_eq!(nft_name(&letters(64)), Ok(letters(64)));
        assert_eq!(nft_name("a_1"), Ok("a_1".to_owned()));
        for bad in [letters(65), "1a".into(), "a-b".into(), String::new()] {
            assert!(nft_name(&bad).is_err(), "{bad}");
        }
        assert_eq!(name("edge-1.a_b", "node"), Ok("edge-1.a_b".to_owned()));
        assert_eq!(name(&letters(64), "node"), Ok(letters(64)));
        for bad in [letters(65), "a b".into(), String::new()] {
            assert!(name(&bad, "node").is_err(), "{bad}");
        }
    }

    #[test]
    fn the_default_node_name_is_the_host_name() {
        let node = cluster("").node;
        assert_eq!(name(&node, "node"), Ok(node.clone()));
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        if name(host.trim(), "node").is_ok() {
            assert_eq!(node, host.trim());
        }
    }

    #[test]
    fn errors_are_located_as_editors_read_them() {
        let errors = ConfigErrors(vec![ConfigError::at("a\nbc", 3, "wrong")]);
        assert_eq!(
            located(std::path::Path::new("p.toml"), &errors),
            "p.toml:2:2: wrong"
        );
    }
}
