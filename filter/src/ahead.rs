//! [`CountedAhead`]: the limits a counter in front of the policy (the proxy's XDP program)
//! counts and enforces for the events that reach the policy through it, so that the policy
//! does not count them a second time.

use std::time::Duration;

use crate::rules::{Limit, ProtocolMatch, Rule, Weight};

/// A counter ahead of the policy: it sees events before the policy does, counts every one of
/// them from every source at some prefix lengths over one window, and drops a source over a
/// limit there. The limits it takes are those it cannot enforce more strictly than the
/// policy would: of rules that apply to every source and both protocols (`protocol =
/// "any"`, no `sources`), count events and are not `shadow`; of their limits, those whose
/// period is `window`, at a prefix length it counts (per family).
///
/// An event that reached the policy through that counter is decided with
/// [`crate::Policy::decide_counted_ahead`]: the limits taken are neither counted nor compared
/// (the counter ahead counted the event and let it through, so it is under each of them);
/// every other limit is decided as usual. Set on a policy with
/// [`crate::Policy::with_counted_ahead`] (or [`crate::Filter::count_ahead`]); reloads keep it.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use tollgate_filter::{Config, CountedAhead};
/// let config = Config::parse(
///     "[[rule]]\nname = \"r\"\nlimits = [{ rate = \"5/10s\", ipv4_prefix = 24 }, { rate = \"9/1m\" }]\n",
/// )?;
/// let ahead = CountedAhead { window: Duration::from_secs(10), ipv4: vec![32, 24], ipv6: vec![64] };
/// let rule = &config.rules[0];
/// assert!(ahead.takes(rule, &rule.limits[0], false)); // 10s at /24
/// assert!(!ahead.takes(rule, &rule.limits[1], false)); // another period
/// # Ok::<(), tollgate_filter::ConfigErrors>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CountedAhead {
    /// The window it counts over: it takes limits of this period only.
    pub window: Duration,
    /// The IPv4 prefix lengths it counts at.
    pub ipv4: Vec<u8>,
    /// The IPv6 prefix lengths it counts at.
    pub ipv6: Vec<u8>,
}

impl CountedAhead {
    /// Whether it takes `limit` of `rule` for sources of one family (`ipv6`).
    #[must_use]
    pub fn takes(&self, rule: &Rule, limit: &Limit, ipv6: bool) -> bool {
        let (lengths, prefix) = if ipv6 {
            (&self.ipv6, limit.ipv6_prefix)
        } else {
            (&self.ipv4, limit.ipv4_prefix)
        };
        Self::takes_rule(rule) && limit.rate.per == self.window && lengths.contains(&prefix.len())
    }

    /// Whether a counter like it can take any limit of `rule`: one for every source and both
    /// protocols, counting events, not `shadow`.
    #[must_use]
    pub fn takes_rule(rule: &Rule) -> bool {
        rule.protocol == ProtocolMatch::Any
            && rule.sources.is_empty()
            && rule.weight == Weight::Events
            && !rule.shadow
    }
}
