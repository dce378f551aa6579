//! PROXY headers at the proxy: believed from trusted peers (IPv6 sources and /64 limits behind
//! a balancer), refused from anyone else, and passed on to upstreams.

use std::net::SocketAddr;

use crate::support::process::Launch;
use crate::support::{self, Wire, attempt, connect_from, echo_upstream, exchange, metric, start};
use tokio::io::AsyncWriteExt;
use tollgate::listeners::proxy_protocol::{V2Transport, encode_v1, encode_v2};

fn config(upstream: SocketAddr) -> String {
    support::one_listener(
        support::NO_ADMIN,
        upstream,
        "trusted_proxies = [\"127.0.0.5/32\"]\nsend_proxy = \"v1\"",
        r#"[[rule]]
name = "per-network"
limits = [{ rate = "5/60s", ipv4_prefix = 32, ipv6_prefix = 64 }]"#,
    )
}

/// A connection from the trusted balancer (127.0.0.5) relaying `client`.
async fn relayed(
    client: &str,
    front: SocketAddr,
    header: fn(SocketAddr, SocketAddr) -> Vec<u8>,
) -> Wire {
    let mut stream = connect_from("127.0.0.5", front).await.unwrap();
    let client: SocketAddr = client.parse().unwrap();
    stream.write_all(&header(client, front)).await.unwrap();
    exchange(stream, b"hello\n").await
}

fn v2(source: SocketAddr, destination: SocketAddr) -> Vec<u8> {
    encode_v2(source, destination, V2Transport::Stream)
}

#[tokio::test]
async fn ipv6_sources_behind_a_trusted_balancer_are_limited_per_slash_64() {
    let upstream = echo_upstream().await;
    let server = start(&config(upstream)).await;
    let front = server.local_addr("front").unwrap();
    // An attacker rotating addresses inside one /64.
    let mut outcomes = Vec::new();
    for host in 1..=8 {
        outcomes.push(relayed(&format!("[2001:db8:1:2::{host:x}]:4000"), front, v2).await);
    }
    assert!(
        outcomes[..5].iter().all(|w| *w == Wire::Echoed),
        "{outcomes:?}"
    );
    assert!(
        outcomes[5..].iter().all(|w| *w == Wire::Reset),
        "{outcomes:?}"
    );
    assert_eq!(
        relayed("[2001:db8:1:3::1]:4000", front, v2).await,
        Wire::Echoed,
        "the next /64 is apart"
    );
    // The balancer's own address is not what is limited: v1 headers from it work too.
    assert_eq!(
        relayed("192.0.2.9:5000", front, encode_v1).await,
        Wire::Echoed
    );
}

#[tokio::test]
async fn the_upstream_is_told_the_real_source() {
    let upstream = echo_upstream().await;
    let server = start(&config(upstream)).await;
    let front = server.local_addr("front").unwrap();
    let mut stream = connect_from("127.0.0.5", front).await.unwrap();
    let client: SocketAddr = "[2001:db8::7]:4321".parse().unwrap();
    stream.write_all(&v2(client, front)).await.unwrap();
    // The echo upstream sends back what it received: our v1 header, then the payload.
    stream.write_all(b"hi\n").await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    while !got.ends_with(b"hi\n") {
        let n = tokio::time::timeout(
            support::BOUND,
            tokio::io::AsyncReadExt::read(&mut stream, &mut buf),
        )
        .await
        .unwrap()
        .unwrap();
        assert!(n > 0, "closed early: {got:?}");
        got.extend_from_slice(&buf[..n]);
    }
    let expected = [encode_v1(client, front), b"hi\n".to_vec()].concat();
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&expected)
    );
}

#[tokio::test]
async fn an_untrusted_peers_header_is_refused() {
    let upstream = echo_upstream().await;
    let server = start(&config(upstream)).await;
    let front = server.local_addr("front").unwrap();
    let mut stream = connect_from("127.0.0.6", front).await.unwrap();
    let spoofed: SocketAddr = "203.0.113.1:1234".parse().unwrap();
    stream.write_all(&encode_v1(spoofed, front)).await.unwrap();
    assert_eq!(exchange(stream, b"hello\n").await, Wire::Reset);
    assert_eq!(
        metric(
            &server,
            "tollgate_refused_total{listener=\"front\",reason=\"untrusted_proxy_header\"}"
        ),
        1.0
    );
    assert_eq!(
        attempt("127.0.0.6", front).await,
        Wire::Echoed,
        "plain traffic from it still flows"
    );
}

/// The peer that sent a header it is not trusted to send is the offender (not the source its
/// header claims): listed in `/top` with the reason, and a rejection line in the log. The
/// real binary, for its log as an operator reads it.
#[tokio::test]
async fn an_untrusted_peers_header_makes_it_an_offender_and_is_logged() {
    let upstream = echo_upstream().await;
    let proxy = Launch::new(
        "proxy-header-offender",
        &format!("upstreams = [\"{upstream}\"]\ntrusted_proxies = [\"127.0.0.5/32\"]"),
        "[[rule]]\nname = \"per-source\"\nlimits = [{ rate = \"5/60s\" }]",
    )
    .shell("export RUST_LOG=info && ")
    .start();
    let mut stream = connect_from("127.0.0.6", proxy.front).await.unwrap();
    let spoofed: SocketAddr = "203.0.113.1:1234".parse().unwrap();
    stream
        .write_all(&encode_v1(spoofed, proxy.front))
        .await
        .unwrap();
    assert_eq!(exchange(stream, b"hello\n").await, Wire::Reset);
    let why = "PROXY header from an untrusted peer";
    let top = proxy.get("/top?format=json");
    let body = top.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    let json: serde_json::Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {top}"));
    let offenders: Vec<_> = json["top"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["source"].clone(),
                o["rejected"].clone(),
                o["last"].clone(),
            )
        })
        .collect();
    assert_eq!(
        offenders,
        [("127.0.0.6".into(), 1.into(), why.into())],
        "{json}"
    );
    // Both were done before the reset the client saw.
    let log = proxy.log();
    assert!(
        log.lines().any(|line| line.contains(" rejected ")
            && line.contains("source=127.0.0.6")
            && line.contains(why)),
        "no rejection line in\n{log}"
    );
}

#[tokio::test]
async fn a_trusted_peer_without_a_valid_header_is_refused() {
    let upstream = echo_upstream().await;
    let server = start(&config(upstream)).await;
    let front = server.local_addr("front").unwrap();
    assert_eq!(attempt("127.0.0.5", front).await, Wire::Reset);
    assert_eq!(
        metric(
            &server,
            "tollgate_refused_total{listener=\"front\",reason=\"bad_proxy_header\"}"
        ),
        1.0
    );
}

#[tokio::test]
async fn a_header_is_refused_even_when_no_peer_is_trusted() {
    let upstream = echo_upstream().await;
    let text = config(upstream).replace("trusted_proxies = [\"127.0.0.5/32\"]\n", "");
    let server = start(&text).await;
    let front = server.local_addr("front").unwrap();
    for header in [
        encode_v1 as fn(SocketAddr, SocketAddr) -> Vec<u8>,
        v2 as fn(SocketAddr, SocketAddr) -> Vec<u8>,
    ] {
        let mut stream = connect_from("127.0.0.6", front).await.unwrap();
        let spoofed: SocketAddr = "6.6.6.6:1234".parse().unwrap();
        stream.write_all(&header(spoofed, front)).await.unwrap();
        assert_eq!(exchange(stream, b"hello\n").await, Wire::Reset);
    }
    assert_eq!(
        metric(
            &server,
            "tollgate_refused_total{listener=\"front\",reason=\"untrusted_proxy_header\"}"
        ),
        2.0
    );
    assert_eq!(attempt("127.0.0.6", front).await, Wire::Echoed);
}

#[tokio::test]
async fn sources_behind_a_trusted_balancer_are_capped_per_slash_48() {
    let upstream = echo_upstream().await;
    // The defaults for a listener of 8: 1 connection per source (/64), 2 per network (/48).
    let text = config(upstream).replace("send_proxy", "max_connections = 8\nsend_proxy");
    let server = start(&text).await;
    let front = server.local_addr("front").unwrap();
    let mut idle = Vec::new();
    for client in ["[2001:db8:1:1::1]:1000", "[2001:db8:1:2::1]:1000"] {
        let mut stream = connect_from("127.0.0.5", front).await.unwrap();
        let client: SocketAddr = client.parse().unwrap();
        stream.write_all(&v2(client, front)).await.unwrap();
        idle.push(stream);
    }
    support::eventually(|| {
        metric(
            &server,
            "tollgate_decisions_total{listener=\"front\",verdict=\"allowed\"}",
        ) == 2.0
    })
    .await;
    assert_eq!(
        relayed("[2001:db8:1:3::1]:1000", front, v2).await,
        Wire::Reset,
        "a third /64 of the same /48"
    );
    assert_eq!(
        relayed("[2001:db8:1:1::1]:1001", front, v2).await,
        Wire::Reset,
        "a second connection of one /64"
    );
    assert_eq!(
        relayed("[2001:db8:2::1]:1000", front, v2).await,
        Wire::Echoed
    );
    assert_eq!(
        metric(
            &server,
            "tollgate_refused_total{listener=\"front\",reason=\"prefix_cap\"}"
        ),
        1.0
    );
}
