//! How each proxy is started from a config file the tool wrote: the program, where it is
//! installed, and its arguments. Ports are found free by binding port 0 and released just
//! before the proxy binds them: a race only another process binding at that instant can lose.

use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::{env, io};

use crate::kind::Kind;
use crate::process::{Process, WorkDir};

/// The stream module ships as a dynamic module in Debian's packages (libnginx-mod-stream).
pub const NGINX_STREAM_MODULE: &str = "/usr/lib/nginx/modules/ngx_stream_module.so";

/// The `load_module` line an nginx config needs for `stream`, or nothing when it is built in.
#[must_use]
pub fn nginx_load_module() -> String {
    if Path::new(NGINX_STREAM_MODULE).exists() {
        format!("load_module {NGINX_STREAM_MODULE};")
    } else {
        String::new()
    }
}

/// The tollgate binary: `explicit`, or `tollgate` next to this executable (both tools are built
/// into `target/release/` beside it). Whether it exists is checked when it is started.
///
/// # Errors
/// This executable's directory is unknown.
pub fn tollgate_binary(explicit: Option<&Path>) -> io::Result<PathBuf> {
    match explicit {
        Some(path) => Ok(path.to_path_buf()),
        None => env::current_exe()?
            .parent()
            .map(|dir| dir.join("tollgate"))
            .ok_or_else(|| io::Error::other("cannot locate this executable's directory")),
    }
}

/// The path of `program` if it is on `PATH` (or in the sbin directories, where the Debian
/// packages put the proxies and which a non-root `PATH` may lack).
#[must_use]
pub fn installed(program: &str) -> Option<PathBuf> {
    let path = env::var_os("PATH").unwrap_or_default();
    env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// Writes `config` into `dir` and starts proxy `kind` on it (not waiting for it to listen:
/// [`Process::wait_ready`] does). `tollgate` is the tollgate binary.
///
/// # Errors
/// The proxy is not installed (the message says how to install it), `kind` is
/// [`Kind::Direct`], or the file or process cannot be made.
pub fn start(kind: Kind, config: &str, dir: &WorkDir, tollgate: &Path) -> Result<Process, String> {
    let command = match kind {
        Kind::Direct => return Err("the direct column runs no proxy".to_owned()),
        Kind::Tollgate => {
            if !tollgate.is_file() {
                return Err(format!(
                    "{} not found: run `cargo build --release -p tollgate` first (or pass --tollgate PATH)",
                    tollgate.display()
                ));
            }
            let file = dir.write("tollgate.toml", config)?;
            let mut command = Command::new(tollgate);
            command.arg("run").arg("--config").arg(file);
            command
        }
        Kind::Haproxy => {
            let binary = installed("haproxy")
                .ok_or("not installed (apt-get install haproxy); column skipped".to_owned())?;
            let file = dir.write("haproxy.cfg", config)?;
            let mut command = Command::new(binary);
            command.arg("-db").arg("-f").arg(file);
            command
        }
        Kind::Nginx => {
            let binary = installed("nginx").ok_or(
                "not installed (apt-get install nginx libnginx-mod-stream); column skipped"
                    .to_owned(),
            )?;
            let file = dir.write("nginx.conf", config)?;
            let mut command = Command::new(binary);
            command
                .arg("-p")
                .arg(dir.path())
                .arg("-c")
                .arg(file)
                .arg("-e")
                .arg(dir.path().join("nginx-error.log"));
            command
        }
    };
    Process::spawn(kind.name(), command, dir.path())
}

/// `count` distinct free TCP ports on 127.0.0.1 (all held until all are found).
///
/// # Errors
/// No port could be bound.
pub fn free_tcp_ports(count: usize) -> io::Result<Vec<u16>> {
    let held = (0..count)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<io::Result<Vec<_>>>()?;
    held.iter().map(|l| Ok(l.local_addr()?.port())).collect()
}

/// `count` distinct free UDP ports on 127.0.0.1 (all held until all are found).
///
/// # Errors
/// No port could be bound.
pub fn free_udp_ports(count: usize) -> io::Result<Vec<u16>> {
    let held = (0..count)
        .map(|_| UdpSocket::bind("127.0.0.1:0"))
        .collect::<io::Result<Vec<_>>>()?;
    held.iter().map(|s| Ok(s.local_addr()?.port())).collect()
}
