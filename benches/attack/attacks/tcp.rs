//! TCP attacks on the data path: floods (a few sources fast, or 100k+ sources once each), the
//! tarpit source, and idle holds from one /24 or, behind the balancer, one IPv6 /48.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tollgate_benches::sources::{PER_16, source};

use super::{PAYLOAD, Tally, paced};
use crate::cli::Sizes;
use crate::legit::{connect, proxy_header};

/// How long one attacking exchange may take.
const OP_TIMEOUT: Duration = Duration::from_secs(2);
/// The /16 the flood comes from (outside the tarpit rule's 127.66.0.0/16).
const FLOOD_NET: u8 = 65;
/// The first /16 of the distributed flood's sources (several /16s in a row).
const DISTRIBUTED_NET: u8 = 100;
/// The one tarpitted source.
const TARPIT_SOURCE: Ipv4Addr = Ipv4Addr::new(127, 66, 1, 1);
/// The /24 the idle hold comes from: 127.77.5.1 to 127.77.5.240.
const IDLE_24: [u8; 3] = [127, 77, 5];
/// Addresses of that /24 used, each holding `idle_connections / IDLE_ADDRESSES`.
const IDLE_ADDRESSES: u64 = 240;
/// The trusted balancer address attack traffic comes through (legitimate traffic uses others).
const ATTACK_BALANCER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 200);

/// Connections as fast as allowed (`flood_rate`) from `flood_sources` addresses.
pub(super) async fn flood(target: SocketAddr, sizes: &Sizes, end: Instant) -> Vec<String> {
    let tally = Arc::new(Tally::default());
    let sources = sizes.flood_sources;
    let count = sizes.flood_rate * sizes.attack.as_secs().max(1);
    paced(count, sizes.flood_rate, sizes.flood_concurrency, end, |i| {
        let tally = Arc::clone(&tally);
        let from = source(FLOOD_NET, i % sources, sources);
        async move { exchange(from, target, None, &tally).await }
    })
    .await;
    vec![tally.note(&format!("flood from {sources} sources"))]
}

/// One connection each from `distributed_sources` distinct addresses (127.100.0.1 on).
pub(super) async fn distributed(target: SocketAddr, sizes: &Sizes, end: Instant) -> Vec<String> {
    let tally = Arc::new(Tally::default());
    let started = paced(
        sizes.distributed_sources,
        sizes.distributed_rate,
        256,
        end,
        |i| {
            let tally = Arc::clone(&tally);
            let net = DISTRIBUTED_NET + u8::try_from(i / PER_16).unwrap_or(0);
            let from = source(net, i, PER_16);
            async move { touch(from, target, &tally).await }
        },
    )
    .await;
    vec![tally.note(&format!("distributed flood, {started} distinct sources"))]
}

/// One source over the tarpit rule, opening `tarpit_rate` connections a second and holding
/// up to `tarpit_held` until the proxy closes them.
pub(super) async fn tarpit(target: SocketAddr, sizes: &Sizes, end: Instant) -> Vec<String> {
    let tally = Arc::new(Tally::default());
    let count = sizes.tarpit_rate * sizes.attack.as_secs().max(1);
    paced(count, sizes.tarpit_rate, sizes.tarpit_held, end, |_| {
        let tally = Arc::clone(&tally);
        async move { exchange_and_hold(IpAddr::V4(TARPIT_SOURCE), target, None, end, &tally).await }
    })
    .await;
    vec![tally.note(&format!("tarpit source {TARPIT_SOURCE}"))]
}

/// `idle_connections` from 240 addresses of one /24, each within its limits, opened at
/// `idle_rate` (within the /24's rate) and held idle.
pub(super) async fn idle_24(target: SocketAddr, sizes: &Sizes, end: Instant) -> Vec<String> {
    let tally = Arc::new(Tally::default());
    let count = sizes.idle_connections;
    paced(count, sizes.idle_rate, usize::MAX, end, |i| {
        let tally = Arc::clone(&tally);
        let last = u8::try_from(i % IDLE_ADDRESSES + 1).unwrap_or(1);
        let from = IpAddr::V4(Ipv4Addr::new(IDLE_24[0], IDLE_24[1], IDLE_24[2], last));
        async move { exchange_and_hold(from, target, None, end, &tally).await }
    })
    .await;
    vec![tally.note(&format!(
        "idle hold from {}.{}.{}.0/24",
        IDLE_24[0], IDLE_24[1], IDLE_24[2]
    ))]
}

/// `idle_connections` through the balancer, their PROXY v2 headers naming one address in each
/// of as many /64s of 2001:db8:bad::/48, opened at `idle_rate` and held idle.
pub(super) async fn idle_48(target: SocketAddr, sizes: &Sizes, end: Instant) -> Vec<String> {
    let tally = Arc::new(Tally::default());
    paced(
        sizes.idle_connections,
        sizes.idle_rate,
        usize::MAX,
        end,
        |i| {
            let tally = Arc::clone(&tally);
            let subnet = u16::try_from(i).unwrap_or(u16::MAX);
            let client = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0xbad, subnet, 0, 0, 0, 1));
            let header = proxy_header(client, 50_000);
            async move {
                exchange_and_hold(
                    IpAddr::V4(ATTACK_BALANCER),
                    target,
                    Some(header),
                    end,
                    &tally,
                )
                .await;
            }
        },
    )
    .await;
    vec![tally.note("idle hold from 2001:db8:bad::/48 via the balancer")]
}

/// Connect, write, close without waiting for the echo (the cheapest connection this tool can
/// make, so that its own CPU bounds the rate less); counted.
async fn touch(from: IpAddr, target: SocketAddr, tally: &Tally) {
    Tally::add(&tally.started);
    let connected = async {
        let mut stream = connect(from, target).await?;
        stream.write_all(&PAYLOAD).await
    };
    match tokio::time::timeout(OP_TIMEOUT, connected).await {
        Ok(Ok(())) => Tally::add(&tally.served),
        Ok(Err(_)) => Tally::add(&tally.refused),
        Err(_) => Tally::add(&tally.timed_out),
    }
}

/// Connect, send, read the echo, close; counted.
async fn exchange(from: IpAddr, target: SocketAddr, header: Option<Vec<u8>>, tally: &Tally) {
    Tally::add(&tally.started);
    match tokio::time::timeout(OP_TIMEOUT, open(from, target, header)).await {
        Ok(Ok(_stream)) => Tally::add(&tally.served),
        Ok(Err(_)) => Tally::add(&tally.refused),
        Err(_) => Tally::add(&tally.timed_out),
    }
}

/// Connects, sends, and holds the connection until the proxy closes it or `end`, whether or
/// not (a tarpit holds before it answers) the echo came back: closed before the echo counts as
/// refused, after it as cut.
async fn exchange_and_hold(
    from: IpAddr,
    target: SocketAddr,
    header: Option<Vec<u8>>,
    end: Instant,
    tally: &Tally,
) {
    Tally::add(&tally.started);
    let Ok(Ok(mut stream)) = tokio::time::timeout(OP_TIMEOUT, connect(from, target)).await else {
        Tally::add(&tally.refused);
        return;
    };
    let sent = async {
        if let Some(header) = &header {
            stream.write_all(header).await?;
        }
        stream.write_all(&PAYLOAD).await
    };
    if sent.await.is_err() {
        Tally::add(&tally.refused);
        return;
    }
    let mut echoed = 0;
    let mut buffer = [0u8; 1024];
    // Bounded: ends at `end` at the latest.
    loop {
        tokio::select! {
            read = stream.read(&mut buffer) => match read {
                Ok(0) | Err(_) => {
                    Tally::add(if echoed >= PAYLOAD.len() { &tally.cut } else { &tally.refused });
                    return;
                }
                Ok(n) => {
                    let before = echoed;
                    echoed += n;
                    if before < PAYLOAD.len() && echoed >= PAYLOAD.len() {
                        Tally::add(&tally.served);
                    }
                }
            },
            () = tokio::time::sleep_until(end) => {
                Tally::add(&tally.open_at_end);
                return;
            }
        }
    }
}

async fn open(from: IpAddr, target: SocketAddr, header: Option<Vec<u8>>) -> io::Result<TcpStream> {
    let stream = connect(from, target).await?;
    send_and_echo(stream, header).await
}

/// Writes `header` and [`PAYLOAD`], reads the echo; the stream back if it came.
async fn send_and_echo(mut stream: TcpStream, header: Option<Vec<u8>>) -> io::Result<TcpStream> {
    if let Some(header) = header {
        stream.write_all(&header).await?;
    }
    stream.write_all(&PAYLOAD).await?;
    let mut echoed = [0u8; PAYLOAD.len()];
    stream.read_exact(&mut echoed).await?;
    Ok(stream)
}
