//! The data path's one door: the filter and its clock, and what a decision or a refusal is
//! counted in (the metrics, the open-connection counts, the offender list, the rejection log
//! budget, the kernel's doorbell). Listeners hold an `Arc<Gate>` and nothing else of the
//! proxy's state.

use std::net::IpAddr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use tollgate_filter::{
    Decision, DenyReason, Event, Filter, LimitKey, Policy, Prefix, Rule, RuleId, Source, Transport,
    Verdict,
};
use tollgate_sketch::{Clock, MonotonicClock, Tick};

use crate::gate::ahead::Ahead;
use crate::gate::connections::Connections;
use crate::gate::log_limit::LogLimit;
use crate::gate::offenders::Offenders;
use crate::kernel::Wake;
use crate::listener_metrics::{ListenerMetrics, Offence, Refusal};
use crate::metrics::Metrics;

/// How many sources the offender list keeps.
const OFFENDERS: usize = 256;

/// The data path's door: decides and accounts ([`Gate::pass`]), counts a refusal that is not
/// a verdict ([`Gate::refuse`]), and hands out open-connection slots.
#[derive(Debug)]
pub struct Gate {
    /// The policy in force, swapped whole on reload.
    filter: Filter,
    clock: MonotonicClock,
    /// The clock's reading when this process started it (a warm restart's clock resumes
    /// where the last process's stopped: not zero).
    started: Tick,
    connections: Connections,
    /// Every metric (the admin endpoint renders the same ones).
    metrics: Arc<Metrics>,
    /// The most rejected sources.
    offenders: Offenders,
    /// The rejection log budget.
    logs: LogLimit,
    /// How long a `delay` action holds a connection when its rule names no bound
    /// (`[proxy] delay`).
    delay: Duration,
    /// Rung by a decision that puts a source over `[kernel] factor` times a limit, so the
    /// kernel's updater sends it at once (see [`crate::kernel::Wake`]).
    kernel_wake: Wake,
    /// Which arrivals the XDP program counted already (see [`Gate::pass`]).
    ahead: Ahead,
}

/// A decision and the policy that made it (its rule indices point into that policy, which a
/// reload may have replaced since).
#[derive(Debug)]
pub(crate) struct Decided {
    /// The decision.
    pub(crate) decision: Decision,
    /// The policy it was made under.
    policy: Arc<Policy>,
}

impl Decided {
    /// The rule a throttle or a penalty names, as the policy that decided holds it (`None`
    /// for an allow or a listed source): what a listener carries out.
    #[must_use]
    pub(crate) fn rule(&self) -> Option<&Rule> {
        match self.decision.verdict {
            Verdict::Throttle(throttle) => self.policy.rule(throttle.at.rule),
            Verdict::Deny(DenyReason::Penalty { rule }) => self.policy.rule(rule),
            Verdict::Allow | Verdict::Deny(_) => None,
        }
    }
}

impl Gate {
    /// The door to `filter`, read with `clock`, counting into `metrics`; the open-connection
    /// counts in `connection_memory` bytes, at most `log_rejections` rejection log lines a
    /// second, and `delay` the hold of a `delay` action whose rule names none (the `[proxy]`
    /// settings of those names).
    ///
    /// # Errors
    /// When `connection_memory` is too small for the open-connection counts.
    pub(crate) fn new(
        filter: Filter,
        clock: MonotonicClock,
        metrics: Arc<Metrics>,
        connection_memory: usize,
        log_rejections: u32,
        delay: Duration,
    ) -> Result<Gate, tollgate_sketch::BuildError> {
        let connections = Connections::new(connection_memory)?;
        metrics
            .connection_memory
            .set(i64::try_from(connections.memory_bytes()).unwrap_or(i64::MAX));
        let logs = LogLimit::new(log_rejections, metrics.logs_suppressed.clone());
        Ok(Gate {
            filter,
            started: clock.now(),
            clock,
            connections,
            offenders: Offenders::new(OFFENDERS),
            logs,
            delay,
            metrics,
            kernel_wake: Wake::new(),
            ahead: Ahead::default(),
        })
    }

    /// The filter whose policy decides.
    #[must_use]
    pub(crate) fn filter(&self) -> &Filter {
        &self.filter
    }

    /// Every metric.
    #[must_use]
    pub(crate) fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The most rejected sources.
    #[must_use]
    pub fn offenders(&self) -> &Offenders {
        &self.offenders
    }

    /// The rejection log budget.
    #[must_use]
    pub(crate) fn logs(&self) -> &LogLimit {
        &self.logs
    }

    /// How long a `delay` action holds a connection when its rule names no bound.
    #[must_use]
    pub(crate) fn delay(&self) -> Duration {
        self.delay
    }

    /// The kernel's doorbell, rung by decisions far over a limit.
    #[must_use]
    pub(crate) fn kernel_wake(&self) -> &Wake {
        &self.kernel_wake
    }

    /// Which arrivals the XDP program counted before the proxy saw them.
    #[must_use]
    pub(crate) fn ahead(&self) -> &Ahead {
        &self.ahead
    }

    /// The filter's clock now.
    #[must_use]
    pub(crate) fn now(&self) -> Tick {
        self.clock.now()
    }

    /// How long this process has run at `now` (a reading of [`Gate::now`]): the time base
    /// of its counters, which start at zero at every start, warm restarts included.
    pub(crate) fn uptime(&self, now: Tick) -> Duration {
        now.saturating_since(self.started)
    }

    /// Decides on one connection or datagram from `source` on `listener`, and counts the
    /// decision (`Gate::account`): the data path's one call per arrival. If the limiter
    /// fails (a bug: it is not meant to), the traffic is let through and counted: a rate
    /// limiter must not take the service down. An arrival that came in through the XDP
    /// program (see [`crate::gate::ahead`]) is not counted again under the limits the
    /// kernel takes: it counted and passed it there ([`Policy::decide_counted_ahead`]).
    pub(crate) fn pass(
        &self,
        listener: &ListenerMetrics,
        source: Source,
        transport: Transport,
        bytes: u64,
    ) -> Decided {
        let how: fn(&Policy, &Event, Tick) -> Decision =
            if self.ahead.crossed(&listener.name.0, source.addr()) {
                Policy::decide_counted_ahead
            } else {
                Policy::decide
            };
        let decided = self.judge(source, transport, bytes, how);
        self.account(listener, &decided, source);
        decided
    }

    /// [`Gate::pass`] for a source a trusted peer's PROXY header names: the XDP program saw
    /// the peer, not this source, so every limit counts it here.
    pub(crate) fn pass_named(
        &self,
        listener: &ListenerMetrics,
        source: Source,
        transport: Transport,
        bytes: u64,
    ) -> Decided {
        let decided = self.judge(source, transport, bytes, Policy::decide);
        self.account(listener, &decided, source);
        decided
    }

    /// Counts a connection or datagram refused on `listener` for `refusal`, which is not a
    /// verdict (a cap, a PROXY header): in the metrics, and as its kind says
    /// ([`Refusal::offence`]) in the offender list and the rejection log. True when the caller
    /// is to log its own line about it (within the log budget).
    #[must_use = "true asks the caller for its own log line"]
    pub(crate) fn refuse(
        &self,
        listener: &ListenerMetrics,
        refusal: Refusal,
        source: IpAddr,
    ) -> bool {
        self.metrics.listeners.refused(listener, refusal);
        match refusal.offence() {
            Offence::Offender(why) => {
                self.rejected(listener, source, why);
                false
            }
            Offence::Warning => self.logs.allow(),
            Offence::Counted => false,
        }
    }

    /// Whether a connection decided before may pass now (see [`Policy::recheck`]); fails open
    /// like [`Gate::pass`].
    pub(crate) fn recheck(&self, source: Source, transport: Transport) -> Decided {
        self.judge(source, transport, 0, Policy::recheck)
    }

    fn judge(
        &self,
        source: Source,
        transport: Transport,
        bytes: u64,
        how: fn(&Policy, &Event, Tick) -> Decision,
    ) -> Decided {
        let event = Event {
            source,
            transport,
            bytes,
        };
        let policy = self.filter.policy();
        let now = self.now();
        let decision =
            catch_unwind(AssertUnwindSafe(|| how(&policy, &event, now))).unwrap_or_else(|_| {
                self.metrics.decide_failures.inc();
                Decision {
                    verdict: Verdict::Allow,
                    shadow: None,
                    shadow_count: 0,
                }
            });
        Decided { decision, policy }
    }

    /// Takes one open-connection slot of the network of `source` (`prefixes`: its IPv4 and
    /// IPv6 lengths) in `scope`, or `None` if that network holds `cap` already. The key returned
    /// gives the slot back through [`Gate::close_connection`].
    #[must_use]
    pub(crate) fn open_in_network(
        &self,
        scope: RuleId,
        source: Source,
        prefixes: (Prefix, Prefix),
        cap: u32,
    ) -> Option<LimitKey> {
        self.connections.open(scope, source, prefixes, cap)
    }

    /// Gives back a slot taken by [`Gate::open_in_network`] (once per slot).
    pub(crate) fn close_connection(&self, key: &LimitKey) {
        self.connections.close(key);
    }

    /// Counts a decision on `listener` in the metrics and, if it rejects, in the offender list
    /// and (within the budget) the log.
    fn account(&self, listener: &ListenerMetrics, decided: &Decided, source: Source) {
        let metrics = &self.metrics;
        let rule_name = |index: usize| decided.policy.rule(index).map_or("?", |r| r.name.as_str());
        if let Some(shadow) = decided.decision.shadow {
            metrics
                .listeners
                .shadow_throttled(listener, &decided.policy, shadow.at.rule);
        }
        match decided.decision.verdict {
            Verdict::Allow => {
                listener.allowed.inc();
            }
            Verdict::Throttle(throttle) => {
                metrics
                    .listeners
                    .throttled(listener, &decided.policy, throttle.at.rule);
                self.rejected(listener, source.addr(), rule_name(throttle.at.rule));
                self.kernel_wake.over(throttle.estimate, throttle.allowed);
            }
            Verdict::Deny(DenyReason::Penalty { rule }) => {
                metrics.listeners.refused(listener, Refusal::Penalty);
                self.rejected(listener, source.addr(), rule_name(rule));
                self.kernel_wake.penalty();
            }
            Verdict::Deny(_) => {
                metrics.listeners.refused(listener, Refusal::Listed);
                self.rejected(listener, source.addr(), "deny list");
            }
        }
    }

    /// Bytes held for per-source open-connection counts.
    #[must_use]
    pub(crate) fn connections_memory(&self) -> usize {
        self.connections.memory_bytes()
    }

    /// Records a rejection of `source` for the offender list and, within the log budget, the
    /// log.
    fn rejected(&self, listener: &ListenerMetrics, source: IpAddr, why: &str) {
        self.offenders.record(source, why);
        if self.logs.allow() {
            tracing::info!(listener = &*listener.name.0, %source, why, "rejected");
        }
    }
}
