//! One attempt counted once: an attempt that came in through the XDP program is counted by
//! the kernel only, under the limits the kernel takes, and one from this host (over `lo`)
//! by the proxy, which did not cross the program; `/estimate` adds the two and names the
//! kernel's estimate, and `/explain` says the kernel counts and decides that limit for a
//! source whose arrivals cross the program (its verdict the kernel's drop once over), and
//! `/top`'s over column reads the kernel's count. Same namespace, veth pair and spoofed sender as the module's first
//! test, with a UDP listener on `[::]` that the datagrams reach.

use std::net::UdpSocket;

use super::{INSIDE, attached, send_from, veth_pair};
use crate::support::process::{Launch, Proxy};

/// The listener the datagrams reach, on every address of the namespace.
const PORT: u16 = 5300;

/// 50 attempts an hour per /64 (and per IPv4 address): the kernel takes both. An hour, so
/// that no window turns while the test reads what it sent (a turn would scale the count
/// down, see the layout's estimate).
const POLICY: &str =
    "[[rule]]\nname = \"per-net\"\nlimits = [{ rate = \"50/1h\", ipv6_prefix = 64 }]\n";

/// The body of the admin's answer to `path`.
fn body(proxy: &Proxy, path: &str) -> String {
    let answer = proxy.get(path);
    answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default()
}

/// Waits (bounded: a guard, not a timing assertion) until the `v6` listener has allowed
/// `count` datagrams.
fn decided(proxy: &Proxy, count: f64) {
    let deadline = std::time::Instant::now() + crate::support::BOUND;
    let metric = "tollgate_decisions_total{listener=\"v6\",verdict=\"allowed\"}";
    while proxy.metric(metric) < count {
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {count} decided",
            proxy.metric(metric)
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(proxy.metric(metric), count);
}

/// `/estimate`'s JSON for `source`: its first limit's estimate and the kernel's part of it.
fn estimate(proxy: &Proxy, source: &str) -> (u64, Option<u64>) {
    let text = body(proxy, &format!("/estimate?source={source}&format=json"));
    let json: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let limit = &json["limits"][0];
    (
        limit["estimate"].as_u64().expect("an estimate"),
        limit["xdp"].as_u64(),
    )
}

/// Sends `count` datagrams from `from` (an address of this namespace) to the listener.
fn send_locally(from: &str, to: &str, count: usize) {
    let socket = UdpSocket::bind(format!("[{from}]:0")).unwrap();
    for _ in 0..count {
        socket.send_to(b"x", format!("[{to}]:{PORT}")).unwrap();
    }
}

#[test]
#[ignore = "needs root, clang (the XDP program built in), unshare, ip and python3"]
fn an_attempt_is_counted_once_by_the_kernel_or_by_the_proxy() {
    const NAME: &str = "an_attempt_is_counted_once_by_the_kernel_or_by_the_proxy";
    if std::env::var_os(INSIDE).is_none() {
        crate::support::namespace::rerun_inside(
            &format!("xdp::counted_once::{NAME}"),
            &["-n", "-m", "--propagation", "private"],
            INSIDE,
        );
        return;
    }
    veth_pair();
    let rest = format!(
        "[[listener]]\nname = \"v6\"\nlisten = \"[::]:{PORT}\"\nprotocol = \"udp\"\n\
         upstreams = [\"127.0.0.1:9\"]\n\n\
         [xdp]\ninterfaces = [\"tg0\"]\nmode = \"native\"\nmemory = \"64KiB\"\nrequired = true\n\n\
         {POLICY}"
    );
    let proxy = Launch::new(
        "xdp-once",
        "protocol = \"udp\"\nupstreams = [\"127.0.0.1:9\"]",
        &rest,
    )
    .start();
    assert!(attached(), "the program is not on tg0");
    // The proxy has seen that the program is on every interface (tg0; lo aside): /estimate
    // then adds the kernel's count under the limits it takes.
    let deadline = std::time::Instant::now() + crate::support::BOUND;
    while estimate(&proxy, "2001:db8:77:5::1").1.is_none() {
        assert!(std::time::Instant::now() < deadline, "{}", proxy.log());
        std::thread::sleep(std::time::Duration::from_millis(10));
    }

    // 10 datagrams from one /64 through the program, under its limit: each reaches the
    // proxy, and each is counted once, by the kernel.
    send_from("2001:db8:77:5", 1, 10, 1, PORT);
    decided(&proxy, 10.0);
    assert_eq!(
        estimate(&proxy, "2001:db8:77:5::1"),
        (10, Some(10)),
        "the kernel's count and the proxy's own (estimate - xdp) add up to what was sent"
    );
    let text = body(&proxy, "/estimate?source=2001:db8:77:5::1");
    let row = text
        .lines()
        .find(|l| l.contains("2001:db8:77:5::/64"))
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(row.split_whitespace().nth(3), Some("10"), "{text}");
    assert!(
        text.contains("xdp      /64: the kernel's estimate 10 of 50 per "),
        "{text}"
    );

    // From this host (over lo, never through the program): counted by the proxy.
    send_locally("::1", "::1", 3);
    send_locally("2001:db8:9::1", "2001:db8:9::1", 2);
    decided(&proxy, 15.0);
    // No kernel part (`xdp` null): the kernel does not count this host's arrivals.
    assert_eq!(estimate(&proxy, "::1"), (3, None));
    assert_eq!(estimate(&proxy, "2001:db8:9::1"), (2, None));
    // The JSON names the kernel's estimate per level, as /explain's does.
    let text = body(&proxy, "/estimate?source=2001:db8:77:5::1&format=json");
    let json: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(json["xdp"]["levels"][0]["level"], "/64", "{text}");
    assert_eq!(json["xdp"]["levels"][0]["estimate"], 10, "{text}");
    assert_eq!(json["xdp"]["levels"][0]["limit"], 50, "{text}");

    // /explain: the limit the kernel takes is the kernel's to count and decide for a source
    // whose arrivals cross the program, with the kernel's estimate; a source of this host
    // keeps the proxy's line.
    let text = body(&proxy, "/explain?source=2001:db8:77:5::1&transport=udp");
    assert!(
        text.contains(
            "2001:db8:77:5::/64: counted and decided by the kernel (XDP): the kernel's \
             estimate 10 of 50 -> within"
        ),
        "{text}"
    );
    assert!(text.contains("verdict  allow\n"), "{text}");
    let text = body(&proxy, "/explain?source=::1&transport=udp");
    assert!(text.contains("counted as ::/64: estimate 3 "), "{text}");
    let explain = |source: &str| -> serde_json::Value {
        let text = body(
            &proxy,
            &format!("/explain?source={source}&transport=udp&format=json"),
        );
        serde_json::from_str(&text).expect("JSON")
    };
    let limit = explain("2001:db8:77:5::1")["rules"][0]["limits"][0].clone();
    assert_eq!(limit["counted_by"], "kernel", "{limit}");
    assert_eq!(limit["estimate"], 10, "{limit}");
    assert_eq!(
        explain("::1")["rules"][0]["limits"][0]["counted_by"],
        "proxy"
    );

    // 45 more from the /64: the kernel lets 40 through (its limit of 50) and drops the rest;
    // the proxy's own count under that limit stays 0, and /explain's verdict is the kernel's.
    send_from("2001:db8:77:5", 11, 45, 1, PORT);
    decided(&proxy, 55.0);
    let text = body(&proxy, "/explain?source=2001:db8:77:5::1&transport=udp");
    assert!(
        text.contains("verdict  drop in the kernel (XDP) by rule per-net limit 0 (the kernel's"),
        "{text}"
    );
    let json = explain("2001:db8:77:5::1");
    assert_eq!(json["verdict"]["by"], "kernel", "{json}");
    assert!(json["verdict"]["estimate"].as_u64() >= Some(50), "{json}");
    assert_eq!(json["rules"][0]["limits"][0]["proxy_estimate"], 0, "{json}");

    // /top names the /64 the kernel dropped (its drop event, read every 100 ms), and its
    // over column reads the kernel's count, not the proxy's 0.
    let deadline = std::time::Instant::now() + crate::support::BOUND;
    let row = loop {
        let text = body(&proxy, "/top?format=json");
        let json: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        let rows = json["top"].as_array().cloned().unwrap_or_default();
        if let Some(row) = rows.into_iter().find(|r| r["source"] == "2001:db8:77:5::") {
            break row;
        }
        assert!(std::time::Instant::now() < deadline, "{text}");
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    assert!(row["over"].as_f64() >= Some(1.0), "{row}");
}
