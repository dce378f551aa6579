//! (b) A random-source flood around steady clients: do real clients get throttled?
//!
//! Limit 100 per 10 s window. In each of 3 windows, 10M one-event sources (random keys, never
//! repeated) are interleaved evenly with 10k steady sources that send 50 events each (half the
//! limit), each steady source's events evenly spaced over the window. The exact sliding count
//! of a steady source never exceeds about 51, and a one-event source's is 1, so every event
//! judged over the limit is a mistake; the exact oracle run on the steady events confirms it.
//!
//! Scored: the share of the steady sources' events judged over the limit, in window 1 (no
//! previous window yet) and in windows 2-3 (a full previous window in the sliding estimate,
//! the steady state; the headline). Our sketch also reports its own `stats` at the end of the
//! last window: the front's fill and the overcount bound it states.
//!
//! Goals: under 0.1% at 4 MiB for our sketch with its front, and the front at least as good as
//! the plain sketch at every size.

use std::error::Error;
use std::time::{Duration, Instant};

use tollgate_sketch::Tick;

use crate::cli::{Scale, Workload};
use crate::limiter::{Event, Limiter, replay, spread};
use crate::oracle::Exact;
use crate::peer::{MIB, Peer};
use crate::pingora;
use crate::report::{Report, Table, memory, percent, progress, status};
use crate::workload::{distinct_stream, scramble};

const WINDOW: Duration = Duration::from_secs(10);
const LIMIT: u64 = 100;
const WINDOWS: u64 = 3;
const ONE_SHOT_PER_WINDOW: usize = 10_000_000;
const STEADY_SOURCES: usize = 10_000;
/// Each steady source's events per window: half the limit.
const STEADY_EVENTS: usize = LIMIT as usize / 2;
const SEED: u64 = 0xb;
/// The goal's bound on the steady events throttled at the smallest budget (0.1%).
const GOAL_THROTTLED_SHARE: f64 = 0.001;
/// The budgets, smallest first: the goal is about the first.
const BUDGETS: [usize; 3] = [4 * MIB, 8 * MIB, 16 * MIB];
const PEERS: [Peer; 3] = [Peer::Front, Peer::Plain, Peer::Pingora];

/// Who sent an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    Steady,
    OneShot,
}

/// The workload's sizes at a scale.
#[derive(Clone, Copy, Debug)]
struct Flood {
    one_shot: usize,
    steady_sources: usize,
}

impl Flood {
    fn new(scale: Scale) -> Flood {
        Flood {
            one_shot: scale.of(ONE_SHOT_PER_WINDOW),
            steady_sources: scale.of(STEADY_SOURCES),
        }
    }

    fn steady_per_window(self) -> usize {
        self.steady_sources * STEADY_EVENTS
    }

    /// All windows' events in time order. In each window, `n` events sit at evenly spaced
    /// times and the steady ones are spread among them evenly (slot `s` is steady when
    /// `floor(s * m / n)` steps up), so steady event `j` of the window, from source
    /// `j % sources`, comes a `1 / STEADY_EVENTS` of a window after the same source's last.
    fn events(self) -> impl Iterator<Item = Event<Source>> {
        let window = WINDOW.as_nanos() as u64;
        let m = self.steady_per_window();
        let n = self.one_shot + m;
        (0..WINDOWS).flat_map(move |w| {
            let one_shot_keys = distinct_stream(self.one_shot, SEED + w);
            (0..n).map(move |s| {
                let steady_before = s * m / n;
                let at = spread(w * window, window, s, n);
                if (s + 1) * m / n > steady_before {
                    let source = steady_before % self.steady_sources;
                    Event {
                        key: scramble(source as u64),
                        at,
                        tag: Source::Steady,
                    }
                } else {
                    Event {
                        key: one_shot_keys[s - steady_before],
                        at,
                        tag: Source::OneShot,
                    }
                }
            })
        })
    }
}

/// What happened to the steady sources' events under one limiter.
#[derive(Debug, Default)]
struct Score {
    /// Per window: steady events, and those judged over.
    steady: [u64; WINDOWS as usize],
    throttled: [u64; WINDOWS as usize],
    /// Over the scored windows (2 and 3): the sum and the largest of the steady estimates.
    estimate_sum: u64,
    estimate_max: u64,
}

impl Score {
    fn scored_steady(&self) -> u64 {
        self.steady[1..].iter().sum()
    }

    fn scored_throttled(&self) -> u64 {
        self.throttled[1..].iter().sum()
    }

    /// The share of the scored windows' steady events throttled.
    fn share(&self) -> f64 {
        self.scored_throttled() as f64 / self.scored_steady().max(1) as f64
    }
}

pub(crate) fn run(scale: Scale, report: &mut Report) -> Result<(), Box<dyn Error>> {
    let flood = Flood::new(scale);
    let window = WINDOW.as_nanos() as u64;
    let end = Tick::from_nanos(WINDOWS * window - 1);
    let mut table = Table::new(
        Workload::Flood,
        format!(
            "flood: {} one-event sources + {} steady sources x {STEADY_EVENTS} events per window, \
             {WINDOWS} windows, limit {LIMIT} per {}s",
            flood.one_shot,
            flood.steady_sources,
            WINDOW.as_secs()
        ),
        &[
            "limiter",
            "budget",
            "held",
            "steady throttled, w1",
            "steady throttled, w2-3",
            "% w2-3",
            "steady est. mean",
            "steady est. max",
            "front fill",
            "overcount bound",
        ],
    );
    let mut results = Vec::new();
    for budget in BUDGETS {
        for peer in PEERS {
            let mut limiter = peer.build(WINDOW, budget)?;
            let started = Instant::now();
            let score = score(limiter.as_mut(), flood);
            let what = format!("{} at {}", limiter.name(), memory(Some(budget)));
            progress(Workload::Flood, &what, started);
            let stats = limiter.sketch().map(|sketch| sketch.stats(end));
            table.row(vec![
                limiter.name(),
                memory(Some(budget)),
                memory(limiter.memory_bytes()),
                format!("{} of {}", score.throttled[0], score.steady[0]),
                format!("{} of {}", score.scored_throttled(), score.scored_steady()),
                percent(score.scored_throttled(), score.scored_steady()),
                format!(
                    "{:.1}",
                    score.estimate_sum as f64 / score.scored_steady().max(1) as f64
                ),
                score.estimate_max.to_string(),
                stats
                    .as_ref()
                    .map_or("-".into(), |s| format!("{:.3}", s.front_fill)),
                stats
                    .as_ref()
                    .map_or("-".into(), |s| s.overcount_bound.to_string()),
            ]);
            results.push((peer, budget, score));
        }
    }
    let truly_over = steady_truly_over(flood);
    table.note(format!(
        "truth (exact oracle on the steady sources): {truly_over} of their events over the limit; \
         scored: windows 2-3 (w1 has no previous window); front fill and overcount bound: the \
         sketch's stats() at the end of window {WINDOWS}"
    ));
    table.note(pingora::UNSEEDED);
    let share_of = |peer, budget| {
        results
            .iter()
            .find(|(p, b, _)| *p == peer && *b == budget)
            .map_or(f64::NAN, |(_, _, score)| score.share())
    };
    let smallest = share_of(Peer::Front, BUDGETS[0]);
    table.note(format!(
        "goal: tollgate (front) at {} throttles < 0.1% of steady events: {} ({:.4}%)",
        memory(Some(BUDGETS[0])),
        status(smallest < GOAL_THROTTLED_SHARE),
        100.0 * smallest
    ));
    let front_vs_plain: Vec<String> = BUDGETS
        .iter()
        .map(|&b| {
            let (front, plain) = (share_of(Peer::Front, b), share_of(Peer::Plain, b));
            format!(
                "{}: {} ({:.4}% vs {:.4}%)",
                memory(Some(b)),
                status(front <= plain),
                100.0 * front,
                100.0 * plain
            )
        })
        .collect();
    table.note(format!(
        "goal: front at least as good as plain at every size: {}",
        front_vs_plain.join(", ")
    ));
    report.add(table);
    Ok(())
}

/// Replays the flood through `limiter`, scoring the steady sources' events.
fn score(limiter: &mut dyn Limiter, flood: Flood) -> Score {
    let window = WINDOW.as_nanos() as u64;
    let mut score = Score::default();
    replay(limiter, LIMIT, flood.events(), |event, verdict| {
        if event.tag != Source::Steady {
            return;
        }
        let w = (event.at / window) as usize;
        score.steady[w] += 1;
        score.throttled[w] += u64::from(verdict.over);
        if w > 0 {
            score.estimate_sum += verdict.estimate;
            score.estimate_max = score.estimate_max.max(verdict.estimate);
        }
    });
    score
}

/// The steady events the exact oracle judges over the limit. Exact counts are per key, so
/// the steady sources' events alone give their exact verdicts.
fn steady_truly_over(flood: Flood) -> u64 {
    let mut over = 0;
    let steady = flood.events().filter(|e| e.tag == Source::Steady);
    replay(
        &mut Exact::sliding(WINDOW.as_nanos() as u64),
        LIMIT,
        steady,
        |_, verdict| over += u64::from(verdict.over),
    );
    over
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_window_holds_the_steady_events_evenly_and_fresh_one_shot_keys() {
        let flood = Flood {
            one_shot: 1_000,
            steady_sources: 10,
        };
        let window = WINDOW.as_nanos() as u64;
        let events: Vec<Event<Source>> = flood.events().collect();
        assert_eq!(events.len(), 3 * (1_000 + 10 * STEADY_EVENTS));
        assert!(events.windows(2).all(|pair| pair[0].at <= pair[1].at));
        assert!(events.last().is_some_and(|e| e.at < WINDOWS * window));
        let mut one_shot: Vec<u64> = events
            .iter()
            .filter(|e| e.tag == Source::OneShot)
            .map(|e| e.key)
            .collect();
        one_shot.sort_unstable();
        one_shot.dedup();
        assert_eq!(one_shot.len(), 3 * 1_000);
        // Each steady source: STEADY_EVENTS per window, a 1/STEADY_EVENTS of a window apart.
        let first: Vec<u64> = events
            .iter()
            .filter(|e| e.tag == Source::Steady && e.key == scramble(3))
            .map(|e| e.at)
            .collect();
        assert_eq!(first.len(), 3 * STEADY_EVENTS);
        let gap = window / STEADY_EVENTS as u64;
        for pair in first.windows(2) {
            assert!(pair[1] - pair[0] >= gap - 2 && pair[1] - pair[0] <= gap + 2);
        }
    }
}
