//! The UDP proxy end to end on loopback: per-source datagram limits, replies routed to the
//! right client, session caps per source, per prefix and in all (refusing new clients only),
//! expiry, the refused TCP settings, and, as separate processes, the open-file limit raised
//! and a spoofed flood held to the session cap.

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::process::Launch;
use crate::support::{self, BOUND, metric, start, udp_echo_upstream};
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
    support::eventually(|| {
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
    // A second datagram confirms the session: it cannot be evicted for a newcomer.
    a.send_to(b"a1", front).await.unwrap();
    assert_eq!(receive(&a, 1).await, ["echo:a1"]);
    b.send_to(b"b0", front).await.unwrap();
    support::eventually(|| {
        metric(
            &server,
            "tollgate_refused_total{listener=\"dns\",reason=\"sessions_full\"}",
        ) == 1.0
    })
    .await;
    a.send_to(b"a2", front).await.unwrap();
    assert_eq!(
        receive(&a, 1).await,
        ["echo:a2"],
        "the established client keeps its session"
    );
    assert_eq!(
        metric(&server, "tollgate_udp_sessions{listener=\"dns\"}"),
        1.0
    );
}

/// A generous limit, so the caps below are what refuses.
const GENEROUS: &str = r#"
[[rule]]
name = "datagrams"
protocol = "udp"
limits = [{ rate = "100000/10s" }]
"#;

fn capped(upstream: SocketAddr, extra: &str) -> String {
    format!(
        "[admin]\nenabled = false\n\n[[listener]]\nname = \"dns\"\nprotocol = \"udp\"\n\
         listen = \"127.0.0.1:0\"\nupstreams = [\"{upstream}\"]\n{extra}\n{GENEROUS}"
    )
}

fn refused(server: &tollgate::server::Server, reason: &str) -> f64 {
    metric(
        server,
        &format!("tollgate_refused_total{{listener=\"dns\",reason=\"{reason}\"}}"),
    )
}

/// Sends `payload` from `client` and waits for its echo.
async fn echoed(client: &UdpSocket, front: SocketAddr, payload: &str) {
    client.send_to(payload.as_bytes(), front).await.unwrap();
    assert_eq!(receive(client, 1).await, [format!("echo:{payload}")]);
}

#[tokio::test]
async fn sessions_are_capped_per_prefix_and_another_prefix_is_still_served() {
    let upstream = udp_echo_upstream().await;
    let server = start(&capped(upstream, "max_sessions_per_prefix = 4")).await;
    let front = server.local_addr("dns").unwrap();
    let mut clients = Vec::new();
    for i in 1..=10 {
        clients.push(client(&format!("127.0.9.{i}")).await);
    }
    for (i, client) in clients.iter().enumerate() {
        if i < 4 {
            echoed(client, front, &format!("c{i}")).await;
        } else {
            client.send_to(b"over", front).await.unwrap();
            let expected = (i - 3) as f64;
            support::eventually(|| refused(&server, "prefix_sessions") == expected).await;
        }
    }
    assert_eq!(server.udp_sessions(), 4);
    // Another /24 is served, and the capped /24's established clients keep their sessions.
    echoed(&client("127.0.10.1").await, front, "other").await;
    echoed(&clients[0], front, "again").await;
    assert_eq!(server.udp_sessions(), 5);
    assert_eq!(refused(&server, "sessions_full"), 0.0);
}

#[tokio::test]
async fn sessions_are_capped_per_source() {
    let upstream = udp_echo_upstream().await;
    let server = start(&capped(upstream, "max_sessions_per_source = 2")).await;
    let front = server.local_addr("dns").unwrap();
    let ports = [
        client("127.0.11.1").await,
        client("127.0.11.1").await,
        client("127.0.11.1").await,
    ];
    echoed(&ports[0], front, "p0").await;
    echoed(&ports[1], front, "p1").await;
    ports[2].send_to(b"p2", front).await.unwrap();
    support::eventually(|| refused(&server, "source_sessions") == 1.0).await;
    echoed(&client("127.0.11.2").await, front, "neighbour").await;
    assert_eq!(server.udp_sessions(), 3);
}

#[tokio::test]
async fn expiry_frees_sessions_and_their_places_without_traffic() {
    let upstream = udp_echo_upstream().await;
    let server = start(&capped(
        upstream,
        "session_timeout = \"300ms\"\nmax_sessions_per_prefix = 2",
    ))
    .await;
    let front = server.local_addr("dns").unwrap();
    let (a, b, c) = (
        client("127.0.12.1").await,
        client("127.0.12.2").await,
        client("127.0.12.3").await,
    );
    echoed(&a, front, "a").await;
    echoed(&b, front, "b").await;
    c.send_to(b"c", front).await.unwrap();
    support::eventually(|| refused(&server, "prefix_sessions") == 1.0).await;
    // No datagram reaches the listener now: the sessions end by themselves.
    support::eventually(|| metric(&server, "tollgate_udp_sessions{listener=\"dns\"}") == 0.0).await;
    // Their places are given back to the prefix.
    echoed(&c, front, "c").await;
    assert_eq!(refused(&server, "prefix_sessions"), 1.0);
}

#[test]
fn a_udp_listener_refuses_what_only_tcp_honours_at_the_field() {
    let text = r#"[[listener]]
name = "dns"
protocol = "udp"
listen = "127.0.0.1:5353"
upstreams = ["127.0.0.1:53"]
max_connections = 100
max_connections_per_source = 4
trusted_proxies = ["10.0.0.0/8"]
send_proxy = "v1"
proxy_header_timeout = "1s"
session_timeout = "10s"

[[listener]]
name = "web"
listen = "127.0.0.1:8080"
upstreams = ["127.0.0.1:80"]
max_connections = 100
trusted_proxies = ["10.0.0.0/8"]
send_proxy = "v2"
"#;
    let expected = [
        "t.toml:6:19: `max_connections` is a TCP setting",
        "t.toml:7:30: `max_connections_per_source` is a TCP setting",
        "t.toml:8:19: `trusted_proxies` is a TCP setting",
        "t.toml:9:14: `send_proxy = \"v1\"`: the v1 header has no UDP form",
        "t.toml:10:24: `proxy_header_timeout` is a TCP setting",
    ];
    assert_refused_at(text, &expected);
}

#[test]
fn a_tcp_listener_refuses_what_only_udp_honours_at_the_field() {
    let text = r#"[[listener]]
name = "web"
listen = "127.0.0.1:8080"
upstreams = ["127.0.0.1:80"]
session_timeout = "10s"
max_sessions = 100

[[listener]]
name = "api"
protocol = "tcp"
listen = "127.0.0.1:8081"
upstreams = ["127.0.0.1:81"]
max_sessions_per_source = 4
max_sessions_per_prefix = 8
"#;
    let expected = [
        "t.toml:5:19: `session_timeout` is a UDP setting",
        "t.toml:6:16: `max_sessions` is a UDP setting",
        "t.toml:13:27: `max_sessions_per_source` is a UDP setting",
        "t.toml:14:27: `max_sessions_per_prefix` is a UDP setting",
    ];
    assert_refused_at(text, &expected);
}

/// Asserts that `text` (as `t.toml`) is refused with exactly the `expected` errors, in order,
/// each line starting with its entry.
fn assert_refused_at(text: &str, expected: &[&str]) {
    let errors = tollgate::config::ProxyConfig::parse(text).expect_err("refused");
    let located = tollgate::config::located(std::path::Path::new("t.toml"), &errors);
    let lines: Vec<&str> = located.lines().collect();
    assert_eq!(lines.len(), expected.len(), "{located}");
    for (line, expected) in lines.iter().zip(expected) {
        assert!(line.starts_with(expected), "{line}\nexpected {expected}");
    }
}

/// The soft and hard "Max open files" of process `pid`.
fn open_files(pid: u32) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .expect("a Max open files line");
    let numbers: Vec<u64> = line
        .split_whitespace()
        .filter_map(|word| word.parse().ok())
        .collect();
    (numbers[0], numbers[1])
}

fn hard_open_files() -> u64 {
    open_files(std::process::id()).1
}

#[tokio::test]
async fn the_open_file_limit_is_raised_to_the_hard_limit_at_start() {
    let upstream = udp_echo_upstream().await;
    let hard = hard_open_files();
    assert!(
        hard > 256,
        "this test needs a hard limit above 256, not {hard}"
    );
    let proxy = Launch::new(
        "nofile",
        &format!("protocol = \"udp\"\nupstreams = [\"{upstream}\"]"),
        GENEROUS,
    )
    .shell("ulimit -Sn 256 && ")
    .start();
    assert_eq!(open_files(proxy.pid()), (hard, hard));
    assert_eq!(proxy.metric("tollgate_open_files_limit "), hard as f64);
}

/// Sends one datagram from each of sources `from..to` (127.20.x.y, 200 per /24), then waits
/// for `probe`'s echo: the listener reads its socket in order, so every datagram before the
/// probe has been handled (and none was lost to a full receive buffer) when the echo comes.
async fn spoof(from: u32, to: u32, front: SocketAddr, probe: &UdpSocket) {
    for i in from..to {
        let source = format!("127.20.{}.{}:0", i / 200, i % 200 + 1);
        let socket = std::net::UdpSocket::bind(source).unwrap();
        socket.send_to(b"spoofed", front).unwrap();
    }
    echoed(probe, front, &format!("probe{to}")).await;
}

#[tokio::test]
async fn a_spoofed_flood_churns_through_fresh_sessions_within_the_cap_and_new_clients_are_served() {
    let upstream = udp_echo_upstream().await;
    // Soft and hard 400: the proxy cannot raise it. The default cap is then
    // 400 - 128 (reserve) - 1 (listener) - 1 (admin) = 270 sessions.
    let proxy = Launch::new(
        "spoofed",
        &format!("protocol = \"udp\"\nupstreams = [\"{upstream}\"]"),
        GENEROUS,
    )
    .shell("ulimit -n 400 && ")
    .start();
    let sessions = "tollgate_udp_sessions{listener=\"front\"}";
    assert_eq!(
        proxy.metric("tollgate_udp_session_limit{listener=\"front\"}"),
        270.0
    );
    // An established client, confirmed by its second datagram in the first batch.
    let probe = client("127.21.0.1").await;
    echoed(&probe, proxy.front, "first").await;
    for batch in 0..10 {
        spoof(batch * 100, (batch + 1) * 100, proxy.front, &probe).await;
        // The admin endpoint answers all through the flood.
        assert!(proxy.metric(sessions) <= 270.0);
        // A new client arriving in the flood gets a session too.
        echoed(
            &client(&format!("127.22.0.{}", batch + 1)).await,
            proxy.front,
            "new",
        )
        .await;
    }
    assert_eq!(proxy.metric(sessions), 270.0);
    let refused = |reason: &str| {
        proxy.metric(&format!(
            "tollgate_refused_total{{listener=\"front\",reason=\"{reason}\"}}"
        ))
    };
    assert_eq!(refused("sessions_full"), 0.0);
    assert_eq!(refused("session_socket"), 0.0, "no descriptor ran out");
    // 1,011 clients, 270 places: the rest went to fresh sessions' places.
    let evicted = proxy.metric("tollgate_udp_sessions_evicted_total{listener=\"front\"}");
    assert_eq!(evicted, 1011.0 - 270.0);
}

#[tokio::test]
async fn failures_to_open_a_session_socket_are_counted_and_logged_within_the_budget() {
    let upstream = udp_echo_upstream().await;
    // An explicit cap over the descriptors there are (the limit is 100, soft and hard): new
    // sessions fail with EMFILE once about 85 are open.
    let proxy = Launch::new(
        "emfile-udp",
        &format!(
            "protocol = \"udp\"\nupstreams = [\"{upstream}\"]\nmax_sessions = 5000\n\
             session_timeout = \"3s\""
        ),
        &format!("[proxy]\nlog_rejections = 1\n{GENEROUS}"),
    )
    .shell("ulimit -n 100 && ")
    .quiet()
    .start();
    let started = std::time::Instant::now();
    let probe = client("127.21.0.1").await;
    echoed(&probe, proxy.front, "first").await;
    for batch in 0..4 {
        spoof(batch * 100, (batch + 1) * 100, proxy.front, &probe).await;
    }
    let seconds = started.elapsed().as_secs() + 1;
    let log = proxy.log();
    let warnings = log
        .lines()
        .filter(|l| l.contains("upstream socket"))
        .count() as u64;
    assert!(
        warnings <= seconds,
        "{warnings} warnings in {seconds} s over a budget of 1 a second\n{log}"
    );
    // The admin answers once the sessions expire and give their descriptors back.
    let failed =
        proxy.metric("tollgate_refused_total{listener=\"front\",reason=\"session_socket\"}");
    assert!(failed >= 250.0, "{failed} session sockets failed");
}

#[tokio::test]
async fn a_session_holds_no_buffer_of_its_own() {
    let upstream = udp_echo_upstream().await;
    let proxy = Launch::new(
        "session-memory",
        &format!("protocol = \"udp\"\nupstreams = [\"{upstream}\"]"),
        GENEROUS,
    )
    .start();
    let probe = client("127.21.0.1").await;
    echoed(&probe, proxy.front, "first").await;
    // Warm-up: the table's and the runtime's first allocations.
    for batch in 0..5 {
        spoof(batch * 100, (batch + 1) * 100, proxy.front, &probe).await;
    }
    let before = proxy.rss_kib();
    const SESSIONS: u32 = 4000;
    for batch in 0..SESSIONS / 100 {
        spoof(500 + batch * 100, 600 + batch * 100, proxy.front, &probe).await;
    }
    let sessions = proxy.metric("tollgate_udp_sessions{listener=\"front\"}");
    assert_eq!(sessions, f64::from(SESSIONS + 501));
    let per_session = (proxy.rss_kib() - before) as f64 * 1024.0 / f64::from(SESSIONS);
    eprintln!("resident memory per UDP session: {per_session:.0} bytes");
    // A 64 KiB buffer per session costs at least the page a datagram is read into.
    assert!(per_session < 3072.0, "{per_session:.0} bytes per session");
}

#[tokio::test]
async fn send_proxy_v2_puts_a_header_naming_the_client_before_each_datagram() {
    let upstream = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let server = start(&capped(
        upstream.local_addr().unwrap(),
        "send_proxy = \"v2\"",
    ))
    .await;
    let front = server.local_addr("dns").unwrap();
    let client = client("127.0.13.1").await;
    let from = client.local_addr().unwrap();
    let mut buf = [0u8; 512];
    for payload in [b"one".as_slice(), b"two"] {
        client.send_to(payload, front).await.unwrap();
        let (len, session) = tokio::time::timeout(BOUND, upstream.recv_from(&mut buf))
            .await
            .expect("a datagram upstream")
            .unwrap();
        let expected = [
            tollgate::listeners::proxy_protocol::encode_v2(
                from,
                front,
                tollgate::listeners::proxy_protocol::V2Transport::Datagram,
            )
            .as_slice(),
            payload,
        ]
        .concat();
        assert_eq!(buf[..len], expected[..]);
        // Replies go back as they come, without a header.
        upstream.send_to(b"reply", session).await.unwrap();
        assert_eq!(receive(&client, 1).await, ["reply"]);
    }
}

/// The source of the next datagram `upstream` receives, waited for in a blocking task: a
/// paused clock does not move while one runs, so the wait takes no time on the proxy's clock.
async fn next_source(upstream: std::net::UdpSocket) -> (std::net::UdpSocket, SocketAddr) {
    tokio::task::spawn_blocking(move || {
        let (_, source) = upstream
            .recv_from(&mut [0; 64])
            .expect("a datagram upstream within the bound");
        (upstream, source)
    })
    .await
    .unwrap()
}

/// On a paused clock: the proxy runs on this test's runtime, whose clock moves only by the
/// sleeps below (every wait for a socket is a blocking task), so the datagrams are exactly
/// 100 ms apart on the proxy's clock however slow the machine.
#[tokio::test(start_paused = true)]
async fn a_session_in_use_outlives_its_timeout() {
    const TIMEOUT: Duration = Duration::from_millis(500);
    let mut upstream = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    upstream.set_read_timeout(Some(BOUND)).unwrap();
    let server = start(&capped(
        upstream.local_addr().unwrap(),
        &format!("session_timeout = \"{}ms\"", TIMEOUT.as_millis()),
    ))
    .await;
    let front = server.local_addr("dns").unwrap();
    let client = std::net::UdpSocket::bind("127.0.14.1:0").unwrap();
    // A datagram every 100 ms for 1.5 s: three timeouts, never one idle.
    let mut sessions = Vec::new();
    for i in 0..16 {
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        client.send_to(b"ping", front).unwrap();
        let session;
        (upstream, session) = next_source(upstream).await;
        sessions.push(session);
    }
    // One session, one socket: a new one would be fresh again, and evictable in a flood.
    assert!(sessions.iter().all(|s| *s == sessions[0]), "{sessions:?}");
    // It ends one timeout after its last datagram.
    tokio::time::sleep(TIMEOUT - Duration::from_millis(1)).await;
    assert_eq!(server.udp_sessions(), 1, "ended before its timeout");
    tokio::time::sleep(Duration::from_millis(2)).await;
    assert_eq!(server.udp_sessions(), 0, "still there after its timeout");
}
