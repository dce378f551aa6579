//! Config text: [`Config::parse`] (the policy) and [`ProxyConfig::parse`] (the whole file)
//! on any text.

use std::fmt::{Debug, Display};
use std::net::{IpAddr, SocketAddr};

use tollgate::config::ProxyConfig;
use tollgate_filter::{Config, ConfigErrors, Policy};

/// The largest policy memory the harness compiles: fuzzed configs name any size, and the
/// sketches allocate all of it up front.
const COMPILE_MEMORY: usize = 1 << 20;

/// Asserts that every error of `errors` names a place inside `text`: a line that exists and
/// a column at most one past that line's end (1-based, columns in bytes as reported).
fn assert_located(text: &str, errors: &ConfigErrors) {
    assert!(!errors.0.is_empty(), "a refused config with no error");
    let lines: Vec<&str> = text.split('\n').collect();
    for error in &errors.0 {
        let line = error
            .line
            .checked_sub(1)
            .and_then(|i| lines.get(i))
            .unwrap_or_else(|| {
                panic!(
                    "error at line {} of a {}-line text: {error}",
                    error.line,
                    lines.len()
                )
            });
        assert!(
            (1..=line.len() + 1).contains(&error.column),
            "error at column {} of a {}-byte line: {error}",
            error.column,
            line.len()
        );
    }
}

/// True if `text` holds a string value that the proxy would resolve as a host name
/// (`host:port` with a host that is not an IP address): parsing it would ask DNS, which a
/// fuzzer must not do thousands of times a second, and which the machine must not do at all
/// outside loopback. Mirrors `impl ToSocketAddrs for str`.
fn names_a_host(text: &str) -> bool {
    fn resolves(value: &toml::Value) -> bool {
        match value {
            toml::Value::String(s) => {
                s.parse::<SocketAddr>().is_err()
                    && s.rsplit_once(':').is_some_and(|(host, port)| {
                        port.parse::<u16>().is_ok() && host.parse::<IpAddr>().is_err()
                    })
            }
            toml::Value::Array(items) => items.iter().any(resolves),
            toml::Value::Table(table) => table.values().any(resolves),
            _ => false,
        }
    }
    // Text that is not TOML fails both parsers before any address is looked at.
    toml::from_str::<toml::Table>(text).is_ok_and(|table| table.values().any(resolves))
}

/// Parses `data` (when it is UTF-8) as a policy and as a whole proxy config.
///
/// # Panics
/// When an invariant breaks: an error names a line or column outside the text, or a config
/// that parses does not print (`Display`, what `tollgate check` shows) as text that parses
/// back to an equal config. A policy small enough is also compiled, which must not panic.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Some(config) = round_trip(text, "policy", Config::parse) {
        let fits = config.memory <= COMPILE_MEMORY
            && config.periods.iter().all(|&(_, s)| s <= COMPILE_MEMORY);
        if fits {
            // Too little memory for the sketches is an error, not a panic.
            let _ = Policy::compile(config, None);
        }
    }
    if names_a_host(text) {
        return;
    }
    round_trip(text, "config", ProxyConfig::parse);
}

/// What `parse` makes of `text`: a config that prints (`Display`, what `tollgate check` shows)
/// as text that parses back to an equal config, returned; or errors that each name a place
/// inside `text` ([`assert_located`]), and `None`. `what` names the config in a failure.
fn round_trip<C: Display + PartialEq + Debug>(
    text: &str,
    what: &str,
    parse: impl Fn(&str) -> Result<C, ConfigErrors>,
) -> Option<C> {
    match parse(text) {
        Ok(config) => {
            let printed = config.to_string();
            assert_eq!(
                parse(&printed).as_ref(),
                Ok(&config),
                "the {what} printed as\n{printed}"
            );
            Some(config)
        }
        Err(errors) => {
            assert_located(text, &errors);
            None
        }
    }
}
