//! What a process holds, read from `/proc`: open descriptors (`/proc/PID/fd`), resident memory
//! (`VmRSS` in `/proc/PID/status`), each summed over the process and its descendants (nginx's
//! worker is a child of its master); and this process's own open-file limit, raised to its hard
//! limit with prlimit(1) (the workspace forbids `unsafe`, so no setrlimit(2) call of its own).

use std::fs;
use std::io;
use std::process::{Command, Stdio};

use crate::cpu;

/// Open descriptors of `pid` and its descendants.
///
/// # Errors
/// `pid` itself cannot be read (it has exited, or belongs to another user).
pub fn fds(pid: u32) -> io::Result<u64> {
    cpu::over_tree(pid, count_fds)
}

fn count_fds(pid: u32) -> io::Result<u64> {
    Ok(fs::read_dir(format!("/proc/{pid}/fd"))?.count() as u64)
}

/// Resident memory of `pid` and its descendants, in bytes.
///
/// # Errors
/// `pid` itself cannot be read.
pub fn rss_bytes(pid: u32) -> io::Result<u64> {
    cpu::over_tree(pid, own_rss)
}

fn own_rss(pid: u32) -> io::Result<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))?;
    Ok(status_kib(&status, "VmRSS:").unwrap_or(0) * 1024)
}

/// The value of a `NAME:  1234 kB` line of `/proc/PID/status`, in KiB.
fn status_kib(status: &str, name: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// This process's open-file limit, soft and hard, from `/proc/self/limits` (`None` for
/// unlimited).
///
/// # Errors
/// The file cannot be read or has no `Max open files` line.
pub fn nofile() -> io::Result<(Option<u64>, Option<u64>)> {
    let limits = fs::read_to_string("/proc/self/limits")?;
    parse_nofile(&limits)
        .ok_or_else(|| io::Error::other("no `Max open files` in /proc/self/limits"))
}

fn parse_nofile(limits: &str) -> Option<(Option<u64>, Option<u64>)> {
    let line = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?;
    let mut fields = line.split_whitespace();
    let value = |field: Option<&str>| match field? {
        "unlimited" => Some(None),
        number => number.parse().ok().map(Some),
    };
    Some((value(fields.next())?, value(fields.next())?))
}

/// Raises this process's soft open-file limit to its hard limit and returns the new soft
/// limit. Child processes (the proxies) inherit it.
///
/// # Errors
/// The limits cannot be read, prlimit(1) is missing or fails, or the limit did not change.
pub fn raise_nofile() -> io::Result<u64> {
    let (soft, hard) = nofile()?;
    if soft == hard {
        return Ok(soft.unwrap_or(u64::MAX));
    }
    let hard_text = hard.map_or_else(|| "unlimited".to_owned(), |h| h.to_string());
    let status = Command::new("prlimit")
        .arg("--pid")
        .arg(std::process::id().to_string())
        .arg(format!("--nofile={hard_text}:{hard_text}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| io::Error::other(format!("cannot run prlimit (util-linux): {e}")))?;
    let (now, _) = nofile()?;
    if !status.success() || now != hard {
        return Err(io::Error::other(format!(
            "prlimit did not raise the open-file limit ({status}): soft {now:?}, hard {hard:?}"
        )));
    }
    Ok(now.unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nofile_line_is_parsed_with_unlimited() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 unlimited            files\n";
        assert_eq!(parse_nofile(limits), Some((Some(1024), None)));
        assert_eq!(
            parse_nofile("Max cpu time unlimited unlimited seconds"),
            None
        );
    }

    #[test]
    fn status_lines_are_read_in_kib() {
        let status = "Name:\ttollgate\nVmPeak:\t  9000 kB\nVmRSS:\t    4242 kB\n";
        assert_eq!(status_kib(status, "VmRSS:"), Some(4242));
        assert_eq!(status_kib(status, "VmSwap:"), None);
    }

    #[test]
    fn own_descriptors_and_memory_are_counted() {
        let pid = std::process::id();
        let before = fds(pid).unwrap();
        let extra: Vec<_> = (0..64)
            .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap())
            .collect();
        // Other tests' threads open and close files meanwhile (reading /proc): a margin of 16.
        let after = fds(pid).unwrap();
        assert!(after >= before + 48, "{before} -> {after}");
        drop(extra);
        assert!(rss_bytes(pid).unwrap() > 0);
    }
}
