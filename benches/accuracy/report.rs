//! Tables: printed as each workload finishes, kept for the CSV file.
//!
//! Each table names the command that reproduces it. The CSV holds one line per table cell,
//! `workload,configuration,metric,value` (the configuration is a row's first cell, the metric
//! its column), so every workload's results fit one file and one plotting script.

use std::fmt::Write as _;
use std::io;
use std::path::Path;
use std::time::Instant;

use crate::cli::{Scale, Workload};

/// How to run the tool from the workspace root.
const CARGO_RUN: &str = "cargo run --release -p tollgate-benches --bin accuracy --";

/// The command that runs the tool with `args`.
pub(crate) fn command(args: &[String]) -> String {
    std::iter::once(CARGO_RUN)
        .chain(args.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(" ")
}

/// One table of results.
#[derive(Debug)]
pub(crate) struct Table {
    workload: Workload,
    title: String,
    columns: Vec<String>,
    rows: Vec<Vec<String>>,
    notes: Vec<String>,
}

impl Table {
    /// An empty table for `workload`; the first column names the configuration of each row.
    pub(crate) fn new(workload: Workload, title: impl Into<String>, columns: &[&str]) -> Table {
        Table {
            workload,
            title: title.into(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            rows: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Adds a row, one cell per column.
    pub(crate) fn row(&mut self, cells: Vec<String>) {
        assert_eq!(cells.len(), self.columns.len(), "one cell per column");
        self.rows.push(cells);
    }

    /// Adds a line printed under the table: a setting, a goal, an observation.
    pub(crate) fn note(&mut self, line: impl Into<String>) {
        self.notes.push(line.into());
    }

    /// The table as aligned text, under its title and command.
    fn render(&self, scale: Scale) -> String {
        let mut args = vec![self.workload.letter().to_string()];
        if scale.is_quick() {
            args.push("--quick".into());
        }
        let widths: Vec<usize> = (0..self.columns.len())
            .map(|c| {
                self.rows
                    .iter()
                    .map(|row| row[c].len())
                    .chain([self.columns[c].len()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |cells: &[String]| {
            let mut text = String::new();
            for (c, cell) in cells.iter().enumerate() {
                if c == 0 {
                    let _ = write!(text, "| {cell:<w$} ", w = widths[c]);
                } else {
                    let _ = write!(text, "| {cell:>w$} ", w = widths[c]);
                }
            }
            text + "|\n"
        };
        let rule = widths
            .iter()
            .fold(String::new(), |text, &w| text + "|" + &"-".repeat(w + 2))
            + "|\n";
        let mut out = format!(
            "\n## ({}) {}\n$ {}\n\n",
            self.workload.letter(),
            self.title,
            command(&args)
        );
        out += &line(&self.columns);
        out += &rule;
        for row in &self.rows {
            out += &line(row);
        }
        for note in &self.notes {
            out += &format!("{note}\n");
        }
        out
    }
}

/// Every table of the run, and every guarantee it found broken.
#[derive(Debug)]
pub(crate) struct Report {
    scale: Scale,
    tables: Vec<Table>,
    broken: Vec<String>,
}

impl Report {
    pub(crate) fn new(scale: Scale) -> Report {
        Report {
            scale,
            tables: Vec::new(),
            broken: Vec::new(),
        }
    }

    /// Records `what` as a broken guarantee unless `holds`. Guarantees are what the sketch
    /// promises (never below the truth; no more keys above the stated bound than its confidence
    /// allows), unlike goals, which are targets printed as met or MISSED: a broken guarantee
    /// makes the tool exit non-zero.
    pub(crate) fn require(&mut self, holds: bool, what: impl Into<String>) {
        if !holds {
            let what = what.into();
            println!("GUARANTEE BROKEN: {what}");
            self.broken.push(what);
        }
    }

    /// The guarantees found broken, in the order found.
    pub(crate) fn broken(&self) -> &[String] {
        &self.broken
    }

    /// Prints `table` and keeps it for the CSV file.
    pub(crate) fn add(&mut self, table: Table) {
        print!("{}", table.render(self.scale));
        self.tables.push(table);
    }

    /// Writes every cell as a `workload,configuration,metric,value` line.
    pub(crate) fn write_csv(&self, path: &Path) -> io::Result<()> {
        let mut out = String::from("workload,configuration,metric,value\n");
        for table in &self.tables {
            for row in &table.rows {
                for (column, value) in table.columns.iter().zip(row).skip(1) {
                    let fields = [table.workload.letter(), &row[0], column, value];
                    let quoted: Vec<String> = fields.iter().map(|f| csv_field(f)).collect();
                    out += &quoted.join(",");
                    out.push('\n');
                }
            }
        }
        std::fs::write(path, out)
    }
}

/// A CSV field, quoted when it has to be.
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

/// Tells stderr how long one run of `workload` took, so a long run shows it is moving.
pub(crate) fn progress(workload: Workload, what: &str, started: Instant) {
    eprintln!("({}) {what}: {:.1?}", workload.letter(), started.elapsed());
}

/// `part` as a percentage of `whole`, to four decimals.
pub(crate) fn percent(part: u64, whole: u64) -> String {
    format!("{:.4}%", 100.0 * part as f64 / whole.max(1) as f64)
}

/// A byte count in MiB, to two decimals.
pub(crate) fn mib(bytes: usize) -> String {
    format!("{:.2} MiB", bytes as f64 / f64::from(1 << 20))
}

/// A fixed memory size, or "grows" for counters that keep one entry per key.
pub(crate) fn memory(bytes: Option<usize>) -> String {
    bytes.map_or_else(|| "grows".into(), mib)
}

/// "met" or "MISSED", for goal lines.
pub(crate) fn status(met: bool) -> &'static str {
    if met { "met" } else { "MISSED" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_aligned_rows_under_the_command() {
        let mut table = Table::new(Workload::Pulse, "title", &["limiter", "n"]);
        table.row(vec!["a".into(), "1000".into()]);
        table.note("goal: none");
        let text = table.render(Scale::QUICK);
        let expected = "\n## (c) title\n\
             $ cargo run --release -p tollgate-benches --bin accuracy -- c --quick\n\n\
             | limiter |    n |\n|---------|------|\n| a       | 1000 |\ngoal: none\n";
        assert_eq!(text, expected);
    }

    #[test]
    fn quotes_csv_fields_only_when_needed() {
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }

    #[test]
    fn formats_shares_and_sizes() {
        assert_eq!(percent(1, 10_000), "0.0100%");
        assert_eq!(percent(0, 0), "0.0000%");
        assert_eq!(mib(2 << 20), "2.00 MiB");
        assert_eq!(memory(None), "grows");
    }
}
