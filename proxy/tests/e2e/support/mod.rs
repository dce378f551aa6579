//! Loopback fixtures for the proxy's end-to-end tests: echo upstreams, clients bound to chosen
//! 127.x.y.z sources, and what a client saw on the wire.

pub(crate) mod browser;
pub(crate) mod capture;
pub(crate) mod cluster;
pub(crate) mod envoy;
pub(crate) mod namespace;
pub(crate) mod process;
pub(crate) mod redis;

pub(crate) mod handshake;

use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream, UdpSocket};
use tollgate::config::ProxyConfig;
use tollgate::server::Server;

/// Every wait in these tests is bounded by this: a hang fails instead of stalling CI.
pub(crate) const BOUND: Duration = Duration::from_secs(10);

/// A fresh directory of the test's own, `$TMPDIR/tollgate-NAME-XXXXXX`, removed when dropped
/// (when the test ends, passed or failed). Fresh and unique, not named after the process id:
/// ids are reused, and a directory an earlier process left would hold its files. Set
/// `TOLLGATE_KEEP_SCRATCH=1` to keep them for a look (the browser tests' screenshots).
pub(crate) fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("tollgate-{name}-"))
        .disable_cleanup(std::env::var_os("TOLLGATE_KEEP_SCRATCH").is_some())
        .tempdir()
        .expect("temp dir writable")
}

/// A TCP echo server on 127.0.0.1; returns its address.
pub(crate) async fn echo_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut read, mut write) = stream.split();
                let _ = tokio::io::copy(&mut read, &mut write).await;
            });
        }
    });
    address
}

/// A UDP echo server on 127.0.0.1 that prefixes each reply with "echo:".
pub(crate) async fn udp_echo_upstream() -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let address = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65_536];
        while let Ok((len, peer)) = socket.recv_from(&mut buf).await {
            let reply = [b"echo:".as_slice(), &buf[..len]].concat();
            let _ = socket.send_to(&reply, peer).await;
        }
    });
    address
}

/// An address nothing listens on, for as long as the value lives: a socket bound to it and
/// never listening, so a connection there is refused and no other test's listener can take the
/// port meanwhile. (A port bound and released was once taken by a concurrent test's echo
/// server, and the "unreachable" upstream answered.)
pub(crate) struct ClosedPort {
    _held: TcpSocket,
    address: SocketAddr,
}

impl ClosedPort {
    pub(crate) fn address(&self) -> SocketAddr {
        self.address
    }
}

impl std::fmt::Display for ClosedPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.address.fmt(f)
    }
}

/// A [`ClosedPort`] on loopback.
pub(crate) async fn closed_port() -> ClosedPort {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let address = socket.local_addr().unwrap();
    ClosedPort {
        _held: socket,
        address,
    }
}

/// `[admin]` lines for no admin endpoint.
pub(crate) const NO_ADMIN: &str = "enabled = false";

/// A whole config: `[admin]` holding `admin` ([`NO_ADMIN`] for none), one TCP listener
/// `front` on an ephemeral loopback port in front of `upstream` with the lines `listener`
/// more, then `rest` (the rules and any other sections).
pub(crate) fn one_listener(
    admin: &str,
    upstream: impl std::fmt::Display,
    listener: &str,
    rest: &str,
) -> String {
    format!(
        "[admin]\n{admin}\n\n\
         [[listener]]\nname = \"front\"\nlisten = \"127.0.0.1:0\"\nupstreams = [\"{upstream}\"]\n\
         {listener}\n\n{rest}\n"
    )
}

/// Starts a proxy from config text (the admin on an ephemeral loopback port unless the text
/// says otherwise).
pub(crate) async fn start(config: &str) -> Server {
    let config = ProxyConfig::parse(config).unwrap_or_else(|e| panic!("{e}\n{config}"));
    Server::start(config, None).await.expect("proxy starts")
}

/// A connection to `to` from source address `from`.
pub(crate) async fn connect_from(from: &str, to: SocketAddr) -> std::io::Result<TcpStream> {
    let from: IpAddr = from.parse().unwrap();
    let socket = if from.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.bind(SocketAddr::new(from, 0))?;
    tokio::time::timeout(BOUND, socket.connect(to))
        .await
        .map_err(|_| std::io::Error::new(ErrorKind::TimedOut, "connect"))?
}

/// What a client saw after sending a line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Wire {
    /// The line came back (forwarded to the echo upstream).
    Echoed,
    /// An orderly close (FIN) with these bytes before it (empty for a plain close).
    Closed(Vec<u8>),
    /// A reset (RST).
    Reset,
}

/// Sends `line` on `stream` and reports what came back.
///
/// A reset that arrives before the write (the proxy decided while this task was not
/// scheduled yet) fails the write; the error is then consumed and the read that follows sees
/// only an end of stream, so the write's error is the reset.
pub(crate) async fn exchange(mut stream: TcpStream, line: &[u8]) -> Wire {
    if let Err(err) = stream.write_all(line).await
        && err.kind() == ErrorKind::ConnectionReset
    {
        return Wire::Reset;
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(BOUND, stream.read(&mut buf)).await {
            Err(_) => panic!("no answer within {BOUND:?}; got {got:?}"),
            Ok(Ok(0)) => return Wire::Closed(got),
            Ok(Ok(n)) => {
                got.extend_from_slice(&buf[..n]);
                if got.ends_with(line) && got.len() >= line.len() {
                    return Wire::Echoed;
                }
            }
            Ok(Err(err)) if err.kind() == ErrorKind::ConnectionReset => return Wire::Reset,
            Ok(Err(err)) => panic!("read failed: {err}"),
        }
    }
}

/// Connects from `from`, sends a line and reports what came back.
pub(crate) async fn attempt(from: &str, to: SocketAddr) -> Wire {
    match connect_from(from, to).await {
        Ok(stream) => exchange(stream, b"hello\n").await,
        Err(err) if err.kind() == ErrorKind::ConnectionReset => Wire::Reset,
        Err(err) => panic!("connect from {from} failed: {err}"),
    }
}

/// The value of the metric line that starts with `prefix` (name and labels), 0 if absent.
pub(crate) fn metric(server: &Server, prefix: &str) -> f64 {
    let shared = server.shared();
    let text = shared
        .metrics()
        .render(&shared.filter().policy(), shared.now());
    text.lines()
        .find(|line| line.starts_with(prefix))
        .and_then(|line| line.rsplit(' ').next())
        .map_or(0.0, |value| value.parse().unwrap())
}

/// Waits (polling, bounded by [`BOUND`]) until `done` holds; panics if it never does.
pub(crate) async fn eventually(mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + BOUND;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not reached within {BOUND:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A plain HTTP/1.1 request to the admin endpoint; returns (status, body).
pub(crate) async fn admin(server: &Server, method: &str, path: &str) -> (u16, String) {
    admin_as(server, method, path, None).await
}

/// As [`admin`], with `Authorization: Bearer TOKEN` if `token`.
pub(crate) async fn admin_as(
    server: &Server,
    method: &str,
    path: &str,
    token: Option<&str>,
) -> (u16, String) {
    admin_request(server, method, path, token, "", "").await
}

/// As [`admin_as`], asking for JSON and sending `body` as JSON.
pub(crate) async fn admin_json(
    server: &Server,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (u16, String) {
    let headers = "Accept: application/json\r\nContent-Type: application/json\r\n";
    admin_request(server, method, path, token, headers, body).await
}

/// One HTTP/1.1 request to the admin endpoint with `headers` (each ending in CRLF) and
/// `body`; (status, body).
async fn admin_request(
    server: &Server,
    method: &str,
    path: &str,
    token: Option<&str>,
    headers: &str,
    body: &str,
) -> (u16, String) {
    let address = server.admin_addr().expect("admin enabled");
    let mut stream = TcpStream::connect(address).await.unwrap();
    let authorization = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: admin\r\n{authorization}{headers}Content-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    tokio::time::timeout(BOUND, stream.read_to_end(&mut response))
        .await
        .expect("admin answers")
        .unwrap();
    let response = String::from_utf8(response).unwrap();
    let status = response[9..12].parse().unwrap();
    let body = response
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, body)| body.to_owned());
    (status, body)
}
