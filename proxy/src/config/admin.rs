//! `[admin]`: the admin endpoint.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::{Errors, TokenSource, duration, quoted, socket_addr};

/// The admin endpoint's default address: loopback only, so metrics and `/reload` are not
/// offered to the network unless the operator says so.
pub(crate) const DEFAULT_ADMIN: &str = "127.0.0.1:9090";

/// `[admin]`: the admin endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Admin {
    /// Where it listens.
    pub(crate) listen: SocketAddr,
    /// Where its bearer token is read at start; `None`: no token, so no endpoint that changes
    /// state, and loopback only.
    pub(crate) token: Option<TokenSource>,
    /// How long a client may take to send a request's headers.
    pub(crate) header_timeout: Duration,
    /// A connection that moves no byte either way for this long is closed.
    pub(crate) idle_timeout: Duration,
    /// Admin connections open at once at most; more are reset at accept.
    pub(crate) max_connections: usize,
}

impl Admin {
    /// The endpoint at `listen` with the default timeouts and cap, and no token.
    #[must_use]
    pub(crate) fn at(listen: SocketAddr) -> Admin {
        Admin {
            listen,
            token: None,
            header_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(30),
            max_connections: 64,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAdmin {
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

/// `[admin]`: the endpoint it describes, `None` when disabled (or after an error, reported);
/// without the section, the endpoint at its default address.
pub(super) fn section(raw: Option<&RawAdmin>, errors: &mut Errors<'_>) -> Option<Admin> {
    match raw {
        Some(admin) if !admin.enabled => None,
        Some(admin) => admin_section(admin, errors),
        None => DEFAULT_ADMIN.parse().ok().map(Admin::at),
    }
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
        (Some(file), None) => errors.check(file, |f| TokenSource::file(f, "token")),
        (None, Some(env)) => errors.check(env, |e| TokenSource::env(e)),
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

/// `[admin]` as the config file writes it (`enabled = false` when there is none).
pub(super) fn write(f: &mut fmt::Formatter<'_>, admin: Option<&Admin>) -> fmt::Result {
    match admin {
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::{parsed, refusals, refused};

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
}
