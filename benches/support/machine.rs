//! One line that says which machine a run was measured on.

use std::fs;

/// nproc, kernel and CPU model, e.g. `2 cores (nproc), Linux 6.1.0, AMD EPYC 7B13`.
#[must_use]
pub fn describe() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let model = fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    format!("{cores} cores (nproc), Linux {}, {model}", kernel.trim())
}
