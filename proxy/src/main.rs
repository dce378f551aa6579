//! The `tollgate` command: parses arguments, starts logging and hands over to the library.

use std::io::IsTerminal;
use std::process::ExitCode;

use std::fmt::{self, Write as _};

use clap::Parser;
use tollgate::cli::{Cli, LogFormat};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::field::MakeExt;
use tracing_subscriber::fmt::format::{FormatFields, Writer};

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
                    eprintln!("error: {}", Escaped(&err.to_string()));
                    for cause in causes {
                        eprintln!("  caused by: {}", Escaped(&cause));
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
            builder.with_ansi(colour).fmt_fields(text_fields()).init();
        }
        LogFormat::Json => builder.json().with_ansi(false).init(),
    }
}

/// The text format's fields (`name=value`, the message bare, separated by spaces), every value
/// with its control characters escaped: a value carries outside text (a run-time list entry's
/// reason, a rule or listener name, a peer's address, an error quoting a config value), and a
/// newline or an escape sequence in it must not forge a second line or reach the terminal.
fn text_fields() -> impl for<'writer> FormatFields<'writer> + 'static {
    tracing_subscriber::fmt::format::debug_fn(|writer: &mut Writer<'_>, field, value| {
        let text = format!("{value:?}");
        match field.name() {
            "message" => write!(writer, "{}", Escaped(&text)),
            name => write!(writer, "{name}={}", Escaped(&text)),
        }
    })
    .delimited(" ")
}

/// Text with each control character written as Rust escapes it (`\n`, `\u{1b}`).
struct Escaped<'a>(&'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            if c.is_control() {
                write!(f, "{}", c.escape_debug())?;
            } else {
                f.write_char(c)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert_eq!(
            Escaped("ticket 42\nforged\u{1b}[2K ünïcode\t").to_string(),
            "ticket 42\\nforged\\u{1b}[2K ünïcode\\t"
        );
    }
}
