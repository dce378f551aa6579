//! Slow attacks: thousands of idle or trickling connections to the admin port, and a trusted
//! balancer trickling its PROXY headers; and the /metrics scrape every run makes once a second
//! to see whether the admin endpoint still answers.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tollgate_benches::sources::{PER_16, source};

use super::{Tally, paced};
use crate::cli::Sizes;
use crate::legit::{connect, proxy_header};

/// The /16 slowloris connections come from.
const SLOWLORIS_NET: u8 = 88;
/// How long a scrape may take.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);
/// The pause between a slowloris connection's header bytes.
const SLOWLORIS_GAP: Duration = Duration::from_secs(1);
/// The trusted balancer address attack traffic comes through.
const ATTACK_BALANCER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 200);

/// `admin_connections` to the admin port: even ones connect and stay silent, odd ones send a
/// request line and then one header byte a second. All held until cut or `end`.
pub(super) async fn admin(target: SocketAddr, sizes: &Sizes, end: Instant) -> Vec<String> {
    let tally = Arc::new(Tally::default());
    paced(
        sizes.admin_connections,
        sizes.admin_rate,
        usize::MAX,
        end,
        |i| {
            let tally = Arc::clone(&tally);
            let from = source(SLOWLORIS_NET, i, PER_16);
            let opening: &'static [u8] = if i % 2 == 0 {
                b""
            } else {
                b"GET /metrics HTTP/1.1\r\nHost: admin\r\n"
            };
            async move { trickle(from, target, opening, b"x", SLOWLORIS_GAP, end, &tally).await }
        },
    )
    .await;
    vec![tally.note("admin slowloris (half idle, half one header byte a second)")]
}

/// `trickle_connections` from the balancer, each sending its PROXY v2 header one byte per
/// `trickle_gap`, never finishing it; held until cut or `end`.
pub(super) async fn proxy_trickle(target: SocketAddr, sizes: &Sizes, end: Instant) -> Vec<String> {
    let tally = Arc::new(Tally::default());
    let gap = sizes.trickle_gap;
    paced(
        sizes.trickle_connections,
        sizes.trickle_rate,
        usize::MAX,
        end,
        |i| {
            let tally = Arc::clone(&tally);
            let subnet = u16::try_from(i).unwrap_or(u16::MAX);
            let client = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0xbee, subnet, 0, 0, 0, 1));
            let mut header = proxy_header(client, 50_000);
            // Never the last byte: the header stays incomplete.
            header.pop();
            async move {
                trickle_from(
                    IpAddr::V4(ATTACK_BALANCER),
                    target,
                    header,
                    0,
                    gap,
                    end,
                    &tally,
                )
                .await;
            }
        },
    )
    .await;
    vec![tally.note("PROXY header trickle from the balancer")]
}

/// Connects, writes `opening`, then one byte of `drip` per `gap` until the proxy closes the
/// connection (cut) or `end` (open at the end).
async fn trickle(
    from: IpAddr,
    target: SocketAddr,
    opening: &[u8],
    drip: &'static [u8],
    gap: Duration,
    end: Instant,
    tally: &Tally,
) {
    let mut bytes = opening.to_vec();
    // Enough drip bytes to outlast any run.
    bytes.extend(std::iter::repeat_n(drip[0], 3_600));
    let first = opening.len();
    trickle_from(from, target, bytes, first, gap, end, tally).await;
}

/// Writes `bytes[..first]` at once, then the rest a byte per `gap`; counts how it ended.
async fn trickle_from(
    from: IpAddr,
    target: SocketAddr,
    bytes: Vec<u8>,
    first: usize,
    gap: Duration,
    end: Instant,
    tally: &Tally,
) {
    Tally::add(&tally.started);
    let Ok(Ok(mut stream)) = tokio::time::timeout(SCRAPE_TIMEOUT, connect(from, target)).await
    else {
        Tally::add(&tally.refused);
        return;
    };
    if stream.write_all(&bytes[..first]).await.is_err() {
        Tally::add(&tally.cut);
        return;
    }
    let mut next = first;
    let mut buffer = [0u8; 1024];
    let mut tick = tokio::time::interval_at(Instant::now() + gap, gap);
    // Bounded: ends at `end` at the latest.
    loop {
        tokio::select! {
            read = stream.read(&mut buffer) => {
                if matches!(read, Ok(0) | Err(_)) {
                    Tally::add(&tally.cut);
                    return;
                }
            }
            _ = tick.tick(), if next < bytes.len() => {
                if stream.write_all(&bytes[next..=next]).await.is_err() {
                    Tally::add(&tally.cut);
                    return;
                }
                next += 1;
            }
            () = tokio::time::sleep_until(end) => {
                Tally::add(&tally.open_at_end);
                return;
            }
        }
    }
}

/// Scrapes `GET /metrics` once a second until `end`: (answered with 200, attempted).
pub(crate) async fn scrape_metrics(target: SocketAddr, end: Instant) -> (u64, u64) {
    let mut answered = 0;
    let mut attempted = 0;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    // Bounded: one scrape a second until `end`.
    while Instant::now() < end {
        tick.tick().await;
        attempted += 1;
        if let Ok(Ok(true)) = tokio::time::timeout(SCRAPE_TIMEOUT, scrape(target)).await {
            answered += 1;
        }
    }
    (answered, attempted)
}

async fn scrape(target: SocketAddr) -> io::Result<bool> {
    let mut stream = TcpStream::connect(target).await?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n")
        .await?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).await?;
    Ok(head.starts_with(b"HTTP/1.1 200") || head.starts_with(b"HTTP/1.0 200"))
}
