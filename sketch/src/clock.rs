//! Time as the sketch sees it: a [`Tick`] passed in by the caller, never read inside.
//!
//! The sketch and every API above it take `now` as an argument (quinn-proto's style), so tests
//! drive time with a [`ManualClock`] and production uses a [`MonotonicClock`].

use std::fmt;
use std::time::{Duration, Instant};

use crate::sync::{AtomicU64, Ordering};

/// A point in time, in nanoseconds since an origin the caller chooses (usually process start).
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use tollgate_sketch::Tick;
/// let t = Tick::from_nanos(1_500) + Duration::from_micros(1);
/// assert_eq!(t.as_nanos(), 2_500);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tick(u64);

impl Tick {
    /// The origin.
    pub const ZERO: Tick = Tick(0);

    /// A tick `nanos` nanoseconds after the origin.
    #[must_use]
    pub const fn from_nanos(nanos: u64) -> Tick {
        Tick(nanos)
    }

    /// A tick `elapsed` after the origin (saturating at about 584 years).
    #[must_use]
    pub fn from_duration(elapsed: Duration) -> Tick {
        Tick(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX))
    }

    /// Nanoseconds since the origin.
    #[must_use]
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// The time from `earlier` to `self`, zero if `earlier` is later.
    #[must_use]
    pub fn saturating_since(self, earlier: Tick) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl std::ops::Add<Duration> for Tick {
    type Output = Tick;

    fn add(self, rhs: Duration) -> Tick {
        Tick(self.0.saturating_add(Tick::from_duration(rhs).0))
    }
}

impl fmt::Display for Tick {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", Duration::from_nanos(self.0))
    }
}

/// A source of [`Tick`]s.
pub trait Clock: Send + Sync {
    /// The current time. Must never go backwards for one clock.
    fn now(&self) -> Tick;
}

/// The production clock: monotonic time since the clock was made, plus the tick it started
/// at (zero for [`MonotonicClock::new`]).
///
/// # Examples
/// ```
/// use tollgate_sketch::{Clock, MonotonicClock};
/// let clock = MonotonicClock::new();
/// let a = clock.now();
/// assert!(clock.now() >= a);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    origin: Instant,
    start: Tick,
}

impl MonotonicClock {
    /// A clock whose origin is now.
    #[must_use]
    pub fn new() -> MonotonicClock {
        MonotonicClock::starting_at(Tick::ZERO)
    }

    /// A clock that reads `start` now and runs on from there: a process that resumes counting
    /// in the ticks of one before it (a warm restart) starts where that one's clock would be.
    ///
    /// # Examples
    /// ```
    /// use tollgate_sketch::{Clock, MonotonicClock, Tick};
    /// let start = Tick::from_nanos(3_600_000_000_000);
    /// assert!(MonotonicClock::starting_at(start).now() >= start);
    /// ```
    #[must_use]
    pub fn starting_at(start: Tick) -> MonotonicClock {
        MonotonicClock {
            origin: Instant::now(),
            start,
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        MonotonicClock::new()
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> Tick {
        self.start + self.origin.elapsed()
    }
}

/// A clock that moves only when told to: for tests and for replaying captures by their own
/// timestamps.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use tollgate_sketch::{Clock, ManualClock, Tick};
/// let clock = ManualClock::new(Tick::ZERO);
/// clock.advance(Duration::from_secs(3));
/// assert_eq!(clock.now(), Tick::from_nanos(3_000_000_000));
/// ```
#[derive(Debug, Default)]
pub struct ManualClock {
    nanos: AtomicU64,
}

impl ManualClock {
    /// A clock stopped at `start`.
    #[must_use]
    pub fn new(start: Tick) -> ManualClock {
        ManualClock {
            nanos: AtomicU64::new(start.as_nanos()),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let by = Tick::from_duration(by).as_nanos();
        // Relaxed: the clock value is the only data; readers need no other write to be visible.
        self.nanos.fetch_add(by, Ordering::Relaxed);
    }

    /// Sets the clock to `to` (which may be earlier: the clock is the caller's to control).
    pub fn set(&self, to: Tick) {
        // Relaxed: as in `advance`.
        self.nanos.store(to.as_nanos(), Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Tick {
        // Relaxed: as in `advance`.
        Tick::from_nanos(self.nanos.load(Ordering::Relaxed))
    }
}
