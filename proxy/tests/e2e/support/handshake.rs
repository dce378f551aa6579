//! An upstream whose TCP handshakes are not done at once, as on a real network, for the
//! proxy's unit tests (`listeners::upstream`, by `#[path]`) and its end-to-end tests
//! (`tests/e2e/support`): one file, two crates.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// How long [`wait_connecting`] waits for a handshake to start.
const WAIT: Duration = Duration::from_secs(10);

/// An upstream whose handshakes are not done at once: it listens with a backlog of 0 and one
/// connection waits, unaccepted, in its queue, so the kernel drops each SYN that arrives (a
/// full accept queue) and the connecting side retransmits it after its initial retransmission
/// timeout (1 s). On loopback a handshake is otherwise complete before `connect` returns. The
/// second value holds the queued connection: accepting it lets the next retransmitted SYN in.
pub(crate) fn stalled_upstream() -> (std::net::TcpListener, std::net::TcpStream) {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
    socket
        .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    socket.listen(0).unwrap();
    let listener: std::net::TcpListener = socket.into();
    let queued = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    (listener, queued)
}

/// Waits (polling, bounded by [`WAIT`]) until a socket of this network namespace is in
/// SYN-SENT towards `upstream` (IPv4): a connect to it started and its handshake is not done.
pub(crate) fn wait_connecting(upstream: SocketAddr) {
    let IpAddr::V4(ip) = upstream.ip() else {
        panic!("IPv4 only: {upstream}")
    };
    // /proc/net/tcp: `sl local rem st ...`, an address as the hex of its 32-bit value in host
    // order (little-endian here) and its port; state 02 is SYN-SENT.
    let remote = format!(
        "{:08X}:{:04X}",
        u32::from_le_bytes(ip.octets()),
        upstream.port()
    );
    let connecting = || {
        std::fs::read_to_string("/proc/net/tcp")
            .unwrap()
            .lines()
            .skip(1)
            .any(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                fields.get(2) == Some(&remote.as_str()) && fields.get(3) == Some(&"02")
            })
    };
    let started = std::time::Instant::now();
    while !connecting() {
        assert!(
            started.elapsed() < WAIT,
            "no connect towards {upstream} in SYN-SENT within {WAIT:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}
