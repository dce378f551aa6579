//! Which arrivals the XDP program counted before the proxy saw them, so that the proxy does
//! not count them again under the limits the kernel takes (see
//! [`tollgate_filter::CountedAhead`]).
//!
//! The program counts a frame that arrives on an interface it is attached to, to a guarded
//! port. The proxy cannot tell per connection which interface it came in on without a
//! syscall per connection (`IP_PKTOPTIONS`, `IP_PKTINFO`: out of reach without `unsafe`,
//! and dearer than the count it would save), so it tells per host: when the program is on
//! every interface of the proxy's network namespace that has a route but `lo`, every
//! arrival from a source that is not one of this host's addresses came in through the
//! program. An arrival on a listener the program does not guard, from a loopback or local
//! address, or named by a PROXY header (the kernel saw the peer that sent it, not the
//! source) did not cross it, and neither did anything while one interface is not attached:
//! the proxy counts those itself. Interfaces and addresses are read again every second
//! ([`follow`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use tokio::sync::watch;

/// How often the host's interfaces and addresses are read again.
const SURVEY_EVERY: Duration = Duration::from_secs(1);

/// What arrivals crossed the XDP program, while it is attached to every interface.
#[derive(Clone, Debug)]
pub(crate) struct Crossing {
    /// The listeners whose ports the program guards.
    pub(crate) listeners: Vec<String>,
    /// This host's own addresses (a source among them came over `lo`).
    pub(crate) local: Vec<IpAddr>,
    /// Per family (IPv4, IPv6), whether the program counts without dropping (its allow lists
    /// did not fit in the kernel): an arrival of that family is decided by the proxy under
    /// every limit, or no one would enforce the kernel's.
    pub(crate) undropped: Arc<[AtomicBool; 2]>,
}

impl Crossing {
    /// Whether an arrival on `listener` from `source` came in through the program.
    #[must_use]
    pub(crate) fn crossed(&self, listener: &str, source: IpAddr) -> bool {
        self.comes_from_afar(source) && self.listeners.iter().any(|l| l == listener)
    }

    /// Whether `source`'s arrivals on a guarded listener cross the program and are left to
    /// it under the limits the kernel takes: not from this host, and of a family the program
    /// drops.
    #[must_use]
    fn comes_from_afar(&self, source: IpAddr) -> bool {
        // A dual-stack socket names an IPv4 peer as ::ffff:a.b.c.d; the program saw IPv4.
        let source = source.to_canonical();
        !source.is_loopback()
            && !self.local.contains(&source)
            && !self.undropped[usize::from(source.is_ipv6())].load(Ordering::SeqCst)
    }
}

/// The data path's word on [`Crossing`]: `None` while the program is not attached to every
/// interface (or not at all), and then nothing crossed it.
#[derive(Debug, Default)]
pub(crate) struct Ahead {
    crossing: ArcSwapOption<Crossing>,
}

impl Ahead {
    /// Whether an arrival on `listener` from `source` came in through the program.
    #[must_use]
    pub(crate) fn crossed(&self, listener: &str, source: IpAddr) -> bool {
        self.crossing
            .load()
            .as_ref()
            .is_some_and(|c| c.crossed(listener, source))
    }

    /// Whether `source`'s arrivals on the guarded listeners are left to the program now under
    /// the limits the kernel takes (counted and decided there, not here): the program is on
    /// every interface, `source` is not one of this host's addresses and its family is
    /// dropped by the program (the admin's `/explain`).
    #[must_use]
    pub(crate) fn left_to_kernel(&self, source: IpAddr) -> bool {
        self.crossing
            .load()
            .as_ref()
            .is_some_and(|c| c.comes_from_afar(source))
    }

    /// Whether arrivals are taken as having crossed the program now.
    #[cfg(test)]
    #[must_use]
    pub(crate) fn active(&self) -> bool {
        self.crossing.load().is_some()
    }

    /// Sets what crossed (`None`: nothing).
    pub(crate) fn set(&self, crossing: Option<Crossing>) {
        self.crossing.store(crossing.map(Arc::new));
    }
}

/// What [`survey`] found: the host's interfaces with a route that the program is not on,
/// and the host's own addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Survey {
    /// Interfaces with a route, `lo` left out, that are not among those attached.
    pub(crate) unattached: Vec<String>,
    /// This host's addresses.
    pub(crate) local: Vec<IpAddr>,
}

/// Reads this network namespace's interfaces with a route (`/proc/net/route`,
/// `/proc/net/ipv6_route`) and its own addresses (`/proc/net/fib_trie`,
/// `/proc/net/if_inet6`); `attached` are the interfaces the program is on. A file that
/// cannot be read reads as empty (no IPv6, say).
#[must_use]
pub(crate) fn survey(attached: &[String]) -> Survey {
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let mut routed = route_interfaces(&read("/proc/net/route"), &read("/proc/net/ipv6_route"));
    routed.retain(|name| name != "lo" && !attached.contains(name));
    let mut local = local_v4(&read("/proc/net/fib_trie"));
    local.extend(local_v6(&read("/proc/net/if_inet6")));
    Survey {
        unattached: routed,
        local,
    }
}

/// Keeps `gate`'s [`Ahead`] in step with the host until `stopped`: every second, the program's
/// `interfaces` are compared with the host's, and the arrivals on `listeners` taken as
/// having crossed it while it is on every one; says in one line when that changes.
pub(crate) async fn follow(
    gate: Arc<super::Gate>,
    interfaces: Vec<String>,
    listeners: Vec<String>,
    undropped: Arc<[AtomicBool; 2]>,
    mut stopped: watch::Receiver<bool>,
) {
    let mut was: Option<Vec<String>> = None;
    loop {
        let survey = survey(&interfaces);
        if was.as_ref() != Some(&survey.unattached) {
            if survey.unattached.is_empty() {
                tracing::info!(
                    "XDP mode: the program is on every interface of this host: the proxy leaves \
                     out of its own count, under the limits the kernel takes, what came in \
                     through it (it counts arrivals from this host and on listeners not guarded)"
                );
            } else {
                tracing::warn!(
                    "XDP mode: interface(s) {} carry traffic the program does not see: the proxy \
                     counts every arrival itself (for sources the kernel saw as well, its count \
                     and the kernel's overlap)",
                    survey.unattached.join(", ")
                );
            }
            was = Some(survey.unattached.clone());
        }
        gate.ahead()
            .set(survey.unattached.is_empty().then(|| Crossing {
                listeners: listeners.clone(),
                local: survey.local,
                undropped: Arc::clone(&undropped),
            }));
        tokio::select! {
            () = tokio::time::sleep(SURVEY_EVERY) => {}
            _ = stopped.changed() => {
                gate.ahead().set(None);
                return;
            }
        }
    }
}

/// The interfaces named by routes: `/proc/net/route` (its first column, under a header)
/// and `/proc/net/ipv6_route` (its last column), each once.
fn route_interfaces(v4: &str, v6: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let v4 = v4
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next());
    let v6 = v6.lines().filter_map(|l| l.split_whitespace().last());
    for name in v4.chain(v6) {
        if !names.iter().any(|n| n == name) {
            names.push(name.to_owned());
        }
    }
    names
}

/// The host's IPv4 addresses in `/proc/net/fib_trie`: each `|-- ADDRESS` line followed by
/// a `/32 host LOCAL` line.
fn local_v4(fib_trie: &str) -> Vec<IpAddr> {
    let mut found = Vec::new();
    let mut last: Option<Ipv4Addr> = None;
    for line in fib_trie.lines().map(str::trim) {
        if let Some(address) = line.strip_prefix("|-- ") {
            last = address.parse().ok();
        } else if line.starts_with("/32 host LOCAL")
            && let Some(address) = last
            && !found.contains(&IpAddr::V4(address))
        {
            found.push(IpAddr::V4(address));
        }
    }
    found
}

/// The host's IPv6 addresses in `/proc/net/if_inet6`: the first column, 32 hex digits.
fn local_v6(if_inet6: &str) -> Vec<IpAddr> {
    if_inet6
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter_map(|hex| u128::from_str_radix(hex, 16).ok())
        .map(|bits| IpAddr::V6(Ipv6Addr::from(bits)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_arrival_crossed_the_program_unless_it_came_from_this_host_or_to_another_port() {
        let crossing = Crossing {
            listeners: vec!["dns".into()],
            local: vec![
                "2001:db8:9::1".parse().unwrap(),
                "10.0.0.5".parse().unwrap(),
            ],
            undropped: Arc::default(),
        };
        let crossed =
            |listener: &str, source: &str| crossing.crossed(listener, source.parse().unwrap());
        assert!(crossed("dns", "2001:db8:77::1"));
        assert!(crossed("dns", "192.0.2.1"));
        // From this host: over lo, never through the program.
        assert!(!crossed("dns", "::1"));
        assert!(!crossed("dns", "127.0.0.2"));
        assert!(!crossed("dns", "2001:db8:9::1"));
        assert!(!crossed("dns", "10.0.0.5"));
        // The same, named by a dual-stack socket.
        assert!(!crossed("dns", "::ffff:127.0.0.2"));
        assert!(!crossed("dns", "::ffff:10.0.0.5"));
        assert!(crossed("dns", "::ffff:192.0.2.1"));
        // A listener whose port the program does not guard.
        assert!(!crossed("web", "192.0.2.1"));
        // Nothing crossed while the program is not on every interface.
        let ahead = Ahead::default();
        assert!(!ahead.crossed("dns", "192.0.2.1".parse().unwrap()));
        let left = |source: &str| ahead.left_to_kernel(source.parse().unwrap());
        assert!(!left("192.0.2.1"));
        ahead.set(Some(crossing.clone()));
        assert!(ahead.active() && ahead.crossed("dns", "192.0.2.1".parse().unwrap()));
        // `/explain`'s word: whatever the listener, a source of this host is the proxy's.
        assert!(left("192.0.2.1") && left("::ffff:192.0.2.1") && left("2001:db8:77::1"));
        assert!(!left("10.0.0.5") && !left("::1") && !left("::ffff:10.0.0.5"));
        crossing.undropped[0].store(true, Ordering::SeqCst);
        assert!(!left("192.0.2.1") && left("2001:db8:77::1"));
        crossing.undropped[0].store(false, Ordering::SeqCst);
        ahead.set(None);
        assert!(!ahead.active() && !left("192.0.2.1"));
    }

    /// A family whose allow lists did not fit in the kernel is counted there but never
    /// dropped: its arrivals are the proxy's to decide under every limit, from the moment the
    /// program stops dropping them until it drops them again.
    #[test]
    fn a_family_the_program_does_not_drop_is_decided_by_the_proxy() {
        let crossing = Crossing {
            listeners: vec!["dns".into()],
            local: Vec::new(),
            undropped: Arc::default(),
        };
        let crossed = |source: &str| crossing.crossed("dns", source.parse().unwrap());
        assert!(crossed("192.0.2.1") && crossed("2001:db8:77::1"));
        crossing.undropped[1].store(true, Ordering::SeqCst);
        assert!(crossed("192.0.2.1") && crossed("::ffff:192.0.2.1"));
        assert!(!crossed("2001:db8:77::1"));
        crossing.undropped[0].store(true, Ordering::SeqCst);
        assert!(!crossed("192.0.2.1") && !crossed("::ffff:192.0.2.1"));
        crossing.undropped[1].store(false, Ordering::SeqCst);
        assert!(crossed("2001:db8:77::1"));
    }

    /// Through the gate: an arrival that crossed the program is not counted again under the
    /// limit the kernel takes (it was, twice, before), one from this host is.
    #[test]
    fn the_gate_counts_once_what_came_in_through_the_program() {
        use std::time::Duration;

        use tollgate_filter::{Config, CountedAhead, Filter, Source, Transport};
        use tollgate_sketch::{Clock, MonotonicClock};

        use crate::gate::Gate;
        use crate::metrics::Metrics;

        let config = Config::parse(
            "[[rule]]\nname = \"r\"\nlimits = [{ rate = \"50/10s\" }, { rate = \"90/10s\", ipv4_prefix = 16 }]\n",
        )
        .unwrap();
        let clock = MonotonicClock::new();
        let filter = Filter::new(config).unwrap();
        let ahead = CountedAhead {
            window: Duration::from_secs(10),
            ipv4: vec![32, 24],
            ipv6: vec![128, 64, 48],
        };
        filter.count_ahead(Some(ahead), clock.now()).unwrap();
        let metrics = std::sync::Arc::new(Metrics::for_sections(false, false));
        let gate = Gate::new(filter, clock, metrics.clone(), 1 << 16, 0, Duration::ZERO).unwrap();
        gate.ahead().set(Some(Crossing {
            listeners: vec!["dns".into()],
            local: vec!["10.0.0.5".parse().unwrap()],
            undropped: Arc::default(),
        }));
        let dns = metrics.listeners.listener("dns");
        let estimates = |addr: &str| -> Vec<u64> {
            let source = Source::new(addr.parse().unwrap());
            let policy = gate.filter().policy();
            policy
                .estimates(source, gate.now())
                .iter()
                .map(|e| e.estimate)
                .collect()
        };
        for source in ["192.0.2.1", "10.0.0.5"] {
            for _ in 0..7 {
                let _ = gate.pass(
                    &dns,
                    Source::new(source.parse().unwrap()),
                    Transport::Udp,
                    1,
                );
            }
        }
        // Through the program: the /32 limit is the kernel's; the /16 one is counted here.
        assert_eq!(estimates("192.0.2.1"), [0, 7]);
        // From this host: counted under both.
        assert_eq!(estimates("10.0.0.5"), [7, 7]);
        // Named by a PROXY header: the kernel saw the peer, so counted here.
        let _ = gate.pass_named(
            &dns,
            Source::new("192.0.2.1".parse().unwrap()),
            Transport::Udp,
            1,
        );
        assert_eq!(estimates("192.0.2.1"), [1, 8]);
    }

    #[test]
    fn the_hosts_interfaces_and_addresses_are_read_from_proc() {
        let route = "Iface\tDestination\tGateway\tFlags\n\
                     eth0\t00000000\t0102A8C0\t0003\n\
                     eth0\t0002A8C0\t00000000\t0001\n\
                     docker0\t000011AC\t00000000\t0001\n";
        let ipv6_route = "fe800000000000000000000000000000 40 00000000000000000000000000000000 00 \
                          00000000000000000000000000000000 00000100 00000001 00000000 00000001 tg0\n\
                          00000000000000000000000000000001 80 00000000000000000000000000000000 00 \
                          00000000000000000000000000000000 00000000 00000002 00000000 80200001 lo\n";
        assert_eq!(
            route_interfaces(route, ipv6_route),
            ["eth0", "docker0", "tg0", "lo"]
        );
        let fib_trie = "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 0.0.0.0\n        /0 universe UNICAST\n\
                        \x20    +-- 127.0.0.0/8 2 0 2\n        |-- 127.0.0.1\n           /32 host LOCAL\n\
                        \x20       |-- 192.168.2.0\n           /24 link UNICAST\n\
                        \x20       |-- 192.168.2.7\n           /32 host LOCAL\n\
                        \x20       |-- 192.168.2.255\n           /32 link BROADCAST\n\
                        Local:\n        |-- 192.168.2.7\n           /32 host LOCAL\n";
        assert_eq!(
            local_v4(fib_trie),
            [
                "127.0.0.1".parse::<IpAddr>().unwrap(),
                "192.168.2.7".parse().unwrap()
            ]
        );
        let if_inet6 = "00000000000000000000000000000001 01 80 10 80       lo\n\
                        20010db8000900000000000000000001 02 40 00 80      tg0\n";
        assert_eq!(
            local_v6(if_inet6),
            [
                "::1".parse::<IpAddr>().unwrap(),
                "2001:db8:9::1".parse().unwrap()
            ]
        );
    }
}
