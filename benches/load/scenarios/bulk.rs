//! One long connection's throughput: write up to `bulk_bytes` (for at most `bulk_time`) into
//! the TCP sink, then half-close and wait for the sink's close to come back through the proxy
//! and for the sink to have counted every byte. The clock stops then, so the figure is bytes
//! delivered, not bytes buffered (a proxy that closes towards the client before it has
//! flushed towards the sink would otherwise look fast).

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

use super::{Context, Outcome, micros_per, with_cpu};
use crate::peers::Peer;
use crate::report::Metric;

/// Bytes per write: large, so the client's syscalls are not the bottleneck.
const CHUNK: usize = 256 << 10;
/// The bulk client's source address.
const SOURCE: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 3, 0, 1));

/// MB/s (10^6 bytes per second) delivered, and proxy CPU per MB.
pub(super) fn run(peer: &Peer, context: &Context<'_>) -> Result<Outcome, String> {
    let sizes = context.sizes;
    let upstreams = context.upstreams;
    let before = upstreams.sink_bytes();
    let (result, cpu) = with_cpu(peer, || {
        let start = Instant::now();
        let written = transfer(
            peer.endpoints.bulk,
            sizes.bulk_bytes,
            sizes.bulk_time,
            sizes.op_timeout,
        )?;
        let settle = Instant::now() + sizes.op_timeout;
        while upstreams.sink_bytes() - before < written && Instant::now() < settle {
            thread::sleep(Duration::from_micros(200));
        }
        io::Result::Ok((written, start.elapsed()))
    })?;
    let (written, elapsed) = result.map_err(|e| format!("bulk transfer failed: {e}"))?;
    let delivered = upstreams.sink_bytes() - before;
    let megabytes = delivered as f64 / 1e6;
    let mut outcome = Outcome::default();
    outcome
        .figures
        .push((Metric::BulkRate, megabytes / elapsed.as_secs_f64()));
    if let Some(cpu) = cpu {
        outcome.figures.push((
            Metric::BulkCpu,
            micros_per(cpu, 1) / megabytes.max(f64::MIN_POSITIVE),
        ));
    }
    if delivered != written {
        outcome.notes.push(format!(
            "bulk: wrote {written} bytes, the sink read {delivered}"
        ));
    }
    Ok(outcome)
}

/// Writes until `bytes` or `time`, half-closes, and waits for the far end's close: bytes
/// written.
fn transfer(target: SocketAddr, bytes: u64, time: Duration, timeout: Duration) -> io::Result<u64> {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    socket.bind(&SocketAddr::new(SOURCE, 0).into())?;
    socket.connect_timeout(&target.into(), timeout)?;
    let mut stream: TcpStream = socket.into();
    stream.set_write_timeout(Some(timeout))?;
    stream.set_read_timeout(Some(timeout))?;
    let chunk = vec![0x5a_u8; CHUNK];
    let start = Instant::now();
    let mut written = 0u64;
    while written < bytes && start.elapsed() < time {
        let want = usize::try_from(bytes - written).map_or(CHUNK, |left| left.min(CHUNK));
        written += stream.write(&chunk[..want])? as u64;
    }
    stream.shutdown(Shutdown::Write)?;
    let mut rest = [0u8; 64];
    // The sink never writes: the first read ends with its close (0) or the timeout.
    if stream.read(&mut rest)? != 0 {
        return Err(io::Error::other("the sink sent data"));
    }
    Ok(written)
}
