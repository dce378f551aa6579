//! Command-line arguments, parsed by hand: `[a|b|c|d|e|all] [--quick] [--csv FILE]`.

use std::fmt;
use std::path::PathBuf;

/// Printed with every usage error.
pub(crate) const USAGE: &str = "usage: accuracy [a|b|c|d|e|all] [--quick] [--csv FILE]";

/// The workloads, by the letter that selects them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Workload {
    /// a: Zipf traffic in one window.
    Skew,
    /// b: one-event sources flooding around steady ones.
    Flood,
    /// c: a source pulsing across a window boundary.
    Pulse,
    /// d: 100M distinct keys.
    Cardinality,
    /// e: descriptor limits at 10M API keys.
    Descriptors,
}

impl Workload {
    const ALL: [Workload; 5] = [
        Workload::Skew,
        Workload::Flood,
        Workload::Pulse,
        Workload::Cardinality,
        Workload::Descriptors,
    ];

    /// The letter that selects it on the command line.
    pub(crate) fn letter(self) -> &'static str {
        match self {
            Workload::Skew => "a",
            Workload::Flood => "b",
            Workload::Pulse => "c",
            Workload::Cardinality => "d",
            Workload::Descriptors => "e",
        }
    }
}

/// How much of each workload to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Scale {
    divisor: usize,
}

impl Scale {
    /// The sizes the tables are quoted at.
    pub(crate) const FULL: Scale = Scale { divisor: 1 };
    /// Event and key counts divided by 100, for a smoke test.
    pub(crate) const QUICK: Scale = Scale { divisor: 100 };

    /// `count` at this scale, at least 1.
    pub(crate) fn of(self, count: usize) -> usize {
        (count / self.divisor).max(1)
    }

    pub(crate) fn is_quick(self) -> bool {
        self != Scale::FULL
    }
}

/// What to run.
#[derive(Debug)]
pub(crate) struct Options {
    pub(crate) workloads: Vec<Workload>,
    pub(crate) scale: Scale,
    pub(crate) csv: Option<PathBuf>,
}

/// An argument the tool does not understand.
#[derive(Debug)]
pub(crate) struct UsageError(String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Parses the arguments after the program name. No workload named means all of them.
pub(crate) fn parse(args: &[String]) -> Result<Options, UsageError> {
    let mut workloads = Vec::new();
    let mut scale = Scale::FULL;
    let mut csv = None;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => scale = Scale::QUICK,
            "--csv" => match args.next() {
                Some(path) => csv = Some(PathBuf::from(path)),
                None => return Err(UsageError("--csv needs a file name".into())),
            },
            "all" => Workload::ALL.iter().for_each(|&w| add(&mut workloads, w)),
            letter => match Workload::ALL.iter().find(|w| w.letter() == letter) {
                Some(&workload) => add(&mut workloads, workload),
                None => return Err(UsageError(format!("unknown argument `{letter}`"))),
            },
        }
    }
    if workloads.is_empty() {
        workloads.extend(Workload::ALL);
    }
    Ok(Options {
        workloads,
        scale,
        csv,
    })
}

/// Adds `workload` unless it is already chosen, so each runs once, in the order first named.
fn add(workloads: &mut Vec<Workload>, workload: Workload) {
    if !workloads.contains(&workload) {
        workloads.push(workload);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn parses_workloads_and_flags() {
        let all = parse(&args("")).unwrap();
        assert_eq!(all.workloads, Workload::ALL);
        assert_eq!(all.scale, Scale::FULL);
        let some = parse(&args("b --quick d --csv out.csv")).unwrap();
        assert_eq!(some.workloads, [Workload::Flood, Workload::Cardinality]);
        assert!(some.scale.is_quick());
        assert_eq!(some.csv, Some(PathBuf::from("out.csv")));
        assert_eq!(
            parse(&args("c all c")).unwrap().workloads,
            [
                Workload::Pulse,
                Workload::Skew,
                Workload::Flood,
                Workload::Cardinality,
                Workload::Descriptors
            ]
        );
        assert!(parse(&args("f")).is_err());
        assert!(parse(&args("--csv")).is_err());
    }

    #[test]
    fn quick_scales_down_but_never_to_zero() {
        assert_eq!(Scale::QUICK.of(10_000_000), 100_000);
        assert_eq!(Scale::QUICK.of(50), 1);
        assert_eq!(Scale::FULL.of(50), 50);
    }
}
