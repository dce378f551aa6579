//! The proxy's resources while it is attacked: a thread reads its open descriptors and RSS
//! from `/proc` every [`EVERY`] and keeps the peaks; CPU time is read at the start and end.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use tollgate_benches::{cpu, usage};

/// How often the sampler looks.
const EVERY: Duration = Duration::from_millis(200);

/// Descriptors and resident bytes at one moment, or the peaks of a span.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Resources {
    pub(crate) fds: u64,
    pub(crate) rss: u64,
}

impl Resources {
    /// Now, for process `pid` and its descendants (zeros if it has exited).
    pub(crate) fn of(pid: u32) -> Resources {
        Resources {
            fds: usage::fds(pid).unwrap_or(0),
            rss: usage::rss_bytes(pid).unwrap_or(0),
        }
    }

    fn max(self, other: Resources) -> Resources {
        Resources {
            fds: self.fds.max(other.fds),
            rss: self.rss.max(other.rss),
        }
    }
}

/// A running sampler; [`Watch::finish`] stops it.
#[derive(Debug)]
pub(crate) struct Watch {
    pid: u32,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Resources>>,
    cpu_start: Option<Duration>,
    started: Instant,
}

/// What a watch saw.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Seen {
    pub(crate) peak: Resources,
    pub(crate) end: Resources,
    /// CPU time over wall time, in percent of one core.
    pub(crate) cpu_percent: Option<f64>,
}

impl Watch {
    /// Starts sampling `pid`.
    pub(crate) fn start(pid: u32) -> Watch {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = thread::Builder::new()
            .name("watch".to_owned())
            .spawn(move || {
                let mut peak = Resources::of(pid);
                // Relaxed: a stop flag; the join that follows is the synchronisation.
                while !flag.load(Ordering::Relaxed) {
                    thread::sleep(EVERY);
                    peak = peak.max(Resources::of(pid));
                }
                peak
            })
            .ok();
        Watch {
            pid,
            stop,
            thread,
            cpu_start: cpu::tree_time(pid).ok(),
            started: Instant::now(),
        }
    }

    /// Stops sampling: the peaks, the last reading and the CPU share.
    pub(crate) fn finish(mut self) -> Seen {
        let wall = self.started.elapsed();
        let cpu_end = cpu::tree_time(self.pid).ok();
        let end = Resources::of(self.pid);
        // Relaxed: see the sampler loop.
        self.stop.store(true, Ordering::Relaxed);
        let peak = self
            .thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
            .max(end);
        let cpu_percent = self
            .cpu_start
            .zip(cpu_end)
            .map(|(a, b)| b.saturating_sub(a).as_secs_f64() * 100.0 / wall.as_secs_f64().max(1e-3));
        Seen {
            peak,
            end,
            cpu_percent,
        }
    }
}
