//! The `tollgate` proxy: what operators run. `tollgate run` serves TCP and UDP listeners that
//! enforce the policy per source address; `tollgate check` validates a config file;
//! `tollgate replay` runs a capture through a policy offline.
//!
//! The binary is a thin `main.rs` over this library, so tests drive the same code in-process.

#![warn(missing_docs)]

pub mod admin;
pub(crate) mod admin_metrics;
pub mod cli;
pub mod cluster;
pub mod config;
pub(crate) mod gate;
mod io;
pub mod kernel;
pub(crate) mod listener_metrics;
pub mod listeners;
pub mod metrics;
pub(crate) mod reload;
pub mod rls;
pub mod server;
pub mod shared;
pub mod state;
#[cfg(test)]
mod test_log;
pub mod tools;
mod unix_time;
mod xdp;

use std::io::Write;
use std::process::ExitCode;

use cli::{Cli, Command};

/// Runs a parsed command line, writing its report to `out`.
///
/// # Errors
/// When the report cannot be written.
pub fn run(cli: Cli, out: &mut dyn Write) -> Result<ExitCode, Box<dyn std::error::Error>> {
    match cli.command {
        Command::Check { config } => Ok(tools::check::check(&config, out)?),
        Command::Run { config } => server::run(&config),
        Command::Demo => {
            tools::demo::demo(out)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Replay {
            config,
            capture,
            top,
            json,
            html,
        } => Ok(tools::replay::replay(
            &config,
            &capture,
            top,
            json,
            html.as_deref(),
            out,
        )?),
    }
}
