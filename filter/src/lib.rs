//! Turns "an event from address A" into the keys and matches Tollgate's rules need: sources
//! with IPv4-mapped IPv6 folded to IPv4, prefix lengths checked per family, one sketch key per
//! (limit or penalty, rule, period, prefix length, masked address), and longest-prefix matching
//! for allow/deny lists and rule sources. Penalties are counted apart from the limits and last
//! exactly their length; counts and penalties of unchanged rules survive every reload.
//!
//! ```
//! use std::net::IpAddr;
//! use std::time::Duration;
//! use tollgate_filter::{LimitKey, Prefix, RuleId, Source};
//! // One rule limiting each address and its /64 (IPv6) or /24 (IPv4).
//! let rule = RuleId::from_name("per-source");
//! let source = Source::new("2001:db8:1:2:aaaa::1".parse::<IpAddr>()?);
//! let per_network = source.pick(Prefix::v4(24)?, Prefix::v6(64)?);
//! let rotated = Source::new("2001:db8:1:2:bbbb::9".parse::<IpAddr>()?);
//! // An attacker rotating addresses inside one /64 hits one network counter.
//! let minute = Duration::from_secs(60);
//! assert_eq!(
//!     LimitKey::limit(rule, minute, source, per_network),
//!     LimitKey::limit(rule, minute, rotated, per_network)
//! );
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A [`Filter`] holds the [`Policy`] compiled from a [`Config`] and decides on [`Event`]s.
//! [`parse_frame`] reads raw frames for [`Filter::decide_frame`]. A [`Remote`] (the proxy's
//! cluster link) adds what other nodes counted to the keys near their limits.
//!
//! A [`DescriptorPolicy`] decides the rate-limit service's requests (Envoy's
//! `ShouldRateLimit`) from envoyproxy/ratelimit's YAML files, read as a [`DescriptorConfig`].

#![warn(missing_docs)]

mod ahead;
mod budget;
mod config;
mod counter;
mod descriptors;
mod fade;
mod filter;
mod key;
mod overlay;
mod packet;
mod penalty;
mod policy;
mod prefix;
mod prefix_map;
mod remote;
mod rules;
mod saved;
mod suspects;
mod sync;
mod units;
mod verdict;

pub use ahead::CountedAhead;
pub use config::{Checker, Config, ConfigError, ConfigErrors, DEFAULT_MEMORY, MAX_LIMIT};
pub use descriptors::{
    Bounds, Code, CurrentLimit, Descriptor, DescriptorConfig, DescriptorErrors,
    DescriptorExplanation, DescriptorLimit, DescriptorPolicy, DescriptorRule, Domain, Entry,
    FileError, MAX_DESCRIPTORS, MAX_DOMAIN_BYTES, MAX_ENTRIES, MAX_KEY_BYTES, MAX_REQUEST_BYTES,
    MAX_VALUE_BYTES, MatchedRule, Matcher, Outcome, RateLimit, Refusal, Request,
    RequestExplanation, Response, RuleIndex, Status, Unit, ValueMatch,
};
pub use fade::Halves;
pub use filter::Filter;
pub use key::{LimitKey, RuleId, Source};
pub use overlay::{ListEntry, ListError, ListKind, ListStats, MAX_REASON, Merged, RuntimeLists};
pub use packet::{Malformed, PacketInfo, Protocol, decision_reads, parse_frame};
pub use policy::{
    EXACT_MULTIPLE, Event, Explanation, FRAME_BATCH, LimitEstimate, LimitExplanation, Listed,
    PenaltyState, Policy, PolicyError, RuleExplanation,
};
pub use prefix::{Prefix, PrefixError};
pub use prefix_map::PrefixMap;
pub use remote::{Before, Remote, Rest, Split, Suspect};
pub use rules::{Action, Cidr, Limit, ProtocolMatch, Rule, Transport, Weight};
pub use saved::{Restored, SavedKind, SavedSketch};
pub use suspects::{Collected, PROBES, SuspectTable};
pub use units::{DurationText, Rate, parse_duration, parse_rate, parse_size};
pub use verdict::{Decision, DenyReason, LimitRef, Throttle, Verdict};
