//! The task that keeps the kernel's sets up to date: every interval it selects the
//! offenders to hold and sends what is new in one transaction.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::watch;

use crate::config::KernelConfig;
use crate::metrics::KernelMetrics;
use crate::shared::Shared;

use super::element::Element;
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
        table: &Table,
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
            table.ruleset().add(&all, true)
        } else if new.is_empty() {
            return None;
        } else {
            table.ruleset().add(&new, false)
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

    /// Held elements per set: (`v4`, `v6`).
    #[must_use]
    pub fn counts(&self) -> (usize, usize) {
        let v4 = self.held.keys().filter(|(n, _)| n.is_ipv4()).count();
        (v4, self.held.len() - v4)
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
            if let Some(plan) = self.plan(&table, chosen, started, &metrics) {
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
                self.committed(plan, ok, started);
            }
            let (v4, v6) = self.counts();
            metrics.set_elements("v4", v4);
            metrics.set_elements("v6", v6);
        }
    }
}
