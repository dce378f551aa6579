//! A policy's counts taken out of it and put back into another: what a warm restart saves
//! and restores (the proxy's state file holds these values; this module knows no bytes).
//!
//! [`Policy::save`] exports, for each of the policy's sketches (one per limit period, two per
//! penalty length, and the sketches a reload retired but still reads), its current and
//! previous window ([`tollgate_sketch::RateSketch::export_window`]) with the sketch's shape,
//! hash seed included. The copy reads each counter with one relaxed load while deciding goes
//! on: each cell is a value it had during the save, and every event counted before the save
//! began is in it; events counted meanwhile may or may not be. Nothing waits for the save.
//!
//! [`Policy::restore`] builds a policy for a config from such a copy, the way a reload
//! succeeds a policy (see the `counter` module), taking the ticks to be the saved ones (the
//! proxy's clock resumes from the saved tick plus the wall-clock time the restart took):
//! - a saved sketch whose period (or penalty length) and memory share are those of a sketch
//!   the config needs is rebuilt with its seed and becomes that sketch, its windows added in;
//! - one whose period is still needed but whose share changed (`[sketch] memory`, a named
//!   period, a period added or removed) is rebuilt as it was and *retired*: counted into no
//!   more, read alongside the new sketch until its windows have slid out (three windows);
//! - one whose period no longer appears in the config is dropped, and so are windows older
//!   than the previous one at the restore's tick (a restart later than two periods restores
//!   nothing of that period: nothing stale is ever read as current).
//!
//! Keys carry the rule's name, period and prefix, so counts of rules kept are found again and
//! counts of rules removed are never read. Estimates after a restore never fall below what
//! the saved policy would have read at the same tick (plus the events since).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tollgate_sketch::{MergeError, RateSketch, Shape, Tick, WindowSnapshot};

use crate::budget::{self, Counts, Share};
use crate::config::Config;
use crate::counter::{Counter, Retired};
use crate::policy::{Policy, PolicyError};

/// What a saved sketch counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SavedKind {
    /// The events of every limit with its period.
    Limits,
    /// The marks of every penalty of its length (see the crate's `penalty` module).
    Penalties,
    /// As [`SavedKind::Penalties`], the sketch read at ticks shifted by half the length.
    ShiftedPenalties,
}

impl SavedKind {
    fn of(counts: Counts) -> SavedKind {
        match counts {
            Counts::Limits => SavedKind::Limits,
            Counts::Penalties { shifted: false } => SavedKind::Penalties,
            Counts::Penalties { shifted: true } => SavedKind::ShiftedPenalties,
        }
    }
}

impl fmt::Display for SavedKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SavedKind::Limits => "limits",
            SavedKind::Penalties => "penalties",
            SavedKind::ShiftedPenalties => "penalties (shifted)",
        })
    }
}

/// One sketch of a policy, saved: what it counted, its memory share and shape, and its
/// windows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedSketch {
    /// What it counted.
    pub kind: SavedKind,
    /// Its period (a limit's) or length (a penalty's): its window.
    pub period: Duration,
    /// Its share of `[sketch] memory`, in bytes (for a retired sketch, the bytes it holds: the
    /// share it was built of may have changed since).
    pub bytes: u64,
    /// `Some(tick)` for a sketch a reload retired, read until that tick.
    pub retired_until: Option<Tick>,
    /// Its shape (hash seed included).
    pub shape: Shape,
    /// Its windows with any event in them: at most the previous and the current one, oldest
    /// first, each of [`SavedSketch::shape`].
    pub windows: Vec<WindowSnapshot>,
}

/// What [`Policy::restore`] put back, and what it left out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Restored {
    /// Windows added into the sketches now counted into.
    pub windows: usize,
    /// Saved sketches restored as retired (their share changed, or a reload had retired them).
    pub retired: usize,
    /// Windows too old to count at the restore's tick.
    pub stale: usize,
    /// Saved sketches left out, each with why.
    pub dropped: Vec<String>,
}

impl Policy {
    /// Copies out every sketch's current and previous window at `now` (see the module docs for
    /// the consistency this gives). Allocates about the policy's memory: not for the hot path.
    #[must_use]
    pub fn save(&self, now: Tick) -> Vec<SavedSketch> {
        self.saved_sketches(now).collect()
    }

    /// As [`Policy::save`], one sketch at a time: each is copied out when the iterator reaches
    /// it, so a writer that encodes and drops each holds one sketch's copy at a time.
    pub fn saved_sketches(&self, now: Tick) -> impl Iterator<Item = SavedSketch> + '_ {
        self.counters()
            .iter()
            .flat_map(move |counter| saved_counter(counter, now))
    }

    /// The policy for `config` holding the counts of `saved` (from [`Policy::save`], possibly
    /// of another config) at `now`, in the saved policy's ticks; and what was restored.
    ///
    /// # Errors
    /// [`PolicyError::Memory`] if the config's memory is too small for its sketches (a
    /// config from [`Config::parse`] has been checked for that), or for a saved sketch rebuilt
    /// as it was.
    pub fn restore(
        config: Config,
        saved: &[SavedSketch],
        now: Tick,
    ) -> Result<(Policy, Restored), PolicyError> {
        let shares = budget::shares(config.memory, &config.periods, &config.rules);
        let mut report = Restored::default();
        let memory = |error| PolicyError::Memory {
            sketches: shares.len(),
            error,
        };
        let mut counters = Vec::with_capacity(shares.len());
        for &share in &shares {
            counters.push(restore(share, saved, now, &mut report).map_err(memory)?);
        }
        for sketch in saved {
            let needed = shares
                .iter()
                .any(|s| SavedKind::of(s.counts) == sketch.kind && s.window == sketch.period);
            if !needed {
                report.dropped.push(format!(
                    "{} sketch of {:?}: no rule has that period any more",
                    sketch.kind, sketch.period
                ));
            }
        }
        Ok((Policy::assemble(config, &shares, counters), report))
    }
}

/// More than a sketch holds besides its cells (about 5 KiB, see the sketch's `fixed_bytes`).
const BOOKKEEPING: usize = 64 << 10;

/// The tick at which a sketch of `counts` with window `window` is read at `now` (a shifted
/// penalty sketch is read half its window ahead).
fn read_at(counts: Counts, window: Duration, now: Tick) -> Tick {
    match counts {
        Counts::Penalties { shifted: true } => now + window / 2,
        _ => now,
    }
}

/// `counter`'s sketch and the retired ones it still reads at `now`, saved, each copied out
/// when the iterator reaches it.
pub(crate) fn saved_counter(
    counter: &Counter,
    now: Tick,
) -> impl Iterator<Item = SavedSketch> + '_ {
    let share = counter.share();
    let retired = counter
        .retired()
        .iter()
        .filter(move |r| now < r.until)
        .map(move |r| save(share, &r.sketch, Some(r.until), now));
    std::iter::once_with(move || save(share, counter.sketch(), None, now)).chain(retired)
}

/// `sketch` of `share` saved at `now`: its previous and current windows that saw any event.
fn save(share: Share, sketch: &RateSketch, until: Option<Tick>, now: Tick) -> SavedSketch {
    let current = sketch.window_index(read_at(share.counts, share.window, now));
    let windows = current
        .checked_sub(1)
        .into_iter()
        .chain([current])
        .map(|window| sketch.export_window(window))
        .filter(|window| window.events() > 0)
        .collect();
    SavedSketch {
        kind: SavedKind::of(share.counts),
        period: share.window,
        // A share is at most the configured memory, a usize: it fits in u64. A retired sketch
        // was built of an older share: what it holds stands for it (the share of today would
        // rebuild another shape, or be refused as far beyond its cells).
        bytes: match until {
            None => share.bytes as u64,
            Some(_) => sketch.memory_bytes() as u64,
        },
        retired_until: until,
        shape: sketch.shape(),
        windows,
    }
}

/// The counter for `share` holding what `saved` has for it.
pub(crate) fn restore(
    share: Share,
    saved: &[SavedSketch],
    now: Tick,
    report: &mut Restored,
) -> Result<Counter, tollgate_sketch::BuildError> {
    let at = read_at(share.counts, share.window, now);
    let mut current: Option<RateSketch> = None;
    let mut retired = Vec::new();
    let mine = saved
        .iter()
        .filter(|s| s.kind == SavedKind::of(share.counts) && s.period == share.window);
    // A sketch with no window has nothing to give back (and its claimed share cannot be checked
    // against data that is not there).
    for sketch in mine.filter(|s| !s.windows.is_empty()) {
        let until = match sketch.retired_until {
            Some(until) if until <= now => {
                report.stale += sketch.windows.len();
                continue;
            }
            // No later than a retirement from now would end: a reload reads a retired sketch
            // for three windows, so a saved end beyond that is not one a proxy wrote, and
            // would keep the sketch's memory held for as long as it says.
            Some(until) => Some(until.min(now + share.window.saturating_mul(3))),
            None if current.is_none() && sketch.bytes == share.bytes as u64 => None,
            // Its share changed: read it beside the new sketch, as a reload does.
            None => Some(now + share.window.saturating_mul(3)),
        };
        let Some(rebuilt) = rebuild(share, sketch, report) else {
            continue;
        };
        let mut merged = 0;
        for window in &sketch.windows {
            // The saved sketch's own front stays this one's (it has counted nothing yet).
            match rebuilt.restore_window(window, at) {
                Ok(()) => merged += 1,
                Err(MergeError::WindowOutOfRange { .. }) => report.stale += 1,
                Err(err) => report.dropped.push(format!(
                    "window {} of the {} sketch of {:?}: {err}",
                    window.window_index(),
                    sketch.kind,
                    sketch.period
                )),
            }
        }
        match until {
            None => {
                report.windows += merged;
                current = Some(rebuilt);
            }
            // A retired sketch with nothing left to read would only hold memory.
            Some(_) if merged == 0 => {}
            Some(until) => {
                report.windows += merged;
                report.retired += 1;
                retired.push(Retired {
                    sketch: Arc::new(rebuilt),
                    until,
                });
            }
        }
    }
    let sketch = match current {
        Some(sketch) => sketch,
        None => share.builder().build()?,
    };
    Ok(Counter::from_parts(share, sketch, retired))
}

/// A sketch of `saved`'s shape: built from its share and seed as the saving process built
/// it. `None` (and a line in the report) if this build makes another shape of that share, or
/// the share is one no sketch can be built of.
fn rebuild(share: Share, saved: &SavedSketch, report: &mut Restored) -> Option<RateSketch> {
    let what = || format!("the {} sketch of {:?}", saved.kind, saved.period);
    let Ok(bytes) = usize::try_from(saved.bytes) else {
        report.dropped.push(format!(
            "{}: a memory share of {} bytes",
            what(),
            saved.bytes
        ));
        return None;
    };
    // The share must be about what the shape's cells take (8 bytes a cell and a register, plus
    // the sketch's bookkeeping): the windows carry every cell, so a share claimed far beyond
    // them (a forged or damaged file) would make this allocate more than the file holds.
    let shape = saved.shape;
    let cells = shape
        .depth
        .saturating_mul(shape.width)
        .saturating_add(shape.registers)
        .saturating_add(shape.depth);
    if bytes > cells.saturating_mul(8).saturating_add(BOOKKEEPING) {
        report.dropped.push(format!(
            "{}: a memory share of {bytes} bytes for {cells} cells",
            what()
        ));
        return None;
    }
    let builder = Share { bytes, ..share }.builder().seed(shape.seed);
    match builder.build() {
        Ok(sketch) if sketch.shape() == saved.shape => Some(sketch),
        Ok(sketch) => {
            report.dropped.push(format!(
                "{}: saved as {:?}, this build makes {:?} of its {bytes} bytes",
                what(),
                saved.shape,
                sketch.shape()
            ));
            None
        }
        Err(err) => {
            report.dropped.push(format!("{}: {err}", what()));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::key::Source;
    use crate::policy::Event;
    use crate::rules::Transport;
    use crate::verdict::{DenyReason, Verdict};

    fn config(text: &str) -> Config {
        Config::parse(text).unwrap()
    }

    fn event(last: u8) -> Event {
        Event {
            source: Source::from(Ipv4Addr::new(192, 0, 2, last)),
            transport: Transport::Tcp,
            bytes: 60,
        }
    }

    const MINUTE: &str = "[sketch]\nmemory = \"1MiB\"\n[[rule]]\nname = \"r\"\n\
                          limits = [{ rate = \"5/60s\" }]\n";

    fn secs(s: u64) -> Tick {
        Tick::from_nanos(s * 1_000_000_000)
    }

    /// A policy of `text` in which source 1 sent 20 events at 100 s.
    fn flooded(text: &str) -> Policy {
        flooded_at(text, secs(100))
    }

    /// A policy of `text` in which source 1 sent 20 events at `at`.
    fn flooded_at(text: &str, at: Tick) -> Policy {
        let policy = Policy::compile(config(text), None).unwrap();
        for _ in 0..20 {
            let _ = policy.decide(&event(1), at);
        }
        assert_ne!(policy.decide(&event(1), at).verdict, Verdict::Allow);
        policy
    }

    fn throttled(policy: &Policy, last: u8, now: Tick) -> bool {
        !matches!(policy.recheck(&event(last), now).verdict, Verdict::Allow)
    }

    #[test]
    fn a_throttled_source_stays_throttled_and_another_is_allowed() {
        let saved = flooded(MINUTE).save(secs(101));
        let (policy, report) = Policy::restore(config(MINUTE), &saved, secs(110)).unwrap();
        // Saved with the share it has again: it is counted into, not retired beside a new one.
        assert_eq!(
            (report.windows, report.retired, report.stale),
            (1, 0, 0),
            "{report:?}"
        );
        assert!(report.dropped.is_empty(), "{report:?}");
        let fresh = Policy::compile(config(MINUTE), None).unwrap();
        assert_eq!(policy.memory_bytes(), fresh.memory_bytes());
        assert!(throttled(&policy, 1, secs(110)));
        assert!(!throttled(&policy, 2, secs(110)));
        // The restored window slides like a live one: 21 events at 100 s read 5 or less at 156 s
        // (a fifteenth of the way through window 2, the previous window's share is 4/60).
        assert!(throttled(&policy, 1, secs(150)));
        assert!(!throttled(&policy, 1, secs(179)));
    }

    #[test]
    fn a_restart_after_two_periods_restores_nothing() {
        let saved = flooded(MINUTE).save(secs(101));
        let (policy, report) = Policy::restore(config(MINUTE), &saved, secs(180)).unwrap();
        assert_eq!((report.windows, report.stale), (0, 1), "{report:?}");
        assert!(!throttled(&policy, 1, secs(180)));
    }

    #[test]
    fn a_penalty_is_kept() {
        let text = "[sketch]\nmemory = \"1MiB\"\n[[rule]]\nname = \"r\"\n\
                    limits = [{ rate = \"5/10s\" }]\npenalty = \"600s\"\n";
        // At 400 s the mark goes to the sketch read half a length ahead (it is 1/6 into its
        // window 1 there, 2/3 into window 0 in the other): its save and restore read it there.
        let saved = flooded_at(text, secs(400)).save(secs(401));
        assert_eq!(saved.len(), 3, "limits and two penalty sketches");
        // 200 s on, the limit's windows are long gone: only the penalty refuses.
        let (policy, report) = Policy::restore(config(text), &saved, secs(600)).unwrap();
        assert!(report.dropped.is_empty(), "{report:?}");
        assert_eq!(
            policy.recheck(&event(1), secs(600)).verdict,
            Verdict::Deny(DenyReason::Penalty { rule: 0 })
        );
        assert_eq!(policy.penalties(event(1).source, secs(600)), vec![0]);
        assert!(!throttled(&policy, 2, secs(600)));
        // It ends when it would have: 600 s after the first event over the limit.
        assert!(throttled(&policy, 1, secs(999)));
        assert!(!throttled(&policy, 1, secs(1001)));
    }

    #[test]
    fn a_changed_share_is_retired_and_still_read() {
        let saved = flooded(MINUTE).save(secs(101));
        let bigger = MINUTE.replace("1MiB", "2MiB");
        let (policy, report) = Policy::restore(config(&bigger), &saved, secs(110)).unwrap();
        assert_eq!((report.retired, report.windows), (1, 1), "{report:?}");
        assert!(throttled(&policy, 1, secs(110)));
        assert!(!throttled(&policy, 2, secs(110)));
        assert!(policy.memory_bytes() > 2 << 20, "both sketches are held");
        // New events count into the new sketch, on top of the retired one's.
        let _ = policy.decide(&event(1), secs(111));
        assert!(throttled(&policy, 1, secs(111)));
    }

    #[test]
    fn a_retired_sketch_is_saved_until_it_is_no_longer_read() {
        let saved = flooded(MINUTE).save(secs(101));
        let bigger = MINUTE.replace("1MiB", "2MiB");
        let (policy, report) = Policy::restore(config(&bigger), &saved, secs(110)).unwrap();
        assert_eq!(report.retired, 1, "{report:?}");
        // Read beside the new sketch for three periods from the restore.
        let until = secs(110) + Duration::from_secs(180);
        let resaved = policy.save(secs(111));
        assert_eq!(
            resaved.iter().map(|s| s.retired_until).collect::<Vec<_>>(),
            [None, Some(until)]
        );
        let last = secs(110) + (Duration::from_secs(180) - Duration::from_nanos(1));
        assert_eq!(policy.save(last).len(), 2);
        assert_eq!(policy.save(until).len(), 1);
    }

    #[test]
    fn a_saved_retired_sketch_comes_back_only_while_it_has_something_to_read() {
        let saved = flooded(MINUTE).save(secs(101));
        let bigger = MINUTE.replace("1MiB", "2MiB");
        let (policy, _) = Policy::restore(config(&bigger), &saved, secs(110)).unwrap();
        // The retired sketch is read until 290 s; both hold window 1 (60 s to 120 s).
        let resaved = policy.save(secs(111));
        let restored = |at| Policy::restore(config(&bigger), &resaved, at).unwrap();
        // Saved under its own size, not today's share: a second restart still reads it.
        let (again, early) = restored(secs(130));
        assert_eq!(
            (early.windows, early.retired, early.stale),
            (1, 1, 0),
            "{early:?}"
        );
        assert!(throttled(&again, 1, secs(130)));
        assert!(!throttled(&again, 2, secs(130)));
        // At 200 s window 1 is too old to count: nothing is left to read, nothing is kept.
        let late = restored(secs(200)).1;
        assert_eq!(
            (late.windows, late.retired, late.stale),
            (0, 0, 1),
            "{late:?}"
        );
        // Once its end has passed, the retired sketch's windows are stale unread.
        let over = restored(secs(290)).1;
        assert_eq!(
            (over.windows, over.retired, over.stale),
            (0, 0, 1),
            "{over:?}"
        );
        assert!(over.dropped.is_empty(), "{over:?}");
    }

    /// A saved retired sketch is read for at most the three windows a reload gives one from
    /// the restore on, whatever end the file names: a forged or damaged end far ahead would
    /// otherwise keep its memory held for as long as it says.
    #[test]
    fn a_saved_retirement_ends_no_later_than_three_windows_from_the_restore() {
        let saved = flooded(MINUTE).save(secs(101));
        let bigger = MINUTE.replace("1MiB", "2MiB");
        let (policy, _) = Policy::restore(config(&bigger), &saved, secs(110)).unwrap();
        let mut resaved = policy.save(secs(111));
        assert_eq!(resaved[1].retired_until, Some(secs(290)));
        resaved[1].retired_until = Some(secs(1_000_000));
        let (again, report) = Policy::restore(config(&bigger), &resaved, secs(130)).unwrap();
        assert_eq!(report.retired, 1, "{report:?}");
        let ends = |policy: &Policy| {
            policy
                .save(secs(131))
                .iter()
                .map(|s| s.retired_until)
                .collect::<Vec<_>>()
        };
        assert_eq!(ends(&again), [None, Some(secs(130 + 180))]);
        // A genuine end, sooner than that, is kept as saved.
        resaved[1].retired_until = Some(secs(290));
        let (kept, _) = Policy::restore(config(&bigger), &resaved, secs(130)).unwrap();
        assert_eq!(ends(&kept), [None, Some(secs(290))]);
    }

    /// A retired sketch is read until its end and not at it: restored at exactly its
    /// `retired_until` it is stale, even with a window that would still be read then.
    #[test]
    fn a_retired_sketch_restored_at_its_end_is_stale() {
        let saved = flooded(MINUTE).save(secs(101));
        let bigger = MINUTE.replace("1MiB", "2MiB");
        let (policy, _) = Policy::restore(config(&bigger), &saved, secs(110)).unwrap();
        let mut resaved = policy.save(secs(111));
        // Its end brought forward to a tick at which its window 1 (60 s to 120 s) is the
        // previous window, still read.
        assert_eq!(resaved[1].retired_until, Some(secs(290)));
        resaved[1].retired_until = Some(secs(130));
        let restored = |at| Policy::restore(config(&bigger), &resaved, at).unwrap().1;
        let before = restored(Tick::from_nanos(130 * 1_000_000_000 - 1));
        assert_eq!(
            (before.windows, before.retired, before.stale),
            (1, 1, 0),
            "{before:?}"
        );
        let at_end = restored(secs(130));
        assert_eq!(
            (at_end.windows, at_end.retired, at_end.stale),
            (0, 0, 1),
            "{at_end:?}"
        );
    }

    #[test]
    fn a_saved_shape_this_build_does_not_make_is_dropped_with_why() {
        let mut saved = flooded(MINUTE).save(secs(101));
        saved[0].shape.width *= 2;
        let (policy, report) = Policy::restore(config(MINUTE), &saved, secs(110)).unwrap();
        assert_eq!((report.windows, report.retired), (0, 0), "{report:?}");
        assert_eq!(report.dropped.len(), 1, "{report:?}");
        assert!(report.dropped[0].contains("this build makes"), "{report:?}");
        assert!(!throttled(&policy, 1, secs(110)));
    }

    #[test]
    fn a_period_no_rule_has_is_dropped_with_why() {
        let saved = flooded(MINUTE).save(secs(101));
        let other = MINUTE.replace("5/60s", "5/30s");
        let (policy, report) = Policy::restore(config(&other), &saved, secs(110)).unwrap();
        assert_eq!(report.windows, 0);
        assert_eq!(
            report.dropped,
            vec!["limits sketch of 60s: no rule has that period any more"]
        );
        assert!(!throttled(&policy, 1, secs(110)));
    }

    #[test]
    fn a_share_far_beyond_its_cells_is_refused_before_any_allocation() {
        let mut saved = flooded(MINUTE).save(secs(101));
        saved[0].bytes = 1 << 40;
        let (policy, report) = Policy::restore(config(MINUTE), &saved, secs(110)).unwrap();
        assert_eq!(report.windows, 0);
        assert_eq!(report.dropped.len(), 1, "{report:?}");
        assert!(
            report.dropped[0].contains("1099511627776 bytes"),
            "{report:?}"
        );
        assert!(policy.memory_bytes() < 2 << 20);
    }

    /// The bound on a claimed share is inclusive: eight bytes a cell, register and row plus
    /// 64 KiB of bookkeeping is still built (here it makes another shape, dropped as such);
    /// one byte more is refused before any allocation.
    #[test]
    fn a_share_of_exactly_its_cells_and_bookkeeping_is_looked_at_and_one_byte_more_is_not() {
        let saved = flooded(MINUTE).save(secs(101));
        let shape = saved[0].shape;
        let cells = shape.depth * shape.width + shape.registers + shape.depth;
        let most = (cells * 8 + (64 << 10)) as u64;
        let restored = |bytes: u64| {
            let mut claimed = saved.clone();
            claimed[0].bytes = bytes;
            Policy::restore(config(MINUTE), &claimed, secs(110))
                .unwrap()
                .1
        };
        let at_most = restored(most);
        assert_eq!(at_most.dropped.len(), 1, "{at_most:?}");
        assert!(
            at_most.dropped[0].contains("this build makes"),
            "{at_most:?}"
        );
        let over = restored(most + 1);
        assert_eq!(
            over.dropped,
            [format!(
                "the limits sketch of 60s: a memory share of {} bytes for {cells} cells",
                most + 1
            )]
        );
    }
}
