//! [`Filter`]: the current policy behind an atomic swap, reloadable while deciding.

use std::sync::Arc;

use tollgate_sketch::Tick;

use crate::ahead::CountedAhead;
use crate::config::Config;
use crate::overlay::RuntimeLists;
use crate::policy::{Event, Policy, PolicyError};
use crate::remote::Remote;
use crate::sync::{Mutex, Swap};
use crate::verdict::Decision;

/// Decides on events under the current policy; a reload swaps in a new policy whole, keeping
/// the counters of unchanged rules, and a bad one leaves the old in place.
///
/// # Examples
/// ```
/// use std::net::Ipv4Addr;
/// use tollgate_filter::{Config, Event, Filter, Source, Transport, Verdict};
/// use tollgate_sketch::Tick;
/// let filter = Filter::new(Config::parse(r#"
///     [sketch]
///     memory = "1MiB"
///     [[rule]]
///     name = "per-source"
///     limits = [{ rate = "2/10s" }]
/// "#)?)?;
/// let event = Event { source: Source::from(Ipv4Addr::new(192, 0, 2, 7)), transport: Transport::Tcp, bytes: 60 };
/// assert_eq!(filter.decide(&event, Tick::ZERO).verdict, Verdict::Allow);
/// assert_eq!(filter.decide(&event, Tick::ZERO).verdict, Verdict::Allow);
/// assert!(matches!(filter.decide(&event, Tick::ZERO).verdict, Verdict::Throttle(_)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Filter {
    policy: Swap<Policy>,
    /// Held for the whole of a reload (never by a decide): a new policy succeeds the one in
    /// force, so two reloads at once must not both build on the same one.
    reloading: Mutex<()>,
}

impl Filter {
    /// A filter enforcing `config`.
    ///
    /// # Errors
    /// [`PolicyError`] if the config's memory cannot hold the sketches it needs.
    pub fn new(config: Config) -> Result<Filter, PolicyError> {
        Ok(Filter {
            policy: Swap::new(Arc::new(Policy::compile(config, None)?)),
            reloading: Mutex::new(()),
        })
    }

    /// A filter enforcing `config` with the counts of the rest of a cluster from `remote`
    /// added to the keys near their limits (see [`Remote`]); reloads keep the remote.
    ///
    /// # Errors
    /// [`PolicyError`] if the config's memory cannot hold the sketches it needs.
    pub fn with_remote(config: Config, remote: Arc<dyn Remote>) -> Result<Filter, PolicyError> {
        Ok(Filter {
            policy: Swap::new(Arc::new(Policy::compile(config, None)?.with_remote(remote))),
            reloading: Mutex::new(()),
        })
    }

    /// A filter enforcing `config` whose limits never count ahead: [`Filter::new`] with the
    /// reservations off (see `tollgate_sketch::Builder::reserve_shift`), so every event of a
    /// hot source writes its cells. For comparing the two in one process (the threads
    /// benchmark's frames table); [`Filter::new`] is the one to run.
    ///
    /// # Errors
    /// As [`Filter::new`].
    ///
    /// # Examples
    /// ```
    /// use tollgate_filter::{Config, Filter};
    /// let config = Config::parse("[[rule]]\nname = \"all\"\nlimits = [{ rate = \"1000/1s\" }]\n")?;
    /// let filter = Filter::without_reservations(config)?;
    /// # let _ = filter;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn without_reservations(config: Config) -> Result<Filter, PolicyError> {
        Ok(Filter {
            policy: Swap::new(Arc::new(Policy::compile_reserving(config, None, false)?)),
            reloading: Mutex::new(()),
        })
    }

    /// A filter enforcing `policy` (one built by [`Policy::restore`], say).
    #[must_use]
    pub fn from_policy(policy: Policy) -> Filter {
        Filter {
            policy: Swap::new(Arc::new(policy)),
            reloading: Mutex::new(()),
        }
    }

    /// Decides on `event` at `now` under the current policy.
    pub fn decide(&self, event: &Event, now: Tick) -> Decision {
        self.policy.with(|policy| policy.decide(event, now))
    }

    /// Decides on one raw Ethernet frame at `now` under the current policy (see
    /// [`Policy::decide_frame`]).
    pub fn decide_frame(&self, frame: &[u8], now: Tick) -> Decision {
        self.policy.with(|policy| policy.decide_frame(frame, now))
    }

    /// Decides on a batch of raw frames at `now` under the current policy, appending one
    /// decision per frame to `decisions` (see [`Policy::decide_frames`]).
    pub fn decide_frames(&self, frames: &[&[u8]], now: Tick, decisions: &mut Vec<Decision>) {
        self.policy
            .with(|policy| policy.decide_frames(frames, now, decisions));
    }

    /// Replaces the policy with one built from `config` at `now`, keeping the counts and
    /// penalties of every rule whose name and limits are unchanged (see [`Policy::compile`]).
    /// Deciding goes on meanwhile and sees either the old policy or the new one, whole.
    ///
    /// Reloads run one at a time: each builds on the policy the last one stored, so two at
    /// once (a signal and an admin request) end with the second one's policy, counts kept
    /// through both; a refused one changes nothing.
    ///
    /// # Errors
    /// [`PolicyError`]; the old policy then stays in force.
    pub fn reload(&self, config: Config, now: Tick) -> Result<(), PolicyError> {
        // A reload that panicked stored nothing: the policy in force is whole, go on.
        let _one_at_a_time = self.reloading.lock().unwrap_or_else(|e| e.into_inner());
        let next = Policy::compile(config, Some((&self.policy.load(), now)))?;
        self.policy.store(Arc::new(next));
        Ok(())
    }

    /// Decides on `event`, which reached the policy through the counter ahead of it, at
    /// `now` under the current policy (see [`Policy::decide_counted_ahead`]).
    pub fn decide_counted_ahead(&self, event: &Event, now: Tick) -> Decision {
        self.policy
            .with(|policy| policy.decide_counted_ahead(event, now))
    }

    /// Puts `ahead` in front of the current policy (`None`: nothing in front), at `now`:
    /// the policy is rebuilt from its own config, its counts and penalties kept (see
    /// [`Filter::reload`]), with `ahead` marked (see [`Policy::with_counted_ahead`]); later
    /// reloads keep it.
    ///
    /// # Errors
    /// [`PolicyError`] (not for a policy that was built from the same config before); the
    /// policy in force then stays.
    pub fn count_ahead(&self, ahead: Option<CountedAhead>, now: Tick) -> Result<(), PolicyError> {
        let _one_at_a_time = self.reloading.lock().unwrap_or_else(|e| e.into_inner());
        let current = self.policy.load();
        let next = Policy::compile(current.config().clone(), Some((&current, now)))?
            .with_counted_ahead(ahead);
        self.policy.store(Arc::new(next));
        Ok(())
    }

    /// The run-time allow/deny entries (see [`RuntimeLists`]): changes apply to the next
    /// decision and survive reloads.
    #[must_use]
    pub fn lists(&self) -> Arc<RuntimeLists> {
        self.policy
            .with(|policy| Arc::clone(policy.runtime_lists()))
    }

    /// The policy in force.
    #[must_use]
    pub fn policy(&self) -> Arc<Policy> {
        self.policy.load()
    }
}
