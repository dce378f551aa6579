//! What one source, one network and everyone together may hold on a TCP listener: held
//! rejections have a budget of their own, relayed connections that go silent are cut, and the
//! per-source and per-network caps are on by default.

use std::net::SocketAddr;

use crate::support::{
    self, Wire, attempt, connect_from, echo_upstream, eventually, exchange, metric, start,
};
use tokio::io::AsyncReadExt;

fn config(upstream: SocketAddr, listener: &str, rule: &str) -> String {
    let rule = format!("[[rule]]\nname = \"limit\"\n{rule}");
    support::one_listener(support::NO_ADMIN, upstream, listener, &rule)
}

fn refused(server: &tollgate::server::Server, reason: &str) -> f64 {
    metric(
        server,
        &format!("tollgate_refused_total{{listener=\"front\",reason=\"{reason}\"}}"),
    )
}

#[tokio::test]
async fn held_rejections_have_their_own_budget_and_beyond_it_are_reset() {
    let upstream = echo_upstream().await;
    // A forwarding budget of 2, smaller than the held one: holds must not take its slots.
    let server = start(&config(
        upstream,
        "max_connections = 2\nmax_held = 5\nmax_held_per_source = 2\nmax_held_per_prefix = 3",
        "limits = [{ rate = \"1/60s\", ipv4_prefix = 24 }]\naction = \"delay\"\ndelay = \"60s\"",
    ))
    .await;
    let front = server.local_addr("front").unwrap();
    let mut held = Vec::new();
    let mut hold = async |from: &str, count: usize| {
        held.push(connect_from(from, front).await.unwrap());
        eventually(|| server.held_connections() == count).await;
    };
    assert_eq!(attempt("127.0.5.1", front).await, Wire::Echoed);
    hold("127.0.5.1", 1).await;
    hold("127.0.5.1", 2).await;
    assert_eq!(attempt("127.0.5.1", front).await, Wire::Reset, "per source");
    hold("127.0.5.2", 3).await;
    assert_eq!(attempt("127.0.5.3", front).await, Wire::Reset, "per /24");
    assert_eq!(attempt("127.0.6.1", front).await, Wire::Echoed);
    hold("127.0.6.1", 4).await;
    hold("127.0.6.2", 5).await;
    assert_eq!(attempt("127.0.6.3", front).await, Wire::Reset, "in all");
    // Five held, a forwarding budget of 2: another network is still forwarded, twice at once.
    let first = connect_from("127.0.7.1", front).await.unwrap();
    assert_eq!(exchange(first, b"one\n").await, Wire::Echoed);
    assert_eq!(attempt("127.0.8.1", front).await, Wire::Echoed);
    assert_eq!(refused(&server, "held_per_source"), 1.0);
    assert_eq!(refused(&server, "held_per_prefix"), 1.0);
    assert_eq!(refused(&server, "held_full"), 1.0);
    assert_eq!(refused(&server, "listener_full"), 0.0);
    assert_eq!(
        metric(&server, "tollgate_held_connections{listener=\"front\"}"),
        5.0
    );
    drop(held);
    eventually(|| server.held_connections() == 0).await;
}

#[tokio::test]
async fn a_silent_relay_is_closed_after_the_idle_timeout() {
    let upstream = echo_upstream().await;
    let server = start(&config(
        upstream,
        "idle_timeout = \"200ms\"",
        "limits = [{ rate = \"100/60s\" }]",
    ))
    .await;
    let front = server.local_addr("front").unwrap();
    // One that spoke once, then went silent; one that never spoke.
    let mut spoke = connect_from("127.0.0.2", front).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut spoke, b"hello\n")
        .await
        .unwrap();
    let mut echo = [0u8; 6];
    spoke.read_exact(&mut echo).await.unwrap();
    let silent = connect_from("127.0.0.3", front).await.unwrap();
    for mut stream in [spoke, silent] {
        let mut rest = Vec::new();
        // Bounded: a relay that is never cut fails here.
        tokio::time::timeout(support::BOUND, stream.read_to_end(&mut rest))
            .await
            .expect("closed by the proxy")
            .unwrap();
        assert!(rest.is_empty(), "{rest:?}");
    }
    eventually(|| server.open_connections() == 0).await;
    assert_eq!(
        metric(&server, "tollgate_idle_closed_total{listener=\"front\"}"),
        2.0
    );
}

#[tokio::test]
async fn the_default_caps_bound_one_source_and_one_network() {
    let upstream = echo_upstream().await;
    // The defaults for a listener of 64: 4 per source, 16 per /24.
    let server = start(&config(
        upstream,
        "max_connections = 64",
        "limits = [{ rate = \"1000/60s\" }]",
    ))
    .await;
    let front = server.local_addr("front").unwrap();
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(connect_from("127.0.8.1", front).await.unwrap());
    }
    eventually(|| server.open_connections() == 4).await;
    assert_eq!(attempt("127.0.8.1", front).await, Wire::Reset, "per source");
    for host in 2..=4 {
        for _ in 0..4 {
            idle.push(
                connect_from(&format!("127.0.8.{host}"), front)
                    .await
                    .unwrap(),
            );
        }
    }
    eventually(|| server.open_connections() == 16).await;
    assert_eq!(attempt("127.0.8.5", front).await, Wire::Reset, "per /24");
    assert_eq!(
        attempt("127.0.9.1", front).await,
        Wire::Echoed,
        "another /24"
    );
    assert_eq!(refused(&server, "connection_cap"), 1.0);
    assert_eq!(refused(&server, "prefix_cap"), 1.0);
}

#[tokio::test]
async fn a_slash_24_of_idle_connections_leaves_other_networks_served() {
    let upstream = echo_upstream().await;
    // The listener of 300: by default one /24 holds at most 75 of it.
    let server = start(&config(
        upstream,
        "max_connections = 300",
        "limits = [{ rate = \"100/10s\" }]",
    ))
    .await;
    let front = server.local_addr("front").unwrap();
    // 1,000 idle connections from 100 addresses of one /24, 10 each: each within its rate.
    let mut idle = Vec::new();
    for n in 0..1_000 {
        let from = format!("127.0.10.{}", 1 + n % 100);
        // A refused one may be reset before its connect returns.
        match connect_from(&from, front).await {
            Ok(stream) => idle.push(stream),
            Err(err) => assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset),
        }
    }
    eventually(|| refused(&server, "prefix_cap") == 925.0).await;
    assert_eq!(server.open_connections(), 75);
    // 200 clients of 200 other networks are all served.
    for n in 0..200 {
        let from = format!("127.{}.{}.1", 20 + n / 100, n % 100);
        assert_eq!(attempt(&from, front).await, Wire::Echoed, "{from}");
    }
}

/// Opens a connection from `peer` that sends the first bytes of a PROXY v1 header and never
/// finishes it.
async fn trickle(peer: &str, front: SocketAddr) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut stream = connect_from(peer, front).await.unwrap();
    stream.write_all(b"PROXY TCP4 203.0.1").await.unwrap();
    stream
}

fn header_waits(server: &tollgate::server::Server) -> f64 {
    metric(server, "tollgate_header_waits{listener=\"front\"}")
}

#[tokio::test]
async fn trickling_proxy_headers_wait_apart_and_cannot_fill_the_listener() {
    let upstream = echo_upstream().await;
    // Header waits of 4, a forwarding budget of 2. Before they had a budget of their own,
    // trickling connections held forwarding slots and every other client was reset as
    // `listener_full` (the attack tool's `proxy-trickle`).
    let server = start(&config(
        upstream,
        "max_connections = 2\nmax_header_waits = 4\ntrusted_proxies = [\"127.0.9.0/24\"]\n\
         proxy_header_timeout = \"60s\"",
        "limits = [{ rate = \"100/60s\" }]",
    ))
    .await;
    let front = server.local_addr("front").unwrap();
    let mut trickling = Vec::new();
    for count in 1..=4 {
        trickling.push(trickle("127.0.9.1", front).await);
        eventually(|| header_waits(&server) == f64::from(count)).await;
    }
    assert_eq!(attempt("127.0.9.2", front).await, Wire::Reset, "in all");
    assert_eq!(refused(&server, "header_waits_full"), 1.0);
    // The forwarding budget is whole: two other clients at once.
    let first = connect_from("127.0.10.1", front).await.unwrap();
    assert_eq!(attempt("127.0.11.1", front).await, Wire::Echoed);
    assert_eq!(exchange(first, b"one\n").await, Wire::Echoed);
    assert_eq!(refused(&server, "listener_full"), 0.0);
    drop(trickling);
    eventually(|| header_waits(&server) == 0.0).await;
}

#[tokio::test]
async fn one_trickling_peer_cannot_take_the_other_peers_header_waits() {
    let upstream = echo_upstream().await;
    // 260 header waits: a quarter, 65, per trusted peer.
    let server = start(&config(
        upstream,
        "max_header_waits = 260\ntrusted_proxies = [\"127.0.9.0/24\"]\n\
         proxy_header_timeout = \"60s\"",
        "limits = [{ rate = \"100/60s\" }]",
    ))
    .await;
    let front = server.local_addr("front").unwrap();
    let mut trickling = Vec::new();
    for _ in 0..65 {
        trickling.push(trickle("127.0.9.1", front).await);
    }
    eventually(|| header_waits(&server) == 65.0).await;
    assert_eq!(attempt("127.0.9.1", front).await, Wire::Reset, "per peer");
    assert_eq!(refused(&server, "header_waits_per_peer"), 1.0);
    // Another balancer still gets its clients through.
    let mut other = connect_from("127.0.9.2", front).await.unwrap();
    let client: SocketAddr = "198.51.100.7:4000".parse().unwrap();
    tokio::io::AsyncWriteExt::write_all(
        &mut other,
        &tollgate::listeners::proxy_protocol::encode_v1(client, front),
    )
    .await
    .unwrap();
    assert_eq!(exchange(other, b"two\n").await, Wire::Echoed);
    drop(trickling);
    eventually(|| header_waits(&server) == 0.0).await;
}

#[tokio::test]
async fn the_open_count_is_forwarded_plus_header_waits_plus_held() {
    let upstream = echo_upstream().await;
    let server = start(&config(
        upstream,
        "trusted_proxies = [\"127.0.9.0/24\"]\nproxy_header_timeout = \"60s\"",
        "limits = [{ rate = \"1/60s\" }]\naction = \"delay\"\ndelay = \"60s\"",
    ))
    .await;
    let front = server.local_addr("front").unwrap();
    // One of each, held open: relayed, waiting for its header, held over its limit.
    let forwarded = connect_from("127.0.0.2", front).await.unwrap();
    eventually(|| metric(&server, "tollgate_open_connections{listener=\"front\"}") == 1.0).await;
    let waiting = trickle("127.0.9.1", front).await;
    eventually(|| header_waits(&server) == 1.0).await;
    let held = connect_from("127.0.0.2", front).await.unwrap();
    eventually(|| server.held_connections() == 1).await;
    // The drain at shutdown waits for this count: every kind counts.
    assert_eq!(server.open_connections(), 3);
    drop((forwarded, waiting, held));
    eventually(|| server.open_connections() == 0).await;
}

/// A source refused by its own or its network's cap is an offender (listed in `/top`, with the
/// cap that refused it); one refused because the listener as a whole is full is not: that is
/// no fault of its own, and listing it would blame whoever came last.
#[tokio::test]
async fn a_cap_of_its_own_makes_a_source_an_offender_a_full_listener_does_not() {
    let upstream = echo_upstream().await;
    let server = start(&config(
        upstream,
        "max_connections = 2\nmax_connections_per_source = 1",
        "limits = [{ rate = \"1000/60s\" }]",
    ))
    .await;
    let front = server.local_addr("front").unwrap();
    let first = connect_from("127.0.12.1", front).await.unwrap();
    eventually(|| server.open_connections() == 1).await;
    assert_eq!(
        attempt("127.0.12.1", front).await,
        Wire::Reset,
        "per source"
    );
    let second = connect_from("127.0.13.1", front).await.unwrap();
    eventually(|| server.open_connections() == 2).await;
    assert_eq!(attempt("127.0.14.1", front).await, Wire::Reset, "in all");
    assert_eq!(refused(&server, "connection_cap"), 1.0);
    assert_eq!(refused(&server, "listener_full"), 1.0);
    let top: Vec<(String, u64, String)> = server
        .shared()
        .gate()
        .offenders()
        .top(10)
        .into_iter()
        .map(|o| (o.source.to_string(), o.count, o.last))
        .collect();
    assert_eq!(
        top,
        [("127.0.12.1".to_owned(), 1, "connection_cap".to_owned())]
    );
    drop((first, second));
}
