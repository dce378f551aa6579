//! `tollgate check` as an operator runs it: the real binary on files.

use std::path::PathBuf;
use std::process::Command;

fn write(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tollgate-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("written");
    path
}

fn check(path: &PathBuf) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["check", "--config"])
        .arg(path)
        .output()
        .expect("tollgate runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

#[test]
fn a_valid_policy_is_printed_and_passes() {
    let path = write(
        "good.toml",
        "[sketch]\nmemory = \"1MiB\"\n[[rule]]\nname = \"per-source\"\nlimits = [{ rate = \"100/10s\" }]\n",
    );
    let (ok, out) = check(&path);
    assert!(ok, "{out}");
    assert!(out.contains("name = \"per-source\""), "{out}");
    assert!(
        out.contains("rate = \"100/10s\", ipv4_prefix = 32, ipv6_prefix = 64"),
        "{out}"
    );
    assert!(out.contains("valid; 1 rule(s)"), "{out}");
}

#[test]
fn every_error_is_located_and_the_exit_code_fails() {
    let path = write(
        "bad.toml",
        "[lists]\ndeny = [\"10.0.0.0/40\"]\n[[rule]]\nname = \"r\"\nlimits = [{ rate = \"0/s\" }]\naction = \"explode\"\n",
    );
    let (ok, out) = check(&path);
    assert!(!ok);
    // toml stops at the unknown variant; the semantic errors come from a file without it.
    assert!(
        out.contains("bad.toml:6:10: unknown variant `explode`"),
        "{out}"
    );
    let path = write(
        "bad2.toml",
        "[lists]\ndeny = [\"10.0.0.0/40\"]\n[[rule]]\nname = \"r\"\nlimits = [{ rate = \"0/s\" }]\n",
    );
    let (ok, out) = check(&path);
    assert!(!ok);
    assert!(
        out.contains(
            "bad2.toml:2:9: `10.0.0.0/40`: prefix length /40 is longer than an IPv4 address"
        ),
        "{out}"
    );
    assert!(
        out.contains("bad2.toml:5:20: `0/s`: a rate of zero allows nothing"),
        "{out}"
    );
    assert!(out.contains("2 error(s); the policy is refused"), "{out}");
}

#[test]
fn a_missing_file_and_a_bad_flag_are_clear_errors() {
    let (ok, out) = check(&PathBuf::from("/nonexistent/policy.toml"));
    assert!(!ok);
    assert!(
        out.contains("/nonexistent/policy.toml: cannot read the policy"),
        "{out}"
    );
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["check", "--konfig", "x"])
        .output()
        .expect("tollgate runs");
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("--konfig"));
}
