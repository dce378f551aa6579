//! `[[listener]]`: what each listener carries, where it listens and forwards, and its caps.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;
use serde::de::IgnoredAny;
use tollgate_filter::{Cidr, ConfigError, DurationText};
use toml::Spanned;

use super::{Errors, duration, list, quoted, socket_addr};

/// What a listener carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// Stream connections, each decided on at accept.
    Tcp,
    /// Datagrams, each decided on as it arrives.
    Udp,
}

impl Protocol {
    /// The config file's word for it.
    #[must_use]
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        }
    }
}

/// Which PROXY protocol header the proxy writes to its upstreams.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum SendProxy {
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
    pub(crate) fn as_str(self) -> &'static str {
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
    pub(crate) name: String,
    /// TCP or UDP.
    pub(crate) protocol: Protocol,
    /// The address to listen on.
    pub(crate) listen: SocketAddr,
    /// Where allowed traffic goes, tried in turn.
    pub(crate) upstreams: Vec<SocketAddr>,
    /// How long one connection attempt to an upstream may take.
    pub(crate) connect_timeout: Duration,
    /// Further attempts after the first fails, each on the next upstream.
    pub(crate) retries: u32,
    /// The wait before the first retry; it doubles for each further one, with jitter.
    pub(crate) backoff: Duration,
    /// The accept queue length asked of the kernel.
    pub(crate) backlog: u32,
    /// Set SO_REUSEPORT, so several processes can share the port.
    pub(crate) reuse_port: bool,
    /// Forwarded connections (TCP) this listener holds at most; more are reset at accept.
    /// Held rejections have a budget of their own (`max_held`).
    pub max_connections: usize,
    /// Forwarded connections one source (IPv4 address, IPv6 /64) may hold open. Default: a
    /// sixteenth of `max_connections`.
    pub max_connections_per_source: u32,
    /// Forwarded connections one network (IPv4 /24, IPv6 /48) may hold open. Default: a quarter
    /// of `max_connections`, so one network never takes the listener.
    pub(crate) max_connections_per_prefix: u32,
    /// Held rejections (`delay`, `close` lingering, `reply`) this listener keeps at most, apart
    /// from `max_connections`; one more is reset (0: every rejection is a reset).
    pub(crate) max_held: usize,
    /// Held rejections one source (IPv4 address, IPv6 /64) may have at once.
    pub(crate) max_held_per_source: u32,
    /// Held rejections one network (IPv4 /24, IPv6 /48) may have at once.
    pub(crate) max_held_per_prefix: u32,
    /// Connections from trusted peers still waiting for their PROXY header, at most; apart
    /// from `max_connections`, so a peer trickling headers cannot take the forwarding slots;
    /// one more is reset (`header_waits_full`). Default: a quarter of `max_connections`, at
    /// least 64. One trusted peer may hold a quarter of them (at least 64, or all when fewer).
    pub(crate) max_header_waits: usize,
    /// A relayed connection that moves no byte either way for this long is closed (also the
    /// bound on waiting for the first byte of either side).
    pub(crate) idle_timeout: Duration,
    /// Peers whose PROXY headers are believed (then the header's source is the key); a
    /// connection from one of them must start with a header.
    pub trusted_proxies: Vec<Cidr>,
    /// How long a trusted peer may take to send its header.
    pub(crate) proxy_header_timeout: Duration,
    /// The header written to upstreams.
    pub(crate) send_proxy: SendProxy,
    /// UDP: how long a client session lives without traffic.
    pub(crate) session_timeout: Duration,
    /// UDP: client sessions held at most; new clients are refused while it is full. `None`:
    /// derived at start from the open-file limit (see [`crate::listeners::descriptors`]).
    pub(crate) max_sessions: Option<usize>,
    /// UDP: sessions one source (IPv4 address, IPv6 /64) may hold.
    pub(crate) max_sessions_per_source: u32,
    /// UDP: sessions one prefix (IPv4 /24, IPv6 /48) may hold.
    pub(crate) max_sessions_per_prefix: u32,
}

/// UDP: the default cap of sessions per source (IPv4 address, IPv6 /64).
pub(crate) const DEFAULT_SESSIONS_PER_SOURCE: u32 = 64;
/// UDP: the default cap of sessions per prefix (IPv4 /24, IPv6 /48).
pub(crate) const DEFAULT_SESSIONS_PER_PREFIX: u32 = 256;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawListener {
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

/// The `[[listener]]`s of the file `text`, in file order; a name used twice is refused at its
/// second use.
pub(super) fn listeners(text: &str, raw: &[RawListener], errors: &mut Errors<'_>) -> Vec<Listener> {
    let mut names: HashMap<String, usize> = HashMap::new();
    raw.iter()
        .filter_map(|raw| {
            let name = raw.name.get_ref();
            let line = ConfigError::at(text, raw.name.span().start, "").line;
            if let Some(first) = names.insert(name.clone(), line) {
                errors.at(
                    &raw.name,
                    format!("duplicate listener name `{name}` (first used on line {first})"),
                );
            }
            listener(raw, errors)
        })
        .collect()
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
pub(crate) const DEFAULT_HELD: (usize, u32, u32) = (1_000, 8, 64);

/// The default idle timeout of a relayed TCP connection.
pub(crate) const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// The default open-connection caps of a listener of `max_connections`: per source a
/// sixteenth of it, per network (/24, /48) a quarter, each at least 1.
#[must_use]
pub(crate) fn network_caps(max_connections: usize) -> (u32, u32) {
    let part = |divisor: usize| {
        u32::try_from(max_connections / divisor)
            .unwrap_or(u32::MAX)
            .max(1)
    };
    (part(16), part(4))
}

/// Refuses, at the field, what a listener would otherwise ignore. A UDP listener cannot honour
/// the TCP connection caps, the PROXY header settings for clients (`trusted_proxies`,
/// `proxy_header_timeout`: datagrams from a balancer are not read for headers), a v1 header to
/// upstreams (it has no UDP form; v2 is sent, one header per datagram) or the TCP connect
/// settings; a TCP listener cannot honour the UDP session settings. Silence here would leave an
/// operator believing in a limit that is not there.
pub(super) fn transport_refusals(text: &str, errors: &mut Errors<'_>) {
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

impl Listener {
    /// This `[[listener]]` as the config file writes it: only the settings its transport
    /// honours.
    pub(super) fn write(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let l = self;
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
            return write_sessions(f, l);
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
        writeln!(f, "send_proxy = {}", quoted(l.send_proxy.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::{listener, parsed, refused};

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
}
