//! Open connections per source network, counted in a sketch sized by `[proxy]
//! connection_memory`: a listener's per-source and per-prefix caps take a slot at accept and
//! give it back at close.

use tollgate_filter::{LimitKey, Prefix, RuleId, Source};
use tollgate_sketch::{BuildError, ConcurrencySketch};

/// Rows of the open-connection count sketch.
pub(crate) const CONNECTION_DEPTH: usize = 4;

/// The open-connection counts of every listener's sources.
#[derive(Debug)]
pub(crate) struct Connections {
    counts: ConcurrencySketch,
}

impl Connections {
    /// Counts in `memory` bytes.
    pub(crate) fn new(memory: usize) -> Result<Connections, BuildError> {
        Ok(Connections {
            counts: ConcurrencySketch::new(memory, CONNECTION_DEPTH, rand::random())?,
        })
    }

    /// Takes one open-connection slot of the network of `source` (`prefixes`: its IPv4 and
    /// IPv6 lengths) in `scope`, or `None` if that network holds `cap` already. The key returned
    /// gives the slot back through [`Connections::close`].
    #[must_use]
    pub(crate) fn open(
        &self,
        scope: RuleId,
        source: Source,
        prefixes: (Prefix, Prefix),
        cap: u32,
    ) -> Option<LimitKey> {
        let key = LimitKey::new(scope, source, source.pick(prefixes.0, prefixes.1));
        if self.counts.acquire(key.as_bytes()) <= u64::from(cap) {
            Some(key)
        } else {
            self.counts.release(key.as_bytes());
            None
        }
    }

    /// Gives back a slot taken by [`Connections::open`] (once per slot).
    pub(crate) fn close(&self, key: &LimitKey) {
        self.counts.release(key.as_bytes());
    }

    /// Bytes held for the counts.
    #[must_use]
    pub(crate) fn memory_bytes(&self) -> usize {
        self.counts.memory_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MIN_CONNECTION_MEMORY;

    /// The least `[proxy] connection_memory` the config accepts is the least the
    /// open-connection counts can be built in: a smaller floor would let through a size the
    /// start then refuses, a larger one refuse a size that works.
    #[test]
    fn the_least_connection_memory_accepted_is_the_least_the_counts_fit_in() {
        let build = |bytes| ConcurrencySketch::new(bytes, CONNECTION_DEPTH, 0);
        assert!(build(MIN_CONNECTION_MEMORY).is_ok());
        assert!(build(MIN_CONNECTION_MEMORY - 1).is_err());
    }
}
