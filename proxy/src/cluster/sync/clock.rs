//! The clock readings: how far this node's window edges may be from Redis's clock, and
//! whether the next round may share.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{ALONE_LOG_EVERY, Syncer};
use crate::cluster::view::View;

impl Syncer {
    /// Records a `TIME` reading of `redis_ns` whose window edges are off by up to `error`:
    /// the metrics, and whether the next round may share (logged, within the budget, when
    /// that changes).
    pub(super) fn clock_read(&mut self, redis_ns: u64, error: Duration) {
        let config = &self.cluster.config;
        let metrics = &self.cluster.metrics;
        let wall_ns = crate::unix_time::unix_ns();
        metrics
            .clock_offset
            .set((redis_ns as f64 - wall_ns as f64) / 1e9);
        metrics.clock_error.set(error.as_secs_f64());
        let refuse = error > config.max_clock_error;
        if refuse {
            metrics.clock_refusals.inc();
            if !self.view.is_empty() {
                self.view.clear();
                self.cluster.view.store(Arc::new(View::default()));
            }
        }
        let due = self
            .clock_logged
            .is_none_or(|at| at.elapsed() >= ALONE_LOG_EVERY);
        if refuse && (!self.clock_refused || due) {
            tracing::warn!(
                cluster = %config.name,
                node = %config.node,
                redis = %self.address(),
                error_ms = error.as_millis(),
                max_clock_error_ms = config.max_clock_error.as_millis(),
                "cluster: this node's windows may be further from Redis's clock than \
                 max_clock_error; not sharing counts until a reading agrees"
            );
            self.clock_logged = Some(Instant::now());
        } else if !refuse && self.clock_refused {
            tracing::info!(
                cluster = %config.name,
                node = %config.node,
                error_ms = error.as_millis(),
                "cluster: clock reading within max_clock_error again; sharing counts"
            );
            self.clock_logged = None;
        }
        metrics.clock_refused.set(i64::from(refuse));
        self.clock_refused = refuse;
    }
}
