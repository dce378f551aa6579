//! `[proxy]`: settings for the whole process, and the warm-restart state file.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use tollgate_filter::parse_size;
use toml::Spanned;

use super::{Errors, duration, quoted};

/// `[proxy]`: settings for the whole process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Settings {
    /// Worker threads; 0 means one per core.
    pub(crate) threads: usize,
    /// On SIGTERM, how long open connections may take to finish before they are cut.
    pub(crate) drain: Duration,
    /// Memory for the per-source open-connection counts (all listeners together).
    pub(crate) connection_memory: usize,
    /// At most this many rejection log lines per second; the rest are counted and summarised.
    pub(crate) log_rejections: u32,
    /// How long a `delay` action holds a connection when its rule names no bound.
    pub(crate) delay: Duration,
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

/// `[proxy] state_file` and `state_interval`: where the counts, penalties and run-time list
/// entries are saved (every interval and at SIGTERM) and read back at start (see
/// [`crate::state`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StateFile {
    /// The file.
    pub(crate) path: PathBuf,
    /// How often it is written while running.
    pub(crate) interval: Duration,
}

/// The default `[proxy] state_interval`.
pub(crate) const DEFAULT_STATE_INTERVAL: Duration = Duration::from_secs(30);

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSettings {
    threads: Option<usize>,
    drain: Option<Spanned<String>>,
    connection_memory: Option<Spanned<String>>,
    log_rejections: Option<u32>,
    delay: Option<Spanned<String>>,
    state_file: Option<Spanned<String>>,
    state_interval: Option<Spanned<String>>,
}

/// `[proxy]`'s process-wide settings, each absent one at its default.
pub(super) fn settings(raw: &RawSettings, errors: &mut Errors<'_>) -> Settings {
    let defaults = Settings::default();
    Settings {
        threads: raw.threads.unwrap_or(defaults.threads),
        drain: errors.duration(raw.drain.as_ref(), defaults.drain),
        connection_memory: raw
            .connection_memory
            .as_ref()
            .and_then(|m| errors.check(m, |m| connection_memory(m)))
            .unwrap_or(defaults.connection_memory),
        log_rejections: raw.log_rejections.unwrap_or(defaults.log_rejections),
        delay: errors.duration(raw.delay.as_ref(), defaults.delay),
    }
}

/// `[proxy] state_file` and `state_interval` (which needs the file).
pub(super) fn state_file(raw: &RawSettings, errors: &mut Errors<'_>) -> Option<StateFile> {
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

/// The least `[proxy] connection_memory` that holds the open-connection counts: 16 counters
/// of 4 bytes in each of the gate's 4 rows (`gate::connections::CONNECTION_DEPTH`; its test
/// checks that the counts build in exactly this and not in a byte less). Here, not there, so
/// the config reads no module above it.
pub(crate) const MIN_CONNECTION_MEMORY: usize = 16 * 4 * 4;

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

/// `[proxy]` as the config file writes it, with the state file if there is one.
pub(super) fn write(
    f: &mut fmt::Formatter<'_>,
    s: &Settings,
    state: Option<&StateFile>,
) -> fmt::Result {
    writeln!(f, "[proxy]\nthreads = {}", s.threads)?;
    writeln!(f, "drain = {}", duration(s.drain))?;
    writeln!(
        f,
        "connection_memory = {}",
        quoted(&s.connection_memory.to_string())
    )?;
    writeln!(f, "log_rejections = {}", s.log_rejections)?;
    writeln!(f, "delay = {}", duration(s.delay))?;
    if let Some(state) = state {
        writeln!(
            f,
            "state_file = {}",
            quoted(&state.path.display().to_string())
        )?;
        writeln!(f, "state_interval = {}", duration(state.interval))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::{parsed, refused, refused_file};

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
    fn a_connection_memory_too_small_for_its_counts_is_located() {
        // It passed `check` and failed only at start, with neither line nor value.
        refused_file(
            "connection_memory.toml",
            "[proxy]\nconnection_memory = \"0MiB\"\n\n[[rule]]\nname = \"r\"\nlimits = [{ rate = \"5/s\" }]\n",
            &["connection_memory.toml:2:21: connection_memory `0MiB` is too small"],
        );
    }

    #[test]
    fn a_state_interval_without_a_state_file_is_located() {
        refused_file(
            "state.toml",
            "[proxy]\nstate_interval = \"10s\"\n\n[[rule]]\nname = \"r\"\nlimits = [{ rate = \"5/s\" }]\n",
            &["state.toml:2:18: state_interval without state_file"],
        );
    }
}
