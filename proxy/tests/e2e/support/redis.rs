//! A `redis-server` (or a sentinel) on a loopback port for the cluster tests, plain or
//! reached only by TLS, and the certificates the TLS ones and the nodes use, made by the test
//! (`rcgen`) in a temporary folder.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// A folder of PEM files, removed when dropped: a CA, a server certificate it signed for
/// `127.0.0.1` and `localhost`, a client certificate it signed, and another CA that signed
/// nothing here.
pub(crate) struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    /// Makes them in a new folder named after `name`.
    pub(crate) fn new(name: &str) -> Pki {
        let dir = super::scratch(name);
        let ca_key = KeyPair::generate().unwrap();
        let ca_params = ca("tollgate test CA");
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        let server_key = KeyPair::generate().unwrap();
        let server = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .unwrap()
            .signed_by(&server_key, &issuer)
            .unwrap();
        let client_key = KeyPair::generate().unwrap();
        let mut client_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        client_params
            .distinguished_name
            .push(DnType::CommonName, "tollgate node");
        let client = client_params.signed_by(&client_key, &issuer).unwrap();
        let other_key = KeyPair::generate().unwrap();
        let other = ca("another CA").self_signed(&other_key).unwrap();
        let pki = Pki { dir };
        for (file, pem) in [
            ("ca.pem", ca_cert.pem()),
            ("server.pem", server.pem()),
            ("server.key", server_key.serialize_pem()),
            ("client.pem", client.pem()),
            ("client.key", client_key.serialize_pem()),
            ("other-ca.pem", other.pem()),
        ] {
            std::fs::write(pki.path(file), pem).expect("temp dir writable");
        }
        pki
    }

    /// The folder.
    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The file `name` in the folder.
    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir().join(name)
    }
}

/// A CA's parameters: `common_name` (distinct, so one CA is never taken for another by name).
fn ca(common_name: &str) -> CertificateParams {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params
}

/// How to start a `redis-server`: [`Redis::plain`] or [`Redis::tls`], the options that differ,
/// then [`Options::start`] (a server) or [`Options::sentinel`].
#[derive(Clone, Copy)]
pub(crate) struct Options<'a> {
    port: Option<u16>,
    password: Option<&'a str>,
    tls: Option<&'a Pki>,
    client_certificates: bool,
    replica_of: Option<u16>,
    snapshot: Option<&'a Path>,
}

impl<'a> Options<'a> {
    /// On `port` (to come back where a dropped one was); else on a free port.
    pub(crate) fn port(mut self, port: u16) -> Options<'a> {
        self.port = Some(port);
        self
    }

    /// Requiring `password` (`requirepass`).
    pub(crate) fn password(mut self, password: &'a str) -> Options<'a> {
        self.password = Some(password);
        self
    }

    /// Requiring a client certificate signed by the CA (`tls-auth-clients yes`; else `no`).
    pub(crate) fn client_certificates(mut self) -> Options<'a> {
        self.client_certificates = true;
        self
    }

    /// A replica of `master`.
    pub(crate) fn replica_of(mut self, master: &Redis) -> Options<'a> {
        self.replica_of = Some(master.port);
        self
    }

    /// Starting from the snapshot at `rdb` (copied into its folder as `dump.rdb`, which Redis
    /// loads at start): a restart with persistence. (It still saves nothing by itself.)
    pub(crate) fn snapshot(mut self, rdb: &'a Path) -> Options<'a> {
        self.snapshot = Some(rdb);
        self
    }

    /// Starts a server; returns once its log says it is ready.
    ///
    /// # Panics
    /// If `redis-server` cannot be started or does not get ready: a test that asked for Redis
    /// and did not get it has not run, and must not pass.
    pub(crate) async fn start(self) -> Redis {
        let mut lines = String::from("save \"\"\nappendonly no\n");
        if let Some(password) = self.password {
            lines += &format!("requirepass {password}\n");
        }
        if let Some(master) = self.replica_of {
            lines += &format!("replicaof 127.0.0.1 {master}\n");
        }
        self.launch(&lines, &[], "Ready to accept connections")
            .await
    }

    /// Starts a sentinel watching `master` as `m` with `quorum`, and `settings` (more
    /// `sentinel` lines for `m`); returns once its log says it monitors the master.
    ///
    /// # Panics
    /// As [`Options::start`].
    pub(crate) async fn sentinel(self, master: &Redis, quorum: u32, settings: &str) -> Redis {
        let lines = format!(
            "sentinel monitor m 127.0.0.1 {} {quorum}\n{settings}",
            master.port
        );
        self.launch(&lines, &["--sentinel"], "+monitor master m")
            .await
    }

    /// Writes its config (where and how it listens, then `lines`) into a folder of its own,
    /// as sentinels rewrite theirs and replicas keep a snapshot there, and starts
    /// `redis-server` on it with `args`; waits (bounded) until its log holds `ready`.
    async fn launch(self, lines: &str, args: &[&str], ready: &str) -> Redis {
        let port = self
            .port
            .unwrap_or_else(|| super::process::free_port().port());
        let dir = super::scratch(&format!("redis-{port}"));
        if let Some(rdb) = self.snapshot {
            std::fs::copy(rdb, dir.path().join("dump.rdb"))
                .unwrap_or_else(|err| panic!("cannot copy {}: {err}", rdb.display()));
        }
        let log = dir.path().join("redis.log");
        let mut config = match self.tls {
            None => format!("port {port}\n"),
            Some(pki) => format!(
                "port 0\ntls-port {port}\ntls-cert-file {}\ntls-key-file {}\n\
                 tls-ca-cert-file {}\ntls-auth-clients {}\ntls-replication yes\n",
                pki.path("server.pem").display(),
                pki.path("server.key").display(),
                pki.path("ca.pem").display(),
                if self.client_certificates {
                    "yes"
                } else {
                    "no"
                },
            ),
        };
        config += &format!(
            "bind 127.0.0.1\ndir {}\nlogfile {}\n{lines}",
            dir.path().display(),
            log.display()
        );
        let path = dir.path().join("redis.conf");
        std::fs::write(&path, config).expect("temp dir writable");
        let child = Command::new("redis-server")
            .arg(&path)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|err| {
                panic!(
                    "cannot start redis-server ({err}): install it (apt-get install \
                     redis-server) or leave out --include-ignored"
                )
            });
        let mut redis = Redis {
            child,
            port,
            password: self.password.map(str::to_owned),
            dir,
        };
        // Polls its log, bounded: a guard against a hang, not a timing assertion.
        let deadline = Instant::now() + super::BOUND;
        while !redis.log().contains(ready) {
            if let Ok(Some(status)) = redis.child.try_wait() {
                let tls = if self.tls.is_some() {
                    "; is it built with TLS?"
                } else {
                    ""
                };
                panic!(
                    "redis-server exited ({status}){tls} its log:\n{}",
                    redis.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "redis-server not ready within {:?}; its log:\n{}",
                super::BOUND,
                redis.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        redis
    }
}

/// A `redis-server` (or a sentinel) on a loopback port, killed when dropped (and resumed
/// first if stopped), its folder removed.
pub(crate) struct Redis {
    child: Child,
    pub(crate) port: u16,
    /// `requirepass`, if started with one.
    pub(crate) password: Option<String>,
    /// Its folder (config, log, snapshot), removed after it is killed (fields drop after
    /// `Drop::drop`).
    dir: tempfile::TempDir,
}

impl Redis {
    /// One reached by plain TCP.
    pub(crate) fn plain() -> Options<'static> {
        Options {
            port: None,
            password: None,
            tls: None,
            client_certificates: false,
            replica_of: None,
            snapshot: None,
        }
    }

    /// One reached only by TLS (`port 0`), with `pki`'s server certificate.
    pub(crate) fn tls(pki: &Pki) -> Options<'_> {
        Options {
            tls: Some(pki),
            ..Redis::plain()
        }
    }

    /// Its address (its TLS one if it has one).
    pub(crate) fn address(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Where `SAVE` writes its snapshot (`dump.rdb` in its folder).
    pub(crate) fn snapshot_file(&self) -> PathBuf {
        self.dir.path().join("dump.rdb")
    }

    /// What it logged so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default()
    }

    /// Sends it `signal` (a `kill` option such as `-STOP`).
    pub(crate) fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A file holding `text` in `dir`; its path.
pub(crate) fn secret_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("temp dir writable");
    path
}
