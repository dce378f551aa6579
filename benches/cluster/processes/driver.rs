//! The load driver: datagrams from many sources through one UDP socket, and one source over
//! its limit through TCP.
//!
//! All of 127.0.0.0/8 is local on Linux, so one unbound UDP socket can send each datagram
//! from any 127.x.y.z by naming it in an `IP_PKTINFO` control message (`ipi_spec_dst`): no
//! socket, bind or PROXY header per source, and source `i` of a key space of up to 16 M is
//! 127.1.0.0 + `i`. Datagrams go round-robin to the three nodes, so every source's traffic
//! spreads over them, as behind a balancer that does not keep sources on one node.

use std::io::{self, IoSlice};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use rand::{RngExt, SeedableRng, rngs::SmallRng};
use rand_distr::{Distribution, Zipf};
use socket2::{Domain, MsgHdr, Protocol, SockAddr, Socket, Type};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tollgate_benches::sources::connect_from;

/// The first address of the load's key space: 127.1.0.0 (127.0.x.y is left to the source
/// over its limit and the servers).
const FIRST_SOURCE: u32 = 0x7F01_0000;
/// The most distinct sources the key space holds: up to 127.255.255.254.
pub(crate) const MAX_SOURCES: u64 = 0x7FFF_FFFE - FIRST_SOURCE as u64;
/// The source over its limit.
pub(crate) const OVER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// How sources are drawn from the key space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mix {
    /// Zipf(1.1): a few heavy sources and a long tail, as real traffic.
    Zipf,
    /// Every source equally likely: most are seen once.
    Uniform,
}

/// What the load sent.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Sent {
    /// Datagrams handed to the kernel.
    pub(crate) datagrams: u64,
    /// Sends that failed (a full buffer or a refusal).
    pub(crate) failed: u64,
}

/// Sends `rate` datagrams per second in all (paced in 1 ms steps), round-robin over
/// `targets`, each from a source drawn by `mix` from `sources`, until `stop` is set. The
/// datagrams are 60 bytes.
///
/// # Errors
/// The socket cannot be opened.
pub(crate) fn udp_load(
    targets: &[SocketAddr],
    sources: u64,
    mix: Mix,
    rate: u64,
    stop: &AtomicBool,
) -> io::Result<Sent> {
    let socket = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    let targets: Vec<SockAddr> = targets.iter().map(|&t| SockAddr::from(t)).collect();
    let sources = sources.clamp(1, MAX_SOURCES);
    let zipf = Zipf::new(sources as f64, 1.1).map_err(|e| io::Error::other(e.to_string()))?;
    let mut rng = SmallRng::seed_from_u64(sources ^ mix as u64);
    let payload = [0x5Au8; 60];
    let mut sent = Sent::default();
    let start = Instant::now();
    let mut step = 0u64;
    // Relaxed: a stop flag, polled; the caller joins this thread, which is the synchronisation.
    while !stop.load(Ordering::Relaxed) {
        let due = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX) * rate / 1_000_000;
        // Never more than 100 ms of datagrams at once after a stall.
        let backlog = (due.saturating_sub(sent.datagrams + sent.failed)).min(rate / 10 + 1);
        for _ in 0..backlog {
            let id = match mix {
                // Zipf's samples are 1..=sources, as floats.
                Mix::Zipf => zipf.sample(&mut rng) as u64 - 1,
                Mix::Uniform => rng.random_range(0..sources),
            };
            // id < MAX_SOURCES, so the sum fits below 127.255.255.255.
            let source = Ipv4Addr::from(FIRST_SOURCE + u32::try_from(id).unwrap_or(0));
            let target = &targets[(sent.datagrams + sent.failed) as usize % targets.len()];
            match send_from(&socket, source, target, &payload) {
                Ok(_) => sent.datagrams += 1,
                Err(_) => sent.failed += 1,
            }
        }
        step += 1;
        if let Some(wait) =
            (start + Duration::from_millis(step)).checked_duration_since(Instant::now())
        {
            thread::sleep(wait);
        }
    }
    Ok(sent)
}

/// Sends `payload` to `target` from `source` (a local address) with one `sendmsg`.
fn send_from(
    socket: &Socket,
    source: Ipv4Addr,
    target: &SockAddr,
    payload: &[u8],
) -> io::Result<usize> {
    let control = pktinfo(source);
    let buffers = [IoSlice::new(payload)];
    let message = MsgHdr::new()
        .with_addr(target)
        .with_buffers(&buffers)
        .with_control(&control.bytes[..control.len]);
    socket.sendmsg(&message, 0)
}

/// An `IP_PKTINFO` control message naming `source`: a `cmsghdr` (`cmsg_len` a `size_t`, then
/// level and type as `int`s, padded to the `size_t` alignment) and an `in_pktinfo` (interface
/// 0, `ipi_spec_dst`, `ipi_addr`), built byte by byte in native order, as `CMSG_SPACE` lays it
/// out (the kernel copies it, so the buffer's own alignment does not matter).
struct Control {
    bytes: [u8; 40],
    len: usize,
}

fn pktinfo(source: Ipv4Addr) -> Control {
    const INT: usize = size_of::<libc::c_int>();
    const WORD: usize = size_of::<usize>();
    const HEADER: usize = (WORD + 2 * INT).next_multiple_of(WORD);
    const DATA: usize = 3 * 4;
    let mut bytes = [0u8; 40];
    bytes[..WORD].copy_from_slice(&(HEADER + DATA).to_ne_bytes());
    bytes[WORD..WORD + INT].copy_from_slice(&libc::IPPROTO_IP.to_ne_bytes());
    bytes[WORD + INT..WORD + 2 * INT].copy_from_slice(&libc::IP_PKTINFO.to_ne_bytes());
    // in_pktinfo: ipi_ifindex (0: any), ipi_spec_dst (the source), ipi_addr (unused on send).
    bytes[HEADER + 4..HEADER + 8].copy_from_slice(&source.octets());
    Control {
        bytes,
        len: (HEADER + DATA).next_multiple_of(WORD),
    }
}

/// What the source over its limit got.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Admitted {
    /// Connections it opened.
    pub(crate) attempts: u64,
    /// Connections served (the echo answered).
    pub(crate) served: u64,
    /// Of those, served in the first period.
    pub(crate) first: u64,
}

/// The source over its limit: from [`OVER`], `per_second` TCP connections a second (paced,
/// each its own task), in turn to each of `fronts`, for `seconds`; each writes a byte and
/// counts as served if the echo comes back (every step bounded by a second). The first
/// `first_period` attempts make its first period.
pub(crate) async fn over_limit(
    fronts: Vec<SocketAddr>,
    per_second: f64,
    seconds: f64,
    first_period: u64,
) -> Admitted {
    let total = (per_second * seconds).round() as u64;
    let mut pace = tokio::time::interval(Duration::from_secs_f64(1.0 / per_second));
    let mut tasks = Vec::new();
    let fronts = Arc::new(fronts);
    for i in 0..total {
        pace.tick().await;
        let fronts = Arc::clone(&fronts);
        tasks.push(tokio::spawn(async move {
            let front = fronts[i as usize % fronts.len()];
            tokio::time::timeout(Duration::from_secs(1), attempt(front))
                .await
                .unwrap_or(false)
        }));
    }
    let mut admitted = Admitted::default();
    for (i, task) in tasks.into_iter().enumerate() {
        let served = u64::from(task.await.unwrap_or(false));
        admitted.attempts += 1;
        admitted.served += served;
        if (i as u64) < first_period {
            admitted.first += served;
        }
    }
    admitted
}

/// One connection from [`OVER`]: whether the echo answered.
async fn attempt(front: SocketAddr) -> bool {
    let Ok(mut stream) = connect_from(OVER.into(), front).await else {
        return false;
    };
    if stream.write_all(b"x").await.is_err() {
        return false;
    }
    let mut byte = [0u8; 1];
    matches!(stream.read(&mut byte).await, Ok(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_socket_sends_from_any_loopback_source() {
        let receiver = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        receiver
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let target = SockAddr::from(receiver.local_addr().unwrap());
        let socket = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
        for source in [
            Ipv4Addr::new(127, 1, 2, 3),
            Ipv4Addr::new(127, 153, 150, 128),
        ] {
            send_from(&socket, source, &target, b"hi").unwrap();
            let mut buffer = [0u8; 8];
            let (n, from) = receiver.recv_from(&mut buffer).unwrap();
            assert_eq!((&buffer[..n], from.ip()), (&b"hi"[..], source.into()));
        }
    }
}
