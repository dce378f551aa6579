//! The real `tollgate run` binary as a child process, for tests that need their own process
//! limits (open files) or their own memory figure (RSS).

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A running `tollgate run`, killed when dropped.
pub(crate) struct Proxy {
    child: Child,
    /// Its TCP listener.
    pub(crate) front: SocketAddr,
    /// Its admin endpoint.
    pub(crate) admin: SocketAddr,
    /// Its config file.
    pub(crate) path: PathBuf,
    /// Whether its stderr is copied to the test's when it ends (the test did not ask to
    /// read it).
    show_log: bool,
    /// The directory of its config and stderr, removed after the child is killed (fields
    /// drop after `Drop::drop`).
    _dir: tempfile::TempDir,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if self.show_log {
            eprint!("{}", self.log());
        }
    }
}

/// A loopback port free at the time of asking.
pub(crate) fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// Waits until something accepts connections at `admin` (polling, bounded: a guard against a
/// hang, not a timing assertion; a debug build starting while the rest of the suite runs can
/// take seconds).
///
/// # Errors
/// `child`'s exit status, if it exits first.
pub(crate) fn until_answering(child: &mut Child, admin: SocketAddr) -> Result<(), ExitStatus> {
    let deadline = Instant::now() + 3 * super::BOUND;
    while std::net::TcpStream::connect(admin).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(status);
        }
        assert!(Instant::now() < deadline, "{admin} did not answer");
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Waits (polling, bounded) for `child` to exit; its exit status.
pub(crate) fn exited(child: &mut Child) -> ExitStatus {
    let deadline = Instant::now() + super::BOUND;
    loop {
        if let Some(status) = child.try_wait().expect("the child's status") {
            return status;
        }
        assert!(Instant::now() < deadline, "the child did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A `tollgate run` to start for a test: its config and how to start it. [`Launch::start`]
/// starts it.
pub(crate) struct Launch<'a> {
    name: &'a str,
    admin_body: &'a str,
    listener_body: &'a str,
    rest: &'a str,
    shell: String,
    quiet: bool,
}

impl<'a> Launch<'a> {
    /// `tollgate run` for test `name` (its files' folder) on a config of `listener_body` (the
    /// listener's lines but `name` and `listen`) and `rest` (what follows the listener);
    /// `[admin]` and the listener's `name`/`listen` lines are added. Its stderr is kept in a
    /// file ([`Proxy::log`]) and shown on the test's stderr when it ends.
    pub(crate) fn new(name: &'a str, listener_body: &'a str, rest: &'a str) -> Launch<'a> {
        Launch {
            name,
            admin_body: "",
            listener_body,
            rest,
            shell: String::new(),
            quiet: false,
        }
    }

    /// With `body` (such as a `token_env` line) in `[admin]`.
    pub(crate) fn admin(mut self, body: &'a str) -> Launch<'a> {
        self.admin_body = body;
        self
    }

    /// With `shell` (such as `"ulimit -Sn 256 && "`) run before the proxy, in the same `sh`.
    pub(crate) fn shell(mut self, shell: impl Into<String>) -> Launch<'a> {
        self.shell = shell.into();
        self
    }

    /// Without showing its stderr on the test's when it ends: the test reads it itself.
    pub(crate) fn quiet(mut self) -> Launch<'a> {
        self.quiet = true;
        self
    }

    /// Starts it; returns once its admin endpoint answers.
    ///
    /// The ports are free when picked but not held until the proxy binds them: another test
    /// (or process) may take one meanwhile. A proxy that could not bind is started again on
    /// fresh ports, a few times at most.
    ///
    /// # Panics
    /// If the proxy exits before it comes up, for another reason or too often.
    pub(crate) fn start(&self) -> Proxy {
        const ATTEMPTS: usize = 5;
        for attempt in 1..=ATTEMPTS {
            match self.try_start() {
                Ok(proxy) => return proxy,
                Err(output) if output.contains("Address already in use") && attempt < ATTEMPTS => {
                    eprintln!("a port was taken before the proxy bound it; again:\n{output}");
                }
                Err(output) => panic!("the proxy exited before it came up: {output}"),
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    /// One start: the proxy once its admin answers, or its exit status and stderr.
    fn try_start(&self) -> Result<Proxy, String> {
        let Launch {
            name,
            admin_body,
            listener_body,
            rest,
            ref shell,
            quiet,
        } = *self;
        let (front, admin) = (free_port(), free_port());
        let config = format!(
            "[admin]\nlisten = \"{admin}\"\n{admin_body}\n\n[[listener]]\nname = \"front\"\nlisten = \"{front}\"\n{listener_body}\n\n{rest}\n"
        );
        let dir = super::scratch(name);
        let path: PathBuf = dir.path().join("tollgate.toml");
        std::fs::write(&path, config).unwrap();
        let binary = env!("CARGO_BIN_EXE_tollgate");
        let stderr = std::fs::File::create(dir.path().join("stderr.log")).unwrap();
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!("{shell}exec \"$0\" run --config \"$1\""))
            .arg(binary)
            .arg(&path)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::from(stderr))
            .spawn()
            .expect("tollgate starts");
        let mut proxy = Proxy {
            child,
            front,
            admin,
            path,
            show_log: !quiet,
            _dir: dir,
        };
        match until_answering(&mut proxy.child, admin) {
            Ok(()) => Ok(proxy),
            Err(status) => {
                proxy.show_log = false;
                Err(format!("({status}):\n{}", proxy.log()))
            }
        }
    }
}

impl Proxy {
    /// Sends `signal` (a `kill -s` name such as `HUP`) to the child.
    pub(crate) fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args(["-s", signal, &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits (bounded) for the child to exit; its exit status.
    pub(crate) fn wait_exit(&mut self) -> ExitStatus {
        exited(&mut self.child)
    }

    /// What the child wrote to stderr so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.path.with_file_name("stderr.log")).unwrap_or_default()
    }

    /// The child's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident memory of the child, in KiB.
    pub(crate) fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS")
    }

    /// The whole answer (status line, headers and body) of the admin endpoint to
    /// `GET path`.
    pub(crate) fn get(&self, path: &str) -> String {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(self.admin).unwrap();
        stream.set_read_timeout(Some(super::BOUND)).unwrap();
        stream
            .write_all(
                format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").as_bytes(),
            )
            .unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        text
    }

    /// The value of the metric line starting with `prefix`, from the admin endpoint.
    pub(crate) fn metric(&self, prefix: &str) -> f64 {
        self.get("/metrics")
            .lines()
            .find(|line| line.starts_with(prefix))
            .and_then(|line| line.rsplit(' ').next())
            .map_or(0.0, |value| value.parse().unwrap())
    }
}

/// One source sends `total` connections over `period`, paced evenly and spread in turn over
/// the processes; how many were served. `steady`: an attempt that a loaded machine delays
/// pushes the next ones back rather than into a burst (a source meant to stay under its
/// limit then does in every window).
pub(crate) async fn flood(
    processes: &[Proxy],
    from: &str,
    total: u64,
    period: Duration,
    steady: bool,
) -> u64 {
    let mut pace = tokio::time::interval(period / u32::try_from(total).unwrap());
    if steady {
        pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    }
    let mut served = 0;
    for i in 0..total {
        pace.tick().await;
        let front = processes[i as usize % processes.len()].front;
        let wire = super::attempt(from, front).await;
        assert!(
            matches!(
                wire,
                super::Wire::Echoed | super::Wire::Reset | super::Wire::Closed(_)
            ),
            "{wire:?}"
        );
        served += u64::from(wire == super::Wire::Echoed);
    }
    served
}

/// What the cluster's processes count against sharing: Redis errors and clock refusals, all
/// of them together.
fn lapses(processes: &[Proxy]) -> f64 {
    processes
        .iter()
        .map(|p| {
            p.metric("tollgate_cluster_redis_errors_total")
                + p.metric("tollgate_cluster_clock_refusals_total")
        })
        .sum()
}

/// [`flood`] from each of `sources` in turn (each a fresh source: a flood leaves its source
/// penalised) until one ran with every process in the cluster throughout. A process whose
/// Redis round timed out, or whose clock reading was off, limits alone for that round: a
/// flood during which that happened (seen on a machine loaded 8 times over) measures the
/// machine, not the sharing, and is said so and run again. Returns how many were served and
/// the source that sent them.
///
/// # Panics
/// If every flood had a process alone: the sharing was never measured, and the test must not
/// pass.
pub(crate) async fn shared_flood<'a>(
    processes: &[Proxy],
    sources: &[&'a str],
    total: u64,
    period: Duration,
) -> (u64, &'a str) {
    for &source in sources {
        let before = lapses(processes);
        let served = flood(processes, source, total, period, false).await;
        let during = lapses(processes) - before;
        if during == 0.0 {
            return (served, source);
        }
        println!(
            "flood from {source} void: {served} of {total} served while the processes counted \
             {during} Redis errors or clock refusals (a process limited alone)"
        );
    }
    panic!("every flood ({sources:?}) had a process alone: the sharing was never measured");
}
