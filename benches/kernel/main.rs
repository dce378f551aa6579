//! How fast the kernel fast path loads its sets: one `nft -f -` transaction of N elements into
//! the proxy's own table, timed, in a network namespace this tool makes for itself (so the
//! host's ruleset is never touched). Needs root, `unshare` and `nft`.
//!
//! ```text
//! cargo run -p tollgate-benches --bin kernel -- [ELEMENTS] [ROUNDS]
//! ```
//!
//! For each kind of element (single addresses into the hash set, /24 prefixes into the
//! interval set), each round creates the table afresh and times one transaction adding
//! ELEMENTS (default 100000) of them, then one more with a single element into the loaded set
//! (the cost of a typical update). Medians over ROUNDS (default 5).

use std::error::Error;
use std::net::{IpAddr, Ipv4Addr};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use tollgate::config::KernelConfig;
use tollgate::kernel::{Element, Ruleset, Table};

/// Set in the copy of this tool that runs inside the namespace.
const INSIDE: &str = "TOLLGATE_KERNEL_BENCH_NETNS";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = if std::env::var_os(INSIDE).is_some() {
        measure(&args)
    } else {
        reexec(&args)
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

fn reexec(args: &[String]) -> Result<(), Box<dyn Error>> {
    let status = Command::new("unshare")
        .arg("-n")
        .arg(std::env::current_exe()?)
        .args(args)
        .env(INSIDE, "1")
        .status()
        .map_err(|e| format!("cannot run unshare (util-linux): {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(
            format!("the measurement in the namespace failed: {status} (root and nft needed)")
                .into(),
        )
    }
}

fn measure(args: &[String]) -> Result<(), Box<dyn Error>> {
    let count: usize = args.first().map_or(Ok(100_000), |a| a.parse())?;
    let rounds: usize = args.get(1).map_or(Ok(5), |a| a.parse())?;
    let config = KernelConfig {
        max_elements: count + 1,
        ..KernelConfig::default()
    };
    println!(
        "{count} elements in one transaction, median of {rounds} rounds (nft {})",
        nft_version()
    );
    println!(
        "{:<28} {:>14} {:>22}",
        "set", "load (ms)", "one more after (ms)"
    );
    for (name, len) in [("v4_hosts (hash, /32)", 32u8), ("v4 (interval, /24)", 24)] {
        let mut loads = Vec::new();
        let mut singles = Vec::new();
        for _ in 0..rounds {
            let table = Table::create(Ruleset::new(
                &config,
                ["0.0.0.0:8080".parse()?],
                ["0.0.0.0:5353".parse()?],
            ))?;
            let elements: Vec<Element> = (0..count).map(|i| element(i, len)).collect();
            let text = table.ruleset().add(&elements, false);
            let started = Instant::now();
            table.apply(&text)?;
            loads.push(started.elapsed());
            let one = table.ruleset().add(&[element(count, len)], false);
            let started = Instant::now();
            table.apply(&one)?;
            singles.push(started.elapsed());
            table.delete()?;
        }
        println!(
            "{name:<28} {:>14.1} {:>22.2}",
            millis(median(&mut loads)),
            millis(median(&mut singles))
        );
    }
    Ok(())
}

/// The `i`th distinct network of prefix length `len` (24 or 32) in 10.0.0.0/8 and up.
fn element(i: usize, len: u8) -> Element {
    let i = u32::try_from(i).unwrap_or(u32::MAX);
    let base = u32::from(Ipv4Addr::new(10, 0, 0, 0));
    let address = if len == 32 { base + i } else { base + (i << 8) };
    Element {
        network: IpAddr::V4(Ipv4Addr::from(address)),
        len,
        timeout: Duration::from_secs(600),
        weight: 1.0,
    }
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn nft_version() -> String {
    Command::new("nft")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|_| "not found".to_owned())
}
