//! The task that keeps the kernel's sets up to date: every interval it selects the
//! offenders to hold and sends what is new in one transaction.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::watch;

use crate::config::KernelConfig;
use crate::ops::metrics::KernelMetrics;
use crate::shared::Shared;

use super::element::{Element, SETS, set_of};
use super::ruleset::Ruleset;
use super::selection::select;
use super::table::Table;

/// How many of the offender list's sources are looked at per update (all it keeps).
const CANDIDATES: usize = 256;

/// What the proxy believes the kernel holds, and what to send next.
#[derive(Debug)]
pub struct Updater {
    config: KernelConfig,
    /// Each held network and when its kernel timeout ends.
    held: HashMap<(IpAddr, u8), (Instant, f64)>,
    /// The last transaction failed: the next one empties the sets and sends all that is held.
    resync: bool,
}

/// One transaction to send, and what it adds.
#[derive(Debug, PartialEq)]
pub struct Plan {
    /// nft's input.
    pub text: String,
    /// The elements it adds that were not held before.
    pub new: Vec<Element>,
}

impl Updater {
    /// An updater that holds nothing yet.
    #[must_use]
    pub fn new(config: KernelConfig) -> Updater {
        Updater {
            config,
            held: HashMap::new(),
            resync: false,
        }
    }

    /// The transaction for `chosen` (from [`super::select`]) at `now`, if there is anything
    /// to send: the chosen elements that overlap nothing held, as many as `max_elements`
    /// leaves room for (the rest are counted in `skipped`). Held elements whose timeout has
    /// passed are forgotten (the kernel has let them go).
    pub fn plan(
        &mut self,
        ruleset: &Ruleset,
        chosen: Vec<Element>,
        now: Instant,
        metrics: &KernelMetrics,
    ) -> Option<Plan> {
        self.held.retain(|_, (until, _)| *until > now);
        let mut new: Vec<Element> = Vec::new();
        for element in chosen {
            let held = self.held.keys().copied();
            let mut taken = held.chain(new.iter().map(|n| (n.network, n.len)));
            if taken.any(|(network, len)| element.overlaps(network, len)) {
                continue;
            }
            if self.held.len() + new.len() >= self.config.max_elements {
                metrics.skipped.inc();
                continue;
            }
            new.push(element);
        }
        let text = if self.resync {
            let mut all: Vec<Element> = self
                .held
                .iter()
                .map(|(&(network, len), &(until, weight))| Element {
                    network,
                    len,
                    timeout: until - now,
                    weight,
                })
                .collect();
            all.extend_from_slice(&new);
            ruleset.add(&all, true)
        } else if new.is_empty() {
            return None;
        } else {
            ruleset.add(&new, false)
        };
        Some(Plan { text, new })
    }

    /// Records the outcome of sending `plan` at `now`.
    pub fn committed(&mut self, plan: Plan, ok: bool, now: Instant) {
        if ok {
            for element in plan.new {
                self.held.insert(
                    (element.network, element.len),
                    (now + element.timeout, element.weight),
                );
            }
        }
        self.resync = !ok;
    }

    /// Held elements in `set` (one of [`SETS`]).
    #[must_use]
    pub fn count(&self, set: &str) -> usize {
        let in_set = |&&(network, len): &&(IpAddr, u8)| set_of(network, len) == set;
        self.held.keys().filter(in_set).count()
    }

    /// Updates `table` every `[kernel] interval` until `stop` turns true.
    pub async fn run(
        mut self,
        shared: Arc<Shared>,
        table: Arc<Table>,
        mut stop: watch::Receiver<bool>,
    ) {
        let metrics = shared.metrics.kernel.clone();
        let mut ticks = tokio::time::interval(self.config.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                _ = stop.changed() => return,
            }
            if *stop.borrow() {
                return;
            }
            let sources = shared
                .offenders
                .top(CANDIDATES)
                .into_iter()
                .map(|o| o.source);
            let policy = shared.filter.policy();
            let chosen = select(
                &policy,
                sources,
                self.config.factor,
                shared.now(),
                self.config.max_elements,
            );
            drop(policy);
            let started = Instant::now();
            if let Some(plan) = self.plan(table.ruleset(), chosen, started, &metrics) {
                let sent = Arc::clone(&table);
                let text = plan.text.clone();
                let result = tokio::task::spawn_blocking(move || sent.apply(&text)).await;
                let ok = match result {
                    Ok(Ok(())) => {
                        metrics.updates.inc();
                        metrics.added.inc_by(plan.new.len() as u64);
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
            }
            for set in SETS {
                metrics.set_elements(set, self.count(set));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

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
        let ruleset = Ruleset::new(&config, [80], []);
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
}
