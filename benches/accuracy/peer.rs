//! The limiters compared at equal memory, built by one function so every workload builds them
//! the same way.

use std::time::Duration;

use tollgate_sketch::BuildError;

use crate::limiter::Limiter;
use crate::ours::{Front, Ours};
use crate::pingora::PingoraRate;

/// One of the fixed-memory limiters under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Peer {
    /// Our sketch with its default Bloom front.
    Front,
    /// Our sketch with `front_share(0.0)`.
    Plain,
    /// Our sketch with its default front and 8 rows instead of the default 4: slower per
    /// event, fewer keys fully covered by heavy ones at small budgets.
    Deep,
    /// Our sketch with its default front, counted as the filter counts (capped).
    Capped,
    /// pingora-limits' `Rate`, simulated.
    Pingora,
}

impl Peer {
    /// The limiter over windows of `window` in a budget of `memory_bytes`.
    pub(crate) fn build(
        self,
        window: Duration,
        memory_bytes: usize,
    ) -> Result<Box<dyn Limiter>, BuildError> {
        Ok(match self {
            Peer::Front => Box::new(Ours::new(window, memory_bytes, Front::Default)?),
            Peer::Plain => Box::new(Ours::new(window, memory_bytes, Front::Plain)?),
            Peer::Deep => Box::new(Ours::new(window, memory_bytes, Front::Deep)?),
            Peer::Capped => Box::new(Ours::new(window, memory_bytes, Front::Capped)?),
            Peer::Pingora => Box::new(PingoraRate::new(window, memory_bytes)),
        })
    }
}

/// A mebibyte, the unit budgets are quoted in.
pub(crate) const MIB: usize = 1 << 20;
