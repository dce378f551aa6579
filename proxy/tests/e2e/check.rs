//! `tollgate check` as an operator runs it: the real binary on files.

use std::path::PathBuf;
use std::process::Command;

use crate::support;

/// The file `name` holding `text` in a fresh directory, removed when dropped.
fn write(name: &str, text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = support::scratch("check");
    let path = dir.path().join(name);
    std::fs::write(&path, text).expect("written");
    (dir, path)
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

/// Checks `text` as the file `name`: it must fail, and say each of `needles`.
fn refused(name: &str, text: &str, needles: &[&str]) {
    let (_dir, path) = write(name, text);
    let (ok, out) = check(&path);
    assert!(!ok, "{name} passed:\n{out}");
    for needle in needles {
        assert!(out.contains(needle), "{needle} missing from\n{out}");
    }
}

#[test]
fn a_valid_policy_is_printed_and_passes() {
    let (_dir, path) = write(
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
    assert!(out.contains("valid; 0 listener(s), 1 rule(s)"), "{out}");
}

#[test]
fn every_error_is_located_and_the_exit_code_fails() {
    let policy = "[lists]\ndeny = [\"10.0.0.0/40\"]\n[[rule]]\nname = \"r\"\nlimits = [{ rate = \"0/s\" }]\n";
    // toml stops at the unknown variant; the semantic errors come from a file without it.
    refused(
        "bad.toml",
        &format!("{policy}action = \"explode\"\n"),
        &["bad.toml:6:10: unknown variant `explode`"],
    );
    refused(
        "bad2.toml",
        policy,
        &[
            "bad2.toml:2:9: `10.0.0.0/40`: prefix length /40 is longer than an IPv4 address",
            "bad2.toml:5:20: `0/s`: a rate of zero allows nothing",
            "2 error(s); the policy is refused",
        ],
    );
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

#[test]
fn listener_errors_are_located_too() {
    refused(
        "listeners.toml",
        "[[listener]]\nname = \"a\"\nlisten = \"0.0.0.0:99999\"\nupstreams = [\"127.0.0.1:80\"]\n\n\
         [[listener]]\nname = \"a\"\nlisten = \"127.0.0.1:8080\"\nupstreams = []\nprotocol = \"sctp\"\n\n\
         [proxy]\ndrain = \"soon\"\n\n[[rule]]\nname = \"r\"\nlimits = [{ rate = \"0/s\" }]\n",
        &[
            "listeners.toml:3:10: `0.0.0.0:99999` is not an address:port",
            "listeners.toml:7:8: duplicate listener name `a` (first used on line 2)",
            "listeners.toml:9:13: listener `a` has no upstreams",
            "listeners.toml:10:12: unknown listener protocol `sctp`",
            "listeners.toml:13:9: `soon` is not a duration",
            "listeners.toml:17:20: `0/s`",
        ],
    );
}

#[test]
fn a_whole_config_round_trips_through_check() {
    let (_dir, path) = write(
        "whole.toml",
        "[proxy]\nthreads = 1\ndrain = \"3s\"\nstate_file = \"/var/lib/tollgate/state\"\nstate_interval = \"1m\"\n\n[admin]\nlisten = \"127.0.0.1:9999\"\n\n\
         [[listener]]\nname = \"web\"\nlisten = \"[::1]:8443\"\nupstreams = [\"127.0.0.1:80\", \"[::1]:81\"]\n\
         trusted_proxies = [\"10.0.0.0/8\"]\nsend_proxy = \"v2\"\nmax_connections_per_source = 20\n\n\
         [[listener]]\nname = \"dns\"\nprotocol = \"udp\"\nlisten = \"127.0.0.1:5353\"\nupstreams = [\"127.0.0.1:53\"]\n\n\
         [[rule]]\nname = \"r\"\nlimits = [{ rate = \"5/s\" }]\naction = \"reply\"\nreply = \"busy\\r\\n\"\n",
    );
    let (ok, printed) = check(&path);
    assert!(ok, "{printed}");
    let first =
        tollgate::config::ProxyConfig::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let again = tollgate::config::ProxyConfig::parse(&printed).unwrap();
    assert_eq!(first, again, "printed:\n{printed}");
}
