//! The CPU time a peer spent, read from `/proc`: the load generator shares the machine with the
//! proxy and tops out before the proxy does, so rates alone compare the generator more than the
//! proxies. CPU time per operation is the fair figure.
//!
//! Per thread, the first field of `/proc/PID/task/TID/schedstat` is the time on CPU in
//! nanoseconds (`utime`/`stime` in `/proc/PID/stat` count 10 ms ticks, too coarse for a
//! few-second scenario; they are the fallback when schedstat is missing). A peer is its process
//! and every descendant: nginx's worker is a child of its master.

use std::fs;
use std::io;
use std::ops::Add;
use std::time::Duration;

/// Clock ticks per second in `/proc/PID/stat`: USER_HZ, fixed at 100 in the Linux ABI.
const TICKS_PER_SECOND: u64 = 100;

/// The CPU time spent so far by process `pid` and its descendants.
///
/// A process that exits between listing and reading is skipped; an error only if `pid` itself
/// cannot be read (it has exited).
pub fn tree_time(pid: u32) -> io::Result<Duration> {
    over_tree(pid, process_time)
}

/// The CPU time of one process: the sum over its live threads.
fn process_time(pid: u32) -> io::Result<Duration> {
    let mut nanos = 0u64;
    let mut read_any = false;
    for task in fs::read_dir(format!("/proc/{pid}/task"))? {
        let Ok(task) = task else { continue };
        let Ok(text) = fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        if let Some(on_cpu) = text
            .split_whitespace()
            .next()
            .and_then(|f| f.parse::<u64>().ok())
        {
            nanos += on_cpu;
            read_any = true;
        }
    }
    if read_any {
        return Ok(Duration::from_nanos(nanos));
    }
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let fields = stat_fields(&stat);
    // Fields 14 and 15 (1-based) of stat are utime and stime; `fields` starts at field 3.
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|f| f.parse::<u64>().ok()))
        .sum();
    Ok(Duration::from_millis(ticks * 1000 / TICKS_PER_SECOND))
}

/// Context switches so far of process `pid` and its descendants, voluntary (it waited: a
/// wakeup each) and involuntary (preempted), summed over their live threads: the wakeups a
/// proxy takes per connection. A process that exits meanwhile is skipped; an error only if
/// `pid` itself cannot be read.
pub fn tree_switches(pid: u32) -> io::Result<u64> {
    over_tree(pid, process_switches)
}

/// The context switches of one process: the sum over its live threads.
fn process_switches(pid: u32) -> io::Result<u64> {
    let mut total = 0;
    for task in fs::read_dir(format!("/proc/{pid}/task"))? {
        let Ok(task) = task else { continue };
        let Ok(status) = fs::read_to_string(task.path().join("status")) else {
            continue;
        };
        total += switches(&status);
    }
    Ok(total)
}

/// `voluntary_ctxt_switches` plus `nonvoluntary_ctxt_switches` of a `/proc/.../status` text.
fn switches(status: &str) -> u64 {
    status
        .lines()
        .filter_map(|line| {
            let (name, value) = line.split_once(':')?;
            matches!(
                name,
                "voluntary_ctxt_switches" | "nonvoluntary_ctxt_switches"
            )
            .then(|| value.trim().parse::<u64>().ok())?
        })
        .sum()
}

/// The fields of a `/proc/PID/stat` line after the command name (which may hold spaces and
/// parentheses, so the split is at the last `)`): index 0 is the state, 1 the parent pid.
fn stat_fields(stat: &str) -> Vec<&str> {
    stat.rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default()
}

/// `of` process `pid` plus `of` each of its descendants: a figure of the whole tree (nginx's
/// worker is a child of its master). A descendant that exits meanwhile counts for nothing.
///
/// # Errors
/// `of(pid)`'s: `pid` itself cannot be read (it has exited).
pub fn over_tree<T: Default + Add<Output = T>>(
    pid: u32,
    of: impl Fn(u32) -> io::Result<T>,
) -> io::Result<T> {
    let own = of(pid)?;
    Ok(descendants(pid)
        .into_iter()
        .fold(own, |total, child| total + of(child).unwrap_or_default()))
}

/// Every descendant of `pid`, found by parent pid in one pass over `/proc`.
pub fn descendants(pid: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let parents: Vec<(u32, u32)> = entries
        .filter_map(|entry| {
            let child: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = fs::read_to_string(format!("/proc/{child}/stat")).ok()?;
            let parent = stat_fields(&stat).get(1)?.parse().ok()?;
            Some((child, parent))
        })
        .collect();
    let mut found = Vec::new();
    let mut frontier = vec![pid];
    // Bounded: each pass moves one generation down, and a pid is found at most once.
    while let Some(parent) = frontier.pop() {
        for &(child, _) in parents.iter().filter(|&&(c, p)| p == parent && c != pid) {
            if !found.contains(&child) {
                found.push(child);
                frontier.push(child);
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_skip_a_command_with_spaces_and_parentheses() {
        let stat = "42 (a (b) c) S 7 42 42 0 -1 4194560 1 0 0 0 15 25 0 0";
        let fields = stat_fields(stat);
        assert_eq!(fields[0], "S");
        assert_eq!(fields[1], "7");
        assert_eq!((fields[11], fields[12]), ("15", "25"));
    }

    #[test]
    fn switches_add_voluntary_and_involuntary() {
        let status = "Name:\tx\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t3\n";
        assert_eq!(switches(status), 15);
        assert!(tree_switches(std::process::id()).is_ok());
    }

    #[test]
    fn a_tree_figure_adds_the_descendants_and_fails_only_for_the_root() {
        let own = std::process::id();
        let mut child = std::process::Command::new("cat")
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("cat runs");
        let figure = over_tree(own, |pid| {
            Ok::<u64, io::Error>(if pid == own { 1 } else { 10 })
        });
        let gone = || io::Error::other("exited");
        let root_only = over_tree(own, |pid| if pid == own { Ok(1u64) } else { Err(gone()) });
        let _ = child.kill();
        let _ = child.wait();
        assert!(figure.unwrap() >= 11, "the child `cat` is not counted");
        assert_eq!(root_only.unwrap(), 1);
        assert!(over_tree(own, |_| Err::<u64, _>(gone())).is_err());
    }

    #[test]
    fn own_process_time_is_readable_and_grows() {
        let pid = std::process::id();
        let before = tree_time(pid).unwrap();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(tree_time(pid).unwrap() > before);
    }
}
