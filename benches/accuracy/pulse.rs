//! (c) A source pulsing across a window boundary: what the sliding estimate is for.
//!
//! Limit 100 per 10 s window. One key sends 100 events spread over the last 1% of window 1
//! (9.9 s to 10 s into it) and 100 more over the first 1% of window 2. Within any 10 s it sent
//! 200, twice its limit, yet each fixed window holds only 100: a fixed-window counter throttles
//! nothing. The sliding estimate still carries about 99% of window 1 at the second burst, so
//! it throttles all of it.
//!
//! Scored: events of each burst judged over the limit, for the exact sliding oracle, our
//! sketch (with and without front), pingora's `Rate` and an exact fixed-window counter. The
//! key is alone, so the sketches count it exactly; what differs is only how each interpolates
//! and where its windows begin.
//!
//! Goal: our sketch throttles most (90% or more) of the second burst; the fixed window none.

use std::error::Error;
use std::time::Duration;

use crate::cli::Workload;
use crate::limiter::{Event, Limiter, replay, spread};
use crate::oracle::Exact;
use crate::peer::{MIB, Peer};
use crate::report::{Report, Table, memory, status};
use crate::workload::scramble;

const WINDOW: Duration = Duration::from_secs(10);
const LIMIT: u64 = 100;
/// Events per burst.
const BURST: usize = 100;
/// The window whose end the first burst falls in.
const FIRST_WINDOW: u64 = 1;
/// The budget of the fixed-memory limiters (a single key: size does not matter).
const BUDGET: usize = 2 * MIB;
/// The goal: our sketch throttles at least this many of the second burst.
const GOAL_THROTTLED: u64 = 90;

/// The two bursts' events; the tag is the burst, 0 or 1.
fn events() -> impl Iterator<Item = Event<usize>> {
    let window = WINDOW.as_nanos() as u64;
    let edge = window / 100;
    let boundary = (FIRST_WINDOW + 1) * window;
    let key = scramble(u64::MAX);
    [boundary - edge, boundary]
        .into_iter()
        .enumerate()
        .flat_map(move |(burst, start)| {
            (0..BURST).map(move |i| Event {
                key,
                at: spread(start, edge, i, BURST),
                tag: burst,
            })
        })
}

/// What one limiter did with the two bursts.
#[derive(Debug, Default)]
struct Bursts {
    /// Events judged over the limit, per burst.
    throttled: [u64; 2],
    /// The estimate of the second burst's first event.
    first_estimate: u64,
}

pub(crate) fn run(report: &mut Report) -> Result<(), Box<dyn Error>> {
    let window = WINDOW.as_nanos() as u64;
    let mut table = Table::new(
        Workload::Pulse,
        format!(
            "pulse: {BURST} events in the last 1% of window {} and {BURST} in the first 1% of the \
             next, limit {LIMIT} per {}s",
            FIRST_WINDOW + 1,
            WINDOW.as_secs()
        ),
        &[
            "limiter",
            "memory",
            "burst 1 throttled",
            "burst 2 throttled",
            "burst 2 first estimate",
        ],
    );
    let mut sliding: Vec<Box<dyn Limiter>> = vec![Box::new(Exact::sliding(window))];
    for peer in [Peer::Front, Peer::Plain, Peer::Capped, Peer::Pingora] {
        sliding.push(peer.build(WINDOW, BUDGET)?);
    }
    let mut ours_least = u64::MAX;
    let mut exact = None;
    for limiter in &mut sliding {
        let bursts = bursts(limiter.as_mut(), &mut table);
        if limiter.sketch().is_some() {
            ours_least = ours_least.min(bursts.throttled[1]);
        } else if exact.is_none() {
            exact = Some(bursts.throttled[1]);
        }
    }
    // The exact sliding count is the first row; every event it throttles, a sketch that never
    // underestimates throttles too.
    let exact = exact.unwrap_or(0);
    report.require(
        ours_least >= exact,
        format!(
            "(c) our sketch throttled {ours_least} of burst 2 where the exact sliding count \
             throttles {exact} (an underestimate)"
        ),
    );
    let fixed = bursts(&mut Exact::fixed(window), &mut table);
    table.note(
        "pingora's intervals begin at its first call after an interval has passed (here the first \
         burst), not at multiples of the window",
    );
    table.note(format!(
        "goal: tollgate throttles >= {GOAL_THROTTLED} of burst 2, the fixed window none: {} \
         (tollgate: {ours_least} at least, fixed window: {})",
        status(ours_least >= GOAL_THROTTLED && fixed.throttled[1] == 0),
        fixed.throttled[1]
    ));
    report.add(table);
    Ok(())
}

/// Replays the bursts through `limiter` and adds its row to `table`.
fn bursts(limiter: &mut dyn Limiter, table: &mut Table) -> Bursts {
    let mut bursts = Bursts::default();
    let mut first = true;
    replay(limiter, LIMIT, events(), |event, verdict| {
        bursts.throttled[event.tag] += u64::from(verdict.over);
        if event.tag == 1 && first {
            bursts.first_estimate = verdict.estimate;
            first = false;
        }
    });
    table.row(vec![
        limiter.name(),
        memory(limiter.memory_bytes()),
        format!("{} of {BURST}", bursts.throttled[0]),
        format!("{} of {BURST}", bursts.throttled[1]),
        bursts.first_estimate.to_string(),
    ]);
    bursts
}
