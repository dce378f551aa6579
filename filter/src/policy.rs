//! A compiled policy: the config's lists and rules turned into lookup structures over shared
//! sketches, and the decision for one event.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tollgate_sketch::{BuildError, Moment, Prepared, RateSketch, Stats, Tick};

use crate::ahead::CountedAhead;
use crate::budget::{self, Counts};
use crate::config::Config;
use crate::counter::Counter;
use crate::fade::Halves;
use crate::key::{KeyHead, LimitKey, RuleId, Source};
use crate::overlay::{ListEntry, ListKind, RuntimeLists};
use crate::packet::{PacketInfo, Protocol, parse_source};
use crate::penalty::Penalty;
use crate::prefix::Prefix;
use crate::prefix_map::PrefixMap;
use crate::remote::{Before, Remote, Rest, Suspect};
use crate::rules::{Action, Cidr, Limit, Rule, Transport, Weight};
use crate::verdict::{Decision, DenyReason, LimitRef, Throttle, Verdict};

mod explanation;

pub use explanation::{Explanation, LimitExplanation, PenaltyState, RuleExplanation};

/// One event to decide on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// Where it came from.
    pub source: Source,
    /// Its transport.
    pub transport: Transport,
    /// Its size in bytes (what `weight = "bytes"` limits count).
    pub bytes: u64,
}

impl Event {
    /// The event a parsed frame stands for: its size is its byte weight.
    #[must_use]
    pub fn from_packet(packet: &PacketInfo) -> Event {
        Event {
            source: packet.source,
            transport: packet.protocol.into(),
            bytes: packet.frame_len as u64,
        }
    }

    /// [`Event::from_packet`] of `frame`, whose source and protocol are read.
    #[inline]
    fn of_frame(frame: &[u8], source: Source, protocol: Protocol) -> Event {
        Event {
            source,
            transport: protocol.into(),
            bytes: frame.len() as u64,
        }
    }
}

/// Where a source stands under one limit (see [`Policy::estimates`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitEstimate {
    /// The rule and limit.
    pub at: LimitRef,
    /// The limit itself.
    pub limit: Limit,
    /// The prefix the source is counted at under this limit.
    pub prefix: Prefix,
    /// The sliding-window estimate now (an upper bound of the true count, whp close to it, up
    /// to [`EXACT_MULTIPLE`] times the limit plus one; a key counted past that reads at least
    /// it, see [`Policy::decide`]).
    pub estimate: u64,
    /// Whether the key's count reached its cap: the true count is then at least `estimate`
    /// (see [`Throttle::capped`]).
    pub capped: bool,
    /// How long until an event of weight 1 would fit under the limit (the estimate at
    /// `limit - 1`) if the source sends nothing meanwhile; zero if one fits now (see
    /// [`crate::Halves::back_under`]: exact below the cap, never early at it).
    pub back_under: Duration,
}

/// Why a checked config could not be made into a policy.
#[derive(Clone, Debug, PartialEq)]
pub enum PolicyError {
    /// The memory, split between the sketches the limits need, is too small for one of them.
    Memory {
        /// Sketches needed (one per distinct period and penalty).
        sketches: usize,
        /// The sketch's refusal.
        error: BuildError,
    },
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyError::Memory { sketches, error } => write!(
                f,
                "[sketch] memory split between {sketches} sketches (one per distinct period and \
                 penalty) is too small: {error}"
            ),
        }
    }
}

impl std::error::Error for PolicyError {}

/// A limit made ready to decide with.
#[derive(Debug)]
struct Bound {
    limit: Limit,
    /// Its sketch's index in [`Policy::counters`].
    counter: usize,
    /// The count past which its key is not counted exactly (see [`cap`]), for IPv4 sources
    /// then IPv6 ones: its own and that of every limit that shares its key.
    cap: [u64; 2],
}

/// How far above its limit a key is counted exactly: [`EXACT_MULTIPLE`] times the limit. Past
/// `EXACT_MULTIPLE * count + 1` in a window a key is only read (see [`Policy::decide`]), and its
/// estimate is at least that until the next window ends. A reader of estimates that compares
/// them with a multiple of a limit above this one (the proxy's kernel `factor`) must take an
/// estimate above `EXACT_MULTIPLE * count` as over any multiple.
pub const EXACT_MULTIPLE: u64 = 8;

/// Frames per batch in [`Policy::decide_frames`]: enough misses in flight to keep a core's
/// line-fill buffers busy (two limits, about ten lines per frame), few enough that the lines
/// are still in L1 when the frame is decided.
pub const FRAME_BATCH: usize = 16;

/// The most sketch keys of one frame that [`Policy::decide_frames`] prepares in its touch pass
/// for its decide pass (the bench's policy has two); past that, a key is hashed when it is
/// decided.
const KEYS_PER_FRAME: usize = 8;

/// One event's leading steps' keys (see [`Step::leads`]) as [`Policy::touch`] prepared them
/// ([`RateSketch::prepare`]: hashed, window position worked out, hot keys' table consulted,
/// cells fetched), in the order [`Policy::judge_into`] visits them: rule by rule (those of the
/// event's protocol), each rule's steps in order. Only as many as `touch` returns are set.
type FramePrepared = [Option<Prepared>; KEYS_PER_FRAME];

/// How many of [`Policy::touched`]'s sketches get their [`Moment`] worked out once a call of
/// [`Policy::decide_frames`]; a key of a sketch past these (a policy whose touch lists reach
/// more limit periods) is prepared with its tick worked out for it alone.
const CALL_MOMENTS: usize = 4;

/// The [`RateSketch::moment`] of each of the first [`CALL_MOMENTS`] sketches of
/// [`Policy::touched`] at a call's tick (see [`Policy::moments`]), `None` past the last: a
/// call of [`Policy::decide_frames`] has one tick, so a window position and a hot keys' stamp
/// per sketch per call instead of per key. All worked out before the first frame, not on a
/// sketch's first use: the first-use check was a branch per key that the lists' first uses,
/// falling at random in a call, made hard to predict (see the README's filter speed).
type CallMoments = [Option<Moment>; CALL_MOMENTS];

/// The cap a limit of `count` passes to the sketch (`RateSketch::observe_capped`):
/// [`EXACT_MULTIPLE`] times the count, plus one. A key is counted exactly up to it, so every
/// decision, penalty and retry-after for a key that stays there is what an uncapped count
/// gives. A key that passes it in a window only reads its cells from then on (a flood's hot
/// keys cost no compare-and-swap, and two cores share their lines) and reads at least the cap
/// until the next window ends; the exact count would keep it over its limit for at least
/// `1 - 1 / EXACT_MULTIPLE` of that window anyway.
pub(crate) fn cap(count: u64) -> u64 {
    count.saturating_mul(EXACT_MULTIPLE).saturating_add(1)
}

/// A rule made ready to decide with.
#[derive(Debug)]
struct Compiled {
    /// [`Rule::id`], [`Rule::weight`], [`Rule::action`] and [`Rule::shadow`], next to what
    /// the decision path reads with them.
    id: RuleId,
    /// The transports [`Rule::protocol`] matches, as bits (see [`transport_bit`]): one bit
    /// test per rule, where matching the rule's protocol against the event's transport let
    /// the compiler split `judge_into`'s rules loop into a copy per transport, picked per
    /// event by a branch that mixed traffic takes at random (see the README's filter speed).
    transports: u8,
    weight: Weight,
    action: Action,
    shadow: bool,
    /// Whether the rule matches every source (`sources` is empty): no lookup.
    every_source: bool,
    sources: PrefixMap<()>,
    /// Its limits, in file order.
    limits: Vec<Bound>,
    /// Its limits ordered by period and prefix length, for IPv4 sources then IPv6 ones:
    /// limits that count the same events are adjacent and share one observe.
    steps: [Vec<Step>; 2],
    /// How many of `steps` lead (see [`Step::leads`]), per family: the keys the touch pass of
    /// [`Policy::decide_frames`] prepares for this rule (see [`Policy::touches`]).
    leads: [usize; 2],
    /// The penalty's length and its two sketches' indices, if the rule has a penalty.
    penalty: Option<(Duration, [usize; 2])>,
    /// [`Rule::shape`], for a cluster's keys.
    shape: u64,
}

/// One limit of a rule as a source of one family meets it (see [`Compiled::steps`]).
#[derive(Debug)]
struct Step {
    /// The limit's index in [`Compiled::limits`].
    limit: usize,
    /// Its key but for the address (`LimitKey::limit` of the rule, the period and the family's
    /// prefix).
    head: KeyHead,
    /// Whether its key differs from the previous step's: the first of a group of limits that
    /// count one key (one period and prefix length), observed once for all of them.
    leads: bool,
    /// Whether the counter ahead ([`Policy::counted_ahead`]) takes the limit for this family:
    /// [`Policy::decide_counted_ahead`] neither counts nor compares it. The same for every
    /// step of a group (one rule, period and prefix length).
    ahead: bool,
}

/// A leading step of a rule as [`Policy::touch`] reads it: its key's head, its sketch, its
/// cap for the step's family, and its sketch's place in [`Policy::touched`] (so in a call's
/// [`CallMoments`]).
#[derive(Debug)]
struct Touch {
    head: KeyHead,
    sketch: Arc<RateSketch>,
    cap: u64,
    moment: usize,
}

/// An immutable policy: swap a new one in to reload (see [`crate::Filter`]).
#[derive(Debug)]
pub struct Policy {
    config: Config,
    lists: PrefixMap<(bool, Cidr)>,
    /// Whether `lists` holds no network (the config has no allow or deny list): the decision
    /// path then skips its lookup.
    no_lists: bool,
    /// The run-time entries, shared with every policy built from this one.
    runtime: Arc<RuntimeLists>,
    rules: Vec<Compiled>,
    /// What the touch pass of [`Policy::decide_frames`] prepares for an event, by its
    /// transport ([`transport`]) and its source's family ([`family`]): the leading steps of
    /// every rule of that transport, rule by rule, each rule's in order (the order
    /// [`Policy::judge_into`] visits them in), at most [`KEYS_PER_FRAME`].
    touches: [[Vec<Touch>; 2]; 3],
    /// The sketches of `touches`' entries, each once, in order of first use (see
    /// [`Touch::moment`]).
    touched: Vec<Arc<RateSketch>>,
    counters: Vec<Counter>,
    /// The rest of a cluster, if this node is part of one.
    remote: Option<Shared>,
    /// The counter ahead of this policy, if any (see [`CountedAhead`]).
    ahead: Option<CountedAhead>,
}

/// A remote and its suspect threshold, read once.
#[derive(Clone, Debug)]
struct Shared {
    remote: Arc<dyn Remote>,
    threshold: f64,
}

impl Policy {
    /// Builds the policy for `config`; with `previous` and the time of the reload, as a
    /// successor that keeps its counts. Every count of a rule whose name and limits are
    /// unchanged survives, and so does every penalty in force: keys carry the rule's name, the
    /// period and the prefix, never a limit's place in the file, and a sketch whose memory share
    /// changed (a period added or removed re-splits `[sketch] memory`) is read alongside its
    /// successor until its windows have slid out (see the crate's `counter` module). So are
    /// `previous`'s remote and its run-time list entries (one [`RuntimeLists`], shared).
    ///
    /// # Errors
    /// [`PolicyError::Memory`] if the memory is too small for the sketches needed (a config
    /// from [`Config::parse`] has been checked for that).
    pub fn compile(
        config: Config,
        previous: Option<(&Policy, Tick)>,
    ) -> Result<Policy, PolicyError> {
        Policy::compile_reserving(config, previous, true)
    }

    /// [`Policy::compile`] with the limits' reservations (see `budget::Share::builder`) on,
    /// or off for every sketch when `reserves` is false.
    pub(crate) fn compile_reserving(
        config: Config,
        previous: Option<(&Policy, Tick)>,
        reserves: bool,
    ) -> Result<Policy, PolicyError> {
        let shares: Vec<budget::Share> =
            budget::shares(config.memory, &config.periods, &config.rules)
                .into_iter()
                .map(|share| budget::Share {
                    reserves: share.reserves && reserves,
                    ..share
                })
                .collect();
        let counters = shares
            .iter()
            .map(|&share| {
                Counter::succeed(share, previous.map(|(p, now)| (&p.counters[..], now))).map_err(
                    |error| PolicyError::Memory {
                        sketches: shares.len(),
                        error,
                    },
                )
            })
            .collect::<Result<Vec<Counter>, PolicyError>>()?;
        let policy = Policy::assemble(config, &shares, counters);
        let policy = Policy {
            remote: previous.and_then(|(p, _)| p.remote.clone()),
            runtime: previous.map_or_else(Arc::default, |(p, _)| Arc::clone(&p.runtime)),
            ..policy
        };
        Ok(policy.with_counted_ahead(previous.and_then(|(p, _)| p.ahead.clone())))
    }

    /// The policy for `config` over `counters`, one for each of `shares` in order (the
    /// sketches [`budget::shares`] says `config` needs).
    pub(crate) fn assemble(
        config: Config,
        shares: &[budget::Share],
        counters: Vec<Counter>,
    ) -> Policy {
        let index_of = |counts: Counts, window: Duration| {
            shares
                .iter()
                .position(|s| s.counts == counts && s.window == window)
        };
        let rules: Vec<Compiled> = config
            .rules
            .iter()
            .map(|rule| {
                // Limits of one period and prefix length share a key, hence a cap: the
                // largest of theirs, per family.
                let shared_cap = |l: &Limit, prefix: fn(&Limit) -> Prefix| {
                    rule.limits
                        .iter()
                        .filter(|o| o.rate.per == l.rate.per && prefix(o).len() == prefix(l).len())
                        .map(|o| cap(o.rate.count))
                        .max()
                        .unwrap_or(cap(l.rate.count))
                };
                let limits: Vec<Bound> = rule
                    .limits
                    .iter()
                    // Every period has its share (see `budget::shares`): the lookup finds it.
                    .filter_map(|l| {
                        index_of(Counts::Limits, l.rate.per).map(|counter| Bound {
                            limit: *l,
                            counter,
                            cap: [
                                shared_cap(l, |l| l.ipv4_prefix),
                                shared_cap(l, |l| l.ipv6_prefix),
                            ],
                        })
                    })
                    .collect();
                let ordered = |family: Source, prefix: fn(&Limit) -> Prefix| {
                    let mut order: Vec<usize> = (0..limits.len()).collect();
                    order.sort_by_key(|&i| {
                        (limits[i].limit.rate.per, prefix(&limits[i].limit).len())
                    });
                    steps(rule.id, family, &limits, &order, prefix)
                };
                let steps = [
                    ordered(Source::from(std::net::Ipv4Addr::UNSPECIFIED), |l| {
                        l.ipv4_prefix
                    }),
                    ordered(Source::new(std::net::Ipv6Addr::UNSPECIFIED.into()), |l| {
                        l.ipv6_prefix
                    }),
                ];
                let leads = |family: usize| steps[family].iter().filter(|s| s.leads).count();
                Compiled {
                    id: rule.id,
                    transports: [Transport::Tcp, Transport::Udp, Transport::Other]
                        .into_iter()
                        .filter(|&t| rule.protocol.matches(t))
                        .fold(0, |bits, t| bits | transport_bit(t)),
                    weight: rule.weight,
                    action: rule.action,
                    shadow: rule.shadow,
                    every_source: rule.sources.is_empty(),
                    shape: rule.shape(),
                    sources: networks(rule.sources.iter().map(|c| (*c, ()))),
                    leads: [leads(0), leads(1)],
                    steps,
                    limits,
                    penalty: rule.penalty.and_then(|length| {
                        let plain = index_of(Counts::Penalties { shifted: false }, length)?;
                        let shifted = index_of(Counts::Penalties { shifted: true }, length)?;
                        Some((length, [plain, shifted]))
                    }),
                }
            })
            .collect();
        // Deny entries go in last, so an identical network in both lists denies.
        let lists = networks(
            config
                .allow
                .iter()
                .map(|c| (*c, (false, *c)))
                .chain(config.deny.iter().map(|c| (*c, (true, *c)))),
        );
        // The counters the touch lists count into, each once, in order of first use.
        let mut touched = Vec::new();
        let touches = [Transport::Tcp, Transport::Udp, Transport::Other].map(|transport| {
            [0, 1].map(|family| touches(&rules, &counters, transport, family, &mut touched))
        });
        let touched = touched
            .iter()
            .map(|&counter| Arc::clone(counters[counter].shared_sketch()))
            .collect();
        Policy {
            config,
            no_lists: lists.is_empty(),
            lists,
            runtime: Arc::default(),
            rules,
            touches,
            touched,
            counters,
            remote: None,
            ahead: None,
        }
    }

    /// The policy's sketches, one per share.
    pub(crate) fn counters(&self) -> &[Counter] {
        &self.counters
    }

    /// This policy, adding what `remote` reports the rest of a cluster counted to every key
    /// whose local estimate reaches `remote.threshold()` of a limit, and reporting those keys'
    /// events to it (see [`Remote`]).
    #[must_use]
    pub fn with_remote(self, remote: Arc<dyn Remote>) -> Policy {
        let threshold = remote.threshold();
        Policy {
            remote: Some(Shared { remote, threshold }),
            ..self
        }
    }

    /// This policy with `ahead` as the counter in front of it (`None`: no counter ahead):
    /// the limits it takes are left out by [`Policy::decide_counted_ahead`]. Policies built
    /// from this one keep it.
    #[must_use]
    pub fn with_counted_ahead(mut self, ahead: Option<CountedAhead>) -> Policy {
        for (rule, compiled) in self.config.rules.iter().zip(&mut self.rules) {
            for (family, steps) in compiled.steps.iter_mut().enumerate() {
                for step in steps {
                    let limit = &compiled.limits[step.limit].limit;
                    step.ahead = ahead
                        .as_ref()
                        .is_some_and(|ahead| ahead.takes(rule, limit, family == 1));
                }
            }
        }
        self.ahead = ahead;
        self
    }

    /// The counter ahead of this policy, if any (see [`Policy::with_counted_ahead`]).
    #[must_use]
    pub fn counted_ahead(&self) -> Option<&CountedAhead> {
        self.ahead.as_ref()
    }

    /// The run-time allow/deny entries laid over the config's lists (shared with the
    /// policies reloads build from this one).
    #[must_use]
    pub fn runtime_lists(&self) -> &Arc<RuntimeLists> {
        &self.runtime
    }

    /// The list entry deciding for `source` at `now`, from the config's lists and the run-time
    /// entries together: the longest network holding the source decides; at one network a deny
    /// entry wins over an allow one, and a run-time entry is reported before the file's.
    #[must_use]
    pub fn listed(&self, source: Source, now: Tick) -> Option<Listed> {
        let file = self
            .lists
            .longest_match(source)
            .map(|(prefix, &(deny, cidr))| (prefix, kind(deny), (cidr, None)));
        let runtime = self
            .runtime
            .find(source, now)
            .map(|entry| (entry.cidr.prefix, entry.kind, (entry.cidr, Some(entry))));
        pick(file, runtime).map(|(kind, (cidr, entry))| Listed { kind, cidr, entry })
    }

    /// [`Policy::listed`] for the decision path: no reference count taken, and the run-time
    /// entries looked at only when there are some.
    #[inline]
    fn list_verdict(&self, source: Source, now: Tick) -> Option<(ListKind, Cidr)> {
        let file = if self.no_lists {
            None
        } else {
            self.lists
                .longest_match(source)
                .map(|(prefix, &(deny, cidr))| (prefix, kind(deny), cidr))
        };
        let runtime = self.runtime.find_with(source, now, |prefix, entry| {
            (prefix, entry.kind, entry.cidr)
        });
        pick(file, runtime)
    }

    /// The config this policy was built from.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Rule `index` (as in a [`LimitRef`]).
    #[must_use]
    pub fn rule(&self, index: usize) -> Option<&Rule> {
        self.config.rules.get(index)
    }

    /// Bytes held by the policy's sketches.
    #[must_use]
    pub fn memory_bytes(&self) -> usize {
        self.counters.iter().map(Counter::memory_bytes).sum()
    }

    /// Each limit sketch's report on itself (events, front fill, overcount bound), one per
    /// distinct limit period, for metrics (the penalties' are [`Policy::penalty_stats`]).
    #[must_use]
    pub fn sketch_stats(&self, now: Tick) -> Vec<Stats> {
        self.stats(now, |counts| counts == Counts::Limits)
    }

    /// The penalty sketches' reports on themselves, two per distinct penalty length (the
    /// second read at ticks shifted by half the length; see `filter/src/penalty.rs`).
    #[must_use]
    pub fn penalty_stats(&self, now: Tick) -> Vec<Stats> {
        self.stats(now, |counts| counts != Counts::Limits)
    }

    fn stats(&self, now: Tick, which: impl Fn(Counts) -> bool) -> Vec<Stats> {
        self.counters
            .iter()
            .filter(|c| which(c.counts()))
            .map(|c| {
                let sketch = c.sketch();
                if c.counts() == (Counts::Penalties { shifted: true }) {
                    sketch.stats(now + sketch.window() / 2)
                } else {
                    sketch.stats(now)
                }
            })
            .collect()
    }

    /// Where `source` stands under every limit of every rule whose sources it matches, counting
    /// nothing (the admin's point query). Empty if a list decides for it.
    #[must_use]
    pub fn estimates(&self, source: Source, now: Tick) -> Vec<LimitEstimate> {
        if self.list_verdict(source, now).is_some() {
            return Vec::new();
        }
        let mut found = Vec::new();
        for (index, (rule, compiled)) in self.config.rules.iter().zip(&self.rules).enumerate() {
            if !compiled.sources.is_empty() && compiled.sources.longest_match(source).is_none() {
                continue;
            }
            for (limit_index, bound) in compiled.limits.iter().enumerate() {
                let limit = bound.limit;
                let prefix = source.pick(limit.ipv4_prefix, limit.ipv6_prefix);
                let key = LimitKey::limit(rule.id, limit.rate.per, source, prefix);
                let cap = bound.cap[usize::from(!source.addr().is_ipv4())];
                let counter = &self.counters[bound.counter];
                let estimate = counter.estimate_capped(key.as_bytes(), cap, now);
                let target = limit.rate.count.saturating_sub(1);
                let back_under = if estimate > target {
                    let halves = counter.halves(key.as_bytes(), cap, now);
                    back_under(halves, 0, target, &limit, now)
                } else {
                    Duration::ZERO
                };
                found.push(LimitEstimate {
                    at: LimitRef {
                        rule: index,
                        limit: limit_index,
                    },
                    limit,
                    prefix,
                    estimate,
                    capped: estimate >= cap,
                    back_under,
                });
            }
        }
        found
    }

    /// The rules (indices, as in [`LimitRef::rule`]) whose penalty `source` is serving at
    /// `now`, counting nothing (the admin's point query). Empty if a list decides for it.
    #[must_use]
    pub fn penalties(&self, source: Source, now: Tick) -> Vec<usize> {
        let mut found: Vec<usize> = Vec::new();
        for (index, _) in self.penalty_networks(source, now) {
            if found.last() != Some(&index) {
                found.push(index);
            }
        }
        found
    }

    /// As [`Policy::penalties`], with the prefix each penalty in force is keyed at (that of
    /// the limit that started it: every source in `source`'s network at that prefix serves
    /// it), in rule order, each (rule, prefix) once.
    #[must_use]
    pub fn penalty_networks(&self, source: Source, now: Tick) -> Vec<(usize, Prefix)> {
        if self.list_verdict(source, now).is_some() {
            return Vec::new();
        }
        let mut found = Vec::new();
        for (index, (rule, compiled)) in self.config.rules.iter().zip(&self.rules).enumerate() {
            let Some((length, at)) = compiled.penalty.filter(|_| !rule.shadow) else {
                continue;
            };
            if !compiled.sources.is_empty() && compiled.sources.longest_match(source).is_none() {
                continue;
            }
            let penalty = Penalty {
                length,
                sketches: [&self.counters[at[0]], &self.counters[at[1]]],
            };
            for bound in &compiled.limits {
                let prefix = source.pick(bound.limit.ipv4_prefix, bound.limit.ipv6_prefix);
                if !found.contains(&(index, prefix))
                    && penalty.in_force(&LimitKey::penalty(rule.id, length, source, prefix), now)
                {
                    found.push((index, prefix));
                }
            }
        }
        found
    }

    /// Decides on one raw Ethernet frame at `now` (its size is its byte weight). A malformed or
    /// truncated frame is a verdict, `Deny(Malformed)`, never a panic or an error.
    pub fn decide_frame(&self, frame: &[u8], now: Tick) -> Decision {
        let (source, protocol) = match parse_source(frame) {
            Ok(read) => read,
            Err(malformed) => {
                return Decision::of(Verdict::Deny(DenyReason::Malformed(malformed)));
            }
        };
        let mut decision = Decision::of(Verdict::Allow);
        let event = Event::of_frame(frame, source, protocol);
        self.judge_into::<true, false>(&event, now, &[], &mut decision, false);
        decision
    }

    /// Decides on `frames` at `now` and appends one decision per frame, in order, to
    /// `decisions`: the decisions [`Policy::decide_frame`] gives on each in turn. Frames go in
    /// batches of [`FRAME_BATCH`]: every frame of a batch is parsed and the cache lines of its
    /// keys requested first, then each is decided, so the batch's memory misses overlap
    /// instead of coming one frame after another; each key is prepared once, in the first pass
    /// (hashed, its window position and the hot keys' answer worked out: see
    /// [`RateSketch::prepare_at`], at a [`Moment`] worked out once a call for each sketch the
    /// touch pass counts into), and counted with that in the second (see the README's filter
    /// speed for what it gains).
    ///
    /// # Examples
    /// ```
    /// use tollgate_filter::{Config, Policy};
    /// use tollgate_sketch::Tick;
    /// let policy = Policy::compile(Config::parse("")?, None)?;
    /// let mut decisions = Vec::new();
    /// policy.decide_frames(&[&[0u8; 3][..], &[1, 2]], Tick::ZERO, &mut decisions);
    /// assert_eq!(decisions.len(), 2); // two truncated frames, two `Malformed` verdicts
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn decide_frames(&self, frames: &[&[u8]], now: Tick, decisions: &mut Vec<Decision>) {
        decisions.reserve(frames.len());
        // Set for a batch's frames before they are read; only the first `keys[i]` of a
        // frame's prepared keys are ever read.
        let mut events = [None; FRAME_BATCH];
        let mut prepared = [[None; KEYS_PER_FRAME]; FRAME_BATCH];
        let mut keys = [0; FRAME_BATCH];
        let moments = self.moments(now);
        for batch in frames.chunks(FRAME_BATCH) {
            // The batch's decisions are pushed in this pass, in order: a malformed frame's is
            // final, a parsed one's is `Allow` until the decide pass below sets it.
            let first = decisions.len();
            for (((frame, event), prepared), keys) in batch
                .iter()
                .zip(&mut events)
                .zip(&mut prepared)
                .zip(&mut keys)
            {
                match parse_source(frame) {
                    Ok((source, protocol)) => {
                        let parsed = Event::of_frame(frame, source, protocol);
                        *keys = self.touch(&parsed, now, &moments, prepared);
                        *event = Some(parsed);
                        decisions.push(Decision::of(Verdict::Allow));
                    }
                    Err(malformed) => {
                        *event = None;
                        decisions.push(Decision::of(Verdict::Deny(DenyReason::Malformed(
                            malformed,
                        ))));
                    }
                }
            }
            let pushed = decisions.get_mut(first..).unwrap_or_default();
            for (((decision, event), prepared), &keys) in
                pushed.iter_mut().zip(&events).zip(&prepared).zip(&keys)
            {
                if let Some(event) = event {
                    let prepared = prepared.get(..keys).unwrap_or_default();
                    self.judge_into::<true, false>(event, now, prepared, decision, false);
                }
            }
        }
    }

    /// The moments of the sketches a call of [`Policy::decide_frames`] at `now` prepares keys
    /// for (see [`CallMoments`]).
    fn moments(&self, now: Tick) -> CallMoments {
        std::array::from_fn(|i| self.touched.get(i).map(|sketch| sketch.moment(now)))
    }

    /// Prepares the sketch keys deciding `event` counts into `prepared` (see
    /// [`FramePrepared`]): hashes them and requests their cache lines (none for a key already
    /// at its cap at `now`, see [`RateSketch::prepare`]): the sketch cells of every limit of
    /// every rule of its protocol (a rule its source does not match costs a wasted prefetch
    /// and hash, not a wrong decision). A key shared by adjacent limits is hashed and fetched
    /// once. Each key is prepared at its sketch's moment in `moments`, `Self::moments(now)`
    /// (or at `now`, past them). Returns how many keys it prepared.
    fn touch(
        &self,
        event: &Event,
        now: Tick,
        moments: &CallMoments,
        prepared: &mut FramePrepared,
    ) -> usize {
        let source = event.source;
        let touches = &self.touches[transport(event.transport)][family(source)];
        for (slot, touch) in prepared.iter_mut().zip(touches) {
            let hash = touch.sketch.hash(touch.head.key(source).as_bytes());
            // The cap `judge_into` observes this step with; nothing is fetched for a key
            // already at its cap in this window.
            *slot = Some(match moments.get(touch.moment) {
                Some(Some(moment)) => touch.sketch.prepare_at(hash, touch.cap, moment),
                _ => touch.sketch.prepare(hash, touch.cap, now),
            });
        }
        touches.len()
    }

    /// Decides on `event` at `now`, counting it against every limit of every rule it matches
    /// (throttled events count too: a source over its limit stays over while it keeps sending).
    ///
    /// Each key is counted exactly up to [`EXACT_MULTIPLE`] times the largest limit on it, plus
    /// one (the cap); past that in a window it is only read (no write: a flood's hot keys cost
    /// no compare-and-swap), and it reads at least the cap, so stays over its limit, until the
    /// next window ends. Sources up to that multiple of their limit are decided exactly as
    /// without a cap.
    pub fn decide(&self, event: &Event, now: Tick) -> Decision {
        self.judge(event, now, true)
    }

    /// Decides on `event` at `now` as [`Policy::decide`] does, for an event that reached the
    /// policy through the counter ahead of it ([`Policy::with_counted_ahead`]): the limits
    /// that counter takes are neither counted nor compared here (it counted the event and let
    /// it through: the event is under each of them there), so one event is counted once. A
    /// penalty in force still refuses it; every other limit is counted and decided as usual.
    /// Without a counter ahead, the same as [`Policy::decide`].
    pub fn decide_counted_ahead(&self, event: &Event, now: Tick) -> Decision {
        let mut decision = Decision::of(Verdict::Allow);
        self.judge_into::<true, true>(event, now, &[], &mut decision, false);
        decision
    }

    /// The decision `event` would get at `now` if it had already been counted: every limit's
    /// estimate as it stands, counting nothing and starting no penalty. For an event decided
    /// before (a held connection, see the proxy's `delay` action) this says whether its source
    /// is back under its limits.
    pub fn recheck(&self, event: &Event, now: Tick) -> Decision {
        self.judge(event, now, false)
    }

    /// The decision `event` would get at `now` if it came now: every limit's estimate as it
    /// stands plus the event's own weight, counting nothing and starting no penalty (the
    /// admin's `/explain`: what an event from the source would get).
    pub fn peek(&self, event: &Event, now: Tick) -> Decision {
        let mut decision = Decision::of(Verdict::Allow);
        self.judge_into::<false, false>(event, now, &[], &mut decision, true);
        decision
    }

    /// [`Policy::peek`] for an event that would reach the policy through the counter ahead
    /// of it: the limits that counter takes are left out, as [`Policy::decide_counted_ahead`]
    /// leaves them out (the admin's `/explain` while the proxy's XDP program counts ahead).
    pub fn peek_counted_ahead(&self, event: &Event, now: Tick) -> Decision {
        let mut decision = Decision::of(Verdict::Allow);
        self.judge_into::<false, true>(event, now, &[], &mut decision, true);
        decision
    }

    fn judge(&self, event: &Event, now: Tick, count: bool) -> Decision {
        let mut decision = Decision::of(Verdict::Allow);
        if count {
            self.judge_into::<true, false>(event, now, &[], &mut decision, false);
        } else {
            self.judge_into::<false, false>(event, now, &[], &mut decision, false);
        }
        decision
    }

    /// [`Policy::judge`] into `decision` (which holds `Allow` and no shadow verdict), with the
    /// event's first leading keys as [`Policy::touch`] prepared them at `now` (past
    /// `prepared`: hash here). `COUNT` is `judge`'s `count`: a constant, so that deciding
    /// carries no code for reading alone and rechecking none for counting. `peek` (read only,
    /// `COUNT` false) adds the event's weight to every estimate, as counting it would.
    /// `AHEAD`: the event came through the counter ahead, whose limits are skipped (see
    /// [`Policy::decide_counted_ahead`]); a constant, so the other paths carry no test for it.
    fn judge_into<const COUNT: bool, const AHEAD: bool>(
        &self,
        event: &Event,
        now: Tick,
        prepared: &[Option<Prepared>],
        decision: &mut Decision,
        peek: bool,
    ) {
        let source = event.source;
        if let Some((kind, cidr)) = self.list_verdict(source, now) {
            decision.verdict = match kind {
                ListKind::Deny => Verdict::Deny(DenyReason::Listed(cidr)),
                ListKind::Allow => Verdict::Allow,
            };
            return;
        }
        let family = family(source);
        // The place in `prepared` of the next leading step: rules of the event's protocol, in
        // order, as `touch` set them.
        let mut lead = 0;
        let bit = transport_bit(event.transport);
        for (index, compiled) in self.rules.iter().enumerate() {
            if compiled.transports & bit == 0 {
                continue;
            }
            let mut next_lead = lead;
            lead += compiled.leads[family];
            if !compiled.every_source && compiled.sources.longest_match(source).is_none() {
                continue;
            }
            let weight = match compiled.weight {
                Weight::Events => 1,
                Weight::Bytes => event.bytes,
            };
            let enforced_penalty = compiled.penalty.filter(|_| !compiled.shadow);
            // The local estimate of the current group of limits with one period and prefix.
            let mut group = 0;
            for step in &compiled.steps[family] {
                let limit_index = step.limit;
                let bound = &compiled.limits[limit_index];
                let limit = &bound.limit;
                let penalty = enforced_penalty.map(|(length, at)| {
                    let prefix = source.pick(limit.ipv4_prefix, limit.ipv6_prefix);
                    let key = LimitKey::penalty(compiled.id, length, source, prefix);
                    let sketches = [&self.counters[at[0]], &self.counters[at[1]]];
                    (key, Penalty { length, sketches })
                });
                let serving =
                    penalty.is_some_and(|(key, penalty)| self.serving(&key, penalty, now));
                if serving && decision.verdict == Verdict::Allow {
                    decision.verdict = Verdict::Deny(DenyReason::Penalty { rule: index });
                }
                if AHEAD && step.ahead {
                    // Counted and passed by the counter ahead: not counted again. A group's
                    // steps are all ahead or none, so no later step reads `group` unset.
                    if step.leads {
                        next_lead += 1;
                    }
                    continue;
                }
                // Limits of one period and prefix count the same events: one observe for all.
                // The first step of a rule leads: `group` is always set before it is read.
                let (local, first) = if step.leads {
                    let counter = &self.counters[bound.counter];
                    let cap = bound.cap[family];
                    group = if COUNT {
                        let ready = prepared.get(next_lead).copied().flatten();
                        counter.observe_step(|| step.head.key(source), ready, weight, cap, now)
                    } else {
                        counter.estimate_capped(step.head.key(source).as_bytes(), cap, now)
                    };
                    next_lead += 1;
                    (group, true)
                } else {
                    (group, false)
                };
                let mut estimate = local;
                // Without what the others are predicted to have added: a penalty starts only
                // on counts.
                let mut counted_estimate = local;
                if self.remote.is_some() {
                    // The event is reported to the cluster once per key, by the first limit.
                    let counted = if COUNT && first { weight } else { 0 };
                    let rest = self.rest(compiled, step, source, local, counted, now);
                    counted_estimate = local.saturating_add(rest.counted);
                    estimate = counted_estimate.saturating_add(rest.ahead);
                }
                // The event's own weight: in the estimate once counted, or as if counted.
                let own = if COUNT || peek { weight } else { 0 };
                if !COUNT && peek {
                    estimate = estimate.saturating_add(weight);
                }
                if estimate <= limit.rate.count {
                    continue;
                }
                let capped = local >= bound.cap[family];
                // Back under when an event like this one would be allowed: the estimate at
                // `limit - own` (the held event itself, already counted, at `limit`).
                let retry_after = if COUNT && capped {
                    // A flood at its cap: the current window is not known past it, and this
                    // path reads nothing more (see `Halves::back_under`).
                    let halves = Halves {
                        current: Halves::UNKNOWN,
                        previous: 0,
                    };
                    halves.back_under(0, limit.rate.per, now)
                } else {
                    let key = step.head.key(source);
                    let halves =
                        self.counters[bound.counter].halves(key.as_bytes(), bound.cap[family], now);
                    let others = estimate.saturating_sub(local).saturating_sub(own);
                    back_under(
                        halves,
                        others,
                        limit.rate.count.saturating_sub(own),
                        limit,
                        now,
                    )
                };
                let throttle = Throttle {
                    at: LimitRef {
                        rule: index,
                        limit: limit_index,
                    },
                    estimate,
                    allowed: limit.rate.count,
                    retry_after,
                    action: compiled.action,
                    capped,
                };
                if compiled.shadow {
                    decision.shadow_count += 1;
                    let earlier = decision
                        .shadow
                        .is_some_and(|t| t.at.rule != index || t.at.limit < limit_index);
                    if !earlier {
                        decision.shadow = Some(throttle);
                    }
                    continue;
                }
                // Of this rule's limits, the first in file order is the one reported.
                let replace = match decision.verdict {
                    Verdict::Allow => true,
                    Verdict::Throttle(t) => t.at.rule == index && t.at.limit > limit_index,
                    Verdict::Deny(_) => false,
                };
                if replace {
                    decision.verdict = Verdict::Throttle(throttle);
                }
                if let Some((key, penalty)) =
                    penalty.filter(|_| COUNT && !serving && counted_estimate > limit.rate.count)
                {
                    self.start_penalty(&key, penalty, now);
                }
            }
        }
    }

    /// Whether the source whose penalty key is `key` serves `penalty` at `now`: in force here,
    /// or set by another node of the cluster. Out of line, as are [`Policy::rest`] and
    /// [`Policy::start_penalty`]: inlined, their sketch reads and the cluster's calls made
    /// `judge_into` larger and cost every frame instructions, rules with no penalty and
    /// policies with no cluster too (see the README's filter speed).
    #[inline(never)]
    fn serving(&self, key: &LimitKey, penalty: Penalty<'_>, now: Tick) -> bool {
        penalty.in_force(key, now)
            || self
                .remote
                .as_ref()
                .is_some_and(|shared| shared.remote.penalised(key, now))
    }

    /// The rest of the cluster's count for `source` under `step` of the rule `compiled`, whose
    /// local estimate is `local`, `counted` of it from this event (see [`Shared::with_rest`]);
    /// nothing outside a cluster. Out of line (see [`Policy::serving`]).
    #[inline(never)]
    fn rest(
        &self,
        compiled: &Compiled,
        step: &Step,
        source: Source,
        local: u64,
        counted: u64,
        now: Tick,
    ) -> Rest {
        let Some(shared) = &self.remote else {
            return Rest::default();
        };
        let bound = &compiled.limits[step.limit];
        let limit = &bound.limit;
        let counter = &self.counters[bound.counter];
        let key = step.head.key(source);
        shared.with_rest(limit, local, || Suspect {
            key: &key,
            per: limit.rate.per,
            shape: compiled.shape,
            before: Before::new(local, counted, key.as_bytes(), counter, now),
            weight: counted,
            now,
        })
    }

    /// Marks `key` as serving `penalty` from `now` and tells the cluster.
    #[cold]
    #[inline(never)]
    fn start_penalty(&self, key: &LimitKey, penalty: Penalty<'_>, now: Tick) {
        // A mark is read back at once: the rule's other limits at this prefix then see the
        // penalty in force and do not mark again.
        penalty.mark(key, now);
        if let Some(shared) = &self.remote {
            shared.remote.penalty_started(key, penalty.length, now);
        }
    }
}

impl Shared {
    /// The rest of the cluster's count if the key (local estimate `estimate`) is a suspect
    /// under `limit` (reporting the suspect `suspect` builds), or nothing.
    #[inline]
    fn with_rest<'a>(
        &self,
        limit: &Limit,
        estimate: u64,
        suspect: impl FnOnce() -> Suspect<'a>,
    ) -> Rest {
        if (estimate as f64) < self.threshold * limit.rate.count as f64 {
            return Rest::default();
        }
        self.remote.suspect(&suspect())
    }
}

/// The list entry that decides for a source (see [`Policy::listed`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// Allow or deny.
    pub kind: ListKind,
    /// The network that matched, as the file wrote it or as the run-time entry holds it.
    pub cidr: Cidr,
    /// The run-time entry (its reason and expiry); `None`: the entry is the config file's.
    pub entry: Option<Arc<ListEntry>>,
}

fn kind(deny: bool) -> ListKind {
    if deny {
        ListKind::Deny
    } else {
        ListKind::Allow
    }
}

/// Of a file match and a run-time match (each with its network's prefix), the one that
/// decides: the longer network; at equal length deny before allow, then the run-time one.
#[inline]
fn pick<T>(
    file: Option<(Prefix, ListKind, T)>,
    runtime: Option<(Prefix, ListKind, T)>,
) -> Option<(ListKind, T)> {
    match (file, runtime) {
        (Some(f), Some(r)) => {
            let runtime_wins = (r.0.len(), r.1) >= (f.0.len(), f.1);
            let (_, kind, value) = if runtime_wins { r } else { f };
            Some((kind, value))
        }
        (Some((_, kind, value)), None) | (None, Some((_, kind, value))) => Some((kind, value)),
        (None, None) => None,
    }
}

/// The index of `source`'s family in a rule's per-family arrays: 0 for IPv4, 1 for IPv6.
#[inline]
fn family(source: Source) -> usize {
    usize::from(!source.addr().is_ipv4())
}

/// The index of `transport` in [`Policy::touches`].
#[inline]
fn transport(transport: Transport) -> usize {
    match transport {
        Transport::Tcp => 0,
        Transport::Udp => 1,
        Transport::Other => 2,
    }
}

/// The bit of `transport` in [`Compiled::transports`].
#[inline]
fn transport_bit(transport: Transport) -> u8 {
    1 << self::transport(transport)
}

/// [`Policy::touches`] for events over `transport` from sources of `family`: the leading
/// steps (see [`Step::leads`]) of the `rules` of that transport, rule by rule, at most
/// [`KEYS_PER_FRAME`]. `judge_into` observes a group of steps that count one key once, with
/// the key of its first, so only those are prepared; past the last one prepared it hashes.
/// Each entry's counter is found in `touched` (the counters of the lists built so far, each
/// once), or added to it, and the entry's [`Touch::moment`] is its place there.
fn touches(
    rules: &[Compiled],
    counters: &[Counter],
    transport: Transport,
    family: usize,
    touched: &mut Vec<usize>,
) -> Vec<Touch> {
    let leads = rules
        .iter()
        .filter(|compiled| compiled.transports & transport_bit(transport) != 0)
        .flat_map(|compiled| {
            compiled.steps[family]
                .iter()
                .filter(|step| step.leads)
                .map(move |step| (step, &compiled.limits[step.limit]))
        })
        .take(KEYS_PER_FRAME);
    let mut list = Vec::new();
    for (step, bound) in leads {
        let moment = touched
            .iter()
            .position(|&counter| counter == bound.counter)
            .unwrap_or_else(|| {
                touched.push(bound.counter);
                touched.len() - 1
            });
        list.push(Touch {
            head: step.head,
            sketch: Arc::clone(counters[bound.counter].shared_sketch()),
            cap: bound.cap[family],
            moment,
        });
    }
    list
}

/// The steps of a rule's `limits` in `order` for sources of `family`, counted at `prefix`.
fn steps(
    rule: RuleId,
    family: Source,
    limits: &[Bound],
    order: &[usize],
    prefix: fn(&Limit) -> Prefix,
) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::with_capacity(order.len());
    for &limit in order {
        let bound = &limits[limit];
        let head = LimitKey::limit_head(rule, bound.limit.rate.per, family, prefix(&bound.limit));
        // Equal heads give equal keys for every source of the family (see `KeyHead`).
        let leads = steps.last().is_none_or(|previous| previous.head != head);
        steps.push(Step {
            limit,
            head,
            leads,
            ahead: false,
        });
    }
    steps
}

fn networks<V>(entries: impl Iterator<Item = (Cidr, V)>) -> PrefixMap<V> {
    let mut map = PrefixMap::new();
    for (cidr, value) in entries {
        map.insert(cidr.addr, cidr.prefix, value);
    }
    map
}

/// How long until a key with `halves` here and `others` counted by the rest of the cluster is
/// at `target` under `limit`, with no further event (see [`Halves::back_under`]). The
/// cluster's counts are taken as this window's (they hold longest), so the time is never
/// early for them either.
#[cold]
#[inline(never)]
fn back_under(halves: Halves, others: u64, target: u64, limit: &Limit, now: Tick) -> Duration {
    let with_others = Halves {
        current: halves.current.saturating_add(others),
        ..halves
    };
    with_others.back_under(target, limit.rate.per, now)
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    /// A config whose memory cannot hold its sketches (one not checked by `Config::parse`) is
    /// refused with how many sketches were to share it and the sketch's own refusal.
    #[test]
    fn memory_too_small_is_refused_with_the_sketches_it_was_split_between() {
        let mut config = Config::parse(
            "[[rule]]\nname = \"r\"\nlimits = [{ rate = \"1/1s\" }, { rate = \"1/1m\" }]\n",
        )
        .unwrap();
        config.memory = 1 << 10;
        let error = Policy::compile(config, None).unwrap_err();
        let PolicyError::Memory {
            sketches,
            error: refusal,
        } = &error;
        assert_eq!(*sketches, 2);
        assert_eq!(
            error.to_string(),
            format!(
                "[sketch] memory split between 2 sketches (one per distinct period and penalty) \
                 is too small: {refusal}"
            )
        );
    }

    /// The limits' stats are those of their sketch at `now`; of a penalty's two sketches the
    /// second is read half a length ahead, and so are its stats.
    #[test]
    fn penalty_stats_read_the_shifted_sketch_half_a_length_ahead() {
        let config = Config::parse(
            "[sketch]\nmemory = \"1MiB\"\n[[rule]]\nname = \"r\"\n\
             limits = [{ rate = \"1/10s\" }]\npenalty = \"600s\"\n",
        )
        .unwrap();
        let policy = Policy::compile(config, None).unwrap();
        let now = Tick::from_nanos(400_000_000_000);
        let windows = |stats: Vec<Stats>| -> Vec<(u64, u64)> {
            stats
                .iter()
                .map(|s| (s.window.as_secs(), s.window_index))
                .collect()
        };
        assert_eq!(windows(policy.sketch_stats(now)), [(10, 40)]);
        // 400 s is in window 0 of 600 s; 400 + 300 s in window 1.
        assert_eq!(windows(policy.penalty_stats(now)), [(600, 0), (600, 1)]);
    }

    /// The rest of a cluster predicts `ahead` events for every suspect, and counted none.
    #[derive(Debug)]
    struct Ahead(u64);

    impl Remote for Ahead {
        fn threshold(&self) -> f64 {
            0.5
        }

        fn suspect(&self, _: &Suspect<'_>) -> Rest {
            Rest {
                counted: 0,
                ahead: self.0,
            }
        }
    }

    /// A prediction throttles but a penalty starts only on counts over the limit: not at the
    /// limit, from one event past it.
    #[test]
    fn a_penalty_starts_one_counted_event_past_the_limit_whatever_is_predicted() {
        let config = Config::parse(
            "[sketch]\nmemory = \"1MiB\"\n[[rule]]\nname = \"r\"\n\
             limits = [{ rate = \"4/10s\" }]\npenalty = \"60s\"\n",
        )
        .unwrap();
        let policy = Policy::compile(config, None)
            .unwrap()
            .with_remote(Arc::new(Ahead(100)));
        let source = Source::from(Ipv4Addr::new(192, 0, 2, 1));
        let event = Event {
            source,
            transport: Transport::Tcp,
            bytes: 60,
        };
        for _ in 0..4 {
            let _ = policy.decide(&event, Tick::ZERO);
        }
        assert!(matches!(
            policy.recheck(&event, Tick::ZERO).verdict,
            Verdict::Throttle(_)
        ));
        assert_eq!(policy.penalties(source, Tick::ZERO), []);
        let _ = policy.decide(&event, Tick::ZERO);
        assert_eq!(policy.penalties(source, Tick::ZERO), [0]);
    }

    /// The touch pass prepares one key per leading step of the rules of the event's protocol,
    /// and says how many: `judge_into` counts with exactly those (a count of none would only
    /// send every key back to be hashed again, which no decision shows).
    #[test]
    fn touch_prepares_one_key_per_leading_step_of_the_events_rules() {
        let config = Config::parse(
            "[sketch]\nmemory = \"1MiB\"\n\
             [[rule]]\nname = \"tcp\"\nprotocol = \"tcp\"\n\
             limits = [{ rate = \"10/1s\" }, { rate = \"20/1s\" }, { rate = \"100/60s\" }]\n\
             [[rule]]\nname = \"udp\"\nprotocol = \"udp\"\nlimits = [{ rate = \"10/1s\" }]\n",
        )
        .unwrap();
        let policy = Policy::compile(config, None).unwrap();
        let event = |transport| Event {
            source: Source::from(Ipv4Addr::new(192, 0, 2, 1)),
            transport,
            bytes: 60,
        };
        let mut prepared: FramePrepared = [None; KEYS_PER_FRAME];
        // The two 1 s limits share one key: two keys for TCP.
        assert_eq!(
            policy.touch(
                &event(Transport::Tcp),
                Tick::ZERO,
                &policy.moments(Tick::ZERO),
                &mut prepared
            ),
            2
        );
        assert!(prepared[..2].iter().all(Option::is_some) && prepared[2].is_none());
        let mut prepared: FramePrepared = [None; KEYS_PER_FRAME];
        assert_eq!(
            policy.touch(
                &event(Transport::Udp),
                Tick::ZERO,
                &policy.moments(Tick::ZERO),
                &mut prepared
            ),
            1
        );
        assert!(prepared[0].is_some() && prepared[1].is_none());
    }

    /// Every touch list's entry finds its own sketch at its moment's place, and the sketches
    /// a call works moments out for are the touch lists' ones, each once: two periods, two
    /// sketches, whichever lists reach them.
    #[test]
    fn each_touch_reads_the_moment_of_its_own_sketch() {
        let config = Config::parse(
            "[sketch]\nmemory = \"1MiB\"\n\
             [[rule]]\nname = \"tcp\"\nprotocol = \"tcp\"\n\
             limits = [{ rate = \"10/1s\" }, { rate = \"100/60s\" }]\n\
             [[rule]]\nname = \"udp\"\nprotocol = \"udp\"\n\
             limits = [{ rate = \"100/60s\" }, { rate = \"10/1s\" }]\n",
        )
        .unwrap();
        let policy = Policy::compile(config, None).unwrap();
        assert_eq!(policy.touched.len(), 2);
        assert!(!Arc::ptr_eq(&policy.touched[0], &policy.touched[1]));
        let entries: Vec<&Touch> = policy.touches.iter().flatten().flatten().collect();
        assert_eq!(entries.len(), 8);
        for touch in entries {
            assert!(Arc::ptr_eq(&policy.touched[touch.moment], &touch.sketch));
        }
        let moments = policy.moments(Tick::ZERO);
        assert!(moments[..2].iter().all(Option::is_some) && moments[2].is_none());
    }
}
