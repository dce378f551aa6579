//! The command line, declared with clap (typed arguments, `--help`, and clear errors for bad
//! flags come with it).

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// What `--version` prints after the name: the crate's version and the commit it was built
/// from (`unknown` outside a git checkout; see `build.rs`).
pub(crate) const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("TOLLGATE_COMMIT"),
    ")"
);

/// Tollgate: per-source rate limits in fixed memory, for TCP and UDP services.
#[derive(Debug, Parser)]
#[command(name = "tollgate", version = VERSION, about)]
pub struct Cli {
    /// How log lines on stderr are written: `text` for people (coloured only when stderr is a
    /// terminal and NO_COLOR is unset), `json` for a log store (one object per line).
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The form of the log lines on stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One readable line per event; ANSI colours only on a terminal.
    Text,
    /// One JSON object per line (`timestamp`, `level`, `fields`, `target`), never coloured.
    Json,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// See it work: an echo upstream and the proxy on loopback, driven for a few seconds by
    /// steady clients, floods and a rotating IPv6 attacker; ends with what each got.
    Demo,
    /// Run the proxy: serve the config's listeners until SIGTERM; SIGHUP reloads the policy.
    Run {
        /// The config file (TOML): listeners, admin and the policy.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Check a policy file: print the parsed policy, or every error with its line.
    Check {
        /// The policy file (TOML).
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Run a capture (pcap or pcapng) through a policy offline, by the capture's own clock, and
    /// report what the rules would have done.
    Replay {
        /// The policy file (TOML).
        #[arg(long, short)]
        config: PathBuf,
        /// The capture file.
        capture: PathBuf,
        /// How many top throttled sources and prefixes to list.
        #[arg(long, default_value_t = 20)]
        top: usize,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Also write the report as a self-contained HTML page to this file (a chart of the
        /// verdicts over time, the rules' totals, the top sources and prefixes).
        #[arg(long, value_name = "FILE")]
        html: Option<PathBuf>,
    },
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    #[test]
    fn the_version_line_names_the_crate_version_and_the_commit() {
        let line = Cli::command().render_version();
        let rest = line
            .strip_prefix(&format!("tollgate {} (commit ", env!("CARGO_PKG_VERSION")))
            .unwrap_or_else(|| panic!("{line:?} does not start with the crate's version"));
        let commit = rest
            .strip_suffix(")\n")
            .unwrap_or_else(|| panic!("{line:?} does not end with the commit"));
        assert!(
            commit == "unknown"
                || (commit.len() >= 7 && commit.chars().all(|c| c.is_ascii_hexdigit())),
            "{commit:?} is neither a short commit hash nor `unknown`"
        );
    }
}
