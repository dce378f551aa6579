//! (d) 100M distinct keys into 8 MiB: memory stays fixed, and the error stays what the sketch
//! says it is; for the sketch with its Bloom front and without.
//!
//! Key `i` is `scramble(i)` for `i` in `0..100M`, one event each, all in one window (an hour
//! long; the events are a nanosecond apart). `scramble` is a bijection, so every key is
//! distinct and its true count is exactly 1, and `scramble(i)` for `i >= 100M` is a key never
//! seen (true count 0): no oracle table is needed.
//!
//! Scored:
//! - memory: `memory_bytes()` before and after, and the process's resident memory (`VmRSS`)
//!   before building, after building and after the events. The sketch's pages are zeroed at
//!   build; the events must not add any.
//! - overcount: for a sample of 100k keys, half seen (random `i < 100M`) and half never seen,
//!   `estimate - true count`: mean, 99th percentile, max, and the share above the bound the
//!   sketch states (`stats(now).overcount_bound`), which should be at most `1 - confidence`.
//!   An estimate below the true count would be a bug, and is counted.

use std::error::Error;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use tollgate_sketch::Tick;

use crate::cli::{Scale, Workload};
use crate::limiter::Limiter;
use crate::ours::{Front, Ours};
use crate::peer::MIB;
use crate::report::{Report, Table, mib, progress, status};
use crate::rss::resident_bytes;
use crate::workload::scramble;

const KEYS: usize = 100_000_000;
const BUDGET: usize = 8 * MIB;
const WINDOW: Duration = Duration::from_secs(3600);
/// Sampled keys, half seen and half never seen.
const SAMPLE: usize = 100_000;
const SEED: u64 = 0xd;

/// `estimate - true count` over a group of sampled keys.
#[derive(Debug)]
struct Overcounts {
    sorted: Vec<i64>,
}

impl Overcounts {
    fn new(mut overcounts: Vec<i64>) -> Overcounts {
        overcounts.sort_unstable();
        Overcounts { sorted: overcounts }
    }

    fn mean(&self) -> f64 {
        self.sorted.iter().sum::<i64>() as f64 / self.sorted.len().max(1) as f64
    }

    /// The smallest value at or above a `q` share of the sample.
    fn quantile(&self, q: f64) -> i64 {
        let rank = (q * self.sorted.len() as f64).ceil() as usize;
        self.sorted
            .get(rank.saturating_sub(1))
            .copied()
            .unwrap_or(0)
    }

    fn count_above(&self, bound: i64) -> usize {
        self.sorted.len() - self.sorted.partition_point(|&x| x <= bound)
    }

    fn count_below_zero(&self) -> usize {
        self.sorted.partition_point(|&x| x < 0)
    }
}

/// Runs the workload for the sketch with its front and for the plain sketch: with room in the
/// front (the 1/100 scale) the front keeps one-event keys out of the counters; at full scale
/// it is saturated.
pub(crate) fn run(scale: Scale, report: &mut Report) -> Result<(), Box<dyn Error>> {
    for front in [Front::Default, Front::Plain] {
        run_variant(scale, report, front)?;
    }
    Ok(())
}

fn run_variant(scale: Scale, report: &mut Report, front: Front) -> Result<(), Box<dyn Error>> {
    let keys = scale.of(KEYS);
    let rss_start = resident_bytes()?;
    let mut ours = Ours::new(WINDOW, BUDGET, front)?;
    let held_built = ours.memory_bytes().unwrap_or(0);
    let rss_built = resident_bytes()?;
    let started = Instant::now();
    for i in 0..keys as u64 {
        ours.observe(scramble(i), i);
    }
    let elapsed = started.elapsed();
    progress(
        Workload::Cardinality,
        &format!("{} with {keys} keys", ours.name()),
        started,
    );
    let held_after = ours.memory_bytes().unwrap_or(0);
    let rss_after = resident_bytes()?;
    let now = keys as u64;
    let sketch = ours.sketch().ok_or("our sketch exposes its statistics")?;
    let stats = sketch.stats(Tick::from_nanos(now));

    let mut memory = Table::new(
        Workload::Cardinality,
        format!(
            "{keys} distinct keys, one event each, into {} at {}: memory",
            ours.name(),
            mib(BUDGET)
        ),
        &["measure", "before build", "after build", "after the events"],
    );
    memory.row(vec![
        "memory_bytes()".into(),
        "-".into(),
        mib(held_built),
        mib(held_after),
    ]);
    memory.row(vec![
        "VmRSS".into(),
        mib(rss_start),
        mib(rss_built),
        mib(rss_after),
    ]);
    memory.note(format!(
        "memory_bytes unchanged: {}; resident memory grew by {} during the events; {:.1} ns per observe",
        status(held_built == held_after),
        mib(rss_after.saturating_sub(rss_built)),
        elapsed.as_nanos() as f64 / keys as f64,
    ));
    memory.note(
        "VmRSS is the whole process's: after other workloads it includes heap they freed; run `d` \
         alone for a clean before and after",
    );
    report.add(memory);

    let (seen, unseen) = sample(&ours, keys, scale.of(SAMPLE), now);
    let all = Overcounts::new(seen.sorted.iter().chain(&unseen.sorted).copied().collect());
    let bound = i64::try_from(stats.overcount_bound).unwrap_or(i64::MAX);
    let mut table = Table::new(
        Workload::Cardinality,
        format!(
            "{keys} distinct keys into {} at {}: overcount (estimate - true count) of sampled keys",
            ours.name(),
            mib(BUDGET)
        ),
        &[
            "keys",
            "sampled",
            "mean",
            "p50",
            "p99",
            "max",
            "above bound",
            "share",
            "below truth",
        ],
    );
    for (name, group) in [
        ("seen (true 1)", &seen),
        ("never seen (true 0)", &unseen),
        ("all", &all),
    ] {
        report.require(
            group.count_below_zero() == 0,
            format!(
                "(d) {name}: {} sampled keys read below their true count",
                group.count_below_zero()
            ),
        );
        let above = group.count_above(bound);
        table.row(vec![
            name.into(),
            group.sorted.len().to_string(),
            format!("{:.2}", group.mean()),
            group.quantile(0.5).to_string(),
            group.quantile(0.99).to_string(),
            group.quantile(1.0).to_string(),
            above.to_string(),
            format!(
                "{:.4}%",
                100.0 * above as f64 / group.sorted.len().max(1) as f64
            ),
            group.count_below_zero().to_string(),
        ]);
    }
    let allowed = 1.0 - stats.confidence;
    let share_above = all.count_above(bound) as f64 / all.sorted.len().max(1) as f64;
    table.note(format!(
        "stated by stats(now): overcount_bound {} with confidence {:.4}; events {}; front fill {:.3} \
         (false-positive rate {:.3}); width {} x depth {}",
        stats.overcount_bound,
        stats.confidence,
        stats.events_current,
        stats.front_fill,
        stats.front_false_positive_rate,
        sketch.width(),
        sketch.depth(),
    ));
    table.note(format!(
        "goal: share of sampled keys above the stated bound <= 1 - confidence = {:.4}%: {} ({:.4}%)",
        100.0 * allowed,
        status(share_above <= allowed),
        100.0 * share_above
    ));
    report.require(
        share_above <= allowed,
        format!(
            "(d) {:.4}% of sampled keys above the stated overcount bound {}, more than 1 - \
             confidence = {:.4}%",
            100.0 * share_above,
            stats.overcount_bound,
            100.0 * allowed
        ),
    );
    report.add(table);
    Ok(())
}

/// Overcounts of `sample / 2` seen keys and `sample / 2` never-seen keys, drawn at random.
fn sample(ours: &Ours, keys: usize, sample: usize, now: u64) -> (Overcounts, Overcounts) {
    let mut rng = SmallRng::seed_from_u64(SEED);
    let keys = keys as u64;
    let half = (sample / 2).max(1);
    let overcount = |i: u64, truth: i64| ours.estimate(scramble(i), now) as i64 - truth;
    let seen = (0..half)
        .map(|_| overcount(rng.random_range(0..keys), 1))
        .collect();
    let unseen = (0..half)
        .map(|_| overcount(keys + rng.random_range(0..u64::from(u32::MAX)), 0))
        .collect();
    (Overcounts::new(seen), Overcounts::new(unseen))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overcounts_summarise_the_sample() {
        let overcounts = Overcounts::new((1..=100).rev().collect());
        assert_eq!(overcounts.mean(), 50.5);
        assert_eq!(overcounts.quantile(0.5), 50);
        assert_eq!(overcounts.quantile(0.99), 99);
        assert_eq!(overcounts.quantile(1.0), 100);
        assert_eq!(overcounts.count_above(98), 2);
        assert_eq!(overcounts.count_below_zero(), 0);
        assert_eq!(Overcounts::new(vec![-1, 0]).count_below_zero(), 1);
    }
}
