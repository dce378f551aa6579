//! How the tools end: an error printed with its whole `source()` chain, and a non-zero exit.

use std::error::Error;
use std::process::ExitCode;

/// Success, or the error and each of its causes on stderr and a failing exit code.
#[must_use]
pub fn exit_code(result: Result<(), Box<dyn Error>>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            let mut source = err.source();
            while let Some(cause) = source {
                eprintln!("  caused by: {cause}");
                source = cause.source();
            }
            ExitCode::FAILURE
        }
    }
}
