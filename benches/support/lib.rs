//! What the load and attack tools share: the upstreams they run in-process, the proxies they
//! start as child processes, what `/proc` says about those, loopback client addresses, and the
//! plain-text table both print; and the limiters the micro-benchmarks size ([`sizes`]).
//!
//! ```no_run
//! use tollgate_benches::usage;
//!
//! // Raise this process's open-file limit to its hard limit, as both tools do first.
//! let limit = usage::raise_nofile()?;
//! println!("open files: {limit}; RSS of pid 1: {:?}", usage::rss_bytes(1));
//! # Ok::<(), std::io::Error>(())
//! ```
#![warn(missing_docs)]

pub mod cpu;
pub mod exit;
pub mod kind;
pub mod launch;
pub mod machine;
pub mod process;
pub mod sizes;
pub mod sources;
pub mod table;
pub mod upstream;
pub mod usage;
