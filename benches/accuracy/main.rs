//! The accuracy tool: how often each limiter throttles what it should not, and lets through
//! what it should throttle, on five workloads.
//!
//! ```text
//! cargo run --release -p tollgate-benches --bin accuracy -- [a|b|c|d|e|all] [--quick] [--csv FILE]
//! ```
//!
//! Every limiter is judged by one rule ([`limiter`]): with a limit `L` per window `T`, an event
//! is over the limit when the limiter's sliding-window estimate including it exceeds `L`. The
//! truth is an exact per-key counter with the same interpolation ([`oracle`]). The workloads:
//!
//! - **a** ([`skew`]): 10M Zipf(1.1) events over 1M keys in one window. Light keys wrongly
//!   judged over, and events wrongly judged over.
//! - **b** ([`flood`]): 10M one-event sources per window around 10k steady sources at half the
//!   limit. The share of the steady sources' events throttled.
//! - **c** ([`pulse`]): a source bursting at the end of one window and the start of the next.
//!   What the sliding estimate catches and a fixed window misses.
//! - **d** ([`cardinality`]): 100M distinct keys into 8 MiB. Memory stays put, and the
//!   overcount the sketch states holds.
//! - **e** ([`descriptors`]): the rate-limit service's descriptor policy at 10M API keys in its
//!   default 64 MiB. No request under its limits refused, and no key let through past its
//!   limit in a sliding window (both checked against exact sliding counters).
//!
//! The peers are our sketch with its Bloom front, our sketch without it, and pingora-limits'
//! `Rate`, simulated on the same clock ([`pingora`]), all at equal memory. `--quick` divides
//! event and key counts by 100 for a smoke test; `--csv FILE` also writes every table cell as
//! one `workload,configuration,metric,value` line.
//!
//! Goals are printed as met or MISSED. Guarantees (our sketch never below the exact count; no
//! more sampled keys above the stated overcount bound than its confidence allows) are checked
//! too, and a broken one makes the tool exit non-zero: CI runs it.

mod cardinality;
mod cli;
mod descriptors;
mod flood;
mod limiter;
mod oracle;
mod ours;
mod peer;
mod pingora;
mod pulse;
mod report;
mod rss;
mod skew;
#[path = "../workload.rs"]
mod workload;

use std::error::Error;
use std::process::ExitCode;

use tollgate_benches::exit::exit_code;

use cli::{Options, Workload};
use report::Report;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let options = match cli::parse(&args) {
        Ok(options) => options,
        Err(err) => {
            eprintln!("error: {err}\n{}", cli::USAGE);
            return ExitCode::from(2);
        }
    };
    exit_code(run(&args, &options))
}

/// Runs the chosen workloads in order, printing each table as it completes.
fn run(args: &[String], options: &Options) -> Result<(), Box<dyn Error>> {
    println!("command: {}", report::command(args));
    let mut report = Report::new(options.scale);
    for workload in &options.workloads {
        match workload {
            Workload::Skew => skew::run(options.scale, &mut report)?,
            Workload::Flood => flood::run(options.scale, &mut report)?,
            Workload::Pulse => pulse::run(&mut report)?,
            Workload::Cardinality => cardinality::run(options.scale, &mut report)?,
            Workload::Descriptors => descriptors::run(options.scale, &mut report)?,
        }
    }
    if let Some(path) = &options.csv {
        report.write_csv(path)?;
        println!("wrote {}", path.display());
    }
    match report.broken() {
        [] => Ok(()),
        broken => Err(format!(
            "{} guarantee(s) broken: {}",
            broken.len(),
            broken.join("; ")
        )
        .into()),
    }
}
