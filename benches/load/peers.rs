//! The columns of the table: a direct connection to the upstreams, and the proxies, each
//! started as a child process from a generated config with one worker thread (the way the goals
//! are stated; `--proxy-threads` gives each more), pinned to a CPU if asked. A proxy listens on
//! three ports: echo (short, rejected and latency scenarios), bulk (into the TCP sink) and UDP
//! (into the UDP sink; HAProxy has none). A [`Process`] stops
//! its proxy when dropped, on error and panic paths too.

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use tollgate_benches::cpu;
use tollgate_benches::kind::Kind;
use tollgate_benches::launch::{self, free_tcp_ports, free_udp_ports, nginx_head};
use tollgate_benches::process::{Process, WorkDir};
use tollgate_benches::upstream::Upstreams;

use crate::pin;

/// Sources the proxies refuse (the rejected scenario connects from here).
pub(crate) const BLOCKED: &str = "127.9.0.0/16";

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

/// How every proxy column runs: its worker threads and, if pinned, its CPU.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Setup {
    /// Worker threads (tollgate `threads`, HAProxy `nbthread`, nginx `worker_processes`).
    pub(crate) threads: usize,
    /// The CPU each proxy is pinned to (`--proxy-cpu`).
    pub(crate) cpu: Option<usize>,
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
        dir: &WorkDir,
        tollgate: &Path,
        setup: Setup,
    ) -> Result<Peer, String> {
        let threads = setup.threads.max(1);
        let ports = Ports::free().map_err(|e| format!("no free port: {e}"))?;
        let (config, endpoints) = match kind {
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
            Kind::Tollgate => (
                tollgate_config(&ports, upstreams, threads),
                ports.endpoints(true),
            ),
            Kind::Haproxy => {
                let mut endpoints = ports.endpoints(true);
                endpoints.udp = None;
                (haproxy_config(&ports, upstreams, threads), endpoints)
            }
            Kind::Nginx => (
                nginx_config(&ports, upstreams, dir.path(), threads),
                ports.endpoints(true),
            ),
        };
        let mut process = launch::start(kind, &config, dir, tollgate)?;
        process.wait_ready(&[endpoints.echo, endpoints.bulk])?;
        if let Some(cpu) = setup.cpu {
            // Ready: every worker process and thread it starts up front exists by now.
            pin::pin_tree(process.pid(), cpu)
                .map_err(|e| format!("cannot pin to CPU {cpu}: {e}"))?;
        }
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
        self.process.as_ref().map(|p| cpu::tree_time(p.pid()))
    }

    /// The proxy's process id; `None` for the direct column.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(Process::pid)
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
        let tcp = free_tcp_ports(2)?;
        let udp = free_udp_ports(1)?;
        Ok(Ports {
            echo: tcp[0],
            bulk: tcp[1],
            udp: udp[0],
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

fn tollgate_config(ports: &Ports, up: &Upstreams, threads: usize) -> String {
    format!(
        r#"# Generated by the load benchmark.
[sketch]
memory = "64MiB"

[proxy]
threads = {threads}
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

fn haproxy_config(ports: &Ports, up: &Upstreams, threads: usize) -> String {
    format!(
        r#"# Generated by the load benchmark.
global
    nbthread {threads}
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

fn nginx_config(ports: &Ports, up: &Upstreams, dir: &Path, threads: usize) -> String {
    // The shared head says how many workers; this tool says it instead.
    let mut head: String = nginx_head("load benchmark", dir, 4_000)
        .lines()
        .filter(|line| !line.starts_with("worker_processes"))
        .map(|line| format!("{line}\n"))
        .collect();
    head.push_str(&format!("worker_processes {threads};\n"));
    format!(
        r#"{head}
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
        head = head,
        echo = ports.echo,
        bulk = ports.bulk,
        udp = ports.udp,
        echo_up = up.echo,
        sink = up.sink,
        udp_up = up.udp,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configs(threads: usize) -> (String, String, String) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let upstreams = Upstreams::start(&runtime).expect("upstreams on loopback");
        let ports = Ports::free().expect("free ports");
        let dir = WorkDir::create("load-test").expect("a work dir");
        (
            tollgate_config(&ports, &upstreams, threads),
            haproxy_config(&ports, &upstreams, threads),
            nginx_config(&ports, &upstreams, dir.path(), threads),
        )
    }

    #[test]
    fn every_proxy_is_given_the_worker_threads_asked_for() {
        let (tollgate, haproxy, nginx) = configs(2);
        assert!(tollgate.contains("\nthreads = 2\n"), "{tollgate}");
        assert!(haproxy.contains("\n    nbthread 2\n"), "{haproxy}");
        // Said once: nginx refuses a directive given twice.
        let workers: Vec<&str> = nginx
            .lines()
            .filter(|line| line.starts_with("worker_processes"))
            .collect();
        assert_eq!(workers, ["worker_processes 2;"], "{nginx}");
    }
}
