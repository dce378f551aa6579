//! How `[sketch] memory` is split: one sketch per distinct limit period and one per distinct
//! penalty length, each with the share `[sketch] periods` names or an even part of the rest.
//! The config check and the policy both read the split from here, so a share too small for
//! its sketch is refused with its line before any policy is built.

use std::time::Duration;

use tollgate_sketch::{Builder, RateSketch};

use crate::rules::Rule;

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
}

impl Share {
    /// The builder of this share's sketch: penalties have no front (their marks are heavy, and
    /// a front's slack would only blur them), limits the sketch's default one.
    pub(crate) fn builder(&self) -> Builder {
        // No reservations (see `tollgate_sketch::Builder::reserve_shift`): a reserved credit
        // reads up to `threads * estimate / 256` above the truth, a per-key share that the
        // policy's stated bound (`/explain`'s "overcount at most", the penalties' margin) does
        // not include yet. Keys at their cap are read-only already (`observe_capped`).
        let builder = RateSketch::builder()
            .window(self.window)
            .memory_bytes(self.bytes)
            .reserve_shift(None);
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
}
