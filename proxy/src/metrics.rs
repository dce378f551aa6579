//! The proxy's metrics, in the Prometheus text format (prometheus-client writes it; names and
//! help texts are ours): one registry under the `tollgate_` prefix that each part registers
//! its own series into: the listeners' (`crate::listener_metrics`) first, then the process's
//! own (reloads, sketches, lists), then each part's in a sub-registry of its prefix: the admin
//! endpoint's (`crate::admin_metrics`), the state file's, the cluster's and the kernel fast
//! path's.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tollgate_filter::{DurationText, ListStats, Policy};
use tollgate_sketch::{Stats, Tick};

use crate::admin_metrics::AdminMetrics;
use crate::cluster::ClusterMetrics;
use crate::kernel::KernelMetrics;
use crate::listener_metrics::ListenerSeries;

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

/// Every metric the proxy exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// The series every listener counts into.
    pub listeners: ListenerSeries,
    reloads: Family<ResultLabel, Counter>,
    /// Decisions the limiter could not make (the connection was let through: fail-open).
    pub(crate) decide_failures: Counter,
    /// Rejection log lines left out by the log rate limit.
    pub(crate) logs_suppressed: Counter,
    sketch_memory: Family<WindowLabel, Gauge>,
    sketch_events: Family<WindowLabel, Gauge>,
    sketch_fill: Family<WindowLabel, FloatGauge>,
    sketch_bound: Family<WindowLabel, Gauge>,
    penalty_memory: Family<PenaltyLabel, Gauge>,
    penalty_events: Family<PenaltyLabel, Gauge>,
    penalty_bound: Family<PenaltyLabel, Gauge>,
    /// Bytes held for per-source open-connection counts.
    pub(crate) connection_memory: Gauge,
    /// The admin endpoint's connection counts.
    pub(crate) admin: AdminMetrics,
    /// The process's open-file limit (soft RLIMIT_NOFILE, after raising it at start).
    pub(crate) open_files_limit: Gauge,
    list_entries: Family<ListLabel, Gauge>,
    list_added: Counter,
    list_expired: Counter,
    list_removed: Counter,
    /// The cluster's metrics (exported only when `[cluster]` is configured).
    pub(crate) cluster: ClusterMetrics,
    /// The kernel fast path's metrics (exported once `[kernel]` is configured, at start or
    /// by a reload: see `Metrics::export_kernel`).
    pub kernel: KernelMetrics,
    /// The kernel metrics' own registry, rendered after the others once exported.
    kernel_registry: Registry,
    /// Whether `kernel_registry` is rendered.
    kernel_exported: AtomicBool,
    /// The warm-restart state file's metrics.
    pub(crate) state: crate::state::StateMetrics,
    /// The rate-limit service's metrics, in their own registry, rendered once exported
    /// (see [`Metrics::export_rls`]).
    pub(crate) rls: crate::rls::RlsMetrics,
    rls_registry: Registry,
    rls_exported: AtomicBool,
    /// The XDP mode's metrics, in their own registry, rendered once exported (see
    /// [`Metrics::export_xdp`]).
    pub(crate) xdp: std::sync::Arc<crate::xdp::XdpMetrics>,
    xdp_registry: Registry,
    xdp_exported: AtomicBool,
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
    pub(crate) fn new() -> Metrics {
        Metrics::build(false, false)
    }

    /// As `Metrics::new`, with the cluster's and the kernel fast path's metrics exported
    /// when those sections are configured.
    #[must_use]
    pub fn for_sections(cluster: bool, kernel: bool) -> Metrics {
        Metrics::build(cluster, kernel)
    }

    fn build(cluster: bool, kernel: bool) -> Metrics {
        let mut registry = Registry::with_prefix("tollgate");
        let metrics = Metrics {
            registry: Registry::default(),
            listeners: ListenerSeries::default(),
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
            admin: AdminMetrics::default(),
            open_files_limit: Gauge::default(),
            list_entries: Family::default(),
            list_added: Counter::default(),
            list_expired: Counter::default(),
            list_removed: Counter::default(),
            cluster: ClusterMetrics::new(),
            kernel: KernelMetrics::new(),
            kernel_registry: Registry::default(),
            kernel_exported: AtomicBool::new(kernel),
            state: crate::state::StateMetrics::default(),
            rls: crate::rls::RlsMetrics::default(),
            rls_registry: Registry::default(),
            rls_exported: AtomicBool::new(false),
            xdp: std::sync::Arc::default(),
            xdp_registry: Registry::default(),
            xdp_exported: AtomicBool::new(false),
        };
        let r = &mut registry;
        metrics.listeners.register(r);
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
        metrics.admin.register(r);
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
        let mut rls_registry = Registry::with_prefix("tollgate");
        metrics.rls.register(&mut rls_registry);
        let mut xdp_registry = Registry::with_prefix("tollgate");
        metrics.xdp.register(&mut xdp_registry);
        Metrics {
            registry,
            kernel_registry,
            rls_registry,
            xdp_registry,
            ..metrics
        }
    }

    /// Exports the kernel fast path's metrics from the next render on (a reload added
    /// `[kernel]`); they stay exported, as they do when a reload removes the section.
    pub(crate) fn export_kernel(&self) {
        // Relaxed: a flag read at each render, ordering nothing else.
        self.kernel_exported.store(true, Ordering::Relaxed);
    }

    /// Exports the XDP mode's metrics from the next render on (its program was attached).
    pub(crate) fn export_xdp(&self) {
        // Relaxed: as `export_kernel`.
        self.xdp_exported.store(true, Ordering::Relaxed);
    }

    /// Exports the rate-limit service's metrics from the next render on (it started).
    pub(crate) fn export_rls(&self) {
        // Relaxed: as `export_kernel`.
        self.rls_exported.store(true, Ordering::Relaxed);
    }

    /// Counts a reload by its result.
    pub(crate) fn reloaded(&self, ok: bool) {
        self.reloads
            .get_or_create(&ResultLabel {
                result: if ok { "ok" } else { "error" },
            })
            .inc();
    }

    /// Copies the run-time lists' counts (kept by the filter) into the exported metrics.
    pub(crate) fn set_lists(&self, stats: &ListStats) {
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
        let more = [
            (&self.kernel_exported, &self.kernel_registry),
            (&self.rls_exported, &self.rls_registry),
            (&self.xdp_exported, &self.xdp_registry),
        ];
        for (exported, registry) in more {
            if exported.load(Ordering::Relaxed) {
                // One exposition: the first one's closing `# EOF` goes, the next one's ends it.
                if let Some(open) = text.strip_suffix("# EOF\n") {
                    text.truncate(open.len());
                }
                let _ = prometheus_client::encoding::text::encode(&mut text, registry);
            }
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::listener_metrics::{REFUSALS, Refusal};

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
        let front = metrics.listeners.listener("front");
        let first = policy(&["a", "x"]);
        metrics.listeners.throttled(&front, &first, 0);
        metrics.listeners.throttled(&front, &first, 0);
        metrics.listeners.throttled(&front, &first, 1);
        metrics.listeners.shadow_throttled(&front, &first, 0);
        // Reloaded: "a" and "x" swap places.
        let second = policy(&["x", "a"]);
        metrics.listeners.throttled(&front, &second, 1);
        metrics.listeners.shadow_throttled(&front, &second, 1);
        // Renamed: "a" is "b" now, at the index "a" had.
        let third = policy(&["x", "b"]);
        metrics.listeners.throttled(&front, &third, 1);
        // A decision made under the first policy, counted after the reloads.
        metrics.listeners.throttled(&front, &first, 0);
        metrics.listeners.refused(&front, Refusal::Penalty);
        metrics.listeners.refused(&front, Refusal::Penalty);
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
        let front = metrics.listeners.listener("front");
        for (times, &reason) in (1..).zip(&reasons) {
            for _ in 0..times {
                metrics.listeners.refused(&front, reason);
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
    /// tests see them (the end-to-end tests do too, in a build of their own): upstream errors by
    /// upstream, reloads by result, the run-time lists, the kernel sets' elements, and the
    /// cluster's metrics when that section is configured.
    #[test]
    fn upstream_reload_list_kernel_and_cluster_counts_land_in_their_series() {
        let metrics = Metrics::for_sections(true, true);
        let front = metrics.listeners.listener("front");
        let down: std::net::SocketAddr = "127.0.0.1:9".parse().unwrap();
        metrics.listeners.upstream_error(&front, down);
        metrics.listeners.upstream_error(&front, down);
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
