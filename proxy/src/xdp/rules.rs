//! What the kernel enforces of a policy: one limit per prefix level, all over one window.

use std::time::Duration;

use tollgate_filter::{Config, CountedAhead};

use super::layout::Level;

/// The window when `[xdp] window` is absent and no limit fits the kernel.
pub(crate) const DEFAULT_WINDOW: Duration = Duration::from_secs(10);

/// The kernel's share of a policy: its window and each level's limit (0: not counted),
/// indexed as [`Level::ALL`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KernelRules {
    /// The sliding window every level counts over.
    pub(crate) window: Duration,
    /// Attempts allowed per window, per level.
    pub(crate) limits: [u32; Level::ALL.len()],
}

impl KernelRules {
    /// The limits of `policy` the kernel can enforce without refusing anything the proxy
    /// would accept: those of rules that apply to every source and both protocols
    /// (`protocol = "any"`, no `sources`), count events, and are not `shadow`; of their
    /// limits, those whose period is `window` (the shortest such period when `None`) at a
    /// level the program counts (IPv4 /32 and /24, IPv6 /128, /64 and /48). Where several
    /// fall on one level, the smallest count. The proxy still applies every limit itself.
    pub(crate) fn of(policy: &Config, window: Option<Duration>) -> KernelRules {
        let eligible = || {
            policy
                .rules
                .iter()
                .filter(|r| CountedAhead::takes_rule(r))
                .flat_map(|r| r.limits.iter())
                .filter(|l| {
                    level(false, l.ipv4_prefix.len()).is_some()
                        || level(true, l.ipv6_prefix.len()).is_some()
                })
        };
        let window = window
            .or_else(|| eligible().map(|l| l.rate.per).min())
            .unwrap_or(DEFAULT_WINDOW);
        let mut limits = [0_u32; Level::ALL.len()];
        for limit in eligible().filter(|l| l.rate.per == window) {
            // Rates are at most tollgate_filter::MAX_LIMIT (below 2^24): they fit.
            let count = u32::try_from(limit.rate.count).unwrap_or(u32::MAX);
            let levels = [
                level(false, limit.ipv4_prefix.len()),
                level(true, limit.ipv6_prefix.len()),
            ];
            for level in levels.into_iter().flatten() {
                let slot = &mut limits[level.index() as usize];
                *slot = if *slot == 0 {
                    count
                } else {
                    (*slot).min(count)
                };
            }
        }
        KernelRules { window, limits }
    }

    /// What the proxy's filter leaves to the kernel (see [`CountedAhead`]): this window and
    /// the program's prefix levels. It takes exactly the limits [`KernelRules::of`] puts
    /// into the levels (a test says so), so for an attempt the kernel passed, each of them
    /// is under its limit in the kernel's count.
    pub(crate) fn counted_ahead(&self) -> CountedAhead {
        let lengths = |v6: bool| -> Vec<u8> {
            Level::ALL
                .into_iter()
                .filter(|l| is_v6(*l) == v6)
                // Prefix lengths are at most 128.
                .map(|l| u8::try_from(l.prefix()).unwrap_or(u8::MAX))
                .collect()
        };
        CountedAhead {
            window: self.window,
            ipv4: lengths(false),
            ipv6: lengths(true),
        }
    }

    /// How many levels are counted.
    pub(crate) fn counted(&self) -> usize {
        self.limits.iter().filter(|&&l| l > 0).count()
    }

    /// The levels counted, as `/32=100 /64=50` (or `none`), for the start and reload logs.
    pub(crate) fn describe(&self) -> String {
        let parts: Vec<String> = Level::ALL
            .iter()
            .zip(self.limits)
            .filter(|(_, limit)| *limit > 0)
            .map(|(level, limit)| format!("{}={limit}", level.name()))
            .collect();
        if parts.is_empty() {
            "none".to_owned()
        } else {
            parts.join(" ")
        }
    }
}

/// The name of the rule each level's kernel limit comes from (`None` for a level not counted):
/// the first rule whose limit `KernelRules::of` took for it (that count, over `rules`'
/// window, at that level). What a drop event and the offender list name.
pub(crate) fn names(policy: &Config, rules: &KernelRules) -> [Option<String>; Level::ALL.len()] {
    Level::ALL.map(|level| {
        let count = u64::from(rules.limits[level.index() as usize]);
        if count == 0 {
            return None;
        }
        policy
            .rules
            .iter()
            .filter(|r| CountedAhead::takes_rule(r))
            .find(|r| {
                r.limits.iter().any(|l| {
                    l.rate.per == rules.window
                        && l.rate.count == count
                        && [
                            self::level(false, l.ipv4_prefix.len()),
                            self::level(true, l.ipv6_prefix.len()),
                        ]
                        .contains(&Some(level))
                })
            })
            .map(|r| r.name.clone())
    })
}

/// The level of a prefix length in one family, if the program counts it.
fn level(v6: bool, prefix: u8) -> Option<Level> {
    Level::ALL
        .into_iter()
        .find(|l| l.prefix() == u32::from(prefix) && is_v6(*l) == v6)
}

/// Whether a level counts IPv6 sources.
fn is_v6(level: Level) -> bool {
    matches!(level, Level::V6Host | Level::V6Net64 | Level::V6Net48)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(policy: &str, window: Option<Duration>) -> KernelRules {
        let config = Config::parse(policy).unwrap_or_else(|e| panic!("{e}"));
        KernelRules::of(&config, window)
    }

    #[test]
    fn the_kernel_takes_the_limits_it_cannot_overenforce() {
        let policy = r#"
            [[rule]]
            name = "a"
            limits = [
              { rate = "100/10s", ipv4_prefix = 32, ipv6_prefix = 64 },
              { rate = "1000/10s", ipv4_prefix = 24, ipv6_prefix = 48 },
              { rate = "5000/1m", ipv4_prefix = 24, ipv6_prefix = 48 },
              { rate = "9/10s", ipv4_prefix = 16, ipv6_prefix = 32 },
            ]
            [[rule]]
            name = "b"
            limits = [{ rate = "60/10s", ipv6_prefix = 128 }]
            [[rule]]
            name = "tcp only"
            protocol = "tcp"
            limits = [{ rate = "1/10s" }]
            [[rule]]
            name = "some sources"
            sources = ["10.0.0.0/8"]
            limits = [{ rate = "1/10s" }]
            [[rule]]
            name = "shadow"
            shadow = true
            limits = [{ rate = "1/10s" }]
            [[rule]]
            name = "bytes"
            weight = "bytes"
            limits = [{ rate = "1/10s" }]
        "#;
        let kernel = rules(policy, None);
        assert_eq!(kernel.window, Duration::from_secs(10));
        // /32: 100 and rule b's 60 (its IPv4 prefix defaults to /32); /128 only from b.
        assert_eq!(kernel.limits, [60, 1000, 60, 100, 1000]);
        assert_eq!(
            kernel.describe(),
            "/32=60 /24=1000 /128=60 /64=100 /48=1000"
        );
        // The filter leaves to the kernel exactly the limits that went into its levels.
        let config = Config::parse(policy).unwrap_or_else(|e| panic!("{e}"));
        let ahead = kernel.counted_ahead();
        let taken: Vec<(&str, usize, bool)> = config
            .rules
            .iter()
            .flat_map(|r| {
                let ahead = &ahead;
                r.limits.iter().enumerate().flat_map(move |(i, l)| {
                    [false, true]
                        .into_iter()
                        .filter(move |&v6| ahead.takes(r, l, v6))
                        .map(move |v6| (r.name.as_str(), i, v6))
                })
            })
            .collect();
        assert_eq!(
            taken,
            [
                ("a", 0, false),
                ("a", 0, true),
                ("a", 1, false),
                ("a", 1, true),
                ("b", 0, false),
                ("b", 0, true),
            ]
        );
        let name = |n: &str| Some(n.to_owned());
        assert_eq!(
            names(&config, &kernel),
            [name("b"), name("a"), name("b"), name("a"), name("a")]
        );
        let minute = rules(policy, Some(Duration::from_secs(60)));
        assert_eq!(minute.limits, [0, 5000, 0, 0, 5000]);
        assert_eq!(minute.counted(), 2);
        let none = rules(
            "[[rule]]\nname = \"t\"\nprotocol = \"udp\"\nlimits = [{ rate = \"1/s\" }]",
            None,
        );
        assert_eq!(
            (none.window, none.counted(), none.describe().as_str()),
            (DEFAULT_WINDOW, 0, "none")
        );
    }
}
