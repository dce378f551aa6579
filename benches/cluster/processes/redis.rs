//! The Redis side of the three-process run, as local child processes: a password-protected
//! `redis-server`, a replica of it, and sentinels watching it. Each is a
//! [`tollgate_benches::process::Process`], so it is stopped when dropped, on error and panic
//! paths too.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tollgate_benches::launch::{free_tcp_ports, installed};
use tollgate_benches::process::{Process, WorkDir};

/// The master name the sentinels monitor, and the nodes ask them for.
pub(crate) const MASTER_NAME: &str = "m";
/// How long a sentinel waits before it calls the master down (`down-after-milliseconds`).
pub(crate) const DOWN_AFTER: Duration = Duration::from_millis(500);
/// How long a Redis process may take to answer a PING after it starts.
const START_LIMIT: Duration = Duration::from_secs(10);

/// One Redis process (server or sentinel) on a loopback port.
#[derive(Debug)]
pub(crate) struct Redis {
    process: Process,
    /// Where it listens.
    pub(crate) address: SocketAddr,
    /// Its `requirepass` (sentinels have none).
    password: Option<String>,
}

impl Redis {
    /// A server on a free port that requires `password`, snapshots off, its files in `dir`.
    ///
    /// # Errors
    /// `redis-server` is not installed (the message says how to install it), or does not
    /// answer within its start limit (the message has the end of its log).
    pub(crate) fn server(
        name: &'static str,
        dir: &WorkDir,
        password: &str,
    ) -> Result<Redis, String> {
        Redis::spawn(name, dir, password, &[])
    }

    /// A replica of `master`, logging in to it with the same password.
    ///
    /// # Errors
    /// As [`Redis::server`].
    pub(crate) fn replica_of(
        name: &'static str,
        dir: &WorkDir,
        master: &Redis,
        password: &str,
    ) -> Result<Redis, String> {
        let port = master.address.port().to_string();
        Redis::spawn(
            name,
            dir,
            password,
            &["--replicaof", "127.0.0.1", &port, "--masterauth", password],
        )
    }

    /// A sentinel on a free port watching `master` as [`MASTER_NAME`] (quorum 2, down after
    /// [`DOWN_AFTER`], failover timeout 3 s), logging in to it with `password`; its config in
    /// `dir`, which it rewrites.
    ///
    /// # Errors
    /// As [`Redis::server`].
    pub(crate) fn sentinel_of(
        name: &'static str,
        dir: &WorkDir,
        master: &Redis,
        password: &str,
    ) -> Result<Redis, String> {
        let binary = binary()?;
        let port = free_port()?;
        let config = dir.write(
            &format!("{name}.conf"),
            &format!(
                "port {port}\nbind 127.0.0.1\ndir {dir}\n\
                 sentinel monitor {MASTER_NAME} 127.0.0.1 {master} 2\n\
                 sentinel auth-pass {MASTER_NAME} {password}\n\
                 sentinel down-after-milliseconds {MASTER_NAME} {down}\n\
                 sentinel failover-timeout {MASTER_NAME} 3000\n",
                dir = dir.path().display(),
                master = master.address.port(),
                down = DOWN_AFTER.as_millis(),
            ),
        )?;
        let mut command = Command::new(binary);
        command.arg(config).arg("--sentinel");
        Redis::wait(name, command, dir, port, None)
    }

    fn spawn(
        name: &'static str,
        dir: &WorkDir,
        password: &str,
        extra: &[&str],
    ) -> Result<Redis, String> {
        let binary = binary()?;
        let port = free_port()?;
        let mut command = Command::new(binary);
        command
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--requirepass", password])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--dbfilename", &format!("{name}.rdb")])
            .arg("--dir")
            .arg(dir.path())
            .args(extra);
        Redis::wait(name, command, dir, port, Some(password))
    }

    fn wait(
        name: &'static str,
        command: Command,
        dir: &WorkDir,
        port: u16,
        password: Option<&str>,
    ) -> Result<Redis, String> {
        let mut redis = Redis {
            process: Process::spawn(name, command, dir.path())?,
            address: SocketAddr::from(([127, 0, 0, 1], port)),
            password: password.map(str::to_owned),
        };
        let deadline = Instant::now() + START_LIMIT;
        while !redis.answers() {
            redis.process.check_alive()?;
            if Instant::now() >= deadline {
                return Err(format!(
                    "{name} did not answer on port {port} within {START_LIMIT:?}{}",
                    redis.process.log_tail()
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
        Ok(redis)
    }

    /// Whether it answers a PING (within 200 ms), logging in with its password.
    fn answers(&self) -> bool {
        let Ok(client) = client(self.address, self.password.as_deref()) else {
            return false;
        };
        let pong: Option<String> = client
            .get_connection_with_timeout(Duration::from_millis(200))
            .ok()
            .and_then(|mut c| redis::cmd("PING").query(&mut c).ok());
        pong.is_some()
    }

    /// Empties it (`FLUSHALL`), so a run starts from no shared counts.
    ///
    /// # Errors
    /// It did not answer or refused.
    pub(crate) fn flush(&self) -> Result<(), String> {
        let mut connection = client(self.address, self.password.as_deref())?
            .get_connection_with_timeout(Duration::from_secs(2))
            .map_err(|e| format!("connecting to Redis at {}: {e}", self.address))?;
        redis::cmd("FLUSHALL")
            .query::<()>(&mut connection)
            .map_err(|e| format!("FLUSHALL at {}: {e}", self.address))
    }

    /// Kills it at once (SIGKILL: a crash, not a shutdown); dropping it afterwards reaps it.
    pub(crate) fn crash(&self) {
        let _ = Command::new("kill")
            .arg("-KILL")
            .arg(self.process.pid().to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }

    /// Whether it answers `ROLE` with `master` (within 200 ms).
    #[must_use]
    pub(crate) fn is_master(&self) -> bool {
        let Ok(client) = client(self.address, self.password.as_deref()) else {
            return false;
        };
        let Ok(mut connection) = client.get_connection_with_timeout(Duration::from_millis(200))
        else {
            return false;
        };
        let role: redis::RedisResult<Vec<redis::Value>> = redis::cmd("ROLE").query(&mut connection);
        matches!(role.as_deref(), Ok([redis::Value::BulkString(first), ..]) if first == b"master")
    }
}

/// `redis-server`, or an error saying how to install it.
fn binary() -> Result<std::path::PathBuf, String> {
    installed("redis-server").ok_or_else(|| {
        "redis-server not found on PATH: apt-get install redis-server (7.0 tested)".to_owned()
    })
}

fn free_port() -> Result<u16, String> {
    free_tcp_ports(1)
        .map_err(|e| format!("no free loopback port: {e}"))?
        .first()
        .copied()
        .ok_or_else(|| "no free loopback port".to_owned())
}

/// A client for the Redis at `address`, logging in with `password`.
fn client(address: SocketAddr, password: Option<&str>) -> Result<redis::Client, String> {
    let login = password.map_or(String::new(), |p| format!(":{p}@"));
    redis::Client::open(format!("redis://{login}{address}/"))
        .map_err(|e| format!("a redis URL for {address}: {e}"))
}
