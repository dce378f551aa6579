//! Listeners and relaying: what stands between a client and its upstream.
//!
//! A TCP listener accepts, reads a PROXY header when its peer is trusted, asks the filter, and
//! relays or refuses (`tcp`); a UDP listener keeps a session per source and relays datagrams
//! (`udp`). Both open their sockets the same way (`socket`), reach upstreams through a pool
//! (`upstream`), speak PROXY protocol ([`proxy_protocol`]), and share the process's
//! descriptors by one budget (`descriptors`). The series they count into are in
//! `crate::listener_metrics`, below both them and the gate's door, which counts its verdicts
//! into the same series.

pub(crate) mod descriptors;
pub mod proxy_protocol;
mod serving;
pub(crate) mod socket;
pub(crate) mod tcp;
pub(crate) mod udp;
pub(crate) mod upstream;

pub(crate) use serving::{Running, Serving};
