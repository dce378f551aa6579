//! The command line, declared with clap (typed arguments, `--help`, and clear errors for bad
//! flags come with it).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Tollgate: per-source rate limits in fixed memory, for TCP and UDP services.
#[derive(Debug, Parser)]
#[command(name = "tollgate", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check a policy file: print the parsed policy, or every error with its line.
    Check {
        /// The policy file (TOML).
        #[arg(long, short)]
        config: PathBuf,
    },
}
