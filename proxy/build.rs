//! Names the commit the binary is built from, for `tollgate --version`: `TOLLGATE_COMMIT` is
//! `git rev-parse --short HEAD` of the checkout, or `unknown` where there is no git (a source
//! tarball, a vendored copy). Rebuilt when HEAD moves to another commit or branch.
//!
//! Compiles the vendored rate-limit service protos (`proto/`, see its README) into Rust with
//! protox (a protobuf compiler in Rust: no `protoc` binary) and tonic-prost-build.
//!
//! Compiles the XDP program (`bpf/tollgate.bpf.c`) with clang into `OUT_DIR` and sets
//! `cfg(tollgate_xdp)` so the crate embeds it, when clang is there (`TOLLGATE_CLANG`, or
//! `clang` on PATH). Without clang everything else builds; the XDP mode then says at start
//! that it was built without its program.

use std::path::PathBuf;
use std::process::Command;

/// `git ARGS...` in the crate's directory, its output trimmed; `None` if git is missing, this
/// is not a checkout, or the command fails.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
}

/// The service Envoy calls, and the files it imports from under `proto/`.
const PROTO: &str = "proto/envoy/service/ratelimit/v3/rls.proto";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=proto");
    let descriptors = match protox::compile([PROTO], ["proto"]) {
        Ok(descriptors) => descriptors,
        Err(err) => panic!("{PROTO}: {err}"),
    };
    if let Err(err) = tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)
    {
        panic!("generating the gRPC code of {PROTO}: {err}");
    }
    commit();
    xdp_program();
}

/// The XDP program's source; layout.h is the C half of `src/xdp/layout.rs`, clear.h the
/// rotation's clearing program.
const BPF_SOURCES: [&str; 3] = ["bpf/tollgate.bpf.c", "bpf/layout.h", "bpf/clear.h"];

/// Compiles the XDP program into `OUT_DIR/tollgate.bpf.o` and sets `cfg(tollgate_xdp)`, or
/// says in a warning why not.
fn xdp_program() {
    println!("cargo:rustc-check-cfg=cfg(tollgate_xdp)");
    println!("cargo:rerun-if-env-changed=TOLLGATE_CLANG");
    for source in BPF_SOURCES {
        println!("cargo:rerun-if-changed={source}");
    }
    let clang = std::env::var("TOLLGATE_CLANG").unwrap_or_else(|_| "clang".to_owned());
    let Some(out) = std::env::var_os("OUT_DIR") else {
        return;
    };
    let object = PathBuf::from(out).join("tollgate.bpf.o");
    // -mcpu=v3: the 32-bit atomic fetch-and-add the sketch's cells need. -g: BTF, which
    // describes the maps to the loader.
    let compiled = Command::new(&clang)
        .args([
            "-target", "bpf", "-mcpu=v3", "-O2", "-g", "-Wall", "-Werror", "-c",
        ])
        .arg(BPF_SOURCES[0])
        .arg("-o")
        .arg(&object)
        .output();
    match compiled {
        Ok(out) if out.status.success() => println!("cargo:rustc-cfg=tollgate_xdp"),
        // A clang that cannot build the program is a bug in the program (or a clang too old
        // for BPF v3): said loudly, and the rest still builds.
        Ok(out) => println!(
            "cargo:warning=the XDP program did not compile with `{clang}`, building without it: {}",
            String::from_utf8_lossy(&out.stderr).replace('\n', " ")
        ),
        // No clang: the usual case on a machine that never asked for XDP; silent.
        Err(_) => {}
    }
}

/// `TOLLGATE_COMMIT`, and what to watch to rebuild when it changes.
fn commit() {
    // The workspace's own .git (a directory, or a file in a worktree): not that of a repository
    // the sources happen to be unpacked in.
    let checkout = std::path::Path::new("../.git").exists();
    let commit = checkout
        .then(|| git(&["rev-parse", "--short", "HEAD"]))
        .flatten()
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=TOLLGATE_COMMIT={commit}");
    if commit == "unknown" {
        return;
    }
    // HEAD names the branch (or a commit); the branch's ref file, or packed-refs, names its
    // commit. In a worktree these live in the main repository's .git, so git says where.
    let mut watched = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    if let Some(branch) = git(&["rev-parse", "--symbolic-full-name", "HEAD"]) {
        if branch.starts_with("refs/") {
            watched.push(branch);
        }
    }
    for name in watched {
        let Some(path) = git(&["rev-parse", "--git-path", &name]) else {
            continue;
        };
        // Only files that exist: cargo reruns every build for one that does not.
        let path = PathBuf::from(path);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}
