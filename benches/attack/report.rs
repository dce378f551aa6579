//! The rows: per attack and proxy, the legitimate clients' success and p99 latency against the
//! same run's unattacked phase, the metrics scrapes, and the proxy's CPU, descriptors and RSS;
//! each row checked against the goals and printed as a table or CSV.

use std::fmt::Write as _;

use tollgate_benches::kind::Kind;
use tollgate_benches::table::{number, render};

use crate::cli::Attack;
use crate::legit::Phase;
use crate::watch::{Resources, Seen};

/// Legitimate exchanges served under attack, at least, in percent.
pub(crate) const SERVED_GOAL: f64 = 99.9;
/// Legitimate p99 latency under attack over the unattacked p99, at most.
pub(crate) const P99_GOAL: f64 = 2.0;

/// One attack against one proxy.
#[derive(Debug)]
pub(crate) struct Row {
    pub(crate) attack: Attack,
    pub(crate) peer: Kind,
    /// The legitimate clients before the attack.
    pub(crate) base: Phase,
    /// The legitimate clients during it.
    pub(crate) attacked: Phase,
    /// /metrics scrapes during the attack: (answered, attempted).
    pub(crate) scrapes: (u64, u64),
    /// The proxy just before the attack.
    pub(crate) before: Resources,
    pub(crate) seen: Seen,
    pub(crate) notes: Vec<String>,
}

impl Row {
    /// Attacked p99 over unattacked p99.
    fn ratio(&self) -> Option<f64> {
        Some(self.attacked.p99_us? / self.base.p99_us?.max(1.0))
    }

    /// Whether the row meets the goals: enough served, p99 within bounds, and for the admin
    /// attack every scrape answered.
    pub(crate) fn pass(&self) -> bool {
        let served = self.attacked.attempts > 0 && self.attacked.success_percent() >= SERVED_GOAL;
        let latency = self.ratio().is_some_and(|r| r <= P99_GOAL);
        let metrics = self.attack != Attack::AdminSlowloris || self.scrapes.0 == self.scrapes.1;
        served && latency && metrics
    }
}

fn ms(us: Option<f64>) -> String {
    us.map_or_else(|| "-".to_owned(), |us| number(us / 1000.0))
}

fn mib(bytes: u64) -> String {
    number(bytes as f64 / f64::from(1u32 << 20))
}

/// The rows as an aligned table, then each row's notes and failure reasons.
pub(crate) fn table(rows: &[Row]) -> String {
    let mut lines = vec![
        [
            "attack",
            "proxy",
            "legit served",
            "p99 ms (no attack)",
            "p99 ms (attack)",
            "x",
            "metrics",
            "CPU %",
            "fds before/peak",
            "RSS MiB before/peak",
            "goals",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    for row in rows {
        lines.push(vec![
            row.attack.name().to_owned(),
            row.peer.name().to_owned(),
            format!(
                "{}/{} = {:.2}%",
                row.attacked.served,
                row.attacked.attempts,
                row.attacked.success_percent()
            ),
            ms(row.base.p99_us),
            ms(row.attacked.p99_us),
            row.ratio().map_or_else(|| "-".to_owned(), number),
            format!("{}/{}", row.scrapes.0, row.scrapes.1),
            row.seen.cpu_percent.map_or_else(|| "-".to_owned(), number),
            format!("{}/{}", row.before.fds, row.seen.peak.fds),
            format!("{}/{}", mib(row.before.rss), mib(row.seen.peak.rss)),
            if row.pass() { "PASS" } else { "FAIL" }.to_owned(),
        ]);
    }
    let mut out = render(&lines);
    for row in rows {
        for note in &row.notes {
            let _ = writeln!(out, "note: {} {}: {note}", row.attack.name(), row.peer);
        }
        for (why, count) in &row.attacked.failures {
            let _ = writeln!(
                out,
                "note: {} {}: {count} legitimate failed: {why}",
                row.attack.name(),
                row.peer
            );
        }
    }
    out
}

/// The rows as CSV, with a header line.
pub(crate) fn csv(rows: &[Row]) -> String {
    let mut out = String::from(
        "attack,proxy,legit_attempts,legit_served,served_percent,p99_base_us,p99_attack_us,\
         p99_ratio,metrics_answered,metrics_attempted,cpu_percent,fds_before,fds_peak,fds_end,\
         rss_before_bytes,rss_peak_bytes,pass\n",
    );
    let opt = |v: Option<f64>| v.map_or_else(String::new, |v| format!("{v:.1}"));
    for row in rows {
        let _ = writeln!(
            out,
            "{},{},{},{},{:.3},{},{},{},{},{},{},{},{},{},{},{},{}",
            row.attack.name(),
            row.peer,
            row.attacked.attempts,
            row.attacked.served,
            row.attacked.success_percent(),
            opt(row.base.p99_us),
            opt(row.attacked.p99_us),
            row.ratio().map_or_else(String::new, |r| format!("{r:.2}")),
            row.scrapes.0,
            row.scrapes.1,
            opt(row.seen.cpu_percent),
            row.before.fds,
            row.seen.peak.fds,
            row.seen.end.fds,
            row.before.rss,
            row.seen.peak.rss,
            row.pass(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(served: u64, attempts: u64, base_p99: f64, p99: f64) -> Row {
        let phase = |served, attempts, p99| Phase {
            attempts,
            served,
            p99_us: Some(p99),
            failures: Vec::new(),
        };
        Row {
            attack: Attack::Flood,
            peer: Kind::Tollgate,
            base: phase(100, 100, base_p99),
            attacked: phase(served, attempts, p99),
            scrapes: (3, 3),
            before: Resources::default(),
            seen: Seen::default(),
            notes: Vec::new(),
        }
    }

    #[test]
    fn goals_need_both_success_and_latency() {
        assert!(row(1000, 1000, 500.0, 1000.0).pass());
        assert!(!row(998, 1000, 500.0, 600.0).pass(), "99.8% served");
        assert!(row(999, 1000, 500.0, 600.0).pass(), "99.9% served");
        assert!(!row(1000, 1000, 500.0, 1001.0).pass(), "p99 over 2x");
        assert!(!row(0, 0, 500.0, 500.0).pass(), "nothing attempted");
    }

    #[test]
    fn admin_attack_needs_every_scrape_answered() {
        let mut admin = row(1000, 1000, 500.0, 500.0);
        admin.attack = Attack::AdminSlowloris;
        assert!(admin.pass());
        admin.scrapes = (2, 3);
        assert!(!admin.pass());
    }

    #[test]
    fn csv_has_a_line_per_row_with_every_field() {
        let text = csv(&[row(999, 1000, 500.0, 600.0)]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(
            lines[0].split(',').count(),
            lines[1].split(',').count(),
            "{text}"
        );
        assert!(lines[1].starts_with("flood,tollgate,1000,999,99.900,"));
        assert!(lines[1].ends_with(",true"));
    }
}
