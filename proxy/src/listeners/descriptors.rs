//! The open-file limit, and how the process splits its descriptors.
//!
//! At start the soft `RLIMIT_NOFILE` is raised to the hard limit (Linux starts most services
//! at a soft 1024, far below what a proxy holds), through the `rlimit` crate: a safe wrapper
//! of `getrlimit`/`setrlimit`, so the workspace's `unsafe_code = "forbid"` stands.
//!
//! The budget, with `N` the open-file limit after raising it:
//!
//! ```text
//! N >= RESERVE + listeners + 2 * sum(TCP max_connections) + sum(UDP max_sessions)
//! ```
//!
//! [`RESERVE`] covers the process itself (standard streams, the runtime's epoll and wakers,
//! signal pipes, config reads, Redis) and the admin endpoint's connections; each listener
//! (the admin's included) holds one socket; a relayed TCP connection holds two (client and
//! upstream); a UDP session one. The UDP listeners without `max_sessions` share what is left
//! after the rest equally, or an eighth of `N - RESERVE - listeners` if the TCP caps leave less
//! (they over-commit then, and the start warns), each between [`MIN_SESSIONS`] and
//! [`MAX_DEFAULT_SESSIONS`]: a flood of spoofed sources fills its session table, not the
//! descriptors that TCP listeners and the admin endpoint need, which always keep at least
//! seven eighths.

use crate::config::{Listener, Protocol};

/// Descriptors kept for the process itself and the admin endpoint's connections.
pub(crate) const RESERVE: u64 = 128;
/// The smallest default session cap of a UDP listener, however tight the budget.
pub(crate) const MIN_SESSIONS: usize = 64;
/// The largest default session cap of a UDP listener, however large the budget.
pub(crate) const MAX_DEFAULT_SESSIONS: usize = 65_536;

/// The open-file limit before and after raising it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FileLimit {
    /// The soft limit found at start.
    pub(crate) before: u64,
    /// The soft limit now.
    pub(crate) after: u64,
    /// The hard limit (the ceiling for an unprivileged process).
    pub(crate) hard: u64,
}

/// Raises the soft open-file limit to the hard one (or, if the hard limit is infinite, to
/// the kernel's per-process ceiling `fs.nr_open`).
///
/// # Errors
/// The `getrlimit` or `setrlimit` failure (the limit then stays as it was).
pub(crate) fn raise() -> std::io::Result<FileLimit> {
    let (before, hard) = rlimit::Resource::NOFILE.get()?;
    let target = if hard == rlimit::INFINITY {
        std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(1 << 20)
    } else {
        hard
    };
    if before < target {
        rlimit::Resource::NOFILE.set(target, hard)?;
    }
    let (after, hard) = rlimit::Resource::NOFILE.get()?;
    Ok(FileLimit {
        before,
        after,
        hard,
    })
}

/// The soft open-file limit now (1024, Linux's usual default, if it cannot be read).
#[must_use]
pub(crate) fn limit() -> u64 {
    rlimit::Resource::NOFILE
        .get()
        .map_or(1024, |(soft, _)| soft)
}

/// How `limit` descriptors are split over `listeners` (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Budget {
    /// The open-file limit.
    pub(crate) limit: u64,
    /// What the process, the admin endpoint and every listener's own socket take.
    pub(crate) fixed: u64,
    /// What the TCP listeners' connections may take.
    pub(crate) tcp: u64,
    /// What the UDP listeners with a `max_sessions` of their own may take.
    pub(crate) udp_explicit: u64,
    /// The session cap of each UDP listener without one.
    pub(crate) default_sessions: usize,
}

impl Budget {
    /// The budget of `listeners` under open-file limit `limit`.
    #[must_use]
    pub(crate) fn new(limit: u64, listeners: &[Listener]) -> Budget {
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        // The admin endpoint's socket is one listener more.
        let fixed = RESERVE + count(listeners.len()) + 1;
        let tcp = listeners
            .iter()
            .filter(|l| l.protocol == Protocol::Tcp)
            .map(|l| 2 * count(l.max_connections))
            .fold(0, u64::saturating_add);
        let udp = listeners.iter().filter(|l| l.protocol == Protocol::Udp);
        let udp_explicit = udp
            .clone()
            .filter_map(|l| l.max_sessions)
            .map(count)
            .fold(0, u64::saturating_add);
        let defaulted = count(udp.filter(|l| l.max_sessions.is_none()).count()).max(1);
        let left = limit
            .saturating_sub(fixed)
            .saturating_sub(tcp)
            .saturating_sub(udp_explicit);
        let floor = limit.saturating_sub(fixed) / 8;
        let share = usize::try_from(left.max(floor) / defaulted).unwrap_or(usize::MAX);
        Budget {
            limit,
            fixed,
            tcp,
            udp_explicit,
            default_sessions: share.clamp(MIN_SESSIONS, MAX_DEFAULT_SESSIONS),
        }
    }

    /// The session cap of UDP listener `listener`: its own, or the default.
    #[must_use]
    pub(crate) fn sessions(&self, listener: &Listener) -> usize {
        listener.max_sessions.unwrap_or(self.default_sessions)
    }

    /// By how many descriptors the caps of `listeners` exceed the limit, if they do.
    #[must_use]
    pub(crate) fn excess(&self, listeners: &[Listener]) -> Option<u64> {
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        let udp = listeners
            .iter()
            .filter(|l| l.protocol == Protocol::Udp)
            .map(|l| count(self.sessions(l)))
            .fold(0, u64::saturating_add);
        let needed = self.fixed.saturating_add(self.tcp).saturating_add(udp);
        needed.checked_sub(self.limit).filter(|&excess| excess > 0)
    }

    /// What to change when the caps of `listeners` exceed the limit, in one line (`None` if
    /// they fit): the TCP caps to lower (each connection holds two descriptors) or the hard
    /// limit to raise, with the numbers.
    #[must_use]
    pub(crate) fn advice(&self, listeners: &[Listener]) -> Option<String> {
        let excess = self.excess(listeners)?;
        let needed = self.limit.saturating_add(excess);
        let tcp = if self.tcp > 0 {
            format!(
                "lower the TCP listeners' max_connections by {} in all, or ",
                excess.div_ceil(2)
            )
        } else {
            "lower the UDP listeners' max_sessions, or ".to_owned()
        };
        Some(format!(
            "the listeners' caps need {needed} descriptors and the open-file limit is {}: \
             {tcp}raise the hard limit (systemd LimitNOFILE, ulimit -Hn) to {needed}; at the \
             limit, accepts and new UDP sessions fail (EMFILE) and are counted",
            self.limit
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ProxyConfig;

    fn listeners(body: &str) -> Vec<Listener> {
        ProxyConfig::parse(body).unwrap().listeners
    }

    /// One TCP listener at the default 10,000 connections needs 20,130 descriptors: under a
    /// hard limit of 20,000 the start says in one line what to change, with the numbers.
    #[test]
    fn a_default_listener_over_the_limit_is_told_what_to_change() {
        let default = listeners(
            "[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\nupstreams = [\"127.0.0.1:1\"]\n",
        );
        let budget = Budget::new(20_000, &default);
        let advice = budget.advice(&default).expect("over the limit");
        assert_eq!(
            advice,
            "the listeners' caps need 20130 descriptors and the open-file limit is 20000: \
             lower the TCP listeners' max_connections by 65 in all, or raise the hard limit \
             (systemd LimitNOFILE, ulimit -Hn) to 20130; at the limit, accepts and new UDP \
             sessions fail (EMFILE) and are counted"
        );
        assert!(!advice.contains('\n'));
        assert_eq!(Budget::new(20_130, &default).advice(&default), None);
    }

    const TCP_AND_TWO_UDP: &str = r#"
[[listener]]
name = "web"
listen = "127.0.0.1:0"
upstreams = ["127.0.0.1:1"]
max_connections = 1000

[[listener]]
name = "dns"
protocol = "udp"
listen = "127.0.0.1:0"
upstreams = ["127.0.0.1:1"]

[[listener]]
name = "ntp"
protocol = "udp"
listen = "127.0.0.1:0"
upstreams = ["127.0.0.1:1"]
"#;

    #[test]
    fn udp_defaults_share_what_tcp_and_the_process_leave() {
        let listeners = listeners(TCP_AND_TWO_UDP);
        let budget = Budget::new(20_000, &listeners);
        // 20,000 - (128 + 3 + 1) - 2 * 1000 = 17,868, over two UDP listeners.
        assert_eq!(budget.default_sessions, 8_934);
        assert_eq!(budget.excess(&listeners), None);
    }

    #[test]
    fn the_default_stays_within_its_bounds() {
        let listeners = listeners(TCP_AND_TWO_UDP);
        assert_eq!(
            Budget::new(1 << 30, &listeners).default_sessions,
            MAX_DEFAULT_SESSIONS
        );
        let tight = Budget::new(1024, &listeners);
        // An eighth of 1024 - 132, over two listeners, is below the floor.
        assert_eq!(tight.default_sessions, MIN_SESSIONS);
        // 132 + 2000 + 2 * 64 needed, 1024 there.
        assert_eq!(tight.excess(&listeners), Some(1236));
    }

    #[test]
    fn tcp_caps_over_the_limit_leave_udp_an_eighth() {
        let listeners = listeners(TCP_AND_TWO_UDP);
        // TCP may take 2000 of 2132: UDP gets an eighth of 2132 - 132, 125 per listener.
        let budget = Budget::new(2132, &listeners);
        assert_eq!(budget.default_sessions, 125);
        assert_eq!(budget.excess(&listeners), Some(250));
    }

    /// The soft limit `raise` aims for under hard limit `hard` (as its docs say).
    fn ceiling(hard: u64) -> u64 {
        if hard == rlimit::INFINITY {
            let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open").unwrap();
            nr_open.trim().parse().unwrap()
        } else {
            hard
        }
    }

    #[test]
    fn raise_lifts_the_soft_limit_to_the_ceiling_and_limit_reads_it() {
        let (_, hard) = rlimit::Resource::NOFILE.get().unwrap();
        let ceiling = ceiling(hard);
        // One below the ceiling, so the raise has something to do (the test process may
        // start at it) without taking descriptors from tests running alongside. No other
        // unit test sets the limit (`Server::start` raises it, and no unit test starts one).
        rlimit::Resource::NOFILE.set(ceiling - 1, hard).unwrap();
        assert_eq!(limit(), ceiling - 1);
        let raised = raise().unwrap();
        let expected = FileLimit {
            before: ceiling - 1,
            after: ceiling,
            hard,
        };
        assert_eq!(raised, expected);
        assert_eq!(limit(), ceiling);
        // At the ceiling already, raising again changes nothing.
        let again = FileLimit {
            before: ceiling,
            ..expected
        };
        assert_eq!(raise().unwrap(), again);
    }
}
