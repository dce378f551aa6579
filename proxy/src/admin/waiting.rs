//! The admin's open connections in the order they arrived, so that at the cap the oldest one
//! still waiting for its request head can be closed to make room for a newcomer.
//!
//! A connection is *waiting* from accept until hyper has read its whole request head, then
//! *answering*; only a waiting one may be *evicted*. Whether the head completes first or the
//! eviction comes first is decided by one compare-and-swap, so a request that is being
//! answered is never cut. A scan of at most `max_connections` entries per eviction (64 by
//! default) under a mutex is cheap next to an accept.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

const WAITING: u8 = 0;
const ANSWERING: u8 = 1;
const EVICTED: u8 = 2;

/// The admin connections open now, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Waiting {
    open: Mutex<VecDeque<Arc<Connection>>>,
}

/// One admin connection's state: waiting, answering or evicted.
#[derive(Debug, Default)]
pub(crate) struct Connection {
    state: AtomicU8,
    evicted: Notify,
}

/// A connection's place in [`Waiting`]; dropping it (when the connection's task ends) takes
/// the connection out.
#[derive(Debug)]
pub(crate) struct Ticket {
    connection: Arc<Connection>,
    waiting: Arc<Waiting>,
}

impl Waiting {
    fn open(&self) -> MutexGuard<'_, VecDeque<Arc<Connection>>> {
        // Nothing panics while the lock is held (a push, a scan, a removal), and the queue is
        // whole between those steps, so a poisoned lock still holds a sound queue.
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Enters a newly accepted connection, waiting for its request head, as the newest.
    pub(crate) fn enter(self: &Arc<Self>) -> Ticket {
        let connection = Arc::new(Connection::default());
        self.open().push_back(Arc::clone(&connection));
        Ticket {
            connection,
            waiting: Arc::clone(self),
        }
    }

    /// Evicts the oldest connection still waiting for its request head: tells its task to
    /// close it ([`Ticket::evicted`]) and takes it out. `false`: every open connection is
    /// being answered (or none is open), nothing was evicted.
    pub(crate) fn evict_oldest(&self) -> bool {
        let mut open = self.open();
        let found = open.iter().position(|connection| {
            // AcqRel/Acquire: only the order between this swap and the one in `answer` on the
            // same atomic matters, and a single atomic's modification order gives it; Acquire
            // and Release cost nothing here and keep the hand-off readable.
            connection
                .state
                .compare_exchange(WAITING, EVICTED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        });
        let Some(index) = found else {
            return false;
        };
        if let Some(connection) = open.remove(index) {
            // A stored permit if its task is not waiting yet: it cannot miss the eviction.
            connection.evicted.notify_one();
        }
        true
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.open().len()
    }
}

impl Connection {
    /// Marks the request head complete: from now on the connection is never evicted.
    /// `false` if it was evicted first (its task is closing it).
    pub(crate) fn answer(&self) -> bool {
        // AcqRel/Acquire: see `evict_oldest`; the two swaps on this one atomic decide which
        // came first.
        match self
            .state
            .compare_exchange(WAITING, ANSWERING, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(state) => state == ANSWERING,
        }
    }
}

impl Ticket {
    /// The connection's state, for the code that sees its request head arrive.
    pub(crate) fn connection(&self) -> Arc<Connection> {
        Arc::clone(&self.connection)
    }

    /// Completes when the connection has been evicted; never otherwise.
    pub(crate) async fn evicted(&self) {
        self.connection.evicted.notified().await;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut open = self.waiting.open();
        if let Some(index) = open
            .iter()
            .position(|connection| Arc::ptr_eq(connection, &self.connection))
        {
            open.remove(index);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future as _;

    use super::*;

    #[test]
    fn the_oldest_waiting_connection_is_evicted_and_answering_ones_never() {
        let waiting = Arc::new(Waiting::default());
        let first = waiting.enter();
        let second = waiting.enter();
        let third = waiting.enter();
        assert!(first.connection().answer());
        assert!(waiting.evict_oldest(), "the second was waiting");
        assert!(!second.connection().answer(), "evicted before its head");
        assert_eq!(waiting.len(), 2);
        assert!(third.connection().answer());
        assert!(
            !waiting.evict_oldest(),
            "every open connection is answering"
        );
        drop(first);
        drop(second);
        assert_eq!(waiting.len(), 1);
        drop(third);
        assert_eq!(waiting.len(), 0);
        assert!(!waiting.evict_oldest(), "none open");
    }

    #[test]
    fn an_eviction_before_the_task_waits_is_not_lost() {
        let waiting = Arc::new(Waiting::default());
        let ticket = waiting.enter();
        assert!(waiting.evict_oldest());
        // Ready at its first poll: the permit was stored.
        let evicted = std::pin::pin!(ticket.evicted());
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(evicted.poll(&mut context).is_ready());
    }

    #[test]
    fn a_connection_is_told_it_was_evicted_only_once_it_was() {
        let waiting = Arc::new(Waiting::default());
        let ticket = waiting.enter();
        let mut evicted = std::pin::pin!(ticket.evicted());
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(evicted.as_mut().poll(&mut context).is_pending());
        assert!(waiting.evict_oldest());
        assert!(evicted.as_mut().poll(&mut context).is_ready());
    }
}
