//! The CPU time a peer spent, read from `/proc`: the load generator shares the machine with the
//! proxy and tops out before the proxy does, so rates alone compare the generator more than the
//! proxies. CPU time per operation is the fair figure.
//!
//! Per thread, the first field of `/proc/PID/task/TID/schedstat` is the time on CPU in
//! nanoseconds (`utime`/`stime` in `/proc/PID/stat` count 10 ms ticks, too coarse for a
//! few-second scenario; they are the fallback when schedstat is missing). A peer is its process
//! and every descendant: nginx's worker is a child of its master.
//!
//! How that time divides between user mode and the kernel comes from the same `utime` and
//! `stime` ticks ([`tree_modes`]): too coarse to be a time of their own over a short run, they
//! give the proportion that [`Modes::split`] applies to the schedstat time.

use std::fs;
use std::io;
use std::ops::Add;
use std::time::Duration;

/// Clock ticks per second in `/proc/PID/stat`: USER_HZ, fixed at 100 in the Linux ABI.
const TICKS_PER_SECOND: u64 = 100;

/// The first field of a schedstat file (`/proc/thread-self/schedstat`, a thread's or a
/// kernel thread's `/proc/PID/schedstat`): its time on a CPU so far, `None` where it cannot be
/// read. A read costs a system call or two: outside timed loops only.
pub fn schedstat(path: &str) -> Option<Duration> {
    let text = fs::read_to_string(path).ok()?;
    let nanos = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(nanos))
}

/// This thread's time on a CPU so far ([`schedstat`] of `/proc/thread-self/schedstat`).
pub fn thread_time() -> Option<Duration> {
    schedstat("/proc/thread-self/schedstat")
}

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

/// The user and system ticks so far of process `pid` and its descendants (`utime` and `stime`
/// of `/proc/PID/stat`, which count every thread of a process, ended ones too). A process that
/// exits meanwhile is skipped; an error only if `pid` itself cannot be read.
pub fn tree_modes(pid: u32) -> io::Result<Modes> {
    over_tree(pid, process_modes)
}

fn process_modes(pid: u32) -> io::Result<Modes> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    Ok(modes(&stat))
}

/// `utime` and `stime` of a `/proc/PID/stat` line (0 where a field is missing).
fn modes(stat: &str) -> Modes {
    let fields = stat_fields(stat);
    // Fields 14 and 15 (1-based) of stat are utime and stime; `fields` starts at field 3.
    let tick = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Modes {
        user_ticks: tick(11),
        system_ticks: tick(12),
    }
}

/// CPU ticks by mode, of a process or a tree of them: `utime` and `stime` of `/proc/PID/stat`,
/// in clock ticks of 10 ms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Modes {
    /// Ticks in user mode.
    pub user_ticks: u64,
    /// Ticks in the kernel (system calls, and the interrupts and softirqs they ran into).
    pub system_ticks: u64,
}

impl Add for Modes {
    type Output = Modes;

    fn add(self, other: Modes) -> Modes {
        Modes {
            user_ticks: self.user_ticks + other.user_ticks,
            system_ticks: self.system_ticks + other.system_ticks,
        }
    }
}

impl Modes {
    /// `total` (a [`tree_time`] difference over the same interval) split in the proportion of
    /// the user to the system ticks counted from `before` to `self`: `(user, system)`. `None`
    /// when no tick was counted in between (the interval was too short to say).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_benches::cpu::Modes;
    ///
    /// let before = Modes { user_ticks: 10, system_ticks: 20 };
    /// let after = Modes { user_ticks: 12, system_ticks: 26 };
    /// let (user, system) = after.split(before, Duration::from_millis(80)).unwrap();
    /// assert_eq!((user, system), (Duration::from_millis(20), Duration::from_millis(60)));
    /// ```
    #[must_use]
    pub fn split(self, before: Modes, total: Duration) -> Option<(Duration, Duration)> {
        let user = self.user_ticks.saturating_sub(before.user_ticks);
        let system = self.system_ticks.saturating_sub(before.system_ticks);
        let ticks = user + system;
        if ticks == 0 {
            return None;
        }
        let user_time = total.mul_f64(user as f64 / ticks as f64);
        Some((user_time, total.saturating_sub(user_time)))
    }
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

    /// Spends this thread's CPU (user time) on `rounds` steps of arithmetic the compiler
    /// cannot drop.
    fn spin(rounds: u64) {
        let mut x = 0u64;
        for i in 0..rounds {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
    }

    #[test]
    fn stat_fields_skip_a_command_with_spaces_and_parentheses() {
        let stat = "42 (a (b) c) S 7 42 42 0 -1 4194560 1 0 0 0 15 25 0 0";
        let fields = stat_fields(stat);
        assert_eq!(fields[0], "S");
        assert_eq!(fields[1], "7");
        assert_eq!((fields[11], fields[12]), ("15", "25"));
    }

    #[test]
    fn modes_are_read_from_stat_and_split_a_total_in_their_proportion() {
        let stat = "42 (a (b) c) S 7 42 42 0 -1 4194560 1 0 0 0 15 25 0 0";
        let read = modes(stat);
        assert_eq!((read.user_ticks, read.system_ticks), (15, 25));
        assert_eq!(modes("42 (short) S"), Modes::default());
        let before = Modes {
            user_ticks: 100,
            system_ticks: 300,
        };
        let after = before
            + Modes {
                user_ticks: 1,
                system_ticks: 3,
            };
        let total = Duration::from_micros(400);
        assert_eq!(
            after.split(before, total),
            Some((Duration::from_micros(100), Duration::from_micros(300)))
        );
        assert_eq!(before.split(before, total), None, "no tick: no split");
        // This process spends user time: its own ticks count, and are not all system.
        let pid = std::process::id();
        let start = tree_modes(pid).unwrap();
        spin(50_000_000);
        let end = tree_modes(pid).unwrap();
        assert!(end.user_ticks > start.user_ticks, "{start:?} -> {end:?}");
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
        spin(20_000_000);
        assert!(tree_time(pid).unwrap() > before);
    }
}
