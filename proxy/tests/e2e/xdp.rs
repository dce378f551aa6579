//! The XDP mode through the running proxy: in a network namespace the test makes (`unshare
//! -n -m`), a veth pair, the real binary with `[xdp]` attached to one end, and spoofed UDP
//! sources across one /64 sent as raw frames (AF_PACKET, from python3) from a peer
//! namespace on the other end. What reaches UDP is the kernel's limit, another /64 is served,
//! `/explain` names the kernel's estimate, the metrics count what the kernel did, an allowed
//! source inside the flooding /64 (from `[lists]`, and one added and removed through the admin
//! endpoint) gets every frame through, `/top` names the /64 the kernel dropped (its drop
//! events), a SIGHUP reload changes the limit in flight, SIGTERM detaches, and a killed proxy
//! leaves nothing that blocks the next start; in native mode, then in generic mode. Needs
//! root, clang (the program built in), `unshare`, `ip` and python3, so it is ignored by
//! default; CI runs it with `--include-ignored xdp::`.

use std::process::Command;

use crate::support;
use crate::support::process::{Launch, Proxy};

/// Set in the re-executed test binary that runs inside the namespace.
const INSIDE: &str = "TOLLGATE_XDP_TEST_NETNS";

/// Runs test `name` of this module again, alone, inside new network and mount namespaces.
fn in_namespace(name: &str) {
    support::namespace::rerun_inside(
        &format!("xdp::{name}"),
        &["-n", "-m", "--propagation", "private"],
        INSIDE,
    );
}

/// Runs `script` with sh; its stdout, or the test fails with its output.
fn sh(script: &str) -> String {
    let output = Command::new("sh")
        .args(["-c", script])
        .output()
        .expect("sh runs");
    assert!(
        output.status.success(),
        "`{script}`: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Datagrams that reached UDP over IPv6 in this namespace (`/proc/net/snmp6`: delivered, to
/// no port, or in error): what got past the program.
fn udp6_arrived() -> u64 {
    std::fs::read_to_string("/proc/net/snmp6")
        .unwrap()
        .lines()
        .filter_map(|line| line.split_once(char::is_whitespace))
        .filter(|(name, _)| ["Udp6InDatagrams", "Udp6NoPorts", "Udp6InErrors"].contains(name))
        .map(|(_, value)| value.trim().parse::<u64>().unwrap())
        .sum()
}

/// The peer namespace sends `each` UDP datagrams to `port` on 2001:db8:9::1 from each of the
/// sources `prefix:0:0:0:i` for `i` in `first..first + count`, as raw Ethernet frames on
/// tg1 (AF_PACKET: the sources are spoofed, nothing on the peer owns them).
fn send_from(prefix: &str, first: u32, count: u32, each: u32, port: u16) {
    // From `ip link` (sysfs here is the parent namespace's).
    let link = sh("ip link show dev tg0");
    let mac = link
        .split_once("link/ether ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .expect("tg0's MAC address");
    let script = format!(
        r#"
import socket, struct, ipaddress
dst = ipaddress.IPv6Address("2001:db8:9::1").packed
mac = bytes.fromhex("{mac}".strip().replace(":", ""))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("tg1", 0))
def csum(data):
    if len(data) % 2: data += b"\0"
    total = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while total >> 16: total = (total & 0xffff) + (total >> 16)
    return (~total & 0xffff) or 0xffff
for i in range({first}, {first} + {count}):
    src = ipaddress.IPv6Address("{prefix}:0:0:0:%x" % i).packed
    payload = b"x"
    length = 8 + len(payload)
    udp = struct.pack("!HHHH", 40000, {port}, length, 0) + payload
    pseudo = src + dst + struct.pack("!IxxxB", length, 17)
    udp = udp[:6] + struct.pack("!H", csum(pseudo + udp)) + udp[8:]
    ip = struct.pack("!IHBB", 6 << 28, length, 17, 64) + src + dst
    for _ in range({each}):
        s.send(mac + bytes.fromhex("020000000002") + b"\x86\xdd" + ip + udp)
"#
    );
    let status = Command::new("ip")
        .args(["netns", "exec", "tg_peer", "python3", "-c", &script])
        .status()
        .expect("ip netns exec runs");
    assert!(status.success(), "the peer's sender failed");
}

/// The policy: 50 attempts a minute per /64 (and per IPv4 address).
fn policy(limit: u32) -> String {
    format!(
        "[[rule]]\nname = \"per-net\"\nlimits = [{{ rate = \"{limit}/1m\", ipv6_prefix = 64 }}]\n"
    )
}

/// The admin token of these tests (run-time list changes need it).
const TOKEN: &str = "xdp-secret";

/// One request to the admin endpoint with the token, sending `body` as JSON; (status, the
/// whole answer).
fn admin(proxy: &Proxy, method: &str, path: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(proxy.admin).unwrap();
    stream.set_read_timeout(Some(support::BOUND)).unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\
         Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    (status, text)
}

/// Asks `path` of the admin endpoint until `done` holds for its answer; fails the test past
/// [`support::BOUND`].
fn until(proxy: &Proxy, path: &str, what: &str, done: impl Fn(&str) -> bool) {
    let deadline = std::time::Instant::now() + support::BOUND;
    loop {
        let answer = proxy.get(path);
        if done(&answer) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{what}: {answer}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Whether the program is attached to tg0 (`ip link` names it).
fn attached() -> bool {
    sh("ip link show dev tg0").contains("prog/xdp")
}

/// Whether tg0's program is attached in `mode`: `ip link` says `xdp` (native) or `xdpgeneric`
/// after the MTU.
fn attached_in(mode: &str) -> bool {
    let word = if mode == "native" {
        " xdp "
    } else {
        " xdpgeneric "
    };
    sh("ip link show dev tg0").contains(word)
}

#[test]
#[ignore = "needs root, clang (the XDP program built in), unshare, ip and python3"]
fn spoofed_sources_across_a_64_meet_the_kernels_limit_through_the_running_proxy() {
    through_the_running_proxy(
        "native",
        "spoofed_sources_across_a_64_meet_the_kernels_limit_through_the_running_proxy",
    );
}

#[test]
#[ignore = "needs root, clang (the XDP program built in), unshare, ip and python3"]
fn spoofed_sources_meet_the_kernels_limit_in_generic_mode_too() {
    through_the_running_proxy(
        "generic",
        "spoofed_sources_meet_the_kernels_limit_in_generic_mode_too",
    );
}

/// tg0 here (2001:db8:9::1, where the program goes), tg1 in the namespace tg_peer; /run/netns
/// on a tmpfs of this mount namespace, so the named namespace goes with it.
fn veth_pair() {
    sh(
        "mkdir -p /run/netns && mount -t tmpfs tollgate-test /run/netns && ip link set lo up \
        && ip netns add tg_peer && ip link add tg0 type veth peer name tg1 \
        && ip link set tg1 netns tg_peer && ip addr add 2001:db8:9::1/64 dev tg0 nodad \
        && ip link set tg0 up \
        && ip netns exec tg_peer sh -c 'ip link set lo up && ip link set tg1 up'",
    );
}

/// The test, with the program attached in `mode`; `name` is the test's, run again inside its
/// namespaces.
fn through_the_running_proxy(mode: &str, name: &str) {
    if std::env::var_os(INSIDE).is_none() {
        in_namespace(name);
        return;
    }
    veth_pair();
    let xdp = format!(
        "[xdp]\ninterfaces = [\"tg0\"]\nmode = \"{mode}\"\nmemory = \"64KiB\"\nrequired = true\n"
    );
    // One address of the flooding /64 is allowed.
    let lists = "[lists]\nallow = [\"2001:db8:77:1::a110\"]\n";
    let rest = format!("{xdp}\n{lists}\n{}", policy(50));
    let launch = || -> Proxy {
        Launch::new(
            "xdp",
            "protocol = \"udp\"\nupstreams = [\"127.0.0.1:9\"]",
            &rest,
        )
        .admin("token_env = \"TOLLGATE_TEST_ADMIN_TOKEN\"")
        .shell(format!("export TOLLGATE_TEST_ADMIN_TOKEN='{TOKEN}' && "))
        .start()
    };
    let mut proxy = launch();
    assert!(
        attached_in(mode),
        "the program is not on tg0 in {mode} mode"
    );
    assert_eq!(proxy.metric("tollgate_xdp_active"), 1.0);
    let port = proxy.front.port();

    // 200 sources of one /64: the kernel lets the limit through, not one more.
    let before = udp6_arrived();
    send_from("2001:db8:77:1", 1, 200, 1, port);
    assert_eq!(udp6_arrived() - before, 50, "what reached UDP from the /64");
    // Another /64 is served.
    let before = udp6_arrived();
    send_from("2001:db8:77:2", 1, 10, 1, port);
    assert_eq!(udp6_arrived() - before, 10, "another /64");

    // /explain names the kernel's estimate for an address of the flooding /64 (200 counted,
    // its refused attempts included; less only if the minute turned meanwhile).
    let explained = proxy.get("/explain?source=2001:db8:77:1::abcd&transport=udp");
    assert!(
        explained.contains("xdp      /64: the kernel's estimate ")
            && explained.contains(" of 50 per 1m (drops the next attempt)"),
        "{explained}"
    );
    let served = proxy.get("/explain?source=2001:db8:77:2::1&transport=udp");
    assert!(
        served.contains("xdp      /64: the kernel's estimate 10 of 50 per 1m (passes"),
        "{served}"
    );
    assert_eq!(proxy.metric("tollgate_xdp_dropped_total"), 150.0);
    assert_eq!(proxy.metric("tollgate_xdp_passed_total"), 60.0);

    // The allowed address inside the /64 over its limit gets all its frames through
    // (uncounted, as the proxy would pass it); its neighbour none.
    let before = udp6_arrived();
    send_from("2001:db8:77:1", 0xa110, 1, 30, port);
    assert_eq!(udp6_arrived() - before, 30, "the allowed source");
    let before = udp6_arrived();
    send_from("2001:db8:77:1", 0xa111, 1, 10, port);
    assert_eq!(udp6_arrived() - before, 0, "its neighbour");
    // A run-time entry is in the kernel by the admin's answer, and out of it by the next.
    let (status, answer) = admin(
        &proxy,
        "POST",
        "/lists/allow",
        r#"{"cidr": "2001:db8:77:1::b0b", "ttl": "1h"}"#,
    );
    assert_eq!(status, 201, "{answer}");
    let before = udp6_arrived();
    send_from("2001:db8:77:1", 0xb0b, 1, 20, port);
    assert_eq!(
        udp6_arrived() - before,
        20,
        "the source allowed at run time"
    );
    assert_eq!(proxy.metric("tollgate_xdp_allow_entries"), 2.0);
    let (status, answer) = admin(&proxy, "DELETE", "/lists/allow?cidr=2001:db8:77:1::b0b", "");
    assert_eq!(status, 200, "{answer}");
    let before = udp6_arrived();
    send_from("2001:db8:77:1", 0xb0b, 1, 5, port);
    assert_eq!(udp6_arrived() - before, 0, "after its removal");
    assert_eq!(proxy.metric("tollgate_xdp_allowed_total"), 50.0);
    assert_eq!(proxy.metric("tollgate_xdp_dropped_total"), 165.0);
    assert_eq!(proxy.metric("tollgate_xdp_allow_entries"), 1.0);

    // The kernel's drop events reach the offender list: /top names the /64 it dropped, and
    // the rule.
    until(
        &proxy,
        "/top",
        "/top names the /64 the kernel dropped",
        |top| {
            top.lines().any(|line| {
                line.starts_with("2001:db8:77:1:: ") && line.ends_with("xdp /64 per-net")
            })
        },
    );
    assert!(proxy.metric("tollgate_xdp_drop_events_total") >= 1.0);
    assert_eq!(proxy.metric("tollgate_xdp_drop_events_lost_total"), 0.0);

    // A reload raises the limit in flight: the /64 at 215 gets 50 more through.
    let file = std::fs::read_to_string(&proxy.path).unwrap();
    std::fs::write(&proxy.path, file.replace(&policy(50), &policy(300))).unwrap();
    proxy.signal("HUP");
    until(
        &proxy,
        "/explain?source=2001:db8:77:1::abcd&transport=udp",
        "the reload did not reach the kernel",
        |explained| explained.contains(" of 300 per 1m"),
    );
    let before = udp6_arrived();
    send_from("2001:db8:77:1", 1000, 50, 1, port);
    assert_eq!(udp6_arrived() - before, 50, "after the reload");

    // SIGTERM detaches.
    proxy.signal("TERM");
    assert!(proxy.wait_exit().success());
    assert!(!attached(), "SIGTERM left the program on tg0");
    // A proxy killed outright leaves nothing that blocks the next start.
    let killed = launch();
    assert!(attached());
    drop(killed);
    assert!(!attached(), "a killed proxy left the program on tg0");
    let again = launch();
    assert!(attached(), "the start after a kill did not attach");
    drop(again);
}

mod counted_once;
