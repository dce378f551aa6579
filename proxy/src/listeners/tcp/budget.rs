//! A TCP listener's connection budgets: what one source, one network and everyone together
//! may hold open.
//!
//! Three budgets, apart, so that neither rejections nor slow headers can crowd out service:
//!
//! - **forwarding**: `max_connections` in all, `max_connections_per_source` per source (IPv4
//!   address, IPv6 /64) and `max_connections_per_prefix` per network (IPv4 /24, IPv6 /48);
//!   taken by a connection that goes to an upstream;
//! - **header waits**: `max_header_waits` in all and a quarter of it (at least 64) per trusted
//!   peer; taken by a trusted peer's connection while its PROXY header is read (at most
//!   `proxy_header_timeout`), so a peer trickling headers can neither fill the listener (the
//!   attack tool's `proxy-trickle` did, before) nor starve the other trusted peers;
//! - **held**: `max_held`, `max_held_per_source`, `max_held_per_prefix`, the same networks;
//!   taken by a rejection that keeps its connection for a while (`delay` up to the rule's bound,
//!   `close` lingering up to 1 s, `reply` up to 3 s).
//!
//! Beyond its budget a connection is reset at once and counted by reason
//! ([`Refusal`]). Per-source and per-network counts live in the shared
//! [`ConcurrencySketch`](tollgate_sketch::ConcurrencySketch) (fixed memory; a collision can only
//! overcount, so a cap may refuse early, never admit more).

use std::sync::Arc;

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tollgate_filter::{LimitKey, Prefix, RuleId, Source};

use crate::config::Listener;
use crate::gate::Gate;
use crate::listener_metrics::Refusal;

/// How a source is counted: per IPv4 address, per IPv6 /64.
const SOURCE: (Prefix, Prefix) = (Prefix::V4(32), Prefix::V6(64));
/// How a network is counted: per IPv4 /24, per IPv6 /48 (a site's usual allocation).
const NETWORK: (Prefix, Prefix) = (Prefix::V4(24), Prefix::V6(48));

/// Which budget a connection draws on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Use {
    /// Forwarded to an upstream.
    Forward,
    /// Held by a rejecting action.
    Held,
    /// A trusted peer's connection whose PROXY header has not named the source yet.
    Header,
}

/// One budget: a total, and caps per source and per network.
#[derive(Debug)]
struct Caps {
    total: usize,
    all: Arc<Semaphore>,
    per_source: u32,
    per_network: u32,
    source_scope: RuleId,
    network_scope: RuleId,
    /// The refusals when the total, the source's or the network's cap is reached.
    refusals: [Refusal; 3],
    gauge: Gauge,
}

impl Caps {
    fn in_use(&self) -> usize {
        self.total - self.all.available_permits()
    }
}

/// A listener's three budgets.
#[derive(Debug)]
pub(crate) struct Budget {
    forward: Caps,
    held: Caps,
    header: Caps,
}

/// A connection's claim on one budget; dropping it gives everything back.
#[derive(Debug)]
pub(crate) struct Ticket {
    _all: OwnedSemaphorePermit,
    source: Option<Slot>,
    network: Option<Slot>,
    gauge: Gauge,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// One count in the shared open-connection sketch.
#[derive(Debug)]
struct Slot {
    gate: Arc<Gate>,
    key: LimitKey,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.gate.close_connection(&self.key);
    }
}

impl Budget {
    /// The budgets of listener `config`; `open`, `held` and `header_waits` are its gauges.
    #[must_use]
    pub(crate) fn new(config: &Listener, open: Gauge, held: Gauge, header_waits: Gauge) -> Budget {
        let scope = |what: &str| RuleId::from_name(&format!("{what}:{}", config.name));
        Budget {
            forward: Caps {
                total: config.max_connections,
                all: Arc::new(Semaphore::new(config.max_connections)),
                per_source: config.max_connections_per_source,
                per_network: config.max_connections_per_prefix,
                source_scope: scope("connections"),
                network_scope: scope("connections/network"),
                refusals: [
                    Refusal::ListenerFull,
                    Refusal::ConnectionCap,
                    Refusal::PrefixCap,
                ],
                gauge: open,
            },
            held: Caps {
                total: config.max_held,
                all: Arc::new(Semaphore::new(config.max_held)),
                per_source: config.max_held_per_source,
                per_network: config.max_held_per_prefix,
                source_scope: scope("held"),
                network_scope: scope("held/network"),
                refusals: [
                    Refusal::HeldFull,
                    Refusal::HeldPerSource,
                    Refusal::HeldPerPrefix,
                ],
                gauge: held,
            },
            // Claimed for the peer (the header has not named the source yet): a balancer's
            // header arrives with its connection, so a quarter of the waits is room enough
            // for any one peer, and one that trickles cannot starve the others.
            header: Caps {
                total: config.max_header_waits,
                all: Arc::new(Semaphore::new(config.max_header_waits)),
                per_source: header_waits_per_peer(config.max_header_waits),
                per_network: u32::MAX,
                source_scope: scope("header"),
                network_scope: scope("header/network"),
                refusals: [
                    Refusal::HeaderWaitsFull,
                    Refusal::HeaderWaitsPerPeer,
                    Refusal::HeaderWaitsFull,
                ],
                gauge: header_waits,
            },
        }
    }

    fn caps(&self, use_: Use) -> &Caps {
        match use_ {
            Use::Forward => &self.forward,
            Use::Held => &self.held,
            Use::Header => &self.header,
        }
    }

    /// A claim on budget `use_` for `source` (`None`: the budget's total only), or the
    /// refusal saying which
    /// cap is reached. Cheap enough for the accept path: a semaphore and at most two sketch
    /// updates, no await.
    ///
    /// # Errors
    /// The [`Refusal`] of the cap that is reached.
    pub(crate) fn claim(
        &self,
        gate: &Arc<Gate>,
        use_: Use,
        source: Option<Source>,
    ) -> Result<Ticket, Refusal> {
        let caps = self.caps(use_);
        let [full, source_cap, network_cap] = caps.refusals;
        let all = Arc::clone(&caps.all)
            .try_acquire_owned()
            .map_err(|_| full)?;
        let mut ticket = Ticket {
            _all: all,
            source: None,
            network: None,
            gauge: caps.gauge.clone(),
        };
        caps.gauge.inc();
        if let Some(source) = source {
            ticket.source = Some(
                claim_slot(gate, caps.source_scope, source, SOURCE, caps.per_source)
                    .ok_or(source_cap)?,
            );
            ticket.network = Some(
                claim_slot(gate, caps.network_scope, source, NETWORK, caps.per_network)
                    .ok_or(network_cap)?,
            );
        }
        Ok(ticket)
    }

    /// Connections holding a forwarding claim now.
    #[must_use]
    pub(crate) fn forwarding(&self) -> usize {
        self.forward.in_use()
    }

    /// Rejections held now.
    #[must_use]
    pub(crate) fn held(&self) -> usize {
        self.held.in_use()
    }

    /// Trusted peers' connections waiting for their PROXY header now.
    #[must_use]
    pub(crate) fn header_waits(&self) -> usize {
        self.header.in_use()
    }
}

/// A trusted peer's share of `max_header_waits` (`total`): a quarter, but at least 64 (or all
/// of it when the total is smaller), so a small listener's only balancer is never refused for
/// a burst of connections whose headers are on their way.
fn header_waits_per_peer(total: usize) -> u32 {
    u32::try_from((total / 4).max(total.min(64))).unwrap_or(u32::MAX)
}

fn claim_slot(
    gate: &Arc<Gate>,
    scope: RuleId,
    source: Source,
    prefixes: (Prefix, Prefix),
    cap: u32,
) -> Option<Slot> {
    let key = gate.open_in_network(scope, source, prefixes, cap)?;
    Some(Slot {
        gate: Arc::clone(gate),
        key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ProxyConfig;

    fn budget(listener: &str) -> (Arc<Gate>, Budget) {
        let text = format!(
            "[[listener]]\nname = \"l\"\nlisten = \"127.0.0.1:0\"\nupstreams = [\"127.0.0.1:1\"]\n{listener}\n"
        );
        let config = ProxyConfig::parse(&text).unwrap();
        let listener = config.listeners[0].clone();
        let shared = Arc::clone(crate::server::shared_state(config, None).unwrap().gate());
        (
            shared,
            Budget::new(
                &listener,
                Gauge::default(),
                Gauge::default(),
                Gauge::default(),
            ),
        )
    }

    fn source(text: &str) -> Option<Source> {
        Some(Source::new(text.parse().unwrap()))
    }

    #[test]
    fn ipv6_sources_are_capped_per_slash_64_and_networks_per_slash_48() {
        // The defaults for a listener of 8: 1 per source, 2 per network.
        let (shared, budget) = budget("max_connections = 8");
        let claim = |text: &str| budget.claim(&shared, Use::Forward, source(text));
        let first = claim("2001:db8:1:1::1").unwrap();
        assert_eq!(
            claim("2001:db8:1:1::2").unwrap_err(),
            Refusal::ConnectionCap
        );
        let second = claim("2001:db8:1:2::1").unwrap();
        assert_eq!(claim("2001:db8:1:3::1").unwrap_err(), Refusal::PrefixCap);
        let other = claim("2001:db8:2::1").unwrap();
        assert_eq!(budget.forwarding(), 3);
        drop(first);
        let again = claim("2001:db8:1:1::2").unwrap();
        drop((second, other, again));
        assert_eq!(budget.forwarding(), 0);
    }

    #[test]
    fn held_claims_never_touch_the_forwarding_budget() {
        let (shared, budget) = budget("max_connections = 1\nmax_held = 2");
        let forwarded = budget.claim(&shared, Use::Forward, source("192.0.2.1"));
        let held = [
            budget
                .claim(&shared, Use::Held, source("192.0.2.1"))
                .unwrap(),
            budget
                .claim(&shared, Use::Held, source("198.51.100.1"))
                .unwrap(),
        ];
        assert!(forwarded.is_ok());
        assert_eq!(
            budget
                .claim(&shared, Use::Held, source("203.0.113.1"))
                .unwrap_err(),
            Refusal::HeldFull
        );
        assert_eq!((budget.forwarding(), budget.held()), (1, 2));
        drop(held);
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn a_trusted_peer_takes_a_quarter_of_the_header_waits_but_at_least_64() {
        assert_eq!(header_waits_per_peer(400), 100, "a quarter");
        assert_eq!(header_waits_per_peer(100), 64, "at least 64");
        assert_eq!(header_waits_per_peer(10), 10, "all of a smaller total");
        let (shared, budget) = budget("max_header_waits = 100");
        let claim = |peer: &str| budget.claim(&shared, Use::Header, source(peer));
        let first: Vec<Ticket> = (0..64).map(|_| claim("192.0.2.1").unwrap()).collect();
        assert_eq!(claim("192.0.2.1").unwrap_err(), Refusal::HeaderWaitsPerPeer);
        let second: Vec<Ticket> = (0..36).map(|_| claim("198.51.100.1").unwrap()).collect();
        assert_eq!(claim("203.0.113.1").unwrap_err(), Refusal::HeaderWaitsFull);
        assert_eq!(budget.header_waits(), 100);
        assert_eq!(budget.forwarding() + budget.held(), 0, "a budget apart");
        drop(first);
        assert_eq!(budget.header_waits(), 36);
        drop(second);
        assert_eq!(budget.header_waits(), 0);
    }

    #[test]
    fn gauges_follow_the_claims_and_a_refused_claim_leaves_nothing_taken() {
        let (shared, budget) = budget("max_connections = 8");
        let gauges = |b: &Budget| [&b.forward, &b.held, &b.header].map(|caps| caps.gauge.get());
        let tickets = [Use::Forward, Use::Held, Use::Header]
            .map(|use_| budget.claim(&shared, use_, source("192.0.2.1")).unwrap());
        assert_eq!(gauges(&budget), [1, 1, 1]);
        // Refused at the source's cap (1 of 8): its total permit and its gauge are given back.
        assert_eq!(
            budget
                .claim(&shared, Use::Forward, source("192.0.2.1"))
                .unwrap_err(),
            Refusal::ConnectionCap
        );
        assert_eq!(gauges(&budget), [1, 1, 1]);
        assert_eq!(budget.forwarding(), 1);
        drop(tickets);
        assert_eq!(gauges(&budget), [0, 0, 0]);
    }
}
