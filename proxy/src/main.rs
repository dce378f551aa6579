//! The `tollgate` command: parses arguments and hands over to the library.

use std::process::ExitCode;

use clap::Parser;
use tollgate::cli::Cli;

fn main() -> ExitCode {
    let cli = Cli::parse();
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
