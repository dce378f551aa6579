//! Operating a running proxy: the admin endpoint ([`admin`]), the metrics it serves
//! ([`metrics`]), the list of top offenders ([`offenders`]), the budget that keeps rejection
//! logs from flooding the log ([`log_limit`]), the run-time list entries as a state file keeps
//! them ([`saved_lists`]), and the state file of a warm restart ([`state`]).

pub mod admin;
pub mod log_limit;
pub mod metrics;
pub mod offenders;
pub mod saved_lists;
pub mod state;
