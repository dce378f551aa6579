//! How `[sketch] memory` is split: one sketch per distinct limit period and one per distinct
//! penalty length, each with the share `[sketch] periods` names or an even part of the rest.
//! The config check and the policy both read the split from here, so a share too small for
//! its sketch is refused with its line before any policy is built.

use std::time::Duration;

use tollgate_sketch::{Builder, RateSketch};

use crate::rules::Rule;

/// The limits' reserve shift (see [`Share::builder`]): the sketch's default.
#[cfg(not(loom))]
const LIMITS_RESERVE_SHIFT: u32 = Builder::DEFAULT_RESERVE_SHIFT;

/// Under loom a key reserves from its second event (half its count), so that a model of a
/// few decisions takes and spends credits through the filter's real path.
#[cfg(loom)]
const LIMITS_RESERVE_SHIFT: u32 = 1;

/// What a sketch counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Counts {
    /// The events of every limit with its period.
    Limits,
    /// The marks of every penalty of its length (kept apart from the limits' counts, so a
    /// limit's events never read as a penalty). A penalty length has two such sketches, one
    /// read at ticks shifted by half its length (see the `penalty` module).
    Penalties {
        /// Whether this is the shifted one.
        shifted: bool,
    },
}

/// One sketch of a policy and its memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Share {
    /// What it counts.
    pub(crate) counts: Counts,
    /// Its window: the limits' period or the penalty's length.
    pub(crate) window: Duration,
    /// Its memory in bytes.
    pub(crate) bytes: usize,
    /// Whether `[sketch] periods` names its size (else it is an even part of the rest).
    pub(crate) named: bool,
    /// Whether its sketch counts hot keys ahead (`tollgate_sketch::Builder::reserve_shift`,
    /// the sketch's default shift): the policy's limits do, whose stated bound carries the
    /// share (`LimitExplanation::reserved_per_thread`); penalties never (see
    /// [`Share::builder`]). The rate-limit service's descriptors do, their answers taking
    /// the deciding thread's own unspent credit off (see `RateSketch::held_credit`).
    pub(crate) reserves: bool,
}

impl Share {
    /// The builder of this share's sketch: penalties have no front (their marks are heavy, and
    /// a front's slack would only blur them), limits the sketch's default one.
    ///
    /// Reservations (`tollgate_sketch::Builder::reserve_shift`) where [`Share::reserves`]
    /// says so, at the sketch's default shift `s` (8): with `P` threads counting into the
    /// policy, a limit's estimate `e` reads at most `P * ceil(e / 2^s)` above what it would
    /// read without them (`RateSketch::reserved_per_thread`), always, on top of the stated
    /// overcount (`overcount_bound`, with high probability); `/explain` states both. Limits
    /// count capped (`observe_capped`, cap `EXACT_MULTIPLE * count + 1`) and a capped observe
    /// reserves only below its cap and from `2^s` events a window, so a limit of 32 or less
    /// (a cap of `2^s + 1` or less) never reserves at all, and a key at its cap is read-only
    /// as before. Penalties never reserve: a mark weighs at least `penalty::THRESHOLD`
    /// (`2^16`), and a credit is taken only if it is at least the event's weight, so a mark
    /// would reserve only in a count of `2^24` or more; turned off outright, the penalties'
    /// margin (`MARGIN` times the stated overcount) needs no reservation share.
    pub(crate) fn builder(&self) -> Builder {
        let reserve = match self.counts {
            Counts::Limits if self.reserves => Some(LIMITS_RESERVE_SHIFT),
            _ => None,
        };
        let builder = RateSketch::builder()
            .window(self.window)
            .memory_bytes(self.bytes)
            .reserve_shift(reserve);
        match self.counts {
            Counts::Limits => builder,
            Counts::Penalties { .. } => builder.front_share(0.0),
        }
    }
}

/// The sketches `rules` need, in order of first use, with their memory out of `memory`.
/// A named period sizes the limits' sketch of that period, or, if no limit has it, the
/// penalties' sketches of that length. The sketches not named split the rest evenly; a
/// penalty length's two sketches halve its share.
pub(crate) fn shares(memory: usize, periods: &[(Duration, usize)], rules: &[Rule]) -> Vec<Share> {
    let mut needed: Vec<(Counts, Duration)> = Vec::new();
    let mut need = |counts, window| {
        if !needed.contains(&(counts, window)) {
            needed.push((counts, window));
        }
    };
    for rule in rules {
        for limit in &rule.limits {
            need(Counts::Limits, limit.rate.per);
        }
        if let Some(length) = rule.penalty {
            need(Counts::Penalties { shifted: false }, length);
        }
    }
    let named = |counts: Counts, window: Duration| {
        let size = periods
            .iter()
            .find(|(p, _)| *p == window)
            .map(|(_, s)| *s)?;
        let owner = if needed.contains(&(Counts::Limits, window)) {
            Counts::Limits
        } else {
            Counts::Penalties { shifted: false }
        };
        (owner == counts).then_some(size)
    };
    let sized: Vec<Option<usize>> = needed.iter().map(|&(c, w)| named(c, w)).collect();
    let taken: usize = sized.iter().flatten().sum();
    // Sketches, not entries, split the rest: a penalty length takes two parts.
    let parts = |counts: Counts| if counts == Counts::Limits { 1 } else { 2 };
    let unnamed: usize = needed
        .iter()
        .zip(&sized)
        .filter(|(_, size)| size.is_none())
        .map(|(&(counts, _), _)| parts(counts))
        .sum();
    let even = memory.saturating_sub(taken) / unnamed.max(1);
    let mut shares = Vec::with_capacity(needed.len() * 2);
    for (&(counts, window), size) in needed.iter().zip(sized) {
        let share = Share {
            counts,
            window,
            bytes: size.unwrap_or(even * parts(counts)),
            named: size.is_some(),
            reserves: counts == Counts::Limits,
        };
        if counts == Counts::Limits {
            shares.push(share);
            continue;
        }
        let half = share.bytes / 2;
        shares.push(Share {
            bytes: half,
            ..share
        });
        shares.push(Share {
            counts: Counts::Penalties { shifted: true },
            bytes: half,
            ..share
        });
    }
    shares
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    const MIB: usize = 1 << 20;

    fn shares_of(text: &str) -> Vec<(Counts, u64, usize, bool)> {
        let config = Config::parse(text).unwrap();
        shares(config.memory, &config.periods, &config.rules)
            .into_iter()
            .map(|s| (s.counts, s.window.as_secs(), s.bytes, s.named))
            .collect()
    }

    const RULES: &str = "[[rule]]\nname = \"a\"\n\
                         limits = [{ rate = \"10/1s\" }, { rate = \"10/60s\" }]\n\
                         penalty = \"600s\"\n\
                         [[rule]]\nname = \"b\"\nlimits = [{ rate = \"5/1s\" }]\n";

    #[test]
    fn a_named_limit_period_takes_its_size_and_the_rest_is_split_per_sketch() {
        let text =
            format!("[sketch]\nmemory = \"10MiB\"\nperiods = {{ \"60s\" = \"4MiB\" }}\n{RULES}");
        // 6 MiB left for three parts: the 1 s limits and the penalty's two sketches.
        let plain = Counts::Penalties { shifted: false };
        let shifted = Counts::Penalties { shifted: true };
        assert_eq!(
            shares_of(&text),
            [
                (Counts::Limits, 1, 2 * MIB, false),
                (Counts::Limits, 60, 4 * MIB, true),
                (plain, 600, 2 * MIB, false),
                (shifted, 600, 2 * MIB, false),
            ]
        );
    }

    #[test]
    fn a_named_penalty_length_is_halved_between_its_two_sketches() {
        let text =
            format!("[sketch]\nmemory = \"10MiB\"\nperiods = {{ \"600s\" = \"1MiB\" }}\n{RULES}");
        let plain = Counts::Penalties { shifted: false };
        let shifted = Counts::Penalties { shifted: true };
        assert_eq!(
            shares_of(&text),
            [
                (Counts::Limits, 1, 9 * MIB / 2, false),
                (Counts::Limits, 60, 9 * MIB / 2, false),
                (plain, 600, MIB / 2, true),
                (shifted, 600, MIB / 2, true),
            ]
        );
    }

    /// A count of one key past `2^8` events in one window, one event at a time: what the
    /// sketch of `counts` reads after `events` of them.
    fn counted(counts: Counts, reserves: bool, events: u64) -> u64 {
        let share = Share {
            counts,
            window: std::time::Duration::from_secs(60),
            bytes: 64 << 10,
            named: false,
            reserves,
        };
        let sketch = share.builder().build().unwrap();
        let now = tollgate_sketch::Tick::ZERO;
        (0..events).fold(0, |_, _| sketch.observe(b"hot", 1, now))
    }

    /// Penalties' sketches never count ahead (their margin carries no reservation share),
    /// whatever the share says; the limits' reserve where the share says so.
    #[test]
    fn only_the_limits_reserve() {
        let penalty = Counts::Penalties { shifted: false };
        assert_eq!(counted(penalty, true, 1_000), 1_000);
        assert_eq!(counted(penalty, false, 1_000), 1_000);
        assert!(
            counted(Counts::Limits, true, 1_000) > 1_000,
            "counted ahead"
        );
        // The limits' front absorbs nothing of a key seen again: exact without reservations.
        assert_eq!(counted(Counts::Limits, false, 1_000), 1_000);
        let split = shares(8 << 20, &[], &Config::parse(RULES).unwrap().rules);
        assert!(
            split
                .iter()
                .all(|share| share.reserves == (share.counts == Counts::Limits)),
            "{split:?}"
        );
    }
}
