//! System calls per connection, counted with `strace -c -f` attached to a proxy's processes
//! for the span of one scenario (`--strace`): where two proxies' CPU per connection differs,
//! the calls each makes per connection usually say why. Tracing slows the traced process many
//! times over, so a traced run's rates and CPU figures are not recorded.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How long strace may take to attach to every thread, or to write its summary after SIGINT.
const STRACE_LIMIT: Duration = Duration::from_secs(10);

/// Calls per syscall name.
pub(crate) type Counts = BTreeMap<String, u64>;

/// A running `strace -c -f` attached to a set of processes.
#[derive(Debug)]
pub(crate) struct Trace {
    child: Child,
    file: PathBuf,
}

impl Trace {
    /// Attaches strace to every thread of `pids`, its summary going to `file`; returns once
    /// each thread shows a tracer (or fails after [`STRACE_LIMIT`]).
    ///
    /// # Errors
    /// strace is not installed, cannot attach (ptrace not permitted), or did not in time.
    pub(crate) fn attach(pids: &[u32], file: &Path) -> Result<Trace, String> {
        let mut command = Command::new("strace");
        command.args(["-c", "-f", "-qq", "-o"]).arg(file);
        for pid in pids {
            command.arg("-p").arg(pid.to_string());
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start strace (apt-get install strace): {e}"))?;
        let mut trace = Trace {
            child,
            file: file.to_path_buf(),
        };
        let deadline = Instant::now() + STRACE_LIMIT;
        while !pids.iter().all(|&pid| traced(pid)) {
            if let Ok(Some(status)) = trace.child.try_wait() {
                return Err(format!(
                    "strace exited at once ({status}): ptrace not permitted?"
                ));
            }
            if Instant::now() >= deadline {
                trace.stop();
                return Err(format!("strace did not attach within {STRACE_LIMIT:?}"));
            }
            thread::sleep(Duration::from_millis(10));
        }
        Ok(trace)
    }

    /// Detaches (SIGINT makes strace write its summary) and reads the counts.
    ///
    /// # Errors
    /// strace did not end in time, or its summary cannot be read.
    pub(crate) fn finish(mut self) -> Result<Counts, String> {
        if !self.stop() {
            return Err(format!(
                "strace did not write its summary within {STRACE_LIMIT:?}"
            ));
        }
        let text = fs::read_to_string(&self.file)
            .map_err(|e| format!("cannot read {}: {e}", self.file.display()))?;
        Ok(parse(&text))
    }

    /// Interrupts strace and waits for it (killed after [`STRACE_LIMIT`]); whether it ended by
    /// itself.
    fn stop(&mut self) -> bool {
        let _ = Command::new("kill")
            .arg("-INT")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + STRACE_LIMIT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        false
    }
}

impl Drop for Trace {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Whether every thread of `pid` has a tracer (a process that has exited counts as traced:
/// there is nothing left to wait for).
fn traced(pid: u32) -> bool {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.filter_map(Result::ok).all(|task| {
        fs::read_to_string(task.path().join("status")).map_or(true, |status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("TracerPid:"))
                .is_some_and(|tracer| tracer.trim() != "0")
        })
    })
}

/// The calls per syscall in a `strace -c` summary: the rows between the two dashed rules,
/// `% time, seconds, usecs/call, calls, [errors,] syscall` (the errors column is blank when
/// there were none); the `total` row is left out.
fn parse(text: &str) -> Counts {
    let mut counts = Counts::new();
    let mut rules = 0;
    for line in text.lines() {
        if line.starts_with("------") {
            rules += 1;
            continue;
        }
        if rules != 1 {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        if let (Some(name), Some(Ok(calls))) =
            (fields.last(), fields.get(3).map(|c| c.parse::<u64>()))
        {
            *counts.entry((*name).to_owned()).or_default() += calls;
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_reads_calls_with_and_without_errors_and_skips_the_total() {
        let text = "\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 40.00    0.000040          40      2000      1000 accept4
 30.00    0.000030          30      1000           close
------ ----------- ----------- --------- --------- ----------------
100.00    0.000100                  3000      1000 total
";
        let counts = parse(text);
        assert_eq!(counts.get("accept4"), Some(&2000));
        assert_eq!(counts.get("close"), Some(&1000));
        assert_eq!(counts.len(), 2, "{counts:?}");
    }
}
