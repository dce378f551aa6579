//! The filter's shared mutable things: the current policy, swapped whole on reload, the lock
//! that lets one reload at a time build on it, and the atomics of the suspects table. Under
//! `--cfg loom` all come from loom.
//!
//! Normally an [`arc_swap::ArcSwap`]: readers take no lock and never wait for a reload. arc-swap
//! is not loom-instrumented, so under `--cfg loom` it is a loom `RwLock<Arc<T>>`, which lets the
//! models in `tests/loom` check that a decide racing a reload sees one policy whole.

use std::sync::Arc;

#[cfg(loom)]
pub(crate) use loom::sync::Mutex;
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::Mutex;
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// An atomically replaceable `Arc<T>`.
#[derive(Debug)]
pub(crate) struct Swap<T> {
    #[cfg(not(loom))]
    inner: arc_swap::ArcSwap<T>,
    #[cfg(loom)]
    inner: loom::sync::RwLock<Arc<T>>,
}

impl<T> Swap<T> {
    pub(crate) fn new(value: Arc<T>) -> Swap<T> {
        Swap {
            #[cfg(not(loom))]
            inner: arc_swap::ArcSwap::new(value),
            #[cfg(loom)]
            inner: loom::sync::RwLock::new(value),
        }
    }

    /// The current value (a reference count taken; for the hot path use `with`).
    pub(crate) fn load(&self) -> Arc<T> {
        #[cfg(not(loom))]
        return self.inner.load_full();
        #[cfg(loom)]
        return Arc::clone(&self.inner.read().unwrap_or_else(|e| e.into_inner()));
    }

    /// Runs `f` on the current value without taking a reference count.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        #[cfg(not(loom))]
        return f(&self.inner.load());
        #[cfg(loom)]
        return f(&self.inner.read().unwrap_or_else(|e| e.into_inner()));
    }

    pub(crate) fn store(&self, value: Arc<T>) {
        #[cfg(not(loom))]
        self.inner.store(value);
        #[cfg(loom)]
        {
            *self.inner.write().unwrap_or_else(|e| e.into_inner()) = value;
        }
    }
}
