//! A proxy under test as a child process, and the scratch directory its files live in. A
//! [`Process`] stops its proxy (and the proxy's children) when dropped, on error and panic
//! paths too, so no run leaves a proxy behind.

use std::fs::{self, File};
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::cpu;

/// How long a proxy may take to accept on its ports.
pub const START_LIMIT: Duration = Duration::from_secs(10);
/// How long a proxy may take to exit after SIGTERM before it is killed.
pub const STOP_LIMIT: Duration = Duration::from_secs(3);

/// A proxy running as a child process, its output in a log file. Dropping it stops the proxy
/// and its children: SIGTERM, then SIGKILL after [`STOP_LIMIT`].
#[derive(Debug)]
pub struct Process {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Process {
    /// Starts `command` with its output in `dir/NAME.log`.
    ///
    /// # Errors
    /// The log cannot be created or the program cannot be started.
    pub fn spawn(name: &'static str, mut command: Command, dir: &Path) -> Result<Process, String> {
        let log = dir.join(format!("{name}.log"));
        let file =
            File::create(&log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let err = file
            .try_clone()
            .map_err(|e| format!("cannot open {}: {e}", log.display()))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot start {:?}: {e}", command.get_program()))?;
        Ok(Process { name, child, log })
    }

    /// The process id.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until every address accepts a connection, or the process exits, or
    /// [`START_LIMIT`] passes.
    ///
    /// # Errors
    /// The process exited (with the end of its log) or did not accept in time.
    pub fn wait_ready(&mut self, addresses: &[SocketAddr]) -> Result<(), String> {
        let deadline = Instant::now() + START_LIMIT;
        for address in addresses {
            loop {
                self.check_alive()?;
                if TcpStream::connect_timeout(address, Duration::from_millis(200)).is_ok() {
                    break;
                }
                if Instant::now() >= deadline {
                    return Err(format!(
                        "{} did not accept on {address} within {START_LIMIT:?}{}",
                        self.name,
                        self.log_tail()
                    ));
                }
                thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(())
    }

    /// An error if the process has exited, with the end of its log.
    ///
    /// # Errors
    /// The process has exited or cannot be waited for.
    pub fn check_alive(&mut self) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(format!(
                "{} exited ({status}){}",
                self.name,
                self.log_tail()
            )),
            Err(err) => Err(format!("{}: cannot wait: {err}", self.name)),
        }
    }

    /// The last lines of the log, to say why a proxy failed (empty, or `: a | b | c`).
    #[must_use]
    pub fn log_tail(&self) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().rev().take(5).collect();
        if lines.is_empty() {
            return String::new();
        }
        let tail: Vec<&str> = lines.into_iter().rev().collect();
        format!(": {}", tail.join(" | "))
    }

    /// Lines of the log so far.
    #[must_use]
    pub fn log_lines(&self) -> usize {
        fs::read_to_string(&self.log).map_or(0, |text| text.lines().count())
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let pid = self.child.id();
        let children = cpu::descendants(pid);
        // Without unsafe code there is no kill(2) but SIGKILL (`Child::kill`); kill(1) sends
        // SIGTERM, so nginx's master stops its workers and tollgate drains.
        let _ = signal("TERM", pid);
        let deadline = Instant::now() + STOP_LIMIT;
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            thread::sleep(Duration::from_millis(20));
        }
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        for child in children {
            if Path::new(&format!("/proc/{child}")).exists() {
                let _ = signal("KILL", child);
            }
        }
    }
}

/// Sends signal `name` (`TERM`, `KILL`) to `pid` with kill(1).
fn signal(name: &str, pid: u32) -> io::Result<()> {
    Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|_| ())
}

/// A scratch directory for configs and logs, removed on drop.
#[derive(Debug)]
pub struct WorkDir(tempfile::TempDir);

impl WorkDir {
    /// Creates a fresh `$TMPDIR/tollgate-TOOL-XXXXXX` (not named after the process id: ids
    /// are reused, and a directory a killed run left would hold its files).
    ///
    /// # Errors
    /// The directory cannot be created.
    pub fn create(tool: &str) -> io::Result<WorkDir> {
        tempfile::Builder::new()
            .prefix(&format!("tollgate-{tool}-"))
            .tempdir()
            .map(WorkDir)
    }

    /// The directory.
    #[must_use]
    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// Writes `text` to the file `name` in the directory.
    ///
    /// # Errors
    /// The file cannot be written (the message names it).
    pub fn write(&self, name: &str, text: &str) -> Result<PathBuf, String> {
        let path = self.path().join(name);
        fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok(path)
    }
}
