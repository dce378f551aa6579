//! Descriptor limits: the policy of a rate-limit service that Envoy (and Istio, Contour,
//! Emissary, Gloo on top of it) calls through `envoy.service.ratelimit.v3`'s
//! `ShouldRateLimit`, configured by envoyproxy/ratelimit's own YAML files, read unchanged.
//! This module owns matching, keys and verdicts; the proxy owns the gRPC server.
//!
//! Read from the reference server (envoyproxy/ratelimit): `README.md` ("The configuration
//! format", "Replaces", "ShadowMode" and the examples), `src/config/config_impl.go`
//! (`loadDescriptors`, `GetLimit`), `src/service/ratelimit.go` (`constructLimitsToCheck`,
//! `shouldRateLimitWorker`) and `src/limiter/base_limiter.go` (`GetResponseDescriptorStatus`).
//!
//! # The rules
//!
//! - **Files** ([`DescriptorConfig`]): one `domain` per file, no domain twice, a tree of
//!   descriptors; no two descriptors of one level with the same `key` and `value`. What the
//!   reference accepts and Tollgate does not support is refused at `FILE:LINE:COL` (see
//!   [`DescriptorConfig::parse`]).
//! - **Matching** ([`Matcher::find`]): a request names a domain and descriptors, each an
//!   ordered list of `(key, value)` entries. An unknown domain matches nothing. Each entry is
//!   looked up at the current level of the domain's tree: the node with that key and exactly
//!   that value first, else the first node (in file order) with that key and a wildcard value
//!   (`prefix*`) the value starts with, else the node with that key and no value. No node: no
//!   match. The limit is the `rate_limit` of the node the **last** entry lands on; a node
//!   without nested descriptors ends the walk, so a descriptor deeper than the tree matches
//!   nothing, as one that lands on a node without a `rate_limit` does.
//! - **Answers** ([`DescriptorPolicy::decide`]): no match, OK with no `current_limit` and
//!   `limit_remaining` 0; `unlimited`, OK with `limit_remaining` `u32::MAX`, nothing counted;
//!   a rule whose `name` is named in the `replaces` of any rule another descriptor of the
//!   same request matched (an unlimited one too) is dropped: OK, nothing counted; otherwise
//!   the descriptor's key is counted with weight `hits_addend` (0 means 1) and it is over
//!   when the estimate including this request passes `requests_per_unit`. Over-limit
//!   requests are counted too, as the reference's `INCRBY` counts them. A `shadow_mode` rule
//!   over its limit answers OK and is marked [`Status::shadowed`]. The overall code is
//!   OVER_LIMIT when any descriptor's is. An empty domain or descriptor list is a
//!   [`Refusal`], as the reference's errors; so is a request past one of the [`Bounds`].
//! - **Keys**: the rule's identity (the domain and the path of keys and value matches from
//!   the top, length-prefixed, hashed as a [`RuleId`](crate::RuleId)) and a 128-bit hash of
//!   the request's values. The identity does not hold the limit: a reload that keeps a rule's
//!   path keeps its counts, whether its limit changed or not; a changed path starts from 0.
//!
//! # Where Tollgate answers differently, on purpose
//!
//! - **Sliding windows.** The reference counts in fixed windows per unit, so a key may pass
//!   twice its limit across a window's edge and then wait for the edge. Here each unit is a
//!   sliding window of one unit's length: the two-window interpolation of `tollgate-sketch`
//!   (the previous window's count weighed by the part of it still inside one unit). A key is
//!   let through at most its limit in each of the sketch's windows, and only while that
//!   estimate, never below the same formula on the exact counts, stays within the limit.
//!   `duration_until_reset` is therefore not a fixed window's end but how long until the key
//!   has room for one more request of this weight if it sends nothing more, never early.
//! - **Structural matching.** The reference joins key and value as `key_value` text, so the
//!   entry `(a_b, c)` can land on the node `(a, b_c)`, and a wildcard's prefix can cover the
//!   key's `_`. Here keys and values are compared apart.
//! - **Weeks, months, years** and `*` inside a value are refused, not windowed.

mod bounds;
mod config;
mod decision;
mod explain;
mod matcher;
mod request;
mod saved;

#[cfg(test)]
mod conformance;

pub use bounds::{
    Bounds, MAX_DESCRIPTORS, MAX_DOMAIN_BYTES, MAX_ENTRIES, MAX_KEY_BYTES, MAX_REQUEST_BYTES,
    MAX_VALUE_BYTES, Refusal,
};
pub use config::{
    DescriptorConfig, DescriptorErrors, DescriptorLimit, DescriptorRule, Domain, FileError,
    RateLimit, Unit, ValueMatch,
};
pub use decision::{Code, CurrentLimit, DescriptorPolicy, Outcome, Response, Status};
pub use explain::{DescriptorExplanation, RequestExplanation};
pub use matcher::{MatchedRule, Matcher, RuleIndex};
pub use request::{Descriptor, Entry, Request};
