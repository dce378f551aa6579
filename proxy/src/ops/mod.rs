//! Operating a running proxy: the admin endpoint ([`admin`]), the metrics it serves
//! ([`metrics`]), the list of top offenders ([`offenders`]), and the budget that keeps rejection
//! logs from flooding the log ([`log_limit`]), and the state file of a warm restart
//! ([`state`]).

pub mod admin;
pub mod log_limit;
pub mod metrics;
pub mod offenders;
pub mod state;
