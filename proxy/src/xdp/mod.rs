//! The XDP mode: attempts counted and decided at the driver, by a C program
//! (`proxy/bpf/tollgate.bpf.c`) that `build.rs` compiles with clang when clang is there.

// Until the `[xdp]` section starts it, only the tests drive the program.
#![cfg_attr(not(test), allow(dead_code))]

mod layout;
mod program;
#[cfg(test)]
mod tests;
