//! Fuzz harnesses for every parser of outside input: Ethernet frames, PROXY protocol v1/v2
//! headers, config files, descriptor files (the rate-limit service's YAML), capture files,
//! warm-restart state files, admin requests and the cluster's list entries read back from
//! Redis.
//!
//! Each module has one `check(&[u8])` that feeds the bytes to a public parser and asserts its
//! invariants: no panic, errors that stay inside their input, and round trips where an encoder
//! exists. A broken invariant panics, which the fuzzer records as a crash. The AFL targets in
//! `src/bin/` (built with `cargo afl build --features afl`, see `smoke.sh`) are one line each
//! over these functions, and `tests/corpus.rs` replays the kept corpus and every regression
//! file through the same functions under plain `cargo test`.
//!
//! ```
//! // A TCP SYN cut short inside its IPv4 header is a verdict, not a panic.
//! let frame = [[2u8; 12].as_slice(), &[0x08, 0x00, 0x45, 0x00]].concat();
//! tollgate_fuzz::frame::check(&frame);
//! tollgate_fuzz::proxy_header::check(b"PROXY TCP4 203.0.113.7 192.0.2.1 51234 443\r\n");
//! tollgate_fuzz::descriptors::check(b"domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n");
//! tollgate_fuzz::config::check(b"[[rule]]\nname = \"x\"\nlimits = [{ rate = \"0/1s\" }]\n");
//! tollgate_fuzz::capture::check(&[0xd4, 0xc3, 0xb2, 0xa1]);
//! tollgate_fuzz::state::check(b"TGSTATE\0 cut short");
//! tollgate_fuzz::admin::check(b"DELETE /lists/deny?cidr=192.0.2.0%2F24\nAuthorization: Bearer fuzz\n\n");
//! tollgate_fuzz::cluster_lists::check(b"$v1\ndeny 192.0.2.0/24\n{\"until_ms\": 1, \"node\": \"a\", \"reason\": \"\"}");
//! ```

#![warn(missing_docs)]

pub mod admin;
pub mod capture;
pub mod cluster_lists;
pub mod config;
pub mod descriptors;
pub mod frame;
pub mod proxy_header;
pub mod state;
