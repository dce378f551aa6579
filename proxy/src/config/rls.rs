//! `[rls]`: the rate-limit service Envoy calls (`envoy.service.ratelimit.v3`), configured by
//! envoyproxy/ratelimit's own YAML files.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;
use tollgate_filter::parse_size;
use toml::Spanned;

use super::{Errors, list, quoted, socket_addr};

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

/// The smallest `[rls] memory`: below it a unit's sketch cannot hold anything useful.
const MIN_MEMORY: usize = 64 << 10;
/// The bounds of `max_concurrent_requests` and `max_message_bytes`.
const MAX_CONCURRENCY: usize = 1 << 16;
const MIN_MESSAGE_BYTES: usize = 1 << 10;
const MAX_MESSAGE_BYTES: usize = 16 << 20;

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
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRls {
    listen: Option<Spanned<String>>,
    configs: Option<Spanned<Vec<Spanned<String>>>>,
    memory: Option<Spanned<String>>,
    max_concurrent_requests: Option<Spanned<usize>>,
    max_message_bytes: Option<Spanned<String>>,
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
    Some(RlsConfig {
        listen: listen?,
        configs: configs?,
        memory: memory?,
        max_concurrent_requests: max_concurrent_requests?,
        max_message_bytes: max_message_bytes?,
    })
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
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ProxyConfig;
    use crate::config::testing::{parsed, refused};

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
}
