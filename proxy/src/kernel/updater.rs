//! The task that keeps the kernel's sets up to date: every interval it selects the
//! offenders to hold and sends what is new in one transaction.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::config::KernelConfig;

use tollgate_filter::{Cidr, ListEntry, ListKind};
use tollgate_sketch::Tick;

use super::control::Current;
use super::deny_list::{Network, denied};
use super::element::{Element, SETS, set_of};
use super::host::Host;
use super::metrics::KernelMetrics;
use super::ruleset::{Changes, Ruleset};
use super::selection::select;
use super::table::Table;
use super::wake::Pace;

/// How many of the offender list's sources are looked at per update (all it keeps).
const CANDIDATES: usize = 256;

/// The least time between two updates (or the interval, if shorter): a flood of new
/// offenders, each ringing the [`super::Wake`], still makes at most one transaction per gap.
pub(crate) const GAP: Duration = Duration::from_millis(20);

/// What the proxy believes the kernel holds, and what to send next.
#[derive(Debug)]
pub(crate) struct Updater {
    config: KernelConfig,
    /// Each held offender's network, when its kernel timeout ends, and its weight.
    held: HashMap<Network, (Instant, f64)>,
    /// The denied networks the kernel holds, each with when it stops (`None`: a network of
    /// the file's `deny`, held with no timeout; `Some`: a run-time entry's, held with its
    /// time to live as the element's timeout).
    listed: BTreeMap<Network, Option<Tick>>,
    /// The denied networks the kernel should hold (see [`Updater::deny`]).
    wanted: BTreeMap<Network, Option<Tick>>,
    /// The lists `wanted` was made from: the file's `allow` and `deny`, and the run-time
    /// entries (network, list, expiry).
    lists: Option<Lists>,
    /// The policy's time and the clock's at the last [`Updater::deny`]: a run-time entry's
    /// expiry as an instant.
    anchor: (Tick, Instant),
    /// The last transaction failed: the next one empties the sets and sends all that is held.
    resync: bool,
}

/// The lists [`Updater::wanted`] was made from.
type Lists = (Vec<Cidr>, Vec<Cidr>, Vec<(Cidr, ListKind, Tick)>);

/// One transaction to send, and what it changes.
#[derive(Debug, PartialEq)]
pub(crate) struct Plan {
    /// nft's input.
    pub(crate) text: String,
    /// The offenders it adds that were not held before, and those it holds for longer.
    pub(crate) new: Vec<Element>,
    /// How many of `new` were held before (sent again with a longer timeout).
    pub(crate) longer: usize,
    /// Held offenders it takes out (a `deny` network now covers them in their set).
    pub(crate) displaced: Vec<Network>,
    /// The denied networks the kernel holds once it committed (see [`Updater::deny`]).
    pub(crate) listed: BTreeMap<Network, Option<Tick>>,
}

impl Updater {
    /// An updater that holds nothing yet.
    #[must_use]
    pub(crate) fn new(config: KernelConfig) -> Updater {
        Updater {
            config,
            held: HashMap::new(),
            listed: BTreeMap::new(),
            wanted: BTreeMap::new(),
            lists: None,
            anchor: (Tick::ZERO, Instant::now()),
            resync: false,
        }
    }

    /// Makes the kernel hold what the policy's `allow` and `deny` lists and the run-time
    /// entries in force at `now` (`runtime`, see [`tollgate_filter::RuntimeLists::entries`])
    /// deny together (from the next [`Updater::plan`]), and nothing of what they no longer
    /// deny. A network a run-time `deny` entry decides goes in with the entry's time left as
    /// its timeout, so the kernel lets it go when the entry expires; one the file's `deny`
    /// decides, with none. Cheap when the lists are those of the last call. The denied
    /// networks count towards `max_elements` and come before the offenders; beyond it they
    /// are left out (counted in `skipped`) and refused at accept as before.
    pub(crate) fn deny(
        &mut self,
        allow: &[Cidr],
        deny: &[Cidr],
        runtime: &[ListEntry],
        now: Tick,
        metrics: &KernelMetrics,
    ) {
        self.anchor = (now, Instant::now());
        let entries: Vec<(Cidr, ListKind, Tick)> = runtime
            .iter()
            .map(|e| (e.cidr, e.kind, e.expires))
            .collect();
        if self
            .lists
            .as_ref()
            .is_some_and(|(a, d, r)| a[..] == *allow && d[..] == *deny && *r == entries)
        {
            return;
        }
        let of = |kind: ListKind| {
            entries
                .iter()
                .filter(move |e| e.1 == kind)
                .map(|e| (e.0, e.2))
        };
        let allow_all: Vec<Cidr> = allow
            .iter()
            .copied()
            .chain(of(ListKind::Allow).map(|(c, _)| c))
            .collect();
        let deny_all: Vec<Cidr> = deny
            .iter()
            .copied()
            .chain(of(ListKind::Deny).map(|(c, _)| c))
            .collect();
        let runtime_deny: Vec<(Cidr, Tick)> = of(ListKind::Deny).collect();
        let all = denied(&allow_all, &deny_all);
        let room = self.config.max_elements;
        if all.len() > room {
            metrics.skipped.inc_by((all.len() - room) as u64);
            tracing::warn!(
                networks = all.len(),
                max_elements = room,
                "the deny list needs more kernel elements than max_elements: the rest are \
                 refused at accept"
            );
        }
        self.wanted = all
            .into_iter()
            .take(room)
            .map(|network| (network, expiry(network, deny, &runtime_deny)))
            .collect();
        self.lists = Some((allow.to_vec(), deny.to_vec(), entries));
    }

    /// When a denied network's expiry (a policy time) comes, as an instant.
    fn instant(&self, expires: Tick) -> Instant {
        self.anchor.1 + expires.saturating_since(self.anchor.0)
    }

    /// The transaction for `chosen` (from [`super::select`]) at `now`, if there is anything
    /// to send: the `deny` networks added or dropped since the last commit, the chosen
    /// elements that overlap nothing held, as many as `max_elements` leaves room for (the
    /// rest are counted in `skipped`), and held ones whose timeout grew by more than an
    /// interval (sent again with it). Held elements whose timeout has passed are forgotten
    /// (the kernel has let them go); held elements that a new `deny` network overlaps in
    /// their set are taken out (the kernel refuses overlapping intervals).
    pub(crate) fn plan(
        &mut self,
        ruleset: &Ruleset,
        chosen: Vec<Element>,
        now: Instant,
        metrics: &KernelMetrics,
    ) -> Option<Plan> {
        self.held.retain(|_, (until, _)| *until > now);
        // A network whose expiry changed (an entry added again with another time to live)
        // is taken out and put in again with its new timeout.
        let to_list: Vec<Network> = self
            .wanted
            .iter()
            .filter(|&(k, v)| self.resync || self.listed.get(k) != Some(v))
            .map(|(&k, _)| k)
            .collect();
        let to_unlist: Vec<Network> = if self.resync {
            Vec::new()
        } else {
            self.listed
                .iter()
                .filter(|&(k, v)| self.wanted.get(k) != Some(v))
                .map(|(&k, _)| k)
                .collect()
        };
        let displaced: Vec<Network> = self
            .held
            .keys()
            .copied()
            .filter(|&(n, l)| {
                to_list
                    .iter()
                    .any(|&(dn, dl)| set_of(dn, dl) == set_of(n, l) && overlap((dn, dl), (n, l)))
            })
            .collect();
        let mut room = self
            .config
            .max_elements
            .saturating_sub(self.wanted.len() + self.held.len() - displaced.len());
        let mut new: Vec<Element> = Vec::new();
        let mut longer: Vec<Network> = Vec::new();
        for element in chosen {
            let key = (element.network, element.len);
            if let Some(&(until, _)) = self.held.get(&key).filter(|_| !displaced.contains(&key)) {
                // Held, but events counted since (those that arrived while its transaction
                // was under way) keep it over for longer: sent again with the longer
                // timeout, unless that adds less than an interval.
                if now + element.timeout > until + self.config.interval {
                    longer.push(key);
                    new.push(element);
                }
                continue;
            }
            let held = self.held.keys().filter(|k| !displaced.contains(k)).copied();
            let mut taken = held
                .chain(self.wanted.keys().copied())
                .chain(new.iter().map(|n| (n.network, n.len)));
            if taken.any(|(network, len)| element.overlaps(network, len)) {
                continue;
            }
            if room == 0 {
                metrics.skipped.inc();
                continue;
            }
            room -= 1;
            new.push(element);
        }
        if !self.resync && new.is_empty() && to_list.is_empty() && to_unlist.is_empty() {
            return None;
        }
        let mut timed = new.clone();
        if self.resync {
            timed.extend(
                self.held
                    .iter()
                    .filter(|(k, _)| !displaced.contains(k) && !longer.contains(k))
                    .map(|(&(network, len), &(until, weight))| Element {
                        network,
                        len,
                        timeout: until - now,
                        weight,
                    }),
            );
        }
        let remove: Vec<Network> = if self.resync {
            Vec::new()
        } else {
            // An element held longer is taken out and added again with its new timeout, in
            // the same transaction (nft's `add` leaves an element that is there as it is).
            to_unlist
                .iter()
                .chain(&displaced)
                .chain(&longer)
                .copied()
                .collect()
        };
        // The file's networks go in with no timeout, run-time entries' with their time left
        // (one whose time is up is not sent: the kernel let it go or would at once).
        let mut forever = Vec::new();
        for network in &to_list {
            match self.wanted.get(network).copied().flatten() {
                None => forever.push(*network),
                Some(expires) => {
                    let left = self.instant(expires).saturating_duration_since(now);
                    if !left.is_zero() {
                        timed.push(Element {
                            network: network.0,
                            len: network.1,
                            timeout: left,
                            weight: 0.0,
                        });
                    }
                }
            }
        }
        let text = ruleset.change(&Changes {
            flush: self.resync,
            remove: &remove,
            listed: &forever,
            timed: &timed,
        });
        Some(Plan {
            text,
            longer: longer.len(),
            new,
            displaced,
            listed: self.wanted.clone(),
        })
    }

    /// Records the outcome of sending `plan` at `now`.
    pub(crate) fn committed(&mut self, plan: Plan, ok: bool, now: Instant) {
        if ok {
            for network in &plan.displaced {
                self.held.remove(network);
            }
            for element in plan.new {
                self.held.insert(
                    (element.network, element.len),
                    (now + element.timeout, element.weight),
                );
            }
            self.listed = plan.listed;
        }
        self.resync = !ok;
    }

    /// What the kernel holds, as far as the proxy knows: each network and when its timeout
    /// ends (`None`: a `deny` network, held while listed).
    pub(crate) fn holding(&self) -> impl Iterator<Item = (Network, Option<Instant>)> + '_ {
        let timed = self.held.iter().map(|(&k, &(until, _))| (k, Some(until)));
        timed.chain(
            self.listed
                .iter()
                .map(|(&k, &expires)| (k, expires.map(|e| self.instant(e)))),
        )
    }

    /// Held elements in `set` (one of [`SETS`]), offenders and `deny` networks.
    #[must_use]
    pub(crate) fn count(&self, set: &str) -> usize {
        let in_set = |&&(network, len): &&Network| set_of(network, len) == set;
        self.held.keys().filter(in_set).count() + self.listed.keys().filter(in_set).count()
    }

    /// Updates `table` every `[kernel] interval` until `stop` turns true or `table` is no
    /// longer the one in force in `current` (a reload replaced or deleted it).
    pub(crate) async fn run(
        mut self,
        host: Arc<dyn Host>,
        current: Arc<Current>,
        table: Arc<Table>,
        mut stop: watch::Receiver<bool>,
    ) {
        let metrics = host.metrics().clone();
        let mut ticks = tokio::time::interval(self.config.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let wake = host.wake();
        wake.arm(self.config.factor);
        let mut pace = Pace::new(GAP.min(self.config.interval));
        loop {
            if !pace.next(&mut ticks, wake, &mut stop).await {
                return;
            }
            let sources = host.offenders(CANDIDATES).into_iter();
            let policy = host.filter().policy();
            let now = host.now();
            let runtime = host.filter().lists().entries(now);
            self.deny(
                &policy.config().allow,
                &policy.config().deny,
                &runtime,
                now,
                &metrics,
            );
            let chosen = select(
                &policy,
                sources,
                self.config.factor,
                host.now(),
                self.config.max_elements,
            );
            drop(policy);
            let started = Instant::now();
            if let Some(plan) = self.plan(table.ruleset(), chosen, started, &metrics) {
                let (sent, to) = (Arc::clone(&table), Arc::clone(&current));
                let text = plan.text.clone();
                let result = tokio::task::spawn_blocking(move || to.apply(&sent, &text)).await;
                let ok = match result {
                    // Replaced or deleted by a reload: its successor has its own updater.
                    Ok(Ok(false)) => return,
                    Ok(Ok(true)) => {
                        metrics.updates.inc();
                        metrics.added.inc_by((plan.new.len() - plan.longer) as u64);
                        metrics
                            .update_seconds
                            .observe(started.elapsed().as_secs_f64());
                        true
                    }
                    Ok(Err(err)) => {
                        metrics.errors.inc();
                        tracing::warn!(%err, table = table.ruleset().table(), "kernel update refused; the next one starts the sets over");
                        false
                    }
                    Err(err) => {
                        metrics.errors.inc();
                        tracing::warn!(%err, "kernel update task failed");
                        false
                    }
                };
                // From when nft answered: the kernel's timeouts started at its commit, so the
                // proxy forgets an element no earlier than the kernel lets it go.
                self.committed(plan, ok, Instant::now());
                if ok {
                    host.view().set(self.holding());
                }
            }
            for set in SETS {
                metrics.set_elements(set, self.count(set));
            }
        }
    }
}

/// When the kernel should let `network` (a piece of what the lists deny) go: never (`None`)
/// if the longest `deny` entry around it is the file's (at equal length the file's, which does
/// not expire), else when the run-time entry expires.
fn expiry(network: Network, file: &[Cidr], runtime: &[(Cidr, Tick)]) -> Option<Tick> {
    let around = |cidr: &Cidr| {
        cidr.prefix.len() <= network.1 && overlap(network, (cidr.addr, cidr.prefix.len()))
    };
    let file_len = file
        .iter()
        .filter(|c| around(c))
        .map(|c| c.prefix.len())
        .max();
    let runtime = runtime
        .iter()
        .filter(|(c, _)| around(c))
        .max_by_key(|(c, expires)| (c.prefix.len(), *expires))?;
    match file_len {
        Some(len) if len >= runtime.0.prefix.len() => None,
        _ => Some(runtime.1),
    }
}

/// Whether two networks share an address.
fn overlap(a: Network, b: Network) -> bool {
    let element = Element {
        network: a.0,
        len: a.1,
        timeout: std::time::Duration::ZERO,
        weight: 0.0,
    };
    element.overlaps(b.0, b.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn element(network: &str, len: u8, ms: u64) -> Element {
        Element {
            network: network.parse().unwrap(),
            len,
            timeout: Duration::from_millis(ms),
            weight: 1.0,
        }
    }

    fn setup(max: usize) -> (Updater, Ruleset, KernelMetrics) {
        let config = KernelConfig {
            max_elements: max,
            ..KernelConfig::default()
        };
        let ruleset = Ruleset::new(&config, ["0.0.0.0:80".parse().unwrap()], []);
        (Updater::new(config), ruleset, KernelMetrics::new())
    }

    #[test]
    fn only_what_is_new_is_sent_and_held_elements_are_forgotten_when_they_expire() {
        let (mut updater, ruleset, metrics) = setup(10);
        let now = Instant::now();
        let first = vec![
            element("192.0.2.1", 32, 1000),
            element("198.51.100.0", 24, 500),
        ];
        let plan = updater
            .plan(&ruleset, first.clone(), now, &metrics)
            .unwrap();
        assert_eq!(plan.new, first);
        updater.committed(plan, true, now);
        assert_eq!((updater.count("v4_hosts"), updater.count("v4")), (1, 1));
        // The same again, and an address inside the held /24: nothing to send.
        let again = vec![first[0], element("198.51.100.7", 32, 900)];
        assert_eq!(updater.plan(&ruleset, again.clone(), now, &metrics), None);
        // Once the /24 expired, the address inside it goes in.
        let later = now + Duration::from_millis(600);
        let again = vec![element("192.0.2.1", 32, 400), again[1]];
        let plan = updater.plan(&ruleset, again, later, &metrics).unwrap();
        assert_eq!(plan.new, [element("198.51.100.7", 32, 900)]);
        assert_eq!(
            plan.text,
            "add element inet tollgate v4_hosts { 198.51.100.7 timeout 900ms }\n"
        );
    }

    #[test]
    fn the_sets_never_hold_more_than_max_elements() {
        let (mut updater, ruleset, metrics) = setup(2);
        let now = Instant::now();
        let chosen = vec![
            element("192.0.2.1", 32, 1000),
            element("192.0.2.2", 32, 1000),
            element("192.0.2.3", 32, 1000),
        ];
        let plan = updater
            .plan(&ruleset, chosen.clone(), now, &metrics)
            .unwrap();
        assert_eq!(plan.new, chosen[..2]);
        assert_eq!(metrics.skipped.get(), 1);
        updater.committed(plan, true, now);
        assert_eq!(updater.plan(&ruleset, chosen, now, &metrics), None);
        assert_eq!(metrics.skipped.get(), 2);
    }

    #[test]
    fn after_a_refused_transaction_the_next_starts_the_sets_over() {
        let (mut updater, ruleset, metrics) = setup(10);
        let now = Instant::now();
        let plan = updater
            .plan(
                &ruleset,
                vec![element("192.0.2.1", 32, 1000)],
                now,
                &metrics,
            )
            .unwrap();
        updater.committed(plan, true, now);
        let plan = updater
            .plan(
                &ruleset,
                vec![element("192.0.2.2", 32, 1000)],
                now,
                &metrics,
            )
            .unwrap();
        updater.committed(plan, false, now);
        // Nothing new, yet the sets are flushed and all that is held sent again, with the
        // time it has left.
        let later = now + Duration::from_millis(400);
        let plan = updater.plan(&ruleset, Vec::new(), later, &metrics).unwrap();
        assert!(
            plan.text.starts_with("flush set inet tollgate v4\n"),
            "{}",
            plan.text
        );
        assert!(
            plan.text
                .contains("add element inet tollgate v4_hosts { 192.0.2.1 timeout 600ms }"),
            "{}",
            plan.text
        );
        updater.committed(plan, true, later);
        assert_eq!(updater.plan(&ruleset, Vec::new(), later, &metrics), None);
    }

    fn cidrs(list: &[&str]) -> Vec<Cidr> {
        list.iter().map(|c| Cidr::parse(c).unwrap()).collect()
    }

    #[test]
    fn deny_networks_go_in_without_timeout_and_leave_when_the_list_drops_them() {
        let (mut updater, ruleset, metrics) = setup(10);
        let now = Instant::now();
        // An offender held in the interval set, inside a /16 the list is about to deny.
        let plan = updater
            .plan(&ruleset, vec![element("10.1.2.0", 24, 5000)], now, &metrics)
            .unwrap();
        updater.committed(plan, true, now);
        updater.deny(
            &cidrs(&["10.1.9.0/24"]),
            &cidrs(&["10.1.0.0/16", "192.0.2.7"]),
            &[],
            Tick::ZERO,
            &metrics,
        );
        // The /24 offender overlaps a new deny network in its set: taken out first.
        let plan = updater.plan(&ruleset, Vec::new(), now, &metrics).unwrap();
        assert_eq!(plan.displaced, [("10.1.2.0".parse().unwrap(), 24)]);
        assert!(
            plan.text.starts_with(
                "add element inet tollgate v4 { 10.1.2.0/24 }\n\
                 delete element inet tollgate v4 { 10.1.2.0/24 }\n\
                 add element inet tollgate v4 { 10.1.0.0/21, 10.1.8.0/24, "
            ),
            "{}",
            plan.text
        );
        assert!(
            plan.text
                .ends_with("10.1.128.0/17 }\nadd element inet tollgate v4_hosts { 192.0.2.7 }\n"),
            "{}",
            plan.text
        );
        assert!(!plan.text.contains("timeout"), "{}", plan.text);
        updater.committed(plan, true, now);
        // 10.1/16 minus 10.1.9/24: 8 networks, and the address.
        assert_eq!((updater.count("v4"), updater.count("v4_hosts")), (8, 1));
        // The same lists again: nothing to send; an offender inside a denied network neither.
        let deny = cidrs(&["10.1.0.0/16", "192.0.2.7"]);
        updater.deny(&cidrs(&["10.1.9.0/24"]), &deny, &[], Tick::ZERO, &metrics);
        let inside = vec![element("10.1.3.4", 32, 900)];
        assert_eq!(updater.plan(&ruleset, inside, now, &metrics), None);
        // A reload drops the address: it leaves the kernel, the rest stays.
        updater.deny(
            &cidrs(&["10.1.9.0/24"]),
            &deny[..1],
            &[],
            Tick::ZERO,
            &metrics,
        );
        let plan = updater.plan(&ruleset, Vec::new(), now, &metrics).unwrap();
        assert_eq!(
            plan.text,
            "add element inet tollgate v4_hosts { 192.0.2.7 }\n\
             delete element inet tollgate v4_hosts { 192.0.2.7 }\n"
        );
        updater.committed(plan, true, now);
        assert_eq!((updater.count("v4"), updater.count("v4_hosts")), (8, 0));
        // They never expire: long after, nothing to send, still held.
        let later = now + Duration::from_secs(3600);
        assert_eq!(updater.plan(&ruleset, Vec::new(), later, &metrics), None);
        assert_eq!(updater.count("v4"), 8);
        // They take room: with 8 of 10 used, only two offenders go in.
        let three = vec![
            element("203.0.113.1", 32, 900),
            element("203.0.113.2", 32, 900),
            element("203.0.113.3", 32, 900),
        ];
        let plan = updater.plan(&ruleset, three, later, &metrics).unwrap();
        assert_eq!(plan.new.len(), 2);
    }

    #[test]
    fn a_resync_sends_the_deny_networks_again() {
        let (mut updater, ruleset, metrics) = setup(10);
        let now = Instant::now();
        updater.deny(&[], &cidrs(&["198.51.100.0/24"]), &[], Tick::ZERO, &metrics);
        let plan = updater.plan(&ruleset, Vec::new(), now, &metrics).unwrap();
        updater.committed(plan, false, now);
        let plan = updater.plan(&ruleset, Vec::new(), now, &metrics).unwrap();
        assert!(plan.text.starts_with("flush set"), "{}", plan.text);
        assert!(
            plan.text
                .ends_with("add element inet tollgate v4 { 198.51.100.0/24 }\n"),
            "{}",
            plan.text
        );
    }

    #[test]
    fn a_held_element_whose_estimate_grew_is_sent_again_with_the_longer_timeout() {
        let (mut updater, ruleset, metrics) = setup(10);
        let now = Instant::now();
        let plan = updater
            .plan(
                &ruleset,
                vec![element("192.0.2.1", 32, 1000)],
                now,
                &metrics,
            )
            .unwrap();
        updater.committed(plan, true, now);
        // Within an interval (100 ms) of what is held: nothing.
        let same = vec![element("192.0.2.1", 32, 1050)];
        assert_eq!(updater.plan(&ruleset, same, now, &metrics), None);
        // Longer by more: out and in again, in one transaction.
        let longer = vec![element("192.0.2.1", 32, 3000)];
        let plan = updater.plan(&ruleset, longer, now, &metrics).unwrap();
        assert_eq!(
            plan.text,
            "add element inet tollgate v4_hosts { 192.0.2.1 }\n\
             delete element inet tollgate v4_hosts { 192.0.2.1 }\n\
             add element inet tollgate v4_hosts { 192.0.2.1 timeout 3000ms }\n"
        );
        updater.committed(plan, true, now);
        // Held until then: at 2.5 s it is still held.
        let later = now + Duration::from_millis(2500);
        assert_eq!(updater.plan(&ruleset, Vec::new(), later, &metrics), None);
        assert_eq!(updater.count("v4_hosts"), 1);
    }

    fn entry(cidr: &str, kind: ListKind, expires_s: u64) -> ListEntry {
        ListEntry {
            cidr: Cidr::parse(cidr).unwrap(),
            kind,
            expires: Tick::from_duration(Duration::from_secs(expires_s)),
            reason: "test".into(),
        }
    }

    #[test]
    fn run_time_deny_entries_go_in_with_their_time_left_and_leave_when_removed() {
        let (mut updater, ruleset, metrics) = setup(10);
        let tick = Tick::from_duration(Duration::from_secs(100));
        let file = cidrs(&["198.51.100.0/24"]);
        // A run-time deny entry for 60 s more, one inside the file's /24 (the file's decides:
        // no timeout), and a run-time allow entry that opens a hole in the run-time /16.
        let entries = [
            entry("203.0.113.9", ListKind::Deny, 160),
            entry("198.51.100.7", ListKind::Deny, 130),
            entry("10.2.0.0/16", ListKind::Deny, 110),
            entry("10.2.0.0/17", ListKind::Allow, 200),
        ];
        updater.deny(&[], &file, &entries, tick, &metrics);
        // Planned just after (timeouts are written rounded up to the millisecond).
        let now = Instant::now();
        let plan = updater.plan(&ruleset, Vec::new(), now, &metrics).unwrap();
        assert_eq!(
            plan.text,
            "add element inet tollgate v4 { 198.51.100.0/24, 10.2.128.0/17 timeout 10000ms }\n\
             add element inet tollgate v4_hosts { 203.0.113.9 timeout 60000ms }\n",
            "{}",
            plan.text
        );
        updater.committed(plan, true, now);
        // Held as the kernel holds them: the run-time ones until their entries expire.
        let holding: HashMap<Network, Option<Instant>> = updater.holding().collect();
        let host = ("203.0.113.9".parse().unwrap(), 32);
        let until = holding[&host].expect("a timeout");
        assert!(until <= now + Duration::from_secs(60) && until > now + Duration::from_secs(59));
        // Nothing changed: nothing to send.
        updater.deny(&[], &file, &entries, tick, &metrics);
        assert_eq!(updater.plan(&ruleset, Vec::new(), now, &metrics), None);
        // DELETE of the address, and the /16 expired: both leave (the expired one too, in
        // case the kernel has not let it go yet), the file's /24 stays.
        let later = tick + Duration::from_secs(20);
        updater.deny(&[], &file, &entries[1..2], later, &metrics);
        let plan = updater.plan(&ruleset, Vec::new(), now, &metrics).unwrap();
        assert_eq!(
            plan.text,
            "add element inet tollgate v4 { 10.2.128.0/17 }\n\
             delete element inet tollgate v4 { 10.2.128.0/17 }\n\
             add element inet tollgate v4_hosts { 203.0.113.9 }\n\
             delete element inet tollgate v4_hosts { 203.0.113.9 }\n"
        );
        updater.committed(plan, true, now);
        assert_eq!((updater.count("v4"), updater.count("v4_hosts")), (1, 0));
        // Added again with a longer time to live: out and in with the new timeout.
        let again = [entry("203.0.113.9", ListKind::Deny, 400)];
        updater.deny(&[], &file, &again, later, &metrics);
        let plan = updater
            .plan(&ruleset, Vec::new(), Instant::now(), &metrics)
            .unwrap();
        assert!(
            plan.text
                .ends_with("add element inet tollgate v4_hosts { 203.0.113.9 timeout 280000ms }\n"),
            "{}",
            plan.text
        );
    }

    #[test]
    fn a_held_element_is_forgotten_the_moment_its_timeout_ends() {
        let (mut updater, ruleset, metrics) = setup(10);
        let now = Instant::now();
        let held = vec![element("198.51.100.0", 24, 500)];
        let plan = updater.plan(&ruleset, held, now, &metrics).unwrap();
        updater.committed(plan, true, now);
        // Its timeout started at the commit, before `now`: at its end the kernel let it go,
        // and an address inside it goes in.
        let inside = vec![element("198.51.100.7", 32, 900)];
        let before = now + Duration::from_millis(499);
        assert_eq!(
            updater.plan(&ruleset, inside.clone(), before, &metrics),
            None
        );
        let end = now + Duration::from_millis(500);
        let plan = updater
            .plan(&ruleset, inside.clone(), end, &metrics)
            .unwrap();
        assert_eq!(plan.new, inside);
    }

    #[test]
    fn an_allow_entry_a_reload_adds_alone_cuts_the_denied_network_in_the_kernel() {
        let (mut updater, ruleset, metrics) = setup(10);
        let now = Instant::now();
        let deny = cidrs(&["10.0.0.0/16"]);
        updater.deny(&[], &deny, &[], Tick::ZERO, &metrics);
        let plan = updater.plan(&ruleset, Vec::new(), now, &metrics).unwrap();
        updater.committed(plan, true, now);
        // Same deny list, a new allow: the /16 leaves, the 8 networks around the /24 go in.
        updater.deny(&cidrs(&["10.0.1.0/24"]), &deny, &[], Tick::ZERO, &metrics);
        let plan = updater.plan(&ruleset, Vec::new(), now, &metrics).unwrap();
        assert!(
            plan.text
                .contains("delete element inet tollgate v4 { 10.0.0.0/16 }"),
            "{}",
            plan.text
        );
        updater.committed(plan, true, now);
        assert_eq!(updater.count("v4"), 8);
    }

    #[test]
    fn deny_networks_beyond_max_elements_are_counted_and_leave_no_room_for_offenders() {
        let (mut updater, ruleset, metrics) = setup(3);
        let five = [
            "192.0.2.1",
            "192.0.2.3",
            "192.0.2.5",
            "192.0.2.7",
            "192.0.2.9",
        ];
        updater.deny(&[], &cidrs(&five), &[], Tick::ZERO, &metrics);
        assert_eq!(metrics.skipped.get(), 2);
        let offender = vec![element("203.0.113.1", 32, 900)];
        let plan = updater
            .plan(&ruleset, offender, Instant::now(), &metrics)
            .unwrap();
        assert_eq!((plan.listed.len(), plan.new.len()), (3, 0));
        assert_eq!(metrics.skipped.get(), 3);
    }

    #[test]
    fn a_new_deny_network_takes_out_only_the_held_elements_it_overlaps_in_their_set() {
        let (mut updater, ruleset, metrics) = setup(10);
        let now = Instant::now();
        let held = vec![
            element("203.0.113.0", 24, 5000),
            element("192.0.2.7", 32, 5000),
        ];
        let plan = updater.plan(&ruleset, held, now, &metrics).unwrap();
        updater.committed(plan, true, now);
        // 192.0.2.0/24 goes into `v4`: the address inside it is in `v4_hosts`, the other /24
        // does not overlap it; both stay.
        updater.deny(&[], &cidrs(&["192.0.2.0/24"]), &[], Tick::ZERO, &metrics);
        let plan = updater.plan(&ruleset, Vec::new(), now, &metrics).unwrap();
        assert_eq!(plan.displaced, []);
        assert_eq!(plan.text, "add element inet tollgate v4 { 192.0.2.0/24 }\n");
        updater.committed(plan, true, now);
        assert_eq!((updater.count("v4"), updater.count("v4_hosts")), (2, 1));
    }

    #[test]
    fn a_displaced_element_leaves_its_room_to_a_new_offender() {
        let (mut updater, ruleset, metrics) = setup(3);
        let now = Instant::now();
        let held = vec![
            element("10.1.2.0", 24, 5000),
            element("203.0.113.0", 24, 5000),
        ];
        let plan = updater.plan(&ruleset, held, now, &metrics).unwrap();
        updater.committed(plan, true, now);
        // The denied /16 takes the place of the /24 inside it: one room left.
        updater.deny(&[], &cidrs(&["10.1.0.0/16"]), &[], Tick::ZERO, &metrics);
        let offender = vec![element("192.0.2.1", 32, 900)];
        let plan = updater
            .plan(&ruleset, offender.clone(), now, &metrics)
            .unwrap();
        assert_eq!(plan.displaced, [("10.1.2.0".parse().unwrap(), 24)]);
        assert_eq!(plan.new, offender);
        assert_eq!(metrics.skipped.get(), 0);
    }

    #[test]
    fn a_timeout_longer_by_exactly_an_interval_is_not_sent_again() {
        let (mut updater, ruleset, metrics) = setup(10);
        let now = Instant::now();
        let first = vec![element("192.0.2.1", 32, 1000)];
        let plan = updater.plan(&ruleset, first, now, &metrics).unwrap();
        updater.committed(plan, true, now);
        let by_an_interval = vec![element("192.0.2.1", 32, 1100)];
        assert_eq!(updater.plan(&ruleset, by_an_interval, now, &metrics), None);
        let by_more = vec![element("192.0.2.1", 32, 1101)];
        assert!(updater.plan(&ruleset, by_more, now, &metrics).is_some());
    }

    #[test]
    fn a_resync_sends_a_held_element_whose_timeout_grew_once_with_the_longer_timeout() {
        let (mut updater, ruleset, metrics) = setup(10);
        let now = Instant::now();
        let first = vec![element("192.0.2.1", 32, 1000)];
        let plan = updater.plan(&ruleset, first, now, &metrics).unwrap();
        updater.committed(plan, true, now);
        let refused = vec![element("192.0.2.2", 32, 1000)];
        let plan = updater.plan(&ruleset, refused, now, &metrics).unwrap();
        updater.committed(plan, false, now);
        let longer = vec![element("192.0.2.1", 32, 3000)];
        let plan = updater.plan(&ruleset, longer, now, &metrics).unwrap();
        assert!(
            plan.text
                .ends_with("add element inet tollgate v4_hosts { 192.0.2.1 timeout 3000ms }\n"),
            "{}",
            plan.text
        );
        assert_eq!(plan.text.matches("192.0.2.1").count(), 1, "{}", plan.text);
    }

    #[test]
    fn the_longest_deny_entry_around_a_network_decides_its_timeout_the_file_at_equal_length() {
        let (mut updater, ruleset, metrics) = setup(20);
        let tick = Tick::from_duration(Duration::from_secs(100));
        // The same /24 in the file and at run time: the file's, held with no timeout.
        let same = [entry("198.51.100.0/24", ListKind::Deny, 160)];
        let file = cidrs(&["198.51.100.0/24"]);
        updater.deny(&[], &file, &same, tick, &metrics);
        let plan = updater
            .plan(&ruleset, Vec::new(), Instant::now(), &metrics)
            .unwrap();
        assert_eq!(
            plan.text,
            "add element inet tollgate v4 { 198.51.100.0/24 }\n"
        );
        // A run-time /16 inside the file's /8, cut by an allowed /17: the piece left of it is
        // the run-time entry's (it goes when the entry does), the rest of the /8 the file's.
        let (mut updater, _, _) = setup(20);
        let inside = [entry("10.1.0.0/16", ListKind::Deny, 160)];
        let (allow, file) = (cidrs(&["10.1.0.0/17"]), cidrs(&["10.0.0.0/8"]));
        updater.deny(&allow, &file, &inside, tick, &metrics);
        let plan = updater
            .plan(&ruleset, Vec::new(), Instant::now(), &metrics)
            .unwrap();
        assert!(
            plan.text.contains("10.1.128.0/17 timeout 60000ms"),
            "{}",
            plan.text
        );
        assert_eq!(plan.text.matches("timeout").count(), 1, "{}", plan.text);
    }
}
