//! The TCP proxy end to end on loopback: limits per source and per prefix, each action as the
//! client sees it on the wire, and upstream failures.

use crate::support::{self, Wire, attempt, closed_port, echo_upstream, metric, start};

fn config(upstream: std::net::SocketAddr, rule: &str) -> String {
    let rule = format!("[[rule]]\nname = \"per-source\"\n{rule}");
    support::one_listener(support::NO_ADMIN, upstream, "", &rule)
}

async fn nth_plus_one(action: &str) -> (Wire, Wire, Wire) {
    let upstream = echo_upstream().await;
    let server = start(&config(
        upstream,
        &format!("limits = [{{ rate = \"3/60s\" }}]\naction = \"{action}\""),
    ))
    .await;
    let front = server.local_addr("front").unwrap();
    for _ in 0..3 {
        assert_eq!(attempt("127.0.0.2", front).await, Wire::Echoed);
    }
    let over = attempt("127.0.0.2", front).await;
    let other = attempt("127.0.0.3", front).await;
    let again = attempt("127.0.0.2", front).await;
    assert_eq!(
        metric(
            &server,
            "tollgate_throttled_total{listener=\"front\",rule=\"per-source\"}"
        ),
        2.0
    );
    (over, other, again)
}

#[tokio::test]
async fn the_connection_over_the_limit_is_reset() {
    let (over, other, again) = nth_plus_one("reset").await;
    assert_eq!(over, Wire::Reset);
    assert_eq!(other, Wire::Echoed, "another source is unaffected");
    assert_eq!(again, Wire::Reset);
}

#[tokio::test]
async fn the_connection_over_the_limit_is_closed() {
    let (over, other, _) = nth_plus_one("close").await;
    assert_eq!(over, Wire::Closed(Vec::new()));
    assert_eq!(other, Wire::Echoed);
}

#[tokio::test]
async fn the_connection_over_the_limit_gets_the_reply() {
    let (over, other, _) = nth_plus_one("reply").await;
    let Wire::Closed(bytes) = over else {
        panic!("{over:?}")
    };
    let text = String::from_utf8(bytes).unwrap();
    assert!(
        text.starts_with("HTTP/1.1 429 Too Many Requests\r\n"),
        "{text}"
    );
    assert!(text.contains("RateLimit-Policy: 3;w=60\r\n"), "{text}");
    assert_eq!(other, Wire::Echoed);
}

#[tokio::test]
async fn a_connection_weighs_one_under_a_bytes_limit() {
    let upstream = echo_upstream().await;
    let server = start(&config(
        upstream,
        "limits = [{ rate = \"3/60s\" }]\nweight = \"bytes\"",
    ))
    .await;
    let front = server.local_addr("front").unwrap();
    for _ in 0..3 {
        assert_eq!(attempt("127.0.0.2", front).await, Wire::Echoed);
    }
    assert_eq!(attempt("127.0.0.2", front).await, Wire::Reset);
    assert_eq!(attempt("127.0.0.3", front).await, Wire::Echoed);
}

#[tokio::test]
async fn a_prefix_limit_catches_many_addresses_of_one_slash_24() {
    let upstream = echo_upstream().await;
    let server = start(&config(
        upstream,
        "limits = [{ rate = \"10/60s\", ipv4_prefix = 24 }]",
    ))
    .await;
    let front = server.local_addr("front").unwrap();
    let mut outcomes = Vec::new();
    for host in 1..=20 {
        outcomes.push(attempt(&format!("127.1.2.{host}"), front).await);
    }
    assert!(
        outcomes[..10].iter().all(|w| *w == Wire::Echoed),
        "{outcomes:?}"
    );
    assert!(
        outcomes[10..].iter().all(|w| *w == Wire::Reset),
        "{outcomes:?}"
    );
    assert_eq!(
        attempt("127.1.3.1", front).await,
        Wire::Echoed,
        "the next /24 is apart"
    );
}

#[tokio::test]
async fn an_unreachable_upstream_closes_fast_and_is_counted() {
    let down = closed_port().await;
    let text = config(down.address(), "limits = [{ rate = \"100/60s\" }]").replace(
        "listen = \"127.0.0.1:0\"",
        "listen = \"127.0.0.1:0\"\nretries = 1\nbackoff = \"5ms\"",
    );
    let server = start(&text).await;
    let front = server.local_addr("front").unwrap();
    // `attempt` waits at most BOUND for an answer: a hang fails the test.
    assert_eq!(attempt("127.0.0.2", front).await, Wire::Closed(Vec::new()));
    assert_eq!(
        metric(
            &server,
            "tollgate_upstream_unavailable_total{listener=\"front\"}"
        ),
        1.0
    );
    assert_eq!(
        metric(
            &server,
            &format!("tollgate_upstream_errors_total{{listener=\"front\",upstream=\"{down}\"}}")
        ),
        2.0,
        "the first attempt and one retry"
    );
}

#[tokio::test]
async fn idle_connections_are_bounded_by_the_per_source_cap() {
    let upstream = echo_upstream().await;
    let text = config(upstream, "limits = [{ rate = \"1000/60s\" }]")
        .replace("upstreams =", "max_connections_per_source = 3\nupstreams =");
    let server = start(&text).await;
    let front = server.local_addr("front").unwrap();
    // Three connections that send nothing and stay open.
    let mut idle = Vec::new();
    for _ in 0..3 {
        idle.push(support::connect_from("127.0.0.7", front).await.unwrap());
    }
    // They are held by the proxy (each has an upstream session) before the fourth comes.
    support::eventually(|| server.open_connections() == 3).await;
    assert_eq!(attempt("127.0.0.7", front).await, Wire::Reset);
    assert_eq!(
        attempt("127.0.0.8", front).await,
        Wire::Echoed,
        "other sources are not capped"
    );
    drop(idle.pop());
    support::eventually(|| server.open_connections() == 2).await;
    assert_eq!(
        attempt("127.0.0.7", front).await,
        Wire::Echoed,
        "a closed slot is free again"
    );
    assert_eq!(
        metric(
            &server,
            "tollgate_refused_total{listener=\"front\",reason=\"connection_cap\"}"
        ),
        1.0
    );
}

#[tokio::test]
async fn a_delayed_connection_is_held_until_under_the_limit_or_its_bound() {
    let upstream = echo_upstream().await;
    // Held until the source is back under 2 per second: about half a second.
    let server = start(&config(
        upstream,
        "limits = [{ rate = \"2/1s\" }]\naction = \"delay\"\ndelay = \"5s\"",
    ))
    .await;
    let front = server.local_addr("front").unwrap();
    assert_eq!(attempt("127.0.0.2", front).await, Wire::Echoed);
    assert_eq!(attempt("127.0.0.2", front).await, Wire::Echoed);
    assert_eq!(
        attempt("127.0.0.2", front).await,
        Wire::Echoed,
        "held, then let through"
    );
    assert_eq!(
        metric(&server, "tollgate_delay_released_total{listener=\"front\"}"),
        1.0
    );
    // With a bound shorter than the wait, the held connection is closed at the bound.
    let upstream = echo_upstream().await;
    let server = start(&config(
        upstream,
        "limits = [{ rate = \"2/60s\" }]\naction = \"delay\"\ndelay = \"100ms\"",
    ))
    .await;
    let front = server.local_addr("front").unwrap();
    assert_eq!(attempt("127.0.0.2", front).await, Wire::Echoed);
    assert_eq!(attempt("127.0.0.2", front).await, Wire::Echoed);
    assert_eq!(attempt("127.0.0.2", front).await, Wire::Closed(Vec::new()));
}

/// An upstream a network away: its handshake is not done when the proxy's connect returns
/// (here its first SYN is dropped by a full accept queue and retransmitted a second later), so
/// the PROXY header the proxy sends first cannot go with the connect. It must follow once
/// connected, before the client's bytes, and the answer must come back.
#[tokio::test]
async fn a_connection_through_an_upstream_whose_handshake_is_slow_arrives_whole() {
    use std::io::{Read, Write};
    let (listener, queued) = support::handshake::stalled_upstream();
    let address = listener.local_addr().unwrap();
    let upstream = std::thread::spawn(move || {
        support::handshake::wait_connecting(address);
        // Free the queue: the proxy's next SYN gets in.
        drop(listener.accept().unwrap());
        drop(queued);
        let (mut stream, _) = listener.accept().unwrap();
        stream.set_read_timeout(Some(support::BOUND)).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 256];
        while !got.ends_with(b"hello\n") {
            let n = stream.read(&mut buf).unwrap();
            assert!(n > 0, "the upstream got only {got:?}");
            got.extend_from_slice(&buf[..n]);
        }
        stream.write_all(b"hello\n").unwrap();
        got
    });
    // A connect timeout past the SYN's retransmission.
    let server = start(&support::one_listener(
        support::NO_ADMIN,
        address,
        "send_proxy = \"v1\"\nconnect_timeout = \"5s\"",
        "[[rule]]\nname = \"r\"\nlimits = [{ rate = \"100/60s\" }]",
    ))
    .await;
    let front = server.local_addr("front").unwrap();
    assert_eq!(attempt("127.0.0.2", front).await, Wire::Echoed);
    let got = String::from_utf8(upstream.join().unwrap()).unwrap();
    assert!(
        got.starts_with("PROXY TCP4 127.0.0.2 127.0.0.1 ")
            && got.ends_with(&format!(" {}\r\nhello\n", front.port())),
        "{got:?}"
    );
}

/// A flood of connections waiting to be accepted does not take the runtime from the other
/// tasks (the relays of connections already served): the accept loop yields after each batch
/// of 64. The connections are queued in the kernel before the proxy runs (this test's runtime
/// has one thread, which the proxy shares), then this task reads the count of decided
/// connections every time it gets a turn: it must never see more than a batch decided between
/// two of its turns.
#[tokio::test]
async fn a_flood_of_queued_connections_is_accepted_a_batch_at_a_time() {
    // Within the smallest accept queue a system may have (`somaxconn` was 128 before Linux
    // 5.4), so that every connect completes while the proxy cannot run.
    const FLOOD: u32 = 100;
    const BATCH: f64 = 64.0;
    let upstream = echo_upstream().await;
    let server = start(&config(upstream, "limits = [{ rate = \"1/60s\" }]")).await;
    let front = server.local_addr("front").unwrap();
    // Blocking connects: they complete in the kernel's accept queue without a turn of the
    // runtime, so none is accepted yet.
    let queued: Vec<std::net::TcpStream> = (0..FLOOD)
        .map(|_| std::net::TcpStream::connect_timeout(&front, support::BOUND).unwrap())
        .collect();
    let decided = || {
        ["allowed", "throttled"]
            .map(|verdict| {
                metric(
                    &server,
                    &format!(
                        "tollgate_decisions_total{{listener=\"front\",verdict=\"{verdict}\"}}"
                    ),
                )
            })
            .iter()
            .sum::<f64>()
    };
    let mut seen = vec![decided()];
    while *seen.last().unwrap() < f64::from(FLOOD) {
        assert!(seen.len() < 10_000, "not all accepted: {seen:?}");
        tokio::task::yield_now().await;
        seen.push(decided());
    }
    seen.dedup();
    assert!(
        seen.windows(2).all(|pair| pair[1] - pair[0] <= BATCH),
        "more than a batch accepted between two turns of another task: {seen:?}"
    );
    drop(queued);
}

/// A source in its penalty gets its rule's action, as over its limit: here the reply, which
/// names the rule's first limit and the penalty as the time to wait. (A penalty reset by
/// mistake, or answered as a listed source, tells the client nothing of when to come back.)
#[tokio::test]
async fn a_source_in_its_penalty_gets_the_rules_reply() {
    let upstream = echo_upstream().await;
    let server = start(&config(
        upstream,
        "limits = [{ rate = \"1/60s\" }]\npenalty = \"10m\"\naction = \"reply\"",
    ))
    .await;
    let front = server.local_addr("front").unwrap();
    assert_eq!(attempt("127.0.0.2", front).await, Wire::Echoed);
    // Over the limit: the penalty starts.
    let over = attempt("127.0.0.2", front).await;
    assert!(matches!(over, Wire::Closed(_)), "{over:?}");
    let penalised = attempt("127.0.0.2", front).await;
    let Wire::Closed(bytes) = penalised else {
        panic!("{penalised:?}")
    };
    let text = String::from_utf8(bytes).unwrap();
    assert!(
        text.starts_with("HTTP/1.1 429 Too Many Requests\r\n"),
        "{text}"
    );
    assert!(text.contains("Retry-After: 600\r\n"), "{text}");
    assert!(text.contains("RateLimit-Policy: 1;w=60\r\n"), "{text}");
    assert_eq!(
        metric(
            &server,
            "tollgate_refused_total{listener=\"front\",reason=\"penalty\"}"
        ),
        1.0
    );
}

/// Connections reset at once never take a held slot: a flood of them, queued and accepted in
/// one batch, leaves the held budget (`max_held = 1` here) to the rejections that keep their
/// connection. (Had resets gone through the held budget, the flood would have filled it and a
/// held rejection of anyone else would have been refused as `held_full`.)
#[tokio::test]
async fn connections_reset_at_once_take_no_held_slot() {
    let upstream = echo_upstream().await;
    let text = config(
        upstream,
        "limits = [{ rate = \"1/60s\" }]\naction = \"reset\"",
    )
    .replace("upstreams =", "max_held = 1\nupstreams =");
    let server = start(&text).await;
    let front = server.local_addr("front").unwrap();
    // The source the queued connections come from (a plain connect's) is over its limit.
    assert_eq!(attempt("127.0.0.1", front).await, Wire::Echoed);
    // Queued while the proxy cannot run (see the flood test above), so that they are all
    // decided in one turn of the accept loop.
    let queued: Vec<std::net::TcpStream> = (0..10)
        .map(|_| std::net::TcpStream::connect_timeout(&front, support::BOUND).unwrap())
        .collect();
    let throttled = || {
        metric(
            &server,
            "tollgate_decisions_total{listener=\"front\",verdict=\"throttled\"}",
        )
    };
    support::eventually(|| throttled() == 10.0).await;
    assert_eq!(
        metric(
            &server,
            "tollgate_refused_total{listener=\"front\",reason=\"held_full\"}"
        ),
        0.0
    );
    drop(queued);
}

/// Only a connection to forward has its opening bytes read at accept: a rejected one is not
/// read (no syscall spent on it), so a PROXY header it sent first changes nothing: it gets
/// its rule's action (here a close), not the refusal of an untrusted header.
#[tokio::test]
async fn a_rejected_connections_opening_is_not_read_at_accept() {
    use std::io::Write;
    use tokio::io::AsyncReadExt;
    let upstream = echo_upstream().await;
    let server = start(&config(
        upstream,
        "limits = [{ rate = \"1/60s\" }]\naction = \"close\"",
    ))
    .await;
    let front = server.local_addr("front").unwrap();
    // The source of a plain connect goes over its limit.
    assert_eq!(attempt("127.0.0.1", front).await, Wire::Echoed);
    // Connected and its header sent before the proxy runs (see the flood test above): the
    // bytes are there when it is accepted.
    let mut queued = std::net::TcpStream::connect_timeout(&front, support::BOUND).unwrap();
    let client: std::net::SocketAddr = "198.51.100.7:4000".parse().unwrap();
    queued
        .write_all(&tollgate::listeners::proxy_protocol::encode_v1(
            client, front,
        ))
        .unwrap();
    queued.set_nonblocking(true).unwrap();
    let mut stream = tokio::net::TcpStream::from_std(queued).unwrap();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(support::BOUND, stream.read_to_end(&mut rest))
        .await
        .expect("closed by the proxy");
    assert!(read.is_ok() && rest.is_empty(), "{read:?} {rest:?}");
    assert_eq!(
        metric(
            &server,
            "tollgate_decisions_total{listener=\"front\",verdict=\"throttled\"}"
        ),
        1.0
    );
    assert_eq!(
        metric(
            &server,
            "tollgate_refused_total{listener=\"front\",reason=\"untrusted_proxy_header\"}"
        ),
        0.0
    );
}
