//! The results: every run's figure kept, the table showing the median per cell (the machine
//! is shared and noisy; a median of a few runs is steadier than any one), next to the goal.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde_json::{Value, json};
use tollgate_benches::kind::Kind;
use tollgate_benches::table::{median, number, render};

use crate::cli::Scenario;

/// One row of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Metric {
    ShortRate,
    ShortCpu,
    /// The user-mode part of [`Metric::ShortCpu`].
    ShortUser,
    /// The kernel part of [`Metric::ShortCpu`].
    ShortSystem,
    ShortSwitches,
    RejectedRate,
    RejectedCpu,
    RejectedUser,
    RejectedSystem,
    RejectedSwitches,
    LatencyP50,
    LatencyP99,
    /// Derived: a proxy's median p50 less the direct column's.
    LatencyAdded,
    LatencyCpu,
    LatencyUser,
    LatencySystem,
    LatencySwitches,
    BulkRate,
    BulkCpu,
    UdpSent,
    UdpForwarded,
    UdpCpu,
}

/// What a figure should be, for tollgate.
#[derive(Clone, Copy, Debug)]
enum Goal {
    AtMost(f64),
    AtLeast(f64),
}

impl Metric {
    const ALL: [Metric; 22] = [
        Metric::ShortRate,
        Metric::ShortCpu,
        Metric::ShortUser,
        Metric::ShortSystem,
        Metric::ShortSwitches,
        Metric::RejectedRate,
        Metric::RejectedCpu,
        Metric::RejectedUser,
        Metric::RejectedSystem,
        Metric::RejectedSwitches,
        Metric::LatencyP50,
        Metric::LatencyP99,
        Metric::LatencyAdded,
        Metric::LatencyCpu,
        Metric::LatencyUser,
        Metric::LatencySystem,
        Metric::LatencySwitches,
        Metric::BulkRate,
        Metric::BulkCpu,
        Metric::UdpSent,
        Metric::UdpForwarded,
        Metric::UdpCpu,
    ];

    fn label(self) -> &'static str {
        match self {
            Metric::ShortRate => "short conns: conn/s",
            Metric::ShortCpu => "short conns: proxy CPU us/conn",
            Metric::ShortUser => "short conns: proxy user CPU us/conn",
            Metric::ShortSystem => "short conns: proxy system CPU us/conn",
            Metric::ShortSwitches => "short conns: proxy context switches/conn",
            Metric::RejectedRate => "rejected conns: conn/s",
            Metric::RejectedCpu => "rejected conns: proxy CPU us/conn",
            Metric::RejectedUser => "rejected conns: proxy user CPU us/conn",
            Metric::RejectedSystem => "rejected conns: proxy system CPU us/conn",
            Metric::RejectedSwitches => "rejected conns: proxy context switches/conn",
            Metric::LatencyP50 => "latency p50 (us)",
            Metric::LatencyP99 => "latency p99 (us)",
            Metric::LatencyAdded => "latency p50 added over direct (us)",
            Metric::LatencyCpu => "latency: proxy CPU us/exchange",
            Metric::LatencyUser => "latency: proxy user CPU us/exchange",
            Metric::LatencySystem => "latency: proxy system CPU us/exchange",
            Metric::LatencySwitches => "latency: proxy context switches/exchange",
            Metric::BulkRate => "one connection: MB/s",
            Metric::BulkCpu => "one connection: proxy CPU us/MB",
            Metric::UdpSent => "udp 64 B: sent/s",
            Metric::UdpForwarded => "udp 64 B: forwarded/s",
            Metric::UdpCpu => "udp 64 B: proxy CPU us/datagram",
        }
    }

    /// The name in JSON.
    fn key(self) -> &'static str {
        match self {
            Metric::ShortRate => "short_conn_per_s",
            Metric::ShortCpu => "short_cpu_us_per_conn",
            Metric::ShortUser => "short_user_cpu_us_per_conn",
            Metric::ShortSystem => "short_system_cpu_us_per_conn",
            Metric::ShortSwitches => "short_switches_per_conn",
            Metric::RejectedRate => "rejected_conn_per_s",
            Metric::RejectedCpu => "rejected_cpu_us_per_conn",
            Metric::RejectedUser => "rejected_user_cpu_us_per_conn",
            Metric::RejectedSystem => "rejected_system_cpu_us_per_conn",
            Metric::RejectedSwitches => "rejected_switches_per_conn",
            Metric::LatencyP50 => "latency_p50_us",
            Metric::LatencyP99 => "latency_p99_us",
            Metric::LatencyAdded => "latency_p50_added_us",
            Metric::LatencyCpu => "latency_cpu_us_per_exchange",
            Metric::LatencyUser => "latency_user_cpu_us_per_exchange",
            Metric::LatencySystem => "latency_system_cpu_us_per_exchange",
            Metric::LatencySwitches => "latency_switches_per_exchange",
            Metric::BulkRate => "bulk_mb_per_s",
            Metric::BulkCpu => "bulk_cpu_us_per_mb",
            Metric::UdpSent => "udp_sent_per_s",
            Metric::UdpForwarded => "udp_forwarded_per_s",
            Metric::UdpCpu => "udp_cpu_us_per_datagram",
        }
    }

    fn goal(self) -> Option<Goal> {
        match self {
            Metric::ShortCpu => Some(Goal::AtMost(60.0)),
            Metric::RejectedCpu => Some(Goal::AtMost(10.0)),
            Metric::LatencyAdded => Some(Goal::AtMost(60.0)),
            Metric::BulkRate => Some(Goal::AtLeast(900.0)),
            Metric::UdpForwarded => Some(Goal::AtLeast(100_000.0)),
            _ => None,
        }
    }
}

impl Goal {
    fn met(self, value: f64) -> bool {
        match self {
            Goal::AtMost(limit) => value <= limit,
            Goal::AtLeast(floor) => value >= floor,
        }
    }

    fn text(self) -> String {
        match self {
            Goal::AtMost(limit) => format!("<= {}", number(limit)),
            Goal::AtLeast(floor) => format!(">= {}", number(floor)),
        }
    }
}

/// Every figure of every run, and the notes.
#[derive(Debug, Default)]
pub(crate) struct Report {
    columns: Vec<Kind>,
    samples: BTreeMap<(Metric, Kind), Vec<f64>>,
    /// System calls per operation (`--strace`), by scenario and name.
    syscalls: BTreeMap<(Scenario, String), BTreeMap<Kind, Vec<f64>>>,
    notes: Vec<String>,
}

impl Report {
    pub(crate) fn new(columns: Vec<Kind>) -> Report {
        Report {
            columns,
            ..Report::default()
        }
    }

    pub(crate) fn record(&mut self, metric: Metric, column: Kind, value: f64) {
        if value.is_finite() {
            self.samples
                .entry((metric, column))
                .or_default()
                .push(value);
        }
    }

    /// One run's calls of syscall `name` per operation of `scenario` by `column`.
    pub(crate) fn record_syscall(
        &mut self,
        scenario: Scenario,
        name: String,
        column: Kind,
        value: f64,
    ) {
        self.syscalls
            .entry((scenario, name))
            .or_default()
            .entry(column)
            .or_default()
            .push(value);
    }

    pub(crate) fn note(&mut self, note: String) {
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }

    fn median(&self, metric: Metric, column: Kind) -> Option<f64> {
        if metric == Metric::LatencyAdded {
            if column == Kind::Direct {
                return None;
            }
            let direct = self.median(Metric::LatencyP50, Kind::Direct)?;
            return Some(self.median(Metric::LatencyP50, column)? - direct);
        }
        median(self.samples.get(&(metric, column))?)
    }

    /// The syscall table (`--strace`): calls per operation, medians, rows with at least 0.05
    /// calls per operation in some column; empty without samples.
    fn syscall_table(&self) -> String {
        if self.syscalls.is_empty() {
            return String::new();
        }
        let mut header = vec!["syscalls per conn (strace -c -f)".to_owned()];
        header.extend(self.columns.iter().map(|c| c.name().to_owned()));
        let mut lines = vec![header];
        for ((scenario, name), by_column) in &self.syscalls {
            let medians: Vec<Option<f64>> = self
                .columns
                .iter()
                .map(|column| by_column.get(column).and_then(|v| median(v)))
                .collect();
            if !medians.iter().flatten().any(|&m| m >= 0.05) {
                continue;
            }
            let mut line = vec![format!("{scenario:?}: {name}").to_lowercase()];
            line.extend(
                medians
                    .iter()
                    .map(|m| m.map_or_else(|| "-".to_owned(), |m| format!("{m:.2}"))),
            );
            lines.push(line);
        }
        for scenario in self
            .syscalls
            .keys()
            .map(|(s, _)| *s)
            .collect::<BTreeSet<_>>()
        {
            let mut line = vec![format!("{scenario:?}: total").to_lowercase()];
            for column in &self.columns {
                let total: f64 = self
                    .syscalls
                    .iter()
                    .filter(|((s, _), _)| *s == scenario)
                    .filter_map(|(_, by_column)| by_column.get(column).and_then(|v| median(v)))
                    .sum();
                line.push(format!("{total:.2}"));
            }
            lines.push(line);
        }
        format!("\n{}", render(&lines))
    }

    fn rows(&self) -> impl Iterator<Item = Metric> + '_ {
        Metric::ALL.into_iter().filter(|&metric| {
            self.columns
                .iter()
                .any(|&column| self.median(metric, column).is_some())
        })
    }

    /// The table: one row per metric, one column per peer, medians, tollgate marked against
    /// its goal.
    pub(crate) fn table(&self) -> String {
        let mut header = vec!["scenario".to_owned(), "goal".to_owned()];
        header.extend(self.columns.iter().map(|c| c.name().to_owned()));
        let mut lines = vec![header];
        for metric in self.rows() {
            let goal = metric.goal();
            let mut line = vec![
                metric.label().to_owned(),
                goal.map_or_else(|| "-".to_owned(), Goal::text),
            ];
            for &column in &self.columns {
                line.push(match self.median(metric, column) {
                    None => "-".to_owned(),
                    Some(value) => match goal {
                        Some(goal) if column == Kind::Tollgate => format!(
                            "{} {}",
                            number(value),
                            if goal.met(value) { "ok" } else { "MISS" }
                        ),
                        _ => number(value),
                    },
                });
            }
            lines.push(line);
        }
        let mut out = render(&lines);
        out.push_str(&self.syscall_table());
        for note in &self.notes {
            let _ = writeln!(out, "note: {note}");
        }
        out
    }

    /// Every figure, with its median, as JSON.
    pub(crate) fn json(&self, header: Value) -> Value {
        let results: Vec<Value> = self
            .rows()
            .flat_map(|metric| {
                self.columns.iter().filter_map(move |&column| {
                    let median = self.median(metric, column)?;
                    Some(json!({
                        "metric": metric.key(),
                        "column": column.name(),
                        "median": median,
                        "samples": self.samples.get(&(metric, column)).cloned().unwrap_or_default(),
                        "goal": metric.goal().map(Goal::text),
                        "goal_met": metric.goal().filter(|_| column == Kind::Tollgate).map(|g| g.met(median)),
                    }))
                })
            })
            .collect();
        let syscalls: Vec<Value> = self
            .syscalls
            .iter()
            .flat_map(|((scenario, name), by_column)| {
                by_column.iter().map(move |(column, values)| {
                    json!({
                        "scenario": format!("{scenario:?}").to_lowercase(),
                        "syscall": name,
                        "column": column.name(),
                        "median_per_op": median(values),
                        "samples": values,
                    })
                })
            })
            .collect();
        json!({ "run": header, "results": results, "syscalls": syscalls, "notes": self.notes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_the_derived_added_latency() {
        let mut report = Report::new(vec![Kind::Direct, Kind::Tollgate]);
        for v in [100.0, 300.0, 200.0] {
            report.record(Metric::LatencyP50, Kind::Direct, v);
        }
        for v in [250.0, 260.0] {
            report.record(Metric::LatencyP50, Kind::Tollgate, v);
        }
        assert_eq!(report.median(Metric::LatencyP50, Kind::Direct), Some(200.0));
        assert_eq!(
            report.median(Metric::LatencyP50, Kind::Tollgate),
            Some(255.0)
        );
        assert_eq!(
            report.median(Metric::LatencyAdded, Kind::Tollgate),
            Some(55.0)
        );
        assert_eq!(report.median(Metric::LatencyAdded, Kind::Direct), None);
        assert!(report.table().contains("55.0 ok"));
    }

    #[test]
    fn user_and_system_cpu_have_rows_of_their_own_under_the_total() {
        let mut report = Report::new(vec![Kind::Tollgate, Kind::Haproxy]);
        report.record(Metric::ShortCpu, Kind::Tollgate, 80.0);
        report.record(Metric::ShortUser, Kind::Tollgate, 12.0);
        report.record(Metric::ShortSystem, Kind::Tollgate, 68.0);
        report.record(Metric::ShortSystem, Kind::Haproxy, 61.0);
        let table = report.table();
        let row = |label: &str| {
            table
                .lines()
                .find(|l| l.starts_with(label))
                .map(|l| l[label.len()..].split_whitespace().collect::<Vec<_>>())
        };
        assert_eq!(
            row("short conns: proxy user CPU us/conn"),
            Some(vec!["-", "12.0", "-"]),
            "{table}"
        );
        assert_eq!(
            row("short conns: proxy system CPU us/conn"),
            Some(vec!["-", "68.0", "61.0"]),
            "{table}"
        );
        // The total's row comes first, then its parts.
        let at = |label: &str| table.find(label).unwrap();
        assert!(at("proxy CPU us/conn") < at("proxy user CPU"), "{table}");
        assert!(at("proxy user CPU") < at("proxy system CPU"), "{table}");
        let json = report.json(json!({}));
        assert!(
            json["results"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["metric"] == "short_system_cpu_us_per_conn" && r["median"] == 61.0),
            "{json}"
        );
    }

    #[test]
    fn the_syscall_table_shows_medians_per_column_and_totals() {
        let mut report = Report::new(vec![Kind::Tollgate, Kind::Nginx]);
        for v in [1.0, 3.0, 2.0] {
            report.record_syscall(Scenario::Short, "close".to_owned(), Kind::Tollgate, v);
        }
        report.record_syscall(Scenario::Short, "close".to_owned(), Kind::Nginx, 2.5);
        report.record_syscall(Scenario::Short, "ioctl".to_owned(), Kind::Tollgate, 1.0);
        // Below 0.05 per connection everywhere: left out.
        report.record_syscall(Scenario::Short, "gettid".to_owned(), Kind::Nginx, 0.01);
        let table = report.syscall_table();
        let row = |name: &str| {
            table
                .lines()
                .find(|l| l.starts_with(name))
                .map(|l| l.split_whitespace().skip(2).collect::<Vec<_>>())
        };
        assert_eq!(row("short: close"), Some(vec!["2.00", "2.50"]), "{table}");
        assert_eq!(row("short: ioctl"), Some(vec!["1.00", "-"]), "{table}");
        assert_eq!(row("short: gettid"), None, "{table}");
        assert_eq!(row("short: total"), Some(vec!["3.00", "2.51"]), "{table}");
    }
}
