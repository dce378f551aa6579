//! Verdicts as data: what the filter decided about one event, and why.

use std::time::Duration;

use crate::packet::Malformed;
use crate::rules::{Action, Cidr};

/// Which rule and which of its limits a verdict is about (indices into the policy that decided;
/// see [`crate::Policy::rule`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LimitRef {
    /// The rule's index in the policy.
    pub rule: usize,
    /// The limit's index in the rule.
    pub limit: usize,
}

/// An event over a limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Throttle {
    /// The limit it exceeded.
    pub at: LimitRef,
    /// The sliding-window estimate including this event: never below the true count up to
    /// [`EXACT_MULTIPLE`](crate::EXACT_MULTIPLE) times the limit plus one (the cap), at least
    /// the cap above it.
    pub estimate: u64,
    /// The limit's count per period.
    pub allowed: u64,
    /// How long until an event like this one would be allowed if the source sends nothing
    /// meanwhile (for [`Policy::recheck`](crate::Policy::recheck): until the event already
    /// counted is within the limit), from the window formula (see
    /// [`Halves::back_under`](crate::Halves::back_under)): exact while `capped` is false,
    /// never early when it is true.
    pub retry_after: Duration,
    /// Whether the key's count reached its cap (see [`EXACT_MULTIPLE`](crate::EXACT_MULTIPLE)):
    /// the true count is then at least `estimate`, how far above is not known, and
    /// `retry_after` is what the sketch promises instead, an upper bound: a capped key reads at
    /// least the cap for the rest of its window and all of the next, and nothing of it after
    /// that (see [`Policy::decide`](crate::Policy::decide)). Say "at least" of the estimate
    /// and "at most" of the time.
    pub capped: bool,
    /// What the rule says to do.
    pub action: Action,
}

/// Why an event is refused outright.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DenyReason {
    /// The source is in the deny list (the most specific listed network).
    Listed(Cidr),
    /// The source went over a limit of this rule recently and is serving its penalty.
    Penalty {
        /// The rule whose penalty it is.
        rule: usize,
    },
    /// A frame that could not be read (see [`crate::parse_frame`]): dropped, never an error.
    Malformed(Malformed),
}

/// The enforced verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a verdict that is not acted on enforces nothing"]
pub enum Verdict {
    /// Let it through.
    Allow,
    /// Over a limit: carry out the rule's action.
    Throttle(Throttle),
    /// Refused whatever the limits say.
    Deny(DenyReason),
}

/// A verdict and what shadow rules would have done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a verdict that is not acted on enforces nothing"]
pub struct Decision {
    /// What to enforce.
    pub verdict: Verdict,
    /// The first shadow rule that found the event over a limit (counted, never enforced).
    pub shadow: Option<Throttle>,
    /// How many shadow limits in all found it over.
    pub shadow_count: u32,
}

impl Decision {
    pub(crate) fn of(verdict: Verdict) -> Decision {
        Decision {
            verdict,
            shadow: None,
            shadow_count: 0,
        }
    }
}
