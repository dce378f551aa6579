//! The commands that do not serve traffic: `tollgate check` validates a config ([`check`]),
//! `tollgate demo` shows the filter at work on a synthetic flood (`demo`), and
//! `tollgate replay` runs a capture ([`capture`]) through a policy offline (`replay`).

pub mod capture;
pub mod check;
pub(crate) mod demo;
pub(crate) mod replay;
