//! Pinning to CPUs (`--client-cpu`, `--proxy-cpu`), so that a client and a proxy each have a
//! core of their own: `taskset -a -p`, which sets every thread of a process (a thread made
//! later inherits its maker's mask). No `unsafe` here: the workspace forbids it.

use std::process::Command;

use tollgate_benches::cpu;

/// Pins process `pid`, every thread of it and every process below it to `cpu`.
///
/// # Errors
/// `taskset` is missing or refused (no such CPU), with what it said.
pub(crate) fn pin_tree(pid: u32, cpu: usize) -> Result<(), String> {
    for pid in std::iter::once(pid).chain(cpu::descendants(pid)) {
        pin(pid, cpu)?;
    }
    Ok(())
}

/// Pins every thread of process `pid` to `cpu`.
///
/// # Errors
/// As [`pin_tree`].
pub(crate) fn pin(pid: u32, cpu: usize) -> Result<(), String> {
    let output = Command::new("taskset")
        .args(["-a", "-c", "-p", &cpu.to_string(), &pid.to_string()])
        .output()
        .map_err(|e| format!("taskset (util-linux) cannot run: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "taskset -a -c -p {cpu} {pid}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}
