//! The columns of the table: a direct connection to the upstreams, and the proxies, each
//! started as a child process from a generated config with one worker thread, the way the goals
//! are stated. A proxy listens on three ports: echo (short, rejected and latency scenarios),
//! bulk (into the TCP sink) and UDP (into the UDP sink; HAProxy has none). A [`Process`] stops
//! its proxy when dropped, on error and panic paths too.

use std::fmt;
use std::fs::{self, File};
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use clap::ValueEnum;

use crate::cpu;
use crate::upstream::Upstreams;

/// How long a proxy may take to accept on its ports.
const START_LIMIT: Duration = Duration::from_secs(10);
/// How long a proxy may take to exit after SIGTERM before it is killed.
const STOP_LIMIT: Duration = Duration::from_secs(3);
/// Sources the proxies refuse (the rejected scenario connects from here).
pub(crate) const BLOCKED: &str = "127.9.0.0/16";

/// Which column.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, ValueEnum)]
pub(crate) enum Kind {
    /// Straight to the upstreams: the baseline.
    Direct,
    /// tollgate, the release binary.
    Tollgate,
    /// HAProxy in `mode tcp`.
    Haproxy,
    /// nginx's `stream` module.
    Nginx,
}

impl Kind {
    /// The column's name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Direct => "direct",
            Kind::Tollgate => "tollgate",
            Kind::Haproxy => "haproxy",
            Kind::Nginx => "nginx",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a column's clients connect.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Endpoints {
    /// Reaches the echo upstream.
    pub(crate) echo: SocketAddr,
    /// Reaches the TCP sink.
    pub(crate) bulk: SocketAddr,
    /// Reaches the UDP sink, if this column carries UDP.
    pub(crate) udp: Option<SocketAddr>,
    /// Whether connections from [`BLOCKED`] are refused.
    pub(crate) rejects: bool,
}

/// One column, ready to measure.
#[derive(Debug)]
pub(crate) struct Peer {
    pub(crate) kind: Kind,
    pub(crate) endpoints: Endpoints,
    process: Option<Process>,
}

impl Peer {
    /// Starts column `kind` in front of `upstreams`, its files in `dir`.
    ///
    /// # Errors
    /// Why it cannot be measured: not installed, a config it refused, an early exit (with the
    /// end of its log), or ports that never accepted.
    pub(crate) fn start(
        kind: Kind,
        upstreams: &Upstreams,
        dir: &Path,
        tollgate: &Path,
    ) -> Result<Peer, String> {
        let ports = Ports::free().map_err(|e| format!("no free port: {e}"))?;
        let (command, endpoints) = match kind {
            Kind::Direct => {
                return Ok(Peer {
                    kind,
                    endpoints: Endpoints {
                        echo: upstreams.echo,
                        bulk: upstreams.sink,
                        udp: Some(upstreams.udp),
                        rejects: false,
                    },
                    process: None,
                });
            }
            Kind::Tollgate => {
                if !tollgate.is_file() {
                    return Err(format!(
                        "{} not found: run `cargo build --release -p tollgate` first (or pass --tollgate PATH)",
                        tollgate.display()
                    ));
                }
                let file = write(dir, "tollgate.toml", &tollgate_config(&ports, upstreams))?;
                let mut command = Command::new(tollgate);
                command.arg("run").arg("--config").arg(file);
                (command, ports.endpoints(true))
            }
            Kind::Haproxy => {
                let binary = installed("haproxy")
                    .ok_or("not installed (apt-get install haproxy); column skipped".to_owned())?;
                let file = write(dir, "haproxy.cfg", &haproxy_config(&ports, upstreams))?;
                let mut command = Command::new(binary);
                command.arg("-db").arg("-f").arg(file);
                let mut endpoints = ports.endpoints(true);
                endpoints.udp = None;
                (command, endpoints)
            }
            Kind::Nginx => {
                let binary = installed("nginx").ok_or(
                    "not installed (apt-get install nginx libnginx-mod-stream); column skipped"
                        .to_owned(),
                )?;
                let file = write(dir, "nginx.conf", &nginx_config(&ports, upstreams, dir))?;
                let mut command = Command::new(binary);
                command
                    .arg("-p")
                    .arg(dir)
                    .arg("-c")
                    .arg(file)
                    .arg("-e")
                    .arg(dir.join("nginx-error.log"));
                (command, ports.endpoints(true))
            }
        };
        let mut process = Process::spawn(kind.name(), command, dir)?;
        process.wait_ready(&[endpoints.echo, endpoints.bulk])?;
        Ok(Peer {
            kind,
            endpoints,
            process: Some(process),
        })
    }

    /// CPU time spent so far by the proxy's processes; `None` for the direct column.
    ///
    /// # Errors
    /// The proxy has exited.
    pub(crate) fn cpu(&self) -> Option<io::Result<Duration>> {
        self.process.as_ref().map(|p| cpu::tree_time(p.child.id()))
    }

    /// An error if the proxy has exited (with the end of its log).
    pub(crate) fn check_alive(&mut self) -> Result<(), String> {
        match &mut self.process {
            Some(process) => process.check_alive(),
            None => Ok(()),
        }
    }
}

/// The ports a proxy listens on, found free by binding port 0 (and released just before the
/// proxy binds them: a race only another process binding at that instant can lose).
#[derive(Debug)]
struct Ports {
    echo: u16,
    bulk: u16,
    udp: u16,
}

impl Ports {
    fn free() -> io::Result<Ports> {
        let echo = TcpListener::bind("127.0.0.1:0")?;
        let bulk = TcpListener::bind("127.0.0.1:0")?;
        let udp = UdpSocket::bind("127.0.0.1:0")?;
        Ok(Ports {
            echo: echo.local_addr()?.port(),
            bulk: bulk.local_addr()?.port(),
            udp: udp.local_addr()?.port(),
        })
    }

    fn endpoints(&self, rejects: bool) -> Endpoints {
        let at = |port| SocketAddr::from(([127, 0, 0, 1], port));
        Endpoints {
            echo: at(self.echo),
            bulk: at(self.bulk),
            udp: Some(at(self.udp)),
            rejects,
        }
    }
}

fn tollgate_config(ports: &Ports, up: &Upstreams) -> String {
    format!(
        r#"# Generated by the load benchmark.
[sketch]
memory = "64MiB"

[proxy]
threads = 1
log_rejections = 0
drain = "1s"

[admin]
enabled = false

[[listener]]
name = "echo"
listen = "127.0.0.1:{echo}"
upstreams = ["{echo_up}"]

[[listener]]
name = "bulk"
listen = "127.0.0.1:{bulk}"
upstreams = ["{sink}"]

[[listener]]
name = "udp"
protocol = "udp"
listen = "127.0.0.1:{udp}"
upstreams = ["{udp_up}"]

# Generous: the proxied scenarios must not be throttled.
[[rule]]
name = "per-source"
limits = [{{ rate = "1000000/10s" }}]

# The rejected scenario connects from here, after one warm-up connection per source.
[[rule]]
name = "blocked"
sources = ["{BLOCKED}"]
limits = [{{ rate = "1/1h" }}]
action = "reset"
"#,
        echo = ports.echo,
        bulk = ports.bulk,
        udp = ports.udp,
        echo_up = up.echo,
        sink = up.sink,
        udp_up = up.udp,
    )
}

fn haproxy_config(ports: &Ports, up: &Upstreams) -> String {
    format!(
        r#"# Generated by the load benchmark.
global
    nbthread 1
    maxconn 4000

defaults
    mode tcp
    timeout connect 3s
    timeout client 30s
    timeout server 30s

frontend echo
    bind 127.0.0.1:{echo}
    tcp-request connection reject if {{ src {BLOCKED} }}
    default_backend echo

backend echo
    server echo {echo_up}

frontend bulk
    bind 127.0.0.1:{bulk}
    default_backend bulk

backend bulk
    server sink {sink}
"#,
        echo = ports.echo,
        bulk = ports.bulk,
        echo_up = up.echo,
        sink = up.sink,
    )
}

/// The stream module ships as a dynamic module in Debian's packages (libnginx-mod-stream).
const NGINX_STREAM_MODULE: &str = "/usr/lib/nginx/modules/ngx_stream_module.so";

fn nginx_config(ports: &Ports, up: &Upstreams, dir: &Path) -> String {
    let load = if Path::new(NGINX_STREAM_MODULE).exists() {
        format!("load_module {NGINX_STREAM_MODULE};")
    } else {
        String::new()
    };
    format!(
        r#"# Generated by the load benchmark.
{load}
worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/nginx-error.log warn;

events {{
    worker_connections 4000;
}}

stream {{
    server {{
        listen 127.0.0.1:{echo};
        deny {BLOCKED};
        proxy_pass {echo_up};
        proxy_half_close on;
    }}
    server {{
        listen 127.0.0.1:{bulk};
        proxy_pass {sink};
        proxy_half_close on;
    }}
    server {{
        listen 127.0.0.1:{udp} udp;
        proxy_pass {udp_up};
        proxy_timeout 10s;
    }}
}}
"#,
        dir = dir.display(),
        echo = ports.echo,
        bulk = ports.bulk,
        udp = ports.udp,
        echo_up = up.echo,
        sink = up.sink,
        udp_up = up.udp,
    )
}

fn write(dir: &Path, name: &str, text: &str) -> Result<PathBuf, String> {
    let path = dir.join(name);
    fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}

/// The path of `program` if it is on `PATH` (or in the sbin directories, where the Debian
/// packages put the proxies and which a non-root `PATH` may lack).
fn installed(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// A proxy running as a child process, its output in a log file. Dropping it stops the proxy
/// and its children: SIGTERM, then SIGKILL after [`STOP_LIMIT`].
#[derive(Debug)]
struct Process {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Process {
    fn spawn(name: &'static str, mut command: Command, dir: &Path) -> Result<Process, String> {
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

    /// Waits until every address accepts a connection, or the process exits, or
    /// [`START_LIMIT`] passes.
    fn wait_ready(&mut self, addresses: &[SocketAddr]) -> Result<(), String> {
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

    fn check_alive(&mut self) -> Result<(), String> {
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

    /// The last lines of the log, to say why a proxy failed.
    fn log_tail(&self) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().rev().take(5).collect();
        if lines.is_empty() {
            return String::new();
        }
        let tail: Vec<&str> = lines.into_iter().rev().collect();
        format!(": {}", tail.join(" | "))
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

fn signal(name: &str, pid: u32) -> io::Result<()> {
    Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|_| ())
}
