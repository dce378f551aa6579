//! The `tollgate` proxy: what operators run. `tollgate run` serves TCP and UDP listeners that
//! enforce the policy per source address; `tollgate check` validates a config file;
//! `tollgate replay` runs a capture through a policy offline.
//!
//! The binary is a thin `main.rs` over this library, so tests drive the same code in-process.

#![warn(missing_docs)]

pub mod actions;
pub mod admin;
pub mod budget;
pub mod capture;
pub mod check;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod demo;
pub mod descriptors;
pub mod kernel;
pub mod log_limit;
pub mod metrics;
pub mod offenders;
pub mod proxy_protocol;
pub mod relay;
pub mod replay;
pub mod server;
pub mod shared;
pub mod socket;
pub mod tcp;
pub mod udp;
pub mod upstream;

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
        Command::Run { config } => server::run(&config),
        Command::Demo => {
            demo::demo(out)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Replay {
            config,
            capture,
            top,
            json,
        } => Ok(replay::replay(&config, &capture, top, json, out)?),
    }
}
