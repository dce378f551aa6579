//! The data path's door ([`Gate`]: decide and account in one call, a refusal that is not a
//! verdict in another) and what a decision or a refusal is counted in besides the metrics: the
//! open-connection counts per source network (`connections`), the most rejected sources
//! ([`offenders`]) and the budget that keeps rejection logs from flooding the log
//! ([`log_limit`]).

pub(crate) mod ahead;
pub(crate) mod connections;
mod door;
pub(crate) mod log_limit;
pub(crate) mod offenders;

pub(crate) use door::{Decided, Gate};
