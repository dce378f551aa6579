//! The listeners serving now, as bound: the server records each, the admin's status page
//! shows them.

use std::net::SocketAddr;
use std::sync::Mutex;

use crate::config::Protocol;

/// A listener serving now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Running {
    /// Its name (the config's, and its metrics' label).
    pub(crate) name: String,
    /// TCP or UDP.
    pub(crate) protocol: Protocol,
    /// The address it is bound to (the port the system chose for port 0).
    pub(crate) address: SocketAddr,
}

/// The listeners serving now, in the order they were bound.
#[derive(Debug, Default)]
pub(crate) struct Serving(Mutex<Vec<Running>>);

impl Serving {
    /// Records a listener that is bound and serving.
    pub(crate) fn add(&self, listener: Running) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(listener);
    }

    /// The listeners serving now, in the order they were bound.
    #[must_use]
    pub(crate) fn now(&self) -> Vec<Running> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
