//! `tollgate check`: validate a policy file without running anything.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use tollgate_filter::Policy;

use crate::config::{ProxyConfig, located};

/// Checks the policy at `path`, writing the parsed policy (or every error, located as
/// `FILE:LINE:COLUMN`) to `out`. Exit code 0 if it is valid, 1 if not.
///
/// # Errors
/// Only if `out` cannot be written; a bad or unreadable policy file is a report and exit 1.
pub fn check(path: &Path, out: &mut dyn Write) -> std::io::Result<ExitCode> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) => {
            writeln!(out, "{}: cannot read the policy: {err}", path.display())?;
            return Ok(ExitCode::FAILURE);
        }
    };
    let config = match ProxyConfig::parse(&text) {
        Ok(config) => config,
        Err(errors) => {
            writeln!(out, "{}", located(path, &errors))?;
            writeln!(
                out,
                "{}: {} error(s); the policy is refused",
                path.display(),
                errors.0.len()
            )?;
            return Ok(ExitCode::FAILURE);
        }
    };
    // `[rls]`'s descriptor files, each error at the YAML's own FILE:LINE:COL.
    let domains = match &config.rls {
        Some(section) => match crate::rls::Rls::new(
            section,
            path.parent(),
            tollgate_sketch::MonotonicClock::new(),
            &[],
            None,
        ) {
            Ok(rls) => Some((rls.rules(), rls.memory_bytes())),
            Err(err) => {
                writeln!(out, "{err}")?;
                writeln!(
                    out,
                    "{}: [rls]'s descriptor files are refused",
                    path.display()
                )?;
                return Ok(ExitCode::FAILURE);
            }
        },
        None => None,
    };
    let rules = config.policy.rules.len();
    match Policy::compile(config.policy.clone(), None) {
        Ok(policy) => {
            write!(out, "{config}")?;
            writeln!(
                out,
                "\n# {}: valid; {} listener(s), {rules} rule(s), {} bytes of sketches",
                path.display(),
                config.listeners.len(),
                policy.memory_bytes()
            )?;
            if let Some((rules, bytes)) = domains {
                writeln!(
                    out,
                    "# [rls]: valid; {rules} descriptor rule(s), {bytes} bytes of descriptor sketches"
                )?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(err) => {
            writeln!(out, "{}: {err}", path.display())?;
            Ok(ExitCode::FAILURE)
        }
    }
}
