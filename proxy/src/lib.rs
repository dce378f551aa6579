//! The `tollgate` proxy: what operators run. Today it checks policy files (`tollgate check`)
//! and replays captures through them (`tollgate replay`); the TCP/UDP proxy and the demo are
//! being built (issue 4).
//!
//! The binary is a thin `main.rs` over this library, so tests drive the same code in-process.

#![warn(missing_docs)]

pub mod capture;
pub mod check;
pub mod cli;
pub mod proxy_protocol;
pub mod replay;

use std::io::Write;
use std::process::ExitCode;

use cli::{Cli, Command};

/// Runs a parsed command line, writing its report to `out`.
///
/// # Errors
/// When the report cannot be written.
pub fn run(cli: Cli, out: &mut dyn Write) -> Result<ExitCode, Box<dyn std::error::Error>> {
    match cli.command {
        Command::Check { config } => Ok(check::check(&config, out)?),
        Command::Replay {
            config,
            capture,
            top,
            json,
        } => Ok(replay::replay(&config, &capture, top, json, out)?),
    }
}
