//! The proxy's metrics, in the Prometheus text format (prometheus-client writes it; names and
//! help texts are ours). Counters a connection touches on every accept are resolved once per
//! listener ([`ListenerMetrics`]), so the hot path is an atomic add. So are a rejection's: the
//! per-rule counters are resolved once per listener and policy (a table by rule index, built at
//! the first throttle under a new policy), and the per-reason ones once per listener, so a flood
//! of rejected connections allocates and hashes no label. The counters come from the label
//! families, so a reload keeps counting a rule's throttles into the series of its name.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use arc_swap::ArcSwapOption;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tollgate_filter::{DurationText, ListStats, Policy};
use tollgate_sketch::{Stats, Tick};

use crate::cluster::ClusterMetrics;
use crate::kernel::KernelMetrics;

/// A shared name as a label value (listener and rule names), cloned without copying.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Name(pub Arc<str>);

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

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ListLabel {
    list: &'static str,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct WindowLabel {
    window: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PenaltyLabel {
    length: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// Why a connection or datagram was refused without a rule's throttle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
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
const REFUSALS: usize = Refusal::SessionSocket as usize + 1;

impl Refusal {
    /// The metric label and log word.
    #[must_use]
    pub fn as_str(self) -> &'static str {
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

/// Every metric the proxy exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
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
    reloads: Family<ResultLabel, Counter>,
    /// Decisions the limiter could not make (the connection was let through: fail-open).
    pub decide_failures: Counter,
    /// Rejection log lines left out by the log rate limit.
    pub logs_suppressed: Counter,
    sketch_memory: Family<WindowLabel, Gauge>,
    sketch_events: Family<WindowLabel, Gauge>,
    sketch_fill: Family<WindowLabel, FloatGauge>,
    sketch_bound: Family<WindowLabel, Gauge>,
    penalty_memory: Family<PenaltyLabel, Gauge>,
    penalty_events: Family<PenaltyLabel, Gauge>,
    penalty_bound: Family<PenaltyLabel, Gauge>,
    /// Bytes held for per-source open-connection counts.
    pub connection_memory: Gauge,
    /// Admin connections open now.
    pub admin_connections: Gauge,
    /// Admin connections reset at accept because `[admin] max_connections` were open, every
    /// one being answered.
    pub admin_refused: Counter,
    /// Admin connections closed at the cap, before their request head was complete, to
    /// make room for a newcomer.
    pub admin_evicted: Counter,
    /// The process's open-file limit (soft RLIMIT_NOFILE, after raising it at start).
    pub open_files_limit: Gauge,
    list_entries: Family<ListLabel, Gauge>,
    list_added: Counter,
    list_expired: Counter,
    list_removed: Counter,
    /// The cluster's metrics (exported only when `[cluster]` is configured).
    pub cluster: ClusterMetrics,
    /// The kernel fast path's metrics (exported once `[kernel]` is configured, at start or
    /// by a reload: see [`Metrics::export_kernel`]).
    pub kernel: KernelMetrics,
    /// The kernel metrics' own registry, rendered after the others once exported.
    kernel_registry: Registry,
    /// Whether `kernel_registry` is rendered.
    kernel_exported: AtomicBool,
    /// The warm-restart state file's metrics.
    pub state: crate::ops::state::StateMetrics,
}

/// The counters one listener touches per connection or datagram.
#[derive(Clone, Debug)]
pub struct ListenerMetrics {
    /// The listener's name.
    pub name: Name,
    /// Let through.
    pub allowed: Counter,
    /// Over a rule's limit.
    pub throttled: Counter,
    /// Refused outright (lists, penalties, caps, headers).
    pub denied: Counter,
    /// Open connections now (TCP).
    pub open: Gauge,
    /// Held rejections now (TCP).
    pub held: Gauge,
    /// Trusted peers' connections waiting for their PROXY header now (TCP).
    pub header_waits: Gauge,
    /// Relayed connections closed for want of traffic (TCP).
    pub idle_closed: Counter,
    /// Client sessions now (UDP).
    pub sessions: Gauge,
    /// Client sessions held at most (UDP).
    pub session_limit: Gauge,
    /// Fresh client sessions evicted to make room for a new client (UDP).
    pub evicted: Counter,
    /// Accept failures (resource exhaustion included).
    pub accept_errors: Counter,
    /// Connections closed because no upstream could be reached.
    pub upstream_unavailable: Counter,
    /// Connections held by a `delay` action and then let through.
    pub released: Counter,
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

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    /// All metrics at zero, registered under the `tollgate_` prefix (the cluster's not
    /// exported).
    #[must_use]
    pub fn new() -> Metrics {
        Metrics::build(false, false)
    }

    /// As [`Metrics::new`], with the cluster's and the kernel fast path's metrics exported
    /// when those sections are configured.
    #[must_use]
    pub fn for_sections(cluster: bool, kernel: bool) -> Metrics {
        Metrics::build(cluster, kernel)
    }

    fn build(cluster: bool, kernel: bool) -> Metrics {
        let mut registry = Registry::with_prefix("tollgate");
        let metrics = Metrics {
            registry: Registry::default(),
            decisions: Family::default(),
            throttled: Family::default(),
            shadow_throttled: Family::default(),
            refused: Family::default(),
            open: Family::default(),
            held: Family::default(),
            header_waits: Family::default(),
            idle_closed: Family::default(),
            sessions: Family::default(),
            session_limit: Family::default(),
            evicted: Family::default(),
            upstream_errors: Family::default(),
            upstream_unavailable: Family::default(),
            accept_errors: Family::default(),
            released: Family::default(),
            reloads: Family::default(),
            decide_failures: Counter::default(),
            logs_suppressed: Counter::default(),
            sketch_memory: Family::default(),
            sketch_events: Family::default(),
            sketch_fill: Family::default(),
            sketch_bound: Family::default(),
            penalty_memory: Family::default(),
            penalty_events: Family::default(),
            penalty_bound: Family::default(),
            connection_memory: Gauge::default(),
            admin_connections: Gauge::default(),
            admin_refused: Counter::default(),
            admin_evicted: Counter::default(),
            open_files_limit: Gauge::default(),
            list_entries: Family::default(),
            list_added: Counter::default(),
            list_expired: Counter::default(),
            list_removed: Counter::default(),
            cluster: ClusterMetrics::new(),
            kernel: KernelMetrics::new(),
            kernel_registry: Registry::default(),
            kernel_exported: AtomicBool::new(kernel),
            state: crate::ops::state::StateMetrics::default(),
        };
        let r = &mut registry;
        r.register(
            "decisions",
            "Connections (TCP) and datagrams (UDP) by verdict: allowed, throttled, denied",
            metrics.decisions.clone(),
        );
        r.register(
            "throttled",
            "Connections and datagrams over a rule's limit, by rule",
            metrics.throttled.clone(),
        );
        r.register(
            "shadow_throttled",
            "Connections and datagrams a shadow rule found over its limit (not enforced)",
            metrics.shadow_throttled.clone(),
        );
        r.register(
            "refused",
            "Connections and datagrams refused without a rule's throttle, by reason",
            metrics.refused.clone(),
        );
        r.register(
            "open_connections",
            "TCP connections open now",
            metrics.open.clone(),
        );
        r.register(
            "held_connections",
            "TCP rejections held now (delay, close, reply), apart from open_connections",
            metrics.held.clone(),
        );
        r.register(
            "header_waits",
            "TCP connections from trusted peers waiting for their PROXY header now, apart from \
             open_connections",
            metrics.header_waits.clone(),
        );
        r.register(
            "idle_closed",
            "Relayed TCP connections closed after idle_timeout without a byte either way",
            metrics.idle_closed.clone(),
        );
        r.register(
            "udp_sessions",
            "UDP client sessions held now",
            metrics.sessions.clone(),
        );
        r.register(
            "udp_session_limit",
            "UDP client sessions held at most (max_sessions, or its default from the open-file limit)",
            metrics.session_limit.clone(),
        );
        r.register(
            "udp_sessions_evicted",
            "UDP sessions that had seen one datagram, ended to make room for a new client",
            metrics.evicted.clone(),
        );
        r.register(
            "upstream_errors",
            "Failed connection attempts to an upstream",
            metrics.upstream_errors.clone(),
        );
        r.register(
            "upstream_unavailable",
            "Connections closed because every attempt to reach an upstream failed",
            metrics.upstream_unavailable.clone(),
        );
        r.register(
            "accept_errors",
            "Accept failures (such as the open-file limit); the listener backs off and retries",
            metrics.accept_errors.clone(),
        );
        r.register(
            "delay_released",
            "Connections held by a delay action, then let through once under the limit",
            metrics.released.clone(),
        );
        r.register(
            "reloads",
            "Policy reloads by result",
            metrics.reloads.clone(),
        );
        r.register(
            "decide_failures",
            "Decisions the limiter could not make; the traffic was let through (fail-open)",
            metrics.decide_failures.clone(),
        );
        r.register(
            "rejection_logs_suppressed",
            "Rejection log lines left out by the log rate limit",
            metrics.logs_suppressed.clone(),
        );
        r.register(
            "sketch_memory_bytes",
            "Bytes held by the rate sketch of each window length",
            metrics.sketch_memory.clone(),
        );
        r.register(
            "sketch_events",
            "Weight counted in the current window of each sketch",
            metrics.sketch_events.clone(),
        );
        r.register(
            "sketch_front_fill",
            "Fraction of the Bloom front's bits set in the current window",
            metrics.sketch_fill.clone(),
        );
        r.register(
            "sketch_overcount_bound",
            "The stated overcount bound: no estimate exceeds the true count by more, with the \
             sketch's confidence",
            metrics.sketch_bound.clone(),
        );
        r.register(
            "penalty_sketch_memory_bytes",
            "Bytes held by the penalty sketches of each penalty length (two per length)",
            metrics.penalty_memory.clone(),
        );
        r.register(
            "penalty_sketch_events",
            "Penalty marks counted in the current window of each penalty length's sketches \
             (the larger of the two)",
            metrics.penalty_events.clone(),
        );
        r.register(
            "penalty_sketch_overcount_bound",
            "The penalty sketches' stated overcount bound (the larger of the two); a penalty \
             needs its mark to read over 4 times this",
            metrics.penalty_bound.clone(),
        );
        r.register(
            "connection_memory_bytes",
            "Bytes held for per-source open-connection counts",
            metrics.connection_memory.clone(),
        );
        r.register(
            "admin_connections",
            "Admin endpoint connections open now",
            metrics.admin_connections.clone(),
        );
        r.register(
            "admin_refused",
            "Admin connections reset at accept: [admin] max_connections were open, all being answered",
            metrics.admin_refused.clone(),
        );
        r.register(
            "admin_evicted",
            "Admin connections closed at [admin] max_connections, their request head \
             incomplete, to make room for a newcomer",
            metrics.admin_evicted.clone(),
        );
        r.register(
            "open_files_limit",
            "The process's open-file limit (soft RLIMIT_NOFILE), raised to the hard limit at start",
            metrics.open_files_limit.clone(),
        );
        r.register(
            "list_entries",
            "Run-time allow and deny entries held (added through the admin endpoint)",
            metrics.list_entries.clone(),
        );
        r.register(
            "list_added",
            "Run-time list entries added or replaced through the admin endpoint",
            metrics.list_added.clone(),
        );
        r.register(
            "list_expired",
            "Run-time list entries taken out because their time to live ran out",
            metrics.list_expired.clone(),
        );
        r.register(
            "list_removed",
            "Run-time list entries removed through the admin endpoint",
            metrics.list_removed.clone(),
        );
        metrics.state.register(r);
        if cluster {
            metrics.cluster.register(r);
        }
        // Apart, so that a reload that adds `[kernel]` can export them (a registry takes no
        // metric once shared, and a restart should not be needed to see the fast path).
        let mut kernel_registry = Registry::with_prefix("tollgate");
        metrics.kernel.register(&mut kernel_registry);
        Metrics {
            registry,
            kernel_registry,
            ..metrics
        }
    }

    /// Exports the kernel fast path's metrics from the next render on (a reload added
    /// `[kernel]`); they stay exported, as they do when a reload removes the section.
    pub fn export_kernel(&self) {
        // Relaxed: a flag read at each render, ordering nothing else.
        self.kernel_exported.store(true, Ordering::Relaxed);
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
    pub fn throttled(&self, listener: &ListenerMetrics, policy: &Arc<Policy>, rule: usize) {
        listener.throttled.inc();
        self.count_rule(listener, policy, rule, false);
    }

    /// Counts what shadow rule `rule` (an index into `policy`) would have throttled on
    /// `listener`.
    pub fn shadow_throttled(&self, listener: &ListenerMetrics, policy: &Arc<Policy>, rule: usize) {
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
    pub fn refused(&self, listener: &ListenerMetrics, reason: Refusal) {
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
    pub fn upstream_error(&self, listener: &ListenerMetrics, upstream: std::net::SocketAddr) {
        self.upstream_errors
            .get_or_create(&UpstreamLabels {
                listener: listener.name.clone(),
                upstream: upstream.to_string(),
            })
            .inc();
    }

    /// Counts a reload by its result.
    pub fn reloaded(&self, ok: bool) {
        self.reloads
            .get_or_create(&ResultLabel {
                result: if ok { "ok" } else { "error" },
            })
            .inc();
    }

    /// Copies the run-time lists' counts (kept by the filter) into the exported metrics.
    pub fn set_lists(&self, stats: &ListStats) {
        let gauge = |value: usize| i64::try_from(value).unwrap_or(i64::MAX);
        for (list, held) in [("allow", stats.allow), ("deny", stats.deny)] {
            self.list_entries
                .get_or_create(&ListLabel { list })
                .set(gauge(held));
        }
        // Relaxed: statistics, copied from the filter's own counts (only ever growing).
        self.list_added
            .inner()
            .store(stats.added, Ordering::Relaxed);
        self.list_expired
            .inner()
            .store(stats.expired, Ordering::Relaxed);
        self.list_removed
            .inner()
            .store(stats.removed, Ordering::Relaxed);
    }

    /// The exposition text, with the policy's sketches' own reports taken at `now`.
    #[must_use]
    pub fn render(&self, policy: &Policy, now: Tick) -> String {
        let gauge = |value: u64| i64::try_from(value).unwrap_or(i64::MAX);
        for family in [&self.sketch_memory, &self.sketch_events, &self.sketch_bound] {
            family.clear();
        }
        self.sketch_fill.clear();
        for stats in policy.sketch_stats(now) {
            let label = WindowLabel {
                window: DurationText(stats.window).to_string(),
            };
            self.sketch_memory
                .get_or_create(&label)
                .set(gauge(stats.memory_bytes as u64));
            self.sketch_events
                .get_or_create(&label)
                .set(gauge(stats.events_current));
            self.sketch_bound
                .get_or_create(&label)
                .set(gauge(stats.overcount_bound));
            self.sketch_fill.get_or_create(&label).set(stats.front_fill);
        }
        for family in [
            &self.penalty_memory,
            &self.penalty_events,
            &self.penalty_bound,
        ] {
            family.clear();
        }
        // Two sketches per penalty length: memory adds up, the rest is the larger of the two.
        // Summed here, then set: two renders at once each set the whole value.
        let mut lengths: Vec<(String, Stats)> = Vec::new();
        for stats in policy.penalty_stats(now) {
            let length = DurationText(stats.window).to_string();
            match lengths.iter_mut().find(|(l, _)| *l == length) {
                Some((_, sum)) => {
                    sum.memory_bytes += stats.memory_bytes;
                    sum.events_current = sum.events_current.max(stats.events_current);
                    sum.overcount_bound = sum.overcount_bound.max(stats.overcount_bound);
                }
                None => lengths.push((length, stats)),
            }
        }
        for (length, stats) in lengths {
            let label = PenaltyLabel { length };
            self.penalty_memory
                .get_or_create(&label)
                .set(gauge(stats.memory_bytes as u64));
            self.penalty_events
                .get_or_create(&label)
                .set(gauge(stats.events_current));
            self.penalty_bound
                .get_or_create(&label)
                .set(gauge(stats.overcount_bound));
        }
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        // Relaxed: see `export_kernel`.
        if self.kernel_exported.load(Ordering::Relaxed) {
            // One exposition: the first one's closing `# EOF` goes, the second one's ends it.
            if let Some(open) = text.strip_suffix("# EOF\n") {
                text.truncate(open.len());
            }
            let _ = prometheus_client::encoding::text::encode(&mut text, &self.kernel_registry);
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(rules: &[&str]) -> Arc<Policy> {
        let mut text = String::from("[sketch]\nmemory = \"1MiB\"\n");
        for rule in rules {
            text += &format!("[[rule]]\nname = \"{rule}\"\nlimits = [{{ rate = \"1/1h\" }}]\n");
        }
        Arc::new(Policy::compile(tollgate_filter::Config::parse(&text).unwrap(), None).unwrap())
    }

    #[test]
    fn a_reload_keeps_counting_a_rule_in_its_series_and_a_renamed_rule_in_its_own() {
        let metrics = Metrics::new();
        let front = metrics.listener("front");
        let first = policy(&["a", "x"]);
        metrics.throttled(&front, &first, 0);
        metrics.throttled(&front, &first, 0);
        metrics.throttled(&front, &first, 1);
        metrics.shadow_throttled(&front, &first, 0);
        // Reloaded: "a" and "x" swap places.
        let second = policy(&["x", "a"]);
        metrics.throttled(&front, &second, 1);
        metrics.shadow_throttled(&front, &second, 1);
        // Renamed: "a" is "b" now, at the index "a" had.
        let third = policy(&["x", "b"]);
        metrics.throttled(&front, &third, 1);
        // A decision made under the first policy, counted after the reloads.
        metrics.throttled(&front, &first, 0);
        metrics.refused(&front, Refusal::Penalty);
        metrics.refused(&front, Refusal::Penalty);
        let text = metrics.render(&third, Tick::ZERO);
        for needle in [
            "tollgate_throttled_total{listener=\"front\",rule=\"a\"} 4\n",
            "tollgate_throttled_total{listener=\"front\",rule=\"b\"} 1\n",
            "tollgate_throttled_total{listener=\"front\",rule=\"x\"} 1\n",
            "tollgate_shadow_throttled_total{listener=\"front\",rule=\"a\"} 2\n",
            "tollgate_decisions_total{listener=\"front\",verdict=\"throttled\"} 6\n",
            "tollgate_refused_total{listener=\"front\",reason=\"penalty\"} 2\n",
        ] {
            assert!(text.contains(needle), "{needle} missing from\n{text}");
        }
        assert!(
            !text.contains("shadow_throttled_total{listener=\"front\",rule=\"x\"}"),
            "{text}"
        );
    }

    #[test]
    fn kernel_metrics_appear_once_exported_in_one_exposition() {
        let policy = Policy::compile(
            tollgate_filter::Config::parse("[sketch]\nmemory = \"1MiB\"\n").unwrap(),
            None,
        )
        .unwrap();
        let metrics = Metrics::for_sections(false, false);
        let before = metrics.render(&policy, Tick::ZERO);
        assert!(!before.contains("tollgate_kernel_"), "{before}");
        metrics.export_kernel();
        let after = metrics.render(&policy, Tick::ZERO);
        assert!(after.contains("tollgate_kernel_active 0"), "{after}");
        assert!(after.contains("tollgate_decide_failures_total"), "{after}");
        assert_eq!(after.matches("# EOF").count(), 1, "{after}");
        assert!(after.ends_with("# EOF\n"), "{after}");
        let at_start = Metrics::for_sections(false, true).render(&policy, Tick::ZERO);
        assert!(at_start.contains("tollgate_kernel_active 0"), "{at_start}");
    }

    /// Every refusal reason has its own slot and series: the reasons' table holds
    /// [`REFUSALS`] slots, one per variant (one short and counting the last reason panics in
    /// the proxy's path), and each reason's count lands under its own label.
    #[test]
    fn each_refusal_reason_counts_in_its_own_series() {
        use Refusal::*;
        let reasons = [
            Listed,
            Penalty,
            ConnectionCap,
            ListenerFull,
            PrefixCap,
            HeldFull,
            HeaderWaitsFull,
            HeaderWaitsPerPeer,
            HeldPerSource,
            HeldPerPrefix,
            UntrustedHeader,
            BadHeader,
            SessionsFull,
            SourceSessions,
            PrefixSessions,
            SessionSocket,
        ];
        assert_eq!(reasons.len(), REFUSALS, "a reason missing from this test");
        let metrics = Metrics::new();
        let front = metrics.listener("front");
        for (times, &reason) in (1..).zip(&reasons) {
            for _ in 0..times {
                metrics.refused(&front, reason);
            }
        }
        let text = metrics.render(&policy(&[]), Tick::ZERO);
        for (times, reason) in (1..).zip(reasons) {
            let series = format!(
                "tollgate_refused_total{{listener=\"front\",reason=\"{}\"}} {times}\n",
                reason.as_str()
            );
            assert!(text.contains(&series), "{series} missing from\n{text}");
        }
        let denied = reasons.len() * (reasons.len() + 1) / 2;
        let total =
            format!("tollgate_decisions_total{{listener=\"front\",verdict=\"denied\"}} {denied}\n");
        assert!(text.contains(&total), "{total} missing from\n{text}");
    }

    /// Each penalty length's two sketches are one series: their memory summed (the operator
    /// sizing the box reads this), events and bound the larger of the two. Two lengths, so a
    /// length's sketches are not summed into another's.
    #[test]
    fn each_penalty_length_reports_its_two_sketches_as_one_series() {
        let mut text = String::from("[sketch]\nmemory = \"1MiB\"\n");
        for (rule, length) in [("a", "5m"), ("b", "1h")] {
            text += &format!(
                "[[rule]]\nname = \"{rule}\"\nlimits = [{{ rate = \"1/1h\" }}]\n\
                 penalty = \"{length}\"\n"
            );
        }
        let policy = Policy::compile(tollgate_filter::Config::parse(&text).unwrap(), None).unwrap();
        let stats = policy.penalty_stats(Tick::ZERO);
        let rendered = Metrics::new().render(&policy, Tick::ZERO);
        for length in ["5m", "1h"] {
            let two: Vec<&Stats> = stats
                .iter()
                .filter(|s| DurationText(s.window).to_string() == length)
                .collect();
            assert_eq!(two.len(), 2, "{length}: {stats:?}");
            assert!(two.iter().all(|s| s.memory_bytes > 0), "{stats:?}");
            let memory: usize = two.iter().map(|s| s.memory_bytes).sum();
            let events = two.iter().map(|s| s.events_current).max().unwrap();
            let bound = two.iter().map(|s| s.overcount_bound).max().unwrap();
            for (name, value) in [
                ("memory_bytes", memory as u64),
                ("events", events),
                ("overcount_bound", bound),
            ] {
                let series =
                    format!("tollgate_penalty_sketch_{name}{{length=\"{length}\"}} {value}\n");
                assert!(
                    rendered.contains(&series),
                    "{series} missing from\n{rendered}"
                );
            }
        }
    }

    /// The counts an operator reads on a bad day land in their series, so the lib's own
    /// tests see them (the integration targets do too, at a build each): upstream errors by
    /// upstream, reloads by result, the run-time lists, the kernel sets' elements, and the
    /// cluster's metrics when that section is configured.
    #[test]
    fn upstream_reload_list_kernel_and_cluster_counts_land_in_their_series() {
        let metrics = Metrics::for_sections(true, true);
        let front = metrics.listener("front");
        let down: std::net::SocketAddr = "127.0.0.1:9".parse().unwrap();
        metrics.upstream_error(&front, down);
        metrics.upstream_error(&front, down);
        metrics.reloaded(true);
        metrics.reloaded(false);
        metrics.reloaded(false);
        metrics.set_lists(&ListStats {
            allow: 1,
            deny: 2,
            added: 3,
            expired: 4,
            removed: 5,
        });
        metrics.kernel.set_elements("v4", 6);
        let text = metrics.render(&policy(&[]), Tick::ZERO);
        for series in [
            "tollgate_upstream_errors_total{listener=\"front\",upstream=\"127.0.0.1:9\"} 2\n",
            "tollgate_reloads_total{result=\"ok\"} 1\n",
            "tollgate_reloads_total{result=\"error\"} 2\n",
            "tollgate_list_entries{list=\"allow\"} 1\n",
            "tollgate_list_entries{list=\"deny\"} 2\n",
            "tollgate_list_added_total 3\n",
            "tollgate_list_expired_total 4\n",
            "tollgate_list_removed_total 5\n",
            "tollgate_kernel_elements{set=\"v4\"} 6\n",
            "# TYPE tollgate_cluster_sync_seconds histogram\n",
        ] {
            assert!(text.contains(series), "{series} missing from\n{text}");
        }
        let alone = Metrics::new().render(&policy(&[]), Tick::ZERO);
        assert!(!alone.contains("tollgate_cluster_"), "{alone}");
    }
}
