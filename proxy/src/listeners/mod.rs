//! Listeners and relaying: what stands between a client and its upstream.
//!
//! A TCP listener accepts, reads a PROXY header when its peer is trusted, asks the filter, and
//! relays or refuses (`tcp`); a UDP listener keeps a session per source and relays datagrams
//! (`udp`). Both open their sockets the same way (`socket`), reach upstreams through a pool
//! (`upstream`), speak PROXY protocol ([`proxy_protocol`]), and share the process's
//! descriptors by one budget (`descriptors`). Their metrics are theirs (`metrics`).

pub(crate) mod descriptors;
pub(crate) mod metrics;
pub mod proxy_protocol;
mod serving;
pub(crate) mod socket;
pub(crate) mod tcp;
pub(crate) mod udp;
pub(crate) mod upstream;

pub(crate) use metrics::{ListenerMetrics, ListenerSeries, Offence, Refusal};
pub(crate) use serving::{Running, Serving};
