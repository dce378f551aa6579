//! Memory stays flat however many distinct sources come: the proxy keeps no per-source table.
//! Each connection arrives through a trusted balancer with a PROXY v2 header naming a new
//! source, IPv4 and IPv6 alternately.
//!
//! By default 40,000 sources; `TOLLGATE_HEAVY=1` (set by CI) makes it 1,000,000.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::support;
use crate::support::process::Launch;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tollgate::listeners::proxy_protocol::{V2Transport, encode_v2};

/// An upstream that echoes the first chunk and closes, so the proxy sees the close first from
/// the upstream and the client side's ephemeral ports are not held in TIME_WAIT.
async fn echo_once() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                if let Ok(n) = stream.read(&mut buf).await {
                    let _ = stream.write_all(&buf[..n]).await;
                }
            });
        }
    });
    address
}

/// The `index`th distinct source.
fn source(index: u32) -> SocketAddr {
    if index.is_multiple_of(2) {
        SocketAddr::new(Ipv4Addr::from(0x0A00_0000 + index).into(), 40_000)
    } else {
        let addr = Ipv6Addr::from((0x2001_0db8_u128 << 96) | u128::from(index) << 64);
        SocketAddr::new(addr.into(), 40_000)
    }
}

/// One connection from `source` through the balancer address `via`; true if echoed.
async fn connect_as(via: &str, front: SocketAddr, source: SocketAddr) -> bool {
    let Ok(mut stream) = support::connect_from(via, front).await else {
        return false;
    };
    let mut hello = encode_v2(source, front, V2Transport::Stream);
    hello.push(b'x');
    if stream.write_all(&hello).await.is_err() {
        return false;
    }
    let mut back = [0u8; 1];
    let echoed = matches!(
        tokio::time::timeout(support::BOUND, stream.read_exact(&mut back)).await,
        Ok(Ok(_))
    );
    echoed && back == *b"x"
}

/// Makes connections `from..to`, 64 at a time; returns how many were echoed.
async fn drive(front: SocketAddr, from: u32, to: u32) -> u32 {
    let next = Arc::new(AtomicU32::new(from));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..64 {
        let next = Arc::clone(&next);
        tasks.spawn(async move {
            let mut echoed = 0u32;
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= to {
                    return echoed;
                }
                // Spread over 1000 balancer addresses so no one address runs out of ports.
                let via = format!("127.5.{}.{}", index % 1000 / 250, index % 250 + 1);
                echoed += u32::from(connect_as(&via, front, source(index)).await);
            }
        });
    }
    let mut echoed = 0;
    while let Some(done) = tasks.join_next().await {
        echoed += done.unwrap();
    }
    echoed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_stays_flat_while_distinct_sources_each_connect_once() {
    let total: u32 = if std::env::var_os("TOLLGATE_HEAVY").is_some() {
        1_000_000
    } else {
        40_000
    };
    let upstream = echo_once().await;
    let listener = format!("upstreams = [\"{upstream}\"]\ntrusted_proxies = [\"127.5.0.0/16\"]");
    let rest = "[sketch]\nmemory = \"16MiB\"\n\n\
                [[rule]]\nname = \"r\"\nlimits = [{ rate = \"1000/10s\", ipv6_prefix = 128 }]";
    let proxy = Launch::new("memory", &listener, rest).start();
    // Warm up: the sketch's pages, allocated zeroed at start, become resident as keys land on
    // them; the runtime's buffers reach their working size.
    let warm_up = total / 10;
    let mut echoed = drive(proxy.front, 0, warm_up).await;
    let warm = proxy.rss_kib();
    echoed += drive(proxy.front, warm_up, total).await;
    let end = proxy.rss_kib();
    eprintln!(
        "{total} sources: RSS {warm} KiB after {warm_up}, {end} KiB after all ({:+} KiB)",
        end as i64 - warm as i64
    );
    assert_eq!(echoed, total, "every source was let through once");
    assert!(
        end <= warm + 8 * 1024,
        "RSS grew from {warm} KiB to {end} KiB over {} new sources",
        total - warm_up
    );
}
