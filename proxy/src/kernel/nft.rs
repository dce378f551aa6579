//! Running one nft transaction: the text goes to `nft -f -` on its standard input, so a
//! whole update is one process and one netlink batch, committed whole or not at all.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

/// Why a transaction did not commit.
#[derive(Debug)]
pub enum NftError {
    /// `nft` could not be started (not installed, not on `PATH`).
    Spawn(std::io::Error),
    /// nft ran and refused the transaction (no CAP_NET_ADMIN, a kernel without nftables,
    /// a refused element); what it printed.
    Refused(String),
}

impl std::fmt::Display for NftError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NftError::Spawn(err) => write!(f, "cannot run `nft` (is nftables installed?): {err}"),
            NftError::Refused(said) => write!(f, "nft refused the transaction: {said}"),
        }
    }
}

impl std::error::Error for NftError {}

/// Runs `text` as one nft transaction.
///
/// # Errors
/// [`NftError`] saying whether nft could not run or what it refused.
pub(crate) fn run(text: &str) -> Result<(), NftError> {
    run_program("nft", text)
}

/// [`run`] through `program` (`nft`; the tests' stand-in reports how it was started).
fn run_program(program: &str, text: &str) -> Result<(), NftError> {
    // Its own process group: a signal to the proxy's group (a terminal's Ctrl-C, `kill --
    // -PGID`) does not cut a transaction short, the table's delete at shutdown included.
    let mut child = Command::new(program)
        .process_group(0)
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(NftError::Spawn)?;
    if let Some(mut stdin) = child.stdin.take() {
        // A write error means nft exited early; its status and stderr below say why.
        let _ = stdin.write_all(text.as_bytes());
    }
    let output = child.wait_with_output().map_err(NftError::Spawn)?;
    if output.status.success() {
        Ok(())
    } else {
        let said = String::from_utf8_lossy(&output.stderr);
        let said = said.trim();
        Err(NftError::Refused(if said.is_empty() {
            format!("exit status {}", output.status)
        } else {
            // The first lines say it; a refused batch of 100k elements echoes them all.
            said.lines().take(4).collect::<Vec<_>>().join(" | ")
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_nft_refused_or_why_it_could_not_run_is_an_error_that_says_so() {
        // Not nft's language: refused before it reaches the kernel (or nft is missing).
        assert!(run("not a transaction").is_err());
        let refused = NftError::Refused("Error: syntax error".into());
        assert_eq!(
            refused.to_string(),
            "nft refused the transaction: Error: syntax error"
        );
    }

    /// A signal to the proxy's process group does not reach nft: it leads a group of its own
    /// (its process group id is its process id). `sh -f -` stands in for `nft -f -`: it reads
    /// the text from its standard input the same way, and refuses it when the ids differ.
    #[test]
    fn nft_runs_in_a_process_group_of_its_own() {
        let check = r#"set -- $(cat /proc/$$/stat)
            [ "$1" = "$5" ] || { echo "pid $1 in process group $5" >&2; exit 1; }"#;
        let started = run_program("sh", check);
        assert!(started.is_ok(), "{started:?}");
    }
}
