//! Listeners and relaying: what stands between a client and its upstream.
//!
//! A TCP listener accepts, reads a PROXY header when its peer is trusted, asks the filter, and
//! relays or refuses ([`tcp`]); a UDP listener keeps a session per source and relays datagrams
//! ([`udp`]). Both open their sockets the same way ([`socket`]), reach upstreams through a pool
//! ([`upstream`]), speak PROXY protocol ([`proxy_protocol`]), and share the process's
//! descriptors by one budget ([`descriptors`]). Their metrics are theirs ([`metrics`]).

pub mod descriptors;
pub mod metrics;
pub mod proxy_protocol;
mod serving;
pub mod socket;
pub mod tcp;
pub mod udp;
pub mod upstream;

pub use metrics::{ListenerMetrics, ListenerSeries, Offence, Refusal};
pub use serving::{Running, Serving};
