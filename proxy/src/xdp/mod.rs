//! The XDP mode (`[xdp]`): attempts counted and decided at the driver, by a C program
//! (`proxy/bpf/tollgate.bpf.c`) that `build.rs` compiles with clang when clang is there.
//!
//! At start the server loads the program with the kernel's share of the policy
//! (`KernelRules`: one limit per prefix level over one window), has it count only
//! the guarded ports, and attaches it to each interface ([`Attachment::start`]). A task
//! clears the sketch's slice after next once per window ([`attachment::rotate`]); a reload
//! swaps the kernel's rules whole; `/explain` reads the kernel's cells and the metrics its
//! per-CPU counters, each through a `bpf()` syscall (aya's safe map lookups: the workspace
//! forbids `unsafe`, so the cells are not mmapped); SIGTERM detaches. The allow lists are
//! held in the kernel too ([`lists`]: allowed sources pass the driver uncounted, as they
//! pass the proxy), and the program's sampled drop events feed the offender list, the
//! rejection log and the metrics ([`events`], [`follow`]). Without the program,
//! the permission or an interface, the proxy runs without it and says so in one line, or
//! refuses to start when `required`.

mod attachment;
mod events;
mod layout;
mod lists;
mod metrics;
mod program;
mod rules;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_lists_events;

pub(crate) use attachment::{Attachment, rotate};
pub(crate) use events::{Host, follow};
pub(crate) use metrics::XdpMetrics;
pub(crate) use program::XdpError;
