//! The process's resident memory, read from `/proc/self/status` (Linux).

use std::io;

/// The `VmRSS` line of `/proc/self/status`, in bytes.
pub(crate) fn resident_bytes() -> io::Result<usize> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    parse_vm_rss(&status).ok_or_else(|| io::Error::other("no VmRSS line in /proc/self/status"))
}

/// Finds `VmRSS:   1234 kB` and returns it in bytes.
fn parse_vm_rss(status: &str) -> Option<usize> {
    let line = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    let kib: usize = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_vm_rss_line() {
        let status = "Name:\taccuracy\nVmHWM:\t  9000 kB\nVmRSS:\t    2048 kB\nThreads:\t1\n";
        assert_eq!(parse_vm_rss(status), Some(2 << 20));
        assert_eq!(parse_vm_rss("Name:\tx\n"), None);
    }

    #[test]
    fn this_process_has_some() {
        assert!(resident_bytes().unwrap() > 0);
    }
}
