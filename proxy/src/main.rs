//! The `tollgate` command: parses arguments and hands over to the library.

use std::process::ExitCode;

use clap::Parser;
use tollgate::cli::Cli;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Structured logs on stderr; RUST_LOG overrides the level (info by default).
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match tollgate::run(cli, &mut std::io::stdout()) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err}");
            let mut source = std::error::Error::source(&*err);
            while let Some(cause) = source {
                eprintln!("  caused by: {cause}");
                source = cause.source();
            }
            ExitCode::FAILURE
        }
    }
}
