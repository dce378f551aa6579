//! The `tollgate` command: parses arguments, starts logging and hands over to the library.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tollgate::cli::{Cli, LogFormat};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let format = cli.log_format;
    start_logging(format);
    match tollgate::run(cli, &mut std::io::stdout()) {
        Ok(code) => code,
        Err(err) => {
            let mut causes = Vec::new();
            let mut source = std::error::Error::source(&*err);
            while let Some(cause) = source {
                causes.push(cause.to_string());
                source = cause.source();
            }
            match format {
                // A log store reads one object per line: the error is one more event.
                LogFormat::Json => tracing::error!(error = %err, causes = ?causes, "failed"),
                LogFormat::Text => {
                    eprintln!("error: {err}");
                    for cause in causes {
                        eprintln!("  caused by: {cause}");
                    }
                }
            }
            ExitCode::FAILURE
        }
    }
}

/// Structured logs on stderr; RUST_LOG overrides the level (info by default). Colour codes
/// only when stderr is a terminal and NO_COLOR is unset (no-color.org): journald and files get
/// plain text.
fn start_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => {
            let colour = std::io::stderr().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty());
            builder.with_ansi(colour).init();
        }
        LogFormat::Json => builder.json().with_ansi(false).init(),
    }
}
