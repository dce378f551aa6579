//! A `redis-server` on a loopback port reached only by TLS, for the cluster's TLS tests, and
//! the certificates it and the nodes use, made by the test (`rcgen`) in a temporary folder.
//!
//! (The plain-TCP launcher, with its replicas and sentinels, is in `tests/cluster.rs`.)

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// A folder of PEM files, removed when dropped: a CA, a server certificate it signed for
/// `127.0.0.1` and `localhost`, a client certificate it signed, and another CA that signed
/// nothing here.
pub struct Pki {
    pub dir: PathBuf,
}

impl Pki {
    /// Makes them in a new folder named after `name`.
    pub fn new(name: &str) -> Pki {
        let dir = std::env::temp_dir().join(format!("tollgate-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir writable");
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

    /// The file `name` in the folder.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
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

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A `redis-server` listening only for TLS on a loopback port, killed when dropped.
pub struct Redis {
    child: Child,
    pub port: u16,
    log: PathBuf,
}

impl Redis {
    /// Starts one with `pki`'s server certificate (`--port 0`: no plain TCP), requiring
    /// `password` if given and, if `client_certificates`, a client certificate signed by the
    /// CA (`--tls-auth-clients yes`; else `no`). Returns once its log says it is ready.
    ///
    /// # Panics
    /// If `redis-server` cannot be started or does not get ready: a test that asked for Redis
    /// and did not get it has not run, and must not pass.
    pub fn tls(pki: &Pki, password: Option<&str>, client_certificates: bool) -> Redis {
        let port = super::process::free_port().port();
        let log = pki.path(&format!("redis-{port}.log"));
        let path = |name: &str| pki.path(name).display().to_string();
        let mut command = Command::new("redis-server");
        command
            .args(["--port", "0", "--tls-port", &port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--tls-cert-file", &path("server.pem")])
            .args(["--tls-key-file", &path("server.key")])
            .args(["--tls-ca-cert-file", &path("ca.pem")])
            .args([
                "--tls-auth-clients",
                if client_certificates { "yes" } else { "no" },
            ])
            .args(password.map(|p| ["--requirepass", p]).into_iter().flatten())
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&pki.dir)
            .arg("--logfile")
            .arg(&log)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        Redis::wait(command, port, log, "Ready to accept connections")
    }

    /// A sentinel reached only by TLS (`pki`'s server certificate), watching `master` as `m`
    /// (quorum 1) over TLS (`tls-replication yes`); its config file in `pki`'s folder, as
    /// sentinels rewrite theirs. Returns once its log says it monitors the master.
    pub fn sentinel_tls(pki: &Pki, master: &Redis) -> Redis {
        let port = super::process::free_port().port();
        let log = pki.path(&format!("sentinel-{port}.log"));
        let path = |name: &str| pki.path(name).display().to_string();
        let conf = pki.path(&format!("sentinel-{port}.conf"));
        std::fs::write(
            &conf,
            format!(
                "port 0\ntls-port {port}\nbind 127.0.0.1\ndir {}\nlogfile {}\n\
                 tls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\n\
                 tls-auth-clients no\ntls-replication yes\n\
                 sentinel monitor m 127.0.0.1 {} 1\n",
                pki.dir.display(),
                log.display(),
                path("server.pem"),
                path("server.key"),
                path("ca.pem"),
                master.port
            ),
        )
        .expect("temp dir writable");
        let mut command = Command::new("redis-server");
        command
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        Redis::wait(command, port, log, "+monitor master m")
    }

    /// Spawns `command` and waits (bounded) until its log at `log` holds `ready`.
    fn wait(mut command: Command, port: u16, log: PathBuf, ready: &str) -> Redis {
        let child = command.spawn().unwrap_or_else(|err| {
            panic!(
                "cannot start redis-server ({err}): install it (apt-get install redis-server) \
                 or leave out --include-ignored"
            )
        });
        let mut redis = Redis { child, port, log };
        // Polls its log, bounded: a guard against a hang, not a timing assertion.
        let deadline = Instant::now() + super::BOUND;
        while !redis.log().contains(ready) {
            if let Ok(Some(status)) = redis.child.try_wait() {
                panic!(
                    "redis-server exited ({status}); is it built with TLS? its log:\n{}",
                    redis.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "redis-server not ready within {:?}; its log:\n{}",
                super::BOUND,
                redis.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        redis
    }

    /// Its TLS address.
    pub fn address(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A file holding `text` in `dir`; its path.
pub fn secret_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("temp dir writable");
    path
}
