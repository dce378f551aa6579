//! The proxy's part of the config file: `[proxy]`, `[admin]`, `[[listener]]`, `[cluster]`,
//! `[kernel]`, `[xdp]` and `[rls]`, read from the
//! same file as the policy (`[sketch]`, `[lists]`, `[[rule]]`, read by `tollgate-filter`). One
//! file describes one deployment; both halves are checked before anything runs, and every error
//! is located by line and column.
//!
//! Listener and admin settings take effect at start; a reload (SIGHUP or the admin's
//! `/reload`) applies the policy half and keeps the rest (a changed listener needs a restart,
//! and the reload says so in its log).

mod admin;
mod cluster;
mod kernel;
mod listener;
mod rls;
mod secret;
mod settings;
#[cfg(test)]
mod testing;
mod xdp;

pub(crate) use admin::Admin;
pub use cluster::{
    ClientCertificate, ClusterConfig, OnFailure, RedisAuth, RedisTls, Sentinel, Threshold,
};
pub use kernel::{KernelAction, KernelConfig};
pub use listener::Listener;
pub(crate) use listener::{Protocol, SendProxy};
pub(crate) use rls::{CallerBounds, RlsConfig};
pub use secret::TokenSource;
#[cfg(test)]
pub(crate) use settings::MIN_CONNECTION_MEMORY;
pub(crate) use settings::{Settings, StateFile};
pub(crate) use xdp::{XdpConfig, XdpMode};

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use serde::Deserialize;
use tollgate_filter::{Checker, Config, ConfigError, ConfigErrors, DurationText, parse_duration};
use toml::Spanned;

use admin::RawAdmin;
use cluster::RawCluster;
use kernel::RawKernel;
use listener::RawListener;
use rls::RawRls;
use settings::RawSettings;
use xdp::RawXdp;

/// Everything one config file says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyConfig {
    /// Process-wide settings (`[proxy]`).
    pub(crate) settings: Settings,
    /// The admin endpoint (`[admin]`); `None` when disabled.
    pub(crate) admin: Option<Admin>,
    /// The listeners (`[[listener]]`), in file order.
    pub listeners: Vec<Listener>,
    /// Limits shared with other proxies through Redis (`[cluster]`); `None` without the
    /// section: no cluster, nothing changes and nothing is spent.
    pub cluster: Option<ClusterConfig>,
    /// The kernel fast path (`[kernel]`); `None` without the section: nothing is asked of
    /// the kernel.
    pub kernel: Option<KernelConfig>,
    /// The XDP mode (`[xdp]`); `None` without the section: no program is loaded.
    pub(crate) xdp: Option<XdpConfig>,
    /// The rate-limit service Envoy calls (`[rls]`); `None` without the section: no gRPC
    /// server.
    pub(crate) rls: Option<RlsConfig>,
    /// The warm-restart state file (`[proxy] state_file`); `None` without it: nothing is
    /// saved, every start is cold.
    pub(crate) state: Option<StateFile>,
    /// The policy (`[sketch]`, `[lists]`, `[[rule]]`).
    pub policy: Config,
}

#[derive(Deserialize)]
struct RawFile {
    #[serde(default)]
    proxy: RawSettings,
    admin: Option<RawAdmin>,
    #[serde(default)]
    listener: Vec<RawListener>,
    cluster: Option<RawCluster>,
    kernel: Option<RawKernel>,
    xdp: Option<Spanned<RawXdp>>,
    rls: Option<Spanned<RawRls>>,
    // The policy's sections: checked by `Config::parse`.
    #[serde(default, rename = "sketch")]
    _sketch: Option<serde::de::IgnoredAny>,
    #[serde(default, rename = "lists")]
    _lists: Option<serde::de::IgnoredAny>,
    #[serde(default, rename = "rule")]
    _rule: Option<serde::de::IgnoredAny>,
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
        let settings = settings::settings(&raw.proxy, &mut errors);
        let state = settings::state_file(&raw.proxy, &mut errors);
        let admin = admin::section(raw.admin.as_ref(), &mut errors);
        let listeners = listener::listeners(text, &raw.listener, &mut errors);
        listener::transport_refusals(text, &mut errors);
        let cluster = raw
            .cluster
            .as_ref()
            .and_then(|c| cluster::cluster(c, &mut errors));
        let kernel = raw
            .kernel
            .as_ref()
            .and_then(|k| kernel::kernel(k, &mut errors));
        let xdp = raw
            .xdp
            .as_ref()
            .and_then(|x| xdp::xdp(x, &listeners, &mut errors));
        let rls = raw.rls.as_ref().and_then(|r| rls::rls(r, &mut errors));
        let own = errors.0.into_errors();
        match policy {
            Ok(policy) if own.is_empty() => Ok(ProxyConfig {
                settings,
                admin,
                listeners,
                cluster,
                kernel,
                xdp,
                rls,
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

/// A text as a TOML string.
fn quoted(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}

/// A duration as the config file writes it.
fn duration(d: Duration) -> String {
    quoted(&DurationText(d).to_string())
}

/// Texts as a TOML array of strings.
fn list(items: Vec<String>) -> String {
    let quoted: Vec<String> = items.iter().map(|i| quoted(i)).collect();
    format!("[{}]", quoted.join(", "))
}

/// Prints the whole file as TOML that parses back to an equal config (`tollgate check`).
impl fmt::Display for ProxyConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        settings::write(f, &self.settings, self.state.as_ref())?;
        admin::write(f, self.admin.as_ref())?;
        for l in &self.listeners {
            l.write(f)?;
        }
        if let Some(c) = &self.cluster {
            c.write(f)?;
        }
        if let Some(k) = &self.kernel {
            k.write(f)?;
        }
        if let Some(x) = &self.xdp {
            x.write(f)?;
        }
        if let Some(r) = &self.rls {
            r.write(f)?;
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
    use crate::config::cluster::name;
    use crate::config::kernel::nft_name;
    use crate::config::testing::{CLUSTER, listener, parsed};

    #[test]
    fn a_whole_config_prints_back_to_itself() {
        let text = format!(
            "[proxy]\nstate_file = \"/s\"\n[admin]\ntoken_env = \"T\"\n{}\nsend_proxy = \"v2\"\n\
             {}\nprotocol = \"udp\"\nsend_proxy = \"v2\"\nsession_timeout = \"7s\"\n\
             max_sessions = 9\nmax_sessions_per_source = 2\nmax_sessions_per_prefix = 4\n\
             {CLUSTER}node = \"n\"\nthreshold = 0.5\nuser = \"u\"\npassword_env = \"P\"\n\
             sentinels = [\"127.0.0.3:26379\"]\nmaster = \"m\"\ntls = true\nca_file = \"/ca\"\n\
             client_cert = \"/c\"\nclient_key = \"/k\"\ntls_server_name = \"redis.test\"\n\
             [kernel]\naction = \"reset\"\nfactor = 2.5\nrequired = true\n\
             [xdp]\ninterfaces = [\"eth0\"]\nmode = \"generic\"\nlisteners = [\"u\"]\n\
             ports = [53]\nwindow = \"10s\"\nrequired = true\n",
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
            "mode = \"generic\"",
        ] {
            assert!(printed.contains(line), "{line} not in\n{printed}");
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
    fn errors_are_located_as_editors_read_them() {
        let errors = ConfigErrors(vec![ConfigError::at("a\nbc", 3, "wrong")]);
        assert_eq!(
            located(std::path::Path::new("p.toml"), &errors),
            "p.toml:2:2: wrong"
        );
    }
}
