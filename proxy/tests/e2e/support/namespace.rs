//! Tests that need a network namespace of their own (the kernel fast path's, the XDP mode's):
//! the test binary runs the one test again inside `unshare`, which marks itself inside by an
//! environment variable, and the outer run checks that the inner one ran it and passed.

use std::process::Command;

/// Runs the test named `exact` (its full path in this binary) again, alone, inside
/// `unshare` with `unshare_args`, with `inside` set in its environment; fails unless that run
/// passed having run exactly this test.
pub(crate) fn rerun_inside(exact: &str, unshare_args: &[&str], inside: &str) {
    let exe = std::env::current_exe().expect("the test binary's path");
    let output = Command::new("unshare")
        .args(unshare_args)
        .arg(exe)
        .args([exact, "--exact", "--include-ignored", "--nocapture"])
        .env(inside, "1")
        .output()
        .expect("unshare runs (util-linux)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    print!("{stdout}");
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    assert!(
        output.status.success(),
        "the test inside the namespace failed: {}",
        output.status
    );
    // A name that matches no test passes with nothing run: the inner run must have run this one.
    assert!(
        stdout.contains("test result: ok. 1 passed"),
        "the run inside the namespace did not run exactly {exact}"
    );
}
