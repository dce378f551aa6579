//! One cluster node as a real `tollgate run` process: the config the tool writes for it, and
//! what its admin endpoint's `/metrics` says.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use tollgate_benches::launch::{free_tcp_ports, free_udp_ports};
use tollgate_benches::process::{Process, WorkDir};

/// The per-source limit: `LIMIT` events (datagrams or connections) per period.
pub(crate) const LIMIT: u64 = 100;
/// Node names, also their log files' names.
pub(crate) const NAMES: [&str; 3] = ["node-0", "node-1", "node-2"];
/// How long a `/metrics` scrape may take.
const SCRAPE_LIMIT: Duration = Duration::from_secs(2);

/// Where the nodes find Redis: one server, or sentinels naming the master.
#[derive(Debug, Clone)]
pub(crate) enum Discovery {
    /// `redis = [ADDRESS]`.
    Server(SocketAddr),
    /// `sentinels = [...]`, `master = NAME`.
    Sentinels(Vec<SocketAddr>, &'static str),
}

/// What every node of one run shares.
#[derive(Debug, Clone)]
pub(crate) struct Setup {
    /// Where Redis is.
    pub(crate) discovery: Discovery,
    /// The file holding Redis's password.
    pub(crate) password_file: std::path::PathBuf,
    /// The cluster's `sync`.
    pub(crate) sync: String,
    /// The limit's period (`LIMIT` per it).
    pub(crate) per: String,
    /// The UDP upstream (a sink).
    pub(crate) udp_upstream: SocketAddr,
    /// The TCP upstream (an echo).
    pub(crate) tcp_upstream: SocketAddr,
}

/// A running node; dropping it stops the process.
#[derive(Debug)]
pub(crate) struct Node {
    name: &'static str,
    process: Process,
    /// Its UDP listener (the load).
    pub(crate) udp: SocketAddr,
    /// Its TCP listener (the source over its limit).
    pub(crate) tcp: SocketAddr,
    /// Its admin endpoint.
    pub(crate) admin: SocketAddr,
}

impl Node {
    /// Starts node `index` of `setup` and waits until its listeners and admin accept.
    ///
    /// # Errors
    /// No free port, the config cannot be written, or the process exits or does not come up
    /// (the message has the end of its log).
    pub(crate) fn start(
        index: usize,
        setup: &Setup,
        dir: &WorkDir,
        tollgate: &Path,
    ) -> Result<Node, String> {
        let name = NAMES[index];
        let tcp_ports = free_tcp_ports(2).map_err(|e| format!("no free TCP port: {e}"))?;
        let udp_ports = free_udp_ports(1).map_err(|e| format!("no free UDP port: {e}"))?;
        let (Some(&tcp), Some(&admin), Some(&udp)) =
            (tcp_ports.first(), tcp_ports.get(1), udp_ports.first())
        else {
            return Err("fewer free loopback ports than asked for".to_owned());
        };
        let (tcp, admin, udp) = (loopback(tcp), loopback(admin), loopback(udp));
        let file = dir.write(
            &format!("{name}.toml"),
            &config(name, setup, udp, tcp, admin),
        )?;
        let mut command = Command::new(tollgate);
        command
            .arg("run")
            .arg("--config")
            .arg(file)
            .env("RUST_LOG", "warn");
        let mut process = Process::spawn(name, command, dir.path())?;
        process.wait_ready(&[admin, tcp])?;
        Ok(Node {
            name,
            process,
            udp,
            tcp,
            admin,
        })
    }

    /// The process id.
    #[must_use]
    pub(crate) fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Its `/metrics` now.
    ///
    /// # Errors
    /// The process exited, or the scrape failed or timed out.
    pub(crate) fn metrics(&mut self) -> Result<Metrics, String> {
        self.process.check_alive()?;
        scrape(self.admin).map_err(|e| format!("scraping {} at {}: {e}", self.name, self.admin))
    }
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// The config of node `name`: the admin endpoint, a UDP listener to the sink (the load), a TCP
/// listener to the echo (the source over its limit), `[cluster]`, and one rule: `LIMIT` per
/// period per address.
fn config(
    name: &str,
    setup: &Setup,
    udp: SocketAddr,
    tcp: SocketAddr,
    admin: SocketAddr,
) -> String {
    let discovery = match &setup.discovery {
        Discovery::Server(address) => format!("redis = [\"{address}\"]"),
        Discovery::Sentinels(sentinels, master) => {
            let listed: Vec<String> = sentinels.iter().map(|s| format!("\"{s}\"")).collect();
            format!("sentinels = [{}]\nmaster = \"{master}\"", listed.join(", "))
        }
    };
    format!(
        "# Written by the cluster benchmark (--processes).
[admin]
listen = \"{admin}\"

[sketch]
memory = \"16MiB\"

[[listener]]
name = \"load\"
protocol = \"udp\"
listen = \"{udp}\"
upstreams = [\"{udp_upstream}\"]
session_timeout = \"5s\"

[[listener]]
name = \"front\"
listen = \"{tcp}\"
upstreams = [\"{tcp_upstream}\"]

[cluster]
{discovery}
password_file = \"{password}\"
node = \"{name}\"
name = \"bench\"
sync = \"{sync}\"

[[rule]]
name = \"per-source\"
limits = [{{ rate = \"{LIMIT}/{per}\" }}]
",
        udp_upstream = setup.udp_upstream,
        tcp_upstream = setup.tcp_upstream,
        password = setup.password_file.display(),
        sync = setup.sync,
        per = setup.per,
    )
}

/// One scrape of `/metrics`.
#[derive(Debug, Clone)]
pub(crate) struct Metrics(String);

impl Metrics {
    /// The sum of the samples of `name` (exactly that name, any labels) whose labels contain
    /// every one of `labels` (`key="value"`); 0 if there is none.
    #[must_use]
    pub(crate) fn sum(&self, name: &str, labels: &[&str]) -> f64 {
        self.0
            .lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| {
                let rest = line.strip_prefix(name)?;
                let (series, value) = rest.rsplit_once(' ')?;
                let exact = series.is_empty() || series.starts_with('{');
                (exact && labels.iter().all(|l| series.contains(l))).then_some(value)
            })
            .filter_map(|value| value.parse::<f64>().ok())
            .sum()
    }

    /// `tollgate_cluster_alone`: 1 while the node limits alone.
    #[must_use]
    pub(crate) fn alone(&self) -> bool {
        self.sum("tollgate_cluster_alone", &[]) > 0.0
    }

    /// `tollgate_cluster_syncs_total`.
    #[must_use]
    pub(crate) fn syncs(&self) -> f64 {
        self.sum("tollgate_cluster_syncs_total", &[])
    }
}

fn scrape(admin: SocketAddr) -> std::io::Result<Metrics> {
    let mut stream = TcpStream::connect_timeout(&admin, SCRAPE_LIMIT)?;
    stream.set_read_timeout(Some(SCRAPE_LIMIT))?;
    stream.set_write_timeout(Some(SCRAPE_LIMIT))?;
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n")?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    if !text.starts_with("HTTP/1.1 200") {
        let status = text.lines().next().unwrap_or_default().to_owned();
        return Err(std::io::Error::other(format!("answered {status:?}")));
    }
    Ok(Metrics(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_match_the_whole_name_and_every_label() {
        let metrics = Metrics(
            "# HELP tollgate_cluster_alone x\ntollgate_cluster_alone 1\n\
             tollgate_cluster_alone_seconds 7\n\
             tollgate_decisions_total{listener=\"load\",verdict=\"allowed\"} 5\n\
             tollgate_decisions_total{listener=\"load\",verdict=\"throttled\"} 2\n\
             tollgate_decisions_total{listener=\"front\",verdict=\"allowed\"} 11\n"
                .to_owned(),
        );
        assert_eq!(metrics.sum("tollgate_cluster_alone", &[]), 1.0);
        assert!(metrics.alone());
        assert_eq!(
            metrics.sum("tollgate_decisions_total", &["listener=\"load\""]),
            7.0
        );
        assert_eq!(
            metrics.sum(
                "tollgate_decisions_total",
                &["listener=\"load\"", "verdict=\"allowed\""]
            ),
            5.0
        );
        assert_eq!(metrics.sum("tollgate_missing", &[]), 0.0);
    }
}
