//! The data path's accounting: what a decision or a refusal is counted in besides the
//! metrics. The open-connection counts per source network ([`connections`]), the most
//! rejected sources ([`offenders`]) and the budget that keeps rejection logs from flooding the
//! log ([`log_limit`]).

pub(crate) mod connections;
pub mod log_limit;
pub mod offenders;
