//! The updater's doorbell: a decision that finds a source over `factor` times a limit (or
//! serving a penalty) rings it, so the source reaches the kernel in one transaction's time
//! instead of waiting for the next `interval` tick. Ringing is two atomic operations; rings
//! before the updater looks coalesce into one.

use std::sync::atomic::{AtomicU64, Ordering};

use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::time::{Instant, Interval};
use tollgate_filter::EXACT_MULTIPLE;

/// The doorbell, shared by the deciding threads and the updater.
#[derive(Debug)]
pub(crate) struct Wake {
    /// The factor in force as `f64` bits; `f64::INFINITY` while no updater runs.
    factor: AtomicU64,
    bell: Notify,
}

impl Default for Wake {
    fn default() -> Wake {
        Wake::new()
    }
}

impl Wake {
    /// A doorbell no updater listens to yet.
    #[must_use]
    pub(crate) fn new() -> Wake {
        Wake {
            factor: AtomicU64::new(f64::INFINITY.to_bits()),
            bell: Notify::new(),
        }
    }

    /// An updater with `factor` listens from now on.
    pub(crate) fn arm(&self, factor: f64) {
        // Relaxed: a ring read against the old factor only rings or stays silent once more;
        // the updater's interval tick catches what a missed ring would have sent.
        self.factor.store(factor.to_bits(), Ordering::Relaxed);
    }

    /// No updater listens (the fast path is off).
    pub(crate) fn disarm(&self) {
        // Relaxed: as in `arm`.
        self.factor
            .store(f64::INFINITY.to_bits(), Ordering::Relaxed);
    }

    /// A decision found a source at `estimate` against a limit of `allowed`: rings if that
    /// reaches the factor, or is past what the filter counts exactly
    /// ([`tollgate_filter::EXACT_MULTIPLE`] times the limit: over any factor, as the
    /// selection takes it).
    pub(crate) fn over(&self, estimate: u64, allowed: u64) {
        // Relaxed: see `arm`.
        let factor = f64::from_bits(self.factor.load(Ordering::Relaxed));
        let capped = estimate > EXACT_MULTIPLE.saturating_mul(allowed);
        // Estimates and limits are far below 2^53: exact as f64.
        #[allow(clippy::cast_precision_loss)]
        if estimate as f64 >= factor * allowed as f64 || (capped && factor.is_finite()) {
            self.bell.notify_one();
        }
    }

    /// A decision found a source serving a penalty: rings if an updater listens.
    pub(crate) fn penalty(&self) {
        // Relaxed: see `arm`.
        if f64::from_bits(self.factor.load(Ordering::Relaxed)).is_finite() {
            self.bell.notify_one();
        }
    }

    /// Waits for a ring (one rung since the last wait counts: rings never get lost, and many
    /// are one).
    pub(crate) async fn rung(&self) {
        self.bell.notified().await;
    }
}

/// When the updater runs: at each interval tick or ring, but at most once per `gap` (the
/// rings and ticks that come meanwhile coalesce into the next run), one run at a time.
#[derive(Debug)]
pub(super) struct Pace {
    gap: Duration,
    last: Option<Instant>,
}

impl Pace {
    /// Runs at least `gap` apart.
    #[must_use]
    pub(super) fn new(gap: Duration) -> Pace {
        Pace { gap, last: None }
    }

    /// Waits for the next run: a tick of `ticks` or a ring of `wake`, then until `gap` after
    /// the last run. `false` once `stop` changed (or its sender is gone): no more runs.
    pub(super) async fn next(
        &mut self,
        ticks: &mut Interval,
        wake: &Wake,
        stop: &mut watch::Receiver<bool>,
    ) -> bool {
        tokio::select! {
            _ = ticks.tick() => {}
            () = wake.rung() => {}
            _ = stop.changed() => return false,
        }
        if let Some(next) = self.last.map(|l| l + self.gap) {
            tokio::select! {
                () = tokio::time::sleep_until(next) => {}
                _ = stop.changed() => return false,
            }
        }
        if *stop.borrow() {
            return false;
        }
        self.last = Some(Instant::now());
        true
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn rings_every_millisecond_make_one_run_per_gap() {
        let wake = Arc::new(Wake::new());
        wake.arm(1.0);
        let (stop_tx, mut stop) = watch::channel(false);
        let runs = tokio::spawn({
            let wake = Arc::clone(&wake);
            async move {
                let mut ticks = tokio::time::interval(Duration::from_secs(3600));
                let mut pace = Pace::new(Duration::from_millis(20));
                let mut runs = Vec::new();
                while pace.next(&mut ticks, &wake, &mut stop).await {
                    runs.push(Instant::now());
                }
                runs
            }
        });
        let start = Instant::now();
        // 100 ms of rings, one a millisecond (the interval's first tick is at once).
        for _ in 0..100 {
            wake.over(10, 1);
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        stop_tx.send(true).unwrap();
        let runs = runs.await.unwrap();
        // The first at once; then the rings run it every 20 ms, never sooner.
        assert_eq!(runs.first(), Some(&start), "{runs:?}");
        for pair in runs.windows(2) {
            assert!(pair[1] - pair[0] >= Duration::from_millis(20), "{runs:?}");
        }
        assert!(
            (5..=6).contains(&runs.len()),
            "{} runs: {runs:?}",
            runs.len()
        );
    }

    async fn rang(wake: &Wake) -> bool {
        tokio::time::timeout(Duration::from_millis(1), wake.rung())
            .await
            .is_ok()
    }

    #[tokio::test(start_paused = true)]
    async fn rings_once_for_many_only_over_the_factor_and_only_when_armed() {
        let wake = Wake::new();
        wake.over(1000, 1);
        wake.penalty();
        assert!(!rang(&wake).await, "no updater: no ring");
        wake.arm(2.0);
        wake.over(19, 10);
        assert!(!rang(&wake).await, "under the factor");
        for _ in 0..100 {
            wake.over(20, 10);
        }
        assert!(rang(&wake).await);
        assert!(!rang(&wake).await, "a hundred rings are one");
        wake.penalty();
        assert!(rang(&wake).await);
        wake.disarm();
        wake.over(1000, 1);
        assert!(!rang(&wake).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_factor_above_what_is_counted_exactly_still_rings_for_a_capped_estimate() {
        let wake = Wake::new();
        wake.arm(20.0);
        wake.over(EXACT_MULTIPLE * 10, 10);
        assert!(!rang(&wake).await, "exact, under the factor");
        wake.over(EXACT_MULTIPLE * 10 + 1, 10);
        assert!(rang(&wake).await, "past the cap: over any factor");
    }
}
