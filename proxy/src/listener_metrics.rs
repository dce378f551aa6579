//! The series every listener counts into (the listeners' and the gate's door's vocabulary, so
//! a module of its own below both), labelled by listener (and rule, reason or
//! upstream), and each listener's own counters resolved from them once ([`ListenerMetrics`]),
//! so the hot path is an atomic add. So are a rejection's: the per-rule counters are resolved
//! once per listener and policy (a table by rule index, built at the first throttle under a new
//! policy), and the per-reason ones once per listener, so a flood of rejected connections
//! allocates and hashes no label. The counters come from the label families, so a reload keeps
//! counting a rule's throttles into the series of its name.

use std::sync::{Arc, OnceLock, Weak};

use arc_swap::ArcSwapOption;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tollgate_filter::Policy;

/// A shared name as a label value (listener and rule names), cloned without copying.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Name(pub Arc<str>);

impl EncodeLabelValue for Name {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        std::fmt::Write::write_str(encoder, &self.0)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ListenerLabel {
    listener: Name,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct VerdictLabels {
    listener: Name,
    verdict: &'static str,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RuleLabels {
    listener: Name,
    rule: Name,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabels {
    listener: Name,
    reason: &'static str,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct UpstreamLabels {
    listener: Name,
    upstream: String,
}

/// Why a connection or datagram was refused without a rule's throttle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The source is on the deny list.
    Listed,
    /// The source is serving a rule's penalty.
    Penalty,
    /// The source holds its cap of open connections.
    ConnectionCap,
    /// The listener holds its cap of open connections.
    ListenerFull,
    /// The source's network (IPv4 /24, IPv6 /48) holds its cap of open connections.
    PrefixCap,
    /// The listener holds its cap of held rejections (the rejection became a reset).
    HeldFull,
    /// The listener holds its cap of trusted peers' connections waiting for their PROXY
    /// header (`max_header_waits`).
    HeaderWaitsFull,
    /// The trusted peer holds its share (a quarter) of `max_header_waits`.
    HeaderWaitsPerPeer,
    /// The source holds its cap of held rejections (the rejection became a reset).
    HeldPerSource,
    /// The source's network holds its cap of held rejections (the rejection became a reset).
    HeldPerPrefix,
    /// A PROXY header from a peer not trusted to send one.
    UntrustedHeader,
    /// A trusted peer sent a bad PROXY header, or none in time.
    BadHeader,
    /// UDP: the session table is full and this client has no session.
    SessionsFull,
    /// UDP: the client's source (IPv4 address, IPv6 /64) holds its cap of sessions.
    SourceSessions,
    /// UDP: the client's prefix (IPv4 /24, IPv6 /48) holds its cap of sessions.
    PrefixSessions,
    /// UDP: the socket for a new session could not be opened (out of descriptors).
    SessionSocket,
}

/// How many [`Refusal`]s there are (the last one's index plus one).
/// What a refusal that is not a verdict is besides its count (see [`Refusal::offence`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Offence {
    /// The source's own doing: recorded as an offender, and logged as a rejection, for this
    /// reason.
    Offender(&'static str),
    /// A fault worth a line of its own (the caller's), within the log budget.
    Warning,
    /// A listener-wide cap or a trusted peer's: counted only.
    Counted,
}

pub(crate) const REFUSALS: usize = Refusal::SessionSocket as usize + 1;

impl Refusal {
    /// What it is besides its count: whose doing, and what the log says.
    #[must_use]
    pub(crate) fn offence(self) -> Offence {
        match self {
            Refusal::UntrustedHeader => Offence::Offender("PROXY header from an untrusted peer"),
            Refusal::ListenerFull
            | Refusal::HeldFull
            | Refusal::HeaderWaitsFull
            | Refusal::HeaderWaitsPerPeer => Offence::Counted,
            Refusal::BadHeader | Refusal::SessionSocket => Offence::Warning,
            Refusal::Listed
            | Refusal::Penalty
            | Refusal::ConnectionCap
            | Refusal::PrefixCap
            | Refusal::HeldPerSource
            | Refusal::HeldPerPrefix
            | Refusal::SessionsFull
            | Refusal::SourceSessions
            | Refusal::PrefixSessions => Offence::Offender(self.as_str()),
        }
    }

    /// The metric label and log word.
    #[must_use]
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Refusal::Listed => "listed",
            Refusal::Penalty => "penalty",
            Refusal::ConnectionCap => "connection_cap",
            Refusal::ListenerFull => "listener_full",
            Refusal::PrefixCap => "prefix_cap",
            Refusal::HeldFull => "held_full",
            Refusal::HeaderWaitsFull => "header_waits_full",
            Refusal::HeaderWaitsPerPeer => "header_waits_per_peer",
            Refusal::HeldPerSource => "held_per_source",
            Refusal::HeldPerPrefix => "held_per_prefix",
            Refusal::UntrustedHeader => "untrusted_proxy_header",
            Refusal::BadHeader => "bad_proxy_header",
            Refusal::SessionsFull => "sessions_full",
            Refusal::SourceSessions => "source_sessions",
            Refusal::PrefixSessions => "prefix_sessions",
            Refusal::SessionSocket => "session_socket",
        }
    }
}

/// The listener-labelled series (registered first, in the proxy's own namespace: their names
/// carry no part prefix).
#[derive(Debug, Default)]
pub struct ListenerSeries {
    decisions: Family<VerdictLabels, Counter>,
    throttled: Family<RuleLabels, Counter>,
    shadow_throttled: Family<RuleLabels, Counter>,
    refused: Family<ReasonLabels, Counter>,
    open: Family<ListenerLabel, Gauge>,
    held: Family<ListenerLabel, Gauge>,
    header_waits: Family<ListenerLabel, Gauge>,
    idle_closed: Family<ListenerLabel, Counter>,
    sessions: Family<ListenerLabel, Gauge>,
    session_limit: Family<ListenerLabel, Gauge>,
    evicted: Family<ListenerLabel, Counter>,
    upstream_errors: Family<UpstreamLabels, Counter>,
    upstream_unavailable: Family<ListenerLabel, Counter>,
    accept_errors: Family<ListenerLabel, Counter>,
    released: Family<ListenerLabel, Counter>,
}

impl ListenerSeries {
    /// Registers them in `r`.
    pub(crate) fn register(&self, r: &mut Registry) {
        r.register(
            "decisions",
            "Connections (TCP) and datagrams (UDP) by verdict: allowed, throttled, denied",
            self.decisions.clone(),
        );
        r.register(
            "throttled",
            "Connections and datagrams over a rule's limit, by rule",
            self.throttled.clone(),
        );
        r.register(
            "shadow_throttled",
            "Connections and datagrams a shadow rule found over its limit (not enforced)",
            self.shadow_throttled.clone(),
        );
        r.register(
            "refused",
            "Connections and datagrams refused without a rule's throttle, by reason",
            self.refused.clone(),
        );
        r.register(
            "open_connections",
            "TCP connections open now",
            self.open.clone(),
        );
        r.register(
            "held_connections",
            "TCP rejections held now (delay, close, reply), apart from open_connections",
            self.held.clone(),
        );
        r.register(
            "header_waits",
            "TCP connections from trusted peers waiting for their PROXY header now, apart from \
             open_connections",
            self.header_waits.clone(),
        );
        r.register(
            "idle_closed",
            "Relayed TCP connections closed after idle_timeout without a byte either way",
            self.idle_closed.clone(),
        );
        r.register(
            "udp_sessions",
            "UDP client sessions held now",
            self.sessions.clone(),
        );
        r.register(
            "udp_session_limit",
            "UDP client sessions held at most (max_sessions, or its default from the open-file limit)",
            self.session_limit.clone(),
        );
        r.register(
            "udp_sessions_evicted",
            "UDP sessions that had seen one datagram, ended to make room for a new client",
            self.evicted.clone(),
        );
        r.register(
            "upstream_errors",
            "Failed connection attempts to an upstream",
            self.upstream_errors.clone(),
        );
        r.register(
            "upstream_unavailable",
            "Connections closed because every attempt to reach an upstream failed",
            self.upstream_unavailable.clone(),
        );
        r.register(
            "accept_errors",
            "Accept failures (such as the open-file limit); the listener backs off and retries",
            self.accept_errors.clone(),
        );
        r.register(
            "delay_released",
            "Connections held by a delay action, then let through once under the limit",
            self.released.clone(),
        );
    }

    /// The counters of listener `name`, resolved once.
    #[must_use]
    pub fn listener(&self, name: &str) -> ListenerMetrics {
        let name = Name(name.into());
        let verdict = |verdict| {
            self.decisions.get_or_create_owned(&VerdictLabels {
                listener: name.clone(),
                verdict,
            })
        };
        let label = ListenerLabel {
            listener: name.clone(),
        };
        ListenerMetrics {
            allowed: verdict("allowed"),
            throttled: verdict("throttled"),
            denied: verdict("denied"),
            open: self.open.get_or_create_owned(&label),
            held: self.held.get_or_create_owned(&label),
            header_waits: self.header_waits.get_or_create_owned(&label),
            idle_closed: self.idle_closed.get_or_create_owned(&label),
            sessions: self.sessions.get_or_create_owned(&label),
            session_limit: self.session_limit.get_or_create_owned(&label),
            evicted: self.evicted.get_or_create_owned(&label),
            accept_errors: self.accept_errors.get_or_create_owned(&label),
            upstream_unavailable: self.upstream_unavailable.get_or_create_owned(&label),
            released: self.released.get_or_create_owned(&label),
            refused: Arc::new(std::array::from_fn(|_| OnceLock::new())),
            rules: Arc::new(ArcSwapOption::empty()),
            name,
        }
    }

    /// Counts a throttle by rule `rule` (an index into `policy`, the policy that decided) on
    /// `listener`.
    pub(crate) fn throttled(&self, listener: &ListenerMetrics, policy: &Arc<Policy>, rule: usize) {
        listener.throttled.inc();
        self.count_rule(listener, policy, rule, false);
    }

    /// Counts what shadow rule `rule` (an index into `policy`) would have throttled on
    /// `listener`.
    pub(crate) fn shadow_throttled(
        &self,
        listener: &ListenerMetrics,
        policy: &Arc<Policy>,
        rule: usize,
    ) {
        self.count_rule(listener, policy, rule, true);
    }

    /// Adds one to rule `rule`'s throttle (or shadow) series on `listener`: the listener's
    /// table for `policy`, built first if it holds another policy's (a reload).
    fn count_rule(
        &self,
        listener: &ListenerMetrics,
        policy: &Arc<Policy>,
        rule: usize,
        shadow: bool,
    ) {
        let held = listener.rules.load();
        let table = match &*held {
            Some(table) if table.serves(policy) => table,
            _ => {
                let table = Arc::new(RuleTable::new(policy));
                listener.rules.store(Some(Arc::clone(&table)));
                return self.count_in(&table, listener, policy, rule, shadow);
            }
        };
        self.count_in(table, listener, policy, rule, shadow);
    }

    fn count_in(
        &self,
        table: &RuleTable,
        listener: &ListenerMetrics,
        policy: &Policy,
        rule: usize,
        shadow: bool,
    ) {
        let (family, slots) = if shadow {
            (&self.shadow_throttled, &table.shadow_throttled)
        } else {
            (&self.throttled, &table.throttled)
        };
        let resolve = || {
            family.get_or_create_owned(&RuleLabels {
                listener: listener.name.clone(),
                rule: Name(policy.rule(rule).map_or("?", |r| r.name.as_str()).into()),
            })
        };
        match slots.get(rule) {
            Some(slot) => slot.get_or_init(resolve).inc(),
            // Not a rule of this policy (a decision never names one): counted under "?".
            None => resolve().inc(),
        };
    }

    /// Counts a refusal on `listener`.
    pub(crate) fn refused(&self, listener: &ListenerMetrics, reason: Refusal) {
        listener.denied.inc();
        listener.refused[reason as usize]
            .get_or_init(|| {
                self.refused.get_or_create_owned(&ReasonLabels {
                    listener: listener.name.clone(),
                    reason: reason.as_str(),
                })
            })
            .inc();
    }

    /// Counts a failed attempt to reach `upstream`.
    pub(crate) fn upstream_error(
        &self,
        listener: &ListenerMetrics,
        upstream: std::net::SocketAddr,
    ) {
        self.upstream_errors
            .get_or_create(&UpstreamLabels {
                listener: listener.name.clone(),
                upstream: upstream.to_string(),
            })
            .inc();
    }
}

/// The counters one listener touches per connection or datagram.
#[derive(Clone, Debug)]
pub struct ListenerMetrics {
    /// The listener's name.
    pub(crate) name: Name,
    /// Let through.
    pub allowed: Counter,
    /// Over a rule's limit.
    pub(crate) throttled: Counter,
    /// Refused outright (lists, penalties, caps, headers).
    pub(crate) denied: Counter,
    /// Open connections now (TCP).
    pub(crate) open: Gauge,
    /// Held rejections now (TCP).
    pub(crate) held: Gauge,
    /// Trusted peers' connections waiting for their PROXY header now (TCP).
    pub(crate) header_waits: Gauge,
    /// Relayed connections closed for want of traffic (TCP).
    pub(crate) idle_closed: Counter,
    /// Client sessions now (UDP).
    pub(crate) sessions: Gauge,
    /// Client sessions held at most (UDP).
    pub(crate) session_limit: Gauge,
    /// Fresh client sessions evicted to make room for a new client (UDP).
    pub(crate) evicted: Counter,
    /// Accept failures (resource exhaustion included).
    pub(crate) accept_errors: Counter,
    /// Connections closed because no upstream could be reached.
    pub(crate) upstream_unavailable: Counter,
    /// Connections held by a `delay` action and then let through.
    pub(crate) released: Counter,
    /// Refusals by reason, each resolved at its first use (index: `Refusal as usize`).
    refused: Arc<[OnceLock<Counter>; REFUSALS]>,
    /// Throttles by rule, resolved for the policy in force.
    rules: Arc<ArcSwapOption<RuleTable>>,
}

/// One listener's per-rule throttle counters for one policy, indexed by rule. Each is resolved
/// at its first use, so a rule that never throttles adds no series.
#[derive(Debug)]
struct RuleTable {
    /// The policy whose rule indices these are. A `Weak` keeps the policy's allocation (not
    /// its contents) alive, so no later policy can have the same address while this table is
    /// compared against it.
    policy: Weak<Policy>,
    throttled: Box<[OnceLock<Counter>]>,
    shadow_throttled: Box<[OnceLock<Counter>]>,
}

impl RuleTable {
    fn new(policy: &Arc<Policy>) -> RuleTable {
        let rules = policy.config().rules.len();
        RuleTable {
            policy: Arc::downgrade(policy),
            throttled: (0..rules).map(|_| OnceLock::new()).collect(),
            shadow_throttled: (0..rules).map(|_| OnceLock::new()).collect(),
        }
    }

    fn serves(&self, policy: &Arc<Policy>) -> bool {
        std::ptr::eq(self.policy.as_ptr(), Arc::as_ptr(policy))
    }
}
