//! `[cluster]`: limits shared with other proxies through Redis, with its TLS, sentinels and
//! login.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::{Errors, TokenSource, duration, list, quoted, socket_addr};

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
    pub(crate) timeout: Duration,
    /// How far this node's window edges may be from Redis's clock (half a `TIME` round trip
    /// plus the correction a reading makes) before it refuses to share counts.
    pub(crate) max_clock_error: Duration,
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
    pub(crate) hosts: BTreeMap<SocketAddr, String>,
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
    pub(crate) fn new(fraction: f64) -> Result<Threshold, String> {
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
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            OnFailure::Local => "local",
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCluster {
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

pub(super) fn cluster(raw: &RawCluster, errors: &mut Errors<'_>) -> Option<ClusterConfig> {
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
        (Some(file), None) => Some(errors.check(file, |f| TokenSource::file(f, "password"))?),
        (None, Some(env)) => Some(errors.check(env, |e| TokenSource::env(e))?),
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

/// A node or cluster name: 1 to 64 letters, digits, `.`, `_` or `-` (it goes into Redis key
/// and client names).
pub(super) fn name(text: &str, what: &str) -> Result<String, String> {
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

impl ClusterConfig {
    /// `[cluster]` as the config file writes it, addresses with the host names they were
    /// written with.
    pub(super) fn write(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = self;
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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use tollgate_filter::Checker;

    use super::*;
    use crate::config::testing::{CLUSTER, cluster, parsed, refused};

    /// One of `[cluster]`'s parts on its own: what it returns and how many errors it reported.
    fn cluster_part<T>(text: &str, part: fn(&RawCluster, &mut Errors<'_>) -> T) -> (T, usize) {
        let raw: RawCluster = toml::from_str(text).expect("a [cluster] body");
        let mut errors = Errors(Checker::new(text));
        let result = part(&raw, &mut errors);
        (result, errors.0.into_errors().len())
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
    fn the_default_node_name_is_the_host_name() {
        let node = cluster("").node;
        assert_eq!(name(&node, "node"), Ok(node.clone()));
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        if name(host.trim(), "node").is_ok() {
            assert_eq!(node, host.trim());
        }
    }
}
