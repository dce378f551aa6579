//! `[rls]`: the rate-limit service Envoy calls (`envoy.service.ratelimit.v3`), configured by
//! envoyproxy/ratelimit's own YAML files.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use tollgate_filter::{DurationText, parse_size};
use toml::Spanned;

use super::{Errors, duration, list, quoted, socket_addr};
use tollgate_filter::parse_duration;

/// The default `[rls] memory`: bytes of descriptor sketches, shared evenly by the units the
/// YAML files use.
pub(crate) const DEFAULT_RLS_MEMORY: usize = 64 << 20;
/// The default `[rls] max_concurrent_requests`: requests decided at once per connection;
/// more wait for a slot (HTTP/2 flow control pushes back on the caller).
pub(crate) const DEFAULT_RLS_CONCURRENCY: usize = 1_024;
/// The default `[rls] max_message_bytes`: the largest request message decoded. Twice the
/// policy's whole-request bound ([`tollgate_filter::MAX_REQUEST_BYTES`], domain, keys and
/// values) leaves room for the protobuf framing of the most descriptors and entries it allows.
pub(crate) const DEFAULT_RLS_MESSAGE_BYTES: usize = 2 * tollgate_filter::MAX_REQUEST_BYTES;

/// The default bounds on callers (`[rls] max_connections` and the rest): see
/// [`RlsConfig`]'s fields and the manual's `[rls]` page.
pub(crate) const DEFAULT_RLS_CALLERS: CallerBounds = CallerBounds {
    max_connections: 4_096,
    max_connections_per_address: 64,
    max_connections_per_prefix: 256,
    max_requests_in_flight: 4_096,
    max_requests_in_flight_per_address: 256,
    max_requests_in_flight_per_prefix: 1_024,
    request_timeout: Duration::from_secs(1),
    header_timeout: Duration::from_secs(10),
    idle_timeout: Duration::from_secs(300),
};

/// The smallest `[rls] memory`: below it a unit's sketch cannot hold anything useful.
const MIN_MEMORY: usize = 64 << 10;
/// The bounds of `max_concurrent_requests` and `max_message_bytes`.
const MAX_CONCURRENCY: usize = 1 << 16;
const MIN_MESSAGE_BYTES: usize = 1 << 10;
const MAX_MESSAGE_BYTES: usize = 16 << 20;
/// The largest count any caller bound takes (connections, requests in flight).
const MAX_CALLER_COUNT: usize = 1 << 20;
/// The bounds of `request_timeout`, `header_timeout` and `idle_timeout`.
const REQUEST_TIMEOUTS: (Duration, Duration) = (Duration::from_millis(1), Duration::from_secs(60));
const CONNECTION_TIMEOUTS: (Duration, Duration) =
    (Duration::from_millis(100), Duration::from_secs(86_400));

/// What one caller, and all of them together, may hold of the service: connections and
/// requests in flight, and how long a connection may stay without a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CallerBounds {
    /// Connections open at once, from every caller; one more is closed at accept.
    pub(crate) max_connections: usize,
    /// Connections open at once from one source address.
    pub(crate) max_connections_per_address: usize,
    /// Connections open at once from one /24 (IPv4) or /64 (IPv6) prefix.
    pub(crate) max_connections_per_prefix: usize,
    /// Requests in flight (headers read, answer not yet written) from every caller; one more
    /// is answered `RESOURCE_EXHAUSTED` at once.
    pub(crate) max_requests_in_flight: usize,
    /// Requests in flight from one source address.
    pub(crate) max_requests_in_flight_per_address: usize,
    /// Requests in flight from one /24 (IPv4) or /64 (IPv6) prefix.
    pub(crate) max_requests_in_flight_per_prefix: usize,
    /// The longest a request may take from its headers to its answer (a slow body
    /// included); past it the request is cancelled (`CANCELLED`).
    pub(crate) request_timeout: Duration,
    /// The longest a new connection may take to send its first request's headers.
    pub(crate) header_timeout: Duration,
    /// The longest a connection may stay without a new request; then it is closed.
    pub(crate) idle_timeout: Duration,
}

/// `[rls]`: the rate-limit service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RlsConfig {
    /// Where the gRPC server listens (HTTP/2 without TLS).
    pub(crate) listen: SocketAddr,
    /// The descriptor files, in envoyproxy/ratelimit's format, one domain each; read at
    /// start, by `tollgate check` and at every reload, a relative path from the config
    /// file's directory.
    pub(crate) configs: Vec<PathBuf>,
    /// Bytes of descriptor sketches.
    pub(crate) memory: usize,
    /// Requests decided at once, per connection.
    pub(crate) max_concurrent_requests: usize,
    /// The largest request message decoded; a larger one is refused before decoding.
    pub(crate) max_message_bytes: usize,
    /// The bounds on callers' connections and requests.
    pub(crate) callers: CallerBounds,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRls {
    listen: Option<Spanned<String>>,
    configs: Option<Spanned<Vec<Spanned<String>>>>,
    memory: Option<Spanned<String>>,
    max_concurrent_requests: Option<Spanned<usize>>,
    max_message_bytes: Option<Spanned<String>>,
    max_connections: Option<Spanned<usize>>,
    max_connections_per_address: Option<Spanned<usize>>,
    max_connections_per_prefix: Option<Spanned<usize>>,
    max_requests_in_flight: Option<Spanned<usize>>,
    max_requests_in_flight_per_address: Option<Spanned<usize>>,
    max_requests_in_flight_per_prefix: Option<Spanned<usize>>,
    request_timeout: Option<Spanned<String>>,
    header_timeout: Option<Spanned<String>>,
    idle_timeout: Option<Spanned<String>>,
}

/// The `[rls]` section, every field checked; `None` after an error (reported).
pub(super) fn rls(section: &Spanned<RawRls>, errors: &mut Errors<'_>) -> Option<RlsConfig> {
    let raw = section.get_ref();
    let listen = match &raw.listen {
        Some(listen) => errors.check(listen, |l| socket_addr(l)),
        None => {
            errors.at(
                section,
                "[rls] needs `listen`, the gRPC server's address".to_owned(),
            );
            None
        }
    };
    let configs = match &raw.configs {
        Some(configs) if configs.get_ref().is_empty() => {
            errors.at(
                configs,
                "[rls] configs is empty: name at least one YAML file".to_owned(),
            );
            None
        }
        Some(configs) => configs
            .get_ref()
            .iter()
            .map(|c| {
                errors.check(c, |path| {
                    if path.is_empty() || path.ends_with('/') {
                        Err(format!("`{path}` does not name a file"))
                    } else {
                        Ok(PathBuf::from(path))
                    }
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .collect::<Option<Vec<_>>>(),
        None => {
            errors.at(
                section,
                "[rls] needs `configs`, the list of descriptor YAML files".to_owned(),
            );
            None
        }
    };
    let memory = match &raw.memory {
        Some(memory) => errors.check(memory, |m| {
            let size = parse_size(m)?;
            if size < MIN_MEMORY {
                Err(format!("memory `{m}` is below {MIN_MEMORY} bytes"))
            } else {
                Ok(size)
            }
        }),
        None => Some(DEFAULT_RLS_MEMORY),
    };
    let max_concurrent_requests = match &raw.max_concurrent_requests {
        Some(max) => errors.check(max, |&m| {
            if (1..=MAX_CONCURRENCY).contains(&m) {
                Ok(m)
            } else {
                Err(format!(
                    "max_concurrent_requests {m} is not between 1 and {MAX_CONCURRENCY}"
                ))
            }
        }),
        None => Some(DEFAULT_RLS_CONCURRENCY),
    };
    let max_message_bytes = match &raw.max_message_bytes {
        Some(max) => errors.check(max, |m| {
            let size = parse_size(m)?;
            if (MIN_MESSAGE_BYTES..=MAX_MESSAGE_BYTES).contains(&size) {
                Ok(size)
            } else {
                Err(format!(
                    "max_message_bytes `{m}` is not between 1KiB and 16MiB"
                ))
            }
        }),
        None => Some(DEFAULT_RLS_MESSAGE_BYTES),
    };
    let callers = callers(raw, errors);
    Some(RlsConfig {
        listen: listen?,
        configs: configs?,
        memory: memory?,
        max_concurrent_requests: max_concurrent_requests?,
        max_message_bytes: max_message_bytes?,
        callers: callers?,
    })
}

/// The caller bounds of `[rls]`, each within its range and each per-caller bound within its
/// whole; `None` after an error (reported).
fn callers(raw: &RawRls, errors: &mut Errors<'_>) -> Option<CallerBounds> {
    let d = DEFAULT_RLS_CALLERS;
    let mut count = |value: &Option<Spanned<usize>>, name: &str, default: usize| match value {
        Some(value) => errors.check(value, |&n| {
            if (1..=MAX_CALLER_COUNT).contains(&n) {
                Ok(n)
            } else {
                Err(format!(
                    "{name} {n} is not between 1 and {MAX_CALLER_COUNT}"
                ))
            }
        }),
        None => Some(default),
    };
    let max_connections = count(&raw.max_connections, "max_connections", d.max_connections);
    let per_address = count(
        &raw.max_connections_per_address,
        "max_connections_per_address",
        d.max_connections_per_address,
    );
    let per_prefix = count(
        &raw.max_connections_per_prefix,
        "max_connections_per_prefix",
        d.max_connections_per_prefix,
    );
    let in_flight = count(
        &raw.max_requests_in_flight,
        "max_requests_in_flight",
        d.max_requests_in_flight,
    );
    let in_flight_per_address = count(
        &raw.max_requests_in_flight_per_address,
        "max_requests_in_flight_per_address",
        d.max_requests_in_flight_per_address,
    );
    let in_flight_per_prefix = count(
        &raw.max_requests_in_flight_per_prefix,
        "max_requests_in_flight_per_prefix",
        d.max_requests_in_flight_per_prefix,
    );
    let mut timeout = |value: &Option<Spanned<String>>,
                       name: &str,
                       (low, high): (Duration, Duration),
                       default: Duration| match value {
        Some(value) => errors.check(value, |text| {
            let t = parse_duration(text)?;
            if (low..=high).contains(&t) {
                Ok(t)
            } else {
                Err(format!(
                    "{name} `{text}` is not between {} and {}",
                    DurationText(low),
                    DurationText(high)
                ))
            }
        }),
        None => Some(default),
    };
    let request_timeout = timeout(
        &raw.request_timeout,
        "request_timeout",
        REQUEST_TIMEOUTS,
        d.request_timeout,
    );
    let header_timeout = timeout(
        &raw.header_timeout,
        "header_timeout",
        CONNECTION_TIMEOUTS,
        d.header_timeout,
    );
    let idle_timeout = timeout(
        &raw.idle_timeout,
        "idle_timeout",
        CONNECTION_TIMEOUTS,
        d.idle_timeout,
    );
    let bounds = CallerBounds {
        max_connections: max_connections?,
        max_connections_per_address: per_address?,
        max_connections_per_prefix: per_prefix?,
        max_requests_in_flight: in_flight?,
        max_requests_in_flight_per_address: in_flight_per_address?,
        max_requests_in_flight_per_prefix: in_flight_per_prefix?,
        request_timeout: request_timeout?,
        header_timeout: header_timeout?,
        idle_timeout: idle_timeout?,
    };
    // A part above its whole, or a connection closed idle while its request may still run,
    // is a mistake to say, not to clamp in silence.
    let pairs = [
        (
            (
                &raw.max_connections_per_address,
                "max_connections_per_address",
            ),
            bounds.max_connections_per_address,
            (
                &raw.max_connections_per_prefix,
                "max_connections_per_prefix",
            ),
            bounds.max_connections_per_prefix,
        ),
        (
            (
                &raw.max_connections_per_prefix,
                "max_connections_per_prefix",
            ),
            bounds.max_connections_per_prefix,
            (&raw.max_connections, "max_connections"),
            bounds.max_connections,
        ),
        (
            (
                &raw.max_requests_in_flight_per_address,
                "max_requests_in_flight_per_address",
            ),
            bounds.max_requests_in_flight_per_address,
            (
                &raw.max_requests_in_flight_per_prefix,
                "max_requests_in_flight_per_prefix",
            ),
            bounds.max_requests_in_flight_per_prefix,
        ),
        (
            (
                &raw.max_requests_in_flight_per_prefix,
                "max_requests_in_flight_per_prefix",
            ),
            bounds.max_requests_in_flight_per_prefix,
            (&raw.max_requests_in_flight, "max_requests_in_flight"),
            bounds.max_requests_in_flight,
        ),
    ];
    let mut fine = true;
    for ((part_at, part_name), part, (whole_at, whole_name), whole) in pairs {
        // The defaults are ordered: one of the two is written whenever a part is above.
        if let Some(at) = part_at
            .as_ref()
            .or(whole_at.as_ref())
            .filter(|_| part > whole)
        {
            fine = false;
            errors.at(
                at,
                format!("{part_name} {part} is above {whole_name} {whole}"),
            );
        }
    }
    let idle_at = raw.idle_timeout.as_ref().or(raw.request_timeout.as_ref());
    if let Some(at) = idle_at.filter(|_| bounds.idle_timeout <= bounds.request_timeout) {
        fine = false;
        let message = format!(
            "idle_timeout {} is not longer than request_timeout {}",
            DurationText(bounds.idle_timeout),
            DurationText(bounds.request_timeout)
        );
        errors.at(at, message);
    }
    fine.then_some(bounds)
}

impl RlsConfig {
    /// `[rls]` as the config file writes it.
    pub(super) fn write(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "\n[rls]\nlisten = {}", quoted(&self.listen.to_string()))?;
        let configs = self.configs.iter().map(|c| c.display().to_string());
        writeln!(f, "configs = {}", list(configs.collect()))?;
        writeln!(f, "memory = {}", quoted(&self.memory.to_string()))?;
        writeln!(
            f,
            "max_concurrent_requests = {}",
            self.max_concurrent_requests
        )?;
        writeln!(
            f,
            "max_message_bytes = {}",
            quoted(&self.max_message_bytes.to_string())
        )?;
        let c = &self.callers;
        writeln!(f, "max_connections = {}", c.max_connections)?;
        writeln!(
            f,
            "max_connections_per_address = {}",
            c.max_connections_per_address
        )?;
        writeln!(
            f,
            "max_connections_per_prefix = {}",
            c.max_connections_per_prefix
        )?;
        writeln!(f, "max_requests_in_flight = {}", c.max_requests_in_flight)?;
        writeln!(
            f,
            "max_requests_in_flight_per_address = {}",
            c.max_requests_in_flight_per_address
        )?;
        writeln!(
            f,
            "max_requests_in_flight_per_prefix = {}",
            c.max_requests_in_flight_per_prefix
        )?;
        writeln!(f, "request_timeout = {}", duration(c.request_timeout))?;
        writeln!(f, "header_timeout = {}", duration(c.header_timeout))?;
        writeln!(f, "idle_timeout = {}", duration(c.idle_timeout))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ProxyConfig;
    use crate::config::testing::{parsed, refused, refused_file};

    const RLS: &str =
        "[rls]\nlisten = \"127.0.0.1:8081\"\nconfigs = [\"/etc/ratelimit/api.yaml\"]\n";

    #[test]
    fn rls_defaults_are_filled_and_the_section_prints_back() {
        let config = parsed(RLS);
        let rls = config.rls.clone().expect("an [rls] section");
        assert_eq!(rls.memory, DEFAULT_RLS_MEMORY);
        assert_eq!(rls.max_concurrent_requests, DEFAULT_RLS_CONCURRENCY);
        assert_eq!(rls.max_message_bytes, DEFAULT_RLS_MESSAGE_BYTES);
        assert_eq!(rls.configs, [PathBuf::from("/etc/ratelimit/api.yaml")]);
        let printed = config.to_string();
        assert_eq!(ProxyConfig::parse(&printed), Ok(config), "{printed}");
        assert!(parsed("").rls.is_none(), "no section, no service");
    }

    #[test]
    fn rls_fields_are_bounded_at_their_edges() {
        let with = |line: &str| format!("{RLS}{line}");
        let rls = parsed(&with(
            "memory = \"64KiB\"\nmax_concurrent_requests = 65536\nmax_message_bytes = \"16MiB\"",
        ))
        .rls
        .expect("an [rls] section");
        assert_eq!(
            (
                rls.memory,
                rls.max_concurrent_requests,
                rls.max_message_bytes
            ),
            (64 << 10, 1 << 16, 16 << 20)
        );
        refused(&with("memory = \"63KiB\""), "is below");
        for max in [0, 65_537] {
            refused(
                &with(&format!("max_concurrent_requests = {max}")),
                "is not between",
            );
        }
        for size in ["1023", "17MiB"] {
            refused(
                &with(&format!("max_message_bytes = \"{size}\"")),
                "is not between",
            );
        }
        refused("[rls]\nconfigs = [\"a.yaml\"]", "needs `listen`");
        refused("[rls]\nlisten = \"127.0.0.1:1\"", "needs `configs`");
        refused("[rls]\nlisten = \"127.0.0.1:1\"\nconfigs = []", "is empty");
        refused(
            "[rls]\nlisten = \"127.0.0.1:1\"\nconfigs = [\"dir/\"]",
            "does not name a file",
        );
        refused(&with("port = 1"), "unknown field");
    }

    #[test]
    fn caller_bounds_are_bounded_and_ordered() {
        let with = |line: &str| format!("{RLS}{line}");
        assert_eq!(
            parsed(RLS).rls.expect("an [rls] section").callers,
            DEFAULT_RLS_CALLERS
        );
        let rls = parsed(&with(
            "max_connections = 1\nmax_connections_per_address = 1\n\
             max_connections_per_prefix = 1\nmax_requests_in_flight = 1048576\n\
             max_requests_in_flight_per_address = 1048576\n\
             max_requests_in_flight_per_prefix = 1048576\nrequest_timeout = \"1ms\"\n\
             header_timeout = \"100ms\"\nidle_timeout = \"24h\"",
        ))
        .rls
        .expect("an [rls] section");
        let c = rls.callers;
        assert_eq!(
            (c.max_connections, c.max_requests_in_flight_per_address),
            (1, 1 << 20)
        );
        assert_eq!(
            (c.request_timeout, c.header_timeout, c.idle_timeout),
            (
                Duration::from_millis(1),
                Duration::from_millis(100),
                Duration::from_secs(86_400)
            )
        );
        for field in [
            "max_connections",
            "max_connections_per_address",
            "max_connections_per_prefix",
            "max_requests_in_flight",
            "max_requests_in_flight_per_address",
            "max_requests_in_flight_per_prefix",
        ] {
            for n in [0, 1_048_577] {
                refused(&with(&format!("{field} = {n}")), "is not between 1 and");
            }
        }
        refused(&with("request_timeout = \"61s\""), "is not between 1ms and");
        refused(
            &with("header_timeout = \"99ms\""),
            "is not between 100ms and",
        );
        refused(&with("idle_timeout = \"25h\""), "is not between 100ms and");
        // A part above its whole is located at the part, or at the whole when the part is
        // the default.
        refused_file(
            "t.toml",
            &with("max_connections_per_prefix = 10\nmax_connections_per_address = 11"),
            &["t.toml:5:31: max_connections_per_address 11 is above max_connections_per_prefix 10"],
        );
        refused_file(
            "t.toml",
            &with("max_connections = 100"),
            &["t.toml:4:19: max_connections_per_prefix 256 is above max_connections 100"],
        );
        refused_file(
            "t.toml",
            &with("max_requests_in_flight = 1000"),
            &[
                "t.toml:4:26: max_requests_in_flight_per_prefix 1024 is above max_requests_in_flight 1000",
            ],
        );
        refused(
            &with("max_requests_in_flight_per_prefix = 100"),
            "max_requests_in_flight_per_address 256 is above max_requests_in_flight_per_prefix 100",
        );
        refused(
            &with("request_timeout = \"2s\"\nidle_timeout = \"2s\""),
            "idle_timeout 2s is not longer than request_timeout 2s",
        );
    }
}
