//! The UDP proxy end to end on loopback: per-source datagram limits, replies routed to the
//! right client, and a full session table refusing new clients only.

mod common;

use std::net::SocketAddr;

use common::{BOUND, metric, start, udp_echo_upstream};
use tokio::net::UdpSocket;

fn config(upstream: SocketAddr, extra: &str) -> String {
    format!(
        r#"
[admin]
enabled = false

[[listener]]
name = "dns"
protocol = "udp"
listen = "127.0.0.1:0"
upstreams = ["{upstream}"]
{extra}

[[rule]]
name = "datagrams"
protocol = "udp"
limits = [{{ rate = "5/60s" }}]
action = "drop"
"#
    )
}

async fn client(from: &str) -> UdpSocket {
    UdpSocket::bind(format!("{from}:0")).await.unwrap()
}

/// Receives until `count` datagrams came (each wait bounded).
async fn receive(socket: &UdpSocket, count: usize) -> Vec<String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    while got.len() < count {
        let len = tokio::time::timeout(BOUND, socket.recv(&mut buf))
            .await
            .expect("a reply within the bound")
            .unwrap();
        got.push(String::from_utf8_lossy(&buf[..len]).into_owned());
    }
    got
}

#[tokio::test]
async fn datagrams_are_limited_per_source_and_replies_reach_their_client() {
    let upstream = udp_echo_upstream().await;
    let server = start(&config(upstream, "")).await;
    let front = server.local_addr("dns").unwrap();
    let (a, b) = (client("127.0.0.2").await, client("127.0.0.3").await);
    for i in 0..8 {
        a.send_to(format!("a{i}").as_bytes(), front).await.unwrap();
        b.send_to(format!("b{i}").as_bytes(), front).await.unwrap();
    }
    let mut from_a = receive(&a, 5).await;
    let mut from_b = receive(&b, 5).await;
    from_a.sort();
    from_b.sort();
    assert_eq!(
        from_a,
        ["echo:a0", "echo:a1", "echo:a2", "echo:a3", "echo:a4"]
    );
    assert_eq!(
        from_b,
        ["echo:b0", "echo:b1", "echo:b2", "echo:b3", "echo:b4"]
    );
    common::eventually(|| {
        metric(
            &server,
            "tollgate_decisions_total{listener=\"dns\",verdict=\"throttled\"}",
        ) == 6.0
    })
    .await;
    assert_eq!(
        metric(
            &server,
            "tollgate_decisions_total{listener=\"dns\",verdict=\"allowed\"}"
        ),
        10.0
    );
    assert_eq!(server.udp_sessions(), 2);
}

#[tokio::test]
async fn a_full_session_table_refuses_new_clients_and_keeps_established_ones() {
    let upstream = udp_echo_upstream().await;
    let server = start(&config(upstream, "max_sessions = 1")).await;
    let front = server.local_addr("dns").unwrap();
    let (a, b) = (client("127.0.0.2").await, client("127.0.0.3").await);
    a.send_to(b"a0", front).await.unwrap();
    assert_eq!(receive(&a, 1).await, ["echo:a0"]);
    b.send_to(b"b0", front).await.unwrap();
    common::eventually(|| {
        metric(
            &server,
            "tollgate_refused_total{listener=\"dns\",reason=\"sessions_full\"}",
        ) == 1.0
    })
    .await;
    a.send_to(b"a1", front).await.unwrap();
    assert_eq!(
        receive(&a, 1).await,
        ["echo:a1"],
        "the established client keeps its session"
    );
    assert_eq!(
        metric(&server, "tollgate_udp_sessions{listener=\"dns\"}"),
        1.0
    );
}
