//! The results: every round's figure kept, each table showing medians, the scaling of each
//! contender over its own 1-thread figure and Tollgate's ratio to pingora.

use std::fmt::Write as _;

use tollgate_benches::table::{median, number, render};

use crate::peers::Measured;

/// One contender's rounds in one row.
struct Cell {
    name: String,
    ours: bool,
    per_second: Vec<f64>,
    cpu_nanos: Vec<f64>,
    failed_swaps: Vec<f64>,
    updates: Vec<f64>,
    blocked: Vec<f64>,
}

/// One thread count at one memory size.
struct Row {
    memory: String,
    threads: usize,
    cells: Vec<Cell>,
}

/// The end of a failed-swaps column's name.
const SWAPS: &str = "failed swaps/event";
/// The end of a shared-writes column's name.
const UPDATES: &str = "updates/event";
/// The end of a blocked-reservations column's name.
const BLOCKED: &str = "blocked/event";

/// A row's figures: its memory, its thread count, then one figure a column (`None`: none).
type Line = (String, usize, Vec<Option<f64>>);

/// One workload's rows.
pub(crate) struct Table {
    title: String,
    rows: Vec<Row>,
    /// Whether the table shows time on a CPU per event instead of events a second.
    on_cpu: bool,
}

impl Table {
    pub(crate) fn new(title: String) -> Table {
        Table {
            title,
            rows: Vec::new(),
            on_cpu: false,
        }
    }

    /// A table of nanoseconds on a CPU per event (all threads' together), medians, and
    /// Tollgate's speed against pingora by them (pingora's nanoseconds over its own).
    pub(crate) fn on_cpu(title: String) -> Table {
        Table {
            on_cpu: true,
            ..Table::new(title)
        }
    }

    /// Records a round of contender `name` at `memory` and `threads`.
    pub(crate) fn record(
        &mut self,
        memory: &str,
        threads: usize,
        name: &str,
        ours: bool,
        measured: &Measured,
    ) {
        let at = self
            .rows
            .iter()
            .position(|row| row.memory == memory && row.threads == threads)
            .unwrap_or_else(|| {
                self.rows.push(Row {
                    memory: memory.to_owned(),
                    threads,
                    cells: Vec::new(),
                });
                self.rows.len() - 1
            });
        let cells = &mut self.rows[at].cells;
        let cell = match cells.iter().position(|cell| cell.name == name) {
            Some(cell) => &mut cells[cell],
            None => {
                cells.push(Cell {
                    name: name.to_owned(),
                    ours,
                    per_second: Vec::new(),
                    cpu_nanos: Vec::new(),
                    failed_swaps: Vec::new(),
                    updates: Vec::new(),
                    blocked: Vec::new(),
                });
                cells.last_mut().expect("just pushed")
            }
        };
        cell.per_second.push(measured.per_second);
        cell.cpu_nanos.extend(measured.cpu_nanos);
        if let Some(contended) = measured.contention {
            cell.failed_swaps.push(contended.failed_swaps);
            cell.updates.push(contended.updates);
            cell.blocked.push(contended.blocked);
        }
    }

    /// The 1-thread median of `name` at `memory`, if 1 thread was run.
    fn single(&self, memory: &str, name: &str) -> Option<f64> {
        let row = self
            .rows
            .iter()
            .find(|row| row.memory == memory && row.threads == 1)?;
        median(&row.cells.iter().find(|cell| cell.name == name)?.per_second)
    }

    /// The header and one line a row, as figures: M events/s and scaling (or, on CPU,
    /// nanoseconds per event), ratios to pingora and (counted builds) failed swaps and updates
    /// per event; `None` where there is no figure.
    fn figures(&self) -> (Vec<String>, Vec<Line>) {
        let Some(first) = self.rows.first() else {
            return (Vec::new(), Vec::new());
        };
        let names: Vec<(&str, bool)> = first
            .cells
            .iter()
            .map(|c| (c.name.as_str(), c.ours))
            .collect();
        let peer = names.iter().find(|(_, ours)| !ours).map(|(name, _)| *name);
        let mut header = vec!["memory".to_owned(), "threads".to_owned()];
        for (name, _) in &names {
            if self.on_cpu {
                header.push(format!("{name} ns/event"));
            } else {
                header.push(format!("{name} M/s"));
                header.push("x 1 thread".to_owned());
            }
        }
        if let Some(peer) = peer {
            for (name, _) in names.iter().filter(|(_, ours)| *ours) {
                header.push(format!("{name} / {peer}"));
            }
        }
        let counted = first.cells.iter().any(|cell| !cell.failed_swaps.is_empty());
        if counted {
            for (name, _) in names.iter().filter(|(_, ours)| *ours) {
                header.push(format!("{name} {SWAPS}"));
            }
            for (name, _) in names.iter().filter(|(_, ours)| *ours) {
                header.push(format!("{name} {UPDATES}"));
            }
            for (name, _) in names.iter().filter(|(_, ours)| *ours) {
                header.push(format!("{name} {BLOCKED}"));
            }
        }
        let rows = self
            .rows
            .iter()
            .map(|row| {
                let rate = |name: &str| {
                    median(&row.cells.iter().find(|cell| cell.name == name)?.per_second)
                };
                let nanos = |name: &str| {
                    median(&row.cells.iter().find(|cell| cell.name == name)?.cpu_nanos)
                };
                let mut line = Vec::new();
                for (name, _) in &names {
                    if self.on_cpu {
                        line.push(nanos(name));
                        continue;
                    }
                    let own = rate(name);
                    line.push(own.map(|own| own / 1e6));
                    let single = self.single(&row.memory, name);
                    line.push(own.zip(single).map(|(own, single)| own / single));
                }
                if let Some(peer) = peer {
                    for (name, _) in names.iter().filter(|(_, ours)| *ours) {
                        line.push(if self.on_cpu {
                            nanos(name).zip(nanos(peer)).map(|(ours, peer)| peer / ours)
                        } else {
                            rate(name).zip(rate(peer)).map(|(ours, peer)| ours / peer)
                        });
                    }
                }
                if counted {
                    for cell in row.cells.iter().filter(|cell| cell.ours) {
                        line.push(median(&cell.failed_swaps));
                    }
                    for cell in row.cells.iter().filter(|cell| cell.ours) {
                        line.push(median(&cell.updates));
                    }
                    for cell in row.cells.iter().filter(|cell| cell.ours) {
                        line.push(median(&cell.blocked));
                    }
                }
                (row.memory.clone(), row.threads, line)
            })
            .collect();
        (header, rows)
    }

    /// The table as aligned text under its title.
    pub(crate) fn text(&self) -> String {
        let (header, rows) = self.figures();
        // Failed swaps, updates and blocked updates per event are fractions of one: four
        // decimals.
        let swaps: Vec<bool> = header
            .iter()
            .skip(2)
            .map(|name| {
                [SWAPS, UPDATES, BLOCKED]
                    .iter()
                    .any(|end| name.ends_with(end))
            })
            .collect();
        let mut cells = vec![header];
        for (memory, threads, line) in rows {
            let mut row = vec![memory, threads.to_string()];
            row.extend(line.into_iter().zip(&swaps).map(|(figure, &swaps)| {
                figure.map_or_else(
                    || "-".to_owned(),
                    |f| if swaps { format!("{f:.4}") } else { number(f) },
                )
            }));
            cells.push(row);
        }
        format!("{}\n{}", self.title, render(&cells))
    }

    /// The same rows as CSV lines, the workload first, unrounded; `header` adds the header.
    pub(crate) fn csv(&self, header: bool) -> String {
        let (names, rows) = self.figures();
        let mut out = String::new();
        if header {
            let _ = writeln!(out, "workload,{}", names.join(","));
        }
        for (memory, threads, line) in rows {
            let figures: Vec<String> = line
                .into_iter()
                .map(|figure| figure.map_or_else(String::new, |f| format!("{f}")))
                .collect();
            let _ = writeln!(
                out,
                "{},{memory},{threads},{}",
                self.title.split(':').next().unwrap_or_default(),
                figures.join(",")
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::Contended;

    fn measured(per_second: f64) -> Measured {
        Measured {
            per_second,
            cpu_nanos: None,
            contention: None,
        }
    }

    #[test]
    fn medians_scaling_and_ratios() {
        let mut table = Table::new("shared: test".to_owned());
        for (threads, ours, peer) in [(1, [4e6, 2e6, 3e6], 1e6), (2, [6e6, 6e6, 6e6], 4e6)] {
            for value in ours {
                table.record("2MiB", threads, "tollgate", true, &measured(value));
            }
            table.record("2MiB", threads, "pingora", false, &measured(peer));
        }
        let (header, rows) = table.figures();
        assert_eq!(
            header,
            [
                "memory",
                "threads",
                "tollgate M/s",
                "x 1 thread",
                "pingora M/s",
                "x 1 thread",
                "tollgate / pingora"
            ]
        );
        assert_eq!(
            rows[0].2,
            [Some(3.0), Some(1.0), Some(1.0), Some(1.0), Some(3.0)]
        );
        assert_eq!(
            rows[1].2,
            [Some(6.0), Some(2.0), Some(4.0), Some(4.0), Some(1.5)]
        );
        assert!(table.csv(true).starts_with("workload,memory,threads,"));
        assert_eq!(
            table.csv(false),
            "shared,2MiB,1,3,1,1,1,3\nshared,2MiB,2,6,2,4,4,1.5\n"
        );
    }

    #[test]
    fn on_cpu_nanoseconds_and_speed_against_pingora() {
        let mut table = Table::on_cpu("floor: test".to_owned());
        for (name, ours, nanos) in [
            ("observe", true, [120.0, 100.0, 110.0]),
            ("pingora", false, [300.0, 330.0, 360.0]),
        ] {
            for nanos in nanos {
                let measured = Measured {
                    per_second: 1e9 / nanos,
                    cpu_nanos: Some(nanos),
                    contention: None,
                };
                table.record("2MiB", 1, name, ours, &measured);
            }
        }
        let (header, rows) = table.figures();
        assert_eq!(
            header,
            [
                "memory",
                "threads",
                "observe ns/event",
                "pingora ns/event",
                "observe / pingora"
            ]
        );
        assert_eq!(rows[0].2, [Some(110.0), Some(330.0), Some(3.0)]);
    }

    #[test]
    fn counted_runs_add_failed_swaps_and_updates() {
        let mut table = Table::new("shared: test".to_owned());
        let counted = Measured {
            per_second: 2e6,
            cpu_nanos: None,
            contention: Some(Contended {
                failed_swaps: 0.25,
                updates: 0.5,
                blocked: 0.125,
            }),
        };
        table.record("2MiB", 2, "tollgate", true, &counted);
        table.record("2MiB", 2, "pingora", false, &measured(1e6));
        let (header, rows) = table.figures();
        assert_eq!(
            header[header.len() - 3..],
            [
                format!("tollgate {SWAPS}"),
                format!("tollgate {UPDATES}"),
                format!("tollgate {BLOCKED}")
            ]
        );
        assert_eq!(
            rows[0].2[rows[0].2.len() - 3..],
            [Some(0.25), Some(0.5), Some(0.125)]
        );
        let text = table.text();
        assert!(text.contains("0.2500") && text.contains("0.1250"));
    }
}
