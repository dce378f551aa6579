//! A proxy under attack: started fresh for every attack (no counter, penalty or held
//! connection carries over), from the config [`configs`] writes for it.

use std::path::Path;

use tollgate_benches::kind::Kind;
use tollgate_benches::launch::{self, free_tcp_ports, free_udp_ports};
use tollgate_benches::process::{Process, WorkDir};
use tollgate_benches::upstream::Upstreams;

use crate::attacks::Targets;
use crate::configs::{self, Backends, Ports};
use crate::limits::Limits;

/// A running proxy and where it listens.
#[derive(Debug)]
pub(crate) struct Proxy {
    pub(crate) targets: Targets,
    process: Process,
}

impl Proxy {
    /// Starts `kind` in front of `upstreams` under `limits`, and waits until it accepts.
    ///
    /// # Errors
    /// Not installed, a refused config, an early exit, or ports that never accepted.
    pub(crate) fn start(
        kind: Kind,
        limits: &Limits,
        upstreams: &Upstreams,
        dir: &WorkDir,
        tollgate: &Path,
    ) -> Result<Proxy, String> {
        let tcp = free_tcp_ports(3).map_err(|e| format!("no free port: {e}"))?;
        let udp = free_udp_ports(1).map_err(|e| format!("no free port: {e}"))?;
        let ports = Ports {
            front: tcp[0],
            balanced: tcp[1],
            admin: tcp[2],
            udp: udp[0],
        };
        let backends = Backends {
            echo: upstreams.echo,
            udp_echo: upstreams.udp_echo,
        };
        let config = match kind {
            Kind::Tollgate => configs::tollgate(limits, &ports, &backends),
            Kind::Haproxy => configs::haproxy(limits, &ports, &backends),
            Kind::Nginx => configs::nginx(limits, &ports, &backends, dir.path()),
            Kind::Direct => return Err("direct: not a proxy, nothing to attack".to_owned()),
        };
        let mut process = launch::start(kind, &config, dir, tollgate)?;
        let targets = Targets {
            front: Ports::at(ports.front),
            balanced: Ports::at(ports.balanced),
            udp: Ports::at(ports.udp),
            admin: Ports::at(ports.admin),
        };
        process.wait_ready(&[targets.front, targets.balanced, targets.admin])?;
        Ok(Proxy { targets, process })
    }

    /// The proxy's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// An error if the proxy has exited (with the end of its log).
    pub(crate) fn check_alive(&mut self) -> Result<(), String> {
        self.process.check_alive()
    }

    /// Lines the proxy has logged.
    pub(crate) fn log_lines(&self) -> usize {
        self.process.log_lines()
    }
}
